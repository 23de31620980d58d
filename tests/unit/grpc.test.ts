// lib/grpc.ts pure parts: message framing and the frame decoder (split and merged chunks, the
// receive limit, compressed frames), statuses from headers, trailers, HTTP statuses and
// RST_STREAM codes, grpc-timeout encoding, grpc-message percent-decoding, and the error contract
// lib/talos.ts's statusError() reads.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  decodeGrpcMessage,
  encodeGrpcTimeout,
  errorFromResponseHeaders,
  errorFromRstCode,
  frameMessage,
  GrpcError,
  type Headers,
  MessageDecoder,
  statusFromHeaders,
  statusFromHttp,
} from "../../lib/grpc.ts";
import { statusError } from "../../lib/talos.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";

const bytes = (...b: number[]) => Uint8Array.from(b);
const headers = (h: Readonly<Record<string, string | number>>) => h as Headers;
const hex = (ms: Uint8Array[]) => ms.map((m) => Buffer.from(m).toString("hex"));

function thrown(fn: () => unknown): GrpcError {
  try {
    fn();
  } catch (err) {
    if (err instanceof GrpcError) return err;
    throw err;
  }
  throw new Error("did not throw");
}

describe("frameMessage()", () => {
  test.each([
    ["empty", bytes(), "0000000000"],
    ["three bytes", bytes(1, 2, 3), "0000000003010203"],
  ])("%s: flag 0, big-endian length, the message", (_name, msg, want) => {
    expect(Buffer.from(frameMessage(msg)).toString("hex")).toBe(want);
  });

  test("a length above 16 bits is big-endian over four bytes", () => {
    const framed = frameMessage(new Uint8Array(0x012345));
    expect(Buffer.from(framed.subarray(0, 5)).toString("hex")).toBe("0000012345");
    expect(framed.length).toBe(5 + 0x012345);
  });
});

describe("MessageDecoder.push()", () => {
  const frames = (...ms: Uint8Array[]) => Buffer.concat(ms.map(frameMessage));

  test.each([
    ["one message in one chunk", [frames(bytes(1, 2, 3))], ["010203"]],
    ["several messages in one chunk", [frames(bytes(1), bytes(), bytes(2, 3))], ["01", "", "0203"]],
    ["a header split across chunks", [bytes(0, 0), bytes(0, 0, 2, 9), bytes(8)], ["0908"]],
    ["a body split across chunks", [bytes(0, 0, 0, 0, 3, 7), bytes(7), bytes(7)], ["070707"]],
    [
      "a chunk ending one message and starting the next",
      [bytes(0, 0, 0, 0, 2, 1), bytes(2, 0, 0), bytes(0, 0, 1, 5)],
      ["0102", "05"],
    ],
    ["an empty message split after its header byte", [bytes(0), bytes(0, 0, 0, 0)], [""]],
  ])("%s", (_name, chunks, want) => {
    const d = new MessageDecoder(1 << 20);
    const got: Uint8Array[] = [];
    for (const c of chunks) got.push(...d.push(c));
    expect(hex(got)).toEqual(want);
    expect(d.idle).toBe(true);
  });

  test("idle is false while a message is half-received", () => {
    const d = new MessageDecoder(1 << 20);
    expect(d.push(bytes(0, 0, 0, 0, 4, 1))).toEqual([]);
    expect(d.idle).toBe(false);
    expect(hex(d.push(bytes(2, 3, 4)))).toEqual(["01020304"]);
    expect(d.idle).toBe(true);
  });

  test("any chunking of any messages yields the messages in order", () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 40 }), { maxLength: 12 }),
        fc.array(fc.integer({ min: 1, max: 30 }), { minLength: 1, maxLength: 20 }),
        (messages, sizes) => {
          const wire = frames(...messages);
          const d = new MessageDecoder(1 << 20);
          const got: Uint8Array[] = [];
          for (let off = 0, i = 0; off < wire.length; i++) {
            const n = sizes[i % sizes.length] as number;
            got.push(...d.push(wire.subarray(off, off + n)));
            off += n;
          }
          expect(hex(got)).toEqual(hex(messages));
          expect(d.idle).toBe(true);
        },
      ),
    );
  });

  test("a message in one-byte chunks is one buffer of its own length (no view per chunk is kept)", () => {
    const message = Uint8Array.from({ length: 10_000 }, (_, i) => (i * 7) & 0xff);
    const wire = frames(message);
    const d = new MessageDecoder(1 << 20);
    const got: Uint8Array[] = [];
    for (let i = 0; i < wire.length; i++) got.push(...d.push(wire, i, i + 1));
    expect(got.length).toBe(1);
    expect(got[0]?.buffer.byteLength).toBe(10_000);
    expect(Buffer.from(got[0] as Uint8Array).equals(Buffer.from(message))).toBe(true);
  });

  test("while a message arrives its buffer doubles from 4 KiB: never more than twice what arrived", () => {
    const d = new MessageDecoder(32 << 20);
    expect(d.push(bytes(0, 0, 0x10, 0, 0))).toEqual([]); // announces 1 MiB
    // Only the announced length is known: nothing is allocated for it before its bytes come.
    const wire = new Uint8Array(5_000);
    expect(d.push(wire)).toEqual([]);
    const rest = new Uint8Array((1 << 20) - 5_000);
    const [m] = d.push(rest);
    expect(m?.length).toBe(1 << 20);
    expect(m?.buffer.byteLength).toBe(1 << 20);
  });

  test("a small message inside a large chunk is a copy; one filling half of it or more is a view", () => {
    const chunk = Buffer.concat([frames(bytes(1, 2, 3)), frames(new Uint8Array(4_000))]);
    const [small, large] = new MessageDecoder(1 << 20).push(chunk);
    expect(small?.buffer).not.toBe(chunk.buffer);
    expect(small?.buffer.byteLength).toBe(3);
    expect(large?.buffer).toBe(chunk.buffer);
  });

  test("push(chunk, start, end) reads only that range", () => {
    const wire = Buffer.concat([bytes(9, 9), frames(bytes(5, 6)), bytes(9)]);
    expect(hex(new MessageDecoder(1 << 20).push(wire, 2, wire.length - 1))).toEqual(["0506"]);
  });

  test.each([
    ["one byte over, whole frame", 8, frames(new Uint8Array(9))],
    ["one byte over, header alone", 8, bytes(0, 0, 0, 0, 9)],
    ["a header claiming 4 GiB", 32 << 20, bytes(0, 0xff, 0xff, 0xff, 0xff)],
  ])("a message over the limit is RESOURCE_EXHAUSTED (%s)", (_name, max, chunk) => {
    const e = thrown(() => new MessageDecoder(max).push(chunk));
    expect(e.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(e.details).toContain(`vs. ${max}`);
  });

  test("a message at the limit passes", () => {
    expect(new MessageDecoder(8).push(frames(new Uint8Array(8)))[0]?.length).toBe(8);
  });

  test.each([
    ["compressed", 1, "compressed"],
    ["an unknown flag", 2, "invalid compressed flag 2"],
  ])("a frame flagged %s is INTERNAL", (_name, flag, want) => {
    const e = thrown(() => new MessageDecoder(1 << 20).push(bytes(flag, 0, 0, 0, 1, 7)));
    expect(e.code).toBe(GrpcStatus.INTERNAL);
    expect(e.details).toContain(want);
  });
});

