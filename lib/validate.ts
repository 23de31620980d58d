// The `validate` subcommand: checks a cloud-config file and, given a sample node's Talos metadata,
// previews what the cloud-node controller would write on that node. The metadata is the YAML that
// `talosctl get platformmetadata -o yaml` and `talosctl get systeminformation -o yaml` print (one or
// several documents, even concatenated without `---`), or a bare spec. The preview runs the
// controller's own pure functions (instanceFacts → transform → desiredNode), so it cannot drift
// from what a real node gets.
//
// Output policy: errors and warnings go to stderr, one per line, as `<file>: error|warning: …`;
// stdout carries the human summary and preview, or with `-o json|yaml` only the preview object.
// Exit 1 when the config or the metadata cannot be read or is invalid; 0 otherwise, including when
// a rule value fails on the sample node (a warning: the controller skips that value and still
// initializes the node, so the file is usable). Exit 2 is for command-line errors (main.ts reports
// the flag parser's; here only stdin given for both files).

import {
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  parseAllDocuments,
  stringify as stringifyYaml,
  type YAMLMap,
} from "yaml";
import { tryParseIP } from "./cidr.ts";
import { byLine, type CompiledConfig, ConfigError, formatIssue, formatPath, parseConfig } from "./config.ts";
import { readConfigFile } from "./configfile.ts";
import type { ConfigIssue } from "./configissue.ts";
import { ConfigLimitError, checkMetadataBounds } from "./configlimits.ts";
import { decideNode, describeTransformErrors } from "./desirednode.ts";
import type { ValidateOptions } from "./flags.ts";
import { configureLogging, logger } from "./log.ts";
import { readManagedRecord } from "./managedrecord.ts";
import { type LeanNode, nodeIPs } from "./nodeview.ts";
import { matchedTermName, SELECTOR_KEYS, selectorFields } from "./selector.ts";
import { unknownKeyMessage } from "./suggest.ts";
import { RESOURCES } from "./taloswire.ts";
import type { TransformError } from "./transform.ts";
import type { Features, PlatformMetadata, SystemInformation, TaintEffect } from "./types.ts";
import { PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT } from "./wellknown.ts";

// ---------------------------------------------------------------------------------------------
// Metadata input.

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

/** PlatformMetadata YAML keys: Talos spells them as this project's field names. */
const PLATFORM_KEYS = [...SELECTOR_KEYS, "tags"] as const satisfies readonly (keyof PlatformMetadata)[];

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
    tags: {},
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
  const kind = TYPES[type.type];
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

// ---------------------------------------------------------------------------------------------
// Preview.

/** A taint as the preview prints it: `value` is "" when the taint has none. */
export interface PreviewTaint {
  key: string;
  value: string;
  effect: TaintEffect;
}

/** What the cloud-node controller writes on the node at initialization (`-o json` prints exactly this). */
export interface Preview {
  /** spec.providerID. */
  providerID: string;
  /** Every label the controller sets: the rules', the platform/topology ones; sorted by key. */
  labels: Record<string, string>;
  /** Every annotation the controller sets (including its reconcile bookkeeping); sorted by key. */
  annotations: Record<string, string>;
  taints: PreviewTaint[];
  /** The node's PlatformMetadata after the rules' overrides (Talos' YAML keys, tags sorted). */
  platformMetadata: PlatformMetadata;
  features: Features;
}

/** A {@link Preview} with what explains it. */
export interface PreviewResult {
  preview: Preview;
  /** The Node name assumed: the short hostname, or "node" when the metadata has none. */
  nodeName: string;
  /** The node IP assumed for the default providerID, or {@link NODE_IP_PLACEHOLDER}. */
  nodeIP: string;
  /** What the controller waits for before writing a providerID (then `preview.providerID` is ""). */
  providerIDWait?: string;
  /** Names of the rules whose nodeSelector matches, in order, each with its matching term's name when it has one. */
  matchedRules: string[];
  /** Values the rules could not apply on this node (the controller skips them, the rest applies). */
  errors: TransformError[];
}

/** Stands for the node IP in the default providerID when the metadata does not tell it. */
export const NODE_IP_PLACEHOLDER = "<node-ip>";

