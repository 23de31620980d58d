// Beside the Oxide CCM, end to end: this CCM (cloud-node, cloud-node-lifecycle, with the shipped
// rules/oxide.yaml) and the Oxide CCM v0.7.1 (built from its release archive pinned in
// tests/support/pins.ts by tests/support/cloudccm-bins.sh, OXIDE_CCM) on one real API server, the
// Talos simulator for the machines, a fake of the Oxide API (tests/support/fakeoxide.ts) for the
// cloud. The Oxide CCM runs as its own service account with the RBAC of its release manifest
// (manifests/oxide-cloud-controller-manager.yaml, read from the same archive).
//
// a. The split operators run: this CCM initializes the Nodes of two simulated Oxide instances
//    (Talos' nocloud platform, SMBIOS manufacturer Oxide, system UUID = instance id) with
//    providerID oxide://<uuid> through rules/oxide.yaml; the Oxide CCM runs its service controller
//    only (service-lb-controller). Its "load balancer" is one floating IP per Service, attached to
//    the first node by name (internal/provider/load_balancer.go selectTargetNode): a node there
//    whose provider ID is not oxide:// (a bare-metal Talos machine, talos://metal/<ip>) stops it
//    before any API call; a wrong token is answered 401; with the node excluded and the right token
//    the Service gets a floating IP attached to the first Oxide node and, as ingress, the floating
//    IP (ipMode Proxy) followed by that node's InternalIPs; excluding that node moves the IP.
// b. The Oxide CCM with its default controllers beside this one, what happens is asserted as it
//    is: both CCMs keep rewriting the addresses of a node whose instance has external IPs (the
//    Oxide CCM adds them as ExternalIP, this CCM writes them back out), and neither writes a node
//    whose lists agree; labels, taints and provider IDs stay; a NotReady node with a provider ID it
//    cannot parse is only logged about; a NotReady node whose instance is stopped gets the shutdown
//    taint from the Oxide CCM once and keeps it (this CCM's lifecycle controller leaves a NotReady
//    node's taint alone, as upstream); a
//    NotReady node whose instance is gone is deleted by the Oxide CCM; a node whose Talos is not up
//    yet is initialized by the Oxide CCM (instance looked up by node name); kubelet-serving CSRs
//    are never touched by it (no CSR code, no CSR permission). This CCM's second-writer detection
//    reports the address fight and the late node's provider ID (a ConflictingWriter Event each, the
//    metric counting every rewrite, a log line), not the Oxide CCM's shutdown taint.
// c. The split with Node cleanup: the Oxide CCM's service-lb and cloud-node-lifecycle controllers,
//    this CCM's cloud-node only: a stopped instance's node keeps its shutdown taint, a gone
//    instance's node is deleted, no address is rewritten.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { V1CertificateSigningRequest, V1Node, V1Service } from "@kubernetes/client-node";
import { PATCH } from "../../lib/kubeapi.ts";
import { CloudBed, initialized, TALOS_USER } from "../support/cloudbed.ts";
import { type AuditEvent, type EventV1, type TestCluster, waitFor } from "../support/cluster.ts";
import { FakeOxide } from "../support/fakeoxide.ts";
import {
  type FakeNodeSpec,
  loadFixture,
  loopbackAddress,
  normalizeAddress,
  platformMetadata,
} from "../support/fixtures.ts";
import { nodeView, type SimulatedKubelet } from "../support/kubelet.ts";
import type { CcmProcess } from "../support/process.ts";
import { addSimMachine } from "../support/simmachines.ts";
import type { TalosSim } from "../support/talossim.ts";

const ROOT = join(import.meta.dir, "..", "..");
const PROJECT = "talos";
const TOKEN = "oxide-token-4f1c2b9a7d3e5f60718293a4b5c6d7e8f9a0b1c2";
const OXIDE_USER = "system:serviceaccount:kube-system:oxide-cloud-controller-manager";
/** The Oxide CCM's field manager: client-go's User-Agent up to the first "/", its binary's name. */
const OXIDE_MANAGER = "oxide-cloud-controller-manager";
const SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown";
const EXCLUDE_LB = "node.kubernetes.io/exclude-from-external-load-balancers";
const GIB = 1024 ** 3;

