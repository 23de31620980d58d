// lib/talosconfig.ts: the search order, TALOS_ENDPOINTS, validation of the current context and its
// PEM material (Talos' Ed25519 key label), endpoint parsing, and errors naming the file and how
// to enable Talos API access.

import { beforeAll, describe, expect, test } from "bun:test";
import { stringify } from "yaml";
import {
  DEFAULT_PORT,
  endpointTarget,
  fixKeyLabel,
  loadTalosConfig,
  parseEndpoint,
  parseTalosConfig,
  SERVICE_ACCOUNT_TALOSCONFIG,
  talosConfigCandidates,
} from "../../lib/talosconfig.ts";
import { TalosConfigError } from "../../lib/taloserrors.ts";
import { createCA, type KeyPair } from "../support/pki.ts";

const b64 = (s: string) => Buffer.from(s).toString("base64");

let ca: string;
let leaf: KeyPair;
let other: KeyPair;

beforeAll(async () => {
  const osCA = await createCA("talos", "ed25519");
  ca = osCA.cert;
  leaf = await osCA.issue({
    cn: "ccm",
    o: ["os:reader", "os:operator"],
    usage: "client",
    keyType: "ed25519",
    keyLabel: "ED25519 PRIVATE KEY",
    hours: 6,
  });
  other = await osCA.issue({ cn: "x", usage: "client", keyType: "ed25519" });
});

function talosconfig(ctx: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  return stringify({
    context: "prod",
    contexts: {
      prod: { endpoints: ["10.0.0.2"], ca: b64(ca), crt: b64(leaf.cert), key: b64(leaf.key), ...ctx },
    },
    ...extra,
  });
}

describe("talosConfigCandidates()", () => {
  test.each([
    [{}, "/home/u", ["/home/u/.talos/config", SERVICE_ACCOUNT_TALOSCONFIG]],
    [{ TALOSCONFIG: "/x/tc" }, "/home/u", ["/x/tc", "/home/u/.talos/config", SERVICE_ACCOUNT_TALOSCONFIG]],
    [{ TALOS_HOME: "/th" }, "/home/u", ["/th/config", SERVICE_ACCOUNT_TALOSCONFIG]],
    [{ TALOSCONFIG: "", TALOS_HOME: "" }, "/h", ["/h/.talos/config", SERVICE_ACCOUNT_TALOSCONFIG]],
  ])("env %j → %j", (env, home, want) => {
    expect(talosConfigCandidates(env, home)).toEqual(want);
  });
});

describe("loadTalosConfig()", () => {
  const files = (present: Record<string, string>) => ({
    exists: (p: string) => p in present,
    readFile: (p: string) => present[p] ?? "",
    home: "/home/u",
  });

  test("search order: the first existing candidate wins", () => {
    const text = talosconfig({});
    const all = { "/x/tc": text, "/home/u/.talos/config": text, [SERVICE_ACCOUNT_TALOSCONFIG]: text };
    expect(loadTalosConfig({ env: { TALOSCONFIG: "/x/tc" }, ...files(all) }).path).toBe("/x/tc");
    expect(loadTalosConfig({ env: { TALOSCONFIG: "/missing" }, ...files(all) }).path).toBe(
      "/home/u/.talos/config",
    );
    expect(loadTalosConfig({ env: {}, ...files({ [SERVICE_ACCOUNT_TALOSCONFIG]: text }) }).path).toBe(
      SERVICE_ACCOUNT_TALOSCONFIG,
    );
    expect(loadTalosConfig({ env: {}, path: "/explicit", ...files({ "/explicit": text }) }).path).toBe(
      "/explicit",
    );
  });

  test("TALOS_ENDPOINTS overrides the context's endpoints", () => {
    const cfg = loadTalosConfig({
      env: { TALOSCONFIG: "/tc", TALOS_ENDPOINTS: " 10.1.1.1 , [fd00::1]:50001,," },
      ...files({ "/tc": talosconfig({}) }),
    });
    expect(cfg.endpoints).toEqual([
      { host: "10.1.1.1", port: DEFAULT_PORT },
      { host: "fd00::1", port: 50001 },
    ]);
  });

  test("no file: one error naming every path and how to enable access", () => {
    let err: unknown;
    try {
      loadTalosConfig({ env: { TALOSCONFIG: "/x/tc" }, ...files({}) });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TalosConfigError);
    const msg = (err as Error).message;
    for (const part of ["/x/tc", "/home/u/.talos/config", SERVICE_ACCOUNT_TALOSCONFIG])
      expect(msg).toContain(part);
    expect(msg).toContain("machine.features.kubernetesTalosAPIAccess");
    expect(msg).toContain("os:reader");
    expect(msg).toMatch(/^Cannot load talosconfig/);
  });
});

