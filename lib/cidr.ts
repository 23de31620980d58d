// IP address and CIDR maths: strict parsing and RFC 5952 formatting, prefix containment and overlap,
// and address classification (Go's net/netip semantics, which public-IP discovery relies on).
// Addresses are bigints. The allocator over these is cidrset.ts; node-IPAM's settings, ipamconfig.ts.

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
export function familyBits(family: IPFamily): 32 | 128 {
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

/**
 * Dotted IPv4, built flat: JSC keeps a template literal's result as a rope of its parts until its
 * characters are read, and the Talos watch cache keeps thousands of addresses it never reads (issue 29).
 */
function formatV4(value: bigint): string {
  const n = Number(value);
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
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

/**
 * Whether canonical IP text is IPv6: IPv6 text always holds a colon, IPv4 text never. Node IPs here
 * are read as `canonicalIP(text.trim(), "keep")`: spaces around a list entry dropped, and an
 * IPv4-mapped address kept IPv6 as Go's netip prints it (the family the kubelet gives it).
 */
export function isIPv6Text(canonical: string): boolean {
  return canonical.includes(":");
}

/**
 * The first IPv4 and the first IPv6 address of `ips`, IPv4 first unless `preferIPv6`; entries that
 * are not addresses are skipped.
 * @example preferredDualStack(["fd00::1", "10.0.0.1", "10.0.0.2"], false) // ["10.0.0.1", "fd00::1"]
 */
export function preferredDualStack(ips: Iterable<string>, preferIPv6: boolean): string[] {
  let v4: string | undefined;
  let v6: string | undefined;
  for (const raw of ips) {
    const ip = canonicalIP(raw.trim(), "keep");
    if (ip === undefined) continue;
    if (isIPv6Text(ip)) v6 ??= ip;
    else v4 ??= ip;
  }
  const ordered = preferIPv6 ? [v6, v4] : [v4, v6];
  return ordered.filter((ip): ip is string => ip !== undefined);
}
