// The node-csr-approval controller against in-memory caches, API and Talos: input assembly from
// the caches, Talos identity confirmation (the answering machine names itself before its addresses
// count), the /approval write and its conflicts, waiting for a Node within the bound, Talos outages
// retried and never skipped, Events and metrics.

import { describe, expect, test } from "bun:test";
import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import { WatchedFacts } from "../../lib/controller.ts";
import {
  APPROVE_REASON,
  claims,
  MAX_REQUEST_BASE64,
  type NodeInput,
  type TalosFacts,
} from "../../lib/csr.ts";
import { CsrApprover, decisionUnits, NODE_WAIT_MS } from "../../lib/csrapprover.ts";
import { NodeClaimIndex } from "../../lib/csrclaims.ts";
import { lookUpServiceNames } from "../../lib/csrservices.ts";
import { type TalosFactsClient, TalosFactsReader, talosDnsNames } from "../../lib/csrtalosfacts.ts";
import { approvalBody, isPending, type LeanCsr, leanCsr, nodePollDelayMs } from "../../lib/csrview.ts";
import { KubeError, type RequestOptions } from "../../lib/kubeapi.ts";
import type { Handlers } from "../../lib/kubecache.ts";
import { Registry } from "../../lib/metrics.ts";
import { type LeanNode, leanNode } from "../../lib/nodeview.ts";
import { ClusterNetworks } from "../../lib/sharedaddresses.ts";
import { TalosError } from "../../lib/talos.ts";
import type { CsrFactsAnswer } from "../../lib/taloswatchcsr.ts";
import type { PlatformMetadata } from "../../lib/types.ts";
import { KUBELET_SERVING_SIGNER } from "../../lib/wellknown.ts";
import { platformMetadata } from "../support/fixtures.ts";
import { createCSR } from "../support/pki.ts";

const T0 = Date.parse("2026-01-01T00:00:00Z");

function rawCsr(name: string, pem: string, over: Partial<V1CertificateSigningRequest["spec"]> = {}) {
  return {
    metadata: { name, uid: `uid-${name}`, resourceVersion: "10", creationTimestamp: "2026-01-01T00:00:00Z" },
    spec: {
      signerName: KUBELET_SERVING_SIGNER,
      username: "system:node:worker-a",
      groups: ["system:nodes", "system:authenticated"],
      usages: ["digital signature", "server auth"],
      request: Buffer.from(pem).toString("base64"),
      ...over,
    },
  };
}

function node(
  name: string,
  ips: string[],
  extra: Array<{ type: string; address: string }> = [],
  annotation = ips.join(","),
): LeanNode {
  return leanNode({
    metadata: {
      name,
      uid: `uid-${name}`,
      annotations: annotation ? { "alpha.kubernetes.io/provided-node-ip": annotation } : {},
    },
    status: {
      addresses: [
        ...ips.map((address) => ({ type: "InternalIP", address })),
        { type: "Hostname", address: name },
        ...extra,
      ],
    },
  });
}

async function pemA(over: { dns?: string[]; ips?: string[] } = {}): Promise<string> {
  return (
    await createCSR({
      cn: "system:node:worker-a",
      o: ["system:nodes"],
      dns: over.dns ?? ["worker-a"],
      ips: over.ips ?? ["10.0.0.1"],
    })
  ).csr;
}

/** An in-memory cache with handlers, as the informers provide. */
class FakeCache<T extends { metadata: { name: string } }> {
  readonly items = new Map<string, T>();
  readonly handlers: Handlers<T>[] = [];
  get(name: string): T | undefined {
    return this.items.get(name);
  }
  list(): T[] {
    return [...this.items.values()];
  }
  addHandlers(h: Handlers<T>): void {
    this.handlers.push(h);
    for (const o of this.items.values()) h.onAdd?.(o);
  }
  put(obj: T): void {
    const old = this.items.get(obj.metadata.name);
    this.items.set(obj.metadata.name, obj);
    for (const h of this.handlers) {
      if (old) h.onUpdate?.(old, obj);
      else h.onAdd?.(obj);
    }
  }
}

interface Machine {
  nodename: string;
  addresses: string[];
  /** The link of an address (default: `lo` for 127.0.0.0/8, else `eth0`). */
  linkOf?: Record<string, string>;
  /** LinkStatuses beyond the defaults `lo` (loopback) and `eth0` (ether). */
  links?: Array<{ name: string; type: number; kind: string }>;
  /** NodeIPConfig excludeSubnets. */
  excludeSubnets?: string[];
  hostname?: { hostname: string; domainname: string };
  metadata?: Partial<PlatformMetadata>;
}

