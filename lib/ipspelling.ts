// How an IP address may be spelled, and which addresses a spelling stands for: the one lenient reader
// the CSR policy (lib/csr.ts, lib/sharedaddresses.ts) uses for everything that must BLOCK an approval
// — other Nodes' names, addresses and provided node IPs, the prefixes Talos and the cluster exclude —
// and for the DNS SANs it refuses because a client would take them for an address. What GRANTS a SAN
// (the requester's own status, the addresses Talos reports) is read strictly by lib/cidr.ts instead:
// reading a claim in more ways than one only blocks more, reading an own address so would grant more.
//
// The readers matched: glibc's inet_aton (1 to 4 parts, each decimal, octal after a 0 or hex after
// 0x; what getaddrinfo, ping and curl accept), the WHATWG URL host parser (browsers, and its "ends in
// a number" rule: a host whose last label is numeric is an IPv4 address or invalid), Go's net.ParseIP
// (before Go 1.17 it read leading zeros as decimal), inet_pton for IPv6 (any case, embedded dotted
// quad), and Windows' ipv6-literal.net names. Addresses are those of lib/cidr.ts (bigints).

import {
  formatIP,
  type IPAddress,
  type Prefix,
  prefixContains,
  prefixOf,
  tryParseIP,
  unmapIPv4,
} from "./cidr.ts";

// ---------------------------------------------------------------------------------------------
// IPv4: every inet_aton form

/** Longest part read: a 32-bit value has at most 10 decimal, 11 octal or 8 hex significant digits. */
const MAX_SIGNIFICANT = { 10: 10, 8: 11, 16: 8 } as const;

/** `digits` (already known to be of `radix`) as a number, or undefined past 32 bits. */
function partValue(digits: string, radix: 8 | 10 | 16): number | undefined {
  const significant = digits.replace(/^0+/, "");
  if (significant.length > MAX_SIGNIFICANT[radix]) return undefined;
  return significant === "" ? 0 : Number.parseInt(significant, radix);
}

/**
 * Every value one inet_aton part may be read as: hex after `0x` (any case; WHATWG reads a bare
 * `0x` as 0), decimal, and also octal when it has a leading zero (glibc and browsers read `010` as
 * 8, Go before 1.17 and many validators as 10).
 */
function partReadings(part: string): number[] {
  const lower = part.toLowerCase();
  if (/^0x[0-9a-f]*$/.test(lower)) return defined([partValue(lower.slice(2), 16)]);
  if (!/^[0-9]+$/.test(part)) return [];
  const out = defined([partValue(part, 10)]);
  if (part.length > 1 && part.startsWith("0") && /^[0-7]+$/.test(part))
    out.push(...defined([partValue(part, 8)]));
  return out;
}

/**
 * Every IPv4 value `s` may be read as by inet_aton or a URL parser: 1 to 4 parts, the last filling
 * the bytes the missing ones leave (`10.2` is 10.0.0.2, `167772162` is 10.0.0.2).
 */
function v4Readings(s: string): number[] {
  const parts = s.split(".");
  if (parts.length > 4 || parts.some((p) => p === "")) return [];
  let values: number[] = [0];
  parts.forEach((part, i) => {
    const last = i === parts.length - 1;
    const span = last ? 256 ** (5 - parts.length) : 256;
    const readings = partReadings(part).filter((n) => n < span);
    values = values.flatMap((v) => readings.map((n) => v * span + n));
  });
  return [...new Set(values)];
}

// ---------------------------------------------------------------------------------------------
// IPv6

/** `s` with hex groups longer than four digits shortened where only leading zeros are dropped. */
function trimV6Groups(s: string): string {
  return s.replace(/[0-9a-fA-F]{5,}/g, (g) => {
    const t = g.replace(/^0+/, "");
    return t.length === 0 ? "0" : t;
  });
}

/** Every IPv6 value `s` may be read as: a trailing IPv4 part in any inet_aton form, long groups. */
function v6Readings(s: string): IPAddress[] {
  const lastColon = s.lastIndexOf(":");
  const tail = s.slice(lastColon + 1);
  const heads = tail.includes(".")
    ? v4Readings(tail).map(
        (v) => `${s.slice(0, lastColon + 1)}${(v >>> 16).toString(16)}:${(v & 0xffff).toString(16)}`,
      )
    : [s];
  return defined([tryParseIP(s), ...heads.map((h) => tryParseIP(trimV6Groups(h)))]);
}

