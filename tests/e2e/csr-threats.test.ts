// The CSR threat model end to end: the compiled binary against a real API server (from 1.33 its
// ServiceCIDR `kubernetes` holds 10.96.0.0/16; before, there is no ServiceCIDR API), simulated kubelets that write their own Node status
// as an attacker would and file CSRs as their own node identity, and the fake apid. A SAN is
// approved only if it identifies the requesting machine alone: loopback, Service and pod addresses,
// `localhost`, another node's name with a trailing dot or in capitals, and another node's IP spelled
// with leading zeros are denied with Talos and in CSR-only mode alike, each with its reason, the SAN
// named in its message, and an Event. A SAN is judged by what it means, not how it is spelled: IPv6
// forms that carry another node's IPv4 (6to4, Teredo, SIIT, local-use NAT64), DNS names clients read
// as its IPv4 (`169803778`, `10.31.0.02`, `10.31.2`, octal, hex), another node's address written
// `ipv4:port` or `[v6]:port`, the IP a Node is named by before its status has any address, and the
// IPv4 another node's 6to4 address carries are denied in both modes too. What only Talos can tell (a
// virtual IP, an address on kube-ipvs0, an IPv4-mapped prefix its NodeIPConfig excludes) is denied
// with Talos. In CSR-only mode, DNS names a Pod resolves to a Service through its search path
// (`vault`, `vault.vault`, `kube-dns.kube-system`) are denied as ServiceName by the namespaces and
// Services that exist, while the node's plain hostname is approved; with Talos they are names Talos
// does not report. The process stays up through all of them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { V1CertificateSigningRequestCondition } from "@kubernetes/client-node";
import { ApidBed } from "../support/bed.ts";
import { type TestCluster, waitFor } from "../support/cluster.ts";
import {
  type FakeNodeSpec,
  loopbackAddress,
  normalizeAddress,
  platformMetadata,
} from "../support/fixtures.ts";
import type { SimulatedKubelet } from "../support/kubelet.ts";
import { servesServiceCIDRv1 } from "../support/kubematrix.ts";
import type { CcmProcess } from "../support/process.ts";

const IP = { a: "10.31.0.1", b: "10.31.0.2" };
/** A Talos virtual IP held by machine A (Talos lists it in A's NodeIPConfig excludeSubnets). */
const VIP = "10.31.0.100";
/** A LoadBalancer IP kube-proxy (IPVS) puts on kube-ipvs0: outside every cluster range. */
const LB_IP = "10.31.5.5";
const POD_CIDR_A = "10.244.1.0/24";
const CNI_GATEWAY = "10.244.1.1";
/** The cluster's pod network as only Talos' ControllerManagerConfig tells it, and an address in it. */
const TALOS_POD_CIDR = "10.245.0.0/16";
const TALOS_POD_IP = "10.245.3.3";
/** The test bed's kubernetes Service ClusterIP (first address of 10.96.0.0/16). */
const KUBERNETES_SVC = "10.96.0.1";
/** Node C writes these with its kubelet port: `ipv4:port` and `[v6]:port`. */
const IP_C = { v4: "10.31.0.5", v6: "fd31::5" };
/** Nodes named by an IP (dotted, and inet_aton's one number for 10.31.0.7), with no address yet. */
const NAMED_BY_IP = { dotted: "10.31.0.6", number: "169803783", numberIP: "10.31.0.7" };
/** Node D's 6to4 address carries this IPv4 address. */
const IP_IN_6TO4 = "10.31.0.8";
/** A prefix A's NodeIPConfig excludes written IPv4-mapped, and A's address on eth0 inside it. */
const MAPPED_EXCLUDED = "::ffff:10.31.9.0/120";
const IN_MAPPED_EXCLUDED = "10.31.9.9";
/** IPv6 forms of B's IPv4 10.31.0.2 (0a1f:0002), each a relay's or translator's way to it. */
const EMBEDDING = [
  { form: "6to4", ip: "2002:a1f:2::1", kind: "a 6to4 address (2002::/16" },
  // B's address as the Teredo client, inverted; the server is 65.54.227.120.
  { form: "Teredo", ip: "2001:0:4136:e378:8000:63bf:f5e0:fffd", kind: "a Teredo address (2001::/32)" },
  { form: "SIIT", ip: "::ffff:0:a1f:2", kind: "an IPv4-translated (SIIT) address (::ffff:0:0:0/96)" },
  { form: "local-use NAT64", ip: "64:ff9b:1::a1f:2", kind: "a local-use NAT64 address (64:ff9b:1::/48)" },
];
/** DNS names glibc's inet_aton, curl and browsers read as B's IPv4 10.31.0.2. */
const DNS_SPELLINGS = ["169803778", "10.31.0.02", "10.31.2", "012.037.0.02", "0xa.0x1f.0.2", "0XA1F0002"];
/** Names a Pod resolves to a Service through its DNS search path, each with the Service. */
const SERVICE_NAMES = [
  { dns: "vault", service: "vault/vault" },
  { dns: "vault.vault", service: "vault/vault" },
  { dns: "kube-dns.kube-system", service: "kube-system/kube-dns" },
];

