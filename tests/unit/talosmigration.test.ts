import { describe, expect, test } from "bun:test";
import { parse, parseAllDocuments, stringify } from "yaml";
import { APP_NAME, defaultSettings } from "../../lib/manifests.ts";
import {
  MachineConfigError,
  type MachineManifests,
  planMigration,
  readMachineConfig,
  renderMigrationPatch,
  replacedURL,
} from "../../lib/talosmigration.ts";
import { renderTalosPatch, talosPatch } from "../../lib/talospatch.ts";

/** The URL the Go CCM's docs/install.md puts in cluster.externalCloudProvider.manifests. */
const GO_URL =
  "https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml";
const OTHER = "https://example.com/cni.yaml";

function config(cluster: Record<string, unknown>): string {
  return `${stringify({ version: "v1alpha1", machine: { type: "controlplane" }, cluster })}---\n${stringify({
    apiVersion: "v1alpha1",
    kind: "HostnameConfig",
    auto: "stable",
  })}`;
}

const noLists = { cloudProviderManifests: [], extraManifests: [], allowedRoles: [], allowedNamespaces: [] };
const none: MachineManifests = { lists: noLists, inlineManifests: [] };
const s = defaultSettings("0.1.0");

/** An installed config with these lists (the others empty) and inline manifests. */
function installed(
  lists: Partial<MachineManifests["lists"]>,
  inlineManifests: MachineManifests["inlineManifests"] = [],
): MachineManifests {
  return { lists: { ...noLists, ...lists }, inlineManifests };
}

describe("readMachineConfig()", () => {
  test("reads the manifest lists of the v1alpha1 document of a multi-document config", () => {
    const text = `${config({
      externalCloudProvider: { enabled: true, manifests: [OTHER, GO_URL] },
      extraManifests: ["https://example.com/x.yaml"],
      inlineManifests: [{ name: "cni", contents: "kind: List\n" }],
    })}---\n${stringify({ version: "v1alpha1", kind: "NotThisOne" })}`;
    expect(readMachineConfig(text)).toEqual(
      installed({ cloudProviderManifests: [OTHER, GO_URL], extraManifests: ["https://example.com/x.yaml"] }, [
        { name: "cni", contents: "kind: List\n" },
      ]),
    );
  });

  test("unwraps the resource `talosctl get machineconfig -o yaml` prints (its spec is the config as a string)", () => {
    const resource = stringify({
      node: "10.5.0.2",
      metadata: { namespace: "config", type: "MachineConfigs.config.talos.dev", id: "v1alpha1" },
      spec: config({ externalCloudProvider: { manifests: [GO_URL] } }),
    });
    expect(readMachineConfig(resource).lists.cloudProviderManifests).toEqual([GO_URL]);
  });

  test("a config without these lists installs nothing", () => {
    expect(readMachineConfig(config({ clusterName: "c" }))).toEqual(none);
  });

  test.each([
    ["not YAML", "version: [v1alpha1", /not YAML/],
    ["no v1alpha1 document", "apiVersion: v1\nkind: ConfigMap\n", /no v1alpha1 document/],
    [
      "manifests not a list",
      config({ externalCloudProvider: { manifests: GO_URL } }),
      /externalCloudProvider.manifests is not a list of strings/,
    ],
    [
      "a manifest not a string",
      config({ extraManifests: [{ url: OTHER }] }),
      /cluster.extraManifests is not a list of strings/,
    ],
    [
      "an inline manifest without a name",
      config({ inlineManifests: [{ contents: "" }] }),
      /inlineManifests\[0\] has no name/,
    ],
  ])("refuses %s with the reason", (_, text, reason) => {
    expect(() => readMachineConfig(text)).toThrow(MachineConfigError);
    expect(() => readMachineConfig(text)).toThrow(reason);
  });
});

