// Properties of the CSR policy over generated input: decide() is total (never throws), nothing
// malformed is approved, a request is approved exactly when every SAN it asks for is owned,
// screen() (what the controller asks before calling Talos) never contradicts decide(), conclude()
// on what screen() let through is decide()'s answer without reading a Node again, and the request
// parser reads what an independent X.509 library reads.

// @peculiar/x509 (the independent reader of a property below) needs the Reflect polyfill first.
import "reflect-metadata";
import { beforeAll, describe, expect, test } from "bun:test";
import * as x509 from "@peculiar/x509";
import fc from "fast-check";
import { canonicalIP } from "../../lib/cidr.ts";
import {
  type CsrInput,
  checkCsr,
  claims,
  conclude,
  type Decision,
  decide,
  type NodeInput,
  requestedClaims,
  type ServiceNameView,
  screen,
  type TalosFacts,
} from "../../lib/csr.ts";
import { NO_NETWORKS } from "../../lib/sharedaddresses.ts";
import { CsrParseError, parseCertificateRequest } from "../../lib/x509pkcs10.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import { createCSR, derToPem, pemToDer } from "../support/pki.ts";

const nodeA: NodeInput = {
  name: "worker-a",
  addresses: [
    { type: "InternalIP", address: "10.0.0.1" },
    { type: "ExternalIP", address: "2001:db8::a" },
    { type: "InternalIP", address: "10.0.0.99" },
    { type: "InternalDNS", address: "worker-a.example.com" },
  ],
};
const talosA: TalosFacts = {
  nodeIP: "10.0.0.1",
  nodename: "worker-a",
  addresses: ["10.0.0.1/24", "2001:db8::a/64"],
  dnsNames: ["worker-a.example.com"],
  sharedAddresses: new Map(),
  excludedSubnets: [],
};

/** Every SAN the generator may ask for, with whether node A owns it (by Node status / by Talos). */
const DNS_POOL: Array<[string, boolean]> = [
  ["worker-a", true],
  ["WORKER-A", true],
  ["worker-a.example.com", true],
  ["worker-b", false],
  ["worker-b.example.com", false],
  // One trailing dot is removed before names compare, as Go's verifier does: the node's own name.
  ["worker-a.", true],
  ["Worker-B.", false],
  ["localhost", false],
  ["*.example.com", false],
  ["*", false],
  ["kubernetes", false],
  ["kubernetes.default.svc", false],
  ["", false],
];
const IP_POOL: Array<[string, { node: boolean; talos: boolean }]> = [
  ["10.0.0.1", { node: true, talos: true }],
  ["::ffff:a00:1", { node: true, talos: true }],
  ["2001:db8::a", { node: true, talos: true }],
  ["2001:DB8:0:0:0:0:0:A", { node: true, talos: true }],
  ["10.0.0.99", { node: true, talos: false }],
  ["10.0.0.2", { node: false, talos: false }],
  ["2001:db8::b", { node: false, talos: false }],
  ["::a00:1", { node: false, talos: false }],
  ["0.0.0.0", { node: false, talos: false }],
  ["127.0.0.1", { node: false, talos: false }],
];

/** Runs decide() and fails the property if it throws. */
function total(
  csr: CsrInput,
  node: NodeInput | undefined,
  talos?: TalosFacts,
  others: NodeInput[] = [],
): Decision {
  let d: Decision | undefined;
  expect(() => {
    d = decide(csr, node, talos, others);
  }).not.toThrow();
  return d as Decision;
}

