// Go text/template for rule values in ccm-config.yaml. Owns lexing and parsing a template once (at
// config load), executing it with Go's semantics and no HTML escaping (the Go reference ran
// html/template, which mangles `& ' " < > +`), Go's fmt formatting for printed values, and the
// function library of the reference transformer plus Go's builtins. Execution is bounded in steps,
// output size and nesting, so a hostile template or data value fails with a TemplateError instead of
// hanging or exhausting memory.

import { compileRegex, RegexError, replaceAll } from "./regex.ts";

/** A template that cannot be parsed ("parse") or failed while executing ("exec"). */
export class TemplateError extends Error {
  override readonly name = "TemplateError";
  readonly code: "parse" | "exec";
  /** 1-based position in the template source. */
  readonly line: number;
  readonly column: number;
  /** The message without the template name and position. */
  readonly reason: string;

  constructor(
    code: "parse" | "exec",
    name: string,
    where: { line: number; column: number },
    reason: string,
    options?: { cause?: unknown },
  ) {
    super(
      `Cannot ${code === "parse" ? "parse" : "execute"} template "${name}": ${where.line}:${where.column}: ${reason}`,
      options,
    );
    this.code = code;
    this.line = where.line;
    this.column = where.column;
    this.reason = reason;
  }
}

/** A parsed template; safe to execute many times, concurrently. */
export interface Template {
  readonly source: string;
  /**
   * Renders the template. `data` is usually a plain object whose keys are Go field names (it acts
   * as a Go struct: unknown fields are errors); nested plain objects and Maps act as Go maps, arrays
   * as slices, integral numbers as int, other numbers as float64.
   * @throws TemplateError (code "exec")
   */
  execute(data: unknown): string;
}

/** Largest output (and largest intermediate string) a template may produce, in UTF-16 units. */
const MAX_OUTPUT = 1 << 20;
/** Evaluation steps (actions, commands, range iterations) per execution. */
const MAX_STEPS = 1_000_000;
/** Nesting of control structures and parentheses accepted by the parser. */
const MAX_NESTING = 100;
/** Nesting of data values printed (guards against cyclic data). */
const MAX_PRINT_DEPTH = 100;
/** Patterns computed at execution time that are kept compiled, per template. */
const DYNAMIC_REGEX_CACHE = 32;

// ---------------------------------------------------------------------------------------------
// Lexing.

type TokenKind =
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

interface Token {
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

/** Splits the source into tokens, applying Go's trim markers (`{{- ` and ` -}}`) and dropping comments. */
function lex(src: string, fail: (pos: number, msg: string) => never): Token[] {
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

// ---------------------------------------------------------------------------------------------
// Parse tree.

/** A numeric constant: Go's ideal constants can be both int and float (1.0, 1e3, 'a'). */
interface NumberConst {
  int: bigint | undefined;
  float: number | undefined;
  /** Written as a float (has `.`, `e` or `p`), so it is a float64 where no type is asked for. */
  preferFloat: boolean;
}

type Arg = (
  | { kind: "field"; names: string[] }
  | { kind: "variable"; name: string; fields: string[] }
  | { kind: "dot" }
  | { kind: "nil" }
  | { kind: "bool"; value: boolean }
  | { kind: "string"; value: string }
  | { kind: "number"; num: NumberConst }
  | { kind: "ident"; name: string }
  | { kind: "pipe"; pipe: Pipe }
  | { kind: "chain"; node: Arg; fields: string[] }
) & { pos: number; end: number };

interface Command {
  pos: number;
  end: number;
  args: Arg[];
}

interface Pipe {
  pos: number;
  end: number;
  decl: string[];
  isAssign: boolean;
  cmds: Command[];
}

/** An if, with or range action with its lists. */
interface Branch {
  kind: "if" | "with" | "range";
  pos: number;
  end: number;
  pipe: Pipe;
  list: TNode[];
  elseList: TNode[] | undefined;
}

type TNode =
  | { kind: "text"; text: string }
  | { kind: "action"; pos: number; end: number; pipe: Pipe }
  | Branch
  | { kind: "break" | "continue"; pos: number; end: number };

/** Where an error points: a source span. */
interface Span {
  pos: number;
  end: number;
}

const REGEX_FUNCTIONS = new Set(["regexFind", "regexFindString", "regexReplaceAll"]);

/** Parses tokens into a tree, checking functions and variables as Go's parser does. */
class Parser {
  readonly #src: string;
  readonly #tokens: Token[];
  readonly #fail: (pos: number, msg: string) => never;
  #i = 0;
  #vars: string[] = ["$"];
  #rangeDepth = 0;
  #depth = 0;
  /** Regexes given as string constants, compiled now so a bad one fails at config load. */
  readonly regexes = new Map<string, RegExp>();

  constructor(src: string, fail: (pos: number, msg: string) => never) {
    this.#src = src;
    this.#fail = fail;
    this.#tokens = lex(src, fail);
  }

  parse(): TNode[] {
    const list: TNode[] = [];
    while (this.#peek().kind !== "eof") {
      const node = this.#textOrAction();
      if ("terminator" in node) this.#fail(node.pos, `unexpected {{${node.terminator}}}`);
      list.push(node);
    }
    return list;
  }

  #peek(): Token {
    return this.#tokens[this.#i] as Token;
  }

  #next(): Token {
    const token = this.#tokens[this.#i] as Token;
    if (token.kind !== "eof") this.#i++;
    return token;
  }

