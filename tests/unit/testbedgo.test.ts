// tests/support/testbed-bins.sh checks the Go version once, before it builds anything: every
// component's minimum at once (Talos' apid needs the newest), so an older Go fails at the start
// with the version it needs, not deep in a build after other binaries were made. TESTBED_PARTS makes
// only some binaries (`npm run demo` needs kube-apiserver and etcd alone).

import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const script = join(import.meta.dir, "..", "support", "testbed-bins.sh");
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/**
 * Runs the script with a `go` that reports `version` and fails every other command (each call
 * logged), an empty cache and `env` added.
 */
function runWithGo(version: string, more: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), "talos-ccm-testbed-go-"));
  dirs.push(dir);
  const bin = join(dir, "bin");
  const cache = join(dir, "cache");
  spawnSync("mkdir", ["-p", bin, cache]);
  writeFileSync(
    join(bin, "go"),
    `#!/usr/bin/env bash\necho "$*" >>"${join(dir, "calls")}"\nif [[ "$*" == "env GOVERSION" ]]; then echo ${version}; exit 0; fi\nexit 1\n`,
  );
  chmodSync(join(bin, "go"), 0o755);
  const env: Record<string, string> = {
    PATH: `${bin}:/usr/bin:/bin`,
    HOME: dir,
    TESTBED_CACHE: cache,
    ...more,
  };
  const r = spawnSync("bash", [script], { env, encoding: "utf8" });
  const calls = existsSync(join(dir, "calls"))
    ? readFileSync(join(dir, "calls"), "utf8").trim().split("\n")
    : [];
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, cached: readdirSync(cache), calls, dir };
}

describe("testbed-bins.sh's Go gate", () => {
  test.each(["go1.25.5", "go1.26", "go1.26.2", "go1.26rc1"])(
    "%s is refused before anything is built, naming 1.26.3",
    (v) => {
      const r = runWithGo(v);
      expect(r.status).toBe(1);
      expect(r.stderr).toStartWith(
        "testbed-bins.sh: Go >= 1.26.3 is required to build the test bed (Talos' apid needs 1.26.3",
      );
      expect(r.stderr).toContain(`found: ${v}`);
      expect(r.calls).toEqual(["env GOVERSION"]);
      expect(r.cached).toEqual([]);
    },
  );

  test.each(["go1.26.3", "go1.26.10", "go1.27.0", "go2.0"])(
    "%s passes the gate (a build is tried, which the fake Go fails)",
    (v) => {
      const r = runWithGo(v);
      expect(r.status).not.toBe(0);
      expect(r.stderr).not.toContain("is required");
      expect(r.calls[0]).toBe("env GOVERSION");
      expect(r.calls.length).toBeGreaterThan(1);
    },
  );

  test("TESTBED_PARTS=apiserver etcd with both given: nothing is built, Go is not asked, and only their paths are printed", () => {
    const dir = mkdtempSync(join(tmpdir(), "talos-ccm-testbed-parts-"));
    dirs.push(dir);
    const exe = (name: string) => {
      const path = join(dir, name);
      writeFileSync(path, "#!/bin/sh\n");
      chmodSync(path, 0o755);
      return path;
    };
    const given = { KUBE_APISERVER: exe("kube-apiserver"), KUBECTL: exe("kubectl"), ETCD: exe("etcd") };
    const r = runWithGo("go1.20.1", { ...given, TESTBED_PARTS: "apiserver etcd" });
    expect(r.status).toBe(0);
    expect(r.calls).toEqual([]);
    expect(r.stdout).toBe(
      `ETCD=${given.ETCD}\nKUBE_APISERVER=${given.KUBE_APISERVER}\nKUBECTL=${given.KUBECTL}\n`,
    );
    // Without TESTBED_PARTS the same call would make helm, the simulator and apid: the old Go is refused.
    const all = runWithGo("go1.20.1", given);
    expect(all.status).toBe(1);
    expect(all.stderr).toContain("Go >= 1.26.3 is required");
  });
});
