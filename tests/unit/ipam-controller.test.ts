// The node-ipam controller: when it needs Talos, how its configuration is completed from Talos
// (with a stub client that counts calls), which addresses and IPs of a node it uses, the set-once
// patch, the pod capacity the Node cache keeps for it, and startNodeIpam() against an in-memory API
// server: occupy before allocate, concurrency, patch failures, races with other writers, exhaustion.

import { describe, expect, test } from "bun:test";
import { CidrError, formatPrefix } from "../../lib/cidr.ts";
import type { ControllerContext } from "../../lib/controller.ts";
import type { IpamOptions } from "../../lib/flags.ts";
import {
  ipamAddresses,
  NODE_IPAM_WORKERS,
  nodeIPsOf,
  nodeIpamConfig,
  podCIDRsPatch,
  startNodeIpam,
} from "../../lib/ipam.ts";
import { nodeIpamNeedsTalos } from "../../lib/ipamconfig.ts";
import { KubeError } from "../../lib/kubeapi.ts";
import type { Handlers } from "../../lib/kubecache.ts";
import { Registry } from "../../lib/metrics.ts";
import { type LeanNode, leanNode } from "../../lib/nodeview.ts";
import type { TalosClient } from "../../lib/talos.ts";
import type { AddressStatus, ControllerManagerConfig } from "../../lib/types.ts";
import { until } from "../support/cluster.ts";

function ipam(over: Partial<IpamOptions> = {}): IpamOptions {
  return {
    allocateNodeCidrs: true,
    allocatorType: "RangeAllocator",
    clusterCidrs: [],
    serviceCidrs: [],
    ...over,
  };
}

/** A Talos client whose only method answers `answer` (or throws it) and counts the calls. */
function stubTalos(answer: ControllerManagerConfig | Error): { talos: TalosClient; calls: () => number } {
  let n = 0;
  const talos = {
    controllerManagerConfig: async () => {
      n++;
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as TalosClient;
  return { talos, calls: () => n };
}

const TALOS_CMC: ControllerManagerConfig = {
  podCIDRs: ["10.244.0.0/16", "fd00:10:244::/64"],
  serviceCIDRs: ["10.96.0.0/12", "fd00:10:96::/112"],
};

describe("nodeIpamNeedsTalos()", () => {
  const cases: Array<[string, Partial<IpamOptions>, boolean]> = [
    ["allocation off", { allocateNodeCidrs: false }, false],
    ["no --cluster-cidr", {}, true],
    ["RangeAllocator with an IPv4 cluster CIDR", { clusterCidrs: ["10.244.0.0/16"] }, false],
    ["RangeAllocator dual-stack", { clusterCidrs: ["10.244.0.0/16", "fd00::/64"] }, false],
    [
      "CloudAllocator IPv4-only",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16"], serviceCidrs: [] },
      false,
    ],
    [
      "CloudAllocator dual-stack",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16", "fd00::/64"] },
      true,
    ],
    [
      "CloudAllocator, entries still comma-joined",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.0.0.0/8,fd00::/64"] },
      true,
    ],
  ];
  for (const [name, over, want] of cases) {
    test(`nodeIpamNeedsTalos() ${name} → ${want}`, () => {
      expect(nodeIpamNeedsTalos(ipam(over))).toBe(want);
    });
  }
});

describe("nodeIpamConfig()", () => {
  test("nodeIpamConfig() takes every CIDR from the flags without touching Talos", async () => {
    const { talos, calls } = stubTalos(new Error("must not be called"));
    const cfg = await nodeIpamConfig(
      ipam({ clusterCidrs: ["10.244.0.0/16"], serviceCidrs: ["10.96.0.0/12"], nodeCidrMaskSize: 26 }),
      talos,
    );
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(["10.244.0.0/16"]);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(["10.96.0.0/12"]);
    expect(cfg.nodeMaskSizes).toEqual([26]);
    expect(calls()).toBe(0);
  });

  test("nodeIpamConfig() reserves no service range for an IPv4-only cluster without the flag, and asks nobody", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    for (const allocatorType of ["RangeAllocator", "CloudAllocator"] as const) {
      const cfg = await nodeIpamConfig(ipam({ allocatorType, clusterCidrs: ["10.244.0.0/16"] }), talos);
      expect(cfg.serviceCIDRs).toEqual([]);
    }
    expect(calls()).toBe(0);
  });

  test("nodeIpamConfig() takes pod and service CIDRs from Talos when --cluster-cidr is missing", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(ipam(), talos);
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.podCIDRs);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.serviceCIDRs);
    expect(cfg.nodeMaskSizes).toEqual([24, 80]);
    expect(calls()).toBe(1);
  });

  test("nodeIpamConfig() keeps the service flag over Talos' service CIDRs", async () => {
    const { talos } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(ipam({ serviceCidrs: ["10.100.0.0/16"] }), talos);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(["10.100.0.0/16"]);
  });

  test("nodeIpamConfig() fills only the service CIDRs from Talos for a dual-stack CloudAllocator", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(
      ipam({ allocatorType: "CloudAllocator", clusterCidrs: ["10.1.0.0/16", "fd01::/64"] }),
      talos,
    );
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(["10.1.0.0/16", "fd01::/64"]);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.serviceCIDRs);
    expect(calls()).toBe(1);
  });

  test("nodeIpamConfig() goes on without a service range when only that read fails", async () => {
    const { talos } = stubTalos(new Error("not a control-plane node"));
    const cfg = await nodeIpamConfig(
      ipam({ allocatorType: "CloudAllocator", clusterCidrs: ["10.1.0.0/16", "fd01::/64"] }),
      talos,
    );
    expect(cfg.serviceCIDRs).toEqual([]);
  });

  const failures: Array<[string, IpamOptions, TalosClient | undefined, RegExp]> = [
    [
      "no --cluster-cidr and no Talos client",
      ipam(),
      undefined,
      /^Cannot configure node IPAM: no --cluster-cidr and no Talos API access/,
    ],
    [
      "no --cluster-cidr and Talos failing",
      ipam(),
      stubTalos(new Error("permission denied")).talos,
      /^Cannot configure node IPAM: cannot read the pod subnets from Talos \(or set --cluster-cidr\): permission denied$/,
    ],
    [
      "an IPv6 mask flag for Talos' IPv4-only pod subnet",
      ipam({ nodeCidrMaskSizeIpv6: 64 }),
      stubTalos({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: [] }).talos,
      /--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster/,
    ],
    [
      "Talos' pod subnets of one family",
      ipam(),
      stubTalos({ podCIDRs: ["10.244.0.0/16", "10.245.0.0/16"], serviceCIDRs: [] }).talos,
      /two IPv4 entries/,
    ],
  ];
  for (const [name, opts, talos, message] of failures) {
    test(`nodeIpamConfig() refuses ${name}`, async () => {
      const err = await nodeIpamConfig(opts, talos).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CidrError);
      expect((err as CidrError).code).toBe("config");
      expect((err as Error).message).toMatch(message);
    });
  }
});

