// Kubelet serving CSR policy: strict PKCS#10 parsing and the pure decision whether a
// `kubernetes.io/kubelet-serving` CertificateSigningRequest may be approved for the node that asks.
// This file is the project's security boundary: it does no I/O, never throws from `decide()` or
// `screen()`, and fails closed. What the kubelet itself writes (its Node's addresses and
// provided-node-ip) is checked against what no kubelet controls: the other Nodes, and Talos —
// whose answer counts only when the answering machine names itself as the requester.
// The controller that watches CSRs and writes /approval (lib/csrapprover.ts) is built on top.
// The DER is read here rather than with an ASN.1 library: a CSR's few structures are quickly
// walked, and the library cost ~1.4 ms of CPU per request in the binary and memory at every start.

import { constants, createPublicKey, type KeyObject, verify } from "node:crypto";
import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import {
  canonicalIP,
  formatIP,
  type IPAddress,
  ipFromBytes,
  ipReadings,
  tryParseIP,
  unmapIPv4,
} from "./cidr.ts";
import { type Counter, type Registry, registry } from "./metrics.ts";
import {
  canonicalDNS,
  canonicalHost,
  entryHolding,
  type NetworkView,
  NO_NETWORKS,
  reservedName,
  specialIP,
  subnetEdgeOf,
} from "./sharedaddresses.ts";
import { isDNS1123Subdomain } from "./validation.ts";
import { KUBELET_SERVING_SIGNER, PROVIDED_NODE_IP_ANNOTATION } from "./wellknown.ts";

/**
 * Largest accepted PEM request, in bytes. A kubelet serving CSR with an RSA-4096 key and a dozen
 * SANs is under 3 KiB; the limit bounds parsing and verification work for hostile input.
 */
export const MAX_REQUEST_BYTES = 16 * 1024;

/** Condition reason written with an approval. */
export const APPROVE_REASON = "TalosCCMApprove";

const USERNAME_PREFIX = "system:node:";
const NODES_GROUP = "system:nodes";
const MAX_DER_DEPTH = 32;
const MIN_RSA_BITS = 2048;
// Verification cost grows with the modulus; nothing legitimate asks for more.
const MAX_RSA_BITS = 8192;

/** The fields of a CertificateSigningRequest that the policy reads. */
export interface CsrInput {
  /** `metadata.name`: not judged; carried for the controller's logs and Events. */
  name: string;
  signerName: string;
  /** `spec.username`: the authenticated requester, set by the API server. */
  username: string;
  groups: string[];
  usages: string[];
  /** `spec.request` as in the API object's JSON: base64 of the PEM text. */
  request: string;
  /** `status.conditions`: any condition (Approved, Denied, Failed) means the CSR is decided. */
  conditions: Array<{ type: string }>;
}

/** The fields of the requester's Node that the policy reads. */
export interface NodeInput {
  name: string;
  /** `status.addresses`, any type. */
  addresses: Array<{ type: string; address: string }>;
  /** The `alpha.kubernetes.io/provided-node-ip` annotation: one IP or "v4,v6". */
  providedNodeIP?: string;
}

/**
 * What Talos says about the machine behind the requester's Node, all from one Talos node: the one
 * that answered on the Node's IP. The Node's IPs are the kubelet's to write, so `nodename` is what
 * makes the rest count: a kubelet that points its IP at another machine gets that machine's name.
 */
export interface TalosFacts {
  /** The IP the facts were read on (a node IP of the Node); for messages. */
  nodeIP: string;
  /** The Kubernetes node name the answering Talos node registers its kubelet as (Nodename). */
  nodename: string;
  /** `address` of every AddressStatus it reports (`ip` or `ip/prefix`). */
  addresses: string[];
  /**
   * Its own DNS names: hostname and FQDN (HostnameStatus), PlatformMetadata hostname, internalDNS
   * and externalDNS. Empty when not read: any DNS SAN besides the node name is then denied.
   */
  dnsNames: string[];
  /**
   * Its addresses (canonical text) that sit on links that are not its own network, each with why
   * (`addressesOnSharedLinks()` of lib/sharedaddresses.ts): loopback, dummy, veth, tunnels.
   */
  sharedAddresses: ReadonlyMap<string, string>;
  /**
   * Its NodeIPConfig `excludeSubnets`: what Talos itself never gives the kubelet as a node IP
   * (the cluster's pod and Service CIDRs and every virtual IP configured on the machine).
   */
  excludedSubnets: string[];
}

/** What `screen()` leaves to Talos: the CSR passed every other check. */
export interface TalosQuestion {
  action: "confirm";
  /** IP SANs Talos must report (canonical text). */
  ipAddresses: string[];
  /** DNS SANs other than the node name, which Talos must know (`TalosFacts.dnsNames`). */
  dnsNames: string[];
}

/** Why a CSR is left alone. */
export type IgnoreReason = "AlreadyDecided" | "OtherSigner";

/** Stable codes for each failed check, written as the Denied condition's reason (README table). */
export const DENY_REASONS = [
  "UsernameMismatch",
  "GroupMismatch",
  "BadUsages",
  "InvalidRequest",
  "WeakKey",
  "BadSignature",
  "SubjectMismatch",
  "ForbiddenSAN",
  "NonUniqueIP",
  "NoSAN",
  "ClusterNetworkIP",
  "SharedIP",
  "SharedDNSName",
  "DNSNameNotOwned",
  "DNSNameOfOtherNode",
  "IPNotOwned",
  "IPOfOtherNode",
  "TalosNodeMismatch",
  "IPNotReportedByTalos",
  "DNSNameNotReportedByTalos",
] as const;

/** A failed check's code: one of {@link DENY_REASONS}. */
export type DenyReason = (typeof DENY_REASONS)[number];

/** What the controller should do with a CSR. */
export type Decision =
  | { action: "ignore"; reason: IgnoreReason }
  | { action: "wait"; reason: "NodeNotFound"; message: string }
  | { action: "approve"; reason: typeof APPROVE_REASON; message: string }
  | { action: "deny"; reason: DenyReason; message: string };

/** The public key of a request, as far as the policy cares. */
export type PublicKeyInfo =
  | { type: "rsa"; bits: number; exponent: bigint }
  | { type: "ec"; curve: string }
  | { type: "ed25519" }
  | { type: "unsupported"; algorithm: string };

/** A decoded PKCS#10 request. Strings are as encoded; IPs are canonical text (`canonicalIP()` of lib/cidr.ts). */
export interface ParsedCsr {
  /** Every subject CN, in order (a well-formed request has exactly one). */
  commonNames: string[];
  /** Every subject O, in order. */
  organizations: string[];
  dnsNames: string[];
  ipAddresses: string[];
  emailAddresses: string[];
  uris: string[];
  /** Kinds of any other SAN present (`otherName`, `directoryName`, `registeredID`, ...). */
  otherNames: string[];
  publicKey: PublicKeyInfo;
  /** Proof of possession: whether the signature verifies with the request's own key. */
  signature: { algorithm: string; valid: boolean; problem?: string };
}

