// The parser of Go text/template: turns the lexer's tokens into the parse tree the executor walks
// (the tree's types are here), with Go's checks at parse time (functions defined, variables
// declared, {{break}} inside {{range}}, pipeline shapes) and Go's error wording. Regex patterns
// given as string constants are compiled here, so a bad one fails when the config loads. Also what
// a tree may read of its data (fieldUse), so that callers fetch only the facts templates use.

import { compileRegex, RegexError } from "./re2.ts";
import { FUNCTIONS, REGEX_FUNCTIONS } from "./templatefuncs.ts";
import { lex, type Token } from "./templatelex.ts";
import { type NumberConst, parseNumber, unquote, unquoteChar } from "./templatestrconv.ts";

/** Nesting of control structures and parentheses accepted by the parser. */
const MAX_NESTING = 100;

/** An operand of a command: a constant, a field or variable chain, a function name or a sub-pipeline. */
export type Arg = (
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

/** A command of a pipeline: a function and its arguments, or a single operand. */
export interface Command {
  pos: number;
  end: number;
  args: Arg[];
}

/** A pipeline with the variables it declares (`$x :=`) or assigns (`$x =`). */
export interface Pipe {
  pos: number;
  end: number;
  decl: string[];
  isAssign: boolean;
  cmds: Command[];
}

/** An if, with or range action with its lists. */
export interface Branch {
  kind: "if" | "with" | "range";
  pos: number;
  end: number;
  pipe: Pipe;
  list: TNode[];
  elseList: TNode[] | undefined;
}

/** A node of a template's list: text, an action, a control structure, {{break}} or {{continue}}. */
export type TNode =
  | { kind: "text"; text: string }
  | { kind: "action"; pos: number; end: number; pipe: Pipe }
  | Branch
  | { kind: "break" | "continue"; pos: number; end: number };

/** Where an error points: a source span. */
export interface Span {
  pos: number;
  end: number;
}

/**
 * Parses a template into a tree, checking functions and variables as Go's parser does.
 * @example new Parser("{{ .X }}", fail).parse() // [{ kind: "action", … }]
 */
export class Parser {
  readonly #src: string;
  readonly #tokens: Token[];
  readonly #fail: (pos: number, msg: string) => never;
  #i = 0;
  #vars: string[] = ["$"];
  #rangeDepth = 0;
  #depth = 0;
  /** Regexes given as string constants, compiled now so a bad one fails at config load. */
  readonly regexes = new Map<string, RegExp>();

  /** @param fail reports an error at a source offset; it must throw. Lexing happens here. */
  constructor(src: string, fail: (pos: number, msg: string) => never) {
    this.#src = src;
    this.#fail = fail;
    this.#tokens = lex(src, fail);
  }

  /** The template's top-level list; call once. */
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

/** Which top-level data fields a template may read; see {@link fieldUse}. */
export interface FieldUse {
  /** Every field name the template mentions, at any depth (so map keys such as `.Tags.x` count too). */
  names: ReadonlySet<string>;
  /** The data value itself may reach the output, a function or a range, which can read any field. */
  all: boolean;
}

/**
 * The data fields a parsed template may read, found without running it: a sound over-approximation.
 * Field accesses are collected by name wherever they are (`.A.B`, `$.A`, `$x.A`, `(…).A`). The data
 * value itself (`$`, or dot where it can still be the data, or a variable bound to either) is
 * followed through variables and `with`; where it is printed, passed to a function (`printf "%v" .`)
 * or ranged over, `all` is set. Variables are tracked by name, whatever their scope, until nothing
 * changes, so an assignment in a later iteration of a range counts too.
 * @example fieldUse(new Parser("{{ .Zone }}-{{ $.Tags.env }}", fail).parse()) // names {Zone, Tags, env}, all false
 */
export function fieldUse(root: readonly TNode[]): FieldUse {
  const names = new Set<string>();
  /** Variables that may hold the data value itself. */
  const whole = new Set<string>(["$"]);
  let all = false;

  // Each returns whether its value may be the data value itself.
  const arg = (a: Arg, dotIsData: boolean): boolean => {
    switch (a.kind) {
      case "field":
        for (const n of a.names) names.add(n);
        return false;
      case "variable":
        for (const n of a.fields) names.add(n);
        return a.fields.length === 0 && whole.has(a.name);
      case "chain":
        arg(a.node, dotIsData);
        for (const n of a.fields) names.add(n);
        return false;
      case "dot":
        return dotIsData;
      case "pipe":
        return pipeline(a.pipe, dotIsData, false);
      default:
        return false;
    }
  };
  const command = (cmd: Command, dotIsData: boolean, piped: boolean): boolean => {
    const [head, ...rest] = cmd.args;
    // A function may print or walk whole whatever it is given (and returns nothing else of it).
    if (rest.map((a) => arg(a, dotIsData)).includes(true) || piped) all = true;
    return head !== undefined && arg(head, dotIsData);
  };
  const pipeline = (pipe: Pipe, dotIsData: boolean, ranged: boolean): boolean => {
    let isData = false;
    for (const cmd of pipe.cmds) isData = command(cmd, dotIsData, isData);
    // Range variables hold indexes and elements, never the value ranged over.
    if (isData && !ranged) for (const name of pipe.decl) whole.add(name);
    return isData;
  };
  const list = (nodes: readonly TNode[], dotIsData: boolean): void => {
    for (const node of nodes) {
      switch (node.kind) {
        case "action":
          if (pipeline(node.pipe, dotIsData, false) && node.pipe.decl.length === 0) all = true;
          break;
        case "if":
        case "with": {
          const isData = pipeline(node.pipe, dotIsData, false);
          list(node.list, node.kind === "with" ? isData : dotIsData);
          if (node.elseList) list(node.elseList, dotIsData);
          break;
        }
        case "range":
          if (pipeline(node.pipe, dotIsData, true)) all = true;
          list(node.list, false);
          if (node.elseList) list(node.elseList, dotIsData);
          break;
        default:
          break;
      }
    }
  };
  for (let before = -1; before !== whole.size; ) {
    before = whole.size;
    list(root, true);
  }
  return { names, all };
}
