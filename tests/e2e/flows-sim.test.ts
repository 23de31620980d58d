// The cloud-node and node-csr-approval flows end to end against the Talos simulator
// (tests/support/talossim: COSI's state and gRPC server, machinery's resource types, Talos' access
// policy and apid's routing, all upstream code) instead of the fake apid: the compiled binary with
// the simulator's os:reader talosconfig, a real API server, simulated kubelets. Each machine
// publishes what a platform fixture (tests/fixtures/nodes) describes, put through the simulator's
// control surface as the YAML `talosctl get -o yaml` prints (the fake's encoders render it).
//
// cloud-node: the AWS fixture's Node comes out exactly as the fake-based tests expect (providerID,
// topology labels, addresses, the uninitialized taint gone, a rule's label from PlatformMetadata);
// an Elastic IP change reaches the Node through the COSI watch alone (no Talos call), the one stream
// the CCM keeps per machine (its complete PlatformMetadata is read once). Then the upstream-only part: the machine stops (apid ends its streams Unavailable and
// refuses new ones; the CCM counts the node's watch down, logs the resubscription and counts the
// failures), its public IP and instance type change while it is down, it starts again: the CCM's
// watches resubscribe, the address that vanished meanwhile leaves the Node (the client's bootstrap
// diff against upstream's bootstrap contents), the rule label follows the new instance type while
// the topology label keeps its initialization value, and later changes keep arriving.
// `npm test` runs this file twice: against the simulated apid, and with Talos' own apid in front of
// the machines (tests/run.ts THROUGH_APID): then the streams that end are proxied by apid, and the
// machine's restart is a backend of apid going away and coming back under live watches.
// node-csr-approval: an honest kubelet-serving CSR is approved with Talos' confirmation; an IP the
// Node's status claims but the machine's AddressStatuses lack is denied as IPNotReportedByTalos;
// a Node whose IP leads to another machine's Talos is denied as TalosNodeMismatch.
// Through Talos' apid only: the CCM as shipped (TALOS_MACHINE_ACCESS=auto) inside the simulator's
// network namespace, where each machine's own apid answers at <ip>:50000, initializes a new
// machine's Node and approves its CSR with every Talos call going straight to the machine and none
// through apid (apid's log), no fallback, and one direct connection per machine.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type {
  V1CertificateSigningRequest,
  V1CertificateSigningRequestCondition,
  V1Node,
} from "@kubernetes/client-node";
import { encodePlatformMetadata } from "../support/apid.ts";
import { SimBed } from "../support/bed.ts";
import { type EventV1, freePort, type TestCluster, waitFor } from "../support/cluster.ts";
import {
  type FakeAddress,
  type FakeNodeSpec,
  loadFixture,
  normalizeAddress,
  platformMetadata,
} from "../support/fixtures.ts";
import {
  type NodeView,
  nodeView,
  PROVIDED_NODE_IP,
  type SimulatedKubelet,
  UNINITIALIZED_TAINT,
} from "../support/kubelet.ts";
import { type CcmProcess, startCcm } from "../support/process.ts";
import { addSimMachine, simAddress, simAddressRef, simResource } from "../support/simmachines.ts";
import type { TalosSim } from "../support/talossim.ts";

const CLUSTER_NAME = "sim-cluster";
const MANAGED = "talos.dev/ccm-managed";
const DIGEST_LABEL = "node-restriction.kubernetes.io/talos-ccm-managed";

const CLOUD_CONFIG = `
global:
  clusterName: ${CLUSTER_NAME}
transformations:
  - name: aws
    nodeSelector:
      - matchExpressions:
          - { key: platform, operator: In, values: [aws] }
    labels:
      example.com/team: "{{ .Tags.team }}"
      example.com/instance-type: "{{ .InstanceType }}"
    annotations:
      example.com/system: "{{ .Manufacturer }}/{{ .ProductName }}"
`;
const RECORD =
  '{"v":1,"labels":["example.com/instance-type","example.com/team"],"annotations":["example.com/system"]}';

