// Conformance of the project's Talos client (lib/talos.ts, lib/grpc.ts, lib/taloswire.ts) against
// the Talos simulator (tests/support/talossim): COSI's own in-memory state and gRPC State server,
// machinery's resource types and marshalling, Talos' access policy, apid's routing and status codes,
// grpc-go's keepalive enforcement. Every call the CCM makes, every watch event kind, the errors the
// client maps, the roles of the certificates Talos issues, routing by `node`, a stopped and an
// unknown machine, resubscribe after a restart.
//
// `npm test` runs this file twice: against the simulated apid, and with Talos' own apid in front of
// the simulated machines (tests/run.ts THROUGH_APID, TALOS_SIM_APID=1), where apid's role injection,
// routing, proxying and stream teardown are upstream code too. Through apid, the simulator's network
// namespace is checked too: a process run there reaches a machine's own apid at <ip>:50000 and
// apid's endpoint, host addresses forwarded in, and serves addresses exposed on the host.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { GrpcChannel, GrpcError } from "../../lib/grpc.ts";
import { Registry } from "../../lib/metrics.ts";
import {
  type ResourceKind,
  statusError,
  TalosClient,
  TalosNotFoundError,
  TalosPermissionError,
  type TalosWatchEvent,
} from "../../lib/talos.ts";
import { GetRequest, Resource, WatchRequest } from "../../lib/talos_pb.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { PATHS, RESOURCES } from "../../lib/taloswire.ts";
import { freePort, until, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, generateNodes } from "../support/fixtures.ts";
import { simMachineCalls } from "../support/simmachines.ts";
import { collect, failure } from "../support/talosclient.ts";
import { LOCAL_MACHINE, machineCalls, type SimResource, TalosSim } from "../support/talossim.ts";

const NODE = "10.0.0.5";
const EMPTY = "10.0.0.6";
const FAST = { initialMs: 10, maxMs: 80 };

const PLATFORM = {
  platform: "aws",
  hostname: "ip-10-0-0-5",
  region: "us-east-1",
  zone: "us-east-1a",
  instanceType: "m5.large",
  instanceId: "i-0abc",
  providerId: "aws:///us-east-1a/i-0abc",
  spot: true,
  internalDNS: "ip-10-0-0-5.ec2.internal",
  externalDNS: "ec2-1-2-3-4.compute.amazonaws.com",
  tags: { team: "a" },
};
const SYSINFO = {
  manufacturer: "Amazon EC2",
  productName: "m5.large",
  version: "1.0",
  serialnumber: "ec2abc",
  uuid: "ec2abcde-0000-1111-2222-333344445555",
  wakeUpType: "Power Switch",
  skuNumber: "sku-1",
};
const CMC = { enabled: true, podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] };

function res(kind: ResourceKind, spec: Record<string, unknown>, id?: string): SimResource {
  const { namespace, type } = RESOURCES[kind];
  const rid = id ?? RESOURCES[kind].id;
  if (rid === undefined) throw new Error(`${kind} needs an id`);
  return { namespace, type, id: rid, spec };
}

const ADDRESSES: SimResource[] = [
  res(
    "addresses",
    {
      address: "10.0.0.5/24",
      local: "10.0.0.5",
      linkIndex: 2,
      linkName: "eth0",
      family: "inet4",
      scope: "global",
      flags: "permanent",
    },
    "eth0/10.0.0.5/24",
  ),
  res(
    "addresses",
    {
      address: "fd00::5/64",
      linkIndex: 2,
      linkName: "eth0",
      family: "inet6",
      scope: "global",
      flags: "permanent",
    },
    "eth0/fd00::5/64",
  ),
];
const LINKS: SimResource[] = [
  res(
    "links",
    { index: 1, type: "loopback", flags: "UP,LOOPBACK,RUNNING,LOWER_UP", kind: "", linkState: true },
    "lo",
  ),
  res(
    "links",
    { index: 2, type: "ether", flags: "UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP", kind: "", linkState: true },
    "eth0",
  ),
  res(
    "links",
    { index: 3, type: "ether", flags: "BROADCAST,MULTICAST", kind: "dummy", linkState: false },
    "dummy0",
  ),
];

let sim: TalosSim;
let dir: string;
const open: TalosClient[] = [];

beforeAll(async () => {
  sim = await TalosSim.start();
  dir = mkdtempSync(join(tmpdir(), "talos-sim-e2e-"));
  await sim.addMachine(NODE, { platform: "aws" });
  await sim.addMachine(EMPTY);
  for (const r of [
    res("platformmetadata", PLATFORM),
    res("systeminformation", SYSINFO),
    res("nodename", { nodename: "w1", hostnameVersion: "3", skipNodeRegistration: false }),
    res("hostname", { hostname: "w1", domainname: "example.org" }),
    res("nodeipconfig", { validSubnets: ["10.0.0.0/8", "!10.0.0.9"], excludeSubnets: ["10.244.0.0/16"] }),
    ...ADDRESSES,
    ...LINKS,
  ])
    await sim.put(NODE, r);
  await sim.put(LOCAL_MACHINE, res("controllermanagerconfig", CMC));
});

