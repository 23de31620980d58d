// `npm test`: the whole suite, unit and integration. Makes sure the test bed's kube-apiserver, etcd,
// helm, Talos simulator and Talos apid exist (building them once per machine with
// tests/support/testbed-bins.sh),
// the Exoscale and Oxide CCMs (tests/support/cloudccm-bins.sh), the hostile HTTP/2 peer
// (tests/support/h2peer-bins.sh), actionlint (tests/support/actionlint.sh), the local OCI registry
// and crane (tests/support/ociregistry-bins.sh), promtool (tests/support/promtool-bins.sh) and the
// upstream schema checker (tests/support/upstreamcheck-bins.sh),
// builds the host binary the end-to-end tests run, then runs `bun test` and reports "N passed, N failed".
// It builds only what the given test paths need (tests/support/testneeds.ts): the unit tests need
// nothing (`npm test -- tests/unit`, or `npm run test:unit`, builds nothing).
// Alone, it runs the Kubernetes support matrix (tests/support/kubematrix.ts): the whole suite on the
// default version, then the core end-to-end flows on the oldest and the newest, each on its own
// kube-apiserver, and the Talos client's conformance suite and the Talos flows again through Talos'
// own apid (THROUGH_APID). Extra arguments go to `bun test` on one version (e.g. `npm test --
// tests/unit`); K8S_VERSION picks it (e.g. `K8S_VERSION=v1.31.14 npm test -- tests/e2e/csr.test.ts`),
// TALOS_SIM_APID=1 puts apid in front of the Talos simulator.

import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CORE_FLOWS, DEFAULT_KUBE_VERSION, KUBE_MATRIX } from "./support/kubematrix.ts";
import { type TestNeed, testNeeds } from "./support/testneeds.ts";

const root = join(import.meta.dir, "..");
const env: Record<string, string | undefined> = { ...process.env };

function fail(message: string): never {
  console.error(`npm test: ${message}`);
  if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, "0 passed, 1 failed\n");
  process.exit(1);
}

/**
 * The test bed's kube-apiserver for one Kubernetes version (built once per machine by
 * tests/support/testbed-bins.sh), with etcd, helm, the Talos simulator and Talos' apid; binaries
 * already given in `given` (KUBE_APISERVER, KUBEBUILDER_ASSETS, ...) are kept.
 */
function testbed(
  version: string,
  given: Record<string, string | undefined>,
): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = { ...given, TESTBED_K8S_VERSION: undefined };
  if (
    (given.KUBEBUILDER_ASSETS || (given.KUBE_APISERVER && given.ETCD)) &&
    given.HELM &&
    given.TALOS_SIM &&
    given.TALOS_APID
  )
    return out;
  const r = spawnSync(join(root, "tests/support/testbed-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...given, K8S_VERSION: version },
  });
  if (r.status !== 0)
    fail(
      `cannot build kube-apiserver ${version}, etcd, helm, the Talos simulator and Talos' apid for the test bed (see above)`,
    );
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(KUBE_APISERVER|ETCD|HELM|TALOS_SIM|TALOS_APID)=(.+)$/);
    if (m) out[m[1] as string] = m[2];
  }
  // The release the kube-apiserver was built from, which tests/e2e/kube-versions.test.ts checks the
  // running server against (unset when the binaries were given).
  out.TESTBED_K8S_VERSION = version;
  return out;
}

/**
 * Run again with Talos' own apid in front of the Talos simulator (TalosSim with TALOS_SIM_APID=1):
 * the client's conformance suite and the cloud-node and CSR flows, so they hold through apid's
 * certificate roles, routing by `node`, proxying and stream teardown.
 */
const THROUGH_APID = ["tests/e2e/talos-sim.test.ts", "tests/e2e/flows-sim.test.ts"];

