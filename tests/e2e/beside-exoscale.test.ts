// Beside the Exoscale CCM, end to end: this CCM (cloud-node, cloud-node-lifecycle) and the Exoscale
// CCM v0.34.0 (built from its release archive pinned in tests/support/pins.ts by
// tests/support/cloudccm-bins.sh, EXOSCALE_CCM) on one real API server, the Talos simulator for the
// machines, a fake of the Exoscale API v2 (tests/support/fakeexoscale.ts) for the cloud. The
// Exoscale CCM runs as its own identity (service account kube-system/cloud-controller-manager) with
// the RBAC its manifests give it (docs/examples/cloud-controller-manager-rbac.yml, read from the
// same archive); this CCM as user talos-ccm. The API server's audit log says who wrote what.
//
// a. The split operators run: this CCM initializes the Nodes of two simulated Talos machines on the
//    exoscale platform (providerID exoscale://<instance id> as Talos' platform reports it, topology
//    ch-gva-2, instance type standard.medium) and of a bare-metal machine (talos://metal/<ip>); the
//    Exoscale CCM runs its service controller only. A wrong API secret is refused by the fake with
//    the API's 403, which stops the Exoscale CCM at start. A `type: LoadBalancer` Service fails while
//    a node that is no Exoscale instance takes part (the Exoscale CCM looks up every node's
//    systemUUID); with that node labelled out of load balancers, the Service gets an NLB whose
//    service targets the exoscale nodes' instance pool, and the NLB's IP as its ingress; the
//    Exoscale CCM writes nothing to any Node.
// b. The Exoscale CCM with its default controllers beside this one (status loop every 2 s, both
//    lifecycle controllers every 1 s), what happens is recorded and asserted: both CCMs keep
//    rewriting the exoscale Nodes' status.addresses, this CCM undoing the Exoscale CCM's writes and
//    reporting them (one ConflictingWriter Event per node, every rewrite counted); labels, taints and provider IDs this CCM wrote stay; a NotReady node with a
//    talos:// provider ID is deleted by the Exoscale CCM's lifecycle controller; a NotReady node whose
//    instance is stopped gets the shutdown taint from it once, and keeps it (this CCM's lifecycle
//    controller leaves a NotReady node's taint alone, as upstream); a node whose Talos facts come late is initialized by the
//    Exoscale CCM, with a region and never a zone label, and this CCM reports the provider ID it set
//    (ConflictingWriter Event, count); kubelet-serving CSRs stay untouched unless
//    EXOSCALE_SKS_AGENT_RUNNERS turns on its CSR runner, which then approves a node's CSR for another
//    node's name and IP; a NotReady node whose instance was destroyed is deleted by it; its RBAC
//    covered everything it did.
// c. Leader election: both CCMs default to the Lease kube-system/cloud-controller-manager; with the
//    defaults this CCM sees the Exoscale CCM as the leader and starts nothing; with the name its
//    shipped manifests and chart set (cloud-controller-manager-talos) it leads its own.
// d. One lifecycle controller, the Exoscale CCM's (with its service controller) beside this CCM's
//    cloud-node alone: a stopped instance's NotReady node keeps the shutdown taint it sets.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { V1CertificateSigningRequest, V1Node, V1Service } from "@kubernetes/client-node";
import { CloudBed, initialized, TALOS_USER } from "../support/cloudbed.ts";
import { type EventV1, type TestCluster, waitFor } from "../support/cluster.ts";
import { type ExoInstance, FakeExoscale } from "../support/fakeexoscale.ts";
import {
  type FakeNodeSpec,
  loadFixture,
  loopbackAddress,
  normalizeAddress,
  platformMetadata,
} from "../support/fixtures.ts";
import { nodeView, type SimulatedKubelet } from "../support/kubelet.ts";
import { type CcmProcess, startCcm } from "../support/process.ts";
import { addSimMachine } from "../support/simmachines.ts";
import type { TalosSim } from "../support/talossim.ts";

const ZONE = "ch-gva-2";
const API_KEY = "EXOa1b2c3d4e5f60718293a4b5c";
const API_SECRET = "Zm9vYmFyLXNlY3JldC1mb3ItdGhlLWZha2UtYXBp";
const EXO_USER = "system:serviceaccount:kube-system:cloud-controller-manager";
/** The Exoscale CCM's field manager: client-go's User-Agent up to the first "/", its binary's name. */
const EXO_MANAGER = "exoscale-cloud-controller-manager";
const SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown";
const EXCLUDE_LB = "node.kubernetes.io/exclude-from-external-load-balancers";

/** The Exoscale CCM's controllers on by default (cloud-provider app DefaultInitFuncConstructors). */
const DEFAULT_CONTROLLERS = [
  "cloud-node-controller",
  "cloud-node-lifecycle-controller",
  "service-lb-controller",
];

