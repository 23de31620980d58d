// The command line. Owns the flag set users know from the Go siderolabs/talos-cloud-controller-manager
// (which embeds `k8s.io/cloud-provider`'s `NewCloudControllerManagerCommand`): same spellings, value
// kinds, defaults and pflag syntax, so an existing DaemonSet's argument list starts this binary
// unchanged. Framework flags this CCM has no use for are accepted with a warning instead of an error.
// Also owns the `validate` and `manifests` subcommands' flags, `--controllers` resolution and the help
// text. Pure: no I/O, no process access; the environment comes in as an argument.

import { isIPv4, isIPv6 } from "node:net";
import { type NodeIpamFlags, resolveNodeIpamConfig } from "./cidr.ts";
import type { LogFormat } from "./log.ts";
import { editDistance } from "./suggest.ts";

/** Name the help text and error messages use for this program. */
export const PROGRAM_NAME = "talos-cloud-controller-manager";

/**
 * A command line this program cannot run with. The process should print the message and exit with
 * {@link FlagError.exitCode} (2, the usage-error convention).
 */
export class FlagError extends Error {
  override readonly name = "FlagError";
  readonly code = "EFLAG";
  readonly exitCode = 2;
}

function fail(detail: string): never {
  throw new FlagError(`Cannot parse the command line: ${detail}`);
}

// ---------------------------------------------------------------------------------------------------
// Controllers

/** The controllers this CCM implements, by the internal names the rest of `lib/` uses. */
export const Controllers = {
  cloudNode: "cloud-node",
  cloudNodeLifecycle: "cloud-node-lifecycle",
  nodeCsrApproval: "node-csr-approval",
  nodeIpam: "node-ipam",
} as const;

/** One of {@link Controllers}. */
export type ControllerName = (typeof Controllers)[keyof typeof Controllers];

interface ControllerInfo {
  /** Canonical upstream name (`k8s.io/cloud-provider/names`, Talos CCM `pkg/names`). */
  upstream: string;
  /** Absent for upstream controllers this CCM does not implement. */
  internal?: ControllerName;
  /** Whether `*` enables it. */
  onByDefault: boolean;
  aliases: string[];
}

// Upstream `*` also enables service-lb and node-route, which the Go Talos CCM then skips because its
// cloud supports neither; so `*` includes them silently here too, and only naming them warns.
// The Go Talos CCM marks "node-lifecycle-controller" disabled-by-default, a name no controller has, so
// there `*` actually starts cloud-node-lifecycle; here it is off by default as documented upstream,
// because this lifecycle controller deletes dead nodes rather than doing nothing outside GCP.
const CONTROLLER_TABLE: readonly ControllerInfo[] = [
  { upstream: "cloud-node-controller", internal: "cloud-node", onByDefault: true, aliases: ["cloud-node"] },
  {
    upstream: "cloud-node-lifecycle-controller",
    internal: "cloud-node-lifecycle",
    onByDefault: false,
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

function lookupController(name: string): ControllerInfo | undefined {
  if (name === MISDOCUMENTED_ALIAS) return CONTROLLER_TABLE[1];
  return CONTROLLER_TABLE.find((c) => c.upstream === name || c.aliases.includes(name));
}

/**
 * Resolves a `--controllers` list the way `k8s.io/controller-manager` does: for each controller the
 * first entry naming it decides (`name` enables, `-name` disables); with no such entry it runs only if
 * the list has `*` and it is on by default (here: cloud-node only). Upstream canonical names, their
 * aliases (`cloud-node`, `cloud-node-lifecycle`, `service`, `route`, `nodeipam`, `node-csr-approval`)
 * and the internal names are accepted; surrounding spaces are ignored.
 * @param list the raw entries, e.g. `["cloud-node", "node-csr-approval"]`
 * @returns the enabled controllers in a fixed order, and warnings for entries that have no effect
 * @throws {FlagError} on a name no controller has
 * @example resolveControllers(["*", "nodeipam"]) // { enabled: ["cloud-node", "node-ipam"], warnings: [] }
 */
export function resolveControllers(list: readonly string[]): {
  enabled: ControllerName[];
  warnings: string[];
} {
  const warnings: string[] = [];
  const entries: { info: ControllerInfo | "*"; negated: boolean }[] = [];
  for (const raw of list) {
    const entry = raw.trim();
    if (entry === "*") {
      entries.push({ info: "*", negated: false });
      continue;
    }
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
      warnings.push(
        `--controllers: "${name}" (${info.upstream}) is not implemented by this CCM; ignoring it`,
      );
    }
    entries.push({ info, negated });
  }
  const enabled: ControllerName[] = [];
  for (const info of CONTROLLER_TABLE) {
    if (info.internal === undefined) continue;
    let decided: boolean | undefined;
    let star = false;
    for (const e of entries) {
      if (e.info === "*") star = true;
      else if (e.info === info) {
        decided = !e.negated;
        break;
      }
    }
    if (decided ?? (star && info.onByDefault)) enabled.push(info.internal);
  }
  if (enabled.length === 0) {
    warnings.push(
      `--controllers=${list.join(",")} enables no controller; only the serving endpoints will run`,
    );
  }
  return { enabled, warnings };
}

// ---------------------------------------------------------------------------------------------------
// Go value syntax

const GO_BOOLS: Readonly<Record<string, boolean>> = {
  "1": true,
  t: true,
  T: true,
  TRUE: true,
  true: true,
  True: true,
  "0": false,
  f: false,
  F: false,
  FALSE: false,
  false: false,
  False: false,
};

/** Go `strconv.ParseBool`, or undefined when `s` is not one of its spellings. */
function parseGoBool(s: string): boolean | undefined {
  return Object.hasOwn(GO_BOOLS, s) ? GO_BOOLS[s] : undefined;
}

// Milliseconds per unit, as Go's time.ParseDuration spells them (µ is U+00B5, μ is U+03BC). Summing
// milliseconds rather than nanoseconds keeps whole-millisecond values exact.
const DURATION_UNITS: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  "\u00b5s": 1e-3,
  "\u03bcs": 1e-3,
  ms: 1,
  s: 1e3,
  m: 60e3,
  h: 3600e3,
};
// Go durations are int64 nanoseconds.
const MAX_DURATION_MS = 2 ** 63 / 1e6;

/**
 * Parses a Go duration (`time.ParseDuration`): a sign, then one or more decimal numbers each with a
 * unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `15s`, `1m30s`, `1.5h`, `-100ms`; `0` alone is
 * allowed.
 * @returns milliseconds (fractional below 1 ms), or undefined when `s` is not a Go duration
 */
export function parseGoDuration(s: string): number | undefined {
  let rest = s;
  let sign = 1;
  if (rest.startsWith("-") || rest.startsWith("+")) {
    if (rest[0] === "-") sign = -1;
    rest = rest.slice(1);
  }
  if (rest === "0") return 0;
  if (rest === "") return undefined;
  let totalMs = 0;
  while (rest !== "") {
    const m = /^(\d*)(?:\.(\d*))?/.exec(rest);
    const whole = m?.[1] ?? "";
    const frac = m?.[2];
    if (whole === "" && (frac === undefined || frac === "")) return undefined;
    rest = rest.slice(m?.[0].length ?? 0);
    const unitEnd = rest.search(/[\d.]/);
    const unit = unitEnd === -1 ? rest : rest.slice(0, unitEnd);
    const perUnit = DURATION_UNITS[unit];
    if (perUnit === undefined) return undefined;
    rest = rest.slice(unit.length);
    totalMs += Number(`${whole === "" ? "0" : whole}.${frac ?? ""}0`) * perUnit;
    if (totalMs > MAX_DURATION_MS) return undefined;
  }
  return sign * totalMs;
}

