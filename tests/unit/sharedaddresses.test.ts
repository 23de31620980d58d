// Names and addresses that identify no single machine: the pure parts of the CSR threat model.

import { describe, expect, test } from "bun:test";
import { parseIP } from "../../lib/cidr.ts";
import { controlPlaneName } from "../../lib/csrnetworks.ts";
import {
  addressesOnSharedLinks,
  ClusterNetworks,
  canonicalDNS,
  entryHolding,
  reservedName,
  specialIP,
  subnetEdgeOf,
} from "../../lib/sharedaddresses.ts";

describe("canonicalDNS()", () => {
  const rows: Array<[string, string]> = [
    ["Node-B", "node-b"],
    ["node-b.", "node-b"],
    ["NODE-B.EXAMPLE.COM.", "node-b.example.com"],
    ["node-b..", "node-b."],
    // Only ASCII letters fold: the Kelvin sign is not a k.
    ["wor\u212aer", "wor\u212aer"],
  ];
  for (const [name, want] of rows) {
    test(`canonicalDNS(${JSON.stringify(name)}) is ${JSON.stringify(want)}`, () => {
      expect(canonicalDNS(name)).toBe(want);
    });
  }
});

describe("reservedName()", () => {
  const refused = [
    "localhost",
    "LocalHost.",
    "a.localhost",
    "localhost.localdomain",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc.cluster.local",
    "web.prod.svc",
    "web.prod.svc.cluster.local",
    "10-0-0-1.prod.pod.cluster.local",
    "",
    ".",
    "node-b..",
    "-node",
    "node_b",
    // Read as IP addresses by inet_aton and URL parsers, or by Windows.
    "10.0.0.2",
    "10.2",
    "167772162",
    "0xa.0.0.2",
    "012.0.0.2",
    "node-b.123",
    "node-b.0x1f",
    "2001-db8--1.ipv6-literal.net",
  ];
  for (const name of refused) {
    test(`reservedName(${JSON.stringify(name)}) refuses it`, () => {
      expect(reservedName(name)).toBeString();
    });
  }
  const allowed = [
    "worker-a",
    "worker-a.example.com",
    "Worker-A.",
    "svc.example.com",
    "ip-10-0-0-1.ec2.internal",
    "10-0-0-2.nip.io",
    "node-0x1f",
  ];
  for (const name of allowed) {
    test(`reservedName(${JSON.stringify(name)}) allows it`, () => {
      expect(reservedName(name)).toBeUndefined();
    });
  }
});

describe("specialIP()", () => {
  const refused = [
    "0.0.0.0",
    "0.255.0.1",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.0.1",
    "224.0.0.251",
    "239.1.1.1",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::a00:1",
    "fe80::1",
    "febf::1",
    "fec0::1",
    "ff02::1",
    "64:ff9b::a00:1",
    "64:ff9b:1::a00:1",
    "2002:a00:1::1",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",
    "::ffff:0:a00:1",
    "2001:db8::5efe:a00:1",
    "2001:db8::200:5efe:a00:1",
    "100::1",
    "::ffff:127.0.0.1",
  ];
  for (const ip of refused) {
    test(`specialIP(${ip}) refuses it`, () => {
      expect(specialIP(parseIP(ip))).toBeString();
    });
  }
  const allowed = [
    "10.0.0.1",
    "192.168.1.5",
    "100.64.0.1",
    "203.0.113.7",
    "2001:db8::1",
    "fd00::1",
    "::ffff:10.0.0.1",
    "2001:db8::a00:1",
    "2003::a00:1",
  ];
  for (const ip of allowed) {
    test(`specialIP(${ip}) allows it`, () => {
      expect(specialIP(parseIP(ip))).toBeUndefined();
    });
  }
});

