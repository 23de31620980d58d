// lib/serve.ts without a cluster: the TLS floor, the self-signed certificate's contents, and the
// delegated credential checks (bounded reviews, cache TTLs, which client asks what) against review
// clients scripted here. tests/e2e/runtime.test.ts runs them against the real API server.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import type { KubeApi } from "../../lib/kubeapi.ts";
import { Registry } from "../../lib/metrics.ts";
import { minTlsVersion, type SecureServer, type ServeOptions, startSecureServer } from "../../lib/serve.ts";
import { type CA, createCA, type KeyPair } from "../support/pki.ts";

describe("minTlsVersion()", () => {
  test.each([
    [undefined, "TLSv1.2"],
    ["TLSv1", "TLSv1.2"],
    ["TLSv1.1", "TLSv1.2"],
    ["TLSv1.2", "TLSv1.2"],
    ["TLSv1.3", "TLSv1.3"],
  ] as const)("%p: never below the runtime's TLS 1.2 floor", (min, want) => {
    expect(minTlsVersion(min)).toBe(want);
  });
});

/** A review client: answers each create() with `answer(path, body)`, or holds it while `hold` is set. */
class ScriptedReviews {
  readonly calls: Array<{ path: string; body: unknown }> = [];
  hold = false;
  readonly #held: Array<() => void> = [];
  readonly #counting: Array<{ n: number; resolve: () => void }> = [];
  constructor(readonly answer: (path: string, body: unknown) => unknown) {}
  /** Resolves once `n` calls have been made. */
  called(n: number): Promise<void> {
    if (this.calls.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.#counting.push({ n, resolve }));
  }
  async create<T>(path: string, body: unknown): Promise<T> {
    this.calls.push({ path, body });
    for (const c of this.#counting.filter((c) => this.calls.length >= c.n)) {
      this.#counting.splice(this.#counting.indexOf(c), 1);
      c.resolve();
    }
    if (this.hold) await new Promise<void>((r) => this.#held.push(r));
    return this.answer(path, body) as T;
  }
  release(): void {
    this.hold = false;
    for (const r of this.#held.splice(0)) r();
  }
}

const servers: SecureServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
});

async function serve(opts: Partial<ServeOptions> = {}): Promise<SecureServer> {
  const server = await startSecureServer({
    bindAddress: "127.0.0.1",
    port: 0,
    alwaysAllowPaths: ["/healthz"],
    registry: new Registry(),
    livez: [],
    readyz: [],
    ...opts,
  });
  servers.push(server);
  return server;
}

/** The certificate a new connection to `server` is shown. */
async function servedCertificate(server: SecureServer): Promise<X509Certificate> {
  const raw = await new Promise<Buffer>((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: server.port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate().raw);
      socket.end();
    });
    socket.on("error", reject);
  });
  return new X509Certificate(raw);
}

