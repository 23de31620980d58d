// sameList(): order-sensitive equality of two lists, an absent list read as empty.

import { describe, expect, test } from "bun:test";
import { sameList } from "../../lib/samelist.ts";

describe("sameList()", () => {
  const cases: Array<[string, readonly string[] | undefined, readonly string[] | undefined, boolean]> = [
    ["equal lists", ["a", "b"], ["a", "b"], true],
    ["two empty lists", [], [], true],
    ["absent and empty", undefined, [], true],
    ["both absent", undefined, undefined, true],
    ["absent and non-empty", undefined, ["a"], false],
    ["the same values in another order", ["a", "b"], ["b", "a"], false],
    ["a longer list", ["a"], ["a", "b"], false],
    ["a shorter list", ["a", "b"], ["a"], false],
  ];
  for (const [name, a, b, want] of cases) {
    test(`sameList() is ${want} for ${name}`, () => {
      expect(sameList(a, b)).toBe(want);
      expect(sameList(b, a)).toBe(want);
    });
  }
});
