// The release image without a Docker engine: a root holding only the compiled binary and what the
// distroless glibc base of deploy/Dockerfile gives it (the glibc files `ldd` names, /etc/passwd and
// /etc/group with user nonroot, /tmp, nonroot's home; deliberately no CA bundle and no shell), run
// with chroot as uid 65532 on a read-only bind of that root, with /proc mounted as a container
// runtime would. The binary prints its version, and completes a TLS connection to the test API
// server with a kubeconfig (inline CA and client certificate) inside the root, and serves HTTPS with
// its in-memory certificate. Needs root (chroot, mount): true here and in CI.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { BINARY_PATH, NONROOT_ID } from "../../lib/manifests.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { ccmBinary } from "../support/process.ts";

let cluster: TestCluster;
let root: string;
const live = new Set<Subprocess>();

/** The shared libraries the binary loads, as `ldd` lists them (the vDSO has no file). */
function sharedLibraries(binary: string): string[] {
  const r = spawnSync("ldd", [binary], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`Cannot run ldd ${binary}: ${r.stderr || r.stdout}`);
  return [...r.stdout.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x[0-9a-f]+\)/g)].map((m) => m[1] as string);
}

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

/**
 * Spawns the binary inside the root: a private mount namespace makes a read-only bind of the root
 * and mounts /proc in it (both vanish with the process); `exec` keeps one PID, so signals reach the
 * binary itself.
 */
function runInRoot(args: string[], env: Record<string, string> = {}): Subprocess<"ignore", "pipe", "pipe"> {
  const q = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
  const script = [
    `mount --bind ${q(root)} ${q(root)}`,
    `mount -o remount,bind,ro ${q(root)}`,
    `mount -t proc proc ${q(join(root, "proc"))}`,
    `exec chroot --userspec=${NONROOT_ID}:${NONROOT_ID} ${q(root)} ${BINARY_PATH} ${args.map(q).join(" ")}`,
  ].join(" && ");
  const proc = spawn(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { HOME: "/home/nonroot", ...env },
  });
  live.add(proc);
  void proc.exited.then(() => live.delete(proc));
  return proc;
}

/** Collects a process' stdout and stderr as they come. */
function collect(proc: Subprocess<"ignore", "pipe", "pipe">): { text: () => string } {
  let out = "";
  for (const stream of [proc.stdout, proc.stderr]) {
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stream) out += dec.decode(chunk);
    })();
  }
  return { text: () => out };
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
  for (const p of live) p.kill("SIGKILL");
  await cluster?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("minimal distroless root", () => {
  test("the root holds the binary and glibc only: no shell, no CA bundle", () => {
    const libs = sharedLibraries(ccmBinary());
    expect(libs.some((l) => /\/libc\.so\.6$/.test(l))).toBe(true);
    expect(libs.every((l) => /\/(ld-linux[^/]*|lib(c|m|dl|pthread|rt)\.so\.\d+)$/.test(l))).toBe(true);
    for (const absent of [
      "bin/sh",
      "usr/bin/sh",
      "etc/ssl",
      "usr/share/ca-certificates",
      "etc/ca-certificates",
    ]) {
      expect(existsSync(join(root, absent))).toBe(false);
    }
  });

  test("--version runs as nonroot on a read-only root", async () => {
    const proc = runInRoot(["--version"]);
    const out = collect(proc);
    expect(await proc.exited).toBe(0);
    expect(out.text()).toMatch(
      /^talos-cloud-controller-manager \d+\.\d+\.\d+ \(commit \S+, bun \d+\.\d+\.\d+\)\n$/,
    );
  });

  test("completes a TLS connection to the API server and serves HTTPS, as nonroot on a read-only root", async () => {
    const conn = await cluster.userConnection("image-test", ["system:masters"]);
    const kubeconfig = join(root, "etc/kubeconfig");
    writeKubeconfig(kubeconfig, conn);
    chownSync(kubeconfig, NONROOT_ID, NONROOT_ID);
    chmodSync(kubeconfig, 0o400);
    const port = await freePort();
    const proc = runInRoot([
      "--kubeconfig=/etc/kubeconfig",
      "--controllers=-cloud-node",
      "--leader-elect=false",
      `--secure-port=${port}`,
      "--bind-address=127.0.0.1",
    ]);
    const out = collect(proc);
    await waitFor(
      () => out.text().includes("Connected to the Kubernetes API server"),
      20_000,
      () => `no connection in:\n${out.text()}`,
    );
    expect(out.text()).toContain(`server="${cluster.url}"`);
    let status = 0;
    await waitFor(
      async () => {
        status = (await fetch(`https://127.0.0.1:${port}/healthz`, { tls: { rejectUnauthorized: false } }))
          .status;
        return status === 200;
      },
      10_000,
      () => `no /healthz (${status}) from:\n${out.text()}`,
    );
    expect(proc.exitCode).toBeNull();
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    expect(out.text()).not.toMatch(/certificate|EACCES|EROFS|read-only file system/i);
  });
});
