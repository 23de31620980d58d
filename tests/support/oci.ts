// OCI images without a container engine: a deterministic tar writer, gzip-compressed layers, image
// configs, manifests and indexes as the OCI image spec v1.1 defines them, and reading and writing
// OCI image layouts (a directory with `oci-layout`, `index.json` and `blobs/sha256/`).
//
// Used by build.ts (`--release` assembles the release image on a base given as an OCI layout),
// tests/support/debianbase.ts (the CI base from Debian packages) and the release's tests. Nothing
// here is part of the CCM, hence not in lib/. Deterministic by construction: the caller gives the
// modification time, entries are written sorted by path, gzip headers carry no time or name, and
// JSON is serialized with the key order these functions build; the same inputs give the same
// digests.

import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";

export const MEDIA_TYPES = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  layer: "application/vnd.oci.image.layer.v1.tar",
} as const;

// ---------------------------------------------------------------------------------------------------
// tar

/** One entry of a tar archive. Paths are relative (no leading `/`); a directory's has no trailing `/`. */
export interface TarEntry {
  path: string;
  type: "file" | "dir" | "symlink" | "hardlink";
  /** Permission bits, e.g. 0o555 (setuid, setgid and sticky bits included). */
  mode: number;
  uid: number;
  gid: number;
  /** A file's content. */
  data?: Uint8Array;
  /** A symlink's target, or the path a hard link links to. */
  linkname?: string;
}

const BLOCK = 512;
const TYPEFLAG = { file: "0", hardlink: "1", symlink: "2", dir: "5" } as const;
const encoder = new TextEncoder();

function putString(h: Uint8Array, offset: number, length: number, value: string): void {
  const bytes = encoder.encode(value);
  if (bytes.length > length) throw new Error(`Cannot write tar header: ${JSON.stringify(value)} too long`);
  h.set(bytes, offset);
}

/** An octal field: digits, zero-padded, then NUL. */
function putOctal(h: Uint8Array, offset: number, length: number, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new Error(`Cannot write tar header: bad number ${value}`);
  const digits = value.toString(8);
  if (digits.length > length - 1) throw new Error(`Cannot write tar header: ${value} needs a PAX record`);
  putString(h, offset, length, `${digits.padStart(length - 1, "0")}\0`);
}

/** Splits a path into ustar's prefix (155 bytes) and name (100 bytes) at a `/`, or undefined. */
function ustarName(path: string): { prefix: string; name: string } | undefined {
  if (encoder.encode(path).length <= 100) return { prefix: "", name: path };
  for (let i = path.indexOf("/"); i > 0; i = path.indexOf("/", i + 1)) {
    const prefix = path.slice(0, i);
    const name = path.slice(i + 1);
    if (encoder.encode(prefix).length <= 155 && encoder.encode(name).length <= 100) return { prefix, name };
  }
  return undefined;
}

interface Header {
  name: string;
  prefix: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  typeflag: string;
  linkname: string;
}

