// Who wrote the Node fields the cloud-node controller owns, read from the Node's
// metadata.managedFields, and which changes between two versions of a Node another writer made
// (pure: the Node informer keeps the summary, lib/kubecache.ts; the controller reports, lib/node.ts).
//
// The API server records, per field manager, the fields it set (server-side field management): an
// Update (PATCH/PUT) makes its manager the owner of every field it changed and takes them from the
// others; a manager without an explicit `fieldManager` is its User-Agent up to the first "/"
// (k8s.io/apiserver pkg/endpoints/handlers/create.go prefixFromUserAgent). Node fields and their
// granularity in k8s.io/api core/v1 (v0.35): status.addresses is a map-list keyed by `type`
// (an entry per address type), spec.taints an atomic list (one owner for the whole list),
// labels and annotations one owner per key, spec.providerID one owner.
//
// A change another writer made to a field this CCM wrote shows as: the value changed, and the
// field (or the changed entry) now belongs to a manager that is not this CCM. A removal carries no
// owner (a removed field belongs to nobody), so it cannot be attributed and is not reported.
// status.addresses is cloud-node's as a whole (upstream's cloud-node replaces the list), so there
// the test is what cloud-node is about to undo: an entry it would remove or change that another
// manager (not the node's kubelet) added or changed, even when this CCM never owned an entry (its
// list may be the kubelet's; its write-backs then only remove, and record no owner).

import { dict, own } from "./dict.ts";
import { sameList } from "./samelist.ts";
import { StringPool, ValuePool } from "./stringpool.ts";

/**
 * The owners of the fields the cloud-node controller writes, from a Node's managedFields. Where
 * several managers own parts of one field (an address entry whose `address` another writer changed
 * while this CCM still owns its `type`; a field several appliers share), the one that is not this
 * CCM is named: a change it made must not hide behind this CCM's older ownership. The maps keyed by
 * address type, label or annotation key (peer-chosen keys) have no prototype (lib/dict.ts): a key
 * such as `constructor` or `__proto__` is an entry, never an inherited member.
 */
export interface FieldOwners {
  /** Owner of each status.addresses entry, by address type. */
  addresses?: Record<string, string>;
  providerID?: string;
  /** Owner of spec.taints (an atomic list). */
  taints?: string;
  /** Owner of each label, by key. */
  labels?: Record<string, string>;
  /** Owner of each annotation, by key. */
  annotations?: Record<string, string>;
}

/** One metadata.managedFields entry, as the API returns it. */
export interface ManagedFieldsEntry {
  manager?: string;
  operation?: string;
  subresource?: string;
  fieldsType?: string;
  fieldsV1?: unknown;
}

type Fields = Record<string, unknown>;

function child(fields: unknown, key: string): Fields | undefined {
  if (typeof fields !== "object" || fields === null) return undefined;
  const v = (fields as Fields)[key];
  return typeof v === "object" && v !== null ? (v as Fields) : undefined;
}

/** Manager names are few; one string per name instead of one per Node. */
const managerNames = new StringPool(256);
const intern = (s: string): string => managerNames.share(s);

/**
 * Most Nodes of a cluster have the same owners summary (the same managers wrote the same keys), so
 * one frozen copy per distinct summary is kept, not one per Node (~0.4 KB each).
 */
const summaries = new ValuePool<FieldOwners>(256);

/** The owner to keep when `next` also owns a field `have` owns: the one that is not `self`. */
function pick(have: string | undefined, next: string, self: string): string {
  return have === undefined || have === self ? next : have;
}

/**
 * Sets `owner` on each key of `set` (FieldsV1 `f:<key>` members) in `into`, as {@link pick} says.
 * @returns the characters those entries take at least in the summary's JSON (its key's length).
 */
function ownKeys(set: Fields, owner: string, self: string, into: Record<string, string>): number {
  let chars = 0;
  for (const k in set) {
    if (!k.startsWith("f:")) continue;
    const key = k.slice(2);
    into[key] = pick(own(into, key), owner, self);
    chars += key.length + owner.length + 6;
  }
  return chars;
}

