// Which providerID a Node gets, and when none may be written yet (pure; the cloud-node controller in
// lib/node.ts asks, lib/desirednode.ts writes the answer).
//
// spec.providerID can be set once and never changed. Talos publishes a machine's PlatformMetadata
// before its platform has read the cloud's metadata service: until then the resource carries the
// platform name alone (controllers/network/platform_config_apply.go:124-130 in Talos v1.13.5, "if we
// don't have any config yet, populate a minimal one"), and a metadata key the service answers 404
// or empty for is taken as "" (hcloud/metadata.go:56-65, exoscale/metadata.go:33-42,
// cloudstack/metadata.go:42-51), which makes the provider ID `hcloud://`. The Go CCM writes its
// fallback `talos://<platform>/<ip>` in that window (siderolabs/talos-cloud-controller-manager
// issue #351); the cloud's own CCM cannot parse it, for the Node's whole life. On a platform whose
// metadata always names the instance, this CCM waits for the instance ID instead.

import type { PlatformMetadata } from "./types.ts";

/** Where a Talos platform's PlatformMetadata comes from, as read in the Talos v1.13.5 sources. */
export interface PlatformSource {
  /** The providerID Talos builds (`<id>` is the instance ID); "" when Talos builds none. */
  providerID: string;
  /**
   * File and lines under internal/app/machined/pkg/runtime/v1alpha1/platform/ in
   * github.com/siderolabs/talos@v1.13.5 where InstanceID and ProviderID are set.
   */
  source: string;
}

/**
 * Platforms whose metadata service always names the instance: Talos sets InstanceID from it and
 * builds ProviderID in the cloud's own format. A Node on one of these without an instance ID in its
 * PlatformMetadata is waiting for that service, not lacking an ID. Keys are the names Talos
 * publishes (`Name()` of each platform).
 */
export const PLATFORMS_NAMING_INSTANCES: Readonly<Record<string, PlatformSource>> = {
  akamai: { providerID: "linode://<id>", source: "akamai/akamai.go:149-150" },
  aws: { providerID: "aws:///<zone>/<id>", source: "aws/aws.go:246-247" },
  azure: { providerID: "azure://<resource id>", source: "azure/azure.go:187-188" },
  cloudstack: { providerID: "cloudstack://<id>", source: "cloudstack/cloudstack.go:59-60" },
  "digital-ocean": { providerID: "digitalocean://<id>", source: "digitalocean/digitalocean.go:234-235" },
  equinixMetal: { providerID: "equinixmetal://<id>", source: "equinixmetal/equinix.go:375-376" },
  exoscale: { providerID: "exoscale://<id>", source: "exoscale/exoscale.go:59-60" },
  gcp: { providerID: "gce://<project>/<zone>/<name>", source: "gcp/gcp.go:166-167" },
  hcloud: { providerID: "hcloud://<id>", source: "hcloud/hcloud.go:146-147" },
  openstack: { providerID: "openstack:///<id>", source: "openstack/openstack.go:406-408" },
  oracle: { providerID: "oci://<id>", source: "oracle/oracle.go:126-127" },
  scaleway: { providerID: "scaleway://instance/<zone>/<id>", source: "scaleway/scaleway.go:174-175" },
  upcloud: { providerID: "upcloud://<id>", source: "upcloud/upcloud.go:173-174" },
  vultr: { providerID: "vultr://<id>", source: "vultr/vultr.go:152-153" },
};

/**
 * Platforms that fall back to `talos://<platform>/<node IP>` at once: Talos builds no ProviderID
 * there (or only copies an optional one), so the fallback is the only ID the node will ever get
 * and waiting would gain nothing. Any platform in neither table (a newer Talos) falls back too, as
 * the Go CCM does.
 */
