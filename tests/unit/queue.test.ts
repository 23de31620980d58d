import { describe, expect, test } from "bun:test";
import { backoffDelay, wait } from "../../lib/backoff.ts";
import { Registry } from "../../lib/metrics.ts";
import { runWorkers, WorkQueue } from "../../lib/queue.ts";

const q = (opts: ConstructorParameters<typeof WorkQueue>[1] = {}) =>
  new WorkQueue("test", { registry: new Registry(), ...opts });

describe("WorkQueue", () => {
  test("add() de-duplicates keys that are waiting", async () => {
    const queue = q();
    queue.add("a");
    queue.add("a");
    queue.add("b");
    expect(queue.length).toBe(2);
    expect(await queue.get()).toBe("a");
    expect(await queue.get()).toBe("b");
  });

  test("a key re-added while processing is handed out again only after done()", async () => {
    const queue = q();
    queue.add("a");
    const key = await queue.get();
    queue.add("a");
    expect(queue.length).toBe(0);
    queue.done(key as string);
    expect(queue.length).toBe(1);
    expect(await queue.get()).toBe("a");
  });

  test("get() waits for the next add", async () => {
    const queue = q();
    const next = queue.get();
    queue.add("late");
    expect(await next).toBe("late");
  });

  test("backoffMs() doubles per failure up to the cap and forget() resets it", () => {
    const queue = q({ baseDelayMs: 10, maxDelayMs: 50 });
    expect(queue.backoffMs("k")).toBe(10);
    queue.addRateLimited("k");
    expect(queue.backoffMs("k")).toBe(20);
    queue.addRateLimited("k");
    queue.addRateLimited("k");
    expect(queue.backoffMs("k")).toBe(50);
    expect(queue.failures("k")).toBe(3);
    queue.forget("k");
    expect(queue.backoffMs("k")).toBe(10);
    queue.shutDown();
  });

  test("addAfter() keeps the earliest pending time", async () => {
    const queue = q();
    queue.addAfter("k", 5000);
    queue.addAfter("k", 1);
    expect(await queue.get()).toBe("k");
    queue.shutDown();
  });

  test("shutDown() releases waiting getters with undefined", async () => {
    const queue = q();
    const next = queue.get();
    queue.shutDown();
    expect(await next).toBeUndefined();
  });

  test("exports depth and adds with the client-go metric names", () => {
    const registry = new Registry();
    const queue = new WorkQueue("cloud-node", { registry });
    queue.add("a");
    queue.add("b");
    const text = registry.expose();
    expect(text).toContain('workqueue_depth{name="cloud-node"} 2');
    expect(text).toContain('workqueue_adds_total{name="cloud-node"} 2');
  });
});

describe("runWorkers()", () => {
  test("never runs one key on two workers at once and bounds concurrency", async () => {
    const queue = q();
    let inFlight = 0;
    let maxInFlight = 0;
    const running = new Set<string>();
    let overlap = false;
    let calls = 0;
    const done = runWorkers(queue, 3, async (key) => {
      const call = ++calls;
      if (running.has(key)) overlap = true;
      running.add(key);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      queue.add(key); // re-added while processing: must wait for done()
      // Uneven work, in microtask turns: the workers finish out of step, as real ones do.
      for (let turn = 0; turn < call % 4; turn++) await null;
      inFlight--;
      running.delete(key);
      if (calls >= 40) queue.shutDown();
    });
    for (const k of ["a", "b", "c", "d", "e"]) queue.add(k);
    await done;
    expect(overlap).toBe(false);
    expect(maxInFlight).toBeLessThanOrEqual(3);
    expect(maxInFlight).toBeGreaterThan(1);
  });

  test("retries a failing key with backoff until it succeeds", async () => {
    const queue = q({ baseDelayMs: 1 });
    let attempts = 0;
    const done = runWorkers(queue, 1, async () => {
      attempts++;
      if (attempts < 4) throw new Error("transient");
      queue.shutDown();
    });
    queue.add("k");
    await done;
    expect(attempts).toBe(4);
  });
});

describe("backoffDelay()", () => {
  const b = { initialMs: 500, maxMs: 15_000 };
  test.each([
    [0, 0, 250],
    [0, 1, 500],
    [3, 0, 2000],
    [3, 1, 4000],
    [10, 1, 15_000],
    [10, 0, 7_500],
    [1000, 1, 15_000],
  ])("attempt %d, random %d → %d ms", (attempt, r, want) => {
    expect(backoffDelay(attempt, b, () => r)).toBe(want);
  });
});

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
