// The node-csr-approval counters: approvals and denials by status, denials by reason (every series
// there from the start at 0), a per-peer bound's denial counted for its peer too, and where the
// decisions' Talos facts came from. Pure: the registry (lib/metrics.ts) is the caller's.

import { DENY_REASONS, type Decision } from "./csrdecision.ts";
import type { Counter, Registry } from "./metrics.ts";
import { PEER_LIMITS, peerRejections } from "./peerlimits.ts";

/** Counter of approvals and denials, label `status` (approve|deny), named as in the reference. */
const CSR_APPROVAL_METRIC = "talosccm_csr_approval_count";
/** Counter of denials, label `reason` (a `DenyReason`). */
const CSR_DENIED_METRIC = "talosccm_csr_denied_total";
/** Counter of the Talos facts CSR decisions took, label `source` ({@link TalosFactsSource}). */
const CSR_FACTS_METRIC = "talosccm_csr_talos_facts_total";

/** Where a CSR decision's Talos facts came from: cloud-node's watches, or a read of Talos. */
export type TalosFactsSource = "watches" | "talos";

/** The CSR counters, registered on a registry. */
export interface CsrMetrics {
  approvals: Counter;
  denials: Counter;
  /** Talos facts taken for a decision, by `source`: a rising `talos` while cloud-node runs means its watches cannot answer. */
  facts: Counter;
  /**
   * Counts an approve or deny decision (call once it is written); ignore and wait count nothing. A
   * denial for a per-peer bound also counts in `talosccm_peer_input_rejected_total{peer="csr"}`.
   */
  record(decision: Decision): void;
}

/**
 * Registers (or finds) the CSR counters.
 * @param reg the registry (the process registry served on /metrics, or a test's own).
 */
export function csrMetrics(reg: Registry): CsrMetrics {
  const approvals = reg.counter(CSR_APPROVAL_METRIC, "Node serving CSRs approved or denied, by status.", [
    "status",
  ]);
  const denials = reg.counter(CSR_DENIED_METRIC, "Node serving CSRs denied, by reason.", ["reason"]);
  // Every series exists from the start at 0, so that increase() and rate() count the first decisions
  // (a series that appears at 6 shows no increase: a first burst of denials would go unseen).
  for (const status of ["approve", "deny"]) approvals.inc({ status }, 0);
  for (const reason of DENY_REASONS) denials.inc({ reason }, 0);
  const facts = reg.counter(
    CSR_FACTS_METRIC,
    "Talos facts node serving CSR decisions took, by source: cloud-node's watches or a read of Talos.",
    ["source"],
  );
  for (const source of ["watches", "talos"] satisfies TalosFactsSource[]) facts.inc({ source }, 0);
  const rejections = peerRejections(reg);
  return {
    approvals,
    denials,
    facts,
    record(decision) {
      if (decision.action === "approve") approvals.inc({ status: "approve" });
      if (decision.action === "deny") {
        approvals.inc({ status: "deny" });
        denials.inc({ reason: decision.reason });
        if (decision.limit) rejections.inc({ peer: PEER_LIMITS[decision.limit].peer, limit: decision.limit });
      }
    },
  };
}