  #nextNonSpace(): Token {
    let token = this.#next();
    while (token.kind === "space") token = this.#next();
    return token;
  }

  #peekNonSpace(): Token {
    const save = this.#i;
    const token = this.#nextNonSpace();
    this.#i = save;
    return token;
  }

  #describe(token: Token): string {
    switch (token.kind) {
      case "eof":
        return "EOF";
      case "right":
        return '"}}"';
      case "keyword":
        return `<${token.text}>`;
      default:
        return JSON.stringify(token.text.length > 10 ? `${token.text.slice(0, 10)}...` : token.text);
    }
  }

  #unexpected(token: Token, context: string): never {
    return this.#fail(token.pos, `unexpected ${this.#describe(token)} in ${context}`);
  }

  #nest(pos: number): void {
    if (++this.#depth > MAX_NESTING) this.#fail(pos, `nesting deeper than ${MAX_NESTING} levels`);
  }

  /** A node, or the terminator ({{end}} or {{else}}) that ends the enclosing list. */
  #textOrAction(): TNode | { terminator: "end" | "else"; pos: number; elseIf?: "if" | "with" } {
    const token = this.#nextNonSpace();
    if (token.kind === "text") return { kind: "text", text: token.text };
    if (token.kind !== "left") this.#unexpected(token, "input");
    const word = this.#nextNonSpace();
    if (word.kind === "keyword") {
      switch (word.text) {
        case "block":
        case "define":
        case "template":
          this.#fail(word.pos, `{{${word.text}}} is not supported: each value is a single template`);
          break;
        case "break":
        case "continue": {
          const close = this.#nextNonSpace();
          if (close.kind !== "right") this.#unexpected(close, `{{${word.text}}}`);
          if (this.#rangeDepth === 0) this.#fail(word.pos, `{{${word.text}}} outside {{range}}`);
          return { kind: word.text, pos: word.pos, end: close.pos };
        }
        case "end": {
          const close = this.#nextNonSpace();
          if (close.kind !== "right") this.#unexpected(close, "end");
          return { terminator: "end", pos: word.pos };
        }
        case "else": {
          const after = this.#peekNonSpace();
          if (after.kind === "keyword" && (after.text === "if" || after.text === "with")) {
            return { terminator: "else", pos: word.pos, elseIf: after.text };
          }
          const close = this.#nextNonSpace();
          if (close.kind !== "right") this.#unexpected(close, "else");
          return { terminator: "else", pos: word.pos };
        }
        case "if":
        case "range":
        case "with":
          return this.#control(word.text, word.pos);
      }
    }
    this.#i--;
    const pipe = this.#pipeline("command", "right");
    return { kind: "action", pos: pipe.pos, end: pipe.end, pipe };
  }

  #itemList(): [TNode[], { terminator: "end" | "else"; pos: number; elseIf?: "if" | "with" }] {
    const list: TNode[] = [];
    for (;;) {
      if (this.#peekNonSpace().kind === "eof") this.#fail(this.#src.length, "unexpected EOF");
      const node = this.#textOrAction();
      if ("terminator" in node) return [list, node];
      list.push(node);
    }
  }

  #control(kind: "if" | "range" | "with", pos: number): TNode {
    this.#nest(pos);
    const varsBefore = this.#vars.length;
    const pipe = this.#pipeline(kind, "right");
    if (kind === "range") this.#rangeDepth++;
    const [list, next] = this.#itemList();
    if (kind === "range") this.#rangeDepth--;
    let elseList: TNode[] | undefined;
    if (next.terminator === "else") {
      if (next.elseIf !== undefined && next.elseIf === kind) {
        // {{else if x}} is {{else}}{{if x}}…{{end}}{{end}} sharing the single {{end}}.
        const keyword = this.#nextNonSpace();
        elseList = [this.#control(next.elseIf, keyword.pos)];
      } else {
        if (next.elseIf !== undefined) this.#unexpected(this.#nextNonSpace(), "else");
        let end: { terminator: string; pos: number };
        [elseList, end] = this.#itemList();
        if (end.terminator !== "end") this.#fail(end.pos, `expected end; found {{${end.terminator}}}`);
      }
    }
    this.#vars.length = varsBefore;
    this.#depth--;
    return { kind, pos, end: pipe.end, pipe, list, elseList };
  }

  #pipeline(context: string, end: "right" | "rparen"): Pipe {
    const first = this.#peekNonSpace();
    const pipe: Pipe = { pos: first.pos, end: first.pos, decl: [], isAssign: false, cmds: [] };
    for (;;) {
      const v = this.#peekNonSpace();
      if (v.kind !== "variable") break;
      const save = this.#i;
      this.#nextNonSpace();
      const next = this.#peekNonSpace();
      if (next.kind === "assign" || next.kind === "declare") {
        pipe.isAssign = next.kind === "assign";
        this.#nextNonSpace();
        pipe.decl.push(v.text);
        this.#vars.push(v.text);
        break;
      }
      if (next.kind === "char" && next.text === ",") {
        this.#nextNonSpace();
        pipe.decl.push(v.text);
        this.#vars.push(v.text);
        if (context === "range" && pipe.decl.length < 2) {
          const after = this.#peekNonSpace();
          if (after.kind === "variable" || after.kind === "right" || after.kind === "rparen") continue;
          this.#fail(after.pos, "range can only initialize variables");
        }
        this.#fail(next.pos, `too many declarations in ${context}`);
      }
      this.#i = save;
      break;
    }
    for (;;) {
      const token = this.#nextNonSpace();
      if (token.kind === end) {
        pipe.end = token.pos;
        if (pipe.cmds.length === 0) this.#fail(token.pos, `missing value for ${context}`);
        pipe.cmds.slice(1).forEach((cmd, i) => {
          const kind = (cmd.args[0] as Arg).kind;
          if (["bool", "dot", "nil", "number", "string"].includes(kind)) {
            this.#fail(cmd.pos, `non executable command in pipeline stage ${i + 2}`);
          }
        });
        return pipe;
      }
      if (
        [
          "bool",
          "charConst",
          "number",
          "dot",
          "field",
          "ident",
          "nil",
          "rawString",
          "string",
          "variable",
          "lparen",
        ].includes(token.kind)
      ) {
        this.#i--;
        pipe.cmds.push(this.#command());
      } else {
        this.#unexpected(token, context);
      }
    }
  }

  #command(): Command {
    const cmd: Command = { pos: this.#peekNonSpace().pos, end: 0, args: [] };
    for (;;) {
      this.#peekNonSpace();
      const operand = this.#operand();
      if (operand !== undefined) cmd.args.push(operand);
      const token = this.#next();
      if (token.kind === "space") continue;
      if (token.kind === "right" || token.kind === "rparen") this.#i--;
      else if (token.kind !== "pipe") this.#unexpected(token, "operand");
      cmd.end = token.pos;
      break;
    }
    const [head, pattern] = cmd.args;
    if (head === undefined) this.#fail(cmd.pos, "empty command");
    if (head.kind === "ident" && REGEX_FUNCTIONS.has(head.name) && pattern?.kind === "string") {
      try {
        this.regexes.set(pattern.value, compileRegex(pattern.value));
      } catch (err) {
        if (!(err instanceof RegexError)) throw err;
        this.#fail(pattern.pos, `bad regular expression for ${head.name}: ${err.message}`);
      }
    }
    while (this.#src[cmd.end - 1] === " ") cmd.end--;
    return cmd;
  }

  #operand(): Arg | undefined {
    const node = this.#term();
    if (node === undefined || this.#peek().kind !== "field") return node;
    const fields: string[] = [];
    let end = node.end;
    while (this.#peek().kind === "field") {
      const token = this.#next();
      fields.push(token.text.slice(1));
      end = token.pos + token.text.length;
    }
    switch (node.kind) {
      case "field":
        return { ...node, names: [...node.names, ...fields], end };
      case "variable":
        return { ...node, fields: [...node.fields, ...fields], end };
      case "bool":
      case "string":
      case "number":
      case "nil":
      case "dot":
        return this.#fail(
          node.pos,
          `unexpected . after term ${JSON.stringify(this.#src.slice(node.pos, node.end))}`,
        );
      default:
        return { kind: "chain", node, fields, pos: node.pos, end };
    }
  }

  #term(): Arg | undefined {
    const token = this.#nextNonSpace();
    const pos = token.pos;
    const end = token.pos + token.text.length;
    switch (token.kind) {
      case "ident":
        if (!Object.hasOwn(FUNCTIONS, token.text)) this.#fail(pos, `function "${token.text}" not defined`);
        return { kind: "ident", name: token.text, pos, end };
      case "dot":
        return { kind: "dot", pos, end };
      case "nil":
        return { kind: "nil", pos, end };
      case "variable": {
        const [name = "$", ...fields] = token.text.split(".");
        if (!this.#vars.includes(name)) this.#fail(pos, `undefined variable "${name}"`);
        return { kind: "variable", name, fields, pos, end };
      }
      case "field":
        return { kind: "field", names: [token.text.slice(1)], pos, end };
      case "bool":
        return { kind: "bool", value: token.text === "true", pos, end };
      case "charConst":
      case "number":
        return { kind: "number", num: this.#number(token), pos, end };
      case "lparen": {
        this.#nest(pos);
        const pipe = this.#pipeline("parenthesized pipeline", "rparen");
        this.#depth--;
        return { kind: "pipe", pipe, pos, end: pipe.end + 1 };
      }
      case "string":
      case "rawString": {
        const value =
          token.kind === "rawString" ? token.text.slice(1, -1).replaceAll("\r", "") : unquote(token.text);
        if (value === undefined) this.#fail(pos, `invalid syntax in string ${token.text}`);
        return { kind: "string", value, pos, end };
      }
      default:
        this.#i--;
        return undefined;
    }
  }

  #number(token: Token): NumberConst {
    if (token.kind === "charConst") {
      const cp = unquoteChar(token.text);
      if (cp === undefined) this.#fail(token.pos, `malformed character constant: ${token.text}`);
      return { int: BigInt(cp), float: cp, preferFloat: false };
    }
    const num = parseNumber(token.text);
    if (num === undefined) this.#fail(token.pos, `illegal number syntax: ${JSON.stringify(token.text)}`);
    return num;
  }
}

