// Per-machine bounds on Talos answers, end to end (issue 40, "Talos answers have no per-node bounds
// outside List responses" and "Unbounded strings reach the rules"): one compiled binary (cloud-node)
// on the real API server, the fake apid playing hostile machines among honest ones — one whose Talos
// reports thousands of addresses, one whose PlatformMetadata hostname is 1 MiB, one that floods its
// address watch with created events after it initialized. The honest nodes initialize and keep
// following their Talos; the hostile ones stay tainted with a Warning Event naming the bound;
// talosccm_peer_input_rejected_total counts each; and each recovers once its Talos answers within
// the bounds again.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Registry } from "../../lib/metrics.ts";
import { PEER_LIMITS, peerRejections } from "../../lib/peerlimits.ts";
import { TalosClient, TalosLimitError } from "../../lib/talos.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import type { FakeApid } from "../support/apid.ts";
import { ApidBed, tainted } from "../support/bed.ts";
import { type TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeAddress, type FakeNodeSpec, generateNodes, normalizeAddress } from "../support/fixtures.ts";
import type { CcmProcess } from "../support/process.ts";

/** --node-status-update-frequency: nodes whose watch is down are polled this often. */
const REFRESH_MS = 2000;
const BOUND = PEER_LIMITS.talos_addresses.value;

let bed: ApidBed;
let cluster: TestCluster;
let apid: FakeApid;
let ccm: CcmProcess;
let nextIndex = 0;

beforeAll(async () => {
  bed = await ApidBed.start("talos-bounds-");
  ({ cluster, apid } = bed);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      alwaysAllowPaths: "/healthz,/metrics",
      args: [`--node-status-update-frequency=${REFRESH_MS / 1000}s`],
    },
    /Starting controller.*cloud-node/,
  );
});

afterAll(async () => {
  if (ccm) {
    const code = await ccm.stop("SIGTERM");
    expect(code).toBe(0);
  }
  await bed?.stop();
});

/** `n` new fake Talos nodes, each changed by `edit` before the apid knows them. */
function newNodes(prefix: string, n: number, edit: (s: FakeNodeSpec) => void = () => {}): FakeNodeSpec[] {
  const specs = generateNodes(n, { prefix, start: nextIndex });
  nextIndex += n;
  for (const s of specs) edit(s);
  apid.addNodes(specs);
  return specs;
}

async function register(specs: FakeNodeSpec[]): Promise<void> {
  await Promise.all(specs.map((s) => bed.register({ name: s.name, ips: s.nodeIPs, heartbeatMs: 0 })));
}

/** `n` extra global addresses on eth1 (172.16.0.0/12, /32 each). */
function flood(name: string, n: number): FakeAddress[] {
  return Array.from({ length: n }, (_, i) =>
    normalizeAddress(name, {
      address: `172.${16 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32`,
      linkName: "eth1",
      linkIndex: 3,
      flags: "permanent",
    }),
  );
}

/** talosccm_peer_input_rejected_total{peer="talos",limit} from the CCM's /metrics (0 when absent). */
async function rejected(limit: string): Promise<number> {
  const text = await bed.metrics();
  let total = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("talosccm_peer_input_rejected_total{")) continue;
    if (line.includes(`limit="${limit}"`) && line.includes('peer="talos"'))
      total += Number(line.split(" ").pop());
  }
  return total;
}

/** Waits for a Warning Event about `name` whose text names `needle`; returns it. */
async function warningNaming(name: string, needle: string): Promise<{ reason: string; note: string }> {
  let found: { reason: string; note: string } | undefined;
  await waitFor(
    async () => {
      const events = await cluster.eventsAbout(name);
      found = events.find((e) => e.type === "Warning" && e.note.includes(needle));
      return found !== undefined;
    },
    20_000,
    () => `no Warning Event about ${name} naming ${JSON.stringify(needle)}:\n${ccm.output.slice(-3000)}`,
  );
  return found as { reason: string; note: string };
}

async function expectAlive(): Promise<void> {
  expect(ccm.exitCode).toBeNull();
  expect(ccm.output).not.toContain("Controller failed");
  const res = await fetch(`https://127.0.0.1:${bed.port}/healthz`, { tls: { rejectUnauthorized: false } });
  expect(res.status).toBe(200);
}

/**
 * Gives a node a new public address in Talos (in place of the one an earlier call gave it: the Node
 * lists one public IPv4) and waits for it on the Node: its facts follow its Talos.
 */
async function expectFollowed(spec: FakeNodeSpec, address: string, timeoutMs = 15_000): Promise<void> {
  const ip = spec.nodeIPs[0] as string;
  const current = (apid.node(ip)?.addresses ?? spec.addresses).filter((a) => a.linkName !== "eth2");
  apid.updateNode(ip, {
    addresses: [
      ...current,
      normalizeAddress(spec.name, { address: `${address}/24`, linkName: "eth2", flags: "permanent" }),
    ],
  });
  await waitFor(
    async () => (await bed.getNode(spec.name)).status?.addresses?.some((a) => a.address === address) ?? false,
    timeoutMs,
    () => `${address} did not reach ${spec.name}:\n${ccm.output.slice(-3000)}`,
  );
}

