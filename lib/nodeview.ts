// The Node view: the part of a Node the controllers read, and the pure reduction of an API Node to
// it (not images, managed fields or capacity; of the managed fields only who owns what cloud-node
// writes), so thousands of cached nodes cost little memory. The contract between the Node informer
// (lib/cache.ts) and the decisions that read a Node.

import type { V1Node, V1NodeAddress, V1Taint } from "@kubernetes/client-node";
import { canonicalIP, isIPv6Text, preferredDualStack } from "./cidr.ts";
import { type FieldOwners, fieldOwners, type ManagedFieldsEntry } from "./fieldowners.ts";
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

/** A copy of `src` with its string values shared through `pool`, without `skip`'s keys. */
function sharedValues(
  src: Record<string, string> | undefined,
  name: string,
  pool: StringPool,
  skip?: Set<string>,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (src === null || typeof src !== "object") return out;
  for (const [k, v] of Object.entries(src)) {
    if (skip?.has(k)) continue;
    out[k] = typeof v === "string" && v !== name ? pool.share(v) : v;
  }
  return out;
}

/** `status.addresses` with each type shared and a Hostname equal to the name as that string. */
function sharedAddresses(list: V1NodeAddress[] | undefined, name: string, pool: StringPool): V1NodeAddress[] {
  if (!Array.isArray(list)) return [];
  return list.map((a) =>
    typeof a?.type === "string" && typeof a.address === "string"
      ? { type: pool.share(a.type), address: a.address === name ? name : a.address }
      : a,
  );
}

/** A positive integer pod quantity ("110"); other quantity forms do not occur for pods. */
function podCount(q: string | undefined): number | undefined {
  if (q === undefined || !/^\d+$/.test(q)) return undefined;
  const n = Number(q);
  return n > 0 ? n : undefined;
}

/**
 * Reduces a Node to a {@link LeanNode}.
 * @param strings where repeated values are shared (tests pass their own)
 */
export function leanNode(raw: unknown, strings: StringPool = nodeStrings): LeanNode {
  const n = raw as V1Node;
  const md = n.metadata ?? {};
  const name = md.name ?? "";
  const ready = n.status?.conditions?.find((c) => c.type === "Ready");
  const lean: LeanNode = {
    metadata: {
      name,
      uid: md.uid ?? "",
      resourceVersion: md.resourceVersion ?? "",
      creationTimestamp: String(md.creationTimestamp ?? ""),
      labels: sharedValues(md.labels, name, strings),
      annotations: sharedValues(md.annotations, name, strings, DROPPED_ANNOTATIONS),
    },
    spec: { taints: n.spec?.taints ?? NO_TAINTS },
    status: {
      addresses: sharedAddresses(n.status?.addresses, name, strings),
      ready: ready?.status ?? "Unknown",
    },
  };
  if (md.deletionTimestamp) lean.metadata.deletionTimestamp = String(md.deletionTimestamp);
  const owners = fieldOwners(md.managedFields as ManagedFieldsEntry[] | undefined, FIELD_MANAGER);
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
  const annotation = node.annotations[PROVIDED_NODE_IP_ANNOTATION];
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
