// A SAN is judged by what it means, not how it is spelled (README "CSR security model"): for every
// address of a generated set (IPv4 and IPv6, edge values included), every spelling of
// tests/support/ipspellings.ts — inet_aton's decimal, octal, hex and short forms, leading zeros,
// IPv4-mapped and embedding IPv6 forms, with a port, zone, brackets, prefix length or spaces — is
// CLAIMED when another Node writes it (in any address field, its provided-node-ip annotation or its
// name), and DENIED ALIKE when the requester asks for it (as the DNS or IP SAN it can be), in CSR-only
// mode and with Talos. Each run first checks that the same request is approved without the other
// Node's spelling, so the denials are the spelling's doing. fast-check's fixed seed drives the PRNG.

import { describe, expect, test } from "bun:test";
import { GeneralName } from "@peculiar/asn1-x509";
import fc from "fast-check";
import { formatIP, type IPAddress, tryParseIP, unmapIPv4 } from "../../lib/cidr.ts";
import {
  type CheckedCsr,
  type CsrInput,
  checkCsr,
  claims,
  type Decision,
  decide,
  MAX_LENIENT_CLAIMS,
  type NodeInput,
  requestedClaims,
  screen,
  type TalosFacts,
} from "../../lib/csr.ts";
import { NodeClaimIndex } from "../../lib/csrclaims.ts";
import { isDNS1123Subdomain } from "../../lib/kubevalidation.ts";
import { canonicalDNS, specialIP } from "../../lib/sharedaddresses.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import {
  Rng,
  type Spelling,
  spellV4,
  spellV6,
  structuredV6,
  V4_EDGES,
  V6_EDGES,
} from "../support/ipspellings.ts";
import { createRawCSR, sanExtension } from "../support/pki.ts";

const CN = "2.5.4.3";
const O = "2.5.4.10";

/** An address as the SAN library writes it: dotted quad, or eight IPv6 groups (16 bytes, even IPv4-mapped). */
function sanText(ip: IPAddress): string {
  if (ip.family === 4) return formatIP(ip);
  return Array.from({ length: 8 }, (_, i) =>
    ((ip.value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16),
  ).join(":");
}

/** A signed request of worker-a for `dns` and `ips` (P-256, made synchronously). */
function request(dns: string[], ips: IPAddress[]): CsrInput {
  const names = [
    ...dns.map((dNSName) => new GeneralName({ dNSName })),
    ...ips.map((ip) => new GeneralName({ iPAddress: sanText(ip) })),
  ];
  const pem = createRawCSR({
    subject: [[[CN, USER_A]], [[O, "system:nodes"]]],
    extensionRequests: [[sanExtension(names)]],
  });
  return servingCsr(b64(pem));
}

/** Talos on worker-a's machine, reporting `ips` on its own link and knowing `dns`. */
function talosOf(ips: IPAddress[], dns: string[] = []): TalosFacts {
  return {
    nodeIP: "192.0.2.10",
    nodename: "worker-a",
    addresses: ["192.0.2.10/24", ...ips.map((ip) => `${formatIP(ip)}/${ip.family === 4 ? 32 : 128}`)],
    dnsNames: dns,
    sharedAddresses: new Map(),
    excludedSubnets: [],
  };
}

/** Where another Node may write a spelling. */
const FIELDS = [
  "InternalIP",
  "ExternalIP",
  "Hostname",
  "InternalDNS",
  "ExternalDNS",
  "provided",
  "name",
] as const;

/** Node worker-b (or a Node named `text`) holding `text` in `field`. */
function otherWriting(text: string, field: (typeof FIELDS)[number]): NodeInput {
  const validName = isDNS1123Subdomain(text).length === 0;
  if (field === "name" && validName) return { name: text, addresses: [] };
  if (field === "provided") return { name: "worker-b", addresses: [], providedNodeIP: `${text},fd00::b` };
  const type = field === "name" ? "InternalIP" : field;
  return { name: "worker-b", addresses: [{ type, address: text }] };
}

const v4Address = fc
  .oneof(fc.constantFrom(...V4_EDGES), fc.integer({ min: 0, max: 0xffffffff }))
  .map((v) => ({
    ip: { family: 4, value: BigInt(v) } as IPAddress,
    spell: (r: Rng, n: number) => spellV4(v, r, n),
  }));
const v6Address = fc
  .oneof(
    fc.constantFrom(...V6_EDGES),
    fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }),
    fc.integer().map((seed) => structuredV6(new Rng(seed))),
  )
  .map((value) => ({
    ip: { family: 6, value } as IPAddress,
    spell: (r: Rng, n: number) => spellV6(value, r, n),
  }));
