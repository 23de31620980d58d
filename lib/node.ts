// The cloud-node controller: initializes Nodes that a kubelet registered with
// `--cloud-provider=external` from what Talos knows about them, and keeps them current.
//
// One Node's path: informer event → WorkQueue("cloud-node") → reconcile(name): read the cached Node
// → its Talos facts (from the node's watch cache below) → transform (lib/transform.ts, pure) →
// desiredNode (lib/desirednode.ts, pure: labels, annotations, taints, providerID, addresses via
// lib/addresses.ts) → nodePatch (lib/desirednode.ts, pure diff) → at most two writes (status
// addresses, then one JSON patch of metadata and spec that also removes the uninitialized taint) →
// Events.
//
// Talos facts are watch-first: every Node with an IP gets one COSI Watch on its PlatformMetadata
// and one on its AddressStatuses (streams multiplexed on the Talos client's shared channel); their
// bootstrap contents initialize the node, later events re-queue it within moments. The Node's IPs are
// its kubelet's to write, so no fact from an IP is used before Talos confirms that the machine
// answering there is that node (its Nodename, read alongside the watches; again whenever the IP or
// the machine's identity changes), and a node IP that machine does not have is neither written as
// an InternalIP nor asked afterwards. SystemInformation and the Talos version are read once per node,
// only when a rule's template reads them. Nodes whose watch is down are polled every
// --node-status-update-frequency by one shared timer; a healthy cluster makes no periodic Talos calls.

