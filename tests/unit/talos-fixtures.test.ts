// The Talos node fixtures and generator the fake apid serves: realistic provider IDs per platform,
// the link names address discovery must handle, strict loading, distinct generated nodes.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parse as parseYaml } from "yaml";
import { renderYaml } from "../support/apid.ts";
import {
  ADDRESS_FLAGS,
  type FakeNodeSpec,
  fixtureNames,
  formatAddressFlags,
  generatedNodeIP,
  generateNodes,
  loadFixture,
  nodeIdentity,
  nodeIPConfigOf,
  nodeLinks,
  normalizeNode,
} from "../support/fixtures.ts";

const all: FakeNodeSpec[] = fixtureNames().map(loadFixture);

describe("fixtures", () => {
  test("the required platforms are there", () => {
    const have = fixtureNames();
    for (const n of [
      "aws",
      "gcp",
      "azure",
      "hcloud",
      "nocloud",
      "metal-ipv6",
      "metal-56",
      "openstack",
      "oracle",
      "exoscale",
    ]) {
      expect(have).toContain(n);
    }
  });

  // Formats as Talos' platform code writes them (internal/app/machined/pkg/runtime/v1alpha1/platform/*);
  // GCP and Azure name the VM, the others embed the instance id.
  test.each([
    ["aws", /^aws:\/\/\/[a-z]{2}-[a-z]+-\d[a-z]\/i-[0-9a-f]{17}$/],
    ["gcp", /^gce:\/\/[a-z][-a-z0-9]+\/[a-z]+-[a-z]+\d-[a-z]\/[-a-z0-9]+$/],
    [
      "azure",
      /^azure:\/\/\/subscriptions\/[0-9a-f-]{36}\/resourceGroups\/[^/]+\/providers\/Microsoft\.Compute\/virtualMachines\/[^/]+$/,
    ],
    ["hcloud", /^hcloud:\/\/\d+$/],
    ["openstack", /^openstack:\/\/\/[0-9a-f-]{36}$/],
    ["oracle", /^oci:\/\/ocid1\.instance\.oc1\.[a-z0-9-]+\.[a-z0-9]+$/],
    ["exoscale", /^exoscale:\/\/[0-9a-f-]{36}$/],
    ["nocloud", /^$/],
    ["metal-ipv6", /^$/],
    ["metal-56", /^$/],
  ])("%s providerId has the shape Talos reports", (name, shape) => {
    const pm = loadFixture(name).platformMetadata;
    expect(pm.providerId).toMatch(shape);
    if (pm.providerId && !["gcp", "azure"].includes(name)) expect(pm.providerId).toContain(pm.instanceId);
  });

  test("only gcp is spot; only metal-56 lacks SystemInformation", () => {
    expect(all.filter((n) => n.platformMetadata.spot).map((n) => n.name)).toEqual(["talos-spot-1"]);
    expect(all.filter((n) => !n.systemInformation).map((n) => n.name)).toEqual(["rpi-1"]);
  });

  test("the link names address discovery must handle appear", () => {
    const links = new Set(all.flatMap((n) => n.addresses.map((a) => a.linkName)));
    for (const l of ["lo", "eth0", "external", "kubespan", "cilium_host", "siderolink", "dummy0"])
      expect(links).toContain(l);
  });

  test("names and node IPs are distinct; ids are <link>/<address>; IPv4 has IFA_LOCAL", () => {
    expect(new Set(all.map((n) => n.name)).size).toBe(all.length);
    const ips = all.flatMap((n) => n.nodeIPs);
    expect(new Set(ips).size).toBe(ips.length);
    for (const n of all) {
      for (const a of n.addresses) {
        expect(a.id).toBe(`${a.linkName}/${a.address}`);
        expect(a.local !== undefined).toBe(!a.address.includes(":"));
      }
    }
  });

  test("a public IPv6 /64 on metal and a /56 on the board", () => {
    const v6 = (name: string) => loadFixture(name).addresses.filter((a) => a.address.startsWith("2a0"));
    expect(v6("metal-ipv6").map((a) => a.address)).toEqual(["2a01:4f8:271:3b2f::2/64"]);
    expect(v6("metal-56").map((a) => a.address)).toEqual(["2a02:8071:5e80:3c00::1/56"]);
  });

  test("flags parse from names and format back", () => {
    const n = normalizeNode("t", {
      name: "x",
      nodeIPs: ["10.0.0.1"],
      addresses: [{ address: "10.0.0.1/24", linkName: "eth0", flags: "noprefixroute,permanent" }],
    });
    expect(n.addresses[0]?.flags).toBe(0x280);
    expect(formatAddressFlags(0x280)).toBe("permanent,noprefixroute");
    expect(formatAddressFlags(0)).toBe("");
    expect(Object.values(ADDRESS_FLAGS).reduce((a, b) => a | b, 0)).toBe(0xfff);
  });

  test.each([
    [
      "aws",
      { nodename: "ip-172-31-20-15.ec2.internal", hostname: "ip-172-31-20-15", domainname: "ec2.internal" },
    ],
    ["gcp", { nodename: "talos-spot-1", hostname: "talos-spot-1", domainname: "" }],
  ])("nodeIdentity() of %s defaults to the node name split at its first dot", (name, want) => {
    expect(nodeIdentity(loadFixture(name))).toEqual(want);
  });

  test("nodename, hostname and domainname keys override the defaults, each on its own", () => {
    const base = { name: "w1.lan", nodeIPs: ["10.0.0.1"] };
    expect(nodeIdentity(normalizeNode("t", { ...base, nodename: "w2" }))).toEqual({
      nodename: "w2",
      hostname: "w1",
      domainname: "lan",
    });
    expect(nodeIdentity(normalizeNode("t", { ...base, hostname: "h", domainname: "" }))).toEqual({
      nodename: "w1.lan",
      hostname: "h",
      domainname: "",
    });
    expect(() => normalizeNode("t", { ...base, nodename: 5 })).toThrow('"nodename" is not a string');
  });

  test.each([
    [
      "aws",
      [
        ["lo", 1, "loopback"],
        ["eth0", 2, "ether"],
        ["kubespan", 5, "ether"],
      ],
    ],
    [
      "gcp",
      [
        ["lo", 1, "loopback"],
        ["eth0", 2, "ether"],
        ["cilium_host", 6, "ether"],
      ],
    ],
    [
      "hcloud",
      [
        ["lo", 1, "loopback"],
        ["eth0", 2, "ether"],
        ["eth1", 3, "ether"],
      ],
    ],
  ])(
    "nodeLinks() of %s: one physical link per link name but `external`, at its addresses' index",
    (name, want) => {
      const links = nodeLinks(loadFixture(name));
      expect(links.map((l) => [l.name, l.index, l.type])).toEqual(want);
      expect(links.every((l) => l.kind === "" && l.up)).toBe(true);
    },
  );

  test("nodeLinks() fills what explicit links leave out; new indexes count on from the highest", () => {
    const node = normalizeNode("t", {
      name: "x",
      nodeIPs: ["10.0.0.1"],
      addresses: [
        { address: "10.0.0.1/24", linkName: "eth0", linkIndex: 2 },
        { address: "10.96.0.1/32", linkName: "kube-ipvs0" },
      ],
      links: [
        { name: "lo" },
        { name: "eth0", up: false },
        { name: "kube-ipvs0", kind: "dummy" },
        { name: "kubespan", kind: "wireguard", type: "none", index: 7 },
      ],
      nodeIPConfig: { excludeSubnets: ["10.244.0.0/16"] },
    });
    expect(nodeLinks(node)).toEqual([
      { name: "lo", kind: "", type: "loopback", index: 8, up: true },
      { name: "eth0", kind: "", type: "ether", index: 2, up: false },
      { name: "kube-ipvs0", kind: "dummy", type: "ether", index: 9, up: true },
      { name: "kubespan", kind: "wireguard", type: "none", index: 7, up: true },
    ]);
    expect(nodeIPConfigOf(node)).toEqual({ validSubnets: [], excludeSubnets: ["10.244.0.0/16"] });
    expect(nodeIPConfigOf({})).toEqual({ validSubnets: [], excludeSubnets: [] });
    expect(nodeIPConfigOf(normalizeNode("t", { name: "x", nodeIPs: ["10.0.0.1"], nodeIPConfig: null }))).toBe(
      undefined,
    );
  });

  test.each([
    ["an unknown key", { name: "x", nodeIPs: ["10.0.0.1"], zone: "a" }, 'unknown key "zone"'],
    [
      "an unknown link key",
      { name: "x", nodeIPs: ["10.0.0.1"], links: [{ name: "e", mtu: 1 }] },
      'unknown link key "mtu"',
    ],
    [
      "an unknown link type",
      { name: "x", nodeIPs: ["10.0.0.1"], links: [{ name: "e", type: "tun" }] },
      '"tun"',
    ],
    [
      "a link without a name",
      { name: "x", nodeIPs: ["10.0.0.1"], links: [{ kind: "dummy" }] },
      "without a name",
    ],
    [
      "an unknown nodeIPConfig key",
      { name: "x", nodeIPs: ["10.0.0.1"], nodeIPConfig: { validSubnet: [] } },
      'unknown nodeIPConfig key "validSubnet"',
    ],
    ["no node IPs", { name: "x", nodeIPs: [] }, "no nodeIPs"],
    ["a bad node IP", { name: "x", nodeIPs: ["10.0.0.300"] }, "10.0.0.300"],
    [
      "a bad flag",
      {
        name: "x",
        nodeIPs: ["10.0.0.1"],
        addresses: [{ address: "10.0.0.1/8", linkName: "e", flags: "perm" }],
      },
      "perm",
    ],
    [
      "a bad scope",
      {
        name: "x",
        nodeIPs: ["10.0.0.1"],
        addresses: [{ address: "10.0.0.1/8", linkName: "e", scope: "galaxy" }],
      },
      "galaxy",
    ],
    [
      "a bad prefix",
      { name: "x", nodeIPs: ["10.0.0.1"], addresses: [{ address: "10.0.0.1/33", linkName: "e" }] },
      "33",
    ],
    [
      "an unknown metadata key",
      { name: "x", nodeIPs: ["10.0.0.1"], platformMetadata: { cloud: "x" } },
      'unknown key "cloud"',
    ],
  ])("normalizeNode() refuses %s", (_name, doc, part) => {
    expect(() => normalizeNode("fixture.yaml", doc)).toThrow(part);
  });
});

