// lib/talos.ts TalosClient against the fake apid: every call, every status-code path, endpoint
// failover, a 10,000-resource List, watches across apid restarts and node flapping, certificate
// rotation, the in-flight bound, deadlines, cancellation, metrics and lazy loading of the transport.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Registry } from "../../lib/metrics.ts";
import { PEER_LIMITS } from "../../lib/peerlimits.ts";
import {
  type CallOptions,
  TalosClient,
  type TalosClientOptions,
  TalosError,
  TalosNotFoundError,
  TalosPermissionError,
} from "../../lib/talos.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { RESOURCES } from "../../lib/taloswire.ts";
import { type ApidMethod, encodePlatformMetadata, FakeApid, withFakeApid } from "../support/apid.ts";
import { until } from "../support/cluster.ts";
import {
  addressStatus,
  type FakeAddress,
  fixtureNames,
  LINK_TYPES,
  loadFixture,
  nodeIdentity,
  nodeLinks,
  normalizeAddress,
} from "../support/fixtures.ts";
import { createCA } from "../support/pki.ts";
import { collect, failure } from "../support/talosclient.ts";

const CMC = { podCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"], serviceCIDRs: ["10.96.0.0/12"] };
const AWS = "172.31.20.15";
const GCP = "10.128.0.23";
const RPI = "192.168.1.50";
const FAST = { initialMs: 10, maxMs: 80 };

let apid: FakeApid;
let dir: string;
const open: TalosClient[] = [];

beforeAll(async () => {
  apid = await FakeApid.start({ nodes: fixtureNames().map(loadFixture), controllerManagerConfig: CMC });
  dir = mkdtempSync(join(tmpdir(), "talos-e2e-"));
});

afterAll(async () => {
  for (const c of open) c.close();
  await apid.stop();
  rmSync(dir, { recursive: true, force: true });
});

let files = 0;

/** A client on a fresh talosconfig file; closed after the suite. */
async function clientFor(
  server: FakeApid = apid,
  opts: Partial<TalosClientOptions> & { endpoints?: string[]; roles?: string[]; cluster?: string } = {},
): Promise<{ client: TalosClient; registry: Registry; path: string }> {
  const path = join(dir, `talosconfig-${files++}`);
  await server.writeTalosconfig(path, {
    ...(opts.endpoints ? { endpoints: opts.endpoints } : {}),
    ...(opts.roles ? { roles: opts.roles } : {}),
    ...(opts.cluster ? { cluster: opts.cluster } : {}),
  });
  const registry = new Registry();
  const client = new TalosClient({
    config: loadTalosConfig({ path, env: {} }),
    load: () => loadTalosConfig({ path, env: {} }),
    registry,
    backoff: FAST,
    watchBackoff: FAST,
    callTimeoutMs: 5_000,
    ...opts,
  });
  open.push(client);
  return { client, registry, path };
}

/** The order COSI lists and bootstraps a kind in, as the fake does: by resource id. */
function cosiOrder<T>(items: readonly T[], id: (x: T) => string): T[] {
  return [...items].sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0));
}

