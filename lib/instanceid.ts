// Which Talos platforms always name their instances, as read in the Talos sources: the data behind
// the providerID decision (lib/desirednode.ts decideProviderID), which waits for the instance ID on
// these platforms instead of writing a fallback.
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
