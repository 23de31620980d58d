// The lexer of Go text/template: splits a template into text and the tokens of its actions, with
// Go's trim markers (`{{- ` and ` -}}`), comments, quoting rules, number scanning and error
// wording. Only the default delimiters, `{{` and `}}`, exist.

import { isPrint } from "./templatestrconv.ts";

/** The kinds of token Go's lexer produces (itemText, itemLeftDelim, …). */
export type TokenKind =
  | "text"
  | "left"
  | "right"
  | "space"
  | "bool"
  | "char"
  | "charConst"
  | "number"
  | "string"
  | "rawString"
  | "ident"
  | "field"
  | "variable"
  | "dot"
  | "nil"
  | "pipe"
  | "lparen"
  | "rparen"
  | "assign"
  | "declare"
  | "keyword"
  | "eof";

/** A token and where it starts in the source. */
export interface Token {
  kind: TokenKind;
  pos: number;
  text: string;
}

const KEYWORDS = new Set([
  "block",
  "break",
  "continue",
  "define",
  "else",
  "end",
  "if",
  "range",
  "template",
  "with",
]);

const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";
const isSpace = (c: string | undefined) => c === " " || c === "\t" || c === "\r" || c === "\n";
const isAlphaNumeric = (c: string) => c === "_" || /^[\p{L}\p{Nd}]$/u.test(c);

