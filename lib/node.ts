// The cloud-node controller: initializes Nodes that a kubelet registered with
// `--cloud-provider=external` from what Talos knows about them, and keeps them current.
//
// One Node's path, readable in three files: informer event (lib/kubecache.ts) → WorkQueue("cloud-node")
// (lib/queue.ts) → CloudNodeController.reconcile(name) here, whose steps read top to bottom:
//   1. #readNode: the Node as the informer caches it, and its record (lib/managedrecord.ts);
//   2. #factsOf: its IPs (lib/nodeview.ts nodeIPs) and its Talos facts from the watch cache
//      (lib/taloswatchcache.ts TalosWatchCache.facts);
//   3. #decide: ONE call, lib/desirednode.ts decideNode (pure), from Node and facts to the patch:
//      rules (lib/transform.ts), providerID, addresses (lib/addresses.ts), labels, annotations,
//      taints and the record, the patch; then the reports of what it decided;
//   4. #write: at most two writes through the kube client (lib/kube.ts): status addresses, then one
//      JSON patch of metadata and spec that also removes the uninitialized taint;
//   5. #reportWritten: Event, metrics, log.
// The watch cache re-queues a Node whenever its facts change; config reloads re-queue every Node.
//
// The Node's IPs are its kubelet's to write: no fact is used before Talos confirms, on the IP it came
// from, that the machine answering there is the node (the watch cache's job), and a node IP that
// machine does not have is not written as an InternalIP.

import type { CompiledConfig } from "./config.ts";
import type { ControllerContext } from "./controller.ts";
import {
  type DesiredNode,
  decideNode,
  describeTransformErrors,
  fallbackProviderID,
  isForeign,
  isUninitialized,
  type NodeDecision,
  type NodePatch,
  type ProviderIDDecision,
} from "./desirednode.ts";
import { type Address, type ConflictingWrite, conflictingWrites } from "./fieldowners.ts";
import { isNotFound, type KubeApi, KubeError, PATCH } from "./kubeapi.ts";
import { handlerErrors, type Informer } from "./kubecache.ts";
import type { EventRecorder } from "./kubeevents.ts";
import { type Logger, logger } from "./log.ts";
import { type ManagedRecordRead, type RecordProblem, readManagedRecord } from "./managedrecord.ts";
import { LabelCap, type Registry } from "./metrics.ts";
import {
  type LeanNode,
  type NodeIPs,
  nodeIPs,
  sameAddresses,
  sameTaints,
  statusUnknown,
} from "./nodeview.ts";
import { OVER_LIMIT_REASON, overLimitMessage, PEER_LIMITS, peerRejections } from "./peerlimits.ts";
import { type ReconcileResult, runWorkers, WorkQueue } from "./queue.ts";
import {
  type FactsNeeds,
  type FactsState,
  TalosWatchCache,
  type TalosWatchClient,
} from "./taloswatchcache.ts";
import {
  rulesMayRead,
  SYSTEM_INFORMATION_FIELDS,
  TALOS_VERSION_FIELD,
  type TransformResult,
} from "./transform.ts";
import { recordTransform } from "./transformmetrics.ts";
import {
  FIELD_MANAGER,
  MANAGED_ANNOTATION,
  MANAGED_DIGEST_LABEL,
  PROVIDED_NODE_IP_ANNOTATION,
  UNINITIALIZED_TAINT,
} from "./wellknown.ts";
import { WriteBudget } from "./writebudget.ts";

const log = logger("cloud-node");

/** This CCM's Node patches are recorded under {@link FIELD_MANAGER}, whatever the User-Agent. */
const AS_FIELD_MANAGER = { query: { fieldManager: FIELD_MANAGER } };
/** The same, for a write whose answer nothing reads. */
const AS_FIELD_MANAGER_UNREAD = { ...AS_FIELD_MANAGER, discardAnswer: true };
/** Of the status patch's answer only the resourceVersion is read: the Node is not parsed. */
const AS_FIELD_MANAGER_RV = { ...AS_FIELD_MANAGER, resourceVersionOnly: true };

/** The optional facts the rules read (each costs a Talos call per node). */
function factsNeeds(config: CompiledConfig): FactsNeeds {
  return {
    systemInformation: rulesMayRead(config, SYSTEM_INFORMATION_FIELDS),
    talosVersion: rulesMayRead(config, [TALOS_VERSION_FIELD]),
  };
}

