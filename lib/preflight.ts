// What `preflight` says about a cluster before the switch from the Go CCM: from what is installed
// (read by lib/preflightcommand.ts with the operator's kubeconfig, and machine configs when given),
// what this CCM would refuse (breaks: the switch fails until it is fixed), what could not be read or
// told apart (unchecked: nothing is assumed about it), what the switch changes or leaves behind
// (change: an action to take, with the command), and what is fine. Pure.

import { ConfigError, formatIssue, parseConfig } from "./config.ts";
import { PROGRAM_NAME } from "./help.ts";
import { APP_NAME, LEASE_NAME } from "./manifests.ts";
import { isGoImage, type MigrationPlan } from "./talosmigration.ts";

/** This project's image path, after any registry (ghcr.io or a mirror of it). */
const OWN_IMAGE = /(^|\/)talos-ccm\/talos-cloud-controller-manager([:@]|$)/;

/** Whether an image is a CCM this check looks at: the Go CCM's, this project's, or any image so named. */
export function isCcmImage(image: string): boolean {
  return /(^|\/)talos-cloud-controller-manager([:@]|$)/.test(image);
}

/** A Deployment or DaemonSet, with what its CCM container runs. */
export interface Workload {
  kind: "Deployment" | "DaemonSet";
  namespace: string;
  name: string;
  image: string;
  args: string[];
  /** The ConfigMaps its pods mount. */
  configMaps: string[];
}

/** A Lease: where it is, its holder and when it was renewed. */
export interface LeaseState {
  namespace: string;
  name: string;
  holder: string;
  renewTime: string | undefined;
}

/** What preflight read; undefined where it could not read (the reason is in `unreadable`). */
export interface Installed {
  /** The namespace this CCM is to be installed in (`--namespace`). */
  namespace: string;
  /** Every Deployment and DaemonSet container whose image is a CCM. */
  workloads: Workload[] | undefined;
  /** `ccm-config.yaml` of each ConfigMap the CCM workloads mount (else this CCM's); null: no such key. */
  cloudConfigs: { namespace: string; name: string; text: string | null }[];
  /** Whether the Go install's RoleBinding to extension-apiserver-authentication-reader exists. */
  extensionReader: boolean | undefined;
  /** The Lease the Go CCM elects on (else this CCM's), when it exists. */
  lease: LeaseState | null | undefined;
  /** Machine configs given, with the migration each needs. */
  machineConfigs: { file: string; plan: MigrationPlan }[];
  /** What could not be read, with why (forbidden, not found, …). */
  unreadable: string[];
}

/** How much a finding matters: the switch fails, not checked, an action to take, or fine. */
export type Level = "breaks" | "unchecked" | "change" | "ok";

/** One finding: its level, what was found, and what to do. */
export interface Finding {
  level: Level;
  what: string;
  fix?: string;
}

/** The value of a flag in args, in either form (`--f=v`, `--f v`), the last one winning; else undefined. */
export function flagValue(args: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a.startsWith(`--${flag}=`)) value = a.slice(flag.length + 3);
    else if (a === `--${flag}` && args[i + 1] !== undefined) value = args[++i] as string;
  }
  return value;
}

/** The Lease a CCM's args elect on: `--leader-elect-resource-namespace` and `-name`, cloud-provider's defaults. */
export function leaseOf(args: readonly string[]): { namespace: string; name: string } {
  return {
    namespace: flagValue(args, "leader-elect-resource-namespace") ?? "kube-system",
    name: flagValue(args, "leader-elect-resource-name") ?? LEASE_NAME,
  };
}

/** The `manifests --machine-config` command for a file, keeping the operator's config and namespace. */
function migrationCommand(file: string, namespace: string): string {
  const ns = namespace === "kube-system" ? "" : ` --namespace ${namespace}`;
  return `${PROGRAM_NAME} manifests --machine-config ${file} --cloud-config ccm-config.yaml${ns} > migrate.yaml; talosctl -n <its IP> patch machineconfig --patch @migrate.yaml`;
}

function goWorkloadFindings(ns: string, w: Workload): Finding[] {
  const where = `${w.kind} ${w.namespace}/${w.name}`;
  const theirs = leaseOf(w.args);
  const same = theirs.namespace === ns && theirs.name === LEASE_NAME;
  const out: Finding[] = [
    {
      level: "change",
      what: same
        ? `${where} runs the Go CCM (${w.image}): it holds or competes for the Lease ${ns}/${LEASE_NAME} with this CCM`
        : `${where} runs the Go CCM (${w.image}) on the Lease ${theirs.namespace}/${theirs.name}, this CCM on ${ns}/${LEASE_NAME}: both would lead at once`,
      fix:
        w.kind === "Deployment" && w.name === APP_NAME && w.namespace === ns
          ? `after this CCM's manifests are applied: kubectl -n ${w.namespace} delete deployment ${w.name}`
          : `replace it with this CCM's manifests (the same names replace it) or delete it: kubectl -n ${w.namespace} delete ${w.kind.toLowerCase()} ${w.name}`,
    },
  ];
  const allowed = flagValue(w.args, "authorization-always-allow-paths");
  if (allowed?.split(",").includes("/metrics")) {
    out.push({
      level: "change",
      what: `${where} serves /metrics to anyone (--authorization-always-allow-paths=${allowed}); this CCM's manifests ask scrapers for a token`,
      fix: 'give the scraper a token whose identity may get nonResourceURLs ["/metrics"] (the chart\'s serviceMonitor does), or keep /metrics in --authorization-always-allow-paths',
    });
  }
  return out;
}

