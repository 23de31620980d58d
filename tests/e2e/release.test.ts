// `npm run release` end to end: build.ts --release into a temp folder, on the CI base (the Debian
// packages distroless base-debian12 is made of, tests/support/debianbase.ts); then
// - SHA256SUMS verifies with sha256sum, and lists everything but the image's blobs;
// - each SBOM names its executable by hash and lists the Bun runtime and every package bundled into
//   it, each with the version and license of its own package.json in node_modules;
// - the image: an OCI index of amd64 and arm64, every blob matching its digest, each image's last
//   layer holding exactly the released executable;
// - through a registry: crane pushes the image's OCI layout to a local registry (go-containerregistry's
//   pkg/registry on 127.0.0.1, tests/support/ociregistry.ts) and pulls it back by the digest the push
//   reported: the same index digest as the layout's index.json, amd64 and arm64, every blob matching
//   its digest; the amd64 image's layers of what was pulled, unpacked in order by GNU tar into a root,
//   pass the image test (tests/support/imageroot.ts) in that root, and every binary run below runs
//   there, so the image tested is the image pushed;
// - the raw Deployment and DaemonSet manifests, applied to the test bed's API server, run: the test
//   bed has no kubelet to run pods, so the image's binary is run in the unpacked root as the pod would
//   run it (as uid 65532 on a read-only root, with the workload's command, arguments and environment
//   as the API server stored them, its ConfigMap and the Talos secret at their mount paths, its
//   ServiceAccount's token where in-cluster configuration reads it), and it takes the Lease,
//   initializes a node (Talos through the fake apid) and answers /readyz. What differs from a pod:
//   the ports. The DaemonSet's KUBERNETES_SERVICE_PORT (6443) and TALOS_ENDPOINTS (the pod IP,
//   apid's 50000) become the test bed's API server and fake apid ports, and --secure-port a free
//   port; the Deployment's API server comes from KUBERNETES_SERVICE_HOST/PORT, as a kubelet sets them
//   for the kubernetes Service;
// - the chart through a registry: `helm push` of the chart package to oci://<registry>/charts, `helm
//   install` from there (into a namespace of its own, beside the raw manifests' objects; the image
//   repository set to the local registry's, whose tag resolves to the pulled index), and the installed
//   Deployment's pod run the same way takes its Lease and initializes a node.
// Needs root (chroot, mount, the base's owners), helm (HELM) and the local OCI registry and crane
// (OCI_REGISTRY, CRANE), as `npm test` provides.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import {
  ARCHES,
  type Arch,
  binaryName,
  bundledPackages,
  type LockPackage,
  type Metafile,
} from "../../build.ts";
import { APP_NAME, BINARY_PATH, type KubeObject, LEASE_NAME, NONROOT_ID } from "../../lib/manifests.ts";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { debianBase } from "../support/debianbase.ts";
import { loadFixture } from "../support/fixtures.ts";
import { helmBinary, runHelm } from "../support/helm.ts";
import { collect, describeImageRoot, killInRoot, runInRoot } from "../support/imageroot.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import {
  blobPath,
  type Descriptor,
  digestOf,
  type ImageIndex,
  layerTar,
  layoutImage,
  layoutImages,
  MEDIA_TYPES,
  readBlob,
  readJsonBlob,
} from "../support/oci.ts";
import { crane, OciRegistry, requireRegistryTools } from "../support/ociregistry.ts";

const repo = join(import.meta.dir, "..", "..");
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string };
const NAMESPACE = "kube-system";

let out: string;
/** The test's own folder: crane's and helm's homes, the pulled layout, kubeconfigs. */
let work: string;
let registry: OciRegistry;
/** What `crane push` printed: the registry's repository and the pushed index's digest. */
let pushed: string;
/** The OCI layout `crane pull` wrote from the registry, by that digest. */
let pulled: string;
let imageRoot: string;
let releaseMs = 0;
let releaseLog = "";
let cluster: TestCluster;
let apid: FakeApid;
const kubelets: SimulatedKubelet[] = [];

