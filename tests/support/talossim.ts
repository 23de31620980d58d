// The Talos simulator (tests/support/talossim, Go, built from the pinned upstream modules by
// tests/support/testbed-bins.sh, TALOS_SIM): apid in front of simulated machines whose COSI state,
// resource types, access policy and gRPC servers are upstream code. TalosSim starts it on loopback,
// writes talosconfigs and drives its control surface: machines, resources, outages, restarts.
// With `apid` (or TALOS_SIM_APID=1), Talos' own apid (TALOS_APID, built unchanged from the Talos
// module by tests/support/testbed-bins.sh) stands in front of the simulated machines instead of the
// simulated one, as on a control-plane node: the simulator runs it in a network namespace of its
// own, chrooted in the test's temp dir, and serves it what machined serves (this needs root or
// unprivileged user namespaces). There each machine's apid listens on <ip>:50000, as on a cluster: a
// process run in that namespace (netnsCommand) can dial machines directly, reach host addresses
// forwarded in (forwardIntoNetns) and serve addresses exposed on the host (exposeFromNetns); the
// talosconfig's endpoint answers there too.
//
// @example
// const sim = await TalosSim.start();
// await sim.addMachine("10.0.0.5");
// await sim.put("10.0.0.5", { namespace: "k8s", type: "Nodenames.kubernetes.talos.dev", id: "nodename", spec: { nodename: "w1" } });
// ... TalosClient on sim.talosconfig ...
// await sim.stop();

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { stringify } from "yaml";
import { freePort, waitFor } from "./cluster.ts";
import { nsenterCommand } from "./netns.ts";

/** The machine apid runs on: it answers calls without a `node` key. */
export const LOCAL_MACHINE = "127.0.0.1";

/** A resource as the control surface takes it; `spec` is YAML text or an object rendered as YAML. */
export interface SimResource {
  namespace: string;
  type: string;
  id: string;
  spec: string | Record<string, unknown>;
  /** The controller owning it (updates and destroys keep the owner). */
  owner?: string;
}

/** One control call, as {@link TalosSim.batch} and a restart's replay take it. */
export interface ControlCall {
  method: string;
  path: string;
  body: unknown;
}

/** The control calls that add a machine with its resources (for {@link TalosSim.batch}). */
export function machineCalls(
  ip: string,
  opts: { talosVersion?: string; platform?: string },
  resources: readonly SimResource[],
): ControlCall[] {
  const path = `/machines/${encodeURIComponent(ip)}/resources`;
  return [
    { method: "POST", path: "/machines", body: { ip, ...opts } },
    ...resources.map((r) => ({
      method: "PUT",
      path,
      body: { ...r, spec: typeof r.spec === "string" ? r.spec : stringify(r.spec) },
    })),
  ];
}

/** Identifies a resource to destroy. */
export type SimResourceRef = Pick<SimResource, "namespace" | "type" | "id">;

/** Options of {@link TalosSim.start}. */
export interface TalosSimOptions {
  /** grpc-go keepalive enforcement MinTime (default grpc-go's 5 minutes, as apid has it). */
  keepaliveMinTimeMs?: number;
  /** Version tag machines report (default the pinned Talos version). */
  talosVersion?: string;
  /**
   * Talos' own apid (TALOS_APID) in front of the machines (default: TALOS_SIM_APID=1, which
   * tests/run.ts sets for the suites it runs through apid). Differences a test may meet: calls()
   * counts a call when it ends (from apid's log), not when it starts; apid keeps grpc-go's default
   * keepalive policy (no keepaliveMinTimeMs); after startMachine, apid reconnects to the machine with
   * grpc's backoff (about 1 s, up to 15 s).
   */
  apid?: boolean;
}

/** What the simulator keeps of its stderr, apid's log included: the last 256 KiB. */
const STDERR_KEPT = 256 * 1024;

