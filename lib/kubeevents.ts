// Kubernetes Events (events.k8s.io/v1) about the objects the controllers act on. An event that
// repeats is folded into one Event's `series` (count and last time) instead of new objects, series
// updates are rate-limited per event, and a failure to record never reaches the caller.

import { type KubeApi, microTime, PATCH } from "./kubeapi.ts";
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

/** A remembered event: the Event object written for it and its series so far. */
export interface SeriesEntry {
  /** The Event object's name and namespace. */
  name: string;
  namespace: string;
  /** Occurrences in the series (1 for the Event itself). */
  count: number;
  firstMs: number;
  lastMs: number;
  /** When the Event or its series was last written. */
  lastWriteMs: number;
  /** The scheduled series update, if any. */
  pending?: ReturnType<typeof setTimeout>;
}

// Pure decisions (no I/O; the clock and randomness are arguments): the recorder below asks these
// and writes what they build.

/**
 * `s` cut to at most `n` UTF-8 bytes (the API server counts bytes: a 1024-character note of
 * non-ASCII text would be refused), the cut marked by a trailing "..." and never inside a character.
 */
export function truncate(s: string, n: number): string {
  if (Buffer.byteLength(s) <= n) return s;
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    const size = Buffer.byteLength(ch);
    if (bytes + size > n - 3) break;
    bytes += size;
    end += ch.length;
  }
  return `${s.slice(0, end)}...`;
}

/** The namespace an Event about `target` lives in: the target's own, else {@link EVENTS_NAMESPACE}. */
export function eventNamespace(target: EventTarget): string {
  return target.namespace ?? EVENTS_NAMESPACE;
}

/**
 * What makes two events the same, so that the second joins the first one's series: the target
 * (kind, namespace, name, uid) and the type, reason, action and note, all of them, as a 64-bit
 * hash in base 36 (13 characters) rather than their ~130 characters of text: the recorder keeps
 * one key per remembered series, up to 4,096. Two different events share a key with probability
 * 2^-64 per pair, and would then count as one series.
 */
export function eventKey(
  target: EventTarget,
  type: EventType,
  reason: string,
  action: string,
  note: string,
): string {
  const id = [target.kind, eventNamespace(target), target.name, target.uid ?? ""];
  return Bun.hash([...id, type, reason, action, note].join("\u0000")).toString(36);
}

/**
 * A fresh Event name: the target's name, then `now` and a random 16-bit suffix in four hex digits, so
 * that events about one object at the same millisecond differ. `random` is in [0, 1).
 */
export function eventName(targetName: string, now: number, random: () => number = Math.random): string {
  const suffix = Math.floor(random() * 0x10000)
    .toString(16)
    .padStart(4, "0");
  return `${targetName}.${now.toString(16)}${suffix}`;
}

/** The Event's `regarding` reference: apiVersion defaults to "v1"; uid and namespace only when known. */
export function regardingOf(target: EventTarget): Record<string, string> {
  const regarding: Record<string, string> = {
    kind: target.kind,
    name: target.name,
    apiVersion: target.apiVersion ?? "v1",
  };
  if (target.uid) regarding.uid = target.uid;
  if (target.namespace) regarding.namespace = target.namespace;
  return regarding;
}

/** What one new Event says, besides where it goes. */
export interface EventFacts {
  target: EventTarget;
  type: EventType;
  reason: string;
  action: string;
  note: string;
}

/**
 * The events.k8s.io/v1 Event created for `facts` at `now`, reported by `controller` from
 * `instance` (cut to the API's 128 bytes).
 */
export function eventBody(
  name: string,
  now: number,
  reporter: { controller: string; instance: string },
  facts: EventFacts,
) {
  return {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: { name, namespace: eventNamespace(facts.target) },
    eventTime: microTime(now),
    reportingController: reporter.controller,
    reportingInstance: truncate(reporter.instance, 128),
    action: facts.action,
    reason: facts.reason,
    note: facts.note,
    type: facts.type,
    regarding: regardingOf(facts.target),
  };
}

/**
 * Counts a repeat at `now` into the entry under `key` when it was last seen within `windowMs`,
 * moving it to the most recently used end of `entries`; returns it, or undefined when a new Event
 * is due instead.
 */
export function foldRepeat(
  entries: Map<string, SeriesEntry>,
  key: string,
  now: number,
  windowMs: number,
): SeriesEntry | undefined {
  const existing = entries.get(key);
  if (!existing || now - existing.lastMs >= windowMs) return undefined;
  existing.count++;
  existing.lastMs = now;
  entries.delete(key);
  entries.set(key, existing);
  return existing;
}

/**
 * Remembers `entry` under `key` as the most recently used (replacing an expired series) and drops
 * the least recently used entries beyond `maxEntries`; returns the replaced and dropped ones, whose
 * pending updates the caller cancels.
 */
