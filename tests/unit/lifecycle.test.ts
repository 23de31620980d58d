import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../lib/config.ts";
import { LABELS } from "../../lib/desirednode.ts";
import { KubeError } from "../../lib/kubeapi.ts";
import {
  decideLifecycle,
  EXCLUDE_LABEL,
  INITIALIZED_NODE_DELAY_MS,
  type InstanceIdentity,
  type InstanceProbe,
  instanceIdentity,
  isReady,
  LifecycleController,
  type LifecycleFacts,
  type LifecycleNode,
  probeTtlMs,
  reportsNotReady,
  SHUTDOWN_TAINT,
  wantsProbe,
} from "../../lib/lifecycle.ts";
import { Registry } from "../../lib/metrics.ts";
import { type LeanNode, leanNode } from "../../lib/nodeview.ts";
import { type CallOptions, TalosError } from "../../lib/talos.ts";
import type { PlatformMetadata, SystemInformation } from "../../lib/types.ts";

const NOW = Date.parse("2026-03-01T12:00:00Z");
const OLD = new Date(NOW - 10 * 60_000).toISOString();
const UNINITIALIZED = {
  key: "node.cloudprovider.kubernetes.io/uninitialized",
  value: "true",
  effect: "NoSchedule",
};
const NOT_READY_NOSCHEDULE = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };
const NOT_READY_NOEXECUTE = { key: "node.kubernetes.io/not-ready", effect: "NoExecute" };
const UNREACHABLE_NOEXECUTE = { key: "node.kubernetes.io/unreachable", effect: "NoExecute" };
const GCP_SPOT = { [LABELS.platform]: "gcp", [LABELS.lifecycle]: "spot" };

interface NodeShape {
  name?: string;
  uid?: string;
  resourceVersion?: string;
  created?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  providerID?: string;
  taints?: Array<{ key: string; value?: string; effect: string }>;
  /** Ready condition status; undefined leaves the condition out. */
  ready?: "True" | "False" | "Unknown";
  deleting?: boolean;
  addresses?: Array<{ type: string; address: string }>;
  systemUUID?: string;
}

/** A raw Node as the API server returns it. */
function rawNode(s: NodeShape = {}) {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: s.name ?? "n1",
      uid: s.uid ?? "uid-1",
      resourceVersion: s.resourceVersion ?? "100",
      creationTimestamp: s.created ?? OLD,
      labels: s.labels ?? {},
      annotations: s.annotations ?? { "alpha.kubernetes.io/provided-node-ip": "10.0.1.2" },
      ...(s.deleting ? { deletionTimestamp: new Date(NOW).toISOString() } : {}),
    },
    spec: {
      ...(s.providerID === undefined
        ? { providerID: "hcloud://51234567" }
        : s.providerID
          ? { providerID: s.providerID }
          : {}),
      taints: s.taints ?? [],
    },
    status: {
      conditions:
        s.ready === undefined
          ? []
          : [{ type: "Ready", status: s.ready, lastTransitionTime: "2026-11-29T00:00:00Z" }],
      addresses: s.addresses ?? [{ type: "InternalIP", address: "10.0.1.2" }],
      nodeInfo: s.systemUUID ? { systemUUID: s.systemUUID } : {},
    },
  };
}

/** The cached form of {@link rawNode}; `systemUUID` only when a fresh read is modelled. */
function node(s: NodeShape = {}): LifecycleNode {
  const n: LifecycleNode = leanNode(rawNode(s));
  if (s.systemUUID) n.systemUUID = s.systemUUID;
  return n;
}

function identity(o: Partial<InstanceIdentity> = {}): InstanceIdentity {
  return {
    nodeIP: "10.0.1.2",
    providerID: "hcloud://51234567",
    rawProviderID: "hcloud://51234567",
    instanceID: "51234567",
    systemUUID: "8f3e2d1c-0b9a-4f8e-9d7c-6b5a4f3e2d1c",
    hostname: "talos-hc-1",
    ...o,
  };
}

const answered = (o: Partial<InstanceIdentity> = {}): InstanceProbe => ({ ok: true, identity: identity(o) });
/** A machine with another hcloud server id on the node's IP. */
const REPLACED_ID: Partial<InstanceIdentity> = {
  providerID: "hcloud://99999999",
  rawProviderID: "hcloud://99999999",
  instanceID: "99999999",
  systemUUID: "00000000-1111-2222-3333-444444444444",
  hostname: "talos-hc-2",
};
const REPLACED = answered(REPLACED_ID);