describe("decide() over generated input", () => {
  let honest: Uint8Array;
  beforeAll(async () => {
    const { csr } = await createCSR({
      cn: USER_A,
      o: ["system:nodes"],
      dns: ["worker-a"],
      ips: ["10.0.0.1"],
    });
    honest = pemToDer(csr);
    expect(decide(servingCsr(b64(csr)), nodeA, talosA).action).toBe("approve");
  });

  test("decide() never throws nor approves random bytes, as PEM body or as the raw request", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), fc.boolean(), (bytes, wrap) => {
        const d = total(servingCsr(b64(wrap ? derToPem(bytes) : bytes)), nodeA, talosA);
        expect(d).toMatchObject({ action: "deny", reason: "InvalidRequest" });
      }),
      { numRuns: 500 },
    );
  });

  test("decide() never throws on arbitrary strings in any field", () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 300 }),
        fc.string({ maxLength: 40 }),
        fc.array(fc.string({ maxLength: 20 }), { maxLength: 4 }),
        (request, username, usages) => {
          const d = total(servingCsr(request, { username, usages }), nodeA, talosA);
          expect(d.action).toBe("deny");
        },
      ),
      { numRuns: 500 },
    );
  });

  test("decide() approves a mutated request only when it still proves possession and names owned SANs", () => {
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant("set" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
      fc.record({
        kind: fc.constant("insert" as const),
        at: fc.nat(),
        byte: fc.integer({ min: 0, max: 255 }),
      }),
      fc.record({ kind: fc.constant("delete" as const), at: fc.nat(), byte: fc.constant(0) }),
      fc.record({ kind: fc.constant("truncate" as const), at: fc.nat(), byte: fc.constant(0) }),
    );
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (mutations) => {
        let der = Array.from(honest);
        for (const m of mutations) {
          const at = m.at % (der.length + 1);
          if (m.kind === "set" && at < der.length) der[at] = m.byte;
          if (m.kind === "insert") der.splice(at, 0, m.byte);
          if (m.kind === "delete") der.splice(at, 1);
          if (m.kind === "truncate") der = der.slice(0, at);
        }
        const pem = derToPem(new Uint8Array(der));
        const d = total(servingCsr(b64(pem)), nodeA, talosA);
        expect(d.action === "approve" || d.action === "deny").toBe(true);
        if (d.action === "approve") {
          const parsed = parseCertificateRequest(pem);
          expect(parsed.signature.valid).toBe(true);
          expect(parsed.commonNames).toEqual([USER_A]);
          expect(parsed.dnsNames.every((n) => n.toLowerCase() === "worker-a")).toBe(true);
          expect(parsed.ipAddresses.every((ip) => ip === "10.0.0.1")).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });

  test("decide() approves no single-byte change of an honest request", () => {
    fc.assert(
      fc.property(fc.nat(), fc.integer({ min: 1, max: 255 }), (at, delta) => {
        const der = Uint8Array.from(honest);
        const i = at % der.length;
        der[i] = ((der[i] as number) + delta) % 256;
        const d = total(servingCsr(b64(derToPem(der))), nodeA, talosA);
        expect(d.action).toBe("deny");
      }),
      { numRuns: 1500 },
    );
  });

  test("decide() approves exactly the requests whose SANs are all owned", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.constantFrom(...DNS_POOL), { maxLength: 4, selector: ([n]) => n }),
        fc.uniqueArray(fc.constantFrom(...IP_POOL), { maxLength: 4, selector: ([n]) => n }),
        fc.boolean(),
        async (dns, ips, withTalos) => {
          const { csr } = await createCSR({
            cn: USER_A,
            o: ["system:nodes"],
            dns: dns.map(([n]) => n),
            ips: ips.map(([n]) => n),
          });
          const d = total(servingCsr(b64(csr)), nodeA, withTalos ? talosA : undefined);
          const owned =
            dns.every(([, ok]) => ok) && ips.every(([, ok]) => ok.node && (!withTalos || ok.talos));
          const wanted = dns.length + ips.length > 0 && owned;
          expect(d.action).toBe(wanted ? "approve" : "deny");
        },
      ),
      { numRuns: 150 },
    );
  });

  test("decide() never approves for a node other than the requester's", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("worker-b", "worker-a2", "worker"), async (other) => {
        const { csr } = await createCSR({ cn: `system:node:${other}`, o: ["system:nodes"], dns: [other] });
        const nodeOther: NodeInput = { name: other, addresses: [] };
        // The requester is A; whichever Node the controller passes, B's name is never approved.
        expect(total(servingCsr(b64(csr)), nodeA, talosA).action).toBe("deny");
        expect(total(servingCsr(b64(csr)), nodeOther, talosA).action).toBe("deny");
      }),
      { numRuns: 10 },
    );
  });
});

