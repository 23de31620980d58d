// A header block (RFC 9113 §4.3) as HEADERS and CONTINUATION frames carry it to lib/h2connection.ts:
// its fragments collected within lib/h2limits.ts' bounds (bytes, CONTINUATION frames), and its
// decoded fields as the headers a stream reports. Faults are returned, for the connection to end
// itself with.

import { dict } from "./dict.ts";
import { H2Code, H2Flag } from "./h2framer.ts";
import { MAX_CONTINUATIONS } from "./h2limits.ts";

/** The largest header block (all fragments) and decoded header list we accept. */
export const MAX_HEADER_BLOCK = 64 << 10;

/** Response headers or trailers: lower-case names; repeated fields joined with ", ". */
export type H2Headers = Record<string, string>;

/** A header block being collected from HEADERS and CONTINUATION frames. */
export interface H2HeaderBlock {
  streamId: number;
  /** The fragments so far, each a copy (the frames' buffers are the reader's). */
  parts: Buffer[];
  bytes: number;
  /** CONTINUATION frames so far. */
  frames: number;
  /** The HEADERS frame ended the stream. */
  endStream: boolean;
}

/** A connection error a frame is (RFC 9113 §5.4.1): its code, and what the server sent. */
export interface H2Fault {
  code: number;
  why: string;
}

/** The block a HEADERS frame on `streamId` (not 0) with `flags` and `payload` starts, or its fault. */
export function openHeaderBlock(flags: number, streamId: number, payload: Buffer): H2HeaderBlock | H2Fault {
  let fragment = unpad(flags, payload);
  if (fragment === undefined) return { code: H2Code.PROTOCOL_ERROR, why: "invalid HEADERS padding" };
  if (flags & H2Flag.PRIORITY) {
    if (fragment.length < 5) return { code: H2Code.FRAME_SIZE_ERROR, why: "short HEADERS priority" };
    fragment = fragment.subarray(5);
  }
  return {
    streamId,
    parts: fragment.length === 0 ? [] : [Buffer.from(fragment)],
    bytes: fragment.length,
    frames: 0,
    endStream: (flags & H2Flag.END_STREAM) !== 0,
  };
}

/** Adds a CONTINUATION frame's `payload` to `block`; the fault when the block grows beyond its bounds. */
export function continueHeaderBlock(block: H2HeaderBlock, payload: Buffer): H2Fault | undefined {
  block.bytes += payload.length;
  if (block.bytes > MAX_HEADER_BLOCK)
    return { code: H2Code.ENHANCE_YOUR_CALM, why: `a header block over ${MAX_HEADER_BLOCK} bytes` };
  // Empty fragments cost no bytes but a frame each: the 2024 CONTINUATION flood.
  if (++block.frames > MAX_CONTINUATIONS)
    return {
      code: H2Code.ENHANCE_YOUR_CALM,
      why: `a header block of more than ${MAX_CONTINUATIONS} CONTINUATION frames`,
    };
  if (payload.length > 0) block.parts.push(Buffer.from(payload));
  return undefined;
}

/** The whole block's bytes, for the HPACK decoder. */
export function headerBlockBytes(block: H2HeaderBlock): Buffer {
  return block.parts.length === 1 ? (block.parts[0] as Buffer) : Buffer.concat(block.parts, block.bytes);
}

/** Decoded fields as headers: repeated names joined with ", ", kept without a prototype (lib/dict.ts). */
export function headersOf(fields: ReadonlyArray<readonly [string, string]>): H2Headers {
  const headers: H2Headers = dict<string>();
  for (const [name, value] of fields) headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  return headers;
}

/** The payload without its padding (PADDED flag), or undefined when the padding is invalid. */
function unpad(flags: number, payload: Buffer): Buffer | undefined {
  if (!(flags & H2Flag.PADDED)) return payload;
  if (payload.length < 1) return undefined;
  const pad = payload[0] as number;
  if (pad >= payload.length) return undefined;
  return payload.subarray(1, payload.length - pad);
}
