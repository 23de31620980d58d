// lib/clientauth.ts's pure decisions. The TLS side (a presented chain reaching the handler) runs in
// tests/unit/serve.test.ts against a real listener.

import { describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import {
  authenticateCertificate,
  headerUser,
  type RequestHeaderConfig,
  verifyClientChain,
} from "../../lib/clientauth.ts";
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
