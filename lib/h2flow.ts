// HTTP/2 flow control (RFC 9113 §5.2, §6.9) both ways, for the connection of lib/h2connection.ts:
// the request bodies sent as the server's windows allow (its INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE
// and WINDOW_UPDATEs), and the receive windows returned to it as DATA is delivered, a server that
// sends beyond them being a connection or a stream error.

import { H2Code, H2Flag, H2Framer, H2FrameType, H2Setting, u32 } from "./h2framer.ts";
import type { H2Stream } from "./h2stream.ts";

/** The default window and the largest a window may grow to. */
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
/** Unread bytes a stream may have in flight towards us (a paused stream holds at most this). */
export const STREAM_WINDOW = 1 << 20;
/** The connection's receive window: many streams share it, and it is replenished as data arrives. */
export const CONNECTION_WINDOW = 16 << 20;

/**
 * The windows of a connection, the base of lib/h2connection.ts' H2Connection (one object per
 * connection). The subclass says what a stream error does (streamError).
 */
export abstract class H2FlowControl extends H2Framer {
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrame = 16_384;
  /** What the server lets us send on the connection. */
  #sendWindow = DEFAULT_WINDOW;
  /** DATA bytes received on the connection and not yet returned by WINDOW_UPDATE. */
  #connUnacked = 0;
  /** Streams with request body left to send (flow control holds it). */
  readonly #sendable = new Set<H2Stream>();

  /** Resets `stream` over the server's stream error `code`; `why` names what it sent. */
  protected abstract streamError(stream: H2Stream, code: number, why: string): void;

