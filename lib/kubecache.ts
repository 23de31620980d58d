// Shared informers: list, then watch from the list's resourceVersion, re-list when the server says the
// version is gone, reconnect with backoff after any other failure, and fan events out to handlers.
// The Node informer keeps the lean view of each Node (lib/nodeview.ts), so thousands of nodes cost
// little memory.

import { type Backoff, backoffDelay } from "./backoffpolicy.ts";
import { wait } from "./backoffwait.ts";
import { isGone, type KubeApi, type WatchEvent } from "./kubeapi.ts";
import { WatchPacer, type WatchPacerOptions } from "./kubewatchpacer.ts";
import { type Logger, logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { registry as defaultRegistry } from "./metricsprocess.ts";
import { type LeanNode, leanNode } from "./nodeview.ts";
import { PEER_LIMITS, peerRejections } from "./peerlimits.ts";

/** The fields every cached object has. */
export interface CachedMeta {
  metadata: { name: string; resourceVersion?: string; uid?: string };
}

/** Callbacks of an informer; updates carry the previous cached object. */
export interface Handlers<T> {
  /** The controller the handlers belong to: the `controller` label of their errors' count. */
  name?: string;
  onAdd?(obj: T): void;
  onUpdate?(old: T, obj: T): void;
  onDelete?(obj: T): void;
}

/** What an {@link Informer} lists and watches, and how it reduces each object. */
export interface InformerOptions<T> {
  /** Collection path, e.g. `/api/v1/nodes`. */
  path: string;
  /**
   * Reduces a raw API object to what is kept in the cache; `old` is the cached version it replaces,
   * if any (e.g. to keep its unchanged parts rather than copies).
   */
  transform: (raw: unknown, old?: T) => T;
  /**
   * Whether to cache an object (all when absent). One it refuses is still handed to the handlers,
   * with the cached copy it replaces as `old`, and that copy is dropped: e.g. decided CSRs, which
   * nothing reads again, cost no memory in a cluster that keeps thousands of them.
   */
  keep?: (obj: T) => boolean;
  fieldSelector?: string;
  labelSelector?: string;
  /** Page size of the initial list. */
  pageSize?: number;
  /** Server-side watch timeout; the watch is re-opened after it. */
  watchTimeoutSeconds?: number;
  log?: Logger;
  /** Where handler errors are counted (default: the process registry). */
  registry?: Registry;
  /** Large watch events paced per object before they are parsed (lib/kubewatchpacer.ts). */
  pace?: Pick<WatchPacerOptions, "bytes" | "paceMs" | "onHeld" | "now" | "timers">;
}

/** The counter of informer handler errors, by controller. */
export function handlerErrors(reg: Registry) {
  return reg.counter(
    "talosccm_informer_handler_errors_total",
    "Informer event handlers that threw, by controller (the error is logged; the event still reaches the other " +
      "handlers, and a controller's own handler queues the object before anything that can throw).",
    ["controller"],
  );
}

/** The name of a raw API object, read before it is transformed (to find the cached version). */
function rawName(raw: unknown): string | undefined {
  const name = (raw as { metadata?: { name?: unknown } } | null)?.metadata?.name;
  return typeof name === "string" ? name : undefined;
}

/** Reconnect backoff after a failed list or watch. */
const WATCH_BACKOFF: Backoff = { initialMs: 250, maxMs: 30_000 };

interface ListResponse {
  metadata: { resourceVersion: string; continue?: string };
  items: unknown[];
}

/** A list+watch cache of one collection. */
export class Informer<T extends CachedMeta> {
  readonly #client: KubeApi;
  readonly #opts: InformerOptions<T>;
  readonly #store = new Map<string, T>();
  readonly #handlers: Handlers<T>[] = [];
  readonly #log: Logger;
  readonly #abort = new AbortController();
  readonly #handlerErrors;
  #resourceVersion = "";
  #synced = false;
  #syncWaiters: Array<() => void> = [];
  #running?: Promise<void>;
  readonly #pacer?: WatchPacer;

  constructor(client: KubeApi, opts: InformerOptions<T>) {
    this.#client = client;
    this.#opts = opts;
    this.#log = opts.log ?? logger("informer").with({ path: opts.path });
    this.#handlerErrors = handlerErrors(opts.registry ?? defaultRegistry);
    if (opts.pace) this.#pacer = new WatchPacer({ ...opts.pace, deliver: (line) => this.#deliver(line) });
  }

  /** Adds handlers; objects already cached are delivered as adds. */
  addHandlers(h: Handlers<T>): void {
    this.#handlers.push(h);
    if (this.#synced) for (const obj of this.#store.values()) h.onAdd?.(obj);
  }

  /** The cached object named `name`. */
  get(name: string): T | undefined {
    return this.#store.get(name);
  }

  /** Every cached object. */
  list(): T[] {
    return [...this.#store.values()];
  }

  /** Number of cached objects. */
  get size(): number {
    return this.#store.size;
  }

  /** Whether the first list has been stored and delivered. */
  get hasSynced(): boolean {
    return this.#synced;
  }

  /** Resolves once the first list has been stored and delivered. */
  waitForSync(): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise((resolve) => this.#syncWaiters.push(resolve));
  }

  /** Starts list+watch in the background (idempotent). */
  start(): void {
    this.#running ??= this.#run();
  }

  /** Stops the watch. */
  async stop(): Promise<void> {
    this.#abort.abort();
    this.#pacer?.stop();
    await this.#running;
  }

  #emit(kind: "add" | "update" | "delete", obj: T, old?: T): void {
    for (const h of this.#handlers) {
      try {
        if (kind === "add") h.onAdd?.(obj);
        else if (kind === "update") h.onUpdate?.(old as T, obj);
        else h.onDelete?.(obj);
      } catch (err) {
        this.#handlerErrors.inc({ controller: h.name ?? "unnamed" });
        this.#log.error("Event handler failed", err, { name: obj.metadata.name, controller: h.name ?? "" });
      }
    }
  }

  /** One watch event into the cache and out to the handlers. */
  #apply(ev: WatchEvent<unknown>): void {
    if (ev.type === "BOOKMARK") {
      const rv = (ev.object as CachedMeta).metadata.resourceVersion;
      if (rv) this.#resourceVersion = rv;
      return;
    }
    const obj = this.#transform(ev.object);
    const name = obj.metadata.name;
    if (obj.metadata.resourceVersion) this.#resourceVersion = obj.metadata.resourceVersion;
    const old = this.#store.get(name);
    if (ev.type === "DELETED") {
      this.#store.delete(name);
      this.#emit("delete", old ?? obj);
    } else {
      this.#put(name, obj);
      this.#emit(old ? "update" : "add", obj, old);
    }
  }

  /** A held large event whose time came (lib/kubewatchpacer.ts): applied as if it had just arrived. */
  #deliver(line: string): void {
    if (this.#abort.signal.aborted) return;
    try {
      this.#apply(JSON.parse(line) as WatchEvent<unknown>);
    } catch (err) {
      this.#log.error("Cannot apply a held watch event", err);
    }
  }

  /** `raw` reduced for the cache, given the cached version of the same name. */
  #transform(raw: unknown): T {
    const name = rawName(raw);
    return this.#opts.transform(raw, name === undefined ? undefined : this.#store.get(name));
  }

  /** Caches `obj` under `name`, or drops the cached copy when `keep` refuses it. */
  #put(name: string, obj: T): void {
    if (this.#opts.keep === undefined || this.#opts.keep(obj)) this.#store.set(name, obj);
    else this.#store.delete(name);
  }

  async #list(): Promise<void> {
    // The list is newer than any held event.
    this.#pacer?.clear();
    const seen = new Set<string>();
    let cont: string | undefined;
    let rv = "";
    do {
      const page = await this.#client.get<ListResponse>(this.#opts.path, {
        query: {
          limit: this.#opts.pageSize ?? 500,
          continue: cont,
          fieldSelector: this.#opts.fieldSelector,
          labelSelector: this.#opts.labelSelector,
        },
        signal: this.#abort.signal,
      });
      for (const raw of page.items) {
        const obj = this.#transform(raw);
        const name = obj.metadata.name;
        seen.add(name);
        const old = this.#store.get(name);
        this.#put(name, obj);
        if (this.#synced || this.#handlers.length) this.#emit(old ? "update" : "add", obj, old);
      }
      cont = page.metadata.continue || undefined;
      rv = page.metadata.resourceVersion;
    } while (cont);
    for (const [name, obj] of this.#store) {
      if (!seen.has(name)) {
        this.#store.delete(name);
        this.#emit("delete", obj);
      }
    }
    this.#resourceVersion = rv;
    if (!this.#synced) {
      this.#synced = true;
      for (const w of this.#syncWaiters.splice(0)) w();
    }
  }

  async #run(): Promise<void> {
    let failures = 0;
    let needList = true;
    while (!this.#abort.signal.aborted) {
      try {
        if (needList) {
          await this.#list();
          needList = false;
        }
        const stream = this.#client.watch<unknown>(this.#opts.path, {
          resourceVersion: this.#resourceVersion,
          timeoutSeconds: this.#opts.watchTimeoutSeconds ?? 300 + Math.floor(Math.random() * 300),
          signal: this.#abort.signal,
          query: { fieldSelector: this.#opts.fieldSelector, labelSelector: this.#opts.labelSelector },
          ...(this.#pacer ? { admit: (line: string) => (this.#pacer as WatchPacer).admit(line) } : {}),
        });
        for await (const ev of stream) {
          failures = 0;
          this.#apply(ev);
        }
      } catch (err) {
        if (this.#abort.signal.aborted) return;
        if (isGone(err)) {
          this.#log.v(2).info("Watch version too old, re-listing");
          needList = true;
          continue;
        }
        failures++;
        const delay = backoffDelay(failures, WATCH_BACKOFF, Math.random);
        this.#log.v(failures > 3 ? 0 : 2).info("Watch failed, retrying", {
          err: (err as Error).message,
          delayMs: Math.round(delay),
        });
        if (failures > 3) needList = true;
        await wait(delay, this.#abort.signal);
      }
    }
  }
}

