// Node IPAM: the allocator that owns every pod-CIDR decision (RangeAllocator and CloudAllocator
// semantics), as a synchronous state machine over CidrSets, and the node-ipam controller that feeds
// it Nodes and patches what it returns (startNodeIpam); nothing else touches CIDR state. The Talos
// client is only used, and only loaded, when the configuration needs it.

import { ADDRESS_PERMANENT, isForeignLink } from "./addresses.ts";
import type { Informer } from "./cache.ts";
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
import type { ControllerContext } from "./controller.ts";
import type { EventRecorder, EventTarget } from "./events.ts";
import type { AllocatorType, IpamOptions } from "./flags.ts";
import {
  cloudSubnet,
  DEFAULT_MAX_PODS,
  type NodeIpamConfig,
  resolveNodeIpamConfig,
  validateNodeIpamConfig,
} from "./ipamconfig.ts";
import { type KubeClient, KubeError, PATCH } from "./kube.ts";
import { sameList } from "./lists.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { type LeanNode, leanNode } from "./nodeview.ts";
import { registry as defaultRegistry } from "./processmetrics.ts";
import { type ReconcileResult, runWorkers, WorkQueue } from "./queue.ts";
import type { TalosClient } from "./talos.ts";
import type { AddressStatus } from "./types.ts";
import { PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT } from "./wellknown.ts";

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
  /** Where `node_ipam_controller_cidrset_*` go; the process registry by default. */
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
  readonly #registry: Registry;

  /**
   * @throws {CidrError} code `config` or `node-mask` when the configuration is impossible.
   */
  constructor(options: AllocatorOptions) {
    if (options.type !== "RangeAllocator" && options.type !== "CloudAllocator") {
      throw new CidrError(`Cannot create allocator: unknown type ${String(options.type)}`, "config");
    }
    validateNodeIpamConfig(options);
    this.type = options.type;
    this.#registry = options.registry ?? defaultRegistry;
    this.#clusterCIDRs = [...options.clusterCIDRs];
    this.#clusterRanges = options.clusterCIDRs.map((p, i) =>
      newRange(new CidrSet(p, options.nodeMaskSizes[i] as number, { registry: this.#registry })),
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
    const range = newRange(new CidrSet(subnet, nodeMaskBits, { registry: this.#registry }));
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

// ---------------------------------------------------------------------------------------------
// The node-ipam controller.

const log = logger("node-ipam");

/**
 * Failed podCIDRs patches of unknown outcome per `CIDRAssignmentFailed` Event: upstream's
 * range and cloud allocators try the patch `cidrUpdateRetries` = 3 times before they record one.
 */
const PATCH_ATTEMPTS_PER_EVENT = 3;

/**
 * Reconciles in parallel: each mostly waits for the API server or Talos; the allocator never does.
 * Upstream hard-codes its worker count and no flag sets it: `cidrUpdateWorkers = 30` in
 * k8s.io/kubernetes `pkg/controller/nodeipam/ipam/cidr_allocator.go`, copied by the Go Talos CCM's
 * `pkg/nodeipam/ipam/cidr_allocator.go`; `NodeIPAMControllerConfiguration` holds only the CIDR and
 * mask settings. So this is a constant too; it stays at this CCM's 10 rather than upstream's 30
 * (with the CloudAllocator each reconcile reads the node's addresses from Talos).
 */
export const NODE_IPAM_WORKERS = 10;

/**
 * Whether node-ipam with these flags talks to Talos at all: for the pod and service CIDRs when
 * `--cluster-cidr` is not given, and for the nodes' IPv6 prefixes when a CloudAllocator has an IPv6
 * cluster CIDR. An IPv4-only cluster with `--cluster-cidr` never does.
 * @example nodeIpamNeedsTalos({ ...ipam, allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16"] }) // false
 */
export function nodeIpamNeedsTalos(ipam: IpamOptions): boolean {
  if (!ipam.allocateNodeCidrs) return false;
  const cluster = ipam.clusterCidrs.flatMap((s) => s.split(",")).filter((s) => s.trim() !== "");
  if (cluster.length === 0) return true;
  return (
    ipam.allocatorType === "CloudAllocator" && cluster.some((s) => tryParseCidr(s.trim())?.ip.family === 6)
  );
}

/**
 * The node-IPAM configuration: the flags, completed from Talos' ControllerManagerConfig (read
 * without a `node` header) when a CIDR flag is missing and {@link nodeIpamNeedsTalos}. Without
 * `--service-cluster-ip-range` and without Talos, no service range is reserved (as in Kubernetes).
 * @param talos the Talos client; only touched when the configuration needs it.
 * @throws {CidrError} code `config`, with a message naming the flag or the Talos failure.
 */
export async function nodeIpamConfig(
  ipam: IpamOptions,
  talos: TalosClient | undefined,
  signal?: AbortSignal,
): Promise<NodeIpamConfig> {
  let { clusterCidrs, serviceCidrs } = ipam;
  const fromFlag = clusterCidrs.length > 0;
  if (!fromFlag && !talos) {
    throw new CidrError(
      "Cannot configure node IPAM: no --cluster-cidr and no Talos API access to read the pod subnets from",
      "config",
    );
  }
  if (talos && nodeIpamNeedsTalos(ipam) && (!fromFlag || serviceCidrs.length === 0)) {
    try {
      const cmc = await talos.controllerManagerConfig(signal ? { signal } : {});
      if (!fromFlag) clusterCidrs = cmc.podCIDRs;
      if (serviceCidrs.length === 0) serviceCidrs = cmc.serviceCIDRs;
      log.info("Read the cluster's subnets from Talos", {
        podCIDRs: cmc.podCIDRs.join(","),
        serviceCIDRs: cmc.serviceCIDRs.join(","),
      });
    } catch (err) {
      if (!fromFlag) {
        throw new CidrError(
          `Cannot configure node IPAM: cannot read the pod subnets from Talos (or set --cluster-cidr): ${(err as Error).message}`,
          "config",
          { cause: err },
        );
      }
      log.warn("Cannot read the service subnets from Talos; no service range is reserved", {
        err: (err as Error).message,
      });
    }
  }
  if (serviceCidrs.length === 0) log.info("No service CIDR known; no service range is reserved");
  return resolveNodeIpamConfig({ ...ipam, clusterCidrs, serviceCidrs });
}

/**
 * The addresses node-ipam keeps out of pod CIDRs and takes IPv6 prefixes from: the node's Talos
 * AddressStatuses without the links that do not carry its own network (KubeSpan, SideroLink,
 * loopback, dummies, Cilium's host address), permanent IPv6 first, otherwise in Talos' order.
 * @returns `address/length` strings, as {@link NodeNetwork.addresses} takes them.
 */
export function ipamAddresses(statuses: readonly AddressStatus[]): string[] {
  const own = statuses.filter((a) => !isForeignLink(a.linkName));
  const first = (a: AddressStatus) => a.family === "inet6" && (a.flags & ADDRESS_PERMANENT) !== 0;
  return [...own.filter(first), ...own.filter((a) => !first(a))].map((a) => a.address);
}

/**
 * The IPs a Node is known by: its status InternalIPs, then ExternalIPs, then the kubelet's
 * provided-node-ip values, without duplicates (the reference's GetNodeIPs, InternalIPs first because
 * apid reaches nodes on those).
 */
export function nodeIPsOf(node: LeanNode): string[] {
  const of = (type: string) => node.status.addresses.filter((a) => a.type === type).map((a) => a.address);
  const provided = (node.metadata.annotations[PROVIDED_NODE_IP_ANNOTATION] ?? "")
    .split(",")
    .map((s) => s.trim());
  return [...new Set([...of("InternalIP"), ...of("ExternalIP"), ...provided])].filter((s) => s !== "");
}

/**
 * A JSON patch setting `spec.podCIDRs` and `spec.podCIDR` (the first) only while both are unset: a
 * concurrent writer is never overwritten, the API server refuses the patch instead (422).
 */
export function podCIDRsPatch(podCIDRs: readonly string[]): Array<Record<string, unknown>> {
  return [
    { op: "test", path: "/spec/podCIDRs", value: null },
    { op: "test", path: "/spec/podCIDR", value: null },
    { op: "add", path: "/spec/podCIDRs", value: [...podCIDRs] },
    { op: "add", path: "/spec/podCIDR", value: podCIDRs[0] },
  ];
}

/** A refusal that will not change by retrying the same request (the request was not applied). */
function isRefusal(err: unknown): boolean {
  return (
    err instanceof KubeError &&
    err.status >= 400 &&
    err.status < 500 &&
    err.status !== 408 &&
    err.status !== 429
  );
}

/** What the controller works with. */
interface ControllerDeps {
  allocator: Allocator;
  client: KubeClient;
  nodes: Informer<LeanNode>;
  events: EventRecorder;
  /** Present only when the CloudAllocator takes IPv6 pod CIDRs from the nodes' own prefixes. */
  talos?: TalosClient;
  registry?: Registry;
}

/**
 * Feeds the allocator from the Node cache and writes its answers: occupies what Nodes hold,
 * allocates for Nodes without pod CIDRs and patches them, releases on deletion. Reconciles run in
 * parallel, but every allocator call is synchronous, so no two nodes can get the same range.
 */
class NodeIpamController {
  readonly #allocator: Allocator;
  readonly #client: KubeClient;
  readonly #nodes: Informer<LeanNode>;
  readonly #events: EventRecorder;
  readonly #talos: TalosClient | undefined;
  readonly #cloud: boolean;
  readonly #queue: WorkQueue;
  /** Nodes that found no free range: retried at once when a range is released. */
  readonly #waiting = new Set<string>();

  constructor(deps: ControllerDeps) {
    this.#allocator = deps.allocator;
    this.#client = deps.client;
    this.#nodes = deps.nodes;
    this.#events = deps.events;
    this.#talos = deps.talos;
    this.#cloud = deps.allocator.type === "CloudAllocator";
    this.#queue = new WorkQueue("cidrallocator_node", {
      baseDelayMs: 250,
      maxDelayMs: 300_000,
      ...(deps.registry ? { registry: deps.registry } : {}),
    });
  }

  /** Occupies every cached Node's pod CIDRs, then reconciles Nodes until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    let occupied = 0;
    for (const node of this.#nodes.list()) {
      if (!node.spec.podCIDRs?.length) continue;
      this.#occupy(node, true);
      occupied++;
    }
    log.info("Starting node IPAM", {
      allocator: this.#allocator.type,
      ranges: this.#allocator
        .status()
        .map((r) => `${r.clusterCIDR}:/${r.nodeMaskBits}`)
        .join(","),
      occupiedNodes: occupied,
    });
    const stop = () => this.#queue.shutDown();
    signal.addEventListener("abort", stop, { once: true });
    if (signal.aborted) stop();
    this.#nodes.addHandlers({
      onAdd: (n) => this.#queue.add(n.metadata.name),
      onUpdate: (old, n) => {
        if (this.#needsWork(old, n)) this.#queue.add(n.metadata.name);
      },
      onDelete: (n) => this.#release(n.metadata.name),
    });
    await runWorkers(this.#queue, NODE_IPAM_WORKERS, (name) => this.#reconcile(name, signal), log);
    signal.removeEventListener("abort", stop);
    log.info("Stopped node IPAM");
  }

  /** Heartbeats of Nodes that hold their CIDRs, or that wait for a free range, change nothing here. */
  #needsWork(old: LeanNode, node: LeanNode): boolean {
    if (node.metadata.deletionTimestamp) return !old.metadata.deletionTimestamp;
    if (node.spec.podCIDRs?.length) return !sameList(old.spec.podCIDRs, node.spec.podCIDRs);
    return !this.#waiting.has(node.metadata.name);
  }

  async #reconcile(name: string, signal: AbortSignal): Promise<ReconcileResult | undefined> {
    const node = this.#nodes.get(name);
    if (!node || node.metadata.deletionTimestamp) {
      this.#release(name);
      return undefined;
    }
    if (node.spec.podCIDRs?.length) {
      this.#occupy(node, false);
      return undefined;
    }
    // As upstream's CloudAllocator: the node's addresses are known once cloud-node initialized it.
    if (this.#cloud && node.spec.taints.some((t) => t.key === UNINITIALIZED_TAINT)) return undefined;
    const network = await this.#network(node, signal);
    const now = this.#nodes.get(name);
    if (
      !now ||
      now.metadata.uid !== node.metadata.uid ||
      now.metadata.deletionTimestamp ||
      now.spec.podCIDRs?.length
    ) {
      return { requeueAfterMs: 0 };
    }
    let allocation: Allocation;
    try {
      allocation = this.#allocator.allocate(name, network);
    } catch (err) {
      if (err instanceof CidrNotAvailableError) {
        this.#waiting.add(name);
        this.#event(node, "Warning", err.code, "AllocateCIDR", err.message);
      }
      throw err;
    }
    this.#waiting.delete(name);
    for (const w of allocation.warnings) log.v(2).info("Pod CIDR allocation note", { node: name, note: w });
    await this.#setPodCIDRs(node, allocation.podCIDRs, signal);
    return undefined;
  }

  /** What the allocator may know of the node: its IPs, pod capacity and, for IPv6 clouds, Talos' addresses. */
  async #network(node: LeanNode, signal: AbortSignal): Promise<NodeNetwork> {
    const nodeIPs = nodeIPsOf(node);
    const network: NodeNetwork = { nodeIPs };
    if (node.status.maxPods !== undefined) network.maxPods = node.status.maxPods;
    const talos = this.#talos;
    if (!talos) return network;
    const { value } = await talos.firstAnswer(nodeIPs, (ip, o) => talos.addresses(ip, o), { signal });
    network.addresses = ipamAddresses(value);
    return network;
  }

  /**
   * Patches the node's pod CIDRs once; a failure is thrown back to the queue, which retries the node
   * with per-item backoff. On a refusal the API server's Node decides (someone else set them, or it is
   * gone) and a definite failure releases the range; an unknown outcome keeps it for the next attempt
   * (the allocator hands the node the same CIDRs again) and records `CIDRAssignmentFailed` every
   * {@link PATCH_ATTEMPTS_PER_EVENT} attempts.
   */
  async #setPodCIDRs(node: LeanNode, podCIDRs: string[], signal: AbortSignal): Promise<void> {
    const name = node.metadata.name;
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    try {
      await this.#client.patch(path, podCIDRsPatch(podCIDRs), PATCH.json, { signal });
      log.info("Set node PodCIDR", { node: name, podCIDRs: podCIDRs.join(",") });
    } catch (err) {
      if (signal.aborted) throw err;
      const refused = isRefusal(err);
      if (refused) {
        if (await this.#settle(name, signal)) return;
        this.#release(name);
      }
      const message = `Cannot set pod CIDRs ${podCIDRs.join(",")} of node ${name}: ${(err as Error).message}`;
      // The queue counts this node's failed reconciles in a row; this attempt is not counted yet.
      const attempt = this.#queue.failures(name) + 1;
      if (refused || attempt % PATCH_ATTEMPTS_PER_EVENT === 0) {
        this.#event(node, "Warning", "CIDRAssignmentFailed", "AllocateCIDR", message);
      }
      throw new Error(message, { cause: err });
    }
  }

  /**
   * After a refused patch, reads the Node from the API server: gone → release; pod CIDRs set by
   * someone (or by an earlier attempt) → occupy those instead. False when it still has none.
   */
  async #settle(name: string, signal: AbortSignal): Promise<boolean> {
    let raw: unknown;
    try {
      raw = await this.#client.get(`/api/v1/nodes/${encodeURIComponent(name)}`, { signal });
    } catch (err) {
      if (!(err instanceof KubeError && err.status === 404)) throw err;
      this.#release(name);
      return true;
    }
    const fresh = leanNode(raw);
    if (!fresh.spec.podCIDRs?.length) return false;
    this.#occupy(fresh, false);
    return true;
  }

  /**
   * Records the CIDRs a Node holds. `withNodeIPs` also reserves its status IPs; later calls leave the
   * reservations made at allocation (Talos' addresses included) alone.
   */
  #occupy(node: LeanNode, withNodeIPs: boolean): void {
    const name = node.metadata.name;
    const podCIDRs = node.spec.podCIDRs ?? [];
    let warnings: string[];
    try {
      warnings = this.#allocator.occupy(name, podCIDRs, withNodeIPs ? { nodeIPs: nodeIPsOf(node) } : {});
    } catch (err) {
      log.error("Cannot record the pod CIDRs of a node", err, {
        node: name,
        podCIDRs: podCIDRs.join(","),
      });
      this.#event(node, "Warning", "InvalidPodCIDR", "OccupyCIDR", (err as Error).message);
      return;
    }
    this.#waiting.delete(name);
    for (const w of warnings) {
      log.warn("Pod CIDR conflict", { node: name, warning: w });
      this.#event(node, "Warning", "PodCIDRConflict", "OccupyCIDR", w);
    }
  }

  /** Frees a node's ranges (idempotent) and retries the nodes that found none. */
  #release(name: string): void {
    this.#waiting.delete(name);
    const freed = this.#allocator.release(name);
    if (freed.length === 0) return;
    log.info("Released node PodCIDR", { node: name, podCIDRs: freed.join(",") });
    for (const w of this.#waiting) this.#queue.add(w);
  }

  #event(node: LeanNode, type: "Normal" | "Warning", reason: string, action: string, note: string): void {
    const target: EventTarget = { kind: "Node", name: node.metadata.name };
    if (node.metadata.uid) target.uid = node.metadata.uid;
    void this.#events.record(target, type, reason, action, note);
  }
}