/** Every request of the Exoscale CCM's identity (reads too, to see refusals); writes of everyone else. */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    users: ["${EXO_USER}"]
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Metadata
`;

/**
 * The Exoscale CCM's status loop and lifecycle periods in test b (its defaults: 5 min, 5 s); the
 * lifecycle period is this CCM's too (its default 5 s).
 */
const STATUS_PERIOD = "2s";
const MONITOR_PERIOD = "1s";
/** Rounds of a fight counted per node: address rewrites (one per STATUS_PERIOD), taint flips. */
const ROUNDS = 3;

const TYPE_ID = "b6cd1ff5-3a2f-4e9d-810b-2d2c6a4f1e01";
const POOL_ID = "7f0a3c52-9d3e-4b61-a2f4-5c8e1d9b6a70";

/** A simulated Exoscale machine: the exoscale fixture's shape with its own name, IPs and instance. */
function exoMachine(n: number, instanceId: string): FakeNodeSpec {
  const base = loadFixture("exoscale");
  const name = `talos-exo-${n}`;
  const v4 = `185.19.28.${9 + n}`;
  const v6 = `2a04:c43:e00:6f1b:4b0:b0ff:fe00:${(0x1a2a + n).toString(16)}`;
  const addr = (a: Record<string, unknown>) => normalizeAddress(name, a);
  return {
    ...base,
    name,
    nodeIPs: [v4, v6],
    talosVersion: "v1.13.5",
    // What Talos' exoscale platform reports (platform/exoscale/exoscale.go ParseMetadata): region and
    // zone are both the availability zone, the instance type the service offering's first word.
    platformMetadata: platformMetadata({
      platform: "exoscale",
      hostname: name,
      region: ZONE,
      zone: ZONE,
      instanceType: "standard.medium",
      instanceId,
      providerId: `exoscale://${instanceId}`,
    }),
    systemInformation: {
      ...(base.systemInformation as NonNullable<FakeNodeSpec["systemInformation"]>),
      uuid: instanceId,
    },
    addresses: [
      loopbackAddress(name),
      addr({ address: `${v4}/22`, linkName: "eth0", linkIndex: 2, priority: 1024 }),
      addr({ address: `${v6}/64`, linkName: "eth0", linkIndex: 2, flags: "noprefixroute,mngmtmpaddr" }),
    ],
  };
}

const EXO1 = exoMachine(1, "5b8d2f4a-1c3e-4f6a-9b0d-2e4f6a8c1d31");
const EXO2 = exoMachine(2, "5b8d2f4a-1c3e-4f6a-9b0d-2e4f6a8c1d32");
/** A bare-metal Talos machine in the same cluster: its providerID is talos://metal/<ip>. */
const METAL = loadFixture("metal-56");
const METAL_UUID = "0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5";

const instanceIdOf = (m: FakeNodeSpec) => m.platformMetadata.instanceId;
const v4Of = (m: FakeNodeSpec) => m.nodeIPs[0] as string;
const v6Of = (m: FakeNodeSpec) => m.nodeIPs[1] as string;

let bed: CloudBed<FakeExoscale>;
let cluster: TestCluster;
let sim: TalosSim;
let exo: FakeExoscale;
let exoCcm: CcmProcess | undefined;
/** The output of every Exoscale CCM process started. */
const exoOutputs = () => bed.cloudCcms.map((p) => p.output).join("\n");

/** Starts the Exoscale CCM with `args`; resolves once it logged that each controller in `started` started. */
function startExoscaleCcm(
  args: string[],
  started: string[],
  env: Record<string, string> = {},
  secret = API_SECRET,
): Promise<CcmProcess> {
  return bed.startCloudCcm({
    provider: ["--cloud-provider=exoscale", "--allow-untagged-cloud"],
    args,
    started,
    env: {
      EXOSCALE_API_KEY: API_KEY,
      EXOSCALE_API_SECRET: secret,
      EXOSCALE_API_ENDPOINT: exo.url,
      EXOSCALE_API_ZONE: ZONE,
      ...env,
    },
  });
}

function output(): string {
  return (
    `this CCM:\n${bed.talosCcm?.output.slice(-3000)}\nExoscale CCM:\n${exoCcm?.output.slice(-4000)}\n` +
    `fake Exoscale API, last requests:\n${JSON.stringify(exo.requests.slice(-15))}`
  );
}