// `npm test` alone runs the support matrix (tests/support/kubematrix.ts): the whole suite on the
// default version, THROUGH_APID again with apid, then the core flows on every other version. With
// test paths, or K8S_VERSION set, it runs what it is given on one version (K8S_VERSION, or the
// default).
const args = process.argv.slice(2);
const matrix = args.length === 0 && !env.K8S_VERSION;
const first = env.K8S_VERSION ?? DEFAULT_KUBE_VERSION;
const phases: Array<{
  version: string;
  paths: readonly string[];
  env: Record<string, string | undefined>;
  /** What the phase's line in the summary adds to the version. */
  label?: string;
}> = [{ version: first, paths: args.length ? args : ["tests/"], env: {} }];
const testFiles = [...new Bun.Glob("tests/**/*.test.ts").scanSync({ cwd: root })].map((f) =>
  f.replaceAll("\\", "/"),
);
const needs = new Set<TestNeed>(testNeeds(args, testFiles, root));
if (needs.has("testbed")) Object.assign(env, testbed(first, env));
if (matrix) {
  phases.push({ version: first, paths: THROUGH_APID, env: { TALOS_SIM_APID: "1" }, label: "Talos' apid" });
  for (const row of KUBE_MATRIX.slice(1)) {
    // Another version's kube-apiserver: what was given for the default one does not apply.
    const { KUBE_APISERVER: _a, KUBECTL: _k, KUBEBUILDER_ASSETS: _b, ...rest } = env;
    const bed = testbed(row.version, { ...rest, ETCD: env.ETCD });
    phases.push({ version: row.version, paths: row.suite === "all" ? ["tests/"] : CORE_FLOWS, env: bed });
  }
}

// The clouds' own CCMs, run beside this one by tests/e2e/beside-*.test.ts (built from their pinned
// release archives, tests/support/pins.ts, once per machine). When one cannot be built (its archive
// cannot be had: no network, no mirror) the rest of the suite still runs: its beside test fails with
// the reason tests/support/cloudccm-bins.sh printed (EXOSCALE_CCM_ERROR, OXIDE_CCM_ERROR), which
// names the archive, its URL and how to provide it.
if (needs.has("cloudccm") && (!env.EXOSCALE_CCM || !env.OXIDE_CCM)) {
  const r = spawnSync(join(root, "tests/support/cloudccm-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...env, BUN: process.execPath },
  });
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^((?:EXOSCALE|OXIDE)_CCM(?:_ERROR)?)=(.+)$/);
    if (m) env[m[1] as string] = m[2];
  }
  if (r.status !== 0)
    console.error("npm test: cannot build every cloud CCM; their beside tests will fail (see above)");
}

