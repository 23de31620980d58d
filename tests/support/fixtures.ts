// Talos node fixtures for the fake apid: the node model (what one Talos node publishes through
// COSI), the YAML loader for tests/fixtures/nodes/*.yaml and a generator of many distinct nodes for
// benchmarks. Field names follow Talos' YAML (the shared docs' talos-api.md §3, outside this repository).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { formatIP, parseCidr, parseIP } from "../../lib/cidr.ts";
import { SELECTOR_KEYS } from "../../lib/selector.ts";
import type {
  AddressStatus,
  ControllerManagerConfig,
  PlatformMetadata,
  SystemInformation,
} from "../../lib/types.ts";

/** One AddressStatus of a node, normalized. */
export interface FakeAddress {
  /** `<link>/<address>`, as Talos names AddressStatus resources. */
  id: string;
  /** Address with prefix length, e.g. `10.0.0.5/24`. */
  address: string;
  /** IFA_LOCAL; Talos reports it for IPv4 (equal to the address), not for IPv6. */
  local?: string;
  linkName: string;
  linkIndex: number;
  /** 0 global, 200 site, 253 link, 254 host, 255 nowhere. */
  scope: number;
  /** IFA_F_* bitmask. */
  flags: number;
  priority: number;
}

/** A fake address as the Talos client decodes it (an AddressStatus, without IFA_LOCAL). */
export function addressStatus(a: FakeAddress): AddressStatus {
  return {
    id: a.id,
    address: a.address,
    linkName: a.linkName,
    linkIndex: a.linkIndex,
    family: a.address.includes(":") ? "inet6" : "inet4",
    scope: a.scope,
    flags: a.flags,
  };
}

/** One LinkStatus of a node. */
export interface FakeLink {
  /** The link name: the resource id (`eth0`, `lo`, `kube-ipvs0`, ...). */
  name: string;
  /** IFLA_INFO_KIND (default "": a physical NIC): "dummy", "bridge", "bond", "vlan", "veth", "wireguard", ... */
  kind?: string;
  /** Link type (ARPHRD_*); default "loopback" for `lo`, else "ether". */
  type?: "ether" | "loopback" | "none";
  /** ifindex; default the linkIndex of the node's addresses on the link, else the next free one. */
  index?: number;
  /** Up with carrier (default true); a down link has neither UP nor LOWER_UP. */
  up?: boolean;
}

/** A {@link FakeLink} with its defaults filled in, as the fake apid serves it. */
export type ResolvedLink = Required<FakeLink>;

/** ARPHRD_* numbers of {@link FakeLink.type} (nethelpers.LinkType). */
export const LINK_TYPES: Readonly<Record<ResolvedLink["type"], number>> = {
  ether: 1,
  loopback: 772,
  none: 65534,
};

/** A NodeIPConfigs.kubernetes.talos.dev spec; absent lists are empty. */
export interface FakeNodeIPConfig {
  validSubnets?: string[];
  excludeSubnets?: string[];
}

/** Everything the fake apid serves for one node. */
export interface FakeNodeSpec {
  /** Kubernetes node name. */
  name: string;
  /**
   * The kubelet's `alpha.kubernetes.io/provided-node-ip` values; the node answers apid calls routed
   * to any of them (`node` header).
   */
  nodeIPs: string[];
  /** Talos version tag reported by Version (default v1.13.0). */
  talosVersion: string;
  platformMetadata: PlatformMetadata;
  /** Absent on nodes without SMBIOS: Get answers NotFound. */
  systemInformation?: SystemInformation;
  addresses: FakeAddress[];
  /** Present on control-plane nodes when asked through a `node` header. */
  controllerManagerConfig?: ControllerManagerConfig;
  /** Nodenames.kubernetes.talos.dev `nodename`; default {@link FakeNodeSpec.name}. */
  nodename?: string;
  /** HostnameStatuses.net.talos.dev `hostname`; default the first label of `name`. */
  hostname?: string;
  /** HostnameStatuses.net.talos.dev `domainname`; default the labels of `name` after the first. */
  domainname?: string;
  /**
   * LinkStatuses.net.talos.dev; default one link per link name of `addresses` (see
   * {@link nodeLinks}), derived again whenever the addresses change.
   */
  links?: FakeLink[];
  /** NodeIPConfigs.kubernetes.talos.dev `kubelet`; default both lists empty; null: none (Get answers NotFound). */
  nodeIPConfig?: FakeNodeIPConfig | null;
}