function headerBlock(f: Header): Uint8Array {
  const h = new Uint8Array(BLOCK);
  putString(h, 0, 100, f.name);
  putOctal(h, 100, 8, f.mode);
  putOctal(h, 108, 8, f.uid);
  putOctal(h, 116, 8, f.gid);
  putOctal(h, 124, 12, f.size);
  putOctal(h, 136, 12, f.mtime);
  h.fill(0x20, 148, 156); // the checksum counts its own field as spaces
  putString(h, 156, 1, f.typeflag);
  putString(h, 157, 100, f.linkname);
  putString(h, 257, 8, "ustar\u000000");
  putString(h, 345, 155, f.prefix);
  let sum = 0;
  for (const b of h) sum += b;
  putString(h, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return h;
}

/** A PAX record `<length> <key>=<value>\n`, the length counting itself. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  const bodyLength = encoder.encode(body).length;
  let length = bodyLength + String(bodyLength).length;
  if (String(length).length !== String(bodyLength).length) length += 1;
  return `${length}${body}`;
}

function padded(data: Uint8Array): Uint8Array[] {
  const rest = data.length % BLOCK;
  return rest === 0 ? [data] : [data, new Uint8Array(BLOCK - rest)];
}

/** The blocks of one entry: a PAX header when the path or link name does not fit ustar, then ustar. */
function entryBlocks(e: TarEntry, mtime: number): Uint8Array[] {
  const path = e.type === "dir" ? `${e.path}/` : e.path;
  const linkname = e.linkname ?? "";
  if ((e.type === "symlink" || e.type === "hardlink") && linkname === "") {
    throw new Error(`Cannot write tar entry ${e.path}: a link needs a linkname`);
  }
  const data = e.type === "file" ? (e.data ?? new Uint8Array()) : new Uint8Array();
  const split = ustarName(path);
  const records = [
    ...(split ? [] : [paxRecord("path", path)]),
    ...(encoder.encode(linkname).length > 100 ? [paxRecord("linkpath", linkname)] : []),
  ];
  const blocks: Uint8Array[] = [];
  const base = { mode: 0o644, uid: 0, gid: 0, mtime, linkname: "" };
  if (records.length > 0) {
    const pax = encoder.encode(records.join(""));
    const name = `PaxHeaders/${path.slice(-80)}`;
    blocks.push(headerBlock({ ...base, name, prefix: "", size: pax.length, typeflag: "x" }), ...padded(pax));
  }
  blocks.push(
    headerBlock({
      name: split ? split.name : path.slice(0, 100),
      prefix: split ? split.prefix : "",
      mode: e.mode & 0o7777,
      uid: e.uid,
      gid: e.gid,
      size: data.length,
      mtime,
      typeflag: TYPEFLAG[e.type],
      linkname: linkname.slice(0, 100),
    }),
  );
  if (data.length > 0) blocks.push(...padded(data));
  return blocks;
}

/**
 * A POSIX tar archive (ustar, with PAX records for long names) of `entries`, sorted by path, every
 * entry with modification time `mtime`, ending with two zero blocks.
 * @param mtime seconds since the epoch
 * @throws when a path is absolute, repeated, or contains `..`, or a hard link precedes its file
 * @example tar([{ path: "a", type: "file", mode: 0o644, uid: 0, gid: 0, data: new Uint8Array([1]) }], 0).length // 2048
 */
export function tar(entries: readonly TarEntry[], mtime: number): Uint8Array {
  const sorted = [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const blocks: Uint8Array[] = [];
  let previous: string | undefined;
  const written = new Set<string>();
  for (const e of sorted) {
    if (e.path === "" || e.path.startsWith("/") || e.path.split("/").includes("..")) {
      throw new Error(
        `Cannot write tar entry ${JSON.stringify(e.path)}: not a relative path inside the root`,
      );
    }
    if (e.path === previous) throw new Error(`Cannot write tar entry ${e.path}: given twice`);
    if (e.type === "hardlink" && !written.has(e.linkname ?? "")) {
      throw new Error(
        `Cannot write tar entry ${e.path}: it links to ${e.linkname}, which no earlier file is`,
      );
    }
    previous = e.path;
    if (e.type === "file") written.add(e.path);
    blocks.push(...entryBlocks(e, mtime));
  }
  blocks.push(new Uint8Array(BLOCK * 2));
  return Buffer.concat(blocks);
}

/**
 * The entries of a directory tree, as {@link tar} takes them: files, directories, symlinks, and hard
 * links (a file whose inode an earlier path in archive order has), with the tree's owners and modes.
 */
export function treeEntries(root: string): TarEntry[] {
  const found: { entry: TarEntry; inode?: string }[] = [];
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir)) {
      const full = join(dir, name);
      const path = rel === "" ? name : `${rel}/${name}`;
      const st = lstatSync(full);
      const common = { path, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid };
      if (st.isSymbolicLink())
        found.push({ entry: { ...common, type: "symlink", linkname: readlinkSync(full) } });
      else if (st.isDirectory()) {
        found.push({ entry: { ...common, type: "dir" } });
        walk(full, path);
      } else if (st.isFile()) {
        const data = readFileSync(full);
        found.push({
          entry: { ...common, type: "file", data },
          ...(st.nlink > 1 ? { inode: `${st.dev}:${st.ino}` } : {}),
        });
      } else throw new Error(`Cannot archive ${full}: not a file, directory or symlink`);
    }
  };
  walk(root, "");
  found.sort((a, b) => (a.entry.path < b.entry.path ? -1 : 1));
  const firstPath = new Map<string, string>();
  return found.map(({ entry, inode }) => {
    if (inode === undefined) return entry;
    const first = firstPath.get(inode);
    if (first === undefined) {
      firstPath.set(inode, entry.path);
      return entry;
    }
    const { data: _, ...rest } = entry;
    return { ...rest, type: "hardlink", linkname: first };
  });
}

