// The node-csr-approval controller: approves or denies kubelet serving CertificateSigningRequests
// through the /approval subresource, on the pure policy of lib/csr.ts. Its own informer watches
// pending `kubernetes.io/kubelet-serving` CSRs (every event, re-listing as the shared informer
// does); a Node that appears or changes re-queues its pending CSRs, so a CSR that came first is
// decided as soon as its Node exists. A missing Node is waited for with backoff for a bounded time,
// then the CSR is left Pending with a Warning Event. With a Talos API, the machine behind the Node's
// IP must name itself as the requester before its addresses (and names) count; Talos being
// unreachable is retried, never skipped. Without Talos (CSR-only mode), the DNS SANs of a CSR that
// passed every other check are looked up against the cluster's namespaces and Services
// (lib/csrservices.ts), failures retried the same way. The cluster's Service and pod ranges
// (lib/csrnetworks.ts) are read before the first decision. The Talos facts come from cloud-node's
// watches when it runs beside (lib/taloswatchcsr.ts: no Talos call per CSR; a CSR waits for them up
// to WATCH_WAIT_MS), else from lib/csrtalosfacts.ts's reads; the Nodes' claims are lib/csrclaims.ts's. A CSR is decided once: `screen()` against the cluster, the
// evidence gathered, `conclude()` on it — screened again first if the cluster changed meanwhile.

import type { ControllerContext, WatchedFacts } from "./controller.ts";
import {
  type Claims,
  conclude,
  type NodeInput,
  nodeInputFrom,
  requestedClaims,
  type Screened,
  type ServiceNameView,
  screen,
  type TalosFacts,
} from "./csr.ts";
import { NodeClaimIndex } from "./csrclaims.ts";
import { type Decision, overLimit } from "./csrdecision.ts";
import { type CsrMetrics, csrMetrics } from "./csrmetrics.ts";
import { CsrNetworks } from "./csrnetworks.ts";
import { CsrRecords } from "./csrrecords.ts";
import {
  type CheckedCsr,
  checkCsr,
  MAX_REQUEST_BASE64,
  nodeNameFromUsername,
  USERNAME_PREFIX,
} from "./csrrequest.ts";
import { lookUpServiceNames, lookupCount, type ServiceQuestions, serviceQuestions } from "./csrservices.ts";
import { type TalosFactsClient, TalosFactsReader } from "./csrtalosfacts.ts";
import { approvalBody, isPending, type LeanCsr, leanCsr, nodePollDelayMs, type Verdict } from "./csrview.ts";
import { isConflict, isNotFound, type KubeApi } from "./kubeapi.ts";
import { type Handlers, Informer } from "./kubecache.ts";
import type { EventRecorder, EventTarget } from "./kubeevents.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { addName, type Names, namesOf, removeName } from "./nameindex.ts";
import { type LeanNode, nodeIPs } from "./nodeview.ts";
import { OVER_LIMIT_REASON, PEER_LIMITS, peerLimit, peerRejections } from "./peerlimits.ts";
import { type ReconcileResult, runWorkers, WorkQueue } from "./queue.ts";
import type { NetworkView } from "./sharedaddresses.ts";
import { KUBELET_SERVING_SIGNER } from "./wellknown.ts";
import { WriteBudget } from "./writebudget.ts";

const log = logger("csr-approver");

/** The CSR collection. */
export const CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/**
 * How long a CSR waits for its Node, from the CSR's creation: the time client-go's certificate
 * manager (the kubelet's) waits for a certificate before it gives up on a CSR and files a new one.
 */
export const NODE_WAIT_MS = 15 * 60_000;

/** Reconciles in parallel: each is short, but a Talos call may take seconds. */
const CSR_WORKERS = 4;

/**
 * How long a CSR waits for cloud-node's Talos watches to answer for its node (they start, or read
 * what they lack) before Talos is asked directly: a node's watches start within seconds of its Node
 * getting an IP, and the kubelet files its CSR at about the same time.
 */
const WATCH_WAIT_MS = 30_000;
/** A CSR waiting for the watches is looked at again after this, if no change of its node came first. */
const WATCH_RECHECK_MS = 5_000;
/** {@link CsrApprover}'s `#decide` waits for the watches: the CSR is looked at again when they answer. */
const WATCHES_PENDING = Symbol("watches pending");

