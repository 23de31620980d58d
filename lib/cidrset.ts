// The Kubernetes cidrset: a cluster CIDR carved into node-sized subnets. A bitmap over the node-sized subnets of one cluster CIDR, split
// into chunks of 65,536 subnets that are absent while empty and collapse to a marker when full, so
// an IPv4 /8 of /24s or an IPv6 /64 of /80s is one 8 KiB chunk and even 0.0.0.0/0 of /32s is cheap.

import {
  CidrError,
  familyBits,
  formatPrefix,
  type IPAddress,
  lastAddress,
  type Prefix,
  prefixContains,
  prefixesOverlap,
  prefixOf,
} from "./cidr.ts";
import type { Registry } from "./metrics.ts";

/** Kubernetes caps an IPv6 node mask at 16 bits longer than the cluster mask (uncompressed bitmap). */
export const MAX_IPV6_MASK_DIFF = 16;

const CHUNK_BITS = 65536;
const EMPTY = 0;
const FULL = 1;
type Chunk = Uint32Array | typeof EMPTY | typeof FULL;

function popcount(x: number): number {
  let v = x - ((x >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (((v + (v >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

/** Bits lo..hi (inclusive, 0..31) of a word. */
function wordMask(lo: number, hi: number): number {
  return hi - lo === 31 ? 0xffffffff : (((1 << (hi - lo + 1)) - 1) << lo) >>> 0;
}

/** The metric families a CidrSet updates, labelled by `clusterCIDR` as in Kubernetes' cidrset/metrics.go. */
function cidrSetMetrics(registry: Registry) {
  const labels = ["clusterCIDR"];
  return {
    allocations: registry.counter(
      "node_ipam_controller_cidrset_cidrs_allocations_total",
      "Counter measuring total number of CIDR allocations.",
      labels,
    ),
    releases: registry.counter(
      "node_ipam_controller_cidrset_cidrs_releases_total",
      "Counter measuring total number of CIDR releases.",
      labels,
    ),
    // Upstream's name carries the "cirdset" typo; dashboards use it, so it stays.
    max: registry.gauge(
      "node_ipam_controller_cirdset_max_cidrs",
      "Maximum number of CIDRs that can be allocated.",
      labels,
    ),
    usage: registry.gauge(
      "node_ipam_controller_cidrset_usage_cidrs",
      "Gauge measuring percentage of allocated CIDRs.",
      labels,
    ),
    tries: registry.histogram(
      "node_ipam_controller_cidrset_allocation_tries_per_request",
      "Number of occupied candidates skipped per CIDR allocation.",
      labels,
      [1, 5, 25, 125, 625],
    ),
  };
}

/** Options of a {@link CidrSet}. */
export interface CidrSetOptions {
  /** Where to report `node_ipam_controller_cidrset_*`; no metrics when absent. */
  registry?: Registry;
}

/**
 * A cluster CIDR carved into subnets of `nodeMaskBits`, with Kubernetes' semantics: round-robin
 * allocation from a "next candidate" cursor, occupy/release of any overlapping prefix (larger than a
 * subnet: every subnet inside; smaller: the subnet holding it). Synchronous and single-owner.
 * @example
 * const set = new CidrSet(parsePrefix("10.244.0.0/16"), 24);
 * formatPrefix(set.allocateNext()) // "10.244.0.0/24"
 */
export class CidrSet {
  /** Number of subnets. */
  readonly max: number;
  /** Label of the metrics: the cluster CIDR. */
  readonly label: string;
  readonly #shift: bigint;
  readonly #chunkBits: number;
  readonly #chunks: Chunk[];
  readonly #chunkUsed: Uint32Array;
  readonly #metrics: ReturnType<typeof cidrSetMetrics> | undefined;
  #used = 0;
  #next = 0;

  /**
   * @param cluster the range to carve.
   * @param nodeMaskBits the subnet length, not shorter than the cluster's; at most 16 bits longer on IPv6.
   * @throws {CidrError} code `node-mask` when the sizes do not fit.
   */
  constructor(
    readonly cluster: Prefix,
    readonly nodeMaskBits: number,
    options: CidrSetOptions = {},
  ) {
    const width = familyBits(cluster.family);
    const name = formatPrefix(cluster);
    if (!Number.isInteger(nodeMaskBits) || nodeMaskBits < cluster.bits || nodeMaskBits > width) {
      throw new CidrError(
        `Cannot carve ${name} into /${nodeMaskBits}: the node mask must be within ${cluster.bits}..${width}`,
        "node-mask",
      );
    }
    if (cluster.family === 6 && nodeMaskBits - cluster.bits > MAX_IPV6_MASK_DIFF) {
      throw new CidrError(
        `Cannot carve ${name} into /${nodeMaskBits}: an IPv6 node mask may be at most ${MAX_IPV6_MASK_DIFF} bits longer than the cluster mask`,
        "node-mask",
      );
    }
    this.max = 2 ** (nodeMaskBits - cluster.bits);
    this.label = name;
    this.#shift = BigInt(width - nodeMaskBits);
    this.#chunkBits = Math.min(this.max, CHUNK_BITS);
    const chunks = this.max / this.#chunkBits;
    this.#chunks = new Array<Chunk>(chunks).fill(EMPTY);
    this.#chunkUsed = new Uint32Array(chunks);
    this.#metrics = options.registry ? cidrSetMetrics(options.registry) : undefined;
    this.#metrics?.max.set({ clusterCIDR: name }, this.max);
    this.#metrics?.usage.set({ clusterCIDR: name }, 0);
  }

  /** Number of subnets in use. */
  get used(): number {
    return this.#used;
  }

  /** Number of free subnets. */
  get free(): number {
    return this.max - this.#used;
  }

  /** Fraction of subnets in use, 0..1. */
  get usage(): number {
    return this.#used / this.max;
  }

  /** The subnet at `index` (0..max-1). */
  subnet(index: number): Prefix {
    return {
      family: this.cluster.family,
      addr: this.cluster.addr | (BigInt(index) << this.#shift),
      bits: this.nodeMaskBits,
    };
  }

  /** The subnet holding `ip`, or undefined when `ip` is outside the cluster CIDR. */
  subnetHolding(ip: IPAddress): Prefix | undefined {
    return prefixContains(this.cluster, ip) ? prefixOf(ip, this.nodeMaskBits) : undefined;
  }

  /**
   * First and last subnet index that `p` touches.
   * @throws {CidrError} code `out-of-range` when `p` does not overlap the cluster CIDR.
   */
  indexRange(p: Prefix): [number, number] {
    if (!prefixesOverlap(p, this.cluster)) {
      throw new CidrError(
        `Cannot use ${formatPrefix(p)}: it is outside cluster CIDR ${this.label}`,
        "out-of-range",
      );
    }
    if (p.bits <= this.cluster.bits) return [0, this.max - 1];
    const index = (v: bigint) => Number((v ^ this.cluster.addr) >> this.#shift);
    return [index(p.addr), index(lastAddress(p))];
  }

  /**
   * Takes the next free subnet after the cursor, wrapping around.
   * @throws {CidrError} code `exhausted` when every subnet is in use.
   */
  allocateNext(): Prefix {
    if (this.#used === this.max) {
      throw new CidrError(
        `Cannot allocate a /${this.nodeMaskBits} from ${this.label}: no free CIDR left`,
        "exhausted",
      );
    }
    const start = this.#next;
    let found = this.#findFree(start, this.max - 1);
    if (found < 0) found = this.#findFree(0, start - 1);
    this.#setRange(found, found, true);
    this.#next = (found + 1) % this.max;
    const labels = { clusterCIDR: this.label };
    this.#metrics?.allocations.inc(labels);
    this.#metrics?.tries.observe(labels, (found - start + this.max) % this.max);
    this.#metrics?.usage.set(labels, this.usage);
    return this.subnet(found);
  }

  /**
   * Marks every subnet `p` touches as used; subnets already used stay so.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range`.
   */
  occupy(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    const changed = this.#setRange(begin, end, true);
    this.#report(this.#metrics?.allocations, changed);
    return changed;
  }

  /**
   * Marks every subnet `p` touches as free.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range`.
   */
  release(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    return this.releaseRange(begin, end);
  }

  /**
   * Marks subnets `begin`..`end` (indices, see {@link indexRange}) as free; for owners that track
   * which subnets another claim still needs.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range` when the indices are not within 0..max-1.
   */
  releaseRange(begin: number, end: number): number {
    if (!Number.isInteger(begin) || !Number.isInteger(end) || begin < 0 || end >= this.max || begin > end) {
      throw new CidrError(
        `Cannot release subnets ${begin}..${end} of ${this.label}: not within 0..${this.max - 1}`,
        "out-of-range",
      );
    }
    const changed = this.#setRange(begin, end, false);
    this.#report(this.#metrics?.releases, changed);
    return changed;
  }

  /**
   * Whether every subnet `p` touches is used.
   * @throws {CidrError} code `out-of-range`.
   */
  isAllocated(p: Prefix): boolean {
    const [begin, end] = this.indexRange(p);
    return this.#countRange(begin, end) === end - begin + 1;
  }

  /**
   * How many of the subnets `p` touches are used.
   * @throws {CidrError} code `out-of-range`.
   */
  usedIn(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    return this.#countRange(begin, end);
  }

  #report(
    counter: { inc(labels: Record<string, string>, n: number): void } | undefined,
    changed: number,
  ): void {
    if (!this.#metrics) return;
    const labels = { clusterCIDR: this.label };
    if (changed > 0) counter?.inc(labels, changed);
    this.#metrics.usage.set(labels, this.usage);
  }

  /** Visits the chunks overlapping begin..end with the bit range inside each chunk. */
  #forChunks(
    begin: number,
    end: number,
    visit: (chunk: number, lo: number, hi: number) => boolean | undefined,
  ): void {
    const size = this.#chunkBits;
    for (let c = Math.floor(begin / size); c * size <= end; c++) {
      const lo = Math.max(begin - c * size, 0);
      const hi = Math.min(end - c * size, size - 1);
      if (visit(c, lo, hi) === true) return;
    }
  }

  #materialize(c: number): Uint32Array {
    const chunk = this.#chunks[c];
    if (chunk instanceof Uint32Array) return chunk;
    const words = new Uint32Array(Math.ceil(this.#chunkBits / 32));
    if (chunk === FULL) {
      words.fill(0xffffffff);
      const rest = this.#chunkBits % 32;
      if (rest) words[words.length - 1] = wordMask(0, rest - 1);
    }
    this.#chunks[c] = words;
    return words;
  }

  #setRange(begin: number, end: number, value: boolean): number {
    let changed = 0;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const before = this.#chunkUsed[c] as number;
      const chunk = this.#chunks[c];
      let after: number;
      if (lo === 0 && hi === this.#chunkBits - 1) {
        after = value ? this.#chunkBits : 0;
      } else if (chunk === (value ? FULL : EMPTY)) {
        after = before;
      } else {
        const words = this.#materialize(c);
        after = before;
        for (let w = lo >>> 5; w <= hi >>> 5; w++) {
          const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
          const old = words[w] as number;
          const next = value ? (old | mask) >>> 0 : (old & ~mask) >>> 0;
          after += popcount(next) - popcount(old);
          words[w] = next;
        }
      }
      this.#chunkUsed[c] = after;
      if (after === 0) this.#chunks[c] = EMPTY;
      else if (after === this.#chunkBits) this.#chunks[c] = FULL;
      changed += Math.abs(after - before);
      return undefined;
    });
    this.#used += value ? changed : -changed;
    return changed;
  }

  #countRange(begin: number, end: number): number {
    let count = 0;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const chunk = this.#chunks[c];
      if (chunk === FULL) count += hi - lo + 1;
      else if (chunk instanceof Uint32Array) {
        for (let w = lo >>> 5; w <= hi >>> 5; w++) {
          const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
          count += popcount(((chunk[w] as number) & mask) >>> 0);
        }
      }
      return undefined;
    });
    return count;
  }

  /** First free index in begin..end, or -1. */
  #findFree(begin: number, end: number): number {
    let found = -1;
    if (begin > end) return found;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const chunk = this.#chunks[c] as Chunk;
      if (chunk === FULL) return undefined;
      if (chunk === EMPTY) {
        found = c * this.#chunkBits + lo;
        return true;
      }
      for (let w = lo >>> 5; w <= hi >>> 5; w++) {
        const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
        const freeBits = (~(chunk[w] as number) & mask) >>> 0;
        if (freeBits !== 0) {
          found = c * this.#chunkBits + w * 32 + (31 - Math.clz32(freeBits & -freeBits));
          return true;
        }
      }
      return undefined;
    });
    return found;
  }
}
