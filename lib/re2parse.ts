// The parser of Go's RE2 syntax (as Go's `regexp.Compile` accepts it: the Perl flavour with
// OneLine, ClassNL, PerlX and UnicodeGroups) into a syntax tree with flags compiled in, with Go's
// limits (nesting, repeat counts, program size) and Go's error wording, so users recognise their
// config errors. Character classes: re2classes.ts.

import {
  type ClassItem,
  isAlnum,
  MAX_RUNE,
  perlClassItems,
  posixClassItems,
  unicodeClassItems,
} from "./re2classes.ts";

/** A pattern Go would reject, one JavaScript cannot run the same way, or an input too large to match. */
export class RegexError extends Error {
  override readonly name = "RegexError";
}

/** Go's `maxHeight`: parse trees nested deeper are refused. */
const MAX_HEIGHT = 1000;
/** Go's counted-repetition limit. */
const MAX_REPEAT = 1000;

/** Zero-width assertions: text and line boundaries, word boundaries. */
export type AssertKind = "bot" | "eot" | "bol" | "eol" | "wb" | "nwb";

/** A node of the syntax tree; flags ((?i), (?s), (?m), (?U)) are already applied to each node. */
export type Node =
  | { op: "lit"; cp: number; fold: boolean }
  | { op: "class"; items: ClassItem[]; negated: boolean; fold: boolean }
  | { op: "any"; nl: boolean }
  | { op: "assert"; kind: AssertKind }
  | { op: "empty" }
  | { op: "cat"; subs: Node[] }
  | { op: "alt"; subs: Node[] }
  | { op: "rep"; sub: Node; min: number; max: number; greedy: boolean }
  | { op: "cap"; sub: Node; index: number };

interface Flags {
  fold: boolean;
  dotNL: boolean;
  multiLine: boolean;
  ungreedy: boolean;
}

/** Parses Go regexp syntax (the Perl flavour: OneLine, ClassNL, PerlX, UnicodeGroups). */
class Parser {
  readonly #src: string;
  #pos = 0;
  #flags: Flags = { fold: false, dotNL: false, multiLine: false, ungreedy: false };
  #depth = 0;
  /** Capture names by group index; index 0 is the whole match. */
  readonly names: (string | undefined)[] = [undefined];

  constructor(src: string) {
    this.#src = src;
  }

  parse(): Node {
    const node = this.#alternation();
    if (this.#pos < this.#src.length) this.#fail("unexpected )", this.#src);
    return node;
  }

  #fail(code: string, expr: string, hint?: string): never {
    throw new RegexError(
      `Cannot compile regexp \`${this.#src}\`: ${code}: \`${expr}\`${hint === undefined ? "" : ` (${hint})`}`,
    );
  }

