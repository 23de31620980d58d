// The HTTP/2 client connection (RFC 9113) without its socket, as much of it as gRPC needs: SETTINGS
// and their acknowledgement, requests as HEADERS (+CONTINUATION) and DATA, responses and trailers
// (header blocks in lib/h2headerblock.ts, HPACK in lib/h2hpack.ts), flow control both ways
// (lib/h2flow.ts), RST_STREAM, PING (answered, and ours matched to their ACKs), GOAWAY, and
// MAX_CONCURRENT_STREAMS (later requests wait their turn). Not implemented: server push (refused in
// our SETTINGS), priorities (ignored), h2c, upgrade. A hostile server is held to the limits of
// lib/h2limits.ts; a connection error queues GOAWAY and ends the connection with an error naming it.
//
// Sans I/O: the shell (lib/h2.ts) feeds what the socket reads (receive), writes what takeOutput()
// returns (lib/h2framer.ts cuts and queues the frames), keeps the timers and the clock (time comes
// in as arguments), and is told through its H2ConnectionHost what only it can do.

import { H2FlowControl, STREAM_WINDOW } from "./h2flow.ts";
import {
  EMPTY,
  H2Flag as FLAG,
  FRAME_HEADER_BYTES,
  H2Code,
  h2CodeName,
  H2Setting as SETTING,
  H2FrameType as T,
  u32,
} from "./h2framer.ts";
import {
  continueHeaderBlock,
  type H2HeaderBlock,
  headerBlockBytes,
  headersOf,
  MAX_HEADER_BLOCK,
  openHeaderBlock,
} from "./h2headerblock.ts";
import { encodeHeaders, HpackDecoder, HpackError } from "./h2hpack.ts";
import { GLITCH_BURST, GlitchMeter, MAX_SETTINGS_ENTRIES } from "./h2limits.ts";
import { H2Stream, type H2StreamHandler, type H2StreamOwner } from "./h2stream.ts";

const MAX_STREAM_ID = 2 ** 31 - 1;
/** What a PING is answered with when the connection ended without an error of its own. */
const CLOSED = "the HTTP/2 session closed";

/**
 * What a connection asks of its shell, which owns the socket. One host may serve every connection:
 * each call names the `owner` the connection was made with.
 */
export interface H2ConnectionHost<O> {
  /** Frames were queued: write takeOutput()'s bytes soon (once for many frames). */
  wake(owner: O): void;
  /** Runs `fn` once the current work is done (a microtask): stream closes the handler is told of later. */
  later(fn: () => void): void;
  /** A connection error: the GOAWAY saying so is queued; write it, close the socket, then teardown(). */
  failed(owner: O, err: Error): void;
  /** Our final GOAWAY is queued (no stream is left): write it and end the socket. */
  ended(owner: O): void;
  /** The server sent GOAWAY with `code`: no new streams; those above its last stream id are refused. */
  goaway(owner: O, code: number): void;
}

/** A pending PING of ours. */
interface Ping {
  payload: Buffer;
  done: (err?: Error) => void;
}

/**
 * An HTTP/2 client connection's state: streams, settings, windows (its H2FlowControl base), what the
 * server sent and what to send back. `O` is the shell's object its host is called with.
 *
 * @example
 * const c = new H2Connection(host, session, "apid:50000");
 * c.open(); // then c.receive(chunk, now) per read; on host.wake(session), socket.write(c.takeOutput())
 */
export class H2Connection<O> extends H2FlowControl implements H2StreamOwner {
  readonly #host: H2ConnectionHost<O>;
  readonly #owner: O;
  readonly #authority: string;
  readonly #decoder = new HpackDecoder(4096, MAX_HEADER_BLOCK);
  readonly #streams = new Map<number, H2Stream>();
  /** Requests waiting for MAX_CONCURRENT_STREAMS. */
  readonly #waiting: H2Stream[] = [];
  readonly #pings: Ping[] = [];
  #nextId = 1;
  /** Highest stream id the server may still answer (GOAWAY lowers it). */
  #lastAllowed = MAX_STREAM_ID;
  #maxStreams = Number.POSITIVE_INFINITY;
  /** The server's SETTINGS arrived; it acknowledged ours. */
  #gotSettings = false;
  #settingsAcked = false;
  /** Requests with a start timeout not yet answered, each with the clock of its request. */
  readonly #starting = new Map<H2Stream, number>();
  readonly #glitches = new GlitchMeter();
  /** The clock of the chunk being read (the glitch meter's). */
  #now = 0;
  /** A header block being collected from HEADERS and CONTINUATION frames. */
  #block: H2HeaderBlock | undefined;
  #draining = false;
  /** A GOAWAY was received. */
  #goaway = false;
  /** The error that ended the connection, if any (the shell's, or a GOAWAY's code). */
  error: Error | undefined;

