// cloud-node against one hostile peer, end to end (issue 40): the compiled binary, a real API server
// (NodeRestriction admission on), the Talos simulator, kubelets acting with their own node
// credentials. A kubelet that moves its InternalIP to a false address and adds an address entry whose
// type is a JavaScript built-in name (`constructor`), written under another cloud CCM's field
// manager name after every correction, is corrected every time within about a second: a backoff on
// a field the node can write itself could be earned by the node. A machine whose address flaps 100
// times in about 2 s (the issue measured 100 Node writes for that) is written at most its write
// budget's worth (8 at once, then one per 5 s), ends at its latest state, and another node
// initializes meanwhile as fast as ever. A Node whose watch events are over 256 KiB, written ten times
// a second, is read at most once per 10 s, and the newest of its events is never lost.

import { afterAll, beforeAll, expect, test } from "bun:test";
import type { V1Node } from "@kubernetes/client-node";
import { PATCH } from "../../lib/kubeapi.ts";
import { PEER_LIMITS } from "../../lib/peerlimits.ts";
import { SimBed } from "../support/bed.ts";
import { type TestCluster, waitFor } from "../support/cluster.ts";
import { generateNodes, normalizeAddress } from "../support/fixtures.ts";
import type { SimulatedKubelet } from "../support/kubelet.ts";
import type { CcmProcess } from "../support/process.ts";
import { addSimMachine, simAddress, simAddressRef } from "../support/simmachines.ts";

const [HOSTILE, FLAPPER, HONEST] = generateNodes(3, { prefix: "peer" }) as [
  ReturnType<typeof generateNodes>[number],
  ReturnType<typeof generateNodes>[number],
  ReturnType<typeof generateNodes>[number],
];

let bed: SimBed;
let cluster: TestCluster;
let ccm: CcmProcess;
let hostile: SimulatedKubelet;

/** Node watch events held by the pacer (lib/kubewatchpacer.ts), counted for the peer. */
const HELD = 'talosccm_peer_input_rejected_total{peer="node",limit="node_event_bytes"}';