describe("calls", () => {
  test.each(fixtureNames())(
    "%s: platformMetadata, systemInformation and addresses match the fixture",
    async (name) => {
      const { client } = await clientFor();
      const node = loadFixture(name);
      for (const ip of node.nodeIPs) {
        expect(await client.platformMetadata(ip)).toEqual(node.platformMetadata);
        expect(await client.systemInformation(ip)).toEqual(node.systemInformation);
        const got = await client.addresses(ip);
        expect(got.map(({ local: _local, ...a }) => a)).toEqual(
          cosiOrder(node.addresses, (a) => a.id).map(addressStatus),
        );
      }
    },
  );

  test.each(fixtureNames())("%s: nodename() and hostname() match the fixture", async (name) => {
    const { client } = await clientFor();
    const node = loadFixture(name);
    const { nodename, hostname, domainname } = nodeIdentity(node);
    for (const ip of node.nodeIPs) {
      expect(await client.nodename(ip)).toBe(nodename);
      expect(await client.hostname(ip)).toEqual({
        hostname,
        domainname,
        fqdn: domainname ? `${hostname}.${domainname}` : hostname,
      });
    }
  });

  test.each(fixtureNames())("%s: links() and nodeIPConfig() serve the fixture's defaults", async (name) => {
    const { client } = await clientFor();
    const node = loadFixture(name);
    const ip = node.nodeIPs[0] as string;
    const links = await client.links(ip);
    expect(links.map((l) => ({ name: l.name, index: l.index, type: l.type, kind: l.kind }))).toEqual(
      cosiOrder(nodeLinks(node), (l) => l.name).map((l) => ({
        name: l.name,
        index: l.index,
        type: LINK_TYPES[l.type],
        kind: l.kind,
      })),
    );
    // Every link name of the addresses but `external` has a link, at the addresses' link index.
    for (const a of node.addresses) {
      const link = links.find((l) => l.name === a.linkName);
      if (a.linkName === "external") expect(link).toBeUndefined();
      else expect(link?.index).toBe(a.linkIndex);
    }
    expect(links.find((l) => l.name === "lo")).toMatchObject({ type: 772, flags: 0x10049, linkState: true });
    expect(await client.nodeIPConfig(ip)).toEqual({ validSubnets: [], excludeSubnets: [] });
  });

  test("links() and nodeIPConfig() follow the node; a removed NodeIPConfig is TalosNotFoundError", async () => {
    await withFakeApid(
      {
        nodes: [
          {
            ...loadFixture("hcloud"),
            links: [
              { name: "lo" },
              { name: "eth0" },
              { name: "eth1", up: false },
              { name: "kubespan", kind: "wireguard", type: "none", index: 9 },
            ],
            nodeIPConfig: { validSubnets: ["10.0.0.0/8", "!10.0.9.0/24"], excludeSubnets: ["10.244.0.0/16"] },
          },
        ],
      },
      async (own) => {
        const hc = loadFixture("hcloud").nodeIPs[0] as string;
        const { client } = await clientFor(own);
        expect(await client.links(hc)).toEqual([
          { name: "eth0", index: 2, type: 1, kind: "", flags: 0x11043, linkState: true },
          { name: "eth1", index: 3, type: 1, kind: "", flags: 0x1002, linkState: false },
          { name: "kubespan", index: 9, type: 65534, kind: "wireguard", flags: 0x100d1, linkState: true },
          { name: "lo", index: 1, type: 772, kind: "", flags: 0x10049, linkState: true },
        ]);
        expect(await client.nodeIPConfig(hc)).toEqual({
          validSubnets: ["10.0.0.0/8", "!10.0.9.0/24"],
          excludeSubnets: ["10.244.0.0/16"],
        });
        own.updateNode(hc, {
          links: [{ name: "lo" }, { name: "vlan100", kind: "vlan" }],
          nodeIPConfig: { excludeSubnets: ["10.244.0.0/16", "10.96.0.0/12", "10.0.1.100"] },
        });
        expect((await client.links(hc)).map((l) => [l.name, l.index, l.kind])).toEqual([
          ["lo", 1, ""],
          ["vlan100", 4, "vlan"],
        ]);
        expect(await client.nodeIPConfig(hc)).toEqual({
          validSubnets: [],
          excludeSubnets: ["10.244.0.0/16", "10.96.0.0/12", "10.0.1.100"],
        });
        own.updateNode(hc, { nodeIPConfig: null, links: [] });
        own.resetCalls();
        const e = await failure(client.nodeIPConfig(hc));
        expect(e).toBeInstanceOf(TalosNotFoundError);
        expect(e.message).toContain(`Cannot get NodeIPConfigs.kubernetes.talos.dev on node ${hc}`);
        expect(own.calls({ method: "Get", node: hc })).toBe(1);
        expect(await client.links(hc)).toEqual([]);
      },
    );
  });

  test("nodename() tells which node answers on an IP, whatever its Node object claims", async () => {
    await withFakeApid(
      {
        nodes: [
          { ...loadFixture("hcloud"), nodename: "talos-hc-2", hostname: "talos-hc-2", domainname: "" },
          loadFixture("gcp"),
        ],
      },
      async (own) => {
        const { client } = await clientFor(own);
        const hc = loadFixture("hcloud").nodeIPs[0] as string;
        expect(await client.nodename(hc)).toBe("talos-hc-2");
        expect(await client.hostname(hc)).toEqual({
          hostname: "talos-hc-2",
          domainname: "",
          fqdn: "talos-hc-2",
        });
        own.updateNode(hc, {
          nodename: "talos-hc-1",
          hostname: { hostname: "talos-hc-1", domainname: "eu.lan" },
        });
        expect(await client.nodename(hc)).toBe("talos-hc-1");
        expect((await client.hostname(hc)).fqdn).toBe("talos-hc-1.eu.lan");
        expect(await client.nodename(GCP)).toBe("talos-spot-1");
      },
    );
  });

  test("nodename() and hostname() of a node without them: TalosNotFoundError", async () => {
    await withFakeApid({ nodes: [loadFixture("gcp")] }, async (own) => {
      const { client } = await clientFor(own);
      own.updateNode(GCP, { nodename: null, hostname: null });
      own.resetCalls();
      const n = await failure(client.nodename(GCP));
      expect(n).toBeInstanceOf(TalosNotFoundError);
      expect(n.message).toContain("Cannot get Nodenames.kubernetes.talos.dev on node 10.128.0.23");
      expect(await failure(client.hostname(GCP))).toBeInstanceOf(TalosNotFoundError);
      expect(own.calls({ method: "Get", node: GCP })).toBe(2);
    });
  });

  test("controllerManagerConfig() is read without a node header", async () => {
    const { client } = await clientFor();
    apid.resetCalls();
    expect(await client.controllerManagerConfig()).toEqual(CMC);
    expect(apid.calls({ method: "Get", node: "", type: RESOURCES.controllermanagerconfig.type })).toBe(1);
  });

  test("version() of the endpoint and of a node", async () => {
    const { client } = await clientFor();
    expect(await client.version()).toMatchObject({ tag: "v1.13.0", platform: "metal" });
    apid.updateNode(GCP, { talosVersion: "v1.12.6" });
    expect(await client.version({ nodeIP: GCP })).toMatchObject({ tag: "v1.12.6", platform: "gcp" });
  });

  test("clusterName comes from the talosconfig context", async () => {
    const { client } = await clientFor(apid, { cluster: "prod-eu-1" });
    expect(client.clusterName).toBe("prod-eu-1");
  });

  test("systemInformation() is undefined where Talos has none, without counting an error", async () => {
    const { client, registry } = await clientFor();
    expect(await client.systemInformation(RPI)).toBeUndefined();
    expect(
      registry
        .counter("talosccm_api_request_errors_total", "")
        .get({ request: "systeminformation", node_status: "known" }),
    ).toBe(0);
  });

  test("a List at the per-machine bound comes back whole; 10,000 addresses are refused (issue 40)", async () => {
    await withFakeApid({}, async (own) => {
      const addresses: FakeAddress[] = [];
      for (let i = 0; i < 10_000; i++) {
        const ip = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
        addresses.push(
          normalizeAddress("big", { address: `${ip}/8`, linkName: `eth${i % 4}`, linkIndex: 2 + (i % 4) }),
        );
      }
      const bound = PEER_LIMITS.talos_addresses.value;
      own.addNode({ ...loadFixture("nocloud"), addresses: addresses.slice(0, bound) });
      const { client } = await clientFor(own);
      const got = await client.addresses("192.168.10.21");
      expect(got.length).toBe(bound);
      expect(got.map((a) => a.id)).toEqual(
        cosiOrder(addresses.slice(0, bound), (a) => a.id).map((a) => a.id),
      );
      own.updateNode("192.168.10.21", { addresses });
      await expect(client.addresses("192.168.10.21")).rejects.toThrow(`over the bound of ${bound}`);
    });
  });
  test("a 5 MiB resource passes the raised receive limit (grpc-js stops at 4 MiB by default)", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const pm = loadFixture("aws").platformMetadata;
      own.setRawResource(AWS, {
        namespace: RESOURCES.platformmetadata.namespace,
        type: RESOURCES.platformmetadata.type,
        id: "platformmetadata",
        protoSpec: encodePlatformMetadata(pm).proto,
        yamlSpec: `note: ${"x".repeat(5 << 20)}\n`,
      });
      const { client } = await clientFor(own);
      expect(await client.platformMetadata(AWS)).toEqual(pm);
    });
  });
});

