// Finds a pinned third-party archive (tests/support/pins.ts), verifies it and unpacks it. Looks, in
// order, in the local cache (<TESTBED_CACHE or ~/.cache/talos-ccm-testbed>/archives/<file>), in the
// mirror folder the user names (SHARED_FIXTURES, else ../shared/fixtures beside the repository, at
// the pin's mirrorPath), then downloads it from its upstream URL into the cache. Whatever the source,
// the extracted tree's hash must be the pin's before anything reads it; a mismatch, or a download
// that fails, is an ArchiveError naming the file, the URL and the two ways to provide the archive.
//
//   bun tests/support/archives.ts extract <name> <dest>   # prints the verified tree's folder
//   bun tests/support/archives.ts hash <archive.tar.gz>   # prints the h1: hash a pin records
//   bun tests/support/archives.ts version <name>          # prints the pinned version

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
} from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { type ArchivePin, archivePin } from "./pins.ts";

/** Where archives are looked for; built from the environment by `archiveSources`. */
export interface ArchiveSources {
  /** The cache folder: looked in first, and where downloads go. */
  cacheDir: string;
  /** The mirror folder (holds each archive at its pin's mirrorPath). */
  mirrorDir: string;
  /** How long a download may take, in milliseconds. */
  downloadTimeoutMs: number;
}

/** Where an archive was found. */
export type ArchiveSource = "cache" | "mirror" | "download";

/** Why an archive cannot be used. */
export type ArchiveErrorCode = "mismatch" | "unreachable" | "unpack";

/** An archive that cannot be used: wrong tree, failed download, or not a tar.gz of one folder. */
export class ArchiveError extends Error {
  /** Why. */
  readonly code: ArchiveErrorCode;
  constructor(code: ArchiveErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ArchiveError";
    this.code = code;
  }
}

const DEFAULT_DOWNLOAD_TIMEOUT_MS = 300_000;

/**
 * The sources the environment names: TESTBED_CACHE (else ~/.cache/talos-ccm-testbed) + /archives,
 * SHARED_FIXTURES (else ../shared/fixtures beside the repository).
 *
 * @param env the environment to read (process.env)
 * @param repoRoot the repository's folder
 * @returns the sources
 */
export function archiveSources(env: Record<string, string | undefined>, repoRoot: string): ArchiveSources {
  const cache = env.TESTBED_CACHE || join(env.HOME || homedir(), ".cache", "talos-ccm-testbed");
  return {
    cacheDir: join(cache, "archives"),
    mirrorDir: env.SHARED_FIXTURES || join(repoRoot, "..", "shared", "fixtures"),
    downloadTimeoutMs: DEFAULT_DOWNLOAD_TIMEOUT_MS,
  };
}

/** The two ways to provide an archive by hand, for error messages. */
function howToProvide(pin: ArchivePin, s: ArchiveSources): string {
  return (
    `provide it either by setting SHARED_FIXTURES to a folder holding ${pin.mirrorPath} ` +
    `(now looked for as ${join(s.mirrorDir, pin.mirrorPath)}), ` +
    `or by putting the archive from ${pin.url} at ${join(s.cacheDir, pin.file)}`
  );
}

/**
 * Go's dirhash Hash1 of a folder: "h1:" + base64(sha256 of "<sha256 hex>  <path>\n" for each
 * regular file, sorted by path, paths relative to `dir` with "/").
 *
 * @param dir the folder
 * @returns the h1: hash
 * @throws Error on a symlink or other non-regular file, or a path with a newline
 */
export function treeHash(dir: string): string {
  const files: string[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel))) {
      const path = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, path));
      if (st.isDirectory()) walk(path);
      else if (st.isFile()) files.push(path);
      else throw new Error(`Cannot hash ${path}: not a regular file`);
    }
  };
  walk("");
  // Go sorts the names as byte strings; JavaScript's default sort compares UTF-16 code units, which
  // orders non-BMP characters differently, so compare the UTF-8 bytes.
  files.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const summary = createHash("sha256");
  for (const f of files) {
    if (f.includes("\n")) throw new Error(`Cannot hash ${JSON.stringify(f)}: a path with a newline`);
    summary.update(
      `${createHash("sha256")
        .update(readFileSync(join(dir, f)))
        .digest("hex")}  ${f}\n`,
    );
  }
  return `h1:${summary.digest("base64")}`;
}

/**
 * Unpacks a .tar.gz into `dest` and returns its one top-level folder.
 *
 * @throws ArchiveError (unpack) when tar fails or the archive holds anything but one folder
 */
