// The Talos client's metrics: `talosccm_api_request_duration_seconds`,
// `talosccm_api_request_errors_total` and the direct routes' `talosccm_talos_direct_channels` and
// `talosccm_talos_direct_fallbacks_total`, registered on the process registry unless a registry is
// given.

import type { Counter, Gauge, Histogram, Registry } from "./metrics.ts";
import { registry as processRegistry } from "./metricsprocess.ts";
import { RESOURCES } from "./taloswire.ts";

const API_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The `node_status` label of a failed call: `unknown` for a call about a node whose status is unknown
 * (its kubelet stopped posting: the machine is off or cut off, and its failures are expected),
 * `known` for any other.
 */
export function nodeStatus(unknown: boolean): "unknown" | "known" {
  return unknown ? "unknown" : "known";
}

/** The metrics of one Talos client, by request (`platformmetadata`, `version`, `watch_addresses`…). */
export interface TalosApiMetrics {
  /** Latency of a call, retries included. */
  duration: Histogram;
  /** Calls and watches that failed after retries, by request and node_status ({@link nodeStatus}). */
  errors: Counter;
  /** Channels open straight to machines' own apid (lib/talosroute.ts). */
  directChannels: Gauge;
  /** Direct attempts whose path failed, each then asked through the proxy. */
  directFallbacks: Counter;
}

/**
 * Registers (or finds) the Talos API metrics on `reg`.
 * @example const { errors } = talosApiMetrics(); errors.inc({ request: "version" });
 */
export function talosApiMetrics(reg: Registry = processRegistry): TalosApiMetrics {
  const errors = reg.counter(
    "talosccm_api_request_errors_total",
    "Talos API calls and watches that failed after retries, by request and node_status (unknown: about a " +
      "node whose status is unknown, its kubelet silent; such failures are expected while its machine is off).",
    ["request", "node_status"],
  );
  // Every call's series exists from the start at 0, so that increase() and rate() count its first
  // failure (a series that appears at 1 shows no increase).
  for (const request of ["version", ...Object.keys(RESOURCES)])
    for (const status of ["known", "unknown"]) errors.inc({ request, node_status: status }, 0);
  const directFallbacks = reg.counter(
    "talosccm_talos_direct_fallbacks_total",
    "Calls and watches whose direct path to a Talos machine failed (refused, unreachable, handshake), then " +
      "made through a talosconfig endpoint; the machine is asked through the endpoints for 1 to 30 minutes.",
  );
  directFallbacks.inc(undefined, 0);
  const directChannels = reg.gauge(
    "talosccm_talos_direct_channels",
    "Connections open straight to Talos machines' own apid (TALOS_MACHINE_ACCESS=auto), not through a talosconfig endpoint.",
  );
  directChannels.set(undefined, directChannels.get());
  return {
    duration: reg.histogram(
      "talosccm_api_request_duration_seconds",
      "Latency of a Talos API call, retries included.",
      ["request"],
      API_BUCKETS,
    ),
    errors,
    directChannels,
    directFallbacks,
  };
}
