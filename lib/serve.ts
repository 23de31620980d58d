// Secure serving: HTTPS on --bind-address/--secure-port with /healthz, /livez, /readyz and /metrics.
// Paths in --authorization-always-allow-paths are open; every other request needs a bearer token that
// passes a TokenReview and a SubjectAccessReview (non-resource URL, verb get), as the delegated
// authentication and authorization of Kubernetes components do. Without --tls-cert-file the server
// uses a self-signed certificate made in memory; with one, the files are reloaded when they change.

import { constants, createHash, generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";
import { tryParseIP } from "./cidr.ts";
import type { KubeClient } from "./kube.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";

const log = logger("serve");

/** A named health check: returns undefined when healthy, else the reason. */
export type Check = { name: string; check: () => string | undefined };

/** Options of {@link startSecureServer}, from the secure-serving flags. */
export interface ServeOptions {
  bindAddress: string;
  port: number;
  certFile?: string | undefined;
  keyFile?: string | undefined;
  alwaysAllowPaths: string[];
  registry: Registry;
  /**
   * Clients for TokenReviews and SubjectAccessReviews (`--authentication-kubeconfig`,
   * `--authorization-kubeconfig`). They must not be the controllers' client: anyone can send a bearer
   * token, and reviews sharing the controllers' rate limiter would let a flood of them starve the
   * controllers. Without them only always-allowed paths are served.
   */
  reviews?: { authentication: KubeClient; authorization: KubeClient };
  /** `--authentication-token-webhook-cache-ttl`, `--authorization-webhook-cache-(un)authorized-ttl`. */
  cacheTtlMs?: { authentication: number; authorized: number; unauthorized: number };
  /** `--tls-min-version`; default and floor: the runtime's minimum, TLS 1.2. */
  tlsMinVersion?: "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3" | undefined;
  livez: Check[];
  readyz: Check[];
  /** How often certificate files are checked for changes. */
  certReloadMs?: number;
}

/** A PEM certificate and key. */
export interface ServingCert {
  cert: string;
  key: string;
}

// DER encoding of the one certificate shape made here. Written out rather than taken from
// @peculiar/asn1-x509: loading that library at every start cost ~2.5 MB of resident memory and ~15 ms.

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
function selfSignedCertificate(hosts: string[]): ServingCert {
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

interface Decision {
  ok: boolean;
  expires: number;
  user?: { username: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
}

/** Reviews in flight at most; beyond, requests are answered 429 rather than queued without bound. */
const MAX_REVIEWS_IN_FLIGHT = 16;
/** How often the serving certificate and key files are checked for a change. */
const CERT_RELOAD_MS = 10_000;
/** Cached decisions at most per cache (oldest evicted first). */
const MAX_CACHED_DECISIONS = 4096;

/** Delegated authentication and authorization with short-lived, bounded caches, as upstream does. */
class Delegator {
  readonly #reviews: NonNullable<ServeOptions["reviews"]>;
  readonly #ttl: NonNullable<ServeOptions["cacheTtlMs"]>;
  readonly #authn = new Map<string, Decision>();
  readonly #authz = new Map<string, Decision>();
  #inFlight = 0;
  constructor(reviews: NonNullable<ServeOptions["reviews"]>, ttl: ServeOptions["cacheTtlMs"]) {
    this.#reviews = reviews;
    this.#ttl = ttl ?? { authentication: 10_000, authorized: 10_000, unauthorized: 10_000 };
  }

  /** True when another review may start now. */
  get hasCapacity(): boolean {
    return this.#inFlight < MAX_REVIEWS_IN_FLIGHT;
  }

  #remember(m: Map<string, Decision>, key: string, d: Decision, now: number): void {
    if (m.size >= MAX_CACHED_DECISIONS) {
      for (const [k, v] of m) if (v.expires < now) m.delete(k);
      for (const k of m.keys()) {
        if (m.size < MAX_CACHED_DECISIONS) break;
        m.delete(k);
      }
    }
    m.set(key, d);
  }

  async #review<T>(client: KubeClient, path: string, body: unknown): Promise<T> {
    this.#inFlight++;
    try {
      return await client.create<T>(path, body);
    } finally {
      this.#inFlight--;
    }
  }

  /** The cached or fresh TokenReview decision for `token`; undefined when no review may start now. */
  async authenticate(token: string): Promise<Decision | undefined> {
    const now = Date.now();
    const key = createHash("sha256").update(token).digest("hex");
    const hit = this.#authn.get(key);
    if (hit && hit.expires > now) return hit;
    if (!this.hasCapacity) return undefined;
    const review = await this.#review<{ status?: { authenticated?: boolean; user?: Decision["user"] } }>(
      this.#reviews.authentication,
      "/apis/authentication.k8s.io/v1/tokenreviews",
      { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token } },
    );
    const d: Decision = {
      ok: Boolean(review.status?.authenticated),
      expires: now + this.#ttl.authentication,
    };
    if (review.status?.user) d.user = review.status.user;
    this.#remember(this.#authn, key, d, now);
    return d;
  }

  /** The cached or fresh SubjectAccessReview decision; undefined when no review may start now. */
  async authorize(user: NonNullable<Decision["user"]>, path: string): Promise<boolean | undefined> {
    const now = Date.now();
    const key = `${user.username}\u0000${user.uid ?? ""}\u0000${(user.groups ?? []).join(",")}\u0000${path}`;
    const hit = this.#authz.get(key);
    if (hit && hit.expires > now) return hit.ok;
    if (!this.hasCapacity) return undefined;
    const review = await this.#review<{ status?: { allowed?: boolean } }>(
      this.#reviews.authorization,
      "/apis/authorization.k8s.io/v1/subjectaccessreviews",
      {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: user.username,
          uid: user.uid,
          groups: user.groups,
          extra: user.extra,
          nonResourceAttributes: { path, verb: "get" },
        },
      },
    );
    const ok = Boolean(review.status?.allowed);
    this.#remember(
      this.#authz,
      key,
      { ok, expires: now + (ok ? this.#ttl.authorized : this.#ttl.unauthorized) },
      now,
    );
    return ok;
  }
}

