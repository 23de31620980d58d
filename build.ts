// Release build: single-file executables for linux amd64 and arm64 in dist/, with SHA256SUMS; with
// --release, everything a tag publishes, in one folder.
//
//   bun build.ts                  # both targets
//   bun build.ts --target=amd64   # one target (tests build only the host one)
//   bun build.ts --release [--out DIR] [--base OCI-LAYOUT]   # npm run release: the release folder
//   bun build.ts --names          # the names a release is published under (key=value lines)
//
// Each binary is minified, keeps function names (readable stack traces), carries precompiled
// bytecode, splits lazily imported modules into chunks so a disabled controller's code is never
// loaded, ignores .env and bunfig.toml in its working directory, and embeds version and commit.
// The JIT starts 100 times more reluctant, so run-once start-up code stays in the interpreter instead
// of paging in the JIT compilers (measured with `npm run bench`: idle RSS -5 MB, start-up -20 ms;
// costs ~15% more CPU while initializing 1,000 nodes). The binary runs with Bun's --smol: JSC then
// collects garbage at a smaller heap, so the bursts of initializing nodes and approving CSRs (each
// Talos call and API response leaves garbage behind) no longer pile it up before a collection
// (measured with `npm run bench -- --nodes 1000`, three runs each: peak RSS 119.8-120.0 -> 107.7-114.1
// MiB, CPU time unchanged).
// The arm64 runtime comes from the npm package @oven/bun-linux-aarch64 of the same Bun version,
// unpacked from the npm cache, so the cross build needs no network once that package is cached.

import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";
import { CHART_DIR } from "./lib/deployfiles.ts";
import {
  APP_NAME,
  BINARY_PATH,
  defaultImage,
  defaultSettings,
  NONROOT_ID,
  RELEASE_MANIFEST_FILES,
  renderManifests,
} from "./lib/manifests.ts";
import { renderTalosPatch } from "./lib/talospatch.ts";
import {
  type Blob,
  type Descriptor,
  type ImageConfig,
  indexOf,
  jsonBlob,
  type LayoutImage,
  layer,
  layoutImage,
  MEDIA_TYPES,
  manifestBlob,
  readBlob,
  tar,
  treeEntries,
  writeBlobs,
  writeLayoutIndex,
} from "./tests/support/oci.ts";

const root = import.meta.dir;
const dist = join(root, "dist");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  version: string;
  license: string;
};
const bunVersion = Bun.version;
/** JIT tier-up thresholds are scaled by this in the binary (Bun.unsafe.setJITPolicy). */
const JIT_POLICY = 100;

const TARGETS = {
  amd64: { bunTarget: "bun-linux-x64", runtimePackage: "@oven/bun-linux-x64" },
  arm64: { bunTarget: "bun-linux-arm64", runtimePackage: "@oven/bun-linux-aarch64" },
} as const;
/** A release architecture, by its OCI (Go) name. */
export type Arch = keyof typeof TARGETS;
/** The release architectures. */
export const ARCHES = Object.keys(TARGETS) as Arch[];

function run(cmd: string[], opts: { cwd?: string } = {}): string {
  const r = spawnSync(cmd[0] as string, cmd.slice(1), { cwd: opts.cwd ?? root, encoding: "utf8" });
  if (r.status !== 0) {
    throw new Error(`Cannot run ${cmd.join(" ")}: ${r.stderr || r.stdout || r.error?.message}`);
  }
  return r.stdout.trim();
}

function gitCommit(): string {
  if (process.env.BUILD_COMMIT) return process.env.BUILD_COMMIT;
  try {
    const sha = run(["git", "rev-parse", "--short=12", "HEAD"]);
    const dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]) !== "";
    return dirty ? `${sha}-dirty` : sha;
  } catch {
    return "unknown";
  }
}

/**
 * Path of the Bun runtime executable for `arch`. The host runtime is the one running this script;
 * others are unpacked from `npm pack` of the runtime package (served from the npm cache when present).
 */
