import { describe, expect, test } from "bun:test";
import type { ConflictingWrite } from "../../lib/fieldowners.ts";
import { LOOP_GAP_MS, NodeRecord } from "../../lib/nodestate.ts";
import { takeFrom, tokensAt } from "../../lib/writebudget.ts";

const WINDOW = 600_000;
const PACE = { burst: 3, paceMs: 5000 };
const taints: ConflictingWrite = { field: "spec.taints", keys: ["a:NoSchedule"], manager: "other" };
const addresses: ConflictingWrite = { field: "status.addresses", keys: ["InternalIP"], manager: "kubelet" };

describe("NodeRecord: one record per node, decisions with the time passed in", () => {
  test("showsOurWrites() refuses the versions written on, then forgets them", () => {
    const r = new NodeRecord();
    expect(r.showsOurWrites("5")).toBe(true);
    r.stale = ["5", "6"];
    expect(r.showsOurWrites("5")).toBe(false);
    expect(r.showsOurWrites("6")).toBe(false);
    expect(r.stale).toEqual(["5", "6"]);
    expect(r.showsOurWrites("7")).toBe(true);
    expect(r.stale).toBeUndefined();
    // Once the cache showed a later version, an old one is no longer refused.
    expect(r.showsOurWrites("5")).toBe(true);
  });

  test("noticeConflicts(): one report per field in the window; a loop doubles the taint write-back", () => {
    const r = new NodeRecord();
    const first = r.noticeConflicts([taints, addresses], 0, WINDOW);
    expect(first.map((n) => [n.conflict.field, n.delayMs, n.report])).toEqual([
      ["spec.taints", 0, true],
      ["status.addresses", 0, true],
    ]);
    // Again right after the write-back: a loop; reported no more within the window.
    const second = r.noticeConflicts([taints], 1000, WINDOW);
    expect(second.map((n) => [n.delayMs, n.report])).toEqual([[1000, false]]);
    const third = r.noticeConflicts([taints], 2000 + 1000, WINDOW);
    expect(third.map((n) => n.delayMs)).toEqual([2000]);
    // The node's own credentials can write addresses: their delay stays capped at 1 s.
    for (let t = 1000; t < 8000; t += 1000) r.noticeConflicts([addresses], t, WINDOW);
    expect(r.noticeConflicts([addresses], 8000, WINDOW)[0]?.delayMs).toBe(1000);
  });

  test("noticeConflicts(): a change long after the last write-back starts a new streak; a new window reports again", () => {
    const r = new NodeRecord();
    r.noticeConflicts([taints], 0, WINDOW);
    r.noticeConflicts([taints], 500, WINDOW);
    const later = r.noticeConflicts([taints], 500 + 1000 + LOOP_GAP_MS, WINDOW);
    expect(later.map((n) => [n.delayMs, n.report])).toEqual([[0, false]]);
    const nextWindow = r.noticeConflicts([taints], WINDOW + 1, WINDOW);
    expect(nextWindow.map((n) => n.report)).toEqual([true]);
    expect(r.conflicts).toHaveLength(1);
  });

  test("windowEventDue(): once per reason in the window", () => {
    const r = new NodeRecord();
    expect(r.windowEventDue("WriteBudgetExceeded", 0, 1000)).toBe(true);
    expect(r.windowEventDue("WriteBudgetExceeded", 999, 1000)).toBe(false);
    expect(r.windowEventDue("PeerInputOverLimit", 999, 1000)).toBe(true);
    expect(r.windowEventDue("WriteBudgetExceeded", 1000, 1000)).toBe(true);
    expect(r.windowEvents).toHaveLength(2);
  });

  test("takeWrites() and enqueueDelay(): a burst, then the pass is deferred until a write is due", () => {
    const r = new NodeRecord();
    expect(r.enqueueDelay(0, PACE)).toEqual({ waitMs: 0, deferred: false });
    expect(r.takeWrites(2, 0, PACE)).toBe(0);
    expect(r.takeWrites(2, 0, PACE)).toBe(5000);
    expect(r.deferredUntil).toBe(5000);
    // A change meanwhile joins the deferred pass: it waits for what is left of it.
    expect(r.enqueueDelay(1000, PACE)).toEqual({ waitMs: 4000, deferred: false });
    expect(r.takeWrites(2, 5000, PACE)).toBe(0);
    expect(r.deferredUntil).toBeUndefined();
    // The bucket is empty now: a change defers its pass until one write's worth is back.
    expect(r.enqueueDelay(5000, PACE)).toEqual({ waitMs: 5000, deferred: true });
    expect(r.deferredUntil).toBe(10_000);
    // Refilled: the bucket is dropped (a full bucket and none are the same).
    expect(r.enqueueDelay(60_000, PACE)).toEqual({ waitMs: 0, deferred: false });
    expect(r.bucket).toBeUndefined();
  });

  test("leaveOut(): each IP newly left out is reported once", () => {
    const r = new NodeRecord();
    expect(r.leaveOut(["10.0.0.9"])).toEqual(["10.0.0.9"]);
    expect(r.leaveOut(["10.0.0.9"])).toEqual([]);
    expect(r.leaveOut(["10.0.0.9", "10.0.0.8"])).toEqual(["10.0.0.8"]);
    expect(r.leaveOut([])).toEqual([]);
    expect(r.notOnMachine).toBeUndefined();
    expect(r.leaveOut(["10.0.0.9"])).toEqual(["10.0.0.9"]);
  });

  test("waitForID(): the wait starts, goes on, and ends with how long it took", () => {
    const r = new NodeRecord();
    expect(r.waitForID(false, 0)).toEqual({ change: "none", waiting: false });
    expect(r.waitForID(true, 1000)).toEqual({ change: "started" });
    expect(r.waitForID(true, 2000)).toEqual({ change: "none", waiting: true });
    expect(r.waitingForIDSince).toBe(1000);
    expect(r.waitForID(false, 61_000)).toEqual({ change: "ended", waitedMs: 60_000 });
    expect(r.waitingForIDSince).toBeUndefined();
  });
});

describe("write budget buckets as values", () => {
  test("tokensAt() refills one token per pace up to the burst; takeFrom() takes or says when", () => {
    expect(tokensAt(undefined, 0, PACE)).toBe(3);
    expect(tokensAt({ tokens: -1, atMs: 0 }, 10_000, PACE)).toBe(1);
    expect(tokensAt({ tokens: 0, atMs: 0 }, 60_000, PACE)).toBe(3);
    expect(takeFrom({ tokens: 0.5, atMs: 0 }, 1, 0, PACE)).toEqual({
      bucket: { tokens: 0.5, atMs: 0 },
      waitMs: 2500,
    });
    expect(takeFrom(undefined, 9, 0, PACE)).toEqual({ bucket: { tokens: 0, atMs: 0 }, waitMs: 0 });
  });
});
