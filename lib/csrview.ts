// A kubelet-serving CSR as node-csr-approval (lib/csrapprover.ts) keeps it: the lean form its
// informer holds, whether it still waits for a decision, the body of the /approval write, and the
// pace of the looks for a missing Node. Pure.

import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import type { Decision } from "./csrdecision.ts";
import { type CsrInput, csrInputFrom } from "./csrrequest.ts";
import { KUBELET_SERVING_SIGNER } from "./wellknown.ts";

/** Longest pause between two looks for a missing Node (its appearance re-queues the CSR anyway). */
const NODE_POLL_MAX_MS = 30_000;

/** What the CSR informer keeps of a CSR: what `decide()` reads and what the /approval write needs. */
export interface LeanCsr {
  metadata: { name: string; uid: string; resourceVersion: string; creationTimestamp: string };
  /**
   * `decide()`'s input. A decided CSR is not cached (the informer keeps pending ones only) nor read
   * again: the form its event hands to the handlers keeps only its name, its resourceVersion (which
   * the informer resumes its watch from) and its condition types, not its request.
   */
  csr: CsrInput;
}

/**
 * Reduces a CertificateSigningRequest to a {@link LeanCsr}. Total: a malformed object becomes one
 * that `decide()` denies, never an exception that would stop the informer.
 * @param raw the object as the API returns it
 */
export function leanCsr(raw: unknown): LeanCsr {
  const obj = (raw ?? {}) as Partial<V1CertificateSigningRequest>;
  const md = obj.metadata ?? {};
  const conditions: unknown = obj.status?.conditions ?? [];
  // Conditions that cannot be read count as a decision: such a CSR is left alone, never approved.
  const types = Array.isArray(conditions)
    ? conditions.map((c) => String((c as { type?: unknown } | null)?.type ?? ""))
    : ["Unreadable"];
  if (types.length > 0) {
    return {
      metadata: {
        name: md.name ?? "",
        uid: "",
        resourceVersion: md.resourceVersion ?? "",
        creationTimestamp: "",
      },
      csr: {
        name: "",
        signerName: "",
        username: "",
        groups: [],
        usages: [],
        request: "",
        conditions: types.map((type) => ({ type })),
      },
    };
  }
  return {
    metadata: {
      name: md.name ?? "",
      uid: md.uid ?? "",
      resourceVersion: md.resourceVersion ?? "",
      creationTimestamp: String(md.creationTimestamp ?? ""),
    },
    csr: csrInputFrom({ ...obj, spec: obj.spec ?? { request: "", signerName: "" } }),
  };
}

/** Whether a cached CSR still waits for a decision. */
export function isPending(c: LeanCsr): boolean {
  return c.csr.conditions.length === 0 && c.csr.signerName === KUBELET_SERVING_SIGNER;
}

/** An approval or denial. */
export type Verdict = Extract<Decision, { action: "approve" | "deny" }>;

/**
 * The body of the PUT to `/approval`: the decision as an Approved or Denied condition, status
 * True, with the CSR's uid and resourceVersion so that the API server refuses it (409) if anyone
 * changed or decided the CSR meanwhile. The API server keeps its stored spec on /approval, so the
 * spec here only makes a valid object (without the request bytes); it stamps the condition's
 * lastUpdateTime and lastTransitionTime itself.
 */
export function approvalBody(c: LeanCsr, d: Verdict): V1CertificateSigningRequest {
  return {
    apiVersion: "certificates.k8s.io/v1",
    kind: "CertificateSigningRequest",
    metadata: { name: c.metadata.name, uid: c.metadata.uid, resourceVersion: c.metadata.resourceVersion },
    spec: { signerName: c.csr.signerName, usages: c.csr.usages, request: "" },
    status: {
      conditions: [
        {
          type: d.action === "approve" ? "Approved" : "Denied",
          status: "True",
          reason: d.reason,
          message: d.message,
        },
      ],
    },
  };
}

/**
 * How long to wait before looking for a missing Node again: doubling from 1 s, at most 30 s, and
 * never past the end of the wait.
 * @param looks how many times the Node was looked for already
 * @param leftMs time left until the CSR is given up
 */
export function nodePollDelayMs(looks: number, leftMs: number): number {
  return Math.max(1, Math.min(NODE_POLL_MAX_MS, 1000 * 2 ** Math.min(looks, 15), leftMs));
}
