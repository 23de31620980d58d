// The pure parts of `npm run release` (build.ts): SHA256SUMS as sha256sum checks it, the SBOM from
// the bundler's metafile and package-lock.json, the raw manifests, and the release image's config,
// manifest and layer on a base image.

import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { parseAllDocuments } from "yaml";
import {
  binaryName,
  bundledPackages,
  cycloneDx,
  imageConfig,
  imageTag,
  type LockPackage,
  lockKeyOf,
  type Metafile,
  purl,
  releaseImage,
  releaseManifests,
  type SbomSubject,
  sha256sums,
} from "../../build.ts";
import { APP_NAME, BINARY_PATH, NONROOT_ID } from "../../lib/manifests.ts";
import {
  digestOf,
  type ImageConfig,
  type ImageManifest,
  jsonBlob,
  type LayoutImage,
  layer,
  MEDIA_TYPES,
  manifestBlob,
  tar,
} from "../support/oci.ts";

const root = join(import.meta.dir, "..", "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  version: string;
  dependencies: Record<string, string>;
};
const lock = (
  JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockPackage>;
  }
).packages;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "talos-ccm-release-unit-"));
  dirs.push(d);
  return d;
}
const hex = (s: string) => createHash("sha256").update(s).digest("hex");

describe("sha256sums()", () => {
  test("sha256sums() writes `<hex>  <name>` lines sorted by name, which sha256sum --check verifies", () => {
    const dir = tempDir();
    const files = { "b-file.yaml": "b\n", "a-binary": "a", "image/index.json": "{}" };
    Bun.spawnSync(["mkdir", "-p", join(dir, "image")]);
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    const sums = sha256sums(Object.entries(files).map(([name, text]) => ({ name, sha256: hex(text) })));
    expect(sums).toBe(`${hex("a")}  a-binary\n${hex("b\n")}  b-file.yaml\n${hex("{}")}  image/index.json\n`);
    writeFileSync(join(dir, "SHA256SUMS"), sums);
    const ok = spawnSync("sha256sum", ["--check", "--strict", "SHA256SUMS"], { cwd: dir, encoding: "utf8" });
    expect(ok.status).toBe(0);
    writeFileSync(join(dir, "a-binary"), "tampered");
    const bad = spawnSync("sha256sum", ["--check", "--strict", "SHA256SUMS"], { cwd: dir, encoding: "utf8" });
    expect(bad.status).toBe(1);
    expect(bad.stdout).toContain("a-binary: FAILED");
  });

  test.each([
    ["a\nb", hex("x")],
    ["a\\b", hex("x")],
    ["", hex("x")],
    ["ok", "ABC"],
  ])("sha256sums() refuses name %p with digest %p", (name, sha256) => {
    expect(() => sha256sums([{ name, sha256 }])).toThrow(/Cannot list/);
  });
});

