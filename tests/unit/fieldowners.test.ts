import { describe, expect, test } from "bun:test";
import {
  type Address,
  type ConflictingWrite,
  conflictingWrites,
  type FieldOwners,
  fieldOwners,
  type ManagedFieldsEntry,
  type NodeFields,
} from "../../lib/fieldowners.ts";
import { PROGRAM_NAME } from "../../lib/help.ts";
import { FIELD_MANAGER } from "../../lib/wellknown.ts";

const SELF = FIELD_MANAGER;
const ip = (address: string) => ({ type: "InternalIP", address });
const ext = (address: string) => ({ type: "ExternalIP", address });
const host = (address: string) => ({ type: "Hostname", address });

/**
 * A Node's managedFields as kube-apiserver 1.35 recorded them in tests/e2e/conflicting-writer.test.ts,
 * after another client (field manager other-ccm) replaced the addresses with a merge patch of the
 * status and changed one label: it owns the ExternalIP entry's `address`, this CCM still its
 * `type` (the entry has both as owners).
 */
const AFTER_OTHER: ManagedFieldsEntry[] = [
  {
    manager: "other-ccm",
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:metadata": { "f:labels": { "f:node.cloudprovider.kubernetes.io/platform": {} } } },
  },
  {
    manager: SELF,
    operation: "Update",
    subresource: "status",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:status": { "f:addresses": { 'k:{"type":"ExternalIP"}': { ".": {}, "f:type": {} } } } },
  },
  {
    manager: "other-ccm",
    operation: "Update",
    subresource: "status",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:status": { "f:addresses": { 'k:{"type":"ExternalIP"}': { "f:address": {} } } } },
  },
  {
    manager: SELF,
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:metadata": {
        "f:annotations": { ".": {}, "f:alpha.kubernetes.io/provided-node-ip": {} },
        "f:labels": { ".": {}, "f:kubernetes.io/hostname": {}, "f:topology.kubernetes.io/zone": {} },
      },
      "f:spec": { "f:providerID": {}, "f:taints": {} },
    },
  },
];

/**
 * A Node's managedFields as kube-apiserver 1.35 recorded them in tests/e2e/beside-oxide.test.ts
 * while the Oxide CCM's cloud-node controller had just added the instance's two ExternalIPs (a
 * strategic merge patch replacing the list): the kubelet registered the Node with its status (the
 * API server records no owner of a status sent with the create), this CCM's list is the kubelet's,
 * so it owns no address entry; the Oxide CCM owns `k:{"type":"ExternalIP"}` (two entries of one key:
 * an empty set).
 */
const OXIDE_ADDED: ManagedFieldsEntry[] = [
  {
    manager: "kubelet",
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:metadata": {
        "f:annotations": { ".": {}, "f:alpha.kubernetes.io/provided-node-ip": {} },
        "f:labels": { ".": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {} },
      },
    },
  },
  {
    manager: SELF,
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:metadata": { "f:labels": { "f:node.cloudprovider.kubernetes.io/platform": {} } },
      "f:spec": { "f:providerID": {}, "f:taints": {} },
    },
  },
  {
    manager: "oxide-cloud-controller-manager",
    operation: "Update",
    subresource: "status",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:status": { "f:addresses": { 'k:{"type":"ExternalIP"}': {} } } },
  },
];
/** The Oxide node's own addresses (the kubelet's, and this CCM's list for it). */
const OX1 = [ip("172.30.0.5"), host("talos-ox-1")];

