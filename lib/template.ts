// Go text/template for rule values in ccm-config.yaml: the public API (parseTemplate, Template,
// TemplateError) and the executor, which walks a tree parsed once at config load with Go's semantics
// and no HTML escaping (the Go reference ran html/template, which mangles `& ' " < > +`). Execution
// is bounded in steps, output size and nesting, so a hostile template or data value fails with a
// TemplateError instead of hanging or exhausting memory. Lexing and parsing: templatelex.ts,
// templateparse.ts; values: templatevalue.ts; printing: templatefmt.ts; functions: templatefuncs.ts.

import { compileRegex, RegexError } from "./re2.ts";
import { Out, sprint } from "./templatefmt.ts";
import { type Context, FUNCTIONS, type Func, type Param } from "./templatefuncs.ts";
import {
  type Arg,
  type Branch,
  type Command,
  type FieldUse,
  fieldUse,
  Parser,
  type Pipe,
  type Span,
  type TNode,
} from "./templateparse.ts";
import type { NumberConst } from "./templatestrconv.ts";
import {
  ExecFailure,
  FuncError,
  fromData,
  GoStruct,
  isPlainObject,
  kindOf,
  mapEntries,
  mapGet,
  truth,
  typeName,
} from "./templatevalue.ts";

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
  /**
   * Whether executing may read the data's top-level field `name` (found once, at parse time): false
   * only when it surely does not, so a caller may skip fetching what feeds that field.
   * @example parseTemplate("{{ .Zone }}").mayRead("UUID") // false; with `{{ printf "%v" . }}`: true
   */
  mayRead(name: string): boolean;
}

/** Evaluation steps (actions, commands, range iterations) per execution. */
const MAX_STEPS = 1_000_000;
/** Patterns computed at execution time that are kept compiled, per template. */
const DYNAMIC_REGEX_CACHE = 32;

/** No value piped in: the command is the first of its pipeline. */
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
          this.#out.write(value === undefined ? "<no value>" : sprint([value], true));
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
      default:
        this.#fail(`range can't iterate over ${sprint([value], true)}`);
    }
    const signal = !ran && node.elseList !== undefined ? this.#walkList(dot, node.elseList) : undefined;
    this.#vars.length = mark;
    return signal;
  }

  /** The innermost variable of that name. */
  #variable(name: string): { name: string; value: unknown } {
    for (let i = this.#vars.length - 1; i >= 0; i--) {
      const v = this.#vars[i] as { name: string; value: unknown };
      if (v.name === name) return v;
    }
    return this.#fail(`undefined variable: ${name}`);
  }

  #setVar(name: string, value: unknown): void {
    this.#variable(name).value = value;
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
    const value = this.#variable(node.name).value;
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
  readonly #reads: FieldUse;

  constructor(
    readonly source: string,
    readonly name: string,
    readonly root: readonly TNode[],
    readonly regexes: ReadonlyMap<string, RegExp>,
  ) {
    this.#reads = fieldUse(root);
  }

  execute(data: unknown): string {
    return new Exec(this).run(data);
  }

  mayRead(name: string): boolean {
    return this.#reads.all || this.#reads.names.has(name);
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
