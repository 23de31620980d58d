// Which way a call about a machine takes, pure (time passed in): straight to the machine's own
// apid at <node IP>:50000 ("direct"), or through a talosconfig endpoint's apid with a `node`
// header ("proxy", the only way the Go CCM knows). Direct costs the control plane's apid nothing
// per machine (through it, each machine costs apid a backend connection and each watch a proxied
// stream: ~100 KiB per machine at 1,000), and one machine's stream shares no connection, and so no
// flow-control window, with another's. The proxy stays the fallback: a machine whose direct path
// fails (refused, unreachable, a handshake that fails: a firewall in between, a certificate without
// the IP) is asked through the proxy for a while (1 min, doubling per failure to 30 min, reset by a
// direct answer), and when 8 machines in a row fail directly with no direct answer between and no
// other machine connected directly at the time, every machine is (the whole path is closed to the
// CCM: a NetworkPolicy, a firewall), for the same doubling window. A failure while another machine
// is connected is that machine's own: a kubelet reporting one unreachable address after another
// sends its own machine through the proxy, never the others.

/** `TALOS_MACHINE_ACCESS`: try each machine directly first (`auto`, the default), or never (`proxy`). */
export type MachineAccess = "auto" | "proxy";

/** The way one call takes. */
export type Route = "direct" | "proxy";

/** The values `TALOS_MACHINE_ACCESS` takes. */
export const MACHINE_ACCESS_VALUES: readonly MachineAccess[] = ["auto", "proxy"];

/** The first proxy window after a direct failure. */
export const FIRST_WINDOW_MS = 60_000;
/** The longest proxy window. */
export const MAX_WINDOW_MS = 30 * 60_000;
/** Distinct machines failing directly in a row, with no direct answer between, that close the path for all. */
export const MACHINES_TO_CLOSE = 8;
/** Machines remembered as failing; beyond, the oldest are forgotten (each then tries directly again). */
export const MAX_FAILING = 8_192;

/**
 * Parses `TALOS_MACHINE_ACCESS` (unset or empty: `auto`).
 * @throws {Error} naming the variable and the values it takes.
 */
export function parseMachineAccess(value: string | undefined): MachineAccess {
  const v = (value ?? "").trim();
  if (v === "") return "auto";
  if ((MACHINE_ACCESS_VALUES as readonly string[]).includes(v)) return v as MachineAccess;
  throw new Error(`TALOS_MACHINE_ACCESS=${JSON.stringify(value)}: expected auto or proxy`);
}

/** The proxy window after `failures` direct failures in a row (1, 2, 4 … minutes, at most 30). */
export function windowAfter(failures: number): number {
  return Math.min(MAX_WINDOW_MS, FIRST_WINDOW_MS * 2 ** Math.min(Math.max(failures - 1, 0), 16));
}

/** A machine whose direct path failed: how often in a row, and until when the proxy is used. */
interface Failing {
  failures: number;
  until: number;
}

/** What a direct failure changed. */
export interface DirectFailure {
  /** How long this machine is asked through the proxy. */
  windowMs: number;
  /** The path closed for every machine with this failure (once per closing). */
  closedForAll: boolean;
}

/**
 * The routes of one Talos client: per machine (by the node IP asked), and for all.
 *
 * @example
 * const routes = new MachineRoutes("auto");
 * routes.route("10.0.0.5", Date.now()); // "direct"
 * routes.directFailed("10.0.0.5", Date.now()); // { windowMs: 60000, closedForAll: false }
 * routes.route("10.0.0.5", Date.now()); // "proxy"
 */
export class MachineRoutes {
  readonly access: MachineAccess;
  readonly #failing = new Map<string, Failing>();
  /** Distinct machines that failed directly since the last direct answer. */
  readonly #streak = new Set<string>();
  #allFailures = 0;
  #allUntil = 0;

  constructor(access: MachineAccess) {
    this.access = access;
  }

  /** The way a call about `node` takes now. */
  route(node: string, now: number): Route {
    if (this.access === "proxy" || now < this.#allUntil) return "proxy";
    const f = this.#failing.get(node);
    return f !== undefined && now < f.until ? "proxy" : "direct";
  }

  /** Whether the path is closed for every machine now. */
  closedForAll(now: number): boolean {
    return this.access === "proxy" || now < this.#allUntil;
  }

  /** Machines asked through the proxy after a direct failure (their window may have passed). */
  get failing(): number {
    return this.#failing.size;
  }

  /**
   * A direct attempt about `node` failed on the path (not an answer of the machine's).
   * @param reachableElsewhere another machine is connected directly now: the failure is this
   *   machine's (or its address's) alone and counts toward no closing for all — so a Node whose
   *   kubelet reports unreachable addresses one after another cannot close the path for every machine.
   */
  directFailed(node: string, now: number, reachableElsewhere = false): DirectFailure {
    const prev = this.#failing.get(node);
    const failures = (prev?.failures ?? 0) + 1;
    const windowMs = windowAfter(failures);
    this.#failing.delete(node);
    this.#failing.set(node, { failures, until: now + windowMs });
    if (this.#failing.size > MAX_FAILING) this.#failing.delete(this.#failing.keys().next().value as string);
    if (reachableElsewhere) {
      if (this.#streak.size > 0) this.#streak.clear();
      return { windowMs, closedForAll: false };
    }
    this.#streak.add(node);
    if (this.#streak.size < MACHINES_TO_CLOSE) return { windowMs, closedForAll: false };
    this.#streak.clear();
    this.#allFailures++;
    this.#allUntil = now + windowAfter(this.#allFailures);
    return { windowMs, closedForAll: true };
  }

  /** A machine answered directly: its path and the path for all are open. */
  directWorked(node: string): void {
    if (this.#failing.size > 0) this.#failing.delete(node);
    if (this.#streak.size > 0) this.#streak.clear();
    this.#allFailures = 0;
  }
}
