// The support matrix is written in four places that must agree: tests/support/kubematrix.ts (what
// `npm test` runs), lib/kubeversions.ts (the range the CCM warns outside of), the test bed's default
// in tests/support/testbed-bins.sh, and the README's table. Its ends come from Talos, which
// tests/e2e/kubematrix-talos.test.ts checks against the Talos machinery module (it needs Go's module
// cache, which building the test bed fills; unit tests need nothing built).

import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SUPPORTED_MINORS } from "../../lib/kubeversions.ts";
import { CORE_FLOWS, DEFAULT_KUBE_VERSION, KUBE_MATRIX } from "../support/kubematrix.ts";

const root = join(import.meta.dir, "..", "..");
const minor = (v: string) => Number(/^v1\.(\d+)\./.exec(v)?.[1]);

describe("the Kubernetes support matrix", () => {
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
