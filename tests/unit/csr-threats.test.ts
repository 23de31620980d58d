// The CSR threat model (README "CSR security model"), class by class: an attacker who controls one
// node writes its own Node status and asks for any SAN as system:node:<itself>. A SAN is approved
// only if it identifies the requesting machine alone, and both modes apply the same rules: each
// class below is denied in CSR-only mode (the Node and the other Nodes as evidence) and with Talos
// (which, here, reports the address on the machine, as it would for loopback or kube-ipvs0).

import { describe, expect, test } from "bun:test";
import { GeneralName } from "@peculiar/asn1-x509";
import {
  type CsrInput,
  type DenyReason,
  decide,
  type NodeInput,
  screen,
  type TalosFacts,
} from "../../lib/csr.ts";
import { ClusterNetworks, type NetworkView, NO_NETWORKS } from "../../lib/sharedaddresses.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import { createCSR, createRawCSR, derToPem, pemToDer, sanExtension } from "../support/pki.ts";

const CN = "2.5.4.3";
const O = "2.5.4.10";

const input = (pem: string): CsrInput => servingCsr(b64(pem));

async function csrA(dns: string[], ips: string[]): Promise<string> {
  return (await createCSR({ cn: USER_A, o: ["system:nodes"], dns, ips })).csr;
}

/** Node A as the attacker writes it: every SAN it asks for is in its own status. */
function nodeAClaiming(dns: string[], ips: string[]): NodeInput {
  return {
    name: "worker-a",
    addresses: [
      { type: "InternalIP", address: "10.0.0.1" },
      ...ips.map((address) => ({ type: "InternalIP", address })),
      ...dns.map((address) => ({ type: "InternalDNS", address })),
    ],
  };
}

/** Talos on machine A reporting every asked IP (on eth0 unless the case says otherwise) and name. */
function talosReporting(dns: string[], ips: string[], over: Partial<TalosFacts> = {}): TalosFacts {
  return {
    nodeIP: "10.0.0.1",
    nodename: "worker-a",
    addresses: ["10.0.0.1/24", ...ips.map((ip) => `${ip}/${ip.includes(":") ? 64 : 24}`)],
    dnsNames: dns,
    sharedAddresses: new Map(),
    excludedSubnets: [],
    ...over,
  };
}

const nodeB: NodeInput = {
  name: "worker-b",
  addresses: [
    { type: "InternalIP", address: "10.0.0.002" },
    { type: "InternalDNS", address: "Worker-B.Example.com." },
  ],
};

/** A Node that writes its IP with its kubelet port, and its IPv6 in brackets with one. */
const nodeC: NodeInput = {
  name: "worker-c",
  addresses: [
    { type: "InternalIP", address: "10.0.0.5:10250" },
    { type: "ExternalIP", address: "[2001:db8::c]:10250" },
  ],
};

/** Nodes named by an IP, in two spellings, whose status has no address yet (a kubelet's first write). */
const namedByIP: NodeInput[] = [
  { name: "10.0.0.6", addresses: [] },
  { name: "167772167", addresses: [] },
];

/** A Node that writes a 6to4 address of 10.0.0.8 (its relay reaches that IPv4 host). */
const nodeD: NodeInput = { name: "worker-d", addresses: [{ type: "InternalIP", address: "2002:a00:8::1" }] };

function clusterNetworks(): ClusterNetworks {
  const n = new ClusterNetworks();
  n.set("servicecidr/kubernetes", "a Service CIDR (ServiceCIDR kubernetes)", {
    cidrs: ["10.96.0.0/12", "fd00:96::/112"],
  });
  n.set("node/worker-a", 'the pod CIDR of node "worker-a"', { cidrs: ["10.244.1.0/24"] });
  n.set("service/kubernetes", "the ClusterIP of Service default/kubernetes (the API server)", {
    cidrs: ["10.96.0.1/32"],
  });
  n.set("kubeconfig/server", "the API server endpoint this CCM connects to", { names: ["cp.example.com"] });
  return n;
}

