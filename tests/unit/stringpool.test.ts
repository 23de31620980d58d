import { describe, expect, test } from "bun:test";
import { StringPool } from "../../lib/stringpool.ts";

/** A fresh string equal to `s`, built at run time. */
const fresh = (s: string) => [...s].join("");

describe("StringPool", () => {
  test("keeps each distinct value once, and gives back equal strings", () => {
    const pool = new StringPool(8);
    for (let i = 0; i < 1_000; i++)
      expect(pool.share(fresh(i % 2 ? "eth0" : "lo"))).toBe(i % 2 ? "eth0" : "lo");
    expect(pool.size).toBe(2);
  });

  test("stops keeping at its bound: later values are returned as given", () => {
    const pool = new StringPool(3);
    for (let i = 0; i < 100; i++) expect(pool.share(fresh(`10.0.0.${i}`))).toBe(`10.0.0.${i}`);
    expect(pool.size).toBe(3);
    expect(pool.max).toBe(3);
  });
});