/** Consecutive Talos (or Service lookup) failures after which the CSR gets a Warning Event. */
const TALOS_EVENT_AFTER_FAILURES = 3;
/** After a 409 the watch brings the newer version; look again after this if it has not yet. */
const CONFLICT_RETRY_MS = 1_000;
const EVENT_ACTION = "DecideCSR";

// ---------------------------------------------------------------------------------------------
// Controller

/** What the controller works with; tests pass fakes. */
export interface CsrApproverOptions {
  client: Pick<KubeApi, "update">;
  /** The CSR cache; whoever starts its informer adds `csrHandlers` to it. */
  csrs: Pick<Informer<LeanCsr>, "get">;
  /** The Node cache; `run()` adds `nodeHandlers` to it, which also feed the claim index. */
  nodes: Pick<Informer<LeanNode>, "get" | "addHandlers">;
  events: Pick<EventRecorder, "record">;
  /** Undefined in CSR-only mode (no Talos API): IPs are checked against the Nodes only. */
  talos: TalosFactsClient | undefined;
  /**
   * cloud-node's Talos watches (lib/taloswatchcsr.ts): while they answer for a node, its CSRs cost
   * no Talos call; the reads above are made where they cannot.
   */
  watched?: Pick<WatchedFacts, "source" | "onChange">;
  /**
   * CSR-only mode: asks the API server which of the names reach a Service through a Pod's search
   * path (lib/csrservices.ts `lookUpServiceNames`); throws when it cannot tell. Without it, CSR-only
   * mode approves nothing that has a DNS SAN (fail closed).
   */
  lookUpServices?: (q: ServiceQuestions, signal?: AbortSignal) => Promise<ServiceNameView>;
  config: { readonly current: { global: { preferIPv6: boolean } } };
  registry: Registry;
  /** The cluster's Service and pod ranges and shared names (lib/csrnetworks.ts fills them). */
  networks: NetworkView;
  /** How long a CSR waits for its Node (default {@link NODE_WAIT_MS}). */
  nodeWaitMs?: number;
  workers?: number;
  /** Clock (ms since the epoch); tests inject one. */
  now?: () => number;
}

/** Units of decision work a requester's budget gets back each second, after its burst (`csr_decision_units`). */
export const CSR_DECISION_UNITS_PER_S = 128;
/** At most one budget Event per requester in this window. */
const BUDGET_EVENT_WINDOW_MS = 600_000;

/**
 * What deciding a CSR cost, in the units of `csr_decision_units`: one per 64 characters of its
 * request read (parsing and verifying it; a request over `MAX_REQUEST_BASE64` is refused unread and
 * costs no more than one at that size), per address of the Node it was checked against and per
 * entry of the Talos facts read for it. Pure.
 * @example decisionUnits("A".repeat(1280), 3, undefined) // 24
 */
export function decisionUnits(request: string, nodeAddresses: number, facts: TalosFacts | undefined): number {
  const talos = facts
    ? facts.addresses.length +
      facts.excludedSubnets.length +
      facts.dnsNames.length +
      facts.sharedAddresses.size
    : 0;
  return 1 + Math.ceil(Math.min(request.length, MAX_REQUEST_BASE64) / 64) + nodeAddresses + talos;
}

/** The node-csr-approval controller: CSR and Node events feeding a work queue of CSR names. */
export class CsrApprover {
  readonly #opts: CsrApproverOptions;
  readonly #now: () => number;
  readonly #nodeWaitMs: number;
  readonly #metrics: CsrMetrics;
  readonly #facts: TalosFactsReader | undefined;
  readonly queue: WorkQueue;
  /** Pending CSR names by the node they speak for. */
  readonly #pendingByNode = new Map<string, Names>();
  /** Who claims which name and IP, from the Node events. */
  readonly #claims: NodeClaimIndex;
  /** One record per CSR name: looks for its Node, the version it was decided at, warnings given. */
  readonly #records = new CsrRecords();
  /**
   * Decision work by requester (spec.username, stamped by the API server): each decision is
   * charged what it cost (`decisionUnits()`); a requester in debt waits, its CSRs Pending.
   */
  readonly #budget: WriteBudget;
  /** When each requester's last budget Event was recorded (ms). */
  readonly #budgetEventAt = new Map<string, number>();
  readonly #rejected: ReturnType<typeof peerRejections>;
  #signal: AbortSignal | undefined;