export function remember(
  entries: Map<string, SeriesEntry>,
  key: string,
  entry: SeriesEntry,
  maxEntries: number,
): SeriesEntry[] {
  const replaced = entries.get(key);
  entries.delete(key);
  const dropped: SeriesEntry[] = replaced && replaced !== entry ? [replaced] : [];
  // Room is made before the insert: the map never holds more than the bound, not even for a
  // moment (JSC grows a map's table 4× past 4,096 entries, and never shrinks it back).
  while (entries.size >= maxEntries && entries.size > 0) {
    const oldest = entries.keys().next().value as string;
    const e = entries.get(oldest);
    if (e) dropped.push(e);
    entries.delete(oldest);
  }
  entries.set(key, entry);
  return dropped;
}

/**
 * Drops the entries last seen `windowMs` or more before `now`, from the least recently used on
 * (the map's order): no repeat can join their series any more. Returns them.
 */
export function dropExpired(entries: Map<string, SeriesEntry>, now: number, windowMs: number): SeriesEntry[] {
  const dropped: SeriesEntry[] = [];
  for (const [key, e] of entries) {
    if (now - e.lastMs < windowMs) break;
    dropped.push(e);
    entries.delete(key);
  }
  return dropped;
}

/** How long to wait before writing a series last written at `lastWriteMs`: none once `updateMs` passed. */
export function seriesDelayMs(lastWriteMs: number, updateMs: number, now: number): number {
  return Math.max(0, lastWriteMs + updateMs - now);
}

/** The merge patch that brings an Event's series up to `entry`. */
export function seriesPatch(entry: Pick<SeriesEntry, "count" | "lastMs">) {
  return { series: { count: entry.count, lastObservedTime: microTime(entry.lastMs) } };
}

/** Records Events; one per process, shared by the controllers. */
export class EventRecorder {
  readonly #client: KubeApi;
  readonly #opts: Required<Omit<EventRecorderOptions, "now">>;
  readonly #now: () => number;
  readonly #entries = new Map<string, SeriesEntry>();
  /** Drops the series no repeat can join any more, once per window while any is remembered. */
  #expiry: ReturnType<typeof setTimeout> | undefined;

  constructor(client: KubeApi, opts: EventRecorderOptions) {
    this.#client = client;
    this.#opts = { seriesWindowMs: 600_000, seriesUpdateMs: 30_000, maxEntries: 4096, ...opts };
    this.#now = opts.now ?? Date.now;
  }

  /** Series remembered (each until its window passed, at most `maxEntries`). */
  get size(): number {
    return this.#entries.size;
  }

  /** Drops the expired series now (the timer does it once per window). */
  dropExpired(): void {
    for (const e of dropExpired(this.#entries, this.#now(), this.#opts.seriesWindowMs))
      if (e.pending) clearTimeout(e.pending);
  }

  #armExpiry(): void {
    if (this.#expiry !== undefined) return;
    this.#expiry = setTimeout(() => {
      this.#expiry = undefined;
      this.dropExpired();
      if (this.#entries.size > 0) this.#armExpiry();
    }, this.#opts.seriesWindowMs);
    (this.#expiry as { unref?: () => void }).unref?.();
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
    const key = eventKey(target, type, reason, action, note);
    const existing = foldRepeat(this.#entries, key, now, this.#opts.seriesWindowMs);
    if (existing) {
      this.#scheduleSeries(existing);
      return;
    }
    const name = eventName(target.name, now);
    const namespace = eventNamespace(target);
    const entry: SeriesEntry = { name, namespace, count: 1, firstMs: now, lastMs: now, lastWriteMs: now };
    for (const e of remember(this.#entries, key, entry, this.#opts.maxEntries))
      if (e.pending) clearTimeout(e.pending);
    this.#armExpiry();
    await this.#client.create<void>(
      `/apis/events.k8s.io/v1/namespaces/${namespace}/events`,
      eventBody(name, now, this.#opts, { target, type, reason, action, note }),
      { discardAnswer: true },
    );
  }

  #scheduleSeries(entry: SeriesEntry): void {
    if (entry.pending) return;
    const wait = seriesDelayMs(entry.lastWriteMs, this.#opts.seriesUpdateMs, this.#now());
    entry.pending = setTimeout(() => {
      entry.pending = undefined as never;
      entry.lastWriteMs = this.#now();
      void this.#client
        .patch(
          `/apis/events.k8s.io/v1/namespaces/${entry.namespace}/events/${entry.name}`,
          seriesPatch(entry),
          PATCH.merge,
          { discardAnswer: true },
        )
        .catch((err) =>
          log.v(2).info("Cannot update event series", { event: entry.name, err: (err as Error).message }),
        );
    }, wait);
    (entry.pending as { unref?: () => void }).unref?.();
  }

  /** Cancels pending series updates. */
  close(): void {
    if (this.#expiry !== undefined) clearTimeout(this.#expiry);
    for (const e of this.#entries.values()) if (e.pending) clearTimeout(e.pending);
  }
}
