// Talos machine API (apid) client: talosconfig loading (search order, endpoints, Ed25519 label
// fix), one gRPC channel per endpoint shared by every call and watch, round-robin with failover,
// COSI Get/List/Watch of the resources a CCM reads, retries by status code, certificate rotation,
// decoding through the codecs generated from lib/talos.proto into the plain types of lib/types.ts,
// and the `talosccm_api_*` metrics.
// Memory: grpc-js (~16 MB RSS) is imported on the first call only, so config loading and decoding
// work without it; lib/talos_pb.ts is ts-proto output (plain functions on protobuf-es' wire
// reader and writer), not protoc-gen-es' reflection runtime, which would cost ~10 MB under Bun.

import { createPrivateKey, X509Certificate } from "node:crypto";
import { existsSync, type FSWatcher, watch as fsWatch, readFileSync, statSync } from "node:fs";
import { isIP } from "node:net";
import { homedir } from "node:os";
import { basename, dirname, join } from "node:path";
import type * as Grpc from "@grpc/grpc-js";
import { parse as parseYaml } from "yaml";
import { formatIP } from "./cidr.ts";
import { logger } from "./log.ts";
import { type Counter, type Histogram, registry as processRegistry, type Registry } from "./metrics.ts";
import {
  AddressStatusSpec,
  ControllerManagerConfigSpec,
  type Event as CosiEvent,
  type WatchOptions as CosiWatchOptions,
  EventType,
  GetRequest,
  GetResponse,
  HostnameStatusSpec,
  ListRequest,
  ListResponse,
  NetIP,
  NodenameSpec,
  PlatformMetadataSpec,
  type Resource,
  SystemInformationSpec,
  VersionResponse,
  WatchRequest,
  WatchResponse,
} from "./talos_pb.ts";
import type { AddressStatus, ControllerManagerConfig, PlatformMetadata, SystemInformation } from "./types.ts";

const log = logger("talos");

// ---------------------------------------------------------------------------------------------
// Wire constants

/** gRPC method paths served by apid. */
export const PATHS = {
  get: "/cosi.resource.State/Get",
  list: "/cosi.resource.State/List",
  watch: "/cosi.resource.State/Watch",
  create: "/cosi.resource.State/Create",
  update: "/cosi.resource.State/Update",
  destroy: "/cosi.resource.State/Destroy",
  version: "/machine.MachineService/Version",
} as const;

/** The COSI resources this CCM reads, by the request names of the reference's metrics. */
export const RESOURCES = {
  platformmetadata: { namespace: "runtime", type: "PlatformMetadatas.talos.dev", id: "platformmetadata" },
  systeminformation: {
    namespace: "hardware",
    type: "SystemInformations.hardware.talos.dev",
    id: "systeminformation",
  },
  addresses: { namespace: "network", type: "AddressStatuses.net.talos.dev", id: undefined },
  controllermanagerconfig: {
    namespace: "controlplane",
    type: "ControllerManagerConfigs.kubernetes.talos.dev",
    id: "kube-controller-manager",
  },
  nodename: { namespace: "k8s", type: "Nodenames.kubernetes.talos.dev", id: "nodename" },
  hostname: { namespace: "network", type: "HostnameStatuses.net.talos.dev", id: "hostname" },
} as const;

/** A resource kind of {@link RESOURCES}. */
export type ResourceKind = keyof typeof RESOURCES;

/** gRPC status codes (kept here so that code inspecting errors need not load grpc-js). */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** apid's port; endpoints without one get it (`https://host` without a port gets 443). */
export const DEFAULT_PORT = 50000;

/** apid refuses larger messages; grpc-js would stop at 4 MiB by default. */
const MAX_MESSAGE_BYTES = 32 << 20;

/**
 * SNI sent to IP endpoints. Bun's TLS refuses an IP as server name, and apid ignores SNI; the
 * certificate is still checked against the IP itself.
 */
const IP_ENDPOINT_SNI = "talos";

/** Default talosconfig path inside a pod, where the ServiceAccount secret is mounted. */
export const SERVICE_ACCOUNT_TALOSCONFIG = "/var/run/secrets/talos.dev/config";

const ACCESS_HINT =
  "Talos API access for the CCM needs machine.features.kubernetesTalosAPIAccess enabled in the " +
  "control-plane machine config (allowedRoles: [os:reader], allowedKubernetesNamespaces: the CCM's " +
  "namespace) and a talos.dev/v1alpha1 ServiceAccount with roles [os:reader] whose secret is mounted at " +
  "/var/run/secrets/talos.dev";

// ---------------------------------------------------------------------------------------------
// Errors

/** What went wrong, independent of the gRPC layer. */
export type TalosErrorCode =
  | "config"
  | "not-found"
  | "permission-denied"
  | "unavailable"
  | "deadline"
  | "invalid"
  | "unimplemented"
  | "internal"
  | "decode"
  | "canceled"
  | "closed";

/** An error of the Talos client; `code` tells the kind, `grpcCode` the status when one came back. */
export class TalosError extends Error {
  override readonly name: string = "TalosError";
  readonly code: TalosErrorCode;
  readonly grpcCode: number | undefined;
  /** Whether the same call may succeed later without a change of configuration. */
  readonly retryable: boolean;
  constructor(
    code: TalosErrorCode,
    message: string,
    opts: { cause?: unknown; grpcCode?: number; retryable?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.grpcCode = opts.grpcCode;
    this.retryable = opts.retryable ?? false;
  }
}

/** The talosconfig is missing or broken; the message names the file and how to enable access. */
export class TalosConfigError extends TalosError {
  override readonly name = "TalosConfigError";
  /** The file concerned, "" when none was found. */
  readonly path: string;
  constructor(path: string, message: string, opts: { cause?: unknown } = {}) {
    super("config", message, opts);
    this.path = path;
  }
}

/** The resource does not exist (yet): Talos creates some of them late during boot. */
export class TalosNotFoundError extends TalosError {
  override readonly name = "TalosNotFoundError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("not-found", message, { ...opts, grpcCode: GrpcStatus.NOT_FOUND });
  }
}

/** apid refused the call: a missing role or feature, never retried. */
export class TalosPermissionError extends TalosError {
  override readonly name = "TalosPermissionError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("permission-denied", message, { ...opts, grpcCode: GrpcStatus.PERMISSION_DENIED });
  }
}

/** Bytes from the wire that do not decode into what Talos sends. */
export class TalosDecodeError extends TalosError {
  override readonly name = "TalosDecodeError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("decode", message, opts);
  }
}

// ---------------------------------------------------------------------------------------------
// talosconfig

/** One apid endpoint. */
export interface TalosEndpoint {
  host: string;
  port: number;
}

/** The current context of a talosconfig, validated, with PEM material ready for TLS. */
export interface TalosConfig {
  /** The file it was read from. */
  path: string;
  context: string;
  endpoints: TalosEndpoint[];
  /** CA bundle PEM; absent means the system roots. */
  ca?: string;
  /** Client certificate PEM. */
  crt: string;
  /** Client key PEM, with Talos' `ED25519 PRIVATE KEY` label rewritten to `PRIVATE KEY`. */
  key: string;
  /** The context's cluster name, "" when absent (the Go CCM uses it for the clustername label). */
  cluster: string;
  /** Roles of the client certificate (its Subject O), e.g. `os:reader`. */
  roles: string[];
  /** When the client certificate expires (6 hours for the in-cluster one). */
  certNotAfter: Date;
}