/** Thrown by `parseCertificateRequest` for any input that is not one well-formed DER request. */
export class CsrParseError extends Error {
  override readonly name = "CsrParseError";
}

// ---------------------------------------------------------------------------------------------
// DER

interface Tlv {
  /** The identifier octet. */
  tag: number;
  start: number;
  contentStart: number;
  end: number;
}

/** Reads one DER element at `offset`, ending at or before `limit`. */
function readTlv(der: Uint8Array, offset: number, limit: number): Tlv {
  const tag = der[offset];
  const first = der[offset + 1];
  if (tag === undefined || first === undefined || offset + 2 > limit) {
    throw new CsrParseError("Cannot parse DER: truncated element");
  }
  if ((tag & 0x1f) === 0x1f) throw new CsrParseError("Cannot parse DER: high tag numbers are not used");
  // End-of-contents only closes an indefinite length, which DER does not have.
  if (tag === 0) throw new CsrParseError("Cannot parse DER: end-of-contents marker");
  let length = first;
  let contentStart = offset + 2;
  if (first & 0x80) {
    const n = first & 0x7f;
    if (n === 0) throw new CsrParseError("Cannot parse DER: indefinite length");
    if (n > 3) throw new CsrParseError("Cannot parse DER: length too large");
    if (contentStart + n > limit) throw new CsrParseError("Cannot parse DER: truncated length");
    length = 0;
    for (let i = 0; i < n; i++) length = length * 256 + (der[contentStart + i] as number);
    if (der[contentStart] === 0 || length < 0x80) {
      throw new CsrParseError("Cannot parse DER: length not minimally encoded");
    }
    contentStart += n;
  }
  const end = contentStart + length;
  if (end > limit) throw new CsrParseError("Cannot parse DER: element overruns its container");
  return { tag, start: offset, contentStart, end };
}

/** The elements inside a constructed element. */
function children(der: Uint8Array, parent: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = parent.contentStart; at < parent.end; ) {
    const child = readTlv(der, at, parent.end);
    out.push(child);
    at = child.end;
  }
  return out;
}

/** Whether `elements` carry exactly `tags`, in order. */
function shaped(elements: Tlv[], tags: number[]): boolean {
  return elements.length === tags.length && elements.every((e, i) => e.tag === tags[i]);
}

/**
 * Checks that `der` is exactly one element in distinguished encoding (definite minimal lengths,
 * primitive strings), so that this parser and Go's, which issues the certificate, cannot read
 * different things from the same bytes.
 */
function checkDer(der: Uint8Array): Tlv {
  const root = readTlv(der, 0, der.length);
  if (root.end !== der.length) throw new CsrParseError("Cannot parse DER: trailing data");
  const walk = (tlv: Tlv, depth: number): void => {
    if (!(tlv.tag & 0x20)) return;
    if (depth > MAX_DER_DEPTH) throw new CsrParseError("Cannot parse DER: nesting too deep");
    const universal = (tlv.tag & 0xc0) === 0;
    if (universal && tlv.tag !== 0x30 && tlv.tag !== 0x31) {
      throw new CsrParseError("Cannot parse DER: constructed string encoding");
    }
    for (const c of children(der, tlv)) walk(c, depth + 1);
  };
  walk(root, 0);
  return root;
}

// ---------------------------------------------------------------------------------------------
// PKCS#10

const OID = {
  commonName: "2.5.4.3",
  organization: "2.5.4.10",
  extensionRequest: "1.2.840.113549.1.9.14",
  rsaEncryption: "1.2.840.113549.1.1.1",
  ecPublicKey: "1.2.840.10045.2.1",
  ed25519: "1.3.101.112",
  rsaPss: "1.2.840.113549.1.1.10",
  mgf1: "1.2.840.113549.1.1.8",
  subjectAltName: "2.5.29.17",
  sha256: "2.16.840.1.101.3.4.2.1",
  sha384: "2.16.840.1.101.3.4.2.2",
  sha512: "2.16.840.1.101.3.4.2.3",
} as const;

const HASHES: Record<string, { name: string; bytes: number }> = {
  [OID.sha256]: { name: "sha256", bytes: 32 },
  [OID.sha384]: { name: "sha384", bytes: 48 },
  [OID.sha512]: { name: "sha512", bytes: 64 },
};

type KeyKind = "rsa" | "ec" | "ed25519";

// SHA-1 and MD5 signatures are refused: a collision would let a request prove possession of
// nothing.
const SIGNATURES: Record<string, { name: string; key: KeyKind; hash: string | null }> = {
  "1.2.840.113549.1.1.11": { name: "sha256WithRSAEncryption", key: "rsa", hash: "sha256" },
  "1.2.840.113549.1.1.12": { name: "sha384WithRSAEncryption", key: "rsa", hash: "sha384" },
  "1.2.840.113549.1.1.13": { name: "sha512WithRSAEncryption", key: "rsa", hash: "sha512" },
  "1.2.840.10045.4.3.2": { name: "ecdsa-with-SHA256", key: "ec", hash: "sha256" },
  "1.2.840.10045.4.3.3": { name: "ecdsa-with-SHA384", key: "ec", hash: "sha384" },
  "1.2.840.10045.4.3.4": { name: "ecdsa-with-SHA512", key: "ec", hash: "sha512" },
  [OID.ed25519]: { name: "Ed25519", key: "ed25519", hash: null },
};

// Named only so that the denial says what was refused.
const REFUSED_SIGNATURES: Record<string, string> = {
  "1.2.840.113549.1.1.4": "md5WithRSAEncryption",
  "1.2.840.113549.1.1.5": "sha1WithRSAEncryption",
  "1.2.840.10045.4.1": "ecdsa-with-SHA1",
};

const CURVES: Record<string, string> = { prime256v1: "P-256", secp384r1: "P-384", secp521r1: "P-521" };

/** The content octets of `t`. */
function contentOf(der: Uint8Array, t: Tlv): Uint8Array {
  return der.subarray(t.contentStart, t.end);
}

/**
 * Decodes an OBJECT IDENTIFIER as dotted text. Refused, as Go refuses them: an empty one, a
 * sub-identifier that is not minimally encoded or that does not end, and (beyond Go's 31 bits,
 * short of losing precision) an arc over 2^53.
 */
function oidOf(der: Uint8Array, t: Tlv): string {
  if (t.tag !== 0x06) throw new CsrParseError("Cannot parse DER: expected an object identifier");
  const arcs: number[] = [];
  let value = 0;
  let fresh = true;
  for (const b of contentOf(der, t)) {
    if (fresh && b === 0x80)
      throw new CsrParseError("Cannot parse DER: object identifier not minimally encoded");
    if (value > (Number.MAX_SAFE_INTEGER - 0x7f) / 0x80) {
      throw new CsrParseError("Cannot parse DER: object identifier arc too large");
    }
    value = value * 0x80 + (b & 0x7f);
    fresh = !(b & 0x80);
    if (fresh) {
      arcs.push(value);
      value = 0;
    }
  }
  const [first, ...rest] = arcs;
  if (first === undefined || !fresh) throw new CsrParseError("Cannot parse DER: truncated object identifier");
  const top = first < 40 ? 0 : first < 80 ? 1 : 2;
  return [top, first - 40 * top, ...rest].join(".");
}

