import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  discoverPublicIPs,
  externalLinkIPs,
  ipsOnMachine,
  type NodeAddressInput,
  type NodeIPsOnMachine,
  nodeAddresses,
  nodeIPsOnMachine,
  orderByNodeIPs,
} from "../../lib/addresses.ts";
import { formatIP, parseIP, preferredDualStack } from "../../lib/cidr.ts";
import { type NodeIPs, nodeIPs } from "../../lib/nodeview.ts";
import type { AddressStatus, NodeAddress } from "../../lib/types.ts";
import { PROVIDED_NODE_IP_ANNOTATION } from "../../lib/wellknown.ts";

const PERMANENT = 0x80;
const TEMPORARY = 0x1;

/** An AddressStatus with Talos' id `<link>/<address>`. */
function addr(address: string, linkName: string, flags = 0): AddressStatus {
  return {
    id: `${linkName}/${address}`,
    address,
    linkName,
    linkIndex: 2,
    family: address.includes(":") ? "inet6" : "inet4",
    scope: 0,
    flags,
  };
}

const fromAnnotation = (value: string, preferIPv6 = false) =>
  nodeIPs({ annotations: { [PROVIDED_NODE_IP_ANNOTATION]: value }, addresses: [] }, preferIPv6);

describe("preferredDualStack()", () => {
  const cases: Array<{ name: string; ips: string[]; preferIPv6: boolean; want: string[] }> = [
    { name: "one IPv4", ips: ["10.0.0.1"], preferIPv6: false, want: ["10.0.0.1"] },
    {
      name: "first of each family",
      ips: ["10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"],
      preferIPv6: false,
      want: ["10.0.0.1", "fd00::1"],
    },
    {
      name: "IPv4 first by default",
      ips: ["fd00::1", "10.0.0.1"],
      preferIPv6: false,
      want: ["10.0.0.1", "fd00::1"],
    },
    {
      name: "IPv6 first when preferred",
      ips: ["10.0.0.1", "fd00::1"],
      preferIPv6: true,
      want: ["fd00::1", "10.0.0.1"],
    },
    {
      name: "normalized like Go netip",
      ips: [" 2001:DB8:0:0::1 "],
      preferIPv6: false,
      want: ["2001:db8::1"],
    },
    {
      name: "garbage skipped",
      ips: ["", "node-1", "10.0.0.01", "10.0.0.3"],
      preferIPv6: false,
      want: ["10.0.0.3"],
    },
    {
      name: "IPv4-mapped IPv6 counts as IPv6",
      ips: ["::ffff:10.0.0.1"],
      preferIPv6: false,
      want: ["::ffff:10.0.0.1"],
    },
    { name: "nothing", ips: [], preferIPv6: true, want: [] },
  ];
  for (const c of cases)
    test(`preferredDualStack() ${c.name}`, () => {
      expect(preferredDualStack(c.ips, c.preferIPv6)).toEqual(c.want);
    });

  test("preferredDualStack() returns at most one address per family", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.ipV4(), fc.ipV6())), fc.boolean(), (ips, v6) => {
        const out = preferredDualStack(ips, v6);
        expect(out.length).toBeLessThanOrEqual(2);
        expect(new Set(out.map((ip) => ip.includes(":"))).size).toBe(out.length);
      }),
    );
  });
});

describe("nodeIPs()", () => {
  const cases: Array<{
    name: string;
    annotations: Record<string, string>;
    addresses?: Array<{ type: string; address: string }>;
    preferIPv6?: boolean;
    want: NodeIPs;
  }> = [
    {
      name: "single IP from the annotation",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
      want: { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" },
    },
    {
      name: "dual stack keeps the kubelet's order in provided",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "fd00::5,10.0.0.5" },
      want: { ips: ["10.0.0.5", "fd00::5"], provided: ["fd00::5", "10.0.0.5"], source: "annotation" },
    },
    {
      name: "preferIPv6 orders the IPs, not provided",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5,fd00::5" },
      preferIPv6: true,
      want: { ips: ["fd00::5", "10.0.0.5"], provided: ["10.0.0.5", "fd00::5"], source: "annotation" },
    },
    {
      name: "annotation wins over status addresses",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
      addresses: [{ type: "InternalIP", address: "10.9.9.9" }],
      want: { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" },
    },
    {
      name: "missing annotation falls back to InternalIP addresses",
      annotations: {},
      addresses: [
        { type: "Hostname", address: "node-1" },
        { type: "ExternalIP", address: "203.0.113.9" },
        { type: "InternalIP", address: "fd00::7" },
        { type: "InternalIP", address: "10.0.0.7" },
        { type: "InternalIP", address: "10.0.0.8" },
      ],
      want: { ips: ["10.0.0.7", "fd00::7"], provided: [], source: "status" },
    },
    {
      name: "unusable annotation falls back too",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "node-1" },
      addresses: [{ type: "InternalIP", address: "10.0.0.7" }],
      want: { ips: ["10.0.0.7"], provided: [], source: "status" },
    },
    {
      name: "nothing at all",
      annotations: {},
      addresses: [{ type: "Hostname", address: "node-1" }],
      want: { ips: [], provided: [], source: "none" },
    },
  ];
  for (const c of cases)
    test(`nodeIPs() ${c.name}`, () => {
      expect(
        nodeIPs({ annotations: c.annotations, addresses: c.addresses ?? [] }, c.preferIPv6 ?? false),
      ).toEqual(c.want);
    });
});

