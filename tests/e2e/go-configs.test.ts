// The configs an operator switching from the Go CCM already has, run as they are: the Go project's
// docs/rules.yaml, hack/ccm-config.yaml, the config of its own unit test (TestReadCloudConfig), and
// the example rule its chart's values.yaml carries as a comment (tests/fixtures/reference-*.yaml; the
// chart's values-example.yaml runs installed in tests/e2e/helm.test.ts). Each one: `validate` exits 0,
// then the compiled binary starts with it on the real API server against the Talos simulator, and a
// Node whose machine a rule matches comes out as the Go CCM would write it for the same metadata
// (its transformer matches on the metadata Talos reports, renders values with the same templates,
// and ignores the keys these files hold that it has no field for). Where the Go CCM would fail, the
// test says so: the Go CCM's transformer refused the invalid label key in docs/rules.yaml, which
// left every matching node uninitialized; here that entry alone is dropped.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import { nodeView, SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { type CcmProcess, ccmBinary, startCcm } from "../support/process.ts";
import { addSimMachine } from "../support/simmachines.ts";
import { TalosSim } from "../support/talossim.ts";

const FIXTURES = join(import.meta.dir, "..", "fixtures");

/** A machine with one node IP on eth0, as a fixture node. */
function machine(
  name: string,
  ip: string,
  pm: Parameters<typeof platformMetadata>[0],
  extra: Partial<FakeNodeSpec> = {},
): FakeNodeSpec {
  return {
    name,
    nodeIPs: [ip],
    talosVersion: "v1.13.5",
    platformMetadata: platformMetadata({ hostname: name, ...pm }),
    addresses: [
      normalizeAddress(name, { address: `${ip}/24`, linkName: "eth0", linkIndex: 2, flags: "permanent" }),
    ],
    ...extra,
  };
}

const ORACLE = machine("web-oci-ad2-1", "10.20.0.11", {
  platform: "oracle",
  region: "eu-frankfurt-1",
  zone: "EU-FRANKFURT-1-AD-2",
  instanceType: "VM.Standard.A1.Flex",
  instanceId: "ocid1.instance.oc1.eu-frankfurt-1.aaaaaaaabbbbbbccccccdddddd",
  providerId: "oci://ocid1.instance.oc1.eu-frankfurt-1.aaaaaaaabbbbbbccccccdddddd",
});
const WEB = machine("web-1", "10.20.0.12", { platform: "metal", instanceId: "7c9e6679" });
const PROXMOX = machine(
  "pve-worker-1",
  "10.20.0.13",
  { platform: "nocloud", zone: "pve-3" },
  {
    systemInformation: {
      manufacturer: "QEMU",
      productName: "Standard PC (Q35 + ICH9, 2009)",
      version: "pc-q35-9.0",
      serialNumber: "h=pve-worker-1;i=101",
      uuid: "5b0f6a4e-2c1d-4f7a-9d3e-0a1b2c3d4e5f",
      wakeUpType: "Power Switch",
      skuNumber: "4VCPU-8GB",
    },
  },
);
const CLUTER = machine("cluter-1", "10.20.0.14", { platform: "cluter" });
const CONTROL = machine("control-1", "10.20.0.15", {
  platform: "aws",
  region: "us-east-1",
  zone: "us-east-1a",
  instanceType: "t3.large",
  instanceId: "i-0123456789abcdef0",
  providerId: "aws:///us-east-1a/i-0123456789abcdef0",
});

let cluster: TestCluster;
let sim: TalosSim;
let ccm: CcmProcess | undefined;
const kubelets: SimulatedKubelet[] = [];

beforeAll(async () => {
  [cluster, sim] = await Promise.all([TestCluster.start(), TalosSim.start()]);
  for (const spec of [ORACLE, WEB, PROXMOX, CLUTER, CONTROL]) await addSimMachine(sim, spec);
});

afterAll(async () => {
  await ccm?.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await sim?.stop();
  await cluster?.stop();
});

