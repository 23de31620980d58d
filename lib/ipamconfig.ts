// Node IPAM's settings: the CloudAllocator's mask table (where a node's own IPv6 prefix puts its pod
// CIDRs) and the node-IPAM flags, resolved and checked before anything is allocated.

import {
  type Cidr,
  CidrError,
  familyBits,
  formatIP,
  formatPrefix,
  type Prefix,
  parsePrefix,
  prefixOf,
  tryParseCidr,
} from "./cidr.ts";
import { MAX_IPV6_MASK_DIFF } from "./cidrset.ts";

/** `--cidr-allocator-type`: which allocator node-ipam runs (lib/ipamallocator.ts). */
export type AllocatorType = "RangeAllocator" | "CloudAllocator";

/** kubelet's default `--max-pods`, assumed when a node has not reported its pod capacity. */
export const DEFAULT_MAX_PODS = 110;

/** The subnet a CloudAllocator carves for a node, and the per-node mask inside it. */
export interface CloudSubnet {
  subnet: Prefix;
  nodeMaskBits: number;
}

/**
 * Where pod CIDRs come from for a node holding the IPv6 interface address `cidr`. The reference's
 * table (cloud_allocator.go addCIDRSet) maps the prefix length to the per-node mask: shorter than /64
 * → the /64 holding the address, split into /80s; /64–/99 → +16 bits; /100–/105 → +8; /106–/111 →
 * +4; /112–/118 → +2; /119 → /120; /120–/123 → the prefix as is (one range: the node's whole subnet);
 * /124 and longer → too small. This follows it except for /120–/123, split in two (+1) here: as is,
 * the only range would hold the node's own address, which no pod CIDR may (the allocator keeps the
 * node's addresses out, so that range could never be handed out). A per-node subnet must also hold
 * `maxPods` addresses (2^(128-mask) − 2, as upstream counts), which the reference does not check.
 * @throws {CidrError} code `prefix-too-small`.
 * @example cloudSubnet(parseCidr("2001:db8:1:2::5/56")) // { subnet: 2001:db8:1:2::/64, nodeMaskBits: 80 }
 */
export function cloudSubnet(cidr: Cidr, maxPods = DEFAULT_MAX_PODS): CloudSubnet {
  const { ip, prefix } = cidr;
  const name = `${formatIP(ip)}/${prefix.bits}`;
  if (ip.family !== 6)
    throw new CidrError(`Cannot carve pod CIDRs from ${name}: not IPv6`, "prefix-too-small");
  const bits = prefix.bits;
  if (bits > 123) {
    throw new CidrError(
      `Cannot carve pod CIDRs from ${name}: the prefix is too small (/124 or longer)`,
      "prefix-too-small",
    );
  }
  const subnet = bits < 64 ? prefixOf(ip, 64) : prefix;
  let mask: number;
  if (bits < 64) mask = 80;
  else if (bits < 100) mask = bits + 16;
  else if (bits < 106) mask = bits + 8;
  else if (bits < 112) mask = bits + 4;
  else if (bits < 119) mask = bits + 2;
  // /119 → /120 as upstream; /120–/123 → +1 where upstream keeps the prefix as is (see above).
  else mask = bits + 1;
  const addresses = 2 ** (128 - mask) - 2;
  if (maxPods > addresses) {
    throw new CidrError(
      `Cannot carve pod CIDRs from ${name}: a /${mask} provides only ${addresses} addresses for ${maxPods} pods`,
      "prefix-too-small",
    );
  }
  return { subnet, nodeMaskBits: mask };
}

// ---------------------------------------------------------------------------------------------
// Node-IPAM flags.

/** Default `--node-cidr-mask-size-ipv4`. */
const DEFAULT_NODE_MASK_IPV4 = 24;
/** Default `--node-cidr-mask-size-ipv6`: 80 in the Talos CCM (Kubernetes' own default is 64). */
const DEFAULT_NODE_MASK_IPV6 = 80;

