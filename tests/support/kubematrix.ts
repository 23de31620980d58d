// The Kubernetes support matrix the suite runs (tests/run.ts) and what differs per version, written
// from the Kubernetes release notes rather than from the CCM's own code, so that a test compares the
// CCM's behaviour against it. The README's support matrix and lib/kubeversions.ts's range are checked
// against this file by tests/unit/kubematrix.test.ts.

import type { ServerVersion } from "../../lib/kubeversions.ts";

/** One row of the matrix: a release the test bed builds (tests/support/testbed-bins.sh). */
export interface MatrixVersion {
  /** The k8s.io/kubernetes module version built. */
  version: string;
  /** Why it is in the matrix. */
  role: string;
  /** Test files run against it: every file, or the core end-to-end flows. */
  suite: "all" | "core";
}

/**
 * The versions CI runs. The default follows Talos's (machinery v1.13.5 constants:
 * DefaultKubernetesVersion 1.36.2; 1.36.3 is the newest 1.36 patch served here); the oldest is the
 * oldest Talos v1.13 supports (SupportedKubernetesVersions = 6); the newest is upstream's newest.
 */
export const KUBE_MATRIX = [
  { version: "v1.36.3", role: "Talos v1.13's default minor", suite: "all" },
  { version: "v1.31.14", role: "the oldest Talos v1.13 supports", suite: "core" },
  { version: "v1.37.2", role: "upstream's newest", suite: "core" },
] as const satisfies readonly MatrixVersion[];

/** The version `npm test` runs the whole suite on (and testbed-bins.sh builds by default). */
export const DEFAULT_KUBE_VERSION = KUBE_MATRIX[0].version;

/**
 * The core end-to-end flows run on every other version of the matrix: cloud-node, CSR approval in
 * both modes (with and without Talos) and its threat model, IPAM, lifecycle, RBAC with the shipped
 * manifests, and the version-dependent behaviour itself.
 */
export const CORE_FLOWS = [
  "tests/e2e/cloud-node.test.ts",
  "tests/e2e/csr.test.ts",
  "tests/e2e/csr-threats.test.ts",
  "tests/e2e/ipam.test.ts",
  "tests/e2e/lifecycle.test.ts",
  "tests/e2e/rbac.test.ts",
  "tests/e2e/kube-versions.test.ts",
] as const;

/**
 * Whether the API server serves ServiceCIDR objects in networking.k8s.io/v1 by default: GA and on
 * from Kubernetes 1.33 (KEP-1880); on 1.31 and 1.32 only as v1beta1 behind the
 * MultiCIDRServiceAllocator feature gate, off by default.
 */
export function servesServiceCIDRv1(v: ServerVersion): boolean {
  return v.major > 1 || v.minor >= 33;
}

/** kube-apiserver flags that turn the beta ServiceCIDR API on where it is beta (1.31 and 1.32). */
export const SERVICE_CIDR_BETA_FLAGS = [
  "--feature-gates=MultiCIDRServiceAllocator=true",
  "--runtime-config=networking.k8s.io/v1beta1=true",
] as const;
