// The cloud-config file (`--cloud-config`): its schema and compilation, from its text (reading it
// from disk is lib/configfile.ts's). YAML is read the way the reference's gopkg.in/yaml.v3 decoder
// reads it (first document only, scalars keep their source text, YAML 1.1 yes/no/on/off booleans, `<<` merges), checked against a valibot schema, then
// compiled (the YAML as plain data with lines: lib/configyaml.ts): every regex and template is built once, literal label/annotation/taint entries are
// validated. Problems carry their exact path (`transformations[1].labels["a/b"]`) and line.
//
// Severity policy: the config fails closed. Anything that can never work (wrong types, bad
// operators, regexes or templates) is an error and nothing is loaded, so the cluster is never
// touched with a broken config. So is an unknown key that could widen what a rule matches or write a
// wrong permanent fact: in a rule without `nodeSelector` (`nodeSelecter:` would leave the rule
// matching every node), inside a selector requirement, a selector key no node has (DoesNotExist on
// it matches every node), and an unknown platformMetadata field (a misspelled ProviderID would let
// the fallback provider ID be written, and spec.providerID never changes). Unknown keys that can
// only narrow what applies are warnings, as the reference ignores them: `name` on a nodeSelector
// term is documentation (the reference's docs name every term), other keys in a term, under
// `features` (an unknown feature stays off), under `global` or at the top level. A rule entry
// Kubernetes would refuse is an error when its absence could widen what runs where or misstate a
// fact: any taint (`present:NoSchedul`: a missing taint lets pods run where the rule keeps them off),
// a valid label key with an invalid value (selectors and exclusions read a label by its key), a key
// reserved for the CCM's bookkeeping; the reference failed every matching node over them. A label or
// annotation key no Node can have is dropped with a warning (nothing selects by it; the reference's
// own docs/rules.yaml has one), and so is a platformMetadata override of hostname, platform or tags,
// which no rule may override (dropping it keeps what Talos reports). The file's size and shape are
// bounded before YAML parsing (lib/configlimits.ts).

import * as v from "valibot";
import { LineCounter } from "yaml";
import type { ConfigIssue } from "./configissue.ts";
import {
  CompileBudget,
  ConfigLimitError,
  type FirstDocument,
  MAX_YAML_NODES,
  parseFirstDocument,
} from "./configlimits.ts";
import {
  formatPath,
  type Path,
  type Plain,
  resolveAliases,
  TooLargeError,
  toPlain,
  type Walk,
} from "./configyaml.ts";
import { isAnnotationKey, isLabelValue, isQualifiedName, isTaintKey, parseTaint } from "./kubevalidation.ts";
import { compileRequirement, SELECTOR_KEYS, type SelectorTerm } from "./selector.ts";
import { quoteValue, unknownKeyMessage, withoutLongValue } from "./suggest.ts";
import { parseTemplate, type Template } from "./template.ts";
import type { Features, PlatformMetadata } from "./types.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL } from "./wellknown.ts";

export { formatPath };

/** The config file cannot be read or is invalid; `issues` lists every problem found. */
export class ConfigError extends Error {
  readonly code = "config";
  constructor(
    readonly issues: readonly ConfigIssue[],
    readonly warnings: readonly ConfigIssue[] = [],
    options?: ErrorOptions,
  ) {
    const n = issues.length;
    const list = issues.map((i) => `  ${formatIssue(i)}`).join("\n");
    super(`Cannot load cloud config: ${n} problem${n === 1 ? "" : "s"}:\n${list}`, options);
    this.name = "ConfigError";
  }
}

/**
 * Renders an issue as one line: `path (line N): message`.
 * @example formatIssue({ path: "global.PreferIPv6", line: 3, message: "unknown key" })
 *   // "global.PreferIPv6 (line 3): unknown key"
 */
export function formatIssue(issue: ConfigIssue): string {
  const where = issue.path === "" ? "document" : issue.path;
  return `${where}${issue.line === undefined ? "" : ` (line ${issue.line})`}: ${issue.message}`;
}