/** How often a Node's watch events over `node_event_bytes` are read: the kubelet's status period. */
export const NODE_EVENT_PACE_MS = 10_000;

/**
 * The shared Node informer. A Node's watch events over PEER_LIMITS.node_event_bytes are read at
 * most once per {@link NODE_EVENT_PACE_MS} (the newest kept meanwhile): each held one is counted in
 * talosccm_peer_input_rejected_total{peer="node",limit="node_event_bytes"}, and `onHeld` is told
 * (at most once per Node in 10 min) to record an Event.
 */
export function nodeInformer(
  client: KubeApi,
  opts: { onHeld?: (name: string, bytes: number) => void; registry?: Registry } = {},
): Informer<LeanNode> {
  const log = logger("node-informer");
  const rejected = peerRejections(opts.registry ?? defaultRegistry);
  return new Informer(client, {
    path: "/api/v1/nodes",
    transform: (raw, old) => leanNode(raw, undefined, old),
    log,
    pace: {
      bytes: PEER_LIMITS.node_event_bytes.value,
      paceMs: NODE_EVENT_PACE_MS,
      onHeld: (name, bytes, report) => {
        rejected.inc({ peer: "node", limit: "node_event_bytes" });
        if (!report) return;
        log.info("Node events over the per-peer bound; read at most once per 10 s", { node: name, bytes });
        opts.onHeld?.(name, bytes);
      },
    },
  });
}