/** Decodes the escapes of a Go interpreted string or rune literal body into UTF-8 bytes; undefined if invalid. */
function decodeEscapes(body: string, quote: string): number[] | undefined {
  const bytes: number[] = [];
  const encoder = new TextEncoder();
  const pushRune = (cp: number) => {
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    bytes.push(...encoder.encode(String.fromCodePoint(cp)));
    return true;
  };
  const simple: Record<string, number> = { a: 7, b: 8, f: 12, n: 10, r: 13, t: 9, v: 11, "\\": 92 };
  for (let i = 0; i < body.length; ) {
    const cp = body.codePointAt(i) as number;
    if (cp !== 0x5c) {
      bytes.push(...encoder.encode(String.fromCodePoint(cp)));
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const c = body[i + 1] ?? "";
    i += 2;
    if (Object.hasOwn(simple, c)) bytes.push(simple[c] as number);
    else if (c === quote) bytes.push(quote.charCodeAt(0));
    else if (c === "x" && /^[0-9A-Fa-f]{2}/.test(body.slice(i))) {
      bytes.push(Number.parseInt(body.slice(i, i + 2), 16));
      i += 2;
    } else if (
      (c === "u" || c === "U") &&
      new RegExp(`^[0-9A-Fa-f]{${c === "u" ? 4 : 8}}`).test(body.slice(i))
    ) {
      const n = c === "u" ? 4 : 8;
      if (!pushRune(Number.parseInt(body.slice(i, i + n), 16))) return undefined;
      i += n;
    } else if (
      /^[0-7]{3}$/.test(c + body.slice(i, i + 2)) &&
      Number.parseInt(c + body.slice(i, i + 2), 8) < 256
    ) {
      bytes.push(Number.parseInt(c + body.slice(i, i + 2), 8));
      i += 2;
    } else return undefined;
  }
  return bytes;
}

/** Go's strconv.Unquote for a double-quoted literal. Bytes that are not UTF-8 become U+FFFD. */
function unquote(literal: string): string | undefined {
  const bytes = decodeEscapes(literal.slice(1, -1), '"');
  return bytes === undefined ? undefined : new TextDecoder().decode(new Uint8Array(bytes));
}

/** The code point of a Go rune literal such as `'a'`, `'\n'` or `'\x41'`. */
function unquoteChar(literal: string): number | undefined {
  const body = literal.slice(1, -1);
  if (body.startsWith("\\")) {
    if (/^\\(x[0-9A-Fa-f]{2}|[0-7]{3})$/.test(body)) {
      return Number.parseInt(body.slice(body[1] === "x" ? 2 : 1), body[1] === "x" ? 16 : 8);
    }
    const bytes = decodeEscapes(body, "'");
    const text = bytes === undefined ? "" : new TextDecoder().decode(new Uint8Array(bytes));
    const cp = text.codePointAt(0);
    return cp !== undefined && String.fromCodePoint(cp) === text ? cp : undefined;
  }
  const cp = body.codePointAt(0);
  return cp !== undefined && String.fromCodePoint(cp) === body && body !== "'" ? cp : undefined;
}

const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;

/** Go's number literal rules: underscores only between digits or after a base prefix. */
function underscoresOk(digits: string): boolean {
  return !/__|_$|^_/.test(digits.replace(/^0[xXoObB]_?/, "0"));
}

/** Parses a Go number literal into an ideal constant; undefined if Go would reject it. */
function parseNumber(text: string): NumberConst | undefined {
  const sign = text.startsWith("-") ? -1 : 1;
  const body = text.replace(/^[+-]/, "");
  if (!underscoresOk(body)) return undefined;
  const plain = body.replaceAll("_", "");
  const int = /^(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$/.test(plain)
    ? BigInt(/^0[0-7]+$/.test(plain) ? `0o${plain.slice(1)}` : plain) * BigInt(sign)
    : undefined;
  if (int !== undefined) {
    return int < INT64_MIN || int > INT64_MAX ? undefined : { int, float: Number(int), preferFloat: false };
  }
  let float: number | undefined;
  const hex = /^0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?[pP]([+-]?[0-9]+)$/.exec(plain);
  if (hex !== null) {
    const [, whole = "", frac = "", exp = "0"] = hex;
    if (whole === "" && frac === "") return undefined;
    float = Number(BigInt(`0x${whole}${frac}`)) * 2 ** (Number(exp) - 4 * frac.length);
  } else if (/^(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/.test(plain)) {
    float = Number(plain);
  }
  if (float === undefined || !Number.isFinite(float) || !/[.eEpP]/.test(plain)) return undefined;
  float *= sign;
  const integral = Number.isInteger(float) && Math.abs(float) < 2 ** 63;
  return { int: integral ? BigInt(float) : undefined, float, preferFloat: true };
}

// ---------------------------------------------------------------------------------------------
// Values. Go's kinds map onto JavaScript: string, boolean, bigint (int), number (float64),
// undefined (nil / no value), arrays (slices), Maps and plain objects (maps), GoStruct (the data).

/** The root data object: field access on it fails for unknown names, as on a Go struct. */
class GoStruct {
  constructor(readonly fields: Record<string, unknown>) {}
}

type Kind = "nil" | "string" | "bool" | "int" | "float" | "list" | "map" | "struct";

/** A failure during execution; the executor adds the position. */
class ExecFailure extends Error {}

/** An error returned by a function; reported as Go does, "error calling f: …". */
class FuncError extends Error {}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Normalises a value read from the data: null is nil, integral numbers are Go ints. */
function fromData(v: unknown): unknown {
  if (v === null) return undefined;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  return v;
}

function kindOf(v: unknown): Kind {
  switch (typeof v) {
    case "undefined":
      return "nil";
    case "string":
      return "string";
    case "boolean":
      return "bool";
    case "bigint":
      return "int";
    case "number":
      return "float";
  }
  if (Array.isArray(v)) return "list";
  if (v instanceof Map || isPlainObject(v)) return "map";
  if (v instanceof GoStruct) return "struct";
  throw new ExecFailure(`unsupported data value of JavaScript type ${typeof v}`);
}

/** A map's entries in Go's order (sorted keys). Keys are strings, as in every map the CCM passes. */
function mapEntries(m: unknown): [string, unknown][] {
  const entries = m instanceof Map ? [...m.entries()] : Object.entries(m as Record<string, unknown>);
  return entries
    .map(([k, v]): [string, unknown] => {
      if (typeof k !== "string") throw new ExecFailure(`unsupported map key of JavaScript type ${typeof k}`);
      return [k, fromData(v)];
    })
    .sort((a, b) => compareStrings(a[0], b[0]));
}

function mapGet(m: unknown, key: string): { found: boolean; value: unknown } {
  if (m instanceof Map) return { found: m.has(key), value: fromData(m.get(key)) };
  const o = m as Record<string, unknown>;
  return Object.hasOwn(o, key)
    ? { found: true, value: fromData(o[key]) }
    : { found: false, value: undefined };
}

function mapSize(m: unknown): number {
  return m instanceof Map ? m.size : Object.keys(m as object).length;
}

/** Element type of a map or list: string when every element is one (the shape of Tags). */
function elemIsString(v: unknown): boolean {
  const values = Array.isArray(v) ? v : v instanceof Map ? [...v.values()] : Object.values(v as object);
  return values.every((x) => typeof x === "string");
}

/** Go's name for the value's type, as %T and error messages show it. */
function typeName(v: unknown): string {
  switch (kindOf(v)) {
    case "nil":
      return "<nil>";
    case "string":
      return "string";
    case "bool":
      return "bool";
    case "int":
      return "int";
    case "float":
      return "float64";
    case "list":
      return (v as unknown[]).length > 0 && elemIsString(v) ? "[]string" : "[]interface {}";
    case "map":
      return elemIsString(v) ? "map[string]string" : "map[string]interface {}";
    case "struct":
      return "struct";
  }
}

/** Orders strings by code point, as Go orders its UTF-8 strings. */
function compareStrings(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i) as number;
    const y = b.codePointAt(i) as number;
    if (x !== y) return x - y;
    if (x > 0xffff) i++;
  }
  return a.length - b.length;
}

/** Go's truth: false, 0, nil, and empty strings, slices and maps are false. */
function truth(v: unknown): boolean {
  switch (kindOf(v)) {
    case "nil":
      return false;
    case "string":
      return (v as string).length > 0;
    case "bool":
      return v as boolean;
    case "int":
      return v !== 0n;
    case "float":
      return v !== 0;
    case "list":
      return (v as unknown[]).length > 0;
    case "map":
      return mapSize(v) > 0;
    case "struct":
      return true;
  }
}

/**
 * reflect.Value.IsZero, which the reference's `empty` and `default` use: maps, slices and the data
 * (a pointer in the reference) are never zero.
 */
function isZero(v: unknown): boolean {
  switch (kindOf(v)) {
    case "nil":
      return true;
    case "string":
      return v === "";
    case "bool":
      return v === false;
    case "int":
      return v === 0n;
    case "float":
      return Object.is(v, 0);
    default:
      return false;
  }
}

type BasicKind = "bool" | "int" | "float" | "string" | "invalid";

function basicKind(v: unknown): BasicKind {
  const kind = kindOf(v);
  return kind === "bool" || kind === "int" || kind === "float" || kind === "string" ? kind : "invalid";
}

/** Go's `eq`: arg1 == arg2 || arg1 == arg3 …, with Go's rules on comparable kinds. */
function eq(a: unknown, ...rest: unknown[]): boolean {
  if (rest.length === 0) throw new FuncError("missing argument for comparison");
  const k1 = basicKind(a);
  for (const b of rest) {
    const k2 = basicKind(b);
    if (k1 !== k2) {
      if (a !== undefined && b !== undefined) {
        throw new FuncError(`incompatible types for comparison: ${typeName(a)} and ${typeName(b)}`);
      }
      continue;
    }
    if (k1 !== "invalid") {
      if (a === b) return true;
      continue;
    }
    if (a === undefined || b === undefined) {
      if (a === b) return true;
      if (kindOf(a) !== "nil" && kindOf(b) !== "nil" && kindOf(a) !== kindOf(b)) {
        throw new FuncError(`non-comparable types ${typeName(a)} and ${typeName(b)}`);
      }
      continue;
    }
    if (kindOf(a) !== kindOf(b))
      throw new FuncError(`non-comparable types ${typeName(a)} and ${typeName(b)}`);
    // The data is a pointer in the reference, compared by identity.
    if (kindOf(a) !== "struct") throw new FuncError(`non-comparable type ${typeName(b)}`);
    if (a === b) return true;
  }
  return false;
}

/** Go's `lt`: only basic kinds, and only the same kind. */
function lt(a: unknown, b: unknown): boolean {
  const k1 = basicKind(a);
  const k2 = basicKind(b);
  if (k1 === "invalid" || k2 === "invalid") throw new FuncError("invalid type for comparison");
  if (k1 !== k2) throw new FuncError(`incompatible types for comparison: ${typeName(a)} and ${typeName(b)}`);
  switch (k1) {
    case "bool":
      throw new FuncError("invalid type for comparison");
    case "string":
      return compareStrings(a as string, b as string) < 0;
    default:
      return (a as number | bigint) < (b as number | bigint);
  }
}

function le(a: unknown, b: unknown): boolean {
  return lt(a, b) || eq(a, b);
}

// ---------------------------------------------------------------------------------------------
// Go's fmt, for the kinds above.

interface FmtFlags {
  plus: boolean;
  minus: boolean;
  sharp: boolean;
  space: boolean;
  zero: boolean;
  plusV: boolean;
  sharpV: boolean;
  width: number | undefined;
  prec: number | undefined;
}

const NO_FLAGS: FmtFlags = {
  plus: false,
  minus: false,
  sharp: false,
  space: false,
  zero: false,
  plusV: false,
  sharpV: false,
  width: undefined,
  prec: undefined,
};

/** strconv.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
function isPrint(cp: number): boolean {
  return cp === 0x20 || /^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u.test(String.fromCodePoint(cp));
}

function runeCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff || i + 1 >= s.length) n++;
  }
  return n;
}

function utf8(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

/** strconv.Quote / QuoteToASCII / QuoteRune. */
function quote(s: string, q: '"' | "'", asciiOnly: boolean): string {
  let out = q;
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if (ch === q || ch === "\\") out += `\\${ch}`;
    else if (cp >= 0xd800 && cp <= 0xdfff) out += "\\ufffd";
    else if (isPrint(cp) && !(asciiOnly && cp >= 0x80)) out += ch;
    else {
      const named: Record<number, string> = {
        7: "\\a",
        8: "\\b",
        12: "\\f",
        10: "\\n",
        13: "\\r",
        9: "\\t",
        11: "\\v",
      };
      const hex = cp.toString(16).padStart(2, "0");
      out +=
        named[cp] ??
        (cp < 0x20 || cp === 0x7f
          ? `\\x${hex}`
          : cp < 0x10000
            ? `\\u${hex.padStart(4, "0")}`
            : `\\U${hex.padStart(8, "0")}`);
    }
  }
  return out + q;
}

function canBackquote(s: string): boolean {
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if (cp === 0xfeff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if ((cp < 0x20 && cp !== 0x09) || ch === "`" || cp === 0x7f) return false;
  }
  return true;
}

/** A decimal: digits (no leading or trailing zeros) and the decimal point's position. */
interface Decimal {
  d: string;
  dp: number;
}

/** The exact decimal expansion of a positive finite double. */
function exactDecimal(x: number): Decimal {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const exponent = Number((bits >> 52n) & 0x7ffn);
  let mantissa = bits & ((1n << 52n) - 1n);
  let e = exponent - 1075;
  if (exponent === 0) e = -1074;
  else mantissa |= 1n << 52n;
  let digits: string;
  let dp: number;
  if (e >= 0) {
    digits = (mantissa << BigInt(e)).toString();
    dp = digits.length;
  } else {
    digits = (mantissa * 5n ** BigInt(-e)).toString();
    dp = digits.length + e;
  }
  const trimmed = digits.replace(/0+$/, "");
  const lead = trimmed.length - trimmed.replace(/^0+/, "").length;
  return { d: trimmed.slice(lead), dp: dp - lead };
}