/** A value of a rule: literal text, or a template rendered for each node. */
export interface RuleValue {
  source: string;
  /** Absent when `source` has no `{{`: the value is used as is. */
  template?: Template;
}

/** One `key: value` entry of a rule's labels, annotations, taints or platformMetadata. */
export interface RuleEntry {
  key: string;
  value: RuleValue;
}

/** The PlatformMetadata fields a rule may override. */
export type OverridableField = Exclude<keyof PlatformMetadata, "platform" | "hostname" | "tags">;

/** A platformMetadata override, with the field it targets. */
export interface MetadataOverride extends RuleEntry {
  field: OverridableField;
}

/** A transformation rule, ready to apply. */
export interface CompiledRule {
  /** The rule's `name`, or `transformations[<index>]` when it has none. */
  name: string;
  /** OR of terms; empty = every node. */
  nodeSelector: SelectorTerm[];
  labels: RuleEntry[];
  annotations: RuleEntry[];
  /** Values are `"value:Effect"` or `"Effect"`. */
  taints: RuleEntry[];
  platformMetadata: MetadataOverride[];
  features: Features;
}

/** The `global` section. */
export interface GlobalConfig {
  /** Cluster name for the `node.cloudprovider.kubernetes.io/clustername` label; "" = from talosconfig. */
  clusterName: string;
  /** Order a node's IPv6 address before its IPv4 one. */
  preferIPv6: boolean;
  /** Remove labels, annotations and taints that rules no longer produce (off = reference behaviour). */
  reconcile: boolean;
  /** Talos API endpoints (older reference releases); the TALOS_ENDPOINTS variable takes precedence. */
  endpoints: string[];
  /** Older reference releases' switch for CSR approval, now `--controllers=node-csr-approval`. */
  approveNodeCSR: boolean;
  /** Older reference releases: only refresh addresses of nodes whose providerID is not `talos://`. */
  skipForeignNode: boolean;
}

/** A loaded config: settings, compiled rules and the warnings found while loading. */
export interface CompiledConfig {
  global: GlobalConfig;
  transformations: CompiledRule[];
  warnings: ConfigIssue[];
}

// ---------------------------------------------------------------------------------------------
// Schema.

function describe(input: unknown): string {
  if (input === null || input === undefined) return "nothing";
  if (Array.isArray(input)) return "a list";
  if (typeof input === "object") return "a mapping";
  return JSON.stringify(input);
}

const expected = (what: string) => (issue: v.BaseIssue<unknown>) =>
  `expected ${what}, got ${describe(issue.input)}`;

function isMapping(input: unknown): input is Record<string, unknown> {
  return input !== null && typeof input === "object" && !Array.isArray(input);
}

/** yaml.v3 decodes these into a Go bool: YAML 1.2 core booleans plus the YAML 1.1 words. */
const BOOLEANS: ReadonlyMap<string, boolean> = new Map([
  ...["true", "True", "TRUE", "y", "Y", "yes", "Yes", "YES", "on", "On", "ON"].map((w) => [w, true] as const),
  ...["false", "False", "FALSE", "n", "N", "no", "No", "NO", "off", "Off", "OFF"].map(
    (w) => [w, false] as const,
  ),
]);

const Text = v.nullish(v.string(expected("a string")), "");
const Bool = v.nullish(
  v.pipe(
    v.string(expected("a boolean (true or false)")),
    v.check((word) => BOOLEANS.has(word), expected("a boolean (true or false)")),
    v.transform((word) => BOOLEANS.get(word) === true),
  ),
  "false",
);
const list = <T extends v.GenericSchema>(item: T) => v.nullish(v.array(item, expected("a list")), () => []);
function mapping<T extends v.ObjectEntries>(entries: T) {
  // v.object alone would take a list for a mapping.
  const schema = v.pipe(v.custom<object>(isMapping, expected("a mapping")), v.object(entries));
  // Every entry is nullish, so an empty mapping is valid input and yields the defaults.
  return v.nullish(schema, () => ({}) as v.InferInput<typeof schema>);
}