describe("fieldOwners()", () => {
  test("fieldOwners() reads who owns each field cloud-node writes, naming the other writer where two share one", () => {
    expect(fieldOwners(AFTER_OTHER, SELF)).toEqual({
      labels: {
        "node.cloudprovider.kubernetes.io/platform": "other-ccm",
        "kubernetes.io/hostname": SELF,
        "topology.kubernetes.io/zone": SELF,
      },
      annotations: { "alpha.kubernetes.io/provided-node-ip": SELF },
      addresses: { ExternalIP: "other-ccm" },
      providerID: SELF,
      taints: SELF,
    });
    // The order of the entries does not matter.
    expect(fieldOwners([...AFTER_OTHER].reverse(), SELF)).toEqual(
      fieldOwners(AFTER_OTHER, SELF) as FieldOwners,
    );
  });

  test("fieldOwners() is undefined without entries and skips entries it cannot read", () => {
    expect(fieldOwners(undefined, SELF)).toBeUndefined();
    expect(fieldOwners([], SELF)).toBeUndefined();
    const odd = [
      { manager: "x", fieldsType: "FieldsV2", fieldsV1: { "f:spec": { "f:providerID": {} } } },
      { fieldsV1: { "f:spec": { "f:providerID": {} } } },
      { manager: "y", fieldsV1: "not an object" },
      {
        manager: "z",
        fieldsV1: { "f:status": { "f:addresses": { "k:{not json": {}, "i:0": {}, ".": {} } } },
      },
      null,
    ] as unknown as ManagedFieldsEntry[];
    expect(fieldOwners(odd, SELF)).toBeUndefined();
  });

  test("fieldOwners() shares one string per manager name across Nodes", () => {
    const a = fieldOwners([{ manager: `${"kube"}let`, fieldsV1: { "f:spec": { "f:taints": {} } } }], SELF);
    const b = fieldOwners(
      [{ manager: ["kub", "elet"].join(""), fieldsV1: { "f:spec": { "f:taints": {} } } }],
      SELF,
    );
    expect(a?.taints).toBe("kubelet");
    expect(b?.taints).toBe("kubelet");
  });

  test("fieldOwners() gives Nodes with the same owners one frozen summary, and others their own", () => {
    const entries = (manager: string) => [
      { manager, fieldsV1: { "f:metadata": { "f:labels": { "f:a": {}, "f:b": {} } } } },
    ];
    const a = fieldOwners(structuredClone(entries("kubelet")), SELF);
    const b = fieldOwners(structuredClone(entries("kubelet")), SELF);
    expect(b).toBe(a as FieldOwners);
    expect(Object.isFrozen(a)).toBe(true);
    expect(Object.isFrozen(a?.labels)).toBe(true);
    const c = fieldOwners(entries("other"), SELF);
    expect(c).not.toBe(a as FieldOwners);
    expect(c).toEqual({ labels: { a: "other", b: "other" } });
  });

  test("fieldOwners() does not keep a summary too large to share (a Node with thousands of label keys)", () => {
    const labels = Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`f:example.com/key-${i}`, {}]));
    const entries = [{ manager: "kubelet", fieldsV1: { "f:metadata": { "f:labels": labels } } }];
    const a = fieldOwners(structuredClone(entries), SELF);
    const b = fieldOwners(structuredClone(entries), SELF);
    expect(Object.keys(a?.labels ?? {})).toHaveLength(500);
    expect(b).toEqual(a as FieldOwners);
    expect(b).not.toBe(a as FieldOwners);
    expect(Object.isFrozen(a)).toBe(false);
  });

  test("FIELD_MANAGER is what the API server records for this CCM's User-Agent (the program's name up to /)", () => {
    expect(FIELD_MANAGER).toBe(PROGRAM_NAME);
  });
});

/** A Node as conflictingWrites() compares it. */
function node(over: {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  providerID?: string;
  taints?: Array<{ key: string; value?: string; effect: string }>;
  addresses?: Array<{ type: string; address: string }>;
  owners?: FieldOwners;
}): NodeFields {
  const n: NodeFields = {
    metadata: { labels: over.labels ?? {}, annotations: over.annotations ?? {} },
    spec: { taints: over.taints ?? [] },
    status: { addresses: over.addresses ?? [ip("10.0.0.5"), host("n1")] },
  };
  if (over.owners) n.metadata.owners = over.owners;
  if (over.providerID !== undefined) n.spec.providerID = over.providerID;
  return n;
}

const OURS = { addresses: { InternalIP: SELF, Hostname: SELF } };
/** cloud-node's address list for the node in most cases: the kubelet's own (node() default). */
const KUBELETS: Address[] = [ip("10.0.0.5"), host("n1")];
const RULE_TAINT = { key: "example.com/storage", value: "ceph", effect: "NoSchedule" };
const NOT_READY = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };

