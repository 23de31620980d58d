// lib/grpc.ts GrpcChannel on the wire, against the fake apid (a grpc-js server) and against a
// scripted node:http2 server that misbehaves on purpose: request headers and framing, one shared
// session, deadlines, Trailers-Only and non-gRPC answers, a server closing mid-stream, GOAWAY
// (apid restart and graceful), a slow reader of 10,000 messages, cancellation, the receive limit,
// keepalive against a black-holed connection, failing and hanging connects, and an idle channel
// that lets the process exit.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import * as http2 from "node:http2";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import {
  frameMessage,
  type GrpcCallOptions,
  GrpcChannel,
  type GrpcChannelOptions,
  GrpcError,
  type GrpcStream,
} from "../../lib/grpc.ts";
import { Registry } from "../../lib/metrics.ts";
import { TalosClient, TalosError } from "../../lib/talos.ts";
import { GetRequest, ListRequest } from "../../lib/talos_pb.ts";
import { loadTalosConfig, type TalosConfig } from "../../lib/talosconfig.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { encodeWatchRequest, PATHS, RESOURCES } from "../../lib/taloswire.ts";
import { encodePlatformMetadata, FakeApid } from "../support/apid.ts";
import { until } from "../support/cluster.ts";
import { loadFixture } from "../support/fixtures.ts";
import { type CA, createCA, type KeyPair } from "../support/pki.ts";

const AWS = "172.31.20.15";
const FAST = { initialMs: 20, maxMs: 100 };
const PM = RESOURCES.platformmetadata;
const GET_PM = GetRequest.encode({ namespace: PM.namespace, type: PM.type, id: PM.id ?? "" }).finish();

type Handler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

/** A node:http2 gRPC-ish server whose behaviour each test scripts. */
class ScriptedServer {
  readonly server: http2.Http2SecureServer;
  readonly sessions = new Set<http2.ServerHttp2Session>();
  /** Sessions accepted since start. */
  accepted = 0;
  /** PING frames received since start. */
  pings = 0;
  handler: Handler = (stream) => reply(stream, [Uint8Array.of(1)]);
  port = 0;

  constructor(server: http2.Http2SecureServer) {
    this.server = server;
    server.on("session", (s) => {
      this.accepted++;
      this.sessions.add(s);
      s.on("close", () => this.sessions.delete(s));
      s.on("error", () => undefined);
      s.on("ping", () => this.pings++);
    });
    server.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
      stream.on("error", () => undefined);
      this.handler(stream, headers);
    });
  }

  static async start(ca: CA, cert: KeyPair): Promise<ScriptedServer> {
    const s = new ScriptedServer(
      http2.createSecureServer({ key: cert.key, cert: cert.cert, ca: ca.cert, requestCert: true }),
    );
    await new Promise<void>((r) => s.server.listen(0, "127.0.0.1", () => r()));
    s.port = (s.server.address() as net.AddressInfo).port;
    return s;
  }

  stop(): void {
    for (const s of this.sessions) s.destroy();
    this.server.close();
  }
}

/** Answers a gRPC call: headers, the framed messages, then trailers with `status`. */
function reply(
  stream: http2.ServerHttp2Stream,
  messages: Uint8Array[],
  status = "0",
  message?: string,
): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.on("wantTrailers", () =>
    stream.sendTrailers({
      "grpc-status": status,
      ...(message === undefined ? {} : { "grpc-message": message }),
    }),
  );
  for (const m of messages) stream.write(frameMessage(m));
  stream.end();
}

