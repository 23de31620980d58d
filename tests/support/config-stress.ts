// The worst cloud-config files up to the size limit, each with the outcome it must have: YAML alias
// bombs, deep nesting, floods of tokens, documents, comments and errors, long scalars, many regexps
// and templates, and the largest config the limits accept. tests/unit/config.test.ts checks every
// outcome in-process; run as a script, this measures each file against the compiled binary's
// `validate` in its own process, under /usr/bin/time (wall time, CPU time, peak RSS):
//
//   bun tests/support/config-stress.ts [--binary dist/…] [--startup] [case …]
//
// --startup measures the controller manager's start-up (it loads the config, then stops at the
// missing kubeconfig) instead of `validate`. Speed and memory are measured here, never asserted.

import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Lexer } from "yaml";
import {
  MAX_COMPILED,
  MAX_COMPILED_CHARS,
  MAX_CONFIG_BYTES,
  MAX_DOUBLE_QUOTED_CHARS,
  MAX_YAML_DEPTH,
  MAX_YAML_NODES,
  MAX_YAML_TOKENS,
  yamlTokens,
} from "../../lib/configlimits.ts";

/** A stress file and the outcome it must have. */
export interface StressCase {
  name: string;
  /** The file's content; absent for {@link SPARSE_FILE_BYTES}, which is made by truncate(). */
  text?: string;
  /** "accepted", or a substring of the one error the file must be refused with. */
  outcome: "accepted" | string;
}

/** Size of the sparse file that must be refused before it is read. */
export const SPARSE_FILE_BYTES = 10 * 1024 ** 3;

/** `unit` repeated to fill `bytes` (after `head`, before `tail`). */
function fill(unit: string, bytes = MAX_CONFIG_BYTES, head = "", tail = ""): string {
  return head + unit.repeat(Math.floor((bytes - head.length - tail.length) / unit.length)) + tail;
}

/** Lines made by `line(i)` for i = 0, 1, … while the text stays within `bytes` and a line is not "". */
function lines(line: (i: number) => string, bytes = MAX_CONFIG_BYTES, head = ""): string {
  const parts = [head];
  let size = head.length;
  for (let i = 0; ; i++) {
    const l = line(i);
    if (l === "" || size + l.length > bytes) return parts.join("");
    parts.push(l);
    size += l.length;
  }
}

/** A YAML "billion laughs": `levels` anchors, each a list of `width` aliases to the one before. */
function aliasBomb(levels: number, width: number): string {
  const out = [`a0: &a0 [${Array(width).fill("x").join(", ")}]`];
  for (let i = 1; i < levels; i++)
    out.push(
      `a${i}: &a${i} [${Array(width)
        .fill(`*a${i - 1}`)
        .join(", ")}]`,
    );
  return `${out.join("\n")}\n`;
}

/** A rule of `n` Regexp requirements on distinct patterns of about `size` bytes. */
function regexRule(i: number, n: number, size: number): string {
  const exprs = Array.from({ length: n }, (_, j) => {
    const tail = `-${i}-${j}$`;
    const pattern = `^(?:web|api)-[a-z0-9]{3,8}${"x".repeat(Math.max(0, size - 26 - tail.length))}${tail}`;
    return `          - {key: hostname, operator: Regexp, values: ['${pattern}']}\n`;
  });
  return `  - nodeSelector:\n      - matchExpressions:\n${exprs.join("")}    labels: {example.com/r${i}: "yes"}\n`;
}

/** A rule of `n` templated annotations. */
function templateRule(i: number, n: number): string {
  const values = Array.from(
    { length: n },
    (_, j) => `      example.com/a${j}: '{{ .Hostname | trimSuffix ".local" | lower }}-${i}'\n`,
  );
  return `  - annotations:\n${values.join("")}`;
}

