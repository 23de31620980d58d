// Kubelet serving CSR policy: the pure decision whether a `kubernetes.io/kubelet-serving`
// CertificateSigningRequest may be approved for the node that asks. This family is the project's
// security boundary: it does no I/O, never throws from `screen()`, `conclude()` or `decide()`, and
// fails closed. What the kubelet itself writes (its Node's addresses and provided-node-ip) is checked
// against what no kubelet controls: the other Nodes, and Talos — whose answer counts only when the
// answering machine names itself as the requester. A SAN is judged by what it means, not how it is
// spelled: what blocks it (other Nodes' names and addresses, excluded prefixes) is read in every way a
// client may read it (lib/ipspelling.ts); what grants it, strictly. The checks of the request alone
// are lib/csrrequest.ts's (its reading and signature are lib/x509pkcs10.ts's), what a decision is
// lib/csrdecision.ts's, the counters lib/csrmetrics.ts's; this file judges the request against the
// cluster (`screen()`) and then against the evidence (`conclude()`), and re-exports the rest: it is
// the family's public surface. The controller that watches CSRs and writes /approval
// (lib/csrapprover.ts) gathers the evidence between the two halves.

import { canonicalIP, formatIP, type IPAddress, tryParseIP } from "./cidr.ts";
import {
  APPROVE_REASON,
  DENY_REASONS,
  type Decision,
  type DenyReason,
  deny,
  failClosed,
  type IgnoreReason,
  list,
  overLimit,
  q,
} from "./csrdecision.ts";
import { EntryIndex, SubnetEdges } from "./csrindex.ts";
import { type CsrMetrics, csrMetrics } from "./csrmetrics.ts";
import {
  type CheckedCsr,
  type CsrInput,
  checkCsr,
  csrInputFrom,
  isCheckedCsr,
  MAX_REQUEST_BASE64,
  nodeNameFromUsername,
  USERNAME_PREFIX,
} from "./csrrequest.ts";
import { claimedIPs, literalClaimedIPs } from "./ipspelling.ts";
import { peerLimit } from "./peerlimits.ts";
import { canonicalDNS, canonicalHost, type NetworkView, NO_NETWORKS } from "./sharedaddresses.ts";
import { PROVIDED_NODE_IP_ANNOTATION } from "./wellknown.ts";
import type { ParsedCsr } from "./x509pkcs10.ts";

// The family's public surface: what a decision is, the request's own checks and the counters live in
// lib/csrdecision.ts, lib/csrrequest.ts and lib/csrmetrics.ts.
export {
  APPROVE_REASON,
  type CheckedCsr,
  type CsrInput,
  type CsrMetrics,
  checkCsr,
  csrInputFrom,
  csrMetrics,
  DENY_REASONS,
  type Decision,
  type DenyReason,
  type IgnoreReason,
  MAX_REQUEST_BASE64,
  nodeNameFromUsername,
  overLimit,
  USERNAME_PREFIX,
};

/** The fields of the requester's Node that the policy reads. */
export interface NodeInput {
  name: string;
  /** `status.addresses`, any type. */
  addresses: Array<{ type: string; address: string }>;
  /** The `alpha.kubernetes.io/provided-node-ip` annotation: one IP or "v4,v6". */
  providedNodeIP?: string;
}

/**
 * What Talos says about the machine behind the requester's Node, all from one Talos node: the one
 * that answered on the Node's IP. The Node's IPs are the kubelet's to write, so `nodename` is what
 * makes the rest count: a kubelet that points its IP at another machine gets that machine's name.
 */
