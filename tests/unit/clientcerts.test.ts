// lib/clientcerts.ts's pure decisions. The TLS side (a presented chain reaching the handler) runs in
// tests/unit/serve.test.ts against a real listener; reading the CA files, in tests/unit/clientauth.test.ts.

import { describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import {
  authenticateCertificate,
  certificateUser,
  headerUser,
  parseCABundle,
  type RequestHeaderConfig,
  verifyClientChain,
} from "../../lib/clientcerts.ts";
import { headerValues } from "../../lib/httpsserver.ts";
import { createCA } from "../support/pki.ts";

const cfg: RequestHeaderConfig = {
  cas: [],
  allowedNames: [],
  usernameHeaders: ["x-remote-user", "x-other-user"],
  uidHeaders: ["x-remote-uid"],
  groupHeaders: ["x-remote-group"],
  extraHeaderPrefixes: ["x-remote-extra-"],
};

describe("headerUser()", () => {
  test("takes the first non-blank username of the listed headers, every group value, and each extra key", () => {
    const headers = headerValues([
      "X-Remote-User",
      "  ",
      "X-Other-User",
      "alice",
      "X-Remote-Uid",
      "u-1",
      "X-Remote-Group",
      "a",
      "x-remote-group",
      "b, c",
      "X-Remote-Extra-Scopes",
      "one",
      "X-Remote-Extra-Scopes",
      "two",
      "X-Remote-Extra-Bad%zz",
      "kept as sent",
    ]);
    expect(headerUser(headers, cfg)).toEqual({
      username: "alice",
      uid: "u-1",
      groups: ["a", "b, c"],
      extra: { scopes: ["one", "two"], "bad%zz": ["kept as sent"] },
    });
  });

  test("names nobody without a username header", () => {
    expect(headerUser(headerValues(["X-Remote-Group", "a"]), cfg)).toBeUndefined();
  });
});

describe("verifyClientChain() and authenticateCertificate()", () => {
  test("a chain to a root signed by it, valid now, for client auth; nothing else", async () => {
    const [ca, other] = await Promise.all([createCA("ca"), createCA("other")]);
    const leaf = new X509Certificate((await ca.issue({ cn: "u", usage: "client" })).cert);
    const root = new X509Certificate(ca.cert);
    const otherRoot = new X509Certificate(other.cert);
    const now = new Date();
    expect(verifyClientChain([leaf], [root], now)).toBeUndefined();
    expect(verifyClientChain([leaf], [otherRoot], now)).toBe("signed by an unknown authority");
    expect(verifyClientChain([], [root], now)).toBe("no client certificate");
    expect(verifyClientChain([leaf], [root], new Date(Date.now() + 30 * 86_400_000))).toMatch(
      /is not valid now/,
    );
  });

  test("without configuration or a certificate, the bearer token decides", async () => {
    const ca = await createCA("ca");
    const leaf = new X509Certificate((await ca.issue({ cn: "u", usage: "client" })).cert);
    expect(authenticateCertificate([leaf], new Map(), {}, new Date())).toBeUndefined();
    expect(
      authenticateCertificate([], new Map(), { clientCAs: [new X509Certificate(ca.cert)] }, new Date()),
    ).toBeUndefined();
  });
});

describe("parseCABundle()", () => {
  test("every certificate of the bundle, in order, text around them ignored", async () => {
    const [a, b] = await Promise.all([createCA("a"), createCA("b")]);
    const cas = parseCABundle(`# bundle\n${a.cert}\nbetween\n${b.cert}`, "--client-ca-file ca.crt");
    expect(cas.map((c) => c.subject)).toEqual(["CN=a", "CN=b"]);
  });

  test("refuses a bundle without a certificate, or with a broken one, naming the source", async () => {
    expect(() => parseCABundle("no PEM here", "--client-ca-file /x.crt")).toThrow(
      "Cannot use --client-ca-file /x.crt: it holds no PEM certificate",
    );
    const a = await createCA("a");
    const broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
    expect(() => parseCABundle(`${a.cert}\n${broken}`, "--requestheader-client-ca-file /p.crt")).toThrow(
      /^Cannot use --requestheader-client-ca-file \/p\.crt: certificate 2: /,
    );
  });
});

describe("certificateUser()", () => {
  test("the CN is the username and each O a group; an empty CN is nobody", async () => {
    const ca = await createCA("ca");
    const leaf = new X509Certificate(
      (await ca.issue({ cn: "alice", o: ["dev", "ops"], usage: "client" })).cert,
    );
    expect(certificateUser(leaf)).toEqual({ username: "alice", groups: ["dev", "ops"] });
    const anonymous = new X509Certificate((await ca.issue({ cn: "", usage: "client" })).cert);
    expect(certificateUser(anonymous)).toEqual({ error: "common name of user/client cert cannot be empty" });
  });
});

describe("authenticateCertificate() with a client CA and a front proxy", () => {
  test("a proxy's headers name the user; a client certificate is its CN; anything else is an error", async () => {
    const [clientCA, proxyCA] = await Promise.all([createCA("client-ca"), createCA("proxy-ca")]);
    const proxy = new X509Certificate((await proxyCA.issue({ cn: "front-proxy", usage: "client" })).cert);
    const client = new X509Certificate((await clientCA.issue({ cn: "bob", o: ["g"], usage: "client" })).cert);
    const server = new X509Certificate((await clientCA.issue({ cn: "srv", usage: "server" })).cert);
    const clients = {
      clientCAs: [new X509Certificate(clientCA.cert)],
      requestHeader: { ...cfg, cas: [new X509Certificate(proxyCA.cert)], allowedNames: ["front-proxy"] },
    };
    const now = new Date();
    const named = headerValues(["X-Remote-User", "carol"]);
    expect(authenticateCertificate([proxy], named, clients, now)).toEqual({ user: { username: "carol" } });
    expect(authenticateCertificate([client], named, clients, now)).toEqual({
      user: { username: "bob", groups: ["g"] },
    });
    const picky = { ...clients, requestHeader: { ...clients.requestHeader, allowedNames: ["other"] } };
    expect(authenticateCertificate([proxy], named, picky, now)).toEqual({
      error:
        'front proxy: common name "front-proxy" is not in --requestheader-allowed-names; client certificate: signed by an unknown authority',
    });
    expect(authenticateCertificate([server], named, clients, now)).toEqual({
      error:
        "front proxy: the certificate does not allow client authentication; client certificate: the certificate does not allow client authentication",
    });
  });
});