/** A simulated Oxide instance running Talos: nocloud metadata and SMBIOS as Oxide gives them. */
function oxMachine(n: number, instanceId: string): FakeNodeSpec {
  const name = `talos-ox-${n}`;
  const ip = `172.30.0.${4 + n}`;
  const addr = (a: Record<string, unknown>) => normalizeAddress(name, a);
  return {
    name,
    nodeIPs: [ip],
    talosVersion: "v1.13.5",
    // Nexus's cloud-init meta-data is {instance-id, local-hostname, public-keys}
    // (omicron nexus/src/cidata.rs); Talos' nocloud platform reads local-hostname as internalDNS and
    // the host name (platform/nocloud/nocloud.go ParseMetadata).
    platformMetadata: platformMetadata({
      platform: "nocloud",
      hostname: name,
      instanceId,
      internalDNS: name,
    }),
    // Propolis' SMBIOS type 1 without Nexus input: Oxide / OxVM, serial and UUID the instance id
    // (propolis bin/propolis-server/src/lib/initializer.rs generate_smbios); go-smbios prints it lower case.
    systemInformation: {
      manufacturer: "Oxide",
      productName: "OxVM",
      version: "",
      serialNumber: instanceId,
      uuid: instanceId,
      wakeUpType: "Power Switch",
      skuNumber: "",
    },
    addresses: [
      loopbackAddress(name),
      addr({ address: `${ip}/24`, linkName: "eth0", linkIndex: 2, priority: 1024 }),
    ],
  };
}

const OX1 = oxMachine(1, "3d8e5a21-6b7c-4f0e-9a1b-2c3d4e5f6a71");
const OX2 = oxMachine(2, "3d8e5a21-6b7c-4f0e-9a1b-2c3d4e5f6a72");
const OX3 = oxMachine(3, "3d8e5a21-6b7c-4f0e-9a1b-2c3d4e5f6a73");
/** A bare-metal Talos machine in the same cluster (talos://metal/<ip>); its name sorts first. */
const METAL = loadFixture("metal-56");
const OX1_EPHEMERAL = "198.51.100.31";

const idOf = (m: FakeNodeSpec) => m.platformMetadata.instanceId;
const ipOf = (m: FakeNodeSpec) => m.nodeIPs[0] as string;

let bed: CloudBed<FakeOxide>;
let cluster: TestCluster;
let sim: TalosSim;
let oxide: FakeOxide;
let oxideCcm: CcmProcess | undefined;

