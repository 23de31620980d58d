// pflag's command-line syntax: `--name=value`, `--name value`, booleans without a value, shorthands
// and their clusters, `--` to end flags, underscores as hyphens; each value converted by its flag's
// kind (Go syntax, see lib/flagvalues.ts), the closest known flag suggested for a typo, and typed
// reads of the result. Knows flags only by name, kind and shorthand; the flag table is
// lib/flagtable.ts. Pure: no I/O.

import { tryParseIP } from "./cidr.ts";
import { dict } from "./dict.ts";
import { parseCsvRecord, parseGoBool, parseGoDuration, parseGoInt, parseQuantity } from "./flagvalues.ts";
import { editDistance } from "./suggest.ts";

/**
 * A command line this program cannot run with. The process should print the message and exit with
 * {@link FlagError.exitCode} (2, the usage-error convention).
 */
export class FlagError extends Error {
  override readonly name = "FlagError";
  readonly code = "EFLAG";
  readonly exitCode = 2;
}

/**
 * Rejects the command line.
 * @param detail what is wrong, e.g. `unknown flag: --kubeconfg`
 * @throws {FlagError} always, worded "Cannot parse the command line: <detail>"
 */
export function cannotParse(detail: string): never {
  throw new FlagError(`Cannot parse the command line: ${detail}`);
}

/** A flag's value type, as the upstream flag sets declare it. */
export type Kind =
  | "bool"
  | "string"
  | "int"
  | "int32"
  | "uint64"
  | "float32"
  | "duration"
  | "level"
  | "ip"
  | "stringSlice"
  | "int32Slice"
  | "mapStringBool"
  | "quantity"
  | "certKey"
  | "version";

/** What the parser knows of a flag. */
export interface PflagSpec {
  name: string;
  kind: Kind;
  /** The one-letter form, e.g. `h` for `-h`. */
  shorthand?: string;
}

// What a value of each kind looks like, for error messages.
const EXPECTED: Readonly<Record<Kind, string>> = {
  bool: "true or false",
  string: "a string",
  int: "an integer",
  int32: "a 32-bit integer",
  uint64: "a non-negative integer",
  float32: "a finite number",
  duration: "a Go duration such as 15s, 1m30s or 100ms",
  level: "a non-negative integer",
  ip: "an IP address",
  stringSlice: "comma-separated values (double-quote a value that contains a comma)",
  int32Slice: "comma-separated 32-bit integers",
  mapStringBool: "comma-separated key=true|false pairs",
  quantity: "a quantity such as 512, 1K or 2Mi",
  certKey: 'a "cert-file,key-file" pair, optionally followed by ":domain,..."',
  version: "true, false or raw",
};

/** A parsed flag value; the flag's {@link Kind} decides which. */
export type Value = boolean | string | number | string[] | Record<string, boolean>;

/** The result of {@link parseFlags}. */
export interface Parsed {
  /** Values by flag name; repeatable kinds (slices, maps, cert pairs) accumulate. */
  values: Map<string, Value>;
  /** Names in the order they were first set. */
  order: string[];
  /** Arguments that are not flags, in order. */
  positionals: string[];
}

/** Converts one occurrence of a flag; `previous` is what earlier occurrences gave (repeatable kinds add to it). */
function convert(spec: PflagSpec, raw: string, previous: Value | undefined): Value {
  const bad = (): never =>
    cannotParse(`invalid value ${JSON.stringify(raw)} for --${spec.name}: expected ${EXPECTED[spec.kind]}`);
  switch (spec.kind) {
    case "bool":
      return parseGoBool(raw) ?? bad();
    case "version":
      return raw === "raw" ? "raw" : (parseGoBool(raw) ?? raw);
    case "string":
      return raw;
    case "int":
      return parseGoInt(raw, 64, false) ?? bad();
    case "int32":
      return parseGoInt(raw, 32, false) ?? bad();
    case "uint64":
      return parseGoInt(raw, 64, true) ?? bad();
    case "level":
      // klog levels are decimal only: "010" is ten, not eight.
      return /^\d+$/.test(raw) && Number(raw) < 2 ** 32 ? Number(raw) : bad();
    case "float32": {
      if (!/^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/.test(raw)) return bad();
      const n = Number(raw);
      return Number.isFinite(Math.fround(n)) ? n : bad();
    }
    case "duration":
      return parseGoDuration(raw) ?? bad();
    case "quantity":
      return parseQuantity(raw) ?? bad();
    case "ip": {
      // pflag's net.ParseIP(strings.TrimSpace(s)): no leading zeros, no zones, no brackets; the
      // value keeps its spelling.
      const ip = raw.trim();
      return tryParseIP(ip) ? ip : bad();
    }
    case "stringSlice": {
      const items = parseCsvRecord(raw) ?? bad();
      return Array.isArray(previous) ? [...previous, ...items] : items;
    }
    case "int32Slice": {
      // pflag's int32Slice: the first use replaces the default, later uses append (kept as decimal text).
      const items = raw.split(",").map((item) => String(parseGoInt(item, 32, false) ?? bad()));
      return Array.isArray(previous) ? [...previous, ...items] : items;
    }
    case "certKey": {
      // Repeatable, one "cert,key[:names]" per use (component-base NamedCertKeyArray).
      if ((raw.split(":", 1)[0] ?? "").split(",").length !== 2) return bad();
      return Array.isArray(previous) ? [...previous, raw] : [raw];
    }
    case "mapStringBool":
      return addBoolPairs(raw, previous) ?? bad();
  }
}

