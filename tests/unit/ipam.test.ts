import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  type Cidr,
  CidrError,
  formatIP,
  type Prefix,
  parseCidr,
  parsePrefix,
  prefixContains,
  prefixCovers,
  prefixesOverlap,
} from "../../lib/cidr.ts";
import {
  type Allocation,
  Allocator,
  CidrNotAvailableError,
  type NodeNetwork,
  publicIPv6Prefixes,
} from "../../lib/ipamallocator.ts";
import type { AllocatorType } from "../../lib/ipamconfig.ts";
import { cloudSubnet, resolveNodeIpamConfig } from "../../lib/ipamconfig.ts";
import { Registry } from "../../lib/metrics.ts";

interface Setup {
  type: AllocatorType;
  clusterCidrs: string[];
  serviceCidrs?: string[];
  nodeCidrMaskSizeIpv4?: number;
  nodeCidrMaskSizeIpv6?: number;
}

function allocator({ type, ...flags }: Setup, registry = new Registry()): Allocator {
  return new Allocator({ type, registry, ...resolveNodeIpamConfig(flags) });
}

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error("expected an error");
}

const dualCloud: Setup = {
  type: "CloudAllocator",
  clusterCidrs: ["10.244.0.0/16", "fd00:10:244::/64"],
  serviceCidrs: ["10.96.0.0/12", "fd00:10:96::/112"],
};

