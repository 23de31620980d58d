// Helpers over plain lists that several controllers share.

/**
 * Whether two lists hold the same values in the same order (`===` on each). An absent list is
 * the empty list, as an absent field of a Kubernetes object is.
 * @param a a list, or undefined
 * @param b a list, or undefined
 * @returns true when both have the same length and equal values at every index
 * @example sameList(["10.244.1.0/24"], undefined) // false
 * @example sameList(undefined, []) // true
 */
export function sameList<T>(a: readonly T[] = [], b: readonly T[] = []): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
