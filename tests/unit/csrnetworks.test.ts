// The cluster's ranges as node-csr-approval reads them (lib/csrnetworks.ts): every source fills
// the index, a source that cannot be read leaves the others in place, and Nodes' pod CIDRs follow
// the Node cache. The ServiceCIDR watch itself, and API discovery, run against the real API server
// in tests/e2e/csr-threats.test.ts and tests/e2e/kube-versions.test.ts.

import { describe, expect, test } from "bun:test";
import { parseIP } from "../../lib/cidr.ts";
import { CsrNetworks, KUBERNETES_SERVICE_PATH } from "../../lib/csrnetworks.ts";
import { type KubeApi, KubeError } from "../../lib/kubeapi.ts";
import type { KubeApis } from "../../lib/kubediscovery.ts";
import { type ServiceCIDRGroupVersion, serviceCIDRPath } from "../../lib/kubeversions.ts";
import { leanNode } from "../../lib/nodeview.ts";

const V1 = "networking.k8s.io/v1" satisfies ServiceCIDRGroupVersion;

import type { ControllerManagerConfig } from "../../lib/types.ts";

/** A client that answers the kubernetes Service and refuses the ServiceCIDR list with `cidrStatus`. */
function client(server: string, cidrStatus: number, service?: unknown): KubeApi {
  const get = async (path: string) => {
    if (path === KUBERNETES_SERVICE_PATH) {
      if (service === undefined) throw new KubeError(403, "Forbidden", "services is forbidden");
      return service;
    }
    if (path === serviceCIDRPath(V1)) throw new KubeError(cidrStatus, "NotFound", `status ${cidrStatus}`);
    throw new Error(`unexpected GET ${path}`);
  };
  return { server, get } as unknown as KubeApi;
}

/** What API discovery found: a group version serving ServiceCIDRs, none, or a failed read. */
function apis(found: ServiceCIDRGroupVersion | undefined | Error): Pick<KubeApis, "discover"> {
  return {
    async discover() {
      if (found instanceof Error) throw found;
      return { version: undefined, serviceCIDRs: found };
    },
  };
}

function talos(cmc: ControllerManagerConfig | Error) {
  return {
    async controllerManagerConfig() {
      if (cmc instanceof Error) throw cmc;
      return cmc;
    },
  };
}

const signal = new AbortController().signal;