/** The shortest decimal that reads back as x (x > 0), as Go's strconv picks it. */
function shortestDecimal(x: number): Decimal {
  const [mant = "0", exp = "0"] = x.toExponential().split("e");
  return { d: mant.replace(".", "").replace(/0+$/, ""), dp: Number(exp) + 1 };
}

/** Rounds to `nd` digits, half to even (on the exact value, so ties are real ties). */
function roundDecimal({ d, dp }: Decimal, nd: number): Decimal {
  if (nd < 0 || d.length <= nd) return nd < 0 ? { d: "", dp: 0 } : { d, dp };
  const next = d.charCodeAt(nd) - 48;
  const rest = d.slice(nd + 1);
  const prev = nd > 0 ? d.charCodeAt(nd - 1) - 48 : 0;
  const up = next > 5 || (next === 5 && (rest !== "" || prev % 2 === 1));
  let kept = d.slice(0, nd);
  if (!up) {
    kept = kept.replace(/0+$/, "");
    return kept === "" ? { d: "", dp: 0 } : { d: kept, dp };
  }
  let i = kept.length - 1;
  while (i >= 0 && kept[i] === "9") i--;
  if (i < 0) return { d: "1", dp: dp + 1 };
  return { d: kept.slice(0, i) + String.fromCharCode(kept.charCodeAt(i) + 1), dp };
}

function fmtE({ d, dp }: Decimal, prec: number, e: string): string {
  let out = d[0] ?? "0";
  if (prec > 0) out += `.${d.slice(1, prec + 1).padEnd(prec, "0")}`;
  const exp = d === "" ? 0 : dp - 1;
  return `${out}${e}${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

function fmtF({ d, dp }: Decimal, prec: number): string {
  let out = dp > 0 ? d.slice(0, dp).padEnd(dp, "0") : "0";
  if (prec > 0) {
    out += ".";
    for (let i = 1; i <= prec; i++) {
      const j = dp + i - 1;
      out += j >= 0 && j < d.length ? d[j] : "0";
    }
  }
  return out;
}

/** strconv's binary forms: %b is mantissa p exponent, %x/%X is -0x1.fffp+dd (prec -1: shortest). */
function formatFloatBinary(x: number, verb: string, prec: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const sign = bits >> 63n === 1n ? "-" : "";
  let exp = Number((bits >> 52n) & 0x7ffn);
  let mant = bits & ((1n << 52n) - 1n);
  if (exp === 0) exp++;
  else mant |= 1n << 52n;
  exp -= 1023;
  if (verb === "b") return `${sign}${mant}p${exp - 52 < 0 ? "-" : "+"}${Math.abs(exp - 52)}`;
  if (mant === 0n) exp = 0;
  mant <<= 8n;
  while (mant !== 0n && (mant & (1n << 60n)) === 0n) {
    mant <<= 1n;
    exp--;
  }
  if (prec >= 0 && prec < 15) {
    const shift = BigInt(prec * 4);
    const extra = (mant << shift) & ((1n << 60n) - 1n);
    mant >>= 60n - shift;
    if ((extra | (mant & 1n)) > 1n << 59n) mant++;
    mant <<= 60n - shift;
    if ((mant & (1n << 61n)) !== 0n) {
      mant >>= 1n;
      exp++;
    }
  }
  const lead = String((mant >> 60n) & 1n);
  const mask = (1n << 64n) - 1n;
  mant = (mant << 4n) & mask;
  let frac = "";
  if (prec < 0) {
    for (; mant !== 0n; mant = (mant << 4n) & mask) frac += ((mant >> 60n) & 15n).toString(16);
  } else {
    for (let i = 0; i < prec; i++, mant = (mant << 4n) & mask) frac += ((mant >> 60n) & 15n).toString(16);
  }
  const expText = `${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  const text = `${sign}0x${lead}${frac === "" ? "" : `.${frac}`}p${expText}`;
  return verb === "X" ? text.toUpperCase() : text;
}

/** strconv.FormatFloat(x, verb, prec, 64) for verbs b, e, E, f, F, g, G, x, X; prec -1 is the shortest form. */
function formatFloat(x: number, verb: string, prec: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "+Inf" : "-Inf";
  if (verb === "b" || verb === "x" || verb === "X") return formatFloatBinary(x, verb, prec);
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  const abs = Math.abs(x);
  const shortest = prec < 0;
  const exact = abs === 0 ? { d: "", dp: 0 } : undefined;
  let dec: Decimal;
  const lower = verb.toLowerCase();
  if (shortest) {
    dec = exact ?? shortestDecimal(abs);
    prec =
      lower === "e"
        ? Math.max(dec.d.length - 1, 0)
        : lower === "f"
          ? Math.max(dec.d.length - dec.dp, 0)
          : dec.d.length;
  } else {
    const full = exact ?? exactDecimal(abs);
    if (lower === "e") dec = roundDecimal(full, prec + 1);
    else if (lower === "f") dec = roundDecimal(full, full.dp + prec);
    else {
      if (prec === 0) prec = 1;
      dec = roundDecimal(full, prec);
    }
  }
  const e = verb === "E" || verb === "G" ? "E" : "e";
  if (lower === "e") return sign + fmtE(dec, prec, e);
  if (lower === "f") return sign + fmtF(dec, prec);
  let eprec = prec;
  if (eprec > dec.d.length && dec.d.length >= dec.dp) eprec = dec.d.length;
  if (shortest) eprec = 6;
  const exp = dec.dp - 1;
  if (exp < -4 || exp >= eprec) return sign + fmtE(dec, Math.min(prec, dec.d.length) - 1, e);
  return sign + fmtF(dec, Math.max((prec > dec.dp ? dec.d.length : prec) - dec.dp, 0));
}

/** Builds formatted output, failing once it passes MAX_OUTPUT. */
class Out {
  text = "";

  write(s: string): void {
    if (this.text.length + s.length > MAX_OUTPUT)
      throw new ExecFailure(`output exceeds ${MAX_OUTPUT} characters`);
    this.text += s;
  }
}

/** Go's pp: formats values into `out` with the current flags. */
class Printer {
  readonly out = new Out();
  flags: FmtFlags = { ...NO_FLAGS };

  constructor(readonly derefRoot = false) {}

  #padding(n: number): void {
    if (n > 0) this.out.write((this.flags.zero ? "0" : " ").repeat(n));
  }

  /** Writes s padded to the width. */
  pad(s: string): void {
    const { width, minus } = this.flags;
    const fill = width === undefined ? 0 : width - runeCount(s);
    if (!minus) this.#padding(fill);
    this.out.write(s);
    if (minus) this.#padding(fill);
  }

  printArg(arg: unknown, verb: string, depth = 0): void {
    if (arg === undefined) {
      if (verb === "T" || verb === "v") this.pad("<nil>");
      else this.#badVerb(verb, arg);
      return;
    }
    if (verb === "T") {
      this.#string(typeName(arg), "s");
      return;
    }
    switch (kindOf(arg)) {
      case "bool":
        if (verb === "t" || verb === "v") this.pad(String(arg));
        else this.#badVerb(verb, arg);
        return;
      case "int":
        this.#integer(arg as bigint, verb);
        return;
      case "float":
        this.#float(arg as number, verb);
        return;
      case "string":
        this.#string(arg as string, verb);
        return;
      default:
        this.#composite(arg, verb, depth);
    }
  }

  #badVerb(verb: string, arg: unknown): void {
    this.out.write(`%!${verb}(`);
    if (arg === undefined) this.out.write("<nil>");
    else {
      this.out.write(`${typeName(arg)}=`);
      this.printArg(arg, "v");
    }
    this.out.write(")");
  }

  #composite(arg: unknown, verb: string, depth: number): void {
    if (depth >= MAX_PRINT_DEPTH)
      throw new ExecFailure(`value nested more than ${MAX_PRINT_DEPTH} levels deep`);
    const elem = (v: unknown) => {
      if (v === undefined && this.flags.sharpV) this.out.write("interface {}(nil)");
      else if (v === undefined) this.out.write("<nil>");
      else this.printArg(v, verb, depth + 1);
    };
    const sharpV = this.flags.sharpV;
    switch (kindOf(arg)) {
      case "list": {
        const items = (arg as unknown[]).map(fromData);
        this.out.write(sharpV ? `${typeName(arg)}{` : "[");
        items.forEach((v, i) => {
          if (i > 0) this.out.write(sharpV ? ", " : " ");
          elem(v);
        });
        this.out.write(sharpV ? "}" : "]");
        return;
      }
      case "map": {
        this.out.write(sharpV ? `${typeName(arg)}{` : "map[");
        mapEntries(arg).forEach(([k, v], i) => {
          if (i > 0) this.out.write(sharpV ? ", " : " ");
          this.printArg(k, verb, depth + 1);
          this.out.write(":");
          elem(v);
        });
        this.out.write(sharpV ? "}" : "]");
        return;
      }
      default: {
        const fields = Object.entries((arg as GoStruct).fields);
        // The reference passes a pointer to its struct: fmt shows it as &{…} except where
        // text/template dereferences it first (printing an action, html, js, urlquery).
        if (depth === 0 && !this.derefRoot) this.out.write("&");
        this.out.write("{");
        fields.forEach(([name, v], i) => {
          if (i > 0) this.out.write(sharpV ? ", " : " ");
          if (this.flags.plusV || sharpV) this.out.write(`${name}:`);
          elem(fromData(v));
        });
        this.out.write("}");
      }
    }
  }

  #integer(v: bigint, verb: string): void {
    const f = this.flags;
    switch (verb) {
      case "v":
      case "d":
        this.#fmtInteger(v, 10, verb, false);
        return;
      case "b":
        this.#fmtInteger(v, 2, verb, false);
        return;
      case "o":
      case "O":
        this.#fmtInteger(v, 8, verb, false);
        return;
      case "x":
      case "X":
        this.#fmtInteger(v, 16, verb, verb === "X");
        return;
      case "c":
        this.pad(String.fromCodePoint(validRune(v)));
        return;
      case "q":
        this.pad(quote(String.fromCodePoint(validRune(v)), "'", f.plus));
        return;
      case "U": {
        // Negative values print as their uint64 bit pattern, as Go's conversion does.
        const u = v & 0xffffffffffffffffn;
        let s = `U+${u
          .toString(16)
          .toUpperCase()
          .padStart(Math.max(4, f.prec ?? 0), "0")}`;
        if (f.sharp && u <= 0x10ffffn && isPrint(Number(u))) s += ` '${String.fromCodePoint(Number(u))}'`;
        const zero = f.zero;
        f.zero = false;
        this.pad(s);
        f.zero = zero;
        return;
      }
      default:
        this.#badVerb(verb, v);
        return;
    }
  }

  #fmtInteger(v: bigint, base: number, verb: string, upper: boolean): void {
    const f = this.flags;
    const negative = v < 0n;
    const u = negative ? -v : v;
    let prec = 0;
    if (f.prec !== undefined) {
      prec = f.prec;
      if (prec === 0 && u === 0n) {
        const zero = f.zero;
        f.zero = false;
        this.#padding(f.width ?? 0);
        f.zero = zero;
        return;
      }
    } else if (f.zero && !f.minus && f.width !== undefined) {
      prec = f.width;
      if (negative || f.plus || f.space) prec--;
    }
    let digits = u.toString(base);
    if (upper) digits = digits.toUpperCase();
    digits = digits.padStart(prec, "0");
    if (f.sharp) {
      if (base === 2) digits = `0b${digits}`;
      else if (base === 8 && !digits.startsWith("0")) digits = `0${digits}`;
      else if (base === 16) digits = `0${upper ? "X" : "x"}${digits}`;
    }
    if (verb === "O") digits = `0o${digits}`;
    if (negative) digits = `-${digits}`;
    else if (f.plus) digits = `+${digits}`;
    else if (f.space) digits = ` ${digits}`;
    const zero = f.zero;
    f.zero = false;
    this.pad(digits);
    f.zero = zero;
  }

  #float(v: number, verb: string): void {
    const f = this.flags;
    let prec: number;
    switch (verb) {
      case "b":
      case "g":
      case "G":
      case "x":
      case "X":
      case "v":
        prec = -1;
        break;
      case "e":
      case "E":
      case "f":
      case "F":
        prec = 6;
        break;
      default:
        this.#badVerb(verb, v);
        return;
    }
    if (f.prec !== undefined) prec = f.prec;
    const format = verb === "v" ? "g" : verb === "F" ? "f" : verb;
    let num = formatFloat(v, format, prec);
    if (num[0] !== "-" && num[0] !== "+") num = `+${num}`;
    if (f.space && num[0] === "+" && !f.plus) num = ` ${num.slice(1)}`;
    if (num[1] === "I" || num[1] === "N") {
      if (num[1] === "N" && !f.space && !f.plus) num = num.slice(1);
      const zero = f.zero;
      f.zero = false;
      this.pad(num);
      f.zero = zero;
      return;
    }
    if (f.sharp && format !== "b") num = sharpFloat(num, format, prec);
    if (f.plus || num[0] !== "+") {
      if (f.zero && !f.minus && f.width !== undefined && f.width > num.length) {
        this.out.write(num[0] as string);
        this.#padding(f.width - num.length);
        this.out.write(num.slice(1));
        return;
      }
      this.pad(num);
      return;
    }
    this.pad(num.slice(1));
  }

  #string(s: string, verb: string): void {
    const f = this.flags;
    const truncated = () => (f.prec === undefined ? s : [...s].slice(0, f.prec).join(""));
    switch (verb) {
      case "v":
        this.pad(f.sharpV ? quote(truncated(), '"', false) : truncated());
        return;
      case "s":
        this.pad(truncated());
        return;
      case "q": {
        const t = truncated();
        this.pad(f.sharp && canBackquote(t) ? `\`${t}\`` : quote(t, '"', f.plus));
        return;
      }
      case "x":
      case "X":
        this.#hexString(s, verb === "X");
        return;
      default:
        this.#badVerb(verb, s);
        return;
    }
  }

  #hexString(s: string, upper: boolean): void {
    const f = this.flags;
    let bytes = utf8(s);
    if (f.prec !== undefined && f.prec < bytes.length) bytes = bytes.slice(0, f.prec);
    const width = f.width ?? 0;
    if (bytes.length === 0) {
      this.#padding(width);
      return;
    }
    const prefix = upper ? "0X" : "0x";
    const parts = [...bytes].map((b) => b.toString(16).padStart(2, "0"));
    let text = f.space
      ? parts.map((p) => (f.sharp ? prefix + p : p)).join(" ")
      : (f.sharp ? prefix : "") + parts.join("");
    if (upper) text = text.toUpperCase();
    if (!f.minus) this.#padding(width - text.length);
    this.out.write(text);
    if (f.minus) this.#padding(width - text.length);
  }
}

