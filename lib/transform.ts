// The transformation engine: compiled rules + one node's Talos facts → the labels, annotations,
// taints, PlatformMetadata overrides and features the node should get (pure; its metrics are timed
// by lib/transformmetrics.ts, reconcile mode's record of what rules put there is lib/managedrecord.ts).
//
// A value that fails (template error, or a result Kubernetes would refuse) is skipped and reported
// in `errors`; the rest still applies, so one bad rule never blocks a node.

import type { CompiledConfig, RuleEntry, RuleValue } from "./config.ts";
import { dict } from "./dict.ts";
import { ANNOTATIONS_MAX_BYTES, annotationsSize, isLabelValue, parseTaint } from "./kubevalidation.ts";
import { matchedTermName, selectorFields } from "./selector.ts";
import type { Features, NodeFacts, PlatformMetadata, SystemInformation, Taint } from "./types.ts";

/** A value a rule could not apply to a node. */
export interface TransformError {
  /** The rule's name (or `transformations[<index>]`). */
  rule: string;
  /** The name of the nodeSelector term that matched, when it has one. */
  term?: string;
  field: "labels" | "annotations" | "taints" | "platformMetadata";
  key: string;
  reason: string;
}

/** What the rules produce for one node. */
export interface TransformResult {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: Taint[];
  /** The node's PlatformMetadata after the rules' overrides (providerId, region, zone, …). */
  platformMetadata: PlatformMetadata;
  features: Features;
  /** Values skipped on this node; everything else was applied. */
  errors: TransformError[];
}

/** The template fields that show SystemInformation, and the spec field each one shows. */
const SYSTEM_INFORMATION_DATA = {
  Manufacturer: "manufacturer",
  ProductName: "productName",
  Version: "version",
  SerialNumber: "serialNumber",
  UUID: "uuid",
  WakeUpType: "wakeUpType",
  SKUNumber: "skuNumber",
} as const satisfies Record<string, keyof SystemInformation>;

/** The template fields filled from SystemInformation: reading it costs a Talos call per node. */
export const SYSTEM_INFORMATION_FIELDS: readonly string[] = Object.keys(SYSTEM_INFORMATION_DATA);

/** The template field holding the node's Talos version: reading it costs a Talos call per node. */
export const TALOS_VERSION_FIELD = "TalosVersion";

/**
 * The data templates see, keyed by the reference's Go field names: PlatformMetadata (Platform,
 * Hostname, Region, Zone, InstanceType, InstanceID, ProviderID, Spot, InternalDNS, ExternalDNS,
 * Tags), SystemInformation ({@link SYSTEM_INFORMATION_FIELDS}; "" when the node does not publish
 * it) and TalosVersion.
 */
export function templateData(metadata: PlatformMetadata, facts: NodeFacts): Record<string, unknown> {
  const sys = facts.systemInformation;
  return {
    Platform: metadata.platform,
    Hostname: metadata.hostname,
    Region: metadata.region,
    Zone: metadata.zone,
    InstanceType: metadata.instanceType,
    InstanceID: metadata.instanceId,
    ProviderID: metadata.providerId,
    Spot: metadata.spot,
    InternalDNS: metadata.internalDNS,
    ExternalDNS: metadata.externalDNS,
    Tags: { ...metadata.tags },
    ...Object.fromEntries(
      Object.entries(SYSTEM_INFORMATION_DATA).map(([field, key]) => [field, sys?.[key] ?? ""]),
    ),
    [TALOS_VERSION_FIELD]: facts.talosVersion ?? "",
  };
}

/**
 * Whether any rule value's template may read one of the template data `fields` (see
 * `Template.mayRead`); literal values read nothing. Callers fetch optional facts only then.
 * @example rulesMayRead(config, SYSTEM_INFORMATION_FIELDS) // false for rules reading only PlatformMetadata
 */
