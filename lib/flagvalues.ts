// How pflag flag values are spelled: Go's `strconv.ParseBool`, `time.ParseDuration` and
// `strconv.ParseInt`/`ParseUint` (base prefixes, `_` separators), Kubernetes resource quantities and
// the `encoding/csv` records of string-slice flags. Pure: each parser returns undefined for a value Go
// would reject, so the caller words the error.

const GO_BOOLS: Readonly<Record<string, boolean>> = {
  "1": true,
  t: true,
  T: true,
  TRUE: true,
  true: true,
  True: true,
  "0": false,
  f: false,
  F: false,
  FALSE: false,
  false: false,
  False: false,
};

/**
 * Go `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True` and their false counterparts.
 * @returns the value, or undefined when `s` is not one of its spellings
 * @example parseGoBool("T") // true
 */
export function parseGoBool(s: string): boolean | undefined {
  return Object.hasOwn(GO_BOOLS, s) ? GO_BOOLS[s] : undefined;
}

// Milliseconds per unit, as Go's time.ParseDuration spells them (µ is U+00B5, μ is U+03BC). Summing
// milliseconds rather than nanoseconds keeps whole-millisecond values exact.
const DURATION_UNITS: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  "\u00b5s": 1e-3,
  "\u03bcs": 1e-3,
  ms: 1,
  s: 1e3,
  m: 60e3,
  h: 3600e3,
};
// Go durations are int64 nanoseconds.
const MAX_DURATION_MS = 2 ** 63 / 1e6;

/**
 * Parses a Go duration (`time.ParseDuration`): a sign, then one or more decimal numbers each with a
 * unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `15s`, `1m30s`, `1.5h`, `-100ms`; `0` alone is
 * allowed.
 * @returns milliseconds (fractional below 1 ms), or undefined when `s` is not a Go duration
 * @example parseGoDuration("1m30s") // 90000
 */
export function parseGoDuration(s: string): number | undefined {
  let rest = s;
  let sign = 1;
  if (rest.startsWith("-") || rest.startsWith("+")) {
    if (rest[0] === "-") sign = -1;
    rest = rest.slice(1);
  }
  if (rest === "0") return 0;
  if (rest === "") return undefined;
  let totalMs = 0;
  while (rest !== "") {
    const m = /^(\d*)(?:\.(\d*))?/.exec(rest);
    const whole = m?.[1] ?? "";
    const frac = m?.[2];
    if (whole === "" && (frac === undefined || frac === "")) return undefined;
    rest = rest.slice(m?.[0].length ?? 0);
    const unitEnd = rest.search(/[\d.]/);
    const unit = unitEnd === -1 ? rest : rest.slice(0, unitEnd);
    const perUnit = Object.hasOwn(DURATION_UNITS, unit) ? DURATION_UNITS[unit] : undefined;
    if (perUnit === undefined) return undefined;
    rest = rest.slice(unit.length);
    totalMs += Number(`${whole === "" ? "0" : whole}.${frac ?? ""}0`) * perUnit;
    if (totalMs > MAX_DURATION_MS) return undefined;
  }
  return sign * totalMs;
}

// Go's underscoreOK: with a base prefix or none, "_" may only sit between digits or after the prefix.
function underscoresOk(s: string): boolean {
  let saw = "^";
  let i = 0;
  const hex = /^0[xX]/.test(s);
  if (/^0[xXbBoO]/.test(s)) {
    i = 2;
    saw = "0";
  }
  for (; i < s.length; i++) {
    const c = s.charAt(i);
    if (/\d/.test(c) || (hex && /[0-9a-fA-F]/.test(c))) saw = "0";
    else if (c === "_") {
      if (saw !== "0") return false;
      saw = "_";
    } else {
      if (saw === "_") return false;
      saw = "!";
    }
  }
  return saw !== "_";
}