/** Unpacks the image's layers in order into a fresh root, as a container runtime would. */
function unpackImage(layout: string, arch: Arch): string {
  const dir = mkdtempSync(join(tmpdir(), "talos-ccm-release-root-"));
  chmodSync(dir, 0o755);
  for (const d of layoutImage(layout, "linux", arch).manifest.layers) {
    const r = spawnSync(
      "tar",
      ["-xzf", blobPath(layout, d.digest), "-C", dir, "--numeric-owner", "--same-owner", "-p"],
      {
        encoding: "utf8",
      },
    );
    if (r.status !== 0) throw new Error(`Cannot unpack layer ${d.digest}: ${r.stderr}`);
  }
  return dir;
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) {
    throw new Error(
      "tests/e2e/release.test.ts needs root: the base's files keep their owners, and the image test chroots " +
        "into the unpacked image (run `npm test` as root, as CI does)",
    );
  }
  helmBinary();
  requireRegistryTools();
  const base = debianBase();
  out = mkdtempSync(join(tmpdir(), "talos-ccm-release-"));
  const started = performance.now();
  const r = spawnSync(
    process.execPath,
    [join(repo, "build.ts"), "--release", `--out=${out}`, `--base=${base}`],
    {
      cwd: repo,
      encoding: "utf8",
      env: { ...process.env, RELEASE_BASE_NAME: "debian12-ci-base" },
    },
  );
  releaseMs = performance.now() - started;
  releaseLog = `${r.stdout}${r.stderr}`;
  if (r.status !== 0) throw new Error(`build.ts --release failed:\n${releaseLog}`);
  process.stderr.write(`npm run release: ${Math.round(releaseMs)} ms\n${r.stdout}`);
  work = mkdtempSync(join(tmpdir(), "talos-ccm-release-work-"));
  const clusterStarted = Promise.all([TestCluster.start(), FakeApid.start({ nodes: [loadFixture("aws")] })]);
  // The image goes through a registry; everything below runs the image pulled from it.
  const ms: number[] = [performance.now()];
  registry = await OciRegistry.start();
  pushed = crane(work, [
    "push",
    join(out, "image"),
    `${registry.address}/${APP_NAME}:v${pkg.version}`,
  ]).trim();
  ms.push(performance.now());
  pulled = join(work, "pulled");
  crane(work, ["pull", "--format=oci", pushed, pulled]);
  ms.push(performance.now());
  imageRoot = unpackImage(pulled, "amd64");
  ms.push(performance.now());
  const took = (i: number) => Math.round((ms[i + 1] as number) - (ms[i] as number));
  process.stderr.write(
    `registry start and crane push ${took(0)} ms, crane pull ${took(1)} ms, unpack ${took(2)} ms\n`,
  );
  [cluster, apid] = await clusterStarted;
  await cluster.installTalosServiceAccountCrd();
}, 600_000);

afterAll(async () => {
  killInRoot();
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
  await registry?.stop();
  for (const d of [out, work, imageRoot]) if (d) rmSync(d, { recursive: true, force: true });
});

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

