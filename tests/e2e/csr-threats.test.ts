// The CSR threat model end to end: the compiled binary against a real API server (v1.35, whose
// ServiceCIDR `kubernetes` holds 10.96.0.0/16), simulated kubelets that write their own Node status
// as an attacker would and file CSRs as their own node identity, and the fake apid. A SAN is
// approved only if it identifies the requesting machine alone: loopback, Service and pod addresses,
// `localhost`, another node's name with a trailing dot or in capitals, and another node's IP spelled
// with leading zeros are denied with Talos and in CSR-only mode alike, each with its reason and an
// Event; what only Talos can tell (a virtual IP, an address on kube-ipvs0) is denied with Talos. The
// process stays up through all of them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1CertificateSigningRequestCondition } from "@kubernetes/client-node";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import { SimulatedKubelet } from "../support/kubelet.ts";
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
    ],
    links: [
      { name: "lo", type: "loopback" },
      { name: "eth0" },
      { name: "kube-ipvs0", kind: "dummy" },
      { name: "cni0", kind: "bridge" },
    ],
    nodeIPConfig: { excludeSubnets: ["10.244.0.0/16", "10.96.0.0/16", VIP] },
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
      ].map((address) => ({
        type: "InternalIP",
        address,
      })),
      ...["localhost", "thr-b.", "THR-B.lan"].map((address) => ({ type: "InternalDNS", address })),
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
  says?: string;
}

/** Denied in both modes with the same reason. */
const BOTH: Case[] = [
  { name: "loopback 127.0.0.1", ips: [IP.a, "127.0.0.1"], reason: "NonUniqueIP", says: "loopback" },
  { name: "loopback ::1", ips: [IP.a, "::1"], reason: "NonUniqueIP" },
  {
    name: "the kubernetes Service ClusterIP (on kube-ipvs0)",
    ips: [IP.a, KUBERNETES_SVC],
    reason: "ClusterNetworkIP",
    says: "Service default/kubernetes",
  },
  {
    name: "another Service's ClusterIP, known from the ServiceCIDR object",
    ips: [IP.a, "10.96.0.10"],
    reason: "ClusterNetworkIP",
    says: "ServiceCIDR kubernetes",
  },
  {
    name: "a CNI bridge gateway in the node's own pod CIDR",
    ips: [IP.a, CNI_GATEWAY],
    reason: "ClusterNetworkIP",
    says: 'pod CIDR of node "thr-a"',
  },
  { name: "the DNS name localhost", dns: ["thr-a", "localhost"], reason: "ForbiddenSAN", says: "local host" },
  {
    name: "another node's name with a trailing dot",
    dns: ["thr-a", "thr-b."],
    reason: "DNSNameOfOtherNode",
    says: '(node "thr-b")',
  },
  {
    name: "another node's DNS name in other capitals",
    dns: ["thr-a", "THR-B.lan"],
    reason: "DNSNameOfOtherNode",
  },
  {
    name: "another node's IP, written 10.31.0.002 in that node's status",
    ips: [IP.a, IP.b],
    reason: "IPOfOtherNode",
    says: '"10.31.0.2" (node "thr-b")',
  },
];

/** Denied with Talos; CSR-only mode has no evidence against them. */
const TALOS_ONLY: Case[] = [
  {
    name: "an address in the pod network Talos' ControllerManagerConfig names",
    ips: [IP.a, TALOS_POD_IP],
    reason: "ClusterNetworkIP",
    says: "Talos ControllerManagerConfig",
  },
  {
    name: "a virtual IP the machine holds (Talos NodeIPConfig excludes it)",
    ips: [IP.a, VIP],
    reason: "SharedIP",
    says: "Talos excludes",
  },
  { name: "a LoadBalancer IP on kube-ipvs0", ips: [IP.a, LB_IP], reason: "SharedIP", says: "kube-ipvs0" },
];

async function expectDenied(c: Case): Promise<void> {
  const csr = await a.submitServingCSR({ dns: c.dns ?? ["thr-a"], ips: c.ips ?? [] });
  const name = csr.metadata?.name as string;
  const cond = await decided(name);
  expect(cond).toMatchObject({ type: "Denied", status: "True", reason: c.reason });
  if (c.says) expect(cond.message).toContain(c.says);
  await waitFor(async () => (await warningReasons(name)).includes(c.reason), 5000);
  expect(ccm.exitCode).toBeNull();
}

describe("with Talos, every SAN that does not identify the requesting machine alone is denied", () => {
  beforeAll(() => startCsrCcm(true));

  for (const c of [...BOTH, ...TALOS_ONLY]) {
    test(`${c.name} is denied as ${c.reason}, with an Event`, () => expectDenied(c));
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

  test("an address in --service-cluster-ip-range is denied as ClusterNetworkIP", () =>
    expectDenied({
      name: "flag",
      ips: [IP.a, "10.200.0.5"],
      reason: "ClusterNetworkIP",
      says: "--service-cluster-ip-range",
    }));

  test("the process stays up through every denial", () => {
    expect(ccm.exitCode).toBeNull();
  });
});
