// One Node's decision, pure: from the Node as cached and its Talos facts to the writes that bring it
// where it should be. {@link decideNode} is the one call; a reader follows it top to bottom:
//   1. the facts as the rules see them ({@link instanceFacts}: providerID fallback, Azure group case,
//      hostname);
//   2. the rules (lib/transform.ts transform, called once);
//   3. the providerID ({@link decideProviderID}: keep, write, or wait for the instance ID);
//   4. the addresses (lib/addresses.ts decideAddresses, called once: the node IPs the confirmed
//      machine has, and the status list);
//   5. labels, annotations and taints through reconcile mode's record ({@link planReconcile}; the
//      record's format is lib/managedrecord.ts);
//   6. the patch ({@link nodePatch}: one status merge patch, one guarded JSON patch).
// Nothing here reads Talos, Kubernetes or the clock (a clock to time the rules is passed in). The
// cloud-node controller (lib/node.ts) calls it and sends the patch; the `validate` preview
// (lib/validatereport.ts) calls it on a sample; cloud-node-lifecycle (lib/lifecycle.ts) reuses the helpers.

import type { V1Taint } from "@kubernetes/client-node";
import { type AddressDecision, decideAddresses } from "./addresses.ts";
import type { CompiledConfig } from "./config.ts";
import { dict, own } from "./dict.ts";
import { namesInstances, PLATFORMS_NAMING_INSTANCES, type PlatformSource } from "./instanceid.ts";
import {
  type ManagedRecord,
  type ManagedRecordRead,
  type NodeState,
  type RecordMarks,
  recordMarks,
  taintId,
} from "./managedrecord.ts";
import type { LeanNode, NodeIPs } from "./nodeview.ts";
import { sameList } from "./samelist.ts";
import { type TransformError, type TransformResult, transform } from "./transform.ts";
import type { NodeAddress, NodeFacts, PlatformMetadata, Taint } from "./types.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL, UNINITIALIZED_TAINT } from "./wellknown.ts";

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
  // Tags are keyed by the machine's Talos: a null-prototype copy keeps `constructor` or `__proto__` data.
  const tags: Record<string, string> = Object.assign(Object.create(null), facts.platformMetadata.tags);
  const meta: PlatformMetadata = { ...facts.platformMetadata, tags };
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

// ---------------------------------------------------------------------------------------------
// The decision: one call from the Node and its facts to the patch.

/** What {@link decideNode} decides from. */
export interface NodeDecisionInput {
  node: LeanNode;
  /** The node's IPs as the Node states them (lib/nodeview.ts nodeIPs). */
  ips: NodeIPs;
  /** The machine's facts as Talos published them. */
  facts: NodeFacts;
  /** The IP on which Talos confirmed the node's name (and the fallback providerID's IP). */
  nodeIP: string;
  /** The Node's record, read with the Node (lib/managedrecord.ts readManagedRecord). */
  managed: ManagedRecordRead;
  config: {
    transformations: CompiledConfig["transformations"];
    global: Pick<CompiledConfig["global"], "preferIPv6" | "reconcile" | "skipForeignNode" | "clusterName">;
  };
  /** The talosconfig context's cluster name: the label's value when `global.clusterName` is "". */
  clusterName: string;
}

/** What {@link decideNode} decided, with what the caller reports. */
export interface NodeDecision {
  /** The facts as the rules saw them ({@link instanceFacts}). */
  facts: NodeFacts;
  /** The rules' result (its errors are the values they skipped; Events report them). */
  rules: TransformResult;
  /** How long the rules took, in ms of the clock passed in (0 without one). */
  rulesMs: number;
  providerID: ProviderIDDecision;
  /** The node IPs split by whether the confirmed machine has them (those it lacks are not written). */
  ips: AddressDecision["ips"];
  /** The Node as it should be (without a providerID while {@link decideProviderID} waits). */
  want: DesiredNode;
  /** The writes that bring the Node to `want`. */
  patch: NodePatch;
  /**
   * Write nothing now: an initializing node waits for its instance ID, and stays tainted until
   * Talos publishes it (the PlatformMetadata watch re-queues it), or a taint of its rules failed to
   * render (`taintsFailed`). `want` is what comes then.
   */
  hold: boolean;
  /**
   * An initializing node's rules have a taint that failed to render: initializing it without that
   * taint would let pods run where the rule keeps them off, for good (taints are applied only at
   * initialization), so it stays tainted until the rule or its facts change (the reference failed
   * such a node too). An initialized node keeps what it has of that taint.
   */
  taintsFailed: boolean;
}