describe("decideLifecycle()", () => {
  const cases: Array<{
    name: string;
    node: NodeShape;
    facts?: LifecycleFacts;
    now?: number;
    want: [string, string];
  }> = [
    { name: "Ready node: nothing", node: { ready: "True" }, want: ["none", "Ready"] },
    {
      name: "Ready node with the shutdown taint: taint removed",
      node: { ready: "True", taints: [{ ...SHUTDOWN_TAINT }] },
      want: ["removeShutdownTaint", "Ready"],
    },
    {
      name: "Ready GCP spot node: never deleted",
      node: { ready: "True", labels: GCP_SPOT },
      want: ["none", "Ready"],
    },
    {
      name: "Ready node with a stale not-ready taint counts as Ready",
      node: { ready: "True", labels: GCP_SPOT, taints: [NOT_READY_NOEXECUTE] },
      want: ["none", "Ready"],
    },
    {
      name: "Ready node whose Talos identity differs: never deleted",
      node: { ready: "True" },
      facts: { probe: REPLACED },
      want: ["none", "Ready"],
    },
    {
      name: "Ready node, even when shut down: only the taint goes",
      node: { ready: "True", taints: [{ ...SHUTDOWN_TAINT }] },
      facts: { shutdown: true },
      want: ["removeShutdownTaint", "Ready"],
    },
    {
      name: "excluded NotReady GCP spot node: left alone",
      node: { ready: "False", labels: { ...GCP_SPOT, [EXCLUDE_LABEL]: "" } },
      want: ["none", "Excluded"],
    },
    {
      name: "terminating NotReady GCP spot node: left alone",
      node: { ready: "False", labels: GCP_SPOT, deleting: true },
      want: ["none", "Terminating"],
    },
    {
      name: "NotReady (False) GCP spot node older than 30 s: deleted",
      node: { ready: "False", labels: GCP_SPOT, taints: [NOT_READY_NOEXECUTE] },
      want: ["delete", "GCPSpotNotReady"],
    },
    {
      name: "silent (Unknown) GCP spot node: not evidence enough, kept",
      node: { ready: "Unknown", labels: GCP_SPOT, taints: [UNREACHABLE_NOEXECUTE] },
      want: ["none", "NotProbed"],
    },
    {
      name: "silent GCP spot node that kube-controller-manager tainted not-ready:NoExecute: deleted",
      node: { ready: "Unknown", labels: GCP_SPOT, taints: [NOT_READY_NOEXECUTE] },
      want: ["delete", "GCPSpotNotReady"],
    },
    {
      name: "GCP spot node without a Ready condition, tainted not-ready:NoExecute: deleted",
      node: { labels: GCP_SPOT, taints: [NOT_READY_NOEXECUTE] },
      want: ["delete", "GCPSpotNotReady"],
    },
    {
      name: "GCP spot node without a Ready condition, only the admission's not-ready:NoSchedule: kept",
      node: { labels: GCP_SPOT, taints: [NOT_READY_NOSCHEDULE] },
      want: ["none", "NotProbed"],
    },
    {
      name: "silent GCP spot node whose IP answers for another instance: deleted as replaced",
      node: { ready: "Unknown", labels: GCP_SPOT, providerID: "gce://p/z/old" },
      facts: {
        probe: answered({ providerID: "gce://p/z/new", rawProviderID: "gce://p/z/new", instanceID: "7" }),
      },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "NotReady GCP spot node exactly 30 s old: deleted",
      node: {
        ready: "False",
        labels: GCP_SPOT,
        created: new Date(NOW - INITIALIZED_NODE_DELAY_MS).toISOString(),
      },
      want: ["delete", "GCPSpotNotReady"],
    },
    {
      name: "NotReady GCP spot node 29 s old: kept",
      node: { ready: "False", labels: GCP_SPOT, created: new Date(NOW - 29_000).toISOString() },
      want: ["none", "TooYoung"],
    },
    {
      name: "NotReady GCP spot node with an unparsable creationTimestamp: kept as young",
      node: { ready: "False", labels: GCP_SPOT, created: "yesterday" },
      want: ["none", "TooYoung"],
    },
    {
      name: "NotReady GCP spot node without providerID: kept",
      node: { ready: "False", labels: GCP_SPOT, providerID: "" },
      want: ["none", "NoProviderID"],
    },
    {
      name: "NotReady GCP spot node still uninitialized: kept",
      node: { ready: "False", labels: GCP_SPOT, taints: [UNINITIALIZED] },
      want: ["none", "Uninitialized"],
    },
    {
      name: "NotReady GCP on-demand node: kept without a probe",
      node: { ready: "False", labels: { [LABELS.platform]: "gcp" } },
      want: ["none", "NotProbed"],
    },
    {
      name: "NotReady spot node on another platform: kept",
      node: { ready: "False", labels: { [LABELS.platform]: "aws", [LABELS.lifecycle]: "spot" } },
      facts: { probe: { ok: false, error: "unavailable" } },
      want: ["none", "TalosUnavailable"],
    },
    {
      name: "NotReady node with the shutdown taint that is not shut down: taint kept, as upstream (another CCM may have set it)",
      node: { ready: "False", taints: [{ ...SHUTDOWN_TAINT }] },
      facts: { probe: answered() },
      want: ["none", "SameInstance"],
    },
    {
      name: "NotReady node that is shut down: taint added",
      node: { ready: "False" },
      facts: { probe: answered(), shutdown: true },
      want: ["addShutdownTaint", "Shutdown"],
    },
    {
      name: "NotReady node that is shut down and tainted: nothing",
      node: { ready: "False", taints: [{ ...SHUTDOWN_TAINT }] },
      facts: { shutdown: true },
      want: ["none", "Shutdown"],
    },
    {
      name: "a shutdown taint with another effect is not the shutdown taint",
      node: { ready: "True", taints: [{ key: SHUTDOWN_TAINT.key, effect: "NoExecute" }] },
      want: ["none", "Ready"],
    },
    {
      name: "NotReady node whose IP now answers for another instance: deleted",
      node: { ready: "False" },
      facts: { probe: REPLACED },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "replaced instance on a node that has the shutdown taint: deleted",
      node: { ready: "Unknown", taints: [{ ...SHUTDOWN_TAINT }] },
      facts: { probe: REPLACED },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "replaced instance but the node is 29 s old: kept",
      node: { ready: "False", created: new Date(NOW - 29_000).toISOString() },
      facts: { probe: REPLACED },
      want: ["none", "TooYoung"],
    },
    {
      name: "replaced instance but the node is uninitialized: kept",
      node: { ready: "False", taints: [UNINITIALIZED] },
      facts: { probe: REPLACED },
      want: ["none", "Uninitialized"],
    },
    {
      name: "Talos error: never evidence",
      node: { ready: "False" },
      facts: { probe: { ok: false, error: "connection refused" } },
      want: ["none", "TalosUnavailable"],
    },
    {
      name: "same providerID: kept",
      node: { ready: "False" },
      facts: { probe: answered() },
      want: ["none", "SameInstance"],
    },
    {
      name: "providerID differing only in case (Azure resource groups): kept",
      node: {
        ready: "False",
        providerID:
          "azure:///subscriptions/s/resourceGroups/MyGroup/providers/Microsoft.Compute/virtualMachines/w1",
      },
      facts: {
        probe: answered({
          providerID:
            "azure:///subscriptions/s/resourcegroups/mygroup/providers/Microsoft.Compute/virtualMachines/w1",
          rawProviderID:
            "azure:///subscriptions/s/resourcegroups/mygroup/providers/Microsoft.Compute/virtualMachines/w1",
          instanceID: "",
          systemUUID: "",
        }),
      },
      want: ["none", "SameInstance"],
    },
    {
      name: "another providerID format naming the same instance id: kept",
      node: { ready: "False", providerID: "aws:///us-east-1a/i-0a1b2c3d4e5f67890" },
      facts: {
        probe: answered({
          providerID: "aws://us-east-1/i-0a1b2c3d4e5f67890",
          rawProviderID: "aws://us-east-1/i-0a1b2c3d4e5f67890",
          instanceID: "i-0a1b2c3d4e5f67890",
          systemUUID: "",
        }),
      },
      want: ["none", "SameInstance"],
    },
    {
      name: "instance id only as a substring of a segment does not count as the same",
      node: { ready: "False", providerID: "hcloud://151234567" },
      facts: { probe: answered({ systemUUID: "" }) },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "different providerID but the kubelet's system UUID matches (fresh read): kept",
      node: {
        ready: "False",
        providerID: "custom:///old-format",
        systemUUID: "8F3E2D1C-0B9A-4F8E-9D7C-6B5A4F3E2D1C",
      },
      facts: { probe: answered({ providerID: "custom:///new-format", instanceID: "" }) },
      want: ["none", "SameInstance"],
    },
    {
      name: "the machine on the IP has the node's name: kept (it would register as this Node)",
      node: { ready: "False", name: "n1" },
      facts: { probe: answered({ ...REPLACED_ID, hostname: "N1" }) },
      want: ["none", "SameInstance"],
    },
    {
      name: "the machine on the IP has the node's name as its FQDN's first label: kept",
      node: { ready: "False", name: "n1" },
      facts: { probe: answered({ ...REPLACED_ID, hostname: "n1.example.com" }) },
      want: ["none", "SameInstance"],
    },
    {
      name: "a host name merely starting like the node's: not the same",
      node: { ready: "False", name: "n1" },
      facts: { probe: answered({ ...REPLACED_ID, hostname: "n1-new" }) },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "rules override the providerID and produce the node's own: kept",
      node: { ready: "False", providerID: "someprovider:///8f3e2d1c" },
      facts: {
        probe: answered({
          providerID: "someprovider:///8f3e2d1c",
          rawProviderID: "hcloud://1",
          instanceID: "1",
        }),
      },
      want: ["none", "SameInstance"],
    },
    {
      name: "node with an IP-derived providerID: no identity to compare, kept without a probe",
      node: { ready: "False", providerID: "talos://metal/10.0.1.2" },
      facts: { probe: REPLACED },
      want: ["none", "NoInstanceIdentity"],
    },
    {
      name: "machine on the IP reports no instance identity: kept",
      node: { ready: "False" },
      facts: {
        probe: answered({
          providerID: "talos://metal/10.0.1.2",
          rawProviderID: "",
          instanceID: "",
          systemUUID: "",
        }),
      },
      want: ["none", "NoInstanceIdentity"],
    },
    {
      name: "rules give the new machine an identity that differs: deleted",
      node: { ready: "False", providerID: "metal://uuid-old" },
      facts: {
        probe: answered({
          providerID: "metal://uuid-new",
          rawProviderID: "",
          instanceID: "",
          systemUUID: "",
        }),
      },
      want: ["delete", "InstanceReplaced"],
    },
    {
      name: "NotReady without a probe: kept",
      node: { ready: "False" },
      want: ["none", "NotProbed"],
    },
  ];
  for (const c of cases) {
    test(`decideLifecycle() ${c.name}`, () => {
      const d = decideLifecycle(node(c.node), c.now ?? NOW, c.facts ?? {});
      expect([d.action, d.reason]).toEqual(c.want);
      expect(d.message).toContain("n1");
    });
  }

  test("decideLifecycle() explains a replacement with both providerIDs", () => {
    const d = decideLifecycle(node({ ready: "False" }), NOW, { probe: REPLACED });
    expect(d.message).toContain("hcloud://99999999");
    expect(d.message).toContain("hcloud://51234567");
    expect(d.message).toContain("10.0.1.2");
  });
});

