// IP address and CIDR maths: strict parsing and RFC 5952 formatting, prefix containment and overlap,
// address classification (Go's net/netip semantics, which public-IP discovery relies on), the
// Kubernetes cidrset (a cluster CIDR carved into node-sized subnets), the CloudAllocator's mask table
// for a node's own IPv6 prefix, and validation of the node-IPAM flags. Addresses are bigints.

import type { Registry } from "./metrics.ts";

/** Address family: 4 or 6. */
export type IPFamily = 4 | 6;

/** An IP address: its family and its value as an unsigned integer of 32 or 128 bits. */
export interface IPAddress {
  readonly family: IPFamily;
  readonly value: bigint;
}

/** A network prefix: `addr` has every bit after `bits` cleared. */
export interface Prefix {
  readonly family: IPFamily;
  readonly addr: bigint;
  readonly bits: number;
}

/** An interface address such as `2001:db8::5/64`: the address itself and the network it sits in. */
export interface Cidr {
  readonly ip: IPAddress;
  readonly prefix: Prefix;
}

/** What went wrong, for callers that branch on it. */
export type CidrErrorCode =
  | "invalid-ip"
  | "invalid-prefix"
  | "host-bits"
  | "out-of-range"
  | "node-mask"
  | "exhausted"
  | "prefix-too-small"
  | "config";

