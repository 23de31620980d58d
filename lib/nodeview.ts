// The Node view: the part of a Node the controllers read, and the pure reduction of an API Node to
// it (not images, managed fields or capacity; of the managed fields only who owns what cloud-node
// writes), so thousands of cached nodes cost little memory. The contract between the Node informer
// (lib/kubecache.ts) and the decisions that read a Node.

import type { V1Node, V1NodeAddress, V1Taint } from "@kubernetes/client-node";
import { canonicalIP, isIPv6Text, preferredDualStack } from "./cidr.ts";
import { dict, own } from "./dict.ts";
import { type FieldOwners, fieldOwners, type ManagedFieldsEntry } from "./fieldowners.ts";
import { type PeerLimitName, peerLimit } from "./peerlimits.ts";
import { StringPool } from "./stringpool.ts";
import { FIELD_MANAGER, PROVIDED_NODE_IP_ANNOTATION } from "./wellknown.ts";

/** The part of a Node the controllers read. */
export interface LeanNode {
  metadata: {
    name: string;
    uid: string;
    resourceVersion: string;
    creationTimestamp: string;
    labels: Record<string, string>;
    annotations: Record<string, string>;
    deletionTimestamp?: string;
    /** Who wrote the fields cloud-node owns (from managedFields, which are not kept). */
    owners?: FieldOwners;
    /**
     * The first per-peer bound (lib/peerlimits.ts: node_addresses, node_labels,
     * node_annotation_bytes) the Node is over, and its count: cloud-node does not reconcile it.
     */
    overLimit?: NodeOverLimit;
  };
  spec: {
    providerID?: string;
    podCIDR?: string;
    podCIDRs?: string[];
    taints: V1Taint[];
  };
  status: {
    addresses: V1NodeAddress[];
    /** The Ready condition: "True", "False" or "Unknown" ("Unknown" when absent). */
    ready: string;
    readyTransition?: string;
    /** Pod capacity: allocatable.pods, else capacity.pods; absent until the kubelet reports it. */
    maxPods?: number;
  };
}

/** A per-peer bound a Node is over, and what it has. */
export interface NodeOverLimit {
  limit: Extract<PeerLimitName, "node_addresses" | "node_labels" | "node_annotation_bytes">;
  got: number;
}

/** The taints of every Node without any: one frozen list, not one per Node. */
const NO_TAINTS: V1Taint[] = Object.freeze([]) as unknown as V1Taint[];

/** Annotations too large to be worth keeping in memory. */
const DROPPED_ANNOTATIONS = new Set(["kubectl.kubernetes.io/last-applied-configuration"]);

/**
 * Label and annotation values and address types repeat across Nodes (an architecture, a zone, an
 * instance type, `InternalIP`): each is kept once rather than once per cached Node. A value that is
 * the Node's own name is not pooled (it is the Node's alone and would only fill the pool).
 */
const nodeStrings = new StringPool(1024);

/** How many entries each copy {@link sharedValues} made holds (so that comparing needs no count of it). */
const entryCounts = new WeakMap<object, number>();

/**
 * Whether `kept` (a copy {@link sharedValues} made) holds exactly `src`'s entries but `skip`'s keys:
 * one pass over `src`, without allocating (a Node's heartbeat then costs no copy of its labels).
 * `kept` has no prototype, so indexing it reads its own entries only.
 */
function sameValues(
  src: Record<string, string> | undefined,
  kept: Readonly<Record<string, string>>,
  skip?: Set<string>,
): boolean {
  const count = entryCounts.get(kept);
  if (src === null || typeof src !== "object" || count === undefined) return false;
  let n = 0;
  for (const k in src) {
    if (skip?.has(k)) continue;
    if (kept[k] !== src[k]) return false;
    n++;
  }
  return n === count;
}

/**
 * A copy of `src` with its string values shared through `pool` (when `pool` is given), without
 * `skip`'s keys, in a null-prototype object (lib/dict.ts): a peer's key is never an inherited
 * member. `prev`, the previous version's copy, is returned as it is when the entries are the same.
 * (`src` is decoded JSON: its enumerable members are its own.)
 */
function sharedValues(
  src: Record<string, string> | undefined,
  name: string,
  pool: StringPool | undefined,
  skip?: Set<string>,
  prev?: Readonly<Record<string, string>>,
): Record<string, string> {
  if (prev !== undefined && sameValues(src, prev, skip)) return prev as Record<string, string>;
  const out = dict<string>();
  let n = 0;
  if (src !== null && typeof src === "object") {
    for (const k in src) {
      if (!Object.hasOwn(src, k) || skip?.has(k)) continue;
      const v = src[k] as string;
      out[k] = pool !== undefined && typeof v === "string" && v !== name ? pool.share(v) : v;
      n++;
    }
  }
  entryCounts.set(out, n);
  return out;
}

/** Whether two address lists hold the same entries in the same order (malformed entries by identity). */
export function sameAddresses(
  a: ReadonlyArray<V1NodeAddress | null>,
  b: ReadonlyArray<V1NodeAddress | null>,
): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x === y) continue;
    if (x == null || y == null || x.type !== y.type || x.address !== y.address) return false;
  }
  return true;
}

