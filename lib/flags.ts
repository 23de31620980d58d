// The command line as typed options: parseCommandLine picks the subcommand, parses its flags
// (lib/pflag.ts against lib/flagtable.ts), checks values and combinations the way upstream does, and
// returns what `run`, `validate` or `manifests` needs, with defaults applied and warnings for flags
// accepted only for compatibility. Also the option types the rest of lib/ reads. Pure: no I/O, no
// process access; the environment comes in as an argument.

import { type ControllerName, resolveControllers } from "./controllernames.ts";
import { FLAGSETS, type FlagSpec, type Subcommand } from "./flagtable.ts";
import { parseGoBool } from "./flagvalues.ts";
import { PROGRAM_NAME } from "./help.ts";
import { type AllocatorType, type NodeIpamFlags, resolveNodeIpamConfig } from "./ipamconfig.ts";
import {
  bool,
  cannotParse,
  FlagError,
  list,
  num,
  type Parsed,
  parseFlags,
  path,
  requestsHelp,
  str,
} from "./pflag.ts";
import { type MachineAccess, parseMachineAccess } from "./talosroute.ts";

/** `--logging-format`: klog text or JSON lines. */
export type LogFormat = "text" | "json";

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

/** The `--requestheader-*` flags: a front proxy's CA file and names, and the headers it names users in. */
export interface RequestHeaderFlags {
  /** `--requestheader-client-ca-file`. */
  clientCaFile: string;
  /** `--requestheader-allowed-names`; empty: any certificate the CA signed. */
  allowedNames: string[];
  /** `--requestheader-username-headers`, default x-remote-user. */
  usernameHeaders: string[];
  /** `--requestheader-uid-headers`, default none. */
  uidHeaders: string[];
  /** `--requestheader-group-headers`, default x-remote-group. */
  groupHeaders: string[];
  /** `--requestheader-extra-headers-prefix`, default x-remote-extra-. */
  extraHeaderPrefixes: string[];
}

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
  /** The `--requestheader-*` flags; absent without `--requestheader-client-ca-file`. */
  requestHeader?: RequestHeaderFlags;
  /** `--authentication-kubeconfig`; absent: the main client's credentials. */
  authenticationKubeconfig?: string;
  /** `--authorization-kubeconfig`; absent: the main client's credentials. */
  authorizationKubeconfig?: string;
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
   * `--concurrent-node-syncs`: cloud-node workers. Default 16 (upstream 1): a worker waits only for the
   * Node's writes (Talos' facts come from the watches), so a joining wave is written as fast as
   * --kube-api-qps lets it, and a node whose API server round trip is slow holds up no other.
   */
  concurrentSyncs: number;
  /** `--concurrent-node-lifecycle-syncs`: lifecycle workers, default 1. */
  concurrentLifecycleSyncs: number;
}

/**
 * The node-ipam controller. The CIDR and mask fields are the flags as given, in the shape
 * `resolveNodeIpamConfig` (lib/ipamconfig.ts) takes; it applies the upstream rules and defaults (/24, /80)
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
  /**
   * `TALOS_MACHINE_ACCESS`: `auto` (default) asks each machine's own apid first, with the
   * talosconfig endpoints as fallback; `proxy` always goes through the endpoints (lib/talosroute.ts).
   */
  machineAccess: MachineAccess;
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
  /** `--workload`: DaemonSet (default) or Deployment. */
  workload: "DaemonSet" | "Deployment";
  /** `--talos-patch`: also emit the Talos machine config patch. */
  talosPatch: boolean;
  /** `--machine-config`: the machine config to read; emit its migration patch (lib/talosmigration.ts). */
  machineConfig?: string;
  logging: LoggingOptions;
}

/** Everything `preflight` needs. */
export interface PreflightOptions {
  /** `--kubeconfig`; absent: $KUBECONFIG, else ~/.kube/config. */
  kubeconfig?: string;
  /** `--namespace`, default `kube-system`. */
  namespace: string;
  /** `--machine-config`: machine config files to check. */
  machineConfigs: string[];
  logging: LoggingOptions;
}

/** The outcome of {@link parseCommandLine}: what to do, with what, and what to warn about first. */
export type ParseResult =
  | { command: "run"; options: RunOptions; warnings: string[] }
  | { command: "validate"; options: ValidateOptions; warnings: string[] }
  | { command: "manifests"; options: ManifestsOptions; warnings: string[] }
  | { command: "preflight"; options: PreflightOptions; warnings: string[] }
  | { command: "help"; options: { topic: Subcommand }; warnings: string[] }
  | { command: "version"; options: { raw: boolean }; warnings: string[] };

const SUBCOMMANDS = new Set(["run", "validate", "manifests", "preflight", "help", "version"]);

