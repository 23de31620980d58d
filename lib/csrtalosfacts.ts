// What Talos says about the machine behind a Node, for node-csr-approval (lib/csrapprover.ts), where
// cloud-node's watches cannot answer (lib/taloswatchcsr.ts): read from the one Talos node that
// answers on the Node's IPs, cached briefly so that a retried decision does not read it again. Errors propagate: an unreachable Talos is never read as "no Talos". The
// Talos I/O edge of the CSR path.

import type { TalosFacts } from "./csr.ts";
import { type LeanNode, nodeIPs } from "./nodeview.ts";
import { addressesOnSharedLinks } from "./sharedaddresses.ts";
import type { CallOptions, TalosClient } from "./talos.ts";
import type { PlatformMetadata } from "./types.ts";

/**
 * How long Talos facts of a node are reused: long enough for a retry, short enough to follow changes.
 * A decision once written forgets them at once.
 */
const TALOS_FACTS_TTL_MS = 10_000;

/** Deadline of one Talos call; failures are retried by the queue with backoff. */
const TALOS_CALL_TIMEOUT_MS = 5_000;
/**
 * The DNS names a Talos node has for itself: HostnameStatus hostname and FQDN, PlatformMetadata
 * hostname, internalDNS and externalDNS; empty ones left out, duplicates once.
 */
export function talosDnsNames(
  host: { hostname: string; fqdn: string },
  metadata: Pick<PlatformMetadata, "hostname" | "internalDNS" | "externalDNS">,
): string[] {
  const names = [host.hostname, host.fqdn, metadata.hostname, metadata.internalDNS, metadata.externalDNS];
  return [...new Set(names.filter((n) => n !== ""))];
}

/** The Talos calls the controller makes. */
export type TalosFactsClient = Pick<
  TalosClient,
  "firstAnswer" | "nodename" | "addresses" | "links" | "nodeIPConfig" | "hostname" | "platformMetadata"
>;

interface FactsEntry {
  at: number;
  /** The node IPs the facts were read for. */
  ips: string;
  facts: Omit<TalosFacts, "dnsNames">;
  dnsNames?: string[];
}

/**
 * Reads and briefly caches what Talos says about the machine behind a Node: which node it is
 * (Nodename), its addresses with the links that hold them, what it excludes from node IPs
 * (NodeIPConfig) and, when asked, its DNS names — all from the one Talos node that answered on the
 * Node's IPs. Errors propagate: an unreachable Talos is never read as "no Talos".
 */
export class TalosFactsReader {
  readonly #talos: TalosFactsClient;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #cache = new Map<string, FactsEntry>();
  readonly #schedule: (fn: () => void, ms: number) => void;
  /** A prune is scheduled (armed while the cache holds entries). */
  #pruning = false;

  /**
   * @param opts.schedule runs `fn` after `ms` (default: a timer that does not hold the process): the
   *   entries of a burst of CSRs go when they expire, not at the next read, which may never come.
   */
  constructor(
    talos: TalosFactsClient,
    opts: { ttlMs?: number; now?: () => number; schedule?: (fn: () => void, ms: number) => void } = {},
  ) {
    this.#talos = talos;
    this.#ttlMs = opts.ttlMs ?? TALOS_FACTS_TTL_MS;
    this.#now = opts.now ?? Date.now;
    this.#schedule =
      opts.schedule ??
      ((fn, ms) => {
        const timer = setTimeout(fn, ms);
        (timer as { unref?: () => void }).unref?.();
      });
  }

  /** Entries held (expired ones included until their prune). */
  get size(): number {
    return this.#cache.size;
  }

  /**
   * The Talos facts of `node`.
   * @param withDNS also read the DNS names (hostname and platform metadata)
   * @throws {TalosError} when Talos does not answer; {Error} when the Node has no IP to ask on
   */
  async read(
    node: LeanNode,
    preferIPv6: boolean,
    withDNS: boolean,
    signal?: AbortSignal,
  ): Promise<TalosFacts> {
    const name = node.metadata.name;
    const { ips } = nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      preferIPv6,
    );
    if (ips.length === 0) throw new Error(`Cannot ask Talos about node ${name}: the Node has no IP yet`);
    const now = this.#now();
    const opts: CallOptions = {
      attempts: 1,
      timeoutMs: TALOS_CALL_TIMEOUT_MS,
      ...(signal ? { signal } : {}),
    };
    let entry = this.#cache.get(name);
    if (!entry || entry.ips !== ips.join(",") || now - entry.at >= this.#ttlMs) {
      // All from the one machine that answers, in one round trip; its own name (Nodename) decides
      // in the policy whether the rest means anything.
      const {
        nodeIP,
        value: [nodename, statuses, links, nodeIPConfig],
      } = await this.#talos.firstAnswer(
        ips,
        (ip, o) =>
          Promise.all([
            this.#talos.nodename(ip, o),
            this.#talos.addresses(ip, o),
            this.#talos.links(ip, o),
            this.#talos.nodeIPConfig(ip, o),
          ]),
        opts,
      );
      entry = {
        at: now,
        ips: ips.join(","),
        facts: {
          nodeIP,
          nodename,
          addresses: statuses.map((a) => a.address),
          sharedAddresses: addressesOnSharedLinks(statuses, links),
          excludedSubnets: nodeIPConfig.excludeSubnets,
        },
      };
      this.#prune(now);
      // Re-inserted at the end, so that the map stays (nearly) in age order for #prune.
      this.#cache.delete(name);
      this.#cache.set(name, entry);
      this.#armPrune();
    }
    if (withDNS && !entry.dnsNames) {
      const [host, metadata] = await Promise.all([
        this.#talos.hostname(entry.facts.nodeIP, opts),
        this.#talos.platformMetadata(entry.facts.nodeIP, opts),
      ]);
      entry.dnsNames = talosDnsNames(host, metadata);
    }
    return { ...entry.facts, dnsNames: withDNS ? (entry.dnsNames ?? []) : [] };
  }

  /** Forgets what is known about node `name` (its Node went away). */
  forget(name: string): void {
    this.#cache.delete(name);
  }

  /**
   * Drops expired entries from the oldest on, stopping at the first live one: a sweep of the whole
   * map per read would cost O(nodes) per CSR. Concurrent reads may insert slightly out of age
   * order; an expired entry left behind is never used (`read` checks the age) and goes later.
   */
  #prune(now: number): void {
    for (const [k, e] of this.#cache) {
      if (now - e.at < this.#ttlMs) return;
      this.#cache.delete(k);
    }
  }

  /** Schedules a prune when the oldest entry expires; again after it while entries remain. */
  #armPrune(): void {
    if (this.#pruning) return;
    const oldest = this.#cache.values().next().value;
    if (oldest === undefined) return;
    this.#pruning = true;
    this.#schedule(
      () => {
        this.#pruning = false;
        this.#prune(this.#now());
        this.#armPrune();
      },
      Math.max(0, oldest.at + this.#ttlMs - this.#now()) + 1,
    );
  }
}
