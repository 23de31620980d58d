// lib/kube.ts without a server: kubeconfig loading (never quoting the file, which holds keys), the
// TLS-off warning, microTime(), and a peer that accepts and then goes silent, as a connection that
// died without a reset looks (requests and watches must give up instead of holding a worker or an
// informer forever). Requests, watches and TLS against the real API server: tests/e2e/kube.test.ts.

import { afterAll, describe, expect, test } from "bun:test";
import { getEventListeners } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeClient, resourceVersionAnswer } from "../../lib/kube.ts";
import { microTime } from "../../lib/kubeapi.ts";
import { KubeConfigError } from "../../lib/kubeconfig.ts";
import { kubeconfigFromFile } from "../../lib/kubeconnection.ts";
import { configureLogging } from "../../lib/log.ts";
import { Registry } from "../../lib/metrics.ts";

const KEY_DATA = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2c2VjcmV0";

function writeKubeconfig(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), "kube-test-")), "kubeconfig");
  writeFileSync(path, text);
  return path;
}

describe("resourceVersionAnswer()", () => {
  test.each([
    [
      '{"kind":"Node","apiVersion":"v1","metadata":{"name":"a","uid":"u","resourceVersion":"123","managedFields":[]}}',
      { resourceVersion: "123" },
    ],
    ['{"metadata":{"resourceVersion":"7"},"status":{"x":{"resourceVersion":"8"}}}', { resourceVersion: "7" }],
    ['{"metadata":{"name":"a"}}', {}],
    ["", {}],
    ['{"metadata":{"resourceVersion":"1\\"2"}}', {}],
  ])("resourceVersionAnswer(%p)", (text, metadata) => {
    expect(resourceVersionAnswer(text)).toEqual({ metadata });
  });
});

describe("microTime()", () => {
  test.each([
    [0, "1970-01-01T00:00:00.000000Z"],
    [Date.UTC(2024, 1, 29, 23, 59, 58, 123), "2024-02-29T23:59:58.123000Z"],
  ])("microTime(%p) = %p", (ms, text) => {
    expect(microTime(ms)).toBe(text);
  });
});

