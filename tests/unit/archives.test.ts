// tests/support/archives.ts and the pins of tests/support/pins.ts: Go's dirhash of a tree, the
// lookup order (cache, mirror, download into the cache), and the errors for a tree that does not
// match its pin or an upstream that does not answer, against a local HTTP server on loopback.

import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import {
  ArchiveError,
  type ArchiveSources,
  archiveSources,
  extractArchive,
  treeHash,
} from "../support/archives.ts";
import { ARCHIVE_PINS, type ArchivePin, archivePin } from "../support/pins.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "talos-ccm-archives-unit-"));
  dirs.push(d);
  return d;
}
const sha256hex = (s: string) => createHash("sha256").update(s).digest("hex");

/** Writes `files` (path → contents) under `dir`. */
function writeTree(dir: string, files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
}

/** A .tar.gz of `files` under one top-level folder `top`. */
function tarball(top: string, files: Record<string, string>): Buffer {
  const d = tempDir();
  writeTree(join(d, top), files);
  const out = join(d, "out.tar.gz");
  const r = spawnSync("tar", ["-czf", out, "-C", d, top]);
  if (r.status !== 0) throw new Error(`tar failed: ${r.stderr}`);
  return readFileSync(out);
}

describe("treeHash()", () => {
  test("is Go's dirhash Hash1: sorted '<sha256>  <path>' lines, byte order, relative paths", () => {
    const dir = tempDir();
    // "a-b" sorts before "a/b" as bytes ('-' < '/'), though a walk meets folder "a" first;
    // U+FF01 (UTF-8 EF BC 81) sorts before U+1F600 (F0 9F 98 80) as bytes, after it as UTF-16.
    const files = { "a/b": "1", "a-b": "2", "\u{1F600}": "3", "\uFF01": "4", "z/y/x.go": "package x\n" };
    writeTree(dir, files);
    const order = ["a-b", "a/b", "z/y/x.go", "\uFF01", "\u{1F600}"];
    const summary = order.map((p) => `${sha256hex(files[p as keyof typeof files])}  ${p}\n`).join("");
    const want = `h1:${createHash("sha256").update(summary).digest("base64")}`;
    expect(treeHash(dir)).toBe(want);
  });

  test("ignores empty folders and file modes; fails on a symlink", () => {
    const a = tempDir();
    const b = tempDir();
    writeTree(a, { "x/y": "1" });
    writeTree(b, { "x/y": "1" });
    mkdirSync(join(b, "empty"));
    spawnSync("chmod", ["755", join(b, "x", "y")]);
    expect(treeHash(b)).toBe(treeHash(a));
    spawnSync("ln", ["-s", "x/y", join(b, "link")]);
    expect(() => treeHash(b)).toThrow("Cannot hash link: not a regular file");
  });
});

describe("the pins", () => {
  test("every pin names its upstream release archive at its tag, and an h1: tree hash", () => {
    for (const [name, pin] of Object.entries(ARCHIVE_PINS) as Array<[string, ArchivePin]>) {
      expect(pin.name).toBe(name);
      expect(pin.url.startsWith(`https://${pin.project}/archive/`)).toBe(true);
      expect(pin.url).toMatch(
        /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+\/archive\/refs\/tags\/v\d+\.\d+\.\d+\.tar\.gz$/,
      );
      expect(pin.url.endsWith(`/${pin.version}.tar.gz`)).toBe(true);
      expect(pin.file).toBe(`${pin.url.split("/")[4]}-${pin.version.slice(1)}.tar.gz`);
      expect(pin.mirrorPath).toBe(`${name}/${pin.file}`);
      expect(pin.tree).toMatch(/^h1:[A-Za-z0-9+/]{43}=$/);
    }
    expect(Object.values(ARCHIVE_PINS).map((p) => `${p.name} ${p.version}`)).toEqual([
      "exoscale-ccm v0.34.0",
      "oxide-ccm v0.7.1",
    ]);
  });

  test("archivePin() names the pinned ones when asked for another", () => {
    expect(archivePin("oxide-ccm").version).toBe("v0.7.1");
    expect(() => archivePin("nope")).toThrow("Cannot find archive nope: pinned are exoscale-ccm, oxide-ccm");
  });

  test("archiveSources() reads TESTBED_CACHE and SHARED_FIXTURES, else ~/.cache and ../shared/fixtures", () => {
    // Paths under a temporary folder: the repository names no absolute path of any machine.
    const base = tmpdir();
    const cache = join(base, "c");
    const mirror = join(base, "m");
    const home = join(base, "h");
    const repo = join(base, "r", "repo");
    expect(archiveSources({ TESTBED_CACHE: cache, SHARED_FIXTURES: mirror }, repo)).toMatchObject({
      cacheDir: join(cache, "archives"),
      mirrorDir: mirror,
    });
    expect(archiveSources({ HOME: home }, repo)).toMatchObject({
      cacheDir: join(home, ".cache", "talos-ccm-testbed", "archives"),
      mirrorDir: join(base, "r", "shared", "fixtures"),
    });
  });
});