  constructor(opts: CsrApproverOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#nodeWaitMs = opts.nodeWaitMs ?? NODE_WAIT_MS;
    this.#metrics = csrMetrics(opts.registry);
    this.#facts = opts.talos && new TalosFactsReader(opts.talos, { now: this.#now });
    this.#claims = new NodeClaimIndex((name) => opts.nodes.get(name) !== undefined);
    this.#budget = new WriteBudget({
      burst: PEER_LIMITS.csr_decision_units.value,
      paceMs: 1000 / CSR_DECISION_UNITS_PER_S,
      now: this.#now,
    });
    this.#rejected = peerRejections(opts.registry);
    this.queue = new WorkQueue("csr-approver", {
      baseDelayMs: 500,
      maxDelayMs: 60_000,
      registry: opts.registry,
    });
    // A change of a node's Talos watches may answer its CSRs that wait for them.
    opts.watched?.onChange((node) => {
      if (this.queue.isShutDown) return;
      for (const name of namesOf(this.#pendingByNode.get(node))) this.queue.add(name);
    });
  }

  /**
   * How many entries the controller holds about CSRs (pending ones by node, the records of CSRs
   * that were looked at for a Node, decided before the watch showed it or warned about, budget
   * Events of the last 10 min): 0 once every CSR is decided and the watch showed it, whatever the
   * cluster's history (after 10 min for a requester that spent its decision budget). For leak tests.
   */
  get heldEntries(): number {
    let pending = 0;
    for (const names of this.#pendingByNode.values()) pending += namesOf(names).length;
    return pending + this.#records.size + this.#budgetEventAt.size;
  }

  /** The handlers for the CSR cache: every add and update of a pending CSR queues it. */
  get csrHandlers(): Handlers<LeanCsr> {
    return {
      onAdd: (c) => this.#observe(c),
      // A CSR that turned decided keeps nothing to unlink by: the pending copy it was does.
      onUpdate: (old, c) => this.#observe(c, old),
      onDelete: (c) => this.#forget(c),
    };
  }

  /**
   * The handlers for the Node cache: they keep the claim index, and a Node that appears or changes
   * re-queues its pending CSRs. Reconciles read the index, so these must be added before the
   * first one (`run()` does). Once the controller stopped they do nothing: the shared informer
   * keeps its handlers.
   */
  get nodeHandlers(): Handlers<LeanNode> {
    const changed = (n: LeanNode, old?: LeanNode) => {
      if (this.queue.isShutDown) return;
      this.#claims.set(nodeInputFrom(n), old && nodeInputFrom(old));
      for (const name of namesOf(this.#pendingByNode.get(n.metadata.name))) this.queue.add(name);
    };
    return {
      onAdd: (n) => changed(n),
      onUpdate: (old, n) => changed(n, old),
      onDelete: (n) => {
        if (this.queue.isShutDown) return;
        this.#claims.delete(nodeInputFrom(n));
        this.#facts?.forget(n.metadata.name);
        this.#budget.forget(`${USERNAME_PREFIX}${n.metadata.name}`);
        this.#budgetEventAt.delete(`${USERNAME_PREFIX}${n.metadata.name}`);
      },
    };
  }

  /**
   * Processes CSRs until `signal` aborts, then waits for the reconciles in flight. Call it once
   * the CSR cache has synced; the Node handlers are added here.
   */
  async run(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    const stop = () => {
      this.queue.shutDown();
      this.#claims.clear();
    };
    if (signal.aborted) stop();
    else signal.addEventListener("abort", stop, { once: true });
    this.#opts.nodes.addHandlers(this.nodeHandlers);
    await runWorkers(this.queue, this.#opts.workers ?? CSR_WORKERS, (name) => this.reconcile(name), log);
  }

  #observe(c: LeanCsr, old?: LeanCsr): void {
    if (this.queue.isShutDown) return;
    const name = c.metadata.name;
    if (!isPending(c)) {
      this.#forget(old ?? c);
      return;
    }
    const node = nodeNameFromUsername(c.csr.username);
    if (node !== undefined) addName(this.#pendingByNode, node, name);
    this.queue.add(name);
  }

  #forget(c: LeanCsr): void {
    const name = c.metadata.name;
    const node = nodeNameFromUsername(c.csr.username);
    if (node !== undefined) removeName(this.#pendingByNode, node, name);
    this.#records.forget(name);
  }

  /**
   * Converges one CSR from the caches: decides it and writes the decision, waits for its Node, or
   * leaves it. Safe to run twice: a CSR with a condition is never touched, and the write carries
   * the resourceVersion it was decided on.
   * @throws when Talos does not answer or the write fails (the queue retries with backoff)
   */
  async reconcile(name: string): Promise<ReconcileResult | undefined> {
    const c = this.#opts.csrs.get(name);
    if (!c || !isPending(c) || this.#records.of(c.metadata)?.decidedAt === c.metadata.resourceVersion)
      return undefined;
    const requester = c.csr.username;
    const dueMs = this.#budget.take(requester, 0);
    if (dueMs > 0) return this.#overBudget(c, dueMs);
    // Parsed and verified once; screen() takes the checked request.
    const checked = checkCsr(c.csr);
    const cost = { nodeAddresses: 0, facts: undefined as TalosFacts | undefined };
    let d: Decision | undefined | typeof WATCHES_PENDING;
    try {
      d = "action" in checked ? checked : await this.#decide(c, checked, cost);
    } finally {
      this.#budget.charge(requester, decisionUnits(c.csr.request ?? "", cost.nodeAddresses, cost.facts));
    }
    if (d === WATCHES_PENDING) return { requeueAfterMs: WATCH_RECHECK_MS };
    if (!d) return undefined;
    switch (d.action) {
      case "ignore":
        return undefined;
      case "wait":
        return this.#waitForNode(c, d.message);
      default:
        return this.#write(c, d);
    }
  }

  /**
   * Decides a checked CSR once: `screen()` against its Node, the Nodes that share one of its SANs
   * and the cluster's networks, then the evidence (Talos' facts, or in CSR-only mode the Services
   * its DNS SANs reach), then `conclude()` on it. Undefined when the evidence is given up on.
   */
  async #decide(
    c: LeanCsr,
    checked: CheckedCsr,
    cost: { nodeAddresses: number; facts: TalosFacts | undefined },
  ): Promise<Decision | undefined | typeof WATCHES_PENDING> {
    const lean = this.#opts.nodes.get(checked.nodeName);
    const node = lean && nodeInputFrom(lean);
    cost.nodeAddresses = node?.addresses.length ?? 0;
    const screenedAt = this.#clusterVersion();
    let s = this.#screen(checked, node);
    if (s.action !== "confirm") return s;
    const questions = this.#facts ? undefined : serviceQuestions(s.parsed.dnsNames);
    const lookups = questions ? lookupCount(questions) : 0;
    if (lookups > peerLimit("csr_service_lookups")) return overLimit("csr_service_lookups", lookups);
    // Talos' DNS names are read only when the request has names besides the node's.
    if (!questions) {
      const facts = await this.#askTalos(c, lean as LeanNode, s.dnsNames.length > 0);
      if (facts === WATCHES_PENDING) return facts;
      cost.facts = facts;
    }
    const evidence = questions ? await this.#lookUpServices(c, questions) : cost.facts;
    if (!evidence) return undefined;
    // The other Nodes and the cluster's ranges may have changed while the evidence was gathered:
    // only then is the request screened again, on the cluster as it is now (with the same Node
    // input, as the evidence was gathered for it). Nothing awaits between that and conclude(), so no
    // decision rests on a snapshot older than the evidence, and a busy cluster cannot starve a CSR.
    if (this.#clusterVersion() !== screenedAt) {
      s = this.#screen(checked, node);
      if (s.action !== "confirm") return s;
    }
    return conclude(s, evidence);
  }

  /** `screen()` of a checked CSR against its Node, the Nodes that claim one of its SANs, and the ranges. */
  #screen(checked: CheckedCsr, node: NodeInput | undefined): Decision | Screened {
    const others = this.#others(requestedClaims(checked), checked.nodeName);
    return screen(checked, node, others, this.#opts.networks);
  }

  /**
   * What screening reads of the cluster besides the requester's Node, as a key that changes with it:
   * the claim index's generation (every Node's names and addresses) and the cluster networks'
   * (Service and pod ranges, shared names).
   */
  #clusterVersion(): string {
    return `${this.#claims.generation}/${this.#opts.networks.generation}`;
  }

  /**
   * A CSR whose requester's decision budget is in debt: it stays Pending (nothing parsed) and is
   * re-queued for when the debt is paid; counted in talosccm_peer_input_rejected_total, and once
   * per window and requester a Warning PeerInputOverLimit Event.
   */
  #overBudget(c: LeanCsr, dueMs: number): ReconcileResult {
    this.#rejected.inc({ peer: "csr", limit: "csr_decision_units" });
    const requester = c.csr.username;
    const now = this.#now();
    // Windows that ended are forgotten: the map holds the requesters warned in the last 10 min.
    for (const [r, at] of this.#budgetEventAt)
      if (now - at >= BUDGET_EVENT_WINDOW_MS) this.#budgetEventAt.delete(r);
    if (!this.#budgetEventAt.has(requester)) {
      this.#budgetEventAt.set(requester, now);
      const l = PEER_LIMITS.csr_decision_units;
      const note =
        `${requester} spent its CSR decision budget (${l.value} units at once, then ${CSR_DECISION_UNITS_PER_S} a ` +
        `second; ${l.source}): this CSR stays Pending and is decided in ${Math.ceil(dueMs / 1000)} s; other nodes' ` +
        "CSRs are not affected";
      log.info("CSR decision budget spent; deciding later", { csr: c.metadata.name, user: requester, dueMs });
      void this.#opts.events.record(csrTarget(c), "Warning", OVER_LIMIT_REASON, EVENT_ACTION, note);
    }
    return { requeueAfterMs: dueMs };
  }

  /** The Service names the CSR's DNS SANs need; on failure retries (throws) until the CSR is given up. */
  async #lookUpServices(c: LeanCsr, q: ServiceQuestions): Promise<ServiceNameView | undefined> {
    try {
      if (lookupCount(q) === 0) return { reach: () => undefined };
      const lookUp = this.#opts.lookUpServices;
      if (!lookUp) throw new Error("no Service lookup is configured");
      return await lookUp(q, this.#signal);
    } catch (err) {
      const why = `Cannot check CSR ${c.metadata.name}'s DNS names against the cluster's Services: ${(err as Error).message}`;
      return this.#retryOrGiveUp(c, "ServiceLookupFailed", why, err);
    }
  }

  /**
   * After a failed look-up for CSR `c`: throws (the queue retries with backoff, a Warning Event at
   * the third failure) until the CSR is as old as the wait for its Node, then gives up (undefined):
   * it stays Pending, never decided without the answer.
   */
  #retryOrGiveUp(c: LeanCsr, reason: string, why: string, err: unknown): undefined {
    if (this.#ageMs(c) >= this.#nodeWaitMs) {
      this.#warnOnce(c, reason, `${why}; left Pending, retried when the Node changes`);
      return undefined;
    }
    if (this.queue.failures(c.metadata.name) + 1 === TALOS_EVENT_AFTER_FAILURES) {
      this.#warnOnce(c, reason, `${why}; retrying`);
    }
    throw new Error(why, { cause: err });
  }

  /** The Nodes other than `self` that claim one of `wanted`, as policy input. */
  #others(wanted: Claims, self: string): NodeInput[] {
    const out: NodeInput[] = [];
    for (const name of this.#claims.claimants(wanted, self)) {
      const n = this.#opts.nodes.get(name);
      if (n) out.push(nodeInputFrom(n));
    }
    return out;
  }

  /**
   * Talos' facts for the CSR's node: from cloud-node's watches while they answer for it (or a wait
   * for them, up to {@link WATCH_WAIT_MS}), else read from Talos; on a failed read retries (throws)
   * until the CSR is given up.
   */
  async #askTalos(
    c: LeanCsr,
    node: LeanNode,
    withDNS: boolean,
  ): Promise<TalosFacts | undefined | typeof WATCHES_PENDING> {
    const preferIPv6 = this.#opts.config.current.global.preferIPv6;
    const watched = this.#fromWatches(c, node, preferIPv6, withDNS);
    if (watched !== undefined) return watched;
    const reader = this.#facts as TalosFactsReader;
    try {
      const facts = await reader.read(node, preferIPv6, withDNS, this.#signal);
      this.#metrics.facts.inc({ source: "talos" });
      return facts;
    } catch (err) {
      const why = `Cannot confirm CSR ${c.metadata.name} of node ${node.metadata.name} with Talos: ${(err as Error).message}`;
      return this.#retryOrGiveUp(c, "TalosUnavailable", why, err);
    }
  }

  /**
   * The facts cloud-node's watches hold for the CSR's node, {@link WATCHES_PENDING} while the CSR
   * waits for them, undefined when Talos must be asked.
   */
  #fromWatches(
    c: LeanCsr,
    node: LeanNode,
    preferIPv6: boolean,
    withDNS: boolean,
  ): TalosFacts | typeof WATCHES_PENDING | undefined {
    const source = this.#opts.watched?.source;
    if (!source) return undefined;
    const { ips } = nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      preferIPv6,
    );
    const answer = source.csrFacts(node.metadata.name, ips, withDNS);
    const since = this.#records.of(c.metadata)?.watchWaitSince;
    if (answer.state === "wait" && (since === undefined || this.#now() - since < WATCH_WAIT_MS)) {
      if (since === undefined)
        this.#records.update(c.metadata, (r) => {
          r.watchWaitSince = this.#now();
        });
      log.v(4).info("CSR waits for the Talos watches", { csr: c.metadata.name, reason: answer.why });
      return WATCHES_PENDING;
    }
    if (since !== undefined)
      this.#records.update(c.metadata, (r) => {
        delete r.watchWaitSince;
      });
    if (answer.state === "ready") {
      this.#metrics.facts.inc({ source: "watches" });
      return answer.facts;
    }
    log.v(4).info("Asking Talos for a CSR's facts", { csr: c.metadata.name, reason: answer.why });
    return undefined;
  }

  #ageMs(c: LeanCsr): number {
    const created = Date.parse(c.metadata.creationTimestamp);
    return Number.isNaN(created) ? 0 : this.#now() - created;
  }

  #waitForNode(c: LeanCsr, message: string): ReconcileResult | undefined {
    const name = c.metadata.name;
    const left = this.#nodeWaitMs - this.#ageMs(c);
    if (left > 0) {
      const looks = this.#records.of(c.metadata)?.looks ?? 0;
      this.#records.update(c.metadata, (r) => {
        r.looks = looks + 1;
      });
      const delay = nodePollDelayMs(looks, left);
      log.v(2).info("CSR waits for its Node", { csr: name, reason: message, retryInMs: delay });
      return { requeueAfterMs: delay };
    }
    this.#records.update(c.metadata, (r) => {
      delete r.looks;
    });
    const minutes = Math.round(this.#nodeWaitMs / 60_000);
    this.#warnOnce(
      c,
      "NodeNotFound",
      `${message} after ${minutes} min: left Pending; it is decided if the Node appears`,
    );
    return undefined;
  }

  #warnOnce(c: LeanCsr, reason: string, note: string): void {
    if (this.#records.of(c.metadata)?.warned?.has(reason)) return;
    this.#records.update(c.metadata, (r) => {
      r.warned = (r.warned ?? new Set()).add(reason);
    });
    log.info("CSR not decided", { csr: c.metadata.name, reason, detail: note });
    void this.#opts.events.record(csrTarget(c), "Warning", reason, EVENT_ACTION, note);
  }

  async #write(c: LeanCsr, d: Verdict): Promise<ReconcileResult | undefined> {
    const name = c.metadata.name;
    try {
      await this.#opts.client.update<void>(
        `${CSR_PATH}/${encodeURIComponent(name)}/approval`,
        approvalBody(c, d),
        {
          discardAnswer: true,
        },
      );
    } catch (err) {
      if (isNotFound(err)) return undefined;
      if (isConflict(err)) {
        // Changed or decided by someone else: decide again on the version the watch brings.
        log.v(2).info("CSR changed before its decision was written; deciding again", { csr: name });
        return { requeueAfterMs: CONFLICT_RETRY_MS };
      }
      throw new Error(`Cannot ${d.action} CSR ${name}: ${(err as Error).message}`, { cause: err });
    }
    // Until the watch shows the decision; when it came already (the cache moved past this version
    // or dropped the CSR as decided), there is nothing to guard and nothing would ever remove it.
    const unseen = this.#opts.csrs.get(name)?.metadata.resourceVersion === c.metadata.resourceVersion;
    this.#records.update(c.metadata, (r) => {
      if (unseen) r.decidedAt = c.metadata.resourceVersion;
      delete r.looks;
    });
    // Kept for retries of this decision, which is written: a later CSR of the node asks Talos anew.
    const node = nodeNameFromUsername(c.csr.username);
    if (node !== undefined) this.#facts?.forget(node);
    this.#metrics.record(d);
    const fields = { csr: name, user: c.csr.username, reason: d.reason, detail: d.message };
    if (d.action === "approve") {
      log.info("Approved CSR", fields);
    } else {
      log.info("Denied CSR", fields);
      void this.#opts.events.record(csrTarget(c), "Warning", d.reason, EVENT_ACTION, d.message);
    }
    return undefined;
  }
}

