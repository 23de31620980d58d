// The one lenient reader of IP spellings (lib/ipspelling.ts): every form a common client reads as an
// address is read as that address, whatever a status writer wrapped around it; the IPv6 forms that
// carry an IPv4 address give it up; DNS names a client takes for an address are told apart; prefixes
// Talos or the cluster write are read the same way. Spellings in the properties come from
// tests/support/ipspellings.ts, written apart from the reader, on fast-check's fixed seed.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  canonicalIP,
  formatIP,
  formatPrefix,
  type IPAddress,
  parseIP,
  tryParseIP,
  unmapIPv4,
} from "../../lib/cidr.ts";
import { claimedIPs, dnsNameAsIP, embeddedIPv4, ipReadings, prefixReadings } from "../../lib/ipspelling.ts";
import { isDNS1123Subdomain } from "../../lib/kubevalidation.ts";
import { canonicalDNS } from "../../lib/sharedaddresses.ts";
import { Rng, spellV4, spellV6, structuredV6, V4_EDGES, V6_EDGES } from "../support/ipspellings.ts";

const texts = (ips: IPAddress[]) => ips.map(formatIP);

describe("ipReadings()", () => {
  const rows: Array<[string, string[]]> = [
    ["10.0.0.2", ["10.0.0.2"]],
    ["10.0.0.002", ["10.0.0.2"]],
    ["10.0.0.02", ["10.0.0.2"]],
    ["10.0.0.010", ["10.0.0.10", "10.0.0.8"]],
    ["010.0.0.1", ["10.0.0.1", "8.0.0.1"]],
    ["012.0.0.2", ["12.0.0.2", "10.0.0.2"]],
    ["0x0a.0.0.1", ["10.0.0.1"]],
    ["0xa.0.0.2", ["10.0.0.2"]],
    ["0XA000002", ["10.0.0.2"]],
    ["0x00000000a000002", ["10.0.0.2"]],
    ["167772162", ["10.0.0.2"]],
    ["10.2", ["10.0.0.2"]],
    ["10.1", ["10.0.0.1"]],
    ["10.0.2", ["10.0.0.2"]],
    ["0x.0x.0x.0x", ["0.0.0.0"]],
    ["10.0.0.2.", ["10.0.0.2"]],
    ["10.0.0.5:10250", ["10.0.0.5"]],
    ["10.2:443", ["10.0.0.2"]],
    [" 10.0.0.2/24 ", ["10.0.0.2"]],
    ["10.0.0.2 eth0", ["10.0.0.2"]],
    ["[FE80::1%eth0]", ["fe80::1"]],
    ["[fe80::1%25eth0]:10250", ["fe80::1"]],
    ["[2001:db8::a]:10250", ["2001:db8::a"]],
    ["2001:db8::a%eth0", ["2001:db8::a"]],
    ["2001:0DB8:00000::A", ["2001:db8::a"]],
    ["2001:db8::10.0.0.2", ["2001:db8::a00:2"]],
    ["::ffff:10.0.0.02", ["10.0.0.2"]],
    ["::FFFF:a00:2", ["10.0.0.2"]],
    ["[::ffff:10.0.0.2]:80", ["10.0.0.2"]],
    ["2001-db8--a.ipv6-literal.net", ["2001:db8::a"]],
    ["FE80--1SETH0.IPV6-LITERAL.NET", ["fe80::1"]],
    // As URL parsers read a host: percent-escapes decoded, fullwidth forms folded.
    ["%31%30.0.0.2", ["10.0.0.2"]],
    ["\uff11\uff10\uff0e\uff10\uff0e\uff10\uff0e\uff12", ["10.0.0.2"]],
    ["10\u30020\u30020\u30022", ["10.0.0.2"]],
    ["node-b", []],
    ["node-b.example.com", []],
    ["10.0.0.256", []],
    ["1.2.3.4.5", []],
    ["10..0.2", []],
    ["08.0.0.1", ["8.0.0.1"]],
    ["4294967296", []],
    ["0x100000000", []],
    ["", []],
    ["[2001:db8::a", []],
  ];
  for (const [text, want] of rows) {
    test(`ipReadings(${JSON.stringify(text)}) is ${JSON.stringify(want)}`, () => {
      expect(texts(ipReadings(text))).toEqual(want);
    });
  }
});

