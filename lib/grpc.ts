// gRPC client transport on HTTP/2 with TLS (lib/h2.ts), as much of it as lib/talos.ts needs: one HTTP/2
// session per endpoint shared by every call, unary and server-streaming calls, the 5-byte message
// framing, statuses from trailers, trailers-only headers, HTTP statuses and RST_STREAM codes
// (grpc/grpc doc/PROTOCOL-HTTP2.md and doc/http-grpc-status-mapping.md; lib/grpcstatus.ts and
// lib/grpcframing.ts hold them, and this file re-exports them: it is the family's surface), deadlines sent as
// `grpc-timeout` and enforced locally, cancellation, reconnection with backoff after failed
// connects, and keepalive pings that find silently dead connections (and connections that read
// nothing we send). Against a hostile server, a message costs at most about twice its bytes
// whatever its DATA framing, and a call's unread messages are packed (lib/grpcmessages.ts).
// It replaces grpc-js at runtime (grpc-js stays the fake apid's server in tests): loading grpc-js
// costs ~9.5 MB RSS and each of its client streams ~23 KB RSS, node:http2's ~13 KB in Bun, too much
// for two Watch streams per node; lib/h2.ts's cost little more than the call. talos.ts imports this
// module on its first call, so the transport is loaded only then.
// Not implemented: compression (the client advertises none, so servers send identity frames),
// client or bidirectional streaming, name resolution beyond what the socket does.

import { isIP } from "node:net";
import { checkServerIdentity, type PeerCertificate } from "node:tls";
import { type Backoff, backoffDelay } from "./backoffpolicy.ts";
import { frameMessage, MessageDecoder } from "./grpcframing.ts";
import { MessageQueue } from "./grpcmessages.ts";
import {
  decodeGrpcMessage,
  encodeGrpcTimeout,
  errorFromResponseHeaders,
  errorFromRstCode,
  GrpcError,
  type Headers,
  statusFromHeaders,
  statusFromHttp,
} from "./grpcstatus.ts";
import { H2Code, H2Session, type H2Stream, type H2StreamHandler } from "./h2.ts";
import { logger } from "./log.ts";
import { endpointTarget } from "./talosconfig.ts";
import { GrpcStatus } from "./taloserrors.ts";

const log = logger("grpc");

// The family's public surface: its statuses and framing live in lib/grpcstatus.ts and lib/grpcframing.ts.
export {
  decodeGrpcMessage,
  encodeGrpcTimeout,
  errorFromResponseHeaders,
  errorFromRstCode,
  frameMessage,
  GrpcError,
  type Headers,
  MessageDecoder,
  statusFromHeaders,
  statusFromHttp,
};

/** The gRPC default receive limit; callers talking to apid raise it. */
const DEFAULT_MAX_RECEIVE_BYTES = 4 << 20;

/**
 * apid is a grpc-go server without a keepalive policy of its own: grpc-go's default enforcement
 * allows one ping per 5 minutes and answers the third ping that comes sooner with GOAWAY
 * ENHANCE_YOUR_CALM ("too_many_pings"), which would cut every idle Watch on the connection. So
 * ping after 5 minutes and 10 seconds without anything received.
 */
const DEFAULT_KEEPALIVE_MS = 310_000;
const DEFAULT_KEEPALIVE_TIMEOUT_MS = 20_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 20_000;

/** The longest delay setTimeout honours (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Messages, or bytes of them, queued unread before a stream stops returning flow-control credit
 * (the server then stops within the stream's window, 1 MiB), and below which it returns it again.
 */
const QUEUE_HIGH = 256;
const QUEUE_LOW = 64;
const QUEUE_HIGH_BYTES = 1 << 20;
const QUEUE_LOW_BYTES = 256 << 10;

// ---------------------------------------------------------------------------------------------
// Channel

