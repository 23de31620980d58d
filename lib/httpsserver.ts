// The HTTPS transport of the secure port. Bun.serve by default, the leanest listener; with client
// CAs, node:tls in front of node:http, because Bun.serve does not show a handler the client's
// certificate (node's listener costs ~1 MiB of resident memory and a few ms of start-up, so only
// those who configure client certificates pay for it). Requests reach the handler as a URL, their
// headers with every value, and the presented certificate chain; the serving certificate and trusted
// client CAs can be swapped without closing the listener.

import { constants, X509Certificate } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { DetailedPeerCertificate, TLSSocket } from "node:tls";
import type { HeaderValues } from "./clientcerts.ts";
import { logger } from "./log.ts";

const log = logger("serve");

/** Answers one request: its URL, its headers and the client's certificate chain, leaf first. */
export type Handler = (url: URL, headers: HeaderValues, chain: X509Certificate[]) => Promise<Response>;

/** What the TLS listener presents and trusts. */
export interface TlsSettings {
  /** PEM serving certificate (chain after the leaf) and key. */
  cert: string;
  key: string;
  /** "TLSv1.2" or "TLSv1.3". */
  minVersion: "TLSv1.2" | "TLSv1.3";
  /** Client CAs whose certificates are asked for (PEM); none: no client certificate is requested. */
  clientCAs: string[];
}

/** A listening HTTPS server. */
export interface HttpsListener {
  readonly port: number;
  /** Swaps the serving certificate and client CAs for new connections. */
  update(settings: TlsSettings): void;
  /** Stops listening and closes every connection. */
  stop(): Promise<void>;
}

/** A presented chain longer than this is cut: a leaf, intermediates and a root fit. */
const MAX_PEER_CHAIN = 10;

function contextOptions(s: TlsSettings) {
  return {
    cert: s.cert,
    key: s.key,
    minVersion: s.minVersion,
    ...(s.clientCAs.length ? { ca: s.clientCAs } : {}),
  };
}

/**
 * Listens on `bindAddress:port` (0: any free port). A client certificate is requested only when the
 * first settings name client CAs; it is never required (bearer tokens work without one), and its
 * verification is the handler's.
 * @throws when the address cannot be bound or the certificate is unusable.
 */
export async function listenHttps(
  bindAddress: string,
  port: number,
  settings: TlsSettings,
  handle: Handler,
): Promise<HttpsListener> {
  return settings.clientCAs.length > 0
    ? listenNode(bindAddress, port, settings, handle)
    : listenBun(bindAddress, port, settings, handle);
}

/**
 * OpenSSL options for Bun.serve's TLS floor: it never accepts less than TLS 1.2, so only a TLS 1.3
 * minimum needs any.
 */
function secureOptions(min: TlsSettings["minVersion"]): { secureOptions?: number } {
  return min === "TLSv1.3"
    ? { secureOptions: constants.SSL_OP_NO_TLSv1 | constants.SSL_OP_NO_TLSv1_1 | constants.SSL_OP_NO_TLSv1_2 }
    : {};
}

/** Bun.serve, without client certificates; a new certificate is bound beside the old listener (SO_REUSEPORT), which then drains. */
function listenBun(bindAddress: string, port: number, settings: TlsSettings, handle: Handler): HttpsListener {
  const fetch = (req: Request) => {
    const headers = new Map<string, string[]>();
    for (const [name, value] of req.headers) headers.set(name, [value]);
    return handle(new URL(req.url), headers, []);
  };
  const error = (err: Error) => {
    log.error("Request failed", err);
    return new Response("Internal Server Error\n", { status: 500 });
  };
  const serve = (p: number, s: TlsSettings) =>
    Bun.serve({
      hostname: bindAddress,
      port: p,
      reusePort: true,
      fetch,
      error,
      tls: { cert: s.cert, key: s.key, ...secureOptions(s.minVersion) },
    });
  let server = serve(port, settings);
  const bound = server.port as number;
  return {
    port: bound,
    update(next) {
      const old = server;
      server = serve(bound, next);
      void old.stop(false);
    },
    stop: () => server.stop(true),
  };
}

/** node:tls in front of node:http, asking for (never requiring) a client certificate. */
async function listenNode(
  bindAddress: string,
  port: number,
  settings: TlsSettings,
  handle: Handler,
): Promise<HttpsListener> {
  // Loaded here, not at start-up: only a secure port with client CAs pays for node's listener.
  const [{ createServer: createHttpServer }, { createServer: createTlsServer }] = await Promise.all([
    import("node:http"),
    import("node:tls"),
  ]);
  const sockets = new Set<TLSSocket>();
  const http = createHttpServer((req, res) => void respond(req, res, handle));
  const tls = createTlsServer(
    { ...contextOptions(settings), requestCert: true, rejectUnauthorized: false },
    (socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      http.emit("connection", socket);
    },
  );
  tls.on("tlsClientError", (err) => log.v(4).info("TLS handshake failed", { err: err.message }));
  await new Promise<void>((resolve, reject) => {
    tls.once("error", reject);
    tls.listen(port, bindAddress, () => {
      tls.off("error", reject);
      resolve();
    });
  });
  tls.on("error", (err) => log.error("Secure server failed", err));
  return {
    port: (tls.address() as AddressInfo).port,
    update: (next) => tls.setSecureContext(contextOptions(next)),
    stop: () =>
      new Promise<void>((resolve) => {
        tls.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}

async function respond(req: IncomingMessage, res: ServerResponse, handle: Handler): Promise<void> {
  let response: Response;
  try {
    // Only the path and query count: the Host header and an absolute-form target are the client's.
    const url = new URL(req.url ?? "/", "https://localhost");
    response = await handle(url, headerValues(req.rawHeaders), peerChain(req.socket as TLSSocket));
  } catch (err) {
    log.error("Request failed", err);
    response = new Response("Internal Server Error\n", { status: 500 });
  }
  const body = Buffer.from(await response.arrayBuffer());
  res.writeHead(response.status, { ...Object.fromEntries(response.headers), "content-length": body.length });
  res.end(req.method === "HEAD" ? undefined : body);
}

/** Headers by lower-cased name with every value, from node's flat [name, value, …] list. */
export function headerValues(raw: readonly string[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = (raw[i] as string).toLowerCase();
    const values = out.get(name);
    if (values) values.push(raw[i + 1] as string);
    else out.set(name, [raw[i + 1] as string]);
  }
  return out;
}

/** The certificates the client presented (and those TLS chained them to), leaf first. */
function peerChain(socket: TLSSocket): X509Certificate[] {
  const out: X509Certificate[] = [];
  const seen = new Set<DetailedPeerCertificate>();
  let c: DetailedPeerCertificate | undefined = socket.getPeerCertificate?.(true);
  while (c?.raw && !seen.has(c) && out.length < MAX_PEER_CHAIN) {
    seen.add(c);
    out.push(new X509Certificate(c.raw));
    c = c.issuerCertificate;
  }
  return out;
}