describe("SBOM", () => {
  test.each([
    ["node_modules/yaml/dist/index.js", "node_modules/yaml"],
    [
      "../../work/main/node_modules/@kubernetes/client-node/dist/gen/x.js",
      "node_modules/@kubernetes/client-node",
    ],
    ["node_modules/a/node_modules/@s/b/index.js", "node_modules/a/node_modules/@s/b"],
    ["lib/manager.ts", undefined],
    ["main.ts", undefined],
  ])("lockKeyOf(%p) is %p", (input, key) => {
    expect(lockKeyOf(input)).toBe(key);
  });

  test.each([
    ["yaml", "2.9.1", "pkg:npm/yaml@2.9.1"],
    ["@kubernetes/client-node", "2.0.1", "pkg:npm/%40kubernetes/client-node@2.0.1"],
  ])("purl(%p, %p) is %p", (name, version, expected) => {
    expect(purl(name, version)).toBe(expected);
  });

  test("bundledPackages() lists the packages with bytes in an output, from package-lock.json, and refuses an unknown one", () => {
    const meta: Metafile = {
      outputs: {
        "a.js": {
          inputs: {
            "main.ts": { bytesInOutput: 100 },
            "node_modules/yaml/dist/index.js": { bytesInOutput: 10 },
            "node_modules/yaml/dist/other.js": { bytesInOutput: 5 },
            "node_modules/valibot/dist/index.js": { bytesInOutput: 0 },
          },
        },
        "b.js": { inputs: { "../x/node_modules/@bufbuild/protobuf/dist/esm/wire.js": { bytesInOutput: 1 } } },
      },
    };
    expect(bundledPackages(meta, lock)).toEqual([
      {
        lockKey: "node_modules/@bufbuild/protobuf",
        name: "@bufbuild/protobuf",
        version: lock["node_modules/@bufbuild/protobuf"]?.version as string,
        license: "(Apache-2.0 AND BSD-3-Clause)",
        integrity: lock["node_modules/@bufbuild/protobuf"]?.integrity as string,
      },
      {
        lockKey: "node_modules/yaml",
        name: "yaml",
        version: "2.9.1",
        license: "ISC",
        integrity: lock["node_modules/yaml"]?.integrity as string,
      },
    ]);
    const unknown: Metafile = {
      outputs: { "a.js": { inputs: { "node_modules/nope/x.js": { bytesInOutput: 1 } } } },
    };
    expect(() => bundledPackages(unknown, lock)).toThrow(/no version or license/);
  });

  test("bundledPackages() of the real bundle: every runtime dependency that main.ts loads, each as package-lock.json has it", () => {
    const dir = tempDir();
    const r = spawnSync(
      process.execPath,
      [
        "build",
        join(root, "main.ts"),
        "--target=bun",
        "--format=esm",
        "--splitting",
        "--outdir",
        join(dir, "out"),
        `--metafile=${join(dir, "meta.json")}`,
      ],
      { cwd: root, encoding: "utf8" },
    );
    expect(r.status).toBe(0);
    const packages = bundledPackages(
      JSON.parse(readFileSync(join(dir, "meta.json"), "utf8")) as Metafile,
      lock,
    );
    const names = packages.map((p) => p.name);
    for (const dep of Object.keys(pkg.dependencies)) expect(names).toContain(dep);
    // Dev dependencies never reach the executable.
    for (const dev of ["@grpc/grpc-js", "fast-check", "@peculiar/x509", "typescript"])
      expect(names).not.toContain(dev);
    for (const p of packages) {
      expect(p.version).toBe(lock[p.lockKey]?.version as string);
      expect(p.license).toBe(lock[p.lockKey]?.license as string);
    }
  });

  const subject: SbomSubject = {
    arch: "arm64",
    version: "1.2.3",
    license: "MIT",
    sha256: hex("binary"),
    runtime: {
      lockKey: "node_modules/@oven/bun-linux-aarch64",
      name: "@oven/bun-linux-aarch64",
      version: "1.4.5",
      license: "MIT",
    },
    packages: [
      {
        lockKey: "node_modules/@bufbuild/protobuf",
        name: "@bufbuild/protobuf",
        version: "2.17.0",
        license: "(Apache-2.0 AND BSD-3-Clause)",
        integrity: `sha512-${Buffer.from("abc").toString("base64")}`,
      },
      { lockKey: "node_modules/yaml", name: "yaml", version: "2.9.1", license: "ISC" },
    ],
    timestamp: "2026-01-02T03:04:05.000Z",
  };

  test("cycloneDx() is CycloneDX 1.5: the executable, the Bun runtime and each package with version, license and purl", () => {
    const bom = cycloneDx(subject) as {
      bomFormat: string;
      specVersion: string;
      serialNumber: string;
      metadata: { timestamp: string; component: Record<string, unknown> };
      components: Record<string, unknown>[];
      dependencies: { ref: string; dependsOn: string[] }[];
    };
    expect(bom.bomFormat).toBe("CycloneDX");
    expect(bom.specVersion).toBe("1.5");
    expect(bom.serialNumber).toMatch(
      /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(bom.metadata.timestamp).toBe(subject.timestamp);
    expect(bom.metadata.component).toMatchObject({
      type: "application",
      name: `${APP_NAME}-linux-arm64`,
      version: "1.2.3",
      licenses: [{ license: { id: "MIT" } }],
      hashes: [{ alg: "SHA-256", content: hex("binary") }],
    });
    expect(bom.components).toEqual([
      {
        type: "platform",
        "bom-ref": "pkg:npm/%40oven/bun-linux-aarch64@1.4.5",
        group: "@oven",
        name: "bun-linux-aarch64",
        version: "1.4.5",
        licenses: [{ license: { id: "MIT" } }],
        purl: "pkg:npm/%40oven/bun-linux-aarch64@1.4.5",
      },
      {
        type: "library",
        "bom-ref": "pkg:npm/%40bufbuild/protobuf@2.17.0",
        group: "@bufbuild",
        name: "protobuf",
        version: "2.17.0",
        licenses: [{ expression: "Apache-2.0 AND BSD-3-Clause" }],
        purl: "pkg:npm/%40bufbuild/protobuf@2.17.0",
        hashes: [{ alg: "SHA-512", content: Buffer.from("abc").toString("hex") }],
      },
      {
        type: "library",
        "bom-ref": "pkg:npm/yaml@2.9.1",
        name: "yaml",
        version: "2.9.1",
        licenses: [{ license: { id: "ISC" } }],
        purl: "pkg:npm/yaml@2.9.1",
      },
    ]);
    expect(bom.dependencies).toEqual([
      {
        ref: bom.metadata.component["bom-ref"] as string,
        dependsOn: bom.components.map((c) => c["bom-ref"] as string),
      },
    ]);
  });

  test("cycloneDx() is deterministic: the same subject, the same serial number; another, another", () => {
    expect(JSON.stringify(cycloneDx(subject))).toBe(JSON.stringify(cycloneDx({ ...subject })));
    expect(
      (cycloneDx({ ...subject, sha256: hex("other") }) as { serialNumber: string }).serialNumber,
    ).not.toBe((cycloneDx(subject) as { serialNumber: string }).serialNumber);
  });
});

describe("npm run release", () => {
  test("without a base image it refuses in one line naming the fix, exit 1, no stack trace", () => {
    const root = join(import.meta.dir, "..", "..");
    const env = { ...process.env };
    delete env.RELEASE_BASE;
    const r = spawnSync(process.execPath, ["build.ts", "--release", "--out", join(tempDir(), "no-base")], {
      cwd: root,
      env,
      encoding: "utf8",
    });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      "build.ts: Cannot build the release image: no base. Give --base <OCI layout> (or RELEASE_BASE): the release uses " +
        "gcr.io/distroless/base-debian12:nonroot pinned by digest; `bun tests/support/debianbase.ts` builds a test base\n",
    );
  });
});

