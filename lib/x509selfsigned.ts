// The serving certificate the secure port makes for itself without --tls-cert-file: ECDSA P-256,
// self-signed, valid one year, for the host's names and the bind address. The DER is written out
// rather than taken from @peculiar/asn1-x509: loading that library at every start cost ~2.5 MB of
// resident memory and ~15 ms.

import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { tryParseIP } from "./cidr.ts";

/** A PEM certificate and key. */
export interface ServingCert {
  cert: string;
  key: string;
}

/** A DER element: tag, definite length, contents. */
function der(tag: number, ...parts: Uint8Array[]): Uint8Array {
  const body = Buffer.concat(parts);
  const n = body.length;
  const len = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff];
  return Buffer.concat([Uint8Array.of(tag, ...len), body]);
}

const seq = (...parts: Uint8Array[]) => der(0x30, ...parts);

function oid(dotted: string): Uint8Array {
  const [a = 0, b = 0, ...rest] = dotted.split(".").map(Number);
  const out = [40 * a + b];
  for (const arc of rest) {
    const base128 = [arc & 0x7f];
    for (let v = arc >>> 7; v > 0; v >>>= 7) base128.unshift((v & 0x7f) | 0x80);
    out.push(...base128);
  }
  return der(0x06, Uint8Array.from(out));
}

/** UTCTime until 2049, GeneralizedTime after, as RFC 5280 requires. */
function time(ms: number): Uint8Array {
  const iso = new Date(ms).toISOString(); // 2026-01-02T03:04:05.678Z
  const digits = iso.slice(0, 19).replace(/[-:T]/g, "");
  const utc = Number(iso.slice(0, 4)) < 2050;
  return der(utc ? 0x17 : 0x18, Buffer.from(`${utc ? digits.slice(2) : digits}Z`));
}

function extension(id: string, critical: boolean, value: Uint8Array): Uint8Array {
  return seq(oid(id), ...(critical ? [Uint8Array.of(0x01, 0x01, 0xff)] : []), der(0x04, value));
}

/** A SubjectAltName entry: iPAddress ([7], 4 or 16 bytes) for IPs, dNSName ([2]) otherwise. */
function generalName(host: string): Uint8Array {
  const ip = tryParseIP(host);
  if (!ip) return der(0x82, Buffer.from(host));
  const bytes = new Uint8Array(ip.family === 4 ? 4 : 16);
  let v = ip.value;
  for (let i = bytes.length - 1; i >= 0; i--, v >>= 8n) bytes[i] = Number(v & 0xffn);
  return der(0x87, bytes);
}

/**
 * Makes a self-signed ECDSA P-256 serving certificate for `hosts` (DNS names and IPs), valid one year.
 */
export function selfSignedCertificate(hosts: string[]): ServingCert {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const ecdsaWithSha256 = seq(oid("1.2.840.10045.4.3.2"));
  const cn = `${hosts[0] ?? "localhost"}@${Math.floor(Date.now() / 1000)}`;
  const name = seq(der(0x31, seq(oid("2.5.4.3"), der(0x0c, Buffer.from(cn)))));
  const serial = randomBytes(16);
  // Positive, and never a leading zero byte: DER wants minimal integers, and BoringSSL refuses a
  // certificate whose serial starts 0x00 0x0…-0x7… ("INVALID_INTEGER", one start in 256).
  serial[0] = ((serial[0] as number) & 0x7f) | 0x40;
  const now = Date.now();
  const tbs = seq(
    der(0xa0, der(0x02, Uint8Array.of(2))), // version v3
    der(0x02, serial),
    ecdsaWithSha256,
    name,
    seq(time(now - 60_000), time(now + 365 * 86_400_000)),
    name,
    publicKey.export({ type: "spki", format: "der" }),
    der(
      0xa3,
      seq(
        extension("2.5.29.19", true, seq()), // basicConstraints: not a CA
        extension("2.5.29.15", true, Uint8Array.of(0x03, 0x02, 0x07, 0x80)), // keyUsage: digitalSignature
        extension("2.5.29.37", false, seq(oid("1.3.6.1.5.5.7.3.1"))), // extKeyUsage: serverAuth
        extension("2.5.29.17", false, seq(...hosts.map(generalName))), // subjectAltName
      ),
    ),
  );
  const signature = sign("sha256", tbs, privateKey);
  const cert = seq(tbs, ecdsaWithSha256, der(0x03, Uint8Array.of(0), signature));
  const b64 = Buffer.from(cert).toString("base64");
  return {
    cert: `-----BEGIN CERTIFICATE-----\n${b64.match(/.{1,64}/g)?.join("\n")}\n-----END CERTIFICATE-----\n`,
    key: privateKey.export({ type: "pkcs8", format: "pem" }) as string,
  };
}