/** Where and how {@link loadTalosConfig} looks; every field defaults to the real environment. */
export interface LoadTalosConfigOptions {
  /** An explicit file; skips the search. */
  path?: string;
  env?: Record<string, string | undefined>;
  home?: string;
  exists?: (path: string) => boolean;
  readFile?: (path: string) => string;
}

/**
 * The talosconfig files looked at, in order: `$TALOSCONFIG`, `$TALOS_HOME/config` (default
 * `~/.talos/config`), then the ServiceAccount mount.
 */
export function talosConfigCandidates(env: Record<string, string | undefined>, home: string): string[] {
  const out: string[] = [];
  if (env.TALOSCONFIG) out.push(env.TALOSCONFIG);
  out.push(join(env.TALOS_HOME || join(home, ".talos"), "config"));
  out.push(SERVICE_ACCOUNT_TALOSCONFIG);
  return out;
}

/**
 * Parses one endpoint: `host`, `host:port`, `[v6]:port`, a bare IPv6 address or `https://host[:port]`.
 * @throws {TalosConfigError} on an empty value, another scheme or a bad port.
 */
export function parseEndpoint(raw: string): TalosEndpoint {
  const fail = (why: string) => new TalosConfigError("", `Cannot parse Talos endpoint "${raw}": ${why}`);
  let s = raw.trim();
  let port = DEFAULT_PORT;
  const scheme = s.match(/^([a-z][a-z0-9+.-]*):\/\//i);
  if (scheme) {
    if (scheme[1]?.toLowerCase() !== "https") throw fail("only https:// is supported");
    s = s.slice(scheme[0].length).replace(/\/.*$/, "");
    port = 443;
  }
  if (!s) throw fail("empty host");
  let host = s;
  let portText: string | undefined;
  if (s.startsWith("[")) {
    const end = s.indexOf("]");
    if (end < 0) throw fail("unclosed [");
    host = s.slice(1, end);
    const rest = s.slice(end + 1);
    if (rest) {
      if (!rest.startsWith(":")) throw fail("garbage after ]");
      portText = rest.slice(1);
    }
  } else if (s.indexOf(":") !== s.lastIndexOf(":")) {
    host = s; // a bare IPv6 address
  } else if (s.includes(":")) {
    host = s.slice(0, s.indexOf(":"));
    portText = s.slice(s.indexOf(":") + 1);
  }
  if (!host) throw fail("empty host");
  if (host.includes(":") && isIP(host) !== 6) throw fail("invalid IPv6 address");
  if (portText !== undefined) {
    if (!/^\d{1,5}$/.test(portText) || Number(portText) < 1 || Number(portText) > 65535) {
      throw fail(`invalid port "${portText}"`);
    }
    port = Number(portText);
  }
  return { host, port };
}

/** `host:port` as gRPC targets want it (IPv6 in brackets). */
export function endpointTarget(ep: TalosEndpoint): string {
  return ep.host.includes(":") ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
}

function decodePem(path: string, field: string, value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") {
    throw new TalosConfigError(
      path,
      `Cannot load talosconfig ${path}: "${field}" is missing. ${ACCESS_HINT}`,
    );
  }
  const text = Buffer.from(value.replace(/\s+/g, ""), "base64").toString("utf8");
  if (!text.includes("-----BEGIN ")) {
    throw new TalosConfigError(path, `Cannot load talosconfig ${path}: "${field}" is not base64-encoded PEM`);
  }
  return text;
}

/** Rewrites Talos' `ED25519 PRIVATE KEY` PEM label, which OpenSSL/BoringSSL do not accept. */
export function fixKeyLabel(pem: string): string {
  return pem.replace(/-----(BEGIN|END) ED25519 PRIVATE KEY-----/g, "-----$1 PRIVATE KEY-----");
}

/** Roles from a certificate subject as Node prints it (`CN=x\nO=os:reader`). */
function subjectOrganizations(subject: string): string[] {
  return subject
    .split("\n")
    .filter((line) => line.startsWith("O="))
    .map((line) => line.slice(2));
}

/**
 * Parses talosconfig text and validates its current context.
 * @param text YAML of the file.
 * @param path Used in messages.
 * @param endpointsOverride `TALOS_ENDPOINTS` (comma-separated), replacing the context's endpoints.
 * @throws {TalosConfigError} naming the file and saying how to enable Talos API access.
 */
export function parseTalosConfig(text: string, path: string, endpointsOverride?: string): TalosConfig {
  const broken = (why: string, cause?: unknown) =>
    new TalosConfigError(path, `Cannot load talosconfig ${path}: ${why}. ${ACCESS_HINT}`, { cause });
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw broken("not valid YAML", err);
  }
  if (typeof doc !== "object" || doc === null) throw broken("not a YAML mapping");
  const { context: current, contexts } = doc as { context?: unknown; contexts?: unknown };
  if (typeof contexts !== "object" || contexts === null) throw broken("no contexts");
  const names = Object.keys(contexts);
  let name = typeof current === "string" ? current : "";
  if (!name && names.length === 1) name = names[0] as string;
  const ctx = (contexts as Record<string, unknown>)[name];
  if (!name || typeof ctx !== "object" || ctx === null) {
    throw broken(`context "${name}" not found (contexts: ${names.join(", ") || "none"})`);
  }
  const c = ctx as Record<string, unknown>;
  let rawEndpoints: string[];
  if (endpointsOverride?.trim()) {
    rawEndpoints = endpointsOverride.split(",");
  } else {
    const list = Array.isArray(c.endpoints) ? c.endpoints : [];
    // `target` is the pre-endpoints form; the Go client still honours it.
    rawEndpoints = [...list, ...(typeof c.target === "string" && c.target ? [c.target] : [])].map(String);
  }
  rawEndpoints = rawEndpoints.map((e) => e.trim()).filter((e) => e !== "");
  if (rawEndpoints.length === 0) throw broken(`context "${name}" has no endpoints`);
  let endpoints: TalosEndpoint[];
  try {
    endpoints = rawEndpoints.map(parseEndpoint);
  } catch (err) {
    throw broken((err as Error).message, err);
  }
  const crt = decodePem(path, "crt", c.crt);
  const key = fixKeyLabel(decodePem(path, "key", c.key));
  const ca = typeof c.ca === "string" && c.ca.trim() ? decodePem(path, "ca", c.ca) : undefined;
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(crt);
  } catch (err) {
    throw broken(`"crt" is not a certificate`, err);
  }
  try {
    if (!cert.checkPrivateKey(createPrivateKey(key))) throw new Error("key does not match the certificate");
  } catch (err) {
    throw broken(`"key" is unusable: ${(err as Error).message}`, err);
  }
  const config: TalosConfig = {
    path,
    context: name,
    endpoints,
    crt,
    key,
    cluster: typeof c.cluster === "string" ? c.cluster : "",
    roles: subjectOrganizations(cert.subject),
    certNotAfter: new Date(cert.validTo),
  };
  if (ca !== undefined) config.ca = ca;
  return config;
}

/**
 * Finds, reads and validates the talosconfig, honouring `TALOS_ENDPOINTS`. Does not load grpc-js.
 * @throws {TalosConfigError} when no file exists or the file is broken; the message names the
 *   file(s) and says how to enable `machine.features.kubernetesTalosAPIAccess` with role os:reader.
 * @example const config = loadTalosConfig(); console.log(config.cluster, config.endpoints)
 */