function sortedRecord(record: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Computes what the cloud-node controller would write on a freshly registered node with these facts:
 * the kubelet's Node (uninitialized taint, provided-node-ip annotation when the IP is known) run
 * through the controller's own decision (lib/desirednode.ts decideNode). The cluster name label appears only when
 * `global.clusterName` is set (the talosconfig's is unknown here). Addresses are not previewed: the
 * metadata carries no AddressStatus.
 * @param config the compiled config.
 * @param sample the node's metadata (see {@link parseMetadata}).
 */
export function previewNode(config: CompiledConfig, sample: SampleNode): PreviewResult {
  const hostname = sample.platformMetadata.hostname;
  // Talos registers the kubelet under the short hostname unless registerWithFQDN is set.
  const short = hostname.split(".")[0] ?? "";
  const nodeName = short === "" ? "node" : short;
  const nodeIP =
    sample.node !== undefined && tryParseIP(sample.node) !== undefined ? sample.node : NODE_IP_PLACEHOLDER;
  const node: LeanNode = {
    metadata: {
      name: nodeName,
      uid: "",
      resourceVersion: "",
      creationTimestamp: "",
      labels: {},
      annotations: nodeIP === NODE_IP_PLACEHOLDER ? {} : { [PROVIDED_NODE_IP_ANNOTATION]: nodeIP },
    },
    spec: { taints: [{ key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" }] },
    status: { addresses: [], ready: "Unknown" },
  };
  const decided = decideNode({
    node,
    ips: nodeIPs({ annotations: node.metadata.annotations, addresses: [] }, config.global.preferIPv6),
    facts: {
      platformMetadata: sample.platformMetadata,
      ...(sample.systemInformation ? { systemInformation: sample.systemInformation } : {}),
      addresses: [],
    },
    nodeIP,
    managed: readManagedRecord(node.metadata),
    config,
    clusterName: "",
  });
  // While the providerID waits (`hold`), the preview shows what comes with the instance ID.
  const { want, providerID: decision, rules: result } = decided;
  const fields = selectorFields(decided.facts.platformMetadata);
  const meta = result.platformMetadata;
  const platformMetadata = Object.fromEntries(
    PLATFORM_KEYS.map((k) => [k, k === "tags" ? sortedRecord(meta.tags) : meta[k]]),
  ) as unknown as PlatformMetadata;
  const annotations = Object.fromEntries(
    Object.entries(want.annotations).filter(([k, v]) => node.metadata.annotations[k] !== v),
  );
  return {
    preview: {
      providerID: decision.action === "wait" ? "" : (want.providerID ?? ""),
      labels: sortedRecord(want.labels),
      annotations: sortedRecord(annotations),
      taints: want.taints.map((t) => ({
        key: t.key,
        value: t.value ?? "",
        effect: t.effect as TaintEffect,
      })),
      platformMetadata,
      features: { publicIPDiscovery: result.features.publicIPDiscovery },
    },
    nodeName,
    nodeIP,
    ...(decision.action === "wait" ? { providerIDWait: decision.waitingFor } : {}),
    matchedRules: config.transformations.flatMap((r) => {
      const term = matchedTermName(r.nodeSelector, fields);
      if (term === undefined) return [];
      return [term === "" ? r.name : `${r.name} (term ${JSON.stringify(term)})`];
    }),
    errors: result.errors,
  };
}

/** Renders a preview for people: one section per part, `key=value` lines, "(none)" when empty. */
export function formatPreview(result: PreviewResult): string {
  const p = result.preview;
  const out = [
    `Node ${result.nodeName} (platform ${p.platformMetadata.platform || '""'}, node IP ${result.nodeIP})`,
    `Matching rules: ${result.matchedRules.length > 0 ? result.matchedRules.join(", ") : "(none)"}`,
    `providerID: ${result.providerIDWait === undefined ? p.providerID : "(none yet: waits for the instance ID)"}`,
  ];
  const section = (title: string, lines: string[]) => {
    out.push(`${title}:`);
    out.push(...(lines.length > 0 ? lines.map((l) => `  ${l}`) : ["  (none)"]));
  };
  section(
    "labels",
    Object.entries(p.labels).map(([k, v]) => `${k}=${v}`),
  );
  section(
    "annotations",
    Object.entries(p.annotations).map(([k, v]) => `${k}=${v}`),
  );
  section(
    "taints",
    p.taints.map((t) => `${t.key}${t.value === "" ? "" : `=${t.value}`}:${t.effect}`),
  );
  section(
    "platformMetadata",
    Object.entries(p.platformMetadata).map(
      ([k, v]) =>
        `${k}: ${typeof v === "boolean" || (typeof v === "string" && v !== "") ? v : JSON.stringify(v)}`,
    ),
  );
  section("features", [`publicIPDiscovery: ${p.features.publicIPDiscovery}`]);
  return `${out.join("\n")}\n`;
}

// ---------------------------------------------------------------------------------------------
// The subcommand.

/** What {@link validate} checks: file names (for messages) and contents. */
export interface ValidateInput {
  configPath: string;
  configText: string;
  metadataPath?: string;
  metadataText?: string;
  output?: "json" | "yaml";
}

/** What {@link validate} found: the exit code and what to print. */
export interface ValidateOutcome {
  exitCode: 0 | 1;
  stdout: string;
  /** Lines for stderr, without newlines. */
  stderr: string[];
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/**
 * The whole `validate` run on contents already read: pure, so that the binary and the tests share it.
 * @returns exit code 1 when the config or the metadata is invalid, else 0.
 */
export function validate(input: ValidateInput): ValidateOutcome {
  const stderr: string[] = [];
  let warned = 0;
  const report = (file: string, severity: "error" | "warning", issues: readonly ConfigIssue[]) => {
    for (const i of issues) stderr.push(`${file}: ${severity}: ${formatIssue(i)}`);
    if (severity === "warning") warned += issues.length;
  };
  let config: CompiledConfig;
  try {
    config = parseConfig(input.configText);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    report(input.configPath, "error", err.issues);
    report(input.configPath, "warning", err.warnings);
    stderr.push(`${input.configPath}: invalid (${plural(err.issues.length, "error")})`);
    return { exitCode: 1, stdout: "", stderr };
  }
  report(input.configPath, "warning", config.warnings);
  // The summary counts every warning the run prints, the metadata's and the preview's included.
  const summary = () =>
    `${input.configPath}: valid (${plural(config.transformations.length, "transformation rule")}, ${plural(warned, "warning")})\n`;

  if (input.metadataText === undefined) {
    if (input.output !== undefined) {
      stderr.push(`warning: -o ${input.output} has no effect without --metadata`);
      warned++;
    }
    return { exitCode: 0, stdout: summary(), stderr };
  }
  const metadataPath = input.metadataPath ?? "metadata";
  let sample: SampleNode;
  try {
    const parsed = parseMetadata(input.metadataText);
    report(metadataPath, "warning", parsed.warnings);
    sample = parsed.node;
  } catch (err) {
    if (!(err instanceof MetadataError)) throw err;
    report(metadataPath, "error", err.issues);
    report(metadataPath, "warning", err.warnings);
    stderr.push(`${metadataPath}: invalid (${plural(err.issues.length, "error")})`);
    return { exitCode: 1, stdout: "", stderr };
  }
  const result = previewNode(config, sample);
  const previewed = previewWarnings(input.configPath, metadataPath, sample, result);
  stderr.push(...previewed);
  warned += previewed.length;
  switch (input.output) {
    case "json":
      return { exitCode: 0, stdout: `${JSON.stringify(result.preview, null, 2)}\n`, stderr };
    case "yaml":
      return { exitCode: 0, stdout: stringifyYaml(result.preview), stderr };
    default:
      return { exitCode: 0, stdout: summary() + formatPreview(result), stderr };
  }
}

/** What the preview warns about: values skipped on this node, and a providerID it cannot show. */
function previewWarnings(
  configPath: string,
  metadataPath: string,
  sample: SampleNode,
  result: ReturnType<typeof previewNode>,
): string[] {
  const out = result.errors.map(
    (e) => `${configPath}: warning: skipped on this node: ${describeTransformErrors([e])}`,
  );
  if (result.providerIDWait !== undefined) {
    out.push(
      `${metadataPath}: warning: no providerID is written yet: the controller waits for ${result.providerIDWait}`,
    );
  } else if (result.nodeIP === NODE_IP_PLACEHOLDER && sample.platformMetadata.providerId === "") {
    out.push(
      `${metadataPath}: warning: no node IP (talosctl's "node:" field), so the default providerID shows ${NODE_IP_PLACEHOLDER}`,
    );
  }
  return out;
}

const log = logger("validate");

/** Reads a file; the cloud config within its size limit (see readConfigFile). */
function readInput(path: string, what: "cloud config" | "node metadata"): string {
  // "-" reads stdin, so that `talosctl get … -o yaml | … validate --metadata -` works.
  const source = path === "-" ? 0 : path;
  return readConfigFile(source, what === "cloud config" ? "config" : "node metadata");
}

/**
 * Runs `validate`: reads the files, prints the outcome of {@link validate}.
 * @returns the exit code: 0, 1 when a file cannot be read or is invalid, 2 when both would be stdin.
 */
export function runValidate(opts: ValidateOptions, warnings: readonly string[]): number {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  for (const w of warnings) log.warn(w);
  if (opts.cloudConfig === "-" && opts.metadata === "-") {
    process.stderr.write(
      "Cannot read both the cloud config and the node metadata from stdin: give one a file\n",
    );
    return 2;
  }
  const texts: { configText?: string; metadataText?: string } = {};
  for (const [key, path, what] of [
    ["configText", opts.cloudConfig, "cloud config"],
    ["metadataText", opts.metadata, "node metadata"],
  ] as const) {
    if (path === undefined) continue;
    try {
      texts[key] = readInput(path, what);
    } catch (err) {
      // A file over the size limit is an invalid config, reported as validate() reports one.
      if (err instanceof ConfigLimitError) {
        const label = path === "-" ? "stdin" : path;
        process.stderr.write(`${label}: error: ${formatIssue(err.issue)}\n${label}: invalid (1 error)\n`);
      } else process.stderr.write(`Cannot read ${what} ${path}: ${(err as Error).message}\n`);
      return 1;
    }
  }
  const outcome = validate({
    configPath: opts.cloudConfig === "-" ? "stdin" : opts.cloudConfig,
    configText: texts.configText ?? "",
    ...(opts.metadata === undefined ? {} : { metadataPath: opts.metadata === "-" ? "stdin" : opts.metadata }),
    ...(texts.metadataText === undefined ? {} : { metadataText: texts.metadataText }),
    ...(opts.output === undefined ? {} : { output: opts.output }),
  });
  if (outcome.stderr.length > 0) process.stderr.write(`${outcome.stderr.join("\n")}\n`);
  process.stdout.write(outcome.stdout);
  return outcome.exitCode;
}
