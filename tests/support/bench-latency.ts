// Event-to-patch latency for the blast-radius benchmark (`npm run bench -- --hostile ...`): a public
// address is put on the eth0 of a sample of honest machines in the fake apid, one change at a time
// spread over a window, and each is timed from the change (its Talos watch event is written then)
// to the first Node event whose status.addresses hold it, seen on a watch of the Nodes. The CCM's part
// of each sample is timed apart (ccmWriteDelays): from the change to the API server receiving the
// CCM's write of that Node, read from the bench's audit log (stage RequestReceived), so that what
// the API server and etcd take under a hostile load can be told from what the CCM takes.

import { Informer } from "../../lib/kubecache.ts";
import type { FakeApid } from "./apid.ts";
import { benchIPv4, eth0Address } from "./bench-hostile-peer.ts";
import type { TestCluster } from "./cluster.ts";
import type { FakeNodeSpec } from "./fixtures.ts";
import { Rng } from "./ipspellings.ts";

/** The seed of the changes' moments within their slots: the same moments in every run. */
const LATENCY_SEED = 20261128;

/** A Node as the probe keeps it: its name and the addresses of its status. */
interface SeenNode {
  metadata: { name: string; resourceVersion?: string };
  ips: string[];
}

function seenNode(raw: unknown): SeenNode {
  const n = raw as {
    metadata: { name: string; resourceVersion?: string };
    status?: { addresses?: { address: string }[] };
  };
  const { name, resourceVersion } = n.metadata;
  return {
    metadata: resourceVersion === undefined ? { name } : { name, resourceVersion },
    ips: (n.status?.addresses ?? []).map((a) => a.address),
  };
}

/**
 * Which honest machines the `count` changes go to: spread evenly over the first `honest` specs
 * (the same machine again when count > honest).
 * @example sampleIndexes(4, 100) // [0, 25, 50, 75]
 */
export function sampleIndexes(count: number, honest: number): number[] {
  return Array.from({ length: count }, (_, k) => Math.floor((k * honest) / count) % honest);
}

/** A change as the CCM's part is timed from: its Node and when it was made (ms since the epoch). */
export interface TimedChange {
  node: string;
  atEpochMs: number;
}

/**
 * An audit timestamp (RFC 3339 in UTC with up to nanoseconds, as the API server writes
 * `requestReceivedTimestamp`) in ms since the epoch, keeping the sub-millisecond part.
 * @throws {Error} on a timestamp of another form.
 * @example auditEpochMs("1970-01-01T00:00:01.000250Z") // 1000.25
 */
export function auditEpochMs(ts: string): number {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/.exec(ts);
  const whole = m ? Date.parse(`${m[1]}Z`) : Number.NaN;
  if (!m || Number.isNaN(whole))
    throw new Error(`Cannot parse audit timestamp "${ts}": expected RFC 3339 UTC`);
  return whole + Number(`0.${m[2] ?? "0"}`) * 1000;
}

/**
 * The CCM's part of each change: ms from the change to the first write of its Node received after it
 * (null for a change with no such write, or none made). Writes up to 1 ms before the change count
 * as at it (the two clocks are the same machine's, read by two processes). Pure.
 * @param writes the CCM's writes of Nodes, each with its Node and when the API server received it.
 * @example ccmWriteDelays([{node: "a", atEpochMs: 10}], [{node: "a", atEpochMs: 9}, {node: "a", atEpochMs: 14.5}]) // [4.5]
 */
export function ccmWriteDelays(
  changes: readonly (TimedChange | undefined)[],
  writes: readonly TimedChange[],
): (number | null)[] {
  const byNode = new Map<string, number[]>();
  for (const w of writes) {
    const list = byNode.get(w.node);
    if (list) list.push(w.atEpochMs);
    else byNode.set(w.node, [w.atEpochMs]);
  }
  for (const list of byNode.values()) list.sort((a, b) => a - b);
  return changes.map((c) => {
    if (!c) return null;
    const after = byNode.get(c.node)?.find((t) => t >= c.atEpochMs - 1);
    return after === undefined ? null : Math.max(0, after - c.atEpochMs);
  });
}

/** Times address changes on honest machines until they show on their Nodes. */
export class PatchLatency {
  readonly informer: Informer<SeenNode>;
  /** Node name → the IP it waits for, when the change was made and its sample's index. */
  readonly #pending = new Map<string, { ip: string; at: number; index: number }>();
  /** One per change: ms until its Node showed it, or null while (or if never) seen. */
  readonly samples: (number | null)[] = [];
  /** One per change: its Node and when it was made, for {@link ccmWriteDelays}. */
  readonly changes: TimedChange[] = [];

  /** @param fieldSelector leaves Nodes out of the watch, e.g. `metadata.name!=<the hostile peer's>`. */
  constructor(cluster: TestCluster, fieldSelector?: string) {
    this.informer = new Informer(cluster.adminClient, {
      path: "/api/v1/nodes",
      transform: seenNode,
      ...(fieldSelector === undefined ? {} : { fieldSelector }),
    });
    const see = (n: SeenNode) => {
      const p = this.#pending.get(n.metadata.name);
      if (!p || !n.ips.includes(p.ip)) return;
      this.samples[p.index] = performance.now() - p.at;
      this.#pending.delete(n.metadata.name);
    };
    this.informer.addHandlers({ onAdd: see, onUpdate: (_, n) => see(n) });
  }

  async start(): Promise<void> {
    this.informer.start();
    await this.informer.waitForSync();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  /** Changes not seen yet. */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Makes `count` changes spread over `windowMs`, each at a random moment of its own slot (so that no
   * sample is phase-locked to a hostile peer's timer: evenly spaced changes every 200 ms met a peer
   * acting once a second at the same phase every fifth sample), each one public address (198.18.0.0/15) put on
   * the eth0 of the next machine of the sample, in place of the one an earlier change put there;
   * then waits up to `waitMs` for the last ones to show.
   * @param specs the honest machines (their original specs: each change is their addresses plus one).
   * @returns the samples (ms, or null for a change never seen).
   */
  async run(
    apid: FakeApid,
    specs: readonly FakeNodeSpec[],
    count: number,
    windowMs: number,
    waitMs: number,
  ): Promise<(number | null)[]> {
    const t0 = performance.now();
    const targets = sampleIndexes(count, specs.length);
    const phase = new Rng(LATENCY_SEED);
    for (const [k, i] of targets.entries()) {
      const due = t0 + ((k + phase.next()) * windowMs) / count;
      const wait = due - performance.now();
      if (wait > 0) await Bun.sleep(wait);
      const spec = specs[i] as FakeNodeSpec;
      const ip = benchIPv4(k + 1);
      // A change still pending on the same machine is replaced, and counts as never seen.
      const at = performance.now();
      this.#pending.set(spec.name, { ip, at, index: k });
      this.samples[k] = null;
      this.changes[k] = { node: spec.name, atEpochMs: performance.timeOrigin + at };
      apid.updateNode(spec.nodeIPs[0] as string, { addresses: [...spec.addresses, eth0Address(ip)] });
    }
    const deadline = performance.now() + waitMs;
    while (this.#pending.size > 0 && performance.now() < deadline) await Bun.sleep(50);
    return [...this.samples];
  }
}
