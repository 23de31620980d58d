// The retry policy every loop shares, in a queue or outside one: jittered exponential backoff. Pure:
// the jitter's random source comes from the caller (lib/backoffwait.ts holds the wait between retries).

/** Exponential backoff bounds in milliseconds. */
export interface Backoff {
  initialMs: number;
  maxMs: number;
}

/**
 * The delay before retry number `attempt` (0-based): exponential from `initialMs`, capped at
 * `maxMs`, with "equal jitter" (between half and all of it) so that clients do not retry in step.
 * @param random the jitter source, a number in [0, 1) per call (shells pass Math.random)
 * @example backoffDelay(3, { initialMs: 250, maxMs: 30_000 }, () => 0.5) // 1500, of 1000 to 2000
 */
export function backoffDelay(attempt: number, b: Backoff, random: () => number): number {
  const full = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return full / 2 + (random() * full) / 2;
}
