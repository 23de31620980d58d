// Kubernetes' own validation rules for what the CCM writes onto a Node: label keys and values,
// annotation keys and their total size, taint keys, values and effects. Ported from
// k8s.io/apimachinery `pkg/api/validate/content` and `pkg/api/validation`, and from
// `pkg/apis/core/validation` (taints), so a value that passes here is accepted by the API server.
// Each check returns a list of reasons (empty when valid), like its Go counterpart.

import { closestKey, editDistance, quoteValue } from "./suggest.ts";
import type { Taint, TaintEffect } from "./types.ts";
import { NOT_READY_TAINT_KEY, SHUTDOWN_TAINT_KEY, UNINITIALIZED_TAINT } from "./wellknown.ts";

const DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN = new RegExp(`^${DNS1123_LABEL}(\\.${DNS1123_LABEL})*$`);
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** Longest DNS-1123 subdomain, also the longest qualified-name prefix. */
const DNS1123_SUBDOMAIN_MAX_LENGTH = 253;
/** Longest name part of a qualified name, and longest label value. */
const QUALIFIED_NAME_MAX_LENGTH = 63;
/** Longest label value. */
const LABEL_VALUE_MAX_LENGTH = 63;
/** Upper bound of the summed byte length of all keys and values of an object's annotations. */
export const ANNOTATIONS_MAX_BYTES = 256 * 1024;

/** The effects the API server accepts on a Node taint. */
const TAINT_EFFECTS: readonly TaintEffect[] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/**
 * Taint keys that Kubernetes (node lifecycle, kubelet, cordon, out-of-service handling) or the cloud
 * provider framework manage themselves. A transformation rule setting one would fight them, or in
 * the case of `uninitialized` keep every node out of service.
 */
export const RESERVED_TAINT_KEYS: ReadonlySet<string> = new Set([
  NOT_READY_TAINT_KEY,
  "node.kubernetes.io/unreachable",
  "node.kubernetes.io/unschedulable",
  "node.kubernetes.io/memory-pressure",
  "node.kubernetes.io/disk-pressure",
  "node.kubernetes.io/network-unavailable",
  "node.kubernetes.io/pid-pressure",
  "node.kubernetes.io/out-of-service",
  UNINITIALIZED_TAINT,
  SHUTDOWN_TAINT_KEY,
]);

/**
 * Checks a DNS-1123 subdomain (lower case, dot-separated labels, at most 253 characters).
 * @returns the reasons it is invalid; empty when valid.
 * @example isDNS1123Subdomain("example.com") // []
 */
export function isDNS1123Subdomain(value: string): string[] {
  const errs: string[] = [];
  if (value.length > DNS1123_SUBDOMAIN_MAX_LENGTH) {
    errs.push(`must be no more than ${DNS1123_SUBDOMAIN_MAX_LENGTH} characters`);
  }
  if (!DNS1123_SUBDOMAIN.test(value)) {
    errs.push(
      "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', " +
        "and must start and end with an alphanumeric character",
    );
  }
  return errs;
}

/**
 * Checks a Kubernetes qualified name: an optional DNS-1123 subdomain prefix and `/`, then a name of
 * at most 63 alphanumerics, `-`, `_` or `.` that starts and ends alphanumeric. Label keys, taint keys
 * and (lower-cased) annotation keys are qualified names.
 * @returns the reasons it is invalid; empty when valid.
 * @example isQualifiedName("node-role.kubernetes.io/web") // []
 */
export function isQualifiedName(value: string): string[] {
  const errs: string[] = [];
  const parts = value.split("/");
  let name: string;
  if (parts.length === 1) {
    name = value;
  } else if (parts.length === 2) {
    const prefix = parts[0] as string;
    name = parts[1] as string;
    if (prefix.length === 0) errs.push("prefix part must be non-empty");
    else for (const msg of isDNS1123Subdomain(prefix)) errs.push(`prefix part ${msg}`);
  } else {
    return [
      "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end " +
        "with an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
    ];
  }
  if (name.length === 0) errs.push("name part must be non-empty");
  else if (name.length > QUALIFIED_NAME_MAX_LENGTH) {
    errs.push(`name part must be no more than ${QUALIFIED_NAME_MAX_LENGTH} characters`);
  }
  if (!QUALIFIED_NAME_PART.test(name)) {
    errs.push(
      "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an " +
        "alphanumeric character",
    );
  }
  return errs;
}