import { ipsOnMachine, type NodeIPs, type NodeIPsOnMachine, nodeIPs, nodeIPsOnMachine } from "./addresses.ts";
import { type Backoff, backoffDelay } from "./backoff.ts";
import type { Informer, LeanNode } from "./cache.ts";
import type { CompiledConfig } from "./config.ts";
import type { ControllerContext } from "./controller.ts";
import {
  describeTransformErrors,
  desiredNode,
  instanceFacts,
  isForeign,
  isUninitialized,
  nodePatch,
} from "./desirednode.ts";
import type { EventRecorder } from "./events.ts";
import { isNotFound, type KubeClient, KubeError, PATCH } from "./kube.ts";
import { type Logger, logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { runWorkers, WorkQueue } from "./queue.ts";
import {
  type TalosAddressStatus,
  type TalosClient,
  TalosNotFoundError,
  TalosPermissionError,
} from "./talos.ts";
import {
  type RecordProblem,
  readManagedRecord,
  rulesMayRead,
  SYSTEM_INFORMATION_FIELDS,
  TALOS_VERSION_FIELD,
  transform,
} from "./transform.ts";
import type { NodeFacts, PlatformMetadata, SystemInformation } from "./types.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL, PROVIDED_NODE_IP_ANNOTATION } from "./wellknown.ts";

const log = logger("cloud-node");

// ---------------------------------------------------------------------------------------------
// Talos facts of every node, kept current by COSI watches.

/** The Talos client calls {@link TalosWatchCache} makes (a subset, so that tests can fake it). */
export type TalosWatchClient = Pick<
  TalosClient,
  "watch" | "platformMetadata" | "addresses" | "systemInformation" | "version" | "firstAnswer" | "nodename"
>;

/** Which optional facts the rules need (each costs a Talos call per node). */
export interface FactsNeeds {
  /** A rule's template may read a SystemInformation field. */
  systemInformation: boolean;
  /** A rule's template may read TalosVersion. */
  talosVersion: boolean;
}

/** Talos on a node's IP is another node: the name it reported. */
export interface NodeMismatch {
  ip: string;
  nodename: string;
}

/** A node's facts, or what they still wait for. */
export type FactsState =
  | { ready: true; facts: NodeFacts /** The IP Talos answered on. */; nodeIP: string }
  | {
      ready: false;
      waitingFor: string;
      /** Why Talos does not answer, when it fails. */
      error?: string;
      /** The facts came from another machine than the node (they are not used). */
      mismatch?: NodeMismatch;
    };

/** Options of {@link TalosWatchCache}. */
export interface TalosWatchCacheOptions {
  talos: TalosWatchClient;
  /** Called whenever a node's facts or watch state change (the controller re-queues the node). */
  onChange: (name: string) => void;
  /** `--node-status-update-frequency`: how often nodes whose watch is down are polled. */
  refreshMs: number;
  /** Period of the shared timer (default min(5 s, refreshMs)). */
  tickMs?: number;
  /** A watch without any answer for this long counts as down (default 30 s). */
  stallMs?: number;
  /** Backoff of retried one-off reads and of moving a dual-stack node's watches to its other IP (default 1 s → 60 s). */
  retryBackoff?: Backoff;
  now?: () => number;
}

type ReadKind = "systeminformation" | "version" | "nodename";

/** A one-off read of a node (SystemInformation, Version, Nodename) that failed and waits to be retried. */
interface FailedRead {
  failures: number;
  retryAtMs: number;
  error: string;
  /** The controller was told that the retry time has come. */
  announced: boolean;
}

/** One node's watches and facts. Kept small: a thousand of them must stay cheap. */
class NodeWatch {
  ips: readonly string[];
  ipIndex = 0;
  /** The IP whose answers the facts came from (providerID fallback and one-off reads use it). */
  answeredIP: string;
  metadata: PlatformMetadata | undefined;
  /** The PlatformMetadata watch told whether the resource exists. */
  metadataKnown = false;
  readonly addresses = new Map<string, TalosAddressStatus>();
  /** The AddressStatus watch delivered its bootstrap contents. */
  addressesKnown = false;
  /** The IP on which Talos confirmed that the machine is this node: facts are used only from it. */
  confirmedIP: string | undefined;
  /** The last IP on which Talos said it is another node. */
  mismatch: NodeMismatch | undefined;
  /** IPs on which Talos said it is another node, until one confirms: the watches never return there. */
  refusedIPs: Set<string> | undefined;
  /** Platform, hostname, instance and provider ID last seen: when they change, so may the machine. */
  identity: string | undefined;
  /** Undefined until read; null when the node has none. */
  systemInformation: SystemInformation | null | undefined;
  talosVersion: string | undefined;
  readonly reading = new Set<ReadKind>();
  readonly failedReads = new Map<ReadKind, FailedRead>();
  /** Which parts are down: "metadata", "addresses", "stalled", "ended" (non-retryable). */
  readonly down = new Set<string>();
  lastError = "";
  startedMs: number;
  /** The refresh period of a down node counts from here (outage start, then each poll). */
  polledMs = 0;
  failovers = 0;
  failoverTimer: ReturnType<typeof setTimeout> | undefined;
  abort: AbortController | undefined;

  constructor(
    readonly name: string,
    ips: readonly string[],
    now: number,
  ) {
    this.ips = ips;
    this.answeredIP = ips[0] ?? "";
    this.startedMs = now;
  }

  get watchIP(): string {
    return this.ips[this.ipIndex] ?? "";
  }

  /**
   * The IPs Talos may be asked on: all until a machine is confirmed as the node and its addresses
   * are known, then only those that machine has (another one was claimed by the kubelet and may lead
   * to someone else's Talos). Recomputed on each use, so an address that appears later counts.
   */
  askableIPs(): readonly string[] {
    if (this.confirmedIP === undefined || !this.addressesKnown) return this.ips;
    return ipsOnMachine(this.ips, this.confirmedIP, [...this.addresses.values()]);
  }

  /** The index of the next askable IP after the watched one, if there is another. */
  nextIPIndex(): number | undefined {
    const askable = this.askableIPs();
    for (let step = 1; step < this.ips.length; step++) {
      const i = (this.ipIndex + step) % this.ips.length;
      if (askable.includes(this.ips[i] as string)) return i;
    }
    return undefined;
  }
}

/**
 * Every tracked node's Talos facts, from one PlatformMetadata watch (with the singleton id, so its
 * first event is the current state) and one AddressStatus watch (bootstrap contents, then
 * BOOTSTRAPPED) per node, both on the Talos client's shared channel. Facts are handed out only from
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
  readonly #now: () => number;
  readonly #nodes = new Map<string, NodeWatch>();
  readonly #timer: ReturnType<typeof setInterval>;
  #closed = false;

  constructor(opts: TalosWatchCacheOptions) {
    if (!(opts.refreshMs > 0)) throw new TypeError("TalosWatchCache: refreshMs must be positive");
    this.#talos = opts.talos;
    this.#onChange = opts.onChange;
    this.#refreshMs = opts.refreshMs;
    this.#stallMs = opts.stallMs ?? 30_000;
    this.#retryBackoff = opts.retryBackoff ?? { initialMs: 1_000, maxMs: 60_000 };
    this.#now = opts.now ?? Date.now;
    this.#timer = setInterval(() => this.tick(), opts.tickMs ?? Math.min(5_000, opts.refreshMs));
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /** Starts watching node `name` on `ips` (preferred first); restarts when its IPs changed. */
  track(name: string, ips: readonly string[]): void {
    if (this.#closed) return;
    const w = this.#nodes.get(name);
    if (w && w.ips.join() === ips.join()) return;
    if (w) this.#stop(w);
    const next = new NodeWatch(name, ips, this.#now());
    this.#nodes.set(name, next);
    this.#start(next);
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
    return (this.#nodes.get(name)?.down.size ?? 0) > 0;
  }

  /** Nodes tracked, and how many of them have a watch down. */
  stats(): { nodes: number; down: number } {
    let down = 0;
    for (const w of this.#nodes.values()) if (w.down.size > 0) down++;
    return { nodes: this.#nodes.size, down };
  }

  /**
   * The facts of node `name`, when Talos confirmed the node's identity on the IP they came from and
   * everything `needs` asks for is known; starts the one-off reads it lacks (their completion calls
   * `onChange`). Last known facts stay usable while a watch is down.
   */
  facts(name: string, needs: FactsNeeds): FactsState {
    const w = this.#nodes.get(name);
    if (!w) return { ready: false, waitingFor: "its Talos watches to start" };
    const error = w.down.size > 0 ? w.lastError : undefined;
    const waiting = (what: string, err = error): FactsState =>
      err === undefined ? { ready: false, waitingFor: what } : { ready: false, waitingFor: what, error: err };
    if (!w.metadataKnown || !w.addressesKnown) return waiting(`Talos on ${w.watchIP} to answer`);
    if (!w.metadata) return waiting("Talos to publish its PlatformMetadata");
    if (w.confirmedIP !== w.answeredIP) {
      void this.#verify(w, w.answeredIP);
      const what = `Talos to confirm that the machine on ${w.answeredIP} is node ${name}`;
      if (w.mismatch?.ip === w.answeredIP)
        return { ready: false, waitingFor: what, mismatch: { ...w.mismatch } };
      return waiting(what, w.failedReads.get("nodename")?.error ?? error);
    }
    if (needs.systemInformation && w.systemInformation === undefined) {
      this.#read(w, "systeminformation");
      return waiting("its SystemInformation", w.failedReads.get("systeminformation")?.error ?? error);
    }
    if (needs.talosVersion && w.talosVersion === undefined) {
      this.#read(w, "version");
      return waiting("its Talos version", w.failedReads.get("version")?.error ?? error);
    }
    const facts: NodeFacts = { platformMetadata: w.metadata, addresses: [...w.addresses.values()] };
    if (needs.systemInformation && w.systemInformation) facts.systemInformation = w.systemInformation;
    if (needs.talosVersion && w.talosVersion !== undefined) facts.talosVersion = w.talosVersion;
    return { ready: true, facts, nodeIP: w.answeredIP };
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
        w.down.size === 0 &&
        now - w.startedMs >= this.#stallMs
      ) {
        this.#failed(
          w,
          "stalled",
          `no answer from Talos on ${w.watchIP} for ${Math.round(this.#stallMs / 1000)} s`,
        );
      }
      if (w.down.size > 0 && now - w.polledMs >= this.#refreshMs) {
        w.polledMs = now;
        void this.#poll(w);
      }
      for (const [kind, failed] of w.failedReads) {
        if (failed.announced || now < failed.retryAtMs || w.reading.has(kind)) continue;
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
  }

  #tracked(w: NodeWatch): boolean {
    return !this.#closed && this.#nodes.get(w.name) === w;
  }

  #stop(w: NodeWatch): void {
    w.abort?.abort();
    clearTimeout(w.failoverTimer);
    w.failoverTimer = undefined;
  }

  #start(w: NodeWatch): void {
    w.abort?.abort();
    const abort = new AbortController();
    w.abort = abort;
    w.down.delete("ended");
    w.down.delete("stalled");
    w.startedMs = this.#now();
    void this.#watchMetadata(w, w.watchIP, abort.signal);
    void this.#watchAddresses(w, w.watchIP, abort.signal);
    // Alongside the watches, so that confirming the node costs no round trip of its own.
    if (w.confirmedIP !== w.watchIP) void this.#verify(w, w.watchIP);
  }

  /** Takes PlatformMetadata from `ip`; another machine identity there must be confirmed again. */
  #setMetadata(w: NodeWatch, ip: string, metadata: PlatformMetadata | undefined): void {
    w.metadata = metadata;
    w.metadataKnown = true;
    w.answeredIP = ip;
    if (!metadata) return;
    const identity = JSON.stringify([
      metadata.platform,
      metadata.hostname,
      metadata.instanceId,
      metadata.providerId,
    ]);
    if (w.identity !== undefined && w.identity !== identity) {
      log.v(2).info("Talos machine identity changed; confirming the node again", { node: w.name, ip });
      w.confirmedIP = undefined;
      w.systemInformation = undefined;
      w.talosVersion = undefined;
      void this.#verify(w, ip);
    }
    w.identity = identity;
  }

  /**
   * Asks Talos on `ip` for its node name (one read at a time, failures and refusals retried with
   * backoff). The name of the node confirms `ip`; another name is a mismatch, and a node with an IP
   * not refused yet moves its watches there at once. Once every IP was refused, the watches stay and
   * only that IP is asked again: new Node addresses (track()) start over.
   */
  async #verify(w: NodeWatch, ip: string): Promise<void> {
    const failed = w.failedReads.get("nodename");
    if (w.reading.has("nodename") || (failed && this.#now() < failed.retryAtMs)) return;
    w.reading.add("nodename");
    let moveTo: number | undefined;
    const fail = (error: string, retryNow: boolean) => {
      const failures = (failed?.failures ?? 0) + 1;
      w.failedReads.set("nodename", {
        failures,
        retryAtMs: this.#now() + (retryNow ? 0 : backoffDelay(failures - 1, this.#retryBackoff)),
        error,
        announced: retryNow,
      });
    };
    try {
      const nodename = await this.#talos.nodename(ip);
      if (!this.#tracked(w)) return;
      if (nodename === w.name) {
        w.confirmedIP = ip;
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
      fail((err as Error).message, false);
    } finally {
      w.reading.delete("nodename");
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

  async #watchMetadata(w: NodeWatch, ip: string, signal: AbortSignal): Promise<void> {
    try {
      for await (const ev of this.#talos.watch(ip, "platformmetadata", { signal })) {
        if (signal.aborted) return;
        if (ev.type === "errored") {
          this.#failed(w, "metadata", ev.error);
          continue;
        }
        if (ev.type === "created" || ev.type === "updated") this.#setMetadata(w, ip, ev.resource);
        else if (ev.type === "destroyed") this.#setMetadata(w, ip, undefined);
        else continue;
        this.#recovered(w, "metadata");
        this.#onChange(w.name);
      }
    } catch (err) {
      if (!signal.aborted) this.#failed(w, "ended", (err as Error).message);
    }
  }

  async #watchAddresses(w: NodeWatch, ip: string, signal: AbortSignal): Promise<void> {
    // While (re)delivering its contents after a (re)connect, the watch reports once, at BOOTSTRAPPED.
    let syncing = true;
    let changed = false;
    try {
      for await (const ev of this.#talos.watch(ip, "addresses", { signal })) {
        if (signal.aborted) return;
        switch (ev.type) {
          case "errored":
            syncing = true;
            this.#failed(w, "addresses", ev.error);
            continue;
          case "created":
          case "updated": {
            const old = w.addresses.get(ev.id);
            const a = ev.resource;
            if (!old || old.address !== a.address || old.linkName !== a.linkName || old.flags !== a.flags) {
              changed = true;
            }
            w.addresses.set(ev.id, a);
            break;
          }
          case "destroyed":
            changed = w.addresses.delete(ev.id) || changed;
            break;
          case "bootstrapped":
            syncing = false;
            changed = true;
            w.addressesKnown = true;
            this.#recovered(w, "addresses");
            break;
        }
        if (changed && !syncing) {
          changed = false;
          this.#onChange(w.name);
        }
      }
    } catch (err) {
      if (!signal.aborted) this.#failed(w, "ended", (err as Error).message);
    }
  }

  #failed(w: NodeWatch, part: string, error: string): void {
    if (!this.#tracked(w)) return;
    if (w.down.size === 0) w.polledMs = this.#now();
    w.down.add(part);
    w.lastError = error;
    log.v(2).info("Talos watch down", { node: w.name, ip: w.watchIP, part, err: error });
    this.#onChange(w.name);
    if (part !== "ended" && w.failoverTimer === undefined && w.nextIPIndex() !== undefined) {
      // The watch keeps retrying this IP; after a backoff, try the node's other IP instead.
      w.failoverTimer = setTimeout(
        () => {
          w.failoverTimer = undefined;
          const next = w.nextIPIndex();
          if (!this.#tracked(w) || w.down.size === 0 || next === undefined) return;
          w.ipIndex = next;
          this.#start(w);
        },
        backoffDelay(w.failovers++, this.#retryBackoff),
      );
      (w.failoverTimer as { unref?: () => void }).unref?.();
    }
  }

  #recovered(w: NodeWatch, part: string): void {
    w.down.delete(part);
    w.down.delete("stalled");
    if (w.down.size === 0) {
      w.failovers = 0;
      clearTimeout(w.failoverTimer);
      w.failoverTimer = undefined;
    }
  }

  /** Reads PlatformMetadata (first askable IP that answers) and AddressStatuses of a node whose watch is down. */
  async #poll(w: NodeWatch): Promise<void> {
    try {
      const { nodeIP, value } = await this.#talos.firstAnswer(
        w.askableIPs(),
        (ip, o) => this.#talos.platformMetadata(ip, o),
        { attempts: 1 },
      );
      const list = await this.#talos.addresses(nodeIP, { attempts: 1 });
      if (!this.#tracked(w)) return;
      this.#setMetadata(w, nodeIP, value);
      w.addresses.clear();
      for (const a of list) w.addresses.set(a.id, a);
      w.addressesKnown = true;
      if (w.down.has("ended")) {
        // The watches ended on an error that may be gone now (e.g. a fixed role): try them again.
        w.ipIndex = Math.max(0, w.ips.indexOf(nodeIP));
        this.#start(w);
      }
    } catch (err) {
      if (!this.#tracked(w)) return;
      w.lastError = (err as Error).message;
      if (err instanceof TalosNotFoundError) {
        w.metadata = undefined;
        w.metadataKnown = true;
      }
    }
    this.#onChange(w.name);
  }

  #read(w: NodeWatch, kind: ReadKind): void {
    const failed = w.failedReads.get(kind);
    if (w.reading.has(kind) || (failed && this.#now() < failed.retryAtMs)) return;
    w.reading.add(kind);
    const ip = w.answeredIP;
    const read =
      kind === "systeminformation"
        ? this.#talos.systemInformation(ip).then((si) => {
            w.systemInformation = si ?? null;
          })
        : this.#talos.version({ nodeIP: ip }).then((v) => {
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
            retryAtMs: this.#now() + backoffDelay(failures - 1, this.#retryBackoff),
            error: (err as Error).message,
            announced: false,
          });
        },
      )
      .finally(() => {
        w.reading.delete(kind);
        if (this.#tracked(w)) this.#onChange(w.name);
      });
  }
}

