// lib/talosroute.ts: which way a call about a machine takes (direct or through the proxy), the
// windows after direct failures, the path closed for all, and TALOS_MACHINE_ACCESS.

import { describe, expect, test } from "bun:test";
import {
  FIRST_WINDOW_MS,
  MACHINES_TO_CLOSE,
  MAX_FAILING,
  MAX_WINDOW_MS,
  MachineRoutes,
  parseMachineAccess,
  windowAfter,
} from "../../lib/talosroute.ts";

describe("MachineRoutes", () => {
  test("auto: direct until the machine's path fails, then the proxy for its window", () => {
    const r = new MachineRoutes("auto");
    expect(r.route("10.0.0.5", 0)).toBe("direct");
    expect(r.directFailed("10.0.0.5", 1_000)).toEqual({ windowMs: FIRST_WINDOW_MS, closedForAll: false });
    expect(r.route("10.0.0.5", 1_000)).toBe("proxy");
    expect(r.route("10.0.0.5", 1_000 + FIRST_WINDOW_MS - 1)).toBe("proxy");
    expect(r.route("10.0.0.5", 1_000 + FIRST_WINDOW_MS)).toBe("direct");
    // another machine is not affected
    expect(r.route("10.0.0.6", 1_000)).toBe("direct");
  });

  test("the window doubles per failure in a row, up to 30 minutes; a direct answer resets it", () => {
    const r = new MachineRoutes("auto");
    const windows: number[] = [];
    for (let i = 0; i < 8; i++) windows.push(r.directFailed("10.0.0.5", 0).windowMs);
    expect(windows).toEqual([1, 2, 4, 8, 16, 30, 30, 30].map((m) => m * 60_000));
    r.directWorked("10.0.0.5");
    expect(r.route("10.0.0.5", 0)).toBe("direct");
    expect(r.directFailed("10.0.0.5", 0).windowMs).toBe(FIRST_WINDOW_MS);
    expect(windowAfter(1_000_000)).toBe(MAX_WINDOW_MS);
  });

  test("8 machines failing in a row close the path for all; one direct answer between keeps it open", () => {
    const r = new MachineRoutes("auto");
    for (let i = 1; i < MACHINES_TO_CLOSE; i++)
      expect(r.directFailed(`10.0.0.${i}`, 0).closedForAll).toBe(false);
    r.directWorked("10.0.1.1");
    for (let i = 1; i < MACHINES_TO_CLOSE; i++)
      expect(r.directFailed(`10.0.2.${i}`, 0).closedForAll).toBe(false);
    // the same machine failing again does not count twice
    expect(r.directFailed("10.0.2.1", 0).closedForAll).toBe(false);
    expect(r.closedForAll(0)).toBe(false);
    expect(r.directFailed("10.0.2.99", 0).closedForAll).toBe(true);
    expect(r.closedForAll(1)).toBe(true);
    expect(r.route("10.9.9.9", FIRST_WINDOW_MS - 1)).toBe("proxy");
    expect(r.route("10.9.9.9", FIRST_WINDOW_MS)).toBe("direct");
    // closing again doubles the window for all
    for (let i = 0; i < MACHINES_TO_CLOSE; i++) r.directFailed(`10.0.3.${i}`, FIRST_WINDOW_MS);
    expect(r.route("10.9.9.9", FIRST_WINDOW_MS * 3 - 1)).toBe("proxy");
    expect(r.route("10.9.9.9", FIRST_WINDOW_MS * 3)).toBe("direct");
  });

  test("failures while another machine is connected directly are each machine's own: the path stays open for all", () => {
    const r = new MachineRoutes("auto");
    // one Node's addresses, one unreachable after another, with other machines connected meanwhile
    for (let i = 0; i < 4 * MACHINES_TO_CLOSE; i++) {
      const f = r.directFailed(`10.0.4.${i}`, 0, true);
      expect(f).toEqual({ windowMs: FIRST_WINDOW_MS, closedForAll: false });
      expect(r.route(`10.0.4.${i}`, 1)).toBe("proxy");
    }
    expect(r.closedForAll(1)).toBe(false);
    expect(r.route("10.9.9.9", 1)).toBe("direct");
    // a failure with another machine connected also ends a streak begun with none connected
    for (let i = 1; i < MACHINES_TO_CLOSE; i++) r.directFailed(`10.0.5.${i}`, 0);
    r.directFailed("10.0.5.100", 0, true);
    expect(r.directFailed("10.0.5.101", 0).closedForAll).toBe(false);
  });

  test("proxy: never direct", () => {
    const r = new MachineRoutes("proxy");
    expect(r.route("10.0.0.5", 0)).toBe("proxy");
    expect(r.closedForAll(0)).toBe(true);
  });

  test("the machines remembered as failing are bounded; the oldest is forgotten first", () => {
    const r = new MachineRoutes("auto");
    for (let i = 0; i <= MAX_FAILING; i++) {
      r.directFailed(`m${i}`, 0);
      if (i % (MACHINES_TO_CLOSE - 1) === 0) r.directWorked("elsewhere"); // the path stays open for all
    }
    expect(r.closedForAll(1)).toBe(false);
    expect(r.failing).toBe(MAX_FAILING);
    expect(r.route("m0", 1)).toBe("direct");
    expect(r.route("m1", 1)).toBe("proxy");
    expect(r.route(`m${MAX_FAILING}`, 1)).toBe("proxy");
  });
});

describe("parseMachineAccess", () => {
  test("auto by default, proxy when asked, anything else refused naming the variable", () => {
    expect(parseMachineAccess(undefined)).toBe("auto");
    expect(parseMachineAccess(" ")).toBe("auto");
    expect(parseMachineAccess("proxy")).toBe("proxy");
    expect(parseMachineAccess("auto")).toBe("auto");
    expect(() => parseMachineAccess("Direct")).toThrow(
      'TALOS_MACHINE_ACCESS="Direct": expected auto or proxy',
    );
  });
});