function address(linkName: string, address: string, flags = 0x80): AddressStatus {
  return {
    id: `${linkName}/${address}`,
    address,
    linkName,
    linkIndex: 1,
    family: address.includes(":") ? "inet6" : "inet4",
    scope: 0,
    flags,
  };
}

describe("ipamAddresses()", () => {
  test("ipamAddresses() drops overlay, management, loopback and dummy links; permanent IPv6 first", () => {
    const got = ipamAddresses([
      address("lo", "127.0.0.1/8"),
      address("eth0", "10.0.0.5/24"),
      address("eth0", "2001:db8:1::99/64", 0x1),
      address("eth0", "2001:db8:1::5/64"),
      address("kubespan", "fd7a::1/128"),
      address("siderolink", "fdae::5a/64"),
      address("cilium_host", "10.244.0.1/32"),
      address("dummy0", "169.254.1.1/32"),
      address("bond0", "2a01:4f8::2/64"),
    ]);
    expect(got).toEqual(["2001:db8:1::5/64", "2a01:4f8::2/64", "10.0.0.5/24", "2001:db8:1::99/64"]);
  });

  test("ipamAddresses() of nothing is empty", () => {
    expect(ipamAddresses([])).toEqual([]);
  });
});

function lean(
  annotations: Record<string, string>,
  addresses: Array<{ type: string; address: string }>,
): LeanNode {
  return leanNode({ metadata: { name: "n1", annotations }, status: { addresses } });
}

