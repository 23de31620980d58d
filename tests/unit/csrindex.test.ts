// The per-decision indexes of what Talos says of a machine (lib/csrindex.ts) answer exactly what the
// scans they replace answer (entryHolding() and subnetEdgeOf() of lib/sharedaddresses.ts), on
// generated lists mixing every spelling the scans read; and the per-peer bounds of a CSR decision:
// csr_sans SANs (denied before any fact, counted for the peer), and Talos facts over their bounds.

import { beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { formatIP, parseIP } from "../../lib/cidr.ts";
import {
  checkCsr,
  csrMetrics,
  type Decision,
  decide,
  type NodeInput,
  type TalosFacts,
} from "../../lib/csr.ts";
import { EntryIndex, SubnetEdges } from "../../lib/csrindex.ts";
import { Registry } from "../../lib/metrics.ts";
import { OVER_LIMIT_REASON, overLimitMessage, PEER_LIMITS } from "../../lib/peerlimits.ts";
import { entryHolding, subnetEdgeOf } from "../../lib/sharedaddresses.ts";
import { CsrSanLimitError, parseCertificateRequest } from "../../lib/x509pkcs10.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import { createCSR } from "../support/pki.ts";

/** Entries as Talos may write them: CIDRs, bare IPs, IPv4-mapped forms, sloppy spellings, junk. */
const ENTRY = fc.oneof(
  fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 32 }))
    .map(([b, c, bits]) => `10.${b}.${c}.0/${bits}`),
  fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 255 }))
    .map(([b, d]) => `10.${b}.0.${d}`),
  fc.integer({ min: 0, max: 255 }).map((d) => ` 10.0.0.${d} `),
  fc.integer({ min: 96, max: 128 }).map((bits) => `::ffff:10.0.0.0/${bits}`),
  fc.integer({ min: 0, max: 255 }).map((d) => `::ffff:10.0.0.${d}`),
  fc.integer({ min: 0, max: 128 }).map((bits) => `fd00::/${bits}`),
  fc.constantFrom(
    "010.0.0.8/29",
    "0xa.0.0.0/30",
    "167772161",
    "10.1/16",
    "junk",
    "10.0.0.0/33",
    "",
    "fd00::5",
  ),
);
/** Addresses a SAN may be, near the entries. */
const ADDRESS = fc.oneof(
  fc
    .tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 }))
    .map(([b, c, d]) => parseIP(`10.${b}.${c}.${d}`)),
  fc.integer({ min: 0, max: 255 }).map((d) => parseIP(`::ffff:10.0.0.${d}`)),
  fc.integer({ min: 0, max: 15 }).map((h) => parseIP(`fd00::${h.toString(16)}`)),
);