export interface TalosFacts {
  /** The IP the facts were read on (a node IP of the Node); for messages. */
  nodeIP: string;
  /** The Kubernetes node name the answering Talos node registers its kubelet as (Nodename). */
  nodename: string;
  /** `address` of every AddressStatus it reports (`ip` or `ip/prefix`). */
  addresses: string[];
  /**
   * Its own DNS names: hostname and FQDN (HostnameStatus), PlatformMetadata hostname, internalDNS
   * and externalDNS. Empty when not read: any DNS SAN besides the node name is then denied.
   */
  dnsNames: string[];
  /**
   * Its addresses (canonical text) that sit on links that are not its own network, each with why
   * (`addressesOnSharedLinks()` of lib/sharedaddresses.ts): loopback, dummy, veth, tunnels.
   */
  sharedAddresses: ReadonlyMap<string, string>;
  /**
   * Its NodeIPConfig `excludeSubnets`: what Talos itself never gives the kubelet as a node IP
   * (the cluster's pod and Service CIDRs and every virtual IP configured on the machine).
   */
  excludedSubnets: string[];
}

/** What `screen()` leaves to the evidence: what Talos must confirm. */
export interface TalosQuestion {
  /** IP SANs Talos must report (canonical text). */
  ipAddresses: string[];
  /** DNS SANs other than the node name, which Talos must know (`TalosFacts.dnsNames`). */
  dnsNames: string[];
}

const SCREENED: unique symbol = Symbol("Screened");

/**
 * A request that passed every check of `decide()` but those that need the evidence: `screen()`'s
 * answer (`action: "confirm"`) when only Talos (or, in CSR-only mode, the Services) can still deny
 * it. It carries what `conclude()` needs, so that no check is run twice, and the question to ask.
 * Only `screen()` makes one: the brand is a symbol no other object carries.
 */
export interface Screened extends TalosQuestion {
  readonly [SCREENED]: true;
  readonly action: "confirm";
  /** The request, parsed and verified once (`checkCsr()`). */
  readonly parsed: ParsedCsr;
  /** The requester's Node as it was screened. */
  readonly node: NodeInput;
  /** The node the requester is (`nodeNameFromUsername()`), the Node's name. */
  readonly nodeName: string;
}

/**
 * What CSR-only mode knows of the names that reach a Service through a Pod's DNS search path
 * (lib/csrservices.ts looks them up for the CSR's DNS SANs before `conclude()`).
 */
export interface ServiceNameView {
  /** Why canonical DNS name `name` reaches a Service, e.g. "resolves to Service vault/vault ...", or undefined. */
  reach(name: string): string | undefined;
}

/** A view of no Services: what a caller with no cluster facts passes (tests). */
export const NO_SERVICE_NAMES: ServiceNameView = { reach: () => undefined };

/**
 * What `conclude()` weighs: what Talos reports for the node, or in CSR-only mode (no Talos API)
 * which DNS SANs reach a Service.
 */
export type Evidence = TalosFacts | ServiceNameView;

// ---------------------------------------------------------------------------------------------
// Policy

const DNS_ADDRESS_TYPES = new Set(["Hostname", "InternalDNS", "ExternalDNS"]);

function defined<T>(values: Array<T | undefined>): T[] {
  return values.filter((v): v is T => v !== undefined);
}

/** DNS names (`canonicalDNS()`) and IPs (canonical text), as `claims()` and `requestedClaims()` spell them. */
export interface Claims {
  dns: Set<string>;
  ips: Set<string>;
}

/**
 * The names and IPs a Node claims: its name and DNS-type addresses (`canonicalDNS()`), its IP
 * addresses of any type and its provided node IPs (canonical text). A request's SAN is another
 * Node's when it is in that Node's claims; a controller may index them to find those Nodes without a
 * scan.
 * @param node the Node as policy input
 * @param as `own`: what the requester may be approved for, read strictly (an address that is not
 *   a canonical-enough IP literal claims nothing; the name grants no IP); `other`: what blocks
 *   everyone else, from the moment the Node exists: its name, every address and provided node IP,
 *   each read in every way a client might read it (`claimedIPs()` of lib/ipspelling.ts: any inet_aton
 *   spelling, a port, zone, brackets or prefix length, the IPv4 address an IPv6 form embeds) — so a
 *   Node named `10.0.0.5` or `167772162` claims that address before its status has any — and any
 *   address that is no IP as a DNS name
 * @example claims(nodeInputFrom(lean), "other").ips.has("10.0.0.1")
 */
