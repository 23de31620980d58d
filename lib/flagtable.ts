// The flag table: every flag each command accepts, with the spelling, value kind, group and default
// the Go siderolabs/talos-cloud-controller-manager (which embeds `k8s.io/cloud-provider`'s
// `NewCloudControllerManagerCommand`) gives it, so an existing DaemonSet's argument list starts this
// binary unchanged; framework flags this CCM has no use for are listed as accepted, with why they have
// no effect. Data only: the parser is lib/pflag.ts, the options built from it lib/flags.ts, the help
// text lib/help.ts.

import type { Kind, PflagSpec } from "./pflag.ts";

/** The help text's sections, named as upstream groups its flags. */
export type Group =
  | "Generic"
  | "Leader election"
  | "Secure serving"
  | "Node controller"
  | "Node IPAM"
  | "Logging"
  | "Subcommand";

/** One flag as the table holds it. */
export interface FlagSpec extends PflagSpec {
  group: Group;
  /** One-line description for the help text. */
  help: string;
  /** The default as the help text shows it. */
  shownDefault?: string;
  /** Set for flags accepted only for compatibility: why they have no effect. */
  ignored?: string;
  /** An ignored flag stays silent when set to exactly this value. */
  quietWhen?: string;
}

// pflag's type names, as `--help` shows them.
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
  int32Slice: "int32Slice",
  mapStringBool: "mapStringBool",
  quantity: "quantity",
  certKey: "namedCertKey",
  version: "version[=true]",
};

/** One flag as a table row: name, kind, default as `--help` shows it ("" for none), description. */
type Row = readonly [name: string, kind: Kind, shownDefault: string, help: string];

// pflag shorthands: only these three exist upstream and in the subcommands.
const SHORTHANDS: Readonly<Record<string, string>> = { help: "h", v: "v", output: "o" };

function group(name: Group, list: readonly Row[]): FlagSpec[] {
  return list.map(([flagName, kind, shownDefault, help]) => {
    const shorthand = Object.hasOwn(SHORTHANDS, flagName) ? SHORTHANDS[flagName] : undefined;
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
  "Controllers to run: '*' is all on-by-default ones (cloud-node, cloud-node-lifecycle), 'foo' enables foo, '-foo' disables it. " +
  "Known: cloud-node, cloud-node-lifecycle, node-csr-approval, nodeipam; route and service are not implemented.";

const WHY_WEBHOOK = "cloud-provider admission webhooks are not implemented";
const WHY_KLOG = "klog flag removed upstream in Kubernetes 1.26; logs always go to stderr";
const WHY_LOG_STREAM = "log lines are written unbuffered to stderr";
const WHY_TLS = "TLS tuning beyond --tls-min-version is not implemented";
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
    [
      "use-service-account-credentials",
      "bool",
      "",
      "Accepted for compatibility: this CCM always acts as its own service account and mints no tokens.",
    ],
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
    [
      "client-ca-file",
      "string",
      "",
      "CA bundle: a client certificate it signed is the user of its CommonName, in the groups of its Organizations.",
    ],
    [
      "requestheader-client-ca-file",
      "string",
      "",
      "CA bundle of front proxies: a request with a certificate it signed names its user in the headers below.",
    ],
    [
      "requestheader-allowed-names",
      "stringSlice",
      "",
      "Common names a front proxy's certificate may have; empty: any that CA signed.",
    ],
    ["requestheader-username-headers", "stringSlice", "[x-remote-user]", "Headers naming the user."],
    ["requestheader-uid-headers", "stringSlice", "", "Headers naming the user's UID."],
    ["requestheader-group-headers", "stringSlice", "[x-remote-group]", "Headers naming the user's groups."],
    [
      "requestheader-extra-headers-prefix",
      "stringSlice",
      "[x-remote-extra-]",
      "Header prefixes naming the user's extra attributes.",
    ],
    [
      "authentication-kubeconfig",
      "string",
      "",
      "Kubeconfig for TokenReviews (default: the main credentials, on a client of its own).",
    ],
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
    ["concurrent-node-syncs", "int32", "16", "Nodes initialized or updated in parallel."],
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
  ...accepted(
    "this CCM never reads the cluster's extension-apiserver-authentication ConfigMap: client certificates " +
      "are trusted only from --client-ca-file and --requestheader-client-ca-file, so nothing published in " +
      "the cluster widens who may call the secure port",
    [
      ["authentication-skip-lookup", "bool"],
      ["authentication-tolerate-lookup-failure", "bool"],
    ],
  ),
  ...accepted(WHY_WEBHOOK, [
    ["webhooks", "stringSlice"],
    ["validation-webhook-config-file", "string"],
    ["webhook-bind-address", "ip"],
    ["webhook-secure-port", "int"],
    ["webhook-cert-dir", "string"],
    ["webhook-tls-cert-file", "string"],
    ["webhook-tls-private-key-file", "string"],
    ["webhook-ca-cert-file", "string"],
    ["webhook-tls-cipher-suites", "stringSlice"],
    ["webhook-tls-curve-preferences", "int32Slice"],
    ["webhook-tls-min-version", "string"],
    ["webhook-tls-sni-cert-key", "certKey"],
    ["webhook-disable-http2-serving", "bool"],
  ]),
  ...accepted("without --tls-cert-file the serving certificate is self-signed in memory", [
    ["cert-dir", "string"],
  ]),
  ...accepted(WHY_TLS, [
    ["tls-cipher-suites", "stringSlice"],
    ["tls-sni-cert-key", "certKey"],
    ["tls-curve-preferences", "int32Slice"],
    ["http2-max-streams-per-connection", "int"],
    ["disable-http2-serving", "bool"],
  ]),
  ...accepted("node status is written by one worker per update (cloud-provider 1.36's flag)", [
    ["concurrent-node-status-updates", "int32"],
  ]),
  ...accepted(WHY_SHARING, [
    ["permit-port-sharing", "bool"],
    ["permit-address-sharing", "bool"],
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
    [
      "workload",
      "string",
      "DaemonSet",
      "DaemonSet (one replica per control-plane node, host network) or Deployment (one replica, pod network, as the Go project's default manifest).",
    ],
    ["talos-patch", "bool", "", "Also print the Talos machine config patch that enables the CCM."],
    [
      "machine-config",
      "string",
      "",
      "A control-plane machine's config: print the Talos patch that installs this release on it, removing the Go CCM's (or an earlier release's) manifests.",
    ],
  ]),
];

const PREFLIGHT_FLAGS: readonly FlagSpec[] = [
  ...COMMON_FLAGS,
  ...group("Subcommand", [
    [
      "kubeconfig",
      "string",
      "",
      "Kubeconfig of the cluster to read; default $KUBECONFIG, else ~/.kube/config.",
    ],
    ["namespace", "string", "kube-system", "Namespace the CCM is installed in."],
    [
      "machine-config",
      "stringSlice",
      "",
      "Control-plane machine configs to check for the Go CCM's manifest URL (repeat, or list with commas).",
    ],
  ]),
];

/** A subcommand, or `run` (the default). */
export type Subcommand = "run" | "validate" | "manifests" | "preflight";

/** The flags of each command, in help-text order. */
export const FLAGSETS: Readonly<Record<Subcommand, readonly FlagSpec[]>> = {
  run: RUN_FLAGS,
  validate: VALIDATE_FLAGS,
  manifests: MANIFESTS_FLAGS,
  preflight: PREFLIGHT_FLAGS,
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