describe("status codes", () => {
  type Call = (c: TalosClient, o: CallOptions) => Promise<unknown>;
  const CALLS: Array<[string, ApidMethod, string, Call]> = [
    ["platformMetadata", "Get", AWS, (c, o) => c.platformMetadata(AWS, o)],
    ["addresses", "List", AWS, (c, o) => c.addresses(AWS, o)],
    ["controllerManagerConfig", "Get", "", (c, o) => c.controllerManagerConfig(o)],
    ["nodename", "Get", AWS, (c, o) => c.nodename(AWS, o)],
    ["hostname", "Get", AWS, (c, o) => c.hostname(AWS, o)],
    ["nodeIPConfig", "Get", AWS, (c, o) => c.nodeIPConfig(AWS, o)],
    ["links", "List", AWS, (c, o) => c.links(AWS, o)],
    ["version", "Version", "", (c, o) => c.version(o)],
  ];
  const RETRIED: Array<[string, number, string]> = [
    ["Unavailable", GrpcStatus.UNAVAILABLE, "connection refused"],
    ["DeadlineExceeded", GrpcStatus.DEADLINE_EXCEEDED, "context deadline exceeded"],
    ["Internal failed proxying", GrpcStatus.INTERNAL, "failed proxying to 10.0.0.5"],
    ["Canceled by the proxy", GrpcStatus.CANCELLED, "context canceled"],
  ];
  const FINAL: Array<[string, number, string, string, abstract new (...args: never[]) => TalosError]> = [
    [
      "PermissionDenied",
      GrpcStatus.PERMISSION_DENIED,
      "not authorized",
      "permission-denied",
      TalosPermissionError,
    ],
    ["NotFound", GrpcStatus.NOT_FOUND, "resource X doesn't exist", "not-found", TalosNotFoundError],
    ["InvalidArgument", GrpcStatus.INVALID_ARGUMENT, "one-to-many", "invalid", TalosError],
    ["Unimplemented", GrpcStatus.UNIMPLEMENTED, "not supported", "unimplemented", TalosError],
    ["Internal invalid target", GrpcStatus.INTERNAL, 'invalid target "x:1"', "internal", TalosError],
    ["Unknown", GrpcStatus.UNKNOWN, "boom", "internal", TalosError],
  ];

  for (const [call, method, node, run] of CALLS) {
    test.each(RETRIED)(`${call}: %s twice, then success`, async (_name, code, details) => {
      const { client, registry } = await clientFor();
      apid.resetCalls();
      apid.failNext(node, method, code, 2, details);
      await run(client, {});
      expect(apid.calls({ method, node })).toBe(3);
      expect(
        registry
          .counter("talosccm_api_request_errors_total", "")
          .get({ request: call.toLowerCase(), node_status: "known" }),
      ).toBe(0);
    });

    test.each(FINAL)(`${call}: %s is not retried`, async (_name, code, details, want, cls) => {
      const { client } = await clientFor();
      apid.resetCalls();
      apid.failNext(node, method, code, 1, details);
      const e = await failure(run(client, {}));
      expect(e).toBeInstanceOf(cls);
      expect(e.code).toBe(want as TalosError["code"]);
      expect(e.message).toContain(details);
      expect(apid.calls({ method, node })).toBe(1);
    });
  }

  test("retries stop after `attempts`; the error counter counts the call once", async () => {
    const { client, registry } = await clientFor(apid, { attempts: 3 });
    apid.resetCalls();
    apid.failNext(AWS, "Get", GrpcStatus.UNAVAILABLE, 5);
    const e = await failure(client.platformMetadata(AWS));
    expect([e.code, e.retryable, e.grpcCode]).toEqual(["unavailable", true, GrpcStatus.UNAVAILABLE]);
    expect(apid.calls({ method: "Get", node: AWS })).toBe(3);
    expect(
      registry
        .counter("talosccm_api_request_errors_total", "")
        .get({ request: "platformmetadata", node_status: "known" }),
    ).toBe(1);
    expect((await failure(client.platformMetadata(AWS, { attempts: 2 }))).code).toBe("unavailable");
    expect(apid.calls({ method: "Get", node: AWS })).toBe(5);
    expect((await client.platformMetadata(AWS)).platform).toBe("aws");
  });

  test("a failed call about a node whose status is unknown counts as node_status unknown, apart", async () => {
    const { client, registry } = await clientFor(apid, { attempts: 1 });
    const errors = registry.counter("talosccm_api_request_errors_total", "");
    apid.failNext(AWS, "Get", GrpcStatus.UNAVAILABLE, 1);
    await failure(client.platformMetadata(AWS, { nodeStatusUnknown: true }));
    expect(errors.get({ request: "platformmetadata", node_status: "unknown" })).toBe(1);
    expect(errors.get({ request: "platformmetadata", node_status: "known" })).toBe(0);
    // Both series exist from the start, at 0.
    expect(registry.expose()).toContain(
      'talosccm_api_request_errors_total{request="version",node_status="unknown"} 0',
    );
  });

  test("an unknown node is Unavailable after the attempts", async () => {
    const { client } = await clientFor(apid, { attempts: 2 });
    const e = await failure(client.platformMetadata("10.200.0.1"));
    expect(e.code).toBe("unavailable");
    expect(e.message).toContain("Cannot get PlatformMetadatas.talos.dev on node 10.200.0.1");
  });

  test("a certificate without os:reader gets a typed PermissionDenied naming the role", async () => {
    const { client } = await clientFor(apid, { roles: ["os:etcd:backup"] });
    const e = await failure(client.platformMetadata(AWS));
    expect(e).toBeInstanceOf(TalosPermissionError);
    expect(e.message).toContain("os:reader");
    expect(e.message).toContain("kubernetesTalosAPIAccess");
  });

  test("NotFound of platform metadata is a typed 'not yet' (TalosNotFoundError)", async () => {
    const { client } = await clientFor();
    apid.failNext(
      GCP,
      "Get",
      GrpcStatus.NOT_FOUND,
      1,
      "resource PlatformMetadatas.talos.dev(runtime/platformmetadata@undefined) doesn't exist",
    );
    const e = await failure(client.platformMetadata(GCP));
    expect(e).toBeInstanceOf(TalosNotFoundError);
    expect(await client.platformMetadata(GCP)).toMatchObject({ platform: "gcp" });
  });

  test("a per-attempt deadline gives DeadlineExceeded", async () => {
    const { client } = await clientFor();
    apid.setDelay(400, "Get");
    try {
      const e = await failure(client.platformMetadata(AWS, { timeoutMs: 50, attempts: 1 }));
      expect([e.code, e.grpcCode]).toEqual(["deadline", GrpcStatus.DEADLINE_EXCEEDED]);
    } finally {
      apid.setDelay(0, "Get");
    }
  });

  test("an aborted call ends at once with code canceled", async () => {
    const { client } = await clientFor();
    apid.setDelay(2_000, "Get");
    try {
      const ac = new AbortController();
      const p = client.platformMetadata(AWS, { signal: ac.signal });
      setTimeout(() => ac.abort(), 30);
      const e = await failure(p);
      expect(e.code).toBe("canceled");
    } finally {
      apid.setDelay(0, "Get");
    }
  });

  test("a malformed spec from the server is a TalosDecodeError, not retried", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      own.setRawResource(AWS, {
        namespace: "runtime",
        type: RESOURCES.platformmetadata.type,
        id: "platformmetadata",
        protoSpec: Uint8Array.from([0x0a, 0x10, 0x61]),
      });
      const { client } = await clientFor(own);
      own.resetCalls();
      const e = await failure(client.platformMetadata(AWS));
      expect(e.code).toBe("decode");
      expect(own.calls({ method: "Get" })).toBe(1);
    });
  });
});

