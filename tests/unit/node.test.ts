import { describe, expect, test } from "bun:test";
import type { V1Taint } from "@kubernetes/client-node";
import { type CompiledConfig, type CompiledRule, type GlobalConfig, parseConfig } from "../../lib/config.ts";
import {
  type DesiredNode,
  decideNode,
  instanceFacts,
  type JsonPatchOp,
  type NodeDecision,
  nodePatch,
} from "../../lib/desirednode.ts";
import type { Handlers } from "../../lib/kubecache.ts";
import type { Logger } from "../../lib/log.ts";
import { managedRecordDigest, readManagedRecord } from "../../lib/managedrecord.ts";
import { Registry } from "../../lib/metrics.ts";
import { CloudNodeController } from "../../lib/node.ts";
import { correctionDelayMs, NODE_WRITABLE_MAX_DELAY_MS, writeBackDelayMs } from "../../lib/nodestate.ts";
import { type LeanNode, leanNode, nodeIPs } from "../../lib/nodeview.ts";
import { TalosError, TalosNotFoundError, type TalosWatch, type TalosWatchHandler } from "../../lib/talos.ts";
import {
  type FactsState,
  sameMachine,
  TalosWatchCache,
  type TalosWatchClient,
} from "../../lib/taloswatchcache.ts";
import type { AddressStatus, NodeFacts, PlatformMetadata } from "../../lib/types.ts";
import {
  FIELD_MANAGER,
  MANAGED_ANNOTATION,
  MANAGED_DIGEST_LABEL,
  PROVIDED_NODE_IP_ANNOTATION,
  UNINITIALIZED_TAINT,
} from "../../lib/wellknown.ts";
import { address, FakeTalos, metadata, SYSINFO, settle } from "../support/faketaloswatch.ts";

// ---------------------------------------------------------------------------------------------
// Builders.

const UNINIT: V1Taint = { key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" };
const NOT_READY: V1Taint = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };

function lean(over: {
  name?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  taints?: V1Taint[];
  providerID?: string;
  addresses?: Array<{ type: string; address: string }>;
  resourceVersion?: string;
}): LeanNode {
  const name = over.name ?? "node-1";
  const node: LeanNode = {
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion: over.resourceVersion ?? "100",
      creationTimestamp: "2026-01-01T00:00:00Z",
      labels: over.labels ?? { "kubernetes.io/hostname": name },
      annotations: over.annotations ?? { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
    },
    spec: { taints: over.taints ?? [UNINIT, NOT_READY] },
    status: {
      addresses: over.addresses ?? [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "Hostname", address: name },
      ],
      ready: "True",
    },
  };
  if (over.providerID !== undefined) node.spec.providerID = over.providerID;
  return node;
}

function rule(partial: Partial<CompiledRule>): CompiledRule {
  return {
    name: "r",
    nodeSelector: [],
    labels: [],
    annotations: [],
    taints: [],
    platformMetadata: [],
    features: { publicIPDiscovery: false },
    ...partial,
  };
}
const entry = (key: string, source: string) => ({ key, value: { source } });

/** The record annotation and its digest label, as the controller writes them together. */
function record(text: string) {
  return {
    annotation: { [MANAGED_ANNOTATION]: text },
    label: { [MANAGED_DIGEST_LABEL]: managedRecordDigest(text) },
  };
}

/** The `global` settings the decision reads. */
interface DesiredOptions {
  preferIPv6: boolean;
  reconcile: boolean;
  skipForeignNode: boolean;
  clusterName: string;
}

const OPTS: DesiredOptions = {
  preferIPv6: false,
  reconcile: false,
  skipForeignNode: false,
  clusterName: "prod",
};

/** The controller's one call, decideNode, on this Node (its IPs and record as the controller reads them) and facts. */
function decide(
  node: LeanNode,
  raw: NodeFacts,
  rules: CompiledRule[] = [],
  opts: Partial<DesiredOptions> = {},
  nodeIP = "10.0.0.5",
): NodeDecision {
  const global = { ...OPTS, ...opts };
  return decideNode({
    node,
    ips: nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      global.preferIPv6,
    ),
    facts: raw,
    nodeIP,
    managed: readManagedRecord(node.metadata),
    config: { transformations: rules, global },
    clusterName: "",
  });
}

/** The Node as {@link decide} wants it. */
function desire(
  node: LeanNode,
  raw: NodeFacts,
  rules: CompiledRule[] = [],
  opts: Partial<DesiredOptions> = {},
  nodeIP = "10.0.0.5",
): DesiredNode {
  return decide(node, raw, rules, opts, nodeIP).want;
}

// ---------------------------------------------------------------------------------------------

describe("instanceFacts()", () => {
  const cases: Array<{ name: string; meta: Partial<PlatformMetadata>; want: Partial<PlatformMetadata> }> = [
    {
      name: "defaults providerId to talos://<platform>/<node IP>",
      meta: { platform: "nocloud" },
      want: { providerId: "talos://nocloud/10.0.0.5" },
    },
    {
      name: "keeps a providerId Talos reported",
      meta: { platform: "aws", providerId: "aws:///us-east-1a/i-1" },
      want: { providerId: "aws:///us-east-1a/i-1" },
    },
    {
      name: "lower-cases the Azure resource group",
      meta: {
        platform: "azure",
        providerId:
          "azure:///subscriptions/S-1/resourceGroups/Talos-RG/providers/Microsoft.Compute/virtualMachines/Vm-1",
      },
      want: {
        providerId:
          "azure:///subscriptions/S-1/resourceGroups/talos-rg/providers/Microsoft.Compute/virtualMachines/Vm-1",
      },
    },
    {
      name: "keeps an Azure providerId in another format",
      meta: { platform: "azure", providerId: "azure:///Odd/Format" },
      want: { providerId: "azure:///Odd/Format" },
    },
    {
      name: "defaults the hostname to the node name",
      meta: { hostname: "" },
      want: { hostname: "node-1", providerId: "talos://metal/10.0.0.5" },
    },
  ];
  for (const c of cases)
    test(`instanceFacts() ${c.name}`, () => {
      const got = instanceFacts({ platformMetadata: metadata(c.meta), addresses: [] }, "10.0.0.5", "node-1");
      expect(got.platformMetadata).toEqual(metadata({ ...c.meta, ...c.want }));
    });
});

