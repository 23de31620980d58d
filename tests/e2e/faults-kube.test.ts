// Fault injection on the Kubernetes side, end to end: the compiled binary (cloud-node and node-ipam)
// against a real API server whose audit log records every Node write with its body. One cluster,
// one bad day in five acts: kube-apiserver SIGKILLed and restarted while 200 nodes initialize,
// etcd frozen for 10 s, two replicas whose leader is SIGKILLed mid-work (the new leader then
// working through a backlog longer than its renew deadline), a leader whose Lease requests fall
// into a black hole while its Node writes flow, and bursts of 429 and 500 answers (and an ended
// watch) from a proxy in front of the API server. Every act ends with every node initialized,
// unique pod CIDRs, no Node written twice, and the process alive.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { parseCidr, prefixCovers, prefixesOverlap } from "../../lib/cidr.ts";
import { FakeApid } from "../support/apid.ts";
import { type AuditEvent, freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { type FakeNodeSpec, generateNodes } from "../support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { type CcmProcess, ccmProcess } from "../support/process.ts";
import { ApiProxy } from "../support/proxy.ts";

/** Node writes are logged with their bodies (to tell initialization from pod-CIDR patches). */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Request
    resources: [{ group: "", resources: ["nodes", "nodes/status"] }]
  - level: Metadata
`;
const CLUSTER_CIDR = "10.244.0.0/16";
/** Label telling which act registered a node. */
const ACT = "faults-e2e/act";

let cluster: TestCluster;
let apid: FakeApid;
let dir: string;
let talosconfig: string;
const procs = new Set<CcmProcess>();
const kubelets: SimulatedKubelet[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "faults-kube-"));
  [cluster, apid] = await Promise.all([TestCluster.start({ auditPolicy: AUDIT_POLICY }), FakeApid.start()]);
  talosconfig = await apid.writeTalosconfig(join(dir, "talosconfig"));
});

afterAll(async () => {
  for (const p of procs) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A kubeconfig of its own user (system:masters), so the audit log tells processes apart. */
async function kubeconfigFor(user: string): Promise<string> {
  return writeKubeconfig(
    join(dir, `${user}.kubeconfig`),
    await cluster.userConnection(user, ["system:masters"]),
  );
}

/** Starts the binary with `kubeconfig` and the given arguments after the common ones. */
function ccm(kubeconfig: string, args: string[]): CcmProcess {
  const p = ccmProcess({
    kubeconfig,
    talosconfig,
    leaderElect: true,
    alwaysAllowPaths: "/healthz",
    kubeApiQps: 100,
    args,
  });
  procs.add(p);
  return p;
}

/** cloud-node and node-ipam (RangeAllocator), without leader election. */
const WORKING = [
  "--controllers=cloud-node,nodeipam",
  "--allocate-node-cidrs",
  `--cluster-cidr=${CLUSTER_CIDR}`,
  "--node-cidr-mask-size=26",
];

async function stop(p: CcmProcess, signal: NodeJS.Signals = "SIGTERM"): Promise<number> {
  const code = await p.stop(signal);
  procs.delete(p);
  return code;
}

/** Fake Talos nodes for one act; `start` keeps node IPs distinct across acts. */
function nodesFor(act: string, n: number, start: number): FakeNodeSpec[] {
  const specs = generateNodes(n, { prefix: act, start });
  apid.addNodes(specs);
  return specs;
}

/** Registers kubelets for `specs`, `parallel` at a time. */
async function register(act: string, specs: FakeNodeSpec[], parallel = 20): Promise<void> {
  for (let i = 0; i < specs.length; i += parallel) {
    const batch = await Promise.all(
      specs.slice(i, i + parallel).map((s) =>
        SimulatedKubelet.register(cluster, {
          name: s.name,
          ips: s.nodeIPs,
          heartbeatMs: 0,
          labels: { [ACT]: act },
        }),
      ),
    );
    kubelets.push(...batch);
  }
}

async function nodesOf(act: string): Promise<V1Node[]> {
  const list = await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes", {
    query: { labelSelector: `${ACT}=${act}` },
  });
  return list.items;
}

const initialized = (n: V1Node) => !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);
const done = (n: V1Node, ipam: boolean) =>
  initialized(n) && (n.spec?.providerID ?? "") !== "" && (!ipam || (n.spec?.podCIDRs?.length ?? 0) > 0);

/** Waits until all `count` nodes of `act` are initialized (and hold pod CIDRs with `ipam`). */
async function waitAllDone(act: string, count: number, p: CcmProcess, timeoutMs: number, ipam = true) {
  let nodes: V1Node[] = [];
  await waitFor(
    async () => {
      nodes = await nodesOf(act);
      return nodes.length === count && nodes.every((n) => done(n, ipam));
    },
    timeoutMs,
    () =>
      `${nodes.filter((n) => done(n, ipam)).length}/${count} nodes of ${act} done:\n${p.output.slice(-3000)}`,
    250,
  );
  return nodes;
}

/** Every node's pod CIDRs lie in the cluster CIDR and no two overlap. */
function expectUniquePodCIDRs(nodes: V1Node[]): void {
  const cidrs = nodes.flatMap((n) => n.spec?.podCIDRs ?? []);
  const range = parseCidr(CLUSTER_CIDR).prefix;
  const prefixes = cidrs.map((c) => parseCidr(c).prefix);
  for (const p of prefixes) expect(prefixCovers(range, p)).toBe(true);
  const overlaps: string[] = [];
  for (let i = 0; i < prefixes.length; i++)
    for (let j = i + 1; j < prefixes.length; j++)
      if (prefixesOverlap(prefixes[i] as never, prefixes[j] as never))
        overlaps.push(`${cidrs[i]}~${cidrs[j]}`);
  expect(overlaps).toEqual([]);
}

type WriteKind = "init" | "podCIDRs" | "status" | "other";

/** What a successful Node write did, from its audited body. */
function writeKind(e: AuditEvent): WriteKind {
  if (e.objectRef?.subresource === "status") return "status";
  const body = (e as AuditEvent & { requestObject?: unknown }).requestObject;
  const ops = Array.isArray(body) ? (body as Array<{ op?: string; path?: string; value?: unknown }>) : [];
  if (ops.some((o) => o.path === "/spec/podCIDRs")) return "podCIDRs";
  // The initialization patch tests the taint list it removes the uninitialized taint from.
  if (
    ops.some(
      (o) =>
        o.op === "test" && o.path === "/spec/taints" && JSON.stringify(o.value).includes(UNINITIALIZED_TAINT),
    )
  )
    return "init";
  return "other";
}

interface NodeWrite {
  node: string;
  user: string;
  kind: WriteKind;
  at: number;
}

/** Successful writes to the named Nodes by users other than the kubelets and the test's admin. */
function nodeWrites(names: ReadonlySet<string>): NodeWrite[] {
  return cluster
    .auditEvents()
    .filter(
      (e) =>
        e.objectRef?.resource === "nodes" &&
        names.has(e.objectRef.name ?? "") &&
        (e.verb === "patch" || e.verb === "update") &&
        (e.responseStatus?.code ?? 0) < 300 &&
        !e.user.username.startsWith("system:node:") &&
        e.user.username !== "test-admin",
    )
    .map((e) => ({
      node: e.objectRef?.name ?? "",
      user: e.user.username,
      kind: writeKind(e),
      at: Date.parse(e.requestReceivedTimestamp),
    }));
}

/** Per node: how many successful writes of each kind, and by whom. */
function writesPerNode(writes: NodeWrite[]): Map<string, Record<WriteKind, string[]>> {
  const out = new Map<string, Record<WriteKind, string[]>>();
  for (const w of writes) {
    let rec = out.get(w.node);
    if (!rec) {
      rec = { init: [], podCIDRs: [], status: [], other: [] };
      out.set(w.node, rec);
    }
    rec[w.kind].push(w.user);
  }
  return out;
}

/** Nodes written more than once in one of `kinds` (should be none). */
function doubleWrites(names: ReadonlySet<string>, kinds: WriteKind[] = ["init", "podCIDRs"]): string[] {
  const out: string[] = [];
  for (const [node, rec] of writesPerNode(nodeWrites(names)))
    for (const k of kinds) if (rec[k].length > 1) out.push(`${node}: ${k} by ${rec[k].join(",")}`);
  return out;
}

async function healthz(port: number): Promise<number> {
  const res = await fetch(`https://127.0.0.1:${port}/healthz`, { tls: { rejectUnauthorized: false } }).catch(
    () => undefined,
  );
  return res?.status ?? 0;
}