describe("claimedIPs()", () => {
  const rows: Array<[string, string[]]> = [
    ["10.0.0.2", ["10.0.0.2"]],
    ["2002:a00:2::1", ["2002:a00:2::1", "10.0.0.2"]],
    ["[::ffff:0:10.0.0.2]:10250", ["::ffff:0:a00:2", "10.0.0.2"]],
    ["2001:db8::a", ["2001:db8::a"]],
  ];
  for (const [text, want] of rows) {
    test(`claimedIPs(${JSON.stringify(text)}) is ${JSON.stringify(want)}`, () => {
      expect(texts(claimedIPs(text))).toEqual(want);
    });
  }
});

describe("embeddedIPv4()", () => {
  const rows: Array<[string, string, string[]]> = [
    ["::ffff:10.0.0.2", "IPv4-mapped", ["10.0.0.2"]],
    ["::ffff:0:10.0.0.2", "SIIT", ["10.0.0.2"]],
    ["::10.0.0.2", "IPv4-compatible", ["10.0.0.2"]],
    ["64:ff9b::10.0.0.2", "NAT64 address (64:ff9b::/96)", ["10.0.0.2"]],
    // RFC 6052 §2.4's example layouts of 192.0.2.33, under the local-use prefix (RFC 8215).
    ["64:ff9b:1:c000:2:2100::", "local-use NAT64", ["192.0.2.33"]],
    ["64:ff9b:1:ffc0:0:221::", "local-use NAT64", ["192.0.2.33"]],
    ["64:ff9b:1:ffff:c0:2:2100:0", "local-use NAT64", ["192.0.2.33"]],
    ["64:ff9b:1:ffff:ffff:ffff:c000:221", "local-use NAT64", ["192.0.2.33"]],
    ["2002:a00:2:1::5", "6to4", ["10.0.0.2"]],
    // RFC 4380 §4's example: server 65.54.227.120, client 192.0.2.45 (bits inverted).
    ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo", ["65.54.227.120", "192.0.2.45"]],
    ["2001:db8:1:2::5efe:10.0.0.2", "ISATAP", ["10.0.0.2"]],
    ["2001:db8:1:2:200:5efe:10.0.0.2", "ISATAP", ["10.0.0.2"]],
  ];
  for (const [text, kind, want] of rows) {
    test(`embeddedIPv4(${text}) is ${kind} of ${want.join(", ")}`, () => {
      const e = embeddedIPv4(parseIP(text));
      expect(e?.kind).toContain(kind);
      expect(texts(e?.ipv4 ?? [])).toEqual(expect.arrayContaining(want));
    });
  }
  for (const text of [
    "10.0.0.2",
    "2001:db8::a",
    "2001:db8:0:1::a00:2",
    "fd00::1",
    "2003::a00:2",
    "fe80::1",
  ]) {
    test(`embeddedIPv4(${text}) is undefined`, () => {
      expect(embeddedIPv4(parseIP(text))).toBeUndefined();
    });
  }
});

describe("dnsNameAsIP()", () => {
  const read: Array<[string, string[]]> = [
    ["167772162", ["10.0.0.2"]],
    ["10.0.0.02", ["10.0.0.2"]],
    ["10.2", ["10.0.0.2"]],
    ["012.0.0.2", ["12.0.0.2", "10.0.0.2"]],
    ["0xa.0.0.2", ["10.0.0.2"]],
    ["0XA000002", ["10.0.0.2"]],
    ["10.0.0.2.", ["10.0.0.2"]],
    ["2001-db8--a.ipv6-literal.net", ["2001:db8::a"]],
    // Ends in a number, but no address: URL parsers refuse the host.
    ["host.123", []],
    ["node-b.0x", []],
    ["1.2.3.4.5", []],
    ["10.0.0.256", []],
  ];
  for (const [name, ips] of read) {
    test(`dnsNameAsIP(${JSON.stringify(name)}) says why, reading ${JSON.stringify(ips)}`, () => {
      const got = dnsNameAsIP(name);
      expect(got?.why).toBeString();
      expect(texts(got?.ips ?? [])).toEqual(ips);
      for (const ip of ips) expect(got?.why).toContain(ip);
    });
  }
  for (const name of [
    "node-b",
    "worker-1",
    "ip-10-0-0-2.ec2.internal",
    "10-0-0-2.nip.io",
    "a.b0x1",
    "node.0xg",
    "0x1.example",
  ]) {
    test(`dnsNameAsIP(${JSON.stringify(name)}) is undefined: a host name`, () => {
      expect(dnsNameAsIP(name)).toBeUndefined();
    });
  }
});