/** Writes to nodes/status are logged with their request (what each CCM wrote), every request of the
 * Oxide CCM's to certificates.k8s.io (to show there is none), and other writes as metadata. */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    verbs: ["patch", "update"]
    resources: [{ group: "", resources: ["nodes/status"] }]
  - level: Metadata
    users: ["${OXIDE_USER}"]
    resources: [{ group: "certificates.k8s.io" }]
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Metadata
`;

/** Starts the Oxide CCM with `args`; resolves once it logged that each controller in `started` started. */
function startOxideCcm(args: string[], started: string[], token = TOKEN): Promise<CcmProcess> {
  return bed.startCloudCcm({
    provider: ["--cloud-provider=oxide"],
    args,
    started,
    env: { OXIDE_HOST: oxide.url, OXIDE_TOKEN: token, OXIDE_PROJECT: PROJECT },
  });
}

function output(): string {
  return (
    `this CCM:\n${bed.talosCcm?.output.slice(-3000)}\nOxide CCM:\n${oxideCcm?.output.slice(-4000)}\n` +
    `fake Oxide API, last requests:\n${JSON.stringify(oxide.requests.slice(-12))}`
  );
}

async function getService(): Promise<V1Service> {
  return cluster.adminClient.get<V1Service>("/api/v1/namespaces/default/services/web");
}

async function serviceWhen(what: string, pred: (s: V1Service) => boolean, ms = 20_000): Promise<V1Service> {
  let svc: V1Service | undefined;
  await waitFor(
    async () => {
      svc = await getService();
      return pred(svc);
    },
    ms,
    () => `Service web: ${what}; status ${JSON.stringify(svc?.status)}\n${output()}`,
  );
  return svc as V1Service;
}

/** Waits for an Event about Service web with `reason` whose note contains `text`. */
async function serviceEvent(reason: string, text: string, ms = 20_000): Promise<EventV1> {
  let found: EventV1 | undefined;
  await waitFor(
    async () => {
      found = (await cluster.eventsAbout("web")).find((e) => e.reason === reason && e.note.includes(text));
      return found !== undefined;
    },
    ms,
    () => `no ${reason} Event containing ${JSON.stringify(text)} on Service web\n${output()}`,
  );
  return found as EventV1;
}

const hasShutdownTaint = (n: V1Node) => (n.spec?.taints ?? []).some((t) => t.key === SHUTDOWN_TAINT);

function addInstance(m: FakeNodeSpec, ephemeralIp?: string): void {
  oxide.addInstance({
    id: idOf(m),
    name: m.name,
    hostname: m.name,
    ncpus: 2,
    memory: 8 * GIB,
    runState: "running",
    nics: [ipOf(m)],
    ...(ephemeralIp ? { ephemeralIp } : {}),
  });
}

const register = (m: FakeNodeSpec) => bed.register(m, m.systemInformation?.uuid ?? "");

beforeAll(async () => {
  bed = await CloudBed.start("oxide", {
    prefix: "beside-oxide-e2e-",
    auditPolicy: AUDIT_POLICY,
    // The Oxide CCM's identity: the service account its manifest binds its ClusterRole to.
    serviceAccount: "oxide-cloud-controller-manager",
    fake: FakeOxide.start({ token: TOKEN, project: PROJECT }),
    context: output,
  });
  ({ cluster, sim, fake: oxide } = bed);
  for (const m of [OX1, OX2, METAL]) await addSimMachine(sim, m);
  addInstance(OX1, OX1_EPHEMERAL);
  addInstance(OX2);

  await bed.startTalosCcm(
    {
      controllers: "cloud-node,cloud-node-lifecycle",
      cloudConfig: join(ROOT, "rules", "oxide.yaml"),
      securePort: bed.metricsPort,
      alwaysAllowPaths: "/metrics",
      args: ["--node-monitor-period=1s"],
    },
    /Starting controller.*cloud-node-lifecycle/,
  );
  for (const m of [OX1, OX2, METAL]) await register(m);
});

afterAll(() => bed?.stop());

describe("a. this CCM for nodes, the Oxide CCM for load balancers only", () => {
  test("this CCM initializes the Oxide Nodes through rules/oxide.yaml: oxide://<system UUID>", async () => {
    for (const m of [OX1, OX2]) {
      const v = nodeView(await bed.nodeWhen(m.name, "is not initialized", initialized));
      expect(v.providerID).toBe(`oxide://${idOf(m)}`);
      expect(v.labels).toMatchObject({ "node.cloudprovider.kubernetes.io/platform": "nocloud" });
      expect(v.addresses).toEqual([
        { type: "InternalIP", address: ipOf(m) },
        { type: "Hostname", address: m.name },
      ]);
    }
    const metal = await bed.nodeWhen(METAL.name, "is not initialized", initialized);
    expect(metal.spec?.providerID).toBe(`talos://metal/${ipOf(METAL)}`);
  });

  test("the first node by name has no oxide:// provider ID: the Oxide CCM's load balancer fails before any API call", async () => {
    // A wrong token, checked in the next test: no call reaches the API before it.
    oxideCcm = await startOxideCcm(
      ["--controllers=service-lb-controller"],
      ["service-lb-controller"],
      "oxide-token-wrong",
    );
    await bed.createLoadBalancer();
    // load_balancer.go EnsureLoadBalancer: selectTargetNode (first by name: rpi-1), then
    // InstanceIDFromProviderID on its talos://metal/<ip>.
    await serviceEvent("SyncLoadBalancerFailed", "provider id does not have 'oxide://' prefix");
    // EnsureLoadBalancer makes no call. A node sync of the service controller (UpdateLoadBalancer, on
    // any Node change while the Service is cached, e.g. a kubelet's or this CCM's patch) may look the
    // floating IP up by name: seen once in five runs under load, a GET answered 401.
    const lookup = (r: { method: string; path: string }) =>
      r.method === "GET" && r.path === "/v1/floating-ips/kubernetes-default-web";
    expect(oxide.requests.filter((r) => !lookup(r))).toEqual([]);
  });

  test("with that node excluded, a wrong API token is answered 401: no floating IP, no ingress", async () => {
    await cluster.adminClient.patch(`/api/v1/nodes/${METAL.name}`, {
      metadata: { labels: { [EXCLUDE_LB]: "true" } },
    });
    await waitFor(
      async () => oxide.requests.length > 0,
      20_000,
      () => `the Oxide CCM made no API call after the exclusion\n${output()}`,
    );
    await oxideCcm?.waitForLog(/credentials missing or invalid/, 10_000);
    await oxideCcm?.stop();
    expect(oxide.requests.every((r) => r.status === 401 && !r.authorized)).toBe(true);
    expect(oxide.floatingIps()).toEqual([]);
    expect((await getService()).status?.loadBalancer?.ingress).toBeUndefined();
  });

  test("the Service gets a floating IP attached to the first Oxide node; ingress: the floating IP, then that node's InternalIP", async () => {
    const before = oxide.requests.length;
    oxideCcm = await startOxideCcm(["--controllers=service-lb-controller"], ["service-lb-controller"]);
    const svc = await serviceWhen(
      "has no ingress",
      (s) => (s.status?.loadBalancer?.ingress?.length ?? 0) > 0,
    );
    const fips = oxide.floatingIps();
    expect(fips).toHaveLength(1);
    const fip = fips[0] as (typeof fips)[number];
    // Named <--cluster-name>-<namespace>-<name>, attached to talos-ox-1's instance.
    expect(fip).toMatchObject({
      name: "kubernetes-default-web",
      description: "Managed by oxide-cloud-controller-manager.",
      instance_id: idOf(OX1),
      project_id: oxide.project.id,
    });
    // load_balancer.go toLoadBalancerStatus: the floating IP with ipMode Proxy, then the target
    // node's InternalIPs without one (the API server defaults it to VIP), so kube-proxy takes the
    // traffic Oxide forwards from the floating IP to that node's private address.
    expect(svc.status?.loadBalancer?.ingress).toEqual([
      { ip: fip.ip, ipMode: "Proxy" },
      { ip: ipOf(OX1), ipMode: "VIP" },
    ]);
    const calls = oxide.requests
      .slice(before)
      .map((r) => [r.method, r.path, r.query, r.status, r.body ?? null]);
    expect(calls).toEqual([
      ["GET", "/v1/floating-ips/kubernetes-default-web", `?project=${PROJECT}`, 404, null],
      [
        "POST",
        "/v1/floating-ips",
        `?project=${PROJECT}`,
        201,
        {
          name: "kubernetes-default-web",
          description: "Managed by oxide-cloud-controller-manager.",
          address_allocator: { type: "auto" },
        },
      ],
      ["POST", `/v1/floating-ips/${fip.id}/attach`, "", 202, { kind: "instance", parent: idOf(OX1) }],
    ]);
    // What the client sends with every request (oxide.go lib.go buildRequest, version.go).
    for (const r of oxide.requests.slice(before)) {
      expect(r).toMatchObject({
        authorized: true,
        apiVersion: "2026060800.0.0",
        userAgent: "oxide.go/v0.10.0",
      });
    }
  });

  test("excluding the target node moves the floating IP to the next node by name, and back", async () => {
    await cluster.adminClient.patch(`/api/v1/nodes/${OX1.name}`, {
      metadata: { labels: { [EXCLUDE_LB]: "true" } },
    });
    let svc = await serviceWhen("ingress is not on talos-ox-2", (s) =>
      (s.status?.loadBalancer?.ingress ?? []).some((i) => i.ip === ipOf(OX2)),
    );
    const fip = oxide.floatingIps()[0];
    expect(fip?.instance_id).toBe(idOf(OX2));
    expect(svc.status?.loadBalancer?.ingress).toEqual([
      { ip: fip?.ip as string, ipMode: "Proxy" },
      { ip: ipOf(OX2), ipMode: "VIP" },
    ]);
    expect(oxide.requestsTo("POST", /\/detach$/).map((r) => r.status)).toEqual([202]);
    await cluster.adminClient.patch(
      `/api/v1/nodes/${OX1.name}`,
      { metadata: { labels: { [EXCLUDE_LB]: null } } },
      PATCH.merge,
    );
    svc = await serviceWhen("ingress is not back on talos-ox-1", (s) =>
      (s.status?.loadBalancer?.ingress ?? []).some((i) => i.ip === ipOf(OX1)),
    );
    expect(oxide.floatingIps()[0]?.instance_id).toBe(idOf(OX1));
  });
});

