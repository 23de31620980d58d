// Least-privilege RBAC, proven with the compiled binary against a real API server. The manifests the
// binary prints apply cleanly (with a stub CRD for talos.dev ServiceAccounts) and equal deploy/;
// running with the deploy ServiceAccount's token instead of admin, with every controller enabled and
// the DaemonSet's own arguments, each controller does its work with no 403 anywhere; then, for every
// verb of every rule in turn, the rule loses that verb, the binary restarts with the same work to do,
// and the API server's audit log shows it refused exactly the request the verb was there for. The
// scenarios share one API server and run one after another (one leader at a time); each waits only
// for its refusal, so the file stays within a few minutes.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1CertificateSigningRequest, V1Node } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { type ControllerName, Controllers } from "../../lib/controllernames.ts";
import { deployFiles } from "../../lib/deployfiles.ts";
import { isNotFound, PATCH } from "../../lib/kubeapi.ts";
import {
  APP_NAME,
  defaultSettings,
  type KubeObject,
  LEASE_NAME,
  manifests,
  renderManifests,
} from "../../lib/manifests.ts";
import type { PolicyRule } from "../../lib/rbacgrants.ts";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { type FakeNodeSpec, generateNodes, loadFixture, normalizeAddress } from "../support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { servesServiceCIDRv1 } from "../support/kubematrix.ts";
import { CcmProcess, ccmBinary } from "../support/process.ts";

const NAMESPACE = "kube-system";
const SA_USER = `system:serviceaccount:${NAMESPACE}:${APP_NAME}`;
const ALL: ControllerName[] = Object.values(Controllers);
const NO_IP_NODE = "no-node-ip";
/** A node whose CSR names a DNS name of two labels: CSR-only mode looks up its namespace and Services. */
const CSR_ONLY_NODE = "csr-only";
const CSR_ONLY_DNS = [CSR_ONLY_NODE, `${CSR_ONLY_NODE}.example`];
/** Grants only CSR-only mode (no talosconfig) uses: node-csr-approval's Service-name lookups. */
const CSR_ONLY_GRANTS = ["namespaces get", "services list"];
const csrOnlyGrant = (r: Pick<Refusal, "resource" | "verb">) =>
  CSR_ONLY_GRANTS.includes(`${r.resource} ${r.verb}`);
const SHUTDOWN_TAINT = { key: "node.cloudprovider.kubernetes.io/shutdown", effect: "NoSchedule" };
const pkgVersion = (
  JSON.parse(readFileSync(join(import.meta.dir, "..", "..", "package.json"), "utf8")) as { version: string }
).version;

/** What the binary prints for every controller, per lib/manifests.ts (the binary is checked against it). */
const expected = manifests({
  version: pkgVersion,
  controllers: ALL,
  enabledControllers: ALL,
  namespace: NAMESPACE,
}).map((m) => m.object);

const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["${SA_USER}"]
  - level: None