describe("kubeconfigFromFile()", () => {
  test("kubeconfigFromFile() resolves the current context's server, CA, client certificate and token", () => {
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    const path = writeKubeconfig(
      [
        "apiVersion: v1",
        "current-context: c",
        "contexts: [{ name: c, context: { cluster: k, user: u } }]",
        `clusters: [{ name: k, cluster: { server: "https://10.0.0.1:6443/", certificate-authority-data: ${b64("CA")} } }]`,
        `users: [{ name: u, user: { client-certificate-data: ${b64("CRT")}, client-key-data: ${b64("KEY")}, token: t0k } }]`,
      ].join("\n"),
    );
    expect(kubeconfigFromFile(path)).toEqual({
      server: "https://10.0.0.1:6443",
      ca: "CA",
      cert: "CRT",
      key: "KEY",
      auth: { kind: "token", token: "t0k" },
    });
  });

  test("kubeconfigFromFile() reports a YAML error with its line, never quoting the file", () => {
    const path = writeKubeconfig(
      [
        "apiVersion: v1",
        "users:",
        "- name: admin",
        "  user:",
        `    client-key-data: ${KEY_DATA}`,
        "   token: x: y",
      ].join("\n"),
    );
    let caught: unknown;
    try {
      kubeconfigFromFile(path);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(KubeConfigError);
    const message = (caught as Error).message;
    expect(message).toStartWith(`Cannot load kubeconfig ${path} (line 6): `);
    expect(message).not.toContain(KEY_DATA);
    expect(((caught as Error).cause as Error).message).not.toContain(KEY_DATA);
  });
});

describe("KubeClient", () => {
  test("new KubeClient() warns when the kubeconfig turns TLS verification off, and only then", () => {
    const lines: string[] = [];
    configureLogging({ write: (line) => lines.push(line) });
    try {
      for (const insecureSkipVerify of [false, true]) {
        const client = new KubeClient(
          { server: "https://10.0.0.1:6443", auth: { kind: "none" }, insecureSkipVerify },
          { registry: new Registry() },
        );
        client.close();
      }
    } finally {
      // Back to what tests/support/preload.ts set up.
      configureLogging({
        write: process.env.TEST_LOG === "1" ? (line) => process.stderr.write(line) : () => {},
      });
    }
    expect(lines.filter((l) => l.includes("TLS verification"))).toEqual([
      expect.stringContaining('"TLS verification of the API server is off (insecure-skip-tls-verify)"'),
    ]);
  });
});

const silent = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    const url = new URL(req.url);
    // The one path that answers at once.
    if (url.pathname === "/version") return Response.json({ major: "1" });
    if (url.pathname === "/api/v1/pods" && url.searchParams.has("watch")) {
      // A bookmark every 200 ms for 2 s, then the end: a live watch, quiet but never silent.
      let n = 0;
      let timer: ReturnType<typeof setInterval>;
      const body = new ReadableStream({
        start(c) {
          timer = setInterval(() => {
            n++;
            const ev = {
              type: "BOOKMARK",
              object: { kind: "Pod", metadata: { resourceVersion: String(n) } },
            };
            c.enqueue(new TextEncoder().encode(`${JSON.stringify(ev)}\n`));
            if (n === 10) {
              clearInterval(timer);
              c.close();
            }
          }, 200);
        },
        cancel() {
          clearInterval(timer);
        },
      });
      return new Response(body, { headers: { "content-type": "application/json" } });
    }
    if (url.searchParams.has("watch")) {
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

  test("request(): a caller's abort ends it with the caller's reason, not as a timeout", async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("shutting down")), 50);
    const err = await client()
      .get("/api/v1/nodes", { signal: ac.signal })
      .catch((e: unknown) => e as Error);
    expect(String(err)).not.toContain("no answer within");
    expect(ac.signal.aborted).toBe(true);
  });

  test("request(): an answered request lets go of the caller's signal (a long-lived one gathers nothing)", async () => {
    const ac = new AbortController();
    const c = client();
    for (let i = 0; i < 20; i++)
      expect(await c.get("/version", { signal: ac.signal })).toEqual({ major: "1" });
    expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
  });

  test("request(): a caller's signal already aborted sends nothing and fails at once", async () => {
    const ac = new AbortController();
    ac.abort(new Error("gone"));
    const started = performance.now();
    await expect(client().get("/api/v1/nodes", { signal: ac.signal })).rejects.toBeDefined();
    expect(performance.now() - started).toBeLessThan(250);
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

  test("watch() lives on while data keeps coming, longer than its timeout plus the grace", async () => {
    const events: unknown[] = [];
    for await (const ev of client().watch("/api/v1/pods", { resourceVersion: "1", timeoutSeconds: 1 }))
      events.push(ev);
    // 2 s of bookmarks against a 1.3 s idle limit: each chunk restarted the clock, so all 10 came.
    expect(events).toHaveLength(10);
    expect(events.at(-1)).toMatchObject({
      type: "BOOKMARK",
      object: { metadata: { resourceVersion: "10" } },
    });
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

describe("KubeClient.watch(): lines split across chunks", () => {
  test("events split in many small chunks, several in one chunk and multi-byte text across chunk edges decode as sent", async () => {
    const events = [
      { type: "ADDED", object: { metadata: { name: "n1", resourceVersion: "1" }, big: "é".repeat(50_000) } },
      { type: "MODIFIED", object: { metadata: { name: "n2", resourceVersion: "2" } } },
      { type: "MODIFIED", object: { metadata: { name: "n3", resourceVersion: "3" } } },
    ];
    const bytes = new TextEncoder().encode(`${events.map((e) => JSON.stringify(e)).join("\n")}\n\n`);
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch() {
        const body = new ReadableStream({
          async start(c) {
            // 1,001-byte pieces (odd, so that 2-byte characters straddle edges), then the rest at once.
            const cut = bytes.length - 200;
            for (let o = 0; o < cut; o += 1001) c.enqueue(bytes.subarray(o, Math.min(o + 1001, cut)));
            c.enqueue(bytes.subarray(cut));
            c.close();
          },
        });
        return new Response(body, { headers: { "content-type": "application/json" } });
      },
    });
    try {
      const c = new KubeClient(
        { server: `http://127.0.0.1:${server.port}`, auth: { kind: "none" } },
        { qps: 0 },
      );
      const got: unknown[] = [];
      for await (const ev of c.watch("/api/v1/nodes", { resourceVersion: "0", timeoutSeconds: 5 }))
        got.push(ev);
      expect(got).toEqual(events);
    } finally {
      server.stop(true);
    }
  });
});
