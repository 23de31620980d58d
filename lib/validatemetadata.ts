// Node metadata for `validate`: a sample node read from the YAML that `talosctl get platformmetadata
// -o yaml` and `talosctl get systeminformation -o yaml` print (one or several documents, even
// concatenated without `---`), or a bare spec told apart by its keys. Keys are Talos' yaml tags and
// scalars are read as Go's yaml.v3 hands them to string fields; unknown keys and resource types are
// warnings, and every problem is reported with its path and line (MetadataError). Pure: the text
// comes from the caller (lib/validatecommand.ts reads the file or stdin; lib/validatereport.ts reports).

import { isAlias, isMap, isScalar, isSeq, LineCounter, parseAllDocuments, type YAMLMap } from "yaml";
import { byLine, formatIssue, formatPath } from "./config.ts";
import type { ConfigIssue } from "./configissue.ts";
import { ConfigLimitError, checkMetadataBounds } from "./configlimits.ts";
import { dict } from "./dict.ts";
import { SELECTOR_KEYS } from "./selector.ts";
import { unknownKeyMessage } from "./suggest.ts";
import { RESOURCES } from "./taloswire.ts";
import type { PlatformMetadata, SystemInformation } from "./types.ts";

/** A sample node, as read from talosctl's output. */
export interface SampleNode {
  /** talosctl's `node:` field (the address it asked); absent for bare specs. */
  node?: string;
  platformMetadata: PlatformMetadata;
  /** Absent when the input has none (the controller then renders SystemInformation fields as ""). */
  systemInformation?: SystemInformation;
}

/** The metadata file cannot be used; `issues` lists every problem, `warnings` what else was found. */
export class MetadataError extends Error {
  readonly code = "metadata";
  constructor(
    readonly issues: readonly ConfigIssue[],
    readonly warnings: readonly ConfigIssue[] = [],
  ) {
    const n = issues.length;
    super(
      `Cannot read node metadata: ${n} problem${n === 1 ? "" : "s"}:\n${issues.map((i) => `  ${formatIssue(i)}`).join("\n")}`,
    );
    this.name = "MetadataError";
  }
}

type Kind = "platformMetadata" | "systemInformation";

/** PlatformMetadata YAML keys, in the order the preview prints them: Talos spells them as this project's field names. */
export const PLATFORM_KEYS = [
  ...SELECTOR_KEYS,
  "tags",
] as const satisfies readonly (keyof PlatformMetadata)[];

/** SystemInformation YAML keys (Talos' yaml tags) → fields; `biosVersion` (Talos 1.14+) is not used by rules. */
const SYSTEM_KEYS: ReadonlyMap<string, keyof SystemInformation | undefined> = new Map([
  ["manufacturer", "manufacturer"],
  ["productName", "productName"],
  ["version", "version"],
  ["serialnumber", "serialNumber"],
  ["uuid", "uuid"],
  ["wakeUpType", "wakeUpType"],
  ["skuNumber", "skuNumber"],
  ["biosVersion", undefined],
]);

const TYPES: Readonly<Record<string, Kind>> = {
  [RESOURCES.platformmetadata.type]: "platformMetadata",
  [RESOURCES.systeminformation.type]: "systemInformation",
};

/** Keys of a talosctl resource document (`event` appears with `--watch`). */
const RESOURCE_KEYS = ["node", "event", "metadata", "spec"];
/** Keys of COSI resource metadata as talosctl prints it. */
const METADATA_KEYS = [
  "namespace",
  "type",
  "id",
  "version",
  "owner",
  "phase",
  "created",
  "updated",
  "labels",
  "annotations",
  "finalizers",
];

// YAML 1.2 core booleans: talosctl prints `true`; hand-written files may capitalize.
const TRUE = new Set(["true", "True", "TRUE"]);
const FALSE = new Set(["false", "False", "FALSE"]);

function emptyPlatformMetadata(): PlatformMetadata {
  return {
    platform: "",
    hostname: "",
    region: "",
    zone: "",
    instanceType: "",
    instanceId: "",
    providerId: "",
    spot: false,
    internalDNS: "",
    externalDNS: "",
    tags: dict<string>(),
  };
}

function emptySystemInformation(): SystemInformation {
  return {
    manufacturer: "",
    productName: "",
    version: "",
    serialNumber: "",
    uuid: "",
    wakeUpType: "",
    skuNumber: "",
  };
}

/** One document's findings, before the documents are combined. */
interface DocResult {
  kind: Kind;
  node?: string;
  line?: number;
  platformMetadata?: PlatformMetadata;
  systemInformation?: SystemInformation;
}