/** The node name, hostname and domain a fake node publishes, defaults filled in from its name. */
export function nodeIdentity(spec: FakeNodeSpec): { nodename: string; hostname: string; domainname: string } {
  const dot = spec.name.indexOf(".");
  return {
    nodename: spec.nodename ?? spec.name,
    hostname: spec.hostname ?? (dot < 0 ? spec.name : spec.name.slice(0, dot)),
    domainname: spec.domainname ?? (dot < 0 ? "" : spec.name.slice(dot + 1)),
  };
}

/**
 * The links a fake node publishes: {@link FakeNodeSpec.links} with defaults filled in, or without
 * them one per distinct link name of its addresses, except `external`: Talos puts a cloud's public
 * IPs on that pseudo-link, which has no LinkStatus. Indexes come from the addresses' linkIndex,
 * else count on from the highest one in use.
 * @example nodeLinks(loadFixture("aws")).map((l) => l.name) // ["lo", "eth0"]
 */
export function nodeLinks(spec: Pick<FakeNodeSpec, "addresses" | "links">): ResolvedLink[] {
  const indexes = new Map<string, number>();
  for (const a of spec.addresses) {
    if (a.linkName !== "external" && a.linkIndex > 0 && !indexes.has(a.linkName))
      indexes.set(a.linkName, a.linkIndex);
  }
  const links: FakeLink[] =
    spec.links ??
    [...new Set(spec.addresses.map((a) => a.linkName))]
      .filter((n) => n !== "external")
      .map((name) => ({ name }));
  let next = Math.max(0, ...indexes.values(), ...links.map((l) => l.index ?? 0)) + 1;
  return links.map((l) => ({
    name: l.name,
    kind: l.kind ?? "",
    type: l.type ?? (l.name === "lo" ? "loopback" : "ether"),
    index: l.index ?? indexes.get(l.name) ?? next++,
    up: l.up ?? true,
  }));
}

/** The NodeIPConfig a fake node publishes (both lists default to empty); undefined for none. */
export function nodeIPConfigOf(
  spec: Pick<FakeNodeSpec, "nodeIPConfig">,
): Required<FakeNodeIPConfig> | undefined {
  if (spec.nodeIPConfig === null) return undefined;
  return {
    validSubnets: [...(spec.nodeIPConfig?.validSubnets ?? [])],
    excludeSubnets: [...(spec.nodeIPConfig?.excludeSubnets ?? [])],
  };
}

/** Linux IFA_F_* flags by the names Talos prints. */
export const ADDRESS_FLAGS: Readonly<Record<string, number>> = {
  temporary: 0x1,
  nodad: 0x2,
  optimistic: 0x4,
  dadfailed: 0x8,
  homeaddress: 0x10,
  deprecated: 0x20,
  tentative: 0x40,
  permanent: 0x80,
  mngmtmpaddr: 0x100,
  noprefixroute: 0x200,
  mcautojoin: 0x400,
  stableprivacy: 0x800,
};

/** Address scopes by the names Talos prints. */
const ADDRESS_SCOPES: Readonly<Record<string, number>> = {
  global: 0,
  site: 200,
  link: 253,
  host: 254,
  nowhere: 255,
};

/** Names of the set bits of `flags`, comma-joined ("" for none), as Talos' YAML shows them. */
export function formatAddressFlags(flags: number): string {
  return Object.entries(ADDRESS_FLAGS)
    .filter(([, bit]) => (flags & bit) !== 0)
    .map(([name]) => name)
    .join(",");
}

/** The name of a scope number, or the number itself. */
export function formatAddressScope(scope: number): string {
  return Object.entries(ADDRESS_SCOPES).find(([, n]) => n === scope)?.[0] ?? String(scope);
}

const FIXTURES_DIR = join(import.meta.dir, "../fixtures/nodes");

function fail(where: string, why: string): never {
  throw new Error(`Cannot load node fixture ${where}: ${why}`);
}