/** The cloud-node machine: the AWS fixture (public IPv4 on the `external` link, KubeSpan). */
const AWS = loadFixture("aws");
const AWS_IP = AWS.nodeIPs[0] as string;
/** The node-csr-approval machine: the Hetzner Cloud fixture. */
const HCLOUD = loadFixture("hcloud");
const HCLOUD_IP = HCLOUD.nodeIPs[0] as string;
/** An address the hcloud kubelet puts into its Node's status that the machine does not have. */
const UNREPORTED_IP = "10.0.1.99";
/** A machine whose kubelet never registers: a forger's Node claims its IP. */
const OTHER: FakeNodeSpec = {
  name: "sim-unregistered",
  nodeIPs: ["10.0.9.9"],
  talosVersion: "v1.13.5",
  platformMetadata: platformMetadata({ platform: "metal", hostname: "sim-unregistered" }),
  addresses: [
    normalizeAddress("sim-unregistered", {
      address: "10.0.9.9/24",
      linkName: "eth0",
      linkIndex: 2,
      flags: "permanent",
    }),
  ],
};

let bed: SimBed;
let cluster: TestCluster;
let sim: TalosSim;
let ccm: CcmProcess | undefined;

beforeAll(async () => {
  bed = await SimBed.start("flows-sim-e2e-");
  ({ cluster, sim } = bed);
  for (const spec of [AWS, HCLOUD, OTHER]) await addSimMachine(sim, spec);
});

afterAll(() => bed?.stop());

function output(): string {
  return `CCM output:\n${ccm?.output.slice(-4000)}\nsimulator stderr:\n${sim.stderr.slice(-2000)}`;
}

/**
 * The CCM's last log lines about Talos watches and calls (why a watch resubscribed), short enough to
 * stay in the failure lines tests/run.ts repeats at the end of a run.
 */
function talosLog(): string {
  const lines = (ccm?.output ?? "").split("\n").filter((l) => /watch|Talos/i.test(l));
  return `the CCM's last Talos log lines:\n${lines.slice(-6).join("\n")}`;
}

/** Waits until the Node satisfies `pred`; returns it. */
async function nodeWhen(name: string, what: string, pred: (n: V1Node) => boolean): Promise<V1Node> {
  let node: V1Node | undefined;
  await waitFor(
    async () => {
      node = await bed.getNode(name);
      return pred(node);
    },
    30_000,
    () => `node ${name}: ${what}; it is ${JSON.stringify(node && nodeView(node))}\n${output()}`,
  );
  return node as V1Node;
}

/** What the test compares: every field the controller owns. */
const ip = (address: string) => ({ type: "InternalIP", address });
const ext = (address: string) => ({ type: "ExternalIP", address });

/** The AWS Node as the CCM must write it, given the rule labels' inputs and the ExternalIPs. */
function awsNode(p: { team: string; instanceType: string; external: string[] }): NodeView {
  return {
    labels: {
      "kubernetes.io/hostname": AWS.name,
      "kubernetes.io/os": "linux",
      "kubernetes.io/arch": "amd64",
      "beta.kubernetes.io/os": "linux",
      "beta.kubernetes.io/arch": "amd64",
      "node.cloudprovider.kubernetes.io/platform": "aws",
      "node.cloudprovider.kubernetes.io/clustername": CLUSTER_NAME,
      // Topology comes with initialization only (no reconcile mode): m6i.large stays.
      "topology.kubernetes.io/region": "us-east-1",
      "failure-domain.beta.kubernetes.io/region": "us-east-1",
      "topology.kubernetes.io/zone": "us-east-1a",
      "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
      "node.kubernetes.io/instance-type": "m6i.large",
      "beta.kubernetes.io/instance-type": "m6i.large",
      "example.com/team": p.team,
      "example.com/instance-type": p.instanceType,
      [DIGEST_LABEL]: new Bun.CryptoHasher("sha224").update(RECORD).digest("hex"),
    },
    annotations: {
      [PROVIDED_NODE_IP]: AWS_IP,
      "example.com/system": "Amazon EC2/m6i.large",
      [MANAGED]: RECORD,
    },
    providerID: "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
    taints: [{ key: "node.kubernetes.io/not-ready", effect: "NoSchedule" }],
    addresses: [
      ip(AWS_IP),
      ...p.external.map(ext),
      { type: "Hostname", address: AWS.name },
      { type: "InternalDNS", address: AWS.name },
    ],
  };
}