describe("releaseManifests()", () => {
  test("releaseManifests() gives the DaemonSet (the shipped deploy/ file), the Deployment and the Talos patch, image pinned by tag", () => {
    const files = releaseManifests(pkg.version);
    expect(Object.keys(files).sort()).toEqual([
      `${APP_NAME}-daemonset.yaml`,
      `${APP_NAME}-deployment.yaml`,
      "talos-patch.yaml",
    ]);
    expect(files[`${APP_NAME}-daemonset.yaml`]).toBe(
      readFileSync(join(root, "deploy", `${APP_NAME}.yaml`), "utf8"),
    );
    expect(files["talos-patch.yaml"]).toBe(readFileSync(join(root, "deploy", "talos-patch.yaml"), "utf8"));
    const kinds = (text: string) => parseAllDocuments(text).map((d) => (d.toJS() as { kind: string }).kind);
    expect(kinds(files[`${APP_NAME}-deployment.yaml`] as string)).toContain("Deployment");
    expect(kinds(files[`${APP_NAME}-deployment.yaml`] as string)).not.toContain("DaemonSet");
    for (const text of Object.values(files)) {
      expect(text).toContain(`ghcr.io/talos-ccm/talos-cloud-controller-manager:v${pkg.version}`);
    }
    expect(imageTag(pkg.version)).toBe(`v${pkg.version}`);
  });
});

