// What `preflight` says about a cluster before the switch from the Go CCM: from what is installed
// (read by lib/preflightcommand.ts with the operator's kubeconfig, and machine configs when given),
// what this CCM would refuse (breaks: the switch fails until it is fixed), what could not be read
// (unchecked: nothing is assumed about it), what the switch changes or leaves behind (change: an
// action to take, with the command), and what is fine. Pure.

import { ConfigError, formatIssue, parseConfig } from "./config.ts";
import { PROGRAM_NAME } from "./help.ts";
import { APP_NAME, LEASE_NAME } from "./manifests.ts";
import type { MigrationPlan } from "./talosmigration.ts";

/** The Go CCM's image. */
export const GO_IMAGE = "ghcr.io/siderolabs/talos-cloud-controller-manager";

/** A Deployment or DaemonSet, with what its CCM container runs. */
export interface Workload {
  kind: "Deployment" | "DaemonSet";
  namespace: string;
  name: string;
  image: string;
  args: string[];
}

/** What preflight read; undefined where it could not read (the reason is in `unreadable`). */
export interface Installed {
  /** The namespace the CCM is (to be) installed in. */
  namespace: string;
  /** Every Deployment and DaemonSet container whose image is a CCM (the Go one or this one). */
  workloads: Workload[];
  /** `ccm-config.yaml` of the ConfigMap; null when the ConfigMap or the key is absent. */
  cloudConfig: string | null | undefined;
  /** Whether the Go install's RoleBinding to extension-apiserver-authentication-reader exists. */
  extensionReader: boolean | undefined;
  /** The Lease, when it exists: its holder and renew time. */
  lease: { name: string; holder: string; renewTime: string | undefined } | null | undefined;
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

const GO_ALLOWS_METRICS = /^--authorization-always-allow-paths=(.*)$/;

/** The Lease name a workload's args name (`--leader-elect-resource-name`), else the default. */
export function leaseNameOf(args: readonly string[]): string {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a.startsWith("--leader-elect-resource-name=")) return a.slice(a.indexOf("=") + 1);
    if (a === "--leader-elect-resource-name" && args[i + 1] !== undefined) return args[i + 1] as string;
  }
  return LEASE_NAME;
}

function isGo(w: Workload): boolean {
  return w.image.startsWith(`${GO_IMAGE}:`) || w.image.startsWith(`${GO_IMAGE}@`) || w.image === GO_IMAGE;
}

function workloadFindings(ns: string, workloads: readonly Workload[]): Finding[] {
  const out: Finding[] = [];
  for (const w of workloads.filter(isGo)) {
    const where = `${w.kind} ${w.namespace}/${w.name}`;
    out.push({
      level: "change",
      what: `${where} runs the Go CCM (${w.image}): it holds or competes for the Lease ${leaseNameOf(w.args)} with this CCM`,
      fix:
        w.kind === "Deployment" && w.name === APP_NAME && w.namespace === ns
          ? `after this CCM's manifests are applied: kubectl -n ${w.namespace} delete deployment ${w.name}`
          : `replace it with this CCM's manifests (same names replace it) or delete it: kubectl -n ${w.namespace} delete ${w.kind.toLowerCase()} ${w.name}`,
    });
    const allow = w.args.map((a) => a.match(GO_ALLOWS_METRICS)?.[1]).find((v) => v !== undefined);
    if (allow?.split(",").includes("/metrics")) {
      out.push({
        level: "change",
        what: `${where} serves /metrics to anyone (--authorization-always-allow-paths=${allow}); this CCM's manifests ask scrapers for a token`,
        fix: 'give the scraper a token whose identity may get nonResourceURLs ["/metrics"] (the chart\'s serviceMonitor does), or keep /metrics in --authorization-always-allow-paths',
      });
    }
  }
  const ours = workloads.filter((w) => !isGo(w));
  for (const w of ours) out.push({ level: "ok", what: `${w.kind} ${w.namespace}/${w.name} runs ${w.image}` });
  if (workloads.length === 0) out.push({ level: "ok", what: "no CCM workload runs yet" });
  return out;
}

function configFindings(ns: string, text: string | null | undefined): Finding[] {
  if (text === undefined) return [];
  const where = `ConfigMap ${ns}/${APP_NAME}`;
  if (text === null)
    return [{ level: "ok", what: `${where} has no ccm-config.yaml yet: this CCM starts with none` }];
  try {
    const config = parseConfig(text);
    const warnings = config.warnings.map(formatIssue);
    return warnings.length === 0
      ? [{ level: "ok", what: `${where}: ccm-config.yaml loads without errors or warnings` }]
      : warnings.map((w) => ({
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
}

function leaseFindings(ns: string, installed: Installed, now: number): Finding[] {
  const lease = installed.lease;
  if (lease === undefined) return [];
  if (lease === null) return [{ level: "ok", what: "no Lease is held yet" }];
  const age =
    lease.renewTime === undefined ? undefined : Math.round((now - Date.parse(lease.renewTime)) / 1000);
  return [
    {
      level: "ok",
      what: `Lease ${ns}/${lease.name} is held by ${lease.holder || "nobody"}${age === undefined ? "" : `, renewed ${age} s ago`}: after the switch its holder must start with a control-plane node's name (this CCM's pods run on the host network)`,
    },
  ];
}

function machineFindings(configs: Installed["machineConfigs"]): Finding[] {
  return configs.map(({ file, plan }) =>
    plan.removed.some((r) => r.installs === "the Go CCM")
      ? {
          level: "change" as const,
          what: `machine config ${file} installs the Go CCM (${plan.removed
            .filter((r) => r.installs === "the Go CCM")
            .map((r) => r.path)
            .join(", ")}): every manifest sync would bring it back`,
          fix: `${PROGRAM_NAME} manifests --machine-config ${file} > migrate.yaml; talosctl -n <its IP> patch machineconfig --patch @migrate.yaml`,
        }
      : { level: "ok" as const, what: `machine config ${file} installs no Go CCM` },
  );
}

/**
 * The findings about an installation, breaks first, then changes, then what is fine.
 * @param now the time, to say how long ago the Lease was renewed
 */
export function preflightFindings(installed: Installed, now: number): Finding[] {
  const ns = installed.namespace;
  const all: Finding[] = [
    ...workloadFindings(ns, installed.workloads),
    ...configFindings(ns, installed.cloudConfig),
    ...(installed.extensionReader
      ? [
          {
            level: "change" as const,
            what: `RoleBinding kube-system/system:${APP_NAME}:extension-apiserver-authentication-reader of the Go install: this CCM does not read that ConfigMap (a scraper with a client certificate needs --client-ca-file)`,
            fix: `kubectl -n kube-system delete rolebinding system:${APP_NAME}:extension-apiserver-authentication-reader`,
          },
        ]
      : []),
    ...leaseFindings(ns, installed, now),
    ...machineFindings(installed.machineConfigs),
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
