// The cloud-node-lifecycle controller with the compiled binary against a real API server, simulated
// kubelets and the fake apid: GCP spot nodes deleted only once reported NotReady and 30 s old (a
// silent one is kept), Ready nodes never deleted, NotReady nodes kept unless Talos positively shows
// their instance was replaced (never on a Talos error), the shutdown taint removed from Ready nodes and
// kept on NotReady ones until they turn Ready (as upstream), an Event and a log
// line per deletion, and --node-monitor-period honoured. One cluster; the nodes that must grow past
// the 30 s age gate register together before the tests, so their gates run in parallel; a test that
// changes a node has a node of its own, so each test passes alone and in any order.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { V1Node, V1Taint } from "@kubernetes/client-node";
import { isNotFound } from "../../lib/kubeapi.ts";
import { FakeApid } from "../support/apid.ts";
import { type EventV1, TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, loadFixture, normalizeAddress } from "../support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { type CcmProcess, ccmProcess } from "../support/process.ts";

const SHUTDOWN = { key: "node.cloudprovider.kubernetes.io/shutdown", effect: "NoSchedule" };
const GCP_SPOT = {
  "node.cloudprovider.kubernetes.io/platform": "gcp",
  "node.cloudprovider.kubernetes.io/lifecycle": "spot",
};

/** A node of this suite: what the kubelet registers, what cloud-node would have written, its state. */
interface NodeDef {
  name: string;
  ips: readonly string[];
  providerID: string;
  labels: Readonly<Record<string, string>>;
  state: "ready" | "notReady" | "silent";
  shutdownTaint?: boolean;
}

/** The nodes registered before the tests. */
const NODES = {
  /** NotReady GCP spot instance (Talos answers for it): deleted once 30 s old. */
  spot: {
    name: "talos-spot-1",
    ips: ["10.128.0.23"],
    providerID: "gce://my-project-123/us-central1-b/talos-spot-1",
    labels: GCP_SPOT,
    state: "notReady",
  },
  /** Ready GCP spot instance: never deleted. */
  spotReady: {
    name: "talos-spot-2",
    ips: ["10.128.0.24"],
    providerID: "gce://my-project-123/us-central1-b/talos-spot-2",
    labels: GCP_SPOT,
    state: "ready",
  },
  /** GCP spot instance gone silent (Ready Unknown, tainted unreachable; Talos cannot reach it): kept. */
  spotSilent: {
    name: "talos-spot-3",
    ips: ["10.128.0.25"],
    providerID: "gce://my-project-123/us-central1-b/talos-spot-3",
    labels: GCP_SPOT,
    state: "silent",
  },
  /** NotReady Hetzner node whose IP now answers for server 51234567: replaced, deleted. */
  replaced: {
    name: "talos-hc-old",
    ips: ["10.0.1.2"],
    providerID: "hcloud://11111111",
    labels: { "node.cloudprovider.kubernetes.io/platform": "hcloud" },
    state: "notReady",
  },
  /** NotReady AWS node whose IP answers for itself, with a shutdown taint: kept, taint kept until it is Ready. */
  same: {
    name: "ip-172-31-20-15.ec2.internal",
    ips: ["172.31.20.15"],
    providerID: "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
    labels: { "node.cloudprovider.kubernetes.io/platform": "aws" },
    state: "notReady",
    shutdownTaint: true,
  },
  /** NotReady OpenStack node whose Talos API is down: kept. */
  unreachable: {
    name: "talos-os-1",
    ips: ["10.184.0.244"],
    providerID: "openstack:///0d4e0000-dead-4000-8000-000000000001",
    labels: { "node.cloudprovider.kubernetes.io/platform": "openstack" },
    state: "notReady",
  },
  /** Ready node with a stale shutdown taint: taint removed. */
  readyTainted: {
    name: "talos-ready-1",
    ips: ["10.20.0.5"],
    providerID: "hcloud://22222222",
    labels: {},
    state: "ready",
    shutdownTaint: true,
  },
  /** Like `same`, on a machine of its own: the test that makes it Ready again changes only it. */
  recovering: {
    name: "ip-172-31-20-16.ec2.internal",
    ips: ["172.31.20.16"],
    providerID: "aws:///us-east-1a/i-0a1b2c3d4e5f67891",
    labels: { "node.cloudprovider.kubernetes.io/platform": "aws" },
    state: "notReady",
    shutdownTaint: true,
  },
} as const satisfies Record<string, NodeDef>;