/** Go's `%#U` of a rune, as lexer errors show it. */
function describeRune(cp: number): string {
  const hex = `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
  return isPrint(cp) ? `${hex} '${String.fromCodePoint(cp)}'` : hex;
}

/**
 * Splits the source into tokens, applying Go's trim markers (`{{- ` and ` -}}`) and dropping comments.
 * The list always ends with an "eof" token.
 * @param fail reports a lexical error at a source offset; it must throw.
 * @example lex("a{{.X}}", fail).map((t) => t.kind) // ["text", "left", "field", "right", "eof"]
 */
export function lex(src: string, fail: (pos: number, msg: string) => never): Token[] {
  return new Lexer(src, fail).run();
}

/** One run of the lexer over a source: the tokens so far and the paren depth of the current action. */
class Lexer {
  readonly #src: string;
  readonly #fail: (pos: number, msg: string) => never;
  readonly #tokens: Token[] = [];
  #depth = 0;

  constructor(src: string, fail: (pos: number, msg: string) => never) {
    this.#src = src;
    this.#fail = fail;
  }

  run(): Token[] {
    const src = this.#src;
    let pos = 0;
    while (pos < src.length) {
      const left = src.indexOf("{{", pos);
      if (left < 0) {
        this.#tokens.push({ kind: "text", pos, text: src.slice(pos) });
        break;
      }
      const trimLeft = src[left + 2] === "-" && isSpace(src[left + 3]);
      let textEnd = left;
      if (trimLeft) while (textEnd > pos && isSpace(src[textEnd - 1])) textEnd--;
      if (textEnd > pos) this.#tokens.push({ kind: "text", pos, text: src.slice(pos, textEnd) });
      const p = left + 2 + (trimLeft ? 2 : 0);
      if (src.startsWith("/*", p)) {
        pos = this.#comment(left, p);
        continue;
      }
      this.#tokens.push({ kind: "left", pos: left, text: "{{" });
      pos = this.#action(p);
    }
    this.#tokens.push({ kind: "eof", pos: src.length, text: "" });
    return this.#tokens;
  }

  /** Skips a comment starting at `p` (the action's `{{` at `left`); returns the position after it. */
  #comment(left: number, p: number): number {
    const close = this.#src.indexOf("*/", p + 2);
    if (close < 0) this.#fail(left, "unclosed comment");
    const delim = this.#atRightDelim(close + 2);
    if (delim === 0) this.#fail(left, "comment ends before closing delimiter");
    const end = close + 2 + delim;
    return delim === 4 ? this.#skipSpaces(end) : end;
  }

  /** Lexes one action from `p` (just after `{{` and any trim marker); returns the position after `}}`. */
  #action(p: number): number {
    this.#depth = 0;
    for (;;) {
      const delim = this.#atRightDelim(p);
      if (delim > 0) {
        if (this.#depth > 0) this.#fail(p, "unclosed left paren");
        this.#push("right", p, p + delim);
        return delim === 4 ? this.#skipSpaces(p + 4) : p + 2;
      }
      p = this.#token(p);
    }
  }

  /** Lexes the token at `p` inside an action; returns the position after it. */
  #token(p: number): number {
    const src = this.#src;
    const c = src[p];
    if (c === undefined) this.#fail(p, "unclosed action");
    if (isSpace(c)) return this.#space(p);
    switch (c) {
      case "=":
        return this.#push("assign", p, p + 1);
      case ":":
        if (src[p + 1] !== "=") this.#fail(p, "expected :=");
        return this.#push("declare", p, p + 2);
      case "|":
        return this.#push("pipe", p, p + 1);
      case '"':
      case "'":
        return this.#quoted(p, c);
      case "`": {
        const close = src.indexOf("`", p + 1);
        if (close < 0) this.#fail(p, "unterminated raw quoted string");
        return this.#push("rawString", p, close + 1);
      }
      case "$":
        return this.#push(
          "variable",
          p,
          this.#name(this.#atTerminator(p + 1) ? p + 1 : this.#alnumRun(p + 1)),
        );
      case "(":
        this.#depth++;
        return this.#push("lparen", p, p + 1);
      case ")":
        if (--this.#depth < 0) this.#fail(p, "unexpected right paren");
        return this.#push("rparen", p, p + 1);
    }
    if (c === "." && !isDigit(src[p + 1])) {
      if (this.#atTerminator(p + 1)) return this.#push("dot", p, p + 1);
      return this.#push("field", p, this.#name(this.#alnumRun(p + 1)));
    }
    if (c === "." || c === "+" || c === "-" || isDigit(c)) {
      const end = this.#scanNumber(p);
      if (src[end] === "+" || src[end] === "-") this.#fail(p, "complex numbers are not supported");
      return this.#push("number", p, end);
    }
    return this.#other(p);
  }

  /** A run of spaces; the space before a ` -}}` belongs to the delimiter. */
  #space(start: number): number {
    let p = this.#skipSpaces(start);
    if (this.#src[p] === "-" && this.#src.startsWith("}}", p + 1)) p--;
    if (p > start) this.#push("space", start, p);
    return p;
  }

  /** A quoted string or character constant opened by `quote` at `start`. */
  #quoted(start: number, quote: string): number {
    const src = this.#src;
    let q = start + 1;
    for (;;) {
      const ch = src[q];
      if (ch === "\\") {
        if (src[q + 1] === undefined || src[q + 1] === "\n") q = src.length;
        else {
          q += 2;
          continue;
        }
      }
      if (ch === undefined || ch === "\n" || q >= src.length) {
        this.#fail(start, quote === '"' ? "unterminated quoted string" : "unterminated character constant");
      }
      q++;
      if (ch === quote) break;
    }
    return this.#push(quote === '"' ? "string" : "charConst", start, q);
  }

  /** A word (identifier, keyword, bool, nil), a printable ASCII character, or an error. */
  #other(p: number): number {
    const cp = this.#src.codePointAt(p) as number;
    if (isAlphaNumeric(String.fromCodePoint(cp))) {
      const end = this.#name(this.#alnumRun(p));
      const word = this.#src.slice(p, end);
      return this.#push(wordKind(word), p, end);
    }
    if (cp >= 0x20 && cp < 0x7f) return this.#push("char", p, p + 1);
    this.#fail(p, `unrecognized character in action: ${describeRune(cp)}`);
  }

  #push(kind: TokenKind, start: number, end: number): number {
    this.#tokens.push({ kind, pos: start, text: this.#src.slice(start, end) });
    return end;
  }

  /** `end` when a name ends there at a terminator, else a bad-character error there. */
  #name(end: number): number {
    if (!this.#atTerminator(end))
      this.#fail(end, `bad character ${describeRune(this.#src.codePointAt(end) as number)}`);
    return end;
  }

  #atRightDelim(p: number): 0 | 2 | 4 {
    const src = this.#src;
    if (isSpace(src[p]) && src[p + 1] === "-" && src.startsWith("}}", p + 2)) return 4;
    return src.startsWith("}}", p) ? 2 : 0;
  }

  #skipSpaces(p: number): number {
    while (isSpace(this.#src[p])) p++;
    return p;
  }

  #atTerminator(p: number): boolean {
    const c = this.#src[p];
    return c === undefined || isSpace(c) || ".,|:)(".includes(c) || this.#src.startsWith("}}", p);
  }

  #alnumRun(p: number): number {
    const src = this.#src;
    while (p < src.length) {
      const ch = String.fromCodePoint(src.codePointAt(p) as number);
      if (!isAlphaNumeric(ch)) break;
      p += ch.length;
    }
    return p;
  }

  // Go's scanNumber: accepts more than valid numbers; the parser rejects the rest.
  #scanNumber(p: number): number {
    const src = this.#src;
    const start = p;
    const accept = (set: string) => {
      if (src[p] !== undefined && set.includes(src[p] as string)) {
        p++;
        return true;
      }
      return false;
    };
    const acceptRun = (set: string) => {
      while (accept(set));
    };
    accept("+-");
    let digits = "0123456789_";
    if (accept("0")) {
      if (accept("xX")) digits = "0123456789abcdefABCDEF_";
      else if (accept("oO")) digits = "01234567_";
      else if (accept("bB")) digits = "01_";
    }
    acceptRun(digits);
    if (accept(".")) acceptRun(digits);
    if (digits.length === 11 && accept("eE")) {
      accept("+-");
      acceptRun("0123456789_");
    }
    if (digits.length === 23 && accept("pP")) {
      accept("+-");
      acceptRun("0123456789_");
    }
    if (accept("i")) this.#fail(p - 1, "complex numbers are not supported");
    if (p < src.length && isAlphaNumeric(String.fromCodePoint(src.codePointAt(p) as number))) {
      this.#fail(p, `bad number syntax: ${JSON.stringify(src.slice(start, p + 1))}`);
    }
    return p;
  }
}

/** The kind of a word token. */
function wordKind(word: string): TokenKind {
  if (word === "nil") return "nil";
  if (KEYWORDS.has(word)) return "keyword";
  if (word === "true" || word === "false") return "bool";
  return "ident";
}