/**
 * fmt's `#` flag on floats: always a decimal point, and for %g/%x the trailing zeros up to the
 * precision (6 when unset). `num` starts with its sign.
 */
function sharpFloat(num: string, format: string, prec: number): string {
  let digits = format === "g" || format === "G" || format === "x" ? (prec === -1 ? 6 : prec) : 0;
  let tail = "";
  let body = num;
  let hasPoint = false;
  let sawNonzero = false;
  for (let i = 1; i < body.length; i++) {
    const c = body[i] as string;
    if (c === ".") hasPoint = true;
    else if (c === "p" || c === "P" || ((c === "e" || c === "E") && format !== "x" && format !== "X")) {
      tail = body.slice(i);
      body = body.slice(0, i);
      break;
    } else {
      if (c !== "0") sawNonzero = true;
      if (sawNonzero) digits--;
    }
  }
  if (!hasPoint) {
    if (body.length === 2 && body[1] === "0") digits--;
    body += ".";
  }
  return body + "0".repeat(Math.max(digits, 0)) + tail;
}

/** A rune for %c/%q: invalid code points print as U+FFFD. */
function validRune(v: bigint): number {
  return v < 0n || v > 0x10ffffn || (v >= 0xd800n && v <= 0xdfffn) ? 0xfffd : Number(v);
}

/** fmt.Sprint: spaces between operands when neither is a string. */
function sprint(args: unknown[], derefRoot = false): string {
  const p = new Printer(derefRoot);
  args.forEach((arg, i) => {
    if (i > 0 && typeof arg !== "string" && typeof args[i - 1] !== "string") p.out.write(" ");
    p.printArg(arg, "v");
  });
  return p.out.text;
}

/** fmt.Sprintln: spaces always, then a newline. */
function sprintln(args: unknown[]): string {
  const p = new Printer();
  args.forEach((arg, i) => {
    if (i > 0) p.out.write(" ");
    p.printArg(arg, "v");
  });
  p.out.write("\n");
  return p.out.text;
}

/** Parses decimal digits at i; Go treats numbers over 10^6 as malformed and skips the rest. */
function parseNum(s: string, i: number): { num: number; ok: boolean; next: number } {
  let num = 0;
  let ok = false;
  let j = i;
  for (; j < s.length && s[j] !== undefined && (s[j] as string) >= "0" && (s[j] as string) <= "9"; j++) {
    if (num > 1e6) return { num: 0, ok: false, next: s.length };
    num = num * 10 + (s.charCodeAt(j) - 48);
    ok = true;
  }
  return { num, ok, next: j };
}

/** fmt.Sprintf with Go's verbs, flags, width, precision, `*` and `[n]` argument indexes. */
function sprintf(format: string, args: unknown[]): string {
  const p = new Printer();
  let argNum = 0;
  let reordered = false;
  let goodArgNum = true;
  const argNumber = (i: number): { i: number; found: boolean } => {
    if (format[i] !== "[") return { i, found: false };
    reordered = true;
    const close = format.indexOf("]", i + 1);
    if (format.length - i < 3 || close < 0) {
      goodArgNum = false;
      return { i: i + 1, found: false };
    }
    const n = parseNum(format, i + 1);
    if (!n.ok || n.next !== close) {
      goodArgNum = false;
      return { i: close + 1, found: false };
    }
    if (n.num - 1 >= 0 && n.num - 1 < args.length) {
      argNum = n.num - 1;
      return { i: close + 1, found: true };
    }
    goodArgNum = false;
    return { i: close + 1, found: true };
  };
  const intArg = (): number | undefined => {
    if (argNum >= args.length) return undefined;
    const v = args[argNum++];
    if (typeof v !== "bigint" || v > 1_000_000n || v < -1_000_000n) return undefined;
    return Number(v);
  };
  let i = 0;
  while (i < format.length) {
    goodArgNum = true;
    const pct = format.indexOf("%", i);
    if (pct < 0) {
      p.out.write(format.slice(i));
      break;
    }
    p.out.write(format.slice(i, pct));
    i = pct + 1;
    const f: FmtFlags = { ...NO_FLAGS };
    p.flags = f;
    for (; i < format.length; i++) {
      const c = format[i];
      if (c === "#") f.sharp = true;
      else if (c === "0") f.zero = !f.minus;
      else if (c === "+") f.plus = true;
      else if (c === "-") {
        f.minus = true;
        f.zero = false;
      } else if (c === " ") f.space = true;
      else break;
    }
    let idx = argNumber(i);
    i = idx.i;
    let afterIndex = idx.found;
    if (format[i] === "*") {
      i++;
      const w = intArg();
      if (w === undefined) p.out.write("%!(BADWIDTH)");
      else {
        f.width = Math.abs(w);
        if (w < 0) {
          f.minus = true;
          f.zero = false;
        }
      }
      afterIndex = false;
    } else {
      const n = parseNum(format, i);
      if (n.ok) f.width = n.num;
      i = n.next;
      if (afterIndex && n.ok) goodArgNum = false;
    }
    if (i + 1 < format.length && format[i] === ".") {
      i++;
      if (afterIndex) goodArgNum = false;
      idx = argNumber(i);
      i = idx.i;
      afterIndex = idx.found;
      if (format[i] === "*") {
        i++;
        const prec = intArg();
        if (prec === undefined || prec < 0) p.out.write("%!(BADPREC)");
        else f.prec = prec;
        afterIndex = false;
      } else {
        const n = parseNum(format, i);
        f.prec = n.ok ? n.num : 0;
        i = n.next;
      }
    }
    if (!afterIndex) {
      idx = argNumber(i);
      i = idx.i;
    }
    if (i >= format.length) {
      p.out.write("%!(NOVERB)");
      break;
    }
    const verb = String.fromCodePoint(format.codePointAt(i) as number);
    i += verb.length;
    if (verb === "%") p.out.write("%");
    else if (!goodArgNum) p.out.write(`%!${verb}(BADINDEX)`);
    else if (argNum >= args.length) p.out.write(`%!${verb}(MISSING)`);
    else {
      if (verb === "v") {
        f.sharpV = f.sharp;
        f.sharp = false;
        f.plusV = f.plus;
        f.plus = false;
      }
      p.printArg(args[argNum++], verb);
    }
  }
  if (!reordered && argNum < args.length) {
    p.flags = { ...NO_FLAGS };
    p.out.write("%!(EXTRA ");
    args.slice(argNum).forEach((arg, j) => {
      if (j > 0) p.out.write(", ");
      if (arg === undefined) p.out.write("<nil>");
      else {
        p.out.write(`${typeName(arg)}=`);
        p.printArg(arg, "v");
      }
    });
    p.out.write(")");
  }
  return p.out.text;
}

