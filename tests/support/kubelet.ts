// Simulated kubelets: register a Node the way a kubelet run with `--cloud-provider=external` does,
// authenticated as that node (client certificate CN system:node:<name>, O system:nodes, from the test
// CA), keep its Ready condition and Lease fresh until told to stop, and submit kubelet-serving CSRs
// made with a real key, so the API server stamps the true requester on them.

import type { V1CertificateSigningRequest, V1Node } from "@kubernetes/client-node";
import { KubeClient } from "../../lib/kube.ts";
import { microTime, PATCH } from "../../lib/kubeapi.ts";
import type { KubeConnection } from "../../lib/kubeconfig.ts";
import {
  KUBELET_SERVING_SIGNER,
  PROVIDED_NODE_IP_ANNOTATION,
  UNINITIALIZED_TAINT,
} from "../../lib/wellknown.ts";
import type { TestCluster } from "./cluster.ts";
import { type CsrOptions, createCSR } from "./pki.ts";

/** The names a kubelet writes, under the names the e2e tests know them by. */
export { PROVIDED_NODE_IP_ANNOTATION as PROVIDED_NODE_IP, UNINITIALIZED_TAINT } from "../../lib/wellknown.ts";

/** Who the simulated kubelet is and how it registers its Node. */
export interface KubeletOptions {
  name: string;
  /** Node IPs (`--node-ip`), written to the provided-node-ip annotation ("v4" or "v4,v6"). */
  ips: string[];
  /** Leave out the provided-node-ip annotation (a kubelet started without --node-ip). */
  noAnnotation?: boolean;
  /** Status addresses the kubelet reports; default InternalIP per node IP and Hostname. */
  addresses?: Array<{ type: string; address: string }>;
  labels?: Record<string, string>;
  /** Register with the uninitialized taint (default true). */
  external?: boolean;
  /**
   * `status.nodeInfo.systemUUID`, which a kubelet reads from the machine's SMBIOS product UUID (on
   * Exoscale the instance ID, which the Exoscale CCM relies on). Default: none.
   */
  systemUUID?: string;
  /** Heartbeat interval; 0 disables heartbeats (default 10 s). */
  heartbeatMs?: number;
  /**
   * This node's identity, issued beforehand with `cluster.userConnection("system:node:<name>",
   * ["system:nodes"])`, so a benchmark can register thousands at once without minting certificates
   * on the clock. Default: issued at registration.
   */
  connection?: KubeConnection;
  /**
   * Send the first status (Ready, addresses, node info) with the Node itself, as a real kubelet's
   * registration does (the API server keeps a Node's status on create), then create the Lease: two
   * requests instead of three, for benchmarks that register thousands of nodes at once. Default:
   * create the Node, then one heartbeat.
   */
  statusOnCreate?: boolean;
  /**
   * Heartbeats post the Ready condition and node info but not the addresses (default: addresses
   * too), as a kubelet with an external cloud provider leaves them to the CCM; the blast-radius
   * bench's big Node heartbeats this way, so that only its size costs the CCM.
   */
  heartbeatWithoutAddresses?: boolean;
}

/**
 * A kubelet's User-Agent (client-go's default: binary/version (os/arch) kubernetes/commit, the commit a
 * placeholder), so the API server records the simulated kubelet's writes under field manager `kubelet`,
 * as a real one's.
 */
export const KUBELET_USER_AGENT = "kubelet/v1.35.4 (linux/amd64) kubernetes/0000000";

function now(): string {
  return new Date().toISOString().replace(/\.\d+Z$/, "Z");
}

/** One simulated kubelet. */
export class SimulatedKubelet {
  readonly name: string;
  readonly client: KubeClient;
  readonly opts: KubeletOptions;
  #timer?: ReturnType<typeof setInterval>;
  #ready = true;

  private constructor(opts: KubeletOptions, client: KubeClient) {
    this.name = opts.name;
    this.opts = opts;
    this.client = client;
  }

  /** Registers the Node (and its Lease) as the kubelet would, and starts heartbeats. */
  static async register(cluster: TestCluster, opts: KubeletOptions): Promise<SimulatedKubelet> {
    const k = await SimulatedKubelet.connect(cluster, opts);
    await k.registerNode();
    return k;
  }

