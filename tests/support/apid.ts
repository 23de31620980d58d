// A fake Talos apid for tests, faithful on the wire: a grpc-js server with mutual TLS (Ed25519
// certificates shaped like Talos'), serving cosi.resource.State Get/List/Watch and
// machine.MachineService/Version for many simulated nodes routed by the `node` header, with
// Talos' status codes and messages (talos-api.md §2, §5). Tests drive it through FakeApid: nodes,
// outages, restarts, client-CA rotation, injected errors and delays, and per-call counters.
//
// @example
// const apid = await FakeApid.start({ nodes: [loadFixture("aws")] });
// const path = await apid.writeTalosconfig(join(dir, "talosconfig"));
// ... run the code under test with TALOSCONFIG=path ...
// expect(apid.calls({ method: "Get", node: "172.31.20.15" })).toBe(1);
// await apid.stop();

import { renameSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { stringify } from "yaml";
import { type IPAddress, parseCidr, parseIP } from "../../lib/cidr.ts";
import {
  AddressStatusSpec,
  ControllerManagerConfigSpec,
  type Event,
  EventType,
  GetRequest,
  GetResponse,
  HostnameStatusSpec,
  LinkStatusSpec,
  ListRequest,
  ListResponse,
  type Metadata,
  NetIP,
  NodeIPConfigSpec,
  NodenameSpec,
  PlatformMetadataSpec,
  type Resource,
  SystemInformationSpec,
  type Timestamp,
  type Version,
  VersionResponse,
  WatchRequest,
  WatchResponse,
} from "../../lib/talos_pb.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { PATHS, RESOURCES } from "../../lib/taloswire.ts";
import type { ControllerManagerConfig, PlatformMetadata, SystemInformation } from "../../lib/types.ts";
import { freePort } from "./cluster.ts";
import {
  type FakeAddress,
  type FakeLink,
  type FakeNodeIPConfig,
  type FakeNodeSpec,
  formatAddressFlags,
  formatAddressScope,
  LINK_TYPES,
  nodeIdentity,
  nodeIPConfigOf,
  nodeLinks,
  type ResolvedLink,
} from "./fixtures.ts";
import { type CA, createCA, type KeyPair } from "./pki.ts";

/** RPC names as counted and targeted by {@link FakeApid.failNext}. */
export type ApidMethod = "Get" | "List" | "Watch" | "Version" | "Create" | "Update" | "Destroy";

/** Certificates of one fake cluster; share them to run several apid endpoints of one cluster. */
export interface FakeApidPki {
  /** Talos OS CA: signs the server certificate; goes into the talosconfig's `ca`. */
  osCA: CA;
  /** Signs client certificates; the server trusts only this one (starts as the OS CA). */
  clientCA: CA;
  /** Server certificate: SANs 127.0.0.1, localhost, talos, talos.default. */
  server: KeyPair;
}

/** Options of {@link FakeApid.start}. */
export interface FakeApidOptions {
  nodes?: FakeNodeSpec[];
  /** Served to calls without a `node` header (the endpoint is a control-plane node); absent → NotFound. */
  controllerManagerConfig?: ControllerManagerConfig;
  /** Reuse certificates (several endpoints of one cluster). */
  pki?: FakeApidPki;
  /** Version tag of the endpoint node (default v1.13.0). */
  talosVersion?: string;
  /** Platform name of the endpoint node in Version (default "metal"). */
  platform?: string;
  /** Port to listen on (default: {@link freePort}). */
  port?: number;
  /**
   * This fake is one machine's own apid, dialled directly (TALOS_MACHINE_ACCESS=auto): a call
   * without a `node` header is answered by its first node, not by the endpoint node.
   */
  machine?: boolean;
}

/** Options of {@link FakeApid.talosconfig}. */
export interface TalosconfigOptions {
  context?: string;
  /** Default: this apid's endpoint. */
  endpoints?: string[];
  /** Client certificate Subject O (default [os:reader]). */
  roles?: string[];
  /** The context's `cluster`. */
  cluster?: string;
  /** Client certificate validity in hours (default 6, like the in-cluster one; negative: expired). */
  hours?: number;
  /** Sign the client certificate with another CA (e.g. a foreign one). */
  clientCA?: CA;
  /** PEM written as `ca` (default the OS CA); "" leaves `ca` out (system roots). */
  ca?: string;
}

/** A change to a node, applied by {@link FakeApid.updateNode}; every changed resource emits a Watch event. */
export interface NodeChange {
  platformMetadata?: Partial<PlatformMetadata>;
  /** null destroys the resource. */
  systemInformation?: SystemInformation | null;
  /** The full new address list; diffed by id into created, updated and destroyed. */
  addresses?: FakeAddress[];
  talosVersion?: string;
  /** A new Nodename; null destroys the resource. */
  nodename?: string | null;
  /** A new HostnameStatus; null destroys the resource. */
  hostname?: { hostname: string; domainname: string } | null;
  /**
   * The full new link list (defaults as in {@link FakeNodeSpec.links}), diffed by name into
   * created, updated and destroyed; null goes back to links derived from the addresses.
   */
  links?: FakeLink[] | null;
  /** A new NodeIPConfig (absent lists are empty); null destroys the resource. */
  nodeIPConfig?: FakeNodeIPConfig | null;
}

/** A resource given as raw spec bytes, to put what the encoders here would never write on the wire. */
export interface RawResource {
  namespace: string;
  type: string;
  id: string;
  protoSpec: Uint8Array;
  yamlSpec?: string;
}

type SpecData =
  | { kind: "platformmetadata"; value: PlatformMetadata }
  | { kind: "systeminformation"; value: SystemInformation }
  | { kind: "address"; value: FakeAddress }
  | { kind: "cmc"; value: ControllerManagerConfig }
  | { kind: "nodename"; value: FakeNodename }
  | { kind: "hostname"; value: FakeHostname }
  | { kind: "nodeipconfig"; value: Required<FakeNodeIPConfig> }
  | { kind: "link"; value: ResolvedLink }
  | { kind: "raw"; proto: Uint8Array; yaml: string };

/** A Nodenames.kubernetes.talos.dev spec. */
export interface FakeNodename {
  nodename: string;
  hostnameVersion: string;
  skipNodeRegistration: boolean;
}

/** A HostnameStatuses.net.talos.dev spec. */
export interface FakeHostname {
  hostname: string;
  domainname: string;
}

interface Stored {
  namespace: string;
  type: string;
  id: string;
  version: number;
  created: number;
  updated: number;
  owner: string;
  data: SpecData;
  /** encodeData(data), made on first use: nodes nobody asks about stay small. */
  encoded?: { proto: Uint8Array; yaml: string } | undefined;
}

interface NodeState {
  spec: FakeNodeSpec;
  down: boolean;
  /** `namespace|type` → id → resource. */
  resources: Map<string, Map<string, Stored>>;
}

interface WatchSub {
  node: NodeState;
  namespace: string;
  type: string;
  id: string | undefined;
  call: grpc.ServerWritableStream<Buffer, Buffer>;
}

interface Injected {
  code: number;
  details: string;
  times: number;
}

const READ_ROLES = ["os:admin", "os:operator", "os:reader"];
const KIND_RESOURCE = {
  platformmetadata: "platformmetadata",
  systeminformation: "systeminformation",
  address: "addresses",
  cmc: "controllermanagerconfig",
  nodename: "nodename",
  hostname: "hostname",
  nodeipconfig: "nodeipconfig",
  link: "links",
} as const;

const OWNERS: Record<SpecData["kind"], string> = {
  platformmetadata: "network.PlatformConfigController",
  systeminformation: "hardware.SystemInfoController",
  address: "network.AddressStatusController",
  cmc: "k8s.ControlPlaneStaticPodController",
  nodename: "k8s.NodenameController",
  hostname: "network.HostnameSpecController",
  nodeipconfig: "k8s.NodeIPConfigController",
  link: "network.LinkStatusController",
  raw: "test",
};

// ---------------------------------------------------------------------------------------------
// Spec encoders (Talos' protoenc writes fields in order and leaves zero values out, as protobuf-es does)

/** IP bytes (4 or 16) of an address. */
function ipBytes(ip: IPAddress): Uint8Array {
  const width = ip.family === 4 ? 4 : 16;
  const out = new Uint8Array(width);
  let v = ip.value;
  for (let i = width - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

const PLAIN = /^[A-Za-z0-9_./][A-Za-z0-9_./:,+ -]*$/;
const YAML_WORDS = /^(true|false|yes|no|on|off|null|~|y|n)$/i;

/** A YAML scalar: plain when unambiguous, else a JSON string (valid YAML double-quoted). */
function yamlScalar(v: string | number | boolean): string {
  if (typeof v !== "string") return String(v);
  const plain =
    PLAIN.test(v) && !v.endsWith(" ") && !v.includes(": ") && !YAML_WORDS.test(v) && Number.isNaN(Number(v));
  return plain ? v : JSON.stringify(v);
}

/**
 * Renders a flat spec (scalars, string lists, string maps) as YAML. Much faster than a general
 * YAML writer, which matters when a benchmark serves thousands of nodes.
 */
export function renderYaml(obj: Record<string, unknown>): string {
  let out = "";
  for (const [k, v] of Object.entries(obj)) {
    if (Array.isArray(v)) {
      out += v.length ? `${k}:\n${v.map((x) => `    - ${yamlScalar(String(x))}\n`).join("")}` : `${k}: []\n`;
    } else if (typeof v === "object" && v !== null) {
      const entries = Object.entries(v);
      out += entries.length
        ? `${k}:\n${entries.map(([mk, mv]) => `    ${yamlScalar(mk)}: ${yamlScalar(String(mv))}\n`).join("")}`
        : `${k}: {}\n`;
    } else if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") {
      out += `${k}: ${yamlScalar(v)}\n`;
    }
  }
  return out;
}

function omitEmpty(obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v === "" || v === false || v === undefined || v === 0) continue;
    if (typeof v === "object" && v !== null && Object.keys(v).length === 0) continue;
    out[k] = v;
  }
  return out;
}