function strings(where: string, obj: unknown, keys: readonly string[]): Record<string, string> {
  if (typeof obj !== "object" || obj === null) fail(where, "not a mapping");
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (!keys.includes(k)) fail(where, `unknown key "${k}"`);
    if (typeof v !== "string" && typeof v !== "number") fail(where, `"${k}" is not a string`);
    out[k] = String(v);
  }
  return out;
}

function parseFlags(where: string, v: unknown): number {
  if (v === undefined || v === "" || v === null) return 0;
  if (typeof v === "number") return v;
  let out = 0;
  for (const name of String(v).split(",")) {
    const bit = ADDRESS_FLAGS[name.trim()];
    if (bit === undefined) fail(where, `unknown address flag "${name}"`);
    out |= bit;
  }
  return out;
}

function parseScope(where: string, v: unknown): number {
  if (v === undefined) return 0;
  if (typeof v === "number") return v;
  const n = ADDRESS_SCOPES[String(v)];
  if (n === undefined) fail(where, `unknown scope "${v}"`);
  return n;
}

/**
 * Normalizes one address: validates the prefix, fills the id (`<link>/<address>`), IFA_LOCAL for
 * IPv4, and zero scope/flags/priority.
 * @throws {Error} on unknown keys, bad prefixes, flags or scopes.
 */
export function normalizeAddress(where: string, raw: unknown): FakeAddress {
  if (typeof raw !== "object" || raw === null) fail(where, "address is not a mapping");
  const r = raw as Record<string, unknown>;
  const known = ["id", "address", "local", "linkName", "linkIndex", "scope", "flags", "priority"];
  for (const k of Object.keys(r)) if (!known.includes(k)) fail(where, `unknown address key "${k}"`);
  const cidr = parseCidr(String(r.address));
  const address = `${formatIP(cidr.ip)}/${cidr.prefix.bits}`;
  const linkName = String(r.linkName ?? fail(where, `address ${address} has no linkName`));
  const out: FakeAddress = {
    id: typeof r.id === "string" ? r.id : `${linkName}/${address}`,
    address,
    linkName,
    linkIndex: Number(r.linkIndex ?? 0),
    scope: parseScope(where, r.scope),
    flags: parseFlags(where, r.flags),
    priority: Number(r.priority ?? 0),
  };
  if (typeof r.local === "string") out.local = formatIP(parseIP(r.local));
  else if (cidr.ip.family === 4) out.local = formatIP(cidr.ip);
  return out;
}

/**
 * Validates one link of the fixture YAML shape.
 * @throws {Error} on unknown keys or values.
 */
function normalizeLink(where: string, raw: unknown): FakeLink {
  if (typeof raw !== "object" || raw === null) fail(where, "link is not a mapping");
  const r = raw as Record<string, unknown>;
  for (const k of Object.keys(r)) {
    if (!["name", "kind", "type", "index", "up"].includes(k)) fail(where, `unknown link key "${k}"`);
  }
  if (typeof r.name !== "string" || !r.name) fail(where, "link without a name");
  const out: FakeLink = { name: r.name };
  if (r.kind !== undefined) out.kind = String(r.kind);
  if (r.type !== undefined) {
    if (r.type !== "ether" && r.type !== "loopback" && r.type !== "none")
      fail(where, `unknown link type "${r.type}"`);
    out.type = r.type;
  }
  if (r.index !== undefined) {
    if (!Number.isInteger(r.index) || (r.index as number) <= 0) fail(where, `link index ${r.index}`);
    out.index = r.index as number;
  }
  if (r.up !== undefined) {
    if (typeof r.up !== "boolean") fail(where, `link ${r.name}: "up" is not a boolean`);
    out.up = r.up;
  }
  return out;
}

const PM_KEYS = [...SELECTOR_KEYS, "tags"] as const;
const SI_KEYS = ["manufacturer", "productName", "version", "serialnumber", "uuid", "wakeUpType", "skuNumber"];

/** Machine `node`'s loopback address as Talos lists it: 127.0.0.1/8 on lo (link 1), host scope, permanent. */
export function loopbackAddress(node: string): FakeAddress {
  return normalizeAddress(node, {
    address: "127.0.0.1/8",
    linkName: "lo",
    linkIndex: 1,
    scope: "host",
    flags: "permanent",
  });
}

