// The cloud-node-lifecycle controller with the compiled binary against a real API server, simulated
// kubelets and the fake apid: GCP spot nodes deleted only once reported NotReady and 30 s old (a
// silent one is kept), Ready nodes never deleted, NotReady nodes kept unless Talos positively shows
// their instance was replaced (never on a Talos error), the shutdown taint removed from Ready nodes and
// kept on NotReady ones until they turn Ready (as upstream), an Event and a log
// line per deletion, and --node-monitor-period honoured. One cluster; all nodes register together so
// their 30 s age gates run in parallel with the other assertions.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { V1Node, V1Taint } from "@kubernetes/client-node";
import { isNotFound, PATCH } from "../../lib/kube.ts";
import { FakeApid } from "../support/apid.ts";
import { type EventV1, TestCluster, waitFor } from "../support/cluster.ts";
import { loadFixture } from "../support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { type CcmProcess, ccmProcess } from "../support/process.ts";

const SHUTDOWN = { key: "node.cloudprovider.kubernetes.io/shutdown", effect: "NoSchedule" };
const GCP_SPOT = {
  "node.cloudprovider.kubernetes.io/platform": "gcp",
  "node.cloudprovider.kubernetes.io/lifecycle": "spot",
};

/** The nodes of this suite: what the kubelet registers, what cloud-node would have written, its state. */
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
} as const;

type NodeDef = (typeof NODES)[keyof typeof NODES];

let cluster: TestCluster;
let apid: FakeApid;
let talosconfig: string;
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
  if ("shutdownTaint" in def) taints.push({ ...SHUTDOWN });
  await cluster.adminClient.patch(nodePath(def.name), {
    metadata: { labels: def.labels },
    spec: { providerID: def.providerID, taints },
  });
}

/**
 * Stops the kubelet's heartbeats and marks the node as kube-controller-manager would after its
 * grace period: Ready Unknown and the `unreachable:NoExecute` taint.
 */