describe("desiredNode()", () => {
  const eth0 = address("10.0.0.5/24", "eth0");
  const SPOT_RECORD =
    '{"v":1,"labels":["example.com/tier"],"annotations":["example.com/note"],"taints":["example.com/dedicated:NoSchedule"]}';
  const GONE_RECORD =
    '{"v":1,"labels":["example.com/gone","example.com/keep"],"annotations":["example.com/gone"],"taints":["example.com/gone:NoSchedule"]}';
  const KEEP_RECORD = '{"v":1,"labels":["example.com/keep"]}';
  /** An initialized node in reconcile mode whose record says a rule added the `gone` keys. */
  const reconciled = (over: { labels?: Record<string, string>; record?: string }) =>
    lean({
      taints: [
        NOT_READY,
        { key: "example.com/gone", value: "x", effect: "NoSchedule" },
        { key: "user/t", effect: "NoSchedule" },
      ],
      providerID: "talos://metal/10.0.0.5",
      labels: {
        "kubernetes.io/hostname": "node-1",
        "example.com/keep": "1",
        "example.com/gone": "1",
        "user/label": "mine",
        "topology.kubernetes.io/zone": "z-old",
        "failure-domain.beta.kubernetes.io/zone": "z-old",
        ...over.labels,
      },
      annotations: {
        [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
        "example.com/gone": "x",
        "user/annotation": "mine",
        ...(over.record === undefined ? {} : record(over.record).annotation),
      },
    });
  interface Case {
    name: string;
    node: LeanNode;
    facts: NodeFacts;
    rules?: CompiledRule[];
    opts?: Partial<DesiredOptions>;
    want: DesiredNode;
  }
  const cases: Case[] = [
    {
      name: "initializes a bare-metal node without rules",
      node: lean({}),
      facts: {
        platformMetadata: metadata({ hostname: "node-1.example.com", region: "eu", zone: "eu-1" }),
        addresses: [eth0, address("203.0.113.5/24", "eth1")],
      },
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "node.cloudprovider.kubernetes.io/platform": "metal",
          "node.cloudprovider.kubernetes.io/clustername": "prod",
          "topology.kubernetes.io/region": "eu",
          "failure-domain.beta.kubernetes.io/region": "eu",
          "topology.kubernetes.io/zone": "eu-1",
          "failure-domain.beta.kubernetes.io/zone": "eu-1",
        },
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
        taints: [NOT_READY],
        providerID: "talos://metal/10.0.0.5",
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "ExternalIP", address: "203.0.113.5" },
          { type: "Hostname", address: "node-1" },
          { type: "InternalDNS", address: "node-1.example.com" },
        ],
      },
    },
    {
      name: "initializes a spot cloud node with rules: labels, annotations, rendered taints, record",
      node: lean({}),
      facts: {
        platformMetadata: metadata({
          platform: "gcp",
          region: "us-central1",
          zone: "us-central1-b",
          instanceType: "e2-standard-4",
          instanceId: "node-1",
          providerId: "gce://p/us-central1-b/node-1",
          spot: true,
        }),
        addresses: [eth0, address("34.1.2.3/32", "external")],
        systemInformation: SYSINFO,
      },
      rules: [
        rule({
          labels: [entry("example.com/tier", "web")],
          annotations: [entry("example.com/note", "a & b <c> 'd' \"e\" +f")],
          taints: [entry("example.com/dedicated", "web:NoSchedule")],
        }),
      ],
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "example.com/tier": "web",
          "node.cloudprovider.kubernetes.io/platform": "gcp",
          "node.cloudprovider.kubernetes.io/lifecycle": "spot",
          "node.cloudprovider.kubernetes.io/clustername": "prod",
          "topology.kubernetes.io/region": "us-central1",
          "failure-domain.beta.kubernetes.io/region": "us-central1",
          "topology.kubernetes.io/zone": "us-central1-b",
          "failure-domain.beta.kubernetes.io/zone": "us-central1-b",
          "node.kubernetes.io/instance-type": "e2-standard-4",
          "beta.kubernetes.io/instance-type": "e2-standard-4",
          ...record(SPOT_RECORD).label,
        },
        annotations: {
          [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
          "example.com/note": "a & b <c> 'd' \"e\" +f",
          ...record(SPOT_RECORD).annotation,
        },
        taints: [NOT_READY, { key: "example.com/dedicated", value: "web", effect: "NoSchedule" }],
        providerID: "gce://p/us-central1-b/node-1",
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "ExternalIP", address: "34.1.2.3" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "a rule's label wins over the platform label; platformMetadata overrides reach the topology labels",
      node: lean({}),
      facts: { platformMetadata: metadata({ region: "eu" }), addresses: [eth0] },
      rules: [
        rule({
          labels: [entry("node.cloudprovider.kubernetes.io/platform", "custom")],
          platformMetadata: [{ key: "Region", field: "region", value: { source: "eu-on-metal" } }],
        }),
      ],
      opts: { clusterName: "" },
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "node.cloudprovider.kubernetes.io/platform": "custom",
          "topology.kubernetes.io/region": "eu-on-metal",
          "failure-domain.beta.kubernetes.io/region": "eu-on-metal",
          ...record('{"v":1,"labels":["node.cloudprovider.kubernetes.io/platform"]}').label,
        },
        annotations: {
          [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
          ...record('{"v":1,"labels":["node.cloudprovider.kubernetes.io/platform"]}').annotation,
        },
        taints: [NOT_READY],
        providerID: "talos://metal/10.0.0.5",
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "an initialized node in drop-in mode: rule labels updated, topology only synced legacy → GA, no taints",
      node: lean({
        taints: [NOT_READY],
        providerID: "talos://metal/10.0.0.5",
        labels: {
          "kubernetes.io/hostname": "node-1",
          "example.com/tier": "old",
          "node.cloudprovider.kubernetes.io/platform": "metal",
          "failure-domain.beta.kubernetes.io/zone": "z-legacy",
          "topology.kubernetes.io/zone": "z-ga",
        },
      }),
      facts: { platformMetadata: metadata({ zone: "z-new" }), addresses: [eth0] },
      rules: [
        rule({ labels: [entry("example.com/tier", "web")], taints: [entry("example.com/t", "NoExecute")] }),
      ],
      opts: { clusterName: "" },
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "example.com/tier": "web",
          "node.cloudprovider.kubernetes.io/platform": "metal",
          "failure-domain.beta.kubernetes.io/zone": "z-legacy",
          "topology.kubernetes.io/zone": "z-legacy",
          ...record('{"v":1,"labels":["example.com/tier"]}').label,
        },
        annotations: {
          [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
          ...record('{"v":1,"labels":["example.com/tier"]}').annotation,
        },
        taints: [NOT_READY],
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "reconcile mode removes what a deleted rule added, keeps other actors' keys, follows the facts",
      node: reconciled({ record: GONE_RECORD, labels: record(GONE_RECORD).label }),
      facts: { platformMetadata: metadata({ zone: "z-new" }), addresses: [eth0] },
      rules: [rule({ labels: [entry("example.com/keep", "1")] })],
      opts: { reconcile: true, clusterName: "" },
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "example.com/keep": "1",
          "user/label": "mine",
          "topology.kubernetes.io/zone": "z-new",
          "failure-domain.beta.kubernetes.io/zone": "z-new",
          "node.cloudprovider.kubernetes.io/platform": "metal",
          ...record(KEEP_RECORD).label,
        },
        annotations: {
          [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
          "user/annotation": "mine",
          ...record(KEEP_RECORD).annotation,
        },
        taints: [NOT_READY, { key: "user/t", effect: "NoSchedule" }],
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    ...[
      {
        what: "a record whose digest label does not match (forged by the kubelet)",
        node: reconciled({ record: GONE_RECORD, labels: record(KEEP_RECORD).label }),
      },
      {
        what: "a record without its digest label (from before records were signed, or forged)",
        node: reconciled({ record: GONE_RECORD }),
      },
    ].map(
      ({ what, node }): Case => ({
        name: `reconcile mode removes nothing on ${what} and rebuilds it from the rules`,
        node,
        facts: { platformMetadata: metadata({ zone: "z-new" }), addresses: [eth0] },
        rules: [rule({ labels: [entry("example.com/keep", "1")] })],
        opts: { reconcile: true, clusterName: "" },
        want: {
          labels: {
            "kubernetes.io/hostname": "node-1",
            "example.com/keep": "1",
            "example.com/gone": "1",
            "user/label": "mine",
            "topology.kubernetes.io/zone": "z-new",
            "failure-domain.beta.kubernetes.io/zone": "z-new",
            "node.cloudprovider.kubernetes.io/platform": "metal",
            ...record(KEEP_RECORD).label,
          },
          annotations: {
            [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
            "example.com/gone": "x",
            "user/annotation": "mine",
            ...record(KEEP_RECORD).annotation,
          },
          taints: [
            NOT_READY,
            { key: "example.com/gone", value: "x", effect: "NoSchedule" },
            { key: "user/t", effect: "NoSchedule" },
          ],
          addresses: [
            { type: "InternalIP", address: "10.0.0.5" },
            { type: "Hostname", address: "node-1" },
          ],
        },
      }),
    ),
    {
      name: "reconcile mode removes the digest label with the record once no rule produces anything",
      node: reconciled({ record: KEEP_RECORD, labels: record(KEEP_RECORD).label }),
      facts: { platformMetadata: metadata({ zone: "z-old" }), addresses: [eth0] },
      opts: { reconcile: true, clusterName: "" },
      want: {
        labels: {
          "kubernetes.io/hostname": "node-1",
          "example.com/gone": "1",
          "user/label": "mine",
          "topology.kubernetes.io/zone": "z-old",
          "failure-domain.beta.kubernetes.io/zone": "z-old",
          "node.cloudprovider.kubernetes.io/platform": "metal",
        },
        annotations: {
          [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
          "example.com/gone": "x",
          "user/annotation": "mine",
        },
        taints: [
          NOT_READY,
          { key: "example.com/gone", value: "x", effect: "NoSchedule" },
          { key: "user/t", effect: "NoSchedule" },
        ],
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "a foreign node with skipForeignNode only gets addresses (and loses the uninitialized taint)",
      node: lean({ providerID: "aws:///us-east-1a/i-1" }),
      facts: {
        platformMetadata: metadata({ platform: "aws", zone: "a" }),
        addresses: [eth0, address("54.1.2.3/32", "external")],
      },
      rules: [rule({ labels: [entry("example.com/tier", "web")] })],
      opts: { skipForeignNode: true },
      want: {
        labels: { "kubernetes.io/hostname": "node-1" },
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
        taints: [NOT_READY],
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "ExternalIP", address: "54.1.2.3" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "a node without the annotation uses its InternalIP and keeps the providerID it has",
      node: lean({
        annotations: {},
        providerID: "talos://metal/10.0.0.9",
        addresses: [
          { type: "InternalIP", address: "10.0.0.9" },
          { type: "Hostname", address: "node-1" },
        ],
      }),
      facts: { platformMetadata: metadata({}), addresses: [address("10.0.0.9/24", "eth0")] },
      opts: { clusterName: "" },
      want: {
        labels: { "kubernetes.io/hostname": "node-1", "node.cloudprovider.kubernetes.io/platform": "metal" },
        annotations: {},
        taints: [NOT_READY],
        addresses: [
          { type: "InternalIP", address: "10.0.0.9" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
    {
      name: "a dual-stack node gets as InternalIPs only the node IPs its machine has",
      node: lean({
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "fd00::9,10.0.0.5" },
        addresses: [
          { type: "InternalIP", address: "fd00::9" },
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      }),
      facts: { platformMetadata: metadata({}), addresses: [eth0, address("fd00::5/64", "eth0")] },
      opts: { clusterName: "" },
      want: {
        labels: { "kubernetes.io/hostname": "node-1", "node.cloudprovider.kubernetes.io/platform": "metal" },
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "fd00::9,10.0.0.5" },
        taints: [NOT_READY],
        providerID: "talos://metal/10.0.0.5",
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    },
  ];
  for (const c of cases)
    test(`desiredNode() ${c.name}`, () => {
      expect(desire(c.node, c.facts, c.rules, c.opts)).toEqual(c.want);
    });

  test("desiredNode() skips a rule value Kubernetes would refuse and applies the rest", () => {
    const rules = [
      rule({ labels: [entry("example.com/ok", "yes"), entry("example.com/bad", "not valid!")] }),
    ];
    const { rules: result, want } = decide(
      lean({}),
      { platformMetadata: metadata({}), addresses: [eth0] },
      rules,
    );
    expect(result.errors.map((e) => [e.field, e.key])).toEqual([["labels", "example.com/bad"]]);
    expect(want.labels["example.com/ok"]).toBe("yes");
    expect(want.labels["example.com/bad"]).toBeUndefined();
    expect(want.taints).toEqual([NOT_READY]);
  });
});

describe("nodePatch()", () => {
  const desired = (node: LeanNode, over: Partial<DesiredNode>): DesiredNode => ({
    labels: { ...node.metadata.labels },
    annotations: { ...node.metadata.annotations },
    taints: [...node.spec.taints],
    addresses: node.status.addresses as DesiredNode["addresses"],
    ...over,
  });
  const node = lean({});
  const cases: Array<{
    name: string;
    node: LeanNode;
    want: DesiredNode;
    patch: { addresses?: unknown; ops: JsonPatchOp[] };
  }> = [
    { name: "writes nothing when nothing differs", node, want: desired(node, {}), patch: { ops: [] } },
    {
      name: "initialization: keys one by one, providerID once, taints guarded by a test",
      node,
      want: desired(node, {
        labels: { "kubernetes.io/hostname": "node-1", "a/b~c": "1" },
        annotations: { "x/y": "z" },
        taints: [NOT_READY],
        providerID: "talos://metal/10.0.0.5",
      }),
      patch: {
        ops: [
          { op: "add", path: "/metadata/labels/a~1b~0c", value: "1" },
          { op: "add", path: "/metadata/annotations/x~1y", value: "z" },
          { op: "remove", path: `/metadata/annotations/alpha.kubernetes.io~1provided-node-ip` },
          { op: "test", path: "/spec/providerID", value: null },
          { op: "add", path: "/spec/providerID", value: "talos://metal/10.0.0.5" },
          { op: "test", path: "/spec/taints", value: [UNINIT, NOT_READY] },
          { op: "add", path: "/spec/taints", value: [NOT_READY] },
        ],
      },
    },
    {
      name: "adds an absent map whole, guarded against a concurrent writer",
      node: lean({ annotations: {} }),
      want: desired(lean({ annotations: {} }), { annotations: { "x/y": "z" } }),
      patch: {
        ops: [
          { op: "test", path: "/metadata/annotations", value: null },
          { op: "add", path: "/metadata/annotations", value: { "x/y": "z" } },
        ],
      },
    },
    {
      name: "removes the taint list when it becomes empty",
      node: lean({ taints: [UNINIT] }),
      want: desired(lean({ taints: [UNINIT] }), { taints: [] }),
      patch: {
        ops: [
          { op: "test", path: "/spec/taints", value: [UNINIT] },
          { op: "remove", path: "/spec/taints" },
        ],
      },
    },
    {
      name: "replaces status addresses when their order differs",
      node,
      want: desired(node, {
        addresses: [
          { type: "Hostname", address: "node-1" },
          { type: "InternalIP", address: "10.0.0.5" },
        ],
      }),
      patch: {
        addresses: [
          { type: "Hostname", address: "node-1" },
          { type: "InternalIP", address: "10.0.0.5" },
        ],
        ops: [],
      },
    },
  ];
  for (const c of cases)
    test(`nodePatch() ${c.name}`, () => {
      expect(nodePatch(c.node, c.want)).toEqual(c.patch as ReturnType<typeof nodePatch>);
    });
});

describe("TalosWatchCache", () => {
  const needs = { systemInformation: true, talosVersion: false };

  function setup(opts: { refreshMs?: number; maxStarting?: number; unknown?: Set<string> } = {}) {
    let now = 1_000_000;
    const talos = new FakeTalos();
    const changes: string[] = [];
    // Scheduled work (moving watches to a node's other IP) runs when the test says.
    const scheduled = new Set<() => void>();
    const facts = new TalosWatchCache({
      talos,
      onChange: (n) => changes.push(n),
      refreshMs: opts.refreshMs ?? 60_000,
      tickMs: 3_600_000,
      stallMs: 30_000,
      retryBackoff: { initialMs: 1, maxMs: 1 },
      ...(opts.maxStarting === undefined ? {} : { maxStarting: opts.maxStarting }),
      ...(opts.unknown === undefined
        ? {}
        : { nodeStatusUnknown: (name: string) => (opts.unknown as Set<string>).has(name) }),
      now: () => now,
      schedule: (fn) => {
        scheduled.add(fn);
        return () => scheduled.delete(fn);
      },
    });
    const runScheduled = () => {
      const due = [...scheduled];
      scheduled.clear();
      for (const fn of due) fn();
    };
    return { talos, facts, changes, advance: (ms: number) => (now += ms), runScheduled };
  }

  test("TalosWatchCache builds the facts from one PlatformMetadata read, the address watch's bootstrap contents, one Nodename and one SystemInformation read", async () => {
    const { talos, facts, changes } = setup();
    facts.track("node-1", ["10.0.0.5"]);
    expect(facts.facts("node-1", needs)).toEqual({ ready: false, waitingFor: "Talos on 10.0.0.5 to answer" });
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    const eth0 = address("10.0.0.5/24", "eth0");
    talos
      .stream("10.0.0.5", "addresses")
      .push({ type: "created", id: eth0.id, version: "1", resource: eth0 });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({ ready: false, waitingFor: "its SystemInformation" });
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({
      ready: true,
      nodeIP: "10.0.0.5",
      facts: { platformMetadata: metadata({}), addresses: [eth0], systemInformation: SYSINFO },
    });
    // Complete metadata is not watched: one stream per machine.
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
      "get systeminformation 10.0.0.5",
    ]);
    expect(talos.stream("10.0.0.5", "platformmetadata").active).toBe(0);
    expect(changes.length).toBeGreaterThanOrEqual(3);
    facts.close();
  });

  test("TalosWatchCache reports address changes after bootstrap and nothing while re-syncing identical contents", async () => {
    const { talos, facts, changes } = setup();
    facts.track("node-1", ["10.0.0.5"]);
    const s = talos.stream("10.0.0.5", "addresses");
    const eth0 = address("10.0.0.5/24", "eth0");
    s.push({ type: "created", id: eth0.id, version: "1", resource: eth0 });
    s.push({ type: "bootstrapped" });
    await settle();
    changes.length = 0;
    s.push({ type: "created", id: eth0.id, version: "1", resource: { ...eth0 } });
    await settle();
    expect(changes).toEqual([]);
    const pub = address("203.0.113.5/24", "eth1");
    s.push({ type: "created", id: pub.id, version: "1", resource: pub });
    await settle();
    expect(changes).toEqual(["node-1"]);
    facts.close();
  });

  test("TalosWatchCache hands its address watch the node's addresses as the record to report vanished ones from", async () => {
    const { talos, facts } = setup();
    const handlers: Array<TalosWatchHandler<unknown>> = [];
    const subscribe = talos.subscribe;
    talos.subscribe = ((ip: string, kind: string, h: TalosWatchHandler<unknown>) => {
      if (kind === "addresses") handlers.push(h);
      return (subscribe as (...a: unknown[]) => TalosWatch)(ip, kind, h);
    }) as TalosWatchClient["subscribe"];
    facts.track("node-1", ["10.0.0.5"]);
    const s = talos.stream("10.0.0.5", "addresses");
    const eth0 = address("10.0.0.5/24", "eth0");
    const pub = address("203.0.113.5/24", "eth1");
    for (const a of [eth0, pub]) s.push({ type: "created", id: a.id, version: "1", resource: a });
    s.push({ type: "bootstrapped" });
    await settle();
    const record = handlers[0]?.record as ReadonlyMap<string, AddressStatus>;
    expect([...record.values()]).toEqual([eth0, pub]);
    // What the watch reports from it after a resubscribe that no longer lists eth1.
    s.push({ type: "errored", error: "EOF" });
    s.push({ type: "created", id: eth0.id, version: "1", resource: eth0 });
    s.push({ type: "destroyed", id: pub.id, resource: pub });
    s.push({ type: "bootstrapped" });
    await settle();
    expect([...record.values()]).toEqual([eth0]);
    expect(facts.facts("node-1", { systemInformation: false, talosVersion: false })).toMatchObject({
      ready: true,
      facts: { addresses: [eth0] },
    });
    facts.close();
  });

  test("TalosWatchCache marks a failing watch down, polls it only after the refresh period, and recovers", async () => {
    const { talos, facts, changes, advance } = setup({ refreshMs: 60_000 });
    facts.track("node-1", ["10.0.0.5"]);
    await settle();
    changes.length = 0;
    talos.calls.length = 0;
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "node is down" });
    await settle();
    expect(facts.isDown("node-1")).toBe(true);
    expect(facts.facts("node-1", needs)).toEqual({
      ready: false,
      waitingFor: "Talos on 10.0.0.5 to answer",
      error: "node is down",
    });
    expect(changes).toEqual(["node-1"]);
    facts.tick();
    expect(talos.calls).toEqual([]);
    advance(60_000);
    talos.pollAddresses = [address("10.0.0.5/24", "eth0")];
    facts.tick();
    await settle();
    expect(talos.calls.filter((c) => !c.startsWith("watch"))).toEqual([
      "get platformmetadata 10.0.0.5",
      "list addresses 10.0.0.5",
    ]);
    // Polled facts are usable while the watch is still down.
    await settle();
    expect(facts.facts("node-1", { systemInformation: false, talosVersion: false })).toEqual({
      ready: true,
      nodeIP: "10.0.0.5",
      facts: { platformMetadata: metadata({}), addresses: [address("10.0.0.5/24", "eth0")] },
    });
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "2", resource: metadata({}) });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.isDown("node-1")).toBe(false);
    facts.close();
  });

  test("TalosWatchCache counts a down node whose status is unknown apart, and says so to its calls and watches", async () => {
    const unknown = new Set<string>();
    const { talos, facts, advance } = setup({ refreshMs: 60_000, unknown });
    facts.track("node-1", ["10.0.0.5"]);
    facts.track("node-2", ["10.0.0.6"]);
    await settle();
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "node is down" });
    await settle();
    expect(facts.stats()).toEqual({ nodes: 2, down: 1, downStatusUnknown: 0 });
    expect(talos.handlers.get("10.0.0.5|addresses")?.nodeStatusUnknown?.()).toBe(false);
    // Its kubelet fell silent (Kubernetes marked its status Unknown): the machine is likely off.
    unknown.add("node-1");
    expect(facts.stats()).toEqual({ nodes: 2, down: 1, downStatusUnknown: 1 });
    expect(talos.handlers.get("10.0.0.5|addresses")?.nodeStatusUnknown?.()).toBe(true);
    expect(talos.handlers.get("10.0.0.6|addresses")?.nodeStatusUnknown?.()).toBe(false);
    advance(60_000);
    facts.tick();
    await settle();
    expect(talos.addressesOpts).toEqual({ attempts: 1, nodeStatusUnknown: true });
    facts.close();
  });

  test("TalosWatchCache says a silent node's status on every call about it, as its watches move to its other IP", async () => {
    const unknown = new Set(["node-1"]);
    const { talos, facts, runScheduled } = setup({ unknown });
    facts.track("node-1", ["10.0.0.5", "10.0.0.6"]);
    facts.track("node-2", ["10.0.0.7"]);
    await settle();
    facts.facts("node-1", needs);
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "node is down" });
    await settle();
    runScheduled();
    await settle();
    const of = (node: string) => talos.statusOf.filter((c) => c.includes(node));
    expect(of("10.0.0.5").length).toBeGreaterThan(1);
    expect(of("10.0.0.6").length).toBeGreaterThan(0);
    expect([...of("10.0.0.5"), ...of("10.0.0.6")].filter((c) => !c.endsWith(" true"))).toEqual([]);
    expect(of("10.0.0.7").filter((c) => !c.endsWith(" false"))).toEqual([]);
    facts.close();
  });

  test("TalosWatchCache makes no Talos call on a timer while watches are healthy", async () => {
    const { talos, facts, advance } = setup({ refreshMs: 1_000 });
    facts.track("node-1", ["10.0.0.5"]);
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    for (let i = 0; i < 10; i++) {
      advance(1_000);
      facts.tick();
    }
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
    ]);
    facts.close();
  });

  test("TalosWatchCache treats a watch without any answer for the stall time as down", async () => {
    const { facts, advance } = setup();
    facts.track("node-1", ["10.0.0.5"]);
    advance(29_000);
    facts.tick();
    expect(facts.isDown("node-1")).toBe(false);
    advance(1_000);
    facts.tick();
    expect(facts.isDown("node-1")).toBe(true);
    expect(facts.facts("node-1", needs)).toEqual({
      ready: false,
      waitingFor: "Talos on 10.0.0.5 to answer",
      error: "no answer from Talos on 10.0.0.5 for 30 s",
    });
    facts.close();
  });

  /** Nodes node-<i> on 10.0.0.<i>, each confirmed by its Talos. */
  function trackNodes(talos: FakeTalos, facts: TalosWatchCache, ...ids: number[]) {
    for (const i of ids) {
      talos.nodenames.set(`10.0.0.${i}`, `node-${i}`);
      facts.track(`node-${i}`, [`10.0.0.${i}`]);
    }
  }
  const started = (talos: FakeTalos) =>
    talos.calls.filter((c) => c.startsWith("watch addresses")).map((c) => c.slice("watch addresses ".length));
  const queued = (waiting: string): FactsState => ({
    ready: false,
    waitingFor: `its turn to start its Talos watches (${waiting} waiting; 2 start at a time)`,
  });

  test("TalosWatchCache starts at most maxStarting nodes at once; the next, in tracking order, once one is known or down", async () => {
    const { talos, facts } = setup({ maxStarting: 2 });
    trackNodes(talos, facts, 1, 2, 3, 4, 5);
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2"]);
    expect(talos.calls.filter((c) => c.endsWith("10.0.0.3") || c.endsWith("10.0.0.4"))).toEqual([]);
    expect(facts.facts("node-3", needs)).toEqual(queued("3 nodes"));
    expect(facts.facts("node-5", needs)).toEqual(queued("3 nodes"));
    // Its PlatformMetadata alone (read by now) does not make node-1 known: its addresses do.
    expect(talos.calls).toContain("get platformmetadata 10.0.0.1");
    talos.stream("10.0.0.1", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    expect(facts.facts("node-1", { systemInformation: false, talosVersion: false }).ready).toBe(true);
    expect(facts.facts("node-5", needs)).toEqual(queued("2 nodes"));
    // A node whose watch goes down stops counting too.
    talos.stream("10.0.0.2", "addresses").push({ type: "errored", error: "node is down" });
    await settle();
    expect(facts.isDown("node-2")).toBe(true);
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    for (const i of [3, 4]) talos.stream(`10.0.0.${i}`, "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]);
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    for (const i of [1, 3, 4, 5]) {
      expect(facts.facts(`node-${i}`, { systemInformation: false, talosVersion: false }).ready).toBe(true);
    }
    facts.close();
  });

  test("TalosWatchCache forgets a queued node without starting it, and re-tracks one in its place", async () => {
    const { talos, facts } = setup({ maxStarting: 2 });
    trackNodes(talos, facts, 1, 2, 3, 4, 5);
    facts.forget("node-3");
    expect(facts.facts("node-3", needs)).toEqual({ ready: false, waitingFor: "its Talos watches to start" });
    expect(facts.facts("node-4", needs)).toEqual(queued("2 nodes"));
    // New IPs of a queued node: still queued, in its place (it starts before node-5), on them.
    talos.nodenames.set("10.0.0.9", "node-4");
    facts.track("node-4", ["10.0.0.9"]);
    expect(facts.facts("node-4", needs)).toEqual(queued("2 nodes"));
    // New IPs of a started node keep its turn: nothing queued starts.
    talos.nodenames.set("10.0.0.8", "node-1");
    facts.track("node-1", ["10.0.0.8"]);
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.8"]);
    expect(facts.stats()).toEqual({ nodes: 4, down: 0, downStatusUnknown: 0 });
    // node-1's old watch no longer counts: its bootstrap frees nothing; the new one's does.
    talos.stream("10.0.0.1", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.8"]);
    talos.stream("10.0.0.8", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.8", "10.0.0.9"]);
    expect(talos.calls.filter((c) => c.endsWith("10.0.0.3") || c.endsWith("10.0.0.4"))).toEqual([]);
    // Forgetting a starting node gives its turn to the next one.
    facts.forget("node-2");
    await settle();
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.8", "10.0.0.9", "10.0.0.5"]);
    expect(talos.stream("10.0.0.2", "addresses").active).toBe(0);
    facts.close();
  });

  test("TalosWatchCache counts a queued node's stall time from its start, not from when it was queued", async () => {
    const { talos, facts, advance } = setup({ maxStarting: 1 });
    trackNodes(talos, facts, 1, 2, 3);
    advance(29_000);
    facts.tick();
    expect(started(talos)).toEqual(["10.0.0.1"]);
    advance(1_000);
    facts.tick();
    // node-1 stalled: it is down (and polled), and node-2 starts now; node-3, queued as long, waits.
    expect(facts.isDown("node-1")).toBe(true);
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2"]);
    expect(facts.isDown("node-2")).toBe(false);
    expect(facts.isDown("node-3")).toBe(false);
    expect(facts.facts("node-3", needs).ready).toBe(false);
    advance(29_000);
    facts.tick();
    expect(facts.isDown("node-2")).toBe(false);
    advance(1_000);
    facts.tick();
    expect(facts.isDown("node-2")).toBe(true);
    expect(facts.facts("node-2", needs)).toEqual({
      ready: false,
      waitingFor: "Talos on 10.0.0.2 to answer",
      error: "no answer from Talos on 10.0.0.2 for 30 s",
    });
    expect(started(talos)).toEqual(["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    expect(facts.isDown("node-3")).toBe(false);
    facts.close();
  });

  test("TalosWatchCache reads a missing PlatformMetadata as 'not yet' and a node without SystemInformation as none", async () => {
    const { talos, facts } = setup();
    talos.systemInfo = undefined;
    facts.track("node-1", ["10.0.0.5"]);
    talos.stream("10.0.0.5", "platformmetadata").push({ type: "destroyed", id: "platformmetadata" });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({
      ready: false,
      waitingFor: "Talos to publish its PlatformMetadata",
    });
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    await settle();
    facts.facts("node-1", needs);
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({
      ready: true,
      nodeIP: "10.0.0.5",
      facts: { platformMetadata: metadata({}), addresses: [] },
    });
    facts.close();
  });

  test("TalosWatchCache restarts the watches when the node's IPs change and stops them on forget", async () => {
    const { talos, facts } = setup();
    facts.track("node-1", ["10.0.0.5"]);
    facts.track("node-1", ["10.0.0.5"]);
    facts.track("node-1", ["10.0.0.6"]);
    facts.forget("node-1");
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
      "watch addresses 10.0.0.6",
      "get platformmetadata 10.0.0.6",
      "get nodename 10.0.0.6",
    ]);
    expect(facts.stats()).toEqual({ nodes: 0, down: 0, downStatusUnknown: 0 });
    facts.close();
  });

  test("TalosWatchCache moves a dual-stack node's watches to its other IP when the first one fails", async () => {
    const { talos, facts, runScheduled } = setup();
    facts.track("node-1", ["10.0.0.5", "fd00::5"]);
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "unreachable over IPv4" });
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
    ]);
    // After the backoff, the watches move to the other IP.
    runScheduled();
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
      "watch addresses fd00::5",
      "get platformmetadata fd00::5",
      "get nodename fd00::5",
    ]);
    expect(talos.stream("10.0.0.5", "addresses").active).toBe(0);
    talos
      .stream("fd00::5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    talos.stream("fd00::5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.isDown("node-1")).toBe(false);
    expect(facts.facts("node-1", { systemInformation: false, talosVersion: false })).toEqual({
      ready: true,
      nodeIP: "fd00::5",
      facts: { platformMetadata: metadata({}), addresses: [] },
    });
    facts.close();
  });

  test("TalosWatchCache retries a failed SystemInformation read after its backoff, announced by the timer", async () => {
    const { talos, facts, changes, advance } = setup();
    let fail = true;
    talos.systemInformation = (async (ip: string) => {
      talos.calls.push(`get systeminformation ${ip}`);
      if (fail)
        throw new TalosError("unavailable", "Cannot get SystemInformation: unavailable", { retryable: true });
      return SYSINFO;
    }) as TalosWatchClient["systemInformation"];
    facts.track("node-1", ["10.0.0.5"]);
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    facts.facts("node-1", needs);
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({
      ready: false,
      waitingFor: "its SystemInformation",
      error: "Cannot get SystemInformation: unavailable",
    });
    // Asking again before the retry time makes no call.
    expect(talos.calls.filter((c) => c.startsWith("get systeminformation")).length).toBe(1);
    changes.length = 0;
    fail = false;
    advance(10);
    facts.tick();
    expect(changes).toEqual(["node-1"]);
    facts.facts("node-1", needs);
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({ ready: true });
    expect(talos.calls.filter((c) => c.startsWith("get systeminformation")).length).toBe(2);
    facts.close();
  });

  /** Publishes PlatformMetadata on `ip` and delivers an empty address list on its watch. */
  function bootstrapOn(talos: FakeTalos, ip: string, meta = metadata({})) {
    talos
      .stream(ip, "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: meta });
    talos.stream(ip, "addresses").push({ type: "bootstrapped" });
  }
  /** The calls that are reads, without the PlatformMetadata read each start of the watches makes. */
  const reads = (talos: FakeTalos) =>
    talos.calls.filter((c) => c.startsWith("get") && !c.startsWith("get platformmetadata"));
  const bare = { systemInformation: false, talosVersion: false };

  test("TalosWatchCache hands out no facts from an IP whose Talos is another node, and retries with backoff", async () => {
    const { talos, facts, changes, advance } = setup();
    talos.nodenames.set("10.0.0.5", "node-2");
    facts.track("node-1", ["10.0.0.5"]);
    bootstrapOn(talos, "10.0.0.5");
    await settle();
    const refused: FactsState = {
      ready: false,
      waitingFor: "Talos to confirm that the machine on 10.0.0.5 is node node-1",
      mismatch: { ip: "10.0.0.5", nodename: "node-2" },
    };
    expect(facts.facts("node-1", needs)).toEqual(refused);
    await settle();
    expect(facts.facts("node-1", needs)).toEqual(refused);
    // Neither SystemInformation nor another Nodename read before the backoff has passed.
    expect(reads(talos)).toEqual(["get nodename 10.0.0.5"]);
    // The machine is renamed (an honest misconfiguration fixed): the retry, announced by the timer, confirms it.
    talos.nodenames.delete("10.0.0.5");
    changes.length = 0;
    advance(10);
    facts.tick();
    expect(changes).toEqual(["node-1"]);
    facts.facts("node-1", needs);
    await settle();
    facts.facts("node-1", needs);
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({ ready: true, nodeIP: "10.0.0.5" });
    expect(reads(talos)).toEqual([
      "get nodename 10.0.0.5",
      "get nodename 10.0.0.5",
      "get systeminformation 10.0.0.5",
    ]);
    facts.close();
  });

  test("TalosWatchCache waits, with the error, while Talos cannot say which node it is", async () => {
    const { talos, facts } = setup();
    talos.nodenameFails = new TalosNotFoundError("Cannot get Nodenames.kubernetes.talos.dev: not found");
    facts.track("node-1", ["10.0.0.5"]);
    bootstrapOn(talos, "10.0.0.5");
    await settle();
    expect(facts.facts("node-1", bare)).toEqual({
      ready: false,
      waitingFor: "Talos to confirm that the machine on 10.0.0.5 is node node-1",
      error: "Cannot get Nodenames.kubernetes.talos.dev: not found",
    });
    facts.close();
  });

  test("TalosWatchCache moves a node claiming another node's IP to its other IP, where Talos confirms it", async () => {
    const { talos, facts } = setup();
    talos.nodenames.set("10.0.0.9", "node-2");
    talos.metadataOn.set("fd00::5", metadata({ hostname: "own" }));
    facts.track("node-1", ["10.0.0.9", "fd00::5"]);
    bootstrapOn(talos, "10.0.0.9");
    await settle();
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.9",
      "get platformmetadata 10.0.0.9",
      "get nodename 10.0.0.9",
      "watch addresses fd00::5",
      "get platformmetadata fd00::5",
      "get nodename fd00::5",
    ]);
    expect(talos.stream("10.0.0.9", "addresses").active).toBe(0);
    // The other machine's facts are gone with its watches.
    expect(facts.facts("node-1", bare)).toEqual({ ready: false, waitingFor: "Talos on fd00::5 to answer" });
    talos.stream("fd00::5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", bare)).toEqual({
      ready: true,
      nodeIP: "fd00::5",
      facts: { platformMetadata: metadata({ hostname: "own" }), addresses: [] },
    });
    expect(reads(talos)).toEqual(["get nodename 10.0.0.9", "get nodename fd00::5"]);
    facts.close();
  });

  test("TalosWatchCache asks Talos on a node IP the confirmed machine lacks neither to fail over nor to poll", async () => {
    const { talos, facts, advance } = setup({ refreshMs: 1_000 });
    talos.nodenames.set("10.0.0.9", "node-2");
    facts.track("node-1", ["10.0.0.9", "fd00::5"]);
    await settle();
    await settle();
    const own = [address("10.0.0.5/24", "eth0"), address("fd00::5/64", "eth0")];
    talos
      .stream("fd00::5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    for (const a of own)
      talos.stream("fd00::5", "addresses").push({ type: "created", id: a.id, version: "1", resource: a });
    talos.stream("fd00::5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", bare)).toMatchObject({ ready: true, nodeIP: "fd00::5" });
    talos.calls.length = 0;
    talos.stream("fd00::5", "addresses").push({ type: "errored", error: "unreachable over IPv6" });
    await settle();
    await settle();
    expect(facts.isDown("node-1")).toBe(true);
    advance(1_000);
    talos.pollAddresses = own;
    facts.tick();
    await settle();
    // No watch moved to 10.0.0.9, and the poll asked the confirmed IP alone.
    expect(talos.calls).toEqual(["get platformmetadata fd00::5", "list addresses fd00::5"]);
    facts.close();
  });

  test("TalosWatchCache fails over to a node IP once the confirmed machine reports its address", async () => {
    const { talos, facts, runScheduled } = setup();
    facts.track("node-1", ["10.0.0.5", "fd00::5"]);
    const eth0 = address("10.0.0.5/24", "eth0");
    talos
      .stream("10.0.0.5", "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    talos
      .stream("10.0.0.5", "addresses")
      .push({ type: "created", id: eth0.id, version: "1", resource: eth0 });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", bare)).toMatchObject({ ready: true, nodeIP: "10.0.0.5" });
    talos.calls.length = 0;
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "unreachable over IPv4" });
    await settle();
    runScheduled();
    await settle();
    expect(talos.calls).toEqual([]);
    // The IPv6 address comes up after boot: the next failure moves the watches there.
    const v6 = address("fd00::5/64", "eth0");
    talos.stream("10.0.0.5", "addresses").push({ type: "created", id: v6.id, version: "1", resource: v6 });
    await settle();
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "unreachable over IPv4" });
    await settle();
    runScheduled();
    await settle();
    expect(talos.calls).toEqual([
      "watch addresses fd00::5",
      "get platformmetadata fd00::5",
      "get nodename fd00::5",
    ]);
    facts.close();
  });

  test("TalosWatchCache stops after trying each IP once when all lead to other nodes", async () => {
    const { talos, facts, advance } = setup();
    talos.nodenames.set("10.0.0.9", "node-2");
    talos.nodenames.set("fd00::9", "node-3");
    facts.track("node-1", ["10.0.0.9", "fd00::9"]);
    for (let i = 0; i < 5; i++) await settle();
    expect(reads(talos)).toEqual(["get nodename 10.0.0.9", "get nodename fd00::9"]);
    bootstrapOn(talos, "fd00::9");
    await settle();
    expect(facts.facts("node-1", bare)).toMatchObject({
      ready: false,
      mismatch: { ip: "fd00::9", nodename: "node-3" },
    });
    // Retries after the backoff ask the watched IP again; the watches do not switch back and forth.
    const before = talos.calls.length;
    for (let i = 0; i < 3; i++) {
      advance(10);
      facts.facts("node-1", bare);
      await settle();
      await settle();
    }
    expect(talos.calls.slice(before)).toEqual([
      "get nodename fd00::9",
      "get nodename fd00::9",
      "get nodename fd00::9",
    ]);
    expect(facts.facts("node-1", bare)).toMatchObject({ mismatch: { ip: "fd00::9" } });
    facts.close();
  });

  test("sameMachine() compares platform, hostname, instance and provider ID, nothing else", () => {
    const m = metadata({ instanceId: "i-1", providerId: "aws:///z/i-1" });
    expect(sameMachine(m, { ...m })).toBe(true);
    expect(sameMachine(m, { ...m, zone: "other", region: "other", spot: true, tags: { a: "b" } })).toBe(true);
    for (const field of ["platform", "hostname", "instanceId", "providerId"] as const) {
      expect(sameMachine(m, { ...m, [field]: `${m[field]}x` })).toBe(false);
    }
  });

  test("TalosWatchCache confirms the node again when the machine's identity changes, not on other metadata changes", async () => {
    const { talos, facts } = setup();
    facts.track("node-1", ["10.0.0.5"]);
    bootstrapOn(talos, "10.0.0.5", metadata({ instanceId: "i-1" }));
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({ ready: false, waitingFor: "its SystemInformation" });
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({ ready: true });
    // The address watch breaks (a reboot): the metadata is watched until it settles again.
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "error reading from server: EOF" });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    const meta = talos.stream("10.0.0.5", "platformmetadata");
    expect(meta.active).toBe(1);
    meta.push({
      type: "updated",
      id: "platformmetadata",
      version: "2",
      resource: metadata({ instanceId: "i-1", zone: "z" }),
    });
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({ ready: true });
    expect(reads(talos)).toEqual(["get nodename 10.0.0.5", "get systeminformation 10.0.0.5"]);
    // Another machine now answers on the IP.
    talos.nodenames.set("10.0.0.5", "node-2");
    meta.push({
      type: "updated",
      id: "platformmetadata",
      version: "3",
      resource: metadata({ instanceId: "i-2" }),
    });
    await settle();
    expect(facts.facts("node-1", needs)).toMatchObject({
      ready: false,
      mismatch: { ip: "10.0.0.5", nodename: "node-2" },
    });
    expect(reads(talos)).toEqual([
      "get nodename 10.0.0.5",
      "get systeminformation 10.0.0.5",
      "get nodename 10.0.0.5",
    ]);
    facts.close();
  });

  test("TalosWatchCache watches PlatformMetadata only until it is complete and unchanged for the settle time, and again after the address watch broke", async () => {
    const { talos, facts, changes, runScheduled } = setup();
    // hcloud before its metadata service answered: no instance ID yet.
    const early = metadata({ platform: "hcloud", instanceId: "", providerId: "" });
    const known = metadata({ platform: "hcloud", instanceId: "42", providerId: "hcloud://42" });
    talos.metadataOn.set("10.0.0.5", early);
    facts.track("node-1", ["10.0.0.5"]);
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    const meta = talos.stream("10.0.0.5", "platformmetadata");
    expect(meta.active).toBe(1);
    // Incomplete metadata starts no settle time: the watch stays.
    runScheduled();
    expect(meta.active).toBe(1);
    changes.length = 0;
    meta.push({ type: "updated", id: "platformmetadata", version: "2", resource: known });
    await settle();
    // Re-queued (and the machine confirmed again: its identity changed with the instance ID).
    expect(changes).toContain("node-1");
    expect(facts.facts("node-1", bare)).toMatchObject({ ready: true, facts: { platformMetadata: known } });
    expect(meta.active).toBe(1);
    // Complete, and unchanged for the settle time: the watch closes; the facts stay.
    runScheduled();
    expect(meta.active).toBe(0);
    expect(facts.facts("node-1", bare)).toMatchObject({ ready: true, facts: { platformMetadata: known } });
    expect(talos.calls.filter((c) => c.startsWith("watch"))).toEqual([
      "watch addresses 10.0.0.5",
      "watch platformmetadata 10.0.0.5",
    ]);
    // A reboot breaks the address watch; Talos may first publish the previous boot's cached
    // metadata, so it is watched again until it settles.
    const resized = { ...known, instanceType: "cx32" };
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "error reading from server: EOF" });
    await settle();
    expect(meta.active).toBe(0);
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(meta.active).toBe(1);
    meta.push({ type: "updated", id: "platformmetadata", version: "3", resource: resized });
    await settle();
    expect(facts.facts("node-1", bare)).toMatchObject({ facts: { platformMetadata: resized } });
    runScheduled();
    expect(meta.active).toBe(0);
    expect(facts.isDown("node-1")).toBe(false);
    facts.close();
  });

  test("TalosWatchCache watches PlatformMetadata that Talos has not published yet, and when its read fails", async () => {
    const { talos, facts } = setup();
    talos.metadataOn.set("10.0.0.5", null);
    facts.track("node-1", ["10.0.0.5"]);
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(facts.facts("node-1", bare)).toEqual({
      ready: false,
      waitingFor: "Talos to publish its PlatformMetadata",
    });
    expect(talos.stream("10.0.0.5", "platformmetadata").active).toBe(1);
    facts.forget("node-1");
    expect(talos.stream("10.0.0.5", "platformmetadata").active).toBe(0);
    // A read that fails (not a not-found) falls back to the watch, which retries and reports.
    talos.platformMetadata = (async () => {
      throw new TalosError("unavailable", "Cannot get PlatformMetadatas.talos.dev: connection reset", {
        retryable: true,
      });
    }) as TalosWatchClient["platformMetadata"];
    facts.track("node-2", ["10.0.0.6"]);
    await settle();
    expect(talos.stream("10.0.0.6", "platformmetadata").active).toBe(1);
    talos.stream("10.0.0.6", "platformmetadata").push({ type: "errored", error: "connection reset" });
    await settle();
    expect(facts.isDown("node-2")).toBe(true);
    facts.close();
  });

  test("TalosWatchCache falls back to polling when a watch ends on a non-retryable error", async () => {
    const { talos, facts, advance } = setup({ refreshMs: 1_000 });
    facts.track("node-1", ["10.0.0.5"]);
    talos
      .stream("10.0.0.5", "addresses")
      .push(new TalosError("unimplemented", "Cannot watch: unimplemented"));
    await settle();
    expect(facts.isDown("node-1")).toBe(true);
    talos.getFails = new TalosNotFoundError("Cannot get: not found (yet)");
    advance(1_000);
    facts.tick();
    await settle();
    expect(facts.facts("node-1", needs)).toEqual({
      ready: false,
      waitingFor: "Talos on 10.0.0.5 to answer",
      error: "Cannot get: not found (yet)",
    });
    facts.close();
  });
});

