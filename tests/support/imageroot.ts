// The image test, shared: the binary run inside an image's root filesystem without a container
// engine, as uid 65532 on a read-only bind of that root with /proc mounted, as a container runtime
// would. tests/e2e/image.test.ts runs it on a root holding only the binary and what the distroless
// base gives it; tests/e2e/release.test.ts on the root unpacked from the release image's layers.
// Needs root (chroot, mount).

import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, lstatSync } from "node:fs";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { BINARY_PATH, NONROOT_ID } from "../../lib/manifests.ts";
import { freePort, type TestCluster, waitFor, writeKubeconfig } from "./cluster.ts";

const live = new Set<Subprocess>();
process.once("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

/** Kills every process {@link runInRoot} started that is still running. */
export function killInRoot(): void {
  for (const p of live) p.kill("SIGKILL");
}

/** The shared libraries a binary loads, as `ldd` lists them (the vDSO has no file). */
export function sharedLibraries(binary: string): string[] {
  const r = spawnSync("ldd", [binary], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`Cannot run ldd ${binary}: ${r.stderr || r.stdout}`);
  return [...r.stdout.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x[0-9a-f]+\)/g)].map((m) => m[1] as string);
}

/**
 * Spawns the binary inside `root`: a private mount namespace makes a read-only bind of the root and
 * mounts /proc in it (both vanish with the process); `exec` keeps one PID, so signals reach the
 * binary itself.
 */
export function runInRoot(
  root: string,
  args: string[],
  env: Record<string, string> = {},
): Subprocess<"ignore", "pipe", "pipe"> {
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
export function collect(proc: Subprocess<"ignore", "pipe", "pipe">): { text: () => string } {
  let out = "";
  for (const stream of [proc.stdout, proc.stderr]) {
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stream) out += dec.decode(chunk);
    })();
  }
  return { text: () => out };
}

/** Whether `path` names anything in the root (a symlink counts as itself, never followed out of the root). */
function present(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** What the image suite runs on, read once the suite's beforeAll has run. */
export interface ImageRootSetup {
  /** The root filesystem; it must have /proc to mount on. */
  root: () => string;
  /** The binary on the host, as `ldd` reads it (the root's copy is the same file). */
  binary: () => string;
  cluster: () => TestCluster;
  /** Whether the root must have no CA bundle (the minimal root); distroless ships one. */
  noCaBundle: boolean;
}

/** The image tests: what the root holds, `--version`, and TLS both ways, as nonroot on a read-only root. */
export function describeImageRoot(label: string, s: ImageRootSetup): void {
  describe(label, () => {
    test("the root has no shell, and the binary links nothing but glibc, which the root has", () => {
      const libs = sharedLibraries(s.binary());
      expect(libs.some((l) => /\/libc\.so\.6$/.test(l))).toBe(true);
      expect(libs.every((l) => /\/(ld-linux[^/]*|lib(c|m|dl|pthread|rt)\.so\.\d+)$/.test(l))).toBe(true);
      for (const lib of libs)
        expect({ lib, present: present(join(s.root(), lib)) }).toEqual({ lib, present: true });
      const absent = ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/apt", "usr/bin/dpkg"];
      if (s.noCaBundle) absent.push("etc/ssl", "usr/share/ca-certificates", "etc/ca-certificates");
      for (const path of absent)
        expect({ path, present: present(join(s.root(), path)) }).toEqual({ path, present: false });
    });

    test("--version runs as nonroot on a read-only root", async () => {
      const proc = runInRoot(s.root(), ["--version"]);
      const out = collect(proc);
      expect(await proc.exited).toBe(0);
      expect(out.text()).toMatch(
        /^talos-cloud-controller-manager \d+\.\d+\.\d+ \(commit \S+, bun \d+\.\d+\.\d+\)\n$/,
      );
    });

    test("completes a TLS connection to the API server and serves HTTPS, as nonroot on a read-only root", async () => {
      const cluster = s.cluster();
      const conn = await cluster.userConnection("image-test", ["system:masters"]);
      const kubeconfig = join(s.root(), "etc/kubeconfig");
      writeKubeconfig(kubeconfig, conn);
      chownSync(kubeconfig, NONROOT_ID, NONROOT_ID);
      chmodSync(kubeconfig, 0o400);
      const port = await freePort();
      const proc = runInRoot(s.root(), [
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
}
