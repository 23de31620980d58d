// Kubernetes Events (events.k8s.io/v1) about the objects the controllers act on. An event that
// repeats is folded into one Event's `series` (count and last time) instead of new objects, series
// updates are rate-limited per event, and a failure to record never reaches the caller.

import type { KubeClient } from "./kube.ts";
import { microTime, PATCH } from "./kube.ts";
import { logger } from "./log.ts";
import { EVENTS_NAMESPACE } from "./wellknown.ts";

const log = logger("events");

/** The object an event is about. */
export interface EventTarget {
  kind: string;
  name: string;
  uid?: string;
  namespace?: string;
  apiVersion?: string;
}

/** The two Event types Kubernetes knows. */
export type EventType = "Normal" | "Warning";

/** Options of {@link EventRecorder}. */
export interface EventRecorderOptions {
  /** `reportingController`, e.g. "talos-cloud-controller-manager". */
  controller: string;
  /** `reportingInstance`: this replica's identity. */
  instance: string;
  /** Repeats within this window join a series (default 10 minutes). */
  seriesWindowMs?: number;
  /** Minimum time between two writes of the same series (default 30 s). */
  seriesUpdateMs?: number;
  /** Bound on remembered events. */
  maxEntries?: number;
  now?: () => number;
}

interface Entry {
  name: string;
  namespace: string;
  count: number;
  firstMs: number;
  lastMs: number;
  lastWriteMs: number;
  pending?: ReturnType<typeof setTimeout>;
}

function truncate(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 3)}...`;
}

/** Records Events; one per process, shared by the controllers. */
export class EventRecorder {
  readonly #client: KubeClient;
  readonly #opts: Required<Omit<EventRecorderOptions, "now">>;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();

  constructor(client: KubeClient, opts: EventRecorderOptions) {
    this.#client = client;
    this.#opts = { seriesWindowMs: 600_000, seriesUpdateMs: 30_000, maxEntries: 4096, ...opts };
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Records an event about `target`. Never throws; failures are logged.
   * @param reason CamelCase machine reason, e.g. "TransformerError".
   * @param action what the controller was doing, e.g. "InitializeNode".
   */
  record(target: EventTarget, type: EventType, reason: string, action: string, note: string): Promise<void> {
    return this.#record(target, type, reason, action, truncate(note, 1024)).catch((err) => {
      log.v(2).info("Cannot record event", { reason, object: target.name, err: (err as Error).message });
    });
  }

  async #record(
    target: EventTarget,
    type: EventType,
    reason: string,
    action: string,
    note: string,
  ): Promise<void> {
    const now = this.#now();
    const namespace = target.namespace ?? EVENTS_NAMESPACE;
    const key = [target.kind, namespace, target.name, target.uid ?? "", type, reason, action, note].join(
      "\u0000",
    );
    const existing = this.#entries.get(key);
    if (existing && now - existing.lastMs < this.#opts.seriesWindowMs) {
      existing.count++;
      existing.lastMs = now;
      // Refresh recency for the LRU bound.
      this.#entries.delete(key);
      this.#entries.set(key, existing);
      this.#scheduleSeries(existing);
      return;
    }
    const name = `${target.name}.${now.toString(16)}${Math.floor(Math.random() * 0xffff).toString(16)}`;
    const regarding: Record<string, string> = {
      kind: target.kind,
      name: target.name,
      apiVersion: target.apiVersion ?? "v1",
    };
    if (target.uid) regarding.uid = target.uid;
    if (target.namespace) regarding.namespace = target.namespace;
    const entry: Entry = { name, namespace, count: 1, firstMs: now, lastMs: now, lastWriteMs: now };
    this.#entries.set(key, entry);
    while (this.#entries.size > this.#opts.maxEntries) {
      const oldest = this.#entries.keys().next().value as string;
      const e = this.#entries.get(oldest);
      if (e?.pending) clearTimeout(e.pending);
      this.#entries.delete(oldest);
    }
    await this.#client.create(`/apis/events.k8s.io/v1/namespaces/${namespace}/events`, {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name, namespace },
      eventTime: microTime(now),
      reportingController: this.#opts.controller,
      reportingInstance: truncate(this.#opts.instance, 128),
      action,
      reason,
      note,
      type,
      regarding,
    });
  }

  #scheduleSeries(entry: Entry): void {
    if (entry.pending) return;
    const wait = Math.max(0, entry.lastWriteMs + this.#opts.seriesUpdateMs - this.#now());
    entry.pending = setTimeout(() => {
      entry.pending = undefined as never;
      entry.lastWriteMs = this.#now();
      void this.#client
        .patch(
          `/apis/events.k8s.io/v1/namespaces/${entry.namespace}/events/${entry.name}`,
          { series: { count: entry.count, lastObservedTime: microTime(entry.lastMs) } },
          PATCH.merge,
        )
        .catch((err) =>
          log.v(2).info("Cannot update event series", { event: entry.name, err: (err as Error).message }),
        );
    }, wait);
    (entry.pending as { unref?: () => void }).unref?.();
  }

  /** Cancels pending series updates. */
  close(): void {
    for (const e of this.#entries.values()) if (e.pending) clearTimeout(e.pending);
  }
}