/**
 * The node-IPAM flags as given (the shape of flags.ts' IpamOptions). Entries may themselves be
 * comma lists; a mask size of 0 or undefined means unset, as in Kubernetes.
 */
export interface NodeIpamFlags {
  /** `--cluster-cidr` (or Talos' pod CIDRs when the flag is empty). */
  clusterCidrs: readonly string[];
  /** `--service-cluster-ip-range` (or Talos' service CIDRs when the flag is empty). */
  serviceCidrs?: readonly string[];
  nodeCidrMaskSize?: number;
  nodeCidrMaskSizeIpv4?: number;
  nodeCidrMaskSizeIpv6?: number;
}

/** Validated node-IPAM settings; `nodeMaskSizes[i]` belongs to `clusterCIDRs[i]`. */
export interface NodeIpamConfig {
  clusterCIDRs: Prefix[];
  nodeMaskSizes: number[];
  serviceCIDRs: Prefix[];
}

function configError(detail: string, cause?: unknown): CidrError {
  return new CidrError(
    `Cannot configure node IPAM: ${detail}`,
    "config",
    cause === undefined ? undefined : { cause },
  );
}

function parseList(flag: string, values: readonly string[]): Prefix[] {
  const items = values
    .flatMap((v) => v.split(","))
    .map((s) => s.trim())
    .filter((s) => s !== "");
  const prefixes = items.map((s) => {
    try {
      return parsePrefix(s);
    } catch (err) {
      throw configError(`${flag}: ${(err as Error).message}`, err);
    }
  });
  if (prefixes.length > 2)
    throw configError(`${flag} has ${prefixes.length} entries; at most two (one per family)`);
  const [a, b] = prefixes;
  if (a && b && a.family === b.family) {
    throw configError(`${flag} has two IPv${a.family} entries; dual-stack needs one IPv4 and one IPv6`);
  }
  return prefixes;
}

function maskFlag(name: string, value: number | undefined): number | undefined {
  if (value === undefined || value === 0) return undefined;
  if (!Number.isInteger(value) || value < 0 || value > 128)
    throw configError(`--${name}=${value} is not a prefix length`);
  return value;
}

/**
 * Checks a complete configuration: one or two cluster CIDRs of different families, node masks that
 * fit each (not shorter than the cluster mask, not longer than the family, at most 16 bits longer on
 * IPv6), at most two service CIDRs of different families.
 * @throws {CidrError} code `config`.
 */
export function validateNodeIpamConfig(cfg: NodeIpamConfig): void {
  const n = cfg.clusterCIDRs.length;
  if (n === 0) throw configError("no cluster CIDR (set --cluster-cidr or the Talos pod subnets)");
  if (n > 2) throw configError(`${n} cluster CIDRs; at most two (one per family)`);
  const [first, second] = cfg.clusterCIDRs;
  if (first && second && first.family === second.family) {
    throw configError(`two IPv${first.family} cluster CIDRs; dual-stack needs one IPv4 and one IPv6`);
  }
  if (cfg.nodeMaskSizes.length !== n) {
    throw configError(`${cfg.nodeMaskSizes.length} node mask sizes for ${n} cluster CIDRs`);
  }
  cfg.clusterCIDRs.forEach((cluster, i) => {
    const mask = cfg.nodeMaskSizes[i] as number;
    const name = formatPrefix(cluster);
    const flag = `--node-cidr-mask-size-ipv${cluster.family}`;
    if (!Number.isInteger(mask) || mask < cluster.bits) {
      throw configError(`node mask /${mask} (${flag}) is shorter than cluster CIDR ${name}`);
    }
    if (mask > familyBits(cluster.family)) {
      throw configError(`node mask /${mask} (${flag}) is longer than an IPv${cluster.family} address`);
    }
    if (cluster.family === 6 && mask - cluster.bits > MAX_IPV6_MASK_DIFF) {
      throw configError(
        `node mask /${mask} (${flag}) is ${mask - cluster.bits} bits longer than cluster CIDR ${name}; at most ${MAX_IPV6_MASK_DIFF} on IPv6 (use a cluster CIDR of /${mask - MAX_IPV6_MASK_DIFF} or shorter)`,
      );
    }
  });
  if (cfg.serviceCIDRs.length > 2) throw configError(`${cfg.serviceCIDRs.length} service CIDRs; at most two`);
  const [s1, s2] = cfg.serviceCIDRs;
  if (s1 && s2 && s1.family === s2.family) {
    throw configError(`two IPv${s1.family} service CIDRs; dual-stack needs one IPv4 and one IPv6`);
  }
}