/** The address type of a FieldsV1 map-list member `k:{"type":"InternalIP"}`, if it is one. */
function addressType(k: string): string | undefined {
  if (!k.startsWith("k:")) return undefined;
  try {
    const t = (JSON.parse(k.slice(2)) as { type?: unknown }).type;
    return typeof t === "string" ? t : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The owners of the fields cloud-node writes, from a Node's managedFields (undefined when none of
 * them has an owner), frozen and shared by the Nodes with the same summary. Never throws: an entry
 * it cannot read is skipped.
 * @param self the field manager this CCM's writes are recorded under.
 * @example
 * fieldOwners([{ manager: "kubelet", fieldsV1: { "f:spec": { "f:providerID": {} } } }], "ccm") // { providerID: "kubelet" }
 */
export function fieldOwners(
  entries: readonly ManagedFieldsEntry[] | undefined,
  self: string,
): FieldOwners | undefined {
  if (!Array.isArray(entries) || entries.length === 0) return undefined;
  const out: FieldOwners = {};
  // A lower bound of the summary's JSON length: past the pool's bound it is not serialised at all.
  let chars = 0;
  for (const e of entries) {
    if (typeof e?.manager !== "string" || (e.fieldsType ?? "FieldsV1") !== "FieldsV1") continue;
    const manager = intern(e.manager);
    const meta = child(e.fieldsV1, "f:metadata");
    const labels = child(meta, "f:labels");
    if (labels) {
      out.labels ??= dict();
      chars += ownKeys(labels, manager, self, out.labels);
    }
    const annotations = child(meta, "f:annotations");
    if (annotations) {
      out.annotations ??= dict();
      chars += ownKeys(annotations, manager, self, out.annotations);
    }
    const spec = child(e.fieldsV1, "f:spec");
    if (child(spec, "f:providerID")) out.providerID = pick(out.providerID, manager, self);
    if (child(spec, "f:taints")) out.taints = pick(out.taints, manager, self);
    const addresses = child(child(e.fieldsV1, "f:status"), "f:addresses");
    for (const k of Object.keys(addresses ?? {})) {
      const type = addressType(k);
      if (type === undefined) continue;
      out.addresses ??= dict();
      out.addresses[type] = pick(own(out.addresses, type), manager, self);
    }
  }
  if (Object.keys(out).length === 0) return undefined;
  return chars > summaries.maxKeyLength ? out : summaries.share(JSON.stringify(out), out);
}

/** The fields {@link conflictingWrites} reports, as the `field` label and Events name them. */
export type OwnedField =
  | "status.addresses"
  | "spec.providerID"
  | "spec.taints"
  | "metadata.labels"
  | "metadata.annotations";

/** A change another field manager made to a field this CCM owns. */
export interface ConflictingWrite {
  field: OwnedField;
  /** The label or annotation key, the address types, or the taints (`key:Effect`) that changed. */
  keys: string[];
  /** The field manager that made it (from managedFields). */
  manager: string;
}

/** The parts of a Node {@link conflictingWrites} compares (a LeanNode has them). */
export interface NodeFields {
  metadata: {
    labels: Readonly<Record<string, string>>;
    annotations: Readonly<Record<string, string>>;
    owners?: FieldOwners;
  };
  spec: { providerID?: string; taints: ReadonlyArray<{ key: string; value?: string; effect: string }> };
  status: { addresses: ReadonlyArray<{ type: string; address: string }> };
}

function addressesOf(n: NodeFields, type: string): string[] {
  return n.status.addresses.filter((a) => a.type === type).map((a) => a.address);
}

/**
 * The field manager of a Node's own kubelet, which writes its addresses at registration (and whose
 * node IPs this CCM checks itself): its changes are no second writer's.
 */
const KUBELET_MANAGER = "kubelet";

/** A status.addresses entry. */
export interface Address {
  type: string;
  address: string;
}

/**
 * Entries of status.addresses another manager added or changed that cloud-node is about to remove
 * or change, by their owner: the address types whose entries changed from `old` to `now`, differ
 * in `now` from `want` (cloud-node's list for the node), and belong (managedFields) to a manager
 * that is neither `self` nor the kubelet. Nothing while cloud-node's list is unknown (it has not
 * decided one: it is about to change nothing), nor for entries nobody owns.
 */
function addressConflicts(
  old: NodeFields,
  now: NodeFields,
  self: string,
  want: readonly Address[] | undefined,
): ConflictingWrite[] {
  if (want === undefined) return [];
  const same = (a: readonly string[], b: readonly string[]) => sameList(a, b, (x, y) => x === y);
  const wanted = (type: string) => want.filter((a) => a.type === type).map((a) => a.address);
  const types = new Set([...old.status.addresses, ...now.status.addresses].map((a) => a.type));
  const byManager = new Map<string, string[]>();
  for (const type of types) {
    const entries = addressesOf(now, type);
    if (same(addressesOf(old, type), entries) || same(entries, wanted(type))) continue;
    const owner = own(now.metadata.owners?.addresses, type);
    if (owner === undefined || owner === self || owner === KUBELET_MANAGER) continue;
    byManager.set(owner, [...(byManager.get(owner) ?? []), type]);
  }
  return [...byManager].map(([manager, keys]) => ({ field: "status.addresses", keys, manager }));
}

/** Keys of labels or annotations `self` owned whose value another owner changed. */
function mapConflicts(
  field: "metadata.labels" | "metadata.annotations",
  old: NodeFields,
  now: NodeFields,
  self: string,
): ConflictingWrite[] {
  const which = field === "metadata.labels" ? "labels" : "annotations";
  const before = old.metadata.owners?.[which] ?? {};
  const byManager = new Map<string, string[]>();
  for (const [key, owner] of Object.entries(before)) {
    if (owner !== self) continue;
    const value = own(now.metadata[which], key);
    if (value === undefined || value === own(old.metadata[which], key)) continue;
    const by = own(now.metadata.owners?.[which], key);
    if (by === undefined || by === self) continue;
    byManager.set(by, [...(byManager.get(by) ?? []), key]);
  }
  return [...byManager].map(([manager, keys]) => ({ field, keys, manager }));
}

/**
 * The changes from `old` to `now` that a field manager other than `self` made to fields `self`
 * owns: status.addresses entries another manager than the kubelet added or changed and cloud-node
 * is about to undo (`wantAddresses`), labels and annotations `self` had written, a providerID set
 * by someone else, and taints `self`'s rules put there (`managedTaints`, `key:Effect`) that
 * someone else removed or changed. Removals carry no owner and are not reported (an address entry
 * another writer removed cloud-node adds again silently).
 * @param self the field manager this CCM's writes are recorded under.
 * @param managedTaints the taints the rules put on the node (its record's), `key:Effect`.
 * @param wantAddresses cloud-node's address list for the node (its latest decision); undefined
 *   while it has none, and then no address entry is reported.
 */
export function conflictingWrites(
  old: NodeFields,
  now: NodeFields,
  self: string,
  managedTaints: readonly string[] = [],
  wantAddresses?: readonly Address[],
): ConflictingWrite[] {
  const out = addressConflicts(old, now, self, wantAddresses);
  out.push(...mapConflicts("metadata.labels", old, now, self));
  out.push(...mapConflicts("metadata.annotations", old, now, self));
  const providerID = now.spec.providerID ?? "";
  const by = now.metadata.owners?.providerID;
  if ((old.spec.providerID ?? "") === "" && providerID !== "" && by !== undefined && by !== self)
    out.push({ field: "spec.providerID", keys: [providerID], manager: by });
  const taintsBy = now.metadata.owners?.taints;
  if (taintsBy !== undefined && taintsBy !== self) {
    const show = (t: { key: string; value?: string; effect: string }) =>
      `${t.key}=${t.value ?? ""}:${t.effect}`;
    const nowTaints = new Set(now.spec.taints.map(show));
    const changed = old.spec.taints
      .filter((t) => managedTaints.includes(`${t.key}:${t.effect}`) && !nowTaints.has(show(t)))
      .map((t) => `${t.key}:${t.effect}`);
    if (changed.length > 0) out.push({ field: "spec.taints", keys: changed, manager: taintsBy });
  }
  return out;
}
