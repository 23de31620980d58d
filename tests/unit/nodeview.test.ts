import { describe, expect, test } from "bun:test";
import { leanNode } from "../../lib/nodeview.ts";
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