/** A realistic rule: a selector on platform and zone, a label, an annotation and a taint. */
function plainRule(i: number): string {
  return [
    `  - name: rule-${i}`,
    "    nodeSelector:",
    "      - matchExpressions:",
    `          - {key: platform, operator: In, values: [metal]}`,
    `          - {key: zone, operator: In, values: [zone-${i}]}`,
    "    labels:",
    `      example.com/pool: pool-${i}`,
    "    taints:",
    `      example.com/dedicated: "pool-${i}:NoSchedule"`,
    "",
  ].join("\n");
}

const tokens = `more than ${MAX_YAML_TOKENS} YAML tokens`;
const depth = `YAML nesting deeper than ${MAX_YAML_DEPTH} levels`;
const quoted = `more than ${MAX_DOUBLE_QUOTED_CHARS} characters of double-quoted text`;
const size = `is larger than ${MAX_CONFIG_BYTES} bytes`;

/** Every stress case. Texts are built on first use. */
export function stressCases(): StressCase[] {
  const templatesPerRule = 20;
  const regexesPerRule = 10;
  return [
    { name: "one byte over the size limit", text: fill("#", MAX_CONFIG_BYTES + 1), outcome: size },
    { name: "a 10 GiB sparse file", outcome: size },
    { name: "1 MiB of [", text: fill("["), outcome: depth },
    { name: "1 MiB of {", text: fill("{"), outcome: depth },
    {
      name: "nested [] closed",
      text: fill("[", MAX_CONFIG_BYTES / 2) + fill("]", MAX_CONFIG_BYTES / 2),
      outcome: depth,
    },
    { name: "1 MiB of '- ' (nested block lists)", text: fill("- "), outcome: depth },
    { name: "1 MiB of '? ' (nested explicit keys)", text: fill("? "), outcome: depth },
    { name: "deep block indentation", text: lines((i) => `${" ".repeat(i)}a${i}:\n`), outcome: depth },
    {
      name: "alias bomb, 10^9 nodes",
      text: aliasBomb(9, 10),
      outcome: `more than ${MAX_YAML_NODES} nodes after alias expansion`,
    },
    {
      name: "1 MiB of aliases to one anchor",
      text: fill("*a, ", MAX_CONFIG_BYTES, "a: &a x\nb: [", "*a]\n"),
      outcome: tokens,
    },
    { name: "1 MiB of flow scalars", text: fill("a,", MAX_CONFIG_BYTES, "x: [", "a]\n"), outcome: tokens },
    { name: "1 MiB of keys", text: lines((i) => `k${i}: v\n`), outcome: tokens },
    { name: "1 MiB of documents", text: fill("---\n"), outcome: tokens },
    { name: "1 MiB of comments", text: fill("# comment\n"), outcome: tokens },
    { name: "1 MiB of line breaks", text: fill("\n"), outcome: tokens },
    {
      name: "1 MiB of YAML errors",
      text: fill("a\n", MAX_CONFIG_BYTES, "global:\n  clusterName: |\n"),
      outcome: tokens,
    },
    {
      name: "a 1 MiB double-quoted scalar",
      text: fill("a", MAX_CONFIG_BYTES, 'global:\n  clusterName: "', '"\n'),
      outcome: quoted,
    },
    {
      name: "16 double-quoted scalars of 64 KiB",
      text: lines(() => `  - "${"a".repeat(65_536 - 8)}"\n`, MAX_CONFIG_BYTES, "x:\n"),
      outcome: quoted,
    },
    {
      name: "double-quoted text just under its limit",
      text: `global:\n  clusterName: "${"a".repeat(MAX_DOUBLE_QUOTED_CHARS - 2)}"\n`,
      outcome: "accepted",
    },
    {
      name: "a 1 MiB multi-line plain scalar",
      text: fill("   b\n", MAX_CONFIG_BYTES, "global:\n  clusterName: a\n"),
      outcome: tokens,
    },
    {
      name: "a 1 MiB single-quoted scalar",
      text: fill("a", MAX_CONFIG_BYTES, "global:\n  clusterName: '", "'\n"),
      outcome: "accepted",
    },
    {
      name: "a 1 MiB block scalar line",
      text: fill("a", MAX_CONFIG_BYTES, "global:\n  clusterName: |\n    ", "\n"),
      outcome: "accepted",
    },
    {
      name: "a 1 MiB label value",
      text: fill("a", MAX_CONFIG_BYTES, "transformations:\n  - labels:\n      example.com/a: '", "'\n"),
      outcome: "value must be no more than 63 characters: the rule would apply without this entry",
    },
    {
      name: "a 1 MiB template",
      text: fill(
        "a",
        MAX_CONFIG_BYTES,
        "transformations:\n  - annotations:\n      example.com/a: '{{ \"",
        "\" }}'\n",
      ),
      outcome: `more than ${MAX_COMPILED_CHARS} characters of regexps and templates`,
    },
    {
      name: "a 1 MiB regexp",
      text: fill(
        "(a|b)",
        MAX_CONFIG_BYTES,
        "transformations:\n  - nodeSelector: [{matchExpressions: [{key: hostname, operator: Regexp, values: ['",
        "']}]}]\n",
      ),
      outcome: `more than ${MAX_COMPILED_CHARS} characters of regexps and templates`,
    },
    {
      name: "the largest regexp the budget allows",
      text: `transformations:\n  - nodeSelector: [{matchExpressions: [{key: hostname, operator: Regexp, values: ['${"(a|b)".repeat(MAX_COMPILED_CHARS / 5 - 1)}']}]}]\n`,
      outcome: "accepted",
    },
    {
      name: "one regexp over the count budget",
      text: [
        "transformations:\n",
        ...Array.from({ length: MAX_COMPILED / regexesPerRule + 1 }, (_, i) =>
          regexRule(i, regexesPerRule, 24),
        ),
      ].join(""),
      outcome: `more than ${MAX_COMPILED} regexps and templates`,
    },
    {
      name: "regexps just within the budget",
      text: lines(
        (i) => (i < MAX_COMPILED / regexesPerRule ? regexRule(i, regexesPerRule, 78) : ""),
        MAX_CONFIG_BYTES,
        "transformations:\n",
      ),
      outcome: "accepted",
    },
    {
      name: "one template over the count budget",
      text: [
        "transformations:\n",
        ...Array.from({ length: MAX_COMPILED / templatesPerRule + 1 }, (_, i) =>
          templateRule(i, templatesPerRule),
        ),
      ].join(""),
      outcome: `more than ${MAX_COMPILED} regexps and templates`,
    },
    {
      name: "templates just within the budget",
      text: lines(
        (i) => (i < MAX_COMPILED / templatesPerRule ? templateRule(i, templatesPerRule) : ""),
        MAX_CONFIG_BYTES,
        "transformations:\n",
      ),
      outcome: "accepted",
    },
    {
      name: "regexps and templates at both budgets, realistic rules up to the token limit",
      text: [
        "transformations:\n",
        ...Array.from({ length: MAX_COMPILED / 2 / regexesPerRule }, (_, i) =>
          regexRule(i, regexesPerRule, 78),
        ),
        ...Array.from({ length: MAX_COMPILED / 2 / templatesPerRule }, (_, i) =>
          templateRule(i, templatesPerRule),
        ),
        ...Array.from({ length: largestRuleCount() - 60 }, (_, i) => plainRule(i)),
      ].join(""),
      outcome: "accepted",
    },
    {
      name: "realistic rules up to the token limit",
      text: lines(plainRule, MAX_CONFIG_BYTES, "transformations:\n"),
      outcome: tokens,
    },
    {
      name: "realistic rules just within the token limit",
      text: lines(
        (i) => (i < largestRuleCount() ? plainRule(i) : ""),
        MAX_CONFIG_BYTES,
        "transformations:\n",
      ),
      outcome: "accepted",
    },
  ];
}

