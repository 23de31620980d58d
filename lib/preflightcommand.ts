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
import { APP_NAME, defaultSettings, LEASE_NAME } from "./manifests.ts";
import {
  formatFindings,
  type Installed,
  isCcmImage,
  leaseOf,
  preflightFindings,
  safeToSwitch,
  type Workload,
} from "./preflight.ts";
import { isGoImage, planMigration, readMachineConfig } from "./talosmigration.ts";
import { version } from "./version.ts";

const log = logger("preflight");

interface PodTemplateOwner {
  metadata: { namespace: string; name: string };
  spec?: {
    template?: {
      spec?: {
        containers?: { image?: string; args?: string[] }[];
        volumes?: { configMap?: { name?: string } }[];
      };
    };
  };
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
      const pod = item.spec?.template?.spec;
      const configMaps = (pod?.volumes ?? []).flatMap((v) => (v.configMap?.name ? [v.configMap.name] : []));
      for (const c of pod?.containers ?? []) {
        if (!isCcmImage(c.image ?? "")) continue;
        const { namespace, name } = item.metadata;
        out.push({ kind, namespace, name, image: c.image ?? "", args: c.args ?? [], configMaps });
      }
    }
  }
  return out;
}

/** Reads an object, null when it does not exist. */
async function getOrNull<T>(client: KubeClient, path: string): Promise<T | null> {
  try {
    return await client.get<T>(path);
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}

/** This CCM's ConfigMap, and every one a Go workload mounts (the Go chart names it after the release). */
function configMapsToCheck(ns: string, go: readonly Workload[]): { namespace: string; name: string }[] {
  const out = new Map([[`${ns}/${APP_NAME}`, { namespace: ns, name: APP_NAME }]]);
  for (const w of go) {
    for (const name of w.configMaps) out.set(`${w.namespace}/${name}`, { namespace: w.namespace, name });
  }
  return [...out.values()];
}

/**
 * Reads the cluster (and the machine configs) into what lib/preflight.ts decides on: the ConfigMaps
 * and the Lease of the Go CCM where its workload names them (its volumes, its election flags), and
 * this CCM's in --namespace.
 */
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
  const found = await attempt("Deployments and DaemonSets", () => workloads(client));
  const go = (found ?? []).filter((w) => isGoImage(w.image));
  const cloudConfigs: Installed["cloudConfigs"] = [];
  for (const { namespace, name } of configMapsToCheck(ns, go)) {
    const cm = await attempt(`ConfigMap ${namespace}/${name}`, () =>
      getOrNull<{ data?: Record<string, string> }>(
        client,
        `/api/v1/namespaces/${namespace}/configmaps/${name}`,
      ),
    );
    if (cm !== undefined) cloudConfigs.push({ namespace, name, text: cm?.data?.["ccm-config.yaml"] ?? null });
  }
  const extensionReader = await attempt(
    "the Go install's RoleBinding",
    async () =>
      (await getOrNull(
        client,
        `/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/system:${APP_NAME}:extension-apiserver-authentication-reader`,
      )) !== null,
  );
  const where = go[0] === undefined ? { namespace: ns, name: LEASE_NAME } : leaseOf(go[0].args);
  const lease = await attempt(`Lease ${where.namespace}/${where.name}`, async () => {
    const l = await getOrNull<{ spec?: { holderIdentity?: string; renewTime?: string } }>(
      client,
      `/apis/coordination.k8s.io/v1/namespaces/${where.namespace}/leases/${where.name}`,
    );
    return l === null
      ? null
      : { ...where, holder: l.spec?.holderIdentity ?? "", renewTime: l.spec?.renewTime };
  });
  const machineConfigs: Installed["machineConfigs"] = [];
  const settings = defaultSettings(version);
  for (const file of opts.machineConfigs) {
    try {
      const plan = planMigration(settings, readMachineConfig(readConfigFile(file, "machine config")));
      machineConfigs.push({ file, plan });
    } catch (err) {
      unreadable.push(reason(`machine config ${file}`, err));
    }
  }
  return {
    namespace: ns,
    workloads: found,
    cloudConfigs,
    extensionReader,
    lease,
    machineConfigs,
    unreadable,
  };
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
