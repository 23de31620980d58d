// HTTP/2 client connection (RFC 9113) over one TLS socket, as much of it as gRPC needs: the
// connection preface and SETTINGS, requests as HEADERS (+CONTINUATION) and DATA, responses and
// trailers decoded with HPACK (lib/h2hpack.ts), flow control both ways, RST_STREAM, PING (answered,
// and sent for keepalive), GOAWAY, and MAX_CONCURRENT_STREAMS (later requests wait their turn).
// Not implemented: server push (refused in our SETTINGS), priorities (ignored), h2c, upgrade.
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

import * as tls from "node:tls";
import { dict } from "./dict.ts";
import { encodeHeaders, HpackDecoder, HpackError } from "./h2hpack.ts";
import {
  DEFAULT_SETTINGS_TIMEOUT_MS,
  DEFAULT_STREAM_START_TIMEOUT_MS,
  GLITCH_BURST,
  GlitchMeter,
  MAX_CONTINUATIONS,
  MAX_SETTINGS_ENTRIES,
  MAX_UNSENT_REPLIES,
} from "./h2limits.ts";

/** HTTP/2 error codes (RFC 9113 §7). */
export const H2Code = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

const CODE_NAMES = new Map<number, string>(Object.entries(H2Code).map(([name, code]) => [code, name]));

/** Frame types (RFC 9113 §6). */
const T = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

const SETTING = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const EMPTY = Buffer.alloc(0);
const FRAME_HEADER_BYTES = 9;
/** The largest frame we accept: the protocol default, never raised in our SETTINGS. */
const MAX_FRAME_RECEIVE = 16_384;
/** The default window and the largest a window may grow to. */
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
/** Unread bytes a stream may have in flight towards us (a paused stream holds at most this). */
const STREAM_WINDOW = 1 << 20;
/** The connection's receive window: many streams share it, and it is replenished as data arrives. */
const CONNECTION_WINDOW = 16 << 20;
/** The largest header block (all fragments) and decoded header list we accept. */
const MAX_HEADER_BLOCK = 64 << 10;
const MAX_STREAM_ID = 2 ** 31 - 1;

/** Response headers or trailers: lower-case names; repeated fields joined with ", ". */
export type H2Headers = Record<string, string>;

/** What a stream reports; the gRPC call implements it, so a stream needs no closures of its own. */
export interface H2StreamHandler {
  /** The response headers (`trailers` false), then the trailers (`trailers` true). */
  onHeaders(headers: H2Headers, trailers: boolean): void;
  /**
   * A DATA payload: bytes `start` to `end` of `buf`, a chunk the socket delivered (up to 512 KiB
   * in Bun), passed without a view of its own so that small frames cost nothing per frame. A view
   * of it keeps the whole chunk alive: copy what is kept of a small part.
   */
  onData(buf: Uint8Array, start: number, end: number): void;
  /**
   * The stream closed, once: `code` is NO_ERROR after the server ended it, the RST_STREAM code after
   * a reset by either side, or undefined when the connection was lost (see {@link H2Session.error}).
   * `reason` says why when the client reset the stream itself over what the server did or did not
   * do: with CANCEL, the stream did not start in time (H2ConnectOptions.streamStartTimeoutMs);
   * with another code, the server's stream error of that code.
   */
  onClose(code: number | undefined, reason?: string): void;
}

/** One request's stream. */
export class H2Stream {
  /** 0 until the stream is started (it may wait for MAX_CONCURRENT_STREAMS). */
  id = 0;
  /** What the peer lets us send on this stream. */
  sendWindow = 0;
  /** Bytes received and delivered but not yet returned to the peer by WINDOW_UPDATE. */
  unacked = 0;
  #paused = false;
  /** The response headers arrived (later HEADERS are trailers). */
  gotHeaders = false;
  /** The request body not sent yet (flow control), with END_STREAM after it. */
  pending: Uint8Array | undefined;
  closed = false;

  constructor(
    readonly session: H2Session,
    readonly handler: H2StreamHandler,
    /** The encoded request headers, until the stream starts. */
    public block: Uint8Array | undefined,
  ) {}

  /** Whether the stream stopped returning flow-control credit (its reader is behind). */
  get paused(): boolean {
    return this.#paused;
  }

  /** Stops returning flow-control credit: the server stops after a stream window of data. */
  pause(): void {
    this.#paused = true;
  }

  /** Returns the credit held back while paused. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.session.credit(this, 0);
  }

  /** Resets the stream with `code` (default CANCEL); its handler's onClose follows. Idempotent. */
  cancel(code: number = H2Code.CANCEL): void {
    this.session.reset(this, code);
  }
}

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

/** Per-request options of {@link H2Session.request}. */
export interface H2RequestOptions {
  /** Bound the wait for a stream slot and the response headers (for requests without a deadline). */
  startTimeout?: boolean;
}

/** A header block being collected from HEADERS and CONTINUATION frames. */
interface HeaderBlock {
  streamId: number;
  parts: Buffer[];
  bytes: number;
  /** CONTINUATION frames so far. */
  frames: number;
  endStream: boolean;
}