/** Every error this module throws. */
export class CidrError extends Error {
  override name = "CidrError";
  constructor(
    message: string,
    readonly code: CidrErrorCode,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Address width in bits for a family. */
function familyBits(family: IPFamily): 32 | 128 {
  return family === 4 ? 32 : 128;
}

function allOnes(width: number): bigint {
  return (1n << BigInt(width)) - 1n;
}

function hostMask(family: IPFamily, bits: number): bigint {
  return allOnes(familyBits(family) - bits);
}

// ---------------------------------------------------------------------------------------------
// Parsing. Character by character on purpose: Number()/parseInt() accept "0x10", " 1", "1e2".

const DOT = 46;
const COLON = 58;

function decimalDigit(c: number): number {
  return c >= 48 && c <= 57 ? c - 48 : -1;
}

function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** Dotted quad, four decimal octets 0-255 without leading zeros; undefined when malformed. */
function parseV4(s: string): number | undefined {
  let value = 0;
  let i = 0;
  for (let octet = 0; octet < 4; octet++) {
    if (octet > 0) {
      if (s.charCodeAt(i) !== DOT) return undefined;
      i++;
    }
    const start = i;
    let n = 0;
    while (i < s.length && i - start < 4) {
      const d = decimalDigit(s.charCodeAt(i));
      if (d < 0) break;
      n = n * 10 + d;
      i++;
    }
    const len = i - start;
    if (len === 0 || len > 3 || n > 255 || (len > 1 && s.charCodeAt(start) === 48)) return undefined;
    value = value * 256 + n;
  }
  return i === s.length ? value : undefined;
}

/** RFC 4291 text form, with at most one "::" and an optional trailing dotted quad; no zones. */
function parseV6(s: string): bigint | undefined {
  const groups: number[] = [];
  let ellipsis = -1;
  let i = 0;
  if (s.charCodeAt(0) === COLON) {
    if (s.charCodeAt(1) !== COLON) return undefined;
    ellipsis = 0;
    i = 2;
  }
  while (i < s.length) {
    if (groups.length === 8) return undefined;
    const start = i;
    let n = 0;
    while (i < s.length && i - start < 5) {
      const d = hexDigit(s.charCodeAt(i));
      if (d < 0) break;
      n = n * 16 + d;
      i++;
    }
    if (s.charCodeAt(i) === DOT) {
      // An embedded IPv4 address fills the last two groups.
      if (groups.length > 6) return undefined;
      const v4 = parseV4(s.slice(start));
      if (v4 === undefined) return undefined;
      groups.push(Math.floor(v4 / 65536), v4 % 65536);
      i = s.length;
      break;
    }
    if (i === start || i - start > 4) return undefined;
    groups.push(n);
    if (i === s.length) break;
    if (s.charCodeAt(i) !== COLON) return undefined;
    i++;
    if (s.charCodeAt(i) === COLON) {
      if (ellipsis >= 0) return undefined;
      ellipsis = groups.length;
      i++;
    } else if (i === s.length) {
      return undefined;
    }
  }
  if (ellipsis < 0 ? groups.length !== 8 : groups.length > 7) return undefined;
  const zeros = 8 - groups.length;
  let value = 0n;
  for (let g = 0; g < groups.length; g++) {
    if (g === ellipsis) value <<= BigInt(16 * zeros);
    value = (value << 16n) | BigInt(groups[g] as number);
  }
  if (ellipsis === groups.length) value <<= BigInt(16 * zeros);
  return value;
}

/**
 * Parses an IPv4 or IPv6 address strictly: no leading zeros in IPv4 octets, no hex or octal forms,
 * no zones (`%eth0`), no brackets, no surrounding spaces. IPv4-mapped IPv6 (`::ffff:1.2.3.4`) stays
 * IPv6; see {@link unmapIPv4}.
 * @returns undefined when `s` is not an address.
 */
export function tryParseIP(s: string): IPAddress | undefined {
  if (s.includes(":")) {
    const value = parseV6(s);
    return value === undefined ? undefined : { family: 6, value };
  }
  const value = parseV4(s);
  return value === undefined ? undefined : { family: 4, value: BigInt(value) };
}

/**
 * Parses an IP address, like {@link tryParseIP}.
 * @throws {CidrError} code `invalid-ip`.
 * @example parseIP("2001:db8::1") // { family: 6, value: 0x20010db8...1n }
 */
export function parseIP(s: string): IPAddress {
  const ip = tryParseIP(s);
  if (!ip)
    throw new CidrError(
      `Cannot parse IP address ${JSON.stringify(s)}: not an IPv4 or IPv6 address`,
      "invalid-ip",
    );
  return ip;
}

// ---------------------------------------------------------------------------------------------
// Lenient reading, for what other parties claim. A strict parser is right for what is approved;
// for a claim that must block an approval, every address some parser would read in the text counts.

/** Readings of one inet_aton part: decimal, and also octal (leading 0) or hex (0x). */
function partReadings(part: string): number[] {
  const out: number[] = [];
  const lower = part.toLowerCase();
  if (/^0x[0-9a-f]{1,8}$/.test(lower)) return [Number.parseInt(lower.slice(2), 16)];
  if (!/^[0-9]{1,12}$/.test(part)) return [];
  out.push(Number.parseInt(part, 10));
  if (part.length > 1 && part.startsWith("0") && /^[0-7]+$/.test(part)) out.push(Number.parseInt(part, 8));
  return out;
}

/** Every IPv4 value inet_aton or a decimal reader could take `s` for (1 to 4 parts). */
function v4Readings(s: string): number[] {
  const parts = s.split(".");
  if (parts.length > 4 || parts.some((p) => p === "")) return [];
  let values: number[] = [0];
  parts.forEach((part, i) => {
    const last = i === parts.length - 1;
    // The last part fills the bytes the missing parts leave, as inet_aton reads "10.1" as 10.0.0.1.
    const max = last ? 256 ** (5 - parts.length) - 1 : 255;
    const readings = partReadings(part).filter((n) => n <= max);
    const shift = last ? 256 ** (5 - parts.length) : 256;
    values = values.flatMap((v) => readings.map((n) => v * shift + n));
  });
  return [...new Set(values)];
}

/** `s` with hex groups longer than four digits shortened where only leading zeros are dropped. */
function trimV6Groups(s: string): string {
  return s.replace(/[0-9a-fA-F]{5,}/g, (g) => {
    const t = g.replace(/^0+/, "");
    return t.length === 0 ? "0" : t;
  });
}

/**
 * Every address `text` may be read as, by a strict parser or a lenient one: surrounding spaces,
 * brackets, a zone (`%eth0`) and a prefix length (`/24`) are dropped; IPv4 parts may have leading
 * zeros (read as decimal and as octal), be hex (`0x0a`) or be fewer than four (`10.1`, as
 * inet_aton reads them); IPv6 groups may have extra leading zeros and any case. IPv4-mapped
 * addresses are read as IPv4.
 * @returns the distinct readings; empty when no reader takes `text` for an address
 * @example ipReadings("10.0.0.010").map(formatIP) // ["10.0.0.10", "10.0.0.8"]
 */
export function ipReadings(text: string): IPAddress[] {
  let s = text.trim();
  if (s.startsWith("[") && s.includes("]")) s = s.slice(1, s.indexOf("]"));
  s = s.replace(/\/\d{1,3}$/, "").replace(/%.*$/, "");
  const strict = tryParseIP(s);
  const out: IPAddress[] = strict ? [unmapIPv4(strict)] : [];
  if (s.includes(":")) {
    const lastColon = s.lastIndexOf(":");
    const tail = s.slice(lastColon + 1);
    const heads = tail.includes(".")
      ? v4Readings(tail).map(
          (v) => `${s.slice(0, lastColon + 1)}${(v >>> 16).toString(16)}:${(v & 0xffff).toString(16)}`,
        )
      : [s];
    for (const h of heads) {
      const ip = tryParseIP(trimV6Groups(h));
      if (ip) out.push(unmapIPv4(ip));
    }
  } else {
    for (const v of v4Readings(s)) out.push({ family: 4, value: BigInt(v) });
  }
  const seen = new Set<string>();
  return out.filter((ip) => {
    const k = formatIP(ip);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** Prefix length: decimal without leading zeros, at most the family's width. */
function parseBits(s: string, family: IPFamily): number | undefined {
  if (s.length === 0 || s.length > 3 || (s.length > 1 && s.charCodeAt(0) === 48)) return undefined;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const d = decimalDigit(s.charCodeAt(i));
    if (d < 0) return undefined;
    n = n * 10 + d;
  }
  return n <= familyBits(family) ? n : undefined;
}

/**
 * Parses an interface address `<ip>/<bits>` whose address may have host bits set, as Talos reports
 * node addresses (`2001:db8:1:2::5/64`).
 * @returns undefined when malformed.
 */
export function tryParseCidr(s: string): Cidr | undefined {
  const slash = s.indexOf("/");
  if (slash < 0) return undefined;
  const ip = tryParseIP(s.slice(0, slash));
  if (!ip) return undefined;
  const bits = parseBits(s.slice(slash + 1), ip.family);
  if (bits === undefined) return undefined;
  return { ip, prefix: prefixOf(ip, bits) };
}

/**
 * Parses an interface address, like {@link tryParseCidr}.
 * @throws {CidrError} code `invalid-prefix`.
 */
export function parseCidr(s: string): Cidr {
  const cidr = tryParseCidr(s);
  if (!cidr)
    throw new CidrError(
      `Cannot parse CIDR ${JSON.stringify(s)}: expected <address>/<length>`,
      "invalid-prefix",
    );
  return cidr;
}

/**
 * Parses a network prefix. Host bits must be clear: `10.0.0.1/16` is refused rather than silently
 * becoming `10.0.0.0/16`, because in a flag or a config value it is almost always a typo. Use
 * {@link parseCidr} for interface addresses.
 * @throws {CidrError} code `invalid-prefix`, or `host-bits` (the message names the intended prefix).
 * @example parsePrefix("10.244.0.0/16")
 */
export function parsePrefix(s: string): Prefix {
  const cidr = parseCidr(s);
  if (cidr.ip.value !== cidr.prefix.addr) {
    throw new CidrError(
      `Cannot parse prefix ${JSON.stringify(s)}: host bits are set (did you mean ${formatPrefix(cidr.prefix)}?)`,
      "host-bits",
    );
  }
  return cidr.prefix;
}

/** Parses a network prefix like {@link parsePrefix}; undefined instead of an error. */
export function tryParsePrefix(s: string): Prefix | undefined {
  const cidr = tryParseCidr(s);
  return cidr && cidr.ip.value === cidr.prefix.addr ? cidr.prefix : undefined;
}

// ---------------------------------------------------------------------------------------------
// Formatting.

function formatV4(value: bigint): string {
  const n = Number(value);
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

const MAPPED_PREFIX = 0xffffn << 32n;

/** RFC 5952: lower case, no leading zeros, "::" for the first longest run of two or more zero groups. */
function formatV6(value: bigint): string {
  if (value >> 32n === 0xffffn) return `::ffff:${formatV4(value & 0xffffffffn)}`;
  const groups: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (from: number, to: number) =>
    groups
      .slice(from, to)
      .map((g) => g.toString(16))
      .join(":");
  if (bestStart < 0) return hex(0, 8);
  return `${hex(0, bestStart)}::${hex(bestStart + bestLen, 8)}`;
}

/**
 * The address held in 4 (IPv4) or 16 (IPv6) network-order bytes.
 * @throws {RangeError} for any other length.
 */
export function ipFromBytes(bytes: Uint8Array): IPAddress {
  if (bytes.length !== 4 && bytes.length !== 16)
    throw new RangeError(`An IP address is not ${bytes.length} bytes`);
  let value = 0n;
  for (const b of bytes) value = (value << 8n) | BigInt(b);
  return { family: bytes.length === 4 ? 4 : 6, value };
}

/**
 * Formats an address canonically: dotted quad, or RFC 5952 IPv6 (IPv4-mapped as `::ffff:a.b.c.d`).
 * @example formatIP(parseIP("2001:DB8:0:0:1:0:0:1")) // "2001:db8::1:0:0:1"
 */
export function formatIP(ip: IPAddress): string {
  return ip.family === 4 ? formatV4(ip.value) : formatV6(ip.value);
}

/**
 * The canonical text of an IP literal, so that equal addresses compare equal as strings: IPv6 is
 * lower-case and zero-compressed (RFC 5952). Parsing is {@link tryParseIP}'s: no leading zeros in
 * IPv4 parts, no zones, no prefixes, no surrounding spaces (a caller reading a list trims).
 * @param text an address such as `10.0.0.1`, `2001:DB8:0::1` or `::ffff:10.0.0.1`
 * @param mapped what becomes of an IPv4-mapped IPv6 address. `unmap` (the default) writes the
 *   dotted IPv4 it carries, so that a machine's IPv4 has one spelling whichever way it is written
 *   (the CSR policy compares SANs and Node addresses so). `keep` leaves it IPv6, as Go's netip
 *   prints it: a node IP so written stays an IPv6 node IP (lib/addresses.ts).
 * @returns the canonical form, or undefined when `text` is not an IP literal
 * @example canonicalIP("::ffff:10.0.0.1") // "10.0.0.1"
 * @example canonicalIP("::FFFF:10.0.0.1", "keep") // "::ffff:10.0.0.1"
 */
export function canonicalIP(text: string, mapped: "unmap" | "keep" = "unmap"): string | undefined {
  const ip = tryParseIP(text);
  return ip && formatIP(mapped === "unmap" ? unmapIPv4(ip) : ip);
}

/** Formats a prefix canonically, e.g. `10.244.0.0/16`, `2001:db8::/64`. */
export function formatPrefix(p: Prefix): string {
  return `${formatIP({ family: p.family, value: p.addr })}/${p.bits}`;
}

// ---------------------------------------------------------------------------------------------
// Prefix maths.

/**
 * The prefix of length `bits` that holds `ip` (host bits cleared).
 * @throws {CidrError} code `invalid-prefix` when `bits` is not within 0..32 or 0..128.
 */
export function prefixOf(ip: IPAddress, bits: number): Prefix {
  const width = familyBits(ip.family);
  if (!Number.isInteger(bits) || bits < 0 || bits > width) {
    throw new CidrError(
      `Cannot build prefix of ${formatIP(ip)}: length ${bits} is not within 0..${width}`,
      "invalid-prefix",
    );
  }
  return { family: ip.family, addr: ip.value & ~hostMask(ip.family, bits) & allOnes(width), bits };
}

/** The last address of `p` (its broadcast address for IPv4). */
export function lastAddress(p: Prefix): bigint {
  return p.addr | hostMask(p.family, p.bits);
}

/** Whether `ip` lies in `p`. Families never mix: `::ffff:10.0.0.1` is not in `10.0.0.0/8`. */
export function prefixContains(p: Prefix, ip: IPAddress): boolean {
  return p.family === ip.family && (ip.value & ~hostMask(p.family, p.bits)) === p.addr;
}

/** Whether every address of `inner` lies in `outer`. */
export function prefixCovers(outer: Prefix, inner: Prefix): boolean {
  return (
    outer.family === inner.family &&
    outer.bits <= inner.bits &&
    (inner.addr & ~hostMask(outer.family, outer.bits)) === outer.addr
  );
}

/** Whether `a` and `b` share at least one address (for prefixes: one covers the other). */
export function prefixesOverlap(a: Prefix, b: Prefix): boolean {
  return prefixCovers(a, b) || prefixCovers(b, a);
}

/** Whether two prefixes are the same network. */
export function prefixEquals(a: Prefix, b: Prefix): boolean {
  return a.family === b.family && a.bits === b.bits && a.addr === b.addr;
}

// ---------------------------------------------------------------------------------------------
// Classification, with Go net/netip semantics (IPv4-mapped addresses are judged as IPv4).

/** Whether `ip` is an IPv4-mapped IPv6 address (`::ffff:0:0/96`). */
export function isIPv4Mapped(ip: IPAddress): boolean {
  return ip.family === 6 && ip.value >> 32n === 0xffffn;
}

/** The IPv4 address inside an IPv4-mapped IPv6 address; any other address unchanged. */
export function unmapIPv4(ip: IPAddress): IPAddress {
  return isIPv4Mapped(ip) ? { family: 4, value: ip.value & ~MAPPED_PREFIX } : ip;
}

function inV4(ip: IPAddress, net: number, bits: number): boolean {
  return ip.family === 4 && ip.value >> BigInt(32 - bits) === BigInt(net) >> BigInt(32 - bits);
}

function topBitsV6(ip: IPAddress, bits: number): bigint {
  return ip.value >> BigInt(128 - bits);
}

/** `0.0.0.0` or `::`. */
export function isUnspecified(ip: IPAddress): boolean {
  return unmapIPv4(ip).value === 0n;
}

/** `127.0.0.0/8` or `::1`. */
export function isLoopback(ip: IPAddress): boolean {
  const a = unmapIPv4(ip);
  return a.family === 4 ? inV4(a, 0x7f000000, 8) : a.value === 1n;
}

/** `224.0.0.0/4` or `ff00::/8`. */
export function isMulticast(ip: IPAddress): boolean {
  const a = unmapIPv4(ip);
  return a.family === 4 ? inV4(a, 0xe0000000, 4) : topBitsV6(a, 8) === 0xffn;
}

/** Link-local unicast: `169.254.0.0/16` or `fe80::/10`. */
export function isLinkLocal(ip: IPAddress): boolean {
  const a = unmapIPv4(ip);
  return a.family === 4 ? inV4(a, 0xa9fe0000, 16) : topBitsV6(a, 10) === 0x3fan;
}

/** RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) or RFC 4193 unique local (`fc00::/7`), as Go's IsPrivate. */
export function isPrivate(ip: IPAddress): boolean {
  const a = unmapIPv4(ip);
  if (a.family === 6) return topBitsV6(a, 7) === 0x7en;
  return inV4(a, 0x0a000000, 8) || inV4(a, 0xac100000, 12) || inV4(a, 0xc0a80000, 16);
}

/**
 * RFC 6598 shared address space `100.64.0.0/10` (carrier-grade NAT, also Tailscale). Go's IsPrivate
 * does not include it, so the reference treats it as public; callers decide.
 */
export function isSharedAddressSpace(ip: IPAddress): boolean {
  return inV4(unmapIPv4(ip), 0x64400000, 10);
}

/**
 * Go's IsGlobalUnicast: anything but unspecified, IPv4 broadcast, loopback, multicast and link-local.
 * Private and unique-local addresses are "global unicast" here; see {@link isPublicUnicast}.
 */
export function isGlobalUnicast(ip: IPAddress): boolean {
  const a = unmapIPv4(ip);
  if (a.family === 4 && a.value === 0xffffffffn) return false;
  return !isUnspecified(a) && !isLoopback(a) && !isMulticast(a) && !isLinkLocal(a);
}

/** Global unicast and not private: the reference's test for a public (external) address. */
export function isPublicUnicast(ip: IPAddress): boolean {
  return isGlobalUnicast(ip) && !isPrivate(ip);
}

// ---------------------------------------------------------------------------------------------
// CidrSet: the Kubernetes cidrset. A bitmap over the node-sized subnets of one cluster CIDR, split
// into chunks of 65,536 subnets that are absent while empty and collapse to a marker when full, so
// an IPv4 /8 of /24s or an IPv6 /64 of /80s is one 8 KiB chunk and even 0.0.0.0/0 of /32s is cheap.

/** Kubernetes caps an IPv6 node mask at 16 bits longer than the cluster mask (uncompressed bitmap). */
const MAX_IPV6_MASK_DIFF = 16;

const CHUNK_BITS = 65536;
const EMPTY = 0;
const FULL = 1;
type Chunk = Uint32Array | typeof EMPTY | typeof FULL;

function popcount(x: number): number {
  let v = x - ((x >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (((v + (v >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

/** Bits lo..hi (inclusive, 0..31) of a word. */
function wordMask(lo: number, hi: number): number {
  return hi - lo === 31 ? 0xffffffff : (((1 << (hi - lo + 1)) - 1) << lo) >>> 0;
}

/** The metric families a CidrSet updates, labelled by `clusterCIDR` as in Kubernetes' cidrset/metrics.go. */
function cidrSetMetrics(registry: Registry) {
  const labels = ["clusterCIDR"];
  return {
    allocations: registry.counter(
      "node_ipam_controller_cidrset_cidrs_allocations_total",
      "Counter measuring total number of CIDR allocations.",
      labels,
    ),
    releases: registry.counter(
      "node_ipam_controller_cidrset_cidrs_releases_total",
      "Counter measuring total number of CIDR releases.",
      labels,
    ),
    // Upstream's name carries the "cirdset" typo; dashboards use it, so it stays.
    max: registry.gauge(
      "node_ipam_controller_cirdset_max_cidrs",
      "Maximum number of CIDRs that can be allocated.",
      labels,
    ),
    usage: registry.gauge(
      "node_ipam_controller_cidrset_usage_cidrs",
      "Gauge measuring percentage of allocated CIDRs.",
      labels,
    ),
    tries: registry.histogram(
      "node_ipam_controller_cidrset_allocation_tries_per_request",
      "Number of occupied candidates skipped per CIDR allocation.",
      labels,
      [1, 5, 25, 125, 625],
    ),
  };
}

/** Options of a {@link CidrSet}. */
export interface CidrSetOptions {
  /** Where to report `node_ipam_controller_cidrset_*`; no metrics when absent. */
  registry?: Registry;
}

/**
 * A cluster CIDR carved into subnets of `nodeMaskBits`, with Kubernetes' semantics: round-robin
 * allocation from a "next candidate" cursor, occupy/release of any overlapping prefix (larger than a
 * subnet: every subnet inside; smaller: the subnet holding it). Synchronous and single-owner.
 * @example
 * const set = new CidrSet(parsePrefix("10.244.0.0/16"), 24);
 * formatPrefix(set.allocateNext()) // "10.244.0.0/24"
 */
export class CidrSet {
  /** Number of subnets. */
  readonly max: number;
  /** Label of the metrics: the cluster CIDR. */
  readonly label: string;
  readonly #shift: bigint;
  readonly #chunkBits: number;
  readonly #chunks: Chunk[];
  readonly #chunkUsed: Uint32Array;
  readonly #metrics: ReturnType<typeof cidrSetMetrics> | undefined;
  #used = 0;
  #next = 0;

  /**
   * @param cluster the range to carve.
   * @param nodeMaskBits the subnet length, not shorter than the cluster's; at most 16 bits longer on IPv6.
   * @throws {CidrError} code `node-mask` when the sizes do not fit.
   */
  constructor(
    readonly cluster: Prefix,
    readonly nodeMaskBits: number,
    options: CidrSetOptions = {},
  ) {
    const width = familyBits(cluster.family);
    const name = formatPrefix(cluster);
    if (!Number.isInteger(nodeMaskBits) || nodeMaskBits < cluster.bits || nodeMaskBits > width) {
      throw new CidrError(
        `Cannot carve ${name} into /${nodeMaskBits}: the node mask must be within ${cluster.bits}..${width}`,
        "node-mask",
      );
    }
    if (cluster.family === 6 && nodeMaskBits - cluster.bits > MAX_IPV6_MASK_DIFF) {
      throw new CidrError(
        `Cannot carve ${name} into /${nodeMaskBits}: an IPv6 node mask may be at most ${MAX_IPV6_MASK_DIFF} bits longer than the cluster mask`,
        "node-mask",
      );
    }
    this.max = 2 ** (nodeMaskBits - cluster.bits);
    this.label = name;
    this.#shift = BigInt(width - nodeMaskBits);
    this.#chunkBits = Math.min(this.max, CHUNK_BITS);
    const chunks = this.max / this.#chunkBits;
    this.#chunks = new Array<Chunk>(chunks).fill(EMPTY);
    this.#chunkUsed = new Uint32Array(chunks);
    this.#metrics = options.registry ? cidrSetMetrics(options.registry) : undefined;
    this.#metrics?.max.set({ clusterCIDR: name }, this.max);
    this.#metrics?.usage.set({ clusterCIDR: name }, 0);
  }

  /** Number of subnets in use. */
  get used(): number {
    return this.#used;
  }

  /** Number of free subnets. */
  get free(): number {
    return this.max - this.#used;
  }

  /** Fraction of subnets in use, 0..1. */
  get usage(): number {
    return this.#used / this.max;
  }

  /** The subnet at `index` (0..max-1). */
  subnet(index: number): Prefix {
    return {
      family: this.cluster.family,
      addr: this.cluster.addr | (BigInt(index) << this.#shift),
      bits: this.nodeMaskBits,
    };
  }

  /** The subnet holding `ip`, or undefined when `ip` is outside the cluster CIDR. */
  subnetHolding(ip: IPAddress): Prefix | undefined {
    return prefixContains(this.cluster, ip) ? prefixOf(ip, this.nodeMaskBits) : undefined;
  }

  /**
   * First and last subnet index that `p` touches.
   * @throws {CidrError} code `out-of-range` when `p` does not overlap the cluster CIDR.
   */
  indexRange(p: Prefix): [number, number] {
    if (!prefixesOverlap(p, this.cluster)) {
      throw new CidrError(
        `Cannot use ${formatPrefix(p)}: it is outside cluster CIDR ${this.label}`,
        "out-of-range",
      );
    }
    if (p.bits <= this.cluster.bits) return [0, this.max - 1];
    const index = (v: bigint) => Number((v ^ this.cluster.addr) >> this.#shift);
    return [index(p.addr), index(lastAddress(p))];
  }

  /**
   * Takes the next free subnet after the cursor, wrapping around.
   * @throws {CidrError} code `exhausted` when every subnet is in use.
   */
  allocateNext(): Prefix {
    if (this.#used === this.max) {
      throw new CidrError(
        `Cannot allocate a /${this.nodeMaskBits} from ${this.label}: no free CIDR left`,
        "exhausted",
      );
    }
    const start = this.#next;
    let found = this.#findFree(start, this.max - 1);
    if (found < 0) found = this.#findFree(0, start - 1);
    this.#setRange(found, found, true);
    this.#next = (found + 1) % this.max;
    const labels = { clusterCIDR: this.label };
    this.#metrics?.allocations.inc(labels);
    this.#metrics?.tries.observe(labels, (found - start + this.max) % this.max);
    this.#metrics?.usage.set(labels, this.usage);
    return this.subnet(found);
  }

  /**
   * Marks every subnet `p` touches as used; subnets already used stay so.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range`.
   */
  occupy(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    const changed = this.#setRange(begin, end, true);
    this.#report(this.#metrics?.allocations, changed);
    return changed;
  }

  /**
   * Marks every subnet `p` touches as free.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range`.
   */
  release(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    return this.releaseRange(begin, end);
  }

  /**
   * Marks subnets `begin`..`end` (indices, see {@link indexRange}) as free; for owners that track
   * which subnets another claim still needs.
   * @returns how many subnets changed state.
   * @throws {CidrError} code `out-of-range` when the indices are not within 0..max-1.
   */
  releaseRange(begin: number, end: number): number {
    if (!Number.isInteger(begin) || !Number.isInteger(end) || begin < 0 || end >= this.max || begin > end) {
      throw new CidrError(
        `Cannot release subnets ${begin}..${end} of ${this.label}: not within 0..${this.max - 1}`,
        "out-of-range",
      );
    }
    const changed = this.#setRange(begin, end, false);
    this.#report(this.#metrics?.releases, changed);
    return changed;
  }

  /**
   * Whether every subnet `p` touches is used.
   * @throws {CidrError} code `out-of-range`.
   */
  isAllocated(p: Prefix): boolean {
    const [begin, end] = this.indexRange(p);
    return this.#countRange(begin, end) === end - begin + 1;
  }

  /**
   * How many of the subnets `p` touches are used.
   * @throws {CidrError} code `out-of-range`.
   */
  usedIn(p: Prefix): number {
    const [begin, end] = this.indexRange(p);
    return this.#countRange(begin, end);
  }

  #report(
    counter: { inc(labels: Record<string, string>, n: number): void } | undefined,
    changed: number,
  ): void {
    if (!this.#metrics) return;
    const labels = { clusterCIDR: this.label };
    if (changed > 0) counter?.inc(labels, changed);
    this.#metrics.usage.set(labels, this.usage);
  }

  /** Visits the chunks overlapping begin..end with the bit range inside each chunk. */
  #forChunks(
    begin: number,
    end: number,
    visit: (chunk: number, lo: number, hi: number) => boolean | undefined,
  ): void {
    const size = this.#chunkBits;
    for (let c = Math.floor(begin / size); c * size <= end; c++) {
      const lo = Math.max(begin - c * size, 0);
      const hi = Math.min(end - c * size, size - 1);
      if (visit(c, lo, hi) === true) return;
    }
  }

  #materialize(c: number): Uint32Array {
    const chunk = this.#chunks[c];
    if (chunk instanceof Uint32Array) return chunk;
    const words = new Uint32Array(Math.ceil(this.#chunkBits / 32));
    if (chunk === FULL) {
      words.fill(0xffffffff);
      const rest = this.#chunkBits % 32;
      if (rest) words[words.length - 1] = wordMask(0, rest - 1);
    }
    this.#chunks[c] = words;
    return words;
  }

  #setRange(begin: number, end: number, value: boolean): number {
    let changed = 0;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const before = this.#chunkUsed[c] as number;
      const chunk = this.#chunks[c];
      let after: number;
      if (lo === 0 && hi === this.#chunkBits - 1) {
        after = value ? this.#chunkBits : 0;
      } else if (chunk === (value ? FULL : EMPTY)) {
        after = before;
      } else {
        const words = this.#materialize(c);
        after = before;
        for (let w = lo >>> 5; w <= hi >>> 5; w++) {
          const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
          const old = words[w] as number;
          const next = value ? (old | mask) >>> 0 : (old & ~mask) >>> 0;
          after += popcount(next) - popcount(old);
          words[w] = next;
        }
      }
      this.#chunkUsed[c] = after;
      if (after === 0) this.#chunks[c] = EMPTY;
      else if (after === this.#chunkBits) this.#chunks[c] = FULL;
      changed += Math.abs(after - before);
      return undefined;
    });
    this.#used += value ? changed : -changed;
    return changed;
  }

  #countRange(begin: number, end: number): number {
    let count = 0;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const chunk = this.#chunks[c];
      if (chunk === FULL) count += hi - lo + 1;
      else if (chunk instanceof Uint32Array) {
        for (let w = lo >>> 5; w <= hi >>> 5; w++) {
          const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
          count += popcount(((chunk[w] as number) & mask) >>> 0);
        }
      }
      return undefined;
    });
    return count;
  }

  /** First free index in begin..end, or -1. */
  #findFree(begin: number, end: number): number {
    let found = -1;
    if (begin > end) return found;
    this.#forChunks(begin, end, (c, lo, hi) => {
      const chunk = this.#chunks[c] as Chunk;
      if (chunk === FULL) return undefined;
      if (chunk === EMPTY) {
        found = c * this.#chunkBits + lo;
        return true;
      }
      for (let w = lo >>> 5; w <= hi >>> 5; w++) {
        const mask = wordMask(w === lo >>> 5 ? lo & 31 : 0, w === hi >>> 5 ? hi & 31 : 31);
        const freeBits = (~(chunk[w] as number) & mask) >>> 0;
        if (freeBits !== 0) {
          found = c * this.#chunkBits + w * 32 + (31 - Math.clz32(freeBits & -freeBits));
          return true;
        }
      }
      return undefined;
    });
    return found;
  }
}

// ---------------------------------------------------------------------------------------------
// The CloudAllocator's mask table.

/** kubelet's default `--max-pods`, assumed when a node has not reported its pod capacity. */
export const DEFAULT_MAX_PODS = 110;

/** The subnet a CloudAllocator carves for a node, and the per-node mask inside it. */
export interface CloudSubnet {
  subnet: Prefix;
  nodeMaskBits: number;
}

/**
 * Where pod CIDRs come from for a node holding the IPv6 interface address `cidr`, following the
 * reference's table (cloud_allocator.go addCIDRSet): shorter than /64 → the /64 holding the address,
 * split into /80s; /64–/99 → +16 bits; /100–/105 → +8; /106–/111 → +4; /112–/117 → +2;
 * /118–/123 → +1; /124 and longer → too small. A per-node subnet must also hold `maxPods` addresses
 * (2^(128-mask) − 2, as upstream counts).
 * @throws {CidrError} code `prefix-too-small`.
 * @example cloudSubnet(parseCidr("2001:db8:1:2::5/56")) // { subnet: 2001:db8:1:2::/64, nodeMaskBits: 80 }
 */
export function cloudSubnet(cidr: Cidr, maxPods = DEFAULT_MAX_PODS): CloudSubnet {
  const { ip, prefix } = cidr;
  const name = `${formatIP(ip)}/${prefix.bits}`;
  if (ip.family !== 6)
    throw new CidrError(`Cannot carve pod CIDRs from ${name}: not IPv6`, "prefix-too-small");
  const bits = prefix.bits;
  if (bits > 123) {
    throw new CidrError(
      `Cannot carve pod CIDRs from ${name}: the prefix is too small (/124 or longer)`,
      "prefix-too-small",
    );
  }
  const subnet = bits < 64 ? prefixOf(ip, 64) : prefix;
  let mask: number;
  if (bits < 64) mask = 80;
  else if (bits < 100) mask = bits + 16;
  else if (bits < 106) mask = bits + 8;
  else if (bits < 112) mask = bits + 4;
  else if (bits < 118) mask = bits + 2;
  else mask = bits + 1;
  const addresses = 2 ** (128 - mask) - 2;
  if (maxPods > addresses) {
    throw new CidrError(
      `Cannot carve pod CIDRs from ${name}: a /${mask} provides only ${addresses} addresses for ${maxPods} pods`,
      "prefix-too-small",
    );
  }
  return { subnet, nodeMaskBits: mask };
}

// ---------------------------------------------------------------------------------------------
// Node-IPAM flags.

/** Default `--node-cidr-mask-size-ipv4`. */
const DEFAULT_NODE_MASK_IPV4 = 24;
/** Default `--node-cidr-mask-size-ipv6`: 80 in the Talos CCM (Kubernetes' own default is 64). */
const DEFAULT_NODE_MASK_IPV6 = 80;

/**
 * The node-IPAM flags as given (the shape of flags.ts' IpamOptions). Entries may themselves be
 * comma lists; a mask size of 0 or undefined means unset, as in Kubernetes.
 */
export interface NodeIpamFlags {
  /** `--cluster-cidr` (or Talos' pod CIDRs when the flag is empty). */
  clusterCidrs: readonly string[];
  /** `--service-cluster-ip-range` (or Talos' service CIDRs when the flag is empty). */
  serviceCidrs?: readonly string[];
  nodeCidrMaskSize?: number;
  nodeCidrMaskSizeIpv4?: number;
  nodeCidrMaskSizeIpv6?: number;
}

/** Validated node-IPAM settings; `nodeMaskSizes[i]` belongs to `clusterCIDRs[i]`. */
export interface NodeIpamConfig {
  clusterCIDRs: Prefix[];
  nodeMaskSizes: number[];
  serviceCIDRs: Prefix[];
}

function configError(detail: string, cause?: unknown): CidrError {
  return new CidrError(
    `Cannot configure node IPAM: ${detail}`,
    "config",
    cause === undefined ? undefined : { cause },
  );
}

function parseList(flag: string, values: readonly string[]): Prefix[] {
  const items = values
    .flatMap((v) => v.split(","))
    .map((s) => s.trim())
    .filter((s) => s !== "");
  const prefixes = items.map((s) => {
    try {
      return parsePrefix(s);
    } catch (err) {
      throw configError(`${flag}: ${(err as Error).message}`, err);
    }
  });
  if (prefixes.length > 2)
    throw configError(`${flag} has ${prefixes.length} entries; at most two (one per family)`);
  const [a, b] = prefixes;
  if (a && b && a.family === b.family) {
    throw configError(`${flag} has two IPv${a.family} entries; dual-stack needs one IPv4 and one IPv6`);
  }
  return prefixes;
}

function maskFlag(name: string, value: number | undefined): number | undefined {
  if (value === undefined || value === 0) return undefined;
  if (!Number.isInteger(value) || value < 0 || value > 128)
    throw configError(`--${name}=${value} is not a prefix length`);
  return value;
}

/**
 * Checks a complete configuration: one or two cluster CIDRs of different families, node masks that
 * fit each (not shorter than the cluster mask, not longer than the family, at most 16 bits longer on
 * IPv6), at most two service CIDRs of different families.
 * @throws {CidrError} code `config`.
 */
export function validateNodeIpamConfig(cfg: NodeIpamConfig): void {
  const n = cfg.clusterCIDRs.length;
  if (n === 0) throw configError("no cluster CIDR (set --cluster-cidr or the Talos pod subnets)");
  if (n > 2) throw configError(`${n} cluster CIDRs; at most two (one per family)`);
  const [first, second] = cfg.clusterCIDRs;
  if (first && second && first.family === second.family) {
    throw configError(`two IPv${first.family} cluster CIDRs; dual-stack needs one IPv4 and one IPv6`);
  }
  if (cfg.nodeMaskSizes.length !== n) {
    throw configError(`${cfg.nodeMaskSizes.length} node mask sizes for ${n} cluster CIDRs`);
  }
  cfg.clusterCIDRs.forEach((cluster, i) => {
    const mask = cfg.nodeMaskSizes[i] as number;
    const name = formatPrefix(cluster);
    const flag = `--node-cidr-mask-size-ipv${cluster.family}`;
    if (!Number.isInteger(mask) || mask < cluster.bits) {
      throw configError(`node mask /${mask} (${flag}) is shorter than cluster CIDR ${name}`);
    }
    if (mask > familyBits(cluster.family)) {
      throw configError(`node mask /${mask} (${flag}) is longer than an IPv${cluster.family} address`);
    }
    if (cluster.family === 6 && mask - cluster.bits > MAX_IPV6_MASK_DIFF) {
      throw configError(
        `node mask /${mask} (${flag}) is ${mask - cluster.bits} bits longer than cluster CIDR ${name}; at most ${MAX_IPV6_MASK_DIFF} on IPv6 (use a cluster CIDR of /${mask - MAX_IPV6_MASK_DIFF} or shorter)`,
      );
    }
  });
  if (cfg.serviceCIDRs.length > 2) throw configError(`${cfg.serviceCIDRs.length} service CIDRs; at most two`);
  const [s1, s2] = cfg.serviceCIDRs;
  if (s1 && s2 && s1.family === s2.family) {
    throw configError(`two IPv${s1.family} service CIDRs; dual-stack needs one IPv4 and one IPv6`);
  }
}

/**
 * Turns the node-IPAM flags into a validated configuration, with the reference's rules for the mask
 * flags: `--node-cidr-mask-size` is refused on dual-stack and together with the per-family flags;
 * `-ipv4` is refused on single-stack IPv6 and `-ipv6` on single-stack IPv4; defaults /24 and /80.
 * @throws {CidrError} code `config`, with a message naming the flag.
 * @example resolveNodeIpamConfig({ clusterCidrs: ["10.244.0.0/16", "fd00:10:244::/64"] })
 */
export function resolveNodeIpamConfig(flags: NodeIpamFlags): NodeIpamConfig {
  const clusterCIDRs = parseList("--cluster-cidr", flags.clusterCidrs);
  const serviceCIDRs = parseList("--service-cluster-ip-range", flags.serviceCidrs ?? []);
  const both = maskFlag("node-cidr-mask-size", flags.nodeCidrMaskSize);
  const v4 = maskFlag("node-cidr-mask-size-ipv4", flags.nodeCidrMaskSizeIpv4);
  const v6 = maskFlag("node-cidr-mask-size-ipv6", flags.nodeCidrMaskSizeIpv6);
  const families = new Set(clusterCIDRs.map((p) => p.family));
  if (both !== undefined) {
    if (families.size > 1) {
      throw configError(
        "--node-cidr-mask-size is not allowed with dual-stack cluster CIDRs; use the -ipv4/-ipv6 flags",
      );
    }
    if (v4 !== undefined || v6 !== undefined) {
      throw configError("--node-cidr-mask-size cannot be combined with --node-cidr-mask-size-ipv4/-ipv6");
    }
  } else if (families.size === 1) {
    if (v4 !== undefined && families.has(6)) {
      throw configError("--node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster");
    }
    if (v6 !== undefined && families.has(4)) {
      throw configError("--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster");
    }
  }
  const nodeMaskSizes = clusterCIDRs.map((p) =>
    p.family === 4 ? (both ?? v4 ?? DEFAULT_NODE_MASK_IPV4) : (both ?? v6 ?? DEFAULT_NODE_MASK_IPV6),
  );
  const cfg = { clusterCIDRs, nodeMaskSizes, serviceCIDRs };
  validateNodeIpamConfig(cfg);
  return cfg;
}