// ---------------------------------------------------------------------------------------------
// The controller.

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

/** Whether a Node update touches what this controller reads or writes (heartbeats do not). */
function relevantChange(a: LeanNode, b: LeanNode): boolean {
  const view = (n: LeanNode) =>
    JSON.stringify([
      n.metadata.labels,
      n.metadata.annotations,
      n.metadata.deletionTimestamp ?? "",
      n.spec.providerID ?? "",
      n.spec.taints,
      n.status.addresses,
    ]);
  return view(a) !== view(b);
}

/** What {@link CloudNodeController} works with (the controller context's parts it uses). */
export interface CloudNodeOptions {
  client: Pick<KubeClient, "patch">;
  nodes: Pick<Informer<LeanNode>, "addHandlers" | "get" | "list">;
  events: Pick<EventRecorder, "record">;
  registry: Registry;
  config: { readonly current: CompiledConfig; onChange(fn: (c: CompiledConfig) => void): () => void };
  talos: TalosWatchClient & { readonly clusterName: string };
  /** `--concurrent-node-syncs`. */
  workers: number;
  /** `--node-status-update-frequency`. */
  statusUpdateFrequencyMs: number;
  log?: Logger;
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
      "Initialization passes that left a node tainted, by reason (talos, identity, nodeip, kubernetes).",
      ["reason"],
    ),
    watches: reg.gauge("talosccm_node_talos_watches", "Nodes whose Talos facts are watched, by state.", [
      "state",
    ]),
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
  /** {@link factsNeeds} of the config it was computed for (templates are walked once per config). */
  #needs: { config: CompiledConfig; needs: FactsNeeds } | undefined;
  #stopped = false;

  constructor(opts: CloudNodeOptions) {
    if (!(opts.workers >= 1)) throw new TypeError("CloudNodeController: workers must be at least 1");
    this.#opts = opts;
    this.#log = opts.log ?? log;
    this.#queue = new WorkQueue("cloud-node", { registry: opts.registry });
    this.#facts = new TalosWatchCache({
      talos: opts.talos,
      onChange: (name) => this.#queue.add(name),
      refreshMs: opts.statusUpdateFrequencyMs,
    });
    this.#m = controllerMetrics(opts.registry);
    opts.registry.onCollect(() => {
      const { nodes, down } = this.#facts.stats();
      this.#m.watches.set({ state: "healthy" }, nodes - down);
      this.#m.watches.set({ state: "down" }, down);
    });
  }

  /** Runs until `signal` aborts, then stops the workers and every Talos watch. */
  async run(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return;
    const enqueue = (n: LeanNode) => this.#queue.add(n.metadata.name);
    // Reconcile mode applies changed rules to every node; drop-in mode adds what they produce now,
    // as the reference would after a restart with the new file (taints only at initialization).
    const stopConfig = this.#opts.config.onChange(() => {
      for (const n of this.#opts.nodes.list()) enqueue(n);
    });
    this.#opts.nodes.addHandlers({
      onAdd: enqueue,
      onUpdate: (old, n) => {
        if (relevantChange(old, n)) enqueue(n);
      },
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

  #warn(node: LeanNode, reason: string, action: string, note: string): void {
    const target = { kind: "Node", name: node.metadata.name, uid: node.metadata.uid };
    void this.#opts.events.record(target, "Warning", reason, action, note);
  }

  /** Drops everything held about node `name`: its Talos watches and facts, and what was reported. */
  #forget(name: string): void {
    this.#facts.forget(name);
    this.#stale.delete(name);
    this.#notOnMachine.delete(name);
  }

  /**
   * Reports node IPs newly found missing from the machine Talos confirmed as the node (one Warning
   * Event and one count each); IPs still missing since the last report are not reported again.
   */
  #reportNotOnMachine(
    node: LeanNode,
    action: string,
    source: NodeIPs["source"],
    split: NodeIPsOnMachine,
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

  /**
   * Brings one Node in line with its Talos facts and the rules. Safe to run twice; returns without
   * writing when facts are missing (their arrival re-queues the node) or nothing differs.
   * @throws when a write fails (the queue retries with backoff).
   */
  async reconcile(name: string): Promise<void> {
    const node = this.#opts.nodes.get(name);
    if (!node || node.metadata.deletionTimestamp) {
      this.#forget(name);
      return;
    }
    // Our last write is not in the cache yet; the informer's update re-queues the node.
    if (this.#stale.get(name)?.has(node.metadata.resourceVersion)) return;
    this.#stale.delete(name);

    const config = this.#opts.config.current;
    const g = config.global;
    const initializing = isUninitialized(node);
    const action = initializing ? "InitializeNode" : "UpdateNode";
    const ips = nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      g.preferIPv6,
    );
    if (ips.ips.length === 0) {
      // Watches on addresses the node no longer claims would follow some other machine.
      this.#forget(name);
      if (initializing) {
        this.#m.failed.inc({ reason: "nodeip" });
        this.#warn(
          node,
          "NodeIPUnknown",
          action,
          `The node has no ${PROVIDED_NODE_IP_ANNOTATION} annotation and no InternalIP address: ` +
            "run the kubelet with --cloud-provider=external and --node-ip",
        );
      }
      return;
    }
    this.#facts.track(name, ips.ips);
    if (this.#needs?.config !== config) this.#needs = { config, needs: factsNeeds(config) };
    const state = this.#facts.facts(name, this.#needs.needs);
    if (!state.ready) {
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
      return;
    }

    const split = nodeIPsOnMachine(ips, state.nodeIP, state.facts.addresses);
    this.#reportNotOnMachine(node, action, ips.source, split, state.nodeIP);
    const facts = instanceFacts(state.facts, state.nodeIP, name);
    const result = transform(config, facts, name, { registry: this.#opts.registry });
    if (result.errors.length > 0)
      this.#warn(node, "TransformerError", action, describeTransformErrors(result.errors));
    const managed = readManagedRecord(node.metadata);
    if (managed.problem !== undefined && !(g.skipForeignNode && isForeign(node))) {
      const [reason, note] = RECORD_PROBLEMS[managed.problem];
      this.#warn(node, reason, action, note);
    }
    const want = desiredNode(
      node,
      facts,
      result,
      {
        preferIPv6: g.preferIPv6,
        reconcile: g.reconcile,
        skipForeignNode: g.skipForeignNode,
        clusterName: g.clusterName || this.#opts.talos.clusterName,
      },
      split.onMachine,
      managed,
    );
    const patch = nodePatch(node, want);
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    // Reconciles on these versions would redo our writes; the informer delivers the final one.
    const stale = new Set([node.metadata.resourceVersion]);
    try {
      if (patch.addresses) {
        const res = await this.#opts.client.patch<{ metadata?: { resourceVersion?: string } }>(
          `${path}/status`,
          { status: { addresses: patch.addresses } },
          PATCH.merge,
        );
        const rv = res?.metadata?.resourceVersion;
        if (rv !== node.metadata.resourceVersion) this.#stale.set(name, stale);
        if (rv !== undefined && patch.ops.length > 0) stale.add(rv);
      }
      if (patch.ops.length > 0) {
        await this.#opts.client.patch(path, patch.ops, PATCH.json);
        this.#stale.set(name, stale);
      }
    } catch (err) {
      if (isNotFound(err)) return;
      if (initializing) this.#m.failed.inc({ reason: "kubernetes" });
      // A failed `test` of the guarded patch answers 422: the Node changed since it was read.
      const hint =
        err instanceof KubeError && err.status === 422 ? " (the Node changed since it was read?)" : "";
      throw new Error(
        `Cannot ${initializing ? "initialize" : "update"} node ${name}: ${(err as Error).message}${hint}`,
        { cause: err },
      );
    }
    if (initializing) {
      this.#m.initialized.inc();
      const created = Date.parse(node.metadata.creationTimestamp);
      if (Number.isFinite(created))
        this.#m.duration.observe(undefined, Math.max(0, Date.now() - created) / 1000);
      const target = { kind: "Node", name, uid: node.metadata.uid };
      void this.#opts.events.record(target, "Normal", "Synced", action, "Node synced successfully");
      this.#log.info("Initialized node", {
        node: name,
        providerID: want.providerID ?? node.spec.providerID ?? "",
        nodeIP: state.nodeIP,
      });
    } else if (patch.addresses || patch.ops.length > 0) {
      this.#log.v(2).info("Updated node", {
        node: name,
        addresses: patch.addresses !== undefined,
        metadataOps: patch.ops.length,
      });
    }
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
