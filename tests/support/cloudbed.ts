// The set-up of the "beside your cloud's CCM" tests (tests/e2e/beside-*.test.ts): one real API
// server (with the test's audit policy), the Talos simulator for the machines, a fake of the
// cloud's API, the cloud's own CCM (tests/support/cloudccm.ts) running as the service account its
// release manifest binds, this CCM as user talos-ccm, and the simulated kubelets. What both tests
// read: the Nodes as they become what a test waits for, a kubelet going NotReady, who deleted a
// Node according to the audit log. `stop()` ends everything.
//
// @example
// const bed = await CloudBed.start("oxide", { prefix: "beside-oxide-e2e-", auditPolicy, serviceAccount: "oxide-cloud-controller-manager", fake: FakeOxide.start({ token, project }) });

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { PATCH } from "../../lib/kubeapi.ts";
import { tainted } from "./bed.ts";
import { type Cloud, cloudCcmBinary, cloudCcmRbac } from "./cloudccm.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "./cluster.ts";
import type { FakeNodeSpec } from "./fixtures.ts";
import { nodeView, SimulatedKubelet } from "./kubelet.ts";
import { CcmProcess, type CcmSetup, startCcm } from "./process.ts";
import { TalosSim } from "./talossim.ts";

/** This CCM's user in the beside tests (in system:masters): the audit log tells its writes apart. */
export const TALOS_USER = "talos-ccm";

/** A cloud API fake: what the bed needs of it. */
export interface CloudFake {
  /** The fake's CA certificate (PEM), the only root the cloud's CCM trusts. */
  readonly caCert: string;
  stop(): Promise<void>;
}

/** What {@link CloudBed.start} starts. */
export interface CloudBedOptions<F extends CloudFake> {
  /** The temporary folder's name prefix. */
  prefix: string;
  /** The API server's audit policy (YAML). */
  auditPolicy: string;
  /** The cloud CCM's service account in kube-system, as its release manifest names it. */
  serviceAccount: string;
  /** The cloud API fake, starting (it starts beside the cluster and the simulator). */
  fake: Promise<F>;
  /** What a failed wait shows besides the Node: the CCMs' output, the fake's last requests. */
  context: () => string;
}

/** How {@link CloudBed.startCloudCcm} runs the cloud's CCM. */
export interface CloudCcmRun {
  /** Flags right after `--kubeconfig` (the cloud provider's), before the common ones. */
  provider: string[];
  /** Flags after the common ones (`--leader-elect=false --secure-port=0`). */
  args: string[];
  /** The controllers whose `Started "<name>"` line to wait for, in order. */
  started: string[];
  /** The environment (credentials, endpoint); SSL_CERT_FILE is the fake's CA. */
  env: Record<string, string>;
}

/** The cluster, simulator, cloud fake and CCMs of a beside test; see the file's header. */
export class CloudBed<F extends CloudFake> {
  readonly cloud: Cloud;
  readonly cluster: TestCluster;
  readonly sim: TalosSim;
  readonly fake: F;
  readonly dir: string;
  /** This CCM's kubeconfig (user {@link TALOS_USER}). */
  readonly talosKubeconfig: string;
  /** The cloud CCM's kubeconfig (its service account). */
  readonly cloudKubeconfig: string;
  /** This CCM's `--secure-port` for /metrics, when a test serves it. */
  readonly metricsPort: number;
  readonly kubelets = new Map<string, SimulatedKubelet>();
  /** Every cloud CCM process started, in order (their output, and stop()). */
  readonly cloudCcms: CcmProcess[] = [];
  /** This CCM as {@link startTalosCcm} started it last. */
  talosCcm: CcmProcess | undefined;
  readonly #context: () => string;

  private constructor(init: {
    cloud: Cloud;
    cluster: TestCluster;
    sim: TalosSim;
    fake: F;
    dir: string;
    talosKubeconfig: string;
    cloudKubeconfig: string;
    metricsPort: number;
    context: () => string;
  }) {
    this.cloud = init.cloud;
    this.cluster = init.cluster;
    this.sim = init.sim;
    this.fake = init.fake;
    this.dir = init.dir;
    this.talosKubeconfig = init.talosKubeconfig;
    this.cloudKubeconfig = init.cloudKubeconfig;
    this.metricsPort = init.metricsPort;
    this.#context = init.context;
  }

