// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics: a lease is taken
// over only after it has gone unrenewed for its duration as measured on this replica's own clock,
// every write is an optimistic update guarded by resourceVersion, a leader that cannot renew within
// the renew deadline has lost, and a clean shutdown releases the lease so a standby takes over at once.

import { isConflict, isNotFound, type KubeApi, microTime } from "./kubeapi.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { registry as defaultRegistry } from "./metricsprocess.ts";

const log = logger("leader-election");

/** A Lease as it travels on the wire (times are RFC 3339 strings with microseconds). */
export interface Lease {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** Options of {@link LeaderElector}: the Lease, this replica's identity and client-go's timings. */
export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  registry?: Registry;
  now?: () => number;
}

/** What {@link LeaderElector.run} tells its caller. */
export interface LeaderCallbacks {
  /** Called once leadership is acquired; `signal` aborts when it is lost or released. */
  onStartedLeading(signal: AbortSignal): void;
  /** Called when leadership ends (lost, or released by {@link LeaderElector.release}). */
  onStoppedLeading(reason: "lost" | "released"): void;
  /** Called when another replica is seen holding the lease. */
  onNewLeader?(identity: string): void;
}

// Pure decisions (no I/O, no clock of their own): the elector below reads the Lease, asks these,
// and writes what they build.

/** client-go's leaderelection.JitterFactor: acquire retries wait up to this many more retry periods. */
export const JITTER_FACTOR = 1.2;

/**
 * The wait before the next acquire attempt, as client-go's `wait.JitterUntil(…, RetryPeriod,
 * JitterFactor, …)`: the retry period plus up to 1.2 more, so that standbys do not ask in step.
 * `random` is in [0, 1).
 */
export function retryDelayMs(retryPeriodMs: number, random: () => number = Math.random): number {
  return retryPeriodMs * (1 + random() * JITTER_FACTOR);
}

/**
 * Checks leader-election timings the way client-go's NewLeaderElector does: the lease outlasts the
 * renew deadline, which outlasts 1.2 retry periods, which are positive.
 * @throws {Error} naming the flag that is out of bounds.
 */
export function validateTimings(
  o: Pick<LeaderElectionOptions, "leaseDurationMs" | "renewDeadlineMs" | "retryPeriodMs">,
): void {
  if (o.leaseDurationMs <= o.renewDeadlineMs) {
    throw new Error(
      "Cannot elect a leader: --leader-elect-lease-duration must be greater than --leader-elect-renew-deadline",
    );
  }
  if (o.renewDeadlineMs <= o.retryPeriodMs * JITTER_FACTOR) {
    throw new Error(
      "Cannot elect a leader: --leader-elect-renew-deadline must be greater than 1.2 × --leader-elect-retry-period",
    );
  }
  if (o.retryPeriodMs < 1)
    throw new Error("Cannot elect a leader: --leader-elect-retry-period must be positive");
}

/** The spec fields every acquire or renew attempt writes. */
export interface LeaseClaim {
  holderIdentity: string;
  leaseDurationSeconds: number;
  renewTime: string;
}

/** The claim of `identity` at `now` (ms since the epoch): the duration in whole seconds, at least 1. */
export function leaseClaim(identity: string, leaseDurationMs: number, now: number): LeaseClaim {
  return {
    holderIdentity: identity,
    leaseDurationSeconds: Math.max(1, Math.round(leaseDurationMs / 1000)),
    renewTime: microTime(now),
  };
}

/** The Lease created when none exists: held by the claimant since `now`, no transitions yet. */
export function newLease(namespace: string, name: string, claim: LeaseClaim, now: number): Lease {
  return {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: { name, namespace },
    spec: { ...claim, acquireTime: microTime(now), leaseTransitions: 0 },
  };
}

/**
 * Whether `identity` may write the lease now: it has no holder, is already ours, or its holder has
 * not renewed it for the lease duration since this replica saw it change (`observedAt`, on this
 * replica's own clock, never the renewTime written by another machine's clock).
 */
export function mayAcquire(
  holder: string,
  identity: string,
  observedAt: number,
  leaseDurationMs: number,
  now: number,
): boolean {
  return !holder || holder === identity || observedAt + leaseDurationMs <= now;
}

