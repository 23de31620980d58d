// Bounded interning: values that repeat across many objects (a field manager's name, a platform, a
// zone, a link name; the owners summary most Nodes share) kept once instead of once per object.
// Pure data, no I/O.

/**
 * A pool of at most `max` strings of at most `maxLength` characters. Values that never repeat stop
 * filling it at `max` and cost nothing more; a longer one is never kept, so that a peer sending
 * large values cannot pin `max` of them for the life of the process.
 * @example const pool = new StringPool(256); const name = pool.share(decoded) // the kept copy
 */
export class StringPool {
  readonly #kept = new Map<string, string>();
  constructor(
    readonly max: number,
    readonly maxLength = 256,
  ) {}

  /** The kept string equal to `s`, or `s` itself (kept while there is room and it is short enough). */
  share(s: string): string {
    if (s.length > this.maxLength) return s;
    const have = this.#kept.get(s);
    if (have !== undefined) return have;
    if (this.#kept.size < this.max) this.#kept.set(s, s);
    return s;
  }

  /** Distinct values kept. */
  get size(): number {
    return this.#kept.size;
  }
}

/**
 * A pool of at most `max` values, each kept under a key that says what it holds (e.g. its JSON) of
 * at most `maxKeyLength` characters: a value too large for that is never kept (see
 * {@link StringPool}). A kept value is shared by every holder, so it must never change: `share`
 * freezes what it keeps.
 * @example const pool = new ValuePool<Owners>(256); const owners = pool.share(JSON.stringify(o), o)
 */
export class ValuePool<T extends object> {
  readonly #kept = new Map<string, T>();
  constructor(
    readonly max: number,
    readonly maxKeyLength = 4096,
  ) {}

  /**
   * The kept value under `key`, or `value` itself: frozen (deeply) and kept while there is room and
   * its key is short enough, returned as is otherwise.
   */
  share(key: string, value: T): T {
    if (key.length > this.maxKeyLength) return value;
    const have = this.#kept.get(key);
    if (have !== undefined) return have;
    if (this.#kept.size >= this.max) return value;
    this.#kept.set(key, deepFreeze(value));
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