describe("wantsProbe()", () => {
  const cases: Array<{ name: string; node: NodeShape; want: boolean }> = [
    { name: "NotReady initialized cloud node", node: { ready: "False" }, want: true },
    { name: "Ready node", node: { ready: "True" }, want: false },
    {
      name: "GCP spot node (decided without Talos)",
      node: { ready: "False", labels: GCP_SPOT },
      want: false,
    },
    { name: "silent GCP spot node", node: { ready: "Unknown", labels: GCP_SPOT }, want: true },
    {
      name: "young node",
      node: { ready: "False", created: new Date(NOW - 1_000).toISOString() },
      want: false,
    },
    { name: "uninitialized node", node: { ready: "False", taints: [UNINITIALIZED] }, want: false },
    { name: "node without providerID", node: { ready: "False", providerID: "" }, want: false },
    {
      name: "node with an IP-derived providerID",
      node: { ready: "False", providerID: "talos://nocloud/10.0.1.2" },
      want: false,
    },
    { name: "excluded node", node: { ready: "False", labels: { [EXCLUDE_LABEL]: "true" } }, want: false },
    { name: "terminating node", node: { ready: "False", deleting: true }, want: false },
  ];
  for (const c of cases) {
    test(`wantsProbe() ${c.name}: ${c.want}`, () => {
      expect(wantsProbe(node(c.node), NOW)).toBe(c.want);
    });
  }
});

