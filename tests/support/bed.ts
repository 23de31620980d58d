// The set-up most end-to-end tests of the CCM share: a TestCluster, the Talos side (the fake apid,
// ApidBed, or the Talos simulator, SimBed), a temporary folder holding the talosconfig and the cloud
// config, a free port for the CCM's secure serving, the kubelets the test registers and the CCM it
// starts. `stop()` ends them all, in that order: the CCM, the kubelets, the Talos side, the cluster,
// then the folder.
//
// @example
// let bed: ApidBed;
// beforeAll(async () => {
//   bed = await ApidBed.start("cloud-node-e2e-", { apid: { nodes: [spec] } });
//   const cloudConfig = bed.writeCloudConfig(RULES);
//   await bed.startCcm({ controllers: "cloud-node", cloudConfig }, /Starting controller.*cloud-node/);
//   await bed.register({ name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0 });
// });
// afterAll(() => bed?.stop());

import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { FakeApid, type FakeApidOptions, type TalosconfigOptions } from "./apid.ts";
import { type ClusterOptions, type EventV1, freePort, TestCluster, waitFor } from "./cluster.ts";
import { type KubeletOptions, SimulatedKubelet, UNINITIALIZED_TAINT } from "./kubelet.ts";
import { type CcmProcess, type CcmSetup, startCcm } from "./process.ts";
import { TalosSim } from "./talossim.ts";

/** What {@link ApidBed.start} starts. */
export interface ApidBedOptions {
  cluster?: ClusterOptions;
  apid?: FakeApidOptions;
  /** Options of the talosconfig written for the CCM. */
  talosconfig?: TalosconfigOptions;
}

/** The Talos side of a bed. */
interface TalosSide {
  stop(): Promise<void>;
}

/** What a bed is made of once started. */
interface Parts<T extends TalosSide> {
  cluster: TestCluster;
  talos: T;
  dir: string;
  talosconfig: string;
  port: number;
}

/**
 * Starts the cluster and the Talos side by side in a new folder named after `prefix`, then gets the
 * talosconfig from `talosconfigOf`. What started is stopped again when anything fails.
 */
