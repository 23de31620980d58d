import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  CidrError,
  canonicalIP,
  formatIP,
  formatPrefix,
  ipFromBytes,
  isGlobalUnicast,
  isIPv4Mapped,
  isLinkLocal,
  isLoopback,
  isMulticast,
  isPrivate,
  isPublicUnicast,
  isSharedAddressSpace,
  isUnspecified,
  lastAddress,
  parseCidr,
  parseIP,
  parsePrefix,
  prefixContains,
  prefixCovers,
  prefixesOverlap,
  tryParseCidr,
  tryParseIP,
  tryParsePrefix,
  unmapIPv4,
} from "../../lib/cidr.ts";
import { CidrSet } from "../../lib/cidrset.ts";
import { cloudSubnet, resolveNodeIpamConfig } from "../../lib/ipamconfig.ts";
import { Registry } from "../../lib/metrics.ts";

function errorOf(fn: () => unknown): CidrError {
  try {
    fn();
  } catch (err) {
    if (err instanceof CidrError) return err;
    throw err;
  }
  throw new Error("expected a CidrError");
}

describe("parseIP()", () => {
  test.each([
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["10.0.0.1", "10.0.0.1"],
    ["::", "::"],
    ["::1", "::1"],
    ["1::", "1::"],
    ["2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"],
    ["2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"],
    ["2001:db8::1:0:0:0", "2001:db8:0:0:1::"],
    ["1:0:0:1:0:0:0:1", "1:0:0:1::1"],
    ["1:0:0:2:0:0:3:4", "1::2:0:0:3:4"],
    ["1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"],
    ["::ffff:192.0.2.1", "::ffff:192.0.2.1"],
    ["::FFFF:c000:0201", "::ffff:192.0.2.1"],
    ["::1.2.3.4", "::102:304"],
    ["64:ff9b::192.0.2.33", "64:ff9b::c000:221"],
    ["fe80::1", "fe80::1"],
  ])("parseIP() accepts %s as %s", (input, canonical) => {
    expect(formatIP(parseIP(input))).toBe(canonical);
  });

  test.each([
    "",
    " 1.2.3.4",
    "1.2.3.4 ",
    "01.2.3.4",
    "1.2.3.04",
    "0x10.0.0.1",
    "1.2.3",
    "1.2.3.4.5",
    "256.0.0.1",
    "1.2.3.-4",
    "1.2..3",
    "1e2.0.0.1",
    "+1.2.3.4",
    "1.2.3.4/32",
    ":",
    ":::",
    "1:::2",
    ":1::2",
    "1::2:",
    "1::2::3",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4:5:6:7:8::",
    "1:2:3:4:5:6:7",
    "12345::1",
    "g::1",
    "fe80::1%eth0",
    "[::1]",
    "::ffff:1.2.3",
    "::ffff:01.2.3.4",
    "1:2:3:4:5:6:7:1.2.3.4",
    "::1.2.3.4:5",
  ])("parseIP() rejects %p", (input) => {
    expect(tryParseIP(input)).toBeUndefined();
    expect(errorOf(() => parseIP(input)).code).toBe("invalid-ip");
  });

  test("parseIP() returns bigint values", () => {
    expect(parseIP("10.0.0.1")).toEqual({ family: 4, value: 0x0a000001n });
    expect(parseIP("2001:db8::1")).toEqual({ family: 6, value: 0x20010db8000000000000000000000001n });
  });

  test("formatIP() writes every IPv4 address as its four decimal octets", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 }), (octets) => {
        const text = octets.join(".");
        expect(formatIP(parseIP(text))).toBe(text);
        expect(formatIP(ipFromBytes(Uint8Array.from(octets)))).toBe(text);
      }),
      { numRuns: 2000 },
    );
  });

  test("formatIP() round-trips random addresses canonically", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (value) => {
        const text = formatIP({ family: 6, value });
        expect(parseIP(text)).toEqual({ family: 6, value });
        expect(text).toBe(text.toLowerCase());
        expect(text.split("::").length).toBeLessThanOrEqual(2);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("ipFromBytes()", () => {
  test("reads 4 and 16 network-order bytes, and refuses other lengths", () => {
    expect(formatIP(ipFromBytes(Uint8Array.of(10, 0, 0, 1)))).toBe("10.0.0.1");
    const v6 = Uint8Array.of(0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 1);
    expect(formatIP(ipFromBytes(v6))).toBe("2001:db8::1");
    for (const n of [0, 3, 5, 15, 17]) expect(() => ipFromBytes(new Uint8Array(n))).toThrow(RangeError);
  });
});

describe("canonicalIP()", () => {
  // The default (IPv4-mapped as IPv4) is tested with the CSR policy, in csr.test.ts.
  test("canonicalIP() keeps an IPv4-mapped address IPv6 when asked, and parses as strictly", () => {
    expect(canonicalIP("::FFFF:10.0.0.1", "keep")).toBe("::ffff:10.0.0.1");
    expect(canonicalIP("::ffff:a00:1", "keep")).toBe("::ffff:10.0.0.1");
    expect(canonicalIP("::ffff:a00:1", "unmap")).toBe("10.0.0.1");
    expect(canonicalIP("2001:DB8:0::1", "keep")).toBe("2001:db8::1");
    expect(canonicalIP("10.0.0.1", "keep")).toBe("10.0.0.1");
    for (const bad of [" 10.0.0.1", "010.0.0.1", "fe80::1%eth0", "10.0.0.1/24"]) {
      expect(canonicalIP(bad, "keep")).toBeUndefined();
    }
  });
});

describe("parsePrefix()", () => {
  test.each([
    ["10.0.0.0/8", "10.0.0.0/8"],
    ["0.0.0.0/0", "0.0.0.0/0"],
    ["10.0.0.1/32", "10.0.0.1/32"],
    ["2001:db8::/32", "2001:db8::/32"],
    ["2001:DB8:0:0::/64", "2001:db8::/64"],
    ["::/0", "::/0"],
  ])("parsePrefix() accepts %s", (input, canonical) => {
    expect(formatPrefix(parsePrefix(input))).toBe(canonical);
  });

  test.each([
    ["10.0.0.1/16", "host-bits", /did you mean 10\.0\.0\.0\/16/],
    ["2001:db8::1/64", "host-bits", /did you mean 2001:db8::\/64/],
    ["10.0.0.0", "invalid-prefix", /expected <address>\/<length>/],
    ["10.0.0.0/33", "invalid-prefix", /./],
    ["10.0.0.0/08", "invalid-prefix", /./],
    ["10.0.0.0/-1", "invalid-prefix", /./],
    ["10.0.0.0/", "invalid-prefix", /./],
    ["10.0.0.0/8/8", "invalid-prefix", /./],
    ["2001:db8::/129", "invalid-prefix", /./],
    ["010.0.0.0/8", "invalid-prefix", /./],
  ])("parsePrefix() rejects %s with %s", (input, code, message) => {
    const err = errorOf(() => parsePrefix(input));
    expect(err.code).toBe(code as CidrError["code"]);
    expect(err.message).toMatch(/^Cannot parse/);
    expect(err.message).toMatch(message);
    expect(tryParsePrefix(input)).toBeUndefined();
  });

  test("parseCidr() keeps the interface address and masks the network", () => {
    const cidr = parseCidr("2001:db8:1:2::5/56");
    expect(formatIP(cidr.ip)).toBe("2001:db8:1:2::5");
    expect(formatPrefix(cidr.prefix)).toBe("2001:db8:1::/56");
    expect(tryParseCidr("10.0.0.5")).toBeUndefined();
  });
});

describe("prefix maths", () => {
  const p = parsePrefix;
  test.each([
    ["10.0.0.0/8", "10.255.255.255", true],
    ["10.0.0.0/8", "11.0.0.0", false],
    ["10.0.0.0/8", "::ffff:10.0.0.1", false],
    ["2001:db8::/64", "2001:db8::ffff:ffff:ffff:ffff", true],
    ["2001:db8::/64", "2001:db8:0:1::", false],
    ["0.0.0.0/0", "1.2.3.4", true],
  ])("prefixContains(%s, %s) is %p", (prefix, ip, expected) => {
    expect(prefixContains(p(prefix), parseIP(ip))).toBe(expected);
  });

  test.each([
    ["10.0.0.0/8", "10.1.0.0/16", true, true],
    ["10.1.0.0/16", "10.0.0.0/8", false, true],
    ["10.0.0.0/16", "10.1.0.0/16", false, false],
    ["10.0.0.0/8", "10.0.0.0/8", true, true],
    ["::/0", "0.0.0.0/0", false, false],
    ["2001:db8::/32", "2001:db8:1::/48", true, true],
  ])("prefixCovers(%s, %s) is %p, prefixesOverlap() is %p", (a, b, covers, overlap) => {
    expect(prefixCovers(p(a), p(b))).toBe(covers);
    expect(prefixesOverlap(p(a), p(b))).toBe(overlap);
    expect(prefixesOverlap(p(b), p(a))).toBe(overlap);
  });

  test("lastAddress() is the top of the prefix", () => {
    expect(formatIP({ family: 4, value: lastAddress(p("10.0.0.0/22")) })).toBe("10.0.3.255");
    expect(formatIP({ family: 6, value: lastAddress(p("2001:db8::/64")) })).toBe(
      "2001:db8::ffff:ffff:ffff:ffff",
    );
  });
});

describe("classification", () => {
  // global unicast, private, link-local, loopback, multicast, shared (CGNAT), public
  test.each([
    ["8.8.8.8", true, false, false, false, false, false, true],
    ["10.1.2.3", true, true, false, false, false, false, false],
    ["172.16.0.1", true, true, false, false, false, false, false],
    ["172.32.0.1", true, false, false, false, false, false, true],
    ["192.168.1.1", true, true, false, false, false, false, false],
    ["100.64.0.1", true, false, false, false, false, true, true],
    ["100.128.0.1", true, false, false, false, false, false, true],
    ["169.254.1.1", false, false, true, false, false, false, false],
    ["127.0.0.1", false, false, false, true, false, false, false],
    ["224.0.0.1", false, false, false, false, true, false, false],
    ["255.255.255.255", false, false, false, false, false, false, false],
    ["0.0.0.0", false, false, false, false, false, false, false],
    ["2001:db8::1", true, false, false, false, false, false, true],
    ["2a01:4f8::1", true, false, false, false, false, false, true],
    ["fd00::1", true, true, false, false, false, false, false],
    ["fc00::1", true, true, false, false, false, false, false],
    ["fe80::1", false, false, true, false, false, false, false],
    ["febf::1", false, false, true, false, false, false, false],
    ["fec0::1", true, false, false, false, false, false, true],
    ["::1", false, false, false, true, false, false, false],
    ["::", false, false, false, false, false, false, false],
    ["ff02::1", false, false, false, false, true, false, false],
    ["::ffff:10.0.0.1", true, true, false, false, false, false, false],
    ["::ffff:8.8.8.8", true, false, false, false, false, false, true],
    ["::ffff:127.0.0.1", false, false, false, true, false, false, false],
    ["::ffff:169.254.0.1", false, false, true, false, false, false, false],
  ])(
    "classification of %s: global %p private %p link-local %p loopback %p multicast %p shared %p public %p",
    (addr, global, priv, link, loop, multi, shared, pub) => {
      const ip = parseIP(addr);
      expect(isGlobalUnicast(ip)).toBe(global);
      expect(isPrivate(ip)).toBe(priv);
      expect(isLinkLocal(ip)).toBe(link);
      expect(isLoopback(ip)).toBe(loop);
      expect(isMulticast(ip)).toBe(multi);
      expect(isSharedAddressSpace(ip)).toBe(shared);
      expect(isPublicUnicast(ip)).toBe(pub);
    },
  );

  test("unmapIPv4() turns ::ffff:a.b.c.d into IPv4 and leaves others alone", () => {
    expect(isIPv4Mapped(parseIP("::ffff:1.2.3.4"))).toBe(true);
    expect(isIPv4Mapped(parseIP("::1.2.3.4"))).toBe(false);
    expect(unmapIPv4(parseIP("::ffff:1.2.3.4"))).toEqual(parseIP("1.2.3.4"));
    expect(unmapIPv4(parseIP("2001:db8::1"))).toEqual(parseIP("2001:db8::1"));
    expect(isUnspecified(parseIP("::ffff:0.0.0.0"))).toBe(true);
  });
});

describe("CidrSet", () => {
  const allocations = (set: CidrSet, n: number) =>
    Array.from({ length: n }, () => formatPrefix(set.allocateNext()));

  test.each([
    ["10.0.0.0/8", 24, ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"], 65536],
    ["10.244.0.0/16", 16, ["10.244.0.0/16"], 1],
    ["10.0.0.0/30", 32, ["10.0.0.0/32", "10.0.0.1/32", "10.0.0.2/32"], 4],
    ["2001:db8:1:2::/64", 80, ["2001:db8:1:2::/80", "2001:db8:1:2:1::/80", "2001:db8:1:2:2::/80"], 65536],
    ["2001:db8::/48", 64, ["2001:db8::/64", "2001:db8:0:1::/64", "2001:db8:0:2::/64"], 65536],
    ["2001:db8::/56", 65, ["2001:db8::/65", "2001:db8:0:0:8000::/65", "2001:db8:0:1::/65"], 512],
    [
      "2001:db8::aaaa:bbbb:cccc:100/120",
      121,
      ["2001:db8::aaaa:bbbb:cccc:100/121", "2001:db8::aaaa:bbbb:cccc:180/121"],
      2,
    ],
  ])("allocateNext() on %s /%i hands out subnets in order", (cluster, mask, expected, max) => {
    const set = new CidrSet(parsePrefix(cluster), mask);
    expect(set.max).toBe(max);
    expect(allocations(set, expected.length)).toEqual(expected);
    expect(set.used).toBe(expected.length);
  });

  test("allocateNext() is round-robin: a released subnet is reused only after the cursor wraps", () => {
    const set = new CidrSet(parsePrefix("10.0.0.0/22"), 24);
    expect(allocations(set, 2)).toEqual(["10.0.0.0/24", "10.0.1.0/24"]);
    set.release(parsePrefix("10.0.0.0/24"));
    expect(allocations(set, 3)).toEqual(["10.0.2.0/24", "10.0.3.0/24", "10.0.0.0/24"]);
    expect(set.free).toBe(0);
    const err = errorOf(() => set.allocateNext());
    expect(err.code).toBe("exhausted");
    expect(err.message).toBe("Cannot allocate a /24 from 10.0.0.0/22: no free CIDR left");
  });

  test("occupy() marks every subnet inside a larger prefix and the subnet holding a smaller one", () => {
    const set = new CidrSet(parsePrefix("10.0.0.0/16"), 24);
    expect(set.occupy(parsePrefix("10.0.4.0/22"))).toBe(4);
    expect(set.occupy(parsePrefix("10.0.9.7/32"))).toBe(1);
    expect(set.occupy(parsePrefix("10.0.9.0/25"))).toBe(0);
    expect(set.used).toBe(5);
    expect(set.isAllocated(parsePrefix("10.0.4.0/22"))).toBe(true);
    expect(set.isAllocated(parsePrefix("10.0.9.128/25"))).toBe(true);
    expect(set.isAllocated(parsePrefix("10.0.8.0/22"))).toBe(false);
    expect(allocations(set, 5)).toEqual([
      "10.0.0.0/24",
      "10.0.1.0/24",
      "10.0.2.0/24",
      "10.0.3.0/24",
      "10.0.8.0/24",
    ]);
    expect(set.release(parsePrefix("10.0.0.0/20"))).toBe(10);
    expect(set.used).toBe(0);
  });

  test("occupy() of a prefix covering the cluster CIDR takes everything", () => {
    const set = new CidrSet(parsePrefix("10.244.0.0/16"), 24);
    expect(set.occupy(parsePrefix("10.0.0.0/8"))).toBe(256);
    expect(set.free).toBe(0);
  });

  test("occupy() and release() refuse prefixes outside the cluster CIDR", () => {
    const set = new CidrSet(parsePrefix("10.244.0.0/16"), 24);
    for (const p of ["10.245.0.0/24", "2001:db8::/64"]) {
      const err = errorOf(() => set.occupy(parsePrefix(p)));
      expect(err.code).toBe("out-of-range");
      expect(err.message).toBe(`Cannot use ${p}: it is outside cluster CIDR 10.244.0.0/16`);
    }
    expect(errorOf(() => set.releaseRange(0, 256)).code).toBe("out-of-range");
  });

  test.each([
    ["10.0.0.0/16", 15, /node mask must be within 16\.\.32/],
    ["10.0.0.0/16", 33, /node mask must be within 16\.\.32/],
    ["2001:db8::/48", 65, /at most 16 bits longer/],
    ["2001:db8::/32", 64, /at most 16 bits longer/],
  ])("new CidrSet(%s, %i) is refused", (cluster, mask, message) => {
    const err = errorOf(() => new CidrSet(parsePrefix(cluster), mask));
    expect(err.code).toBe("node-mask");
    expect(err.message).toMatch(message);
  });

  test("CidrSet fills and empties an IPv6 /64 of /80s", () => {
    const set = new CidrSet(parsePrefix("2001:db8:1:2::/64"), 80);
    const seen = new Set<string>();
    for (let i = 0; i < 65536; i++) seen.add(formatPrefix(set.allocateNext()));
    expect(seen.size).toBe(65536);
    expect(errorOf(() => set.allocateNext()).code).toBe("exhausted");
    expect(set.release(parsePrefix("2001:db8:1:2:abcd::/80"))).toBe(1);
    expect(formatPrefix(set.allocateNext())).toBe("2001:db8:1:2:abcd::/80");
  });

  test("CidrSet handles 0.0.0.0/0 of /32s without allocating per subnet", () => {
    const set = new CidrSet(parsePrefix("0.0.0.0/0"), 32);
    expect(set.max).toBe(2 ** 32);
    expect(set.occupy(parsePrefix("0.0.0.0/1"))).toBe(2 ** 31);
    expect(formatPrefix(set.allocateNext())).toBe("128.0.0.0/32");
    expect(set.release(parsePrefix("64.0.0.0/2"))).toBe(2 ** 30);
    expect(set.used).toBe(2 ** 30 + 1);
    expect(set.isAllocated(parsePrefix("0.0.0.0/2"))).toBe(true);
    expect(set.isAllocated(parsePrefix("64.0.0.0/32"))).toBe(false);
  });

  test("CidrSet reports Kubernetes' cidrset metrics", () => {
    const registry = new Registry();
    const set = new CidrSet(parsePrefix("10.0.0.0/22"), 24, { registry });
    const labels = { clusterCIDR: "10.0.0.0/22" };
    set.occupy(parsePrefix("10.0.0.0/23"));
    set.allocateNext();
    set.release(parsePrefix("10.0.1.0/24"));
    const text = registry.expose();
    expect(text).toContain(
      'node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR="10.0.0.0/22"} 3',
    );
    expect(text).toContain('node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR="10.0.0.0/22"} 1');
    expect(text).toContain('node_ipam_controller_cirdset_max_cidrs{clusterCIDR="10.0.0.0/22"} 4');
    expect(text).toContain('node_ipam_controller_cidrset_usage_cidrs{clusterCIDR="10.0.0.0/22"} 0.5');
    // The allocation skipped the two occupied subnets.
    expect(text).toContain(
      'node_ipam_controller_cidrset_allocation_tries_per_request_bucket{clusterCIDR="10.0.0.0/22",le="1"} 0',
    );
    expect(text).toContain(
      'node_ipam_controller_cidrset_allocation_tries_per_request_sum{clusterCIDR="10.0.0.0/22"} 2',
    );
    expect(
      registry
        .counter("node_ipam_controller_cidrset_cidrs_allocations_total", "", ["clusterCIDR"])
        .get(labels),
    ).toBe(3);
  });

  test("CidrSet matches a plain bitmap model over random operations across chunks", () => {
    // 10.0.0.0/14 of /32s: 262,144 subnets in four 65,536-subnet chunks.
    const clusterBits = 14;
    const max = 2 ** (32 - clusterBits);
    const op = fc.oneof(
      fc.record({ kind: fc.constant("allocate" as const) }),
      fc.record({
        kind: fc.constantFrom("occupy" as const, "release" as const),
        bits: fc.integer({ min: clusterBits, max: 32 }),
        offset: fc.integer({ min: 0, max: max - 1 }),
      }),
    );
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const set = new CidrSet(parsePrefix("10.0.0.0/14"), 32);
        const model = new Uint8Array(max);
        let next = 0;
        let used = 0;
        for (const o of ops) {
          if (o.kind === "allocate") {
            if (used === max) {
              expect(() => set.allocateNext()).toThrow(CidrError);
              continue;
            }
            let i = next;
            while (model[i]) i = (i + 1) % max;
            model[i] = 1;
            used++;
            next = (i + 1) % max;
            expect(formatPrefix(set.allocateNext())).toBe(
              `${formatIP({ family: 4, value: 0x0a000000n + BigInt(i) })}/32`,
            );
          } else {
            const size = 2 ** (32 - o.bits);
            const begin = o.offset - (o.offset % size);
            const prefix = `${formatIP({ family: 4, value: 0x0a000000n + BigInt(begin) })}/${o.bits}`;
            let changed = 0;
            for (let i = begin; i < begin + size; i++) {
              if (model[i] !== (o.kind === "occupy" ? 1 : 0)) changed++;
              model[i] = o.kind === "occupy" ? 1 : 0;
            }
            used += o.kind === "occupy" ? changed : -changed;
            expect(set[o.kind](parsePrefix(prefix))).toBe(changed);
            expect(set.isAllocated(parsePrefix(prefix))).toBe(o.kind === "occupy");
          }
          expect(set.used).toBe(used);
        }
      }),
      { numRuns: 60 },
    );
  });
});

