// The golden test of the fake apid (tests/support/apid.ts) against the Talos simulator
// (tests/support/talossim: COSI's state and State server, machinery's types and marshalling, Talos'
// access policy and apid's routing). The simulator is seeded with exactly what the fake serves (its
// YAML specs, ids and owners), the same changes go to both, and both must answer alike, byte for
// byte where the bytes are Talos' and field by field where the fake writes its own: resources (proto
// and YAML specs, metadata), watch events of every kind, and every error the client maps. The fake
// stays for fault injection and speed; this test keeps it honest.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type * as grpc from "@grpc/grpc-js";
import { parse as parseYaml } from "yaml";
import {
  AddressStatusSpec,
  ControllerManagerConfigSpec,
  type Event,
  EventType,
  HostnameStatusSpec,
  LinkStatusSpec,
  NodeIPConfigSpec,
  NodenameSpec,
  PlatformMetadataSpec,
  type Resource,
  SystemInformationSpec,
  VersionResponse,
} from "../../lib/talos_pb.ts";
import { decodeNetIP, PATHS, RESOURCES, type ResourceKind } from "../../lib/taloswire.ts";
import { FakeApid } from "../support/apid.ts";
import { ADDRESS_FLAGS, type FakeNodeSpec, loadFixture, normalizeAddress } from "../support/fixtures.ts";
import { clientFor, get, getReq, list, type Status, status, unary, watch } from "../support/rawgrpc.ts";
import { controlSpec, LOCAL_MACHINE, TalosSim } from "../support/talossim.ts";

/** A node with every resource the CCM reads, SystemInformation included. */
const AWS: FakeNodeSpec = loadFixture("aws");
const IP = AWS.nodeIPs[0] as string;
const CMC = { podCIDRs: ["10.244.0.0/16", "fd00:10:244::/64"], serviceCIDRs: ["10.96.0.0/12"] };

/** Decoders of each kind's protobuf spec: specs are compared decoded, field by field. */
const DECODERS: Record<ResourceKind, (b: Uint8Array) => unknown> = {
  platformmetadata: (b) => PlatformMetadataSpec.decode(b),
  systeminformation: (b) => SystemInformationSpec.decode(b),
  addresses: (b) => AddressStatusSpec.decode(b),
  controllermanagerconfig: (b) => ControllerManagerConfigSpec.decode(b),
  nodename: (b) => NodenameSpec.decode(b),
  hostname: (b) => HostnameStatusSpec.decode(b),
  nodeipconfig: (b) => NodeIPConfigSpec.decode(b),
  links: (b) => LinkStatusSpec.decode(b),
};
const KINDS = Object.keys(RESOURCES) as ResourceKind[];
const kindOf = (type: string) => KINDS.find((k) => RESOURCES[k].type === type) as ResourceKind;

let dir: string;
let fake: FakeApid;
let sim: TalosSim;
/** The two servers under the same name, each with its reader client: every check runs on both. */
let sides: { name: "fake" | "upstream"; c: grpc.Client }[];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "talos-golden-"));
  [fake, sim] = await Promise.all([
    FakeApid.start({ nodes: [AWS], controllerManagerConfig: CMC }),
    TalosSim.start({ talosVersion: AWS.talosVersion }),
  ]);
  await sim.addMachine(IP, { talosVersion: AWS.talosVersion, platform: AWS.platformMetadata.platform });
  sides = [
    { name: "fake", c: clientFor(await fake.talosconfig()) },
    { name: "upstream", c: clientFor(readFileSync(sim.talosconfig, "utf8")) },
  ];
  for (const kind of KINDS) await mirror(kind);
});