// Go's underscoreOK: with a base prefix or none, "_" may only sit between digits or after the prefix.
function underscoresOk(s: string): boolean {
  let saw = "^";
  let i = 0;
  const hex = /^0[xX]/.test(s);
  if (/^0[xXbBoO]/.test(s)) {
    i = 2;
    saw = "0";
  }
  for (; i < s.length; i++) {
    const c = s.charAt(i);
    if (/\d/.test(c) || (hex && /[0-9a-fA-F]/.test(c))) saw = "0";
    else if (c === "_") {
      if (saw !== "0") return false;
      saw = "_";
    } else {
      if (saw === "_") return false;
      saw = "!";
    }
  }
  return saw !== "_";
}

/**
 * Parses an integer as Go's `strconv.ParseInt(s, 0, bits)` / `ParseUint` do for pflag int flags:
 * optional sign (signed only), `0x`/`0b`/`0o`/leading-`0` prefixes, `_` digit separators.
 * @returns the value, or undefined when malformed or out of range
 */
function parseGoInt(s: string, bits: 32 | 64, unsigned: boolean): number | undefined {
  let rest = s;
  let negative = false;
  if (!unsigned && (rest.startsWith("-") || rest.startsWith("+"))) {
    negative = rest[0] === "-";
    rest = rest.slice(1);
  }
  if (rest === "" || !underscoresOk(rest)) return undefined;
  let base = 10;
  let digits = rest;
  if (/^0[xX]/.test(rest)) [base, digits] = [16, rest.slice(2)];
  else if (/^0[bB]/.test(rest)) [base, digits] = [2, rest.slice(2)];
  else if (/^0[oO]/.test(rest)) [base, digits] = [8, rest.slice(2)];
  else if (rest.length > 1 && rest.startsWith("0")) [base, digits] = [8, rest.slice(1)];
  digits = digits.replaceAll("_", "");
  const alphabet = "0123456789abcdef".slice(0, base);
  if (digits === "" || ![...digits.toLowerCase()].every((c) => alphabet.includes(c))) return undefined;
  let value = 0n;
  for (const c of digits.toLowerCase()) value = value * BigInt(base) + BigInt(alphabet.indexOf(c));
  if (negative) value = -value;
  const limit = unsigned ? 1n << BigInt(bits) : 1n << BigInt(bits - 1);
  const min = unsigned ? 0n : -limit;
  if (value < min || value >= limit) return undefined;
  return Number(value);
}

/**
 * Parses a Kubernetes resource quantity (`resource.ParseQuantity`): a decimal number with an optional
 * binary suffix (`Ki`…`Ei`), decimal SI suffix (`n`, `u`, `m`, `k`, `M`…`E`) or exponent (`e3`).
 * @returns the value, or undefined when malformed
 * @example parseQuantity("2Mi") // 2097152
 */
function parseQuantity(s: string): number | undefined {
  const m =
    /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?\d+)|(n|u|m|k|M|G|T|P|E))?$/.exec(s);
  if (m === null) return undefined;
  const n = Number(m[1]);
  if (m[2] !== undefined) return n * 1024 ** ("KMGTPE".indexOf(m[2].charAt(0)) + 1);
  if (m[3] !== undefined) return n * 10 ** Number(m[3]);
  if (m[4] !== undefined) {
    const exp: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
    return n * 10 ** (exp[m[4]] ?? 0);
  }
  return n;
}

/**
 * Splits one comma-separated record the way pflag's string-slice flags do (Go `encoding/csv`): `""`
 * is an empty list, double quotes protect commas, `""` inside quotes is a quote.
 * @returns the fields, or undefined when quoting is malformed or the value spans lines
 */
function parseCsvRecord(s: string): string[] | undefined {
  if (s === "") return [];
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    let field = "";
    if (s[i] === '"') {
      i++;
      for (;;) {
        const q = s.indexOf('"', i);
        if (q === -1) return undefined;
        field += s.slice(i, q);
        i = q + 1;
        if (s[i] !== '"') break;
        field += '"';
        i++;
      }
      if (i < s.length && s[i] !== ",") return undefined;
    } else {
      const comma = s.indexOf(",", i);
      field = comma === -1 ? s.slice(i) : s.slice(i, comma);
      if (field.includes('"') || /[\r\n]/.test(field)) return undefined;
      i += field.length;
    }
    fields.push(field);
    if (i >= s.length) return fields;
    i++; // the comma
  }
}

// ---------------------------------------------------------------------------------------------------
// The flag table

type Kind =
  | "bool"
  | "string"
  | "int"
  | "int32"
  | "uint64"
  | "float32"
  | "duration"
  | "level"
  | "ip"
  | "stringSlice"
  | "mapStringBool"
  | "quantity"
  | "certKey"
  | "version";

type Group =
  | "Generic"
  | "Leader election"
  | "Secure serving"
  | "Node controller"
  | "Node IPAM"
  | "Logging"
  | "Subcommand";

interface FlagSpec {
  name: string;
  kind: Kind;
  group: Group;
  /** One-line description for the help text. */
  help: string;
  shorthand?: string;
  /** The default as the help text shows it. */
  shownDefault?: string;
  /** Set for flags accepted only for compatibility: why they have no effect. */
  ignored?: string;
  /** An ignored flag stays silent when set to exactly this value. */
  quietWhen?: string;
}

const TYPE_NAMES: Readonly<Record<Kind, string>> = {
  bool: "",
  string: "string",
  int: "int",
  int32: "int32",
  uint64: "uint",
  float32: "float32",
  duration: "duration",
  level: "Level",
  ip: "ip",
  stringSlice: "strings",
  mapStringBool: "mapStringBool",
  quantity: "quantity",
  certKey: "namedCertKey",
  version: "version[=true]",
};

const EXPECTED: Readonly<Record<Kind, string>> = {
  bool: "true or false",
  string: "a string",
  int: "an integer",
  int32: "a 32-bit integer",
  uint64: "a non-negative integer",
  float32: "a finite number",
  duration: "a Go duration such as 15s, 1m30s or 100ms",
  level: "a non-negative integer",
  ip: "an IP address",
  stringSlice: "comma-separated values (double-quote a value that contains a comma)",
  mapStringBool: "comma-separated key=true|false pairs",
  quantity: "a quantity such as 512, 1K or 2Mi",
  certKey: 'a "cert-file,key-file" pair, optionally followed by ":domain,..."',
  version: "true, false or raw",
};

/** One flag as a table row: name, kind, default as `--help` shows it ("" for none), description. */
type Row = readonly [name: string, kind: Kind, shownDefault: string, help: string];

// pflag shorthands: only these three exist upstream and in the subcommands.
const SHORTHANDS: Readonly<Record<string, string>> = { help: "h", v: "v", output: "o" };

function group(name: Group, list: readonly Row[]): FlagSpec[] {
  return list.map(([flagName, kind, shownDefault, help]) => {
    const shorthand = SHORTHANDS[flagName];
    return {
      name: flagName,
      kind,
      group: name,
      help,
      ...(shownDefault === "" ? {} : { shownDefault }),
      ...(shorthand === undefined ? {} : { shorthand }),
    };
  });
}

/** Flags accepted only for compatibility, all for the same reason. */
function accepted(ignored: string, list: readonly (readonly [name: string, kind: Kind])[]): FlagSpec[] {
  return list.map(([name, kind]) => ({ name, kind, group: "Generic", help: "", ignored }));
}

