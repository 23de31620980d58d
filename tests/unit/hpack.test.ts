// HPACK (lib/hpack.ts) against RFC 7541 Appendix C's examples, its error rules, and a round trip of
// the encoder. grpc-go's and grpc-js' own encoders are exercised end to end by the transport suites
// (tests/e2e/talos-sim.test.ts against grpc-go, tests/e2e/talos-grpc.test.ts against grpc-js and a
// node:http2 server).

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { encodeHeaders, HpackDecoder, HpackError, huffmanDecode } from "../../lib/hpack.ts";

const hex = (h: string) =>
  Uint8Array.from((h.replace(/\s+/g, "").match(/../g) ?? []).map((x) => Number.parseInt(x, 16)));

describe("HpackDecoder: RFC 7541 Appendix C", () => {
  test("C.2.1 a literal with indexing enters the dynamic table", () => {
    const d = new HpackDecoder();
    expect(d.decode(hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"))).toEqual([
      ["custom-key", "custom-header"],
    ]);
    // Index 62 is the first dynamic entry.
    expect(d.decode(hex("be"))).toEqual([["custom-key", "custom-header"]]);
  });

  test("C.2.2 and C.2.3 literals without indexing and never indexed leave the table empty", () => {
    const d = new HpackDecoder();
    expect(d.decode(hex("040c 2f73 616d 706c 652f 7061 7468"))).toEqual([[":path", "/sample/path"]]);
    expect(d.decode(hex("1008 7061 7373 776f 7264 0673 6563 7265 74"))).toEqual([["password", "secret"]]);
    expect(() => d.decode(hex("be"))).toThrow(HpackError);
  });

  test("C.3 requests without Huffman, three blocks on one decoder", () => {
    const d = new HpackDecoder();
    const first: Array<[string, string]> = [
      [":method", "GET"],
      [":scheme", "http"],
      [":path", "/"],
      [":authority", "www.example.com"],
    ];
    expect(d.decode(hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"))).toEqual(first);
    expect(d.decode(hex("8286 84be 5808 6e6f 2d63 6163 6865"))).toEqual([
      ...first,
      ["cache-control", "no-cache"],
    ]);
    expect(d.decode(hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"))).toEqual(
      [
        [":method", "GET"],
        [":scheme", "https"],
        [":path", "/index.html"],
        [":authority", "www.example.com"],
        ["custom-key", "custom-value"],
      ],
    );
  });

  test("C.4 the same requests with Huffman", () => {
    const d = new HpackDecoder();
    expect(d.decode(hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"))).toContainEqual([
      ":authority",
      "www.example.com",
    ]);
    expect(d.decode(hex("8286 84be 5886 a8eb 1064 9cbf"))).toContainEqual(["cache-control", "no-cache"]);
    expect(d.decode(hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"))).toEqual([
      [":method", "GET"],
      [":scheme", "https"],
      [":path", "/index.html"],
      [":authority", "www.example.com"],
      ["custom-key", "custom-value"],
    ]);
  });

  test("C.6 responses with Huffman and eviction from a 256-byte table", () => {
    // The encoder of C.6 has a 256-byte table: its first block says so with a size update (3fe101).
    const d = new HpackDecoder();
    const r1 = d.decode(
      hex(
        "3fe1 01 4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
      ),
    );
    expect(r1).toEqual([
      [":status", "302"],
      ["cache-control", "private"],
      ["date", "Mon, 21 Oct 2013 20:13:21 GMT"],
      ["location", "https://www.example.com"],
    ]);
    // ":status 307" evicts ":status 302"; the rest is indexed.
    expect(d.decode(hex("4883 640e ff c1 c0 bf"))).toEqual([
      [":status", "307"],
      ["cache-control", "private"],
      ["date", "Mon, 21 Oct 2013 20:13:21 GMT"],
      ["location", "https://www.example.com"],
    ]);
    const r3 = d.decode(
      hex(
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
      ),
    );
    expect(r3).toEqual([
      [":status", "200"],
      ["cache-control", "private"],
      ["date", "Mon, 21 Oct 2013 20:13:22 GMT"],
      ["location", "https://www.example.com"],
      ["content-encoding", "gzip"],
      ["set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"],
    ]);
  });
});

describe("HpackDecoder: malformed blocks are HpackError", () => {
  test.each([
    ["index 0", "80"],
    ["an index past the tables", "bf"],
    ["a truncated integer", "ff"],
    ["an integer that overflows", "ffffffffffff7f"],
    ["a truncated string", "400a6375"],
    ["a size update over the advertised maximum", "3fe21f"],
    ["a size update after a field", "823f01"],
    ["Huffman padding of 8 bits", "0085f1e3c2e5ff"],
    ["Huffman padding that is not all ones", "0081fe"],
  ])("%s", (_name, block) => {
    expect(() => new HpackDecoder().decode(hex(block))).toThrow(HpackError);
  });

  test("a header list over the limit", () => {
    const block = encodeHeaders([["x-big", "a".repeat(200)]]);
    expect(() => new HpackDecoder(4096, 100).decode(block)).toThrow(/header list over 100 bytes/);
    expect(new HpackDecoder(4096, 300).decode(block)).toHaveLength(1);
  });

  test("Huffman with EOS inside is refused", () => {
    // 30 one bits (EOS), then two bits of padding.
    expect(() => huffmanDecode(hex("ffffffff"))).toThrow(/EOS/);
  });
});

describe("encodeHeaders", () => {
  test("a gRPC request decodes back to itself, static names indexed", () => {
    const req: Array<[string, string]> = [
      [":method", "POST"],
      [":path", "/cosi.resource.State/Watch"],
      [":scheme", "https"],
      [":authority", "10.0.0.1:50000"],
      ["grpc-timeout", "10000m"],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
      ["node", "10.0.0.5"],
    ];
    const block = encodeHeaders(req);
    expect(block[0]).toBe(0x02); // ":method" is static name 2, literal without indexing
    expect(new HpackDecoder().decode(block)).toEqual(req);
  });

  test("any latin1 header list round-trips, long values included", () => {
    const latin1 = fc.string({ unit: fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c)) });
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/), latin1), { maxLength: 8 }),
        (h) => {
          expect(new HpackDecoder().decode(encodeHeaders(h))).toEqual(h);
        },
      ),
    );
    const long: Array<[string, string]> = [["x", "v".repeat(100_000)]];
    expect(new HpackDecoder(4096, 1 << 20).decode(encodeHeaders(long))).toEqual(long);
  });
});