/** Talos: machines by IP; calls are counted; an IP in `down` is unreachable. */
class FakeTalos implements TalosFactsClient {
  readonly machines = new Map<string, Machine>();
  readonly down = new Set<string>();
  readonly calls: string[] = [];
  #machine(ip: string, what: string): Machine {
    this.calls.push(`${what} ${ip}`);
    if (this.down.has(ip))
      throw new TalosError("unavailable", `Cannot ${what} on node ${ip}: unreachable`, { retryable: true });
    const m = this.machines.get(ip);
    if (!m)
      throw new TalosError("unavailable", `Cannot ${what} on node ${ip}: no route`, { retryable: true });
    return m;
  }
  async firstAnswer<T>(ips: readonly string[], fn: (ip: string, o: object) => Promise<T>) {
    let last: unknown;
    for (const nodeIP of ips) {
      try {
        return { nodeIP, value: await fn(nodeIP, {}) };
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }
  async nodename(ip: string) {
    return this.#machine(ip, "nodename").nodename;
  }
  async addresses(ip: string) {
    const m = this.#machine(ip, "addresses");
    const linkOf = (a: string) => m.linkOf?.[a] ?? (a.startsWith("127.") ? "lo" : "eth0");
    return m.addresses.map((address) => ({
      id: `${linkOf(address)}/${address}`,
      address,
      linkName: linkOf(address),
      linkIndex: 2,
      family: address.includes(":") ? ("inet6" as const) : ("inet4" as const),
      scope: 0,
      flags: 0x80,
    }));
  }
  async links(ip: string) {
    const extra = this.#machine(ip, "links").links ?? [];
    return [
      { name: "lo", index: 1, type: 772, kind: "", flags: 0x8, linkState: true },
      { name: "eth0", index: 2, type: 1, kind: "", flags: 0, linkState: true },
      ...extra.map((l, i) => ({ ...l, index: 3 + i, flags: 0, linkState: true })),
    ];
  }
  async nodeIPConfig(ip: string) {
    return { validSubnets: [], excludeSubnets: this.#machine(ip, "nodeIPConfig").excludeSubnets ?? [] };
  }
  async hostname(ip: string) {
    const h = this.#machine(ip, "hostname").hostname ?? { hostname: "", domainname: "" };
    return { ...h, fqdn: h.domainname ? `${h.hostname}.${h.domainname}` : h.hostname };
  }
  async platformMetadata(ip: string) {
    const m = this.#machine(ip, "platformMetadata").metadata ?? {};
    return platformMetadata(m);
  }
}

interface Write {
  path: string;
  body: V1CertificateSigningRequest;
}

/**
 * The API server as CSR-only mode's Service lookups read it: namespaces by name, Services as
 * `namespace/name`; `fail` makes every lookup answer that status.
 */
class FakeServiceApi {
  namespaces = new Set(["default", "kube-system", "vault"]);
  services = ["default/kubernetes", "kube-system/kube-dns", "vault/vault"];
  fail: number | undefined;
  readonly gets: string[] = [];

  async get<T>(path: string, opts: RequestOptions = {}): Promise<T> {
    const selector = String(opts.query?.fieldSelector ?? "");
    this.gets.push(selector ? `${path}?${selector}` : path);
    if (this.fail) throw new KubeError(this.fail, "Forbidden", "services is forbidden");
    const ns = /^\/api\/v1\/namespaces\/([^/]+)$/.exec(path)?.[1];
    if (ns !== undefined) {
      if (!this.namespaces.has(ns)) throw new KubeError(404, "NotFound", `namespaces "${ns}" not found`);
      return { metadata: { resourceVersion: "1" } } as T;
    }
    const name = selector.replace(/^metadata\.name=/, "");
    const items = this.services
      .map((s) => s.split("/") as [string, string])
      .filter(([, n]) => n === name)
      .slice(0, Number(opts.query?.limit ?? 0) || undefined)
      .map(([namespace, n]) => ({ metadata: { namespace, name: n } }));
    return { items } as T;
  }
}

/** The controller wired to fakes, with node A (10.0.0.1) and node B (10.0.0.2) on Talos. */
function setup(
  opts: { talos?: boolean; update?: (w: Write) => void; nodeHandlers?: boolean; watched?: WatchedFacts } = {},
) {
  const csrs = new FakeCache<LeanCsr>();
  const nodes = new FakeCache<LeanNode>();
  const writes: Write[] = [];
  const writeWaiters: Array<(w: Write) => void> = [];
  const events: Array<{ name: string; type: string; reason: string; note: string }> = [];
  const talos = new FakeTalos();
  const api = new FakeServiceApi();
  talos.machines.set("10.0.0.1", {
    nodename: "worker-a",
    addresses: ["10.0.0.1/24", "127.0.0.1/8"],
    hostname: { hostname: "worker-a", domainname: "lan" },
  });
  talos.machines.set("10.0.0.2", { nodename: "worker-b", addresses: ["10.0.0.2/24"] });
  const registry = new Registry();
  const networks = new ClusterNetworks();
  networks.set("servicecidr/kubernetes", "a Service CIDR (ServiceCIDR kubernetes)", {
    cidrs: ["10.96.0.0/12"],
  });
  let now = T0 + 1000;
  const approver = new CsrApprover({
    client: {
      async update<T>(path: string, body: unknown): Promise<T> {
        const w = { path, body: body as V1CertificateSigningRequest };
        opts.update?.(w);
        writes.push(w);
        for (const resolve of writeWaiters.splice(0)) resolve(w);
        return body as T;
      },
    },
    csrs,
    nodes,
    events: {
      async record(target, type, reason, _action, note) {
        events.push({ name: target.name, type, reason, note });
      },
    },
    talos: opts.talos === false ? undefined : talos,
    ...(opts.watched ? { watched: opts.watched } : {}),
    lookUpServices: (q, signal) => lookUpServiceNames(api, q, signal),
    config: { current: { global: { preferIPv6: false } } },
    registry,
    networks,
    now: () => now,
  });
  csrs.addHandlers(approver.csrHandlers);
  if (opts.nodeHandlers !== false) nodes.addHandlers(approver.nodeHandlers);
  return {
    csrs,
    nodes,
    writes,
    events,
    talos,
    api,
    registry,
    networks,
    approver,
    setNow: (t: number) => {
      now = t;
    },
    /** The condition the first /approval write set. */
    decision: () => writes[0]?.body.status?.conditions?.[0],
    /** Resolves with the next /approval write (call before the change that causes it). */
    nextWrite: () => new Promise<Write>((resolve) => writeWaiters.push(resolve)),
    /** Reconciles everything queued, as the workers would. */
    async drain(): Promise<Array<{ name: string; result: unknown }>> {
      const out: Array<{ name: string; result: unknown }> = [];
      while (approver.queue.length > 0) {
        const name = (await approver.queue.get()) as string;
        try {
          out.push({ name, result: await approver.reconcile(name) });
        } finally {
          approver.queue.done(name);
        }
      }
      return out;
    },
  };
}

/**
 * worker-a's Node also claims `ip` as an InternalIP, and worker-a asks for a certificate for its
 * own IP and `ip`: the condition the controller writes.
 */
async function decideExtraIP(f: ReturnType<typeof setup>, ip: string) {
  f.nodes.put(node("worker-a", ["10.0.0.1"], [{ type: "InternalIP", address: ip }]));
  f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips: ["10.0.0.1", ip] }))));
  await f.drain();
  return f.decision();
}

/**
 * Runs `change` inside Talos' first answer (its Nodename call), as a Node event that arrives while
 * Talos answers; counts the answers.
 */
function whileTalosAnswers(f: ReturnType<typeof setup>, change: () => void): { answers: number } {
  const nodename = f.talos.nodename.bind(f.talos);
  const count = { answers: 0 };
  f.talos.nodename = async (ip: string) => {
    if (count.answers++ === 0) change();
    return nodename(ip);
  };
  return count;
}

/** Addresses Talos shows worker-a holds (as `<ip>/32`) but not alone: each denied as SharedIP. */
const SHARED_ON_MACHINE: Array<{ name: string; ip: string; machine: Partial<Machine>; says?: string }> = [
  {
    name: "an address in an IPv4-mapped prefix the machine's NodeIPConfig excludes",
    ip: "10.0.0.100",
    machine: { excludeSubnets: ["::ffff:10.0.0.96/124"] },
    says: "IP SAN 10.0.0.100 is in ::ffff:10.0.0.96/124",
  },
  {
    name: "an address Talos reports on a dummy link (kube-proxy's kube-ipvs0)",
    ip: "10.0.0.50",
    machine: {
      linkOf: { "10.0.0.50/32": "kube-ipvs0" },
      links: [{ name: "kube-ipvs0", type: 1, kind: "dummy" }],
    },
    says: "kube-ipvs0",
  },
  {
    name: "a virtual IP the machine's NodeIPConfig excludes",
    ip: "10.0.0.100",
    machine: { excludeSubnets: ["10.244.0.0/16", "10.96.0.0/12", "10.0.0.100"] },
  },
];

describe("leanCsr()", () => {
  test("leanCsr() keeps what decide() and the /approval write need", () => {
    const lean = leanCsr({ ...rawCsr("csr-1", "PEM"), status: { certificate: "Q0VSVA==" } });
    expect(lean).toEqual({
      metadata: {
        name: "csr-1",
        uid: "uid-csr-1",
        resourceVersion: "10",
        creationTimestamp: "2026-01-01T00:00:00Z",
      },
      csr: {
        name: "csr-1",
        signerName: KUBELET_SERVING_SIGNER,
        username: "system:node:worker-a",
        groups: ["system:nodes", "system:authenticated"],
        usages: ["digital signature", "server auth"],
        request: Buffer.from("PEM").toString("base64"),
        conditions: [],
      },
    });
    expect(isPending(lean)).toBe(true);
  });

  test("leanCsr() keeps of a decided CSR only its name, resourceVersion and condition types", () => {
    const decided = (name: string, type: string) =>
      leanCsr({ ...rawCsr(name, "PEM"), status: { conditions: [{ type, status: "True" }] } });
    const lean = decided("csr-1", "Denied");
    expect(lean.metadata).toEqual({ name: "csr-1", uid: "", resourceVersion: "10", creationTimestamp: "" });
    expect(lean.csr.request).toBe("");
    expect(lean.csr.username).toBe("");
    expect(lean.csr.conditions).toEqual([{ type: "Denied" }]);
    expect(isPending(lean)).toBe(false);
    expect(decided("csr-3", "Approved").csr.conditions).toEqual([{ type: "Approved" }]);
  });

  test("leanCsr() counts conditions it cannot read as a decision: the CSR is left alone", () => {
    for (const conditions of ["Approved", [null], [{}], 7, {}]) {
      const lean = leanCsr({ ...rawCsr("csr-1", "PEM"), status: { conditions } });
      expect(lean.metadata.name).toBe("csr-1");
      expect(isPending(lean)).toBe(false);
    }
    expect(isPending(leanCsr({ ...rawCsr("csr-1", "PEM"), status: { conditions: null } }))).toBe(true);
  });

  test("leanCsr() is total on malformed objects", () => {
    for (const raw of [null, undefined, {}, { metadata: { name: "x" } }, { spec: null }]) {
      const lean = leanCsr(raw);
      expect(lean.csr.request).toBe("");
      expect(isPending(lean)).toBe(false);
    }
  });
});