describe("ipsOnMachine()", () => {
  const cases: Array<{
    name: string;
    ips: string[];
    confirmedIP: string;
    addresses: AddressStatus[];
    want: string[];
  }> = [
    {
      name: "leaves out an IP the machine does not have (another node's IPv4 next to its own IPv6)",
      ips: ["10.0.0.9", "fd00::5"],
      confirmedIP: "fd00::5",
      addresses: [addr("10.0.0.5/24", "eth0"), addr("fd00::5/64", "eth0")],
      want: ["fd00::5"],
    },
    {
      name: "keeps every IP of an honest dual-stack node, in the given order",
      ips: ["fd00::5", "10.0.0.5"],
      confirmedIP: "10.0.0.5",
      addresses: [addr("10.0.0.5/24", "eth0"), addr("fd00::5/64", "eth0")],
      want: ["fd00::5", "10.0.0.5"],
    },
    {
      name: "keeps the confirmed IP even when no AddressStatus holds it",
      ips: ["10.0.0.5"],
      confirmedIP: "10.0.0.5",
      addresses: [],
      want: ["10.0.0.5"],
    },
    {
      name: "counts addresses on every link, the overlay and loopback ones too (the kubelet checks every interface)",
      ips: ["10.0.0.5", "fd7a::9"],
      confirmedIP: "10.0.0.5",
      addresses: [addr("fd7a::9/128", "kubespan"), addr("127.0.0.1/8", "lo")],
      want: ["10.0.0.5", "fd7a::9"],
    },
    {
      name: "needs the address itself, not one of its subnet",
      ips: ["10.0.0.5", "fd00::6"],
      confirmedIP: "10.0.0.5",
      addresses: [addr("fd00::5/64", "eth0")],
      want: ["10.0.0.5"],
    },
    {
      name: "compares addresses in canonical form",
      ips: ["10.0.0.5", "2001:0DB8:0::5"],
      confirmedIP: "10.0.0.5",
      addresses: [addr("2001:db8:0:0::5/64", "eth0")],
      want: ["10.0.0.5", "2001:0DB8:0::5"],
    },
    {
      name: "skips AddressStatuses that hold no address",
      ips: ["10.0.0.5", "fd00::5"],
      confirmedIP: "10.0.0.5",
      addresses: [addr("garbage", "eth0")],
      want: ["10.0.0.5"],
    },
  ];
  for (const c of cases)
    test(`ipsOnMachine() ${c.name}`, () => {
      expect(ipsOnMachine(c.ips, c.confirmedIP, c.addresses)).toEqual(c.want);
    });
});