/** A complete PlatformMetadata from a partial one (absent strings are ""). */
export function platformMetadata(p: Partial<PlatformMetadata> = {}): PlatformMetadata {
  return {
    platform: p.platform ?? "",
    hostname: p.hostname ?? "",
    region: p.region ?? "",
    zone: p.zone ?? "",
    instanceType: p.instanceType ?? "",
    instanceId: p.instanceId ?? "",
    providerId: p.providerId ?? "",
    spot: p.spot ?? false,
    internalDNS: p.internalDNS ?? "",
    externalDNS: p.externalDNS ?? "",
    tags: { ...(p.tags ?? {}) },
  };
}

/**
 * Validates and normalizes a node definition in the fixture YAML shape.
 * @throws {Error} naming `where` on any unknown key or bad value.
 */
export function normalizeNode(where: string, doc: unknown): FakeNodeSpec {
  if (typeof doc !== "object" || doc === null) fail(where, "not a mapping");
  const d = doc as Record<string, unknown>;
  const known = [
    "name",
    "nodeIPs",
    "talosVersion",
    "platformMetadata",
    "systemInformation",
    "addresses",
    "controllerManagerConfig",
    "nodename",
    "hostname",
    "domainname",
    "links",
    "nodeIPConfig",
  ];
  for (const k of Object.keys(d)) if (!known.includes(k)) fail(where, `unknown key "${k}"`);
  if (typeof d.name !== "string" || !d.name) fail(where, "no name");
  if (!Array.isArray(d.nodeIPs) || d.nodeIPs.length === 0) fail(where, "no nodeIPs");
  const nodeIPs = d.nodeIPs.map((ip) => formatIP(parseIP(String(ip))));
  const pmRaw = (d.platformMetadata ?? {}) as Record<string, unknown>;
  const { tags, spot, ...pmStrings } = pmRaw;
  const pm = strings(`${where} platformMetadata`, pmStrings, PM_KEYS);
  if (tags !== undefined && (typeof tags !== "object" || tags === null)) fail(where, "tags is not a mapping");
  const node: FakeNodeSpec = {
    name: d.name,
    nodeIPs,
    talosVersion: typeof d.talosVersion === "string" ? d.talosVersion : "v1.13.0",
    platformMetadata: platformMetadata({
      ...pm,
      spot: spot === true,
      tags: strings(`${where} tags`, tags ?? {}, Object.keys(tags ?? {})),
    }),
    addresses: (Array.isArray(d.addresses) ? d.addresses : []).map((a) => normalizeAddress(where, a)),
  };
  if (d.systemInformation !== undefined) {
    const si = strings(`${where} systemInformation`, d.systemInformation, SI_KEYS);
    node.systemInformation = {
      manufacturer: si.manufacturer ?? "",
      productName: si.productName ?? "",
      version: si.version ?? "",
      serialNumber: si.serialnumber ?? "",
      uuid: si.uuid ?? "",
      wakeUpType: si.wakeUpType ?? "",
      skuNumber: si.skuNumber ?? "",
    };
  }
  for (const k of ["nodename", "hostname", "domainname"] as const) {
    const v = d[k];
    if (v === undefined) continue;
    if (typeof v !== "string") fail(where, `"${k}" is not a string`);
    node[k] = v;
  }
  if (d.links !== undefined) {
    if (!Array.isArray(d.links)) fail(where, "links is not a list");
    node.links = d.links.map((l) => normalizeLink(where, l));
  }
  if (d.nodeIPConfig === null) {
    node.nodeIPConfig = null;
  } else if (d.nodeIPConfig !== undefined) {
    const c = d.nodeIPConfig as Record<string, unknown>;
    if (typeof c !== "object") fail(where, "nodeIPConfig is not a mapping");
    for (const k of Object.keys(c)) {
      if (k !== "validSubnets" && k !== "excludeSubnets") fail(where, `unknown nodeIPConfig key "${k}"`);
      if (!Array.isArray(c[k])) fail(where, `nodeIPConfig ${k} is not a list`);
    }
    node.nodeIPConfig = {
      validSubnets: ((c.validSubnets as unknown[] | undefined) ?? []).map(String),
      excludeSubnets: ((c.excludeSubnets as unknown[] | undefined) ?? []).map(String),
    };
  }
  if (d.controllerManagerConfig !== undefined) {
    const c = d.controllerManagerConfig as { podCIDRs?: unknown; serviceCIDRs?: unknown };
    node.controllerManagerConfig = {
      podCIDRs: Array.isArray(c.podCIDRs) ? c.podCIDRs.map(String) : [],
      serviceCIDRs: Array.isArray(c.serviceCIDRs) ? c.serviceCIDRs.map(String) : [],
    };
  }
  return node;
}