/** A pending PING of ours. */
interface Ping {
  payload: Buffer;
  done: (err?: Error) => void;
}

/**
 * An HTTP/2 client session on a TLS socket with ALPN h2.
 *
 * @example
 * const s = H2Session.connect({ host, port, authority: `${host}:${port}`, ca, cert, key }, { close: () => {} });
 * s.request([[":method", "POST"], [":path", "/pkg.Svc/Method"], ["content-type", "application/grpc"]], body, handler);
 */
export class H2Session {
  readonly #socket: tls.TLSSocket;
  readonly #authority: string;
  readonly #events: H2SessionEvents;
  readonly #decoder = new HpackDecoder(4096, MAX_HEADER_BLOCK);
  readonly #streams = new Map<number, H2Stream>();
  /** Requests waiting for MAX_CONCURRENT_STREAMS. */
  readonly #waiting: H2Stream[] = [];
  readonly #pings: Ping[] = [];
  #nextId = 1;
  /** Highest stream id the server may still answer (GOAWAY lowers it). */
  #lastAllowed = MAX_STREAM_ID;
  #maxStreams = Number.POSITIVE_INFINITY;
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrame = 16_384;
  #sendWindow = DEFAULT_WINDOW;
  #connUnacked = 0;
  /** Streams with request body left to send (flow control holds it). */
  readonly #sendable = new Set<H2Stream>();
  /** The server's SETTINGS arrived; it acknowledged ours. */
  #gotSettings = false;
  #settingsAcked = false;
  #settingsTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #settingsTimeoutMs: number;
  /** Requests with a start timeout not yet answered, each with performance.now() of the request. */
  readonly #starting = new Map<H2Stream, number>();
  #startTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #startTimeoutMs: number;
  /** PING and SETTINGS acknowledgements queued in #out, and handed to the socket but not yet written. */
  #outReplies = 0;
  #unsentReplies = 0;
  /** The acknowledgements in each socket write not yet written out, oldest first. */
  readonly #inFlight: number[] = [];
  /** performance.now() of the last progress while writes are in flight, else 0. */
  #stallSince = 0;
  /** A socket write completed (its callback; one function per session, not one per write). */
  readonly #written = (): void => {
    this.#unsentReplies -= this.#inFlight.shift() ?? 0;
    this.#stallSince = this.#inFlight.length > 0 ? performance.now() : 0;
  };
  /** The buffer acknowledgements are written into until the next flush; [start, end) not yet in #out. */
  #acks: Buffer | undefined;
  #acksStart = 0;
  #acksEnd = 0;
  readonly #glitches = new GlitchMeter();
  /**
   * The frame the last chunk ended inside: its first #partBytes bytes, in a buffer of the frame's
   * size once its header is in (so a frame that comes a byte per read is copied once, not per read).
   */
  #part: Buffer = EMPTY;
  #partBytes = 0;
  /** A header block being collected from HEADERS and CONTINUATION frames. */
  #block: HeaderBlock | undefined;
  /** Frames to write at the end of this tick (one write for many). */
  #out: Buffer[] = [];
  #flushQueued = false;
  #connected = false;
  #draining = false;
  /** A GOAWAY was received. */
  #goaway = false;
  #destroyed = false;
  #error: Error | undefined;
  /** performance.now() of the last bytes received. */
  lastReadMs = performance.now();

  private constructor(socket: tls.TLSSocket, opts: H2ConnectOptions, events: H2SessionEvents) {
    this.#socket = socket;
    this.#authority = opts.authority;
    this.#events = events;
    this.#settingsTimeoutMs = opts.settingsTimeoutMs ?? DEFAULT_SETTINGS_TIMEOUT_MS;
    this.#startTimeoutMs = opts.streamStartTimeoutMs ?? DEFAULT_STREAM_START_TIMEOUT_MS;
  }

  /** Dials `opts` and starts the session; events report the outcome. */
  static connect(opts: H2ConnectOptions, events: H2SessionEvents): H2Session {
    const socket = tls.connect({
      host: opts.host,
      port: opts.port,
      ...(opts.ca === undefined ? {} : { ca: opts.ca }),
      cert: opts.cert,
      key: opts.key,
      ...(opts.servername === undefined ? {} : { servername: opts.servername }),
      ...(opts.checkServerIdentity ? { checkServerIdentity: opts.checkServerIdentity } : {}),
      ALPNProtocols: ["h2"],
    });
    const s = new H2Session(socket, opts, events);
    s.#attach();
    return s;
  }

  /** The error that ended the connection, if any. */
  get error(): Error | undefined {
    return this.#error;
  }

  /** No new streams may start (GOAWAY received or close() called). */
  get draining(): boolean {
    return this.#draining;
  }

  /** The socket is gone. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** How long our writes have waited without any of them being written out (0: none waits). */
  get writeStalledMs(): number {
    return this.#stallSince === 0 ? 0 : performance.now() - this.#stallSince;
  }

  /** Open streams (started, or waiting for a slot or the server's SETTINGS). */
  get streamCount(): number {
    return this.#streams.size + this.#waiting.length;
  }

  /** Keeps the process alive while the socket is open. */
  ref(): void {
    this.#socket.ref();
  }

  /** Lets the process exit while the socket is open. */
  unref(): void {
    this.#socket.unref();
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
    if (this.#draining || this.#destroyed) throw new Error("the HTTP/2 session is closing");
    if (this.#nextId > MAX_STREAM_ID) {
      this.#draining = true;
      throw new Error("the HTTP/2 session ran out of stream ids");
    }
    const all: Array<readonly [string, string]> = [];
    for (const h of headers) if (h[0].startsWith(":")) all.push(h);
    all.push([":scheme", "https"], [":authority", this.#authority]);
    for (const h of headers) if (!h[0].startsWith(":")) all.push(h);
    const stream = new H2Stream(this, handler, encodeHeaders(all));
    stream.pending = body;
    if (opts.startTimeout) this.#watchStart(stream);
    // Until the server's SETTINGS, its MAX_CONCURRENT_STREAMS is unknown: requests wait for them.
    if (this.#gotSettings && this.#streams.size < this.#maxStreams) this.#start(stream);
    else this.#waiting.push(stream);
    return stream;
  }

  /** Sends a PING; `done` gets its ACK, or an error when the connection ends first. */
  ping(done: (err?: Error) => void): void {
    if (this.#destroyed) {
      done(this.#error ?? new Error("the HTTP/2 session is closed"));
      return;
    }
    const payload = Buffer.allocUnsafe(8);
    payload.writeDoubleBE(performance.now());
    this.#pings.push({ payload, done });
    this.#frame(T.PING, 0, 0, payload);
  }

  /** Graceful close: no new streams; the socket ends once the open ones have closed. */
  close(): void {
    this.#draining = true;
    if (this.streamCount === 0) this.#end();
  }

  /** Closes the socket at once; open streams close with the connection lost. */
  destroy(err?: Error): void {
    if (this.#destroyed) return;
    if (err) this.#error ??= err;
    this.#socket.destroy();
    this.#teardown();
  }

  /** Resets `stream` with `code` (RST_STREAM) unless it has closed. Called by {@link H2Stream.cancel}. */
  reset(stream: H2Stream, code: number): void {
    this.#resetWith(stream, code, undefined);
  }

  /** reset(), with the reason the handler's onClose gets. */
  #resetWith(stream: H2Stream, code: number, reason: string | undefined): void {
    if (stream.closed) return;
    if (stream.id === 0) {
      const i = this.#waiting.indexOf(stream);
      if (i >= 0) this.#waiting.splice(i, 1);
    } else if (!this.#destroyed) {
      this.#frame(T.RST_STREAM, 0, stream.id, u32(code));
    }
    this.#closeStream(stream, code, true, reason);
  }

  /**
   * Returns flow-control credit for `bytes` more delivered on `stream` (called per DATA frame, and
   * by resume() with 0): a WINDOW_UPDATE once half the stream window is used, unless paused.
   */
  credit(stream: H2Stream, bytes: number): void {
    stream.unacked += bytes;
    if (stream.paused || stream.closed || stream.unacked < STREAM_WINDOW / 2) return;
    this.#frame(T.WINDOW_UPDATE, 0, stream.id, u32(stream.unacked));
    stream.unacked = 0;
  }

  #attach(): void {
    const socket = this.#socket;
    socket.once("secureConnect", () => {
      if (socket.alpnProtocol !== "h2") {
        this.destroy(
          new Error(`the server did not negotiate HTTP/2 (ALPN ${socket.alpnProtocol || "none"})`),
        );
        return;
      }
      this.#connected = true;
      const settings = Buffer.alloc(18);
      settings.writeUInt16BE(SETTING.ENABLE_PUSH, 0);
      settings.writeUInt32BE(0, 2);
      settings.writeUInt16BE(SETTING.INITIAL_WINDOW_SIZE, 6);
      settings.writeUInt32BE(STREAM_WINDOW, 8);
      settings.writeUInt16BE(SETTING.MAX_HEADER_LIST_SIZE, 12);
      settings.writeUInt32BE(MAX_HEADER_BLOCK, 14);
      const pending = this.#out;
      this.#out = [PREFACE];
      this.#frame(T.SETTINGS, 0, 0, settings);
      this.#frame(T.WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW));
      this.#out.push(...pending);
      this.#flush();
      this.#settingsTimer = setTimeout(() => this.#settingsTimedOut(), this.#settingsTimeoutMs);
      this.#settingsTimer.unref?.();
      this.#events.connect?.();
    });
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    socket.on("error", (err: Error) => {
      this.#error ??= err;
      this.#events.error?.(err);
    });
    socket.on("close", () => this.#teardown());
  }

  #teardown(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#draining = true;
    clearTimeout(this.#settingsTimer);
    clearTimeout(this.#startTimer);
    this.#sendable.clear();
    for (const p of this.#pings.splice(0)) p.done(this.#error ?? new Error("the HTTP/2 session closed"));
    const open = [...this.#streams.values(), ...this.#waiting.splice(0)];
    this.#streams.clear();
    for (const s of open) this.#closeStream(s, undefined, false);
    this.#events.close?.();
  }

  #settingsTimedOut(): void {
    const ms = this.#settingsTimeoutMs;
    this.#connectionError(
      H2Code.SETTINGS_TIMEOUT,
      this.#gotSettings
        ? `the server did not acknowledge our SETTINGS within ${ms} ms`
        : `the server sent no SETTINGS within ${ms} ms`,
    );
  }

  /** The server's SETTINGS came and it acknowledged ours: the connection is up. */
  #settingsExchanged(): void {
    if (this.#gotSettings && this.#settingsAcked) clearTimeout(this.#settingsTimer);
  }

  /** Bounds `stream`'s wait for a slot and its response headers; one timer serves every stream. */
  #watchStart(stream: H2Stream): void {
    this.#starting.set(stream, performance.now());
    if (this.#startTimer === undefined) this.#armStartTimer(this.#startTimeoutMs);
  }

  #armStartTimer(delayMs: number): void {
    this.#startTimer = setTimeout(() => this.#startTimedOut(), Math.max(1, Math.ceil(delayMs)));
    this.#startTimer.unref?.();
  }

  /** Resets the requests whose wait is over, oldest first (the map keeps request order). */
  #startTimedOut(): void {
    this.#startTimer = undefined;
    const now = performance.now();
    const ms = this.#startTimeoutMs;
    for (const [stream, since] of this.#starting) {
      if (since + ms > now) {
        this.#armStartTimer(since + ms - now);
        return;
      }
      this.#starting.delete(stream);
      const why =
        stream.id !== 0
          ? `no response headers within ${ms} ms`
          : this.#gotSettings
            ? `no stream slot within ${ms} ms (the server allows ${this.#maxStreams} concurrent streams)`
            : `no stream slot within ${ms} ms (the server has sent no SETTINGS)`;
      this.#resetWith(stream, H2Code.CANCEL, why);
    }
  }

  #end(): void {
    if (this.#destroyed) return;
    const goaway = Buffer.alloc(8);
    this.#frame(T.GOAWAY, 0, 0, goaway);
    this.#flush();
    this.#socket.end();
  }

  #start(stream: H2Stream): void {
    stream.id = this.#nextId;
    this.#nextId += 2;
    stream.sendWindow = this.#peerInitialWindow;
    this.#streams.set(stream.id, stream);
    const block = stream.block as Uint8Array;
    stream.block = undefined;
    let off = 0;
    let type: number = T.HEADERS;
    do {
      const end = Math.min(block.length, off + this.#peerMaxFrame);
      const last = end === block.length;
      this.#frame(type, last ? FLAG.END_HEADERS : 0, stream.id, block.subarray(off, end));
      off = end;
      type = T.CONTINUATION;
    } while (off < block.length);
    this.#sendBody(stream);
  }

  /** Sends as much of the pending body as the windows allow, END_STREAM with its last byte. */
  #sendBody(stream: H2Stream): void {
    const body = stream.pending;
    if (body === undefined || stream.closed) return;
    let off = 0;
    while (off < body.length) {
      const n = Math.min(body.length - off, this.#peerMaxFrame, stream.sendWindow, this.#sendWindow);
      if (n <= 0) break;
      const last = off + n === body.length;
      this.#frame(T.DATA, last ? FLAG.END_STREAM : 0, stream.id, body.subarray(off, off + n));
      stream.sendWindow -= n;
      this.#sendWindow -= n;
      off += n;
    }
    if (off === body.length) {
      if (body.length === 0) this.#frame(T.DATA, FLAG.END_STREAM, stream.id, new Uint8Array(0));
      stream.pending = undefined;
      this.#sendable.delete(stream);
    } else {
      stream.pending = body.subarray(off);
      this.#sendable.add(stream);
    }
  }

  #frame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (this.#destroyed) return;
    this.#sealAcks();
    const head = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    head[4] = flags;
    head.writeUInt32BE(streamId, 5);
    this.#out.push(head);
    if (payload.length > 0) this.#out.push(payload as Buffer);
    this.#scheduleFlush();
  }

  #scheduleFlush(): void {
    if (!this.#flushQueued && this.#connected) {
      this.#flushQueued = true;
      queueMicrotask(() => this.#flush());
    }
  }

  /**
   * Queues an acknowledgement the server asked for (PING, SETTINGS). A server that keeps asking but
   * does not read them ends the connection once MAX_UNSENT_REPLIES wait to be written; those of
   * this read (at most one socket chunk's worth) are counted from their flush on.
   */
  #reply(type: number, buf: Buffer, start: number, end: number): boolean {
    if (this.#destroyed) return false;
    if (this.#unsentReplies > MAX_UNSENT_REPLIES) {
      this.#connectionError(
        H2Code.ENHANCE_YOUR_CALM,
        `the server sent PING or SETTINGS frames without reading our acknowledgements (over ${MAX_UNSENT_REPLIES} unsent)`,
      );
      return false;
    }
    this.#outReplies++;
    // Acknowledgements are written back to back into one buffer: a flood allocates nothing per frame.
    const n = FRAME_HEADER_BYTES + end - start;
    let acks = this.#acks;
    if (acks === undefined || this.#acksEnd + n > acks.length) {
      this.#sealAcks();
      acks = Buffer.allocUnsafe(Math.min(Math.max(4096, (acks?.length ?? 0) * 2), 256 << 10));
      this.#acks = acks;
      this.#acksStart = 0;
      this.#acksEnd = 0;
    }
    const at = this.#acksEnd;
    acks.writeUIntBE(end - start, at, 3);
    acks[at + 3] = type;
    acks[at + 4] = FLAG.ACK;
    acks.writeUInt32BE(0, at + 5);
    buf.copy(acks, at + FRAME_HEADER_BYTES, start, end);
    this.#acksEnd = at + n;
    this.#scheduleFlush();
    return true;
  }

  /** Moves the acknowledgements written since the last call into #out, keeping frame order. */
  #sealAcks(): void {
    if (this.#acks === undefined || this.#acksEnd === this.#acksStart) return;
    this.#out.push(this.#acks.subarray(this.#acksStart, this.#acksEnd));
    this.#acksStart = this.#acksEnd;
  }

  #flush(): void {
    this.#flushQueued = false;
    if (this.#destroyed || !this.#connected) return;
    this.#sealAcks();
    // The socket may keep what it is given: the next acknowledgement starts a new buffer.
    this.#acks = undefined;
    if (this.#out.length === 0) return;
    const data = this.#out.length === 1 ? (this.#out[0] as Buffer) : Buffer.concat(this.#out);
    this.#out = [];
    // The callback runs once the bytes are written to the kernel: the server is reading.
    this.#inFlight.push(this.#outReplies);
    this.#unsentReplies += this.#outReplies;
    this.#outReplies = 0;
    if (this.#stallSince === 0) this.#stallSince = performance.now();
    this.#socket.write(data, this.#written);
  }

  #receive(chunk: Buffer): void {
    this.lastReadMs = performance.now();
    let off = 0;
    // First the frame the last chunk ended inside: only its own bytes are copied.
    while (this.#partBytes > 0) {
      const have = this.#partBytes;
      const want = frameBytes(this.#part, 0, have);
      if (want === have) {
        const frame = this.#part;
        this.#part = EMPTY;
        this.#partBytes = 0;
        this.#parse(frame, 0);
        break;
      }
      if (want > FRAME_HEADER_BYTES + MAX_FRAME_RECEIVE || off === chunk.length) break;
      if (this.#part.length < want) {
        const whole = Buffer.allocUnsafe(want);
        this.#part.copy(whole, 0, 0, have);
        this.#part = whole;
      }
      const take = Math.min(want - have, chunk.length - off);
      chunk.copy(this.#part, have, off, off + take);
      this.#partBytes += take;
      off += take;
    }
    if (this.#destroyed || this.#partBytes > 0) {
      // A frame too large for us: #parse() reports it (it waits for the rest of any other).
      if (!this.#destroyed && this.#partBytes >= FRAME_HEADER_BYTES) {
        this.#parse(this.#part.subarray(0, this.#partBytes), 0);
      }
      return;
    }
    off = this.#parse(chunk, off);
    if (this.#destroyed || off === chunk.length) return;
    // Keep the unparsed tail; a copy, so that the big chunk it came from can go.
    this.#part = Buffer.allocUnsafe(frameBytes(chunk, off, chunk.length - off));
    this.#partBytes = chunk.copy(this.#part, 0, off);
  }

  /** Handles the whole frames of `buf` from `off`; returns where the incomplete rest starts. */
  #parse(buf: Buffer, off: number): number {
    while (!this.#destroyed && buf.length - off >= FRAME_HEADER_BYTES) {
      const length = buf.readUIntBE(off, 3);
      if (length > MAX_FRAME_RECEIVE) {
        this.#connectionError(H2Code.FRAME_SIZE_ERROR, `a frame of ${length} bytes`);
        break;
      }
      const end = off + FRAME_HEADER_BYTES + length;
      if (buf.length < end) break;
      this.#dispatch(buf, off, end);
      off = end;
    }
    return off;
  }

  /** Handles the frame at buf[off..end]. DATA and PING get no view of their own: floods of them allocate nothing per frame. */
  #dispatch(buf: Buffer, off: number, end: number): void {
    const type = buf[off + 3] as number;
    const flags = buf[off + 4] as number;
    const streamId = buf.readUInt32BE(off + 5) & MAX_STREAM_ID;
    const start = off + FRAME_HEADER_BYTES;
    if (!this.#gotSettings && (type !== T.SETTINGS || flags & FLAG.ACK)) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "the server's first frame is not its SETTINGS");
      return;
    }
    try {
      if (type === T.DATA && !this.#block) this.#onData(flags, streamId, buf, start, end);
      else if (type === T.PING && !this.#block) this.#onPing(flags, streamId, buf, start, end);
      else this.#onFrame(type, flags, streamId, start === end ? EMPTY : buf.subarray(start, end));
    } catch (err) {
      if (!(err instanceof HpackError)) throw err;
      this.#connectionError(H2Code.COMPRESSION_ERROR, err.message);
    }
  }

  #onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (this.#block && type !== T.CONTINUATION) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "a header block was interrupted");
      return;
    }
    switch (type) {
      case T.DATA:
        this.#onData(flags, streamId, payload, 0, payload.length);
        return;
      case T.HEADERS:
        this.#onHeadersFrame(flags, streamId, payload);
        return;
      case T.CONTINUATION:
        this.#onContinuation(flags, streamId, payload);
        return;
      case T.RST_STREAM:
        this.#onReset(streamId, payload);
        return;
      case T.SETTINGS:
        this.#onSettings(flags, streamId, payload);
        return;
      case T.PING:
        this.#onPing(flags, streamId, payload, 0, payload.length);
        return;
      case T.GOAWAY:
        this.#onGoaway(streamId, payload);
        return;
      case T.WINDOW_UPDATE:
        this.#onWindowUpdate(streamId, payload);
        return;
      case T.PUSH_PROMISE:
        this.#connectionError(H2Code.PROTOCOL_ERROR, "PUSH_PROMISE with push disabled");
        return;
      case T.PRIORITY:
        this.#glitch("PRIORITY"); // ignored: a client has no priority tree to keep
        return;
      default:
        this.#glitch(`frames of unknown type ${type}`); // ignored, as RFC 9113 §4.1 asks
        return;
    }
  }

  /** Counts a frame that carries nothing the client needs; too many end the connection. */
  #glitch(what: string): boolean {
    if (this.#glitches.take(performance.now())) return true;
    this.#connectionError(
      H2Code.ENHANCE_YOUR_CALM,
      `the server sent over ${GLITCH_BURST} frames that carry nothing (empty DATA, PRIORITY, unknown types; the last: ${what})`,
    );
    return false;
  }

  /** The payload without its padding (PADDED flag), or undefined when the padding is invalid. */
  #unpad(flags: number, payload: Buffer): Buffer | undefined {
    if (!(flags & FLAG.PADDED)) return payload;
    if (payload.length < 1) return undefined;
    const pad = payload[0] as number;
    if (pad >= payload.length) return undefined;
    return payload.subarray(1, payload.length - pad);
  }

  /** A DATA frame whose payload is buf[start..end]. */
  #onData(flags: number, streamId: number, buf: Buffer, start: number, end: number): void {
    if (streamId === 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "DATA on stream 0");
      return;
    }
    // The connection window counts every DATA byte, padding included, whatever the stream.
    const length = end - start;
    // What the server may send on the connection is CONNECTION_WINDOW less what we have not acknowledged.
    if (this.#connUnacked + length > CONNECTION_WINDOW) {
      this.#connectionError(H2Code.FLOW_CONTROL_ERROR, "DATA beyond the connection's flow-control window");
      return;
    }
    this.#connUnacked += length;
    if (this.#connUnacked >= CONNECTION_WINDOW / 2) {
      this.#frame(T.WINDOW_UPDATE, 0, 0, u32(this.#connUnacked));
      this.#connUnacked = 0;
    }
    if (length === 0 && !(flags & FLAG.END_STREAM) && !this.#glitch("empty DATA")) return;
    if (flags & FLAG.PADDED) {
      const pad = length > 0 ? (buf[start] as number) : 0;
      if (length === 0 || pad >= length) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "invalid DATA padding");
        return;
      }
      start += 1;
      end -= pad;
    }
    const stream = this.#streams.get(streamId);
    if (!stream) {
      if (streamId >= this.#nextId) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "DATA on an idle stream");
        return;
      }
      return; // A stream we reset: its late data is dropped.
    }
    if (!stream.gotHeaders) {
      this.#streamError(stream, H2Code.PROTOCOL_ERROR, "DATA before the response headers");
      return;
    }
    if (stream.unacked + length > STREAM_WINDOW) {
      this.#streamError(stream, H2Code.FLOW_CONTROL_ERROR, "DATA beyond the stream's flow-control window");
      return;
    }
    if (end > start) stream.handler.onData(buf, start, end);
    if (stream.closed) return;
    this.credit(stream, length);
    if (flags & FLAG.END_STREAM) this.#closeStream(stream, H2Code.NO_ERROR, true);
  }

  #onHeadersFrame(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "HEADERS on stream 0");
      return;
    }
    let fragment = this.#unpad(flags, payload);
    if (fragment === undefined) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "invalid HEADERS padding");
      return;
    }
    if (flags & FLAG.PRIORITY) {
      if (fragment.length < 5) {
        this.#connectionError(H2Code.FRAME_SIZE_ERROR, "short HEADERS priority");
        return;
      }
      fragment = fragment.subarray(5);
    }
    this.#block = {
      streamId,
      parts: fragment.length === 0 ? [] : [Buffer.from(fragment)],
      bytes: fragment.length,
      frames: 0,
      endStream: (flags & FLAG.END_STREAM) !== 0,
    };
    if (flags & FLAG.END_HEADERS) this.#onHeaderBlock();
  }

  #onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const block = this.#block;
    if (!block || block.streamId !== streamId) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
      return;
    }
    block.bytes += payload.length;
    if (block.bytes > MAX_HEADER_BLOCK) {
      this.#connectionError(H2Code.ENHANCE_YOUR_CALM, `a header block over ${MAX_HEADER_BLOCK} bytes`);
      return;
    }
    // Empty fragments cost no bytes but a frame each: the 2024 CONTINUATION flood.
    if (++block.frames > MAX_CONTINUATIONS) {
      this.#connectionError(
        H2Code.ENHANCE_YOUR_CALM,
        `a header block of more than ${MAX_CONTINUATIONS} CONTINUATION frames`,
      );
      return;
    }
    if (payload.length > 0) block.parts.push(Buffer.from(payload));
    if (flags & FLAG.END_HEADERS) this.#onHeaderBlock();
  }

  #onHeaderBlock(): void {
    const block = this.#block as HeaderBlock;
    this.#block = undefined;
    const bytes =
      block.parts.length === 1 ? (block.parts[0] as Buffer) : Buffer.concat(block.parts, block.bytes);
    // Decoded whatever the stream's state: the HPACK table is the connection's.
    const fields = this.#decoder.decode(bytes);
    const stream = this.#streams.get(block.streamId);
    if (!stream) {
      if (block.streamId >= this.#nextId || block.streamId % 2 === 0) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "HEADERS on a stream we did not open");
        return;
      }
      return;
    }
    // Header names are the server's choice: kept without a prototype (lib/dict.ts).
    const headers: H2Headers = dict<string>();
    for (const [name, value] of fields)
      headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
    if (!stream.gotHeaders) {
      // An informational (1xx) response is followed by the real one.
      if (!block.endStream && /^1\d\d$/.test(headers[":status"] ?? "")) return;
      stream.gotHeaders = true;
      this.#starting.delete(stream);
      stream.handler.onHeaders(headers, false);
    } else {
      if (!block.endStream) {
        this.#streamError(stream, H2Code.PROTOCOL_ERROR, "trailers without END_STREAM");
        return;
      }
      stream.handler.onHeaders(headers, true);
    }
    if (block.endStream && !stream.closed) this.#closeStream(stream, H2Code.NO_ERROR, true);
  }

  #onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "RST_STREAM on stream 0");
      return;
    }
    if (payload.length !== 4) {
      this.#connectionError(H2Code.FRAME_SIZE_ERROR, "RST_STREAM size");
      return;
    }
    const stream = this.#streams.get(streamId);
    if (!stream) {
      if (streamId >= this.#nextId || streamId % 2 === 0) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
      }
      return;
    }
    this.#closeStream(stream, payload.readUInt32BE(0), true);
  }

  #onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "SETTINGS on a stream");
      return;
    }
    if (flags & FLAG.ACK) {
      this.#settingsAcked = true;
      this.#settingsExchanged();
      return;
    }
    if (payload.length % 6 !== 0) {
      this.#connectionError(H2Code.FRAME_SIZE_ERROR, "SETTINGS size");
      return;
    }
    if (payload.length / 6 > MAX_SETTINGS_ENTRIES) {
      this.#connectionError(
        H2Code.ENHANCE_YOUR_CALM,
        `a SETTINGS frame of over ${MAX_SETTINGS_ENTRIES} entries`,
      );
      return;
    }
    for (let i = 0; i < payload.length; i += 6) {
      if (!this.#setting(payload.readUInt16BE(i), payload.readUInt32BE(i + 2))) return;
    }
    this.#gotSettings = true;
    if (!this.#reply(T.SETTINGS, EMPTY, 0, 0)) return;
    this.#settingsExchanged();
    this.#startWaiting();
    if (this.#sendable.size > 0) for (const s of this.#sendable) this.#sendBody(s);
  }

  /** Applies one setting of the server's; false after a connection error. */
  #setting(id: number, value: number): boolean {
    if (id === SETTING.MAX_CONCURRENT_STREAMS) this.#maxStreams = value;
    else if (id === SETTING.INITIAL_WINDOW_SIZE) {
      if (value > MAX_WINDOW) {
        this.#connectionError(H2Code.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE");
        return false;
      }
      // Only streams with body left to send use their window (RFC 9113 §6.9.2).
      const delta = value - this.#peerInitialWindow;
      this.#peerInitialWindow = value;
      for (const s of this.#sendable) s.sendWindow += delta;
    } else if (id === SETTING.MAX_FRAME_SIZE) {
      if (value < 16_384 || value > 16_777_215) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "MAX_FRAME_SIZE");
        return false;
      }
      this.#peerMaxFrame = value;
    }
    // HEADER_TABLE_SIZE: our encoder never indexes. ENABLE_PUSH, MAX_HEADER_LIST_SIZE: nothing to do.
    return true;
  }

  /** A PING frame whose payload is buf[start..end]. */
  #onPing(flags: number, streamId: number, buf: Buffer, start: number, end: number): void {
    if (streamId !== 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "PING on a stream");
      return;
    }
    if (end - start !== 8) {
      this.#connectionError(H2Code.FRAME_SIZE_ERROR, "PING size");
      return;
    }
    if (!(flags & FLAG.ACK)) {
      this.#reply(T.PING, buf, start, end);
      return;
    }
    const i = this.#pings.findIndex((p) => p.payload.compare(buf, start, end) === 0);
    if (i >= 0) this.#pings.splice(i, 1)[0]?.done();
  }

  #onGoaway(streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.#connectionError(H2Code.PROTOCOL_ERROR, "GOAWAY on a stream");
      return;
    }
    if (payload.length < 8) {
      this.#connectionError(H2Code.FRAME_SIZE_ERROR, "GOAWAY size");
      return;
    }
    const last = payload.readUInt32BE(0) & MAX_STREAM_ID;
    const code = payload.readUInt32BE(4);
    // A later GOAWAY may only lower the last stream id; one that does not changes nothing.
    if (this.#goaway && last >= this.#lastAllowed) return;
    this.#goaway = true;
    this.#draining = true;
    this.#lastAllowed = Math.min(this.#lastAllowed, last);
    if (code !== H2Code.NO_ERROR) this.#error ??= new Error(`GOAWAY with HTTP/2 error code ${code}`);
    // Streams the server did not process are refused (safe to retry); waiting ones never started.
    for (const s of [...this.#streams.values()]) {
      if (s.id > this.#lastAllowed) {
        this.#closeStream(s, H2Code.REFUSED_STREAM, false);
      }
    }
    for (const s of this.#waiting.splice(0)) {
      this.#closeStream(s, H2Code.REFUSED_STREAM, false);
    }
    this.#events.goaway?.(code);
    if (this.streamCount === 0) this.#end();
  }

  #onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) {
      this.#connectionError(H2Code.FRAME_SIZE_ERROR, "WINDOW_UPDATE size");
      return;
    }
    const inc = payload.readUInt32BE(0) & MAX_WINDOW;
    if (streamId === 0) {
      if (inc === 0) {
        this.#connectionError(H2Code.PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
        return;
      }
      this.#sendWindow += inc;
      if (this.#sendWindow > MAX_WINDOW) {
        this.#connectionError(H2Code.FLOW_CONTROL_ERROR, "window");
        return;
      }
      for (const s of this.#sendable) this.#sendBody(s);
      return;
    }
    const stream = this.#streams.get(streamId);
    if (!stream) return;
    if (inc === 0) {
      this.#streamError(stream, H2Code.PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the stream");
      return;
    }
    if (stream.pending === undefined) return; // nothing left to send: its window no longer matters
    stream.sendWindow += inc;
    if (stream.sendWindow > MAX_WINDOW) {
      this.#streamError(stream, H2Code.FLOW_CONTROL_ERROR, "WINDOW_UPDATE beyond 2^31-1 on the stream");
      return;
    }
    this.#sendBody(stream);
  }

  /** Resets `stream` over the server's stream error `code`; `why` names it for the handler. */
  #streamError(stream: H2Stream, code: number, why: string): void {
    this.#resetWith(stream, code, `the server sent ${why}`);
  }

  #connectionError(code: number, why: string): void {
    if (this.#destroyed) return;
    const goaway = Buffer.alloc(8);
    goaway.writeUInt32BE(Math.max(0, this.#nextId - 2), 0);
    goaway.writeUInt32BE(code, 4);
    this.#frame(T.GOAWAY, 0, 0, goaway);
    this.#flush();
    this.destroy(new Error(`HTTP/2 connection error ${CODE_NAMES.get(code) ?? code}: ${why}`));
  }

  /** Closes `stream` once and tells its handler (on a microtask when `async`). */
  #closeStream(stream: H2Stream, code: number | undefined, async: boolean, reason?: string): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.pending = undefined;
    if (stream.id !== 0) this.#streams.delete(stream.id);
    this.#sendable.delete(stream);
    this.#starting.delete(stream);
    const notify = () => stream.handler.onClose(code, reason);
    if (async) queueMicrotask(notify);
    else notify();
    this.#startWaiting();
    if (this.#draining && this.streamCount === 0 && !this.#destroyed) queueMicrotask(() => this.#end());
  }

  #startWaiting(): void {
    while (
      this.#waiting.length > 0 &&
      this.#gotSettings &&
      this.#streams.size < this.#maxStreams &&
      !this.#draining
    ) {
      this.#start(this.#waiting.shift() as H2Stream);
    }
  }
}

/** The bytes of the frame at buf[off..], of which `have` arrived: its header's, or the whole frame's once the header is in. */
function frameBytes(buf: Buffer, off: number, have: number): number {
  return have < FRAME_HEADER_BYTES ? FRAME_HEADER_BYTES : FRAME_HEADER_BYTES + buf.readUIntBE(off, 3);
}

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}
