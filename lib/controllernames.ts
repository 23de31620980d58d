// The controllers by name: the internal names the rest of lib/ uses, the upstream names and aliases
// `--controllers` accepts (`k8s.io/cloud-provider/names`, the Talos CCM's `pkg/names`), which run by
// default, and the resolution of a `--controllers` list. Pure.

import { FlagError } from "./pflag.ts";

/** The controllers this CCM implements, by the internal names the rest of `lib/` uses. */
export const Controllers = {
  cloudNode: "cloud-node",
  cloudNodeLifecycle: "cloud-node-lifecycle",
  nodeCsrApproval: "node-csr-approval",
  nodeIpam: "node-ipam",
} as const;

/** One of {@link Controllers}. */
export type ControllerName = (typeof Controllers)[keyof typeof Controllers];

/**
 * The `name` label of `running_managed_controllers` for each controller: upstream's where it reports
 * one (k8s.io/cloud-provider's "cloud-node" and "cloud-node-lifecycle", the Go Talos CCM's
 * "nodeipam"); node-csr-approval, which reports none upstream, by its own name.
 */
export const RUNNING_METRIC_NAMES: Readonly<Record<ControllerName, string>> = {
  "cloud-node": "cloud-node",
  "cloud-node-lifecycle": "cloud-node-lifecycle",
  "node-csr-approval": "node-csr-approval",
  "node-ipam": "nodeipam",
};

interface ControllerInfo {
  /** Canonical upstream name (`k8s.io/cloud-provider/names`, Talos CCM `pkg/names`). */
  upstream: string;
  /** Absent for upstream controllers this CCM does not implement. */
  internal?: ControllerName;
  /** Whether `*` enables it. */
  onByDefault: boolean;
  aliases: string[];
}

// `*` is the Go Talos CCM's default set: k8s.io/cloud-provider's controllers less the ones its main.go
// marks disabled-by-default (node-ipam, certificatesigningrequest-approving and
// "node-lifecycle-controller", a name no controller has, so cloud-node-lifecycle stays on although
// its docs say otherwise). Upstream `*` also enables service-lb and node-route, which the Go Talos CCM
// then skips because its cloud supports neither; so `*` includes them silently here too, and only
// naming them warns.
const CONTROLLER_TABLE: readonly ControllerInfo[] = [
  { upstream: "cloud-node-controller", internal: "cloud-node", onByDefault: true, aliases: ["cloud-node"] },
  {
    upstream: "cloud-node-lifecycle-controller",
    internal: "cloud-node-lifecycle",
    onByDefault: true,
    aliases: ["cloud-node-lifecycle"],
  },
  {
    upstream: "certificatesigningrequest-approving-controller",
    internal: "node-csr-approval",
    onByDefault: false,
    aliases: ["node-csr-approval"],
  },
  {
    upstream: "node-ipam-controller",
    internal: "node-ipam",
    onByDefault: false,
    aliases: ["nodeipam", "node-ipam"],
  },
  { upstream: "service-lb-controller", onByDefault: true, aliases: ["service"] },
  { upstream: "node-route-controller", onByDefault: true, aliases: ["route"] },
];

// The Talos CCM's docs/controllers.md tells users to pass this name, which its binary rejects.
const MISDOCUMENTED_ALIAS = "node-lifecycle-controller";

/** How one controller is named in a `--controllers` list; a row of {@link controllerCatalog}. */
export interface CatalogEntry {
  /** The internal name; absent for upstream controllers this CCM accepts and does not run. */
  name?: ControllerName;
  /** Every name that selects it: the upstream one first, then the aliases. */
  names: string[];
  /** Whether `*` enables it. */
  onByDefault: boolean;
}

/**
 * The names `--controllers` accepts, for the Helm chart, which resolves its `enabledControllers` as
 * {@link resolveControllers} does (the misdocumented upstream alias included).
 */
export function controllerCatalog(): CatalogEntry[] {
  return CONTROLLER_TABLE.map((c) => ({
    ...(c.internal === undefined ? {} : { name: c.internal }),
    names: [c.upstream, ...c.aliases, ...(c === CONTROLLER_TABLE[1] ? [MISDOCUMENTED_ALIAS] : [])],
    onByDefault: c.onByDefault,
  }));
}

function lookupController(name: string): ControllerInfo | undefined {
  if (name === MISDOCUMENTED_ALIAS) return CONTROLLER_TABLE[1];
  return CONTROLLER_TABLE.find((c) => c.upstream === name || c.aliases.includes(name));
}

/**
 * Resolves a `--controllers` list the way `k8s.io/controller-manager` does: for each controller the
 * first entry naming it decides (`name` enables, `-name` disables); with no such entry it runs only if
 * the list has `*` and it is on by default (cloud-node and cloud-node-lifecycle, as the Go CCM). Upstream canonical names, their
 * aliases (`cloud-node`, `cloud-node-lifecycle`, `service`, `route`, `nodeipam`, `node-csr-approval`)
 * and the internal names are accepted; surrounding spaces are ignored.
 * @param list the raw entries, e.g. `["cloud-node", "node-csr-approval"]`
 * @returns the enabled controllers in a fixed order, and warnings for entries that have no effect
 * @throws {FlagError} on a name no controller has
 * @example resolveControllers(["*", "nodeipam"]) // { enabled: ["cloud-node", "cloud-node-lifecycle", "node-ipam"], warnings: [] }
 */
export function resolveControllers(list: readonly string[]): {
  enabled: ControllerName[];
  warnings: string[];
} {
  const warnings: string[] = [];
  const entries = list.map((raw) => parseEntry(raw, warnings));
  const enabled: ControllerName[] = [];
  for (const info of CONTROLLER_TABLE) {
    if (info.internal !== undefined && isEnabled(info, entries)) enabled.push(info.internal);
  }
  if (enabled.length === 0) {
    warnings.push(
      `--controllers=${list.join(",")} enables no controller; only the serving endpoints will run`,
    );
  }
  return { enabled, warnings };
}

/** One `--controllers` entry: `*`, or a controller enabled or (with `-`) disabled. */
interface Entry {
  info: ControllerInfo | "*";
  negated: boolean;
}

/** Reads one entry, adding a warning when it has no effect or names the misdocumented alias. */
function parseEntry(raw: string, warnings: string[]): Entry {
  const entry = raw.trim();
  if (entry === "*") return { info: "*", negated: false };
  const negated = entry.startsWith("-");
  const name = negated ? entry.slice(1) : entry;
  const info = lookupController(name);
  if (info === undefined) {
    const known = CONTROLLER_TABLE.flatMap((c) => [c.upstream, ...c.aliases]);
    throw new FlagError(
      `Cannot resolve --controllers: "${name}" is not in the list of known controllers (known: *, ${known.join(", ")})`,
    );
  }
  if (name === MISDOCUMENTED_ALIAS) {
    warnings.push(
      `--controllers: "${name}" is not a controller name upstream; treating it as "cloud-node-lifecycle"`,
    );
  }
  if (info.internal === undefined && !negated) {
    warnings.push(`--controllers: "${name}" (${info.upstream}) is not implemented by this CCM; ignoring it`);
  }
  return { info, negated };
}

/** The first entry naming the controller decides; without one, it runs if the list has `*` and it is on by default. */
function isEnabled(info: ControllerInfo, entries: readonly Entry[]): boolean {
  let star = false;
  for (const e of entries) {
    if (e.info === "*") star = true;
    else if (e.info === info) return !e.negated;
  }
  return star && info.onByDefault;
}