/** Reads the request body of a call. */
async function body(stream: http2.ServerHttp2Stream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** A TCP proxy that can black-hole its connections: nothing passes, nothing closes. */
class BlackHoleProxy {
  readonly server: net.Server;
  readonly sockets = new Set<net.Socket>();
  frozen = false;
  port = 0;
  constructor(target: number) {
    this.server = net.createServer((client) => {
      const up = net.connect(target, "127.0.0.1");
      for (const [from, to] of [
        [client, up],
        [up, client],
      ] as const) {
        this.sockets.add(from);
        from.on("data", (d) => {
          if (!this.frozen) to.write(d);
        });
        from.on("error", () => undefined);
        from.on("close", () => {
          if (!this.frozen) to.destroy();
        });
      }
    });
  }
  async listen(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", () => r()));
    this.port = (this.server.address() as net.AddressInfo).port;
    return this;
  }
  stop(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

let ca: CA;
let serverCert: KeyPair;
let clientCert: KeyPair;
let scripted: ScriptedServer;
let apid: FakeApid;
let talosconfig: TalosConfig;
let dir: string;
const channels: GrpcChannel[] = [];

beforeAll(async () => {
  ca = await createCA("grpc-test");
  serverCert = await ca.issue({ cn: "server", usage: "server", ips: ["127.0.0.1"], dns: ["localhost"] });
  clientCert = await ca.issue({ cn: "client", usage: "client" });
  scripted = await ScriptedServer.start(ca, serverCert);
  apid = await FakeApid.start({ nodes: [loadFixture("aws")] });
  dir = mkdtempSync(join(tmpdir(), "talos-grpc-e2e-"));
  const path = await apid.writeTalosconfig(join(dir, "talosconfig"));
  talosconfig = loadTalosConfig({ path, env: {} });
});

afterAll(async () => {
  for (const c of channels) c.close();
  scripted.stop();
  await apid.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A channel to the scripted server (or `port`), closed after the suite. */
function channel(opts: Partial<GrpcChannelOptions> = {}): GrpcChannel {
  const ch = new GrpcChannel({
    host: "127.0.0.1",
    port: scripted.port,
    ca: ca.cert,
    cert: clientCert.cert,
    key: clientCert.key,
    servername: "talos",
    backoff: FAST,
    ...opts,
  });
  channels.push(ch);
  return ch;
}

/** A channel to the fake apid with the talosconfig's credentials, as talos.ts builds it. */
function apidChannel(opts: Partial<GrpcChannelOptions> = {}): GrpcChannel {
  return channel({
    port: apid.port,
    ca: talosconfig.ca as string,
    cert: talosconfig.crt,
    key: talosconfig.key,
    maxReceiveMessageBytes: 32 << 20,
    ...opts,
  });
}

async function failure(p: Promise<unknown>): Promise<GrpcError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof GrpcError) return err;
    throw err;
  }
  throw new Error("call succeeded");
}

/** Every message of a stream, then its error (undefined when it ended OK). */
async function drain(s: GrpcStream): Promise<{ messages: Uint8Array[]; error: GrpcError | undefined }> {
  const messages: Uint8Array[] = [];
  try {
    for (let m = await s.next(); m !== undefined; m = await s.next()) messages.push(m);
    return { messages, error: undefined };
  } catch (err) {
    if (!(err instanceof GrpcError)) throw err;
    return { messages, error: err };
  }
}

describe("GrpcChannel against grpc-js's server (the fake apid)", () => {
  test("unary() and serverStream() with the node header", async () => {
    const ch = apidChannel();
    expect(
      (await ch.unary(PATHS.get, GET_PM, { metadata: { node: AWS }, timeoutMs: 5_000 })).length,
    ).toBeGreaterThan(0);
    const { namespace, type } = RESOURCES.addresses;
    const req = ListRequest.encode({ namespace, type }).finish();
    const list = await drain(ch.serverStream(PATHS.list, req, { metadata: { node: AWS } }));
    expect(list.error).toBeUndefined();
    expect(list.messages.length).toBe(loadFixture("aws").addresses.length);
    expect(ch.state).toBe("ready");
  });

  test("a deadline that passes gives DEADLINE_EXCEEDED", async () => {
    const ch = apidChannel();
    apid.setDelay(1_000, "Get");
    try {
      const e = await failure(ch.unary(PATHS.get, GET_PM, { metadata: { node: AWS }, timeoutMs: 50 }));
      expect(e.code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
      expect(e.details).toContain("50 ms");
    } finally {
      apid.setDelay(0, "Get");
    }
    expect((await ch.unary(PATHS.get, GET_PM, { metadata: { node: AWS } })).length).toBeGreaterThan(0);
  });

  test("an apid restart (GOAWAY, then the connection closes) fails open streams with UNAVAILABLE; the next call dials again", async () => {
    const own = await FakeApid.start({ pki: apid.pki, nodes: [loadFixture("aws")] });
    try {
      const ch = apidChannel({ port: own.port });
      const watch = ch.serverStream(PATHS.watch, encodeWatchRequest(PM.namespace, PM.type, PM.id), {
        metadata: { node: AWS },
      });
      expect(await watch.next()).toBeDefined(); // the empty "watch established" response
      expect(await watch.next()).toBeDefined(); // the current state
      await own.restart();
      const e = await failure(watch.next());
      expect(e.code).toBe(GrpcStatus.UNAVAILABLE);
      expect((await ch.unary(PATHS.get, GET_PM, { metadata: { node: AWS } })).length).toBeGreaterThan(0);
    } finally {
      await own.stop();
    }
  });

  test("a message over the receive limit is RESOURCE_EXHAUSTED; through TalosClient it is final, not retried", async () => {
    const own = await FakeApid.start({ pki: apid.pki, nodes: [loadFixture("aws")] });
    try {
      own.setRawResource(AWS, {
        namespace: PM.namespace,
        type: PM.type,
        id: PM.id ?? "",
        protoSpec: encodePlatformMetadata(loadFixture("aws").platformMetadata).proto,
        yamlSpec: `note: ${"x".repeat(33 << 20)}\n`,
      });
      const ch = apidChannel({ port: own.port });
      const e = await failure(ch.unary(PATHS.get, GET_PM, { metadata: { node: AWS } }));
      expect(e.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect(e.details).toContain(`vs. ${32 << 20}`);

      const path = await own.writeTalosconfig(join(dir, "talosconfig-limit"));
      const client = new TalosClient({
        config: loadTalosConfig({ path, env: {} }),
        registry: new Registry(),
        backoff: FAST,
      });
      try {
        own.resetCalls();
        const err = await client.platformMetadata(AWS).catch((x: unknown) => x);
        expect(err).toBeInstanceOf(TalosError);
        const t = err as TalosError;
        expect([t.code, t.grpcCode, t.retryable]).toEqual(["internal", GrpcStatus.RESOURCE_EXHAUSTED, false]);
        expect(own.calls({ method: "Get", node: AWS })).toBe(1);
      } finally {
        client.close();
      }
    } finally {
      await own.stop();
    }
  });
});

describe("GrpcChannel against a scripted server", () => {
  test("the request: POST to the method path, gRPC headers, grpc-timeout, metadata, one framed message, end of stream", async () => {
    let seen: { headers: http2.IncomingHttpHeaders; body: Buffer } | undefined;
    scripted.handler = (stream, headers) => {
      void body(stream).then((b) => {
        seen = { headers, body: b };
        reply(stream, [Uint8Array.of(9, 9)]);
      });
    };
    const ch = channel();
    const got = await ch.unary("/svc.Service/Method", Uint8Array.of(1, 2, 3), {
      metadata: { node: "10.0.0.5", runtime: "x" },
      timeoutMs: 2_500,
    });
    expect([...got]).toEqual([9, 9]);
    expect(seen?.headers).toMatchObject({
      ":method": "POST",
      ":path": "/svc.Service/Method",
      ":scheme": "https",
      "content-type": "application/grpc",
      te: "trailers",
      "grpc-timeout": "2500m",
      node: "10.0.0.5",
      runtime: "x",
    });
    expect(seen?.body.toString("hex")).toBe("0000000003010203");
  });

  test("a deadline longer than setTimeout can wait is sent to the server and does not fire at once", async () => {
    let timeout: string | string[] | undefined;
    scripted.handler = (stream, headers) => {
      timeout = headers["grpc-timeout"];
      // Not a wait: the server answers late, so a deadline that fired at once would fail the call.
      setTimeout(() => reply(stream, [Uint8Array.of(7)]), 20);
    };
    const got = await channel().unary("/s/M", new Uint8Array(), { timeoutMs: 3e9 });
    expect([...got]).toEqual([7]);
    expect(timeout).toBe("3000000S");
  });

  test("concurrent calls share one session", async () => {
    // Not a wait: the server answers late, so the 30 calls are open at the same time.
    scripted.handler = (stream) => setTimeout(() => reply(stream, [Uint8Array.of(1)]), 20);
    const before = scripted.accepted;
    const ch = channel();
    const all = await Promise.all(Array.from({ length: 30 }, () => ch.unary("/s/M", new Uint8Array())));
    expect(all.length).toBe(30);
    expect(scripted.accepted - before).toBe(1);
  });

  test("the server's MAX_CONCURRENT_STREAMS holds later calls back until a stream closes; all complete", async () => {
    scripted.handler = (stream) => reply(stream, [Uint8Array.of(1)]);
    const ch = channel();
    await ch.unary("/s/M", new Uint8Array());
    // Resolved when the client acknowledges the new SETTINGS: it has them from then on.
    await Promise.all(
      [...scripted.sessions].map(
        (s) => new Promise<void>((acked) => s.settings({ maxConcurrentStreams: 2 }, () => acked())),
      ),
    );
    let open = 0;
    let most = 0;
    scripted.handler = (stream) => {
      most = Math.max(most, ++open);
      // Not a wait: each stream stays open a while, so later calls meet the limit.
      setTimeout(() => {
        open--;
        reply(stream, [Uint8Array.of(2)]);
      }, 20);
    };
    const all = await Promise.all(Array.from({ length: 10 }, () => ch.unary("/s/M", new Uint8Array())));
    expect(all.map((m) => m[0])).toEqual(Array(10).fill(2));
    expect(most).toBe(2);
  });

  test.each<[string, Handler, number, string]>([
    [
      "Trailers-Only with a percent-encoded message",
      (s) =>
        s.respond(
          {
            ":status": 200,
            "content-type": "application/grpc",
            "grpc-status": "14",
            "grpc-message": "caf%C3%A9%20closed",
          },
          { endStream: true },
        ),
      GrpcStatus.UNAVAILABLE,
      "café closed",
    ],
    [
      "a proxy's 503",
      (s) => {
        s.respond({ ":status": 503, "content-type": "text/html" });
        s.end("<html>busy</html>");
      },
      GrpcStatus.UNAVAILABLE,
      "HTTP status code 503",
    ],
    [
      "a proxy's 503 that ends with trailers but no grpc-status",
      (s) => {
        s.respond({ ":status": 503, "content-type": "text/plain" }, { waitForTrailers: true });
        s.on("wantTrailers", () => s.sendTrailers({ "x-trace": "1" }));
        s.end("busy");
      },
      GrpcStatus.UNAVAILABLE,
      "HTTP status code 503",
    ],
    [
      "a 200 that is not gRPC",
      (s) => {
        s.respond({ ":status": 200, "content-type": "text/plain" });
        s.end("hello");
      },
      GrpcStatus.UNKNOWN,
      'content-type "text/plain"',
    ],
    [
      "an error status after a message",
      (s) => reply(s, [Uint8Array.of(1)], "5", "resource%20X%20doesn't%20exist"),
      GrpcStatus.NOT_FOUND,
      "resource X doesn't exist",
    ],
    [
      "a stream that ends without trailers",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" });
        s.end(frameMessage(Uint8Array.of(1)));
      },
      GrpcStatus.INTERNAL,
      "without a gRPC status",
    ],
    [
      "an OK status in the middle of a message",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
        s.end(Uint8Array.of(0, 0, 0, 0, 9, 1));
      },
      GrpcStatus.INTERNAL,
      "inside a message",
    ],
    [
      "an OK unary call without a message",
      (s) => reply(s, []),
      GrpcStatus.UNIMPLEMENTED,
      "No message received",
    ],
    [
      "an OK unary call with two messages",
      (s) => reply(s, [Uint8Array.of(1), Uint8Array.of(2)]),
      GrpcStatus.UNIMPLEMENTED,
      "Too many responses",
    ],
  ])("%s", async (_name, handler, code, details) => {
    scripted.handler = handler;
    const e = await failure(channel().unary("/s/M", new Uint8Array()));
    expect([e.code, e.details]).toEqual([code, expect.stringContaining(details)]);
  });

  test("a server closing the connection mid-stream: the messages so far, then UNAVAILABLE", async () => {
    scripted.handler = (s) => {
      s.respond({ ":status": 200, "content-type": "application/grpc" });
      s.write(Buffer.concat([frameMessage(Uint8Array.of(1)), frameMessage(Uint8Array.of(2))]));
      // The fault: the connection closes 30 ms after the messages, the stream still open.
      setTimeout(() => s.session?.destroy(), 30);
    };
    const ch = channel();
    const { messages, error } = await drain(ch.serverStream("/s/Watch", new Uint8Array()));
    expect(messages.map((m) => [...m])).toEqual([[1], [2]]);
    expect(error?.code).toBe(GrpcStatus.UNAVAILABLE);
    scripted.handler = (s) => reply(s, [Uint8Array.of(3)]);
    expect([...(await ch.unary("/s/M", new Uint8Array()))]).toEqual([3]);
  });

  test("a graceful GOAWAY: the open stream completes on the old session, new calls dial a new one", async () => {
    let first: http2.ServerHttp2Stream | undefined;
    scripted.handler = (s) => {
      if (first) return reply(s, [Uint8Array.of(7)]);
      first = s;
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
      s.write(frameMessage(Uint8Array.of(1)));
      s.session?.goaway(http2.constants.NGHTTP2_NO_ERROR, s.id ?? 1);
    };
    const before = scripted.accepted;
    const ch = channel();
    const open = ch.serverStream("/s/Watch", new Uint8Array());
    expect([...((await open.next()) ?? [])]).toEqual([1]);
    await until(() => ch.state !== "ready", "the channel to notice the GOAWAY");
    expect([...(await ch.unary("/s/M", new Uint8Array()))]).toEqual([7]);
    expect(scripted.accepted - before).toBe(2);
    first?.end(frameMessage(Uint8Array.of(2)));
    const rest = await drain(open);
    expect(rest.messages.map((m) => [...m])).toEqual([[2]]);
    expect(rest.error).toBeUndefined();
  });

  test("a slow reader gets all of 10,000 messages in order (flow control holds the server)", async () => {
    const n = 10_000;
    scripted.handler = (s) => {
      const frames = Array.from({ length: n }, (_, i) => {
        const m = new Uint8Array(100).fill(i & 255);
        new DataView(m.buffer).setUint32(0, i);
        return frameMessage(m);
      });
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
      s.write(Buffer.concat(frames.slice(0, n / 2)));
      s.end(Buffer.concat(frames.slice(n / 2)));
    };
    const stream = channel().serverStream("/s/List", new Uint8Array());
    const got: number[] = [];
    for (let m = await stream.next(); m !== undefined; m = await stream.next()) {
      got.push(new DataView(m.buffer, m.byteOffset).getUint32(0));
      if (got.length % 1_000 === 0) await Bun.sleep(5); // not a wait: a slow reader, the fault
    }
    expect(got.length).toBe(n);
    expect(got.every((v, i) => v === i)).toBe(true);
  });

  test("listen(): messages received before it first, then each as it arrives, in order, then the status once", async () => {
    let held: http2.ServerHttp2Stream | undefined;
    scripted.handler = (s) => {
      held = s;
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
      // Messages 1 and 2 in one DATA frame: the client decodes both before next() returns 1.
      s.write(Buffer.concat([frameMessage(Uint8Array.of(1)), frameMessage(Uint8Array.of(2))]));
    };
    const stream = channel().serverStream("/s/Watch", new Uint8Array());
    expect([...((await stream.next()) ?? [])]).toEqual([1]);
    // Message 2 waits in the call's queue.
    const got: number[] = [];
    const ends: Array<GrpcError | null> = [];
    stream.listen({ onMessage: (m) => got.push(...m), onEnd: (e) => ends.push(e) });
    expect(got).toEqual([2]); // delivered by listen() itself
    held?.write(frameMessage(Uint8Array.of(3)));
    await until(() => got.length === 2, "message 3");
    // 10,000 more in one go: no pause, all pushed, in order.
    held?.end(Buffer.concat(Array.from({ length: 10_000 }, (_, i) => frameMessage(Uint8Array.of(i & 255)))));
    await until(() => ends.length > 0, "the end of the call");
    expect(got.length).toBe(2 + 10_000);
    expect(got.slice(2).every((v, i) => v === (i & 255))).toBe(true);
    expect(ends).toEqual([null]);
    expect(() => stream.listen({ onMessage: () => {}, onEnd: () => {} })).toThrow("already listening");
  });

  test("listen(): a call that already failed ends at once; a listener that throws cancels the call INTERNAL", async () => {
    const ac = new AbortController();
    ac.abort();
    const ended: Array<GrpcError | null> = [];
    channel()
      .serverStream("/s/Watch", new Uint8Array(), { signal: ac.signal })
      .listen({ onMessage: () => {}, onEnd: (e) => ended.push(e) });
    expect(ended.map((e) => e?.code)).toEqual([GrpcStatus.CANCELLED]);

    let serverClosed = false;
    scripted.handler = (s) => {
      s.respond({ ":status": 200, "content-type": "application/grpc" });
      s.write(Buffer.concat([frameMessage(Uint8Array.of(1)), frameMessage(Uint8Array.of(2))]));
      s.on("close", () => {
        serverClosed = true;
      });
    };
    const got: number[] = [];
    const ends: Array<GrpcError | null> = [];
    channel()
      .serverStream("/s/Watch", new Uint8Array())
      .listen({
        onMessage: (m) => {
          got.push(...m);
          throw new Error("handler bug");
        },
        onEnd: (e) => ends.push(e),
      });
    await until(() => ends.length > 0, "the end of the call");
    expect(got).toEqual([1]); // nothing after the throw
    expect(ends.map((e) => [e?.code, e?.details])).toEqual([
      [GrpcStatus.INTERNAL, expect.stringContaining("handler bug")],
    ]);
    await until(() => serverClosed, "the server to see the reset");
  });

  test("an AbortSignal resets the stream: the server sees it closed, the call is CANCELLED", async () => {
    let serverClosed = false;
    scripted.handler = (s) => {
      s.respond({ ":status": 200, "content-type": "application/grpc" });
      s.write(frameMessage(Uint8Array.of(1)));
      s.on("close", () => {
        serverClosed = true;
      });
    };
    const ac = new AbortController();
    const opts: GrpcCallOptions = { signal: ac.signal };
    const stream = channel().serverStream("/s/Watch", new Uint8Array(), opts);
    expect(await stream.next()).toBeDefined();
    ac.abort();
    expect((await failure(stream.next())).code).toBe(GrpcStatus.CANCELLED);
    await until(() => serverClosed, "the server to see the reset");
  });

  test("a frame over the receive limit resets the stream at its header", async () => {
    let serverClosed = false;
    scripted.handler = (s) => {
      s.respond({ ":status": 200, "content-type": "application/grpc" });
      s.write(Uint8Array.of(0, 0, 0x10, 0, 0)); // announces 1 MiB; no body follows
      s.on("close", () => {
        serverClosed = true;
      });
    };
    const e = await failure(channel({ maxReceiveMessageBytes: 1024 }).unary("/s/M", new Uint8Array()));
    expect([e.code, e.details]).toEqual([
      GrpcStatus.RESOURCE_EXHAUSTED,
      expect.stringContaining("1048576 vs. 1024"),
    ]);
    await until(() => serverClosed, "the server to see the reset");
  });

  test("keepalive: pings keep a quiet stream open while the server answers them", async () => {
    let held: http2.ServerHttp2Stream | undefined;
    let session: http2.Http2Session | undefined;
    scripted.handler = (s) => {
      held = s;
      session = s.session;
      s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      s.on("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
    };
    const stream = channel({ keepaliveMs: 50, keepaliveTimeoutMs: 200 }).serverStream(
      "/s/Watch",
      new Uint8Array(),
    );
    await until(() => held !== undefined, "the stream");
    const before = scripted.pings;
    await until(() => scripted.pings > before, "a keepalive ping on the open stream");
    held?.end(frameMessage(Uint8Array.of(4)));
    const { messages, error } = await drain(stream);
    expect(messages.map((m) => [...m])).toEqual([[4]]);
    expect(error).toBeUndefined();
    // grpc-go answers pings on a connection without streams with GOAWAY too_many_pings. A ping
    // sent just before the stream ended may still be on its way: the acknowledgement of a PING of
    // ours comes after every frame the client wrote before it, so count from then.
    await new Promise<void>((acked, failed) => {
      if (!session?.ping((err) => (err ? failed(err) : acked()))) failed(new Error("the PING was not sent"));
    });
    const idle = scripted.pings;
    // The absence of pings for 8 keepalive periods is the behaviour under test: the window is the measure.
    await Bun.sleep(400);
    expect(scripted.pings).toBe(idle);
  });

  test("the server certificate must name the endpoint's IP, whatever name SNI sends", async () => {
    const other = await ScriptedServer.start(
      ca,
      await ca.issue({ cn: "elsewhere", usage: "server", ips: ["10.9.9.9"], dns: ["talos"] }),
    );
    try {
      const e = await failure(channel({ port: other.port }).unary("/s/M", new Uint8Array()));
      expect([e.code, e.details]).toEqual([GrpcStatus.UNAVAILABLE, expect.stringContaining("127.0.0.1")]);
      expect(other.sessions.size + other.accepted).toBe(0);
    } finally {
      other.stop();
    }
  });

  test("keepalive: a connection that stops answering is dropped and its streams fail UNAVAILABLE", async () => {
    const proxy = await new BlackHoleProxy(scripted.port).listen();
    try {
      scripted.handler = (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" });
        s.write(frameMessage(Uint8Array.of(1)));
      };
      const ch = channel({ port: proxy.port, keepaliveMs: 100, keepaliveTimeoutMs: 200 });
      const stream = ch.serverStream("/s/Watch", new Uint8Array());
      expect(await stream.next()).toBeDefined();
      proxy.frozen = true;
      const e = await failure(stream.next());
      expect([e.code, e.details]).toEqual([GrpcStatus.UNAVAILABLE, expect.stringContaining("keepalive")]);
      expect(ch.state).not.toBe("ready");
    } finally {
      proxy.stop();
    }
  });

  test("a failed connect makes the channel failing: calls fail at once until the backoff passed, then it dials again", async () => {
    let connections = 0;
    const refuser = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => refuser.listen(0, "127.0.0.1", () => r()));
    try {
      const ch = channel({
        port: (refuser.address() as net.AddressInfo).port,
        backoff: { initialMs: 400, maxMs: 400 },
        random: () => 1,
      });
      expect((await failure(ch.unary("/s/M", new Uint8Array()))).code).toBe(GrpcStatus.UNAVAILABLE);
      await until(() => ch.state === "failing", "the failing state");
      const fast = await failure(ch.unary("/s/M", new Uint8Array()));
      expect([fast.code, fast.details]).toEqual([
        GrpcStatus.UNAVAILABLE,
        expect.stringContaining("last attempt failed"),
      ]);
      expect(connections).toBe(1);
      await until(() => ch.state === "idle", "the end of the backoff");
      expect((await failure(ch.unary("/s/M", new Uint8Array()))).code).toBe(GrpcStatus.UNAVAILABLE);
      expect(connections).toBe(2);
    } finally {
      refuser.close();
    }
  });

  test("a connection that is never established is dropped after connectTimeoutMs", async () => {
    const silent = net.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
    try {
      const ch = channel({ port: (silent.address() as net.AddressInfo).port, connectTimeoutMs: 200 });
      const stream = ch.serverStream("/s/Watch", new Uint8Array());
      const e = await failure(stream.next());
      expect([e.code, e.details]).toEqual([
        GrpcStatus.UNAVAILABLE,
        expect.stringContaining("not established"),
      ]);
    } finally {
      silent.close();
    }
  });

  test("an idle channel does not keep the process alive", async () => {
    scripted.handler = (s) => reply(s, [Uint8Array.of(5)]);
    const script = `
      const { GrpcChannel } = await import(${JSON.stringify(resolve(import.meta.dir, "../../lib/grpc.ts"))});
      const o = JSON.parse(process.env.GRPC_TEST);
      const ch = new GrpcChannel(o);
      const reply = await ch.unary("/s/M", new Uint8Array(), { timeoutMs: 5000 });
      console.log(JSON.stringify([...reply]));
    `;
    const child = Bun.spawn([process.execPath, "-e", script], {
      env: {
        ...process.env,
        GRPC_TEST: JSON.stringify({
          host: "127.0.0.1",
          port: scripted.port,
          ca: ca.cert,
          cert: clientCert.cert,
          key: clientCert.key,
          servername: "talos",
        }),
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    const timer = setTimeout(() => child.kill(), 15_000);
    const [stdout, stderr, code] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    clearTimeout(timer);
    expect(stderr).toBe("");
    expect(stdout.trim()).toBe("[5]");
    expect(code).toBe(0);
    expect(child.signalCode).toBeNull();
  });
});
