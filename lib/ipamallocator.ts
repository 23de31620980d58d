// Node IPAM's allocator: every pod-CIDR decision (RangeAllocator and CloudAllocator semantics), as a
// synchronous state machine over CidrSets; the single owner of CIDR state. Pure: the node-ipam
// controller (lib/ipam.ts) feeds it Nodes and writes what it returns.

import {
  type Cidr,
  CidrError,
  formatIP,
  formatPrefix,
  type IPAddress,
  isIPv4Mapped,
  isPublicUnicast,
  type Prefix,
  prefixEquals,
  prefixesOverlap,
  prefixOf,
  tryParseCidr,
  tryParseIP,
} from "./cidr.ts";
import { CidrSet } from "./cidrset.ts";
import {
  type AllocatorType,
  cloudSubnet,
  DEFAULT_MAX_PODS,
  type NodeIpamConfig,
  validateNodeIpamConfig,
} from "./ipamconfig.ts";
import type { Registry } from "./metrics.ts";

/** What the allocator may know about a node's own network. */
export interface NodeNetwork {
  /**
   * The node's addresses with prefix lengths, as Talos' AddressStatus reports them
   * (`2001:db8:1:2::5/64`, `10.0.0.5/24`), permanent IPv6 first; addresses on links that public-IP
   * discovery skips (kubespan, siderolink, lo, dummy*, cilium_host) already dropped. Every address
   * is kept out of every pod CIDR; public IPv6 prefixes feed the CloudAllocator.
   */
  addresses?: readonly string[];
  /**
   * The node's IPs from its status. When one of them is a public IPv6 address, only the Talos
   * addresses equal to such an IP count as the node's public prefix (as the reference does).
   */
  nodeIPs?: readonly string[];
  /** Pod capacity (status.allocatable.pods); tiny prefixes must fit it. Default 110. */
  maxPods?: number;
}

/** The result of {@link Allocator.allocate}. */
export interface Allocation {
  /** One CIDR per cluster CIDR, in the cluster CIDRs' order; write these to `spec.podCIDRs`. */
  podCIDRs: string[];
  /** False when the node already held these CIDRs (a retry, or a patch the cache has not seen yet). */
  isNew: boolean;
  /** Things worth an Event or a log line: unusable addresses or prefixes, a fallback taken. */
  warnings: string[];
}

/** Thrown when a range has no free subnet left; `code` is the Event reason Kubernetes uses. */
export class CidrNotAvailableError extends Error {
  override name = "CidrNotAvailableError";
  readonly code = "CIDRNotAvailable";
  /**
   * @param node the node that got nothing.
   * @param clusterCIDR the exhausted range (a cluster CIDR or a node's public subnet).
   */
  constructor(
    readonly node: string,
    readonly clusterCIDR: string,
  ) {
    super(`Cannot allocate a pod CIDR for node ${node}: no free CIDR left in ${clusterCIDR}`);
  }
}

/** Options of an {@link Allocator}: a validated configuration (see `resolveNodeIpamConfig`) and its type. */
export interface AllocatorOptions extends NodeIpamConfig {
  type: AllocatorType;
  /** Where `node_ipam_controller_cidrset_*` go; no metrics when absent (node-ipam passes the process registry). */
  registry?: Registry;
}

/** Usage of one range, for logs and debugging. */
export interface RangeStatus {
  clusterCIDR: string;
  nodeMaskBits: number;
  used: number;
  max: number;
}

/** What a node holds: its pod CIDRs and its own addresses (as /32 or /128), kept out of every pod CIDR. */
interface NodeClaims {
  pods: Prefix[];
  addresses: Prefix[];
}

function hostPrefix(ip: IPAddress): Prefix {
  return prefixOf(ip, ip.family === 4 ? 32 : 128);
}

/** The node's own addresses from `network`, as host prefixes, with warnings for unparsable ones. */
function ownAddresses(network: NodeNetwork, warnings: string[]): Prefix[] {
  const out: Prefix[] = [];
  for (const a of network.addresses ?? []) {
    const cidr = tryParseCidr(a);
    if (cidr) out.push(hostPrefix(cidr.ip));
    else warnings.push(`Ignored node address ${JSON.stringify(a)}: not <address>/<length>`);
  }
  for (const a of network.nodeIPs ?? []) {
    const ip = tryParseIP(a);
    if (ip) out.push(hostPrefix(ip));
    else warnings.push(`Ignored node IP ${JSON.stringify(a)}: not an IP address`);
  }
  return out;
}