  /** A connection whose requests carry `authority` as :authority; `host` is called with `owner`. */
  constructor(host: H2ConnectionHost<O>, owner: O, authority: string) {
    super();
    this.#host = host;
    this.#owner = owner;
    this.#authority = authority;
  }

  /** No new streams may start (GOAWAY received, close() called, or the connection is over). */
  get draining(): boolean {
    return this.#draining;
  }

  /** Open streams (started, or waiting for a slot or the server's SETTINGS). */
  get streamCount(): number {
    return this.#streams.size + this.#waiting.length;
  }

  /** The server's SETTINGS came and it acknowledged ours: the connection is up. */
  get settled(): boolean {
    return this.#gotSettings && this.#settingsAcked;
  }

  /** The connection is up (TLS with ALPN h2): queues the preface, our SETTINGS and connection window first. */
  open(): void {
    this.queuePreface(() => {
      const settings = Buffer.alloc(18);
      settings.writeUInt16BE(SETTING.ENABLE_PUSH, 0);
      settings.writeUInt32BE(0, 2);
      settings.writeUInt16BE(SETTING.INITIAL_WINDOW_SIZE, 6);
      settings.writeUInt32BE(STREAM_WINDOW, 8);
      settings.writeUInt16BE(SETTING.MAX_HEADER_LIST_SIZE, 12);
      settings.writeUInt32BE(MAX_HEADER_BLOCK, 14);
      this.queueFrame(T.SETTINGS, 0, 0, settings);
      this.queueConnectionWindow();
    });
  }

  /** Handles the bytes the socket read at `now` (a monotonic clock, in ms). */
  receive(chunk: Buffer, now: number): void {
    this.#now = now;
    this.readFrames(chunk);
  }

