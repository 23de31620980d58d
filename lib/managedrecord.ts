// Reconcile mode's record keeping: which of a node's labels, annotations and taints the rules put
// there (the record annotation), so that a removed rule's outputs can be removed without touching
// what other actors set; the digest label that tells that record from one the node's kubelet forged;
// and the plan that turns the rules' result, the record and the node into what to set and remove.

import { createHash } from "node:crypto";
import type { TransformError, TransformResult } from "./transform.ts";
import type { Taint } from "./types.ts";
import { isAnnotationKey, isQualifiedName, isTaintEffect, isTaintKey } from "./validation.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL } from "./wellknown.ts";

/** What the rules put on a node: label and annotation keys, taints as `<key>:<Effect>`. */
export interface ManagedRecord {
  labels: string[];
  annotations: string[];
  taints: string[];
}

/** Longest record value read; a larger one is treated as garbage. */
const MAX_RECORD_BYTES = 64 * 1024;

function taintId(t: Pick<Taint, "key" | "effect">): string {
  return `${t.key}:${t.effect}`;
}

function isTaintId(id: string): boolean {
  const at = id.lastIndexOf(":");
  return at > 0 && isTaintKey(id.slice(0, at)).length === 0 && isTaintEffect(id.slice(at + 1));
}

function cleanList(value: unknown, valid: (s: string) => boolean): { list: string[]; dropped: boolean } {
  if (value === undefined) return { list: [], dropped: false };
  if (!Array.isArray(value)) return { list: [], dropped: true };
  const list = [...new Set(value.filter((s): s is string => typeof s === "string" && valid(s)))].sort();
  return { list, dropped: list.length !== value.length };
}

/**
 * Reads the {@link MANAGED_ANNOTATION} value. Never throws: users can edit annotations, so entries
 * that are not valid keys (or reserved ones) are dropped and `valid` turns false.
 * @param text the annotation's value; undefined when the node has none.
 * @returns the record (empty for garbage) and whether the text was a well-formed record.
 */
export function parseManagedRecord(text: string | undefined): { record: ManagedRecord; valid: boolean } {
  const empty = { labels: [], annotations: [], taints: [] };
  if (text === undefined) return { record: empty, valid: true };
  if (text.length > MAX_RECORD_BYTES) return { record: empty, valid: false };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { record: empty, valid: false };
  }
  if (json === null || typeof json !== "object" || Array.isArray(json))
    return { record: empty, valid: false };
  const obj = json as Record<string, unknown>;
  // Another version may mean other semantics: removing nothing is the safe reading.
  if (obj.v !== 1) return { record: empty, valid: false };
  const labels = cleanList(obj.labels, (k) => k !== MANAGED_DIGEST_LABEL && isQualifiedName(k).length === 0);
  const annotations = cleanList(
    obj.annotations,
    (k) => k !== MANAGED_ANNOTATION && isAnnotationKey(k).length === 0,
  );
  const taints = cleanList(obj.taints, isTaintId);
  return {
    record: { labels: labels.list, annotations: annotations.list, taints: taints.list },
    valid: !labels.dropped && !annotations.dropped && !taints.dropped,
  };
}

/**
 * The {@link MANAGED_DIGEST_LABEL} value for a record annotation value: its SHA-224 in hex, 56
 * characters (label values hold at most 63, SHA-256 in hex would not fit).
 * @example managedRecordDigest('{"v":1}') // "6c1f…" (56 hex digits)
 */
export function managedRecordDigest(text: string): string {
  return createHash("sha224").update(text).digest("hex");
}

/** Why a node's record is not believed: see {@link readManagedRecord}. */
export type RecordProblem = "unsigned" | "mismatch" | "invalid";

/** A Node's record as {@link readManagedRecord} found it. */
export interface ManagedRecordRead {
  record: ManagedRecord;
  problem?: RecordProblem;
}

/**
 * Reads the record a node carries, believing it only when {@link MANAGED_DIGEST_LABEL} holds its
 * digest. Never throws.
 * @param node the node's labels and annotations.
 * @returns the record to plan from, and what is wrong with it, if anything:
 *   - `unsigned`: the annotation without the label (written before records carried a digest, or by
 *     someone else): the record is empty;
 *   - `mismatch`: the label does not match the annotation, or the annotation is gone (someone but the
 *     CCM changed or removed it, e.g. the node's kubelet): the record is empty;
 *   - `invalid`: signed but not well-formed (see {@link parseManagedRecord}): its usable entries.
 */
export function readManagedRecord(node: Pick<NodeState, "labels" | "annotations">): ManagedRecordRead {
  const text = node.annotations[MANAGED_ANNOTATION];
  const digest = node.labels[MANAGED_DIGEST_LABEL];
  const empty = { labels: [], annotations: [], taints: [] };
  if (text === undefined && digest === undefined) return { record: empty };
  if (digest === undefined) return { record: empty, problem: "unsigned" };
  if (text === undefined || managedRecordDigest(text) !== digest)
    return { record: empty, problem: "mismatch" };
  const { record, valid } = parseManagedRecord(text);
  return valid ? { record } : { record, problem: "invalid" };
}

/** Serializes a record for {@link MANAGED_ANNOTATION} (sorted, deduplicated, empty lists omitted). */
export function serializeManagedRecord(record: ManagedRecord): string {
  const out: Record<string, unknown> = { v: 1 };
  for (const name of ["labels", "annotations", "taints"] as const) {
    const list = [...new Set(record[name])].sort();
    if (list.length > 0) out[name] = list;
  }
  return JSON.stringify(out);
}

/** The parts of a Node a reconcile plan compares against. */
export interface NodeState {
  labels: Readonly<Record<string, string>>;
  annotations: Readonly<Record<string, string>>;
  taints: readonly Taint[];
}

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
 * @param previous the record read from the node (see {@link readManagedRecord}).
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
  signRecord(plan, node);
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
  const set: Record<string, string> = {};
  const remove: string[] = [];
  for (const [k, val] of Object.entries(want)) if (have[k] !== val) set[k] = val;
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

/**
 * Puts the plan's record and its digest label into the plan (after the rules' own keys), or removes
 * both from the node when the record is empty.
 */
function signRecord(plan: ReconcilePlan, node: NodeState): void {
  const serialized = serializeManagedRecord(plan.record);
  const empty = serialized === serializeManagedRecord({ labels: [], annotations: [], taints: [] });
  const existing = node.annotations[MANAGED_ANNOTATION];
  const signed = node.labels[MANAGED_DIGEST_LABEL];
  if (empty) {
    if (existing !== undefined) plan.removeAnnotations.push(MANAGED_ANNOTATION);
    if (signed !== undefined) plan.removeLabels.push(MANAGED_DIGEST_LABEL);
  } else {
    if (existing !== serialized) plan.setAnnotations[MANAGED_ANNOTATION] = serialized;
    const digest = managedRecordDigest(serialized);
    if (signed !== digest) plan.setLabels[MANAGED_DIGEST_LABEL] = digest;
  }
}