/** `raw`'s `key=bool` pairs over the map earlier occurrences gave; undefined when a pair is malformed. */
function addBoolPairs(raw: string, previous: Value | undefined): Record<string, boolean> | undefined {
  const map =
    previous !== undefined && typeof previous === "object" && !Array.isArray(previous) ? previous : {};
  const out: Record<string, boolean> = Object.assign(dict<boolean>(), map);
  for (const pair of raw.split(",")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const b = eq === -1 ? undefined : parseGoBool(pair.slice(eq + 1).trim());
    if (b === undefined) return undefined;
    out[pair.slice(0, eq).trim()] = b;
  }
  return out;
}

/** The closest known flag name, if one is close enough to be a typo. */
function suggest(name: string, specs: readonly PflagSpec[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const s of specs) {
    const d = editDistance(name, s.name);
    if (d < bestDistance) [best, bestDistance] = [s.name, d];
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 5)) && bestDistance < name.length
    ? best
    : undefined;
}

// The value a flag of these kinds takes when given without one (pflag's NoOptDefVal).
const NO_OPTION_DEFAULT: Partial<Record<Kind, string>> = { bool: "true", version: "true" };

/** One parse in progress: the flags by name and shorthand, and the argument cursor. */
interface Scan {
  specs: readonly PflagSpec[];
  byName: ReadonlyMap<string, PflagSpec>;
  byShorthand: ReadonlyMap<string, PflagSpec>;
  /** Records one occurrence of a flag. */
  set(spec: PflagSpec, raw: string): void;
  /** The next argument (a separate flag value), or undefined at the end. */
  next(): string | undefined;
}

/**
 * Parses pflag syntax against `specs`: `--name=value`, `--name value`, `--name` for booleans, `-x`,
 * `-x=value`, `-xvalue`, `-x value`, clusters of boolean shorthands, `--` to end flags. Underscores in
 * long names count as hyphens (upstream's WordSepNormalizeFunc).
 * @throws {FlagError} on an unknown flag (naming the closest known one), a missing or malformed value
 * @example parseFlags(["--v=2", "x"], specs) // { values: Map { "v" => 2 }, order: ["v"], positionals: ["x"] }
 */
export function parseFlags(args: readonly string[], specs: readonly PflagSpec[]): Parsed {
  const parsed: Parsed = { values: new Map(), order: [], positionals: [] };
  let i = 0;
  const scan: Scan = {
    specs,
    byName: new Map(specs.map((s) => [s.name, s])),
    byShorthand: new Map(
      specs.flatMap((s) => (s.shorthand === undefined ? [] : [[s.shorthand, s] as const])),
    ),
    set: (spec, raw) => {
      if (!parsed.values.has(spec.name)) parsed.order.push(spec.name);
      parsed.values.set(spec.name, convert(spec, raw, parsed.values.get(spec.name)));
    },
    next: () => (i < args.length ? args[i++] : undefined),
  };
  for (let arg = scan.next(); arg !== undefined; arg = scan.next()) {
    if (arg === "--") {
      parsed.positionals.push(...args.slice(i));
      break;
    }
    if (arg.length < 2 || !arg.startsWith("-")) parsed.positionals.push(arg);
    else if (arg.startsWith("--")) parseLong(arg, scan);
    else parseShorthands(arg, scan);
  }
  return parsed;
}

