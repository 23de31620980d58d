// The messages a gRPC call (lib/grpc.ts) received and its reader has not taken yet, packed so that
// they cost about what they weigh: small messages are copied back to back into one buffer that
// doubles as it fills, their lengths into a typed array; large ones are kept as they are. A server
// may send a paused stream a whole flow-control window of empty messages, 5 bytes each on the
// wire; kept as one Uint8Array each they would cost ~300 bytes apiece (1 MiB of window: 60 MiB).

/** Messages shorter than this are packed; longer ones are queued as they are. */
const PACKED_BELOW = 1024;
/** The length slot of a message queued as it is. */
const WHOLE = 0xffff_ffff;
/** Buffers of an emptied queue above this size are let go rather than reused. */
const KEEP_BYTES = 64 << 10;
const NO_BYTES = new Uint8Array(0);
const NO_LENGTHS = new Uint32Array(0);

/**
 * A FIFO of messages: push() copies small ones, shift() returns each as a Uint8Array of its own
 * (every empty one as the same empty array).
 * @example const q = new MessageQueue(); q.push(m); const first = q.shift();
 */
export class MessageQueue {
  #bytes = NO_BYTES;
  #byteHead = 0;
  #byteTail = 0;
  #lengths = NO_LENGTHS;
  #lengthHead = 0;
  #lengthTail = 0;
  #whole: Uint8Array[] = [];
  #queuedBytes = 0;

  /** Messages queued. */
  get length(): number {
    return this.#lengthTail - this.#lengthHead;
  }

  /** Bytes of the messages queued. */
  get bytes(): number {
    return this.#queuedBytes;
  }

  /** Queues `m`; a small one is copied, so the caller's bytes are not kept. */
  push(m: Uint8Array): void {
    if (m.length >= PACKED_BELOW) {
      this.#whole.push(m);
      this.#pushLength(WHOLE);
    } else {
      this.#reserve(m.length);
      this.#bytes.set(m, this.#byteTail);
      this.#byteTail += m.length;
      this.#pushLength(m.length);
    }
    this.#queuedBytes += m.length;
  }

  /** The oldest message, or undefined when the queue is empty. */
  shift(): Uint8Array | undefined {
    if (this.#lengthHead === this.#lengthTail) return undefined;
    const length = this.#lengths[this.#lengthHead++] as number;
    let m: Uint8Array;
    if (length === WHOLE) {
      m = this.#whole.shift() as Uint8Array;
    } else {
      m = length === 0 ? NO_BYTES : this.#bytes.slice(this.#byteHead, this.#byteHead + length);
      this.#byteHead += length;
    }
    this.#queuedBytes -= m.length;
    if (this.#lengthHead === this.#lengthTail) this.clear();
    return m;
  }

  /** Drops every message. */
  clear(): void {
    this.#byteHead = 0;
    this.#byteTail = 0;
    this.#lengthHead = 0;
    this.#lengthTail = 0;
    this.#whole.length = 0;
    this.#queuedBytes = 0;
    if (this.#bytes.length > KEEP_BYTES) this.#bytes = NO_BYTES;
    if (this.#lengths.byteLength > KEEP_BYTES) this.#lengths = NO_LENGTHS;
  }

  /** Room for `n` more bytes at the tail: the live bytes moved to the front, or a buffer twice as big. */
  #reserve(n: number): void {
    if (this.#byteTail + n <= this.#bytes.length) return;
    const live = this.#byteTail - this.#byteHead;
    if (live + n <= this.#bytes.length / 2) {
      this.#bytes.copyWithin(0, this.#byteHead, this.#byteTail);
    } else {
      const next = new Uint8Array(Math.max(this.#bytes.length * 2, live + n, 4096));
      next.set(this.#bytes.subarray(this.#byteHead, this.#byteTail));
      this.#bytes = next;
    }
    this.#byteHead = 0;
    this.#byteTail = live;
  }

  #pushLength(length: number): void {
    if (this.#lengthTail === this.#lengths.length) {
      const live = this.#lengthTail - this.#lengthHead;
      if (live + 1 <= this.#lengths.length / 2) {
        this.#lengths.copyWithin(0, this.#lengthHead, this.#lengthTail);
      } else {
        const next = new Uint32Array(Math.max(this.#lengths.length * 2, 256));
        next.set(this.#lengths.subarray(this.#lengthHead, this.#lengthTail));
        this.#lengths = next;
      }
      this.#lengthHead = 0;
      this.#lengthTail = live;
    }
    this.#lengths[this.#lengthTail++] = length;
  }
}
