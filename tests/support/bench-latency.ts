// Event-to-patch latency for the blast-radius benchmark (`npm run bench -- --hostile ...`): a public
// address is put on the eth0 of a sample of honest machines in the fake apid, one change at a time
// spread over a window, and each is timed from the change (its Talos watch event is written then)
// to the first Node event whose status.addresses hold it, seen on a watch of the Nodes.

import { Informer } from "../../lib/cache.ts";
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

/** Times address changes on honest machines until they show on their Nodes. */
export class PatchLatency {
  readonly informer: Informer<SeenNode>;
  /** Node name → the IP it waits for, when the change was made and its sample's index. */
  readonly #pending = new Map<string, { ip: string; at: number; index: number }>();
  /** One per change: ms until its Node showed it, or null while (or if never) seen. */
  readonly samples: (number | null)[] = [];

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
      this.#pending.set(spec.name, { ip, at: performance.now(), index: k });
      this.samples[k] = null;
      apid.updateNode(spec.nodeIPs[0] as string, { addresses: [...spec.addresses, eth0Address(ip)] });
    }
    const deadline = performance.now() + waitMs;
    while (this.#pending.size > 0 && performance.now() < deadline) await Bun.sleep(50);
    return [...this.samples];
  }
}