afterAll(async () => {
  for (const c of open) c.close();
  await sim?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

let files = 0;

/** A client on the simulator's os:reader talosconfig, or on one with `roles`. */
async function clientFor(
  opts: { roles?: string[]; server?: TalosSim; attempts?: number } = {},
): Promise<TalosClient> {
  const server = opts.server ?? sim;
  let path = server.talosconfig;
  if (opts.roles) path = await server.writeTalosconfig(join(dir, `talosconfig-${files++}`), opts.roles);
  const client = new TalosClient({
    config: loadTalosConfig({ path, env: {} }),
    registry: new Registry(),
    backoff: FAST,
    watchBackoff: FAST,
    callTimeoutMs: 5_000,
    ...(opts.attempts === undefined ? {} : { attempts: opts.attempts }),
  });
  open.push(client);
  return client;
}

/** A raw channel to the simulator with the credentials of a talosconfig, as the client builds it. */
function channelFor(path: string, extra: { keepaliveMs?: number } = {}): GrpcChannel {
  const c = loadTalosConfig({ path, env: {} });
  const ep = c.endpoints[0] as { host: string; port: number };
  const ch = new GrpcChannel({
    host: ep.host,
    port: ep.port,
    ...(c.ca === undefined ? {} : { ca: c.ca }),
    cert: c.crt,
    key: c.key,
    servername: "talos",
    ...extra,
  });
  return ch;
}

/** A unary call through a raw channel, mapped to a TalosError as the client maps statuses. */
async function rawCall(path: string, method: string, body: Uint8Array, metadata: Record<string, string>) {
  const ch = channelFor(path);
  try {
    return await ch.unary(method, body, { metadata, timeoutMs: 5_000 });
  } catch (err) {
    throw statusError(method, err);
  } finally {
    ch.close();
  }
}

/** A Get through a raw channel, mapped to a TalosError as the client maps statuses. */
function rawGet(path: string, r: { namespace: string; type: string; id: string }, node = NODE) {
  return rawCall(path, PATHS.get, GetRequest.encode(r).finish(), { node });
}

/**
 * The bodies of the COSI writes for `r`: Create and Update carry the resource (fields 1 and 2 of
 * cosi.resource.CreateRequest and UpdateRequest; Update also empty options, field 3, as COSI's
 * client always sends them), Destroy its namespace, type and id (as Get).
 */
function writeBodies(r: SimResource, opts: { updateOptions?: boolean } = {}): Array<[string, Uint8Array]> {
  const resource = (field: number) => {
    const w = new BinaryWriter();
    if (field === 2 && opts.updateOptions !== false) w.uint32((3 << 3) | 2).bytes(new Uint8Array());
    Resource.encode(
      {
        metadata: {
          namespace: r.namespace,
          type: r.type,
          id: r.id,
          version: "1",
          owner: "",
          phase: "running",
          finalizers: [],
          labels: {},
          annotations: {},
        },
        spec: { protoSpec: new Uint8Array(), yamlSpec: JSON.stringify(r.spec) },
      },
      w.uint32((field << 3) | 2).fork(),
    ).join();
    return w.finish();
  };
  return [
    [PATHS.create, resource(1)],
    [PATHS.update, resource(2)],
    [PATHS.destroy, GetRequest.encode({ namespace: r.namespace, type: r.type, id: r.id }).finish()],
  ];
}

describe("calls", () => {
  test("Get of every singleton the CCM reads decodes into the values written", async () => {
    const client = await clientFor();
    const { serialnumber, ...sys } = SYSINFO;
    expect(await client.platformMetadata(NODE)).toEqual(PLATFORM);
    expect(await client.systemInformation(NODE)).toEqual({ ...sys, serialNumber: serialnumber });
    expect(await client.nodename(NODE)).toBe("w1");
    expect(await client.hostname(NODE)).toEqual({
      hostname: "w1",
      domainname: "example.org",
      fqdn: "w1.example.org",
    });
    expect(await client.nodeIPConfig(NODE)).toEqual({
      validSubnets: ["10.0.0.0/8", "!10.0.0.9"],
      excludeSubnets: ["10.244.0.0/16"],
    });
    expect(await client.controllerManagerConfig()).toEqual({
      podCIDRs: CMC.podCIDRs,
      serviceCIDRs: CMC.serviceCIDRs,
    });
  });

  test("List of addresses and links: every resource, with the numbers Talos' YAML names stand for", async () => {
    const client = await clientFor();
    const addrs = await client.addresses(NODE);
    // Talos sends IFA_LOCAL = 10.0.0.5 (ADDRESSES above); equal to the address, it is not kept.
    expect(addrs.sort((a, b) => a.id.localeCompare(b.id))).toEqual([
      {
        id: "eth0/10.0.0.5/24",
        address: "10.0.0.5/24",
        linkName: "eth0",
        linkIndex: 2,
        family: "inet4",
        scope: 0,
        flags: 0x80,
      },
      {
        id: "eth0/fd00::5/64",
        address: "fd00::5/64",
        linkName: "eth0",
        linkIndex: 2,
        family: "inet6",
        scope: 0,
        flags: 0x80,
      },
    ]);
    const links = await client.links(NODE);
    expect(links.sort((a, b) => a.index - b.index)).toEqual([
      { name: "lo", index: 1, type: 772, kind: "", flags: 0x1 | 0x8 | 0x40 | 0x10000, linkState: true },
      {
        name: "eth0",
        index: 2,
        type: 1,
        kind: "",
        flags: 0x1 | 0x2 | 0x40 | 0x1000 | 0x10000,
        linkState: true,
      },
      { name: "dummy0", index: 3, type: 1, kind: "dummy", flags: 0x2 | 0x1000, linkState: false },
    ]);
    expect(await client.addresses(EMPTY)).toEqual([]);
  });

  test("Version of the endpoint and of a node", async () => {
    const client = await clientFor();
    const endpoint = await client.version();
    expect(endpoint).toMatchObject({ tag: "v1.13.5", sha: "talossim", platform: "metal" });
    expect(endpoint.arch).toBe(process.arch === "arm64" ? "arm64" : "amd64");
    expect(await client.version({ nodeIP: NODE })).toMatchObject({ tag: "v1.13.5", platform: "aws" });
  });

  test("a missing resource: NotFound is TalosNotFoundError; missing system information is undefined", async () => {
    const client = await clientFor();
    const e = await failure(client.platformMetadata(EMPTY));
    expect(e).toBeInstanceOf(TalosNotFoundError);
    expect(e.message).toContain(
      `resource PlatformMetadatas.talos.dev(runtime/platformmetadata@undefined) doesn't exist`,
    );
    expect(await client.systemInformation(EMPTY)).toBeUndefined();
  });
});

describe("errors", () => {
  test('an unknown resource type: PermissionDenied `resource type "X" is not supported`', async () => {
    const e = await failure(
      rawGet(sim.talosconfig, { namespace: "network", type: "Nopes.talos.dev", id: "x" }),
    );
    expect(e).toBeInstanceOf(TalosPermissionError);
    expect(e.message).toContain('resource type "Nopes.talos.dev" is not supported');
  });

  test('an unknown namespace: PermissionDenied `namespace "X" is not supported`', async () => {
    const { type } = RESOURCES.platformmetadata;
    const e = await failure(rawGet(sim.talosconfig, { namespace: "nope", type, id: "platformmetadata" }));
    expect(e).toBeInstanceOf(TalosPermissionError);
    expect(e.message).toContain('namespace "nope" is not supported');
  });

  test("a sensitive type is refused to os:reader and allowed to os:admin", async () => {
    const api = { namespace: "secrets", type: "ApiCertificates.secrets.talos.dev", id: "api" };
    const e = await failure(rawGet(sim.talosconfig, api));
    expect(e).toBeInstanceOf(TalosPermissionError);
    expect(e.message).toContain("(not authorized)");
    // os:admin passes the policy and reaches the state: the resource does not exist
    expect(await failure(rawGet(sim.adminTalosconfig, api))).toBeInstanceOf(TalosNotFoundError);
  });

  test("a certificate without a reading role is refused every call", async () => {
    const client = await clientFor({ roles: ["os:etcd:backup"] });
    const calls = [() => client.platformMetadata(NODE), () => client.addresses(NODE), () => client.version()];
    for (const call of calls) {
      const e = await failure(call());
      expect(e).toBeInstanceOf(TalosPermissionError);
      expect(e.message).toContain("(not authorized)");
    }
  });

  test("an unknown machine is Unavailable (connection refused) and retried", async () => {
    const client = await clientFor({ attempts: 2 });
    const e = await failure(client.platformMetadata("10.200.0.1"));
    expect([e.code, e.retryable, e.grpcCode]).toEqual(["unavailable", true, GrpcStatus.UNAVAILABLE]);
    expect(e.message).toContain("dial tcp 10.200.0.1:50000: connect: connection refused");
    const e6 = await failure(client.platformMetadata("fd00::200"));
    expect(e6.message).toContain("dial tcp [fd00::200]:50000");
  });

  test("a node with a port is Internal `invalid target`, not retried", async () => {
    const client = await clientFor();
    const e = await failure(client.platformMetadata(`${NODE}:50000`));
    expect([e.code, e.retryable, e.grpcCode]).toEqual(["internal", false, GrpcStatus.INTERNAL]);
    expect(e.message).toContain(`invalid target "${NODE}:50000"`);
  });

  test("a singleton watch asked with bootstrap contents is Unimplemented", async () => {
    const ch = channelFor(sim.talosconfig);
    const { namespace, type, id } = RESOURCES.nodename;
    const req = WatchRequest.encode({
      namespace,
      type,
      id,
      apiVersion: 1,
      options: {
        bootstrapContents: true,
        tailEvents: 0,
        labelQuery: [],
        aggregated: false,
        bootstrapBookmark: false,
      },
    }).finish();
    try {
      const stream = ch.serverStream(PATHS.watch, req, { metadata: { node: NODE } });
      const err = await stream.next().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(GrpcError);
      expect([(err as GrpcError).code, (err as GrpcError).details]).toEqual([
        GrpcStatus.UNIMPLEMENTED,
        "bootstrap contents is not implemented for resource watch",
      ]);
    } finally {
      ch.close();
    }
  });
});

describe("the roles of the certificates Talos issues", () => {
  // The CCM's talosconfig as kubernetesTalosAPIAccess issues it (machined's kubeaccess
  // serviceaccount controller): a client certificate signed by the OS CA, role os:reader in Subject
  // O, valid 6 hours. apid takes the roles from the certificate and passes them on in the
  // `talos-role` metadata; machined's authorizer and resource policy decide.
  const ROLES_NODE = "10.0.3.1";
  const NODENAME = res("nodename", {
    nodename: "roles-1",
    hostnameVersion: "1",
    skipNodeRegistration: false,
  });
  let ccmConfig: string;
  beforeAll(async () => {
    await sim.addMachine(ROLES_NODE);
    await sim.put(ROLES_NODE, NODENAME);
    await sim.put(ROLES_NODE, ADDRESSES[0] as SimResource);
    ccmConfig = await sim.writeTalosconfig(join(dir, "talosconfig-ccm"), ["os:reader"], 6);
  });

  test("os:reader may Get, List, Watch and ask Version, of the endpoint's machine and of a node", async () => {
    const client = new TalosClient({
      config: loadTalosConfig({ path: ccmConfig, env: {} }),
      registry: new Registry(),
      backoff: FAST,
      watchBackoff: FAST,
      callTimeoutMs: 5_000,
    });
    open.push(client);
    expect(await client.nodename(ROLES_NODE)).toBe("roles-1");
    expect((await client.addresses(ROLES_NODE)).map((a) => a.id)).toEqual(["eth0/10.0.0.5/24"]);
    expect(await client.controllerManagerConfig()).toEqual({
      podCIDRs: CMC.podCIDRs,
      serviceCIDRs: CMC.serviceCIDRs,
    });
    expect(await client.version()).toMatchObject({ tag: "v1.13.5", platform: "metal" });
    expect(await client.version({ nodeIP: ROLES_NODE })).toMatchObject({ tag: "v1.13.5", platform: "metal" });
    const w = collect(client, ROLES_NODE, "nodename");
    try {
      await until(() => w.events.length === 1, "the watch's first event");
      expect(w.events[0]).toMatchObject({ type: "created", resource: { nodename: "roles-1" } });
    } finally {
      await w.stop();
    }
  });

  test("os:reader is refused every write (not authorized); os:admin passes the role check and meets the resource policy", async () => {
    const admin = await sim.writeTalosconfig(join(dir, "talosconfig-roles-admin"), ["os:admin"], 6);
    for (const metadata of [{ node: ROLES_NODE }, {}]) {
      for (const [method, body] of writeBodies(NODENAME)) {
        const refused = await failure(rawCall(ccmConfig, method, body, metadata));
        expect([method, refused.constructor.name, refused.message]).toEqual([
          method,
          "TalosPermissionError",
          expect.stringContaining("(not authorized)"),
        ]);
        const policy = await failure(rawCall(admin, method, body, metadata));
        expect([method, policy.constructor.name, policy.message]).toEqual([
          method,
          "TalosPermissionError",
          expect.stringContaining("(write access is not allowed)"),
        ]);
      }
    }
    // nothing was written
    expect(await (await clientFor()).nodename(ROLES_NODE)).toBe("roles-1");
  });

  test("an Update without options (a panic in COSI's State server) is Internal, as Talos' gRPC factory recovers it", async () => {
    const admin = await sim.writeTalosconfig(join(dir, "talosconfig-roles-admin"), ["os:admin"], 6);
    const [method, body] = writeBodies(NODENAME, { updateOptions: false })[1] as [string, Uint8Array];
    const e = await failure(rawCall(admin, method, body, { node: ROLES_NODE }));
    expect([e.code, e.grpcCode]).toEqual(["internal", GrpcStatus.INTERNAL]);
    expect(e.message).toContain("nil pointer dereference");
    // the machine still answers
    expect(await (await clientFor()).nodename(ROLES_NODE)).toBe("roles-1");
  });

  test("os:reader is refused a sensitive resource, of a node and of the endpoint's machine", async () => {
    const api = { namespace: "secrets", type: "ApiCertificates.secrets.talos.dev", id: "api" };
    for (const metadata of [{ node: ROLES_NODE }, {}]) {
      const e = await failure(rawCall(ccmConfig, PATHS.get, GetRequest.encode(api).finish(), metadata));
      expect(e).toBeInstanceOf(TalosPermissionError);
      expect(e.message).toContain("(not authorized)");
    }
  });

  test("roles come from the certificate: os:reader claiming os:admin in the talos-role metadata is still refused", async () => {
    const api = GetRequest.encode({
      namespace: "secrets",
      type: "ApiCertificates.secrets.talos.dev",
      id: "api",
    }).finish();
    for (const metadata of [{ node: ROLES_NODE }, {}]) {
      const claimed = { ...metadata, "talos-role": "os:admin" };
      const get = await failure(rawCall(ccmConfig, PATHS.get, api, claimed));
      expect(get.message).toContain("(not authorized)");
      const [method, body] = writeBodies(NODENAME)[2] as [string, Uint8Array];
      const destroy = await failure(rawCall(ccmConfig, method, body, claimed));
      expect(destroy.message).toContain("(not authorized)");
    }
  });
});

describe("routing by the node key", () => {
  const MACHINES = [
    { ip: "10.0.4.1", platform: "aws", nodename: "route-v4" },
    { ip: "fd00::4:2", platform: "gcp", nodename: "route-v6" },
    { ip: "10.0.4.3", platform: "azure", nodename: "route-v4b" },
  ] as const;
  beforeAll(async () => {
    for (const m of MACHINES) {
      await sim.addMachine(m.ip, { platform: m.platform });
      await sim.put(
        m.ip,
        res("nodename", { nodename: m.nodename, hostnameVersion: "1", skipNodeRegistration: false }),
      );
    }
    await sim.put(
      LOCAL_MACHINE,
      res("nodename", { nodename: "route-endpoint", hostnameVersion: "1", skipNodeRegistration: false }),
    );
  });

  test("a call with `node` reaches that machine, IPv4 or IPv6; one without reaches the endpoint's own", async () => {
    const client = await clientFor();
    for (const m of MACHINES) {
      expect([m.ip, await client.nodename(m.ip)]).toEqual([m.ip, m.nodename]);
      expect([m.ip, (await client.version({ nodeIP: m.ip })).platform]).toEqual([m.ip, m.platform]);
    }
    // without `node`: the endpoint's own machine (the ControllerManagerConfig is only there)
    expect((await client.version()).platform).toBe("metal");
    expect(await client.controllerManagerConfig()).toEqual({
      podCIDRs: CMC.podCIDRs,
      serviceCIDRs: CMC.serviceCIDRs,
    });
    // its own address as `node` is the same machine (Talos' apid dials itself, which answers locally)
    expect(await client.nodename(LOCAL_MACHINE)).toBe("route-endpoint");
  });

  test("a watch with `node` follows that machine's resource", async () => {
    const client = await clientFor();
    const watches = MACHINES.map((m) => ({ m, w: collect(client, m.ip, "nodename") }));
    try {
      await until(() => watches.every(({ w }) => w.events.length === 1), "each watch's first event");
      const renamed = MACHINES[1].ip;
      await sim.put(
        renamed,
        res("nodename", { nodename: "route-renamed", hostnameVersion: "2", skipNodeRegistration: false }),
      );
      await until(() => watches.some(({ w }) => w.events.length === 2), "the renamed machine's update");
      const seen = (w: (typeof watches)[number]["w"]) =>
        w.events.map((e) => ("resource" in e ? e.resource?.nodename : e.type));
      expect(watches.map(({ m, w }) => [m.ip, seen(w)])).toEqual(
        MACHINES.map((m) => [m.ip, m.ip === renamed ? [m.nodename, "route-renamed"] : [m.nodename]]),
      );
    } finally {
      for (const { w } of watches) await w.stop();
    }
  });

  test("a `node` that is a name nothing resolves is Unavailable: the resolver produced zero addresses", async () => {
    const client = await clientFor({ attempts: 1 });
    const e = await failure(client.nodename("w1"));
    expect([e.code, e.retryable, e.grpcCode]).toEqual(["unavailable", true, GrpcStatus.UNAVAILABLE]);
    expect(e.message).toContain("name resolver error: produced zero addresses");
  });
});

describe("watches", () => {
  test("singleton: tombstone for a missing resource, then created, updated, destroyed", async () => {
    const ip = "10.0.1.1";
    await sim.addMachine(ip);
    const client = await clientFor();
    const w = collect(client, ip, "nodename");
    try {
      await until(() => w.events.length === 1, "the tombstone");
      expect(w.events).toEqual([{ type: "destroyed", id: "nodename" }]);
      const spec = { nodename: "n1", hostnameVersion: "1", skipNodeRegistration: false };
      expect(await sim.put(ip, res("nodename", spec))).toBe("1");
      await sim.put(ip, res("nodename", { ...spec, nodename: "n2" }));
      await sim.destroy(ip, res("nodename", {}));
      await until(() => w.events.length === 4, "created, updated, destroyed");
      expect(w.events.slice(1)).toEqual([
        { type: "created", id: "nodename", version: "1", resource: spec },
        {
          type: "updated",
          id: "nodename",
          version: "2",
          resource: { ...spec, nodename: "n2" },
          old: spec,
        },
        // the stored resource, unchanged (no version bump)
        { type: "destroyed", id: "nodename", resource: { ...spec, nodename: "n2" } },
      ]);
    } finally {
      await w.stop();
    }
  });

  test("list: created for each, bootstrapped, then created, updated, destroyed", async () => {
    const ip = "10.0.1.2";
    await sim.addMachine(ip);
    await sim.put(ip, LINKS[0] as SimResource);
    const client = await clientFor();
    const w = collect(client, ip, "links");
    try {
      await until(() => w.types().includes("bootstrapped"), "bootstrap");
      expect(w.types()).toEqual(["created", "bootstrapped"]);
      await sim.put(ip, LINKS[1] as SimResource);
      await sim.put(ip, {
        ...(LINKS[1] as SimResource),
        spec: { index: 2, type: "ether", flags: "BROADCAST,MULTICAST", kind: "", linkState: false },
      });
      await sim.destroy(ip, LINKS[0] as SimResource);
      await until(() => w.events.length === 5, "created, updated, destroyed");
      expect(w.events.slice(2).map((e) => [e.type, "id" in e ? e.id : ""])).toEqual([
        ["created", "eth0"],
        ["updated", "eth0"],
        ["destroyed", "lo"],
      ]);
      const updated = w.events[3] as Extract<TalosWatchEvent<unknown>, { type: "updated" }>;
      expect(updated).toMatchObject({ version: "2", resource: { flags: 0x2 | 0x1000, linkState: false } });
      expect(updated.old).toMatchObject({ linkState: true });
    } finally {
      await w.stop();
    }
  });

  test("teardown: an update in phase tearingDown, then destroyed", async () => {
    const ip = "10.0.1.3";
    await sim.addMachine(ip);
    await sim.put(ip, {
      ...res("hostname", { hostname: "h", domainname: "" }),
      owner: "network.HostnameStatusController",
    });
    const client = await clientFor();
    const w = collect(client, ip, "hostname");
    try {
      await until(() => w.events.length === 1, "created");
      await sim.destroy(ip, res("hostname", {}), { teardown: true });
      await until(() => w.events.length === 3, "updated, destroyed");
      expect(w.types()).toEqual(["created", "updated", "destroyed"]);
    } finally {
      await w.stop();
    }
  });

  test("a machine that stops: calls fail Unavailable, open watches error and resubscribe when it is back", async () => {
    const ip = "10.0.1.4";
    await sim.addMachine(ip);
    await sim.put(ip, res("platformmetadata", { platform: "metal" }));
    const client = await clientFor({ attempts: 1 });
    const w = collect(client, ip, "platformmetadata");
    try {
      await until(() => w.events.length === 1, "created");
      await sim.stopMachine(ip);
      await until(() => w.types().includes("errored"), "errored");
      const e = await failure(client.platformMetadata(ip));
      expect([e.code, e.retryable]).toEqual(["unavailable", true]);
      expect(e.message).toContain(`dial tcp ${ip}:50000: connect: connection refused`);
      await sim.startMachine(ip);
      await until(() => w.types().filter((t) => t === "created").length === 2, "created after the restart");
      expect(w.types()).toEqual(["created", "errored", "created"]);
      expect(w.ended).toBe(false);
    } finally {
      await w.stop();
    }
  });

  test("watches resubscribe after the simulator restarts", async () => {
    const ip = "10.0.1.5";
    await sim.addMachine(ip);
    await sim.put(ip, ADDRESSES[0] as SimResource);
    await sim.put(ip, res("nodename", { nodename: "r1", hostnameVersion: "1", skipNodeRegistration: false }));
    const client = await clientFor();
    const single = collect(client, ip, "nodename");
    const list = collect(client, ip, "addresses");
    try {
      await until(
        () => single.events.length === 1 && list.types().includes("bootstrapped"),
        "the first state",
      );
      await sim.restart();
      await until(
        () => single.types().filter((t) => t === "created").length === 2,
        "the singleton after the restart",
      );
      await until(
        () => list.types().filter((t) => t === "bootstrapped").length === 2,
        "the list after the restart",
      );
      expect(single.types()).toEqual(["created", "errored", "created"]);
      expect(list.types()).toEqual(["created", "bootstrapped", "errored", "created", "bootstrapped"]);
      expect(await client.nodename(ip)).toBe("r1");
    } finally {
      await single.stop();
      await list.stop();
    }
  });
});

describe("the control surface's bulk seeding and call counts (the bench's)", () => {
  test("a batch adds machines with their resources in one request; a failing call stops it there, the calls before it applied", async () => {
    const specs = generateNodes(3, { prefix: "batch", start: 700 });
    await sim.batch(specs.flatMap(simMachineCalls));
    const client = await clientFor();
    for (const s of specs) {
      const ip = s.nodeIPs[0] as string;
      expect([ip, await client.nodename(ip)]).toEqual([ip, s.name]);
      expect([ip, (await client.platformMetadata(ip)).instanceId]).toEqual([
        ip,
        s.platformMetadata.instanceId,
      ]);
    }
    const [late] = generateNodes(1, { prefix: "batch", start: 703 }) as [FakeNodeSpec];
    const lateIP = late.nodeIPs[0] as string;
    const refused = machineCalls(lateIP, {}, [res("nodename", { nodename: "late" })]);
    refused.splice(1, 0, { method: "POST", path: "/machines", body: { ip: lateIP } }); // exists by then
    const err = await sim.batch(refused).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain(`batch: POST /machines: 409 {"error":"machine ${lateIP} exists"}`);
    // the machine was added (the call before the failing one), its nodename never put (the one after)
    expect(await failure(client.nodename(lateIP))).toBeInstanceOf(TalosNotFoundError);
  });

  test("calls that reach a machine are counted at their start (with Talos' apid: a watch while open)", async () => {
    const [spec] = generateNodes(1, { prefix: "counted", start: 710 }) as [FakeNodeSpec];
    const ip = spec.nodeIPs[0] as string;
    await sim.batch(simMachineCalls(spec));
    const client = await clientFor();
    const before = await sim.machineCalls();
    const logBefore = await sim.calls();
    const w = collect(client, ip, "nodename");
    try {
      await until(() => w.events.length === 1, "the watch's first event");
      expect(await client.platformMetadata(ip)).toMatchObject({
        instanceId: spec.platformMetadata.instanceId,
      });
      const reached = await sim.machineCalls();
      const ended = await sim.calls();
      const gained = (a: Record<string, number>, b: Record<string, number>, m: string) =>
        (b[m] ?? 0) - (a[m] ?? 0);
      if (sim.apid) {
        // apid passed the watch and the Get on to the machine; its log has the Get only (ended)
        expect([gained(before, reached, PATHS.watch), gained(before, reached, PATHS.get)]).toEqual([1, 1]);
        expect([gained(logBefore, ended, PATHS.watch), gained(logBefore, ended, PATHS.get)]).toEqual([0, 1]);
      } else {
        // the simulated apid is the machine: it counts both at their start, and nothing is passed on
        expect(reached).toEqual({});
        expect([gained(logBefore, ended, PATHS.watch), gained(logBefore, ended, PATHS.get)]).toEqual([1, 1]);
      }
    } finally {
      await w.stop();
    }
  });
});

/** The probe run in the simulator's namespace (tests/support/netnsprobe.ts). */
const PROBE = join(import.meta.dir, "../support/netnsprobe.ts");

/** Runs the probe with `args` in the simulator's network namespace; its JSON line. */
async function probe(args: string[]): Promise<Record<string, unknown>> {
  const p = Bun.spawn(sim.netnsCommand([process.execPath, PROBE, ...args]), {
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  await p.exited;
  const line = out.trim().split("\n").at(-1) ?? "";
  if (!line.startsWith("{")) throw new Error(`netnsprobe ${args.join(" ")} printed no JSON:\n${out}${err}`);
  return JSON.parse(line) as Record<string, unknown>;
}

/** Calls of `method` from `a` to `b` (counters). */
const gained = (a: Record<string, number>, b: Record<string, number>, method: string) =>
  (b[method] ?? 0) - (a[method] ?? 0);

describe.if(process.env.TALOS_SIM_APID === "1")(
  "the simulator's network namespace (with Talos' apid)",
  () => {
    test("a process there reaches a machine's own apid at <ip>:50000 with the reader talosconfig (mutual TLS), which answers without a node key; the call counts as reaching the machine, apid never sees it", async () => {
      const reached = await sim.machineCalls();
      const logged = await sim.calls();
      expect(await probe(["talos", sim.talosconfig, `${NODE}:50000`])).toEqual({ nodename: "w1" });
      // the machine dialled answers: EMPTY has no nodename
      expect(await probe(["talos", sim.talosconfig, `${EMPTY}:50000`])).toMatchObject({
        code: GrpcStatus.NOT_FOUND,
      });
      expect(gained(reached, await sim.machineCalls(), PATHS.get)).toBe(2);
      expect(gained(logged, await sim.calls(), PATHS.get)).toBe(0);
    });

    test("the talosconfig's endpoint reaches Talos' apid there too, which routes by the node key", async () => {
      const reached = await sim.machineCalls();
      const logged = await sim.calls();
      expect(await probe(["talos", sim.talosconfig, "-", NODE])).toEqual({ nodename: "w1" });
      expect(gained(reached, await sim.machineCalls(), PATHS.get)).toBe(1);
      await waitFor(
        async () => gained(logged, await sim.calls(), PATHS.get) === 1,
        10_000,
        () => "apid's log of the Get",
      );
    });

    test("a host address forwarded in answers there at the same address (nothing did before)", async () => {
      const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("host") });
      try {
        const url = `http://127.0.0.1:${server.port}/`;
        expect(await probe(["fetch", url])).toMatchObject({ error: expect.any(String) });
        await sim.forwardIntoNetns(`127.0.0.1:${server.port}`);
        expect(await probe(["fetch", url])).toEqual({ status: 200, body: "host" });
        await expect(sim.forwardIntoNetns(`127.0.0.1:${server.port}`)).rejects.toThrow(
          /409 .*address already in use/,
        );
      } finally {
        await server.stop(true);
      }
    });

    test("an address exposed from there answers on the host at the same address (nothing did before)", async () => {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}/`;
      const server = await serveInNetns(port);
      try {
        expect(
          await fetch(url).then(
            (r) => r.status,
            (e: Error) => e.message,
          ),
        ).toMatch(/Unable to connect/);
        await sim.exposeFromNetns(`127.0.0.1:${port}`);
        expect(await (await fetch(url)).text()).toBe(`netns ${port}`);
      } finally {
        server.kill();
        await server.exited;
      }
    });

    test("forwards and exposes come back in the new namespace after a restart", async () => {
      const host = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("host") });
      const port = await freePort();
      try {
        await sim.forwardIntoNetns(`127.0.0.1:${host.port}`);
        await sim.exposeFromNetns(`127.0.0.1:${port}`);
        const before = sim.netns;
        await sim.restart();
        expect(sim.netns).not.toBe(before);
        expect(await probe(["fetch", `http://127.0.0.1:${host.port}/`])).toEqual({
          status: 200,
          body: "host",
        });
        const server = await serveInNetns(port);
        try {
          expect(await (await fetch(`http://127.0.0.1:${port}/`)).text()).toBe(`netns ${port}`);
        } finally {
          server.kill();
          await server.exited;
        }
      } finally {
        await host.stop(true);
      }
    });
  },
);