function runtimeFor(arch: Arch): string | undefined {
  const hostArch = process.arch === "x64" ? "amd64" : process.arch === "arm64" ? "arm64" : undefined;
  if (arch === hostArch) return undefined;
  const { runtimePackage } = TARGETS[arch];
  const cache = join(root, "node_modules", ".cache", `${runtimePackage.replace("/", "+")}-${bunVersion}`);
  const exe = join(cache, "package", "bin", "bun");
  if (existsSync(exe)) return exe;
  mkdirSync(cache, { recursive: true });
  const tgz = run(["npm", "pack", `${runtimePackage}@${bunVersion}`, "--prefer-offline", "--silent"], {
    cwd: cache,
  })
    .split("\n")
    .pop() as string;
  run(["tar", "-xzf", tgz], { cwd: cache });
  rmSync(join(cache, tgz));
  if (!existsSync(exe)) throw new Error(`Cannot find bin/bun in ${runtimePackage}@${bunVersion}`);
  return exe;
}

/** The file name of the executable for `arch`. */
export function binaryName(arch: Arch): string {
  return `${APP_NAME}-linux-${arch}`;
}

/**
 * Builds the executable for `arch` into `outDir`; with `metafile`, also writes the bundler's
 * metafile (its inputs and outputs) there, which the SBOM is made from.
 */
function build(arch: Arch, commit: string, outDir = dist, metafile?: string): string {
  const outfile = join(outDir, binaryName(arch));
  const args = [
    process.execPath,
    "build",
    "--compile",
    `--target=${TARGETS[arch].bunTarget}`,
    "--minify",
    "--keep-names",
    "--bytecode",
    "--format=esm",
    "--splitting",
    `--compile-jit-policy=${JIT_POLICY}`,
    "--compile-exec-argv=--smol",
    "--no-compile-autoload-dotenv",
    "--no-compile-autoload-bunfig",
    `--define=BUILD_VERSION=${JSON.stringify(pkg.version)}`,
    `--define=BUILD_COMMIT=${JSON.stringify(commit)}`,
    ...(metafile ? [`--metafile=${metafile}`] : []),
    "--outfile",
    outfile,
    join(root, "main.ts"),
  ];
  const runtime = runtimeFor(arch);
  if (runtime) args.splice(3, 0, `--compile-executable-path=${runtime}`);
  const r = spawnSync(args[0] as string, args.slice(1), { cwd: root, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`Cannot build ${arch}:\n${r.stdout}\n${r.stderr}`);
  return outfile;
}

function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

// ---------------------------------------------------------------------------------------------------
// The release folder's pure parts

/**
 * A SHA256SUMS file in sha256sum's format (`<hex>  <name>`, binary-safe names only), sorted by name,
 * so `sha256sum --check SHA256SUMS` verifies it.
 * @throws when a name has a backslash or a line break (sha256sum would escape it) or a digest is not hex
 */
export function sha256sums(files: readonly { name: string; sha256: string }[]): string {
  const lines = [...files]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map(({ name, sha256 }) => {
      if (/[\\\n\r]/.test(name) || name === "")
        throw new Error(`Cannot list ${JSON.stringify(name)} in SHA256SUMS`);
      if (!/^[0-9a-f]{64}$/.test(sha256))
        throw new Error(`Cannot list ${name} in SHA256SUMS: bad digest ${sha256}`);
      return `${sha256}  ${name}\n`;
    });
  return lines.join("");
}

/** An entry of package-lock.json's `packages`. */
export interface LockPackage {
  version?: string;
  license?: string;
  integrity?: string;
}

/** The parts of Bun's (esbuild-shaped) metafile the SBOM reads. */
export interface Metafile {
  outputs: Record<string, { inputs: Record<string, { bytesInOutput: number }> }>;
}

/** An npm package in the executable: its package-lock.json key, name, version and license. */
export interface BundledPackage {
  lockKey: string;
  name: string;
  version: string;
  license: string;
  integrity?: string;
}

/**
 * The package-lock.json key (`node_modules/a`, `node_modules/@s/b`, `node_modules/a/node_modules/b`)
 * of the package a bundled source file belongs to, or undefined for the project's own files.
 * @example lockKeyOf("../main/node_modules/@kubernetes/client-node/dist/x.js") // "node_modules/@kubernetes/client-node"
 */
export function lockKeyOf(inputPath: string): string | undefined {
  const path = inputPath.replaceAll("\\", "/");
  const first = path.indexOf("node_modules/");
  if (first < 0) return undefined;
  const last = path.lastIndexOf("node_modules/");
  const rest = path.slice(last + "node_modules/".length).split("/");
  const name = rest[0]?.startsWith("@") ? rest.slice(0, 2).join("/") : rest[0];
  if (!name || (name.startsWith("@") && !name.includes("/"))) return undefined;
  return `${path.slice(first, last)}node_modules/${name}`;
}

/** A package of package-lock.json, its version and license required. */
function lockedPackage(lock: Readonly<Record<string, LockPackage>>, lockKey: string): BundledPackage {
  const entry = lock[lockKey];
  const name = lockKey.slice(lockKey.lastIndexOf("node_modules/") + "node_modules/".length);
  if (!entry?.version || !entry.license) {
    throw new Error(
      `Cannot describe ${lockKey} in the SBOM: package-lock.json has no version or license for it`,
    );
  }
  return {
    lockKey,
    name,
    version: entry.version,
    license: entry.license,
    ...(entry.integrity ? { integrity: entry.integrity } : {}),
  };
}

/**
 * The npm packages whose code is in the bundle: every package one of whose files put bytes into an
 * output (tree-shaken files put none), sorted by lock key.
 * @throws when a package is not in package-lock.json or has no version or license there
 */
export function bundledPackages(
  meta: Metafile,
  lock: Readonly<Record<string, LockPackage>>,
): BundledPackage[] {
  const keys = new Set<string>();
  for (const output of Object.values(meta.outputs)) {
    for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
      const key = lockKeyOf(input);
      if (key !== undefined && bytesInOutput > 0) keys.add(key);
    }
  }
  return [...keys].sort().map((k) => lockedPackage(lock, k));
}

