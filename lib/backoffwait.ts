// The abortable wait between retries, in a queue or outside one (the delay itself is
// lib/backoffpolicy.ts's backoffDelay).

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
