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
// with Talos. The process stays up through all of them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1CertificateSigningRequestCondition } from "@kubernetes/client-node";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import { SimulatedKubelet } from "../support/kubelet.ts";
import { servesServiceCIDRv1 } from "../support/kubematrix.ts";
import { type CcmProcess, startCcm } from "../support/process.ts";

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
      addr("127.0.0.1/8", "lo", 1, "host"),
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

let cluster: TestCluster;
let apid: FakeApid;
let dir: string;
let talosconfig: string;
let port: number;
let ccm: CcmProcess;
let a: SimulatedKubelet;

async function startCsrCcm(withTalos: boolean, extra: string[] = []): Promise<void> {
  ccm = await startCcm(
    {
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      ...(withTalos ? { talosconfig } : {}),
      securePort: port,
      args: extra,
    },
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
  dir = mkdtempSync(join(tmpdir(), "csr-threats-"));
  [cluster, apid] = await Promise.all([
    TestCluster.start(),
    FakeApid.start({
      nodes: [machineA()],
      // What the control-plane endpoint's Talos says of the cluster (read once, without a node); its
      // Service range is wider than the ServiceCIDR object, which a denial names as the more specific.
      controllerManagerConfig: { podCIDRs: [TALOS_POD_CIDR], serviceCIDRs: ["10.96.0.0/12"] },
    }),
  ]);
  talosconfig = await apid.writeTalosconfig(join(dir, "talosconfig"));
  port = await freePort();
  // The attacker's kubelet writes every address it wants a certificate for into its own status.
  a = await SimulatedKubelet.register(cluster, {
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
      ...["localhost", "thr-b.", "THR-B.lan", ...DNS_SPELLINGS].map((address) => ({
        type: "InternalDNS",
        address,
      })),
    ],
  });
  // Node B writes its IP with a leading zero and its DNS name in capitals; both are still its claims.
  await SimulatedKubelet.register(cluster, {
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
  await SimulatedKubelet.register(cluster, {
    name: "thr-c",
    ips: [],
    noAnnotation: true,
    heartbeatMs: 0,
    addresses: [
      { type: "InternalIP", address: `${IP_C.v4}:10250` },
      { type: "InternalIP", address: `[${IP_C.v6}]:10250` },
    ],
  });
  await SimulatedKubelet.register(cluster, {
    name: "thr-d",
    ips: [],
    noAnnotation: true,
    heartbeatMs: 0,
    addresses: [{ type: "InternalIP", address: "2002:a1f:8::1" }],
  });
  // Nodes named by an IP, as a kubelet first creates them: no address in their status yet.
  for (const name of [NAMED_BY_IP.dotted, NAMED_BY_IP.number]) {
    await SimulatedKubelet.register(cluster, {
      name,
      ips: [],
      noAnnotation: true,
      heartbeatMs: 0,
      addresses: [],
    });
  }
  // node-ipam's job in a cluster; here the admin gives A its pod range.
  await cluster.adminClient.patch("/api/v1/nodes/thr-a", {
    spec: { podCIDR: POD_CIDR_A, podCIDRs: [POD_CIDR_A] },
  });
});

afterAll(async () => {
  await ccm?.stop("SIGKILL");
  await Promise.all([cluster?.stop(), apid?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

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

/** Another Service's ClusterIP, in the test bed's Service range 10.96.0.0/16 (what names it varies). */
const OTHER_CLUSTER_IP: Case = {
  name: "another Service's ClusterIP",
  ips: [IP.a, "10.96.0.10"],
  reason: "ClusterNetworkIP",
  san: "IP SAN 10.96.0.10",
};

/** Denied in both modes with the same reason. */
const BOTH: Case[] = [
  {
    name: "loopback 127.0.0.1",
    ips: [IP.a, "127.0.0.1"],
    reason: "NonUniqueIP",
    san: "IP SAN 127.0.0.1",
    says: "loopback",
  },
  { name: "loopback ::1", ips: [IP.a, "::1"], reason: "NonUniqueIP", san: "IP SAN ::1" },
  {
    name: "the kubernetes Service ClusterIP (on kube-ipvs0)",
    ips: [IP.a, KUBERNETES_SVC],
    reason: "ClusterNetworkIP",
    san: `IP SAN ${KUBERNETES_SVC}`,
    says: "Service default/kubernetes",
  },
  {
    name: "a CNI bridge gateway in the node's own pod CIDR",
    ips: [IP.a, CNI_GATEWAY],
    reason: "ClusterNetworkIP",
    san: `IP SAN ${CNI_GATEWAY}`,
    says: 'pod CIDR of node "thr-a"',
  },
  {
    name: "the DNS name localhost",
    dns: ["thr-a", "localhost"],
    reason: "ForbiddenSAN",
    san: 'DNS SAN "localhost"',
    says: "local host",
  },
  {
    name: "another node's name with a trailing dot",
    dns: ["thr-a", "thr-b."],
    reason: "DNSNameOfOtherNode",
    san: '"thr-b." (node "thr-b")',
  },
  {
    name: "another node's DNS name in other capitals",
    dns: ["thr-a", "THR-B.lan"],
    reason: "DNSNameOfOtherNode",
    san: '"THR-B.lan" (node "thr-b")',
  },
  {
    name: "another node's IP, written 10.31.0.002 in that node's status",
    ips: [IP.a, IP.b],
    reason: "IPOfOtherNode",
    san: '"10.31.0.2" (node "thr-b")',
  },
  // A SAN is judged by what it means, not how it is spelled.
  ...EMBEDDING.map(
    (e): Case => ({
      name: `a ${e.form} address carrying another node's IPv4`,
      ips: [IP.a, e.ip],
      reason: "NonUniqueIP",
      san: `IP SAN ${e.ip}`,
      // A local-use NAT64 address lists its IPv4 in every RFC 6052 layout; 10.31.0.2 is the /96 one.
      says: [e.kind, "carrying IPv4 ", IP.b],
    }),
  ),
  ...DNS_SPELLINGS.map(
    (dns): Case => ({
      name: `the DNS name ${dns}, which inet_aton and browsers read as another node's IPv4`,
      dns: ["thr-a", dns],
      reason: "ForbiddenSAN",
      san: `DNS SAN ${JSON.stringify(dns)}`,
      says: ["is read as IP address ", IP.b],
    }),
  ),
  {
    name: "another node's IPv4 written ipv4:port in its status",
    ips: [IP.a, IP_C.v4],
    reason: "IPOfOtherNode",
    san: `"${IP_C.v4}" (node "thr-c")`,
  },
  {
    name: "another node's IPv6 written [v6]:port in its status",
    ips: [IP.a, IP_C.v6],
    reason: "IPOfOtherNode",
    san: `"${IP_C.v6}" (node "thr-c")`,
  },
  {
    name: "the IP a Node is named by, before its status has any address",
    ips: [IP.a, NAMED_BY_IP.dotted],
    reason: "IPOfOtherNode",
    san: `"${NAMED_BY_IP.dotted}" (node "${NAMED_BY_IP.dotted}")`,
  },
  {
    name: "the IP a Node is named by in inet_aton's one-number form, before its status has any address",
    ips: [IP.a, NAMED_BY_IP.numberIP],
    reason: "IPOfOtherNode",
    san: `"${NAMED_BY_IP.numberIP}" (node "${NAMED_BY_IP.number}")`,
  },
  {
    name: "the IPv4 another node's 6to4 address carries",
    ips: [IP.a, IP_IN_6TO4],
    reason: "IPOfOtherNode",
    san: `"${IP_IN_6TO4}" (node "thr-d")`,
  },
];

/** Denied with Talos; CSR-only mode has no evidence against them. */
const TALOS_ONLY: Case[] = [
  {
    name: "an address in the pod network Talos' ControllerManagerConfig names",
    ips: [IP.a, TALOS_POD_IP],
    reason: "ClusterNetworkIP",
    san: `IP SAN ${TALOS_POD_IP}`,
    says: "Talos ControllerManagerConfig",
  },
  {
    name: "a virtual IP the machine holds (Talos NodeIPConfig excludes it)",
    ips: [IP.a, VIP],
    reason: "SharedIP",
    san: `IP SAN ${VIP}`,
    says: "Talos excludes",
  },
  {
    name: "a LoadBalancer IP on kube-ipvs0",
    ips: [IP.a, LB_IP],
    reason: "SharedIP",
    san: `IP SAN ${LB_IP}`,
    says: "kube-ipvs0",
  },
  {
    name: "an address on eth0 inside an IPv4-mapped prefix NodeIPConfig excludes",
    ips: [IP.a, IN_MAPPED_EXCLUDED],
    reason: "SharedIP",
    san: `IP SAN ${IN_MAPPED_EXCLUDED}`,
    says: `is in ${MAPPED_EXCLUDED}, which Talos excludes`,
  },
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
    expectDenied({
      name: "flag",
      ips: [IP.a, "10.200.0.5"],
      reason: "ClusterNetworkIP",
      san: "IP SAN 10.200.0.5",
      says: "--service-cluster-ip-range",
    }));

  test("an address inside the IPv4-mapped prefix only Talos excludes is approved: CSR-only mode cannot see it", async () => {
    const csr = await a.submitServingCSR({ dns: ["thr-a"], ips: [IP.a, IN_MAPPED_EXCLUDED] });
    expect(await decided(csr.metadata?.name as string)).toMatchObject({
      type: "Approved",
      message: expect.stringContaining("checked against the Nodes only"),
    });
  });

  test("the process stays up through every denial", () => {
    expect(ccm.exitCode).toBeNull();
  });
});
