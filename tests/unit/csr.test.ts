// The kubelet-serving CSR policy: honest requests are approved, every attack in the matrix is
// denied with its own reason, and nothing the controller may feed in makes decide() throw.

import { describe, expect, test } from "bun:test";
import { generateKeyPairSync, sign } from "node:crypto";
import type { V1CertificateSigningRequest, V1Node } from "@kubernetes/client-node";
import { GeneralName, OtherName } from "@peculiar/asn1-x509";
import { canonicalIP } from "../../lib/cidr.ts";
import {
  APPROVE_REASON,
  type CsrInput,
  checkCsr,
  claims,
  csrInputFrom,
  csrMetrics,
  type DenyReason,
  decide,
  type NodeInput,
  nodeInputFrom,
  nodeNameFromUsername,
  requestedClaims,
  screen,
  type TalosFacts,
} from "../../lib/csr.ts";
import { Registry } from "../../lib/metrics.ts";
import { leanNode } from "../../lib/nodeview.ts";
import { KUBELET_SERVING_SIGNER } from "../../lib/wellknown.ts";
import { CsrParseError, MAX_REQUEST_BYTES, parseCertificateRequest } from "../../lib/x509pkcs10.ts";
import { b64, servingCsr, USER_A } from "../support/csrinput.ts";
import {
  type CsrOptions,
  createCSR,
  createRawCSR,
  derToPem,
  pemToDer,
  sanExtension,
} from "../support/pki.ts";

const CN = "2.5.4.3";
const O = "2.5.4.10";

const nodeA: NodeInput = {
  name: "worker-a",
  addresses: [
    { type: "InternalIP", address: "10.0.0.1" },
    { type: "ExternalIP", address: "2001:DB8:0:0::A" },
    // Written by the kubelet itself, which Talos does not confirm.
    { type: "InternalIP", address: "10.0.0.99" },
    { type: "Hostname", address: "worker-a" },
    { type: "InternalDNS", address: "worker-a.example.com" },
  ],
};
/** What Talos reports for node A unless overridden: its addresses, name and DNS names. */
function facts(addresses: string[], over: Partial<TalosFacts> = {}): TalosFacts {
  return {
    nodeIP: "10.0.0.1",
    nodename: "worker-a",
    addresses,
    dnsNames: ["worker-a.example.com"],
    sharedAddresses: new Map(),
    excludedSubnets: [],
    ...over,
  };
}
const talosA = facts(["10.0.0.1/24", "2001:db8::a/64", "fe80::1/64"]);

/** A CSR object as the controller would build it, asking as node A unless overridden. */
function input(pem: string, over: Partial<CsrInput> = {}): CsrInput {
  return servingCsr(b64(pem), { groups: ["system:nodes", "system:authenticated"], ...over });
}

/** An honest request from node A, with overrides. */
async function csrA(over: Partial<CsrOptions> = {}): Promise<string> {
  return (await createCSR({ cn: USER_A, o: ["system:nodes"], dns: ["worker-a"], ips: ["10.0.0.1"], ...over }))
    .csr;
}

/** Re-encodes the outermost length of a DER element in one byte more than needed. */
function nonMinimalLength(der: Uint8Array): Uint8Array {
  const first = der[1] as number;
  const n = first & 0x80 ? first & 0x7f : 0;
  const lengthBytes = n ? der.subarray(2, 2 + n) : der.subarray(1, 2);
  return new Uint8Array([0x30, 0x80 | (lengthBytes.length + 1), 0, ...lengthBytes, ...der.subarray(2 + n)]);
}

/** One DER element of `tag` holding `content`. */
function tlv(tag: number, ...content: number[][]): number[] {
  const body = content.flat();
  const n = body.length;
  return [tag, ...(n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff]), ...body];
}

/** `depth` SEQUENCEs, each holding the next, around a NULL. */
function nestedSequences(depth: number): Uint8Array {
  let der = [5, 0];
  for (let i = 0; i < depth; i++) der = tlv(0x30, der);
  return new Uint8Array(der);
}

/** An OBJECT IDENTIFIER element. */
function oid(dotted: string): number[] {
  const [a = 0, b = 0, ...rest] = dotted.split(".").map(Number);
  const body = [a * 40 + b];
  for (let arc of rest) {
    const bytes = [arc & 0x7f];
    for (arc >>= 7; arc > 0; arc >>= 7) bytes.unshift((arc & 0x7f) | 0x80);
    body.push(...bytes);
  }
  return tlv(0x06, body);
}

const bytesOf = (text: string) => [...Buffer.from(text, "latin1")];
/** The subject CN = node A, O = system:nodes, both UTF8String. */
const SUBJECT_A = tlv(
  0x30,
  tlv(0x31, tlv(0x30, oid(CN), tlv(0x0c, bytesOf(USER_A)))),
  tlv(0x31, tlv(0x30, oid(O), tlv(0x0c, bytesOf("system:nodes")))),
);
/** An extensionRequest attribute asking for `extensions` (Extension elements). */
const extensionRequest = (...extensions: number[][]) =>
  tlv(0x30, oid("1.2.840.113549.1.9.14"), tlv(0x31, tlv(0x30, ...extensions)));
/** A subjectAltName Extension of `names` (GeneralName elements), with an optional critical flag. */
const sanExt = (names: number[][], critical: number[] = []) =>
  tlv(0x30, oid("2.5.29.17"), critical, tlv(0x04, tlv(0x30, ...names)));

/**
 * A PEM request signed with a new P-256 key, built from DER parts for shapes no generator
 * makes: by default version 0, subject {@link SUBJECT_A} and SAN DNS "worker-a".
 */
function rawRequest(
  parts: {
    version?: number[];
    subject?: number[];
    /** `null`: no `[0] attributes` at all. */
    attributes?: number[][] | null;
    keyUnusedBits?: number;
  } = {},
): string {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const spki = [...publicKey.export({ type: "spki", format: "der" })];
  // A P-256 SPKI: 30 59 30 13 <algorithm> 03 42 <unused bits> <point>.
  if (parts.keyUnusedBits !== undefined) spki[25] = parts.keyUnusedBits;
  const tbs = tlv(
    0x30,
    parts.version ?? tlv(0x02, [0]),
    parts.subject ?? SUBJECT_A,
    spki,
    ...(parts.attributes === null
      ? []
      : [tlv(0xa0, ...(parts.attributes ?? [extensionRequest(sanExt([tlv(0x82, bytesOf("worker-a"))]))]))]),
  );
  const signature = [...sign("sha256", Buffer.from(tbs), privateKey)];
  return derToPem(
    new Uint8Array(tlv(0x30, tbs, tlv(0x30, oid("1.2.840.10045.4.3.2")), tlv(0x03, [0], signature))),
  );
}

