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
// What is remembered about a Node between passes (writes the cache does not show yet, another
// writer's streak, Event windows, its write budget, the instance-ID wait) is one record per node,
// lib/nodestate.ts NodeRecord, whose methods decide (the time passed in); the update handler judges
// another writer's change there once and queues the node; the texts of the Events are in
// lib/nodenotes.ts, the metrics in lib/nodemetrics.ts.
//
// The Node's IPs are its kubelet's to write: no fact is used before Talos confirms, on the IP it came
// from, that the machine answering there is the node (the watch cache's job), and a node IP that
// machine does not have is not written as an InternalIP.

import type { CompiledConfig } from "./config.ts";
import type { ControllerContext, WatchedFacts } from "./controller.ts";
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
import { conflictingWrites } from "./fieldowners.ts";
import { isNotFound, type KubeApi, KubeError, PATCH } from "./kubeapi.ts";
import { handlerErrors, type Informer } from "./kubecache.ts";
import type { EventRecorder } from "./kubeevents.ts";
import { type Logger, logger } from "./log.ts";
import { type ManagedRecordRead, readManagedRecord } from "./managedrecord.ts";
import { LabelCap, type Registry } from "./metrics.ts";
import { CONFLICT_MANAGERS, nodeMetrics } from "./nodemetrics.ts";
import {
  describeConflict,
  HELD_FOR_TAINTS_NOTE,
  NO_NODE_IP_NOTE,
  nodeOverLimitNote,
  notOnMachineNote,
  RECORD_PROBLEMS,
  talosErrorNote,
  talosMismatchNote,
  talosOverLimitNote,
  waitingForIDNote,
  writeBudgetNote,
} from "./nodenotes.ts";
import { NodeRecord } from "./nodestate.ts";
import { type LeanNode, type NodeIPs, nodeIPs, relevantChange, statusUnknown } from "./nodeview.ts";
import { OVER_LIMIT_REASON, PEER_LIMITS } from "./peerlimits.ts";
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
import { FIELD_MANAGER } from "./wellknown.ts";
import type { BudgetPace } from "./writebudget.ts";

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
  /** Shares the Talos watches with node-csr-approval: they keep what its CSRs need (lib/taloswatchcsr.ts). */
  watched?: WatchedFacts;
  now?: () => number;
  log?: Logger;
}

/**
 * The per-node write budget's default pace: after a burst of PEER_LIMITS.node_write_burst writes,
 * one write per 5 s. Half the kubelet's own node status update period (10 s), and at the client's
 * default 20 QPS one node can then spend at most 1 % of it.
 */
export const NODE_WRITE_PACE_MS = 5000;

/**
 * The cloud-node controller: informer handlers turn Node events into keys; Talos watch changes and
 * config reloads re-queue nodes; `--concurrent-node-syncs` workers run {@link reconcile}.
 */
export class CloudNodeController {
  readonly #opts: CloudNodeOptions;
  readonly #queue: WorkQueue;
  readonly #facts: TalosWatchCache;
  readonly #m: ReturnType<typeof nodeMetrics> & { handlerErrors: ReturnType<typeof handlerErrors> };
  readonly #log: Logger;
  /** One record per node of what is remembered between passes (lib/nodestate.ts); dropped with the node. */
  readonly #records = new Map<string, NodeRecord>();
  readonly #managers = new LabelCap(CONFLICT_MANAGERS);
  readonly #conflictWindowMs: number;
  readonly #now: () => number;
  /** The per-node write budget's shape: one node cannot spend the shared client rate limit. */
  readonly #pace: BudgetPace;
  /** {@link factsNeeds} of the config it was computed for (templates are walked once per config). */
  #needs: { config: CompiledConfig; needs: FactsNeeds } | undefined;
  #stopped = false;

