// cloud-node end to end: the compiled binary against a real API server, simulated kubelets and the
// fake apid. One Node per platform fixture must come out exactly as expected (labels incl. GA and
// legacy topology, providerID, address order, taints, annotations); rule values with HTML
// characters pass through untouched and templated taint values are rendered (reference weakness
// 4); a node without SystemInformation and a node without the provided-node-ip annotation both
// initialize; a rule value Kubernetes would refuse is skipped with an Event and a metric while the
// node still initializes; each node costs 4 Talos calls (2 watches, Nodename, SystemInformation, as a
// rule reads it) and at most 2 Node writes. A bad regex stops start-up before the cluster is touched,
// and `PreferIPv6` draws a warning naming `preferIPv6` (reference weakness 3).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { FakeApid } from "../support/apid.ts";
import { ApidBed } from "../support/bed.ts";
import { type EventV1, type TestCluster, waitFor } from "../support/cluster.ts";
import {
  type FakeNodeSpec,
  fixtureNames,
  loadFixture,
  normalizeAddress,
  platformMetadata,
} from "../support/fixtures.ts";
import { type NodeView, nodeView, PROVIDED_NODE_IP } from "../support/kubelet.ts";
import { type CcmProcess, ccmProcess } from "../support/process.ts";

const CLUSTER_NAME = "e2e-cluster";
const MANAGED = "talos.dev/ccm-managed";
const DIGEST_LABEL = "node-restriction.kubernetes.io/talos-ccm-managed";

/** The view with the label that signs its record annotation (hex SHA-224), as the CCM writes both. */
function signed(v: NodeView): NodeView {
  const record = v.annotations[MANAGED];
  if (record === undefined) return v;
  return {
    ...v,
    labels: { ...v.labels, [DIGEST_LABEL]: new Bun.CryptoHasher("sha224").update(record).digest("hex") },
  };
}

// `PreferIPv6` is the reference docs' spelling: it must be warned about and ignored (IPv4 stays first).
const CLOUD_CONFIG = `
global:
  clusterName: ${CLUSTER_NAME}
  PreferIPv6: true
transformations:
  - name: everyone
    annotations:
      example.com/system: "{{ .Manufacturer }}/{{ .ProductName }}"
      example.com/html: "a & b < c > d 'e' \\"f\\" +g"
      example.com/html-template: "{{ .Hostname }} & <{{ .Platform }}> + 'x' \\"y\\""
  - name: spot
    nodeSelector:
      - matchExpressions:
          - { key: spot, operator: In, values: ["true"] }
    labels:
      example.com/spot: "{{ .Spot }}"
    taints:
      example.com/zone: "{{ .Zone }}:NoSchedule"
  - name: metal
    nodeSelector:
      - matchExpressions:
          - { key: platform, operator: In, values: [metal] }
    labels:
      node-role.kubernetes.io/metal: ""
    annotations:
      example.com/uuid: "id-{{ .UUID }}"
  - name: broken
    nodeSelector:
      - matchExpressions:
          - { key: hostname, operator: Regexp, values: ["^rpi-"] }
    labels:
      example.com/bad: "{{ .Hostname }} has spaces"
      example.com/good: ok
  - name: discovery
    nodeSelector:
      - matchExpressions:
          - { key: platform, operator: In, values: [hcloud] }
    features:
      publicIPDiscovery: true
  - name: openstack-region
    nodeSelector:
      - matchExpressions:
          - { key: platform, operator: In, values: [openstack] }
    platformMetadata:
      Region: "{{ .Zone }}-region"
`;

/** A node whose kubelet runs without --node-ip: no provided-node-ip annotation. */
const FALLBACK: FakeNodeSpec = {
  name: "fallback-1",
  nodeIPs: ["10.20.0.5"],
  talosVersion: "v1.13.0",
  platformMetadata: platformMetadata({ platform: "metal", hostname: "fallback-1" }),
  addresses: [
    normalizeAddress("fallback-1", {
      address: "127.0.0.1/8",
      linkName: "lo",
      scope: "host",
      flags: "permanent",
    }),
    normalizeAddress("fallback-1", { address: "10.20.0.5/24", linkName: "eth0", flags: "permanent" }),
    normalizeAddress("fallback-1", { address: "198.51.100.20/24", linkName: "eth1", flags: "permanent" }),
  ],
};

