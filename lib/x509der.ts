// Strict DER reading for the PKCS#10 parser (lib/x509pkcs10.ts): elements (TLVs) with definite,
// minimal lengths and low tag numbers, the check that a whole buffer is one element in
// distinguished encoding, object identifiers and BOOLEANs as Go's encoding/asn1 reads them. It knows
// no ASN.1 module: callers check tags and shapes. Every refusal is a DerError.

/** How deeply constructed elements may nest: bounds the walk over hostile input. */
const MAX_DER_DEPTH = 32;

/**
 * Thrown for bytes that are not DER, or not the element a caller asked for; the message reads
 * `Cannot parse DER: <what>`.
 */
export class DerError extends Error {
  override readonly name = "DerError";
}

/** One DER element (tag, length, value), as offsets into the buffer it was read from. */
export interface Tlv {
  /** The identifier octet. */
  tag: number;
  /** Offset of the identifier octet. */
  start: number;
  /** Offset of the first content octet. */
  contentStart: number;
  /** Offset just past the last content octet. */
  end: number;
}

/** Reads one DER element at `offset`, ending at or before `limit`. */
function readTlv(der: Uint8Array, offset: number, limit: number): Tlv {
  const tag = der[offset];
  const first = der[offset + 1];
  if (tag === undefined || first === undefined || offset + 2 > limit) {
    throw new DerError("Cannot parse DER: truncated element");
  }
  if ((tag & 0x1f) === 0x1f) throw new DerError("Cannot parse DER: high tag numbers are not used");
  // End-of-contents only closes an indefinite length, which DER does not have.
  if (tag === 0) throw new DerError("Cannot parse DER: end-of-contents marker");
  let length = first;
  let contentStart = offset + 2;
  if (first & 0x80) {
    const n = first & 0x7f;
    if (n === 0) throw new DerError("Cannot parse DER: indefinite length");
    if (n > 3) throw new DerError("Cannot parse DER: length too large");
    if (contentStart + n > limit) throw new DerError("Cannot parse DER: truncated length");
    length = 0;
    for (let i = 0; i < n; i++) length = length * 256 + (der[contentStart + i] as number);
    if (der[contentStart] === 0 || length < 0x80) {
      throw new DerError("Cannot parse DER: length not minimally encoded");
    }
    contentStart += n;
  }
  const end = contentStart + length;
  if (end > limit) throw new DerError("Cannot parse DER: element overruns its container");
  return { tag, start: offset, contentStart, end };
}

/**
 * The elements inside a constructed element, each within it.
 * @throws {DerError} when the content is not a run of whole elements
 */
export function children(der: Uint8Array, parent: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = parent.contentStart; at < parent.end; ) {
    const child = readTlv(der, at, parent.end);
    out.push(child);
    at = child.end;
  }
  return out;
}

/**
 * Whether `elements` carry exactly `tags`, in order.
 * @example shaped(children(der, root), [0x30, 0x30, 0x03]) // SEQUENCE, SEQUENCE, BIT STRING
 */
export function shaped(elements: Tlv[], tags: number[]): boolean {
  return elements.length === tags.length && elements.every((e, i) => e.tag === tags[i]);
}

/**
 * Checks that `der` is exactly one element in distinguished encoding (definite minimal lengths,
 * primitive strings), so that this parser and Go's, which issues the certificate, cannot read
 * different things from the same bytes.
 * @returns the root element
 * @throws {DerError} for anything else, trailing data included
 */
export function checkDer(der: Uint8Array): Tlv {
  const root = readTlv(der, 0, der.length);
  if (root.end !== der.length) throw new DerError("Cannot parse DER: trailing data");
  const walk = (tlv: Tlv, depth: number): void => {
    if (!(tlv.tag & 0x20)) return;
    if (depth > MAX_DER_DEPTH) throw new DerError("Cannot parse DER: nesting too deep");
    const universal = (tlv.tag & 0xc0) === 0;
    if (universal && tlv.tag !== 0x30 && tlv.tag !== 0x31) {
      throw new DerError("Cannot parse DER: constructed string encoding");
    }
    for (const c of children(der, tlv)) walk(c, depth + 1);
  };
  walk(root, 0);
  return root;
}

/** The content octets of `t`. */
export function contentOf(der: Uint8Array, t: Tlv): Uint8Array {
  return der.subarray(t.contentStart, t.end);
}

/**
 * Decodes an OBJECT IDENTIFIER as dotted text. Refused, as Go refuses them: an empty one, a
 * sub-identifier that is not minimally encoded or that does not end, and (beyond Go's 31 bits,
 * short of losing precision) an arc over 2^53.
 * @throws {DerError} when `t` is no well-formed OBJECT IDENTIFIER
 * @example oidOf(der, t) // "2.5.29.17"
 */
export function oidOf(der: Uint8Array, t: Tlv): string {
  if (t.tag !== 0x06) throw new DerError("Cannot parse DER: expected an object identifier");
  const arcs: number[] = [];
  let value = 0;
  let fresh = true;
  for (const b of contentOf(der, t)) {
    if (fresh && b === 0x80) throw new DerError("Cannot parse DER: object identifier not minimally encoded");
    if (value > (Number.MAX_SAFE_INTEGER - 0x7f) / 0x80) {
      throw new DerError("Cannot parse DER: object identifier arc too large");
    }
    value = value * 0x80 + (b & 0x7f);
    fresh = !(b & 0x80);
    if (fresh) {
      arcs.push(value);
      value = 0;
    }
  }
  const [first, ...rest] = arcs;
  if (first === undefined || !fresh) throw new DerError("Cannot parse DER: truncated object identifier");
  const top = first < 40 ? 0 : first < 80 ? 1 : 2;
  return [top, first - 40 * top, ...rest].join(".");
}

/** A BOOLEAN's content as DER (and Go) have it: one octet, 0x00 or 0xFF. */
export function isDerBoolean(content: Uint8Array): boolean {
  return content.length === 1 && (content[0] === 0x00 || content[0] === 0xff);
}

/**
 * Whether a BIT STRING's content holds whole octets: it is not empty and its first octet, the
 * count of unused bits in the last one, is 0. Keys and signatures are whole octets.
 */
export function hasWholeOctets(der: Uint8Array, bits: Tlv): boolean {
  return bits.end !== bits.contentStart && der[bits.contentStart] === 0;
}