/** Flags every command takes. */
const COMMON_FLAGS: readonly FlagSpec[] = [
  ...group("Generic", [
    ["help", "bool", "", "Show this help."],
    ["version", "version", "false", "Print the version and exit; --version=raw prints details."],
  ]),
  ...group("Logging", [
    ["v", "level", "0", "Log verbosity: 2 is the reference DaemonSet's, 4 and up is debug."],
    ["logging-format", "string", "text", "Log format: text (klog) or json."],
  ]),
];

const CONTROLLERS_HELP =
  "Controllers to run: '*' is all on-by-default ones (cloud-node), 'foo' enables foo, '-foo' disables it. " +
  "Known: cloud-node, cloud-node-lifecycle, node-csr-approval, nodeipam; route and service are not implemented.";

const WHY_WEBHOOK = "cloud-provider admission webhooks are not implemented";
const WHY_KLOG = "klog flag removed upstream in Kubernetes 1.26; logs always go to stderr";
const WHY_LOG_STREAM = "log lines are written unbuffered to stderr";
const WHY_TLS = "TLS tuning beyond --tls-min-version is not implemented";
const WHY_REQUEST_HEADER = "front-proxy (request header) authentication is not implemented";
const WHY_ROUTES = "the route controller is not implemented";
const WHY_PPROF = "no /debug/pprof endpoints are served";
const WHY_MIGRATION = "leader migration is not implemented";
const WHY_OWNERSHIP = "node ownership by platform is not implemented";
const WHY_SHARING = "the port is bound exclusively";

// Names, kinds and defaults from k8s.io/cloud-provider options, k8s.io/controller-manager options,
// k8s.io/apiserver secure serving and delegating authn/authz options, k8s.io/component-base logs and
// leader election, and the Talos CCM's node IPAM options.
const RUN_FLAGS: readonly FlagSpec[] = [
  ...COMMON_FLAGS,
  ...group("Generic", [
    ["kubeconfig", "string", "", "Path to a kubeconfig file; empty means the in-cluster service account."],
    ["master", "string", "", "Kubernetes API server address; overrides the kubeconfig's."],
    ["cloud-provider", "string", "talos", 'Cloud provider name; only "talos" is accepted.'],
    ["cloud-config", "string", "", "Path to the Talos CCM configuration file (ccm-config.yaml)."],
    ["controllers", "stringSlice", "[*]", CONTROLLERS_HELP],
    ["cluster-name", "string", "kubernetes", "The instance prefix for the cluster; not applied yet."],
    ["use-service-account-credentials", "bool", "", "Give each controller its own service account token."],
    ["kube-api-qps", "float32", "20", "Sustained requests per second to the API server."],
    ["kube-api-burst", "int32", "30", "Request burst to the API server."],
    [
      "min-resync-period",
      "duration",
      "12h0m0s",
      "Not applied yet: informers re-list only after watch errors.",
    ],
  ]),
  ...group("Leader election", [
    ["leader-elect", "bool", "true", "Run the controllers only while holding the leader lease."],
    ["leader-elect-lease-duration", "duration", "15s", "How long a lease lasts without renewal."],
    ["leader-elect-renew-deadline", "duration", "10s", "How long the leader keeps trying to renew."],
    ["leader-elect-retry-period", "duration", "2s", "Wait between acquisition or renewal attempts."],
    ["leader-elect-resource-lock", "string", "leases", 'Lock object type; only "leases" is supported.'],
    ["leader-elect-resource-name", "string", "cloud-controller-manager", "Name of the Lease object."],
    ["leader-elect-resource-namespace", "string", "kube-system", "Namespace of the Lease object."],
  ]),
  ...group("Secure serving", [
    ["bind-address", "ip", "0.0.0.0", "Address to serve HTTPS on (0.0.0.0 or :: for all)."],
    ["secure-port", "int", "10258", "HTTPS port for health and metrics endpoints; 0 disables."],
    ["tls-cert-file", "string", "", "Serving certificate (PEM, chain after the leaf); else self-signed."],
    ["tls-private-key-file", "string", "", "Private key for --tls-cert-file."],
    [
      "tls-min-version",
      "string",
      "",
      "Minimum TLS version of the secure port (VersionTLS10 … VersionTLS13); never below TLS 1.2, the runtime's floor.",
    ],
    ["client-ca-file", "string", "", "Client certificate CAs; not applied yet (bearer tokens only)."],
    [
      "authentication-kubeconfig",
      "string",
      "",
      "Kubeconfig for TokenReviews (default: the main credentials, on a client of its own).",
    ],
    ["authentication-skip-lookup", "bool", "", "Do not read the client CA from the cluster."],
    ["authentication-tolerate-lookup-failure", "bool", "", "Serve even if that lookup fails."],
    ["authentication-token-webhook-cache-ttl", "duration", "10s", "How long TokenReview answers are cached."],
    [
      "authorization-kubeconfig",
      "string",
      "",
      "Kubeconfig for SubjectAccessReviews (default: the main credentials, on a client of its own).",
    ],
    ["authorization-always-allow-paths", "stringSlice", "[/healthz,/readyz,/livez]", "Paths with no authz."],
    [
      "authorization-webhook-cache-authorized-ttl",
      "duration",
      "10s",
      "How long allowed SubjectAccessReview answers are cached.",
    ],
    [
      "authorization-webhook-cache-unauthorized-ttl",
      "duration",
      "10s",
      "How long denied SubjectAccessReview answers are cached.",
    ],
  ]),
  ...group("Node controller", [
    ["node-status-update-frequency", "duration", "5m0s", "Full re-sync period of every node's addresses."],
    ["node-monitor-period", "duration", "5s", "How often the lifecycle controller checks nodes."],
    ["concurrent-node-syncs", "int32", "4", "Nodes initialized or updated in parallel."],
    ["concurrent-node-lifecycle-syncs", "int32", "1", "Lifecycle checks run in parallel."],
  ]),
  ...group("Node IPAM", [
    ["allocate-node-cidrs", "bool", "", "Allocate pod CIDRs to nodes (with the node-ipam controller)."],
    ["cidr-allocator-type", "string", "RangeAllocator", "RangeAllocator or CloudAllocator."],
    ["cluster-cidr", "string", "", "Pod CIDRs, comma-separated (one per family); default from Talos."],
    ["service-cluster-ip-range", "string", "", "Service CIDRs, comma-separated; default from Talos."],
    ["node-cidr-mask-size", "int32", "", "Per-node mask for a single-stack cluster."],
    ["node-cidr-mask-size-ipv4", "int32", "24", "Per-node IPv4 mask."],
    ["node-cidr-mask-size-ipv6", "int32", "80", "Per-node IPv6 mask."],
  ]),
  ...accepted(WHY_OWNERSHIP, [
    ["cloud-provider-platforms", "stringSlice"],
    ["node-lifecycle-wait-timeout", "duration"],
  ]),
  ...accepted(WHY_ROUTES, [
    ["route-reconciliation-period", "duration"],
    ["configure-cloud-routes", "bool"],
  ]),
  ...accepted("volume plugins are not part of a cloud controller manager", [
    ["external-cloud-volume-plugin", "string"],
  ]),
  ...accepted("deprecated upstream; the Talos cloud has no cluster ID", [["allow-untagged-cloud", "bool"]]),
  ...accepted("deprecated upstream, where it is a no-op too", [["node-sync-period", "duration"]]),
  ...accepted("the service (load balancer) controller is not implemented", [
    ["concurrent-service-syncs", "int32"],
  ]),
  ...accepted("controllers start without delay", [["controller-start-interval", "duration"]]),
  ...accepted("requests always use application/json", [["kube-api-content-type", "string"]]).map((s) => ({
    ...s,
    quietWhen: "application/json",
  })),
  ...accepted(WHY_PPROF, [
    ["profiling", "bool"],
    ["contention-profiling", "bool"],
  ]),
  ...accepted(WHY_MIGRATION, [
    ["enable-leader-migration", "bool"],
    ["leader-migration-config", "string"],
  ]),
  ...accepted("no feature gates apply to this CCM", [["feature-gates", "mapStringBool"]]),
  ...accepted(WHY_WEBHOOK, [
    ["webhooks", "stringSlice"],
    ["validation-webhook-config-file", "string"],
    ["webhook-bind-address", "ip"],
    ["webhook-secure-port", "int"],
    ["webhook-cert-dir", "string"],
    ["webhook-tls-cert-file", "string"],
    ["webhook-tls-private-key-file", "string"],
    ["webhook-ca-cert-file", "string"],
  ]),
  ...accepted("without --tls-cert-file the serving certificate is self-signed in memory", [
    ["cert-dir", "string"],
  ]),
  ...accepted(WHY_TLS, [
    ["tls-cipher-suites", "stringSlice"],
    ["tls-sni-cert-key", "certKey"],
    ["http2-max-streams-per-connection", "int"],
  ]),
  ...accepted(WHY_SHARING, [
    ["permit-port-sharing", "bool"],
    ["permit-address-sharing", "bool"],
  ]),
  ...accepted(WHY_REQUEST_HEADER, [
    ["requestheader-client-ca-file", "string"],
    ["requestheader-username-headers", "stringSlice"],
    ["requestheader-uid-headers", "stringSlice"],
    ["requestheader-group-headers", "stringSlice"],
    ["requestheader-extra-headers-prefix", "stringSlice"],
    ["requestheader-allowed-names", "stringSlice"],
  ]),
  ...accepted("per-file verbosity is not supported; use --v", [["vmodule", "string"]]),
  ...accepted(WHY_LOG_STREAM, [
    ["log-flush-frequency", "duration"],
    ["log-text-split-stream", "bool"],
    ["log-text-info-buffer-size", "quantity"],
    ["log-json-split-stream", "bool"],
    ["log-json-info-buffer-size", "quantity"],
  ]),
  ...accepted(WHY_KLOG, [
    ["add-dir-header", "bool"],
    ["alsologtostderr", "bool"],
    ["log-backtrace-at", "string"],
    ["log-dir", "string"],
    ["log-file", "string"],
    ["log-file-max-size", "uint64"],
    ["logtostderr", "bool"],
    ["one-output", "bool"],
    ["skip-headers", "bool"],
    ["skip-log-headers", "bool"],
    ["stderrthreshold", "string"],
  ]),
];

