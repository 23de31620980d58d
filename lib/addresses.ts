// A Node's addresses, decided in one call ({@link decideAddresses}), pure: which of the node's IPs
// (lib/nodeview.ts nodeIPs: the kubelet's provided-node-ip annotation, else its InternalIPs) the
// machine Talos confirmed as the node has, which of its Talos addresses are public (the `external`
// link on clouds, discovery over every address on platforms without cloud metadata), and the list
// and order Kubernetes gets: the reference CCM's list, then re-sorted the way the cloud-provider
// framework puts the provided node IPs first. Node IPAM (lib/ipam.ts) and the Talos watch cache
// reuse the link and machine helpers.

import { canonicalIP, formatIP, isPublicUnicast, preferredDualStack, tryParseCidr } from "./cidr.ts";
import type { NodeIPs } from "./nodeview.ts";
import type { AddressStatus, NodeAddress } from "./types.ts";

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
  const has = new Set(kept);
  const onMachine: NodeIPs = {
    ips: kept,
    provided: ips.provided.filter((ip) => has.has(ip)),
    source: kept.length > 0 ? ips.source : "none",
  };
  return { onMachine, notOnMachine: ips.ips.filter((ip) => !has.has(ip)) };
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
  const nodeIPSet = new Set(nodeIPList);
  for (const a of byId(addresses)) {
    if (isForeignLink(a.linkName)) continue;
    const cidr = tryParseCidr(a.address);
    if (!cidr || !isPublicUnicast(cidr.ip)) continue;
    const ip = formatIP(cidr.ip);
    if (nodeIPSet.has(ip)) continue;
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
  const nodeIPSet = new Set(nodeIPList);
  for (const a of byId(addresses)) {
    if (a.linkName !== EXTERNAL_LINK) continue;
    const cidr = tryParseCidr(a.address);
    if (!cidr) continue;
    const ip = formatIP(cidr.ip);
    if (nodeIPSet.has(ip)) continue;
    (cidr.ip.family === 4 ? out.ipv4 : out.ipv6).push(ip);
  }
  return out;
}

/**
 * Talos lists resources sorted by id; the watch cache keeps them in arrival order. A list already in
 * order (a List's, a bootstrap's) is not copied or sorted: one pass tells.
 */
function byId(addresses: readonly AddressStatus[]): readonly AddressStatus[] {
  let sorted = true;
  for (let i = 1; i < addresses.length && sorted; i++) {
    sorted = (addresses[i - 1] as AddressStatus).id <= (addresses[i] as AddressStatus).id;
  }
  if (sorted) return addresses;
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
  /** The node's IPs (lib/nodeview.ts nodeIPs), less those its machine lacks. */
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
  const discovers = DISCOVERY_PLATFORMS.has(input.platform);
  const found = discovers ? discoverPublicIPs(own, input.addresses) : externalLinkIPs(own, input.addresses);
  // On a discovery platform a second discovery would only repeat the first (one pass over the addresses).
  if (input.publicIPDiscovery && !discovers) {
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

/** What {@link decideAddresses} works from: the Node's IPs, the machine Talos confirmed, the rules' choice. */
export interface AddressInput extends Omit<NodeAddressInput, "nodeIPs"> {
  /** The node's IPs as the Node states them (lib/nodeview.ts nodeIPs). */
  nodeIPs: NodeIPs;
  /** The IP on which Talos confirmed the node's name (the machine whose `addresses` these are). */
  confirmedIP: string;
}

/** A Node's addresses as decided: the status list, and which node IPs its machine has. */
export interface AddressDecision {
  /** The Node's status.addresses ({@link nodeAddresses} of the IPs on the machine). */
  addresses: NodeAddress[];
  /** The node IPs split by whether the confirmed machine has them ({@link nodeIPsOnMachine}). */
  ips: NodeIPsOnMachine;
}

/**
 * A Node's addresses, the one decision about them per pass: the node IPs the confirmed machine has
 * ({@link nodeIPsOnMachine}; a node IP it lacks is not written and is reported by the caller), then
 * the status list from those ({@link nodeAddresses}).
 * @example // annotation "10.0.0.5", confirmed on 10.0.0.5, machine with 10.0.0.5/24 and 203.0.113.7/32 on `external`:
 *   // addresses: InternalIP 10.0.0.5, ExternalIP 203.0.113.7, Hostname <node>; ips.notOnMachine: []
 */
export function decideAddresses(input: AddressInput): AddressDecision {
  const { confirmedIP, ...rest } = input;
  const ips = nodeIPsOnMachine(input.nodeIPs, confirmedIP, input.addresses);
  return { addresses: nodeAddresses({ ...rest, nodeIPs: ips.onMachine }), ips };
}