describe("cloudSubnet()", () => {
  // Upstream's table (cloud_allocator_test.go TestAddCIDRSet) plus the band edges.
  test.each([
    ["2000::1111:aaaa:bbbb:cccc:123/56", 110, "2000:0:0:1111::/64", 80],
    ["2001:db8:1:2::5/63", 110, "2001:db8:1:2::/64", 80],
    ["2000::aaaa:bbbb:cccc:123/64", 110, "2000::/64", 80],
    ["2000::aaaa:bbbb:cccc:123/80", 110, "2000::aaaa:0:0:0/80", 96],
    ["2000::aaaa:bbbb:cccc:123/96", 110, "2000::aaaa:bbbb:0:0/96", 112],
    ["2000::aaaa:bbbb:cccc:123/99", 110, "2000::aaaa:bbbb:c000:0/99", 115],
    ["2000::aaaa:bbbb:cccc:123/100", 110, "2000::aaaa:bbbb:c000:0/100", 108],
    ["2000::aaaa:bbbb:cccc:123/105", 110, "2000::aaaa:bbbb:cc80:0/105", 113],
    ["2000::aaaa:bbbb:cccc:123/106", 110, "2000::aaaa:bbbb:ccc0:0/106", 110],
    ["2000::aaaa:bbbb:cccc:123/110", 110, "2000::aaaa:bbbb:cccc:0/110", 114],
    ["2000::aaaa:bbbb:cccc:123/112", 110, "2000::aaaa:bbbb:cccc:0/112", 114],
    ["2000::aaaa:bbbb:cccc:123/117", 110, "2000::aaaa:bbbb:cccc:0/117", 119],
    ["2000::aaaa:bbbb:cccc:123/118", 110, "2000::aaaa:bbbb:cccc:0/118", 120],
    ["2000::aaaa:bbbb:cccc:123/119", 110, "2000::aaaa:bbbb:cccc:0/119", 120],
    ["2000::aaaa:bbbb:cccc:123/120", 110, "2000::aaaa:bbbb:cccc:100/120", 121],
    ["2000::aaaa:bbbb:cccc:123/122", 30, "2000::aaaa:bbbb:cccc:100/122", 123],
    ["2000::aaaa:bbbb:cccc:123/123", 10, "2000::aaaa:bbbb:cccc:120/123", 124],
  ])("cloudSubnet(%s, maxPods %i) carves %s into /%i", (cidr, maxPods, subnet, mask) => {
    const got = cloudSubnet(parseCidr(cidr), maxPods);
    expect(formatPrefix(got.subnet)).toBe(subnet);
    expect(got.nodeMaskBits).toBe(mask);
  });

  test.each([
    ["2000::aaaa:bbbb:cccc:123/124", 110, /too small \(\/124 or longer\)/],
    ["2000::aaaa:bbbb:cccc:123/128", 110, /too small/],
    ["2000::aaaa:bbbb:cccc:123/120", 129, /a \/121 provides only 126 addresses for 129 pods/],
    ["2000::aaaa:bbbb:cccc:123/122", 33, /a \/123 provides only 30 addresses for 33 pods/],
    ["2000::aaaa:bbbb:cccc:123/122", 110, /a \/123 provides only 30 addresses for 110 pods/],
    ["10.0.0.5/24", 110, /not IPv6/],
  ])("cloudSubnet(%s, maxPods %i) refuses", (cidr, maxPods, message) => {
    const err = errorOf(() => cloudSubnet(parseCidr(cidr), maxPods));
    expect(err.code).toBe("prefix-too-small");
    expect(err.message).toMatch(/^Cannot carve pod CIDRs from /);
    expect(err.message).toMatch(message);
  });

  // The reference's table, and this project's one deviation (/120–/123 split in two, not as is).
  const goMask = (bits: number): number | undefined => {
    if (bits < 64) return 80;
    if (bits > 123) return undefined;
    if (bits > 119) return bits; // as is: one range, the node's whole subnet
    if (bits > 118) return bits + 1;
    if (bits > 111) return bits + 2;
    if (bits > 105) return bits + 4;
    if (bits > 99) return bits + 8;
    return bits + 16;
  };

  test("cloudSubnet() follows the reference's table at every prefix length 48–128, except /120–/123", () => {
    const maxPods = 1;
    fc.assert(
      fc.property(
        fc.integer({ min: 48, max: 128 }),
        fc.bigInt({ min: 1n, max: (1n << 128n) - 1n }),
        (bits, v) => {
          const ip = formatIP({ family: 6, value: v });
          const cidr = parseCidr(`${ip}/${bits}`);
          const want = goMask(bits);
          if (want === undefined) {
            expect(() => cloudSubnet(cidr, maxPods)).toThrow(/too small/);
            return;
          }
          const got = cloudSubnet(cidr, maxPods);
          expect(got.subnet.bits).toBe(Math.max(bits, 64));
          expect(prefixContains(got.subnet, cidr.ip)).toBe(true);
          // Always at least two ranges, so one of them is free of the node's own address.
          expect(got.nodeMaskBits).toBeGreaterThan(got.subnet.bits);
          expect(got.nodeMaskBits).toBe(bits >= 120 ? bits + 1 : want);
        },
      ),
      { numRuns: 2000 },
    );
    // Every length at least once, whatever the seed.
    for (let bits = 48; bits <= 128; bits++) {
      const cidr = parseCidr(`2001:db8::5/${bits}`);
      const want = goMask(bits);
      if (want === undefined) expect(() => cloudSubnet(cidr, 1)).toThrow(/too small/);
      else expect(cloudSubnet(cidr, 1).nodeMaskBits).toBe(bits >= 120 ? bits + 1 : want);
    }
  });

  test("cloudSubnet() defaults to kubelet's 110 pods", () => {
    expect(() => cloudSubnet(parseCidr("2000::123/122"))).toThrow(/30 addresses for 110 pods/);
  });
});

