// The image base for CI: what gcr.io/distroless/base-debian12:nonroot is made of, rebuilt from the
// Debian bookworm packages distroless assembles it from (base-files, netbase, tzdata, media-types,
// libc6, libssl3, and the CA bundle of ca-certificates), plus the files distroless writes itself
// (passwd and group with user nonroot, nsswitch.conf, /tmp, nonroot's home), as a one-layer OCI
// layout per architecture (amd64 and arm64) in one layout with an index. The real base cannot be
// pulled here; `apt-get download` can fetch its packages from the host's Debian mirror.
//
// Cached outside the repository like the test bed, keyed by the package list and this file's
// build recipe: ~/.cache/talos-ccm-testbed/base-debian12-<key>/ (TESTBED_CACHE overrides the
// folder). `bun tests/support/debianbase.ts` builds it and prints its path. Needs root (dpkg-deb
// keeps owners, the home belongs to uid 65532), apt-get and dpkg-deb, and the mirror the first time.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import {
  type Blob,
  indexOf,
  jsonBlob,
  layer,
  MEDIA_TYPES,
  manifestBlob,
  tar,
  treeEntries,
  writeBlobs,
  writeLayoutIndex,
} from "./oci.ts";

/** The Debian packages of distroless base-debian12 (its static layer and the glibc and OpenSSL libraries). */
export const BASE_PACKAGES = [
  "base-files",
  "netbase",
  "tzdata",
  "media-types",
  "libc6",
  "libssl3",
  "ca-certificates",
];

/** The architectures the base is built for: Go's names and Debian's are the same for these two. */
export const BASE_ARCHES = ["amd64", "arm64"] as const;

const NONROOT = 65532;
const PASSWD = [
  "root:x:0:0:root:/root:/sbin/nologin",
  "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin",
  `nonroot:x:${NONROOT}:${NONROOT}:nonroot:/home/nonroot:/sbin/nologin`,
  "",
].join("\n");
const GROUP = ["root:x:0:", "nobody:x:65534:", `nonroot:x:${NONROOT}:`, ""].join("\n");
/** Modification time of every file of the base: 2023-06-10, bookworm's release day. */
const BASE_EPOCH = 1686355200;

function run(cmd: string[], cwd?: string): string {
  const r = spawnSync(cmd[0] as string, cmd.slice(1), { encoding: "utf8", ...(cwd ? { cwd } : {}) });
  if (r.status !== 0) {
    throw new Error(
      `Cannot build the Debian base: ${cmd.join(" ")} failed: ${r.stderr || r.stdout || r.error?.message}`,
    );
  }
  return r.stdout;
}

/** Downloads the packages for `arch` with a private apt state (the host's sources, its lists untouched). */
function download(work: string, arch: string): string[] {
  const state = join(work, `apt-${arch}`);
  const debs = join(work, `debs-${arch}`);
  for (const d of [join(state, "lists", "partial"), join(state, "cache", "archives", "partial"), debs]) {
    mkdirSync(d, { recursive: true });
  }
  writeFileSync(join(state, "status"), "");
  const opts = [
    `-oAPT::Architecture=${arch}`,
    `-oAPT::Architectures::=${arch}`,
    `-oDir::State::Lists=${join(state, "lists")}`,
    `-oDir::Cache=${join(state, "cache")}`,
    `-oDir::State::status=${join(state, "status")}`,
    "-oAPT::Sandbox::User=root",
    "-oDebug::NoLocking=1",
    "-qq",
  ];
  run(["apt-get", ...opts, "update"]);
  run(["apt-get", ...opts, "download", ...BASE_PACKAGES.map((p) => `${p}:${arch}`)], debs);
  return readdirSync(debs)
    .filter((f) => f.endsWith(".deb"))
    .sort()
    .map((f) => join(debs, f));
}

