// An index from keys to the names that hold them, cheap when a key has one name (the usual case):
// one name is kept as a string, several as an array. The CSR approver's claim index (names and IPs
// to the Nodes that claim them) and the cluster's shared ranges (lib/sharedaddresses.ts) use it, so
// that thousands of Nodes cost one map entry each and no collection per key.

/** The names under one key: one as a string, several as an array. */
export type Names = string | string[];

/**
 * Adds `name` under `key` (once).
 * @example const index = new Map<string, Names>(); addName(index, "10.0.0.1", "node-a")
 */
export function addName<K>(index: Map<K, Names>, key: K, name: string): void {
  const n = index.get(key);
  if (n === undefined || n === name) index.set(key, name);
  else if (typeof n === "string") index.set(key, [n, name]);
  else if (!n.includes(name)) n.push(name);
}

/**
 * Removes `name` from under `key`, and the key when no name is left.
 * @returns whether `name` was there
 */
export function removeName<K>(index: Map<K, Names>, key: K, name: string): boolean {
  const n = index.get(key);
  if (n === name) {
    index.delete(key);
    return true;
  }
  if (!Array.isArray(n) || !n.includes(name)) return false;
  const rest = n.filter((x) => x !== name);
  index.set(key, rest.length === 1 ? (rest[0] as string) : rest);
  return true;
}

/** The names of an entry as a list (empty for none). */
export function namesOf(n: Names | undefined): readonly string[] {
  return n === undefined ? [] : typeof n === "string" ? [n] : n;
}
