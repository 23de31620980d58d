// Deployment manifests, the one source of truth for installing this CCM: its ServiceAccount, the
// talos.dev/v1alpha1 ServiceAccount that makes Talos issue it a talosconfig, least-privilege RBAC sized
// by the enabled controllers (lib/rbacgrants.ts), the cloud-config ConfigMap, a headless metrics
// Service and the DaemonSet (or, for the release's second raw manifest, a Deployment), as objects and
// as commented YAML. The Talos patch that installs them is lib/talospatch.ts's, deploy/'s generated
// files lib/deployfiles.ts's; the `manifests` subcommand (lib/manifestscommand.ts) prints them. Pure.

import { Document, isMap, isScalar, isSeq, type Node } from "yaml";
import { type ControllerName, Controllers } from "./controllernames.ts";
import { type ManifestsOptions, parseCommandLine } from "./flags.ts";
import { PROGRAM_NAME } from "./help.ts";
import { ROLES, type RoleSpec, rbacGrants, rulesFor } from "./rbacgrants.ts";
import {
  NOT_READY_TAINT_KEY,
  SERVICE_ACCOUNT_TALOSCONFIG,
  TALOS_SECRET_DIR,
  UNINITIALIZED_TAINT,
} from "./wellknown.ts";

const { nodeCsrApproval, nodeIpam } = Controllers;

/** Name of the DaemonSet, its ServiceAccount, ConfigMap and Service (the reference's names). */
export const APP_NAME = "talos-cloud-controller-manager";

/** The release's manifest files by workload (build.ts attaches them to a release). */
export const RELEASE_MANIFEST_FILES = {
  DaemonSet: `${APP_NAME}-daemonset.yaml`,
  Deployment: `${APP_NAME}-deployment.yaml`,
} as const;

/** Where release images are published; the tag is `v<version>`. */
const IMAGE_REPOSITORY = "ghcr.io/talos-ccm/talos-cloud-controller-manager";

/** HTTPS port of health and metrics: the reference manifests' 50258, so probes and scrapers keep working. */
export const SECURE_PORT = 50258;

/** The Lease the replicas elect a leader with (the reference's `--leader-elect-resource-name`). */
export const LEASE_NAME = "cloud-controller-manager-talos";

/** Name of the talos.dev ServiceAccount, and of the Secret Talos creates for it. */
export const TALOS_SECRET_NAME = `${APP_NAME}-talos-secrets`;

/** Where the Talos Secret is mounted: the directory lib/talosconfig.ts reads the talosconfig from by default. */
export { TALOS_SECRET_DIR };

/** Path of the executable in the image (deploy/Dockerfile copies it there). */
export const BINARY_PATH = `/${APP_NAME}`;

/** uid and gid `nonroot` of the distroless base image. */
export const NONROOT_ID = 65532;

const CONFIG_DIR = "/etc/talos";
const CONFIG_KEY = "ccm-config.yaml";

/**
 * The ccm-config.yaml of the default ConfigMap: every setting, commented out, and an example rule.
 * Parses as the empty configuration.
 */
export const DEFAULT_CLOUD_CONFIG = `# talos-cloud-controller-manager configuration. Every key is optional. Check a change with
#   ${PROGRAM_NAME} validate --cloud-config ccm-config.yaml [--metadata node.yaml]
# The CCM reloads this file when the ConfigMap changes; a version with errors is logged and ignored.
global:
  # Value of the node.cloudprovider.kubernetes.io/clustername label; default: the talosconfig's cluster.
  # clusterName: my-cluster
  # Put a dual-stack node's IPv6 address before its IPv4 one.
  # preferIPv6: false
  # Also remove the labels, annotations and taints that the rules below no longer produce.
  # reconcile: false
# Rules applied in order to every node they select. Values are Go templates over the node's Talos
# PlatformMetadata (.Platform .Hostname .Region .Zone .InstanceType .InstanceID .ProviderID .Spot
# .InternalDNS .ExternalDNS .Tags) and SystemInformation (.Manufacturer .ProductName .Version
# .SerialNumber .UUID .WakeUpType .SKUNumber).
# transformations:
#   - name: web
#     nodeSelector:
#       - matchExpressions:
#           - key: hostname
#             operator: Regexp
#             values: ["^web-.+$"]
#     labels:
#       node-role.kubernetes.io/web: ""
#     annotations:
#       example.com/instance-id: "{{ .InstanceID }}"
#     taints:
#       example.com/dedicated: "web:NoSchedule"
#     platformMetadata:
#       Zone: "{{ .Region }}-a"
#     features:
#       publicIPDiscovery: true
`;

