// A second writer of the Node fields this CCM owns (issue 25, item 3), end to end: the compiled
// binary, a real API server (its server-side field management records who wrote what), the Talos
// simulator. Another client with a field manager of its own ("other-ccm", as a cloud's CCM or
// `kubectl --field-manager` would be) rewrites an initialized Node's addresses and one of its
// labels; the CCM says so (a Warning ConflictingWriter Event naming the field and the manager,
// talosccm_node_conflicting_writes_total{field,manager}, a log line) and writes them again. A second
// rewrite within the window is counted and corrected (after 1 s: a writer that changes the field
// again at once backs both off), but brings no second Event.

import { afterAll, beforeAll, expect, test } from "bun:test";
import type { V1Node } from "@kubernetes/client-node";
import { KubeClient } from "../../lib/kube.ts";
import { PATCH } from "../../lib/kubeapi.ts";
import { SimBed } from "../support/bed.ts";
import { type TestCluster, waitFor } from "../support/cluster.ts";
import { loadFixture } from "../support/fixtures.ts";
import { type SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import type { CcmProcess } from "../support/process.ts";
import { addSimMachine } from "../support/simmachines.ts";

const SPEC = loadFixture("nocloud");
const IP = SPEC.nodeIPs[0] as string;
const PLATFORM_LABEL = "node.cloudprovider.kubernetes.io/platform";
/** What the other writer puts in place of the CCM's addresses. */
const FOREIGN = [
  { type: "InternalIP", address: IP },
  { type: "ExternalIP", address: "203.0.113.7" },
];

let bed: SimBed;
let cluster: TestCluster;
let ccm: CcmProcess;
let _kubelet: SimulatedKubelet;
let other: KubeClient;
/** The addresses the CCM wrote at initialization. */
let ours: Array<{ type: string; address: string }>;

interface RawEvent {
  reason: string;
  type: string;
  note: string;
  action: string;
  regarding: { name: string };
  series?: { count: number };
}

function output(): string {
  return `CCM output:\n${ccm?.output.slice(-4000)}`;
}

async function getNode(): Promise<V1Node> {
  return cluster.adminClient.get<V1Node>(`/api/v1/nodes/${SPEC.name}`);
}

const addresses = (n: V1Node) =>
  (n.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address }));

async function conflictEvents(): Promise<RawEvent[]> {
  const list = await cluster.adminClient.get<{ items: RawEvent[] }>(
    "/apis/events.k8s.io/v1/namespaces/default/events",
  );
  return list.items.filter((e) => e.regarding.name === SPEC.name && e.reason === "ConflictingWriter");
}

async function counted(field: string, manager: string): Promise<number> {
  const line = `talosccm_node_conflicting_writes_total{field="${field}",manager="${manager}"} `;
  const found = (await bed.metrics()).split("\n").find((l) => l.startsWith(line));
  return found ? Number(found.slice(line.length)) : 0;
}

/** The other writer: its own client, its own field manager, as `kubectl patch --field-manager=other-ccm`. */
function rewriteAddresses(): Promise<unknown> {
  return other.patch(`/api/v1/nodes/${SPEC.name}/status`, { status: { addresses: FOREIGN } }, PATCH.merge, {
    query: { fieldManager: "other-ccm" },
  });
}

beforeAll(async () => {
  bed = await SimBed.start("conflicting-writer-e2e-");
  cluster = bed.cluster;
  await addSimMachine(bed.sim, SPEC);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      alwaysAllowPaths: "/metrics",
      // Repeats within the window are logged at --v=2.
      args: ["--v=2"],
    },
    /Starting controller.*cloud-node/,
  );
  _kubelet = await bed.register({
    name: SPEC.name,
    ips: SPEC.nodeIPs,
    heartbeatMs: 0,
    statusOnCreate: true,
  });
  other = new KubeClient(cluster.admin, { qps: 0, userAgent: "other-ccm/v0.0.0" });
});

