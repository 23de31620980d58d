// Test PKI: certificate authorities and leaf certificates for the test bed (kube-apiserver, etcd,
// the fake Talos apid, simulated kubelets, talosconfigs). Everything is made in memory with
// @peculiar/x509 over WebCrypto; nothing here ships in the binary.

import "reflect-metadata";
import { generateKeyPairSync, sign } from "node:crypto";
import { Attributes, CertificationRequest, CertificationRequestInfo } from "@peculiar/asn1-csr";
import { AsnConvert, OctetString } from "@peculiar/asn1-schema";
import {
  AlgorithmIdentifier,
  Attribute,
  AttributeTypeAndValue,
  AttributeValue,
  Extension,
  Extensions,
  type GeneralName,
  id_ce_subjectAltName,
  Name,
  RelativeDistinguishedName,
  SubjectAlternativeName,
  SubjectPublicKeyInfo,
} from "@peculiar/asn1-x509";
import * as x509 from "@peculiar/x509";

/** Key algorithms of the test PKI: ECDSA P-256, Ed25519, RSA. */
export type KeyType = "ecdsa" | "ed25519" | "rsa";

type GenAlg = Parameters<typeof crypto.subtle.generateKey>[0];
type SignAlg = Parameters<typeof crypto.subtle.sign>[0];

const ALGS = {
  ecdsa: { gen: { name: "ECDSA", namedCurve: "P-256" }, sign: { name: "ECDSA", hash: "SHA-256" } },
  ed25519: { gen: { name: "Ed25519" }, sign: { name: "Ed25519" } },
  rsa: {
    gen: {
      name: "RSASSA-PKCS1-v1_5",
      modulusLength: 2048,
      publicExponent: new Uint8Array([1, 0, 1]),
      hash: "SHA-256",
    },
    sign: { name: "RSASSA-PKCS1-v1_5" },
  },
} as const;

/** A certificate with its private key, both PEM. */
export interface KeyPair {
  cert: string;
  key: string;
}

/** A certificate authority able to issue leaves. */
export interface CA extends KeyPair {
  issue(opts: LeafOptions): Promise<KeyPair>;
}

/** Subject, SANs and usage of a leaf certificate. */
export interface LeafOptions {
  cn: string;
  o?: string[];
  dns?: string[];
  ips?: string[];
  usage: "server" | "client" | "both";
  keyType?: KeyType;
  /** Validity in hours (default 24). Negative values make an expired certificate. */
  hours?: number;
  /** PEM label of the private key; Talos writes `ED25519 PRIVATE KEY`. */
  keyLabel?: string;
}

let serial = 1;