  /**
   * The kubelet's identity without its Node: it can submit CSRs before {@link registerNode}, as a
   * kubelet whose registration is slow or failing does.
   */
  static async connect(cluster: TestCluster, opts: KubeletOptions): Promise<SimulatedKubelet> {
    const conn =
      opts.connection ?? (await cluster.userConnection(`system:node:${opts.name}`, ["system:nodes"]));
    return new SimulatedKubelet(opts, new KubeClient(conn, { qps: 0, userAgent: KUBELET_USER_AGENT }));
  }

  /** Registers the Node (and its Lease) and starts heartbeats; returns the Node as created. */
  async registerNode(): Promise<V1Node> {
    const created = await this.#create();
    if ((this.opts.heartbeatMs ?? 10_000) > 0) {
      this.#timer = setInterval(() => void this.heartbeat().catch(() => {}), this.opts.heartbeatMs ?? 10_000);
    }
    return created;
  }

  async #create(): Promise<V1Node> {
    const annotations: Record<string, string> = {};
    if (!this.opts.noAnnotation) annotations[PROVIDED_NODE_IP_ANNOTATION] = this.opts.ips.join(",");
    const node = {
      apiVersion: "v1",
      kind: "Node",
      metadata: {
        name: this.name,
        labels: {
          "kubernetes.io/hostname": this.name,
          "kubernetes.io/os": "linux",
          "kubernetes.io/arch": "amd64",
          "beta.kubernetes.io/os": "linux",
          "beta.kubernetes.io/arch": "amd64",
          ...this.opts.labels,
        },
        annotations,
      },
      spec:
        this.opts.external === false
          ? {}
          : { taints: [{ key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" }] },
      ...(this.opts.statusOnCreate ? { status: this.#status() } : {}),
    };
    const created = await this.client.create<V1Node>("/api/v1/nodes", node);
    if (this.opts.statusOnCreate) await this.#renewLease();
    else await this.heartbeat();
    return created;
  }

  /** The status addresses this kubelet reports. */
  addresses(): Array<{ type: string; address: string }> {
    return (
      this.opts.addresses ?? [
        ...this.opts.ips.map((address) => ({ type: "InternalIP", address })),
        { type: "Hostname", address: this.name },
      ]
    );
  }

  /** The status a heartbeat posts: the Ready condition, addresses and node info. */
  #status() {
    const t = now();
    return {
      conditions: [
        {
          type: "Ready",
          status: this.#ready ? "True" : "False",
          reason: this.#ready ? "KubeletReady" : "KubeletNotReady",
          message: this.#ready ? "kubelet is posting ready status" : "simulated outage",
          lastHeartbeatTime: t,
          lastTransitionTime: t,
        },
      ],
      addresses: this.addresses(),
      nodeInfo: {
        kubeletVersion: "v1.35.4",
        osImage: "Talos (simulated)",
        architecture: "amd64",
        ...(this.opts.systemUUID === undefined ? {} : { systemUUID: this.opts.systemUUID }),
      },
    };
  }

  /** Posts the Ready condition and renews the node Lease, as one kubelet heartbeat. */
  /** What a status heartbeat patches: the status, without addresses when so configured. */
  heartbeatStatus(): Record<string, unknown> {
    const { addresses, ...rest } = this.#status();
    return this.opts.heartbeatWithoutAddresses ? rest : { addresses, ...rest };
  }

  async heartbeat(): Promise<void> {
    const status = this.heartbeatStatus();
    // The answer (the whole Node) is drained unread: a real kubelet runs in its own process, and the
    // bench's hostile big Node (~1 MiB) would otherwise cost the process that times the honest nodes
    // a parse of it per heartbeat.
    await this.client.patch(`/api/v1/nodes/${this.name}/status`, { status }, PATCH.strategic, {
      discardAnswer: true,
    });
    await this.#renewLease();
  }

  /** Creates the node Lease, or renews it when it exists. */
  async #renewLease(): Promise<void> {
    const lease = {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: this.name, namespace: "kube-node-lease" },
      spec: { holderIdentity: this.name, leaseDurationSeconds: 40, renewTime: microTime(Date.now()) },
    };
    const path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    await this.client.create(path, lease).catch(async (e) => {
      if ((e as { status?: number }).status !== 409) throw e;
      await this.client.patch(`${path}/${this.name}`, { spec: { renewTime: microTime(Date.now()) } });
    });
  }

  /** Marks the node NotReady (as the node lifecycle controller would after missed heartbeats) and stops heartbeats. */
  async goNotReady(): Promise<void> {
    this.stop();
    this.#ready = false;
    await this.heartbeat();
  }

  /**
   * Stops heartbeats (the machine is off) and marks the node as kube-controller-manager's node
   * lifecycle does after its grace period: Ready Unknown (NodeStatusUnknown) and the
   * `unreachable:NoExecute` taint.
   * @param admin a client that may write any Node (the test bed has no kube-controller-manager)
   */
  async goSilent(admin: KubeClient): Promise<void> {
    this.stop();
    const path = `/api/v1/nodes/${this.name}`;
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const ready = {
      type: "Ready",
      status: "Unknown",
      reason: "NodeStatusUnknown",
      message: "Kubelet stopped posting node status.",
      lastHeartbeatTime: now,
      lastTransitionTime: now,
    };
    await admin.patch(`${path}/status`, { status: { conditions: [ready] } }, PATCH.strategic);
    const node = await admin.get<V1Node>(path);
    await admin.patch(path, {
      metadata: { resourceVersion: node.metadata?.resourceVersion },
      spec: {
        taints: [
          ...(node.spec?.taints ?? []),
          { key: "node.kubernetes.io/unreachable", effect: "NoExecute" },
        ],
      },
    });
  }

  /** Marks the node Ready again and resumes heartbeats. */
  async goReady(heartbeatMs = 10_000): Promise<void> {
    this.#ready = true;
    await this.heartbeat();
    this.#timer = setInterval(() => void this.heartbeat().catch(() => {}), heartbeatMs);
  }

  /**
   * Submits a kubernetes.io/kubelet-serving CSR as this node. Defaults match a kubelet with
   * rotate-server-certificates: CN system:node:<name>, O system:nodes, DNS = hostname, IPs = node IPs.
   * `request` replaces the generated PEM; `signerName` the signer.
   */
  async submitServingCSR(
    overrides: Partial<CsrOptions> & { usages?: string[]; request?: string; signerName?: string } = {},
  ) {
    const { usages, request, signerName, ...csrOpts } = overrides;
    const made = request
      ? { csr: request }
      : await createCSR({
          cn: `system:node:${this.name}`,
          o: ["system:nodes"],
          dns: [this.name],
          ips: this.opts.ips,
          ...csrOpts,
        });
    const body = {
      apiVersion: "certificates.k8s.io/v1",
      kind: "CertificateSigningRequest",
      metadata: { generateName: "csr-" },
      spec: {
        request: Buffer.from(made.csr).toString("base64"),
        signerName: signerName ?? KUBELET_SERVING_SIGNER,
        usages: usages ?? ["digital signature", "server auth"],
      },
    };
    return this.client.create<V1CertificateSigningRequest>(
      "/apis/certificates.k8s.io/v1/certificatesigningrequests",
      body,
    );
  }

  /** Reads this node's Node object (as the node itself). */
  node(): Promise<V1Node> {
    return this.client.get<V1Node>(`/api/v1/nodes/${this.name}`);
  }

  /** Stops heartbeats. */
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined as never;
  }

  /** Stops heartbeats and closes the connection pool. */
  close(): void {
    this.stop();
    this.client.close();
  }
}

/** What the CCM writes on a Node, as tests compare it. */
export interface NodeView {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  providerID: string;
  taints: Array<{ key: string; value?: string; effect: string }>;
  addresses: Array<{ type: string; address: string }>;
}

/** The {@link NodeView} of a Node. */
export function nodeView(n: V1Node): NodeView {
  return {
    labels: n.metadata?.labels ?? {},
    annotations: n.metadata?.annotations ?? {},
    providerID: n.spec?.providerID ?? "",
    taints: (n.spec?.taints ?? []).map((t) =>
      t.value ? { key: t.key, value: t.value, effect: t.effect } : { key: t.key, effect: t.effect },
    ),
    addresses: (n.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
  };
}
