import { edenGC } from "bun:jsc";
import { describe, expect, test } from "bun:test";
import { collectionDue, FLOOR_BYTES, GcPacer, GROWTH } from "../../lib/gcpacer.ts";
import { Registry } from "../../lib/metrics.ts";

const MiB = 1024 * 1024;

describe("collectionDue()", () => {
  test.each([
    ["the heap grew by more than half over the live heap, above the floor", 40 * MiB, 26 * MiB, true],
    ["grown by less than half", 38 * MiB, 26 * MiB, false],
    ["grown by half exactly", 39 * MiB, 26 * MiB, false],
    ["below the floor, however much it grew", 15 * MiB, 2 * MiB, false],
  ])("%s", (_what, heap, live, due) => {
    expect(collectionDue(heap, live)).toBe(due);
  });

  test("the defaults: 1.5× over 16 MiB", () => {
    expect(GROWTH).toBe(1.5);
    expect(FLOOR_BYTES).toBe(16 * MiB);
  });
});

describe("GcPacer", () => {
  /** A pacer over a scripted heap; each read takes the next value (the last one repeats). */
  function scripted(mib: number[], floorBytes = 8 * MiB) {
    const registry = new Registry();
    let i = 0;
    const collections: number[] = [];
    const pacer = new GcPacer({
      registry,
      floorBytes,
      minIntervalMs: 0,
      heapBytes: () => (mib[Math.min(i++, mib.length - 1)] as number) * MiB,
      collect: () => collections.push(i),
    });
    return { pacer, registry, collections };
  }

  test("collects when a burst grows the heap by half over the least seen, and follows the live heap down", () => {
    // Reads: at start 20; ticks 25, 31 (due: 31 > 1.5 × 20), then 21 after the collection; ticks 24,
    // 10 (nodes gone: the live heap follows), 12, 16 (due: 16 > 1.5 × 10), 11 after it.
    const { pacer, registry, collections } = scripted([20, 25, 31, 21, 24, 10, 12, 16, 11]);
    const ticks = [pacer.tick(), pacer.tick(), pacer.tick(), pacer.tick(), pacer.tick(), pacer.tick()];
    expect(ticks).toEqual([false, true, false, false, false, true]);
    expect(collections).toHaveLength(2);
    const text = registry.expose();
    expect(text).toContain("bun_gc_paced_collections_total 2");
    expect(text).toContain("bun_gc_paced_seconds_total");
  });

  test("collects at most once per interval, however fast the heap grows", () => {
    let clock = 0;
    // Right after a collection the heap is 10 MiB; at every other read, 100: always due by size.
    let fresh = true;
    const collections: number[] = [];
    const pacer = new GcPacer({
      floorBytes: 0,
      minIntervalMs: 5_000,
      now: () => clock,
      heapBytes: () => {
        const mib = fresh ? 10 : 100;
        fresh = false;
        return mib * MiB;
      },
      collect: () => {
        collections.push(clock);
        fresh = true;
      },
    });
    const ticks: boolean[] = [];
    for (let t = 0; t < 12; t++) {
      clock = t * 1_000;
      ticks.push(pacer.tick());
    }
    expect(collections).toEqual([0, 5_000, 10_000]);
    expect(ticks.filter(Boolean)).toHaveLength(3);
  });

  test("never collects a heap below the floor, however much it grew", () => {
    const { pacer, registry, collections } = scripted([2, 12, 3, 15, 2], 16 * MiB);
    for (let t = 0; t < 4; t++) expect(pacer.tick()).toBe(false);
    expect(collections).toHaveLength(0);
    expect(registry.expose()).toContain("bun_gc_paced_collections_total 0");
  });

  test("on the real heap: a tick after a burst's garbage collects it", () => {
    Bun.gc(true);
    const before = process.memoryUsage().heapUsed;
    const pacer = new GcPacer({ floorBytes: 0, growth: 1.01, minIntervalMs: 0 });
    const during = burst();
    expect(during - before).toBeGreaterThan(16 * MiB);
    expect(pacer.tick()).toBe(true);
    const after = process.memoryUsage().heapUsed;
    expect({ before, during, after, collected: after < during - 12 * MiB }).toMatchObject({
      collected: true,
    });
  });
});

/**
 * Allocates objects (tens of MiB) that are garbage once it returns; returns the heap while it was
 * held, after a young collection that they survive (as a burst's in-flight objects do), so that the
 * reading counts them whatever the collector did before.
 */
function burst(): number {
  const held = Array.from({ length: 800_000 }, (_, i) => ({ i, next: [i, i + 1] }));
  edenGC();
  return held.length > 0 ? process.memoryUsage().heapUsed : 0;
}