describe("prefixReadings()", () => {
  const rows: Array<[string, string[]]> = [
    ["10.244.0.0/16", ["10.244.0.0/16"]],
    ["10.0.0.5/24", ["10.0.0.0/24"]],
    ["10.0.0.100", ["10.0.0.100/32"]],
    ["2001:db8::/64", ["2001:db8::/64"]],
    ["::ffff:10.0.0.0/104", ["::ffff:10.0.0.0/104", "10.0.0.0/8"]],
    ["::ffff:a00:5/120", ["::ffff:10.0.0.0/120", "10.0.0.0/24"]],
    ["::/0", ["::/0", "0.0.0.0/0"]],
    ["010.0.0.0/8", ["10.0.0.0/8", "8.0.0.0/8"]],
    [" 10.96.0.0/12 ", ["10.96.0.0/12"]],
    ["10.0.0.0/33", []],
    ["10.0.0.0/x", []],
    ["bogus", []],
  ];
  for (const [text, want] of rows) {
    test(`prefixReadings(${JSON.stringify(text)}) is ${JSON.stringify(want)}`, () => {
      expect(prefixReadings(text).map(formatPrefix)).toEqual(want);
    });
  }
  test("prefixReadings() with single: false refuses an address without a length", () => {
    expect(prefixReadings("10.0.0.100", { single: false })).toEqual([]);
  });

  test("a spelling the strict parser takes is read as the variant readers read it (the fast path changes no answer)", () => {
    const v4 = fc.oneof(fc.constantFrom(...V4_EDGES), fc.integer({ min: 0, max: 0xffffffff }));
    const v6 = fc.oneof(
      fc.constantFrom(...V6_EDGES),
      fc.integer().map((seed) => structuredV6(new Rng(seed))),
    );
    let strictSeen = 0;
    const same = (text: string, slow: string, bits: number | undefined) => {
      if (!tryParseIP(text)) return;
      strictSeen++;
      const suffix = bits === undefined ? "" : `/${bits}`;
      const want = prefixReadings(`${slow}${suffix}`).map(formatPrefix);
      expect(want.length, `${slow}${suffix}`).toBeGreaterThan(0);
      expect(prefixReadings(`${text}${suffix}`).map(formatPrefix), `${text}${suffix}`).toEqual(want);
    };
    fc.assert(
      fc.property(v4, v6, fc.integer(), fc.option(fc.integer({ min: 0, max: 128 })), (a, b, seed, bits) => {
        const r = new Rng(seed);
        // A trailing dot and brackets send a spelling through every variant reader.
        const slow = (t: string) => (t.includes(":") ? `[${t}]` : `${t}.`);
        for (const s of spellV4(a, r, 10)) same(s.text, slow(s.text), bits === null ? undefined : bits % 33);
        for (const s of spellV6(b, r, 10)) same(s.text, slow(s.text), bits ?? undefined);
      }),
      { numRuns: 500 },
    );
    expect(strictSeen).toBeGreaterThan(500);
  });
});

/** Whether `text` may be a DNS SAN at all (what reservedName() checks first). */
const dnsValid = (text: string) => isDNS1123Subdomain(canonicalDNS(text)).length === 0;