/** An address on Talos' `external` pseudo-link, where the AWS platform puts the public IPv4. */
function external(address: string): FakeAddress {
  return normalizeAddress(AWS.name, { address, linkName: "external", linkIndex: 0, flags: "permanent" });
}

// Each public IPv4 sorts after the one it replaces (Talos lists by id, the Node shows the first): an
// old address that lingered in the CCM's cache would still be the Node's ExternalIP.
const FIXTURE_EIP = AWS.addresses.find((a) => a.linkName === "external") as FakeAddress;
const NEW_EIP = external("98.84.12.201/32");
const RESTART_IP = external("99.80.5.17/32");
const IPV6_EIP = external("2600:1f18:4a3:6e00:9c1a:2b3c:4d5e:6f70/128");

/** Calls the simulator answered (or refused) so far, by gRPC method. */
function watchCalls(calls: Record<string, number>): number {
  return calls["/cosi.resource.State/Watch"] ?? 0;
}

/** A sample of the CCM's metrics, e.g. `talosccm_node_talos_watches{state="down"}`; 0 when absent. */
async function sample(series: string): Promise<number> {
  const line = (await bed.metrics()).split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/** The CCM's Talos watches of nodes, healthy and down, and its failed watch streams by kind. */
async function watchMetrics() {
  const failed = (kind: string) =>
    sample(`talosccm_api_request_errors_total{request="watch_${kind}",node_status="known"}`);
  return {
    healthy: await sample('talosccm_node_talos_watches{state="healthy"}'),
    down: await sample('talosccm_node_talos_watches{state="down"}'),
    metadataFailures: await failed("platformmetadata"),
    addressesFailures: await failed("addresses"),
  };
}

describe("cloud-node against the simulator", () => {
  beforeAll(async () => {
    const cloudConfig = bed.writeCloudConfig(CLOUD_CONFIG);
    ccm = await bed.startCcm(
      // --v=2 logs each resubscription of a Talos watch with the error that ended it.
      { controllers: "cloud-node", cloudConfig, alwaysAllowPaths: "/metrics", args: ["--v=2"] },
      /Starting controller.*cloud-node/,
    );
    await bed.register({ name: AWS.name, ips: AWS.nodeIPs, heartbeatMs: 0, statusOnCreate: true });
  });

  afterAll(async () => {
    await ccm?.stop("SIGKILL");
    ccm = undefined;
  });

  test("the Node is initialized from the machine's facts: providerID, topology, addresses, a rule's labels, no uninitialized taint", async () => {
    const node = await nodeWhen(
      AWS.name,
      "still has the uninitialized taint",
      (n) => !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT),
    );
    expect(nodeView(node)).toEqual(
      awsNode({ team: "platform", instanceType: "m6i.large", external: ["54.210.33.17"] }),
    );
  });

  test("an Elastic IP change reaches the Node's addresses through the watch, with no Talos call", async () => {
    const before = await sim.calls();
    await sim.put(AWS_IP, simAddress(NEW_EIP));
    await sim.destroy(AWS_IP, simAddressRef(FIXTURE_EIP));
    const want = awsNode({ team: "platform", instanceType: "m6i.large", external: ["98.84.12.201"] });
    const node = await nodeWhen(
      AWS.name,
      "does not show the new Elastic IP alone",
      (n) => JSON.stringify(nodeView(n).addresses) === JSON.stringify(want.addresses),
    );
    expect(nodeView(node)).toEqual(want);
    expect(await sim.calls(), talosLog()).toEqual(before);
  });

  test("one stream per machine: its complete PlatformMetadata was read once, its addresses are watched", async () => {
    // AWS metadata with its instance and provider IDs does not change within a boot: one Get, and the
    // AddressStatus watch the only stream apid proxies to the machine.
    // (Through Talos' apid, counted where the machine receives them: apid logs a watch when it ends.)
    const calls = sim.apidPid === undefined ? await sim.calls() : await sim.machineCalls();
    expect(watchCalls(calls), talosLog()).toBe(1);
    expect(calls["/cosi.resource.State/Get"]).toBeGreaterThanOrEqual(2); // PlatformMetadata, Nodename
    const live = await watchMetrics();
    expect([live.healthy, live.down, live.metadataFailures], talosLog()).toEqual([1, 0, 0]);
  });

  test("a machine stopped and started again: the watches resubscribe, what changed while it was down arrives, later changes too", async () => {
    const before = watchCalls(await sim.calls());
    const live = await watchMetrics();
    expect([live.healthy, live.down], talosLog()).toEqual([1, 0]);
    await sim.stopMachine(AWS_IP);
    // apid ends the address stream Unavailable: the CCM counts the node's watch down and resubscribes
    // (a retryable error), and its resubscriptions are refused while the machine is down.
    let down = live;
    await waitFor(
      async () => {
        down = await watchMetrics();
        return down.down === 1;
      },
      30_000,
      () => `the CCM does not count the node's watch down: ${JSON.stringify(down)}\n${output()}`,
    );
    await waitFor(
      async () => watchCalls(await sim.calls()) >= before + 2,
      30_000,
      () => `the CCM did not try to resubscribe its watches:\n${output()}`,
    );
    down = await watchMetrics();
    expect(down.addressesFailures).toBeGreaterThan(live.addressesFailures);
    expect(ccm?.output).toContain(
      `"Resubscribing Talos watch" node="${AWS_IP}" type="AddressStatuses.net.talos.dev" err="Cannot watch`,
    );
    expect(ccm?.output).toMatch(/"Resubscribing Talos watch" .*err="[^"]*error reading from server: EOF"/);
    // Stopped and started, an EC2 instance gets a new public IPv4 and may change instance type.
    const pm = {
      ...AWS.platformMetadata,
      instanceType: "m6i.xlarge",
      tags: { ...AWS.platformMetadata.tags, team: "payments" },
    };
    await sim.put(AWS_IP, simResource("platformmetadata", encodePlatformMetadata(pm).yaml));
    await sim.destroy(AWS_IP, simAddressRef(NEW_EIP));
    await sim.put(AWS_IP, simAddress(RESTART_IP));
    expect(nodeView(await bed.getNode(AWS.name))).toEqual(
      awsNode({ team: "platform", instanceType: "m6i.large", external: ["98.84.12.201"] }),
    );
    await sim.startMachine(AWS_IP);
    // The address watch broke (as a reboot breaks it): the CCM watches the metadata again until it
    // settles, and the new instance type and tag arrive through that watch.
    const restarted = awsNode({ team: "payments", instanceType: "m6i.xlarge", external: ["99.80.5.17"] });
    const node = await nodeWhen(
      AWS.name,
      "does not show the restarted machine's public IP and instance type",
      (n) =>
        n.metadata?.labels?.["example.com/instance-type"] === "m6i.xlarge" &&
        JSON.stringify(nodeView(n).addresses) === JSON.stringify(restarted.addresses),
    );
    expect(nodeView(node)).toEqual(restarted);
    const back = await watchMetrics();
    expect([back.healthy, back.down]).toEqual([1, 0]);

    // The resubscribed watches keep the Node current: a public IPv6 associated afterwards arrives
    // through them alone.
    const after = await sim.calls();
    await sim.put(AWS_IP, simAddress(IPV6_EIP));
    const dual = awsNode({
      team: "payments",
      instanceType: "m6i.xlarge",
      external: ["99.80.5.17", "2600:1f18:4a3:6e00:9c1a:2b3c:4d5e:6f70"],
    });
    const final = await nodeWhen(
      AWS.name,
      "does not show the public IPv6",
      (n) => JSON.stringify(nodeView(n).addresses) === JSON.stringify(dual.addresses),
    );
    expect(nodeView(final)).toEqual(dual);
    expect(await sim.calls()).toEqual(after);
  });
});

