// No permanent wrong providerID (issue 25; the Go CCM's issue #351), end to end: the compiled binary,
// a real API server, the Talos simulator.
//
// A Hetzner Cloud machine's kubelet registers its Node while the machine's PlatformMetadata is what
// Talos publishes before the hcloud platform has read its metadata service: the platform name alone
// (Talos v1.13.5 controllers/network/platform_config_apply.go:124-130). The Go CCM writes
// `talos://hcloud/<ip>` then, for the Node's life. Here the Node stays tainted with a
// WaitingForInstanceID Event; Talos's half-built `hcloud://` (instance-id answered empty) changes
// nothing; once the simulator publishes the full PlatformMetadata, the Node is initialized with
// `hcloud://<id>`. A Node watch runs for the whole file and fails the test on any `talos://`
// providerID of that Node. A bare-metal machine beside it falls back to `talos://metal/<ip>` at
// once, as the Go CCM does.

import { afterAll, beforeAll, expect, test } from "bun:test";
import type { V1Node } from "@kubernetes/client-node";
import { nodeInformer } from "../../lib/kubecache.ts";
import type { LeanNode } from "../../lib/nodeview.ts";
import { encodePlatformMetadata } from "../support/apid.ts";
import { SimBed, tainted } from "../support/bed.ts";
import { type EventV1, type TestCluster, until, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, loadFixture, platformMetadata } from "../support/fixtures.ts";
import type { CcmProcess } from "../support/process.ts";
import { addSimMachine, simResource } from "../support/simmachines.ts";
import type { TalosSim } from "../support/talossim.ts";

const HCLOUD = loadFixture("hcloud");
const HCLOUD_IP = HCLOUD.nodeIPs[0] as string;
/** What Talos publishes before the hcloud platform has read its metadata service. */
const PLACEHOLDER: FakeNodeSpec = { ...HCLOUD, platformMetadata: platformMetadata({ platform: "hcloud" }) };
/** What it publishes when the service answered every key but instance-id (404 or empty): `hcloud://`. */
const HALF_BUILT = platformMetadata({
  ...HCLOUD.platformMetadata,
  instanceId: "",
  providerId: "hcloud://",
});
const METAL = loadFixture("metal-56");
const METAL_IP = METAL.nodeIPs[0] as string;

let bed: SimBed;
let cluster: TestCluster;
let sim: TalosSim;
let ccm: CcmProcess;
let informer: ReturnType<typeof nodeInformer>;
/** Every providerID the Node watch showed, per Node, in order. */
const seen = new Map<string, string[]>();

function output(): string {
  return `CCM output:\n${ccm?.output.slice(-4000)}\nsimulator stderr:\n${sim?.stderr.slice(-1500)}`;
}

function record(n: LeanNode): void {
  const list = seen.get(n.metadata.name) ?? [];
  const id = n.spec.providerID ?? "";
  if (list.at(-1) !== id) list.push(id);
  seen.set(n.metadata.name, list);
}

const getNode = (name: string) => bed.getNode(name);

async function metric(line: RegExp): Promise<number> {
  const m = (await bed.metrics()).match(line);
  return m ? Number(m[1]) : 0;
}
const INSTANCE_ID_ERRORS = /^talosccm_node_initialization_errors_total\{reason="instance_id"\} (\d+)$/m;
const WAITING = /^talosccm_nodes_waiting_for_instance_id (\d+)$/m;

async function waitingEvents(): Promise<EventV1[]> {
  return (await cluster.eventsAbout(HCLOUD.name)).filter((e) => e.reason === "WaitingForInstanceID");
}

beforeAll(async () => {
  bed = await SimBed.start("provider-id-wait-e2e-");
  ({ cluster, sim } = bed);
  await addSimMachine(sim, PLACEHOLDER);
  await addSimMachine(sim, METAL);
  informer = nodeInformer(cluster.adminClient);
  informer.addHandlers({ onAdd: record, onUpdate: (_, n) => record(n) });
  informer.start();
  await informer.waitForSync();
  ccm = await bed.startCcm(
    { controllers: "cloud-node", alwaysAllowPaths: "/metrics" },
    /Starting controller.*cloud-node/,
  );
  for (const spec of [HCLOUD, METAL])
    await bed.register({ name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0, statusOnCreate: true });
});

