import { describe, expect, test } from "bun:test";
import { leanNode, nodeOverLimit, statusUnknown } from "../../lib/nodeview.ts";
import { StringPool } from "../../lib/stringpool.ts";

/** A Node as the API returns it, with the labels, annotations and addresses a kubelet and this CCM write. */
function rawNode(name: string, ip: string, zone: string) {
  return {
    metadata: {
      name,
      labels: {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": zone,
      },
      annotations: {
        "alpha.kubernetes.io/provided-node-ip": ip,
        "node.alpha.kubernetes.io/ttl": "0",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
      },
    },
    status: {
      addresses: [
        { type: "InternalIP", address: ip },
        { type: "Hostname", address: name },
      ],
    },
  };
}

describe("leanNode() shares the strings Nodes repeat", () => {
  test("keeps every label, annotation (but the dropped ones) and address as the API gave them", () => {
    const raw = rawNode("nv-keep", "10.9.0.1", "zone-keep");
    const lean = leanNode(raw);
    expect(lean.metadata.labels).toEqual(raw.metadata.labels);
    expect(lean.metadata.annotations).toEqual({
      "alpha.kubernetes.io/provided-node-ip": "10.9.0.1",
      "node.alpha.kubernetes.io/ttl": "0",
    });
    expect(lean.status.addresses).toEqual(raw.status.addresses);
    // The cached view is a copy: changing it leaves the API object alone, and the other way round.
    expect(lean.metadata.labels).not.toBe(raw.metadata.labels);
    expect(lean.status.addresses).not.toBe(raw.status.addresses);
  });

  test("a value many Nodes share is kept once; a Node's own name is not kept", () => {
    const pool = new StringPool(1024);
    leanNode(rawNode("nv-warm", "10.9.1.1", "zone-shared"), pool);
    const before = pool.size;
    for (let i = 2; i < 50; i++) leanNode(rawNode(`nv-${i}`, `10.9.1.${i}`, "zone-shared"), pool);
    // Per Node only its provided IP is new (arch, os, zone, ttl and the address types are kept
    // already); its name, in the hostname label and the Hostname address, never is.
    expect(pool.size - before).toBe(48);
    // amd64, linux, zone-shared, 0, InternalIP, Hostname and the first provided IP.
    expect(before).toBe(7);
  });

  test("malformed labels, annotations and addresses become empty or stay as they were", () => {
    const lean = leanNode({
      metadata: { name: "nv-bad", labels: "a=b", annotations: null },
      status: { addresses: [{ type: 1, address: "x" }, null] },
    });
    expect(lean.metadata.labels).toEqual({});
    expect(lean.metadata.annotations).toEqual({});
    expect(lean.status.addresses).toEqual([{ type: 1, address: "x" }, null] as never);
    expect(
      leanNode({ metadata: { name: "nv-none" }, status: { addresses: "10.0.0.1" } }).status.addresses,
    ).toEqual([]);
  });
});

describe("leanNode() and peer-chosen keys", () => {
  test("keeps labels, annotations and address types named like built-in members as entries", () => {
    const names = ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"];
    const obj = Object.fromEntries(names.map((k) => [k, `v-${k}`]));
    // As the informer decodes it: JSON.parse makes `__proto__` an own member.
    const raw = JSON.parse(
      JSON.stringify({
        metadata: { name: "nv-builtin", labels: obj, annotations: obj },
        status: { addresses: names.map((type) => ({ type, address: "x" })) },
      }),
    );
    const lean = leanNode(raw, new StringPool(16));
    for (const map of [lean.metadata.labels, lean.metadata.annotations]) {
      expect(Object.keys(map).sort()).toEqual([...names].sort());
      for (const k of names) expect(Object.getOwnPropertyDescriptor(map, k)?.value).toBe(`v-${k}`);
    }
    // A key the Node does not have reads as absent, not as an inherited member.
    const bare = leanNode({ metadata: { name: "nv-bare", labels: { a: "b" } } });
    for (const k of names) expect((bare.metadata.labels as Record<string, unknown>)[k]).toBeUndefined();
    expect(lean.status.addresses.map((a) => a.type)).toEqual(names);
  });
});

