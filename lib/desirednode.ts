// The desired state of one Node, pure: from the Node as cached, its Talos facts and the rules'
// transform result to the Node as it should be (labels, annotations, taints, providerID, addresses),
// and from there to the writes that bring it there (one status merge patch, one guarded JSON patch).
//
// The cloud-node controller (lib/node.ts) feeds it the facts its watch cache
// (lib/taloswatchcache.ts) holds and the result of lib/transform.ts `transform`, and sends the
// resulting patch; nothing here reads Talos or Kubernetes. desiredNode applies the rules' result
// through lib/transform.ts `planReconcile` and computes the addresses through lib/addresses.ts. The
// cloud-node-lifecycle controller (lib/lifecycle.ts) and the `validate` preview (lib/validate.ts)
// reuse these helpers.

import type { V1Taint } from "@kubernetes/client-node";
import { type NodeIPs, nodeAddresses, nodeIPs } from "./addresses.ts";
import { sameList } from "./lists.ts";
import {
  type ManagedRecordRead,
  planReconcile,
  type ReconcilePlan,
  readManagedRecord,
} from "./managedrecord.ts";
import type { LeanNode } from "./nodeview.ts";
import type { TransformError, TransformResult } from "./transform.ts";
import type { NodeAddress, NodeFacts, PlatformMetadata, Taint } from "./types.ts";
import { UNINITIALIZED_TAINT } from "./wellknown.ts";
/** Labels the cloud-node controller writes besides the rules' own. */
export const LABELS = {
  platform: "node.cloudprovider.kubernetes.io/platform",
  clusterName: "node.cloudprovider.kubernetes.io/clustername",
  lifecycle: "node.cloudprovider.kubernetes.io/lifecycle",
  region: "topology.kubernetes.io/region",
  regionBeta: "failure-domain.beta.kubernetes.io/region",
  zone: "topology.kubernetes.io/zone",
  zoneBeta: "failure-domain.beta.kubernetes.io/zone",
  instanceType: "node.kubernetes.io/instance-type",
  instanceTypeBeta: "beta.kubernetes.io/instance-type",
} as const;

/** GA topology labels and the legacy ones the framework keeps in step with them (legacy is the source). */
const LEGACY_PAIRS = [
  [LABELS.zoneBeta, LABELS.zone],
  [LABELS.regionBeta, LABELS.region],
  [LABELS.instanceTypeBeta, LABELS.instanceType],
] as const;

/** The providerID scheme of nodes whose metadata has none (`talos://<platform>/<node IP>`). */
export const PROVIDER_NAME = "talos";

/** The reference's providerID for a node whose metadata has none: `talos://<platform>/<node IP>`. */
export function fallbackProviderID(platform: string, nodeIP: string): string {
  return `${PROVIDER_NAME}://${platform}/${nodeIP}`;
}

// From cloud-provider-azure: the resource group is the part between resourceGroups/ and /providers/.
const AZURE_RESOURCE_GROUP = /.*\/subscriptions\/(?:.*)\/resourceGroups\/(.+)\/providers\/(?:.*)/;

/**
 * The facts as the reference hands them to the rules: providerId defaulted to
 * `talos://<platform>/<nodeIP>`, the Azure resource group lower-cased (Talos before 1.8 kept the
 * user's case, which Azure's own controllers do not match), the hostname defaulted to the node name.
 * An Azure providerId in another format is kept as is (the reference refuses to initialize it).
 * @param nodeIP the IP Talos answered on.
 */
export function instanceFacts(facts: NodeFacts, nodeIP: string, nodeName: string): NodeFacts {
  const meta: PlatformMetadata = { ...facts.platformMetadata, tags: { ...facts.platformMetadata.tags } };
  if (meta.providerId === "") meta.providerId = fallbackProviderID(meta.platform, nodeIP);
  if (meta.platform === "azure") {
    const group = AZURE_RESOURCE_GROUP.exec(meta.providerId)?.[1];
    if (group !== undefined) meta.providerId = meta.providerId.replace(group, group.toLowerCase());
  }
  if (meta.hostname === "") meta.hostname = nodeName;
  return { ...facts, platformMetadata: meta };
}