describe("the release folder", () => {
  test("SHA256SUMS verifies with sha256sum and lists every published file but the image's blobs", () => {
    const r = spawnSync("sha256sum", ["--check", "--strict", "SHA256SUMS"], { cwd: out, encoding: "utf8" });
    expect(r.status).toBe(0);
    const listed = readFileSync(join(out, "SHA256SUMS"), "utf8")
      .trim()
      .split("\n")
      .map((l) => l.slice(66));
    expect(listed).toEqual(
      [
        ...ARCHES.flatMap((a) => [binaryName(a), `${binaryName(a)}.cdx.json`]),
        `${APP_NAME}-${pkg.version}.tgz`,
        `${APP_NAME}-daemonset.yaml`,
        `${APP_NAME}-deployment.yaml`,
        "image/index.json",
        "talos-patch.yaml",
      ].sort(),
    );
    expect(releaseLog).toContain(`release ${pkg.version}`);
  });

  test("the executables are the two architectures' ELF files, and the amd64 one runs", () => {
    const machine = (path: string) => readFileSync(path).readUInt16LE(18);
    expect(machine(join(out, binaryName("amd64")))).toBe(62); // EM_X86_64
    expect(machine(join(out, binaryName("arm64")))).toBe(183); // EM_AARCH64
    const v = spawnSync(join(out, binaryName("amd64")), ["--version"], { encoding: "utf8" });
    expect(v.stdout).toStartWith(`talos-cloud-controller-manager ${pkg.version} (commit `);
  });

  test.each(ARCHES)(
    "the %s SBOM names its executable by hash and lists the Bun runtime and every bundled package with version and license",
    (arch) => {
      const bom = JSON.parse(readFileSync(join(out, `${binaryName(arch)}.cdx.json`), "utf8")) as {
        bomFormat: string;
        specVersion: string;
        metadata: { component: { name: string; hashes: { alg: string; content: string }[] } };
        components: {
          type: string;
          group?: string;
          name: string;
          version: string;
          licenses: unknown[];
          purl: string;
        }[];
      };
      expect([bom.bomFormat, bom.specVersion]).toEqual(["CycloneDX", "1.5"]);
      expect(bom.metadata.component.name).toBe(binaryName(arch));
      expect(bom.metadata.component.hashes).toEqual([
        { alg: "SHA-256", content: sha256(join(out, binaryName(arch))) },
      ]);
      const fullName = (c: { group?: string; name: string }) => (c.group ? `${c.group}/${c.name}` : c.name);
      // The bundle's packages, found again from a bundle of main.ts made here (same entry, same splitting).
      const meta = mkdtempSync(join(tmpdir(), "talos-ccm-release-meta-"));
      try {
        const b = spawnSync(
          process.execPath,
          [
            "build",
            join(repo, "main.ts"),
            "--target=bun",
            "--format=esm",
            "--splitting",
            "--minify",
            "--outdir",
            join(meta, "o"),
            `--metafile=${join(meta, "m.json")}`,
          ],
          { cwd: repo, encoding: "utf8" },
        );
        expect(b.status).toBe(0);
        const lock = (
          JSON.parse(readFileSync(join(repo, "package-lock.json"), "utf8")) as {
            packages: Record<string, LockPackage>;
          }
        ).packages;
        const expected = bundledPackages(
          JSON.parse(readFileSync(join(meta, "m.json"), "utf8")) as Metafile,
          lock,
        );
        const runtime = arch === "amd64" ? "@oven/bun-linux-x64" : "@oven/bun-linux-aarch64";
        expect(bom.components.map(fullName).sort()).toEqual([runtime, ...expected.map((p) => p.name)].sort());
        expect(expected.length).toBeGreaterThan(10);
      } finally {
        rmSync(meta, { recursive: true, force: true });
      }
      // Version and license as each installed package's own package.json says.
      for (const c of bom.components.filter((c) => c.type === "library")) {
        const own = JSON.parse(
          readFileSync(join(repo, "node_modules", fullName(c), "package.json"), "utf8"),
        ) as {
          version: string;
          license: string;
        };
        const license = JSON.stringify(c.licenses);
        expect({ name: fullName(c), version: c.version }).toEqual({
          name: fullName(c),
          version: own.version,
        });
        for (const id of own.license.replace(/[()]/g, "").split(/ AND | OR /)) expect(license).toContain(id);
        expect(c.purl).toBe(`pkg:npm/${fullName(c).replace(/^@/, "%40")}@${c.version}`);
      }
    },
  );

  test("the raw manifests: a DaemonSet and a Deployment of the release image by tag, and the Talos patch embedding the DaemonSet", () => {
    const image = `ghcr.io/talos-ccm/talos-cloud-controller-manager:v${pkg.version}`;
    for (const [file, kind] of [
      [`${APP_NAME}-daemonset.yaml`, "DaemonSet"],
      [`${APP_NAME}-deployment.yaml`, "Deployment"],
    ] as const) {
      const objects = parseAllDocuments(readFileSync(join(out, file), "utf8")).map(
        (d) => d.toJS() as KubeObject,
      );
      const workloads = objects.filter((o) => o.kind === "DaemonSet" || o.kind === "Deployment");
      expect(workloads.map((w) => w.kind)).toEqual([kind]);
      expect(JSON.stringify(workloads[0])).toContain(`"image":"${image}"`);
    }
    const patch = parseAllDocuments(readFileSync(join(out, "talos-patch.yaml"), "utf8"))[0]?.toJS() as {
      cluster: { inlineManifests: { contents: string }[] };
    };
    expect(patch.cluster.inlineManifests[0]?.contents).toBe(
      readFileSync(join(out, `${APP_NAME}-daemonset.yaml`), "utf8"),
    );
  });

  test("the chart package is the chart of deploy/ at the release version", () => {
    const r = runHelm(work, ["show", "chart", join(out, `${APP_NAME}-${pkg.version}.tgz`)]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`name: ${APP_NAME}`);
    expect(r.stdout).toContain(`version: ${pkg.version}`);
  });
});