  constructor(opts: CloudNodeOptions) {
    if (!(opts.workers >= 1)) throw new TypeError("CloudNodeController: workers must be at least 1");
    this.#opts = opts;
    this.#log = opts.log ?? log;
    this.#conflictWindowMs = opts.conflictWindowMs ?? 600_000;
    this.#now = opts.now ?? Date.now;
    this.#pace = {
      burst: PEER_LIMITS.node_write_burst.value,
      paceMs: opts.writePaceMs ?? NODE_WRITE_PACE_MS,
    };
    this.#queue = new WorkQueue("cloud-node", { registry: opts.registry });
    this.#facts = new TalosWatchCache({
      talos: opts.talos,
      onChange: (name) => {
        this.#enqueue(name);
        opts.watched?.changed(name);
      },
      refreshMs: opts.statusUpdateFrequencyMs,
      csrFacts: opts.watched !== undefined,
      nodeStatusUnknown: (name) => {
        const n = this.#opts.nodes.get(name);
        return n !== undefined && statusUnknown(n);
      },
    });
    this.#m = { ...nodeMetrics(opts.registry), handlerErrors: handlerErrors(opts.registry) };
    opts.registry.onCollect(() => {
      const { nodes, down, downStatusUnknown } = this.#facts.stats();
      this.#m.watches.set({ state: "healthy" }, nodes - down);
      this.#m.watches.set({ state: "down" }, down - downStatusUnknown);
      this.#m.watches.set({ state: "down_node_status_unknown" }, downStatusUnknown);
      let waiting = 0;
      for (const r of this.#records.values()) if (r.waitingForIDSince !== undefined) waiting++;
      this.#m.waitingForInstanceID.set(undefined, waiting);
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
    this.#opts.watched?.publish(this.#facts);
    try {
      await runWorkers(this.#queue, this.#opts.workers, (name) => this.reconcile(name), this.#log);
    } finally {
      this.#stopped = true;
      this.#opts.watched?.publish(undefined);
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
    const { waitMs, deferred } = this.#record(name).enqueueDelay(this.#now(), this.#pace);
    const node = deferred ? this.#opts.nodes.get(name) : undefined;
    if (node) this.#reportDeferred(name, node, actionOf(isUninitialized(node)), waitMs);
    if (waitMs > 0) this.#queue.addAfter(name, waitMs);
    else this.#queue.add(name);
  }

  /** Node `name`'s record, made when first needed. */
  #record(name: string): NodeRecord {
    const found = this.#records.get(name);
    if (found) return found;
    const r = new NodeRecord();
    this.#records.set(name, r);
    return r;
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
    this.#record(name).wantAddresses = patch.addresses ?? pass.node.status.addresses;
    const waitMs = this.#spend(pass, patch);
    if (waitMs > 0) return { requeueAfterMs: waitMs };
    if (!(await this.#write(pass, patch))) return undefined;
    this.#reportWritten(pass, patch, want, found.state.nodeIP);
    return undefined;
  }

  /**
   * Takes the writes of `patch` from the node's write budget: 0 when taken (or nothing to write);
   * otherwise the ms until they are due, after reporting the deferral.
   */
  #spend(pass: Pass, patch: NodePatch): number {
    const cost = (patch.addresses ? 1 : 0) + (patch.ops.length > 0 ? 1 : 0);
    if (cost === 0) return 0;
    const waitMs = this.#record(pass.name).takeWrites(cost, this.#now(), this.#pace);
    if (waitMs > 0) this.#reportDeferred(pass.name, pass.node, pass.action, waitMs);
    return waitMs;
  }

  /**
   * Node `name`'s pass waits `waitMs` for its write budget (a pass that would write, or a change
   * while not one write's worth is left): counts it, and records a Warning WriteBudgetExceeded
   * Event once per window.
   */
  #reportDeferred(name: string, node: LeanNode, action: string, waitMs: number): void {
    this.#m.deferred.inc();
    this.#log.v(2).info("Write budget spent; writing later", { node: name, waitMs });
    const note = writeBudgetNote(this.#pace.burst, this.#pace.paceMs, waitMs);
    this.#warnOncePerWindow({ name, node, action }, "WriteBudgetExceeded", note);
  }

  /** A Warning Event of `reason` about the pass's node, at most once per node and reason in the window. */
  #warnOncePerWindow(
    { name, node, action }: Pick<Pass, "name" | "node" | "action">,
    reason: string,
    note: string,
  ): void {
    if (this.#record(name).windowEventDue(reason, this.#now(), this.#conflictWindowMs))
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
    if (this.#records.get(name)?.showsOurWrites(node.metadata.resourceVersion) === false) return undefined;
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
    this.#warnOncePerWindow(
      pass,
      OVER_LIMIT_REASON,
      nodeOverLimitNote(over.limit, over.got, pass.initializing),
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
    const stale = [node.metadata.resourceVersion];
    if (patch.addresses) {
      const res = await this.#opts.client.patch<{ metadata?: { resourceVersion?: string } }>(
        `${path}/status`,
        { status: { addresses: patch.addresses } },
        PATCH.merge,
        AS_FIELD_MANAGER_RV,
      );
      const rv = res?.metadata?.resourceVersion;
      if (rv !== node.metadata.resourceVersion) this.#noteStale(name, stale);
      if (rv !== undefined && patch.ops.length > 0) stale.push(rv);
    }
    if (patch.ops.length > 0) {
      await this.#opts.client.patch<void>(path, patch.ops, PATCH.json, AS_FIELD_MANAGER_UNREAD);
      this.#noteStale(name, stale);
    }
  }

  /**
   * Remembers the resourceVersions that do not show our writes yet, for a node still held (one
   * deleted while its write was in flight gets no record back).
   */
  #noteStale(name: string, stale: readonly string[]): void {
    const r = this.#records.get(name);
    if (r) r.stale = stale;
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

  /** Drops everything held about node `name`: its Talos watches and facts, and its record. */
  #forget(name: string): void {
    this.#facts.forget(name);
    this.#records.delete(name);
  }

  /**
   * Reports the changes another field manager made to fields this CCM owns between two versions
   * of a Node ({@link conflictingWrites}): each is counted; a Warning ConflictingWriter Event and a
   * log line come at most once per node and field in the window, later ones are logged at --v=2.
   * @returns how long the write-back should wait (lib/nodestate.ts writeBackDelayMs).
   */
  #noticeConflicts(old: LeanNode, node: LeanNode): number {
    const name = node.metadata.name;
    const record = this.#records.get(name);
    // A providerID set while this CCM waits for the instance ID settles the wait; nobody fights over it.
    const waiting = record?.waitingForIDSince !== undefined;
    const found = conflictingWrites(
      old,
      node,
      FIELD_MANAGER,
      readManagedRecord(old.metadata).record.taints,
      record?.wantAddresses,
    ).filter((c) => !(waiting && c.field === "spec.providerID"));
    if (found.length === 0) return 0;
    let delayMs = 0;
    for (const { conflict: c, delayMs: delay, report } of this.#record(name).noticeConflicts(
      found,
      this.#now(),
      this.#conflictWindowMs,
    )) {
      this.#m.conflicts.inc({ field: c.field, manager: this.#managers.value(c.manager) });
      delayMs = Math.max(delayMs, delay);
      const facts = { node: name, field: c.field, keys: c.keys, manager: c.manager, writeBackDelayMs: delay };
      if (!report) {
        this.#log.v(2).info("Another writer changed a field this CCM owns, again", facts);
        continue;
      }
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
    const wait = this.#record(name).waitForID(decision.action === "wait", this.#now());
    if (wait.change === "ended") {
      this.#log.info("Instance ID published; writing the providerID", {
        node: name,
        providerID: decision.action === "write" ? decision.providerID : (node.spec.providerID ?? ""),
        waitedSeconds: Math.round(wait.waitedMs / 1000),
      });
    }
    if (decision.action !== "wait") return;
    if (wait.change === "started") {
      this.#log.warn("Waiting for the instance ID before writing a providerID", {
        node: name,
        platform: decision.platform,
        nodeIP: ip,
        tainted: initializing,
      });
    }
    if (initializing) this.#m.failed.inc({ reason: "instance_id" });
    const note = waitingForIDNote(decision, ip, fallbackProviderID(decision.platform, ip), initializing);
    this.#warn(node, "WaitingForInstanceID", action, note);
  }

  /** Reports a Node without any IP to ask Talos on (only while it waits for its initialization). */
  #reportNoNodeIP({ node, initializing, action }: Pass): void {
    if (!initializing) return;
    this.#m.failed.inc({ reason: "nodeip" });
    this.#warn(node, "NodeIPUnknown", action, NO_NODE_IP_NOTE);
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
      this.#warn(node, "TalosNodeMismatch", action, talosMismatchNote(ip, nodename, initializing));
      return;
    }
    if (state.limit !== undefined && state.error !== undefined) {
      // Talos answered over a per-machine bound (already counted where it was refused): the node fails alone.
      if (initializing) this.#m.failed.inc({ reason: "peer_limit" });
      this.#warnOncePerWindow(
        pass,
        OVER_LIMIT_REASON,
        talosOverLimitNote(ips.ips, state.error, initializing),
      );
      return;
    }
    if (initializing && state.error !== undefined) {
      this.#m.failed.inc({ reason: "talos" });
      this.#warn(node, "TalosAPIError", action, talosErrorNote(ips.ips, state.error));
    }
    this.#log.v(4).info("Waiting for Talos facts", { node: name, for: state.waitingFor });
  }

  /** Reports rule values that failed and a record that is not believed (not on a skipped foreign node). */
  #reportRuleProblems({ node, config, action, managed }: Pass, result: TransformResult, held = false): void {
    if (result.errors.length > 0) {
      const stays = held ? HELD_FOR_TAINTS_NOTE : "";
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
    const added = this.#record(name).leaveOut(split.notOnMachine);
    if (added.length === 0) return;
    this.#m.rejectedIPs.inc({ reason: "not_on_machine" }, added.length);
    this.#log.warn("Node IP is not on the node's machine; it is not written as InternalIP", {
      node: name,
      ips: added,
      confirmedIP,
    });
    const note = notOnMachineNote(added, source, confirmedIP, split.onMachine.ips);
    this.#warn(node, "NodeIPNotOnMachine", action, note);
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
    ...(ctx.watched ? { watched: ctx.watched } : {}),
  });
  await controller.run(signal);
}