/** proto_spec and yaml_spec of a PlatformMetadata, as Talos writes them. */
export function encodePlatformMetadata(m: PlatformMetadata): { proto: Uint8Array; yaml: string } {
  const { internalDNS, externalDNS, ...rest } = m;
  const proto = PlatformMetadataSpec.encode({
    ...rest,
    internalDns: internalDNS,
    externalDns: externalDNS,
  }).finish();
  return { proto, yaml: renderYaml(omitEmpty({ ...m })) };
}

/** proto_spec and yaml_spec of a SystemInformation. */
export function encodeSystemInformation(s: SystemInformation): { proto: Uint8Array; yaml: string } {
  const proto = SystemInformationSpec.encode({ ...s, biosVersion: "" }).finish();
  const { serialNumber, ...rest } = s;
  return { proto, yaml: renderYaml(omitEmpty({ ...rest, serialnumber: serialNumber })) };
}

/** proto_spec and yaml_spec of an AddressStatus; NetIP fields in the current (message) form. */
export function encodeAddress(a: FakeAddress): { proto: Uint8Array; yaml: string } {
  const cidr = parseCidr(a.address);
  const local =
    a.local === undefined ? new Uint8Array() : NetIP.encode({ ip: ipBytes(parseIP(a.local)) }).finish();
  const empty = new Uint8Array();
  const proto = AddressStatusSpec.encode({
    address: { ip: ipBytes(cidr.ip), prefixLength: cidr.prefix.bits },
    local,
    broadcast: empty,
    anycast: empty,
    multicast: empty,
    linkIndex: a.linkIndex,
    linkName: a.linkName,
    family: cidr.ip.family === 4 ? 2 : 10,
    scope: a.scope,
    flags: a.flags,
    priority: a.priority,
  }).finish();
  // As machinery marshals it: `local` (a netip.Addr with omitempty) never shows in YAML, priority always.
  const yaml = renderYaml({
    address: a.address,
    linkIndex: a.linkIndex,
    linkName: a.linkName,
    family: cidr.ip.family === 4 ? "inet4" : "inet6",
    scope: formatAddressScope(a.scope),
    flags: formatAddressFlags(a.flags),
    priority: a.priority,
  });
  return { proto, yaml };
}

/** proto_spec and yaml_spec of a ControllerManagerConfig (the CIDRs a CCM reads; yaml as machinery marshals it). */
export function encodeControllerManagerConfig(c: ControllerManagerConfig): {
  proto: Uint8Array;
  yaml: string;
} {
  const proto = ControllerManagerConfigSpec.encode({
    podCidrs: c.podCIDRs,
    serviceCidrs: c.serviceCIDRs,
  }).finish();
  const yaml = renderYaml({
    enabled: true,
    image: "",
    cloudProvider: "",
    podCIDRs: c.podCIDRs,
    serviceCIDRs: c.serviceCIDRs,
    extraArgs: {},
    extraVolumes: [],
    environmentVariables: {},
  });
  // renderYaml is flat; the one nested field is always empty.
  return { proto, yaml: `${yaml}resources:\n    requests: {}\n    limits: {}\n` };
}

