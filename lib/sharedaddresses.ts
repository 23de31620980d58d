// Names and addresses that never identify one machine, as pure functions and one index, for the CSR
// policy (lib/csr.ts): a kubelet serving certificate may name only its own machine, so a SAN that
// every host has (loopback, link-local), that many hosts share (a Service IP, a pod network, a
// virtual IP that moves between control-plane nodes, an address on a dummy interface such as
// kube-ipvs0), that resolves to whoever asks (`localhost`) or that a client reads as an address (a DNS
// name spelling an IP, an IPv6 form of an IPv4 host) is refused whoever asks for it. DNS names are
// compared in one canonical form (`canonicalDNS`), as Go's crypto/x509 compares host names. What
// blocks (excluded prefixes, addresses on shared links, cluster ranges) is read by lib/ipspelling.ts
// in every way a client may read it.

import {
  formatIP,
  formatPrefix,
  type IPAddress,
  isLinkLocal,
  isLoopback,
  isMulticast,
  isUnspecified,
  lastAddress,
  type Prefix,
  prefixContains,
  prefixOf,
  tryParseCidr,
  tryParseIP,
  tryParsePrefix,
  unmapIPv4,
} from "./cidr.ts";
import { dnsNameAsIP, embeddedIPv4, ipReadings, prefixReadings } from "./ipspelling.ts";
import { isDNS1123Subdomain } from "./kubevalidation.ts";
import { addName, type Names, namesOf, removeName } from "./nameindex.ts";
import type { AddressStatus } from "./types.ts";

// ---------------------------------------------------------------------------------------------
// DNS names

/**
 * The one form DNS names are compared in: ASCII letters lower-cased (only ASCII: a certificate's
 * dNSName is an IA5String, and Unicode case folding would let `K` (U+212A) match `k`) and one
 * trailing dot removed, as Go's crypto/x509 does before it matches a host name.
 * @example canonicalDNS("Node-B.") // "node-b"
 */
export function canonicalDNS(name: string): string {
  const lower = name.replace(/[A-Z]+/g, (s) => s.toLowerCase());
  return lower.endsWith(".") ? lower.slice(0, -1) : lower;
}

/** Names every host resolves to itself. */
const LOCAL_NAMES: ReadonlySet<string> = new Set(["localhost", "localhost.localdomain"]);

/**
 * Why a DNS SAN can name no single machine, or undefined when it may. Judged on the canonical form:
 * not a valid host name (after the one trailing dot; Go's verifier never matches such a name),
 * `localhost` and `*.localhost` (RFC 6761: always the local host), the API server's own names
 * (`kubernetes`, `kubernetes.*`), Service and Pod DNS names (`<svc>.<ns>.svc[.<domain>]`,
 * `<ip>.<ns>.pod[.<domain>]`), which name cluster objects, and names a client reads as an IP
 * address (`dnsNameAsIP()` of lib/ipspelling.ts: `10.2`, `167772162`, `0xa.0.0.2`, any name whose
 * last label is numeric, names under ipv6-literal.net) — an address is judged as an IP SAN only.
 * @param name the SAN as requested
 * @example reservedName("LOCALHOST.") // "names the local host of whoever resolves it"
 * @example reservedName("10.0.0.02") // "is read as IP address 10.0.0.2 by inet_aton …"
 */