// ---------------------------------------------------------------------------------------------
// The controller through reconcile(), against fakes; the resulting Node is compared whole.

/** Applies a JSON patch the way the API server does for the ops nodePatch emits. */
function applyJsonPatch(target: Record<string, unknown>, ops: JsonPatchOp[]): void {
  const segments = (path: string) =>
    path
      .split("/")
      .slice(1)
      .map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
  for (const op of ops) {
    const segs = segments(op.path);
    const last = segs.pop() as string;
    let parent = target as Record<string, unknown>;
    for (const s of segs) parent = parent[s] as Record<string, unknown>;
    if (op.op === "test") {
      const have = parent?.[last] ?? null;
      if (JSON.stringify(have) !== JSON.stringify(op.value))
        throw Object.assign(new Error("test failed"), { status: 422 });
    } else if (op.op === "add") parent[last] = op.value;
    else delete parent[last];
  }
}

function controllerSetup(
  node: LeanNode,
  config: Partial<CompiledConfig> = {},
  more: Partial<ConstructorParameters<typeof CloudNodeController>[0]> = {},
) {
  const handlers: Handlers<LeanNode>[] = [];
  const talos = new FakeTalos();
  const registry = new Registry();
  const store = new Map([[node.metadata.name, structuredClone(node)]]);
  const writes: string[] = [];
  const events: string[] = [];
  const notes: string[] = [];
  let rv = 100;
  const compiled: CompiledConfig = {
    global: {
      clusterName: "",
      preferIPv6: false,
      reconcile: false,
      endpoints: [],
      approveNodeCSR: false,
      skipForeignNode: false,
    } satisfies GlobalConfig,
    transformations: [],
    warnings: [],
    ...config,
  };
  const controller = new CloudNodeController({
    client: {
      patch: async <T>(path: string, body: unknown, type?: string): Promise<T> => {
        writes.push(`${type} ${path}`);
        const n = store.get(decodeURIComponent(path.split("/")[4] as string)) as LeanNode;
        const raw = { metadata: n.metadata, spec: n.spec, status: n.status } as unknown as Record<
          string,
          unknown
        >;
        if (path.endsWith("/status"))
          n.status.addresses = (
            body as { status: { addresses: LeanNode["status"]["addresses"] } }
          ).status.addresses;
        else {
          const copy = structuredClone(raw);
          const spec = copy.spec as Record<string, unknown>;
          if ((spec.taints as unknown[]).length === 0) delete spec.taints;
          applyJsonPatch(copy, body as JsonPatchOp[]);
          const c = copy as unknown as LeanNode;
          n.metadata = {
            ...c.metadata,
            labels: c.metadata.labels ?? {},
            annotations: c.metadata.annotations ?? {},
          };
          n.spec = { ...c.spec, taints: c.spec.taints ?? [] };
        }
        n.metadata.resourceVersion = String(++rv);
        return structuredClone(n) as T;
      },
    },
    nodes: {
      addHandlers: (h) => handlers.push(h),
      get: (name: string) => store.get(name),
      list: () => [...store.values()],
    },
    events: {
      record: async (target, type, reason, _action, note) => {
        events.push(`${type} ${reason} ${target.name}`);
        notes.push(note);
      },
    },
    registry,
    config: { current: compiled, onChange: () => () => {} },
    talos,
    workers: 1,
    statusUpdateFrequencyMs: 60_000,
    ...more,
  });
  return { talos, store, writes, events, notes, controller, registry, handlers };
}

