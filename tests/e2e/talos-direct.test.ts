// lib/talos.ts with TALOS_MACHINE_ACCESS=auto (lib/talosroute.ts) against fake apids: one endpoint
// (the proxy, every machine behind it) and machines' own apid dialled directly (the fake in machine
// mode; the client's machineEndpoint maps a node IP to it, as <ip>:50000 would be). Calls and
// watches go straight to the machine without a `node` header; a refused path, or a handshake that
// fails, goes to the proxy at once for the machine's window; a machine's own answer is no path
// failure; watches move back once the window has passed; idle direct channels close; `proxy` never
// dials a machine. Through Talos' own apid and the simulator's machines: tests/e2e/flows-sim.test.ts.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { configureLogging } from "../../lib/log.ts";
import { Registry } from "../../lib/metrics.ts";
import { TalosClient, type TalosClientOptions } from "../../lib/talos.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { FIRST_WINDOW_MS, MACHINES_TO_CLOSE } from "../../lib/talosroute.ts";
import { FakeApid } from "../support/apid.ts";
import { freePort, until } from "../support/cluster.ts";
import { generateNodes } from "../support/fixtures.ts";
import { collect, failure } from "../support/talosclient.ts";

const FAST = { initialMs: 10, maxMs: 80 };
/** tests/support/fdprobe.ts: a Talos client under a hard file-descriptor limit. */
const FDPROBE = join(import.meta.dir, "../support/fdprobe.ts");
/** The probe's hard `nofile` limit, and the machines it asks about (more than it can hold open). */
const FD_LIMIT = 64;
const FD_MACHINES = 100;
const [A, B, C] = generateNodes(3, { prefix: "direct" }) as [
  ReturnType<typeof generateNodes>[number],
  ReturnType<typeof generateNodes>[number],
  ReturnType<typeof generateNodes>[number],
];
const ipA = A.nodeIPs[0] as string;
const ipB = B.nodeIPs[0] as string;
const ipC = C.nodeIPs[0] as string;
/** Machines no apid listens for directly (port 1 on loopback refuses): with B, eight in a row. */
const UNREACHABLE = generateNodes(MACHINES_TO_CLOSE - 1, { prefix: "unreachable", start: 3 });

let proxy: FakeApid;
/** Machine A's own apid. */
let machineA: FakeApid;
/** Machine C's own apid, with a server certificate of another CA. */
let machineC: FakeApid;
/** Where machine B's apid will listen; nothing does at first (refused). */
let portB: number;
let dir: string;
const open: TalosClient[] = [];

beforeAll(async () => {
  proxy = await FakeApid.start({ nodes: [A, B, C, ...UNREACHABLE] });
  machineA = await FakeApid.start({ nodes: [A], pki: proxy.pki, machine: true });
  machineC = await FakeApid.start({ nodes: [C], machine: true });
  portB = await freePort();
  dir = mkdtempSync(join(tmpdir(), "talos-direct-"));
});