const VALIDATE_FLAGS: readonly FlagSpec[] = [
  ...COMMON_FLAGS,
  ...group("Subcommand", [
    ["cloud-config", "string", "", "Configuration file to check (required)."],
    ["metadata", "string", "", "PlatformMetadata YAML of a sample node to run the rules against."],
    ["output", "string", "", "Print the result as json or yaml instead of text."],
  ]),
];

const MANIFESTS_FLAGS: readonly FlagSpec[] = [
  ...COMMON_FLAGS,
  ...group("Subcommand", [
    ["image", "string", "", "Container image; default this build's release image."],
    [
      "controllers",
      "stringSlice",
      "[cloud-node,node-csr-approval]",
      "Controllers the DaemonSet runs (as for run).",
    ],
    ["cloud-config", "string", "", "Configuration file to embed in the ConfigMap."],
    ["namespace", "string", "kube-system", "Namespace to deploy into."],
    ["talos-patch", "bool", "", "Also print the Talos machine config patch that enables the CCM."],
  ]),
];

/** A subcommand, or `run` (the default). */
export type Subcommand = "run" | "validate" | "manifests";

const FLAGSETS: Readonly<Record<Subcommand, readonly FlagSpec[]>> = {
  run: RUN_FLAGS,
  validate: VALIDATE_FLAGS,
  manifests: MANIFESTS_FLAGS,
};

/** What the help text and the README say about one flag. */
export interface FlagInfo {
  name: string;
  /** pflag's type name as `--help` shows it; "" for booleans. */
  type: string;
  shorthand?: string;
  group: string;
  help: string;
  shownDefault?: string;
  /** False for flags accepted only for compatibility. */
  implemented: boolean;
  /** Why an accepted flag has no effect. */
  ignored?: string;
}

/**
 * Describes every flag a command accepts, in help-text order.
 * @example listFlags("run").filter((f) => !f.implemented).map((f) => f.name)
 */
export function listFlags(command: Subcommand = "run"): FlagInfo[] {
  return FLAGSETS[command].map((s) => ({
    name: s.name,
    type: TYPE_NAMES[s.kind],
    group: s.group,
    help: s.help,
    implemented: s.ignored === undefined,
    ...(s.shorthand === undefined ? {} : { shorthand: s.shorthand }),
    ...(s.shownDefault === undefined ? {} : { shownDefault: s.shownDefault }),
    ...(s.ignored === undefined ? {} : { ignored: s.ignored }),
  }));
}

// ---------------------------------------------------------------------------------------------------
// pflag parsing

type Value = boolean | string | number | string[] | Record<string, boolean>;

interface Parsed {
  values: Map<string, Value>;
  /** Names in the order they were first set. */
  order: string[];
  positionals: string[];
}

function convert(spec: FlagSpec, raw: string, previous: Value | undefined): Value {
  const bad = (): never =>
    fail(`invalid value ${JSON.stringify(raw)} for --${spec.name}: expected ${EXPECTED[spec.kind]}`);
  switch (spec.kind) {
    case "bool":
      return parseGoBool(raw) ?? bad();
    case "version":
      return raw === "raw" ? "raw" : (parseGoBool(raw) ?? raw);
    case "string":
      return raw;
    case "int":
      return parseGoInt(raw, 64, false) ?? bad();
    case "int32":
      return parseGoInt(raw, 32, false) ?? bad();
    case "uint64":
      return parseGoInt(raw, 64, true) ?? bad();
    case "level":
      // klog levels are decimal only: "010" is ten, not eight.
      return /^\d+$/.test(raw) && Number(raw) < 2 ** 32 ? Number(raw) : bad();
    case "float32": {
      if (!/^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/.test(raw)) return bad();
      const n = Number(raw);
      return Number.isFinite(Math.fround(n)) ? n : bad();
    }
    case "duration":
      return parseGoDuration(raw) ?? bad();
    case "quantity":
      return parseQuantity(raw) ?? bad();
    case "ip": {
      const ip = raw.trim();
      return isIPv4(ip) || (isIPv6(ip) && !ip.includes("%")) ? ip : bad();
    }
    case "stringSlice": {
      const items = parseCsvRecord(raw) ?? bad();
      return Array.isArray(previous) ? [...previous, ...items] : items;
    }
    case "certKey": {
      // Repeatable, one "cert,key[:names]" per use (component-base NamedCertKeyArray).
      if ((raw.split(":", 1)[0] ?? "").split(",").length !== 2) return bad();
      return Array.isArray(previous) ? [...previous, raw] : [raw];
    }
    case "mapStringBool": {
      const map =
        previous !== undefined && typeof previous === "object" && !Array.isArray(previous) ? previous : {};
      const out: Record<string, boolean> = { ...map };
      for (const pair of raw.split(",")) {
        if (pair === "") continue;
        const eq = pair.indexOf("=");
        const b = eq === -1 ? undefined : parseGoBool(pair.slice(eq + 1).trim());
        if (b === undefined) return bad();
        out[pair.slice(0, eq).trim()] = b;
      }
      return out;
    }
  }
}

