// lib/leader.ts's pure decisions, without an API server: the timings it accepts, the Lease it
// creates, renews, takes over and releases, when another replica's lease may be taken (on this
// replica's own clock), and when a leader has lost. tests/e2e exercises the elector against a cluster.

import { describe, expect, test } from "bun:test";
import {
  claimedLease,
  type Lease,
  leadershipLost,
  leaseClaim,
  leaseRenewed,
  mayAcquire,
  newLease,
  observeLease,
  releasedLease,
  renewTimeoutMs,
  retryDelayMs,
  validateTimings,
} from "../../lib/leader.ts";

const T0 = Date.parse("2026-01-01T00:00:00Z");
const T0_MICRO = "2026-01-01T00:00:00.000000Z";
const T1 = T0 + 12_345;
const T1_MICRO = "2026-01-01T00:00:12.345000Z";

describe("validateTimings()", () => {
  const ok = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

  test("validateTimings() accepts the defaults (15 s lease, 10 s deadline, 2 s retry)", () => {
    expect(() => validateTimings(ok)).not.toThrow();
  });

  test.each([
    ["lease equal to the deadline", { leaseDurationMs: 10_000 }, /lease-duration must be greater/],
    ["lease shorter than the deadline", { leaseDurationMs: 9_999 }, /lease-duration must be greater/],
    [
      "deadline equal to 1.2 retry periods",
      { renewDeadlineMs: 6_000, retryPeriodMs: 5_000 },
      /renew-deadline must be/,
    ],
    ["deadline under 1.2 retry periods", { retryPeriodMs: 9_000 }, /renew-deadline must be/],
    ["a retry period under 1 ms", { retryPeriodMs: 0.5 }, /retry-period must be positive/],
  ])("validateTimings() refuses %s", (_what, over, error) => {
    expect(() => validateTimings({ ...ok, ...over })).toThrow(error);
  });

  test("validateTimings() accepts a deadline just over 1.2 retry periods", () => {
    expect(() => validateTimings({ ...ok, retryPeriodMs: 8_000 })).not.toThrow();
  });
});

describe("retryDelayMs()", () => {
  test.each([
    [0, 2_000],
    [0.5, 3_200],
    [0.999, 4_397.6],
  ])("random %d → %d ms: the period plus up to 1.2 periods, as client-go's JitterFactor", (r, want) => {
    expect(retryDelayMs(2_000, () => r)).toBeCloseTo(want, 6);
  });
});

describe("leaseClaim()", () => {
  test("leaseClaim() names the holder, the duration in whole seconds and the renew time in microseconds", () => {
    expect(leaseClaim("ccm-a", 15_000, T1)).toEqual({
      holderIdentity: "ccm-a",
      leaseDurationSeconds: 15,
      renewTime: T1_MICRO,
    });
  });

  test.each([
    [1_499, 1],
    [1_500, 2],
    [400, 1],
    [0, 1],
  ])("leaseClaim() rounds %d ms to %d s, never under 1", (ms, want) => {
    expect(leaseClaim("ccm-a", ms, T0).leaseDurationSeconds).toBe(want);
  });
});

describe("newLease()", () => {
  test("newLease() is held by the claimant since now, with no transitions", () => {
    expect(newLease("kube-system", "ccm", leaseClaim("ccm-a", 15_000, T0), T0)).toEqual({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: "ccm", namespace: "kube-system" },
      spec: {
        holderIdentity: "ccm-a",
        leaseDurationSeconds: 15,
        renewTime: T0_MICRO,
        acquireTime: T0_MICRO,
        leaseTransitions: 0,
      },
    });
  });
});

describe("mayAcquire()", () => {
  const D = 15_000;
  test.each([
    ["a lease without a holder", "", T0, T0, true],
    ["our own lease, however fresh", "ccm-a", T0, T0, true],
    ["another's lease seen renewed just now", "ccm-b", T0, T0, false],
    ["another's lease 1 ms before it expires", "ccm-b", T0, T0 + D - 1, false],
    ["another's lease unrenewed for exactly the duration", "ccm-b", T0, T0 + D, true],
    ["another's lease long unrenewed", "ccm-b", T0, T0 + 10 * D, true],
  ])("mayAcquire(): %s → %p", (_what, holder, observedAt, now, want) => {
    expect(mayAcquire(holder, "ccm-a", observedAt, D, now)).toBe(want);
  });
});