/** Machine A as Talos reports it: every address the attacker's kubelet claims is really on it. */
function machineA(): FakeNodeSpec {
  const addr = (address: string, linkName: string, linkIndex: number, scope: "host" | "global" = "global") =>
    normalizeAddress("thr-a", { address, linkName, linkIndex, scope, flags: "permanent" });
  return {
    name: "thr-a",
    nodeIPs: [IP.a],
    talosVersion: "v1.13.0",
    platformMetadata: platformMetadata({ platform: "metal", hostname: "thr-a" }),
    addresses: [
      loopbackAddress("thr-a"),
      addr("::1/128", "lo", 1, "host"),
      addr(`${IP.a}/24`, "eth0", 2),
      addr(`${VIP}/32`, "eth0", 2),
      addr(`${KUBERNETES_SVC}/32`, "kube-ipvs0", 3),
      addr(`${LB_IP}/32`, "kube-ipvs0", 3),
      addr(`${CNI_GATEWAY}/24`, "cni0", 4),
      addr(`${IN_MAPPED_EXCLUDED}/24`, "eth0", 2),
    ],
    links: [
      { name: "lo", type: "loopback" },
      { name: "eth0" },
      { name: "kube-ipvs0", kind: "dummy" },
      { name: "cni0", kind: "bridge" },
    ],
    nodeIPConfig: { excludeSubnets: ["10.244.0.0/16", "10.96.0.0/16", VIP, MAPPED_EXCLUDED] },
  };
}

let bed: ApidBed;
let cluster: TestCluster;
let ccm: CcmProcess;
let a: SimulatedKubelet;

async function startCsrCcm(withTalos: boolean, extra: string[] = []): Promise<void> {
  ccm = await bed.startCcm(
    { controllers: "node-csr-approval", withoutTalos: !withTalos, args: extra },
    /Approving kubelet serving CSRs/,
  );
}

function decided(name: string): Promise<V1CertificateSigningRequestCondition> {
  return cluster.csrDecision(name, 10_000, () => ccm.output.slice(-3000));
}

async function warningReasons(name: string): Promise<string[]> {
  const list = await cluster.adminClient.get<{
    items: Array<{ reason: string; type: string; regarding: { name: string } }>;
  }>("/apis/events.k8s.io/v1/namespaces/default/events");
  return list.items.filter((e) => e.regarding.name === name && e.type === "Warning").map((e) => e.reason);
}