describe("approvalBody()", () => {
  test("approvalBody() writes one True condition with the decision's reason and message, guarded by uid and resourceVersion", () => {
    const c = leanCsr(rawCsr("csr-1", "PEM"));
    const body = approvalBody(c, { action: "deny", reason: "IPNotOwned", message: "IP SANs ..." });
    expect(body.metadata).toEqual({ name: "csr-1", uid: "uid-csr-1", resourceVersion: "10" });
    expect(body.status?.conditions).toEqual([
      { type: "Denied", status: "True", reason: "IPNotOwned", message: "IP SANs ..." },
    ]);
    expect(body.spec.request).toBe("");
    const ok = approvalBody(c, { action: "approve", reason: APPROVE_REASON, message: "ok" });
    expect(ok.status?.conditions?.[0]?.type).toBe("Approved");
  });
});

describe("talosDnsNames()", () => {
  test("talosDnsNames() lists hostname, FQDN and the metadata names once, without empty ones", () => {
    expect(
      talosDnsNames(
        { hostname: "web-1", fqdn: "web-1.lan" },
        { hostname: "web-1.lan", internalDNS: "web-1.internal", externalDNS: "" },
      ),
    ).toEqual(["web-1", "web-1.lan", "web-1.internal"]);
  });
});

describe("nodePollDelayMs()", () => {
  const rows: Array<[number, number, number]> = [
    [0, NODE_WAIT_MS, 1000],
    [1, NODE_WAIT_MS, 2000],
    [4, NODE_WAIT_MS, 16_000],
    [5, NODE_WAIT_MS, 30_000],
    [60, NODE_WAIT_MS, 30_000],
    [5, 700, 700],
    [0, 0, 1],
  ];
  for (const [looks, left, want] of rows) {
    test(`nodePollDelayMs() waits ${want} ms after ${looks} looks with ${left} ms left`, () => {
      expect(nodePollDelayMs(looks, left)).toBe(want);
    });
  }
});

describe("TalosFactsReader", () => {
  test("TalosFactsReader.read() takes the addresses from the machine that named itself, on the IP it answered", async () => {
    const talos = new FakeTalos();
    talos.machines.set("fd00::1", { nodename: "worker-a", addresses: ["fd00::1/64"] });
    const reader = new TalosFactsReader(talos);
    // IPv4 first (no Talos there), then the IPv6 node IP answers.
    const facts = await reader.read(node("worker-a", ["10.9.9.9", "fd00::1"]), false, false);
    expect(facts).toEqual({
      nodeIP: "fd00::1",
      nodename: "worker-a",
      addresses: ["fd00::1/64"],
      dnsNames: [],
      sharedAddresses: new Map(),
      excludedSubnets: [],
    });
    expect(talos.calls).toEqual([
      "nodename 10.9.9.9",
      "addresses 10.9.9.9",
      "links 10.9.9.9",
      "nodeIPConfig 10.9.9.9",
      "nodename fd00::1",
      "addresses fd00::1",
      "links fd00::1",
      "nodeIPConfig fd00::1",
    ]);
  });

  test("TalosFactsReader.read() reports the name of whatever machine the Node's IP leads to", async () => {
    const talos = new FakeTalos();
    talos.machines.set("10.0.0.2", { nodename: "worker-b", addresses: ["10.0.0.2/24"] });
    const facts = await new TalosFactsReader(talos).read(node("worker-a", ["10.0.0.2"]), false, false);
    expect(facts.nodename).toBe("worker-b");
  });

  test("TalosFactsReader.read() reads DNS names only when asked, and once", async () => {
    const talos = new FakeTalos();
    talos.machines.set("10.0.0.1", {
      nodename: "worker-a",
      addresses: ["10.0.0.1/24"],
      hostname: { hostname: "worker-a", domainname: "lan" },
      metadata: { internalDNS: "worker-a.internal" },
    });
    const reader = new TalosFactsReader(talos, { now: () => T0 });
    const n = node("worker-a", ["10.0.0.1"]);
    expect((await reader.read(n, false, false)).dnsNames).toEqual([]);
    expect((await reader.read(n, false, true)).dnsNames).toEqual([
      "worker-a",
      "worker-a.lan",
      "worker-a.internal",
    ]);
    expect((await reader.read(n, false, true)).dnsNames).toHaveLength(3);
    expect(talos.calls).toEqual([
      "nodename 10.0.0.1",
      "addresses 10.0.0.1",
      "links 10.0.0.1",
      "nodeIPConfig 10.0.0.1",
      "hostname 10.0.0.1",
      "platformMetadata 10.0.0.1",
    ]);
  });

  test("TalosFactsReader.read() reuses facts briefly, and reads again when the Node's IPs change or time passes", async () => {
    const talos = new FakeTalos();
    talos.machines.set("10.0.0.1", { nodename: "worker-a", addresses: ["10.0.0.1/24"] });
    talos.machines.set("10.0.0.2", { nodename: "worker-b", addresses: ["10.0.0.2/24"] });
    let now = T0;
    const reader = new TalosFactsReader(talos, { ttlMs: 10_000, now: () => now });
    await reader.read(node("worker-a", ["10.0.0.1"]), false, false);
    await reader.read(node("worker-a", ["10.0.0.1"]), false, false);
    // nodename, addresses, links and NodeIPConfig once per read of the machine
    expect(talos.calls).toHaveLength(4);
    expect((await reader.read(node("worker-a", ["10.0.0.2"]), false, false)).nodename).toBe("worker-b");
    expect(talos.calls).toHaveLength(8);
    now += 10_000;
    await reader.read(node("worker-a", ["10.0.0.2"]), false, false);
    expect(talos.calls).toHaveLength(12);
  });

  test("TalosFactsReader drops what it read once it expires, without waiting for another read", async () => {
    const talos = new FakeTalos();
    talos.machines.set("10.0.0.1", { nodename: "worker-a", addresses: ["10.0.0.1/24"] });
    talos.machines.set("10.0.0.2", { nodename: "worker-b", addresses: ["10.0.0.2/24"] });
    let now = T0;
    const due: Array<{ fn: () => void; at: number }> = [];
    const reader = new TalosFactsReader(talos, {
      ttlMs: 10_000,
      now: () => now,
      schedule: (fn, ms) => due.push({ fn, at: now + ms }),
    });
    await reader.read(node("worker-a", ["10.0.0.1"]), false, false);
    now += 4_000;
    await reader.read(node("worker-b", ["10.0.0.2"]), false, false);
    // One prune armed, for the oldest entry's expiry.
    expect(due.map((d) => d.at - T0)).toEqual([10_001]);
    expect(reader.size).toBe(2);
    const run = () => {
      const d = due.shift() as { fn: () => void; at: number };
      now = d.at;
      d.fn();
    };
    run();
    expect(reader.size).toBe(1);
    // Re-armed for the other entry, then nothing is left to arm.
    expect(due.map((d) => d.at - T0)).toEqual([14_001]);
    run();
    expect(reader.size).toBe(0);
    expect(due).toEqual([]);
  });

  test("TalosFactsReader.read() throws when Talos does not answer or the Node has no IP", async () => {
    const talos = new FakeTalos();
    talos.machines.set("10.0.0.1", { nodename: "worker-a", addresses: ["10.0.0.1/24"] });
    talos.down.add("10.0.0.1");
    const reader = new TalosFactsReader(talos);
    await expect(reader.read(node("worker-a", ["10.0.0.1"]), false, false)).rejects.toThrow(/unreachable/);
    await expect(reader.read(node("worker-a", [], [], ""), false, false)).rejects.toThrow(/has no IP/);
  });
});