describe("nodeIPsOnMachine()", () => {
  const MACHINE = [addr("10.0.0.5/24", "eth0"), addr("fd00::5/64", "eth0")];
  const cases: Array<{
    name: string;
    ips: NodeIPs;
    confirmedIP: string;
    addresses: AddressStatus[];
    want: NodeIPsOnMachine;
  }> = [
    {
      name: "drops a claimed IPv4 from the IPs and the provided ones",
      ips: fromAnnotation("10.0.0.9,fd00::5"),
      confirmedIP: "fd00::5",
      addresses: MACHINE,
      want: {
        onMachine: { ips: ["fd00::5"], provided: ["fd00::5"], source: "annotation" },
        notOnMachine: ["10.0.0.9"],
      },
    },
    {
      name: "drops a claimed IPv6 of an IPv6-primary annotation, keeping the kubelet's order for the rest",
      ips: fromAnnotation("fd00::9,10.0.0.5", true),
      confirmedIP: "10.0.0.5",
      addresses: MACHINE,
      want: {
        onMachine: { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" },
        notOnMachine: ["fd00::9"],
      },
    },
    {
      name: "keeps both IPs of an honest dual-stack node",
      ips: fromAnnotation("fd00::5,10.0.0.5"),
      confirmedIP: "10.0.0.5",
      addresses: MACHINE,
      want: {
        onMachine: { ips: ["10.0.0.5", "fd00::5"], provided: ["fd00::5", "10.0.0.5"], source: "annotation" },
        notOnMachine: [],
      },
    },
    {
      name: "filters the InternalIP fallback the same way",
      ips: nodeIPs(
        {
          annotations: {},
          addresses: [
            { type: "InternalIP", address: "10.0.0.5" },
            { type: "InternalIP", address: "fd00::9" },
          ],
        },
        false,
      ),
      confirmedIP: "10.0.0.5",
      addresses: MACHINE,
      want: { onMachine: { ips: ["10.0.0.5"], provided: [], source: "status" }, notOnMachine: ["fd00::9"] },
    },
  ];
  for (const c of cases)
    test(`nodeIPsOnMachine() ${c.name}`, () => {
      expect(nodeIPsOnMachine(c.ips, c.confirmedIP, c.addresses)).toEqual(c.want);
    });

  test("nodeIPsOnMachine() with nodeAddresses() writes exactly the node IPs the machine has (the confirmed one always), the kubelet's first remaining IP first", () => {
    const ip4 = fc.ipV4();
    const ip6 = fc.ipV6();
    fc.assert(
      fc.property(
        fc.tuple(ip4, ip6),
        fc.boolean(),
        fc.boolean(),
        fc.boolean(),
        fc.array(fc.oneof(ip4, ip6), { maxLength: 6 }),
        ([v4, v6], v6First, preferIPv6, confirmV6, machine) => {
          const ips = fromAnnotation(v6First ? `${v6},${v4}` : `${v4},${v6}`, preferIPv6);
          const confirmed = ips.ips.find((ip) => ip.includes(":") === confirmV6) as string;
          const addresses = machine.map((ip) => addr(`${ip}/${ip.includes(":") ? 64 : 24}`, "eth0"));
          const split = nodeIPsOnMachine(ips, confirmed, addresses);
          const out = nodeAddresses({
            nodeName: "node-1",
            platform: "metal",
            hostname: "node-1",
            nodeIPs: split.onMachine,
            addresses,
            preferIPv6,
            publicIPDiscovery: false,
          });
          const internal = out.filter((a) => a.type === "InternalIP").map((a) => a.address);
          const has = new Set([confirmed, ...machine.map((ip) => formatIP(parseIP(ip)))]);
          expect(internal).toContain(confirmed);
          expect(internal.filter((ip) => !has.has(ip))).toEqual([]);
          expect(ips.ips.filter((ip) => has.has(ip) && !internal.includes(ip))).toEqual([]);
          expect(split.notOnMachine.filter((ip) => internal.includes(ip))).toEqual([]);
          expect([...split.onMachine.ips, ...split.notOnMachine].sort()).toEqual([...ips.ips].sort());
          expect(out[0]).toEqual({
            type: "InternalIP",
            address: ips.provided.find((ip) => split.onMachine.ips.includes(ip)) as string,
          });
        },
      ),
    );
  });
});

describe("discoverPublicIPs()", () => {
  test("discoverPublicIPs() keeps public global unicast addresses that are not node IPs", () => {
    const got = discoverPublicIPs(
      ["10.0.0.5", "2001:db8:1::5"],
      [
        addr("127.0.0.1/8", "lo", PERMANENT),
        addr("10.0.0.5/24", "eth0"),
        addr("192.168.1.9/24", "eth1"),
        addr("100.64.0.9/10", "eth1"),
        addr("169.254.1.1/16", "eth1"),
        addr("203.0.113.9/24", "eth0"),
        addr("2001:db8:1::5/64", "eth0", PERMANENT),
        addr("fd00::9/64", "eth0", PERMANENT),
        addr("fe80::9/64", "eth0", PERMANENT),
        addr("ff02::1/128", "eth0"),
      ],
    );
    // In id order (eth0/… before eth1/…); 100.64.0.0/10 is not private in Go's sense, so the
    // reference treats it as public.
    expect(got).toEqual({ ipv4: ["203.0.113.9", "100.64.0.9"], ipv6: [] });
  });

  test("discoverPublicIPs() skips overlay, management, loopback and dummy links", () => {
    const got = discoverPublicIPs(
      ["10.0.0.5"],
      [
        addr("198.51.100.1/32", "kubespan", PERMANENT),
        addr("198.51.100.2/32", "siderolink", PERMANENT),
        addr("198.51.100.3/32", "lo", PERMANENT),
        addr("198.51.100.4/32", "cilium_host", PERMANENT),
        addr("198.51.100.5/32", "dummy0", PERMANENT),
        addr("198.51.100.6/32", "dummyext", PERMANENT),
        addr("198.51.100.7/32", "eth0"),
      ],
    );
    expect(got).toEqual({ ipv4: ["198.51.100.7"], ipv6: [] });
  });

  test("discoverPublicIPs() puts permanent IPv6 first, the last one found at the front, in id order", () => {
    const got = discoverPublicIPs(
      [],
      [
        // Given out of order: Talos lists by id, so eth0/2001:db8::a… comes first.
        addr("2001:db8::c/64", "eth0", TEMPORARY),
        addr("2001:db8::b/64", "eth0", PERMANENT),
        addr("2001:db8::a/64", "eth0", PERMANENT),
        addr("2001:db8::d/64", "eth0"),
      ],
    );
    expect(got.ipv6).toEqual(["2001:db8::b", "2001:db8::a", "2001:db8::c", "2001:db8::d"]);
  });
});

describe("externalLinkIPs()", () => {
  test("externalLinkIPs() takes every address on the external link except node IPs, public or not", () => {
    const got = externalLinkIPs(
      ["10.0.0.5"],
      [
        addr("54.210.33.17/32", "external", PERMANENT),
        addr("10.0.0.5/32", "external", PERMANENT),
        addr("10.1.1.1/32", "external"),
        addr("2001:db8::1/128", "external"),
        addr("203.0.113.9/24", "eth0"),
      ],
    );
    expect(got).toEqual({ ipv4: ["10.1.1.1", "54.210.33.17"], ipv6: ["2001:db8::1"] });
  });
});

describe("orderByNodeIPs()", () => {
  const list: NodeAddress[] = [
    { type: "InternalIP", address: "fd00::5" },
    { type: "InternalIP", address: "10.0.0.5" },
    { type: "ExternalIP", address: "203.0.113.9" },
    { type: "Hostname", address: "node-1" },
  ];
  const cases: Array<{ name: string; provided: string[]; input: NodeAddress[]; want: NodeAddress[] }> = [
    { name: "without provided IPs keeps the list", provided: [], input: list, want: list },
    {
      name: "moves the primary node IP first within its type",
      provided: ["10.0.0.5", "fd00::5"],
      input: list,
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "InternalIP", address: "fd00::5" },
        { type: "ExternalIP", address: "203.0.113.9" },
        { type: "Hostname", address: "node-1" },
      ],
    },
    {
      name: "groups a type's addresses where the type first appears",
      provided: ["10.0.0.5"],
      input: [
        { type: "Hostname", address: "node-1" },
        { type: "InternalIP", address: "10.0.0.9" },
        { type: "ExternalIP", address: "203.0.113.9" },
        { type: "InternalIP", address: "10.0.0.5" },
      ],
      want: [
        { type: "Hostname", address: "node-1" },
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "InternalIP", address: "10.0.0.9" },
        { type: "ExternalIP", address: "203.0.113.9" },
      ],
    },
    {
      name: "a node IP reported as ExternalIP leads the ExternalIPs",
      provided: ["203.0.113.9"],
      input: [
        { type: "ExternalIP", address: "198.51.100.1" },
        { type: "ExternalIP", address: "203.0.113.9" },
      ],
      want: [
        { type: "ExternalIP", address: "203.0.113.9" },
        { type: "ExternalIP", address: "198.51.100.1" },
      ],
    },
  ];
  for (const c of cases)
    test(`orderByNodeIPs() ${c.name}`, () => {
      expect(orderByNodeIPs(c.provided, c.input)).toEqual(c.want);
    });
});

