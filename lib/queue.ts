// Work queues for controllers, with client-go's contract: a key is queued at most once, a key being
// processed is never handed to a second worker (a re-add while processing queues it again after),
// failures come back with per-item exponential backoff, success forgets the backoff. `runWorkers`
// drives a reconcile function with bounded concurrency. Metrics use client-go's workqueue names.

import { type Logger, logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { registry as defaultRegistry } from "./metricsprocess.ts";

/** What a reconcile may ask for besides success or failure. */
export interface ReconcileResult {
  /** Process the key again after this many milliseconds. */
  requeueAfterMs?: number;
}

/** Converges the object named by `key`; throws to be retried with backoff. */
// biome-ignore lint/suspicious/noConfusingVoidType: reconciles that need no result simply return.
export type Reconcile = (key: string) => Promise<ReconcileResult | undefined | void>;

/** Options of {@link WorkQueue}. */
export interface QueueOptions {
  /** First retry delay after a failure (default 5 ms, as client-go). */
  baseDelayMs?: number;
  /** Longest retry delay (default 1000 s, as client-go). */
  maxDelayMs?: number;
  registry?: Registry;
  /** Injected clock for tests. */
  now?: () => number;
}

/** A de-duplicating work queue with delayed adds and per-item backoff. */
export class WorkQueue {
  readonly name: string;
  readonly #queue: string[] = [];
  readonly #dirty = new Set<string>();
  readonly #processing = new Set<string>();
  readonly #failures = new Map<string, number>();
  readonly #delayed = new Map<string, { at: number; timer: ReturnType<typeof setTimeout> }>();
  readonly #addedAt = new Map<string, number>();
  readonly #startedAt = new Map<string, number>();
  readonly #waiters: Array<(key: string | undefined) => void> = [];
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #now: () => number;
  readonly #m;
  #shutdown = false;
  #head = 0;

  constructor(name: string, opts: QueueOptions = {}) {
    this.name = name;
    this.#baseDelayMs = opts.baseDelayMs ?? 5;
    this.#maxDelayMs = opts.maxDelayMs ?? 1_000_000;
    this.#now = opts.now ?? (() => performance.now());
    const reg = opts.registry ?? defaultRegistry;
    const lbl = ["name"];
    this.#m = {
      depth: reg.gauge("workqueue_depth", "Current depth of workqueue", lbl),
      adds: reg.counter("workqueue_adds_total", "Total number of adds handled by workqueue", lbl),
      retries: reg.counter("workqueue_retries_total", "Total number of retries handled by workqueue", lbl),
      wait: reg.histogram(
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested.",
        lbl,
        [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10],
      ),
      work: reg.histogram(
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes.",
        lbl,
        [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10],
      ),
      longest: reg.gauge(
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running.",
        lbl,
      ),
      unfinished: reg.gauge(
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has done that is in progress and hasn't been observed by work_duration.",
        lbl,
      ),
    };
    // The depth series exists from the queue's start, as client-go's (a queue whose workers take every
    // key at once would otherwise never show it).
    this.#m.depth.set({ name }, 0);
    reg.onCollect(() => {
      const now = this.#now();
      let longest = 0;
      let total = 0;
      for (const t of this.#startedAt.values()) {
        const s = (now - t) / 1000;
        total += s;
        longest = Math.max(longest, s);
      }
      this.#m.longest.set({ name }, longest);
      this.#m.unfinished.set({ name }, total);
    });
  }

  /** Number of keys waiting (not counting delayed or in-flight ones). */
  get length(): number {
    return this.#queue.length - this.#head;
  }

  /** Queues `key` unless it is already waiting. */
  add(key: string): void {
    if (this.#shutdown) return;
    this.#m.adds.inc({ name: this.name });
    if (this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (this.#processing.has(key)) return;
    this.#push(key);
  }

  #push(key: string): void {
    this.#addedAt.set(key, this.#now());
    const waiter = this.#waiters.shift();
    if (waiter) {
      this.#take(key);
      waiter(key);
      return;
    }
    this.#queue.push(key);
    this.#m.depth.set({ name: this.name }, this.length);
  }

  /** Queues `key` after `delayMs`; an earlier pending delayed add wins. */
  addAfter(key: string, delayMs: number): void {
    if (this.#shutdown) return;
    if (delayMs <= 0) {
      this.add(key);
      return;
    }
    const at = this.#now() + delayMs;
    const pending = this.#delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.#delayed.delete(key);
      this.add(key);
    }, delayMs);
    this.#delayed.set(key, { at, timer });
  }

  /** The backoff before the next retry of `key`: base·2^failures, capped. */
  backoffMs(key: string): number {
    const n = this.#failures.get(key) ?? 0;
    return Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** n);
  }

  /** Queues `key` again after its backoff and counts the failure. */
  addRateLimited(key: string): void {
    const delay = this.backoffMs(key);
    this.#failures.set(key, (this.#failures.get(key) ?? 0) + 1);
    this.#m.retries.inc({ name: this.name });
    this.addAfter(key, delay);
  }

  /** How many times `key` failed since it was last forgotten. */
  failures(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /** Clears the failure history of `key`. */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  #take(key: string): void {
    this.#dirty.delete(key);
    this.#processing.add(key);
    const now = this.#now();
    this.#startedAt.set(key, now);
    const added = this.#addedAt.get(key);
    if (added !== undefined) this.#m.wait.observe({ name: this.name }, (now - added) / 1000);
    this.#addedAt.delete(key);
  }

  /** Waits for the next key; resolves undefined once shut down. Call {@link done} when finished. */
  get(): Promise<string | undefined> {
    if (this.length > 0) {
      const key = this.#queue[this.#head++] as string;
      if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
        this.#queue.splice(0, this.#head);
        this.#head = 0;
      }
      this.#m.depth.set({ name: this.name }, this.length);
      this.#take(key);
      return Promise.resolve(key);
    }
    if (this.#shutdown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Marks `key` finished; if it was re-added meanwhile it is queued again. */
  done(key: string): void {
    this.#processing.delete(key);
    const started = this.#startedAt.get(key);
    if (started !== undefined) this.#m.work.observe({ name: this.name }, (this.#now() - started) / 1000);
    this.#startedAt.delete(key);
    if (this.#dirty.has(key) && !this.#shutdown) this.#push(key);
  }

  /** Stops handing out keys; waiting getters resolve undefined. */
  shutDown(): void {
    this.#shutdown = true;
    for (const d of this.#delayed.values()) clearTimeout(d.timer);
    this.#delayed.clear();
    for (const w of this.#waiters.splice(0)) w(undefined);
  }

  /** Whether {@link shutDown} was called. */
  get isShutDown(): boolean {
    return this.#shutdown;
  }
}

/**
 * Runs `workers` loops that take keys from `queue` and reconcile them: success forgets the key's
 * backoff, an error re-queues it with backoff and is logged, `requeueAfterMs` re-queues it later.
 * Resolves when the queue is shut down and every worker finished its current key.
 */
export async function runWorkers(
  queue: WorkQueue,
  workers: number,
  reconcile: Reconcile,
  log: Logger = logger(queue.name),
): Promise<void> {
  const loop = async () => {
    for (;;) {
      const key = await queue.get();
      if (key === undefined) return;
      try {
        const result = await reconcile(key);
        queue.forget(key);
        if (result?.requeueAfterMs !== undefined) queue.addAfter(key, result.requeueAfterMs);
      } catch (err) {
        log.error("Reconcile failed, will retry", err, {
          key,
          retries: queue.failures(key) + 1,
          backoffMs: queue.backoffMs(key),
        });
        queue.addRateLimited(key);
      } finally {
        queue.done(key);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, workers) }, loop));
}
