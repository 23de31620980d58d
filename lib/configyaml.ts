// The cloud config's YAML document as plain data (strings, null, lists, maps: scalars keep their
// source text, `<<` merges are applied, aliases expanded within a node budget), recording the line of
// every path it converts, and the way issues spell a path. lib/config.ts checks and compiles the
// result. Pure.

import { type Alias, type Document, isAlias, isMap, isScalar, isSeq, type LineCounter, visit } from "yaml";
import type { ConfigIssue } from "./configissue.ts";

export type Plain = string | null | Plain[] | { [key: string]: Plain };
export type Path = readonly (string | number)[];

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Formats a path the way issues show it.
 * @example formatPath(["transformations", 0, "labels", "a/b"]) // 'transformations[0].labels["a/b"]'
 */
export function formatPath(path: Path): string {
  let out = "";
  for (const seg of path) {
    if (typeof seg === "number") out += `[${seg}]`;
    else if (IDENTIFIER.test(seg)) out += out === "" ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** The document expands (aliases included) to more nodes than its budget. */
export class TooLargeError extends Error {}

/** A conversion in progress: where lines are recorded, what is left of the budget, the errors found. */
export interface Walk {
  lines: LineCounter;
  lineOf: Map<string, number>;
  budget: number;
  /** Collections being converted: an alias to one of them is a cycle. */
  open: Set<unknown>;
  /** What each alias refers to (see {@link resolveAliases}). */
  anchors: Map<Alias, unknown>;
  /** Depth of alias expansion; lines inside an expansion are the anchor's, so they are not recorded. */
  aliasDepth: number;
  errors: ConfigIssue[];
}

function lineAt(lines: LineCounter, node: unknown): number | undefined {
  const range = (node as { range?: [number, number, number] } | null)?.range;
  return range ? lines.linePos(range[0]).line : undefined;
}

function mark(w: Walk, path: Path, node: unknown): void {
  if (w.aliasDepth > 0) return;
  const line = lineAt(w.lines, node);
  if (line !== undefined) w.lineOf.set(formatPath(path), line);
}

/** Records a structural YAML error found while converting. */
function fault(w: Walk, path: Path, node: unknown, message: string): void {
  const line = lineAt(w.lines, node);
  w.errors.push(
    line === undefined ? { path: formatPath(path), message } : { path: formatPath(path), line, message },
  );
}

/**
 * Resolves every alias of the document in one walk: an alias refers to the last node with its
 * anchor before it, as Alias.resolve() finds it (which walks the whole document for each alias).
 */
export function resolveAliases(doc: Document): Map<Alias, unknown> {
  const anchored = new Map<string, unknown>();
  const resolved = new Map<Alias, unknown>();
  visit(doc, {
    Node: (_key, node) => {
      if (isAlias(node)) resolved.set(node, anchored.get(node.source));
      else if (node.anchor) anchored.set(node.anchor, node);
    },
  });
  return resolved;
}

function isMergeKey(key: unknown): boolean {
  return isScalar(key) && typeof key.value === "symbol" && key.value.description === "<<";
}

/** The node as plain data, recording the line of every path it converts. @throws {TooLargeError} past the budget. */
export function toPlain(node: unknown, w: Walk, path: Path): Plain {
  if (--w.budget < 0) throw new TooLargeError();
  if (isAlias(node)) {
    const target = w.anchors.get(node);
    if (target === undefined) {
      fault(w, path, node, `unknown anchor in alias *${node.source}`);
      return null;
    }
    if (w.open.has(target)) {
      fault(w, path, node, "alias refers to itself");
      return null;
    }
    w.aliasDepth++;
    try {
      return toPlain(target, w, path);
    } finally {
      w.aliasDepth--;
    }
  }
  if (isScalar(node)) {
    // yaml.v3 hands a string field the scalar's source text: `1.10` stays "1.10", `True` stays "True".
    return node.value === null || node.value === undefined ? null : String(node.source ?? node.value);
  }
  if (isSeq(node)) {
    w.open.add(node);
    const out = node.items.map((item, i) => {
      mark(w, [...path, i], item);
      return toPlain(item, w, [...path, i]);
    });
    w.open.delete(node);
    return out;
  }
  if (isMap(node)) {
    w.open.add(node);
    const out: { [key: string]: Plain } = Object.create(null);
    const merges: unknown[] = [];
    for (const pair of node.items) {
      if (isMergeKey(pair.key)) {
        merges.push(pair.value);
        continue;
      }
      const key = toPlain(pair.key, w, path);
      if (key !== null && typeof key !== "string") {
        fault(w, path, pair.key, "mapping keys must be scalars");
        continue;
      }
      const childPath = [...path, key ?? ""];
      mark(w, childPath, pair.key);
      out[key ?? ""] = toPlain(pair.value, w, childPath);
    }
    for (const merge of merges) mergeInto(out, merge, w, path);
    w.open.delete(node);
    return out;
  }
  return null;
}

/** Applies a `<<` merge: explicit keys win, then earlier merged mappings over later ones. */
function mergeInto(out: { [key: string]: Plain }, value: unknown, w: Walk, path: Path): void {
  const source = isAlias(value) ? w.anchors.get(value) : value;
  // A single alias goes through toPlain as is, so that its cycle check applies.
  const parts = isSeq(source) ? source.items : [value];
  for (const part of parts) {
    const known = w.errors.length;
    const plain = toPlain(part, w, path);
    if (plain === null || typeof plain !== "object" || Array.isArray(plain)) {
      if (w.errors.length === known) fault(w, path, part, "a `<<` merge needs mappings");
      continue;
    }
    for (const [k, val] of Object.entries(plain)) if (!Object.hasOwn(out, k)) out[k] = val;
  }
}