/** The closest known flag name, if one is close enough to be a typo. */
function suggest(name: string, specs: readonly FlagSpec[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const s of specs) {
    const d = editDistance(name, s.name);
    if (d < bestDistance) [best, bestDistance] = [s.name, d];
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 5)) && bestDistance < name.length
    ? best
    : undefined;
}

const NO_OPTION_DEFAULT: Partial<Record<Kind, string>> = { bool: "true", version: "true" };

/**
 * Parses pflag syntax against `specs`: `--name=value`, `--name value`, `--name` for booleans, `-x`,
 * `-x=value`, `-xvalue`, `-x value`, clusters of boolean shorthands, `--` to end flags. Underscores in
 * long names count as hyphens (upstream's WordSepNormalizeFunc).
 */
function parseFlags(args: readonly string[], specs: readonly FlagSpec[]): Parsed {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const byShorthand = new Map(
    specs.flatMap((s) => (s.shorthand === undefined ? [] : [[s.shorthand, s] as const])),
  );
  const parsed: Parsed = { values: new Map(), order: [], positionals: [] };
  const set = (spec: FlagSpec, raw: string): void => {
    if (!parsed.values.has(spec.name)) parsed.order.push(spec.name);
    parsed.values.set(spec.name, convert(spec, raw, parsed.values.get(spec.name)));
  };
  let i = 0;
  const next = (): string | undefined => (i < args.length ? args[i++] : undefined);
  for (let arg = next(); arg !== undefined; arg = next()) {
    if (arg === "--") {
      parsed.positionals.push(...args.slice(i));
      break;
    }
    if (arg.length < 2 || !arg.startsWith("-")) {
      parsed.positionals.push(arg);
    } else if (arg.startsWith("--")) {
      const body = arg.slice(2);
      if (body.startsWith("-") || body.startsWith("=")) fail(`bad flag syntax: ${arg}`);
      const eq = body.indexOf("=");
      const name = (eq === -1 ? body : body.slice(0, eq)).replaceAll("_", "-");
      const spec = byName.get(name);
      if (spec === undefined) {
        const hint = suggest(name, specs);
        fail(`unknown flag: --${name}${hint === undefined ? "" : ` (did you mean --${hint}?)`}`);
      }
      const noOpt = NO_OPTION_DEFAULT[spec.kind];
      if (eq !== -1) set(spec, body.slice(eq + 1));
      else if (noOpt !== undefined) set(spec, noOpt);
      else set(spec, next() ?? fail(`flag needs an argument: --${name}`));
    } else {
      // Go's flag package allows "-kubeconfig"; pflag reads it as shorthands and fails, and so do we,
      // but with a pointer to the right spelling.
      const longName = (arg.slice(1).split("=", 1)[0] ?? "").replaceAll("_", "-");
      if (longName.length > 1 && byName.has(longName)) {
        fail(`flag ${arg} has a single dash (did you mean --${longName}?)`);
      }
      let cluster = arg.slice(1);
      while (cluster !== "") {
        const c = cluster.charAt(0);
        const spec = byShorthand.get(c) ?? fail(`unknown shorthand flag: '${c}' in ${arg}`);
        const noOpt = NO_OPTION_DEFAULT[spec.kind];
        if (cluster.length > 2 && cluster[1] === "=") {
          set(spec, cluster.slice(2));
          cluster = "";
        } else if (noOpt !== undefined) {
          set(spec, noOpt);
          cluster = cluster.slice(1);
        } else if (cluster.length > 1) {
          set(spec, cluster.slice(1));
          cluster = "";
        } else {
          set(spec, next() ?? fail(`flag needs an argument: '${c}' in ${arg}`));
          cluster = "";
        }
      }
    }
  }
  return parsed;
}

function requestsHelp(args: readonly string[]): boolean {
  const end = args.indexOf("--");
  return (end === -1 ? args : args.slice(0, end)).some(
    (a) => a === "--help" || a === "-h" || a === "--help=true",
  );
}

// Typed reads of parsed values; the kind of each flag guarantees the runtime type.
function bool(p: Parsed, name: string, fallback: boolean): boolean {
  const v = p.values.get(name);
  return typeof v === "boolean" ? v : fallback;
}
function num(p: Parsed, name: string, fallback: number): number {
  const v = p.values.get(name);
  return typeof v === "number" ? v : fallback;
}
function str(p: Parsed, name: string): string | undefined {
  const v = p.values.get(name);
  return typeof v === "string" ? v : undefined;
}
function list(p: Parsed, name: string, fallback: readonly string[]): string[] {
  const v = p.values.get(name);
  return Array.isArray(v) ? v : [...fallback];
}
/** A string flag's value, or nothing when unset or empty (upstream treats "" as unset for these). */
function path<K extends string>(p: Parsed, name: string, key: K): { [k in K]?: string } {
  const v = str(p, name);
  return (v === undefined || v === "" ? {} : { [key]: v }) as { [k in K]?: string };
}

// ---------------------------------------------------------------------------------------------------
// Options

/** Logging settings every command takes. */
export interface LoggingOptions {
  /** `--logging-format`: text (klog) or json. Default text. */
  format: LogFormat;
  /** `--v`: verbosity. Default 0. */
  verbosity: number;
}

/** Leader election (`--leader-elect*`); the lock is always a `coordination.k8s.io` Lease. */
export interface LeaderElectionOptions {
  /** `--leader-elect`, default true. */
  enabled: boolean;
  /** `--leader-elect-lease-duration`, default 15 s. */
  leaseDurationMs: number;
  /** `--leader-elect-renew-deadline`, default 10 s. */
  renewDeadlineMs: number;
  /** `--leader-elect-retry-period`, default 2 s. */
  retryPeriodMs: number;
  /** `--leader-elect-resource-name`, default `cloud-controller-manager`. */
  resourceName: string;
  /** `--leader-elect-resource-namespace`, default `kube-system`. */
  resourceNamespace: string;
}

/** TLS versions as `node:tls` names them. */
export type TlsVersion = "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3";

/** The HTTPS endpoint and its delegated authentication and authorization. */
export interface ServingOptions {
  /** `--bind-address`, default `0.0.0.0`. */
  bindAddress: string;
  /** `--secure-port`, default 10258; 0 disables serving. */
  securePort: number;
  /** `--tls-cert-file`; absent: generate a self-signed certificate in memory. */
  tlsCertFile?: string;
  /** `--tls-private-key-file`; set exactly when `tlsCertFile` is. */
  tlsPrivateKeyFile?: string;
  /** `--tls-min-version` (`VersionTLS12` → `TLSv1.2`); absent: the runtime's default. */
  tlsMinVersion?: TlsVersion;
  /** `--client-ca-file`: CA bundle for client-certificate authentication. */
  clientCaFile?: string;
  /** `--authentication-kubeconfig`; absent: the main client's credentials. */
  authenticationKubeconfig?: string;
  /** `--authorization-kubeconfig`; absent: the main client's credentials. */
  authorizationKubeconfig?: string;
  /** `--authentication-skip-lookup`: do not read `extension-apiserver-authentication` for a client CA. */
  authenticationSkipLookup: boolean;
  /** `--authentication-tolerate-lookup-failure`. */
  authenticationTolerateLookupFailure: boolean;
  /** `--authentication-token-webhook-cache-ttl`, default 10 s. */
  tokenReviewCacheTtlMs: number;
  /** `--authorization-webhook-cache-authorized-ttl`, default 10 s. */
  authorizedCacheTtlMs: number;
  /** `--authorization-webhook-cache-unauthorized-ttl`, default 10 s. */
  unauthorizedCacheTtlMs: number;
  /** `--authorization-always-allow-paths`, default `/healthz,/readyz,/livez`; `*` suffix is a prefix match. */
  alwaysAllowPaths: string[];
}