describe("CloudNodeController.reconcile()", () => {
  test("CloudNodeController.reconcile() initializes a node with two writes once its watches bootstrapped", async () => {
    const { talos, store, writes, events, controller } = controllerSetup(lean({}));
    talos.stream("10.0.0.5", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "nocloud", hostname: "node-1", zone: "pve-2" }),
    });
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    const eth0 = address("10.0.0.5/24", "eth0");
    const v6 = address("2001:db8::5/64", "eth0");
    for (const a of [eth0, v6])
      talos.stream("10.0.0.5", "addresses").push({ type: "created", id: a.id, version: "1", resource: a });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(writes).toEqual([
      "application/merge-patch+json /api/v1/nodes/node-1/status",
      "application/json-patch+json /api/v1/nodes/node-1",
    ]);
    expect(events).toEqual(["Normal Synced node-1"]);
    expect(store.get("node-1")).toEqual({
      ...lean({}),
      metadata: {
        ...lean({}).metadata,
        resourceVersion: "102",
        labels: {
          "kubernetes.io/hostname": "node-1",
          "node.cloudprovider.kubernetes.io/platform": "nocloud",
          "node.cloudprovider.kubernetes.io/clustername": "talos-cluster",
          "topology.kubernetes.io/zone": "pve-2",
          "failure-domain.beta.kubernetes.io/zone": "pve-2",
        },
      },
      spec: { taints: [NOT_READY], providerID: "talos://nocloud/10.0.0.5" },
      status: {
        ready: "True",
        addresses: [
          { type: "InternalIP", address: "10.0.0.5" },
          { type: "ExternalIP", address: "2001:db8::5" },
          { type: "Hostname", address: "node-1" },
        ],
      },
    });
    // The cache has not seen our write yet: nothing is done on stale data.
    store.set("node-1", {
      ...(store.get("node-1") as LeanNode),
      metadata: { ...(store.get("node-1") as LeanNode).metadata, resourceVersion: "100" },
    });
    await controller.reconcile("node-1");
    expect(writes.length).toBe(2);
    // Once up to date, a second pass writes nothing.
    store.set("node-1", {
      ...(store.get("node-1") as LeanNode),
      metadata: { ...(store.get("node-1") as LeanNode).metadata, resourceVersion: "103" },
    });
    await controller.reconcile("node-1");
    expect(writes.length).toBe(2);
    // No rule reads SystemInformation: the watches and the Nodename read are all.
    expect(talos.calls).toEqual([
      "watch addresses 10.0.0.5",
      "get platformmetadata 10.0.0.5",
      "get nodename 10.0.0.5",
    ]);
  });

  /** Bootstraps node-1's watches with bare-metal facts. */
  async function bootstrap(talos: FakeTalos) {
    talos.stream("10.0.0.5", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "metal", hostname: "node-1" }),
    });
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
  }

  test("CloudNodeController.reconcile() warns once about a garbled managed record and rewrites it", async () => {
    const node = lean({});
    const garbled = record('{"v":1,"labels":["not a key!"]}');
    Object.assign(node.metadata.annotations, garbled.annotation);
    Object.assign(node.metadata.labels, garbled.label);
    const { talos, store, events, controller } = controllerSetup(node);
    await controller.reconcile("node-1");
    await bootstrap(talos);
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning InvalidManagedRecord node-1", "Normal Synced node-1"]);
    expect(store.get("node-1")?.metadata.annotations[MANAGED_ANNOTATION]).toBeUndefined();
    expect(store.get("node-1")?.metadata.labels[MANAGED_DIGEST_LABEL]).toBeUndefined();
  });

  test("CloudNodeController.reconcile() removes nothing a forged record names, warns, and signs the rebuilt record", async () => {
    // The node's kubelet wrote a record naming an admin's taint and a node-restriction label.
    const node = lean({
      taints: [NOT_READY, { key: "dedicated", value: "secure", effect: "NoSchedule" }],
      providerID: "talos://metal/10.0.0.5",
      labels: { "kubernetes.io/hostname": "node-1", "node-restriction.kubernetes.io/pool": "secure" },
      annotations: {
        [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
        [MANAGED_ANNOTATION]:
          '{"v":1,"labels":["node-restriction.kubernetes.io/pool"],"taints":["dedicated:NoSchedule"]}',
      },
    });
    const { talos, store, events, controller } = controllerSetup(node, {
      global: {
        clusterName: "",
        preferIPv6: false,
        reconcile: true,
        endpoints: [],
        approveNodeCSR: false,
        skipForeignNode: false,
      },
      transformations: [rule({ labels: [entry("example.com/tier", "web")] })],
    });
    await controller.reconcile("node-1");
    await bootstrap(talos);
    // The first pass starts the one-off reads the facts still lack; the second writes.
    await controller.reconcile("node-1");
    await settle();
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning UntrustedManagedRecord node-1"]);
    const after = store.get("node-1") as LeanNode;
    expect(after.spec.taints).toEqual(node.spec.taints);
    expect(after.metadata.labels).toEqual({
      "kubernetes.io/hostname": "node-1",
      "node-restriction.kubernetes.io/pool": "secure",
      "node.cloudprovider.kubernetes.io/platform": "metal",
      "node.cloudprovider.kubernetes.io/clustername": "talos-cluster",
      "example.com/tier": "web",
      ...record('{"v":1,"labels":["example.com/tier"]}').label,
    });
    expect(after.metadata.annotations[MANAGED_ANNOTATION]).toBe('{"v":1,"labels":["example.com/tier"]}');
    // The rebuilt record is believed: a later pass neither warns nor writes.
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning UntrustedManagedRecord node-1"]);
  });

  test("CloudNodeController.reconcile() does not warn about the record of a foreign node it skips", async () => {
    const node = lean({
      providerID: "aws:///us-east-1a/i-1",
      annotations: {
        [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5",
        [MANAGED_ANNOTATION]: '{"v":1,"labels":["example.com/x"]}',
      },
    });
    const { talos, store, events, controller } = controllerSetup(node, {
      global: {
        clusterName: "",
        preferIPv6: false,
        reconcile: true,
        endpoints: [],
        approveNodeCSR: false,
        skipForeignNode: true,
      },
    });
    for (let i = 0; i < 3; i++) {
      await controller.reconcile("node-1");
      if (i === 0) await bootstrap(talos);
      await settle();
    }
    // It was reconciled (addresses written, taint gone), and its record is not ours to judge.
    expect(store.get("node-1")?.spec.taints).toEqual([NOT_READY]);
    expect(events.filter((e) => e.includes("ManagedRecord"))).toEqual([]);
    expect(store.get("node-1")?.metadata.annotations[MANAGED_ANNOTATION]).toBe(
      '{"v":1,"labels":["example.com/x"]}',
    );
  });

  test("CloudNodeController.reconcile() leaves a node whose IP leads to another node tainted, with an Event and a metric", async () => {
    const { talos, store, writes, events, controller, registry } = controllerSetup(lean({}));
    talos.nodenames.set("10.0.0.5", "node-2");
    await controller.reconcile("node-1");
    await bootstrap(talos);
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning TalosNodeMismatch node-1"]);
    expect(store.get("node-1")?.spec.taints).toEqual([UNINIT, NOT_READY]);
    expect(registry.expose()).toContain('talosccm_node_initialization_errors_total{reason="identity"} 1');
  });

  test("CloudNodeController.reconcile() keeps an initialized node as it is when its IP now leads to another node", async () => {
    const node = lean({
      taints: [NOT_READY],
      providerID: "talos://metal/10.0.0.5",
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.7" },
    });
    const { talos, store, writes, events, controller, registry } = controllerSetup(node);
    talos.nodenames.set("10.0.0.7", "node-2");
    await controller.reconcile("node-1");
    talos.stream("10.0.0.7", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "nocloud", hostname: "node-2", zone: "elsewhere" }),
    });
    talos.stream("10.0.0.7", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning TalosNodeMismatch node-1"]);
    expect(store.get("node-1")).toEqual(node);
    expect(registry.expose()).not.toContain('reason="identity"');
  });

  /** Delivers PlatformMetadata and these addresses on `ip`'s watches. */
  async function bootstrapWith(talos: FakeTalos, ip: string, addresses: AddressStatus[]) {
    talos.stream(ip, "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "metal", hostname: "node-1" }),
    });
    for (const a of addresses)
      talos.stream(ip, "addresses").push({ type: "created", id: a.id, version: "1", resource: a });
    talos.stream(ip, "addresses").push({ type: "bootstrapped" });
    await settle();
  }
  const REJECTED = 'talosccm_node_ips_rejected_total{reason="not_on_machine"}';
  const dualStack = (annotation: string, ips: string[]) =>
    lean({
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: annotation },
      addresses: [
        ...ips.map((address) => ({ type: "InternalIP", address })),
        { type: "Hostname", address: "node-1" },
      ],
    });

  test("CloudNodeController.reconcile() initializes a node claiming another node's IPv4 from its own IPv6 alone, with one Event and one count", async () => {
    const { talos, store, events, controller, registry } = controllerSetup(
      dualStack("10.0.0.9,fd00::5", ["10.0.0.9", "fd00::5"]),
    );
    talos.nodenames.set("10.0.0.9", "node-2");
    await controller.reconcile("node-1");
    // Talos on 10.0.0.9 names node-2: the watches move to fd00::5, where the machine is node-1.
    await settle();
    await settle();
    await bootstrapWith(talos, "fd00::5", [address("10.0.0.5/24", "eth0"), address("fd00::5/64", "eth0")]);
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning NodeIPNotOnMachine node-1", "Normal Synced node-1"]);
    const after = store.get("node-1") as LeanNode;
    expect(after.spec).toEqual({ taints: [NOT_READY], providerID: "talos://metal/fd00::5" });
    expect(after.status.addresses).toEqual([
      { type: "InternalIP", address: "fd00::5" },
      { type: "Hostname", address: "node-1" },
    ]);
    expect(registry.expose()).toContain(`${REJECTED} 1`);
    // Later passes leave it out without a new Event or count.
    await controller.reconcile("node-1");
    expect(events.length).toBe(2);
    expect(registry.expose()).toContain(`${REJECTED} 1`);
    // The one probe that found node-2 there is all Talos was asked on the claimed IP.
    expect(talos.calls.filter((c) => c.includes("10.0.0.9"))).toEqual([
      "watch addresses 10.0.0.9",
      "get platformmetadata 10.0.0.9",
      "get nodename 10.0.0.9",
    ]);
  });

  test("CloudNodeController.reconcile() writes a node IP once the machine reports its address, and reports it again when it goes", async () => {
    const { talos, store, events, controller, registry } = controllerSetup(
      dualStack("10.0.0.5,fd00::5", ["10.0.0.5", "fd00::5"]),
    );
    await controller.reconcile("node-1");
    await bootstrapWith(talos, "10.0.0.5", [address("10.0.0.5/24", "eth0")]);
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning NodeIPNotOnMachine node-1", "Normal Synced node-1"]);
    expect(store.get("node-1")?.status.addresses).toEqual([
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "Hostname", address: "node-1" },
    ]);
    const v6 = address("fd00::5/64", "eth0");
    talos.stream("10.0.0.5", "addresses").push({ type: "created", id: v6.id, version: "1", resource: v6 });
    await settle();
    await controller.reconcile("node-1");
    expect(store.get("node-1")?.status.addresses).toEqual([
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "InternalIP", address: "fd00::5" },
      { type: "Hostname", address: "node-1" },
    ]);
    expect(events.length).toBe(2);
    expect(registry.expose()).toContain(`${REJECTED} 1`);
    talos.stream("10.0.0.5", "addresses").push({ type: "destroyed", id: v6.id });
    await settle();
    await controller.reconcile("node-1");
    expect(store.get("node-1")?.status.addresses).toEqual([
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "Hostname", address: "node-1" },
    ]);
    expect(events).toEqual([
      "Warning NodeIPNotOnMachine node-1",
      "Normal Synced node-1",
      "Warning NodeIPNotOnMachine node-1",
    ]);
    expect(registry.expose()).toContain(`${REJECTED} 2`);
  });

  test("CloudNodeController.reconcile() leaves a node whose Talos is down tainted, with a Warning Event", async () => {
    const { talos, store, writes, events, controller } = controllerSetup(lean({}));
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "errored", error: "connection refused" });
    await settle();
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning TalosAPIError node-1"]);
    expect(store.get("node-1")?.spec.taints).toEqual([UNINIT, NOT_READY]);
  });

  test("CloudNodeController.reconcile() records an Event for a node without any IP and writes nothing", async () => {
    const { writes, events, controller, talos } = controllerSetup(
      lean({ annotations: {}, addresses: [{ type: "Hostname", address: "node-1" }] }),
    );
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning NodeIPUnknown node-1"]);
    expect(talos.calls).toEqual([]);
  });

  test("CloudNodeController.reconcile() of a deleted node stops its watches", async () => {
    const { store, controller, talos } = controllerSetup(lean({}));
    await controller.reconcile("node-1");
    await settle();
    expect(talos.stream("10.0.0.5", "addresses").active).toBe(1);
    store.clear();
    await controller.reconcile("node-1");
    await settle();
    expect(talos.stream("10.0.0.5", "addresses").active).toBe(0);
  });

  /** Pushes node-1's PlatformMetadata (a created or updated event) and lets the watch cache take it. */
  async function platform(talos: FakeTalos, meta: Partial<PlatformMetadata>, version = "1") {
    talos.stream("10.0.0.5", "platformmetadata").push({
      type: version === "1" ? "created" : "updated",
      id: "platformmetadata",
      version,
      resource: metadata({ hostname: "node-1", ...meta }),
    });
    await settle();
  }

  /** Lets the controller see its own writes, as the informer would (a new resourceVersion). */
  function informerCatchesUp(store: Map<string, LeanNode>) {
    const n = store.get("node-1") as LeanNode;
    n.metadata.resourceVersion = String(Number(n.metadata.resourceVersion) + 1000);
  }

  const WAITING = "talosccm_nodes_waiting_for_instance_id";

  test("CloudNodeController.reconcile() leaves a node tainted while its hcloud PlatformMetadata has no instance ID, then initializes it with hcloud://<id>", async () => {
    const { talos, store, writes, events, controller, registry } = controllerSetup(lean({}));
    await platform(talos, { platform: "hcloud" });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning WaitingForInstanceID node-1", "Warning WaitingForInstanceID node-1"]);
    expect(store.get("node-1")?.spec).toEqual({ taints: [UNINIT, NOT_READY] });
    expect(registry.expose()).toContain('talosccm_node_initialization_errors_total{reason="instance_id"} 2');
    expect(registry.expose()).toContain(`${WAITING} 1`);
    expect(registry.expose()).toContain("\ntalosccm_nodes_uninitialized 1\n");

    await platform(
      talos,
      { platform: "hcloud", instanceId: "51234567", providerId: "hcloud://51234567" },
      "2",
    );
    await controller.reconcile("node-1");
    expect(store.get("node-1")?.spec).toEqual({ taints: [NOT_READY], providerID: "hcloud://51234567" });
    expect(events.at(-1)).toBe("Normal Synced node-1");
    expect(registry.expose()).toContain(`${WAITING} 0`);
    expect(registry.expose()).toContain("\ntalosccm_nodes_uninitialized 0\n");
    // The instance ID is part of the machine's identity: Talos confirmed the node again.
    expect(talos.calls.filter((c) => c.startsWith("get nodename"))).toEqual([
      "get nodename 10.0.0.5",
      "get nodename 10.0.0.5",
    ]);
  });

  test("CloudNodeController.reconcile() waits on Talos's half-built `hcloud://` (instance-id answered empty)", async () => {
    const { talos, store, writes, events, controller } = controllerSetup(lean({}));
    await platform(talos, { platform: "hcloud", providerId: "hcloud://" });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(writes).toEqual([]);
    expect(events).toEqual(["Warning WaitingForInstanceID node-1"]);
    expect(store.get("node-1")?.spec.providerID).toBeUndefined();
  });

  test("CloudNodeController.reconcile() gives an initialized node without providerID everything but the fallback while it waits", async () => {
    const { talos, store, events, controller } = controllerSetup(lean({ taints: [] }));
    await platform(talos, { platform: "aws", region: "us-east-1" });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(events).toEqual(["Warning WaitingForInstanceID node-1"]);
    expect(store.get("node-1")?.spec.providerID).toBeUndefined();
    expect(store.get("node-1")?.metadata.labels["node.cloudprovider.kubernetes.io/platform"]).toBe("aws");
    informerCatchesUp(store);
    await platform(
      talos,
      { platform: "aws", region: "us-east-1", instanceId: "i-1", providerId: "aws:///us-east-1a/i-1" },
      "2",
    );
    await controller.reconcile("node-1");
    expect(store.get("node-1")?.spec.providerID).toBe("aws:///us-east-1a/i-1");
  });

  test("CloudNodeController.reconcile() initializes a node that has a providerID at once, whatever Talos reports", async () => {
    const { talos, store, events, controller, registry } = controllerSetup(
      lean({ providerID: "hcloud://7" }),
    );
    await platform(talos, { platform: "hcloud" });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(events).toEqual(["Normal Synced node-1"]);
    expect(store.get("node-1")?.spec).toEqual({ taints: [NOT_READY], providerID: "hcloud://7" });
    expect(registry.expose()).toContain(`${WAITING} 0`);
  });

  test("CloudNodeController.reconcile() writes a rule's ProviderID at once on a platform still without its instance ID", async () => {
    const { talos, store, events, controller } = controllerSetup(lean({}), {
      transformations: [
        rule({
          platformMetadata: [{ key: "ProviderID", field: "providerId", value: { source: "hcloud://42" } }],
        }),
      ],
    });
    await platform(talos, { platform: "hcloud" });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    expect(events).toEqual(["Normal Synced node-1"]);
    expect(store.get("node-1")?.spec).toEqual({ taints: [NOT_READY], providerID: "hcloud://42" });
  });

  test("CloudNodeController.reconcile() falls back to talos://metal/<ip> at once on bare metal", async () => {
    const { talos, store, events, controller } = controllerSetup(lean({}));
    await controller.reconcile("node-1");
    await bootstrap(talos);
    await controller.reconcile("node-1");
    expect(events).toEqual(["Normal Synced node-1"]);
    expect(store.get("node-1")?.spec).toEqual({ taints: [NOT_READY], providerID: "talos://metal/10.0.0.5" });
  });
});