/** The root distroless lays down: the packages' files, its own /etc files and directories. */
function fillRoot(root: string, debs: readonly string[]): void {
  mkdirSync(root, { recursive: true });
  chmodSync(root, 0o755);
  for (const deb of debs) run(["dpkg-deb", "-x", deb, root]);
  // distroless keeps the CA bundle only, as update-ca-certificates would write it.
  const certs = join(root, "usr/share/ca-certificates");
  const pems = run(["find", certs, "-name", "*.crt", "-type", "f"]).split("\n").filter(Boolean).sort();
  mkdirSync(join(root, "etc/ssl/certs"), { recursive: true });
  writeFileSync(
    join(root, "etc/ssl/certs/ca-certificates.crt"),
    pems.map((p) => readFileSync(p, "utf8")).join(""),
  );
  rmSync(certs, { recursive: true, force: true });
  // No package manager and no documentation in distroless.
  for (const d of ["usr/share/doc", "usr/share/man", "usr/share/lintian", "usr/share/info"]) {
    rmSync(join(root, d), { recursive: true, force: true });
  }
  writeFileSync(join(root, "etc/passwd"), PASSWD);
  writeFileSync(join(root, "etc/group"), GROUP);
  writeFileSync(join(root, "etc/nsswitch.conf"), "hosts: files dns\n");
  mkdirSync(join(root, "tmp"), { recursive: true });
  chmodSync(join(root, "tmp"), 0o1777);
  for (const [dir, owner] of [
    ["root", 0],
    ["home/nonroot", NONROOT],
  ] as const) {
    mkdirSync(join(root, dir), { recursive: true });
    chmodSync(join(root, dir), 0o700);
    chownSync(join(root, dir), owner, owner);
  }
}

/** The one-layer image of a root, configured as distroless' nonroot images are. */
function imageOf(root: string, arch: string, packages: string): Blob[] {
  const l = layer(tar(treeEntries(root), BASE_EPOCH));
  const created = new Date(BASE_EPOCH * 1000).toISOString();
  const config = jsonBlob(MEDIA_TYPES.config, {
    created,
    architecture: arch,
    os: "linux",
    config: {
      User: String(NONROOT),
      Env: [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
      ],
      WorkingDir: "/home/nonroot",
    },
    rootfs: { type: "layers", diff_ids: [l.diffId] },
    history: [{ created, created_by: "tests/support/debianbase.ts", comment: packages }],
  });
  const manifest = manifestBlob(config, [l.blob.descriptor]);
  return [l.blob, config, manifest];
}

/** The cache folder of the base: keyed by the package list and this file. */
export function debianBaseDir(): string {
  const cache = process.env.TESTBED_CACHE ?? join(homedir(), ".cache", "talos-ccm-testbed");
  const key = createHash("sha256")
    .update(BASE_PACKAGES.join(","))
    .update(readFileSync(new URL(import.meta.url).pathname))
    .digest("hex")
    .slice(0, 12);
  return join(cache, `base-debian12-${key}`);
}

/**
 * The CI base as an OCI layout (an index of the amd64 and arm64 images), built once and cached.
 * @returns the layout's folder
 * @throws when not root, or apt-get, dpkg-deb or the mirror fail
 */
export function debianBase(): string {
  const dir = debianBaseDir();
  const layout = join(dir, "layout");
  if (existsSync(join(layout, "index.json"))) return layout;
  if (process.getuid?.() !== 0) {
    throw new Error(
      "tests/support/debianbase.ts needs root to build the base (dpkg-deb keeps owners, chown)",
    );
  }
  const work = `${dir}.tmp-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  try {
    const manifests = [];
    const blobs: Blob[] = [];
    for (const arch of BASE_ARCHES) {
      const debs = download(work, arch);
      const packages = debs.map((d) => d.slice(d.lastIndexOf("/") + 1)).join(" ");
      const root = join(work, `root-${arch}`);
      fillRoot(root, debs);
      const image = imageOf(root, arch, packages);
      blobs.push(...image);
      const manifest = image.at(-1) as Blob;
      manifests.push({ ...manifest.descriptor, platform: { architecture: arch, os: "linux" } });
    }
    const index = jsonBlob(MEDIA_TYPES.index, indexOf(manifests));
    writeBlobs(join(work, "layout"), [...blobs, index]);
    writeLayoutIndex(
      join(work, "layout"),
      indexOf([{ ...index.descriptor, annotations: { "org.opencontainers.image.ref.name": "nonroot" } }]),
    );
    // Keep the .deb files (what went in); drop the roots and apt's private state.
    for (const arch of BASE_ARCHES) {
      for (const d of [`root-${arch}`, `apt-${arch}`])
        rmSync(join(work, d), { recursive: true, force: true });
    }
    renameSync(work, dir);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return layout;
}

if (import.meta.main) console.log(debianBase());