/**
 * The package URL of an npm package (the scope's `@` percent-encoded).
 * @example purl("@kubernetes/client-node", "2.0.1") // "pkg:npm/%40kubernetes/client-node@2.0.1"
 */
export function purl(name: string, version: string): string {
  return `pkg:npm/${name.replace(/^@/, "%40")}@${encodeURIComponent(version)}`;
}

/** A CycloneDX license choice: an SPDX id, or an expression (parentheses around it dropped). */
function licenseChoice(spdx: string): object[] {
  const expr = spdx.trim().replace(/^\((.*)\)$/, "$1");
  return /^[A-Za-z0-9.+-]+$/.test(expr) ? [{ license: { id: expr } }] : [{ expression: expr }];
}

/** A CycloneDX component of an npm package; its lock file integrity as a hash. */
function component(p: BundledPackage, type: "library" | "platform"): Record<string, unknown> {
  const scope = p.name.startsWith("@") ? p.name.slice(0, p.name.indexOf("/")) : undefined;
  const [alg, b64] = (p.integrity ?? "").split("-", 2);
  const algs: Record<string, string> = {
    sha512: "SHA-512",
    sha384: "SHA-384",
    sha256: "SHA-256",
    sha1: "SHA-1",
  };
  const hashAlg = alg ? algs[alg] : undefined;
  return {
    type,
    "bom-ref": purl(p.name, p.version),
    ...(scope ? { group: scope } : {}),
    name: scope ? p.name.slice(scope.length + 1) : p.name,
    version: p.version,
    licenses: licenseChoice(p.license),
    purl: purl(p.name, p.version),
    ...(hashAlg && b64
      ? { hashes: [{ alg: hashAlg, content: Buffer.from(b64, "base64").toString("hex") }] }
      : {}),
  };
}

/** What the SBOM of one executable says about it. */
export interface SbomSubject {
  arch: Arch;
  version: string;
  license: string;
  /** SHA-256 of the executable. */
  sha256: string;
  /** The Bun runtime package the executable is built on. */
  runtime: BundledPackage;
  /** The npm packages bundled into it. */
  packages: readonly BundledPackage[];
  /** ISO time of the release (SOURCE_DATE_EPOCH or the commit's). */
  timestamp: string;
}