/** proto_spec and yaml_spec of a Nodename. */
export function encodeNodename(n: FakeNodename): { proto: Uint8Array; yaml: string } {
  const proto = NodenameSpec.encode(n).finish();
  return { proto, yaml: renderYaml({ ...n }) };
}

/** proto_spec and yaml_spec of a HostnameStatus. */
export function encodeHostnameStatus(h: FakeHostname): { proto: Uint8Array; yaml: string } {
  const proto = HostnameStatusSpec.encode(h).finish();
  return { proto, yaml: renderYaml({ ...h }) };
}

/** proto_spec and yaml_spec of a NodeIPConfig; yaml as Talos writes it (validSubnets omitempty). */
export function encodeNodeIPConfig(c: Required<FakeNodeIPConfig>): { proto: Uint8Array; yaml: string } {
  const proto = NodeIPConfigSpec.encode(c).finish();
  return {
    proto,
    yaml: renderYaml({
      ...(c.validSubnets.length ? { validSubnets: c.validSubnets } : {}),
      excludeSubnets: c.excludeSubnets,
    }),
  };
}

/** Linux IFF_* flags by the names Talos prints (nethelpers.LinkFlag), in bit order. */
const LINK_FLAGS: ReadonlyArray<[string, number]> = [
  ["UP", 0x1],
  ["BROADCAST", 0x2],
  ["LOOPBACK", 0x8],
  ["POINTTOPOINT", 0x10],
  ["RUNNING", 0x40],
  ["NOARP", 0x80],
  ["MULTICAST", 0x1000],
  ["LOWER_UP", 0x10000],
];

/** The IFF_* flags Linux shows for a link of this type, up or down. */
export function linkFlags(l: Pick<ResolvedLink, "type" | "up">): number {
  const byType = { ether: 0x2 | 0x1000, loopback: 0x8, none: 0x10 | 0x80 }[l.type];
  return byType | (l.up ? 0x1 | 0x40 | 0x10000 : 0);
}

/** Talos' name of a link type (nethelpers.LinkType), as its YAML shows it. */
const LINK_TYPE_NAMES: Readonly<Record<ResolvedLink["type"], string>> = {
  ether: "ether",
  loopback: "loopback",
  none: "nohdr",
};

/** proto_spec and yaml_spec of a LinkStatus (the fields a CCM reads; yaml as machinery marshals them, zero values included). */
export function encodeLinkStatus(l: ResolvedLink): { proto: Uint8Array; yaml: string } {
  const flags = linkFlags(l);
  const proto = LinkStatusSpec.encode({
    index: l.index,
    type: LINK_TYPES[l.type],
    flags,
    kind: l.kind,
    linkState: l.up,
  }).finish();
  const yaml = renderYaml({
    index: l.index,
    type: LINK_TYPE_NAMES[l.type],
    linkIndex: 0,
    flags: LINK_FLAGS.filter(([, bit]) => (flags & bit) !== 0)
      .map(([name]) => name)
      .join(","),
    hardwareAddr: "",
    permanentAddr: "",
    broadcastAddr: "",
    mtu: 0,
    queueDisc: "",
    operationalState: l.up ? (l.type === "loopback" ? "unknown" : "up") : "down",
    kind: l.kind,
    slaveKind: "",
    linkState: l.up,
    port: "TwistedPair",
    duplex: "Half",
  });
  return { proto, yaml };
}

/** A protobuf Timestamp of epoch milliseconds. */
export function timestamp(ms: number): Timestamp {
  return { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
}

/**
 * A `cosi.resource.Resource` message: metadata fields not given are empty; without `spec` the
 * Spec field is left out altogether.
 */
export function resourceMessage(
  md: Partial<Metadata>,
  spec?: { protoSpec: Uint8Array; yamlSpec?: string },
): Resource {
  const metadata: Metadata = {
    namespace: "",
    type: "",
    id: "",
    version: "",
    owner: "",
    phase: "",
    finalizers: [],
    labels: {},
    annotations: {},
    ...md,
  };
  return spec === undefined
    ? { metadata }
    : { metadata, spec: { protoSpec: spec.protoSpec, yamlSpec: spec.yamlSpec ?? "" } };
}

function encodeData(d: SpecData): { proto: Uint8Array; yaml: string } {
  switch (d.kind) {
    case "platformmetadata":
      return encodePlatformMetadata(d.value);
    case "systeminformation":
      return encodeSystemInformation(d.value);
    case "address":
      return encodeAddress(d.value);
    case "cmc":
      return encodeControllerManagerConfig(d.value);
    case "nodename":
      return encodeNodename(d.value);
    case "hostname":
      return encodeHostnameStatus(d.value);
    case "nodeipconfig":
      return encodeNodeIPConfig(d.value);
    case "link":
      return encodeLinkStatus(d.value);
    case "raw":
      return { proto: d.proto, yaml: d.yaml };
  }
}

/** A kind's resources in COSI's order: its in-memory state lists and bootstraps them sorted by id. */
function sortedById<T>(byId: Map<string, T> | undefined): T[] {
  return [...(byId ?? new Map<string, T>()).entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([, v]) => v);
}

function key(namespace: string, type: string): string {
  return `${namespace}|${type}`;
}

const passThrough = (b: Buffer) => b;

function method(path: string, responseStream: boolean): grpc.MethodDefinition<Buffer, Buffer> {
  return {
    path,
    requestStream: false,
    responseStream,
    requestSerialize: passThrough,
    requestDeserialize: passThrough,
    responseSerialize: passThrough,
    responseDeserialize: passThrough,
  };
}

const SERVICE: grpc.ServiceDefinition = {
  Get: method(PATHS.get, false),
  List: method(PATHS.list, true),
  Watch: method(PATHS.watch, true),
  Create: method(PATHS.create, false),
  Update: method(PATHS.update, false),
  Destroy: method(PATHS.destroy, false),
  Version: method(PATHS.version, false),
};

class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(details);
  }
}

/**
 * The namespaces machined registers (COSI's meta and Talos' own, v1.13): reads in them pass the
 * access policy even where the fake holds nothing.
 */
const TALOS_NAMESPACES: ReadonlySet<string> = new Set([
  "meta",
  "runtime",
  "cluster",
  "cluster-raw",
  "config",
  "etcd",
  "files",
  "hardware",
  "k8s",
  "controlplane",
  "kubespan",
  "network",
  "network-config",
  "cri",
  "secrets",
  "security",
  "perf",
]);

/** Talos' access policy refuses every write, whoever asks. */
const WRITE_REFUSED = new StatusError(GrpcStatus.PERMISSION_DENIED, "write access is not allowed");