interface Reader {
  lineOf(node: unknown): number | undefined;
  error(path: readonly (string | number)[], node: unknown, message: string): void;
  warn(path: readonly (string | number)[], node: unknown, message: string): void;
}

/**
 * Splits text where a concatenation of talosctl outputs starts a new resource without `---`: a
 * top-level `node:` line when the current document already has one.
 */
function splitConcatenated(text: string): { text: string; firstLine: number }[] {
  const lines = text.split("\n");
  const chunks: { text: string; firstLine: number }[] = [];
  let start = 0;
  let seenNode = false;
  lines.forEach((line, i) => {
    if (/^---(\s|$)/.test(line)) seenNode = false;
    else if (/^node:(\s|$)/.test(line)) {
      if (seenNode) {
        chunks.push({ text: lines.slice(start, i).join("\n"), firstLine: start + 1 });
        start = i;
      }
      seenNode = true;
    }
  });
  chunks.push({ text: lines.slice(start).join("\n"), firstLine: start + 1 });
  return chunks;
}

function describeNode(node: unknown): string {
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (isScalar(node) && node.value !== null) return JSON.stringify(String(node.source ?? node.value));
  return "nothing";
}

/** A scalar's text as Go's yaml.v3 gives it to a string field; undefined (with an error) otherwise. */
function scalarText(node: unknown, path: (string | number)[], r: Reader): string | undefined {
  if (node === null || node === undefined) return "";
  if (isScalar(node)) {
    if (node.value === null) return "";
    return String(node.source ?? node.value);
  }
  r.error(path, node, `expected a string, got ${describeNode(node)}`);
  return undefined;
}

function pairs(map: YAMLMap, path: (string | number)[], r: Reader): [string, unknown, unknown][] {
  const out: [string, unknown, unknown][] = [];
  for (const pair of map.items) {
    const key = isScalar(pair.key) ? String(pair.key.value) : undefined;
    if (key === undefined) r.error(path, pair.key, "mapping keys must be strings");
    else out.push([key, pair.key, pair.value]);
  }
  return out;
}

function unknownKey(key: string, known: readonly string[]): string {
  return unknownKeyMessage("key", key, known, "ignored");
}

function decodePlatformMetadata(map: YAMLMap, base: (string | number)[], r: Reader): PlatformMetadata {
  const out = emptyPlatformMetadata();
  for (const [key, keyNode, value] of pairs(map, base, r)) {
    const path = [...base, key];
    if (!(PLATFORM_KEYS as readonly string[]).includes(key)) {
      r.warn(path, keyNode, unknownKey(key, PLATFORM_KEYS));
      continue;
    }
    const field = key as (typeof PLATFORM_KEYS)[number];
    if (field === "tags") {
      if (value === null || (isScalar(value) && value.value === null)) continue;
      if (!isMap(value)) {
        r.error(path, value, `expected a mapping, got ${describeNode(value)}`);
        continue;
      }
      for (const [tag, , tagValue] of pairs(value, path, r)) {
        const text = scalarText(tagValue, [...path, tag], r);
        if (text !== undefined) out.tags[tag] = text;
      }
    } else if (field === "spot") {
      const text = scalarText(value, path, r);
      if (text === undefined) continue;
      if (TRUE.has(text)) out.spot = true;
      else if (!FALSE.has(text) && text !== "") {
        r.error(path, value, `expected a boolean (true or false), got ${JSON.stringify(text)}`);
      }
    } else {
      const text = scalarText(value, path, r);
      if (text !== undefined) out[field] = text;
    }
  }
  return out;
}

function decodeSystemInformation(map: YAMLMap, base: (string | number)[], r: Reader): SystemInformation {
  const out = emptySystemInformation();
  const known = [...SYSTEM_KEYS.keys()];
  for (const [key, keyNode, value] of pairs(map, base, r)) {
    const path = [...base, key];
    if (!SYSTEM_KEYS.has(key)) {
      r.warn(path, keyNode, unknownKey(key, known));
      continue;
    }
    const text = scalarText(value, path, r);
    const field = SYSTEM_KEYS.get(key);
    if (text !== undefined && field !== undefined) out[field] = text;
  }
  return out;
}

