// lib/h2connection.ts (with lib/h2flow.ts, lib/h2framer.ts, lib/h2headerblock.ts): the HTTP/2
// connection without a socket. The test plays its shell: it feeds frames built by hand (RFC 9113
// frame layouts by tests/support/h2rawpeer.ts' frame(), RFC 7541 literal header fields here),
// reads what the connection queued as frames, and stands in for the host (the microtasks of
// stream closes run when the test says so).

import { describe, expect, test } from "bun:test";
import { H2Connection } from "../../lib/h2connection.ts";
import type { H2Headers } from "../../lib/h2headerblock.ts";
import {
  GLITCH_BURST,
  MAX_CONTINUATIONS,
  MAX_SETTINGS_ENTRIES,
  MAX_UNSENT_REPLIES,
} from "../../lib/h2limits.ts";
import type { H2Stream, H2StreamHandler } from "../../lib/h2stream.ts";
import { frame } from "../support/h2rawpeer.ts";

// RFC 9113 values, written here rather than taken from the code under test.
const DATA = 0x0;
const HEADERS = 0x1;
const PRIORITY = 0x2;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;
const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const NO_ERROR = 0x0;
const PROTOCOL_ERROR = 0x1;
const FLOW_CONTROL_ERROR = 0x3;
const SETTINGS_TIMEOUT = 0x4;
const FRAME_SIZE_ERROR = 0x6;
const REFUSED_STREAM = 0x7;
const CANCEL = 0x8;
const ENHANCE_YOUR_CALM = 0xb;
const MAX_CONCURRENT_STREAMS = 0x3;
const INITIAL_WINDOW_SIZE = 0x4;
const PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/** What our SETTINGS ask for: 1 MiB per stream, 16 MiB for the connection. */
const STREAM_WINDOW = 1 << 20;
const CONNECTION_WINDOW = 16 << 20;
const FRAME = 16_384;

interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

function framesOf(bytes: Buffer): Frame[] {
  const out: Frame[] = [];
  for (let off = 0; off < bytes.length; ) {
    const length = bytes.readUIntBE(off, 3);
    out.push({
      type: bytes[off + 3] as number,
      flags: bytes[off + 4] as number,
      streamId: bytes.readUInt32BE(off + 5),
      payload: bytes.subarray(off + 9, off + 9 + length),
    });
    off += 9 + length;
  }
  return out;
}

function u32(...values: number[]): Buffer {
  const b = Buffer.alloc(4 * values.length);
  for (const [i, v] of values.entries()) b.writeUInt32BE(v, 4 * i);
  return b;
}

/** SETTINGS entries: [id, value] pairs. */
function settings(...entries: Array<[number, number]>): Buffer {
  const b = Buffer.alloc(6 * entries.length);
  for (const [i, [id, value]] of entries.entries()) {
    b.writeUInt16BE(id, 6 * i);
    b.writeUInt32BE(value, 6 * i + 2);
  }
  return b;
}

/** An HPACK literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2). */
function literal(name: string, value: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x00, name.length]),
    Buffer.from(name, "latin1"),
    Buffer.from([value.length]),
    Buffer.from(value, "latin1"),
  ]);
}

/** `:status: 200`, entry 8 of HPACK's static table (RFC 7541 Appendix A). */
const STATUS_200 = Buffer.from([0x88]);
const RESPONSE = Buffer.concat([STATUS_200, literal("content-type", "application/grpc")]);

/** What a call's handler was told. */
class Recorder implements H2StreamHandler {
  headers: Array<[H2Headers, boolean]> = [];
  data: Array<{ buf: Uint8Array; bytes: Buffer }> = [];
  closes: Array<[number | undefined, string | undefined]> = [];
  onHeaders(headers: H2Headers, trailers: boolean): void {
    this.headers.push([{ ...headers }, trailers]);
  }
  onData(buf: Uint8Array, start: number, end: number): void {
    this.data.push({ buf, bytes: Buffer.from(buf.subarray(start, end)) });
  }
  onClose(code: number | undefined, reason?: string): void {
    this.closes.push([code, reason]);
  }
  get received(): number {
    return this.data.reduce((n, d) => n + d.bytes.length, 0);
  }
}

