// What the cloud-node controller's Warning Events say, one function per reason: the text an
// operator reads in `kubectl describe node` (what happened, what the CCM does about it, what to
// check). Pure strings from the facts lib/node.ts passes in.

import type { ProviderIDDecision } from "./desirednode.ts";
import type { ConflictingWrite } from "./fieldowners.ts";
import type { RecordProblem } from "./managedrecord.ts";
import type { LeanNode, NodeIPs } from "./nodeview.ts";
import { overLimitMessage, type PeerLimitName } from "./peerlimits.ts";
import {
  MANAGED_ANNOTATION,
  MANAGED_DIGEST_LABEL,
  PROVIDED_NODE_IP_ANNOTATION,
  UNINITIALIZED_TAINT,
} from "./wellknown.ts";

/** The Warning Event (reason, note) for each way a node's record can be untrustworthy. */
export const RECORD_PROBLEMS: Record<RecordProblem, readonly [string, string]> = {
  unsigned: [
    "UntrustedManagedRecord",
    `The ${MANAGED_ANNOTATION} annotation has no ${MANAGED_DIGEST_LABEL} digest label (it was written ` +
      "before records carried one, or by someone else, e.g. the node's kubelet): nothing it names is removed, " +
      "and the record is rebuilt from what the rules produce now",
  ],
  mismatch: [
    "UntrustedManagedRecord",
    `The ${MANAGED_ANNOTATION} annotation does not match its ${MANAGED_DIGEST_LABEL} digest label: someone ` +
      "but this CCM changed or removed it (the node's kubelet can edit annotations, not that label): nothing it " +
      "names is removed, and the record is rebuilt from what the rules produce now",
  ],
  invalid: [
    "InvalidManagedRecord",
    `The ${MANAGED_ANNOTATION} annotation is not a record this CCM can read: its unusable entries are ignored ` +
      "(nothing they name is removed) and the record is rewritten",
  ],
};

/** What becomes of a node that cannot be reconciled now. */
function stays(initializing: boolean): string {
  return initializing ? "stays tainted" : "keeps its current state";
}

/** What a ConflictingWriter Event says about one change. */
export function describeConflict(c: ConflictingWrite, node: LeanNode, windowMs: number): string {
  const by = `field manager ${JSON.stringify(c.manager.slice(0, 128))}`;
  const list = c.keys.map((k) => JSON.stringify(k)).join(", ");
  const what =
    c.field === "status.addresses"
      ? `status.addresses (${c.keys.join(", ")}) was changed by ${by} to entries this CCM's list for the node does not have; the Node now lists ${node.status.addresses
          .map((a) => `${a.type} ${a.address}`)
          .join(", ")}`
      : c.field === "spec.providerID"
        ? `spec.providerID was set to ${list} by ${by}`
        : c.field === "spec.taints"
          ? `spec.taints: ${list}, put there by this CCM's rules, was removed or changed by ${by}`
          : `${c.field} ${list}, written by this CCM, changed by ${by}`;
  const then =
    c.field === "spec.providerID"
      ? "A providerID cannot change once set: this CCM keeps it and writes none of its own"
      : "This CCM writes the field again from Talos's facts and its rules wherever it keeps it current, as " +
        "upstream cloud-node does with addresses";
  return (
    `${what}. Two controllers writing one field undo each other at every write: let one node controller ` +
    `own these nodes (beside a cloud's own CCM, run it without its cloud-node controller). ${then}; further ` +
    `changes of this field within ${Math.round(windowMs / 60_000)} minutes are counted in ` +
    "talosccm_node_conflicting_writes_total, not reported again"
  );
}

/** WriteBudgetExceeded: the node's writes wait `waitMs` for its budget of `burst` writes, then one per `paceMs`. */
export function writeBudgetNote(burst: number, paceMs: number, waitMs: number): string {
  return (
    `What this CCM writes to the node changed faster than its per-node write budget (${burst} writes at once, ` +
    `then one every ${paceMs / 1000} s; e.g. an address that keeps appearing and disappearing): the latest state is ` +
    `written in ${Math.ceil(waitMs / 1000)} s, and changes until then are folded into that write. Other ` +
    "nodes' writes are not affected; later deferrals within the window are counted in " +
    "talosccm_node_writes_deferred_total, not reported again"
  );
}

