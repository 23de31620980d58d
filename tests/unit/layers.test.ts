// The layering of lib/: every file is a pure core (decisions and data) or a shell (I/O, wiring,
// timers, clocks, process state). This file is the one place that says which is which, and checks it:
// cores import only cores (type imports included: a contract a core needs lives in a core), only
// pure packages, and no clock, timer, randomness, process or I/O API.

import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Import, importsOf, strip } from "../support/sourcecode.ts";

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
  "configlimits.ts",
  "desirednode.ts",
  "managedrecord.ts",
  "manifests.ts",
  "transform.ts",
  "ipamallocator.ts",
  "ipamconfig.ts",
  "csr.ts",
  "cidrset.ts",
  "metrics.ts",
  "addresses.ts",
  "backoffpolicy.ts",
  "cidr.ts",
  "clientcerts.ts",
  "configissue.ts",
  "der.ts",
  "fieldowners.ts",
  "stringpool.ts",
  "flagvalues.ts",
  "gofmt.ts",
  "gostrconv.ts",
  "h2limits.ts",
  "hpack.ts",
  "instanceid.ts",
  "ipspelling.ts",
  "kubeapi.ts",
  "kubeversions.ts",
  "lists.ts",
  "messagequeue.ts",
  "names.ts",
  "nodemetadata.ts",
  "nodeview.ts",
  "peerlimits.ts",
  "dict.ts",
  "talosbounds.ts",
  "csrindex.ts",
  "writebudget.ts",
  "pkcs10.ts",
  "re2classes.ts",
  "re2js.ts",
  "re2parse.ts",
  "re2vm.ts",
  "preflight.ts",
  "regex.ts",
  "selector.ts",
  "semaphore.ts",
  "sharedaddresses.ts",
  "suggest.ts",
  "talos_pb.ts",
  "talosmigration.ts",
  "taloscallpolicy.ts",
  "taloserrors.ts",
  "taloswire.ts",
  "template.ts",
  "templatefuncs.ts",
  "templatelex.ts",
  "templateparse.ts",
  "templatevalue.ts",
  "types.ts",
  "validation.ts",
  "validatereport.ts",
  "wellknown.ts",
];

/** Shells, each with what makes it one. */
const SHELLS: Record<string, string> = {
  "backoff.ts": "the wait between retries (timers)",
  "cache.ts": "the Node informer: Kubernetes list and watch, jittered resync",
  "watchpacer.ts": "large watch events held per object until their time comes (timers)",
  "cloudconfigwatch.ts": "polls the cloud-config file (timer, node:fs), logs, counts reloads",
  "clientauth.ts": "reads the client CA files (node:fs)",
  "configfile.ts": "reads the config file (node:fs)",
  "controllerrunner.ts": "starts and stops the controllers: imports their modules, timers, exits the process",
  "controller.ts": "the controllers' context: clients, recorder, Talos, metrics",
  "csrapprover.ts": "the node-csr-approval controller: Kubernetes and Talos I/O",
  "csrnetworks.ts": "reads the cluster's shared ranges from Kubernetes and Talos",
  "csrservices.ts": "looks up the Namespaces and Services a CSR's DNS names reach, from Kubernetes",
  "events.ts": "writes Events, timers",
  "grpc.ts": "gRPC over node:tls, deadlines, timers, reconnect jitter (randomness)",
  "h2.ts": "HTTP/2 over node:tls, clocks, timers",
  "httpsserver.ts": "listens: Bun.serve, node:tls, node:http",
  "ipam.ts": "the node-ipam controller: Kubernetes and Talos I/O",
  "jscoptions.ts": "reads the environment and /proc, re-executes the process",
  "kube.ts": "the Kubernetes HTTP client: fetch, token files, rate limits, watches",
  "kubeauthplugin.ts": "loads @kubernetes/client-node, which runs credential plugins",
  "kubeclients.ts": "builds the Kubernetes clients from the kubeconfig files",
  "kubeconnection.ts": "reads the kubeconfig, the files it names, the environment and the service account",
  "kubeapis.ts": "reads /version and API discovery",
  "leader.ts": "Lease election: Kubernetes I/O, clock, timers",
  "lifecycle.ts": "the cloud-node-lifecycle controller: Kubernetes and Talos I/O, timers",
  "log.ts": "writes to stderr, stamps the time",
  "manager.ts": "run: the order of start-up, signals, exit",
  "preflightcommand.ts": "the preflight subcommand: reads the cluster (Kubernetes I/O), files, stdout",
  "manifestscommand.ts": "the manifests subcommand: files, stdout, stderr; writes deploy/ as a script",
  "node.ts": "the cloud-node controller: Kubernetes I/O, clock",
  "pagetrim.ts": "gives pages back to the kernel (bun:ffi, /proc, timers)",
  "gcpacer.ts": "asks the runtime for full collections (Bun.gc, process.memoryUsage, timers)",
  "processmetrics.ts":
    "the process registry and its collectors (/proc, process.cpuUsage), the clock that times observations",
  "queue.ts": "work queues: timers, clock",
  "selfsigned.ts": "generates keys and serials (randomness), stamps validity with the clock",
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
  "taloswatchcache.ts": "the Talos facts watch cache: Talos I/O, timers, retry jitter (randomness)",
  "transformmetrics.ts": "times transform() calls (clock), on the process registry by default",
  "validate.ts": "the validate subcommand: reads the files and stdin, writes stdout and stderr",
  "version.ts": "reads the process's platform and architecture",
};