function loggingOptions(p: Parsed): LoggingOptions {
  const format = str(p, "logging-format") ?? "text";
  if (format !== "text" && format !== "json") {
    cannotParse(`invalid value ${JSON.stringify(format)} for --logging-format: expected text or json`);
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
  if (v <= 0) cannotParse(`invalid value for --${name}: must be greater than zero`);
  return v;
}

function atLeastOne(p: Parsed, name: string, fallback: number): number {
  const v = num(p, name, fallback);
  if (v < 1) cannotParse(`invalid value ${v} for --${name}: must be at least 1`);
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
    cannotParse(`invalid value ${JSON.stringify(lock)} for --leader-elect-resource-lock: must be "leases"`);
  }
  if (le.resourceName === "") cannotParse("--leader-elect-resource-name must not be empty");
  if (le.resourceNamespace === "") cannotParse("--leader-elect-resource-namespace must not be empty");
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
    cannotParse(
      `invalid value ${securePort} for --secure-port: must be between 0 and 65535 (0 turns serving off)`,
    );
  }
  const cert = path(p, "tls-cert-file", "tlsCertFile");
  const key = path(p, "tls-private-key-file", "tlsPrivateKeyFile");
  if ((cert.tlsCertFile === undefined) !== (key.tlsPrivateKeyFile === undefined)) {
    cannotParse("--tls-cert-file and --tls-private-key-file must be given together");
  }
  const minVersion = str(p, "tls-min-version") ?? "";
  const tlsMinVersion = Object.hasOwn(TLS_VERSIONS, minVersion) ? TLS_VERSIONS[minVersion] : undefined;
  if (minVersion !== "" && tlsMinVersion === undefined) {
    cannotParse(
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
    ...requestHeaderOptions(p),
    ...path(p, "authentication-kubeconfig", "authenticationKubeconfig"),
    ...path(p, "authorization-kubeconfig", "authorizationKubeconfig"),
    tokenReviewCacheTtlMs: num(p, "authentication-token-webhook-cache-ttl", 10_000),
    authorizedCacheTtlMs: num(p, "authorization-webhook-cache-authorized-ttl", 10_000),
    unauthorizedCacheTtlMs: num(p, "authorization-webhook-cache-unauthorized-ttl", 10_000),
    alwaysAllowPaths: list(p, "authorization-always-allow-paths", ["/healthz", "/readyz", "/livez"]),
  };
}

/** The list flags of front-proxy authentication: option, flag and upstream default. */
const REQUEST_HEADER_LISTS: readonly [keyof Omit<RequestHeaderFlags, "clientCaFile">, string, string[]][] = [
  ["allowedNames", "requestheader-allowed-names", []],
  ["usernameHeaders", "requestheader-username-headers", ["x-remote-user"]],
  ["uidHeaders", "requestheader-uid-headers", []],
  ["groupHeaders", "requestheader-group-headers", ["x-remote-group"]],
  ["extraHeaderPrefixes", "requestheader-extra-headers-prefix", ["x-remote-extra-"]],
];

/**
 * The `--requestheader-*` flags, checked as k8s.io/apiserver does: no blank entry, and UID headers
 * only with the standard X-Remote-Uid among them. Without `--requestheader-client-ca-file` the
 * others do nothing, as upstream (which would look the CA up in the cluster).
 */
function requestHeaderOptions(p: Parsed): { requestHeader?: RequestHeaderFlags } {
  const lists = {} as Omit<RequestHeaderFlags, "clientCaFile">;
  for (const [key, flag, fallback] of REQUEST_HEADER_LISTS) {
    const values = list(p, flag, fallback);
    if (values.some((v) => v.trim() === "")) cannotParse(`empty value in "${flag}"`);
    lists[key] = values;
  }
  if (lists.uidHeaders.length > 0 && !lists.uidHeaders.some((h) => h.toLowerCase() === "x-remote-uid")) {
    cannotParse(
      "--requestheader-uid-headers is set without specifying the standard X-Remote-Uid header - API aggregation will not work",
    );
  }
  const file = path(p, "requestheader-client-ca-file", "clientCaFile").clientCaFile;
  return file === undefined ? {} : { requestHeader: { clientCaFile: file, ...lists } };
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
    cannotParse(
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
    machineAccess: machineAccessEnv(env.TALOS_MACHINE_ACCESS),
  };
}

function machineAccessEnv(value: string | undefined): MachineAccess {
  try {
    return parseMachineAccess(value);
  } catch (cause) {
    throw new FlagError((cause as Error).message, { cause });
  }
}

function runOptions(
  p: Parsed,
  env: Readonly<Record<string, string | undefined>>,
  warnings: string[],
): RunOptions {
  const provider = str(p, "cloud-provider") ?? "talos";
  if (provider !== "talos") {
    cannotParse(
      `invalid value ${JSON.stringify(provider)} for --cloud-provider: this binary only implements "talos"`,
    );
  }
  const controllers = list(p, "controllers", ["*"]);
  const resolved = resolveControllers(controllers);
  warnings.push(...resolved.warnings);
  const ipam = ipamOptions(p);
  checkIpamFlags(resolved.enabled, ipam);
  const qps = num(p, "kube-api-qps", 20);
  const burst = num(p, "kube-api-burst", 30);
  if (burst < 0) cannotParse(`invalid value ${burst} for --kube-api-burst: must not be negative`);
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
    nodeController: nodeControllerOptions(p),
    ipam,
    logging: loggingOptions(p),
    talos: talosEnv(env),
  };
}