describe("NodeClaimIndex", () => {
  const input = (name: string, addresses: string[], provided?: string): NodeInput => ({
    name,
    addresses: addresses.map((address) => ({
      type: /^[\d.:a-f]+$/.test(address) ? "InternalIP" : "InternalDNS",
      address,
    })),
    ...(provided === undefined ? {} : { providedNodeIP: provided }),
  });
  const wanted = (dns: string[], ips: string[]) => ({ dns: new Set(dns), ips: new Set(ips) });

  test("NodeClaimIndex.claimants() finds the other Nodes that claim a name or IP, sorted, without the requester", () => {
    const live = new Set(["worker-a", "worker-b", "worker-c"]);
    const index = new NodeClaimIndex((n) => live.has(n));
    index.set(input("worker-c", ["10.0.0.2", "Shared.lan"]));
    index.set(input("worker-b", ["10.0.0.2", "b.lan"], "::ffff:a00:9"));
    index.set(input("worker-a", ["10.0.0.1", "shared.lan"]));
    const rows: Array<[string, ReturnType<typeof wanted>, string[]]> = [
      ["an IP of two", wanted([], ["10.0.0.2"]), ["worker-b", "worker-c"]],
      ["a DNS address, lower-cased", wanted(["shared.lan"], []), ["worker-c"]],
      ["a node name", wanted(["worker-b"], []), ["worker-b"]],
      ["a provided node IP", wanted([], ["10.0.0.9"]), ["worker-b"]],
      ["the requester's own", wanted(["worker-a"], ["10.0.0.1"]), []],
      ["nothing claimed", wanted(["x.lan"], ["10.9.9.9"]), []],
    ];
    for (const [what, w, want] of rows)
      expect({ what, got: index.claimants(w, "worker-a") }).toEqual({ what, got: want });
  });

  test("NodeClaimIndex follows replaced and deleted Nodes, and clear() forgets them all", () => {
    // The Node cache, which the index follows: a Node's own name is looked up there.
    const live = new Set(["worker-b"]);
    const index = new NodeClaimIndex((n) => live.has(n));
    const b1 = input("worker-b", ["10.0.0.2", "b.lan"]);
    index.set(b1);
    index.set(input("worker-b", ["10.0.0.2", "b.lan"]), b1);
    expect(index.claimants(wanted(["b.lan"], ["10.0.0.2"]), "worker-a")).toEqual(["worker-b"]);
    const b2 = input("worker-b", ["10.0.0.3"]);
    index.set(b2, b1);
    expect(index.claimants(wanted(["b.lan"], ["10.0.0.2"]), "worker-a")).toEqual([]);
    expect(index.claimants(wanted([], ["10.0.0.3"]), "worker-a")).toEqual(["worker-b"]);
    live.add("worker-c");
    index.set(input("worker-c", ["10.0.0.3"]));
    live.delete("worker-b");
    index.delete(b2);
    index.delete(input("worker-x", ["10.0.0.3"]));
    expect(index.claimants(wanted(["worker-b"], ["10.0.0.3"]), "worker-a")).toEqual(["worker-c"]);
    live.clear();
    index.clear();
    expect(index.claimants(wanted(["worker-c"], ["10.0.0.3"]), "worker-a")).toEqual([]);
  });

  test("NodeClaimIndex.generation moves with every change of a Node's claims, and not with an update that changes none", () => {
    const index = new NodeClaimIndex(() => true);
    const moves = (change: () => void) => {
      const before = index.generation;
      change();
      return index.generation !== before;
    };
    const b1 = input("worker-b", ["10.0.0.2"]);
    const b2 = input("worker-b", ["10.0.0.2", "b.lan"]);
    expect(moves(() => index.set(b1))).toBe(true);
    expect(moves(() => index.set(input("worker-b", ["10.0.0.2"]), b1))).toBe(false);
    expect(moves(() => index.set(b2, b1))).toBe(true);
    expect(moves(() => index.delete(b2))).toBe(true);
    expect(moves(() => index.clear())).toBe(true);
  });

  test("NodeClaimIndex kept from events answers as a scan of every Node's claims() (random updates)", () => {
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const names = ["worker-a", "worker-b", "worker-c", "worker-d"];
    const pool = ["10.0.0.1", "10.0.0.2", "::ffff:10.0.0.2", "a.lan", "B.lan", "worker-c", "10.0.0.02"];
    const provided = [undefined, "10.0.0.9", "10.0.0.1,fd00::1"];
    const nodes = new Map<string, NodeInput>();
    const index = new NodeClaimIndex((n) => nodes.has(n));
    // One SAN at a time, as canonical names and as IPs (what requestedClaims() gives).
    const asked = [
      ...[...pool, ...names].map((x) => wanted([x.toLowerCase()], [])),
      ...[...pool, "10.0.0.9", "fd00::1"].map((x) => wanted([], [x])),
    ];
    let seen = 0;
    for (let step = 0; step < 300; step++) {
      const name = names[rand(names.length)] as string;
      const prev = nodes.get(name);
      if (prev && rand(5) === 0) {
        index.delete(prev);
        nodes.delete(name);
      } else {
        const addresses = pool.filter(() => rand(3) === 0);
        const next = input(name, addresses, provided[rand(provided.length)]);
        index.set(next, prev);
        nodes.set(name, next);
      }
      // What the index stands for: every other Node whose claims() meet the wanted ones.
      const all = [...nodes.values()].map((n) => ({ name: n.name, c: claims(n, "other") }));
      const scan = (w: ReturnType<typeof wanted>, self: string) =>
        all
          .filter(
            ({ name, c }) =>
              name !== self &&
              ([...w.dns].some((d) => c.dns.has(d)) || [...w.ips].some((ip) => c.ips.has(ip))),
          )
          .map(({ name }) => name)
          .sort();
      for (const w of asked) {
        seen += scan(w, "nobody").length;
        for (const self of [...names, "nobody"]) {
          const what = { step, self, dns: [...w.dns], ips: [...w.ips] };
          expect({ ...what, got: index.claimants(w, self) }).toEqual({ ...what, got: scan(w, self) });
        }
      }
    }
    // The comparison saw Nodes claim things, not two empty indexes.
    expect(seen).toBeGreaterThan(1000);
  });
});