const live = new Set<Subprocess>();
process.once("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

/**
 * The YAML the control surface reads for a spec as Talos prints it. Machinery's YAML does not carry
 * everything back: no address flags print as `flags: ""`, which its AddressFlagsString cannot parse
 * (the line is left out: the zero value), and an address's `local` (a netip.Addr with omitempty,
 * which yaml.v3 never prints) is read when given.
 */
export function controlSpec(printed: string, local?: string): string {
  const yaml = printed.replace(/^flags: ""\n/m, "");
  return local ? `${yaml}local: ${local}\n` : yaml;
}

/** The path of the simulator binary, or an error saying how to get it. */
function simBinary(): string {
  const bin = process.env.TALOS_SIM ?? "";
  if (!bin || !existsSync(bin)) {
    throw new Error(
      `TALOS_SIM not found${bin ? ` (${bin})` : ""}: run the suite with \`npm test\` (tests/support/testbed-bins.sh ` +
        "builds the Talos simulator from tests/support/talossim), or set TALOS_SIM to its binary",
    );
  }
  return bin;
}

/** The path of Talos' apid, or an error saying how to get it. */
function apidBinary(): string {
  const bin = process.env.TALOS_APID ?? "";
  if (!bin || !existsSync(bin)) {
    throw new Error(
      `TALOS_APID not found${bin ? ` (${bin})` : ""}: the simulator was asked to run Talos' apid (TalosSim.start ` +
        "with apid, or TALOS_SIM_APID=1); run the suite with `npm test` (tests/support/testbed-bins.sh builds apid " +
        "from the Talos module), or set TALOS_APID to its binary",
    );
  }
  return bin;
}

/** Whether a process is gone: no such process, or a zombie (its files and ports are released). */
function gone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state === "Z" || state === "X";
  } catch {
    return true;
  }
}

/** A running Talos simulator. */
export class TalosSim {
  /** Temp dir holding the PKI and talosconfigs. */
  readonly dir: string;
  /** talosconfig with role os:reader (what the CCM gets). */
  readonly talosconfig: string;
  /** talosconfig with role os:admin. */
  readonly adminTalosconfig: string;
  readonly grpcPort: number;
  readonly controlPort: number;
  readonly #opts: TalosSimOptions;
  /** Whether Talos' apid is in front of the machines. */
  readonly apid: boolean;
  #proc: Subprocess<"ignore", "pipe", "pipe"> | undefined;
  /** With apid: apid's process and the simulator's process in its network namespace. */
  #pids: { apid: number; sim: number } | undefined;
  #stderr = "";
  /** Control calls that change state, replayed by a restarted simulator before it serves. */
  readonly #journal: ControlCall[] = [];

  private constructor(dir: string, grpcPort: number, controlPort: number, opts: TalosSimOptions) {
    this.dir = dir;
    this.talosconfig = join(dir, "talosconfig");
    this.adminTalosconfig = join(dir, "talosconfig-admin");
    this.grpcPort = grpcPort;
    this.controlPort = controlPort;
    this.#opts = opts;
    this.apid = opts.apid ?? process.env.TALOS_SIM_APID === "1";
  }

  /**
   * Starts the simulator on free loopback ports.
   * @throws naming TALOS_SIM (or TALOS_APID, with apid) when the binary is missing
   */
  static async start(opts: TalosSimOptions = {}): Promise<TalosSim> {
    simBinary();
    if (opts.apid ?? process.env.TALOS_SIM_APID === "1") apidBinary();
    const sim = new TalosSim(
      mkdtempSync(join(tmpdir(), "talossim-")),
      await freePort(),
      await freePort(),
      opts,
    );
    await sim.#spawn();
    return sim;
  }

  /** apid's endpoint, `127.0.0.1:port`. */
  get endpoint(): string {
    return `127.0.0.1:${this.grpcPort}`;
  }

  /** What the simulator wrote on stderr so far (the last 256 KiB), apid's log included. */
  get stderr(): string {
    return this.#stderr;
  }

  /** The pid of Talos' apid (with apid), e.g. to read its memory from /proc. */
  get apidPid(): number | undefined {
    return this.#pids?.apid;
  }

  /** The pid of the simulator's process serving the machines (with apid), e.g. to read its CPU time. */
  get simPid(): number | undefined {
    return this.#pids?.sim;
  }

  /**
   * The simulator's network namespace (with apid): `/proc/<pid>/ns/net` of its process there. A
   * restart makes a new namespace (and this path changes): a process still in the old one keeps it
   * alive, without the simulator, its machines or its forwards.
   * @throws without apid (the simulator then runs in the host's namespace), or when it is not running
   */
  get netns(): string {
    this.#needsNetns("netns");
    if (!this.#pids) throw new Error("TalosSim.netns: the simulator is not running");
    return `/proc/${this.#pids.sim}/ns/net`;
  }

  /** @throws naming `what` and why, without apid */
  #needsNetns(what: string): void {
    if (!this.apid)
      throw new Error(
        `TalosSim.${what}: the simulator has a network namespace of its own only with Talos' apid ` +
          "(TalosSim.start({ apid: true }) or TALOS_SIM_APID=1); without it, it runs in the host's",
      );
  }

