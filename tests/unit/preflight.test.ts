import { describe, expect, test } from "bun:test";
import { defaultSettings } from "../../lib/manifests.ts";
import {
  type Finding,
  flagValue,
  formatFindings,
  type Installed,
  isCcmImage,
  leaseOf,
  preflightFindings,
  safeToSwitch,
  type Workload,
} from "../../lib/preflight.ts";
import { planMigration, readMachineConfig } from "../../lib/talosmigration.ts";
import { GO_IMAGE_TAGGED, goCcmArgs } from "../support/goccm.ts";

const NOW = Date.parse("2026-11-29T03:00:00Z");
/** The Go CCM's Deployment as its docs/deploy/cloud-controller-manager.yml installs it. */
const GO_DEPLOYMENT: Workload = {
  kind: "Deployment",
  namespace: "kube-system",
  name: "talos-cloud-controller-manager",
  image: GO_IMAGE_TAGGED,
  args: goCcmArgs(),
  configMaps: ["talos-cloud-controller-manager"],
};
const config = (text: string | null) => [
  { namespace: "kube-system", name: "talos-cloud-controller-manager", text },
];

function installed(over: Partial<Installed> = {}): Installed {
  return {
    namespace: "kube-system",
    workloads: [],
    cloudConfigs: config(null),
    extensionReader: false,
    lease: null,
    machineConfigs: [],
    unreadable: [],
    ...over,
  };
}

const levels = (f: Finding[]) => f.map((x) => x.level);

describe("preflightFindings()", () => {
  test("a Go install: its Deployment, its open /metrics, its extra RoleBinding are changes, each with the command", () => {
    const f = preflightFindings(
      installed({
        workloads: [GO_DEPLOYMENT],
        extensionReader: true,
        cloudConfigs: config("global:\n  clusterName: c\n"),
        lease: {
          namespace: "kube-system",
          name: "cloud-controller-manager-talos",
          holder: "talos-cloud-controller-manager-7d9_abc",
          renewTime: "2026-11-29T02:59:50Z",
        },
      }),
      NOW,
    );
    expect(levels(f)).toEqual(["change", "change", "change", "ok", "ok"]);
    expect(f[0]?.what).toContain(
      "Deployment kube-system/talos-cloud-controller-manager runs the Go CCM (ghcr.io/siderolabs/talos-cloud-controller-manager:v1.12.0): it holds or competes for the Lease kube-system/cloud-controller-manager-talos",
    );
    expect(f[0]?.fix).toBe(
      "after this CCM's manifests are applied: kubectl -n kube-system delete deployment talos-cloud-controller-manager",
    );
    expect(f[1]?.what).toContain("serves /metrics to anyone");
    expect(f[2]?.fix).toBe(
      "kubectl -n kube-system delete rolebinding system:talos-cloud-controller-manager:extension-apiserver-authentication-reader",
    );
    expect(f[4]?.what).toContain("held by talos-cloud-controller-manager-7d9_abc, renewed 10 s ago");
  });

  test("a Go CCM electing on another Lease than this CCM's: both would lead at once", () => {
    const w = { ...GO_DEPLOYMENT, namespace: "ccm", args: ["--leader-elect-resource-namespace", "ccm"] };
    const [f] = preflightFindings(installed({ workloads: [w] }), NOW);
    expect(f?.what).toContain(
      "on the Lease ccm/cloud-controller-manager-talos, this CCM on kube-system/cloud-controller-manager-talos: both would lead at once",
    );
  });

  test("a config this CCM refuses breaks the switch, first; its warnings are changes", () => {
    const refused = preflightFindings(
      installed({
        cloudConfigs: config(
          'transformations:\n  - name: x\n    nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: In, values: [metal]}\n    taints:\n      example.com/a: "x:NoSchedul"\n',
        ),
      }),
      NOW,
    );
    expect(refused[0]?.level).toBe("breaks");
    expect(refused[0]?.what).toContain("NoSchedul");
    expect(refused[0]?.what).toContain("refuses the file at start-up");
    expect(safeToSwitch(refused)).toBe(false);
    const warned = preflightFindings(
      installed({
        cloudConfigs: config(
          "transformations:\n  - name: x\n    nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: In, values: [metal]}\n    labels:\n      'talos.dev/zone\"': a\n",
        ),
      }),
      NOW,
    );
    expect(levels(warned)).toContain("change");
    expect(safeToSwitch(warned)).toBe(true);
  });

  test("a machine config with the Go manifest URL needs its migration patch, made with the operator's config", () => {
    const text =
      "version: v1alpha1\ncluster:\n  externalCloudProvider:\n    enabled: true\n    manifests:\n      - https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml\n";
    const plan = planMigration(defaultSettings("0.1.0"), readMachineConfig(text));
    const findings = preflightFindings(installed({ machineConfigs: [{ file: "mc.yaml", plan }] }), NOW);
    expect(findings[0]?.level).toBe("change");
    expect(findings[0]?.what).toContain(
      "machine config mc.yaml installs the Go CCM (cluster.externalCloudProvider.manifests[0])",
    );
    expect(findings[0]?.fix).toContain(
      "manifests --machine-config mc.yaml --cloud-config ccm-config.yaml > migrate.yaml",
    );
    const other = preflightFindings(
      installed({ namespace: "ccm", machineConfigs: [{ file: "mc.yaml", plan }] }),
      NOW,
    );
    expect(other[0]?.fix).toContain("--cloud-config ccm-config.yaml --namespace ccm >");
  });

  test("after the switch: this CCM's DaemonSet, only OK lines", () => {
    const ours: Workload = {
      ...GO_DEPLOYMENT,
      kind: "DaemonSet",
      image: "registry.example/talos-ccm/talos-cloud-controller-manager:v0.1.0",
    };
    expect(levels(preflightFindings(installed({ workloads: [ours] }), NOW))).toEqual(["ok", "ok", "ok"]);
  });

  test("the Go image from a mirror is the Go CCM; a CCM image neither project's is unchecked, never OK", () => {
    const mirrored = {
      ...GO_DEPLOYMENT,
      image: "harbor.example/ghcr/siderolabs/talos-cloud-controller-manager:v1.12.0",
    };
    expect(preflightFindings(installed({ workloads: [mirrored] }), NOW)[0]?.what).toContain(
      "runs the Go CCM",
    );
    const unknown = {
      ...GO_DEPLOYMENT,
      image: "harbor.example/mirror/talos-cloud-controller-manager:v1.12.0",
    };
    const f = preflightFindings(installed({ workloads: [unknown] }), NOW);
    expect(f[0]?.level).toBe("unchecked");
    expect(f[0]?.what).toContain("neither the Go CCM's image nor this project's");
    expect(safeToSwitch(f)).toBe(false);
  });

  test("what could not be read is said as not checked, and nothing is said in its place", () => {
    const f = preflightFindings(
      installed({
        workloads: undefined,
        cloudConfigs: [],
        lease: undefined,
        unreadable: ["Deployments and DaemonSets: forbidden", "Lease kube-system/x: forbidden"],
      }),
      NOW,
    );
    expect(f).toEqual([
      { level: "unchecked", what: "not checked: Deployments and DaemonSets: forbidden" },
      { level: "unchecked", what: "not checked: Lease kube-system/x: forbidden" },
    ]);
    expect(safeToSwitch(f)).toBe(false);
    expect(safeToSwitch(preflightFindings(installed(), NOW))).toBe(true);
  });
});

