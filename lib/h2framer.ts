// HTTP/2 frames (RFC 9113 §4, §6) as bytes, both ways, for the connection of lib/h2connection.ts:
// the vocabulary (error codes, frame types, flags, settings), the reader that cuts a socket's
// chunks into whole frames, and the queue of frames to write, with the PING and SETTINGS
// acknowledgements a server asked for and has not read yet (lib/h2limits.ts' MAX_UNSENT_REPLIES).
// No socket: the shell (lib/h2.ts) feeds the chunks it reads and writes what takeOutput() returns.

import { MAX_UNSENT_REPLIES } from "./h2limits.ts";

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

/** The name of an HTTP/2 error code (`FLOW_CONTROL_ERROR`), or the number of one without a name. */
export function h2CodeName(code: number): string {
  return CODE_NAMES.get(code) ?? String(code);
}

/** Frame types (RFC 9113 §6). */
export const H2FrameType = {
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

/** Frame flags (RFC 9113 §6); ACK and END_STREAM share a bit on different frame types. */
export const H2Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

/** SETTINGS parameters (RFC 9113 §6.5.2). */
export const H2Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The client connection preface (RFC 9113 §3.4), before our SETTINGS. */
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
/** An empty payload (never written to). */
export const EMPTY = Buffer.alloc(0);
/** Bytes of a frame header: length (24 bits), type, flags, stream id (31 bits). */
export const FRAME_HEADER_BYTES = 9;
/** The largest frame we accept: the protocol default, never raised in our SETTINGS. */
export const MAX_FRAME_RECEIVE = 16_384;

/** `n` as a 4-byte big-endian payload (WINDOW_UPDATE, RST_STREAM). */
export function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}

/**
 * Frames in and out of bytes, the base of the connection (one object per connection, so that a
 * session costs no object of its own for them). A subclass handles each whole frame read
 * (onFrame), says what a connection error does (connectionError) and when queued frames should be
 * written (wake).
 */
export abstract class H2Framer {
  /**
   * The frame the last chunk ended inside: its first #partBytes bytes, in a buffer of the frame's
   * size once its header is in (so a frame that comes a byte per read is copied once, not per read).
   */
  #part: Buffer = EMPTY;
  #partBytes = 0;
  /** wake() was called since the last takeOutput(): later frames join that write without asking again. */
  #woken = false;
  /** Frames to write, in order, until takeOutput(). */
  #out: Buffer[] = [];
  /** The buffer acknowledgements are written into until the next takeOutput(); [start, end) not yet in #out. */
  #acks: Buffer | undefined;
  #acksStart = 0;
  #acksEnd = 0;
  /** PING and SETTINGS acknowledgements queued, and handed to the socket but not yet written. */
  #outReplies = 0;
  #unsentReplies = 0;
  /** The acknowledgements in each socket write not yet written out, oldest first. */
  readonly #inFlight: number[] = [];
  #stopped = false;

  /** The connection is over (the socket is gone): no frame is read or queued any more. */
  get destroyed(): boolean {
    return this.#stopped;
  }

  /** Handles the whole frame at buf[off..end] (its header included); `buf` is the reader's, not to be kept. */
  protected abstract onFrame(buf: Buffer, off: number, end: number): void;

  /** Ends the connection over a connection error `code` (RFC 9113 §5.4.1); `why` says what the server did. */
  protected abstract connectionError(code: number, why: string): void;

  /** Frames were queued: takeOutput() should be called soon (once for many frames). */
  protected abstract wake(): void;

  /** wake(), once until the next takeOutput(). */
  #wakeOnce(): void {
    if (this.#woken) return;
    this.#woken = true;
    this.wake();
  }

  /** Marks the connection over: later chunks and frames are ignored. */
  protected stop(): void {
    this.#stopped = true;
  }

  /** Cuts `chunk` into frames for onFrame(), keeping a frame it ends inside for the next chunk. */
  protected readFrames(chunk: Buffer): void {
    const off = this.#finishPart(chunk);
    if (this.#stopped || this.#partBytes > 0) {
      // A frame too large for us: #parse() reports it (it waits for the rest of any other).
      if (!this.#stopped && this.#partBytes >= FRAME_HEADER_BYTES) {
        this.#parse(this.#part.subarray(0, this.#partBytes), 0);
      }
      return;
    }
    const rest = this.#parse(chunk, off);
    if (this.#stopped || rest === chunk.length) return;
    // Keep the unparsed tail; a copy, so that the big chunk it came from can go.
    this.#part = Buffer.allocUnsafe(frameBytes(chunk, rest, chunk.length - rest));
    this.#partBytes = chunk.copy(this.#part, 0, rest);
  }

  /** Completes the frame the last chunk ended inside from `chunk` (only its own bytes are copied); returns the bytes of `chunk` used. */
  #finishPart(chunk: Buffer): number {
    let off = 0;
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
    return off;
  }

