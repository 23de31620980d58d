// A counting, fault-injecting HTTPS proxy in front of the test bed's kube-apiserver. It terminates
// TLS with a certificate from the cluster CA, forwards every request (watch streams included) with
// client credentials of its own user, records what passed (method, path, watch or not, answer,
// time), and answers matching requests itself with 429 (and Retry-After) or 5xx while a fault is
// armed, or holds them unanswered (a black hole) until it is disarmed. Tests point the binary at it with {@link ApiProxy.writeKubeconfig}; the audit log shows
// the proxy's user as the author of whatever the binary wrote through it.
//
// @example
// const proxy = await ApiProxy.start(cluster, "ccm-proxied");
// const kubeconfig = proxy.writeKubeconfig(join(cluster.dir, "proxied.kubeconfig"));
// proxy.inject({ path: /^\/api\/v1\/nodes\/[^/]+$/, method: "PATCH", status: 429, retryAfterSeconds: 1, forMs: 4000 });
// expect(proxy.requests({ method: "PATCH" }).length).toBeLessThan(100);

import type { TestCluster } from "./cluster.ts";
import { writeKubeconfig } from "./cluster.ts";

/** One request that reached the proxy. */
export interface ProxiedRequest {
  method: string;
  /** URL path without the query. */
  path: string;
  /** The request carried `watch=1` (or `watch=true`). */
  watch: boolean;
  /** Date.now() when it arrived. */
  at: number;
  /** Status answered: the API server's, or the injected one (0 when forwarding failed). */
  status: number;
  injected: boolean;
}

/** Which requests a fault or a count applies to. */
export interface RequestFilter {
  method?: string;
  /** Tested against the path (no query). */
  path?: RegExp;
  watch?: boolean;
  injected?: boolean;
  /** Only requests that arrived at or after this Date.now(). */
  since?: number;
  /** Only requests that arrived before this Date.now(). */
  until?: number;
}

/** A fault: matching requests are answered with `status` instead of being forwarded. */
export interface Fault extends Pick<RequestFilter, "method" | "path" | "watch"> {
  status: number;
  /** Sent as the Retry-After header (and in the Status details) when set. */
  retryAfterSeconds?: number;
  /** Answer this many matching requests, then disarm (default: unlimited while armed). */
  times?: number;
  /** Disarm this long after {@link ApiProxy.inject} (default: until removed). */
  forMs?: number;
  /**
   * A black hole: hold matching requests unanswered while armed (they never reach the API server),
   * then answer them with `status` when the fault is disarmed.
   */
  hang?: boolean;
}

interface ArmedFault extends Fault {
  left: number;
  untilMs: number;
  /** Resolves when the fault is disarmed (held requests are answered then). */
  disarmed: Promise<void>;
  disarm: () => void;
}