/** A BOOLEAN's content as DER (and Go) have it: one octet, 0x00 or 0xFF. */
function isDerBoolean(content: Uint8Array): boolean {
  return content.length === 1 && (content[0] === 0x00 || content[0] === 0xff);
}

/** An AlgorithmIdentifier: its OID and, when present, its parameters element. */
interface Algorithm {
  algorithm: string;
  parameters?: Tlv;
}

function algorithmOf(der: Uint8Array, t: Tlv): Algorithm {
  const [oid, parameters, ...extra] = t.tag === 0x30 ? children(der, t) : [];
  if (!oid || extra.length) throw new CsrParseError("Cannot parse DER: malformed AlgorithmIdentifier");
  const algorithm = oidOf(der, oid);
  return parameters ? { algorithm, parameters } : { algorithm };
}

const latin1 = (bytes: Uint8Array) =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("latin1");
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The string types Go reads a name attribute as, by tag, and how each is read here. A UTF8String
 * that is not UTF-8 is refused, as Go refuses it; PrintableString, IA5String and TeletexString are
 * read byte by byte; BMPString is big-endian UTF-16. Go drops a value of any other type (the
 * certificate would not carry it), so such a value is not a string here either.
 */
const STRING_TYPES = new Map<number, (bytes: Uint8Array) => string>([
  [
    0x0c, // UTF8String
    (b) => {
      try {
        return utf8.decode(b);
      } catch {
        throw new CsrParseError("Cannot parse subject: UTF8String is not UTF-8");
      }
    },
  ],
  [0x13, latin1], // PrintableString
  [0x14, latin1], // TeletexString
  [0x16, latin1], // IA5String
  [
    0x1e, // BMPString
    (b) => {
      if (b.length % 2) throw new CsrParseError("Cannot parse subject: BMPString of odd length");
      let s = "";
      for (let i = 0; i < b.length; i += 2)
        s += String.fromCharCode(((b[i] as number) << 8) | (b[i + 1] as number));
      return s;
    },
  ],
]);

/**
 * Reads a Name (SEQUENCE OF SET OF {type, value}), checking every attribute's shape.
 * @returns every value of the attributes whose type is in `wanted`, by type, in order
 * @throws {CsrParseError} when the Name is malformed or a wanted value is not a string
 */
function nameStrings(der: Uint8Array, name: Tlv, wanted: readonly string[]): Map<string, string[]> {
  const out = new Map(wanted.map((type) => [type, [] as string[]]));
  if (name.tag !== 0x30) throw new CsrParseError("Cannot parse subject: not a Name");
  for (const rdn of children(der, name)) {
    if (rdn.tag !== 0x31) throw new CsrParseError("Cannot parse subject: relative name is not a SET");
    for (const atv of children(der, rdn)) {
      const [type, value, ...extra] = atv.tag === 0x30 ? children(der, atv) : [];
      if (!type || !value || extra.length)
        throw new CsrParseError("Cannot parse subject: malformed attribute");
      const oid = oidOf(der, type);
      const values = out.get(oid);
      if (!values) continue;
      const read = STRING_TYPES.get(value.tag);
      if (!read) throw new CsrParseError(`Cannot parse subject: attribute ${oid} is not a string`);
      values.push(read(contentOf(der, value)));
    }
  }
  return out;
}

/**
 * Reads RSASSA-PSS parameters. Only what Go's crypto/x509 accepts is accepted: an explicit SHA-2
 * hash, MGF1 over the same hash, salt length equal to the hash length, trailer field 1.
 */
function pssHash(der: Uint8Array, params: Tlv | undefined): { name: string; saltLength: number } {
  if (!params) throw new Error("RSASSA-PSS parameters are missing");
  let hash: string | undefined;
  let mgfHash: string | undefined;
  let salt = 20;
  for (const field of children(der, params)) {
    const [inner] = children(der, field);
    if (!inner) throw new Error("empty RSASSA-PSS parameter");
    switch (field.tag) {
      case 0xa0:
        hash = algorithmOf(der, inner).algorithm;
        break;
      case 0xa1: {
        const mgf = algorithmOf(der, inner);
        if (mgf.algorithm !== OID.mgf1 || !mgf.parameters) throw new Error("mask generation is not MGF1");
        mgfHash = algorithmOf(der, mgf.parameters).algorithm;
        break;
      }
      case 0xa2:
      case 0xa3: {
        if (inner.tag !== 0x02 || inner.end - inner.contentStart > 2) throw new Error("bad integer");
        let n = 0;
        for (const x of contentOf(der, inner)) n = n * 256 + x;
        if (field.tag === 0xa2) salt = n;
        else if (n !== 1) throw new Error("trailer field is not 1");
        break;
      }
      default:
        throw new Error("unknown RSASSA-PSS parameter");
    }
  }
  const h = hash === undefined ? undefined : HASHES[hash];
  if (!h) throw new Error("RSASSA-PSS hash is not SHA-256, SHA-384 or SHA-512");
  if (mgfHash !== hash) throw new Error("RSASSA-PSS MGF1 hash differs from the signature hash");
  if (salt !== h.bytes) throw new Error("RSASSA-PSS salt length differs from the hash length");
  return { name: h.name, saltLength: salt };
}

function publicKeyInfo(algorithm: string, key: KeyObject): PublicKeyInfo {
  const details = key.asymmetricKeyDetails ?? {};
  if (algorithm === OID.rsaEncryption && key.asymmetricKeyType === "rsa") {
    return { type: "rsa", bits: details.modulusLength ?? 0, exponent: details.publicExponent ?? 0n };
  }
  if (algorithm === OID.ecPublicKey && key.asymmetricKeyType === "ec") {
    const curve = details.namedCurve ?? "";
    return { type: "ec", curve: CURVES[curve] ?? curve };
  }
  if (algorithm === OID.ed25519 && key.asymmetricKeyType === "ed25519") return { type: "ed25519" };
  return { type: "unsupported", algorithm };
}

function checkSignature(
  der: Uint8Array,
  alg: Algorithm,
  key: KeyObject,
  keyInfo: PublicKeyInfo,
  tbs: Uint8Array,
  sig: Uint8Array,
): ParsedCsr["signature"] {
  const known = SIGNATURES[alg.algorithm];
  const name =
    alg.algorithm === OID.rsaPss
      ? "RSASSA-PSS"
      : (known?.name ?? REFUSED_SIGNATURES[alg.algorithm] ?? alg.algorithm);
  const fail = (problem: string) => ({ algorithm: name, valid: false, problem });
  if (!known && alg.algorithm !== OID.rsaPss) return fail(`signature algorithm ${name} is not accepted`);
  const keyKind = known?.key ?? "rsa";
  if (keyInfo.type !== keyKind)
    return fail(`signature algorithm ${name} does not match the ${keyInfo.type} key`);
  try {
    let ok: boolean;
    if (alg.algorithm === OID.rsaPss) {
      const pss = pssHash(der, alg.parameters);
      ok = verify(
        pss.name,
        tbs,
        { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: pss.saltLength },
        sig,
      );
    } else {
      ok = verify(known?.hash ?? null, tbs, key, sig);
    }
    return ok ? { algorithm: name, valid: true } : fail("signature does not verify with the request's key");
  } catch (err) {
    return fail(`signature cannot be checked: ${err instanceof Error ? err.message : String(err)}`);
  }
}