// ---------------------------------------------------------------------------------------------------
// Blobs and descriptors

/** An OCI platform. */
export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
}

/** An OCI content descriptor. */
export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
}

/** Bytes and the descriptor that names them. */
export interface Blob {
  descriptor: Descriptor;
  bytes: Uint8Array;
}

/** `sha256:<hex>` of `bytes`. */
export function digestOf(bytes: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** A blob of `bytes` with media type `mediaType`. */
export function blob(mediaType: string, bytes: Uint8Array, extra: Partial<Descriptor> = {}): Blob {
  return { descriptor: { mediaType, digest: digestOf(bytes), size: bytes.length, ...extra }, bytes };
}

/** A JSON blob: `value` serialized without whitespace, in its own key order. */
export function jsonBlob(mediaType: string, value: unknown, extra: Partial<Descriptor> = {}): Blob {
  return blob(mediaType, encoder.encode(JSON.stringify(value)), extra);
}

/**
 * A gzip-compressed layer of `tarBytes`, and its diff ID (the digest of the uncompressed tar, which
 * the image config lists). The gzip header has no modification time and no name.
 */
export function layer(tarBytes: Uint8Array): { blob: Blob; diffId: string } {
  const gz = gzipSync(tarBytes, { level: 9 });
  return { blob: blob(MEDIA_TYPES.layerGzip, gz), diffId: digestOf(tarBytes) };
}

/** A layer's tar: gunzipped when its media type says gzip. */
export function layerTar(mediaType: string, bytes: Uint8Array): Uint8Array {
  if (mediaType.endsWith("+gzip") || mediaType.endsWith(".tar.gzip")) return gunzipSync(bytes);
  if (mediaType === MEDIA_TYPES.layer || mediaType.endsWith(".tar")) return bytes;
  throw new Error(`Cannot read layer of media type ${mediaType}`);
}

// ---------------------------------------------------------------------------------------------------
// Image config, manifest, index

/** The parts of an OCI image config this module reads and writes. */
export interface ImageConfig {
  created?: string;
  architecture: string;
  os: string;
  variant?: string;
  config?: {
    User?: string;
    Env?: string[];
    Entrypoint?: string[] | null;
    Cmd?: string[] | null;
    WorkingDir?: string;
    Labels?: Record<string, string>;
    [key: string]: unknown;
  };
  rootfs: { type: "layers"; diff_ids: string[] };
  history?: { created?: string; created_by?: string; comment?: string; empty_layer?: boolean }[];
}

/** An OCI image manifest. */
export interface ImageManifest {
  schemaVersion: 2;
  mediaType: typeof MEDIA_TYPES.manifest;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

/** An OCI image index. */
export interface ImageIndex {
  schemaVersion: 2;
  mediaType: typeof MEDIA_TYPES.index;
  manifests: Descriptor[];
  annotations?: Record<string, string>;
}

/** An image manifest blob for a config and its layers. */
export function manifestBlob(
  config: Blob,
  layers: readonly Descriptor[],
  annotations?: Record<string, string>,
): Blob {
  const m: ImageManifest = {
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.manifest,
    config: config.descriptor,
    layers: [...layers],
    ...(annotations ? { annotations } : {}),
  };
  return jsonBlob(MEDIA_TYPES.manifest, m);
}

/** An image index of `manifests` (each descriptor with its platform). */
export function indexOf(manifests: readonly Descriptor[], annotations?: Record<string, string>): ImageIndex {
  return {
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.index,
    manifests: [...manifests],
    ...(annotations ? { annotations } : {}),
  };
}

// ---------------------------------------------------------------------------------------------------
// Layouts

/** The content of `oci-layout`. */
export const OCI_LAYOUT = { imageLayoutVersion: "1.0.0" };

/** Path of a blob in a layout. */
export function blobPath(layoutDir: string, digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new Error(`Cannot read blob ${digest}: not a sha256 digest`);
  return join(layoutDir, "blobs", "sha256", m[1] as string);
}

/** A blob of a layout, its digest and size checked. */
export function readBlob(layoutDir: string, d: Pick<Descriptor, "digest" | "size">): Uint8Array {
  const bytes = readFileSync(blobPath(layoutDir, d.digest));
  if (bytes.length !== d.size || digestOf(bytes) !== d.digest) {
    throw new Error(`Cannot read blob ${d.digest} of ${layoutDir}: its content does not match`);
  }
  return bytes;
}

/** A JSON blob of a layout. */
export function readJsonBlob<T>(layoutDir: string, d: Descriptor): T {
  return JSON.parse(new TextDecoder().decode(readBlob(layoutDir, d))) as T;
}

/** An image of a layout: its manifest, config, and the manifest's descriptor. */
export interface LayoutImage {
  descriptor: Descriptor;
  manifest: ImageManifest;
  config: ImageConfig;
}

function imagesUnder(layoutDir: string, d: Descriptor, out: LayoutImage[]): void {
  if (d.mediaType === MEDIA_TYPES.index || d.mediaType.endsWith("manifest.list.v2+json")) {
    for (const child of readJsonBlob<ImageIndex>(layoutDir, d).manifests) imagesUnder(layoutDir, child, out);
  } else if (d.mediaType === MEDIA_TYPES.manifest || d.mediaType.endsWith("manifest.v2+json")) {
    const manifest = readJsonBlob<ImageManifest>(layoutDir, d);
    out.push({ descriptor: d, manifest, config: readJsonBlob<ImageConfig>(layoutDir, manifest.config) });
  }
}

/** Every image of a layout, through nested indexes; each manifest's config read. */
export function layoutImages(layoutDir: string): LayoutImage[] {
  const index = JSON.parse(readFileSync(join(layoutDir, "index.json"), "utf8")) as ImageIndex;
  const out: LayoutImage[] = [];
  for (const d of index.manifests) imagesUnder(layoutDir, d, out);
  return out;
}

/**
 * The image of a layout for one platform, by its config's `os` and `architecture`.
 * @throws when the layout has none, or more than one
 */
export function layoutImage(layoutDir: string, os: string, architecture: string): LayoutImage {
  const found = layoutImages(layoutDir).filter(
    (i) => i.config.os === os && i.config.architecture === architecture,
  );
  if (found.length !== 1) {
    throw new Error(`Cannot find the ${os}/${architecture} image of ${layoutDir}: ${found.length} found`);
  }
  return found[0] as LayoutImage;
}

/** Writes blobs (each once) into a layout's blob store. */
export function writeBlobs(layoutDir: string, blobs: readonly Blob[]): void {
  mkdirSync(join(layoutDir, "blobs", "sha256"), { recursive: true });
  for (const b of blobs) writeFileSync(blobPath(layoutDir, b.descriptor.digest), b.bytes);
}

/** Writes `oci-layout` and `index.json` of a layout whose blobs are written. */
export function writeLayoutIndex(layoutDir: string, index: ImageIndex): void {
  mkdirSync(layoutDir, { recursive: true });
  writeFileSync(join(layoutDir, "oci-layout"), JSON.stringify(OCI_LAYOUT));
  writeFileSync(join(layoutDir, "index.json"), JSON.stringify(index));
}