function expectAlive(p: CcmProcess): void {
  expect(p.exitCode).toBeNull();
  expect(p.output).not.toContain("Controller failed");
}

describe("one process through an API server restart and an etcd pause", () => {
  let p: CcmProcess;
  let port: number;

  beforeAll(async () => {
    port = await freePort();
    p = ccm(await kubeconfigFor("ccm-restart"), [
      ...WORKING,
      "--leader-elect=false",
      `--secure-port=${port}`,
    ]);
    await p.waitForLog(/Starting node IPAM/);
    await p.waitForLog(/Starting controller.*cloud-node/);
  });

  afterAll(async () => {
    apid.setDelay(0, "Watch");
    if (p) expect(await stop(p)).toBe(0);
  });

  test("kube-apiserver SIGKILLed and restarted while 200 nodes initialize: all initialized, unique pod CIDRs, no Node written twice", async () => {
    const specs = nodesFor("restart", 200, 0);
    // Each node's facts arrive a second after its watch opens (64 at a time): initialization
    // spreads over several seconds, so the restart lands in the middle of it.
    apid.setDelay(1000, "Watch");
    await register("restart", specs.slice(0, 100));
    const before = (await nodesOf("restart")).filter(initialized).length;
    await cluster.stopApiserver("SIGKILL");
    // Part of the fault: the API server stays down a second while the CCM keeps running.
    await Bun.sleep(1000);
    expect(await healthz(port)).toBe(200);
    await cluster.startApiserver();
    await register("restart", specs.slice(100));
    const nodes = await waitAllDone("restart", 200, p, 90_000);

    // The restart happened while the first half was still being initialized.
    expect(before).toBeLessThan(100);
    expectUniquePodCIDRs(nodes);
    for (const n of nodes) {
      const ip = specs.find((s) => s.name === n.metadata?.name)?.nodeIPs[0];
      expect(n.spec?.providerID).toBe(`talos://nocloud/${ip}`);
    }
    expect(doubleWrites(new Set(specs.map((s) => s.name)))).toEqual([]);
    // Nodes registered after the restart: exactly one initialization and one pod-CIDR write each (the
    // first half may lack a write whose answer and audit record the SIGKILL swallowed).
    const later = writesPerNode(nodeWrites(new Set(specs.slice(100).map((s) => s.name))));
    expect(later.size).toBe(100);
    for (const [node, rec] of later)
      expect({ node, init: rec.init.length, podCIDRs: rec.podCIDRs.length }).toEqual({
        node,
        init: 1,
        podCIDRs: 1,
      });
    expectAlive(p);
    expect(await healthz(port)).toBe(200);
  }, 150_000);

  test("etcd frozen for 10 s while nodes initialize: health stays served, every node is initialized after, once", async () => {
    const specs = nodesFor("etcd", 10, 200);
    await register("etcd", specs);
    const before = (await nodesOf("etcd")).filter(initialized).length;
    cluster.pauseEtcd();
    try {
      // Part of the fault: etcd stays frozen 10 s, with a health check halfway.
      await Bun.sleep(5000);
      // The process is not blocked by requests hanging on the API server.
      expect(await healthz(port)).toBe(200);
      await Bun.sleep(5000);
    } finally {
      cluster.resumeEtcd();
    }
    const nodes = await waitAllDone("etcd", 10, p, 60_000);
    expect(before).toBeLessThan(10);
    expectUniquePodCIDRs(nodes);
    for (const [node, rec] of writesPerNode(nodeWrites(new Set(specs.map((s) => s.name)))))
      expect({ node, init: rec.init.length, podCIDRs: rec.podCIDRs.length }).toEqual({
        node,
        init: 1,
        podCIDRs: 1,
      });
    expectAlive(p);
  }, 90_000);
});