/** Waits for the CSR's Approved or Denied condition. */
function decided(csr: V1CertificateSigningRequest): Promise<V1CertificateSigningRequestCondition> {
  return cluster.csrDecision(csr.metadata?.name as string, 30_000, output);
}

/** The hcloud machine's kubelet, registered for the CSR tests (and kept for the last describe). */
let hcloud: SimulatedKubelet;

describe("node-csr-approval against the simulator", () => {
  beforeAll(async () => {
    ccm = await bed.startCcm(
      // Without the cloud config the cloud-node tests wrote: node-csr-approval reads none.
      { controllers: "node-csr-approval", securePort: 0 },
      /Approving kubelet serving CSRs/,
    );
    hcloud = await bed.register({
      name: HCLOUD.name,
      ips: HCLOUD.nodeIPs,
      heartbeatMs: 0,
      addresses: [ip(HCLOUD_IP), { type: "Hostname", address: HCLOUD.name }, ip(UNREPORTED_IP)],
    });
  });

  test("a kubelet-serving CSR with the node's hostname and IP is approved, confirmed by Talos", async () => {
    const cond = await decided(await hcloud.submitServingCSR({ dns: [HCLOUD.name], ips: [HCLOUD_IP] }));
    expect(cond).toMatchObject({ type: "Approved", status: "True", reason: "TalosCCMApprove" });
    expect(cond.message).toContain(`confirmed by Talos on ${HCLOUD_IP}`);
  });

  test("an IP the Node's status claims but the machine's AddressStatuses lack is denied as IPNotReportedByTalos, with an Event", async () => {
    const csr = await hcloud.submitServingCSR({ dns: [HCLOUD.name], ips: [HCLOUD_IP, UNREPORTED_IP] });
    const cond = await decided(csr);
    expect(cond).toMatchObject({ type: "Denied", status: "True", reason: "IPNotReportedByTalos" });
    expect(cond.message).toContain(UNREPORTED_IP);
    let events: EventV1[] = [];
    await waitFor(async () => {
      events = await cluster.eventsAbout(csr.metadata?.name as string);
      return events.length > 0;
    }, 10_000);
    expect(events[0]).toMatchObject({ type: "Warning", reason: "IPNotReportedByTalos", note: cond.message });
  });

  test("a Node whose IP leads to another machine's Talos is denied as TalosNodeMismatch", async () => {
    const forger = await bed.register({
      name: "sim-forger",
      ips: OTHER.nodeIPs,
      heartbeatMs: 0,
    });
    const cond = await decided(await forger.submitServingCSR({ dns: ["sim-forger"], ips: OTHER.nodeIPs }));
    expect(cond).toMatchObject({ type: "Denied", reason: "TalosNodeMismatch" });
    expect(cond.message).toContain(`is node "${OTHER.name}"`);
  });
});

