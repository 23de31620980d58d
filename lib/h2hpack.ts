// HPACK (RFC 7541) for the HTTP/2 client of lib/h2.ts: a decoder for whatever a server sends (static
// and dynamic table, size updates, Huffman strings, every literal form) and an encoder for our own
// requests in the simplest legal form (literals without indexing, no Huffman, no dynamic table).

/** A malformed header block (HTTP/2 COMPRESSION_ERROR: the connection must be torn down). */
export class HpackError extends Error {
  override readonly name = "HpackError";
}

/** RFC 7541 Appendix A, indexes 1..61. */
const STATIC: ReadonlyArray<readonly [string, string]> = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/** The static index of each name (first occurrence), for the encoder. */
const STATIC_NAME = new Map<string, number>();
STATIC.forEach(([name], i) => {
  if (!STATIC_NAME.has(name)) STATIC_NAME.set(name, i + 1);
});

/**
 * Bit lengths of the Huffman code of symbols 0..256 (RFC 7541 Appendix B; 256 is EOS). The code is
 * canonical: codes are assigned in order of (length, symbol), so the lengths define it.
 */
const HUFFMAN_LENGTHS =
  "13 23 28 28 28 28 28 28 28 24 30 28 28 30 28 28 28 28 28 28 28 28 30 28 28 28 28 28 28 28 28 28 6 10 10 12 " +
  "13 6 8 11 10 10 8 11 8 6 6 6 5 5 5 6 6 6 6 6 6 6 7 8 15 6 12 10 13 6 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 " +
  "7 7 8 7 8 13 19 13 14 6 15 5 6 5 6 5 6 6 6 5 7 7 6 6 6 5 6 7 6 5 5 6 7 7 7 7 7 15 11 14 13 28 20 22 20 20 " +
  "22 22 22 23 22 23 23 23 23 23 24 23 24 24 22 23 24 23 23 23 23 21 22 23 22 23 23 24 22 21 20 22 22 23 23 21 " +
  "23 22 22 24 21 22 23 23 21 21 22 21 23 22 23 23 20 22 22 22 23 22 22 23 26 26 20 19 22 23 22 25 26 26 26 27 " +
  "27 26 24 25 19 21 26 27 27 26 27 24 21 21 26 26 28 27 27 27 20 24 20 21 22 21 21 23 22 22 25 25 24 24 26 23 " +
  "26 27 26 26 27 27 27 27 27 28 27 27 27 27 27 26 30";

/** Decoder state flags packed above the 8-bit next state of a HUFFMAN_STEP entry. */
const EMIT = 0x100;
const FAIL = 0x200;
const SYMBOL_SHIFT = 10;

/**
 * A nibble-at-a-time Huffman decoder built once from the canonical code: the states are the 256
 * internal nodes of the code tree (0 is the root), and HUFFMAN_STEP[state * 16 + nibble] packs the
 * state after those 4 bits, whether a symbol was completed on the way (at most one: no code is
 * shorter than 5 bits) and which, or FAIL if the bits reached EOS. HUFFMAN_ACCEPT[state] is 1 when
 * the bits since the last symbol are valid padding: fewer than 8, all ones (a prefix of EOS).
 */
const { HUFFMAN_STEP, HUFFMAN_ACCEPT } = (() => {
  const { child, depth, allOnes } = huffmanTree(HUFFMAN_LENGTHS.split(" ").map(Number));
  const step = new Uint32Array(256 * 16);
  const accept = new Uint8Array(256);
  for (let state = 0; state < 256; state++) {
    accept[state] = (depth[state] as number) < 8 && allOnes[state] ? 1 : 0;
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let entry = 0;
      for (let bit = 3; bit >= 0; bit--) {
        const next = child[node * 2 + ((nibble >> bit) & 1)] as number;
        if (next >= 0) {
          node = next;
        } else if (next === -257) {
          entry |= FAIL;
          break;
        } else {
          entry |= EMIT | ((-next - 1) << SYMBOL_SHIFT);
          node = 0;
        }
      }
      step[state * 16 + nibble] = entry | node;
    }
  }
  return { HUFFMAN_STEP: step, HUFFMAN_ACCEPT: accept };
})();

/**
 * The code tree of the canonical code with these bit lengths: child[node * 2 + bit] is an internal
 * node (>= 0) or the leaf of symbol s (-(s + 1)); depth and allOnes describe each internal node's
 * path from the root.
 */
function huffmanTree(lengths: number[]) {
  const symbols = lengths
    .map((_, s) => s)
    .sort((a, b) => (lengths[a] as number) - (lengths[b] as number) || a - b);
  const child = new Int16Array(256 * 2).fill(0x7fff);
  const depth = new Uint8Array(256);
  const allOnes = new Uint8Array(256).fill(1);
  let nodes = 1;
  let code = 0;
  let prevLength = lengths[symbols[0] as number] as number;
  for (const sym of symbols) {
    const length = lengths[sym] as number;
    code *= 2 ** (length - prevLength);
    prevLength = length;
    let node = 0;
    for (let i = length - 1; i > 0; i--) {
      const slot = node * 2 + ((code >>> i) & 1);
      if (child[slot] === 0x7fff) {
        depth[nodes] = (depth[node] as number) + 1;
        allOnes[nodes] = allOnes[node] && slot & 1 ? 1 : 0;
        child[slot] = nodes++;
      }
      node = child[slot] as number;
    }
    child[node * 2 + (code & 1)] = -(sym + 1);
    code++;
  }
  return { child, depth, allOnes };
}