const address = fc.oneof(v4Address, v6Address);

/** Both modes' decisions, and screen() agreeing with them where it decides. */
function bothModes(
  csr: CsrInput | CheckedCsr,
  node: NodeInput,
  talos: TalosFacts,
  others: NodeInput[],
): Decision[] {
  const csrOnly = decide(csr, node, undefined, others);
  const withTalos = decide(csr, node, talos, others);
  const s = screen(csr, node, others);
  if (s.action !== "confirm") expect(withTalos).toEqual(s);
  return [csrOnly, withTalos];
}

describe("an address is claimed and denied alike, however it is spelled", () => {
  test("an address another Node writes in any spelling and any field is its claim: asking for the address is denied in both modes", () => {
    let decided = 0;
    fc.assert(
      fc.property(address, fc.integer(), ({ ip, spell }, seed) => {
        const r = new Rng(seed);
        const x = unmapIPv4(ip);
        const xText = formatIP(x);
        const checked = checkCsr(request(["worker-a"], [x]));
        const spellings = spell(r, 12).map((s) => ({ s, other: otherWriting(s.text, r.pick(FIELDS)) }));
        for (const { s, other } of spellings) {
          const why = `${JSON.stringify(s.text)} (${s.form}) of ${xText} written by ${JSON.stringify(other)}`;
          expect([...claims(other, "other").ips], why).toContain(xText);
        }
        if ("action" in checked) {
          // No machine may have x (loopback, reserved, an embedding form…): denied whoever claims it.
          expect(checked).toMatchObject({ action: "deny", reason: "NonUniqueIP" });
          expect(specialIP(x)).toBeString();
          return;
        }
        const node: NodeInput = { name: "worker-a", addresses: [{ type: "InternalIP", address: xText }] };
        const talos = talosOf([x]);
        // Without the other Node's spelling the request is approved.
        const unrelated: NodeInput = {
          name: "worker-b",
          addresses: [{ type: "InternalIP", address: "198.51.100.77" }],
        };
        for (const d of bothModes(checked, node, talos, xText === "198.51.100.77" ? [] : [unrelated])) {
          expect(d.action, xText).toBe("approve");
        }
        for (const { s, other } of spellings) {
          const why = `${JSON.stringify(s.text)} (${s.form}) of ${xText} written by ${JSON.stringify(other)}`;
          // The controller's index finds that Node from the request alone.
          const index = new NodeClaimIndex((n) => n === other.name);
          index.set(other);
          expect(index.claimants(requestedClaims(checked), "worker-a"), why).toEqual([other.name]);
          for (const d of bothModes(checked, node, talos, [other])) {
            expect(d, why).toMatchObject({ action: "deny", reason: "IPOfOtherNode" });
            if (d.action === "deny") {
              expect(d.message, why).toContain(
                `${JSON.stringify(xText)} (node ${JSON.stringify(other.name)})`,
              );
            }
          }
        }
        decided++;
      }),
      { numRuns: 300, includeErrorInReport: true },
    );
    // Edge values are often no machine's (loopback, broadcast…); the others went through decide().
    expect(decided).toBeGreaterThan(120);
  });

  test("a spelling of another Node's address asked for as a SAN is denied in both modes, whatever the requester's own status says", () => {
    const seen = { dns: 0, ip: 0, invalid: 0 };
    fc.assert(
      fc.property(address, fc.integer(), ({ ip, spell }, seed) => {
        const r = new Rng(seed);
        const x = unmapIPv4(ip);
        const xText = formatIP(x);
        const owner: NodeInput = { name: "worker-b", addresses: [{ type: "InternalIP", address: xText }] };
        for (const s of spell(r, 6)) expectDenied(s, x, owner, seen);
      }),
      { numRuns: 300, includeErrorInReport: true },
    );
    // Each kind of SAN was tried often enough to mean something.
    expect(Math.min(seen.dns, seen.ip, seen.invalid)).toBeGreaterThan(100);
  });
});