/** A string → string mapping as ordered entries: any key survives, even `constructor`. */
const StringMap = v.nullish(
  v.pipe(
    v.custom<Record<string, unknown>>(isMapping, expected("a mapping")),
    v.rawTransform(({ dataset, addIssue }) => {
      const input = dataset.value;
      const out: [string, string][] = [];
      for (const [key, value] of Object.entries(input)) {
        if (value === null) out.push([key, ""]);
        else if (typeof value === "string") out.push([key, value]);
        else {
          addIssue({
            message: `expected a string, got ${describe(value)}`,
            path: [{ type: "object", origin: "value", input, key, value }],
          });
        }
      }
      return out;
    }),
  ),
  () => ({}),
);

const RequirementSchema = mapping({ key: Text, operator: Text, values: list(Text) });
const TermSchema = mapping({ name: Text, matchExpressions: list(RequirementSchema) });
const RULE_ENTRIES = {
  name: Text,
  nodeSelector: list(TermSchema),
  labels: StringMap,
  annotations: StringMap,
  taints: StringMap,
  platformMetadata: StringMap,
  features: mapping({ publicIPDiscovery: Bool }),
};
const RuleSchema = mapping(RULE_ENTRIES);

/** The valibot schema of the whole file, after YAML decoding. Unknown keys are stripped. */
export const ConfigSchema = mapping({
  global: mapping({
    clusterName: Text,
    preferIPv6: Bool,
    reconcile: Bool,
    endpoints: list(Text),
    approveNodeCSR: Bool,
    skipForeignNode: Bool,
  }),
  transformations: list(RuleSchema),
});

type RawConfig = v.InferOutput<typeof ConfigSchema>;
type RawRule = RawConfig["transformations"][number];

// ---------------------------------------------------------------------------------------------
// Unknown keys.

/** The shape of the valibot schemas the unknown-key walk needs. */
interface SchemaShape {
  wrapped?: SchemaShape;
  pipe?: SchemaShape[];
  entries?: Record<string, SchemaShape>;
  item?: SchemaShape;
}

/**
 * Reports every key the schema does not know. An unknown key is an error only where a misspelling
 * could widen what a rule matches, and a warning elsewhere (the reference ignores every unknown key):
 * - in a rule without `nodeSelector`: the key may be the misspelled selector, and the rule would
 *   then apply to every node;
 * - inside a selector requirement (`matchExpressions[j]`): a misspelled `key`, `operator` or
 *   `values` changes what the requirement tests.
 * An unknown key in a rule that has its `nodeSelector`, in a nodeSelector term (a term without
 * `matchExpressions` matches no node), under `features` (an unknown feature stays off) or
 * `global`, or at the top level can only narrow what applies: a warning, as the reference ignores it.
 */
function reportUnknownKeys(schema: SchemaShape, value: Plain, path: Path, c: Compiler): void {
  let s = schema;
  while (s.wrapped) s = s.wrapped;
  s = s.pipe?.find((step) => step.entries) ?? s;
  if (s.entries && value !== null && typeof value === "object" && !Array.isArray(value)) {
    const known = Object.keys(s.entries);
    for (const [key, child] of Object.entries(value)) {
      const entry = Object.hasOwn(s.entries, key) ? s.entries[key] : undefined;
      if (entry) reportUnknownKeys(entry, child, [...path, key], c);
      else {
        const widening = unknownKeyWidens(path, value);
        const report = widening === undefined ? c.warn : c.error;
        report([...path, key], unknownKeyText(path, key, known, widening));
      }
    }
  } else if (s.item && Array.isArray(value)) {
    const item = s.item;
    value.forEach((child, i) => {
      reportUnknownKeys(item, child, [...path, i], c);
    });
  }
}

/**
 * Why an unknown key in the mapping at `path` could widen what a rule matches (the error's wording),
 * or undefined when it cannot.
 */
function unknownKeyWidens(path: Path, mapping: object): string | undefined {
  if (path[0] !== "transformations") return undefined;
  if (path.length === 2 && !("nodeSelector" in mapping))
    return "not allowed in a rule without nodeSelector, which applies to every node";
  if (path.length === 6 && path[4] === "matchExpressions") return "not allowed in a selector requirement";
  return undefined;
}