beforeAll(async () => {
  bed = await ApidBed.start("csr-threats-", {
    apid: {
      nodes: [machineA()],
      // What the control-plane endpoint's Talos says of the cluster (read once, without a node); its
      // Service range is wider than the ServiceCIDR object, which a denial names as the more specific.
      controllerManagerConfig: { podCIDRs: [TALOS_POD_CIDR], serviceCIDRs: ["10.96.0.0/12"] },
    },
  });
  cluster = bed.cluster;
  // The attacker's kubelet writes every address it wants a certificate for into its own status.
  a = await bed.register({
    name: "thr-a",
    ips: [IP.a],
    heartbeatMs: 0,
    addresses: [
      { type: "InternalIP", address: IP.a },
      { type: "Hostname", address: "thr-a" },
      ...[
        "127.0.0.1",
        "::1",
        VIP,
        KUBERNETES_SVC,
        "10.96.0.10",
        LB_IP,
        CNI_GATEWAY,
        IP.b,
        "10.200.0.5",
        TALOS_POD_IP,
        ...EMBEDDING.map((e) => e.ip),
        IP_C.v4,
        IP_C.v6,
        NAMED_BY_IP.dotted,
        NAMED_BY_IP.numberIP,
        IP_IN_6TO4,
        IN_MAPPED_EXCLUDED,
      ].map((address) => ({
        type: "InternalIP",
        address,
      })),
      ...["localhost", "thr-b.", "THR-B.lan", ...DNS_SPELLINGS, ...SERVICE_NAMES.map((n) => n.dns)].map(
        (address) => ({
          type: "InternalDNS",
          address,
        }),
      ),
    ],
  });
  // Node B writes its IP with a leading zero and its DNS name in capitals; both are still its claims.
  await bed.register({
    name: "thr-b",
    ips: [IP.b],
    heartbeatMs: 0,
    addresses: [
      { type: "InternalIP", address: "10.31.0.002" },
      { type: "Hostname", address: "thr-b" },
      { type: "InternalDNS", address: "thr-b.LAN" },
    ],
  });
  // Node C writes its addresses with its kubelet port; D has a 6to4 address of 10.31.0.8.
  await bed.register({
    name: "thr-c",
    ips: [],
    noAnnotation: true,
    heartbeatMs: 0,
    addresses: [
      { type: "InternalIP", address: `${IP_C.v4}:10250` },
      { type: "InternalIP", address: `[${IP_C.v6}]:10250` },
    ],
  });
  await bed.register({
    name: "thr-d",
    ips: [],
    noAnnotation: true,
    heartbeatMs: 0,
    addresses: [{ type: "InternalIP", address: "2002:a1f:8::1" }],
  });
  // Nodes named by an IP, as a kubelet first creates them: no address in their status yet.
  for (const name of [NAMED_BY_IP.dotted, NAMED_BY_IP.number]) {
    await bed.register({
      name,
      ips: [],
      noAnnotation: true,
      heartbeatMs: 0,
      addresses: [],
    });
  }
  // Namespace vault with Service vault, and the cluster DNS Service in kube-system.
  await cluster.adminClient.create("/api/v1/namespaces", {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name: "vault" },
  });
  for (const [namespace, name, port] of [
    ["vault", "vault", 8200],
    ["kube-system", "kube-dns", 53],
  ] as const) {
    await cluster.adminClient.create(`/api/v1/namespaces/${namespace}/services`, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace },
      spec: { ports: [{ port, protocol: "TCP" }] },
    });
  }
  // node-ipam's job in a cluster; here the admin gives A its pod range.
  await cluster.adminClient.patch("/api/v1/nodes/thr-a", {
    spec: { podCIDR: POD_CIDR_A, podCIDRs: [POD_CIDR_A] },
  });
});

afterAll(() => bed?.stop());

interface Case {
  name: string;
  dns?: string[];
  ips?: string[];
  reason: string;
  /** The SAN as the denial's message names it. */
  san: string;
  /** What else the message says (each). */
  says?: string | string[];
}

/** A's CSR for its own IP and `ip`, denied as `reason` naming `IP SAN <ip>`. */
function ipSan(name: string, ip: string, reason: string, says?: string | string[]): Case {
  return { name, ips: [IP.a, ip], reason, san: `IP SAN ${ip}`, ...(says === undefined ? {} : { says }) };
}

/** A's CSR for its own IP and `ip`, which Node `node` claims: denied as IPOfOtherNode. */
function otherNodeIP(name: string, ip: string, node: string): Case {
  return { name, ips: [IP.a, ip], reason: "IPOfOtherNode", san: `"${ip}" (node "${node}")` };
}

/** A's CSR for its own name and `dns`, denied as `reason` naming `san`. */
function dnsSan(name: string, dns: string, reason: string, san: string, says?: string | string[]): Case {
  return { name, dns: ["thr-a", dns], reason, san, ...(says === undefined ? {} : { says }) };
}