/** Windows' names for IPv6 literals: `2001-db8--1.ipv6-literal.net`, `fe80--1seth0.…` with a zone. */
const IPV6_LITERAL_NET = ".ipv6-literal.net";

// ---------------------------------------------------------------------------------------------
// Reading a spelling

/**
 * `text` as a URL parser sees a host: percent-escapes of ASCII decoded, and, when it is not ASCII,
 * compatibility forms folded (NFKC: fullwidth digits) and the ideographic full stops read as dots
 * (UTS 46), as the WHATWG host parser does before it looks for an IPv4 address.
 */
function urlHostVariants(text: string): string[] {
  const out = [text];
  if (text.includes("%")) {
    const decoded = text.replace(/%([0-7][0-9a-fA-F])/g, (_, hex: string) =>
      String.fromCharCode(Number.parseInt(hex, 16)),
    );
    if (decoded !== text) out.push(decoded);
  }
  if (/[\u0080-\uffff]/.test(text)) out.push(text.normalize("NFKC").replace(/[\u3002\uff0e\uff61]/g, "."));
  return out;
}

/**
 * The host `w` is written around: without brackets (`[v6]`, `[v6]:port`), an IPv4 port
 * (`10.0.0.5:10250`), a prefix length (`/24`) or a zone (`%eth0`, `%25eth0`); a name under
 * ipv6-literal.net as the IPv6 text it spells. Undefined for an unclosed bracket.
 */
function unwrap(w: string): string | undefined {
  let h = w;
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0) return undefined;
    h = h.slice(1, end);
  } else if (h.indexOf(":") >= 0 && h.indexOf(":") === h.lastIndexOf(":")) {
    h = h.slice(0, h.indexOf(":"));
  }
  // Cut at the first `%` or `s` by index: a regex such as /%.*$/ backtracks to every line end, and
  // a hostile status address of many `%` before a newline took O(n²) (100k characters: 8 s).
  h = h.replace(/\/[0-9]{1,3}$/, "");
  h = before(h, h.indexOf("%"));
  if (h.toLowerCase().endsWith(IPV6_LITERAL_NET)) {
    h = h.slice(0, -IPV6_LITERAL_NET.length).replaceAll("-", ":");
    h = before(h, h.search(/s/i));
  }
  return h;
}

/** `s` up to index `i`, or all of `s` when `i` is -1 (not found). */
function before(s: string, i: number): string {
  return i < 0 ? s : s.slice(0, i);
}

/**
 * The hosts `text` may be written around (`unwrap()`), in each of its `urlHostVariants()`: itself
 * and, when it holds spaces, its first word (inet_aton ignores whatever follows a space), each also
 * without one trailing dot (as URL parsers drop it).
 */
function hostsOf(text: string): string[] {
  const out = new Set<string>();
  for (const v of urlHostVariants(text)) {
    const s = v.trim();
    for (const w of /\s/.test(s) ? [s, s.split(/\s/, 1)[0] as string] : [s]) {
      const h = unwrap(w);
      if (!h) continue;
      out.add(h);
      if (h.length > 1 && h.endsWith(".") && !h.includes(":")) out.add(h.slice(0, -1));
    }
  }
  return [...out];
}

/**
 * Every address `text` may stand for, to any common reader (see the file comment): surrounding
 * spaces, brackets, an IPv4 port, a zone, a prefix length and a trailing dot are dropped, percent
 * escapes decoded and fullwidth forms folded as URL parsers do; IPv4 in
 * every inet_aton form (1 to 4 parts, each decimal, octal or hex, leading zeros read both as decimal
 * and as octal); IPv6 in any case, with long groups or an embedded IPv4 part in those forms; names
 * under ipv6-literal.net. IPv4-mapped IPv6 is read as the IPv4 address it maps. Pure and total.
 * @param text what another party wrote: a status address, a name, an annotation entry
 * @returns the distinct readings; empty when no reader takes `text` for an address
 * @example ipReadings("10.0.0.010").map(formatIP) // ["10.0.0.10", "10.0.0.8"]
 * @example ipReadings("10.0.0.5:10250").map(formatIP) // ["10.0.0.5"]
 */
