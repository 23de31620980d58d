// The release image without a Docker engine: a root holding only the compiled binary and what the
// distroless glibc base of deploy/Dockerfile gives it (the glibc files `ldd` names, /etc/passwd and
// /etc/group with user nonroot, /tmp, nonroot's home; deliberately no CA bundle and no shell), run
// with chroot as uid 65532 on a read-only bind of that root, with /proc mounted as a container
// runtime would. The binary prints its version, and completes a TLS connection to the test API
// server with a kubeconfig (inline CA and client certificate) inside the root, and serves HTTPS with
// its in-memory certificate. Needs root (chroot, mount): true here and in CI. The tests themselves are
// tests/support/imageroot.ts', which tests/e2e/release.test.ts also runs on the root unpacked from the
// release image's layers.

import { afterAll, beforeAll } from "bun:test";
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { BINARY_PATH, NONROOT_ID } from "../../lib/manifests.ts";
import { TestCluster } from "../support/cluster.ts";
import { describeImageRoot, killInRoot, sharedLibraries } from "../support/imageroot.ts";
import { ccmBinary } from "../support/process.ts";

let cluster: TestCluster;
let root: string;

/** What gcr.io/distroless/base-debian12:nonroot lays down besides libraries (its passwd and group). */
const PASSWD = [
  "root:x:0:0:root:/root:/sbin/nologin",
  "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin",
  `nonroot:x:${NONROOT_ID}:${NONROOT_ID}:nonroot:/home/nonroot:/sbin/nologin`,
  "",
].join("\n");
const GROUP = ["root:x:0:", "nobody:x:65534:", `nonroot:x:${NONROOT_ID}:`, ""].join("\n");

function buildRoot(): string {
  const dir = mkdtempSync(join(tmpdir(), "talos-ccm-image-"));
  try {
    fillRoot(dir);
  } catch (err) {
    // The copy of the binary alone is over 100 MB: never leave it behind.
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return dir;
}

function fillRoot(dir: string): void {
  chmodSync(dir, 0o755);
  const binary = ccmBinary();
  copyFileSync(binary, join(dir, BINARY_PATH));
  chmodSync(join(dir, BINARY_PATH), 0o555);
  for (const lib of sharedLibraries(binary)) {
    mkdirSync(join(dir, dirname(lib)), { recursive: true });
    copyFileSync(lib, join(dir, lib));
  }
  mkdirSync(join(dir, "etc"));
  writeFileSync(join(dir, "etc/passwd"), PASSWD);
  writeFileSync(join(dir, "etc/group"), GROUP);
  mkdirSync(join(dir, "tmp"), { mode: 0o1777 });
  chmodSync(join(dir, "tmp"), 0o1777);
  mkdirSync(join(dir, "home/nonroot"), { recursive: true });
  chownSync(join(dir, "home/nonroot"), NONROOT_ID, NONROOT_ID);
  mkdirSync(join(dir, "proc"));
}

beforeAll(async () => {
  // Fails (never skips) without root, before building anything, naming the test and why.
  if (process.getuid?.() !== 0) {
    throw new Error(
      "tests/e2e/image.test.ts needs root: it builds a root owned by uid 65532, bind-mounts it read-only " +
        "and chroots into it (run `npm test` as root, as CI does)",
    );
  }
  cluster = await TestCluster.start();
  root = buildRoot();
});

afterAll(async () => {
  killInRoot();
  await cluster?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describeImageRoot("minimal distroless root", {
  root: () => root,
  binary: ccmBinary,
  cluster: () => cluster,
  noCaBundle: true,
});
