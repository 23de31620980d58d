// The Kubernetes API client: HTTP on Bun's fetch that really applies the connection's TLS settings,
// request authentication, client-side rate limits, retries, request metrics, and watch streams. Its
// contract (the KubeApi interface, the API server's errors, the patch types) is lib/kubeapi.ts's.
// Where the connection comes from is lib/kubeconnection.ts's (kubeconfig parsing: lib/kubeconfig.ts);
// exec and auth-provider credential plugins are lib/kubeauthplugin.ts's.
// @kubernetes/client-node supplies the types; its own HTTP layer is not used: under Bun it ignores
// the kubeconfig's CA and client certificate (bun-notes.md, "The TLS trap"), and loading it costs
// ~22 MB of resident memory.

import { readFileSync } from "node:fs";
import { wait } from "./backoffwait.ts";
import {
  type KubeApi,
  KubeError,
  PATCH,
  type RequestOptions,
  type WatchEvent,
  type WatchOptions,
} from "./kubeapi.ts";
import { type CredentialPlugin, loadCredentialPlugin } from "./kubeauthplugin.ts";
import { KubeConfigError, type KubeConnection } from "./kubeconfig.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { registry as defaultRegistry, startTimer } from "./metricsprocess.ts";

const log = logger("kube");

/** A token bucket: `qps` tokens per second, at most `burst` saved up. */
class RateLimiter {
  #tokens: number;
  #last = performance.now();
  #queue = Promise.resolve();
  constructor(
    readonly qps: number,
    readonly burst: number,
  ) {
    this.#tokens = burst;
  }
  /** Resolves when a request may go out. Waiters are served in order. */
  take(): Promise<void> {
    if (this.qps <= 0) return Promise.resolve();
    const turn = this.#queue.then(async () => {
      const now = performance.now();
      this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#last) / 1000) * this.qps);
      this.#last = now;
      if (this.#tokens < 1) {
        await Bun.sleep(((1 - this.#tokens) / this.qps) * 1000);
        this.#tokens = 1;
        this.#last = performance.now();
      }
      this.#tokens -= 1;
    });
    this.#queue = turn;
    return turn;
  }
}

/** Options of {@link KubeClient}. */
export interface KubeClientOptions {
  qps?: number;
  burst?: number;
  userAgent?: string;
  registry?: Registry;
  /** Attempts for answers 429 and 5xx carrying Retry-After (client-go retries these too). */
  maxRetries?: number;
  /**
   * Deadline of one request attempt, body included (default 60 s). A connection that died without a
   * reset would otherwise hold a worker forever.
   */
  requestTimeoutMs?: number;
  /** How long a watch may stay silent beyond its server-side timeout before it is given up (default 30 s). */
  watchGraceMs?: number;
}

const TOKEN_FILE_TTL_MS = 60_000;

/** The first `"resourceVersion":"…"` of an answer's text: its metadata's (see `resourceVersionOnly`). */
export function resourceVersionAnswer(text: string): { metadata: { resourceVersion?: string } } {
  const rv = /"resourceVersion":"([^"\\]*)"/.exec(text)?.[1];
  return { metadata: rv === undefined ? {} : { resourceVersion: rv } };
}

/**
 * One request's deadline, joined with the caller's signal: aborts at `ms` or when `outer` does.
 * Released as soon as the answer is read, so nothing outlives the request: `AbortSignal.timeout`
 * keeps its signal and timer alive for the whole timeout (60 s) after the answer, ~6,000 of them
 * after a burst of 5,000 node writes.
 */
class Deadline {
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setTimeout>;
  readonly #outer: AbortSignal | undefined;
  readonly #onOuterAbort = () => this.#controller.abort(this.#outer?.reason);
  /** True once the deadline (not the caller) aborted the request. */
  timedOut = false;

  constructor(ms: number, outer?: AbortSignal) {
    this.#outer = outer;
    this.#timer = setTimeout(() => {
      this.timedOut = true;
      this.#controller.abort(new DOMException(`no answer within ${ms} ms`, "TimeoutError"));
    }, ms);
    if (outer?.aborted) this.#onOuterAbort();
    else outer?.addEventListener("abort", this.#onOuterAbort, { once: true });
  }

  /** The signal to hand to the request. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Stops the timer and lets go of the caller's signal. */
  release(): void {
    clearTimeout(this.#timer);
    this.#outer?.removeEventListener("abort", this.#onOuterAbort);
  }
}

/**
 * A Kubernetes API client over Bun's fetch. One connection pool per client; TLS is verified against
 * the kubeconfig's CA (or the system roots) with the client certificate when one is configured.
 */
export class KubeClient implements KubeApi {
  readonly server: string;
  readonly #session: Bun.FetchSession;
  readonly #conn: KubeConnection;
  readonly #limiter: RateLimiter;
  readonly #userAgent: string;
  readonly #maxRetries: number;
  readonly #requestTimeoutMs: number;
  readonly #watchGraceMs: number;
  readonly #requests;
  readonly #latency;
  readonly #host: string;
  #token?: { value: string; read: number };
  #plugin?: Promise<CredentialPlugin>;