`;

/** One request of the CCM's ServiceAccount, as the audit log recorded it. */
interface Audited {
  verb: string;
  user: { username: string };
  objectRef?: {
    apiGroup?: string;
    resource?: string;
    subresource?: string;
    namespace?: string;
    name?: string;
  };
  responseStatus?: { code?: number };
  annotations?: Record<string, string>;
  requestReceivedTimestamp: string;
}

/** The request a removed verb is there for, as the audit log shows its refusal. */
interface Refusal {
  verb: string;
  apiGroup: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  /** The RBAC decision on the refused request: "forbid", or "allow" when admission refused it. */
  decision: "forbid" | "allow";
}

/** One verb removed from one rule. */
interface Scenario {
  title: string;
  role: string;
  rule: number;
  verb: string;
  refusal: Refusal;
  /** How long the refused request may take to come: Event series are written 30 s after an Event. */
  timeoutMs: number;
}

function roleObjects(objects: readonly KubeObject[]): KubeObject[] {
  return objects.filter((o) => o.kind === "ClusterRole" || o.kind === "Role");
}

/** The request each verb of each rule guards. */
function refusalOf(role: KubeObject, rule: PolicyRule, verb: string): Refusal {
  const [resource, subresource] = (rule.resources[0] as string).split("/") as [string, string | undefined];
  const namespace = role.metadata.namespace;
  // The API server asks for `approve` on the signer when a CSR's approval is updated: RBAC allows the
  // update itself, the CertificateApproval admission plugin refuses it.
  if (resource === "signers") {
    return {
      verb: "update",
      apiGroup: "certificates.k8s.io",
      resource: "certificatesigningrequests",
      subresource: "approval",
      decision: "allow",
    };
  }
  return {
    verb,
    apiGroup: rule.apiGroups[0] as string,
    resource,
    ...(subresource === undefined ? {} : { subresource }),
    ...(namespace === undefined ? {} : { namespace }),
    decision: "forbid",
  };
}

const scenarios: Scenario[] = roleObjects(expected).flatMap((role) =>
  (role.rules as PolicyRule[]).flatMap((rule, i) =>
    rule.verbs.map((verb) => ({
      title: `${role.kind} ${role.metadata.name}: ${rule.resources[0]}${rule.resourceNames ? `[${rule.resourceNames.join(",")}]` : ""} ${verb}`,
      role: role.metadata.name,
      rule: i,
      verb,
      refusal: refusalOf(role, rule, verb),
      timeoutMs: rule.resources[0] === "events" && verb === "patch" ? 60_000 : 25_000,
    })),
  ),
);

let cluster: TestCluster;
let apid: FakeApid;
let dir: string;
let auditLog: string;
let printed: KubeObject[];
let kubeconfig: string;
let talosconfig: string;
let cloudConfig: string;
let promToken: string;
let aws: SimulatedKubelet;
let csrOnlyNode: SimulatedKubelet;
const spots: SimulatedKubelet[] = [];
const kubelets: SimulatedKubelet[] = [];
const running = new Set<CcmProcess>();
let freshIndex = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "talos-ccm-rbac-"));
  const policy = join(dir, "audit-policy.yaml");
  auditLog = join(dir, "audit.log");
  writeFileSync(policy, AUDIT_POLICY);
  const spotSpecs = generateNodes(scenarios.length + 1, { template: "gcp", prefix: "spot" });
  [cluster, apid] = await Promise.all([
    TestCluster.start({
      apiserverArgs: [
        `--audit-policy-file=${policy}`,
        `--audit-log-path=${auditLog}`,
        "--audit-log-mode=blocking",
      ],
    }),
    FakeApid.start({
      nodes: [loadFixture("aws"), ...spotSpecs],
      controllerManagerConfig: { podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] },
    }),
  ]);
  talosconfig = await apid.writeTalosconfig(join(dir, "talosconfig"));
  // Registered first: the lifecycle controller deletes only nodes older than 30 s.
  aws = await register(loadFixture("aws"));
  for (const s of spotSpecs) spots.push(await register(s));
  // A kubelet without --node-ip: every reconcile of it records the same Warning again, which makes
  // an Event series (see background()).
  const k = await SimulatedKubelet.register(cluster, {
    name: NO_IP_NODE,
    ips: [],
    noAnnotation: true,
    addresses: [{ type: "Hostname", address: NO_IP_NODE }],
    heartbeatMs: 0,
  });
  kubelets.push(k);
  // Registered without the uninitialized taint: only CSR-only mode's node-csr-approval works on it.
  csrOnlyNode = await SimulatedKubelet.register(cluster, {
    name: CSR_ONLY_NODE,
    ips: ["10.77.0.1"],
    external: false,
    addresses: [
      { type: "InternalIP", address: "10.77.0.1" },
      { type: "Hostname", address: CSR_ONLY_NODE },
      { type: "InternalDNS", address: `${CSR_ONLY_NODE}.example` },
    ],
    heartbeatMs: 0,
  });
  kubelets.push(csrOnlyNode);
});

afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function register(spec: Pick<FakeNodeSpec, "name" | "nodeIPs">): Promise<SimulatedKubelet> {
  const k = await SimulatedKubelet.register(cluster, { name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0 });
  kubelets.push(k);
  return k;
}

/** A node Talos knows that registers now, uninitialized: work for cloud-node, node-ipam and Events. */
async function freshNode(): Promise<SimulatedKubelet> {
  const i = freshIndex++;
  const [spec] = generateNodes(1, { template: "aws", prefix: "fresh", start: 1000 + i });
  if (!spec) throw new Error("no node generated");
  // A public address on the `external` link: the node's addresses change, so status is written too.
  spec.addresses.push(
    normalizeAddress(spec.name, {
      address: `203.0.113.${i + 1}/32`,
      linkName: "external",
      linkIndex: 0,
      flags: "permanent",
    }),
  );
  apid.addNode(spec);
  return register(spec);
}

function audited(since: number): Audited[] {
  let text = "";
  try {
    text = readFileSync(auditLog, "utf8");
  } catch {
    return [];
  }
  // Only lines the API server has ended: it may be writing one as it is read.
  return text
    .slice(0, text.lastIndexOf("\n") + 1)
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Audited)
    .filter((e) => e.user.username === SA_USER && Date.parse(e.requestReceivedTimestamp) >= since);
}

function matches(e: Audited, r: Omit<Refusal, "decision">): boolean {
  const o = e.objectRef ?? {};
  return (
    e.verb === r.verb &&
    (o.apiGroup ?? "") === r.apiGroup &&
    o.resource === r.resource &&
    o.subresource === r.subresource &&
    (r.namespace === undefined || o.namespace === r.namespace)
  );
}

const describeRequest = (e: Audited) =>
  `${e.verb} ${e.objectRef?.resource ?? ""}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ""} ${e.objectRef?.namespace ?? ""}/${e.objectRef?.name ?? ""} → ${e.responseStatus?.code}`;

/** The DaemonSet's container args from the printed manifests, pointed at this test bed. */
function daemonSetArgs(objects: readonly KubeObject[], securePort: number): string[] {
  const ds = objects.find((o) => o.kind === "DaemonSet") as unknown as {
    spec: { template: { spec: { containers: { args: string[] }[] } } };
  };
  const args = ds.spec.template.spec.containers[0]?.args ?? [];
  return [
    ...args.map((a) =>
      a.startsWith("--cloud-config=")
        ? `--cloud-config=${cloudConfig}`
        : a.startsWith("--secure-port=")
          ? `--secure-port=${securePort}`
          : a,
    ),
    `--kubeconfig=${kubeconfig}`,
  ];
}

/** The CCM with the DaemonSet's arguments; `csrOnly`: node-csr-approval alone, without a talosconfig. */
async function startCcm(securePort: number, csrOnly = false): Promise<CcmProcess> {
  const args = daemonSetArgs(printed, securePort).map((a) =>
    csrOnly && a.startsWith("--controllers=") ? "--controllers=node-csr-approval" : a,
  );
  const p = new CcmProcess(args, { env: csrOnly ? {} : { TALOSCONFIG: talosconfig } });
  running.add(p);
  return p;
}

async function stopCcm(p: CcmProcess, signal: NodeJS.Signals): Promise<number> {
  const code = await p.stop(signal);
  running.delete(p);
  return code;
}

async function metrics(port: number): Promise<Response> {
  return fetch(`https://127.0.0.1:${port}/metrics`, {
    headers: { authorization: `Bearer ${promToken}` },
    tls: { rejectUnauthorized: false },
  });
}