/** What the test compares: every field the controller owns. */
const KUBELET_LABELS = (name: string) => ({
  "kubernetes.io/hostname": name,
  "kubernetes.io/os": "linux",
  "kubernetes.io/arch": "amd64",
  "beta.kubernetes.io/os": "linux",
  "beta.kubernetes.io/arch": "amd64",
});
const NOT_READY = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };
const HTML = "a & b < c > d 'e' \"f\" +g";
const html = (hostname: string, platform: string) => `${hostname} & <${platform}> + 'x' "y"`;
const BASE_RECORD =
  '{"v":1,"annotations":["example.com/html","example.com/html-template","example.com/system"]}';

/** Labels of the reference and the framework for a node. */
function cloudLabels(p: {
  platform: string;
  region?: string;
  zone?: string;
  type?: string;
  spot?: boolean;
}): Record<string, string> {
  const out: Record<string, string> = {
    "node.cloudprovider.kubernetes.io/platform": p.platform,
    "node.cloudprovider.kubernetes.io/clustername": CLUSTER_NAME,
  };
  if (p.spot) out["node.cloudprovider.kubernetes.io/lifecycle"] = "spot";
  if (p.region) {
    out["topology.kubernetes.io/region"] = p.region;
    out["failure-domain.beta.kubernetes.io/region"] = p.region;
  }
  if (p.zone) {
    out["topology.kubernetes.io/zone"] = p.zone;
    out["failure-domain.beta.kubernetes.io/zone"] = p.zone;
  }
  if (p.type) {
    out["node.kubernetes.io/instance-type"] = p.type;
    out["beta.kubernetes.io/instance-type"] = p.type;
  }
  return out;
}

const ip = (address: string) => ({ type: "InternalIP", address });
const ext = (address: string) => ({ type: "ExternalIP", address });
const host = (address: string) => ({ type: "Hostname", address });

