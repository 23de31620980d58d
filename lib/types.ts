// Domain types shared across lib/: the Talos facts the CCM reads (decoded from COSI resources into
// plain data) and the Kubernetes shapes it writes. No logic lives here.

/** `PlatformMetadatas.talos.dev` spec, field names as in Talos' YAML. Absent strings are "". */
export interface PlatformMetadata {
  platform: string;
  hostname: string;
  region: string;
  zone: string;
  instanceType: string;
  instanceId: string;
  providerId: string;
  spot: boolean;
  internalDNS: string;
  externalDNS: string;
  /**
   * Keyed by the machine's Talos: a null-prototype object as decoded (lib/talosbounds.ts boundTags),
   * so that a tag named `constructor` or `__proto__` is data; read with Object.hasOwn or entries.
   */
  tags: Record<string, string>;
}

/** `SystemInformations.hardware.talos.dev` spec. Absent strings are "". */
export interface SystemInformation {
  manufacturer: string;
  productName: string;
  version: string;
  serialNumber: string;
  uuid: string;
  wakeUpType: string;
  skuNumber: string;
}

/** Address family as Talos encodes it (Linux AF_* numbers). */
export type AddressFamily = "inet4" | "inet6";

/** One `AddressStatuses.net.talos.dev` resource. */
export interface AddressStatus {
  /** Resource id, `<link>/<prefix>`. */
  id: string;
  /** Address with prefix length, e.g. `10.0.0.5/24` or `2001:db8::5/64`. */
  address: string;
  linkName: string;
  linkIndex: number;
  family: AddressFamily;
  /** 0 global, 200 site, 253 link, 254 host, 255 nowhere. */
  scope: number;
  /** IFA_F_* bitmask: permanent is 0x80, deprecated 0x20, temporary 0x1. */
  flags: number;
}

/** The subset of `ControllerManagerConfigs.kubernetes.talos.dev` a CCM needs. */
export interface ControllerManagerConfig {
  podCIDRs: string[];
  serviceCIDRs: string[];
}

/** What Talos knows about one node, as the controllers consume it. */
export interface NodeFacts {
  platformMetadata: PlatformMetadata;
  /** Absent when the node does not publish it (the node still initializes). */
  systemInformation?: SystemInformation;
  addresses: AddressStatus[];
  /** The node's Talos version tag (e.g. "v1.9.0"), the rules' TalosVersion; absent when not fetched. */
  talosVersion?: string;
}

/** The effects a Node taint can have. */
export type TaintEffect = "NoSchedule" | "PreferNoSchedule" | "NoExecute";

/** A Kubernetes taint. */
export interface Taint {
  key: string;
  value?: string;
  effect: TaintEffect;
}

/** The types of a Node's status addresses. */
export type NodeAddressType = "Hostname" | "InternalIP" | "ExternalIP" | "InternalDNS" | "ExternalDNS";

/** A Kubernetes `NodeAddress`. */
export interface NodeAddress {
  type: NodeAddressType;
  address: string;
}

/** Features a transformation rule can switch on for the nodes it matches. */
export interface Features {
  publicIPDiscovery: boolean;
}