/** The cloud-node and cloud-node-lifecycle controllers. */
export interface NodeControllerOptions {
  /** `--node-status-update-frequency`: full re-sync period of every node, default 5 min. */
  statusUpdateFrequencyMs: number;
  /** `--node-monitor-period`: lifecycle scan period, default 5 s. */
  monitorPeriodMs: number;
  /**
   * `--concurrent-node-syncs`: cloud-node workers. Default 4 (upstream 1), so one node whose Talos API
   * is slow or unreachable does not hold up the initialization of the others.
   */
  concurrentSyncs: number;
  /** `--concurrent-node-lifecycle-syncs`: lifecycle workers, default 1. */
  concurrentLifecycleSyncs: number;
}

/** `--cidr-allocator-type`: which allocator node-ipam runs (lib/ipam.ts). */
export type AllocatorType = "RangeAllocator" | "CloudAllocator";

/**
 * The node-ipam controller. The CIDR and mask fields are the flags as given, in the shape
 * `resolveNodeIpamConfig` (lib/cidr.ts) takes; it applies the upstream rules and defaults (/24, /80)
 * once the cluster CIDRs are known. Mask sizes of 0 are left out: upstream treats 0 as unset.
 */
export interface IpamOptions extends NodeIpamFlags {
  /** `--allocate-node-cidrs`, default false: without it node-ipam allocates nothing. */
  allocateNodeCidrs: boolean;
  /** `--cidr-allocator-type`, default RangeAllocator. */
  allocatorType: AllocatorType;
  /** `--cluster-cidr` split on commas; empty: use Talos' pod CIDRs. */
  clusterCidrs: string[];
  /** `--service-cluster-ip-range` split on commas; empty: use Talos' service CIDRs. */
  serviceCidrs: string[];
}

/** Settings read from the environment rather than flags. */
export interface TalosEnvOptions {
  /** `TALOS_ENDPOINTS`, comma-separated; empty: the talosconfig's endpoints. */
  endpoints: string[];
  /** `TALOSCONFIG`: path of the talosconfig; absent: the default locations. */
  configPath?: string;
  /** `SERVICE_ACCOUNT`: the CCM's Kubernetes service account name, default `talos-cloud-controller-manager`. */
  serviceAccount: string;
}

/** Everything `run` needs. Durations are milliseconds. */
export interface RunOptions {
  /** `--kubeconfig`; absent: in-cluster configuration. */
  kubeconfig?: string;
  /** `--master`: API server URL overriding the kubeconfig's. */
  master?: string;
  /** `--cloud-config`: path of ccm-config.yaml; absent: an empty configuration. */
  cloudConfig?: string;
  /** `--controllers` as given (after pflag's comma splitting), default `["*"]`. */
  controllers: string[];
  /** {@link resolveControllers} of `controllers`. */
  enabledControllers: ControllerName[];
  /** `--cluster-name`, default `kubernetes`. */
  clusterName: string;
  /** `--use-service-account-credentials`: each controller acts as its own service account. */
  useServiceAccountCredentials: boolean;
  /** `--kube-api-qps`, default 20; negative disables client-side rate limiting (client-go). */
  kubeApiQps: number;
  /** `--kube-api-burst`, default 30. */
  kubeApiBurst: number;
  /** `--min-resync-period`: watches re-list after a random time in [this, 2×this], default 12 h. */
  minResyncPeriodMs: number;
  leaderElection: LeaderElectionOptions;
  serving: ServingOptions;
  nodeController: NodeControllerOptions;
  ipam: IpamOptions;
  logging: LoggingOptions;
  talos: TalosEnvOptions;
}

/** Everything `validate` needs. */
export interface ValidateOptions {
  /** `--cloud-config`: the file to check. */
  cloudConfig: string;
  /** `--metadata`: a PlatformMetadata YAML to run the rules against. */
  metadata?: string;
  /** `-o`/`--output`; absent: human-readable text. */
  output?: "json" | "yaml";
  logging: LoggingOptions;
}

/** Everything `manifests` needs. */
export interface ManifestsOptions {
  /** `--image`; absent: this build's release image. */
  image?: string;
  /** `--controllers` for the DaemonSet's args, default the reference DaemonSet's `cloud-node,node-csr-approval`. */
  controllers: string[];
  /** {@link resolveControllers} of `controllers`, to size RBAC. */
  enabledControllers: ControllerName[];
  /** `--cloud-config`: a file to embed; absent: an empty configuration. */
  cloudConfig?: string;
  /** `--namespace`, default `kube-system`. */
  namespace: string;
  /** `--talos-patch`: also emit the Talos machine config patch. */
  talosPatch: boolean;
  logging: LoggingOptions;
}

/** The outcome of {@link parseCommandLine}: what to do, with what, and what to warn about first. */
export type ParseResult =
  | { command: "run"; options: RunOptions; warnings: string[] }
  | { command: "validate"; options: ValidateOptions; warnings: string[] }
  | { command: "manifests"; options: ManifestsOptions; warnings: string[] }
  | { command: "help"; options: { topic: Subcommand }; warnings: string[] }
  | { command: "version"; options: { raw: boolean }; warnings: string[] };

const SUBCOMMANDS = new Set(["run", "validate", "manifests", "help", "version"]);

function loggingOptions(p: Parsed): LoggingOptions {
  const format = str(p, "logging-format") ?? "text";
  if (format !== "text" && format !== "json") {
    fail(`invalid value ${JSON.stringify(format)} for --logging-format: expected text or json`);
  }
  return { format, verbosity: num(p, "v", 0) };
}

function compatWarnings(p: Parsed, specs: readonly FlagSpec[]): string[] {
  const warnings: string[] = [];
  for (const name of p.order) {
    const spec = specs.find((s) => s.name === name);
    if (spec?.ignored === undefined || (spec.quietWhen !== undefined && str(p, name) === spec.quietWhen))
      continue;
    warnings.push(`--${name} is accepted for compatibility and has no effect: ${spec.ignored}`);
  }
  return warnings;
}

function positive(p: Parsed, name: string, fallback: number): number {
  const v = num(p, name, fallback);
  if (v <= 0) fail(`invalid value for --${name}: must be greater than zero`);
  return v;
}

function atLeastOne(p: Parsed, name: string, fallback: number): number {
  const v = num(p, name, fallback);
  if (v < 1) fail(`invalid value ${v} for --${name}: must be at least 1`);
  return v;
}

