// KubeClient against a peer that accepts and then goes silent, as a connection that died without a
// reset looks: requests and watches must give up instead of holding a worker or an informer forever.
// (Everything else in lib/kube.ts is tested against the real API server in tests/e2e/kube.test.ts.)

import { afterAll, describe, expect, test } from "bun:test";
import { KubeClient } from "../../lib/kube.ts";

const silent = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    if (new URL(req.url).searchParams.has("watch")) {
      // Headers go out, then nothing: the stream stays open without data or an end.
      return new Response(new ReadableStream({ start() {} }), {
        headers: { "content-type": "application/json" },
      });
    }
    return new Promise<Response>(() => {});
  },
});
afterAll(() => silent.stop(true));

const client = () =>
  new KubeClient(
    { server: `http://127.0.0.1:${silent.port}`, auth: { kind: "none" } },
    { qps: 0, requestTimeoutMs: 300, watchGraceMs: 300 },
  );

describe("KubeClient on a silent connection", () => {
  test("request() gives up after requestTimeoutMs", async () => {
    const started = performance.now();
    await expect(client().get("/api/v1/nodes")).rejects.toThrow(
      "Cannot GET /api/v1/nodes: no answer within 300 ms",
    );
    expect(performance.now() - started).toBeLessThan(5000);
  });

  test("watch() gives up when silent past its timeout plus the grace", async () => {
    const events: unknown[] = [];
    const run = async () => {
      for await (const ev of client().watch("/api/v1/nodes", { resourceVersion: "1", timeoutSeconds: 1 }))
        events.push(ev);
    };
    await expect(run()).rejects.toThrow("Cannot watch /api/v1/nodes: no data for 1300 ms");
    expect(events).toEqual([]);
  });

  test("a caller's abort ends a watch quietly", async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const events: unknown[] = [];
    for await (const ev of client().watch("/api/v1/nodes", { resourceVersion: "1", signal: ac.signal }))
      events.push(ev);
    expect(events).toEqual([]);
    expect(ac.signal.aborted).toBe(true);
  });
});