interface Sans {
  dnsNames: string[];
  ipAddresses: string[];
  emailAddresses: string[];
  uris: string[];
  otherNames: string[];
}

/** The IP literal of a 4- or 16-byte iPAddress, canonical as `canonicalIP()` writes it. */
function ipOf(bytes: Uint8Array): string {
  if (bytes.length !== 4 && bytes.length !== 16)
    throw new CsrParseError("Cannot parse subjectAltName: IP address is not 4 or 16 bytes");
  return formatIP(unmapIPv4(ipFromBytes(bytes)));
}

const OTHER_SAN_KINDS = new Map([
  [0xa0, "otherName"],
  [0xa3, "x400Address"],
  [0xa4, "directoryName"],
  [0xa5, "ediPartyName"],
  [0x88, "registeredID"],
]);

/** Reads a subjectAltName extension's value (GeneralNames) into `into`. */
function parseSans(der: Uint8Array, into: Sans): void {
  const root = checkDer(der);
  if (root.tag !== 0x30) throw new CsrParseError("Cannot parse subjectAltName: not a SEQUENCE");
  for (const gn of children(der, root)) {
    const value = contentOf(der, gn);
    switch (gn.tag) {
      case 0x82:
        // An IA5String, as Go requires of a dNSName: a byte above 0x7f is refused, never folded.
        if (value.some((b) => b > 0x7f))
          throw new CsrParseError("Cannot parse subjectAltName: dNSName is malformed");
        into.dnsNames.push(latin1(value));
        break;
      case 0x87:
        into.ipAddresses.push(ipOf(value));
        break;
      case 0x81:
        into.emailAddresses.push(latin1(value));
        break;
      case 0x86:
        into.uris.push(latin1(value));
        break;
      default: {
        // Kinds Go skips; any of them is a ForbiddenSAN, so their insides need no reading.
        const kind = OTHER_SAN_KINDS.get(gn.tag);
        if (!kind) {
          throw new CsrParseError(
            `Cannot parse subjectAltName: unknown name of tag 0x${gn.tag.toString(16)}`,
          );
        }
        into.otherNames.push(kind);
      }
    }
  }
}

/**
 * The SANs of every extensionRequest attribute (`[0] attributes`, required as Go requires it). Every
 * Extension is checked; duplicate extensions are refused, as Go does.
 */
function requestedSans(der: Uint8Array, attributes: Tlv): Sans {
  const sans: Sans = { dnsNames: [], ipAddresses: [], emailAddresses: [], uris: [], otherNames: [] };
  const seen = new Set<string>();
  for (const attr of children(der, attributes)) {
    const [type, values, ...extra] = attr.tag === 0x30 ? children(der, attr) : [];
    if (!type || values?.tag !== 0x31 || extra.length) {
      throw new CsrParseError("Cannot parse attributes: malformed attribute");
    }
    if (oidOf(der, type) !== OID.extensionRequest) continue;
    // Go reads only the first value; reading all of them means nothing Go sees escapes the checks.
    for (const value of children(der, values)) {
      if (value.tag !== 0x30) throw new CsrParseError("Cannot parse extensions: not a SEQUENCE");
      for (const ext of children(der, value)) {
        const fields = ext.tag === 0x30 ? children(der, ext) : [];
        const [id, critical, octets] = fields.length === 2 ? [fields[0], undefined, fields[1]] : fields;
        if (
          !id ||
          octets?.tag !== 0x04 ||
          fields.length > 3 ||
          (critical && (critical.tag !== 0x01 || !isDerBoolean(contentOf(der, critical))))
        ) {
          throw new CsrParseError("Cannot parse extensions: malformed Extension");
        }
        const extnID = oidOf(der, id);
        if (seen.has(extnID)) throw new CsrParseError(`Cannot parse extensions: ${extnID} appears twice`);
        seen.add(extnID);
        if (extnID === OID.subjectAltName) parseSans(contentOf(der, octets), sans);
      }
    }
  }
  return sans;
}

/** Decodes the body of exactly one `CERTIFICATE REQUEST` PEM block with nothing around it. */
function pemBody(pem: string): Uint8Array {
  const text = pem.trim();
  const begin = /^-----BEGIN ([A-Z0-9 ]*)-----\r?\n/.exec(text);
  if (!begin) throw new CsrParseError("Cannot parse PEM: no BEGIN line at the start");
  if (begin[1] !== "CERTIFICATE REQUEST") {
    throw new CsrParseError(
      `Cannot parse PEM: block is ${JSON.stringify(begin[1])}, not CERTIFICATE REQUEST`,
    );
  }
  const endLine = "-----END CERTIFICATE REQUEST-----";
  if (!text.endsWith(endLine)) throw new CsrParseError("Cannot parse PEM: no matching END line at the end");
  const body = text.slice(begin[0].length, text.length - endLine.length).replace(/[ \t\r\n]/g, "");
  if (body.includes("-----")) throw new CsrParseError("Cannot parse PEM: more than one block");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(body) || body.length % 4 !== 0 || body.length === 0) {
    throw new CsrParseError("Cannot parse PEM: body is not base64");
  }
  return new Uint8Array(Buffer.from(body, "base64"));
}

/**
 * Parses and verifies one PEM-encoded PKCS#10 request. Structural problems throw; policy facts
 * (key strength, signature validity, names) are returned for `decide()` to judge.
 * @param pem the PEM text: exactly one `CERTIFICATE REQUEST` block, optional surrounding whitespace
 * @returns the request's names, key and proof-of-possession result
 * @throws {CsrParseError} for anything else: size over `MAX_REQUEST_BYTES`, other labels, several
 *   blocks, bad base64, non-DER or truncated DER, trailing data, malformed names or extensions
 * @example const csr = parseCertificateRequest(pem); if (!csr.signature.valid) deny(csr.signature.problem)
 */