describe("two replicas, the leader SIGKILLed in the middle of its work", () => {
  test("the standby takes over within the lease duration and finishes; every node is initialized and given pod CIDRs by one replica, once", async () => {
    const [kcA, kcB] = await Promise.all([kubeconfigFor("ccm-a"), kubeconfigFor("ccm-b")]);
    // A low request rate keeps each leader busy for seconds: the SIGKILL lands mid-way, and the
    // new leader's writes and Events queue up for longer than its renew deadline.
    const args = [
      ...WORKING,
      "--leader-elect-resource-name=faults-leader",
      "--leader-elect-lease-duration=6s",
      "--leader-elect-renew-deadline=4s",
      "--leader-elect-retry-period=1s",
      "--secure-port=0",
      "--kube-api-qps=5",
      "--kube-api-burst=5",
    ];
    const a = ccm(kcA, args);
    await a.waitForLog(/Successfully acquired lease/);
    const b = ccm(kcB, args);
    await b.waitForLog(/New leader elected/);
    const specs = nodesFor("leader", 24, 300);
    const names = new Set(specs.map((s) => s.name));
    await register("leader", specs.slice(0, 12));
    await waitFor(
      async () => (await nodesOf("leader")).some(initialized),
      20_000,
      () => a.output.slice(-3000),
    );
    const killed = Date.now();
    expect(await stop(a, "SIGKILL")).not.toBe(0);
    const atKill = (await nodesOf("leader")).filter((n) => done(n, true)).length;
    await register("leader", specs.slice(12));
    await b.waitForLog(/Successfully acquired lease/, 20_000);
    const takeoverMs = Date.now() - killed;
    const nodes = await waitAllDone("leader", 24, b, 60_000);

    expect(atKill).toBeLessThan(12);
    // Lease renewals do not wait behind the backlog (their client is their own).
    expect(b.output).not.toContain("Leader election lost");
    // Expiry is judged on the standby's clock from its last observation of a renewal (at most one
    // jittered retry period old), then it polls once per retry period (+ up to 1.2 periods of jitter
    // each, client-go's JitterFactor).
    expect(takeoverMs).toBeLessThanOrEqual(6000 + 2 * 2200 + 1000);
    expectUniquePodCIDRs(nodes);
    const writes = nodeWrites(names);
    // The standby wrote nothing while it was standing by; the dead leader nothing after its death.
    expect(writes.filter((w) => w.user === "ccm-b" && w.at < killed)).toEqual([]);
    expect(writes.filter((w) => w.user === "ccm-a" && w.at > killed + 1000)).toEqual([]);
    const per = writesPerNode(writes);
    expect(per.size).toBe(24);
    for (const [node, rec] of per)
      expect({ node, init: rec.init.length, podCIDRs: rec.podCIDRs.length }).toEqual({
        node,
        init: 1,
        podCIDRs: 1,
      });
    // Both replicas did part of the work.
    const initBy = (user: string) => [...per.values()].filter((r) => r.init[0] === user).length;
    expect(initBy("ccm-a")).toBeGreaterThan(0);
    expect(initBy("ccm-b")).toBeGreaterThanOrEqual(12);
    expectAlive(b);
    expect(await stop(b)).toBe(0);
  }, 90_000);
});

