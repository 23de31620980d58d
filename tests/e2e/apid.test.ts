// The fake apid on the wire, through a plain grpc-js client and the generated codecs (no lib/talos.ts
// client): mutual TLS with a Talos-shaped talosconfig, routing by `node`, Talos' status codes, both
// spec encodings, Watch semantics, outages, restarts and client-CA rotation. Many suites build on
// this fake, so its behaviour is pinned here.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import type * as grpc from "@grpc/grpc-js";
import { parse as parseYaml } from "yaml";
import {
  EventType,
  HostnameStatusSpec,
  LinkStatusSpec,
  NodeIPConfigSpec,
  NodenameSpec,
  PlatformMetadataSpec,
  VersionResponse,
} from "../../lib/talos_pb.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { PATHS, RESOURCES } from "../../lib/taloswire.ts";
import { FakeApid } from "../support/apid.ts";
import { generateNodes, loadFixture } from "../support/fixtures.ts";
import { createCA } from "../support/pki.ts";
import { clientFor, contextOf, get, getReq, list, status, unary, watch } from "../support/rawgrpc.ts";

const PM = RESOURCES.platformmetadata;
const AWS_IP = "172.31.20.15";
const GCP_IP = "10.128.0.23";
const RPI_IP = "192.168.1.50";

let apid: FakeApid;
let client: grpc.Client;

beforeAll(async () => {
  apid = await FakeApid.start({
    nodes: [loadFixture("aws"), loadFixture("gcp"), loadFixture("metal-56"), loadFixture("exoscale")],
    controllerManagerConfig: { podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] },
  });
  client = clientFor(await apid.talosconfig({ cluster: "prod" }));
});

afterAll(async () => {
  client.close();
  await apid.stop();
});

