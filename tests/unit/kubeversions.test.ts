// The decisions on what the API server says of itself (lib/kubeversions.ts): its version as
// distributions write it, the supported range, and which group version's ServiceCIDRs are read.
// The same decisions against each real API server of the support matrix: tests/e2e/kube-versions.test.ts.

import { describe, expect, test } from "bun:test";
import {
  describeSources,
  type ResourceList,
  SERVICE_CIDR_GROUP_VERSIONS,
  type ServiceCIDRGroupVersion,
  SUPPORTED_MINORS,
  serverVersion,
  servesResource,
  serviceCIDRGroupVersion,
  serviceCIDRPath,
  supportWarning,
} from "../../lib/kubeversions.ts";

describe("serverVersion", () => {
  test.each([
    [
      { major: "1", minor: "36", gitVersion: "v1.36.3" },
      { major: 1, minor: 36, gitVersion: "v1.36.3" },
    ],
    // GKE and EKS write the minor with a plus.
    [
      { major: "1", minor: "31+", gitVersion: "v1.31.14-eks-abc" },
      { major: 1, minor: 31, gitVersion: "v1.31.14-eks-abc" },
    ],
    // Empty major and minor (a build without them): read from gitVersion.
    [
      { major: "", minor: "", gitVersion: "v1.33.0-rc.1" },
      { major: 1, minor: 33, gitVersion: "v1.33.0-rc.1" },
    ],
    [{ gitVersion: "v1.37.2+k3s1" }, { major: 1, minor: 37, gitVersion: "v1.37.2+k3s1" }],
  ])("%o", (info, want) => {
    expect(serverVersion(info)).toEqual(want);
  });

  test("an answer with no version in it is no version", () => {
    expect(serverVersion({})).toBeUndefined();
    expect(serverVersion({ major: 1, minor: 31, gitVersion: "dev" })).toBeUndefined();
    expect(serverVersion({ major: "one", minor: "x", gitVersion: "v1" })).toBeUndefined();
  });
});

describe("supportWarning", () => {
  const v = (minor: number, major = 1) => ({ major, minor, gitVersion: `v${major}.${minor}.0` });

  test("every minor from the oldest to the newest supported is supported", () => {
    for (let m = SUPPORTED_MINORS.oldest; m <= SUPPORTED_MINORS.newest; m++)
      expect(supportWarning(v(m))).toBeUndefined();
  });

  test("older minors are named unsupported, newer ones untested, another major unsupported", () => {
    expect(supportWarning(v(SUPPORTED_MINORS.oldest - 1))).toBe(
      `Kubernetes v1.${SUPPORTED_MINORS.oldest - 1}.0 is older than this CCM supports (1.31 to 1.37)`,
    );
    expect(supportWarning(v(SUPPORTED_MINORS.newest + 1))).toContain("newer than this CCM is tested with");
    expect(supportWarning(v(0, 2))).toContain("older than this CCM supports");
  });
});

describe("the ServiceCIDR group version", () => {
  const cidrs = {
    name: "servicecidrs",
    verbs: ["create", "delete", "get", "list", "patch", "update", "watch"],
  };
  const status = { name: "servicecidrs/status", verbs: ["get", "list", "watch", "patch", "update"] };
  const found = (entries: Array<[ServiceCIDRGroupVersion, ResourceList | undefined]>) =>
    serviceCIDRGroupVersion(new Map(entries));

  test("v1 is preferred to v1beta1 when both serve it", () => {
    expect(
      found([
        ["networking.k8s.io/v1", { resources: [cidrs, status] }],
        ["networking.k8s.io/v1beta1", { resources: [cidrs] }],
      ]),
    ).toBe("networking.k8s.io/v1");
  });

  test("v1beta1 is read where only it serves ServiceCIDRs (1.31 and 1.32 with the feature gate)", () => {
    expect(
      found([
        ["networking.k8s.io/v1", { resources: [{ name: "ingresses", verbs: ["list", "watch"] }] }],
        ["networking.k8s.io/v1beta1", { resources: [status, cidrs] }],
      ]),
    ).toBe("networking.k8s.io/v1beta1");
  });

  test("none without a listable and watchable servicecidrs resource", () => {
    expect(found([["networking.k8s.io/v1", { resources: [status] }]])).toBeUndefined();
    expect(
      found([["networking.k8s.io/v1", { resources: [{ name: "servicecidrs", verbs: ["get"] }] }]]),
    ).toBeUndefined();
    expect(
      found([
        ["networking.k8s.io/v1", {}],
        ["networking.k8s.io/v1beta1", undefined],
      ]),
    ).toBeUndefined();
    expect(
      servesResource({ resources: [{ name: "servicecidrs", verbs: "list,watch" }] }, "servicecidrs"),
    ).toBe(false);
  });

  test("paths and the start-up line", () => {
    expect(SERVICE_CIDR_GROUP_VERSIONS.map(serviceCIDRPath)).toEqual([
      "/apis/networking.k8s.io/v1/servicecidrs",
      "/apis/networking.k8s.io/v1beta1/servicecidrs",
    ]);
    const version = { major: 1, minor: 31, gitVersion: "v1.31.14" };
    expect(describeSources({ version, serviceCIDRs: undefined })).toEqual({
      version: "v1.31.14",
      serviceCIDRs:
        "not served (networking.k8s.io/v1 from Kubernetes 1.33): Service ranges from " +
        "--service-cluster-ip-range, Talos and Service default/kubernetes",
    });
    expect(describeSources({ version: undefined, serviceCIDRs: "networking.k8s.io/v1beta1" })).toEqual({
      version: "unknown",
      serviceCIDRs: "networking.k8s.io/v1beta1/servicecidrs (watched)",
    });
  });
});
