// lib/h2limits.ts: the glitch meter, a token bucket with an injected clock.

import { describe, expect, test } from "bun:test";
import { GLITCH_BURST, GlitchMeter } from "../../lib/h2limits.ts";

describe("GlitchMeter.take()", () => {
  test("a burst of GLITCH_BURST passes at one instant, the next does not", () => {
    const g = new GlitchMeter();
    for (let i = 0; i < GLITCH_BURST; i++) expect(g.take(1_000)).toBe(true);
    expect(g.take(1_000)).toBe(false);
  });

  test("refills at its rate, never beyond the burst", () => {
    const g = new GlitchMeter(10, 100);
    for (let i = 0; i < 10; i++) g.take(0);
    expect(g.take(0)).toBe(false);
    expect(g.take(10)).toBe(true); // 10 ms at 100/s: one token
    expect(g.take(10)).toBe(false);
    let passed = 0;
    for (let i = 0; i < 50; i++) if (g.take(60_000)) passed++;
    expect(passed).toBe(10);
  });
});