/** An audit event with the request body the policy logs for nodes/status writes. */
type AuditWithRequest = AuditEvent & { requestObject?: { status?: { addresses?: unknown } } };

/** Audited writes since event `from` of `resource` (optionally a subresource) of node `name`, by user. */
function writesTo(name: string, from: number, subresource: string): Record<string, AuditWithRequest[]> {
  const out: Record<string, AuditWithRequest[]> = {};
  for (const e of cluster.auditEvents().slice(from) as AuditWithRequest[]) {
    const r = e.objectRef;
    if (!["patch", "update"].includes(e.verb) || r?.resource !== "nodes" || r.name !== name) continue;
    if ((r.subresource ?? "") !== subresource) continue;
    const list = out[e.user.username] ?? [];
    list.push(e);
    out[e.user.username] = list;
  }
  return out;
}

/**
 * The audit events `pick` selects, once there are any: the API server writes an event after it has
 * answered, so a change seen through the API can be ahead of its audit line.
 */
async function audited(what: string, pick: (events: AuditEvent[]) => AuditEvent[]): Promise<AuditEvent[]> {
  let found: AuditEvent[] = [];
  await waitFor(
    async () => {
      found = pick(cluster.auditEvents());
      return found.length > 0;
    },
    5_000,
    () => `no audit event: ${what}`,
  );
  return found;
}

