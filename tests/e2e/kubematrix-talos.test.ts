// The Kubernetes support matrix follows Talos: the default is the minor of the Talos machinery's
// DefaultKubernetesVersion (read from the module the Talos simulator is built with, in Go's module
// cache, which building the test bed fills), the oldest is SupportedKubernetesVersions minors below
// it. Not a unit test because it reads that module; the rest of the matrix's checks are in
// tests/unit/kubematrix.test.ts.

import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SUPPORTED_MINORS } from "../../lib/kubeversions.ts";
import { DEFAULT_KUBE_VERSION } from "../support/kubematrix.ts";

const root = join(import.meta.dir, "..", "..");
const minor = (v: string) => Number(/^v1\.(\d+)\./.exec(v)?.[1]);

/** The Talos machinery constants the simulator's go.mod pins (from Go's module cache). */
function talosConstants(): { defaultMinor: number; supported: number } {
  const gomod = readFileSync(join(root, "tests/support/talossim/go.mod"), "utf8");
  const version = /github\.com\/siderolabs\/talos\/pkg\/machinery (v[^\s]+)/.exec(gomod)?.[1];
  const cache = spawnSync("go", ["env", "GOMODCACHE"], { encoding: "utf8" }).stdout?.trim();
  if (!version || !cache)
    throw new Error("needs Go and the Talos machinery module (tests/support/testbed-bins.sh fetches it)");
  const file = join(cache, `github.com/siderolabs/talos/pkg/machinery@${version}`, "constants/constants.go");
  const text = readFileSync(file, "utf8");
  const def = /DefaultKubernetesVersion = "1\.(\d+)\.\d+"/.exec(text)?.[1];
  const supported = /SupportedKubernetesVersions = (\d+)/.exec(text)?.[1];
  if (!def || !supported) throw new Error(`no Kubernetes version constants in ${file}`);
  return { defaultMinor: Number(def), supported: Number(supported) };
}

describe("the Kubernetes support matrix", () => {
  test("follows Talos: its default minor, and as many minors back as it supports", () => {
    const talos = talosConstants();
    expect(minor(DEFAULT_KUBE_VERSION)).toBe(talos.defaultMinor);
    expect(SUPPORTED_MINORS.oldest).toBe(talos.defaultMinor - talos.supported + 1);
    expect(SUPPORTED_MINORS.newest).toBeGreaterThanOrEqual(talos.defaultMinor);
  });
});