// ---------------------------------------------------------------------------------------------
// Functions: Go's builtins and the reference's library (pkg/transformer/functions.go), with the
// reference's argument order (`trimSuffix suffix s`, `replace old new s`, `default def value`).

/** How an argument is checked: Go's static parameter type. "value" and "any" take anything. */
type Param = "string" | "int" | "bool" | "any" | "value";

interface Context {
  regex(pattern: string): RegExp;
}

interface Func {
  params: readonly Param[];
  variadic?: Param;
  call(args: unknown[], ctx: Context): unknown;
}

const str = (v: unknown) => v as string;

/** Go's unicode.IsSpace, which strings.TrimSpace uses (U+0085 yes, U+FEFF no, unlike JavaScript's trim). */
const TRIM_SPACE =
  /^[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

/** strings.ToUpper/ToLower map rune by rune (simple case mapping): "ß" stays "ß", "İ" lowers to "i". */
function mapCase(s: string, upper: boolean): string {
  if (!/[^\p{ASCII}]/u.test(s)) return upper ? s.toUpperCase() : s.toLowerCase();
  let out = "";
  for (const ch of s) {
    if (!upper && ch === "\u0130") {
      out += "i";
      continue;
    }
    const mapped = upper ? ch.toUpperCase() : ch.toLowerCase();
    out += [...mapped].length === 1 ? mapped : ch;
  }
  return out;
}

function limited(s: string): string {
  if (s.length > MAX_OUTPUT) throw new FuncError(`result exceeds ${MAX_OUTPUT} characters`);
  return s;
}

/** fmt.Sprint of arguments with nil shown as "<no value>", for html, js and urlquery. */
function evalArgs(args: unknown[]): string {
  if (args.length === 1 && typeof args[0] === "string") return args[0];
  return sprint(
    args.map((a) => (a === undefined ? "<no value>" : a)),
    true,
  );
}

const HTML_ESCAPES: Record<string, string> = {
  "\0": "\ufffd",
  '"': "&#34;",
  "'": "&#39;",
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
};

function jsEscape(s: string): string {
  let out = "";
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    const simple: Record<string, string> = {
      "\\": "\\\\",
      "'": "\\'",
      '"': '\\"',
      "<": "\\u003C",
      ">": "\\u003E",
      "&": "\\u0026",
      "=": "\\u003D",
    };
    if (Object.hasOwn(simple, ch)) out += simple[ch];
    else if (cp < 0x20) out += `\\u00${cp.toString(16).toUpperCase().padStart(2, "0")}`;
    else if (cp < 0x80 || isPrint(cp)) out += ch;
    else out += `\\u${cp.toString(16).toUpperCase().padStart(4, "0")}`;
  }
  return out;
}

function queryEscape(s: string): string {
  let out = "";
  for (const b of utf8(s)) {
    const ch = String.fromCharCode(b);
    if (/[A-Za-z0-9\-_.~]/.test(ch)) out += ch;
    else if (ch === " ") out += "+";
    else out += `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** encoding/base64 StdEncoding.DecodeString: padding required, CR and LF ignored, Go's error offsets. */
function base64Decode(s: string): string {
  const src = utf8(s);
  const out: number[] = [];
  const corrupt = (at: number): never => {
    throw new FuncError(`illegal base64 data at input byte ${at}`);
  };
  const isNewline = (b: number | undefined) => b === 0x0a || b === 0x0d;
  let si = 0;
  while (si < src.length) {
    const quantum: number[] = [];
    let dlen = 4;
    for (let j = 0; j < 4; j++) {
      if (si === src.length) {
        if (j === 0) return new TextDecoder().decode(new Uint8Array(out));
        corrupt(si - j);
      }
      const b = src[si++] as number;
      const value = BASE64.indexOf(String.fromCharCode(b));
      if (b < 0x80 && value >= 0) {
        quantum.push(value);
        continue;
      }
      if (isNewline(b)) {
        j--;
        continue;
      }
      if (b !== 0x3d || j < 2) corrupt(si - 1);
      if (j === 2) {
        while (isNewline(src[si])) si++;
        if (si === src.length) corrupt(src.length);
        if (src[si] !== 0x3d) corrupt(si - 1);
        si++;
      }
      while (isNewline(src[si])) si++;
      if (si < src.length) corrupt(si);
      dlen = j;
      break;
    }
    const [a = 0, b = 0, c = 0, d = 0] = quantum;
    const val = (a << 18) | (b << 12) | (c << 6) | d;
    out.push(...[(val >> 16) & 0xff, (val >> 8) & 0xff, val & 0xff].slice(0, dlen - 1));
  }
  return new TextDecoder().decode(new Uint8Array(out));
}

/** Go's index/slice argument: an int within [0, cap]. */
function indexArg(v: unknown, cap: number): number {
  if (v === undefined) throw new FuncError("cannot index slice/array with nil");
  if (typeof v !== "bigint") throw new FuncError(`cannot index slice/array with type ${typeName(v)}`);
  if (v < 0n || v > BigInt(cap)) throw new FuncError(`index out of range: ${v}`);
  return Number(v);
}

function indexFunc(item: unknown, ...indexes: unknown[]): unknown {
  if (item === undefined) throw new FuncError("index of untyped nil");
  let cur: unknown = item;
  for (const index of indexes) {
    switch (kindOf(cur)) {
      case "string": {
        const bytes = utf8(cur as string);
        const x = indexArg(index, bytes.length);
        if (x === bytes.length) throw new FuncError(`index out of range: ${x}`);
        cur = BigInt(bytes[x] as number);
        break;
      }
      case "list": {
        const list = cur as unknown[];
        const x = indexArg(index, list.length);
        if (x === list.length) throw new FuncError(`index out of range: ${x}`);
        cur = fromData(list[x]);
        break;
      }
      case "map": {
        if (typeof index !== "string") {
          throw new FuncError(
            index === undefined
              ? "value is nil; should be of type string"
              : `value has type ${typeName(index)}; should be string`,
          );
        }
        const { found, value } = mapGet(cur, index);
        cur = found ? value : elemIsString(cur) ? "" : undefined;
        break;
      }
      case "nil":
        throw new FuncError("index of nil pointer");
      default:
        throw new FuncError(`can't index item of type ${typeName(cur)}`);
    }
  }
  return cur;
}

function sliceFunc(item: unknown, ...indexes: unknown[]): unknown {
  if (item === undefined) throw new FuncError("slice of untyped nil");
  if (indexes.length > 3) throw new FuncError(`too many slice indexes: ${indexes.length}`);
  const kind = kindOf(item);
  if (kind !== "string" && kind !== "list") throw new FuncError(`can't slice item of type ${typeName(item)}`);
  if (kind === "string" && indexes.length === 3) throw new FuncError("cannot 3-index slice a string");
  const bytes = kind === "string" ? utf8(item as string) : undefined;
  const len = bytes?.length ?? (item as unknown[]).length;
  const idx = [0, len, len];
  indexes.forEach((index, i) => {
    idx[i] = indexArg(index, len);
  });
  const [i = 0, j = len, k = len] = idx;
  if (i > j) throw new FuncError(`invalid slice index: ${i} > ${j}`);
  if (indexes.length === 3 && j > k) throw new FuncError(`invalid slice index: ${j} > ${k}`);
  if (bytes !== undefined) return new TextDecoder().decode(bytes.slice(i, j));
  return (item as unknown[]).slice(i, j);
}

function lengthFunc(item: unknown): bigint {
  switch (kindOf(item)) {
    case "string":
      return BigInt(utf8(item as string).length);
    case "list":
      return BigInt((item as unknown[]).length);
    case "map":
      return BigInt(mapSize(item));
    case "nil":
      throw new FuncError("len of nil");
    default:
      throw new FuncError(`len of type ${typeName(item)}`);
  }
}

