// The generated protobuf code must match lib/talos.proto: regenerate with the exact `gen:proto`
// configuration into a temporary directory and compare byte for byte.

import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dir, "../..");

/** The `--template` JSON of the `gen:proto` script, so the test runs what developers run. */
function genTemplate(): { version: string; plugins: Array<{ out: string; [k: string]: unknown }> } {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    scripts: Record<string, string>;
  };
  const script = pkg.scripts["gen:proto"] ?? "";
  const m = script.match(/^buf generate lib --template '(.+)'$/);
  if (!m?.[1]) throw new Error(`Cannot parse the gen:proto script: ${script}`);
  return JSON.parse(m[1]);
}

test("gen:proto output matches the committed lib/talos_pb.ts", () => {
  const template = genTemplate();
  expect(template.plugins.map((p) => p.out)).toEqual(["lib"]);
  const out = mkdtempSync(join(tmpdir(), "talos-pb-"));
  try {
    for (const p of template.plugins) p.out = out;
    const run = Bun.spawnSync(
      [join(root, "node_modules/.bin/buf"), "generate", "lib", "--template", JSON.stringify(template)],
      {
        cwd: root,
        env: { ...process.env, PATH: `${join(root, "node_modules/.bin")}:${process.env.PATH ?? ""}` },
      },
    );
    expect(run.stderr.toString()).toBe("");
    expect(run.exitCode).toBe(0);
    const fresh = readFileSync(join(out, "talos_pb.ts"), "utf8");
    const committed = readFileSync(join(root, "lib/talos_pb.ts"), "utf8");
    expect(fresh === committed).toBe(true);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
