// The cloud-node controller's metrics: initializations, their duration and failures by reason,
// deferred writes, the instance-ID wait, the Talos watches by state, uninitialized Nodes, other
// writers' changes and node IPs left out. Definitions only; lib/node.ts sets them.

import type { Registry } from "./metrics.ts";
import { PEER_LIMITS, peerRejections } from "./peerlimits.ts";
import { UNINITIALIZED_TAINT } from "./wellknown.ts";

/** How many field manager names get a label value of their own in the conflicting-writes metric. */
export const CONFLICT_MANAGERS = 16;

/** The cloud-node controller's metric families, registered on `reg`. */
export function nodeMetrics(reg: Registry) {
  return {
    duration: reg.histogram(
      "talosccm_node_initialization_duration_seconds",
      "Time from a Node's creation to the removal of its uninitialized taint.",
      [],
      [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
    ),
    initialized: reg.counter(
      "talosccm_nodes_initialized_total",
      "Nodes initialized by the cloud-node controller.",
    ),
    failed: reg.counter(
      "talosccm_node_initialization_errors_total",
      "Initialization passes that left a node tainted, by reason (talos, identity, nodeip, instance_id, kubernetes, " +
        "peer_limit).",
      ["reason"],
    ),
    deferred: reg.counter(
      "talosccm_node_writes_deferred_total",
      "cloud-node passes held for a Node whose per-node write budget was spent (burst " +
        `${PEER_LIMITS.node_write_burst.value}, then paced): a pass that would have written, or a change while not ` +
        "one write's worth was left; re-queued for when a write is due, changes in between coalesced.",
    ),
    rejected: peerRejections(reg),
    waitingForInstanceID: reg.gauge(
      "talosccm_nodes_waiting_for_instance_id",
      "Nodes without a providerID whose platform names its instances while Talos has not published the instance ID " +
        "(initializing ones stay tainted).",
    ),
    watches: reg.gauge(
      "talosccm_node_talos_watches",
      "Nodes whose Talos facts are watched, by state: healthy, down, or down_node_status_unknown (down while " +
        "the Node's status is unknown, its kubelet silent: a machine off, expected).",
      ["state"],
    ),
    uninitialized: reg.gauge(
      "talosccm_nodes_uninitialized",
      `Nodes that still have the ${UNINITIALIZED_TAINT} taint (in the cloud-node controller's Node cache).`,
    ),
    conflicts: reg.counter(
      "talosccm_node_conflicting_writes_total",
      "Changes another field manager made to a Node field this CCM writes (status.addresses, spec.providerID, " +
        `spec.taints, metadata.labels, metadata.annotations), by field and manager (the first ${CONFLICT_MANAGERS} ` +
        "manager names as they are, later ones as other).",
      ["field", "manager"],
    ),
    rejectedIPs: reg.counter(
      "talosccm_node_ips_rejected_total",
      "Node IPs (provided-node-ip annotation or InternalIP) left out of a Node's addresses when first found, " +
        "by reason (not_on_machine: the machine Talos confirmed as the node does not have the IP).",
      ["reason"],
    ),
  };
}