describe("screen() and decide() with other Nodes and Talos facts over generated input", () => {
  const NAMES = ["worker-a", "worker-a.example.com", "worker-b", "worker-b.example.com", "api.example.com"];
  const IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.99", "2001:db8::a"];
  const otherNode = fc.record({
    name: fc.constantFrom("worker-b", "worker-c"),
    dns: fc.subarray(NAMES),
    ips: fc.subarray(IPS),
  });
  const talosFacts = fc.record({
    nodename: fc.constantFrom("worker-a", "worker-b"),
    addresses: fc.subarray(IPS.map((ip) => `${ip}/${ip.includes(":") ? 64 : 24}`)),
    dnsNames: fc.subarray(NAMES),
  });

  test("screen()'s answer is decide()'s with any Talos facts, and decide() approves only what every witness confirms", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.subarray(NAMES),
        fc.subarray(IPS),
        fc.subarray(NAMES),
        fc.subarray(IPS),
        fc.array(otherNode, { maxLength: 2 }),
        talosFacts,
        async (dns, ips, statusDNS, statusIPs, otherSpecs, t) => {
          const { csr } = await createCSR({ cn: USER_A, o: ["system:nodes"], dns, ips });
          const node: NodeInput = {
            name: "worker-a",
            addresses: [
              ...statusDNS.map((address) => ({ type: "InternalDNS", address })),
              ...statusIPs.map((address) => ({ type: "InternalIP", address })),
            ],
          };
          const others: NodeInput[] = otherSpecs.map((o) => ({
            name: o.name,
            addresses: [
              ...o.dns.map((address) => ({ type: "Hostname", address })),
              ...o.ips.map((address) => ({ type: "ExternalIP", address })),
            ],
          }));
          const facts: TalosFacts = {
            nodeIP: "10.0.0.1",
            sharedAddresses: new Map(),
            excludedSubnets: [],
            ...t,
          };
          const csrIn = servingCsr(b64(csr));
          const s = screen(csrIn, node, others);
          const withTalos = total(csrIn, node, facts, others);
          const csrOnly = total(csrIn, node, undefined, others);
          const extra = dns.filter((d) => d !== "worker-a");
          const otherDNS = new Set(others.flatMap((o) => [o.name, ...o.addresses.map((a) => a.address)]));
          const otherIPs = new Set(others.flatMap((o) => o.addresses.map((a) => a.address)));
          const ownedByNode =
            dns.length + ips.length > 0 &&
            extra.every((d) => statusDNS.includes(d) && !otherDNS.has(d)) &&
            ips.every((ip) => statusIPs.includes(ip) && !otherIPs.has(ip));
          if (s.action === "confirm") {
            expect(ownedByNode).toBe(true);
            expect(s.dnsNames).toEqual(extra);
            expect(s.ipAddresses).toEqual(ips);
            const confirmed =
              t.nodename === "worker-a" &&
              ips.every((ip) => t.addresses.some((a) => a.startsWith(`${ip}/`))) &&
              extra.every((d) => t.dnsNames.includes(d));
            expect(withTalos.action).toBe(confirmed ? "approve" : "deny");
            // The same rules in both modes: CSR-only approves what passed every Node check.
            expect(csrOnly.action).toBe("approve");
          } else {
            expect(ownedByNode).toBe(false);
            expect(withTalos).toEqual(s);
            expect(csrOnly).toEqual(s);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  test("checkCsr() with the other Nodes that claim one of requestedClaims() gives screen()'s and decide()'s answers for the raw request and every Node", async () => {
    const POOL = [...NAMES, "WORKER-B", "worker-c", "*.example.com"];
    const POOL_IPS = [...IPS, "::ffff:a00:2", "10.0.0.3"];
    const other = fc.record({
      name: fc.constantFrom("worker-b", "worker-c", "worker-d", "worker-a"),
      dns: fc.subarray(POOL),
      ips: fc.subarray(POOL_IPS),
      provided: fc.option(fc.constantFrom("10.0.0.2", "10.0.0.1,2001:db8::a"), { nil: undefined }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.subarray(POOL),
        fc.subarray(POOL_IPS),
        fc.array(other, { maxLength: 4 }),
        talosFacts,
        async (dns, ips, otherSpecs, t) => {
          const { csr } = await createCSR({ cn: USER_A, o: ["system:nodes"], dns, ips });
          const node: NodeInput = {
            name: "worker-a",
            addresses: [
              ...POOL.map((address) => ({ type: "InternalDNS", address })),
              ...POOL_IPS.map((address) => ({ type: "InternalIP", address })),
            ],
          };
          const others: NodeInput[] = otherSpecs.map((o) => ({
            name: o.name,
            addresses: [
              ...o.dns.map((address) => ({ type: "ExternalDNS", address })),
              ...o.ips.map((address) => ({ type: "InternalIP", address })),
            ],
            ...(o.provided === undefined ? {} : { providedNodeIP: o.provided }),
          }));
          const facts: TalosFacts = {
            nodeIP: "10.0.0.1",
            sharedAddresses: new Map(),
            excludedSubnets: [],
            ...t,
          };
          const raw = servingCsr(b64(csr));
          const checked = checkCsr(raw);
          if ("action" in checked) {
            expect(total(raw, node, facts, others)).toEqual(checked);
            return;
          }
          const wanted = requestedClaims(checked);
          const sharing = others.filter((o) => {
            const c = claims(o, "other");
            return [...wanted.dns].some((d) => c.dns.has(d)) || [...wanted.ips].some((ip) => c.ips.has(ip));
          });
          expect(screen(checked, node, sharing)).toEqual(screen(raw, node, others));
          for (const f of [facts, undefined]) {
            expect(decide(checked, node, f, sharing)).toEqual(total(raw, node, f, others));
          }
        },
      ),
      { numRuns: 100 },
    );
  });

  test("conclude() on what screen() let through is decide()'s answer in both modes, and reads no Node: Nodes that change after screen() change nothing", async () => {
    const nodeClaiming = (name: string, dns: string[], ips: string[]): NodeInput => ({
      name,
      addresses: [
        ...dns.map((address) => ({ type: "InternalDNS", address })),
        ...ips.map((address) => ({ type: "InternalIP", address })),
      ],
    });
    let concluded = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.subarray(NAMES),
        fc.subarray(IPS),
        fc.array(otherNode, { maxLength: 2 }),
        talosFacts,
        fc.constantFrom(undefined, ...NAMES),
        async (dns, ips, otherSpecs, t, reached) => {
          const { csr } = await createCSR({ cn: USER_A, o: ["system:nodes"], dns, ips });
          const raw = servingCsr(b64(csr));
          // The Node has every name and IP: the other Nodes decide what passes screen().
          const node = nodeClaiming("worker-a", NAMES, IPS);
          let others = otherSpecs.map((o) => nodeClaiming(o.name, o.dns, o.ips));
          const facts: TalosFacts = { ...talosA, ...t };
          const services: ServiceNameView = {
            reach: (n) => (n === reached ? "resolves to Service x/x" : undefined),
          };
          const want = [
            decide(raw, node, facts, others),
            decide(raw, node, undefined, others, NO_NETWORKS, services),
          ];
          // Every read of the Nodes but of the requester's name is counted; they change once screen()
          // has answered.
          let reads = 0;
          const live: Iterable<NodeInput> = {
            *[Symbol.iterator]() {
              reads++;
              yield* others;
            },
          };
          const watched = new Proxy(structuredClone(node), {
            get(target, key) {
              if (key !== "name") reads++;
              return Reflect.get(target, key);
            },
          });
          const s = screen(raw, watched, live);
          if (s.action !== "confirm") return;
          concluded++;
          const screenedReads = reads;
          // Another Node claims every SAN and the requester's Node loses its addresses: a Node check
          // run again would deny.
          others = [...others, nodeClaiming("worker-z", dns, ips)];
          watched.addresses = [];
          expect([conclude(s, facts), conclude(s, services)]).toEqual(want);
          expect(reads).toBe(screenedReads);
          if (dns.some((d) => d !== "worker-a") || ips.length > 0) {
            expect(screen(raw, watched, live)).toMatchObject({ action: "deny" });
          }
        },
      ),
      { numRuns: 100 },
    );
    expect(concluded).toBeGreaterThan(10);
  });
});

describe("parseCertificateRequest() over generated input", () => {
  test("parseCertificateRequest() reads the names an independent X.509 library reads from every mutated request it accepts", async () => {
    const seeds: Uint8Array[] = [];
    for (const opts of [
      { dns: ["worker-a"], ips: ["10.0.0.1"] },
      { dns: ["worker-a", "a.example.com"], ips: ["10.0.0.1", "2001:db8::1"], keyType: "rsa" as const },
      { dns: [], ips: ["::ffff:a00:1"], keyType: "ed25519" as const },
    ]) {
      seeds.push(pemToDer((await createCSR({ cn: USER_A, o: ["system:nodes"], ...opts })).csr));
    }
    const mutation = fc.record({
      kind: fc.constantFrom("set", "insert", "delete", "truncate"),
      at: fc.nat(),
      byte: fc.integer({ min: 0, max: 255 }),
    });
    let accepted = 0;
    fc.assert(
      fc.property(
        fc.nat(seeds.length - 1),
        fc.array(mutation, { minLength: 1, maxLength: 3 }),
        (s, mutations) => {
          let der = Array.from(seeds[s] as Uint8Array);
          for (const m of mutations) {
            const at = m.at % (der.length + 1);
            if (m.kind === "set" && at < der.length) der[at] = m.byte;
            if (m.kind === "insert") der.splice(at, 0, m.byte);
            if (m.kind === "delete") der.splice(at, 1);
            if (m.kind === "truncate") der = der.slice(0, at);
          }
          const bytes = new Uint8Array(der);
          let ours: ReturnType<typeof parseCertificateRequest>;
          try {
            ours = parseCertificateRequest(derToPem(bytes));
          } catch (err) {
            expect(err).toBeInstanceOf(CsrParseError);
            return;
          }
          accepted++;
          // What this parser accepts, the other reads too, and reads the same.
          const theirs = new x509.Pkcs10CertificateRequest(bytes);
          const san = theirs.extensions.find((e) => e.type === "2.5.29.17");
          const names = san ? new x509.SubjectAlternativeNameExtension(san.rawData).names.items : [];
          const of = (type: string) => names.filter((n) => n.type === type).map((n) => n.value);
          expect({
            cn: ours.commonNames,
            o: ours.organizations,
            dns: ours.dnsNames,
            ips: ours.ipAddresses,
          }).toEqual({
            cn: theirs.subjectName.getField("CN"),
            o: theirs.subjectName.getField("O"),
            dns: of("dns"),
            ips: of("ip").map((ip) => canonicalIP(ip) ?? ip),
          });
        },
      ),
      { numRuns: 3000 },
    );
    // Mutations the parser does not notice (such as in the signature) keep the property honest.
    expect(accepted).toBeGreaterThan(50);
  });

  test("parseCertificateRequest() throws nothing but CsrParseError", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 500 }),
          fc.uint8Array({ maxLength: 1024 }).map((b) => derToPem(b)),
          fc.uint8Array({ maxLength: 1024 }).map((b) => derToPem(b, "NEW CERTIFICATE REQUEST")),
        ),
        (pem) => {
          try {
            parseCertificateRequest(pem);
          } catch (err) {
            expect(err).toBeInstanceOf(CsrParseError);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});