// ---------------------------------------------------------------------------------------------------
// What goes into the manifests

/** What the manifests are made from; {@link ManifestsOptions} with the cloud config read. */
export interface ManifestSettings {
  /** Release version: the default image's tag and the `app.kubernetes.io/version` label. */
  version: string;
  /** Container image; default {@link defaultImage}. */
  image?: string | undefined;
  /** `--controllers` as given; the DaemonSet passes it on unchanged. */
  controllers: readonly string[];
  /** The controllers `controllers` enables: they size RBAC and the Talos patch. */
  enabledControllers: readonly ControllerName[];
  /** Namespace of everything namespaced, and of the Lease. */
  namespace: string;
  /** ccm-config.yaml to embed in the ConfigMap; default {@link DEFAULT_CLOUD_CONFIG}. */
  cloudConfig?: string | undefined;
  /**
   * How the CCM runs; default `DaemonSet`: one replica per control-plane node on the host network,
   * talking to its own node's API server and apid. `Deployment`: one replica on the pod network,
   * through the kubernetes Service and the talosconfig's endpoints, as the Go project's
   * docs/deploy/cloud-controller-manager.yml (it needs a CNI).
   */
  workload?: Workload | undefined;
}

/** The kinds of workload the manifests can run the CCM as. */
export type Workload = "DaemonSet" | "Deployment";

/**
 * The container's resources, sized from `npm run bench` (README "Sizing"): the request covers the
 * peak of 1,000 nodes joining at once (87.5 MiB RSS), the limit that of 5,000 (142.9 MiB) with room
 * to spare; the binary tells JSC the limit is its RAM, so its heap is sized to it. 0 OOM kills at
 * 1,000 nodes under 128 MiB, at 5,000 under 192 and 256 MiB.
 */
export const CCM_RESOURCES = {
  requests: { cpu: "10m", memory: "128Mi" },
  limits: { memory: "256Mi" },
} as const;

/**
 * The release image of `version`: tagged `v<version>` for a release, `edge` for a source build.
 * @example defaultImage("0.1.0") // "ghcr.io/talos-ccm/talos-cloud-controller-manager:v0.1.0"
 */
export function defaultImage(version: string): string {
  return `${IMAGE_REPOSITORY}:${/^\d+\.\d+\.\d+/.test(version) ? `v${version}` : "edge"}`;
}

/** The settings of `manifests` without flags: the reference DaemonSet's controllers in kube-system. */
export function defaultSettings(version: string): ManifestSettings {
  const parsed = parseCommandLine(["manifests"]);
  if (parsed.command !== "manifests") throw new Error("Cannot resolve the manifests subcommand's defaults");
  return { ...settingsFrom(parsed.options), version };
}

/** The settings of `manifests`' flags, with the cloud config to embed. */
export function settingsFrom(
  opts: ManifestsOptions,
  cloudConfig?: string,
): Omit<ManifestSettings, "version"> {
  return {
    image: opts.image,
    controllers: opts.controllers,
    enabledControllers: opts.enabledControllers,
    namespace: opts.namespace,
    cloudConfig,
    workload: opts.workload,
  };
}

// ---------------------------------------------------------------------------------------------------
// Objects

/** A Kubernetes object as plain data. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** One manifest: an object and the comments printed with it. */
export interface Manifest {
  object: KubeObject;
  /** Printed above the object. */
  comment?: string;
  /** Printed above the field at each path (map keys and list indexes). */
  notes?: { path: readonly (string | number)[]; text: string }[];
}

function imageTag(image: string): string {
  const slash = image.lastIndexOf("/");
  const colon = image.lastIndexOf(":");
  return colon > slash ? image.slice(colon + 1).replace(/@.*$/, "") : "latest";
}

/** Whether any enabled controller cannot work without the Talos API (CSR approval can). */
function needsTalos(enabled: readonly ControllerName[]): boolean {
  return enabled.some((c) => c !== nodeCsrApproval);
}