describe("nodeIPsOf()", () => {
  const cases: Array<[string, LeanNode, string[]]> = [
    [
      "InternalIPs, then ExternalIPs, then provided IPs, without duplicates or hostnames",
      lean({ "alpha.kubernetes.io/provided-node-ip": "10.0.0.5, fd00::5" }, [
        { type: "Hostname", address: "n1" },
        { type: "ExternalIP", address: "2a01:4f8::2" },
        { type: "InternalIP", address: "10.0.0.5" },
      ]),
      ["10.0.0.5", "2a01:4f8::2", "fd00::5"],
    ],
    ["only the annotation", lean({ "alpha.kubernetes.io/provided-node-ip": "10.0.0.7" }, []), ["10.0.0.7"]],
    ["nothing known", lean({}, [{ type: "Hostname", address: "n1" }]), []],
  ];
  for (const [name, node, want] of cases) {
    test(`nodeIPsOf() ${name}`, () => {
      expect(nodeIPsOf(node)).toEqual(want);
    });
  }
});

describe("podCIDRsPatch()", () => {
  test("podCIDRsPatch() tests that both fields are unset before adding them, podCIDR = the first", () => {
    expect(podCIDRsPatch(["10.244.1.0/24", "fd00::/80"])).toEqual([
      { op: "test", path: "/spec/podCIDRs", value: null },
      { op: "test", path: "/spec/podCIDR", value: null },
      { op: "add", path: "/spec/podCIDRs", value: ["10.244.1.0/24", "fd00::/80"] },
      { op: "add", path: "/spec/podCIDR", value: "10.244.1.0/24" },
    ]);
  });
});

describe("leanNode()", () => {
  const cases: Array<[string, unknown, number | undefined]> = [
    ["allocatable pods", { allocatable: { pods: "250" }, capacity: { pods: "300" } }, 250],
    ["capacity pods when allocatable has none", { capacity: { pods: "300" } }, 300],
    ["nothing when unreported", {}, undefined],
    [
      "nothing for a zero or odd quantity",
      { allocatable: { pods: "0" }, capacity: { pods: "1k" } },
      undefined,
    ],
  ];
  for (const [name, status, want] of cases) {
    test(`leanNode() keeps maxPods: ${name}`, () => {
      expect(leanNode({ metadata: { name: "n1" }, status }).status.maxPods).toBe(want);
    });
  }
});

// ---------------------------------------------------------------------------------------------
// The controller against an in-memory API server: a Node store behind the informer interface and a
// client whose PATCH applies the set-once JSON patch (or fails as a test asks).

interface RawNode {
  metadata: { name: string; uid: string; resourceVersion: string };
  spec: { podCIDR?: string; podCIDRs?: string[]; taints?: Array<{ key: string; effect: string }> };
  status: { addresses: Array<{ type: string; address: string }> };
}

type PatchHook = (name: string, attempt: number) => Promise<void> | void;

/** A fake API server holding Nodes, with the informer and client views the controller uses. */
class FakeWorld {
  readonly raw = new Map<string, RawNode>();
  readonly events: Array<{ name: string; type: string; reason: string; note: string }> = [];
  readonly patches: Array<{ name: string; podCIDRs: string[] }> = [];
  /** The controller's metrics: the work queue's and the CIDR sets'. */
  readonly registry = new Registry();
  /** Settles when startNodeIpam returns: when stopped, or at once if it runs no controller. */
  finished: Promise<void> = Promise.resolve();
  #handlers: Array<Handlers<LeanNode>> = [];
  #rv = 1;
  /** Runs before a PATCH is applied; throwing fails it. */
  beforePatch: PatchHook = () => {};
  #attempts = new Map<string, number>();