export const PLATFORMS_FALLING_BACK: Readonly<Record<string, PlatformSource>> = {
  // InstanceID is the SMBIOS UUID when there is one; no ProviderID.
  metal: { providerID: "", source: "metal/metal.go:189-226" },
  // meta-data's instance-id and provider-id are both optional (Proxmox, CAPI, hand-made seeds).
  nocloud: { providerID: "<meta-data provider-id>", source: "nocloud/nocloud.go:77-86, metadata.go:133-142" },
  // guestinfo metadata's instance-id; no ProviderID.
  vmware: { providerID: "", source: "vmware/vmware_supported.go:259, 275-279" },
  // the context's VMID; no ProviderID.
  opennebula: { providerID: "", source: "opennebula/opennebula.go:846-849" },
  // no instance at all.
  container: { providerID: "", source: "container/container.go:79-83" },
};

/** Whether Talos on `platform` always names the instance (see {@link PLATFORMS_NAMING_INSTANCES}). */
export function namesInstances(platform: string): boolean {
  return Object.hasOwn(PLATFORMS_NAMING_INSTANCES, platform);
}

/** What {@link decideProviderID} decides. */
export type ProviderIDDecision =
  /** The Node has a providerID: it is never changed. */
  | { action: "keep" }
  /** Write `providerID`; `from` says whose it is. */
  | { action: "write"; providerID: string; from: "talos" | "rule" | "fallback" }
  /** Write none (a rule rendered an empty ProviderID on a platform that does not wait). */
  | { action: "none" }
  /** Write nothing yet: the platform names its instances and Talos has not published the ID. */
  | { action: "wait"; platform: string; waitingFor: string };

/** The inputs of {@link decideProviderID}. */
export interface ProviderIDInput {
  /** The Node's spec.providerID ("" when unset). */
  nodeProviderID: string;
  /** The PlatformMetadata as Talos published it (before any default or rule). */
  talos: Pick<PlatformMetadata, "platform" | "instanceId" | "providerId">;
  /** The providerId the rules saw: Talos's, normalized, or the fallback (lib/desirednode.ts instanceFacts). */
  before: string;
  /** The providerId after the rules' platformMetadata overrides. */
  after: string;
}

/**
 * The providerID to write on a Node, or why none is written now.
 * 1. A Node that has one keeps it (the API server refuses any change).
 * 2. A rule that changed ProviderID to a non-empty value decides: the operator chose it, no wait.
 * 3. On a platform that names its instances ({@link PLATFORMS_NAMING_INSTANCES}), Talos's
 *    metadata without an instance ID or without a provider ID is not read yet: wait. Neither the
 *    fallback nor Talos's half-built ID (`hcloud://`) is written.
 * 4. Otherwise Talos's providerID, or the fallback when Talos has none (a rule's empty value
 *    writes none, as before).
 * @example
 * decideProviderID({ nodeProviderID: "", talos: { platform: "hcloud", instanceId: "", providerId: "" },
 *   before: "talos://hcloud/10.0.1.2", after: "talos://hcloud/10.0.1.2" }).action // "wait"
 */
export function decideProviderID(input: ProviderIDInput): ProviderIDDecision {
  const { nodeProviderID, talos, before, after } = input;
  if (nodeProviderID !== "") return { action: "keep" };
  if (after !== "" && after !== before) return { action: "write", providerID: after, from: "rule" };
  if (namesInstances(talos.platform) && (talos.instanceId === "" || talos.providerId === "")) {
    const expected = (PLATFORMS_NAMING_INSTANCES[talos.platform] as PlatformSource).providerID;
    return {
      action: "wait",
      platform: talos.platform,
      waitingFor: `its instance ID: Talos reports platform ${talos.platform} without ${
        talos.instanceId === "" ? "an instance ID" : "a provider ID"
      } (its metadata service has not been read yet), and the providerID ${expected} is written once Talos publishes it`,
    };
  }
  if (after === "") return { action: "none" };
  return { action: "write", providerID: after, from: talos.providerId !== "" ? "talos" : "fallback" };
}