/** The container's arguments: the reference DaemonSet's, less what this project does not need. */
export function daemonSetArgs(s: ManifestSettings): string[] {
  return [
    "--v=2",
    "--cloud-provider=talos",
    `--cloud-config=${CONFIG_DIR}/${CONFIG_KEY}`,
    `--controllers=${s.controllers.join(",")}`,
    `--leader-elect-resource-name=${LEASE_NAME}`,
    `--leader-elect-resource-namespace=${s.namespace}`,
    `--secure-port=${SECURE_PORT}`,
    "--authorization-always-allow-paths=/healthz,/livez,/readyz",
    ...(s.enabledControllers.includes(nodeIpam) ? ["--allocate-node-cidrs"] : []),
  ];
}

/** What every object of one installation shares: its settings, image and labels. */
interface Install {
  s: ManifestSettings;
  image: string;
  /** The pods' selector labels. */
  selector: Record<string, string>;
  /** Every object's labels. */
  labels: Record<string, string>;
  /** Whether the Talos secret is required (some enabled controller cannot work without Talos). */
  talosRequired: boolean;
  /** Whether the pods run on their node's host network, talking to that node's API server and apid. */
  hostNetwork: boolean;
}

function install(s: ManifestSettings): Install {
  const image = s.image ?? defaultImage(s.version);
  const selector = { "app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": APP_NAME };
  const labels = { ...selector, "app.kubernetes.io/version": imageTag(image) };
  const hostNetwork = (s.workload ?? "DaemonSet") === "DaemonSet";
  return { s, image, selector, labels, talosRequired: needsTalos(s.enabledControllers), hostNetwork };
}

function meta(at: Install, name: string, namespace?: string): KubeObject["metadata"] {
  return { name, ...(namespace === undefined ? {} : { namespace }), labels: at.labels };
}

/** A Role or ClusterRole holding the grants of one scope, and its binding to the ServiceAccount. */
function role(at: Install, spec: RoleSpec, rules: ReturnType<typeof rulesFor>): Manifest[] {
  const { kind } = spec;
  const name = `${spec.prefix}${APP_NAME}${spec.suffix}`;
  const namespace = spec.namespace === null ? at.s.namespace : spec.namespace;
  const rbac = "rbac.authorization.k8s.io";
  const subjects = [{ kind: "ServiceAccount", name: APP_NAME, namespace: at.s.namespace }];
  const metadata = meta(at, name, namespace);
  return [
    {
      comment: spec.comment,
      object: { apiVersion: `${rbac}/v1`, kind, metadata, rules: rules.map((r) => r.rule) },
      notes: rules.map((r, i) => ({ path: ["rules", i], text: r.why })),
    },
    {
      object: {
        apiVersion: `${rbac}/v1`,
        kind: kind === "ClusterRole" ? "ClusterRoleBinding" : "RoleBinding",
        metadata,
        roleRef: { apiGroup: rbac, kind, name },
        subjects,
      },
    },
  ];
}

/** The RBAC objects: one role per grant scope in use. */
function rbacManifests(at: Install): Manifest[] {
  const grants = rbacGrants(at.s.enabledControllers, LEASE_NAME);
  return ROLES.flatMap((spec) => {
    const rules = rulesFor(grants.filter((g) => g.scope === spec.scope));
    return rules.length === 0 ? [] : role(at, spec, rules);
  });
}

/** The ServiceAccounts (Kubernetes and Talos) and the ConfigMap holding the cloud config. */
function identityManifests(at: Install): Manifest[] {
  const ns = at.s.namespace;
  return [
    { object: { apiVersion: "v1", kind: "ServiceAccount", metadata: meta(at, APP_NAME, ns) } },
    {
      comment:
        " Talos answers this (machine.features.kubernetesTalosAPIAccess, role os:reader allowed for this\n" +
        ` namespace) with a Secret of the same name holding a talosconfig, mounted at ${TALOS_SECRET_DIR}.`,
      object: {
        apiVersion: "talos.dev/v1alpha1",
        kind: "ServiceAccount",
        metadata: meta(at, TALOS_SECRET_NAME, ns),
        spec: { roles: ["os:reader"] },
      },
    },
    {
      object: {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: meta(at, APP_NAME, ns),
        data: { [CONFIG_KEY]: at.s.cloudConfig ?? DEFAULT_CLOUD_CONFIG },
      },
    },
  ];
}