/**
 * The existing `lease` with the claim written over it: a renewal keeps its acquireTime and
 * transition count; a takeover starts acquireTime at `now` and counts one more transition.
 */
export function claimedLease(lease: Lease, claim: LeaseClaim, now: number): Lease {
  const renewing = lease.spec?.holderIdentity === claim.holderIdentity;
  return {
    ...lease,
    spec: {
      ...lease.spec,
      ...claim,
      acquireTime: renewing ? (lease.spec?.acquireTime ?? microTime(now)) : microTime(now),
      leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + (renewing ? 0 : 1),
    },
  };
}

/** The `lease` a leader gives up at `now`: no holder and a 1 s duration, so a standby takes over at once. */
export function releasedLease(lease: Lease, now: number): Lease {
  return {
    ...lease,
    spec: {
      ...lease.spec,
      holderIdentity: "",
      leaseDurationSeconds: 1,
      renewTime: microTime(now),
      acquireTime: microTime(now),
    },
  };
}

/** What a replica remembers of the Lease it last read or wrote. */
export interface LeaseObservation {
  holder: string;
  renewTime: string;
  resourceVersion: string;
}

/** The observation of `lease` (missing fields read as empty). */
export function observeLease(lease: Lease): LeaseObservation {
  return {
    holder: lease.spec?.holderIdentity ?? "",
    renewTime: String(lease.spec?.renewTime ?? ""),
    resourceVersion: lease.metadata?.resourceVersion ?? "",
  };
}

/**
 * Whether `next` shows the lease renewed or changed hands since `prev` (or first seen): then its
 * expiry is counted again from this replica's now. A new resourceVersion alone does not count.
 */
export function leaseRenewed(prev: LeaseObservation | undefined, next: LeaseObservation): boolean {
  return !prev || prev.holder !== next.holder || prev.renewTime !== next.renewTime;
}

/**
 * How long a renewal started at `started` may take: what is left of the renew deadline since the
 * last successful renewal (`lastRenew`), so that a hanging attempt ends before a standby may take over.
 */
export function renewTimeoutMs(renewDeadlineMs: number, lastRenew: number, started: number): number {
  return renewDeadlineMs - (started - lastRenew);
}

/**
 * Whether a leader whose renewal just failed has lost: the renew deadline has passed since its
 * last successful renewal, or the lease was last seen held by someone else (`observedHolder`,
 * undefined when it was never read).
 */
export function leadershipLost(
  now: number,
  lastRenew: number,
  renewDeadlineMs: number,
  observedHolder: string | undefined,
  identity: string,
): boolean {
  return now - lastRenew >= renewDeadlineMs || (observedHolder !== undefined && observedHolder !== identity);
}

/** Runs the election for one replica. */
export class LeaderElector {
  readonly #client: KubeApi;
  readonly #o: LeaderElectionOptions;
  readonly #now: () => number;
  readonly #status;
  #observed?: LeaseObservation;
  #observedAt = 0;
  #lease?: Lease;
  #leading = false;
  #stopped = false;
  #leadership?: AbortController;
  #loop?: Promise<void>;
  #wake?: () => void;
  #cb?: LeaderCallbacks;