describe("every spelling of an address is read as that address", () => {
  const v4 = fc.oneof(fc.constantFrom(...V4_EDGES), fc.integer({ min: 0, max: 0xffffffff }));

  test("every spelling of an IPv4 address is claimed as it; the strict reader reads it as it or not at all; a DNS-valid one is an address to dnsNameAsIP()", () => {
    let dnsValidSeen = 0;
    fc.assert(
      fc.property(v4, fc.integer(), (v, seed) => {
        const x = formatIP({ family: 4, value: BigInt(v) });
        for (const s of spellV4(v, new Rng(seed), 40)) {
          const why = `${JSON.stringify(s.text)} (${s.form}) of ${x}`;
          expect(texts(claimedIPs(s.text)), why).toContain(x);
          if (!s.embedding) expect(texts(ipReadings(s.text)), why).toContain(x);
          const strict = canonicalIP(s.text);
          if (strict !== undefined && !s.embedding) expect(strict, why).toBe(x);
          if (dnsValid(s.text)) {
            dnsValidSeen++;
            // An embedding form's name reads as the IPv6 address that holds x (claimedIPs adds x).
            const read = texts((dnsNameAsIP(s.text)?.ips ?? []).flatMap((ip) => claimedIPs(formatIP(ip))));
            expect(read, why).toContain(x);
          }
        }
      }),
      { numRuns: 1000 },
    );
    expect(dnsValidSeen).toBeGreaterThan(5000);
  });

  test("every spelling of an IPv6 address is claimed as it (an IPv4-mapped one as its IPv4 address)", () => {
    const v6 = fc.oneof(
      fc.constantFrom(...V6_EDGES),
      fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }),
      fc.integer().map((seed) => structuredV6(new Rng(seed))),
    );
    fc.assert(
      fc.property(v6, fc.integer(), (value, seed) => {
        const x = formatIP(unmapIPv4({ family: 6, value }));
        for (const s of spellV6(value, new Rng(seed), 30)) {
          const why = `${JSON.stringify(s.text)} (${s.form}) of ${x}`;
          expect(texts(ipReadings(s.text)), why).toContain(x);
          const strict = canonicalIP(s.text);
          if (strict !== undefined) expect(strict, why).toBe(x);
          if (dnsValid(s.text)) expect(texts(dnsNameAsIP(s.text)?.ips ?? []), why).toContain(x);
        }
      }),
      { numRuns: 1000 },
    );
  });

  test("a host name whose last label is not numeric reads as no address", () => {
    const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$/);
    const hostLabel = fc.stringMatching(/^[a-z0-9-]{0,5}[g-wyz][a-z0-9-]{0,5}[a-z0-9]$/);
    fc.assert(
      fc.property(fc.array(label, { maxLength: 3 }), hostLabel, (labels, last) => {
        const name = [...labels, last].join(".");
        fc.pre(!name.endsWith(".ipv6-literal.net"));
        expect(dnsNameAsIP(name)).toBeUndefined();
        expect(ipReadings(name)).toEqual([]);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("a hostile text costs time linear in its length", () => {
  // A compromised node writes its own status: one address may be as long as the Node object allows
  // (about 1.5 MB). Patterns a backtracking regex would cross once per start position, so that the
  // cost grows with the square of the length (100k characters took 8 s, 300k 90 s, before the reader cut by index).
  const n = 100_000;
  const rows: Array<[string, () => string[]]> = [
    ["a zone of many % before a newline", () => texts(ipReadings(`10.0.0.5${"%".repeat(n)}\nx`))],
    [
      "an ipv6-literal.net name of many s after a newline",
      () => texts(ipReadings(`\n${"s".repeat(n)}\nx.ipv6-literal.net`)),
    ],
    ["a prefix of many % before a newline", () => prefixReadings(`${"%".repeat(n)}\nx/24`).map(formatPrefix)],
    ["many spaces", () => texts(ipReadings(`10.0.0.5${" ".repeat(n)}x`))],
    ["NFKC expanding forms with spaces", () => texts(ipReadings(`10.0.0.5\u3000${"\ufdfa".repeat(n / 3)}`))],
  ];
  for (const [what, read] of rows) {
    test(`${what} (${n} characters) is read in well under a second`, () => {
      const start = performance.now();
      const got = read();
      expect(performance.now() - start).toBeLessThan(1000);
      expect(got.length).toBeLessThanOrEqual(1);
    });
  }
  test("what is read around the hostile part is still read", () => {
    expect(texts(ipReadings(`10.0.0.5${"%".repeat(n)}\nx`))).toEqual(["10.0.0.5"]);
    expect(texts(ipReadings(`10.0.0.5${" ".repeat(n)}x`))).toEqual(["10.0.0.5"]);
    expect(texts(ipReadings(`10.0.0.5\u3000${"\ufdfa".repeat(n / 3)}`))).toEqual(["10.0.0.5"]);
  });
});