describe("channels", () => {
  test("the first endpoint down: calls fail over to the next one", async () => {
    const dead = await FakeApid.start({ pki: apid.pki });
    const deadEndpoint = dead.endpoint;
    await dead.stop();
    const { client } = await clientFor(apid, { endpoints: [deadEndpoint, apid.endpoint] });
    for (let i = 0; i < 6; i++) expect((await client.platformMetadata(AWS)).platform).toBe("aws");
    const w = collect(client, GCP, "platformmetadata");
    try {
      await until(() => w.types().includes("created"), "watch through the live endpoint");
    } finally {
      await w.stop();
    }
  });

  test("two live endpoints: a node's calls and watches stay on one, nodes spread over both, calls to the endpoints round-robin", async () => {
    await withFakeApid({ pki: apid.pki, nodes: [loadFixture("aws")] }, async (second) => {
      const { client } = await clientFor(apid, { endpoints: [apid.endpoint, second.endpoint], attempts: 1 });
      apid.resetCalls();
      second.resetCalls();
      for (let i = 0; i < 10; i++) await client.platformMetadata(AWS);
      const w = collect(client, AWS, "addresses");
      try {
        await until(() => w.types().includes("bootstrapped"), "the address watch to bootstrap");
      } finally {
        await w.stop();
      }
      // Every call and the watch about one node on one endpoint: one apid proxies to that machine.
      const calls = [apid, second].map((a) => a.calls({ method: "Get", node: AWS }));
      const watches = [apid, second].map((a) => a.calls({ method: "Watch", node: AWS }));
      expect(calls.toSorted()).toEqual([0, 10]);
      expect(watches.indexOf(1)).toBe(calls.indexOf(10));
      // Forty machines: each endpoint proxies to a share of them.
      const nodes = Array.from({ length: 40 }, (_, i) => `10.0.${i >> 4}.${(i & 15) + 1}`);
      await Promise.all(nodes.map((n) => client.platformMetadata(n).catch(() => undefined)));
      const byEndpoint = [apid, second].map((a) => nodes.filter((n) => a.calls({ node: n }) > 0).length);
      expect((byEndpoint[0] ?? 0) + (byEndpoint[1] ?? 0)).toBe(40);
      expect(Math.min(...byEndpoint)).toBeGreaterThanOrEqual(10);
      // Calls to the endpoints themselves alternate.
      apid.resetCalls();
      second.resetCalls();
      for (let i = 0; i < 10; i++) await client.version();
      expect([apid.calls({ method: "Version" }), second.calls({ method: "Version" })]).toEqual([5, 5]);
    });
  });

  test("at most maxInFlight calls reach apid at once", async () => {
    const { client } = await clientFor(apid, { maxInFlight: 4 });
    await client.version(); // connect first, so the peak reflects only the burst
    apid.setDelay(40);
    apid.resetCalls();
    try {
      const nodes = [AWS, GCP, RPI, "10.0.1.2", "10.1.0.4"];
      const all = await Promise.all(
        Array.from({ length: 40 }, (_, i) => client.platformMetadata(nodes[i % 5] as string)),
      );
      expect(all.length).toBe(40);
      expect(apid.peakInFlight).toBeLessThanOrEqual(4);
      expect(apid.peakInFlight).toBeGreaterThanOrEqual(2);
    } finally {
      apid.setDelay(0);
    }
  });

  test("the server certificate is checked against the endpoint IP and the talosconfig CA", async () => {
    const pki = await FakeApid.createPki();
    const noIP = await pki.osCA.issue({
      cn: "talos",
      usage: "server",
      keyType: "ed25519",
      dns: ["talos.default"],
    });
    await withFakeApid({ pki: { ...pki, server: noIP }, nodes: [loadFixture("aws")] }, async (own) => {
      const { client } = await clientFor(own, { attempts: 2 });
      expect((await failure(client.version())).code).toBe("unavailable");
      const foreign = await createCA("someone-else", "ed25519");
      const path = join(dir, "talosconfig-foreign-ca");
      await apid.writeTalosconfig(path, { ca: foreign.cert });
      const wrongCA = new TalosClient({
        config: loadTalosConfig({ path, env: {} }),
        backoff: FAST,
        attempts: 2,
      });
      open.push(wrongCA);
      expect((await failure(wrongCA.version())).code).toBe("unavailable");
    });
  });

  test("a DNS endpoint is verified against the certificate's DNS names", async () => {
    const { client } = await clientFor(apid, { endpoints: [`localhost:${apid.port}`] });
    expect((await client.version()).tag).toBe("v1.13.0");
  });

  test("firstAnswer() moves past IPs that do not answer and stops at real answers", async () => {
    const { client } = await clientFor();
    const got = await client.firstAnswer(["10.200.0.9", AWS], (ip, o) => client.platformMetadata(ip, o));
    expect(got.nodeIP).toBe(AWS);
    expect(got.value.platform).toBe("aws");
    apid.failNext(GCP, "Get", GrpcStatus.NOT_FOUND, 1);
    const e = await failure(client.firstAnswer([GCP, AWS], (ip, o) => client.platformMetadata(ip, o)));
    expect(e).toBeInstanceOf(TalosNotFoundError);
    const none = await failure(
      client.firstAnswer(["10.200.0.9", "10.200.0.10"], (ip, o) => client.platformMetadata(ip, o), {
        attempts: 2,
      }),
    );
    expect(none.code).toBe("unavailable");
  });

  test("close() fails later calls and ends watches", async () => {
    const { client } = await clientFor();
    const w = collect(client, AWS, "platformmetadata");
    await until(() => w.types().includes("created"), "watch");
    client.close();
    await until(() => w.ended, "watch end");
    expect(w.error).toBeUndefined();
    expect((await failure(client.platformMetadata(AWS))).code).toBe("closed");
  });
});

