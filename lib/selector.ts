// nodeSelector matching for transformation rules: a selector is an OR of terms, a term an AND of
// requirements over the node's PlatformMetadata. Requirements are compiled once (regexes, integer
// bounds) and matched by pure functions.
//
// Semantics follow the reference's pkg/nodeselector, which differ from Kubernetes' label selectors
// in two ways kept here for drop-in behaviour: keys are PlatformMetadata YAML keys compared
// case-insensitively (not node labels, not SystemInformation), and a requirement on a key the node
// lacks is false for every operator except DoesNotExist (Kubernetes' NotIn would be true).

import { compileRegex } from "./re2.ts";
import { quoteValue, withoutLongValue } from "./suggest.ts";
import type { PlatformMetadata } from "./types.ts";

/** The operators a requirement may use. */
const SELECTOR_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Regexp"] as const;

/** One of {@link SELECTOR_OPERATORS}. */
export type SelectorOperator = (typeof SELECTOR_OPERATORS)[number];

/**
 * The keys a requirement can test, spelled as in Talos' PlatformMetadata YAML. `tags` is a map and,
 * as in the reference, cannot be selected on. Matching ignores case.
 */
export const SELECTOR_KEYS = [
  "platform",
  "hostname",
  "region",
  "zone",
  "instanceType",
  "instanceId",
  "providerId",
  "spot",
  "internalDNS",
  "externalDNS",
] as const satisfies readonly (keyof PlatformMetadata)[];

/** A compiled requirement; `key` is lower-cased. */
export type Requirement =
  | { key: string; operator: "In" | "NotIn"; values: readonly string[] }
  | { key: string; operator: "Exists" | "DoesNotExist" }
  | { key: string; operator: "Gt" | "Lt"; bound: bigint }
  | { key: string; operator: "Regexp"; regex: RegExp };

/**
 * A compiled term: its requirements are ANDed. A term without requirements matches nothing. Its
 * `name` (the reference's docs name every term) is documentation: shown in logs, Events and
 * `validate`, never matched on.
 */
export interface SelectorTerm {
  name?: string;
  matchExpressions: readonly Requirement[];
}

/** A requirement as written in the config. */
export interface RawRequirement {
  key: string;
  operator: string;
  values: readonly string[];
}

/** Why a requirement cannot be compiled; `path` is relative to the requirement. */
export interface RequirementIssue {
  path: (string | number)[];
  message: string;
}

/** The node facts a selector sees: lower-cased key → value. */
export type SelectorFields = ReadonlyMap<string, string>;

const INT64 = /^[+-]?[0-9]+$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Parses a base-10 int64 as Go's strconv.ParseInt does; undefined when it is not one. */
function parseInt64(text: string): bigint | undefined {
  if (!INT64.test(text)) return undefined;
  const n = BigInt(text);
  return n < INT64_MIN || n > INT64_MAX ? undefined : n;
}

function isOperator(op: string): op is SelectorOperator {
  return (SELECTOR_OPERATORS as readonly string[]).includes(op);
}

/**
 * Compiles a requirement: checks the operator and the number of values it takes, parses Gt/Lt
 * bounds as int64 and compiles the Regexp pattern (Go RE2 syntax).
 * @returns the requirement, or the issues that prevent it (all of them, not just the first).
 * @example compileRequirement({ key: "hostname", operator: "Regexp", values: ["^web-"] })
 */
