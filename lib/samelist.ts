// Helpers over plain lists that several controllers share.

/**
 * Whether two lists hold the same values in the same order (`===` on each, or `eq`). An absent list
 * is the empty list, as an absent field of a Kubernetes object is.
 * @param a a list, or undefined
 * @param b a list, or undefined
 * @param eq equality of two items (default `===`)
 * @returns true when both have the same length and equal values at every index
 * @example sameList(["10.244.1.0/24"], undefined) // false
 * @example sameList(undefined, []) // true
 */
export function sameList<A, B = A>(
  a: readonly A[] = [],
  b: readonly B[] = [],
  eq: (x: A, y: B) => boolean = (x, y) => (x as unknown) === y,
): boolean {
  return a.length === b.length && a.every((v, i) => eq(v, b[i] as B));
}