async function startParts<T extends TalosSide>(
  prefix: string,
  cluster: ClusterOptions | undefined,
  talos: () => Promise<T>,
  talosconfigOf: (talos: T, dir: string) => Promise<string>,
): Promise<Parts<T>> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const [c, t] = await Promise.allSettled([TestCluster.start(cluster), talos()]);
  try {
    if (c.status === "rejected") throw c.reason;
    if (t.status === "rejected") throw t.reason;
    const talosconfig = await talosconfigOf(t.value, dir);
    return { cluster: c.value, talos: t.value, dir, talosconfig, port: await freePort() };
  } catch (err) {
    if (t.status === "fulfilled") await t.value.stop();
    if (c.status === "fulfilled") await c.value.stop();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** How {@link ApidBed.startCcm} runs the CCM: {@link CcmSetup} with the bed's defaults. */
export interface BedCcmSetup extends Partial<CcmSetup> {
  /** No Talos API access: no TALOSCONFIG (default: the bed's talosconfig). */
  withoutTalos?: boolean;
}

/** The Node has the uninitialized taint. */
export const tainted = (n: V1Node): boolean =>
  (n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);

/** An end-to-end test's cluster, Talos side, folder and CCM; see the file's header. */
class CcmBed<T extends TalosSide> {
  readonly cluster: TestCluster;
  readonly talos: T;
  readonly dir: string;
  /** The talosconfig of the Talos side. */
  readonly talosconfig: string;
  /** The CCM's `--secure-port` unless its set-up says otherwise. */
  readonly port: number;
  /** The kubelets {@link register} started; stop() closes them. */
  readonly kubelets: SimulatedKubelet[] = [];
  /** The CCM {@link startCcm} started last; stop() kills it. */
  ccm: CcmProcess | undefined;

  protected constructor(parts: Parts<T>) {
    this.cluster = parts.cluster;
    this.talos = parts.talos;
    this.dir = parts.dir;
    this.talosconfig = parts.talosconfig;
    this.port = parts.port;
  }

  /**
   * Writes the cloud config (atomically, as a ConfigMap update lands) and returns its path, always
   * the same: a CCM started with it reloads what is written later.
   */
  writeCloudConfig(text: string): string {
    const path = join(this.dir, "ccm-config.yaml");
    writeFileSync(`${path}.tmp`, text);
    renameSync(`${path}.tmp`, path);
    return path;
  }

  /**
   * Starts the CCM of `setup`, by default with the admin kubeconfig, the bed's talosconfig and
   * secure serving on {@link port}; resolves once it has logged each of `ready`, in order.
   */
  async startCcm(setup: BedCcmSetup, ...ready: RegExp[]): Promise<CcmProcess> {
    const { withoutTalos, ...rest } = setup;
    const full: CcmSetup = {
      kubeconfig: this.cluster.adminKubeconfig,
      ...(withoutTalos ? {} : { talosconfig: this.talosconfig }),
      securePort: this.port,
      ...rest,
    };
    this.ccm = await startCcm(full, ...ready);
    return this.ccm;
  }

  /** Registers a simulated kubelet's Node (see {@link SimulatedKubelet.register}); stop() closes it. */
  async register(opts: KubeletOptions): Promise<SimulatedKubelet> {
    const k = await SimulatedKubelet.register(this.cluster, opts);
    this.kubelets.push(k);
    return k;
  }

  /** The CCM's /metrics, from its secure port (the set-up must allow the path). */
  async metrics(): Promise<string> {
    const res = await fetch(`https://127.0.0.1:${this.port}/metrics`, { tls: { rejectUnauthorized: false } });
    return res.text();
  }

  getNode(name: string): Promise<V1Node> {
    return this.cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`);
  }

  /** Waits until Node `name` has lost the uninitialized taint and returns it. */
  async initialized(name: string, timeoutMs = 30_000): Promise<V1Node> {
    let node: V1Node | undefined;
    await waitFor(
      async () => {
        node = await this.getNode(name);
        return !tainted(node);
      },
      timeoutMs,
      () => `node ${name} still tainted:\n${this.ccm?.output.slice(-3000)}`,
    );
    return node as V1Node;
  }

  /** Waits until none of the Nodes `names` has the uninitialized taint (checked every 200 ms). */
  async allInitialized(names: string[], timeoutMs = 30_000): Promise<void> {
    let pending: string[] = [];
    await waitFor(
      async () => {
        const nodes = await Promise.all(names.map((n) => this.getNode(n)));
        pending = nodes.filter(tainted).map((n) => n.metadata?.name ?? "");
        return pending.length === 0;
      },
      timeoutMs,
      () => `still tainted: ${pending.join(", ")}\n${this.ccm?.output.slice(-3000)}`,
      200,
    );
  }

  /** Waits for an Event of `reason` about `name` and returns it. */
  async eventOf(name: string, reason: string, timeoutMs = 10_000): Promise<EventV1> {
    let found: EventV1 | undefined;
    await waitFor(
      async () => {
        found = (await this.cluster.eventsAbout(name)).find((e) => e.reason === reason);
        return found !== undefined;
      },
      timeoutMs,
      () => `no ${reason} Event on ${name}:\n${this.ccm?.output.slice(-3000)}`,
    );
    return found as EventV1;
  }

  /** Stops the CCM (SIGKILL), the kubelets, the Talos side and the cluster, and removes the folder. */
  async stop(): Promise<void> {
    await this.ccm?.stop("SIGKILL");
    for (const k of this.kubelets) k.close();
    await this.talos.stop();
    await this.cluster.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A bed whose Talos side is the fake apid (for fault injection), its talosconfig in the folder. */
export class ApidBed extends CcmBed<FakeApid> {
  get apid(): FakeApid {
    return this.talos;
  }

  /** Starts the cluster and an apid with `opts` side by side, and writes the apid's talosconfig. */
  static async start(prefix: string, opts: ApidBedOptions = {}): Promise<ApidBed> {
    const parts = await startParts(
      prefix,
      opts.cluster,
      () => FakeApid.start(opts.apid),
      (apid, dir) => apid.writeTalosconfig(join(dir, "talosconfig"), opts.talosconfig),
    );
    return new ApidBed(parts);
  }
}

/** A bed whose Talos side is the Talos simulator, with its own talosconfig. */
export class SimBed extends CcmBed<TalosSim> {
  get sim(): TalosSim {
    return this.talos;
  }

  /** Starts the cluster and the simulator side by side. */
  static async start(prefix: string, opts: { cluster?: ClusterOptions } = {}): Promise<SimBed> {
    const parts = await startParts(
      prefix,
      opts.cluster,
      () => TalosSim.start(),
      async (sim) => sim.talosconfig,
    );
    return new SimBed(parts);
  }
}