export function rulesMayRead(
  config: Pick<CompiledConfig, "transformations">,
  fields: readonly string[],
): boolean {
  return config.transformations.some((rule) =>
    [...rule.labels, ...rule.annotations, ...rule.taints, ...rule.platformMetadata].some(
      ({ value }) => value.template !== undefined && fields.some((f) => value.template?.mayRead(f)),
    ),
  );
}

type Rendered = { ok: true; text: string } | { ok: false; reason: string };

function render(value: RuleValue, data: Record<string, unknown>): Rendered {
  if (!value.template) return { ok: true, text: value.source };
  try {
    return { ok: true, text: value.template.execute(data) };
  } catch (err) {
    return { ok: false, reason: `template failed: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/**
 * Applies every matching rule, in order, to one node. Later rules override earlier ones on the same
 * label, annotation, taint key or metadata field; publicIPDiscovery is on when any matching rule
 * turns it on. Selectors and templates all see the node's facts as Talos reported them (with the
 * hostname defaulting to the node name), not earlier rules' overrides, as in the reference.
 *
 * Callers pass facts whose providerId is already defaulted (`talos://<platform>/<nodeIP>`), as the
 * reference does before transforming, so selectors and templates see it.
 * @param config the compiled rules.
 * @param facts what Talos knows about the node.
 * @param nodeName the Node's name.
 * @returns the result; never throws for a bad rule or odd facts.
 */
export function transform(
  config: Pick<CompiledConfig, "transformations">,
  facts: NodeFacts,
  nodeName: string,
): TransformResult {
  const original: PlatformMetadata = {
    ...facts.platformMetadata,
    hostname: facts.platformMetadata.hostname || nodeName,
  };
  // Keys come from the rules, values from the templates over a peer's facts: kept without a
  // prototype, so that a key such as `constructor` is an entry (lib/dict.ts).
  const labels = dict<string>();
  const result: TransformResult = {
    labels,
    annotations: dict<string>(),
    taints: [],
    platformMetadata: { ...original, tags: { ...original.tags } },
    features: { publicIPDiscovery: false },
    errors: [],
  };
  const fields = selectorFields(original);
  const data = templateData(original, facts);
  const taints = new Map<string, Taint>();

  for (const rule of config.transformations) {
    const term = matchedTermName(rule.nodeSelector, fields);
    if (term === undefined) continue;
    const from = term === "" ? { rule: rule.name } : { rule: rule.name, term };
    /** Renders each entry and hands it to `accept`, which stores it or says why it cannot. */
    const each = <E extends RuleEntry>(
      field: TransformError["field"],
      entries: readonly E[],
      accept: (entry: E, text: string) => string | undefined,
    ) => {
      for (const entry of entries) {
        const r = render(entry.value, data);
        const reason = r.ok ? accept(entry, r.text) : r.reason;
        if (reason !== undefined) result.errors.push({ ...from, field, key: entry.key, reason });
      }
    };
    each("labels", rule.labels, ({ key }, text) => {
      const problems = isLabelValue(text);
      if (problems.length > 0) return `invalid value ${JSON.stringify(text)}: ${problems.join("; ")}`;
      labels[key] = text;
    });
    each("annotations", rule.annotations, ({ key }, text) => {
      const next = Object.assign(dict<string>(), result.annotations, { [key]: text });
      if (annotationsSize(next) > ANNOTATIONS_MAX_BYTES) {
        return `annotations would exceed ${ANNOTATIONS_MAX_BYTES} bytes in total`;
      }
      result.annotations = next;
    });
    each("taints", rule.taints, ({ key }, text) => {
      const parsed = parseTaint(key, text);
      if (!parsed.ok) return `invalid taint ${JSON.stringify(text)}: ${parsed.errors.join("; ")}`;
      taints.set(key, parsed.taint);
    });
    each("platformMetadata", rule.platformMetadata, ({ field }, text) => {
      if (field === "spot") result.platformMetadata.spot = text.trim() === "true";
      else result.platformMetadata[field] = text.trim();
      return undefined;
    });
    if (rule.features.publicIPDiscovery) result.features.publicIPDiscovery = true;
  }

  result.taints = [...taints.values()];
  return result;
}