describe("CloudNodeController: a second writer of its fields", () => {
  const CONFLICTS = "talosccm_node_conflicting_writes_total";
  /** node-1 initialized by this CCM, then the same Node with its addresses rewritten by `manager`. */
  function rewritten(manager: string, address: string): [LeanNode, LeanNode] {
    const ours = lean({ taints: [NOT_READY] });
    ours.metadata.owners = {
      addresses: { InternalIP: FIELD_MANAGER, Hostname: FIELD_MANAGER },
    };
    const theirs = lean({
      taints: [NOT_READY],
      addresses: [
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "ExternalIP", address },
      ],
    });
    theirs.metadata.owners = {
      addresses: { InternalIP: FIELD_MANAGER, ExternalIP: manager },
    };
    return [ours, theirs];
  }

  /**
   * node-1 with a taint this CCM's rules put there (its signed record names it), then the same Node
   * without it, the taints now owned by `manager`.
   */
  function retainted(manager: string): [LeanNode, LeanNode] {
    const taint = { key: "example.com/storage", value: "ceph", effect: "NoSchedule" };
    const r = record('{"v":1,"taints":["example.com/storage:NoSchedule"]}');
    const ours = lean({
      taints: [NOT_READY, taint],
      labels: { "kubernetes.io/hostname": "node-1", ...r.label },
      annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5", ...r.annotation },
    });
    ours.metadata.owners = { taints: FIELD_MANAGER };
    const theirs = structuredClone(ours);
    theirs.spec.taints = [NOT_READY];
    theirs.metadata.owners = { taints: manager };
    return [ours, theirs];
  }

  /**
   * Initializes node-1 with bare-metal facts (cloud-node then has an address list for it, which a
   * second writer's entries are compared with) and forgets the Events that brought.
   */
  async function initialized(s: ReturnType<typeof controllerSetup>) {
    s.talos.stream("10.0.0.5", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "metal", hostname: "node-1" }),
    });
    await s.controller.reconcile("node-1"); // starts the node's Talos watches
    s.talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await s.controller.reconcile("node-1");
    expect(s.events).toEqual(["Normal Synced node-1"]);
    s.events.length = 0;
    s.notes.length = 0;
  }

  test("CloudNodeController reports another writer of a Node's addresses once per window and counts every write", async () => {
    let now = 1_000_000;
    const setup = controllerSetup(lean({}), {}, { now: () => now, conflictWindowMs: 600_000 });
    const { controller, events, notes, registry, handlers } = setup;
    await initialized(setup);
    const ac = new AbortController();
    const running = controller.run(ac.signal);
    const h = handlers[0] as Handlers<LeanNode>;
    const [ours, theirs] = rewritten("exoscale-cloud-controller-manager", "203.0.113.7");
    h.onUpdate?.(ours, theirs);
    expect(events).toEqual(["Warning ConflictingWriter node-1"]);
    expect(notes[0]).toStartWith(
      'status.addresses (ExternalIP) was changed by field manager "exoscale-cloud-controller-manager" to entries ' +
        "this CCM's list for the node does not have; the Node now lists InternalIP 10.0.0.5, ExternalIP 203.0.113.7.",
    );
    now += 5 * 60_000;
    h.onUpdate?.(ours, theirs);
    now += 4 * 60_000;
    h.onUpdate?.(ours, theirs);
    expect(events).toHaveLength(1);
    expect(registry.expose()).toContain(
      `${CONFLICTS}{field="status.addresses",manager="exoscale-cloud-controller-manager"} 3`,
    );
    // A new window, a new Event.
    now += 60_000;
    h.onUpdate?.(ours, theirs);
    expect(events).toEqual(["Warning ConflictingWriter node-1", "Warning ConflictingWriter node-1"]);
    // Its own writes and other fields are not reported.
    h.onUpdate?.(theirs, ours);
    expect(events).toHaveLength(2);
    ac.abort();
    await running;
  });

  test("CloudNodeController gives the first 16 field managers a label value of their own, later ones other", async () => {
    const setup = controllerSetup(lean({}));
    const { controller, registry, handlers } = setup;
    await initialized(setup);
    const ac = new AbortController();
    const running = controller.run(ac.signal);
    for (let i = 0; i < 20; i++) {
      const [ours, theirs] = rewritten(`writer-${i}`, `203.0.113.${i}`);
      handlers[0]?.onUpdate?.(ours, theirs);
    }
    const text = registry.expose();
    expect(text).toContain(`${CONFLICTS}{field="status.addresses",manager="writer-15"} 1`);
    expect(text).not.toContain("writer-16");
    expect(text).toContain(`${CONFLICTS}{field="status.addresses",manager="other"} 4`);
    ac.abort();
    await running;
  });

  test("CloudNodeController takes a providerID someone sets while it waits for the instance ID as the answer, not a conflict", async () => {
    const { talos, store, events, controller, handlers } = controllerSetup(lean({}));
    const ac = new AbortController();
    const running = controller.run(ac.signal);
    talos.stream("10.0.0.5", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "hcloud" }),
    });
    await controller.reconcile("node-1");
    talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    await controller.reconcile("node-1");
    // (The running workers reconcile the node too, on the watch cache's changes.)
    expect(new Set(events)).toEqual(new Set(["Warning WaitingForInstanceID node-1"]));
    const before = store.get("node-1") as LeanNode;
    const after = structuredClone(before);
    after.spec.providerID = "hcloud://9";
    after.metadata.resourceVersion = "200";
    after.metadata.owners = { providerID: "kubectl-patch" };
    handlers[0]?.onUpdate?.(before, after);
    store.set("node-1", after);
    await controller.reconcile("node-1");
    expect(new Set(events)).toEqual(new Set(["Warning WaitingForInstanceID node-1", "Normal Synced node-1"]));
    expect(store.get("node-1")?.spec).toEqual({ taints: [NOT_READY], providerID: "hcloud://9" });
    ac.abort();
    await running;
  });

  test("correctionDelayMs() corrects at once, then backs a write loop off 1 s doubling to 5 min", () => {
    expect([0, 1, 2, 3, 9, 10, 100].map(correctionDelayMs)).toEqual([
      0, 1000, 2000, 4000, 256_000, 300_000, 300_000,
    ]);
  });

  test("CloudNodeController writes back at once after a writer of every few minutes, and backs off a writer that answers each write-back", async () => {
    let now = 1_000_000;
    const delays: number[] = [];
    const record = (_msg: string, kv?: Record<string, unknown>) => {
      if (kv?.writeBackDelayMs !== undefined) delays.push(kv.writeBackDelayMs as number);
    };
    const log = {
      info: () => {},
      warn: record,
      error: () => {},
      v: () => ({ enabled: true, info: record }),
      with: () => log,
    } as unknown as Logger;
    const setup = controllerSetup(lean({}), {}, { now: () => now, log });
    const { controller, handlers } = setup;
    await initialized(setup);
    delays.length = 0; // what initializing node-1 logged
    const ac = new AbortController();
    const running = controller.run(ac.signal);
    const h = handlers[0] as Handlers<LeanNode>;
    const [ours, theirs] = rewritten("other", "203.0.113.7");
    // Every 5 minutes, as a cloud CCM's node status loop: corrected at once each time.
    for (let i = 0; i < 3; i++) {
      h.onUpdate?.(ours, theirs);
      now += 300_000;
    }
    // Right after each write-back (its delay and a moment): status.addresses is a field the node's own
    // credentials can write under any manager name, so the delay stays at 1 s however long the loop.
    for (let i = 0; i < 12; i++) {
      h.onUpdate?.(ours, theirs);
      now += (delays.at(-1) as number) + 50;
    }
    expect(delays).toEqual([0, 0, 0, 0, ...Array(11).fill(1000)]);
    // spec.taints the node cannot write (NodeRestriction): a loop there backs off 1 s, 2 s, 4 s …
    delays.length = 0;
    now += 3_600_000;
    const [taintsOurs, taintsTheirs] = retainted("other");
    for (let i = 0; i < 5; i++) {
      h.onUpdate?.(taintsOurs, taintsTheirs);
      now += (delays.at(-1) as number) + 50;
    }
    expect(delays).toEqual([0, 1000, 2000, 4000, 8000]);
    ac.abort();
    await running;
  });

  test("writeBackDelayMs() backs off only spec.taints; fields the node can write itself wait at most 1 s", () => {
    for (const streak of [0, 1, 2, 5, 50]) {
      expect(writeBackDelayMs("spec.taints", streak)).toBe(correctionDelayMs(streak));
      for (const field of [
        "status.addresses",
        "metadata.labels",
        "metadata.annotations",
        "spec.providerID",
      ] as const)
        expect(writeBackDelayMs(field, streak)).toBe(Math.min(correctionDelayMs(streak), 1000));
    }
    expect(NODE_WRITABLE_MAX_DELAY_MS).toBe(1000);
  });
});