describe("extractArchive()", () => {
  const tree = {
    "go.mod": "module example.com/ccm\n",
    "main.go": "package main\n",
    "manifests/rbac.yaml": "kind: x\n",
  };
  const good = tarball("ccm-1.0.0", tree);
  // The forge names the folder otherwise: same tree, same hash.
  const fromForge = tarball("ccm-v1.0.0-4c36ad5", tree);
  const tampered = tarball("ccm-1.0.0", { ...tree, "main.go": "package main // changed\n" });
  const goodHash = (() => {
    const d = tempDir();
    writeTree(d, tree);
    return treeHash(d);
  })();

  const requests: string[] = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const path = new URL(req.url).pathname;
      requests.push(path);
      if (path === "/good.tar.gz") return new Response(fromForge);
      if (path === "/tampered.tar.gz") return new Response(tampered);
      return new Response("not found", { status: 404 });
    },
  });
  afterAll(() => server.stop(true));
  const base = `http://127.0.0.1:${server.port}`;

  const pin = (url: string): ArchivePin => ({
    name: "ccm",
    title: "Example CCM",
    project: "example.com/ccm",
    licence: "MIT",
    version: "v1.0.0",
    url,
    file: "ccm-1.0.0.tar.gz",
    mirrorPath: "ccm/ccm-1.0.0.tar.gz",
    tree: goodHash,
  });
  let sources: ArchiveSources;
  beforeEach(() => {
    requests.length = 0;
    const d = tempDir();
    sources = {
      cacheDir: join(d, "cache", "archives"),
      mirrorDir: join(d, "mirror"),
      downloadTimeoutMs: 10_000,
    };
  });
  const putInCache = (bytes: Buffer) => writeFileAt(join(sources.cacheDir, "ccm-1.0.0.tar.gz"), bytes);
  const putInMirror = (bytes: Buffer) =>
    writeFileAt(join(sources.mirrorDir, "ccm", "ccm-1.0.0.tar.gz"), bytes);
  function writeFileAt(path: string, bytes: Buffer): void {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, bytes);
  }
  /** The ArchiveError extractArchive rejects with. */
  async function failure(p: ArchivePin): Promise<ArchiveError> {
    try {
      await extractArchive(p, sources, join(tempDir(), "x"));
    } catch (e) {
      expect(e).toBeInstanceOf(ArchiveError);
      return e as ArchiveError;
    }
    throw new Error("extractArchive resolved");
  }
  /** The error names the file, the URL and both ways to provide it. */
  function namesTheWays(e: ArchiveError, p: ArchivePin): void {
    expect(e.message).toContain(p.url);
    expect(e.message).toContain("SHARED_FIXTURES");
    expect(e.message).toContain(join(sources.mirrorDir, p.mirrorPath));
    expect(e.message).toContain(join(sources.cacheDir, p.file));
  }

  test("the forge's archive, the tree under another folder name, verifies", async () => {
    const dest = join(tempDir(), "x");
    const r = await extractArchive(pin(`${base}/good.tar.gz`), sources, dest);
    expect(r.from).toBe("download");
    expect(r.root).toBe(join(dest, "ccm-v1.0.0-4c36ad5"));
    expect(readFileSync(join(r.root, "manifests/rbac.yaml"), "utf8")).toBe("kind: x\n");
  });

  test("looks in the cache first, then the mirror, then downloads into the cache", async () => {
    const p = pin(`${base}/good.tar.gz`);
    putInMirror(good);
    putInCache(good);
    expect((await extractArchive(p, sources, join(tempDir(), "x"))).from).toBe("cache");
    rmSync(sources.cacheDir, { recursive: true });
    const fromMirror = await extractArchive(p, sources, join(tempDir(), "x"));
    expect(fromMirror).toMatchObject({ from: "mirror", archive: join(sources.mirrorDir, p.mirrorPath) });
    expect(requests).toEqual([]);
    rmSync(sources.mirrorDir, { recursive: true });
    const downloaded = await extractArchive(p, sources, join(tempDir(), "x"));
    expect(downloaded).toMatchObject({ from: "download", archive: join(sources.cacheDir, p.file) });
    expect(requests).toEqual(["/good.tar.gz"]);
    // Kept: the next run finds it in the cache and asks nobody.
    expect((await extractArchive(p, sources, join(tempDir(), "x"))).from).toBe("cache");
    expect(requests).toEqual(["/good.tar.gz"]);
  });

  test("a download whose tree does not match fails, naming the file and the ways, and keeps nothing", async () => {
    const p = pin(`${base}/tampered.tar.gz`);
    const e = await failure(p);
    expect(e.code).toBe("mismatch");
    expect(e.message).toContain(`its tree hashes to h1:`);
    expect(e.message).toContain(`the pin (tests/support/pins.ts) says ${goodHash}`);
    namesTheWays(e, p);
    expect(existsSync(sources.cacheDir) ? readdirSync(sources.cacheDir) : []).toEqual([]);
  });

  test("a mismatch in the cache or the mirror fails naming that file; it is not passed over", async () => {
    const p = pin(`${base}/good.tar.gz`);
    putInMirror(tampered);
    const inMirror = await failure(p);
    expect(inMirror.code).toBe("mismatch");
    expect(inMirror.message).toContain(
      `Cannot use ${join(sources.mirrorDir, p.mirrorPath)} as Example CCM v1.0.0`,
    );
    putInCache(tampered);
    const inCache = await failure(p);
    expect(inCache.message).toContain(`Cannot use ${join(sources.cacheDir, p.file)} as Example CCM v1.0.0`);
    namesTheWays(inCache, p);
    expect(requests).toEqual([]);
  });

  test("an upstream that answers 404, or does not listen, fails naming the file, the URL and the ways", async () => {
    const missing = pin(`${base}/missing.tar.gz`);
    const e404 = await failure(missing);
    expect(e404.code).toBe("unreachable");
    expect(e404.message).toContain(
      `Cannot download ccm-1.0.0.tar.gz (Example CCM v1.0.0) from ${missing.url}: HTTP 404`,
    );
    namesTheWays(e404, missing);
    // A port nothing listens on: a server's, once stopped.
    const gone = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const url = `http://127.0.0.1:${gone.port}/ccm.tar.gz`;
    await gone.stop(true);
    const refused = await failure(pin(url));
    expect(refused.code).toBe("unreachable");
    expect(refused.message).toContain(`from ${url}: `);
    namesTheWays(refused, pin(url));
  });

  test("an archive of no single top-level folder fails", async () => {
    const d = tempDir();
    writeTree(d, { a: "1", b: "2" });
    const flat = join(d, "flat.tar.gz");
    spawnSync("tar", ["-czf", flat, "-C", d, "a", "b"]);
    putInCache(readFileSync(flat));
    const e = await failure(pin(`${base}/good.tar.gz`));
    expect(e.code).toBe("unpack");
    expect(e.message).toContain("it must hold one top-level folder, not a, b");
  });
});