describe("EntryIndex and SubnetEdges", () => {
  test("EntryIndex.holding() is entryHolding() for every address and list", () => {
    fc.assert(
      fc.property(
        fc.array(ENTRY, { maxLength: 24 }),
        fc.array(ADDRESS, { maxLength: 16 }),
        (entries, ips) => {
          const index = new EntryIndex(entries);
          for (const ip of ips) {
            expect({ ip: formatIP(ip), got: index.holding(ip) }).toEqual({
              ip: formatIP(ip),
              got: entryHolding(ip, entries),
            });
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  test("SubnetEdges.of() is subnetEdgeOf() for every address and list", () => {
    fc.assert(
      fc.property(
        fc.array(ENTRY, { maxLength: 24 }),
        fc.array(ADDRESS, { maxLength: 16 }),
        (addresses, ips) => {
          const edges = new SubnetEdges(addresses);
          for (const ip of ips) {
            expect({ ip: formatIP(ip), got: edges.of(ip) }).toEqual({
              ip: formatIP(ip),
              got: subnetEdgeOf(ip, addresses),
            });
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  test("EntryIndex names the first entry in the list's order that holds the address", () => {
    const index = new EntryIndex(["10.0.0.0/8", "10.0.0.0/24", " 10.0.0.5 "]);
    expect(index.holding(parseIP("10.0.0.5"))).toBe("10.0.0.0/8");
    expect(new EntryIndex([" 10.0.0.5 ", "10.0.0.0/8"]).holding(parseIP("10.0.0.5"))).toBe("10.0.0.5");
    expect(index.holding(parseIP("11.0.0.1"))).toBeUndefined();
  });

  test("SubnetEdges knows IPv4 subnets up to /30 only, IPv4-mapped ones as IPv4", () => {
    const edges = new SubnetEdges(["10.0.0.5/24", "192.168.7.1/31", "2001:db8::5/64", "::ffff:10.1.0.7/120"]);
    expect(edges.of(parseIP("10.0.0.255"))).toBe("10.0.0.0/24");
    expect(edges.of(parseIP("::ffff:10.0.0.0"))).toBe("10.0.0.0/24");
    expect(edges.of(parseIP("10.1.0.255"))).toBe("10.1.0.0/24");
    expect(edges.of(parseIP("192.168.7.0"))).toBeUndefined();
    expect(edges.of(parseIP("2001:db8::"))).toBeUndefined();
  });
});

describe("decide(): per-peer bounds", () => {
  const node = (ips: string[]): NodeInput => ({
    name: "worker-a",
    addresses: ips.map((address) => ({ type: "InternalIP", address })),
  });
  const facts = (addresses: string[], excludedSubnets: string[] = []): TalosFacts => ({
    nodeIP: "10.1.0.5",
    nodename: "worker-a",
    addresses,
    dnsNames: [],
    sharedAddresses: new Map(),
    excludedSubnets,
  });
  const ips = (n: number) => Array.from({ length: n }, (_, i) => `10.${1 + (i >> 8)}.${i & 255}.5`);
  let atBound: string;
  let overBound: string;
  let single: string;
  beforeAll(async () => {
    const csr = (n: number) => createCSR({ cn: USER_A, o: ["system:nodes"], dns: ["worker-a"], ips: ips(n) });
    atBound = (await csr(PEER_LIMITS.csr_sans.value - 1)).csr;
    overBound = (await csr(PEER_LIMITS.csr_sans.value)).csr;
    single = (await csr(1)).csr;
  });

  test("a CSR with csr_sans SANs is decided; one more is denied before the Node or Talos is read", () => {
    const n = PEER_LIMITS.csr_sans.value;
    const own = ips(n);
    const talos = facts(own.map((ip) => `${ip}/24`));
    expect(decide(servingCsr(b64(atBound)), node(own), talos).action).toBe("approve");
    const over = checkCsr(servingCsr(b64(overBound)));
    expect(over).toEqual({
      action: "deny",
      reason: OVER_LIMIT_REASON,
      message: overLimitMessage("csr_sans", n + 1),
      limit: "csr_sans",
    });
    // Before the Node: no Node at all still gives the denial, not a wait.
    expect(decide(servingCsr(b64(overBound)), undefined)).toEqual(over as Decision);
    expect((over as { message: string }).message).toContain("The CSR has 257 subject alternative names");
  });

  test("the SANs are counted before any is decoded and before the signature: a padded request with a bad signature is over the limit", async () => {
    const n = PEER_LIMITS.csr_sans.value;
    const { csr: badSig } = await createCSR({
      cn: USER_A,
      o: ["system:nodes"],
      dns: ["worker-a"],
      ips: ips(n),
      wrongSignature: true,
    });
    expect(checkCsr(servingCsr(b64(badSig)))).toMatchObject({ reason: OVER_LIMIT_REASON, limit: "csr_sans" });
    let thrown: unknown;
    try {
      parseCertificateRequest(overBound, { maxSans: n });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(CsrSanLimitError);
    expect((thrown as CsrSanLimitError).count).toBe(n + 1);
    // Without a limit the same request parses whole.
    expect(parseCertificateRequest(overBound).ipAddresses).toHaveLength(n);
  });

  test("the denial counts in talosccm_peer_input_rejected_total{peer=csr,limit=csr_sans}", () => {
    const reg = new Registry();
    const m = csrMetrics(reg);
    m.record(checkCsr(servingCsr(b64(overBound))) as never);
    const text = reg.expose();
    expect(text).toContain('talosccm_peer_input_rejected_total{peer="csr",limit="csr_sans"} 1');
    expect(text).toContain('talosccm_csr_denied_total{reason="PeerInputOverLimit"} 1');
  });

  test("Talos facts over talos_addresses or talos_list_entries deny, fail closed, without a scan", () => {
    const own = ips(1);
    const small = servingCsr(b64(single));
    const host = `${own[0]}/24`;
    const many = Array.from(
      { length: PEER_LIMITS.talos_addresses.value + 1 },
      (_, i) => `172.16.${i >> 8}.${i & 255}/24`,
    );
    expect(decide(small, node(own), facts([host, ...many]))).toMatchObject({
      reason: OVER_LIMIT_REASON,
      limit: "talos_addresses",
    });
    const subnets = Array.from(
      { length: PEER_LIMITS.talos_list_entries.value + 1 },
      (_, i) => `192.168.${i & 255}.${i >> 8}`,
    );
    expect(decide(small, node(own), facts([host], subnets))).toMatchObject({
      reason: OVER_LIMIT_REASON,
      limit: "talos_list_entries",
    });
    expect(decide(small, node(own), facts([host])).action).toBe("approve");
  });
});