describe("CsrApprover", () => {
  test("CsrApprover approves an honest CSR through /approval, counts it, and writes no Event", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    await f.drain();
    expect(f.writes).toHaveLength(1);
    const w = f.writes[0] as Write;
    expect(w.path).toBe("/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval");
    expect(w.body.metadata?.resourceVersion).toBe("10");
    expect(w.body.status?.conditions?.[0]).toMatchObject({
      type: "Approved",
      status: "True",
      reason: APPROVE_REASON,
    });
    expect(w.body.status?.conditions?.[0]?.message).toContain("confirmed by Talos on 10.0.0.1");
    expect(f.events).toEqual([]);
    expect(f.registry.expose()).toContain('talosccm_csr_approval_count{status="approve"} 1');
  });

  test("CsrApprover forgets a CSR that turned decided: its Node's changes no longer queue it", async () => {
    const f = setup();
    // The CSR waits for its Node: pending, filed under worker-a.
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    await f.drain();
    expect(f.writes).toHaveLength(0);
    // Decided elsewhere (an admin): the cached copy keeps no username to unlink by.
    f.csrs.put(leanCsr({ ...rawCsr("csr-1", "PEM"), status: { conditions: [{ type: "Approved" }] } }));
    await f.drain();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    expect(f.approver.queue.length).toBe(0);
    await f.drain();
    expect(f.writes).toHaveLength(0);
  });

  test("CsrApprover holds nothing about a CSR once the watch showed its decision, even when it came before the write returned", async () => {
    const decidedCopy = (w: Write) =>
      leanCsr({
        ...rawCsr(w.body.metadata?.name as string, "PEM"),
        metadata: { name: w.body.metadata?.name, uid: "uid-x", resourceVersion: "11" },
        status: { conditions: [{ type: "Approved", status: "True" }] },
      });
    // The watch's event races the write's answer: the decided version is cached first.
    let f: ReturnType<typeof setup> | undefined;
    f = setup({ update: (w) => f?.csrs.put(decidedCopy(w)) });
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    expect(f.approver.heldEntries).toBe(1);
    await f.drain();
    expect(f.decision()?.type).toBe("Approved");
    expect(f.approver.heldEntries).toBe(0);
    // And in the usual order: the write returns, then the watch shows the decision.
    const g = setup();
    g.nodes.put(node("worker-a", ["10.0.0.1"]));
    g.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    await g.drain();
    // Still pending in the cache, and its decision guarded until the watch shows it.
    expect(g.approver.heldEntries).toBe(2);
    g.csrs.put(decidedCopy(g.writes[0] as Write));
    expect(g.approver.heldEntries).toBe(0);
  });

  test("CsrApprover denies with the failed check as reason, a Warning Event and the denial counter", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips: ["10.0.0.2"] }))));
    await f.drain();
    expect(f.decision()).toMatchObject({ type: "Denied", reason: "IPNotOwned" });
    expect(f.events).toEqual([
      { name: "csr-1", type: "Warning", reason: "IPNotOwned", note: expect.stringContaining("10.0.0.2") },
    ]);
    const text = f.registry.expose();
    expect(text).toContain('talosccm_csr_approval_count{status="deny"} 1');
    expect(text).toContain('talosccm_csr_denied_total{reason="IPNotOwned"} 1');
  });

  test("CsrApprover denies a Node whose IP leads to another node's Talos (forged endpoint)", async () => {
    // Machine B's Node is not registered (yet): no Node claims 10.0.0.2, so only Talos can tell.
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.2"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips: ["10.0.0.2"] }))));
    await f.drain();
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "TalosNodeMismatch",
    });
    expect(f.talos.calls).toEqual([
      "nodename 10.0.0.2",
      "addresses 10.0.0.2",
      "links 10.0.0.2",
      "nodeIPConfig 10.0.0.2",
    ]);
  });

  test("CsrApprover forgets a node's Talos facts once its decision is written: the next CSR asks anew", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const pem = await pemA();
    f.csrs.put(leanCsr(rawCsr("csr-1", pem)));
    await f.drain();
    expect(f.decision()?.type).toBe("Approved");
    expect(f.talos.calls).toHaveLength(4);
    // Within the facts' 10 s, a second CSR of the machine (it rotated its key) still asks Talos.
    f.csrs.put(leanCsr(rawCsr("csr-2", pem)));
    await f.drain();
    expect(f.writes).toHaveLength(2);
    expect(f.talos.calls).toHaveLength(8);
  });

  test("CsrApprover asks Talos for DNS names only when the request has names besides the node name", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"], [{ type: "InternalDNS", address: "worker-a.lan" }]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ dns: ["worker-a", "worker-a.lan"] }))));
    await f.drain();
    expect(f.decision()?.type).toBe("Approved");
    expect(f.talos.calls).toContain("hostname 10.0.0.1");
  });

  test("CsrApprover denies what needs no Talos without calling it", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ dns: ["*.example.com"] }))));
    await f.drain();
    expect(f.decision()?.reason).toBe("ForbiddenSAN");
    expect(f.talos.calls).toEqual([]);
  });

  test("CsrApprover never touches a CSR that has a condition, nor a CSR of another signer", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const pem = await pemA();
    f.csrs.put(
      leanCsr({ ...rawCsr("csr-1", pem), status: { conditions: [{ type: "Approved", status: "True" }] } }),
    );
    f.csrs.put(leanCsr(rawCsr("csr-2", pem, { signerName: "example.com/other" })));
    await f.drain();
    expect(await f.approver.reconcile("csr-1")).toBeUndefined();
    expect(await f.approver.reconcile("csr-2")).toBeUndefined();
    expect(f.writes).toEqual([]);
  });

  test("CsrApprover waits for a missing Node with backoff and decides when the Node appears", async () => {
    const f = setup();
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    const first = await f.drain();
    expect(first).toEqual([{ name: "csr-1", result: { requeueAfterMs: 1000 } }]);
    f.approver.queue.add("csr-1");
    expect(await f.drain()).toEqual([{ name: "csr-1", result: { requeueAfterMs: 2000 } }]);
    expect(f.writes).toEqual([]);
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    expect(f.approver.queue.length).toBe(1);
    await f.drain();
    expect(f.decision()?.type).toBe("Approved");
    expect(f.events).toEqual([]);
  });

  test("CsrApprover leaves a CSR Pending with one NodeNotFound Event once the wait is over", async () => {
    const f = setup();
    f.setNow(T0 + NODE_WAIT_MS);
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    expect(await f.drain()).toEqual([{ name: "csr-1", result: undefined }]);
    f.approver.queue.add("csr-1");
    await f.drain();
    expect(f.writes).toEqual([]);
    expect(f.events).toEqual([
      {
        name: "csr-1",
        type: "Warning",
        reason: "NodeNotFound",
        note: expect.stringContaining("left Pending"),
      },
    ]);
    // A late Node still gets its CSR decided.
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    await f.drain();
    expect(f.decision()?.type).toBe("Approved");
  });

  test("CsrApprover retries while Talos is unreachable, warns on the third failure, and never decides without it", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.talos.down.add("10.0.0.1");
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    for (let i = 0; i < 3; i++) {
      await expect(f.approver.reconcile("csr-1")).rejects.toThrow(
        /Cannot confirm CSR csr-1 of node worker-a with Talos/,
      );
      f.approver.queue.addRateLimited("csr-1");
    }
    expect(f.writes).toEqual([]);
    expect(f.events.map((e) => e.reason)).toEqual(["TalosUnavailable"]);
    f.talos.down.delete("10.0.0.1");
    await f.approver.reconcile("csr-1");
    expect(f.decision()?.type).toBe("Approved");
  });

  test("CsrApprover stops retrying an unreachable Talos once the wait is over", async () => {
    const f = setup();
    f.setNow(T0 + NODE_WAIT_MS + 1);
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.talos.down.add("10.0.0.1");
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    expect(await f.approver.reconcile("csr-1")).toBeUndefined();
    expect(f.writes).toEqual([]);
    expect(f.events[0]).toMatchObject({
      reason: "TalosUnavailable",
      note: expect.stringContaining("left Pending"),
    });
  });

  test("CsrApprover decides again on a 409 and never decides a version twice", async () => {
    let conflict = true;
    const f = setup({
      update: () => {
        if (conflict) throw new KubeError(409, "Conflict", "the object has been modified");
      },
    });
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const pem = await pemA();
    f.csrs.put(leanCsr(rawCsr("csr-1", pem)));
    expect(await f.drain()).toEqual([{ name: "csr-1", result: { requeueAfterMs: 1000 } }]);
    // No decision was written: the counters (each series there from the start) stay at 0.
    expect(f.registry.expose()).toContain('talosccm_csr_approval_count{status="approve"} 0\n');
    expect(f.registry.expose()).toContain('talosccm_csr_approval_count{status="deny"} 0\n');
    // Someone else decided it meanwhile: the watch brings the condition, nothing more is written.
    conflict = false;
    f.csrs.put(
      leanCsr({ ...rawCsr("csr-1", pem), status: { conditions: [{ type: "Denied", status: "True" }] } }),
    );
    await f.drain();
    expect(await f.approver.reconcile("csr-1")).toBeUndefined();
    expect(f.writes).toEqual([]);
    // A new CSR written once is not written again for the same resourceVersion.
    f.csrs.put(leanCsr(rawCsr("csr-2", pem)));
    await f.drain();
    await f.approver.reconcile("csr-2");
    expect(f.writes).toHaveLength(1);
  });

  test("CsrApprover in CSR-only mode checks IPs against the Nodes only", async () => {
    const f = setup({ talos: false });
    f.nodes.put(node("worker-a", ["10.0.0.1"], [{ type: "ExternalIP", address: "10.0.0.2" }]));
    f.nodes.put(node("worker-b", ["10.0.0.2"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    f.csrs.put(leanCsr(rawCsr("csr-2", await pemA({ ips: ["10.0.0.1", "10.0.0.2"] }))));
    await f.drain();
    const byName = Object.fromEntries(
      f.writes.map((w) => [w.body.metadata?.name, w.body.status?.conditions?.[0]]),
    );
    expect(byName["csr-1"]).toMatchObject({
      type: "Approved",
      message: expect.stringContaining("Nodes only"),
    });
    expect(byName["csr-2"]).toMatchObject({ type: "Denied", reason: "IPOfOtherNode" });
    expect(f.talos.calls).toEqual([]);
  });

  test("CsrApprover refuses a DNS SAN that is another Node's name", async () => {
    const f = setup();
    f.nodes.put(node("worker-b", ["10.0.0.2"]));
    f.nodes.put(node("worker-a", ["10.0.0.1"], [{ type: "InternalDNS", address: "worker-b" }]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ dns: ["worker-a", "worker-b"] }))));
    await f.drain();
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "DNSNameOfOtherNode",
    });
  });

  test("CsrApprover checks a CSR against the Nodes that claim its SANs as they change and go", async () => {
    const f = setup({ talos: false });
    const pem = await pemA({ ips: ["10.0.0.1", "10.0.0.2"] });
    const decided = async (name: string) => {
      f.csrs.put(leanCsr(rawCsr(name, pem)));
      await f.drain();
      return f.writes.find((w) => w.body.metadata?.name === name)?.body.status?.conditions?.[0];
    };
    f.nodes.put(node("worker-a", ["10.0.0.1", "10.0.0.2"]));
    f.nodes.put(node("worker-c", ["10.0.0.3"]));
    expect(await decided("csr-1")).toMatchObject({ type: "Approved" });
    // worker-c takes 10.0.0.2 in an update, then gives it up; worker-d has it until deleted.
    f.nodes.put(node("worker-c", ["10.0.0.3", "10.0.0.2"]));
    expect(await decided("csr-2")).toMatchObject({
      type: "Denied",
      reason: "IPOfOtherNode",
      message: expect.stringContaining('"10.0.0.2" (node "worker-c")'),
    });
    f.nodes.put(node("worker-c", ["10.0.0.3"]));
    f.nodes.put(node("worker-d", ["10.0.0.4"], [], "10.0.0.2"));
    expect(await decided("csr-3")).toMatchObject({ reason: "IPOfOtherNode" });
    const gone = f.nodes.items.get("worker-d") as LeanNode;
    f.nodes.items.delete("worker-d");
    for (const h of f.nodes.handlers) h.onDelete?.(gone);
    expect(await decided("csr-4")).toMatchObject({ type: "Approved" });
  });

  test("CsrApprover does not conclude on Nodes that changed while Talos answered: a Node that took the CSR's IP meanwhile gets it denied", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    // While Talos answers, worker-c starts claiming 10.0.0.1, the CSR's IP SAN.
    const talos = whileTalosAnswers(f, () => f.nodes.put(node("worker-c", ["10.0.0.3", "10.0.0.1"])));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    // Talos confirmed it on the old snapshot; screened again on the new one, in the same pass.
    expect(await f.drain()).toEqual([{ name: "csr-1", result: undefined }]);
    expect(f.writes).toHaveLength(1);
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "IPOfOtherNode",
      message: expect.stringContaining('"10.0.0.1" (node "worker-c")'),
    });
    expect(talos.answers).toBe(1);
  });

  test("CsrApprover does not conclude on cluster ranges that changed while Talos answered: a pod range taking the CSR's IP gets it denied", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const before = f.networks.generation;
    const talos = whileTalosAnswers(f, () =>
      f.networks.set("node/worker-c", 'the pod CIDR of node "worker-c"', { cidrs: ["10.0.0.0/24"] }),
    );
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    expect(await f.drain()).toEqual([{ name: "csr-1", result: undefined }]);
    expect(f.networks.generation).toBeGreaterThan(before);
    expect(f.writes).toHaveLength(1);
    expect(f.decision()).toMatchObject({ type: "Denied", message: expect.stringContaining("10.0.0.0/24") });
    expect(talos.answers).toBe(1);
  });

  test("CsrApprover approves in one pass when the cluster changed elsewhere while Talos answered: a busy cluster cannot starve a CSR", async () => {
    const f = setup();
    const a = node("worker-a", ["10.0.0.1"]);
    f.nodes.put({ ...a, metadata: { ...a.metadata, resourceVersion: "1" } });
    // Another Node appears and the requester's own status moves: neither touches the CSR's names.
    const talos = whileTalosAnswers(f, () => {
      f.nodes.put(node("worker-z", ["10.0.0.99"]));
      f.nodes.put({ ...a, metadata: { ...a.metadata, resourceVersion: "2" } });
    });
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA())));
    const passes = await f.drain();
    expect(passes.filter((p) => p.result !== undefined)).toEqual([]);
    expect(f.writes).toHaveLength(1);
    expect(f.decision()?.type).toBe("Approved");
    expect(talos.answers).toBe(1);
  });

  test("CsrApprover keeps one record per CSR: a CSR recreated under the same name is warned about afresh", async () => {
    const f = setup();
    f.setNow(T0 + NODE_WAIT_MS);
    const pem = await pemA();
    f.csrs.put(leanCsr(rawCsr("csr-1", pem)));
    await f.drain();
    f.approver.queue.add("csr-1");
    await f.drain();
    expect(f.events.map((e) => e.reason)).toEqual(["NodeNotFound"]);
    expect(f.approver.heldEntries).toBe(2);
    // Deleted and filed again under its name (the delete unseen): another uid, its own record.
    const again = rawCsr("csr-1", pem);
    f.csrs.put(leanCsr({ ...again, metadata: { ...again.metadata, uid: "uid-csr-1-again" } }));
    await f.drain();
    expect(f.events.map((e) => e.reason)).toEqual(["NodeNotFound", "NodeNotFound"]);
    expect(f.approver.heldEntries).toBe(2);
  });

  test("CsrApprover queues a pending CSR on add and on every update, and drops it once decided or deleted", async () => {
    const f = setup();
    const pem = await pemA();
    const pending = leanCsr(rawCsr("csr-1", pem));
    f.csrs.put(pending);
    expect(f.approver.queue.length).toBe(1);
    await f.drain();
    f.csrs.put({ ...pending, metadata: { ...pending.metadata, resourceVersion: "11" } });
    expect(f.approver.queue.length).toBe(1);
    await f.drain();
    f.csrs.put(
      leanCsr({ ...rawCsr("csr-1", pem), status: { conditions: [{ type: "Approved", status: "True" }] } }),
    );
    expect(f.approver.queue.length).toBe(0);
    // Decided: the Node's arrival no longer queues it.
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    expect(f.approver.queue.length).toBe(0);
    f.csrs.put(leanCsr(rawCsr("csr-2", pem)));
    await f.drain();
    for (const h of f.csrs.handlers) h.onDelete?.(f.csrs.items.get("csr-2") as LeanCsr);
    f.nodes.put(node("worker-a", ["10.0.0.1", "fd00::1"]));
    expect(f.approver.queue.length).toBe(0);
  });

  test("CsrApprover.run() works the queue until its signal aborts", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const stop = new AbortController();
    const running = f.approver.run(stop.signal);
    const pem = await pemA();
    const written = f.nextWrite();
    f.csrs.put(leanCsr(rawCsr("csr-1", pem)));
    await written;
    expect(f.writes).toHaveLength(1);
    stop.abort();
    await running;
    expect(f.approver.queue.isShutDown).toBe(true);
  });

  test("CsrApprover.run() feeds the claim index from the Node cache itself: another Node's IP is refused", async () => {
    const f = setup({ talos: false, nodeHandlers: false });
    f.nodes.put(node("worker-a", ["10.0.0.1", "10.0.0.2"]));
    f.nodes.put(node("worker-b", ["10.0.0.2"]));
    const stop = new AbortController();
    const running = f.approver.run(stop.signal);
    const pem = await pemA({ ips: ["10.0.0.1", "10.0.0.2"] });
    const written = f.nextWrite();
    f.csrs.put(leanCsr(rawCsr("csr-1", pem)));
    await written;
    stop.abort();
    await running;
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "IPOfOtherNode",
    });
  });

  test("CsrApprover.run() counts a Node's name as its claim from the moment the Node exists: an IP it is named by, in any spelling, is refused in both modes", async () => {
    for (const talos of [true, false]) {
      for (const [name, ip] of [
        ["10.0.0.2", "10.0.0.2"],
        ["167772163", "10.0.0.3"],
        ["10.4", "10.0.0.4"],
      ] as const) {
        const f = setup({ talos, nodeHandlers: false });
        f.talos.machines.set("10.0.0.1", { nodename: "worker-a", addresses: ["10.0.0.1/24", `${ip}/24`] });
        f.nodes.put(node("worker-a", ["10.0.0.1", ip]));
        // What a kubelet creates first: the Node, with no address in its status yet.
        f.nodes.put(leanNode({ metadata: { name, uid: `uid-${name}` }, status: {} }));
        const stop = new AbortController();
        const running = f.approver.run(stop.signal);
        const written = f.nextWrite();
        f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips: ["10.0.0.1", ip] }))));
        await written;
        stop.abort();
        await running;
        expect(f.decision()).toMatchObject({
          type: "Denied",
          reason: "IPOfOtherNode",
          message: expect.stringContaining(`"${ip}" (node "${name}")`),
        });
      }
    }
  });

  test("CsrApprover refuses a Service CIDR address in both modes, without asking Talos", async () => {
    for (const talos of [true, false]) {
      const f = setup({ talos });
      expect(await decideExtraIP(f, "10.96.0.10")).toMatchObject({
        type: "Denied",
        reason: "ClusterNetworkIP",
        message: expect.stringContaining("ServiceCIDR kubernetes"),
      });
      expect(f.events.map((e) => e.reason)).toEqual(["ClusterNetworkIP"]);
      expect(f.talos.calls).toEqual([]);
    }
  });

  for (const c of SHARED_ON_MACHINE) {
    test(`CsrApprover refuses ${c.name}`, async () => {
      const f = setup();
      f.talos.machines.set("10.0.0.1", {
        nodename: "worker-a",
        addresses: ["10.0.0.1/24", `${c.ip}/32`],
        ...c.machine,
      });
      expect(await decideExtraIP(f, c.ip)).toMatchObject({
        type: "Denied",
        reason: "SharedIP",
        ...(c.says === undefined ? {} : { message: expect.stringContaining(c.says) }),
      });
    });
  }
});