/**
 * `status.addresses` with each type shared and a Hostname equal to the name as that string; `prev`
 * as it is when the entries are the same.
 */
function sharedAddresses(
  list: V1NodeAddress[] | undefined,
  name: string,
  pool: StringPool | undefined,
  prev?: V1NodeAddress[],
): V1NodeAddress[] {
  if (!Array.isArray(list)) return [];
  if (prev !== undefined && sameAddresses(list, prev)) return prev;
  return list.map((a) =>
    typeof a?.type === "string" && typeof a.address === "string"
      ? { type: pool ? pool.share(a.type) : a.type, address: a.address === name ? name : a.address }
      : a,
  );
}

/**
 * Whether the Node's status is unknown: its Ready condition is there and says Unknown, as Kubernetes'
 * node lifecycle sets it when the kubelet stopped posting (NodeStatusUnknown: the machine is off, or
 * cut off) or never posted (NodeStatusNeverUpdated). A Node without a Ready condition yet (registered
 * a moment ago) is not such a node.
 */
export function statusUnknown(node: LeanNode): boolean {
  return node.status.ready === "Unknown" && node.status.readyTransition !== undefined;
}

/** Whether two taint lists are the same (key, value, effect and timeAdded of each, in order). */
export function sameTaints(a: readonly V1Taint[], b: readonly V1Taint[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x === y) continue;
    if (x == null || y == null) return false;
    if (x.key !== y.key || x.value !== y.value || x.effect !== y.effect) return false;
    if (String(x.timeAdded ?? "") !== String(y.timeAdded ?? "")) return false;
  }
  return true;
}

/**
 * The first per-peer bound a Node is over ({@link NodeOverLimit}), counted on the decoded object
 * before anything is copied: addresses, label count, and annotation bytes as Kubernetes'
 * ValidateAnnotationsSize counts them (UTF-8 bytes of each key and value), measured exactly only
 * when three bytes per character could reach the bound.
 */
export function nodeOverLimit(n: V1Node): NodeOverLimit | undefined {
  const addresses = n.status?.addresses;
  if (Array.isArray(addresses) && addresses.length > peerLimit("node_addresses"))
    return { limit: "node_addresses", got: addresses.length };
  const labels = n.metadata?.labels;
  if (labels !== null && typeof labels === "object") {
    let count = 0;
    for (const _ in labels) count++;
    if (count > peerLimit("node_labels")) return { limit: "node_labels", got: count };
  }
  const annotations = n.metadata?.annotations;
  if (annotations === null || typeof annotations !== "object") return undefined;
  const max = peerLimit("node_annotation_bytes");
  let chars = 0;
  for (const k in annotations) chars += k.length + String(annotations[k]).length;
  if (chars * 3 <= max) return undefined;
  let bytes = 0;
  for (const k in annotations) bytes += Buffer.byteLength(k) + Buffer.byteLength(String(annotations[k]));
  return bytes > max ? { limit: "node_annotation_bytes", got: bytes } : undefined;
}

/** A positive integer pod quantity ("110"); other quantity forms do not occur for pods. */
function podCount(q: string | undefined): number | undefined {
  if (q === undefined || !/^\d+$/.test(q)) return undefined;
  const n = Number(q);
  return n > 0 ? n : undefined;
}

/**
 * Reduces a Node to a {@link LeanNode}. Labels and annotations are kept in null-prototype objects;
 * what is unchanged from `prev` (the cached previous version) is `prev`'s own object, so that a
 * status heartbeat of a Node with thousands of labels copies none of them and the update filters
 * compare them by reference. A Node over a per-peer bound ({@link nodeOverLimit}) is kept whole
 * (the other controllers read the Node Kubernetes has: lifecycle's exclusion label, the provided
 * node IP), marked `overLimit`, and its values are not pooled.
 * @param strings where repeated values are shared (tests pass their own)
 * @param prev the cached previous version of the same Node, if any
 * @example leanNode({ metadata: { name: "n1", labels: { a: "b" } } }).metadata.labels // { a: "b" }
 */