/** Packages a core may import at run time: pure parsers and codecs. */
const PURE_PACKAGES = ["yaml", "valibot", "@bufbuild/protobuf/wire"];
/** Packages a core may import only types from. */
const TYPE_ONLY_PACKAGES = ["@kubernetes/client-node"];
/** Node built-ins a core may import (hashing and signature checks; its random functions are tokens below). */
const PURE_BUILTINS = ["node:crypto"];

/** What a core must not use, outside comments and strings. */
const FORBIDDEN: readonly (readonly [RegExp, string])[] = [
  [/\bDate\.now\b/, "clock"],
  [/\bnew\s+Date\s*\(\s*\)/, "clock"],
  [/(?<!new\s+|[.\w])Date\s*\(/, "clock"],
  [/\bperformance\s*\.\s*now\b/, "clock"],
  [/\bprocess\s*\./, "process state (env, exit, argv, hrtime, streams)"],
  [/\bsetTimeout\b/, "timer"],
  [/\bsetInterval\b/, "timer"],
  [/\bsetImmediate\b/, "timer"],
  [/\bqueueMicrotask\b/, "scheduling"],
  [/\bMath\s*\.\s*random\b/, "randomness"],
  [/\b(?:getRandomValues|randomBytes|randomUUID|randomInt|randomFill\w*)\b/, "randomness"],
  [/(?<![.\w])fetch\s*\(/, "network I/O"],
  [/\bBun\s*\./, "Bun runtime API (spawn, serve, file, sleep…)"],
  [/(?<![.\w])require\s*\(/, "untracked import"],
  [/\bimport\.meta\b/, "the module's location on disk"],
];

const libDir = join(import.meta.dir, "..", "..", "lib");
const files = readdirSync(libDir).filter((f) => f.endsWith(".ts"));
const cores = new Set(CORES);

/** The rule broken by a core's import, or undefined. */
function importViolation(imp: Import): string | undefined {
  const { specifier } = imp;
  if (specifier.startsWith(".")) {
    const target = specifier.replace(/^\.\//, "");
    if (target.includes("/")) return `imports ${specifier}, outside lib/ (lib is flat)`;
    if (cores.has(target)) return undefined;
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

/** Every rule a core breaks, one message each, naming the file, the line and the rule. */
function coreViolations(file: string): string[] {
  const { code, bare } = strip(readFileSync(join(libDir, file), "utf8"));
  const problems: string[] = [];
  for (const imp of importsOf(code)) {
    const why = importViolation(imp);
    if (why) problems.push(`lib/${file}:${imp.line}: core ${why}`);
  }
  const lines = bare.split("\n");
  for (const [n, line] of lines.entries())
    for (const [pattern, what] of FORBIDDEN) {
      const m = line.match(pattern);
      if (m) problems.push(`lib/${file}:${n + 1}: core uses \`${m[0]}\` (${what}; inject it from a shell)`);
    }
  return problems;
}

describe("lib/ layers", () => {
  test("every lib file is classified once, as a core or a shell", () => {
    expect(files.length).toBeGreaterThan(40);
    const unclassified = files
      .filter((f) => !cores.has(f) && !(f in SHELLS))
      .map((f) => `lib/${f}: not classified: add it to CORES or SHELLS in tests/unit/layers.test.ts`);
    const both = CORES.filter((f) => f in SHELLS).map((f) => `lib/${f}: listed as both core and shell`);
    const gone = [...CORES, ...Object.keys(SHELLS)]
      .filter((f) => !files.includes(f))
      .map((f) => `lib/${f}: classified but does not exist`);
    const twice = CORES.filter((f, i) => CORES.indexOf(f) !== i).map((f) => `lib/${f}: listed twice`);
    expect([...unclassified, ...both, ...gone, ...twice]).toEqual([]);
  });

  test("cores import only cores and pure packages, and use no clock, timer, randomness, process or I/O", () => {
    expect(CORES.length).toBeGreaterThan(0);
    expect(CORES.flatMap(coreViolations)).toEqual([]);
  });

  test("the checker finds what it must (comments and strings do not count)", () => {
    const sample = [
      'import { registry } from "./shell.ts";',
      'import type { X } from "./shell2.ts";',
      'import { type Y } from "node:fs";',
      "// Date.now() in a comment",
      'const s = "setTimeout(f)";',
      "const r = /Date.now()/g;",
      "const d = new Date(0); const e = Date();",
      "const t = `\u0024{Date.now()} ms`;",
      "const u = `text setInterval \u0024{ `x \u0024{Math.random()}` }`;",
    ].join("\n");
    const { code, bare } = strip(sample);
    expect(importsOf(code).map((i) => [i.specifier, i.typeOnly])).toEqual([
      ["./shell.ts", false],
      ["./shell2.ts", true],
      ["node:fs", true],
    ]);
    const tokens = bare
      .split("\n")
      .flatMap((line) => FORBIDDEN.filter(([p]) => p.test(line)).map(([, w]) => w));
    expect(tokens).toEqual(["clock", "clock", "randomness"]);
    expect(importViolation({ specifier: "./shell2.ts", typeOnly: true, line: 2 })).toContain(
      "imports types from the shell shell2.ts",
    );
  });
});