describe("CsrApprover with cloud-node's Talos watches (lib/taloswatchcsr.ts)", () => {
  /** What worker-a's watches hold, as a direct read of its machine in setup() gives it. */
  const FACTS_A: TalosFacts = {
    nodeIP: "10.0.0.1",
    nodename: "worker-a",
    addresses: ["10.0.0.1/24", "127.0.0.1/8"],
    dnsNames: [],
    sharedAddresses: new Map([["127.0.0.1", 'Talos reports it on the loopback link "lo"']]),
    excludedSubnets: [],
  };

  /** A watch source answering `answer`, recording what it was asked. */
  function source(answer: CsrFactsAnswer) {
    const asked: string[] = [];
    const s = {
      answer,
      asked,
      csrFacts(name: string, ips: readonly string[], withDNS: boolean): CsrFactsAnswer {
        asked.push(`${name} ${ips.join(",")} ${withDNS}`);
        return s.answer;
      },
    };
    return s;
  }

  async function run(answer: CsrFactsAnswer, ips = ["10.0.0.1"]) {
    const watched = new WatchedFacts();
    const src = source(answer);
    watched.publish(src);
    const f = setup({ watched });
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips }))));
    const results = await f.drain();
    return { f, src, watched, results };
  }

  test("while the watches answer for the node, its CSR is decided without a Talos call", async () => {
    const { f, src } = await run({ state: "ready", facts: FACTS_A });
    expect(f.decision()).toMatchObject({ type: "Approved", reason: APPROVE_REASON });
    expect(src.asked).toEqual(["worker-a 10.0.0.1 false"]);
    expect(f.talos.calls).toEqual([]);
    const text = f.registry.expose();
    expect(text).toContain('talosccm_csr_talos_facts_total{source="watches"} 1');
    expect(text).toContain('talosccm_csr_talos_facts_total{source="talos"} 0');
  });

  test("the watches' facts meet the same checks: an IP the machine does not report is denied", async () => {
    const { f } = await run({ state: "ready", facts: { ...FACTS_A, addresses: ["10.0.0.9/24"] } });
    expect(f.decision()).toMatchObject({ type: "Denied", reason: "IPNotReportedByTalos" });
    expect(f.talos.calls).toEqual([]);
  });

  test("a CSR waiting for the watches is decided when they tell of its node, without a Talos call", async () => {
    const { f, src, watched, results } = await run({ state: "wait", why: "reads under way" });
    expect(results).toEqual([{ name: "csr-1", result: { requeueAfterMs: 5_000 } }]);
    expect(f.writes).toEqual([]);
    src.answer = { state: "ready", facts: FACTS_A };
    watched.changed("worker-b");
    expect(f.approver.queue.length).toBe(0);
    watched.changed("worker-a");
    expect(f.approver.queue.length).toBe(1);
    await f.drain();
    expect(f.decision()).toMatchObject({ type: "Approved" });
    expect(f.talos.calls).toEqual([]);
  });

  test("after 30 s of waiting for the watches, or when they cannot answer, Talos is asked as before", async () => {
    const { f } = await run({ state: "wait", why: "reads under way" });
    f.setNow(T0 + 1000 + 30_000);
    f.approver.queue.add("csr-1");
    await f.drain();
    expect(f.decision()).toMatchObject({ type: "Approved" });
    expect(f.talos.calls).toEqual([
      "nodename 10.0.0.1",
      "addresses 10.0.0.1",
      "links 10.0.0.1",
      "nodeIPConfig 10.0.0.1",
    ]);
    const asked = await run({ state: "ask", why: "the node's Talos watch is down" });
    expect(asked.f.decision()).toMatchObject({ type: "Approved" });
    expect(asked.f.talos.calls).toHaveLength(4);
    const text = asked.f.registry.expose();
    expect(text).toContain('talosccm_csr_talos_facts_total{source="watches"} 0');
    expect(text).toContain('talosccm_csr_talos_facts_total{source="talos"} 1');
  });

  test("a CSR with DNS names besides the node's asks the watches for Talos' names", async () => {
    const { src } = await run({ state: "wait", why: "HostnameStatus" }, ["10.0.0.1"]);
    expect(src.asked).toEqual(["worker-a 10.0.0.1 false"]);
    const watched = new WatchedFacts();
    const s2 = source({ state: "ready", facts: { ...FACTS_A, dnsNames: ["worker-a", "worker-a.lan"] } });
    watched.publish(s2);
    const f = setup({ watched });
    f.nodes.put(node("worker-a", ["10.0.0.1"], [{ type: "InternalDNS", address: "worker-a.lan" }]));
    f.csrs.put(leanCsr(rawCsr("csr-2", await pemA({ dns: ["worker-a", "worker-a.lan"] }))));
    await f.drain();
    expect(s2.asked).toEqual(["worker-a 10.0.0.1 true"]);
    expect(f.decision()).toMatchObject({ type: "Approved" });
    expect(f.talos.calls).toEqual([]);
  });
});

