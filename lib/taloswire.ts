// The Talos wire as this CCM speaks it: apid's gRPC paths, the COSI resources it reads, and the
// glue between the codecs ts-proto generates from lib/talos.proto (lib/talos_pb.ts: plain
// functions over protobuf-es' wire reader, no reflection runtime) and the plain types of
// lib/types.ts: decoding with the checks Talos' Go client makes, netip.Addr in both its forms,
// watch events, and the WatchRequest encoding. Every decoder throws TalosDecodeError and nothing
// else, whatever the bytes: the generated code throws RangeError and friends on malformed input.
// Each decoder also checks its resource against the per-machine bounds (lib/talosbounds.ts): an
// answer over one throws TalosLimitError (a TalosDecodeError naming the bound) and is not kept.

import { formatIP, ipFromBytes } from "./cidr.ts";
import type { PeerLimitName } from "./peerlimits.ts";
import { StringPool } from "./stringpool.ts";
import {
  AddressStatusSpec,
  ControllerManagerConfigSpec,
  type WatchOptions as CosiWatchOptions,
  EventType,
  HostnameStatusSpec,
  LinkStatusSpec,
  NetIP,
  NodeIPConfigSpec,
  NodenameSpec,
  PlatformMetadataSpec,
  type ReadEvent,
  ReadGetResponse,
  ReadListResponse,
  type ReadResource,
  ReadWatchResponse,
  SystemInformationSpec,
  VersionResponse,
  WatchRequest,
} from "./talos_pb.ts";
import {
  boundControllerManagerConfig,
  boundPlatformMetadata,
  boundSystemInformation,
  checkCIDRList,
  checkLength,
  TalosLimitError,
} from "./talosbounds.ts";
import { TalosDecodeError } from "./taloserrors.ts";
import type { AddressStatus, ControllerManagerConfig, PlatformMetadata, SystemInformation } from "./types.ts";

/** gRPC method paths served by apid. */
export const PATHS = {
  get: "/cosi.resource.State/Get",
  list: "/cosi.resource.State/List",
  watch: "/cosi.resource.State/Watch",
  create: "/cosi.resource.State/Create",
  update: "/cosi.resource.State/Update",
  destroy: "/cosi.resource.State/Destroy",
  version: "/machine.MachineService/Version",
} as const;

/** The COSI resources this CCM reads, by the request names of the reference's metrics. */
export const RESOURCES = {
  platformmetadata: { namespace: "runtime", type: "PlatformMetadatas.talos.dev", id: "platformmetadata" },
  systeminformation: {
    namespace: "hardware",
    type: "SystemInformations.hardware.talos.dev",
    id: "systeminformation",
  },
  addresses: { namespace: "network", type: "AddressStatuses.net.talos.dev", id: undefined },
  controllermanagerconfig: {
    namespace: "controlplane",
    type: "ControllerManagerConfigs.kubernetes.talos.dev",
    id: "kube-controller-manager",
  },
  nodename: { namespace: "k8s", type: "Nodenames.kubernetes.talos.dev", id: "nodename" },
  hostname: { namespace: "network", type: "HostnameStatuses.net.talos.dev", id: "hostname" },
  nodeipconfig: { namespace: "k8s", type: "NodeIPConfigs.kubernetes.talos.dev", id: "kubelet" },
  links: { namespace: "network", type: "LinkStatuses.net.talos.dev", id: undefined },
} as const;

/** A resource kind of {@link RESOURCES}. */
export type ResourceKind = keyof typeof RESOURCES;

// ---------------------------------------------------------------------------------------------
// Decoding

/** An AddressStatus as decoded, with the peer address of point-to-point links when Talos has one. */
export interface TalosAddressStatus extends AddressStatus {
  /**
   * IFA_LOCAL, only where it differs from `address` (point-to-point links): Talos reports it equal
   * to the address on every other IPv4 address, and a copy per node is not worth keeping.
   */
  local?: string;
}

/** `Nodenames.kubernetes.talos.dev`: the Kubernetes node name Talos gives the kubelet. */
export interface TalosNodename {
  nodename: string;
  /** Version of the HostnameStatus the name was derived from. */
  hostnameVersion: string;
  /** The kubelet does not register a Node (machine.kubelet.skipNodeRegistration). */
  skipNodeRegistration: boolean;
}