  /**
   * Starts a request: HEADERS with `headers` (pseudo-headers first; :scheme and :authority are
   * added), then `body` as DATA with END_STREAM. With `startedAt` (the clock now), expireStarts()
   * bounds its wait for a stream slot and its response headers.
   * @throws {Error} when the connection is draining or over.
   */
  request(
    headers: ReadonlyArray<readonly [string, string]>,
    body: Uint8Array,
    handler: H2StreamHandler,
    startedAt?: number,
  ): H2Stream {
    if (this.#draining || this.destroyed) throw new Error("the HTTP/2 session is closing");
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
    if (startedAt !== undefined) this.#starting.set(stream, startedAt);
    // Until the server's SETTINGS, its MAX_CONCURRENT_STREAMS is unknown: requests wait for them.
    if (this.#gotSettings && this.#streams.size < this.#maxStreams) this.#start(stream);
    else this.#waiting.push(stream);
    return stream;
  }

  /** Sends a PING with `payload` (8 bytes); `done` gets its ACK, or an error when the connection ends first. */
  ping(payload: Buffer, done: (err?: Error) => void): void {
    if (this.destroyed) {
      done(this.error ?? new Error(CLOSED));
      return;
    }
    this.#pings.push({ payload, done });
    this.queueFrame(T.PING, 0, 0, payload);
  }

  /** Graceful close: no new streams; the connection ends (host.ended) once the open ones have closed. */
  close(): void {
    this.#draining = true;
    if (this.streamCount === 0) this.#end();
  }

  /** The socket is gone: every PING fails and every stream closes (connection lost). Idempotent. */
  teardown(): void {
    if (this.destroyed) return;
    this.stop();
    this.#draining = true;
    this.dropHeld();
    for (const p of this.#pings.splice(0)) p.done(this.error ?? new Error(CLOSED));
    const open = [...this.#streams.values(), ...this.#waiting.splice(0)];
    this.#streams.clear();
    for (const s of open) this.#closeStream(s, undefined, false);
  }

  /** The SETTINGS exchange took longer than `ms`: a connection error saying which half is missing. */
  settingsTimedOut(ms: number): void {
    this.connectionError(
      H2Code.SETTINGS_TIMEOUT,
      this.#gotSettings
        ? `the server did not acknowledge our SETTINGS within ${ms} ms`
        : `the server sent no SETTINGS within ${ms} ms`,
    );
  }

  /**
   * Resets (CANCEL) the requests made with `startedAt` that have waited `timeoutMs` by `now` for a
   * stream slot or their response headers, oldest first. Returns the ms until the next one is
   * due, or undefined when none is left waiting.
   */
  expireStarts(now: number, timeoutMs: number): number | undefined {
    for (const [stream, since] of this.#starting) {
      if (since + timeoutMs > now) return since + timeoutMs - now;
      this.#starting.delete(stream);
      const why =
        stream.id !== 0
          ? `no response headers within ${timeoutMs} ms`
          : this.#gotSettings
            ? `no stream slot within ${timeoutMs} ms (the server allows ${this.#maxStreams} concurrent streams)`
            : `no stream slot within ${timeoutMs} ms (the server has sent no SETTINGS)`;
      this.#resetWith(stream, H2Code.CANCEL, why);
    }
    return undefined;
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
    } else if (!this.destroyed) {
      this.queueFrame(T.RST_STREAM, 0, stream.id, u32(code));
    }
    this.#closeStream(stream, code, true, reason);
  }

  /** Asks the host to write what was queued. */
  protected wake(): void {
    this.#host.wake(this.#owner);
  }

  /** Queues our final GOAWAY (no error) and has the host end the socket. */
  #end(): void {
    if (this.destroyed) return;
    this.queueFrame(T.GOAWAY, 0, 0, Buffer.alloc(8));
    this.#host.ended(this.#owner);
  }

  #start(stream: H2Stream): void {
    stream.id = this.#nextId;
    this.#nextId += 2;
    this.#streams.set(stream.id, stream);
    const block = stream.block as Uint8Array;
    stream.block = undefined;
    this.sendRequest(stream, block);
  }

  /** Handles the frame at buf[off..end]. DATA and PING get no view of their own: floods of them allocate nothing per frame. */
  protected onFrame(buf: Buffer, off: number, end: number): void {
    const type = buf[off + 3] as number;
    const flags = buf[off + 4] as number;
    const streamId = buf.readUInt32BE(off + 5) & MAX_STREAM_ID;
    const start = off + FRAME_HEADER_BYTES;
    if (!this.#gotSettings && (type !== T.SETTINGS || flags & FLAG.ACK)) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "the server's first frame is not its SETTINGS");
      return;
    }
    try {
      if (type === T.DATA && !this.#block) this.#onData(flags, streamId, buf, start, end);
      else if (type === T.PING && !this.#block) this.#onPing(flags, streamId, buf, start, end);
      else this.#onFrame(type, flags, streamId, start === end ? EMPTY : buf.subarray(start, end));
    } catch (err) {
      if (!(err instanceof HpackError)) throw err;
      this.connectionError(H2Code.COMPRESSION_ERROR, err.message);
    }
  }

  #onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (this.#block && type !== T.CONTINUATION) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "a header block was interrupted");
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
        this.onWindowUpdate(streamId, streamId === 0 ? undefined : this.#streams.get(streamId), payload);
        return;
      case T.PUSH_PROMISE:
        this.connectionError(H2Code.PROTOCOL_ERROR, "PUSH_PROMISE with push disabled");
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
    if (this.#glitches.take(this.#now)) return true;
    this.connectionError(
      H2Code.ENHANCE_YOUR_CALM,
      `the server sent over ${GLITCH_BURST} frames that carry nothing (empty DATA, PRIORITY, unknown types; the last: ${what})`,
    );
    return false;
  }

  /** A DATA frame whose payload is buf[start..end]. */
  #onData(flags: number, streamId: number, buf: Buffer, start: number, end: number): void {
    if (streamId === 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "DATA on stream 0");
      return;
    }
    // The connection window counts every DATA byte, padding included, whatever the stream.
    const length = end - start;
    if (!this.takeConnectionWindow(length)) return;
    if (length === 0 && !(flags & FLAG.END_STREAM) && !this.#glitch("empty DATA")) return;
    if (flags & FLAG.PADDED) {
      const pad = length > 0 ? (buf[start] as number) : 0;
      if (length === 0 || pad >= length) {
        this.connectionError(H2Code.PROTOCOL_ERROR, "invalid DATA padding");
        return;
      }
      start += 1;
      end -= pad;
    }
    const stream = this.#streams.get(streamId);
    if (!stream) {
      if (streamId >= this.#nextId) this.connectionError(H2Code.PROTOCOL_ERROR, "DATA on an idle stream");
      return; // A stream we reset: its late data is dropped.
    }
    if (!stream.gotHeaders) {
      this.streamError(stream, H2Code.PROTOCOL_ERROR, "DATA before the response headers");
      return;
    }
    if (!this.takeStreamWindow(stream, length)) return;
    if (end > start) stream.handler.onData(buf, start, end);
    if (stream.closed) return;
    this.credit(stream, length);
    if (flags & FLAG.END_STREAM) this.#closeStream(stream, H2Code.NO_ERROR, true);
  }

  #onHeadersFrame(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "HEADERS on stream 0");
      return;
    }
    const block = openHeaderBlock(flags, streamId, payload);
    if ("why" in block) {
      this.connectionError(block.code, block.why);
      return;
    }
    this.#block = block;
    if (flags & FLAG.END_HEADERS) this.#onHeaderBlock();
  }

  #onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const block = this.#block;
    if (!block || block.streamId !== streamId) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
      return;
    }
    const fault = continueHeaderBlock(block, payload);
    if (fault) {
      this.connectionError(fault.code, fault.why);
      return;
    }
    if (flags & FLAG.END_HEADERS) this.#onHeaderBlock();
  }

