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

/**
 * Canonical decoding tables: for each length L, the first code of that length, the index of its
 * first symbol in SYMBOLS, and how many codes have it.
 */
const HUFFMAN = (() => {
  const lengths = HUFFMAN_LENGTHS.split(" ").map(Number);
  const symbols = lengths
    .map((_, s) => s)
    .sort((a, b) => (lengths[a] as number) - (lengths[b] as number) || a - b);
  const firstCode = new Array<number>(31).fill(0);
  const firstIndex = new Array<number>(31).fill(0);
  const count = new Array<number>(31).fill(0);
  for (const l of lengths) count[l] = (count[l] as number) + 1;
  let code = 0;
  let index = 0;
  for (let l = 1; l <= 30; l++) {
    firstCode[l] = code;
    firstIndex[l] = index;
    code = (code + (count[l] as number)) * 2;
    index += count[l] as number;
  }
  return { symbols, firstCode, firstIndex, count };
})();

/**
 * Decodes a Huffman-coded string (RFC 7541 §5.2): the padding must be fewer than 8 bits, all ones
 * (a prefix of EOS), and EOS itself must not appear.
 * @throws {HpackError}
 */
export function huffmanDecode(bytes: Uint8Array): string {
  const { symbols, firstCode, firstIndex, count } = HUFFMAN;
  let out = "";
  let code = 0;
  let len = 0;
  for (const byte of bytes) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      len++;
      const offset = code - (firstCode[len] as number);
      if (offset >= 0 && offset < (count[len] as number)) {
        const sym = symbols[(firstIndex[len] as number) + offset] as number;
        if (sym === 256) throw new HpackError("Huffman string contains EOS");
        out += String.fromCharCode(sym);
        code = 0;
        len = 0;
      } else if (len >= 30) {
        throw new HpackError("invalid Huffman code");
      }
    }
  }
  if (len > 7) throw new HpackError("Huffman padding longer than 7 bits");
  if (code !== 2 ** len - 1) throw new HpackError("Huffman padding is not a prefix of EOS");
  return out;
}

/** A cursor over one header block. */
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  byte(): number {
    if (this.pos >= this.buf.length) throw new HpackError("truncated header block");
    return this.buf[this.pos++] as number;
  }

  /** An integer with an N-bit prefix (RFC 7541 §5.1), the prefix's first byte already read. */
  integer(first: number, prefixBits: number): number {
    const max = (1 << prefixBits) - 1;
    let value = first & max;
    if (value < max) return value;
    for (let shift = 0; ; shift += 7) {
      if (shift > 28) throw new HpackError("integer overflow");
      const b = this.byte();
      value += (b & 0x7f) * 2 ** shift;
      if (!(b & 0x80)) break;
    }
    if (value > 2 ** 31) throw new HpackError("integer overflow");
    return value;
  }

  /** A string literal (RFC 7541 §5.2), as latin1. */
  string(): string {
    const first = this.byte();
    const length = this.integer(first, 7);
    if (this.pos + length > this.buf.length) throw new HpackError("truncated string literal");
    const raw = this.buf.subarray(this.pos, this.pos + length);
    this.pos += length;
    return first & 0x80
      ? huffmanDecode(raw)
      : Buffer.from(raw.buffer, raw.byteOffset, raw.length).toString("latin1");
  }
}

/** Decoder for one HTTP/2 connection's header blocks (it keeps the dynamic table between blocks). */
export class HpackDecoder {
  readonly #maxTableSize: number;
  readonly #maxListBytes: number;
  /** Newest entry first. */
  #table: Array<readonly [string, string]> = [];
  #size = 0;
  #capacity: number;

  /**
   * @param maxTableSize the SETTINGS_HEADER_TABLE_SIZE we advertised (default 4096).
   * @param maxHeaderListBytes largest decoded header list (name + value + 32 per field).
   */
  constructor(maxTableSize = 4096, maxHeaderListBytes = 65_536) {
    this.#maxTableSize = maxTableSize;
    this.#capacity = maxTableSize;
    this.#maxListBytes = maxHeaderListBytes;
  }

  /**
   * Decodes one complete header block into [name, value] pairs in order.
   * @throws {HpackError}
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

function pushInteger(out: number[], value: number, prefixBits: number, flags: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let v = value - max;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  out.push(v);
}

function pushString(out: number[], s: string): void {
  pushInteger(out, s.length, 7, 0);
  for (let i = 0; i < s.length; i++) out.push(s.charCodeAt(i) & 0xff);
}

/**
 * Encodes request headers as literals without indexing (the name from the static table when it
 * holds it), without Huffman. Names must be lower-case.
 */
export function encodeHeaders(headers: ReadonlyArray<readonly [string, string]>): Uint8Array {
  const out: number[] = [];
  for (const [name, value] of headers) {
    const index = STATIC_NAME.get(name);
    if (index === undefined) {
      out.push(0);
      pushString(out, name);
    } else {
      pushInteger(out, index, 4, 0);
    }
    pushString(out, value);
  }
  return Uint8Array.from(out);
}