export function parseCertificateRequest(pem: string): ParsedCsr {
  if (typeof pem !== "string") throw new CsrParseError("Cannot parse PEM: not a string");
  if (pem.length > MAX_REQUEST_BYTES) {
    throw new CsrParseError(
      `Cannot parse PEM: ${pem.length} bytes is over the ${MAX_REQUEST_BYTES}-byte limit`,
    );
  }
  try {
    const der = pemBody(pem);
    const root = checkDer(der);
    const top = children(der, root);
    const [tbs, sigAlg, sigBits] = top;
    const fields = tbs && tbs.tag === 0x30 ? children(der, tbs) : [];
    const [version, subject, spki, attributes] = fields;
    const spkiFields = spki && spki.tag === 0x30 ? children(der, spki) : [];
    const keyBits = spkiFields[1];
    // Go checks every tag of the outline, so an outline it would refuse is refused here. Both BIT
    // STRINGs hold whole octets (every accepted key and signature does), so no unused bits.
    if (
      root.tag !== 0x30 ||
      !shaped(top, [0x30, 0x30, 0x03]) ||
      !shaped(fields, [0x02, 0x30, 0x30, 0xa0]) ||
      !shaped(spkiFields, [0x30, 0x03]) ||
      !tbs ||
      !sigAlg ||
      !version ||
      !subject ||
      !spki ||
      !attributes ||
      !sigBits ||
      sigBits.end === sigBits.contentStart ||
      der[sigBits.contentStart] !== 0 ||
      !keyBits ||
      keyBits.end === keyBits.contentStart ||
      der[keyBits.contentStart] !== 0
    ) {
      throw new CsrParseError("Cannot parse request: not a CertificationRequest");
    }
    const names = nameStrings(der, subject, [OID.commonName, OID.organization]);
    const keyAlgorithm = algorithmOf(der, spkiFields[0] as Tlv).algorithm;
    const signatureAlgorithm = algorithmOf(der, sigAlg);
    const v = contentOf(der, version);
    if (v.length !== 1 || v[0] !== 0) {
      const shown = v.length === 1 ? String(v[0]) : `of ${v.length} bytes`;
      throw new CsrParseError(`Cannot parse request: version field ${shown} is not 0 (v1)`);
    }
    let key: KeyObject;
    try {
      key = createPublicKey({
        key: Buffer.from(der.subarray(spki.start, spki.end)),
        format: "der",
        type: "spki",
      });
    } catch (cause) {
      throw new CsrParseError("Cannot parse request: public key is malformed", { cause });
    }
    const publicKey = publicKeyInfo(keyAlgorithm, key);
    const signature = checkSignature(
      der,
      signatureAlgorithm,
      key,
      publicKey,
      der.subarray(tbs.start, tbs.end),
      der.subarray(sigBits.contentStart + 1, sigBits.end),
    );
    return {
      commonNames: names.get(OID.commonName) ?? [],
      organizations: names.get(OID.organization) ?? [],
      ...requestedSans(der, attributes),
      publicKey,
      signature,
    };
  } catch (err) {
    if (err instanceof CsrParseError) throw err;
    const detail = err instanceof Error ? err.message : String(err);
    throw new CsrParseError(`Cannot parse request: ${detail}`, { cause: err });
  }
}

// ---------------------------------------------------------------------------------------------
// Policy

/**
 * The node a CSR speaks for, from the requester's authenticated username — never from the
 * request's own contents, which the requester chooses.
 * @param username `spec.username`, e.g. `system:node:worker-1`
 * @returns the node name, or undefined when the username is not a valid node identity
 * @example nodeNameFromUsername("system:node:worker-1") // "worker-1"
 */
export function nodeNameFromUsername(username: string): string | undefined {
  if (typeof username !== "string" || !username.startsWith(USERNAME_PREFIX)) return undefined;
  const name = username.slice(USERNAME_PREFIX.length);
  return isDNS1123Subdomain(name).length === 0 ? name : undefined;
}

const ALLOWED_USAGES = new Set(["digital signature", "key encipherment", "server auth"]);
const REQUIRED_USAGES = ["digital signature", "server auth"];
const DNS_ADDRESS_TYPES = new Set(["Hostname", "InternalDNS", "ExternalDNS"]);

/** Quotes attacker-controlled text for a message: escaped and truncated. */
function q(value: string): string {
  return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value);
}

function list(values: string[]): string {
  const shown = values.slice(0, 8).map(q).join(", ");
  return values.length > 8 ? `${shown} and ${values.length - 8} more` : shown;
}

function deny(reason: DenyReason, message: string): Decision {
  return { action: "deny", reason, message };
}

function defined<T>(values: Array<T | undefined>): T[] {
  return values.filter((v): v is T => v !== undefined);
}

/** The checks that need only the CSR, in order; returns the parsed request when they all pass. */
function checkRequest(csr: CsrInput, username: string): Decision | ParsedCsr {
  const usages = csr.usages ?? [];
  const stray = usages.filter((u) => !ALLOWED_USAGES.has(u));
  const missing = REQUIRED_USAGES.filter((u) => !usages.includes(u));
  if (stray.length || missing.length) {
    const what = [
      ...(missing.length ? [`missing ${list(missing)}`] : []),
      ...(stray.length ? [`not allowed ${list(stray)}`] : []),
    ];
    return deny(
      "BadUsages",
      `usages must be digital signature and server auth, optionally key encipherment: ${what.join("; ")}`,
    );
  }

  const request = csr.request ?? "";
  const maxBase64 = 4 * Math.ceil(MAX_REQUEST_BYTES / 3);
  if (request.length > maxBase64) {
    return deny(
      "InvalidRequest",
      `request of ${request.length} base64 characters is over the ${MAX_REQUEST_BYTES}-byte limit`,
    );
  }
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(request) || request.length % 4 !== 0) {
    return deny("InvalidRequest", "request is not base64");
  }
  let parsed: ParsedCsr;
  try {
    parsed = parseCertificateRequest(Buffer.from(request, "base64").toString("latin1"));
  } catch (err) {
    return deny("InvalidRequest", err instanceof Error ? err.message : String(err));
  }

  const key = parsed.publicKey;
  if (key.type === "unsupported")
    return deny("WeakKey", `public key algorithm ${key.algorithm} is not accepted`);
  if (key.type === "rsa" && (key.bits < MIN_RSA_BITS || key.bits > MAX_RSA_BITS)) {
    return deny(
      "WeakKey",
      `RSA key of ${key.bits} bits; ${MIN_RSA_BITS} to ${MAX_RSA_BITS} bits are accepted`,
    );
  }
  if (key.type === "rsa" && (key.exponent < 3n || key.exponent % 2n === 0n || key.exponent >= 2n ** 32n)) {
    return deny("WeakKey", `RSA public exponent ${key.exponent} is not accepted`);
  }
  if (key.type === "ec" && key.curve !== "P-256" && key.curve !== "P-384") {
    return deny("WeakKey", `ECDSA curve ${key.curve} is not accepted; P-256 or P-384 are`);
  }
  if (!parsed.signature.valid) {
    return deny("BadSignature", parsed.signature.problem ?? "signature does not verify");
  }

  const [cn, ...moreCN] = parsed.commonNames;
  if (cn !== username || moreCN.length) {
    return deny(
      "SubjectMismatch",
      `subject CN must be exactly the requester ${q(username)}; got ${list(parsed.commonNames)}`,
    );
  }
  if (parsed.organizations.length !== 1 || parsed.organizations[0] !== NODES_GROUP) {
    return deny(
      "SubjectMismatch",
      `subject O must be exactly [${NODES_GROUP}]; got [${list(parsed.organizations)}]`,
    );
  }

  const foreign = [
    ...parsed.emailAddresses.map((e) => `email ${q(e)}`),
    ...parsed.uris.map((u) => `URI ${q(u)}`),
    ...parsed.otherNames,
  ];
  if (foreign.length)
    return deny("ForbiddenSAN", `only DNS and IP SANs are allowed; got ${foreign.slice(0, 8).join(", ")}`);
  for (const dns of parsed.dnsNames) {
    if (dns.includes("*")) return deny("ForbiddenSAN", `wildcard DNS SAN ${q(dns)} is not allowed`);
    // Names that resolve to whoever asks or to cluster objects: a node holding one could
    // impersonate the control plane, a Service or any host to its own clients.
    const why = reservedName(dns);
    if (why) return deny("ForbiddenSAN", `DNS SAN ${q(dns)} ${why}`);
  }
  for (const ip of parsed.ipAddresses) {
    const why = specialIP(tryParseIP(ip) as IPAddress);
    if (why) return deny("NonUniqueIP", `IP SAN ${ip} is ${why}, which identifies no single machine`);
  }
  if (parsed.dnsNames.length === 0 && parsed.ipAddresses.length === 0) {
    return deny("NoSAN", "at least one DNS or IP SAN is required");
  }
  return parsed;
}