  /** Handles the whole frames of `buf` from `off`; returns where the incomplete rest starts. */
  #parse(buf: Buffer, off: number): number {
    while (!this.#stopped && buf.length - off >= FRAME_HEADER_BYTES) {
      const length = buf.readUIntBE(off, 3);
      if (length > MAX_FRAME_RECEIVE) {
        this.connectionError(H2Code.FRAME_SIZE_ERROR, `a frame of ${length} bytes`);
        break;
      }
      const end = off + FRAME_HEADER_BYTES + length;
      if (buf.length < end) break;
      this.onFrame(buf, off, end);
      off = end;
    }
    return off;
  }

  /** Queues the connection preface, then what `queueFirst` queues, ahead of the frames queued until now. */
  protected queuePreface(queueFirst: () => void): void {
    const pending = this.#out;
    this.#out = [PREFACE];
    queueFirst();
    this.#out.push(...pending);
  }

  /** Queues a frame; `payload` is written as it is then (not copied). */
  protected queueFrame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (this.#stopped) return;
    this.#sealAcks();
    const head = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    head[4] = flags;
    head.writeUInt32BE(streamId, 5);
    this.#out.push(head);
    if (payload.length > 0) this.#out.push(payload as Buffer);
    this.#wakeOnce();
  }

  /**
   * Queues an acknowledgement the server asked for (PING, SETTINGS) with buf[start..end] as its
   * payload. A server that keeps asking but does not read them ends the connection once
   * MAX_UNSENT_REPLIES wait to be written; those of this read (at most one socket chunk's worth)
   * are counted from their takeOutput() on. False when the connection is over.
   */
  protected queueReply(type: number, buf: Buffer, start: number, end: number): boolean {
    if (this.#stopped) return false;
    if (this.#unsentReplies > MAX_UNSENT_REPLIES) {
      this.connectionError(
        H2Code.ENHANCE_YOUR_CALM,
        `the server sent PING or SETTINGS frames without reading our acknowledgements (over ${MAX_UNSENT_REPLIES} unsent)`,
      );
      return false;
    }
    this.#outReplies++;
    const acks = this.#ackRoom(FRAME_HEADER_BYTES + end - start);
    const at = this.#acksEnd;
    acks.writeUIntBE(end - start, at, 3);
    acks[at + 3] = type;
    acks[at + 4] = H2Flag.ACK;
    acks.writeUInt32BE(0, at + 5);
    buf.copy(acks, at + FRAME_HEADER_BYTES, start, end);
    this.#acksEnd = at + FRAME_HEADER_BYTES + end - start;
    this.#wakeOnce();
    return true;
  }

  /**
   * The buffer with room for `n` more bytes of acknowledgements: they are written back to back
   * into one buffer, so that a flood allocates nothing per frame.
   */
  #ackRoom(n: number): Buffer {
    const acks = this.#acks;
    if (acks !== undefined && this.#acksEnd + n <= acks.length) return acks;
    this.#sealAcks();
    const fresh = Buffer.allocUnsafe(Math.min(Math.max(4096, (acks?.length ?? 0) * 2), 256 << 10));
    this.#acks = fresh;
    this.#acksStart = 0;
    this.#acksEnd = 0;
    return fresh;
  }

  /** Moves the acknowledgements written since the last call into #out, keeping frame order. */
  #sealAcks(): void {
    if (this.#acks === undefined || this.#acksEnd === this.#acksStart) return;
    this.#out.push(this.#acks.subarray(this.#acksStart, this.#acksEnd));
    this.#acksStart = this.#acksEnd;
  }

  /**
   * The bytes of the frames queued since the last call, for one socket write, or undefined when
   * there are none (or the connection is over). Call written() when that write completes.
   */
  takeOutput(): Buffer | undefined {
    this.#woken = false;
    if (this.#stopped) return undefined;
    this.#sealAcks();
    // The socket may keep what it is given: the next acknowledgement starts a new buffer.
    this.#acks = undefined;
    if (this.#out.length === 0) return undefined;
    const data = this.#out.length === 1 ? (this.#out[0] as Buffer) : Buffer.concat(this.#out);
    this.#out = [];
    this.#inFlight.push(this.#outReplies);
    this.#unsentReplies += this.#outReplies;
    this.#outReplies = 0;
    return data;
  }

  /** The oldest write of takeOutput()'s bytes completed (the server is reading); true while others wait. */
  written(): boolean {
    this.#unsentReplies -= this.#inFlight.shift() ?? 0;
    return this.#inFlight.length > 0;
  }
}

/** The bytes of the frame at buf[off..], of which `have` arrived: its header's, or the whole frame's once the header is in. */
function frameBytes(buf: Buffer, off: number, have: number): number {
  return have < FRAME_HEADER_BYTES ? FRAME_HEADER_BYTES : FRAME_HEADER_BYTES + buf.readUIntBE(off, 3);
}