/** Scratch output of the Huffman decoder (a symbol is at least 5 bits, so 2 octets per input octet). */
let huffmanOut = Buffer.alloc(256);
/** The largest scratch output kept between calls; longer strings get one of their own. */
const HUFFMAN_OUT_KEPT = 16_384;

/**
 * Decodes a Huffman-coded string (RFC 7541 §5.2) as latin1: the padding must be fewer than 8 bits,
 * all ones (a prefix of EOS), and EOS itself must not appear.
 * @throws {HpackError}
 */
export function huffmanDecode(bytes: Uint8Array): string {
  return huffman(bytes, 0, bytes.length);
}

/** huffmanDecode of bytes[start, end). */
function huffman(bytes: Uint8Array, start: number, end: number): string {
  let out = huffmanOut;
  if ((end - start) * 2 > out.length) {
    out = Buffer.allocUnsafe((end - start) * 2);
    if (out.length <= HUFFMAN_OUT_KEPT) huffmanOut = out;
  }
  let n = 0;
  let state = 0;
  for (let i = start; i < end; i++) {
    const byte = bytes[i] as number;
    let entry = HUFFMAN_STEP[state * 16 + (byte >> 4)] as number;
    if (entry & FAIL) throw new HpackError("Huffman string contains EOS");
    if (entry & EMIT) out[n++] = entry >> SYMBOL_SHIFT;
    entry = HUFFMAN_STEP[(entry & 0xff) * 16 + (byte & 0x0f)] as number;
    if (entry & FAIL) throw new HpackError("Huffman string contains EOS");
    if (entry & EMIT) out[n++] = entry >> SYMBOL_SHIFT;
    state = entry & 0xff;
  }
  if (!HUFFMAN_ACCEPT[state]) throw new HpackError("Huffman padding is not a prefix of EOS under 8 bits");
  return out.toString("latin1", 0, n);
}

/** A cursor over one header block. */
class Reader {
  pos = 0;
  /** The block as a Buffer, for latin1 decoding; made on the first plain string literal. */
  #view: Buffer | undefined;

  constructor(readonly buf: Uint8Array) {}

  byte(): number {
    if (this.pos >= this.buf.length) throw new HpackError("truncated header block");
    return this.buf[this.pos++] as number;
  }

  /**
   * An integer with an N-bit prefix (RFC 7541 §5.1) whose first octet is already read: at most 5
   * continuation octets and at most 2^31 - 1, far beyond any size or index a peer can mean.
   */
  integer(first: number, prefixBits: number): number {
    const max = (1 << prefixBits) - 1;
    let value = first & max;
    if (value < max) return value;
    for (let shift = 0; ; shift += 7) {
      if (shift > 28) throw new HpackError("integer with more than 5 continuation octets");
      const b = this.byte();
      value += (b & 0x7f) * 2 ** shift;
      if (!(b & 0x80)) break;
    }
    if (value > 0x7fffffff) throw new HpackError("integer overflow");
    return value;
  }

  /** A string literal (RFC 7541 §5.2), as latin1. */
  string(): string {
    const first = this.byte();
    const length = this.integer(first, 7);
    const start = this.pos;
    const end = start + length;
    if (end > this.buf.length) throw new HpackError("truncated string literal");
    this.pos = end;
    if (first & 0x80) return huffman(this.buf, start, end);
    this.#view ??= Buffer.isBuffer(this.buf)
      ? this.buf
      : Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.length);
    return this.#view.toString("latin1", start, end);
  }
}

/** The size of the peer's dynamic table until it sends an update: SETTINGS_HEADER_TABLE_SIZE's initial value. */
const INITIAL_TABLE_SIZE = 4096;

/** Decoder for one HTTP/2 connection's header blocks (it keeps the dynamic table between blocks). */
export class HpackDecoder {
  readonly #maxTableSize: number;
  readonly #maxListBytes: number;
  /** The dynamic table, newest entry first (index 62 is #table[0]). */
  readonly #table: Array<readonly [string, string]> = [];
  /** The table's size in RFC 7541 §4.1 terms (name + value + 32 per entry). */
  #size = 0;
  /** The table's maximum size: 4096 until the peer's encoder sends a dynamic table size update. */
  #capacity = INITIAL_TABLE_SIZE;

  /**
   * @param maxTableSize the SETTINGS_HEADER_TABLE_SIZE we advertised (default 4096): the largest
   *   dynamic table size update the peer may send. The table starts at 4096 whatever this is, as the
   *   peer's encoder does (RFC 7540 §6.5.2), until the peer sends an update.
   * @param maxHeaderListBytes largest decoded header list (RFC 7540 sizing: name + value + 32 per
   *   field); beyond it decode() throws HpackError (fail closed, default 65536).
   */
  constructor(maxTableSize = 4096, maxHeaderListBytes = 65_536) {
    this.#maxTableSize = maxTableSize;
    this.#maxListBytes = maxHeaderListBytes;
  }