export function leanNode(raw: unknown, strings: StringPool = nodeStrings, prev?: LeanNode): LeanNode {
  const n = raw as V1Node;
  const md = n.metadata ?? {};
  const name = md.name ?? "";
  const ready = n.status?.conditions?.find((c) => c.type === "Ready");
  const overLimit = nodeOverLimit(n);
  const pool = overLimit ? undefined : strings;
  const was = prev?.metadata.name === name ? prev : undefined;
  const taints = n.spec?.taints ?? NO_TAINTS;
  const lean: LeanNode = {
    metadata: {
      name,
      uid: md.uid ?? "",
      resourceVersion: md.resourceVersion ?? "",
      creationTimestamp: String(md.creationTimestamp ?? ""),
      labels: sharedValues(md.labels, name, pool, undefined, was?.metadata.labels),
      annotations: sharedValues(md.annotations, name, pool, DROPPED_ANNOTATIONS, was?.metadata.annotations),
    },
    spec: {
      taints: was && Array.isArray(taints) && sameTaints(taints, was.spec.taints) ? was.spec.taints : taints,
    },
    status: {
      addresses: sharedAddresses(n.status?.addresses, name, pool, was?.status.addresses),
      ready: ready?.status ?? "Unknown",
    },
  };
  if (overLimit) lean.metadata.overLimit = overLimit;
  if (md.deletionTimestamp) lean.metadata.deletionTimestamp = String(md.deletionTimestamp);
  // Only cloud-node reads the owners, to notice another writer: it does not reconcile a Node over a
  // bound, whose managedFields are then not walked at every heartbeat.
  const owners = overLimit
    ? undefined
    : fieldOwners(md.managedFields as ManagedFieldsEntry[] | undefined, FIELD_MANAGER);
  if (owners) lean.metadata.owners = owners;
  if (n.spec?.providerID) lean.spec.providerID = n.spec.providerID;
  if (n.spec?.podCIDR) lean.spec.podCIDR = n.spec.podCIDR;
  if (n.spec?.podCIDRs?.length) lean.spec.podCIDRs = n.spec.podCIDRs;
  if (ready?.lastTransitionTime) lean.status.readyTransition = String(ready.lastTransitionTime);
  const maxPods = podCount(n.status?.allocatable?.pods) ?? podCount(n.status?.capacity?.pods);
  if (maxPods !== undefined) lean.status.maxPods = maxPods;
  return lean;
}

/** The node's own IPs and where they came from. */
export interface NodeIPs {
  /** At most one IPv4 and one IPv6 address, in the configured preference order. */
  ips: string[];
  /**
   * The provided-node-ip annotation's usable addresses in the kubelet's order (its primary IP
   * first); empty when the IPs came from elsewhere.
   */
  provided: string[];
  /** `annotation`, `status` (the InternalIP addresses, when the annotation is absent or unusable) or `none`. */
  source: "annotation" | "status" | "none";
}

/** The parts of a Node that tell its IPs. */
export interface NodeIPSource {
  annotations: Readonly<Record<string, string>>;
  addresses: ReadonlyArray<{ type: string; address: string }>;
}

/**
 * The node's own IPs: the provided-node-ip annotation ("v4", "v6" or "v4,v6"), or, when it is
 * missing or holds no address, the node's InternalIP status addresses. At most one address per
 * family, IPv4 first unless `preferIPv6`.
 * @example nodeIPs({ annotations: { "alpha.kubernetes.io/provided-node-ip": "10.0.0.5" }, addresses: [] }, false)
 *   // { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" }
 */
export function nodeIPs(node: NodeIPSource, preferIPv6: boolean): NodeIPs {
  const annotation = own(node.annotations, PROVIDED_NODE_IP_ANNOTATION);
  if (annotation !== undefined) {
    const ips = preferredDualStack(annotation.split(","), preferIPv6);
    if (ips.length > 0) {
      return {
        ips,
        provided: preferredDualStack(annotation.split(","), isIPv6First(annotation)),
        source: "annotation",
      };
    }
  }
  const internal = node.addresses.filter((a) => a.type === "InternalIP").map((a) => a.address);
  const ips = preferredDualStack(internal, preferIPv6);
  return { ips, provided: [], source: ips.length > 0 ? "status" : "none" };
}

/** Whether the first address of a comma-separated list is IPv6 (the kubelet's primary family). */
function isIPv6First(list: string): boolean {
  for (const raw of list.split(",")) {
    const ip = canonicalIP(raw.trim(), "keep");
    if (ip !== undefined) return isIPv6Text(ip);
  }
  return false;
}

/**
 * Whether two label or annotation maps hold the same entries: by reference first (the Node view
 * keeps the previous version's object when nothing changed, lib/nodeview.ts leanNode), else key by
 * key without allocating.
 */
function sameEntries(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  if (a === b) return true;
  let n = 0;
  for (const k in a) {
    if (!Object.hasOwn(b, k) || a[k] !== b[k]) return false;
    n++;
  }
  for (const k in b) if (Object.hasOwn(b, k)) n--;
  return n === 0;
}

/**
 * Whether a Node update touches what this controller reads or writes (heartbeats do not). Its cost
 * does not grow with the Node's size on a heartbeat: unchanged maps and lists are the previous
 * version's own objects, compared by reference.
 */
export function relevantChange(a: LeanNode, b: LeanNode): boolean {
  return !(
    (a.metadata.deletionTimestamp ?? "") === (b.metadata.deletionTimestamp ?? "") &&
    (a.spec.providerID ?? "") === (b.spec.providerID ?? "") &&
    sameTaints(a.spec.taints, b.spec.taints) &&
    sameAddresses(a.status.addresses, b.status.addresses) &&
    sameEntries(a.metadata.labels, b.metadata.labels) &&
    sameEntries(a.metadata.annotations, b.metadata.annotations)
  );
}