describe("claimedLease()", () => {
  const held = (holder: string): Lease => ({
    metadata: { name: "ccm", namespace: "kube-system", resourceVersion: "7" },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: 15,
      acquireTime: T0_MICRO,
      renewTime: T0_MICRO,
      leaseTransitions: 3,
    },
  });

  test("claimedLease() renews our lease: acquireTime and transitions kept, resourceVersion kept as the guard", () => {
    expect(claimedLease(held("ccm-a"), leaseClaim("ccm-a", 20_000, T1), T1)).toEqual({
      metadata: { name: "ccm", namespace: "kube-system", resourceVersion: "7" },
      spec: {
        holderIdentity: "ccm-a",
        leaseDurationSeconds: 20,
        acquireTime: T0_MICRO,
        renewTime: T1_MICRO,
        leaseTransitions: 3,
      },
    });
  });

  test("claimedLease() takes another's lease: acquireTime restarts now, one more transition", () => {
    expect(claimedLease(held("ccm-b"), leaseClaim("ccm-a", 15_000, T1), T1).spec).toEqual({
      holderIdentity: "ccm-a",
      leaseDurationSeconds: 15,
      acquireTime: T1_MICRO,
      renewTime: T1_MICRO,
      leaseTransitions: 4,
    });
  });

  test("claimedLease() takes a released lease (no holder) as a transition", () => {
    expect(claimedLease(held(""), leaseClaim("ccm-a", 15_000, T1), T1).spec).toMatchObject({
      acquireTime: T1_MICRO,
      leaseTransitions: 4,
    });
  });

  test("claimedLease() fills what a bare lease lacks", () => {
    expect(claimedLease({ metadata: { name: "ccm" } }, leaseClaim("ccm-a", 15_000, T1), T1).spec).toEqual({
      holderIdentity: "ccm-a",
      leaseDurationSeconds: 15,
      acquireTime: T1_MICRO,
      renewTime: T1_MICRO,
      leaseTransitions: 1,
    });
    const ours = { spec: { holderIdentity: "ccm-a" } };
    expect(claimedLease(ours, leaseClaim("ccm-a", 15_000, T1), T1).spec).toMatchObject({
      acquireTime: T1_MICRO,
      leaseTransitions: 0,
    });
  });
});

describe("releasedLease()", () => {
  test("releasedLease() empties the holder and shortens the lease to 1 s, keeping the rest", () => {
    const lease: Lease = {
      metadata: { name: "ccm", resourceVersion: "9" },
      spec: {
        holderIdentity: "ccm-a",
        leaseDurationSeconds: 15,
        acquireTime: T0_MICRO,
        renewTime: T0_MICRO,
        leaseTransitions: 2,
      },
    };
    expect(releasedLease(lease, T1)).toEqual({
      metadata: { name: "ccm", resourceVersion: "9" },
      spec: {
        holderIdentity: "",
        leaseDurationSeconds: 1,
        acquireTime: T1_MICRO,
        renewTime: T1_MICRO,
        leaseTransitions: 2,
      },
    });
    expect(lease.spec?.holderIdentity).toBe("ccm-a");
  });
});

describe("observeLease() and leaseRenewed()", () => {
  const seen = observeLease({
    metadata: { resourceVersion: "5" },
    spec: { holderIdentity: "ccm-b", renewTime: T0_MICRO },
  });

  test("observeLease() keeps holder, renewTime and resourceVersion, empty when missing", () => {
    expect(seen).toEqual({ holder: "ccm-b", renewTime: T0_MICRO, resourceVersion: "5" });
    expect(observeLease({})).toEqual({ holder: "", renewTime: "", resourceVersion: "" });
  });

  test("leaseRenewed(): a first sight, a new renewTime or a new holder restarts the expiry count", () => {
    expect(leaseRenewed(undefined, seen)).toBe(true);
    expect(leaseRenewed(seen, { ...seen, renewTime: T1_MICRO })).toBe(true);
    expect(leaseRenewed(seen, { ...seen, holder: "ccm-c" })).toBe(true);
  });

  test("leaseRenewed(): the same holder and renewTime do not, even under a new resourceVersion", () => {
    expect(leaseRenewed(seen, { ...seen })).toBe(false);
    expect(leaseRenewed(seen, { ...seen, resourceVersion: "6" })).toBe(false);
  });
});

describe("renewTimeoutMs() and leadershipLost()", () => {
  test("renewTimeoutMs() is what is left of the deadline since the last renewal", () => {
    expect(renewTimeoutMs(10_000, T0, T0)).toBe(10_000);
    expect(renewTimeoutMs(10_000, T0, T0 + 2_000)).toBe(8_000);
    expect(renewTimeoutMs(10_000, T0, T0 + 12_000)).toBe(-2_000);
  });

  test.each([
    ["within the deadline, still ours", T0 + 9_999, "ccm-a", false],
    ["within the deadline, never read", T0 + 9_999, undefined, false],
    ["at the deadline", T0 + 10_000, "ccm-a", true],
    ["past the deadline, never read", T0 + 20_000, undefined, true],
    ["within the deadline, but another holds it", T0 + 1, "ccm-b", true],
    ["within the deadline, but it was released", T0 + 1, "", true],
  ])("leadershipLost(): %s → %p", (_what, now, holder, want) => {
    expect(leadershipLost(now, T0, 10_000, holder, "ccm-a")).toBe(want);
  });
});
