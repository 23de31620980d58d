// Secure serving: HTTPS on --bind-address/--secure-port with /healthz, /livez, /readyz and /metrics.
// Paths in --authorization-always-allow-paths are open; every other request needs a user, told as
// k8s.io/apiserver's delegating authentication tells it (a front proxy's headers, a client
// certificate, then a bearer token that passes a TokenReview), that a SubjectAccessReview allows to
// get the path. Without --tls-cert-file the server uses a self-signed certificate made in memory;
// the certificate files and client CA bundles are reloaded when they change.

import { createHash, type X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { hostname } from "node:os";
import { loadCABundle } from "./clientauth.ts";
import {
  authenticateCertificate,
  type ClientCertConfig,
  type HeaderValues,
  type User,
} from "./clientcerts.ts";
import type { RequestHeaderFlags } from "./flags.ts";
import { type Handler, type HttpsListener, listenHttps, type TlsSettings } from "./httpsserver.ts";
import type { KubeApi } from "./kubeapi.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { type ServingCert, selfSignedCertificate } from "./x509selfsigned.ts";

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
  reviews?: { authentication: KubeApi; authorization: KubeApi };
  /** `--authentication-token-webhook-cache-ttl`, `--authorization-webhook-cache-(un)authorized-ttl`. */
  cacheTtlMs?: { authentication: number; authorized: number; unauthorized: number };
  /** `--tls-min-version`; default and floor: the runtime's minimum, TLS 1.2. */
  tlsMinVersion?: "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3" | undefined;
  livez: Check[];
  readyz: Check[];
  /** How often certificate files are checked for changes. */
  certReloadMs?: number;
  /** `--client-ca-file`: client certificates it signed are the user their CN and O name. */
  clientCaFile?: string | undefined;
  /** `--requestheader-*`: a front proxy that names users in headers. */
  requestHeader?: RequestHeaderFlags | undefined;
}

interface Decision {
  ok: boolean;
  expires: number;
  user?: User;
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