// The hostile HTTP/2 peer of tests/e2e/h2-hostile.test.ts (frames written by Go's x/net/http2),
// built from tests/support/h2peer once per machine.
if (needs.has("h2peer") && !env.H2PEER) {
  const r = spawnSync(join(root, "tests/support/h2peer-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) fail("cannot build the hostile HTTP/2 peer tests/support/h2peer (see above)");
  const m = r.stdout.match(/^H2PEER=(.+)$/m);
  if (m) env.H2PEER = m[1];
}

// actionlint, which tests/e2e/workflows-actionlint.test.ts runs on the workflows and on broken
// copies of them (built from its Go module once per machine by tests/support/actionlint.sh).
if (needs.has("actionlint") && !env.ACTIONLINT) {
  const r = spawnSync(join(root, "tests/support/actionlint.sh"), ["--print"], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) fail("cannot build actionlint (see above)");
  const m = r.stdout.match(/^ACTIONLINT=(.+)$/m);
  if (m) env.ACTIONLINT = m[1];
}

// The local OCI registry and crane of tests/e2e/release.test.ts (go-containerregistry's pkg/registry and
// cmd/crane), built from tests/support/ociregistry once per machine.
if (needs.has("ociregistry") && (!env.OCI_REGISTRY || !env.CRANE)) {
  const r = spawnSync(join(root, "tests/support/ociregistry-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0)
    fail("cannot build the local OCI registry and crane tests/support/ociregistry (see above)");
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(OCI_REGISTRY|CRANE)=(.+)$/);
    if (m) env[m[1] as string] = m[2];
  }
}

// Prometheus' promtool (cmd/promtool of github.com/prometheus/prometheus), which
// tests/e2e/observability.test.ts runs on the chart's alert rules, built once per machine.
if (needs.has("promtool") && !env.PROMTOOL) {
  const r = spawnSync(join(root, "tests/support/promtool-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) fail("cannot build promtool (see above)");
  const m = r.stdout.match(/^PROMTOOL=(.+)$/m);
  if (m) env.PROMTOOL = m[1];
}

// tests/support/upstreamcheck: Talos' configpatcher (tests/e2e/talos-migration.test.ts), the
// Prometheus Operator's types and Grafana's dashboard schema (tests/e2e/observability.test.ts).
if (needs.has("upstreamcheck") && !env.UPSTREAMCHECK) {
  const r = spawnSync(join(root, "tests/support/upstreamcheck-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0)
    fail("cannot build the upstream schema checker tests/support/upstreamcheck (see above)");
  const m = r.stdout.match(/^UPSTREAMCHECK=(.+)$/m);
  if (m) env.UPSTREAMCHECK = m[1];
}

const hostArch = process.arch === "arm64" ? "arm64" : "amd64";
if (needs.has("ccm") && !env.CCM_BINARY) {
  const r = spawnSync(process.execPath, [join(root, "build.ts"), `--target=${hostArch}`], {
    stdio: "inherit",
    env,
  });
  if (r.status !== 0) fail("cannot build the binary under test");
  env.CCM_BINARY = join(root, "dist", `talos-cloud-controller-manager-linux-${hostArch}`);
}

/** Lines of bun's output kept before each `(fail)` line, for the failures repeated at the end. */
const FAIL_CONTEXT_LINES = 20;
/** Failures repeated at the end per phase (CI keeps only the tail of the output). */
const FAILS_REPEATED = 5;

/**
 * Runs `bun test` on one phase; resolves to its pass and fail counts and, for the first failures,
 * the lines bun printed before each `(fail)` line (its error and stack).
 */
function runPhase(
  phase: (typeof phases)[number],
): Promise<{ passed: number; failed: number; failures: string[] }> {
  const child = spawn(process.execPath, ["test", "--timeout", "180000", ...phase.paths], {
    cwd: root,
    env: { ...env, ...phase.env },
    stdio: ["ignore", "inherit", "pipe"],
  });
  let stderr = "";
  let partial = "";
  const recent: string[] = [];
  const failures: string[] = [];
  const seen = new Set<string>();
  child.stderr.on("data", (chunk: Buffer) => {
    process.stderr.write(chunk);
    const text = chunk.toString();
    stderr += text;
    if (stderr.length > 1_000_000) stderr = stderr.slice(-200_000);
    const split = (partial + text).split("\n");
    partial = split.pop() ?? "";
    for (const line of split) {
      recent.push(line);
      if (recent.length > FAIL_CONTEXT_LINES) recent.shift();
      // bun lists the failed tests again at its end: each is repeated once, with what preceded it first.
      if (!line.startsWith("(fail)") || seen.has(line)) continue;
      seen.add(line);
      if (failures.length < FAILS_REPEATED) failures.push(recent.join("\n"));
    }
  });
  return new Promise((resolve) =>
    child.on("close", (code) => {
      const passed = Number(stderr.match(/^\s*(\d+) pass$/m)?.[1] ?? 0);
      let failed = Number(stderr.match(/^\s*(\d+) fail$/m)?.[1] ?? 0);
      if (code !== 0 && failed === 0) failed = 1; // bun crashed or found no tests: never report green
      resolve({ passed, failed, failures });
    }),
  );
}

let passed = 0;
let failed = 0;
const lines: string[] = [];
const failures: string[] = [];
for (const phase of phases) {
  const started = Date.now();
  const r = await runPhase(phase);
  passed += r.passed;
  failed += r.failed;
  const what = phase.paths.length === 1 ? phase.paths[0] : `${phase.paths.length} files`;
  failures.push(
    ...r.failures.map(
      (f) => `--- kubernetes ${phase.version}${phase.label ? ` through ${phase.label}` : ""}:\n${f}`,
    ),
  );
  lines.push(
    `kubernetes ${phase.version}${phase.label ? ` through ${phase.label}` : ""}, ${what}: ${r.passed} passed, ${r.failed} failed (${Math.round((Date.now() - started) / 1000)} s)`,
  );
}
// The first failures of each phase again, with what bun printed before them: CI keeps the tail.
if (failures.length)
  console.log(`\nfailures (the first ${FAILS_REPEATED} of each phase):\n${failures.join("\n")}\n`);
if (phases.length > 1) for (const l of lines) console.log(l);
const summary = `${passed} passed, ${failed} failed`;
if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, `${summary}\n`);
console.log(summary);
process.exit(failed === 0 ? 0 : 1);