describe("decide() approves honest requests", () => {
  const cases: Array<{
    name: string;
    pem: () => Promise<string>;
    usages?: string[];
    node?: NodeInput;
    talos?: TalosFacts | "none";
  }> = [
    { name: "ECDSA P-256 with DNS and IP", pem: () => csrA() },
    { name: "ECDSA P-384", pem: () => csrA({ curve: "P-384", hash: "SHA-384" }) },
    { name: "ECDSA P-256 signed with SHA-512", pem: () => csrA({ hash: "SHA-512" }) },
    {
      name: "RSA 2048 with key encipherment",
      pem: () => csrA({ keyType: "rsa" }),
      usages: ["key encipherment", "digital signature", "server auth"],
    },
    {
      name: "RSA 3072 signed with SHA-384",
      pem: () => csrA({ keyType: "rsa", rsaBits: 3072, hash: "SHA-384" }),
    },
    { name: "RSA 2048 signed with RSASSA-PSS", pem: () => csrA({ keyType: "rsa", rsaPss: true }) },
    { name: "Ed25519", pem: () => csrA({ keyType: "ed25519" }) },
    { name: "IP-only (the reference crashes)", pem: () => csrA({ dns: [] }) },
    { name: "DNS-only, node name", pem: () => csrA({ ips: [] }) },
    { name: "DNS name in another case", pem: () => csrA({ dns: ["Worker-A.Example.COM"], ips: [] }) },
    { name: "IPv6 compared canonically", pem: () => csrA({ ips: ["2001:db8::a", "2001:0db8:0000::000a"] }) },
    { name: "IPv4-mapped IPv6 SAN equals the IPv4 address", pem: () => csrA({ ips: ["::ffff:a00:1"] }) },
    {
      name: "provided-node-ip only, before any status address",
      pem: () => csrA({ dns: [], ips: ["10.0.0.1", "2001:db8::a"] }),
      node: { name: "worker-a", addresses: [], providedNodeIP: "10.0.0.1,2001:db8::a" },
    },
    {
      name: "CSR-only mode trusts the Node status for IPs",
      pem: () => csrA({ ips: ["10.0.0.1", "10.0.0.99"] }),
      talos: "none",
    },
    {
      name: "Talos addresses without prefix lengths",
      pem: () => csrA({ ips: ["10.0.0.1", "2001:db8::a"] }),
      talos: facts(["10.0.0.1", "2001:db8:0::a"]),
    },
  ];
  for (const c of cases) {
    test(`decide() approves ${c.name}`, async () => {
      const talos = c.talos === "none" ? undefined : (c.talos ?? talosA);
      const d = decide(input(await c.pem(), c.usages ? { usages: c.usages } : {}), c.node ?? nodeA, talos);
      expect(d).toMatchObject({ action: "approve", reason: APPROVE_REASON });
      if (d.action === "approve") expect(d.message).toContain('"worker-a"');
    });
  }
});