beforeAll(async () => {
  bed = await CloudBed.start("exoscale", {
    prefix: "beside-exoscale-e2e-",
    auditPolicy: AUDIT_POLICY,
    // The Exoscale CCM's identity: the service account its manifests bind system:cloud-controller-manager to.
    serviceAccount: "cloud-controller-manager",
    fake: FakeExoscale.start({ zone: ZONE, key: API_KEY, secret: API_SECRET }),
    context: output,
  });
  ({ cluster, sim, fake: exo } = bed);
  for (const m of [EXO1, EXO2, METAL]) await addSimMachine(sim, m);

  // The cloud: one instance type, the nodes' instance pool, its two instances.
  exo.addInstanceType({ id: TYPE_ID, family: "standard", size: "medium", cpus: 2, memory: 4294967296 });
  exo.addPool({ id: POOL_ID, name: "talos-workers" });
  for (const m of [EXO1, EXO2])
    exo.addInstance({
      id: instanceIdOf(m),
      name: m.name,
      instanceTypeId: TYPE_ID,
      state: "running",
      publicIP: v4Of(m),
      ipv6: v6Of(m),
      poolId: POOL_ID,
    });

  await bed.startTalosCcm(
    {
      controllers: "cloud-node,cloud-node-lifecycle",
      securePort: bed.metricsPort,
      alwaysAllowPaths: "/metrics",
      // The lifecycle controller's period (default 5 s), as short as the Exoscale CCM's in b.
      args: [`--node-monitor-period=${MONITOR_PERIOD}`],
    },
    /Starting controller.*cloud-node-lifecycle/,
  );
  for (const [m, uuid] of [
    [EXO1, instanceIdOf(EXO1)],
    [EXO2, instanceIdOf(EXO2)],
    [METAL, METAL_UUID],
  ] as const)
    await bed.register(m, uuid);
});

afterAll(() => bed?.stop());