function leaderElectionOptions(p: Parsed): LeaderElectionOptions {
  const le: LeaderElectionOptions = {
    enabled: bool(p, "leader-elect", true),
    leaseDurationMs: num(p, "leader-elect-lease-duration", 15_000),
    renewDeadlineMs: num(p, "leader-elect-renew-deadline", 10_000),
    retryPeriodMs: num(p, "leader-elect-retry-period", 2_000),
    resourceName: str(p, "leader-elect-resource-name") ?? "cloud-controller-manager",
    resourceNamespace: str(p, "leader-elect-resource-namespace") ?? "kube-system",
  };
  if (!le.enabled) return le;
  // What k8s.io/controller-manager checks before electing; lib/leader.ts checks the timings.
  const lock = str(p, "leader-elect-resource-lock") ?? "leases";
  if (lock !== "leases") {
    fail(`invalid value ${JSON.stringify(lock)} for --leader-elect-resource-lock: must be "leases"`);
  }
  if (le.resourceName === "") fail("--leader-elect-resource-name must not be empty");
  if (le.resourceNamespace === "") fail("--leader-elect-resource-namespace must not be empty");
  return le;
}

const TLS_VERSIONS: Readonly<Record<string, TlsVersion>> = {
  VersionTLS10: "TLSv1",
  VersionTLS11: "TLSv1.1",
  VersionTLS12: "TLSv1.2",
  VersionTLS13: "TLSv1.3",
};

function servingOptions(p: Parsed): ServingOptions {
  const securePort = num(p, "secure-port", 10258);
  if (securePort < 0 || securePort > 65535) {
    fail(`invalid value ${securePort} for --secure-port: must be between 0 and 65535 (0 turns serving off)`);
  }
  const cert = path(p, "tls-cert-file", "tlsCertFile");
  const key = path(p, "tls-private-key-file", "tlsPrivateKeyFile");
  if ((cert.tlsCertFile === undefined) !== (key.tlsPrivateKeyFile === undefined)) {
    fail("--tls-cert-file and --tls-private-key-file must be given together");
  }
  const minVersion = str(p, "tls-min-version") ?? "";
  const tlsMinVersion = TLS_VERSIONS[minVersion];
  if (minVersion !== "" && tlsMinVersion === undefined) {
    fail(
      `invalid value ${JSON.stringify(minVersion)} for --tls-min-version: expected ${Object.keys(TLS_VERSIONS).join(", ")}`,
    );
  }
  return {
    bindAddress: str(p, "bind-address") ?? "0.0.0.0",
    securePort,
    ...cert,
    ...key,
    ...(tlsMinVersion === undefined ? {} : { tlsMinVersion }),
    ...path(p, "client-ca-file", "clientCaFile"),
    ...path(p, "authentication-kubeconfig", "authenticationKubeconfig"),
    ...path(p, "authorization-kubeconfig", "authorizationKubeconfig"),
    authenticationSkipLookup: bool(p, "authentication-skip-lookup", false),
    authenticationTolerateLookupFailure: bool(p, "authentication-tolerate-lookup-failure", false),
    tokenReviewCacheTtlMs: num(p, "authentication-token-webhook-cache-ttl", 10_000),
    authorizedCacheTtlMs: num(p, "authorization-webhook-cache-authorized-ttl", 10_000),
    unauthorizedCacheTtlMs: num(p, "authorization-webhook-cache-unauthorized-ttl", 10_000),
    alwaysAllowPaths: list(p, "authorization-always-allow-paths", ["/healthz", "/readyz", "/livez"]),
  };
}

function maskSize(p: Parsed, name: string): number | undefined {
  const v = num(p, name, 0);
  return v === 0 ? undefined : v;
}

function cidrList(p: Parsed, name: string): string[] {
  const v = str(p, name) ?? "";
  return v.trim() === "" ? [] : v.split(",").map((c) => c.trim());
}

function ipamOptions(p: Parsed): IpamOptions {
  const allocatorType = str(p, "cidr-allocator-type") ?? "RangeAllocator";
  if (allocatorType !== "RangeAllocator" && allocatorType !== "CloudAllocator") {
    fail(
      `invalid value ${JSON.stringify(allocatorType)} for --cidr-allocator-type: expected RangeAllocator or CloudAllocator`,
    );
  }
  const single = maskSize(p, "node-cidr-mask-size");
  const v4 = maskSize(p, "node-cidr-mask-size-ipv4");
  const v6 = maskSize(p, "node-cidr-mask-size-ipv6");
  return {
    allocateNodeCidrs: bool(p, "allocate-node-cidrs", false),
    allocatorType,
    clusterCidrs: cidrList(p, "cluster-cidr"),
    serviceCidrs: cidrList(p, "service-cluster-ip-range"),
    ...(single === undefined ? {} : { nodeCidrMaskSize: single }),
    ...(v4 === undefined ? {} : { nodeCidrMaskSizeIpv4: v4 }),
    ...(v6 === undefined ? {} : { nodeCidrMaskSizeIpv6: v6 }),
  };
}

function talosEnv(env: Readonly<Record<string, string | undefined>>): TalosEnvOptions {
  const configPath = env.TALOSCONFIG;
  return {
    endpoints: (env.TALOS_ENDPOINTS ?? "")
      .split(",")
      .map((e) => e.trim())
      .filter((e) => e !== ""),
    ...(configPath === undefined || configPath === "" ? {} : { configPath }),
    serviceAccount: env.SERVICE_ACCOUNT || "talos-cloud-controller-manager",
  };
}

function runOptions(
  p: Parsed,
  env: Readonly<Record<string, string | undefined>>,
  warnings: string[],
): RunOptions {
  const provider = str(p, "cloud-provider") ?? "talos";
  if (provider !== "talos") {
    fail(
      `invalid value ${JSON.stringify(provider)} for --cloud-provider: this binary only implements "talos"`,
    );
  }
  const controllers = list(p, "controllers", ["*"]);
  const resolved = resolveControllers(controllers);
  warnings.push(...resolved.warnings);
  const ipam = ipamOptions(p);
  // With the cluster CIDRs on the command line every IPAM flag can be checked now rather than when
  // the controller starts; without them the check waits for Talos' pod CIDRs.
  if (resolved.enabled.includes("node-ipam") && ipam.allocateNodeCidrs && ipam.clusterCidrs.length > 0) {
    try {
      resolveNodeIpamConfig(ipam);
    } catch (cause) {
      throw new FlagError((cause as Error).message, { cause });
    }
  }
  const qps = num(p, "kube-api-qps", 20);
  const burst = num(p, "kube-api-burst", 30);
  if (burst < 0) fail(`invalid value ${burst} for --kube-api-burst: must not be negative`);
  return {
    ...path(p, "kubeconfig", "kubeconfig"),
    ...path(p, "master", "master"),
    ...path(p, "cloud-config", "cloudConfig"),
    controllers,
    enabledControllers: resolved.enabled,
    clusterName: str(p, "cluster-name") ?? "kubernetes",
    useServiceAccountCredentials: bool(p, "use-service-account-credentials", false),
    kubeApiQps: qps,
    kubeApiBurst: burst,
    minResyncPeriodMs: positive(p, "min-resync-period", 12 * 3_600_000),
    leaderElection: leaderElectionOptions(p),
    serving: servingOptions(p),
    nodeController: {
      statusUpdateFrequencyMs: positive(p, "node-status-update-frequency", 5 * 60_000),
      monitorPeriodMs: positive(p, "node-monitor-period", 5_000),
      concurrentSyncs: atLeastOne(p, "concurrent-node-syncs", 4),
      concurrentLifecycleSyncs: atLeastOne(p, "concurrent-node-lifecycle-syncs", 1),
    },
    ipam,
    logging: loggingOptions(p),
    talos: talosEnv(env),
  };
}

