// lib/backoffpolicy.ts: the jittered exponential delay, with the random source injected.

import { describe, expect, test } from "bun:test";
import { backoffDelay } from "../../lib/backoffpolicy.ts";

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

describe("backoffDelay()'s jitter", () => {
  test("draws one number from the source it is given per delay", () => {
    const draws = [0.25, 0.75];
    const random = () => draws.shift() ?? Number.NaN;
    const b = { initialMs: 1_000, maxMs: 60_000 };
    expect([backoffDelay(1, b, random), backoffDelay(1, b, random)]).toEqual([1_250, 1_750]);
    expect(draws).toEqual([]);
  });
});