function validate(config: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(ccmBinary(), ["validate", "--cloud-config", config], { encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * Runs the CCM with `config` (stopping the previous one), registers the machines' kubelets and
 * returns their Nodes once initialized.
 */
async function initializeWith(config: string, ...specs: FakeNodeSpec[]): Promise<V1Node[]> {
  await ccm?.stop("SIGTERM");
  ccm = await startCcm(
    {
      kubeconfig: cluster.adminKubeconfig,
      controllers: "cloud-node",
      talosconfig: sim.talosconfig,
      cloudConfig: config,
    },
    /Starting controller.*cloud-node/,
  );
  const nodes: V1Node[] = [];
  for (const spec of specs) {
    kubelets.push(
      await SimulatedKubelet.register(cluster, { name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0 }),
    );
    let node: V1Node | undefined;
    await waitFor(
      async () => {
        node = await cluster.adminClient.get<V1Node>(`/api/v1/nodes/${spec.name}`);
        return !(node.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);
      },
      30_000,
      () =>
        `${spec.name} stays uninitialized: ${JSON.stringify(node && nodeView(node))}\n${ccm?.output.slice(-3000)}`,
    );
    nodes.push(node as V1Node);
  }
  return nodes;
}

/** The labels every initialized Node gets from its PlatformMetadata (no rule involved). */
function topology(region: string, zone: string, instanceType: string): Record<string, string> {
  return {
    "topology.kubernetes.io/region": region,
    "failure-domain.beta.kubernetes.io/region": region,
    "topology.kubernetes.io/zone": zone,
    "failure-domain.beta.kubernetes.io/zone": zone,
    "node.kubernetes.io/instance-type": instanceType,
    "beta.kubernetes.io/instance-type": instanceType,
  };
}

describe("the Go project's configs, as operators have them", () => {
  test("docs/rules.yaml: validate exits 0; an Oracle node gets the rule's annotations and label; the warnings are logged at start-up", async () => {
    const config = join(FIXTURES, "reference-rules.yaml");
    expect(validate(config).status).toBe(0);
    const [node] = await initializeWith(config, ORACLE);
    const view = nodeView(node as V1Node);
    expect(view.providerID).toBe(ORACLE.platformMetadata.providerId);
    expect(view.labels).toMatchObject({
      "node-role.kubernetes.io/web": "",
      "node.cloudprovider.kubernetes.io/platform": "oracle",
      ...topology("eu-frankfurt-1", "EU-FRANKFURT-1-AD-2", "VM.Standard.A1.Flex"),
    });
    expect(view.annotations).toMatchObject({
      "oci.oraclecloud.com/instance-id": ORACLE.platformMetadata.instanceId,
      "oci.oraclecloud.com/compartment-id": "ocid1.compartment.oc1..aaaaaaaabbbbbbccccccdddddd",
    });
    // `talos.dev/zone"` is no label key: the Go CCM's transformer failed on it; here it alone is left out.
    expect(Object.keys(view.labels).filter((k) => k.startsWith("talos.dev/"))).toEqual([]);
    expect(ccm?.output).toContain("publicIPPredict");
  });

  test("hack/ccm-config.yaml: validate exits 0; a web node gets its annotation, label and taint, a Proxmox VM its provider ID from SMBIOS", async () => {
    const config = join(FIXTURES, "reference-ccm-config.yaml");
    expect(validate(config)).toMatchObject({ status: 0, stderr: "" });
    const [web, pve] = await initializeWith(config, WEB, PROXMOX);
    const w = nodeView(web as V1Node);
    expect(w.providerID).toBe(`talos://metal/${WEB.nodeIPs[0]}`);
    expect(w.labels["node-role.kubernetes.io/web"]).toBe("");
    expect(w.annotations["talos.dev/instance-id"]).toBe("id-7c9e6679");
    expect(w.taints).toContainEqual({
      key: "node.cloudprovider.kubernetes.io/storage-type",
      effect: "NoSchedule",
    });
    const p = nodeView(pve as V1Node);
    // {{ getValue .SerialNumber "i" }} of "h=pve-worker-1;i=101"; InstanceType from the SKU number.
    expect(p.providerID).toBe("proxmox://region-1/101");
    expect(p.labels["node.kubernetes.io/instance-type"]).toBe("4VCPU-8GB");
    expect(p.labels["topology.kubernetes.io/zone"]).toBe("pve-3");
  });

  test("the Go unit test's config: validate exits 0 warning about the rule keys indented into the term; they apply to no node, as in Go", async () => {
    const config = join(FIXTURES, "reference-unit-test-config.yaml");
    const r = validate(config);
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(
      `transformations[0].nodeSelector[0].labels (line 17): unknown key "labels": ignored: a rule's key inside a nodeSelector term (check its indentation)`,
    );
    const [node] = await initializeWith(config, CLUTER);
    const view = nodeView(node as V1Node);
    expect(view.providerID).toBe(`talos://cluter/${CLUTER.nodeIPs[0]}`);
    expect(view.labels["node-role.kubernetes.io/web"]).toBeUndefined();
    expect(view.annotations["cluster-platform"]).toBeUndefined();
  });

  test("the chart values.yaml's commented example: a control-plane node gets the instance annotation, the spot label and the overridden region", async () => {
    const config = join(FIXTURES, "reference-values-comment.yaml");
    expect(validate(config)).toMatchObject({ status: 0, stderr: "" });
    const [node] = await initializeWith(config, CONTROL);
    const view = nodeView(node as V1Node);
    expect(view.providerID).toBe(CONTROL.platformMetadata.providerId);
    expect(view.annotations["talos.dev/instance-id"]).toBe("i-0123456789abcdef0");
    expect(view.labels["talos.dev/instance-spot"]).toBe("false");
    expect(view.labels).toMatchObject(topology("us-west-2", "us-east-1a", "t3.large"));
  });
});
