import { describe, expect, test } from "bun:test";
import { defaultSettings } from "../../lib/manifests.ts";
import {
  type Finding,
  formatFindings,
  type Installed,
  leaseNameOf,
  preflightFindings,
  safeToSwitch,
  type Workload,
} from "../../lib/preflight.ts";
import { planMigration, readInstalled } from "../../lib/talosmigration.ts";
import { GO_IMAGE_TAGGED, goCcmArgs } from "../support/goccm.ts";

const NOW = Date.parse("2026-11-29T03:00:00Z");
/** The Go CCM's Deployment as its docs/deploy/cloud-controller-manager.yml installs it. */
const GO_DEPLOYMENT: Workload = {
  kind: "Deployment",
  namespace: "kube-system",
  name: "talos-cloud-controller-manager",
  image: GO_IMAGE_TAGGED,
  args: goCcmArgs(),
};

function installed(over: Partial<Installed> = {}): Installed {
  return {
    namespace: "kube-system",
    workloads: [],
    cloudConfig: null,
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
        cloudConfig: "global:\n  clusterName: c\n",
        lease: {
          name: "cloud-controller-manager-talos",
          holder: "talos-cloud-controller-manager-7d9_abc",
          renewTime: "2026-11-29T02:59:50Z",
        },
      }),
      NOW,
    );
    expect(levels(f)).toEqual(["change", "change", "change", "ok", "ok"]);
    expect(f[0]?.what).toContain("Deployment kube-system/talos-cloud-controller-manager runs the Go CCM");
    expect(f[0]?.fix).toBe(
      "after this CCM's manifests are applied: kubectl -n kube-system delete deployment talos-cloud-controller-manager",
    );
    expect(f[1]?.what).toContain("serves /metrics to anyone");
    expect(f[2]?.fix).toBe(
      "kubectl -n kube-system delete rolebinding system:talos-cloud-controller-manager:extension-apiserver-authentication-reader",
    );
    expect(f[4]?.what).toContain("held by talos-cloud-controller-manager-7d9_abc, renewed 10 s ago");
  });

  test("a config this CCM refuses breaks the switch, first; its warnings are changes", () => {
    const refused = preflightFindings(
      installed({
        cloudConfig:
          'transformations:\n  - name: x\n    nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: In, values: [metal]}\n    taints:\n      example.com/a: "x:NoSchedul"\n',
      }),
      NOW,
    );
    expect(refused[0]?.level).toBe("breaks");
    expect(refused[0]?.what).toContain("NoSchedul");
    expect(refused[0]?.what).toContain("refuses the file at start-up");
    const warned = preflightFindings(
      installed({
        cloudConfig:
          "transformations:\n  - name: x\n    nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: In, values: [metal]}\n    labels:\n      'talos.dev/zone\"': a\n",
      }),
      NOW,
    );
    expect(levels(warned)).toContain("change");
    expect(levels(warned)).not.toContain("breaks");
  });

  test("a machine config with the Go manifest URL needs its migration patch", () => {
    const config =
      "version: v1alpha1\ncluster:\n  externalCloudProvider:\n    enabled: true\n    manifests:\n      - https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml\n";
    const plan = planMigration(defaultSettings("0.1.0"), readInstalled(config));
    const [finding] = preflightFindings(installed({ machineConfigs: [{ file: "mc.yaml", plan }] }), NOW);
    expect(finding?.level).toBe("change");
    expect(finding?.what).toContain(
      "machine config mc.yaml installs the Go CCM (cluster.externalCloudProvider.manifests[0])",
    );
    expect(finding?.fix).toContain("manifests --machine-config mc.yaml");
  });

  test("after the switch: this CCM's DaemonSet, nothing to change", () => {
    const ours: Workload = {
      ...GO_DEPLOYMENT,
      kind: "DaemonSet",
      image: "ghcr.io/talos-ccm/talos-cloud-controller-manager:v0.1.0",
    };
    expect(levels(preflightFindings(installed({ workloads: [ours] }), NOW))).toEqual(["ok", "ok", "ok"]);
  });

  test("what could not be read is said, as not checked", () => {
    const f = preflightFindings(
      installed({ cloudConfig: undefined, lease: undefined, unreadable: ["Lease kube-system/x: forbidden"] }),
      NOW,
    );
    expect(f[0]).toEqual({ level: "unchecked", what: "not checked: Lease kube-system/x: forbidden" });
    expect(safeToSwitch(f)).toBe(false);
    expect(safeToSwitch(preflightFindings(installed(), NOW))).toBe(true);
  });
});

describe("leaseNameOf() and formatFindings()", () => {
  test("the Lease a workload's args name, in either form, else the default", () => {
    expect(leaseNameOf(["--leader-elect-resource-name=blue"])).toBe("blue");
    expect(leaseNameOf(["--leader-elect-resource-name", "green"])).toBe("green");
    expect(leaseNameOf(["--v=2"])).toBe("cloud-controller-manager-talos");
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
