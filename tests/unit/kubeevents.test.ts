// lib/kubeevents.ts's pure decisions, without an API server: which events are the same (and so fold
// into one series), the Event object written for a new one, its name and truncations, the LRU bound
// on remembered events, and when and what a series update writes.

import { describe, expect, test } from "bun:test";
import type { KubeApi } from "../../lib/kubeapi.ts";
import {
  dropExpired,
  EventRecorder,
  type EventTarget,
  eventBody,
  eventKey,
  eventName,
  eventNamespace,
  foldRepeat,
  regardingOf,
  remember,
  type SeriesEntry,
  seriesDelayMs,
  seriesPatch,
  truncate,
} from "../../lib/kubeevents.ts";
import { EVENTS_NAMESPACE } from "../../lib/wellknown.ts";

const T0 = Date.parse("2026-01-01T00:00:00Z");
const T0_MICRO = "2026-01-01T00:00:00.000000Z";
const node: EventTarget = { kind: "Node", name: "worker-a", uid: "uid-a" };

const entry = (name: string, lastMs = T0): SeriesEntry => ({
  name,
  namespace: "default",
  count: 1,
  firstMs: lastMs,
  lastMs,
  lastWriteMs: lastMs,
});

describe("truncate()", () => {
  test.each([
    ["", 5, ""],
    ["abcde", 5, "abcde"],
    ["abcdef", 5, "ab..."],
    ["abcdefghij", 8, "abcde..."],
  ])("truncate(%p, %d) → %p", (s, n, want) => {
    expect(truncate(s, n)).toBe(want);
  });

  test("truncate() counts UTF-8 bytes, as the API server does, and never cuts a character", () => {
    expect(truncate("ééé", 6)).toBe("ééé");
    expect(truncate("éééé", 7)).toBe("éé...");
    expect(truncate("a😀b", 5)).toBe("a...");
    const long = "ü".repeat(1024);
    const cut = truncate(long, 1024);
    expect(Buffer.byteLength(cut)).toBeLessThanOrEqual(1024);
    expect(cut).toBe(`${"ü".repeat(510)}...`);
    expect(truncate("ab😀cd", 7)).toBe("ab...");
  });

  test("truncate() keeps a result within the bound", () => {
    const long = "x".repeat(5000);
    expect(truncate(long, 1024)).toHaveLength(1024);
    expect(truncate(long, 1024).endsWith("...")).toBe(true);
  });
});

describe("eventNamespace() and regardingOf()", () => {
  test("eventNamespace(): the target's namespace, else the events namespace", () => {
    expect(eventNamespace(node)).toBe(EVENTS_NAMESPACE);
    expect(eventNamespace({ kind: "Service", name: "s", namespace: "apps" })).toBe("apps");
  });

  test("regardingOf() defaults apiVersion to v1 and leaves out unknown uid and namespace", () => {
    expect(regardingOf({ kind: "Node", name: "worker-a" })).toEqual({
      kind: "Node",
      name: "worker-a",
      apiVersion: "v1",
    });
  });

  test("regardingOf() carries uid, namespace and apiVersion when given", () => {
    const csr = {
      kind: "CertificateSigningRequest",
      name: "csr-1",
      uid: "u1",
      namespace: "ns",
      apiVersion: "certificates.k8s.io/v1",
    };
    expect(regardingOf(csr)).toEqual(csr);
  });
});

describe("eventKey()", () => {
  const base = eventKey(node, "Warning", "Reason", "Action", "note");

  test("eventKey() is the same for the same event", () => {
    expect(eventKey({ ...node }, "Warning", "Reason", "Action", "note")).toBe(base);
  });

  test.each([
    ["kind", () => eventKey({ ...node, kind: "Pod" }, "Warning", "Reason", "Action", "note")],
    ["name", () => eventKey({ ...node, name: "worker-b" }, "Warning", "Reason", "Action", "note")],
    ["uid", () => eventKey({ ...node, uid: "uid-b" }, "Warning", "Reason", "Action", "note")],
    ["namespace", () => eventKey({ ...node, namespace: "ns" }, "Warning", "Reason", "Action", "note")],
    ["type", () => eventKey(node, "Normal", "Reason", "Action", "note")],
    ["reason", () => eventKey(node, "Warning", "Other", "Action", "note")],
    ["action", () => eventKey(node, "Warning", "Reason", "Other", "note")],
    ["note", () => eventKey(node, "Warning", "Reason", "Action", "other")],
  ])("eventKey() differs when the %s does", (_field, other) => {
    expect(other()).not.toBe(base);
  });

  test("eventKey() does not confuse fields whose concatenations agree", () => {
    expect(eventKey(node, "Warning", "ab", "c", "note")).not.toBe(
      eventKey(node, "Warning", "a", "bc", "note"),
    );
  });

  test("eventKey() is short whatever the note's length: a remembered series costs the same", () => {
    const long = eventKey(node, "Warning", "Reason", "Action", "x".repeat(1024));
    expect(base.length).toBeLessThanOrEqual(13);
    expect(long.length).toBeLessThanOrEqual(13);
    expect(long).not.toBe(base);
  });

  test("eventKey(): a namespace spelled out equal to the default is the same event", () => {
    expect(eventKey({ ...node, namespace: EVENTS_NAMESPACE }, "Warning", "Reason", "Action", "note")).toBe(
      base,
    );
  });
});