describe("watch", () => {
  test("delivers the current state, then updates with the old value", async () => {
    const { client } = await clientFor();
    const w = collect(client, GCP, "platformmetadata");
    try {
      await until(() => w.events.length >= 1, "initial state");
      expect(w.events[0]).toMatchObject({
        type: "created",
        id: "platformmetadata",
        resource: { platform: "gcp" },
      });
      apid.updateNode(GCP, { platformMetadata: { instanceType: "e2-standard-8" } });
      await until(() => w.events.length >= 2, "update");
      const ev = w.events[1];
      expect(ev?.type).toBe("updated");
      if (ev?.type !== "updated") throw new Error("unreachable");
      expect(ev.resource.instanceType).toBe("e2-standard-8");
      expect(ev.old?.instanceType).not.toBe("e2-standard-8");
    } finally {
      await w.stop();
    }
    expect(w.error).toBeUndefined();
  });

  test("a Nodename watch sees a rename with the old name and the HostnameStatus version it follows", async () => {
    await withFakeApid({ nodes: [loadFixture("oracle")] }, async (own) => {
      const ip = loadFixture("oracle").nodeIPs[0] as string;
      const { client } = await clientFor(own);
      const w = collect(client, ip, "nodename");
      try {
        await until(() => w.events.length >= 1, "initial state");
        expect(w.events[0]).toMatchObject({ type: "created", resource: { nodename: "talos-oci-1" } });
        own.updateNode(ip, { hostname: { hostname: "oci-2", domainname: "" }, nodename: "oci-2" });
        await until(() => w.events.length >= 2, "rename");
        expect(w.events[1]).toMatchObject({
          type: "updated",
          id: "nodename",
          resource: { nodename: "oci-2", hostnameVersion: "2", skipNodeRegistration: false },
          old: { nodename: "talos-oci-1", hostnameVersion: "1" },
        });
      } finally {
        await w.stop();
      }
      expect(w.error).toBeUndefined();
    });
  });

  test("a watched resource that does not exist arrives as destroyed, then created when it appears", async () => {
    await withFakeApid({ nodes: [loadFixture("metal-56")] }, async (own) => {
      const { client } = await clientFor(own);
      const w = collect(client, RPI, "systeminformation");
      try {
        await until(() => w.events.length >= 1, "tombstone");
        expect(w.events[0]).toEqual({ type: "destroyed", id: "systeminformation" });
        const si = loadFixture("aws").systemInformation;
        if (!si) throw new Error("fixture");
        own.updateNode(RPI, { systemInformation: si });
        await until(() => w.events.length >= 2, "created");
        expect(w.events[1]).toMatchObject({ type: "created", resource: si });
      } finally {
        await w.stop();
      }
    });
  });

  test("survives apid restarts: one errored event, then the state again", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const { client } = await clientFor(own);
      const w = collect(client, AWS, "platformmetadata");
      try {
        await until(() => w.events.length >= 1, "initial state");
        for (let round = 1; round <= 3; round++) {
          await own.restart();
          await until(
            () => w.types().filter((t) => t === "created").length > round,
            `state after restart ${round}`,
          );
        }
        expect(w.types()).toEqual([
          "created",
          "errored",
          "created",
          "errored",
          "created",
          "errored",
          "created",
        ]);
        own.updateNode(AWS, { platformMetadata: { zone: "us-east-1c" } });
        await until(() => w.types().includes("updated"), "update after restarts");
      } finally {
        await w.stop();
      }
    });
  });

  test("survives a stopped apid: keeps resubscribing until it is back", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const { client, registry } = await clientFor(own);
      const w = collect(client, AWS, "platformmetadata");
      try {
        await until(() => w.events.length >= 1, "initial state");
        await own.stop();
        await until(() => w.types().includes("errored"), "errored");
        // Three more failed resubscriptions, each counted: the handler heard of none of them.
        const failed = () =>
          registry
            .counter("talosccm_api_request_errors_total", "")
            .get({ request: "watch_platformmetadata", node_status: "known" });
        const after = failed();
        await until(() => failed() >= after + 3, "three more failed resubscriptions");
        expect(w.types()).toEqual(["created", "errored"]);
        await own.restart();
        await until(() => w.events.length >= 3, "state after restart");
        expect(w.types()).toEqual(["created", "errored", "created"]);
      } finally {
        await w.stop();
      }
    });
  });

  test("survives a flapping node and re-delivers what changed while it was down", async () => {
    const { client } = await clientFor();
    const w = collect(client, RPI, "platformmetadata");
    try {
      await until(() => w.events.length >= 1, "initial state");
      for (let i = 0; i < 3; i++) {
        apid.setDown(RPI, true);
        await until(() => w.types().filter((t) => t === "errored").length > i, "errored");
        apid.updateNode(RPI, { platformMetadata: { hostname: `rpi-1-gen${i}` } });
        apid.setDown(RPI, false);
        await until(() => w.types().filter((t) => t === "created").length > i + 1, "state after flap");
        const last = w.events.at(-1);
        expect(last?.type === "created" && last.resource.hostname).toBe(`rpi-1-gen${i}`);
      }
    } finally {
      await w.stop();
    }
  });

  test("a links watch delivers every link, then links as they come and go", async () => {
    await withFakeApid({ nodes: [loadFixture("gcp")] }, async (own) => {
      const { client } = await clientFor(own);
      const w = collect(client, GCP, "links");
      try {
        await until(() => w.types().includes("bootstrapped"), "bootstrap");
        expect(w.events.map((e) => (e.type === "created" ? e.resource.name : e.type))).toEqual([
          "cilium_host",
          "eth0",
          "lo",
          "bootstrapped",
        ]);
        own.updateNode(GCP, {
          links: [{ name: "lo" }, { name: "eth0" }, { name: "cilium_host", kind: "veth" }],
        });
        await until(() => w.events.length >= 5, "update");
        expect(w.events[4]).toMatchObject({
          type: "updated",
          id: "cilium_host",
          resource: { name: "cilium_host", index: 6, kind: "veth" },
          old: { name: "cilium_host", index: 6, kind: "" },
        });
        own.updateNode(GCP, { links: [{ name: "lo" }, { name: "eth0" }] });
        await until(() => w.events.length >= 6, "destroy");
        expect(w.events[5]).toMatchObject({
          type: "destroyed",
          id: "cilium_host",
          resource: { kind: "veth" },
        });
      } finally {
        await w.stop();
      }
      expect(w.error).toBeUndefined();
    });
  });

  test("a list watch re-bootstraps and reports what vanished while disconnected", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const { client } = await clientFor(own);
      const w = collect(client, AWS, "addresses");
      const n = loadFixture("aws").addresses.length;
      try {
        await until(() => w.types().includes("bootstrapped"), "bootstrap");
        expect(w.types()).toEqual([...Array(n).fill("created"), "bootstrapped"]);
        own.setDown(AWS, true);
        await until(() => w.types().includes("errored"), "errored");
        const kept = (own.node(AWS)?.addresses ?? []).filter((a) => a.linkName !== "external");
        own.updateNode(AWS, { addresses: kept });
        own.setDown(AWS, false);
        await until(() => w.types().filter((t) => t === "bootstrapped").length === 2, "second bootstrap");
        const after = w.events.slice(n + 2);
        expect(after.map((e) => e.type)).toEqual([
          ...Array(n - 1).fill("created"),
          "destroyed",
          "bootstrapped",
        ]);
        expect(after[n - 1]).toMatchObject({ type: "destroyed", id: "external/54.210.33.17/32" });
      } finally {
        await w.stop();
      }
    });
  });

  test.each([
    ["Unavailable", GrpcStatus.UNAVAILABLE],
    ["DeadlineExceeded", GrpcStatus.DEADLINE_EXCEEDED],
    ["Internal failed proxying", GrpcStatus.INTERNAL],
    ["Canceled by the proxy", GrpcStatus.CANCELLED],
  ])("a watch resubscribes after %s", async (_name, code) => {
    const { client } = await clientFor();
    apid.failNext(GCP, "Watch", code, 2, "failed proxying: stream reset");
    const w = collect(client, GCP, "platformmetadata");
    try {
      await until(() => w.types().includes("created"), "state after the failures");
      expect(w.types()).toEqual(["errored", "created"]);
    } finally {
      await w.stop();
    }
  });

  test.each([
    ["Unimplemented", GrpcStatus.UNIMPLEMENTED, "unimplemented"],
    ["InvalidArgument", GrpcStatus.INVALID_ARGUMENT, "invalid"],
    ["NotFound", GrpcStatus.NOT_FOUND, "not-found"],
  ])("a watch ends on %s", async (_name, code, want) => {
    const { client } = await clientFor();
    apid.failNext(GCP, "Watch", code, 1);
    const w = collect(client, GCP, "platformmetadata");
    await until(() => w.ended, "end");
    expect((w.error as TalosError).code).toBe(want as TalosError["code"]);
    expect(w.events).toEqual([]);
  });

  test("close() stops a watch at once: no event after it, the stream ends on the server", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const { client } = await clientFor(own);
      const w = collect(client, AWS, "platformmetadata");
      await until(() => w.events.length >= 1, "initial state");
      await w.stop();
      own.updateNode(AWS, { platformMetadata: { zone: "us-east-1c" } });
      await until(() => own.watchers() === 0, "the stream to close on the server");
      // A later watch on the same client sees the change: whatever the connection carried for the
      // closed one came before it.
      const later = collect(client, AWS, "platformmetadata");
      await until(() => later.events.length >= 1, "a later watch's state");
      await later.stop();
      expect(later.events[0]).toMatchObject({ resource: { zone: "us-east-1c" } });
      expect(w.types()).toEqual(["created"]);
      expect(w.ended).toBe(false); // closing is not an ending the handler is told about
    });
  });

  test("watch(): the same events as an async iterator; it ends on abort and throws what ended the watch", async () => {
    const { client } = await clientFor();
    const ac = new AbortController();
    const got: string[] = [];
    for await (const ev of client.watch(GCP, "platformmetadata", { signal: ac.signal })) {
      got.push(ev.type);
      if (got.length === 1) apid.updateNode(GCP, { platformMetadata: { zone: "us-central1-f" } });
      else ac.abort();
    }
    expect(got).toEqual(["created", "updated"]);
    const { client: denied } = await clientFor(apid, { roles: ["os:etcd:backup"] });
    const e = await failure(
      (async () => {
        for await (const _ of denied.watch(AWS, "platformmetadata")) throw new Error("an event");
      })(),
    );
    expect(e).toBeInstanceOf(TalosPermissionError);
  });

  test("PermissionDenied ends the watch with a typed error", async () => {
    const { client } = await clientFor(apid, { roles: ["os:etcd:backup"] });
    const w = collect(client, AWS, "platformmetadata");
    await until(() => w.ended, "end");
    expect(w.error).toBeInstanceOf(TalosPermissionError);
  });

  test("many watches share one connection and open within the in-flight bound", async () => {
    await withFakeApid({}, async (own) => {
      own.addNodes(
        Array.from({ length: 60 }, (_, i) => ({
          ...loadFixture("nocloud"),
          name: `n${i}`,
          nodeIPs: [`10.50.0.${i + 1}`],
        })),
      );
      const { client } = await clientFor(own, { maxInFlight: 8 });
      await client.version();
      own.setDelay(30, "Watch");
      own.resetCalls();
      const ws = Array.from({ length: 60 }, (_, i) =>
        collect(client, `10.50.0.${i + 1}`, "platformmetadata"),
      );
      try {
        await until(() => ws.every((w) => w.events.length >= 1), "all watches established");
        expect(own.watchers()).toBe(60);
        expect(own.peakInFlight).toBeLessThanOrEqual(8);
      } finally {
        await Promise.all(ws.map((w) => w.stop()));
      }
      await until(() => own.watchers() === 0, "watches closed on the server");
    });
  });
});