describe("replacedURL()", () => {
  test.each([
    [GO_URL, "the Go CCM"],
    [
      "https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/v1.12.0/docs/deploy/cloud-controller-manager-daemonset.yml",
      "the Go CCM",
    ],
    [
      "https://github.com/siderolabs/talos-cloud-controller-manager/raw/main/docs/deploy/cloud-controller-manager-edge.yml",
      "the Go CCM",
    ],
    [
      "https://cdn.jsdelivr.net/gh/siderolabs/talos-cloud-controller-manager@main/docs/deploy/cloud-controller-manager.yml",
      "the Go CCM",
    ],
    [
      "https://github.com/talos-ccm/talos-cloud-controller-manager/releases/download/v0.1.0/talos-cloud-controller-manager-daemonset.yaml",
      "this project",
    ],
    ["https://mirror.example/talos-cloud-controller-manager-deployment.yaml?sig=1", "this project"],
  ])("%s installs %s", (url, what) => {
    expect(replacedURL(url)).toBe(what as "the Go CCM");
  });

  test.each([
    OTHER,
    "https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager-fork/main/x.yml",
    "https://example.com/siderolabs/talos-cloud-controller-manager.yaml",
  ])("%s is kept", (url) => {
    expect(replacedURL(url)).toBeUndefined();
  });
});

describe("planMigration()", () => {
  test("removes the CCM entries of each list, keeps the others in order, and rewrites only lists that lose one", () => {
    const plan = planMigration(
      s,
      installed(
        { cloudProviderManifests: [OTHER, GO_URL, "https://example.com/b.yaml"], extraManifests: [OTHER] },
        [
          { name: "cni", contents: "kind: DaemonSet\n" },
          { name: "go-ccm", contents: "image: ghcr.io/siderolabs/talos-cloud-controller-manager:v1.12.0\n" },
          { name: APP_NAME, contents: "an earlier release\n" },
        ],
      ),
    );
    expect(plan.removed).toEqual([
      { path: "cluster.externalCloudProvider.manifests[1]", entry: GO_URL, installs: "the Go CCM" },
      { path: "cluster.inlineManifests[1]", entry: "go-ccm", installs: "the Go CCM" },
      { path: "cluster.inlineManifests[2]", entry: APP_NAME, installs: "this project" },
    ]);
    expect(plan.rewritten).toEqual({ cloudProviderManifests: [OTHER, "https://example.com/b.yaml"] });
    expect(plan.deletedInline).toEqual(["go-ccm", APP_NAME]);
    expect(plan.patch.cluster.externalCloudProvider as object).toEqual({
      enabled: true,
      manifests: [OTHER, "https://example.com/b.yaml"],
    });
  });

  test("a Go URL in cluster.extraManifests is removed too; an emptied list is not written back", () => {
    const plan = planMigration(s, installed({ extraManifests: [GO_URL] }));
    expect(plan.rewritten).toEqual({ extraManifests: [] });
    expect("extraManifests" in plan.patch.cluster).toBe(false);
  });

  test("Talos API roles and namespaces the machine has are rewritten as their union with the patch's, without duplicates", () => {
    const plan = planMigration(
      s,
      installed({
        allowedRoles: ["os:reader", "os:operator"],
        allowedNamespaces: ["kube-system", "monitoring"],
      }),
    );
    expect(plan.rewritten).toEqual({
      allowedRoles: ["os:reader", "os:operator"],
      allowedNamespaces: ["kube-system", "monitoring"],
    });
    expect(plan.patch.machine.features.kubernetesTalosAPIAccess).toEqual({
      enabled: true,
      allowedRoles: ["os:reader", "os:operator"],
      allowedKubernetesNamespaces: ["kube-system", "monitoring"],
    });
    const other = planMigration(
      { ...s, namespace: "ccm" },
      installed({ allowedNamespaces: ["kube-system"] }),
    );
    expect(other.rewritten.allowedNamespaces).toEqual(["kube-system", "ccm"]);
  });

  test("nothing to remove or rewrite: an empty plan and this release's patch", () => {
    expect(planMigration(s, installed({ extraManifests: [OTHER] }))).toEqual({
      removed: [],
      rewritten: {},
      deletedInline: [],
      patch: talosPatch(s),
    });
  });
});