describe("a. this CCM for nodes, the Exoscale CCM for load balancers only", () => {
  test("this CCM initializes the exoscale Nodes: exoscale://<instance id>, topology and instance type from Talos", async () => {
    for (const m of [EXO1, EXO2]) {
      const node = await bed.nodeWhen(m.name, "is not initialized", initialized);
      const v = nodeView(node);
      expect(v.providerID).toBe(`exoscale://${instanceIdOf(m)}`);
      expect(v.labels).toMatchObject({
        "node.cloudprovider.kubernetes.io/platform": "exoscale",
        "topology.kubernetes.io/region": ZONE,
        "topology.kubernetes.io/zone": ZONE,
        "node.kubernetes.io/instance-type": "standard.medium",
      });
      expect(v.addresses).toEqual([
        { type: "InternalIP", address: v4Of(m) },
        { type: "InternalIP", address: v6Of(m) },
        { type: "Hostname", address: m.name },
      ]);
    }
    const metal = await bed.nodeWhen(METAL.name, "is not initialized", initialized);
    expect(metal.spec?.providerID).toBe(`talos://metal/${v4Of(METAL)}`);
  });

  test("a wrong API secret is refused with the API's 403: the Exoscale CCM stops at start", async () => {
    const before = exo.requests.length;
    const p = await startExoscaleCcm(["--controllers=service-lb-controller"], [], {}, "d3Jvbmctc2VjcmV0");
    // A deadline on the wait for the exit, not a wait by the clock.
    const code = await Promise.race([p.proc.exited, Bun.sleep(20_000).then(() => "timeout")]);
    await p.stop("SIGKILL");
    expect(code).not.toBe(0);
    expect(p.output).toContain("Forbidden: Invalid request signature");
    const refused = exo.requests.slice(before);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((r) => r.status === 403 && r.key === API_KEY)).toBe(true);
  });

  test("a node that is no Exoscale instance (the bare-metal one) stops the NLB: the Exoscale CCM looks every node's systemUUID up", async () => {
    exoCcm = await startExoscaleCcm(["--controllers=service-lb-controller"], ["service-lb-controller"]);
    await bed.createLoadBalancer();
    // loadbalancer.go EnsureLoadBalancer infers the instance pool from GetInstance(node systemUUID) of
    // every node the service controller passes: the metal node's answers 404 and the sync fails.
    let failed: EventV1 | undefined;
    await waitFor(
      async () => {
        failed = (await cluster.eventsAbout("web")).find((e) => e.reason === "SyncLoadBalancerFailed");
        return failed !== undefined;
      },
      20_000,
      () => `no SyncLoadBalancerFailed Event on Service web\n${output()}`,
    );
    expect(failed?.note).toContain("error retrieving Compute instance information");
    expect(failed?.note).toContain("Not Found");
    expect(
      exo.requestsTo("GET", new RegExp(`^/v2/instance/${METAL_UUID}$`)).every((r) => r.status === 404),
    ).toBe(true);
    expect(exo.loadBalancers()).toEqual([]);
  });

  test("with that node excluded from load balancers, the Service gets an NLB targeting the nodes' instance pool, and its IP as ingress", async () => {
    await cluster.adminClient.patch(`/api/v1/nodes/${METAL.name}`, {
      metadata: { labels: { [EXCLUDE_LB]: "true" } },
    });
    let svc: V1Service | undefined;
    await waitFor(
      async () => {
        svc = await cluster.adminClient.get<V1Service>("/api/v1/namespaces/default/services/web");
        return (svc.status?.loadBalancer?.ingress?.length ?? 0) > 0;
      },
      40_000,
      () => `Service web has no ingress: ${JSON.stringify(svc?.status)}\n${output()}`,
    );
    const uid = svc?.metadata?.uid as string;
    const nodePort = svc?.spec?.ports?.[0]?.nodePort as number;
    const nlbs = exo.loadBalancers();
    expect(nlbs).toHaveLength(1);
    const nlb = nlbs[0] as (typeof nlbs)[number];
    expect(svc?.status?.loadBalancer?.ingress?.map((i) => i.ip)).toEqual([nlb.ip]);
    expect(nlb).toMatchObject({ name: `k8s-${uid}`, state: "running" });
    expect(nlb.services).toHaveLength(1);
    expect(nlb.services[0]).toMatchObject({
      name: `${uid}-80`,
      port: 80,
      "target-port": nodePort,
      protocol: "tcp",
      strategy: "round-robin",
      state: "running",
      healthcheck: { mode: "tcp", port: nodePort, interval: 10, timeout: 5, retries: 1 },
      "instance-pool": { id: POOL_ID },
    });
    // The NLB sends traffic to the pool's members: the two exoscale nodes' instances.
    expect(nlb.services[0]?.["healthcheck-status"].map((s) => s["public-ip"]).sort()).toEqual(
      [v4Of(EXO1), v4Of(EXO2)].sort(),
    );
    expect(svc?.metadata?.annotations).toMatchObject({
      "service.beta.kubernetes.io/exoscale-loadbalancer-id": nlb.id,
      "service.beta.kubernetes.io/exoscale-loadbalancer-service-instancepool-id": POOL_ID,
    });
    // Both writes were asynchronous operations the client polled until they succeeded.
    expect(exo.requestsTo("POST", /^\/v2\/load-balancer$/)).toHaveLength(1);
    expect(exo.requestsTo("POST", /^\/v2\/load-balancer\/[^/]+\/service$/)).toHaveLength(1);
    expect(exo.requestsTo("GET", /^\/v2\/operation\//).length).toBeGreaterThanOrEqual(2);
    // Running only its service controller, the Exoscale CCM wrote nothing to any Node.
    const nodeWrites = cluster
      .auditEvents()
      .filter(
        (e) => e.user.username === EXO_USER && e.objectRef?.resource === "nodes" && WRITES.includes(e.verb),
      );
    expect(nodeWrites).toEqual([]);
    // Refusals: the wrong secret's 403s and the metal node's 404s, nothing else.
    const refused = exo.requests.filter((r) => r.status >= 400);
    expect(refused.filter((r) => r.status !== 403 && r.path !== `/v2/instance/${METAL_UUID}`)).toEqual([]);
  });
});

/** Who wrote node `name`'s status (verb patch on nodes/status), in order, since audit event `from`. */
function statusWriters(name: string, from: number): string[] {
  return cluster
    .auditEvents()
    .slice(from)
    .filter((e) => {
      const r = e.objectRef;
      return e.verb === "patch" && r?.resource === "nodes" && r.subresource === "status" && r.name === name;
    })
    .map((e) => e.user.username);
}

const WRITES = ["create", "update", "patch", "delete", "deletecollection"];

const count = (xs: string[], x: string) => xs.filter((y) => y === x).length;

/**
 * Who deleted node `name`, once the audit log has the line (the API server writes it after
 * answering, so it can lag the deletion a client sees).
 */
async function deletedBy(name: string): Promise<string[]> {
  await waitFor(
    () => bed.deleters(name).length > 0,
    10_000,
    () => `no audit line for the deletion of ${name}`,
  );
  return bed.deleters(name);
}

/** This CCM's talosccm_node_conflicting_writes_total for `field` and `manager` (0 when absent). */
async function conflictCount(field: string, manager: string): Promise<number> {
  const line = `talosccm_node_conflicting_writes_total{field="${field}",manager="${manager}"} `;
  const found = (await bed.metrics()).split("\n").find((l) => l.startsWith(line));
  return found ? Number(found.slice(line.length)) : 0;
}

/** The ConflictingWriter Events this CCM recorded about node `name`. */
async function conflictEvents(name: string): Promise<EventV1[]> {
  return (await cluster.eventsAbout(name)).filter((e) => e.reason === "ConflictingWriter");
}

describe("b. the Exoscale CCM with its default controllers beside this one", () => {
  let labelsBefore: Record<string, Record<string, string>>;
  let pendingCsr: V1CertificateSigningRequest;
  let defaultsStarted: number;

  beforeAll(async () => {
    labelsBefore = {};
    for (const m of [EXO1, EXO2, METAL])
      labelsBefore[m.name] = (await bed.getNode(m.name)).metadata?.labels ?? {};
    // A kubelet-serving CSR from talos-exo-1 before the Exoscale CCM starts: nobody approves it
    // (this CCM runs without node-csr-approval here).
    pendingCsr = await (bed.kubelets.get(EXO1.name) as SimulatedKubelet).submitServingCSR({
      dns: [EXO1.name],
      ips: [v4Of(EXO1), v6Of(EXO1)],
    });
    await exoCcm?.stop();
    defaultsStarted = cluster.auditEvents().length;
    exoCcm = await startExoscaleCcm(
      [`--node-status-update-frequency=${STATUS_PERIOD}`, `--node-monitor-period=${MONITOR_PERIOD}`],
      DEFAULT_CONTROLLERS,
    );
  });

  test(`both CCMs keep rewriting the exoscale Nodes' addresses (the Exoscale CCM every ${STATUS_PERIOD}, this CCM backing off) and this CCM reports it`, async () => {
    const from = cluster.auditEvents().length;
    const start = Date.now();
    const settled = (m: FakeNodeSpec) => {
      const w = statusWriters(m.name, from);
      return count(w, EXO_USER) >= 2 * ROUNDS && count(w, TALOS_USER) >= 2;
    };
    await waitFor(
      () => settled(EXO1) && settled(EXO2),
      30_000,
      () => `writers: ${JSON.stringify([EXO1, EXO2].map((m) => statusWriters(m.name, from)))}\n${output()}`,
    );
    const ms = Date.now() - start;
    for (const m of [EXO1, EXO2]) {
      const w = statusWriters(m.name, from);
      console.log(
        `${m.name}: status.addresses written ${count(w, EXO_USER)}× by the Exoscale CCM and ` +
          `${count(w, TALOS_USER)}× by this CCM in ${ms} ms: ${w.map((u) => (u === EXO_USER ? "E" : "T")).join("")}`,
      );
      // This CCM writes its list back, but the Exoscale CCM (every 2 s here) answers each write-back
      // within 10 s, so this CCM backs off (1 s doubling) instead of looping: it writes less often.
      // With the real 5-minute status period every rewrite is undone at once.
      expect(count(w, EXO_USER)).toBeGreaterThan(count(w, TALOS_USER));
    }
    // What each writes: the Exoscale CCM the instance's public IPs as ExternalIP and InternalIP
    // (instances.go NodeAddressesByProviderID, node IPs first: cloud-provider's
    // GetNodeAddressesFromNodeIP), this CCM the node IPs as InternalIP.
    const writes = cluster
      .auditEvents()
      .slice(from)
      .filter((e) => e.objectRef?.name === EXO1.name && e.objectRef.subresource === "status");
    expect(new Set(writes.map((e) => e.user.username))).toEqual(new Set([EXO_USER, TALOS_USER]));
    // Backed off, this CCM still writes its list again: the Node shows it between two rewrites.
    const own = [
      { type: "InternalIP", address: v4Of(EXO1) },
      { type: "InternalIP", address: v6Of(EXO1) },
      { type: "Hostname", address: EXO1.name },
    ];
    await waitFor(
      async () => JSON.stringify(nodeView(await bed.getNode(EXO1.name)).addresses) === JSON.stringify(own),
      30_000,
      () => `${EXO1.name} never showed this CCM's addresses again\n${output()}`,
      50,
    );
    expect(own).toEqual([
      { type: "InternalIP", address: v4Of(EXO1) },
      { type: "InternalIP", address: v6Of(EXO1) },
      { type: "Hostname", address: EXO1.name },
    ]);
    // This CCM says so (lib/fieldowners.ts): the Exoscale CCM's entries carry its managedFields, one
    // ConflictingWriter Event per node in the 10-minute window, every rewrite counted.
    for (const m of [EXO1, EXO2]) {
      const events = await conflictEvents(m.name);
      expect(events.map((e) => e.note?.split(" (")[0])).toEqual(["status.addresses"]);
      expect(events[0]?.note).toContain(`was changed by field manager "${EXO_MANAGER}"`);
    }
    expect(await conflictCount("status.addresses", EXO_MANAGER)).toBeGreaterThanOrEqual(2 * ROUNDS);
    // The talos:// node: no instance behind its provider ID or its systemUUID, nothing written.
    expect(count(statusWriters(METAL.name, defaultsStarted), EXO_USER)).toBe(0);
  });

  test("labels, taints and provider IDs this CCM wrote stay as they were", async () => {
    for (const m of [EXO1, EXO2, METAL]) {
      const node = await bed.getNode(m.name);
      expect(node.metadata?.labels).toEqual(labelsBefore[m.name]);
      expect(node.spec?.taints?.map((t) => t.key)).toEqual(["node.kubernetes.io/not-ready"]);
    }
    expect((await bed.getNode(EXO1.name)).spec?.providerID).toBe(`exoscale://${instanceIdOf(EXO1)}`);
    expect((await bed.getNode(METAL.name)).spec?.providerID).toBe(`talos://metal/${v4Of(METAL)}`);
    // The Exoscale CCM wrote nothing but status to these Nodes (its cloud-node controller only
    // reconciles the beta/GA label pairs of initialized nodes, which this CCM keeps equal).
    const other = cluster
      .auditEvents()
      .slice(defaultsStarted)
      .filter(
        (e) => e.user.username === EXO_USER && e.objectRef?.resource === "nodes" && !e.objectRef.subresource,
      )
      .filter((e) => WRITES.includes(e.verb));
    expect(other.map((e) => [e.verb, e.objectRef?.name])).toEqual([]);
  });

  test("a NotReady node with a talos:// provider ID is deleted by the Exoscale CCM's lifecycle controller", async () => {
    await bed.goNotReady(METAL);
    await waitFor(
      async () =>
        (await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes")).items.every(
          (n) => n.metadata?.name !== METAL.name,
        ),
      20_000,
      () => `node ${METAL.name} was not deleted\n${output()}`,
    );
    expect(await deletedBy(METAL.name)).toEqual([EXO_USER]);
    // It asked its API for the instance the provider ID names, got 404 and took that for "gone"
    // (instances.go InstanceExistsByProviderID; formatProviderID strips only "exoscale://").
    const asked = exo.requestsTo("GET", new RegExp(`^/v2/instance/talos://metal/${v4Of(METAL)}$`));
    expect(asked.map((r) => r.status)).toContain(404);
  });

  test("a NotReady node whose instance is stopped: the Exoscale CCM adds the shutdown taint once and it stays (this CCM's lifecycle controller keeps a NotReady node's taint, as upstream)", async () => {
    (exo.instances.get(instanceIdOf(EXO2)) as ExoInstance).state = "stopped";
    const from = cluster.auditEvents().length;
    await bed.goNotReady(EXO2);
    await bed.nodeWhen(EXO2.name, "has no shutdown taint", (n) =>
      (n.spec?.taints ?? []).some((t) => t.key === SHUTDOWN_TAINT),
    );
    // Processed: ROUNDS more lookups of the instance by the Exoscale CCM's lifecycle controller, whose
    // period (1 s) is this CCM's --node-monitor-period too.
    const lookups = () => exo.requestsTo("GET", new RegExp(`^/v2/instance/${instanceIdOf(EXO2)}$`)).length;
    const seen = lookups();
    await waitFor(
      () => lookups() >= seen + ROUNDS,
      20_000,
      () => `no more instance lookups\n${output()}`,
    );
    const node = await bed.getNode(EXO2.name);
    expect((node.spec?.taints ?? []).filter((t) => t.key === SHUTDOWN_TAINT)).toHaveLength(1);
    // Node patches without subresource: the Exoscale CCM's AddOrUpdateTaintOnNode, once; none by this CCM.
    const patches = cluster
      .auditEvents()
      .slice(from)
      .filter((e) => e.verb === "patch" && e.objectRef?.name === EXO2.name && !e.objectRef.subresource)
      .map((e) => e.user.username);
    expect(patches).toEqual([EXO_USER]);
    expect(node.metadata?.deletionTimestamp).toBeUndefined();
    expect(bed.deleters(EXO2.name)).toEqual([]);
  });

  test("a node whose Talos facts come late is initialized by the Exoscale CCM: region but no zone label, ever", async () => {
    const exo3 = exoMachine(3, "5b8d2f4a-1c3e-4f6a-9b0d-2e4f6a8c1d33");
    exo.addInstance({
      id: instanceIdOf(exo3),
      name: exo3.name,
      instanceTypeId: TYPE_ID,
      state: "running",
      publicIP: v4Of(exo3),
      ipv6: v6Of(exo3),
      poolId: POOL_ID,
    });
    const from = cluster.auditEvents().length;
    await bed.register(exo3, instanceIdOf(exo3));
    const byExoscale = await bed.nodeWhen(exo3.name, "is not initialized", initialized);
    // Its cloud-node controller initialized it (one Node update, node_controller.go syncNode):
    // provider ID from the kubelet's systemUUID (instances.go InstanceID), instance type from its API,
    // region from its own zone setting and no zone (zones.go GetZoneByProviderID sets Region only).
    const updates = cluster
      .auditEvents()
      .slice(from)
      .filter(
        (e) => e.objectRef?.resource === "nodes" && e.objectRef.name === exo3.name && e.verb === "update",
      )
      .filter((e) => (e.responseStatus?.code ?? 0) < 300);
    expect(updates.map((e) => [e.objectRef?.subresource ?? "", e.user.username])).toEqual([["", EXO_USER]]);
    const exoscaleView = nodeView(byExoscale);
    expect(exoscaleView.providerID).toBe(`exoscale://${instanceIdOf(exo3)}`);
    expect(exoscaleView.labels).toMatchObject({
      "node.kubernetes.io/instance-type": "standard.medium",
      "beta.kubernetes.io/instance-type": "standard.medium",
      "topology.kubernetes.io/region": ZONE,
      "failure-domain.beta.kubernetes.io/region": ZONE,
    });
    expect(Object.keys(exoscaleView.labels).filter((k) => k.endsWith("/zone"))).toEqual([]);
    // The machine's Talos answers: this CCM's first pass on the initialized node adds its labels,
    // but it writes topology at initialization only, so the node never gets a zone label.
    await addSimMachine(sim, exo3);
    const both = await bed.nodeWhen(
      exo3.name,
      "has no platform label from this CCM",
      (n) => n.metadata?.labels?.["node.cloudprovider.kubernetes.io/platform"] === "exoscale",
    );
    expect(nodeView(both).labels).toEqual({
      ...exoscaleView.labels,
      "node.cloudprovider.kubernetes.io/platform": "exoscale",
    });
    expect(nodeView(both).providerID).toBe(exoscaleView.providerID);
    // This CCM noticed the provider ID another controller set (lib/fieldowners.ts: the informer's
    // update carries the Exoscale CCM's managedFields entry for spec.providerID) and said so.
    let events: EventV1[] = [];
    const providerIDEvents = () => events.filter((e) => e.note?.startsWith("spec.providerID"));
    await waitFor(
      async () => {
        events = await conflictEvents(exo3.name);
        return providerIDEvents().length > 0;
      },
      10_000,
      () => `no ConflictingWriter Event for spec.providerID on ${exo3.name}\n${output()}`,
    );
    // Its address rewrites on this node are reported too (status.addresses), at most once.
    expect(events.map((e) => e.note?.split(/[ .]/)[0]).sort()).toEqual(
      events.length === 1 ? ["spec"] : ["spec", "status"],
    );
    events = providerIDEvents();
    expect(events).toHaveLength(1);
    expect(events[0]?.note).toStartWith(
      `spec.providerID was set to "exoscale://${instanceIdOf(exo3)}" by field manager "${EXO_MANAGER}".`,
    );
    expect(events[0]).toMatchObject({
      type: "Warning",
      reportingController: "talos-cloud-controller-manager",
    });
    expect(await conflictCount("spec.providerID", EXO_MANAGER)).toBe(1);
    expect(bed.talosCcm?.output).toMatch(
      /Another writer changed a field this CCM owns.*spec\.providerID.*exoscale-cloud-controller-manager/,
    );
  });

  test("kubelet-serving CSRs: untouched by default; with EXOSCALE_SKS_AGENT_RUNNERS=node-csr-validation it approves, even a node's CSR for another node's name and IP", async () => {
    const name = pendingCsr.metadata?.name as string;
    const csrPath = `/apis/certificates.k8s.io/v1/certificatesigningrequests/${name}`;
    // The Exoscale CCM has run its default controllers through the tests above: the CSR submitted
    // before it started is still Pending (the runner starts only from the environment variable,
    // exoscale.go Initialize).
    expect(
      (await cluster.adminClient.get<V1CertificateSigningRequest>(csrPath)).status?.conditions,
    ).toBeUndefined();
    await exoCcm?.stop();
    exoCcm = await startExoscaleCcm(
      [`--node-status-update-frequency=${STATUS_PERIOD}`, `--node-monitor-period=${MONITOR_PERIOD}`],
      DEFAULT_CONTROLLERS,
      { EXOSCALE_SKS_AGENT_RUNNERS: "node-csr-validation" },
    );
    const honest = await cluster.csrDecision(name, 20_000, output);
    expect(honest).toMatchObject({
      type: "Approved",
      status: "True",
      reason: "ExoscaleCloudControllerApproved",
    });
    // talos-exo-3's kubelet asks for a serving certificate in talos-exo-1's name and IP: the runner
    // checks the requester's groups and that the name and IPs belong to one instance, not that they
    // are the requester's own (sks_agent_runner_node_csr_validation.go run).
    const forger = bed.kubelets.get("talos-exo-3") as SimulatedKubelet;
    const forged = await forger.submitServingCSR({ dns: [EXO1.name], ips: [v4Of(EXO1)] });
    expect(forged.spec.username).toBe("system:node:talos-exo-3");
    const cond = await cluster.csrDecision(forged.metadata?.name as string, 20_000, output);
    expect(cond).toMatchObject({ type: "Approved", reason: "ExoscaleCloudControllerApproved" });
  });

  test("a NotReady node whose instance was destroyed is deleted by the Exoscale CCM (this CCM cannot tell)", async () => {
    exo.instances.delete(instanceIdOf(EXO2));
    await waitFor(
      async () =>
        (await cluster.adminClient.get<{ items: V1Node[] }>("/api/v1/nodes")).items.every(
          (n) => n.metadata?.name !== EXO2.name,
        ),
      20_000,
      () => `node ${EXO2.name} was not deleted\n${output()}`,
    );
    expect(await deletedBy(EXO2.name)).toEqual([EXO_USER]);
  });

  test("the Exoscale CCM's own RBAC covered all it did: the API server refused none of its requests", () => {
    const refused = cluster
      .auditEvents()
      .filter((e) => e.user.username === EXO_USER && (e.responseStatus?.code ?? 0) === 403);
    expect(refused.map((e) => [e.verb, e.objectRef?.resource, e.objectRef?.subresource])).toEqual([]);
    expect(exoOutputs()).not.toMatch(/is forbidden/);
  });
});

describe("c. leader election: both CCMs' default Lease is kube-system/cloud-controller-manager", () => {
  test("with the default names only one of the two runs; this CCM's shipped name (cloud-controller-manager-talos) lets both run", async () => {
    await exoCcm?.stop();
    exoCcm = await startExoscaleCcm(
      ["--controllers=service-lb-controller", "--leader-elect=true"],
      ["service-lb-controller"],
    );
    const lease = await cluster.adminClient.get<{ spec: { holderIdentity: string } }>(
      "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager",
    );
    const common = {
      kubeconfig: bed.talosKubeconfig,
      controllers: "cloud-node",
      talosconfig: sim.talosconfig,
      leaderElect: true,
    };
    // This CCM with the default name sees the Exoscale CCM holding the Lease and starts nothing.
    const waiting = await startCcm(common, /New leader elected/);
    try {
      expect(waiting.output).toContain(lease.spec.holderIdentity);
      expect(waiting.output).not.toMatch(/Starting controller/);
    } finally {
      await waiting.stop();
    }
    // With the name the shipped manifests and chart set, it leads its own Lease.
    const own = await startCcm(
      { ...common, args: ["--leader-elect-resource-name=cloud-controller-manager-talos"] },
      /Successfully acquired lease.*cloud-controller-manager-talos/,
      /Starting controller.*cloud-node/,
    );
    await own.stop();
  });
});

describe("d. one lifecycle controller: the Exoscale CCM's, beside this CCM's cloud-node alone", () => {
  test("a stopped instance's NotReady node keeps the shutdown taint the Exoscale CCM sets", async () => {
    await exoCcm?.stop();
    await bed.talosCcm?.stop();
    await bed.startTalosCcm({ controllers: "cloud-node" }, /Starting controller.*cloud-node/);
    exoCcm = await startExoscaleCcm(
      [
        "--controllers=service-lb-controller,cloud-node-lifecycle-controller",
        `--node-monitor-period=${MONITOR_PERIOD}`,
      ],
      ["service-lb-controller", "cloud-node-lifecycle-controller"],
    );
    (exo.instances.get(instanceIdOf(EXO1)) as ExoInstance).state = "stopped";
    const from = cluster.auditEvents().length;
    await bed.goNotReady(EXO1);
    await bed.nodeWhen(EXO1.name, "has no shutdown taint", (n) =>
      (n.spec?.taints ?? []).some((t) => t.key === SHUTDOWN_TAINT),
    );
    // Processed: the Exoscale CCM's lifecycle controller looked the instance up ROUNDS more times.
    const lookups = () => exo.requestsTo("GET", new RegExp(`^/v2/instance/${instanceIdOf(EXO1)}$`)).length;
    const seen = lookups();
    await waitFor(
      () => lookups() >= seen + ROUNDS,
      20_000,
      () => `no more instance lookups\n${output()}`,
    );
    const node = await bed.getNode(EXO1.name);
    expect((node.spec?.taints ?? []).filter((t) => t.key === SHUTDOWN_TAINT)).toHaveLength(1);
    const patches = cluster
      .auditEvents()
      .slice(from)
      .filter((e) => e.verb === "patch" && e.objectRef?.name === EXO1.name && !e.objectRef.subresource)
      .map((e) => e.user.username);
    expect(patches).toEqual([EXO_USER]);
  });
});