  async #review<T>(client: KubeApi, path: string, body: unknown): Promise<T> {
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
  async authorize(user: User, path: string): Promise<boolean | undefined> {
    const now = Date.now();
    const key = JSON.stringify([user.username, user.uid ?? "", user.groups ?? [], user.extra ?? {}, path]);
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
 * The TLS floor for `--tls-min-version`: TLS 1.2 unless TLS 1.3 is asked for. VersionTLS10 and
 * VersionTLS11 are accepted and mean TLS 1.2, the runtime's minimum.
 */
export function minTlsVersion(min: ServeOptions["tlsMinVersion"]): "TLSv1.2" | "TLSv1.3" {
  return min === "TLSv1.3" ? "TLSv1.3" : "TLSv1.2";
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
  /** Re-reads the certificate and CA files now, as the file watch does when they change. */
  reload(): void;
  stop(): Promise<void>;
}

/**
 * Starts the secure server. Resolves once it listens.
 * @throws when the port cannot be bound or the certificate or CA files cannot be read.
 */
export async function startSecureServer(opts: ServeOptions): Promise<SecureServer> {
  const delegator = opts.reviews ? new Delegator(opts.reviews, opts.cacheTtlMs) : undefined;
  const fromFiles = Boolean(opts.certFile && opts.keyFile);
  const state: ServingState = {
    serving: fromFiles ? readServingFiles(opts) : selfSignedCertificate(servingNames(opts.bindAddress)),
    clients: loadClientCerts(opts),
  };
  const handle: Handler = async (url, headers, chain) =>
    (await checkAccess(url.pathname, headers, chain, state.clients, opts, delegator)) ?? route(url, opts);
  const listener = await listenHttps(opts.bindAddress, opts.port, tlsSettings(state, opts), handle);
  log.info("Serving securely", {
    address: `${opts.bindAddress}:${listener.port}`,
    selfSigned: !fromFiles,
    // In the order they are tried.
    authentication: [
      ...(state.clients.requestHeader ? ["front-proxy"] : []),
      ...(state.clients.clientCAs ? ["x509"] : []),
      "token",
    ].join(","),
  });
  const files = [
    ...(fromFiles ? [opts.certFile as string, opts.keyFile as string] : []),
    ...(opts.clientCaFile ? [opts.clientCaFile] : []),
    ...(opts.requestHeader ? [opts.requestHeader.clientCaFile] : []),
  ];
  const timer =
    files.length > 0
      ? watchFiles(files, opts.certReloadMs ?? CERT_RELOAD_MS, () => reload(opts, state, listener))
      : undefined;
  return {
    port: listener.port,
    reload: () => reload(opts, state, listener),
    async stop() {
      if (timer) clearInterval(timer);
      await listener.stop();
    },
  };
}

/** What the server presents and trusts now; replaced as a whole when its files change. */
interface ServingState {
  serving: ServingCert;
  clients: ClientCertConfig;
}

function tlsSettings(state: ServingState, opts: ServeOptions): TlsSettings {
  const cas = [...(state.clients.clientCAs ?? []), ...(state.clients.requestHeader?.cas ?? [])];
  return {
    cert: state.serving.cert,
    key: state.serving.key,
    minVersion: minTlsVersion(opts.tlsMinVersion),
    clientCAs: cas.map((c) => c.toString()),
  };
}

/** The client CAs of `--client-ca-file` and `--requestheader-client-ca-file`. */
function loadClientCerts(opts: ServeOptions): ClientCertConfig {
  const out: ClientCertConfig = {};
  if (opts.clientCaFile) out.clientCAs = loadCABundle(opts.clientCaFile, "--client-ca-file");
  const rh = opts.requestHeader;
  if (rh) out.requestHeader = { ...rh, cas: loadCABundle(rh.clientCaFile, "--requestheader-client-ca-file") };
  return out;
}

/** Re-reads the changed files and applies them; a file that cannot be used keeps the current set. */
function reload(opts: ServeOptions, state: ServingState, listener: HttpsListener): void {
  try {
    const next: ServingState = {
      serving: opts.certFile && opts.keyFile ? readServingFiles(opts) : state.serving,
      clients: loadClientCerts(opts),
    };
    listener.update(tlsSettings(next, opts));
    Object.assign(state, next);
    log.info("Reloaded serving certificate and client CAs", { certFile: opts.certFile });
  } catch (err) {
    log.error("Cannot reload serving certificate or client CAs, keeping the current ones", err, {
      certFile: opts.certFile,
    });
  }
}

/** Who asks, or {@link BUSY} when no credential review may start now. */
const BUSY = Symbol("busy");

/**
 * The requester, in k8s.io/apiserver's order: a front proxy's headers, a client certificate, then a
 * bearer token that passes a TokenReview; undefined when none authenticates.
 */
async function identify(
  headers: HeaderValues,
  chain: X509Certificate[],
  clients: ClientCertConfig,
  delegator: Delegator | undefined,
): Promise<User | undefined | typeof BUSY> {
  const byCert = authenticateCertificate(chain, headers, clients, new Date());
  if (byCert && "user" in byCert) return byCert.user;
  if (byCert) log.v(2).info("Client certificate not accepted", { reason: byCert.error });
  const auth = headers.get("authorization")?.[0] ?? "";
  const token = auth.match(/^Bearer\s+(\S+)$/i)?.[1];
  if (!token || !delegator) return undefined;
  const who = await delegator.authenticate(token);
  if (!who) return BUSY;
  return who.ok ? who.user : undefined;
}

/**
 * Authenticates and authorizes a request for a path that is not always allowed; undefined when it
 * may go on, else the refusal.
 */
async function checkAccess(
  path: string,
  headers: HeaderValues,
  chain: X509Certificate[],
  clients: ClientCertConfig,
  opts: ServeOptions,
  delegator: Delegator | undefined,
): Promise<Response | undefined> {
  if (pathAllowed(path, opts.alwaysAllowPaths)) return undefined;
  try {
    const who = await identify(headers, chain, clients, delegator);
    if (who === BUSY) return TOO_MANY();
    if (!who || !delegator) return new Response("Unauthorized\n", { status: 401 });
    const allowed = await delegator.authorize(who, path);
    if (allowed === undefined) return TOO_MANY();
    if (allowed) return undefined;
    log.v(2).info("Forbidden", { user: who.username, path });
    return new Response(`Forbidden: user "${who.username}" cannot get path "${path}"\n`, { status: 403 });
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

/** Size and modification time of every file; "" when one cannot be read. */
function filesStamp(paths: readonly string[]): string {
  try {
    return paths
      .map((p) => {
        const st = statSync(p);
        return `${st.mtimeMs}:${st.size}`;
      })
      .join(",");
  } catch {
    return "";
  }
}

/** Calls `onChange` when any of `paths` changed, checking every `periodMs`. */
function watchFiles(
  paths: readonly string[],
  periodMs: number,
  onChange: () => void,
): ReturnType<typeof setInterval> {
  let last = filesStamp(paths);
  const timer = setInterval(() => {
    const now = filesStamp(paths);
    if (!now || now === last) return;
    last = now;
    onChange();
  }, periodMs);
  (timer as { unref?: () => void }).unref?.();
  return timer;
}