describe("CsrNetworks", () => {
  test("CsrNetworks reads the flags, Talos' CIDRs, the kubernetes Service and the kubeconfig's host name", async () => {
    const nets = new CsrNetworks({
      client: client("https://cp.example.com:6443", 404, {
        spec: { clusterIPs: ["10.96.0.1", "fd00:96::1"] },
      }),
      ipam: { clusterCidrs: [], serviceCidrs: ["10.200.0.0/16", ""] },
      talos: talos({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] }),
      apis: apis(undefined),
    });
    await nets.start(signal);
    const n = nets.networks;
    expect(n.rangeOf(parseIP("10.200.1.1"))).toContain("--service-cluster-ip-range");
    expect(n.rangeOf(parseIP("10.244.7.7"))).toContain("pod network (Talos ControllerManagerConfig)");
    expect(n.rangeOf(parseIP("10.96.5.5"))).toContain("Service CIDR (Talos ControllerManagerConfig)");
    // The most specific range names the API server's own ClusterIP.
    expect(n.rangeOf(parseIP("10.96.0.1"))).toContain("Service default/kubernetes");
    expect(n.rangeOf(parseIP("fd00:96::1"))).toContain("Service default/kubernetes");
    expect(n.sharedName("cp.example.com")).toContain("API server endpoint");
    expect(n.rangeOf(parseIP("10.0.0.1"))).toBeUndefined();
  });

  test("CsrNetworks keeps every source it can read when Talos, the Service or the ServiceCIDR API fail", async () => {
    const cases = [
      ...[403, 404, 500].map((status) => ({ status, found: apis(V1) })),
      { status: 200, found: apis(undefined) },
      { status: 200, found: apis(new KubeError(403, "Forbidden", "discovery is forbidden")) },
    ];
    for (const { status, found } of cases) {
      const nets = new CsrNetworks({
        client: client("https://10.0.0.100:6443", status),
        ipam: { clusterCidrs: ["10.244.0.0/16"] },
        talos: talos(new Error("unreachable")),
        apis: found,
      });
      await nets.start(signal);
      expect(nets.networks.rangeOf(parseIP("10.244.1.1"))).toContain("--cluster-cidr");
      // An IP host is no shared name: a VIP and a node's own address look alike here.
      expect([...nets.networks.sources().keys()]).toEqual(["flag/cluster"]);
    }
  });

  test("CsrNetworks follows each Node's podCIDRs through the Node cache's events", async () => {
    const nets = new CsrNetworks({
      client: client("https://127.0.0.1:6443", 404),
      ipam: { clusterCidrs: [] },
      talos: undefined,
      apis: apis(undefined),
    });
    const h = nets.nodeHandlers;
    const node = (cidrs: string[]) =>
      leanNode({ metadata: { name: "worker-a" }, spec: { podCIDR: cidrs[0], podCIDRs: cidrs } });
    h.onAdd?.(node(["10.244.1.0/24"]));
    expect(nets.networks.rangeOf(parseIP("10.244.1.1"))).toBe(
      'in 10.244.1.0/24, the pod CIDR of node "worker-a"',
    );
    h.onUpdate?.(node(["10.244.1.0/24"]), node(["10.244.2.0/24", "fd00:244:2::/64"]));
    expect(nets.networks.rangeOf(parseIP("10.244.1.1"))).toBeUndefined();
    expect(nets.networks.rangeOf(parseIP("fd00:244:2::1"))).toContain('"worker-a"');
    h.onDelete?.(node(["10.244.2.0/24"]));
    expect(nets.networks.rangeOf(parseIP("10.244.2.1"))).toBeUndefined();
  });

  test("CsrNetworks retries the kubernetes Service while the API server has not created it yet", async () => {
    let reads = 0;
    const get = async (path: string) => {
      if (path === KUBERNETES_SERVICE_PATH) {
        reads++;
        if (reads < 3) throw new KubeError(404, "NotFound", 'services "kubernetes" not found');
        return { spec: { clusterIPs: ["10.96.0.1"] } };
      }
      throw new KubeError(404, "NotFound", "no ServiceCIDR API");
    };
    const stop = new AbortController();
    const nets = new CsrNetworks({
      client: { server: "https://127.0.0.1:6443", get } as unknown as KubeApi,
      ipam: { clusterCidrs: [] },
      talos: undefined,
      apis: apis(undefined),
      // The backoff's waits end when the test says, recorded: no time passes in this test.
      wait: (ms) =>
        new Promise<void>((resolve) => {
          waits.push(ms);
          pending.push(resolve);
        }),
    });
    const waits: number[] = [];
    const pending: (() => void)[] = [];
    const yieldLoop = () => new Promise((r) => setImmediate(r));
    /** Ends the retry's wait once it has begun, and lets the read that follows run. */
    const endWait = async () => {
      for (let i = 0; i < 100 && pending.length === 0; i++) await yieldLoop();
      pending.shift()?.();
      for (let i = 0; i < 10; i++) await yieldLoop();
    };
    await nets.start(stop.signal);
    // start() does not wait for a Service that does not exist yet.
    expect(reads).toBe(1);
    expect(nets.networks.rangeOf(parseIP("10.96.0.1"))).toBeUndefined();
    await endWait();
    expect(reads).toBe(2);
    expect(nets.networks.rangeOf(parseIP("10.96.0.1"))).toBeUndefined();
    await endWait();
    expect(reads).toBe(3);
    expect(nets.networks.rangeOf(parseIP("10.96.0.1"))).toContain("Service default/kubernetes");
    // Two retries, each after a backoff delay within its bounds (0.5 s doubling, at most 30 s); then none.
    expect(waits).toHaveLength(2);
    expect(waits.every((ms) => ms > 0 && ms <= 30_000)).toBe(true);
    stop.abort();
  });
});