describe("decide() denies the attack matrix", () => {
  const big = "A".repeat(1024 * 1024);
  const cases: Array<{
    name: string;
    pem: () => Promise<string> | string;
    over?: Partial<CsrInput>;
    node?: NodeInput;
    talos?: TalosFacts | "none";
    reason: DenyReason;
    says?: string;
  }> = [
    // Identity
    {
      name: "requester is not a node",
      pem: csrA,
      over: { username: "system:serviceaccount:kube-system:x" },
      reason: "UsernameMismatch",
    },
    {
      name: "node username with an empty name",
      pem: csrA,
      over: { username: "system:node:" },
      reason: "UsernameMismatch",
    },
    {
      name: "node username that is no node name",
      pem: csrA,
      over: { username: "system:node:Worker_A" },
      reason: "UsernameMismatch",
    },
    {
      name: "groups without system:nodes",
      pem: csrA,
      over: { groups: ["system:authenticated"] },
      reason: "GroupMismatch",
    },
    {
      name: "node A asking with B's CN",
      pem: () => csrA({ cn: "system:node:worker-b" }),
      reason: "SubjectMismatch",
      says: "worker-b",
    },
    {
      name: "node A asking for B's name",
      pem: () => csrA({ dns: ["worker-b"] }),
      reason: "DNSNameNotOwned",
      says: "worker-b",
    },
    {
      name: "node A asking for B's DNS name",
      pem: () => csrA({ dns: ["worker-a", "worker-b.example.com"] }),
      reason: "DNSNameNotOwned",
    },
    {
      name: "node A asking for B's IP",
      pem: () => csrA({ ips: ["10.0.0.1", "10.0.0.2"] }),
      reason: "IPNotOwned",
      says: "10.0.0.2",
    },
    { name: "node A asking for B's IPv6", pem: () => csrA({ ips: ["2001:db8::b"] }), reason: "IPNotOwned" },
    {
      name: "an IPv4-compatible address, which stands for an IPv4 address",
      pem: () => csrA({ ips: ["::a00:1"] }),
      reason: "NonUniqueIP",
    },
    {
      name: "an IP the Node claims but Talos does not report",
      pem: () => csrA({ ips: ["10.0.0.1", "10.0.0.99"] }),
      reason: "IPNotReportedByTalos",
      says: "10.0.0.99",
    },
    {
      name: "any IP when Talos reports nothing",
      pem: () => csrA(),
      talos: facts([]),
      reason: "IPNotReportedByTalos",
    },
    // Subject
    { name: "CN is not the username", pem: () => csrA({ cn: "worker-a" }), reason: "SubjectMismatch" },
    { name: "wrong O", pem: () => csrA({ o: ["system:masters"] }), reason: "SubjectMismatch" },
    {
      name: "extra O",
      pem: () => csrA({ o: ["system:nodes", "system:masters"] }),
      reason: "SubjectMismatch",
    },
    { name: "no O", pem: () => csrA({ o: [] }), reason: "SubjectMismatch" },
    {
      name: "two CNs",
      pem: () =>
        createRawCSR({
          subject: [[[CN, USER_A]], [[CN, "system:node:worker-b"]], [[O, "system:nodes"]]],
          extensionRequests: [[sanExtension([new GeneralName({ dNSName: "worker-a" })])]],
        }),
      reason: "SubjectMismatch",
    },
    // SANs
    { name: "no SANs", pem: () => csrA({ dns: [], ips: [] }), reason: "NoSAN" },
    {
      name: "an extra wildcard DNS SAN",
      pem: () => csrA({ dns: ["worker-a", "*.example.com"] }),
      reason: "ForbiddenSAN",
    },
    {
      name: "kubernetes.default DNS SAN",
      pem: () => csrA({ dns: ["kubernetes.default"] }),
      reason: "ForbiddenSAN",
    },
    {
      name: "kubernetes DNS SAN in capitals",
      pem: () => csrA({ dns: ["KUBERNETES"] }),
      reason: "ForbiddenSAN",
    },
    {
      name: "kubernetes DNS SAN the Node status claims",
      pem: () => csrA({ dns: ["kubernetes.default.svc"] }),
      node: {
        ...nodeA,
        addresses: [...nodeA.addresses, { type: "InternalDNS", address: "kubernetes.default.svc" }],
      },
      reason: "ForbiddenSAN",
    },
    {
      name: "email SAN",
      pem: () => csrA({ emails: ["root@worker-a"] }),
      reason: "ForbiddenSAN",
      says: "email",
    },
    {
      name: "URI SAN",
      pem: () => csrA({ uris: ["spiffe://cluster/ns/x"] }),
      reason: "ForbiddenSAN",
      says: "URI",
    },
    {
      name: "otherName SAN",
      pem: () =>
        createRawCSR({
          subject: [[[CN, USER_A]], [[O, "system:nodes"]]],
          extensionRequests: [
            [
              sanExtension([
                new GeneralName({ dNSName: "worker-a" }),
                new GeneralName({
                  otherName: new OtherName({
                    typeId: "1.3.6.1.4.1.311.20.2.3",
                    value: new Uint8Array([5, 0]).buffer,
                  }),
                }),
              ]),
            ],
          ],
        }),
      reason: "ForbiddenSAN",
      says: "otherName",
    },
    // Usages
    {
      name: "client auth usage",
      pem: csrA,
      over: { usages: ["digital signature", "server auth", "client auth"] },
      reason: "BadUsages",
      says: "client auth",
    },
    {
      name: "no server auth",
      pem: csrA,
      over: { usages: ["digital signature", "key encipherment"] },
      reason: "BadUsages",
    },
    { name: "no usages", pem: csrA, over: { usages: [] }, reason: "BadUsages" },
    // Keys and signatures
    { name: "RSA-1024", pem: () => csrA({ keyType: "rsa", rsaBits: 1024 }), reason: "WeakKey", says: "1024" },
    {
      name: "ECDSA P-521",
      pem: () => csrA({ curve: "P-521", hash: "SHA-512" }),
      reason: "WeakKey",
      says: "P-521",
    },
    { name: "a bad signature", pem: () => csrA({ wrongSignature: true }), reason: "BadSignature" },
    {
      name: "an RSA bad signature",
      pem: () => csrA({ keyType: "rsa", wrongSignature: true }),
      reason: "BadSignature",
    },
    {
      name: "an Ed25519 bad signature",
      pem: () => csrA({ keyType: "ed25519", wrongSignature: true }),
      reason: "BadSignature",
    },
    {
      name: "a SHA-1 signature",
      pem: () => csrA({ keyType: "rsa", hash: "SHA-1" }),
      reason: "BadSignature",
      says: "sha1WithRSAEncryption is not accepted",
    },
    {
      name: "an RSASSA-PSS salt shorter than the hash",
      pem: () => csrA({ keyType: "rsa", rsaPss: true, pssSaltLength: 20 }),
      reason: "BadSignature",
      says: "salt length",
    },
    {
      name: "an RSASSA-PSS signature over SHA-1",
      pem: () => csrA({ keyType: "rsa", rsaPss: true, hash: "SHA-1" }),
      reason: "BadSignature",
      says: "SHA-256, SHA-384 or SHA-512",
    },
    // Encoding
    { name: "garbage PEM", pem: () => "hello, world", reason: "InvalidRequest" },
    { name: "empty request", pem: () => "", reason: "InvalidRequest" },
    {
      name: "a 1 MiB PEM",
      pem: () => `-----BEGIN CERTIFICATE REQUEST-----\n${big}\n-----END CERTIFICATE REQUEST-----\n`,
      reason: "InvalidRequest",
      says: "limit",
    },
    {
      name: "wrong PEM label",
      pem: async () => derToPem(pemToDer(await csrA()), "CERTIFICATE"),
      reason: "InvalidRequest",
      says: "CERTIFICATE",
    },
    {
      name: "NEW CERTIFICATE REQUEST label",
      pem: async () => derToPem(pemToDer(await csrA()), "NEW CERTIFICATE REQUEST"),
      reason: "InvalidRequest",
    },
    {
      name: "multiple PEM blocks",
      pem: async () => (await csrA()) + (await csrA()),
      reason: "InvalidRequest",
    },
    {
      name: "text after the PEM block",
      pem: async () => `${await csrA()}trailing garbage\n`,
      reason: "InvalidRequest",
    },
    {
      name: "text before the PEM block",
      pem: async () => `subject=worker-a\n${await csrA()}`,
      reason: "InvalidRequest",
    },
    {
      name: "bytes after the DER",
      pem: async () => derToPem(new Uint8Array([...pemToDer(await csrA()), 0, 0])),
      reason: "InvalidRequest",
      says: "trailing",
    },
    {
      name: "truncated DER",
      pem: async () => derToPem(pemToDer(await csrA()).subarray(0, 100)),
      reason: "InvalidRequest",
    },
    {
      name: "non-minimal DER length",
      pem: async () => derToPem(nonMinimalLength(pemToDer(await csrA()))),
      reason: "InvalidRequest",
      says: "minimal",
    },
    {
      name: "random bytes as DER",
      pem: () => derToPem(new Uint8Array(Array.from({ length: 300 }, (_, i) => (i * 37 + 11) % 256))),
      reason: "InvalidRequest",
    },
    {
      name: "an outer tag that is not SEQUENCE",
      pem: async () => derToPem(Uint8Array.from(pemToDer(await csrA()), (x, i) => (i === 0 ? 0xa0 : x))),
      reason: "InvalidRequest",
      says: "not a CertificationRequest",
    },
    {
      name: "a certificate instead of a request",
      pem: async () =>
        (await (await import("../support/pki.ts")).createCA("ca")).cert.replaceAll(
          "CERTIFICATE",
          "CERTIFICATE REQUEST",
        ),
      reason: "InvalidRequest",
    },
    {
      name: "10,000 SANs",
      pem: () => csrA({ ips: Array.from({ length: 10_000 }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.1`) }),
      reason: "InvalidRequest",
      says: "limit",
    },
    {
      name: "two SAN extensions in two extensionRequest attributes",
      pem: () =>
        createRawCSR({
          subject: [[[CN, USER_A]], [[O, "system:nodes"]]],
          extensionRequests: [
            [sanExtension([new GeneralName({ dNSName: "worker-a" })])],
            [sanExtension([new GeneralName({ dNSName: "worker-b" })])],
          ],
        }),
      reason: "InvalidRequest",
      says: "twice",
    },
    {
      name: "an 8-byte IP SAN",
      pem: () =>
        createRawCSR({
          subject: [[[CN, USER_A]], [[O, "system:nodes"]]],
          extensionRequests: [[sanExtension([new GeneralName({ iPAddress: "10.0.0.0/8" })])]],
        }),
      reason: "InvalidRequest",
      says: "4 or 16 bytes",
    },
    {
      name: "version 2",
      pem: () => createRawCSR({ subject: [[[CN, USER_A]], [[O, "system:nodes"]]], version: 1 }),
      reason: "InvalidRequest",
      says: "version",
    },
    {
      name: "request that is not base64",
      pem: csrA,
      over: { request: "!!!not base64!!!" },
      reason: "InvalidRequest",
    },
  ];
  for (const c of cases) {
    test(`decide() denies ${c.name} as ${c.reason}`, async () => {
      const talos = c.talos === "none" ? undefined : (c.talos ?? talosA);
      const d = decide(input(await c.pem(), c.over), c.node ?? nodeA, talos);
      expect(d).toMatchObject({ action: "deny", reason: c.reason });
      if (c.says && d.action === "deny") expect(d.message).toContain(c.says);
    });
  }
});

describe("decide() ignores and waits", () => {
  test("decide() ignores other signers without reading the request", () => {
    for (const signerName of ["kubernetes.io/kube-apiserver-client-kubelet", "example.com/x", ""]) {
      expect(decide(input("garbage", { signerName }), nodeA, talosA)).toEqual({
        action: "ignore",
        reason: "OtherSigner",
      });
    }
  });

  test("decide() ignores requests that already carry a condition", async () => {
    const pem = await csrA();
    for (const type of ["Approved", "Denied", "Failed"]) {
      expect(decide(input(pem, { conditions: [{ type }] }), nodeA, talosA)).toEqual({
        action: "ignore",
        reason: "AlreadyDecided",
      });
    }
  });

  test("decide() waits for a Node that does not exist yet", async () => {
    const d = decide(input(await csrA()), undefined, talosA);
    expect(d).toMatchObject({ action: "wait", reason: "NodeNotFound" });
  });

  test("decide() treats a Node of another name as absent", async () => {
    const d = decide(input(await csrA()), { ...nodeA, name: "worker-b" }, talosA);
    expect(d).toMatchObject({ action: "wait", reason: "NodeNotFound" });
  });

  test("decide() denies a bad request at once, without waiting for the Node", async () => {
    expect(decide(input(await csrA({ dns: ["*.x"] })), undefined)).toMatchObject({
      action: "deny",
      reason: "ForbiddenSAN",
    });
    expect(decide(input("garbage"), undefined)).toMatchObject({ action: "deny", reason: "InvalidRequest" });
  });

  test("decide() fails closed on malformed input objects", () => {
    const broken = {
      ...input("x"),
      usages: null,
      groups: ["system:nodes"],
      request: 42,
    } as unknown as CsrInput;
    expect(decide(broken, nodeA)).toMatchObject({ action: "deny" });
    const noAddresses = { name: "worker-a" } as unknown as NodeInput;
    expect(() => decide(input("x"), noAddresses)).not.toThrow();
  });
});

describe("decide() against the other Nodes and Talos' identity and names", () => {
  const nodeB: NodeInput = {
    name: "worker-b",
    addresses: [
      { type: "InternalIP", address: "10.0.0.2" },
      { type: "Hostname", address: "worker-b" },
      { type: "InternalDNS", address: "worker-b.example.com" },
    ],
    providedNodeIP: "10.0.0.2",
  };
  /** Node A with extra status addresses its kubelet wrote. */
  const nodeAWith = (...extra: Array<{ type: string; address: string }>): NodeInput => ({
    ...nodeA,
    addresses: [...nodeA.addresses, ...extra],
  });
  const cases: Array<{
    name: string;
    pem: () => Promise<string>;
    node?: NodeInput;
    talos?: TalosFacts | "none";
    others?: NodeInput[];
    want: { action: "approve" } | { action: "deny"; reason: DenyReason; says?: string };
  }> = [
    {
      name: "approves its own name even when another Node claims it",
      pem: () => csrA(),
      others: [{ ...nodeB, addresses: [...nodeB.addresses, { type: "InternalDNS", address: "worker-a" }] }],
      want: { action: "approve" },
    },
    {
      name: "approves when the other Nodes claim none of its SANs, in CSR-only mode",
      pem: () => csrA({ dns: ["worker-a", "worker-a.example.com"] }),
      talos: "none",
      others: [nodeB, nodeA],
      want: { action: "approve" },
    },
    {
      name: "approves a DNS name Talos knows in other letter case",
      pem: () => csrA({ dns: ["Worker-A.Example.com"] }),
      talos: facts(["10.0.0.1/24"], { dnsNames: ["WORKER-A.example.COM"] }),
      want: { action: "approve" },
    },
    {
      name: "denies another Node's name its kubelet put into its own status",
      pem: () => csrA({ dns: ["worker-a", "worker-b"] }),
      node: nodeAWith({ type: "InternalDNS", address: "worker-b" }),
      others: [nodeB],
      want: { action: "deny", reason: "DNSNameOfOtherNode", says: '"worker-b" (node "worker-b")' },
    },
    {
      name: "denies another Node's DNS address, in CSR-only mode too",
      pem: () => csrA({ dns: ["worker-a", "WORKER-B.example.com"] }),
      node: nodeAWith({ type: "ExternalDNS", address: "worker-b.example.com" }),
      talos: "none",
      others: [nodeB],
      want: {
        action: "deny",
        reason: "DNSNameOfOtherNode",
        says: '"WORKER-B.example.com" (node "worker-b")',
      },
    },
    {
      name: "denies another Node's IP in CSR-only mode",
      pem: () => csrA({ ips: ["10.0.0.1", "10.0.0.2"] }),
      node: nodeAWith({ type: "InternalIP", address: "10.0.0.2" }),
      talos: "none",
      others: [nodeB],
      want: { action: "deny", reason: "IPOfOtherNode", says: '"10.0.0.2" (node "worker-b")' },
    },
    {
      name: "denies another Node's provided node IP in CSR-only mode",
      pem: () => csrA({ ips: ["10.0.0.2"] }),
      node: { ...nodeA, providedNodeIP: "10.0.0.2" },
      talos: "none",
      others: [{ ...nodeB, addresses: [] }],
      want: { action: "deny", reason: "IPOfOtherNode" },
    },
    {
      name: "denies another Node's IP with Talos too: the same rules in both modes",
      pem: () => csrA({ ips: ["10.0.0.2"] }),
      node: nodeAWith({ type: "InternalIP", address: "10.0.0.2" }),
      talos: facts(["10.0.0.1/24", "10.0.0.2/24"]),
      others: [nodeB],
      want: { action: "deny", reason: "IPOfOtherNode", says: '"10.0.0.2" (node "worker-b")' },
    },
    {
      name: "denies when the Talos node on the Node's IP is another node (forged endpoint)",
      pem: () => csrA({ ips: ["10.0.0.2"] }),
      node: {
        ...nodeA,
        providedNodeIP: "10.0.0.2",
        addresses: [{ type: "InternalIP", address: "10.0.0.2" }],
      },
      talos: facts(["10.0.0.2/24"], { nodeIP: "10.0.0.2", nodename: "worker-b" }),
      want: {
        action: "deny",
        reason: "TalosNodeMismatch",
        says: '"10.0.0.2", a node IP of node "worker-a", is node "worker-b"',
      },
    },
    {
      name: "denies a Talos nodename that differs only in letter case",
      pem: () => csrA(),
      talos: facts(["10.0.0.1/24"], { nodename: "Worker-A" }),
      want: { action: "deny", reason: "TalosNodeMismatch" },
    },
    {
      name: "checks Talos' identity before its addresses",
      pem: () => csrA({ ips: ["10.0.0.99"] }),
      talos: facts([], { nodename: "worker-b" }),
      want: { action: "deny", reason: "TalosNodeMismatch" },
    },
    {
      name: "denies a DNS name in the Node's status that Talos does not know",
      pem: () => csrA({ dns: ["worker-a", "evil.example.org"] }),
      node: nodeAWith({ type: "ExternalDNS", address: "evil.example.org" }),
      want: { action: "deny", reason: "DNSNameNotReportedByTalos", says: "evil.example.org" },
    },
    {
      name: "denies every extra DNS name when Talos' names were not read",
      pem: () => csrA({ dns: ["worker-a.example.com"] }),
      talos: facts(["10.0.0.1/24"], { dnsNames: [] }),
      want: { action: "deny", reason: "DNSNameNotReportedByTalos" },
    },
  ];
  for (const c of cases) {
    test(`decide() ${c.name}`, async () => {
      const talos = c.talos === "none" ? undefined : (c.talos ?? talosA);
      const d = decide(input(await c.pem()), c.node ?? nodeA, talos, c.others ?? []);
      expect(d).toMatchObject(
        c.want.action === "approve" ? { action: "approve" } : { action: "deny", reason: c.want.reason },
      );
      if (c.want.action === "deny" && c.want.says && d.action === "deny")
        expect(d.message).toContain(c.want.says);
    });
  }

  test("decide() names how it checked in the approval message", async () => {
    const pem = await csrA();
    expect(decide(input(pem), nodeA, talosA)).toMatchObject({
      message: expect.stringContaining("confirmed by Talos on 10.0.0.1"),
    });
    expect(decide(input(pem), nodeA)).toMatchObject({
      message: expect.stringContaining("checked against the Nodes only"),
    });
  });
});

describe("screen()", () => {
  test("screen() asks Talos to confirm the IP SANs and the DNS SANs besides the node name", async () => {
    const pem = await csrA({ dns: ["worker-a", "Worker-A.example.com"], ips: ["10.0.0.1", "2001:db8::a"] });
    expect(screen(input(pem), nodeA)).toMatchObject({
      action: "confirm",
      ipAddresses: ["10.0.0.1", "2001:db8::a"],
      dnsNames: ["Worker-A.example.com"],
    });
    expect(screen(input(await csrA({ ips: [] })), nodeA)).toMatchObject({
      action: "confirm",
      ipAddresses: [],
      dnsNames: [],
    });
  });

  test("screen() returns decide()'s denial, wait and ignore without Talos facts", async () => {
    const withB = { ...nodeA, addresses: [...nodeA.addresses, { type: "InternalIP", address: "10.0.0.2" }] };
    const nodeB: NodeInput = { name: "worker-b", addresses: [{ type: "InternalIP", address: "10.0.0.2" }] };
    const rows: Array<[CsrInput, NodeInput | undefined, string]> = [
      [input(await csrA({ ips: ["10.0.0.7"] })), nodeA, "IPNotOwned"],
      [input(await csrA({ dns: ["*.x"] })), nodeA, "ForbiddenSAN"],
      [input("garbage"), nodeA, "InvalidRequest"],
      [input(await csrA()), undefined, "NodeNotFound"],
      [input(await csrA(), { conditions: [{ type: "Approved" }] }), nodeA, "AlreadyDecided"],
    ];
    for (const [csr, node, reason] of rows) {
      const s = screen(csr, node, [nodeB]);
      expect(s).toMatchObject({ reason });
      expect(s).toEqual(decide(csr, node, talosA, [nodeB]));
    }
    // Another Node's IP is denied before Talos is asked, as without Talos.
    const shared = input(await csrA({ ips: ["10.0.0.2"] }));
    expect(screen(shared, withB, [nodeB])).toMatchObject({ action: "deny", reason: "IPOfOtherNode" });
    expect(screen(shared, withB, [nodeB])).toEqual(decide(shared, withB, undefined, [nodeB]));
  });

  test("screen() fails closed on malformed input objects", () => {
    const broken = { ...input("x"), usages: null, request: 42 } as unknown as CsrInput;
    expect(screen(broken, nodeA)).toMatchObject({ action: "deny" });
  });
});

describe("checkCsr()", () => {
  test("checkCsr() returns decide()'s ignore or denial for what the request alone decides", async () => {
    const rows: Array<[string, CsrInput, string]> = [
      ["a decided request", input(await csrA(), { conditions: [{ type: "Denied" }] }), "AlreadyDecided"],
      ["another signer", input("garbage", { signerName: "example.com/x" }), "OtherSigner"],
      ["a user that is no node", input(await csrA(), { username: "alice" }), "UsernameMismatch"],
      ["a node outside system:nodes", input(await csrA(), { groups: [] }), "GroupMismatch"],
      ["client usages", input(await csrA(), { usages: ["client auth"] }), "BadUsages"],
      ["garbage", input("garbage"), "InvalidRequest"],
      ["a wildcard SAN", input(await csrA({ dns: ["*.x"] })), "ForbiddenSAN"],
      ["a broken object", { ...input("x"), groups: 42 } as unknown as CsrInput, "InvalidRequest"],
    ];
    for (const [what, csr, reason] of rows) {
      const checked = checkCsr(csr);
      expect({ what, checked }).toEqual({ what, checked: expect.objectContaining({ reason }) });
      expect(checked).toEqual(decide(csr, nodeA, talosA));
    }
  });

  test("checkCsr() hands screen() and decide() the parsed request, with their answers for the raw one", async () => {
    const nodeB: NodeInput = { name: "worker-b", addresses: [{ type: "InternalIP", address: "10.0.0.2" }] };
    const pems = [
      await csrA(),
      await csrA({ dns: ["worker-a", "worker-a.example.com"] }),
      await csrA({ ips: ["10.0.0.2"] }),
      await csrA({ dns: ["worker-b"] }),
    ];
    for (const pem of pems) {
      const checked = checkCsr(input(pem));
      if ("action" in checked) throw new Error(`request was not checked: ${checked.reason}`);
      expect(checked.nodeName).toBe("worker-a");
      expect(checked.parsed).toEqual(parseCertificateRequest(pem));
      for (const node of [nodeA, undefined]) {
        for (const talos of [talosA, undefined]) {
          expect(decide(checked, node, talos, [nodeB])).toEqual(decide(input(pem), node, talos, [nodeB]));
        }
        expect(screen(checked, node, [nodeB])).toEqual(screen(input(pem), node, [nodeB]));
      }
    }
  });

  test("checkCsr()'s result is not forged by an input of the same shape", async () => {
    // An input that carries checkCsr()'s fields with an honest parse, for a request that asks
    // for an IP the node does not own: only checkCsr() can make a checked request.
    const honest = checkCsr(input(await csrA()));
    const forged = {
      ...input(await csrA({ ips: ["10.0.0.7"] })),
      ...JSON.parse(JSON.stringify(honest)),
    } as CsrInput;
    expect(decide(forged, nodeA, talosA)).toMatchObject({ action: "deny", reason: "IPNotOwned" });
    expect(screen(forged, nodeA)).toMatchObject({ action: "deny", reason: "IPNotOwned" });
  });
});

describe("claims() and requestedClaims()", () => {
  test("claims() lists the node name and DNS addresses lower-case, and every IP address and provided node IP canonical", () => {
    const node: NodeInput = {
      name: "Worker-A",
      addresses: [
        { type: "Hostname", address: "Worker-A.lan" },
        { type: "InternalDNS", address: "worker-a.internal" },
        { type: "ExternalDNS", address: "WEB.example.com" },
        { type: "Hostname", address: "10.0.0.5" },
        { type: "InternalIP", address: "::ffff:10.0.0.1" },
        { type: "ExternalIP", address: "2001:DB8::A" },
        { type: "SomethingElse", address: "not-an-ip" },
      ],
      providedNodeIP: "10.0.0.9, fd00::1",
    };
    expect(claims(node, "own")).toEqual({
      dns: new Set(["worker-a", "worker-a.lan", "worker-a.internal", "web.example.com"]),
      ips: new Set(["10.0.0.5", "10.0.0.1", "2001:db8::a", "10.0.0.9", "fd00::1"]),
    });
  });

  test('claims(node, "other") reads every spelling: leading zeros (decimal and octal), zones, prefixes, trailing dots, any address type', () => {
    const node: NodeInput = {
      name: "worker-b",
      addresses: [
        { type: "InternalIP", address: "10.0.0.002" },
        { type: "InternalIP", address: " 10.0.0.010 " },
        { type: "ExternalIP", address: "FE80::1%eth0" },
        { type: "InternalIP", address: "10.1.2.3/24" },
        { type: "InternalDNS", address: "Worker-B.Example.com." },
        { type: "SomethingElse", address: "api.example.com" },
      ],
      providedNodeIP: "0x0a.0.0.7",
    };
    expect(claims(node, "other")).toEqual({
      dns: new Set(["worker-b", "worker-b.example.com", "api.example.com"]),
      ips: new Set(["10.0.0.2", "10.0.0.10", "10.0.0.8", "fe80::1", "10.1.2.3", "10.0.0.7"]),
    });
    // Read strictly, the same Node claims nothing of those IPs as its own.
    expect(claims(node, "own").ips.size).toBe(0);
  });

  test("requestedClaims() spells the SANs as claims() does", async () => {
    const pem = await csrA({
      dns: ["worker-a", "Worker-A.Example.com"],
      ips: ["::ffff:a00:1", "2001:DB8::A"],
    });
    const checked = checkCsr(input(pem));
    if ("action" in checked) throw new Error(`request was not checked: ${checked.reason}`);
    expect(requestedClaims(checked)).toEqual({
      dns: new Set(["worker-a", "worker-a.example.com"]),
      ips: new Set(["10.0.0.1", "2001:db8::a"]),
    });
  });
});

describe("parseCertificateRequest()", () => {
  test("parseCertificateRequest() returns the names, key and proof of possession", async () => {
    const { csr } = await createCSR({
      cn: USER_A,
      o: ["system:nodes"],
      dns: ["worker-a", "worker-a.example.com"],
      ips: ["10.0.0.1", "2001:DB8::A", "::ffff:a00:2"],
      keyType: "rsa",
    });
    expect(parseCertificateRequest(csr)).toEqual({
      commonNames: [USER_A],
      organizations: ["system:nodes"],
      dnsNames: ["worker-a", "worker-a.example.com"],
      ipAddresses: ["10.0.0.1", "2001:db8::a", "10.0.0.2"],
      emailAddresses: [],
      uris: [],
      otherNames: [],
      publicKey: { type: "rsa", bits: 2048, exponent: 65537n },
      signature: { algorithm: "sha256WithRSAEncryption", valid: true },
    });
  });

  test("parseCertificateRequest() reports a failed proof of possession without throwing", async () => {
    const parsed = parseCertificateRequest(await csrA({ wrongSignature: true }));
    expect(parsed.signature).toMatchObject({ algorithm: "ecdsa-with-SHA256", valid: false });
  });

  test("parseCertificateRequest() reads the subject in every string type Go reads", () => {
    const utf16 = (t: string) => [...t].flatMap((c) => [0, c.charCodeAt(0)]);
    const types: Array<[string, number, number[]]> = [
      ["UTF8String", 0x0c, bytesOf(USER_A)],
      ["PrintableString", 0x13, bytesOf(USER_A)],
      ["TeletexString", 0x14, bytesOf(USER_A)],
      ["IA5String", 0x16, bytesOf(USER_A)],
      ["BMPString", 0x1e, utf16(USER_A)],
    ];
    for (const [type, tag, value] of types) {
      const subject = tlv(0x30, tlv(0x31, tlv(0x30, oid(CN), tlv(tag, value))));
      const parsed = parseCertificateRequest(rawRequest({ subject }));
      expect({ type, cn: parsed.commonNames, valid: parsed.signature.valid }).toEqual({
        type,
        cn: [USER_A],
        valid: true,
      });
    }
  });

  // Go refuses a UTF8String that is not UTF-8, and drops a UniversalString value: the certificate
  // would carry no such CN, so the policy must not judge one.
  test.each([
    ["a UTF8String that is not UTF-8", 0x0c, [0x61, 0xff], "not UTF-8"],
    ["a UniversalString", 0x1c, [...USER_A].flatMap((c) => [0, 0, 0, c.charCodeAt(0)]), "not a string"],
  ])("parseCertificateRequest() refuses a CN in %s", (_name, tag, value, message) => {
    const subject = tlv(0x30, tlv(0x31, tlv(0x30, oid(CN), tlv(tag, value))));
    expect(() => parseCertificateRequest(rawRequest({ subject }))).toThrow(message);
  });

  test("parseCertificateRequest() reads every kind of SAN, in order", () => {
    const names = [
      tlv(0x82, bytesOf("worker-a")),
      tlv(0x87, [10, 0, 0, 1]),
      tlv(0x87, [...Array(10).fill(0), 0xff, 0xff, 10, 0, 0, 2]),
      tlv(0x87, [0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 1]),
      tlv(0x81, bytesOf("a@example.com")),
      tlv(0x86, bytesOf("https://example.com")),
      tlv(0xa0, oid("1.3.6.1.4.1.311.20.2.3"), tlv(0xa0, tlv(0x0c, bytesOf("x")))),
      tlv(0xa4, SUBJECT_A),
      tlv(0x88, oid("1.2.3.4").slice(2)),
      tlv(0xa3, tlv(0x30)),
      tlv(0xa5, tlv(0xa1, tlv(0x0c, bytesOf("party")))),
    ];
    const parsed = parseCertificateRequest(
      rawRequest({ attributes: [extensionRequest(sanExt(names, tlv(0x01, [0xff])))] }),
    );
    expect(parsed).toMatchObject({
      dnsNames: ["worker-a"],
      ipAddresses: ["10.0.0.1", "10.0.0.2", "2001:db8::1"],
      emailAddresses: ["a@example.com"],
      uris: ["https://example.com"],
      otherNames: ["otherName", "directoryName", "registeredID", "x400Address", "ediPartyName"],
      signature: { valid: true },
    });
  });

  test("parseCertificateRequest() reads a request with empty attributes and skips other attributes", () => {
    expect(parseCertificateRequest(rawRequest({ attributes: [] })).dnsNames).toEqual([]);
    const challenge = tlv(0x30, oid("1.2.840.113549.1.9.7"), tlv(0x31, tlv(0x0c, bytesOf("pw"))));
    const both = [challenge, extensionRequest(sanExt([tlv(0x82, bytesOf("worker-a"))]))];
    expect(parseCertificateRequest(rawRequest({ attributes: both })).dnsNames).toEqual(["worker-a"]);
  });

  test("parseCertificateRequest() accepts surrounding whitespace and CRLF line ends", async () => {
    const pem = (await csrA()).replaceAll("\n", "\r\n");
    expect(parseCertificateRequest(`\n  ${pem}\n\n`).dnsNames).toEqual(["worker-a"]);
  });

  const bad: Array<[string, unknown, string]> = [
    ["a non-string", 42, "not a string"],
    ["an empty string", "", "no BEGIN line"],
    [
      "a PEM with an empty body",
      "-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----",
      "not base64",
    ],
    [
      "a PEM with headers",
      "-----BEGIN CERTIFICATE REQUEST-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE REQUEST-----",
      "not base64",
    ],
    ["an oversized PEM", "x".repeat(MAX_REQUEST_BYTES + 1), "limit"],
    ["DER of a bare NULL", derToPem(new Uint8Array([5, 0])), "not a CertificationRequest"],
    [
      "DER with an indefinite length",
      derToPem(new Uint8Array([0x30, 0x80, 5, 0, 0, 0])),
      "indefinite length",
    ],
    [
      "DER with a constructed OCTET STRING",
      derToPem(new Uint8Array([0x30, 4, 0x24, 2, 5, 0])),
      "constructed string",
    ],
    ["DER with a high tag number", derToPem(new Uint8Array([0x30, 3, 0x1f, 0x81, 0])), "high tag"],
    ["deeply nested DER", derToPem(nestedSequences(100)), "nesting too deep"],
    [
      "a public key BIT STRING with unused bits",
      rawRequest({ keyUnusedBits: 8 }),
      "not a CertificationRequest",
    ],
    [
      "a request without its [0] attributes (Go requires them)",
      rawRequest({ attributes: null }),
      "not a CertificationRequest",
    ],
    ["an end-of-contents marker", derToPem(new Uint8Array([0x30, 2, 0, 0])), "end-of-contents"],
    ["a version of two bytes", rawRequest({ version: tlv(0x02, [0, 0]) }), "version field"],
    ["an empty version", rawRequest({ version: tlv(0x02, []) }), "version field"],
    [
      "a non-minimal object identifier",
      rawRequest({
        subject: tlv(0x30, tlv(0x31, tlv(0x30, tlv(0x06, [0x55, 0x80, 0x04]), tlv(0x0c, [0x61])))),
      }),
      "not minimally encoded",
    ],
    [
      "a truncated object identifier",
      rawRequest({ subject: tlv(0x30, tlv(0x31, tlv(0x30, tlv(0x06, [0x55, 0x84]), tlv(0x0c, [0x61])))) }),
      "truncated object identifier",
    ],
    [
      "a CN that is no string",
      rawRequest({ subject: tlv(0x30, tlv(0x31, tlv(0x30, oid(CN), tlv(0x02, [1])))) }),
      "not a string",
    ],
    [
      "a CN in a BMPString of odd length",
      rawRequest({ subject: tlv(0x30, tlv(0x31, tlv(0x30, oid(CN), tlv(0x1e, [0, 0x61, 0])))) }),
      "odd length",
    ],
    [
      "a relative name that is not a SET",
      rawRequest({ subject: tlv(0x30, tlv(0x30, tlv(0x30, oid(CN), tlv(0x0c, [0x61])))) }),
      "not a SET",
    ],
    [
      "an attribute with an element after its values",
      rawRequest({ attributes: [tlv(0x30, oid("1.2.3"), tlv(0x31), tlv(0x05, []))] }),
      "malformed attribute",
    ],
    [
      "a critical flag that is not a DER BOOLEAN",
      rawRequest({
        attributes: [extensionRequest(sanExt([tlv(0x82, bytesOf("worker-a"))], tlv(0x01, [1])))],
      }),
      "malformed Extension",
    ],
    [
      "a constructed DNS SAN",
      rawRequest({ attributes: [extensionRequest(sanExt([tlv(0xa2, tlv(0x16, bytesOf("worker-a")))]))] }),
      "unknown name",
    ],
  ];
  for (const [name, pem, says] of bad) {
    test(`parseCertificateRequest() throws CsrParseError for ${name}`, () => {
      expect(() => parseCertificateRequest(pem as string)).toThrow(CsrParseError);
      expect(() => parseCertificateRequest(pem as string)).toThrow(says);
    });
  }
});

describe("canonicalIP()", () => {
  const cases: Array<[string, string | undefined]> = [
    ["10.0.0.1", "10.0.0.1"],
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["2001:DB8::A", "2001:db8::a"],
    ["2001:0db8:0000:0000:0000:0000:0000:000a", "2001:db8::a"],
    ["2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["::", "::"],
    ["::1", "::1"],
    ["1::", "1::"],
    ["::ffff:10.0.0.1", "10.0.0.1"],
    ["::ffff:a00:1", "10.0.0.1"],
    ["::10.0.0.1", "::a00:1"],
    ["1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"],
    ["1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"],
    ["", undefined],
    ["010.0.0.1", undefined],
    ["10.0.0", undefined],
    ["10.0.0.256", undefined],
    ["0x10.0.0.1", undefined],
    [" 10.0.0.1", undefined],
    ["10.0.0.1/24", undefined],
    ["fe80::1%eth0", undefined],
    ["1:2:3:4:5:6:7:8:9", undefined],
    ["1:2:3:4:5:6:7::8", undefined],
    ["1::2::3", undefined],
    [":::", undefined],
    [":1::", undefined],
    ["12345::", undefined],
    ["1.2.3.4::", undefined],
    ["::ffff:10.0.0.01", undefined],
    ["worker-a", undefined],
  ];
  for (const [text, want] of cases) {
    test(`canonicalIP() maps ${JSON.stringify(text)} to ${want ?? "undefined"}`, () => {
      expect(canonicalIP(text)).toBe(want);
    });
  }
});

describe("nodeNameFromUsername()", () => {
  const cases: Array<[string, string | undefined]> = [
    ["system:node:worker-a", "worker-a"],
    ["system:node:worker-a.example.com", "worker-a.example.com"],
    ["system:node:", undefined],
    ["system:node:Worker-A", undefined],
    ["system:node:-a", undefined],
    ["system:node:a/b", undefined],
    ["system:node:a:b", undefined],
    [`system:node:${"a".repeat(254)}`, undefined],
    ["system:nodes:worker-a", undefined],
    ["worker-a", undefined],
    ["system:serviceaccount:kube-system:worker-a", undefined],
  ];
  for (const [username, want] of cases) {
    test(`nodeNameFromUsername() maps ${JSON.stringify(username.slice(0, 40))} to ${want ?? "undefined"}`, () => {
      expect(nodeNameFromUsername(username)).toBe(want);
    });
  }
});

describe("API object mapping", () => {
  test("csrInputFrom() reads the spec and condition types, defaulting absent lists", () => {
    const obj = {
      metadata: { name: "csr-1" },
      spec: { signerName: KUBELET_SERVING_SIGNER, request: "UEVN", username: USER_A },
      status: { conditions: [{ type: "Approved", status: "True" }] },
    } as V1CertificateSigningRequest;
    expect(csrInputFrom(obj)).toEqual({
      name: "csr-1",
      signerName: KUBELET_SERVING_SIGNER,
      username: USER_A,
      groups: [],
      usages: [],
      request: "UEVN",
      conditions: [{ type: "Approved" }],
    });
  });

  test("nodeInputFrom() reads the name, status addresses and provided-node-ip annotation", () => {
    const node = {
      metadata: {
        name: "worker-a",
        annotations: { "alpha.kubernetes.io/provided-node-ip": "10.0.0.1,fd00::1" },
      },
      status: { addresses: [{ type: "InternalIP", address: "10.0.0.1" }] },
    } as V1Node;
    expect(nodeInputFrom(node)).toEqual({
      name: "worker-a",
      addresses: [{ type: "InternalIP", address: "10.0.0.1" }],
      providedNodeIP: "10.0.0.1,fd00::1",
    });
    expect(nodeInputFrom({ metadata: { name: "b" } } as V1Node)).toEqual({ name: "b", addresses: [] });
    const lean = leanNode({ ...node, metadata: { ...node.metadata, creationTimestamp: new Date(0) } });
    expect(nodeInputFrom(lean)).toEqual(nodeInputFrom(node));
  });
});

describe("csrMetrics()", () => {
  test("csrMetrics() counts approvals and denials by status and denials by reason", () => {
    const reg = new Registry();
    const m = csrMetrics(reg);
    m.record({ action: "approve", reason: APPROVE_REASON, message: "" });
    m.record({ action: "deny", reason: "IPNotOwned", message: "" });
    m.record({ action: "deny", reason: "IPNotOwned", message: "" });
    m.record({ action: "wait", reason: "NodeNotFound", message: "" });
    m.record({ action: "ignore", reason: "OtherSigner" });
    const text = reg.expose();
    expect(text).toContain('talosccm_csr_approval_count{status="approve"} 1');
    expect(text).toContain('talosccm_csr_approval_count{status="deny"} 2');
    expect(text).toContain('talosccm_csr_denied_total{reason="IPNotOwned"} 2');
    expect(csrMetrics(reg).approvals).toBe(m.approvals);
  });
});
