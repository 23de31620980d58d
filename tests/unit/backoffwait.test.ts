// lib/backoffwait.ts: the abortable wait between retries, on real timers.

import { describe, expect, test } from "bun:test";
import { wait } from "../../lib/backoffwait.ts";

describe("wait()", () => {
  test("wait() resolves after the delay", async () => {
    const started = performance.now();
    await wait(20);
    expect(performance.now() - started).toBeGreaterThanOrEqual(15);
  });

  test("wait() resolves at once when the signal aborts, and at once when it already has", async () => {
    const abort = new AbortController();
    let done = false;
    const waiting = wait(3_600_000, abort.signal).then(() => {
      done = true;
    });
    await null; // lets a wrongly settled wait() run its then() first
    expect(done).toBe(false);
    abort.abort();
    await waiting;
    expect(done).toBe(true);
    await wait(3_600_000, abort.signal);
  });
});
