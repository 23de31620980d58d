// Go's fmt for the template engine's values (see templatevalue.ts): Sprint, Sprintln and Sprintf
// with Go's verbs, flags, width, precision and argument indexes, %v of lists, maps and the data
// struct, and Go's in-band error annotations (%!d(string=x), %!(EXTRA …)). Output is built in an
// Out, which bounds every string a template produces.

import { canBackquote, formatFloat, isPrint, quote, runeCount, utf8 } from "./templatestrconv.ts";
import { ExecFailure, fromData, type GoStruct, kindOf, mapEntries, typeName } from "./templatevalue.ts";

/** Largest output (and largest intermediate string) a template may produce, in UTF-16 units. */
export const MAX_OUTPUT = 1 << 20;

/** Nesting of data values printed (guards against cyclic data). */
const MAX_PRINT_DEPTH = 100;

/** fmt's per-verb state: the flags, width and precision of one `%` directive. */
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

/** Builds formatted output, failing once it passes MAX_OUTPUT. */
export class Out {
  text = "";

  /**
   * Appends `s`.
   * @throws ExecFailure when the text would pass MAX_OUTPUT.
   */
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

  /** Pads with spaces even under the `0` flag: for text whose zeros are already placed or must not be. */
  #padSpaces(s: string): void {
    const zero = this.flags.zero;
    this.flags.zero = false;
    this.pad(s);
    this.flags.zero = zero;
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
    this.printTyped(arg);
    this.out.write(")");
  }

  /** Writes an operand as fmt's error annotations show it: `type=value`, or `<nil>`. */
  printTyped(arg: unknown): void {
    if (arg === undefined) this.out.write("<nil>");
    else {
      this.out.write(`${typeName(arg)}=`);
      this.printArg(arg, "v");
    }
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
        this.#padSpaces(s);
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
        this.#padSpaces("");
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
    this.#padSpaces(digits);
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
      this.#padSpaces(num);
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

/**
 * fmt.Sprint: spaces between operands when neither is a string.
 * @param derefRoot print the data struct as `{…}`, not `&{…}`, as text/template does where it
 * dereferences the pointer first (printing an action's value, html, js, urlquery).
 * @throws ExecFailure when the result passes MAX_OUTPUT or a value nests too deeply.
 * @example sprint([1n, 2n, "x"]) // "1 2x"
 */
export function sprint(args: unknown[], derefRoot = false): string {
  const p = new Printer(derefRoot);
  args.forEach((arg, i) => {
    if (i > 0 && typeof arg !== "string" && typeof args[i - 1] !== "string") p.out.write(" ");
    p.printArg(arg, "v");
  });
  return p.out.text;
}

/**
 * fmt.Sprintln: spaces always, then a newline.
 * @throws ExecFailure when the result passes MAX_OUTPUT or a value nests too deeply.
 */
export function sprintln(args: unknown[]): string {
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

/**
 * fmt.Sprintf with Go's verbs, flags, width, precision, `*` and `[n]` argument indexes.
 * @throws ExecFailure when the result passes MAX_OUTPUT or a value nests too deeply.
 * @example sprintf("%05.1f|%-4s|%x", [3.14159, "ab", 255n]) // "003.1|ab  |ff"
 */
export function sprintf(format: string, args: unknown[]): string {
  return new Sprintf(format, args).run();
}

/** One run of fmt.Sprintf: the scan position in the format and the argument state of Go's pp. */
class Sprintf {
  readonly #p = new Printer();
  readonly #format: string;
  readonly #args: unknown[];
  /** The position in the format. */
  #i = 0;
  #argNum = 0;
  #reordered = false;
  #goodArgNum = true;

  constructor(format: string, args: unknown[]) {
    this.#format = format;
    this.#args = args;
  }

  run(): string {
    const format = this.#format;
    while (this.#i < format.length) {
      this.#goodArgNum = true;
      const pct = format.indexOf("%", this.#i);
      if (pct < 0) {
        this.#p.out.write(format.slice(this.#i));
        break;
      }
      this.#p.out.write(format.slice(this.#i, pct));
      this.#i = pct + 1;
      if (!this.#directive()) break;
    }
    if (!this.#reordered && this.#argNum < this.#args.length) this.#extra();
    return this.#p.out.text;
  }

  /** Prints one `%` directive; false when the format ended before its verb. */
  #directive(): boolean {
    const f: FmtFlags = { ...NO_FLAGS };
    this.#p.flags = f;
    this.#flags(f);
    let afterIndex = this.#width(f, this.#argNumber());
    if (this.#i + 1 < this.#format.length && this.#format[this.#i] === ".")
      afterIndex = this.#precision(f, afterIndex);
    if (!afterIndex) this.#argNumber();
    if (this.#i >= this.#format.length) {
      this.#p.out.write("%!(NOVERB)");
      return false;
    }
    const verb = String.fromCodePoint(this.#format.codePointAt(this.#i) as number);
    this.#i += verb.length;
    this.#verb(f, verb);
    return true;
  }

  #flags(f: FmtFlags): void {
    for (; this.#i < this.#format.length; this.#i++) {
      const c = this.#format[this.#i];
      if (c === "#") f.sharp = true;
      else if (c === "0") f.zero = !f.minus;
      else if (c === "+") f.plus = true;
      else if (c === "-") {
        f.minus = true;
        f.zero = false;
      } else if (c === " ") f.space = true;
      else return;
    }
  }

  /** Reads a width (digits or `*`); returns whether an argument index still applies to the verb. */
  #width(f: FmtFlags, afterIndex: boolean): boolean {
    if (this.#format[this.#i] === "*") {
      this.#i++;
      const w = this.#intArg();
      if (w === undefined) this.#p.out.write("%!(BADWIDTH)");
      else {
        f.width = Math.abs(w);
        if (w < 0) {
          f.minus = true;
          f.zero = false;
        }
      }
      return false;
    }
    const n = parseNum(this.#format, this.#i);
    if (n.ok) f.width = n.num;
    this.#i = n.next;
    if (afterIndex && n.ok) this.#goodArgNum = false;
    return afterIndex;
  }

  /** Reads `.` and a precision (digits, `*` or `[n]*`); returns whether an argument index applies. */
  #precision(f: FmtFlags, afterIndex: boolean): boolean {
    this.#i++;
    if (afterIndex) this.#goodArgNum = false;
    const found = this.#argNumber();
    if (this.#format[this.#i] === "*") {
      this.#i++;
      const prec = this.#intArg();
      if (prec === undefined || prec < 0) this.#p.out.write("%!(BADPREC)");
      else f.prec = prec;
      return false;
    }
    const n = parseNum(this.#format, this.#i);
    f.prec = n.ok ? n.num : 0;
    this.#i = n.next;
    return found;
  }

  #verb(f: FmtFlags, verb: string): void {
    const out = this.#p.out;
    if (verb === "%") out.write("%");
    else if (!this.#goodArgNum) out.write(`%!${verb}(BADINDEX)`);
    else if (this.#argNum >= this.#args.length) out.write(`%!${verb}(MISSING)`);
    else {
      if (verb === "v") {
        f.sharpV = f.sharp;
        f.sharp = false;
        f.plusV = f.plus;
        f.plus = false;
      }
      this.#p.printArg(this.#args[this.#argNum++], verb);
    }
  }

  /** Reads an `[n]` argument index at the position; returns whether one was found. */
  #argNumber(): boolean {
    const format = this.#format;
    const i = this.#i;
    if (format[i] !== "[") return false;
    this.#reordered = true;
    const close = format.indexOf("]", i + 1);
    if (format.length - i < 3 || close < 0) {
      this.#goodArgNum = false;
      this.#i = i + 1;
      return false;
    }
    this.#i = close + 1;
    const n = parseNum(format, i + 1);
    if (!n.ok || n.next !== close) {
      this.#goodArgNum = false;
      return false;
    }
    if (n.num - 1 >= 0 && n.num - 1 < this.#args.length) this.#argNum = n.num - 1;
    else this.#goodArgNum = false;
    return true;
  }

  /** The next argument as a `*` width or precision: an int within ±10^6, else undefined. */
  #intArg(): number | undefined {
    if (this.#argNum >= this.#args.length) return undefined;
    const v = this.#args[this.#argNum++];
    if (typeof v !== "bigint" || v > 1_000_000n || v < -1_000_000n) return undefined;
    return Number(v);
  }

  /** Go's `%!(EXTRA type=value, …)` for arguments no verb used. */
  #extra(): void {
    const p = this.#p;
    p.flags = { ...NO_FLAGS };
    p.out.write("%!(EXTRA ");
    this.#args.slice(this.#argNum).forEach((arg, j) => {
      if (j > 0) p.out.write(", ");
      p.printTyped(arg);
    });
    p.out.write(")");
  }
}