/** What apid's backend refuses as a target: an address with a port (Go's net.SplitHostPort accepts it). */
function addressContainsPort(target: string): boolean {
  const bracketed = target.match(/^\[([^\]]*)\]:[^:]*$/);
  if (bracketed) return !(bracketed[1] as string).includes(":") || isIP(bracketed[1] as string) === 6;
  return target.split(":").length === 2;
}

/** apid's answer for a node it cannot reach: grpc-go's dial error, or its resolver's for a name. */
function dialError(target: string): StatusError {
  const host = target.replace(/^\[+|\]+$/g, "");
  if (isIP(host) === 0) {
    return new StatusError(GrpcStatus.UNAVAILABLE, "name resolver error: produced zero addresses");
  }
  const dialed = isIP(host) === 6 ? `[${host}]` : host;
  return new StatusError(
    GrpcStatus.UNAVAILABLE,
    `connection error: desc = "transport: Error while dialing: dial tcp ${dialed}:50000: connect: connection refused"`,
  );
}

/** machined's role check: reads need a reading role, writes os:admin. Roles are the client certificate's Subject O. */
function checkRoles(
  m: ApidMethod,
  call: grpc.ServerUnaryCall<Buffer, Buffer> | grpc.ServerWritableStream<Buffer, Buffer>,
): void {
  const subject = call.getAuthContext().sslPeerCertificate?.subject as { O?: string | string[] } | undefined;
  const roles = ([] as string[]).concat(subject?.O ?? []);
  const allowed = m === "Create" || m === "Update" || m === "Destroy" ? ["os:admin"] : READ_ROLES;
  if (!roles.some((r) => allowed.includes(r)))
    throw new StatusError(GrpcStatus.PERMISSION_DENIED, "not authorized");
}

/**
 * The fake apid. Nodes are reachable under each of their node IPs; one apid instance is one
 * endpoint (a control-plane node). See the file header for an example.
 */
/**
 * Runs `fn` against a fake apid of its own, started with `opts`; the apid is stopped afterwards,
 * whatever `fn` does.
 * @example await withFakeApid({ nodes: [loadFixture("aws")] }, async (own) => { … })
 */
export async function withFakeApid<T>(opts: FakeApidOptions, fn: (apid: FakeApid) => Promise<T>): Promise<T> {
  const apid = await FakeApid.start(opts);
  try {
    return await fn(apid);
  } finally {
    await apid.stop();
  }
}

export class FakeApid {
  #pki: FakeApidPki;
  #server: grpc.Server | undefined;
  #port: number;
  readonly #nodes = new Set<NodeState>();
  readonly #byIP = new Map<string, NodeState>();
  /** The endpoint node itself, answering calls without a `node` header. */
  readonly #self: NodeState;
  readonly #types = new Map<string, string>();
  readonly #subs = new Set<WatchSub>();
  readonly #counts = new Map<string, number>();
  readonly #inject = new Map<string, Injected[]>();
  readonly #delays = new Map<string, number>();
  readonly #platform: string;
  readonly #machine: boolean;
  #inFlight = 0;
  #peak = 0;
  #clock = Date.parse("2026-01-01T00:00:00Z");

