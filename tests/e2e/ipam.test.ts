// node-ipam end to end: the compiled binary against a real API server, simulated kubelets and the
// fake apid. CloudAllocator IPv6 ranges carved from each node's own public prefix (/64 and /56),
// the cluster-range fallback for ULA-only nodes, the wait for cloud-node initialization, a SIGKILL
// in the middle of 200 allocations, exhaustion (an Event, no crash) and release on deletion, zero
// Talos calls for IPv4-only clusters, and an impossible Talos-completed configuration stopping
// start-up.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import {
  formatIP,
  parseCidr,
  parseIP,
  prefixContains,
  prefixCovers,
  prefixesOverlap,
} from "../../lib/cidr.ts";
import { podCIDRsPatch } from "../../lib/ipam.ts";
import { KubeError, PATCH } from "../../lib/kubeapi.ts";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor } from "../support/cluster.ts";
import {
  type FakeNodeSpec,
  generatedNodeIP,
  generateNodes,
  loadFixture,
  normalizeAddress,
} from "../support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { type CcmProcess, ccmProcess } from "../support/process.ts";

const TEST_LABEL = "ipam-e2e";
/** What the fake apid serves as the cluster's ControllerManagerConfig. */
const TALOS_SUBNETS = { podCIDRs: ["10.244.0.0/16", "fd00:10:244::/64"], serviceCIDRs: ["10.96.0.0/12"] };

let cluster: TestCluster;
let apid: FakeApid;
let dir: string;
let talosconfig: string;
const running = new Set<CcmProcess>();
const kubelets: SimulatedKubelet[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "ipam-e2e-"));
  [cluster, apid] = await Promise.all([
    TestCluster.start(),
    FakeApid.start({ controllerManagerConfig: TALOS_SUBNETS }),
  ]);
  talosconfig = await apid.writeTalosconfig(join(dir, "talosconfig"));
});

afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the binary with node-ipam only; `args` add the IPAM flags; /metrics is open on `securePort`. */
function ccm(args: string[], securePort = 0): CcmProcess {
  const p = ccmProcess({
    kubeconfig: cluster.adminKubeconfig,
    controllers: "nodeipam",
    talosconfig,
    securePort,
    alwaysAllowPaths: "/healthz,/metrics",
    kubeApiQps: 200,
    args: ["--allocate-node-cidrs", ...args],
  });
  running.add(p);
  return p;
}

async function stop(p: CcmProcess, signal: NodeJS.Signals = "SIGTERM"): Promise<number> {
  const code = await p.stop(signal);
  running.delete(p);
  return code;
}

/** Registers a kubelet for `spec` (already initialized unless `tainted`), labelled for clean-up. */
async function register(
  spec: { name: string; nodeIPs: string[] },
  tainted = false,
): Promise<SimulatedKubelet> {
  const k = await SimulatedKubelet.register(cluster, {
    name: spec.name,
    ips: spec.nodeIPs,
    external: tainted,
    heartbeatMs: 0,
    labels: { [TEST_LABEL]: "true" },
  });
  kubelets.push(k);
  return k;
}

