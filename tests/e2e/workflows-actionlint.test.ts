// actionlint (ACTIONLINT, which `npm test` builds with tests/support/actionlint.sh) passes the
// workflows (.github/workflows/release.yml and ci.yml) and fails broken copies of them, so `npm run
// lint`'s actionlint cannot pass by checking nothing. Here rather than in tests/unit because it needs
// a binary built from a Go module; `npm test` builds actionlint only when this file runs
// (tests/support/testneeds.ts). The workflows' structure and scripts are checked, with nothing built,
// by tests/unit/release-workflow.test.ts.

import { afterAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "..", "..");
const workflows = join(root, ".github", "workflows");
const texts = {
  "release.yml": readFileSync(join(workflows, "release.yml"), "utf8"),
  "ci.yml": readFileSync(join(workflows, "ci.yml"), "utf8"),
};
type WorkflowFile = keyof typeof texts;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function actionlint(cwd: string, file: string): { status: number | null; out: string } {
  const bin = process.env.ACTIONLINT;
  if (!bin || !existsSync(bin)) {
    throw new Error(
      "Cannot run actionlint: ACTIONLINT is not set to a binary (npm test sets it; or ACTIONLINT=$(tests/support/actionlint.sh --print | cut -d= -f2))",
    );
  }
  const r = spawnSync(bin, ["-shellcheck=", "-pyflakes=", "-no-color", file], { cwd, encoding: "utf8" });
  return { status: r.status, out: r.stdout + r.stderr };
}

/** A repository of the two workflows, `file` replaced by `text`; actionlint run on `file` there. */
function lintCopy(file: WorkflowFile, text: string): { status: number | null; out: string } {
  const dir = mkdtempSync(join(tmpdir(), "talos-ccm-actionlint-"));
  dirs.push(dir);
  mkdirSync(join(dir, ".git"));
  mkdirSync(join(dir, ".github", "workflows"), { recursive: true });
  for (const [name, t] of Object.entries({ ...texts, [file]: text }))
    writeFileSync(join(dir, ".github", "workflows", name), t);
  return actionlint(dir, join(".github", "workflows", file));
}

const broken: Array<[WorkflowFile, string, (t: string) => string, RegExp]> = [
  [
    "release.yml",
    "a job that needs a job that does not exist",
    (t) => t.replace("needs: build\n", "needs: bulid\n"),
    /\[job-needs\]/,
  ],
  [
    "release.yml",
    "an output of a step that does not exist",
    (t) =>
      t.replace(
        "steps.image.outputs.digest }}\n      chart_digest",
        "steps.imgae.outputs.digest }}\n      chart_digest",
      ),
    /\[expression\]/,
  ],
  [
    "release.yml",
    "a permission that does not exist",
    (t) => t.replace("id-token: write #", "id_token: write #"),
    /\[permissions\]/,
  ],
  [
    "release.yml",
    "an unknown event",
    (t) => t.replace("  push:\n    tags:", "  pushed:\n    tags:"),
    /\[events\]/,
  ],
  [
    "release.yml",
    "an input the called ci.yml does not declare",
    (t) => t.replace("fresh_testbed: true", "fresh_test_bed: true"),
    /\[workflow-call\]/,
  ],
  [
    "ci.yml",
    "an input the workflow does not declare",
    (t) => t.replace("!inputs.fresh_testbed }}\n", "!inputs.fresh }}\n"),
    /\[expression\]/,
  ],
  ["ci.yml", "an unknown event", (t) => t.replace("  pull_request:\n", "  pull_requests:\n"), /\[events\]/],
];

describe("actionlint", () => {
  test("the workflows pass actionlint", () => {
    for (const file of Object.keys(texts)) {
      const r = actionlint(root, join(".github", "workflows", file));
      expect({ file, out: r.out, status: r.status }).toEqual({ file, out: "", status: 0 });
    }
  });

  test.each(broken)("%s: actionlint fails %s", (file, _, breakIt, rule) => {
    const text = breakIt(texts[file]);
    expect(text).not.toBe(texts[file]);
    const r = lintCopy(file, text);
    expect(r.status).toBe(1);
    expect(r.out).toMatch(rule);
  });
});