/** A NotReady GCP spot node registered by the test that needs it young. */
const YOUNG_SPOT = {
  name: "talos-spot-young",
  ips: ["10.128.0.26"],
  providerID: "gce://my-project-123/us-central1-b/talos-spot-young",
  labels: GCP_SPOT,
  state: "notReady",
} as const satisfies NodeDef;

/** A Ready node with a stale shutdown taint, registered by the test that has it removed. */
const FRESH_READY_TAINTED = {
  name: "talos-ready-3",
  ips: ["10.20.0.7"],
  providerID: "hcloud://44444444",
  labels: {},
  state: "ready",
  shutdownTaint: true,
} as const satisfies NodeDef;

/** A Ready node for the CCM started with --node-monitor-period=1h (the test adds a shutdown taint). */
const SLOW_READY = {
  name: "talos-ready-2",
  ips: ["10.20.0.6"],
  providerID: "hcloud://33333333",
  labels: {},
  state: "ready",
} as const satisfies NodeDef;

/** The AWS fixture's machine again, as a second instance on the IP of {@link NODES.recovering}. */
function secondAwsMachine(): FakeNodeSpec {
  const aws = loadFixture("aws");
  const { name, ips, providerID } = NODES.recovering;
  const ip = ips[0];
  const instanceId = providerID.split("/").pop() as string;
  return {
    ...aws,
    name,
    nodeIPs: [ip],
    platformMetadata: {
      ...aws.platformMetadata,
      hostname: name,
      instanceId,
      providerId: providerID,
      internalDNS: name,
    },
    addresses: [
      normalizeAddress(name, { address: "127.0.0.1/8", linkName: "lo", scope: "host", flags: "permanent" }),
      normalizeAddress(name, { address: `${ip}/20`, linkName: "eth0" }),
    ],
  };
}

let cluster: TestCluster;
let apid: FakeApid;
let talosconfig: string;
/** The CCM of the first describe block: --node-monitor-period=1s. */
let ccm: CcmProcess;
const kubelets: SimulatedKubelet[] = [];
const procs: CcmProcess[] = [];

function startCcm(period: string, verbosity = 4): CcmProcess {
  const p = ccmProcess({
    kubeconfig: cluster.adminKubeconfig,
    controllers: "cloud-node-lifecycle",
    talosconfig,
    args: [`--node-monitor-period=${period}`, `--v=${verbosity}`],
  });
  procs.push(p);
  return p;
}

const nodePath = (name: string) => `/api/v1/nodes/${name}`;

