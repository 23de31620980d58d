// The template functions: Go's builtins (and, or, not, len, index, slice, print, printf, println,
// html, js, urlquery, call, eq, ne, lt, le, gt, ge) and the reference's library
// (pkg/transformer/functions.go), with the reference's argument order (`trimSuffix suffix s`,
// `replace old new s`, `default def value`). Functions fail with FuncError; the executor checks
// argument counts and types against each Func's params, and evaluates and/or lazily.

import { replaceAll } from "./re2.ts";
import { MAX_OUTPUT, sprint, sprintf, sprintln } from "./templatefmt.ts";
import { decodeUtf8, isPrint, runeCount, utf8 } from "./templatestrconv.ts";
import {
  compareStrings,
  elemIsString,
  FuncError,
  fromData,
  isZero,
  kindOf,
  mapGet,
  mapSize,
  truth,
  typeName,
} from "./templatevalue.ts";

/** How an argument is checked: Go's static parameter type. "value" and "any" take anything. */
export type Param = "string" | "int" | "bool" | "any" | "value";

/** What a function may ask of the execution calling it. */
export interface Context {
  /** The compiled regex for a pattern (compiled at parse time when it was a constant). */
  regex(pattern: string): RegExp;
}

/** A template function: its parameters as Go declares them, and its body. */
export interface Func {
  params: readonly Param[];
  variadic?: Param;
  /** @throws FuncError or RegexError, reported as "error calling <name>: …". */
  call(args: unknown[], ctx: Context): unknown;
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
        if (j === 0) return decodeUtf8(out);
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
  return decodeUtf8(out);
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
  if (bytes !== undefined) return decodeUtf8(bytes.subarray(i, j));
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

/** Every function a template may call, by name. */
export const FUNCTIONS: Readonly<Record<string, Func>> = {
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

/** Functions whose first argument is a pattern: the parser compiles constant patterns at load. */
export const REGEX_FUNCTIONS: ReadonlySet<string> = new Set([
  "regexFind",
  "regexFindString",
  "regexReplaceAll",
]);