  add(name: string, podCIDRs?: string[]): void {
    const node: RawNode = {
      metadata: { name, uid: `uid-${name}`, resourceVersion: String(this.#rv++) },
      spec: podCIDRs ? { podCIDR: podCIDRs[0] as string, podCIDRs } : {},
      status: { addresses: [{ type: "InternalIP", address: `192.168.0.${this.raw.size + 1}` }] },
    };
    this.raw.set(name, node);
    for (const h of this.#handlers) h.onAdd?.(leanNode(node));
  }

  setPodCIDRs(name: string, podCIDRs: string[]): void {
    const node = this.raw.get(name) as RawNode;
    const old = leanNode(node);
    node.spec = { ...node.spec, podCIDR: podCIDRs[0] as string, podCIDRs };
    node.metadata.resourceVersion = String(this.#rv++);
    for (const h of this.#handlers) h.onUpdate?.(old, leanNode(node));
  }

  remove(name: string): void {
    const node = this.raw.get(name) as RawNode;
    this.raw.delete(name);
    for (const h of this.#handlers) h.onDelete?.(leanNode(node));
  }

  podCIDRs(name: string): string[] {
    return this.raw.get(name)?.spec.podCIDRs ?? [];
  }

  readonly nodes = {
    list: () => [...this.raw.values()].map((n) => leanNode(n)),
    get: (name: string) => {
      const n = this.raw.get(name);
      return n ? leanNode(n) : undefined;
    },
    addHandlers: (h: Handlers<LeanNode>) => {
      this.#handlers.push(h);
      for (const n of this.raw.values()) h.onAdd?.(leanNode(n));
    },
  };

  readonly client = {
    patch: async (path: string, ops: Array<{ op: string; path: string; value: unknown }>) => {
      const name = decodeURIComponent(path.split("/").pop() as string);
      const attempt = (this.#attempts.get(name) ?? 0) + 1;
      this.#attempts.set(name, attempt);
      await this.beforePatch(name, attempt);
      const node = this.raw.get(name);
      if (!node) throw new KubeError(404, "NotFound", `nodes "${name}" not found`);
      if (node.spec.podCIDRs || node.spec.podCIDR) {
        throw new KubeError(
          422,
          "Invalid",
          "the server rejected our request: testing value /spec/podCIDRs failed",
        );
      }
      const podCIDRs = ops.find((o) => o.op === "add" && o.path === "/spec/podCIDRs")?.value as string[];
      this.patches.push({ name, podCIDRs });
      this.setPodCIDRs(name, podCIDRs);
      return {};
    },
    get: async (path: string) => {
      const name = decodeURIComponent(path.split("/").pop() as string);
      const node = this.raw.get(name);
      if (!node) throw new KubeError(404, "NotFound", `nodes "${name}" not found`);
      return structuredClone(node);
    },
  };

  readonly recorder = {
    record: async (target: { name: string }, type: string, reason: string, _action: string, note: string) => {
      this.events.push({ name: target.name, type, reason, note });
    },
  };

  /** A counter of the controller's registry, e.g. `workqueue_retries_total` by queue name. */
  counter(name: string, labels: Record<string, string>): number {
    return this.registry.counter(name, "", Object.keys(labels)).get(labels);
  }

  /** Starts the controller; returns its stop function (which waits for it to finish). */
  start(over: Partial<IpamOptions>): () => Promise<void> {
    const abort = new AbortController();
    const ctx = {
      options: { ipam: ipam({ clusterCidrs: ["10.244.0.0/16"], ...over }) },
      client: this.client,
      nodes: this.nodes,
      events: this.recorder,
      registry: this.registry,
      talos: undefined,
    } as unknown as ControllerContext;
    this.finished = startNodeIpam(ctx, abort.signal);
    return async () => {
      abort.abort();
      await this.finished;
    };
  }
}

describe("startNodeIpam()", () => {
  test("startNodeIpam() occupies what Nodes hold before the first allocation", async () => {
    const world = new FakeWorld();
    world.add("old", ["10.244.0.0/24"]);
    world.add("new");
    const stop = world.start({});
    await until(() => world.podCIDRs("new").length > 0, "an allocation");
    expect(world.podCIDRs("new")).toEqual(["10.244.1.0/24"]);
    expect(world.podCIDRs("old")).toEqual(["10.244.0.0/24"]);
    await stop();
  });

  test("startNodeIpam() never gives two nodes handled concurrently the same range", async () => {
    const world = new FakeWorld();
    // Each patch waits until the test lets it through: every worker holds an allocated node at once,
    // and the batch completes in reverse order.
    const held: Array<() => void> = [];
    world.beforePatch = () => new Promise<void>((resolve) => held.push(resolve));
    for (let i = 0; i < 60; i++) world.add(`n${i}`);
    const stop = world.start({});
    for (let left = 60; left > 0; left -= NODE_IPAM_WORKERS) {
      const batch = Math.min(NODE_IPAM_WORKERS, left);
      await until(() => held.length === batch, `${batch} patches in flight`, 2_000);
      for (const release of held.splice(0).reverse()) release();
    }
    await until(() => world.patches.length === 60, "60 patches");
    const cidrs = world.patches.map((p) => p.podCIDRs[0]);
    expect(new Set(cidrs).size).toBe(60);
    await stop();
  });

  test("startNodeIpam() keeps the range across failed patches of unknown outcome and retries with it", async () => {
    const world = new FakeWorld();
    world.beforePatch = (name, attempt) => {
      if (name === "slow" && attempt <= 3) throw new KubeError(500, "InternalError", "etcd timeout");
    };
    world.add("slow");
    const stop = world.start({});
    await until(() => world.podCIDRs("slow").length > 0, "the retried patch", 10_000);
    const first = world.podCIDRs("slow")[0];
    world.add("other");
    await until(() => world.podCIDRs("other").length > 0, "the second node");
    expect(first).toBe("10.244.0.0/24");
    expect(world.podCIDRs("other")).toEqual(["10.244.1.0/24"]);
    expect(world.events.filter((e) => e.reason === "CIDRAssignmentFailed").map((e) => e.name)).toEqual([
      "slow",
    ]);
    // Each failed patch went back to the queue (with backoff) rather than being retried in the worker.
    expect(world.counter("workqueue_retries_total", { name: "cidrallocator_node" })).toBe(3);
    await stop();
  });

  test("startNodeIpam() releases the range of a refused patch", async () => {
    const world = new FakeWorld();
    world.beforePatch = (name, attempt) => {
      if (name === "refused" && attempt === 1) throw new KubeError(403, "Forbidden", "not allowed");
    };
    world.add("refused");
    // Two ranges only: had the refused attempt leaked its range, "late" would find none.
    const stop = world.start({ clusterCidrs: ["10.250.0.0/23"], nodeCidrMaskSize: 24 });
    await until(() => world.podCIDRs("refused").length > 0, "the retry");
    expect(world.podCIDRs("refused")).toEqual(["10.250.1.0/24"]);
    expect(world.events.filter((e) => e.reason === "CIDRAssignmentFailed").map((e) => e.name)).toEqual([
      "refused",
    ]);
    world.add("late");
    await until(() => world.podCIDRs("late").length > 0, "the released range");
    expect(world.podCIDRs("late")).toEqual(["10.250.0.0/24"]);
    await stop();
  });

  test("startNodeIpam() takes over CIDRs another writer set first instead of overwriting them", async () => {
    const world = new FakeWorld();
    world.beforePatch = (name, attempt) => {
      if (name === "raced" && attempt === 1) world.setPodCIDRs("raced", ["10.244.7.0/24"]);
    };
    world.add("raced");
    const stop = world.start({});
    // The range tentatively taken for "raced" goes back to the pool once the refused patch is settled.
    const releases = { clusterCIDR: "10.244.0.0/16" };
    await until(
      () => world.counter("node_ipam_controller_cidrset_cidrs_releases_total", releases) === 1,
      "the release of the tentative range",
      2_000,
    );
    world.add("next");
    await until(() => world.podCIDRs("next").length > 0, "the next node");
    expect(world.podCIDRs("raced")).toEqual(["10.244.7.0/24"]);
    expect(world.patches.map((p) => p.name)).toEqual(["next"]);
    expect(world.podCIDRs("next")).toEqual(["10.244.1.0/24"]);
    await stop();
  });

  test("startNodeIpam() records CIDRNotAvailable when exhausted and serves the node once a Node is deleted", async () => {
    const world = new FakeWorld();
    world.add("a");
    world.add("b");
    const stop = world.start({ clusterCidrs: ["10.250.0.0/23"], nodeCidrMaskSize: 24 });
    await until(() => world.patches.length === 2, "two allocations");
    world.add("c");
    await until(
      () => world.events.some((e) => e.name === "c" && e.reason === "CIDRNotAvailable"),
      "the event",
    );
    expect(world.events.find((e) => e.reason === "CIDRNotAvailable")?.type).toBe("Warning");
    expect(world.podCIDRs("c")).toEqual([]);
    const freed = world.podCIDRs("a");
    world.remove("a");
    await until(() => world.podCIDRs("c").length > 0, "the freed range");
    expect(world.podCIDRs("c")).toEqual(freed);
    await stop();
  });

  test("startNodeIpam() does nothing without --allocate-node-cidrs", async () => {
    const world = new FakeWorld();
    world.add("n");
    world.start({ allocateNodeCidrs: false });
    // It returns without being stopped: no controller was started.
    await world.finished;
    expect(world.patches).toEqual([]);
  });
});