/** The exact Node every fixture must produce. */
const EXPECTED: Record<string, NodeView> = {
  aws: {
    labels: {
      ...KUBELET_LABELS("ip-172-31-20-15.ec2.internal"),
      ...cloudLabels({ platform: "aws", region: "us-east-1", zone: "us-east-1a", type: "m6i.large" }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "172.31.20.15",
      "example.com/system": "Amazon EC2/m6i.large",
      "example.com/html": HTML,
      "example.com/html-template": html("ip-172-31-20-15.ec2.internal", "aws"),
      [MANAGED]: BASE_RECORD,
    },
    providerID: "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
    taints: [NOT_READY],
    addresses: [
      ip("172.31.20.15"),
      ext("54.210.33.17"),
      host("ip-172-31-20-15.ec2.internal"),
      { type: "InternalDNS", address: "ip-172-31-20-15.ec2.internal" },
    ],
  },
  azure: {
    labels: {
      ...KUBELET_LABELS("talos-az-worker-1"),
      ...cloudLabels({
        platform: "azure",
        region: "westeurope",
        zone: "westeurope-1",
        type: "Standard_D4s_v5",
      }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.1.0.4",
      "example.com/system": "Microsoft Corporation/Virtual Machine",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-az-worker-1", "azure"),
      [MANAGED]: BASE_RECORD,
    },
    providerID:
      "azure:///subscriptions/3f2a7c1e-5b4d-4e6f-8a9b-0c1d2e3f4a5b/resourceGroups/talos-rg/providers/Microsoft.Compute/virtualMachines/talos-az-worker-1",
    taints: [NOT_READY],
    addresses: [ip("10.1.0.4"), ext("20.61.12.34"), host("talos-az-worker-1")],
  },
  exoscale: {
    labels: {
      ...KUBELET_LABELS("talos-exo-1"),
      ...cloudLabels({ platform: "exoscale", zone: "ch-gva-2", type: "standard.medium" }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "185.19.28.10,2a04:c43:e00:6f1b:4b0:b0ff:fe00:1a2b",
      "example.com/system": "Exoscale/OpenStack Compute",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-exo-1", "exoscale"),
      [MANAGED]: BASE_RECORD,
    },
    providerID: "exoscale://5b8d2f4a-1c3e-4f6a-9b0d-2e4f6a8c1d3f",
    taints: [NOT_READY],
    addresses: [ip("185.19.28.10"), ip("2a04:c43:e00:6f1b:4b0:b0ff:fe00:1a2b"), host("talos-exo-1")],
  },
  gcp: {
    labels: {
      ...KUBELET_LABELS("talos-spot-1"),
      ...cloudLabels({
        platform: "gcp",
        region: "us-central1",
        zone: "us-central1-b",
        type: "e2-standard-4",
        spot: true,
      }),
      "example.com/spot": "true",
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.128.0.23",
      "example.com/system": "Google/Google Compute Engine",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-spot-1", "gcp"),
      [MANAGED]:
        '{"v":1,"labels":["example.com/spot"],"annotations":["example.com/html","example.com/html-template","example.com/system"],"taints":["example.com/zone:NoSchedule"]}',
    },
    providerID: "gce://my-project-123/us-central1-b/talos-spot-1",
    taints: [NOT_READY, { key: "example.com/zone", value: "us-central1-b", effect: "NoSchedule" }],
    addresses: [ip("10.128.0.23"), ext("34.123.45.67"), host("talos-spot-1")],
  },
  hcloud: {
    labels: {
      ...KUBELET_LABELS("talos-hc-1"),
      ...cloudLabels({ platform: "hcloud", region: "eu-central", zone: "nbg1-dc3", type: "cx22" }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.0.1.2",
      "example.com/system": "Hetzner/vServer",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-hc-1", "hcloud"),
      [MANAGED]: BASE_RECORD,
    },
    providerID: "hcloud://51234567",
    taints: [NOT_READY],
    addresses: [ip("10.0.1.2"), ext("49.12.34.56"), ext("2a01:4f8:c012:abcd::1"), host("talos-hc-1")],
  },
  "metal-56": {
    labels: {
      ...KUBELET_LABELS("rpi-1"),
      ...cloudLabels({ platform: "metal" }),
      "node-role.kubernetes.io/metal": "",
      "example.com/good": "ok",
    },
    annotations: {
      [PROVIDED_NODE_IP]: "192.168.1.50",
      "example.com/system": "/",
      "example.com/html": HTML,
      "example.com/html-template": html("rpi-1", "metal"),
      "example.com/uuid": "id-",
      [MANAGED]:
        '{"v":1,"labels":["example.com/good","node-role.kubernetes.io/metal"],"annotations":["example.com/html","example.com/html-template","example.com/system","example.com/uuid"]}',
    },
    providerID: "talos://metal/192.168.1.50",
    taints: [NOT_READY],
    addresses: [ip("192.168.1.50"), ext("2a02:8071:5e80:3c00::1"), host("rpi-1")],
  },
  "metal-ipv6": {
    labels: {
      ...KUBELET_LABELS("metal-1"),
      ...cloudLabels({ platform: "metal" }),
      "node-role.kubernetes.io/metal": "",
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.10.4.140",
      "example.com/system": "Supermicro/SYS-5019C-MR",
      "example.com/html": HTML,
      "example.com/html-template": html("metal-1", "metal"),
      "example.com/uuid": "id-00000000-0000-0000-0000-ac1f6b8a9c0d",
      [MANAGED]:
        '{"v":1,"labels":["node-role.kubernetes.io/metal"],"annotations":["example.com/html","example.com/html-template","example.com/system","example.com/uuid"]}',
    },
    providerID: "talos://metal/10.10.4.140",
    taints: [NOT_READY],
    addresses: [ip("10.10.4.140"), ext("2a01:4f8:271:3b2f::2"), host("metal-1")],
  },
  nocloud: {
    labels: {
      ...KUBELET_LABELS("pve-talos-1"),
      ...cloudLabels({ platform: "nocloud", region: "pve-cluster-1", zone: "pve-node-2" }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "192.168.10.21",
      "example.com/system": "QEMU/Standard PC (Q35 + ICH9, 2009)",
      "example.com/html": HTML,
      "example.com/html-template": html("pve-talos-1", "nocloud"),
      [MANAGED]: BASE_RECORD,
    },
    providerID: "talos://nocloud/192.168.10.21",
    taints: [NOT_READY],
    // The permanent address beats the SLAAC ones; cloud-init's internalDNS is not an address (reference).
    addresses: [ip("192.168.10.21"), ext("2a02:810d:4b3f:8a00::21"), host("pve-talos-1")],
  },
  openstack: {
    labels: {
      ...KUBELET_LABELS("talos-os-1"),
      ...cloudLabels({ platform: "openstack", region: "nova-region", zone: "nova", type: "m1.large" }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.184.0.244",
      "example.com/system": "OpenStack Foundation/OpenStack Nova",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-os-1", "openstack"),
      [MANAGED]: BASE_RECORD,
    },
    providerID: "openstack:///7c1d3e5f-9a2b-4c6d-8e0f-1a3b5c7d9e2f",
    taints: [NOT_READY],
    addresses: [
      ip("10.184.0.244"),
      ext("185.117.82.14"),
      ext("2a00:c380:1:104:f816:3eff:fe73:5901"),
      host("talos-os-1"),
    ],
  },
  oracle: {
    labels: {
      ...KUBELET_LABELS("talos-oci-1"),
      ...cloudLabels({
        platform: "oracle",
        region: "eu-frankfurt-1",
        zone: "eu-frankfurt-1-ad-1",
        type: "VM.Standard.A1.Flex",
      }),
    },
    annotations: {
      [PROVIDED_NODE_IP]: "10.0.0.45",
      "example.com/system": "QEMU/KVM Virtual Machine",
      "example.com/html": HTML,
      "example.com/html-template": html("talos-oci-1", "oracle"),
      [MANAGED]: BASE_RECORD,
    },
    providerID:
      "oci://ocid1.instance.oc1.eu-frankfurt-1.antheljtabcdefghijklmnopqrstuvwxyz0123456789abcdefghij",
    taints: [NOT_READY],
    addresses: [
      ip("10.0.0.45"),
      ext("130.61.22.33"),
      ext("2603:c020:800c:9c7f:0:abcd:1234:5678"),
      host("talos-oci-1"),
    ],
  },
};

let bed: ApidBed;
let cluster: TestCluster;
let apid: FakeApid;
let ccm: CcmProcess;
const specs = new Map<string, FakeNodeSpec>();

const initialized = (name: string) => bed.initialized(name);

beforeAll(async () => {
  for (const f of fixtureNames()) specs.set(f, loadFixture(f));
  bed = await ApidBed.start("cloud-node-e2e-", {
    cluster: { audit: true },
    apid: { nodes: [...specs.values(), FALLBACK] },
    talosconfig: { cluster: "from-talosconfig" },
  });
  ({ cluster, apid } = bed);
  const cloudConfig = bed.writeCloudConfig(CLOUD_CONFIG);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      cloudConfig,
      alwaysAllowPaths: "/metrics",
      kubeApiQps: 100,
      // --v=4 logs "Node up to date" for a pass that found nothing to write.
      args: ["--v=4"],
    },
    /Starting controller.*cloud-node/,
  );
  // As a real kubelet does, each registers with its first status in the Node create: otherwise the CCM
  // can initialize a node before its addresses exist and write them a second time.
  for (const spec of specs.values()) {
    await bed.register({ name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0, statusOnCreate: true });
  }
  await bed.register({
    name: FALLBACK.name,
    ips: FALLBACK.nodeIPs,
    noAnnotation: true,
    heartbeatMs: 0,
    statusOnCreate: true,
  });
});

afterAll(() => bed?.stop());

describe("cloud-node initializes every platform fixture exactly", () => {
  for (const fixture of Object.keys(EXPECTED)) {
    test(`cloud-node initializes the ${fixture} fixture`, async () => {
      const spec = specs.get(fixture) as FakeNodeSpec;
      const node = await initialized(spec.name);
      expect(nodeView(node)).toEqual(signed(EXPECTED[fixture] as NodeView));
    });
  }

  test("every fixture in tests/fixtures/nodes has an expected Node", () => {
    expect(Object.keys(EXPECTED).sort()).toEqual(fixtureNames());
  });
});

describe("cloud-node beyond the fixtures", () => {
  test("a kubelet without --node-ip is initialized from its InternalIP address", async () => {
    const node = await initialized(FALLBACK.name);
    expect(nodeView(node)).toEqual(
      signed({
        labels: {
          ...KUBELET_LABELS("fallback-1"),
          ...cloudLabels({ platform: "metal" }),
          "node-role.kubernetes.io/metal": "",
        },
        annotations: {
          "example.com/system": "/",
          "example.com/html": HTML,
          "example.com/html-template": html("fallback-1", "metal"),
          "example.com/uuid": "id-",
          [MANAGED]:
            '{"v":1,"labels":["node-role.kubernetes.io/metal"],"annotations":["example.com/html","example.com/html-template","example.com/system","example.com/uuid"]}',
        },
        providerID: "talos://metal/10.20.0.5",
        taints: [NOT_READY],
        addresses: [ip("10.20.0.5"), ext("198.51.100.20"), host("fallback-1")],
      }),
    );
  });

  test("a rule value Kubernetes refuses is skipped with a Warning Event and a metric; the node initializes", async () => {
    const node = await initialized("rpi-1");
    expect(node.metadata?.labels?.["example.com/bad"]).toBeUndefined();
    expect(node.metadata?.labels?.["example.com/good"]).toBe("ok");
    let events: EventV1[] = [];
    await waitFor(async () => {
      events = await cluster.eventsAbout("rpi-1");
      return events.some((e) => e.reason === "TransformerError");
    }, 10_000);
    const warning = events.find((e) => e.reason === "TransformerError") as EventV1;
    expect(warning.type).toBe("Warning");
    expect(warning.note).toContain('rule "broken" labels["example.com/bad"]');
    expect(events.some((e) => e.reason === "Synced" && e.type === "Normal")).toBe(true);
    const text = await bed.metrics();
    const errors = Number(
      text.match(/^talosccm_transformer_errors_total\{type="transformer"\} (\d+)/m)?.[1] ?? 0,
    );
    expect(errors).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^talosccm_nodes_initialized_total 11$/m);
    expect(text).toMatch(/^talosccm_node_initialization_duration_seconds_count 11$/m);
    // What Go CCM users scrape, with k8s.io/component-base's names and labels.
    expect(text).toMatch(
      /^running_managed_controllers\{name="cloud-node",manager="cloud-controller-manager"\} 1$/m,
    );
    expect(text).toMatch(
      /^kubernetes_build_info\{major="\d*",minor="\d*",git_version="[^"]+",git_commit="[^"]+",git_tree_state="",build_date="",go_version="",compiler="bun",platform="linux\/(amd64|arm64)"\} 1$/m,
    );
  });

  test("initialization costs 1 watch, a PlatformMetadata read, a Nodename and (a rule reads it) a SystemInformation read, and 2 Node writes per node (1 when the addresses are right)", async () => {
    const all = [...specs.entries(), ["fallback", FALLBACK] as const];
    for (const [, spec] of all) await initialized(spec.name);
    // Every write of a node is done once a later pass found nothing to write.
    for (const [, spec] of all)
      await ccm.waitForLog(new RegExp(`"Node up to date" node="${spec.name}"`), 20_000);
    const writes = cluster
      .auditEvents()
      .filter(
        (e) => e.user.username === "test-admin" && e.objectRef?.resource === "nodes" && e.verb === "patch",
      );
    for (const [fixture, spec] of all) {
      const nodeIP = spec.nodeIPs[0] as string;
      // The watch of AddressStatuses, one PlatformMetadata read (complete metadata is not watched),
      // the Nodename that confirms the machine is this node, and one SystemInformation read (rule
      // "everyone" reads .Manufacturer). Rules that read no SystemInformation field cost 3
      // (tests/e2e/cloud-node-security.test.ts).
      expect({
        node: spec.name,
        watches: apid.calls({ node: nodeIP, method: "Watch" }),
        metadata: apid.calls({ node: nodeIP, method: "Get", type: "PlatformMetadatas.talos.dev" }),
        nodename: apid.calls({ node: nodeIP, method: "Get", type: "Nodenames.kubernetes.talos.dev" }),
        systemInformation: apid.calls({
          node: nodeIP,
          method: "Get",
          type: "SystemInformations.hardware.talos.dev",
        }),
        calls: apid.calls({ node: nodeIP }),
      }).toEqual({
        node: spec.name,
        watches: 1,
        metadata: 1,
        nodename: 1,
        systemInformation: 1,
        calls: 4,
      });
      // The kubelet reported InternalIP per node IP and Hostname; status is written only when that differs.
      const kubeletAddresses = [...spec.nodeIPs.map(ip), host(spec.name)];
      const want =
        fixture === "fallback"
          ? [ip("10.20.0.5"), ext("198.51.100.20"), host("fallback-1")]
          : (EXPECTED[fixture] as NodeView).addresses;
      const statusWrite = JSON.stringify(kubeletAddresses) !== JSON.stringify(want);
      expect({
        node: spec.name,
        writes: writes
          .filter((e) => e.objectRef?.name === spec.name)
          .map((e) => e.objectRef?.subresource ?? "metadata+spec"),
      }).toEqual({ node: spec.name, writes: statusWrite ? ["status", "metadata+spec"] : ["metadata+spec"] });
    }
  });

  test("the misspelled PreferIPv6 draws a warning naming preferIPv6 and is ignored", async () => {
    await ccm.waitForLog(/PreferIPv6.*preferIPv6/);
    // Ignored: the dual-stack node keeps IPv4 first.
    expect(nodeView(await initialized("talos-exo-1")).addresses[0]).toEqual(ip("185.19.28.10"));
  });
});

describe("cloud-node refuses a broken config before touching the cluster", () => {
  test("a bad Regexp stops start-up naming the file and the rule's path; no request reaches the API server", async () => {
    let connections = 0;
    const fakeApiserver = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(socket) {
          connections++;
          socket.end();
        },
        data() {},
      },
    });
    const kubeconfig = join(bed.dir, "unreachable.kubeconfig");
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        "current-context": "x",
        clusters: [
          {
            name: "x",
            cluster: { server: `https://127.0.0.1:${fakeApiserver.port}`, "insecure-skip-tls-verify": true },
          },
        ],
        users: [{ name: "x", user: { token: "t" } }],
        contexts: [{ name: "x", context: { cluster: "x", user: "x" } }],
      }),
    );
    const bad = join(bed.dir, "bad-regex.yaml");
    writeFileSync(
      bad,
      [
        "transformations:",
        "  - name: web",
        "    nodeSelector:",
        "      - matchExpressions:",
        "          - { key: hostname, operator: Regexp, values: ['^web-('] }",
        "    labels: { example.com/web: 'true' }",
        "",
      ].join("\n"),
    );
    const callsBefore = apid.calls();
    const p = ccmProcess({
      kubeconfig,
      controllers: "cloud-node",
      talosconfig: bed.talosconfig,
      cloudConfig: bad,
    });
    try {
      expect(await p.proc.exited).toBe(1);
      expect(p.output).toContain(bad);
      expect(p.output).toMatch(/transformations\[0\]\.nodeSelector\[0\]\.matchExpressions\[0\]/);
      expect(connections).toBe(0);
      expect(apid.calls()).toBe(callsBefore);
    } finally {
      await p.stop("SIGKILL");
      fakeApiserver.stop(true);
    }
  });
});