/** `HostnameStatuses.net.talos.dev`: the node's hostname and domain. */
export interface TalosHostname {
  hostname: string;
  domainname: string;
}

/**
 * `NodeIPConfigs.kubernetes.talos.dev`: the subnets the kubelet picks its node IPs from. Entries
 * are CIDRs or bare IPs, as the machine configuration gives them (unvalidated here).
 */
export interface TalosNodeIPConfig {
  /**
   * machine.kubelet.nodeIP.validSubnets (entries may be `!`-prefixed exclusions); without them
   * `0.0.0.0/0` and/or `::/0` after the families of the service CIDRs.
   */
  validSubnets: string[];
  /** The cluster's pod and service CIDRs and every virtual (shared) IP of the machine. */
  excludeSubnets: string[];
}

/** `LinkStatuses.net.talos.dev`: one network link of the node (the fields a CCM needs). */
export interface TalosLinkStatus {
  /** The link name: the resource id (`eth0`, `lo`, `kube-ipvs0`, ...). */
  name: string;
  /** Linux ifindex. */
  index: number;
  /** ARPHRD_* link type (nethelpers.LinkType): 1 ether, 772 loopback, 65534 none, ... */
  type: number;
  /** IFLA_INFO_KIND: "" for physical NICs, else "dummy", "bridge", "bond", "vlan", "veth", ... */
  kind: string;
  /** IFF_* bitmask (up 0x1, loopback 0x8, lower_up 0x10000). */
  flags: number;
  /** Carrier as ethtool reports it. */
  linkState: boolean;
}

/** The data each resource kind decodes into. */
export interface ResourceData {
  platformmetadata: PlatformMetadata;
  systeminformation: SystemInformation;
  addresses: TalosAddressStatus;
  controllermanagerconfig: ControllerManagerConfig;
  nodename: TalosNodename;
  hostname: TalosHostname;
  nodeipconfig: TalosNodeIPConfig;
  links: TalosLinkStatus;
}

