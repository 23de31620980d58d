// tests/support/testneeds.ts: what `npm test` builds for the test paths it is given. The unit tests
// need nothing built (a fresh clone runs them after `npm ci` alone); each tool only for its files.

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ALL_NEEDS, fileNeeds, pathFilters, type TestNeed, testNeeds } from "../support/testneeds.ts";

const root = join(import.meta.dir, "..", "..");
const files = [...new Bun.Glob("tests/**/*.test.ts").scanSync({ cwd: root })].sort();

describe("testNeeds()", () => {
  const cases: Array<[string, string[], string[]]> = [
    ["the unit tests", ["tests/unit"], []],
    ["the unit tests, as ./tests/unit/ with options", ["./tests/unit/", "-t", "e2e", "--randomize"], []],
    ["the unit tests by absolute path", [join(root, "tests/unit")], []],
    ["the release workflow's unit test", ["tests/unit/release-workflow.test.ts"], []],
    ["actionlint's checks of the workflows", ["tests/e2e/workflows-actionlint.test.ts"], ["actionlint"]],
    ["one end-to-end file", ["tests/e2e/csr.test.ts"], ["testbed", "ccm"]],
    ["a beside test", ["tests/e2e/beside-oxide.test.ts"], ["testbed", "cloudccm", "ccm"]],
    ["a name filter that matches unit and end-to-end files", ["csr-threats"], ["testbed", "ccm"]],
    ["the hostile peer's file", ["h2-hostile"], ["testbed", "h2peer", "ccm"]],
    ["everything", ["tests/"], [...ALL_NEEDS]],
    ["no path at all", ["--randomize"], [...ALL_NEEDS]],
  ];
  test.each(cases)("%s", (_, args, want) => {
    expect(testNeeds(args, files, root)).toEqual(want as TestNeed[]);
  });

  test("every unit test file needs nothing; every other file at least what it runs", () => {
    expect(files.filter((f) => f.startsWith("tests/unit/")).length).toBeGreaterThan(50);
    for (const f of files) {
      if (f.startsWith("tests/unit/")) expect({ f, needs: fileNeeds(f) }).toEqual({ f, needs: [] });
      else expect(fileNeeds(f).length).toBeGreaterThan(0);
    }
    expect(fileNeeds("tests/other/new.test.ts")).toEqual(ALL_NEEDS);
  });
});

describe("pathFilters()", () => {
  test("options and their values are not paths", () => {
    expect(
      pathFilters([
        "-t",
        "a name",
        "./tests/unit",
        "--timeout",
        "5000",
        "--bail",
        "2",
        "--seed=3",
        "--bail",
        "csr",
      ]),
    ).toEqual(["tests/unit", "csr"]);
  });
});