/**
 * Decides one Node, in the steps of this file's header. An initialized node waiting for its instance
 * ID gets everything but its providerID now, its providerID later; an initializing one gets nothing
 * yet (`hold`).
 * @param clock a monotonic clock in ms to time the rules with (the caller's metric); none by default.
 * @example // a fresh node on metal with 10.0.0.5, no rules:
 *   // want.providerID "talos://metal/10.0.0.5", the uninitialized taint removed, InternalIP 10.0.0.5
 */
export function decideNode(input: NodeDecisionInput, clock?: () => number): NodeDecision {
  const { node, config } = input;
  const g = config.global;
  const facts = instanceFacts(input.facts, input.nodeIP, node.metadata.name);
  const started = clock?.() ?? 0;
  const rules = transform(config, facts, node.metadata.name);
  const rulesMs = (clock?.() ?? 0) - started;
  const providerID = decideProviderID({
    nodeProviderID: node.spec.providerID ?? "",
    talos: input.facts.platformMetadata,
    before: facts.platformMetadata.providerId,
    after: rules.platformMetadata.providerId,
  });
  const addresses = decideAddresses({
    nodeName: node.metadata.name,
    platform: rules.platformMetadata.platform,
    hostname: facts.platformMetadata.hostname,
    nodeIPs: input.ips,
    confirmedIP: input.nodeIP,
    addresses: facts.addresses,
    preferIPv6: g.preferIPv6,
    publicIPDiscovery: rules.features.publicIPDiscovery,
  });
  const opts: DesiredOptions = {
    reconcile: g.reconcile,
    skipForeignNode: g.skipForeignNode,
    clusterName: g.clusterName || input.clusterName,
  };
  const want = desiredNode(node, rules, opts, addresses.addresses, input.managed);
  const wait = providerID.action === "wait";
  if (wait) delete want.providerID;
  const initializing = isUninitialized(node);
  const taintsFailed = initializing && rules.errors.some((e) => e.field === "taints");
  const hold = initializing && (wait || taintsFailed);
  const patch = nodePatch(node, want);
  return { facts, rules, rulesMs, providerID, ips: addresses.ips, want, patch, hold, taintsFailed };
}

// ---------------------------------------------------------------------------------------------
// The providerID.

/** What {@link decideProviderID} decides. */
export type ProviderIDDecision =
  /** The Node has a providerID: it is never changed. */
  | { action: "keep" }
  /** Write `providerID`; `from` says whose it is. */
  | { action: "write"; providerID: string; from: "talos" | "rule" | "fallback" }
  /** Write none (a rule rendered an empty ProviderID on a platform that does not wait). */
  | { action: "none" }
  /** Write nothing yet: the platform names its instances and Talos has not published the ID. */
  | { action: "wait"; platform: string; waitingFor: string };

/** The inputs of {@link decideProviderID}. */
export interface ProviderIDInput {
  /** The Node's spec.providerID ("" when unset). */
  nodeProviderID: string;
  /** The PlatformMetadata as Talos published it (before any default or rule). */
  talos: Pick<PlatformMetadata, "platform" | "instanceId" | "providerId">;
  /** The providerId the rules saw: Talos's, normalized, or the fallback ({@link instanceFacts}). */
  before: string;
  /** The providerId after the rules' platformMetadata overrides. */
  after: string;
}

/**
 * The providerID to write on a Node, or why none is written now.
 * 1. A Node that has one keeps it (the API server refuses any change).
 * 2. A rule that changed ProviderID to a non-empty value decides: the operator chose it, no wait.
 * 3. On a platform that names its instances ({@link PLATFORMS_NAMING_INSTANCES}), Talos's
 *    metadata without an instance ID or without a provider ID is not read yet: wait. Neither the
 *    fallback nor Talos's half-built ID (`hcloud://`) is written.
 * 4. Otherwise Talos's providerID, or the fallback when Talos has none (a rule's empty value
 *    writes none, as before).
 * @example
 * decideProviderID({ nodeProviderID: "", talos: { platform: "hcloud", instanceId: "", providerId: "" },
 *   before: "talos://hcloud/10.0.1.2", after: "talos://hcloud/10.0.1.2" }).action // "wait"
 */