describe("resolveNodeIpamConfig()", () => {
  test.each([
    [{ clusterCidrs: ["10.244.0.0/16"] }, ["10.244.0.0/16"], [24], []],
    [{ clusterCidrs: ["fd00:10:244::/64"] }, ["fd00:10:244::/64"], [80], []],
    [
      {
        clusterCidrs: ["10.244.0.0/16,fd00:10:244::/64"],
        serviceCidrs: ["10.96.0.0/12,fd00:10:96::/112"],
      },
      ["10.244.0.0/16", "fd00:10:244::/64"],
      [24, 80],
      ["10.96.0.0/12", "fd00:10:96::/112"],
    ],
    [{ clusterCidrs: [" fd00::/64 , 10.0.0.0/8 "] }, ["fd00::/64", "10.0.0.0/8"], [80, 24], []],
    [{ clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSize: 26 }, ["10.0.0.0/8"], [26], []],
    [{ clusterCidrs: ["fd00::/56"], nodeCidrMaskSize: 64 }, ["fd00::/56"], [64], []],
    [{ clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSizeIpv4: 20 }, ["10.0.0.0/8"], [20], []],
    [{ clusterCidrs: ["fd00::/64"], nodeCidrMaskSizeIpv6: 72 }, ["fd00::/64"], [72], []],
    [
      { clusterCidrs: ["10.0.0.0/8,fd00::/56"], nodeCidrMaskSizeIpv4: 25, nodeCidrMaskSizeIpv6: 64 },
      ["10.0.0.0/8", "fd00::/56"],
      [25, 64],
      [],
    ],
    [
      { clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSize: 0, nodeCidrMaskSizeIpv6: 0 },
      ["10.0.0.0/8"],
      [24],
      [],
    ],
    [{ clusterCidrs: ["10.244.0.0/24"] }, ["10.244.0.0/24"], [24], []],
  ])("resolveNodeIpamConfig(%o) resolves", (flags, clusters, masks, services) => {
    const cfg = resolveNodeIpamConfig(flags);
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(clusters);
    expect(cfg.nodeMaskSizes).toEqual(masks);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(services);
  });

  test.each([
    [{ clusterCidrs: [] }, "no cluster CIDR"],
    [{ clusterCidrs: ["10.0.0.0/8,10.1.0.0/16"] }, "--cluster-cidr has two IPv4 entries"],
    [{ clusterCidrs: ["10.0.0.0/8,fd00::/64,fd01::/64"] }, "--cluster-cidr has 3 entries; at most two"],
    [{ clusterCidrs: ["10.0.0.1/8"] }, '--cluster-cidr: Cannot parse prefix "10.0.0.1/8": host bits are set'],
    [{ clusterCidrs: ["10.0.0.0/8x"] }, "--cluster-cidr: Cannot parse CIDR"],
    [
      { clusterCidrs: ["10.244.0.0/16"], nodeCidrMaskSize: 8 },
      "node mask /8 (--node-cidr-mask-size-ipv4) is shorter than cluster CIDR 10.244.0.0/16",
    ],
    [
      { clusterCidrs: ["10.244.0.0/16"], nodeCidrMaskSizeIpv4: 33 },
      "node mask /33 (--node-cidr-mask-size-ipv4) is longer than an IPv4 address",
    ],
    [
      { clusterCidrs: ["fd00::/48"], nodeCidrMaskSizeIpv6: 80 },
      "is 32 bits longer than cluster CIDR fd00::/48; at most 16 on IPv6 (use a cluster CIDR of /64 or shorter)",
    ],
    [{ clusterCidrs: ["fd00::/56"] }, "node mask /80 (--node-cidr-mask-size-ipv6) is 24 bits longer"],
    [
      { clusterCidrs: ["10.0.0.0/8,fd00::/64"], nodeCidrMaskSize: 24 },
      "--node-cidr-mask-size is not allowed with dual-stack",
    ],
    [{ clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSize: 24, nodeCidrMaskSizeIpv4: 24 }, "cannot be combined"],
    [
      { clusterCidrs: ["fd00::/64"], nodeCidrMaskSizeIpv4: 24 },
      "--node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster",
    ],
    [
      { clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSizeIpv6: 80 },
      "--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster",
    ],
    [
      { clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSize: -1 },
      "--node-cidr-mask-size=-1 is not a prefix length",
    ],
    [{ clusterCidrs: ["10.0.0.0/8"], nodeCidrMaskSizeIpv4: 24.5 }, "is not a prefix length"],
    [
      { clusterCidrs: ["10.0.0.0/8"], serviceCidrs: ["10.96.0.0/12,10.97.0.0/16"] },
      "--service-cluster-ip-range has two IPv4 entries",
    ],
    [
      { clusterCidrs: ["10.0.0.0/8"], serviceCidrs: ["10.96.0.0/12,fd00::/108,fd01::/108"] },
      "--service-cluster-ip-range has 3 entries",
    ],
  ])("resolveNodeIpamConfig(%o) refuses: %s", (flags, message) => {
    const err = errorOf(() => resolveNodeIpamConfig(flags));
    expect(err.code).toBe("config");
    expect(err.message).toStartWith("Cannot configure node IPAM: ");
    expect(err.message).toContain(message);
  });

  test("resolveNodeIpamConfig() keeps the parse error as cause", () => {
    const err = errorOf(() => resolveNodeIpamConfig({ clusterCidrs: ["10.0.0.1/8"] }));
    expect((err.cause as CidrError).code).toBe("host-bits");
  });
});
