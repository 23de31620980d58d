// The OCI pieces of the release (tests/support/oci.ts): the tar writer checked against GNU tar
// reading what it writes, layers, manifests and indexes against the OCI image spec's shapes and
// digests, and layouts written and read back.

import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import {
  blobPath,
  digestOf,
  indexOf,
  jsonBlob,
  layer,
  layerTar,
  layoutImage,
  layoutImages,
  MEDIA_TYPES,
  manifestBlob,
  readBlob,
  type TarEntry,
  tar,
  treeEntries,
  writeBlobs,
  writeLayoutIndex,
} from "../support/oci.ts";

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "talos-ccm-oci-"));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const bytes = (s: string) => new TextEncoder().encode(s);
const long = `${"d".repeat(60)}/${"e".repeat(60)}/${"f".repeat(90)}`;
const veryLong = "x".repeat(180);

const ENTRIES: TarEntry[] = [
  {
    path: "talos-cloud-controller-manager",
    type: "file",
    mode: 0o555,
    uid: 0,
    gid: 0,
    data: bytes("#!binary\n"),
  },
  { path: "home", type: "dir", mode: 0o755, uid: 0, gid: 0 },
  { path: "home/nonroot", type: "dir", mode: 0o700, uid: 65532, gid: 65532 },
  { path: "tmp", type: "dir", mode: 0o1777, uid: 0, gid: 0 },
  { path: "lib64", type: "symlink", mode: 0o777, uid: 0, gid: 0, linkname: "usr/lib64" },
  { path: long, type: "file", mode: 0o644, uid: 0, gid: 0, data: bytes("prefix and name") },
  { path: veryLong, type: "file", mode: 0o600, uid: 0, gid: 0, data: new Uint8Array(1024).fill(7) },
  {
    path: "u-hard",
    type: "hardlink",
    mode: 0o555,
    uid: 0,
    gid: 0,
    linkname: "talos-cloud-controller-manager",
  },
];