  /** Raises the connection's receive window from the protocol's default to CONNECTION_WINDOW (after our SETTINGS). */
  protected queueConnectionWindow(): void {
    this.queueFrame(H2FrameType.WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW));
  }

  /**
   * Sends `stream`'s request: the header `block` as HEADERS and CONTINUATION frames of the size the
   * server takes, then as much of its pending body as the windows allow.
   */
  protected sendRequest(stream: H2Stream, block: Uint8Array): void {
    stream.sendWindow = this.#peerInitialWindow;
    let off = 0;
    let type: number = H2FrameType.HEADERS;
    do {
      const end = Math.min(block.length, off + this.#peerMaxFrame);
      const last = end === block.length;
      this.queueFrame(type, last ? H2Flag.END_HEADERS : 0, stream.id, block.subarray(off, end));
      off = end;
      type = H2FrameType.CONTINUATION;
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
      this.queueFrame(H2FrameType.DATA, last ? H2Flag.END_STREAM : 0, stream.id, body.subarray(off, off + n));
      stream.sendWindow -= n;
      this.#sendWindow -= n;
      off += n;
    }
    if (off === body.length) {
      if (body.length === 0)
        this.queueFrame(H2FrameType.DATA, H2Flag.END_STREAM, stream.id, new Uint8Array(0));
      stream.pending = undefined;
      this.#sendable.delete(stream);
    } else {
      stream.pending = body.subarray(off);
      this.#sendable.add(stream);
    }
  }

  /** Sends what the windows now allow of every body flow control holds back. */
  protected sendHeldBodies(): void {
    if (this.#sendable.size > 0) for (const s of this.#sendable) this.#sendBody(s);
  }

  /** `stream` closed (or, without one, the connection did): no body of it is held any more. */
  protected dropHeld(stream?: H2Stream): void {
    if (stream) this.#sendable.delete(stream);
    else this.#sendable.clear();
  }

  /** Applies the server's INITIAL_WINDOW_SIZE or MAX_FRAME_SIZE (others are ignored); false after a connection error. */
  protected peerSetting(id: number, value: number): boolean {
    if (id === H2Setting.INITIAL_WINDOW_SIZE) {
      if (value > MAX_WINDOW) {
        this.connectionError(H2Code.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE");
        return false;
      }
      // Only streams with body left to send use their window (RFC 9113 §6.9.2).
      const delta = value - this.#peerInitialWindow;
      this.#peerInitialWindow = value;
      for (const s of this.#sendable) s.sendWindow += delta;
    } else if (id === H2Setting.MAX_FRAME_SIZE) {
      if (value < 16_384 || value > 16_777_215) {
        this.connectionError(H2Code.PROTOCOL_ERROR, "MAX_FRAME_SIZE");
        return false;
      }
      this.#peerMaxFrame = value;
    }
    return true;
  }

  /** A WINDOW_UPDATE frame's `payload` on the connection (`streamId` 0) or on `stream` (undefined: not open). */
  protected onWindowUpdate(streamId: number, stream: H2Stream | undefined, payload: Buffer): void {
    if (payload.length !== 4) {
      this.connectionError(H2Code.FRAME_SIZE_ERROR, "WINDOW_UPDATE size");
      return;
    }
    const inc = payload.readUInt32BE(0) & MAX_WINDOW;
    if (streamId === 0) {
      this.#growSendWindow(inc);
      return;
    }
    if (!stream) return;
    if (inc === 0) {
      this.streamError(stream, H2Code.PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the stream");
      return;
    }
    if (stream.pending === undefined) return; // nothing left to send: its window no longer matters
    stream.sendWindow += inc;
    if (stream.sendWindow > MAX_WINDOW) {
      this.streamError(stream, H2Code.FLOW_CONTROL_ERROR, "WINDOW_UPDATE beyond 2^31-1 on the stream");
      return;
    }
    this.#sendBody(stream);
  }

  /** The server's WINDOW_UPDATE of `inc` on the connection: more of the held bodies go out. */
  #growSendWindow(inc: number): void {
    if (inc === 0) {
      this.connectionError(H2Code.PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
      return;
    }
    this.#sendWindow += inc;
    if (this.#sendWindow > MAX_WINDOW) {
      this.connectionError(H2Code.FLOW_CONTROL_ERROR, "window");
      return;
    }
    for (const s of this.#sendable) this.#sendBody(s);
  }

  /**
   * Counts `length` DATA bytes (padding included, whatever the stream) against the connection's
   * receive window, returning them with a WINDOW_UPDATE once half of it is used; false after a
   * connection error (DATA beyond the window).
   */
  protected takeConnectionWindow(length: number): boolean {
    // What the server may send on the connection is CONNECTION_WINDOW less what we have not acknowledged.
    if (this.#connUnacked + length > CONNECTION_WINDOW) {
      this.connectionError(H2Code.FLOW_CONTROL_ERROR, "DATA beyond the connection's flow-control window");
      return false;
    }
    this.#connUnacked += length;
    if (this.#connUnacked >= CONNECTION_WINDOW / 2) {
      this.queueFrame(H2FrameType.WINDOW_UPDATE, 0, 0, u32(this.#connUnacked));
      this.#connUnacked = 0;
    }
    return true;
  }

  /** Whether `length` more DATA bytes on `stream` stay within its receive window (else a stream error). */
  protected takeStreamWindow(stream: H2Stream, length: number): boolean {
    if (stream.unacked + length <= STREAM_WINDOW) return true;
    this.streamError(stream, H2Code.FLOW_CONTROL_ERROR, "DATA beyond the stream's flow-control window");
    return false;
  }

  /**
   * Returns flow-control credit for `bytes` more delivered on `stream` (called per DATA frame, and
   * by resume() with 0): a WINDOW_UPDATE once half the stream window is used, unless paused.
   */
  credit(stream: H2Stream, bytes: number): void {
    stream.unacked += bytes;
    if (stream.paused || stream.closed || stream.unacked < STREAM_WINDOW / 2) return;
    this.queueFrame(H2FrameType.WINDOW_UPDATE, 0, stream.id, u32(stream.unacked));
    stream.unacked = 0;
  }
}