/** One `--name[=value]` argument, taking the next argument as the value when it needs one. */
function parseLong(arg: string, scan: Scan): void {
  const body = arg.slice(2);
  if (body.startsWith("-") || body.startsWith("=")) cannotParse(`bad flag syntax: ${arg}`);
  const eq = body.indexOf("=");
  const name = (eq === -1 ? body : body.slice(0, eq)).replaceAll("_", "-");
  const spec = scan.byName.get(name);
  if (spec === undefined) {
    const hint = suggest(name, scan.specs);
    cannotParse(`unknown flag: --${name}${hint === undefined ? "" : ` (did you mean --${hint}?)`}`);
  }
  const noOpt = NO_OPTION_DEFAULT[spec.kind];
  if (eq !== -1) scan.set(spec, body.slice(eq + 1));
  else if (noOpt !== undefined) scan.set(spec, noOpt);
  else scan.set(spec, scan.next() ?? cannotParse(`flag needs an argument: --${name}`));
}

/** One `-x…` argument: a shorthand with its value, or a cluster of boolean shorthands. */
function parseShorthands(arg: string, scan: Scan): void {
  // Go's flag package allows "-kubeconfig"; pflag reads it as shorthands and fails, and so do we,
  // but with a pointer to the right spelling.
  const longName = (arg.slice(1).split("=", 1)[0] ?? "").replaceAll("_", "-");
  if (longName.length > 1 && scan.byName.has(longName)) {
    cannotParse(`flag ${arg} has a single dash (did you mean --${longName}?)`);
  }
  let cluster = arg.slice(1);
  while (cluster !== "") {
    const c = cluster.charAt(0);
    const spec = scan.byShorthand.get(c) ?? cannotParse(`unknown shorthand flag: '${c}' in ${arg}`);
    const noOpt = NO_OPTION_DEFAULT[spec.kind];
    if (cluster.length > 2 && cluster[1] === "=") {
      scan.set(spec, cluster.slice(2));
      cluster = "";
    } else if (noOpt !== undefined) {
      scan.set(spec, noOpt);
      cluster = cluster.slice(1);
    } else if (cluster.length > 1) {
      scan.set(spec, cluster.slice(1));
      cluster = "";
    } else {
      scan.set(spec, scan.next() ?? cannotParse(`flag needs an argument: '${c}' in ${arg}`));
      cluster = "";
    }
  }
}

/**
 * Whether the arguments ask for help (`--help`, `-h`, `--help=true` before any `--`), read without
 * parsing, so help wins even over a command line that does not parse.
 */
export function requestsHelp(args: readonly string[]): boolean {
  const end = args.indexOf("--");
  return (end === -1 ? args : args.slice(0, end)).some(
    (a) => a === "--help" || a === "-h" || a === "--help=true",
  );
}

// Typed reads of parsed values; the kind of each flag guarantees the runtime type.

/** A bool flag's value, or `fallback` when unset. */
export function bool(p: Parsed, name: string, fallback: boolean): boolean {
  const v = p.values.get(name);
  return typeof v === "boolean" ? v : fallback;
}

/** A numeric (int, float, duration in ms, level, quantity) flag's value, or `fallback` when unset. */
export function num(p: Parsed, name: string, fallback: number): number {
  const v = p.values.get(name);
  return typeof v === "number" ? v : fallback;
}

/** A string (or ip, or version) flag's value, or undefined when unset. */
export function str(p: Parsed, name: string): string | undefined {
  const v = p.values.get(name);
  return typeof v === "string" ? v : undefined;
}

/** A string-slice flag's value, or a copy of `fallback` when unset. */
export function list(p: Parsed, name: string, fallback: readonly string[]): string[] {
  const v = p.values.get(name);
  return Array.isArray(v) ? v : [...fallback];
}

/**
 * A string flag's value under `key`, or nothing when unset or empty (upstream treats "" as unset for
 * these), ready to spread into an options object.
 * @example ({ ...path(p, "kubeconfig", "kubeconfig") }) // {} or { kubeconfig: "/etc/kubeconfig" }
 */
export function path<K extends string>(p: Parsed, name: string, key: K): { [k in K]?: string } {
  const v = str(p, name);
  return (v === undefined || v === "" ? {} : { [key]: v }) as { [k in K]?: string };
}
