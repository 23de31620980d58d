import { describe, expect, test } from "bun:test";
import { Semaphore } from "../../lib/semaphore.ts";
import {
  afterFailedAttempt,
  attemptCallOptions,
  clientLimits,
  countsAsFailure,
  endpointSlot,
  LIST_MESSAGE_OVERHEAD,
  listBytesAfter,
  listTooLarge,
  MAX_LIST_BYTES,
  pickEndpoint,
  sameConnection,
  tryNextIP,
} from "../../lib/taloscallpolicy.ts";
import { GrpcStatus, TalosError, TalosNotFoundError, TalosPermissionError } from "../../lib/taloserrors.ts";

const unavailable = new TalosError("unavailable", "x", { retryable: true });
const deadline = new TalosError("deadline", "x", { retryable: true });
const denied = new TalosPermissionError("x");

describe("clientLimits()", () => {
  test("defaults, and counts rounded down", () => {
    expect(clientLimits({})).toEqual({
      maxInFlight: 64,
      callTimeoutMs: 10_000,
      attempts: 5,
      configPollMs: 60_000,
    });
    expect(clientLimits({ maxInFlight: 2.9, attempts: 1.5, callTimeoutMs: 2.5 })).toMatchObject({
      maxInFlight: 2,
      attempts: 1,
      callTimeoutMs: 2.5,
    });
  });
  test.each([
    ["maxInFlight", 0],
    ["callTimeoutMs", -1],
    ["attempts", Number.NaN],
    ["configPollMs", Number.POSITIVE_INFINITY],
  ])("%s = %p is refused", (name, v) => {
    expect(() => clientLimits({ [name]: v })).toThrow(`TalosClient: ${name} must be positive, got ${v}`);
  });
});

describe("pickEndpoint()", () => {
  test.each([
    [[false, false, false], 0, 0],
    [[false, false, false], 4, 1],
    [[true, false, false], 3, 1],
    [[false, true, true], 1, 0],
    [[true, true, true], 5, 2],
    [[true], 7, 0],
  ])("failing %p from %p → %p", (failing, start, want) => {
    expect(pickEndpoint(failing, start)).toBe(want);
  });
});

describe("endpointSlot()", () => {
  test("one node always starts on the same endpoint", () => {
    for (const node of ["10.0.0.5", "fd00::5", "172.31.255.254"])
      expect(endpointSlot(node)).toBe(endpointSlot(String(node)));
    expect(endpointSlot("10.0.0.5")).toBeGreaterThanOrEqual(0);
    expect(Number.isInteger(endpointSlot("10.0.0.5"))).toBe(true);
  });

  test.each([2, 3, 5])("1,000 nodes spread over %p endpoints within 15%% of an even share", (n) => {
    const share = new Array<number>(n).fill(0);
    for (let i = 0; i < 1_000; i++) {
      const at = pickEndpoint(new Array<boolean>(n).fill(false), endpointSlot(`10.${i >> 8}.${i & 255}.7`));
      share[at] = (share[at] ?? 0) + 1;
    }
    for (const got of share) expect(Math.abs(got - 1_000 / n)).toBeLessThanOrEqual((0.15 * 1_000) / n);
    const v6 = new Array<number>(n).fill(0);
    for (let i = 0; i < 1_000; i++) {
      const at = endpointSlot(`fd00::${i.toString(16)}`) % n;
      v6[at] = (v6[at] ?? 0) + 1;
    }
    for (const got of v6) expect(Math.abs(got - 1_000 / n)).toBeLessThanOrEqual((0.15 * 1_000) / n);
  });

  test("a node whose endpoint fails moves to the next one, and back when it recovers", () => {
    const slot = endpointSlot("10.0.0.5");
    const own = slot % 3;
    const failing = [false, false, false];
    failing[own] = true;
    expect(pickEndpoint(failing, slot)).toBe((own + 1) % 3);
    expect(pickEndpoint([false, false, false], slot)).toBe(own);
  });
});

describe("afterFailedAttempt()", () => {
  test("a retryable error is retried while attempts remain, Unavailable checks the talosconfig", () => {
    expect(afterFailedAttempt(unavailable, 0, 5)).toEqual({
      retry: true,
      backoffRound: 0,
      checkConfig: true,
    });
    expect(afterFailedAttempt(deadline, 3, 5)).toEqual({ retry: true, backoffRound: 3, checkConfig: false });
  });
  test("the last attempt and non-retryable errors end the call", () => {
    expect(afterFailedAttempt(unavailable, 4, 5)).toEqual({ retry: false });
    expect(afterFailedAttempt(unavailable, 0, 1)).toEqual({ retry: false });
    expect(afterFailedAttempt(denied, 0, 5)).toEqual({ retry: false });
  });
});