const TOO_MANY = () =>
  new Response("Too many requests: credential checks are busy\n", {
    status: 429,
    headers: { "retry-after": "1" },
  });

/**
 * OpenSSL options for `--tls-min-version`. Bun's server never accepts less than TLS 1.2, so only a
 * TLS 1.3 minimum needs any: VersionTLS10 and VersionTLS11 are accepted and mean TLS 1.2.
 */
export function secureOptionsFor(min: ServeOptions["tlsMinVersion"]): number | undefined {
  return min === "TLSv1.3"
    ? constants.SSL_OP_NO_TLSv1 | constants.SSL_OP_NO_TLSv1_1 | constants.SSL_OP_NO_TLSv1_2
    : undefined;
}

function pathAllowed(path: string, allow: string[]): boolean {
  return allow.some((p) => (p.endsWith("*") ? path.startsWith(p.slice(0, -1)) : p === path));
}

function healthResponse(checks: Check[], verbose: boolean): Response {
  const lines: string[] = [];
  let failed = false;
  for (const c of checks) {
    let reason: string | undefined;
    try {
      reason = c.check();
    } catch (err) {
      reason = (err as Error).message;
    }
    if (reason) failed = true;
    lines.push(reason ? `[-]${c.name} failed: ${reason}` : `[+]${c.name} ok`);
  }
  const body = verbose || failed ? `${lines.join("\n")}\n${failed ? "check failed" : "ok"}\n` : "ok";
  return new Response(body, {
    status: failed ? 500 : 200,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

/** The running secure server. */
export interface SecureServer {
  readonly port: number;
  stop(): Promise<void>;
}

/**
 * Starts the secure server. Resolves once it listens.
 * @throws when the port cannot be bound or the certificate files cannot be read.
 */
export async function startSecureServer(opts: ServeOptions): Promise<SecureServer> {
  const delegator = opts.reviews ? new Delegator(opts.reviews, opts.cacheTtlMs) : undefined;
  const handle = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    const denied = await checkAccess(req, url.pathname, opts, delegator);
    return denied ?? route(url, opts);
  };
  const fromFiles = Boolean(opts.certFile && opts.keyFile);
  const tls = fromFiles ? readServingFiles(opts) : selfSignedCertificate(servingNames(opts.bindAddress));
  const secureOptions = secureOptionsFor(opts.tlsMinVersion);
  const withMin = (cert: ServingCert) => (secureOptions === undefined ? cert : { ...cert, secureOptions });
  const listening = {
    tls,
    server: Bun.serve({ ...listenOptions(opts, handle), port: opts.port, tls: withMin(tls) }),
  };
  const port = listening.server.port as number;
  log.info("Serving securely", { address: `${opts.bindAddress}:${port}`, selfSigned: !fromFiles });
  // Bind the new certificate first (SO_REUSEPORT), then let the old listener drain.
  const rebind = (next: ServingCert) => {
    const old = listening.server;
    listening.server = Bun.serve({ ...listenOptions(opts, handle), port, tls: withMin(next) });
    listening.tls = next;
    void old.stop(false);
  };
  const timer = fromFiles ? watchServingFiles(opts, () => listening.tls, rebind) : undefined;
  return {
    port,
    async stop() {
      if (timer) clearInterval(timer);
      await listening.server.stop(true);
    },
  };
}

/**
 * Authenticates and authorizes a request for a path that is not always allowed, by TokenReview and
 * SubjectAccessReview; undefined when it may go on, else the refusal.
 */
async function checkAccess(
  req: Request,
  path: string,
  opts: ServeOptions,
  delegator: Delegator | undefined,
): Promise<Response | undefined> {
  if (pathAllowed(path, opts.alwaysAllowPaths)) return undefined;
  const auth = req.headers.get("authorization") ?? "";
  const token = auth.match(/^Bearer\s+(\S+)$/i)?.[1];
  if (!token || !delegator) return new Response("Unauthorized\n", { status: 401 });
  try {
    const who = await delegator.authenticate(token);
    if (!who) return TOO_MANY();
    if (!who.ok || !who.user) return new Response("Unauthorized\n", { status: 401 });
    const allowed = await delegator.authorize(who.user, path);
    if (allowed === undefined) return TOO_MANY();
    if (allowed) return undefined;
    log.v(2).info("Forbidden", { user: who.user.username, path });
    return new Response(`Forbidden: user "${who.user.username}" cannot get path "${path}"\n`, {
      status: 403,
    });
  } catch (err) {
    log.error("Cannot check the request's credentials", err, { path });
    return new Response("Internal Server Error: cannot check credentials\n", { status: 500 });
  }
}

/** Answers an admitted request: health checks, metrics, or 404. */
function route(url: URL, opts: ServeOptions): Response {
  const verbose = url.searchParams.has("verbose");
  switch (url.pathname) {
    case "/healthz":
    case "/livez":
      return healthResponse(opts.livez, verbose);
    case "/readyz":
      return healthResponse(opts.readyz, verbose);
    case "/metrics":
      return new Response(opts.registry.expose(), {
        headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
      });
    default:
      return new Response("404 page not found\n", { status: 404 });
  }
}

/** The names a self-signed serving certificate holds: loopback, the host name and the bind address. */
function servingNames(bindAddress: string): string[] {
  return [...new Set(["localhost", "127.0.0.1", hostname(), bindAddress])].filter(
    (h) => h && h !== "0.0.0.0" && h !== "::",
  );
}

function readServingFiles(opts: ServeOptions): ServingCert {
  return {
    cert: readFileSync(opts.certFile as string, "utf8"),
    key: readFileSync(opts.keyFile as string, "utf8"),
  };
}

/** Size and modification time of the certificate and key files; "" when either cannot be read. */
function servingFilesStamp(opts: ServeOptions): string {
  try {
    const a = statSync(opts.certFile as string);
    const b = statSync(opts.keyFile as string);
    return `${a.mtimeMs}:${a.size}:${b.mtimeMs}:${b.size}`;
  } catch {
    return "";
  }
}

/**
 * Checks the certificate and key files every `certReloadMs` and hands a changed pair to `rebind`;
 * a pair that cannot be read or bound is logged and the current one kept.
 */
function watchServingFiles(
  opts: ServeOptions,
  current: () => ServingCert,
  rebind: (next: ServingCert) => void,
): ReturnType<typeof setInterval> {
  let last = servingFilesStamp(opts);
  const timer = setInterval(() => {
    const now = servingFilesStamp(opts);
    if (!now || now === last) return;
    last = now;
    try {
      const next = readServingFiles(opts);
      const tls = current();
      if (next.cert === tls.cert && next.key === tls.key) return;
      rebind(next);
      log.info("Reloaded serving certificate", { certFile: opts.certFile });
    } catch (err) {
      log.error("Cannot reload serving certificate, keeping the current one", err, {
        certFile: opts.certFile,
      });
    }
  }, opts.certReloadMs ?? CERT_RELOAD_MS);
  (timer as { unref?: () => void }).unref?.();
  return timer;
}

function listenOptions(opts: ServeOptions, handle: (req: Request) => Promise<Response>) {
  return {
    hostname: opts.bindAddress,
    reusePort: true,
    fetch: handle,
    error: (err: Error) => {
      log.error("Request failed", err);
      return new Response("Internal Server Error\n", { status: 500 });
    },
  };
}
