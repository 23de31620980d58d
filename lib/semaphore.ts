// A FIFO counting semaphore bounding calls in flight (the Talos client's call slots). No timers: a
// waiter leaves when a slot frees, its signal aborts, or the semaphore fails every waiter.

/**
 * A FIFO counting semaphore.
 * @example
 * const slots = new Semaphore(2, () => new Error("canceled"));
 * const release = await slots.acquire(signal);
 * try { await work(); } finally { release(); }
 */
export class Semaphore {
  #free: number;
  readonly #canceled: () => Error;
  readonly #waiters: Array<{ grant: () => void; fail: (e: Error) => void }> = [];

  /**
   * @param size slots (a positive integer).
   * @param canceled the error `acquire` throws when its signal aborts.
   */
  constructor(size: number, canceled: () => Error) {
    this.#free = size;
    this.#canceled = canceled;
  }

  /**
   * Waits for a slot, first come first served.
   * @returns the release function (idempotent).
   * @throws the `canceled` error when `signal` aborts first; the error of {@link failAll}.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw this.#canceled();
    if (this.#free > 0) {
      this.#free--;
    } else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          grant: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
          fail: reject,
        };
        const onAbort = () => {
          const i = this.#waiters.indexOf(waiter);
          if (i >= 0) this.#waiters.splice(i, 1);
          reject(this.#canceled());
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        this.#waiters.push(waiter);
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      if (next) next.grant();
      else this.#free++;
    };
  }

  /** Fails every waiter (client closed). */
  failAll(err: Error): void {
    for (const w of this.#waiters.splice(0)) w.fail(err);
  }
}