/** The shell's part, played by the test. */
class Shell {
  readonly conn: H2Connection<Shell>;
  readonly later: Array<() => void> = [];
  readonly failures: Error[] = [];
  /** The last frame written as the connection failed: the GOAWAY saying why. */
  goaway: Frame | undefined;
  readonly goaways: number[] = [];
  ended = 0;
  wakes = 0;
  now = 0;

  constructor() {
    this.conn = new H2Connection(
      {
        wake: (s) => s.wakes++,
        later: (fn) => this.later.push(fn),
        failed: (s, err) => {
          s.failures.push(err);
          s.goaway = s.takeUnwritten().at(-1);
          s.conn.teardown();
        },
        ended: (s) => s.ended++,
        goaway: (s, code) => s.goaways.push(code),
      },
      this,
      "apid.test:50000",
    );
  }

  /** The connection is up: returns what it queued after the preface. */
  open(): Frame[] {
    this.conn.open();
    const bytes = this.conn.takeOutput() as Buffer;
    this.conn.written();
    expect(bytes.subarray(0, 24).toString("latin1")).toBe(PREFACE);
    return framesOf(bytes.subarray(24));
  }

  feed(...frames: Buffer[]): Buffer {
    const chunk = Buffer.concat(frames);
    this.conn.receive(chunk, this.now);
    return chunk;
  }

  /** What the connection queued since the last take, written out at once. */
  take(): Frame[] {
    const frames = this.takeUnwritten();
    if (frames.length > 0) this.conn.written();
    return frames;
  }

  /** What the connection queued, handed to a socket that has not written it yet. */
  takeUnwritten(): Frame[] {
    const bytes = this.conn.takeOutput();
    return bytes === undefined ? [] : framesOf(bytes);
  }

  /** Runs the stream closes (and anything else) the connection deferred. */
  runLater(): void {
    while (this.later.length > 0) this.later.shift()?.();
  }

  request(handler: H2StreamHandler, body: Uint8Array = Buffer.from("req"), startedAt?: number): H2Stream {
    return this.conn.request(
      [
        [":method", "POST"],
        [":path", "/machine.MachineService/Version"],
        ["content-type", "application/grpc"],
      ],
      body,
      handler,
      startedAt,
    );
  }
}

/** A connection whose SETTINGS are exchanged (the server's have `entries`). */
function ready(...entries: Array<[number, number]>): Shell {
  const s = new Shell();
  s.open();
  s.feed(frame(SETTINGS, 0, 0, settings(...entries)), frame(SETTINGS, ACK, 0));
  s.take();
  return s;
}

/** The error code of the GOAWAY written as `s` failed (-1: none was). */
const goawayCode = (s: Shell) => (s.goaway?.type === GOAWAY ? s.goaway.payload.readUInt32BE(4) : -1);

const kinds = (frames: Frame[]) => frames.map((f) => [f.type, f.flags, f.streamId]);