/**
 * The node-ipam controller: with `--allocate-node-cidrs`, resolves the configuration (see
 * {@link nodeIpamConfig}), occupies the pod CIDRs Nodes already hold, then gives every Node without
 * pod CIDRs one per cluster CIDR (CloudAllocator: IPv6 from its own public prefix) until `signal`
 * aborts. Exhausted ranges give a `CIDRNotAvailable` Event and a retry, never a crash.
 * @throws {CidrError} code `config` when the configuration is impossible: start-up must stop.
 */
export async function startNodeIpam(ctx: ControllerContext, signal: AbortSignal): Promise<void> {
  const ipam = ctx.options.ipam;
  if (!ipam.allocateNodeCidrs) {
    log.info("Not allocating pod CIDRs: --allocate-node-cidrs is not set");
    return;
  }
  const config = await nodeIpamConfig(ipam, ctx.talos, signal);
  const allocator = new Allocator({ type: ipam.allocatorType, registry: ctx.registry, ...config });
  const ipv6FromTalos =
    allocator.type === "CloudAllocator" && config.clusterCIDRs.some((p) => p.family === 6);
  if (ipv6FromTalos && !ctx.talos) {
    throw new CidrError(
      "Cannot configure node IPAM: the CloudAllocator needs Talos API access for the nodes' IPv6 prefixes",
      "config",
    );
  }
  const controller = new NodeIpamController({
    allocator,
    client: ctx.client,
    nodes: ctx.nodes,
    events: ctx.events,
    registry: ctx.registry,
    ...(ipv6FromTalos && ctx.talos ? { talos: ctx.talos } : {}),
  });
  await controller.run(signal);
}