export function ipReadings(text: string): IPAddress[] {
  // What the strict parser takes (as status writers mostly write) no reader takes otherwise.
  const strict = tryParseIP(text);
  if (strict) return [unmapIPv4(strict)];
  const out: IPAddress[] = [];
  for (const h of hostsOf(text)) {
    if (h.includes(":")) out.push(...v6Readings(h).map(unmapIPv4));
    else for (const v of v4Readings(h)) out.push({ family: 4, value: BigInt(v) });
  }
  return distinct(out);
}

/**
 * Every address a Node lays claim to by writing `text`: its readings (`ipReadings()`), and the IPv4
 * addresses an IPv6 reading embeds (`embeddedIPv4()`), whose host it reaches through a relay or
 * translator. Reading more than was meant only blocks more, never grants.
 * @example claimedIPs("2002:a00:2::1").map(formatIP) // ["2002:a00:2::1", "10.0.0.2"]
 */
export function claimedIPs(text: string): IPAddress[] {
  const readings = ipReadings(text);
  return distinct([...readings, ...readings.flatMap((ip) => embeddedIPv4(ip)?.ipv4 ?? [])]);
}

/**
 * What a Node claims by writing `text` when only a plain IP literal counts (surrounding spaces
 * aside): that address, unmapped, and the IPv4 addresses it embeds. The bounded reading
 * {@link claimedIPs} falls back to for the addresses past the first few of one Node.
 * @example literalClaimedIPs("10.0.0.5:10250") // []
 */
export function literalClaimedIPs(text: string): IPAddress[] {
  const ip = tryParseIP(text.trim());
  if (ip === undefined) return [];
  const own = unmapIPv4(ip);
  return distinct([own, ...(embeddedIPv4(own)?.ipv4 ?? [])]);
}

// ---------------------------------------------------------------------------------------------
// IPv6 addresses that embed an IPv4 address

/** An IPv6 form that carries an IPv4 address: what it is, and the IPv4 address(es) in it. */
export interface Embedding {
  /** What the form is, with its prefix, e.g. `a 6to4 address (2002::/16)`. */
  kind: string;
  /** The IPv4 addresses it may carry (a NAT64 local-use address: one per RFC 6052 layout). */
  ipv4: IPAddress[];
}

const V4 = (value: bigint): IPAddress => ({ family: 4, value: value & 0xffffffffn });

/**
 * The IPv4 address in a NAT64 address of the RFC 6052 §2.2 layout for prefix length `bits` (bits
 * 64–71, the "u" octet, are skipped).
 */
function rfc6052(v: bigint, bits: 32 | 40 | 48 | 56 | 64 | 96): bigint {
  switch (bits) {
    case 32:
      return v >> 64n;
    case 40:
      return (((v >> 64n) & 0xffffffn) << 8n) | ((v >> 48n) & 0xffn);
    case 48:
      return (((v >> 64n) & 0xffffn) << 16n) | ((v >> 40n) & 0xffffn);
    case 56:
      return (((v >> 64n) & 0xffn) << 24n) | ((v >> 32n) & 0xffffffn);
    case 64:
      return v >> 24n;
    default:
      return v;
  }
}

