// A TypeScript HTTP/2 server that writes raw frames over node:tls, for the hostile-server classes of
// tests/e2e/h2-hostile.test.ts that are about time rather than volume: a server that never sends
// SETTINGS or never acknowledges ours, one that allows no concurrent stream, one that never answers
// a request, and, as the control, one that answers and then stays silent for a long time (a watch).
// It reads the client's frames only as far as it must (the preface, SETTINGS, HEADERS, PING).

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
  | "idle-watch";

const PREFACE_BYTES = 24;
const SETTINGS = 0x4;
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
    if (this.#scenario === "no-settings") return; // reads (and drops) whatever comes
    const settings = this.#scenario === "max-streams-0" ? Buffer.from([0, 3, 0, 0, 0, 0]) : new Uint8Array(0);
    socket.write(frame(SETTINGS, 0, 0, settings));
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

  #onFrame(socket: tls.TLSSocket, type: number, flags: number, streamId: number, payload: Buffer): void {
    if (type === SETTINGS && !(flags & ACK) && this.#scenario !== "no-settings-ack") {
      socket.write(frame(SETTINGS, ACK, 0));
    } else if (type === PING && !(flags & ACK)) {
      socket.write(frame(PING, ACK, 0, payload));
    } else if (type === HEADERS) {
      this.requests++;
      if (this.#scenario === "idle-watch") this.#watch(socket, streamId);
    }
  }

  /** Headers and a message now; after holdMs one more message and status OK. */
  #watch(socket: tls.TLSSocket, id: number): void {
    const headers = encodeHeaders([
      [":status", "200"],
      ["content-type", "application/grpc"],
    ]);
    socket.write(frame(HEADERS, END_HEADERS, id, headers));
    socket.write(frame(DATA, 0, id, frameMessage(Uint8Array.of(1))));
    setTimeout(() => {
      socket.write(frame(DATA, 0, id, frameMessage(Uint8Array.of(2))));
      socket.write(frame(HEADERS, END_HEADERS | END_STREAM, id, encodeHeaders([["grpc-status", "0"]])));
    }, this.#holdMs);
  }
}