function validateOptions(p: Parsed): ValidateOptions {
  const cloudConfig = str(p, "cloud-config") ?? "";
  if (cloudConfig === "") fail("validate needs --cloud-config FILE");
  const output = str(p, "output");
  if (output !== undefined && output !== "json" && output !== "yaml") {
    fail(`invalid value ${JSON.stringify(output)} for --output: expected json or yaml`);
  }
  return {
    cloudConfig,
    ...path(p, "metadata", "metadata"),
    ...(output === undefined ? {} : { output }),
    logging: loggingOptions(p),
  };
}

function manifestsOptions(p: Parsed, warnings: string[]): ManifestsOptions {
  const controllers = list(p, "controllers", ["cloud-node", "node-csr-approval"]);
  const resolved = resolveControllers(controllers);
  warnings.push(...resolved.warnings);
  const namespace = str(p, "namespace") ?? "kube-system";
  if (namespace === "") fail("--namespace must not be empty");
  return {
    ...path(p, "image", "image"),
    controllers,
    enabledControllers: resolved.enabled,
    ...path(p, "cloud-config", "cloudConfig"),
    namespace,
    talosPatch: bool(p, "talos-patch", false),
    logging: loggingOptions(p),
  };
}

function parseSubcommand(
  command: Subcommand,
  args: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): ParseResult {
  const specs = FLAGSETS[command];
  const p = parseFlags(args, specs);
  const warnings = compatWarnings(p, specs);
  if (bool(p, "help", false)) return { command: "help", options: { topic: command }, warnings };
  const version = p.values.get("version");
  if (version === true || version === "raw")
    return { command: "version", options: { raw: version === "raw" }, warnings };
  if (typeof version === "string") {
    warnings.push(`--version=${version}: overriding the reported version is not supported; ignoring it`);
  }
  const stray = p.positionals.find((a) => a !== "");
  if (stray !== undefined) {
    const hint = SUBCOMMANDS.has(stray)
      ? `; subcommands must come first, e.g. ${PROGRAM_NAME} ${stray} [flags]`
      : parseGoBool(stray) !== undefined
        ? "; give boolean values with =, e.g. --leader-elect=false"
        : "";
    fail(`unexpected argument ${JSON.stringify(stray)}: ${command} takes flags only${hint}`);
  }
  switch (command) {
    case "run":
      return { command, options: runOptions(p, env, warnings), warnings };
    case "validate":
      return { command, options: validateOptions(p), warnings };
    case "manifests":
      return { command, options: manifestsOptions(p, warnings), warnings };
  }
}

/**
 * Parses the process arguments (without the executable and script: `process.argv.slice(2)`). A first
 * argument of `run`, `validate`, `manifests`, `help [topic]` or `version` picks the subcommand; anything
 * else runs the controllers with the whole list as flags. `--help`/`-h` wins over every other flag
 * and over errors; `--version` is next.
 * @param env the process environment (`TALOS_ENDPOINTS`, `TALOSCONFIG`, `SERVICE_ACCOUNT`)
 * @returns the command with typed, defaulted options and warnings to log before starting
 * @throws {FlagError} on an unknown flag (naming the closest known one), a malformed or invalid value,
 *   a stray argument or an invalid combination
 * @example
 * const r = parseCommandLine(["--v=2", "--controllers=cloud-node,node-csr-approval"], process.env);
 * if (r.command === "run") r.options.enabledControllers; // ["cloud-node", "node-csr-approval"]
 */
export function parseCommandLine(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = {},
): ParseResult {
  const first = argv[0];
  const named = first !== undefined && SUBCOMMANDS.has(first) ? first : undefined;
  const args = named === undefined ? argv : argv.slice(1);
  if (named === "help") {
    const topic = args[0] ?? "run";
    if (topic !== "run" && topic !== "validate" && topic !== "manifests") {
      fail(`unknown help topic ${JSON.stringify(topic)}: expected run, validate or manifests`);
    }
    if (args.length > 1) fail("help takes at most one topic");
    return { command: "help", options: { topic }, warnings: [] };
  }
  if (named === "version") {
    if (args.length > 0) fail("version takes no arguments");
    return { command: "version", options: { raw: false }, warnings: [] };
  }
  const command: Subcommand = named === "validate" || named === "manifests" ? named : "run";
  try {
    return parseSubcommand(command, args, env);
  } catch (err) {
    if (err instanceof FlagError && requestsHelp(args))
      return { command: "help", options: { topic: command }, warnings: [] };
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------
// Help

/** The one-line usage of each form of the command. */
export function usage(): string {
  return [
    "Usage:",
    `  ${PROGRAM_NAME} [run] [flags]`,
    `  ${PROGRAM_NAME} validate --cloud-config FILE [--metadata FILE] [-o json|yaml]`,
    `  ${PROGRAM_NAME} manifests [--image IMAGE] [--controllers LIST] [--cloud-config FILE] [--namespace NS] [--talos-patch]`,
    `  ${PROGRAM_NAME} help [run|validate|manifests] | version`,
  ].join("\n");
}

function wrap(text: string, width: number, indent: string): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines.join(`\n${indent}`);
}

const GROUP_ORDER: readonly Group[] = [
  "Subcommand",
  "Generic",
  "Leader election",
  "Secure serving",
  "Node controller",
  "Node IPAM",
  "Logging",
];

/**
 * The `--help` text: usage, the implemented flags grouped as upstream groups them (with defaults), the
 * subcommands, and the names of the flags accepted only for compatibility.
 * @param topic which command's flags to describe
 */
export function helpText(topic: Subcommand = "run"): string {
  const out = [
    "Kubernetes cloud controller manager for Talos Linux: initializes nodes from Talos metadata,",
    "approves kubelet serving certificates, allocates pod CIDRs and removes dead nodes.",
    "",
    usage(),
  ];
  const flags = listFlags(topic);
  const implemented = flags.filter((f) => f.implemented);
  const label = (f: FlagInfo): string =>
    `${f.shorthand === undefined ? "    " : `-${f.shorthand}, `}--${f.name}${f.type === "" ? "" : ` ${f.type}`}`;
  // Like cobra, but a very long flag name pushes only its own description to the next line.
  const column = Math.min(Math.max(...implemented.map((f) => label(f).length)) + 4, 48);
  for (const section of GROUP_ORDER) {
    const members = implemented.filter((f) => f.group === section);
    if (members.length === 0) continue;
    out.push(
      "",
      `${section === "Subcommand" ? `${topic[0]?.toUpperCase()}${topic.slice(1)}` : section} flags:`,
    );
    for (const f of members) {
      // A no-break space keeps "(default x)" on one line; wrap() only breaks at plain spaces.
      const text = f.shownDefault === undefined ? f.help : `${f.help} (default\u00a0${f.shownDefault})`;
      const indent = " ".repeat(column + 2);
      const head = label(f).length < column ? label(f).padEnd(column) : `${label(f)}\n${indent}`;
      out.push(`  ${head}${wrap(text, 108 - column, indent).replaceAll("\u00a0", " ")}`);
    }
  }
  out.push(
    "",
    "Subcommands:",
    "  run         Run the controllers (the default when no subcommand is given).",
    "  validate    Check a configuration file and, with --metadata, show what its rules produce.",
    "  manifests   Print the deployment manifests (RBAC, ConfigMap, DaemonSet).",
    "  help        Show this help, or a subcommand's.",
    "  version     Print the version.",
  );
  const accepted = flags.filter((f) => !f.implemented).map((f) => `--${f.name}`);
  if (accepted.length > 0) {
    out.push(
      "",
      "Accepted for compatibility with k8s.io/cloud-provider, with a warning and no effect:",
      `  ${wrap(accepted.join(", "), 106, "  ")}`,
    );
  }
  return `${out.join("\n")}\n`;
}
