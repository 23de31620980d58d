// The per-peer bounds: how much one peer (a Node's kubelet, a machine's Talos API, a CSR's
// requester) may make the CCM keep or decide on, and the one metric every place that enforces them
// counts in. The CCM is one JavaScript thread running every controller, so whatever one peer makes
// it keep or compute, every other node waits for: each input from a peer is checked against these
// before it is kept or decided on, and a peer over a bound fails alone, for that input (an Event
// naming the bound and a count in talosccm_peer_input_rejected_total), never the other peers.
//
// Each bound is derived from what real peers send, with its source; a bound only a hostile peer
// reaches is a bound, not a tuning knob, so none is configurable.

import type { Registry } from "./metrics.ts";

/** Who sent an input: a Node object (its kubelet's credentials), a machine's Talos API, a CSR. */
export type PeerKind = "node" | "talos" | "csr";

/** One bound: its value, whom it applies to and where the value comes from. */
export interface PeerLimit {
  readonly value: number;
  readonly peer: PeerKind;
  /** What is counted, for Events and the README (e.g. "addresses a machine's Talos reports"). */
  readonly what: string;
  /** Where the value comes from (Kubernetes' or Talos' own validation, the kernel, a cloud's limits). */
  readonly source: string;
}

/**
 * Every per-peer bound, by name (the `limit` label of talosccm_peer_input_rejected_total).
 * tests/unit/peerlimits.test.ts checks each entry (a positive integer, its peer, a source that cites
 * where the figure comes from), that code in lib/ enforces it, and that the README's table (section
 * "Security model: one peer, one budget") lists it as here; the tests of each enforcing file feed it
 * an input one over the bound.
 */
