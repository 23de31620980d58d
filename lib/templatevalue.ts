// The template engine's model of Go values. Go's kinds map onto JavaScript: string, boolean, bigint
// (int), number (float64), undefined (nil / no value), arrays (slices), Maps and plain objects
// (maps), GoStruct (the data). Owns reading data into that model, kinds and Go type names, map
// order, truth and zero values, and the two failures execution reports (ExecFailure, FuncError).

/** The root data object: field access on it fails for unknown names, as on a Go struct. */
export class GoStruct {
  constructor(readonly fields: Record<string, unknown>) {}
}

/** Go's kind of a value, as far as templates tell them apart. */
export type Kind = "nil" | "string" | "bool" | "int" | "float" | "list" | "map" | "struct";

/** A failure during execution; the executor adds the position. */
export class ExecFailure extends Error {}

/** An error returned by a function; reported as Go does, "error calling f: …". */
export class FuncError extends Error {}

/** Whether `v` is a plain object (its prototype Object.prototype or null), read as a Go map or struct. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Normalises a value read from the data: null is nil, integral numbers are Go ints. */
export function fromData(v: unknown): unknown {
  if (v === null) return undefined;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  return v;
}

/**
 * The Go kind of a value in this model.
 * @throws ExecFailure for JavaScript values that have no Go counterpart (functions, class instances).
 */
export function kindOf(v: unknown): Kind {
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

/**
 * A map's entries in Go's order (sorted keys). Keys are strings, as in every map the CCM passes.
 * @throws ExecFailure for a key that is not a string.
 */
export function mapEntries(m: unknown): [string, unknown][] {
  const entries = m instanceof Map ? [...m.entries()] : Object.entries(m as Record<string, unknown>);
  return entries
    .map(([k, v]): [string, unknown] => {
      if (typeof k !== "string") throw new ExecFailure(`unsupported map key of JavaScript type ${typeof k}`);
      return [k, fromData(v)];
    })
    .sort((a, b) => compareStrings(a[0], b[0]));
}

/** Looks a key up in a Map or plain object; `found` tells a missing key from a nil value. */
export function mapGet(m: unknown, key: string): { found: boolean; value: unknown } {
  if (m instanceof Map) return { found: m.has(key), value: fromData(m.get(key)) };
  const o = m as Record<string, unknown>;
  return Object.hasOwn(o, key)
    ? { found: true, value: fromData(o[key]) }
    : { found: false, value: undefined };
}

/** The number of entries of a Map or plain object. */
export function mapSize(m: unknown): number {
  return m instanceof Map ? m.size : Object.keys(m as object).length;
}

/** Element type of a map or list: string when every element is one (the shape of Tags). */
export function elemIsString(v: unknown): boolean {
  const values = Array.isArray(v) ? v : v instanceof Map ? [...v.values()] : Object.values(v as object);
  return values.every((x) => typeof x === "string");
}

/** Go's name for the value's type, as %T and error messages show it. */
export function typeName(v: unknown): string {
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
export function compareStrings(a: string, b: string): number {
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
export function truth(v: unknown): boolean {
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
 * reflect.Value.IsZero, which the reference's `empty` and `default` use: slices and the data (a
 * pointer in the reference) are never zero. A map is zero when it has no entries: the one map the
 * data holds, `.Tags`, is nil in the reference for a node without tags (Talos's protobuf decoding
 * leaves an absent map nil), so `{{ empty .Tags }}` is true there, and so here.
 */
export function isZero(v: unknown): boolean {
  switch (kindOf(v)) {
    case "map":
      return mapSize(v) === 0;
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