export function claims(node: NodeInput, as: "own" | "other"): Claims {
  return as === "own" ? ownClaims(node) : otherClaims(node);
}

/** `claims(node, "own")`: strict, and only DNS-type addresses count as names. */
function ownClaims(node: NodeInput): Claims {
  const dns = new Set([canonicalDNS(node.name)]);
  const ips = new Set<string>();
  for (const a of node.addresses ?? []) {
    if (typeof a?.address !== "string") continue;
    // As the kubelet does when it builds the request: an address that is an IP is an IP SAN,
    // whatever its type.
    const ip = canonicalIP(a.address.trim());
    if (ip !== undefined) ips.add(ip);
    else if (DNS_ADDRESS_TYPES.has(a.type)) dns.add(canonicalDNS(a.address.trim()));
  }
  for (const part of (node.providedNodeIP ?? "").split(",")) {
    const ip = canonicalIP(part.trim());
    if (ip !== undefined) ips.add(ip);
  }
  return { dns, ips };
}

/**
 * How many of one Node's status addresses and provided node IPs are read in every spelling
 * (`claimedIPs`, up to ~0.2 ms each for a sloppy one); the rest count as plain IP literals only
 * (`literalClaimedIPs`). A Node lists a handful, written by the kubelet or a CCM as plain literals,
 * so this never drops an honest claim; it bounds what a node's own kubelet can make every Node
 * event cost by listing tens of thousands of sloppy spellings (20,000: 4.4 s per update, now ~15 ms).
 */
export const MAX_LENIENT_CLAIMS = 64;

/** `claims(node, "other")`: every reading of the name, the addresses and the provided node IPs. */
function otherClaims(node: NodeInput): Claims {
  const name = typeof node.name === "string" ? node.name : "";
  const dns = new Set([canonicalDNS(name)]);
  const ips = new Set(claimedIPs(name).map(formatIP));
  let read = 0;
  const readings = (text: string) => (read++ < MAX_LENIENT_CLAIMS ? claimedIPs : literalClaimedIPs)(text);
  for (const a of node.addresses ?? []) {
    if (typeof a?.address !== "string") continue;
    const found = readings(a.address);
    for (const ip of found) ips.add(formatIP(ip));
    if (found.length === 0) dns.add(canonicalDNS(a.address.trim()));
  }
  for (const part of (node.providedNodeIP ?? "").split(",")) {
    for (const ip of readings(part)) ips.add(formatIP(ip));
  }
  return { dns, ips };
}

/**
 * What a request asks for, spelled as `claims()` spells what a Node has: its DNS SANs in canonical
 * form and its IP SANs. Only the other Nodes that claim one of these can change `screen()`'s or
 * `decide()`'s answer, so they are all the `others` a controller needs to pass.
 * @param checked a request that passed `checkCsr()`
 */
export function requestedClaims(checked: CheckedCsr): Claims {
  return {
    dns: new Set(checked.parsed.dnsNames.map(canonicalDNS)),
    ips: new Set(checked.parsed.ipAddresses),
  };
}

/** `values` each with the other node that claims it, e.g. `"x" (node "b")`. */
function claimedBy(values: string[], owners: Map<string, string>, key: (v: string) => string): string {
  const shown = values.slice(0, 8).map((v) => `${q(v)} (node ${q(owners.get(key(v)) ?? "")})`);
  return values.length > 8 ? `${shown.join(", ")} and ${values.length - 8} more` : shown.join(", ");
}

/**
 * The checks against what the cluster shares, which need neither the Node nor Talos: no IP SAN in
 * a Service or pod range, no DNS SAN (but the node's own name) a shared name.
 */