function gnuTar(args: string[], input: Uint8Array, cwd?: string): string {
  const r = spawnSync("tar", args, { input, encoding: "utf8", ...(cwd ? { cwd } : {}) });
  if (r.status !== 0) throw new Error(`tar ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

describe("tar()", () => {
  test("tar() writes what GNU tar lists: sorted paths, modes, owners, the given time, links", () => {
    const archive = tar(ENTRIES, 1_700_000_000);
    const listing = gnuTar(["--numeric-owner", "--full-time", "-tvf", "-"], archive, undefined)
      .trim()
      .split("\n")
      .map((l) => l.replace(/\s+/g, " "));
    expect(listing).toEqual([
      `-rw-r--r-- 0/0 15 2023-11-14 22:13:20 ${long}`,
      "drwxr-xr-x 0/0 0 2023-11-14 22:13:20 home/",
      "drwx------ 65532/65532 0 2023-11-14 22:13:20 home/nonroot/",
      "lrwxrwxrwx 0/0 0 2023-11-14 22:13:20 lib64 -> usr/lib64",
      "-r-xr-xr-x 0/0 9 2023-11-14 22:13:20 talos-cloud-controller-manager",
      "drwxrwxrwt 0/0 0 2023-11-14 22:13:20 tmp/",
      "hr-xr-xr-x 0/0 0 2023-11-14 22:13:20 u-hard link to talos-cloud-controller-manager",
      `-rw------- 0/0 1024 2023-11-14 22:13:20 ${veryLong}`,
    ]);
  });

  test("tar() content extracts byte for byte, a path over 255 bytes through a PAX record", () => {
    const dir = tempDir();
    gnuTar(["-xf", "-"], tar(ENTRIES, 0), dir);
    expect(readFileSync(join(dir, "talos-cloud-controller-manager"), "utf8")).toBe("#!binary\n");
    expect(readFileSync(join(dir, long), "utf8")).toBe("prefix and name");
    expect(readFileSync(join(dir, veryLong))).toEqual(Buffer.alloc(1024, 7));
    expect(readlinkSync(join(dir, "lib64"))).toBe("usr/lib64");
    expect(lstatSync(join(dir, "u-hard")).ino).toBe(
      lstatSync(join(dir, "talos-cloud-controller-manager")).ino,
    );
  });

  test("tar() is deterministic: the order of the entries given does not matter", () => {
    expect(digestOf(tar([...ENTRIES].reverse(), 5))).toBe(digestOf(tar(ENTRIES, 5)));
    expect(digestOf(tar(ENTRIES, 6))).not.toBe(digestOf(tar(ENTRIES, 5)));
  });

  test("tar() ends with two zero blocks and pads every member to 512 bytes", () => {
    const archive = tar([ENTRIES[0] as TarEntry], 0);
    expect(archive.length).toBe(512 * 4);
    expect(archive.subarray(1024).every((b) => b === 0)).toBe(true);
  });

  test.each([
    ["/abs", "an absolute path"],
    ["a/../b", "a path with .."],
    ["", "an empty path"],
  ])("tar() refuses %p (%s)", (path) => {
    expect(() => tar([{ path, type: "dir", mode: 0o755, uid: 0, gid: 0 }], 0)).toThrow(/not a relative path/);
  });

  test("tar() refuses a path given twice and a link without a target", () => {
    const d: TarEntry = { path: "a", type: "dir", mode: 0o755, uid: 0, gid: 0 };
    expect(() => tar([d, d], 0)).toThrow(/given twice/);
    expect(() => tar([{ ...d, type: "symlink" }], 0)).toThrow(/needs a linkname/);
    const file: TarEntry = { path: "b", type: "file", mode: 0o644, uid: 0, gid: 0 };
    expect(() => tar([file, { ...d, type: "hardlink", linkname: "b" }], 0)).toThrow(
      /which no earlier file is/,
    );
  });
});

describe("treeEntries()", () => {
  test("treeEntries() reads files, directories, symlinks and hard links with their modes", () => {
    const root = tempDir();
    mkdirSync(join(root, "b/c"), { recursive: true });
    writeFileSync(join(root, "b/c/file"), "x");
    linkSync(join(root, "b/c/file"), join(root, "a-link"));
    symlinkSync("b/c/file", join(root, "sym"));
    const entries = treeEntries(root).map(({ data, ...e }) => ({ ...e, size: data?.length }));
    expect(entries.map((e) => `${e.type} ${e.path}${e.linkname ? ` -> ${e.linkname}` : ""}`)).toEqual([
      "file a-link",
      "dir b",
      "dir b/c",
      "hardlink b/c/file -> a-link",
      "symlink sym -> b/c/file",
    ]);
    // GNU tar restores the same tree from it.
    const out = tempDir();
    gnuTar(["-xf", "-"], tar(treeEntries(root), 0), out);
    expect(readFileSync(join(out, "b/c/file"), "utf8")).toBe("x");
    expect(lstatSync(join(out, "b/c/file")).ino).toBe(lstatSync(join(out, "a-link")).ino);
  });
});

describe("layers, manifests, indexes", () => {
  test("layer() gzips the tar deterministically and names it by the compressed digest, its diff ID by the tar's", () => {
    const t = tar(ENTRIES, 0);
    const a = layer(t);
    const b = layer(t);
    expect(a.blob.descriptor.digest).toBe(b.blob.descriptor.digest);
    expect(a.blob.descriptor).toEqual({
      mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
      digest: `sha256:${createHash("sha256").update(a.blob.bytes).digest("hex")}`,
      size: a.blob.bytes.length,
    });
    expect(a.diffId).toBe(`sha256:${createHash("sha256").update(t).digest("hex")}`);
    expect(gunzipSync(a.blob.bytes)).toEqual(Buffer.from(t));
    // No modification time in the gzip header (bytes 4-7).
    expect([...a.blob.bytes.subarray(4, 8)]).toEqual([0, 0, 0, 0]);
    expect(layerTar(MEDIA_TYPES.layerGzip, a.blob.bytes)).toEqual(Buffer.from(t));
    expect(() => layerTar("application/vnd.oci.image.layer.v1.tar+zstd", a.blob.bytes)).toThrow(
      /Cannot read layer/,
    );
  });

  test("manifestBlob() and indexOf() have the OCI v1.1 shapes, with descriptors that hash their JSON", () => {
    const config = jsonBlob(MEDIA_TYPES.config, {
      architecture: "arm64",
      os: "linux",
      rootfs: { type: "layers", diff_ids: [] },
    });
    const l = layer(tar(ENTRIES, 0));
    const m = manifestBlob(config, [l.blob.descriptor], { "org.opencontainers.image.version": "0.1.0" });
    expect(JSON.parse(new TextDecoder().decode(m.bytes))).toEqual({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {
        mediaType: "application/vnd.oci.image.config.v1+json",
        digest: config.descriptor.digest,
        size: config.bytes.length,
      },
      layers: [l.blob.descriptor],
      annotations: { "org.opencontainers.image.version": "0.1.0" },
    });
    expect(m.descriptor.digest).toBe(digestOf(m.bytes));
    const platform = { architecture: "arm64", os: "linux" };
    expect(indexOf([{ ...m.descriptor, platform }])).toEqual({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{ ...m.descriptor, platform }],
    });
  });

  test("a layout written is read back through its nested index, per platform, and refuses a changed blob", () => {
    const dir = tempDir();
    const images = ["amd64", "arm64"].map((architecture) => {
      const l = layer(tar([{ path: architecture, type: "dir", mode: 0o755, uid: 0, gid: 0 }], 0));
      const config = jsonBlob(MEDIA_TYPES.config, {
        architecture,
        os: "linux",
        rootfs: { type: "layers", diff_ids: [l.diffId] },
      });
      return { l, config, manifest: manifestBlob(config, [l.blob.descriptor]), architecture };
    });
    const index = jsonBlob(
      MEDIA_TYPES.index,
      indexOf(
        images.map((i) => ({
          ...i.manifest.descriptor,
          platform: { architecture: i.architecture, os: "linux" },
        })),
      ),
    );
    writeBlobs(dir, [...images.flatMap((i) => [i.l.blob, i.config, i.manifest]), index]);
    writeLayoutIndex(dir, indexOf([index.descriptor]));
    expect(JSON.parse(readFileSync(join(dir, "oci-layout"), "utf8"))).toEqual({
      imageLayoutVersion: "1.0.0",
    });
    expect(layoutImages(dir).map((i) => i.config.architecture)).toEqual(["amd64", "arm64"]);
    const arm = layoutImage(dir, "linux", "arm64");
    expect(arm.descriptor.digest).toBe(images[1]?.manifest.descriptor.digest as string);
    expect(() => layoutImage(dir, "linux", "s390x")).toThrow(/0 found/);
    const layerDesc = arm.manifest.layers[0];
    if (!layerDesc) throw new Error("no layer");
    expect(readBlob(dir, layerDesc)).toEqual(Buffer.from(images[1]?.l.blob.bytes as Uint8Array));
    writeFileSync(blobPath(dir, layerDesc.digest), "tampered");
    expect(() => readBlob(dir, layerDesc)).toThrow(/does not match/);
  });
});