  private constructor(pki: FakeApidPki, opts: FakeApidOptions) {
    this.#pki = pki;
    this.#port = opts.port ?? 0;
    this.#platform = opts.platform ?? "metal";
    this.#machine = opts.machine === true;
    for (const r of Object.values(RESOURCES)) this.#types.set(r.type, r.namespace);
    this.#self = {
      spec: {
        name: "endpoint",
        nodeIPs: [],
        talosVersion: opts.talosVersion ?? "v1.13.0",
        platformMetadata: {} as PlatformMetadata,
        addresses: [],
      },
      down: false,
      resources: new Map(),
    };
    if (opts.controllerManagerConfig) this.setControllerManagerConfig(opts.controllerManagerConfig);
    for (const n of opts.nodes ?? []) this.addNode(n);
  }

  /** Makes a Talos-like PKI: Ed25519 OS CA, server certificate, client CA = OS CA. */
  static async createPki(): Promise<FakeApidPki> {
    const osCA = await createCA("talos", "ed25519");
    const server = await osCA.issue({
      cn: "talos",
      usage: "server",
      keyType: "ed25519",
      ips: ["127.0.0.1"],
      dns: ["localhost", "talos", "talos.default"],
      hours: 24 * 365,
    });
    return { osCA, clientCA: osCA, server };
  }

  /** Starts an apid on 127.0.0.1. */
  static async start(opts: FakeApidOptions = {}): Promise<FakeApid> {
    // A port below the ephemeral range (see freePort): restart() binds it again, and in between no
    // outgoing connection may take it as its source port.
    const port = opts.port ?? (await freePort());
    const apid = new FakeApid(opts.pki ?? (await FakeApid.createPki()), { ...opts, port });
    await apid.#listen();
    return apid;
  }

  /** `127.0.0.1:<port>`. */
  get endpoint(): string {
    return `127.0.0.1:${this.#port}`;
  }

  get port(): number {
    return this.#port;
  }

  get pki(): FakeApidPki {
    return this.#pki;
  }

  /**
   * A talosconfig (YAML) with a fresh Ed25519 client certificate from the current client CA, key
   * PEM labelled `ED25519 PRIVATE KEY` as Talos writes it.
   */
  async talosconfig(opts: TalosconfigOptions = {}): Promise<string> {
    const ca = opts.clientCA ?? this.#pki.clientCA;
    const leaf = await ca.issue({
      cn: "talos-cloud-controller-manager",
      o: opts.roles ?? ["os:reader"],
      usage: "client",
      keyType: "ed25519",
      keyLabel: "ED25519 PRIVATE KEY",
      hours: opts.hours ?? 6,
    });
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    const name = opts.context ?? "default";
    const context: Record<string, unknown> = { endpoints: opts.endpoints ?? [this.endpoint] };
    const caPem = opts.ca ?? this.#pki.osCA.cert;
    if (caPem) context.ca = b64(caPem);
    context.crt = b64(leaf.cert);
    context.key = b64(leaf.key);
    if (opts.cluster !== undefined) context.cluster = opts.cluster;
    return stringify({ context: name, contexts: { [name]: context } });
  }

  /** Writes {@link talosconfig} to `path` (atomically, like a Secret update) and returns `path`. */
  async writeTalosconfig(path: string, opts: TalosconfigOptions = {}): Promise<string> {
    const text = await this.talosconfig(opts);
    writeFileSync(`${path}.tmp`, text, { mode: 0o600 });
    renameSync(`${path}.tmp`, path);
    return path;
  }

  // ---- nodes ----

  /**
   * Adds a node, reachable under each of its node IPs.
   * @throws {Error} when one of its IPs is taken.
   */
  addNode(spec: FakeNodeSpec): void {
    for (const ip of spec.nodeIPs) {
      if (this.#byIP.has(ip)) throw new Error(`Cannot add node ${spec.name}: IP ${ip} is taken`);
    }
    const node: NodeState = {
      spec: { ...spec, addresses: [...spec.addresses], ...(spec.links ? { links: [...spec.links] } : {}) },
      down: false,
      resources: new Map(),
    };
    this.#put(node, "platformmetadata", { kind: "platformmetadata", value: spec.platformMetadata });
    if (spec.systemInformation) {
      this.#put(node, "systeminformation", { kind: "systeminformation", value: spec.systemInformation });
    }
    for (const a of spec.addresses) this.#put(node, a.id, { kind: "address", value: a });
    this.#putLinks(node);
    const { nodename, hostname, domainname } = nodeIdentity(spec);
    this.#putHostname(node, { hostname, domainname });
    this.#putNodename(node, nodename);
    const nodeIP = nodeIPConfigOf(spec);
    if (nodeIP) this.#put(node, RESOURCES.nodeipconfig.id, { kind: "nodeipconfig", value: nodeIP });
    if (spec.controllerManagerConfig) {
      this.#put(node, RESOURCES.controllermanagerconfig.id, {
        kind: "cmc",
        value: spec.controllerManagerConfig,
      });
    }
    this.#nodes.add(node);
    for (const ip of spec.nodeIPs) this.#byIP.set(ip, node);
  }

  /** Adds many nodes. */
  addNodes(specs: Iterable<FakeNodeSpec>): void {
    for (const s of specs) this.addNode(s);
  }

  /** Removes the node reachable under `ip` (all its IPs); its open watches end with Unavailable. */
  removeNode(ip: string): void {
    const node = this.#node(ip);
    this.#cut(node, `node ${ip} removed`);
    this.#nodes.delete(node);
    for (const i of node.spec.nodeIPs) this.#byIP.delete(i);
  }

  /** The current definition of the node reachable under `ip`. */
  node(ip: string): FakeNodeSpec | undefined {
    return this.#byIP.get(ip)?.spec;
  }

  /** Number of nodes. */
  get nodeCount(): number {
    return this.#nodes.size;
  }

  /**
   * Changes a node's resources; open watches receive UPDATED (with `old`), CREATED and DESTROYED
   * events as Talos would send them.
   */
  updateNode(ip: string, change: NodeChange): void {
    const node = this.#node(ip);
    if (change.talosVersion !== undefined) node.spec.talosVersion = change.talosVersion;
    if (change.platformMetadata) {
      const value = { ...node.spec.platformMetadata, ...change.platformMetadata };
      node.spec.platformMetadata = value;
      this.#put(node, "platformmetadata", { kind: "platformmetadata", value });
    }
    if (change.systemInformation === null) {
      delete node.spec.systemInformation;
      this.#delete(node, RESOURCES.systeminformation, "systeminformation");
    } else if (change.systemInformation) {
      node.spec.systemInformation = change.systemInformation;
      this.#put(node, "systeminformation", { kind: "systeminformation", value: change.systemInformation });
    }
    if (change.addresses) {
      const next = new Map(change.addresses.map((a) => [a.id, a]));
      for (const old of node.spec.addresses) {
        if (!next.has(old.id)) this.#delete(node, RESOURCES.addresses, old.id);
      }
      for (const a of change.addresses) {
        const prev = node.spec.addresses.find((o) => o.id === a.id);
        if (!prev || JSON.stringify(prev) !== JSON.stringify(a))
          this.#put(node, a.id, { kind: "address", value: a });
      }
      node.spec.addresses = [...change.addresses];
    }
    if (change.links !== undefined) {
      if (change.links === null) delete node.spec.links;
      else node.spec.links = [...change.links];
    }
    if (change.links !== undefined || (change.addresses && !node.spec.links)) this.#putLinks(node);
    if (change.nodeIPConfig === null) {
      node.spec.nodeIPConfig = null;
      this.#delete(node, RESOURCES.nodeipconfig, RESOURCES.nodeipconfig.id);
    } else if (change.nodeIPConfig) {
      node.spec.nodeIPConfig = change.nodeIPConfig;
      const value = nodeIPConfigOf(node.spec) as Required<FakeNodeIPConfig>;
      this.#put(node, RESOURCES.nodeipconfig.id, { kind: "nodeipconfig", value });
    }
    if (change.hostname === null) {
      this.#delete(node, RESOURCES.hostname, RESOURCES.hostname.id);
    } else if (change.hostname) {
      node.spec.hostname = change.hostname.hostname;
      node.spec.domainname = change.hostname.domainname;
      this.#putHostname(node, change.hostname);
    }
    if (change.nodename === null) {
      this.#delete(node, RESOURCES.nodename, RESOURCES.nodename.id);
    } else if (change.nodename !== undefined) {
      node.spec.nodename = change.nodename;
      this.#putNodename(node, change.nodename);
    }
  }

  /**
   * Adds addresses of new ids to a node's list without diffing it against the old one (one CREATED
   * event each on its open watches; links left as they are): a hostile machine's address flood,
   * thousands a second, which {@link updateNode} would diff in quadratic time. Its watches are
   * looked up once per call, not per address, so that the flood costs the test's own process little.
   * @param keepLast keeps only the newest this many of the addresses this method added (the older
   *   ones are dropped without an event, as a hostile machine need not be consistent; the node's
   *   own stay): a watch opened later gets those, and the test's memory stays bounded however long
   *   the flood runs.
   */
  addAddresses(ip: string, addresses: readonly FakeAddress[], keepLast = Number.POSITIVE_INFINITY): void {
    const added = this.#added.get(ip) ?? [];
    this.#added.set(ip, added);
    const node = this.#node(ip);
    const { namespace, type } = RESOURCES.addresses;
    const k = key(namespace, type);
    const byId = node.resources.get(k) ?? new Map<string, Stored>();
    node.resources.set(k, byId);
    const subs = [...this.#subs].filter(
      (s) => s.node === node && s.namespace === namespace && s.type === type,
    );
    for (const a of addresses) {
      node.spec.addresses.push(a);
      added.push(a.id);
      this.#clock += 1000;
      const t = this.#clock;
      const data = { kind: "address", value: a } as const;
      const s: Stored = {
        namespace,
        type,
        id: a.id,
        version: 1,
        created: t,
        updated: t,
        owner: OWNERS.address,
        data,
      };
      byId.set(a.id, s);
      const to = subs.filter((sub) => sub.id === undefined || sub.id === a.id);
      if (to.length === 0) continue;
      const event = { eventType: EventType.CREATED, resource: this.#resource(s) };
      const bytes = Buffer.from(WatchResponse.encode({ event: [event] }).finish());
      for (const sub of to) sub.call.write(bytes);
    }
    const over = added.length - keepLast;
    if (over <= 0) return;
    const dropped = new Set(added.splice(0, over));
    for (const id of dropped) byId.delete(id);
    node.spec.addresses = node.spec.addresses.filter((a) => !dropped.has(a.id));
  }
  /** The ids {@link addAddresses} added to each node (by the IP it was called with), oldest first. */
  readonly #added = new Map<string, string[]>();

  /**
   * Marks the node down (Unavailable on every call routed to it; its open streams are cut with
   * Unavailable) or up again.
   */
  setDown(ip: string, down: boolean): void {
    const node = this.#node(ip);
    node.down = down;
    if (down) this.#cut(node, `node ${ip} is down`);
  }

  /** Sets or clears (undefined → NotFound) the ControllerManagerConfig served without a `node` header. */
  setControllerManagerConfig(cfg: ControllerManagerConfig | undefined): void {
    const { id } = RESOURCES.controllermanagerconfig;
    if (cfg) this.#put(this.#self, id, { kind: "cmc", value: cfg });
    else this.#delete(this.#self, RESOURCES.controllermanagerconfig, id);
  }

  /**
   * Stores a resource with raw spec bytes on a node (or on the endpoint itself when `ip` is
   * undefined); its type becomes known to the server.
   */
  setRawResource(ip: string | undefined, r: RawResource): void {
    const node = ip === undefined ? this.#self : this.#node(ip);
    this.#types.set(r.type, r.namespace);
    this.#putTyped(node, r.namespace, r.type, r.id, {
      kind: "raw",
      proto: r.protoSpec,
      yaml: r.yamlSpec ?? "",
    });
  }

  // ---- faults ----

  /**
   * Makes the next `times` calls of `method` routed to `ip` fail with `code`; `ip` "*" matches
   * every call, "" calls without a `node` header.
   */
  failNext(ip: string, method: ApidMethod, code: number, times = 1, details?: string): void {
    const k = `${ip}|${method}`;
    const list = this.#inject.get(k) ?? [];
    list.push({ code, details: details ?? `injected failure (code ${code})`, times });
    this.#inject.set(k, list);
  }

  /** Delays the answers of `method` (or of every method) by `ms`; 0 removes the delay. */
  setDelay(ms: number, method?: ApidMethod): void {
    if (ms > 0) this.#delays.set(method ?? "*", ms);
    else this.#delays.delete(method ?? "*");
  }

  /**
   * Calls received, filtered by method, node header value ("" for none) and resource type;
   * every call counts, failed ones included.
   */
  calls(filter: { method?: ApidMethod; node?: string; type?: string } = {}): number {
    let n = 0;
    for (const [k, count] of this.#counts) {
      const [m, node, type] = k.split("|");
      if (filter.method !== undefined && m !== filter.method) continue;
      if (filter.node !== undefined && node !== filter.node) continue;
      if (filter.type !== undefined && type !== filter.type) continue;
      n += count;
    }
    return n;
  }

  /** Clears the call counters and the in-flight peak. */
  resetCalls(): void {
    this.#counts.clear();
    this.#peak = this.#inFlight;
  }

  /** The most calls handled at once since the last reset (unary, List, and Watch until its initial state is sent). */
  get peakInFlight(): number {
    return this.#peak;
  }

  /** Open Watch streams, of one node or all, of one resource (e.g. `addresses`) or any. */
  watchers(ip?: string, resource?: keyof typeof RESOURCES): number {
    if (ip === undefined) return this.#subs.size;
    const node = this.#byIP.get(ip);
    const of = resource === undefined ? undefined : RESOURCES[resource];
    return [...this.#subs].filter(
      (s) => s.node === node && (of === undefined || (s.namespace === of.namespace && s.type === of.type)),
    ).length;
  }

  // ---- lifecycle ----

  /** Stops listening; open streams break. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    this.#subs.clear();
    server?.forceShutdown();
  }

  /** Stops (if running) and listens again on the same port with the current certificates; open streams break. */
  async restart(): Promise<void> {
    await this.stop();
    await this.#listen();
  }

  /**
   * Replaces the client CA: certificates of the old one are refused at the TLS handshake from now
   * on (open connections are dropped by a restart), and {@link talosconfig} issues from the new one.
   */
  async rotateClientCA(): Promise<void> {
    this.#pki = { ...this.#pki, clientCA: await createCA("talos-rotated", "ed25519") };
    await this.restart();
  }

  // ---- internals ----

  async #listen(): Promise<void> {
    const server = new grpc.Server();
    server.addService(SERVICE, {
      Get: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        this.#unary("Get", call, cb, (target, req) => this.#get(target, req));
      },
      List: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        void this.#list(call);
      },
      Watch: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        void this.#watch(call);
      },
      Create: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        this.#unary("Create", call, cb, () => {
          throw WRITE_REFUSED;
        });
      },
      Update: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        this.#unary("Update", call, cb, () => {
          throw WRITE_REFUSED;
        });
      },
      Destroy: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        this.#unary("Destroy", call, cb, () => {
          throw WRITE_REFUSED;
        });
      },
      Version: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        this.#unary("Version", call, cb, (target) => this.#version(target, call.metadata));
      },
    });
    const creds = grpc.ServerCredentials.createSsl(
      Buffer.from(this.#pki.clientCA.cert),
      [{ private_key: Buffer.from(this.#pki.server.key), cert_chain: Buffer.from(this.#pki.server.cert) }],
      true,
    );
    this.#port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(`127.0.0.1:${this.#port}`, creds, (err, port) => (err ? reject(err) : resolve(port)));
    });
    this.#server = server;
  }

  #node(ip: string): NodeState {
    const node = this.#byIP.get(ip);
    if (!node) throw new Error(`FakeApid: no node with IP ${ip}`);
    return node;
  }

  #put(node: NodeState, id: string, data: Exclude<SpecData, { kind: "raw" }>): void {
    const { namespace, type } = RESOURCES[KIND_RESOURCE[data.kind]];
    this.#putTyped(node, namespace, type, id, data);
  }

  /** Brings the node's LinkStatuses in line with {@link nodeLinks}: only changed links emit events. */
  #putLinks(node: NodeState): void {
    const { namespace, type } = RESOURCES.links;
    const current = node.resources.get(key(namespace, type)) ?? new Map<string, Stored>();
    const next = nodeLinks(node.spec);
    const names = new Set(next.map((l) => l.name));
    for (const id of [...current.keys()]) if (!names.has(id)) this.#delete(node, RESOURCES.links, id);
    for (const l of next) {
      const prev = current.get(l.name)?.data;
      if (prev?.kind !== "link" || JSON.stringify(prev.value) !== JSON.stringify(l))
        this.#put(node, l.name, { kind: "link", value: l });
    }
  }

  #putHostname(node: NodeState, value: FakeHostname): void {
    this.#put(node, RESOURCES.hostname.id, { kind: "hostname", value });
  }

  /** Talos derives the Nodename from the HostnameStatus and records which version it used. */
  #putNodename(node: NodeState, nodename: string): void {
    const { namespace, type, id } = RESOURCES.hostname;
    const version = node.resources.get(key(namespace, type))?.get(id)?.version;
    this.#put(node, RESOURCES.nodename.id, {
      kind: "nodename",
      value: {
        nodename,
        hostnameVersion: version === undefined ? "" : String(version),
        skipNodeRegistration: false,
      },
    });
  }

  #putTyped(node: NodeState, namespace: string, type: string, id: string, data: SpecData): void {
    const k = key(namespace, type);
    let byId = node.resources.get(k);
    if (!byId) {
      byId = new Map();
      node.resources.set(k, byId);
    }
    this.#clock += 1000;
    const now = this.#clock;
    const old = byId.get(id);
    const next: Stored = old
      ? { ...old, version: old.version + 1, updated: now, data, encoded: undefined }
      : { namespace, type, id, version: 1, created: now, updated: now, owner: OWNERS[data.kind], data };
    byId.set(id, next);
    this.#emit(node, next, () =>
      old
        ? { eventType: EventType.UPDATED, resource: this.#resource(next), old: this.#resource(old) }
        : { eventType: EventType.CREATED, resource: this.#resource(next) },
    );
  }

  #delete(node: NodeState, r: { namespace: string; type: string }, id: string): void {
    const { namespace, type } = r;
    const byId = node.resources.get(key(namespace, type));
    const old = byId?.get(id);
    if (!byId || !old) return;
    byId.delete(id);
    // COSI's destroyed event carries the resource as it was stored, version unchanged.
    this.#emit(node, old, () => ({ eventType: EventType.DESTROYED, resource: this.#resource(old) }));
  }

  #resource(s: Stored): Resource {
    s.encoded ??= encodeData(s.data);
    const { proto, yaml } = s.encoded;
    return resourceMessage(
      {
        namespace: s.namespace,
        type: s.type,
        id: s.id,
        version: String(s.version),
        owner: s.owner,
        phase: "running",
        created: timestamp(s.created),
        updated: timestamp(s.updated),
      },
      { protoSpec: proto, yamlSpec: yaml },
    );
  }

  /** What Talos sends for a watched id that does not exist: metadata only, version "undefined". */
  #tombstone(namespace: string, type: string, id: string): Resource {
    const now = timestamp(this.#clock);
    return resourceMessage(
      { namespace, type, id, version: "undefined", phase: "running", created: now, updated: now },
      { protoSpec: new Uint8Array() },
    );
  }

  /** Sends an event to the watches of `s`; the event is built only when someone watches. */
  #emit(node: NodeState, s: Stored, event: () => Event): void {
    const subs = [...this.#subs].filter(
      (sub) =>
        sub.node === node &&
        sub.namespace === s.namespace &&
        sub.type === s.type &&
        (sub.id === undefined || sub.id === s.id),
    );
    if (subs.length === 0) return;
    const bytes = Buffer.from(WatchResponse.encode({ event: [event()] }).finish());
    for (const sub of subs) sub.call.write(bytes);
  }

  #cut(node: NodeState, why: string): void {
    for (const sub of this.#subs) {
      if (sub.node !== node) continue;
      this.#subs.delete(sub);
      sub.call.emit("error", {
        code: GrpcStatus.UNAVAILABLE,
        details: `connection error: desc = "transport: ${why}"`,
      });
    }
  }

  #count(m: ApidMethod, node: string, type: string): void {
    const k = `${m}|${node}|${type}`;
    this.#counts.set(k, (this.#counts.get(k) ?? 0) + 1);
  }

  /** Counts a call in flight; the returned function (idempotent) ends it. */
  #enter(): () => void {
    this.#inFlight++;
    if (this.#inFlight > this.#peak) this.#peak = this.#inFlight;
    let left = false;
    return () => {
      if (!left) this.#inFlight--;
      left = true;
    };
  }

  /**
   * apid's checks before a call reaches a node, in apid's order: the `node`/`nodes` headers and the
   * target (injected failures and delays come here), routing, then machined's role check for the
   * method. Returns the node answering the call.
   */
  async #route(
    m: ApidMethod,
    call: grpc.ServerUnaryCall<Buffer, Buffer> | grpc.ServerWritableStream<Buffer, Buffer>,
    type: string,
  ): Promise<NodeState> {
    // grpc-js hands a server repeated headers joined with ", ": that is how several values show.
    const nodeValues = call.metadata
      .get("node")
      .map(String)
      .flatMap((v) => v.split(", "));
    const nodesValues = call.metadata.get("nodes").map(String);
    this.#count(m, nodeValues.join(","), type);
    if (nodeValues.length > 1)
      throw new StatusError(GrpcStatus.INVALID_ARGUMENT, "node metadata must be single-valued");
    if (nodesValues.length > 0 && m !== "Version") {
      throw new StatusError(
        GrpcStatus.INVALID_ARGUMENT,
        `one-2-many proxying is not supported for method ${PATHS[m.toLowerCase() as keyof typeof PATHS]}`,
      );
    }
    const target = nodeValues[0];
    if (target !== undefined && (target === "" || addressContainsPort(target))) {
      throw new StatusError(GrpcStatus.INTERNAL, `invalid target "${target}"`);
    }
    for (const k of [`${target ?? ""}|${m}`, `*|${m}`]) {
      const list = this.#inject.get(k);
      const first = list?.[0];
      if (!list || !first) continue;
      if (--first.times <= 0) list.shift();
      throw new StatusError(first.code, first.details);
    }
    const ms = this.#delays.get(m) ?? this.#delays.get("*") ?? 0;
    if (ms > 0) await Bun.sleep(ms);
    const node =
      target === undefined
        ? ((this.#machine ? this.#nodes.values().next().value : undefined) ?? this.#self)
        : this.#byIP.get(target.replace(/^\[+|\]+$/g, ""));
    if (!node || node.down) throw dialError(target as string);
    checkRoles(m, call);
    return node;
  }

  /**
   * Talos' access policy for reads (internal/app/resources of siderolabs/talos): the type must have a
   * resource definition (looked up lowercased), then the namespace must be registered, whichever
   * types it holds; a known type asked in another known namespace passes and is simply not there.
   */
  #checkType(namespace: string, type: string): void {
    const lower = type.toLowerCase();
    if (![...this.#types.keys()].some((t) => t.toLowerCase() === lower)) {
      throw new StatusError(GrpcStatus.PERMISSION_DENIED, `resource type "${type}" is not supported`);
    }
    if (!TALOS_NAMESPACES.has(namespace) && ![...this.#types.values()].includes(namespace)) {
      throw new StatusError(GrpcStatus.PERMISSION_DENIED, `namespace "${namespace}" is not supported`);
    }
  }

  #unary(
    m: ApidMethod,
    call: grpc.ServerUnaryCall<Buffer, Buffer>,
    cb: grpc.sendUnaryData<Buffer>,
    serve: (target: NodeState, req: Buffer) => Uint8Array | Promise<Uint8Array>,
  ): void {
    const leave = this.#enter();
    call.on("cancelled", leave); // a call the client gave up on is no longer in flight
    const type = m === "Get" ? this.#peekType(GetRequest, call.request) : "";
    this.#route(m, call, type)
      .then((target) => serve(target, call.request))
      .then(
        (bytes) => cb(null, Buffer.from(bytes)),
        (err) => cb(this.#status(err)),
      )
      .finally(leave);
  }

  #peekType(message: { decode(b: Uint8Array): { type: string } }, b: Buffer): string {
    try {
      return message.decode(b).type;
    } catch {
      return "";
    }
  }

  #status(err: unknown): Partial<grpc.StatusObject> {
    if (err instanceof StatusError) return { code: err.code, details: err.details };
    return { code: GrpcStatus.INTERNAL, details: `fake apid: ${(err as Error)?.message ?? err}` };
  }

  #decode<T>(decode: () => T): T {
    try {
      return decode();
    } catch (err) {
      throw new StatusError(
        GrpcStatus.INVALID_ARGUMENT,
        `grpc: error unmarshalling request: ${(err as Error).message}`,
      );
    }
  }

  #get(target: NodeState, raw: Buffer): Uint8Array {
    const req = this.#decode(() => GetRequest.decode(raw));
    this.#checkType(req.namespace, req.type);
    const s = target.resources.get(key(req.namespace, req.type))?.get(req.id);
    if (!s) {
      throw new StatusError(
        GrpcStatus.NOT_FOUND,
        `resource ${req.type}(${req.namespace}/${req.id}@undefined) doesn't exist`,
      );
    }
    return GetResponse.encode({ resource: this.#resource(s) }).finish();
  }

  #version(target: NodeState, md: grpc.Metadata): Uint8Array {
    const nodes = md
      .get("nodes")
      .map(String)
      .flatMap((v) => v.split(","));
    const one = (n: NodeState, hostname?: string): Version => ({
      ...(hostname === undefined ? {} : { metadata: { hostname, error: "" } }),
      version: {
        tag: n.spec.talosVersion,
        sha: "0123abcd",
        built: "",
        goVersion: "go1.24.0",
        os: "linux",
        arch: "amd64",
      },
      platform: { name: n === this.#self ? this.#platform : n.spec.platformMetadata.platform, mode: "cloud" },
      features: { rbac: true },
    });
    if (nodes.length === 0) return VersionResponse.encode({ messages: [one(target)] }).finish();
    const messages = nodes.map((ip): Version => {
      const n = this.#byIP.get(ip);
      if (!n || n.down) return { metadata: { hostname: ip, error: "connection refused" } };
      return one(n, ip);
    });
    return VersionResponse.encode({ messages }).finish();
  }

  async #list(call: grpc.ServerWritableStream<Buffer, Buffer>): Promise<void> {
    const leave = this.#enter();
    call.on("cancelled", leave); // a call the client gave up on is no longer in flight
    try {
      const req = this.#decode(() => ListRequest.decode(call.request));
      const target = await this.#route("List", call, req.type);
      this.#checkType(req.namespace, req.type);
      const byId = target.resources.get(key(req.namespace, req.type));
      for (const s of sortedById(byId)) {
        if (call.cancelled) return;
        call.write(Buffer.from(ListResponse.encode({ resource: this.#resource(s) }).finish()));
      }
      call.end();
    } catch (err) {
      call.emit("error", this.#status(err));
    } finally {
      leave();
    }
  }

  async #watch(call: grpc.ServerWritableStream<Buffer, Buffer>): Promise<void> {
    const leave = this.#enter();
    call.on("cancelled", leave); // a call the client gave up on is no longer in flight
    try {
      const req = this.#decode(() => WatchRequest.decode(call.request));
      const target = await this.#route("Watch", call, req.type);
      this.#checkType(req.namespace, req.type);
      const opts = req.options;
      // COSI's state server refuses both for a single-resource watch, bootstrap contents first.
      if (req.id !== undefined && opts?.bootstrapContents) {
        throw new StatusError(
          GrpcStatus.UNIMPLEMENTED,
          "bootstrap contents is not implemented for resource watch",
        );
      }
      if (req.id !== undefined && (opts?.labelQuery.length ?? 0) > 0) {
        throw new StatusError(GrpcStatus.UNIMPLEMENTED, "label query is not implemented for resource watch");
      }
      if (call.cancelled || !this.#server) return;
      const write = (events: Event[]) =>
        call.write(Buffer.from(WatchResponse.encode({ event: events }).finish()));
      write([]);
      const byId = target.resources.get(key(req.namespace, req.type));
      if (req.id !== undefined) {
        const s = byId?.get(req.id);
        write([
          s
            ? { eventType: EventType.CREATED, resource: this.#resource(s) }
            : { eventType: EventType.DESTROYED, resource: this.#tombstone(req.namespace, req.type, req.id) },
        ]);
      } else if (opts?.bootstrapContents) {
        for (const s of sortedById(byId))
          write([{ eventType: EventType.CREATED, resource: this.#resource(s) }]);
        // COSI marks the end of the bootstrap with an empty resource of the kind (no id, no spec).
        if (req.apiVersion >= 1) {
          write([
            { eventType: EventType.BOOTSTRAPPED, resource: this.#tombstone(req.namespace, req.type, "") },
          ]);
        }
      }
      const sub: WatchSub = { node: target, namespace: req.namespace, type: req.type, id: req.id, call };
      this.#subs.add(sub);
      const drop = () => this.#subs.delete(sub);
      call.on("cancelled", drop);
      call.on("close", drop);
      call.on("error", drop);
    } catch (err) {
      call.emit("error", this.#status(err));
    } finally {
      leave();
    }
  }
}