/** The probe serving on 127.0.0.1:port in the simulator's namespace, once it listens. */
async function serveInNetns(port: number) {
  const p = Bun.spawn(sim.netnsCommand([process.execPath, PROBE, "serve", String(port)]), {
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = p.stdout.getReader();
  const first = await reader.read();
  reader.releaseLock();
  const line = new TextDecoder().decode(first.value ?? new Uint8Array());
  if (!line.includes(`"listening":${port}`)) {
    p.kill();
    throw new Error(`netnsprobe serve ${port}: ${line}`);
  }
  return p;
}

describe.if(process.env.TALOS_SIM_APID !== "1")(
  "the simulator's network namespace (without Talos' apid)",
  () => {
    test("there is none: netns, netnsCommand and forwards throw, naming why", async () => {
      expect(() => sim.netns).toThrow(/only with Talos' apid/);
      expect(() => sim.netnsCommand(["true"])).toThrow(/only with Talos' apid/);
      await expect(sim.forwardIntoNetns("127.0.0.1:1")).rejects.toThrow(/only with Talos' apid/);
      await expect(sim.exposeFromNetns("127.0.0.1:1")).rejects.toThrow(/only with Talos' apid/);
    });
  },
);

describe("keepalive against grpc-go's enforcement", () => {
  // apid keeps grpc-go's default policy (5 minutes); a scaled-down MinTime of 1 s shows the rule.
  // Always against the simulated apid, also when the rest of the file runs through Talos' apid:
  // apid's server leaves grpc-go's default MinTime (5 minutes) and cannot be given another, so the
  // rule cannot be shown through it at a test's time scale.
  let strict: TalosSim;
  beforeAll(async () => {
    strict = await TalosSim.start({ keepaliveMinTimeMs: 1_000, apid: false });
    await strict.addMachine(NODE);
  });
  afterAll(async () => {
    await strict?.stop();
  });

  async function quietWatch(keepaliveMs: number) {
    const ch = channelFor(strict.talosconfig, { keepaliveMs });
    const { namespace, type, id } = RESOURCES.nodename;
    const stream = ch.serverStream(
      PATHS.watch,
      WatchRequest.encode({ namespace, type, id, apiVersion: 1 }).finish(),
      {
        metadata: { node: NODE },
      },
    );
    expect(await stream.next()).toBeDefined(); // the empty "watch is ready" response
    expect(await stream.next()).toBeDefined(); // the tombstone
    return { ch, stream };
  }

  test("pings more often than MinTime on a quiet watch get GOAWAY too_many_pings: the watch fails", async () => {
    const { ch, stream } = await quietWatch(100);
    try {
      const err = await stream.next().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(GrpcError);
      expect((err as GrpcError).code).toBe(GrpcStatus.UNAVAILABLE);
    } finally {
      ch.close();
    }
  });

  test("pings spaced wider than MinTime keep a quiet watch open", async () => {
    const { ch, stream } = await quietWatch(1_300);
    try {
      const next = stream.next().then(
        (b) => ({ b }),
        (e: unknown) => ({ e }),
      );
      // The behaviour is a stream that stays open this long: the window is the measure.
      const outcome = await Promise.race([next, Bun.sleep(4_500).then(() => "open")]);
      expect(outcome).toBe("open");
    } finally {
      stream.cancel();
      ch.close();
    }
  }, 15_000);
});
