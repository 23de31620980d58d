// Well-known Kubernetes names that several parts of this CCM read or write (controllers, config
// validation, generated manifests and their RBAC, test bed): Node taints and annotations, the kubelet
// serving signer, the Events namespace, reconcile mode's record. Kept in one place so that they cannot drift apart. Only
// names; what they mean for a controller lives with that controller.

/** The taint a kubelet run with `--cloud-provider=external` registers its Node with; the CCM removes it. */
export const UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized";

/** The taint key of a NotReady node whose instance is shut down (cloud-provider's ShutdownTaint). */
export const SHUTDOWN_TAINT_KEY = "node.cloudprovider.kubernetes.io/shutdown";

/** The taint key Kubernetes' node lifecycle sets from a NotReady condition (and admission at registration). */
export const NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready";

/** The annotation a kubelet run with `--cloud-provider=external` writes its `--node-ip` into. */
export const PROVIDED_NODE_IP_ANNOTATION = "alpha.kubernetes.io/provided-node-ip";

/** The signer of kubelet serving certificates: the only CSRs node-csr-approval ever decides. */
export const KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving";

/** Where Talos' talosconfig Secret for a talos.dev ServiceAccount is mounted in the CCM's pod. */
export const TALOS_SECRET_DIR = "/var/run/secrets/talos.dev";

/** Default talosconfig path inside a pod, where the ServiceAccount secret is mounted. */
export const SERVICE_ACCOUNT_TALOSCONFIG = `${TALOS_SECRET_DIR}/config`;

/** The namespace Kubernetes records Events about cluster-scoped objects (Nodes, CSRs) in. */
export const EVENTS_NAMESPACE = "default";

/**
 * The Node annotation holding what the rules put on the node. Its value is compact JSON:
 * `{"v":1,"labels":[…],"annotations":[…],"taints":["<key>:<Effect>",…]}`, lists sorted, empty
 * lists left out.
 */
export const MANAGED_ANNOTATION = "talos.dev/ccm-managed";

/**
 * The Node label holding the digest of the {@link MANAGED_ANNOTATION} value, written in the same
 * patch. A kubelet may edit its own Node's annotations, but NodeRestriction admission refuses it
 * any change to labels under `node-restriction.kubernetes.io/`: a record whose digest is not in
 * this label was not written by the CCM, and what it names is never removed.
 */
export const MANAGED_DIGEST_LABEL = "node-restriction.kubernetes.io/talos-ccm-managed";

/**
 * The field manager this CCM's writes are recorded under in a Node's metadata.managedFields. The
 * API server names a writer without an explicit `fieldManager` after its User-Agent up to the first
 * "/" (k8s.io/apiserver prefixFromUserAgent): this CCM's clients send
 * `talos-cloud-controller-manager/<version>` (lib/manager.ts), and so did the Go CCM's binary
 * (client-go's default User-Agent is the executable's name), so Nodes it wrote read the same. The
 * cloud-node controller also passes it explicitly with each Node patch.
 */
export const FIELD_MANAGER = "talos-cloud-controller-manager";