/** The headless Service in front of /metrics. */
function metricsService(at: Install): Manifest {
  return {
    comment:
      " For Prometheus. /metrics needs a bearer token whose identity may get the non-resource URL\n" +
      " /metrics, e.g. a ClusterRole with rules [{nonResourceURLs: [/metrics], verbs: [get]}] bound to\n" +
      " the scraper's ServiceAccount; the certificate is self-signed unless --tls-cert-file is given.",
    object: {
      apiVersion: "v1",
      kind: "Service",
      metadata: meta(at, APP_NAME, at.s.namespace),
      spec: {
        clusterIP: "None",
        selector: at.selector,
        ports: [{ name: "metrics", port: SECURE_PORT, targetPort: "metrics", protocol: "TCP" }],
      },
    },
  };
}

/** The CCM's container: non-root, read-only, talking to its own node's apid and API server. */
function container(at: Install): Record<string, unknown> {
  const probe = (path: string) => ({ path, port: "metrics", scheme: "HTTPS" });
  return {
    name: APP_NAME,
    image: at.image,
    imagePullPolicy: "IfNotPresent",
    command: [BINARY_PATH],
    args: daemonSetArgs(at.s),
    env: at.hostNetwork
      ? [
          { name: "TALOS_ENDPOINTS", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
          { name: "TALOSCONFIG", value: SERVICE_ACCOUNT_TALOSCONFIG },
          { name: "KUBERNETES_SERVICE_HOST", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
          { name: "KUBERNETES_SERVICE_PORT", value: "6443" },
        ]
      : [{ name: "TALOSCONFIG", value: SERVICE_ACCOUNT_TALOSCONFIG }],
    ports: [{ name: "metrics", containerPort: SECURE_PORT, protocol: "TCP" }],
    livenessProbe: {
      httpGet: probe("/livez"),
      initialDelaySeconds: 20,
      periodSeconds: 30,
      timeoutSeconds: 5,
    },
    readinessProbe: { httpGet: probe("/readyz"), periodSeconds: 10, timeoutSeconds: 5 },
    resources: CCM_RESOURCES,
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    },
    volumeMounts: [
      { name: "cloud-config", mountPath: CONFIG_DIR, readOnly: true },
      { name: "talos-secrets", mountPath: TALOS_SECRET_DIR, readOnly: true },
    ],
  };
}

/**
 * The pod: on control-plane nodes, non-root, the config and Talos secret mounted; on the host network
 * (and then tolerating not-ready nodes, since it works before any CNI) for a DaemonSet.
 */
function podSpec(at: Install): Record<string, unknown> {
  return {
    serviceAccountName: APP_NAME,
    ...(at.hostNetwork ? { hostNetwork: true, dnsPolicy: "ClusterFirstWithHostNet" } : {}),
    priorityClassName: "system-cluster-critical",
    nodeSelector: { "node-role.kubernetes.io/control-plane": "" },
    tolerations: [
      { key: "node-role.kubernetes.io/control-plane", operator: "Exists", effect: "NoSchedule" },
      { key: UNINITIALIZED_TAINT, operator: "Exists", effect: "NoSchedule" },
      ...(at.hostNetwork ? [{ key: NOT_READY_TAINT_KEY, operator: "Exists", effect: "NoSchedule" }] : []),
    ],
    securityContext: {
      runAsNonRoot: true,
      runAsUser: NONROOT_ID,
      runAsGroup: NONROOT_ID,
      fsGroup: NONROOT_ID,
      fsGroupChangePolicy: "OnRootMismatch",
    },
    containers: [container(at)],
    volumes: [
      { name: "cloud-config", configMap: { name: APP_NAME, defaultMode: 0o640 } },
      {
        name: "talos-secrets",
        secret: {
          secretName: TALOS_SECRET_NAME,
          defaultMode: 0o640,
          ...(at.talosRequired ? {} : { optional: true }),
        },
      },
    ],
  };
}

/** The comments printed inside the DaemonSet or Deployment, at the fields they explain. */
function workloadNotes(at: Install): NonNullable<Manifest["notes"]> {
  const podPath = ["spec", "template", "spec"];
  const containerPath = [...podPath, "containers", 0];
  return [
    {
      path: [...containerPath, "args"],
      text:
        " No --use-service-account-credentials: this CCM acts with its own ServiceAccount only, so it\n" +
        " needs no permission to mint tokens (the flag is still accepted). /metrics is not always\n" +
        " allowed: scrapers authenticate with a token.",
    },
    {
      path: [...containerPath, "env"],
      text: at.hostNetwork
        ? " This node's apid and API server (Talos serves it on 6443 on every control-plane node)."
        : " The endpoints of the talosconfig Talos issues, and the API server through the kubernetes Service.",
    },
    { path: [...podPath, "volumes"], text: " Mode 0640: readable through the pod's fsGroup only." },
    ...(at.talosRequired
      ? []
      : [
          {
            path: [...podPath, "volumes", 1, "secret", "optional"],
            text: " CSR approval works without Talos API access (IP SANs are checked against Node status).",
          },
        ]),
  ];
}

function daemonSet(at: Install): Manifest {
  return {
    comment:
      " One replica per control-plane node on the host network, talking to the API server and apid of\n" +
      " its own node, so it works before any CNI is up; the replicas elect a leader.",
    object: {
      apiVersion: "apps/v1",
      kind: "DaemonSet",
      metadata: meta(at, APP_NAME, at.s.namespace),
      spec: {
        selector: { matchLabels: at.selector },
        updateStrategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1 } },
        template: { metadata: { labels: at.labels }, spec: podSpec(at) },
      },
    },
    notes: workloadNotes(at),
  };
}