/** The forms, most specific prefix first: each its prefix (value, length), kind and IPv4 reader. */
const EMBEDDINGS: ReadonlyArray<{ net: bigint; bits: number; kind: string; ipv4: (v: bigint) => bigint[] }> =
  [
    { net: 0xffffn << 32n, bits: 96, kind: "an IPv4-mapped address (::ffff:0:0/96)", ipv4: (v) => [v] },
    {
      net: 0xffffn << 48n,
      bits: 96,
      kind: "an IPv4-translated (SIIT) address (::ffff:0:0:0/96)",
      ipv4: (v) => [v],
    },
    { net: 0n, bits: 96, kind: "an IPv4-compatible address (::/96, deprecated)", ipv4: (v) => [v] },
    {
      net: 0x64ff9bn << 96n,
      bits: 96,
      kind: "a NAT64 address (64:ff9b::/96)",
      ipv4: (v) => [v],
    },
    {
      net: 0x64ff9b0001n << 80n,
      bits: 48,
      kind: "a local-use NAT64 address (64:ff9b:1::/48)",
      ipv4: (v) => ([48, 56, 64, 96] as const).map((b) => rfc6052(v, b)),
    },
    {
      net: 0x2001_0000n << 96n,
      bits: 32,
      kind: "a Teredo address (2001::/32)",
      // The server's IPv4 in bits 32–63; the client's, inverted (obfuscated), in the last 32 bits.
      ipv4: (v) => [v >> 64n, ~v],
    },
    {
      net: 0x2002n << 112n,
      bits: 16,
      kind: "a 6to4 address (2002::/16, deprecated)",
      ipv4: (v) => [v >> 80n],
    },
  ];

/** ISATAP interface identifiers (RFC 5214 §6.1): 00-00-5E-FE or 02-00-5E-FE, then the IPv4 address. */
function isISATAP(v: bigint): boolean {
  return ((v >> 32n) & 0xfcffffffn) === 0x5efen;
}

/**
 * The IPv4 address an IPv6 address carries by design, and how: IPv4-mapped, IPv4-translated
 * (SIIT), IPv4-compatible, NAT64 (well-known and local-use prefixes), Teredo (server and client),
 * 6to4, and ISATAP interface identifiers in any prefix. Each addresses an IPv4 host through the
 * dual-stack API, a translator or a relay, not a machine of its own. Pure.
 * @param ip an address (an IPv4 address embeds nothing)
 * @returns the form and its IPv4 addresses, or undefined
 * @example embeddedIPv4(parseIP("2002:a00:2::1")) // { kind: "a 6to4 address …", ipv4: [10.0.0.2] }
 */