  /**
   * `argv` run in the simulator's network namespace (with apid): prefixed with nsenter (through the
   * simulator's user namespace when it has one, i.e. without root; tests/support/netns.ts). There
   * every machine's apid answers at `<ip>:50000` (mutual TLS on the simulator's CA; the talosconfigs
   * it writes are accepted), the talosconfig's endpoint reaches Talos' apid, and the addresses
   * forwarded in answer.
   * @throws as {@link TalosSim.netns}, or when nsenter is not on PATH
   */
  netnsCommand(argv: readonly string[]): string[] {
    return nsenterCommand(this.netns, argv);
  }

  /**
   * Makes the host's `addr` (`IP:port`, e.g. an API server's `127.0.0.1:6443`) answer at the same
   * address in the simulator's namespace: the simulator listens there and relays each connection to
   * `addr` on the host. It lasts until the simulator stops; a restart forwards it again.
   * @throws without apid, or when `addr` is taken in the namespace (409)
   */
  async forwardIntoNetns(addr: string): Promise<void> {
    this.#needsNetns("forwardIntoNetns");
    await this.#change("POST", "/netns/forwards", { addr });
  }

  /**
   * Makes `addr` (`IP:port`) of the simulator's namespace, e.g. where a process run there with
   * {@link TalosSim.netnsCommand} serves, answer at the same address on the host: the simulator
   * listens on the host and relays each connection into the namespace (a connection made before
   * anything listens there is accepted, then closed). It lasts until the simulator stops; a restart
   * exposes it again.
   * @throws without apid, or when `addr` is taken on the host (409)
   */
  async exposeFromNetns(addr: string): Promise<void> {
    this.#needsNetns("exposeFromNetns");
    await this.#change("POST", "/netns/exposes", { addr });
  }

  async #spawn(replay?: string): Promise<void> {
    const args = [
      simBinary(),
      `--listen=127.0.0.1:${this.grpcPort}`,
      `--control=127.0.0.1:${this.controlPort}`,
      `--pki-dir=${join(this.dir, "pki")}`,
      `--talosconfig=${this.talosconfig}`,
      `--admin-talosconfig=${this.adminTalosconfig}`,
    ];
    if (this.#opts.keepaliveMinTimeMs !== undefined)
      args.push(`--keepalive-min-time=${this.#opts.keepaliveMinTimeMs}ms`);
    if (this.#opts.talosVersion) args.push(`--talos-version=${this.#opts.talosVersion}`);
    if (replay) args.push(`--replay=${replay}`);
    if (this.apid) args.push(`--apid=${apidBinary()}`, `--apid-root=${join(this.dir, "apid-root")}`);
    const proc = spawn(args, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    this.#proc = proc;
    live.add(proc);
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of proc.stderr) {
        this.#stderr += dec.decode(chunk, { stream: true });
        if (this.#stderr.length > 2 * STDERR_KEPT) this.#stderr = this.#stderr.slice(-STDERR_KEPT);
      }
    })();
    const reader = proc.stdout.getReader();
    let out = "";
    const deadline = Date.now() + 20_000;
    while (!out.includes("\n")) {
      const next = await Promise.race([
        reader.read(),
        Bun.sleep(deadline - Date.now()).then(() => undefined),
      ]);
      if (!next || next.done) {
        proc.kill("SIGKILL");
        throw new Error(`talossim did not start (${args.join(" ")}):\n${this.#stderr}`);
      }
      out += new TextDecoder().decode(next.value);
    }
    reader.releaseLock();
    const addrs = JSON.parse(out.slice(0, out.indexOf("\n"))) as {
      grpc: string;
      control: string;
      apidPid?: number;
      simPid?: number;
    };
    if (addrs.grpc !== this.endpoint)
      throw new Error(`talossim listens on ${addrs.grpc}, not ${this.endpoint}`);
    if (this.apid) {
      if (addrs.apidPid === undefined || addrs.simPid === undefined)
        throw new Error(`talossim was asked for Talos' apid and did not start it (${args.join(" ")})`);
      this.#pids = { apid: addrs.apidPid, sim: addrs.simPid };
    }
  }