function checkNetworks(parsed: ParsedCsr, nodeName: string, networks: NetworkView): Decision | undefined {
  for (const ip of parsed.ipAddresses) {
    const range = networks.rangeOf(tryParseIP(ip) as IPAddress);
    if (range) {
      return deny(
        "ClusterNetworkIP",
        `IP SAN ${ip} is ${range}: it belongs to the cluster, not to one machine`,
      );
    }
  }
  for (const dns of parsed.dnsNames) {
    const c = canonicalDNS(dns);
    const shared = c === canonicalDNS(nodeName) ? undefined : networks.sharedName(c);
    if (shared) return deny("SharedDNSName", `DNS SAN ${q(dns)} is ${shared}, shared by several machines`);
  }
  return undefined;
}

/** Which other Node first claims each name and IP. */
function ownersOf(
  others: Iterable<NodeInput>,
  self: string,
): { dns: Map<string, string>; ips: Map<string, string> } {
  const dns = new Map<string, string>();
  const ips = new Map<string, string>();
  for (const other of others) {
    if (other.name === self) continue;
    const c = claims(other, "other");
    for (const d of c.dns) if (!dns.has(d)) dns.set(d, other.name);
    for (const ip of c.ips) if (!ips.has(ip)) ips.set(ip, other.name);
  }
  return { dns, ips };
}

/**
 * The checks against the Node and the other Nodes, the same in every mode: every SAN is the
 * Node's, and none (but the node's own name) is another Node's.
 */
function checkNodes(parsed: ParsedCsr, node: NodeInput, others: Iterable<NodeInput>): Decision | undefined {
  const own = claims(node, "own");
  const self = canonicalDNS(node.name);
  const strayDNS = parsed.dnsNames.filter((d) => !own.dns.has(canonicalDNS(d)));
  if (strayDNS.length) {
    return deny("DNSNameNotOwned", `DNS SANs ${list(strayDNS)} are not names of node ${q(node.name)}`);
  }
  // The kubelet writes its Node's addresses itself: a name or IP another Node has, or claims, is
  // not this one's to take. (Its own name is proven by the requester's identity, so never refused.)
  const owners = ownersOf(others, node.name);
  const taken = parsed.dnsNames.filter((d) => canonicalDNS(d) !== self && owners.dns.has(canonicalDNS(d)));
  if (taken.length) {
    return deny(
      "DNSNameOfOtherNode",
      `DNS SANs name other nodes: ${claimedBy(taken, owners.dns, canonicalDNS)}`,
    );
  }
  const strayIP = parsed.ipAddresses.filter((ip) => !own.ips.has(ip));
  if (strayIP.length) {
    return deny("IPNotOwned", `IP SANs ${list(strayIP)} are not addresses of node ${q(node.name)}`);
  }
  const shared = parsed.ipAddresses.filter((ip) => owners.ips.has(ip));
  if (shared.length) {
    return deny(
      "IPOfOtherNode",
      `IP SANs are also addresses of other nodes: ${claimedBy(shared, owners.ips, (ip) => ip)}`,
    );
  }
  return undefined;
}

/** The checks against what Talos reports for the machine that proved to be the node. */
function checkTalos(
  parsed: ParsedCsr,
  node: NodeInput,
  talos: TalosFacts,
  extraDNS: string[],
): Decision | undefined {
  if (talos.nodename !== node.name) {
    return deny(
      "TalosNodeMismatch",
      `the Talos node at ${q(talos.nodeIP)}, a node IP of node ${q(node.name)}, is node ${q(talos.nodename)}: ` +
        "the Node's IPs lead to another machine",
    );
  }
  // The Talos client refuses longer answers as it reads them; a caller's facts are held to it too.
  if (talos.addresses.length > peerLimit("talos_addresses"))
    return overLimit("talos_addresses", talos.addresses.length);
  if (talos.excludedSubnets.length > peerLimit("talos_list_entries"))
    return overLimit("talos_list_entries", talos.excludedSubnets.length);
  const reported = new Set(defined(talos.addresses.map(canonicalHost)));
  const unconfirmed = parsed.ipAddresses.filter((ip) => !reported.has(ip));
  if (unconfirmed.length) {
    return deny(
      "IPNotReportedByTalos",
      `IP SANs ${list(unconfirmed)} are in node ${q(node.name)}'s status but Talos does not report them`,
    );
  }
  return checkTalosAddresses(parsed, talos) ?? checkTalosNames(node, talos, extraDNS);
}