  /**
   * Starts the cluster, the simulator and the fake side by side, gives the cloud's CCM its release
   * RBAC and a kubeconfig of its service account, and writes this CCM's kubeconfig. What started is
   * stopped again when anything fails.
   */
  static async start<F extends CloudFake>(cloud: Cloud, opts: CloudBedOptions<F>): Promise<CloudBed<F>> {
    cloudCcmBinary(cloud);
    const dir = mkdtempSync(join(tmpdir(), opts.prefix));
    const [cluster, sim, fake] = await Promise.allSettled([
      TestCluster.start({ auditPolicy: opts.auditPolicy }),
      TalosSim.start(),
      opts.fake,
    ]);
    try {
      if (cluster.status === "rejected") throw cluster.reason;
      if (sim.status === "rejected") throw sim.reason;
      if (fake.status === "rejected") throw fake.reason;
      const c = cluster.value;
      await c.apply(await cloudCcmRbac(cloud));
      const cloudKubeconfig = writeKubeconfig(
        join(dir, `${cloud}-ccm.kubeconfig`),
        await c.serviceAccountConnection("kube-system", opts.serviceAccount),
      );
      const talosKubeconfig = writeKubeconfig(
        join(dir, "talos-ccm.kubeconfig"),
        await c.userConnection(TALOS_USER, ["system:masters"]),
      );
      return new CloudBed({
        cloud,
        cluster: c,
        sim: sim.value,
        fake: fake.value,
        dir,
        talosKubeconfig,
        cloudKubeconfig,
        metricsPort: await freePort(),
        context: opts.context,
      });
    } catch (err) {
      if (fake.status === "fulfilled") await fake.value.stop();
      if (sim.status === "fulfilled") await sim.value.stop();
      if (cluster.status === "fulfilled") await cluster.value.stop();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** This CCM with `setup` (default: its kubeconfig and the simulator's talosconfig). */
  async startTalosCcm(setup: Partial<CcmSetup>, ...ready: RegExp[]): Promise<CcmProcess> {
    this.talosCcm = await startCcm(
      { kubeconfig: this.talosKubeconfig, talosconfig: this.sim.talosconfig, ...setup },
      ...ready,
    );
    return this.talosCcm;
  }

  /**
   * The cloud's CCM as its service account, trusting only the fake's CA, without leader election
   * or serving unless `run.args` says otherwise; resolves once it logged each of `run.started`.
   */
  async startCloudCcm(run: CloudCcmRun): Promise<CcmProcess> {
    const caFile = join(this.dir, `fake-${this.cloud}-ca.pem`);
    writeFileSync(caFile, this.fake.caCert);
    const p = new CcmProcess(
      [
        `--kubeconfig=${this.cloudKubeconfig}`,
        ...run.provider,
        "--leader-elect=false",
        "--secure-port=0",
        ...run.args,
      ],
      {
        binary: cloudCcmBinary(this.cloud),
        // Go's crypto/x509 reads the roots from SSL_CERT_FILE: the fake's CA, nothing else.
        env: { ...run.env, SSL_CERT_FILE: caFile },
      },
    );
    this.cloudCcms.push(p);
    for (const c of run.started) await p.waitForLog(new RegExp(`Started "${c}"`), 20_000);
    return p;
  }

  /** Registers machine `m`'s kubelet (its first status in the create, as a real kubelet). */
  async register(m: FakeNodeSpec, systemUUID: string): Promise<SimulatedKubelet> {
    const k = await SimulatedKubelet.register(this.cluster, {
      name: m.name,
      ips: m.nodeIPs,
      heartbeatMs: 0,
      statusOnCreate: true,
      systemUUID,
    });
    this.kubelets.set(m.name, k);
    return k;
  }

  /** This CCM's /metrics (served on {@link metricsPort}, the set-up allowing the path). */
  async metrics(): Promise<string> {
    const res = await fetch(`https://127.0.0.1:${this.metricsPort}/metrics`, {
      tls: { rejectUnauthorized: false },
    });
    return res.text();
  }

  getNode(name: string): Promise<V1Node> {
    return this.cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`);
  }

  /** Waits until Node `name` satisfies `pred` (`what` names the wait in the failure) and returns it. */
  async nodeWhen(name: string, what: string, pred: (n: V1Node) => boolean, ms = 20_000): Promise<V1Node> {
    let node: V1Node | undefined;
    await waitFor(
      async () => {
        node = await this.getNode(name);
        return pred(node);
      },
      ms,
      () => `node ${name}: ${what}; it is ${JSON.stringify(node && nodeView(node))}\n${this.#context()}`,
    );
    return node as V1Node;
  }

  /**
   * Posts Ready=False as the node's kubelet (conditions only: a strategic merge of the kubelet's own
   * address list onto the one a CCM wrote would duplicate entries by type and be refused).
   */
  async goNotReady(m: FakeNodeSpec): Promise<void> {
    const k = this.kubelets.get(m.name) as SimulatedKubelet;
    const t = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const ready = { type: "Ready", status: "False", reason: "KubeletNotReady", message: "simulated outage" };
    await k.client.patch(
      `/api/v1/nodes/${m.name}/status`,
      { status: { conditions: [{ ...ready, lastHeartbeatTime: t, lastTransitionTime: t }] } },
      PATCH.strategic,
    );
  }

  /** Who deleted node `name` (audit), if anyone. */
  deleters(name: string): string[] {
    return this.cluster
      .auditEvents()
      .filter((e) => e.verb === "delete" && e.objectRef?.resource === "nodes" && e.objectRef.name === name)
      .map((e) => e.user.username);
  }

  /** Creates Service default/web of type LoadBalancer (port 80 to 8080, selector app=web). */
  async createLoadBalancer(): Promise<void> {
    await this.cluster.adminClient.create("/api/v1/namespaces/default/services", {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "web" },
      spec: {
        type: "LoadBalancer",
        selector: { app: "web" },
        ports: [{ name: "http", port: 80, targetPort: 8080 }],
      },
    });
  }

  /** Stops the CCMs (SIGKILL), the kubelets, the fake, the simulator and the cluster; removes the folder. */
  async stop(): Promise<void> {
    for (const p of this.cloudCcms) await p.stop("SIGKILL");
    await this.talosCcm?.stop("SIGKILL");
    for (const k of this.kubelets.values()) k.close();
    await this.fake.stop();
    await this.sim.stop();
    await this.cluster.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The Node no longer has the uninitialized taint. */
export const initialized = (n: V1Node): boolean => !tainted(n);
