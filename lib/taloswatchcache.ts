// The Talos facts of every Node the cloud-node controller tracks, kept current by COSI watches.
//
// The controller (lib/node.ts) calls track(name, ips) and facts(name, needs) while reconciling a Node
// and re-queues the Node whenever onChange reports it; the facts it gets go into the pure desired
// state (lib/desirednode.ts). Nothing here reads or writes Kubernetes.
//
// Talos facts are watch-first where they change: every Node with an IP gets one COSI Watch on its
// AddressStatuses (streams multiplexed on the Talos client's shared channel), whose bootstrap contents
// initialize the node and whose later events re-queue it within moments. PlatformMetadata is written
// by Talos' platform controller at boot and does not change within a boot once complete, so it is read
// once, and watched only while it may still change: while it is missing or lacks the instance ID its
// platform names, and for a while after the address watch broke (a reboot breaks it; the platform
// controller may first publish the previous boot's cached metadata). Every stream costs the control
// plane's apid, which proxies it, about 22 KiB (README Performance). The Node's IPs are
// its kubelet's to write, so no fact from an IP is used before Talos confirms that the machine
// answering there is that node (its Nodename, read alongside the watches; again whenever the IP or
// the machine's identity changes), and a node IP that machine does not have is not asked afterwards.
// SystemInformation and the Talos version are read once per node, only when a rule's template reads
// them. Nodes whose watch is down are polled every --node-status-update-frequency by one shared
// timer; a healthy cluster makes no periodic Talos calls.
// Each machine's answers are bounded before they are kept (lib/talosbounds.ts, enforced by the
// client as it decodes and by the address watch): an answer over a bound is refused, what the node
// kept of that fact is dropped, and its facts wait, with the error naming the bound, until Talos
// answers within the bounds again (the watch resubscribes; the poll of a down node reads again).

import { type Backoff, backoffDelay } from "./backoffpolicy.ts";
import { logger } from "./log.ts";
import type { PeerLimitName } from "./peerlimits.ts";
import { type TalosError, TalosNotFoundError, TalosPermissionError, type TalosWatch } from "./talos.ts";
import { TalosLimitError } from "./talosbounds.ts";
import { type CsrFactsAnswer, type CsrWatchClient, WatchedCsrFacts } from "./taloswatchcsr.ts";
import {
  AddressWatchHandler,
  type AddressWatchHooks,
  DOWN_BITS,
  type DownPart,
  limitOf,
  metadataComplete,
  type NodeMismatch,
  NodeWatch,
  READ_BITS,
  type ReadKind,
  sameMachine,
} from "./taloswatchnode.ts";
import type {
  FactsNeeds,
  FactsState,
  TalosWatchCacheOptions,
  TalosWatchClient,
} from "./taloswatchoptions.ts";
import type { NodeFacts, PlatformMetadata } from "./types.ts";

// The cloud-node controller's component name: these are its watches.
const log = logger("cloud-node");

export type {
  FactsNeeds,
  FactsState,
  TalosWatchCacheOptions,
  TalosWatchClient,
} from "./taloswatchoptions.ts";
export { metadataComplete, type NodeMismatch, sameMachine };

/** {@link TalosWatchCacheOptions.schedule}'s default. */
function scheduleTimer(fn: () => void, ms: number): () => void {
  const timer = setTimeout(fn, ms);
  (timer as { unref?: () => void }).unref?.();
  return () => clearTimeout(timer);
}

/**
 * Every tracked node's Talos facts, from one AddressStatus watch per node (bootstrap contents, then
 * BOOTSTRAPPED) on the Talos client's shared channel, and its PlatformMetadata: read once, watched
 * (with the singleton id, so its first event is the current state) only until it is complete and
 * unchanged for `metadataSettleMs`, again after the address watch broke. Facts are handed out only from
 * an IP on which Talos confirmed the node's name (a Nodename read, made when the watches start on an
 * IP, when the facts come from another IP, and when the machine's identity in its PlatformMetadata
 * changes); on another name, a dual-stack node moves to its other IP, and the read is retried with
 * backoff. SystemInformation and the Talos version are read once, when asked for. A dual-stack node
 * whose watch fails moves to its other IP, unless the machine confirmed as the node does not have
 * that IP ({@link NodeWatch.askableIPs}; polls skip it too). Nodes whose watch is down (failing,
 * stalled, or ended on a non-retryable error) are polled by one shared timer every `refreshMs`;
 * healthy ones cost no periodic call.
 */