/**
 * The IP SANs against the machine's links, its NodeIPConfig exclusions and its subnets' edges, each
 * indexed once (lib/csrindex.ts): time linear in SANs plus addresses and entries.
 */
function checkTalosAddresses(parsed: ParsedCsr, talos: TalosFacts): Decision | undefined {
  if (parsed.ipAddresses.length === 0) return undefined;
  const excludedIndex = new EntryIndex(talos.excludedSubnets);
  const edges = new SubnetEdges(talos.addresses);
  for (const ip of parsed.ipAddresses) {
    const address = tryParseIP(ip) as IPAddress;
    const onLink = talos.sharedAddresses.get(ip);
    if (onLink) return deny("SharedIP", `IP SAN ${ip}: ${onLink}`);
    const excluded = excludedIndex.holding(address);
    if (excluded) {
      return deny(
        "SharedIP",
        `IP SAN ${ip} is in ${excluded}, which Talos excludes from the machine's node IPs ` +
          "(pod and Service CIDRs, virtual IPs)",
      );
    }
    const edge = edges.of(address);
    if (edge) return deny("NonUniqueIP", `IP SAN ${ip} is the network or broadcast address of ${edge}`);
  }
  return undefined;
}

/** The DNS SANs other than the node name against the names Talos knows for the machine. */
function checkTalosNames(node: NodeInput, talos: TalosFacts, extraDNS: string[]): Decision | undefined {
  const known = new Set(talos.dnsNames.map(canonicalDNS));
  const unknown = extraDNS.filter((d) => !known.has(canonicalDNS(d)));
  if (unknown.length) {
    return deny(
      "DNSNameNotReportedByTalos",
      `DNS SANs ${list(unknown)} are in node ${q(node.name)}'s status but Talos does not know them` +
        (talos.dnsNames.length ? ` (its names: ${list(talos.dnsNames)})` : ""),
    );
  }
  return undefined;
}

/**
 * CSR-only mode: no DNS SAN, the node's own name included, reaches a Service through a Pod's DNS
 * search path (Talos mode instead requires Talos to know every name but the node's).
 */
function checkServiceNames(parsed: ParsedCsr, services: ServiceNameView): Decision | undefined {
  for (const dns of parsed.dnsNames) {
    const why = services.reach(canonicalDNS(dns));
    if (why) {
      return deny(
        "ServiceName",
        `DNS SAN ${q(dns)} ${why}: a certificate for it would let this node answer as that Service to Pods`,
      );
    }
  }
  return undefined;
}

/**
 * The approval of a screened request, saying what confirmed it.
 * @param how e.g. "checked against the Nodes only"
 */
function approval(s: Screened, how: string): Decision {
  const names = [
    ...s.parsed.dnsNames.map((d) => `DNS ${q(d)}`),
    ...s.parsed.ipAddresses.map((i) => `IP ${i}`),
  ];
  const what = `serving certificate for node ${q(s.node.name)} with ${names.slice(0, 16).join(", ")}`;
  return { action: "approve", reason: APPROVE_REASON, message: `Approved by Talos CCM: ${what}; ${how}` };
}