describe("ClusterNetworks", () => {
  test("ClusterNetworks finds the range and the shared name, with their source", () => {
    const n = new ClusterNetworks();
    n.set("flag/service", "a Service CIDR (--service-cluster-ip-range)", {
      cidrs: ["10.96.0.0/12", "fd00:96::/112"],
    });
    n.set("service/kubernetes", "the kubernetes ClusterIP", { cidrs: ["10.0.0.100/32"] });
    n.set("kubeconfig/server", "the API server endpoint", { names: ["CP.Example.com."] });
    expect(n.rangeOf(parseIP("10.111.2.3"))).toBe(
      "in 10.96.0.0/12, a Service CIDR (--service-cluster-ip-range)",
    );
    expect(n.rangeOf(parseIP("::ffff:10.96.0.1"))).toContain("10.96.0.0/12");
    expect(n.rangeOf(parseIP("fd00:96::ffff"))).toContain("fd00:96::/112");
    expect(n.rangeOf(parseIP("10.112.0.1"))).toBeUndefined();
    expect(n.rangeOf(parseIP("::ffff:10.0.0.100"))).toBe("in 10.0.0.100/32, the kubernetes ClusterIP");
    expect(n.sharedName("cp.example.com")).toBe("the API server endpoint");
    expect(n.sharedName("cp.example.org")).toBeUndefined();
  });

  test("ClusterNetworks replaces and forgets a source's entries, keeping another source's equal ones", () => {
    const n = new ClusterNetworks();
    n.set("a", "A", { cidrs: ["10.96.0.0/12"] });
    n.set("b", "B", { cidrs: ["10.96.0.0/12"] });
    n.set("a", "A", { cidrs: ["10.200.0.0/16"] });
    expect(n.rangeOf(parseIP("10.96.0.1"))).toContain("B");
    expect(n.rangeOf(parseIP("10.200.0.1"))).toContain("A");
    n.delete("b");
    expect(n.rangeOf(parseIP("10.96.0.1"))).toBeUndefined();
    n.delete("a");
    expect(n.rangeOf(parseIP("10.200.0.1"))).toBeUndefined();
    expect(n.sources().size).toBe(0);
  });

  test("ClusterNetworks' generation moves when a source's entries change, not when they are set again", () => {
    const n = new ClusterNetworks();
    const g0 = n.generation;
    n.set("node/a", "A", { cidrs: ["10.244.1.0/24"] });
    const g1 = n.generation;
    expect(g1).toBeGreaterThan(g0);
    n.set("node/a", "A", { cidrs: ["10.244.1.0/24"] });
    n.set("node/b", "B", { cidrs: [] });
    n.delete("node/missing");
    expect(n.generation).toBe(g1);
    n.set("node/a", "A", { cidrs: ["10.244.2.0/24"] });
    const g2 = n.generation;
    expect(g2).toBeGreaterThan(g1);
    n.set("node/a", "A, renamed", { cidrs: ["10.244.2.0/24"] });
    expect(n.generation).toBeGreaterThan(g2);
    const g3 = n.generation;
    n.delete("node/a");
    expect(n.generation).toBeGreaterThan(g3);
    expect(n.rangeOf(parseIP("10.244.2.1"))).toBeUndefined();
  });

  test("ClusterNetworks reports entries that are not CIDRs, and keeps the rest", () => {
    const n = new ClusterNetworks();
    expect(n.set("x", "X", { cidrs: ["10.0.0.0/8", "bogus", "10.0.0.0/33", "10.0.0.1"] })).toEqual([
      "bogus",
      "10.0.0.0/33",
      "10.0.0.1",
    ]);
    expect(n.rangeOf(parseIP("10.1.2.3"))).toContain("X");
  });

  test("ClusterNetworks reads an IPv4-mapped range as the IPv4 range, and a sloppy one in every reading", () => {
    const n = new ClusterNetworks();
    expect(n.set("x", "X", { cidrs: ["::ffff:10.96.0.0/108", "010.244.0.0/16"] })).toEqual([]);
    expect(n.rangeOf(parseIP("10.100.0.1"))).toBe("in 10.96.0.0/12, X");
    expect(n.rangeOf(parseIP("10.244.3.4"))).toBe("in 10.244.0.0/16, X");
    expect(n.rangeOf(parseIP("8.244.3.4"))).toBe("in 8.244.0.0/16, X");
  });

  test("ClusterNetworks finds the one node whose pod CIDR holds an address among 5,000, and the most specific range first", () => {
    const n = new ClusterNetworks();
    for (let i = 0; i < 5000; i++) {
      n.set(`node/n${i}`, `the pod CIDR of node "n${i}"`, { cidrs: [`10.${64 + (i >> 8)}.${i & 255}.0/24`] });
    }
    expect(n.rangeOf(parseIP("10.83.135.1"))).toContain(`"n${(19 << 8) | 135}"`);
    expect(n.rangeOf(parseIP("10.200.0.1"))).toBeUndefined();
    // A wider range over them all is named only for addresses no node's range holds.
    n.set("flag/cluster", "the pod network (--cluster-cidr)", { cidrs: ["10.64.0.0/10"] });
    expect(n.rangeOf(parseIP("10.83.135.1"))).toContain(`"n${(19 << 8) | 135}"`);
    expect(n.rangeOf(parseIP("10.100.0.1"))).toBe("in 10.64.0.0/10, the pod network (--cluster-cidr)");
    n.delete("flag/cluster");
    expect(n.rangeOf(parseIP("10.100.0.1"))).toBeUndefined();
  });
});