afterAll(async () => {
  for (const c of open) c.close();
  await Promise.all([proxy.stop(), machineA.stop(), machineC.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

let files = 0;

/** A client with TALOS_MACHINE_ACCESS=auto (unless given) on the proxy's talosconfig, and a clock the test moves. */
async function directClient(opts: Partial<TalosClientOptions> = {}) {
  const path = join(dir, `talosconfig-${files++}`);
  await proxy.writeTalosconfig(path);
  const registry = new Registry();
  const clock = { now: 1_000_000 };
  const ports = new Map([
    [ipA, machineA.port],
    [ipB, portB],
    [ipC, machineC.port],
  ]);
  const client = new TalosClient({
    config: loadTalosConfig({ path, env: {} }),
    registry,
    backoff: FAST,
    watchBackoff: FAST,
    callTimeoutMs: 5_000,
    machineAccess: "auto",
    machineEndpoint: (node) => ({ host: "127.0.0.1", port: ports.get(node) ?? 1 }),
    now: () => clock.now,
    ...opts,
  });
  open.push(client);
  const metric = (name: string) => {
    const m = registry.expose().match(new RegExp(`^${name} (\\d+)$`, "m"));
    return m ? Number(m[1]) : Number.NaN;
  };
  return {
    client,
    clock,
    fallbacks: () => metric("talosccm_talos_direct_fallbacks_total"),
    channels: () => metric("talosccm_talos_direct_channels"),
  };
}

function resetCalls(): void {
  for (const f of [proxy, machineA, machineC]) f.resetCalls();
}

describe("TALOS_MACHINE_ACCESS=auto", () => {
  test("calls about a machine go straight to its apid without a node header; the endpoint sees none", async () => {
    const { client, fallbacks, channels } = await directClient();
    resetCalls();
    expect((await client.platformMetadata(ipA)).hostname).toBe(A.platformMetadata.hostname);
    expect(await client.nodename(ipA)).toBe(A.name);
    expect((await client.addresses(ipA)).length).toBe(A.addresses.length);
    expect(machineA.calls({ node: "" })).toBe(3);
    expect(proxy.calls()).toBe(0);
    expect(fallbacks()).toBe(0);
    expect(channels()).toBe(1);
    // calls to the endpoint itself stay on the endpoint
    await client.version();
    expect(proxy.calls({ method: "Version", node: "" })).toBe(1);
    expect(machineA.calls({ method: "Version" })).toBe(0);
  });

  test("a refused path: asked through the endpoint at once, for the window; then directly again", async () => {
    const { client, clock, fallbacks } = await directClient({ attempts: 1 });
    resetCalls();
    expect(await client.nodename(ipB)).toBe(B.name);
    expect(proxy.calls({ node: ipB })).toBe(1);
    expect(fallbacks()).toBe(1);
    // within the window: no direct try
    expect(await client.nodename(ipB)).toBe(B.name);
    expect(proxy.calls({ node: ipB })).toBe(2);
    expect(fallbacks()).toBe(1);
    // after it, machine B's apid is up: direct again
    const machineB = await FakeApid.start({ nodes: [B], pki: proxy.pki, machine: true, port: portB });
    try {
      clock.now += FIRST_WINDOW_MS;
      expect(await client.nodename(ipB)).toBe(B.name);
      expect(machineB.calls({ node: "" })).toBe(1);
      expect(proxy.calls({ node: ipB })).toBe(2);
      expect(fallbacks()).toBe(1);
    } finally {
      client.close();
      await machineB.stop();
    }
  });

  test("a handshake that fails (a certificate the talosconfig's CA did not sign) is a failed path", async () => {
    const { client, fallbacks } = await directClient({ attempts: 1 });
    resetCalls();
    expect(await client.nodename(ipC)).toBe(C.name);
    expect(machineC.calls()).toBe(0);
    expect(proxy.calls({ node: ipC })).toBe(1);
    expect(fallbacks()).toBe(1);
  });

  test("the machine's own answer is no path failure: its error stands, nothing goes to the endpoint", async () => {
    const { client, fallbacks } = await directClient({ attempts: 1 });
    await client.nodename(ipA); // connected
    resetCalls();
    machineA.failNext("", "Get", GrpcStatus.PERMISSION_DENIED, 1, "not allowed");
    const err = await failure(client.nodename(ipA));
    expect(err.code).toBe("permission-denied");
    machineA.failNext("", "Get", GrpcStatus.UNAVAILABLE, 1, "machined restarting");
    expect((await failure(client.nodename(ipA))).code).toBe("unavailable");
    expect(proxy.calls()).toBe(0);
    expect(fallbacks()).toBe(0);
  });

  test("a watch runs straight to the machine; when the machine's apid goes, it resubscribes through the endpoint", async () => {
    const { client, fallbacks } = await directClient();
    const machineB = await FakeApid.start({ nodes: [B], pki: proxy.pki, machine: true, port: portB });
    await until(() => proxy.watchers(ipB) === 0, "no watch left by an earlier test");
    resetCalls();
    const w = collect(client, ipB, "platformmetadata");
    try {
      await until(() => w.events.length >= 1, "the first event");
      expect(machineB.watchers()).toBe(1);
      expect(proxy.watchers(ipB)).toBe(0);
      await machineB.stop();
      await until(() => proxy.watchers(ipB) === 1, "the watch through the endpoint");
      expect(fallbacks()).toBe(1);
      proxy.updateNode(ipB, { platformMetadata: { zone: "moved" } });
      await until(
        () => w.events.some((e) => e.type === "updated" && e.resource.zone === "moved"),
        "an update",
      );
    } finally {
      await w.stop();
      await machineB.stop();
    }
    expect(w.error).toBeUndefined();
  });

  test("once the window has passed, a sweep moves the watch back to the machine; idle direct channels close", async () => {
    const { client, clock, fallbacks, channels } = await directClient();
    await until(() => proxy.watchers(ipB) === 0, "no watch left by an earlier test");
    resetCalls();
    const w = collect(client, ipB, "platformmetadata");
    let machineB: FakeApid | undefined;
    try {
      await until(
        () => fallbacks() === 1 && proxy.watchers(ipB) === 1,
        "the watch through the endpoint (B refused)",
      );
      machineB = await FakeApid.start({ nodes: [B], pki: proxy.pki, machine: true, port: portB });
      client.sweep(); // within the window: stays
      expect(proxy.watchers(ipB)).toBe(1);
      clock.now += FIRST_WINDOW_MS;
      client.sweep();
      await until(() => machineB?.watchers() === 1 && proxy.watchers(ipB) === 0, "the watch on the machine");
      expect(fallbacks()).toBe(1);
      // a call with no watch: its channel closes after two idle sweeps, the watched one stays
      await client.nodename(ipA);
      expect(channels()).toBe(2);
      client.sweep();
      expect(channels()).toBe(2);
      client.sweep();
      expect(channels()).toBe(1);
      await client.nodename(ipA);
      expect(channels()).toBe(2);
    } finally {
      await w.stop();
      await machineB?.stop();
    }
    expect(w.error).toBeUndefined();
  });

  test("eight machines in a row that cannot be reached close the path for all, unless another is connected: one warning; a reachable machine then goes through the endpoint until the window has passed", async () => {
    const { client, clock, fallbacks } = await directClient({ attempts: 1 });
    const lines: string[] = [];
    const warnings = () =>
      lines.filter((l) => l.includes("Cannot reach Talos machines directly (several in a row)"));
    configureLogging({ write: (line) => lines.push(line) });
    try {
      resetCalls();
      // A connected directly: each failure is that machine's own, the path stays open for A
      expect(await client.nodename(ipA)).toBe(A.name);
      for (const m of [B, ...UNREACHABLE]) expect(await client.nodename(m.nodeIPs[0] as string)).toBe(m.name);
      expect(fallbacks()).toBe(MACHINES_TO_CLOSE);
      expect(warnings()).toHaveLength(0);
      expect(await client.nodename(ipA)).toBe(A.name);
      expect(machineA.calls({ node: "" })).toBe(2);
      expect(proxy.calls({ node: ipA })).toBe(0);

      // A's idle channel closed: nothing is connected directly, and the eight failing again close the path
      client.sweep();
      client.sweep();
      clock.now += FIRST_WINDOW_MS;
      resetCalls();
      for (const m of [B, ...UNREACHABLE]) expect(await client.nodename(m.nodeIPs[0] as string)).toBe(m.name);
      expect(fallbacks()).toBe(2 * MACHINES_TO_CLOSE);
      expect(warnings()).toHaveLength(1);
      // A, whose apid answers directly, is asked through the endpoint: nothing dials it
      expect(await client.nodename(ipA)).toBe(A.name);
      expect(machineA.calls()).toBe(0);
      expect(proxy.calls({ node: ipA })).toBe(1);
      // after the window, A is asked directly again and its answer opens the path for all
      clock.now += FIRST_WINDOW_MS;
      expect(await client.nodename(ipA)).toBe(A.name);
      expect(machineA.calls({ node: "" })).toBe(1);
      expect(proxy.calls({ node: ipA })).toBe(1);
      expect(fallbacks()).toBe(2 * MACHINES_TO_CLOSE);
    } finally {
      configureLogging({ write: (line) => process.stderr.write(line) });
      client.close();
    }
  });

  test("under a hard file-descriptor limit below the machines: the dials beyond it fail (EMFILE) and those machines answer through the endpoint; the path stays open for the rest", async () => {
    const machines = generateNodes(FD_MACHINES, { prefix: "fd", start: 20 });
    const endpoint = await FakeApid.start({ nodes: machines });
    const machine = await FakeApid.start({
      nodes: [machines[0] as (typeof machines)[number]],
      pki: endpoint.pki,
      machine: true,
    });
    try {
      const path = await endpoint.writeTalosconfig(join(dir, "talosconfig-fd"));
      const ips = machines.map((m) => m.nodeIPs[0] as string);
      // Bun raises the soft limit to the hard one: `ulimit -n` sets both. The probe runs beside
      // this process, whose event loop serves both fakes.
      const probe = Bun.spawn(
        [
          "sh",
          "-c",
          `ulimit -n ${FD_LIMIT} && exec "$@"`,
          "sh",
          process.execPath,
          FDPROBE,
          path,
          String(machine.port),
          ...ips,
        ],
        { stdout: "pipe", stderr: "pipe" },
      );
      const [stdout, stderr, status] = await Promise.all([
        new Response(probe.stdout).text(),
        new Response(probe.stderr).text(),
        probe.exited,
      ]);
      const last = stdout.trim().split("\n").at(-1) ?? "";
      if (!last.startsWith("{")) throw new Error(`fdprobe printed no result (status ${status}): ${stderr}`);
      const r = JSON.parse(last) as {
        answered: number;
        failed: string[];
        fallbacks: number;
        directChannels: number;
        closedForAll: boolean;
      };
      expect(r.failed).toEqual([]);
      expect(r.answered).toBe(FD_MACHINES);
      expect(r.directChannels).toBeGreaterThan(0);
      expect(r.directChannels).toBeLessThan(FD_LIMIT);
      expect(r.fallbacks).toBe(FD_MACHINES - r.directChannels);
      expect(machine.calls({ node: "" })).toBe(r.directChannels);
      expect(endpoint.calls({ method: "Get" })).toBe(r.fallbacks);
      expect(r.closedForAll).toBe(false);
    } finally {
      await Promise.all([endpoint.stop(), machine.stop()]);
    }
  });

  test("proxy: no machine is dialled", async () => {
    const { client, fallbacks, channels } = await directClient({ machineAccess: "proxy" });
    resetCalls();
    expect(await client.nodename(ipA)).toBe(A.name);
    expect(machineA.calls()).toBe(0);
    expect(proxy.calls({ node: ipA })).toBe(1);
    expect(fallbacks()).toBe(0);
    expect(channels()).toBe(0);
  });
});