describe("nodeAddresses()", () => {
  const base = (over: Partial<NodeAddressInput>): NodeAddressInput => ({
    nodeName: "node-1",
    platform: "metal",
    hostname: "node-1",
    nodeIPs: fromAnnotation("10.0.0.5"),
    addresses: [],
    preferIPv6: false,
    publicIPDiscovery: false,
    ...over,
  });
  const cases: Array<{ name: string; input: NodeAddressInput; want: NodeAddress[] }> = [
    {
      name: "metal discovers public addresses",
      input: base({
        addresses: [
          addr("10.0.0.5/24", "eth0", PERMANENT),
          addr("198.51.100.7/24", "eth1", PERMANENT),
          addr("2001:db8::7/64", "eth1", PERMANENT),
        ],
      }),
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "ExternalIP", address: "198.51.100.7" },
        { type: "ExternalIP", address: "2001:db8::7" },
        { type: "Hostname", address: "node-1" },
      ],
    },
    {
      name: "a cloud platform reads only the external link",
      input: base({
        platform: "aws",
        hostname: "ip-10-0-0-5.ec2.internal",
        addresses: [addr("198.51.100.7/24", "eth1", PERMANENT), addr("54.1.2.3/32", "external", PERMANENT)],
      }),
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "ExternalIP", address: "54.1.2.3" },
        { type: "Hostname", address: "node-1" },
        { type: "InternalDNS", address: "ip-10-0-0-5.ec2.internal" },
      ],
    },
    {
      name: "publicIPDiscovery adds discovery on a cloud platform, one address per family",
      input: base({
        platform: "hcloud",
        publicIPDiscovery: true,
        addresses: [
          addr("49.12.34.56/32", "eth0"),
          addr("2a01:4f8::1/64", "eth0", PERMANENT),
          addr("49.12.34.56/32", "external", PERMANENT),
        ],
      }),
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "ExternalIP", address: "49.12.34.56" },
        { type: "ExternalIP", address: "2a01:4f8::1" },
        { type: "Hostname", address: "node-1" },
      ],
    },
    {
      name: "preferIPv6 orders ExternalIPs; the kubelet's order wins for InternalIPs",
      input: base({
        preferIPv6: true,
        nodeIPs: fromAnnotation("10.0.0.5,fd00::5", true),
        addresses: [addr("198.51.100.7/24", "eth1"), addr("2001:db8::7/64", "eth1", PERMANENT)],
      }),
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "InternalIP", address: "fd00::5" },
        { type: "ExternalIP", address: "2001:db8::7" },
        { type: "ExternalIP", address: "198.51.100.7" },
        { type: "Hostname", address: "node-1" },
      ],
    },
    {
      name: "InternalIP fallback keeps the preference order",
      input: base({
        preferIPv6: true,
        nodeIPs: nodeIPs(
          {
            annotations: {},
            addresses: [
              { type: "InternalIP", address: "10.0.0.5" },
              { type: "InternalIP", address: "fd00::5" },
            ],
          },
          true,
        ),
      }),
      want: [
        { type: "InternalIP", address: "fd00::5" },
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "Hostname", address: "node-1" },
      ],
    },
    {
      name: "a hostname starting with a dot is no DNS name",
      input: base({ hostname: ".local" }),
      want: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "Hostname", address: "node-1" },
      ],
    },
  ];
  for (const c of cases)
    test(`nodeAddresses() ${c.name}`, () => {
      expect(nodeAddresses(c.input)).toEqual(c.want);
    });

  test("nodeAddresses() always starts with the primary node IP and ends Hostname[, InternalDNS]", () => {
    const ip4 = fc.ipV4();
    const ip6 = fc.ipV6();
    const address = fc.record({
      ip: fc.oneof(ip4, ip6),
      link: fc.constantFrom("eth0", "external", "kubespan", "lo", "dummy0"),
      flags: fc.constantFrom(0, PERMANENT, TEMPORARY),
    });
    fc.assert(
      fc.property(
        fc.tuple(ip4, ip6),
        fc.boolean(),
        fc.boolean(),
        fc.array(address, { maxLength: 8 }),
        fc.constantFrom("metal", "aws", "nocloud", "gcp"),
        ([v4, v6], v6First, preferIPv6, raw, platform) => {
          const annotation = v6First ? `${v6},${v4}` : `${v4},${v6}`;
          const ips = fromAnnotation(annotation, preferIPv6);
          const out = nodeAddresses(
            base({
              platform,
              preferIPv6,
              nodeIPs: ips,
              addresses: raw.map((a) => addr(`${a.ip}/${a.ip.includes(":") ? 64 : 24}`, a.link, a.flags)),
            }),
          );
          expect(out[0]).toEqual({ type: "InternalIP", address: ips.provided[0] as string });
          expect(out.at(-1)).toEqual({ type: "Hostname", address: "node-1" });
          expect(out.filter((a) => a.type === "ExternalIP").length).toBeLessThanOrEqual(2);
          const own = new Set(ips.ips);
          expect(out.some((a) => a.type === "ExternalIP" && own.has(a.address))).toBe(false);
        },
      ),
    );
  });
});
