// HTTP/2 client sessions (RFC 9113) over one TLS socket each: the socket shell of the connection in
// lib/h2connection.ts, which keeps the protocol's state and decides every frame (lib/h2framer.ts
// cuts and queues them). The shell dials with ALPN h2, feeds the core what the socket reads, writes
// what it queued (one write per tick for many frames; what the socket does not take whole waits for
// its drain), and keeps the clocks and timers: the time of the last read, how long our writes have
// waited, the SETTINGS timeout, the stream-start timeout, the payload of our PINGs.
//
// The socket is Bun's native TLS socket (Bun.connect; one handler object for every session), not
// node:tls, whose Duplex over the same native socket cost ~12 KiB more per connection and a fifth
// more CPU per handshake (a connection per machine, 1,000 watches: 27.6 -> 15.6 KiB settled). The
// TLS stack checks the chain against the CA and an IP endpoint against the certificate (no server
// name is sent for an IP); checkServerIdentity runs on the peer certificate once the handshake is
// done.
//
// A hostile server (a compromised apid, or anyone holding its certificate) is held to the limits of
// lib/h2limits.ts, which nghttp2 and Go's x/net/http2 also keep: CONTINUATION frames per header
// block, acknowledgements of PING and SETTINGS it has not read, frames that carry nothing (empty
// DATA, PRIORITY, unknown types), entries per SETTINGS, both flow-control windows; a connection
// whose server sends no SETTINGS in time, and a request that waits too long for a stream slot or
// its response headers (only requests without a deadline), end with an error naming the cause.
//
// Why not node:http2: in Bun each of its client streams is a Duplex with its own readable and
// writable state, listeners and native stream record, about 10-13 KB of RSS per idle stream; the
// CCM keeps two Talos watches open per node. A stream here is one small object (~0.3 KB) whose
// handler is the gRPC call itself, so an idle watch costs what its call state costs.

import { isIP } from "node:net";
import type * as tls from "node:tls";
import type { Socket, SocketHandler } from "bun";
import { H2Connection, type H2ConnectionHost } from "./h2connection.ts";
import { DEFAULT_SETTINGS_TIMEOUT_MS, DEFAULT_STREAM_START_TIMEOUT_MS } from "./h2limits.ts";
import type { H2Stream, H2StreamHandler } from "./h2stream.ts";

export { H2Code } from "./h2framer.ts";
export type { H2Headers } from "./h2headerblock.ts";
export { H2Stream, type H2StreamHandler } from "./h2stream.ts";

/** Session events. */
export interface H2SessionEvents {
  /** TLS is up and the preface is sent. */
  connect?(): void;
  /** The connection failed (before close). */
  error?(err: Error): void;
  /** The server sent GOAWAY: no new streams; the listed ones complete. */
  goaway?(code: number): void;
  /** The socket closed; every stream is closed by now. */
  close?(): void;
}

/** Where and how {@link H2Session.connect} dials. */
export interface H2ConnectOptions {
  host: string;
  port: number;
  /** `host:port` as sent in :authority. */
  authority: string;
  ca?: string;
  cert: string;
  key: string;
  servername?: string;
  checkServerIdentity?: tls.ConnectionOptions["checkServerIdentity"];
  /** The server's SETTINGS and its acknowledgement of ours must arrive within this after TLS (default 10 s). */
  settingsTimeoutMs?: number;
  /**
   * A request made with `startTimeout` must get a stream slot and then its response headers within
   * this (default 30 s); silence afterwards is not bounded here.
   */
  streamStartTimeoutMs?: number;
}

/** ALPN's wire form of ["h2"]: one length-prefixed name. */
const ALPN_H2 = Buffer.from([2, 0x68, 0x32]);

/** Per-request options of {@link H2Session.request}. */
export interface H2RequestOptions {
  /** Bound the wait for a stream slot and the response headers (for requests without a deadline). */
  startTimeout?: boolean;
}

/**
 * An HTTP/2 client session on a TLS socket with ALPN h2.
 *
 * @example
 * const s = H2Session.connect({ host, port, authority: `${host}:${port}`, ca, cert, key }, { close: () => {} });
 * s.request([[":method", "POST"], [":path", "/pkg.Svc/Method"], ["content-type", "application/grpc"]], body, handler);
 */