describe("conflictingWrites()", () => {
  const cases: Array<{
    name: string;
    old: NodeFields;
    now: NodeFields;
    managedTaints?: string[];
    /** cloud-node's address list for the node (default {@link KUBELETS}); null: it has none yet. */
    decided?: Address[] | null;
    want: ConflictingWrite[];
  }> = [
    {
      name: "reports address entries another manager changed after this CCM wrote the addresses",
      old: node({ owners: OURS }),
      now: node({
        addresses: [ip("10.0.0.5"), ext("203.0.113.7")],
        owners: {
          addresses: { InternalIP: SELF, ExternalIP: "exoscale-cloud-controller-manager" },
        },
      }),
      want: [
        { field: "status.addresses", keys: ["ExternalIP"], manager: "exoscale-cloud-controller-manager" },
      ],
    },
    {
      name: "reports an entry whose address another manager changed while this CCM still owns its type",
      old: node({
        addresses: [ext("198.51.100.1")],
        owners: { addresses: { ExternalIP: SELF } },
      }),
      now: node({ addresses: [ext("203.0.113.7")], owners: fieldOwners(AFTER_OTHER, SELF) as FieldOwners }),
      decided: [ext("198.51.100.1")],
      want: [{ field: "status.addresses", keys: ["ExternalIP"], manager: "other-ccm" }],
    },
    {
      name: "reports entries a cloud's CCM adds to a list this CCM never owned an entry of (its list is the kubelet's)",
      old: node({ owners: { addresses: { InternalIP: "kubelet", Hostname: "kubelet" } } }),
      now: node({
        addresses: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
        owners: {
          addresses: {
            InternalIP: "kubelet",
            Hostname: "kubelet",
            ExternalIP: "oxide-cloud-controller-manager",
          },
        },
      }),
      want: [{ field: "status.addresses", keys: ["ExternalIP"], manager: "oxide-cloud-controller-manager" }],
    },
    {
      name: "does not report entries another manager added while cloud-node has decided no list for the node yet",
      old: node({ owners: { addresses: { InternalIP: "kubelet", Hostname: "kubelet" } } }),
      now: node({
        addresses: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
        owners: { addresses: { InternalIP: "kubelet", Hostname: "kubelet", ExternalIP: "other-ccm" } },
      }),
      decided: null,
      want: [],
    },
    {
      name: "does not report entries another manager changed to what cloud-node wants (nothing to undo)",
      old: node({ owners: OURS }),
      now: node({
        addresses: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
        owners: { addresses: { ...OURS.addresses, ExternalIP: "other-ccm" } },
      }),
      decided: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
      want: [],
    },
    {
      name: "reports only the types cloud-node is about to change, per owner",
      old: node({ addresses: [ip("10.0.0.5"), host("n1")], owners: OURS }),
      now: node({
        addresses: [ip("10.0.0.5"), ip("192.0.2.9"), ext("203.0.113.7"), host("n1.example")],
        owners: {
          addresses: { InternalIP: "exoscale-ccm", ExternalIP: "exoscale-ccm", Hostname: "other-ccm" },
        },
      }),
      decided: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
      want: [
        { field: "status.addresses", keys: ["InternalIP"], manager: "exoscale-ccm" },
        { field: "status.addresses", keys: ["Hostname"], manager: "other-ccm" },
      ],
    },
    {
      name: "does not report entries nobody owns",
      old: node({ owners: OURS }),
      now: node({ addresses: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")], owners: OURS }),
      want: [],
    },
    {
      name: "does not report the kubelet's own address changes (before or after initialization)",
      old: node({ owners: { addresses: { InternalIP: "kubelet" } } }),
      now: node({ addresses: [ip("10.0.0.6")], owners: { addresses: { InternalIP: "kubelet" } } }),
      want: [],
    },
    {
      name: "does not report its own change",
      old: node({ owners: OURS }),
      now: node({
        addresses: [ip("10.0.0.5"), ext("203.0.113.7"), host("n1")],
        owners: { ...OURS, addresses: { ...OURS.addresses, ExternalIP: SELF } },
      }),
      want: [],
    },
    {
      name: "does not report a removal alone (a removed entry has no owner)",
      old: node({ owners: OURS }),
      now: node({
        addresses: [ip("10.0.0.5")],
        owners: { addresses: { InternalIP: SELF } },
      }),
      want: [],
    },
    {
      name: "reports a label this CCM wrote that another manager changed, once per manager",
      old: node({
        labels: {
          "topology.kubernetes.io/zone": "a",
          "node.cloudprovider.kubernetes.io/platform": "exoscale",
        },
        owners: {
          labels: { "topology.kubernetes.io/zone": SELF, "node.cloudprovider.kubernetes.io/platform": SELF },
        },
      }),
      now: node({
        labels: { "topology.kubernetes.io/zone": "b", "node.cloudprovider.kubernetes.io/platform": "x" },
        owners: {
          labels: {
            "topology.kubernetes.io/zone": "kubectl-label",
            "node.cloudprovider.kubernetes.io/platform": "kubectl-label",
          },
        },
      }),
      want: [
        {
          field: "metadata.labels",
          keys: ["topology.kubernetes.io/zone", "node.cloudprovider.kubernetes.io/platform"],
          manager: "kubectl-label",
        },
      ],
    },
    {
      name: "does not report labels this CCM did not write, nor removed ones",
      old: node({
        labels: { "kubernetes.io/hostname": "n1", "example.com/x": "1" },
        owners: { labels: { "kubernetes.io/hostname": "kubelet", "example.com/x": SELF } },
      }),
      now: node({
        labels: { "kubernetes.io/hostname": "n2" },
        owners: { labels: { "kubernetes.io/hostname": "kubelet" } },
      }),
      want: [],
    },
    {
      name: "reports an annotation this CCM wrote that another manager changed",
      old: node({
        annotations: { "talos.dev/ccm-managed": "{}" },
        owners: { annotations: { "talos.dev/ccm-managed": SELF } },
      }),
      now: node({
        annotations: { "talos.dev/ccm-managed": "{ }" },
        owners: { annotations: { "talos.dev/ccm-managed": "kubelet" } },
      }),
      want: [{ field: "metadata.annotations", keys: ["talos.dev/ccm-managed"], manager: "kubelet" }],
    },
    {
      name: "reports a providerID another manager set",
      old: node({}),
      now: node({ providerID: "exoscale://1", owners: { providerID: "exoscale-cloud-controller-manager" } }),
      want: [
        { field: "spec.providerID", keys: ["exoscale://1"], manager: "exoscale-cloud-controller-manager" },
      ],
    },
    {
      name: "does not report the providerID it set itself",
      old: node({}),
      now: node({ providerID: "talos://metal/10.0.0.5", owners: { providerID: SELF } }),
      want: [],
    },
    {
      name: "reports a rule's taint another manager removed",
      old: node({ taints: [RULE_TAINT, NOT_READY], owners: { taints: SELF } }),
      now: node({ taints: [NOT_READY], owners: { taints: "kubectl-taint" } }),
      managedTaints: ["example.com/storage:NoSchedule"],
      want: [{ field: "spec.taints", keys: ["example.com/storage:NoSchedule"], manager: "kubectl-taint" }],
    },
    {
      name: "reports a rule's taint whose value another manager changed",
      old: node({ taints: [RULE_TAINT], owners: { taints: "kube-controller-manager" } }),
      now: node({ taints: [{ ...RULE_TAINT, value: "nfs" }], owners: { taints: "kubectl-taint" } }),
      managedTaints: ["example.com/storage:NoSchedule"],
      want: [{ field: "spec.taints", keys: ["example.com/storage:NoSchedule"], manager: "kubectl-taint" }],
    },
    {
      name: "does not report taints others add beside the rules' (the node lifecycle's not-ready)",
      old: node({ taints: [RULE_TAINT], owners: { taints: SELF } }),
      now: node({ taints: [RULE_TAINT, NOT_READY], owners: { taints: "kube-controller-manager" } }),
      managedTaints: ["example.com/storage:NoSchedule"],
      want: [],
    },
    {
      name: "does not report taints the rules did not put there",
      old: node({ taints: [RULE_TAINT, NOT_READY], owners: { taints: "kube-controller-manager" } }),
      now: node({ taints: [RULE_TAINT], owners: { taints: "kube-controller-manager" } }),
      managedTaints: ["example.com/storage:NoSchedule"],
      want: [],
    },
  ];
  test("conflictingWrites() reports the Oxide CCM's ExternalIPs on a Node whose addresses this CCM never owned (recorded)", () => {
    const owners = fieldOwners(OXIDE_ADDED, SELF) as FieldOwners;
    expect(owners.addresses).toEqual({ ExternalIP: "oxide-cloud-controller-manager" });
    const before = fieldOwners(OXIDE_ADDED.slice(0, 2), SELF) as FieldOwners;
    const old = node({ addresses: OX1, owners: before });
    const now = node({
      addresses: [...OX1, ext("198.51.100.31"), ext("198.51.100.10")],
      owners,
    });
    expect(conflictingWrites(old, now, SELF, [], OX1)).toEqual([
      { field: "status.addresses", keys: ["ExternalIP"], manager: "oxide-cloud-controller-manager" },
    ]);
    // This CCM's write-back, a removal: nothing to report.
    expect(conflictingWrites(now, old, SELF, [], OX1)).toEqual([]);
  });

  for (const c of cases)
    test(`conflictingWrites() ${c.name}`, () => {
      const decided = c.decided === null ? undefined : (c.decided ?? KUBELETS);
      expect(conflictingWrites(c.old, c.now, SELF, c.managedTaints, decided)).toEqual(c.want);
    });
});

/** Keys that name members every plain object inherits: each is a valid label or annotation key. */
const BUILTIN_NAMES = ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"];

describe("keys that are JavaScript built-in names", () => {
  for (const key of BUILTIN_NAMES) {
    test(`fieldOwners() keeps ${key} as a label, annotation and address type like any other key`, () => {
      const entries: ManagedFieldsEntry[] = [
        {
          manager: "kubelet",
          fieldsV1: {
            "f:metadata": { "f:labels": { [`f:${key}`]: {} }, "f:annotations": { [`f:${key}`]: {} } },
            "f:status": { "f:addresses": { [`k:{"type":${JSON.stringify(key)}}`]: {} } },
          },
        },
      ];
      // JSON.parse, as the informer decodes a Node, makes `__proto__` an own member.
      const owners = fieldOwners(JSON.parse(JSON.stringify(entries)), SELF) as FieldOwners;
      for (const map of [owners.labels, owners.annotations, owners.addresses]) {
        expect(Object.keys(map ?? {})).toEqual([key]);
        expect(Object.getOwnPropertyDescriptor(map, key)?.value).toBe("kubelet");
      }
      // A key nobody owns reads as no owner, not as an inherited member.
      const other = fieldOwners(
        [{ manager: "kubelet", fieldsV1: { "f:metadata": { "f:labels": { "f:a": {} } } } }],
        SELF,
      );
      expect(((other as FieldOwners).labels as Record<string, unknown>)[key]).toBeUndefined();
    });

    test(`conflictingWrites() does not mistake an inherited member for the owner of a ${key} entry`, () => {
      // The attack: the kubelet moves its InternalIP and adds an entry of a built-in type.
      const managed = [
        {
          manager: "kubelet",
          fieldsV1: { "f:status": { "f:addresses": { 'k:{"type":"InternalIP"}': {} } } },
        },
      ];
      const owners = fieldOwners(managed, SELF) as FieldOwners;
      const old = node({ owners });
      const now = node({ addresses: [ip("10.9.9.9"), { type: key, address: "x" }, host("n1")], owners });
      expect(conflictingWrites(old, now, SELF, [], KUBELETS)).toEqual([]);
      // Plain-object owners from elsewhere are read by own entries only.
      const plain = node({
        addresses: [...now.status.addresses],
        owners: { addresses: { InternalIP: "kubelet" } },
      });
      expect(conflictingWrites(old, plain, SELF, [], KUBELETS)).toEqual([]);
    });

    test(`conflictingWrites() reports a ${key} label this CCM wrote that another writer changed`, () => {
      const labels = (v: string) => JSON.parse(`{${JSON.stringify(key)}:${JSON.stringify(v)}}`);
      const old = node({ labels: labels("a"), owners: { labels: labels(SELF) } });
      const now = node({ labels: labels("b"), owners: { labels: labels("other") } });
      expect(conflictingWrites(old, now, SELF)).toEqual([
        { field: "metadata.labels", keys: [key], manager: "other" },
      ]);
      // A label nobody wrote: no owner, nothing reported, nothing thrown.
      expect(conflictingWrites(node({ owners: { labels: {} } }), node({}), SELF)).toEqual([]);
    });
  }
});