/** Whether the Node still waits for its cloud initialization. */
export function isUninitialized(node: LeanNode): boolean {
  return node.spec.taints.some((t) => t.key === UNINITIALIZED_TAINT);
}

/** Whether the Node belongs to another cloud provider: it has a providerID not of scheme `talos…`. */
export function isForeign(node: LeanNode): boolean {
  const providerID = node.spec.providerID ?? "";
  return providerID !== "" && !providerID.startsWith(PROVIDER_NAME);
}

/** Settings {@link desiredNode} takes from the `global` config section and the talosconfig. */
export interface DesiredOptions {
  preferIPv6: boolean;
  /** `global.reconcile`. */
  reconcile: boolean;
  /** `global.skipForeignNode`: nodes whose providerID is not `talos…` only get their addresses. */
  skipForeignNode: boolean;
  /** `global.clusterName`, else the talosconfig context's cluster; "" writes no label. */
  clusterName: string;
}

/** The parts of a Node this controller owns, as they should be. */
export interface DesiredNode {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: V1Taint[];
  /** Set only while the Node has none (the API server refuses to change it afterwards). */
  providerID?: string;
  addresses: NodeAddress[];
}

/** The reference's own labels: platform, spot lifecycle, cluster name (non-empty values only). */
function talosLabels(meta: PlatformMetadata, clusterName: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (meta.platform !== "") out[LABELS.platform] = meta.platform;
  if (meta.spot) out[LABELS.lifecycle] = "spot";
  if (clusterName !== "") out[LABELS.clusterName] = clusterName;
  return out;
}

/** The framework's labels: GA and legacy region, zone and instance type (non-empty values only). */
function topologyLabels(meta: PlatformMetadata): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [value, ga, legacy] of [
    [meta.region, LABELS.region, LABELS.regionBeta],
    [meta.zone, LABELS.zone, LABELS.zoneBeta],
    [meta.instanceType, LABELS.instanceType, LABELS.instanceTypeBeta],
  ] as const) {
    if (value === "") continue;
    out[ga] = value;
    out[legacy] = value;
  }
  return out;
}

/**
 * The Node as it should be, from its current state, its facts (see {@link instanceFacts}) and the
 * rules' result. Follows the reference and the framework it embeds:
 * - the record of what the rules put there, and its digest label: only a record whose digest
 *   matches is believed ({@link readManagedRecord}); otherwise nothing it names is removed and it
 *   is rebuilt from this result.
 * - labels: the rules' (through {@link planReconcile}), the platform/lifecycle/clustername labels
 *   (a rule's label of the same key wins), and at initialization the GA and legacy topology and
 *   instance-type labels; later only the legacy → GA sync of upstream `reconcileNodeLabels`. In
 *   reconcile mode the topology labels follow the facts at every pass.
 * - annotations and taints: the rules' (taints only at initialization, unless reconcile mode);
 *   the uninitialized taint goes.
 * - providerID: only when the Node has none.
 * - addresses: {@link nodeAddresses} of `ips`.
 * A foreign node (`skipForeignNode`, providerID not `talos…`) only gets its addresses.
 * @param ips the node IPs to write as InternalIPs: the controller passes {@link nodeIPs} of the Node
 *   less those the machine Talos confirmed does not have ({@link nodeIPsOnMachine}); by default all
 *   of them (previews, which know no machine).
 * @param managed the Node's record as {@link readManagedRecord} reads it (a controller that also
 *   reports its problem reads it once).
 */
