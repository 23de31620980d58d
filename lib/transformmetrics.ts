// The rules engine's metrics, under the reference's names: every transform() call timed in
// talosccm_transformer_duration_seconds and the values it skipped counted in
// talosccm_transformer_errors_total. The timing reads the clock, so it lives here, beside the pure
// engine (lib/transform.ts), for the shells that transform a node: cloud-node-lifecycle calls
// measuredTransform; cloud-node records the time lib/desirednode.ts decideNode measured with the
// clock it passed in.

import type { CompiledConfig } from "./config.ts";
import type { Registry } from "./metrics.ts";
import { registry as processRegistry } from "./metricsprocess.ts";
import { type TransformResult, transform } from "./transform.ts";
import type { NodeFacts } from "./types.ts";

function metrics(reg: Registry) {
  return {
    duration: reg.histogram(
      "talosccm_transformer_duration_seconds",
      "Latency of an Transformer call",
      ["type"],
      [0.001, 0.01, 0.05, 0.1],
    ),
    errors: reg.counter(
      "talosccm_transformer_errors_total",
      "Total number of errors for an Transformer call",
      ["type"],
    ),
  };
}

/** The value of the metrics' `type` label, as the reference sets it. */
const METRIC_TYPE = { type: "transformer" };

/**
 * Records one transform() call that took `seconds` and skipped `errors` values (a caller that timed
 * it with its own clock, e.g. lib/desirednode.ts decideNode's).
 */
export function recordTransform(registry: Registry, seconds: number, errors: number): void {
  const m = metrics(registry);
  m.duration.observe(METRIC_TYPE, seconds);
  if (errors > 0) m.errors.inc(METRIC_TYPE, errors);
}

/**
 * {@link transform}, timed and its errors counted on `registry`.
 * @param registry where the transformer metrics go; the process registry by default.
 * @returns transform's result, unchanged.
 */
export function measuredTransform(
  config: Pick<CompiledConfig, "transformations">,
  facts: NodeFacts,
  nodeName: string,
  registry: Registry = processRegistry,
): TransformResult {
  const started = performance.now();
  const result = transform(config, facts, nodeName);
  recordTransform(registry, (performance.now() - started) / 1000, result.errors.length);
  return result;
}