export class H2Session {
  /** What the connection asks of its session: one object for every session, each call naming its own. */
  static readonly #host: H2ConnectionHost<H2Session> = {
    wake: (s) => s.#scheduleFlush(),
    later: (fn) => queueMicrotask(fn),
    failed: (s, err) => {
      s.#flush();
      s.destroy(err);
    },
    ended: (s) => {
      s.#flush();
      if (s.#pending.length > 0) s.#endWhenWritten = true;
      else s.#socket?.end();
    },
    goaway: (s, code) => s.#events.goaway?.(code),
  };
  /** Bun's native TLS socket handlers, one object for every session (the socket's data is its session). */
  static readonly #handlers: SocketHandler<H2Session> = {
    open: (socket) => socket.data.#opened(socket),
    handshake: (socket, success, authorizationError) =>
      socket.data.#handshake(socket, success, authorizationError),
    data: (socket, chunk) => socket.data.#receive(chunk),
    drain: (socket) => socket.data.#writeOut(),
    end: (socket) => socket.data.#teardown(),
    close: (socket, err) => socket.data.#closed(err),
    // A socket error, or an exception thrown by one of these handlers: the session cannot go on.
    error: (socket, err) => {
      socket.data.#failed(err);
      socket.data.destroy(err);
    },
    connectError: (socket, err) => socket.data.#closed(err),
  };
  /** The socket, once Bun has opened it. */
  #socket: Socket<H2Session> | undefined;
  readonly #opts: H2ConnectOptions;
  /** What to do with the socket once it opens: keep the process alive or not, or close it at once. */
  #wantRef = true;
  #wantDestroy = false;
  /** Output taken from the core that the socket has not accepted yet (takeOutput() chunks). */
  #pending: Buffer[] = [];
  /** Bytes of #pending[0] already written. */
  #pendingAt = 0;
  /** end() was asked while output was pending: end once it is written. */
  #endWhenWritten = false;
  readonly #events: H2SessionEvents;
  /** The protocol's state: streams, windows, settings, the frames to write. */
  readonly #core: H2Connection<H2Session>;
  #settingsTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #settingsTimeoutMs: number;
  /** Bounds the wait of requests made with `startTimeout`; one timer serves every stream. */
  #startTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #startTimeoutMs: number;
  /** performance.now() of the last progress while writes are in flight, else 0. */
  #stallSince = 0;
  /** A socket write completed (its callback; one function per session, not one per write). */
  readonly #written = (): void => {
    this.#stallSince = this.#core.written() ? performance.now() : 0;
  };
  #flushQueued = false;
  #connected = false;
  /** performance.now() of the last bytes received. */
  lastReadMs = performance.now();

  private constructor(opts: H2ConnectOptions, events: H2SessionEvents) {
    this.#opts = opts;
    this.#events = events;
    this.#core = new H2Connection(H2Session.#host, this, opts.authority);
    this.#settingsTimeoutMs = opts.settingsTimeoutMs ?? DEFAULT_SETTINGS_TIMEOUT_MS;
    this.#startTimeoutMs = opts.streamStartTimeoutMs ?? DEFAULT_STREAM_START_TIMEOUT_MS;
  }

  /** Dials `opts` and starts the session; events report the outcome. */
  static connect(opts: H2ConnectOptions, events: H2SessionEvents): H2Session {
    const s = new H2Session(opts, events);
    // An IP is checked against the certificate by the TLS stack itself when no server name is
    // sent; a DNS name is sent and checked (and checkServerIdentity runs once the handshake is done).
    const serverName = isIP(opts.host) === 0 ? (opts.servername ?? opts.host) : undefined;
    Bun.connect<H2Session>({
      hostname: opts.host,
      port: opts.port,
      data: s,
      socket: H2Session.#handlers,
      tls: {
        ...(opts.ca === undefined ? {} : { ca: opts.ca }),
        cert: opts.cert,
        key: opts.key,
        ...(serverName === undefined ? {} : { serverName }),
        rejectUnauthorized: true,
        ALPNProtocols: ALPN_H2,
      } as never,
    }).catch((err: Error) => s.#closed(err));
    return s;
  }

  /** The error that ended the connection, if any. */
  get error(): Error | undefined {
    return this.#core.error;
  }

  /** No new streams may start (GOAWAY received or close() called). */
  get draining(): boolean {
    return this.#core.draining;
  }

  /** The socket is gone. */
  get destroyed(): boolean {
    return this.#core.destroyed;
  }

  /** How long our writes have waited without any of them being written out (0: none waits). */
  get writeStalledMs(): number {
    return this.#stallSince === 0 ? 0 : performance.now() - this.#stallSince;
  }

  /** Open streams (started, or waiting for a slot or the server's SETTINGS). */
  get streamCount(): number {
    return this.#core.streamCount;
  }

  /** Keeps the process alive while the socket is open. */
  ref(): void {
    this.#wantRef = true;
    this.#socket?.ref();
  }

  /** Lets the process exit while the socket is open. */
  unref(): void {
    this.#wantRef = false;
    this.#socket?.unref();
  }

  /**
   * Starts a request: HEADERS with `headers` (pseudo-headers first; :scheme and :authority are
   * added), then `body` as DATA with END_STREAM.
   * @throws {Error} when the session is draining or closed.
   */
  request(
    headers: ReadonlyArray<readonly [string, string]>,
    body: Uint8Array,
    handler: H2StreamHandler,
    opts: H2RequestOptions = {},
  ): H2Stream {
    const startedAt = opts.startTimeout ? performance.now() : undefined;
    const stream = this.#core.request(headers, body, handler, startedAt);
    if (startedAt !== undefined && this.#startTimer === undefined) this.#armStartTimer(this.#startTimeoutMs);
    return stream;
  }

  /** Sends a PING; `done` gets its ACK, or an error when the connection ends first. */
  ping(done: (err?: Error) => void): void {
    if (this.destroyed) {
      done(this.error ?? new Error("the HTTP/2 session is closed"));
      return;
    }
    const payload = Buffer.allocUnsafe(8);
    payload.writeDoubleBE(performance.now());
    this.#core.ping(payload, done);
  }

  /** Graceful close: no new streams; the socket ends once the open ones have closed. */
  close(): void {
    this.#core.close();
  }

  /** Closes the socket at once; open streams close with the connection lost. */
  destroy(err?: Error): void {
    if (this.destroyed) return;
    if (err) this.#core.error ??= err;
    this.#wantDestroy = true;
    this.#socket?.terminate();
    this.#teardown();
  }

  #opened(socket: Socket<H2Session>): void {
    this.#socket = socket;
    if (this.#wantDestroy || this.destroyed) {
      socket.terminate();
      return;
    }
    if (!this.#wantRef) socket.unref();
  }

  #handshake(socket: Socket<H2Session>, success: boolean, authorizationError: Error | null): void {
    if (!success || authorizationError) {
      this.destroy(authorizationError ?? new Error("the TLS handshake failed"));
      return;
    }
    const identity = this.#opts.checkServerIdentity?.(
      this.#opts.host,
      socket.getPeerCertificate() as unknown as tls.PeerCertificate,
    );
    if (identity) {
      this.destroy(identity);
      return;
    }
    if (socket.alpnProtocol !== "h2") {
      this.destroy(new Error(`the server did not negotiate HTTP/2 (ALPN ${socket.alpnProtocol || "none"})`));
      return;
    }
    this.#connected = true;
    this.#core.open();
    this.#flush();
    this.#settingsTimer = setTimeout(() => this.#settingsTimedOut(), this.#settingsTimeoutMs);
    this.#settingsTimer.unref?.();
    this.#events.connect?.();
  }

  #failed(err: Error): void {
    this.#core.error ??= err;
    this.#events.error?.(err);
  }

  #closed(err?: Error): void {
    if (err && !this.destroyed) this.#failed(err);
    this.#teardown();
  }

  #receive(chunk: Buffer): void {
    const now = performance.now();
    this.lastReadMs = now;
    this.#core.receive(chunk, now);
    if (this.#settingsTimer !== undefined && this.#core.settled) {
      clearTimeout(this.#settingsTimer);
      this.#settingsTimer = undefined;
    }
  }

  #teardown(): void {
    if (this.destroyed) return;
    clearTimeout(this.#settingsTimer);
    clearTimeout(this.#startTimer);
    this.#core.teardown();
    this.#events.close?.();
  }

  #settingsTimedOut(): void {
    this.#core.settingsTimedOut(this.#settingsTimeoutMs);
  }

  #armStartTimer(delayMs: number): void {
    this.#startTimer = setTimeout(() => this.#startTimedOut(), Math.max(1, Math.ceil(delayMs)));
    this.#startTimer.unref?.();
  }

  /** Resets the requests whose wait is over, oldest first, and waits for the next one. */
  #startTimedOut(): void {
    this.#startTimer = undefined;
    const next = this.#core.expireStarts(performance.now(), this.#startTimeoutMs);
    if (next !== undefined) this.#armStartTimer(next);
  }

  #scheduleFlush(): void {
    if (!this.#flushQueued && this.#connected) {
      this.#flushQueued = true;
      queueMicrotask(() => this.#flush());
    }
  }

  /** Writes what the connection queued, in one socket write. */
  #flush(): void {
    this.#flushQueued = false;
    if (!this.#connected) return;
    const data = this.#core.takeOutput();
    if (data === undefined) return;
    if (this.#stallSince === 0) this.#stallSince = performance.now();
    this.#pending.push(data);
    if (this.#pending.length === 1) this.#writeOut();
  }

  /**
   * Writes what the socket has not taken yet, until it takes less than it was given (then its drain
   * writes on). Each chunk taken whole counts as written: the kernel has it, the server is reading.
   */
  #writeOut(): void {
    const socket = this.#socket;
    if (socket === undefined || this.destroyed) return;
    for (let chunk = this.#pending[0]; chunk !== undefined; chunk = this.#pending[0]) {
      // Bun's write(data, offset) takes byteLength as the whole chunk's: pass what is left.
      const n = socket.write(chunk, this.#pendingAt, chunk.length - this.#pendingAt);
      if (n < 0) return;
      this.#pendingAt += n;
      if (this.#pendingAt < chunk.length) return;
      this.#pending.shift();
      this.#pendingAt = 0;
      this.#written();
    }
    if (this.#endWhenWritten) socket.end();
  }
}