/** The options of `opts` named, those that are set. */
function pick<T extends object, K extends keyof T>(opts: T, ...names: K[]): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const n of names) if (opts[n] !== undefined) out[n] = opts[n];
  return out;
}

/** Where and how {@link GrpcChannel} connects. */
export interface GrpcChannelOptions {
  /** DNS name or IP address of the server; the server certificate must name it. */
  host: string;
  port: number;
  /** CA bundle PEM; absent means the system roots. */
  ca?: string;
  /** Client certificate PEM (mutual TLS). */
  cert: string;
  /** Client key PEM. */
  key: string;
  /**
   * TLS server name (SNI) for a DNS host (default: the host); none is sent to an IP address, which
   * the certificate must name. The certificate is checked against `host` whatever the SNI.
   */
  servername?: string;
  /** Largest message received (default 4 MiB, the gRPC default). */
  maxReceiveMessageBytes?: number;
  /** Backoff between connection attempts after failed ones (default 1 s → 120 s). */
  backoff?: Backoff;
  /** A PING is sent after this long without receiving anything while calls are open (default 310 s). */
  keepaliveMs?: number;
  /** The connection is dropped when a PING is not answered within this (default 20 s). */
  keepaliveTimeoutMs?: number;
  /** A connection not established within this is dropped (default 20 s). */
  connectTimeoutMs?: number;
  /**
   * The server's SETTINGS must arrive within this once TLS is up, else the connection is dropped
   * (default 10 s; lib/h2limits.ts).
   */
  settingsTimeoutMs?: number;
  /**
   * A call without a deadline fails UNAVAILABLE when it gets no stream slot and response headers
   * within this (default 30 s; lib/h2limits.ts); a watch that then stays silent is not bounded.
   */
  streamStartTimeoutMs?: number;
  /** Jitter source of the backoff (tests make it deterministic). */
  random?: () => number;
}

/** Per-call options. */
export interface GrpcCallOptions {
  /** Custom metadata (ASCII headers), e.g. `{ node: "10.0.0.5" }`. */
  metadata?: Readonly<Record<string, string>>;
  /** Deadline from now; sent as `grpc-timeout` and enforced locally. None: no deadline. */
  timeoutMs?: number;
  /** Cancels the call (RST_STREAM CANCEL); the call then fails with CANCELLED. */
  signal?: AbortSignal;
}

/** Receives a call's messages as they arrive (see {@link GrpcStream.listen}). */
export interface GrpcStreamListener {
  /** One message. It should not throw: a throw cancels the call with INTERNAL. */
  onMessage(message: Uint8Array): void;
  /** The call ended: null for status OK, else its error. Called once, last. */
  onEnd(err: GrpcError | null): void;
}

/** The messages of a server-streaming call, pulled one at a time or pushed to a listener. */
export interface GrpcStream {
  /**
   * The next message; undefined once the call ended with status OK.
   * @throws {GrpcError} the call's status when it is not OK.
   */
  next(): Promise<Uint8Array | undefined>;
  /**
   * Pushes the messages to `listener` from now on, synchronously as they are decoded: first those
   * already received, then each one as it arrives, then the end (at once if the call already
   * ended). A long-lived watch holds no promise or frame while it waits. Not with next().
   */
  listen(listener: GrpcStreamListener): void;
  /**
   * Ends the call (RST_STREAM CANCEL) and drops unread messages; when it was still running, a
   * pending or later next() fails with CANCELLED. Idempotent.
   */
  cancel(): void;
}

/**
 * Connectivity as grpc-js names it: `idle` (no connection; the next call dials), `connecting`,
 * `ready`, `failing` (the last attempt failed; calls fail at once until the backoff has passed).
 */
export type ChannelState = "idle" | "connecting" | "ready" | "failing";

