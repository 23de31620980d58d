// `npm test`: the whole suite, unit and integration. Makes sure the test bed's kube-apiserver, etcd,
// helm and Talos simulator exist (building them once per machine with tests/support/testbed-bins.sh),
// the Exoscale and Oxide CCMs (tests/support/cloudccm-bins.sh) and the hostile HTTP/2 peer
// (tests/support/h2peer-bins.sh),
// builds the host binary the end-to-end tests run, then runs `bun test` and reports "N passed, N failed".
// Extra arguments go to `bun test` (e.g. `npm test -- tests/unit`).

import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const env: Record<string, string | undefined> = { ...process.env };

function fail(message: string): never {
  console.error(`npm test: ${message}`);
  if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, "0 passed, 1 failed\n");
  process.exit(1);
}

if (!(env.KUBEBUILDER_ASSETS || (env.KUBE_APISERVER && env.ETCD)) || !env.HELM || !env.TALOS_SIM) {
  const r = spawnSync(join(root, "tests/support/testbed-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0)
    fail("cannot build kube-apiserver, etcd, helm and the Talos simulator for the test bed (see above)");
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(KUBE_APISERVER|ETCD|HELM|TALOS_SIM)=(.+)$/);
    if (m) env[m[1] as string] = m[2];
  }
}

// The clouds' own CCMs, run beside this one by tests/e2e/beside-*.test.ts (built from the shared
// fixtures' release archives once per machine).
if (!env.EXOSCALE_CCM || !env.OXIDE_CCM) {
  const r = spawnSync(join(root, "tests/support/cloudccm-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) fail("cannot build the Exoscale and Oxide CCMs for the test bed (see above)");
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(EXOSCALE_CCM|OXIDE_CCM)=(.+)$/);
    if (m) env[m[1] as string] = m[2];
  }
}

// The hostile HTTP/2 peer of tests/e2e/h2-hostile.test.ts (frames written by Go's x/net/http2),
// built from tests/support/h2peer once per machine.
if (!env.H2PEER) {
  const r = spawnSync(join(root, "tests/support/h2peer-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) fail("cannot build the hostile HTTP/2 peer tests/support/h2peer (see above)");
  const m = r.stdout.match(/^H2PEER=(.+)$/m);
  if (m) env.H2PEER = m[1];
}

const hostArch = process.arch === "arm64" ? "arm64" : "amd64";
if (!env.CCM_BINARY) {
  const r = spawnSync(process.execPath, [join(root, "build.ts"), `--target=${hostArch}`], {
    stdio: "inherit",
    env,
  });
  if (r.status !== 0) fail("cannot build the binary under test");
  env.CCM_BINARY = join(root, "dist", `talos-cloud-controller-manager-linux-${hostArch}`);
}

const args = process.argv.slice(2);
const child = spawn(process.execPath, ["test", "--timeout", "180000", ...(args.length ? args : ["tests/"])], {
  cwd: root,
  env,
  stdio: ["ignore", "inherit", "pipe"],
});
let stderr = "";
child.stderr.on("data", (chunk: Buffer) => {
  process.stderr.write(chunk);
  stderr += chunk.toString();
  if (stderr.length > 1_000_000) stderr = stderr.slice(-200_000);
});
child.on("close", (code) => {
  const passed = Number(stderr.match(/^\s*(\d+) pass$/m)?.[1] ?? 0);
  let failed = Number(stderr.match(/^\s*(\d+) fail$/m)?.[1] ?? 0);
  if (code !== 0 && failed === 0) failed = 1; // bun crashed or found no tests: never report green
  const summary = `${passed} passed, ${failed} failed`;
  if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, `${summary}\n`);
  console.log(summary);
  process.exit(code ?? 1);
});
