// The Talos machine-config patch that installs this CCM on control-plane machines: the external
// cloud provider, the manifests as an inline manifest, the kubelet flags and Talos API access for the
// talos.dev ServiceAccount; as an object (which lib/talosmigration.ts changes for one machine) and as
// commented YAML. Pure.

import { Controllers } from "./controllernames.ts";
import { PROGRAM_NAME } from "./help.ts";
import {
  APP_NAME,
  type Manifest,
  type ManifestSettings,
  renderDocument,
  renderManifests,
} from "./manifests.ts";

const { nodeCsrApproval, nodeIpam } = Controllers;

/**
 * The Talos machine-config patch for control-plane nodes that installs this CCM, as an object: the
 * external cloud provider, the manifests as an inline manifest, the kubelet flags and Talos API access
 * for the talos.dev ServiceAccount. With node-ipam, kube-controller-manager's own IPAM is turned off.
 */
export function talosPatch(s: ManifestSettings) {
  const ipam = s.enabledControllers.includes(nodeIpam);
  return {
    machine: {
      kubelet: kubeletPatch(s),
      features: {
        kubernetesTalosAPIAccess: {
          enabled: true,
          allowedRoles: ["os:reader"],
          allowedKubernetesNamespaces: [s.namespace],
        },
      },
    },
    cluster: {
      externalCloudProvider: { enabled: true },
      ...(ipam
        ? { controllerManager: { extraArgs: { controllers: "*,tokencleaner,-node-ipam-controller" } } }
        : {}),
      inlineManifests: [{ name: APP_NAME, contents: renderManifests(s) }],
    },
  };
}

/** The kubelet settings every node needs (the worker patch). */
function kubeletPatch(s: ManifestSettings) {
  const csr = s.enabledControllers.includes(nodeCsrApproval);
  return {
    extraArgs: {
      "cloud-provider": "external",
      ...(csr ? { "rotate-server-certificates": "true" } : {}),
    },
  };
}

/** {@link talosPatch}'s object. */
export type TalosPatch = ReturnType<typeof talosPatch>;

/**
 * The Talos patch of {@link talosPatch} as YAML, with comments on its parts and on how to apply it.
 * @param patch the object to write: {@link talosPatch}'s, or one a migration changed (lib/talosmigration.ts)
 */
export function renderTalosPatch(s: ManifestSettings, patch: object = talosPatch(s)): string {
  const csr = s.enabledControllers.includes(nodeCsrApproval);
  const ipam = s.enabledControllers.includes(nodeIpam);
  const notes: NonNullable<Manifest["notes"]> = [
    {
      path: ["machine", "kubelet", "extraArgs"],
      text: csr
        ? " Every node: register uninitialized for the CCM; ask for a serving certificate node-csr-approval checks."
        : " Every node: register uninitialized for the CCM.",
    },
    {
      path: ["machine", "features", "kubernetesTalosAPIAccess"],
      text: " Control-plane nodes only (Talos refuses it on workers): the CCM's talosconfig.",
    },
  ];
  if (ipam) {
    notes.push({
      path: ["cluster", "controllerManager"],
      text: " node-ipam allocates pod CIDRs, so kube-controller-manager must not.",
    });
  }
  const worker = JSON.stringify({ machine: { kubelet: kubeletPatch(s) } });
  const comment = [
    ` ${PROGRAM_NAME} ${s.version}: Talos machine-config patch for control-plane nodes, e.g.`,
    "   talosctl gen config <cluster> <endpoint> --config-patch-control-plane @talos-patch.yaml \\",
    `     --config-patch-worker '${worker}'`,
    " or, on a running cluster: talosctl patch machineconfig --nodes <control-plane IPs> --patch @talos-patch.yaml",
    " (Talos applies inline manifests at bootstrap; later, `talosctl upgrade-k8s` syncs them).",
  ].join("\n");
  return renderDocument(patch, comment, notes);
}