/**
 * Asks for spelling `s` of `x` as worker-a, which writes `s` in its own status (and Talos knows it):
 * a DNS-valid spelling as a DNS SAN is ForbiddenSAN, an IP literal as an IP SAN is NonUniqueIP (an
 * embedding form, or no machine's) or IPOfOtherNode (x is `owner`'s), and anything else as a DNS SAN
 * is no valid DNS name.
 */
function expectDenied(
  s: Spelling,
  x: IPAddress,
  owner: NodeInput,
  seen: Record<"dns" | "ip" | "invalid", number>,
) {
  const why = `${JSON.stringify(s.text)} (${s.form}) of ${formatIP(x)}`;
  const literal = tryParseIP(s.text);
  const valid = isDNS1123Subdomain(canonicalDNS(s.text)).length === 0;
  const node: NodeInput = {
    name: "worker-a",
    addresses: [
      { type: "InternalIP", address: s.text },
      { type: "Hostname", address: s.text },
      { type: "InternalDNS", address: s.text },
    ],
  };
  if (literal) {
    seen.ip++;
    const asked = unmapIPv4(literal);
    const csr = request(["worker-a"], [literal]);
    const reason = specialIP(asked) ? "NonUniqueIP" : "IPOfOtherNode";
    expect(s.embedding || formatIP(asked) === formatIP(x), why).toBe(true);
    for (const d of bothModes(csr, node, talosOf([asked]), [owner])) {
      expect(d, why).toMatchObject({ action: "deny", reason });
      if (d.action === "deny") expect(d.message, why).toContain(formatIP(asked));
    }
    return;
  }
  seen[valid ? "dns" : "invalid"]++;
  const csr = request(["worker-a", s.text], []);
  const says = valid ? "" : "is not a valid DNS name";
  for (const d of bothModes(csr, node, talosOf([], [s.text]), [owner])) {
    expect(d, why).toMatchObject({ action: "deny", reason: "ForbiddenSAN" });
    if (d.action === "deny") {
      const quoted = JSON.stringify(s.text.length > 64 ? `${s.text.slice(0, 64)}…` : s.text);
      expect(d.message, why).toContain(`DNS SAN ${quoted} ${says}`);
    }
  }
}

describe("a Node listing more addresses than any machine has", () => {
  const sloppy = (i: number) => `10.1.${Math.floor(i / 250)}.0${(i % 250) + 1}`; // a leading zero: two readings
  const node = (addresses: string[], providedNodeIP = ""): NodeInput => ({
    name: "worker-b",
    addresses: addresses.map((address) => ({ type: "InternalIP", address })),
    providedNodeIP,
  });

  test(`the first ${MAX_LENIENT_CLAIMS} addresses and provided node IPs are read in every spelling, the rest as plain literals only`, () => {
    const addresses = Array.from({ length: 20_000 }, (_, i) => sloppy(i));
    addresses.push("10.9.0.7", "64:ff9b::a09:8", "10.9.0.9:10250");
    const c = claims(node(addresses, "010.9.0.10"), "other");
    // Within the bound: both readings of 10.1.0.01 (decimal 1 and octal 1) and of 10.1.0.010.
    expect(c.ips).toContain("10.1.0.1");
    expect(c.ips).toContain(`10.1.0.${MAX_LENIENT_CLAIMS}`);
    expect(c.ips).toContain("10.1.0.8"); // 10.1.0.010 read as octal
    // Past it: a sloppy spelling claims nothing, a plain literal (and the IPv4 it embeds) still does.
    expect(c.ips).not.toContain(`10.1.0.${MAX_LENIENT_CLAIMS + 2}`);
    expect(c.ips).toContain("10.9.0.7");
    expect(c.ips).toContain("10.9.0.8");
    expect(c.ips).not.toContain("10.9.0.9");
    expect(c.ips).not.toContain("10.9.0.10");
    expect(c.ips).not.toContain("8.9.0.10");
    // The same spellings from a Node within the bound are claims.
    const few = claims(node(["10.9.0.9:10250"], "010.9.0.10"), "other");
    expect([...few.ips].sort()).toEqual(["10.9.0.10", "8.9.0.10", "10.9.0.9"].sort()); // 010 as decimal and octal
  });
});
