// Bounded interning: values that repeat across many objects (a field manager's name, a platform, a
// zone, a link name; the owners summary most Nodes share) kept once instead of once per object.
// Pure data, no I/O.
//
// The pools are shared by every peer (every Node, every machine's Talos), so none may be filled for
// good by one of them: a full pool makes room with the CLOCK (second-chance) policy. A value that is
// asked for again since the hand last passed it keeps its place; one that is not (a value only one
// peer sent once, however many of them it sent) is replaced by the next new value. A new value
// starts without that second chance, so a flood of values that never repeat only cycles through
// the slots other flooded values hold, and values that repeat (what honest peers send) stay pooled.

/**
 * A fixed number of slots of `(key, value)` with CLOCK replacement: `get` marks a slot as used, `put`
 * fills a free slot or replaces the first unused one after the hand, clearing the marks it passes.
 * Both cost O(1) amortized (the hand clears at most one mark per `get`).
 */
class ClockSlots<V> {
  readonly #index = new Map<string, number>();
  readonly #keys: string[] = [];
  readonly #values: V[] = [];
  readonly #used: Uint8Array;
  #hand = 0;

  constructor(readonly max: number) {
    this.#used = new Uint8Array(Math.max(0, max));
  }

  /** The value under `key`, marked as used; undefined when it is not kept. */
  get(key: string): V | undefined {
    const i = this.#index.get(key);
    if (i === undefined) return undefined;
    this.#used[i] = 1;
    return this.#values[i];
  }

  /** Keeps `value` under `key` (not kept yet), replacing the next slot not used since the hand passed it. */
  put(key: string, value: V): void {
    if (this.max <= 0) return;
    let i = this.#keys.length;
    if (i < this.max) {
      this.#keys.push(key);
      this.#values.push(value);
    } else {
      while (this.#used[this.#hand] === 1) {
        this.#used[this.#hand] = 0;
        this.#hand = (this.#hand + 1) % this.max;
      }
      i = this.#hand;
      this.#index.delete(this.#keys[i] as string);
      this.#keys[i] = key;
      this.#values[i] = value;
      this.#hand = (i + 1) % this.max;
    }
    this.#used[i] = 0;
    this.#index.set(key, i);
  }

  /** Whether `key` is kept (without marking it used). */
  has(key: string): boolean {
    return this.#index.has(key);
  }

  get size(): number {
    return this.#index.size;
  }
}

/**
 * A pool of at most `max` strings of at most `maxLength` characters. A full pool replaces a value
 * not asked for again since the last sweep (CLOCK, see above), so one peer's unique values cannot
 * keep the values other peers repeat out of it; a longer string is never kept, so that a peer
 * sending large values cannot pin `max` of them.
 * @example const pool = new StringPool(256); const name = pool.share(decoded) // the kept copy
 */
export class StringPool {
  readonly #kept: ClockSlots<string>;
  constructor(
    readonly max: number,
    readonly maxLength = 256,
  ) {
    this.#kept = new ClockSlots(max);
  }

  /** The kept string equal to `s`, or `s` itself (kept now, when it is short enough). */
  share(s: string): string {
    if (s.length > this.maxLength) return s;
    const have = this.#kept.get(s);
    if (have !== undefined) return have;
    this.#kept.put(s, s);
    return s;
  }

  /** Whether `s` is kept (asking does not count as a use). */
  has(s: string): boolean {
    return this.#kept.has(s);
  }

  /** Distinct values kept. */
  get size(): number {
    return this.#kept.size;
  }
}

/**
 * A pool of at most `max` values, each kept under a key that says what it holds (e.g. its JSON) of
 * at most `maxKeyLength` characters: a value too large for that is never kept (see
 * {@link StringPool}, whose replacement policy it shares). A kept value is shared by every holder,
 * so it must never change: `share` freezes what it keeps (a value replaced later stays frozen with
 * its holders).
 * @example const pool = new ValuePool<Owners>(256); const owners = pool.share(JSON.stringify(o), o)
 */
export class ValuePool<T extends object> {
  readonly #kept: ClockSlots<T>;
  constructor(
    readonly max: number,
    readonly maxKeyLength = 4096,
  ) {
    this.#kept = new ClockSlots(max);
  }

  /**
   * The kept value under `key`, or `value` itself: frozen (deeply) and kept when its key is short
   * enough, returned as is otherwise.
   */
  share(key: string, value: T): T {
    if (key.length > this.maxKeyLength) return value;
    const have = this.#kept.get(key);
    if (have !== undefined) return have;
    if (this.max <= 0) return value;
    this.#kept.put(key, deepFreeze(value));
    return value;
  }

  /** Distinct values kept. */
  get size(): number {
    return this.#kept.size;
  }
}

/** Freezes `value` and every object it holds. */
function deepFreeze<T>(value: T): T {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return value;
  for (const v of Object.values(value)) deepFreeze(v);
  return Object.freeze(value);
}