describe("the release image", () => {
  test("an OCI layout tagged v<version>: an index of amd64 and arm64, every blob matching its digest", () => {
    const layout = join(out, "image");
    expect(JSON.parse(readFileSync(join(layout, "oci-layout"), "utf8"))).toEqual({
      imageLayoutVersion: "1.0.0",
    });
    const top = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as ImageIndex;
    expect(
      top.manifests.map((m) => [m.mediaType, m.annotations?.["org.opencontainers.image.ref.name"]]),
    ).toEqual([["application/vnd.oci.image.index.v1+json", `v${pkg.version}`]]);
    const index = JSON.parse(
      new TextDecoder().decode(readBlob(layout, top.manifests[0] as { digest: string; size: number })),
    ) as ImageIndex;
    expect(index.manifests.map((m) => m.platform)).toEqual([
      { architecture: "amd64", os: "linux" },
      { architecture: "arm64", os: "linux" },
    ]);
    for (const image of layoutImages(layout)) {
      for (const d of [image.manifest.config, ...image.manifest.layers])
        expect(digestOf(readBlob(layout, d))).toBe(d.digest);
      const arch = image.config.architecture as Arch;
      expect(image.config.config?.User).toBe(`${NONROOT_ID}:${NONROOT_ID}`);
      expect(image.config.config?.Entrypoint).toEqual([BINARY_PATH]);
      expect(image.config.config?.Labels?.["org.opencontainers.image.version"]).toBe(pkg.version);
      expect(image.manifest.annotations?.["org.opencontainers.image.base.name"]).toBe("debian12-ci-base");
      const last = image.manifest.layers.at(-1);
      if (!last) throw new Error("no layers");
      const listing = spawnSync("tar", ["-tvf", "-", "--numeric-owner"], {
        input: layerTar(last.mediaType, readBlob(layout, last)),
        encoding: "utf8",
      }).stdout;
      expect(listing.trim().split("\n")).toHaveLength(1);
      expect(listing).toMatch(new RegExp(`^-r-xr-xr-x 0/0 .* ${BINARY_PATH.slice(1)}\\n$`));
      const layerRoot = mkdtempSync(join(tmpdir(), "talos-ccm-release-layer-"));
      try {
        spawnSync("tar", ["-xzf", blobPath(layout, last.digest), "-C", layerRoot]);
        expect(sha256(join(layerRoot, BINARY_PATH))).toBe(sha256(join(out, binaryName(arch))));
      } finally {
        rmSync(layerRoot, { recursive: true, force: true });
      }
    }
  });

  test("crane pushes the layout to a local registry and pulls it back by digest: the layout's index, amd64 and arm64, every blob matching its digest", () => {
    const layout = join(out, "image");
    const released = (JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as ImageIndex).manifests;
    const digest = released[0]?.digest as string;
    expect(released).toHaveLength(1);
    // The push reports the index's digest: the one the release's index.json pins (SHA256SUMS pins index.json).
    expect(pushed).toBe(`${registry.address}/${APP_NAME}@${digest}`);
    // The tag resolves to it too, as `docker pull ...:v<version>` would.
    expect(crane(work, ["digest", `${registry.address}/${APP_NAME}:v${pkg.version}`]).trim()).toBe(digest);
    // What was pulled by digest is that index, byte for byte, and its images are the release's.
    const top = (JSON.parse(readFileSync(join(pulled, "index.json"), "utf8")) as ImageIndex).manifests;
    expect(top.map((m) => [m.mediaType, m.digest])).toEqual([[MEDIA_TYPES.index, digest]]);
    const index = readJsonBlob<ImageIndex>(pulled, top[0] as Descriptor);
    expect(index.manifests.map((m) => m.platform)).toEqual([
      { architecture: "amd64", os: "linux" },
      { architecture: "arm64", os: "linux" },
    ]);
    const images = layoutImages(pulled);
    expect(images.map((i) => [i.config.architecture, i.descriptor.digest])).toEqual(
      layoutImages(layout).map((i) => [i.config.architecture, i.descriptor.digest]),
    );
    for (const image of images)
      for (const d of [image.manifest.config, ...image.manifest.layers])
        expect(digestOf(readBlob(pulled, d))).toBe(d.digest);
    // The root the tests below run in is the pulled amd64 image's, whose last layer is the executable.
    expect(sha256(join(imageRoot, BINARY_PATH))).toBe(sha256(join(out, binaryName("amd64"))));
  });

  test("the amd64 root holds the distroless base's users, home, /tmp and CA bundle", () => {
    expect(readFileSync(join(imageRoot, "etc/passwd"), "utf8")).toContain(
      `nonroot:x:${NONROOT_ID}:${NONROOT_ID}:`,
    );
    expect(statSync(join(imageRoot, "home/nonroot")).uid).toBe(NONROOT_ID);
    expect(statSync(join(imageRoot, "tmp")).mode & 0o7777).toBe(0o1777);
    expect(statSync(join(imageRoot, "etc/ssl/certs/ca-certificates.crt")).size).toBeGreaterThan(100_000);
    expect(statSync(join(imageRoot, BINARY_PATH)).mode & 0o7777).toBe(0o555);
  });
});

