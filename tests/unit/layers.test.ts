// The layering of lib/: every file is a pure core (decisions and data), a shell (I/O, wiring,
// timers, clocks, process state) or generated. This file is the one place that says which is which,
// and checks it: cores import only cores and generated code (type imports included: a contract a
// core needs lives in a core), only pure packages, and use no clock, timer, randomness, process or
// I/O API — found on the compiler's syntax tree and resolved by its checker
// (tests/support/corelayers.ts), so that `Date["now"]()`, `const { now } = Date` or `console.log`
// are found as a `Date.now()` is.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Project } from "typescript/unstable/async";
import { type GlobalUse, projectImports, scanCoreGlobals, type TreeImport } from "../support/corelayers.ts";
import { openProject } from "../support/plainkeys.ts";

/** Pure cores: decisions and data. A core gets clocks, timers and I/O from its caller, injected. */
const CORES = [
  "kubeconfig.ts",
  "flags.ts",
  "controllernames.ts",
  "controllerplan.ts",
  "cloudconfigreload.ts",
  "flagtable.ts",
  "help.ts",
  "pflag.ts",
  "config.ts",
  "configyaml.ts",
  "configlimits.ts",
  "desirednode.ts",
  "managedrecord.ts",
  "manifests.ts",
  "csrclaims.ts",
  "rbacgrants.ts",
  "talospatch.ts",
  "deployfiles.ts",
  "transform.ts",
  "ipamallocator.ts",
  "ipamconfig.ts",
  "csr.ts",
  "csrdecision.ts",
  "csrmetrics.ts",
  "csrrecords.ts",
  "csrrequest.ts",
  "csrview.ts",
  "cidrset.ts",
  "metrics.ts",
  "addresses.ts",
  "backoffpolicy.ts",
  "cidr.ts",
  "clientcerts.ts",
  "configissue.ts",
  "x509der.ts",
  "fieldowners.ts",
  "stringpool.ts",
  "flagvalues.ts",
  "templatefmt.ts",
  "templatestrconv.ts",
  "h2limits.ts",
  "h2hpack.ts",
  "h2framer.ts",
  "h2flow.ts",
  "h2headerblock.ts",
  "h2stream.ts",
  "h2connection.ts",
  "grpcstatus.ts",
  "grpcframing.ts",
  "instanceid.ts",
  "ipspelling.ts",
  "kubeapi.ts",
  "kubeversions.ts",
  "samelist.ts",
  "grpcmessages.ts",
  "nameindex.ts",
  "validatemetadata.ts",
  "nodeview.ts",
  "peerlimits.ts",
  "dict.ts",
  "talosbounds.ts",
  "csrindex.ts",
  "writebudget.ts",
  "nodestate.ts",
  "nodenotes.ts",
  "nodemetrics.ts",
  "x509pkcs10.ts",
  "re2classes.ts",
  "re2translate.ts",
  "re2parse.ts",
  "re2vm.ts",
  "preflight.ts",
  "re2.ts",
  "selector.ts",
  "semaphore.ts",
  "sharedaddresses.ts",
  "suggest.ts",
  "talosmigration.ts",
  "taloscallpolicy.ts",
  "talosroute.ts",
  "taloserrors.ts",
  "taloswire.ts",
  "template.ts",
  "templatefuncs.ts",
  "templatelex.ts",
  "templateparse.ts",
  "templatevalue.ts",
  "types.ts",
  "kubevalidation.ts",
  "validatereport.ts",
  "wellknown.ts",
];

/** Generated code (`npm run gen:proto`): neither core nor shell; cores may import it. */
const GENERATED = ["talos_pb.ts"];

