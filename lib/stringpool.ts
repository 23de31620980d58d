// Bounded string interning: values that repeat across many objects (a field manager's name, a
// platform, a zone, a link name) kept once instead of once per object. Pure data, no I/O.

/**
 * A pool of at most `max` strings. Values that never repeat stop filling it at `max` and cost
 * nothing more.
 * @example const pool = new StringPool(256); const name = pool.share(decoded) // the kept copy
 */
export class StringPool {
  readonly #kept = new Map<string, string>();
  constructor(readonly max: number) {}

  /** The kept string equal to `s`, or `s` itself (kept while there is room). */
  share(s: string): string {
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
