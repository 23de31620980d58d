// What `npm test` (tests/run.ts) must build before `bun test` runs the given test paths: nothing for
// the unit tests, the test bed for the end-to-end tests, and each extra tool only for the files that
// use it. Pure: the caller lists the test files and acts on the answer.

/** Something tests/run.ts builds (or takes from the environment) before the tests run. */
export type TestNeed =
  | "testbed" // kube-apiserver, etcd, helm, the Talos simulator, Talos' apid (tests/support/testbed-bins.sh)
  | "ccm" // the binary under test (build.ts)
  | "cloudccm" // the Exoscale and Oxide CCMs (tests/support/cloudccm-bins.sh)
  | "h2peer" // the hostile HTTP/2 peer (tests/support/h2peer-bins.sh)
  | "actionlint" // tests/support/actionlint.sh
  | "ociregistry" // the local OCI registry and crane (tests/support/ociregistry-bins.sh)
  | "promtool" // tests/support/promtool-bins.sh
  | "upstreamcheck"; // upstream schemas and Talos' configpatcher (tests/support/upstreamcheck-bins.sh)

/** Every need, in the order tests/run.ts provides them. */
export const ALL_NEEDS: readonly TestNeed[] = [
  "testbed",
  "cloudccm",
  "h2peer",
  "actionlint",
  "ociregistry",
  "promtool",
  "upstreamcheck",
  "ccm",
];

/**
 * What each test file needs, first match wins. Unit tests need nothing built (tests/unit must pass on
 * a fresh clone after `npm ci` alone); an end-to-end file needs the test bed and the binary, plus the
 * tools named for it; a file no row matches needs everything.
 */
const RULES: ReadonlyArray<{ match: RegExp; needs: readonly TestNeed[] }> = [
  { match: /^tests\/unit\//, needs: [] },
  { match: /^tests\/e2e\/workflows-actionlint\.test\.ts$/, needs: ["actionlint"] },
  // Reads the Talos machinery module from Go's module cache, which building the test bed fills.
  { match: /^tests\/e2e\/kubematrix-talos\.test\.ts$/, needs: ["testbed"] },
  { match: /^tests\/e2e\/beside-[a-z]+\.test\.ts$/, needs: ["testbed", "ccm", "cloudccm"] },
  { match: /^tests\/e2e\/h2-hostile\.test\.ts$/, needs: ["testbed", "ccm", "h2peer"] },
  { match: /^tests\/e2e\/release\.test\.ts$/, needs: ["testbed", "ccm", "ociregistry"] },
  { match: /^tests\/e2e\/observability\.test\.ts$/, needs: ["testbed", "ccm", "promtool", "upstreamcheck"] },
  // A Talos machine config patched by Talos' own configpatcher: no cluster.
  { match: /^tests\/e2e\/talos-migration\.test\.ts$/, needs: ["ccm", "upstreamcheck"] },
  { match: /^tests\/e2e\//, needs: ["testbed", "ccm"] },
];

/**
 * The needs of one test file.
 *
 * @param file its path relative to the repository, with "/"
 * @returns what must be built before it runs
 */
export function fileNeeds(file: string): readonly TestNeed[] {
  return RULES.find((r) => r.match.test(file))?.needs ?? ALL_NEEDS;
}

// `bun test` options that take their value as the next argument (bun 1.4's `bun test --help`); any
// other argument starting with "-" is a flag or carries its value after "=".
const WITH_VALUE = new Set([
  "-t",
  "--test-name-pattern",
  "--timeout",
  "--rerun-each",
  "--retry",
  "--seed",
  "--preload",
  "-r",
  "--reporter",
  "--reporter-outfile",
  "--coverage-reporter",
  "--coverage-dir",
  "--max-concurrency",
  "--path-ignore-patterns",
  "--bail",
]);

/**
 * The path filters among `bun test` arguments: what is not an option or an option's value.
 *
 * @param args the arguments given to `npm test --`
 * @returns the filters, leading "./" removed
 */
export function pathFilters(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a.startsWith("-")) {
      // --bail takes an optional number; skip the next argument only when it is one.
      if (a === "--bail" ? /^\d+$/.test(args[i + 1] ?? "") : WITH_VALUE.has(a)) i++;
      continue;
    }
    out.push(a.replace(/^(\.\/)+/, ""));
  }
  return out;
}

/**
 * What to build for a `bun test` run: the union of the needs of the files its path filters select
 * (bun selects the files whose path contains a filter; no filter selects all).
 *
 * @param args the arguments given to `npm test --`
 * @param files every test file, relative to the repository, with "/"
 * @param root the repository's absolute path, for filters given as absolute paths
 * @returns the needs, in ALL_NEEDS order
 */
export function testNeeds(args: readonly string[], files: readonly string[], root: string): TestNeed[] {
  const filters = pathFilters(args).map((f) => (f.startsWith(`${root}/`) ? f.slice(root.length + 1) : f));
  const selected = filters.length ? files.filter((f) => filters.some((p) => f.includes(p))) : files;
  const needs = new Set(selected.flatMap((f) => fileNeeds(f)));
  return ALL_NEEDS.filter((n) => needs.has(n));
}
