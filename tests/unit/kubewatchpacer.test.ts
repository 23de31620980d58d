// Large watch events paced per object before they are parsed (lib/kubewatchpacer.ts): an object's large
// MODIFIED events are read at most once per window, the newest held meanwhile and delivered when the
// window ends; any newer event of the object replaces a held one; small events, other objects, ADDED
// and DELETED pass at once; and the Informer applies a held event as if it had just arrived. A fake
// clock and fake timers: nothing sleeps.

import { describe, expect, test } from "bun:test";
import { lineKey, type Timers, WatchPacer } from "../../lib/kubewatchpacer.ts";

/** A watch event line as the API server writes one, padded to about `size` characters. */
function line(type: string, name: string, size = 100, tag = ""): string {
  const pad = "x".repeat(Math.max(0, size - 120));
  return JSON.stringify({
    type,
    object: {
      kind: "Node",
      apiVersion: "v1",
      metadata: { name, resourceVersion: "1", labels: { pad, tag } },
    },
  });
}

/** A clock and timers the test moves by hand. */
function fakeTime() {
  let now = 1_000_000;
  const due: { at: number; fn: () => void; live: boolean }[] = [];
  const timers: Timers = {
    set(fn, ms) {
      const t = { at: now + ms, fn, live: true };
      due.push(t);
      return t;
    },
    clear(h) {
      (h as { live: boolean }).live = false;
    },
  };
  return {
    now: () => now,
    timers,
    /** Moves the clock by `ms`, firing the timers due by then. */
    advance(ms: number) {
      now += ms;
      for (const t of due.splice(0)) {
        if (t.live && t.at <= now) t.fn();
        else if (t.live) due.push(t);
      }
    },
    get pending() {
      return due.filter((t) => t.live).length;
    },
  };
}

function pacer(bytes = 1000, paceMs = 10_000) {
  const time = fakeTime();
  const delivered: string[] = [];
  const held: { name: string; bytes: number; report: boolean }[] = [];
  const p = new WatchPacer({
    bytes,
    paceMs,
    deliver: (l) => delivered.push(l),
    onHeld: (name, b, report) => held.push({ name, bytes: b, report }),
    now: time.now,
    timers: time.timers,
  });
  return { p, time, delivered, held };
}

const tagOf = (l: string) =>
  (JSON.parse(l) as { object: { metadata: { labels: { tag: string } } } }).object.metadata.labels.tag;

describe("lineKey()", () => {
  test("reads the type and the name from the start of an API server's line", () => {
    expect(lineKey(line("MODIFIED", "node-a", 5000))).toEqual({ type: "MODIFIED", name: "node-a" });
    expect(lineKey(line("DELETED", "a.b-c"))).toEqual({ type: "DELETED", name: "a.b-c" });
  });
  test("undefined for a line that does not start as the API server writes one", () => {
    expect(lineKey('{"object":{"metadata":{"name":"a"}},"type":"MODIFIED"}')).toBeUndefined();
    expect(
      lineKey('{"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"A_B"}}}'),
    ).toBeUndefined();
    expect(lineKey("")).toBeUndefined();
  });
});

describe("WatchPacer", () => {
  test("small events and a first large event are parsed at once; nothing is held", () => {
    const { p, time } = pacer();
    expect(p.admit(line("MODIFIED", "a"))).toBe(true);
    expect(p.admit(line("MODIFIED", "a", 5000))).toBe(true);
    expect(p.admit(line("MODIFIED", "b", 5000))).toBe(true);
    expect(p.held).toBe(0);
    expect(time.pending).toBe(0);
  });

  test("large events of one object within the window: the newest is held and delivered when the window ends", () => {
    const { p, time, delivered, held } = pacer();
    expect(p.admit(line("MODIFIED", "a", 5000, "1"))).toBe(true);
    time.advance(1000);
    expect(p.admit(line("MODIFIED", "a", 5000, "2"))).toBe(false);
    time.advance(1000);
    expect(p.admit(line("MODIFIED", "a", 5000, "3"))).toBe(false);
    expect(p.held).toBe(1);
    expect(p.dropped).toBe(1);
    // Another object is not affected.
    expect(p.admit(line("MODIFIED", "b", 5000))).toBe(true);
    time.advance(7999);
    expect(delivered).toEqual([]);
    time.advance(1);
    expect(delivered.map(tagOf)).toEqual(["3"]);
    expect(p.held).toBe(0);
    // Reported once in its report window, counted each time.
    expect(held.map((h) => h.report)).toEqual([true, false]);
    expect(held[0]?.name).toBe("a");
    expect(held[0]?.bytes).toBeGreaterThan(5000 - 1);
    // The delivery started a new window: the next large event waits for it.
    expect(p.admit(line("MODIFIED", "a", 5000, "4"))).toBe(false);
    time.advance(10_000);
    expect(delivered.map(tagOf)).toEqual(["3", "4"]);
    // A window with nothing held ends quietly; the next large event is read at once.
    time.advance(10_000);
    expect(p.admit(line("MODIFIED", "a", 5000, "5"))).toBe(true);
  });

  test("a newer small, ADDED or DELETED event replaces the held one, which is never delivered", () => {
    for (const type of ["MODIFIED", "ADDED", "DELETED"]) {
      const { p, time, delivered } = pacer();
      p.admit(line("MODIFIED", "a", 5000, "1"));
      expect(p.admit(line("MODIFIED", "a", 5000, "2"))).toBe(false);
      const newer = type === "MODIFIED" ? line(type, "a", 100) : line(type, "a", 5000);
      expect(p.admit(newer), type).toBe(true);
      expect(p.held, type).toBe(0);
      expect(p.dropped, type).toBe(1);
      time.advance(20_000);
      expect(delivered, type).toEqual([]);
    }
  });

  test("a large ADDED event starts the window; clear() (a re-list) and stop() drop what is held", () => {
    const { p, time, delivered } = pacer();
    expect(p.admit(line("ADDED", "a", 5000))).toBe(true);
    expect(p.admit(line("MODIFIED", "a", 5000, "2"))).toBe(false);
    p.clear();
    expect(p.held).toBe(0);
    time.advance(20_000);
    expect(delivered).toEqual([]);
    expect(p.admit(line("MODIFIED", "a", 5000, "3"))).toBe(true);
    expect(p.admit(line("MODIFIED", "a", 5000, "4"))).toBe(false);
    p.stop();
    time.advance(20_000);
    expect(delivered).toEqual([]);
  });

  test("a large line that does not name its object is parsed at once (never held unkeyed)", () => {
    const { p } = pacer();
    const odd = `{"object":{"metadata":{"name":"a"}},"type":"MODIFIED","pad":"${"x".repeat(5000)}"}`;
    expect(p.admit(odd)).toBe(true);
    expect(p.admit(odd)).toBe(true);
  });

  test("objects whose window ended and that hold nothing are forgotten", () => {
    const { p, time } = pacer();
    for (let i = 0; i < 100; i++) p.admit(line("MODIFIED", `n${i}`, 5000));
    expect(p.admit(line("MODIFIED", "n7", 5000))).toBe(false);
    expect(p.tracked).toBe(100);
    time.advance(10_000);
    // The next large event sweeps: only the new one is remembered (n7 was delivered and its new
    // window has not ended yet, so it stays too).
    p.admit(line("MODIFIED", "z", 5000));
    expect(p.tracked).toBe(2);
    // A small event for a forgotten object passes without a record.
    expect(p.admit(line("MODIFIED", "n1"))).toBe(true);
    expect(p.tracked).toBe(2);
  });
});