const FUNCTIONS: Record<string, Func> = {
  // Go's builtins. and/or are evaluated lazily by the executor.
  and: { params: ["value"], variadic: "value", call: () => undefined },
  or: { params: ["value"], variadic: "value", call: () => undefined },
  not: { params: ["value"], call: ([v]) => !truth(v) },
  len: { params: ["value"], call: ([v]) => lengthFunc(v) },
  index: { params: ["value"], variadic: "value", call: ([item, ...rest]) => indexFunc(item, ...rest) },
  slice: { params: ["value"], variadic: "value", call: ([item, ...rest]) => sliceFunc(item, ...rest) },
  call: {
    params: ["value"],
    variadic: "value",
    call: ([fn]) => {
      throw new FuncError(fn === undefined ? "call of nil" : `non-function of type ${typeName(fn)}`);
    },
  },
  print: { params: [], variadic: "any", call: (args) => limited(sprint(args)) },
  printf: {
    params: ["string"],
    variadic: "any",
    call: ([format, ...args]) => limited(sprintf(str(format), args)),
  },
  println: { params: [], variadic: "any", call: (args) => limited(sprintln(args)) },
  html: {
    params: [],
    variadic: "any",
    call: (args) => limited(evalArgs(args).replace(/[\0"'&<>]/g, (c) => HTML_ESCAPES[c] ?? c)),
  },
  js: { params: [], variadic: "any", call: (args) => limited(jsEscape(evalArgs(args))) },
  urlquery: { params: [], variadic: "any", call: (args) => limited(queryEscape(evalArgs(args))) },
  eq: { params: ["value"], variadic: "value", call: ([a, ...rest]) => eq(a, ...rest) },
  ne: { params: ["value", "value"], call: ([a, b]) => !eq(a, b) },
  lt: { params: ["value", "value"], call: ([a, b]) => lt(a, b) },
  le: { params: ["value", "value"], call: ([a, b]) => le(a, b) },
  gt: { params: ["value", "value"], call: ([a, b]) => !le(a, b) },
  ge: { params: ["value", "value"], call: ([a, b]) => !lt(a, b) },

  // The reference's library.
  default: {
    params: ["any"],
    variadic: "any",
    call: ([d, ...given]) => {
      if (given.length === 0) throw new FuncError("runtime error: index out of range [0] with length 0");
      return isZero(given[0]) ? d : given[0];
    },
  },
  empty: { params: ["any"], call: ([v]) => isZero(v) },
  coalesce: { params: [], variadic: "any", call: (args) => args.find((v) => !isZero(v)) },
  ternary: { params: ["any", "any", "bool"], call: ([vt, vf, v]) => (v ? vt : vf) },
  upper: { params: ["string"], call: ([s]) => mapCase(str(s), true) },
  lower: { params: ["string"], call: ([s]) => mapCase(str(s), false) },
  trim: { params: ["string"], call: ([s]) => str(s).replace(TRIM_SPACE, "") },
  trimSuffix: {
    params: ["string", "string"],
    call: ([suffix, s]) =>
      str(s).endsWith(str(suffix)) ? str(s).slice(0, str(s).length - str(suffix).length) : s,
  },
  trimPrefix: {
    params: ["string", "string"],
    call: ([prefix, s]) => (str(s).startsWith(str(prefix)) ? str(s).slice(str(prefix).length) : s),
  },
  replace: {
    params: ["string", "string", "string"],
    call: ([from, to, s]) => {
      const [o, n, text] = [str(from), str(to), str(s)];
      // strings.ReplaceAll with an empty `old` inserts `new` around every rune.
      const count = o === "" ? runeCount(text) + 1 : text.split(o).length - 1;
      if (text.length + count * (n.length - o.length) > MAX_OUTPUT) {
        throw new FuncError(`result exceeds ${MAX_OUTPUT} characters`);
      }
      return o === "" ? `${n}${[...text].join(n)}${text === "" ? "" : n}` : text.replaceAll(o, n);
    },
  },
  regexFind: {
    params: ["string", "string"],
    call: ([pattern, s], ctx) => ctx.regex(str(pattern)).exec(str(s))?.[0] ?? "",
  },
  regexFindString: {
    params: ["string", "string", "int"],
    call: ([pattern, s, n], ctx) => {
      const index = n as bigint;
      const match = ctx.regex(str(pattern)).exec(str(s));
      if (index < 0n) throw new FuncError(`runtime error: index out of range [${index}]`);
      if (match === null || match.length < Number(index) + 1) return "";
      return match[Number(index)] ?? "";
    },
  },
  regexReplaceAll: {
    params: ["string", "string", "string"],
    call: ([pattern, s, repl], ctx) => replaceAll(ctx.regex(str(pattern)), str(s), str(repl)),
  },
  contains: { params: ["string", "string"], call: ([sub, s]) => str(s).includes(str(sub)) },
  hasPrefix: { params: ["string", "string"], call: ([prefix, s]) => str(s).startsWith(str(prefix)) },
  hasSuffix: { params: ["string", "string"], call: ([suffix, s]) => str(s).endsWith(str(suffix)) },
  b64enc: { params: ["string"], call: ([s]) => Buffer.from(str(s), "utf8").toString("base64") },
  b64dec: { params: ["string"], call: ([s]) => base64Decode(str(s)) },
  getValue: {
    params: ["string", "string"],
    call: ([source, key]) => {
      for (const part of str(source).split(";")) {
        const kv = part.split("=");
        if (kv[0] !== key) continue;
        if (kv.length < 2) throw new FuncError("runtime error: index out of range [1] with length 1");
        return kv[1];
      }
      return "";
    },
  },
};

// ---------------------------------------------------------------------------------------------
// Execution.

const MISSING: unique symbol = Symbol("missing");
type Final = unknown | typeof MISSING;

const GO_TYPE: Record<Param, string> = {
  string: "string",
  int: "int",
  bool: "bool",
  any: "interface {}",
  value: "reflect.Value",
};

/** One execution: the variable stack, the output, the step budget and the node errors point at. */
class Exec implements Context {
  readonly #tmpl: ParsedTemplate;
  readonly #out = new Out();
  readonly #vars: { name: string; value: unknown }[] = [];
  #steps = 0;
  #at: Span = { pos: 0, end: 0 };

  constructor(tmpl: ParsedTemplate) {
    this.#tmpl = tmpl;
  }

  run(data: unknown): string {
    const root = isPlainObject(data) ? new GoStruct(data) : fromData(data);
    this.#vars.push({ name: "$", value: root });
    try {
      this.#walkList(root, this.#tmpl.root);
    } catch (err) {
      if (!(err instanceof ExecFailure)) throw err;
      const { pos, end } = this.#at;
      const context = this.#tmpl.source.slice(pos, end);
      throw new TemplateError(
        "exec",
        this.#tmpl.name,
        lineColumn(this.#tmpl.source, pos),
        context === "" ? err.message : `at <${context}>: ${err.message}`,
        { cause: err.cause },
      );
    }
    return this.#out.text;
  }

  regex(pattern: string): RegExp {
    const cached = this.#tmpl.regexes.get(pattern) ?? this.#tmpl.dynamicRegexes.get(pattern);
    if (cached !== undefined) return cached;
    const re = compileRegex(pattern);
    if (this.#tmpl.dynamicRegexes.size >= DYNAMIC_REGEX_CACHE) this.#tmpl.dynamicRegexes.clear();
    this.#tmpl.dynamicRegexes.set(pattern, re);
    return re;
  }

  #fail(message: string): never {
    throw new ExecFailure(message);
  }

  #step(): void {
    if (++this.#steps > MAX_STEPS) this.#fail(`execution exceeded ${MAX_STEPS} steps`);
  }

  #walkList(dot: unknown, nodes: readonly TNode[]): "break" | "continue" | undefined {
    for (const node of nodes) {
      const signal = this.#walk(dot, node);
      if (signal !== undefined) return signal;
    }
    return undefined;
  }

  #walk(dot: unknown, node: TNode): "break" | "continue" | undefined {
    this.#step();
    switch (node.kind) {
      case "text":
        this.#out.write(node.text);
        return undefined;
      case "action": {
        this.#at = node;
        const value = this.#evalPipeline(dot, node.pipe);
        if (node.pipe.decl.length === 0) {
          this.#at = node;
          if (value === undefined) this.#out.write("<no value>");
          else {
            const p = new Printer(true);
            p.printArg(value, "v");
            this.#out.write(p.out.text);
          }
        }
        return undefined;
      }
      case "if":
      case "with": {
        const mark = this.#vars.length;
        this.#at = node;
        const value = this.#evalPipeline(dot, node.pipe);
        const yes = truth(value);
        const signal = yes
          ? this.#walkList(node.kind === "with" ? value : dot, node.list)
          : node.elseList === undefined
            ? undefined
            : this.#walkList(dot, node.elseList);
        this.#vars.length = mark;
        return signal;
      }
      case "range":
        return this.#walkRange(dot, node);
      default:
        return node.kind;
    }
  }

  #walkRange(dot: unknown, node: Branch): "break" | "continue" | undefined {
    const mark = this.#vars.length;
    this.#at = node;
    const value = this.#evalPipeline(dot, node.pipe);
    const inner = this.#vars.length;
    const { decl, isAssign } = node.pipe;
    // Returns true to stop (on {{break}}).
    const iteration = (index: unknown, elem: unknown): boolean => {
      this.#step();
      if (decl.length > 0) {
        if (isAssign) this.#setVar(decl[0] as string, decl.length > 1 ? index : elem);
        else (this.#vars[inner - 1] as { value: unknown }).value = elem;
      }
      if (decl.length > 1) {
        if (isAssign) this.#setVar(decl[1] as string, elem);
        else (this.#vars[inner - 2] as { value: unknown }).value = index;
      }
      const signal = this.#walkList(elem, node.list);
      this.#vars.length = inner;
      return signal === "break";
    };
    let ran = false;
    switch (kindOf(value)) {
      case "int": {
        if (decl.length > 1) this.#fail(`can't use ${value} to iterate over more than one variable`);
        for (let i = 0n; i < (value as bigint); i++) {
          ran = true;
          if (iteration(undefined, i)) break;
        }
        break;
      }
      case "list":
        for (const [i, elem] of (value as unknown[]).entries()) {
          ran = true;
          if (iteration(BigInt(i), fromData(elem))) break;
        }
        break;
      case "map":
        for (const [key, elem] of mapEntries(value)) {
          ran = true;
          if (iteration(key, elem)) break;
        }
        break;
      case "nil":
        break;
      default: {
        const p = new Printer(true);
        p.printArg(value, "v");
        this.#fail(`range can't iterate over ${p.out.text}`);
      }
    }
    const signal = !ran && node.elseList !== undefined ? this.#walkList(dot, node.elseList) : undefined;
    this.#vars.length = mark;
    return signal;
  }

  #setVar(name: string, value: unknown): void {
    for (let i = this.#vars.length - 1; i >= 0; i--) {
      const v = this.#vars[i] as { name: string; value: unknown };
      if (v.name === name) {
        v.value = value;
        return;
      }
    }
    this.#fail(`undefined variable: ${name}`);
  }

  #varValue(name: string): unknown {
    for (let i = this.#vars.length - 1; i >= 0; i--) {
      const v = this.#vars[i] as { name: string; value: unknown };
      if (v.name === name) return v.value;
    }
    return this.#fail(`undefined variable: ${name}`);
  }

  #evalPipeline(dot: unknown, pipe: Pipe): unknown {
    let value: Final = MISSING;
    for (const cmd of pipe.cmds) value = this.#evalCommand(dot, cmd, value);
    for (const name of pipe.decl) {
      if (pipe.isAssign) this.#setVar(name, value);
      else this.#vars.push({ name, value });
    }
    return value;
  }

  #text(span: Span): string {
    return this.#tmpl.source.slice(span.pos, span.end);
  }

  #notAFunction(args: readonly Arg[], final: Final): void {
    if (args.length > 1 || final !== MISSING) {
      this.#fail(`can't give argument to non-function ${this.#text(args[0] as Arg)}`);
    }
  }

  #evalCommand(dot: unknown, cmd: Command, final: Final): unknown {
    this.#step();
    const first = cmd.args[0] as Arg;
    this.#at = cmd;
    switch (first.kind) {
      case "field":
        return this.#evalFieldChain(dot, first.names, cmd.args, final);
      case "chain":
        return this.#evalChain(dot, first, cmd.args, final);
      case "ident":
        return this.#evalCall(dot, first, cmd, cmd.args, final);
      case "pipe":
        this.#notAFunction(cmd.args, final);
        return this.#evalPipeline(dot, first.pipe);
      case "variable":
        return this.#evalVariable(first, cmd.args, final);
    }
    this.#at = first;
    this.#notAFunction(cmd.args, final);
    switch (first.kind) {
      case "bool":
      case "string":
        return first.value;
      case "dot":
        return dot;
      case "nil":
        return this.#fail("nil is not a command");
      case "number":
        return idealConstant(first.num);
    }
  }

  #evalFieldChain(receiver: unknown, names: readonly string[], args: readonly Arg[], final: Final): unknown {
    let value = receiver;
    names.forEach((name, i) => {
      const last = i === names.length - 1;
      value = this.#evalField(name, last ? args : [], last ? final : MISSING, value);
    });
    return value;
  }

  #evalField(name: string, args: readonly Arg[], final: Final, receiver: unknown): unknown {
    if (receiver === undefined) return undefined;
    const hasArgs = args.length > 1 || final !== MISSING;
    switch (kindOf(receiver)) {
      case "struct": {
        const fields = (receiver as GoStruct).fields;
        if (!Object.hasOwn(fields, name)) {
          this.#fail(
            `can't evaluate field ${name} in type struct (fields: ${Object.keys(fields).join(", ") || "none"})`,
          );
        }
        if (hasArgs) this.#fail(`${name} has arguments but cannot be invoked as function`);
        return fromData(fields[name]);
      }
      case "map":
        if (hasArgs) this.#fail(`${name} is not a method but has arguments`);
        return mapGet(receiver, name).value;
      default:
        return this.#fail(`can't evaluate field ${name} in type ${typeName(receiver)}`);
    }
  }

  #evalChain(dot: unknown, chain: Arg & { kind: "chain" }, args: readonly Arg[], final: Final): unknown {
    if (chain.node.kind === "nil") this.#fail(`indirection through explicit nil in ${this.#text(chain)}`);
    const receiver = this.#evalArg(dot, "any", chain.node);
    return this.#evalFieldChain(receiver, chain.fields, args, final);
  }

  #evalVariable(node: Arg & { kind: "variable" }, args: readonly Arg[], final: Final): unknown {
    const value = this.#varValue(node.name);
    if (node.fields.length === 0) {
      this.#notAFunction(args, final);
      return value;
    }
    return this.#evalFieldChain(value, node.fields, args, final);
  }

  /** Calls a function; `call` is the span errors from the function itself point at. */
  #evalCall(
    dot: unknown,
    ident: Arg & { kind: "ident" },
    call: Span,
    args: readonly Arg[],
    final: Final,
  ): unknown {
    const name = ident.name;
    const fn = FUNCTIONS[name] as Func;
    const argNodes = args.slice(1);
    const numIn = argNodes.length + (final === MISSING ? 0 : 1);
    const fixed = fn.params.length;
    if (fn.variadic !== undefined) {
      if (numIn < fixed)
        this.#fail(`wrong number of args for ${name}: want at least ${fixed} got ${argNodes.length}`);
    } else if (numIn !== fixed) {
      this.#fail(`wrong number of args for ${name}: want ${fixed} got ${numIn}`);
    }
    if (name === "and" || name === "or") {
      let v: unknown;
      for (const node of argNodes) {
        v = this.#evalArg(dot, "value", node);
        if (truth(v) === (name === "or")) return v;
      }
      return final === MISSING ? v : final;
    }
    const paramAt = (i: number) => (i < fixed ? fn.params[i] : fn.variadic) as Param;
    const argv = argNodes.map((node, i) => this.#evalArg(dot, paramAt(i), node));
    if (final !== MISSING) argv.push(this.#validate(final, paramAt(argv.length)));
    this.#at = call;
    try {
      return fn.call(argv, this);
    } catch (err) {
      if (err instanceof FuncError || err instanceof RegexError) {
        throw new ExecFailure(`error calling ${name}: ${err.message}`, { cause: err });
      }
      throw err;
    }
  }

  #evalArg(dot: unknown, param: Param, node: Arg): unknown {
    this.#at = node;
    switch (node.kind) {
      case "dot":
        return this.#validate(dot, param);
      case "nil":
        if (param === "any" || param === "value") return undefined;
        return this.#fail(`cannot assign nil to ${GO_TYPE[param]}`);
      case "field":
        return this.#validate(this.#evalFieldChain(dot, node.names, [node], MISSING), param);
      case "variable":
        return this.#validate(this.#evalVariable(node, [], MISSING), param);
      case "pipe":
        return this.#validate(this.#evalPipeline(dot, node.pipe), param);
      case "ident":
        return this.#validate(this.#evalCall(dot, node, node, [node], MISSING), param);
      case "chain":
        return this.#validate(this.#evalChain(dot, node, [], MISSING), param);
    }
    const found = this.#text(node);
    switch (param) {
      case "bool":
        return node.kind === "bool" ? node.value : this.#fail(`expected bool; found ${found}`);
      case "string":
        return node.kind === "string" ? node.value : this.#fail(`expected string; found ${found}`);
      case "int":
        return node.kind === "number" && node.num.int !== undefined
          ? node.num.int
          : this.#fail(`expected integer; found ${found}`);
      default:
        return node.kind === "number" ? idealConstant(node.num) : node.value;
    }
  }

  /** Go's validateType: the value must suit the parameter's static type. */
  #validate(value: unknown, param: Param): unknown {
    if (param === "any" || param === "value") return value;
    if (value === undefined) return this.#fail(`invalid value; expected ${GO_TYPE[param]}`);
    const ok =
      (param === "string" && typeof value === "string") ||
      (param === "int" && typeof value === "bigint") ||
      (param === "bool" && typeof value === "boolean");
    return ok
      ? value
      : this.#fail(`wrong type for value; expected ${GO_TYPE[param]}; got ${typeName(value)}`);
  }
}

