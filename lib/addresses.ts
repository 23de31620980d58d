// Node addresses from Talos facts, as pure functions: which IPs are the node's own (the kubelet's
// provided-node-ip annotation, else its InternalIP status addresses; of those, only the ones the
// machine Talos confirmed as the node has), which of its Talos addresses are public (the `external`
// link on clouds, discovery over every address on platforms without cloud metadata), and the list
// and order Kubernetes gets: the reference CCM's list, then re-sorted the way the cloud-provider
// framework puts the provided node IPs first.

import { canonicalIP, formatIP, isPublicUnicast, tryParseCidr } from "./cidr.ts";
import type { AddressStatus, NodeAddress } from "./types.ts";
import { PROVIDED_NODE_IP_ANNOTATION } from "./wellknown.ts";

/**
 * Platforms whose Talos metadata does not carry the public addresses, so that they are discovered
 * among the node's own addresses (the reference's list).
 */
const DISCOVERY_PLATFORMS: ReadonlySet<string> = new Set(["nocloud", "metal", "openstack", "oracle"]);

/** The link on which Talos puts a cloud's public addresses (from its metadata service). */
const EXTERNAL_LINK = "external";

/** Links that do not carry the node's own network: overlays, management, loopback (talos-api.md §3). */
const FOREIGN_LINKS: ReadonlySet<string> = new Set(["kubespan", "siderolink", "lo", "cilium_host"]);

/**
 * Whether a link's addresses are not the node's own network: KubeSpan, SideroLink, loopback,
 * Cilium's host address and `dummy*` links. Neither public-IP discovery nor node IPAM uses them.
 */
export function isForeignLink(linkName: string): boolean {
  return FOREIGN_LINKS.has(linkName) || linkName.startsWith("dummy");
}

/** IFA_F_PERMANENT: a static (not SLAAC-temporary or DHCP-leased) address. */
export const ADDRESS_PERMANENT = 0x80;

/**
 * Whether canonical IP text is IPv6: IPv6 text always holds a colon, IPv4 text never. Node IPs here
 * are read as `canonicalIP(text.trim(), "keep")`: spaces around a list entry dropped, and an
 * IPv4-mapped address kept IPv6 as Go's netip prints it (the family the kubelet gives it).
 */
function isIPv6Text(canonical: string): boolean {
  return canonical.includes(":");
}

/**
 * The first IPv4 and the first IPv6 address of `ips`, IPv4 first unless `preferIPv6`; entries that
 * are not addresses are skipped.
 * @example preferredDualStack(["fd00::1", "10.0.0.1", "10.0.0.2"], false) // ["10.0.0.1", "fd00::1"]
 */
export function preferredDualStack(ips: Iterable<string>, preferIPv6: boolean): string[] {
  let v4: string | undefined;
  let v6: string | undefined;
  for (const raw of ips) {
    const ip = canonicalIP(raw.trim(), "keep");
    if (ip === undefined) continue;
    if (isIPv6Text(ip)) v6 ??= ip;
    else v4 ??= ip;
  }
  const ordered = preferIPv6 ? [v6, v4] : [v4, v6];
  return ordered.filter((ip): ip is string => ip !== undefined);
}

/** The node's own IPs and where they came from. */
export interface NodeIPs {
  /** At most one IPv4 and one IPv6 address, in the configured preference order. */
  ips: string[];
  /**
   * The provided-node-ip annotation's usable addresses in the kubelet's order (its primary IP
   * first); empty when the IPs came from elsewhere.
   */
  provided: string[];
  /** `annotation`, `status` (the InternalIP addresses, when the annotation is absent or unusable) or `none`. */
  source: "annotation" | "status" | "none";
}

/** The parts of a Node that tell its IPs. */
export interface NodeIPSource {
  annotations: Readonly<Record<string, string>>;
  addresses: ReadonlyArray<{ type: string; address: string }>;
}

/**
 * The node's own IPs: the provided-node-ip annotation ("v4", "v6" or "v4,v6"), or, when it is
 * missing or holds no address, the node's InternalIP status addresses. At most one address per
 * family, IPv4 first unless `preferIPv6`.
 * @example nodeIPs({ annotations: { "alpha.kubernetes.io/provided-node-ip": "10.0.0.5" }, addresses: [] }, false)
 *   // { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" }
 */