/** Names of the fixtures in tests/fixtures/nodes (file names without `.yaml`). */
export function fixtureNames(): string[] {
  return readdirSync(FIXTURES_DIR)
    .filter((f) => f.endsWith(".yaml"))
    .map((f) => f.slice(0, -5))
    .sort();
}

/**
 * Loads `tests/fixtures/nodes/<name>.yaml`; every call returns a fresh copy.
 * @example const aws = loadFixture("aws"); apid.addNode(aws)
 * @throws {Error} when the file is missing or malformed.
 */
export function loadFixture(name: string): FakeNodeSpec {
  const file = join(FIXTURES_DIR, `${name}.yaml`);
  return normalizeNode(file, parseYaml(readFileSync(file, "utf8")));
}

/** Options of {@link generateNodes}. */
export interface GenerateOptions {
  /** Fixture used as template for platform, system information and link layout (default "nocloud"). */
  template?: string;
  /** Also give every node an IPv6 node IP (dual stack). */
  ipv6?: boolean;
  /** Name prefix (default "node"). */
  prefix?: string;
  /** First index (default 0), to generate disjoint batches. */
  start?: number;
}

/** IPv4 node IP of generated node `i`: 10.64.0.0/10, skipping .0 and .255. */
export function generatedNodeIP(i: number): string {
  const host = Math.floor(i / 254) * 256 + (i % 254) + 1;
  return formatIP({ family: 4, value: (10n << 24n) | (64n << 16n) | BigInt(host) });
}

/**
 * `n` distinct nodes built from a fixture: unique names, node IPs (10.64.0.0/10, plus fd10::/64 with
 * `ipv6`), instance ids, provider ids and UUIDs; a handful of addresses each (lo, the node IPs on
 * eth0, a cilium_host address) to keep memory small for benchmarks of thousands of nodes.
 */
export function generateNodes(n: number, opts: GenerateOptions = {}): FakeNodeSpec[] {
  const template = loadFixture(opts.template ?? "nocloud");
  const prefix = opts.prefix ?? "node";
  const start = opts.start ?? 0;
  const tpm = template.platformMetadata;
  const out: FakeNodeSpec[] = [];
  for (let k = 0; k < n; k++) {
    const i = start + k;
    const name = `${prefix}-${String(i).padStart(5, "0")}`;
    const v4 = generatedNodeIP(i);
    const nodeIPs = opts.ipv6 ? [v4, `fd10::${(i + 1).toString(16)}`] : [v4];
    const instanceId = tpm.instanceId ? `${tpm.instanceId}-${i.toString(16)}` : "";
    let providerId = "";
    if (tpm.providerId && tpm.instanceId && tpm.providerId.includes(tpm.instanceId)) {
      providerId = tpm.providerId.replace(tpm.instanceId, instanceId);
    } else if (tpm.providerId) {
      providerId = `${tpm.providerId}-${i}`;
    }
    const uuid = `6f1c0000-0000-4000-8000-${i.toString(16).padStart(12, "0")}`;
    const node: FakeNodeSpec = {
      name,
      nodeIPs,
      talosVersion: template.talosVersion,
      platformMetadata: {
        ...tpm,
        hostname: name,
        instanceId,
        providerId,
        tags: tpm.tags,
      },
      addresses: [
        loopbackAddress(name),
        ...nodeIPs.map((ip) =>
          normalizeAddress(name, {
            address: `${ip}/${ip.includes(":") ? 64 : 10}`,
            linkName: "eth0",
            linkIndex: 2,
            flags: "permanent",
          }),
        ),
        normalizeAddress(name, {
          address: `10.244.${Math.floor(i / 256) % 256}.${i % 256}/32`,
          linkName: "cilium_host",
          linkIndex: 4,
          flags: "permanent",
        }),
      ],
    };
    if (template.systemInformation)
      node.systemInformation = { ...template.systemInformation, uuid, serialNumber: uuid };
    out.push(node);
  }
  return out;
}