/** Shells, each with what makes it one. */
const SHELLS: Record<string, string> = {
  "backoffwait.ts": "the wait between retries (timers)",
  "kubecache.ts": "the Node informer: Kubernetes list and watch, jittered resync",
  "kubewatchpacer.ts": "large watch events held per object until their time comes (timers)",
  "cloudconfigwatch.ts": "polls the cloud-config file (timer, node:fs), logs, counts reloads",
  "clientauth.ts": "reads the client CA files (node:fs)",
  "configfile.ts": "reads the config file (node:fs)",
  "controllerrunner.ts": "starts and stops the controllers: imports their modules, timers, exits the process",
  "controller.ts": "the controllers' context: clients, recorder, Talos, metrics",
  "csrtalosfacts.ts": "reads Talos for node-csr-approval: Talos I/O, the cache's clock and prune timer",
  "csrapprover.ts": "the node-csr-approval controller: Kubernetes and Talos I/O",
  "csrnetworks.ts": "reads the cluster's shared ranges from Kubernetes and Talos",
  "csrservices.ts": "looks up the Namespaces and Services a CSR's DNS names reach, from Kubernetes",
  "kubeevents.ts": "writes Events, timers",
  "grpc.ts": "gRPC over node:tls, deadlines, timers, reconnect jitter (randomness)",
  "h2.ts": "the socket shell of lib/h2connection.ts: node:tls, clocks, timers, microtasks",
  "httpsserver.ts": "listens: Bun.serve, node:tls, node:http",
  "ipam.ts": "the node-ipam controller: Kubernetes and Talos I/O",
  "jscoptions.ts": "reads the environment and /proc, re-executes the process",
  "kube.ts": "the Kubernetes HTTP client: fetch, token files, rate limits, watches",
  "kubeauthplugin.ts": "loads @kubernetes/client-node, which runs credential plugins",
  "kubeclients.ts": "builds the Kubernetes clients from the kubeconfig files",
  "kubeconnection.ts": "reads the kubeconfig, the files it names, the environment and the service account",
  "kubediscovery.ts": "reads /version and API discovery",
  "leader.ts": "Lease election: Kubernetes I/O, clock, timers",
  "lifecycle.ts": "the cloud-node-lifecycle controller: Kubernetes and Talos I/O, timers",
  "log.ts": "writes to stderr, stamps the time",
  "manager.ts": "run: the order of start-up, signals, exit",
  "preflightcommand.ts": "the preflight subcommand: reads the cluster (Kubernetes I/O), files, stdout",
  "manifestscommand.ts": "the manifests subcommand: files, stdout, stderr; writes deploy/ as a script",
  "node.ts": "the cloud-node controller: Kubernetes I/O, clock",
  "pagetrim.ts": "gives pages back to the kernel (bun:ffi, /proc, timers)",
  "gcpacer.ts": "asks the runtime for full collections (Bun.gc, process.memoryUsage, timers)",
  "metricsprocess.ts":
    "the process registry and its collectors (/proc, process.cpuUsage), the clock that times observations",
  "queue.ts": "work queues: timers, clock",
  "x509selfsigned.ts": "generates keys and serials (randomness), stamps validity with the clock",
  "servingwiring.ts": "starts the secure port (lib/serve.ts) with the process registry",
  "serve.ts": "the secure port: files, HTTP serving, timers",
  "talos.ts":
    "the Talos API client: calls, retries' waits (timers), talosconfig reloads, jitter (randomness)",
  "taloschannels.ts": "builds the gRPC channels (imports the transport, node:net)",
  "talosconfig.ts": "reads the talosconfig and its environment",
  "talosconnect.ts": "reads the talosconfig and the environment, builds the Talos client",
  "talosconfigwatch.ts": "watches the talosconfig file (node:fs), poll timer",
  "talosmetrics.ts": "registers the Talos API metrics on the process registry",
  "taloswatch.ts": "one COSI watch over gRPC, resubscribe timers",
  "taloswatchnode.ts":
    "a tracked node's record and its address watch handler (holds the watches it closes, Talos I/O)",
  "taloswatchcache.ts": "the Talos facts watch cache: Talos I/O, timers, retry jitter (randomness)",
  "taloswatchcsr.ts": "completes node-csr-approval's facts beside the watches (Talos I/O)",
  "taloswatchoptions.ts":
    "the watch cache's contracts: types naming its shells (the Talos client, its record)",
  "transformmetrics.ts": "times transform() calls (clock), on the process registry by default",
  "validatecommand.ts": "the validate subcommand: reads the files and stdin, writes stdout and stderr",
  "version.ts": "reads the process's platform and architecture",
};