/** PeerInputOverLimit: the Node itself is over bound `limit` (`got` counted). */
export function nodeOverLimitNote(limit: PeerLimitName, got: number, initializing: boolean): string {
  const then = initializing ? "it stays tainted" : "it keeps its current state";
  return `${overLimitMessage(limit, got)}; this CCM does not reconcile the node (${then}) until it is back within the bound`;
}

/** PeerInputOverLimit: Talos on the node's `ips` answered over a per-machine bound (`error`). */
export function talosOverLimitNote(ips: readonly string[], error: string, initializing: boolean): string {
  return (
    `Cannot use the node's facts from Talos (${ips.join(", ")}): ${error}; the node ` +
    `${stays(initializing)} until Talos answers within the bound`
  );
}

/** TalosAPIError: Talos on the node's `ips` fails while the node waits for its initialization. */
export function talosErrorNote(ips: readonly string[], error: string): string {
  return `Cannot read the node's facts from Talos (${ips.join(", ")}): ${error}; the node stays tainted until Talos answers`;
}

/** TalosNodeMismatch: Talos on `ip`, an IP of the node, is node `nodename`. */
export function talosMismatchNote(ip: string, nodename: string, initializing: boolean): string {
  return (
    `Talos on ${ip}, an IP of this node (${PROVIDED_NODE_IP_ANNOTATION} or InternalIP), is node ` +
    `${JSON.stringify(nodename)}: its facts are not used, and the node ${stays(initializing)} until Talos on one ` +
    "of its IPs confirms its name (retried with backoff)"
  );
}

/** NodeIPUnknown: the Node has no IP to ask Talos on. */
export const NO_NODE_IP_NOTE =
  `The node has no ${PROVIDED_NODE_IP_ANNOTATION} annotation and no InternalIP address: ` +
  "run the kubelet with --cloud-provider=external and --node-ip";

/** WaitingForInstanceID: the platform names its instances and Talos has not published the ID. */
export function waitingForIDNote(
  decision: Extract<ProviderIDDecision, { action: "wait" }>,
  ip: string,
  fallback: string,
  initializing: boolean,
): string {
  return (
    `Waiting for ${decision.waitingFor}. Until then the node ${
      initializing ? `keeps its ${UNINITIALIZED_TAINT} taint` : "gets no providerID"
    }, rather than the fallback ${fallback}, which its cloud's controllers cannot parse and which could never ` +
    `be changed. Check \`talosctl -n ${ip} get platformmetadata\` and machined's log; to give it a ` +
    "providerID now, set ProviderID in a rule's platformMetadata, or set the Node's spec.providerID yourself " +
    "(it is then kept)"
  );
}

/** TransformerError's addition while a taint of the rules failed to render on an initializing node. */
export const HELD_FOR_TAINTS_NOTE =
  "; the node stays tainted (uninitialized) until every taint of its rules renders: initialized without one, " +
  "pods could run where the rule keeps them off";

/** NodeIPNotOnMachine: node IPs `added` are not on the machine Talos confirmed on `confirmedIP`. */
export function notOnMachineNote(
  added: readonly string[],
  source: NodeIPs["source"],
  confirmedIP: string,
  onMachine: readonly string[],
): string {
  const where =
    source === "annotation" ? `in its ${PROVIDED_NODE_IP_ANNOTATION} annotation` : "among its InternalIPs";
  return (
    `Node IP ${added.join(", ")} (${where}) is not an address of the machine Talos confirmed as this node ` +
    `on ${confirmedIP}: it is not written as an InternalIP and Talos is not asked there; the node's ` +
    `InternalIPs are ${onMachine.join(", ")}. A kubelet only announces addresses of its own host ` +
    "(--node-ip); the IP is used once Talos reports it on the machine"
  );
}