describe("cloud-node and node-csr-approval together (the DaemonSet's controllers): CSRs decided from the watches", () => {
  /** Calls the machines received so far (through Talos' apid: counted as they start, watches included). */
  const machineCalls = () => (sim.apidPid === undefined ? sim.calls() : sim.machineCalls());

  beforeAll(async () => {
    await ccm?.stop("SIGKILL");
    ccm = await bed.startCcm(
      { controllers: "cloud-node,node-csr-approval", alwaysAllowPaths: "/metrics", args: ["--v=2"] },
      /Approving kubelet serving CSRs/,
    );
  });

  afterAll(async () => {
    await ccm?.stop("SIGKILL");
    ccm = undefined;
  });

  test("once cloud-node watches the machine, its CSR is approved with no Talos call", async () => {
    // The hcloud Node registered above, left tainted by the CSR-only CCM: cloud-node initializes it
    // now and watches its machine.
    await nodeWhen(
      HCLOUD.name,
      "still has the uninitialized taint",
      (n) => !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT),
    );
    // The watch's start read the machine's links and NodeIPConfig besides: wait until nothing more comes.
    let before = await machineCalls();
    await waitFor(
      async () => {
        await Bun.sleep(300);
        const now = await machineCalls();
        const settled =
          JSON.stringify(now) === JSON.stringify(before) && (now["/cosi.resource.State/List"] ?? 0) >= 1;
        before = now;
        return settled;
      },
      30_000,
      () => `the machines' calls do not settle: ${JSON.stringify(before)}\n${talosLog()}`,
    );
    const approved = await decided(await hcloud.submitServingCSR({ dns: [HCLOUD.name], ips: [HCLOUD_IP] }));
    expect(approved).toMatchObject({ type: "Approved", reason: "TalosCCMApprove" });
    expect(approved.message).toContain(`confirmed by Talos on ${HCLOUD_IP}`);
    const denied = await decided(
      await hcloud.submitServingCSR({ dns: [HCLOUD.name], ips: [HCLOUD_IP, UNREPORTED_IP] }),
    );
    // cloud-node wrote the Node's addresses from the machine's: the IP its kubelet claimed is not the
    // Node's any more, and the cluster alone refuses it (Talos is not asked).
    expect(denied).toMatchObject({ type: "Denied", reason: "IPNotOwned" });
    expect(await machineCalls(), talosLog()).toEqual(before);
    expect(await sample('talosccm_csr_talos_facts_total{source="watches"}')).toBe(1);
    expect(await sample('talosccm_csr_talos_facts_total{source="talos"}')).toBe(0);
  });
});

