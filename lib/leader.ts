// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics: a lease is taken
// over only after it has gone unrenewed for its duration as measured on this replica's own clock,
// every write is an optimistic update guarded by resourceVersion, a leader that cannot renew within
// the renew deadline has lost, and a clean shutdown releases the lease so a standby takes over at once.

import { isConflict, isNotFound, type KubeClient, microTime } from "./kube.ts";
import { logger } from "./log.ts";
import { registry as defaultRegistry, type Registry } from "./metrics.ts";

const log = logger("leader-election");

/** A Lease as it travels on the wire (times are RFC 3339 strings with microseconds). */
interface Lease {
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

const jitter = (ms: number) => ms * (1 + Math.random() * 0.2);

/** Checks leader-election timings the way client-go's NewLeaderElector does. */
function validateTimings(
  o: Pick<LeaderElectionOptions, "leaseDurationMs" | "renewDeadlineMs" | "retryPeriodMs">,
) {
  if (o.leaseDurationMs <= o.renewDeadlineMs) {
    throw new Error(
      "Cannot elect a leader: --leader-elect-lease-duration must be greater than --leader-elect-renew-deadline",
    );
  }
  if (o.renewDeadlineMs <= o.retryPeriodMs * 1.2) {
    throw new Error(
      "Cannot elect a leader: --leader-elect-renew-deadline must be greater than 1.2 × --leader-elect-retry-period",
    );
  }
  if (o.retryPeriodMs < 1)
    throw new Error("Cannot elect a leader: --leader-elect-retry-period must be positive");
}

/** Runs the election for one replica. */
export class LeaderElector {
  readonly #client: KubeClient;
  readonly #o: LeaderElectionOptions;
  readonly #now: () => number;
  readonly #status;
  #observed?: { holder: string; renewTime: string; resourceVersion: string };
  #observedAt = 0;
  #lease?: Lease;
  #leading = false;
  #stopped = false;
  #leadership?: AbortController;
  #loop?: Promise<void>;
  #wake?: () => void;
  #cb?: LeaderCallbacks;

  constructor(client: KubeClient, opts: LeaderElectionOptions) {
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
      await this.#sleep(jitter(this.#o.retryPeriodMs));
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
      const ok = await this.#tryAcquireOrRenew(this.#o.renewDeadlineMs - (started - lastRenew)).catch(
        (err) => {
          log.v(2).info("Cannot renew the lease", { err: (err as Error).message });
          return false;
        },
      );
      if (ok) {
        // The renewal holds from when it was sent (its renewTime), not from when it was answered.
        lastRenew = started;
        continue;
      }
      if (
        this.#now() - lastRenew >= this.#o.renewDeadlineMs ||
        (this.#observed && this.#observed.holder !== this.#o.identity)
      ) {
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
    const spec = {
      holderIdentity: this.#o.identity,
      leaseDurationSeconds: Math.max(1, Math.round(this.#o.leaseDurationMs / 1000)),
      renewTime: microTime(now),
    };
    let lease: Lease;
    try {
      lease = await this.#client.get<Lease>(`${this.#path}/${this.#o.name}`, { signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        this.#lease = await this.#client.create<Lease>(
          this.#path,
          {
            apiVersion: "coordination.k8s.io/v1",
            kind: "Lease",
            metadata: { name: this.#o.name, namespace: this.#o.namespace },
            spec: { ...spec, acquireTime: microTime(now), leaseTransitions: 0 },
          },
          { signal },
        );
      } catch (e) {
        if (isConflict(e)) return false;
        throw e;
      }
      this.#observe(this.#lease, now);
      return true;
    }
    this.#observe(lease, now);
    const holder = lease.spec?.holderIdentity ?? "";
    const iHold = holder === this.#o.identity;
    if (holder && !iHold && this.#observedAt + this.#o.leaseDurationMs > now) return false;
    const next: Lease = {
      ...lease,
      spec: {
        ...lease.spec,
        ...spec,
        acquireTime: iHold ? (lease.spec?.acquireTime ?? microTime(now)) : microTime(now),
        leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + (iHold ? 0 : 1),
      },
    };
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
    const rec = {
      holder: lease.spec?.holderIdentity ?? "",
      renewTime: String(lease.spec?.renewTime ?? ""),
      resourceVersion: lease.metadata?.resourceVersion ?? "",
    };
    const o = this.#observed;
    if (!o || o.holder !== rec.holder || o.renewTime !== rec.renewTime) this.#observedAt = now;
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
    const now = this.#now();
    const released: Lease = {
      ...this.#lease,
      spec: {
        ...this.#lease.spec,
        holderIdentity: "",
        leaseDurationSeconds: 1,
        renewTime: microTime(now),
        acquireTime: microTime(now),
      },
    };
    const timeout = AbortSignal.timeout(timeoutMs);
    await this.#client
      .update(`${this.#path}/${this.#o.name}`, released, { signal: timeout })
      .then(() => log.info("Released lease", { lease: `${this.#o.namespace}/${this.#o.name}` }))
      .catch((err) => log.error("Cannot release lease", err));
  }
}