/** DNS names (`canonicalDNS()`) and IPs (canonical text), as `claims()` and `requestedClaims()` spell them. */
export interface Claims {
  dns: Set<string>;
  ips: Set<string>;
}

/**
 * The names and IPs a Node claims: its name and DNS-type addresses (`canonicalDNS()`), its IP
 * addresses of any type and its provided node IPs (canonical text). A request's SAN is another
 * Node's when it is in that Node's claims; a controller may index them to find those Nodes without a
 * scan.
 * @param node the Node as policy input
 * @param as `own`: what the requester may be approved for, read strictly (an address that is not
 *   a canonical-enough IP literal claims nothing); `other`: what blocks everyone else, read in every
 *   way a parser might read it (`ipReadings()`), and any address that is no IP as a DNS name
 * @example claims(nodeInputFrom(lean), "other").ips.has("10.0.0.1")
 */
export function claims(node: NodeInput, as: "own" | "other"): Claims {
  const dns = new Set([canonicalDNS(node.name)]);
  const ips = new Set<string>();
  const read = (text: string) =>
    as === "own" ? defined([canonicalIP(text.trim())]) : ipReadings(text).map(formatIP);
  for (const a of node.addresses ?? []) {
    if (typeof a?.address !== "string") continue;
    // As the kubelet does when it builds the request: an address that is an IP is an IP SAN,
    // whatever its type.
    const found = read(a.address);
    for (const ip of found) ips.add(ip);
    if (found.length === 0 && (as === "other" || DNS_ADDRESS_TYPES.has(a.type))) {
      dns.add(canonicalDNS(a.address.trim()));
    }
  }
  for (const part of (node.providedNodeIP ?? "").split(",")) for (const ip of read(part)) ips.add(ip);
  return { dns, ips };
}

/**
 * What a request asks for, spelled as `claims()` spells what a Node has: its DNS SANs in canonical
 * form and its IP SANs. Only the other Nodes that claim one of these can change `screen()`'s or
 * `decide()`'s answer, so they are all the `others` a controller needs to pass.
 * @param checked a request that passed `checkCsr()`
 */
export function requestedClaims(checked: CheckedCsr): Claims {
  return {
    dns: new Set(checked.parsed.dnsNames.map(canonicalDNS)),
    ips: new Set(checked.parsed.ipAddresses),
  };
}

/** `values` each with the other node that claims it, e.g. `"x" (node "b")`. */
function claimedBy(values: string[], owners: Map<string, string>, key: (v: string) => string): string {
  const shown = values.slice(0, 8).map((v) => `${q(v)} (node ${q(owners.get(key(v)) ?? "")})`);
  return values.length > 8 ? `${shown.join(", ")} and ${values.length - 8} more` : shown.join(", ");
}

/** How ownership is judged: against the Node only, up to what Talos must confirm, or with Talos. */
type Mode = { kind: "csr-only" } | { kind: "screen" } | { kind: "talos"; facts: TalosFacts };

/**
 * The checks against what the cluster shares, which need neither the Node nor Talos: no IP SAN in
 * a Service or pod range, no DNS SAN (but the node's own name) a shared name.
 */
function checkNetworks(parsed: ParsedCsr, nodeName: string, networks: NetworkView): Decision | undefined {
  for (const ip of parsed.ipAddresses) {
    const range = networks.rangeOf(tryParseIP(ip) as IPAddress);
    if (range) {
      return deny(
        "ClusterNetworkIP",
        `IP SAN ${ip} is ${range}: it belongs to the cluster, not to one machine`,
      );
    }
  }
  for (const dns of parsed.dnsNames) {
    const c = canonicalDNS(dns);
    const shared = c === canonicalDNS(nodeName) ? undefined : networks.sharedName(c);
    if (shared) return deny("SharedDNSName", `DNS SAN ${q(dns)} is ${shared}, shared by several machines`);
  }
  return undefined;
}

/** Which other Node first claims each name and IP. */
function ownersOf(
  others: Iterable<NodeInput>,
  self: string,
): { dns: Map<string, string>; ips: Map<string, string> } {
  const dns = new Map<string, string>();
  const ips = new Map<string, string>();
  for (const other of others) {
    if (other.name === self) continue;
    const c = claims(other, "other");
    for (const d of c.dns) if (!dns.has(d)) dns.set(d, other.name);
    for (const ip of c.ips) if (!ips.has(ip)) ips.set(ip, other.name);
  }
  return { dns, ips };
}

/**
 * The checks against the Node and the other Nodes, the same in every mode: every SAN is the
 * Node's, and none (but the node's own name) is another Node's.
 */
function checkNodes(parsed: ParsedCsr, node: NodeInput, others: Iterable<NodeInput>): Decision | undefined {
  const own = claims(node, "own");
  const self = canonicalDNS(node.name);
  const strayDNS = parsed.dnsNames.filter((d) => !own.dns.has(canonicalDNS(d)));
  if (strayDNS.length) {
    return deny("DNSNameNotOwned", `DNS SANs ${list(strayDNS)} are not names of node ${q(node.name)}`);
  }
  // The kubelet writes its Node's addresses itself: a name or IP another Node has, or claims, is
  // not this one's to take. (Its own name is proven by the requester's identity, so never refused.)
  const owners = ownersOf(others, node.name);
  const taken = parsed.dnsNames.filter((d) => canonicalDNS(d) !== self && owners.dns.has(canonicalDNS(d)));
  if (taken.length) {
    return deny(
      "DNSNameOfOtherNode",
      `DNS SANs name other nodes: ${claimedBy(taken, owners.dns, canonicalDNS)}`,
    );
  }
  const strayIP = parsed.ipAddresses.filter((ip) => !own.ips.has(ip));
  if (strayIP.length) {
    return deny("IPNotOwned", `IP SANs ${list(strayIP)} are not addresses of node ${q(node.name)}`);
  }
  const shared = parsed.ipAddresses.filter((ip) => owners.ips.has(ip));
  if (shared.length) {
    return deny(
      "IPOfOtherNode",
      `IP SANs are also addresses of other nodes: ${claimedBy(shared, owners.ips, (ip) => ip)}`,
    );
  }
  return undefined;
}