describeImageRoot("the image test in the amd64 root of the release image pulled from the registry", {
  root: () => imageRoot,
  binary: () => join(out, binaryName("amd64")),
  cluster: () => cluster,
  noCaBundle: false,
});

interface Pod {
  serviceAccountName: string;
  containers: {
    command: string[];
    args: string[];
    env: { name: string; value?: string; valueFrom?: { fieldRef: { fieldPath: string } } }[];
    volumeMounts: { name: string; mountPath: string }[];
  }[];
  volumes: {
    name: string;
    configMap?: { name: string; defaultMode: number };
    secret?: { secretName: string; defaultMode: number };
  }[];
}

/** Writes a file of a mounted volume into the image root: owned by root, group the pod's fsGroup. */
function volumeFile(path: string, text: string, mode: number): void {
  mkdirSync(dirname(join(imageRoot, path)), { recursive: true });
  writeFileSync(join(imageRoot, path), text);
  chownSync(join(imageRoot, path), 0, NONROOT_ID);
  chmodSync(join(imageRoot, path), mode);
}

/**
 * Lays the pod's volumes into the image root as a kubelet would mount them: the ConfigMap, the Talos
 * secret (a talosconfig for the fake apid) and the ServiceAccount's token, CA and namespace.
 */
async function mountVolumes(pod: Pod, namespace: string): Promise<void> {
  const container = pod.containers[0];
  if (!container) throw new Error("no container");
  for (const m of container.volumeMounts) {
    const v = pod.volumes.find((x) => x.name === m.name);
    if (v?.configMap) {
      const cm = await cluster.adminClient.get<{ data: Record<string, string> }>(
        `/api/v1/namespaces/${namespace}/configmaps/${v.configMap.name}`,
      );
      for (const [key, text] of Object.entries(cm.data))
        volumeFile(join(m.mountPath, key), text, v.configMap.defaultMode);
    } else if (v?.secret) {
      volumeFile(join(m.mountPath, "config"), await apid.talosconfig(), v.secret.defaultMode);
    } else throw new Error(`Cannot mount ${m.name}: neither a ConfigMap nor a Secret`);
  }
  const conn = await cluster.serviceAccountConnection(namespace, pod.serviceAccountName);
  if (conn.auth.kind !== "token") throw new Error("no token");
  const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  volumeFile(`${sa}/token`, conn.auth.token, 0o640);
  volumeFile(`${sa}/ca.crt`, conn.ca as string, 0o640);
  volumeFile(`${sa}/namespace`, namespace, 0o640);
}

