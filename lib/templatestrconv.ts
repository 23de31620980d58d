// Go's strconv and unicode/utf8, as far as the template engine needs them: Go strings are UTF-8
// bytes where JavaScript's are UTF-16, so byte-level conversions live here; IsPrint and quoting for
// printed values and lexer errors; unquoting of string and rune literals and parsing of number
// literals into ideal constants (the parser's constants); FormatFloat with Go's exact rounding.

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/**
 * The UTF-8 bytes of a string, as Go stores it.
 * @example utf8("é").length // 2
 */
export function utf8(s: string): Uint8Array {
  return ENCODER.encode(s);
}

/** Decodes UTF-8 bytes; sequences that are not UTF-8 become U+FFFD, as Go shows them when printing. */
export function decodeUtf8(bytes: ArrayLike<number>): string {
  return DECODER.decode(new Uint8Array(bytes));
}

/** utf8.RuneCountInString for well-formed strings: the number of code points. */
export function runeCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff || i + 1 >= s.length) n++;
  }
  return n;
}

/** strconv.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
export function isPrint(cp: number): boolean {
  return cp === 0x20 || /^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u.test(String.fromCodePoint(cp));
}

/**
 * strconv.Quote (`q` is `"`), QuoteRune (`'`) and, with `asciiOnly`, QuoteToASCII.
 * @example quote("a\tb", '"', false) // "\"a\\tb\""
 */
export function quote(s: string, q: '"' | "'", asciiOnly: boolean): string {
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

/** strconv.CanBackquote: whether `s` can be written as a raw string literal. */
export function canBackquote(s: string): boolean {
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if (cp === 0xfeff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if ((cp < 0x20 && cp !== 0x09) || ch === "`" || cp === 0x7f) return false;
  }
  return true;
}

/** A numeric constant: Go's ideal constants can be both int and float (1.0, 1e3, 'a'). */
export interface NumberConst {
  int: bigint | undefined;
  float: number | undefined;
  /** Written as a float (has `.`, `e` or `p`), so it is a float64 where no type is asked for. */
  preferFloat: boolean;
}

/** Decodes the escapes of a Go interpreted string or rune literal body into UTF-8 bytes; undefined if invalid. */
function decodeEscapes(body: string, delimiter: string): number[] | undefined {
  const bytes: number[] = [];
  const pushRune = (cp: number) => {
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    bytes.push(...utf8(String.fromCodePoint(cp)));
    return true;
  };
  const simple: Record<string, number> = { a: 7, b: 8, f: 12, n: 10, r: 13, t: 9, v: 11, "\\": 92 };
  for (let i = 0; i < body.length; ) {
    const cp = body.codePointAt(i) as number;
    if (cp !== 0x5c) {
      bytes.push(...utf8(String.fromCodePoint(cp)));
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const c = body[i + 1] ?? "";
    i += 2;
    if (Object.hasOwn(simple, c)) bytes.push(simple[c] as number);
    else if (c === delimiter) bytes.push(delimiter.charCodeAt(0));
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

/**
 * Go's strconv.Unquote for a double-quoted literal. Bytes that are not UTF-8 become U+FFFD.
 * @returns the string, or undefined if Go would reject the literal.
 * @example unquote('"a\\x41"') // "aA"
 */
export function unquote(literal: string): string | undefined {
  const bytes = decodeEscapes(literal.slice(1, -1), '"');
  return bytes === undefined ? undefined : decodeUtf8(bytes);
}

/** The code point of a Go rune literal such as `'a'`, `'\n'` or `'\x41'`; undefined if Go would reject it. */
export function unquoteChar(literal: string): number | undefined {
  const body = literal.slice(1, -1);
  if (body.startsWith("\\")) {
    if (/^\\(x[0-9A-Fa-f]{2}|[0-7]{3})$/.test(body)) {
      return Number.parseInt(body.slice(body[1] === "x" ? 2 : 1), body[1] === "x" ? 16 : 8);
    }
    const bytes = decodeEscapes(body, "'");
    const text = bytes === undefined ? "" : decodeUtf8(bytes);
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

/**
 * Parses a Go number literal into an ideal constant; undefined if Go would reject it.
 * @example parseNumber("1_000") // { int: 1000n, float: 1000, preferFloat: false }
 */
export function parseNumber(text: string): NumberConst | undefined {
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

/** A decimal: digits (no leading or trailing zeros) and the decimal point's position. */
interface Decimal {
  d: string;
  dp: number;
}

/** The IEEE 754 bit pattern of a double. */
function float64Bits(x: number): bigint {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  return view.getBigUint64(0);
}

/** The exact decimal expansion of a positive finite double. */
function exactDecimal(x: number): Decimal {
  const bits = float64Bits(x);
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
  const bits = float64Bits(x);
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

/**
 * strconv.FormatFloat(x, verb, prec, 64) for verbs b, e, E, f, F, g, G, x, X; prec -1 is the shortest form.
 * @example formatFloat(0.1, "e", 3) // "1.000e-01"
 */
export function formatFloat(x: number, verb: string, prec: number): string {
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