/** Waits for the audited deletion of node `name`; returns who deleted it. */
async function deletedBy(name: string): Promise<string[]> {
  const events = await audited(`deletion of node ${name}`, (all) =>
    all.filter((e) => e.verb === "delete" && e.objectRef?.resource === "nodes" && e.objectRef.name === name),
  );
  return events.map((e) => e.user.username);
}

/** This CCM's talosccm_node_conflicting_writes_total lines (all fields and managers). */
async function conflictLines(): Promise<string[]> {
  return (await bed.metrics())
    .split("\n")
    .filter((l) => l.startsWith("talosccm_node_conflicting_writes_total{"));
}

/** The ConflictingWriter Events this CCM recorded, about any node. */
async function conflictEvents(): Promise<EventV1[]> {
  const list = await cluster.adminClient.get<{ items: EventV1[] }>(
    "/apis/events.k8s.io/v1/namespaces/default/events",
  );
  return list.items.filter((e) => e.reason === "ConflictingWriter");
}

/** Occurrences of `re` in `text`. */
const count = (text: string, re: RegExp) => (text.match(new RegExp(re.source, "g")) ?? []).length;

/** The Oxide CCM's status loop and lifecycle periods in test b (its defaults: 5 min and 5 s). */
const STATUS_PERIOD = "2s";
const MONITOR_PERIOD = "1s";
/** The window in which rewrites are counted. */
const WINDOW_MS = 5_000;