/** The CSR as an Event's subject; Events about cluster-scoped objects go to namespace default. */
function csrTarget(c: LeanCsr): EventTarget {
  return {
    kind: "CertificateSigningRequest",
    apiVersion: "certificates.k8s.io/v1",
    name: c.metadata.name,
    uid: c.metadata.uid,
  };
}

/** Resolves when `signal` aborts. */
function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

/**
 * Starts the node-csr-approval controller; resolves once `signal` aborts and the reconciles in
 * flight finished. Without `ctx.talos` (no talosconfig) it runs in CSR-only mode.
 */
export async function startCsrApprover(ctx: ControllerContext, signal: AbortSignal): Promise<void> {
  const csrs = new Informer<LeanCsr>(ctx.client, {
    path: CSR_PATH,
    fieldSelector: `spec.signerName=${KUBELET_SERVING_SIGNER}`,
    transform: leanCsr,
    // Only pending CSRs are read again; the decided ones' events still reach the handlers.
    keep: isPending,
    log: logger("csr-informer"),
  });
  const nets = new CsrNetworks({
    client: ctx.client,
    ipam: ctx.options.ipam,
    talos: ctx.talos,
    apis: ctx.apis,
  });
  ctx.nodes.addHandlers(nets.nodeHandlers);
  const approver = new CsrApprover({
    client: ctx.client,
    csrs,
    nodes: ctx.nodes,
    events: ctx.events,
    talos: ctx.talos,
    ...(ctx.talos && ctx.watched ? { watched: ctx.watched } : {}),
    lookUpServices: (q, s) => lookUpServiceNames(ctx.client, q, s),
    config: ctx.config,
    registry: ctx.registry,
    networks: nets.networks,
  });
  csrs.addHandlers(approver.csrHandlers);
  csrs.start();
  // No CSR is decided before the cluster's ranges are known.
  await Promise.race([Promise.all([csrs.waitForSync(), nets.start(signal)]), aborted(signal)]);
  log.info("Approving kubelet serving CSRs", {
    checks: ctx.talos
      ? "Node, other Nodes and Talos"
      : "Node, other Nodes and the cluster's Services (CSR-only mode: no Talos API)",
    pending: csrs.list().filter(isPending).length,
    nodeWait: `${NODE_WAIT_MS / 60_000}m`,
  });
  try {
    await approver.run(signal);
  } finally {
    await Promise.all([csrs.stop(), nets.stop()]);
  }
}