async function podCIDRs(name: string): Promise<string[]> {
  const node = await cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`);
  return node.spec?.podCIDRs ?? [];
}

/** Every test node's podCIDRs by name. */
async function allPodCIDRs(): Promise<Map<string, string[]>> {
  const list = await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes", {
    query: { labelSelector: TEST_LABEL },
  });
  return new Map(list.items.map((n) => [n.metadata?.name ?? "", n.spec?.podCIDRs ?? []]));
}

async function waitForPodCIDRs(name: string, timeoutMs = 20_000): Promise<string[]> {
  let got: string[] = [];
  await waitFor(
    async () => {
      got = await podCIDRs(name);
      return got.length > 0;
    },
    timeoutMs,
    () => `node ${name} got no podCIDRs`,
  );
  return got;
}

/** Deletes every test node and forgets their kubelets. */
async function deleteTestNodes(): Promise<void> {
  for (const k of kubelets.splice(0)) k.close();
  await cluster.adminClient.delete("/api/v1/nodes", { query: { labelSelector: TEST_LABEL } });
  await waitFor(
    async () => (await allPodCIDRs()).size === 0,
    20_000,
    () => "test nodes were not deleted",
  );
}

/** Another bare-metal node like the metal-ipv6 fixture: `nodeIP`/24 and `ipv6` on bond0. */
function metalNode(name: string, nodeIP: string, ipv6: string): FakeNodeSpec {
  const spec = loadFixture("metal-ipv6");
  const on = (address: string, extra: Record<string, unknown> = {}) =>
    normalizeAddress(name, { address, linkName: "bond0", linkIndex: 6, flags: "permanent", ...extra });
  return {
    ...spec,
    name,
    nodeIPs: [nodeIP],
    platformMetadata: { ...spec.platformMetadata, hostname: name },
    addresses: [on(`${nodeIP}/24`), on(ipv6), on("fe80::1/64", { scope: "link" })],
  };
}

/** The IPv6 address (without length) a spec holds on its uplink. */
function ownIPv6(spec: FakeNodeSpec): string {
  const a = spec.addresses.find((x) => x.address.includes(":") && x.scope === 0 && /^2/.test(x.address));
  if (!a) throw new Error(`${spec.name} has no public IPv6 address`);
  return formatIP(parseCidr(a.address).ip);
}

function expectIn(cidr: string, range: string, bits: number): void {
  const p = parseCidr(cidr).prefix;
  expect(p.bits).toBe(bits);
  expect(prefixCovers(parseCidr(range).prefix, p)).toBe(true);
}

function expectUnique(cidrs: string[]): void {
  const prefixes = cidrs.map((c) => parseCidr(c).prefix);
  for (let i = 0; i < prefixes.length; i++)
    for (let j = i + 1; j < prefixes.length; j++) {
      if (prefixesOverlap(prefixes[i] as never, prefixes[j] as never))
        throw new Error(`pod CIDRs overlap: ${cidrs[i]} and ${cidrs[j]}`);
    }
}

describe("CloudAllocator, dual-stack, cluster subnets from Talos", () => {
  const metal1 = loadFixture("metal-ipv6");
  const metal2 = metalNode("metal-2", "10.10.4.141", "2a01:4f8:271:3b2f::3/64");
  const rpi = loadFixture("metal-56");
  const [ula] = generateNodes(1, { prefix: "ula", ipv6: true, start: 500 }) as [FakeNodeSpec];
  const late = metalNode("metal-late", "10.10.4.142", "2a01:4f8:271:3b2f::4/64");
  let p: CcmProcess;

  beforeAll(async () => {
    apid.addNodes([metal1, metal2, rpi, ula, late]);
    p = ccm(["--cidr-allocator-type=CloudAllocator"]);
    await p.waitForLog(/Starting node IPAM/);
    await Promise.all([metal1, metal2, rpi, ula].map((s) => register(s)));
    await register(late, true);
  });

  afterAll(async () => {
    await stop(p);
    await deleteTestNodes();
    for (const s of [metal1, metal2, rpi, ula, late]) apid.removeNode(s.nodeIPs[0] as string);
  });

  test("the cluster's pod and service subnets come from Talos when --cluster-cidr is absent", async () => {
    await waitForPodCIDRs(metal1.name);
    expect(p.output).toMatch(
      /Read the cluster's subnets from Talos.*podCIDRs="10\.244\.0\.0\/16,fd00:10:244::\/64"/,
    );
    expect(
      apid.calls({ method: "Get", node: "", type: "ControllerManagerConfigs.kubernetes.talos.dev" }),
    ).toBe(1);
  });

  test("nodes with a public IPv6 /64 get an /80 of their own /64 that holds none of their addresses", async () => {
    const got = [await waitForPodCIDRs(metal1.name), await waitForPodCIDRs(metal2.name)];
    for (const [v4, v6] of got as Array<[string, string]>) {
      expectIn(v4, "10.244.0.0/16", 24);
      expectIn(v6, "2a01:4f8:271:3b2f::/64", 80);
      for (const s of [metal1, metal2])
        expect(prefixContains(parseCidr(v6).prefix, parseIP(ownIPv6(s)))).toBe(false);
    }
    expectUnique(got.flat());
  });

  test("a node holding an address of a /56 gets an /80 of the /64 that holds the address", async () => {
    const [v4, v6] = (await waitForPodCIDRs(rpi.name)) as [string, string];
    expectIn(v4, "10.244.0.0/16", 24);
    expectIn(v6, "2a02:8071:5e80:3c00::/64", 80);
    expect(prefixContains(parseCidr(v6).prefix, parseIP("2a02:8071:5e80:3c00::1"))).toBe(false);
  });

  test("a node with only unique-local IPv6 gets its /80 from the cluster's IPv6 range", async () => {
    const [v4, v6] = (await waitForPodCIDRs(ula.name)) as [string, string];
    expectIn(v4, "10.244.0.0/16", 24);
    expectIn(v6, "fd00:10:244::/64", 80);
    expectUnique([...(await allPodCIDRs()).values()].flat());
  });

  test("a node still carrying the uninitialized taint waits for cloud-node, then gets its CIDRs", async () => {
    await waitForPodCIDRs(ula.name);
    expect(await podCIDRs(late.name)).toEqual([]);
    expect(apid.calls({ method: "List", node: late.nodeIPs[0] as string })).toBe(0);
    // What cloud-node does once it initialized the node.
    const node = await cluster.adminClient.get<V1Node>(`/api/v1/nodes/${late.name}`);
    const taints = node.spec?.taints ?? [];
    expect(taints.some((t) => t.key === UNINITIALIZED_TAINT)).toBe(true);
    await cluster.adminClient.patch(
      `/api/v1/nodes/${late.name}`,
      { spec: { taints: taints.filter((t) => t.key !== UNINITIALIZED_TAINT) } },
      PATCH.merge,
    );
    const [, v6] = (await waitForPodCIDRs(late.name)) as [string, string];
    expectIn(v6, "2a01:4f8:271:3b2f::/64", 80);
    expectUnique([...(await allPodCIDRs()).values()].flat());
  });
});

describe("a restart in the middle of 200 allocations", () => {
  const SUBNET = "2a05:d014:aaa:bbb::/64";
  /** Generated nodes that all hold an address of one public /64. */
  const specs = generateNodes(200, { prefix: "burst" }).map((s, i) => ({
    ...s,
    addresses: [
      ...s.addresses,
      normalizeAddress(s.name, {
        address: `2a05:d014:aaa:bbb::${(i + 1).toString(16)}/64`,
        linkName: "eth0",
        linkIndex: 2,
        flags: "permanent",
      }),
    ],
  }));

  afterAll(async () => {
    apid.setDelay(0, "List");
    await deleteTestNodes();
    for (const s of specs) apid.removeNode(s.nodeIPs[0] as string);
  });

  test("every node ends with unique, in-range podCIDRs after a SIGKILL and a new process", async () => {
    apid.addNodes(specs);
    // Slow address lookups keep the first process busy long enough to be killed mid-way.
    apid.setDelay(150, "List");
    const args = ["--cidr-allocator-type=CloudAllocator", `--cluster-cidr=10.244.0.0/16,fd00:10:244::/64`];
    const first = ccm(args);
    await first.waitForLog(/Starting node IPAM/);
    // Registered last name first: the new process then lists (by name) the nodes still waiting ahead
    // of those already served, so only occupying every served node up front keeps ranges unique.
    const order = [...specs].reverse();
    const registering = (async () => {
      for (let i = 0; i < order.length; i += 25)
        await Promise.all(order.slice(i, i + 25).map((s) => register(s)));
    })();
    const allocated = async () => [...(await allPodCIDRs()).values()].filter((c) => c.length > 0).length;
    await waitFor(
      async () => (await allocated()) >= 40,
      60_000,
      () => "the first process allocated too little",
    );
    expect(await stop(first, "SIGKILL")).not.toBe(0);
    const atKill = await allocated();
    expect(atKill).toBeLessThan(specs.length);
    await registering;
    apid.setDelay(0, "List");

    const second = ccm(args);
    await second.waitForLog(/Starting node IPAM/);
    expect(second.output).toMatch(/occupiedNodes=(\d+)/);
    expect(Number(second.output.match(/occupiedNodes=(\d+)/)?.[1])).toBeGreaterThanOrEqual(atKill);
    await waitFor(
      async () => (await allocated()) === specs.length,
      60_000,
      () => "not every node got podCIDRs",
    );
    const all = [...(await allPodCIDRs()).values()];
    for (const [v4, v6] of all as Array<[string, string]>) {
      expectIn(v4, "10.244.0.0/16", 24);
      expectIn(v6, SUBNET, 80);
      // The first /80 holds every node's own address.
      expect(prefixContains(parseCidr(v6).prefix, parseIP("2a05:d014:aaa:bbb::1"))).toBe(false);
    }
    const v4s = all.map((c) => c[0] as string);
    const v6s = all.map((c) => c[1] as string);
    // The reference forgot the ranges of discovered IPv6 subnets across restarts: check those first.
    expect(new Set(v6s).size).toBe(specs.length);
    expect(new Set(v4s).size).toBe(specs.length);
    expectUnique(v4s);
    expect(await stop(second)).toBe(0);
  }, 120_000);
});

describe("IPv4-only clusters", () => {
  afterAll(deleteTestNodes);

  test("exhaustion gives a CIDRNotAvailable Event and upstream's metrics, never a crash; a deleted node's range is reused; no Talos call", async () => {
    apid.resetCalls();
    const port = await freePort();
    const p = ccm(["--cluster-cidr=10.250.0.0/23", "--node-cidr-mask-size=24"], port);
    await p.waitForLog(/Starting node IPAM/);
    const nodes = [0, 1, 2].map((i) => ({ name: `exhaust-${i}`, nodeIPs: [generatedNodeIP(900 + i)] }));
    const got: string[][] = [];
    for (const spec of nodes.slice(0, 2)) {
      await register(spec);
      got.push(await waitForPodCIDRs(spec.name));
    }
    expect(got.flat().sort()).toEqual(["10.250.0.0/24", "10.250.1.0/24"]);
    await register(nodes[2] as { name: string; nodeIPs: string[] });
    let events: Array<{ reason: string; type: string; note: string; regarding: { name: string } }> = [];
    await waitFor(
      async () => {
        const list = await cluster.adminClient.get<{ items: typeof events }>(
          "/apis/events.k8s.io/v1/namespaces/default/events",
        );
        events = list.items.filter(
          (e) => e.regarding.name === "exhaust-2" && e.reason === "CIDRNotAvailable",
        );
        return events.length > 0;
      },
      20_000,
      () => "no CIDRNotAvailable event",
    );
    expect(events[0]?.type).toBe("Warning");
    expect(events[0]?.note).toContain("10.250.0.0/23");
    expect(await podCIDRs("exhaust-2")).toEqual([]);
    expect(p.exitCode).toBeNull();
    const metrics = await (
      await fetch(`https://127.0.0.1:${port}/metrics`, { tls: { rejectUnauthorized: false } })
    ).text();
    expect(metrics).toContain('node_ipam_controller_cidrset_usage_cidrs{clusterCIDR="10.250.0.0/23"} 1\n');
    expect(metrics).toContain('node_ipam_controller_cirdset_max_cidrs{clusterCIDR="10.250.0.0/23"} 2\n');
    expect(metrics).toContain(
      'node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR="10.250.0.0/23"} 2\n',
    );

    await cluster.adminClient.delete("/api/v1/nodes/exhaust-0");
    expect(await waitForPodCIDRs("exhaust-2")).toEqual(got[0] as string[]);
    expect(await stop(p)).toBe(0);
    expect(apid.calls()).toBe(0);
    expect(p.output).not.toContain("Talos API configured");
  });

  test("the API server refuses the set-once patch on a node that has podCIDRs, without changing them", async () => {
    const before = await podCIDRs("exhaust-1");
    expect(before.length).toBe(1);
    const err = await cluster.adminClient
      .patch("/api/v1/nodes/exhaust-1", podCIDRsPatch(["10.99.0.0/24"]), PATCH.json)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubeError);
    expect((err as KubeError).status).toBe(422);
    expect(await podCIDRs("exhaust-1")).toEqual(before);
  });

  test("a CloudAllocator with only an IPv4 cluster CIDR makes zero Talos calls", async () => {
    apid.resetCalls();
    const p = ccm(["--cidr-allocator-type=CloudAllocator", "--cluster-cidr=10.252.0.0/16"]);
    await p.waitForLog(/Starting node IPAM/);
    await register({ name: "v4-cloud", nodeIPs: [generatedNodeIP(950)] });
    expectIn((await waitForPodCIDRs("v4-cloud"))[0] as string, "10.252.0.0/16", 24);
    expect(await stop(p)).toBe(0);
    expect(apid.calls()).toBe(0);
    expect(p.output).not.toContain("Talos API configured");
  });
});

describe("start-up", () => {
  test("an impossible combination with Talos' subnets stops start-up with a clear message", async () => {
    apid.setControllerManagerConfig({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] });
    const p = ccm(["--node-cidr-mask-size-ipv6=64"]);
    const code = await p.proc.exited;
    running.delete(p);
    apid.setControllerManagerConfig(TALOS_SUBNETS);
    expect(code).toBe(1);
    expect(p.output).toContain(
      "Cannot configure node IPAM: --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster",
    );
  });
});