describe.if(process.env.TALOS_SIM_APID === "1")(
  "TALOS_MACHINE_ACCESS=auto inside the simulator's namespace: straight to each machine's own apid",
  () => {
    /** A machine of its own, so that its Node is initialized by this CCM alone. */
    const GCP = loadFixture("gcp");
    const GCP_IP = GCP.nodeIPs[0] as string;
    let port: number;
    let gcp: SimulatedKubelet;
    let direct: CcmProcess | undefined;

    /** A sample of this CCM's metrics, from its port exposed on the host. */
    async function directSample(series: string): Promise<number> {
      const res = await fetch(`https://127.0.0.1:${port}/metrics`, { tls: { rejectUnauthorized: false } });
      const line = (await res.text()).split("\n").find((l) => l.startsWith(`${series} `));
      return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
    }

    beforeAll(async () => {
      await ccm?.stop("SIGKILL");
      ccm = undefined;
      await addSimMachine(sim, GCP);
      gcp = await bed.register({ name: GCP.name, ips: GCP.nodeIPs, heartbeatMs: 0 });
      port = await freePort();
      await sim.forwardIntoNetns(new URL(cluster.url).host);
      await sim.exposeFromNetns(`127.0.0.1:${port}`);
    });

    afterAll(async () => {
      await direct?.stop("SIGKILL");
    });

    test("the Node is initialized and its CSR approved with no call through apid, none falling back", async () => {
      const throughApid = await sim.calls();
      const atMachines = await sim.machineCalls();
      direct = await startCcm(
        {
          kubeconfig: cluster.adminKubeconfig,
          talosconfig: sim.talosconfig,
          controllers: "cloud-node,node-csr-approval",
          securePort: port,
          alwaysAllowPaths: "/metrics",
          args: ["--v=2"],
          env: { TALOS_MACHINE_ACCESS: "auto" },
          netns: sim.netns,
        },
        /Approving kubelet serving CSRs/,
      );
      const log = () => `CCM output:\n${direct?.output.slice(-3000)}`;
      let node: V1Node | undefined;
      await waitFor(
        async () => {
          node = await bed.getNode(GCP.name);
          return !(node.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);
        },
        30_000,
        () => `node ${GCP.name} still tainted: ${JSON.stringify(node && nodeView(node))}\n${log()}`,
      );
      expect(node?.spec?.providerID).toBe(GCP.platformMetadata.providerId);
      const approved = await decided(await gcp.submitServingCSR({ dns: [GCP.name], ips: [GCP_IP] }));
      expect(approved, log()).toMatchObject({ type: "Approved", reason: "TalosCCMApprove" });
      // Every Talos call about a machine reached it straight: through apid, only the one read of the
      // endpoint's own ControllerManagerConfig (the cluster's CIDRs, no node header); the machines got the rest.
      const get = "/cosi.resource.State/Get";
      expect(await sim.calls(), log()).toEqual({ ...throughApid, [get]: (throughApid[get] ?? 0) + 1 });
      const after = await sim.machineCalls();
      expect(after["/cosi.resource.State/Watch"] ?? 0).toBeGreaterThan(
        atMachines["/cosi.resource.State/Watch"] ?? 0,
      );
      expect(await directSample("talosccm_talos_direct_fallbacks_total")).toBe(0);
      // One connection per machine this CCM watches for a Node: AWS, hcloud, GCP and the unregistered
      // machine (a forger's Node claims its IP).
      expect(await directSample("talosccm_talos_direct_channels")).toBe(4);
      expect(await directSample('talosccm_csr_talos_facts_total{source="watches"}')).toBe(1);
    });
  },
);
