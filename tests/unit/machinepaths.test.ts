// No absolute path of a machine in the repository's code: a clone must work wherever it is, with
// nothing beside it (issue 41). Every text file under tests/, lib/, deploy/, .ci/ and .github/, and
// build.ts and main.ts, is searched for paths under the folders where a machine keeps its users' and
// its work's files (/work, /root, /home, /Users, /mnt, /media, /srv); a path inside the image or a
// made-up home in a test's input is allowed only by an entry below that says why.

import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..", "..");

/** A path under a machine's home or work folders, not preceded by a name character ("~/", "a/home/"). */
const MACHINE_PATH =
  /(?<![\w.~$}-])\/(?:(?:work|root|home|Users|mnt|media|srv)\/[^\s"'`),;]*|(?:[\w.-]+\/)+shared\/fixtures\b[^\s"'`),;]*)/g;

/** Paths that look like a machine's but are not, each with why. */
const ALLOWED: Record<string, string> = {
  "/home/nonroot":
    "the distroless image's nonroot user's home, inside the image (debianbase.ts, image tests)",
  "/home/nonroot:/sbin/nologin": "the same, in the image's /etc/passwd line",
  "/home/u": "a made-up home the talosconfig tests pass in",
  "/home/u/.talos/config": "the talosconfig under that made-up home",
};

const SEARCHED = ["tests", "lib", "deploy", ".ci", ".github", "build.ts", "main.ts"];
const TEXT = /\.(ts|js|mjs|sh|go|mod|sum|yaml|yml|json|toml|md|proto|txt)$|^[^.]+$/;

/** Every text file under `path` (relative to the repository), node_modules skipped. */
function files(path: string): string[] {
  const full = join(root, path);
  if (statSync(full).isFile()) return [path];
  return readdirSync(full, { withFileTypes: true }).flatMap((e) => {
    if (e.name === "node_modules") return [];
    const p = `${path}/${e.name}`;
    if (e.isDirectory()) return files(p);
    return e.isFile() && TEXT.test(e.name) ? [p] : [];
  });
}

/** The machine paths in `text` that ALLOWED does not explain, as "file:line: path". */
function machinePaths(file: string, text: string): string[] {
  return text.split("\n").flatMap((line, i) =>
    [...line.matchAll(MACHINE_PATH)]
      .map((m) => m[0].replace(/[.:]+$/, ""))
      .filter((p) => !(p in ALLOWED))
      .map((p) => `${file}:${i + 1}: ${p}`),
  );
}

describe("absolute machine paths", () => {
  test("the search finds what it is for", () => {
    const work = ["", "work", "shared", "fixtures"].join("/");
    const home = ["", "home", "someone", ".cache"].join("/");
    const root_ = ["", "root", "go", "bin"].join("/");
    expect(machinePaths("x.ts", `const a = "${work}";\n  "$REPO/../shared" ${home}/x; (${root_})`)).toEqual([
      `x.ts:1: ${work}`,
      `x.ts:2: ${home}/x`,
      `x.ts:2: ${root_}`,
    ]);
    // The shared fixtures' folder under any absolute root is one machine's layout, not a clone's.
    const elsewhere = ["", "r", "shared", "fixtures"].join("/");
    expect(machinePaths("y.ts", `mirrorDir: "${elsewhere}", "../shared/fixtures"`)).toEqual([
      `y.ts:1: ${elsewhere}`,
    ]);
    expect(
      machinePaths("x.sh", 'CACHE="$HOME/.cache/x" ~/.cache/y ../shared/fixtures /tmp/x /etc/ssl a/home/b'),
    ).toEqual([]);
  });

  test("tests/, lib/, deploy/, .ci/, .github/, build.ts and main.ts name none", () => {
    const all = SEARCHED.flatMap(files);
    expect(all.length).toBeGreaterThan(100);
    expect(all.flatMap((f) => machinePaths(f, readFileSync(join(root, f), "utf8")))).toEqual([]);
  });
});
