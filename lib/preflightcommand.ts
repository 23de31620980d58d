// The `preflight` subcommand: reads what is installed with the operator's kubeconfig (the CCM
// workloads of every namespace, the ConfigMap, the Go install's extra RoleBinding, the Lease) and the
// machine configs given, and prints what the switch to this CCM would break or change
// (lib/preflight.ts decides). Read-only: it writes nothing to the cluster. The I/O edge.

import { homedir } from "node:os";
import { join } from "node:path";
import { readConfigFile } from "./configfile.ts";
import type { PreflightOptions } from "./flags.ts";
import { KubeClient } from "./kube.ts";
import { isNotFound, KubeError } from "./kubeapi.ts";
import { kubeconfigFromFile } from "./kubeconnection.ts";
import { configureLogging, logger } from "./log.ts";
import { APP_NAME, defaultSettings } from "./manifests.ts";
import {
  formatFindings,
  GO_IMAGE,
  type Installed,
  leaseNameOf,
  preflightFindings,
  safeToSwitch,
  type Workload,
} from "./preflight.ts";
import { planMigration, readInstalled } from "./talosmigration.ts";
import { version } from "./version.ts";

const log = logger("preflight");

interface PodTemplateOwner {
  metadata: { namespace: string; name: string };
  spec?: { template?: { spec?: { containers?: { image?: string; args?: string[]; command?: string[] }[] } } };
}

/** The kubeconfig: --kubeconfig, else $KUBECONFIG's first file, else ~/.kube/config (as kubectl). */
function kubeconfigPath(opts: PreflightOptions, env: Record<string, string | undefined>): string {
  return (
    opts.kubeconfig ?? env.KUBECONFIG?.split(":").find((p) => p !== "") ?? join(homedir(), ".kube", "config")
  );
}

/** The reason a read failed, for the `not checked` finding. */
function reason(what: string, err: unknown): string {
  if (err instanceof KubeError)
    return `${what}: ${err.status === 403 ? "forbidden" : `HTTP ${err.status}`} (${err.message})`;
  return `${what}: ${err instanceof Error ? err.message : String(err)}`;
}

/** Deployments and DaemonSets of every namespace whose container runs a CCM image. */
async function workloads(client: KubeClient): Promise<Workload[]> {
  const out: Workload[] = [];
  for (const kind of ["Deployment", "DaemonSet"] as const) {
    const list = await client.get<{ items: PodTemplateOwner[] }>(`/apis/apps/v1/${kind.toLowerCase()}s`);
    for (const item of list.items) {
      for (const c of item.spec?.template?.spec?.containers ?? []) {
        const image = c.image ?? "";
        if (
          !image.startsWith(GO_IMAGE) &&
          !image.includes(`/${APP_NAME}:`) &&
          !image.includes(`/${APP_NAME}@`)
        )
          continue;
        out.push({
          kind,
          namespace: item.metadata.namespace,
          name: item.metadata.name,
          image,
          args: c.args ?? [],
        });
      }
    }
  }
  return out;
}

/** Reads the cluster (and the machine configs) into what lib/preflight.ts decides on. */
async function readInstalledState(client: KubeClient, opts: PreflightOptions): Promise<Installed> {
  const ns = opts.namespace;
  const unreadable: string[] = [];
  const attempt = async <T>(what: string, read: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await read();
    } catch (err) {
      unreadable.push(reason(what, err));
      return undefined;
    }
  };
  const found = (await attempt("Deployments and DaemonSets", () => workloads(client))) ?? [];
  const cloudConfig = await attempt(`ConfigMap ${ns}/${APP_NAME}`, async () => {
    try {
      const cm = await client.get<{ data?: Record<string, string> }>(
        `/api/v1/namespaces/${ns}/configmaps/${APP_NAME}`,
      );
      return cm.data?.["ccm-config.yaml"] ?? null;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  });
  const extensionReader = await attempt("the Go install's RoleBinding", async () => {
    try {
      await client.get(
        `/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/system:${APP_NAME}:extension-apiserver-authentication-reader`,
      );
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  });
  const go = found.find((w) => w.image.startsWith(GO_IMAGE));
  const leaseName = go === undefined ? leaseNameOf([]) : leaseNameOf(go.args);
  const lease = await attempt(`Lease ${ns}/${leaseName}`, async () => {
    try {
      const l = await client.get<{ spec?: { holderIdentity?: string; renewTime?: string } }>(
        `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases/${leaseName}`,
      );
      return { name: leaseName, holder: l.spec?.holderIdentity ?? "", renewTime: l.spec?.renewTime };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  });
  const machineConfigs: Installed["machineConfigs"] = [];
  const settings = defaultSettings(version);
  for (const file of opts.machineConfigs) {
    try {
      machineConfigs.push({
        file,
        plan: planMigration(settings, readInstalled(readConfigFile(file, "machine config"))),
      });
    } catch (err) {
      unreadable.push(reason(`machine config ${file}`, err));
    }
  }
  return { namespace: ns, workloads: found, cloudConfig, extensionReader, lease, machineConfigs, unreadable };
}

/**
 * Runs `preflight`: prints the findings to stdout.
 * @returns 0, 1 when something would break the switch or could not be checked, 2 when the kubeconfig
 * cannot be loaded
 */
export async function runPreflight(
  opts: PreflightOptions,
  warnings: readonly string[],
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  for (const w of warnings) log.warn(w);
  const path = kubeconfigPath(opts, env);
  let client: KubeClient;
  try {
    client = new KubeClient(kubeconfigFromFile(path), {
      qps: 5,
      burst: 10,
      userAgent: `${APP_NAME}/${version} preflight`,
    });
  } catch (err) {
    process.stderr.write(
      `Cannot load kubeconfig ${path}: ${err instanceof Error ? err.message : String(err)}\n`,
    );
    return 2;
  }
  try {
    const findings = preflightFindings(await readInstalledState(client, opts), Date.now());
    process.stdout.write(formatFindings(findings));
    return safeToSwitch(findings) ? 0 : 1;
  } finally {
    client.close();
  }
}
