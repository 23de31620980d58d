import { describe, expect, test } from "bun:test";
import { WriteBudget } from "../../lib/writebudget.ts";

describe("WriteBudget", () => {
  test("WriteBudget.take() allows a burst, then one write per pace, and says when the next is due", () => {
    let now = 0;
    const b = new WriteBudget({ burst: 3, paceMs: 5000, now: () => now });
    expect([b.take("n"), b.take("n"), b.take("n")]).toEqual([0, 0, 0]);
    expect(b.take("n")).toBe(5000);
    now += 2000;
    expect(b.take("n")).toBe(3000);
    now += 3000;
    expect(b.take("n")).toBe(0);
    // Two writes need two tokens: nothing is taken until both are due.
    expect(b.take("n", 2)).toBe(10_000);
    now += 10_000;
    expect(b.take("n", 2)).toBe(0);
    // A bucket never holds more than the burst, however long the node was quiet.
    now += 10_000_000;
    expect([b.take("n", 3), b.take("n")]).toEqual([0, 5000]);
  });

  test("waitFor() says when a write could be taken and takes nothing", () => {
    let now = 0;
    const b = new WriteBudget({ burst: 2, paceMs: 1000, now: () => now });
    expect(b.waitFor("n")).toBe(0);
    expect(b.waitFor("n", 2)).toBe(0);
    expect([b.waitFor("n"), b.waitFor("n")]).toEqual([0, 0]);
    expect([b.take("n"), b.take("n")]).toEqual([0, 0]);
    expect(b.waitFor("n")).toBe(1000);
    expect(b.waitFor("n", 2)).toBe(2000);
    now += 400;
    expect(b.waitFor("n")).toBe(600);
    now += 600;
    expect(b.waitFor("n")).toBe(0);
    expect(b.take("n")).toBe(0);
  });

  test("WriteBudget keeps each node's bucket apart, and a forgotten node starts full", () => {
    const now = 0;
    const b = new WriteBudget({ burst: 2, paceMs: 1000, now: () => now });
    expect(b.take("hostile", 2)).toBe(0);
    expect(b.take("hostile")).toBe(1000);
    expect(b.take("honest", 2)).toBe(0);
    expect(b.size).toBe(2);
    b.forget("hostile");
    expect(b.take("hostile", 5)).toBe(0);
  });

  test("charge() takes a cost known after the fact, below zero: take(key, 0) waits until the debt is paid", () => {
    let now = 0;
    const b = new WriteBudget({ burst: 100, paceMs: 10, now: () => now });
    expect(b.take("a", 0)).toBe(0);
    b.charge("a", 130);
    // 30 units of debt at one per 10 ms.
    expect(b.take("a", 0)).toBe(300);
    expect(b.take("b", 0)).toBe(0);
    now += 300;
    expect(b.take("a", 0)).toBe(0);
  });

  test("buckets full again are dropped at the next sweep (once per refill time): a node that wrote once costs nothing", () => {
    let now = 0;
    const b = new WriteBudget({ burst: 2, paceMs: 1000, now: () => now });
    for (let i = 0; i < 50; i++) b.take(`n${i}`);
    b.charge("debtor", 10);
    expect(b.size).toBe(51);
    now += 2000;
    b.take("x", 0);
    // Every bucket that refilled is gone; the debtor's (8 tokens short) stays, and so does x's.
    expect(b.size).toBe(2);
    expect(b.take("debtor", 0)).toBe(8000 - 2000);
  });

  test("WriteBudget refuses a budget that allows nothing", () => {
    expect(() => new WriteBudget({ burst: 0, paceMs: 1, now: Date.now })).toThrow(/^Cannot create/);
    expect(() => new WriteBudget({ burst: 1, paceMs: 0, now: Date.now })).toThrow(/^Cannot create/);
  });
});