describe("the leader's Lease requests fall into a black hole while its other requests work", () => {
  test("it stops leading within the renew deadline and exits 1; the standby takes over; no Node is written by both", async () => {
    const proxy = await ApiProxy.start(cluster, "ccm-hung");
    try {
      const kcB = await kubeconfigFor("ccm-standby");
      const args = [
        ...WORKING,
        "--leader-elect-resource-name=faults-hung",
        "--leader-elect-lease-duration=6s",
        "--leader-elect-renew-deadline=4s",
        "--leader-elect-retry-period=1s",
        "--secure-port=0",
        "--kube-api-qps=10",
        "--kube-api-burst=10",
      ];
      const a = ccm(proxy.writeKubeconfig(join(dir, "hung.kubeconfig")), args);
      await a.waitForLog(/Successfully acquired lease/);
      const b = ccm(kcB, args);
      await b.waitForLog(/New leader elected/);
      const specs = nodesFor("hung", 30, 350);
      const names = new Set(specs.map((s) => s.name));
      await register("hung", specs.slice(0, 15));
      await waitFor(
        async () => (await nodesOf("hung")).some(initialized),
        20_000,
        () => a.output.slice(-3000),
      );
      // Only the Lease: Node writes keep flowing, as with one dead pooled connection.
      const held = Date.now();
      proxy.inject({ path: /\/leases\/faults-hung$/, hang: true, status: 503 });
      await register("hung", specs.slice(15));
      // client-go's rule: a leader that cannot renew within the renew deadline stops leading.
      // A deadline on the wait for the exit (lease duration + renew deadline + slack), not a wait by the clock.
      const exit = await Promise.race([
        a.proc.exited,
        Bun.sleep(4000 + 1000 + 2500).then(() => "still running"),
      ]);
      const stopped = Date.now();
      expect({ exit, lost: a.output.includes("Leader election lost") }).toEqual({ exit: 1, lost: true });
      procs.delete(a);
      await b.waitForLog(/Successfully acquired lease/, 20_000);
      const nodes = await waitAllDone("hung", 30, b, 60_000);
      expectUniquePodCIDRs(nodes);
      const writes = nodeWrites(names);
      expect(writes.filter((w) => w.user === "ccm-hung" && w.at > stopped)).toEqual([]);
      expect(writes.filter((w) => w.user === "ccm-standby" && w.at < held)).toEqual([]);
      for (const [node, rec] of writesPerNode(writes))
        expect({ node, init: rec.init.length, podCIDRs: rec.podCIDRs.length }).toEqual({
          node,
          init: 1,
          podCIDRs: 1,
        });
      expectAlive(b);
      expect(await stop(b)).toBe(0);
    } finally {
      await proxy.stop();
    }
  }, 90_000);
});