/**
 * Work that goes on while a CCM runs, until the returned controller aborts: a scraper asks /metrics
 * with its token every 500 ms (TokenReview, SubjectAccessReview), and the node without a node IP is
 * relabelled every second (a reconcile each time, so its Warning repeats into an Event series).
 */
function background(port: number): AbortController {
  const stop = new AbortController();
  void (async () => {
    while (!stop.signal.aborted) {
      await metrics(port).catch(() => undefined);
      await Bun.sleep(500); // not a wait: paces the scraper's load, as Prometheus would
    }
  })();
  void (async () => {
    for (let i = 0; !stop.signal.aborted; i++) {
      await cluster.adminClient
        .patch(`/api/v1/nodes/${NO_IP_NODE}`, { metadata: { labels: { "rbac-test/touch": String(i) } } })
        .catch(() => undefined);
      await Bun.sleep(1000); // not a wait: paces the relabelling load
    }
  })();
  return stop;
}

async function node(name: string): Promise<V1Node | undefined> {
  return cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`).catch((e) => {
    if (isNotFound(e)) return undefined;
    throw e;
  });
}

const initialized = (n: V1Node | undefined) =>
  Boolean(n?.spec?.providerID) && !(n?.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT);

async function csrApproved(name: string): Promise<boolean> {
  const csr = await cluster.adminClient.get<V1CertificateSigningRequest>(
    `/apis/certificates.k8s.io/v1/certificatesigningrequests/${name}`,
  );
  return (csr.status?.conditions ?? []).some((c) => c.type === "Approved" && c.status === "True");
}

async function deleteLease(): Promise<void> {
  await cluster.adminClient
    .delete(`/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${LEASE_NAME}`)
    .catch((e) => {
      if (!isNotFound(e)) throw e;
    });
}

/** Whether RBAC lets the CCM's ServiceAccount do what `r` asks, per a SubjectAccessReview. */
async function allowed(r: {
  verb: string;
  apiGroup: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}): Promise<boolean> {
  const review = await cluster.adminClient.create<{ status: { allowed?: boolean } }>(
    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      spec: {
        user: SA_USER,
        groups: ["system:serviceaccounts", `system:serviceaccounts:${NAMESPACE}`, "system:authenticated"],
        resourceAttributes: {
          verb: r.verb,
          group: r.apiGroup,
          resource: r.resource,
          ...(r.subresource ? { subresource: r.subresource } : {}),
          ...(r.namespace ? { namespace: r.namespace } : {}),
          ...(r.name ? { name: r.name } : {}),
        },
      },
    },
  );
  return review.status.allowed === true;
}

describe("manifests from the compiled binary", () => {
  test("`manifests` prints deploy/ byte for byte, with and without --talos-patch", () => {
    const files = deployFiles(pkgVersion);
    for (const [args, file] of [
      [["manifests"], `${APP_NAME}.yaml`],
      [["manifests", "--talos-patch"], "talos-patch.yaml"],
    ] as const) {
      const r = spawnSync(ccmBinary(), args, { encoding: "utf8" });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      expect(r.stdout).toBe(files[file] as string);
      expect(r.stdout).toBe(readFileSync(join(import.meta.dir, "..", "..", "deploy", file), "utf8"));
    }
  });

  test("`manifests --workload=Deployment` prints the release's Deployment manifest", () => {
    const r = spawnSync(ccmBinary(), ["manifests", "--workload=Deployment"], { encoding: "utf8" });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(renderManifests({ ...defaultSettings(pkgVersion), workload: "Deployment" }));
    const kinds = parseAllDocuments(r.stdout).map((d) => (d.toJS() as { kind: string }).kind);
    expect(kinds.filter((k) => k === "Deployment" || k === "DaemonSet")).toEqual(["Deployment"]);
  });

  test("`manifests --cloud-config` embeds a valid file and refuses an invalid one", () => {
    const good = join(dir, "good.yaml");
    const bad = join(dir, "bad.yaml");
    writeFileSync(good, "global:\n  clusterName: rbac-test\n");
    writeFileSync(
      bad,
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: Sideways}\n",
    );
    const ok = spawnSync(ccmBinary(), ["manifests", `--cloud-config=${good}`], { encoding: "utf8" });
    expect(ok.status).toBe(0);
    expect(ok.stdout).toContain("ccm-config.yaml: |\n    global:\n      clusterName: rbac-test\n");
    // Older reference configs switch CSR approval on in the file; the manager honours it, so RBAC does.
    const legacy = join(dir, "legacy.yaml");
    writeFileSync(legacy, "global:\n  approveNodeCSR: true\n");
    const csr = spawnSync(
      ccmBinary(),
      ["manifests", "--controllers=cloud-node", `--cloud-config=${legacy}`],
      {
        encoding: "utf8",
      },
    );
    expect(csr.status).toBe(0);
    expect(csr.stdout).toContain("- certificatesigningrequests/approval\n");
    expect(csr.stdout).toContain("- --controllers=cloud-node\n");
    const refused = spawnSync(ccmBinary(), ["manifests", `--cloud-config=${bad}`], { encoding: "utf8" });
    expect(refused.status).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toContain(`Cannot embed cloud config ${bad}`);
  });

  test("the manifests apply cleanly, with a stub CRD for talos.dev ServiceAccounts", async () => {
    await cluster.installTalosServiceAccountCrd();
    const parse = (text: string) =>
      (parseAllDocuments(text) as { toJS(): KubeObject }[]).map((d) => d.toJS()).filter((o) => o !== null);
    const defaults = parse(spawnSync(ccmBinary(), ["manifests"], { encoding: "utf8" }).stdout);
    const all = spawnSync(ccmBinary(), ["manifests", `--controllers=${ALL.join(",")}`], { encoding: "utf8" });
    expect(all.status).toBe(0);
    printed = parse(all.stdout);
    expect(printed).toEqual(expected);
    for (const objects of [defaults, printed]) {
      await cluster.apply(objects);
      for (const o of objects) {
        const path = await cluster.resourcePath(o);
        const got = await cluster.adminClient.get<KubeObject>(`${path}/${o.metadata.name}`);
        expect(got.metadata.labels).toEqual(o.metadata.labels as Record<string, string>);
      }
    }
  });
});

describe("RBAC with the deploy ServiceAccount", () => {
  test("every controller does its work with no 403", async () => {
    const conn = await cluster.serviceAccountConnection(NAMESPACE, APP_NAME);
    kubeconfig = writeKubeconfig(join(dir, "ccm.kubeconfig"), conn);
    const configMap = printed.find((o) => o.kind === "ConfigMap")?.data as Record<string, string>;
    cloudConfig = join(dir, "ccm-config.yaml");
    writeFileSync(cloudConfig, configMap["ccm-config.yaml"] as string);
    const prom = await cluster.serviceAccountConnection("kube-system", "prometheus");
    promToken = (prom.auth as { token: string }).token;
    await cluster.allowMetrics("metrics-reader", [
      { kind: "ServiceAccount", name: "prometheus", namespace: "kube-system" },
    ]);

    const since = Date.now();
    const port = await freePort();
    const ccm = await startCcm(port);
    const work = background(port);
    try {
      await everyControllerWorks(ccm, port, since);
    } finally {
      work.abort();
    }
    expect(await stopCcm(ccm, "SIGTERM")).toBe(0);
  }, 240_000);

  test("node-csr-approval in CSR-only mode looks up namespaces and Services with no 403", async () => {
    await deleteLease();
    const since = Date.now();
    const ccm = await startCcm(await freePort(), true);
    let csrName = "";
    try {
      await ccm.waitForLog(/Approving kubelet serving CSRs/, 30_000);
      expect(ccm.output).toContain("CSR-only mode");
      const csr = await csrOnlyNode.submitServingCSR({ dns: CSR_ONLY_DNS });
      csrName = csr.metadata?.name as string;
      await waitFor(
        () => csrApproved(csrName),
        30_000,
        () => `CSR not approved:\n${ccm.output.slice(-3000)}`,
      );
      const seen = audited(since);
      expect(seen.filter((e) => e.responseStatus?.code === 403).map(describeRequest)).toEqual([]);
      // Namespace `example` does not exist: its GET answers 404, which RBAC allowed.
      for (const grant of CSR_ONLY_GRANTS) {
        const used = seen.some(
          (e) => `${e.objectRef?.resource} ${e.verb}` === grant && (e.responseStatus?.code ?? 0) !== 403,
        );
        expect({ grant, used }).toEqual({ grant, used: true });
      }
    } finally {
      expect(await stopCcm(ccm, "SIGTERM")).toBe(0);
    }
  }, 120_000);
});

/** The checks of the run with every permission: each controller's results, and no refusal anywhere. */
async function everyControllerWorks(ccm: CcmProcess, port: number, since: number): Promise<void> {
  await ccm.waitForLog(/Successfully acquired lease/, 30_000);
  const lease = await cluster.adminClient.get<{ spec: { holderIdentity?: string } }>(
    `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${LEASE_NAME}`,
  );
  expect(lease.spec.holderIdentity).toMatch(/_[0-9a-f-]{36}$/);

  // cloud-node: every node Talos knows is initialized; node-ipam: each gets pod CIDRs.
  const known = [aws, ...spots].map((k) => k.name);
  await waitFor(
    async () => (await Promise.all(known.map(node))).every(initialized),
    60_000,
    () => `nodes not initialized:\n${ccm.output.slice(-3000)}`,
  );
  const awsNode = await node(aws.name);
  expect(awsNode?.spec?.providerID).toBe("aws:///us-east-1a/i-0a1b2c3d4e5f67890");
  expect(awsNode?.status?.addresses).toContainEqual({ type: "ExternalIP", address: "54.210.33.17" });
  await waitFor(
    async () => (await Promise.all(known.map(node))).every((n) => (n?.spec?.podCIDRs ?? []).length > 0),
    30_000,
    () => `pod CIDRs missing:\n${ccm.output.slice(-3000)}`,
  );

  // node-csr-approval: the kubelet's serving CSR is approved.
  const csr = await aws.submitServingCSR();
  const csrName = csr.metadata?.name as string;
  await waitFor(
    () => csrApproved(csrName),
    30_000,
    () => `CSR not approved:\n${ccm.output.slice(-3000)}`,
  );

  // Delegated authentication and authorization of /metrics.
  let res = await metrics(port);
  expect(res.status).toBe(200);
  expect(await res.text()).toContain("rest_client_requests_total");

  // cloud-node-lifecycle: a NotReady GCP spot node older than 30 s is deleted.
  const spot = spots[0] as SimulatedKubelet;
  await spot.goNotReady();
  await waitFor(
    async () => (await node(spot.name)) === undefined,
    60_000,
    () => ccm.output.slice(-3000),
  );

  // Events (recorded alongside the writes, so the last may land a moment after the deletion), and a
  // repeated Event counted in its series (written 30 s after the Event).
  let reasons: string[] = [];
  await waitFor(
    async () => {
      const events = await cluster.adminClient.get<{
        items: { reason: string; reportingController: string }[];
      }>("/apis/events.k8s.io/v1/namespaces/default/events");
      reasons = events.items.filter((e) => e.reportingController === APP_NAME).map((e) => e.reason);
      return ["Synced", "DeletingNode", "NodeIPUnknown"].every((r) => reasons.includes(r));
    },
    10_000,
    () => `Events seen: ${reasons.join(", ")}\n${ccm.output.slice(-3000)}`,
  );
  await waitFor(
    () =>
      audited(since).some(
        (e) => e.verb === "patch" && e.objectRef?.resource === "events" && e.responseStatus?.code === 200,
      ),
    60_000,
    () => `no Event series written:\n${ccm.output.slice(-3000)}`,
  );

  res = await metrics(port);
  const text = await res.text();
  expect(text).not.toContain('code="403"');
  const refused = audited(since).filter((e) => e.responseStatus?.code === 403);
  expect(refused.map(describeRequest)).toEqual([]);
  expect(ccm.output).not.toMatch(/forbidden|\b403\b/i);
  // Every grant was used: each rule's every verb appears among the answered requests; a grant for an
  // API this server version does not serve is never asked for at all (not even refused or 404).
  const used = audited(since).filter((e) => (e.responseStatus?.code ?? 0) < 400);
  for (const s of scenarios) {
    // CSR-only mode's grants are used in their own run (below).
    const want = !unservedHere(s) && !csrOnlyGrant(s.refusal);
    expect({ grant: s.title, used: used.some((e) => matches(e, s.refusal)) }).toEqual({
      grant: s.title,
      used: want,
    });
  }
  expect(
    audited(since)
      .filter((e) => unservedResource(e.objectRef?.resource))
      .map(describeRequest),
  ).toEqual([]);
}

/** Whether `resource` is an API this version does not serve (ServiceCIDRs before 1.33). */
function unservedResource(resource: string | undefined): boolean {
  return resource === "servicecidrs" && !servesServiceCIDRv1(cluster.version);
}

/** Whether a scenario's grant is for an API this version does not serve (kubematrix.ts). */
function unservedHere(s: Scenario): boolean {
  return unservedResource(s.refusal.resource);
}

describe("RBAC is exactly enough: without any one verb, the CCM is refused what it needs", () => {
  test.each(scenarios.map((s) => [s.title, s] as const))(
    "without %s",
    async (_title, s) => {
      const objects = structuredClone(roleObjects(printed));
      const role = objects.find((o) => o.metadata.name === s.role) as KubeObject;
      const rules = role.rules as PolicyRule[];
      const rule = rules[s.rule] as PolicyRule;
      rule.verbs = rule.verbs.filter((v) => v !== s.verb);
      if (rule.verbs.length === 0) rules.splice(s.rule, 1);
      await cluster.apply(objects);
      const [resource, subresource] = (rule.resources[0] as string).split("/") as [
        string,
        string | undefined,
      ];
      const attributes = {
        verb: s.verb,
        apiGroup: rule.apiGroups[0] as string,
        resource,
        ...(subresource ? { subresource } : {}),
        ...(role.metadata.namespace ? { namespace: role.metadata.namespace } : {}),
        ...(rule.resourceNames?.[0] ? { name: rule.resourceNames[0] } : {}),
      };
      await waitFor(
        async () => !(await allowed(attributes)),
        10_000,
        () => "RBAC change not in effect",
      );

      // The same work for every scenario: a node to initialize, a CSR, a shutdown taint on a Ready
      // node, a dead spot node, a scraper; and no Lease yet.
      await deleteLease();
      await freshNode();
      const csr = await aws.submitServingCSR();
      await cluster.adminClient.patch(
        `/api/v1/nodes/${aws.name}`,
        { spec: { taints: [SHUTDOWN_TAINT] } },
        PATCH.merge,
      );
      await spots[scenarios.indexOf(s) + 1]?.goNotReady();
      // CSR-only mode's grants: the CCM without Talos, and a CSR whose DNS names need them.
      const csrOnly = csrOnlyGrant(s.refusal);
      const csrOnlyCsr = csrOnly ? await csrOnlyNode.submitServingCSR({ dns: CSR_ONLY_DNS }) : undefined;

      const since = Date.now();
      const port = await freePort();
      const ccm = await startCcm(port, csrOnly);
      const work = background(port);
      try {
        if (unservedHere(s)) {
          // An API this version does not serve (ServiceCIDRs before 1.33): the grant is not needed
          // here. The CCM starts its CSR approver, approves, and never asks for the resource.
          await ccm.waitForLog(/Approving kubelet serving CSRs/, 30_000);
          await waitFor(
            () => csrApproved(csr.metadata?.name as string),
            25_000,
            () => ccm.output.slice(-2000),
          );
          expect(ccm.output).toContain("not served (networking.k8s.io/v1 from Kubernetes 1.33)");
          expect(
            audited(since)
              .filter((e) => unservedResource(e.objectRef?.resource))
              .map(describeRequest),
          ).toEqual([]);
          return;
        }
        await waitFor(
          () =>
            audited(since).some(
              (e) =>
                e.responseStatus?.code === 403 &&
                matches(e, s.refusal) &&
                e.annotations?.["authorization.k8s.io/decision"] === s.refusal.decision,
            ),
          s.timeoutMs,
          () =>
            `no refused ${JSON.stringify(s.refusal)}; refused: ${audited(since)
              .filter((e) => e.responseStatus?.code === 403)
              .map(describeRequest)
              .join("; ")}\n${ccm.output.slice(-2000)}`,
          250,
        );
      } finally {
        work.abort();
        await stopCcm(ccm, "SIGKILL");
        // Left Pending by the refusal: no later scenario's CCM should work on it.
        if (csrOnlyCsr)
          await cluster.adminClient.delete(
            `/apis/certificates.k8s.io/v1/certificatesigningrequests/${csrOnlyCsr.metadata?.name}`,
          );
      }
    },
    120_000,
  );
});