  /** The code point at `i`, refusing lone surrogates as Go refuses invalid UTF-8. */
  #cp(i: number): number {
    const cp = this.#src.codePointAt(i) ?? -1;
    if (cp >= 0xd800 && cp <= 0xdfff) this.#fail("invalid UTF-8", this.#src.slice(i));
    return cp;
  }

  #alternation(): Node {
    const subs = [this.#concat()];
    while (this.#src[this.#pos] === "|") {
      this.#pos++;
      subs.push(this.#concat());
    }
    return subs.length === 1 ? (subs[0] as Node) : { op: "alt", subs };
  }

  #concat(): Node {
    const src = this.#src;
    const items: Node[] = [];
    let lastRepeat = -1;
    while (this.#pos < src.length) {
      const c = src[this.#pos];
      if (c === "|" || c === ")") break;
      let repeat = -1;
      switch (c) {
        case "(": {
          const group = this.#group();
          if (group !== undefined) items.push(group);
          break;
        }
        case "[":
          items.push(this.#class());
          break;
        case ".":
          this.#pos++;
          items.push({ op: "any", nl: this.#flags.dotNL });
          break;
        case "^":
          this.#pos++;
          items.push({ op: "assert", kind: this.#flags.multiLine ? "bol" : "bot" });
          break;
        case "$":
          this.#pos++;
          items.push({ op: "assert", kind: this.#flags.multiLine ? "eol" : "eot" });
          break;
        case "*":
        case "+":
        case "?":
        case "{":
          repeat = this.#repeat(items, lastRepeat);
          break;
        case "\\":
          this.#escape(items);
          break;
        default: {
          const cp = this.#cp(this.#pos);
          this.#pos += cp > 0xffff ? 2 : 1;
          items.push({ op: "lit", cp, fold: this.#flags.fold });
        }
      }
      lastRepeat = repeat;
    }
    if (items.length === 0) return { op: "empty" };
    return items.length === 1 ? (items[0] as Node) : { op: "cat", subs: items };
  }

  /** Applies a repetition operator to the last item; returns where the operator starts. */
  #repeat(items: Node[], lastRepeat: number): number {
    const src = this.#src;
    const start = this.#pos;
    let min: number;
    let max: number;
    const c = src[start];
    if (c === "{") {
      const counts = parseCounts(src, start);
      if (counts === undefined) {
        this.#pos++;
        items.push({ op: "lit", cp: 0x7b, fold: this.#flags.fold });
        return -1;
      }
      [min, max] = counts;
      this.#pos = counts[2];
      if (min < 0 || min > MAX_REPEAT || max > MAX_REPEAT || (max >= 0 && min > max)) {
        this.#fail("invalid repeat count", src.slice(start, this.#pos));
      }
    } else {
      this.#pos++;
      [min, max] = c === "*" ? [0, -1] : c === "+" ? [1, -1] : [0, 1];
    }
    let greedy = !this.#flags.ungreedy;
    if (src[this.#pos] === "?") {
      this.#pos++;
      greedy = !greedy;
    }
    if (lastRepeat >= 0) this.#fail("invalid nested repetition operator", src.slice(lastRepeat, this.#pos));
    const sub = items.pop();
    if (sub === undefined) this.#fail("missing argument to repetition operator", src.slice(start, this.#pos));
    const node: Node = { op: "rep", sub, min, max, greedy };
    if (c === "{" && (min >= 2 || max >= 2) && !repeatIsValid(node, MAX_REPEAT)) {
      this.#fail("invalid repeat count", src.slice(start, this.#pos));
    }
    items.push(node);
    return start;
  }

  /** Parses a group or a flag change; flag changes yield no node. */
  #group(): Node | undefined {
    const src = this.#src;
    const start = this.#pos;
    let name: string | undefined;
    let capture = true;
    const saved = this.#flags;
    if (src.startsWith("(?", start)) {
      const named = src.startsWith("(?P<", start) ? 4 : src.startsWith("(?<", start) ? 3 : 0;
      if (named > 0 && src.length - start > named) {
        const hint = /^\(\?<[=!]/.test(src.slice(start)) ? "lookbehind is not supported by RE2" : undefined;
        const end = src.indexOf(">", start);
        if (end < 0) this.#fail("invalid named capture", src.slice(start), hint);
        name = src.slice(start + named, end);
        if (!/^[A-Za-z0-9_]+$/.test(name))
          this.#fail("invalid named capture", src.slice(start, end + 1), hint);
        this.#pos = end + 1;
      } else {
        const flags = { ...this.#flags };
        let t = start + 2;
        let negate = false;
        let sawFlag = false;
        for (;;) {
          if (t >= src.length) this.#fail("invalid or unsupported Perl syntax", src.slice(start, t));
          const ch = src[t];
          t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
          if (ch === "i" || ch === "m" || ch === "s" || ch === "U") {
            const key = ch === "i" ? "fold" : ch === "m" ? "multiLine" : ch === "s" ? "dotNL" : "ungreedy";
            flags[key] = !negate;
            sawFlag = true;
          } else if (ch === "-" && !negate) {
            negate = true;
            sawFlag = false;
          } else if ((ch === ":" || ch === ")") && (!negate || sawFlag)) {
            this.#pos = t;
            this.#flags = flags;
            if (ch === ")") return undefined;
            capture = false;
            break;
          } else {
            const hint =
              ch === "=" || ch === "!"
                ? "lookahead is not supported by RE2"
                : ch === "<"
                  ? "lookbehind is not supported by RE2"
                  : undefined;
            this.#fail("invalid or unsupported Perl syntax", src.slice(start, t), hint);
          }
        }
      }
    } else {
      this.#pos++;
    }
    if (++this.#depth > MAX_HEIGHT) this.#fail("expression nests too deeply", src);
    let index = 0;
    if (capture) {
      index = this.names.length;
      this.names.push(name);
    }
    const sub = this.#alternation();
    if (src[this.#pos] !== ")") this.#fail("missing closing )", src);
    this.#pos++;
    this.#depth--;
    this.#flags = saved;
    return capture ? { op: "cap", sub, index } : sub;
  }

  #escape(items: Node[]): void {
    const src = this.#src;
    const start = this.#pos;
    const c = src[start + 1];
    const fold = this.#flags.fold;
    switch (c) {
      case "A":
      case "z":
      case "b":
      case "B":
        this.#pos += 2;
        items.push({ op: "assert", kind: c === "A" ? "bot" : c === "z" ? "eot" : c === "b" ? "wb" : "nwb" });
        return;
      case "C":
        this.#fail(
          "invalid escape sequence",
          "\\C",
          "\\C matches single bytes, which JavaScript strings lack",
        );
        break;
      case "Q": {
        const end = src.indexOf("\\E", start + 2);
        const text = src.slice(start + 2, end < 0 ? src.length : end);
        for (let i = 0; i < text.length; ) {
          const cp = this.#cp(start + 2 + i);
          items.push({ op: "lit", cp, fold });
          i += cp > 0xffff ? 2 : 1;
        }
        this.#pos = end < 0 ? src.length : end + 2;
        return;
      }
      case "p":
      case "P":
        items.push({ op: "class", items: this.#unicodeClass(), negated: false, fold });
        return;
      case "d":
      case "D":
      case "s":
      case "S":
      case "w":
      case "W":
        this.#pos += 2;
        items.push({ op: "class", items: perlClassItems(c, fold), negated: false, fold });
        return;
    }
    items.push({ op: "lit", cp: this.#escapeChar(), fold });
  }

  /** Parses a single-character escape at the current position and returns its code point. */
  #escapeChar(): number {
    const src = this.#src;
    const start = this.#pos;
    if (start + 1 >= src.length) this.#fail("trailing backslash at end of expression", "");
    const c = this.#cp(start + 1);
    let t = start + 1 + (c > 0xffff ? 2 : 1);
    const isOctal = (i: number) => src[i] !== undefined && src[i] >= "0" && src[i] <= "7";
    const fail = (): never => {
      const hint = c >= 0x31 && c <= 0x39 ? "backreferences are not supported by RE2" : undefined;
      return this.#fail("invalid escape sequence", src.slice(start, t), hint);
    };
    if (c < 0x80 && !isAlnum(c)) {
      this.#pos = t;
      return c;
    }
    if ((c >= 0x31 && c <= 0x37 && isOctal(t)) || c === 0x30) {
      let value = c - 0x30;
      for (let i = 1; i < 3 && isOctal(t); i++, t++) value = value * 8 + (src.charCodeAt(t) - 0x30);
      this.#pos = t;
      return value;
    }
    const simple: Record<string, number> = { a: 7, f: 12, n: 10, r: 13, t: 9, v: 11 };
    const ch = String.fromCodePoint(c);
    const escaped = Object.hasOwn(simple, ch) ? simple[ch] : undefined;
    if (escaped !== undefined) {
      this.#pos = t;
      return escaped;
    }
    if (ch !== "x") fail();
    if (t >= src.length) fail();
    if (src[t] === "{") {
      t++;
      let value = 0;
      let digits = 0;
      for (;;) {
        if (t >= src.length) fail();
        const d = src[t] as string;
        t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
        if (d === "}") break;
        const v = hexValue(d);
        if (v < 0) fail();
        value = value * 16 + v;
        if (value > MAX_RUNE) fail();
        digits++;
      }
      if (digits === 0) fail();
      this.#pos = t;
      return value;
    }
    const hi = hexValue(src[t] ?? "");
    t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
    const lo = hexValue(src[t] ?? "");
    if (t < src.length) t += (src.codePointAt(t) ?? 0) > 0xffff ? 2 : 1;
    if (hi < 0 || lo < 0) fail();
    this.#pos = t;
    return hi * 16 + lo;
  }

  /** Parses `\pL`, `\p{Greek}`, `\P{^Lu}` at the current position. */
  #unicodeClass(): ClassItem[] {
    const src = this.#src;
    const start = this.#pos;
    let negated = src[start + 1] === "P";
    let name: string;
    let end: number;
    if (src[start + 2] === "{") {
      const close = src.indexOf("}", start);
      if (close < 0) this.#fail("invalid character class range", src.slice(start));
      name = src.slice(start + 3, close);
      end = close + 1;
    } else {
      const cp = start + 2 < src.length ? this.#cp(start + 2) : -1;
      name = cp < 0 ? "" : String.fromCodePoint(cp);
      end = start + 2 + name.length;
    }
    const seq = src.slice(start, end);
    this.#pos = end;
    if (name.startsWith("^")) {
      negated = !negated;
      name = name.slice(1);
    }
    const items = unicodeClassItems(name, negated, this.#flags.fold);
    if (items === undefined) this.#fail("invalid character class range", seq);
    return items;
  }

  #class(): Node {
    const src = this.#src;
    const start = this.#pos;
    const fold = this.#flags.fold;
    let t = start + 1;
    const negated = src[t] === "^";
    if (negated) t++;
    const items: ClassItem[] = [];
    let first = true;
    while (first || src[t] !== "]") {
      if (t >= src.length) this.#fail("missing closing ]", src.slice(start));
      first = false;
      if (src.startsWith("[:", t) && src.length - t > 2) {
        const close = src.indexOf(":]", t + 2);
        if (close >= 0) {
          const name = src.slice(t, close + 2);
          const group = posixClassItems(name.slice(2, -2), fold);
          if (group === undefined) this.#fail("invalid character class range", name);
          items.push(...group);
          t = close + 2;
          continue;
        }
      }
      if (src[t] === "\\" && (src[t + 1] === "p" || src[t + 1] === "P")) {
        this.#pos = t;
        items.push(...this.#unicodeClass());
        t = this.#pos;
        continue;
      }
      if (src[t] === "\\" && "dDsSwW".includes(src[t + 1] ?? "_")) {
        items.push(...perlClassItems(src[t + 1] as string, fold));
        t += 2;
        continue;
      }
      const rangeStart = t;
      const lo = this.#classChar(t, start);
      t = this.#pos;
      let hi = lo;
      if (src[t] === "-" && t + 1 < src.length && src[t + 1] !== "]") {
        hi = this.#classChar(t + 1, start);
        t = this.#pos;
        if (hi < lo) this.#fail("invalid character class range", src.slice(rangeStart, t));
      }
      items.push({ lo, hi });
    }
    this.#pos = t + 1;
    return { op: "class", items, negated, fold };
  }

  #classChar(t: number, classStart: number): number {
    const src = this.#src;
    if (t >= src.length) this.#fail("missing closing ]", src.slice(classStart));
    this.#pos = t;
    if (src[t] === "\\") return this.#escapeChar();
    const cp = this.#cp(t);
    this.#pos = t + (cp > 0xffff ? 2 : 1);
    return cp;
  }
}

/** Parses `{n}`, `{n,}` or `{n,m}` at `start`: [min, max (-1 = unbounded), end], or undefined if not a repeat. */
function parseCounts(src: string, start: number): [number, number, number] | undefined {
  const m = /^\{(0|[1-9][0-9]*)(?:(,)(0|[1-9][0-9]*)?)?\}/.exec(src.slice(start));
  if (m === null) return undefined;
  const num = (s: string) => (s.length > 8 ? -1 : Number(s));
  const min = num(m[1] as string);
  const max = m[2] === undefined ? min : m[3] === undefined ? -1 : num(m[3]);
  return [max === -1 && m[3] !== undefined ? -1 : min, max, start + m[0].length];
}

/** Go's check that nested counted repetitions do not exceed `n` copies of the innermost thing. */
function repeatIsValid(node: Node, n: number): boolean {
  let budget = n;
  if (node.op === "rep") {
    let m = node.max;
    if (m === 0) return true;
    if (m < 0) m = node.min;
    if (m > budget) return false;
    if (m > 0) budget = Math.floor(budget / m);
  }
  return childrenOf(node).every((sub) => repeatIsValid(sub, budget));
}

function childrenOf(node: Node): Node[] {
  switch (node.op) {
    case "cat":
    case "alt":
      return node.subs;
    case "rep":
    case "cap":
      return [node.sub];
    default:
      return [];
  }
}

function hexValue(c: string): number {
  return /^[0-9A-Fa-f]$/.test(c) ? Number.parseInt(c, 16) : -1;
}

/** Go's tree height and compiled-size limits (`expression nests too deeply`, `expression too large`). */
function checkLimits(node: Node, pattern: string): void {
  const fail = (code: string) => {
    throw new RegexError(`Cannot compile regexp \`${pattern}\`: ${code}: \`${pattern}\``);
  };
  const height = (n: Node): number => 1 + childrenOf(n).reduce((most, sub) => Math.max(most, height(sub)), 0);
  if (height(node) > MAX_HEIGHT) fail("expression nests too deeply");
  const size = (n: Node): number => {
    switch (n.op) {
      case "cat":
        return Math.max(
          1,
          n.subs.reduce((sum, s) => sum + size(s), 0),
        );
      case "alt":
        return n.subs.reduce((sum, s) => sum + size(s), 0) + n.subs.length - 1;
      case "cap":
        return 2 + size(n.sub);
      case "rep": {
        const sub = size(n.sub);
        if (n.max === -1) return n.min === 0 ? 2 + sub : 1 + n.min * sub;
        return Math.max(1, n.max * sub + (n.max - n.min));
      }
      default:
        return 1;
    }
  };
  if (size(node) > (128 << 20) / 40) fail("expression too large");
}

/** A parsed pattern: the tree and the capture names by group index (index 0 is the whole match). */
export interface ParsedRegex {
  root: Node;
  names: (string | undefined)[];
}

/**
 * Parses a Go pattern and checks Go's size limits.
 * @throws RegexError with Go's message when Go would reject the pattern, or with a hint when it uses
 * syntax RE2 lacks (lookaround, backreferences).
 * @example parseRegex("(?P<id>\\d+)").names // [undefined, "id"]
 */
export function parseRegex(pattern: string): ParsedRegex {
  const parser = new Parser(pattern);
  const root = parser.parse();
  checkLimits(root, pattern);
  return { root, names: parser.names };
}