/** The message for an unknown key: why it is refused (`widening`), or why ignoring it is safe. */
function unknownKeyText(path: Path, key: string, known: string[], widening: string | undefined): string {
  if (widening !== undefined) return unknownKeyMessage("key", key, known, widening);
  const inRule = path[0] === "transformations";
  const inTerm = inRule && path.at(-2) === "nodeSelector";
  // The reference's own unit test indents a rule's labels and annotations into its term.
  if (inTerm && Object.hasOwn(RULE_ENTRIES, key))
    return `unknown key ${JSON.stringify(key)}: ignored: a rule's key inside a nodeSelector term (check its indentation)`;
  if (inTerm)
    return unknownKeyMessage("key", key, known, "ignored: a term matches by its matchExpressions alone");
  if (inRule && path.at(-1) === "features")
    return unknownKeyMessage("key", key, known, "ignored: an unknown feature stays off");
  return unknownKeyMessage("key", key, known, "ignored");
}

// ---------------------------------------------------------------------------------------------
// Compilation.

type Sink = (path: Path, message: string) => void;

interface Compiler {
  error: Sink;
  warn: Sink;
  /** Bounds the regexps and templates compiled from the file. */
  budget: CompileBudget;
}

/** platformMetadata keys (Go field names, matched case-insensitively as the reference does). */
const OVERRIDES: ReadonlyMap<string, OverridableField> = new Map([
  ["region", "region"],
  ["zone", "zone"],
  ["instancetype", "instanceType"],
  ["instanceid", "instanceId"],
  ["providerid", "providerId"],
  ["spot", "spot"],
  ["internaldns", "internalDNS"],
  ["externaldns", "externalDNS"],
]);
const OVERRIDE_NAMES = [
  "Region",
  "Zone",
  "InstanceType",
  "InstanceID",
  "ProviderID",
  "Spot",
  "InternalDNS",
  "ExternalDNS",
];

const LOWER_SELECTOR_KEYS = new Set<string>(SELECTOR_KEYS.map((k) => k.toLowerCase()));

function compileValue(path: Path, source: string, c: Compiler): RuleValue | undefined {
  if (!source.includes("{{")) return { source };
  if (!affordable(path, source, c)) return undefined;
  try {
    return { source, template: parseTemplate(source, formatPath(path)) };
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    c.error(path, `invalid template ${quoteValue(source)}: ${withoutLongValue(reason, source)}`);
    return undefined;
  }
}

/** Spends the compile budget on a regexp or template; false (with an error the first time) when spent. */
function affordable(path: Path, source: string, c: Compiler): boolean {
  const refused = c.budget.spend(source);
  if (refused) c.error(path, refused);
  return refused === undefined;
}

function compileSelector(raw: RawRule["nodeSelector"], base: Path, c: Compiler): SelectorTerm[] {
  return raw.map((term, t) => {
    const termPath = [...base, "nodeSelector", t];
    if (term.matchExpressions.length === 0)
      c.warn(termPath, "a term without matchExpressions matches no node");
    const matchExpressions = term.matchExpressions.flatMap((expr, e) => {
      const path = [...termPath, "matchExpressions", e];
      // No node has an unknown key, so DoesNotExist on it would match every node: refuse it.
      if (!LOWER_SELECTOR_KEYS.has(expr.key.toLowerCase())) {
        c.error(
          [...path, "key"],
          unknownKeyMessage("selector key", expr.key, SELECTOR_KEYS, "no node has it"),
        );
      }
      if (expr.operator === "Regexp" && !affordable([...path, "values", 0], expr.values[0] ?? "", c))
        return [];
      const compiled = compileRequirement(expr);
      if (compiled.ok) return [compiled.requirement];
      for (const issue of compiled.issues) c.error([...path, ...issue.path], issue.message);
      return [];
    });
    return term.name === "" ? { matchExpressions } : { name: term.name, matchExpressions };
  });
}