describe("reportsNotReady()", () => {
  const cases: Array<{ name: string; node: NodeShape; want: boolean }> = [
    { name: "Ready=False", node: { ready: "False" }, want: true },
    { name: "Ready=Unknown", node: { ready: "Unknown" }, want: false },
    {
      name: "Ready=Unknown with not-ready:NoExecute",
      node: { ready: "Unknown", taints: [NOT_READY_NOEXECUTE] },
      want: true,
    },
    { name: "no condition with not-ready:NoSchedule", node: { taints: [NOT_READY_NOSCHEDULE] }, want: false },
    {
      name: "Ready=True with a stale not-ready:NoExecute",
      node: { ready: "True", taints: [NOT_READY_NOEXECUTE] },
      want: false,
    },
  ];
  for (const c of cases) {
    test(`reportsNotReady() ${c.name}: ${c.want}`, () => {
      expect(reportsNotReady(node(c.node))).toBe(c.want);
    });
  }
});

describe("isReady()", () => {
  test("isReady() is true only for a True Ready condition", () => {
    expect(isReady(node({ ready: "True" }))).toBe(true);
    expect(isReady(node({ ready: "False" }))).toBe(false);
    expect(isReady(node({ ready: "Unknown" }))).toBe(false);
    expect(isReady(node({}))).toBe(false);
  });
});

describe("probeTtlMs()", () => {
  const fail: InstanceProbe = { ok: false, error: "x" };
  const cases: Array<{
    name: string;
    probe: InstanceProbe;
    failures: number;
    periodMs: number;
    want: number;
  }> = [
    { name: "an answer is reused for 30 s", probe: answered(), failures: 0, periodMs: 5_000, want: 30_000 },
    {
      name: "an answer is reused for at least a period",
      probe: answered(),
      failures: 0,
      periodMs: 60_000,
      want: 60_000,
    },
    { name: "first failure: 30 s", probe: fail, failures: 1, periodMs: 5_000, want: 30_000 },
    { name: "third failure: 2 min", probe: fail, failures: 3, periodMs: 5_000, want: 120_000 },
    { name: "failures cap at 5 min", probe: fail, failures: 40, periodMs: 5_000, want: 300_000 },
  ];
  for (const c of cases) {
    test(`probeTtlMs() ${c.name}`, () => {
      expect(probeTtlMs(c.probe, c.failures, c.periodMs)).toBe(c.want);
    });
  }
});