/** The protocol version `openssl s_client` negotiates with `flag` (e.g. -tls1_2), or "refused". */
async function handshake(server: SecureServer, flag: string): Promise<string> {
  const s = Bun.spawn(["openssl", "s_client", flag, "-connect", `127.0.0.1:${server.port}`, "-brief"], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const out = (await new Response(s.stdout).text()) + (await new Response(s.stderr).text());
  await s.exited;
  return /Protocol version: (\S+)/.exec(out)?.[1] ?? "refused";
}

const get = (server: SecureServer, path: string, token?: string, client?: KeyPair, headers = {}) =>
  fetch(`https://127.0.0.1:${server.port}${path}`, {
    headers: { ...headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
    tls: { rejectUnauthorized: false, ...(client ? { cert: client.cert, key: client.key } : {}) },
  });

/** TokenReviews: tokens "user-<name>" authenticate as <name>; SubjectAccessReviews allow "admin". */
function reviewers() {
  const authentication = new ScriptedReviews((_path, body) => {
    const token = (body as { spec: { token: string } }).spec.token;
    return token.startsWith("user-")
      ? { status: { authenticated: true, user: { username: token.slice(5), groups: ["g"] } } }
      : { status: { authenticated: false } };
  });
  const authorization = new ScriptedReviews((_path, body) => ({
    status: { allowed: (body as { spec: { user: string } }).spec.user === "admin" },
  }));
  const reviews = {
    authentication: authentication as unknown as KubeApi,
    authorization: authorization as unknown as KubeApi,
  };
  return { authentication, authorization, reviews };
}

describe("startSecureServer()", () => {
  test("the self-signed certificate: serverAuth leaf for localhost and the bind address, signed by its own key", async () => {
    const server = await serve();
    const cert = await servedCertificate(server);
    expect(cert.checkIP("127.0.0.1")).toBe("127.0.0.1");
    expect(cert.checkHost("localhost")).toBe("localhost");
    expect(cert.checkIP("10.0.0.1")).toBeUndefined();
    expect(cert.ca).toBe(false);
    expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"]);
    expect(cert.verify(cert.publicKey)).toBe(true);
    const days = (Date.parse(cert.validTo) - Date.parse(cert.validFrom)) / 86_400_000;
    expect(days).toBeGreaterThanOrEqual(365);
  });

  test("the runtime's floor: TLS 1.1 is refused without --tls-min-version, 1.2 and 1.3 are served", async () => {
    const server = await serve();
    expect(await handshake(server, "-tls1_1")).toBe("refused");
    expect(await handshake(server, "-tls1_2")).toBe("TLSv1.2");
    expect(await handshake(server, "-tls1_3")).toBe("TLSv1.3");
  });

  test("--tls-min-version=VersionTLS13 refuses TLS 1.2", async () => {
    const server = await serve({ tlsMinVersion: "TLSv1.3" });
    expect(await handshake(server, "-tls1_2")).toBe("refused");
    expect(await handshake(server, "-tls1_3")).toBe("TLSv1.3");
  });

  test("TokenReviews go to the authentication client, SubjectAccessReviews to the authorization client", async () => {
    const { authentication, authorization, reviews } = reviewers();
    const server = await serve({ reviews });
    expect((await get(server, "/metrics", "user-admin")).status).toBe(200);
    expect((await get(server, "/metrics", "user-bob")).status).toBe(403);
    expect((await get(server, "/metrics", "nobody")).status).toBe(401);
    expect((await get(server, "/metrics")).status).toBe(401);
    expect((await get(server, "/healthz")).status).toBe(200);
    expect(authentication.calls.map((c) => c.path)).toEqual(
      Array(3).fill("/apis/authentication.k8s.io/v1/tokenreviews"),
    );
    expect(authorization.calls.map((c) => c.path)).toEqual(
      Array(2).fill("/apis/authorization.k8s.io/v1/subjectaccessreviews"),
    );
    expect(authorization.calls[0]?.body).toMatchObject({
      spec: { user: "admin", groups: ["g"], nonResourceAttributes: { path: "/metrics", verb: "get" } },
    });
  });

  test("decisions are cached for their TTL: allowed and denied ones each for their own", async () => {
    const { authentication, authorization, reviews } = reviewers();
    const server = await serve({
      reviews,
      cacheTtlMs: { authentication: 60_000, authorized: 60_000, unauthorized: 0 },
    });
    for (let i = 0; i < 3; i++) {
      expect((await get(server, "/metrics", "user-admin")).status).toBe(200);
      expect((await get(server, "/metrics", "user-bob")).status).toBe(403);
    }
    // Two tokens reviewed once each; admin's allow cached, bob's denial (TTL 0) asked every time.
    expect(authentication.calls).toHaveLength(2);
    const asked = authorization.calls.map((c) => (c.body as { spec: { user: string } }).spec.user);
    expect(asked).toEqual(["admin", "bob", "bob", "bob"]);
  });

  test("at most 16 reviews in flight: the next new token gets 429 with retry-after, a cached one still passes", async () => {
    const { authentication, reviews } = reviewers();
    const server = await serve({ reviews });
    expect((await get(server, "/metrics", "user-admin")).status).toBe(200);
    authentication.hold = true;
    const pending = Array.from({ length: 16 }, (_, i) => get(server, "/metrics", `user-u${i}`));
    await authentication.called(17);
    expect(authentication.calls).toHaveLength(17);
    const refused = await get(server, "/metrics", "user-one-too-many");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(authentication.calls).toHaveLength(17);
    expect((await get(server, "/metrics", "user-admin")).status).toBe(200);
    authentication.release();
    expect((await Promise.all(pending)).map((r) => r.status)).toEqual(Array(16).fill(403));
    expect((await get(server, "/metrics", "user-one-too-many")).status).toBe(403);
  });
});

describe("client certificates (--client-ca-file, --requestheader-*)", () => {
  let dir: string;
  let clientCA: CA;
  let proxyCA: CA;
  let otherCA: CA;
  let clientCaFile: string;
  let proxyCaFile: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "serve-client-certs-"));
    [clientCA, proxyCA, otherCA] = await Promise.all([
      createCA("client-ca"),
      createCA("proxy-ca"),
      createCA("other-ca"),
    ]);
    clientCaFile = join(dir, "client-ca.crt");
    proxyCaFile = join(dir, "proxy-ca.crt");
    writeFileSync(clientCaFile, clientCA.cert);
    writeFileSync(proxyCaFile, proxyCA.cert);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const requestHeader = () => ({
    clientCaFile: proxyCaFile,
    allowedNames: ["front-proxy"],
    usernameHeaders: ["x-remote-user"],
    uidHeaders: [],
    groupHeaders: ["x-remote-group"],
    extraHeaderPrefixes: ["x-remote-extra-"],
  });
  const sarUsers = (authorization: ReturnType<typeof reviewers>["authorization"]) =>
    authorization.calls.map((c) => (c.body as { spec: unknown }).spec);

  test("a certificate --client-ca-file signed is the user of its CN in the groups of its O, without a TokenReview", async () => {
    const { authentication, authorization, reviews } = reviewers();
    const server = await serve({ reviews, clientCaFile });
    const admin = await clientCA.issue({ cn: "admin", o: ["ops", "sre"], usage: "client" });
    const bob = await clientCA.issue({ cn: "bob", usage: "client" });
    expect((await get(server, "/metrics", undefined, admin)).status).toBe(200);
    expect((await get(server, "/metrics", undefined, bob)).status).toBe(403);
    expect(authentication.calls).toHaveLength(0);
    expect(sarUsers(authorization)).toMatchObject([
      { user: "admin", groups: ["ops", "sre"], nonResourceAttributes: { path: "/metrics", verb: "get" } },
      { user: "bob", groups: [] },
    ]);
  });

  test("a certificate of another CA, expired, or not for client authentication authenticates nobody; a bearer token still does", async () => {
    const { authorization, reviews } = reviewers();
    const server = await serve({ reviews, clientCaFile });
    const foreign = await otherCA.issue({ cn: "admin", usage: "client" });
    const expired = await clientCA.issue({ cn: "admin", usage: "client", hours: -1 });
    const serverOnly = await clientCA.issue({ cn: "admin", usage: "server" });
    for (const cert of [foreign, expired, serverOnly]) {
      expect((await get(server, "/metrics", undefined, cert)).status).toBe(401);
    }
    expect((await get(server, "/metrics", "user-admin", foreign)).status).toBe(200);
    expect(sarUsers(authorization)).toHaveLength(1);
  });

  test("a front proxy whose CN is allowed names the user, UID-less, with groups and extra, in headers", async () => {
    const { authentication, authorization, reviews } = reviewers();
    const server = await serve({ reviews, requestHeader: requestHeader() });
    const proxy = await proxyCA.issue({ cn: "front-proxy", usage: "client" });
    const res = await get(server, "/metrics", undefined, proxy, {
      "X-Remote-User": "admin",
      "X-Remote-Group": "team-a",
      "X-Remote-Extra-Scopes%2Fread": "metrics",
    });
    expect(res.status).toBe(200);
    expect(authentication.calls).toHaveLength(0);
    expect(sarUsers(authorization)).toMatchObject([
      { user: "admin", groups: ["team-a"], extra: { "scopes/read": ["metrics"] } },
    ]);
  });

  test("headers count only from an allowed front proxy: another CN, another CA or a client certificate is not trusted with them", async () => {
    const { authorization, reviews } = reviewers();
    const server = await serve({ reviews, requestHeader: requestHeader(), clientCaFile });
    const asAdmin = { "X-Remote-User": "admin" };
    const intruder = await proxyCA.issue({ cn: "intruder", usage: "client" });
    const foreignProxy = await otherCA.issue({ cn: "front-proxy", usage: "client" });
    const bob = await clientCA.issue({ cn: "bob", usage: "client" });
    expect((await get(server, "/metrics", undefined, intruder, asAdmin)).status).toBe(401);
    expect((await get(server, "/metrics", undefined, foreignProxy, asAdmin)).status).toBe(401);
    expect((await get(server, "/metrics", undefined, undefined, asAdmin)).status).toBe(401);
    // A client certificate is its own user, whatever the headers say.
    expect((await get(server, "/metrics", undefined, bob, asAdmin)).status).toBe(403);
    expect(sarUsers(authorization)).toMatchObject([{ user: "bob" }]);
  });

  test.each([
    ["Bun.serve", false],
    ["node:tls", true],
  ])(
    "reload() serves changed --tls-cert-file/--tls-private-key-file files to new connections (%s)",
    async (_, withCAs) => {
      const ca = await createCA("serving-ca");
      const [first, second] = await Promise.all([
        ca.issue({ cn: "first", usage: "server", ips: ["127.0.0.1"] }),
        ca.issue({ cn: "second", usage: "server", ips: ["127.0.0.1"] }),
      ]);
      const certFile = join(dir, `serving-${withCAs}.crt`);
      const keyFile = join(dir, `serving-${withCAs}.key`);
      writeFileSync(certFile, first.cert);
      writeFileSync(keyFile, first.key);
      const server = await serve({ certFile, keyFile, ...(withCAs ? { clientCaFile } : {}) });
      expect((await servedCertificate(server)).subject).toBe("CN=first");
      writeFileSync(certFile, second.cert);
      writeFileSync(keyFile, second.key);
      server.reload();
      expect((await servedCertificate(server)).subject).toBe("CN=second");
      expect((await get(server, "/healthz")).status).toBe(200);
    },
  );

  test("the listener that asks for client certificates keeps the TLS floor and --tls-min-version", async () => {
    const server = await serve({ clientCaFile });
    expect(await handshake(server, "-tls1_1")).toBe("refused");
    expect(await handshake(server, "-tls1_2")).toBe("TLSv1.2");
    const strict = await serve({ clientCaFile, tlsMinVersion: "TLSv1.3" });
    expect(await handshake(strict, "-tls1_2")).toBe("refused");
    expect(await handshake(strict, "-tls1_3")).toBe("TLSv1.3");
  });

  test("reload() applies a changed CA bundle to new connections", async () => {
    const { reviews } = reviewers();
    const file = join(dir, "reloaded-ca.crt");
    writeFileSync(file, clientCA.cert);
    const server = await serve({ reviews, clientCaFile: file });
    const fromOther = await otherCA.issue({ cn: "admin", usage: "client" });
    expect((await get(server, "/metrics", undefined, fromOther)).status).toBe(401);
    writeFileSync(file, otherCA.cert);
    server.reload();
    expect((await get(server, "/metrics", undefined, fromOther)).status).toBe(200);
  });

  test("a CA file that is missing or holds no certificate fails the start, naming the flag", async () => {
    const empty = join(dir, "empty.crt");
    writeFileSync(empty, "not a certificate\n");
    await expect(serve({ clientCaFile: join(dir, "missing.crt") })).rejects.toThrow(/--client-ca-file/);
    await expect(serve({ requestHeader: { ...requestHeader(), clientCaFile: empty } })).rejects.toThrow(
      /--requestheader-client-ca-file .*holds no PEM certificate/,
    );
  });
});