export function decideProviderID(input: ProviderIDInput): ProviderIDDecision {
  const { nodeProviderID, talos, before, after } = input;
  if (nodeProviderID !== "") return { action: "keep" };
  if (after !== "" && after !== before) return { action: "write", providerID: after, from: "rule" };
  if (namesInstances(talos.platform) && (talos.instanceId === "" || talos.providerId === "")) {
    const expected = (own(PLATFORMS_NAMING_INSTANCES, talos.platform) as PlatformSource).providerID;
    return {
      action: "wait",
      platform: talos.platform,
      waitingFor: `its instance ID: Talos reports platform ${talos.platform} without ${
        talos.instanceId === "" ? "an instance ID" : "a provider ID"
      } (its metadata service has not been read yet), and the providerID ${expected} is written once Talos publishes it`,
    };
  }
  if (after === "") return { action: "none" };
  return { action: "write", providerID: after, from: talos.providerId !== "" ? "talos" : "fallback" };
}

// ---------------------------------------------------------------------------------------------
// Labels, annotations, taints and providerID: the Node as it should be.

/** Settings {@link desiredNode} takes from the `global` config section and the talosconfig. */
interface DesiredOptions {
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
 * The Node as it should be, from its current state, the rules' result (on the facts of
 * {@link instanceFacts}) and its addresses. Follows the reference and the framework it embeds:
 * - the record of what the rules put there, and its digest label: only a record whose digest
 *   matches is believed (lib/managedrecord.ts readManagedRecord); otherwise nothing it names is
 *   removed and it is rebuilt from this result.
 * - labels: the rules' (through {@link planReconcile}), the platform/lifecycle/clustername labels
 *   (a rule's label of the same key wins), and at initialization the GA and legacy topology and
 *   instance-type labels; later only the legacy → GA sync of upstream `reconcileNodeLabels`. In
 *   reconcile mode the topology labels follow the facts at every pass.
 * - annotations and taints: the rules' (taints only at initialization, unless reconcile mode);
 *   the uninitialized taint goes.
 * - providerID: the rules' facts' one, only when the Node has none ({@link decideNode} drops it
 *   while {@link decideProviderID} waits).
 * A foreign node (`skipForeignNode`, providerID not `talos…`) only gets its addresses.
 */
function desiredNode(
  node: LeanNode,
  result: TransformResult,
  opts: DesiredOptions,
  addresses: NodeAddress[],
  managed: ManagedRecordRead,
): DesiredNode {
  const initializing = isUninitialized(node);
  const meta = result.platformMetadata;
  const want: DesiredNode = {
    labels: Object.assign(dict<string>(), node.metadata.labels),
    annotations: Object.assign(dict<string>(), node.metadata.annotations),
    taints: node.spec.taints.filter((t) => t.key !== UNINITIALIZED_TAINT),
    addresses,
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

// ---------------------------------------------------------------------------------------------
// Reconcile mode's plan: the rules' result against the record of what they put there before.

/** Options of {@link planReconcile}. */
export interface PlanOptions {
  /** `global.reconcile`: remove what rules no longer produce. */
  reconcile: boolean;
  /** The node still has the uninitialized taint (without reconcile, taints are only set then). */
  initializing: boolean;
}

/** The changes that bring a Node in line with a transform result. */
export interface ReconcilePlan {
  /** Labels to set (only those that differ from the node), including {@link MANAGED_DIGEST_LABEL}. */
  setLabels: Record<string, string>;
  removeLabels: string[];
  /** Annotations to set, including {@link MANAGED_ANNOTATION} when the record changed. */
  setAnnotations: Record<string, string>;
  removeAnnotations: string[];
  /** Taints to add, or to replace the taint with the same key and effect. */
  addTaints: Taint[];
  removeTaints: Array<Pick<Taint, "key" | "effect">>;
  /** The new record (also serialized into `setAnnotations` when it changed). */
  record: ManagedRecord;
}

/**
 * Computes what to change on a node so it carries the rules' result. Removes only keys the rules
 * previously added (per `previous`) and no longer produce, and never a key whose value failed this
 * time (it is left as is until the rule renders again). Without reconcile nothing is removed, and
 * the record keeps accumulating so that turning reconcile on later knows the history. The record
 * and its digest label are set (or removed) together, so one patch writes both.
 * @param previous the record read from the node (lib/managedrecord.ts readManagedRecord).
 * @param result this round's {@link transform} result.
 * @param node the node's current labels, annotations and taints.
 */
export function planReconcile(
  previous: ManagedRecord,
  result: TransformResult,
  node: NodeState,
  options: PlanOptions,
): ReconcilePlan {
  const labels = planMap(previous.labels, result.labels, node.labels, failedKeys(result, "labels"), options);
  const annotations = planMap(
    previous.annotations,
    result.annotations,
    node.annotations,
    failedKeys(result, "annotations"),
    options,
  );
  const taints = planTaints(previous.taints, result, node.taints, options);
  const plan: ReconcilePlan = {
    setLabels: labels.set,
    removeLabels: labels.remove,
    setAnnotations: annotations.set,
    removeAnnotations: annotations.remove,
    addTaints: taints.add,
    removeTaints: taints.remove,
    record: { labels: labels.recorded, annotations: annotations.recorded, taints: taints.recorded },
  };
  applyRecordMarks(plan, recordMarks(plan.record, node));
  return plan;
}

/** The keys of `field` whose value failed this time: they stay as they are, and recorded. */
function failedKeys(result: TransformResult, field: TransformError["field"]): Set<string> {
  return new Set(result.errors.filter((e) => e.field === field).map((e) => e.key));
}

/**
 * Whether a key the record names, which the rules no longer produce, stays recorded (and on the
 * node): when its value failed this time, or, without reconcile, while the node still has it.
 */
function keepRecorded(key: string, failed: Set<string>, present: boolean, options: PlanOptions): boolean {
  return failed.has(key) || (!options.reconcile && present);
}

/** The labels or annotations part of {@link planReconcile}: what to set and remove, and the new record. */
function planMap(
  previous: readonly string[],
  want: Readonly<Record<string, string>>,
  have: Readonly<Record<string, string>>,
  failed: Set<string>,
  options: PlanOptions,
): { set: Record<string, string>; remove: string[]; recorded: string[] } {
  const set = dict<string>();
  const remove: string[] = [];
  for (const [k, val] of Object.entries(want)) if (own(have, k) !== val) set[k] = val;
  const recorded = new Set(Object.keys(want));
  for (const k of previous) {
    if (recorded.has(k)) continue;
    const present = Object.hasOwn(have, k);
    if (keepRecorded(k, failed, present, options)) recorded.add(k);
    else if (present) remove.push(k);
  }
  return { set, remove, recorded: [...recorded].sort() };
}

/**
 * The taints part of {@link planReconcile}: the rules' taints are applied only at initialization or
 * in reconcile mode; otherwise a recorded taint the rules still produce stays recorded.
 */
function planTaints(
  previous: readonly string[],
  result: TransformResult,
  have: readonly Taint[],
  options: PlanOptions,
): { add: Taint[]; remove: Array<Pick<Taint, "key" | "effect">>; recorded: string[] } {
  const add: Taint[] = [];
  const remove: Array<Pick<Taint, "key" | "effect">> = [];
  const apply = options.reconcile || options.initializing;
  const failed = failedKeys(result, "taints");
  const current = new Map(have.map((t) => [taintId(t), t]));
  const recorded = new Set<string>();
  if (apply) {
    for (const t of result.taints) {
      const id = taintId(t);
      recorded.add(id);
      const now = current.get(id);
      if (!now || (now.value ?? "") !== (t.value ?? "")) add.push(t);
    }
  }
  for (const id of previous) {
    if (recorded.has(id)) continue;
    const key = id.slice(0, id.lastIndexOf(":"));
    const present = current.has(id);
    const wanted = !apply && result.taints.some((t) => taintId(t) === id);
    if (wanted || keepRecorded(key, failed, present, options)) recorded.add(id);
    else if (present) {
      const t = current.get(id) as Taint;
      remove.push({ key: t.key, effect: t.effect });
    }
  }
  return { add, remove, recorded: [...recorded].sort() };
}

/** Puts the record annotation's and digest label's changes into the plan (after the rules' own keys). */
function applyRecordMarks(plan: ReconcilePlan, marks: RecordMarks): void {
  if (marks.annotation === null) plan.removeAnnotations.push(MANAGED_ANNOTATION);
  else if (marks.annotation !== undefined) plan.setAnnotations[MANAGED_ANNOTATION] = marks.annotation;
  if (marks.digest === null) plan.removeLabels.push(MANAGED_DIGEST_LABEL);
  else if (marks.digest !== undefined) plan.setLabels[MANAGED_DIGEST_LABEL] = marks.digest;
}

// ---------------------------------------------------------------------------------------------
// The patch.

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
  const set = Object.entries(want).filter(([k, v]) => own(have, k) !== v);
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