/**
 * Turns the node-IPAM flags into a validated configuration, with the reference's rules for the mask
 * flags: `--node-cidr-mask-size` is refused on dual-stack and together with the per-family flags;
 * `-ipv4` is refused on single-stack IPv6 and `-ipv6` on single-stack IPv4; defaults /24 and /80.
 * @throws {CidrError} code `config`, with a message naming the flag.
 * @example resolveNodeIpamConfig({ clusterCidrs: ["10.244.0.0/16", "fd00:10:244::/64"] })
 */
export function resolveNodeIpamConfig(flags: NodeIpamFlags): NodeIpamConfig {
  const clusterCIDRs = parseList("--cluster-cidr", flags.clusterCidrs);
  const serviceCIDRs = parseList("--service-cluster-ip-range", flags.serviceCidrs ?? []);
  const both = maskFlag("node-cidr-mask-size", flags.nodeCidrMaskSize);
  const v4 = maskFlag("node-cidr-mask-size-ipv4", flags.nodeCidrMaskSizeIpv4);
  const v6 = maskFlag("node-cidr-mask-size-ipv6", flags.nodeCidrMaskSizeIpv6);
  const families = new Set(clusterCIDRs.map((p) => p.family));
  if (both !== undefined) {
    if (families.size > 1) {
      throw configError(
        "--node-cidr-mask-size is not allowed with dual-stack cluster CIDRs; use the -ipv4/-ipv6 flags",
      );
    }
    if (v4 !== undefined || v6 !== undefined) {
      throw configError("--node-cidr-mask-size cannot be combined with --node-cidr-mask-size-ipv4/-ipv6");
    }
  } else if (families.size === 1) {
    if (v4 !== undefined && families.has(6)) {
      throw configError("--node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster");
    }
    if (v6 !== undefined && families.has(4)) {
      throw configError("--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster");
    }
  }
  const nodeMaskSizes = clusterCIDRs.map((p) =>
    p.family === 4 ? (both ?? v4 ?? DEFAULT_NODE_MASK_IPV4) : (both ?? v6 ?? DEFAULT_NODE_MASK_IPV6),
  );
  const cfg = { clusterCIDRs, nodeMaskSizes, serviceCIDRs };
  validateNodeIpamConfig(cfg);
  return cfg;
}

/**
 * Whether node-ipam with these flags talks to Talos at all: for the pod and service CIDRs when
 * `--cluster-cidr` is not given, and for the nodes' IPv6 prefixes when a CloudAllocator has an IPv6
 * cluster CIDR. An IPv4-only cluster with `--cluster-cidr` never does.
 * @example nodeIpamNeedsTalos({ ...ipam, allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16"] }) // false
 */
export function nodeIpamNeedsTalos(
  ipam: Pick<NodeIpamFlags, "clusterCidrs"> & { allocateNodeCidrs: boolean; allocatorType: AllocatorType },
): boolean {
  if (!ipam.allocateNodeCidrs) return false;
  const cluster = ipam.clusterCidrs.flatMap((s) => s.split(",")).filter((s) => s.trim() !== "");
  if (cluster.length === 0) return true;
  return (
    ipam.allocatorType === "CloudAllocator" && cluster.some((s) => tryParseCidr(s.trim())?.ip.family === 6)
  );
}
