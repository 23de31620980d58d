// Secure serving: HTTPS on --bind-address/--secure-port with /healthz, /livez, /readyz and /metrics.
// Paths in --authorization-always-allow-paths are open; every other request needs a bearer token that
// passes a TokenReview and a SubjectAccessReview (non-resource URL, verb get), as the delegated
// authentication and authorization of Kubernetes components do. Without --tls-cert-file the server
// uses a self-signed certificate made in memory; with one, the files are reloaded when they change.

import { constants, createHash, generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";
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
  /** `--tls-min-version`; default: the runtime's minimum (TLS 1.2). */
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

/**
 * Makes a self-signed ECDSA P-256 serving certificate for `hosts` (DNS names and IPs), valid one year.
 */
async function selfSignedCertificate(hosts: string[]): Promise<ServingCert> {
  const { AsnConvert, OctetString } = await import("@peculiar/asn1-schema");
  const x = await import("@peculiar/asn1-x509");
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const sigAlg = new x.AlgorithmIdentifier({ algorithm: "1.2.840.10045.4.3.2" }); // ecdsa-with-SHA256
  const cn = `${hosts[0] ?? "localhost"}@${Math.floor(Date.now() / 1000)}`;
  const name = new x.Name([
    new x.RelativeDistinguishedName([
      new x.AttributeTypeAndValue({ type: "2.5.4.3", value: new x.AttributeValue({ utf8String: cn }) }),
    ]),
  ]);
  const isIP = (h: string) => /^[\d.]+$/.test(h) || h.includes(":");
  const san = new x.SubjectAlternativeName(
    hosts.map((h) => (isIP(h) ? new x.GeneralName({ iPAddress: h }) : new x.GeneralName({ dNSName: h }))),
  );
  const ext = (id: string, critical: boolean, value: object) =>
    new x.Extension({ extnID: id, critical, extnValue: new OctetString(AsnConvert.serialize(value)) });
  const serial = randomBytes(16);
  // Positive, and never a leading zero byte: DER wants minimal integers, and BoringSSL refuses a
  // certificate whose serial starts 0x00 0x0…-0x7… ("INVALID_INTEGER", one start in 256).
  serial[0] = ((serial[0] as number) & 0x7f) | 0x40;
  const now = Date.now();
  const tbs = new x.TBSCertificate({
    version: x.Version.v3,
    serialNumber: serial.buffer.slice(serial.byteOffset, serial.byteOffset + 16),
    signature: sigAlg,
    issuer: name,
    subject: name,
    validity: new x.Validity({
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + 365 * 86_400_000),
    }),
    subjectPublicKeyInfo: AsnConvert.parse(
      publicKey.export({ type: "spki", format: "der" }),
      x.SubjectPublicKeyInfo,
    ),
    extensions: new x.Extensions([
      ext(x.id_ce_basicConstraints, true, new x.BasicConstraints({ cA: false })),
      ext(x.id_ce_keyUsage, true, new x.KeyUsage(x.KeyUsageFlags.digitalSignature)),
      ext(x.id_ce_extKeyUsage, false, new x.ExtendedKeyUsage([x.id_kp_serverAuth])),
      ext(x.id_ce_subjectAltName, false, san),
    ]),
  });
  const tbsDer = Buffer.from(AsnConvert.serialize(tbs));
  const cert = new x.Certificate({
    tbsCertificate: tbs,
    signatureAlgorithm: sigAlg,
    signatureValue: new Uint8Array(sign("sha256", tbsDer, privateKey)).buffer,
  });
  const der = Buffer.from(AsnConvert.serialize(cert)).toString("base64");
  return {
    cert: `-----BEGIN CERTIFICATE-----\n${der.match(/.{1,64}/g)?.join("\n")}\n-----END CERTIFICATE-----\n`,
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

/** OpenSSL options refusing every protocol version below `min`. */
export function secureOptionsFor(min: ServeOptions["tlsMinVersion"]): number | undefined {
  const order = ["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"] as const;
  const flags = [constants.SSL_OP_NO_TLSv1, constants.SSL_OP_NO_TLSv1_1, constants.SSL_OP_NO_TLSv1_2];
  const n = min ? order.indexOf(min) : -1;
  if (n <= 0) return undefined;
  return flags.slice(0, n).reduce((a, b) => a | b, 0);
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
    const path = url.pathname;
    if (!pathAllowed(path, opts.alwaysAllowPaths)) {
      const auth = req.headers.get("authorization") ?? "";
      const token = auth.match(/^Bearer\s+(\S+)$/i)?.[1];
      if (!token || !delegator) return new Response("Unauthorized\n", { status: 401 });
      try {
        const who = await delegator.authenticate(token);
        if (!who) return TOO_MANY();
        if (!who.ok || !who.user) return new Response("Unauthorized\n", { status: 401 });
        const allowed = await delegator.authorize(who.user, path);
        if (allowed === undefined) return TOO_MANY();
        if (!allowed) {
          log.v(2).info("Forbidden", { user: who.user.username, path });
          return new Response(`Forbidden: user "${who.user.username}" cannot get path "${path}"\n`, {
            status: 403,
          });
        }
      } catch (err) {
        log.error("Cannot check the request's credentials", err, { path });
        return new Response("Internal Server Error: cannot check credentials\n", { status: 500 });
      }
    }
    const verbose = url.searchParams.has("verbose");
    switch (path) {
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
  };

  const readFiles = (): ServingCert => ({
    cert: readFileSync(opts.certFile as string, "utf8"),
    key: readFileSync(opts.keyFile as string, "utf8"),
  });
  const fromFiles = Boolean(opts.certFile && opts.keyFile);
  let tls = fromFiles
    ? readFiles()
    : await selfSignedCertificate(
        [...new Set(["localhost", "127.0.0.1", hostname(), opts.bindAddress])].filter(
          (h) => h && h !== "0.0.0.0" && h !== "::",
        ),
      );
  const secureOptions = secureOptionsFor(opts.tlsMinVersion);
  const withMin = (cert: ServingCert) => (secureOptions === undefined ? cert : { ...cert, secureOptions });
  let server = Bun.serve({ ...listenOptions(opts, handle), port: opts.port, tls: withMin(tls) });
  const port = server.port as number;
  log.info("Serving securely", { address: `${opts.bindAddress}:${port}`, selfSigned: !fromFiles });

  let timer: ReturnType<typeof setInterval> | undefined;
  if (fromFiles) {
    const stamp = () => {
      try {
        const a = statSync(opts.certFile as string);
        const b = statSync(opts.keyFile as string);
        return `${a.mtimeMs}:${a.size}:${b.mtimeMs}:${b.size}`;
      } catch {
        return "";
      }
    };
    let last = stamp();
    timer = setInterval(() => {
      const now = stamp();
      if (!now || now === last) return;
      last = now;
      try {
        const next = readFiles();
        if (next.cert === tls.cert && next.key === tls.key) return;
        // Bind the new certificate first (SO_REUSEPORT), then let the old listener drain.
        const replacement = Bun.serve({ ...listenOptions(opts, handle), port, tls: withMin(next) });
        const old = server;
        server = replacement;
        tls = next;
        void old.stop(false);
        log.info("Reloaded serving certificate", { certFile: opts.certFile });
      } catch (err) {
        log.error("Cannot reload serving certificate, keeping the current one", err, {
          certFile: opts.certFile,
        });
      }
    }, opts.certReloadMs ?? 10_000);
    (timer as { unref?: () => void }).unref?.();
  }
  return {
    port,
    async stop() {
      if (timer) clearInterval(timer);
      await server.stop(true);
    },
  };
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
