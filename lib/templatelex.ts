// The lexer of Go text/template: splits a template into text and the tokens of its actions, with
// Go's trim markers (`{{- ` and ` -}}`), comments, quoting rules, number scanning and error
// wording. Only the default delimiters, `{{` and `}}`, exist.

import { isPrint } from "./gostrconv.ts";

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
  const tokens: Token[] = [];
  let pos = 0;
  const atRightDelim = (p: number): 0 | 2 | 4 =>
    isSpace(src[p]) && src[p + 1] === "-" && src.startsWith("}}", p + 2)
      ? 4
      : src.startsWith("}}", p)
        ? 2
        : 0;
  const skipSpaces = (p: number) => {
    while (isSpace(src[p])) p++;
    return p;
  };
  while (pos < src.length) {
    const left = src.indexOf("{{", pos);
    if (left < 0) {
      tokens.push({ kind: "text", pos, text: src.slice(pos) });
      break;
    }
    const trimLeft = src[left + 2] === "-" && isSpace(src[left + 3]);
    let textEnd = left;
    if (trimLeft) while (textEnd > pos && isSpace(src[textEnd - 1])) textEnd--;
    if (textEnd > pos) tokens.push({ kind: "text", pos, text: src.slice(pos, textEnd) });
    const p = left + 2 + (trimLeft ? 2 : 0);
    if (src.startsWith("/*", p)) {
      const close = src.indexOf("*/", p + 2);
      if (close < 0) fail(left, "unclosed comment");
      const delim = atRightDelim(close + 2);
      if (delim === 0) fail(left, "comment ends before closing delimiter");
      pos = close + 2 + delim;
      if (delim === 4) pos = skipSpaces(pos);
      continue;
    }
    tokens.push({ kind: "left", pos: left, text: "{{" });
    pos = lexAction(p);
  }
  tokens.push({ kind: "eof", pos: src.length, text: "" });
  return tokens;

  function atTerminator(p: number): boolean {
    const c = src[p];
    return c === undefined || isSpace(c) || ".,|:)(".includes(c) || src.startsWith("}}", p);
  }

  function alnumRun(p: number): number {
    while (p < src.length) {
      const ch = String.fromCodePoint(src.codePointAt(p) as number);
      if (!isAlphaNumeric(ch)) break;
      p += ch.length;
    }
    return p;
  }

  function badCharacter(p: number): never {
    return fail(p, `bad character ${describeRune(src.codePointAt(p) as number)}`);
  }

  // Lexes one action from `p` (just after `{{` and any trim marker); returns the position after `}}`.
  function lexAction(p: number): number {
    let depth = 0;
    const push = (kind: TokenKind, start: number, end: number) => {
      tokens.push({ kind, pos: start, text: src.slice(start, end) });
      return end;
    };
    for (;;) {
      const delim = atRightDelim(p);
      if (delim > 0) {
        if (depth > 0) fail(p, "unclosed left paren");
        push("right", p, p + delim);
        return delim === 4 ? skipSpaces(p + 4) : p + 2;
      }
      const c = src[p];
      if (c === undefined) fail(p, "unclosed action");
      const start = p;
      if (isSpace(c)) {
        p = skipSpaces(p);
        // The space before a ` -}}` belongs to the delimiter.
        if (src[p] === "-" && src.startsWith("}}", p + 1)) p--;
        if (p > start) push("space", start, p);
        continue;
      }
      switch (c) {
        case "=":
          p = push("assign", p, p + 1);
          continue;
        case ":":
          if (src[p + 1] !== "=") fail(p, "expected :=");
          p = push("declare", p, p + 2);
          continue;
        case "|":
          p = push("pipe", p, p + 1);
          continue;
        case '"':
        case "'": {
          let q = p + 1;
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
              fail(start, c === '"' ? "unterminated quoted string" : "unterminated character constant");
            }
            q++;
            if (ch === c) break;
          }
          p = push(c === '"' ? "string" : "charConst", start, q);
          continue;
        }
        case "`": {
          const close = src.indexOf("`", p + 1);
          if (close < 0) fail(start, "unterminated raw quoted string");
          p = push("rawString", start, close + 1);
          continue;
        }
        case "$": {
          p = atTerminator(p + 1) ? p + 1 : alnumRun(p + 1);
          if (!atTerminator(p)) badCharacter(p);
          push("variable", start, p);
          continue;
        }
        case "(":
          depth++;
          p = push("lparen", p, p + 1);
          continue;
        case ")":
          if (--depth < 0) fail(p, "unexpected right paren");
          p = push("rparen", p, p + 1);
          continue;
      }
      if (c === "." && !isDigit(src[p + 1])) {
        if (atTerminator(p + 1)) {
          p = push("dot", p, p + 1);
          continue;
        }
        p = alnumRun(p + 1);
        if (!atTerminator(p)) badCharacter(p);
        push("field", start, p);
        continue;
      }
      if (c === "." || c === "+" || c === "-" || isDigit(c)) {
        p = scanNumber(p);
        if (src[p] === "+" || src[p] === "-") fail(start, "complex numbers are not supported");
        push("number", start, p);
        continue;
      }
      const cp = src.codePointAt(p) as number;
      const ch = String.fromCodePoint(cp);
      if (isAlphaNumeric(ch)) {
        p = alnumRun(p);
        if (!atTerminator(p)) badCharacter(p);
        const word = src.slice(start, p);
        const kind: TokenKind =
          word === "nil"
            ? "nil"
            : KEYWORDS.has(word)
              ? "keyword"
              : word === "true" || word === "false"
                ? "bool"
                : "ident";
        push(kind, start, p);
        continue;
      }
      if (cp >= 0x20 && cp < 0x7f) {
        p = push("char", p, p + 1);
        continue;
      }
      fail(p, `unrecognized character in action: ${describeRune(cp)}`);
    }
  }

  // Go's scanNumber: accepts more than valid numbers; the parser rejects the rest.
  function scanNumber(p: number): number {
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
    if (accept("i")) fail(p - 1, "complex numbers are not supported");
    if (p < src.length && isAlphaNumeric(String.fromCodePoint(src.codePointAt(p) as number))) {
      fail(p, `bad number syntax: ${JSON.stringify(src.slice(start, p + 1))}`);
    }
    return p;
  }
}
