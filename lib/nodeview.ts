// The Node view: the part of a Node the controllers read, and the pure reduction of an API Node to
// it (not images, managed fields or capacity; of the managed fields only who owns what cloud-node
// writes), so thousands of cached nodes cost little memory. The contract between the Node informer
// (lib/cache.ts) and the decisions that read a Node.

import type { V1Node, V1NodeAddress, V1Taint } from "@kubernetes/client-node";
import { type FieldOwners, fieldOwners, type ManagedFieldsEntry } from "./fieldowners.ts";
import { FIELD_MANAGER } from "./wellknown.ts";

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

/** Annotations too large to be worth keeping in memory. */
const DROPPED_ANNOTATIONS = new Set(["kubectl.kubernetes.io/last-applied-configuration"]);

/** A positive integer pod quantity ("110"); other quantity forms do not occur for pods. */
function podCount(q: string | undefined): number | undefined {
  if (q === undefined || !/^\d+$/.test(q)) return undefined;
  const n = Number(q);
  return n > 0 ? n : undefined;
}

/** Reduces a Node to a {@link LeanNode}. */
export function leanNode(raw: unknown): LeanNode {
  const n = raw as V1Node;
  const md = n.metadata ?? {};
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries(md.annotations ?? {}))
    if (!DROPPED_ANNOTATIONS.has(k)) annotations[k] = v;
  const ready = n.status?.conditions?.find((c) => c.type === "Ready");
  const lean: LeanNode = {
    metadata: {
      name: md.name ?? "",
      uid: md.uid ?? "",
      resourceVersion: md.resourceVersion ?? "",
      creationTimestamp: String(md.creationTimestamp ?? ""),
      labels: md.labels ?? {},
      annotations,
    },
    spec: { taints: n.spec?.taints ?? [] },
    status: { addresses: n.status?.addresses ?? [], ready: ready?.status ?? "Unknown" },
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