const HCLOUD: PlatformMetadata = {
  platform: "hcloud",
  hostname: "talos-hc-1",
  region: "eu-central",
  zone: "nbg1-dc3",
  instanceType: "cx22",
  instanceId: "51234567",
  providerId: "hcloud://51234567",
  spot: false,
  internalDNS: "",
  externalDNS: "",
  tags: {},
};
const SYSINFO: SystemInformation = {
  manufacturer: "Hetzner",
  productName: "vServer",
  version: "",
  serialNumber: "51234567",
  uuid: "8f3e2d1c-0b9a-4f8e-9d7c-6b5a4f3e2d1c",
  wakeUpType: "",
  skuNumber: "",
};

describe("instanceIdentity()", () => {
  test("instanceIdentity() takes Talos' providerId when there are no rules", () => {
    expect(
      instanceIdentity({ transformations: [] }, "n1", "10.0.1.2", HCLOUD, SYSINFO, new Registry()),
    ).toEqual({
      nodeIP: "10.0.1.2",
      providerID: "hcloud://51234567",
      rawProviderID: "hcloud://51234567",
      instanceID: "51234567",
      systemUUID: SYSINFO.uuid,
      hostname: "talos-hc-1",
    });
  });

  test("instanceIdentity() derives talos://<platform>/<ip> without a providerId", () => {
    const meta = { ...HCLOUD, platform: "metal", providerId: "", instanceId: "" };
    expect(
      instanceIdentity({ transformations: [] }, "n1", "10.0.1.2", meta, undefined, new Registry()),
    ).toEqual({
      nodeIP: "10.0.1.2",
      providerID: "talos://metal/10.0.1.2",
      rawProviderID: "",
      instanceID: "",
      systemUUID: "",
      hostname: "talos-hc-1",
    });
  });

  test("instanceIdentity() applies the rules' ProviderID override, with SystemInformation", () => {
    const config = parseConfig(`transformations:
  - name: own-ids
    nodeSelector:
      - matchExpressions:
          - {key: platform, operator: In, values: [hcloud]}
    platformMetadata:
      ProviderID: "someprovider:///{{ .UUID }}"
`);
    const id = instanceIdentity(config, "n1", "10.0.1.2", HCLOUD, SYSINFO, new Registry());
    expect(id.providerID).toBe(`someprovider:///${SYSINFO.uuid}`);
    expect(id.rawProviderID).toBe("hcloud://51234567");
  });
});

// ---------------------------------------------------------------------------------------------
// The controller, through reconcile() with fake edges.

interface Call {
  method: string;
  path: string;
  body?: unknown;
}

/** A fake API server holding Nodes by name, with resourceVersions, preconditions and injected errors. */
class FakeApi {
  readonly nodes = new Map<string, ReturnType<typeof rawNode>>();
  readonly calls: Call[] = [];
  /** Errors thrown by the next calls of a method, in order. */
  readonly failures: Record<string, KubeError[]> = {};
  /** Runs after a GET read the node, before it answers: another writer racing with the caller. */
  afterGet: ((name: string) => void) | undefined;

  put(n: ReturnType<typeof rawNode>): void {
    this.nodes.set(n.metadata.name, structuredClone(n));
  }

