// lib/clientauth.ts: reading the client CA bundle files (what is in them: tests/unit/clientcerts.test.ts).

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadCABundle } from "../../lib/clientauth.ts";
import { createCA } from "../support/pki.ts";

const dir = mkdtempSync(join(tmpdir(), "clientauth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("loadCABundle()", () => {
  test("the certificates of the file", async () => {
    const [a, b] = await Promise.all([createCA("a"), createCA("b")]);
    const file = join(dir, "bundle.crt");
    writeFileSync(file, `${a.cert}\n${b.cert}`);
    expect(loadCABundle(file, "--client-ca-file").map((c) => c.subject)).toEqual(["CN=a", "CN=b"]);
  });

  test("names the flag and the file when it cannot be read or holds no certificate", () => {
    const missing = join(dir, "missing.crt");
    expect(() => loadCABundle(missing, "--client-ca-file")).toThrow(
      new RegExp(`^Cannot read --client-ca-file ${missing}: .*ENOENT`),
    );
    const empty = join(dir, "empty.crt");
    writeFileSync(empty, "");
    expect(() => loadCABundle(empty, "--requestheader-client-ca-file")).toThrow(
      `Cannot use --requestheader-client-ca-file ${empty}: it holds no PEM certificate`,
    );
  });
});