export function desiredNode(
  node: LeanNode,
  facts: NodeFacts,
  result: TransformResult,
  opts: DesiredOptions,
  ips: NodeIPs = nodeIPs(
    { annotations: node.metadata.annotations, addresses: node.status.addresses },
    opts.preferIPv6,
  ),
  managed: ManagedRecordRead = readManagedRecord(node.metadata),
): DesiredNode {
  const initializing = isUninitialized(node);
  const meta = result.platformMetadata;
  const want: DesiredNode = {
    labels: { ...node.metadata.labels },
    annotations: { ...node.metadata.annotations },
    taints: node.spec.taints.filter((t) => t.key !== UNINITIALIZED_TAINT),
    addresses: nodeAddresses({
      nodeName: node.metadata.name,
      platform: meta.platform,
      hostname: facts.platformMetadata.hostname || node.metadata.name,
      nodeIPs: ips,
      addresses: facts.addresses,
      preferIPv6: opts.preferIPv6,
      publicIPDiscovery: result.features.publicIPDiscovery,
    }),
  };
  if (opts.skipForeignNode && isForeign(node)) return want;

  const plan = planReconcile(
    managed.record,
    result,
    {
      labels: node.metadata.labels,
      annotations: node.metadata.annotations,
      taints: want.taints as Taint[],
    },
    { reconcile: opts.reconcile, initializing },
  );

  applyLabels(want.labels, plan, result, opts.clusterName, initializing || opts.reconcile);
  for (const k of plan.removeAnnotations) delete want.annotations[k];
  Object.assign(want.annotations, plan.setAnnotations);
  want.taints = applyTaints(want.taints, plan);
  if ((node.spec.providerID ?? "") === "" && meta.providerId !== "") want.providerID = meta.providerId;
  return want;
}

/**
 * The labels step of {@link desiredNode}, on `labels` in place: the plan's, then the
 * platform/lifecycle/clustername labels (a rule's label of the same key wins), then either the
 * topology labels from the facts (`topology`: at initialization or in reconcile mode) or the
 * legacy → GA sync of upstream `reconcileNodeLabels`.
 */
function applyLabels(
  labels: Record<string, string>,
  plan: ReconcilePlan,
  result: TransformResult,
  clusterName: string,
  topology: boolean,
): void {
  const meta = result.platformMetadata;
  for (const k of plan.removeLabels) delete labels[k];
  Object.assign(labels, plan.setLabels);
  for (const [k, v] of Object.entries(talosLabels(meta, clusterName))) {
    if (!Object.hasOwn(result.labels, k)) labels[k] = v;
  }
  if (topology) Object.assign(labels, topologyLabels(meta));
  else {
    for (const [legacy, ga] of LEGACY_PAIRS) {
      const v = labels[legacy];
      if (v !== undefined) labels[ga] = v;
    }
  }
}

/**
 * The taints step of {@link desiredNode}: `taints` less the plan's removals, with its additions
 * (each replaces the taint of the same key and effect in place, or is appended).
 */
function applyTaints(taints: readonly V1Taint[], plan: ReconcilePlan): V1Taint[] {
  const gone = (t: V1Taint) => plan.removeTaints.some((r) => r.key === t.key && r.effect === t.effect);
  const out = taints.filter((t) => !gone(t));
  for (const t of plan.addTaints) {
    const at = out.findIndex((x) => x.key === t.key && x.effect === t.effect);
    if (at >= 0) out[at] = t;
    else out.push(t);
  }
  return out;
}

/** One JSON Patch (RFC 6902) operation. */
export interface JsonPatchOp {
  op: "add" | "remove" | "test";
  path: string;
  value?: unknown;
}

/** The writes that bring a Node to its desired state; nothing to write when both are absent. */
export interface NodePatch {
  /** New `status.addresses`, for a merge patch of the status subresource. */
  addresses?: NodeAddress[];
  /** A JSON patch of metadata and spec; empty when they are as desired. */
  ops: JsonPatchOp[];
}

/** RFC 6901 escaping of one path segment (label keys contain `/`). */
function pointer(segment: string): string {
  return segment.replaceAll("~", "~0").replaceAll("/", "~1");
}