describe("tryNextIP() and countsAsFailure()", () => {
  test("only retryable Talos errors move on to the next IP", () => {
    expect([unavailable, deadline, denied, new Error("x"), "x"].map(tryNextIP)).toEqual([
      true,
      true,
      false,
      false,
      false,
    ]);
  });
  test("a missing SystemInformation is an answer, any other NotFound a failure", () => {
    const nf = new TalosNotFoundError("x");
    expect(countsAsFailure("systeminformation", nf)).toBe(false);
    expect(countsAsFailure("systeminformation", unavailable)).toBe(true);
    expect(countsAsFailure("platformmetadata", nf)).toBe(true);
  });
});

describe("the List budget", () => {
  test("each message costs its bytes and the overhead; the error is RESOURCE_EXHAUSTED", () => {
    expect(listBytesAfter(0, 100)).toBe(100 + LIST_MESSAGE_OVERHEAD);
    let total = 0;
    let n = 0;
    while (total <= MAX_LIST_BYTES) {
      total = listBytesAfter(total, 0);
      n++;
    }
    expect(n).toBe(MAX_LIST_BYTES / LIST_MESSAGE_OVERHEAD + 1);
    const err = listTooLarge(3);
    expect(err.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(err.details).toContain("(3 messages, 128 bytes counted for each)");
  });
});

describe("sameConnection()", () => {
  const base = { crt: "c", key: "k", ca: "a", endpoints: [{ host: "10.0.0.1", port: 50000 }] };
  test.each([
    ["identical", base, true],
    ["other cert", { ...base, crt: "d" }, false],
    ["other key", { ...base, key: "j" }, false],
    ["no CA", { crt: "c", key: "k", endpoints: base.endpoints }, false],
    ["other port", { ...base, endpoints: [{ host: "10.0.0.1", port: 50001 }] }, false],
    [
      "one more endpoint",
      { ...base, endpoints: [...base.endpoints, { host: "10.0.0.2", port: 50000 }] },
      false,
    ],
  ])("%s → %p", (_name, other, want) => {
    expect(sameConnection(other, base)).toBe(want);
    expect(sameConnection(base, other)).toBe(want);
  });
  test("endpoint order counts", () => {
    const a = {
      ...base,
      endpoints: [base.endpoints[0] as { host: string; port: number }, { host: "h", port: 1 }],
    };
    expect(sameConnection(a, { ...a, endpoints: [...a.endpoints].reverse() })).toBe(false);
  });
});

test("attemptCallOptions() routes by the node header and passes deadline and signal", () => {
  expect(attemptCallOptions(undefined, { timeoutMs: 5, signal: undefined })).toEqual({ timeoutMs: 5 });
  const signal = new AbortController().signal;
  expect(attemptCallOptions("fd00::5", { timeoutMs: 5, signal })).toEqual({
    metadata: { node: "fd00::5" },
    timeoutMs: 5,
    signal,
  });
});

describe("Semaphore", () => {
  test("grants in order of arrival, releases once, fails waiters on failAll and on abort", async () => {
    const sem = new Semaphore(1, () => new Error("canceled"));
    const release = await sem.acquire();
    const order: string[] = [];
    const second = sem.acquire().then((r) => {
      order.push("second");
      return r;
    });
    const ac = new AbortController();
    const aborted = sem.acquire(ac.signal).catch((e: Error) => order.push(`aborted: ${e.message}`));
    const third = sem.acquire().then((r) => {
      order.push("third");
      return r;
    });
    ac.abort();
    await aborted;
    release();
    release(); // idempotent: frees one slot, not two
    const r2 = await second;
    expect(order).toEqual(["aborted: canceled", "second"]);
    r2();
    (await third)();
    expect(order).toEqual(["aborted: canceled", "second", "third"]);
    const holder = await sem.acquire();
    const waiting = sem.acquire().catch((e: Error) => e.message);
    sem.failAll(new Error("closed"));
    expect(await waiting).toBe("closed");
    holder();
    expect(await sem.acquire(AbortSignal.abort()).catch((e: Error) => e.message)).toBe("canceled");
  });
});