describe("Allocator CloudAllocator", () => {
  test("allocate() gives a node with a public /64 an /80 of its own /64, never the one holding its address", () => {
    const ipam = allocator(dualCloud);
    const got = ipam.allocate("w1", { addresses: ["2001:db8:1:2::5/64", "10.0.0.5/24", "fd00::5/64"] });
    expect(got).toEqual({ podCIDRs: ["10.244.0.0/24", "2001:db8:1:2:1::/80"], isNew: true, warnings: [] });
  });

  test("allocate() gives a node in a /56 an /80 of the /64 holding its address", () => {
    const ipam = allocator(dualCloud);
    const got = ipam.allocate("w1", { addresses: ["2001:db8:1:2ab:3::7/56"] });
    expect(got.podCIDRs).toEqual(["10.244.0.0/24", "2001:db8:1:2ab::/80"]);
    // The nodes' own addresses sit in 2001:db8:1:2ab:3::/80, which stays reserved.
    const next = ipam.allocate("w2", { addresses: ["2001:db8:1:2ab:3::9/56"] });
    expect(next.podCIDRs[1]).toBe("2001:db8:1:2ab:1::/80");
    const taken = [got.podCIDRs[1], next.podCIDRs[1]];
    for (let i = 3; i < 6; i++)
      taken.push(ipam.allocate(`w${i}`, { addresses: ["2001:db8:1:2ab:3::9/56"] }).podCIDRs[1]);
    expect(taken).toEqual([
      "2001:db8:1:2ab::/80",
      "2001:db8:1:2ab:1::/80",
      "2001:db8:1:2ab:2::/80",
      "2001:db8:1:2ab:4::/80",
      "2001:db8:1:2ab:5::/80",
    ]);
  });

  test.each([
    ["only unique-local addresses", ["fd00::5/64", "10.0.0.5/24"]],
    ["only a /128", ["2001:db8:9::5/128", "10.0.0.5/24"]],
    ["only link-local", ["fe80::1/64"]],
    ["no addresses at all", []],
  ])("allocate() falls back to the cluster IPv6 CIDR for a node with %s", (_name, addresses) => {
    const ipam = allocator(dualCloud);
    const got = ipam.allocate("w1", { addresses });
    expect(got).toEqual({ podCIDRs: ["10.244.0.0/24", "fd00:10:244::/80"], isNew: true, warnings: [] });
  });

  test("allocate() falls back with warnings when the public prefix is too small", () => {
    const ipam = allocator(dualCloud);
    const got = ipam.allocate("w1", { addresses: ["2001:db8::5/124", "2001:db8:1::5/122"] });
    expect(got.podCIDRs).toEqual(["10.244.0.0/24", "fd00:10:244::/80"]);
    expect(got.warnings).toEqual([
      "Skipped prefix for node w1: Cannot carve pod CIDRs from 2001:db8::5/124: the prefix is too small (/124 or longer)",
      "Skipped prefix for node w1: Cannot carve pod CIDRs from 2001:db8:1::5/122: a /123 provides only 30 addresses for 110 pods",
      "Node w1 gets its IPv6 pod CIDR from the cluster CIDR",
    ]);
    // With a pod capacity that fits, the /122 is used.
    const small = ipam.allocate("w2", { addresses: ["2001:db8:1::5/122"], maxPods: 20 });
    expect(small.podCIDRs[1]).toBe("2001:db8:1::20/123");
  });

  test("allocate() uses the next public prefix when the first is exhausted, then fails with CIDRNotAvailable", () => {
    const ipam = allocator(dualCloud);
    // A /120 gives two /121s; the node addresses reserve the lower one.
    const a = { addresses: ["2001:db8::5/120", "2001:db8:1::5/120"], maxPods: 100 };
    expect(ipam.allocate("w1", a).podCIDRs[1]).toBe("2001:db8::80/121");
    expect(ipam.allocate("w2", a).podCIDRs[1]).toBe("2001:db8:1::80/121");
    const err = thrown(() => ipam.allocate("w3", a));
    expect(err).toBeInstanceOf(CidrNotAvailableError);
    expect(err).toMatchObject({ code: "CIDRNotAvailable", node: "w3", clusterCIDR: "2001:db8:1::/120" });
    expect((err as Error).message).toBe(
      "Cannot allocate a pod CIDR for node w3: no free CIDR left in 2001:db8:1::/120",
    );
    // All or nothing: the IPv4 CIDR taken before the IPv6 failure is back in the pool.
    expect(ipam.podCIDRs("w3")).toBeUndefined();
    expect(ipam.status()[0]).toMatchObject({ clusterCIDR: "10.244.0.0/16", used: 2 });
  });

  test("allocate() only considers the node's public IPv6 node IPs' prefixes when it has such node IPs", () => {
    const ipam = allocator(dualCloud);
    const network = {
      addresses: ["2001:db8:aa::5/64", "2001:db8:bb::5/64"],
      nodeIPs: ["10.0.0.5", "2001:db8:bb::5"],
    };
    expect(ipam.allocate("w1", network).podCIDRs[1]).toBe("2001:db8:bb:0:1::/80");
  });

  test("occupy() at start rebuilds a discovered subnet, so a restart never duplicates a CIDR (weakness 7)", () => {
    const before = allocator(dualCloud);
    const first = before.allocate("w1", { addresses: ["2001:db8:1:2::5/64"] }).podCIDRs;
    // Restart without the node's addresses: the held /80 must still be taken when the /64 reappears.
    const after = allocator(dualCloud);
    expect(after.occupy("w1", first)).toEqual([]);
    const second = after.allocate("w2", { addresses: ["2001:db8:1:2::6/64"] }).podCIDRs;
    expect(second).toEqual(["10.244.1.0/24", "2001:db8:1:2:2::/80"]);
  });

  test("occupy() names duplicates the reference left behind, even outside every known range", () => {
    const ipam = allocator(dualCloud);
    expect(ipam.occupy("a", ["10.244.0.0/24", "2001:db8:1:2:1::/80"])).toEqual([]);
    expect(ipam.occupy("b", ["10.244.1.0/24", "2001:db8:1:2:1::/80"])).toEqual([
      "Pod CIDR 2001:db8:1:2:1::/80 of node b overlaps 2001:db8:1:2:1::/80 of node a",
    ]);
    expect(ipam.occupy("c", ["10.96.0.0/24"])).toEqual([
      "Pod CIDR 10.96.0.0/24 of node c overlaps service CIDR 10.96.0.0/12",
      "Pod CIDR 10.96.0.0/24 of node c is outside every cluster CIDR",
    ]);
    // Both holders keep the duplicate out of the pool until the last one goes.
    ipam.release("a");
    const next = ipam.allocate("d", { addresses: ["2001:db8:1:2::5/64"] }).podCIDRs[1];
    expect(next).toBe("2001:db8:1:2:2::/80");
  });

  test("release() frees a node's CIDRs and its addresses' reservations, but not subnets another node still needs", () => {
    const ipam = allocator(dualCloud);
    ipam.allocate("w1", { addresses: ["2001:db8:1:2::5/64"] });
    ipam.allocate("w2", { addresses: ["2001:db8:1:2::6/64"] });
    expect(ipam.release("w1")).toEqual(["10.244.0.0/24", "2001:db8:1:2:1::/80"]);
    expect(ipam.release("w1")).toEqual([]);
    const subnet = ipam.status().find((s) => s.clusterCIDR === "2001:db8:1:2::/64");
    // w2's /80 and the /80 holding w2's address.
    expect(subnet?.used).toBe(2);
    ipam.release("w2");
    // Nothing left in the discovered subnet: it is dropped and rebuilt on demand.
    expect(ipam.status().map((s) => s.clusterCIDR)).toEqual(["10.244.0.0/16", "fd00:10:244::/64"]);
  });

  test("allocate() ignores a single-stack IPv4 cluster's lack of IPv6", () => {
    const ipam = allocator({ type: "CloudAllocator", clusterCidrs: ["10.244.0.0/16"] });
    expect(ipam.allocate("w1", { addresses: ["2001:db8:1:2::5/64"] }).podCIDRs).toEqual(["10.244.0.0/24"]);
  });

  test("allocate() never hands an IPv4 node a range holding its own address", () => {
    const ipam = allocator({ type: "CloudAllocator", clusterCidrs: ["10.0.0.0/16"] });
    expect(ipam.allocate("w1", { addresses: ["10.0.0.5/16"] }).podCIDRs).toEqual(["10.0.1.0/24"]);
  });
});