  #name(path: string): string {
    return decodeURIComponent(path.slice("/api/v1/nodes/".length));
  }

  #fail(method: string): void {
    const e = this.failures[method]?.shift();
    if (e) throw e;
  }

  async get<T>(path: string): Promise<T> {
    this.calls.push({ method: "GET", path });
    this.#fail("GET");
    const n = this.nodes.get(this.#name(path));
    if (!n) throw new KubeError(404, "NotFound", "not found");
    const answer = structuredClone(n) as T;
    this.afterGet?.(this.#name(path));
    return answer;
  }

  async patch<T>(path: string, body: unknown, type?: string): Promise<T> {
    this.calls.push({ method: `PATCH ${type}`, path, body });
    this.#fail("PATCH");
    const n = this.nodes.get(this.#name(path));
    if (!n) throw new KubeError(404, "NotFound", "not found");
    const b = body as { metadata?: { resourceVersion?: string }; spec?: { taints?: never[] } };
    if (b.metadata?.resourceVersion && b.metadata.resourceVersion !== n.metadata.resourceVersion) {
      throw new KubeError(409, "Conflict", "the object has been modified");
    }
    if (b.spec?.taints) n.spec.taints = b.spec.taints;
    n.metadata.resourceVersion = String(Number(n.metadata.resourceVersion) + 1);
    return structuredClone(n) as T;
  }

  async delete<T>(path: string, opts: { body?: unknown } = {}): Promise<T> {
    this.calls.push({ method: "DELETE", path, body: opts.body });
    this.#fail("DELETE");
    const name = this.#name(path);
    const n = this.nodes.get(name);
    if (!n) throw new KubeError(404, "NotFound", "not found");
    const pre =
      (opts.body as { preconditions?: { uid?: string; resourceVersion?: string } }).preconditions ?? {};
    if (
      (pre.uid && pre.uid !== n.metadata.uid) ||
      (pre.resourceVersion && pre.resourceVersion !== n.metadata.resourceVersion)
    ) {
      throw new KubeError(409, "Conflict", "precondition failed");
    }
    this.nodes.delete(name);
    return {} as T;
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method.startsWith(method)).length;
  }
}

/** A fake Talos API: machines by IP, or an error for every call. */
class FakeTalos {
  readonly machines = new Map<string, { metadata: PlatformMetadata; sys?: SystemInformation }>();
  calls = 0;
  error: Error | undefined;
  /** The options of the last call. */
  opts: CallOptions | undefined;

  async firstAnswer<T>(
    ips: readonly string[],
    fn: (ip: string, o: CallOptions) => Promise<T>,
    opts: CallOptions,
  ) {
    let last: unknown = new TalosError("invalid", "Cannot ask Talos: the node has no IP");
    for (const ip of ips) {
      try {
        return { nodeIP: ip, value: await fn(ip, opts) };
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }
  async platformMetadata(ip: string, opts: CallOptions): Promise<PlatformMetadata> {
    this.calls++;
    this.opts = opts;
    if (this.error) throw this.error;
    const m = this.machines.get(ip);
    if (!m)
      throw new TalosError("unavailable", `Cannot get platformmetadata on node ${ip}: unreachable`, {
        retryable: true,
      });
    return m.metadata;
  }
  async systemInformation(ip: string): Promise<SystemInformation | undefined> {
    return this.machines.get(ip)?.sys;
  }
}

interface Recorded {
  target: { kind: string; name: string; uid?: string };
  type: string;
  reason: string;
  note: string;
}

function harness(opts: { talos?: boolean; now?: number } = {}) {
  const api = new FakeApi();
  const talos = new FakeTalos();
  const events: Recorded[] = [];
  const registry = new Registry();
  let now = opts.now ?? NOW;
  const cache = new Map<string, LeanNode>();
  const controller = new LifecycleController({
    client: api as never,
    nodes: { get: (name: string) => cache.get(name), list: () => [...cache.values()] },
    events: {
      record: async (target, type, reason, _action, note) => {
        events.push({ target, type, reason, note });
      },
    },
    talos: opts.talos === false ? undefined : (talos as never),
    config: { current: parseConfig("") },
    registry,
    periodMs: 5_000,
    workers: 1,
    now: () => now,
  });
  /** Puts a node into both the API server and the cache (as the informer would). */
  const add = (s: NodeShape) => {
    const raw = rawNode(s);
    api.put(raw);
    cache.set(raw.metadata.name, leanNode(raw));
  };
  const metric = (name: string) =>
    registry
      .expose()
      .split("\n")
      .filter((l) => l.startsWith(name));
  return { api, talos, events, controller, add, cache, metric, tick: (ms: number) => (now += ms) };
}

describe("LifecycleController.reconcile()", () => {
  test("reconcile() deletes a NotReady GCP spot node with preconditions, an Event and a metric", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT, resourceVersion: "7" });
    await h.controller.reconcile("n1");
    expect(h.api.nodes.has("n1")).toBe(false);
    const del = h.api.calls.find((c) => c.method === "DELETE");
    expect(del?.body).toEqual({
      apiVersion: "v1",
      kind: "DeleteOptions",
      preconditions: { uid: "uid-1", resourceVersion: "7" },
    });
    expect(h.events).toHaveLength(1);
    expect(h.events[0]).toMatchObject({
      target: { kind: "Node", name: "n1", uid: "uid-1" },
      type: "Normal",
      reason: "DeletingNode",
    });
    expect(h.events[0]?.note).toContain("GCP spot");
    expect(h.metric("talosccm_lifecycle_node_deletions_total{")).toEqual([
      'talosccm_lifecycle_node_deletions_total{reason="GCPSpotNotReady"} 1',
    ]);
    expect(h.talos.calls).toBe(0);
  });

  test("reconcile() does not delete a node that turned Ready after the cache was read", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT });
    h.api.put(rawNode({ ready: "True", labels: GCP_SPOT, resourceVersion: "101" }));
    await h.controller.reconcile("n1");
    expect(h.api.nodes.has("n1")).toBe(true);
    expect(h.api.count("DELETE")).toBe(0);
    expect(h.events).toHaveLength(0);
  });

  test("reconcile() does not delete a Node re-created under the same name", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT });
    h.api.put(rawNode({ ready: "False", labels: GCP_SPOT, uid: "uid-2" }));
    await h.controller.reconcile("n1");
    expect(h.api.nodes.get("n1")?.metadata.uid).toBe("uid-2");
    expect(h.api.count("DELETE")).toBe(0);
  });

  test("reconcile() gives up quietly when the node changes between the re-read and the deletion", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT });
    h.api.failures.DELETE = [new KubeError(409, "Conflict", "precondition failed")];
    await h.controller.reconcile("n1");
    expect(h.api.nodes.has("n1")).toBe(true);
    expect(h.events).toHaveLength(0);
  });

  test("reconcile() records DeletingNodeFailed and throws when the deletion fails", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT });
    h.api.failures.DELETE = [new KubeError(403, "Forbidden", "nodes is forbidden")];
    await expect(h.controller.reconcile("n1")).rejects.toThrow(/Cannot delete node n1: .*forbidden/);
    expect(h.events.map((e) => [e.type, e.reason])).toEqual([["Warning", "DeletingNodeFailed"]]);
  });

  test("reconcile() treats a node already gone as done", async () => {
    const h = harness();
    h.add({ ready: "False", labels: GCP_SPOT });
    h.api.nodes.delete("n1");
    await h.controller.reconcile("n1");
    expect(h.api.count("DELETE")).toBe(0);
    expect(await h.controller.reconcile("not-cached")).toBeUndefined();
  });

  test("reconcile() deletes a NotReady node whose IP answers for another instance", async () => {
    const h = harness();
    h.add({ ready: "False" });
    h.talos.machines.set("10.0.1.2", {
      metadata: { ...HCLOUD, instanceId: "99999999", providerId: "hcloud://99999999" },
      sys: { ...SYSINFO, uuid: "00000000-1111-2222-3333-444444444444" },
    });
    await h.controller.reconcile("n1");
    expect(h.api.nodes.has("n1")).toBe(false);
    expect(h.events[0]?.note).toContain("hcloud://99999999");
    expect(h.metric("talosccm_lifecycle_node_deletions_total{")).toEqual([
      'talosccm_lifecycle_node_deletions_total{reason="InstanceReplaced"} 1',
    ]);
    expect(h.metric("talosccm_lifecycle_instance_probes_total{")).toEqual([
      'talosccm_lifecycle_instance_probes_total{result="replaced"} 1',
    ]);
  });

  test("reconcile() keeps a replaced-looking node whose kubelet reports the machine's system UUID", async () => {
    const h = harness();
    h.add({ ready: "False", providerID: "custom:///old-format" });
    h.api.put(rawNode({ ready: "False", providerID: "custom:///old-format", systemUUID: SYSINFO.uuid }));
    h.talos.machines.set("10.0.1.2", {
      metadata: { ...HCLOUD, instanceId: "", providerId: "custom:///new-format" },
      sys: SYSINFO,
    });
    await h.controller.reconcile("n1");
    expect(h.api.nodes.has("n1")).toBe(true);
    expect(h.api.count("DELETE")).toBe(0);
  });

  test("reconcile() never deletes when Talos fails, and backs off its probes", async () => {
    const h = harness();
    h.add({ ready: "False" });
    h.talos.error = new TalosError("unavailable", "Cannot get platformmetadata: connection refused", {
      retryable: true,
    });
    await h.controller.reconcile("n1");
    await h.controller.reconcile("n1");
    expect(h.api.count("DELETE")).toBe(0);
    expect(h.api.count("GET")).toBe(0);
    expect(h.talos.calls).toBe(1);
    h.tick(30_000);
    await h.controller.reconcile("n1");
    expect(h.talos.calls).toBe(2);
    h.tick(30_000);
    await h.controller.reconcile("n1");
    expect(h.talos.calls).toBe(2);
    expect(h.metric("talosccm_lifecycle_instance_probes_total{")).toEqual([
      'talosccm_lifecycle_instance_probes_total{result="error"} 2',
    ]);
  });

  test("reconcile() tells Talos when a probed node's status is unknown (its kubelet silent), so its failures count apart", async () => {
    const h = harness();
    h.talos.error = new TalosError("unavailable", "connection refused", { retryable: true });
    h.add({ ready: "Unknown" });
    await h.controller.reconcile("n1");
    expect(h.talos.opts?.nodeStatusUnknown).toBe(true);
    const other = harness();
    other.talos.error = h.talos.error;
    other.add({ ready: "False" });
    await other.controller.reconcile("n1");
    expect(other.talos.opts?.nodeStatusUnknown).toBe(false);
  });

  test("reconcile() re-uses a probe that found the same instance for 30 s", async () => {
    const h = harness();
    h.add({ ready: "False" });
    h.talos.machines.set("10.0.1.2", { metadata: HCLOUD, sys: SYSINFO });
    await h.controller.reconcile("n1");
    h.tick(5_000);
    await h.controller.reconcile("n1");
    expect(h.talos.calls).toBe(1);
    h.tick(25_000);
    await h.controller.reconcile("n1");
    expect(h.talos.calls).toBe(2);
    expect(h.api.calls).toEqual([]);
  });

  test("reconcile() without a Talos client applies the reference rules only", async () => {
    const h = harness({ talos: false });
    h.add({ ready: "False" });
    h.add({ name: "spot", uid: "uid-s", ready: "False", labels: GCP_SPOT });
    await h.controller.reconcile("n1");
    await h.controller.reconcile("spot");
    expect([...h.api.nodes.keys()]).toEqual(["n1"]);
  });

  test("reconcile() removes the shutdown taint from a Ready node and keeps the other taints", async () => {
    const h = harness();
    const other = { key: "example.com/dedicated", value: "db", effect: "NoSchedule" };
    h.add({ ready: "True", taints: [other, { ...SHUTDOWN_TAINT }], resourceVersion: "5" });
    await h.controller.reconcile("n1");
    expect(h.api.nodes.get("n1")?.spec.taints).toEqual([other]);
    const patch = h.api.calls.find((c) => c.method.startsWith("PATCH"));
    expect(patch).toEqual({
      method: "PATCH application/merge-patch+json",
      path: "/api/v1/nodes/n1",
      body: { metadata: { resourceVersion: "5" }, spec: { taints: [other] } },
    });
    expect(h.metric("talosccm_lifecycle_shutdown_taint_changes_total{")).toEqual([
      'talosccm_lifecycle_shutdown_taint_changes_total{action="remove"} 1',
    ]);
  });

  test("reconcile() re-reads and keeps a taint another writer added concurrently", async () => {
    const h = harness();
    h.add({ ready: "True", taints: [{ ...SHUTDOWN_TAINT }] });
    const added = { key: "example.com/late", effect: "NoExecute" };
    h.api.afterGet = (name) => {
      h.api.afterGet = undefined;
      const n = h.api.nodes.get(name);
      if (!n) return;
      n.spec.taints = [...n.spec.taints, added];
      n.metadata.resourceVersion = "200";
    };
    await h.controller.reconcile("n1");
    expect(h.api.nodes.get("n1")?.spec.taints).toEqual([added]);
    expect(h.api.count("PATCH")).toBe(2);
  });

  test("reconcile() does not patch when the fresh node has no shutdown taint any more", async () => {
    const h = harness();
    h.add({ ready: "True", taints: [{ ...SHUTDOWN_TAINT }] });
    h.api.put(rawNode({ ready: "True" }));
    await h.controller.reconcile("n1");
    expect(h.api.count("PATCH")).toBe(0);
  });

  test("reconcile() throws after repeated conflicts so the queue retries with backoff", async () => {
    const h = harness();
    h.add({ ready: "True", taints: [{ ...SHUTDOWN_TAINT }] });
    h.api.failures.PATCH = Array.from({ length: 5 }, () => new KubeError(409, "Conflict", "modified"));
    await expect(h.controller.reconcile("n1")).rejects.toThrow(/Cannot remove the shutdown taint on node n1/);
    expect(h.api.count("PATCH")).toBe(5);
  });

  test("reconcile() leaves Ready, young and excluded nodes without any API call", async () => {
    const h = harness();
    h.add({ name: "ready", uid: "u1", ready: "True", labels: GCP_SPOT });
    h.add({
      name: "young",
      uid: "u2",
      ready: "False",
      labels: GCP_SPOT,
      created: new Date(NOW - 5_000).toISOString(),
    });
    h.add({ name: "excluded", uid: "u3", ready: "False", labels: { ...GCP_SPOT, [EXCLUDE_LABEL]: "" } });
    for (const n of ["ready", "young", "excluded"]) await h.controller.reconcile(n);
    expect(h.api.calls).toEqual([]);
    expect(h.talos.calls).toBe(0);
  });
});