describe("parseTalosConfig()", () => {
  test("reads the current context: endpoints, PEM material, cluster, roles, expiry", () => {
    const cfg = parseTalosConfig(
      talosconfig({ cluster: "prod-eu", endpoints: ["talos.default", "https://cp1:8443"] }),
      "/tc",
    );
    expect(cfg.context).toBe("prod");
    expect(cfg.endpoints).toEqual([
      { host: "talos.default", port: 50000 },
      { host: "cp1", port: 8443 },
    ]);
    expect(cfg.cluster).toBe("prod-eu");
    expect(cfg.ca).toBe(ca);
    expect(cfg.crt).toBe(leaf.cert);
    expect(cfg.key.split("\n")[0]).toBe("-----BEGIN PRIVATE KEY-----");
    expect(cfg.roles).toEqual(["os:reader", "os:operator"]);
    expect(Math.abs(cfg.certNotAfter.getTime() - (Date.now() + 6 * 3600e3))).toBeLessThan(120e3);
  });

  test("a single context is used when `context` is empty; the legacy `target` is an endpoint", () => {
    const text = stringify({
      contexts: { only: { target: "10.9.9.9", crt: b64(leaf.cert), key: b64(leaf.key) } },
    });
    const cfg = parseTalosConfig(text, "/tc");
    expect(cfg.context).toBe("only");
    expect(cfg.endpoints).toEqual([{ host: "10.9.9.9", port: 50000 }]);
    expect(cfg.ca).toBeUndefined();
    expect(cfg.cluster).toBe("");
  });

  // Texts are built lazily: the certificates exist only after beforeAll.
  test.each([
    ["not YAML", () => "context: [", "not valid YAML"],
    ["not a mapping", () => "42", "not a YAML mapping"],
    ["no contexts", () => "context: x", "no contexts"],
    [
      "unknown context",
      () => talosconfig({}, { context: "dev" }),
      'context "dev" not found (contexts: prod)',
    ],
    ["no endpoints", () => talosconfig({ endpoints: [] }), "has no endpoints"],
    ["bad endpoint", () => talosconfig({ endpoints: ["http://x"] }), "only https://"],
    ["missing crt", () => talosconfig({ crt: "" }), '"crt" is missing'],
    ["missing key", () => talosconfig({ key: "" }), '"key" is missing'],
    ["crt not PEM", () => talosconfig({ crt: b64("hello") }), "not base64-encoded PEM"],
    [
      "crt not a certificate",
      () => talosconfig({ crt: b64("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") }),
      "not a certificate",
    ],
  ])("%s → TalosConfigError naming the file", (_name, text, part) => {
    expect(() => parseTalosConfig(text(), "/etc/tc")).toThrow(TalosConfigError);
    expect(() => parseTalosConfig(text(), "/etc/tc")).toThrow(part);
    expect(() => parseTalosConfig(text(), "/etc/tc")).toThrow("/etc/tc");
  });

  test("a key that does not match the certificate is refused", () => {
    const text = talosconfig({ key: b64(other.key) });
    expect(() => parseTalosConfig(text, "/tc")).toThrow(
      '"key" is unusable: key does not match the certificate',
    );
  });
});

describe("parseEndpoint()", () => {
  test.each([
    ["10.0.0.1", "10.0.0.1", 50000],
    ["10.0.0.1:50001", "10.0.0.1", 50001],
    ["talos.default", "talos.default", 50000],
    ["https://talos.default", "talos.default", 443],
    ["https://1.2.3.4:8443/", "1.2.3.4", 8443],
    ["HTTPS://cp.example.com:6443/path", "cp.example.com", 6443],
    ["[fd00::1]:50000", "fd00::1", 50000],
    ["[fd00::1]", "fd00::1", 50000],
    ["fd00::1", "fd00::1", 50000],
    ["  10.0.0.1  ", "10.0.0.1", 50000],
  ])("%s → %s port %d", (raw, host, port) => {
    expect(parseEndpoint(raw)).toEqual({ host, port });
  });

  test.each([
    "",
    "http://x",
    "grpc://x:1",
    "host:abc",
    "host:0",
    "host:70000",
    "[fd00::1",
    "[fd00::1]x",
    "zz::yy::1",
    ":50000",
  ])("%p is refused", (raw) => {
    expect(() => parseEndpoint(raw)).toThrow(TalosConfigError);
  });

  test("endpointTarget() brackets IPv6", () => {
    expect(endpointTarget({ host: "fd00::1", port: 50000 })).toBe("[fd00::1]:50000");
    expect(endpointTarget({ host: "talos.default", port: 443 })).toBe("talos.default:443");
  });

  test("fixKeyLabel() rewrites only the Ed25519 label", () => {
    expect(fixKeyLabel("-----BEGIN ED25519 PRIVATE KEY-----\nx\n-----END ED25519 PRIVATE KEY-----\n")).toBe(
      "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
    );
    expect(fixKeyLabel("-----BEGIN EC PRIVATE KEY-----")).toBe("-----BEGIN EC PRIVATE KEY-----");
  });
});