describe("CloudNodeController: one peer, one budget", () => {
  /** talosccm_node_writes_deferred_total as exposed. */
  const deferredCount = (s: ReturnType<typeof controllerSetup>) =>
    Number(/^talosccm_node_writes_deferred_total (\d+)$/m.exec(s.registry.expose())?.[1] ?? 0);

  /** Pushes node `name`'s platform metadata and a bootstrapped address watch on `ip`, reconciling between. */
  async function initialize(s: ReturnType<typeof controllerSetup>, name: string, ip: string) {
    s.talos.nodenames.set(ip, name);
    s.talos.stream(ip, "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: metadata({ platform: "metal", hostname: name }),
    });
    await s.controller.reconcile(name);
    s.talos.stream(ip, "addresses").push({ type: "bootstrapped" });
    await settle();
    return s.controller.reconcile(name);
  }

  /** Runs `check` until it holds, letting the running workers work (yields, never sleeps). */
  async function until(check: () => boolean) {
    for (let i = 0; i < 1000 && !check(); i++) await settle();
    expect(check()).toBe(true);
  }

  test("CloudNodeController writes a flapping node at most its burst plus one write per pace, and its last state once due; other nodes are not slowed", async () => {
    let now = 1_000_000;
    const s = controllerSetup(lean({}), {}, { now: () => now });
    s.store.set(
      "node-2",
      lean({ name: "node-2", annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.6" } }),
    );
    s.store.get("node-2")?.status.addresses.splice(0, 1, { type: "InternalIP", address: "10.0.0.6" });
    expect(await initialize(s, "node-1", "10.0.0.5")).toBeUndefined();
    expect(s.events).toEqual(["Normal Synced node-1"]);
    // 100 appear/disappear flaps of an address in 2.3 s, each re-queuing the node (as the issue measured).
    const flap = address("2001:db8::9/64", "eth0");
    const start = now;
    const deferred: number[] = [];
    for (let i = 0; i < 100; i++) {
      s.talos.stream("10.0.0.5", "addresses").push({
        type: i % 2 === 0 ? "created" : "destroyed",
        id: flap.id,
        version: String(i + 2),
        resource: flap,
      });
      await settle();
      now += 23;
      const r = await s.controller.reconcile("node-1");
      if (r?.requeueAfterMs !== undefined) deferred.push(r.requeueAfterMs);
    }
    const node1Writes = () => s.writes.filter((w) => w.includes("/nodes/node-1")).length;
    const elapsed = now - start;
    expect(node1Writes()).toBeLessThanOrEqual(8 + Math.floor(elapsed / 5000));
    // The passes that would have written (about half: every other flap restores what the Node has) waited.
    expect(deferred.length).toBeGreaterThan(40);
    expect(Math.max(...deferred)).toBeLessThanOrEqual(5000);
    expect(s.registry.expose()).toContain("talosccm_node_writes_deferred_total ");
    // One Warning about it in the window, not one per flap.
    expect(s.events.filter((e) => e === "Warning WriteBudgetExceeded node-1")).toHaveLength(1);
    // Another node initializes at once: its own budget is untouched.
    const before = s.writes.length;
    expect(await initialize(s, "node-2", "10.0.0.6")).toBeUndefined();
    expect(s.writes.slice(before)).toEqual(["application/json-patch+json /api/v1/nodes/node-2"]);
    expect(s.events.at(-1)).toBe("Normal Synced node-2");
    // Once its token is due, the flapping node gets one write of its latest state (the address is there: 100 flaps, even).
    now += 5000;
    const writesBefore = node1Writes();
    expect(await s.controller.reconcile("node-1")).toBeUndefined();
    expect(node1Writes() - writesBefore).toBe(1);
    expect(s.store.get("node-1")?.status.addresses.map((a) => a.address)).not.toContain("2001:db8::9");
  });

  test("CloudNodeController does not decide on a node that spent its write budget until a write is due again: its changes meanwhile wait in one queued pass", async () => {
    let now = 1_000_000;
    const s = controllerSetup(lean({}), {}, { now: () => now });
    await initialize(s, "node-1", "10.0.0.5");
    const flap = address("2001:db8::9/64", "eth0");
    const push = (i: number) =>
      s.talos.stream("10.0.0.5", "addresses").push({
        type: i % 2 === 0 ? "created" : "destroyed",
        id: flap.id,
        version: String(i + 2),
        resource: flap,
      });
    // Spend the budget by hand: every pass that writes takes a token, until one waits.
    let i = 0;
    for (; i < 40; i++) {
      push(i);
      await settle();
      const r = await s.controller.reconcile("node-1");
      if (r?.requeueAfterMs !== undefined) break;
    }
    expect(i).toBeLessThan(40);
    // One token comes back and a change takes it: the budget is spent again, with no pass deferred.
    now += 5000;
    i += 2; // the state the deferred pass held (the Node shows the one before it)
    push(i);
    await settle();
    const spending = s.writes.length;
    expect(await s.controller.reconcile("node-1")).toBeUndefined();
    expect(s.writes.length).toBe(spending + 1);
    // Now the workers run: changes of the node (Talos' and the Node's own) queue no pass before the token is due.
    let passes = 0;
    const reconcile = s.controller.reconcile.bind(s.controller);
    s.controller.reconcile = (name: string) => {
      passes++;
      return reconcile(name);
    };
    const ac = new AbortController();
    const running = s.controller.run(ac.signal);
    // The pass the hand-run loop left queued runs first, and waits for the token.
    for (let k = 0; k < 50; k++) await settle();
    expect(passes).toBeLessThanOrEqual(1);
    passes = 0;
    const writes = s.writes.length;
    const deferredBefore = deferredCount(s);
    for (let k = 1; k <= 20; k++) {
      push(i + k);
      await settle();
    }
    const ours = s.store.get("node-1") as LeanNode;
    const theirs = structuredClone(ours);
    theirs.metadata.resourceVersion = "900";
    theirs.status.addresses = [...ours.status.addresses, { type: "ExternalIP", address: "203.0.113.7" }];
    s.store.set("node-1", theirs);
    s.handlers[0]?.onUpdate?.(ours, theirs);
    for (let k = 0; k < 50; k++) await settle();
    expect(passes).toBe(0);
    expect(s.writes.length).toBe(writes);
    // Held, not lost: counted once for the held pass (the changes after it join it), and the one Warning of the window.
    expect(deferredCount(s) - deferredBefore).toBe(1);
    expect(s.events.filter((e) => e === "Warning WriteBudgetExceeded node-1")).toHaveLength(1);
    // A node with tokens left is decided on at once.
    s.store.set(
      "node-2",
      lean({ name: "node-2", annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.6" } }),
    );
    s.handlers[0]?.onAdd?.(s.store.get("node-2") as LeanNode);
    await until(() => passes > 0);
    ac.abort();
    await running;
  });

  test("CloudNodeController corrects a false InternalIP next to an address type named like a built-in member (the issue's attack)", async () => {
    for (const type of ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"]) {
      const s = controllerSetup(lean({}));
      await initialize(s, "node-1", "10.0.0.5");
      const ac = new AbortController();
      const running = s.controller.run(ac.signal);
      const ours = s.store.get("node-1") as LeanNode;
      // As the informer would cache the kubelet's write: decoded JSON, then the Node view.
      const raw = JSON.parse(
        JSON.stringify({
          metadata: {
            ...ours.metadata,
            resourceVersion: "300",
            managedFields: [
              {
                manager: "kubelet",
                operation: "Update",
                subresource: "status",
                fieldsType: "FieldsV1",
                fieldsV1: {
                  "f:status": { "f:addresses": { 'k:{"type":"InternalIP"}': { "f:address": {} } } },
                },
              },
            ],
          },
          spec: ours.spec,
          status: {
            addresses: [
              { type: "InternalIP", address: "10.0.0.99" },
              { type, address: "x" },
              { type: "Hostname", address: "node-1" },
            ],
          },
        }),
      );
      const theirs = leanNode(raw);
      s.store.set("node-1", theirs);
      expect(() => s.handlers[0]?.onUpdate?.(ours, theirs)).not.toThrow();
      await until(() => s.store.get("node-1")?.status.addresses[0]?.address === "10.0.0.5");
      expect(s.store.get("node-1")?.status.addresses).toEqual([
        { type: "InternalIP", address: "10.0.0.5" },
        { type: "Hostname", address: "node-1" },
      ]);
      ac.abort();
      await running;
    }
  });

  test("CloudNodeController queues a node whose update handler fails, and counts the error", async () => {
    const s = controllerSetup(lean({}));
    await initialize(s, "node-1", "10.0.0.5");
    const ac = new AbortController();
    const running = s.controller.run(ac.signal);
    const ours = s.store.get("node-1") as LeanNode;
    const theirs = structuredClone(ours);
    theirs.metadata.resourceVersion = "300";
    theirs.status.addresses = [
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "ExternalIP", address: "203.0.113.7" },
    ];
    // An owners summary whose reading throws: a getter, as a hostile or broken summary could.
    theirs.metadata.owners = {
      get addresses(): Record<string, string> {
        throw new Error("broken owners");
      },
    };
    s.store.set("node-1", theirs);
    expect(() => s.handlers[0]?.onUpdate?.(ours, theirs)).not.toThrow();
    expect(s.registry.expose()).toContain(
      'talosccm_informer_handler_errors_total{controller="cloud-node"} 1',
    );
    await until(
      () =>
        s.store.get("node-1")?.status.addresses.length === 2 &&
        s.store.get("node-1")?.status.addresses[1]?.type === "Hostname",
    );
    ac.abort();
    await running;
  });

  test("CloudNodeController does not reconcile a Node over a per-peer bound: it stays tainted, with one PeerInputOverLimit Event per window and a count", async () => {
    let now = 1_000_000;
    const labels = Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [`example.com/k${i}`, "v"]));
    const raw = {
      metadata: {
        name: "node-1",
        uid: "uid-node-1",
        resourceVersion: "100",
        labels,
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
      },
      spec: { taints: [UNINIT] },
      status: { addresses: [{ type: "InternalIP", address: "10.0.0.5" }] },
    };
    const s = controllerSetup(leanNode(raw), {}, { now: () => now });
    expect(s.store.get("node-1")?.metadata.overLimit).toEqual({ limit: "node_labels", got: 1025 });
    for (let i = 0; i < 3; i++) {
      await initialize(s, "node-1", "10.0.0.5");
      now += 1000;
    }
    expect(s.writes).toEqual([]);
    expect(s.events).toEqual(["Warning PeerInputOverLimit node-1"]);
    expect(s.notes[0]).toStartWith("The Node has 1025 labels of one Node, over the bound of 1024");
    expect(s.registry.expose()).toContain(
      'talosccm_peer_input_rejected_total{peer="node",limit="node_labels"} 6',
    );
    expect(s.store.get("node-1")?.spec.taints).toEqual([UNINIT]);
    // Its Talos is not asked while it is over the bound.
    expect(s.talos.calls.filter((c) => c.startsWith("watch"))).toEqual([]);
  });
});