  async #call(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const res = await fetch(`http://127.0.0.1:${this.controlPort}${path}`, {
      method,
      ...(body === undefined
        ? {}
        : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
    });
    const out = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`talossim ${method} ${path}: ${res.status} ${String(out.error)}`);
    return out;
  }

  async #change(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const out = await this.#call(method, path, body);
    this.#journal.push({ method, path, body });
    return out;
  }

  /** Adds a machine reachable as `node: ip`. */
  async addMachine(ip: string, opts: { talosVersion?: string; platform?: string } = {}): Promise<void> {
    await this.#change("POST", "/machines", { ip, ...opts });
  }

  /** Removes a machine: its open watches end as for a machine that went down. */
  async removeMachine(ip: string): Promise<void> {
    await this.#change("DELETE", `/machines/${encodeURIComponent(ip)}`);
  }

  /** Takes a machine down: calls routed to it fail as apid fails for an unreachable node; open watches end. */
  async stopMachine(ip: string): Promise<void> {
    await this.#change("POST", `/machines/${encodeURIComponent(ip)}/stop`);
  }

  /** Brings a stopped machine back with its resources. */
  async startMachine(ip: string): Promise<void> {
    await this.#change("POST", `/machines/${encodeURIComponent(ip)}/start`);
  }

  /** Creates or updates a resource on a machine; returns its new version. */
  async put(ip: string, r: SimResource): Promise<string> {
    const spec = typeof r.spec === "string" ? r.spec : stringify(r.spec);
    const out = await this.#change("PUT", `/machines/${encodeURIComponent(ip)}/resources`, { ...r, spec });
    return String(out.version);
  }

  /** Destroys a resource; `teardown` first moves it to phase tearingDown (an extra update event). */
  async destroy(ip: string, r: SimResourceRef, opts: { teardown?: boolean } = {}): Promise<void> {
    await this.#change("DELETE", `/machines/${encodeURIComponent(ip)}/resources`, {
      namespace: r.namespace,
      type: r.type,
      id: r.id,
      ...(opts.teardown ? { teardown: true } : {}),
    });
  }

  /**
   * Applies control calls in one request, in order (bulk seeding: thousands of machines in seconds);
   * `calls` are what {@link TalosSim.addMachine} and {@link TalosSim.put} send, e.g. from
   * {@link machineCalls}. A restart replays them like the others.
   */
  async batch(calls: readonly ControlCall[]): Promise<void> {
    await this.#call("POST", "/batch", calls);
    this.#journal.push(...calls);
  }

  /** Writes a talosconfig for this simulator whose client certificate has `roles` (Subject O). */
  async writeTalosconfig(path: string, roles: string[], hours?: number): Promise<string> {
    await this.#call("POST", "/talosconfig", { path, roles, ...(hours === undefined ? {} : { hours }) });
    return path;
  }

  /**
   * gRPC calls received, by full method name, refused ones included. With apid they are counted from
   * apid's log, which reports a call when it ends: a watch still open is not counted yet.
   */
  async calls(): Promise<Record<string, number>> {
    return (await this.#call("GET", "/calls")) as Record<string, number>;
  }

  /**
   * With apid: the calls apid passed on to a machine (its apid, or machined for the local one), by
   * full method name, counted when they start as the simulated apid counts them: a watch open now is
   * counted; a call apid refused or could not route is not.
   */
  async machineCalls(): Promise<Record<string, number>> {
    return (await this.#call("GET", "/calls?at=machines")) as Record<string, number>;
  }

  /**
   * Kills the simulator and starts it again on the same ports with the same certificates; it
   * replays every machine and resource change before it serves (versions come out as before), so
   * clients see what they see when apid restarts: connections and watches break, state stays.
   */
  async restart(): Promise<void> {
    await this.#kill();
    const journal = join(this.dir, "journal.json");
    writeFileSync(journal, JSON.stringify(this.#journal));
    await this.#spawn(journal);
  }

  async #kill(): Promise<void> {
    const proc = this.#proc;
    if (!proc) return;
    this.#proc = undefined;
    proc.kill("SIGKILL");
    await proc.exited;
    live.delete(proc);
    // The simulator in the namespace and apid die with it (Pdeathsig); a restart binds the same
    // ports, so wait until they are gone.
    const pids = this.#pids;
    this.#pids = undefined;
    if (pids)
      await waitFor(
        () => gone(pids.sim) && gone(pids.apid),
        10_000,
        () => `talossim's processes ${pids.sim} and ${pids.apid} outlived it`,
        10,
      );
  }

  /** Stops the simulator and removes its files. */
  async stop(): Promise<void> {
    await this.#kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