describe("talosconfig rotation", () => {
  test("the client reloads a rewritten talosconfig file and uses the new certificate", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const path = join(dir, "rotating-watched");
      await own.writeTalosconfig(path);
      const client = TalosClient.load({
        env: { TALOSCONFIG: path },
        home: dir,
        registry: new Registry(),
        backoff: FAST,
        watchBackoff: FAST,
        configPollMs: 60_000,
      });
      open.push(client);
      expect((await client.platformMetadata(AWS)).platform).toBe("aws");
      const before = client.config.crt;
      await own.rotateClientCA();
      await own.writeTalosconfig(path);
      await until(() => client.config.crt !== before, "reload from the file watcher");
      expect((await client.platformMetadata(AWS)).platform).toBe("aws");
    });
  });

  test("when apid stops trusting the certificate, a failing call re-reads the file and succeeds", async () => {
    await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => {
      const { client, path } = await clientFor(own, { attempts: 4 });
      const w = collect(client, AWS, "platformmetadata");
      await until(() => w.events.length >= 1, "watch");
      await own.rotateClientCA();
      await own.writeTalosconfig(path);
      // No file watcher on this client: the handshake failure itself triggers the reload.
      expect((await client.platformMetadata(AWS)).platform).toBe("aws");
      await until(() => w.types().filter((t) => t === "created").length >= 2, "watch after rotation");
      await w.stop();
      expect(w.error).toBeUndefined();
    });
  });

  test("reload() keeps in-flight calls on the old channel and moves watches without an error event", async () => {
    const { client, path } = await clientFor();
    const w = collect(client, AWS, "platformmetadata");
    await until(() => w.events.length >= 1, "watch");
    apid.setDelay(300, "Get");
    try {
      const gets = apid.calls({ method: "Get", node: GCP });
      const slow = client.platformMetadata(GCP);
      await until(() => apid.calls({ method: "Get", node: GCP }) > gets, "the slow call to reach apid");
      await apid.writeTalosconfig(path, { cluster: "renewed" });
      expect(await client.reload()).toBe(true);
      expect(client.clusterName).toBe("renewed");
      expect((await slow).platform).toBe("gcp");
      await until(() => w.events.length >= 2, "watch re-delivery");
      expect(w.types()).toEqual(["created", "created"]);
      expect(await client.reload()).toBe(false);
    } finally {
      apid.setDelay(0, "Get");
      await w.stop();
    }
  });

  test("a broken talosconfig on reload keeps the old configuration", async () => {
    const { client, path } = await clientFor();
    await Bun.write(path, "contexts: {}\n");
    await expect(client.reload()).rejects.toThrow(path);
    expect((await client.platformMetadata(AWS)).platform).toBe("aws");
  });
});