/**
 * With the cluster CIDRs on the command line every IPAM flag can be checked now rather than when
 * the controller starts; without them the check waits for Talos' pod CIDRs.
 */
function checkIpamFlags(enabled: readonly ControllerName[], ipam: IpamOptions): void {
  if (!enabled.includes("node-ipam") || !ipam.allocateNodeCidrs || ipam.clusterCidrs.length === 0) return;
  try {
    resolveNodeIpamConfig(ipam);
  } catch (cause) {
    throw new FlagError((cause as Error).message, { cause });
  }
}

function nodeControllerOptions(p: Parsed): NodeControllerOptions {
  return {
    statusUpdateFrequencyMs: positive(p, "node-status-update-frequency", 5 * 60_000),
    monitorPeriodMs: positive(p, "node-monitor-period", 5_000),
    concurrentSyncs: atLeastOne(p, "concurrent-node-syncs", 16),
    concurrentLifecycleSyncs: atLeastOne(p, "concurrent-node-lifecycle-syncs", 1),
  };
}

function validateOptions(p: Parsed): ValidateOptions {
  const cloudConfig = str(p, "cloud-config") ?? "";
  if (cloudConfig === "") cannotParse("validate needs --cloud-config FILE");
  const output = str(p, "output");
  if (output !== undefined && output !== "json" && output !== "yaml") {
    cannotParse(`invalid value ${JSON.stringify(output)} for --output: expected json or yaml`);
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
  if (namespace === "") cannotParse("--namespace must not be empty");
  const workload = str(p, "workload") ?? "DaemonSet";
  if (workload !== "DaemonSet" && workload !== "Deployment") {
    cannotParse(`invalid value ${JSON.stringify(workload)} for --workload: expected DaemonSet or Deployment`);
  }
  if (
    workload === "Deployment" &&
    (bool(p, "talos-patch", false) || str(p, "machine-config") !== undefined)
  ) {
    cannotParse(
      "--workload=Deployment is for kubectl: the Talos patch installs the DaemonSet (host network, before any CNI)",
    );
  }
  return {
    ...path(p, "image", "image"),
    controllers,
    enabledControllers: resolved.enabled,
    ...path(p, "cloud-config", "cloudConfig"),
    namespace,
    workload,
    talosPatch: bool(p, "talos-patch", false),
    ...path(p, "machine-config", "machineConfig"),
    logging: loggingOptions(p),
  };
}

function preflightOptions(p: Parsed): PreflightOptions {
  const namespace = str(p, "namespace") ?? "kube-system";
  if (namespace === "") cannotParse("--namespace must not be empty");
  return {
    ...path(p, "kubeconfig", "kubeconfig"),
    namespace,
    machineConfigs: list(p, "machine-config", []).filter((f) => f !== ""),
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
  rejectPositionals(p, command);
  switch (command) {
    case "run":
      return { command, options: runOptions(p, env, warnings), warnings };
    case "validate":
      return { command, options: validateOptions(p), warnings };
    case "manifests":
      return { command, options: manifestsOptions(p, warnings), warnings };
    case "preflight":
      return { command, options: preflightOptions(p), warnings };
  }
}

/** Rejects a non-empty argument that is not a flag, with a hint when it looks like a misplaced one. */
function rejectPositionals(p: Parsed, command: Subcommand): void {
  const stray = p.positionals.find((a) => a !== "");
  if (stray === undefined) return;
  const hint = SUBCOMMANDS.has(stray)
    ? `; subcommands must come first, e.g. ${PROGRAM_NAME} ${stray} [flags]`
    : parseGoBool(stray) !== undefined
      ? "; give boolean values with =, e.g. --leader-elect=false"
      : "";
  cannotParse(`unexpected argument ${JSON.stringify(stray)}: ${command} takes flags only${hint}`);
}

/**
 * Parses the process arguments (without the executable and script: `process.argv.slice(2)`). A first
 * argument of `run`, `validate`, `manifests`, `preflight`, `help [topic]` or `version` picks the subcommand; anything
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
    if (topic !== "run" && topic !== "validate" && topic !== "manifests" && topic !== "preflight") {
      cannotParse(
        `unknown help topic ${JSON.stringify(topic)}: expected run, validate, manifests or preflight`,
      );
    }
    if (args.length > 1) cannotParse("help takes at most one topic");
    return { command: "help", options: { topic }, warnings: [] };
  }
  if (named === "version") {
    if (args.length > 0) cannotParse("version takes no arguments");
    return { command: "version", options: { raw: false }, warnings: [] };
  }
  const command: Subcommand =
    named === "validate" || named === "manifests" || named === "preflight" ? named : "run";
  try {
    return parseSubcommand(command, args, env);
  } catch (err) {
    if (err instanceof FlagError && requestsHelp(args))
      return { command: "help", options: { topic: command }, warnings: [] };
    throw err;
  }
}