async function getNode(name: string): Promise<V1Node | undefined> {
  try {
    return await cluster.adminClient.get<V1Node>(nodePath(name));
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

const hasShutdownTaint = (n: V1Node | undefined) =>
  (n?.spec?.taints ?? []).some((t) => t.key === SHUTDOWN.key && t.effect === SHUTDOWN.effect);

/** Writes what the cloud-node controller would have: providerID, labels, taints without uninitialized. */
async function initialize(def: NodeDef): Promise<void> {
  const node = (await getNode(def.name)) as V1Node;
  const taints: V1Taint[] = (node.spec?.taints ?? []).filter((t) => t.key !== UNINITIALIZED_TAINT);
  if (def.shutdownTaint) taints.push({ ...SHUTDOWN });
  await cluster.adminClient.patch(nodePath(def.name), {
    metadata: { labels: def.labels },
    spec: { providerID: def.providerID, taints },
  });
}

/** Lines of the CCM output that record one periodic scan. */
const scans = (p: CcmProcess) => p.output.match(/"Scanning nodes"/g)?.length ?? 0;

async function waitForScans(p: CcmProcess, more: number): Promise<void> {
  const target = scans(p) + more;
  await waitFor(
    () => scans(p) >= target,
    20_000,
    () => `fewer than ${target} scans:\n${p.output.slice(-2000)}`,
  );
}

/** Each node as registered, by name: its uid and creationTimestamp outlive its deletion. */
const registered = new Map<string, V1Node>();

/** Registers the node of `def` with a simulated kubelet and puts it into the state `def` names. */
async function setUp(def: NodeDef): Promise<SimulatedKubelet> {
  const k = await SimulatedKubelet.register(cluster, {
    name: def.name,
    ips: [...def.ips],
    heartbeatMs: 2_000,
  });
  kubelets.push(k);
  registered.set(def.name, (await getNode(def.name)) as V1Node);
  await initialize(def);
  if (def.state === "notReady") await k.goNotReady();
  if (def.state === "silent") await k.goSilent(cluster.adminClient);
  return k;
}

/** Waits until a node is at least 30 s old: the age gate every rule past it is behind. */
async function pastAgeGate(name: string): Promise<void> {
  const created = Date.parse(String(registered.get(name)?.metadata?.creationTimestamp));
  await waitFor(
    () => Date.now() - created >= 30_000,
    60_000,
    () => `${name} not yet 30 s old`,
  );
}

async function deletionEvents(name: string): Promise<EventV1[]> {
  return (await cluster.eventsAbout(name)).filter((e) => e.reason === "DeletingNode");
}

beforeAll(async () => {
  cluster = await TestCluster.start();
  const os = loadFixture("openstack");
  apid = await FakeApid.start({
    nodes: [loadFixture("gcp"), loadFixture("hcloud"), loadFixture("aws"), secondAwsMachine(), os],
  });
  apid.setDown(os.nodeIPs[0] as string, true);
  talosconfig = await apid.writeTalosconfig(join(cluster.dir, "talosconfig"));
  for (const def of Object.values(NODES)) await setUp(def);
}, 120_000);

afterAll(async () => {
  for (const p of procs) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
});

describe("cloud-node-lifecycle", () => {
  beforeAll(async () => {
    ccm = startCcm("1s", 5);
    await ccm.waitForLog(/"Monitoring nodes"/);
  });

  afterAll(async () => {
    await ccm?.stop();
  });

  test("removes the shutdown taint from a Ready node and keeps its other taints", async () => {
    const { name } = FRESH_READY_TAINTED;
    await setUp(FRESH_READY_TAINTED);
    expect(hasShutdownTaint(await getNode(name))).toBe(true);
    await ccm.waitForLog(new RegExp(`"Removed shutdown taint" node="${name}"`));
    const node = await getNode(name);
    expect(hasShutdownTaint(node)).toBe(false);
    expect(node?.spec?.taints?.map((t) => t.key)).toEqual(["node.kubernetes.io/not-ready"]);
  });

  test("keeps the shutdown taint of a NotReady node whose instance exists, as upstream (another CCM may have set it)", async () => {
    // Two more scans of every cached node (the test below checks it again once Talos showed its
    // instance).
    await waitForScans(ccm, 2);
    const node = await getNode(NODES.same.name);
    expect(node).toBeDefined();
    expect(hasShutdownTaint(node)).toBe(true);
    expect(ccm.output).not.toContain(`"Removed shutdown taint" node="${NODES.same.name}"`);
  });

  test("keeps a NotReady GCP spot node younger than 30 s", async () => {
    await setUp(YOUNG_SPOT);
    try {
      // Two scans looked at it NotReady and left it alone for its age (v=5 logs each such node).
      const kept = new RegExp(`"Nothing to do" node="${YOUNG_SPOT.name}" reason="TooYoung"`, "g");
      await waitFor(
        () => (ccm.output.match(kept)?.length ?? 0) >= 2,
        20_000,
        () => `fewer than 2 scans kept ${YOUNG_SPOT.name}:\n${ccm.output.slice(-3000)}`,
      );
      const node = (await getNode(YOUNG_SPOT.name)) as V1Node;
      expect(Date.now() - Date.parse(String(node.metadata?.creationTimestamp))).toBeLessThan(30_000);
      expect(node.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("False");
    } finally {
      // Gone before its own gate passes, so that no other test sees it deleted.
      await cluster.adminClient.delete(nodePath(YOUNG_SPOT.name));
    }
  });

  test("deletes a NotReady GCP spot node once 30 s old, with a log line and an Event", async () => {
    const node = registered.get(NODES.spot.name) as V1Node;
    const created = Date.parse(String(node.metadata?.creationTimestamp));
    await waitFor(
      async () => (await getNode(NODES.spot.name)) === undefined,
      60_000,
      () => ccm.output.slice(-3000),
    );
    expect(Date.now() - created).toBeGreaterThanOrEqual(30_000);
    await ccm.waitForLog(/"Deleted node" node="talos-spot-1" reason="GCPSpotNotReady" detail="[^"]*GCP spot/);
    await waitFor(async () => (await deletionEvents(NODES.spot.name)).length === 1, 10_000);
    const [event] = await deletionEvents(NODES.spot.name);
    expect(event).toMatchObject({
      type: "Normal",
      action: "DeleteNode",
      reportingController: "talos-cloud-controller-manager",
      regarding: { kind: "Node", name: NODES.spot.name, uid: node.metadata?.uid },
    });
    expect(event?.note).toContain("GCP spot");
  });

  test("deletes a NotReady node whose IP now answers Talos for another instance", async () => {
    await waitFor(
      async () => (await getNode(NODES.replaced.name)) === undefined,
      30_000,
      () => ccm.output.slice(-3000),
    );
    const [line] = await ccm.waitForLog(/"Deleted node" node="talos-hc-old" reason="InstanceReplaced".*/);
    expect(line).toContain("hcloud://51234567");
    expect(line).toContain('providerID="hcloud://11111111"');
    await waitFor(async () => (await deletionEvents(NODES.replaced.name)).length === 1, 10_000);
    const [event] = await deletionEvents(NODES.replaced.name);
    expect(event?.note).toContain("10.0.1.2");
  });

  test("never deletes a Ready or silent spot node, a NotReady node of the same instance, nor one Talos cannot reach", async () => {
    const kept = [NODES.spotReady, NODES.spotSilent, NODES.same, NODES.unreachable, NODES.readyTainted];
    // Every node is past its 30 s gate and the NotReady ones were checked with Talos; a few more
    // scans after that must change nothing.
    for (const def of kept) await pastAgeGate(def.name);
    for (const [name, result] of [
      [NODES.same.name, "same"],
      [NODES.unreachable.name, "error"],
      [NODES.spotSilent.name, "error"],
    ]) {
      await ccm.waitForLog(
        new RegExp(`"Checked NotReady node with Talos" node="${name}" result="${result}"`),
      );
    }
    await waitForScans(ccm, 3);
    for (const def of kept) {
      expect((await getNode(def.name))?.metadata?.name).toBe(def.name);
      expect(ccm.output).not.toContain(`"Deleted node" node="${def.name}"`);
    }
    expect(ccm.exitCode).toBeNull();
  });

  test("keeps that NotReady node's shutdown taint after Talos showed its instance, and removes it once the node turns Ready", async () => {
    const { name } = NODES.recovering;
    // Once older than 30 s, the lifecycle controller asked Talos about the node and found the same
    // instance on its IP; two more scans after that, the taint is still there.
    await ccm.waitForLog(
      new RegExp(`"Checked NotReady node with Talos" node="${name}" result="same"`),
      60_000,
    );
    await waitForScans(ccm, 2);
    expect(hasShutdownTaint(await getNode(name))).toBe(true);
    expect(ccm.output).not.toContain(`"Removed shutdown taint" node="${name}"`);
    const kubelet = kubelets.find((k) => k.name === name) as SimulatedKubelet;
    await kubelet.goReady(2_000);
    await ccm.waitForLog(new RegExp(`"Removed shutdown taint" node="${name}"`));
    const node = await getNode(name);
    expect(hasShutdownTaint(node)).toBe(false);
    expect(node?.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
  });

  test("honours --node-monitor-period=1s", async () => {
    // Three more scans come within a few periods, and no faster than one a period.
    const started = performance.now();
    await waitForScans(ccm, 3);
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(1_500);
    expect(elapsed).toBeLessThan(10_000);
  });
});

describe("cloud-node-lifecycle with --node-monitor-period=1h", () => {
  // A cluster of its own: the scan at start of this CCM would act on the other block's nodes.
  let shared: TestCluster;
  let kubelet: SimulatedKubelet | undefined;
  beforeAll(async () => {
    shared = cluster;
    cluster = await TestCluster.start();
  });

  afterAll(async () => {
    kubelet?.close();
    await cluster.stop();
    cluster = shared;
  });

  test("only the scan at start happens: a shutdown taint added afterwards stays", async () => {
    kubelet = await setUp(SLOW_READY);
    const slow = startCcm("1h", 5);
    try {
      // The scan at start has reached this node (v=5 logs each node left alone).
      await slow.waitForLog(new RegExp(`"Nothing to do" node="${SLOW_READY.name}"`));
      await initialize({ ...SLOW_READY, shutdownTaint: true });
      expect(hasShutdownTaint(await getNode(SLOW_READY.name))).toBe(true);
      // Not a wait for an event: the absence of a scan for 3 s is the behaviour under test (with
      // --node-monitor-period=1s the taint is gone within a second, as the first test shows).
      await Bun.sleep(3_000);
      expect(hasShutdownTaint(await getNode(SLOW_READY.name))).toBe(true);
      expect(scans(slow)).toBe(1);
    } finally {
      await slow.stop();
    }
  });
});