describe("metrics and loading", () => {
  test("request duration and errors use the reference's request names", async () => {
    const { client, registry } = await clientFor(apid, { attempts: 1 });
    await client.platformMetadata(AWS);
    await client.systemInformation(AWS);
    await client.addresses(AWS);
    await client.nodeIPConfig(AWS);
    await client.links(AWS);
    await failure(client.addresses("10.200.0.1"));
    const text = registry.expose();
    for (const r of ["platformmetadata", "systeminformation", "addresses", "nodeipconfig", "links"]) {
      expect(text).toContain(`talosccm_api_request_duration_seconds_count{request="${r}"}`);
    }
    expect(text).toContain('talosccm_api_request_duration_seconds_bucket{request="addresses",le="30"} 2');
    expect(text).toContain('talosccm_api_request_errors_total{request="addresses",node_status="known"} 1');
  });

  test("config loading needs neither the gRPC transport nor the protobuf code; the transport comes with the first call, grpc-js never", async () => {
    const path = join(dir, "talosconfig-lazy");
    await apid.writeTalosconfig(path);
    const lib = (f: string) => JSON.stringify(resolve(import.meta.dir, "../../lib", f));
    const script = `
      const loaded = (part) => Object.keys(require.cache).some((k) => k.includes(part));
      const { loadTalosConfig } = await import(${lib("talosconfig.ts")});
      const config = loadTalosConfig({ path: ${JSON.stringify(path)}, env: {} });
      const atConfig = { grpc: loaded("lib/grpc.ts"), protobuf: loaded("talos_pb.ts") };
      const { TalosClient } = await import(${lib("talos.ts")});
      const client = new TalosClient({ config });
      const before = loaded("lib/grpc.ts");
      await client.version();
      const after = loaded("lib/grpc.ts");
      console.log(JSON.stringify({ atConfig, before, after, grpcJs: loaded("@grpc/grpc-js") }));
      client.close();
    `;
    // Asynchronous spawn: the fake apid answering the child lives in this process.
    const child = Bun.spawn([process.execPath, "-e", script], {
      cwd: resolve(import.meta.dir, "../.."),
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
    ]);
    await child.exited;
    expect(stderr).toBe("");
    expect(JSON.parse(stdout.trim())).toEqual({
      atConfig: { grpc: false, protobuf: false },
      before: false,
      after: true,
      grpcJs: false,
    });
  });
});