describe("LifecycleController", () => {
  test("LifecycleController() refuses a non-positive period", () => {
    const make = (periodMs: number) =>
      new LifecycleController({
        client: {} as never,
        nodes: { get: () => undefined, list: () => [] },
        events: { record: async () => {} },
        talos: undefined,
        config: { current: parseConfig("") },
        registry: new Registry(),
        periodMs,
        workers: 1,
      });
    expect(() => make(0)).toThrow(/periodMs must be positive/);
    expect(() => make(1000)).not.toThrow();
  });

  test("run() scans at once, then every period, and resolves when aborted", async () => {
    let listed = 0;
    const ticker = { fn: undefined as (() => void) | undefined, ms: 0, stopped: false };
    const controller = new LifecycleController({
      client: {} as never,
      nodes: {
        get: () => undefined,
        list: () => {
          listed++;
          return [];
        },
      },
      events: { record: async () => {} },
      talos: undefined,
      config: { current: parseConfig("") },
      registry: new Registry(),
      periodMs: 20,
      workers: 2,
      every: (fn, ms) => {
        Object.assign(ticker, { fn, ms });
        return () => {
          ticker.stopped = true;
        };
      },
    });
    const abort = new AbortController();
    const done = controller.run(abort.signal);
    expect(listed).toBe(1);
    expect(ticker.ms).toBe(20);
    ticker.fn?.();
    ticker.fn?.();
    expect(listed).toBe(3);
    expect(ticker.stopped).toBe(false);
    abort.abort();
    await done;
    expect(ticker.stopped).toBe(true);
  });
});