export class TalosWatchCache {
  readonly #talos: TalosWatchClient;
  readonly #onChange: (name: string) => void;
  readonly #refreshMs: number;
  readonly #stallMs: number;
  readonly #retryBackoff: Backoff;
  readonly #settleMs: number;
  readonly #now: () => number;
  readonly #statusUnknown: (name: string) => boolean;
  readonly #schedule: (fn: () => void, ms: number) => () => void;
  readonly #nodes = new Map<string, NodeWatch>();
  readonly #maxStarting: number;
  /** Nodes waiting for their turn to start, in tracking order. */
  readonly #queue = new Set<NodeWatch>();
  /** Nodes started and not known yet (gate "starting"). */
  #starting = 0;
  #pumping = false;
  /** What every node's address watch handler calls back (one object, not closures per node). */
  readonly #hooks: AddressWatchHooks = {
    failed: (w, part, error, limit) => this.#failed(w, part, error, limit),
    statusUnknown: (name) => this.#statusUnknown(name),
    recovered: (w, part) => this.#recovered(w, part),
    synced: (w, resumed) => this.#synced(w, resumed),
    changed: (name) => this.#onChange(name),
    ended: (w, err) => this.#ended(w, err),
  };
  readonly #timer: ReturnType<typeof setInterval>;
  /** Answers node-csr-approval ({@link TalosWatchCacheOptions.csrFacts}). */
  readonly #csr: WatchedCsrFacts | undefined;
  #closed = false;

  constructor(opts: TalosWatchCacheOptions) {
    if (!(opts.refreshMs > 0)) throw new TypeError("TalosWatchCache: refreshMs must be positive");
    const maxStarting = opts.maxStarting ?? 128;
    if (!(Number.isInteger(maxStarting) && maxStarting >= 1))
      throw new TypeError("TalosWatchCache: maxStarting must be a positive integer");
    this.#maxStarting = maxStarting;
    this.#talos = opts.talos;
    this.#onChange = opts.onChange;
    this.#refreshMs = opts.refreshMs;
    this.#stallMs = opts.stallMs ?? 30_000;
    this.#retryBackoff = opts.retryBackoff ?? { initialMs: 1_000, maxMs: 60_000 };
    this.#settleMs = opts.metadataSettleMs ?? 120_000;
    this.#now = opts.now ?? Date.now;
    this.#statusUnknown = opts.nodeStatusUnknown ?? (() => false);
    this.#schedule = opts.schedule ?? scheduleTimer;
    this.#csr = opts.csrFacts ? this.#csrFacts(opts.talos) : undefined;
    this.#timer = setInterval(() => this.tick(), opts.tickMs ?? Math.min(5_000, opts.refreshMs));
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /**
   * Starts watching node `name` on `ips` (preferred first), or queues it while `maxStarting` nodes
   * are starting; restarts when its IPs changed (a started node keeps its turn, a queued one its place).
   */
  track(name: string, ips: readonly string[]): void {
    if (this.#closed) return;
    const w = this.#nodes.get(name);
    if (w && w.ips.join() === ips.join()) return;
    if (w?.gate === "queued") {
      // Nothing started yet: only where it will start changes.
      w.ips = ips;
      w.answeredIP = ips[0] ?? "";
      return;
    }
    const next = new NodeWatch(name, ips, this.#now());
    this.#nodes.set(name, next);
    if (w?.gate === "starting") {
      // The new watches take the old ones' turn.
      w.gate = undefined;
      this.#stop(w);
      next.gate = "starting";
      this.#start(next);
      return;
    }
    if (w) this.#stop(w);
    if (this.#starting < this.#maxStarting) {
      this.#starting++;
      next.gate = "starting";
      this.#start(next);
    } else {
      next.gate = "queued";
      this.#queue.add(next);
    }
  }

  /** Stops watching node `name` and drops its facts. */
  forget(name: string): void {
    const w = this.#nodes.get(name);
    if (!w) return;
    this.#stop(w);
    this.#nodes.delete(name);
  }

  /** Whether node `name` is tracked and its watch is down. */
  isDown(name: string): boolean {
    return (this.#nodes.get(name)?.down ?? 0) !== 0;
  }

  /**
   * Nodes tracked, how many of them have a watch down, and how many of those have a status that is
   * unknown ({@link TalosWatchCacheOptions.nodeStatusUnknown}: a machine off, its watch down as expected).
   */
  stats(): { nodes: number; down: number; downStatusUnknown: number } {
    let down = 0;
    let downStatusUnknown = 0;
    for (const w of this.#nodes.values()) {
      if (w.down === 0) continue;
      down++;
      if (this.#statusUnknown(w.name)) downStatusUnknown++;
    }
    return { nodes: this.#nodes.size, down, downStatusUnknown };
  }

  /**
   * The facts of node `name`, when Talos confirmed the node's identity on the IP they came from and
   * everything `needs` asks for is known; starts the one-off reads it lacks (their completion calls
   * `onChange`). Last known facts stay usable while a watch is down.
   */
  facts(name: string, needs: FactsNeeds): FactsState {
    const w = this.#nodes.get(name);
    if (!w) return { ready: false, waitingFor: "its Talos watches to start" };
    if (w.gate === "queued") return { ready: false, waitingFor: this.#queuedFor() };
    const error = w.down !== 0 ? w.lastError : undefined;
    const limit = w.down !== 0 ? w.lastLimit : undefined;
    const waiting = (what: string, err = error, lim = limit): FactsState => {
      if (err === undefined) return { ready: false, waitingFor: what };
      return lim === undefined
        ? { ready: false, waitingFor: what, error: err }
        : { ready: false, waitingFor: what, error: err, limit: lim };
    };
    const failedRead = (kind: ReadKind, what: string): FactsState => {
      const f = w.failedReads.get(kind);
      return f ? waiting(what, f.error, f.limit) : waiting(what);
    };
    if (!w.metadataKnown || !w.addressesKnown) return waiting(`Talos on ${w.watchIP} to answer`);
    if (!w.metadata) return waiting("Talos to publish its PlatformMetadata");
    if (w.confirmedIP !== w.answeredIP) {
      void this.#verify(w, w.answeredIP);
      const what = `Talos to confirm that the machine on ${w.answeredIP} is node ${name}`;
      if (w.mismatch?.ip === w.answeredIP)
        return { ready: false, waitingFor: what, mismatch: { ...w.mismatch } };
      return failedRead("nodename", what);
    }
    if (needs.systemInformation && w.systemInformation === undefined) {
      this.#read(w, "systeminformation");
      return failedRead("systeminformation", "its SystemInformation");
    }
    if (needs.talosVersion && w.talosVersion === undefined) {
      this.#read(w, "version");
      return failedRead("version", "its Talos version");
    }
    const facts: NodeFacts = { platformMetadata: w.metadata, addresses: [...w.addresses.values()] };
    if (needs.systemInformation && w.systemInformation) facts.systemInformation = w.systemInformation;
    if (needs.talosVersion && w.talosVersion !== undefined) facts.talosVersion = w.talosVersion;
    return { ready: true, facts, nodeIP: w.answeredIP };
  }

  /**
   * What the watches say to a CSR of node `name`, whose Node has `ips` now ({@link WatchedCsrFacts}):
   * Talos' facts without a call, a wait for reads under way (the change callback names the node when
   * they end), or that Talos must be asked directly. Always the latter without
   * {@link TalosWatchCacheOptions.csrFacts}.
   * @param withDNS the CSR has DNS names besides the node's
   */
  csrFacts(name: string, ips: readonly string[], withDNS: boolean): CsrFactsAnswer {
    if (!this.#csr) return { state: "ask", why: "the watches keep no CSR facts" };
    return this.#csr.answer(this.#nodes.get(name), ips, withDNS);
  }

  /**
   * One pass of the shared timer: marks watches without any answer for too long as down, polls
   * down nodes whose refresh period has passed, and announces one-off reads due for a retry.
   * Called by the timer; exposed for tests.
   */
  tick(): void {
    const now = this.#now();
    for (const w of this.#nodes.values()) {
      if (
        (!w.metadataKnown || !w.addressesKnown) &&
        w.gate !== "queued" &&
        w.down === 0 &&
        now - w.startedMs >= this.#stallMs
      ) {
        this.#failed(
          w,
          "stalled",
          `no answer from Talos on ${w.watchIP} for ${Math.round(this.#stallMs / 1000)} s`,
        );
      }
      if (w.down !== 0 && now - w.polledMs >= this.#refreshMs) {
        w.polledMs = now;
        void this.#poll(w);
      }
      for (const [kind, failed] of w.failedReads) {
        if (failed.announced || now < failed.retryAtMs || (w.reading & READ_BITS[kind]) !== 0) continue;
        failed.announced = true;
        this.#onChange(w.name);
      }
    }
  }

  /** Stops every watch and the timer. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    for (const w of this.#nodes.values()) this.#stop(w);
    this.#nodes.clear();
    this.#queue.clear();
  }

  /** What a queued node waits for (counting the nodes ahead of it would cost a walk of the queue). */
  #queuedFor(): string {
    const n = this.#queue.size;
    return `its turn to start its Talos watches (${n} node${n === 1 ? "" : "s"} waiting; ${this.#maxStarting} start at a time)`;
  }

  /** The node leaves the start gate (known, down, stopped); the next queued nodes start. */
  #leaveGate(w: NodeWatch): void {
    if (w.gate === "queued") this.#queue.delete(w);
    else if (w.gate === "starting") this.#starting--;
    else return;
    w.gate = undefined;
    if (this.#pumping) return; // the loop below is running further up the stack
    this.#pumping = true;
    try {
      while (!this.#closed && this.#starting < this.#maxStarting && this.#queue.size > 0) {
        const next = this.#queue.values().next().value as NodeWatch;
        this.#queue.delete(next);
        this.#starting++;
        next.gate = "starting";
        this.#start(next);
      }
    } finally {
      this.#pumping = false;
    }
  }

  #tracked(w: NodeWatch): boolean {
    return !this.#closed && this.#nodes.get(w.name) === w;
  }

  #stop(w: NodeWatch): void {
    this.#leaveGate(w);
    this.#closeWatches(w);
    w.cancelFailover?.();
    w.cancelFailover = undefined;
  }

  #closeWatches(w: NodeWatch): void {
    this.#closeMetadataWatch(w);
    w.addressesWatch?.close();
    w.addressesWatch = undefined;
    w.addressesBroke = false;
  }

  #closeMetadataWatch(w: NodeWatch): void {
    w.cancelSettle?.();
    w.cancelSettle = undefined;
    w.metadataWatch?.close();
    w.metadataWatch = undefined;
  }

  #start(w: NodeWatch): void {
    this.#closeWatches(w);
    w.epoch++;
    w.down &= ~DOWN_BITS.ended;
    w.down &= ~DOWN_BITS.stalled;
    w.startedMs = this.#now();
    w.addressesWatch = this.#watchAddresses(w, w.watchIP);
    void this.#readMetadata(w, w.watchIP);
    // Alongside, so that confirming the node costs no round trip of its own.
    if (w.confirmedIP !== w.watchIP) void this.#verify(w, w.watchIP);
  }

  /**
   * PlatformMetadata from `ip`, read once; watched instead when it is not complete yet, or when the
   * read fails (the watch retries, and reports the failure as the node's).
   */
  async #readMetadata(w: NodeWatch, ip: string): Promise<void> {
    let metadata: PlatformMetadata | undefined;
    try {
      metadata = await this.#talos.platformMetadata(ip, { attempts: 1, ...this.#callOpts(w) });
    } catch (err) {
      if (!this.#tracked(w) || w.watchIP !== ip) return;
      if (!(err instanceof TalosNotFoundError)) {
        this.#openMetadataWatch(w);
        return;
      }
    }
    if (!this.#tracked(w) || w.watchIP !== ip || w.metadataWatch) return;
    this.#setMetadata(w, ip, metadata);
    this.#recovered(w, "metadata");
    if (!metadataComplete(metadata)) this.#openMetadataWatch(w);
    this.#onChange(w.name);
  }

  /**
   * The address watch of `w` delivered its contents; after it broke (`resumed`), the metadata is
   * watched until it settles again and, for CSRs, Talos asked which node it is.
   */
  #synced(w: NodeWatch, resumed: boolean): void {
    if (resumed) this.#openMetadataWatch(w);
    if (!this.#csr) return;
    if (resumed) void this.#verify(w, w.watchIP);
    this.#csr.synced(w);
  }

  #csrFacts(talos: TalosWatchClient): WatchedCsrFacts {
    return new WatchedCsrFacts({
      talos: talos as CsrWatchClient,
      confirm: (w) => {
        const failed = w.failedReads.get("nodename");
        if (failed && this.#now() < failed.retryAtMs) return false;
        void this.#verify(w, w.watchIP);
        return true;
      },
      changed: (w) => this.#onChange(w.name),
      tracked: (w) => this.#tracked(w),
      statusUnknown: (name) => this.#statusUnknown(name),
    });
  }

  #openMetadataWatch(w: NodeWatch): void {
    if (w.metadataWatch === undefined) w.metadataWatch = this.#watchMetadata(w, w.watchIP);
  }

  /** (Re)starts the settle time of an open metadata watch: it closes when it runs out while complete. */
  #settle(w: NodeWatch): void {
    w.cancelSettle?.();
    w.cancelSettle = undefined;
    if (!metadataComplete(w.metadata)) return;
    // Closing the watch cancels this, so when it runs, the watch it was started for is open.
    w.cancelSettle = this.#schedule(() => {
      w.cancelSettle = undefined;
      if (!this.#tracked(w)) return;
      log.v(4).info("PlatformMetadata settled; its watch closes", { node: w.name, ip: w.watchIP });
      this.#closeMetadataWatch(w);
    }, this.#settleMs);
  }

  /** Takes PlatformMetadata from `ip`; another machine identity there must be confirmed again. */
  #setMetadata(w: NodeWatch, ip: string, metadata: PlatformMetadata | undefined): void {
    w.metadata = metadata;
    w.metadataKnown = true;
    w.answeredIP = ip;
    if (!metadata) return;
    if (w.identity !== undefined && !sameMachine(w.identity, metadata)) {
      log.v(2).info("Talos machine identity changed; confirming the node again", { node: w.name, ip });
      w.confirmedIP = undefined;
      w.systemInformation = undefined;
      w.talosVersion = undefined;
      void this.#verify(w, ip);
    }
    w.identity = metadata;
  }

  /**
   * Asks Talos on `ip` for its node name (one read at a time, failures and refusals retried with
   * backoff). The name of the node confirms `ip`; another name is a mismatch, and a node with an IP
   * not refused yet moves its watches there at once. Once every IP was refused, the watches stay and
   * only that IP is asked again: new Node addresses (track()) start over.
   */
  async #verify(w: NodeWatch, ip: string): Promise<void> {
    const failed = w.failedReads.get("nodename");
    if ((w.reading & READ_BITS.nodename) !== 0 || (failed && this.#now() < failed.retryAtMs)) return;
    w.reading |= READ_BITS.nodename;
    const epoch = w.epoch;
    let moveTo: number | undefined;
    const fail = (error: string, retryNow: boolean, limit?: PeerLimitName) => {
      const failures = (failed?.failures ?? 0) + 1;
      w.failedReads.set("nodename", {
        failures,
        retryAtMs: this.#now() + (retryNow ? 0 : backoffDelay(failures - 1, this.#retryBackoff, Math.random)),
        error,
        limit,
        announced: retryNow,
      });
    };
    try {
      const nodename = await this.#talos.nodename(ip, this.#callOpts(w));
      if (!this.#tracked(w)) return;
      if (nodename === w.name) {
        w.confirmedIP = ip;
        // Holds for CSRs only if the address watch did not break meanwhile.
        if (w.epoch === epoch) w.confirmedEpoch = epoch;
        w.mismatch = undefined;
        w.refusedIPs = undefined;
        w.failedReads.delete("nodename");
      } else {
        log.v(2).info("Talos on the node's IP is another node", { node: w.name, ip, nodename });
        w.mismatch = { ip, nodename };
        w.refusedIPs ??= new Set();
        w.refusedIPs.add(ip);
        if (w.confirmedIP === ip) w.confirmedIP = undefined;
        const next = (w.ips.indexOf(ip) + 1) % w.ips.length;
        if (ip === w.watchIP && !w.refusedIPs.has(w.ips[next] as string)) moveTo = next;
        fail(`Talos on ${ip} is node ${JSON.stringify(nodename)}`, moveTo !== undefined);
      }
    } catch (err) {
      if (!this.#tracked(w)) return;
      fail((err as Error).message, false, limitOf(err));
    } finally {
      w.reading &= ~READ_BITS.nodename;
    }
    if (moveTo !== undefined) {
      // What the other machine reported must not linger until the next IP answers.
      w.metadata = undefined;
      w.metadataKnown = false;
      w.identity = undefined;
      w.addresses.clear();
      w.addressesKnown = false;
      w.ipIndex = moveTo;
      this.#start(w);
    }
    this.#onChange(w.name);
  }

  /**
   * PlatformMetadata from `ip`: each event updates the facts and re-queues the node; the watch closes
   * once the metadata settled ({@link #settle}).
   */
  #watchMetadata(w: NodeWatch, ip: string): TalosWatch {
    return this.#talos.subscribe(ip, "platformmetadata", {
      nodeStatusUnknown: () => this.#statusUnknown(w.name),
      onEvent: (ev) => {
        if (ev.type === "errored") {
          w.cancelSettle?.();
          w.cancelSettle = undefined;
          if (ev.limit !== undefined) {
            // Refused: no metadata of this machine is used until it answers within the bounds.
            w.metadata = undefined;
            w.metadataKnown = false;
          }
          this.#failed(w, "metadata", ev.error, ev.limit);
          return;
        }
        if (ev.type === "created" || ev.type === "updated") this.#setMetadata(w, ip, ev.resource);
        else if (ev.type === "destroyed") this.#setMetadata(w, ip, undefined);
        else return;
        this.#recovered(w, "metadata");
        this.#settle(w);
        this.#onChange(w.name);
      },
      onEnd: (err) => this.#ended(w, err),
    });
  }

  /** AddressStatuses from `ip` ({@link AddressWatchHandler}). */
  #watchAddresses(w: NodeWatch, ip: string): TalosWatch {
    return this.#talos.subscribe(ip, "addresses", new AddressWatchHandler(w, this.#hooks));
  }

  /** A watch ended on a non-retryable error; the node is polled until its watches start again. */
  #ended(w: NodeWatch, err: TalosError): void {
    if (err.code !== "closed") this.#failed(w, "ended", err.message);
  }

  #failed(w: NodeWatch, part: DownPart, error: string, limit?: PeerLimitName): void {
    if (!this.#tracked(w)) return;
    if (w.down === 0) w.polledMs = this.#now();
    w.down |= DOWN_BITS[part];
    w.lastError = error;
    w.lastLimit = limit;
    log.v(2).info("Talos watch down", { node: w.name, ip: w.watchIP, part, err: error });
    this.#onChange(w.name);
    if (part !== "ended" && w.cancelFailover === undefined && w.nextIPIndex() !== undefined) {
      // The watch keeps retrying this IP; after a backoff, try the node's other IP instead.
      w.cancelFailover = this.#schedule(
        () => {
          w.cancelFailover = undefined;
          const next = w.nextIPIndex();
          if (!this.#tracked(w) || w.down === 0 || next === undefined) return;
          w.ipIndex = next;
          this.#start(w);
        },
        backoffDelay(w.failovers++, this.#retryBackoff, Math.random),
      );
    }
    this.#leaveGate(w);
  }

  #recovered(w: NodeWatch, part: DownPart): void {
    w.down &= ~DOWN_BITS[part];
    w.down &= ~DOWN_BITS.stalled;
    if (w.down === 0) {
      w.failovers = 0;
      w.cancelFailover?.();
      w.cancelFailover = undefined;
    }
    if (w.metadataKnown && w.addressesKnown) this.#leaveGate(w);
  }

  /** What every call about node `w` says of it: whether its status is unknown (its failures count apart). */
  #callOpts(w: NodeWatch): { nodeStatusUnknown: boolean } {
    return { nodeStatusUnknown: this.#statusUnknown(w.name) };
  }

  /** Reads PlatformMetadata (first askable IP that answers) and AddressStatuses of a node whose watch is down. */
  async #poll(w: NodeWatch): Promise<void> {
    const opts = { attempts: 1, ...this.#callOpts(w) };
    try {
      const { nodeIP, value } = await this.#talos.firstAnswer(
        w.askableIPs(),
        (ip, o) => this.#talos.platformMetadata(ip, o),
        opts,
      );
      const list = await this.#talos.addresses(nodeIP, opts);
      if (!this.#tracked(w)) return;
      this.#setMetadata(w, nodeIP, value);
      w.addresses.clear();
      for (const a of list) w.addresses.set(a.id, a);
      w.addressesKnown = true;
      if ((w.down & DOWN_BITS.ended) !== 0) {
        // The watches ended on an error that may be gone now (e.g. a fixed role): try them again.
        w.ipIndex = Math.max(0, w.ips.indexOf(nodeIP));
        this.#start(w);
      }
    } catch (err) {
      if (!this.#tracked(w)) return;
      w.lastError = (err as Error).message;
      w.lastLimit = limitOf(err);
      if (err instanceof TalosNotFoundError) {
        w.metadata = undefined;
        w.metadataKnown = true;
      }
      if (err instanceof TalosLimitError) this.#refused(w, err);
    }
    this.#onChange(w.name);
  }

  /**
   * A poll's answer was over a per-machine bound: the fact it refused is dropped (the addresses, or
   * the metadata, whose watch then opens so that an answer within the bounds brings it back).
   */
  #refused(w: NodeWatch, err: TalosLimitError): void {
    if (err.limit === "talos_addresses" || err.limit === "talos_address_length") {
      w.addresses.clear();
      w.addressesKnown = false;
      return;
    }
    w.metadata = undefined;
    w.metadataKnown = false;
    this.#openMetadataWatch(w);
  }

  #read(w: NodeWatch, kind: ReadKind): void {
    const failed = w.failedReads.get(kind);
    if ((w.reading & READ_BITS[kind]) !== 0 || (failed && this.#now() < failed.retryAtMs)) return;
    w.reading |= READ_BITS[kind];
    const ip = w.answeredIP;
    const read =
      kind === "systeminformation"
        ? this.#talos.systemInformation(ip, this.#callOpts(w)).then((si) => {
            w.systemInformation = si ?? null;
          })
        : this.#talos.version({ nodeIP: ip, ...this.#callOpts(w) }).then((v) => {
            w.talosVersion = v.tag;
          });
    read
      .then(
        () => w.failedReads.delete(kind),
        (err: unknown) => {
          if (kind === "systeminformation" && err instanceof TalosPermissionError) {
            // Talos releases before SystemInformation existed refuse the type: the node has none.
            w.systemInformation = null;
            w.failedReads.delete(kind);
            return;
          }
          const failures = (failed?.failures ?? 0) + 1;
          w.failedReads.set(kind, {
            failures,
            retryAtMs: this.#now() + backoffDelay(failures - 1, this.#retryBackoff, Math.random),
            error: (err as Error).message,
            limit: limitOf(err),
            announced: false,
          });
        },
      )
      .finally(() => {
        w.reading &= ~READ_BITS[kind];
        if (this.#tracked(w)) this.#onChange(w.name);
      });
  }
}