/**
 * Checks a label value: empty, or at most 63 alphanumerics, `-`, `_` or `.` that start and end
 * alphanumeric.
 * @returns the reasons it is invalid; empty when valid.
 */
export function isLabelValue(value: string): string[] {
  const errs: string[] = [];
  if (value.length > LABEL_VALUE_MAX_LENGTH) {
    errs.push(`must be no more than ${LABEL_VALUE_MAX_LENGTH} characters`);
  }
  if (!LABEL_VALUE.test(value)) {
    errs.push(
      "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and " +
        "must start and end with an alphanumeric character",
    );
  }
  return errs;
}

/**
 * Checks an annotation key. The API server lower-cases it before the qualified-name check, so
 * upper-case letters in the prefix are allowed.
 * @returns the reasons it is invalid; empty when valid.
 */
export function isAnnotationKey(key: string): string[] {
  return isQualifiedName(key.toLowerCase());
}

/**
 * The size the API server counts against {@link ANNOTATIONS_MAX_BYTES}: UTF-8 bytes of every key
 * and value.
 */
export function annotationsSize(annotations: Readonly<Record<string, string>>): number {
  let total = 0;
  for (const [k, v] of Object.entries(annotations)) total += Buffer.byteLength(k) + Buffer.byteLength(v);
  return total;
}

/** A misspelling at most this many edits from an effect is named with it. */
const EFFECT_HINT_EDITS = 3;

/**
 * Why `effect` is no taint effect, naming the effect it misspells when it is within
 * {@link EFFECT_HINT_EDITS} edits of one (effects are case-sensitive, as Kubernetes reads them).
 * @example effectProblem("NoSchedul") // 'effect "NoSchedul" is not one of NoSchedule, PreferNoSchedule, NoExecute (closest: "NoSchedule")'
 */
export function effectProblem(effect: string): string {
  const base = `effect ${quoteValue(effect)} is not one of ${TAINT_EFFECTS.join(", ")}`;
  const near = closestKey(effect, TAINT_EFFECTS) as string;
  if (near.toLowerCase() === effect.toLowerCase())
    return `${base}; effects are case-sensitive, did you mean ${JSON.stringify(near)}?`;
  const close = effect !== "" && editDistance(effect.toLowerCase(), near.toLowerCase()) <= EFFECT_HINT_EDITS;
  return close ? `${base} (closest: ${JSON.stringify(near)})` : base;
}

/** Tells whether `value` is one of {@link TAINT_EFFECTS}. */
export function isTaintEffect(value: string): value is TaintEffect {
  return (TAINT_EFFECTS as readonly string[]).includes(value);
}

/**
 * Checks a taint key: a qualified name that is not one of {@link RESERVED_TAINT_KEYS}.
 * @returns the reasons it is invalid; empty when valid.
 */
export function isTaintKey(key: string): string[] {
  const errs = isQualifiedName(key);
  if (RESERVED_TAINT_KEYS.has(key)) errs.push("is managed by Kubernetes or the cloud provider framework");
  return errs;
}

/** The outcome of {@link parseTaint}: the taint, or why it cannot be one. */
export type ParsedTaint = { ok: true; taint: Taint } | { ok: false; errors: string[] };

/**
 * Builds a taint from a config entry `key: "value:Effect"` or `key: "Effect"`, checking the key
 * ({@link isTaintKey}), the value (a label value) and the effect.
 * @example parseTaint("example.com/storage", "ceph:NoSchedule")
 *   // { ok: true, taint: { key: "example.com/storage", value: "ceph", effect: "NoSchedule" } }
 */
export function parseTaint(key: string, spec: string): ParsedTaint {
  const errors = isTaintKey(key).map((e) => `key ${e}`);
  const parts = spec.split(":");
  if (parts.length > 2) {
    errors.push(`must be "<value>:<effect>" or "<effect>", got ${JSON.stringify(spec)}`);
    return { ok: false, errors };
  }
  const value = parts.length === 2 ? (parts[0] as string) : "";
  const effect = parts[parts.length - 1] as string;
  for (const e of isLabelValue(value)) errors.push(`value ${e}`);
  if (!isTaintEffect(effect)) {
    errors.push(effectProblem(effect));
    return { ok: false, errors };
  }
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, taint: value === "" ? { key, effect } : { key, value, effect } };
}