afterAll(async () => {
  other?.close();
  await bed?.stop();
});

test("the CCM's own writes are recorded under field manager talos-cloud-controller-manager, and it reports none of them", async () => {
  let node: V1Node | undefined;
  await waitFor(
    async () => {
      node = await getNode();
      return !(node.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);
    },
    30_000,
    () => `the Node is still tainted:\n${output()}`,
  );
  ours = addresses(node as V1Node);
  expect(ours.some((a) => a.type === "Hostname")).toBe(true);
  // The kubelet's writes are its own (its User-Agent names field manager kubelet; the status it
  // registered with records no owner); the status this CCM wrote (its addresses) is this CCM's.
  const fields = node?.metadata?.managedFields ?? [];
  expect(fields.filter((e) => e.manager === "kubelet").map((e) => e.subresource ?? "")).toEqual([""]);
  const status = fields.filter((e) => e.subresource === "status");
  expect(status.map((e) => e.manager)).toEqual(["talos-cloud-controller-manager"]);
  expect(JSON.stringify(status[0]?.fieldsV1)).toContain('"f:addresses"');
  expect(await conflictEvents()).toEqual([]);
});

test("another field manager rewriting the addresses and a label gets a ConflictingWriter Event per field, a count and a log line; the CCM writes them again", async () => {
  await rewriteAddresses();
  await other.patch(
    `/api/v1/nodes/${SPEC.name}`,
    { metadata: { labels: { [PLATFORM_LABEL]: "exoscale" } } },
    PATCH.merge,
    {
      query: { fieldManager: "other-ccm" },
    },
  );
  let events: RawEvent[] = [];
  await waitFor(
    async () => {
      events = await conflictEvents();
      return events.length >= 2;
    },
    30_000,
    () => `ConflictingWriter Events: ${JSON.stringify(events)}\n${output()}`,
  );
  const byField = (f: string) => events.find((e) => e.note.startsWith(f));
  expect(events.length).toBe(2);
  expect(byField("status.addresses")).toMatchObject({ type: "Warning", action: "UpdateNode" });
  expect(byField("status.addresses")?.note).toContain('was changed by field manager "other-ccm"');
  expect(byField("status.addresses")?.note).toContain("ExternalIP 203.0.113.7");
  expect(byField("metadata.labels")?.note).toContain(
    `"${PLATFORM_LABEL}", written by this CCM, changed by field manager "other-ccm"`,
  );
  expect(await counted("status.addresses", "other-ccm")).toBe(1);
  expect(await counted("metadata.labels", "other-ccm")).toBe(1);
  expect(ccm.output).toMatch(/Another writer changed a field this CCM owns.*status\.addresses.*other-ccm/);
  // It owns the fields: both are written again from Talos's facts.
  await waitFor(
    async () => {
      const n = await getNode();
      return (
        JSON.stringify(addresses(n)) === JSON.stringify(ours) &&
        n.metadata?.labels?.[PLATFORM_LABEL] === "nocloud"
      );
    },
    30_000,
    () => `the CCM did not write its addresses and label again:\n${output()}`,
  );
});

test("a second rewrite within the window is counted and corrected, with no second Event", async () => {
  await rewriteAddresses();
  // Processed: the count moves and the addresses are written again.
  await waitFor(
    async () => (await counted("status.addresses", "other-ccm")) === 2,
    30_000,
    () => `the second rewrite was not counted:\n${output()}`,
  );
  await waitFor(
    async () => JSON.stringify(addresses(await getNode())) === JSON.stringify(ours),
    30_000,
    () => `the CCM did not write its addresses again:\n${output()}`,
  );
  const events = await conflictEvents();
  expect(events.filter((e) => e.note.startsWith("status.addresses"))).toHaveLength(1);
  expect(events.every((e) => e.series === undefined)).toBe(true);
  expect(ccm.output).toMatch(/Another writer changed a field this CCM owns, again.*other-ccm/);
});