export function reservedName(name: string): string | undefined {
  const c = canonicalDNS(name);
  if (isDNS1123Subdomain(c).length > 0) return "is not a valid DNS name";
  const address = dnsNameAsIP(c);
  if (address) return address.why;
  if (LOCAL_NAMES.has(c) || c.endsWith(".localhost")) return "names the local host of whoever resolves it";
  if (c === "kubernetes" || c.startsWith("kubernetes.")) return "names the Kubernetes API service";
  const labels = c.split(".");
  const kind = labels.findIndex((l, i) => i >= 2 && (l === "svc" || l === "pod"));
  if (kind >= 2) return `is a Kubernetes ${labels[kind] === "svc" ? "Service" : "Pod"} name`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Addresses every host has, or no host may claim

/**
 * The canonical text of an address that may carry a prefix length, as Talos reports addresses
 * (`10.0.0.5/24`): IPv4-mapped IPv6 as IPv4, IPv6 zero-compressed.
 * @returns undefined when `address` is no address
 * @example canonicalHost("::ffff:10.0.0.5/120") // "10.0.0.5"
 */
export function canonicalHost(address: string): string | undefined {
  const ip = tryParseCidr(address)?.ip ?? tryParseIP(address);
  return ip && formatIP(unmapIPv4(ip));
}

/** IPv4 ranges that name no single machine, beyond what the `cidr.ts` predicates cover. */
const SPECIAL_V4: ReadonlyArray<{ prefix: Prefix; what: string }> = [
  { prefix: builtInPrefix("0.0.0.0/8"), what: "in 0.0.0.0/8 (this network)" },
  { prefix: builtInPrefix("240.0.0.0/4"), what: "reserved (240.0.0.0/4) or the broadcast address" },
];

/**
 * IPv6 ranges that name no single machine, beyond the `cidr.ts` predicates and the forms that embed
 * an IPv4 address (`embeddedIPv4()`).
 */
const SPECIAL_V6: ReadonlyArray<{ prefix: Prefix; what: string }> = [
  { prefix: builtInPrefix("100::/64"), what: "a discard-only address (100::/64)" },
  { prefix: builtInPrefix("fec0::/10"), what: "a site-local address (fec0::/10, deprecated)" },
];

function builtInPrefix(text: string): Prefix {
  const p = tryParsePrefix(text);
  if (!p) throw new Error(`bad built-in prefix ${text}`);
  return p;
}

/**
 * Why an IP SAN can identify no single machine whoever asks, or undefined: unspecified,
 * loopback, link-local (the same addresses on every link), multicast, broadcast and reserved
 * ranges, and IPv6 forms that carry an IPv4 address (`embeddedIPv4()` of lib/ipspelling.ts:
 * IPv4-compatible, SIIT, NAT64, 6to4, Teredo, ISATAP), which reach an IPv4 host through a
 * translator or relay shared by design. An IPv4-mapped address is judged as the IPv4 address it
 * maps: it is that address to every dual-stack socket and to Go's `net.IP.Equal`.
 * @example specialIP(parseIP("127.0.0.1")) // "a loopback address"
 * @example specialIP(parseIP("2002:a00:2::1")) // "a 6to4 address (2002::/16, deprecated) carrying IPv4 10.0.0.2, …"
 */
export function specialIP(address: IPAddress): string | undefined {
  const ip = unmapIPv4(address);
  if (isUnspecified(ip)) return "the unspecified address";
  if (isLoopback(ip)) return "a loopback address";
  if (isLinkLocal(ip)) return "a link-local address";
  if (isMulticast(ip)) return "a multicast address";
  for (const r of ip.family === 4 ? SPECIAL_V4 : SPECIAL_V6) if (prefixContains(r.prefix, ip)) return r.what;
  const embedded = embeddedIPv4(ip);
  if (embedded) {
    const v4 = embedded.ipv4.map(formatIP).join(" or ");
    return `${embedded.kind} carrying IPv4 ${v4}, a host reached through a translator or relay`;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// What the cluster shares

/** What the policy asks of the cluster's shared networks; see {@link ClusterNetworks}. */
export interface NetworkView {
  /** The Service or pod range holding `ip`, described with its source; undefined when none does. */
  rangeOf(ip: IPAddress): string | undefined;
  /** Why the DNS name (canonical, see {@link canonicalDNS}) is shared, or undefined. */
  sharedName(name: string): string | undefined;
  /** A count that changes whenever an answer of this view may change (a decision's snapshot key). */
  readonly generation: number;
}

/** A view of no shared networks: what a caller with no cluster facts passes (tests). */
export const NO_NETWORKS: NetworkView = {
  rangeOf: () => undefined,
  sharedName: () => undefined,
  generation: 0,
};

/** Whether two sources' entries say the same. */
function sameGroup(a: Group, b: Group): boolean {
  const samePrefix = (p: Prefix, i: number) => {
    const q = b.prefixes[i];
    return q !== undefined && p.family === q.family && p.bits === q.bits && p.addr === q.addr;
  };
  return (
    a.what === b.what &&
    a.prefixes.length === b.prefixes.length &&
    a.names.length === b.names.length &&
    a.prefixes.every(samePrefix) &&
    a.names.every((n, i) => n === b.names[i])
  );
}

/** One source's entries, kept to replace them when the source changes. */
interface Group {
  prefixes: Prefix[];
  names: string[];
  what: string;
}

/** The networks of one prefix length in one family, by network address. */
interface RangeLength {
  family: 4 | 6;
  bits: number;
  nets: Map<bigint, Names>;
}

/**
 * The cluster's Service and pod ranges and its shared names, each from a named source (a flag, a
 * ServiceCIDR object, a Node's podCIDRs, Talos, the kubeconfig), replaced as the source changes.
 * A lookup costs one map probe per distinct prefix length, so the pod CIDRs of thousands of Nodes
 * cost no scan per CSR, and each costs one map entry.
 */
export class ClusterNetworks implements NetworkView {
  readonly #groups = new Map<string, Group>();
  /** Longest prefix length first, so that a lookup names the most specific range. */
  #lengths: RangeLength[] = [];
  readonly #names = new Map<string, Names>();
  #generation = 0;

  /** Changes whenever a source's entries change (not when one is set again to what it said). */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Sets (replaces) what source `group` says; setting what it already says changes nothing (a
   * Node's pod CIDRs are set again at each of its updates).
   * @param group a stable key, e.g. `node/worker-1` or `servicecidr/kubernetes`
   * @param what how the source is named in a denial, e.g. `pod CIDR of node "worker-1"`
   * @param entries CIDRs (`10.96.0.0/12`; host bits are cleared; a single address is `/32` or
   *   `/128`), read by `prefixReadings()` (so `::ffff:10.96.0.0/108` is `10.96.0.0/12` too, and a
   *   sloppy `010.96.0.0/12` holds every reading), and DNS names
   * @returns the CIDRs that are not, for the caller to report
   */
  set(
    group: string,
    what: string,
    entries: { cidrs?: readonly string[]; names?: readonly string[] },
  ): string[] {
    const bad: string[] = [];
    const g: Group = { prefixes: [], names: [], what };
    for (const text of entries.cidrs ?? []) {
      const prefixes = prefixReadings(text, { single: false });
      if (prefixes.length) g.prefixes.push(...prefixes);
      else bad.push(text);
    }
    for (const name of entries.names ?? []) g.names.push(canonicalDNS(name));
    const was = this.#groups.get(group);
    if (was !== undefined && sameGroup(was, g)) return bad;
    this.delete(group);
    if (g.prefixes.length + g.names.length === 0) return bad;
    this.#generation++;
    this.#groups.set(group, g);
    for (const p of g.prefixes) addName(this.#length(p).nets, p.addr, group);
    for (const n of g.names) addName(this.#names, n, group);
    return bad;
  }

  /** Forgets what source `group` said. */
  delete(group: string): void {
    const g = this.#groups.get(group);
    if (!g) return;
    this.#generation++;
    this.#groups.delete(group);
    for (const p of g.prefixes) removeName(this.#length(p).nets, p.addr, group);
    if (g.prefixes.length) this.#lengths = this.#lengths.filter((l) => l.nets.size > 0);
    for (const n of g.names) removeName(this.#names, n, group);
  }

  /** The sources currently known, for logs: group → description. */
  sources(): Map<string, string> {
    return new Map([...this.#groups].map(([k, g]) => [k, g.what]));
  }

  rangeOf(address: IPAddress): string | undefined {
    const ip = unmapIPv4(address);
    for (const l of this.#lengths) {
      if (l.family !== ip.family) continue;
      const p = prefixOf(ip, l.bits);
      const groups = l.nets.get(p.addr);
      if (groups) return `in ${formatPrefix(p)}, ${this.#describe(groups)}`;
    }
    return undefined;
  }

  sharedName(name: string): string | undefined {
    const groups = this.#names.get(name);
    return groups && this.#describe(groups);
  }

  /** The index of `p`'s family and length, made when missing. */
  #length(p: Prefix): RangeLength {
    let l = this.#lengths.find((x) => x.family === p.family && x.bits === p.bits);
    if (!l) {
      l = { family: p.family, bits: p.bits, nets: new Map() };
      this.#lengths.push(l);
      this.#lengths.sort((x, y) => y.bits - x.bits);
    }
    return l;
  }

  #describe(groups: Names): string {
    const [first] = namesOf(groups);
    return this.#groups.get(first as string)?.what ?? String(first);
  }
}

// ---------------------------------------------------------------------------------------------
// What Talos says about a machine's links

/** The fields of a Talos LinkStatus the policy reads. */
export interface LinkFacts {
  /** The link name (the resource id), e.g. `eth0`. */
  name: string;
  /** Linux ARPHRD type: 1 ether, 772 loopback. */
  type: number;
  /** netlink IFLA_INFO_KIND: "" for a physical NIC, `dummy`, `bridge`, `vlan`, ... */
  kind: string;
}

/**
 * Link kinds (netlink IFLA_INFO_KIND, Talos LinkStatus `kind`) whose addresses are not the
 * machine's own: dummies (kube-proxy's kube-ipvs0 holds every Service IP; anycast and VIP set-ups
 * use them too), veth pairs, tunnels and overlays, whose addresses other machines also use or
 * route to. Bridges, bonds, VLANs and WireGuard (KubeSpan) links carry machine addresses; a CNI
 * bridge's gateway lies in a pod range, which is refused on its own.
 */
const VIRTUAL_LINK_KINDS: ReadonlySet<string> = new Set([
  "dummy",
  "veth",
  "vxlan",
  "geneve",
  "ipip",
  "ip6tnl",
  "gre",
  "gretap",
  "ip6gre",
  "ip6gretap",
  "erspan",
  "ip6erspan",
  "sit",
  "vti",
  "vti6",
  "xfrm",
  "bareudp",
  "tun",
  "ifb",
  "nlmon",
]);

/** Linux ARPHRD_LOOPBACK, Talos' LinkStatus `type` of `lo`. */
const LINK_TYPE_LOOPBACK = 772;
/** RT_SCOPE_HOST: an address valid only inside the machine. */
const SCOPE_HOST = 254;
/** The pseudo-link on which Talos puts a cloud's public addresses: no LinkStatus, the machine's own. */
export const EXTERNAL_LINK = "external";

/**
 * The addresses Talos reports on links that are not the machine's own network, each with why:
 * host scope, a loopback link, a virtual link kind ({@link VIRTUAL_LINK_KINDS}), or a link Talos
 * has no LinkStatus for (except `external`, where clouds' public addresses sit).
 * @param addresses the machine's AddressStatuses
 * @param links the machine's LinkStatuses
 * @returns canonical address (every reading of `ipReadings()`, IPv4-mapped as IPv4) → reason
 */
export function addressesOnSharedLinks(
  addresses: readonly Pick<AddressStatus, "address" | "linkName" | "scope">[],
  links: readonly LinkFacts[],
): Map<string, string> {
  const byName = new Map(links.map((l) => [l.name, l]));
  const out = new Map<string, string>();
  for (const a of addresses) {
    const why = notOwnLink(a, byName.get(a.linkName));
    if (!why) continue;
    for (const ip of ipReadings(a.address)) {
      const key = formatIP(ip);
      if (!out.has(key)) out.set(key, why);
    }
  }
  return out;
}

/** Why an address on `link` is not the machine's own, or undefined when it is. */
function notOwnLink(
  a: Pick<AddressStatus, "linkName" | "scope">,
  link: LinkFacts | undefined,
): string | undefined {
  const name = JSON.stringify(a.linkName);
  if (a.scope === SCOPE_HOST) return `Talos reports it with host scope on link ${name}`;
  if (a.linkName === EXTERNAL_LINK) return undefined;
  if (!link) return `Talos reports it on link ${name}, which it has no status for`;
  if (link.type === LINK_TYPE_LOOPBACK) return `Talos reports it on the loopback link ${name}`;
  if (VIRTUAL_LINK_KINDS.has(link.kind)) {
    return `Talos reports it on ${name}, a ${link.kind} link whose addresses are not one machine's`;
  }
  return undefined;
}

/**
 * Whether `ip` is the network or broadcast address of an IPv4 subnet the machine has (prefix
 * length up to /30): such an address reaches every host of the subnet, not one.
 * @param addresses the machine's addresses as `ip/prefix`, read by `prefixReadings()` (an
 *   IPv4-mapped `::ffff:10.0.0.5/120` is the subnet 10.0.0.0/24)
 * @returns the subnet, e.g. `10.0.0.0/24`, or undefined
 * One IP against every address, each read in every spelling: a decision over several IPs indexes the
 * addresses once instead (`SubnetEdges` of lib/csrindex.ts), so that its cost is linear in IPs plus
 * addresses; this is the reference its tests compare against.
 */
export function subnetEdgeOf(ip: IPAddress, addresses: readonly string[]): string | undefined {
  const a = unmapIPv4(ip);
  if (a.family !== 4) return undefined;
  for (const text of addresses) {
    for (const p of prefixReadings(text, { single: false })) {
      if (p.family !== 4 || p.bits > 30) continue;
      if (a.value === p.addr || a.value === lastAddress(p)) return formatPrefix(p);
    }
  }
  return undefined;
}

/**
 * The first of `entries` that holds `ip`: each a CIDR (`10.96.0.0/12`, host bits allowed) or a
 * single IP (`10.0.0.100`), as Talos' NodeIPConfig writes virtual IPs, read by `prefixReadings()`
 * (an IPv4-mapped `::ffff:10.0.0.0/104` holds 10.0.0.0/8); entries that are neither are skipped.
 * @example entryHolding(parseIP("10.0.0.100"), ["10.244.0.0/16", "10.0.0.100"]) // "10.0.0.100"
 * One IP against every entry: a decision over several IPs indexes the entries once instead
 * (`EntryIndex` of lib/csrindex.ts); this is the reference its tests compare against.
 */
export function entryHolding(ip: IPAddress, entries: readonly string[]): string | undefined {
  const a = unmapIPv4(ip);
  for (const text of entries) {
    if (prefixReadings(text).some((p) => prefixContains(p, a))) return text.trim();
  }
  return undefined;
}