export function embeddedIPv4(ip: IPAddress): Embedding | undefined {
  if (ip.family !== 6) return undefined;
  const v = ip.value;
  for (const e of EMBEDDINGS) {
    if (v >> BigInt(128 - e.bits) !== e.net >> BigInt(128 - e.bits)) continue;
    return { kind: e.kind, ipv4: distinct(e.ipv4(v).map(V4)) };
  }
  if (isISATAP(v)) return { kind: "an ISATAP address (interface ID 0:5efe:<IPv4>, RFC 5214)", ipv4: [V4(v)] };
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// DNS names that are addresses

/** Why a DNS name is an address to some client, and the addresses it reads as. */
export interface NameAsIP {
  /** E.g. `is read as IP address 10.0.0.2 by inet_aton (glibc, curl) and URL parsers (browsers)`. */
  why: string;
  ips: IPAddress[];
}

/**
 * Whether a client takes the DNS name `name` for an IP address, so that a certificate naming it
 * names an address, not a host: a name whose last label is decimal digits or `0x` and hex (the
 * WHATWG URL parser's "ends in a number" rule: an IPv4 address, or no valid host at all; inet_aton
 * reads every such spelling of an address too, and RFC 1123 §2.1 keeps host names out of that form),
 * and names under ipv6-literal.net, which Windows turns into IPv6 addresses without asking DNS.
 * Compared as URL parsers do: ASCII case ignored, one trailing dot dropped.
 * @param name a DNS name as requested
 * @returns why, with the addresses it reads as (empty when it is no valid address either), or
 *   undefined for a host name
 * @example dnsNameAsIP("10.2")?.why // "is read as IP address 10.0.0.2 by …"
 */
export function dnsNameAsIP(name: string): NameAsIP | undefined {
  const labels = name.replace(/[A-Z]+/g, (s) => s.toLowerCase()).split(".");
  if (labels.length > 1 && labels.at(-1) === "") labels.pop();
  const last = labels.at(-1) ?? "";
  const ips = ipReadings(name);
  const shown = ips.slice(0, 4).map(formatIP).join(" or ");
  if (labels.length > 1 && `.${labels.slice(-2).join(".")}` === IPV6_LITERAL_NET) {
    return {
      why: `is a name under ipv6-literal.net, which Windows reads as an IPv6 address${shown ? ` (${shown})` : ""} without asking DNS`,
      ips,
    };
  }
  if (!/^[0-9]+$/.test(last) && !/^0x[0-9a-f]*$/.test(last)) return undefined;
  if (ips.length > 0) {
    return {
      why: `is read as IP address ${shown} by inet_aton (glibc, curl) and URL parsers (browsers): an address is no host name`,
      ips,
    };
  }
  return {
    why: "ends in a numeric label, which URL parsers (browsers) read as an IPv4 address or refuse: no host name ends so (RFC 1123 §2.1)",
    ips,
  };
}

// ---------------------------------------------------------------------------------------------
// Prefixes

/** The IPv4 part of an IPv6 prefix: what it holds of ::ffff:0:0/96, as an IPv4 prefix. */
function mappedImage(p: Prefix): Prefix | undefined {
  if (p.family !== 6) return undefined;
  const mapped = 0xffffn << 32n;
  if (p.bits >= 96)
    return p.addr >> 32n === 0xffffn
      ? { family: 4, addr: p.addr & 0xffffffffn, bits: p.bits - 96 }
      : undefined;
  return prefixContains(p, { family: 6, value: mapped }) ? { family: 4, addr: 0n, bits: 0 } : undefined;
}

/**
 * Every prefix `text` may stand for, read by `ipReadings()`'s rules: `<ip>/<bits>` (host bits
 * cleared) or, when `single` is allowed, one address as a host prefix (`/32`, `/128`), as Talos'
 * NodeIPConfig lists virtual IPs. An IPv6 prefix also stands for the IPv4 addresses it holds as
 * IPv4-mapped ones: `::ffff:10.0.0.0/104` is `10.0.0.0/8` too, so that an IPv4 address (which the
 * policy compares unmapped) is held by it.
 * @param text a CIDR or address, e.g. `10.244.0.0/16`, `::ffff:10.0.0.0/104`, `10.0.0.100`
 * @param opts `single: false` to refuse an address without a prefix length
 * @returns the distinct prefixes; empty when `text` is none
 * @example prefixReadings("::ffff:10.0.0.0/104").map(formatPrefix) // ["::ffff:10.0.0.0/104", "10.0.0.0/8"]
 */
export function prefixReadings(text: string, opts: { single?: boolean } = {}): Prefix[] {
  const t = text.trim();
  const slash = t.lastIndexOf("/");
  const bitsText = slash >= 0 ? t.slice(slash + 1) : "";
  if (slash < 0 && opts.single === false) return [];
  if (slash >= 0 && !/^[0-9]{1,3}$/.test(bitsText)) return [];
  const out: Prefix[] = [];
  const host = slash >= 0 ? t.slice(0, slash) : t;
  // What the strict parser takes (as Talos writes its addresses) no reader takes otherwise, as in
  // ipReadings(): one reading, without the variants' cost (~5 µs a text, 1,024 of them per CSR).
  const strict = tryParseIP(host);
  for (const h of strict ? [host] : hostsOf(host)) {
    const readings = strict
      ? [strict]
      : h.includes(":")
        ? v6Readings(h)
        : v4Readings(h).map((v) => V4(BigInt(v)));
    for (const ip of readings) {
      const width = ip.family === 4 ? 32 : 128;
      const bits = slash >= 0 ? Number(bitsText) : width;
      if (bits > width) continue;
      const p = prefixOf(ip, bits);
      out.push(p);
      const image = mappedImage(p);
      if (image) out.push(image);
    }
  }
  if (out.length < 2) return out;
  const seen = new Set<string>();
  return out.filter((p) => {
    const k = `${p.family}/${p.addr}/${p.bits}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

// ---------------------------------------------------------------------------------------------

function defined<T>(values: Array<T | undefined>): T[] {
  return values.filter((v): v is T => v !== undefined);
}

function distinct(ips: IPAddress[]): IPAddress[] {
  const seen = new Set<string>();
  return ips.filter((ip) => {
    const k = formatIP(ip);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