/** The container's environment as a kubelet resolves it, with the test bed's ports (see the header). */
function podEnv(pod: Pod, secureHost: string, securePort: string): Record<string, string> {
  const env: Record<string, string> = {
    KUBERNETES_SERVICE_HOST: secureHost,
    KUBERNETES_SERVICE_PORT: securePort,
  };
  for (const e of pod.containers[0]?.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef.fieldPath === "status.podIP") env[e.name] = "127.0.0.1";
    else throw new Error(`Cannot resolve ${e.name}`);
  }
  if (env.TALOS_ENDPOINTS === "127.0.0.1") env.TALOS_ENDPOINTS = `127.0.0.1:${apid.port}`;
  if (env.KUBERNETES_SERVICE_PORT === "6443") env.KUBERNETES_SERVICE_PORT = securePort;
  return env;
}

/**
 * Runs the image's binary in the pulled image's root as the pod of a stored Deployment or DaemonSet
 * would run (see the header), and checks that it takes the Lease, initializes the fixture's node
 * (registered here by a simulated kubelet), answers /readyz and releases the Lease on SIGTERM.
 */
async function runAsPod(
  workload: { resource: "deployments" | "daemonsets"; namespace: string; name: string },
  fixture: string,
): Promise<void> {
  const stored = await cluster.adminClient.get<{ spec: { template: { spec: Pod } } }>(
    `/apis/apps/v1/namespaces/${workload.namespace}/${workload.resource}/${workload.name}`,
  );
  const pod = stored.spec.template.spec;
  const container = pod.containers[0];
  if (!container) throw new Error("no container");
  expect(container.command).toEqual([BINARY_PATH]);
  await mountVolumes(pod, workload.namespace);
  const api = new URL(cluster.url);
  const port = await freePort();
  const args = container.args.map((a) => (a.startsWith("--secure-port=") ? `--secure-port=${port}` : a));
  const proc = runInRoot(imageRoot, args, podEnv(pod, api.hostname, api.port));
  const log = collect(proc);
  await waitFor(
    () => log.text().includes("Successfully acquired lease"),
    30_000,
    () => `no lease:\n${log.text()}`,
  );
  const spec = loadFixture(fixture);
  if (fixture !== "aws") apid.addNode(spec);
  kubelets.push(
    await SimulatedKubelet.register(cluster, { name: spec.name, ips: spec.nodeIPs, heartbeatMs: 0 }),
  );
  await waitFor(
    async () => {
      const n = await cluster.adminClient.get<V1Node>(`/api/v1/nodes/${spec.name}`);
      return (
        Boolean(n.spec?.providerID) && !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT)
      );
    },
    30_000,
    () => `node ${spec.name} not initialized:\n${log.text()}`,
  );
  const ready = await fetch(`https://127.0.0.1:${port}/readyz`, { tls: { rejectUnauthorized: false } });
  expect(ready.status).toBe(200);
  expect(log.text()).toContain(`server="${cluster.url}"`);
  expect(log.text()).toContain(`lease="${workload.namespace}/${LEASE_NAME}"`);
  expect(log.text()).not.toMatch(/forbidden|\b403\b|EACCES|EROFS/i);
  proc.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
  expect(log.text()).toContain("Released lease");
}