afterAll(async () => {
  await informer?.stop();
  await bed?.stop();
});

test("a bare-metal machine falls back to talos://metal/<ip> at once", async () => {
  let node: V1Node | undefined;
  await waitFor(
    async () => {
      node = await getNode(METAL.name);
      return !tainted(node);
    },
    30_000,
    () => `${METAL.name} is still tainted:\n${output()}`,
  );
  expect(node?.spec?.providerID).toBe(`talos://metal/${METAL_IP}`);
  await until(
    () => seen.get(METAL.name)?.at(-1) === `talos://metal/${METAL_IP}`,
    "the Node watch to show it",
  );
  expect(seen.get(METAL.name)).toEqual(["", `talos://metal/${METAL_IP}`]);
});

test("an hcloud machine whose PlatformMetadata has no instance ID yet stays tainted, with an Event saying what it waits for", async () => {
  let events: EventV1[] = [];
  await waitFor(
    async () => {
      events = await waitingEvents();
      return events.length > 0;
    },
    30_000,
    () => `no WaitingForInstanceID Event about ${HCLOUD.name}:\n${output()}`,
  );
  expect(events[0]).toMatchObject({ type: "Warning", action: "InitializeNode" });
  expect(events[0]?.note).toContain("Talos reports platform hcloud without an instance ID");
  expect(events[0]?.note).toContain("hcloud://<id>");
  expect(events[0]?.note).toContain(`rather than the fallback talos://hcloud/${HCLOUD_IP}`);
  const node = await getNode(HCLOUD.name);
  expect(tainted(node)).toBe(true);
  expect(node.spec?.providerID).toBeUndefined();
  // Nothing else of the initialization was written either: the Node is as its kubelet made it.
  expect(node.metadata?.labels?.["node.cloudprovider.kubernetes.io/platform"]).toBeUndefined();
  expect(await metric(WAITING)).toBe(1);
  expect(await metric(INSTANCE_ID_ERRORS)).toBeGreaterThanOrEqual(1);
  expect(ccm.output).toMatch(/Waiting for the instance ID before writing a providerID.*talos-hc-1/);
});

test("Talos's half-built hcloud:// (instance-id answered empty) is not written either", async () => {
  const before = await metric(INSTANCE_ID_ERRORS);
  await sim.put(HCLOUD_IP, simResource("platformmetadata", encodePlatformMetadata(HALF_BUILT).yaml));
  // The CCM has processed the change when it counts another pass that left the node tainted.
  await waitFor(
    async () => (await metric(INSTANCE_ID_ERRORS)) > before,
    30_000,
    () => `no initialization pass after the half-built PlatformMetadata:\n${output()}`,
  );
  const node = await getNode(HCLOUD.name);
  expect(tainted(node)).toBe(true);
  expect(node.spec?.providerID).toBeUndefined();
});

test("once the PlatformMetadata watch delivers the instance ID, the Node is initialized with hcloud://<id>; no talos:// providerID was ever written", async () => {
  await sim.put(
    HCLOUD_IP,
    simResource("platformmetadata", encodePlatformMetadata(HCLOUD.platformMetadata).yaml),
  );
  let node: V1Node | undefined;
  await waitFor(
    async () => {
      node = await getNode(HCLOUD.name);
      return !tainted(node);
    },
    30_000,
    () => `${HCLOUD.name} is still tainted:\n${output()}`,
  );
  expect(node?.spec?.providerID).toBe("hcloud://51234567");
  expect(node?.metadata?.labels?.["topology.kubernetes.io/zone"]).toBe("nbg1-dc3");
  // The watch saw every version of the Node: no providerID before hcloud://51234567.
  await until(() => seen.get(HCLOUD.name)?.at(-1) === "hcloud://51234567", "the Node watch to show it");
  expect(seen.get(HCLOUD.name)).toEqual(["", "hcloud://51234567"]);
  expect(await metric(WAITING)).toBe(0);
  expect(ccm.output).toMatch(/Instance ID published; writing the providerID.*hcloud:\/\/51234567/);
});