  constructor(client: KubeApi, opts: LeaderElectionOptions) {
    validateTimings(opts);
    this.#client = client;
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#status = (opts.registry ?? defaultRegistry).gauge(
      "leader_election_master_status",
      "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
      ["name"],
    );
    this.#status.set({ name: opts.name }, 0);
  }

  get #path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.#o.namespace}/leases`;
  }

  /** Starts campaigning in the background. */
  run(cb: LeaderCallbacks): void {
    this.#cb = cb;
    this.#loop ??= this.#run(cb);
  }

  async #sleep(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
    this.#wake = undefined as never;
  }

  async #run(cb: LeaderCallbacks): Promise<void> {
    let lastHolder = "";
    let acquired = 0;
    while (!this.#stopped) {
      acquired = this.#now();
      const ok = await this.#tryAcquireOrRenew(this.#o.renewDeadlineMs).catch((err) => {
        log.v(2).info("Cannot acquire the lease yet", { err: (err as Error).message });
        return false;
      });
      const holder = this.#observed?.holder ?? "";
      if (holder && holder !== lastHolder && holder !== this.#o.identity) cb.onNewLeader?.(holder);
      lastHolder = holder;
      if (ok) break;
      await this.#sleep(retryDelayMs(this.#o.retryPeriodMs));
    }
    if (this.#stopped) return;
    this.#leading = true;
    this.#status.set({ name: this.#o.name }, 1);
    log.info("Successfully acquired lease", {
      lease: `${this.#o.namespace}/${this.#o.name}`,
      identity: this.#o.identity,
    });
    this.#leadership = new AbortController();
    cb.onStartedLeading(this.#leadership.signal);
    let lastRenew = acquired;
    while (!this.#stopped) {
      await this.#sleep(this.#o.retryPeriodMs);
      if (this.#stopped) break;
      // As client-go: a renewal must succeed within the renew deadline, so an attempt that hangs
      // (a dead connection, a stalled API server) is abandoned in time to stop leading before a
      // standby may take over.
      const started = this.#now();
      const timeoutMs = renewTimeoutMs(this.#o.renewDeadlineMs, lastRenew, started);
      const ok = await this.#tryAcquireOrRenew(timeoutMs).catch((err) => {
        log.v(2).info("Cannot renew the lease", { err: (err as Error).message });
        return false;
      });
      if (ok) {
        // The renewal holds from when it was sent (its renewTime), not from when it was answered.
        lastRenew = started;
        continue;
      }
      const { renewDeadlineMs, identity } = this.#o;
      if (leadershipLost(this.#now(), lastRenew, renewDeadlineMs, this.#observed?.holder, identity)) {
        this.#leading = false;
        this.#status.set({ name: this.#o.name }, 0);
        log.error("Leader election lost", undefined, { lease: `${this.#o.namespace}/${this.#o.name}` });
        this.#leadership.abort();
        cb.onStoppedLeading("lost");
        return;
      }
    }
  }

  /** One acquire or renew attempt, abandoned (as a failure) after `timeoutMs`. */
  async #tryAcquireOrRenew(timeoutMs: number): Promise<boolean> {
    const signal = AbortSignal.timeout(Math.max(1, timeoutMs));
    const now = this.#now();
    const claim = leaseClaim(this.#o.identity, this.#o.leaseDurationMs, now);
    let lease: Lease;
    try {
      lease = await this.#client.get<Lease>(`${this.#path}/${this.#o.name}`, { signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        const created = newLease(this.#o.namespace, this.#o.name, claim, now);
        this.#lease = await this.#client.create<Lease>(this.#path, created, { signal });
      } catch (e) {
        if (isConflict(e)) return false;
        throw e;
      }
      this.#observe(this.#lease, now);
      return true;
    }
    this.#observe(lease, now);
    const holder = lease.spec?.holderIdentity ?? "";
    if (!mayAcquire(holder, this.#o.identity, this.#observedAt, this.#o.leaseDurationMs, now)) return false;
    const next = claimedLease(lease, claim, now);
    try {
      this.#lease = await this.#client.update<Lease>(`${this.#path}/${this.#o.name}`, next, { signal });
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
    this.#observe(this.#lease, now);
    return true;
  }

  #observe(lease: Lease, now: number): void {
    const rec = observeLease(lease);
    if (leaseRenewed(this.#observed, rec)) this.#observedAt = now;
    this.#observed = rec;
  }

  /**
   * Stops campaigning; a leader gives the lease up (empty holder, 1 s duration) so another replica
   * can take over immediately. Bounded by `timeoutMs`.
   */
  async release(timeoutMs = 2000): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    const wasLeading = this.#leading;
    this.#leading = false;
    this.#status.set({ name: this.#o.name }, 0);
    this.#leadership?.abort();
    if (wasLeading) this.#cb?.onStoppedLeading("released");
    if (!wasLeading || !this.#lease) return;
    const released = releasedLease(this.#lease, this.#now());
    const timeout = AbortSignal.timeout(timeoutMs);
    await this.#client
      .update(`${this.#path}/${this.#o.name}`, released, { signal: timeout })
      .then(() => log.info("Released lease", { lease: `${this.#o.namespace}/${this.#o.name}` }))
      .catch((err) => log.error("Cannot release lease", err));
  }
}