const REASONS: Record<number, string> = {
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

/** Request headers not forwarded: hop-by-hop ones, and compression (Bun's fetch decompresses). */
const DROPPED_REQUEST_HEADERS = ["host", "connection", "content-length", "accept-encoding", "keep-alive"];
const DROPPED_RESPONSE_HEADERS = ["content-encoding", "content-length", "transfer-encoding", "connection"];

function matches(r: ProxiedRequest, f: RequestFilter): boolean {
  return (
    (f.method === undefined || r.method === f.method) &&
    (f.path === undefined || f.path.test(r.path)) &&
    (f.watch === undefined || r.watch === f.watch) &&
    (f.injected === undefined || r.injected === f.injected) &&
    (f.since === undefined || r.at >= f.since) &&
    (f.until === undefined || r.at < f.until)
  );
}

/** The proxy; see the file header. */
export class ApiProxy {
  readonly #cluster: TestCluster;
  readonly #server: ReturnType<typeof Bun.serve>;
  readonly #upstream: Bun.FetchSession;
  readonly #faults: ArmedFault[] = [];
  /** Cutters of the responses still streaming. */
  readonly #streams = new Set<() => void>();
  readonly #log: ProxiedRequest[] = [];

  private constructor(
    cluster: TestCluster,
    serving: { cert: string; key: string },
    upstream: { cert: string; key: string },
  ) {
    this.#cluster = cluster;
    this.#upstream = new Bun.FetchSession({
      tls: { ca: cluster.ca.cert, cert: upstream.cert, key: upstream.key },
    });
    this.#server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      tls: { cert: serving.cert, key: serving.key },
      // Watches may stay silent for minutes.
      idleTimeout: 0,
      fetch: (req) => this.#handle(req),
    });
  }

  /**
   * Starts a proxy that forwards as `user` (a member of system:masters, so RBAC never interferes;
   * the audit log names this user).
   */
  static async start(cluster: TestCluster, user: string): Promise<ApiProxy> {
    const [serving, upstream] = await Promise.all([
      cluster.ca.issue({ cn: "api-proxy", usage: "server", ips: ["127.0.0.1"], dns: ["localhost"] }),
      cluster.ca.issue({ cn: user, o: ["system:masters"], usage: "client" }),
    ]);
    return new ApiProxy(cluster, serving, upstream);
  }

  /** `https://127.0.0.1:<port>`. */
  get url(): string {
    return `https://127.0.0.1:${this.#server.port}`;
  }

  /** Writes a kubeconfig that reaches the API server through this proxy and returns its path. */
  writeKubeconfig(path: string): string {
    return writeKubeconfig(path, { server: this.url, ca: this.#cluster.ca.cert, auth: { kind: "none" } });
  }

  /** Arms a fault; returns its removal. */
  inject(fault: Fault): () => void {
    const { promise, resolve } = Promise.withResolvers<void>();
    const armed: ArmedFault = {
      ...fault,
      left: fault.times ?? Number.POSITIVE_INFINITY,
      untilMs: fault.forMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + fault.forMs,
      disarmed: promise,
      disarm: () => {
        clearTimeout(timer);
        const i = this.#faults.indexOf(armed);
        if (i >= 0) this.#faults.splice(i, 1);
        resolve();
      },
    };
    const timer = fault.forMs === undefined ? undefined : setTimeout(armed.disarm, fault.forMs);
    this.#faults.push(armed);
    return armed.disarm;
  }

  /** Requests seen so far, filtered. */
  requests(filter: RequestFilter = {}): ProxiedRequest[] {
    return this.#log.filter((r) => matches(r, filter));
  }

  /** Ends every response still streaming (watches) at once; returns how many were cut. */
  cutStreams(): number {
    const n = this.#streams.size;
    for (const cut of [...this.#streams]) cut();
    return n;
  }

  /** Stops listening, answers held requests and cuts open streams. */
  async stop(): Promise<void> {
    for (const f of [...this.#faults]) f.disarm();
    this.cutStreams();
    await this.#server.stop(true);
    this.#upstream.close();
  }

  #fault(r: ProxiedRequest): ArmedFault | undefined {
    const now = Date.now();
    for (let i = this.#faults.length - 1; i >= 0; i--) {
      const f = this.#faults[i] as ArmedFault;
      if (f.left <= 0 || now >= f.untilMs) f.disarm();
    }
    const f = this.#faults.find((x) => matches(r, x));
    if (f) f.left--;
    return f;
  }

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const watch = /^(1|true)$/.test(url.searchParams.get("watch") ?? "");
    const entry: ProxiedRequest = {
      method: req.method,
      path: url.pathname,
      watch,
      at: Date.now(),
      status: 0,
      injected: false,
    };
    this.#log.push(entry);
    const fault = this.#fault(entry);
    if (fault) {
      entry.status = fault.status;
      entry.injected = true;
      if (fault.hang) await fault.disarmed;
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (fault.retryAfterSeconds !== undefined) headers["retry-after"] = String(fault.retryAfterSeconds);
      const status = {
        kind: "Status",
        apiVersion: "v1",
        metadata: {},
        status: "Failure",
        message: `injected by the test proxy (${fault.status})`,
        reason: REASONS[fault.status] ?? "InternalError",
        code: fault.status,
        ...(fault.retryAfterSeconds === undefined
          ? {}
          : { details: { retryAfterSeconds: fault.retryAfterSeconds } }),
      };
      return new Response(JSON.stringify(status), { status: fault.status, headers });
    }

    const headers = new Headers(req.headers);
    for (const h of DROPPED_REQUEST_HEADERS) headers.delete(h);
    headers.set("accept-encoding", "identity");
    const body = req.method === "GET" || req.method === "HEAD" ? undefined : await req.arrayBuffer();
    let res: Response;
    try {
      res = await this.#upstream.fetch(this.#cluster.url + url.pathname + url.search, {
        method: req.method,
        headers,
        ...(body === undefined ? {} : { body }),
        redirect: "manual",
      });
    } catch (err) {
      entry.status = 0;
      return new Response(`proxy: cannot reach the API server: ${(err as Error).message}`, { status: 502 });
    }
    entry.status = res.status;
    const out = new Headers(res.headers);
    for (const h of DROPPED_RESPONSE_HEADERS) out.delete(h);
    if (!watch || !res.body) {
      return new Response(await res.arrayBuffer(), { status: res.status, headers: out });
    }
    // Streamed: keep a handle so that cutStreams() can break it.
    const reader = res.body.getReader();
    let cut = () => {};
    const stream = new ReadableStream<Uint8Array>({
      start: (controller) => {
        // Ends the response as the API server ends a watch at its timeout (an errored stream
        // would surface in Bun as an unhandled rejection of the test process).
        cut = () => {
          this.#streams.delete(cut);
          reader.cancel().catch(() => {});
          try {
            controller.close();
          } catch {
            // Already closed.
          }
        };
        this.#streams.add(cut);
      },
      pull: async (controller) => {
        try {
          const { done, value } = await reader.read();
          if (done) {
            this.#streams.delete(cut);
            controller.close();
          } else controller.enqueue(value);
        } catch {
          // Closed by cut(), or the API server broke the stream: end it here too.
          cut();
        }
      },
      cancel: () => {
        this.#streams.delete(cut);
        reader.cancel().catch(() => {});
      },
    });
    return new Response(stream, { status: res.status, headers: out });
  }
}
