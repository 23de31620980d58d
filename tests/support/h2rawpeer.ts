// A TypeScript HTTP/2 server that writes raw frames over node:tls, for the hostile-server classes of
// tests/e2e/h2-hostile.test.ts that are about time rather than volume: a server that never sends
// SETTINGS or never acknowledges ours, one that allows no concurrent stream, one that never answers
// a request, and, as the control, one that answers and then stays silent for a long time (a watch).
// For tests/e2e/h2-socket.test.ts it also plays the socket's edges: a server that stops reading (the
// client's writes are taken in part and wait for the socket's drain) and one that half-closes.
// It reads the client's frames only as far as it must (the preface, SETTINGS, HEADERS, PING), and
// counts what it read: DATA bytes, the frame types in order, the client's end of the socket.

import type * as net from "node:net";
import * as tls from "node:tls";
import { frameMessage } from "../../lib/grpc.ts";
import { encodeHeaders } from "../../lib/h2hpack.ts";

/** What every connection plays. */
export type RawScenario =
  /** Writes nothing at all (no SETTINGS), reads everything. */
  | "no-settings"
  /** Sends its SETTINGS, never acknowledges the client's. */
  | "no-settings-ack"
  /** SETTINGS with MAX_CONCURRENT_STREAMS 0: no request may start. */
  | "max-streams-0"
  /** Takes requests and never answers them. */
  | "no-headers"
  /** Answers with headers and one message, is silent for `holdMs`, then sends one more and status OK. */
  | "idle-watch"
  /**
   * Opens both flow-control windows to the maximum and, at the first HEADERS, stops reading the
   * socket for `holdMs` (the kernel's buffers fill, the client's writes are taken in part).
   */
  | "slow-reader"
  /** Answers the first request with headers and one message, then ends its side of the socket (FIN). */
  | "half-close";

const PREFACE_BYTES = 24;
/** The largest flow-control window (RFC 9113 §6.9.1). */
const MAX_WINDOW = 2 ** 31 - 1;
const SETTINGS = 0x4;
const WINDOW_UPDATE = 0x8;
const HEADERS = 0x1;
const DATA = 0x0;
const PING = 0x6;
const ACK = 0x1;
const END_STREAM = 0x1;
const END_HEADERS = 0x4;

/** One frame as written on the wire: its 9-byte header, then `payload` (RFC 9113 §4.1). */
export function frame(
  type: number,
  flags: number,
  streamId: number,
  payload: Uint8Array = new Uint8Array(0),
): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/** A raw-frame server playing one scenario; `requests` counts the client's HEADERS. */
export class RawH2Peer {
  readonly #server: tls.Server;
  readonly #sockets = new Set<net.Socket>();
  readonly #scenario: RawScenario;
  readonly #holdMs: number;
  port = 0;
  requests = 0;
  /** DATA payload bytes read, all streams. */
  dataBytes = 0;
  /** The type of every frame read after the preface, in order. */
  readonly frameTypes: number[] = [];
  /** The client ended its side of a socket (FIN) after we read everything before it. */
  clientEnded = false;
  /** slow-reader: the socket was paused (and is resumed after holdMs). */
  paused = false;