function deployment(at: Install): Manifest {
  return {
    comment:
      " One replica on the pod network (it needs a CNI), talking to the API server through the kubernetes\n" +
      " Service and to apid through the talosconfig's endpoints; a rollout stops the old pod before it\n" +
      " starts the new one (maxSurge 0).",
    object: {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: meta(at, APP_NAME, at.s.namespace),
      spec: {
        replicas: 1,
        strategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1, maxSurge: 0 } },
        selector: { matchLabels: at.selector },
        template: { metadata: { labels: at.labels }, spec: podSpec(at) },
      },
    },
    notes: workloadNotes(at),
  };
}

/**
 * Every object of an installation, in apply order, with comments.
 * @example manifests(defaultSettings("0.1.0")).map((m) => m.object.kind)
 */
export function manifests(s: ManifestSettings): Manifest[] {
  const at = install(s);
  const workload = at.hostNetwork ? daemonSet(at) : deployment(at);
  return [...identityManifests(at), ...rbacManifests(at), metricsService(at), workload];
}

// ---------------------------------------------------------------------------------------------------
// Rendering

function annotate(doc: Document, path: readonly (string | number)[], text: string): void {
  const key = path.at(-1);
  const parent = path.length === 1 ? doc.contents : doc.getIn(path.slice(0, -1), true);
  let target: Node | undefined;
  if (isMap(parent)) {
    const pair = parent.items.find((p) => isScalar(p.key) && p.key.value === key);
    target = isScalar(pair?.key) ? pair.key : undefined;
  } else if (isSeq(parent) && typeof key === "number") {
    target = parent.items[key] as Node | undefined;
  }
  if (target === undefined) throw new Error(`Cannot annotate ${path.join(".")}: no such field`);
  target.commentBefore = text;
}

/** One object as a YAML document: `comment` above it, `notes` above the fields they name. */
export function renderDocument(value: object, comment?: string, notes: Manifest["notes"] = []): string {
  // Shared objects (labels) are written out in full: no YAML anchors in Kubernetes manifests.
  const doc = new Document(value, { aliasDuplicateObjects: false });
  const first = Object.keys(value)[0];
  // On the first key rather than the document, which would put a blank line after it.
  if (comment !== undefined && first !== undefined) annotate(doc, [first], comment);
  for (const n of notes) annotate(doc, n.path, n.text);
  return doc.toString({ lineWidth: 0 });
}

function header(s: ManifestSettings): string {
  return [
    `# ${PROGRAM_NAME} ${s.version}, printed by \`${PROGRAM_NAME} manifests\``,
    `#   --controllers=${s.controllers.join(",")} --namespace=${s.namespace}`,
    "# Needs, on control-plane nodes, Talos API access from Kubernetes (role os:reader for this",
    "# namespace) and, on every node, kubelets run with --cloud-provider=external: `manifests --talos-patch`",
    "# prints a Talos machine-config patch with both and these manifests.",
  ].join("\n");
}

/**
 * The manifests as one multi-document YAML stream for `kubectl apply -f`.
 * @example renderManifests(defaultSettings("0.1.0")).startsWith("# talos-cloud-controller-manager") // true
 */
export function renderManifests(s: ManifestSettings): string {
  const docs = manifests(s).map((m) => `---\n${renderDocument(m.object, m.comment, m.notes)}`);
  return `${header(s)}\n${docs.join("")}`;
}