/** Which spec a bare document (or a resource without `metadata.type`) is, judged by its keys. */
function kindByKeys(map: YAMLMap): Kind | "mixed" | undefined {
  let pm = false;
  let si = false;
  for (const pair of map.items) {
    const key = isScalar(pair.key) ? String(pair.key.value) : "";
    if ((PLATFORM_KEYS as readonly string[]).includes(key)) pm = true;
    else if (SYSTEM_KEYS.has(key)) si = true;
  }
  if (pm && si) return "mixed";
  return pm ? "platformMetadata" : si ? "systemInformation" : undefined;
}

function decodeSpec(
  kind: Kind,
  map: YAMLMap,
  base: (string | number)[],
  r: Reader,
): Pick<DocResult, "platformMetadata" | "systemInformation"> {
  return kind === "platformMetadata"
    ? { platformMetadata: decodePlatformMetadata(map, base, r) }
    : { systemInformation: decodeSystemInformation(map, base, r) };
}

function decodeDocument(contents: unknown, r: Reader): DocResult | undefined {
  // An empty document (a trailing `---`) holds nothing or a null scalar.
  if (contents === null || contents === undefined || (isScalar(contents) && contents.value === null)) {
    return undefined;
  }
  if (!isMap(contents)) {
    r.error([], contents, `expected a talosctl resource or a spec mapping, got ${describeNode(contents)}`);
    return undefined;
  }
  const top = new Map(pairs(contents, [], r).map(([k, keyNode, value]) => [k, { keyNode, value }]));
  return !top.has("spec") && !top.has("metadata")
    ? decodeBareSpec(contents, r)
    : decodeResource(contents, top, r);
}

/** A document that is a spec alone, its kind told by its keys. */
function decodeBareSpec(contents: YAMLMap, r: Reader): DocResult | undefined {
  const line = r.lineOf(contents);
  const kind = kindByKeys(contents);
  if (kind === undefined) {
    r.error([], contents, "neither a talosctl resource nor a PlatformMetadata or SystemInformation spec");
    return undefined;
  }
  if (kind === "mixed") {
    r.error(
      [],
      contents,
      "a bare spec holds keys of both PlatformMetadata and SystemInformation: put them in two documents",
    );
    return undefined;
  }
  return { kind, ...(line === undefined ? {} : { line }), ...decodeSpec(kind, contents, [], r) };
}

/** A talosctl resource: `node`, `metadata` (its `type` says the kind) and `spec`. */
function decodeResource(
  contents: YAMLMap,
  top: Map<string, { keyNode: unknown; value: unknown }>,
  r: Reader,
): DocResult | undefined {
  for (const [key, { keyNode }] of top) {
    if (!RESOURCE_KEYS.includes(key)) r.warn([key], keyNode, unknownKey(key, RESOURCE_KEYS));
  }
  const node = scalarText(top.get("node")?.value, ["node"], r);
  const type = metadataType(top.get("metadata")?.value, r);
  const spec = top.get("spec")?.value;
  if (!isMap(spec)) {
    r.error(["spec"], spec ?? contents, `expected a mapping, got ${describeNode(spec)}`);
    return undefined;
  }
  const kind = resourceKind(type, spec, r);
  if (kind === undefined) return undefined;
  const line = r.lineOf(contents);
  return {
    kind,
    ...(node === undefined || node === "" ? {} : { node }),
    ...(line === undefined ? {} : { line }),
    ...decodeSpec(kind, spec, ["spec"], r),
  };
}

/** A resource's `metadata.type` and the node holding it; other metadata keys are checked by name. */
function metadataType(meta: unknown, r: Reader): { type: string | undefined; node: unknown } {
  const out: { type: string | undefined; node: unknown } = { type: undefined, node: undefined };
  if (isMap(meta)) {
    for (const [key, keyNode, value] of pairs(meta, ["metadata"], r)) {
      if (key === "type") {
        out.type = scalarText(value, ["metadata", "type"], r);
        out.node = value;
      } else if (!METADATA_KEYS.includes(key))
        r.warn(["metadata", key], keyNode, unknownKey(key, METADATA_KEYS));
    }
  } else if (meta !== undefined && meta !== null) {
    r.error(["metadata"], meta, `expected a mapping, got ${describeNode(meta)}`);
  }
  return out;
}

/**
 * The kind of a resource: by its `metadata.type`, or by its spec's keys without one. An unknown type
 * is a warning and the document is skipped; a spec that does not say is an error.
 */
