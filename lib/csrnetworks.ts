// The cluster's shared networks as node-csr-approval sees them: fills a ClusterNetworks
// (lib/sharedaddresses.ts) from every source the cluster offers and keeps it current, so that no
// CSR is approved for a Service IP, a pod address or the API server's shared name. Sources:
// --service-cluster-ip-range and --cluster-cidr; Talos' ControllerManagerConfig (pod and Service
// CIDRs); the ServiceCIDR objects of networking.k8s.io (watched, in the group version the API server
// serves: lib/kubediscovery.ts); the `kubernetes` Service's
// ClusterIPs; every Node's podCIDRs (from the Node cache); and the kubeconfig's API server host
// when it is a DNS name. A source that cannot be read is logged and left out: the others still
// apply, and with Talos each machine's NodeIPConfig excludes the pod and Service ranges and its
// virtual IPs again.

import { backoffDelay } from "./backoffpolicy.ts";
import { wait } from "./backoffwait.ts";
import { tryParseIP } from "./cidr.ts";
import { type KubeApi, KubeError } from "./kubeapi.ts";
import { type Handlers, Informer } from "./kubecache.ts";
import type { KubeApis } from "./kubediscovery.ts";
import { serviceCIDRPath } from "./kubeversions.ts";
import { logger } from "./log.ts";
import type { LeanNode } from "./nodeview.ts";
import { ClusterNetworks } from "./sharedaddresses.ts";
import type { TalosClient } from "./talos.ts";

const log = logger("csr-networks");

/** The API server's own Service. */
export const KUBERNETES_SERVICE_PATH = "/api/v1/namespaces/default/services/kubernetes";
/** Deadline of the one Talos read of the cluster's CIDRs. */
const TALOS_READ_TIMEOUT_MS = 5_000;
/** Retries of the `kubernetes` Service read while the API server has not created it yet. */
const SERVICE_RETRY = { initialMs: 500, maxMs: 30_000 };

/** What a ServiceCIDR informer keeps. */
interface LeanServiceCIDR {
  metadata: { name: string; resourceVersion?: string };
  cidrs: string[];
}

function leanServiceCIDR(raw: unknown): LeanServiceCIDR {
  const obj = (raw ?? {}) as {
    metadata?: { name?: string; resourceVersion?: string };
    spec?: { cidrs?: unknown };
  };
  const cidrs = Array.isArray(obj.spec?.cidrs) ? obj.spec.cidrs.filter((c) => typeof c === "string") : [];
  return {
    metadata: { name: obj.metadata?.name ?? "", resourceVersion: obj.metadata?.resourceVersion ?? "" },
    cidrs,
  };
}

/**
 * The API server host of a kubeconfig server URL as a shared name, when it is a DNS name: it
 * answers for whichever machine serves the API behind it. An IP host is left out: nothing here
 * tells a virtual IP from a control-plane node's own address, which that node's kubelet names
 * legitimately (with Talos, the machine's NodeIPConfig lists its virtual IPs).
 * @param server e.g. `https://cp.example.com:6443`
 * @example controlPlaneName("https://cp.example.com:6443") // ["cp.example.com"]
 */
export function controlPlaneName(server: string): string[] {
  let host: string;
  try {
    host = new URL(server).hostname.replace(/^\[|\]$/g, "");
  } catch {
    return [];
  }
  return host === "" || tryParseIP(host) ? [] : [host];
}

/** What {@link CsrNetworks} reads from. */
export interface CsrNetworksOptions {
  client: KubeApi;
  /** The flags' CIDRs, as `RunOptions.ipam` holds them (split on commas). */
  ipam: { clusterCidrs: readonly string[]; serviceCidrs?: readonly string[] };
  talos: Pick<TalosClient, "controllerManagerConfig"> | undefined;
  /** Which group version serves ServiceCIDR objects, if any. */
  apis: Pick<KubeApis, "discover">;
  /** The wait between retries of the `kubernetes` Service read (default: lib/backoffwait.ts' timer). */
  wait?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** Keeps a {@link ClusterNetworks} filled from the cluster for the CSR approver. */
export class CsrNetworks {
  readonly networks = new ClusterNetworks();
  readonly #opts: CsrNetworksOptions;
  #serviceCIDRs: Informer<LeanServiceCIDR> | undefined;