describe("leanNode() given the cached previous version", () => {
  test("keeps the previous version's labels, annotations, addresses and taints when they did not change", () => {
    const raw = rawNode("nv-prev", "10.9.2.1", "zone-prev");
    const taints = [{ key: "k", effect: "NoSchedule" }];
    const prev = leanNode({ ...raw, spec: { taints } });
    const next = leanNode(structuredClone({ ...raw, spec: { taints } }), undefined, prev);
    expect(next.metadata.labels).toBe(prev.metadata.labels);
    expect(next.metadata.annotations).toBe(prev.metadata.annotations);
    expect(next.status.addresses).toBe(prev.status.addresses);
    expect(next.spec.taints).toBe(prev.spec.taints);
  });

  test("copies what changed, and never takes another Node's", () => {
    const raw = rawNode("nv-chg", "10.9.2.2", "zone-a");
    const prev = leanNode(raw);
    const changed = structuredClone(raw);
    changed.metadata.labels["topology.kubernetes.io/zone"] = "zone-b";
    const next = leanNode(changed, undefined, prev);
    expect(next.metadata.labels).not.toBe(prev.metadata.labels);
    expect(next.metadata.labels["topology.kubernetes.io/zone"]).toBe("zone-b");
    expect(next.metadata.annotations).toBe(prev.metadata.annotations);
    const removed = structuredClone(raw);
    delete (removed.metadata.labels as Record<string, string>)["kubernetes.io/os"];
    expect(Object.keys(leanNode(removed, undefined, prev).metadata.labels)).toHaveLength(3);
    const other = leanNode(
      { ...structuredClone(raw), metadata: { ...raw.metadata, name: "nv-other" } },
      undefined,
      prev,
    );
    expect(other.metadata.labels).not.toBe(prev.metadata.labels);
  });
});

describe("nodeOverLimit()", () => {
  const many = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`example.com/k${i}`, "v"]));
  test("names the first per-peer bound a Node is over, with its count, and nothing at the bound", () => {
    expect(nodeOverLimit({ metadata: { labels: many(1024) } })).toBeUndefined();
    expect(nodeOverLimit({ metadata: { labels: many(1025) } })).toEqual({ limit: "node_labels", got: 1025 });
    const addresses = Array.from({ length: 1025 }, (_, i) => ({
      type: "ExternalIP",
      address: `10.0.${i >> 8}.${i & 255}`,
    }));
    expect(nodeOverLimit({ status: { addresses } })).toEqual({ limit: "node_addresses", got: 1025 });
    expect(nodeOverLimit({ status: { addresses: addresses.slice(1) } })).toBeUndefined();
    const at = { a: "x".repeat(256 * 1024 - 1) };
    expect(nodeOverLimit({ metadata: { annotations: at } })).toBeUndefined();
    expect(nodeOverLimit({ metadata: { annotations: { ...at, b: "" } } })).toEqual({
      limit: "node_annotation_bytes",
      got: 256 * 1024 + 1,
    });
    // UTF-8 bytes, as Kubernetes counts them: 90,000 three-byte characters are 270,000 bytes.
    expect(nodeOverLimit({ metadata: { annotations: { a: "€".repeat(90_000) } } })?.got).toBe(270_001);
  });

  test("leanNode() marks a Node over a bound, keeps it whole for the other controllers, and pools none of its values", () => {
    const pool = new StringPool(4096);
    const labels = Object.fromEntries(Array.from({ length: 1100 }, (_, i) => [`example.com/k${i}`, `v${i}`]));
    const lean = leanNode({ metadata: { name: "nv-big", labels } }, pool);
    expect(lean.metadata.overLimit).toEqual({ limit: "node_labels", got: 1100 });
    expect(Object.keys(lean.metadata.labels)).toHaveLength(1100);
    expect(pool.size).toBe(0);
    expect(leanNode(rawNode("nv-small", "10.9.3.1", "z"), pool).metadata.overLimit).toBeUndefined();
  });
});

describe("statusUnknown()", () => {
  const node = (conditions?: unknown[]) =>
    leanNode({ metadata: { name: "n", uid: "u" }, status: conditions === undefined ? {} : { conditions } });
  const ready = (status: string) => [
    { type: "Ready", status, lastTransitionTime: "2026-11-29T00:00:00Z", reason: "NodeStatusUnknown" },
  ];

  test("a Ready condition of Unknown (a silent kubelet, as Kubernetes' node lifecycle marks it) is unknown", () => {
    expect(statusUnknown(node(ready("Unknown")))).toBe(true);
  });

  test("Ready True or False, or no condition yet (a kubelet that has not posted), is not", () => {
    expect(statusUnknown(node(ready("True")))).toBe(false);
    expect(statusUnknown(node(ready("False")))).toBe(false);
    expect(statusUnknown(node())).toBe(false);
    expect(statusUnknown(node([{ type: "MemoryPressure", status: "Unknown" }]))).toBe(false);
  });
});