const output = () => `CCM output:\n${ccm?.output.slice(-4000)}`;
const getNode = (name: string) => cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`);
const addresses = (n: V1Node) =>
  JSON.stringify((n.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })));

async function metric(line: string): Promise<number> {
  const found = (await bed.metrics()).split("\n").find((l) => l.startsWith(`${line} `));
  return found ? Number(found.slice(line.length + 1)) : 0;
}

beforeAll(async () => {
  bed = await SimBed.start("cloud-node-peer-e2e-");
  cluster = bed.cluster;
  for (const spec of [HOSTILE, FLAPPER, HONEST]) await addSimMachine(bed.sim, spec);
  ccm = await bed.startCcm(
    { controllers: "cloud-node", alwaysAllowPaths: "/metrics", args: ["--v=2"] },
    /Starting controller.*cloud-node/,
  );
  hostile = await bed.register({
    name: HOSTILE.name,
    ips: HOSTILE.nodeIPs,
    heartbeatMs: 0,
    statusOnCreate: true,
  });
  await bed.register({ name: FLAPPER.name, ips: FLAPPER.nodeIPs, heartbeatMs: 0, statusOnCreate: true });
});

afterAll(async () => {
  await bed?.stop();
});

test("a kubelet rewriting a false InternalIP and a `constructor` address under a borrowed manager name is corrected every round within seconds", async () => {
  const ours = addresses(await bed.initialized(HOSTILE.name));
  // A label key every plain object inherits a member of: the kubelet may set it (no restricted prefix).
  await hostile.client.patch(`/api/v1/nodes/${HOSTILE.name}`, { metadata: { labels: { constructor: "x" } } });
  const forged = [
    { type: "InternalIP", address: "10.99.0.1" },
    { type: "constructor", address: "x" },
    { type: "Hostname", address: HOSTILE.name },
  ];
  const rounds: number[] = [];
  for (let round = 0; round < 6; round++) {
    const t0 = performance.now();
    await hostile.client.patch(
      `/api/v1/nodes/${HOSTILE.name}/status`,
      { status: { addresses: forged } },
      PATCH.merge,
      {
        query: { fieldManager: "exoscale-cloud-controller-manager" },
      },
    );
    await waitFor(
      async () => addresses(await getNode(HOSTILE.name)) === ours,
      60_000,
      () => `round ${round}: the false address was not corrected:\n${output()}`,
    );
    rounds.push(performance.now() - t0);
  }
  // With the old backoff the sixth round waited 16 s (1, 2, 4, 8, 16); the cap is 1 s, plus the
  // informer's and the write's round trips.
  expect(Math.max(...rounds)).toBeLessThan(8000);
  expect(
    await metric(
      'talosccm_node_conflicting_writes_total{field="status.addresses",manager="exoscale-cloud-controller-manager"}',
    ),
  ).toBeGreaterThanOrEqual(6);
  expect(await metric('talosccm_informer_handler_errors_total{controller="cloud-node"}')).toBe(0);
  const event = await bed.eventOf(HOSTILE.name, "ConflictingWriter");
  expect(event.note).toContain('field manager "exoscale-cloud-controller-manager"');
});

test("100 flaps of a machine's address cost at most its write budget, end at its latest state, and do not slow another node's initialization", async () => {
  const before = await bed.initialized(FLAPPER.name);
  const settled = addresses(before);
  const ip = FLAPPER.nodeIPs[0] as string;
  const flap = normalizeAddress(FLAPPER.name, {
    address: "95.216.1.9/32",
    linkName: "external",
    flags: "permanent",
  });
  // Every Node update that changes its addresses, seen by an admin watch.
  const ac = new AbortController();
  let writes = 0;
  let last = settled;
  const watching = (async () => {
    for await (const ev of cluster.adminClient.watch<V1Node>("/api/v1/nodes", {
      resourceVersion: before.metadata?.resourceVersion as string,
      signal: ac.signal,
      query: { fieldSelector: `metadata.name=${FLAPPER.name}` },
    })) {
      if (ev.type !== "MODIFIED") continue;
      const now = addresses(ev.object);
      if (now !== last) writes++;
      last = now;
    }
  })().catch(() => {});
  const t0 = performance.now();
  let honestMs = 0;
  for (let i = 0; i < 100; i++) {
    if (i % 2 === 0) await bed.sim.put(ip, simAddress(flap));
    else await bed.sim.destroy(ip, simAddressRef(flap));
    // About the pace (100 flaps in 2.3 s): each flap reaches the CCM on its own.
    await Bun.sleep(20);
    if (i === 50) {
      // The flapper's budget is spent by now: an honest node registers and initializes at once.
      const h0 = performance.now();
      await bed.register({ name: HONEST.name, ips: HONEST.nodeIPs, heartbeatMs: 0, statusOnCreate: true });
      await bed.initialized(HONEST.name, 15_000);
      honestMs = performance.now() - h0;
    }
  }
  await waitFor(
    async () => addresses(await getNode(FLAPPER.name)) === settled && last === settled,
    30_000,
    () => `the flapping node did not end at its latest state:\n${output()}`,
  );
  const elapsedMs = performance.now() - t0;
  ac.abort();
  await watching;
  console.log(
    `100 flaps: ${writes} address writes in ${Math.round(elapsedMs)} ms; honest node initialized in ${Math.round(honestMs)} ms`,
  );
  expect(writes).toBeLessThanOrEqual(8 + Math.ceil(elapsedMs / 5000));
  expect(await metric("talosccm_node_writes_deferred_total")).toBeGreaterThan(0);
  const event = await bed.eventOf(FLAPPER.name, "WriteBudgetExceeded");
  expect(event.type).toBe("Warning");
  expect(honestMs).toBeLessThan(15_000);
});

test("a Node over node_event_bytes heartbeating 10 times a second is read at most once per 10 s, the newest kept: its last write is still corrected, with an Event", async () => {
  // 800 labels (under node_labels) with ~190-character prefixes: with their managed fields the
  // Node's watch events are well over 256 KiB.
  const prefix = `${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(50)}.example.com`;
  const labels: Record<string, string> = {};
  for (let i = 0; i < 800; i++) labels[`${prefix}/l${i}`] = "v".repeat(63);
  await hostile.client.patch(`/api/v1/nodes/${HOSTILE.name}`, { metadata: { labels } });
  const ours = addresses(await getNode(HOSTILE.name));
  const size = JSON.stringify(await getNode(HOSTILE.name)).length;
  expect(size).toBeGreaterThan(PEER_LIMITS.node_event_bytes.value);
  const heldBefore = await metric(HELD);
  for (let i = 0; i < 20; i++) {
    const conditions = [{ type: "HostileHeartbeat", status: "True", reason: "Beat", message: `beat ${i}` }];
    await hostile.client.patch(`/api/v1/nodes/${HOSTILE.name}/status`, { status: { conditions } });
    await Bun.sleep(100);
  }
  // The last write of the burst: a false InternalIP, which the newest held event carries.
  await hostile.client.patch(`/api/v1/nodes/${HOSTILE.name}/status`, {
    status: { addresses: [{ type: "InternalIP", address: "10.99.0.7" }] },
  });
  await waitFor(
    async () => addresses(await getNode(HOSTILE.name)) === ours,
    60_000,
    () => `the false address in the last large event was not corrected:\n${output()}`,
  );
  expect(await metric(HELD)).toBeGreaterThan(heldBefore + 5);
  const event = await bed.eventOf(HOSTILE.name, "PeerInputOverLimit");
  expect(event.type).toBe("Warning");
  expect(event.note).toContain("at most once per 10 s");
  await hostile.client.patch(`/api/v1/nodes/${HOSTILE.name}`, {
    metadata: { labels: Object.fromEntries(Object.keys(labels).map((k) => [k, null])) },
  });
});