  constructor(conn: KubeConnection, opts: KubeClientOptions = {}) {
    if (!/^https?:\/\//.test(conn.server)) {
      throw new KubeConfigError(`Cannot use API server address ${conn.server}: expected https://host[:port]`);
    }
    this.#conn = conn;
    this.server = conn.server;
    this.#host = new URL(conn.server).host;
    const tls: Record<string, unknown> = {};
    if (conn.ca) tls.ca = conn.ca;
    if (conn.cert) tls.cert = conn.cert;
    if (conn.key) tls.key = conn.key;
    if (conn.insecureSkipVerify) {
      // Honoured as kubectl does, but never silently: the API server's identity goes unchecked.
      log.warn("TLS verification of the API server is off (insecure-skip-tls-verify)", {
        server: conn.server,
      });
      tls.rejectUnauthorized = false;
    }
    if (conn.serverName) tls.serverName = conn.serverName;
    this.#session = new Bun.FetchSession({ tls, keepAlive: { idleTimeout: 90 } });
    this.#limiter = new RateLimiter(opts.qps ?? 20, Math.max(1, opts.burst ?? 30));
    this.#userAgent = opts.userAgent ?? "talos-cloud-controller-manager";
    this.#maxRetries = opts.maxRetries ?? 5;
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.#watchGraceMs = opts.watchGraceMs ?? 30_000;
    const reg = opts.registry ?? defaultRegistry;
    this.#requests = reg.counter(
      "rest_client_requests_total",
      "Number of HTTP requests, partitioned by status code, method, and host.",
      ["code", "host", "method"],
    );
    this.#latency = reg.histogram(
      "rest_client_request_duration_seconds",
      "Request latency in seconds. Broken down by verb, and host.",
      ["host", "verb"],
      [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
    );
  }

  /** The namespace of the in-cluster service account, if any. */
  get namespace(): string | undefined {
    return this.#conn.namespace;
  }

  async #authHeaders(headers: Record<string, string>): Promise<void> {
    const auth = this.#conn.auth;
    switch (auth.kind) {
      case "token":
        headers.authorization = `Bearer ${auth.token}`;
        return;
      case "tokenFile": {
        // Projected service-account tokens rotate; re-read the file like client-go does.
        const now = Date.now();
        if (!this.#token || now - this.#token.read > TOKEN_FILE_TTL_MS) {
          const value = readFileSync(auth.path, "utf8").trim();
          this.#token = { value, read: now };
        }
        headers.authorization = `Bearer ${this.#token.value}`;
        return;
      }
      case "basic":
        headers.authorization = `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString("base64")}`;
        return;
      case "plugin":
        this.#plugin ??= loadCredentialPlugin(auth.kubeconfigPath, auth.context);
        await (await this.#plugin)(headers);
        return;
      case "none":
        return;
    }
  }

  #url(path: string, query?: RequestOptions["query"]): string {
    let url = this.server + path;
    if (query) {
      const qs = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) qs.set(k, String(v));
      const s = qs.toString();
      if (s) url += (url.includes("?") ? "&" : "?") + s;
    }
    return url;
  }

  async #send(method: string, path: string, opts: RequestOptions, accept: string): Promise<Response> {
    const headers: Record<string, string> = { accept, "user-agent": this.#userAgent };
    await this.#authHeaders(headers);
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers["content-type"] = opts.contentType ?? "application/json";
      body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    }
    const init: BunFetchRequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    if (opts.signal) init.signal = opts.signal;
    return this.#session.fetch(this.#url(path, opts.query), init);
  }

  /**
   * Sends one request and returns the decoded JSON answer.
   * @throws KubeError for non-2xx answers (after retrying 429/5xx answers that carry Retry-After).
   */
  async request<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      await this.#limiter.take();
      const done = startTimer(this.#latency, { host: this.#host, verb: method });
      const deadline = new Deadline(this.#requestTimeoutMs, opts.signal);
      const attemptOpts = { ...opts, signal: deadline.signal };
      let res: Response;
      let text: string;
      try {
        res = await this.#send(method, path, attemptOpts, "application/json");
        if (res.ok && opts.discardAnswer) {
          // Drained, so that the connection stays usable; a whole object parsed for nothing is the
          // largest garbage of a burst of writes (a Node is ~5 KB of objects).
          await res.arrayBuffer();
          text = "";
        } else text = await res.text();
      } catch (err) {
        done();
        this.#requests.inc({ code: "<error>", host: this.#host, method });
        if (deadline.timedOut) {
          throw new Error(`Cannot ${method} ${path}: no answer within ${this.#requestTimeoutMs} ms`, {
            cause: err,
          });
        }
        throw err;
      } finally {
        deadline.release();
      }
      done();
      this.#requests.inc({ code: String(res.status), host: this.#host, method });
      if (res.ok) {
        if (opts.discardAnswer) return undefined as T;
        if (opts.resourceVersionOnly) return resourceVersionAnswer(text) as T;
        const json = (res.headers.get("content-type") ?? "").includes("json");
        return (json && text ? JSON.parse(text) : text) as T;
      }
      const err = toKubeError(res, text);
      const retryable = res.status === 429 || (res.status >= 500 && err.retryAfterSeconds !== undefined);
      if (!retryable || attempt >= this.#maxRetries || opts.signal?.aborted) throw err;
      const delaySeconds = Math.min(err.retryAfterSeconds ?? 1, 30);
      log.v(4).info("Retrying after server asked to", { method, path, status: res.status, delaySeconds });
      // The caller's deadline (e.g. a lease renewal's) wins over the server's Retry-After.
      await wait(delaySeconds * 1000 * (0.8 + Math.random() * 0.4), opts.signal);
      if (opts.signal?.aborted) throw err;
    }
  }

  /** GET `path`. @throws KubeError */
  get<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.request<T>("GET", path, opts);
  }
  /** POST `body` to the collection `path`. @throws KubeError */
  create<T>(path: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>("POST", path, { ...opts, body });
  }
  /** PUT `body` to `path` (guarded by its resourceVersion, when it has one). @throws KubeError */
  update<T>(path: string, body: unknown, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>("PUT", path, { ...opts, body });
  }
  /** Patches with `type` (a {@link PATCH} content type, merge by default). */
  patch<T>(path: string, body: unknown, type: string = PATCH.merge, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>("PATCH", path, { ...opts, body, contentType: type });
  }
  /** DELETE `path`; `opts.body` may carry DeleteOptions (preconditions). @throws KubeError */
  delete<T>(path: string, opts: RequestOptions = {}): Promise<T> {
    return this.request<T>("DELETE", path, opts);
  }

  /**
   * Opens a watch on a collection and yields its events until the server ends the stream or `signal`
   * aborts. An ERROR event with a 410 Status is thrown as a KubeError so the caller re-lists.
   */
  async *watch<T>(path: string, opts: WatchOptions): AsyncGenerator<WatchEvent<T>> {
    await this.#limiter.take();
    const query: RequestOptions["query"] = {
      ...opts.query,
      watch: 1,
      allowWatchBookmarks: true,
      resourceVersion: opts.resourceVersion,
      timeoutSeconds: opts.timeoutSeconds,
    };
    // A watch on a connection that died without a reset sees neither data nor an end: give up once it
    // has been silent past the server-side timeout (bookmarks and events both count as life).
    const idle = new AbortController();
    const idleMs = (opts.timeoutSeconds ?? 300) * 1000 + this.#watchGraceMs;
    const idleTimer = setTimeout(() => idle.abort(), idleMs);
    const reqOpts: RequestOptions = {
      query,
      signal: opts.signal ? AbortSignal.any([opts.signal, idle.signal]) : idle.signal,
    };
    const decoder = new TextDecoder();
    // The current line's text before the newest chunk: a line of n bytes costs O(n) however many
    // chunks it comes in (appending to one string and searching it whole at every chunk copied and
    // scanned it again each time: a ~1 MiB Node in small chunks cost the thread tens of ms).
    let parts: string[] = [];
    try {
      const res = await this.#send("GET", path, reqOpts, "application/json");
      this.#requests.inc({ code: String(res.status), host: this.#host, method: "WATCH" });
      if (!res.ok || !res.body) throw toKubeError(res, await res.text());
      for await (const chunk of res.body) {
        idleTimer.refresh();
        let text = decoder.decode(chunk, { stream: true });
        let nl = text.indexOf("\n");
        while (nl >= 0) {
          parts.push(text.slice(0, nl));
          const line = (parts.length === 1 ? (parts[0] as string) : parts.join("")).trim();
          parts = [];
          text = text.slice(nl + 1);
          nl = text.indexOf("\n");
          if (!line || (opts.admit && !opts.admit(line))) continue;
          const ev = JSON.parse(line) as WatchEvent<T>;
          if (ev.type === "ERROR") {
            const st = ev.object as { code?: number; reason?: string; message?: string };
            throw new KubeError(st.code ?? 500, st.reason ?? "Unknown", st.message ?? "watch error");
          }
          yield ev;
        }
        if (text) parts.push(text);
      }
    } catch (err) {
      if (opts.signal?.aborted) return;
      if (idle.signal.aborted)
        throw new Error(`Cannot watch ${path}: no data for ${idleMs} ms`, { cause: err });
      throw err;
    } finally {
      clearTimeout(idleTimer);
    }
  }

  /** Closes idle pooled connections. */
  close(): void {
    this.#session.close();
  }
}

function toKubeError(res: Response, text: string): KubeError {
  let reason = res.statusText || "Unknown";
  let message = text.slice(0, 500);
  try {
    const st = JSON.parse(text) as { reason?: string; message?: string };
    if (st.reason) reason = st.reason;
    if (st.message) message = st.message;
  } catch {
    // Not a Status object; keep the raw text.
  }
  const retryAfter = Number(res.headers.get("retry-after"));
  return new KubeError(
    res.status,
    reason,
    `${res.status} ${reason}: ${message}`,
    Number.isFinite(retryAfter) && res.headers.has("retry-after") ? retryAfter : undefined,
  );
}
