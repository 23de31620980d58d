import { describe, expect, test } from "bun:test";
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

  test("exports depth and adds with the client-go metric names", async () => {
    const registry = new Registry();
    const queue = new WorkQueue("cloud-node", { registry });
    // From the start, as client-go's, even while workers take every key at once.
    expect(registry.expose()).toContain('workqueue_depth{name="cloud-node"} 0');
    const worker = queue.get();
    queue.add("w");
    expect(await worker).toBe("w");
    expect(registry.expose()).toContain('workqueue_depth{name="cloud-node"} 0');
    queue.done("w");
    queue.add("a");
    queue.add("b");
    const text = registry.expose();
    expect(text).toContain('workqueue_depth{name="cloud-node"} 2');
    expect(text).toContain('workqueue_adds_total{name="cloud-node"} 3');
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
