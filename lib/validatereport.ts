// What `validate` reports, from contents already read: the cloud config's problems, the sample
// node's (read by lib/validatemetadata.ts), and a preview of what the cloud-node controller would write on
// that node. The preview runs the controller's own decision (lib/desirednode.ts decideNode), so it
// cannot drift from what a real node gets. Pure: lib/validatecommand.ts reads the files and prints.
//
// Output policy: errors and warnings go to stderr, one per line, as `<file>: error|warning: …`;
// stdout carries the human summary and preview, or with `-o json|yaml` only the preview object.
// Exit 1 when the config or the metadata is invalid; 0 otherwise, including when a rule value fails
// on the sample node (a warning: the controller skips that value and still initializes the node, so
// the file is usable). Exit 2, for command-line errors, is the shell's (main.ts and lib/validatecommand.ts).

import { stringify as stringifyYaml } from "yaml";
import { tryParseIP } from "./cidr.ts";
import { type CompiledConfig, ConfigError, formatIssue, parseConfig } from "./config.ts";
import type { ConfigIssue } from "./configissue.ts";
import { decideNode, describeTransformErrors } from "./desirednode.ts";
import { own } from "./dict.ts";
import { readManagedRecord } from "./managedrecord.ts";
import { type LeanNode, nodeIPs } from "./nodeview.ts";
import { matchedTermName, selectorFields } from "./selector.ts";
import type { TransformError } from "./transform.ts";
import type { Features, PlatformMetadata, TaintEffect } from "./types.ts";
import { MetadataError, PLATFORM_KEYS, parseMetadata, type SampleNode } from "./validatemetadata.ts";
import { PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT } from "./wellknown.ts";

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
  /** A taint of the rules failed to render: the controller leaves the node tainted (uninitialized). */
  taintsFailed?: true;
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
    Object.entries(want.annotations).filter(([k, v]) => own(node.metadata.annotations, k) !== v),
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
    ...(decided.taintsFailed ? { taintsFailed: true as const } : {}),
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
// The whole run, on contents already read.

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
  if (result.taintsFailed)
    out.push(
      `${configPath}: warning: this node is not initialized (it stays tainted) while a taint of its rules does not render`,
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