  /**
   * Decodes one complete header block (all HEADERS and CONTINUATION fragments joined) into
   * [name, value] pairs in order. Names and values are latin1 (one char per octet).
   * @throws {HpackError} for a malformed block: the connection's decoding state is then lost.
   */
  decode(block: Uint8Array): Array<[string, string]> {
    const r = new Reader(block);
    const out: Array<[string, string]> = [];
    let listBytes = 0;
    let fieldSeen = false;
    while (r.pos < block.length) {
      const b = r.byte();
      let field: [string, string];
      if (b & 0x80) {
        field = this.#entry(r.integer(b, 7));
      } else if (b & 0x40) {
        field = this.#literal(r, r.integer(b, 6));
        this.#add(field);
      } else if (b & 0x20) {
        if (fieldSeen) throw new HpackError("dynamic table size update after a header field");
        const size = r.integer(b, 5);
        if (size > this.#maxTableSize)
          throw new HpackError(`dynamic table size ${size} over ${this.#maxTableSize}`);
        this.#capacity = size;
        this.#evict(0);
        continue;
      } else {
        field = this.#literal(r, r.integer(b, 4));
      }
      fieldSeen = true;
      listBytes += field[0].length + field[1].length + 32;
      if (listBytes > this.#maxListBytes)
        throw new HpackError(`header list over ${this.#maxListBytes} bytes`);
      out.push(field);
    }
    return out;
  }

  #entry(index: number): [string, string] {
    if (index === 0) throw new HpackError("header index 0");
    const e = index <= STATIC.length ? STATIC[index - 1] : this.#table[index - STATIC.length - 1];
    if (!e) throw new HpackError(`header index ${index} out of range`);
    return [e[0], e[1]];
  }

  #literal(r: Reader, nameIndex: number): [string, string] {
    const name = nameIndex === 0 ? r.string() : this.#entry(nameIndex)[0];
    return [name, r.string()];
  }

  #add(field: readonly [string, string]): void {
    const size = field[0].length + field[1].length + 32;
    this.#evict(size);
    if (size <= this.#capacity) {
      this.#table.unshift([field[0], field[1]]);
      this.#size += size;
    }
  }

  /** Evicts the oldest entries until `room` more bytes fit (or the table is empty). */
  #evict(room: number): void {
    while (this.#table.length > 0 && this.#size + room > this.#capacity) {
      const e = this.#table.pop() as readonly [string, string];
      this.#size -= e[0].length + e[1].length + 32;
    }
  }
}

/** The octets of an integer with an N-bit prefix (RFC 7541 §5.1). */
function integerLength(value: number, prefixBits: number): number {
  let n = 1;
  for (let v = value - ((1 << prefixBits) - 1); v >= 0; v = Math.floor(v / 128)) {
    n++;
    if (v < 128) break;
  }
  return n;
}

/** Writes an integer with an N-bit prefix (RFC 7541 §5.1) whose first octet also holds flags; returns the end. */
function writeInteger(
  out: Uint8Array,
  pos: number,
  value: number,
  prefixBits: number,
  flags: number,
): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out[pos] = flags | value;
    return pos + 1;
  }
  out[pos++] = flags | max;
  let v = value - max;
  for (; v >= 0x80; v = Math.floor(v / 128)) out[pos++] = (v & 0x7f) | 0x80;
  out[pos] = v;
  return pos + 1;
}

/** Writes a string literal without Huffman (RFC 7541 §5.2), one octet per char; returns the end. */
function writeString(out: Uint8Array, pos: number, s: string): number {
  let p = writeInteger(out, pos, s.length, 7, 0);
  for (let i = 0; i < s.length; i++) out[p++] = s.charCodeAt(i);
  return p;
}

/**
 * Encodes request headers as literals without indexing (RFC 7541 §6.2.2; the name by its static
 * index when the static table holds it, else a literal name), without Huffman, so the peer's
 * dynamic table is never used. Names must already be lower-case; names and values are written as
 * latin1 (one octet per char: a char above U+00FF keeps only its low octet).
 */
export function encodeHeaders(headers: ReadonlyArray<readonly [string, string]>): Uint8Array {
  let length = 0;
  for (const [name, value] of headers) {
    const index = STATIC_NAME.get(name);
    length += index === undefined ? 1 + integerLength(name.length, 7) + name.length : integerLength(index, 4);
    length += integerLength(value.length, 7) + value.length;
  }
  const out = new Uint8Array(length);
  let pos = 0;
  for (const [name, value] of headers) {
    const index = STATIC_NAME.get(name);
    if (index === undefined) {
      out[pos++] = 0;
      pos = writeString(out, pos, name);
    } else {
      pos = writeInteger(out, pos, index, 4, 0);
    }
    pos = writeString(out, pos, value);
  }
  return out;
}