describe("b. the Oxide CCM with its default controllers beside this one", () => {
  let before: Record<string, V1Node>;
  let pendingCsr: V1CertificateSigningRequest;
  let auditFrom: number;

  beforeAll(async () => {
    before = {};
    for (const m of [OX1, OX2, METAL]) before[m.name] = await bed.getNode(m.name);
    // A kubelet-serving CSR from talos-ox-1 before the Oxide CCM starts (this CCM runs without
    // node-csr-approval here, so nobody else decides it).
    pendingCsr = await (bed.kubelets.get(OX1.name) as SimulatedKubelet).submitServingCSR();
    await oxideCcm?.stop();
    auditFrom = cluster.auditEvents().length;
    oxideCcm = await startOxideCcm(
      [`--node-status-update-frequency=${STATUS_PERIOD}`, `--node-monitor-period=${MONITOR_PERIOD}`],
      ["cloud-node-controller", "cloud-node-lifecycle-controller", "service-lb-controller"],
    );
  });

  test("the route controller is skipped: the Oxide provider has no routes", async () => {
    await oxideCcm?.waitForLog(/cloud provider does not support routes/);
    await oxideCcm?.waitForLog(/Skipping "node-route-controller"/);
  });

  test("addresses: the Oxide CCM adds the instance's external IPs, this CCM writes them back out, both keep rewriting; a node whose lists agree is written by neither", async () => {
    const from = cluster.auditEvents().length;
    const calls = oxide.requests.length;
    // Not a wait for an event: the rewrites are counted per window, and the window is the measure.
    await Bun.sleep(WINDOW_MS);
    const ox1 = writesTo(OX1.name, from, "status");
    const ox2 = writesTo(OX2.name, from, "status");
    const counts = (w: Record<string, unknown[]>) =>
      Object.fromEntries(Object.entries(w).map(([u, l]) => [u, l.length]));
    console.log(
      `status writes in ${WINDOW_MS} ms: ${OX1.name} ${JSON.stringify(counts(ox1))}, ${OX2.name} ${JSON.stringify(counts(ox2))}`,
    );
    expect(ox1[OXIDE_USER]?.length ?? 0).toBeGreaterThanOrEqual(2);
    expect(ox1[TALOS_USER]?.length ?? 0).toBeGreaterThanOrEqual(2);
    const fip = oxide.floatingIps()[0]?.ip as string;
    // instances_v2.go InstanceMetadata: Hostname, the NICs' IPs, the ephemeral and floating IPs
    // (SNAT skipped), put in the kubelet's node-IP order (cloud-provider GetNodeAddressesFromNodeIP).
    expect(ox1[OXIDE_USER]?.[0]?.requestObject?.status?.addresses).toEqual([
      { type: "InternalIP", address: ipOf(OX1) },
      { type: "Hostname", address: OX1.name },
      { type: "ExternalIP", address: OX1_EPHEMERAL },
      { type: "ExternalIP", address: fip },
      // nodeutil.PatchNodeStatus: a strategic merge patch that replaces the whole list.
      { $patch: "replace" },
    ]);
    expect(ox1[TALOS_USER]?.[0]?.requestObject?.status?.addresses).toEqual([
      { type: "InternalIP", address: ipOf(OX1) },
      { type: "Hostname", address: OX1.name },
    ]);
    // talos-ox-2 was asked about in each period, and both lists agree: no write.
    expect(
      oxide.requests.slice(calls).filter((r) => r.path === `/v1/instances/${idOf(OX2)}`).length,
    ).toBeGreaterThanOrEqual(2);
    expect(counts(ox2)).toEqual({});
  });

  test("labels, taints and provider IDs stay as they were", async () => {
    for (const m of [OX1, OX2, METAL]) {
      const now = nodeView(await bed.getNode(m.name));
      const was = nodeView(before[m.name] as V1Node);
      expect(now.labels).toEqual(was.labels);
      expect(now.taints).toEqual(was.taints);
      expect(now.providerID).toBe(was.providerID);
    }
    // Nothing but status was written to the nodes by the Oxide CCM since it started.
    for (const m of [OX1, OX2, METAL]) expect(writesTo(m.name, auditFrom, "")[OXIDE_USER]).toBeUndefined();
  });

  test("a NotReady node with a provider ID it cannot parse (talos://metal/…): logged every period, no API call, no deletion, no taint, no address", async () => {
    await bed.goNotReady(METAL);
    const re = new RegExp(
      `error checking if node ${METAL.name} exists: failed parsing provider id talos://metal/${ipOf(METAL)}: provider id does not have 'oxide://' prefix`,
    );
    await waitFor(
      async () => count(oxideCcm?.output ?? "", re) >= 3,
      15_000,
      () => `the Oxide CCM's lifecycle controller did not check ${METAL.name} three times\n${output()}`,
    );
    expect(oxideCcm?.output).toMatch(
      /Error getting instance metadata for node addresses: failed parsing provider id talos:\/\/metal\//,
    );
    expect(oxide.requests.filter((r) => r.path.includes("talos"))).toEqual([]);
    const node = await bed.getNode(METAL.name);
    expect(hasShutdownTaint(node)).toBe(false);
    expect(bed.deleters(METAL.name)).toEqual([]);
    expect(writesTo(METAL.name, auditFrom, "status")[OXIDE_USER]).toBeUndefined();
  });

  test("a NotReady node whose instance is stopped: the Oxide CCM adds the shutdown taint once and it stays (this CCM's lifecycle controller keeps a NotReady node's taint, as upstream)", async () => {
    const from = cluster.auditEvents().length;
    (oxide.instances.get(idOf(OX2)) as { runState: string }).runState = "stopped";
    await bed.goNotReady(OX2);
    await bed.nodeWhen(OX2.name, "has no shutdown taint", hasShutdownTaint);
    // Three more lifecycle periods of the Oxide CCM (1 s, this CCM's --node-monitor-period too).
    const calls = oxide.requests.length;
    const asked = () =>
      oxide.requests.slice(calls).filter((r) => r.path === `/v1/instances/${idOf(OX2)}`).length;
    await waitFor(
      async () => asked() >= 3,
      15_000,
      () => `the Oxide CCM did not check ${OX2.name} again\n${output()}`,
    );
    expect(hasShutdownTaint(await bed.getNode(OX2.name))).toBe(true);
    const writes = writesTo(OX2.name, from, "");
    expect(Object.keys(writes)).toEqual([OXIDE_USER]);
    expect(writes[OXIDE_USER]).toHaveLength(1);
    expect(bed.deleters(OX2.name)).toEqual([]);
  });

  test("a NotReady node whose instance is gone: the Oxide CCM deletes it", async () => {
    oxide.instances.delete(idOf(OX2));
    await waitFor(
      async () =>
        (await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes")).items.every(
          (n) => n.metadata?.name !== OX2.name,
        ),
      15_000,
      () => `node ${OX2.name} was not deleted\n${output()}`,
    );
    expect(await deletedBy(OX2.name)).toEqual([OXIDE_USER]);
    expect(
      oxide.requestsTo("GET", new RegExp(`^/v1/instances/${idOf(OX2)}$`)).map((r) => r.status),
    ).toContain(404);
  });

  test("a node whose Talos is not up yet is initialized by the Oxide CCM (instance found by node name); this CCM adds its labels once Talos answers", async () => {
    addInstance(OX3);
    const from = cluster.auditEvents().length;
    await register(OX3);
    const byOxide = await bed.nodeWhen(OX3.name, "is not initialized", initialized);
    const inits = await audited(`initialization of node ${OX3.name}`, (all) =>
      all
        .slice(from)
        .filter(
          (e) => e.verb === "update" && e.objectRef?.resource === "nodes" && e.objectRef.name === OX3.name,
        ),
    );
    expect(inits.map((e) => [e.objectRef?.subresource ?? "", e.user.username])).toEqual([["", OXIDE_USER]]);
    // instances_v2.go getInstance: no provider ID yet, so InstanceView by node name in the project.
    expect(
      oxide.requestsTo("GET", new RegExp(`^/v1/instances/${OX3.name}$`)).map((r) => [r.query, r.status]),
    ).toContainEqual([`?project=${PROJECT}`, 200]);
    const v = nodeView(byOxide);
    expect(v.providerID).toBe(`oxide://${idOf(OX3)}`);
    // Instance type "<ncpus>-<memory GiB>", no zone or region (the provider has no Zones).
    expect(v.labels).toMatchObject({
      "node.kubernetes.io/instance-type": "2-8",
      "beta.kubernetes.io/instance-type": "2-8",
    });
    expect(
      Object.keys(v.labels).filter((k) => k.includes("topology") || k.includes("failure-domain")),
    ).toEqual([]);
    await addSimMachine(sim, OX3);
    const both = await bed.nodeWhen(
      OX3.name,
      "has no platform label from this CCM",
      (n) => n.metadata?.labels?.["node.cloudprovider.kubernetes.io/platform"] === "nocloud",
    );
    expect(nodeView(both).labels).toEqual({
      ...v.labels,
      "node.cloudprovider.kubernetes.io/platform": "nocloud",
    });
    expect(nodeView(both).providerID).toBe(v.providerID);
  });

  test("kubelet-serving CSRs: the Oxide CCM has no CSR controller and no CSR permission; the CSR stays Pending and it never asked", async () => {
    const name = pendingCsr.metadata?.name as string;
    const csr = await cluster.adminClient.get<V1CertificateSigningRequest>(
      `/apis/certificates.k8s.io/v1/certificatesigningrequests/${name}`,
    );
    expect(csr.status?.conditions).toBeUndefined();
    const mine = cluster.auditEvents().filter((e) => e.user.username === OXIDE_USER);
    // It was busy with nodes the whole time; not one request of it went to certificates.k8s.io.
    expect(mine.some((e) => e.objectRef?.resource === "nodes")).toBe(true);
    expect(mine.filter((e) => e.objectRef?.resource === "certificatesigningrequests")).toEqual([]);
  });

  test("this CCM's second-writer reports: the address fight and the provider ID the Oxide CCM set on the late node, once each; nothing for the shutdown taint", async () => {
    let events: EventV1[] = [];
    await waitFor(
      async () => {
        events = await conflictEvents();
        return events.length >= 2;
      },
      10_000,
      () =>
        `fewer than two ConflictingWriter Events: ${JSON.stringify(events.map((e) => e.note))}\n${output()}`,
    );
    // lib/fieldowners.ts reports a change another field manager made to a field this CCM owns: on
    // talos-ox-1 the ExternalIP entries the Oxide CCM adds (the informer's update carries its
    // managedFields entry for them; the kubelet's own entries are no conflict), on talos-ox-3 the
    // providerID it set. One Event per node and field in 10 minutes, however often the fight repeats.
    const byNode = (name: string) => events.filter((e) => e.regarding.name === name);
    expect(
      events.every((e) => e.type === "Warning" && e.reportingController === "talos-cloud-controller-manager"),
    ).toBe(true);
    expect(byNode(OX1.name).map((e) => e.note?.split(" (")[0])).toEqual(["status.addresses"]);
    expect(byNode(OX1.name)[0]?.note).toContain(`was changed by field manager "${OXIDE_MANAGER}"`);
    expect(byNode(OX3.name)).toHaveLength(1);
    expect(byNode(OX3.name)[0]?.note).toStartWith(
      `spec.providerID was set to "oxide://${idOf(OX3)}" by field manager "${OXIDE_MANAGER}".`,
    );
    expect(bed.talosCcm?.output).toMatch(
      new RegExp(
        `Another writer changed a field this CCM owns.*node="${OX3.name}" field="spec.providerID".*manager="${OXIDE_MANAGER}"`,
      ),
    );
    // Not reported: the shutdown taint on talos-ox-2: spec.taints is reported for taints this CCM's
    // rules put there, and rules/oxide.yaml has none (and this CCM leaves that taint alone).
    const lines = await conflictLines();
    expect(lines.map((l) => l.replace(/ \d+$/, "")).sort()).toEqual([
      `talosccm_node_conflicting_writes_total{field="spec.providerID",manager="${OXIDE_MANAGER}"}`,
      `talosccm_node_conflicting_writes_total{field="status.addresses",manager="${OXIDE_MANAGER}"}`,
    ]);
    // Every rewrite is counted, not only the first.
    const addresses = lines.find((l) => l.includes('field="status.addresses"')) ?? "";
    expect(Number(addresses.split(" ").at(-1))).toBeGreaterThanOrEqual(2);
  });
});