/** Runs a decoder, turning whatever it throws into one TalosDecodeError naming `what`. */
function decodeWith<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof TalosLimitError) throw err;
    if (err instanceof TalosDecodeError && err.message.startsWith("Cannot decode")) throw err;
    throw new TalosDecodeError(`Cannot decode ${what}: ${(err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }
}

/**
 * Formats address bytes as Go's netip does (dotted IPv4, RFC 5952 IPv6, `::ffff:a.b.c.d` for
 * IPv4-mapped); bytes after the 16th are an IPv6 zone (`fe80::1%eth0`).
 * @throws {TalosDecodeError} for lengths other than 4 or 16 and more.
 */
export function formatIPBytes(bytes: Uint8Array): string {
  if (bytes.length !== 4 && bytes.length < 16) {
    throw new TalosDecodeError(`Cannot decode IP address: ${bytes.length} bytes`);
  }
  const ip = formatIP(ipFromBytes(bytes.length === 4 ? bytes : bytes.subarray(0, 16)));
  if (bytes.length <= 16) return ip;
  const zone = decodeWith("IPv6 zone", () =>
    new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(16)),
  );
  return `${ip}%${zone}`;
}

/**
 * Decodes a netip.Addr field: the NetIP message, or the legacy raw 0/4/16 bytes that older Talos
 * wrote (the lengths cannot collide: a NetIP message of an address is 2 bytes longer). The schema
 * types these fields `bytes` so that both forms reach this function.
 * @returns "" for the zero address.
 * @throws {TalosDecodeError}
 */
export function decodeNetIP(bytes: Uint8Array): string {
  return decodeWith("NetIP", () => {
    if (bytes.length === 0) return "";
    const ip = bytes.length === 4 || bytes.length === 16 ? bytes : NetIP.decode(bytes).ip;
    // The zero address is sent as no bytes at all: a message without one is not a NetIP.
    if (ip.length === 0) throw new TalosDecodeError("no address");
    return formatIPBytes(ip);
  });
}

/**
 * Values Talos reports alike for many machines (platform, region, zone, instance type, DNS names,
 * link names, loopback addresses), kept once: the watch cache holds them for every node, and the
 * protobuf decoder builds a fresh string each time. Never the per-machine ones (hostname, instance
 * and provider IDs, other addresses). Bounded: values that never repeat stop filling it at 1,024.
 */
const sharedStrings = new StringPool(1024);
const sharedString = (s: string): string => sharedStrings.share(s);

/** RT_SCOPE_HOST: the loopback addresses every machine has. */
const SCOPE_HOST = 254;

/** Decodes a `PlatformMetadatas.talos.dev` spec. @throws {TalosDecodeError} */
export function decodePlatformMetadata(bytes: Uint8Array): PlatformMetadata {
  return decodeWith("PlatformMetadataSpec", () => {
    const m = PlatformMetadataSpec.decode(bytes);
    return boundPlatformMetadata({
      platform: sharedString(m.platform),
      hostname: m.hostname,
      region: sharedString(m.region),
      zone: sharedString(m.zone),
      instanceType: sharedString(m.instanceType),
      instanceId: m.instanceId,
      providerId: m.providerId,
      spot: m.spot,
      internalDNS: sharedString(m.internalDns),
      externalDNS: sharedString(m.externalDns),
      tags: m.tags,
    });
  });
}

/** Decodes a `SystemInformations.hardware.talos.dev` spec (without bios_version). @throws {TalosDecodeError} */
export function decodeSystemInformation(bytes: Uint8Array): SystemInformation {
  return decodeWith("SystemInformationSpec", () => {
    const s = SystemInformationSpec.decode(bytes);
    return boundSystemInformation({
      manufacturer: s.manufacturer,
      productName: s.productName,
      version: s.version,
      serialNumber: s.serialNumber,
      uuid: s.uuid,
      wakeUpType: s.wakeUpType,
      skuNumber: s.skuNumber,
    });
  });
}

/**
 * Decodes an `AddressStatuses.net.talos.dev` spec. The family comes from the address bytes.
 * @param id The resource id, `<link>/<prefix>`.
 * @throws {TalosDecodeError} also when the address is missing or its prefix length impossible.
 */
export function decodeAddressStatus(id: string, bytes: Uint8Array): TalosAddressStatus {
  checkLength("talos_address_length", id, "an AddressStatus id");
  return decodeWith(`AddressStatusSpec ${id}`, () => {
    const a = AddressStatusSpec.decode(bytes);
    checkLength("talos_address_length", a.linkName, `the link name of AddressStatus ${id}`);
    const ip = a.address?.ip ?? new Uint8Array();
    const bits = a.address?.prefixLength ?? 0;
    if (ip.length !== 4 && ip.length < 16) throw new TalosDecodeError("no address");
    if (bits < 0 || bits > (ip.length === 4 ? 32 : 128)) throw new TalosDecodeError(`prefix length ${bits}`);
    // Joined, not a template literal: kept flat (lib/cidr.ts formatV4).
    const ipText = formatIPBytes(ip.length > 16 ? ip.subarray(0, 16) : ip);
    const address = [ipText, bits].join("/");
    const host = a.scope === SCOPE_HOST;
    const out: TalosAddressStatus = {
      id: host ? sharedString(id) : id,
      address: host ? sharedString(address) : address,
      linkName: sharedString(a.linkName),
      linkIndex: a.linkIndex,
      family: ip.length === 4 ? "inet4" : "inet6",
      scope: a.scope,
      flags: a.flags,
    };
    const local = decodeNetIP(a.local);
    checkLength("talos_address_length", local, `the local address of AddressStatus ${id}`);
    if (local && local !== ipText) out.local = local;
    return out;
  });
}

/** Decodes the pod and service CIDRs of a `ControllerManagerConfigs.kubernetes.talos.dev` spec. */
export function decodeControllerManagerConfig(bytes: Uint8Array): ControllerManagerConfig {
  return decodeWith("ControllerManagerConfigSpec", () => {
    const c = ControllerManagerConfigSpec.decode(bytes);
    return boundControllerManagerConfig({ podCIDRs: c.podCidrs, serviceCIDRs: c.serviceCidrs });
  });
}

/** Decodes a `Nodenames.kubernetes.talos.dev` spec. @throws {TalosDecodeError} */
export function decodeNodename(bytes: Uint8Array): TalosNodename {
  return decodeWith("NodenameSpec", () => {
    const n = NodenameSpec.decode(bytes);
    checkLength("talos_name_length", n.nodename, "Nodename nodename");
    checkLength("talos_string_length", n.hostnameVersion, "Nodename hostnameVersion");
    return n;
  });
}

/** Decodes a `HostnameStatuses.net.talos.dev` spec. @throws {TalosDecodeError} */
export function decodeHostnameStatus(bytes: Uint8Array): TalosHostname {
  return decodeWith("HostnameStatusSpec", () => {
    const h = HostnameStatusSpec.decode(bytes);
    checkLength("talos_name_length", h.hostname, "HostnameStatus hostname");
    checkLength("talos_name_length", h.domainname, "HostnameStatus domainname");
    return h;
  });
}

/** Decodes a `NodeIPConfigs.kubernetes.talos.dev` spec. @throws {TalosDecodeError} */
export function decodeNodeIPConfig(bytes: Uint8Array): TalosNodeIPConfig {
  return decodeWith("NodeIPConfigSpec", () => {
    const c = NodeIPConfigSpec.decode(bytes);
    checkCIDRList(c.validSubnets, "NodeIPConfig validSubnets");
    checkCIDRList(c.excludeSubnets, "NodeIPConfig excludeSubnets");
    return c;
  });
}

/**
 * Decodes a `LinkStatuses.net.talos.dev` spec; the fields a CCM does not need are skipped.
 * @param id The resource id: the link name.
 * @throws {TalosDecodeError}
 */
export function decodeLinkStatus(id: string, bytes: Uint8Array): TalosLinkStatus {
  return decodeWith(`LinkStatusSpec ${id}`, () => {
    checkLength("talos_address_length", id, "a LinkStatus id");
    const l = LinkStatusSpec.decode(bytes);
    checkLength("talos_address_length", l.kind, `the kind of LinkStatus ${id}`);
    return { name: id, index: l.index, type: l.type, kind: l.kind, flags: l.flags, linkState: l.linkState };
  });
}

const SPEC_DECODERS: { [K in ResourceKind]: (id: string, bytes: Uint8Array) => ResourceData[K] } = {
  platformmetadata: (_id, b) => decodePlatformMetadata(b),
  systeminformation: (_id, b) => decodeSystemInformation(b),
  addresses: decodeAddressStatus,
  controllermanagerconfig: (_id, b) => decodeControllerManagerConfig(b),
  nodename: (_id, b) => decodeNodename(b),
  hostname: (_id, b) => decodeHostnameStatus(b),
  nodeipconfig: (_id, b) => decodeNodeIPConfig(b),
  links: decodeLinkStatus,
};

/** A decoded COSI resource: its id, version and typed spec. */
export interface TalosResource<T> {
  id: string;
  /** The metadata version: a decimal integer, or "undefined" for tombstones. */
  version: string;
  spec: T;
}

/**
 * Checks a `cosi.resource.Resource` as the Go client does (metadata present, phase running or
 * tearingDown, version an integer or "undefined") and decodes its spec.
 * @param allowEmpty Accept an absent or empty spec (tombstones of destroyed resources); `spec` is then undefined.
 */
function resourceOf<K extends ResourceKind>(
  kind: K,
  r: ReadResource | undefined,
  allowEmpty = false,
): TalosResource<ResourceData[K] | undefined> {
  const md = r?.metadata;
  if (!md) throw new TalosDecodeError(r ? "no metadata" : "no resource");
  const name = `${md.type}(${md.namespace}/${md.id})`;
  if (md.phase !== "running" && md.phase !== "tearingDown")
    throw new TalosDecodeError(`${name}: phase "${md.phase}"`);
  if (md.version !== "undefined" && !/^\d+$/.test(md.version)) {
    throw new TalosDecodeError(`${name}: version "${md.version}"`);
  }
  const spec = r.spec?.protoSpec;
  if (!spec || spec.length === 0) {
    if (allowEmpty) return { id: md.id, version: md.version, spec: undefined };
    if (!spec) throw new TalosDecodeError(`${name}: no spec`);
  }
  return { id: md.id, version: md.version, spec: SPEC_DECODERS[kind](md.id, spec) };
}

function specOf<T>(r: TalosResource<T | undefined>): TalosResource<T> {
  if (r.spec === undefined) throw new TalosDecodeError(`Cannot decode resource ${r.id}: empty spec`);
  return r as TalosResource<T>;
}

/** Decodes a GetResponse. @throws {TalosDecodeError} */
export function decodeGetResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): TalosResource<ResourceData[K]> {
  return decodeWith(`GetResponse of ${RESOURCES[kind].type}`, () =>
    specOf(resourceOf(kind, ReadGetResponse.decode(bytes).resource)),
  );
}

/** Decodes one ListResponse stream message. @throws {TalosDecodeError} */
export function decodeListResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): TalosResource<ResourceData[K]> {
  return decodeWith(`ListResponse of ${RESOURCES[kind].type}`, () =>
    specOf(resourceOf(kind, ReadListResponse.decode(bytes).resource)),
  );
}

/** A COSI watch event as the client hands it out. */
export type TalosWatchEvent<T> =
  | { type: "created"; id: string; version: string; resource: T }
  | { type: "updated"; id: string; version: string; resource: T; old?: T }
  | { type: "destroyed"; id: string; resource?: T }
  | { type: "bootstrapped" }
  | {
      type: "errored";
      error: string;
      /**
       * The watch's answer was over this per-machine bound (lib/talosbounds.ts): what it sent is
       * refused, and a handler drops what it kept of this watch (a list watch is cut and resubscribes).
       */
      limit?: PeerLimitName;
    };

/** One Event; undefined for NOOP and event types newer than this client. */
function eventOf<K extends ResourceKind>(
  kind: K,
  e: ReadEvent,
): TalosWatchEvent<ResourceData[K]> | undefined {
  switch (e.eventType) {
    case EventType.CREATED: {
      const r = specOf(resourceOf(kind, e.resource));
      return { type: "created", id: r.id, version: r.version, resource: r.spec };
    }
    case EventType.UPDATED: {
      const r = specOf(resourceOf(kind, e.resource));
      const prev = e.old ? resourceOf(kind, e.old, true).spec : undefined;
      return prev === undefined
        ? { type: "updated", id: r.id, version: r.version, resource: r.spec }
        : { type: "updated", id: r.id, version: r.version, resource: r.spec, old: prev };
    }
    case EventType.DESTROYED: {
      const r = resourceOf(kind, e.resource, true);
      return r.spec === undefined
        ? { type: "destroyed", id: r.id }
        : { type: "destroyed", id: r.id, resource: r.spec };
    }
    case EventType.BOOTSTRAPPED:
      return { type: "bootstrapped" };
    case EventType.ERRORED:
      return { type: "errored", error: e.error ?? "watch errored" };
    default:
      return undefined;
  }
}

/**
 * Decodes one WatchResponse into events (the first response of a watch has none).
 * @throws {TalosDecodeError}
 */
export function decodeWatchResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): Array<TalosWatchEvent<ResourceData[K]>> {
  return decodeWith(`WatchResponse of ${RESOURCES[kind].type}`, () =>
    ReadWatchResponse.decode(bytes).event.flatMap((e) => eventOf(kind, e) ?? []),
  );
}

/** What `Version` reports about the endpoint node. */
export interface TalosVersion {
  tag: string;
  sha: string;
  arch: string;
  platform: string;
}

/** Decodes a VersionResponse (its first message). @throws {TalosDecodeError} */
export function decodeVersionResponse(bytes: Uint8Array): TalosVersion {
  return decodeWith("VersionResponse", () => {
    const first = VersionResponse.decode(bytes).messages[0];
    if (!first?.version) throw new TalosDecodeError("no version");
    const { tag, sha, arch } = first.version;
    const out = { tag, sha, arch, platform: first.platform?.name ?? "" };
    for (const [field, value] of Object.entries(out))
      checkLength("talos_string_length", value, `Version ${field}`);
    return out;
  });
}

/**
 * Encodes a WatchRequest with api_version 1: of one resource when `id` is given (presence
 * matters, even for ""), else of all with bootstrap_contents.
 */
export function encodeWatchRequest(namespace: string, type: string, id: string | undefined): Uint8Array {
  const all: CosiWatchOptions = {
    bootstrapContents: true,
    tailEvents: 0,
    labelQuery: [],
    aggregated: false,
    bootstrapBookmark: false,
  };
  return WatchRequest.encode(
    id === undefined
      ? { namespace, type, options: all, apiVersion: 1 }
      : { namespace, type, id, apiVersion: 1 },
  ).finish();
}