/**
 * What is wrong with a rule entry: problems that only drop it (a key no Node can have, so nothing
 * selects by it: the rule narrows at most) and problems that refuse the file (the entry's absence
 * could widen what runs where or misstate a fact: a taint, a valid label key with a value Kubernetes
 * refuses, a key reserved for the CCM's bookkeeping).
 */
interface EntryProblems {
  drop: string[];
  refuse: string[];
}

/**
 * Compiles entries: one with a problem that refuses the file is an error, one that can only be
 * dropped is dropped with a warning (see {@link EntryProblems}).
 */
function compileEntries(
  entries: [string, string][],
  base: Path,
  c: Compiler,
  check: (key: string, literal: string | undefined) => EntryProblems,
): RuleEntry[] {
  const out: RuleEntry[] = [];
  for (const [key, source] of entries) {
    const path = [...base, key];
    const value = compileValue(path, source, c);
    if (!value) continue;
    const { drop, refuse } = check(key, value.template ? undefined : source);
    if (refuse.length > 0) {
      const all = [...refuse, ...drop].join("; ");
      c.error(path, `${all}: the rule would apply without this entry (fix or remove it)`);
      continue;
    }
    if (drop.length > 0) {
      c.warn(path, `entry ignored: ${drop.join("; ")}`);
      continue;
    }
    out.push({ key, value });
  }
  return out;
}

const RESERVED = "key is reserved for the CCM's own bookkeeping";

function labelProblems(key: string, literal: string | undefined): EntryProblems {
  if (key === MANAGED_DIGEST_LABEL) return { drop: [], refuse: [RESERVED] };
  const drop = isQualifiedName(key).map((e) => `key ${e}`);
  const value = literal === undefined ? [] : isLabelValue(literal).map((e) => `value ${e}`);
  return { drop, refuse: value };
}

function annotationProblems(key: string): EntryProblems {
  if (key === MANAGED_ANNOTATION) return { drop: [], refuse: [RESERVED] };
  return { drop: isAnnotationKey(key).map((e) => `key ${e}`), refuse: [] };
}

function taintProblems(key: string, literal: string | undefined): EntryProblems {
  if (literal === undefined) return { drop: [], refuse: isTaintKey(key).map((e) => `key ${e}`) };
  const parsed = parseTaint(key, literal);
  return { drop: [], refuse: parsed.ok ? [] : parsed.errors };
}

function compileOverrides(entries: [string, string][], base: Path, c: Compiler): MetadataOverride[] {
  const out: MetadataOverride[] = [];
  for (const [key, source] of entries) {
    const path = [...base, key];
    const lower = key.toLowerCase();
    const field = OVERRIDES.get(lower);
    if (lower === "hostname" || lower === "platform" || lower === "tags") {
      c.warn(path, `entry ignored: ${key} cannot be overridden`);
      continue;
    }
    if (!field) {
      c.error(
        path,
        unknownKeyMessage("platformMetadata field", key, OVERRIDE_NAMES, "not allowed in a rule"),
      );
      continue;
    }
    const value = compileValue(path, source, c);
    if (value) out.push({ key, field, value });
  }
  return out;
}

function compileRule(raw: RawRule, index: number, c: Compiler): CompiledRule {
  const base = ["transformations", index];
  return {
    name: raw.name === "" ? `transformations[${index}]` : raw.name,
    nodeSelector: compileSelector(raw.nodeSelector, base, c),
    labels: compileEntries(raw.labels, [...base, "labels"], c, labelProblems),
    annotations: compileEntries(raw.annotations, [...base, "annotations"], c, annotationProblems),
    taints: compileEntries(raw.taints, [...base, "taints"], c, taintProblems),
    platformMetadata: compileOverrides(raw.platformMetadata, [...base, "platformMetadata"], c),
    features: { publicIPDiscovery: raw.features.publicIPDiscovery },
  };
}

// ---------------------------------------------------------------------------------------------
// Entry points.

/**
 * Parses, validates and compiles a cloud-config document. An empty document, or `global:` alone,
 * gives the defaults.
 * @param text the file's content.
 * @returns the compiled config with its warnings (unknown keys, dropped entries).
 * @throws {ConfigError} listing every error, each with its path and line.
 * @example parseConfig("global:\n  preferIPv6: true\n").global.preferIPv6 // true
 */