/** One HTTP/2 session and what the channel tracks of it. */
class Connection {
  session!: H2Session;
  /** Streams open on it; the session holds the process only while some are. */
  streams = 0;
  connected = false;
  /** A response arrived: the server accepted us (TLS 1.3 refuses client certificates after the handshake). */
  answered = false;
  /** GOAWAY received or the session is ending: no new streams. */
  draining = false;
  error: Error | undefined;
  keepaliveTimer: ReturnType<typeof setTimeout> | undefined;

  get gone(): boolean {
    return this.draining || this.session.draining || this.session.destroyed;
  }

  /** performance.now() of the last bytes received: the peer is alive. */
  get lastRead(): number {
    return this.session.lastReadMs;
  }

  opened(): void {
    if (this.streams++ === 0) this.session.ref();
  }

  closed(): void {
    if (--this.streams === 0 && !this.session.destroyed) this.session.unref();
  }
}

/**
 * A gRPC channel to one endpoint over one shared HTTP/2 session with mutual TLS, dialled on the
 * first call and again after the connection is lost (GOAWAY, close, error, unanswered PING).
 *
 * @example
 * const ch = new GrpcChannel({ host: "10.0.0.2", port: 50000, ca, cert, key });
 * const reply = await ch.unary("/machine.MachineService/Version", new Uint8Array(), { timeoutMs: 10_000 });
 * const stream = ch.serverStream("/cosi.resource.State/Watch", request, { metadata: { node: "10.0.0.5" } });
 * for (let m = await stream.next(); m !== undefined; m = await stream.next()) handle(m);
 * ch.close();
 */
export class GrpcChannel {
  readonly #opts: GrpcChannelOptions;
  readonly #authority: string;
  readonly #maxReceive: number;
  readonly #backoff: Backoff;
  readonly #random: () => number;
  readonly #keepaliveMs: number;
  readonly #keepaliveTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  #conn: Connection | undefined;
  /** Consecutive failed connection attempts. */
  #failures = 0;
  /** Date.now() before which calls fail at once (after a failed attempt). */
  #retryAt = 0;
  #lastError = "";
  #closed = false;

