// Facts of the Go CCM's own install (siderolabs/talos-cloud-controller-manager,
// docs/deploy/cloud-controller-manager.yml at its v1.12.0 release): its image and its container's
// arguments, which several tests install or parse as a user's cluster has them.

/** The Go CCM's image as its deploy manifest names it. */
export const GO_IMAGE_TAGGED = "ghcr.io/siderolabs/talos-cloud-controller-manager:v1.12.0";

/** The Go deploy manifest's container arguments; its DaemonSet manifest has the same. */
export function goCcmArgs(securePort = 50258): string[] {
  return [
    "--v=2",
    "--cloud-provider=talos",
    "--cloud-config=/etc/talos/ccm-config.yaml",
    "--controllers=cloud-node,node-csr-approval",
    "--leader-elect-resource-name=cloud-controller-manager-talos",
    "--use-service-account-credentials",
    `--secure-port=${securePort}`,
    "--authorization-always-allow-paths=/healthz,/livez,/readyz,/metrics",
  ];
}