interface Case {
  name: string;
  dns?: string[];
  ips?: string[];
  reason: DenyReason;
  says?: string;
  networks?: NetworkView;
  others?: NodeInput[];
}

/** Classes denied in both modes, with the same reason. */
const BOTH: Case[] = [
  { name: "loopback 127.0.0.1", ips: ["127.0.0.1"], reason: "NonUniqueIP", says: "loopback" },
  { name: "loopback 127.8.9.10", ips: ["127.8.9.10"], reason: "NonUniqueIP" },
  { name: "loopback ::1", ips: ["::1"], reason: "NonUniqueIP" },
  { name: "loopback as IPv4-mapped IPv6", ips: ["::ffff:127.0.0.1"], reason: "NonUniqueIP" },
  { name: "the unspecified address 0.0.0.0", ips: ["0.0.0.0"], reason: "NonUniqueIP" },
  { name: "the unspecified address ::", ips: ["::"], reason: "NonUniqueIP" },
  { name: "this network 0.1.2.3", ips: ["0.1.2.3"], reason: "NonUniqueIP" },
  { name: "link-local 169.254.169.254", ips: ["169.254.169.254"], reason: "NonUniqueIP", says: "link-local" },
  { name: "link-local fe80::1", ips: ["fe80::1"], reason: "NonUniqueIP" },
  { name: "multicast 224.0.0.1", ips: ["224.0.0.1"], reason: "NonUniqueIP" },
  { name: "multicast ff02::1", ips: ["ff02::1"], reason: "NonUniqueIP" },
  { name: "broadcast 255.255.255.255", ips: ["255.255.255.255"], reason: "NonUniqueIP" },
  { name: "reserved 240.0.0.1", ips: ["240.0.0.1"], reason: "NonUniqueIP" },
  { name: "a NAT64 address of another host", ips: ["64:ff9b::a00:2"], reason: "NonUniqueIP" },
  // IPv6 forms that carry another host's IPv4 address (10.0.0.2, worker-b's).
  {
    name: "a local-use NAT64 address (64:ff9b:1::/48) of another host",
    ips: ["64:ff9b:1::a00:2"],
    reason: "NonUniqueIP",
    says: "IP SAN 64:ff9b:1::a00:2 is a local-use NAT64 address",
  },
  {
    name: "a 6to4 address (2002::/16) of another host",
    ips: ["2002:a00:2::1"],
    reason: "NonUniqueIP",
    says: "IP SAN 2002:a00:2::1 is a 6to4 address (2002::/16, deprecated) carrying IPv4 10.0.0.2",
  },
  {
    name: "a Teredo address (2001::/32) whose inverted client is another host",
    ips: ["2001:0:4136:e378:8000:63bf:f5ff:fffd"],
    reason: "NonUniqueIP",
    says: "IP SAN 2001:0:4136:e378:8000:63bf:f5ff:fffd is a Teredo address (2001::/32) carrying IPv4 65.54.227.120 or 10.0.0.2",
  },
  {
    name: "an IPv4-translated (SIIT, ::ffff:0:0:0/96) address of another host",
    ips: ["::ffff:0:a00:2"],
    reason: "NonUniqueIP",
    says: "IP SAN ::ffff:0:a00:2 is an IPv4-translated (SIIT) address",
  },
  {
    name: "an IPv4-compatible (::/96) address of another host",
    ips: ["::a00:2"],
    reason: "NonUniqueIP",
    says: "IP SAN ::a00:2 is an IPv4-compatible address",
  },
  {
    name: "an ISATAP address of another host",
    ips: ["2001:db8:1:2:0:5efe:a00:2"],
    reason: "NonUniqueIP",
    says: "IP SAN 2001:db8:1:2:0:5efe:a00:2 is an ISATAP address",
  },
  // DNS names that clients read as another host's IPv4 address (10.0.0.2).
  ...["167772162", "10.0.0.02", "10.2", "012.0.0.2", "0xa.0.0.2", "0XA000002", "10.0.0.2."].map(
    (dns): Case => ({
      name: `the DNS name ${dns}, which inet_aton and URL parsers read as 10.0.0.2`,
      dns: [dns],
      reason: "ForbiddenSAN",
      says: `DNS SAN ${JSON.stringify(dns)} is read as IP address `,
    }),
  ),
  {
    name: "a DNS name ending in a number, which URL parsers read as an IPv4 address or refuse",
    dns: ["worker-b.123"],
    reason: "ForbiddenSAN",
    says: 'DNS SAN "worker-b.123" ends in a numeric label',
  },
  {
    name: "a name under ipv6-literal.net, which Windows reads as an IPv6 address",
    dns: ["2001-db8--b.ipv6-literal.net"],
    reason: "ForbiddenSAN",
    says: 'DNS SAN "2001-db8--b.ipv6-literal.net" is a name under ipv6-literal.net',
  },
  { name: "localhost", dns: ["localhost"], reason: "ForbiddenSAN", says: "local host" },
  { name: "LOCALHOST. in capitals with a trailing dot", dns: ["LOCALHOST."], reason: "ForbiddenSAN" },
  { name: "a *.localhost name", dns: ["evil.localhost"], reason: "ForbiddenSAN" },
  { name: "localhost.localdomain", dns: ["localhost.localdomain"], reason: "ForbiddenSAN" },
  {
    name: "the API server's Service name",
    dns: ["kubernetes.default.svc.cluster.local"],
    reason: "ForbiddenSAN",
  },
  { name: "another Service's DNS name", dns: ["vault.secrets.svc"], reason: "ForbiddenSAN", says: "Service" },
  { name: "a Pod DNS name", dns: ["10-244-1-5.default.pod.cluster.local"], reason: "ForbiddenSAN" },
  { name: "a name with an empty label", dns: ["worker-b.."], reason: "ForbiddenSAN", says: "not a valid" },
  {
    name: "a Service CIDR address (kube-ipvs0 carries them all)",
    ips: ["10.96.12.34"],
    reason: "ClusterNetworkIP",
    says: "10.96.0.0/12",
    networks: clusterNetworks(),
  },
  {
    name: "an IPv6 Service address",
    ips: ["fd00:96::5"],
    reason: "ClusterNetworkIP",
    networks: clusterNetworks(),
  },
  {
    name: "the kubernetes Service ClusterIP",
    ips: ["10.96.0.1"],
    reason: "ClusterNetworkIP",
    networks: clusterNetworks(),
  },
  {
    name: "a CNI bridge gateway in the node's own pod CIDR",
    ips: ["10.244.1.1"],
    reason: "ClusterNetworkIP",
    says: 'pod CIDR of node "worker-a"',
    networks: clusterNetworks(),
  },
  {
    name: "the control-plane endpoint's DNS name",
    dns: ["CP.example.com."],
    reason: "SharedDNSName",
    networks: clusterNetworks(),
  },
  {
    name: "another node's name with a trailing dot",
    dns: ["worker-b."],
    reason: "DNSNameOfOtherNode",
    others: [nodeB],
  },
  {
    name: "another node's name in capitals",
    dns: ["WORKER-B"],
    reason: "DNSNameOfOtherNode",
    others: [nodeB],
  },
  {
    name: "another node's InternalDNS, spelled differently",
    dns: ["worker-b.example.com"],
    reason: "DNSNameOfOtherNode",
    others: [nodeB],
  },
  {
    name: "another node's IP written with leading zeros in its status",
    ips: ["10.0.0.2"],
    reason: "IPOfOtherNode",
    says: '"10.0.0.2" (node "worker-b")',
    others: [nodeB],
  },
  {
    name: "another node's IPv4 written with a port in its status",
    ips: ["10.0.0.5"],
    reason: "IPOfOtherNode",
    says: '"10.0.0.5" (node "worker-c")',
    others: [nodeC],
  },
  {
    name: "another node's IPv6 written in brackets with a port in its status",
    ips: ["2001:db8::c"],
    reason: "IPOfOtherNode",
    says: '"2001:db8::c" (node "worker-c")',
    others: [nodeC],
  },
  {
    name: "the IP another Node is named by, before its status has any address",
    ips: ["10.0.0.6"],
    reason: "IPOfOtherNode",
    says: '"10.0.0.6" (node "10.0.0.6")',
    others: namedByIP,
  },
  {
    name: "the IP another Node is named by in inet_aton's one-number form, before its status has any address",
    ips: ["10.0.0.7"],
    reason: "IPOfOtherNode",
    says: '"10.0.0.7" (node "167772167")',
    others: namedByIP,
  },
  {
    name: "the IPv4 address another node's 6to4 address carries",
    ips: ["10.0.0.8"],
    reason: "IPOfOtherNode",
    says: '"10.0.0.8" (node "worker-d")',
    others: [nodeD],
  },
];

