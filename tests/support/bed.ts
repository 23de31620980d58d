// The set-up most end-to-end tests of the CCM against the fake apid share: a TestCluster, a
// FakeApid, a temporary folder holding the apid's talosconfig and the cloud config, a free port for
// the CCM's secure serving, the kubelets the test registers and the CCM it starts. `stop()` ends
// them all, in that order: the CCM, the kubelets, the apid, the cluster, then the folder.
//
// @example
// let bed: ApidBed;
// beforeAll(async () => {
//   bed = await ApidBed.start("cloud-node-e2e-", { apid: { nodes: [spec] } });
//   bed.writeCloudConfig(RULES);
//   await bed.startCcm({ controllers: "cloud-node" }, /Starting controller.*cloud-node/);
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

/** What {@link ApidBed.start} starts. */
export interface ApidBedOptions {
  cluster?: ClusterOptions;
  apid?: FakeApidOptions;
  /** Options of the talosconfig written for the CCM. */
  talosconfig?: TalosconfigOptions;
}

/** How {@link ApidBed.startCcm} runs the CCM: {@link CcmSetup} with the bed's defaults. */
export interface BedCcmSetup extends Partial<CcmSetup> {
  /** No Talos API access: no TALOSCONFIG (default: the bed's talosconfig). */
  withoutTalos?: boolean;
}

/** The Node has the uninitialized taint. */
export const tainted = (n: V1Node): boolean =>
  (n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);

/** An end-to-end test's cluster, fake apid, folder and CCM; see the file's header. */
export class ApidBed {
  readonly cluster: TestCluster;
  readonly apid: FakeApid;
  readonly dir: string;
  /** The talosconfig of the apid, in {@link dir}. */
  readonly talosconfig: string;
  /** The CCM's `--secure-port` unless its set-up says otherwise. */
  readonly port: number;
  /** The cloud config once {@link writeCloudConfig} wrote it. */
  cloudConfig: string | undefined;
  /** The kubelets {@link register} started; stop() closes them. */
  readonly kubelets: SimulatedKubelet[] = [];
  /** The CCM {@link startCcm} started last; stop() kills it. */
  ccm: CcmProcess | undefined;

  private constructor(cluster: TestCluster, apid: FakeApid, dir: string, talosconfig: string, port: number) {
    this.cluster = cluster;
    this.apid = apid;
    this.dir = dir;
    this.talosconfig = talosconfig;
    this.port = port;
  }

  /**
   * Starts the cluster and the apid side by side in a new folder named after `prefix`, and writes
   * the talosconfig. What started is stopped again when anything fails.
   */
  static async start(prefix: string, opts: ApidBedOptions = {}): Promise<ApidBed> {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    const [cluster, apid] = await Promise.allSettled([
      TestCluster.start(opts.cluster),
      FakeApid.start(opts.apid),
    ]);
    try {
      if (cluster.status === "rejected") throw cluster.reason;
      if (apid.status === "rejected") throw apid.reason;
      const talosconfig = await apid.value.writeTalosconfig(join(dir, "talosconfig"), opts.talosconfig);
      return new ApidBed(cluster.value, apid.value, dir, talosconfig, await freePort());
    } catch (err) {
      if (apid.status === "fulfilled") await apid.value.stop();
      if (cluster.status === "fulfilled") await cluster.value.stop();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** Writes the cloud config (atomically, as a ConfigMap update lands) and returns its path. */
  writeCloudConfig(text: string): string {
    const path = join(this.dir, "ccm-config.yaml");
    writeFileSync(`${path}.tmp`, text);
    renameSync(`${path}.tmp`, path);
    this.cloudConfig = path;
    return path;
  }

  /**
   * Starts the CCM of `setup`, by default with the admin kubeconfig, the bed's talosconfig, its
   * cloud config once written, and secure serving on {@link port}; resolves once it has logged each
   * of `ready`, in order.
   */
  async startCcm(setup: BedCcmSetup, ...ready: RegExp[]): Promise<CcmProcess> {
    const { withoutTalos, ...rest } = setup;
    const full: CcmSetup = {
      kubeconfig: this.cluster.adminKubeconfig,
      ...(withoutTalos ? {} : { talosconfig: this.talosconfig }),
      ...(this.cloudConfig === undefined ? {} : { cloudConfig: this.cloudConfig }),
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

  /** Stops the CCM (SIGKILL), the kubelets, the apid and the cluster, and removes the folder. */
  async stop(): Promise<void> {
    await this.ccm?.stop("SIGKILL");
    for (const k of this.kubelets) k.close();
    await this.apid.stop();
    await this.cluster.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