// How the binary's Kubernetes client and queues pace retries, for the bounds below:
// - KubeClient retries a 429 (and a 5xx carrying Retry-After) in place, up to 5 attempts, sleeping
//   Retry-After × [0.8, 1.2] in between; then the error reaches the reconcile.
// - A failed reconcile re-queues its key after 5 ms · 2^failures (client-go's item backoff); events
//   that add the key meanwhile (informer, Talos watch) bypass it.
// - The Node informer re-watches after a failure f (1-based) once 0.5–1 × min(30 s, 250 ms · 2^f) passed.
const RETRY_AFTER_FLOOR_MS = 800;
const CLIENT_ATTEMPTS = 5;
const QUEUE_BASE_MS = 5;

/**
 * Most requests `workers` reconcile loops can send in `windowMs` while every answer is 429 with
 * Retry-After 1: within one reconcile, attempts are ≥ 0.8 s apart; a new reconcile (another key, or
 * the same after its ≥ 5 ms backoff) may start at once, at most once per 5 attempts' span.
 */
function bound429(windowMs: number, workers: number): number {
  const spaced = Math.floor(windowMs / RETRY_AFTER_FLOOR_MS) + 1;
  const restarts = Math.floor(windowMs / ((CLIENT_ATTEMPTS - 1) * RETRY_AFTER_FLOOR_MS)) + 1;
  return workers * (spaced + restarts);
}

/**
 * Most requests one node's key can cause in `windowMs` while every answer is a 500 without
 * Retry-After: one per reconcile, reconciles at 0, 5, 15, 35 … ms (5 ms · (2^k − 1)), plus one for
 * each event that re-adds the key past its backoff: ADDED, the kubelet's status write, and the
 * PlatformMetadata and AddressStatus watches delivering their contents.
 */
function bound500PerNode(windowMs: number): number {
  const retries = Math.floor(Math.log2(windowMs / QUEUE_BASE_MS + 1));
  return retries + 1 + 4;
}

/**
 * Most list and watch requests the Node informer sends in `windowMs` after its watch ended while
 * every answer is a 500: one at once (a watch that ends is re-opened), then one per backoff of at
 * least 0.5 × 250 ms · 2^f after failure f.
 */