afterAll(async () => {
  for (const s of sides ?? []) s.c.close();
  await fake?.stop();
  await sim?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const fakeClient = () => sides[0]?.c as grpc.Client;
const machineOf = (kind: ResourceKind) => (kind === "controllermanagerconfig" ? undefined : IP);

/** What the fake holds of a kind on its machine, by id. */
async function fakeResources(kind: ResourceKind): Promise<Map<string, Resource>> {
  const r = RESOURCES[kind];
  const node = machineOf(kind);
  const all = await list(fakeClient(), r, node === undefined ? {} : { node });
  return new Map(all.map((x) => [x.metadata?.id as string, x]));
}

/** The simulator's copy of the same, by id. */
async function simResources(kind: ResourceKind): Promise<Map<string, Resource>> {
  const r = RESOURCES[kind];
  const node = machineOf(kind);
  const all = await list(sides[1]?.c as grpc.Client, r, node === undefined ? {} : { node });
  return new Map(all.map((x) => [x.metadata?.id as string, x]));
}

/**
 * Makes the simulator hold what the fake holds of a kind: the fake's YAML spec, id and owner go
 * through the control surface into machinery's typed spec; a resource the fake no longer has is
 * destroyed. Only what differs is written, so each fake change is one change upstream too.
 */
async function mirror(kind: ResourceKind): Promise<void> {
  const want = await fakeResources(kind);
  const have = await simResources(kind);
  const { namespace, type } = RESOURCES[kind];
  const machine = machineOf(kind) ?? LOCAL_MACHINE;
  for (const [id, r] of want) {
    // Unchanged (compared decoded: the fake quotes some scalars Talos does not): no write, no event.
    if (Bun.deepEquals(specView(kind, have.get(id)), specView(kind, r))) continue;
    await sim.put(machine, { namespace, type, id, spec: simInput(kind, r), owner: r.metadata?.owner ?? "" });
  }
  for (const id of have.keys()) if (!want.has(id)) await sim.destroy(machine, { namespace, type, id });
}

/** The control surface's YAML for a resource the fake serves: its YAML, and an address's `local` from the proto. */
function simInput(kind: ResourceKind, r: Resource): string {
  const local =
    kind === "addresses"
      ? decodeNetIP(AddressStatusSpec.decode(r.spec?.protoSpec ?? new Uint8Array()).local)
      : undefined;
  return controlSpec(r.spec?.yamlSpec ?? "", local);
}

/** A resource's spec, decoded from both its forms. */
function specView(kind: ResourceKind, r: Resource | undefined): unknown {
  if (r?.spec === undefined) return undefined;
  return { proto: DECODERS[kind](r.spec.protoSpec), yaml: parseYaml(r.spec.yamlSpec) };
}

/** A resource as both must agree on it: metadata without timestamps, specs decoded. */
function view(r: Resource | undefined): unknown {
  if (r === undefined) return undefined;
  const { created: _c, updated: _u, ...metadata } = r.metadata ?? ({} as NonNullable<Resource["metadata"]>);
  const kind = kindOf(metadata.type ?? "");
  return { metadata, ...(kind ? (specView(kind, r) as object) : { spec: r.spec }) };
}

const EVENT_NAMES = new Map(Object.entries(EventType).map(([k, v]) => [v as number, k]));
const eventView = (e: Event) => ({
  type: EVENT_NAMES.get(e.eventType) ?? String(e.eventType),
  resource: view(e.resource),
  old: view(e.old),
});

/** Runs `f` on both servers and requires the same result. */
async function same<T>(what: string, f: (c: grpc.Client) => Promise<T>): Promise<T> {
  const [a, b] = (await Promise.all(sides.map((s) => f(s.c)))) as [T, T];
  expect({ what, got: a }).toEqual({ what, got: b });
  return a;
}

describe("resources as both serve them", () => {
  test.each(KINDS)("%s: Get (singletons) and List agree on metadata, proto and YAML specs", async (kind) => {
    const r = RESOURCES[kind];
    const node = machineOf(kind);
    const listed = await same(`list ${kind}`, async (c) =>
      (await list(c, r, node === undefined ? {} : { node })).map(view),
    );
    expect(listed.length).toBeGreaterThan(0);
    if (r.id !== undefined) await same(`get ${kind}`, async (c) => view(await get(c, r, node)));
  });

  test("Version: the tag, platform and features", async () => {
    await same("version", async (c) => {
      const m = VersionResponse.decode(await unary(c, PATHS.version, new Uint8Array(), { node: IP }))
        .messages[0];
      return { tag: m?.version?.tag, platform: m?.platform, features: m?.features };
    });
  });
});

describe("watch events for the same changes", () => {
  test("singleton watch: the current state, UPDATED with old, DESTROYED as stored, CREATED again", async () => {
    const r = RESOURCES.nodeipconfig;
    const streams = sides.map((s) => watch(s.c, { ...r, apiVersion: 1 }, IP));
    const eventsOf = (w: (typeof streams)[number]) => w.responses.flatMap((x) => x.event);
    const both = (n: number, what: string) =>
      Promise.all(streams.map((w) => w.until(() => eventsOf(w).length >= n, what)));
    try {
      await both(1, "initial state");
      const before = fake.node(IP)?.nodeIPConfig;
      fake.updateNode(IP, { nodeIPConfig: { validSubnets: ["10.0.0.0/8"], excludeSubnets: [] } });
      await mirror("nodeipconfig");
      await both(2, "update");
      fake.updateNode(IP, { nodeIPConfig: null });
      await mirror("nodeipconfig");
      await both(3, "destroy");
      fake.updateNode(IP, { nodeIPConfig: before ?? { validSubnets: [], excludeSubnets: [] } });
      await mirror("nodeipconfig");
      await both(4, "create");
      const [a, b] = streams.map((w) => eventsOf(w).map(eventView));
      expect(a?.map((e) => e.type)).toEqual(["CREATED", "UPDATED", "DESTROYED", "CREATED"]);
      expect(a).toEqual(b as NonNullable<typeof b>);
    } finally {
      for (const w of streams) w.cancel();
    }
  });

  test("singleton watch of an absent resource: the DESTROYED tombstone", async () => {
    const r = RESOURCES.systeminformation;
    const other = "10.99.0.7";
    const spec: FakeNodeSpec = { ...loadFixture("metal-56"), nodeIPs: [other] };
    fake.addNode(spec);
    await sim.addMachine(other, {
      talosVersion: spec.talosVersion,
      platform: spec.platformMetadata.platform,
    });
    const streams = sides.map((s) => watch(s.c, { ...r, apiVersion: 1 }, other));
    try {
      await Promise.all(streams.map((w) => w.until(() => w.responses.length >= 2, "tombstone")));
      const [a, b] = streams.map((w) => w.responses.flatMap((x) => x.event).map(eventView));
      expect(a?.[0]?.type).toBe("DESTROYED");
      expect(a).toEqual(b as NonNullable<typeof b>);
    } finally {
      for (const w of streams) w.cancel();
      fake.removeNode(other);
      await sim.removeMachine(other);
    }
  });

  test.each([1, 0])(
    "list watch with bootstrap contents, api_version %d: the same events in the same order",
    async (apiVersion) => {
      const r = RESOURCES.addresses;
      const streams = sides.map((s) =>
        watch(s.c, { namespace: r.namespace, type: r.type, bootstrap: true, apiVersion }, IP),
      );
      const eventsOf = (w: (typeof streams)[number]) => w.responses.flatMap((x) => x.event);
      const n = AWS.addresses.length + apiVersion;
      const both = (k: number, what: string) =>
        Promise.all(streams.map((w) => w.until(() => eventsOf(w).length >= k, what)));
      const current = fake.node(IP)?.addresses ?? [];
      try {
        await both(n, "bootstrap");
        // One address goes, one comes, one changes its flags.
        const gone = current.find((a) => a.linkName === "external");
        const added = normalizeAddress("golden", {
          address: "172.31.20.99/20",
          linkName: "eth0",
          linkIndex: 2,
          flags: "permanent",
        });
        fake.updateNode(IP, { addresses: [...current.filter((a) => a !== gone), added] });
        await mirror("addresses");
        await both(n + 2, "destroy and create");
        const eventsBefore = eventsOf(streams[0] as (typeof streams)[number]).length;
        fake.updateNode(IP, {
          addresses: [
            ...current.filter((a) => a !== gone),
            { ...added, flags: added.flags | (ADDRESS_FLAGS.nodad as number) },
          ],
        });
        await mirror("addresses");
        await both(eventsBefore + 1, "update");
        const [a, b] = streams.map((w) => eventsOf(w).map(eventView));
        expect(a?.slice(-1)[0]?.type).toBe("UPDATED");
        // Within one change, events may come in either order upstream (a map): compare each change's set.
        const sorted = (es: typeof a) => [
          ...(es ?? []).slice(0, n),
          ...(es ?? []).slice(n, n + 2).sort((x, y) => x.type.localeCompare(y.type)),
          ...(es ?? []).slice(n + 2),
        ];
        expect(sorted(a)).toEqual(sorted(b));
      } finally {
        for (const w of streams) w.cancel();
        fake.updateNode(IP, { addresses: current });
        await mirror("addresses");
      }
    },
  );
});

describe("errors, in Talos' codes and words", () => {
  const PM = RESOURCES.platformmetadata;
  const cases: [string, (c: grpc.Client) => Promise<Status>][] = [
    ["Get of an unknown type", (c) => status(get(c, { ...PM, type: "Unknowns.talos.dev" }, IP))],
    ["Get in an unknown namespace", (c) => status(get(c, { ...PM, namespace: "nonexistent" }, IP))],
    ["Get in another registered namespace", (c) => status(get(c, { ...PM, namespace: "secrets" }, IP))],
    ["Get of the type lowercased", (c) => status(get(c, { ...PM, type: PM.type.toLowerCase() }, IP))],
    ["Get of an absent id", (c) => status(get(c, { ...PM, id: "absent" }, IP))],
    ["a machine nobody has", (c) => status(get(c, PM, "10.99.0.99"))],
    ["an IPv6 machine nobody has", (c) => status(get(c, PM, "fd00::99"))],
    ["a host name", (c) => status(get(c, PM, "node-a"))],
    ["a node with a port", (c) => status(get(c, PM, `${IP}:50000`))],
    ["an empty node", (c) => status(get(c, PM, ""))],
    ["two node values", (c) => status(unary(c, PATHS.get, getReq(PM), { node: [IP, "10.99.0.99"] }))],
    [
      "a comma inside one node value",
      (c) => status(unary(c, PATHS.get, getReq(PM), { node: `${IP},10.0.0.1` })),
    ],
    ["`nodes` on a COSI call", (c) => status(unary(c, PATHS.get, getReq(PM), { nodes: IP }))],
    ["a write as os:reader", (c) => status(unary(c, PATHS.create, new Uint8Array(), { node: IP }))],
    [
      "a singleton watch with bootstrap contents",
      (c) => watchError(c, { ...PM, bootstrap: true, apiVersion: 1 }),
    ],
  ];

  test.each(cases)("%s", async (what, f) => {
    await same(what, f);
  });

  test("an IP in brackets routes to the machine", async () => {
    await same("bracketed", async (c) => view(await get(c, PM, `[${IP}]`)));
  });

  test("a certificate without a reading role: refused after routing, so an unknown node is Unavailable", async () => {
    const roles = ["os:etcd:backup"];
    const clients = [
      clientFor(await fake.talosconfig({ roles })),
      clientFor(readFileSync(await sim.writeTalosconfig(join(dir, "backup.yaml"), roles), "utf8")),
    ];
    try {
      for (const [what, node] of [
        ["known machine", IP],
        ["unknown machine", "10.99.0.99"],
      ] as const) {
        const [a, b] = await Promise.all(clients.map((c) => status(get(c, PM, node))));
        expect({ what, got: a }).toEqual({ what, got: b as Status });
      }
    } finally {
      for (const c of clients) c.close();
    }
  });
});

/** The status a Watch ends with. */
async function watchError(c: grpc.Client, a: Parameters<typeof watch>[1]): Promise<Status> {
  const w = watch(c, a, IP);
  try {
    await w.until(() => w.error !== undefined, "error");
    return w.error as Status;
  } finally {
    w.cancel();
  }
}