describe("flagValue(), leaseOf(), isCcmImage() and formatFindings()", () => {
  test("a flag's value in either form, the last one winning; the Lease with cloud-provider's defaults", () => {
    expect(flagValue(["--a=1", "--a", "2"], "a")).toBe("2");
    expect(flagValue(["--ab=1"], "a")).toBeUndefined();
    expect(leaseOf(["--leader-elect-resource-name=blue"])).toEqual({
      namespace: "kube-system",
      name: "blue",
    });
    expect(
      leaseOf(["--leader-elect-resource-name", "green", "--leader-elect-resource-namespace=ccm"]),
    ).toEqual({
      namespace: "ccm",
      name: "green",
    });
    expect(leaseOf(["--v=2"])).toEqual({ namespace: "kube-system", name: "cloud-controller-manager-talos" });
  });

  test("a CCM image is one named talos-cloud-controller-manager, from any registry", () => {
    expect(isCcmImage(GO_IMAGE_TAGGED)).toBe(true);
    expect(isCcmImage("ghcr.io/talos-ccm/talos-cloud-controller-manager@sha256:00")).toBe(true);
    expect(isCcmImage("ghcr.io/x/talos-cloud-controller-manager-operator:v1")).toBe(false);
  });

  test("one line per finding, its level first, the fix indented below", () => {
    expect(
      formatFindings([
        { level: "breaks", what: "x", fix: "y" },
        { level: "ok", what: "z" },
      ]),
    ).toBe("BREAKS    x\n          fix: y\nOK        z\n");
  });
});
