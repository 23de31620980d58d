// The Talos simulator (tests/support/talossim, Go, built from the pinned upstream modules by
// tests/support/testbed-bins.sh, TALOS_SIM): apid in front of simulated machines whose COSI state,
// resource types, access policy and gRPC servers are upstream code. TalosSim starts it on loopback,
// writes talosconfigs and drives its control surface: machines, resources, outages, restarts.
//
// @example
// const sim = await TalosSim.start();
// await sim.addMachine("10.0.0.5");
// await sim.put("10.0.0.5", { namespace: "k8s", type: "Nodenames.kubernetes.talos.dev", id: "nodename", spec: { nodename: "w1" } });
// ... TalosClient on sim.talosconfig ...
// await sim.stop();

import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { stringify } from "yaml";
import { freePort } from "./cluster.ts";

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

/** Identifies a resource to destroy. */
export type SimResourceRef = Pick<SimResource, "namespace" | "type" | "id">;

/** Options of {@link TalosSim.start}. */
export interface TalosSimOptions {
  /** grpc-go keepalive enforcement MinTime (default grpc-go's 5 minutes, as apid has it). */
  keepaliveMinTimeMs?: number;
  /** Version tag machines report (default the pinned Talos version). */
  talosVersion?: string;
}

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
  #proc: Subprocess<"ignore", "pipe", "pipe"> | undefined;
  #stderr = "";
  /** Control calls that change state, replayed by a restarted simulator before it serves. */
  readonly #journal: Array<{ method: string; path: string; body: unknown }> = [];

  private constructor(dir: string, grpcPort: number, controlPort: number, opts: TalosSimOptions) {
    this.dir = dir;
    this.talosconfig = join(dir, "talosconfig");
    this.adminTalosconfig = join(dir, "talosconfig-admin");
    this.grpcPort = grpcPort;
    this.controlPort = controlPort;
    this.#opts = opts;
  }

  /** Starts the simulator on free loopback ports. @throws naming TALOS_SIM when the binary is missing */
  static async start(opts: TalosSimOptions = {}): Promise<TalosSim> {
    simBinary();
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

  /** What the simulator wrote on stderr so far. */
  get stderr(): string {
    return this.#stderr;
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
    const proc = spawn(args, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    this.#proc = proc;
    live.add(proc);
    void (async () => {
      for await (const chunk of proc.stderr) this.#stderr += new TextDecoder().decode(chunk);
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
    const addrs = JSON.parse(out.slice(0, out.indexOf("\n"))) as { grpc: string; control: string };
    if (addrs.grpc !== this.endpoint)
      throw new Error(`talossim listens on ${addrs.grpc}, not ${this.endpoint}`);
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

  /** Writes a talosconfig for this simulator whose client certificate has `roles` (Subject O). */
  async writeTalosconfig(path: string, roles: string[], hours?: number): Promise<string> {
    await this.#call("POST", "/talosconfig", { path, roles, ...(hours === undefined ? {} : { hours }) });
    return path;
  }

  /** gRPC calls received, by full method name. */
  async calls(): Promise<Record<string, number>> {
    return (await this.#call("GET", "/calls")) as Record<string, number>;
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
  }

  /** Stops the simulator and removes its files. */
  async stop(): Promise<void> {
    await this.#kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