  /**
   * Builds a channel; no I/O happens until the first call.
   * @throws {TypeError} on a missing host or an invalid port.
   */
  constructor(opts: GrpcChannelOptions) {
    if (!opts?.host) throw new TypeError("GrpcChannel: host is required");
    if (!Number.isInteger(opts.port) || opts.port < 1 || opts.port > 65535)
      throw new TypeError(`GrpcChannel: invalid port ${opts.port}`);
    this.#opts = opts;
    this.#authority = endpointTarget(opts);
    this.#maxReceive = opts.maxReceiveMessageBytes ?? DEFAULT_MAX_RECEIVE_BYTES;
    this.#backoff = opts.backoff ?? { initialMs: 1_000, maxMs: 120_000 };
    this.#random = opts.random ?? Math.random;
    this.#keepaliveMs = opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    this.#keepaliveTimeoutMs = opts.keepaliveTimeoutMs ?? DEFAULT_KEEPALIVE_TIMEOUT_MS;
    this.#connectTimeoutMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  }

  /** The connectivity state; see {@link ChannelState}. */
  get state(): ChannelState {
    const conn = this.#conn;
    if (conn && !conn.gone) return conn.connected ? "ready" : "connecting";
    return Date.now() < this.#retryAt ? "failing" : "idle";
  }

  /** Calls and streams open on the current connection (0 without one). */
  get activeCalls(): number {
    return this.#conn?.streams ?? 0;
  }

  /**
   * A unary call: one request message, exactly one response message.
   * @throws {GrpcError} the status of a failed call; UNIMPLEMENTED when the server answers OK
   *   with no message or several (a cardinality violation).
   */
  async unary(path: string, message: Uint8Array, opts: GrpcCallOptions = {}): Promise<Uint8Array> {
    const stream = this.serverStream(path, message, opts);
    const reply = await stream.next();
    if (reply === undefined) throw new GrpcError(GrpcStatus.UNIMPLEMENTED, "No message received");
    if ((await stream.next()) !== undefined) {
      stream.cancel();
      throw new GrpcError(GrpcStatus.UNIMPLEMENTED, "Too many responses received");
    }
    return reply;
  }

  /**
   * A server-streaming call: one request message, messages pulled with next() until the status.
   * Never throws itself: a call that cannot start fails from its first next().
   */
  serverStream(path: string, message: Uint8Array, opts: GrpcCallOptions = {}): GrpcStream {
    const call = new Call(this.#maxReceive);
    if (opts.signal?.aborted) return call.fail(new GrpcError(GrpcStatus.CANCELLED, "Cancelled on client"));
    if (opts.timeoutMs !== undefined && !(opts.timeoutMs > 0)) {
      return call.fail(
        new GrpcError(GrpcStatus.DEADLINE_EXCEEDED, "Deadline exceeded before the call started"),
      );
    }
    const headers: Array<readonly [string, string]> = [
      [":method", "POST"],
      [":path", path],
      // Sent right after the pseudo-headers, as the spec asks.
      ...(opts.timeoutMs === undefined ? [] : [["grpc-timeout", encodeGrpcTimeout(opts.timeoutMs)] as const]),
      ["content-type", "application/grpc"],
      ["te", "trailers"],
      ...Object.entries(opts.metadata ?? {}).map(([k, v]) => [k.toLowerCase(), v] as const),
    ];
    for (let attempt = 0; ; attempt++) {
      let conn: Connection;
      try {
        conn = this.#connection();
      } catch (err) {
        return call.fail(err as GrpcError);
      }
      try {
        const start = { startTimeout: opts.timeoutMs === undefined };
        call.start(conn, opts, (handler) =>
          conn.session.request(headers, frameMessage(message), handler, start),
        );
      } catch (err) {
        // GOAWAY not yet seen by us, stream ids exhausted or a session torn down meanwhile: the
        // request was never sent, so one more try on a fresh connection is safe.
        conn.draining = true;
        if (this.#conn === conn) this.#conn = undefined;
        conn.session.close();
        if (attempt === 0) continue;
        return call.fail(
          new GrpcError(GrpcStatus.UNAVAILABLE, `Cannot start a call to ${this.#authority}: ${err}`, {
            cause: err,
          }),
        );
      }
      return call;
    }
  }

  /**
   * Closes the channel: calls in flight finish on the current connection, which then closes;
   * later calls fail with UNAVAILABLE. Idempotent.
   */
  close(): void {
    this.#closed = true;
    const conn = this.#conn;
    this.#conn = undefined;
    if (conn) {
      conn.draining = true;
      clearTimeout(conn.keepaliveTimer);
      conn.session.close();
    }
  }

  /** The connection for a new call, dialled when there is none. @throws {GrpcError} UNAVAILABLE */
  #connection(): Connection {
    if (this.#closed) throw new GrpcError(GrpcStatus.UNAVAILABLE, `Channel to ${this.#authority} is closed`);
    const current = this.#conn;
    if (current && !current.gone) return current;
    if (Date.now() < this.#retryAt) {
      throw new GrpcError(
        GrpcStatus.UNAVAILABLE,
        `No connection to ${this.#authority}; last attempt failed: ${this.#lastError}`,
      );
    }
    return this.#dial();
  }

  #dial(): Connection {
    const conn = new Connection();
    const connectTimer = setTimeout(() => {
      conn.session.destroy(new Error(`connection not established within ${this.#connectTimeoutMs} ms`));
    }, this.#connectTimeoutMs);
    connectTimer.unref?.();
    try {
      conn.session = this.#open(conn, connectTimer);
    } catch (err) {
      clearTimeout(connectTimer);
      this.#lastError = (err as Error).message;
      this.#retryAt = Date.now() + backoffDelay(this.#failures++, this.#backoff, this.#random);
      throw new GrpcError(
        GrpcStatus.UNAVAILABLE,
        `Cannot connect to ${this.#authority}: ${this.#lastError}`,
        {
          cause: err,
        },
      );
    }
    this.#conn = conn;
    conn.session.unref();
    return conn;
  }

  /** The session of `conn`, dialled, with its events wired to the channel. */
  #open(conn: Connection, connectTimer: ReturnType<typeof setTimeout>): H2Session {
    const { host, ca, cert, key } = this.#opts;
    const servername = this.#opts.servername ?? (isIP(host) ? undefined : host);
    return H2Session.connect(
      {
        host,
        port: this.#opts.port,
        authority: this.#authority,
        ...(ca === undefined ? {} : { ca }),
        cert,
        key,
        ...(servername === undefined ? {} : { servername }),
        // The identity checked is the endpoint's, also when the SNI differs (IP endpoints).
        checkServerIdentity: (_name: string, peer: PeerCertificate) => checkServerIdentity(host, peer),
        ...pick(this.#opts, "settingsTimeoutMs", "streamStartTimeoutMs"),
      },
      {
        connect: () => {
          clearTimeout(connectTimer);
          conn.connected = true;
          this.#armKeepalive(conn, this.#keepaliveMs);
        },
        error: (err: Error) => {
          conn.error ??= err;
          log.v(2).info("gRPC connection failed", { target: this.#authority, err: err.message });
        },
        goaway: (code: number) => {
          conn.draining = true;
          if (this.#conn === conn) this.#conn = undefined;
          if (code !== H2Code.NO_ERROR) conn.error ??= new Error(`GOAWAY with HTTP/2 error code ${code}`);
          log.v(2).info("gRPC connection going away", { target: this.#authority, code });
        },
        close: () => {
          clearTimeout(connectTimer);
          clearTimeout(conn.keepaliveTimer);
          conn.draining = true;
          conn.error ??= conn.session.error;
          if (this.#conn === conn) this.#conn = undefined;
          if (conn.answered) {
            this.#failures = 0;
          } else if (conn.error) {
            // Refused, unreachable, TLS failure: wait before dialling again; calls fail fast meanwhile.
            this.#lastError = conn.error.message;
            this.#retryAt = Date.now() + backoffDelay(this.#failures++, this.#backoff, this.#random);
          }
        },
      },
    );
  }

  /** Pings after `keepaliveMs` of silence while streams are open; an unanswered ping drops the connection. */
  #armKeepalive(conn: Connection, delayMs: number): void {
    clearTimeout(conn.keepaliveTimer);
    conn.keepaliveTimer = setTimeout(() => this.#keepalive(conn), Math.max(delayMs, 1));
    conn.keepaliveTimer.unref?.();
  }

  #keepalive(conn: Connection): void {
    if (conn.session.destroyed) return;
    // A server that keeps sending but reads nothing is not alive either: what we write piles up.
    const stalledMs = conn.session.writeStalledMs;
    if (stalledMs > this.#keepaliveTimeoutMs) {
      log.warn("gRPC connection reads nothing we send; dropping it", { target: this.#authority });
      conn.session.destroy(new Error(`the server read nothing we sent for ${Math.round(stalledMs)} ms`));
      return;
    }
    const silentMs = performance.now() - conn.lastRead;
    // Without open streams grpc-go counts any ping as abuse; an idle connection needs no check.
    if (silentMs < this.#keepaliveMs || conn.streams === 0) {
      this.#armKeepalive(conn, this.#keepaliveMs - (conn.streams === 0 ? 0 : silentMs));
      return;
    }
    const timeout = setTimeout(() => {
      log.warn("gRPC connection did not answer a keepalive ping; dropping it", { target: this.#authority });
      conn.session.destroy(new Error(`keepalive ping not answered within ${this.#keepaliveTimeoutMs} ms`));
    }, this.#keepaliveTimeoutMs);
    timeout.unref?.();
    try {
      conn.session.ping((err) => {
        clearTimeout(timeout);
        if (err) return;
        this.#armKeepalive(conn, this.#keepaliveMs);
      });
    } catch (err) {
      clearTimeout(timeout);
      conn.session.destroy(err as Error);
    }
  }
}

/** One call's stream: frames in, messages queued for next(), the final status. */
class Call implements GrpcStream, H2StreamHandler {
  readonly #decoder: MessageDecoder;
  /** Messages received and not read yet: made for the first one, dropped once a listener takes over. */
  #queue: MessageQueue | undefined;
  #stream: H2Stream | undefined;
  #conn: Connection | undefined;
  /** Error decided on our side (deadline, cancel, receive limit); wins over anything received. */
  #local: GrpcError | undefined;
  /** From response headers: a non-gRPC answer; trailers may still carry the real status. */
  #headerError: GrpcError | undefined;
  /** Status received: undefined none yet, null OK. */
  #status: GrpcError | null | undefined;
  /** Set once the stream closed: null OK, else the error next() throws. */
  #end: GrpcError | null | undefined;
  #wake: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #signal: AbortSignal | undefined;
  /** Made only for a call with a signal: long-lived watches have none, and each closure stays resident. */
  #onAbort: (() => void) | undefined;
  #listener: GrpcStreamListener | undefined;
  #endSent = false;

  constructor(maxReceive: number) {
    this.#decoder = new MessageDecoder(maxReceive);
  }

  /** Ends the call before it started. */
  fail(err: GrpcError): this {
    this.#end = err;
    return this;
  }

  /**
   * Starts the call on `conn` with `open` (which sends the request with this call as the stream's
   * handler). @throws what `open` throws, before anything is armed.
   */
  start(conn: Connection, opts: GrpcCallOptions, open: (handler: H2StreamHandler) => H2Stream): void {
    this.#stream = open(this);
    this.#conn = conn;
    conn.opened();
    // setTimeout cannot wait longer than 2^31-1 ms; a longer deadline is left to the server.
    if (opts.timeoutMs !== undefined && opts.timeoutMs <= MAX_TIMER_MS) {
      const ms = opts.timeoutMs;
      this.#timer = setTimeout(
        () =>
          this.#cancelWith(new GrpcError(GrpcStatus.DEADLINE_EXCEEDED, `Deadline exceeded after ${ms} ms`)),
        ms,
      );
      this.#timer.unref?.();
    }
    if (opts.signal) {
      this.#signal = opts.signal;
      this.#onAbort = () => this.#cancelWith(new GrpcError(GrpcStatus.CANCELLED, "Cancelled on client"));
      opts.signal.addEventListener("abort", this.#onAbort, { once: true });
    }
  }

  onHeaders(headers: Headers, trailers: boolean): void {
    if (!trailers) {
      if (this.#conn) this.#conn.answered = true;
      // A status already in the headers is a Trailers-Only response.
      const status = statusFromHeaders(headers);
      if (status !== undefined) this.#status = status;
      else this.#headerError = errorFromResponseHeaders(headers);
      return;
    }
    // Without grpc-status, the HTTP status of the headers decides (a proxy's 503 stays UNAVAILABLE).
    const status = statusFromHeaders(headers); // null is OK
    this.#status =
      status !== undefined
        ? status
        : (this.#headerError ?? new GrpcError(GrpcStatus.UNKNOWN, "Trailers without grpc-status"));
  }

  onData(buf: Uint8Array, start: number, end: number): void {
    if (this.#local || this.#headerError || this.#status !== undefined) return;
    let messages: Uint8Array[];
    try {
      messages = this.#decoder.push(buf, start, end);
    } catch (err) {
      this.#cancelWith(err as GrpcError);
      return;
    }
    if (messages.length === 0) return;
    if (this.#listener) {
      for (const m of messages) if (!this.#local) this.#push(this.#listener, m);
      return;
    }
    this.#queue ??= new MessageQueue();
    for (const m of messages) this.#queue.push(m);
    if (this.#queue.length >= QUEUE_HIGH || this.#queue.bytes >= QUEUE_HIGH_BYTES) this.#stream?.pause();
    this.#notify();
  }

  onClose(code: number | undefined, reason?: string): void {
    this.#conn?.closed();
    this.#end = this.#outcome(code, reason);
    clearTimeout(this.#timer);
    if (this.#onAbort) this.#signal?.removeEventListener("abort", this.#onAbort);
    this.#signal = undefined;
    this.#onAbort = undefined;
    if (this.#listener) this.#sendEnd(this.#listener);
    else this.#notify();
  }

  /** The final result, once the stream closed with `code` (undefined: the connection was lost). */
  #outcome(code: number | undefined, reason: string | undefined): GrpcError | null {
    if (this.#local) return this.#local;
    if (this.#status === null) {
      return this.#decoder.idle ? null : new GrpcError(GrpcStatus.INTERNAL, "Stream ended inside a message");
    }
    if (this.#status) return this.#status;
    if (this.#headerError) return this.#headerError;
    const conn = this.#conn;
    if (code === undefined || (code !== H2Code.REFUSED_STREAM && conn && (conn.error || conn.gone))) {
      const err = conn?.error ?? conn?.session.error;
      const why = err?.message ?? "the connection closed";
      return new GrpcError(GrpcStatus.UNAVAILABLE, `Connection to the server lost: ${why}`, { cause: err });
    }
    if (reason !== undefined) {
      // We reset the stream: CANCEL when the server did not start it in time (nothing was answered,
      // so a retry is safe), else over the server's stream error.
      return code === H2Code.CANCEL
        ? new GrpcError(GrpcStatus.UNAVAILABLE, `The server did not start the call: ${reason}`)
        : new GrpcError(
            GrpcStatus.INTERNAL,
            `Stream reset by the client (HTTP/2 error code ${code}): ${reason}`,
          );
    }
    return errorFromRstCode(code);
  }

  #cancelWith(err: GrpcError): void {
    if (this.#end !== undefined || this.#local) return;
    this.#local = err;
    this.#queue = undefined;
    this.#stream?.cancel(H2Code.CANCEL);
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async next(): Promise<Uint8Array | undefined> {
    for (;;) {
      const q = this.#queue;
      const m = q?.shift();
      if (q && m) {
        if (this.#stream?.paused && q.length < QUEUE_LOW && q.bytes < QUEUE_LOW_BYTES) this.#stream.resume();
        return m;
      }
      if (this.#end !== undefined) {
        if (this.#end) throw this.#end;
        return undefined;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }

  listen(listener: GrpcStreamListener): void {
    if (this.#listener) throw new Error("GrpcStream.listen: already listening");
    this.#listener = listener;
    const q = this.#queue;
    this.#queue = undefined;
    for (let m = q?.shift(); m && !this.#local; m = q?.shift()) this.#push(listener, m);
    if (this.#stream?.paused) this.#stream.resume();
    if (this.#end !== undefined) this.#sendEnd(listener);
  }

  #push(listener: GrpcStreamListener, m: Uint8Array): void {
    try {
      listener.onMessage(m);
    } catch (err) {
      this.#cancelWith(
        new GrpcError(GrpcStatus.INTERNAL, `The stream's listener failed: ${err}`, { cause: err }),
      );
    }
  }

  #sendEnd(listener: GrpcStreamListener): void {
    if (this.#endSent) return;
    this.#endSent = true;
    listener.onEnd(this.#end ?? null);
  }

  cancel(): void {
    if (this.#end === undefined) this.#cancelWith(new GrpcError(GrpcStatus.CANCELLED, "Cancelled on client"));
    else this.#queue = undefined;
  }
}