/**
 * Every check of `decide()` that does not need the evidence, so that Talos is asked only about
 * requests it can still approve: the request's own (lib/csrrequest.ts), the cluster's shared ranges
 * and names, the Node's existence, and the Node and the other Nodes (the same in every mode). A
 * decision returned here is the one `decide()` returns with any evidence. Pure and total.
 * @param csr the request, or the result of `checkCsr()` for it (then it is not parsed again)
 * @param node the Node named by the requester, or undefined
 * @param others the other Nodes, as for `decide()`
 * @param networks the cluster's ranges and shared names, as for `decide()`
 * @returns ignore, wait or deny — never approve — or the screened request: what to ask Talos, and
 *   what `conclude()` judges the answer with
 * @example
 * const s = screen(csr, node, others, networks);
 * const d = s.action === "confirm" ? conclude(s, await askTalos(s)) : s;
 */
export function screen(
  csr: CsrInput | CheckedCsr,
  node: NodeInput | undefined,
  others: Iterable<NodeInput> = [],
  networks: NetworkView = NO_NETWORKS,
): Decision | Screened {
  return failClosed((): Decision | Screened => {
    const checked = isCheckedCsr(csr) ? csr : checkCsr(csr);
    if ("action" in checked) return checked;
    const { parsed, nodeName } = checked;
    const shared = checkNetworks(parsed, nodeName, networks);
    if (shared) return shared;
    if (!node || node.name !== nodeName) {
      return { action: "wait", reason: "NodeNotFound", message: `node ${q(nodeName)} does not exist yet` };
    }
    const failed = checkNodes(parsed, node, others);
    if (failed) return failed;
    return {
      [SCREENED]: true,
      action: "confirm",
      ipAddresses: parsed.ipAddresses,
      dnsNames: extraNames(parsed, node),
      parsed,
      node,
      nodeName,
    };
  });
}

/**
 * The rest of `decide()` for a screened request: only the checks that need the evidence, none of
 * `screen()`'s again (not the Nodes: a caller whose Nodes changed while it gathered the evidence
 * screens again). With Talos' facts: the Talos node that answered is this node, reports every IP SAN
 * on a link of its own and outside what it excludes from node IPs, and knows every DNS SAN other
 * than the node name. In CSR-only mode: no DNS SAN reaches a Service through a Pod's search path.
 * Pure and total; anything but a request `screen()` made is denied.
 * @param screened `screen()`'s answer when it is `confirm`
 * @param evidence what Talos reports for the node, or in CSR-only mode the Service names
 *   (lib/csrservices.ts answers for the request's DNS SANs)
 * @returns approve or deny, with `decide()`'s reason and message
 * @example const d = s.action === "confirm" ? conclude(s, facts) : s;
 */
export function conclude(screened: Screened, evidence: Evidence): Decision {
  return failClosed((): Decision => {
    if (!(SCREENED in screened)) throw new Error("the request was not screened");
    const { parsed, node } = screened;
    // Talos' facts whenever they are there (the stricter checks), whatever else the object holds;
    // the names Talos must know come from the request itself, not from the question handed out.
    if (isTalosFacts(evidence)) {
      return (
        checkTalos(parsed, node, evidence, extraNames(parsed, node)) ??
        approval(screened, `identity and names confirmed by Talos on ${evidence.nodeIP}`)
      );
    }
    return checkServiceNames(parsed, evidence) ?? approval(screened, "checked against the Nodes only");
  });
}

/** Whether the evidence is Talos' facts (not CSR-only mode's Service names). */
function isTalosFacts(evidence: Evidence): evidence is TalosFacts {
  return "nodename" in evidence || "nodeIP" in evidence || !("reach" in evidence);
}

/** The request's DNS SANs other than the node's own name: those Talos must know. */
function extraNames(parsed: ParsedCsr, node: NodeInput): string[] {
  const self = canonicalDNS(node.name);
  return parsed.dnsNames.filter((d) => canonicalDNS(d) !== self);
}