/** A name-based (version 5 style) UUID from `text`, so the same SBOM gets the same serial number. */
function contentUuid(text: string): string {
  const h = createHash("sha256").update(text).digest();
  h[6] = ((h[6] as number) & 0x0f) | 0x50;
  h[8] = ((h[8] as number) & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString("hex");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/**
 * The CycloneDX 1.5 SBOM of one executable: the executable itself (name, version, license, hash),
 * the Bun runtime it is built on and every npm package bundled into it, each with version, license,
 * package URL and the lock file's hash. Deterministic: the serial number is derived from the content.
 */
export function cycloneDx(s: SbomSubject): Record<string, unknown> {
  const name = binaryName(s.arch);
  const appRef = `${purl(APP_NAME, s.version)}?arch=${s.arch}`;
  const components = [component(s.runtime, "platform"), ...s.packages.map((p) => component(p, "library"))];
  const body = {
    metadata: {
      timestamp: s.timestamp,
      tools: { components: [{ type: "application", name: "bun", version: bunVersion }] },
      component: {
        type: "application",
        "bom-ref": appRef,
        name,
        version: s.version,
        licenses: licenseChoice(s.license),
        purl: appRef,
        hashes: [{ alg: "SHA-256", content: s.sha256 }],
      },
    },
    components,
    dependencies: [{ ref: appRef, dependsOn: components.map((c) => c["bom-ref"] as string) }],
  };
  return {
    bomFormat: "CycloneDX",
    specVersion: "1.5",
    serialNumber: `urn:uuid:${contentUuid(JSON.stringify(body))}`,
    version: 1,
    ...body,
  };
}

/** The raw manifests and the Talos patch of a release, by file name, the image pinned by tag. */
export function releaseManifests(version: string): Record<string, string> {
  const s = defaultSettings(version);
  return {
    [RELEASE_MANIFEST_FILES.DaemonSet]: renderManifests(s),
    [RELEASE_MANIFEST_FILES.Deployment]: renderManifests({ ...s, workload: "Deployment" }),
    "talos-patch.yaml": renderTalosPatch(s),
  };
}

// ---------------------------------------------------------------------------------------------------
// The release image

/** What the release image's config and annotations say besides the base. */
export interface ImageOptions {
  version: string;
  commit: string;
  /** ISO time: the image's creation time and its files' modification time. */
  created: string;
  /** The base's reference (e.g. gcr.io/distroless/base-debian12:nonroot@sha256:...), when known. */
  baseName?: string | undefined;
}

/** The labels of the release image (OCI pre-defined annotation keys). */
function imageLabels(o: ImageOptions): Record<string, string> {
  return {
    "org.opencontainers.image.title": APP_NAME,
    "org.opencontainers.image.description": "Kubernetes cloud controller manager for Talos Linux, on Bun",
    "org.opencontainers.image.version": o.version,
    "org.opencontainers.image.revision": o.commit,
    "org.opencontainers.image.licenses": pkg.license,
    "org.opencontainers.image.created": o.created,
  };
}

/**
 * The config of the release image on `base`: the base's, with the executable's layer appended, run
 * as nonroot (deploy/Dockerfile's `USER 65532:65532`) with the executable as entrypoint and no
 * command, and the release's labels.
 */
export function imageConfig(base: ImageConfig, diffId: string, arch: Arch, o: ImageOptions): ImageConfig {
  const { Cmd: _, ...baseRun } = base.config ?? {};
  const baseHistory = base.history ?? base.rootfs.diff_ids.map(() => ({ created_by: "base layer" }));
  return {
    created: o.created,
    architecture: arch,
    os: "linux",
    ...(base.variant ? { variant: base.variant } : {}),
    config: {
      ...baseRun,
      User: `${NONROOT_ID}:${NONROOT_ID}`,
      Entrypoint: [BINARY_PATH],
      Labels: { ...(baseRun.Labels ?? {}), ...imageLabels(o) },
    },
    rootfs: { type: "layers", diff_ids: [...base.rootfs.diff_ids, diffId] },
    history: [
      ...baseHistory,
      {
        created: o.created,
        created_by: `build.ts --release: COPY --chmod=0555 ${binaryName(arch)} ${BINARY_PATH}`,
      },
    ],
  };
}

/**
 * The release image of one architecture on a base image: the executable as one layer (mode 0555,
 * owned by root, the release's time), the config and the manifest (annotated with the base), and the
 * manifest's descriptor with its platform. Deterministic: same inputs, same digests.
 */
export function releaseImage(
  base: LayoutImage,
  binary: Uint8Array,
  arch: Arch,
  o: ImageOptions,
): { blobs: Blob[]; descriptor: Descriptor } {
  if (base.config.architecture !== arch || base.config.os !== "linux") {
    throw new Error(`Cannot build the ${arch} image on a ${base.config.os}/${base.config.architecture} base`);
  }
  const mtime = Math.floor(Date.parse(o.created) / 1000);
  const entry = {
    path: BINARY_PATH.slice(1),
    type: "file",
    mode: 0o555,
    uid: 0,
    gid: 0,
    data: binary,
  } as const;
  const l = layer(tar([entry], mtime));
  const config = jsonBlob(MEDIA_TYPES.config, imageConfig(base.config, l.diffId, arch, o));
  const annotations = {
    "org.opencontainers.image.base.digest": base.descriptor.digest,
    ...(o.baseName ? { "org.opencontainers.image.base.name": o.baseName } : {}),
    "org.opencontainers.image.version": o.version,
    "org.opencontainers.image.revision": o.commit,
  };
  const manifest = manifestBlob(config, [...base.manifest.layers, l.blob.descriptor], annotations);
  const platform = {
    architecture: arch,
    os: "linux",
    ...(base.config.variant ? { variant: base.config.variant } : {}),
  };
  return { blobs: [l.blob, config, manifest], descriptor: { ...manifest.descriptor, platform } };
}

/** The tag of the release image (`v<version>`, or `edge`). */
export function imageTag(version: string): string {
  return defaultImage(version).slice(defaultImage(version).lastIndexOf(":") + 1);
}

/**
 * Writes the release image as an OCI layout at `outDir`: the base's layers copied (their digests
 * checked), each architecture's image, and an image index of them tagged `v<version>` in index.json.
 * @returns the image index's descriptor
 */
function writeReleaseImage(
  outDir: string,
  baseDir: string,
  binaries: Readonly<Record<Arch, string>>,
  o: ImageOptions,
): Descriptor {
  const manifests: Descriptor[] = [];
  for (const arch of ARCHES) {
    const base = layoutImage(baseDir, "linux", arch);
    writeBlobs(
      outDir,
      base.manifest.layers.map((d) => ({ descriptor: d, bytes: readBlob(baseDir, d) })),
    );
    const image = releaseImage(base, readFileSync(binaries[arch]), arch, o);
    writeBlobs(outDir, image.blobs);
    manifests.push(image.descriptor);
  }
  const index = jsonBlob(
    MEDIA_TYPES.index,
    indexOf(manifests, {
      "org.opencontainers.image.version": o.version,
      "org.opencontainers.image.revision": o.commit,
    }),
  );
  writeBlobs(outDir, [index]);
  const tag = imageTag(o.version);
  writeLayoutIndex(
    outDir,
    indexOf([{ ...index.descriptor, annotations: { "org.opencontainers.image.ref.name": tag } }]),
  );
  return index.descriptor;
}

// ---------------------------------------------------------------------------------------------------
// What a release publishes, by name (the release workflow reads them from `bun build.ts --names`)

/** The names a release of `version` is published under, all from lib/manifests.ts's image. */
export interface PublishedNames {
  version: string;
  /** The git tag and the image tag: `v<version>`. */
  tag: string;
  /** The registry host, e.g. ghcr.io. */
  registry: string;
  /** The image repository, without tag. */
  image: string;
  /** Where `helm push` puts the chart (`oci://<registry>/<owner>/charts`). */
  chartRepository: string;
  /** The chart's repository as pushed (`<registry>/<owner>/charts/<chart name>`), tagged `<version>`. */
  chart: string;
  /** The packaged chart's file name in the release folder. */
  chartFile: string;
}

/** The names a release of `version` is published under: the image of the manifests, its tag, the chart beside it. */
export function publishedNames(version: string): PublishedNames {
  const ref = defaultImage(version);
  const image = ref.slice(0, ref.lastIndexOf(":"));
  const owner = image.slice(0, image.lastIndexOf("/"));
  return {
    version,
    tag: imageTag(version),
    registry: image.slice(0, image.indexOf("/")),
    image,
    chartRepository: `oci://${owner}/charts`,
    chart: `${owner}/charts/${APP_NAME}`,
    chartFile: `${APP_NAME}-${version}.tgz`,
  };
}

/**
 * The files of the release folder a release attaches (its top level: everything but the image's
 * layout, which is pushed), in name order; SHA256SUMS lists them and image/index.json.
 */
export function releaseAssets(version: string): string[] {
  return [
    ...ARCHES.flatMap((a) => [binaryName(a), `${binaryName(a)}.cdx.json`]),
    ...Object.keys(releaseManifests(version)),
    publishedNames(version).chartFile,
    "SHA256SUMS",
  ].sort();
}

/** `bun build.ts --names`: the published names as `key=value` lines (for $GITHUB_OUTPUT). */
export function namesLines(n: PublishedNames): string {
  const keys: Record<keyof PublishedNames, string> = {
    version: "version",
    tag: "tag",
    registry: "registry",
    image: "image",
    chartRepository: "chart_repository",
    chart: "chart",
    chartFile: "chart_file",
  };
  return Object.entries(keys)
    .map(([k, key]) => `${key}=${n[k as keyof PublishedNames]}\n`)
    .join("");
}

// ---------------------------------------------------------------------------------------------------
// The release folder

/** The helm that packages the chart: HELM, else the test bed's. */
function helmBinary(): string {
  const helm = process.env.HELM ?? join(homedir(), ".cache", "talos-ccm-testbed", "helm-v3.22.0", "helm");
  if (!existsSync(helm)) {
    throw new Error(
      `Cannot package the Helm chart: no helm at ${helm} (set HELM, or run tests/support/testbed-bins.sh)`,
    );
  }
  return helm;
}

/**
 * `helm package` of the chart into `out`, then the same files written again by {@link tar} at the
 * release time (helm stamps the packaging time into the archive, so two packagings would differ).
 */
function packageChart(out: string, created: string): void {
  const file = join(out, `${APP_NAME}-${pkg.version}.tgz`);
  const work = mkdtempSync(join(tmpdir(), "talos-ccm-chart-"));
  try {
    run([helmBinary(), "package", join(root, "deploy", CHART_DIR), "--destination", work]);
    const unpacked = join(work, "chart");
    mkdirSync(unpacked);
    run(["tar", "-xzf", join(work, `${APP_NAME}-${pkg.version}.tgz`), "-C", unpacked, "--no-same-owner"]);
    const entries = treeEntries(unpacked).map((e) => ({
      ...e,
      uid: 0,
      gid: 0,
      mode: e.type === "dir" ? 0o755 : 0o644,
    }));
    writeFileSync(file, gzipSync(tar(entries, Math.floor(Date.parse(created) / 1000)), { level: 9 }));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The release time: SOURCE_DATE_EPOCH, else the commit's time, as an ISO string. */
function releaseTime(): string {
  const epoch = process.env.SOURCE_DATE_EPOCH ?? run(["git", "log", "-1", "--format=%ct"]);
  const seconds = Number(epoch);
  if (!Number.isSafeInteger(seconds) || seconds < 0) throw new Error(`Cannot use release time ${epoch}`);
  return new Date(seconds * 1000).toISOString();
}

/** The value of `--name=value` or `--name value` in argv. */
function flag(argv: readonly string[], name: string): string | undefined {
  const i = argv.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  const a = argv[i] as string;
  const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[i + 1];
  if (value === undefined || value === "") throw new Error(`Cannot read --${name}: no value`);
  return value;
}

/** Builds both executables into `out` with their SBOMs. */
function releaseBinaries(out: string, commit: string, created: string): Record<Arch, string> {
  const lock = (
    JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
      packages: Record<string, LockPackage>;
    }
  ).packages;
  const meta = mkdtempSync(join(tmpdir(), "talos-ccm-release-"));
  const binaries = {} as Record<Arch, string>;
  try {
    for (const arch of ARCHES) {
      const metafile = join(meta, `${arch}.json`);
      binaries[arch] = build(arch, commit, out, metafile);
      if (!existsSync(metafile)) throw new Error(`Cannot make the SBOM of ${arch}: bun wrote no metafile`);
      const sbom = cycloneDx({
        arch,
        version: pkg.version,
        license: pkg.license,
        sha256: sha256Hex(readFileSync(binaries[arch])),
        runtime: lockedPackage(lock, `node_modules/${TARGETS[arch].runtimePackage}`),
        packages: bundledPackages(JSON.parse(readFileSync(metafile, "utf8")) as Metafile, lock),
        timestamp: created,
      });
      writeFileSync(join(out, `${binaryName(arch)}.cdx.json`), `${JSON.stringify(sbom, null, 2)}\n`);
    }
  } finally {
    rmSync(meta, { recursive: true, force: true });
  }
  return binaries;
}

/**
 * `--release`: writes everything a tag publishes into `--out` (default dist/release), emptied first
 * (a folder that is neither empty nor an earlier release is refused):
 * the executables and their SBOMs, the raw manifests and the Talos patch, the packaged chart, the
 * image as an OCI layout in image/ on the `--base` OCI layout (or RELEASE_BASE), and SHA256SUMS of
 * every file but the image's blobs (its index.json pins them by digest).
 */
function release(argv: readonly string[]): void {
  const started = performance.now();
  const out = resolve(flag(argv, "out") ?? join(dist, "release"));
  const baseDir = flag(argv, "base") ?? process.env.RELEASE_BASE;
  if (baseDir === undefined) {
    throw new Error(
      "Cannot build the release image: no base. Give --base <OCI layout> (or RELEASE_BASE): the release uses " +
        "gcr.io/distroless/base-debian12:nonroot pinned by digest; `bun tests/support/debianbase.ts` builds a test base",
    );
  }
  for (const arch of ARCHES) layoutImage(baseDir, "linux", arch); // fail before building anything
  if (existsSync(out) && readdirSync(out).length > 0 && !existsSync(join(out, "SHA256SUMS"))) {
    throw new Error(`Cannot write the release into ${out}: it is not empty and holds no earlier release`);
  }
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const commit = gitCommit();
  const created = releaseTime();
  const binaries = releaseBinaries(out, commit, created);
  for (const [name, text] of Object.entries(releaseManifests(pkg.version)))
    writeFileSync(join(out, name), text);
  packageChart(out, created);
  const image = writeReleaseImage(join(out, "image"), baseDir, binaries, {
    version: pkg.version,
    commit,
    created,
    baseName: flag(argv, "base-name") ?? process.env.RELEASE_BASE_NAME,
  });
  const written = readdirSync(out).filter((f) => statSync(join(out, f)).isFile());
  const assets = releaseAssets(pkg.version).filter((f) => f !== "SHA256SUMS");
  if (written.sort().join("\n") !== assets.join("\n")) {
    throw new Error(
      `Cannot list the release: it wrote ${written.join(", ")}; a release attaches ${assets.join(", ")}`,
    );
  }
  const files = [...written, "image/index.json"].sort();
  writeFileSync(
    join(out, "SHA256SUMS"),
    sha256sums(files.map((name) => ({ name, sha256: sha256Hex(readFileSync(join(out, name))) }))),
  );
  for (const f of [...files, "SHA256SUMS"])
    console.log(`${statSync(join(out, f)).size.toString().padStart(11)}  ${f}`);
  console.log(`image ${defaultImage(pkg.version)} index ${image.digest}`);
  console.log(
    `release ${pkg.version} commit ${commit} in ${out} (${Math.round(performance.now() - started)} ms)`,
  );
}

function main(): void {
  if (process.argv.includes("--names")) {
    process.stdout.write(namesLines(publishedNames(pkg.version)));
    return;
  }
  if (process.argv.includes("--release")) {
    release(process.argv.slice(2));
    return;
  }
  const only = process.argv.find((a) => a.startsWith("--target="))?.slice("--target=".length);
  const arches = (only ? only.split(",") : ARCHES) as Arch[];
  for (const a of arches)
    if (!(a in TARGETS)) throw new Error(`Cannot build unknown target ${a} (amd64, arm64)`);
  mkdirSync(dist, { recursive: true });
  const commit = gitCommit();
  const sums: { name: string; sha256: string }[] = [];
  for (const arch of arches) {
    const started = performance.now();
    const out = build(arch, commit);
    const bytes = readFileSync(out);
    sums.push({ name: binaryName(arch), sha256: sha256Hex(bytes) });
    const mb = (bytes.length / 1e6).toFixed(1);
    console.log(`built ${resolve(out)} (${mb} MB, ${Math.round(performance.now() - started)} ms)`);
  }
  if (!only) writeFileSync(join(dist, "SHA256SUMS"), sha256sums(sums));
  console.log(`version ${pkg.version} commit ${commit}`);
}

// Run as a script (npm run build, npm run release); imported, it only exports (the tests import it).
// Its refusals are for the operator running it: one line naming the cause, exit 1, no stack.
if (import.meta.main) {
  try {
    main();
  } catch (err) {
    process.stderr.write(`build.ts: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
