// The support matrix is written in four places that must agree: tests/support/kubematrix.ts (what
// `npm test` runs), lib/kubeversions.ts (the range the CCM warns outside of), the test bed's default
// in tests/support/testbed-bins.sh, and the README's table. Its ends come from Talos: the default is
// the minor of the Talos machinery's DefaultKubernetesVersion (read from the module the Talos
// simulator is built with), the oldest is SupportedKubernetesVersions minors below it.

import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SUPPORTED_MINORS } from "../../lib/kubeversions.ts";
import { CORE_FLOWS, DEFAULT_KUBE_VERSION, KUBE_MATRIX } from "../support/kubematrix.ts";

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

  test("its rows are the supported range's ends and the default, each run by CI", () => {
    const minors = KUBE_MATRIX.map((r) => minor(r.version));
    expect(minors).toContain(SUPPORTED_MINORS.oldest);
    expect(minors).toContain(SUPPORTED_MINORS.newest);
    expect(KUBE_MATRIX.filter((r) => r.suite === "all").map((r) => r.version)).toEqual([
      DEFAULT_KUBE_VERSION,
    ]);
    for (const f of CORE_FLOWS) expect(existsSync(join(root, f))).toBe(true);
  });

  test("the test bed builds the default version unless told otherwise", () => {
    const script = readFileSync(join(root, "tests/support/testbed-bins.sh"), "utf8");
    expect(script).toContain(`K8S_VERSION="\${K8S_VERSION:-${DEFAULT_KUBE_VERSION}}"`);
  });

  test("the README's table has one row per version CI runs, and names the supported range", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const start = readme.indexOf("## Kubernetes versions");
    expect(start).toBeGreaterThan(0);
    const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
    const rows = [...section.matchAll(/^\| (1\.\d+) \((1\.\d+\.\d+)\) \| [^|]+ \| ([^|]+) \|$/gm)];
    expect(rows.map((m) => `v${m[2]}`)).toEqual(KUBE_MATRIX.map((r) => r.version));
    for (const [i, m] of rows.entries()) {
      expect(`v${m[2]}`.startsWith(`v${m[1]}.`)).toBe(true);
      expect(
        m[3]?.trim().startsWith(KUBE_MATRIX[i]?.suite === "all" ? "the whole suite" : "the core flows"),
      ).toBe(true);
    }
    expect(section).toContain(`1.${SUPPORTED_MINORS.oldest} to 1.${SUPPORTED_MINORS.newest}`);
  });
});