describe("c. with Node cleanup: the Oxide CCM's service and lifecycle controllers, this CCM's cloud-node only", () => {
  let from: number;

  beforeAll(async () => {
    await oxideCcm?.stop();
    await bed.talosCcm?.stop();
    from = cluster.auditEvents().length;
    await bed.startTalosCcm(
      { controllers: "cloud-node", cloudConfig: join(ROOT, "rules", "oxide.yaml") },
      /Starting controller.*cloud-node"/,
    );
    oxideCcm = await startOxideCcm(
      [
        "--controllers=service-lb-controller,cloud-node-lifecycle-controller",
        `--node-monitor-period=${MONITOR_PERIOD}`,
      ],
      ["cloud-node-lifecycle-controller", "service-lb-controller"],
    );
  });

  test("a NotReady node whose instance is stopped keeps the Oxide CCM's shutdown taint", async () => {
    (oxide.instances.get(idOf(OX3)) as { runState: string }).runState = "stopped";
    await bed.goNotReady(OX3);
    await bed.nodeWhen(OX3.name, "has no shutdown taint", hasShutdownTaint);
    // Three more lifecycle periods of the Oxide CCM, each asking for the instance.
    const calls = oxide.requests.length;
    const asked = () =>
      oxide.requests.slice(calls).filter((r) => r.path === `/v1/instances/${idOf(OX3)}`).length;
    await waitFor(
      async () => asked() >= 3,
      15_000,
      () => `the Oxide CCM did not check ${OX3.name} again\n${output()}`,
    );
    expect(hasShutdownTaint(await bed.getNode(OX3.name))).toBe(true);
    // Only the Oxide CCM wrote the node (the taint, once); this CCM left it alone.
    const writes = writesTo(OX3.name, from, "");
    expect(Object.keys(writes)).toEqual([OXIDE_USER]);
    expect(writes[OXIDE_USER]).toHaveLength(1);
  });

  test("a NotReady node whose instance is gone is deleted by the Oxide CCM; no address is rewritten", async () => {
    oxide.instances.delete(idOf(OX3));
    await waitFor(
      async () =>
        (await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes")).items.every(
          (n) => n.metadata?.name !== OX3.name,
        ),
      15_000,
      () => `node ${OX3.name} was not deleted\n${output()}`,
    );
    expect(await deletedBy(OX3.name)).toEqual([OXIDE_USER]);
    for (const m of [OX1, METAL]) expect(writesTo(m.name, from, "status")[OXIDE_USER]).toBeUndefined();
    // The Service keeps its floating IP on talos-ox-1.
    expect(oxide.floatingIps().map((f) => f.instance_id)).toEqual([idOf(OX1)]);
  });
});
