// Maps of keys a peer chooses (label and annotation keys, address types, field manager names) as
// plain JSON-shaped objects without a prototype: a key such as `constructor`, `toString`,
// `hasOwnProperty` or `__proto__` (`constructor` is a valid label key) is then an entry like any other,
// never an inherited member, and `__proto__` is stored rather than swallowed by the setter that a
// plain object inherits. Such objects still serialize with JSON.stringify and freeze as usual.

/**
 * An empty object without a prototype, to be used as a map of keys a peer chooses.
 * @returns a fresh `Object.create(null)`
 * @example const labels = dict<string>(); labels.constructor = "x"; labels.constructor // "x"
 */
export function dict<V>(): Record<string, V> {
  return Object.create(null) as Record<string, V>;
}

/**
 * The value of `rec`'s own entry `key`, or undefined: never an inherited member, whatever object
 * `rec` is (one made by {@link dict}, or a plain object from elsewhere).
 * @param rec a map of keys a peer chooses, or undefined
 * @param key the key
 * @returns the entry's value, or undefined when `rec` has no own entry `key`
 * @example own({ a: "1" }, "toString") // undefined
 */
export function own<V>(rec: Readonly<Record<string, V>> | undefined, key: string): V | undefined {
  return rec !== undefined && Object.hasOwn(rec, key) ? rec[key] : undefined;
}