export function nodeIPs(node: NodeIPSource, preferIPv6: boolean): NodeIPs {
  const annotation = node.annotations[PROVIDED_NODE_IP_ANNOTATION];
  if (annotation !== undefined) {
    const ips = preferredDualStack(annotation.split(","), preferIPv6);
    if (ips.length > 0) {
      return {
        ips,
        provided: preferredDualStack(annotation.split(","), isIPv6First(annotation)),
        source: "annotation",
      };
    }
  }
  const internal = node.addresses.filter((a) => a.type === "InternalIP").map((a) => a.address);
  const ips = preferredDualStack(internal, preferIPv6);
  return { ips, provided: [], source: ips.length > 0 ? "status" : "none" };
}

/**
 * The IPs of `ips` that the machine Talos confirmed as the node has, in the order of `ips`: the IP it
 * was confirmed on, and those among its AddressStatuses on any link. A kubelet only announces node
 * IPs its host has: it refuses a `--node-ip` found on none of the host's interfaces before it writes
 * the provided-node-ip annotation (kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go
 * `validateNodeIP`, called by the pkg/kubelet/nodestatus `NodeAddress` setter for the primary and the
 * secondary node IP), and Talos reports every address of every link. So an IP outside this list was
 * claimed, not configured: e.g. another node's IPv4 next to the kubelet's own IPv6.
 * @param confirmedIP the IP on which Talos confirmed the node's name.
 * @param addresses that machine's AddressStatuses.
 */
export function ipsOnMachine(
  ips: readonly string[],
  confirmedIP: string,
  addresses: readonly AddressStatus[],
): string[] {
  const own = new Set([canonicalIP(confirmedIP.trim(), "keep") ?? confirmedIP]);
  for (const a of addresses) {
    const cidr = tryParseCidr(a.address);
    if (cidr) own.add(formatIP(cidr.ip));
  }
  return ips.filter((ip) => own.has(canonicalIP(ip.trim(), "keep") ?? ip));
}

/** A node's IPs split by whether the machine Talos confirmed as the node has them. */
export interface NodeIPsOnMachine {
  /** The node's IPs less those the machine lacks (order and source kept). */
  onMachine: NodeIPs;
  /** The node IPs the machine lacks, in preference order: they are not the node's to use. */
  notOnMachine: string[];
}

/**
 * Splits the node's IPs by {@link ipsOnMachine}: only those the confirmed machine has become
 * InternalIPs (with the provided ones still first, {@link orderByNodeIPs}).
 * @param confirmedIP the IP on which Talos confirmed the node's name.
 * @param addresses that machine's AddressStatuses.
 * @example // annotation "10.0.0.9,fd00::5", confirmed on fd00::5, whose machine has fd00::5/64 and 10.0.0.5/24:
 *   // { onMachine: { ips: ["fd00::5"], provided: ["fd00::5"], source: "annotation" }, notOnMachine: ["10.0.0.9"] }
 */
export function nodeIPsOnMachine(
  ips: NodeIPs,
  confirmedIP: string,
  addresses: readonly AddressStatus[],
): NodeIPsOnMachine {
  const kept = ipsOnMachine(ips.ips, confirmedIP, addresses);
  const onMachine: NodeIPs = {
    ips: kept,
    provided: ips.provided.filter((ip) => kept.includes(ip)),
    source: kept.length > 0 ? ips.source : "none",
  };
  return { onMachine, notOnMachine: ips.ips.filter((ip) => !kept.includes(ip)) };
}

/** Whether the first address of a comma-separated list is IPv6 (the kubelet's primary family). */
function isIPv6First(list: string): boolean {
  for (const raw of list.split(",")) {
    const ip = canonicalIP(raw.trim(), "keep");
    if (ip !== undefined) return isIPv6Text(ip);
  }
  return false;
}

/** Public addresses found among the node's own, by family. */
export interface PublicIPs {
  ipv4: string[];
  ipv6: string[];
}

/**
 * Public-IP discovery over the node's AddressStatuses (in Talos' order, by resource id): global
 * unicast addresses that are not private and not a node IP, skipping the kubespan, siderolink, lo,
 * cilium_host and dummy* links. Permanent IPv6 addresses go before the others (each one found is
 * put at the front, as the reference does).
 */
export function discoverPublicIPs(
  nodeIPList: readonly string[],
  addresses: readonly AddressStatus[],
): PublicIPs {
  const out: PublicIPs = { ipv4: [], ipv6: [] };
  for (const a of byId(addresses)) {
    if (isForeignLink(a.linkName)) continue;
    const cidr = tryParseCidr(a.address);
    if (!cidr || !isPublicUnicast(cidr.ip)) continue;
    const ip = formatIP(cidr.ip);
    if (nodeIPList.includes(ip)) continue;
    if (cidr.ip.family === 4) out.ipv4.push(ip);
    else if ((a.flags & ADDRESS_PERMANENT) !== 0) out.ipv6.unshift(ip);
    else out.ipv6.push(ip);
  }
  return out;
}