/** A number constant where no type is asked for: float64 if written as one, else int. */
function idealConstant(num: NumberConst): unknown {
  return num.preferFloat || num.int === undefined ? num.float : num.int;
}

function lineColumn(src: string, pos: number): { line: number; column: number } {
  const before = src.slice(0, pos);
  const lineStart = before.lastIndexOf("\n") + 1;
  return { line: before.split("\n").length, column: [...before.slice(lineStart)].length + 1 };
}

class ParsedTemplate implements Template {
  readonly dynamicRegexes = new Map<string, RegExp>();

  constructor(
    readonly source: string,
    readonly name: string,
    readonly root: readonly TNode[],
    readonly regexes: ReadonlyMap<string, RegExp>,
  ) {}

  execute(data: unknown): string {
    return new Exec(this).run(data);
  }
}

/**
 * Parses a Go text/template once. Functions: Go's builtins (and, or, not, len, index, slice, print,
 * printf, println, html, js, urlquery, call, eq, ne, lt, le, gt, ge) and the reference's (default,
 * empty, coalesce, ternary, upper, lower, trim, trimSuffix, trimPrefix, replace, regexFind,
 * regexFindString, regexReplaceAll, contains, hasPrefix, hasSuffix, b64enc, b64dec, getValue).
 * A regex given as a string constant is compiled here, so a bad one fails at load.
 * @param name shown in errors, e.g. the config path of the value.
 * @throws TemplateError (code "parse") with line:column and the reason.
 * @example parseTemplate('{{ .Hostname | upper }}-{{ index .Tags "env" }}').execute(data)
 */
export function parseTemplate(source: string, name = "template"): Template {
  const fail = (pos: number, reason: string): never => {
    throw new TemplateError("parse", name, lineColumn(source, pos), reason);
  };
  const parser = new Parser(source, fail);
  const root = parser.parse();
  return new ParsedTemplate(source, name, root, parser.regexes);
}
