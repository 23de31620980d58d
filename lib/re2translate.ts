// Translation of a parsed Go pattern (re2parse.ts) to equivalent `u`-flag JavaScript source: the
// `source` of the RegExp compileRegex returns, and the membership test for classes and folded
// literals that the matcher (re2vm.ts) leaves to JavaScript's engine.

import type { ClassItem } from "./re2classes.ts";
import type { AssertKind, Node } from "./re2parse.ts";

const SYNTAX_CHARS = "\\^$.*+?()[]{}|/";
const CLASS_SPECIALS = "\\]^-[";

function emitChar(cp: number, inClass: boolean): string {
  if (cp >= 0x20 && cp < 0x7f) {
    const ch = String.fromCharCode(cp);
    return (inClass ? CLASS_SPECIALS : SYNTAX_CHARS).includes(ch) ? `\\${ch}` : ch;
  }
  return `\\u{${cp.toString(16)}}`;
}

function emitItem(item: ClassItem): string {
  if ("prop" in item) return `${item.negated ? "\\P" : "\\p"}{${item.prop}}`;
  if (item.lo === item.hi) return emitChar(item.lo, true);
  return `${emitChar(item.lo, true)}-${emitChar(item.hi, true)}`;
}

/**
 * The JavaScript for one character-consuming node (a literal, class or dot).
 * @example emitAtom({ op: "any", nl: false }) // "[^\\n]"
 */
export function emitAtom(node: Node & { op: "lit" | "class" | "any" }): string {
  if (node.op === "any") return node.nl ? "[^]" : "[^\\n]";
  if (node.op === "lit") return node.fold ? `(?i:${emitChar(node.cp, false)})` : emitChar(node.cp, false);
  // Go folds \P{Lu} to "not Lu nor anything folding to Lu"; JavaScript's (?i:\P{Lu}) folds the
  // complement instead (and so matches "A"), hence a lookahead for those items.
  const folded = (item: ClassItem) => node.fold && "prop" in item && item.negated;
  const plain = node.items.filter((item) => !folded(item));
  const lookaheads = node.items
    .filter(folded)
    .map((item) => `(?!(?i:\\p{${(item as { prop: string }).prop}}))[^]`);
  const set = `[${node.negated && lookaheads.length === 0 ? "^" : ""}${plain.map(emitItem).join("")}]`;
  const union = [
    ...(plain.length > 0 || lookaheads.length === 0 ? [node.fold ? `(?i:${set})` : set] : []),
    ...lookaheads,
  ];
  if (lookaheads.length === 0) return union[0] as string;
  return node.negated ? `(?:(?!${union.join("|")})[^])` : `(?:${union.join("|")})`;
}

const ASSERTIONS: Record<AssertKind, string> = {
  bot: "^",
  eot: "$",
  bol: "(?<![^\\n])",
  eol: "(?![^\\n])",
  wb: "\\b",
  nwb: "\\B",
};

/** The JavaScript for a subtree; see jsSource. */
function emit(node: Node, jsNames: readonly (string | undefined)[]): string {
  switch (node.op) {
    case "lit":
    case "class":
    case "any":
      return emitAtom(node);
    case "assert":
      return ASSERTIONS[node.kind];
    case "empty":
      return "";
    case "cat": {
      let out = "";
      let foldRun = "";
      for (const sub of node.subs) {
        if (sub.op === "lit" && sub.fold) {
          foldRun += emitChar(sub.cp, false);
          continue;
        }
        if (foldRun !== "") out += `(?i:${foldRun})`;
        foldRun = "";
        out += sub.op === "alt" ? `(?:${emit(sub, jsNames)})` : emit(sub, jsNames);
      }
      return foldRun === "" ? out : `${out}(?i:${foldRun})`;
    }
    case "alt":
      return node.subs.map((sub) => emit(sub, jsNames)).join("|");
    case "cap": {
      const name = jsNames[node.index];
      return `(${name === undefined ? "" : `?<${name}>`}${emit(node.sub, jsNames)})`;
    }
    case "rep": {
      const atomic = ["lit", "class", "any", "cap"].includes(node.sub.op);
      const inner = emit(node.sub, jsNames);
      const operand = atomic ? inner : `(?:${inner})`;
      const { min, max } = node;
      const quantifier =
        max === -1
          ? min === 0
            ? "*"
            : min === 1
              ? "+"
              : `{${min},}`
          : min === 0 && max === 1
            ? "?"
            : min === max
              ? `{${min}}`
              : `{${min},${max}}`;
      return `${operand}${quantifier}${node.greedy ? "" : "?"}`;
    }
  }
}

/** JavaScript names for capture groups: Go allows names JavaScript does not. */
function jsGroupNames(names: readonly (string | undefined)[]): (string | undefined)[] {
  const seen = new Map<string, number>();
  return names.map((name) => {
    if (name === undefined) return undefined;
    const count = (seen.get(name) ?? 0) + 1;
    seen.set(name, count);
    const base = /^[0-9]/.test(name) ? `$${name}` : name;
    return count === 1 ? base : `${base}$${count}`;
  });
}

/**
 * JavaScript source equivalent to the tree. Flags are compiled into the tree, so the only
 * JavaScript flag is `u`: case folding becomes `(?i:…)` around literals and classes, `^`/`$` under
 * (?m) become lookarounds for `\n` only (JavaScript's multiline mode also breaks at `\r`, U+2028 and
 * U+2029), and `.` becomes `[^\n]`. Group names JavaScript cannot take (a leading digit, a repeat)
 * are renamed; the matcher reports Go's names.
 * @example jsSource(parseRegex("(?i)a.").root, [undefined]) // "(?i:a)[^\\n]"
 */
export function jsSource(root: Node, names: readonly (string | undefined)[]): string {
  return emit(root, jsGroupNames(names));
}