describe("H2Connection: SETTINGS", () => {
  test("opens with the preface, our SETTINGS and the connection window; requests wait for the server's SETTINGS", () => {
    const s = new Shell();
    const first = s.open();
    expect(kinds(first)).toStrictEqual([
      [SETTINGS, 0, 0],
      [WINDOW_UPDATE, 0, 0],
    ]);
    expect(first[0]?.payload.readUInt16BE(0)).toBe(0x2); // ENABLE_PUSH
    expect(first[0]?.payload.readUInt32BE(2)).toBe(0);
    expect(first[0]?.payload.readUInt16BE(6)).toBe(INITIAL_WINDOW_SIZE);
    expect(first[0]?.payload.readUInt32BE(8)).toBe(STREAM_WINDOW);
    expect(first[1]?.payload.readUInt32BE(0)).toBe(CONNECTION_WINDOW - 65_535);
    s.request(new Recorder());
    expect(s.take()).toStrictEqual([]);
    s.feed(frame(SETTINGS, 0, 0));
    expect(kinds(s.take())).toStrictEqual([
      [SETTINGS, ACK, 0],
      [HEADERS, END_HEADERS, 1],
      [DATA, END_STREAM, 1],
    ]);
  });

  test("acknowledges the server's SETTINGS; settled once it acknowledged ours", () => {
    const s = new Shell();
    s.open();
    s.feed(frame(SETTINGS, 0, 0, settings([MAX_CONCURRENT_STREAMS, 100])));
    const ack = s.take();
    expect(kinds(ack)).toStrictEqual([[SETTINGS, ACK, 0]]);
    expect(ack[0]?.payload.length).toBe(0);
    expect(s.conn.settled).toBe(false);
    s.feed(frame(SETTINGS, ACK, 0));
    expect(s.conn.settled).toBe(true);
    expect(s.take()).toStrictEqual([]);
  });

  test("MAX_CONCURRENT_STREAMS: later requests wait for a stream to close", () => {
    const s = ready([MAX_CONCURRENT_STREAMS, 1]);
    const a = new Recorder();
    s.request(a);
    s.request(new Recorder());
    expect(kinds(s.take()).filter((k) => k[0] === HEADERS)).toStrictEqual([[HEADERS, END_HEADERS, 1]]);
    expect(s.conn.streamCount).toBe(2);
    s.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, RESPONSE));
    expect(kinds(s.take()).filter((k) => k[0] === HEADERS)).toStrictEqual([[HEADERS, END_HEADERS, 3]]);
    s.runLater();
    expect(a.closes).toStrictEqual([[NO_ERROR, undefined]]);
  });

  test("a first frame other than the server's SETTINGS is a connection error", () => {
    const s = new Shell();
    s.open();
    s.feed(frame(PING, 0, 0, Buffer.alloc(8)));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      "HTTP/2 connection error PROTOCOL_ERROR: the server's first frame is not its SETTINGS",
    ]);
    expect(kinds(s.goaway ? [s.goaway] : [])).toStrictEqual([[GOAWAY, 0, 0]]);
    expect(goawayCode(s)).toBe(PROTOCOL_ERROR);
    expect(s.conn.destroyed).toBe(true);
  });

  test("settingsTimedOut() names the half that is missing", () => {
    const s = new Shell();
    s.open();
    s.conn.settingsTimedOut(10);
    expect(s.failures[0]?.message).toBe(
      "HTTP/2 connection error SETTINGS_TIMEOUT: the server sent no SETTINGS within 10 ms",
    );
    expect(goawayCode(s)).toBe(SETTINGS_TIMEOUT);
  });
});

describe("H2Connection: PING", () => {
  test("answers the server's PING with an ACK of the same payload", () => {
    const s = ready();
    s.feed(frame(PING, 0, 0, Buffer.from("12345678")));
    const out = s.take();
    expect(kinds(out)).toStrictEqual([[PING, ACK, 0]]);
    expect(out[0]?.payload.toString()).toBe("12345678");
  });

  test("our PING is done by the ACK with its payload, not by another", () => {
    const s = ready();
    const done: Array<Error | undefined> = [];
    s.conn.ping(Buffer.from("ourping!"), (err) => done.push(err));
    expect(kinds(s.take())).toStrictEqual([[PING, 0, 0]]);
    s.feed(frame(PING, ACK, 0, Buffer.from("another!")));
    expect(done).toStrictEqual([]);
    s.feed(frame(PING, ACK, 0, Buffer.from("ourping!")));
    expect(done).toStrictEqual([undefined]);
    expect(s.take()).toStrictEqual([]); // an ACK is not answered
  });

  test("a PING still pending when the connection ends fails", () => {
    const s = ready();
    const done: Array<Error | undefined> = [];
    s.conn.ping(Buffer.from("ourping!"), (err) => done.push(err));
    s.conn.teardown();
    expect(done.map((e) => e?.message)).toStrictEqual(["the HTTP/2 session closed"]);
  });

  test("a PING asked for after the connection ended fails at once and sends nothing", () => {
    const s = ready();
    s.conn.teardown();
    const done: Array<Error | undefined> = [];
    s.conn.ping(Buffer.from("ourping!"), (err) => done.push(err));
    expect(done.map((e) => e?.message)).toStrictEqual(["the HTTP/2 session closed"]);
    expect(s.take()).toStrictEqual([]);
  });
});