/** The Warning Event (reason, note) for each way a node's record can be untrustworthy. */
const RECORD_PROBLEMS: Record<RecordProblem, readonly [string, string]> = {
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

/**
 * Whether two label or annotation maps hold the same entries: by reference first (the Node view
 * keeps the previous version's object when nothing changed, lib/nodeview.ts leanNode), else key by
 * key without allocating.
 */
function sameEntries(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  if (a === b) return true;
  let n = 0;
  for (const k in a) {
    if (!Object.hasOwn(b, k) || a[k] !== b[k]) return false;
    n++;
  }
  for (const k in b) if (Object.hasOwn(b, k)) n--;
  return n === 0;
}

/**
 * Whether a Node update touches what this controller reads or writes (heartbeats do not). Its cost
 * does not grow with the Node's size on a heartbeat: unchanged maps and lists are the previous
 * version's own objects, compared by reference.
 */
export function relevantChange(a: LeanNode, b: LeanNode): boolean {
  return !(
    (a.metadata.deletionTimestamp ?? "") === (b.metadata.deletionTimestamp ?? "") &&
    (a.spec.providerID ?? "") === (b.spec.providerID ?? "") &&
    sameTaints(a.spec.taints, b.spec.taints) &&
    sameAddresses(a.status.addresses, b.status.addresses) &&
    sameEntries(a.metadata.labels, b.metadata.labels) &&
    sameEntries(a.metadata.annotations, b.metadata.annotations)
  );
}

/** One reconcile pass over one Node: what its steps share. */
interface Pass {
  /** The queue's key: the Node's name. */
  name: string;
  node: LeanNode;
  /** The config this pass applies (read once, at its start). */
  config: CompiledConfig;
  /** The Node still has the uninitialized taint. */
  initializing: boolean;
  /** The action its Events name: InitializeNode or UpdateNode. */
  action: string;
  /** The Node's record of what the rules put there, read with the Node. */
  managed: ManagedRecordRead;
}

/** The action of Events about a node: InitializeNode while it has the uninitialized taint, else UpdateNode. */
function actionOf(initializing: boolean): "InitializeNode" | "UpdateNode" {
  return initializing ? "InitializeNode" : "UpdateNode";
}

/** A Node's Talos facts, ready to use. */
type ReadyFacts = Extract<FactsState, { ready: true }>;

/** What a Node's Talos facts still wait for. */
type WaitingFacts = Extract<FactsState, { ready: false }>;

/** What {@link CloudNodeController} works with (the controller context's parts it uses). */
export interface CloudNodeOptions {
  client: Pick<KubeApi, "patch">;
  nodes: Pick<Informer<LeanNode>, "addHandlers" | "get" | "list">;
  events: Pick<EventRecorder, "record">;
  registry: Registry;
  config: { readonly current: CompiledConfig; onChange(fn: (c: CompiledConfig) => void): () => void };
  talos: TalosWatchClient & { readonly clusterName: string };
  /** `--concurrent-node-syncs`. */
  workers: number;
  /** `--node-status-update-frequency`. */
  statusUpdateFrequencyMs: number;
  /**
   * At most one ConflictingWriter Event per node and field in this window (default 10 minutes); also
   * the window of the WriteBudgetExceeded and PeerInputOverLimit Events (one per node in it).
   */
  conflictWindowMs?: number;
  /** The per-node write budget's pace: one write per this many ms after the burst (default 5 s). */
  writePaceMs?: number;
  now?: () => number;
  log?: Logger;
}

/** How many field manager names get a label value of their own in the conflicting-writes metric. */
const CONFLICT_MANAGERS = 16;

/** A change of a field this soon after the write-back of the previous one continues a write loop. */
const LOOP_GAP_MS = 10_000;

/**
 * The longest write-back delay for a field the node's own credentials can write (all but
 * spec.taints): see {@link writeBackDelayMs}.
 */
export const NODE_WRITABLE_MAX_DELAY_MS = 1000;

/**
 * The per-node write budget's default pace: after a burst of PEER_LIMITS.node_write_burst writes,
 * one write per 5 s. Half the kubelet's own node status update period (10 s), and at the client's
 * default 20 QPS one node can then spend at most 1 % of it.
 */
export const NODE_WRITE_PACE_MS = 5000;

/** What is remembered about another writer of one field of one node. */
interface FieldConflict {
  /** When its ConflictingWriter Event was recorded (the window starts there). */
  eventMs: number;
  /** When it last changed the field, and how long that write-back waited. */
  lastMs: number;
  delayMs: number;
  /** Changes in a row each within {@link LOOP_GAP_MS} of the previous write-back. */
  streak: number;
}

/**
 * How long the write-back of a field another writer changed waits, by `streak`: changes in a row,
 * each coming within 10 s of the previous write-back. A writer that changes the field every few
 * minutes (a cloud CCM's status loop) is corrected at once every time; one that changes it again
 * right after each write-back (a watch-driven controller) backs both off, 1 s doubling to 5 min,
 * instead of a write loop.
 */
export function correctionDelayMs(streak: number): number {
  return streak <= 0 ? 0 : Math.min(300_000, 1000 * 2 ** (streak - 1));
}

/**
 * The write-back delay of a change to `field` another writer made, `streak` changes in a row: the
 * full backoff ({@link correctionDelayMs}) only for spec.taints, which the node's own credentials
 * cannot write (NodeRestriction admission refuses it: "node %q is not allowed to modify taints",
 * plugin/pkg/admission/noderestriction/admission.go, Update branch). managedFields record a
 * manager name, not a user: a kubelet may write its status, labels, annotations and providerID
 * under any name (e.g. another cloud's CCM), so a backoff on those fields could be earned by the
 * node itself, keeping its false address for up to 5 minutes per round. There the delay is capped
 * at {@link NODE_WRITABLE_MAX_DELAY_MS}; a real second controller fighting over such a field is
 * bounded by the per-node write budget instead (lib/writebudget.ts), never by the backoff.
 * @example writeBackDelayMs("status.addresses", 9) // 1000
 * @example writeBackDelayMs("spec.taints", 9) // 256000
 */
export function writeBackDelayMs(field: ConflictingWrite["field"], streak: number): number {
  const delay = correctionDelayMs(streak);
  return field === "spec.taints" ? delay : Math.min(delay, NODE_WRITABLE_MAX_DELAY_MS);
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

function controllerMetrics(reg: Registry) {
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
    handlerErrors: handlerErrors(reg),
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

/**
 * The cloud-node controller: informer handlers turn Node events into keys; Talos watch changes and
 * config reloads re-queue nodes; `--concurrent-node-syncs` workers run {@link reconcile}.
 */
export class CloudNodeController {
  readonly #opts: CloudNodeOptions;
  readonly #queue: WorkQueue;
  readonly #facts: TalosWatchCache;
  readonly #m: ReturnType<typeof controllerMetrics>;
  readonly #log: Logger;
  /**
   * Nodes just written, with the resourceVersions that do not show our writes yet (the one the
   * writes were based on, and the one after the status write): reconciling on those would redo them.
   */
  readonly #stale = new Map<string, Set<string>>();
  /**
   * Node IPs left out because the confirmed machine lacks them, per node, as last reported: each is
   * reported once when it starts being left out, not at every pass (whose action may differ).
   */
  readonly #notOnMachine = new Map<string, readonly string[]>();
  /** Per node and field another writer changed, what is remembered about it (pruned with the node). */
  readonly #conflicts = new Map<string, Map<string, FieldConflict>>();
  /**
   * Per node, the address list its latest pass decided ({@link decideNode}; the Node's own list when
   * they are equal, so that a settled node costs no copy): what a second writer's address entries
   * are compared with ({@link conflictingWrites}).
   */
  readonly #wantAddresses = new Map<string, readonly Address[]>();
  readonly #managers = new LabelCap(CONFLICT_MANAGERS);
  readonly #conflictWindowMs: number;
  readonly #now: () => number;
  /** Nodes waiting for their instance ID (lib/desirednode.ts decideProviderID), since when (ms). */
  readonly #waitingForID = new Map<string, number>();
  /** Per-node write budget (lib/writebudget.ts): one node cannot spend the shared client rate limit. */
  readonly #budget: WriteBudget;
  /** Nodes whose writes wait for their budget, until when (ms): changes meanwhile join that pass. */
  readonly #deferredUntil = new Map<string, number>();
  /** Per node and Event reason, when that once-per-window Warning was last recorded (ms). */
  readonly #windowEvents = new Map<string, Map<string, number>>();
  /** {@link factsNeeds} of the config it was computed for (templates are walked once per config). */
  #needs: { config: CompiledConfig; needs: FactsNeeds } | undefined;
  #stopped = false;

  constructor(opts: CloudNodeOptions) {
    if (!(opts.workers >= 1)) throw new TypeError("CloudNodeController: workers must be at least 1");
    this.#opts = opts;
    this.#log = opts.log ?? log;
    this.#conflictWindowMs = opts.conflictWindowMs ?? 600_000;
    this.#now = opts.now ?? Date.now;
    this.#budget = new WriteBudget({
      burst: PEER_LIMITS.node_write_burst.value,
      paceMs: opts.writePaceMs ?? NODE_WRITE_PACE_MS,
      now: this.#now,
    });
    this.#queue = new WorkQueue("cloud-node", { registry: opts.registry });
    this.#facts = new TalosWatchCache({
      talos: opts.talos,
      onChange: (name) => this.#enqueue(name),
      refreshMs: opts.statusUpdateFrequencyMs,
      nodeStatusUnknown: (name) => {
        const n = this.#opts.nodes.get(name);
        return n !== undefined && statusUnknown(n);
      },
    });
    this.#m = controllerMetrics(opts.registry);
    opts.registry.onCollect(() => {
      const { nodes, down, downStatusUnknown } = this.#facts.stats();
      this.#m.watches.set({ state: "healthy" }, nodes - down);
      this.#m.watches.set({ state: "down" }, down - downStatusUnknown);
      this.#m.watches.set({ state: "down_node_status_unknown" }, downStatusUnknown);
      this.#m.waitingForInstanceID.set(undefined, this.#waitingForID.size);
      let tainted = 0;
      for (const n of this.#opts.nodes.list()) if (isUninitialized(n)) tainted++;
      this.#m.uninitialized.set(undefined, tainted);
    });
  }

  /** Runs until `signal` aborts, then stops the workers and every Talos watch. */
  async run(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return;
    const enqueue = (n: LeanNode) => this.#enqueue(n.metadata.name);
    // Reconcile mode applies changed rules to every node; drop-in mode adds what they produce now,
    // as the reference would after a restart with the new file (taints only at initialization).
    const stopConfig = this.#opts.config.onChange(() => {
      for (const n of this.#opts.nodes.list()) enqueue(n);
    });
    this.#opts.nodes.addHandlers({
      name: "cloud-node",
      onAdd: enqueue,
      onUpdate: (old, n) => this.#onUpdate(old, n),
      onDelete: (n) => {
        if (this.#stopped) return;
        this.#forget(n.metadata.name);
      },
    });
    signal.addEventListener("abort", () => this.#queue.shutDown(), { once: true });
    try {
      await runWorkers(this.#queue, this.#opts.workers, (name) => this.reconcile(name), this.#log);
    } finally {
      this.#stopped = true;
      stopConfig();
      this.#facts.close();
    }
  }

  /**
   * Queues node `name`, or, while its writes wait for its budget (a pass deferred, or not one
   * write's worth left), joins the pass due when they may be made (the queue keeps one entry per
   * node: changes meanwhile are coalesced into that pass). A node that spent its budget is thus
   * decided on at most once per token, however often it changes: deciding sooner could only end in
   * a write that waits (a kubelet rewriting 1,024 addresses cost the thread ~5 ms per decision).
   */
  #enqueue(name: string): void {
    const until = this.#deferredUntil.get(name);
    let waitMs = until === undefined ? 0 : until - this.#now();
    if (waitMs <= 0) {
      waitMs = this.#budget.waitFor(name);
      const node = waitMs > 0 ? this.#opts.nodes.get(name) : undefined;
      if (node) this.#defer(name, node, actionOf(isUninitialized(node)), waitMs);
    }
    if (waitMs > 0) this.#queue.addAfter(name, waitMs);
    else this.#queue.add(name);
  }

  /**
   * The Node informer's update handler: a relevant change queues the node, after the write-back
   * delay when it undoes another writer's change. An error noticing conflicts is contained: logged,
   * counted in talosccm_informer_handler_errors_total, and the node is queued all the same.
   */
  #onUpdate(old: LeanNode, n: LeanNode): void {
    if (!relevantChange(old, n)) return;
    let delayMs = 0;
    try {
      if (n.metadata.overLimit === undefined) delayMs = this.#noticeConflicts(old, n);
    } catch (err) {
      this.#m.handlerErrors.inc({ controller: "cloud-node" });
      this.#log.error("Cannot compare the Node's field owners; queuing it", err, { node: n.metadata.name });
    }
    if (delayMs > 0) this.#queue.addAfter(n.metadata.name, delayMs);
    else this.#enqueue(n.metadata.name);
  }

  /**
   * Brings one Node in line with its Talos facts and the rules, in five steps: read the Node (1), its
   * facts (2), decide (3, one call to lib/desirednode.ts decideNode, which ends with the patch), write
   * (4), report (5); the methods below follow in that order. Safe to run twice; returns without
   * writing when the Node is gone or over a per-peer bound, when facts are missing (their arrival
   * re-queues the node) or when nothing differs, and asks to run again later when the node's write
   * budget is spent.
   * @returns when to run again, if the writes wait for the node's write budget.
   * @throws when a write fails (the queue retries with backoff).
   */
  async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const pass = this.#readNode(name);
    if (!pass) return undefined;
    const found = this.#factsOf(pass);
    if (!found) return undefined;
    const { want, patch, hold } = this.#decide(pass, found.ips, found.state);
    if (hold) return undefined;
    // Equal to the Node's own list unless the patch changes it: then that list is kept, not a copy.
    this.#wantAddresses.set(name, patch.addresses ?? pass.node.status.addresses);
    const waitMs = this.#spend(pass, patch);
    if (waitMs > 0) return { requeueAfterMs: waitMs };
    if (!(await this.#write(pass, patch))) return undefined;
    this.#reportWritten(pass, patch, want, found.state.nodeIP);
    return undefined;
  }

  /**
   * Takes the writes of `patch` from the node's write budget: 0 when taken (or nothing to write);
   * otherwise the ms until they are due, after {@link #defer}.
   */
  #spend(pass: Pass, patch: NodePatch): number {
    const cost = (patch.addresses ? 1 : 0) + (patch.ops.length > 0 ? 1 : 0);
    if (cost === 0) return 0;
    const waitMs = this.#budget.take(pass.name, cost);
    if (waitMs === 0) {
      this.#deferredUntil.delete(pass.name);
      return 0;
    }
    this.#defer(pass.name, pass.node, pass.action, waitMs);
    return waitMs;
  }

  /**
   * Node `name`'s pass waits `waitMs` for its write budget (a pass that would write, or a change
   * while not one write's worth is left): notes when it is due, counts it, and records a Warning
   * WriteBudgetExceeded Event once per window.
   */
  #defer(name: string, node: LeanNode, action: string, waitMs: number): void {
    this.#deferredUntil.set(name, this.#now() + waitMs);
    this.#m.deferred.inc();
    this.#log.v(2).info("Write budget spent; writing later", { node: name, waitMs });
    const burst = PEER_LIMITS.node_write_burst.value;
    const pace = (this.#opts.writePaceMs ?? NODE_WRITE_PACE_MS) / 1000;
    this.#warnOncePerWindow(
      { name, node, action },
      "WriteBudgetExceeded",
      `What this CCM writes to the node changed faster than its per-node write budget (${burst} writes at once, ` +
        `then one every ${pace} s; e.g. an address that keeps appearing and disappearing): the latest state is ` +
        `written in ${Math.ceil(waitMs / 1000)} s, and changes until then are folded into that write. Other ` +
        "nodes' writes are not affected; later deferrals within the window are counted in " +
        "talosccm_node_writes_deferred_total, not reported again",
    );
  }

  /** A Warning Event of `reason` about the pass's node, at most once per node and reason in the window. */
  #warnOncePerWindow(
    { name, node, action }: Pick<Pass, "name" | "node" | "action">,
    reason: string,
    note: string,
  ): void {
    const now = this.#now();
    const sent = this.#windowEvents.get(name) ?? new Map<string, number>();
    const last = sent.get(reason);
    if (last !== undefined && now - last < this.#conflictWindowMs) return;
    sent.set(reason, now);
    this.#windowEvents.set(name, sent);
    this.#warn(node, reason, action, note);
  }

  /**
   * Step 1: node `name` as the informer caches it, and what this pass does to it. Undefined when the
   * Node is gone or being deleted (everything held about it is dropped), or when the cache does not
   * show our last write yet.
   */
  #readNode(name: string): Pass | undefined {
    const node = this.#opts.nodes.get(name);
    if (!node || node.metadata.deletionTimestamp) {
      this.#forget(name);
      return undefined;
    }
    // Our last write is not in the cache yet; the informer's update re-queues the node.
    if (this.#stale.get(name)?.has(node.metadata.resourceVersion)) return undefined;
    this.#stale.delete(name);
    const initializing = isUninitialized(node);
    const pass = {
      name,
      node,
      config: this.#opts.config.current,
      initializing,
      action: actionOf(initializing),
      managed: readManagedRecord(node.metadata),
    };
    if (node.metadata.overLimit === undefined) return pass;
    this.#reportOverLimit(pass);
    return undefined;
  }

  /**
   * Reports a Node over a per-peer bound (lib/nodeview.ts nodeOverLimit), which is not reconciled
   * (fail closed: an initializing one keeps its taint): counted in talosccm_peer_input_rejected_total
   * at each refused pass, a Warning PeerInputOverLimit Event once per window. Its Talos watches stop
   * until it is back within its bounds (its write budget is kept).
   */
  #reportOverLimit(pass: Pass): void {
    const over = pass.node.metadata.overLimit;
    if (over === undefined) return;
    this.#facts.forget(pass.name);
    this.#m.rejected.inc({ peer: "node", limit: over.limit });
    if (pass.initializing) this.#m.failed.inc({ reason: "peer_limit" });
    this.#log.v(2).info("Node over a per-peer bound; not reconciled", { node: pass.name, ...over });
    const then = pass.initializing ? "it stays tainted" : "it keeps its current state";
    this.#warnOncePerWindow(
      pass,
      OVER_LIMIT_REASON,
      `${overLimitMessage(over.limit, over.got)}; this CCM does not reconcile the node (${then}) until it is ` +
        "back within the bound",
    );
  }

  /**
   * Step 2: the Node's IPs, and its Talos facts from the watch cache (which watches those IPs from
   * now on). Undefined, after reporting why, while there are no usable facts; their arrival
   * re-queues the node.
   */
  #factsOf(pass: Pass): { ips: NodeIPs; state: ReadyFacts } | undefined {
    const { name, node, config } = pass;
    const ips = nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      config.global.preferIPv6,
    );
    if (ips.ips.length === 0) {
      // Watches on addresses the node no longer claims would follow some other machine.
      this.#forget(name);
      this.#reportNoNodeIP(pass);
      return undefined;
    }
    this.#facts.track(name, ips.ips);
    if (this.#needs?.config !== config) this.#needs = { config, needs: factsNeeds(config) };
    const state = this.#facts.facts(name, this.#needs.needs);
    if (!state.ready) {
      this.#reportWaiting(pass, ips, state);
      return undefined;
    }
    return { ips, state };
  }

  /**
   * Step 3: the decision, one call to {@link decideNode} (pure) with this pass's Node, record, IPs
   * and facts; then what it found is reported: node IPs the machine lacks, the providerID wait, rule
   * values that failed and an untrustworthy record. It holds (writes nothing) while an initializing
   * node waits for its instance ID (it stays tainted; the PlatformMetadata watch re-queues it).
   */
  #decide(pass: Pass, ips: NodeIPs, state: ReadyFacts): NodeDecision {
    const { node, config, managed } = pass;
    const clusterName = this.#opts.talos.clusterName;
    const input = { node, ips, facts: state.facts, nodeIP: state.nodeIP, managed, config, clusterName };
    const decided = decideNode(input, () => performance.now());
    recordTransform(this.#opts.registry, decided.rulesMs / 1000, decided.rules.errors.length);
    this.#reportNotOnMachine(node, pass.action, ips.source, decided.ips, state.nodeIP);
    this.#reportProviderID(pass, decided.providerID, state.nodeIP);
    if (!decided.hold || decided.taintsFailed)
      this.#reportRuleProblems(pass, decided.rules, decided.taintsFailed);
    return decided;
  }

  /**
   * Step 4: sends the patch decideNode ended with through the kube client.
   * @returns false when the Node is gone.
   * @throws {Error} when a write fails otherwise (the cause attached).
   */
  async #write(pass: Pass, patch: NodePatch): Promise<boolean> {
    try {
      await this.#patchNode(pass, patch);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      if (pass.initializing) this.#m.failed.inc({ reason: "kubernetes" });
      // A failed `test` of the guarded patch answers 422: the Node changed since it was read.
      const hint =
        err instanceof KubeError && err.status === 422 ? " (the Node changed since it was read?)" : "";
      throw new Error(
        `Cannot ${pass.initializing ? "initialize" : "update"} node ${pass.name}: ${(err as Error).message}${hint}`,
        { cause: err },
      );
    }
  }

  /**
   * The writes of a {@link NodePatch}: the status addresses (merge patch), then the JSON patch of
   * metadata and spec. Remembers the resourceVersions that do not show them yet.
   */
  async #patchNode({ name, node }: Pass, patch: NodePatch): Promise<void> {
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    // Reconciles on these versions would redo our writes; the informer delivers the final one.
    const stale = new Set([node.metadata.resourceVersion]);
    if (patch.addresses) {
      const res = await this.#opts.client.patch<{ metadata?: { resourceVersion?: string } }>(
        `${path}/status`,
        { status: { addresses: patch.addresses } },
        PATCH.merge,
        AS_FIELD_MANAGER_RV,
      );
      const rv = res?.metadata?.resourceVersion;
      if (rv !== node.metadata.resourceVersion) this.#stale.set(name, stale);
      if (rv !== undefined && patch.ops.length > 0) stale.add(rv);
    }
    if (patch.ops.length > 0) {
      await this.#opts.client.patch<void>(path, patch.ops, PATCH.json, AS_FIELD_MANAGER_UNREAD);
      this.#stale.set(name, stale);
    }
  }

  /** Step 5: the Event, metrics and log line of a pass that wrote (or found nothing to write). */
  #reportWritten(pass: Pass, patch: NodePatch, want: DesiredNode, nodeIP: string): void {
    const { name, node, action } = pass;
    if (pass.initializing) {
      this.#m.initialized.inc();
      const created = Date.parse(node.metadata.creationTimestamp);
      if (Number.isFinite(created))
        this.#m.duration.observe(undefined, Math.max(0, this.#now() - created) / 1000);
      const target = { kind: "Node", name, uid: node.metadata.uid };
      void this.#opts.events.record(target, "Normal", "Synced", action, "Node synced successfully");
      this.#log.info("Initialized node", {
        node: name,
        providerID: want.providerID ?? node.spec.providerID ?? "",
        nodeIP,
      });
    } else if (patch.addresses || patch.ops.length > 0) {
      this.#log.v(2).info("Updated node", {
        node: name,
        addresses: patch.addresses !== undefined,
        metadataOps: patch.ops.length,
      });
    } else {
      // A pass that found nothing to write: the Node is as this controller wants it.
      this.#log.v(4).info("Node up to date", { node: name });
    }
  }

  #warn(node: LeanNode, reason: string, action: string, note: string): void {
    const target = { kind: "Node", name: node.metadata.name, uid: node.metadata.uid };
    void this.#opts.events.record(target, "Warning", reason, action, note);
  }

  /** Drops everything held about node `name`: its Talos watches and facts, and what was reported. */
  #forget(name: string): void {
    this.#facts.forget(name);
    this.#stale.delete(name);
    this.#notOnMachine.delete(name);
    this.#waitingForID.delete(name);
    this.#conflicts.delete(name);
    this.#wantAddresses.delete(name);
    this.#deferredUntil.delete(name);
    this.#windowEvents.delete(name);
    this.#budget.forget(name);
  }

  /**
   * Reports the changes another field manager made to fields this CCM owns between two versions
   * of a Node ({@link conflictingWrites}): each is counted; a Warning ConflictingWriter Event and a
   * log line come at most once per node and field in the window, later ones are logged at --v=2.
   * @returns how long the write-back should wait ({@link correctionDelayMs}).
   */
  #noticeConflicts(old: LeanNode, node: LeanNode): number {
    const name = node.metadata.name;
    // A providerID set while this CCM waits for the instance ID settles the wait; nobody fights over it.
    const waiting = this.#waitingForID.has(name);
    const found = conflictingWrites(
      old,
      node,
      FIELD_MANAGER,
      readManagedRecord(old.metadata).record.taints,
      this.#wantAddresses.get(name),
    ).filter((c) => !(waiting && c.field === "spec.providerID"));
    if (found.length === 0) return 0;
    const fields = this.#conflicts.get(name) ?? new Map<string, FieldConflict>();
    this.#conflicts.set(name, fields);
    const now = this.#now();
    let delayMs = 0;
    for (const c of found) {
      this.#m.conflicts.inc({ field: c.field, manager: this.#managers.value(c.manager) });
      const seen = fields.get(c.field);
      const loop = seen !== undefined && now - seen.lastMs < seen.delayMs + LOOP_GAP_MS;
      const streak = loop ? seen.streak + 1 : 0;
      const delay = writeBackDelayMs(c.field, streak);
      delayMs = Math.max(delayMs, delay);
      const facts = { node: name, field: c.field, keys: c.keys, manager: c.manager, writeBackDelayMs: delay };
      if (seen && now - seen.eventMs < this.#conflictWindowMs) {
        Object.assign(seen, { lastMs: now, delayMs: delay, streak });
        this.#log.v(2).info("Another writer changed a field this CCM owns, again", facts);
        continue;
      }
      fields.set(c.field, { eventMs: now, lastMs: now, delayMs: delay, streak });
      this.#log.warn(
        "Another writer changed a field this CCM owns; writing it again from Talos and the rules",
        facts,
      );
      const action = actionOf(isUninitialized(node));
      this.#warn(node, "ConflictingWriter", action, describeConflict(c, node, this.#conflictWindowMs));
    }
    return delayMs;
  }

  /**
   * Reports a node that waits for its instance ID (lib/desirednode.ts decideProviderID): a Warning Event at
   * each pass (the recorder folds repeats into one Event's series), a count while it initializes, a
   * log line when the wait starts and when it ends.
   */
  #reportProviderID(
    { name, node, initializing, action }: Pass,
    decision: ProviderIDDecision,
    ip: string,
  ): void {
    const since = this.#waitingForID.get(name);
    if (decision.action !== "wait") {
      if (since === undefined) return;
      this.#waitingForID.delete(name);
      this.#log.info("Instance ID published; writing the providerID", {
        node: name,
        providerID: decision.action === "write" ? decision.providerID : (node.spec.providerID ?? ""),
        waitedSeconds: Math.round((this.#now() - since) / 1000),
      });
      return;
    }
    if (since === undefined) {
      this.#waitingForID.set(name, this.#now());
      this.#log.warn("Waiting for the instance ID before writing a providerID", {
        node: name,
        platform: decision.platform,
        nodeIP: ip,
        tainted: initializing,
      });
    }
    if (initializing) this.#m.failed.inc({ reason: "instance_id" });
    const fallback = fallbackProviderID(decision.platform, ip);
    this.#warn(
      node,
      "WaitingForInstanceID",
      action,
      `Waiting for ${decision.waitingFor}. Until then the node ${
        initializing ? `keeps its ${UNINITIALIZED_TAINT} taint` : "gets no providerID"
      }, rather than the fallback ${fallback}, which its cloud's controllers cannot parse and which could never ` +
        `be changed. Check \`talosctl -n ${ip} get platformmetadata\` and machined's log; to give it a ` +
        "providerID now, set ProviderID in a rule's platformMetadata, or set the Node's spec.providerID yourself " +
        "(it is then kept)",
    );
  }

  /** Reports a Node without any IP to ask Talos on (only while it waits for its initialization). */
  #reportNoNodeIP({ node, initializing, action }: Pass): void {
    if (!initializing) return;
    this.#m.failed.inc({ reason: "nodeip" });
    this.#warn(
      node,
      "NodeIPUnknown",
      action,
      `The node has no ${PROVIDED_NODE_IP_ANNOTATION} annotation and no InternalIP address: ` +
        "run the kubelet with --cloud-provider=external and --node-ip",
    );
  }

  /**
   * Reports why a Node's facts are not usable yet: Talos on one of its IPs is another node, or
   * (while initializing) Talos fails; otherwise only logs what they wait for.
   */
  #reportWaiting(pass: Pass, ips: NodeIPs, state: WaitingFacts): void {
    const { name, node, initializing, action } = pass;
    if (state.mismatch) {
      const { ip, nodename } = state.mismatch;
      if (initializing) this.#m.failed.inc({ reason: "identity" });
      this.#warn(
        node,
        "TalosNodeMismatch",
        action,
        `Talos on ${ip}, an IP of this node (${PROVIDED_NODE_IP_ANNOTATION} or InternalIP), is node ` +
          `${JSON.stringify(nodename)}: its facts are not used, and the node ` +
          `${initializing ? "stays tainted" : "keeps its current state"} until Talos on one of its IPs confirms its ` +
          "name (retried with backoff)",
      );
      return;
    }
    if (state.limit !== undefined && state.error !== undefined) {
      // Talos answered over a per-machine bound (already counted where it was refused): the node fails alone.
      if (initializing) this.#m.failed.inc({ reason: "peer_limit" });
      this.#warnOncePerWindow(
        pass,
        OVER_LIMIT_REASON,
        `Cannot use the node's facts from Talos (${ips.ips.join(", ")}): ${state.error}; the node ` +
          `${initializing ? "stays tainted" : "keeps its current state"} until Talos answers within the bound`,
      );
      return;
    }
    if (initializing && state.error !== undefined) {
      this.#m.failed.inc({ reason: "talos" });
      this.#warn(
        node,
        "TalosAPIError",
        action,
        `Cannot read the node's facts from Talos (${ips.ips.join(", ")}): ${state.error}; the node stays tainted until Talos answers`,
      );
    }
    this.#log.v(4).info("Waiting for Talos facts", { node: name, for: state.waitingFor });
  }

  /** Reports rule values that failed and a record that is not believed (not on a skipped foreign node). */
  #reportRuleProblems({ node, config, action, managed }: Pass, result: TransformResult, held = false): void {
    if (result.errors.length > 0) {
      const stays = held
        ? "; the node stays tainted (uninitialized) until every taint of its rules renders: initialized without one, pods could run where the rule keeps them off"
        : "";
      this.#warn(node, "TransformerError", action, `${describeTransformErrors(result.errors)}${stays}`);
    }
    if (managed.problem !== undefined && !(config.global.skipForeignNode && isForeign(node))) {
      const [reason, note] = RECORD_PROBLEMS[managed.problem];
      this.#warn(node, reason, action, note);
    }
  }

  /**
   * Reports node IPs newly found missing from the machine Talos confirmed as the node (one Warning
   * Event and one count each); IPs still missing since the last report are not reported again.
   */
  #reportNotOnMachine(
    node: LeanNode,
    action: string,
    source: NodeIPs["source"],
    split: NodeDecision["ips"],
    confirmedIP: string,
  ): void {
    const name = node.metadata.name;
    const before = this.#notOnMachine.get(name) ?? [];
    if (split.notOnMachine.length === 0) {
      this.#notOnMachine.delete(name);
      return;
    }
    this.#notOnMachine.set(name, split.notOnMachine);
    const added = split.notOnMachine.filter((ip) => !before.includes(ip));
    if (added.length === 0) return;
    this.#m.rejectedIPs.inc({ reason: "not_on_machine" }, added.length);
    this.#log.warn("Node IP is not on the node's machine; it is not written as InternalIP", {
      node: name,
      ips: added,
      confirmedIP,
    });
    const where =
      source === "annotation" ? `in its ${PROVIDED_NODE_IP_ANNOTATION} annotation` : "among its InternalIPs";
    this.#warn(
      node,
      "NodeIPNotOnMachine",
      action,
      `Node IP ${added.join(", ")} (${where}) is not an address of the machine Talos confirmed as this node ` +
        `on ${confirmedIP}: it is not written as an InternalIP and Talos is not asked there; the node's ` +
        `InternalIPs are ${split.onMachine.ips.join(", ")}. A kubelet only announces addresses of its own host ` +
        "(--node-ip); the IP is used once Talos reports it on the machine",
    );
  }
}

/**
 * Starts the cloud-node controller and runs it until `signal` aborts.
 * @throws {Error} when no Talos client is configured.
 */
export async function startCloudNode(ctx: ControllerContext, signal: AbortSignal): Promise<void> {
  if (!ctx.talos) throw new Error("Cannot start cloud-node: the Talos API client is not configured");
  const controller = new CloudNodeController({
    client: ctx.client,
    nodes: ctx.nodes,
    events: ctx.events,
    registry: ctx.registry,
    config: ctx.config,
    talos: ctx.talos,
    workers: ctx.options.nodeController.concurrentSyncs,
    statusUpdateFrequencyMs: ctx.options.nodeController.statusUpdateFrequencyMs,
  });
  await controller.run(signal);
}