/** The addresses Talos put on the `external` link (a cloud's public IPs), except node IPs. */
export function externalLinkIPs(
  nodeIPList: readonly string[],
  addresses: readonly AddressStatus[],
): PublicIPs {
  const out: PublicIPs = { ipv4: [], ipv6: [] };
  for (const a of byId(addresses)) {
    if (a.linkName !== EXTERNAL_LINK) continue;
    const cidr = tryParseCidr(a.address);
    if (!cidr) continue;
    const ip = formatIP(cidr.ip);
    if (nodeIPList.includes(ip)) continue;
    (cidr.ip.family === 4 ? out.ipv4 : out.ipv6).push(ip);
  }
  return out;
}

/** Talos lists resources sorted by id; the watch cache keeps them in arrival order. */
function byId(addresses: readonly AddressStatus[]): AddressStatus[] {
  return [...addresses].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * Re-sorts addresses so that each provided node IP comes first among the addresses of its type, the
 * primary (first) node IP ahead of the secondary one, as the cloud-provider framework does after a
 * cloud reports addresses (`GetNodeAddressesFromNodeIP`). Types keep the order in which they first
 * appear (upstream walks a Go map there, so its type order is random; a stable order avoids
 * rewriting the Node for nothing).
 * @param provided the annotation's node IPs in the kubelet's order; empty leaves `addresses` as is.
 */
export function orderByNodeIPs(
  provided: readonly string[],
  addresses: readonly NodeAddress[],
): NodeAddress[] {
  let list = [...addresses];
  for (let i = provided.length - 1; i >= 0; i--) {
    const nodeIP = provided[i] as string;
    const byType = new Map<NodeAddress["type"], string[]>();
    for (const a of list) {
      const bucket = byType.get(a.type) ?? [];
      if (canonicalIP(a.address.trim(), "keep") === nodeIP) bucket.unshift(a.address);
      else bucket.push(a.address);
      byType.set(a.type, bucket);
    }
    list = [...byType].flatMap(([type, bucket]) => bucket.map((address) => ({ type, address })));
  }
  return list;
}

/** What {@link nodeAddresses} works from. */
export interface NodeAddressInput {
  nodeName: string;
  /** The node's PlatformMetadata platform. */
  platform: string;
  /** The PlatformMetadata hostname, defaulted to the node name. */
  hostname: string;
  /** From {@link nodeIPs}. */
  nodeIPs: NodeIPs;
  addresses: readonly AddressStatus[];
  preferIPv6: boolean;
  /** A matching rule's `features.publicIPDiscovery`: discovery on any platform. */
  publicIPDiscovery: boolean;
}

/**
 * The Node's status addresses: InternalIP = the node IPs; ExternalIP = at most one public IPv4 and
 * one public IPv6 address (discovered on {@link DISCOVERY_PLATFORMS}, from the `external` link
 * elsewhere, discovered anywhere with `publicIPDiscovery`), ordered like the node IPs; Hostname =
 * the node name; InternalDNS = the metadata hostname when it is a dotted name. Then the provided node
 * IPs are moved first ({@link orderByNodeIPs}). Nothing the kubelet reported is kept: the list
 * always has a Hostname, the only type upstream would carry over.
 */
export function nodeAddresses(input: NodeAddressInput): NodeAddress[] {
  const own = input.nodeIPs.ips;
  const found = DISCOVERY_PLATFORMS.has(input.platform)
    ? discoverPublicIPs(own, input.addresses)
    : externalLinkIPs(own, input.addresses);
  if (input.publicIPDiscovery) {
    const more = discoverPublicIPs(own, input.addresses);
    found.ipv4.push(...more.ipv4);
    found.ipv6.push(...more.ipv6);
  }
  const list: NodeAddress[] = [
    ...own.map((address): NodeAddress => ({ type: "InternalIP", address })),
    ...preferredDualStack([...found.ipv4, ...found.ipv6], input.preferIPv6).map(
      (address): NodeAddress => ({ type: "ExternalIP", address }),
    ),
    { type: "Hostname", address: input.nodeName },
  ];
  if (input.hostname.indexOf(".") > 0) list.push({ type: "InternalDNS", address: input.hostname });
  return orderByNodeIPs(input.nodeIPs.provided, list);
}