export function loadTalosConfig(opts: LoadTalosConfigOptions = {}): TalosConfig {
  const env = opts.env ?? process.env;
  const exists = opts.exists ?? existsSync;
  const read = opts.readFile ?? ((p: string) => readFileSync(p, "utf8"));
  const candidates = opts.path ? [opts.path] : talosConfigCandidates(env, opts.home ?? homedir());
  const path = candidates.find((p) => exists(p));
  if (path === undefined) {
    throw new TalosConfigError(
      "",
      `Cannot load talosconfig: no file at ${candidates.join(", ")}. ${ACCESS_HINT}, or point TALOSCONFIG at a talosconfig`,
    );
  }
  let text: string;
  try {
    text = read(path);
  } catch (err) {
    throw new TalosConfigError(path, `Cannot load talosconfig ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return parseTalosConfig(text, path, env.TALOS_ENDPOINTS);
}

// ---------------------------------------------------------------------------------------------
// Decoding: apid's messages through the codecs ts-proto generates from lib/talos.proto
// (lib/talos_pb.ts: plain functions over protobuf-es' wire reader, no reflection runtime), then
// checked and mapped into the plain types of lib/types.ts. Every decoder throws TalosDecodeError
// and nothing else: the generated code throws RangeError and friends on malformed bytes.

/** An AddressStatus as decoded, with the peer address of point-to-point links when Talos has one. */
export interface TalosAddressStatus extends AddressStatus {
  /** IFA_LOCAL; differs from `address` only on point-to-point links. */
  local?: string;
}

/** `Nodenames.kubernetes.talos.dev`: the Kubernetes node name Talos gives the kubelet. */
export interface TalosNodename {
  nodename: string;
  /** Version of the HostnameStatus the name was derived from. */
  hostnameVersion: string;
  /** The kubelet does not register a Node (machine.kubelet.skipNodeRegistration). */
  skipNodeRegistration: boolean;
}

/** `HostnameStatuses.net.talos.dev`: the node's hostname and domain. */
export interface TalosHostname {
  hostname: string;
  domainname: string;
}

/** The data each resource kind decodes into. */
export interface ResourceData {
  platformmetadata: PlatformMetadata;
  systeminformation: SystemInformation;
  addresses: TalosAddressStatus;
  controllermanagerconfig: ControllerManagerConfig;
  nodename: TalosNodename;
  hostname: TalosHostname;
}

/** Runs a decoder, turning whatever it throws into one TalosDecodeError naming `what`. */
function decodeWith<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof TalosDecodeError && err.message.startsWith("Cannot decode")) throw err;
    throw new TalosDecodeError(`Cannot decode ${what}: ${(err as Error)?.message ?? String(err)}`, {
      cause: err,
    });
  }
}

/**
 * Formats address bytes as Go's netip does (dotted IPv4, RFC 5952 IPv6, `::ffff:a.b.c.d` for
 * IPv4-mapped); bytes after the 16th are an IPv6 zone (`fe80::1%eth0`).
 * @throws {TalosDecodeError} for lengths other than 4 or 16 and more.
 */
export function formatIPBytes(bytes: Uint8Array): string {
  if (bytes.length !== 4 && bytes.length < 16) {
    throw new TalosDecodeError(`Cannot decode IP address: ${bytes.length} bytes`);
  }
  const width = bytes.length === 4 ? 4 : 16;
  let value = 0n;
  for (let i = 0; i < width; i++) value = (value << 8n) | BigInt(bytes[i] as number);
  const ip = formatIP({ family: width === 4 ? 4 : 6, value });
  if (bytes.length <= 16) return ip;
  const zone = decodeWith("IPv6 zone", () =>
    new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(16)),
  );
  return `${ip}%${zone}`;
}

/**
 * Decodes a netip.Addr field: the NetIP message, or the legacy raw 0/4/16 bytes that older Talos
 * wrote (the lengths cannot collide: a NetIP message of an address is 2 bytes longer). The schema
 * types these fields `bytes` so that both forms reach this function.
 * @returns "" for the zero address.
 * @throws {TalosDecodeError}
 */
export function decodeNetIP(bytes: Uint8Array): string {
  return decodeWith("NetIP", () => {
    if (bytes.length === 0) return "";
    const ip = bytes.length === 4 || bytes.length === 16 ? bytes : NetIP.decode(bytes).ip;
    // The zero address is sent as no bytes at all: a message without one is not a NetIP.
    if (ip.length === 0) throw new TalosDecodeError("no address");
    return formatIPBytes(ip);
  });
}

/** Decodes a `PlatformMetadatas.talos.dev` spec. @throws {TalosDecodeError} */
export function decodePlatformMetadata(bytes: Uint8Array): PlatformMetadata {
  return decodeWith("PlatformMetadataSpec", () => {
    const m = PlatformMetadataSpec.decode(bytes);
    return {
      platform: m.platform,
      hostname: m.hostname,
      region: m.region,
      zone: m.zone,
      instanceType: m.instanceType,
      instanceId: m.instanceId,
      providerId: m.providerId,
      spot: m.spot,
      internalDNS: m.internalDns,
      externalDNS: m.externalDns,
      tags: m.tags,
    };
  });
}

/** Decodes a `SystemInformations.hardware.talos.dev` spec (without bios_version). @throws {TalosDecodeError} */
export function decodeSystemInformation(bytes: Uint8Array): SystemInformation {
  return decodeWith("SystemInformationSpec", () => {
    const s = SystemInformationSpec.decode(bytes);
    return {
      manufacturer: s.manufacturer,
      productName: s.productName,
      version: s.version,
      serialNumber: s.serialNumber,
      uuid: s.uuid,
      wakeUpType: s.wakeUpType,
      skuNumber: s.skuNumber,
    };
  });
}

/**
 * Decodes an `AddressStatuses.net.talos.dev` spec. The family comes from the address bytes.
 * @param id The resource id, `<link>/<prefix>`.
 * @throws {TalosDecodeError} also when the address is missing or its prefix length impossible.
 */
export function decodeAddressStatus(id: string, bytes: Uint8Array): TalosAddressStatus {
  return decodeWith(`AddressStatusSpec ${id}`, () => {
    const a = AddressStatusSpec.decode(bytes);
    const ip = a.address?.ip ?? new Uint8Array();
    const bits = a.address?.prefixLength ?? 0;
    if (ip.length !== 4 && ip.length < 16) throw new TalosDecodeError("no address");
    if (bits < 0 || bits > (ip.length === 4 ? 32 : 128)) throw new TalosDecodeError(`prefix length ${bits}`);
    const out: TalosAddressStatus = {
      id,
      address: `${formatIPBytes(ip.length > 16 ? ip.subarray(0, 16) : ip)}/${bits}`,
      linkName: a.linkName,
      linkIndex: a.linkIndex,
      family: ip.length === 4 ? "inet4" : "inet6",
      scope: a.scope,
      flags: a.flags,
    };
    const local = decodeNetIP(a.local);
    if (local) out.local = local;
    return out;
  });
}

/** Decodes the pod and service CIDRs of a `ControllerManagerConfigs.kubernetes.talos.dev` spec. */
export function decodeControllerManagerConfig(bytes: Uint8Array): ControllerManagerConfig {
  return decodeWith("ControllerManagerConfigSpec", () => {
    const c = ControllerManagerConfigSpec.decode(bytes);
    return { podCIDRs: c.podCidrs, serviceCIDRs: c.serviceCidrs };
  });
}

/** Decodes a `Nodenames.kubernetes.talos.dev` spec. @throws {TalosDecodeError} */
export function decodeNodename(bytes: Uint8Array): TalosNodename {
  return decodeWith("NodenameSpec", () => NodenameSpec.decode(bytes));
}

/** Decodes a `HostnameStatuses.net.talos.dev` spec. @throws {TalosDecodeError} */
export function decodeHostnameStatus(bytes: Uint8Array): TalosHostname {
  return decodeWith("HostnameStatusSpec", () => HostnameStatusSpec.decode(bytes));
}

const SPEC_DECODERS: { [K in ResourceKind]: (id: string, bytes: Uint8Array) => ResourceData[K] } = {
  platformmetadata: (_id, b) => decodePlatformMetadata(b),
  systeminformation: (_id, b) => decodeSystemInformation(b),
  addresses: decodeAddressStatus,
  controllermanagerconfig: (_id, b) => decodeControllerManagerConfig(b),
  nodename: (_id, b) => decodeNodename(b),
  hostname: (_id, b) => decodeHostnameStatus(b),
};

/** A decoded COSI resource: its id, version and typed spec. */
export interface TalosResource<T> {
  id: string;
  /** The metadata version: a decimal integer, or "undefined" for tombstones. */
  version: string;
  spec: T;
}

/**
 * Checks a `cosi.resource.Resource` as the Go client does (metadata present, phase running or
 * tearingDown, version an integer or "undefined") and decodes its spec.
 * @param allowEmpty Accept an absent or empty spec (tombstones of destroyed resources); `spec` is then undefined.
 */
function resourceOf<K extends ResourceKind>(
  kind: K,
  r: Resource | undefined,
  allowEmpty = false,
): TalosResource<ResourceData[K] | undefined> {
  const md = r?.metadata;
  if (!md) throw new TalosDecodeError(r ? "no metadata" : "no resource");
  const name = `${md.type}(${md.namespace}/${md.id})`;
  if (md.phase !== "running" && md.phase !== "tearingDown")
    throw new TalosDecodeError(`${name}: phase "${md.phase}"`);
  if (md.version !== "undefined" && !/^\d+$/.test(md.version)) {
    throw new TalosDecodeError(`${name}: version "${md.version}"`);
  }
  const spec = r.spec?.protoSpec;
  if (!spec || spec.length === 0) {
    if (allowEmpty) return { id: md.id, version: md.version, spec: undefined };
    if (!spec) throw new TalosDecodeError(`${name}: no spec`);
  }
  return { id: md.id, version: md.version, spec: SPEC_DECODERS[kind](md.id, spec) };
}

function specOf<T>(r: TalosResource<T | undefined>): TalosResource<T> {
  if (r.spec === undefined) throw new TalosDecodeError(`Cannot decode resource ${r.id}: empty spec`);
  return r as TalosResource<T>;
}

/** Decodes a GetResponse. @throws {TalosDecodeError} */
export function decodeGetResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): TalosResource<ResourceData[K]> {
  return decodeWith(`GetResponse of ${RESOURCES[kind].type}`, () =>
    specOf(resourceOf(kind, GetResponse.decode(bytes).resource)),
  );
}

/** Decodes one ListResponse stream message. @throws {TalosDecodeError} */
export function decodeListResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): TalosResource<ResourceData[K]> {
  return decodeWith(`ListResponse of ${RESOURCES[kind].type}`, () =>
    specOf(resourceOf(kind, ListResponse.decode(bytes).resource)),
  );
}

/** A COSI watch event as the client hands it out. */
export type TalosWatchEvent<T> =
  | { type: "created"; id: string; version: string; resource: T }
  | { type: "updated"; id: string; version: string; resource: T; old?: T }
  | { type: "destroyed"; id: string; resource?: T }
  | { type: "bootstrapped" }
  | { type: "errored"; error: string };

/** One Event; undefined for NOOP and event types newer than this client. */
function eventOf<K extends ResourceKind>(
  kind: K,
  e: CosiEvent,
): TalosWatchEvent<ResourceData[K]> | undefined {
  switch (e.eventType) {
    case EventType.CREATED: {
      const r = specOf(resourceOf(kind, e.resource));
      return { type: "created", id: r.id, version: r.version, resource: r.spec };
    }
    case EventType.UPDATED: {
      const r = specOf(resourceOf(kind, e.resource));
      const prev = e.old ? resourceOf(kind, e.old, true).spec : undefined;
      return prev === undefined
        ? { type: "updated", id: r.id, version: r.version, resource: r.spec }
        : { type: "updated", id: r.id, version: r.version, resource: r.spec, old: prev };
    }
    case EventType.DESTROYED: {
      const r = resourceOf(kind, e.resource, true);
      return r.spec === undefined
        ? { type: "destroyed", id: r.id }
        : { type: "destroyed", id: r.id, resource: r.spec };
    }
    case EventType.BOOTSTRAPPED:
      return { type: "bootstrapped" };
    case EventType.ERRORED:
      return { type: "errored", error: e.error ?? "watch errored" };
    default:
      return undefined;
  }
}

/**
 * Decodes one WatchResponse into events (the first response of a watch has none).
 * @throws {TalosDecodeError}
 */
export function decodeWatchResponse<K extends ResourceKind>(
  kind: K,
  bytes: Uint8Array,
): Array<TalosWatchEvent<ResourceData[K]>> {
  return decodeWith(`WatchResponse of ${RESOURCES[kind].type}`, () =>
    WatchResponse.decode(bytes).event.flatMap((e) => eventOf(kind, e) ?? []),
  );
}

/** What `Version` reports about the endpoint node. */
export interface TalosVersion {
  tag: string;
  sha: string;
  arch: string;
  platform: string;
}

/** Decodes a VersionResponse (its first message). @throws {TalosDecodeError} */
export function decodeVersionResponse(bytes: Uint8Array): TalosVersion {
  return decodeWith("VersionResponse", () => {
    const first = VersionResponse.decode(bytes).messages[0];
    if (!first?.version) throw new TalosDecodeError("no version");
    const { tag, sha, arch } = first.version;
    return { tag, sha, arch, platform: first.platform?.name ?? "" };
  });
}

/**
 * Encodes a WatchRequest with api_version 1: of one resource when `id` is given (presence
 * matters, even for ""), else of all with bootstrap_contents.
 */
export function encodeWatchRequest(namespace: string, type: string, id: string | undefined): Uint8Array {
  const all: CosiWatchOptions = {
    bootstrapContents: true,
    tailEvents: 0,
    labelQuery: [],
    aggregated: false,
    bootstrapBookmark: false,
  };
  return WatchRequest.encode(
    id === undefined
      ? { namespace, type, options: all, apiVersion: 1 }
      : { namespace, type, id, apiVersion: 1 },
  ).finish();
}

// ---------------------------------------------------------------------------------------------
// Retry policy

/** Exponential backoff bounds in milliseconds. */
export interface Backoff {
  initialMs: number;
  maxMs: number;
}

/**
 * The delay before retry number `attempt` (0-based): exponential from `initialMs`, capped at
 * `maxMs`, with "equal jitter" (between half and all of it) so that clients do not retry in step.
 */
export function backoffDelay(attempt: number, b: Backoff, random: () => number = Math.random): number {
  const full = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return full / 2 + (random() * full) / 2;
}

interface GrpcLikeError {
  code?: unknown;
  details?: unknown;
  message?: unknown;
}

/**
 * Maps a gRPC status to a TalosError following talos-api.md §5: Unavailable, DeadlineExceeded,
 * Canceled (not by us) and Internal (except "invalid target") are retryable; NotFound is a typed
 * "not yet"; PermissionDenied, InvalidArgument and Unimplemented are final.
 * @param what "Cannot <what>" prefix of the message, e.g. `get PlatformMetadatas.talos.dev on node 10.0.0.5`.
 */
export function statusError(what: string, err: unknown): TalosError {
  if (err instanceof TalosError) return err;
  const e = (err ?? {}) as GrpcLikeError;
  const code = typeof e.code === "number" ? e.code : GrpcStatus.UNKNOWN;
  const details = String(e.details ?? e.message ?? err);
  const msg = `Cannot ${what}: ${details}`;
  const opts = { cause: err, grpcCode: code };
  switch (code) {
    case GrpcStatus.NOT_FOUND:
      return new TalosNotFoundError(`Cannot ${what}: not found (yet): ${details}`, { cause: err });
    case GrpcStatus.PERMISSION_DENIED:
      return new TalosPermissionError(
        `Cannot ${what}: permission denied (${details}): the talosconfig certificate needs role os:reader ` +
          "(and this Talos must serve the resource type); check machine.features.kubernetesTalosAPIAccess " +
          "allowedRoles and the talos.dev ServiceAccount roles",
        { cause: err },
      );
    case GrpcStatus.UNAVAILABLE:
      return new TalosError("unavailable", msg, { ...opts, retryable: true });
    case GrpcStatus.DEADLINE_EXCEEDED:
      return new TalosError("deadline", msg, { ...opts, retryable: true });
    case GrpcStatus.CANCELLED:
      return new TalosError("unavailable", msg, { ...opts, retryable: true });
    case GrpcStatus.INTERNAL:
      return new TalosError("internal", msg, { ...opts, retryable: !details.includes("invalid target") });
    case GrpcStatus.INVALID_ARGUMENT:
      return new TalosError("invalid", msg, opts);
    case GrpcStatus.UNIMPLEMENTED:
      return new TalosError("unimplemented", msg, opts);
    default:
      return new TalosError("internal", msg, opts);
  }
}

function abortError(what: string): TalosError {
  return new TalosError("canceled", `Cannot ${what}: canceled`);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError("wait"));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError("wait"));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A FIFO counting semaphore bounding calls in flight. */
class Semaphore {
  #free: number;
  readonly #waiters: Array<{ grant: () => void; fail: (e: Error) => void }> = [];
  constructor(size: number) {
    this.#free = size;
  }
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw abortError("wait for a call slot");
    if (this.#free > 0) {
      this.#free--;
    } else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          grant: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
          fail: reject,
        };
        const onAbort = () => {
          const i = this.#waiters.indexOf(waiter);
          if (i >= 0) this.#waiters.splice(i, 1);
          reject(abortError("wait for a call slot"));
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        this.#waiters.push(waiter);
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      if (next) next.grant();
      else this.#free++;
    };
  }
  /** Fails every waiter (client closed). */
  failAll(err: Error): void {
    for (const w of this.#waiters.splice(0)) w.fail(err);
  }
}

// ---------------------------------------------------------------------------------------------
// Channels

type GrpcModule = typeof Grpc;
let grpcLoading: Promise<{
  grpc: GrpcModule;
  checkServerIdentity: typeof import("node:tls").checkServerIdentity;
}>;

function loadGrpc() {
  grpcLoading ??= Promise.all([import("@grpc/grpc-js"), import("node:tls")]).then(([grpc, tls]) => ({
    grpc,
    checkServerIdentity: tls.checkServerIdentity,
  }));
  return grpcLoading;
}

const passThrough = (b: Buffer) => b;

/** Identity of a file's current content (inode, size, mtime), "" when it cannot be read. */
function fileStamp(path: string): string {
  try {
    const s = statSync(path);
    return `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch {
    return "";
  }
}

/** The channels built from one talosconfig; replaced as a whole when the file changes. */
interface Generation {
  channels: Array<{ endpoint: TalosEndpoint; client: Grpc.Client }>;
  /** Unary calls and streams running on these channels. */
  inFlight: number;
  retired: boolean;
}

/** Pull-based reading of a grpc-js server stream; pauses the stream while the reader lags. */
class StreamReader {
  readonly #queue: Buffer[] = [];
  #done = false;
  #error: unknown;
  #wake: (() => void) | undefined;
  constructor(readonly call: Grpc.ClientReadableStream<Buffer>) {
    call.on("data", (b: Buffer) => {
      this.#queue.push(b);
      if (this.#queue.length >= 256) call.pause();
      this.#notify();
    });
    call.on("error", (e: unknown) => {
      this.#error = e;
      this.#done = true;
      this.#notify();
    });
    call.on("end", () => {
      this.#done = true;
      this.#notify();
    });
  }
  #notify(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }
  /** The next message; undefined at the end of the stream. @throws the stream's gRPC error */
  async next(): Promise<Buffer | undefined> {
    for (;;) {
      const b = this.#queue.shift();
      if (b) {
        if (this.#queue.length < 64 && this.call.isPaused()) this.call.resume();
        return b;
      }
      if (this.#done) {
        if (this.#error !== undefined) throw this.#error;
        return undefined;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Client

/** Options of {@link TalosClient}. */
export interface TalosClientOptions {
  config: TalosConfig;
  /** Re-reads the talosconfig (rotation); without it `reload()` has nothing to read. */
  load?: () => TalosConfig;
  /** Calls and stream opens in flight at most (default 64). */
  maxInFlight?: number;
  /** Deadline of one attempt of a unary call or List (default 10 s). */
  callTimeoutMs?: number;
  /** Attempts per call, retries included (default 5). */
  attempts?: number;
  /** Retry and reconnect backoff (default 500 ms → 15 s). */
  backoff?: Backoff;
  /** Watch resubscription backoff (default 500 ms → 30 s). */
  watchBackoff?: Backoff;
  /** How often the talosconfig file is re-read besides file-change events (default 60 s). */
  configPollMs?: number;
  /** Metrics registry (default: the process registry). */
  registry?: Registry;
  /** Jitter source (tests make it deterministic). */
  random?: () => number;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  /** Deadline of each attempt, overriding the client's. */
  timeoutMs?: number;
  /** Attempts for this call, overriding the client's. */
  attempts?: number;
}

/** Options of {@link TalosClient.watch}. */
export interface WatchOptions {
  /** Watch one resource; defaults to the singleton id of the kind (all AddressStatuses otherwise). */
  id?: string;
  /** Ends the watch. */
  signal?: AbortSignal;
}

interface WatchSession {
  generation: Generation | undefined;
  client: Grpc.Client | undefined;
  reconnecting: boolean;
  call: Grpc.ClientReadableStream<Buffer> | undefined;
}

const API_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * A client of the Talos machine API. One gRPC channel per endpoint, created on the first call and
 * shared by all calls and watches; calls round-robin over the endpoints and fail over on
 * Unavailable. Returns plain data (lib/types.ts); never exposes protobuf or grpc-js types.
 *
 * @example
 * const talos = TalosClient.load();            // talosconfig search, TALOS_ENDPOINTS, file watching
 * const meta = await talos.platformMetadata("10.0.0.5");
 * for await (const ev of talos.watch("10.0.0.5", "addresses", { signal })) console.log(ev.type);
 * talos.close();
 */
export class TalosClient {
  readonly #load: (() => TalosConfig) | undefined;
  readonly #sem: Semaphore;
  readonly #callTimeoutMs: number;
  readonly #attempts: number;
  readonly #backoff: Backoff;
  readonly #watchBackoff: Backoff;
  readonly #configPollMs: number;
  readonly #random: () => number;
  readonly #duration: Histogram;
  readonly #errors: Counter;
  readonly #watches = new Set<WatchSession>();
  #config: TalosConfig;
  #generation: Generation | undefined;
  #roundRobin = 0;
  #closed = false;
  #fileWatcher: FSWatcher | undefined;
  #pollTimer: ReturnType<typeof setInterval> | undefined;
  #reloading: Promise<boolean> | undefined;
  /** fileStamp() of the talosconfig when it was last read by reload(). */
  #configStamp: string | undefined;

  /**
   * Builds a client; no I/O happens until the first call.
   * @throws {TypeError} on invalid options.
   */
  constructor(opts: TalosClientOptions) {
    if (!opts?.config?.endpoints?.length)
      throw new TypeError("TalosClient: config with endpoints is required");
    const positive = (name: string, v: number | undefined, dflt: number) => {
      const n = v ?? dflt;
      if (!Number.isFinite(n) || n <= 0)
        throw new TypeError(`TalosClient: ${name} must be positive, got ${v}`);
      return n;
    };
    this.#config = opts.config;
    this.#load = opts.load;
    this.#sem = new Semaphore(Math.floor(positive("maxInFlight", opts.maxInFlight, 64)));
    this.#callTimeoutMs = positive("callTimeoutMs", opts.callTimeoutMs, 10_000);
    this.#attempts = Math.floor(positive("attempts", opts.attempts, 5));
    this.#backoff = opts.backoff ?? { initialMs: 500, maxMs: 15_000 };
    this.#watchBackoff = opts.watchBackoff ?? { initialMs: 500, maxMs: 30_000 };
    this.#configPollMs = positive("configPollMs", opts.configPollMs, 60_000);
    this.#random = opts.random ?? Math.random;
    const reg = opts.registry ?? processRegistry;
    this.#duration = reg.histogram(
      "talosccm_api_request_duration_seconds",
      "Latency of a Talos API call, retries included.",
      ["request"],
      API_BUCKETS,
    );
    this.#errors = reg.counter(
      "talosccm_api_request_errors_total",
      "Talos API calls that failed after retries.",
      ["request"],
    );
  }

  /**
   * Loads the talosconfig (search order, TALOS_ENDPOINTS) and returns a client that reloads it
   * when the file changes.
   * @throws {TalosConfigError}
   */
  static load(opts: LoadTalosConfigOptions & Omit<TalosClientOptions, "config" | "load"> = {}): TalosClient {
    const config = loadTalosConfig(opts);
    const client = new TalosClient({
      ...opts,
      config,
      load: () => loadTalosConfig({ ...opts, path: config.path }),
    });
    client.watchConfigFile();
    return client;
  }

  /** The talosconfig context's cluster name ("" when absent). */
  get clusterName(): string {
    return this.#config.cluster;
  }

  /** The talosconfig in use. */
  get config(): TalosConfig {
    return this.#config;
  }

  /** `PlatformMetadatas.talos.dev` of the node. @throws {TalosNotFoundError} when it does not exist yet */
  async platformMetadata(nodeIP: string, opts: CallOptions = {}): Promise<PlatformMetadata> {
    return (await this.#get("platformmetadata", nodeIP, opts)).spec;
  }

  /**
   * `SystemInformations.hardware.talos.dev` of the node.
   * @returns undefined when the node does not publish it (no SMBIOS, e.g. many ARM boards).
   */
  async systemInformation(nodeIP: string, opts: CallOptions = {}): Promise<SystemInformation | undefined> {
    try {
      return (await this.#get("systeminformation", nodeIP, opts)).spec;
    } catch (err) {
      if (err instanceof TalosNotFoundError) return undefined;
      throw err;
    }
  }

  /**
   * The Kubernetes node name Talos registers the kubelet with (Nodenames.kubernetes.talos.dev):
   * proof of which node answers on an IP.
   * @throws {TalosNotFoundError} when it does not exist (yet)
   */
  async nodename(nodeIP: string, opts: CallOptions = {}): Promise<string> {
    return (await this.#get("nodename", nodeIP, opts)).spec.nodename;
  }

  /**
   * The node's hostname and domain (HostnameStatuses.net.talos.dev); fqdn = hostname[.domainname].
   * @throws {TalosNotFoundError} when it does not exist (yet)
   */
  async hostname(
    nodeIP: string,
    opts: CallOptions = {},
  ): Promise<{ hostname: string; domainname: string; fqdn: string }> {
    const { hostname, domainname } = (await this.#get("hostname", nodeIP, opts)).spec;
    return { hostname, domainname, fqdn: domainname ? `${hostname}.${domainname}` : hostname };
  }

  /** Every `AddressStatuses.net.talos.dev` of the node. */
  async addresses(nodeIP: string, opts: CallOptions = {}): Promise<TalosAddressStatus[]> {
    const { namespace, type } = RESOURCES.addresses;
    const req = ListRequest.encode({ namespace, type }).finish();
    return this.#call(
      "addresses",
      `list ${type} on node ${nodeIP}`,
      opts,
      (gen, ch, attemptOpts) => this.#listOnce(gen, ch, req, nodeIP, attemptOpts),
      (msgs) => msgs.map((b) => decodeListResponse("addresses", b).spec),
    );
  }

  /**
   * The cluster's pod and service CIDRs, read without a `node` header from the endpoint itself
   * (a control-plane node).
   * @throws {TalosNotFoundError} when the endpoint is not a control-plane node
   */
  async controllerManagerConfig(opts: CallOptions = {}): Promise<ControllerManagerConfig> {
    return (await this.#get("controllermanagerconfig", undefined, opts)).spec;
  }

  /**
   * `MachineService.Version`: of the endpoint itself (a cheap health probe of the connection), or
   * of the node `opts.nodeIP` (its Talos version tag).
   */
  async version(opts: CallOptions & { nodeIP?: string } = {}): Promise<TalosVersion> {
    const node = opts.nodeIP;
    return this.#call(
      "version",
      node === undefined ? "get the Talos version of the endpoint" : `get the Talos version of node ${node}`,
      opts,
      (gen, ch, attemptOpts) => this.#unaryOnce(gen, ch, PATHS.version, new Uint8Array(), node, attemptOpts),
      (msgs) => decodeVersionResponse(msgs[0] ?? new Uint8Array()),
    );
  }

  /**
   * Asks the node on each IP in turn (one attempt per IP and round, then backoff) and returns the
   * first answer; only "unreachable" errors move on to the next IP.
   * @example const { nodeIP, value } = await talos.firstAnswer(["10.0.0.5", "fd00::5"], (ip, o) => talos.platformMetadata(ip, o))
   * @throws the last error when no IP answered; at once any non-retryable error.
   */
  async firstAnswer<T>(
    nodeIPs: readonly string[],
    fn: (nodeIP: string, opts: CallOptions) => Promise<T>,
    opts: CallOptions = {},
  ): Promise<{ nodeIP: string; value: T }> {
    if (nodeIPs.length === 0) throw new TalosError("invalid", "Cannot ask Talos: the node has no IP");
    const rounds = opts.attempts ?? this.#attempts;
    let last: unknown;
    for (let round = 0; round < rounds; round++) {
      if (round > 0) await sleep(backoffDelay(round - 1, this.#backoff, this.#random), opts.signal);
      for (const nodeIP of nodeIPs) {
        try {
          return { nodeIP, value: await fn(nodeIP, { ...opts, attempts: 1 }) };
        } catch (err) {
          if (!(err instanceof TalosError) || !err.retryable) throw err;
          last = err;
        }
      }
    }
    throw last;
  }

  /**
   * Watches one kind of resource on a node as an async iterator that never ends on its own: it
   * resubscribes with jittered backoff after Unavailable, apid restarts or talosconfig reloads,
   * and re-delivers the current state each time (`created` events, then for list watches
   * `destroyed` for what vanished meanwhile and `bootstrapped`). An `errored` event marks the
   * start of each outage. Many watches share the channel as HTTP/2 streams.
   * @param kind For singleton kinds the id defaults to the singleton; for `addresses` all are watched.
   * @throws {TalosError} from the iterator on non-retryable errors (e.g. PermissionDenied).
   */
  watch<K extends ResourceKind>(
    nodeIP: string,
    kind: K,
    opts: WatchOptions = {},
  ): AsyncIterable<TalosWatchEvent<ResourceData[K]>> {
    return { [Symbol.asyncIterator]: () => this.#watch(nodeIP, kind, opts) };
  }

  /**
   * Re-reads the talosconfig; when it changed, builds new channels for new calls and watches and
   * closes the old ones once their calls have finished.
   * @returns whether the configuration changed.
   * @throws {TalosConfigError} when the file cannot be read (the old configuration stays).
   */
  reload(): Promise<boolean> {
    this.#reloading ??= Promise.resolve()
      .then(() => this.#reloadNow())
      .finally(() => {
        this.#reloading = undefined;
      });
    return this.#reloading;
  }

  /**
   * Reloads the talosconfig when its file or directory changes (Kubernetes swaps secret files
   * through a symlink in the directory) and every `configPollMs` as a safety net.
   */
  watchConfigFile(): void {
    if (!this.#load || this.#fileWatcher || this.#pollTimer || this.#closed) return;
    const path = this.#config.path;
    const onChange = () => {
      this.reload().catch((err) => log.error("Cannot reload talosconfig", err, { path }));
    };
    try {
      let timer: ReturnType<typeof setTimeout> | undefined;
      this.#fileWatcher = fsWatch(dirname(path), (_event, file) => {
        if (file && file !== basename(path) && !String(file).startsWith("..")) return;
        clearTimeout(timer);
        timer = setTimeout(onChange, 100);
      });
      this.#fileWatcher.on("error", (err) => log.warn("Stopped watching the talosconfig", { path, err }));
      this.#fileWatcher.unref?.();
    } catch (err) {
      log.warn("Cannot watch the talosconfig; polling it", { path, err });
    }
    this.#pollTimer = setInterval(onChange, this.#configPollMs);
    this.#pollTimer.unref?.();
  }

  /** Closes channels, ends watches and fails waiting calls. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#fileWatcher?.close();
    clearInterval(this.#pollTimer);
    this.#sem.failAll(new TalosError("closed", "Cannot call Talos: the client is closed"));
    for (const w of this.#watches) w.call?.cancel();
    if (this.#generation) this.#closeGeneration(this.#generation);
    this.#generation = undefined;
  }

  // ---- internals ----

  async #reloadNow(): Promise<boolean> {
    if (!this.#load || this.#closed) return false;
    const stamp = fileStamp(this.#config.path);
    const next = this.#load();
    this.#configStamp = stamp;
    const cur = this.#config;
    const same =
      next.crt === cur.crt &&
      next.key === cur.key &&
      next.ca === cur.ca &&
      next.endpoints.map(endpointTarget).join() === cur.endpoints.map(endpointTarget).join();
    this.#config = next;
    if (same) return false;
    const old = this.#generation;
    this.#generation = undefined;
    if (old) {
      old.retired = true;
      if (old.inFlight === 0) this.#closeGeneration(old);
    }
    for (const w of this.#watches) {
      if (w.generation === old && w.call) {
        w.reconnecting = true;
        w.call.cancel();
      }
    }
    log.info("Reloaded talosconfig", {
      path: next.path,
      endpoints: next.endpoints.map(endpointTarget),
      certNotAfter: next.certNotAfter.toISOString(),
    });
    return true;
  }

  #closeGeneration(gen: Generation): void {
    for (const ch of gen.channels) ch.client.close();
  }

  async #currentGeneration(): Promise<Generation> {
    if (this.#closed) throw new TalosError("closed", "Cannot call Talos: the client is closed");
    const { grpc, checkServerIdentity } = await loadGrpc();
    if (this.#generation) return this.#generation;
    const config = this.#config;
    const channels = config.endpoints.map((endpoint) => {
      const ip = isIP(endpoint.host) !== 0;
      const creds = grpc.credentials.createSsl(
        config.ca === undefined ? null : Buffer.from(config.ca),
        Buffer.from(config.key),
        Buffer.from(config.crt),
        ip ? { checkServerIdentity: (_name, cert) => checkServerIdentity(endpoint.host, cert) } : {},
      );
      const options: Grpc.ChannelOptions = {
        "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
        "grpc.initial_reconnect_backoff_ms": this.#backoff.initialMs,
        "grpc.max_reconnect_backoff_ms": this.#backoff.maxMs,
        // apid (grpc-go) tolerates pings every 5 minutes; they find dead connections under idle watches.
        "grpc.keepalive_time_ms": 300_000,
        "grpc.keepalive_timeout_ms": 20_000,
      };
      if (ip) options["grpc.ssl_target_name_override"] = IP_ENDPOINT_SNI;
      return { endpoint, client: new grpc.Client(endpointTarget(endpoint), creds, options) };
    });
    this.#generation = { channels, inFlight: 0, retired: false };
    return this.#generation;
  }

  /** Round-robin over the endpoints, skipping ones whose connection is failing unless all are. */
  #pick(gen: Generation): { endpoint: TalosEndpoint; client: Grpc.Client } {
    const n = gen.channels.length;
    const start = this.#roundRobin++;
    for (let i = 0; i < n; i++) {
      const ch = gen.channels[(start + i) % n] as Generation["channels"][number];
      if (ch.client.getChannel().getConnectivityState(false) !== 3 /* TRANSIENT_FAILURE */) return ch;
    }
    return gen.channels[start % n] as Generation["channels"][number];
  }

  #enter(gen: Generation): () => void {
    gen.inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      gen.inFlight--;
      if (gen.retired && gen.inFlight === 0) this.#closeGeneration(gen);
    };
  }

  /**
   * After Unavailable on a channel that is not connected (handshake refused, endpoint down, as
   * opposed to apid answering for a down node), re-read the talosconfig if its file changed since
   * the last read: the certificate may have been renewed.
   */
  async #maybeReloadAfterFailure(client: Grpc.Client): Promise<void> {
    if (!this.#load || client.getChannel().getConnectivityState(false) === 2 /* READY */) return;
    if (fileStamp(this.#config.path) === this.#configStamp) return;
    try {
      await this.reload();
    } catch (err) {
      log.error("Cannot reload talosconfig after connection failures", err, { path: this.#config.path });
    }
  }

  #metadata(grpc: GrpcModule, node: string | undefined): Grpc.Metadata {
    const md = new grpc.Metadata();
    if (node !== undefined) md.set("node", node);
    return md;
  }

  async #unaryOnce(
    gen: Generation,
    ch: Grpc.Client,
    path: string,
    req: Uint8Array,
    node: string | undefined,
    opts: { timeoutMs: number; signal: AbortSignal | undefined },
  ): Promise<Buffer[]> {
    const { grpc } = await loadGrpc();
    const leave = this.#enter(gen);
    return new Promise<Buffer[]>((resolve, reject) => {
      const call = ch.makeUnaryRequest(
        path,
        passThrough,
        passThrough,
        Buffer.from(req),
        this.#metadata(grpc, node),
        { deadline: Date.now() + opts.timeoutMs },
        (err, value) => {
          opts.signal?.removeEventListener("abort", onAbort);
          leave();
          if (err || !value) reject(err ?? new Error("empty response"));
          else resolve([value]);
        },
      );
      const onAbort = () => call.cancel();
      opts.signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  async #listOnce(
    gen: Generation,
    ch: Grpc.Client,
    req: Uint8Array,
    node: string,
    opts: { timeoutMs: number; signal: AbortSignal | undefined },
  ): Promise<Buffer[]> {
    const { grpc } = await loadGrpc();
    const leave = this.#enter(gen);
    const call = ch.makeServerStreamRequest(
      PATHS.list,
      passThrough,
      passThrough,
      Buffer.from(req),
      this.#metadata(grpc, node),
      {
        deadline: Date.now() + opts.timeoutMs,
      },
    );
    const onAbort = () => call.cancel();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const reader = new StreamReader(call);
      const out: Buffer[] = [];
      for (let b = await reader.next(); b !== undefined; b = await reader.next()) out.push(b);
      return out;
    } finally {
      opts.signal?.removeEventListener("abort", onAbort);
      leave();
    }
  }

  async #get<K extends ResourceKind>(
    kind: K,
    node: string | undefined,
    opts: CallOptions,
  ): Promise<TalosResource<ResourceData[K]>> {
    const { namespace, type, id } = RESOURCES[kind];
    const req = GetRequest.encode({ namespace, type, id: id ?? "" }).finish();
    return this.#call(
      kind,
      node === undefined ? `get ${type} from the endpoint` : `get ${type} on node ${node}`,
      opts,
      (gen, ch, attemptOpts) => this.#unaryOnce(gen, ch, PATHS.get, req, node, attemptOpts),
      (msgs) => decodeGetResponse(kind, msgs[0] ?? new Uint8Array()),
    );
  }

  /** Runs one logical call: slot, attempts with failover and backoff, decoding, metrics. */
  async #call<T>(
    request: string,
    what: string,
    opts: CallOptions,
    attempt: (
      gen: Generation,
      ch: Grpc.Client,
      o: { timeoutMs: number; signal: AbortSignal | undefined },
    ) => Promise<Buffer[]>,
    decode: (msgs: Buffer[]) => T,
  ): Promise<T> {
    const stop = this.#duration.startTimer({ request });
    const attempts = opts.attempts ?? this.#attempts;
    const attemptOpts = { timeoutMs: opts.timeoutMs ?? this.#callTimeoutMs, signal: opts.signal };
    try {
      for (let n = 0; ; n++) {
        if (opts.signal?.aborted) throw abortError(what);
        const release = await this.#sem.acquire(opts.signal);
        let client: Grpc.Client | undefined;
        let msgs: Buffer[];
        try {
          const gen = await this.#currentGeneration();
          client = this.#pick(gen).client;
          msgs = await attempt(gen, client, attemptOpts);
        } catch (err) {
          release();
          if (opts.signal?.aborted) throw abortError(what);
          const e = statusError(what, err);
          if (!e.retryable || n + 1 >= attempts) throw e;
          log.v(2).info("Retrying Talos call", { request, attempt: n + 1, err: e.message });
          if (client && e.code === "unavailable") await this.#maybeReloadAfterFailure(client);
          await sleep(backoffDelay(n, this.#backoff, this.#random), opts.signal);
          continue;
        }
        release();
        return decode(msgs);
      }
    } catch (err) {
      if (!(err instanceof TalosNotFoundError && request === "systeminformation"))
        this.#errors.inc({ request });
      throw err;
    } finally {
      stop();
    }
  }

  async *#watch<K extends ResourceKind>(
    node: string,
    kind: K,
    opts: WatchOptions,
  ): AsyncGenerator<TalosWatchEvent<ResourceData[K]>> {
    const { namespace, type } = RESOURCES[kind];
    const id = opts.id ?? RESOURCES[kind].id;
    const what = `watch ${type} on node ${node}`;
    const request = encodeWatchRequest(namespace, type, id);
    const { signal } = opts;
    const known = new Map<string, ResourceData[K]>();
    const session: WatchSession = {
      generation: undefined,
      client: undefined,
      reconnecting: false,
      call: undefined,
    };
    const onAbort = () => session.call?.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    this.#watches.add(session);
    let failures = 0;
    try {
      while (!signal?.aborted && !this.#closed) {
        let leave: (() => void) | undefined;
        try {
          const { grpc } = await loadGrpc();
          const release = await this.#sem.acquire(signal);
          let reader: StreamReader;
          let first: Buffer | undefined;
          try {
            const gen = await this.#currentGeneration();
            leave = this.#enter(gen);
            session.generation = gen;
            session.reconnecting = false;
            session.client = this.#pick(gen).client;
            const call = session.client.makeServerStreamRequest(
              PATHS.watch,
              passThrough,
              passThrough,
              Buffer.from(request),
              this.#metadata(grpc, node),
            );
            session.call = call;
            reader = new StreamReader(call);
            // The first response (empty from Talos) means the watch is established: free the slot.
            first = await reader.next();
          } finally {
            release();
          }
          failures = 0;
          const seen = id === undefined ? new Set<string>() : undefined;
          for (let b = first; b !== undefined; b = await reader.next()) {
            let events: Array<TalosWatchEvent<ResourceData[K]>>;
            try {
              events = decodeWatchResponse(kind, b);
            } catch (err) {
              yield { type: "errored", error: (err as Error).message };
              continue;
            }
            for (const ev of events) {
              if (ev.type === "created" || ev.type === "updated") {
                known.set(ev.id, ev.resource);
                seen?.add(ev.id);
              } else if (ev.type === "destroyed") {
                known.delete(ev.id);
              } else if (ev.type === "bootstrapped" && seen) {
                for (const [gone, resource] of known) {
                  if (seen.has(gone)) continue;
                  known.delete(gone);
                  yield { type: "destroyed", id: gone, resource };
                }
              } else if (ev.type === "errored") {
                throw new TalosError("unavailable", `Cannot ${what}: ${ev.error}`, { retryable: true });
              }
              yield ev;
            }
          }
          throw new TalosError("unavailable", `Cannot ${what}: stream ended`, { retryable: true });
        } catch (err) {
          if (signal?.aborted || this.#closed) return;
          if (session.reconnecting) continue;
          const e = statusError(what, err);
          this.#errors.inc({ request: `watch_${kind}` });
          if (!e.retryable) throw e;
          if (failures++ === 0) yield { type: "errored", error: e.message };
          log.v(2).info("Resubscribing Talos watch", { node, type, attempt: failures, err: e.message });
          if (e.code === "unavailable" && session.client) await this.#maybeReloadAfterFailure(session.client);
          await sleep(backoffDelay(failures - 1, this.#watchBackoff, this.#random), signal).catch(
            () => undefined,
          );
        } finally {
          session.call?.cancel();
          session.call = undefined;
          leave?.();
        }
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      this.#watches.delete(session);
    }
  }
}