/** Another Service's ClusterIP, in the test bed's Service range 10.96.0.0/16 (what names it varies). */
const OTHER_CLUSTER_IP = ipSan("another Service's ClusterIP", "10.96.0.10", "ClusterNetworkIP");

/** Denied in both modes with the same reason. */
const BOTH: Case[] = [
  ipSan("loopback 127.0.0.1", "127.0.0.1", "NonUniqueIP", "loopback"),
  ipSan("loopback ::1", "::1", "NonUniqueIP"),
  ipSan(
    "the kubernetes Service ClusterIP (on kube-ipvs0)",
    KUBERNETES_SVC,
    "ClusterNetworkIP",
    "Service default/kubernetes",
  ),
  ipSan(
    "a CNI bridge gateway in the node's own pod CIDR",
    CNI_GATEWAY,
    "ClusterNetworkIP",
    'pod CIDR of node "thr-a"',
  ),
  dnsSan("the DNS name localhost", "localhost", "ForbiddenSAN", 'DNS SAN "localhost"', "local host"),
  dnsSan(
    "another node's name with a trailing dot",
    "thr-b.",
    "DNSNameOfOtherNode",
    '"thr-b." (node "thr-b")',
  ),
  dnsSan(
    "another node's DNS name in other capitals",
    "THR-B.lan",
    "DNSNameOfOtherNode",
    '"THR-B.lan" (node "thr-b")',
  ),
  otherNodeIP("another node's IP, written 10.31.0.002 in that node's status", IP.b, "thr-b"),
  // A SAN is judged by what it means, not how it is spelled.
  ...EMBEDDING.map((e) =>
    // A local-use NAT64 address lists its IPv4 in every RFC 6052 layout; 10.31.0.2 is the /96 one.
    ipSan(`a ${e.form} address carrying another node's IPv4`, e.ip, "NonUniqueIP", [
      e.kind,
      "carrying IPv4 ",
      IP.b,
    ]),
  ),
  ...DNS_SPELLINGS.map((dns) =>
    dnsSan(
      `the DNS name ${dns}, which inet_aton and browsers read as another node's IPv4`,
      dns,
      "ForbiddenSAN",
      `DNS SAN ${JSON.stringify(dns)}`,
      ["is read as IP address ", IP.b],
    ),
  ),
  otherNodeIP("another node's IPv4 written ipv4:port in its status", IP_C.v4, "thr-c"),
  otherNodeIP("another node's IPv6 written [v6]:port in its status", IP_C.v6, "thr-c"),
  otherNodeIP(
    "the IP a Node is named by, before its status has any address",
    NAMED_BY_IP.dotted,
    NAMED_BY_IP.dotted,
  ),
  otherNodeIP(
    "the IP a Node is named by in inet_aton's one-number form, before its status has any address",
    NAMED_BY_IP.numberIP,
    NAMED_BY_IP.number,
  ),
  otherNodeIP("the IPv4 another node's 6to4 address carries", IP_IN_6TO4, "thr-d"),
];

/** Denied with Talos; CSR-only mode has no evidence against them. */
const TALOS_ONLY: Case[] = [
  ipSan(
    "an address in the pod network Talos' ControllerManagerConfig names",
    TALOS_POD_IP,
    "ClusterNetworkIP",
    "Talos ControllerManagerConfig",
  ),
  ipSan("a virtual IP the machine holds (Talos NodeIPConfig excludes it)", VIP, "SharedIP", "Talos excludes"),
  ipSan("a LoadBalancer IP on kube-ipvs0", LB_IP, "SharedIP", "kube-ipvs0"),
  ipSan(
    "an address on eth0 inside an IPv4-mapped prefix NodeIPConfig excludes",
    IN_MAPPED_EXCLUDED,
    "SharedIP",
    `is in ${MAPPED_EXCLUDED}, which Talos excludes`,
  ),
];

async function expectDenied(c: Case): Promise<void> {
  const csr = await a.submitServingCSR({ dns: c.dns ?? ["thr-a"], ips: c.ips ?? [] });
  const name = csr.metadata?.name as string;
  const cond = await decided(name);
  expect(cond).toMatchObject({ type: "Denied", status: "True", reason: c.reason });
  expect(cond.message).toContain(c.san);
  for (const says of [c.says ?? []].flat()) expect(cond.message).toContain(says);
  await waitFor(async () => (await warningReasons(name)).includes(c.reason), 5000);
  expect(ccm.exitCode).toBeNull();
}

