// The retry helpers every loop shares, in a queue or outside one: jittered exponential backoff and
// an abortable wait.

/** Exponential backoff bounds in milliseconds. */
export interface Backoff {
  initialMs: number;
  maxMs: number;
}

/**
 * The delay before retry number `attempt` (0-based): exponential from `initialMs`, capped at
 * `maxMs`, with "equal jitter" (between half and all of it) so that clients do not retry in step.
 * @example backoffDelay(3, { initialMs: 250, maxMs: 30_000 }) // between 1000 and 2000
 */
export function backoffDelay(attempt: number, b: Backoff, random: () => number = Math.random): number {
  const full = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return full / 2 + (random() * full) / 2;
}

/** Resolves after `ms`, or at once when `signal` aborts (then the caller checks `signal.aborted`). */
export function wait(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