describe("hostile machines among honest ones", () => {
  let honest: FakeNodeSpec[];
  let addressFlood: FakeNodeSpec;
  let longHostname: FakeNodeSpec;

  test("the honest nodes initialize; the machine with thousands of addresses and the one with a 1 MiB hostname stay tainted with a Warning Event naming the bound, counted", async () => {
    honest = newNodes("honest", 3);
    [addressFlood] = newNodes("flood", 1, (s) => {
      s.addresses = [...s.addresses, ...flood(s.name, 3 * BOUND)];
    }) as [FakeNodeSpec];
    [longHostname] = newNodes("longname", 1, (s) => {
      s.platformMetadata = { ...s.platformMetadata, hostname: "h".repeat(1 << 20) };
    }) as [FakeNodeSpec];
    await register([...honest, addressFlood, longHostname]);
    await bed.allInitialized(
      honest.map((s) => s.name),
      30_000,
    );

    const floodEvent = await warningNaming(addressFlood.name, `over the bound of ${BOUND}`);
    expect(floodEvent.note).toContain(`${PEER_LIMITS.talos_addresses.what}`);
    const nameEvent = await warningNaming(
      longHostname.name,
      `over the bound of ${PEER_LIMITS.talos_name_length.value}`,
    );
    expect(nameEvent.note).toContain("PlatformMetadata hostname");
    expect(nameEvent.note).toContain(`${1 << 20} characters`);
    for (const s of [addressFlood, longHostname]) {
      expect({ node: s.name, tainted: tainted(await bed.getNode(s.name)) }).toEqual({
        node: s.name,
        tainted: true,
      });
    }
    expect(await rejected("talos_addresses")).toBeGreaterThanOrEqual(1);
    expect(await rejected("talos_name_length")).toBeGreaterThanOrEqual(1);
    // Nothing of the hostile machines reached a Node, and the honest ones follow their Talos.
    const floodNode = await bed.getNode(addressFlood.name);
    expect(floodNode.status?.addresses?.some((a) => a.address.startsWith("172.")) ?? false).toBe(false);
    await expectFollowed(honest[0] as FakeNodeSpec, "198.51.100.10");
    await expectAlive();
  }, 90_000);

  test("the Talos client refuses the hostile machines' List and Get answers at the bound and counts each, and still answers for the honest ones", async () => {
    const registry = new Registry();
    const client = new TalosClient({ config: loadTalosConfig({ path: bed.talosconfig, env: {} }), registry });
    try {
      const counted = (limit: string) => peerRejections(registry).get({ peer: "talos", limit });
      const list = client.addresses(addressFlood.nodeIPs[0] as string, { attempts: 1 });
      await expect(list).rejects.toBeInstanceOf(TalosLimitError);
      await expect(list).rejects.toThrow(`over the bound of ${BOUND}`);
      expect(counted("talos_addresses")).toBe(1);
      const get = client.platformMetadata(longHostname.nodeIPs[0] as string, { attempts: 1 });
      await expect(get).rejects.toBeInstanceOf(TalosLimitError);
      expect(counted("talos_name_length")).toBe(1);
      const ok = await client.addresses(honest[0]?.nodeIPs[0] as string);
      expect(ok.length).toBeLessThanOrEqual(BOUND);
      expect((await client.platformMetadata(honest[0]?.nodeIPs[0] as string)).hostname).toBe(
        honest[0]?.name as string,
      );
    } finally {
      client.close();
    }
  }, 30_000);

  test("a machine that floods its address watch after it initialized is cut at the bound and counted; the others keep following their Talos", async () => {
    const [victim, witness] = honest as [FakeNodeSpec, FakeNodeSpec];
    const ip = victim.nodeIPs[0] as string;
    const before = await rejected("talos_addresses");
    const sane = apid.node(ip)?.addresses ?? victim.addresses;
    apid.updateNode(ip, { addresses: [...sane, ...flood(victim.name, BOUND + 500)] });
    await waitFor(
      async () => (await rejected("talos_addresses")) > before,
      20_000,
      () => `no refusal counted for ${victim.name}:\n${ccm.output.slice(-3000)}`,
    );
    // The Node keeps its state (no address of the flood), and another node's change still lands.
    await expectFollowed(witness, "198.51.100.11");
    const node = await bed.getNode(victim.name);
    expect(node.status?.addresses?.some((a) => a.address.startsWith("172.")) ?? false).toBe(false);
    expect(tainted(node)).toBe(false);
    // Within the bound again: the watch comes back and follows the machine.
    apid.updateNode(ip, { addresses: sane });
    await expectFollowed(victim, "198.51.100.12", 45_000);
    await expectAlive();
  }, 90_000);

  test("each hostile machine recovers once its Talos answers within the bounds", async () => {
    apid.updateNode(addressFlood.nodeIPs[0] as string, {
      addresses: addressFlood.addresses.filter((a) => !a.address.startsWith("172.")),
    });
    apid.updateNode(longHostname.nodeIPs[0] as string, { platformMetadata: { hostname: longHostname.name } });
    await bed.allInitialized([addressFlood.name, longHostname.name], 60_000);
    await expectAlive();
  }, 90_000);
});