describe("encodeGrpcTimeout()", () => {
  test.each([
    [1, "1m"],
    [0.2, "1m"],
    [10_000, "10000m"],
    [99_999_999, "99999999m"],
    [100_000_000, "100000S"],
    [99_999_999_001, "1666667M"],
    [6e12, "1666667H"],
    [1e20, "99999999H"],
  ])("%d ms → %s", (ms, want) => {
    expect(encodeGrpcTimeout(ms)).toBe(want);
  });

  test("the value never exceeds 8 digits and never undershoots the deadline", () => {
    const unitMs = { m: 1, S: 1_000, M: 60_000, H: 3_600_000 } as Record<string, number>;
    fc.assert(
      fc.property(fc.double({ min: 0.001, max: 1e14, noNaN: true }), (ms) => {
        const v = encodeGrpcTimeout(ms);
        const m = v.match(/^(\d{1,8})([mSMH])$/);
        expect(m).not.toBeNull();
        expect(Number(m?.[1]) * (unitMs[m?.[2] ?? ""] as number)).toBeGreaterThanOrEqual(ms);
      }),
    );
  });

  test.each([0, -5, Number.NaN, Number.POSITIVE_INFINITY])("%d is a RangeError", (ms) => {
    expect(() => encodeGrpcTimeout(ms)).toThrow(RangeError);
  });
});

describe("decodeGrpcMessage()", () => {
  test.each([
    ["", ""],
    ["plain text", "plain text"],
    ["caf%C3%A9%20down", "café down"],
    ["lower-case %c3%a9", "lower-case é"],
    ["dial tcp 10.0.0.5:50000: connect: %22refused%22", 'dial tcp 10.0.0.5:50000: connect: "refused"'],
    ["100%", "100%"],
    ["%zz and %4", "%zz and %4"],
    ["half a character %C3 here", "half a character \uFFFD here"],
    ["%25", "%"],
  ])("%p → %p", (raw, want) => {
    expect(decodeGrpcMessage(raw)).toBe(want);
  });

  test("percent-encoding any text and decoding it gives the text back", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (s) => {
        expect(decodeGrpcMessage(encodeURIComponent(s))).toBe(s);
      }),
    );
  });
});