function dn(cn: string, o: string[] = []): string {
  const esc = (s: string) => s.replace(/([,+"\\<>;=])/g, "\\$1");
  return [`CN=${esc(cn)}`, ...o.map((x) => `O=${esc(x)}`)].join(", ");
}

/** Generates a key pair of `type` usable for signing. */
async function generateKeys(type: KeyType): Promise<CryptoKeyPair> {
  return (await crypto.subtle.generateKey(ALGS[type].gen as GenAlg, true, [
    "sign",
    "verify",
  ])) as CryptoKeyPair;
}

/** PKCS#8 PEM of a private key, with an optional custom label. */
async function privateKeyPem(key: CryptoKey, label = "PRIVATE KEY"): Promise<string> {
  return derToPem(new Uint8Array(await crypto.subtle.exportKey("pkcs8", key)), label);
}

/** Signing algorithm matching a key pair of `type`. */
function signingAlgorithm(type: KeyType): SignAlg {
  return ALGS[type].sign as SignAlg;
}

/**
 * Creates a self-signed CA.
 * @example const ca = await createCA("test-ca"); const leaf = await ca.issue({cn: "x", usage: "server"})
 */
export async function createCA(cn: string, keyType: KeyType = "ecdsa"): Promise<CA> {
  const keys = await generateKeys(keyType);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: (serial++).toString(16).padStart(2, "0"),
    name: dn(cn),
    notBefore: new Date(now - 3600e3),
    notAfter: new Date(now + 7 * 86400e3),
    keys,
    signingAlgorithm: signingAlgorithm(keyType),
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const caKey = await privateKeyPem(keys.privateKey);
  return {
    cert: cert.toString("pem"),
    key: caKey,
    async issue(opts: LeafOptions): Promise<KeyPair> {
      const type = opts.keyType ?? "ecdsa";
      const leafKeys = await generateKeys(type);
      const hours = opts.hours ?? 24;
      const from = hours < 0 ? Date.now() + hours * 3600e3 * 2 : Date.now() - 3600e3;
      const to = Date.now() + hours * 3600e3;
      const ekus: string[] = [];
      if (opts.usage !== "client") ekus.push(x509.ExtendedKeyUsage.serverAuth);
      if (opts.usage !== "server") ekus.push(x509.ExtendedKeyUsage.clientAuth);
      const sans: x509.JsonGeneralName[] = [
        ...(opts.dns ?? []).map((v) => ({ type: "dns" as const, value: v })),
        ...(opts.ips ?? []).map((v) => ({ type: "ip" as const, value: v })),
      ];
      const extensions: x509.Extension[] = [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.digitalSignature | (type === "rsa" ? x509.KeyUsageFlags.keyEncipherment : 0),
          true,
        ),
        new x509.ExtendedKeyUsageExtension(ekus, false),
        await x509.AuthorityKeyIdentifierExtension.create(cert, false),
      ];
      if (sans.length) extensions.push(new x509.SubjectAlternativeNameExtension(sans, false));
      const leaf = await x509.X509CertificateGenerator.create({
        serialNumber: (serial++).toString(16).padStart(2, "0"),
        subject: dn(opts.cn, opts.o),
        issuer: cert.subject,
        notBefore: new Date(from),
        notAfter: new Date(to),
        publicKey: leafKeys.publicKey,
        signingKey: keys.privateKey,
        signingAlgorithm: signingAlgorithm(keyType),
        extensions,
      });
      return { cert: leaf.toString("pem"), key: await privateKeyPem(leafKeys.privateKey, opts.keyLabel) };
    },
  };
}

/** Subject, SANs and key of a certificate signing request. */
export interface CsrOptions {
  cn: string;
  o?: string[];
  dns?: string[];
  ips?: string[];
  emails?: string[];
  uris?: string[];
  keyType?: KeyType;
  /** RSA modulus length when keyType is rsa. */
  rsaBits?: number;
  /** ECDSA curve when keyType is ecdsa (default P-256). */
  curve?: "P-256" | "P-384" | "P-521";
  /** Signature hash for ecdsa and rsa (default SHA-256). */
  hash?: "SHA-1" | "SHA-256" | "SHA-384" | "SHA-512";
  /** Sign an rsa request with RSASSA-PSS instead of PKCS#1 v1.5. */
  rsaPss?: boolean;
  /** RSASSA-PSS salt length in bytes (default: the hash length). */
  pssSaltLength?: number;
  /** Sign with a different key than the one in the request: a failed proof of possession. */
  wrongSignature?: boolean;
}

function csrAlgorithms(opts: CsrOptions): { gen: GenAlg; sign: SignAlg } {
  const type = opts.keyType ?? "ecdsa";
  const hash = opts.hash ?? "SHA-256";
  if (type === "ecdsa") {
    return {
      gen: { name: "ECDSA", namedCurve: opts.curve ?? "P-256" } as GenAlg,
      sign: { name: "ECDSA", hash } as SignAlg,
    };
  }
  if (type === "rsa") {
    const name = opts.rsaPss ? "RSA-PSS" : "RSASSA-PKCS1-v1_5";
    const saltLength =
      opts.pssSaltLength ?? { "SHA-1": 20, "SHA-256": 32, "SHA-384": 48, "SHA-512": 64 }[hash];
    return {
      gen: { ...ALGS.rsa.gen, name, hash, modulusLength: opts.rsaBits ?? 2048 } as GenAlg,
      sign: (opts.rsaPss ? { name, saltLength } : { name }) as SignAlg,
    };
  }
  return { gen: ALGS[type].gen as GenAlg, sign: ALGS[type].sign as SignAlg };
}

/** A PKCS#10 certificate request made with a fresh key, as PEM. */
export async function createCSR(opts: CsrOptions): Promise<{ csr: string; key: string }> {
  const algs = csrAlgorithms(opts);
  const generate = async () =>
    (await crypto.subtle.generateKey(algs.gen, true, ["sign", "verify"])) as CryptoKeyPair;
  const keys = await generate();
  const signer = opts.wrongSignature
    ? { publicKey: keys.publicKey, privateKey: (await generate()).privateKey }
    : keys;
  const sans: x509.JsonGeneralName[] = [
    ...(opts.dns ?? []).map((v) => ({ type: "dns" as const, value: v })),
    ...(opts.ips ?? []).map((v) => ({ type: "ip" as const, value: v })),
    ...(opts.emails ?? []).map((v) => ({ type: "email" as const, value: v })),
    ...(opts.uris ?? []).map((v) => ({ type: "url" as const, value: v })),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: dn(opts.cn, opts.o),
    keys: signer,
    signingAlgorithm: algs.sign,
    extensions: sans.length ? [new x509.SubjectAlternativeNameExtension(sans)] : [],
  });
  return { csr: csr.toString("pem"), key: await privateKeyPem(keys.privateKey) };
}

/** The DER bytes inside a PEM block. */
export function pemToDer(pem: string): Uint8Array {
  return new Uint8Array(Buffer.from(pem.replace(/-----[A-Z ]+-----/g, "").replace(/\s/g, ""), "base64"));
}

/** A PEM block of `label` around `der`. */
export function derToPem(der: Uint8Array, label = "CERTIFICATE REQUEST"): string {
  const lines =
    Buffer.from(der)
      .toString("base64")
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/** The subjectAltName extension holding `names` (asn1-x509 GeneralName objects). */
export function sanExtension(names: GeneralName[]): Extension {
  return new Extension({
    extnID: id_ce_subjectAltName,
    extnValue: new OctetString(AsnConvert.serialize(new SubjectAlternativeName(names))),
  });
}

/** A hand-built PKCS#10 request, for requests the x509 library would refuse to make. */
export interface RawCsrOptions {
  /** Subject RDNs in order, each a list of [attribute OID, value], values as UTF8String. */
  subject: Array<Array<[string, string]>>;
  /** Requested extensions, one list per extensionRequest attribute. */
  extensionRequests?: Extension[][];
  /** The version field (default 0, v1). */
  version?: number;
}

/**
 * A correctly signed ECDSA P-256 request assembled field by field, for shapes the WebCrypto
 * generator cannot make: several CNs, non-DNS/IP SANs, duplicate extensions, malformed IP SANs.
 */
export function createRawCSR(opts: RawCsrOptions): string {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const subject = new Name(
    opts.subject.map(
      (rdn) =>
        new RelativeDistinguishedName(
          rdn.map(
            ([type, value]) =>
              new AttributeTypeAndValue({ type, value: new AttributeValue({ utf8String: value }) }),
          ),
        ),
    ),
  );
  const attributes = new Attributes(
    (opts.extensionRequests ?? []).map(
      (exts) =>
        new Attribute({
          type: "1.2.840.113549.1.9.14",
          values: [AsnConvert.serialize(new Extensions(exts))],
        }),
    ),
  );
  const info = new CertificationRequestInfo({
    version: opts.version ?? 0,
    subject,
    subjectPKInfo: AsnConvert.parse(publicKey.export({ type: "spki", format: "der" }), SubjectPublicKeyInfo),
    attributes,
  });
  const tbs = Buffer.from(AsnConvert.serialize(info));
  const csr = new CertificationRequest({
    certificationRequestInfo: info,
    signatureAlgorithm: new AlgorithmIdentifier({ algorithm: "1.2.840.10045.4.3.2" }),
    signature: new Uint8Array(sign("sha256", tbs, privateKey)).buffer,
  });
  return derToPem(new Uint8Array(AsnConvert.serialize(csr)));
}