async function goSilent(k: SimulatedKubelet): Promise<void> {
  k.stop();
  const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  await cluster.adminClient.patch(
    `${nodePath(k.name)}/status`,
    {
      status: {
        conditions: [
          {
            type: "Ready",
            status: "Unknown",
            reason: "NodeStatusUnknown",
            message: "Kubelet stopped posting node status.",
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
      },
    },
    PATCH.strategic,
  );
  const node = (await getNode(k.name)) as V1Node;
  await cluster.adminClient.patch(nodePath(k.name), {
    metadata: { resourceVersion: node.metadata?.resourceVersion },
    spec: {
      taints: [...(node.spec?.taints ?? []), { key: "node.kubernetes.io/unreachable", effect: "NoExecute" }],
    },
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

async function deletionEvents(name: string): Promise<EventV1[]> {
  return (await cluster.eventsAbout(name)).filter((e) => e.reason === "DeletingNode");
}

beforeAll(async () => {
  cluster = await TestCluster.start();
  const os = loadFixture("openstack");
  apid = await FakeApid.start({ nodes: [loadFixture("gcp"), loadFixture("hcloud"), loadFixture("aws"), os] });
  apid.setDown(os.nodeIPs[0] as string, true);
  talosconfig = await apid.writeTalosconfig(join(cluster.dir, "talosconfig"));
  // The spot node registers last: the young-node assertion then has the most time left.
  const { spot, ...others } = NODES;
  for (const def of [...Object.values(others), spot]) {
    const k = await SimulatedKubelet.register(cluster, {
      name: def.name,
      ips: [...def.ips],
      heartbeatMs: 2_000,
    });
    kubelets.push(k);
    await initialize(def);
    if (def.state === "notReady") await k.goNotReady();
    if (def.state === "silent") await goSilent(k);
  }
  ccm = startCcm("1s");
  await ccm.waitForLog(/"Monitoring nodes"/);
}, 120_000);

afterAll(async () => {
  for (const p of procs) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
});

describe("cloud-node-lifecycle", () => {
  test("removes the shutdown taint from a Ready node and keeps its other taints", async () => {
    await waitFor(async () => !hasShutdownTaint(await getNode(NODES.readyTainted.name)), 15_000);
    const node = await getNode(NODES.readyTainted.name);
    expect(node?.spec?.taints?.map((t) => t.key)).toEqual(["node.kubernetes.io/not-ready"]);
    await ccm.waitForLog(/"Removed shutdown taint" node="talos-ready-1"/);
  });

  test("keeps the shutdown taint of a NotReady node whose instance exists, as upstream (another CCM may have set it)", async () => {
    // Two more scans of every cached node (the node is younger than 30 s: not yet asked about on
    // Talos; the test after the deletions below checks it again once Talos showed its instance).
    await waitForScans(ccm, 2);
    const node = await getNode(NODES.same.name);
    expect(node).toBeDefined();
    expect(hasShutdownTaint(node)).toBe(true);
    expect(ccm.output).not.toContain(`"Removed shutdown taint" node="${NODES.same.name}"`);
  });

  test("keeps a NotReady GCP spot node younger than 30 s", async () => {
    await waitForScans(ccm, 3);
    const node = (await getNode(NODES.spot.name)) as V1Node;
    const ageMs = Date.now() - Date.parse(String(node.metadata?.creationTimestamp));
    // Scans happened while the node was NotReady and young; the age gate must have kept it.
    expect(ageMs).toBeLessThan(30_000);
    expect(node.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("False");
  });

  test("deletes a NotReady GCP spot node once 30 s old, with a log line and an Event", async () => {
    const node = (await getNode(NODES.spot.name)) as V1Node;
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
    // The deletions above prove every node is past its 30 s gate; a few more scans must change nothing.
    await waitForScans(ccm, 3);
    for (const def of [
      NODES.spotReady,
      NODES.spotSilent,
      NODES.same,
      NODES.unreachable,
      NODES.readyTainted,
    ]) {
      expect((await getNode(def.name))?.metadata?.name).toBe(def.name);
    }
    expect(ccm.output).toMatch(
      /"Checked NotReady node with Talos" node="ip-172-31-20-15.ec2.internal" result="same"/,
    );
    expect(ccm.output).toMatch(/"Checked NotReady node with Talos" node="talos-os-1" result="error"/);
    expect(ccm.output).toMatch(/"Checked NotReady node with Talos" node="talos-spot-3" result="error"/);
    expect(ccm.output.match(/"Deleted node"/g)).toHaveLength(2);
    expect(ccm.exitCode).toBeNull();
  });

  test("keeps that NotReady node's shutdown taint after Talos showed its instance, and removes it once the node turns Ready", async () => {
    // The lifecycle controller asked Talos about the node (older than 30 s now) and found the same
    // instance on its IP; two more scans after that, the taint is still there.
    await ccm.waitForLog(
      new RegExp(`"Checked NotReady node with Talos" node="${NODES.same.name}" result="same"`),
    );
    await waitForScans(ccm, 2);
    expect(hasShutdownTaint(await getNode(NODES.same.name))).toBe(true);
    expect(ccm.output).not.toContain(`"Removed shutdown taint" node="${NODES.same.name}"`);
    const kubelet = kubelets.find((k) => k.name === NODES.same.name) as SimulatedKubelet;
    await kubelet.goReady(2_000);
    await ccm.waitForLog(new RegExp(`"Removed shutdown taint" node="${NODES.same.name}"`));
    const node = await getNode(NODES.same.name);
    expect(hasShutdownTaint(node)).toBe(false);
    expect(node?.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
  });

  test("honours --node-monitor-period", async () => {
    // With 1s, five seconds see several scans.
    const before = scans(ccm);
    await Bun.sleep(5_000);
    expect(scans(ccm) - before).toBeGreaterThanOrEqual(3);
    await ccm.stop();

    // With 1h, only the scan at start happens: a shutdown taint added afterwards stays.
    const slow = startCcm("1h", 5);
    // The scan at start has reached this node (v=5 logs each node left alone).
    await slow.waitForLog(/"Nothing to do" node="talos-ready-1"/);
    await initialize({ ...NODES.readyTainted, labels: {} });
    expect(hasShutdownTaint(await getNode(NODES.readyTainted.name))).toBe(true);
    await Bun.sleep(3_000);
    expect(hasShutdownTaint(await getNode(NODES.readyTainted.name))).toBe(true);
    expect(scans(slow)).toBe(1);
    await slow.stop();
  });
});