/** The checks against what Talos reports for the machine that proved to be the node. */
function checkTalos(
  parsed: ParsedCsr,
  node: NodeInput,
  talos: TalosFacts,
  extraDNS: string[],
): Decision | undefined {
  if (talos.nodename !== node.name) {
    return deny(
      "TalosNodeMismatch",
      `the Talos node at ${q(talos.nodeIP)}, a node IP of node ${q(node.name)}, is node ${q(talos.nodename)}: ` +
        "the Node's IPs lead to another machine",
    );
  }
  const reported = new Set(defined(talos.addresses.map(canonicalHost)));
  const unconfirmed = parsed.ipAddresses.filter((ip) => !reported.has(ip));
  if (unconfirmed.length) {
    return deny(
      "IPNotReportedByTalos",
      `IP SANs ${list(unconfirmed)} are in node ${q(node.name)}'s status but Talos does not report them`,
    );
  }
  for (const ip of parsed.ipAddresses) {
    const address = tryParseIP(ip) as IPAddress;
    const onLink = talos.sharedAddresses.get(ip);
    if (onLink) return deny("SharedIP", `IP SAN ${ip}: ${onLink}`);
    const excluded = entryHolding(address, talos.excludedSubnets);
    if (excluded) {
      return deny(
        "SharedIP",
        `IP SAN ${ip} is in ${excluded}, which Talos excludes from the machine's node IPs ` +
          "(pod and Service CIDRs, virtual IPs)",
      );
    }
    const edge = subnetEdgeOf(address, talos.addresses);
    if (edge) return deny("NonUniqueIP", `IP SAN ${ip} is the network or broadcast address of ${edge}`);
  }
  const known = new Set(talos.dnsNames.map(canonicalDNS));
  const unknown = extraDNS.filter((d) => !known.has(canonicalDNS(d)));
  if (unknown.length) {
    return deny(
      "DNSNameNotReportedByTalos",
      `DNS SANs ${list(unknown)} are in node ${q(node.name)}'s status but Talos does not know them` +
        (talos.dnsNames.length ? ` (its names: ${list(talos.dnsNames)})` : ""),
    );
  }
  return undefined;
}

/**
 * The checks against the Node, the other Nodes and Talos. The node checks are the same in every
 * mode and come first, so that `screen()`'s denials are exactly `decide()`'s with any Talos facts;
 * CSR-only mode has the same rules with less evidence.
 */
function checkOwnership(
  parsed: ParsedCsr,
  node: NodeInput,
  mode: Mode,
  others: Iterable<NodeInput>,
): Decision | TalosQuestion {
  const failed = checkNodes(parsed, node, others);
  if (failed) return failed;
  const self = canonicalDNS(node.name);
  const extraDNS = parsed.dnsNames.filter((d) => canonicalDNS(d) !== self);
  if (mode.kind === "screen") {
    return { action: "confirm", ipAddresses: parsed.ipAddresses, dnsNames: extraDNS };
  }
  const names = [...parsed.dnsNames.map((d) => `DNS ${q(d)}`), ...parsed.ipAddresses.map((i) => `IP ${i}`)];
  const approved = `Approved by Talos CCM: serving certificate for node ${q(node.name)} with ${names.slice(0, 16).join(", ")}`;
  if (mode.kind === "csr-only") {
    return {
      action: "approve",
      reason: APPROVE_REASON,
      message: `${approved}; checked against the Nodes only`,
    };
  }
  const denied = checkTalos(parsed, node, mode.facts, extraDNS);
  if (denied) return denied;
  return {
    action: "approve",
    reason: APPROVE_REASON,
    message: `${approved}; identity and names confirmed by Talos on ${mode.facts.nodeIP}`,
  };
}

const CHECKED: unique symbol = Symbol("CheckedCsr");

/**
 * A request that passed every check that needs only the request itself, parsed and verified
 * once. `screen()` and `decide()` take it in place of the `CsrInput`, so that a controller that
 * calls both (and looks up the other Nodes by its SANs) parses the request only once. Only
 * `checkCsr()` makes one: the brand is a symbol no API object can carry.
 */
export interface CheckedCsr {
  readonly [CHECKED]: true;
  readonly csr: CsrInput;
  /** The node the requester is (`nodeNameFromUsername(csr.username)`). */
  readonly nodeName: string;
  readonly parsed: ParsedCsr;
}

/**
 * The checks of `decide()` that need neither the Node nor Talos, in `decide()`'s order: not
 * already decided and signer kubelet-serving (else ignore); requester a node in `system:nodes`;
 * usages; the request itself (parsing, key, proof of possession, subject, SANs). Pure and total.
 * @param csr the request
 * @returns the ignore or denial `decide()` would return whatever the Node and Talos say, or the
 *   checked request to pass to `screen()`/`decide()` (and `requestedClaims()`)
 * @example
 * const checked = checkCsr(csr);
 * const d = "action" in checked ? checked : decide(checked, node, facts, others);
 */
export function checkCsr(csr: CsrInput): Decision | CheckedCsr {
  return failClosed((): Decision | CheckedCsr => {
    if ((csr.conditions ?? []).length > 0) return { action: "ignore", reason: "AlreadyDecided" };
    if (csr.signerName !== KUBELET_SERVING_SIGNER) return { action: "ignore", reason: "OtherSigner" };
    const nodeName = nodeNameFromUsername(csr.username);
    if (nodeName === undefined) {
      return deny(
        "UsernameMismatch",
        `requester ${q(String(csr.username))} is not a node (system:node:<name>)`,
      );
    }
    if (!(csr.groups ?? []).includes(NODES_GROUP)) {
      return deny("GroupMismatch", `requester ${q(csr.username)} is not in group ${NODES_GROUP}`);
    }
    const parsed = checkRequest(csr, csr.username);
    if ("action" in parsed) return parsed;
    return { [CHECKED]: true, csr, nodeName, parsed };
  });
}

/** Every check up to the Node's; returns the parsed request and the Node when they all pass. */
function precheck(
  csr: CsrInput | CheckedCsr,
  node: NodeInput | undefined,
  networks: NetworkView,
): Decision | { parsed: ParsedCsr; node: NodeInput } {
  const checked = CHECKED in csr ? csr : checkCsr(csr);
  if ("action" in checked) return checked;
  const shared = checkNetworks(checked.parsed, checked.nodeName, networks);
  if (shared) return shared;
  if (!node || node.name !== checked.nodeName) {
    return {
      action: "wait",
      reason: "NodeNotFound",
      message: `node ${q(checked.nodeName)} does not exist yet`,
    };
  }
  return { parsed: checked.parsed, node };
}