describe("statusFromHeaders()", () => {
  test.each([
    ["no grpc-status", { ":status": 200 }, undefined],
    ["OK", { "grpc-status": "0" }, null],
    ["OK with a message", { "grpc-status": "0", "grpc-message": "OK" }, null],
    [
      "Unavailable, message percent-decoded",
      { "grpc-status": "14", "grpc-message": "node%2010.0.0.5%20is%20down" },
      [GrpcStatus.UNAVAILABLE, "node 10.0.0.5 is down"],
    ],
    ["NotFound without a message", { "grpc-status": "5" }, [GrpcStatus.NOT_FOUND, ""]],
    ["a code beyond the known ones", { "grpc-status": "42", "grpc-message": "x" }, [42, "x"]],
    [
      "malformed",
      { "grpc-status": "fourteen", "grpc-message": "y" },
      [GrpcStatus.UNKNOWN, 'Invalid grpc-status "fourteen": y'],
    ],
  ] as const)("%s", (_name, fields, want) => {
    const got = statusFromHeaders(headers(fields));
    if (want === undefined || want === null) {
      expect(got).toBe(want);
      return;
    }
    expect(got).toBeInstanceOf(GrpcError);
    expect([got?.code, got?.details]).toEqual([...want]);
  });
});

describe("errorFromResponseHeaders()", () => {
  test.each([
    ["gRPC", { ":status": 200, "content-type": "application/grpc" }, undefined],
    ["gRPC with a subtype", { ":status": 200, "content-type": "application/grpc+proto" }, undefined],
    ["a 503 from a proxy", { ":status": 503, "content-type": "text/plain" }, GrpcStatus.UNAVAILABLE],
    ["a 404", { ":status": 404 }, GrpcStatus.UNIMPLEMENTED],
    ["HTML with 200", { ":status": 200, "content-type": "text/html" }, GrpcStatus.UNKNOWN],
    ["200 without content-type", { ":status": 200 }, GrpcStatus.UNKNOWN],
  ] as const)("%s", (_name, fields, want) => {
    expect(errorFromResponseHeaders(headers(fields))?.code).toBe(want);
  });

  test("the HTTP status is in the details", () => {
    expect(errorFromResponseHeaders(headers({ ":status": 502 }))?.details).toBe(
      "Received HTTP status code 502",
    );
  });
});

describe("statusFromHttp()", () => {
  test.each([
    [400, GrpcStatus.INTERNAL],
    [401, GrpcStatus.UNAUTHENTICATED],
    [403, GrpcStatus.PERMISSION_DENIED],
    [404, GrpcStatus.UNIMPLEMENTED],
    [429, GrpcStatus.UNAVAILABLE],
    [431, GrpcStatus.INTERNAL],
    [502, GrpcStatus.UNAVAILABLE],
    [503, GrpcStatus.UNAVAILABLE],
    [504, GrpcStatus.UNAVAILABLE],
    [200, GrpcStatus.UNKNOWN],
    [500, GrpcStatus.UNKNOWN],
    [418, GrpcStatus.UNKNOWN],
  ])("HTTP %d → gRPC %d", (http, want) => {
    expect(statusFromHttp(http)).toBe(want);
  });
});

describe("errorFromRstCode()", () => {
  test.each([
    [0, GrpcStatus.INTERNAL, "without a gRPC status"],
    [1, GrpcStatus.INTERNAL, "code 1"],
    [2, GrpcStatus.INTERNAL, "code 2"],
    [7, GrpcStatus.UNAVAILABLE, "refused"],
    [8, GrpcStatus.CANCELLED, "cancelled by server"],
    [11, GrpcStatus.RESOURCE_EXHAUSTED, "ENHANCE_YOUR_CALM"],
    [12, GrpcStatus.PERMISSION_DENIED, "not secure"],
  ])("RST_STREAM %d → gRPC %d", (rst, want, text) => {
    const e = errorFromRstCode(rst);
    expect(e.code).toBe(want);
    expect(e.details).toContain(text);
  });
});

describe("GrpcError", () => {
  test("message names the code; code and details are what statusError() reads", () => {
    const e = new GrpcError(GrpcStatus.UNAVAILABLE, "connection refused");
    expect(e.message).toBe("14 UNAVAILABLE: connection refused");
    const t = statusError("get X on node n", e);
    expect([t.code, t.retryable, t.grpcCode]).toEqual(["unavailable", true, GrpcStatus.UNAVAILABLE]);
    expect(t.message).toBe("Cannot get X on node n: connection refused");
    expect(t.cause).toBe(e);
  });

  test.each([
    [GrpcStatus.DEADLINE_EXCEEDED, "deadline", true],
    [GrpcStatus.RESOURCE_EXHAUSTED, "internal", false],
    [GrpcStatus.CANCELLED, "unavailable", true],
  ])("code %d maps to %s through statusError()", (code, want, retryable) => {
    const t = statusError("x", new GrpcError(code, "d"));
    expect([t.code, t.retryable]).toEqual([want as typeof t.code, retryable]);
  });
});