describe("releaseImage()", () => {
  function baseImage(architecture: string): LayoutImage {
    const l = layer(tar([{ path: "etc", type: "dir", mode: 0o755, uid: 0, gid: 0 }], 0));
    const config: ImageConfig = {
      created: "2023-06-10T00:00:00Z",
      architecture,
      os: "linux",
      config: {
        User: "65532",
        Env: ["PATH=/usr/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        Cmd: ["/bin/sh"],
        WorkingDir: "/home/nonroot",
        Labels: { "from.base": "yes" },
      },
      rootfs: { type: "layers", diff_ids: [l.diffId] },
    };
    const configBlob = jsonBlob(MEDIA_TYPES.config, config);
    const manifest = manifestBlob(configBlob, [l.blob.descriptor]);
    return {
      descriptor: manifest.descriptor,
      manifest: JSON.parse(new TextDecoder().decode(manifest.bytes)) as ImageManifest,
      config,
    };
  }
  const options = {
    version: "1.2.3",
    commit: "abc123",
    created: "2026-01-02T03:04:05.000Z",
    baseName: "base:nonroot",
  };
  const binary = new TextEncoder().encode("\u007fELF pretend");

  test("releaseImage() appends the executable as one layer and runs it as nonroot, keeping the base's settings", () => {
    const base = baseImage("arm64");
    const image = releaseImage(base, binary, "arm64", options);
    const [layerBlob, config, manifest] = image.blobs;
    if (!layerBlob || !config || !manifest) throw new Error("missing blobs");
    const listing = spawnSync("tar", ["--numeric-owner", "--full-time", "-tvf", "-"], {
      input: gunzipSync(layerBlob.bytes),
      encoding: "utf8",
    }).stdout;
    expect(listing.replace(/\s+/g, " ").trim()).toBe(
      `-r-xr-xr-x 0/0 ${binary.length} 2026-01-02 03:04:05 ${BINARY_PATH.slice(1)}`,
    );
    const cfg = JSON.parse(new TextDecoder().decode(config.bytes)) as ImageConfig;
    expect(cfg).toEqual(imageConfig(base.config, digestOf(gunzipSync(layerBlob.bytes)), "arm64", options));
    expect(cfg.config).toEqual({
      User: `${NONROOT_ID}:${NONROOT_ID}`,
      Env: ["PATH=/usr/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
      WorkingDir: "/home/nonroot",
      Entrypoint: [BINARY_PATH],
      Labels: {
        "from.base": "yes",
        "org.opencontainers.image.title": APP_NAME,
        "org.opencontainers.image.description": "Kubernetes cloud controller manager for Talos Linux, on Bun",
        "org.opencontainers.image.version": "1.2.3",
        "org.opencontainers.image.revision": "abc123",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.created": options.created,
      },
    });
    expect(cfg.rootfs.diff_ids).toEqual([
      ...base.config.rootfs.diff_ids,
      digestOf(gunzipSync(layerBlob.bytes)),
    ]);
    expect(cfg.history?.length).toBe(cfg.rootfs.diff_ids.length);
    const m = JSON.parse(new TextDecoder().decode(manifest.bytes)) as ImageManifest;
    expect(m.layers).toEqual([...base.manifest.layers, layerBlob.descriptor]);
    expect(m.config).toEqual(config.descriptor);
    expect(m.annotations).toEqual({
      "org.opencontainers.image.base.digest": base.descriptor.digest,
      "org.opencontainers.image.base.name": "base:nonroot",
      "org.opencontainers.image.version": "1.2.3",
      "org.opencontainers.image.revision": "abc123",
    });
    expect(image.descriptor).toEqual({
      ...manifest.descriptor,
      platform: { architecture: "arm64", os: "linux" },
    });
  });

  test("releaseImage() is deterministic, and a different executable or time changes the digest", () => {
    const base = baseImage("amd64");
    const digest = (b: Uint8Array, o = options) => releaseImage(base, b, "amd64", o).descriptor.digest;
    expect(digest(binary)).toBe(digest(binary));
    expect(digest(new TextEncoder().encode("other"))).not.toBe(digest(binary));
    expect(digest(binary, { ...options, created: "2026-01-02T03:04:06.000Z" })).not.toBe(digest(binary));
  });

  test("releaseImage() refuses a base of another architecture", () => {
    expect(() => releaseImage(baseImage("amd64"), binary, "arm64", options)).toThrow(
      /on a linux\/amd64 base/,
    );
  });

  test("binaryName() is the name deploy/Dockerfile copies", () => {
    expect(binaryName("amd64")).toBe(`${APP_NAME}-linux-amd64`);
    expect(readFileSync(join(root, "deploy", "Dockerfile"), "utf8")).toContain(
      `dist/${APP_NAME}-linux-\${TARGETARCH}`,
    );
  });
});