function diffMap(
  path: string,
  have: Readonly<Record<string, string>>,
  want: Readonly<Record<string, string>>,
  ops: JsonPatchOp[],
): void {
  const set = Object.entries(want).filter(([k, v]) => have[k] !== v);
  const remove = Object.keys(have).filter((k) => !Object.hasOwn(want, k));
  if (Object.keys(have).length === 0) {
    // The map is absent on the server: add it whole, unless someone added it meanwhile.
    if (set.length > 0)
      ops.push({ op: "test", path, value: null }, { op: "add", path, value: Object.fromEntries(set) });
    return;
  }
  for (const [k, v] of set) ops.push({ op: "add", path: `${path}/${pointer(k)}`, value: v });
  for (const k of remove) ops.push({ op: "remove", path: `${path}/${pointer(k)}` });
}

/** Taints are equal when key, value, effect and timeAdded are. */
function sameTaint(a: V1Taint, b: V1Taint): boolean {
  return (
    a.key === b.key &&
    (a.value ?? "") === (b.value ?? "") &&
    a.effect === b.effect &&
    JSON.stringify(a.timeAdded ?? null) === JSON.stringify(b.timeAdded ?? null)
  );
}

function sameAddress(a: NodeAddress, b: { type: string; address: string }): boolean {
  return a.type === b.type && a.address === b.address;
}

/**
 * The writes from `node` to `want`. Metadata and spec go in ONE JSON patch, so labels, annotations,
 * taints and providerID land together with the removal of the uninitialized taint: nothing is
 * written after it, and a failed write leaves the node tainted. Labels and annotations are patched
 * key by key, so concurrent writers of other keys are never overwritten. The taint list can only be
 * replaced as a whole, so a `test` of the list this decision was based on guards it: if anyone
 * changed the taints meanwhile the whole patch fails (422) and the reconcile retries on fresh data.
 * (A strategic merge would need no guard, but merges taints by key alone and so confuses taints of
 * one key with different effects.) providerID is tested absent, matching the API server's
 * "set once" rule. Addresses replace the status list with a merge patch, as upstream's status
 * patch does; they are the CCM's once a node is initialized (kubelets stop writing them).
 */
export function nodePatch(node: LeanNode, want: DesiredNode): NodePatch {
  const ops: JsonPatchOp[] = [];
  diffMap("/metadata/labels", node.metadata.labels, want.labels, ops);
  diffMap("/metadata/annotations", node.metadata.annotations, want.annotations, ops);
  if (want.providerID !== undefined && want.providerID !== (node.spec.providerID ?? "")) {
    ops.push(
      { op: "test", path: "/spec/providerID", value: null },
      { op: "add", path: "/spec/providerID", value: want.providerID },
    );
  }
  if (!sameList(node.spec.taints, want.taints, sameTaint)) {
    ops.push({
      op: "test",
      path: "/spec/taints",
      value: node.spec.taints.length > 0 ? node.spec.taints : null,
    });
    ops.push(
      want.taints.length > 0
        ? { op: "add", path: "/spec/taints", value: want.taints }
        : { op: "remove", path: "/spec/taints" },
    );
  }
  const patch: NodePatch = { ops };
  if (!sameList(want.addresses, node.status.addresses, sameAddress)) patch.addresses = want.addresses;
  return patch;
}

/** `rule "name"`, with the nodeSelector term that matched when it is named. */
function ruleLabel(e: Pick<TransformError, "rule" | "term">): string {
  const rule = `rule ${JSON.stringify(e.rule)}`;
  return e.term === undefined ? rule : `${rule} (term ${JSON.stringify(e.term)})`;
}

/** One line per value a rule could not apply, for the Node's Event. */
export function describeTransformErrors(errors: readonly TransformError[]): string {
  return errors.map((e) => `${ruleLabel(e)} ${e.field}[${JSON.stringify(e.key)}]: ${e.reason}`).join("; ");
}