/**
 * The node's public IPv6 interface addresses that may give it pod CIDRs, in the given order,
 * deduplicated: global unicast, not unique-local, not /128; restricted to the node's public IPv6
 * node IPs when it has any (the reference's NodeCIDRDiscovery).
 */
export function publicIPv6Prefixes(network: NodeNetwork): Cidr[] {
  const isPublic6 = (ip: IPAddress | undefined): ip is IPAddress =>
    ip !== undefined && ip.family === 6 && !isIPv4Mapped(ip) && isPublicUnicast(ip);
  const publicNodeIPs = (network.nodeIPs ?? []).map(tryParseIP).filter(isPublic6);
  const seen = new Set<string>();
  const out: Cidr[] = [];
  for (const a of network.addresses ?? []) {
    const cidr = tryParseCidr(a);
    if (!cidr || !isPublic6(cidr.ip) || cidr.prefix.bits === 128) continue;
    if (publicNodeIPs.length > 0 && !publicNodeIPs.some((ip) => ip.value === cidr.ip.value)) continue;
    const key = `${formatIP(cidr.ip)}/${cidr.prefix.bits}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(cidr);
  }
  return out;
}

/**
 * One range and who touches which of its subnets, so that a release frees exactly the subnets no
 * other claim needs (several nodes' addresses often share a subnet).
 */
interface Range {
  set: CidrSet;
  /** Subnet index → how many claims lie within that one subnet. */
  single: Map<number, number>;
  /** Index spans of claims covering several subnets (service ranges, odd foreign CIDRs); few. */
  spans: Array<[number, number]>;
}

function newRange(set: CidrSet): Range {
  return { set, single: new Map(), spans: [] };
}

/** A cheap map key for a prefix. */
function rangeKey(p: Prefix): string {
  return `${p.family}:${p.addr.toString(16)}/${p.bits}`;
}

/** Adds one claim of `p` to `range` and marks its subnets used. */
function claimIn(range: Range, p: Prefix): void {
  const [begin, end] = range.set.indexRange(p);
  if (begin === end) range.single.set(begin, (range.single.get(begin) ?? 0) + 1);
  else range.spans.push([begin, end]);
  range.set.occupy(p);
}

/** Removes one claim of `p` from `range`, freeing the subnets nothing else touches. */
function unclaimIn(range: Range, p: Prefix): void {
  const [begin, end] = range.set.indexRange(p);
  const spanned = (i: number) => range.spans.some(([b, e]) => b <= i && i <= e);
  if (begin === end) {
    const n = (range.single.get(begin) ?? 0) - 1;
    if (n > 0) {
      range.single.set(begin, n);
      return;
    }
    range.single.delete(begin);
    if (!spanned(begin)) range.set.releaseRange(begin, begin);
    return;
  }
  const i = range.spans.findIndex(([b, e]) => b === begin && e === end);
  if (i >= 0) range.spans.splice(i, 1);
  const keep: Array<[number, number]> = [];
  for (const [b, e] of range.spans)
    if (e >= begin && b <= end) keep.push([Math.max(b, begin), Math.min(e, end)]);
  for (const s of range.single.keys()) if (s >= begin && s <= end) keep.push([s, s]);
  keep.sort((a, b) => a[0] - b[0]);
  let from = begin;
  for (const [b, e] of keep) {
    if (b > from) range.set.releaseRange(from, b - 1);
    from = Math.max(from, e + 1);
  }
  if (from <= end) range.set.releaseRange(from, end);
}

/**
 * The single owner of pod-CIDR state. RangeAllocator: one CIDR per cluster CIDR from that cluster
 * CIDR. CloudAllocator: IPv4 the same way; IPv6 from the node's own public prefix (see
 * `cloudSubnet` for the mask table), one range per discovered subnet created on demand, falling
 * back to the cluster IPv6 CIDR when the node has no usable public prefix.
 *
 * Every claim (pod CIDRs, service CIDRs, node addresses) is marked in every range it overlaps,
 * including ranges created later, so ranges may overlap each other and a restart rebuilt with
 * {@link occupy} never hands out a CIDR a node still holds. Every method is synchronous: two nodes
 * handled concurrently can never get the same range.
 *
 * Controller contract: at start, {@link occupy} every Node that has podCIDRs before the first
 * {@link allocate}; then per Node: podCIDRs set → {@link occupy}; none → {@link allocate} and patch
 * `spec.podCIDRs`; if that patch fails for good (not a timeout, whose outcome is unknown) →
 * {@link release}; Node deleted → {@link release}.
 * @example
 * const ipam = new Allocator({ type: "RangeAllocator", ...resolveNodeIpamConfig({ clusterCidrs: ["10.244.0.0/16"] }) });
 * ipam.allocate("w1").podCIDRs // ["10.244.0.0/24"]
 */
export class Allocator {
  readonly type: AllocatorType;
  readonly #clusterCIDRs: readonly Prefix[];
  readonly #clusterRanges: readonly Range[];
  readonly #services: readonly Prefix[];
  /** CloudAllocator subnets by {@link rangeKey}, and the prefix lengths among them. */
  readonly #discovered = new Map<string, Range>();
  readonly #discoveredLengths = new Set<number>();
  readonly #nodes = new Map<string, NodeClaims>();
  /** Pod CIDR (by {@link rangeKey}) → the nodes holding exactly it, to name duplicates cheaply. */
  readonly #podOwners = new Map<string, Set<string>>();
  readonly #sets: { registry?: Registry };

  /**
   * @throws {CidrError} code `config` or `node-mask` when the configuration is impossible.
   */
  constructor(options: AllocatorOptions) {
    if (options.type !== "RangeAllocator" && options.type !== "CloudAllocator") {
      throw new CidrError(`Cannot create allocator: unknown type ${String(options.type)}`, "config");
    }
    validateNodeIpamConfig(options);
    this.type = options.type;
    this.#sets = options.registry ? { registry: options.registry } : {};
    this.#clusterCIDRs = [...options.clusterCIDRs];
    this.#clusterRanges = options.clusterCIDRs.map((p, i) =>
      newRange(new CidrSet(p, options.nodeMaskSizes[i] as number, this.#sets)),
    );
    this.#services = [...options.serviceCIDRs];
    for (const s of this.#services) this.#claim(s);
  }

  /**
   * Records CIDRs a node already has (`spec.podCIDRs`), so they are never handed out again. Call
   * for every such Node at start, before any {@link allocate}, and whenever a Node shows podCIDRs.
   * A node's CIDRs that differ from what it held replace them. Host bits are cleared.
   * @param network the node's addresses when known (kept out of later allocations).
   * @returns warnings: CIDRs outside every range, or overlapping another node's or a service range.
   * @throws {CidrError} code `invalid-prefix` for an unparsable CIDR (nothing is recorded then).
   */
  occupy(nodeName: string, podCIDRs: readonly string[], network: NodeNetwork = {}): string[] {
    const warnings: string[] = [];
    const pods = podCIDRs.map((s) => {
      const cidr = tryParseCidr(s);
      if (!cidr) {
        throw new CidrError(
          `Cannot occupy ${JSON.stringify(s)} for node ${nodeName}: not a CIDR`,
          "invalid-prefix",
        );
      }
      return cidr.prefix;
    });
    const claims = this.#claimsOf(nodeName);
    this.#setAddresses(claims, network, warnings);
    const same =
      pods.length === claims.pods.length && pods.every((p, i) => prefixEquals(p, claims.pods[i] as Prefix));
    if (!same) {
      for (const p of pods) warnings.push(...this.#conflicts(nodeName, p));
      const old = claims.pods;
      this.#setPods(nodeName, claims, pods);
      for (const p of pods) this.#claim(p);
      for (const p of old) this.#unclaim(p);
    }
    this.#dropIfEmpty(nodeName, claims);
    this.#prune();
    return warnings;
  }

  /**
   * Gives a node one CIDR per cluster CIDR, in their order, or returns what it already holds.
   * All or nothing: when one family is exhausted, nothing is taken.
   * @param network the node's addresses: never part of its CIDRs; the CloudAllocator's IPv6 source.
   * @throws {CidrNotAvailableError} when a range is exhausted.
   */
  allocate(nodeName: string, network: NodeNetwork = {}): Allocation {
    const warnings: string[] = [];
    const claims = this.#claimsOf(nodeName);
    this.#setAddresses(claims, network, warnings);
    if (claims.pods.length > 0) {
      return { podCIDRs: claims.pods.map(formatPrefix), isNew: false, warnings };
    }
    const taken: Prefix[] = [];
    try {
      for (const [i, cluster] of this.#clusterCIDRs.entries()) {
        const cloud =
          this.type === "CloudAllocator" && cluster.family === 6
            ? this.#cloudRange(nodeName, network, warnings)
            : undefined;
        const { set } = cloud ?? (this.#clusterRanges[i] as Range);
        if (set.free === 0) throw new CidrNotAvailableError(nodeName, set.label);
        const p = set.allocateNext();
        taken.push(p);
        this.#claim(p);
      }
    } catch (err) {
      for (const p of taken) this.#unclaim(p);
      this.#dropIfEmpty(nodeName, claims);
      this.#prune();
      throw err;
    }
    this.#setPods(nodeName, claims, taken);
    return { podCIDRs: taken.map(formatPrefix), isNew: true, warnings };
  }

  /**
   * Forgets a node: frees its pod CIDRs and its addresses' reservations.
   * @returns the CIDRs it held.
   */
  release(nodeName: string): string[] {
    const claims = this.#nodes.get(nodeName);
    if (!claims) return [];
    const { pods, addresses } = claims;
    this.#setPods(nodeName, claims, []);
    this.#nodes.delete(nodeName);
    for (const p of pods) this.#unclaim(p);
    for (const p of addresses) this.#unclaim(p);
    this.#prune();
    return pods.map(formatPrefix);
  }

  /** The CIDRs a node holds, or undefined. */
  podCIDRs(nodeName: string): string[] | undefined {
    const pods = this.#nodes.get(nodeName)?.pods;
    return pods && pods.length > 0 ? pods.map(formatPrefix) : undefined;
  }

  /** Usage of every range: the cluster CIDRs, then the discovered subnets. */
  status(): RangeStatus[] {
    return [...this.#clusterRanges, ...this.#discovered.values()].map(({ set }) => ({
      clusterCIDR: set.label,
      nodeMaskBits: set.nodeMaskBits,
      used: set.used,
      max: set.max,
    }));
  }

  #claimsOf(nodeName: string): NodeClaims {
    let claims = this.#nodes.get(nodeName);
    if (!claims) {
      claims = { pods: [], addresses: [] };
      this.#nodes.set(nodeName, claims);
    }
    return claims;
  }

  #dropIfEmpty(nodeName: string, claims: NodeClaims): void {
    if (claims.pods.length === 0 && claims.addresses.length === 0) this.#nodes.delete(nodeName);
  }

  /** Records the node's pod CIDRs (not their marks in the ranges) and the owner index. */
  #setPods(nodeName: string, claims: NodeClaims, pods: Prefix[]): void {
    for (const p of claims.pods) {
      const owners = this.#podOwners.get(rangeKey(p));
      owners?.delete(nodeName);
      if (owners?.size === 0) this.#podOwners.delete(rangeKey(p));
    }
    claims.pods = pods;
    for (const p of pods) {
      const key = rangeKey(p);
      const owners = this.#podOwners.get(key) ?? new Set<string>();
      owners.add(nodeName);
      this.#podOwners.set(key, owners);
    }
  }

  /**
   * Replaces the node's address reservations when `network` names any address. The new ones are
   * marked before the old ones are dropped, so an unchanged address never frees its subnet.
   */
  #setAddresses(claims: NodeClaims, network: NodeNetwork, warnings: string[]): void {
    if (network.addresses === undefined && network.nodeIPs === undefined) return;
    const old = claims.addresses;
    claims.addresses = ownAddresses(network, warnings);
    for (const p of claims.addresses) this.#claim(p);
    for (const p of old) this.#unclaim(p);
  }

  /** Why recording `p` for `nodeName` is suspicious, cheaply: the full scan runs only on a hit. */
  #conflicts(nodeName: string, p: Prefix): string[] {
    const out: string[] = [];
    const text = () => formatPrefix(p);
    const exact = [...(this.#podOwners.get(rangeKey(p)) ?? [])].some((n) => n !== nodeName);
    if (exact || this.#rangesOverlapping(p).some((r) => r.set.usedIn(p) > 0)) {
      for (const [other, c] of this.#nodes) {
        const clash = other !== nodeName && c.pods.find((q) => prefixesOverlap(p, q));
        if (clash)
          out.push(`Pod CIDR ${text()} of node ${nodeName} overlaps ${formatPrefix(clash)} of node ${other}`);
      }
    }
    for (const s of this.#services) {
      if (prefixesOverlap(s, p))
        out.push(`Pod CIDR ${text()} of node ${nodeName} overlaps service CIDR ${formatPrefix(s)}`);
    }
    // A CloudAllocator's IPv6 CIDRs live in the node's own prefix, outside the cluster CIDR.
    const inCluster = this.#clusterCIDRs.some((c) => prefixesOverlap(c, p));
    if (!inCluster && !(this.type === "CloudAllocator" && p.family === 6)) {
      out.push(`Pod CIDR ${text()} of node ${nodeName} is outside every cluster CIDR`);
    }
    return out;
  }

  /**
   * The range a CloudAllocator takes a node's IPv6 CIDR from: the first of its public prefixes with a
   * free subnet; undefined (the cluster CIDR) when it has no usable public prefix.
   * @throws {CidrNotAvailableError} when it has usable prefixes and all are exhausted.
   */
  #cloudRange(nodeName: string, network: NodeNetwork, warnings: string[]): Range | undefined {
    let exhausted: CidrSet | undefined;
    let skipped = false;
    for (const cidr of publicIPv6Prefixes(network)) {
      let sub: ReturnType<typeof cloudSubnet>;
      try {
        sub = cloudSubnet(cidr, network.maxPods ?? DEFAULT_MAX_PODS);
      } catch (err) {
        warnings.push(`Skipped prefix for node ${nodeName}: ${(err as Error).message}`);
        skipped = true;
        continue;
      }
      const range = this.#subnetRange(sub.subnet, sub.nodeMaskBits);
      if (range.set.free > 0) return range;
      exhausted = range.set;
    }
    if (exhausted) throw new CidrNotAvailableError(nodeName, exhausted.label);
    if (skipped) warnings.push(`Node ${nodeName} gets its IPv6 pod CIDR from the cluster CIDR`);
    return undefined;
  }

  /** The range for a discovered subnet, created on demand and filled with every claim overlapping it. */
  #subnetRange(subnet: Prefix, nodeMaskBits: number): Range {
    const key = rangeKey(subnet);
    const existing =
      this.#discovered.get(key) ?? this.#clusterRanges.find((r) => prefixEquals(r.set.cluster, subnet));
    if (existing) return existing;
    const range = newRange(new CidrSet(subnet, nodeMaskBits, this.#sets));
    const fill = (q: Prefix) => {
      if (prefixesOverlap(q, subnet)) claimIn(range, q);
    };
    this.#services.forEach(fill);
    for (const c of this.#nodes.values()) {
      c.pods.forEach(fill);
      c.addresses.forEach(fill);
    }
    this.#discovered.set(key, range);
    this.#discoveredLengths.add(subnet.bits);
    return range;
  }

  /** Ranges `p` overlaps; discovered ones found by lookup, since a CloudAllocator may have thousands. */
  #rangesOverlapping(p: Prefix): Range[] {
    const out = this.#clusterRanges.filter((r) => prefixesOverlap(r.set.cluster, p));
    if (p.family !== 6 || this.#discovered.size === 0) return out;
    const lengths = [...this.#discoveredLengths];
    if (lengths.some((bits) => bits > p.bits)) {
      for (const r of this.#discovered.values()) if (prefixesOverlap(r.set.cluster, p)) out.push(r);
      return out;
    }
    for (const bits of lengths) {
      const r = this.#discovered.get(rangeKey(prefixOf({ family: 6, value: p.addr }, bits)));
      if (r) out.push(r);
    }
    return out;
  }

  /** Marks `p` in every range it overlaps. */
  #claim(p: Prefix): void {
    for (const r of this.#rangesOverlapping(p)) claimIn(r, p);
  }

  /** Drops one mark of `p` (already gone from the records) from every range it overlaps. */
  #unclaim(p: Prefix): void {
    for (const r of this.#rangesOverlapping(p)) unclaimIn(r, p);
  }

  /** Drops discovered ranges nothing uses any more; they are rebuilt from the claims on demand. */
  #prune(): void {
    for (const [key, { set }] of this.#discovered) if (set.used === 0) this.#discovered.delete(key);
  }
}