  private constructor(
    creds: { ca: string; cert: string; key: string },
    scenario: RawScenario,
    holdMs: number,
  ) {
    this.#scenario = scenario;
    this.#holdMs = holdMs;
    this.#server = tls.createServer(
      { key: creds.key, cert: creds.cert, ca: creds.ca, requestCert: true, ALPNProtocols: ["h2"] },
      (socket) => this.#serve(socket),
    );
  }

  static async start(
    creds: { ca: string; cert: string; key: string },
    scenario: RawScenario,
    holdMs = 0,
  ): Promise<RawH2Peer> {
    const p = new RawH2Peer(creds, scenario, holdMs);
    await new Promise<void>((resolve) => p.#server.listen(0, "127.0.0.1", () => resolve()));
    p.port = (p.#server.address() as net.AddressInfo).port;
    return p;
  }

  stop(): void {
    for (const s of this.#sockets) s.destroy();
    this.#server.close();
  }

  #serve(socket: tls.TLSSocket): void {
    this.#sockets.add(socket);
    socket.on("error", () => undefined);
    socket.on("close", () => this.#sockets.delete(socket));
    socket.on("end", () => {
      this.clientEnded = true;
    });
    if (this.#scenario === "no-settings") return; // reads (and drops) whatever comes
    socket.write(frame(SETTINGS, 0, 0, this.#settings()));
    if (this.#scenario === "slow-reader") {
      const increment = Buffer.alloc(4);
      increment.writeUInt32BE(MAX_WINDOW - 65_535);
      socket.write(frame(WINDOW_UPDATE, 0, 0, increment));
    }
    let buf = Buffer.alloc(0);
    let prefaceSeen = false;
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!prefaceSeen) {
        if (buf.length < PREFACE_BYTES) return;
        buf = buf.subarray(PREFACE_BYTES);
        prefaceSeen = true;
      }
      while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
        const length = buf.readUIntBE(0, 3);
        const type = buf[3] as number;
        const flags = buf[4] as number;
        const streamId = buf.readUInt32BE(5) & 0x7fff_ffff;
        const payload = buf.subarray(9, 9 + length);
        buf = buf.subarray(9 + length);
        this.#onFrame(socket, type, flags, streamId, payload);
      }
    });
  }

  /** Our SETTINGS payload: six bytes per entry (RFC 9113 §6.5.1). */
  #settings(): Uint8Array {
    if (this.#scenario === "max-streams-0") return Buffer.from([0, 3, 0, 0, 0, 0]);
    if (this.#scenario !== "slow-reader") return new Uint8Array(0);
    const entry = Buffer.alloc(6);
    entry.writeUInt16BE(4); // SETTINGS_INITIAL_WINDOW_SIZE
    entry.writeUInt32BE(MAX_WINDOW, 2);
    return entry;
  }

  #onFrame(socket: tls.TLSSocket, type: number, flags: number, streamId: number, payload: Buffer): void {
    this.frameTypes.push(type);
    if (type === DATA) this.dataBytes += payload.length;
    if (type === SETTINGS && !(flags & ACK) && this.#scenario !== "no-settings-ack") {
      socket.write(frame(SETTINGS, ACK, 0));
    } else if (type === PING && !(flags & ACK)) {
      socket.write(frame(PING, ACK, 0, payload));
    } else if (type === HEADERS) {
      this.requests++;
      if (this.#scenario === "idle-watch") this.#watch(socket, streamId);
      if (this.#scenario === "half-close" && this.requests === 1) {
        this.#answer(socket, streamId);
        socket.end();
      }
      if (this.#scenario === "slow-reader" && this.requests === 1) {
        socket.pause();
        this.paused = true;
        setTimeout(() => {
          this.paused = false;
          socket.resume();
        }, this.#holdMs);
      }
    }
  }

  /** Headers and a message now; after holdMs one more message and status OK. */
  #watch(socket: tls.TLSSocket, id: number): void {
    this.#answer(socket, id);
    setTimeout(() => {
      socket.write(frame(DATA, 0, id, frameMessage(Uint8Array.of(2))));
      socket.write(frame(HEADERS, END_HEADERS | END_STREAM, id, encodeHeaders([["grpc-status", "0"]])));
    }, this.#holdMs);
  }

  /** Response headers and one gRPC message (the byte 1) on stream `id`, the stream left open. */
  #answer(socket: tls.TLSSocket, id: number): void {
    const headers = encodeHeaders([
      [":status", "200"],
      ["content-type", "application/grpc"],
    ]);
    socket.write(frame(HEADERS, END_HEADERS, id, headers));
    socket.write(frame(DATA, 0, id, frameMessage(Uint8Array.of(1))));
  }
}
