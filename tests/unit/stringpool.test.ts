import { describe, expect, test } from "bun:test";
import { StringPool, ValuePool } from "../../lib/stringpool.ts";

/** A fresh string equal to `s`, built at run time. */
const fresh = (s: string) => [...s].join("");

describe("StringPool", () => {
  test("keeps each distinct value once, and gives back equal strings", () => {
    const pool = new StringPool(8);
    for (let i = 0; i < 1_000; i++)
      expect(pool.share(fresh(i % 2 ? "eth0" : "lo"))).toBe(i % 2 ? "eth0" : "lo");
    expect(pool.size).toBe(2);
  });

  test("never holds more than its bound: values are returned as given", () => {
    const pool = new StringPool(3);
    for (let i = 0; i < 100; i++) expect(pool.share(fresh(`10.0.0.${i}`))).toBe(`10.0.0.${i}`);
    expect(pool.size).toBe(3);
    expect(pool.max).toBe(3);
  });
});

describe("the pools cannot be filled for good by one peer", () => {
  test("StringPool: after one peer filled it with unique values, values other peers repeat are pooled again", () => {
    const pool = new StringPool(64);
    for (let i = 0; i < 10_000; i++) pool.share(fresh(`hostile-${i}`));
    expect(pool.size).toBe(64);
    expect(pool.has("amd64")).toBe(false);
    expect(pool.share(fresh("amd64"))).toBe("amd64");
    expect(pool.has("amd64")).toBe(true);
    expect(pool.size).toBe(64);
  });

  test("StringPool: values that keep repeating survive a flood of unique ones", () => {
    const pool = new StringPool(32);
    const honest = ["amd64", "linux", "eu-west-1a", "InternalIP", "Hostname"];
    for (const v of honest) pool.share(fresh(v));
    for (let i = 0; i < 5_000; i++) {
      pool.share(fresh(`hostile-${i}`));
      // Every honest Node's update asks for them again, far more often than once per sweep.
      if (i % 8 === 0) for (const v of honest) pool.share(fresh(v));
    }
    for (const v of honest) expect(pool.has(v)).toBe(true);
    expect(pool.has("hostile-0")).toBe(false);
  });

  test("ValuePool: after one peer filled it with unique values, a repeated value is kept and shared again", () => {
    const pool = new ValuePool<{ n: string }>(16);
    for (let i = 0; i < 1_000; i++) pool.share(`h${i}`, { n: `h${i}` });
    expect(pool.size).toBe(16);
    const first = pool.share("kubelet", { n: "kubelet" });
    expect(Object.isFrozen(first)).toBe(true);
    expect(pool.share("kubelet", { n: "kubelet" })).toBe(first);
    expect(pool.size).toBe(16);
  });
});

describe("the pools' bound on size", () => {
  test("StringPool never keeps a string longer than its maxLength: a peer's large values are not pinned", () => {
    const pool = new StringPool(8, 16);
    const long = "z".repeat(17);
    expect(pool.share(long)).toBe(long);
    expect(pool.size).toBe(0);
    expect(pool.share(fresh("z".repeat(16)))).toBe("z".repeat(16));
    expect(pool.size).toBe(1);
    expect(new StringPool(1).maxLength).toBe(256);
  });

  test("ValuePool never keeps a value whose key is longer than its maxKeyLength, nor freezes it", () => {
    const pool = new ValuePool<{ k: string }>(8, 32);
    const big = { k: "x".repeat(64) };
    expect(pool.share(JSON.stringify(big), big)).toBe(big);
    expect(Object.isFrozen(big)).toBe(false);
    expect(pool.size).toBe(0);
    expect(new ValuePool(1).maxKeyLength).toBe(4096);
  });
});

describe("ValuePool", () => {
  test("gives every holder of an equal value the one kept copy, frozen to the bottom", () => {
    const pool = new ValuePool<{ labels: Record<string, string> }>(4);
    const first = pool.share("k", { labels: { a: "kubelet" } });
    const again = pool.share("k", { labels: { a: "kubelet" } });
    expect(again).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(Object.isFrozen(first.labels)).toBe(true);
    expect(() => {
      (first.labels as Record<string, string>).b = "x";
    }).toThrow();
    expect(pool.size).toBe(1);
  });

  test("never holds more than its bound; a value kept once stays frozen for its holders after it is replaced", () => {
    const pool = new ValuePool<{ n: number }>(2);
    const held = pool.share("0", { n: 0 });
    for (let n = 0; n < 10; n++) expect(pool.share(String(n), { n })).toEqual({ n });
    expect(pool.size).toBe(2);
    expect(Object.isFrozen(held)).toBe(true);
    expect(pool.share("0", { n: 0 })).not.toBe(held);
    expect(new ValuePool(0).share("k", { n: 1 })).toEqual({ n: 1 });
  });
});