describe("Allocator RangeAllocator", () => {
  test("allocate() follows the cluster CIDRs' order and is idempotent", () => {
    const ipam = allocator({
      type: "RangeAllocator",
      clusterCidrs: ["fd00:10:244::/56", "10.244.0.0/16"],
      nodeCidrMaskSizeIpv6: 64,
    });
    const first = ipam.allocate("w1");
    expect(first).toEqual({ podCIDRs: ["fd00:10:244::/64", "10.244.0.0/24"], isNew: true, warnings: [] });
    expect(ipam.allocate("w1")).toEqual({ ...first, isNew: false });
    expect(ipam.podCIDRs("w1")).toEqual(first.podCIDRs);
    expect(ipam.allocate("w2").podCIDRs).toEqual(["fd00:10:244:1::/64", "10.244.1.0/24"]);
  });

  test("allocate() ignores public prefixes and keeps node addresses out", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["2001:db8::/64"] });
    expect(ipam.allocate("w1", { addresses: ["2001:db8::5/64"] }).podCIDRs).toEqual(["2001:db8:0:0:1::/80"]);
  });

  test("the service range is reserved inside the cluster CIDR", () => {
    const ipam = allocator({
      type: "RangeAllocator",
      clusterCidrs: ["10.0.0.0/22"],
      serviceCidrs: ["10.0.0.0/23"],
    });
    expect(ipam.allocate("w1").podCIDRs).toEqual(["10.0.2.0/24"]);
    expect(ipam.allocate("w2").podCIDRs).toEqual(["10.0.3.0/24"]);
    expect(thrown(() => ipam.allocate("w3"))).toMatchObject({
      code: "CIDRNotAvailable",
      clusterCIDR: "10.0.0.0/22",
    });
  });

  test("occupy() before allocate() keeps existing CIDRs, and releasing makes them available again", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/22"] });
    expect(ipam.occupy("old1", ["10.0.0.0/24"])).toEqual([]);
    expect(ipam.occupy("old2", ["10.0.2.0/24"])).toEqual([]);
    expect(ipam.allocate("new1").podCIDRs).toEqual(["10.0.1.0/24"]);
    expect(ipam.allocate("new2").podCIDRs).toEqual(["10.0.3.0/24"]);
    expect(thrown(() => ipam.allocate("new3"))).toBeInstanceOf(CidrNotAvailableError);
    ipam.release("old2");
    expect(ipam.allocate("new3").podCIDRs).toEqual(["10.0.2.0/24"]);
  });

  test("occupy() warns about CIDRs outside every cluster CIDR and CIDRs another node holds", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/16", "fd00::/64"] });
    expect(ipam.occupy("a", ["10.0.1.0/24"])).toEqual([]);
    expect(ipam.occupy("b", ["10.0.1.0/25", "fd01::/80"])).toEqual([
      "Pod CIDR 10.0.1.0/25 of node b overlaps 10.0.1.0/24 of node a",
      "Pod CIDR fd01::/80 of node b is outside every cluster CIDR",
    ]);
    // Releasing one holder keeps the subnet the other still holds.
    ipam.release("a");
    expect(ipam.allocate("c").podCIDRs[0]).toBe("10.0.0.0/24");
    expect(ipam.allocate("d").podCIDRs[0]).toBe("10.0.2.0/24");
  });

  test("occupy() with new CIDRs replaces what the node held, and host bits are cleared", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/22"] });
    ipam.allocate("a");
    expect(ipam.occupy("a", ["10.0.3.7/24"])).toEqual([]);
    expect(ipam.podCIDRs("a")).toEqual(["10.0.3.0/24"]);
    expect(ipam.allocate("b").podCIDRs).toEqual(["10.0.1.0/24"]);
    expect(ipam.allocate("c").podCIDRs).toEqual(["10.0.2.0/24"]);
    expect(ipam.allocate("d").podCIDRs).toEqual(["10.0.0.0/24"]);
  });

  test("occupy() refuses garbage without recording anything", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/22"] });
    const err = thrown(() => ipam.occupy("a", ["10.0.0.0/24", "10.0.1.0"]));
    expect(err).toBeInstanceOf(CidrError);
    expect((err as CidrError).code).toBe("invalid-prefix");
    expect(ipam.podCIDRs("a")).toBeUndefined();
    expect(ipam.status()[0]?.used).toBe(0);
  });

  test("allocate() reports unparsable node addresses as warnings", () => {
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/22"] });
    expect(ipam.allocate("a", { addresses: ["bogus"], nodeIPs: ["10.0.0.01"] }).warnings).toEqual([
      'Ignored node address "bogus": not <address>/<length>',
      'Ignored node IP "10.0.0.01": not an IP address',
    ]);
  });

  test("new Allocator() refuses impossible configurations", () => {
    const cfg = resolveNodeIpamConfig({ clusterCidrs: ["10.0.0.0/16"] });
    expect(() => new Allocator({ ...cfg, type: "Bogus" as AllocatorType })).toThrow(
      "Cannot create allocator: unknown type Bogus",
    );
    expect(() => new Allocator({ ...cfg, type: "RangeAllocator", nodeMaskSizes: [8] })).toThrow(
      "Cannot configure node IPAM: node mask /8 (--node-cidr-mask-size-ipv4) is shorter than cluster CIDR 10.0.0.0/16",
    );
  });

  test("Allocator reports cidrset metrics to the injected registry", () => {
    const registry = new Registry();
    const ipam = allocator({ type: "RangeAllocator", clusterCidrs: ["10.0.0.0/22"] }, registry);
    ipam.allocate("a");
    ipam.allocate("b");
    ipam.release("a");
    const text = registry.expose();
    expect(text).toContain(
      'node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR="10.0.0.0/22"} 2',
    );
    expect(text).toContain('node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR="10.0.0.0/22"} 1');
    expect(text).toContain('node_ipam_controller_cidrset_usage_cidrs{clusterCIDR="10.0.0.0/22"} 0.25');
    expect(text).toContain('node_ipam_controller_cirdset_max_cidrs{clusterCIDR="10.0.0.0/22"} 4');
    expect(text).toContain(
      'node_ipam_controller_cidrset_allocation_tries_per_request_count{clusterCIDR="10.0.0.0/22"} 2',
    );
  });
});

