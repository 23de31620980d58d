// Spellings of an IP address, written independently of lib/ipspelling.ts (which reads them): every
// form a common client reads as that address — inet_aton's 1 to 4 parts in decimal, octal and hex
// with leading zeros, WHATWG's bare `0x`, trailing dot and percent-escapes, IPv6 in any case, padding and compression,
// with a dotted tail, IPv4-mapped — and what a Node status writer may wrap around one (a port, a zone,
// brackets, a prefix length, spaces), plus the IPv6 forms that embed an IPv4 address (6to4, Teredo,
// SIIT, NAT64, IPv4-compatible, ISATAP). Choices come from a seeded PRNG, so a property test that
// passes its seed replays.

/** A small seeded PRNG (mulberry32): the same seed gives the same spellings. */
export class Rng {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(values: readonly T[]): T {
    return values[this.int(values.length)] as T;
  }
  chance(p = 0.5): boolean {
    return this.next() < p;
  }
}

/** One way to write an address. */
export interface Spelling {
  text: string;
  /** How it was made, for failure messages, e.g. `inet_aton 2 parts + port`. */
  form: string;
  /** An IPv6 form that carries the IPv4 address (6to4, Teredo, …), not the address itself. */
  embedding: boolean;
}

const MAPPED = 0xffffn << 32n;

function randomCase(s: string, r: Rng): string {
  return [...s].map((c) => (r.chance() ? c.toUpperCase() : c.toLowerCase())).join("");
}

/** One inet_aton part of value `n`: decimal (maybe zero-padded), octal, or hex in any case. */
function part(n: number, r: Rng): string {
  const pad = "0".repeat(r.int(3));
  switch (r.int(4)) {
    case 0:
      return String(n);
    case 1:
      return `${pad}${String(n)}`;
    case 2:
      return `0${pad}${n.toString(8)}`;
    default: {
      // WHATWG reads a bare 0x as 0; glibc needs a digit.
      const digits = n === 0 && r.chance(0.3) ? "" : `${pad}${n.toString(16)}`;
      return randomCase(`0x${digits}`, r);
    }
  }
}

/** The IPv4 text of `v` in 1 to 4 inet_aton parts, each in a random radix. */
function inetAton(v: number, r: Rng): { text: string; form: string } {
  const o = [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255] as const;
  switch (r.int(5)) {
    case 0:
      return { text: o.join("."), form: "dotted quad" };
    case 1:
      return { text: o.map((n) => part(n, r)).join("."), form: "inet_aton 4 parts" };
    case 2:
      return {
        text: [o[0], o[1], o[2] * 256 + o[3]].map((n) => part(n, r)).join("."),
        form: "inet_aton 3 parts",
      };
    case 3:
      return {
        text: [o[0], (v >>> 0) & 0xffffff].map((n) => part(n, r)).join("."),
        form: "inet_aton 2 parts",
      };
    default:
      return { text: part(v >>> 0, r), form: "inet_aton 1 part" };
  }
}

/** What a status writer may put around an IPv4 spelling. */
function wrapV4(s: { text: string; form: string }, r: Rng): { text: string; form: string } {
  switch (r.int(8)) {
    case 0:
      return { text: `${s.text}:${r.int(65536)}`, form: `${s.form} + port` };
    case 1:
      return { text: `${s.text}/${r.int(33)}`, form: `${s.form} + prefix length` };
    case 2:
      return { text: `${s.text}.`, form: `${s.form} + trailing dot` };
    case 3:
      return { text: ` \t${s.text}  `, form: `${s.form} + spaces` };
    case 4:
      return { text: `${s.text} via eth0`, form: `${s.form} + words after a space (inet_aton)` };
    case 5: {
      // URL parsers decode percent-escapes in a host before they read it.
      const text = [...s.text]
        .map((c) => (r.chance(0.4) ? `%${c.charCodeAt(0).toString(16).padStart(2, "0")}` : c))
        .join("");
      return { text, form: `${s.form}, percent-escaped` };
    }
    default:
      return s;
  }
}

function groupsOf(value: bigint): number[] {
  return Array.from({ length: 8 }, (_, i) => Number((value >> BigInt(112 - 16 * i)) & 0xffffn));
}