describe("eventName()", () => {
  test.each([
    [0, "worker-a.19b76daa8000000"],
    [0.5, "worker-a.19b76daa8008000"],
    [0.99999, "worker-a.19b76daa800ffff"],
  ])("random %d → %p: the target, then the time and a 16-bit suffix in four hex digits", (r, want) => {
    expect(eventName("worker-a", T0, () => r)).toBe(want);
  });

  test("eventName() differs by time for the same target", () => {
    expect(eventName("n", T0, () => 0)).not.toBe(eventName("n", T0 + 1, () => 0));
  });
});

describe("eventBody()", () => {
  test("eventBody() writes an events.k8s.io/v1 Event about the target", () => {
    const reporter = { controller: "talos-ccm", instance: "ccm-a" };
    const facts = { target: node, type: "Warning" as const, reason: "R", action: "A", note: "n" };
    expect(eventBody("worker-a.1", T0, reporter, facts)).toEqual({
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: "worker-a.1", namespace: EVENTS_NAMESPACE },
      eventTime: T0_MICRO,
      reportingController: "talos-ccm",
      reportingInstance: "ccm-a",
      action: "A",
      reason: "R",
      note: "n",
      type: "Warning",
      regarding: { kind: "Node", name: "worker-a", uid: "uid-a", apiVersion: "v1" },
    });
  });

  test("eventBody() cuts the reporting instance to 128 characters and files the Event in the target's namespace", () => {
    const target = { kind: "Service", name: "s", namespace: "apps" };
    const body = eventBody(
      "s.1",
      T0,
      { controller: "c", instance: "i".repeat(200) },
      {
        target,
        type: "Normal",
        reason: "R",
        action: "A",
        note: "n",
      },
    );
    expect(body.reportingInstance).toBe(`${"i".repeat(125)}...`);
    expect(body.metadata.namespace).toBe("apps");
    expect(body.regarding.namespace).toBe("apps");
  });
});

describe("foldRepeat()", () => {
  const W = 600_000;

  test("foldRepeat() leaves an unknown event to a new Event", () => {
    const entries = new Map<string, SeriesEntry>();
    expect(foldRepeat(entries, "k", T0, W)).toBeUndefined();
    expect(entries.size).toBe(0);
  });

  test("foldRepeat() counts a repeat within the window and records when it was seen", () => {
    const entries = new Map([["k", entry("e1")]]);
    const folded = foldRepeat(entries, "k", T0 + W - 1, W);
    expect(folded).toMatchObject({ name: "e1", count: 2, firstMs: T0, lastMs: T0 + W - 1, lastWriteMs: T0 });
    expect(foldRepeat(entries, "k", T0 + W, W)?.count).toBe(3);
  });

  test("foldRepeat() leaves a repeat at or after the window to a new Event, unchanged", () => {
    const entries = new Map([["k", entry("e1")]]);
    expect(foldRepeat(entries, "k", T0 + W, W)).toBeUndefined();
    expect(entries.get("k")).toEqual(entry("e1"));
  });

  test("foldRepeat() makes the folded event the most recently used", () => {
    const entries = new Map([
      ["a", entry("ea")],
      ["b", entry("eb")],
    ]);
    foldRepeat(entries, "a", T0 + 1, W);
    expect([...entries.keys()]).toEqual(["b", "a"]);
  });
});

