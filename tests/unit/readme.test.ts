// Every configuration example in the README (a ```yaml block starting with `# ccm-config.yaml`) must
// load without errors or warnings, so the documentation cannot drift from what the binary accepts.

import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { formatIssue, parseConfig } from "../../lib/config.ts";
import { DENY_REASONS } from "../../lib/csr.ts";
import { transform } from "../../lib/transform.ts";
import { fixtureNames, loadFixture } from "../support/fixtures.ts";

const readme = readFileSync(join(import.meta.dir, "..", "..", "README.md"), "utf8");
const examples = [...readme.matchAll(/```yaml\n(# ccm-config\.yaml\n[\s\S]*?)```/g)].map(
  (m) => m[1] as string,
);

describe("README configuration examples", () => {
  test("there are examples to check", () => {
    expect(examples.length).toBeGreaterThanOrEqual(3);
  });

  for (const [i, text] of examples.entries()) {
    test(`example ${i + 1} loads without errors or warnings`, () => {
      const config = parseConfig(text);
      expect(config.warnings.map(formatIssue)).toEqual([]);
    });

    test(`example ${i + 1} renders on every fixture node without skipped values`, () => {
      const config = parseConfig(text);
      for (const name of fixtureNames()) {
        const node = loadFixture(name);
        const facts = {
          platformMetadata: node.platformMetadata,
          addresses: [],
          ...(node.systemInformation ? { systemInformation: node.systemInformation } : {}),
        };
        const result = transform(config, facts, node.name);
        expect({ node: name, errors: result.errors }).toEqual({ node: name, errors: [] });
      }
    });
  }
});

describe("README CSR security model", () => {
  const section = readme.slice(readme.indexOf("## CSR security model"), readme.indexOf("## Migrating"));
  const rows = [...section.matchAll(/^\| `([A-Za-z]+)` \|/gm)].map((m) => m[1]);
  test("the CSR table lists every denial reason the policy has, in its order, and no other", () => {
    expect(rows).toEqual([...DENY_REASONS]);
  });
});

describe("README layout table", () => {
  const section = readme.slice(readme.indexOf("### Layout and data flow"), readme.indexOf("## License"));
  const rows = section.split("\n").filter((l) => l.startsWith("| `"));
  const named = rows.flatMap((row) =>
    [...(row.split(" | ")[0] as string).matchAll(/`(?:lib\/)?([a-z0-9_]+\.(?:ts|proto))`/g)].map(
      (m) => m[1] as string,
    ),
  );
  const libDir = join(import.meta.dir, "..", "..", "lib");
  const files = readdirSync(libDir).filter((f) => f.endsWith(".ts") || f.endsWith(".proto"));

  test("names every file in lib/ exactly once", () => {
    expect(files.length).toBeGreaterThan(40);
    const counts = new Map<string, number>();
    for (const f of named) counts.set(f, (counts.get(f) ?? 0) + 1);
    expect(files.filter((f) => counts.get(f) !== 1)).toEqual([]);
  });

  test("names no file that does not exist", () => {
    expect(named.filter((f) => f !== "main.ts" && !files.includes(f))).toEqual([]);
  });
});

describe("README architecture table", () => {
  const section = readme.slice(readme.indexOf("### Architecture"), readme.indexOf("### Working on it"));
  const rows = section
    .split("\n")
    .filter((l) => l.startsWith("| ") && !l.startsWith("| room") && !l.startsWith("| ---"));
  const named = rows.flatMap((row) =>
    [...(row.split(" | ")[1] ?? "").matchAll(/`([a-z0-9_]+\.ts)`/g)].map((m) => m[1] as string),
  );
  const files = readdirSync(join(import.meta.dir, "..", "..", "lib")).filter((f) => f.endsWith(".ts"));

  test("puts every file of lib/ in exactly one room, and names no other", () => {
    expect(rows.length).toBeGreaterThan(8);
    const counts = new Map<string, number>();
    for (const f of named) counts.set(f, (counts.get(f) ?? 0) + 1);
    expect(files.filter((f) => counts.get(f) !== 1)).toEqual([]);
    expect(named.filter((f) => !files.includes(f))).toEqual([]);
  });

  test("a file with a family's prefix is in that family's room", () => {
    const room = (f: string) => rows.find((r) => r.includes(`\`${f}\``))?.split(" | ")[0] ?? "";
    for (const [prefix, family] of [
      ["talos", "talos*"],
      ["kube", "kube*"],
      ["h2", "h2*"],
      ["grpc", "grpc*"],
      ["x509", "x509*"],
      ["re2", "re2*"],
      ["template", "template*"],
    ] as const)
      for (const f of files.filter((x) => x.startsWith(prefix)))
        expect({ f, room: room(f).includes(family) }).toEqual({ f, room: true });
  });
});