export function parseConfig(text: string): CompiledConfig {
  const doc = plainDocument(text);
  const { errors, warnings } = doc;
  const c = compilerFor(doc);
  reportUnknownKeys(ConfigSchema as unknown as SchemaShape, doc.plain, [], c);
  const parsed = v.safeParse(ConfigSchema, doc.plain, { abortEarly: false });
  if (!parsed.success) {
    for (const i of parsed.issues) c.error(i.path?.map((p) => p.key as string | number) ?? [], i.message);
    throw new ConfigError(byLine(errors), byLine(warnings));
  }
  const raw = parsed.output;
  if (raw.global.approveNodeCSR) {
    c.warn(
      ["global", "approveNodeCSR"],
      "deprecated: enable the node-csr-approval controller with --controllers",
    );
  }
  const transformations = raw.transformations.map((rule, i) => compileRule(rule, i, c));
  if (errors.length > 0) throw new ConfigError(byLine(errors), byLine(warnings));
  return { global: raw.global, transformations, warnings: byLine(warnings) };
}

/** A cloud-config document as plain data, the line of each path, and the issues found so far. */
interface PlainDocument {
  plain: Plain;
  /** The line of each formatted path. */
  lineOf: Map<string, number>;
  errors: ConfigIssue[];
  warnings: ConfigIssue[];
}

/**
 * The first YAML document of `text` as plain data, aliases expanded within the node budget.
 * @throws {ConfigError} on YAML errors, a file over the limits, or too many nodes.
 */
function plainDocument(text: string): PlainDocument {
  const lines = new LineCounter();
  const out: PlainDocument = { plain: null, lineOf: new Map(), errors: [], warnings: [] };
  let first: FirstDocument;
  try {
    first = parseFirstDocument(text, lines);
  } catch (err) {
    if (err instanceof ConfigLimitError) throw new ConfigError([err.issue]);
    throw err;
  }
  const { doc } = first;
  if (!doc) return out;
  for (const e of doc.errors)
    out.errors.push({ path: "", line: lines.linePos(e.pos[0]).line, message: e.message });
  for (const w of doc.warnings)
    out.warnings.push({ path: "", line: lines.linePos(w.pos[0]).line, message: w.message });
  if (first.more > 0) {
    out.warnings.push({
      path: "",
      ...(first.moreOffset === undefined ? {} : { line: lines.linePos(first.moreOffset).line }),
      message: `only the first YAML document is read; ${first.more} more ignored`,
    });
  }
  if (out.errors.length > 0) throw new ConfigError(byLine(out.errors), byLine(out.warnings));
  const walk: Walk = {
    lines,
    lineOf: out.lineOf,
    budget: MAX_YAML_NODES,
    open: new Set(),
    anchors: resolveAliases(doc),
    aliasDepth: 0,
    errors: out.errors,
  };
  try {
    out.plain = toPlain(doc.contents, walk, []);
  } catch (err) {
    if (!(err instanceof TooLargeError)) throw err;
    throw new ConfigError([
      { path: "", message: `document has more than ${MAX_YAML_NODES} nodes after alias expansion` },
    ]);
  }
  return out;
}

/** A Compiler that files each issue under its path with the line of the nearest path that has one. */
function compilerFor(doc: PlainDocument): Compiler {
  const issue = (path: Path, message: string): ConfigIssue => {
    for (let n = path.length; n >= 0; n--) {
      const line = doc.lineOf.get(formatPath(path.slice(0, n)));
      if (line !== undefined) return { path: formatPath(path), line, message };
    }
    return { path: formatPath(path), message };
  };
  return {
    error: (path, message) => doc.errors.push(issue(path, message)),
    warn: (path, message) => doc.warnings.push(issue(path, message)),
    budget: new CompileBudget(),
  };
}

/**
 * Orders issues as they appear in the file; document-wide ones (no line) first, ties in the order
 * they were found.
 */
export function byLine(issues: readonly ConfigIssue[]): ConfigIssue[] {
  return [...issues].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
}