/**
 * Parses an integer as Go's `strconv.ParseInt(s, 0, bits)` / `ParseUint` do for pflag int flags:
 * optional sign (signed only), `0x`/`0b`/`0o`/leading-`0` prefixes, `_` digit separators.
 * @param bits the width of the Go type
 * @param unsigned `ParseUint`: no sign allowed, range from 0
 * @returns the value, or undefined when malformed or out of range
 * @example parseGoInt("0x1_0", 32, false) // 16
 */
export function parseGoInt(s: string, bits: 32 | 64, unsigned: boolean): number | undefined {
  let rest = s;
  let negative = false;
  if (!unsigned && (rest.startsWith("-") || rest.startsWith("+"))) {
    negative = rest[0] === "-";
    rest = rest.slice(1);
  }
  if (rest === "" || !underscoresOk(rest)) return undefined;
  let base = 10;
  let digits = rest;
  if (/^0[xX]/.test(rest)) [base, digits] = [16, rest.slice(2)];
  else if (/^0[bB]/.test(rest)) [base, digits] = [2, rest.slice(2)];
  else if (/^0[oO]/.test(rest)) [base, digits] = [8, rest.slice(2)];
  else if (rest.length > 1 && rest.startsWith("0")) [base, digits] = [8, rest.slice(1)];
  digits = digits.replaceAll("_", "");
  const alphabet = "0123456789abcdef".slice(0, base);
  if (digits === "" || ![...digits.toLowerCase()].every((c) => alphabet.includes(c))) return undefined;
  let value = 0n;
  for (const c of digits.toLowerCase()) value = value * BigInt(base) + BigInt(alphabet.indexOf(c));
  if (negative) value = -value;
  const limit = unsigned ? 1n << BigInt(bits) : 1n << BigInt(bits - 1);
  const min = unsigned ? 0n : -limit;
  if (value < min || value >= limit) return undefined;
  return Number(value);
}

/**
 * Parses a Kubernetes resource quantity (`resource.ParseQuantity`): a decimal number with an optional
 * binary suffix (`Ki`…`Ei`), decimal SI suffix (`n`, `u`, `m`, `k`, `M`…`E`) or exponent (`e3`).
 * @returns the value, or undefined when malformed
 * @example parseQuantity("2Mi") // 2097152
 */
export function parseQuantity(s: string): number | undefined {
  const m =
    /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?\d+)|(n|u|m|k|M|G|T|P|E))?$/.exec(s);
  if (m === null) return undefined;
  const n = Number(m[1]);
  if (m[2] !== undefined) return n * 1024 ** ("KMGTPE".indexOf(m[2].charAt(0)) + 1);
  if (m[3] !== undefined) return n * 10 ** Number(m[3]);
  if (m[4] !== undefined) {
    const exp: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
    return n * 10 ** (exp[m[4]] ?? 0);
  }
  return n;
}

/**
 * Splits one comma-separated record the way pflag's string-slice flags do (Go `encoding/csv`): `""`
 * is an empty list, double quotes protect commas, `""` inside quotes is a quote.
 * @returns the fields, or undefined when quoting is malformed or the value spans lines
 * @example parseCsvRecord('a,"b,c"') // ["a", "b,c"]
 */
export function parseCsvRecord(s: string): string[] | undefined {
  if (s === "") return [];
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    let field = "";
    if (s[i] === '"') {
      i++;
      for (;;) {
        const q = s.indexOf('"', i);
        if (q === -1) return undefined;
        field += s.slice(i, q);
        i = q + 1;
        if (s[i] !== '"') break;
        field += '"';
        i++;
      }
      if (i < s.length && s[i] !== ",") return undefined;
    } else {
      const comma = s.indexOf(",", i);
      field = comma === -1 ? s.slice(i) : s.slice(i, comma);
      if (field.includes('"') || /[\r\n]/.test(field)) return undefined;
      i += field.length;
    }
    fields.push(field);
    if (i >= s.length) return fields;
    i++; // the comma
  }
}
