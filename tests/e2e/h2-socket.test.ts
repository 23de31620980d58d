// The HTTP/2 session's socket edge (lib/h2.ts on Bun's native TLS socket) against a raw-frame server
// (tests/support/h2rawpeer.ts) that stops reading or half-closes: a write the socket takes only in
// part waits for the socket's drain and goes on from the byte where it stopped; a graceful end asked
// while output waits ends the socket only once that output is written; a server's FIN ends the
// session and its open streams as a lost connection. The suites through gRPC never fill a socket.

import { afterEach, beforeAll, describe, expect, test } from "bun:test";
import { H2Code, H2Session, type H2StreamHandler } from "../../lib/h2.ts";
import { until } from "../support/cluster.ts";
import { RawH2Peer } from "../support/h2rawpeer.ts";
import { createCA } from "../support/pki.ts";

const HEADERS = 0x1;
const RST_STREAM = 0x3;
const GOAWAY = 0x7;
/** What an upload's connection carries: DATA, HEADERS, SETTINGS, PING, WINDOW_UPDATE. */
const IN_ORDER = new Set([0x0, HEADERS, 0x4, 0x6, 0x8]);
/** Far more than loopback's socket buffers hold (a few MiB each way), so the writes must wait. */
const BODY_BYTES = 48 * 1024 * 1024;
/** How long the slow reader stops reading. */
const HOLD_MS = 3_000;

let server: { ca: string; cert: string; key: string };
let client: { ca: string; cert: string; key: string };
const peers: RawH2Peer[] = [];
const sessions: H2Session[] = [];

beforeAll(async () => {
  const ca = await createCA("h2-socket");
  const s = await ca.issue({ cn: "apid", usage: "server", ips: ["127.0.0.1"] });
  const c = await ca.issue({ cn: "ccm", usage: "client" });
  server = { ca: ca.cert, cert: s.cert, key: s.key };
  client = { ca: ca.cert, cert: c.cert, key: c.key };
});

afterEach(() => {
  for (const s of sessions.splice(0)) s.destroy();
  for (const p of peers.splice(0)) p.stop();
});

/** A session to `peer`, resolved once TLS is up; `closed` turns true at its close event. */
async function connect(peer: RawH2Peer): Promise<{ session: H2Session; closed: () => boolean }> {
  let closed = false;
  let ready!: () => void;
  let failed!: (err: Error) => void;
  const up = new Promise<void>((resolve, reject) => {
    ready = resolve;
    failed = reject;
  });
  const session = H2Session.connect(
    { host: "127.0.0.1", port: peer.port, authority: `127.0.0.1:${peer.port}`, ...client },
    {
      connect: () => ready(),
      error: (err) => failed(err),
      close: () => {
        closed = true;
      },
    },
  );
  sessions.push(session);
  await up;
  return { session, closed: () => closed };
}

/** A stream handler that keeps what it was told. */
function recorder() {
  const seen = { headers: 0, dataBytes: 0, closeCode: null as number | undefined | null };
  const handler: H2StreamHandler = {
    onHeaders: () => {
      seen.headers++;
    },
    onData: (_buf, start, end) => {
      seen.dataBytes += end - start;
    },
    onClose: (code) => {
      seen.closeCode = code;
    },
  };
  return { seen, handler };
}

const REQUEST: Array<[string, string]> = [
  [":method", "POST"],
  [":path", "/test.Socket/Upload"],
  ["content-type", "application/grpc"],
];

describe("lib/h2.ts on Bun's native socket: writes, drain and ends", () => {
  test("a write the socket takes in part waits for its drain and goes on from where it stopped", async () => {
    const peer = await RawH2Peer.start(server, "slow-reader", HOLD_MS);
    peers.push(peer);
    const { session } = await connect(peer);
    const body = new Uint8Array(BODY_BYTES).fill(0x5a);
    session.request(REQUEST, body, recorder().handler);

    // The server has stopped reading: what the socket did not take waits, and says how long.
    await until(
      () => peer.paused && session.writeStalledMs > 300,
      "the writes to wait for the socket",
      5_000,
    );
    expect(peer.dataBytes).toBeLessThan(BODY_BYTES);

    // Once it reads again, every byte arrives, framed as written (a chunk resent from a wrong
    // offset would misframe the stream: the peer would count other lengths or frame types).
    await until(() => peer.dataBytes === BODY_BYTES, "the whole body to arrive", 30_000);
    await until(() => session.writeStalledMs === 0, "no write to wait any more", 5_000);
    expect(peer.frameTypes.filter((t) => !IN_ORDER.has(t))).toEqual([]);
    expect(peer.frameTypes.filter((t) => t === HEADERS)).toHaveLength(1);
    expect(session.destroyed).toBe(false);
  }, 60_000);

  test("close() while output waits ends the socket only after that output: RST_STREAM, GOAWAY, then FIN", async () => {
    const peer = await RawH2Peer.start(server, "slow-reader", HOLD_MS);
    peers.push(peer);
    const { session, closed } = await connect(peer);
    const { seen, handler } = recorder();
    const stream = session.request(REQUEST, new Uint8Array(BODY_BYTES), handler);
    await until(
      () => peer.paused && session.writeStalledMs > 300,
      "the writes to wait for the socket",
      5_000,
    );

    stream.cancel();
    session.close();
    await until(() => seen.closeCode !== null, "the stream's close", 1_000);
    expect(seen.closeCode).toBe(H2Code.CANCEL);
    // The end waits for the output: the server, not reading, has seen no FIN.
    await Bun.sleep(200);
    expect(peer.clientEnded).toBe(false);
    expect(session.destroyed).toBe(false);

    await until(() => peer.clientEnded, "the client's FIN", 30_000);
    const types = peer.frameTypes;
    expect(types.at(-1)).toBe(GOAWAY);
    expect(types.at(-2)).toBe(RST_STREAM);
    expect(types.filter((t) => t === GOAWAY)).toHaveLength(1);
    await until(closed, "the session's close event", 5_000);
  }, 60_000);

  test("a server's half-close (FIN) ends the session: its open streams close as a lost connection", async () => {
    const peer = await RawH2Peer.start(server, "half-close");
    peers.push(peer);
    const { session, closed } = await connect(peer);
    const { seen, handler } = recorder();
    session.request(REQUEST, new Uint8Array(5), handler);

    await until(closed, "the session's close event", 5_000);
    expect(seen.headers).toBe(1);
    expect(seen.dataBytes).toBe(6); // the one gRPC message the server sent before its FIN
    expect(seen.closeCode).toBeUndefined(); // lost with the connection, not ended by the server
    expect(session.destroyed).toBe(true);
    expect(() => session.request(REQUEST, new Uint8Array(0), recorder().handler)).toThrow();
  });
});
