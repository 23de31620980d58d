// The checks of a kubelet serving CSR that need only the request itself: the requester is a node in
// system:nodes, the usages, and the PKCS#10 request (decoded within its size bound, read and its
// signature verified by lib/x509pkcs10.ts) with its key, subject and SANs judged on their own. What
// passes is a `CheckedCsr`, parsed once, that the rest of the policy (lib/csr.ts: the Node, the
// other Nodes, Talos) takes. Pure and total: `checkCsr()` never throws and fails closed.

import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import { type IPAddress, tryParseIP } from "./cidr.ts";
import { type Decision, deny, failClosed, list, overLimit, q } from "./csrdecision.ts";
import { isDNS1123Subdomain } from "./kubevalidation.ts";
import { peerLimit } from "./peerlimits.ts";
import { reservedName, specialIP } from "./sharedaddresses.ts";
import { KUBELET_SERVING_SIGNER } from "./wellknown.ts";
import {
  CsrSanLimitError,
  MAX_REQUEST_BYTES,
  type ParsedCsr,
  type PublicKeyInfo,
  parseCertificateRequest,
} from "./x509pkcs10.ts";

/** What the API server prefixes a node's name with in the username of its credentials. */
export const USERNAME_PREFIX = "system:node:";
const NODES_GROUP = "system:nodes";
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

/** Usages: digital signature and server auth, optionally key encipherment, nothing else. */
function checkUsages(usages: string[]): Decision | undefined {
  const stray = usages.filter((u) => !ALLOWED_USAGES.has(u));
  const missing = REQUIRED_USAGES.filter((u) => !usages.includes(u));
  if (stray.length === 0 && missing.length === 0) return undefined;
  const what = [
    ...(missing.length ? [`missing ${list(missing)}`] : []),
    ...(stray.length ? [`not allowed ${list(stray)}`] : []),
  ];
  return deny(
    "BadUsages",
    `usages must be digital signature and server auth, optionally key encipherment: ${what.join("; ")}`,
  );
}

/** The longest `spec.request` read: base64 of `MAX_REQUEST_BYTES`; a longer one is refused unread. */
export const MAX_REQUEST_BASE64 = 4 * Math.ceil(MAX_REQUEST_BYTES / 3);

/** Decodes `spec.request` (base64 of PEM, within `MAX_REQUEST_BYTES`) and parses it. */
function parseRequest(request: string): Decision | ParsedCsr {
  if (request.length > MAX_REQUEST_BASE64) {
    return deny(
      "InvalidRequest",
      `request of ${request.length} base64 characters is over the ${MAX_REQUEST_BYTES}-byte limit`,
    );
  }
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(request) || request.length % 4 !== 0) {
    return deny("InvalidRequest", "request is not base64");
  }
  try {
    const pem = Buffer.from(request, "base64").toString("latin1");
    return parseCertificateRequest(pem, { maxSans: peerLimit("csr_sans") });
  } catch (err) {
    if (err instanceof CsrSanLimitError) return overLimit("csr_sans", err.count);
    return deny("InvalidRequest", err instanceof Error ? err.message : String(err));
  }
}

/** The key: RSA of 2048 to 8192 bits with an odd exponent from 3 to below 2^32, P-256, P-384 or Ed25519. */
function checkKey(key: PublicKeyInfo): Decision | undefined {
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
  return undefined;
}

/** The subject: exactly one CN, the requester's username, and O exactly [system:nodes]. */
function checkSubject(parsed: ParsedCsr, username: string): Decision | undefined {
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
  return undefined;
}

/**
 * The SANs on their own: DNS and IP only, at least one; no wildcard, no name of `reservedName()`,
 * no IP of `specialIP()`.
 */
function checkSans(parsed: ParsedCsr): Decision | undefined {
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
  return undefined;
}

/**
 * The checks that need only the CSR, in order: usages, the request parsed, its key, proof of
 * possession, subject, SANs. Returns the parsed request when they all pass.
 */
function checkRequest(csr: CsrInput, username: string): Decision | ParsedCsr {
  const badUsages = checkUsages(csr.usages ?? []);
  if (badUsages) return badUsages;
  const parsed = parseRequest(csr.request ?? "");
  if ("action" in parsed) return parsed;
  const badKey = checkKey(parsed.publicKey);
  if (badKey) return badKey;
  if (!parsed.signature.valid) {
    return deny("BadSignature", parsed.signature.problem ?? "signature does not verify");
  }
  return checkSubject(parsed, username) ?? checkSans(parsed) ?? parsed;
}

const CHECKED: unique symbol = Symbol("CheckedCsr");

/**
 * A request that passed every check that needs only the request itself, parsed and verified
 * once. `screen()` and `decide()` (lib/csr.ts) take it in place of the `CsrInput`, so that a
 * controller that also looks up the other Nodes by its SANs parses the request only once. Only
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
 * The checks of `decide()` (lib/csr.ts) that need neither the Node nor Talos, in its order: not
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

/**
 * Whether `value` is a request `checkCsr()` passed: the brand no API object can carry.
 * @example isCheckedCsr(checkCsr(csr)) // true when every request check passed
 */
export function isCheckedCsr(value: unknown): value is CheckedCsr {
  return typeof value === "object" && value !== null && CHECKED in value;
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