describe("decide() denies, in CSR-only mode and with Talos, every SAN that does not identify the requesting machine alone", () => {
  for (const c of BOTH) {
    for (const mode of ["CSR-only", "Talos"] as const) {
      test(`${mode}: ${c.name} is ${c.reason}`, async () => {
        const dns = c.dns ?? [];
        const ips = c.ips ?? [];
        const pem = await csrA(["worker-a", ...dns], ips);
        const node = nodeAClaiming(dns, ips);
        const talos = mode === "Talos" ? talosReporting(dns, ips) : undefined;
        const d = decide(input(pem), node, talos, c.others ?? [], c.networks ?? NO_NETWORKS);
        expect(d).toMatchObject({ action: "deny", reason: c.reason });
        if (c.says && d.action === "deny") expect(d.message).toContain(c.says);
        // screen() agrees: Talos is never asked about what the cluster alone refuses.
        expect(screen(input(pem), node, c.others ?? [], c.networks ?? NO_NETWORKS)).toEqual(
          mode === "CSR-only"
            ? d
            : decide(input(pem), node, undefined, c.others ?? [], c.networks ?? NO_NETWORKS),
        );
      });
    }
  }

  test("a cluster-network denial needs no Node: it is decided before waiting for one", async () => {
    const pem = await csrA(["worker-a"], ["10.96.0.10"]);
    expect(decide(input(pem), undefined, undefined, [], clusterNetworks())).toMatchObject({
      action: "deny",
      reason: "ClusterNetworkIP",
    });
  });

  test("the node's own name is approved even when it is also a shared name", async () => {
    const n = new ClusterNetworks();
    n.set("kubeconfig/server", "the API server endpoint", { names: ["worker-a"] });
    const pem = await csrA(["worker-a"], []);
    expect(decide(input(pem), nodeAClaiming([], []), talosReporting([], []), [], n)).toMatchObject({
      action: "approve",
    });
  });

  test("a DNS SAN that reads as an IP is refused even when it is the node's own name", async () => {
    const user = "system:node:167772161";
    const pem = (await createCSR({ cn: user, o: ["system:nodes"], dns: ["167772161"], ips: ["10.0.0.1"] }))
      .csr;
    const node: NodeInput = {
      name: "167772161",
      addresses: [
        { type: "InternalIP", address: "10.0.0.1" },
        { type: "Hostname", address: "167772161" },
      ],
    };
    const csr = { ...input(pem), username: user };
    for (const talos of [undefined, talosReporting([], [], { nodename: "167772161" })]) {
      expect(decide(csr, node, talos)).toMatchObject({
        action: "deny",
        reason: "ForbiddenSAN",
        message: expect.stringContaining('DNS SAN "167772161" is read as IP address 10.0.0.1'),
      });
    }
    // Its address as an IP SAN, as a kubelet sends a Hostname that parses as an IP, is approved.
    const asIP = (await createCSR({ cn: user, o: ["system:nodes"], ips: ["10.0.0.1"] })).csr;
    expect(decide({ ...input(asIP), username: user }, node).action).toBe("approve");
  });

  test("a dNSName that is not ASCII is refused, as Go's parser refuses it", async () => {
    const ascii = await createRawCSR({
      subject: [[[CN, USER_A]], [[O, "system:nodes"]]],
      extensionRequests: [[sanExtension([new GeneralName({ dNSName: "worker-Z" })])]],
    });
    // The library writes IA5String byte by byte; put a Latin-1 byte (é) in place of the Z.
    const der = pemToDer(ascii);
    const at = Buffer.from(der).indexOf("worker-Z") + 7;
    der[at] = 0xe9;
    const pem = derToPem(der);
    expect(decide(input(pem), nodeAClaiming(["worker-\u00e9"], []))).toMatchObject({
      action: "deny",
      reason: "InvalidRequest",
      message: expect.stringContaining("dNSName is malformed"),
    });
  });
});