describe("remember()", () => {
  test("remember() keeps up to the bound and drops the least recently used beyond it", () => {
    const entries = new Map<string, SeriesEntry>();
    expect(remember(entries, "a", entry("ea"), 2)).toEqual([]);
    expect(remember(entries, "b", entry("eb"), 2)).toEqual([]);
    foldRepeat(entries, "a", T0 + 1, 600_000);
    const dropped = remember(entries, "c", entry("ec"), 2);
    expect(dropped.map((e) => e.name)).toEqual(["eb"]);
    expect([...entries.keys()]).toEqual(["a", "c"]);
  });

  test("remember() replaces an expired series under a known key as the most recently used, returning the old one", () => {
    const entries = new Map([
      ["a", entry("ea")],
      ["b", entry("eb")],
    ]);
    expect(remember(entries, "a", entry("ea2"), 2).map((e) => e.name)).toEqual(["ea"]);
    expect([...entries.entries()].map(([k, e]) => `${k}=${e.name}`)).toEqual(["b=eb", "a=ea2"]);
    // The next new key drops b, the least recently used, not the fresh a.
    expect(remember(entries, "c", entry("ec"), 2).map((e) => e.name)).toEqual(["eb"]);
  });

  test("remember() drops as many as it must to get back under the bound", () => {
    const entries = new Map([
      ["a", entry("ea")],
      ["b", entry("eb")],
      ["c", entry("ec")],
    ]);
    expect(remember(entries, "d", entry("ed"), 1).map((e) => e.name)).toEqual(["ea", "eb", "ec"]);
    expect([...entries.keys()]).toEqual(["d"]);
  });
});

describe("the bound and the window of remembered series", () => {
  test("remember() never holds more than the bound, not even while it inserts", () => {
    let most = 0;
    class Watched extends Map<string, SeriesEntry> {
      override set(k: string, v: SeriesEntry) {
        super.set(k, v);
        most = Math.max(most, this.size);
        return this;
      }
    }
    const entries = new Watched();
    for (let i = 0; i < 50; i++) remember(entries, `k${i}`, entry(`e${i}`), 8);
    expect(entries.size).toBe(8);
    expect(most).toBe(8);
  });

  test("dropExpired() drops the series last seen a window or more ago, from the least recently used", () => {
    const W = 600_000;
    const entries = new Map([
      ["a", entry("ea", T0)],
      ["b", entry("eb", T0 + 1)],
      ["c", entry("ec", T0 + 2)],
    ]);
    expect(dropExpired(entries, T0 + W + 1, W).map((e) => e.name)).toEqual(["ea", "eb"]);
    expect([...entries.keys()]).toEqual(["c"]);
    expect(dropExpired(entries, T0 + W + 1, W)).toEqual([]);
  });

  test("EventRecorder forgets a series once its window passed: a burst's Events are not kept for good", async () => {
    let now = T0;
    const created: string[] = [];
    const client = {
      async create(_path: string, body: { metadata: { name: string } }) {
        created.push(body.metadata.name);
      },
    } as unknown as KubeApi;
    const rec = new EventRecorder(client, { controller: "c", instance: "i", now: () => now });
    try {
      for (const name of ["worker-a", "worker-b", "worker-c"]) {
        await rec.record({ kind: "Node", name }, "Normal", "Synced", "InitializeNode", "Node synced");
        now += 1;
      }
      expect(created).toHaveLength(3);
      expect(rec.size).toBe(3);
      now = T0 + 600_000 + 1;
      rec.dropExpired();
      expect(rec.size).toBe(1);
      // The one left still folds a repeat into its series.
      await rec.record(
        { kind: "Node", name: "worker-c" },
        "Normal",
        "Synced",
        "InitializeNode",
        "Node synced",
      );
      expect(created).toHaveLength(3);
    } finally {
      rec.close();
    }
  });
});

describe("seriesDelayMs() and seriesPatch()", () => {
  test.each([
    [T0, 30_000],
    [T0 + 10_000, 20_000],
    [T0 + 30_000, 0],
    [T0 + 90_000, 0],
  ])("seriesDelayMs(): last written at T0, now %d → wait %d ms", (now, want) => {
    expect(seriesDelayMs(T0, 30_000, now)).toBe(want);
  });

  test("seriesPatch() writes the count and the last time seen, in microseconds", () => {
    expect(seriesPatch({ count: 7, lastMs: T0 + 1_500 })).toEqual({
      series: { count: 7, lastObservedTime: "2026-01-01T00:00:01.500000Z" },
    });
  });
});
