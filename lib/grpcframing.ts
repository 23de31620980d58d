// gRPC's Length-Prefixed-Message framing: a message with its 5-byte header, and the decoder that
// cuts a call's DATA into messages whatever their framing, at most about twice a message's bytes
// against a hostile server. Part of the gRPC family; lib/grpc.ts is its public surface.

import { GrpcError } from "./grpcstatus.ts";
import { GrpcStatus } from "./taloserrors.ts";

/** Bytes of the Length-Prefixed-Message header: compressed flag, then a big-endian uint32 length. */
const PREFIX_BYTES = 5;

/** What MessageDecoder.push() returns when a chunk completes no message (never written to). */
const NO_MESSAGES: Uint8Array[] = [];
/** Every empty message (nothing can be written to it). */
const NO_BYTES = new Uint8Array(0);

/** A message with its Length-Prefixed-Message header (uncompressed). */
export function frameMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, PREFIX_BYTES);
  return out;
}

/**
 * Splits DATA chunks into messages: a frame may span chunks and a chunk may hold many frames.
 * A message wholly inside a chunk is a view of it when it fills at least half of the chunk's
 * buffer, else a copy, so a small message never keeps a large socket chunk alive. A message that
 * spans chunks is copied into a buffer that doubles as it fills (never beyond the announced
 * length), so its memory is at most twice its bytes whatever the framing: one-byte DATA frames
 * cost what one frame of the whole message costs.
 * @example const d = new MessageDecoder(32 << 20); for (const m of d.push(chunk)) handle(m)
 */
export class MessageDecoder {
  readonly #maxBytes: number;
  /** How much of the unfinished message's Length-Prefixed-Message header arrived, and its fields so far. */
  #headBytes = 0;
  #flag = 0;
  #announced = 0;
  /** Length of the unfinished message once its header is complete, else -1. */
  #length = -1;
  /** Its bytes so far. */
  #body: Uint8Array | undefined;
  #bodyBytes = 0;

  /** @param maxBytes largest message accepted (the receive limit). */
  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  /** Whether no message is half-received (a stream may end here). */
  get idle(): boolean {
    return this.#headBytes === 0;
  }

  /**
   * Feeds bytes `start` to `end` of `chunk` (default all) and returns the messages they complete.
   * @throws {GrpcError} RESOURCE_EXHAUSTED for a message over the limit, INTERNAL for a
   *   compressed or malformed frame; the decoder is unusable afterwards.
   */
  push(chunk: Uint8Array, start = 0, end = chunk.length): Uint8Array[] {
    let out: Uint8Array[] | undefined;
    let off = start;
    while (off < end) {
      let m: Uint8Array | undefined;
      if (this.#headBytes === 0 && end - off >= PREFIX_BYTES) {
        const last = off + PREFIX_BYTES + this.#header(chunk, off);
        if (last <= end) {
          m = messageOf(chunk, off + PREFIX_BYTES, last);
          off = last;
        }
      }
      if (m === undefined) {
        off = this.#collect(chunk, off, end);
        m = this.#complete();
      }
      if (m === undefined) continue;
      if (out === undefined) out = [m];
      else out.push(m);
    }
    // One-byte DATA frames come one call each: no array, no view, per call that completes nothing.
    return out ?? NO_MESSAGES;
  }

  /** Copies what chunk[off..end] holds of the unfinished message; returns where it stopped. */
  #collect(chunk: Uint8Array, off: number, end: number): number {
    if (this.#headBytes < PREFIX_BYTES) {
      while (this.#headBytes < PREFIX_BYTES && off < end) {
        const b = chunk[off++] as number;
        if (this.#headBytes++ === 0) this.#flag = b;
        else this.#announced = this.#announced * 256 + b;
      }
      if (this.#headBytes < PREFIX_BYTES) return off;
      this.#length = this.#checked(this.#flag, this.#announced);
      this.#announced = 0;
    }
    const take = Math.min(this.#length - this.#bodyBytes, end - off);
    if (take > 0) {
      const body = this.#reserve(this.#bodyBytes + take);
      if (take <= 16) for (let i = 0; i < take; i++) body[this.#bodyBytes + i] = chunk[off + i] as number;
      else body.set(chunk.subarray(off, off + take), this.#bodyBytes);
      this.#bodyBytes += take;
      off += take;
    }
    return off;
  }

  /** The unfinished message once all of it arrived (its buffer grew to exactly its length), else undefined. */
  #complete(): Uint8Array | undefined {
    if (this.#length < 0 || this.#bodyBytes < this.#length) return undefined;
    const m = this.#body ?? NO_BYTES;
    this.#body = undefined;
    this.#bodyBytes = 0;
    this.#headBytes = 0;
    this.#length = -1;
    return m;
  }

  /** The body buffer, with room for `n` bytes: doubled (at least 4 KiB), never beyond the length. */
  #reserve(n: number): Uint8Array {
    const body = this.#body;
    if (body && n <= body.length) return body;
    const next = new Uint8Array(Math.min(this.#length, Math.max(n, (body?.length ?? 0) * 2, 4096)));
    if (body) next.set(body.subarray(0, this.#bodyBytes));
    this.#body = next;
    return next;
  }

  /** Validates the header at `off` and returns the message length. */
  #header(b: Uint8Array, off: number): number {
    const length =
      (b[off + 1] as number) * 0x1000000 +
      ((b[off + 2] as number) << 16) +
      ((b[off + 3] as number) << 8) +
      (b[off + 4] as number);
    return this.#checked(b[off] as number, length);
  }

  /** The message length of a header with `flag` and `length`, validated. */
  #checked(flag: number, length: number): number {
    if (flag !== 0) {
      throw new GrpcError(
        GrpcStatus.INTERNAL,
        flag === 1
          ? "Received a compressed message, but this client accepts no grpc-encoding"
          : `Received a message with an invalid compressed flag ${flag}`,
      );
    }
    if (length > this.#maxBytes) {
      throw new GrpcError(
        GrpcStatus.RESOURCE_EXHAUSTED,
        `Received message larger than max (${length} vs. ${this.#maxBytes})`,
      );
    }
    return length;
  }
}

/**
 * chunk[start..end] as a message: a view when it fills at least half of the chunk's buffer, else a
 * copy, so that a small message does not keep a large socket chunk alive.
 */
function messageOf(chunk: Uint8Array, start: number, end: number): Uint8Array {
  const n = end - start;
  if (n === 0) return NO_BYTES;
  if (n * 2 >= chunk.buffer.byteLength) return chunk.subarray(start, end);
  const m = new Uint8Array(n);
  if (n <= 64) for (let i = 0; i < n; i++) m[i] = chunk[start + i] as number;
  else m.set(chunk.subarray(start, end));
  return m;
}