function workloadFindings(ns: string, workloads: readonly Workload[] | undefined): Finding[] {
  if (workloads === undefined) return [];
  if (workloads.length === 0) return [{ level: "ok", what: "no CCM workload runs yet" }];
  return workloads.flatMap((w): Finding[] => {
    if (isGoImage(w.image)) return goWorkloadFindings(ns, w);
    const what = `${w.kind} ${w.namespace}/${w.name} runs ${w.image}`;
    if (OWN_IMAGE.test(w.image)) return [{ level: "ok", what }];
    return [
      {
        level: "unchecked",
        what: `${what}: neither the Go CCM's image nor this project's (a mirror?)`,
        fix: "if it runs the Go CCM, it competes for the Lease: replace it with this CCM's manifests or delete it",
      },
    ];
  });
}

function configFindings(configs: Installed["cloudConfigs"]): Finding[] {
  return configs.flatMap(({ namespace, name, text }): Finding[] => {
    const where = `ConfigMap ${namespace}/${name}`;
    if (text === null)
      return [{ level: "ok", what: `${where} has no ccm-config.yaml: this CCM starts with none` }];
    try {
      const warnings = parseConfig(text).warnings.map(formatIssue);
      if (warnings.length === 0)
        return [{ level: "ok", what: `${where}: ccm-config.yaml loads without errors or warnings` }];
      return warnings.map((w) => ({
        level: "change" as const,
        what: `${where}: ccm-config.yaml: ${w}`,
        fix: `${PROGRAM_NAME} validate --cloud-config ccm-config.yaml says what the entry does here`,
      }));
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return err.issues.map((issue) => ({
        level: "breaks" as const,
        what: `${where}: ccm-config.yaml: ${formatIssue(issue)}: this CCM refuses the file at start-up`,
        fix: `fix it first (${PROGRAM_NAME} validate --cloud-config ccm-config.yaml)`,
      }));
    }
  });
}

function leaseFindings(lease: Installed["lease"], now: number): Finding[] {
  if (lease === undefined) return [];
  if (lease === null) return [{ level: "ok", what: "no Lease is held yet" }];
  const age =
    lease.renewTime === undefined ? undefined : Math.round((now - Date.parse(lease.renewTime)) / 1000);
  return [
    {
      level: "ok",
      what: `Lease ${lease.namespace}/${lease.name} is held by ${lease.holder || "nobody"}${age === undefined ? "" : `, renewed ${age} s ago`}: after the switch its holder must start with a control-plane node's name (this CCM's pods run on the host network)`,
    },
  ];
}

function machineFindings(configs: Installed["machineConfigs"], ns: string): Finding[] {
  return configs.map(({ file, plan }): Finding => {
    const go = plan.removed.filter((r) => r.installs === "the Go CCM");
    if (go.length === 0) return { level: "ok", what: `machine config ${file} installs no Go CCM` };
    return {
      level: "change",
      what: `machine config ${file} installs the Go CCM (${go.map((r) => r.path).join(", ")}): every manifest sync would bring it back`,
      fix: migrationCommand(file, ns),
    };
  });
}

/**
 * The findings about an installation, breaks first, then what was not checked, then changes, then
 * what is fine.
 * @param now the time, to say how long ago the Lease was renewed
 */
export function preflightFindings(installed: Installed, now: number): Finding[] {
  const ns = installed.namespace;
  const all: Finding[] = [
    ...workloadFindings(ns, installed.workloads),
    ...configFindings(installed.cloudConfigs),
    ...(installed.extensionReader
      ? [
          {
            level: "change" as const,
            what: `RoleBinding kube-system/system:${APP_NAME}:extension-apiserver-authentication-reader of the Go install: this CCM does not read that ConfigMap (a scraper with a client certificate needs --client-ca-file)`,
            fix: `kubectl -n kube-system delete rolebinding system:${APP_NAME}:extension-apiserver-authentication-reader`,
          },
        ]
      : []),
    ...leaseFindings(installed.lease, now),
    ...machineFindings(installed.machineConfigs, ns),
    ...installed.unreadable.map((u) => ({ level: "unchecked" as const, what: `not checked: ${u}` })),
  ];
  const rank: Record<Level, number> = { breaks: 0, unchecked: 1, change: 2, ok: 3 };
  return all.sort((a, b) => rank[a.level] - rank[b.level]);
}

/** The findings as text: one line each, `BREAKS`, `UNCHECKED`, `CHANGE` or `OK`, with the fix indented below. */
export function formatFindings(findings: readonly Finding[]): string {
  return findings
    .map(
      (f) =>
        `${f.level.toUpperCase().padEnd(9)} ${f.what}${f.fix === undefined ? "" : `\n          fix: ${f.fix}`}\n`,
    )
    .join("");
}

/** Whether the switch is safe to start: nothing breaks it and everything was checked. */
export function safeToSwitch(findings: readonly Finding[]): boolean {
  return findings.every((f) => f.level === "change" || f.level === "ok");
}