describe("CsrApprover in CSR-only mode: DNS SANs that reach a Service", () => {
  /** worker-a's Node listing `names` as InternalDNS addresses, and its CSR for its name and them. */
  async function fileFor(f: ReturnType<typeof setup>, names: string[], csr = "csr-1"): Promise<void> {
    f.nodes.put(
      node(
        "worker-a",
        ["10.0.0.1"],
        names.map((address) => ({ type: "InternalDNS", address })),
      ),
    );
    f.csrs.put(leanCsr(rawCsr(csr, await pemA({ dns: ["worker-a", ...names] }))));
  }

  test("a Service's name, name.namespace and kube-dns.kube-system are denied as ServiceName with an Event", async () => {
    for (const [name, says] of [
      ["vault", "resolves to Service vault/vault through a Pod's search path"],
      ["vault.vault", "resolves to Service vault/vault through a Pod's search path"],
      ["kube-dns.kube-system", "resolves to Service kube-system/kube-dns through a Pod's search path"],
      [
        "vault-0.vault",
        "resolves to Service vault/vault-0 through a Pod's search path (namespace vault exists",
      ],
    ] as const) {
      const f = setup({ talos: false });
      await fileFor(f, [name]);
      await f.drain();
      expect({ name, d: f.decision() }).toMatchObject({
        name,
        d: { type: "Denied", reason: "ServiceName", message: expect.stringContaining(says) },
      });
      expect(f.events).toEqual([
        { name: "csr-1", type: "Warning", reason: "ServiceName", note: expect.stringContaining(says) },
      ]);
    }
  });

  test("the node's own hostname that is no Service is approved, after one lookup per name", async () => {
    const f = setup({ talos: false });
    await fileFor(f, ["worker-a.lan"]);
    await f.drain();
    expect(f.decision()).toMatchObject({ type: "Approved" });
    expect(f.api.gets.sort()).toEqual([
      "/api/v1/namespaces/lan",
      "/api/v1/services?metadata.name=lan",
      "/api/v1/services?metadata.name=worker-a",
    ]);
  });

  test("a lookup the API server refuses is retried, warned about on the third failure, never decided blind", async () => {
    const f = setup({ talos: false });
    f.api.fail = 403;
    await fileFor(f, []);
    for (let i = 0; i < 3; i++) {
      await expect(f.approver.reconcile("csr-1")).rejects.toThrow(
        /Cannot check CSR csr-1's DNS names against the cluster's Services: Cannot look up Services named worker-a/,
      );
      f.approver.queue.addRateLimited("csr-1");
    }
    expect(f.writes).toEqual([]);
    expect(f.events.map((e) => e.reason)).toEqual(["ServiceLookupFailed"]);
    f.api.fail = undefined;
    await f.approver.reconcile("csr-1");
    expect(f.decision()?.type).toBe("Approved");
  });

  test("more lookups than csr_service_lookups are denied before any is made, and counted for the peer", async () => {
    const f = setup({ talos: false });
    const names = Array.from({ length: 16 }, (_, i) => `host-${i}.ns-${i}`);
    await fileFor(f, names);
    await f.drain();
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "PeerInputOverLimit",
      message: expect.stringContaining("33 namespace and Service lookups"),
    });
    expect(f.api.gets).toEqual([]);
    expect(f.registry.expose()).toContain(
      'talosccm_peer_input_rejected_total{peer="csr",limit="csr_service_lookups"} 1',
    );
  });

  test("with Talos no lookup is made: Talos must know every name", async () => {
    const f = setup();
    await fileFor(f, ["vault"]);
    await f.drain();
    expect(f.decision()).toMatchObject({ type: "Denied", reason: "DNSNameNotReportedByTalos" });
    expect(f.api.gets).toEqual([]);
  });

  test("a CSR over csr_sans is denied before its Node or Talos is read, and counted for the peer", async () => {
    const f = setup();
    const ips = Array.from({ length: 256 }, (_, i) => `10.1.${i}.5`);
    f.csrs.put(leanCsr(rawCsr("csr-1", await pemA({ ips }))));
    await f.drain();
    expect(f.decision()).toMatchObject({
      type: "Denied",
      reason: "PeerInputOverLimit",
      message: expect.stringContaining("The CSR has 257 subject alternative names"),
    });
    expect(f.talos.calls).toEqual([]);
    expect(f.events.map((e) => e.reason)).toEqual(["PeerInputOverLimit"]);
    expect(f.registry.expose()).toContain(
      'talosccm_peer_input_rejected_total{peer="csr",limit="csr_sans"} 1',
    );
  });
});