describe("Allocator metrics", () => {
  test("allocate() again with the same addresses does not churn the subnet their reservation holds", () => {
    const registry = new Registry();
    const ipam = allocator(dualCloud, registry);
    const network = { addresses: ["2001:db8:1:2::5/64"], nodeIPs: ["2001:db8:1:2::5"] };
    ipam.allocate("w1", network);
    ipam.allocate("w1", network);
    const labels = { clusterCIDR: "2001:db8:1:2::/64" };
    expect(
      registry
        .counter("node_ipam_controller_cidrset_cidrs_allocations_total", "", ["clusterCIDR"])
        .get(labels),
    ).toBe(2);
    expect(
      registry.counter("node_ipam_controller_cidrset_cidrs_releases_total", "", ["clusterCIDR"]).get(labels),
    ).toBe(0);
  });
});

describe("publicIPv6Prefixes()", () => {
  test.each([
    [
      { addresses: ["2001:db8::5/64", "fd00::5/64", "fe80::1/64", "10.0.0.5/24", "::ffff:8.8.8.8/120"] },
      ["2001:db8::5/64"],
    ],
    [{ addresses: ["2001:db8::5/128", "2001:db8::6/64", "2001:db8::6/64"] }, ["2001:db8::6/64"]],
    [{ addresses: ["2001:db8:a::5/64", "2001:db8:b::5/56"] }, ["2001:db8:a::5/64", "2001:db8:b::5/56"]],
    [
      { addresses: ["2001:db8:a::5/64", "2001:db8:b::5/64"], nodeIPs: ["2001:db8:b::5"] },
      ["2001:db8:b::5/64"],
    ],
    [{ addresses: ["2001:db8:a::5/64"], nodeIPs: ["fd00::1", "10.0.0.1"] }, ["2001:db8:a::5/64"]],
    [{ addresses: ["garbage", "2001:db8:a::5/64"] }, ["2001:db8:a::5/64"]],
  ])("publicIPv6Prefixes(%o) is %p", (network, expected) => {
    expect(publicIPv6Prefixes(network).map((c) => `${formatIP(c.ip)}/${c.prefix.bits}`)).toEqual(expected);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: thousands of random add/delete/restart steps never yield overlapping, out-of-range or
// still-held ranges, and never give a node a range containing one of its own addresses.

const addressPool = [
  // Public /64s shared by several nodes; addresses spread over a few /80s so reservations collide.
  fc
    .tuple(
      fc.constantFrom("2001:db8:a:1", "2001:db8:a:2"),
      fc.integer({ min: 0, max: 3 }),
      fc.integer({ min: 1, max: 9 }),
    )
    .map(([net, sub, host]) => `${net}:${sub}::${host}/64`),
  // A /56: the node's /64 is the one holding its address.
  fc
    .tuple(
      fc.constantFrom("2001:db8:b:1a0", "2001:db8:b:1a1"),
      fc.integer({ min: 0, max: 2 }),
      fc.integer({ min: 1, max: 9 }),
    )
    .map(([net, sub, host]) => `${net}:${sub}::${host}/56`),
  // Tiny public prefixes: a /120 (two /121s), a /122 (too small for 110 pods), a /124 (refused).
  fc
    .tuple(fc.constantFrom("120", "122", "124"), fc.integer({ min: 1, max: 15 }))
    .map(([bits, host]) => `2001:db8:c::${host}/${bits}`),
  fc.integer({ min: 1, max: 9 }).map((host) => `fd00:1::${host}/64`),
  fc.integer({ min: 1, max: 9 }).map((host) => `2001:db8:d::${host}/128`),
  fc.integer({ min: 1, max: 9 }).map((host) => `fe80::${host}/64`),
  fc.integer({ min: 1, max: 250 }).map((host) => `192.168.1.${host}/24`),
  // Inside the IPv4 and IPv6 cluster CIDRs: those subnets must never go to the node.
  fc
    .tuple(fc.integer({ min: 0, max: 7 }), fc.integer({ min: 1, max: 250 }))
    .map(([net, host]) => `10.244.${net}.${host}/16`),
  fc.integer({ min: 1, max: 0xfff }).map((host) => `fd00:10:244::${host.toString(16)}/64`),
];

const NODE_NAMES = 12;
const nodeName = fc.integer({ min: 0, max: NODE_NAMES - 1 }).map((i) => `n${i}`);
const network = fc.record(
  {
    addresses: fc.array(fc.oneof(...addressPool), { maxLength: 4 }),
    maxPods: fc.constantFrom(110, 100, 20),
  },
  { requiredKeys: ["addresses"] },
);
const step = fc.oneof(
  { weight: 6, arbitrary: fc.record({ op: fc.constant("add" as const), node: nodeName, network }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant("delete" as const), node: nodeName }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("restart" as const), withAddresses: fc.boolean() }) },
);
const setups: Setup[] = [];
for (const type of ["RangeAllocator", "CloudAllocator"] as const) {
  const v4 = "10.244.0.0/21";
  const v6 = "fd00:10:244::/116";
  const masks = { nodeCidrMaskSizeIpv6: 120 };
  setups.push(
    { type, clusterCidrs: [v4], serviceCidrs: ["10.244.7.0/24"] },
    { type, clusterCidrs: [v6], serviceCidrs: ["fd00:10:244::f00/120"], ...masks },
    { type, clusterCidrs: [v4, v6], serviceCidrs: ["10.96.0.0/12", "fd00:10:244::800/117"], ...masks },
    { type, clusterCidrs: [v6, v4], ...masks },
  );
}

interface Live {
  podCIDRs: string[];
  network: NodeNetwork;
}

/** Where a node's IPv6 CIDR may come from: the usable subnets of its public prefixes, else the cluster. */
function ipv6Sources(
  type: AllocatorType,
  cluster: Prefix,
  mask: number,
  n: NodeNetwork,
): Array<[Prefix, number]> {
  if (type === "RangeAllocator") return [[cluster, mask]];
  const usable: Array<[Prefix, number]> = [];
  for (const c of publicIPv6Prefixes(n)) {
    try {
      const sub = cloudSubnet(c, n.maxPods);
      usable.push([sub.subnet, sub.nodeMaskBits]);
    } catch {
      // Too small: skipped by the allocator too.
    }
  }
  return usable.length > 0 ? usable : [[cluster, mask]];
}

function ownIPs(n: NodeNetwork): Cidr["ip"][] {
  return (n.addresses ?? []).map((a) => parseCidr(a).ip);
}

function checkAllocation(
  setup: Setup,
  node: string,
  n: NodeNetwork,
  got: Allocation,
  live: Map<string, Live>,
): void {
  const cfg = resolveNodeIpamConfig(setup);
  expect(got.podCIDRs).toHaveLength(cfg.clusterCIDRs.length);
  got.podCIDRs.forEach((text, i) => {
    const p = parsePrefix(text);
    const cluster = cfg.clusterCIDRs[i] as Prefix;
    const mask = cfg.nodeMaskSizes[i] as number;
    expect(p.family).toBe(cluster.family);
    // In range: inside the cluster CIDR with its node mask, or inside one of the node's subnets.
    const sources =
      cluster.family === 4
        ? [[cluster, mask] as [Prefix, number]]
        : ipv6Sources(setup.type, cluster, mask, n);
    expect(sources.some(([range, bits]) => prefixCovers(range, p) && p.bits === bits)).toBe(true);
    // Never a service range.
    for (const s of cfg.serviceCIDRs) expect(prefixesOverlap(s, p)).toBe(false);
    // Never one of the node's own addresses.
    for (const ip of ownIPs(n)) expect(prefixContains(p, ip)).toBe(false);
    // Never a range another live node holds.
    for (const [other, l] of live) {
      if (other === node) continue;
      for (const q of l.podCIDRs) expect(prefixesOverlap(parsePrefix(q), p)).toBe(false);
    }
  });
}

describe("Allocator property", () => {
  test("random add/delete/restart steps never yield overlapping, out-of-range, held or own-address ranges", () => {
    let steps = 0;
    let allocations = 0;
    let exhausted = 0;
    fc.assert(
      fc.property(
        fc.constantFrom(...setups),
        fc.array(step, { minLength: 1, maxLength: 80, size: "max" }),
        (setup, ops) => {
          let ipam = allocator(setup);
          const live = new Map<string, Live>();
          for (const s of ops) {
            steps++;
            if (s.op === "add") {
              const held = live.get(s.node);
              let got: Allocation;
              try {
                got = ipam.allocate(s.node, s.network);
              } catch (err) {
                // Exhaustion is the only failure, and only for a node that holds nothing.
                expect(err).toBeInstanceOf(CidrNotAvailableError);
                expect(held).toBeUndefined();
                const range = ipam
                  .status()
                  .find((r) => r.clusterCIDR === (err as CidrNotAvailableError).clusterCIDR);
                expect(range?.used).toBe(range?.max);
                expect(ipam.podCIDRs(s.node)).toBeUndefined();
                exhausted++;
                continue;
              }
              if (held) {
                expect(got.isNew).toBe(false);
                expect(got.podCIDRs).toEqual(held.podCIDRs);
                held.network = s.network;
                continue;
              }
              expect(got.isNew).toBe(true);
              checkAllocation(setup, s.node, s.network, got, live);
              live.set(s.node, { podCIDRs: got.podCIDRs, network: s.network });
              allocations++;
            } else if (s.op === "delete") {
              expect(ipam.release(s.node)).toEqual(live.get(s.node)?.podCIDRs ?? []);
              live.delete(s.node);
            } else {
              ipam = allocator(setup);
              for (const [name, l] of live) {
                const warnings = ipam.occupy(name, l.podCIDRs, s.withAddresses ? l.network : {});
                expect(warnings).toEqual([]);
              }
            }
            for (const [name, l] of live) expect(ipam.podCIDRs(name)).toEqual(l.podCIDRs);
          }
          // Nothing leaks: with every node gone (including those that got nothing but whose addresses
          // stay reserved while they exist), only the service ranges stay reserved.
          for (let i = 0; i < NODE_NAMES; i++) ipam.release(`n${i}`);
          expect(ipam.status()).toEqual(allocator(setup).status());
        },
      ),
      { numRuns: 300 },
    );
    // The run must have exercised the interesting paths, not just trivially passed.
    expect(steps).toBeGreaterThan(5000);
    expect(allocations).toBeGreaterThan(1000);
    expect(exhausted).toBeGreaterThan(10);
  });
});