  #onHeaderBlock(): void {
    const block = this.#block as H2HeaderBlock;
    this.#block = undefined;
    // Decoded whatever the stream's state: the HPACK table is the connection's.
    const fields = this.#decoder.decode(headerBlockBytes(block));
    const stream = this.#streams.get(block.streamId);
    if (!stream) {
      if (block.streamId >= this.#nextId || block.streamId % 2 === 0) {
        this.connectionError(H2Code.PROTOCOL_ERROR, "HEADERS on a stream we did not open");
      }
      return;
    }
    const headers = headersOf(fields);
    if (!stream.gotHeaders) {
      // An informational (1xx) response is followed by the real one.
      if (!block.endStream && /^1\d\d$/.test(headers[":status"] ?? "")) return;
      stream.gotHeaders = true;
      this.#starting.delete(stream);
      stream.handler.onHeaders(headers, false);
    } else {
      if (!block.endStream) {
        this.streamError(stream, H2Code.PROTOCOL_ERROR, "trailers without END_STREAM");
        return;
      }
      stream.handler.onHeaders(headers, true);
    }
    if (block.endStream && !stream.closed) this.#closeStream(stream, H2Code.NO_ERROR, true);
  }

  #onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "RST_STREAM on stream 0");
      return;
    }
    if (payload.length !== 4) {
      this.connectionError(H2Code.FRAME_SIZE_ERROR, "RST_STREAM size");
      return;
    }
    const stream = this.#streams.get(streamId);
    if (!stream) {
      if (streamId >= this.#nextId || streamId % 2 === 0) {
        this.connectionError(H2Code.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
      }
      return;
    }
    this.#closeStream(stream, payload.readUInt32BE(0), true);
  }

  #onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "SETTINGS on a stream");
      return;
    }
    if (flags & FLAG.ACK) {
      this.#settingsAcked = true;
      return;
    }
    if (payload.length % 6 !== 0) {
      this.connectionError(H2Code.FRAME_SIZE_ERROR, "SETTINGS size");
      return;
    }
    if (payload.length / 6 > MAX_SETTINGS_ENTRIES) {
      this.connectionError(
        H2Code.ENHANCE_YOUR_CALM,
        `a SETTINGS frame of over ${MAX_SETTINGS_ENTRIES} entries`,
      );
      return;
    }
    for (let i = 0; i < payload.length; i += 6) {
      if (!this.#setting(payload.readUInt16BE(i), payload.readUInt32BE(i + 2))) return;
    }
    this.#gotSettings = true;
    if (!this.queueReply(T.SETTINGS, EMPTY, 0, 0)) return;
    this.#startWaiting();
    this.sendHeldBodies();
  }

  /** Applies one setting of the server's; false after a connection error. */
  #setting(id: number, value: number): boolean {
    if (id !== SETTING.MAX_CONCURRENT_STREAMS) return this.peerSetting(id, value);
    this.#maxStreams = value;
    // HEADER_TABLE_SIZE: our encoder never indexes. ENABLE_PUSH, MAX_HEADER_LIST_SIZE: nothing to do.
    return true;
  }

  /** A PING frame whose payload is buf[start..end]. */
  #onPing(flags: number, streamId: number, buf: Buffer, start: number, end: number): void {
    if (streamId !== 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "PING on a stream");
      return;
    }
    if (end - start !== 8) {
      this.connectionError(H2Code.FRAME_SIZE_ERROR, "PING size");
      return;
    }
    if (!(flags & FLAG.ACK)) {
      this.queueReply(T.PING, buf, start, end);
      return;
    }
    const i = this.#pings.findIndex((p) => p.payload.compare(buf, start, end) === 0);
    if (i >= 0) this.#pings.splice(i, 1)[0]?.done();
  }

  #onGoaway(streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "GOAWAY on a stream");
      return;
    }
    if (payload.length < 8) {
      this.connectionError(H2Code.FRAME_SIZE_ERROR, "GOAWAY size");
      return;
    }
    const last = payload.readUInt32BE(0) & MAX_STREAM_ID;
    const code = payload.readUInt32BE(4);
    // A later GOAWAY may only lower the last stream id; one that does not changes nothing.
    if (this.#goaway && last >= this.#lastAllowed) return;
    this.#goaway = true;
    this.#draining = true;
    this.#lastAllowed = Math.min(this.#lastAllowed, last);
    if (code !== H2Code.NO_ERROR) this.error ??= new Error(`GOAWAY with HTTP/2 error code ${code}`);
    // Streams the server did not process are refused (safe to retry); waiting ones never started.
    for (const s of [...this.#streams.values()]) {
      if (s.id > this.#lastAllowed) this.#closeStream(s, H2Code.REFUSED_STREAM, false);
    }
    for (const s of this.#waiting.splice(0)) this.#closeStream(s, H2Code.REFUSED_STREAM, false);
    this.#host.goaway(this.#owner, code);
    if (this.streamCount === 0) this.#end();
  }

  /** Resets `stream` over the server's stream error `code`; `why` names it for the handler. */
  protected streamError(stream: H2Stream, code: number, why: string): void {
    this.#resetWith(stream, code, `the server sent ${why}`);
  }

  /** Queues GOAWAY with `code` and has the host close the connection with an error naming `why`. */
  protected connectionError(code: number, why: string): void {
    if (this.destroyed) return;
    const goaway = Buffer.alloc(8);
    goaway.writeUInt32BE(Math.max(0, this.#nextId - 2), 0);
    goaway.writeUInt32BE(code, 4);
    this.queueFrame(T.GOAWAY, 0, 0, goaway);
    this.#host.failed(this.#owner, new Error(`HTTP/2 connection error ${h2CodeName(code)}: ${why}`));
  }

  /** Closes `stream` once and tells its handler (later, through the host, when `async`). */
  #closeStream(stream: H2Stream, code: number | undefined, async: boolean, reason?: string): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.pending = undefined;
    if (stream.id !== 0) this.#streams.delete(stream.id);
    this.dropHeld(stream);
    this.#starting.delete(stream);
    const notify = () => stream.handler.onClose(code, reason);
    if (async) this.#host.later(notify);
    else notify();
    this.#startWaiting();
    if (this.#draining && this.streamCount === 0 && !this.destroyed) this.#host.later(() => this.#end());
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