/** Tokens of `text`, as counted against MAX_YAML_TOKENS. */
export function tokensOf(text: string): number {
  let n = 0;
  for (const lexeme of new Lexer().lex(text)) n += yamlTokens(lexeme);
  return n;
}

/** How many realistic rules fit within the token limit, with 5% to spare. */
function largestRuleCount(): number {
  return Math.floor((MAX_YAML_TOKENS * 0.95) / (tokensOf(plainRule(1000) + plainRule(1001)) / 2));
}

/** Writes a case's file into `dir` and returns its path. */
export function writeCase(dir: string, c: StressCase, index: number): string {
  const path = join(dir, `case-${index}.yaml`);
  if (c.text === undefined) {
    writeFileSync(path, "");
    truncateSync(path, SPARSE_FILE_BYTES);
  } else writeFileSync(path, c.text);
  return path;
}

/** One measured run. */
interface Measurement {
  exit: number | null;
  wallS: number;
  cpuS: number;
  maxRssKiB: number;
  /** Lines the command printed. */
  outputLines: number;
  firstError: string;
}

/** Runs `args` under /usr/bin/time -v, its statistics written to a file of their own. */
function measure(args: string[], dir: string): Measurement {
  const stats = join(dir, "time.txt");
  const r = spawnSync("/usr/bin/time", ["-v", "-o", stats, ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    maxBuffer: 256 * 1024 * 1024,
  });
  const text = readFileSync(stats, "utf8");
  const field = (name: string) => text.match(new RegExp(`${name}: (.+)`))?.[1] ?? "";
  const [m = "0", s = "0"] = field("Elapsed \\(wall clock\\) time \\(h:mm:ss or m:ss\\)")
    .split(":")
    .slice(-2);
  const output = `${r.stderr}${r.stdout}`.split("\n");
  return {
    exit: r.status,
    wallS: Number(m) * 60 + Number(s),
    cpuS: Number(field("User time \\(seconds\\)")) + Number(field("System time \\(seconds\\)")),
    maxRssKiB: Number(field("Maximum resident set size \\(kbytes\\)")),
    outputLines: output.length - 1,
    firstError: (output.find((l) => / error: |problem/.test(l)) ?? output[0] ?? "").slice(0, 200),
  };
}

