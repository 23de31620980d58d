// Full garbage collections paced by the live heap, so that a burst's garbage does not double the heap.
//
// JSC collects young objects often and the old generation only when the heap has grown to twice
// what the last full collection left (lib/jscoptions.ts). A burst (nodes joining, CSRs) keeps
// thousands of objects alive for seconds (a Node being initialized, a pending CSR, a Talos answer):
// they survive a young collection, then die in the old generation and stay there as garbage until
// that full collection, which at 5,000 nodes came once per burst, with 25 MB of old garbage beside
// 26 MB of live objects, and the allocator kept the pages the peak needed. The pacer reads the heap
// once a second and asks for a full collection when it has grown by half over the least it has seen
// since the last one (the live heap, near enough), only above a floor, so that an idle or small CCM
// never pays for one, and at most once every 5 s, which bounds what it costs during a burst.

import type { Counter, Registry } from "./metrics.ts";

const MiB = 1024 * 1024;

/** How often the heap is read. */
export const TICK_MS = 1_000;
/** A full collection is due when the heap is this many times the least seen since the last one. */
export const GROWTH = 1.5;
/** ... and above this many bytes. */
export const FLOOR_BYTES = 16 * MiB;
/**
 * ... and at least this long after the last one: a full collection of a 5,000-node heap takes
 * 0.1-0.2 s of CPU, so this bounds the pacer's cost to a few percent of one core during a burst.
 */
export const MIN_INTERVAL_MS = 5_000;

/**
 * Whether a full collection is due for a heap of `heapBytes` when `liveBytes` is the least heap
 * seen since the last one. Pure.
 * @example collectionDue(40 * MiB, 26 * MiB) // true: 40 > 1.5 × 26
 */
export function collectionDue(
  heapBytes: number,
  liveBytes: number,
  growth: number = GROWTH,
  floorBytes: number = FLOOR_BYTES,
): boolean {
  return heapBytes > floorBytes && heapBytes > liveBytes * growth;
}

/** What the pacer reads and does; tests pass fakes. */
export interface GcPacerOptions {
  registry?: Registry;
  tickMs?: number;
  growth?: number;
  floorBytes?: number;
  /** The heap in bytes, live objects and garbage not yet collected. */
  heapBytes?: () => number;
  /** Runs a full, synchronous collection. */
  collect?: () => void;
  minIntervalMs?: number;
  /** Clock in ms (default `performance.now`). */
  now?: () => number;
}

/**
 * The pacer: {@link GcPacer.tick} reads the heap and collects when due; {@link startGcPacer} ticks
 * it once a second. Counts its collections and the time they took in
 * `bun_gc_paced_collections_total` and `bun_gc_paced_seconds_total`.
 */
export class GcPacer {
  readonly #heapBytes: () => number;
  readonly #collect: () => void;
  readonly #growth: number | undefined;
  readonly #floorBytes: number | undefined;
  readonly #count: Counter | undefined;
  readonly #seconds: Counter | undefined;
  readonly #minIntervalMs: number;
  readonly #now: () => number;
  /** The least heap seen since the last collection. */
  #live: number;
  /** When the last paced collection ran (ms, `now`'s clock). */
  #lastMs = Number.NEGATIVE_INFINITY;

  constructor(opts: GcPacerOptions = {}) {
    this.#heapBytes = opts.heapBytes ?? (() => process.memoryUsage().heapUsed);
    this.#collect = opts.collect ?? (() => Bun.gc(true));
    this.#growth = opts.growth;
    this.#floorBytes = opts.floorBytes;
    this.#minIntervalMs = opts.minIntervalMs ?? MIN_INTERVAL_MS;
    this.#now = opts.now ?? (() => performance.now());
    this.#count = opts.registry?.counter(
      "bun_gc_paced_collections_total",
      "Full garbage collections asked for because the heap grew by half over its live size.",
    );
    this.#seconds = opts.registry?.counter(
      "bun_gc_paced_seconds_total",
      "Time spent in the full garbage collections the pacer asked for, in seconds.",
    );
    this.#count?.inc(undefined, 0);
    this.#seconds?.inc(undefined, 0);
    this.#live = this.#heapBytes();
  }

  /** Reads the heap; runs a full collection when one is due. Returns whether it did. */
  tick(): boolean {
    const heap = this.#heapBytes();
    this.#live = Math.min(this.#live, heap);
    if (!collectionDue(heap, this.#live, this.#growth, this.#floorBytes)) return false;
    const started = this.#now();
    if (started - this.#lastMs < this.#minIntervalMs) return false;
    this.#collect();
    this.#lastMs = this.#now();
    this.#seconds?.inc(undefined, (this.#lastMs - started) / 1000);
    this.#count?.inc();
    this.#live = this.#heapBytes();
    return true;
  }
}

/** Starts a {@link GcPacer} ticking every `opts.tickMs` (default {@link TICK_MS}); returns its stop function. */
export function startGcPacer(opts: GcPacerOptions = {}): () => void {
  const pacer = new GcPacer(opts);
  const timer = setInterval(() => pacer.tick(), opts.tickMs ?? TICK_MS);
  timer.unref();
  return () => clearInterval(timer);
}