function resourceKind(
  type: { type: string | undefined; node: unknown },
  spec: YAMLMap,
  r: Reader,
): Kind | undefined {
  if (type.type === undefined || type.type === "") {
    const byKeys = kindByKeys(spec);
    const kind = byKeys === "mixed" ? undefined : byKeys;
    if (kind === undefined)
      r.error(
        ["spec"],
        spec,
        "cannot tell the resource type: no metadata.type, and the spec keys do not say",
      );
    return kind;
  }
  const kind = Object.hasOwn(TYPES, type.type) ? TYPES[type.type] : undefined;
  if (kind === undefined) {
    const known = Object.keys(TYPES).join(" or ");
    r.warn(
      ["metadata", "type"],
      type.node,
      `document of type ${JSON.stringify(type.type)} ignored: validate reads ${known}`,
    );
  }
  return kind;
}

/**
 * Reads a sample node from talosctl's YAML: `talosctl get platformmetadata -o yaml` and
 * `talosctl get systeminformation -o yaml` output (separated by `---` or simply concatenated), or
 * bare specs told apart by their keys. The PlatformMetadata is required; SystemInformation is
 * optional. Unknown keys and resource types are warnings.
 * @param text the file's content.
 * @returns the node and the warnings.
 * @throws {MetadataError} listing every problem, with paths and lines.
 * @example parseMetadata("platform: metal\nhostname: web-1\n").node.platformMetadata.hostname // "web-1"
 */
export function parseMetadata(text: string): { node: SampleNode; warnings: ConfigIssue[] } {
  try {
    checkMetadataBounds(text);
  } catch (err) {
    if (err instanceof ConfigLimitError) throw new MetadataError([err.issue], []);
    throw err;
  }
  const errors: ConfigIssue[] = [];
  const warnings: ConfigIssue[] = [];
  const docs: DocResult[] = [];
  for (const chunk of splitConcatenated(text)) {
    const lines = new LineCounter();
    const offset = chunk.firstLine - 1;
    const lineAt = (pos: number) => lines.linePos(pos).line + offset;
    const r: Reader = {
      lineOf: (node) => {
        const range = (node as { range?: [number, number, number] } | null)?.range;
        return range ? lineAt(range[0]) : undefined;
      },
      error: (path, node, message) => errors.push(issue(path, r.lineOf(node), message)),
      warn: (path, node, message) => warnings.push(issue(path, r.lineOf(node), message)),
    };
    for (const doc of parseAllDocuments(chunk.text, { lineCounter: lines, prettyErrors: false })) {
      for (const e of doc.errors) errors.push({ path: "", line: lineAt(e.pos[0]), message: e.message });
      if (doc.errors.length > 0) continue;
      if (hasAlias(doc.contents)) {
        r.error([], doc.contents, "YAML aliases are not supported in node metadata");
        continue;
      }
      const found = decodeDocument(doc.contents, r);
      if (found) docs.push(found);
    }
  }

  const platform = docs.filter((d) => d.kind === "platformMetadata");
  const system = docs.filter((d) => d.kind === "systemInformation");
  for (const [list, what] of [
    [platform, "PlatformMetadata"],
    [system, "SystemInformation"],
  ] as const) {
    if (list.length > 1) {
      const nodes = list.map((d) => d.node ?? "?").join(", ");
      errors.push(
        issue(
          [],
          list[1]?.line,
          `${list.length} ${what} documents (nodes ${nodes}): give one node's metadata`,
        ),
      );
    }
  }
  const pm = platform[0];
  const si = system[0];
  if (pm === undefined && errors.length === 0) {
    errors.push({
      path: "",
      message: "no PlatformMetadata found: add `talosctl get platformmetadata -o yaml` output",
    });
  }
  if (pm?.node !== undefined && si?.node !== undefined && pm.node !== si.node) {
    errors.push(
      issue([], si.line, `SystemInformation is from node ${si.node}, PlatformMetadata from node ${pm.node}`),
    );
  }
  if (errors.length > 0 || pm?.platformMetadata === undefined) {
    throw new MetadataError(byLine(errors), byLine(warnings));
  }
  const node: SampleNode = { platformMetadata: pm.platformMetadata };
  const from = pm.node ?? si?.node;
  if (from !== undefined) node.node = from;
  if (si?.systemInformation !== undefined) node.systemInformation = si.systemInformation;
  return { node, warnings: byLine(warnings) };
}

function issue(path: readonly (string | number)[], line: number | undefined, message: string): ConfigIssue {
  return line === undefined ? { path: formatPath(path), message } : { path: formatPath(path), line, message };
}

function hasAlias(node: unknown): boolean {
  if (isAlias(node)) return true;
  if (isMap(node)) return node.items.some((p) => hasAlias(p.key) || hasAlias(p.value));
  if (isSeq(node)) return node.items.some(hasAlias);
  return false;
}