describe("with Talos, every SAN that does not identify the requesting machine alone is denied", () => {
  beforeAll(() => startCsrCcm(true));

  for (const c of [...BOTH, ...TALOS_ONLY]) {
    test(`${c.name} is denied as ${c.reason}, with an Event`, () => expectDenied(c));
  }

  test("another Service's ClusterIP is denied: known from the ServiceCIDR object, or before 1.33 from Talos", () =>
    expectDenied({
      ...OTHER_CLUSTER_IP,
      says: servesServiceCIDRv1(cluster.version) ? "ServiceCIDR kubernetes" : "Talos ControllerManagerConfig",
    }));

  for (const n of SERVICE_NAMES) {
    test(`the Service name ${n.dns} is denied as DNSNameNotReportedByTalos: Talos must know every name`, () =>
      expectDenied(
        dnsSan(
          n.dns,
          n.dns,
          "DNSNameNotReportedByTalos",
          `DNS SANs ${JSON.stringify(n.dns)}`,
          "Talos does not know",
        ),
      ));
  }

  test("the machine's own address is still approved", async () => {
    const csr = await a.submitServingCSR({ dns: ["thr-a"], ips: [IP.a] });
    expect(await decided(csr.metadata?.name as string)).toMatchObject({ type: "Approved" });
  });
});

describe("in CSR-only mode the same rules apply, with the Nodes and the cluster as evidence", () => {
  beforeAll(async () => {
    expect(await ccm.stop("SIGTERM")).toBe(0);
    await startCsrCcm(false, ["--service-cluster-ip-range=10.200.0.0/16"]);
    expect(ccm.output).toContain("CSR-only mode");
  });

  for (const c of BOTH) {
    test(`${c.name} is denied as ${c.reason}, with an Event`, () => expectDenied(c));
  }

  test("another Service's ClusterIP: denied from the ServiceCIDR object; before 1.33 only a flag naming its range can", async () => {
    if (servesServiceCIDRv1(cluster.version))
      return expectDenied({ ...OTHER_CLUSTER_IP, says: "ServiceCIDR kubernetes" });
    // No ServiceCIDR API, no Talos, and --service-cluster-ip-range names another range: nothing tells
    // this ClusterIP from a node address, as the start-up line and the README's matrix say.
    expect(ccm.output).toContain("not served (networking.k8s.io/v1 from Kubernetes 1.33)");
    const csr = await a.submitServingCSR({ dns: ["thr-a"], ips: OTHER_CLUSTER_IP.ips ?? [] });
    expect(await decided(csr.metadata?.name as string)).toMatchObject({ type: "Approved" });
  });

  test("an address in --service-cluster-ip-range is denied as ClusterNetworkIP", () =>
    expectDenied(ipSan("flag", "10.200.0.5", "ClusterNetworkIP", "--service-cluster-ip-range")));

  test("an address inside the IPv4-mapped prefix only Talos excludes is approved: CSR-only mode cannot see it", async () => {
    const csr = await a.submitServingCSR({ dns: ["thr-a"], ips: [IP.a, IN_MAPPED_EXCLUDED] });
    expect(await decided(csr.metadata?.name as string)).toMatchObject({
      type: "Approved",
      message: expect.stringContaining("checked against the Nodes only"),
    });
  });

  for (const n of SERVICE_NAMES) {
    test(`${n.dns}, which a Pod resolves to Service ${n.service}, is denied as ServiceName with an Event`, () =>
      expectDenied(
        dnsSan(
          n.dns,
          n.dns,
          "ServiceName",
          `DNS SAN ${JSON.stringify(n.dns)}`,
          `resolves to Service ${n.service} through a Pod's search path`,
        ),
      ));
  }

  test("the node's plain hostname, which no Service has, is approved", async () => {
    const csr = await a.submitServingCSR({ dns: ["thr-a"], ips: [IP.a] });
    expect(await decided(csr.metadata?.name as string)).toMatchObject({ type: "Approved" });
  });

  test("the process stays up through every denial", () => {
    expect(ccm.exitCode).toBeNull();
  });
});