export function compileRequirement(
  raw: RawRequirement,
): { ok: true; requirement: Requirement } | { ok: false; issues: RequirementIssue[] } {
  const key = raw.key.toLowerCase();
  const { operator, values } = raw;
  const fail = (path: (string | number)[], message: string) => ({
    ok: false as const,
    issues: [{ path, message }],
  });
  if (!isOperator(operator)) {
    const near = SELECTOR_OPERATORS.find((op) => op.toLowerCase() === operator.toLowerCase());
    const hint = near ? ` (did you mean ${JSON.stringify(near)}?)` : "";
    return fail(
      ["operator"],
      `unknown operator ${JSON.stringify(operator)}; expected one of ${SELECTOR_OPERATORS.join(", ")}${hint}`,
    );
  }
  switch (operator) {
    case "In":
    case "NotIn":
      if (values.length === 0) return fail(["values"], `operator ${operator} needs at least one value`);
      return { ok: true, requirement: { key, operator, values: [...values] } };
    case "Exists":
    case "DoesNotExist":
      if (values.length > 0) return fail(["values"], `operator ${operator} takes no values`);
      return { ok: true, requirement: { key, operator } };
    case "Gt":
    case "Lt":
    case "Regexp": {
      if (values.length !== 1) {
        return fail(["values"], `operator ${operator} needs exactly one value, got ${values.length}`);
      }
      const value = values[0] as string;
      if (operator === "Regexp") {
        try {
          return { ok: true, requirement: { key, operator, regex: compileRegex(value) } };
        } catch (err) {
          const reason = err instanceof Error ? err.message : String(err);
          return fail(
            ["values", 0],
            `invalid regular expression ${quoteValue(value)}: ${withoutLongValue(reason, value)}`,
          );
        }
      }
      const bound = parseInt64(value);
      if (bound === undefined) {
        return fail(
          ["values", 0],
          `operator ${operator} needs a base-10 64-bit integer, got ${JSON.stringify(value)}`,
        );
      }
      return { ok: true, requirement: { key, operator, bound } };
    }
  }
}

/**
 * The fields a selector matches against: every non-empty string of the PlatformMetadata under its
 * lower-cased YAML key, and `spot` as "true" or "false" (always present), as the reference builds it.
 */
export function selectorFields(metadata: PlatformMetadata): SelectorFields {
  const fields = new Map<string, string>();
  for (const name of SELECTOR_KEYS) {
    const value = metadata[name];
    if (typeof value === "boolean") fields.set(name.toLowerCase(), String(value));
    else if (value !== "") fields.set(name.toLowerCase(), value);
  }
  return fields;
}

/** Tells whether one requirement holds for `fields`. */
export function matchRequirement(req: Requirement, fields: SelectorFields): boolean {
  const value = fields.get(req.key);
  if (req.operator === "DoesNotExist") return value === undefined;
  if (value === undefined) return false;
  switch (req.operator) {
    case "Exists":
      return true;
    case "In":
      return req.values.includes(value);
    case "NotIn":
      return !req.values.includes(value);
    case "Gt":
    case "Lt": {
      // The reference fails the whole node on a non-integer field; a plain mismatch hurts less.
      const n = parseInt64(value);
      if (n === undefined) return false;
      return req.operator === "Gt" ? n > req.bound : n < req.bound;
    }
    case "Regexp":
      // search() ignores lastIndex, so a pattern compiled with a global flag stays stateless.
      return value.search(req.regex) !== -1;
  }
}

/** Tells whether every requirement of `term` holds; an empty term matches nothing. */
export function matchTerm(term: SelectorTerm, fields: SelectorFields): boolean {
  return term.matchExpressions.length > 0 && term.matchExpressions.every((r) => matchRequirement(r, fields));
}

/**
 * Tells whether a node selector matches: true when any term matches, and true when there are no
 * terms at all (a rule without nodeSelector applies to every node).
 */
export function matchSelector(terms: readonly SelectorTerm[], fields: SelectorFields): boolean {
  return terms.length === 0 || terms.some((t) => matchTerm(t, fields));
}

/**
 * The name of the first term that matches, for logs and Events: "" when the selector matches without
 * a named term (no terms at all, or an unnamed one), undefined when it does not match.
 * @example matchedTermName([{ name: "arm", matchExpressions: [...] }], fields) // "arm"
 */
export function matchedTermName(terms: readonly SelectorTerm[], fields: SelectorFields): string | undefined {
  if (terms.length === 0) return "";
  const term = terms.find((t) => matchTerm(t, fields));
  return term === undefined ? undefined : (term.name ?? "");
}