describe("planMigration() and inline manifests", () => {
  const goObjects = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: talos-cloud-controller-manager
spec:
  template:
    spec:
      containers:
        - image: harbor.example/siderolabs/talos-cloud-controller-manager:v1.12.0
`;

  test("an inline manifest of the Go CCM's objects alone (its image from any registry) is deleted", () => {
    const plan = planMigration(s, installed({}, [{ name: "ccm", contents: goObjects }]));
    expect(plan.deletedInline).toEqual(["ccm"]);
  });

  test("one that runs the Go image beside other objects is refused: deleting it would delete them", () => {
    const bundle = `${goObjects}---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: cilium\n`;
    expect(() => planMigration(s, installed({}, [{ name: "cni-and-ccm", contents: bundle }]))).toThrow(
      "cluster.inlineManifests[0] (cni-and-ccm) runs the Go CCM's image beside other objects (DaemonSet cilium)",
    );
  });
});

describe("renderMigrationPatch()", () => {
  test("what the config holds stays inside the header's comments: a line break in an entry cannot add YAML", () => {
    const url = `${GO_URL}\nmachine:\n  type: worker`;
    const out = renderMigrationPatch(
      s,
      planMigration(s, installed({ cloudProviderManifests: [url] })),
      "a\nb.yaml",
    );
    const docs = parseAllDocuments(out).map((d) => d.toJS() as Record<string, unknown>);
    expect(docs[0]).toEqual({ cluster: { externalCloudProvider: { manifests: { $patch: "delete" } } } });
    expect(out.split("\n").filter((l) => l.startsWith("machine:"))).toHaveLength(1);
  });

  test("with nothing to remove, it is this release's Talos patch under a header naming the machine config", () => {
    const out = renderMigrationPatch(s, planMigration(s, none), "mc.yaml");
    expect(out).toContain('whose config is "mc.yaml"');
    expect(parseAllDocuments(out)).toHaveLength(1);
    expect(parse(out)).toEqual(parse(renderTalosPatch(s)));
  });

  test("deletes the lists it rewrites and the replaced inline manifests, then writes them back", () => {
    const plan = planMigration(
      s,
      installed(
        { cloudProviderManifests: [GO_URL, OTHER], extraManifests: [GO_URL], allowedRoles: ["os:reader"] },
        [{ name: APP_NAME, contents: "" }],
      ),
    );
    const out = renderMigrationPatch(s, plan, "mc.yaml");
    expect(out).toContain(`# removes cluster.externalCloudProvider.manifests[0] (the Go CCM): "${GO_URL}"`);
    // Each delete selector is written out (no YAML alias: Talos cannot decode one).
    expect(out).not.toMatch(/[&*]a1/);
    const docs = parseAllDocuments(out).map((d) => d.toJS());
    expect(docs).toHaveLength(2);
    expect(docs[0]).toEqual({
      cluster: {
        externalCloudProvider: { manifests: { $patch: "delete" } },
        extraManifests: { $patch: "delete" },
        inlineManifests: [{ name: APP_NAME, $patch: "delete" }],
      },
      machine: { features: { kubernetesTalosAPIAccess: { allowedRoles: { $patch: "delete" } } } },
    });
    expect(docs[1]).toEqual(parse(renderTalosPatch(s, plan.patch)));
    expect(docs[1].cluster.externalCloudProvider).toEqual({ enabled: true, manifests: [OTHER] });
    expect(docs[1].cluster.extraManifests).toBeUndefined();
    expect(docs[1].cluster.inlineManifests.map((m: { name: string }) => m.name)).toEqual([APP_NAME]);
  });
});