describe("decide() with Talos also refuses what only Talos can tell", () => {
  const cases: Array<{
    name: string;
    ip: string;
    over: Partial<TalosFacts>;
    reason: DenyReason;
    says: string;
  }> = [
    {
      name: "an address on a dummy link (kube-ipvs0)",
      ip: "10.0.0.50",
      over: {
        sharedAddresses: new Map([["10.0.0.50", 'Talos reports it on "kube-ipvs0", a dummy link']]),
      },
      reason: "SharedIP",
      says: "kube-ipvs0",
    },
    {
      name: "a virtual IP Talos excludes from the machine's node IPs",
      ip: "10.0.0.100",
      over: { excludedSubnets: ["10.244.0.0/16", "10.96.0.0/12", "10.0.0.100/32"] },
      reason: "SharedIP",
      says: "Talos excludes",
    },
    {
      name: "an address in a pod CIDR Talos excludes, even when the CCM knows no cluster ranges",
      ip: "10.244.3.1",
      over: { excludedSubnets: ["10.244.0.0/16"] },
      reason: "SharedIP",
      says: "10.244.0.0/16",
    },
    {
      name: "an address in an IPv4-mapped prefix Talos excludes",
      ip: "10.0.0.100",
      over: { excludedSubnets: ["::ffff:10.0.0.96/124"] },
      reason: "SharedIP",
      says: "IP SAN 10.0.0.100 is in ::ffff:10.0.0.96/124, which Talos excludes",
    },
    {
      name: "a virtual IP Talos excludes written IPv4-mapped",
      ip: "10.0.0.100",
      over: { excludedSubnets: ["::ffff:10.0.0.100"] },
      reason: "SharedIP",
      says: "IP SAN 10.0.0.100 is in ::ffff:10.0.0.100, which Talos excludes",
    },
    {
      name: "the broadcast address of the machine's subnet, Talos reporting it IPv4-mapped",
      ip: "10.0.0.255",
      over: { addresses: ["::ffff:10.0.0.1/120", "::ffff:10.0.0.255/120"] },
      reason: "NonUniqueIP",
      says: "IP SAN 10.0.0.255 is the network or broadcast address of 10.0.0.0/24",
    },
    {
      name: "the broadcast address of the machine's own subnet",
      ip: "10.0.0.255",
      over: {},
      reason: "NonUniqueIP",
      says: "10.0.0.0/24",
    },
    {
      name: "the network address of the machine's own subnet",
      ip: "10.0.0.0",
      over: {},
      reason: "NonUniqueIP",
      says: "10.0.0.0/24",
    },
  ];
  for (const c of cases) {
    test(`${c.name} is ${c.reason}, while CSR-only mode, which cannot see it, approves`, async () => {
      const pem = await csrA(["worker-a"], [c.ip]);
      const node = nodeAClaiming([], [c.ip]);
      const d = decide(input(pem), node, talosReporting([], [c.ip], c.over));
      expect(d).toMatchObject({ action: "deny", reason: c.reason });
      if (d.action === "deny") expect(d.message).toContain(c.says);
      expect(decide(input(pem), node).action).toBe("approve");
    });
  }

  test("a machine's own second address on eth0 is still approved", async () => {
    const pem = await csrA(["worker-a"], ["10.0.0.1", "10.0.0.7"]);
    const d = decide(
      input(pem),
      nodeAClaiming([], ["10.0.0.7"]),
      talosReporting([], ["10.0.0.7"]),
      [],
      clusterNetworks(),
    );
    expect(d).toMatchObject({ action: "approve" });
  });
});