describe("H2Connection: HEADERS and CONTINUATION", () => {
  test("a header block split over HEADERS and CONTINUATION, then trailers end the stream", () => {
    const s = ready();
    const r = new Recorder();
    s.request(r);
    const block = Buffer.concat([RESPONSE, literal("x-split", "yes")]);
    s.feed(frame(HEADERS, 0, 1, block.subarray(0, 7)));
    expect(r.headers).toStrictEqual([]);
    s.feed(
      frame(CONTINUATION, 0, 1, block.subarray(7, 20)),
      frame(CONTINUATION, END_HEADERS, 1, block.subarray(20)),
    );
    expect(r.headers).toStrictEqual([
      [{ ":status": "200", "content-type": "application/grpc", "x-split": "yes" }, false],
    ]);
    s.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, literal("grpc-status", "0")));
    expect(r.headers[1]).toStrictEqual([{ "grpc-status": "0" }, true]);
    expect(r.closes).toStrictEqual([]);
    s.runLater();
    expect(r.closes).toStrictEqual([[NO_ERROR, undefined]]);
    expect(s.failures).toStrictEqual([]);
  });

  test("a frame between HEADERS and its CONTINUATION is a connection error", () => {
    const s = ready();
    s.request(new Recorder());
    s.feed(frame(HEADERS, 0, 1, RESPONSE.subarray(0, 3)), frame(DATA, 0, 1, Buffer.from("x")));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      "HTTP/2 connection error PROTOCOL_ERROR: a header block was interrupted",
    ]);
  });

  test(`a header block of more than ${MAX_CONTINUATIONS} CONTINUATION frames ends the connection`, () => {
    const allowed = ready();
    const r = new Recorder();
    allowed.request(r);
    const ok = [frame(HEADERS, 0, 1, RESPONSE)];
    for (let i = 1; i < MAX_CONTINUATIONS; i++) ok.push(frame(CONTINUATION, 0, 1));
    allowed.feed(...ok, frame(CONTINUATION, END_HEADERS, 1));
    expect(allowed.failures).toStrictEqual([]);
    expect(r.headers.length).toBe(1);

    const flood = ready();
    flood.request(new Recorder());
    const frames = [frame(HEADERS, 0, 1, RESPONSE)];
    for (let i = 0; i <= MAX_CONTINUATIONS; i++) frames.push(frame(CONTINUATION, 0, 1));
    flood.feed(...frames);
    expect(flood.failures.map((e) => e.message)).toStrictEqual([
      `HTTP/2 connection error ENHANCE_YOUR_CALM: a header block of more than ${MAX_CONTINUATIONS} CONTINUATION frames`,
    ]);
    expect(goawayCode(flood)).toBe(ENHANCE_YOUR_CALM);
  });
});