describe("a rule's taint that fails to render (fail closed at initialization)", () => {
  // `{{ .Zone }}` alone makes the zone the taint's effect: "eu-1a" is no effect.
  const rules = parseConfig(`transformations:
  - name: zoned
    labels:
      example.com/tier: web
    taints:
      example.com/zone: "{{ .Zone }}"
`).transformations;
  const facts: NodeFacts = {
    platformMetadata: metadata({ platform: "metal", hostname: "node-1", zone: "eu-1a" }),
    addresses: [address("10.0.0.5/24", "eth0")],
  };

  test("decideNode holds an initializing node: it stays tainted, and nothing is written", () => {
    const d = decide(lean({}), facts, rules);
    expect(d).toMatchObject({ hold: true, taintsFailed: true });
    expect(d.rules.errors.map((e) => [e.field, e.key])).toEqual([["taints", "example.com/zone"]]);
  });

  test("an initialized node is not held: the rule's other outputs apply, the taint stays as the node has it", () => {
    const d = decide(lean({ taints: [NOT_READY] }), facts, rules);
    expect(d).toMatchObject({ hold: false, taintsFailed: false });
    expect(d.want.labels["example.com/tier"]).toBe("web");
    expect(d.want.taints).toEqual([NOT_READY]);
  });

  test("the controller writes nothing to the initializing node and says why in a TransformerError Event", async () => {
    const s = controllerSetup(lean({}), { transformations: rules });
    s.talos.nodenames.set("10.0.0.5", "node-1");
    s.talos.stream("10.0.0.5", "platformmetadata").push({
      type: "created",
      id: "platformmetadata",
      version: "1",
      resource: facts.platformMetadata,
    });
    await s.controller.reconcile("node-1");
    s.talos.stream("10.0.0.5", "addresses").push({ type: "bootstrapped" });
    await settle();
    expect(await s.controller.reconcile("node-1")).toBeUndefined();
    expect(s.writes).toEqual([]);
    expect(s.store.get("node-1")?.spec.taints).toContainEqual(UNINIT);
    expect(s.events).toContain("Warning TransformerError node-1");
    expect(s.notes.find((n) => n.includes('taints["example.com/zone"]'))).toContain(
      "the node stays tainted (uninitialized) until every taint of its rules renders",
    );
  });
});
