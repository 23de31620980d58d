// Reconcile mode's record, as data: which of a node's labels, annotations and taints the rules put
// there (the record annotation), so that a removed rule's outputs can be removed without touching
// what other actors set, and the digest label that tells that record from one the node's kubelet
// forged. Its format, reading and signing live here; the plan that uses it to decide what to set and
// remove is part of the Node's decision (lib/desirednode.ts planReconcile).

import { createHash } from "node:crypto";
import { isAnnotationKey, isQualifiedName, isTaintEffect, isTaintKey } from "./kubevalidation.ts";
import type { Taint } from "./types.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL } from "./wellknown.ts";

/** What the rules put on a node: label and annotation keys, taints as `<key>:<Effect>`. */
export interface ManagedRecord {
  labels: string[];
  annotations: string[];
  taints: string[];
}

/** Longest record value read; a larger one is treated as garbage. */
const MAX_RECORD_BYTES = 64 * 1024;

/** A taint as the record names it: `<key>:<Effect>`. */
export function taintId(t: Pick<Taint, "key" | "effect">): string {
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

/**
 * How a Node's record annotation and its digest label change to carry `record`: the serialized
 * record and its digest where they differ from the node's, or the removal of both (null) when the
 * record is empty; a mark absent is left as it is. The annotation and its label always change
 * together, so one patch writes both.
 */
export interface RecordMarks {
  annotation?: string | null;
  digest?: string | null;
}

/** The {@link RecordMarks} that put `record` on `node`. */
export function recordMarks(
  record: ManagedRecord,
  node: Pick<NodeState, "labels" | "annotations">,
): RecordMarks {
  const serialized = serializeManagedRecord(record);
  const empty = serialized === serializeManagedRecord({ labels: [], annotations: [], taints: [] });
  const existing = node.annotations[MANAGED_ANNOTATION];
  const signed = node.labels[MANAGED_DIGEST_LABEL];
  const marks: RecordMarks = {};
  if (empty) {
    if (existing !== undefined) marks.annotation = null;
    if (signed !== undefined) marks.digest = null;
    return marks;
  }
  if (existing !== serialized) marks.annotation = serialized;
  const digest = managedRecordDigest(serialized);
  if (signed !== digest) marks.digest = digest;
  return marks;
}