/** IPv6 text of `value`: padded groups, any case, one zero run compressed, maybe a dotted tail. */
function v6Text(value: bigint, r: Rng): { text: string; form: string } {
  const g = groupsOf(value);
  const dotted = r.chance(0.25);
  const words: string[] = g.map((n) => {
    const hex = n.toString(16);
    const padded = r.chance(0.3) ? hex.padStart(r.pick([4, 5]), "0") : hex;
    return randomCase(padded, r);
  });
  if (dotted) {
    const v4 = Number(value & 0xffffffffn);
    words.splice(6, 2, [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join("."));
  }
  // Compress one run of zero groups (any length, any run), or none.
  const zeroRuns: Array<[number, number]> = [];
  for (let i = 0; i < words.length; i++) {
    if (!/^0+$/.test(words[i] as string)) continue;
    let j = i;
    while (j < words.length && /^0+$/.test(words[j] as string)) j++;
    zeroRuns.push([i, r.int(j - i) + 1]);
    i = j;
  }
  const form = `IPv6${dotted ? " with a dotted tail" : ""}`;
  if (zeroRuns.length === 0 || r.chance(0.3)) return { text: words.join(":"), form: `${form}, uncompressed` };
  const [start, len] = r.pick(zeroRuns);
  const left = words.slice(0, start).join(":");
  const right = words.slice(start + len).join(":");
  return { text: `${left}::${right}`, form: `${form}, compressed` };
}

/** What a status writer may put around an IPv6 spelling, or its ipv6-literal.net name. */
function wrapV6(s: { text: string; form: string }, r: Rng): { text: string; form: string } {
  const zone = r.pick(["%eth0", "%25eth0", "%1"]);
  switch (r.int(8)) {
    case 0:
      return { text: `[${s.text}]`, form: `${s.form} in brackets` };
    case 1:
      return {
        text: `[${s.text}${r.chance() ? zone : ""}]:${r.int(65536)}`,
        form: `${s.form} in brackets + port`,
      };
    case 2:
      return { text: `${s.text}${zone}`, form: `${s.form} + zone` };
    case 3:
      return { text: `${s.text}/${r.int(129)}`, form: `${s.form} + prefix length` };
    case 4:
      return { text: `  ${s.text}\t`, form: `${s.form} + spaces` };
    case 5:
      if (s.text.includes(".")) return s;
      return {
        text: `${s.text.replaceAll(":", "-")}${r.chance(0.3) ? "seth0" : ""}.ipv6-literal.net`,
        form: `${s.form} as an ipv6-literal.net name`,
      };
    default:
      return s;
  }
}

/** An IPv6 spelling of `value`, maybe wrapped. */
function v6Spelling(value: bigint, r: Rng): { text: string; form: string } {
  return wrapV6(v6Text(value, r), r);
}

function rand(r: Rng, bits: number): bigint {
  let v = 0n;
  for (let i = 0; i < bits; i += 16) v = (v << 16n) | BigInt(r.int(65536));
  return v & ((1n << BigInt(bits)) - 1n);
}

/**
 * The IPv6 addresses that carry the IPv4 address `v4` (RFC 6052 layouts for the local-use NAT64
 * prefix; Teredo with it as server or, inverted, as client; ISATAP in a random /64).
 */
export function embeddingsOf(v4: number, r: Rng): Array<{ value: bigint; form: string }> {
  const x = BigInt(v4 >>> 0);
  const nsp = 0x64ff9b0001n << 80n;
  const layouts: Record<number, bigint> = {
    48: nsp | ((x >> 16n) << 64n) | ((x & 0xffffn) << 40n),
    56: nsp | (rand(r, 8) << 72n) | ((x >> 24n) << 64n) | ((x & 0xffffffn) << 32n),
    64: nsp | (rand(r, 16) << 64n) | (x << 24n),
    // Bits 64-71 (the "u" octet) stay zero.
    96: nsp | (rand(r, 16) << 64n) | (rand(r, 24) << 32n) | x,
  };
  const bits = r.pick([48, 56, 64, 96]);
  return [
    { value: x, form: "IPv4-compatible ::/96" },
    { value: (0xffffn << 48n) | x, form: "SIIT ::ffff:0:0:0/96" },
    { value: (0x64ff9bn << 96n) | x, form: "NAT64 64:ff9b::/96" },
    { value: layouts[bits] as bigint, form: `NAT64 local-use 64:ff9b:1::/48 (layout /${bits})` },
    { value: (0x2002n << 112n) | (x << 80n) | rand(r, 80), form: "6to4 2002::/16" },
    { value: (0x20010000n << 96n) | (x << 64n) | (rand(r, 32) << 32n) | rand(r, 32), form: "Teredo server" },
    {
      value: (0x20010000n << 96n) | (rand(r, 64) << 32n) | (~x & 0xffffffffn),
      form: "Teredo client (inverted)",
    },
    {
      // In a unique local /64 (fd00::/8), so that no other embedding prefix matches first.
      value:
        (((0xfdn << 56n) | rand(r, 56)) << 64n) | (BigInt(r.pick([0, 0x200])) << 48n) | (0x5efen << 32n) | x,
      form: "ISATAP interface ID",
    },
  ];
}

/**
 * Up to `count` spellings of an IPv4 address: inet_aton forms, wrapped or not, IPv4-mapped IPv6 in
 * any IPv6 spelling, and the embedding forms (flagged) in any IPv6 spelling.
 * @param v the address as an unsigned 32-bit number
 */
export function spellV4(v: number, r: Rng, count: number): Spelling[] {
  const out: Spelling[] = [];
  const embeddings = embeddingsOf(v, r);
  for (let i = 0; i < count; i++) {
    const kind = r.int(10);
    if (kind < 6) {
      const s = wrapV4(inetAton(v, r), r);
      out.push({ ...s, embedding: false });
    } else if (kind < 8) {
      const s = v6Spelling(MAPPED | BigInt(v >>> 0), r);
      out.push({ text: s.text, form: `IPv4-mapped, ${s.form}`, embedding: false });
    } else {
      const e = r.pick(embeddings);
      const s = v6Spelling(e.value, r);
      out.push({ text: s.text, form: `${e.form}, ${s.form}`, embedding: true });
    }
  }
  return out;
}

/** Up to `count` spellings of an IPv6 address (an IPv4-mapped one is also its IPv4 address). */
export function spellV6(value: bigint, r: Rng, count: number): Spelling[] {
  return Array.from({ length: count }, () => ({ ...v6Spelling(value, r), embedding: false }));
}

/** IPv4 values at the edges of every reader's rules, as unsigned 32-bit numbers. */
export const V4_EDGES: readonly number[] = [
  0, 1, 0xff, 0x100, 0xffff, 0x10000, 0xffffff, 0x1000000, 0x7f000001, 0x0a000000, 0x0a000002, 0x0a1f0002,
  0x08080808, 0x09090909, 0x64400001, 0xa9fea9fe, 0xc0000201, 0xe0000001, 0xf0000001, 0xfffffffe, 0xffffffff,
];

/** IPv6 values at the edges: zero, one, all ones, IPv4-mapped, and the special and embedding prefixes. */
export const V6_EDGES: readonly bigint[] = [
  0n,
  1n,
  (1n << 128n) - 1n,
  MAPPED,
  MAPPED | 0x0a000002n,
  MAPPED | 0xffffffffn,
  0x20010db8n << 96n,
  (0x20010db8n << 96n) | 1n,
  (0xfe80n << 112n) | 1n,
  (0xff02n << 112n) | 1n,
  (0xfd00n << 112n) | 1n,
  0x1n << 112n,
  (0x2002n << 112n) | (0x0a000002n << 80n) | 1n,
  (0x64ff9bn << 96n) | 0x0a000002n,
  0xffff0000n << 96n,
];

/** A random IPv6 value with runs of zero groups, as real addresses have. */
export function structuredV6(r: Rng): bigint {
  let v = 0n;
  for (let i = 0; i < 8; i++) v = (v << 16n) | (r.chance(0.4) ? 0n : BigInt(r.int(65536)));
  return v;
}