/** Runs `fn`, turning any exception into a denial: a bug or a malformed object never approves. */
function failClosed<T>(fn: () => T): T | Decision {
  try {
    return fn();
  } catch (err) {
    // The reference crash-loops on one bad CSR; here it is denied and the controller goes on.
    return deny(
      "InvalidRequest",
      `Cannot evaluate the request: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/**
 * Decides what to do with a CertificateSigningRequest. Pure and total: it never throws, and any
 * input it cannot fully check is denied. Checks, in order: not already decided and signer is
 * kubelet-serving (else ignore); username `system:node:<name>` and group `system:nodes`; usages;
 * one well-formed PEM request within `MAX_REQUEST_BYTES`; key (RSA 2048–8192, P-256, P-384,
 * Ed25519); proof of possession; subject CN = username and O = [system:nodes]; SANs (DNS/IP only,
 * at least one; no wildcard, no name of `reservedName()`, no IP of `specialIP()`); no IP SAN in
 * the cluster's Service or pod ranges, no DNS SAN a shared name (`networks`);
 * the Node exists (else wait); every DNS SAN is the node name or a Hostname/InternalDNS/ExternalDNS
 * address of it, and no other Node's name or DNS address; every IP SAN is a status address or
 * provided node IP, and no other Node's address in any spelling. Then with Talos: the Talos node
 * that answered is this node, reports every IP SAN on a link of its own and outside what it
 * excludes from node IPs, and knows every DNS SAN other than the node name.
 * @param csr the request, or the result of `checkCsr()` for it (then it is not parsed again)
 * @param node the Node named by `nodeNameFromUsername(csr.username)`, or undefined when it does
 *   not exist (yet); a Node of any other name is treated as absent
 * @param talos what Talos reports for that node; undefined only in CSR-only mode (no Talos API),
 *   when the Node and the other Nodes are all there is to check against
 * @param others the other Nodes (the requester's own is skipped if present): every one, or at
 *   least every one that claims a name or IP of `requestedClaims()` — the rest cannot matter
 * @param networks the cluster's Service and pod ranges and shared names (lib/sharedaddresses.ts)
 * @returns ignore, wait (the Node is missing: retry later), approve or deny with a stable reason
 * @example
 * const d = decide(csr, node, facts, otherNodes);
 * if (d.action === "approve" || d.action === "deny") await writeApproval(csr.name, d);
 */
export function decide(
  csr: CsrInput | CheckedCsr,
  node: NodeInput | undefined,
  talos?: TalosFacts,
  others: Iterable<NodeInput> = [],
  networks: NetworkView = NO_NETWORKS,
): Decision {
  return failClosed(() => {
    const pre = precheck(csr, node, networks);
    if ("action" in pre) return pre;
    const mode: Mode = talos ? { kind: "talos", facts: talos } : { kind: "csr-only" };
    return checkOwnership(pre.parsed, pre.node, mode, others) as Decision;
  });
}

/**
 * Every check of `decide()` that does not need Talos, so that Talos is asked only about requests
 * it can still approve. A decision returned here is the one `decide()` returns with any Talos
 * facts; `confirm` says what Talos must confirm. Pure and total, like `decide()`.
 * @param csr the request, or the result of `checkCsr()` for it (then it is not parsed again)
 * @param node the Node named by the requester, or undefined
 * @param others the other Nodes, as for `decide()`
 * @param networks the cluster's ranges and shared names, as for `decide()`
 * @returns ignore, wait or deny — never approve — or what to ask Talos
 * @example
 * const s = screen(csr, node, others, networks);
 * const d = s.action === "confirm" ? decide(csr, node, await askTalos(s), others, networks) : s;
 */
export function screen(
  csr: CsrInput | CheckedCsr,
  node: NodeInput | undefined,
  others: Iterable<NodeInput> = [],
  networks: NetworkView = NO_NETWORKS,
): Decision | TalosQuestion {
  return failClosed(() => {
    const pre = precheck(csr, node, networks);
    if ("action" in pre) return pre;
    return checkOwnership(pre.parsed, pre.node, { kind: "screen" }, others);
  });
}

/**
 * Maps a CertificateSigningRequest API object to `decide()`'s input; absent lists become empty.
 * @param obj the object as returned by the API (request still base64)
 */
export function csrInputFrom(obj: V1CertificateSigningRequest): CsrInput {
  return {
    name: obj.metadata?.name ?? "",
    signerName: obj.spec.signerName,
    username: obj.spec.username ?? "",
    groups: obj.spec.groups ?? [],
    usages: obj.spec.usages ?? [],
    request: obj.spec.request,
    conditions: (obj.status?.conditions ?? []).map((c) => ({ type: c.type })),
  };
}

/** The parts of a Node `nodeInputFrom` reads: a `V1Node` or the Node cache's lean copy. */
export interface NodeLike {
  metadata?: { name?: string; annotations?: Record<string, string> };
  status?: { addresses?: ReadonlyArray<{ type: string; address: string }> };
}

/**
 * Maps a Node to `decide()`'s input.
 * @param node a Node API object or cached Node
 */
export function nodeInputFrom(node: NodeLike): NodeInput {
  const provided = node.metadata?.annotations?.[PROVIDED_NODE_IP_ANNOTATION];
  return {
    name: node.metadata?.name ?? "",
    addresses: (node.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
    ...(provided === undefined ? {} : { providedNodeIP: provided }),
  };
}

// ---------------------------------------------------------------------------------------------
// Metrics

/** Counter of approvals and denials, label `status` (approve|deny), named as in the reference. */
const CSR_APPROVAL_METRIC = "talosccm_csr_approval_count";
/** Counter of denials, label `reason` (a `DenyReason`). */
const CSR_DENIED_METRIC = "talosccm_csr_denied_total";

/** The CSR counters, registered on a registry. */
export interface CsrMetrics {
  approvals: Counter;
  denials: Counter;
  /** Counts an approve or deny decision (call once it is written); ignore and wait count nothing. */
  record(decision: Decision): void;
}

/**
 * Registers (or finds) the CSR counters.
 * @param reg defaults to the process registry served on /metrics; tests pass their own
 */
export function csrMetrics(reg: Registry = registry): CsrMetrics {
  const approvals = reg.counter(CSR_APPROVAL_METRIC, "Node serving CSRs approved or denied, by status.", [
    "status",
  ]);
  const denials = reg.counter(CSR_DENIED_METRIC, "Node serving CSRs denied, by reason.", ["reason"]);
  return {
    approvals,
    denials,
    record(decision) {
      if (decision.action === "approve") approvals.inc({ status: "approve" });
      if (decision.action === "deny") {
        approvals.inc({ status: "deny" });
        denials.inc({ reason: decision.reason });
      }
    },
  };
}