describe("foundation", () => {
  test("talosconfig() is Talos-shaped: base64 PEM, Ed25519 key label, os:reader client cert", async () => {
    const text = await apid.talosconfig({ cluster: "prod", roles: ["os:reader"] });
    const ctx = contextOf(text);
    expect(ctx.endpoints).toEqual([apid.endpoint]);
    expect(ctx.cluster).toBe("prod");
    expect(ctx.key.split("\n")[0]).toBe("-----BEGIN ED25519 PRIVATE KEY-----");
    const cert = new X509Certificate(ctx.crt);
    expect(cert.subject.split("\n")).toContain("O=os:reader");
    expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.2"]);
    expect(cert.publicKey.asymmetricKeyType).toBe("ed25519");
    expect(cert.checkIssued(new X509Certificate(ctx.ca))).toBe(true);
    const server = new X509Certificate(apid.pki.server.cert);
    expect(server.subjectAltName).toContain("DNS:talos.default");
    expect(server.subjectAltName).toContain("IP Address:127.0.0.1");
  });

  test("Get PlatformMetadata over mutual TLS, routed by the node header", async () => {
    const r = await get(client, PM, AWS_IP);
    const spec = PlatformMetadataSpec.decode(r.spec?.protoSpec ?? new Uint8Array());
    expect(spec.providerId).toBe("aws:///us-east-1a/i-0a1b2c3d4e5f67890");
    expect(spec.platform).toBe("aws");
    const gcp = await get(client, PM, GCP_IP);
    expect(PlatformMetadataSpec.decode(gcp.spec?.protoSpec ?? new Uint8Array()).spot).toBe(true);
  });

  test("an unknown node gives Unavailable", async () => {
    const s = await status(unary(client, PATHS.get, getReq(PM), { node: "10.99.0.1" }));
    expect(s.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(s.details).toContain("10.99.0.1:50000");
  });

  test("a nodes header on COSI gives InvalidArgument", async () => {
    const s = await status(unary(client, PATHS.get, getReq(PM), { nodes: `${AWS_IP},${GCP_IP}` }));
    expect(s.code).toBe(GrpcStatus.INVALID_ARGUMENT);
  });

  test("a client certificate from another CA is refused at the handshake", async () => {
    const foreign = await createCA("not-talos", "ed25519");
    const c = clientFor(await apid.talosconfig({ clientCA: foreign }));
    try {
      const s = await status(unary(c, PATHS.get, getReq(PM), { node: AWS_IP }));
      expect(s.code).toBe(GrpcStatus.UNAVAILABLE);
      expect(apid.calls({ node: "__never__" })).toBe(0);
    } finally {
      c.close();
    }
  });
});

describe("FakeApid routing and errors", () => {
  test.each([
    ["empty node", { node: "" }, GrpcStatus.INTERNAL, "invalid target"],
    ["node with a port", { node: `${AWS_IP}:50000` }, GrpcStatus.INTERNAL, "invalid target"],
    ["two node values", { node: [AWS_IP, GCP_IP] }, GrpcStatus.INVALID_ARGUMENT, "single-valued"],
  ] as const)("Get with %s", async (_name, headers, code, text) => {
    const s = await status(
      unary(client, PATHS.get, getReq(PM), headers as Record<string, string | string[]>),
    );
    expect(s).toEqual({ code, details: expect.stringContaining(text) });
  });

  test("NotFound uses Talos' message format", async () => {
    const si = RESOURCES.systeminformation;
    const s = await status(unary(client, PATHS.get, getReq(si), { node: RPI_IP }));
    expect(s).toEqual({
      code: GrpcStatus.NOT_FOUND,
      details:
        "resource SystemInformations.hardware.talos.dev(hardware/systeminformation@undefined) doesn't exist",
    });
  });

  test.each([
    [
      "unknown type",
      { namespace: "runtime", type: "Secrets.talos.dev", id: "x" },
      'resource type "Secrets.talos.dev" is not supported',
    ],
    [
      "unknown namespace",
      { namespace: "nonexistent", type: PM.type, id: PM.id },
      'namespace "nonexistent" is not supported',
    ],
  ])("PermissionDenied for an %s, in Talos' words", async (_name, r, details) => {
    const s = await status(unary(client, PATHS.get, getReq(r), { node: AWS_IP }));
    expect(s).toEqual({ code: GrpcStatus.PERMISSION_DENIED, details });
  });

  test("a known type in another namespace Talos registers passes the access policy and is not found", async () => {
    const s = await status(
      unary(client, PATHS.get, getReq({ ...PM, namespace: "secrets" }), { node: AWS_IP }),
    );
    expect(s).toEqual({
      code: GrpcStatus.NOT_FOUND,
      details: "resource PlatformMetadatas.talos.dev(secrets/platformmetadata@undefined) doesn't exist",
    });
    // Talos looks the definition up lowercased: the type passes, the state (exact type) has nothing.
    const lower = await status(
      unary(client, PATHS.get, getReq({ ...PM, type: PM.type.toLowerCase() }), { node: AWS_IP }),
    );
    expect(lower.code).toBe(GrpcStatus.NOT_FOUND);
  });

  test.each([PATHS.create, PATHS.update, PATHS.destroy])("PermissionDenied for writes: %s", async (path) => {
    const s = await status(unary(client, path, new Uint8Array(), { node: AWS_IP }));
    expect(s.code).toBe(GrpcStatus.PERMISSION_DENIED);
  });

  test("PermissionDenied for a certificate without a reader role", async () => {
    const c = clientFor(await apid.talosconfig({ roles: ["os:etcd:backup"] }));
    try {
      const s = await status(unary(c, PATHS.get, getReq(PM), { node: AWS_IP }));
      expect(s.code).toBe(GrpcStatus.PERMISSION_DENIED);
    } finally {
      c.close();
    }
  });

  test("ControllerManagerConfig is served without a node header; NotFound when unset", async () => {
    const cmc = RESOURCES.controllermanagerconfig;
    const r = await get(client, cmc);
    expect(r.spec?.yamlSpec).toContain("10.244.0.0/16");
    const worker = await status(unary(client, PATHS.get, getReq(cmc), { node: AWS_IP }));
    expect(worker.code).toBe(GrpcStatus.NOT_FOUND);
    apid.setControllerManagerConfig(undefined);
    try {
      expect((await status(unary(client, PATHS.get, getReq(cmc)))).code).toBe(GrpcStatus.NOT_FOUND);
    } finally {
      apid.setControllerManagerConfig({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] });
    }
  });

  test("both spec forms are filled and metadata is complete", async () => {
    const r = await get(client, PM, AWS_IP);
    expect(r.spec?.protoSpec.length).toBeGreaterThan(0);
    expect(parseYaml(r.spec?.yamlSpec ?? "")).toMatchObject({
      platform: "aws",
      instanceType: "m6i.large",
      providerId: "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
      internalDNS: "ip-172-31-20-15.ec2.internal",
    });
    const m = r.metadata;
    expect(m?.version).toMatch(/^\d+$/);
    expect(m?.phase).toBe("running");
    expect(m?.created?.seconds).toBeGreaterThan(0n);
    expect(m?.updated?.seconds).toBeGreaterThan(0n);
    expect([m?.namespace, m?.type, m?.id]).toEqual([PM.namespace, PM.type, PM.id]);
  });

  test("Nodename (namespace k8s) and HostnameStatus (namespace network) with Talos YAML keys", async () => {
    const n = await get(client, RESOURCES.nodename, AWS_IP);
    expect([n.metadata?.namespace, n.metadata?.type, n.metadata?.id]).toEqual([
      "k8s",
      "Nodenames.kubernetes.talos.dev",
      "nodename",
    ]);
    expect(NodenameSpec.decode(n.spec?.protoSpec ?? new Uint8Array()).nodename).toBe(
      "ip-172-31-20-15.ec2.internal",
    );
    expect(parseYaml(n.spec?.yamlSpec ?? "")).toMatchObject({ nodename: "ip-172-31-20-15.ec2.internal" });
    const h = await get(client, RESOURCES.hostname, AWS_IP);
    expect([h.metadata?.namespace, h.metadata?.type, h.metadata?.id]).toEqual([
      "network",
      "HostnameStatuses.net.talos.dev",
      "hostname",
    ]);
    const spec = HostnameStatusSpec.decode(h.spec?.protoSpec ?? new Uint8Array());
    expect([spec.hostname, spec.domainname]).toEqual(["ip-172-31-20-15", "ec2.internal"]);
    expect(parseYaml(h.spec?.yamlSpec ?? "")).toEqual({
      hostname: "ip-172-31-20-15",
      domainname: "ec2.internal",
    });
  });

  test("List streams one resource per message, with Talos YAML keys", async () => {
    const all = await list(client, RESOURCES.addresses, { node: AWS_IP });
    expect(all.map((r) => r.metadata?.id)).toContain("external/54.210.33.17/32");
    const ext = all.find((r) => r.metadata?.id === "external/54.210.33.17/32");
    expect(parseYaml(ext?.spec?.yamlSpec ?? "")).toMatchObject({
      address: "54.210.33.17/32",
      linkName: "external",
      family: "inet4",
      scope: "global",
      flags: "permanent",
    });
  });

  test("NodeIPConfig (namespace k8s, id kubelet) and LinkStatuses (no LinkStatus for `external`) with Talos YAML keys", async () => {
    const c = await get(client, RESOURCES.nodeipconfig, AWS_IP);
    expect([c.metadata?.namespace, c.metadata?.type, c.metadata?.id]).toEqual([
      "k8s",
      "NodeIPConfigs.kubernetes.talos.dev",
      "kubelet",
    ]);
    // The default is empty: no proto bytes, and Talos' YAML drops validSubnets (omitempty) only.
    expect(c.spec?.protoSpec.length).toBe(0);
    expect(parseYaml(c.spec?.yamlSpec ?? "")).toEqual({ excludeSubnets: [] });
    const links = await list(client, RESOURCES.links, { node: AWS_IP });
    // By default one link per link name of the addresses, but none for `external`; by id, as COSI lists.
    expect(links.map((r) => [r.metadata?.namespace, r.metadata?.id])).toEqual([
      ["network", "eth0"],
      ["network", "kubespan"],
      ["network", "lo"],
    ]);
    const eth0 = links[0];
    expect(LinkStatusSpec.decode(eth0?.spec?.protoSpec ?? new Uint8Array())).toEqual({
      index: 2,
      type: 1,
      flags: 0x11043,
      kind: "",
      linkState: true,
    });
    expect(parseYaml(eth0?.spec?.yamlSpec ?? "")).toMatchObject({
      index: 2,
      type: "ether",
      flags: "UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP",
      kind: "",
      linkState: true,
    });
    expect(parseYaml(links[2]?.spec?.yamlSpec ?? "")).toMatchObject({
      type: "loopback",
      flags: "UP,LOOPBACK,RUNNING,LOWER_UP",
    });
  });

  test("updateNode() changes NodeIPConfig and links with watch events; null destroys the NodeIPConfig", async () => {
    const own = await FakeApid.start({ nodes: [loadFixture("gcp")] });
    const c = clientFor(await own.talosconfig());
    const { namespace, type } = RESOURCES.links;
    const w = watch(c, { namespace, type, bootstrap: true, apiVersion: 1 }, GCP_IP);
    const events = () => w.responses.flatMap((r) => r.event);
    const ids = (t: EventType) =>
      events().flatMap((e) => (e.eventType === t ? [e.resource?.metadata?.id] : []));
    try {
      await w.until(() => ids(EventType.BOOTSTRAPPED).length === 1, "bootstrap");
      expect(ids(EventType.CREATED)).toEqual(["cilium_host", "eth0", "lo"]);
      own.updateNode(GCP_IP, {
        nodeIPConfig: { excludeSubnets: ["10.244.0.0/16", "10.128.0.100"] },
        links: [
          { name: "lo" },
          { name: "eth0", index: 2 },
          { name: "cilium_host", kind: "veth" },
          { name: "kube-ipvs0", kind: "dummy", up: false },
        ],
      });
      const cfg = await get(c, RESOURCES.nodeipconfig, GCP_IP);
      expect(NodeIPConfigSpec.decode(cfg.spec?.protoSpec ?? new Uint8Array())).toEqual({
        validSubnets: [],
        excludeSubnets: ["10.244.0.0/16", "10.128.0.100"],
      });
      await w.until(() => ids(EventType.CREATED).length === 4, "the new link");
      // eth0 is unchanged (its index was already 2): no event; cilium_host keeps its address's
      // link index 6 and the new link counts on from there.
      expect(ids(EventType.CREATED)).toEqual(["cilium_host", "eth0", "lo", "kube-ipvs0"]);
      expect(ids(EventType.UPDATED)).toEqual(["cilium_host"]);
      const spec = (id: string, t: EventType) =>
        LinkStatusSpec.decode(
          events().find((e) => e.eventType === t && e.resource?.metadata?.id === id)?.resource?.spec
            ?.protoSpec ?? new Uint8Array(),
        );
      expect(spec("cilium_host", EventType.UPDATED)).toEqual({
        index: 6,
        type: 1,
        flags: 0x11043,
        kind: "veth",
        linkState: true,
      });
      // Down: neither UP, RUNNING nor LOWER_UP.
      expect(spec("kube-ipvs0", EventType.CREATED)).toEqual({
        index: 7,
        type: 1,
        flags: 0x1002,
        kind: "dummy",
        linkState: false,
      });
      own.updateNode(GCP_IP, { nodeIPConfig: null, links: [{ name: "lo" }] });
      expect(await status(get(c, RESOURCES.nodeipconfig, GCP_IP))).toEqual({
        code: GrpcStatus.NOT_FOUND,
        details: "resource NodeIPConfigs.kubernetes.talos.dev(k8s/kubelet@undefined) doesn't exist",
      });
      await w.until(() => ids(EventType.DESTROYED).length === 3, "destroyed links");
      expect(ids(EventType.DESTROYED)).toEqual(["eth0", "cilium_host", "kube-ipvs0"]);
      expect((await list(c, RESOURCES.links, { node: GCP_IP })).map((r) => r.metadata?.id)).toEqual(["lo"]);
    } finally {
      w.cancel();
      c.close();
      await own.stop();
    }
  });

  test("a node is reachable under each of its IPs (v4 and v6)", async () => {
    const exo = loadFixture("exoscale");
    for (const ip of exo.nodeIPs) {
      const r = await get(client, PM, ip);
      expect(PlatformMetadataSpec.decode(r.spec?.protoSpec ?? new Uint8Array()).hostname).toBe("talos-exo-1");
    }
  });

  test("Version answers for the endpoint, a node, and one-to-many nodes", async () => {
    const v = (b: Buffer) => VersionResponse.decode(b).messages;
    expect(v(await unary(client, PATHS.version, new Uint8Array()))[0]?.version?.tag).toBe("v1.13.0");
    expect(v(await unary(client, PATHS.version, new Uint8Array(), { node: GCP_IP }))[0]?.platform?.name).toBe(
      "gcp",
    );
    const many = v(await unary(client, PATHS.version, new Uint8Array(), { nodes: `${AWS_IP},10.99.0.9` }));
    expect(many.map((m) => [m.metadata?.hostname, m.metadata?.error ?? ""])).toEqual([
      [AWS_IP, ""],
      ["10.99.0.9", "connection refused"],
    ]);
  });

  test("failNext injects a status for one node and method, then calls succeed again", async () => {
    apid.failNext(GCP_IP, "Get", GrpcStatus.DEADLINE_EXCEEDED, 2);
    expect((await status(get(client, PM, GCP_IP))).code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect((await status(get(client, PM, GCP_IP))).code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect((await get(client, PM, AWS_IP)).metadata?.id).toBe(PM.id);
    expect((await get(client, PM, GCP_IP)).metadata?.id).toBe(PM.id);
  });

  test("calls() counts per method, node and type; resetCalls() clears", async () => {
    apid.resetCalls();
    await get(client, PM, AWS_IP);
    await get(client, PM, AWS_IP);
    await list(client, RESOURCES.addresses, { node: GCP_IP });
    await status(get(client, PM, "10.99.0.2"));
    expect(apid.calls({ method: "Get", node: AWS_IP })).toBe(2);
    expect(apid.calls({ method: "Get", node: "10.99.0.2" })).toBe(1);
    expect(apid.calls({ type: RESOURCES.addresses.type })).toBe(1);
    expect(apid.calls()).toBe(4);
    apid.resetCalls();
    expect(apid.calls()).toBe(0);
  });
});

describe("FakeApid Watch", () => {
  test("with id: empty response, the current state, then UPDATED with old", async () => {
    const w = watch(client, { namespace: PM.namespace, type: PM.type, id: PM.id, apiVersion: 1 }, GCP_IP);
    try {
      await w.until(() => w.responses.length >= 2, "initial state");
      expect(w.responses[0]?.event).toEqual([]);
      expect(w.responses[1]?.event[0]?.eventType).toBe(EventType.CREATED);
      const before = w.responses[1]?.event[0]?.resource?.metadata?.version;
      apid.updateNode(GCP_IP, { platformMetadata: { zone: "us-central1-c" } });
      await w.until(() => w.responses.length >= 3, "update");
      const ev = w.responses[2]?.event[0];
      expect(ev?.eventType).toBe(EventType.UPDATED);
      expect(ev?.old?.metadata?.version).toBe(before);
      expect(Number(ev?.resource?.metadata?.version)).toBe(Number(before) + 1);
      const spec = PlatformMetadataSpec.decode(ev?.resource?.spec?.protoSpec ?? new Uint8Array());
      expect(spec.zone).toBe("us-central1-c");
    } finally {
      w.cancel();
    }
  });

  test("with the id of an absent resource: a DESTROYED tombstone", async () => {
    const si = RESOURCES.systeminformation;
    const w = watch(client, { namespace: si.namespace, type: si.type, id: si.id, apiVersion: 1 }, RPI_IP);
    try {
      await w.until(() => w.responses.length >= 2, "tombstone");
      const ev = w.responses[1]?.event[0];
      expect(ev?.eventType).toBe(EventType.DESTROYED);
      expect(ev?.resource?.metadata?.version).toBe("undefined");
      expect(ev?.resource?.metadata?.phase).toBe("running");
      expect(ev?.resource?.spec?.protoSpec.length).toBe(0);
    } finally {
      w.cancel();
    }
  });

  test("without id and with bootstrap: CREATED per item, BOOTSTRAPPED, then diffs", async () => {
    const a = RESOURCES.addresses;
    const w = watch(client, { namespace: a.namespace, type: a.type, bootstrap: true, apiVersion: 1 }, AWS_IP);
    try {
      const n = loadFixture("aws").addresses.length;
      await w.until(() => w.responses.length >= n + 2, "bootstrap");
      const types = w.responses.slice(1).flatMap((r) => r.event.map((e) => e.eventType));
      expect(types).toEqual([...Array(n).fill(EventType.CREATED), EventType.BOOTSTRAPPED]);
      const current = apid.node(AWS_IP)?.addresses ?? [];
      apid.updateNode(AWS_IP, { addresses: current.filter((x) => x.linkName !== "external") });
      await w.until(() => w.responses.length >= n + 3, "destroy");
      const ev = w.responses[n + 2]?.event[0];
      expect([ev?.eventType, ev?.resource?.metadata?.id]).toEqual([
        EventType.DESTROYED,
        "external/54.210.33.17/32",
      ]);
      apid.updateNode(AWS_IP, { addresses: current });
    } finally {
      w.cancel();
    }
  });

  test("api_version 0 suppresses BOOTSTRAPPED", async () => {
    const a = RESOURCES.addresses;
    const current = apid.node(RPI_IP)?.addresses ?? [];
    const w = watch(client, { namespace: a.namespace, type: a.type, bootstrap: true }, RPI_IP);
    try {
      const n = loadFixture("metal-56").addresses.length;
      await w.until(() => w.responses.length >= n + 1, "bootstrap");
      // One more event after the bootstrap contents: a BOOTSTRAPPED marker would come before it.
      apid.updateNode(RPI_IP, { addresses: current.slice(0, -1) });
      await w.until(() => w.responses.length >= n + 2, "the event after the bootstrap contents");
      const types = w.responses.slice(1).flatMap((r) => r.event.map((e) => e.eventType));
      expect(types).toEqual([...Array(n).fill(EventType.CREATED), EventType.DESTROYED]);
    } finally {
      w.cancel();
      apid.updateNode(RPI_IP, { addresses: current });
    }
  });

  test("id with bootstrap_contents is Unimplemented", async () => {
    const w = watch(
      client,
      {
        namespace: PM.namespace,
        type: PM.type,
        id: PM.id,
        bootstrap: true,
        apiVersion: 1,
      },
      AWS_IP,
    );
    await w.until(() => w.error !== undefined, "error");
    expect(w.error).toMatchObject({
      code: GrpcStatus.UNIMPLEMENTED,
      details: "bootstrap contents is not implemented for resource watch",
    });
  });

  test("DESTROYED carries the resource as stored, its version unchanged", async () => {
    const a = RESOURCES.addresses;
    const w = watch(client, { namespace: a.namespace, type: a.type, bootstrap: true, apiVersion: 1 }, AWS_IP);
    const current = apid.node(AWS_IP)?.addresses ?? [];
    try {
      const n = current.length;
      await w.until(() => w.responses.length >= n + 2, "bootstrap");
      const id = "external/54.210.33.17/32";
      const created = w.responses.flatMap((r) => r.event).find((e) => e.resource?.metadata?.id === id);
      apid.updateNode(AWS_IP, { addresses: current.filter((x) => x.linkName !== "external") });
      await w.until(() => w.responses.length >= n + 3, "destroy");
      const destroyed = w.responses[n + 2]?.event[0];
      expect(destroyed?.eventType).toBe(EventType.DESTROYED);
      expect(destroyed?.resource?.metadata).toEqual(created?.resource?.metadata);
      expect(destroyed?.resource?.spec).toEqual(created?.resource?.spec);
    } finally {
      apid.updateNode(AWS_IP, { addresses: current });
      w.cancel();
    }
  });

  test("setDown cuts the node's streams with Unavailable and refuses calls until up", async () => {
    const w = watch(client, { namespace: PM.namespace, type: PM.type, id: PM.id, apiVersion: 1 }, RPI_IP);
    await w.until(() => w.responses.length >= 2, "initial state");
    expect(apid.watchers(RPI_IP)).toBe(1);
    apid.setDown(RPI_IP, true);
    try {
      await w.until(() => w.error !== undefined, "cut");
      expect(w.error?.code).toBe(GrpcStatus.UNAVAILABLE);
      expect((await status(get(client, PM, RPI_IP))).code).toBe(GrpcStatus.UNAVAILABLE);
    } finally {
      apid.setDown(RPI_IP, false);
    }
    expect((await get(client, PM, RPI_IP)).metadata?.id).toBe(PM.id);
  });
});

describe("FakeApid at benchmark scale", () => {
  test("5,000 generated nodes, each reachable under its own IP", async () => {
    const own = await FakeApid.start();
    const c = clientFor(await own.talosconfig());
    try {
      const nodes = generateNodes(5000, { template: "gcp" });
      own.addNodes(nodes);
      expect(own.nodeCount).toBe(5000);
      for (const n of [nodes[0], nodes[2500], nodes[4999]]) {
        const r = await get(c, PM, n?.nodeIPs[0] as string);
        const spec = PlatformMetadataSpec.decode(r.spec?.protoSpec ?? new Uint8Array());
        expect(spec.hostname).toBe(n?.name as string);
      }
    } finally {
      c.close();
      await own.stop();
    }
  });
});

describe("FakeApid lifecycle", () => {
  test("restart keeps port and certificates and breaks open streams", async () => {
    const w = watch(client, { namespace: PM.namespace, type: PM.type, id: PM.id, apiVersion: 1 }, AWS_IP);
    await w.until(() => w.responses.length >= 2, "initial state");
    const port = apid.port;
    await apid.restart();
    await w.until(() => w.error !== undefined, "broken stream");
    expect(apid.port).toBe(port);
    expect((await get(client, PM, AWS_IP)).metadata?.id).toBe(PM.id);
  });

  test("rotateClientCA refuses old client certificates; new talosconfigs work", async () => {
    const own = await FakeApid.start({ nodes: [loadFixture("hcloud")] });
    const old = clientFor(await own.talosconfig());
    try {
      expect((await get(old, PM, "10.0.1.2")).metadata?.id).toBe(PM.id);
      await own.rotateClientCA();
      expect((await status(get(old, PM, "10.0.1.2"))).code).toBe(GrpcStatus.UNAVAILABLE);
      const fresh = clientFor(await own.talosconfig());
      try {
        expect((await get(fresh, PM, "10.0.1.2")).metadata?.id).toBe(PM.id);
      } finally {
        fresh.close();
      }
    } finally {
      old.close();
      await own.stop();
    }
  });

  test("removeNode makes every IP of the node unknown", async () => {
    const own = await FakeApid.start({ nodes: [loadFixture("exoscale")] });
    const c = clientFor(await own.talosconfig());
    try {
      own.removeNode("185.19.28.10");
      expect(own.nodeCount).toBe(0);
      const v6 = "2a04:c43:e00:6f1b:4b0:b0ff:fe00:1a2b";
      expect((await status(get(c, PM, v6))).code).toBe(GrpcStatus.UNAVAILABLE);
    } finally {
      c.close();
      await own.stop();
    }
  });
});
