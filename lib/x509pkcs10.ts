// PKCS#10 certificate requests, read strictly and verified: exactly one PEM `CERTIFICATE REQUEST`
// block, its DER outline checked tag by tag as Go's crypto/x509 checks it, the subject's CN and O,
// the subjectAltName of the extensionRequest, the public key and the proof of possession (the
// signature over the request with its own key). It judges nothing: the kubelet serving CSR policy
// (lib/csrrequest.ts, lib/csr.ts) does. The DER is read here (with lib/x509der.ts) rather than with
// an ASN.1 library: a CSR's few structures are quickly walked, and the library cost ~1.4 ms of CPU per
// request in the binary and memory at every start.

import { constants, createPublicKey, type KeyObject, verify } from "node:crypto";
import { formatIP, ipFromBytes, unmapIPv4 } from "./cidr.ts";
import {
  checkDer,
  children,
  contentOf,
  DerError,
  hasWholeOctets,
  isDerBoolean,
  oidOf,
  shaped,
  type Tlv,
} from "./x509der.ts";

/**
 * Largest accepted PEM request, in bytes. A kubelet serving CSR with an RSA-4096 key and a dozen
 * SANs is under 3 KiB; the limit bounds parsing and verification work for hostile input.
 */
export const MAX_REQUEST_BYTES = 16 * 1024;

/** The public key of a request, as far as the policy cares. */
export type PublicKeyInfo =
  | { type: "rsa"; bits: number; exponent: bigint }
  | { type: "ec"; curve: string }
  | { type: "ed25519" }
  | { type: "unsupported"; algorithm: string };

/**
 * A decoded PKCS#10 request. Strings are as encoded; IPs are canonical text (`canonicalIP()` of
 * lib/cidr.ts).
 */
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
  override readonly name: string = "CsrParseError";
}

/**
 * Thrown by `parseCertificateRequest()` when a request names more DNS and IP SANs than its caller
 * reads: counted before any of them is decoded and before the signature is checked, so that a
 * padded request costs no more than one at the limit.
 */
export class CsrSanLimitError extends CsrParseError {
  override readonly name = "CsrSanLimitError";
  /** @param count the request's DNS and IP SANs */
  constructor(readonly count: number) {
    super(`Cannot parse subjectAltName: ${count} DNS and IP names`);
  }
}

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

// Keyed by what the request says (OIDs, curve names): Maps, so that no key reads an inherited member.
const HASHES: ReadonlyMap<string, { name: string; bytes: number }> = new Map([
  [OID.sha256, { name: "sha256", bytes: 32 }],
  [OID.sha384, { name: "sha384", bytes: 48 }],
  [OID.sha512, { name: "sha512", bytes: 64 }],
]);

type KeyKind = "rsa" | "ec" | "ed25519";

// SHA-1 and MD5 signatures are refused: a collision would let a request prove possession of
// nothing.
const SIGNATURES: ReadonlyMap<string, { name: string; key: KeyKind; hash: string | null }> = new Map<
  string,
  { name: string; key: KeyKind; hash: string | null }
>([
  ["1.2.840.113549.1.1.11", { name: "sha256WithRSAEncryption", key: "rsa", hash: "sha256" }],
  ["1.2.840.113549.1.1.12", { name: "sha384WithRSAEncryption", key: "rsa", hash: "sha384" }],
  ["1.2.840.113549.1.1.13", { name: "sha512WithRSAEncryption", key: "rsa", hash: "sha512" }],
  ["1.2.840.10045.4.3.2", { name: "ecdsa-with-SHA256", key: "ec", hash: "sha256" }],
  ["1.2.840.10045.4.3.3", { name: "ecdsa-with-SHA384", key: "ec", hash: "sha384" }],
  ["1.2.840.10045.4.3.4", { name: "ecdsa-with-SHA512", key: "ec", hash: "sha512" }],
  [OID.ed25519, { name: "Ed25519", key: "ed25519", hash: null }],
]);