function unpack(archive: string, dest: string): string {
  mkdirSync(dest, { recursive: true });
  const r = spawnSync("tar", ["-xzf", archive, "-C", dest, "--no-same-owner"], { encoding: "utf8" });
  if (r.status !== 0)
    throw new ArchiveError(
      "unpack",
      `Cannot unpack ${archive}: tar says ${r.stderr.trim() || `status ${r.status}`}`,
    );
  const top = readdirSync(dest).sort();
  const only = top.length === 1 ? join(dest, top[0] as string) : undefined;
  if (!only || !lstatSync(only).isDirectory())
    throw new ArchiveError(
      "unpack",
      `Cannot unpack ${archive}: it must hold one top-level folder, not ${top.join(", ")}`,
    );
  return only;
}

/** Unpacks `archive` into `dest`, checks its tree against the pin, and returns the tree's folder. */
function unpackVerified(pin: ArchivePin, archive: string, dest: string, s: ArchiveSources): string {
  const root = unpack(archive, dest);
  let got: string;
  try {
    got = treeHash(root);
  } catch (e) {
    throw new ArchiveError("unpack", `Cannot verify ${archive}: ${(e as Error).message}`, { cause: e });
  }
  if (got !== pin.tree)
    throw new ArchiveError(
      "mismatch",
      `Cannot use ${archive} as ${pin.title} ${pin.version}: its tree hashes to ${got}, the pin ` +
        `(tests/support/pins.ts) says ${pin.tree}; remove or replace it, and ${howToProvide(pin, s)}`,
    );
  return root;
}

/** Downloads the pin's URL to `to`. @throws ArchiveError (unreachable) */
async function download(pin: ArchivePin, to: string, s: ArchiveSources): Promise<void> {
  const fail = (detail: string, cause?: unknown): never => {
    throw new ArchiveError(
      "unreachable",
      `Cannot download ${pin.file} (${pin.title} ${pin.version}) from ${pin.url}: ${detail}; ${howToProvide(pin, s)}`,
      cause === undefined ? undefined : { cause },
    );
  };
  let res: Response | undefined;
  try {
    res = await fetch(pin.url, { signal: AbortSignal.timeout(s.downloadTimeoutMs) });
  } catch (e) {
    fail((e as Error).message, e);
  }
  if (!res?.ok) fail(`HTTP ${res?.status} ${res?.statusText}`);
  try {
    await Bun.write(to, res as Response);
  } catch (e) {
    fail((e as Error).message, e);
  }
}

/**
 * Finds the pinned archive (cache, then mirror, then download into the cache), unpacks it into
 * `dest` and verifies its tree against the pin.
 *
 * @param pin the archive
 * @param s where to look
 * @param dest an empty or missing folder to unpack into
 * @returns the verified tree's folder (inside `dest`), the archive used and where it came from
 * @throws ArchiveError naming the file, the URL and how to provide it
 */
export async function extractArchive(
  pin: ArchivePin,
  s: ArchiveSources,
  dest: string,
): Promise<{ root: string; archive: string; from: ArchiveSource }> {
  const cached = join(s.cacheDir, pin.file);
  if (existsSync(cached))
    return { root: unpackVerified(pin, cached, dest, s), archive: cached, from: "cache" };
  const mirrored = join(s.mirrorDir, pin.mirrorPath);
  if (existsSync(mirrored))
    return { root: unpackVerified(pin, mirrored, dest, s), archive: mirrored, from: "mirror" };
  mkdirSync(s.cacheDir, { recursive: true });
  const partial = `${cached}.download-${process.pid}`;
  try {
    await download(pin, partial, s);
    const root = unpackVerified(pin, partial, dest, s);
    renameSync(partial, cached);
    return { root, archive: cached, from: "download" };
  } finally {
    rmSync(partial, { force: true });
  }
}

if (import.meta.main) {
  const [cmd, a, b] = process.argv.slice(2);
  try {
    if (cmd === "hash" && a) {
      const dest = mkdtempSync(join(tmpdir(), "talos-ccm-archive-hash-"));
      try {
        console.log(treeHash(unpack(a, dest)));
      } finally {
        rmSync(dest, { recursive: true, force: true });
      }
    } else if (cmd === "version" && a) {
      console.log(archivePin(a).version);
    } else if (cmd === "extract" && a && b) {
      const s = archiveSources(process.env, join(import.meta.dir, "..", ".."));
      const r = await extractArchive(archivePin(a), s, b);
      console.error(`archives.ts: ${a} from the ${r.from} (${r.archive}), tree verified`);
      console.log(r.root);
    } else {
      console.error("usage: archives.ts extract <name> <dest> | hash <archive.tar.gz> | version <name>");
      process.exit(2);
    }
  } catch (e) {
    console.error(`archives.ts: ${(e as Error).message}`);
    process.exit(1);
  }
}
