import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  closestKey,
  editDistance,
  quoteValue,
  unknownKeyMessage,
  withoutLongValue,
} from "../../lib/suggest.ts";

describe("editDistance()", () => {
  test.each([
    ["", "", 0],
    ["abc", "", 3],
    ["", "abc", 3],
    ["kitten", "sitting", 3],
    ["leader-elect", "leader-elect", 0],
    ["leader-elcet", "leader-elect", 2],
    ["Zone", "zone", 1],
  ])("editDistance(%p, %p) = %p", (a, b, d) => {
    expect(editDistance(a, b)).toBe(d);
  });

  test("editDistance() is symmetric and zero only for equal strings", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), (a, b) => {
        const d = editDistance(a, b);
        expect(editDistance(b, a)).toBe(d);
        expect(d === 0).toBe(a === b);
        expect(d).toBeLessThanOrEqual(Math.max(a.length, b.length));
      }),
    );
  });
});

describe("closestKey()", () => {
  test.each([
    ["PreferIPv6", ["clusterName", "preferIPv6", "reconcile"], "preferIPv6"],
    ["nodeSelectors", ["name", "nodeSelector", "labels"], "nodeSelector"],
    ["ab", ["ax", "ay"], "ax"],
    ["x", [], undefined],
  ])("closestKey(%p, %j) = %p", (word, candidates, near) => {
    expect(closestKey(word, candidates)).toBe(near);
  });
});

describe("unknownKeyMessage()", () => {
  test.each([
    [
      "key",
      "PreferIPv6",
      ["clusterName", "preferIPv6"],
      "ignored",
      'unknown key "PreferIPv6": ignored; keys are case-sensitive, did you mean "preferIPv6"?',
    ],
    [
      "selector key",
      "hostnam",
      ["hostname", "zone"],
      "no node has it",
      'unknown selector key "hostnam": no node has it (closest known key: "hostname")',
    ],
    ["key", "anything", [], "ignored", 'unknown key "anything": ignored'],
  ])("unknownKeyMessage(%p, %p, …)", (what, key, known, consequence, message) => {
    expect(unknownKeyMessage(what, key, known, consequence)).toBe(message);
  });
});

describe("quoteValue() and withoutLongValue()", () => {
  test("quoteValue() quotes a short value whole and a long one by its start, with its length", () => {
    expect(quoteValue('a "b"')).toBe('"a \\"b\\""');
    expect(quoteValue("x".repeat(100))).toBe(`"${"x".repeat(80)}…" (100 characters)`);
  });

  test("withoutLongValue() replaces every repeat of a long value in a message by its excerpt", () => {
    const long = "y".repeat(1000);
    expect(withoutLongValue(`bad \`${long}\`: too large; \`${long}\``, long)).toBe(
      `bad \`${quoteValue(long)}\`: too large; \`${quoteValue(long)}\``,
    );
    expect(withoutLongValue("short `ab`", "ab")).toBe("short `ab`");
  });
});