// Named only so that the denial says what was refused.
const REFUSED_SIGNATURES: ReadonlyMap<string, string> = new Map([
  ["1.2.840.113549.1.1.4", "md5WithRSAEncryption"],
  ["1.2.840.113549.1.1.5", "sha1WithRSAEncryption"],
  ["1.2.840.10045.4.1", "ecdsa-with-SHA1"],
]);

const CURVES: ReadonlyMap<string, string> = new Map([
  ["prime256v1", "P-256"],
  ["secp384r1", "P-384"],
  ["secp521r1", "P-521"],
]);

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
  const h = hash === undefined ? undefined : HASHES.get(hash);
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
    return { type: "ec", curve: CURVES.get(curve) ?? curve };
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
  const known = SIGNATURES.get(alg.algorithm);
  const name =
    alg.algorithm === OID.rsaPss
      ? "RSASSA-PSS"
      : (known?.name ?? REFUSED_SIGNATURES.get(alg.algorithm) ?? alg.algorithm);
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

/**
 * Reads a subjectAltName extension's value (GeneralNames) into `into`.
 * @throws {CsrSanLimitError} when it holds more than `maxSans` DNS and IP names (none decoded)
 */
function parseSans(der: Uint8Array, into: Sans, maxSans: number): void {
  const root = checkDer(der);
  if (root.tag !== 0x30) throw new CsrParseError("Cannot parse subjectAltName: not a SEQUENCE");
  const names = children(der, root);
  let count = into.dnsNames.length + into.ipAddresses.length;
  for (const gn of names) if (gn.tag === 0x82 || gn.tag === 0x87) count++;
  if (count > maxSans) throw new CsrSanLimitError(count);
  for (const gn of names) {
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
function requestedSans(der: Uint8Array, attributes: Tlv, maxSans: number): Sans {
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
        if (extnID === OID.subjectAltName) parseSans(contentOf(der, octets), sans, maxSans);
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

/** The elements of a CertificationRequest's outline that are read further. */
interface Outline {
  /** certificationRequestInfo: the part the signature covers. */
  tbs: Tlv;
  version: Tlv;
  subject: Tlv;
  /** subjectPKInfo, whole, and its AlgorithmIdentifier. */
  spki: Tlv;
  keyAlgorithm: Tlv;
  /** The `[0] attributes` of the request info. */
  attributes: Tlv;
  signatureAlgorithm: Tlv;
  /** The signature BIT STRING, whole octets. */
  signatureBits: Tlv;
}

/**
 * Checks that `der` is one DER CertificationRequest outline and returns its parts. Go checks
 * every tag of the outline, so an outline it would refuse is refused here. Both BIT STRINGs hold
 * whole octets (every accepted key and signature does), so no unused bits.
 */
function outlineOf(der: Uint8Array): Outline {
  const root = checkDer(der);
  const top = children(der, root);
  const [tbs, signatureAlgorithm, signatureBits] = top;
  const fields = tbs && tbs.tag === 0x30 ? children(der, tbs) : [];
  const [version, subject, spki, attributes] = fields;
  const spkiFields = spki && spki.tag === 0x30 ? children(der, spki) : [];
  const [keyAlgorithm, keyBits] = spkiFields;
  if (
    root.tag !== 0x30 ||
    !shaped(top, [0x30, 0x30, 0x03]) ||
    !shaped(fields, [0x02, 0x30, 0x30, 0xa0]) ||
    !shaped(spkiFields, [0x30, 0x03]) ||
    !tbs ||
    !signatureAlgorithm ||
    !version ||
    !subject ||
    !spki ||
    !attributes ||
    !keyAlgorithm ||
    !signatureBits ||
    !hasWholeOctets(der, signatureBits) ||
    !keyBits ||
    !hasWholeOctets(der, keyBits)
  ) {
    throw new CsrParseError("Cannot parse request: not a CertificationRequest");
  }
  return { tbs, version, subject, spki, keyAlgorithm, attributes, signatureAlgorithm, signatureBits };
}

/** Refuses any version but 0 (v1), the only one PKCS#10 defines. */
function checkVersion(der: Uint8Array, version: Tlv): void {
  const v = contentOf(der, version);
  if (v.length !== 1 || v[0] !== 0) {
    const shown = v.length === 1 ? String(v[0]) : `of ${v.length} bytes`;
    throw new CsrParseError(`Cannot parse request: version field ${shown} is not 0 (v1)`);
  }
}

/** The request's public key, as node:crypto reads its subjectPKInfo. */
function publicKeyOf(der: Uint8Array, spki: Tlv): KeyObject {
  try {
    return createPublicKey({
      key: Buffer.from(der.subarray(spki.start, spki.end)),
      format: "der",
      type: "spki",
    });
  } catch (cause) {
    throw new CsrParseError("Cannot parse request: public key is malformed", { cause });
  }
}

/**
 * Reads a DER request: the outline, the subject, both algorithms, the version, the key, the
 * signature over the request info with that key, then the SANs.
 */
function readRequest(der: Uint8Array, maxSans: number): ParsedCsr {
  const outline = outlineOf(der);
  const names = nameStrings(der, outline.subject, [OID.commonName, OID.organization]);
  const keyAlgorithm = algorithmOf(der, outline.keyAlgorithm).algorithm;
  const signatureAlgorithm = algorithmOf(der, outline.signatureAlgorithm);
  checkVersion(der, outline.version);
  // The SANs before the key and the signature: a padded request is refused before it costs more.
  const sans = requestedSans(der, outline.attributes, maxSans);
  const key = publicKeyOf(der, outline.spki);
  const publicKey = publicKeyInfo(keyAlgorithm, key);
  const { tbs, signatureBits } = outline;
  const signature = checkSignature(
    der,
    signatureAlgorithm,
    key,
    publicKey,
    der.subarray(tbs.start, tbs.end),
    der.subarray(signatureBits.contentStart + 1, signatureBits.end),
  );
  return {
    commonNames: names.get(OID.commonName) ?? [],
    organizations: names.get(OID.organization) ?? [],
    ...sans,
    publicKey,
    signature,
  };
}

/**
 * Parses and verifies one PEM-encoded PKCS#10 request. Structural problems throw; policy facts
 * (key strength, signature validity, names) are returned for `decide()` to judge.
 * @param pem the PEM text: exactly one `CERTIFICATE REQUEST` block, optional surrounding whitespace
 * @param opts.maxSans the most DNS and IP SANs read (default: no limit)
 * @returns the request's names, key and proof-of-possession result
 * @throws {CsrSanLimitError} for more DNS and IP SANs than `maxSans`
 * @throws {CsrParseError} for anything else: size over `MAX_REQUEST_BYTES`, other labels, several
 *   blocks, bad base64, non-DER or truncated DER, trailing data, malformed names or extensions
 * @example const csr = parseCertificateRequest(pem); if (!csr.signature.valid) deny(csr.signature.problem)
 */
export function parseCertificateRequest(pem: string, opts: { maxSans?: number } = {}): ParsedCsr {
  if (typeof pem !== "string") throw new CsrParseError("Cannot parse PEM: not a string");
  if (pem.length > MAX_REQUEST_BYTES) {
    throw new CsrParseError(
      `Cannot parse PEM: ${pem.length} bytes is over the ${MAX_REQUEST_BYTES}-byte limit`,
    );
  }
  try {
    return readRequest(pemBody(pem), opts.maxSans ?? Number.POSITIVE_INFINITY);
  } catch (err) {
    if (err instanceof CsrParseError) throw err;
    if (err instanceof DerError) throw new CsrParseError(err.message, { cause: err });
    const detail = err instanceof Error ? err.message : String(err);
    throw new CsrParseError(`Cannot parse request: ${detail}`, { cause: err });
  }
}