describe("the per-requester decision budget (csr_decision_units)", () => {
  /** worker-a's Node and machine at 1,000 addresses each: every decision costs ~2,000 units. */
  function bigWorkerA(f: ReturnType<typeof setup>) {
    const many = Array.from({ length: 1000 }, (_, i) => `10.${1 + (i >> 8)}.${i & 255}.9`);
    f.talos.machines.set("10.0.0.1", {
      nodename: "worker-a",
      addresses: ["10.0.0.1/24", ...many.map((ip) => `${ip}/24`)],
    });
    f.nodes.put(
      node(
        "worker-a",
        ["10.0.0.1"],
        many.map((address) => ({ type: "InternalIP", address })),
      ),
    );
  }

  test("decisionUnits(): one per 64 characters of request, Node address and Talos entry", () => {
    expect(decisionUnits("A".repeat(1280), 3, undefined)).toBe(24);
    const facts = {
      nodeIP: "10.0.0.1",
      nodename: "a",
      addresses: ["10.0.0.1/24", "10.0.0.2/24"],
      dnsNames: ["a"],
      sharedAddresses: new Map([["127.0.0.1", "loopback"]]),
      excludedSubnets: ["10.96.0.0/12"],
    };
    expect(decisionUnits("", 0, facts)).toBe(1 + 5);
    // A request over the size the parser reads is refused unread: it costs what the largest read one does.
    const largest = decisionUnits("A".repeat(MAX_REQUEST_BASE64), 0, undefined);
    expect(decisionUnits("A".repeat(2 * 1024 * 1024), 0, undefined)).toBe(largest);
    expect(largest).toBeLessThan(400);
  });

  test("an honest node's many CSRs never wait", async () => {
    const f = setup();
    f.nodes.put(node("worker-a", ["10.0.0.1"]));
    const pem = await pemA();
    for (let i = 0; i < 60; i++) f.csrs.put(leanCsr(rawCsr(`csr-${i}`, pem)));
    const results = await f.drain();
    expect(results.filter((r) => r.result !== undefined)).toEqual([]);
    expect(f.writes).toHaveLength(60);
    expect(f.events.filter((e) => e.reason === "PeerInputOverLimit")).toEqual([]);
  });

  test("a requester in debt waits, unparsed and without Talos, with one Event; another node's CSR is decided at once; paid back, it is decided", async () => {
    const f = setup();
    bigWorkerA(f);
    f.nodes.put(node("worker-b", ["10.0.0.2"]));
    const pem = await pemA();
    let i = 0;
    // Decided until the budget is in debt.
    for (; i < 10 && f.writes.length === i; i++) {
      f.csrs.put(leanCsr(rawCsr(`csr-${i}`, pem)));
      await f.drain();
    }
    const decided = f.writes.length;
    expect(decided).toBeGreaterThanOrEqual(3);
    expect(decided).toBeLessThanOrEqual(5);
    const calls = f.talos.calls.length;
    f.csrs.put(leanCsr(rawCsr("csr-late", pem)));
    const [late] = await f.drain();
    const wait = (late as { result: { requeueAfterMs: number } }).result.requeueAfterMs;
    // ~2,000 units of debt at 128 a second.
    expect(wait).toBeGreaterThan(1000);
    expect(wait).toBeLessThan(20_000);
    expect(f.talos.calls.length).toBe(calls);
    expect(f.writes).toHaveLength(decided);
    const budgetEvents = f.events.filter((e) => e.reason === "PeerInputOverLimit");
    expect(budgetEvents).toHaveLength(1);
    expect(budgetEvents[0]?.note).toContain("system:node:worker-a spent its CSR decision budget");
    expect(f.registry.expose()).toContain(
      'talosccm_peer_input_rejected_total{peer="csr",limit="csr_decision_units"}',
    );
    // worker-b is not affected.
    const pemB = (
      await createCSR({
        cn: "system:node:worker-b",
        o: ["system:nodes"],
        dns: ["worker-b"],
        ips: ["10.0.0.2"],
      })
    ).csr;
    f.csrs.put(leanCsr(rawCsr("csr-b", pemB, { username: "system:node:worker-b" })));
    await f.drain();
    expect(f.writes).toHaveLength(decided + 1);
    // Once the debt is paid, worker-a's CSR is decided; a second one in the window adds no Event.
    f.setNow(T0 + 1000 + wait + 1);
    f.approver.queue.add("csr-late");
    await f.drain();
    expect(f.writes.map((w) => w.path)).toContainEqual(expect.stringContaining("csr-late"));
    f.csrs.put(leanCsr(rawCsr("csr-later", pem)));
    await f.drain();
    expect(f.events.filter((e) => e.reason === "PeerInputOverLimit")).toHaveLength(1);
  });
});