describe("addressesOnSharedLinks()", () => {
  const addr = (address: string, linkName: string, scope = 0) => ({ address, linkName, scope });
  test("addressesOnSharedLinks() names the addresses on loopback, dummy, tunnel and unknown links", () => {
    const got = addressesOnSharedLinks(
      [
        addr("10.0.0.1/24", "eth0"),
        addr("10.0.1.1/24", "br0"),
        addr("10.0.2.1/24", "bond0.100"),
        addr("fd50::1/128", "kubespan"),
        addr("203.0.113.9/32", "external"),
        addr("127.0.0.1/8", "lo", 254),
        addr("10.255.0.1/32", "lo"),
        addr("10.96.0.10/32", "kube-ipvs0"),
        addr("10.0.3.1/32", "vxlan.calico"),
        addr("10.0.4.1/32", "ghost0"),
        addr("10.0.5.1/32", "eth0", 254),
      ],
      [
        { name: "lo", type: 772, kind: "" },
        { name: "eth0", type: 1, kind: "" },
        { name: "br0", type: 1, kind: "bridge" },
        { name: "bond0.100", type: 1, kind: "vlan" },
        { name: "kubespan", type: 65534, kind: "wireguard" },
        { name: "kube-ipvs0", type: 1, kind: "dummy" },
        { name: "vxlan.calico", type: 1, kind: "vxlan" },
      ],
    );
    expect([...got.keys()]).toEqual([
      "127.0.0.1",
      "10.255.0.1",
      "10.96.0.10",
      "10.0.3.1",
      "10.0.4.1",
      "10.0.5.1",
    ]);
    expect(got.get("10.96.0.10")).toContain("dummy");
    expect(got.get("10.0.4.1")).toContain("no status");
  });

  test("addressesOnSharedLinks() keys an IPv4-mapped address by the IPv4 address", () => {
    const got = addressesOnSharedLinks(
      [addr("::ffff:10.96.0.10/128", "kube-ipvs0")],
      [{ name: "kube-ipvs0", type: 1, kind: "dummy" }],
    );
    expect([...got.keys()]).toEqual(["10.96.0.10"]);
  });
});

describe("subnetEdgeOf() and entryHolding()", () => {
  test("subnetEdgeOf() finds the network and broadcast addresses of the machine's IPv4 subnets only", () => {
    const own = ["10.0.0.5/24", "192.168.7.1/31", "2001:db8::5/64"];
    expect(subnetEdgeOf(parseIP("10.0.0.0"), own)).toBe("10.0.0.0/24");
    expect(subnetEdgeOf(parseIP("10.0.0.255"), own)).toBe("10.0.0.0/24");
    expect(subnetEdgeOf(parseIP("10.0.0.5"), own)).toBeUndefined();
    expect(subnetEdgeOf(parseIP("192.168.7.0"), own)).toBeUndefined();
    expect(subnetEdgeOf(parseIP("2001:db8::"), own)).toBeUndefined();
    // Talos may report an IPv4 address IPv4-mapped: its subnet is the IPv4 one.
    expect(subnetEdgeOf(parseIP("10.1.0.255"), ["::ffff:10.1.0.7/120"])).toBe("10.1.0.0/24");
  });

  test("entryHolding() reads CIDRs and bare IPs, as NodeIPConfig holds them", () => {
    const entries = ["10.244.0.0/16", " 10.0.0.100 ", "fd00::/8", "junk"];
    expect(entryHolding(parseIP("10.244.9.9"), entries)).toBe("10.244.0.0/16");
    expect(entryHolding(parseIP("10.0.0.100"), entries)).toBe("10.0.0.100");
    expect(entryHolding(parseIP("::ffff:10.0.0.100"), entries)).toBe("10.0.0.100");
    expect(entryHolding(parseIP("fd12::1"), entries)).toBe("fd00::/8");
    expect(entryHolding(parseIP("10.0.0.101"), entries)).toBeUndefined();
  });

  test("entryHolding() applies an IPv4-mapped prefix or address to IPv4 addresses", () => {
    const entries = ["::ffff:10.0.0.0/104", "::ffff:192.168.5.5"];
    expect(entryHolding(parseIP("10.9.9.9"), entries)).toBe("::ffff:10.0.0.0/104");
    expect(entryHolding(parseIP("::ffff:10.9.9.9"), entries)).toBe("::ffff:10.0.0.0/104");
    expect(entryHolding(parseIP("192.168.5.5"), entries)).toBe("::ffff:192.168.5.5");
    expect(entryHolding(parseIP("11.0.0.1"), entries)).toBeUndefined();
  });
});

describe("controlPlaneName()", () => {
  test("controlPlaneName() shares a DNS host, never an IP host (a VIP and a node's own address look alike)", () => {
    expect(controlPlaneName("https://cp.example.com:6443")).toEqual(["cp.example.com"]);
    expect(controlPlaneName("https://10.0.0.100:6443")).toEqual([]);
    expect(controlPlaneName("https://[fd00::100]:6443")).toEqual([]);
    expect(controlPlaneName("not a url")).toEqual([]);
  });
});