export const PEER_LIMITS = {
  /** AddressStatus resources one machine may hold in the watch cache (its Talos watch included). */
  talos_addresses: {
    value: 1024,
    peer: "talos",
    what: "addresses for one machine (AddressStatus resources)",
    source:
      "Linux keeps at most 16 autoconfigured IPv6 addresses per interface (net.ipv6.conf.*.max_addresses) " +
      "and a node has a few links; 1,024 leaves room for 60 links at that limit",
  },
  /** Characters of a host or DNS name from Talos (hostname, nodename, internalDNS, externalDNS). */
  talos_name_length: {
    value: 253,
    peer: "talos",
    what: "characters of a host or DNS name from Talos",
    source: "RFC 1123 / Kubernetes IsDNS1123Subdomain (253); Talos validates hostnames the same way",
  },
  /** Characters of any other string Talos reports (platform, region, zone, instance ids, SMBIOS). */
  talos_string_length: {
    value: 1024,
    peer: "talos",
    what: "characters of a platform metadata or system information string from Talos",
    source:
      "the longest real values are Azure resource IDs in providerID (~250); SMBIOS strings are at most 255 bytes " +
      "in practice (dmidecode); 4x the longest",
  },
  /** PlatformMetadata tags one machine reports. */
  talos_tags: {
    value: 64,
    peer: "talos",
    what: "platform metadata tags for one machine",
    source: "AWS allows 50 tags per resource, Azure 50, GCP 64 labels",
  },
  /** Entries of a NodeIPConfig's subnet lists or any other list of a fact Talos reports once. */
  talos_list_entries: {
    value: 256,
    peer: "talos",
    what: "entries of a list in one Talos resource (NodeIPConfig subnets, ControllerManagerConfig CIDRs)",
    source: "a machine config lists a handful of subnets; Talos' own defaults list at most 4",
  },
  /** Characters of an address-like string from Talos: an AddressStatus id, link name or address, a CIDR of a list. */
  talos_address_length: {
    value: 128,
    peer: "talos",
    what: "characters of an address, link name, resource id or CIDR from Talos",
    source:
      "Linux link names are at most 15 bytes (IFNAMSIZ 16); an AddressStatus id <link>/<address>/<prefix> is at " +
      "most 15+1+45+4 = 65 characters (an IPv4-mapped IPv6 address is 45); about twice that",
  },
  /** status.addresses entries of one Node. */
  node_addresses: {
    value: 1024,
    peer: "node",
    what: "status.addresses entries of one Node",
    source: "the machine's own bound (talos_addresses): a Node lists the addresses of its machine",
  },
  /** Labels of one Node the rules and filters look at. */
  node_labels: {
    value: 1024,
    peer: "node",
    what: "labels of one Node",
    source:
      "Kubernetes bounds each key (317) and value (63) but not their number; well-known labels plus a cloud's " +
      "and an operator's are under 100 on real nodes",
  },
  /** Total bytes of one Node's annotations. */
  node_annotation_bytes: {
    value: 256 * 1024,
    peer: "node",
    what: "bytes of one Node's annotations",
    source: "Kubernetes' TotalAnnotationSizeLimitB (apimachinery ValidateAnnotationsSize, 256 KiB)",
  },
  /** Characters of one Node watch event read at once; larger ones are read at most once per 10 s per Node. */
  node_event_bytes: {
    value: 256 * 1024,
    peer: "node",
    what: "bytes in one watch event of the Node (events over the bound are read at most once per 10 s, the newest kept)",
    source:
      "a kubelet's Node is 5-30 KiB (its status lists at most 50 images, nodeStatusMaxImages); annotations alone are " +
      "capped at 256 KiB (TotalAnnotationSizeLimitB); 10 s is the kubelet's nodeStatusUpdateFrequency",
  },
  /** Subject alternative names of one CSR (DNS names and IP addresses together). */
  csr_sans: {
    value: 256,
    peer: "csr",
    what: "subject alternative names of one CSR (DNS and IP)",
    source:
      "a kubelet's serving CSR names its hostname and its Node's addresses (kubelet certificate manager): a " +
      "handful; a quarter of node_addresses",
  },
  /** API lookups one CSR's DNS SANs may cost in CSR-only mode (namespaces and Service names). */
  csr_service_lookups: {
    value: 32,
    peer: "csr",
    what: "namespace and Service lookups its DNS SANs need in CSR-only mode",
    source:
      "a kubelet's serving CSR names its hostname and its Node's Hostname, InternalDNS and ExternalDNS addresses " +
      "(kubelet certificate manager), at most 2 lookups each: a handful; 32 bounds what one CSR spends of the " +
      "client rate limit every controller shares",
  },
  /** Units of CSR decision work one requester may spend in a burst before its budget paces it. */
  csr_decision_units: {
    value: 8192,
    peer: "csr",
    what:
      "units of CSR decision work for one requesting node in a burst, one per 64 characters of request, Node address " +
      "and Talos entry read (then 128 a second)",
    source:
      "a kubelet files one serving CSR at its start and one per certificate rotation (kubelet certificate manager); " +
      "an honest decision is ~30 units (a 1 KiB request, a few addresses), one at every other bound ~2,400 (~3 ms of " +
      "CPU): room for ~250 honest CSRs at once",
  },
  /** Status writes cloud-node may make to one Node in a burst before its per-node budget paces it. */
  node_write_burst: {
    value: 8,
    peer: "node",
    what: "writes to one Node in a burst before the per-node budget paces them",
    source:
      "cloud-node's initialization takes 2 writes (status, then metadata and spec); 4 initializations' worth",
  },
} as const satisfies Record<string, PeerLimit>;

/** The name of a bound (a key of {@link PEER_LIMITS}). */
export type PeerLimitName = keyof typeof PEER_LIMITS;

/** The value of bound `name`. */
export function peerLimit(name: PeerLimitName): number {
  return PEER_LIMITS[name].value;
}

/**
 * The counter every bound counts its rejections in: `talosccm_peer_input_rejected_total{peer,limit}`
 * (registered once per registry; each caller may ask again).
 */
export function peerRejections(reg: Registry) {
  return reg.counter(
    "talosccm_peer_input_rejected_total",
    "Inputs from one peer (a Node, a machine's Talos API, a CSR) refused because they exceed a per-peer bound, by " +
      "peer kind and bound (the peer fails alone: its input is not kept or decided on).",
    ["peer", "limit"],
  );
}

/** The Event reason of an input refused for a bound. */
export const OVER_LIMIT_REASON = "PeerInputOverLimit";

/**
 * The message of an Event (or error) for an input over bound `name`: what was counted, the count and
 * the bound, and that the input is refused.
 * @example overLimitMessage("talos_addresses", 1025) // "Talos reported 1025 addresses one machine's ..."
 */
export function overLimitMessage(name: PeerLimitName, got: number): string {
  const l = PEER_LIMITS[name];
  const from = l.peer === "talos" ? "Talos reported" : l.peer === "csr" ? "The CSR has" : "The Node has";
  return `${from} ${got} ${l.what}, over the bound of ${l.value} (${l.source}): the input is refused for this peer only`;
}
