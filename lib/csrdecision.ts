// What a kubelet serving CSR decision is: its actions, the stable deny reasons, and how the policy
// (lib/csr.ts, lib/csrrequest.ts) phrases one — attacker-controlled text quoted and truncated, a
// per-peer bound's denial, and any exception turned into a denial (fail closed). Pure.

import { OVER_LIMIT_REASON, overLimitMessage, type PeerLimitName } from "./peerlimits.ts";

/** Condition reason written with an approval. */
export const APPROVE_REASON = "TalosCCMApprove";

/** Why a CSR is left alone. */
export type IgnoreReason = "AlreadyDecided" | "OtherSigner";

/** Stable codes for each failed check, written as the Denied condition's reason (README table). */
export const DENY_REASONS = [
  "UsernameMismatch",
  "GroupMismatch",
  "BadUsages",
  "InvalidRequest",
  OVER_LIMIT_REASON,
  "WeakKey",
  "BadSignature",
  "SubjectMismatch",
  "ForbiddenSAN",
  "NonUniqueIP",
  "NoSAN",
  "ClusterNetworkIP",
  "SharedIP",
  "SharedDNSName",
  "DNSNameNotOwned",
  "DNSNameOfOtherNode",
  "IPNotOwned",
  "IPOfOtherNode",
  "ServiceName",
  "TalosNodeMismatch",
  "IPNotReportedByTalos",
  "DNSNameNotReportedByTalos",
] as const;

/** A failed check's code: one of {@link DENY_REASONS}. */
export type DenyReason = (typeof DENY_REASONS)[number];

/** What the controller should do with a CSR. */
export type Decision =
  | { action: "ignore"; reason: IgnoreReason }
  | { action: "wait"; reason: "NodeNotFound"; message: string }
  | { action: "approve"; reason: typeof APPROVE_REASON; message: string }
  | {
      action: "deny";
      reason: DenyReason;
      message: string;
      /** The per-peer bound the CSR is over (reason `PeerInputOverLimit`), for the peer-rejection metric. */
      limit?: PeerLimitName;
    };

/**
 * Quotes attacker-controlled text for a message: escaped and truncated.
 * @example q("a\nb") // "\"a\\nb\""
 */
export function q(value: string): string {
  return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value);
}

/**
 * Quotes the first 8 of `values` for a message, saying how many more there are.
 * @example list(["a", "b"]) // "\"a\", \"b\""
 */
export function list(values: string[]): string {
  const shown = values.slice(0, 8).map(q).join(", ");
  return values.length > 8 ? `${shown} and ${values.length - 8} more` : shown;
}

/**
 * A denial for failed check `reason`.
 * @example deny("NoSAN", "at least one DNS or IP SAN is required").action // "deny"
 */
export function deny(reason: DenyReason, message: string): Decision {
  return { action: "deny", reason, message };
}

/**
 * The denial of a CSR over per-peer bound `limit`: reason `PeerInputOverLimit`, the bound's message.
 * @example overLimit("csr_sans", 300).reason // "PeerInputOverLimit"
 */
export function overLimit(limit: PeerLimitName, got: number): Decision {
  return { action: "deny", reason: OVER_LIMIT_REASON, message: overLimitMessage(limit, got), limit };
}

/**
 * Runs `fn`, turning any exception into a denial: a bug or a malformed object never approves.
 * @example failClosed(() => { throw new Error("x"); }) // deny InvalidRequest "Cannot evaluate the request: x"
 */
export function failClosed<T>(fn: () => T): T | Decision {
  try {
    return fn();
  } catch (err) {
    // The reference crash-loops on one bad CSR; here it is denied and the controller goes on.
    return deny(
      "InvalidRequest",
      `Cannot evaluate the request: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}