describe("H2Connection: flow control", () => {
  /** A stream with its response headers in. */
  function answered(): { s: Shell; r: Recorder; stream: H2Stream } {
    const s = ready();
    const r = new Recorder();
    const stream = s.request(r);
    s.feed(frame(HEADERS, END_HEADERS, 1, RESPONSE));
    s.take();
    return { s, r, stream };
  }
  const data = (n: number, streamId = 1) =>
    Array.from({ length: n }, (_, i) => frame(DATA, 0, streamId, Buffer.alloc(FRAME, i)));
  const updates = (frames: Frame[]) =>
    frames.filter((f) => f.type === WINDOW_UPDATE).map((f) => [f.streamId, f.payload.readUInt32BE(0)]);

  test("half a stream window delivered is returned by WINDOW_UPDATE; DATA comes as views of the chunk read", () => {
    const { s, r } = answered();
    const half = STREAM_WINDOW / 2 / FRAME;
    const chunk = s.feed(...data(half - 1));
    expect(updates(s.take())).toStrictEqual([]);
    expect(r.data.every((d) => d.buf === chunk)).toBe(true);
    s.feed(...data(1));
    expect(updates(s.take())).toStrictEqual([[1, STREAM_WINDOW / 2]]);
    expect(r.received).toBe(STREAM_WINDOW / 2);
  });

  test("a paused stream returns no credit until resumed", () => {
    const { s, stream } = answered();
    stream.pause();
    s.feed(...data(STREAM_WINDOW / FRAME));
    expect(updates(s.take())).toStrictEqual([]);
    stream.resume();
    expect(updates(s.take())).toStrictEqual([[1, STREAM_WINDOW]]);
  });

  test("DATA beyond a stream's window is a stream error: RST_STREAM FLOW_CONTROL_ERROR", () => {
    const { s, r, stream } = answered();
    stream.pause();
    s.feed(...data(STREAM_WINDOW / FRAME));
    expect(r.closes).toStrictEqual([]);
    s.feed(frame(DATA, 0, 1, Buffer.from("x")));
    const out = s.take();
    expect(kinds(out)).toStrictEqual([[RST_STREAM, 0, 1]]);
    expect(out[0]?.payload.readUInt32BE(0)).toBe(FLOW_CONTROL_ERROR);
    s.runLater();
    expect(r.closes).toStrictEqual([
      [FLOW_CONTROL_ERROR, "the server sent DATA beyond the stream's flow-control window"],
    ]);
    expect(s.failures).toStrictEqual([]);
  });

  test("half the connection window received is returned on stream 0", () => {
    const { s } = answered();
    s.feed(...data(CONNECTION_WINDOW / 2 / FRAME - 1));
    expect(updates(s.take()).filter(([id]) => id === 0)).toStrictEqual([]);
    s.feed(...data(1));
    expect(updates(s.take()).filter(([id]) => id === 0)).toStrictEqual([[0, CONNECTION_WINDOW / 2]]);
  });

  test("a request body waits for the server's windows, the stream's and the connection's", () => {
    const s = ready([INITIAL_WINDOW_SIZE, 20_000]);
    s.request(new Recorder(), Buffer.alloc(100_000, 7));
    const sent = (frames: Frame[]) =>
      frames.filter((f) => f.type === DATA).reduce((n, f) => n + f.payload.length, 0);
    expect(sent(s.take())).toBe(20_000); // the stream's window
    s.feed(frame(WINDOW_UPDATE, 0, 1, u32(100_000)));
    const second = s.take();
    expect(sent(second)).toBe(65_535 - 20_000); // the rest of the connection's
    expect(second.some((f) => f.flags & END_STREAM)).toBe(false);
    s.feed(frame(WINDOW_UPDATE, 0, 0, u32(50_000)));
    const rest = s.take();
    expect(sent(rest)).toBe(100_000 - 65_535);
    expect(rest.at(-1)?.flags).toBe(END_STREAM);
  });

  test("a server that grows our send window beyond 2^31-1 is a connection error", () => {
    const s = ready();
    s.feed(frame(WINDOW_UPDATE, 0, 0, u32(2 ** 31 - 1)));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      "HTTP/2 connection error FLOW_CONTROL_ERROR: window",
    ]);
    expect(goawayCode(s)).toBe(FLOW_CONTROL_ERROR);
  });
});