function boundInformer(windowMs: number): number {
  let n = 1;
  let t = 0;
  for (let f = 1; ; f++) {
    t += 0.5 * Math.min(30_000, 250 * 2 ** Math.min(f, 7));
    if (t >= windowMs) return n;
    n++;
  }
}

describe("bursts of 429 and 500 from the API server, through a proxy", () => {
  const WORKERS = 4;
  let proxy: ApiProxy;
  let p: CcmProcess;

  beforeAll(async () => {
    proxy = await ApiProxy.start(cluster, "ccm-proxied");
    apid.setDelay(0, "Watch");
    p = ccm(proxy.writeKubeconfig(join(dir, "proxied.kubeconfig")), [
      "--controllers=cloud-node",
      "--leader-elect=false",
      "--secure-port=0",
      `--concurrent-node-syncs=${WORKERS}`,
    ]);
    await p.waitForLog(/Starting controller.*cloud-node/);
  });

  afterAll(async () => {
    if (p) expect(await stop(p)).toBe(0);
    await proxy?.stop();
  });

  /** Arms a fault for `windowMs`, runs `during`, waits out the window; returns its start. */
  async function burst(fault: Parameters<ApiProxy["inject"]>[0], during: () => Promise<void>) {
    const since = Date.now();
    proxy.inject(fault);
    await during();
    // Part of the fault: it lasts its whole window whatever the CCM does.
    await Bun.sleep(Math.max(0, since + (fault.forMs ?? 0) - Date.now()));
    return since;
  }

  test("429 with Retry-After: the client waits as told, requests stay bounded, every node initializes after", async () => {
    const T = 4000;
    const specs = nodesFor("burst429", 10, 400);
    const path = /^\/api\/v1\/nodes\/burst429-\d+(\/status)?$/;
    const since = await burst({ method: "PATCH", path, status: 429, retryAfterSeconds: 1, forMs: T }, () =>
      register("burst429", specs),
    );
    const during = proxy.requests({ method: "PATCH", path, since, until: since + T });
    expect(during.length).toBeGreaterThan(0);
    expect(during.every((r) => r.injected)).toBe(true);
    expect(during.length).toBeLessThanOrEqual(bound429(T, WORKERS));
    await waitAllDone("burst429", 10, p, 30_000, false);
    expect(proxy.requests({ method: "PATCH", path, injected: false }).length).toBeGreaterThanOrEqual(10);
    expectAlive(p);
  }, 60_000);

  test("500 without Retry-After: each node backs off exponentially, requests stay bounded, every node initializes after", async () => {
    const T = 3000;
    const specs = nodesFor("burst500", 5, 420);
    const path = /^\/api\/v1\/nodes\/burst500-\d+(\/status)?$/;
    const since = await burst({ method: "PATCH", path, status: 500, forMs: T }, () =>
      register("burst500", specs),
    );
    const during = proxy.requests({ method: "PATCH", path, since, until: since + T });
    expect(during.length).toBeGreaterThan(0);
    for (const s of specs) {
      const mine = during.filter((r) => r.path.startsWith(`/api/v1/nodes/${s.name}`));
      expect({ node: s.name, bounded: mine.length <= bound500PerNode(T) }).toEqual({
        node: s.name,
        bounded: true,
      });
    }
    await waitAllDone("burst500", 5, p, 30_000, false);
    expectAlive(p);
  }, 60_000);

  test("the Node watch ended and every list and watch answered 500: the informer backs off, re-lists, and nodes created meanwhile initialize", async () => {
    const T = 3000;
    const specs = nodesFor("relist", 5, 430);
    const path = /^\/api\/v1\/nodes$/;
    let cut = 0;
    const since = await burst({ method: "GET", path, status: 500, forMs: T }, async () => {
      cut = proxy.cutStreams();
      await register("relist", specs);
    });
    expect(cut).toBeGreaterThan(0);
    const during = proxy.requests({ method: "GET", path, since, until: since + T });
    expect(during.length).toBeGreaterThan(0);
    expect(during.length).toBeLessThanOrEqual(boundInformer(T));
    await waitAllDone("relist", 5, p, 30_000, false);
    expectAlive(p);
  }, 60_000);
});
