// Client-certificate authentication of the secure port, as k8s.io/apiserver's delegating
// authentication does it before bearer tokens: a front proxy (`--requestheader-client-ca-file`,
// its certificate's CN in `--requestheader-allowed-names`) names the user in request headers, and a
// client certificate signed by `--client-ca-file` is the user its CN and O name. Pure: the caller
// hands in the CA bundles' text (lib/clientauth.ts reads the files), the presented chain, the
// headers and the time.

import { X509Certificate } from "node:crypto";
import { dict } from "./dict.ts";
import type { RequestHeaderFlags } from "./flags.ts";

/** Who a request is, as a TokenReview or a certificate says. */
export interface User {
  username: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

/** Front-proxy authentication in effect: the flags, with the CA file's certificates. */
export interface RequestHeaderConfig extends Omit<RequestHeaderFlags, "clientCaFile"> {
  cas: X509Certificate[];
}

/** What the secure port accepts besides bearer tokens. */
export interface ClientCertConfig {
  /** `--client-ca-file`. */
  clientCAs?: X509Certificate[];
  requestHeader?: RequestHeaderConfig;
}

/** The outcome of the certificate authenticators: a user, or why none (undefined: no certificate). */
export type CertAuthResult = { user: User } | { error: string } | undefined;

/** TLS Web Client Authentication, the extended key usage a client certificate must allow. */
const CLIENT_AUTH_EKU = "1.3.6.1.5.5.7.3.2";
/** Any extended key usage. */
const ANY_EKU = "2.5.29.37.0";
/** Chains longer than this are refused: leaf, intermediates, root. */
const MAX_CHAIN = 8;

/**
 * The certificates of a PEM bundle's text.
 * @param source what the text is, for errors (the flag and the file: "--client-ca-file /etc/ca.crt")
 * @throws {Error} naming `source` when the text holds no certificate or an unusable one.
 */
export function parseCABundle(text: string, source: string): X509Certificate[] {
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`Cannot use ${source}: it holds no PEM certificate`);
  return blocks.map((pem, i) => {
    try {
      return new X509Certificate(pem);
    } catch (err) {
      throw new Error(`Cannot use ${source}: certificate ${i + 1}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  });
}

function validAt(c: X509Certificate, now: Date): boolean {
  return new Date(c.validFrom) <= now && now <= new Date(c.validTo);
}

function issuedBy(child: X509Certificate, parent: X509Certificate): boolean {
  try {
    return child.checkIssued(parent) && child.verify(parent.publicKey);
  } catch {
    return false;
  }
}

/**
 * Checks that `chain[0]` (the presented leaf) chains to one of `roots` through the presented
 * intermediates, every certificate valid at `now`, as Go's x509.Verify with ExtKeyUsageClientAuth:
 * the leaf allows client authentication (or has no extended key usage), intermediates are CAs.
 * @returns undefined when it does, else the reason
 */
export function verifyClientChain(
  chain: readonly X509Certificate[],
  roots: readonly X509Certificate[],
  now: Date,
): string | undefined {
  const leaf = chain[0];
  if (leaf === undefined) return "no client certificate";
  const ekus = leaf.keyUsage;
  if (ekus !== undefined && ekus.length > 0 && !ekus.includes(CLIENT_AUTH_EKU) && !ekus.includes(ANY_EKU)) {
    return "the certificate does not allow client authentication";
  }
  let current = leaf;
  for (let depth = 0; depth < MAX_CHAIN; depth++) {
    if (!validAt(current, now)) return `certificate "${current.subject}" is not valid now`;
    const root = roots.find((r) => issuedBy(current, r));
    if (root) return validAt(root, now) ? undefined : `CA "${root.subject}" is not valid now`;
    const next = chain.find((c) => c !== current && c.ca && issuedBy(current, c));
    if (next === undefined) return "signed by an unknown authority";
    current = next;
  }
  return "the certificate chain is too long";
}

/** The attribute values of one type in an X509Certificate subject ("CN=a\nO=b\nO=c"). */
function subjectValues(subject: string, type: string): string[] {
  return subject
    .split("\n")
    .filter((line) => line.startsWith(`${type}=`))
    .map((line) => line.slice(type.length + 1));
}

/** The user a client certificate names: CN the username, each O a group, as upstream. */
export function certificateUser(leaf: X509Certificate): User | { error: string } {
  const cn = subjectValues(leaf.subject, "CN")[0] ?? "";
  if (cn === "") return { error: "common name of user/client cert cannot be empty" };
  return { username: cn, groups: subjectValues(leaf.subject, "O") };
}

/** Request headers by lower-cased name, each with every value it was sent with, in order. */
export type HeaderValues = ReadonlyMap<string, readonly string[]>;

/**
 * The user a front proxy names in the request headers, as upstream's requestheader authenticator:
 * the first non-blank value of the username headers (and of the UID headers); every non-blank value
 * of the group headers; extra keys after the prefixes (lower-cased, URL-unescaped). Undefined when no
 * username header is set.
 */
export function headerUser(headers: HeaderValues, cfg: RequestHeaderConfig): User | undefined {
  const values = (name: string) => headers.get(name.toLowerCase()) ?? [];
  const first = (names: string[]) => names.flatMap(values).find((v) => v.trim() !== "");
  const username = first(cfg.usernameHeaders);
  if (!username) return undefined;
  const user: User = { username };
  const uid = first(cfg.uidHeaders);
  if (uid) user.uid = uid;
  const groups = cfg.groupHeaders.flatMap(values).filter((v) => v.trim() !== "");
  if (groups.length > 0) user.groups = groups;
  // Keys are the proxy's header names: kept without a prototype (lib/dict.ts).
  const extra: Record<string, string[]> = dict<string[]>();
  for (const [name, vs] of headers) {
    const prefix = cfg.extraHeaderPrefixes.find((p) => name.startsWith(p.toLowerCase()));
    if (prefix === undefined) continue;
    const key = unescapeExtraKey(name.slice(prefix.length));
    extra[key] = [...(extra[key] ?? []), ...vs];
  }
  if (Object.keys(extra).length > 0) user.extra = extra;
  return user;
}

/** url.PathUnescape, keeping the key as sent when it is no valid escape. */
function unescapeExtraKey(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/**
 * Authenticates a request by its client certificate, in upstream's order: a front proxy naming a user
 * in headers, then a client certificate of `--client-ca-file`. Headers of anyone else are ignored.
 * @param chain the presented certificates, leaf first (empty: none)
 * @returns the user; an error when a certificate was presented but authenticates nobody; undefined
 *   when none was presented or nothing is configured (bearer tokens decide)
 */
export function authenticateCertificate(
  chain: readonly X509Certificate[],
  headers: HeaderValues,
  cfg: ClientCertConfig,
  now: Date,
): CertAuthResult {
  const leaf = chain[0];
  if (leaf === undefined || (cfg.clientCAs === undefined && cfg.requestHeader === undefined))
    return undefined;
  const errors: string[] = [];
  const rh = cfg.requestHeader;
  if (rh) {
    const why = verifyClientChain(chain, rh.cas, now);
    const cn = subjectValues(leaf.subject, "CN")[0] ?? "";
    if (why !== undefined) errors.push(`front proxy: ${why}`);
    else if (rh.allowedNames.length > 0 && !rh.allowedNames.includes(cn))
      errors.push(`front proxy: common name "${cn}" is not in --requestheader-allowed-names`);
    else {
      const user = headerUser(headers, rh);
      if (user) return { user };
    }
  }
  if (cfg.clientCAs) {
    const why = verifyClientChain(chain, cfg.clientCAs, now);
    if (why !== undefined) errors.push(`client certificate: ${why}`);
    else {
      const user = certificateUser(leaf);
      if ("username" in user) return { user };
      errors.push(`client certificate: ${user.error}`);
    }
  }
  return errors.length > 0 ? { error: errors.join("; ") } : undefined;
}