describe("the raw manifests on the test bed", () => {
  test.each([
    ["Deployment", "deployments", "aws"],
    ["DaemonSet", "daemonsets", "gcp"],
  ] as const)(
    "the %s manifest applies, and the image's binary run as its pod takes the Lease and initializes a node",
    async (kind, resource, fixture) => {
      const file = `${APP_NAME}-${kind.toLowerCase()}.yaml`;
      const objects = parseAllDocuments(readFileSync(join(out, file), "utf8")).map(
        (d) => d.toJS() as KubeObject,
      );
      await cluster.apply(objects);
      await runAsPod({ resource, namespace: NAMESPACE, name: APP_NAME }, fixture);
    },
  );
});

describe("the chart through a registry", () => {
  const namespace = "talos-ccm-oci";
  /** Not the chart name: the objects are `oci-talos-cloud-controller-manager`, beside the raw manifests'. */
  const release = "oci";

  /** helm on the test bed's API server; a failure throws with helm's stderr. */
  function helm(args: string[]): string {
    const r = runHelm(work, args);
    if (r.status !== 0) throw new Error(`helm ${args[0]} failed: ${r.stderr}`);
    return `${r.stdout}${r.stderr}`;
  }

  test("helm push to oci://<registry>/charts, helm install from there: the installed Deployment's pod takes its Lease and initializes a node", async () => {
    const repository = `${registry.address}/charts`;
    const pushedChart = helm([
      "push",
      join(out, `${APP_NAME}-${pkg.version}.tgz`),
      `oci://${repository}`,
      "--plain-http",
    ]);
    expect(pushedChart).toContain(`Pushed: ${repository}/${APP_NAME}:${pkg.version}`);
    const chartDigest = pushedChart.match(/^Digest: (sha256:[0-9a-f]{64})$/m)?.[1];
    expect(chartDigest).toBeDefined();
    const kubeconfig = writeKubeconfig(join(work, "admin.kubeconfig"), cluster.admin);
    const installed = helm([
      "install",
      release,
      `oci://${repository}/${APP_NAME}`,
      "--version",
      pkg.version,
      "--plain-http",
      "--kubeconfig",
      kubeconfig,
      "--namespace",
      namespace,
      "--create-namespace",
      // The image from the local registry, as a mirror's users set it.
      "--set",
      `image.repository=${registry.address}/${APP_NAME}`,
    ]);
    expect(installed).toContain("STATUS: deployed");
    // helm pulled the chart it pushed.
    expect(installed).toContain(`Digest: ${chartDigest}`);
    const name = `${release}-${APP_NAME}`;
    const deployment = await cluster.adminClient.get<{
      spec: { template: { spec: { containers: { image: string }[] } } };
    }>(`/apis/apps/v1/namespaces/${namespace}/deployments/${name}`);
    // Its image is the tag pushed above, which the registry resolves to the index whose root the pod runs in.
    const images = deployment.spec.template.spec.containers.map((c) => c.image);
    expect(images).toEqual([`${registry.address}/${APP_NAME}:v${pkg.version}`]);
    expect(crane(work, ["digest", images[0] as string]).trim()).toBe(pushed.split("@")[1] as string);
    await runAsPod({ resource: "deployments", namespace, name }, "azure");
  });
});
