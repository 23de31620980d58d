// Per-key write budgets: token buckets, so that one peer whose writes come fast (a node whose fields
// flap, a requester filing CSR after CSR) cannot spend what every peer shares (the client rate
// limit, the thread). A bucket is a value (tokensAt, takeFrom) that a caller keeps with the rest of
// its key's state — cloud-node keeps each node's in its record (lib/nodestate.ts); WriteBudget keeps
// buckets by key for a caller with nothing else per key (node-csr-approval's decision budget per
// requester, lib/csrapprover.ts). Pure data with an injected clock, no I/O.

/** Options of {@link WriteBudget}. */
export interface WriteBudgetOptions {
  /** Writes a node may make at once (a full bucket). */
  burst: number;
  /** One write's worth of tokens comes back every `paceMs`. */
  paceMs: number;
  /** Milliseconds, monotonic enough for pacing (the controller's clock). */
  now: () => number;
}

/** A bucket as it was last left: `tokens` (below zero when in debt) at `atMs`. */
export interface Bucket {
  readonly tokens: number;
  readonly atMs: number;
}

/** A budget's shape: `burst` writes at once, then one every `paceMs`. */
export type BudgetPace = Pick<WriteBudgetOptions, "burst" | "paceMs">;

/**
 * The tokens in `bucket` at `at` (an absent bucket is full): refilled one per `paceMs` since it was
 * left, up to `burst`. Pure: the caller keeps the bucket where it keeps the rest of its key's state.
 * @example tokensAt({ tokens: 0, atMs: 0 }, 10_000, { burst: 8, paceMs: 5000 }) // 2
 */
export function tokensAt(bucket: Bucket | undefined, at: number, pace: BudgetPace): number {
  if (bucket === undefined) return pace.burst;
  return Math.min(pace.burst, bucket.tokens + Math.max(0, at - bucket.atMs) / pace.paceMs);
}

/**
 * Taking `cost` writes from `bucket` at `at`: the bucket after (unchanged when they are not there)
 * and 0, or the milliseconds until they are due. At most `burst` are ever asked for.
 * @example takeFrom(undefined, 2, 0, { burst: 8, paceMs: 5000 }) // { bucket: { tokens: 6, atMs: 0 }, waitMs: 0 }
 */
export function takeFrom(
  bucket: Bucket | undefined,
  cost: number,
  at: number,
  pace: BudgetPace,
): { bucket: Bucket | undefined; waitMs: number } {
  const need = Math.min(Math.max(cost, 0), pace.burst);
  const tokens = tokensAt(bucket, at, pace);
  if (tokens < need) return { bucket, waitMs: Math.ceil((need - tokens) * pace.paceMs) };
  return { bucket: { tokens: tokens - need, atMs: at }, waitMs: 0 };
}

/**
 * Token buckets by key: each starts full (`burst`), refills one token per `paceMs` up to `burst`. A
 * key that never spends costs nothing; one that did costs one small entry until its bucket is full
 * again (dropped at the next sweep) or {@link forget}.
 * @example
 * const budget = new WriteBudget({ burst: 8, paceMs: 5000, now: Date.now });
 * budget.take("node-1", 2) // 0: written now; later, when empty, the ms until 2 tokens are due
 */
export class WriteBudget {
  readonly #buckets = new Map<string, Bucket>();
  readonly #opts: WriteBudgetOptions;
  #sweptAt = Number.NEGATIVE_INFINITY;

  constructor(opts: WriteBudgetOptions) {
    if (!(opts.burst >= 1) || !(opts.paceMs > 0))
      throw new TypeError("Cannot create a write budget: burst must be at least 1 and paceMs positive");
    this.#opts = opts;
  }

  /**
   * Takes `cost` writes from `key`'s bucket when it holds them.
   * @param cost writes the pass makes (at most `burst` are ever asked for).
   * @returns 0 when taken; otherwise how many milliseconds until they are due (nothing is taken).
   */
  take(key: string, cost = 1): number {
    const at = this.#opts.now();
    const { bucket, waitMs } = takeFrom(this.#bucket(key, at), cost, at, this.#opts);
    if (waitMs === 0 && bucket !== undefined) this.#buckets.set(key, bucket);
    return waitMs;
  }

  /**
   * How many milliseconds until `cost` writes could be taken from `key`'s bucket (0: now); takes
   * nothing. A caller can hold work that would only end in a write that must wait.
   * @example budget.waitFor("node-1") // 0 while node-1 holds a token
   */
  waitFor(key: string, cost = 1): number {
    const at = this.#opts.now();
    return takeFrom(this.#bucket(key, at), cost, at, this.#opts).waitMs;
  }

  /**
   * Takes `cost` from `key`'s bucket after the fact, below zero if need be: a work whose cost is
   * known only once done is charged in full, and `take(key, 0)` then waits until the debt is paid.
   * @example budget.take("a", 0) === 0 && (work(), budget.charge("a", unitsItTook))
   */
  charge(key: string, cost: number): void {
    const at = this.#opts.now();
    const tokens = tokensAt(this.#bucket(key, at), at, this.#opts);
    this.#buckets.set(key, { tokens: tokens - Math.max(cost, 0), atMs: at });
  }

  /**
   * `key`'s bucket at `at`. At most once per refill time (`burst` × `paceMs`), buckets that are
   * full again are dropped first: a full bucket and none are the same, so a node that wrote once
   * costs nothing after its bucket refilled.
   */
  #bucket(key: string, at: number): Bucket | undefined {
    const { burst, paceMs } = this.#opts;
    if (at - this.#sweptAt >= burst * paceMs) {
      this.#sweptAt = at;
      for (const [k, b] of this.#buckets) if (tokensAt(b, at, this.#opts) >= burst) this.#buckets.delete(k);
    }
    return this.#buckets.get(key);
  }

  /** Drops `key`'s bucket (its node is gone): a new one starts full. */
  forget(key: string): void {
    this.#buckets.delete(key);
  }

  /** Buckets held. */
  get size(): number {
    return this.#buckets.size;
  }
}
