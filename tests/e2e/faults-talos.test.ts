// Fault injection on the Talos side, end to end: one compiled binary (cloud-node, with a rule that
// needs SystemInformation) lives through a bad day of its Talos API: the fake apid killed and
// restarted, one node's apid route flapping up and down, a renewed talosconfig, and a rotated
// client CA whose new talosconfig arrives only later. After each fault every node initializes, the
// COSI watches come back (a later change still reaches its Node), Talos calls stay bounded, and the
// process never exits.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { FakeApid } from "../support/apid.ts";
import { ApidBed, tainted } from "../support/bed.ts";
import { type TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, generateNodes, normalizeAddress } from "../support/fixtures.ts";
import type { CcmProcess } from "../support/process.ts";

/** A rule reads SystemInformation: every node costs that read besides its watches and Nodename read. */
const CLOUD_CONFIG = `
transformations:
  - name: uuid
    annotations:
      example.com/uuid: "{{ .UUID }}"
`;
/** --node-status-update-frequency: nodes whose watch is down are polled this often. */
const REFRESH_MS = 2000;

let bed: ApidBed;
let cluster: TestCluster;
let apid: FakeApid;
let talosconfig: string;
let ccm: CcmProcess;
let nextIndex = 0;

beforeAll(async () => {
  bed = await ApidBed.start("faults-talos-");
  ({ cluster, apid, talosconfig } = bed);
  const cloudConfig = bed.writeCloudConfig(CLOUD_CONFIG);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      cloudConfig,
      alwaysAllowPaths: "/healthz",
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

/** `n` new fake Talos nodes, known to the apid, not yet registered. */
function newNodes(prefix: string, n: number): FakeNodeSpec[] {
  const specs = generateNodes(n, { prefix, start: nextIndex });
  nextIndex += n;
  apid.addNodes(specs);
  return specs;
}

async function register(specs: FakeNodeSpec[]): Promise<void> {
  await Promise.all(specs.map((s) => bed.register({ name: s.name, ips: s.nodeIPs, heartbeatMs: 0 })));
}

const getNode = (name: string) => bed.getNode(name);

/** Waits until every node of `specs` is initialized from its Talos facts (providerID and UUID rule). */
async function initialized(specs: FakeNodeSpec[], timeoutMs = 30_000): Promise<void> {
  await bed.allInitialized(
    specs.map((s) => s.name),
    timeoutMs,
  );
  for (const s of specs) {
    const n = await getNode(s.name);
    expect({
      node: s.name,
      providerID: n.spec?.providerID,
      uuid: n.metadata?.annotations?.["example.com/uuid"],
    }).toEqual({
      node: s.name,
      providerID: `talos://nocloud/${s.nodeIPs[0]}`,
      uuid: s.systemInformation?.uuid,
    });
  }
}

/** Gives a node a new public address in Talos and waits for it on the Node: its watch works. */
async function expectWatchAlive(spec: FakeNodeSpec, address: string, timeoutMs = 15_000): Promise<void> {
  const ip = spec.nodeIPs[0] as string;
  const current = apid.node(ip)?.addresses ?? spec.addresses;
  apid.updateNode(ip, {
    addresses: [
      ...current,
      normalizeAddress(spec.name, { address: `${address}/24`, linkName: "eth1", flags: "permanent" }),
    ],
  });
  await waitFor(
    async () => (await getNode(spec.name)).status?.addresses?.some((a) => a.address === address) ?? false,
    timeoutMs,
    () => `${address} did not reach ${spec.name}:\n${ccm.output.slice(-3000)}`,
  );
}

/**
 * Waits until the CCM has tried each node of `specs` on Talos and failed (its TalosAPIError
 * Event), then checks that each is still tainted: a node the CCM has not looked at yet proves nothing.
 */
async function expectWaitingOnTalos(specs: FakeNodeSpec[]): Promise<void> {
  let pending: string[] = [];
  await waitFor(
    async () => {
      const seen = await Promise.all(
        specs.map(async (s) => (await cluster.eventsAbout(s.name)).some((e) => e.reason === "TalosAPIError")),
      );
      pending = specs.filter((_, i) => !seen[i]).map((s) => s.name);
      return pending.length === 0;
    },
    20_000,
    () => `no TalosAPIError Event about ${pending.join(", ")}:\n${ccm.output.slice(-3000)}`,
  );
  for (const s of specs)
    expect({ node: s.name, tainted: tainted(await getNode(s.name)) }).toEqual({
      node: s.name,
      tainted: true,
    });
}

async function expectAlive(): Promise<void> {
  expect(ccm.exitCode).toBeNull();
  expect(ccm.output).not.toContain("Controller failed");
  const res = await fetch(`https://127.0.0.1:${bed.port}/healthz`, { tls: { rejectUnauthorized: false } });
  expect(res.status).toBe(200);
}

describe("the apid killed and restarted", () => {
  test("nodes registered while it is down wait tainted, then initialize; existing watches come back", async () => {
    const early = newNodes("early", 3);
    await register(early);
    await initialized(early);

    const waiting = newNodes("outage", 5);
    await apid.stop();
    await register(waiting);
    await expectWaitingOnTalos(waiting);
    await expectAlive();
    await apid.restart();

    await initialized(waiting);
    await expectWatchAlive(early[0] as FakeNodeSpec, "203.0.113.10");
    await expectAlive();
  }, 60_000);
});

/**
 * Most Talos calls routed to a node in `windowMs` while its route flaps: each of its two watches
 * resubscribes at most once per 250 ms (half the 500 ms first backoff; an established stream resets
 * it); a SystemInformation read and a Nodename read (which confirms the machine is the node) each
 * make up to 5 attempts at least 250 ms apart, one at a time, and a failed read is retried after a
 * backoff of at least 500 ms; a down node is polled (a Get and a List) every refresh period.
 */
function flappingBound(windowMs: number): number {
  const perBackoff = Math.floor(windowMs / 250) + 1;
  const watches = 2 * perBackoff;
  const systemInformation = perBackoff;
  const nodename = perBackoff;
  const polls = 2 * (Math.floor(windowMs / REFRESH_MS) + 1);
  return watches + systemInformation + nodename + polls;
}

describe("one node's Talos API flapping", () => {
  test("the others initialize meanwhile, it initializes once stable, and calls to it stay bounded", async () => {
    const [flappy] = newNodes("flappy", 1) as [FakeNodeSpec];
    const steady = newNodes("steady", 4);
    const ip = flappy.nodeIPs[0] as string;
    const T = 5000;
    apid.resetCalls();
    let down = false;
    const flapping = setInterval(() => {
      down = !down;
      apid.setDown(ip, down);
    }, 250);
    const started = Date.now();
    try {
      await register([flappy, ...steady]);
      await initialized(steady, T);
      // Not a wait for an event: the flapping lasts T ms whatever happens, the window the bound is for.
      await Bun.sleep(Math.max(0, started + T - Date.now()));
    } finally {
      clearInterval(flapping);
      apid.setDown(ip, false);
    }
    const calls = apid.calls({ node: ip });
    expect(calls).toBeGreaterThan(0);
    expect(calls).toBeLessThanOrEqual(flappingBound(Date.now() - started));
    await initialized([flappy]);
    await expectWatchAlive(flappy, "203.0.113.11");
    await expectAlive();
  }, 60_000);
});

describe("the talosconfig rotated mid-run", () => {
  test("a renewed client certificate is picked up without a restart; watches move to the new channels", async () => {
    const before = newNodes("renew-before", 2);
    await register(before);
    await initialized(before);
    const reloads = ccm.output.match(/Reloaded talosconfig/g)?.length ?? 0;
    await apid.writeTalosconfig(talosconfig);
    await waitFor(() => (ccm.output.match(/Reloaded talosconfig/g)?.length ?? 0) > reloads, 10_000);
    const after = newNodes("renew-after", 2);
    await register(after);
    await initialized(after);
    await expectWatchAlive(before[0] as FakeNodeSpec, "203.0.113.12");
    await expectAlive();
  }, 60_000);

  test("a rotated client CA refuses the old certificate; the new talosconfig, arriving later, restores everything", async () => {
    const old = newNodes("ca-before", 2);
    await register(old);
    await initialized(old);
    await apid.rotateClientCA();
    const stranded = newNodes("ca-gap", 3);
    await register(stranded);
    await expectWaitingOnTalos(stranded);
    await apid.writeTalosconfig(talosconfig);
    await initialized(stranded);
    await expectWatchAlive(old[0] as FakeNodeSpec, "203.0.113.13");
    await expectAlive();
  }, 60_000);
});