/** The command that loads `config`: `validate`, or the controller manager's start-up. */
function command(binary: string, config: string, startup: boolean): string[] {
  return startup
    ? [binary, `--cloud-config=${config}`, "--kubeconfig=/nonexistent", "--controllers=node-ipam"]
    : [binary, "validate", `--cloud-config=${config}`];
}

function main(argv: string[]): void {
  const arch = process.arch === "arm64" ? "arm64" : "amd64";
  let binary = join(import.meta.dir, "..", "..", "dist", `talos-cloud-controller-manager-linux-${arch}`);
  let startup = false;
  const only: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--binary") binary = argv[++i] ?? binary;
    else if (argv[i] === "--startup") startup = true;
    else only.push(argv[i] as string);
  }
  const dir = mkdtempSync(join(tmpdir(), "config-stress-"));
  const empty = writeCase(dir, { name: "empty", text: "", outcome: "accepted" }, 999);
  const base = measure(command(binary, empty, startup), dir);
  const mib = (kib: number) => (kib / 1024).toFixed(1);
  console.log(`${startup ? "start-up" : "validate"} of ${binary}, each file in its own process`);
  console.log(
    `baseline (empty file): ${base.wallS.toFixed(2)} s wall, ${base.cpuS.toFixed(2)} s CPU, ${mib(base.maxRssKiB)} MiB peak RSS`,
  );
  console.log("| case | exit | outcome (first error) | lines printed | wall s | CPU s | peak RSS MiB |");
  console.log("| --- | --- | --- | --- | --- | --- | --- |");
  stressCases().forEach((c, i) => {
    if (only.length > 0 && !only.some((o) => c.name.includes(o))) return;
    const m = measure(command(binary, writeCase(dir, c, i), startup), dir);
    const outcome = m.exit === 0 ? "accepted" : m.firstError.replace(/^.*?(error: |problems?:)/, "");
    const row = [
      c.name,
      m.exit,
      outcome.slice(0, 100),
      m.outputLines,
      m.wallS.toFixed(2),
      m.cpuS.toFixed(2),
      mib(m.maxRssKiB),
    ];
    console.log(`| ${row.join(" | ")} |`);
  });
}

if (import.meta.main) main(process.argv.slice(2));