describe("a Node that registered before the CCM was installed (no uninitialized taint)", () => {
  test("gets its providerID, addresses, the Talos labels and the rules' labels, but neither topology labels nor the rules' taints: those come with initialization only", async () => {
    const spec: FakeNodeSpec = {
      name: "preexisting-1",
      nodeIPs: ["10.20.0.9"],
      talosVersion: "v1.13.0",
      platformMetadata: platformMetadata({
        platform: "metal",
        hostname: "preexisting-1",
        region: "r1",
        zone: "z1",
        instanceType: "t1",
        spot: true,
      }),
      addresses: [
        normalizeAddress("preexisting-1", { address: "10.20.0.9/24", linkName: "eth0", flags: "permanent" }),
      ],
    };
    apid.addNodes([spec]);
    // A kubelet started without --cloud-provider=external registers no uninitialized taint.
    await bed.register({
      name: spec.name,
      ips: spec.nodeIPs,
      heartbeatMs: 0,
      external: false,
      statusOnCreate: true,
    });
    let node: V1Node | undefined;
    await waitFor(
      async () => {
        node = await bed.getNode(spec.name);
        return (node.spec?.providerID ?? "") !== "";
      },
      30_000,
      () => `node ${spec.name} has no providerID:\n${ccm?.output.slice(-3000)}`,
    );
    const v = nodeView(node as V1Node);
    expect(v.providerID).toBe("talos://metal/10.20.0.9");
    expect(v.labels).toMatchObject({
      "node.cloudprovider.kubernetes.io/platform": "metal",
      "node.cloudprovider.kubernetes.io/lifecycle": "spot",
      "example.com/spot": "true",
      "node-role.kubernetes.io/metal": "",
    });
    for (const topology of [
      "topology.kubernetes.io/region",
      "topology.kubernetes.io/zone",
      "node.kubernetes.io/instance-type",
    ]) {
      expect(v.labels[topology]).toBeUndefined();
    }
    // The spot rule's taint is an initialization-time taint: a running node does not get it (the
    // API server's own not-ready taint, added at creation, is all it has).
    expect(v.taints.map((t) => t.key)).toEqual(["node.kubernetes.io/not-ready"]);
    expect(v.addresses).toContainEqual({ type: "InternalIP", address: "10.20.0.9" });
  });
});
