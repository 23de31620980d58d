// When the bench counts a CCM as leading (pure): by its leader-election Lease, the same way for any
// binary (ours or the Go CCM), never by a log line. The bench reads the Lease once the previous CCM
// has exited (the baseline: no holder, a released lease, or a dead process' stale claim), starts the
// new CCM and feeds each reading of the Lease to `LeaseReadiness.observe`.

/** The part of a coordination.k8s.io/v1 Lease's spec the decision reads. */
export interface LeaseSpecView {
  holderIdentity?: string;
  /** RFC 3339 with microseconds; every acquisition and renewal writes a new one. */
  renewTime?: string;
}

/**
 * Whether a CCM started after `baseline` was read holds the Lease and has renewed it: a holder and
 * renew time other than the baseline's (the new process acquired it: nothing else runs), then the
 * same holder with a new renew time (it renews, so it is leading, not stuck after one write).
 * A reading with no holder (a released lease) or no Lease starts over.
 */
export class LeaseReadiness {
  readonly #baseline: LeaseSpecView | undefined;
  #acquired: { holder: string; renewTime: string } | undefined;

  constructor(baseline: LeaseSpecView | undefined) {
    this.#baseline = baseline;
  }

  /** The holder that acquired the Lease since the baseline, once one has. */
  get holder(): string | undefined {
    return this.#acquired?.holder;
  }

  /** Takes one reading of the Lease (undefined: it does not exist); true once the holder renewed. */
  observe(spec: LeaseSpecView | undefined): boolean {
    const holder = spec?.holderIdentity ?? "";
    const renewTime = spec?.renewTime ?? "";
    if (holder === "" || renewTime === "") {
      this.#acquired = undefined;
      return false;
    }
    const b = this.#baseline;
    if (b && holder === (b.holderIdentity ?? "") && renewTime === (b.renewTime ?? "")) return false;
    const a = this.#acquired;
    if (a === undefined || a.holder !== holder) {
      this.#acquired = { holder, renewTime };
      return false;
    }
    return renewTime !== a.renewTime;
  }
}