  constructor(opts: CsrNetworksOptions) {
    this.#opts = opts;
  }

  /**
   * Handlers for the Node cache: each Node's podCIDRs are a pod range (the requester's own too: a
   * CNI bridge's gateway on the machine is a pod address).
   */
  get nodeHandlers(): Handlers<LeanNode> {
    const set = (n: LeanNode) => {
      const cidrs = [...(n.spec.podCIDRs ?? []), ...(n.spec.podCIDR ? [n.spec.podCIDR] : [])];
      const name = n.metadata.name;
      this.networks.set(`node/${name}`, `the pod CIDR of node ${JSON.stringify(name)}`, { cidrs });
    };
    return {
      onAdd: set,
      onUpdate: (_old, n) => set(n),
      onDelete: (n) => this.networks.delete(`node/${n.metadata.name}`),
    };
  }

  /**
   * Reads every source once and starts the ServiceCIDR watch; resolves when all are in (or given
   * up on), so that no CSR is decided before the ranges are known.
   */
  async start(signal: AbortSignal): Promise<void> {
    // The flags come split on commas (lib/flags.ts); an empty one is no entry.
    const given = (v: readonly string[] | undefined) => (v ?? []).filter((s) => s !== "");
    const flags = this.#opts.ipam;
    this.#add("flag/service", "a Service CIDR (--service-cluster-ip-range)", {
      cidrs: given(flags.serviceCidrs),
    });
    this.#add("flag/cluster", "the pod network (--cluster-cidr)", { cidrs: given(flags.clusterCidrs) });
    this.#add("kubeconfig/server", "the API server endpoint this CCM connects to", {
      names: controlPlaneName(this.#opts.client.server),
    });
    await Promise.all([
      this.#readTalos(signal),
      this.#readKubernetesService(signal),
      this.#watchServiceCIDRs(signal),
    ]);
    log.info("Cluster networks refused in serving certificates", {
      sources: [...new Set(this.networks.sources().values())].filter(
        (w) => !w.startsWith("the pod CIDR of node"),
      ),
    });
    const groups = [...this.networks.sources().keys()];
    if (!groups.some((g) => /^(flag\/service|talos\/service|servicecidr\/)/.test(g)))
      log.warn(
        "No Service CIDR is known (no --service-cluster-ip-range, Talos ControllerManagerConfig or " +
          "ServiceCIDR object): only the ClusterIP of Service default/kubernetes is refused in serving " +
          "certificates; set --service-cluster-ip-range",
      );
  }

  /** Stops the ServiceCIDR watch. */
  async stop(): Promise<void> {
    await this.#serviceCIDRs?.stop();
  }

  #add(group: string, what: string, entries: Parameters<ClusterNetworks["set"]>[2]): void {
    const bad = this.networks.set(group, what, entries);
    if (bad.length)
      log.error("Ignoring entries that are not CIDRs", undefined, { source: what, entries: bad });
  }

  async #readTalos(signal: AbortSignal): Promise<void> {
    if (!this.#opts.talos) return;
    try {
      const cmc = await this.#opts.talos.controllerManagerConfig({
        signal,
        timeoutMs: TALOS_READ_TIMEOUT_MS,
      });
      this.#add("talos/service", "a Service CIDR (Talos ControllerManagerConfig)", {
        cidrs: cmc.serviceCIDRs,
      });
      this.#add("talos/pod", "the pod network (Talos ControllerManagerConfig)", { cidrs: cmc.podCIDRs });
    } catch (err) {
      log.info(
        "Cannot read the cluster's CIDRs from Talos; each machine's NodeIPConfig still excludes them",
        {
          error: (err as Error).message,
        },
      );
    }
  }

  /**
   * Reads the `kubernetes` Service's ClusterIPs. On a cluster still coming up the API server may not
   * have created it yet (404): then start() goes on (the Service CIDRs still cover the address) and
   * the read is retried with backoff until the Service exists or the CCM stops.
   */
  async #readKubernetesService(signal: AbortSignal): Promise<void> {
    if (await this.#tryKubernetesService(signal, true)) return;
    void (async () => {
      for (let attempt = 0; !signal.aborted; attempt++) {
        await (this.#opts.wait ?? wait)(backoffDelay(attempt, SERVICE_RETRY, Math.random), signal);
        if (signal.aborted || (await this.#tryKubernetesService(signal, false))) return;
      }
    })();
  }

  /** One read of the `kubernetes` Service; false when it does not exist yet (worth another try). */
  async #tryKubernetesService(signal: AbortSignal, first: boolean): Promise<boolean> {
    const { client } = this.#opts;
    try {
      const svc = await client.get<{ spec?: { clusterIPs?: string[]; clusterIP?: string } }>(
        KUBERNETES_SERVICE_PATH,
        { signal },
      );
      const ips = svc.spec?.clusterIPs ?? (svc.spec?.clusterIP ? [svc.spec.clusterIP] : []);
      const cidrs = ips.map((ip) => `${ip}/${ip.includes(":") ? 128 : 32}`);
      this.#add("service/kubernetes", "the ClusterIP of Service default/kubernetes (the API server)", {
        cidrs,
      });
      if (!first) log.info("Read Service default/kubernetes", { clusterIPs: ips });
      return true;
    } catch (err) {
      const missing = err instanceof KubeError && err.status === 404;
      if (!missing) log.error("Cannot read Service default/kubernetes", err);
      else if (first) log.info("Service default/kubernetes does not exist yet; retrying in the background");
      return !missing || signal.aborted;
    }
  }

  async #watchServiceCIDRs(signal: AbortSignal): Promise<void> {
    const { client, apis } = this.#opts;
    let gv: Awaited<ReturnType<KubeApis["discover"]>>["serviceCIDRs"];
    try {
      gv = (await apis.discover(signal)).serviceCIDRs;
    } catch (err) {
      log.error("Cannot discover the ServiceCIDR API; ServiceCIDR objects are not read", err);
      return;
    }
    // No ServiceCIDR API (Kubernetes before 1.33): the start-up line said so.
    if (!gv) return;
    // One page first: a list refused (RBAC) is logged and left out rather than retried by an
    // informer that would hold start() forever.
    try {
      await client.get(serviceCIDRPath(gv), { query: { limit: 1 }, signal });
    } catch (err) {
      log.error("Cannot list ServiceCIDRs", err, { groupVersion: gv });
      return;
    }
    const informer = new Informer<LeanServiceCIDR>(client, {
      path: serviceCIDRPath(gv),
      transform: leanServiceCIDR,
      log: logger("servicecidr-informer"),
    });
    const set = (s: LeanServiceCIDR) => {
      this.#add(`servicecidr/${s.metadata.name}`, `a Service CIDR (ServiceCIDR ${s.metadata.name})`, {
        cidrs: s.cidrs,
      });
      log.v(2).info("Read ServiceCIDR", { name: s.metadata.name, cidrs: s.cidrs });
    };
    informer.addHandlers({
      onAdd: set,
      onUpdate: (_old, s) => set(s),
      onDelete: (s) => this.networks.delete(`servicecidr/${s.metadata.name}`),
    });
    this.#serviceCIDRs = informer;
    informer.start();
    await Promise.race([
      informer.waitForSync(),
      new Promise((r) => signal.addEventListener("abort", r, { once: true })),
    ]);
  }
}