describe("generateNodes()", () => {
  test("5,000 distinct nodes: names, IPs, instance and provider IDs, UUIDs", () => {
    const nodes = generateNodes(5000, { template: "aws" });
    const distinct = (f: (n: FakeNodeSpec) => string) => new Set(nodes.map(f)).size;
    expect(nodes.length).toBe(5000);
    expect(distinct((n) => n.name)).toBe(5000);
    expect(distinct((n) => n.nodeIPs[0] as string)).toBe(5000);
    expect(distinct((n) => n.platformMetadata.instanceId)).toBe(5000);
    expect(distinct((n) => n.platformMetadata.providerId)).toBe(5000);
    expect(distinct((n) => n.systemInformation?.uuid ?? "")).toBe(5000);
    expect(nodes[42]?.platformMetadata.providerId).toBe("aws:///us-east-1a/i-0a1b2c3d4e5f67890-2a");
    expect(nodes[42]?.addresses.map((a) => a.linkName)).toEqual(["lo", "eth0", "cilium_host"]);
  });

  test("dual stack and disjoint batches", () => {
    const a = generateNodes(300, { ipv6: true });
    const b = generateNodes(300, { ipv6: true, start: 300, prefix: "w" });
    const ips = [...a, ...b].flatMap((n) => n.nodeIPs);
    expect(new Set(ips).size).toBe(1200);
    expect(a[0]?.nodeIPs).toEqual(["10.64.0.1", "fd10::1"]);
    expect(b[0]?.name).toBe("w-00300");
  });

  test("generatedNodeIP() is injective and never a .0 or .255 address", () => {
    fc.assert(
      fc.property(fc.nat(1_000_000), fc.nat(1_000_000), (i, j) => {
        const a = generatedNodeIP(i);
        expect(a).not.toMatch(/\.(0|255)$/);
        if (i !== j) expect(a).not.toBe(generatedNodeIP(j));
      }),
    );
  });
});

describe("renderYaml()", () => {
  test("what it renders parses back to the same values", () => {
    const text = fc.string({ unit: "grapheme", maxLength: 20 });
    fc.assert(
      fc.property(
        fc.record({
          a: text,
          b: fc.oneof(fc.integer(), fc.boolean()),
          c: fc.array(text, { maxLength: 3 }),
          d: fc.dictionary(text, text, { maxKeys: 3 }),
        }),
        (obj) => {
          expect(parseYaml(renderYaml(obj))).toEqual(obj);
        },
      ),
      { numRuns: 300 },
    );
  });

  test("keeps Talos-looking values plain", () => {
    expect(
      renderYaml({ address: "fe80::1/64", linkName: "eth0", flags: "permanent,noprefixroute", linkIndex: 2 }),
    ).toBe("address: fe80::1/64\nlinkName: eth0\nflags: permanent,noprefixroute\nlinkIndex: 2\n");
    expect(renderYaml({ address: "::1/128", spot: "true", zone: "" })).toBe(
      'address: "::1/128"\nspot: "true"\nzone: ""\n',
    );
  });
});
