// "Did you mean" hints for misspelled names (command-line flags, config and metadata keys): the edit
// distance between two names, the closest of the known names, and the warning text for an unknown key.

/**
 * Levenshtein distance: the fewest one-character insertions, deletions and substitutions that turn
 * `a` into `b`.
 * @example editDistance("kitten", "sitting") // 3
 */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/**
 * The candidate nearest to `word`, ignoring case (the first one on a tie); undefined without candidates.
 * @example closestKey("PreferIPv6", ["clusterName", "preferIPv6"]) // "preferIPv6"
 */
export function closestKey(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const c of candidates) {
    const d = editDistance(word.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [c, d];
  }
  return best;
}

/**
 * The warning for an unknown key, with the closest known key as a hint (and a word on case when
 * only case differs: keys are case-sensitive).
 * @param what what the key is, e.g. "key" or "selector key".
 * @param consequence what happens to it, e.g. "ignored".
 * @example unknownKeyMessage("key", "PreferIPv6", ["preferIPv6"], "ignored")
 *   // 'unknown key "PreferIPv6": ignored; keys are case-sensitive, did you mean "preferIPv6"?'
 */
export function unknownKeyMessage(
  what: string,
  key: string,
  known: readonly string[],
  consequence: string,
): string {
  const near = closestKey(key, known);
  if (near === undefined) return `unknown ${what} ${JSON.stringify(key)}: ${consequence}`;
  if (near.toLowerCase() === key.toLowerCase()) {
    return `unknown ${what} ${JSON.stringify(key)}: ${consequence}; keys are case-sensitive, did you mean ${JSON.stringify(near)}?`;
  }
  return `unknown ${what} ${JSON.stringify(key)}: ${consequence} (closest known key: ${JSON.stringify(near)})`;
}

/** Longest value {@link quoteValue} shows whole, in characters. */
const MAX_QUOTED_CHARS = 80;

/**
 * A value quoted for a message (JSON string syntax), cut after its first characters when long so
 * that a message about a huge value stays one readable line.
 * @example quoteValue("a".repeat(100_000)) // '"aaaa…" (100000 characters)' with 80 a's
 */
export function quoteValue(text: string): string {
  if (text.length <= MAX_QUOTED_CHARS) return JSON.stringify(text);
  return `${JSON.stringify(`${text.slice(0, MAX_QUOTED_CHARS)}…`)} (${text.length} characters)`;
}

/**
 * A message that may repeat `text` (an error naming the pattern it failed on), with every repeat of
 * a long `text` replaced by its {@link quoteValue} excerpt.
 */
export function withoutLongValue(message: string, text: string): string {
  return text.length <= MAX_QUOTED_CHARS ? message : message.split(text).join(quoteValue(text));
}