/** Packages a core may import at run time: pure parsers and codecs. */
const PURE_PACKAGES = ["yaml", "valibot", "@bufbuild/protobuf/wire"];
/** Packages a core may import only types from. */
const TYPE_ONLY_PACKAGES = ["@kubernetes/client-node"];
/** Node built-ins a core may import (hashing and signature checks; its random functions are tokens below). */
const PURE_BUILTINS = ["node:crypto"];

const libDir = join(import.meta.dir, "..", "..", "lib");
const files = readdirSync(libDir).filter((f) => f.endsWith(".ts"));
const cores = new Set(CORES);
const ROOT = join(import.meta.dir, "..", "..");

/** The rule broken by a core's import, or undefined. */
function importViolation(imp: TreeImport): string | undefined {
  const { specifier } = imp;
  if (specifier.startsWith(".")) {
    const target = specifier.replace(/^\.\//, "");
    if (target.includes("/")) return `imports ${specifier}, outside lib/ (lib is flat)`;
    if (cores.has(target) || GENERATED.includes(target)) return undefined;
    const what = imp.typeOnly ? "imports types from" : "imports";
    return `${what} the shell ${target} (cores import only cores; move the contract to a core)`;
  }
  if (specifier.startsWith("node:") || specifier === "bun" || specifier.startsWith("bun:"))
    return PURE_BUILTINS.includes(specifier)
      ? undefined
      : `imports ${specifier}, a runtime I/O module (pure built-ins: ${PURE_BUILTINS.join(", ")})`;
  if (PURE_PACKAGES.includes(specifier)) return undefined;
  if (TYPE_ONLY_PACKAGES.includes(specifier))
    return imp.typeOnly ? undefined : `imports ${specifier} at run time (cores may import only its types)`;
  return `imports the package ${specifier}, not in PURE_PACKAGES (tests/unit/layers.test.ts) as pure`;
}

const useMessage = (u: GlobalUse) =>
  `${u.file}:${u.line}: core uses \`${u.code}\` (${u.what}; inject it from a shell)`;

describe("lib/ layers", () => {
  test("every lib file is classified once, as a core or a shell", () => {
    expect(files.length).toBeGreaterThan(40);
    const unclassified = files
      .filter((f) => !cores.has(f) && !(f in SHELLS) && !GENERATED.includes(f))
      .map((f) => `lib/${f}: not classified: add it to CORES or SHELLS in tests/unit/layers.test.ts`);
    const both = CORES.filter((f) => f in SHELLS).map((f) => `lib/${f}: listed as both core and shell`);
    const gone = [...CORES, ...Object.keys(SHELLS), ...GENERATED]
      .filter((f) => !files.includes(f))
      .map((f) => `lib/${f}: classified but does not exist`);
    const twice = CORES.filter((f, i) => CORES.indexOf(f) !== i).map((f) => `lib/${f}: listed twice`);
    expect([...unclassified, ...both, ...gone, ...twice]).toEqual([]);
  });

  test("generated files say so in their first line", () => {
    for (const f of GENERATED)
      expect(readFileSync(join(libDir, f), "utf8").split("\n")[0]).toContain("generated");
  });
});

describe("cores use no clock, timer, randomness, process or I/O (the compiler's syntax tree)", () => {
  let close: (() => Promise<void>) | undefined;
  let project: Project | undefined;
  let sample = "";

  beforeAll(async () => {
    const opened = await openProject(join(ROOT, "tsconfig.json"));
    close = opened.close;
    project = opened.project;
    sample = mkdtempSync(join(tmpdir(), "corelayers-"));
  }, 120_000);
  afterAll(async () => {
    await close?.();
    if (sample) rmSync(sample, { recursive: true, force: true });
  });

  test("cores import only cores, generated code and pure packages", async () => {
    const imports = await projectImports(
      project as Project,
      CORES.map((f) => join(libDir, f)),
    );
    const problems = [...imports].flatMap(([file, list]) =>
      list.flatMap((imp) => {
        const why = importViolation(imp);
        return why ? [`lib/${file.slice(libDir.length + 1)}:${imp.line}: core ${why}`] : [];
      }),
    );
    expect(imports.size).toBe(CORES.length);
    expect(problems).toEqual([]);
  });

  test("no core uses one", async () => {
    const found = await scanCoreGlobals(
      project as Project,
      ROOT,
      CORES.map((f) => join(libDir, f)),
    );
    expect(found.map(useMessage)).toEqual([]);
  }, 120_000);

  test("the checkers find each bypass a text scan missed, and pass pure uses, locals of the same name, comments and strings", async () => {
    writeFileSync(
      join(sample, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { strict: true, target: "ES2023", lib: ["ES2023", "DOM"], module: "ESNext" },
        include: ["*.ts"],
      }),
    );
    writeFileSync(
      join(sample, "imports.ts"),
      `import { registry } from "./shell.ts";
import type { X } from "./shell2.ts";
import { type Y } from "node:fs";
import { type A, b } from "./shell3.ts";
// import { z } from "./shell4.ts";
const s = "import { w } from './shell5.ts'";
export { v } from "./shell6.ts";
export const later = () => import("./shell7.ts");
`,
    );
    writeFileSync(
      join(sample, "core.ts"),
      `import { randomBytes as rb } from "node:crypto";
export const a = Date["now"]();
const { now } = Date;
export const b = now();
const D = Date;
export const c = new D(0);
console.log("x");
export const d = crypto.subtle;
export const e = globalThis.Date;
export const g = Math["random"]();
export const h = performance.now();
export const i = new Date();
export const j = rb;
export const k = import.meta.url;
setTimeout(() => {}, 1);
// Pure: a date from a value, parsing, Math's other members, types, properties, and locals.
export const ok1 = new Date(0).getTime() + Date.parse("2026-01-01") + Date.UTC(2026, 0) + Math.max(1, 2);
export type T = Date;
export const ok2 = { console: 1, performance: 2 }.console;
export function ok3(process: { env: string }, console: string): string { return process.env + console; }
`,
    );
    const opened = await openProject(join(sample, "tsconfig.json"));
    try {
      const imports = (await projectImports(opened.project, [join(sample, "imports.ts")])).get(
        join(sample, "imports.ts"),
      );
      expect(imports?.map((i) => [i.specifier, i.typeOnly, i.line])).toEqual([
        ["./shell.ts", false, 1],
        ["./shell2.ts", true, 2],
        ["node:fs", true, 3],
        ["./shell3.ts", false, 4],
        ["./shell6.ts", false, 7],
        ["./shell7.ts", false, 8],
      ]);
      expect(importViolation({ specifier: "./shell2.ts", typeOnly: true, line: 2 })).toContain(
        "imports types from the shell shell2.ts",
      );
      expect(importViolation({ specifier: "./talos_pb.ts", typeOnly: false, line: 1 })).toBeUndefined();
      const found = await scanCoreGlobals(opened.project, sample, [join(sample, "core.ts")]);
      expect(found.map((u) => `${u.line} ${u.code} (${u.what})`)).toEqual([
        "1 randomBytes as rb (randomness)",
        '2 Date["now"] (clock)',
        "3 Date (clock)",
        "5 Date (clock)",
        "7 console.log (I/O (the process's streams))",
        "8 crypto.subtle (randomness (Web Crypto))",
        "9 globalThis.Date (the global object (any global through it))",
        '10 Math["random"] (randomness)',
        "11 performance.now (clock)",
        "12 Date (clock)",
        "14 import.meta (the module's location on disk)",
        "15 setTimeout (timer)",
      ]);
    } finally {
      await opened.close();
    }
  }, 120_000);
});