describe("H2Connection: RST_STREAM and GOAWAY", () => {
  test("RST_STREAM closes its stream with its code; late DATA on it is dropped; on an idle stream it is a connection error", () => {
    const s = ready();
    const r = new Recorder();
    s.request(r);
    s.feed(frame(HEADERS, END_HEADERS, 1, RESPONSE), frame(RST_STREAM, 0, 1, u32(CANCEL)));
    s.runLater();
    expect(r.closes).toStrictEqual([[CANCEL, undefined]]);
    s.feed(frame(DATA, 0, 1, Buffer.from("late")));
    expect(r.data).toStrictEqual([]);
    expect(s.failures).toStrictEqual([]);
    s.feed(frame(RST_STREAM, 0, 9, u32(CANCEL)));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      "HTTP/2 connection error PROTOCOL_ERROR: RST_STREAM on an idle stream",
    ]);
    expect(s.goaway?.type === GOAWAY && s.goaway.payload.readUInt32BE(0)).toBe(1); // the last stream we opened
  });

  test("our cancel() sends RST_STREAM CANCEL once", () => {
    const s = ready();
    const r = new Recorder();
    const stream = s.request(r);
    s.take();
    stream.cancel();
    stream.cancel();
    expect(kinds(s.take())).toStrictEqual([[RST_STREAM, 0, 1]]);
    s.runLater();
    expect(r.closes).toStrictEqual([[CANCEL, undefined]]);
  });

  test("GOAWAY refuses the streams above its last stream id and those waiting; the rest complete, then we end", () => {
    const s = ready([MAX_CONCURRENT_STREAMS, 3]);
    const [a, b, c, waiting] = [new Recorder(), new Recorder(), new Recorder(), new Recorder()];
    for (const r of [a, b, c, waiting]) s.request(r);
    expect(
      kinds(s.take())
        .filter((k) => k[0] === HEADERS)
        .map((k) => k[2]),
    ).toStrictEqual([1, 3, 5]);
    s.feed(frame(GOAWAY, 0, 0, u32(1, NO_ERROR)));
    expect([b.closes, c.closes, waiting.closes]).toStrictEqual([
      [[REFUSED_STREAM, undefined]],
      [[REFUSED_STREAM, undefined]],
      [[REFUSED_STREAM, undefined]],
    ]);
    expect(s.goaways).toStrictEqual([NO_ERROR]);
    expect(s.conn.draining).toBe(true);
    expect(() => s.request(new Recorder())).toThrow("the HTTP/2 session is closing");
    expect(s.ended).toBe(0);
    s.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, RESPONSE));
    s.runLater();
    expect(a.closes).toStrictEqual([[NO_ERROR, undefined]]);
    expect(s.ended).toBe(1);
    const out = s.take();
    expect(kinds(out)).toStrictEqual([[GOAWAY, 0, 0]]);
    expect(out[0]?.payload.readUInt32BE(4)).toBe(NO_ERROR);
  });

  test("GOAWAY with an error code becomes the connection's error", () => {
    const s = ready();
    s.feed(frame(GOAWAY, 0, 0, u32(0, ENHANCE_YOUR_CALM)));
    expect(s.conn.error?.message).toBe("GOAWAY with HTTP/2 error code 11");
    expect(s.ended).toBe(1); // no stream was open
  });
});