/**
 * Decides what to do with a CertificateSigningRequest. Pure and total: it never throws, and any
 * input it cannot fully check is denied. Checks, in order: not already decided and signer is
 * kubelet-serving (else ignore); username `system:node:<name>` and group `system:nodes`; usages;
 * one well-formed PEM request within `MAX_REQUEST_BYTES`, with at most `csr_sans` DNS and IP SANs
 * (lib/peerlimits.ts: denied `PeerInputOverLimit`); key (RSA 2048–8192, P-256, P-384,
 * Ed25519); proof of possession; subject CN = username and O = [system:nodes]; SANs (DNS/IP only,
 * at least one; no wildcard, no name of `reservedName()` — which refuses a DNS name any client reads
 * as an IP address, the node's own name included — no IP of `specialIP()`, which refuses the IPv6
 * forms that carry an IPv4 address); no IP SAN in
 * the cluster's Service or pod ranges, no DNS SAN a shared name (`networks`);
 * the Node exists (else wait); every DNS SAN is the node name or a Hostname/InternalDNS/ExternalDNS
 * address of it, and no other Node's name or DNS address; every IP SAN is a status address or
 * provided node IP, and no other Node's name, address or provided node IP in any spelling
 * (`claims()`). Then with Talos: the Talos node
 * that answered is this node, reports every IP SAN on a link of its own and outside what it
 * excludes from node IPs, and knows every DNS SAN other than the node name; without Talos, no DNS
 * SAN reaches a Service through a Pod's search path (`services`). Time linear in SANs plus the
 * Node's, the other Nodes' and Talos' entries: each list is indexed once. It is `screen()` then
 * `conclude()`; the controller calls the two halves itself, with the evidence gathered between them.
 * @param csr the request, or the result of `checkCsr()` for it (then it is not parsed again)
 * @param node the Node named by `nodeNameFromUsername(csr.username)`, or undefined when it does
 *   not exist (yet); a Node of any other name is treated as absent
 * @param talos what Talos reports for that node; undefined only in CSR-only mode (no Talos API),
 *   when the Node and the other Nodes are all there is to check against
 * @param others the other Nodes (the requester's own is skipped if present): every one, or at
 *   least every one that claims a name or IP of `requestedClaims()` — the rest cannot matter
 * @param networks the cluster's Service and pod ranges and shared names (lib/sharedaddresses.ts)
 * @param services CSR-only mode: which DNS SANs reach a Service through a Pod's search path
 *   (lib/csrservices.ts answers for the CSR's DNS SANs); unused with Talos
 * @returns ignore, wait (the Node is missing: retry later), approve or deny with a stable reason
 * @example
 * const d = decide(csr, node, facts, otherNodes);
 * if (d.action === "approve" || d.action === "deny") await writeApproval(csr.name, d);
 */
export function decide(
  csr: CsrInput | CheckedCsr,
  node: NodeInput | undefined,
  talos?: TalosFacts,
  others: Iterable<NodeInput> = [],
  networks: NetworkView = NO_NETWORKS,
  services: ServiceNameView = NO_SERVICE_NAMES,
): Decision {
  return failClosed(() => {
    const s = screen(csr, node, others, networks);
    return s.action === "confirm" ? conclude(s, talos ?? services) : s;
  });
}

/** The parts of a Node `nodeInputFrom` reads: a `V1Node` or the Node cache's lean copy. */
export interface NodeLike {
  metadata?: { name?: string; annotations?: Record<string, string> };
  status?: { addresses?: ReadonlyArray<{ type: string; address: string }> };
}

/**
 * Maps a Node to `decide()`'s input.
 * @param node a Node API object or cached Node
 */
export function nodeInputFrom(node: NodeLike): NodeInput {
  const provided = node.metadata?.annotations?.[PROVIDED_NODE_IP_ANNOTATION];
  return {
    name: node.metadata?.name ?? "",
    addresses: (node.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
    ...(provided === undefined ? {} : { providedNodeIP: provided }),
  };
}