describe("H2Connection: hostile-server limits", () => {
  test(`a SETTINGS frame of over ${MAX_SETTINGS_ENTRIES} entries ends the connection`, () => {
    const s = new Shell();
    s.open();
    const entries = Array.from({ length: MAX_SETTINGS_ENTRIES + 1 }, (): [number, number] => [0x3, 100]);
    s.feed(frame(SETTINGS, 0, 0, settings(...entries)));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      `HTTP/2 connection error ENHANCE_YOUR_CALM: a SETTINGS frame of over ${MAX_SETTINGS_ENTRIES} entries`,
    ]);
  });

  test("frames that carry nothing: a burst passes, one more at the same instant does not, time refills it", () => {
    const priority = () => frame(PRIORITY, 0, 1, Buffer.alloc(5));
    const burst = Array.from({ length: GLITCH_BURST }, priority);
    const s = ready();
    s.feed(...burst);
    expect(s.failures).toStrictEqual([]);
    s.now = 1_000; // 330 more a second
    s.feed(...burst.slice(0, 300));
    expect(s.failures).toStrictEqual([]);
    s.feed(...burst.slice(0, 31));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      `HTTP/2 connection error ENHANCE_YOUR_CALM: the server sent over ${GLITCH_BURST} frames that carry nothing (empty DATA, PRIORITY, unknown types; the last: PRIORITY)`,
    ]);
  });

  test(`PINGs whose ACKs the server does not read: over ${MAX_UNSENT_REPLIES} unwritten end the connection`, () => {
    const pings = Array.from({ length: MAX_UNSENT_REPLIES + 1 }, () => frame(PING, 0, 0, Buffer.alloc(8)));
    const reading = ready();
    reading.feed(...pings);
    reading.take(); // written: the server reads
    reading.feed(...pings.slice(0, 1));
    expect(reading.failures).toStrictEqual([]);

    const deaf = ready();
    deaf.feed(...pings);
    expect(deaf.takeUnwritten().length).toBe(MAX_UNSENT_REPLIES + 1);
    deaf.feed(...pings.slice(0, 1));
    expect(deaf.failures.map((e) => e.message)).toStrictEqual([
      `HTTP/2 connection error ENHANCE_YOUR_CALM: the server sent PING or SETTINGS frames without reading our acknowledgements (over ${MAX_UNSENT_REPLIES} unsent)`,
    ]);
  });

  test("a frame over 16 KiB is a FRAME_SIZE_ERROR; frames cut anywhere across chunks are read whole", () => {
    const s = ready();
    const r = new Recorder();
    s.request(r);
    const bytes = Buffer.concat([
      frame(HEADERS, END_HEADERS, 1, RESPONSE),
      frame(DATA, END_STREAM, 1, Buffer.from("hi")),
    ]);
    for (let i = 0; i < bytes.length; i++) s.feed(bytes.subarray(i, i + 1));
    expect(r.closes).toStrictEqual([]); // told on a microtask, after the frame
    s.runLater();
    expect(r.headers.length).toBe(1);
    expect(r.data.map((d) => d.bytes.toString())).toStrictEqual(["hi"]);
    expect(r.closes).toStrictEqual([[NO_ERROR, undefined]]);
    s.feed(frame(DATA, 0, 1, Buffer.alloc(FRAME + 1)).subarray(0, 20));
    expect(s.failures.map((e) => e.message)).toStrictEqual([
      `HTTP/2 connection error FRAME_SIZE_ERROR: a frame of ${FRAME + 1} bytes`,
    ]);
    expect(goawayCode(s)).toBe(FRAME_SIZE_ERROR);
  });

  test("expireStarts(): a request without a slot is cancelled once its wait is over", () => {
    const s = ready([MAX_CONCURRENT_STREAMS, 0]);
    const r = new Recorder();
    s.request(r, Buffer.from("req"), 1_000);
    expect(s.conn.expireStarts(1_500, 1_000)).toBe(500);
    expect(r.closes).toStrictEqual([]);
    expect(s.conn.expireStarts(2_000, 1_000)).toBeUndefined();
    s.runLater();
    expect(r.closes).toStrictEqual([
      [CANCEL, "no stream slot within 1000 ms (the server allows 0 concurrent streams)"],
    ]);
    expect(s.take()).toStrictEqual([]); // it never started: no RST_STREAM
  });
});
