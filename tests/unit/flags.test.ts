import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { controllerCatalog, resolveControllers } from "../../lib/controllernames.ts";
import { type ParseResult, parseCommandLine, type RunOptions } from "../../lib/flags.ts";
import { listFlags } from "../../lib/flagtable.ts";
import { parseGoDuration } from "../../lib/flagvalues.ts";
import { helpText, usage } from "../../lib/help.ts";
import { FlagError } from "../../lib/pflag.ts";
import { goCcmArgs } from "../support/goccm.ts";

function run(argv: string[], env: Record<string, string | undefined> = {}): RunOptions {
  const r = parseCommandLine(argv, env);
  if (r.command !== "run") throw new Error(`expected run, got ${r.command}`);
  return r.options;
}

function warningsOf(argv: string[]): string[] {
  return parseCommandLine(argv).warnings;
}

function flagError(fn: () => unknown): FlagError {
  try {
    fn();
  } catch (err) {
    if (err instanceof FlagError) return err;
    throw err;
  }
  throw new Error("expected a FlagError");
}

const REFERENCE_ARGS = goCcmArgs;

describe("parseCommandLine() reference DaemonSet args", () => {
  test.each([
    ["v1.12", 50258],
    ["v1.13", 10458],
  ])("parseCommandLine() accepts the %s DaemonSet args unchanged", (_release, port) => {
    const r = parseCommandLine(REFERENCE_ARGS(port), {});
    expect(r.command).toBe("run");
    expect(r.warnings).toEqual([]);
    if (r.command !== "run") return;
    const o = r.options;
    expect(o.logging).toEqual({ format: "text", verbosity: 2 });
    expect(o.cloudConfig).toBe("/etc/talos/ccm-config.yaml");
    expect(o.controllers).toEqual(["cloud-node", "node-csr-approval"]);
    expect(o.enabledControllers).toEqual(["cloud-node", "node-csr-approval"]);
    expect(o.leaderElection.resourceName).toBe("cloud-controller-manager-talos");
    expect(o.useServiceAccountCredentials).toBe(true);
    expect(o.serving.securePort).toBe(port);
    expect(o.serving.alwaysAllowPaths).toEqual(["/healthz", "/livez", "/readyz", "/metrics"]);
  });

  test("parseCommandLine() accepts the same args in space-separated form", () => {
    const spaced = REFERENCE_ARGS(50258).flatMap((a) => {
      const eq = a.indexOf("=");
      return eq === -1 ? [a] : [a.slice(0, eq), a.slice(eq + 1)];
    });
    expect(run(spaced)).toEqual(run(REFERENCE_ARGS(50258)));
  });
});

describe("parseCommandLine() defaults", () => {
  test("parseCommandLine() with no arguments gives the upstream defaults", () => {
    expect(run([])).toEqual({
      controllers: ["*"],
      enabledControllers: ["cloud-node", "cloud-node-lifecycle"],
      clusterName: "kubernetes",
      useServiceAccountCredentials: false,
      kubeApiQps: 20,
      kubeApiBurst: 30,
      minResyncPeriodMs: 12 * 3_600_000,
      leaderElection: {
        enabled: true,
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
        resourceName: "cloud-controller-manager",
        resourceNamespace: "kube-system",
      },
      serving: {
        bindAddress: "0.0.0.0",
        securePort: 10258,
        tokenReviewCacheTtlMs: 10_000,
        authorizedCacheTtlMs: 10_000,
        unauthorizedCacheTtlMs: 10_000,
        alwaysAllowPaths: ["/healthz", "/readyz", "/livez"],
      },
      nodeController: {
        statusUpdateFrequencyMs: 5 * 60_000,
        monitorPeriodMs: 5_000,
        concurrentSyncs: 16,
        concurrentLifecycleSyncs: 1,
      },
      ipam: { allocateNodeCidrs: false, allocatorType: "RangeAllocator", clusterCidrs: [], serviceCidrs: [] },
      logging: { format: "text", verbosity: 0 },
      talos: { endpoints: [], serviceAccount: "talos-cloud-controller-manager", machineAccess: "auto" },
    });
  });

  test("parseCommandLine() reads the Talos settings from the injected environment only", () => {
    const o = run([], {
      TALOS_ENDPOINTS: " 10.0.0.1, ,10.0.0.2",
      TALOSCONFIG: "/var/run/secrets/talos.dev/config",
      SERVICE_ACCOUNT: "ccm",
      TALOS_MACHINE_ACCESS: "proxy",
    });
    expect(o.talos).toEqual({
      endpoints: ["10.0.0.1", "10.0.0.2"],
      configPath: "/var/run/secrets/talos.dev/config",
      serviceAccount: "ccm",
      machineAccess: "proxy",
    });
  });

  test("parseCommandLine() refuses a TALOS_MACHINE_ACCESS it does not know, naming the variable", () => {
    expect(() => run([], { TALOS_MACHINE_ACCESS: "direct" })).toThrow(
      'TALOS_MACHINE_ACCESS="direct": expected auto or proxy',
    );
    expect(run([], { TALOS_MACHINE_ACCESS: "" }).talos.machineAccess).toBe("auto");
  });

  test("parseCommandLine() leaves empty path flags out, as upstream treats them as unset", () => {
    const o = run(["--kubeconfig=", "--cloud-config", "", "--tls-cert-file=", "--tls-private-key-file="]);
    expect("kubeconfig" in o).toBe(false);
    expect("cloudConfig" in o).toBe(false);
    expect("tlsCertFile" in o.serving).toBe(false);
  });
});

describe("parseGoDuration()", () => {
  test.each([
    ["15s", 15_000],
    ["1m30s", 90_000],
    ["5m0s", 300_000],
    ["100ms", 100],
    ["1h", 3_600_000],
    ["12h0m0s", 43_200_000],
    ["1.5h", 5_400_000],
    [".5s", 500],
    ["5.s", 5_000],
    ["2h45m", 9_900_000],
    ["-1s", -1_000],
    ["+2s", 2_000],
    ["0", 0],
    ["-0", 0],
    ["0s", 0],
    ["1us", 0.001],
    ["1\u00b5s", 0.001],
    ["1\u03bcs", 0.001],
    ["1500000ns", 1.5],
  ])("parseGoDuration(%p) is %p ms", (s, ms) => {
    expect(parseGoDuration(s)).toBeCloseTo(ms, 9);
  });

  test.each([
    "",
    "1",
    "s",
    "1x",
    ".",
    ".s",
    "1.5.5s",
    "-",
    "1h-5m",
    " 1s",
    "1s ",
    "1 s",
    "1e3s",
    "1S",
    "3000000h",
  ])("parseGoDuration(%p) is undefined", (s) => {
    expect(parseGoDuration(s)).toBeUndefined();
  });

  test("parseGoDuration() reads back every whole number of milliseconds", () => {
    fc.assert(
      fc.property(fc.integer({ min: -1e12, max: 1e12 }), (n) => {
        expect(parseGoDuration(`${n}ms`)).toBe(n);
      }),
    );
  });
});

describe("parseCommandLine() durations", () => {
  test.each([
    ["--leader-elect-lease-duration=30s", (o: RunOptions) => o.leaderElection.leaseDurationMs, 30_000],
    ["--leader-elect-renew-deadline=1m30s", (o: RunOptions) => o.leaderElection.renewDeadlineMs, 90_000],
    [
      "--node-status-update-frequency=1m",
      (o: RunOptions) => o.nodeController.statusUpdateFrequencyMs,
      60_000,
    ],
    ["--node-monitor-period=500ms", (o: RunOptions) => o.nodeController.monitorPeriodMs, 500],
    ["--min-resync-period=1h", (o: RunOptions) => o.minResyncPeriodMs, 3_600_000],
    ["--authentication-token-webhook-cache-ttl=0", (o: RunOptions) => o.serving.tokenReviewCacheTtlMs, 0],
  ])("parseCommandLine(%p) converts to milliseconds", (arg, pick, ms) => {
    const extra = arg.startsWith("--leader-elect-renew") ? ["--leader-elect-lease-duration=2m"] : [];
    expect(pick(run([arg, ...extra]))).toBe(ms);
  });

  test("parseCommandLine() names the flag and the expected form of a bad duration", () => {
    expect(flagError(() => run(["--leader-elect-retry-period=2"])).message).toBe(
      'Cannot parse the command line: invalid value "2" for --leader-elect-retry-period: expected a Go duration such as 15s, 1m30s or 100ms',
    );
  });

  test.each(["--node-status-update-frequency=0s", "--node-monitor-period=-5s", "--min-resync-period=0"])(
    "parseCommandLine(%p) refuses a period that is not positive",
    (arg) => {
      expect(flagError(() => run([arg])).message).toContain("must be greater than zero");
    },
  );
});

describe("parseCommandLine() pflag syntax", () => {
  test.each([
    [["--cluster-name=a"], "a"],
    [["--cluster-name", "a"], "a"],
    [["--cluster-name=a=b"], "a=b"],
    [["--cluster-name", "--leader-elect"], "--leader-elect"],
    [["--cluster-name", "-"], "-"],
    [["--cluster-name=x", "--cluster-name=y"], "y"],
    [["--cluster_name=z"], "z"],
  ])("parseCommandLine(%p) sets the string flag to %p", (argv, value) => {
    expect(run(argv).clusterName).toBe(value);
  });

  test.each([
    [["--leader-elect"], true],
    [["--leader-elect=false"], false],
    [["--leader-elect=0"], false],
    [["--leader-elect=F"], false],
    [["--leader-elect=FALSE"], false],
    [["--leader-elect=t"], true],
    [["--leader_elect=False"], false],
    [["--leader-elect=false", "--leader-elect"], true],
  ])("parseCommandLine(%p) sets the boolean flag to %p", (argv, value) => {
    expect(run(argv).leaderElection.enabled).toBe(value);
  });

  test("parseCommandLine() refuses a bad boolean spelling", () => {
    expect(flagError(() => run(["--leader-elect=yes"])).message).toContain(
      'invalid value "yes" for --leader-elect: expected true or false',
    );
  });

  test("parseCommandLine() does not let a boolean flag consume the next argument", () => {
    const err = flagError(() => run(["--leader-elect", "false"]));
    expect(err.message).toContain('unexpected argument "false"');
    expect(err.message).toContain("--leader-elect=false");
    expect(run(["--use-service-account-credentials", "--kubeconfig", "/k"]).kubeconfig).toBe("/k");
  });

  test.each([
    [["--v=3"], 3],
    [["--v", "3"], 3],
    [["-v=3"], 3],
    [["-v", "3"], 3],
    [["-v3"], 3],
    [["--v=010"], 10],
    [["--v=1", "-v", "7"], 7],
  ])("parseCommandLine(%p) sets the verbosity to %p", (argv, level) => {
    expect(run(argv).logging.verbosity).toBe(level);
  });

  test.each([["--v=-1"], ["--v=x"], ["--v=1.5"], ["--v=4294967296"], ["-v"], ["--v"]])(
    "parseCommandLine(%p) refuses the verbosity",
    (arg) => {
      expect(() => run([arg])).toThrow(FlagError);
    },
  );

  test.each([
    [["--secure-port=0x2742"], 10050],
    [["--secure-port=0o17"], 15],
    [["--secure-port=017"], 15],
    [["--secure-port=0b11"], 3],
    [["--secure-port=1_000"], 1000],
    [["--secure-port=+80"], 80],
  ])("parseCommandLine(%p) reads Go integer syntax as %p", (argv, port) => {
    expect(run(argv).serving.securePort).toBe(port);
  });

  test.each([
    "--kube-api-burst=2147483648",
    "--kube-api-burst=1.5",
    "--kube-api-burst=_1",
    "--kube-api-burst=1__0",
    "--kube-api-burst=0x",
    "--kube-api-burst=08",
    "--kube-api-burst=",
  ])("parseCommandLine(%p) refuses a malformed or out-of-range int32", (arg) => {
    expect(flagError(() => run([arg])).message).toContain("for --kube-api-burst");
  });

  test("parseCommandLine() reads float32 QPS and refuses non-finite values", () => {
    expect(run(["--kube-api-qps=7.5"]).kubeApiQps).toBe(7.5);
    expect(run(["--kube-api-qps=-1"]).kubeApiQps).toBe(-1);
    expect(run(["--kube-api-qps=1e2"]).kubeApiQps).toBe(100);
    for (const bad of ["NaN", "Inf", "1e39", "x", ""]) {
      expect(flagError(() => run([`--kube-api-qps=${bad}`])).message).toContain("expected a finite number");
    }
  });

  test.each([
    [["--authorization-always-allow-paths=/a,/b"], ["/a", "/b"]],
    [
      ["--authorization-always-allow-paths=/a", "--authorization-always-allow-paths=/b,/c"],
      ["/a", "/b", "/c"],
    ],
    [["--authorization-always-allow-paths="], []],
    [
      ["--authorization-always-allow-paths", '"/a,b",/c'],
      ["/a,b", "/c"],
    ],
    [
      ["--authorization-always-allow-paths", '"say ""hi""",x'],
      ['say "hi"', "x"],
    ],
    [["--authorization-always-allow-paths=/a,"], ["/a", ""]],
  ])("parseCommandLine(%p) splits string slices like pflag: %p", (argv, paths) => {
    expect(run(argv).serving.alwaysAllowPaths).toEqual(paths);
  });

  test.each([
    '--authorization-always-allow-paths=a"b',
    '--authorization-always-allow-paths="ab',
    '--controllers="a"b',
  ])("parseCommandLine(%p) refuses malformed quoting", (arg) => {
    expect(flagError(() => run([arg])).message).toContain("expected comma-separated values");
  });

  test("parseCommandLine() stops reading flags at --", () => {
    const err = flagError(() => run(["--v=1", "--", "--v=2"]));
    expect(err.message).toContain('unexpected argument "--v=2"');
    expect(run(["--v=1", "--"]).logging.verbosity).toBe(1);
  });

  test("parseCommandLine() ignores empty arguments, as upstream does", () => {
    expect(run(["", "--v=1", ""]).logging.verbosity).toBe(1);
  });

  test.each([
    [["---v=1"], "bad flag syntax: ---v=1"],
    [["--=1"], "bad flag syntax: --=1"],
    [["--cluster-name"], "flag needs an argument: --cluster-name"],
    [["-v"], "flag needs an argument: 'v' in -v"],
    [["-x"], "unknown shorthand flag: 'x' in -x"],
    [["-hx"], "unknown shorthand flag: 'x' in -hx"],
    [["stray"], 'unexpected argument "stray": run takes flags only'],
    [["--v=1", "validate"], "subcommands must come first"],
  ])("parseCommandLine(%p) fails with %p", (argv, detail) => {
    expect(flagError(() => parseCommandLine(argv)).message).toContain(detail);
  });
});

describe("parseCommandLine() unknown flags", () => {
  test("parseCommandLine() names the closest known flag", () => {
    expect(flagError(() => run(["--leader-elect-resouce-name=x"])).message).toBe(
      "Cannot parse the command line: unknown flag: --leader-elect-resouce-name (did you mean --leader-elect-resource-name?)",
    );
  });

  test.each([
    ["--kubeconfg=/k", "--kubeconfig"],
    ["--secure-prot=1", "--secure-port"],
    ["--controller=*", "--controllers"],
    ["--cloud_confg=x", "--cloud-config"],
  ])("parseCommandLine(%p) suggests %p", (arg, hint) => {
    expect(flagError(() => run([arg])).message).toContain(`(did you mean ${hint}?)`);
  });

  test("parseCommandLine() does not suggest a flag that is nothing alike", () => {
    const message = flagError(() => run(["--completely-unrelated-thing"])).message;
    expect(message).toBe("Cannot parse the command line: unknown flag: --completely-unrelated-thing");
  });

  test("parseCommandLine() points a single-dash long flag at its double-dash spelling", () => {
    expect(flagError(() => run(["-kubeconfig=/k"])).message).toContain(
      "flag -kubeconfig=/k has a single dash (did you mean --kubeconfig?)",
    );
    expect(flagError(() => run(["-version"])).message).toContain("(did you mean --version?)");
  });

  test("parseCommandLine() keeps subcommand flags out of run and run flags out of subcommands", () => {
    expect(flagError(() => run(["--image=x"])).message).toContain("unknown flag: --image");
    expect(
      flagError(() => parseCommandLine(["validate", "--kubeconfig=/k", "--cloud-config=c"])).message,
    ).toContain("unknown flag: --kubeconfig");
  });
});

/** A value of each kind that pflag accepts, to exercise every accepted-only flag. */
const SAMPLE_VALUES: Record<string, string> = {
  string: "x",
  strings: "a,b",
  duration: "1s",
  int: "1",
  int32: "1",
  uint: "1",
  ip: "127.0.0.1",
  mapStringBool: "SomeGate=true",
  quantity: "1Ki",
  namedCertKey: "tls.crt,tls.key",
  int32Slice: "23,29",
};

describe("the Go CCM's command line", () => {
  const goFlags = readFileSync(join(import.meta.dir, "..", "fixtures", "go-ccm-flags.tsv"), "utf8")
    .split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"))
    .map((line) => line.split("\t")[0] as string);

  test("listFlags() knows every flag of the Go CCM (cloud-provider v0.36.2's set and its node-ipam flags)", () => {
    expect(goFlags).toHaveLength(88);
    const known = new Set(listFlags("run").map((f) => f.name));
    expect(goFlags.filter((name) => !known.has(name))).toEqual([]);
  });
});

describe("parseCommandLine() flags accepted for compatibility", () => {
  const accepted = listFlags("run").filter((f) => !f.implemented);

  test("listFlags() marks the framework flags this CCM does not use as accepted only", () => {
    const names = accepted.map((f) => f.name);
    for (const name of [
      "profiling",
      "feature-gates",
      "webhooks",
      "configure-cloud-routes",
      "log-dir",
      "vmodule",
    ]) {
      expect(names).toContain(name);
    }
    expect(names).not.toContain("kubeconfig");
    expect(accepted.every((f) => (f.ignored ?? "") !== "")).toBe(true);
  });

  test.each(accepted.map((f) => [f.name, f.type] as const))(
    "parseCommandLine() accepts --%s (%s) with a warning and the right number of arguments",
    (name, type) => {
      const args = type === "" ? [`--${name}`] : [`--${name}`, SAMPLE_VALUES[type] ?? "missing sample"];
      const r = parseCommandLine([...args, "--kubeconfig", "/k"]);
      expect(r.command === "run" && r.options.kubeconfig).toBe("/k");
      expect(r.warnings).toHaveLength(1);
      expect(r.warnings[0]).toStartWith(`--${name} is accepted for compatibility and has no effect: `);
    },
  );

  test("parseCommandLine() warns once per accepted flag, in order of appearance", () => {
    expect(warningsOf(["--profiling", "--log-dir=/tmp", "--profiling=false"])).toEqual([
      "--profiling is accepted for compatibility and has no effect: no /debug/pprof endpoints are served",
      "--log-dir is accepted for compatibility and has no effect: klog flag removed upstream in Kubernetes 1.26; logs always go to stderr",
    ]);
  });

  test("parseCommandLine() stays quiet about --kube-api-content-type=application/json", () => {
    expect(warningsOf(["--kube-api-content-type=application/json"])).toEqual([]);
    expect(warningsOf(["--kube-api-content-type=application/vnd.kubernetes.protobuf"])).toHaveLength(1);
  });

  test.each([
    "--profiling=maybe",
    "--feature-gates=A",
    "--feature-gates=A=yes",
    "--webhook-bind-address=not-an-ip",
    "--webhook-secure-port=http",
    "--log-text-info-buffer-size=1Xi",
    "--tls-sni-cert-key=only-one-file",
    "--log-flush-frequency=5",
  ])("parseCommandLine(%p) still checks the value of an accepted flag", (arg) => {
    expect(flagError(() => run([arg])).message).toContain("invalid value");
  });

  test("parseCommandLine() merges repeated --feature-gates like upstream's map flag", () => {
    expect(() => run(["--feature-gates=A=true, B=false", "--feature-gates=C=1,"])).not.toThrow();
  });
});

describe("resolveControllers()", () => {
  test.each([
    // `*` is the Go CCM's default set: cloud-node and cloud-node-lifecycle.
    [["*"], ["cloud-node", "cloud-node-lifecycle"]],
    [[], []],
    [["cloud-node"], ["cloud-node"]],
    [["*", "-cloud-node"], ["cloud-node-lifecycle"]],
    [["-cloud-node", "*"], ["cloud-node-lifecycle"]],
    [["*", "-cloud-node-lifecycle"], ["cloud-node"]],
    [["*", "-node-lifecycle-controller"], ["cloud-node"]],
    [["*", "-cloud-node", "-cloud-node-lifecycle-controller"], []],
    [
      ["*", "node-csr-approval"],
      ["cloud-node", "cloud-node-lifecycle", "node-csr-approval"],
    ],
    [["cloud-node", "-cloud-node"], ["cloud-node"]],
    [
      ["*", "nodeipam"],
      ["cloud-node", "cloud-node-lifecycle", "node-ipam"],
    ],
    [
      ["cloud-node", "node-csr-approval"],
      ["cloud-node", "node-csr-approval"],
    ],
    [
      ["*", "cloud-node-lifecycle", "node-ipam-controller"],
      ["cloud-node", "cloud-node-lifecycle", "node-ipam"],
    ],
    [
      ["cloud-node-controller", "certificatesigningrequest-approving-controller"],
      ["cloud-node", "node-csr-approval"],
    ],
    [
      ["cloud-node-lifecycle-controller", "node-ipam"],
      ["cloud-node-lifecycle", "node-ipam"],
    ],
    [["-cloud-node-controller", "*"], ["cloud-node-lifecycle"]],
    [[" cloud-node ", " -nodeipam"], ["cloud-node"]],
    [
      ["*", "-route", "-service"],
      ["cloud-node", "cloud-node-lifecycle"],
    ],
    [
      ["*", "-service-lb-controller", "-node-route-controller"],
      ["cloud-node", "cloud-node-lifecycle"],
    ],
  ])("resolveControllers(%p) enables %p", (list, enabled) => {
    expect<string[]>(resolveControllers(list).enabled).toEqual(enabled);
  });

  test("controllerCatalog() lists every name resolveControllers() accepts, with what it selects and `*`", () => {
    const catalog = controllerCatalog();
    for (const entry of catalog) {
      for (const name of entry.names) {
        expect({ name, enabled: resolveControllers([name]).enabled }).toEqual({
          name,
          enabled: entry.name === undefined ? [] : [entry.name],
        });
      }
    }
    const star = catalog.filter((c) => c.onByDefault && c.name !== undefined).map((c) => c.name);
    expect<(string | undefined)[]>(resolveControllers(["*"]).enabled).toEqual(star);
    expect(() => resolveControllers(["node-lifecycle"])).toThrow();
    expect(catalog.flatMap((c) => c.names)).not.toContain("node-lifecycle");
  });

  test("resolveControllers() includes route and service in * silently but warns when they are named", () => {
    expect(resolveControllers(["*"]).warnings).toEqual([]);
    expect(resolveControllers(["*", "route", "service-lb-controller"]).warnings).toEqual([
      '--controllers: "route" (node-route-controller) is not implemented by this CCM; ignoring it',
      '--controllers: "service-lb-controller" (service-lb-controller) is not implemented by this CCM; ignoring it',
    ]);
  });

  test("resolveControllers() warns when nothing is enabled", () => {
    expect(resolveControllers(["-cloud-node"]).warnings).toEqual([
      "--controllers=-cloud-node enables no controller; only the serving endpoints will run",
    ]);
  });

  test("resolveControllers() accepts the name the Talos CCM docs give for the lifecycle controller, with a warning", () => {
    const r = resolveControllers(["node-lifecycle-controller"]);
    expect(r.enabled).toEqual(["cloud-node-lifecycle"]);
    expect(r.warnings[0]).toContain('treating it as "cloud-node-lifecycle"');
  });

  test.each([["foo"], ["-foo"], [""], ["+cloud-node"], ["cloud-node-controllers"]])(
    "resolveControllers([%p]) fails and lists the valid names",
    (name) => {
      const err = flagError(() => resolveControllers(["cloud-node", name]));
      expect(err.message).toStartWith("Cannot resolve --controllers: ");
      expect(err.message).toContain("is not in the list of known controllers");
      expect(err.message).toContain("cloud-node, cloud-node-lifecycle-controller");
      expect(err.message).toContain("nodeipam");
    },
  );

  test("parseCommandLine() resolves --controllers and carries its warnings", () => {
    const r = parseCommandLine(["--controllers=cloud-node", "--controllers=route"]);
    expect(r.command === "run" && r.options.enabledControllers).toEqual(["cloud-node"]);
    expect(r.warnings).toHaveLength(1);
    expect(() => parseCommandLine(["--controllers=cloud-node,typo"])).toThrow(FlagError);
  });
});

describe("parseCommandLine() validation", () => {
  test.each([
    [
      ["--cloud-provider=aws"],
      'invalid value "aws" for --cloud-provider: this binary only implements "talos"',
    ],
    [["--cloud-provider="], 'invalid value "" for --cloud-provider'],
    [["--leader-elect-resource-lock=endpoints"], 'for --leader-elect-resource-lock: must be "leases"'],
    [["--leader-elect-resource-name="], "--leader-elect-resource-name must not be empty"],
    [["--secure-port=65536"], "must be between 0 and 65535"],
    [["--secure-port=-1"], "must be between 0 and 65535"],
    [["--tls-cert-file=/c"], "--tls-cert-file and --tls-private-key-file must be given together"],
    [["--tls-private-key-file=/k"], "--tls-cert-file and --tls-private-key-file must be given together"],
    [["--tls-min-version=VersionTLS14"], 'invalid value "VersionTLS14" for --tls-min-version'],
    [["--concurrent-node-syncs=0"], "invalid value 0 for --concurrent-node-syncs: must be at least 1"],
    [["--concurrent-node-lifecycle-syncs=0"], "must be at least 1"],
    [["--kube-api-burst=-1"], "for --kube-api-burst: must not be negative"],
    [["--logging-format=xml"], 'invalid value "xml" for --logging-format: expected text or json'],
    [["--bind-address=1.2.3"], 'invalid value "1.2.3" for --bind-address: expected an IP address'],
    [["--bind-address=01.2.3.4"], "expected an IP address"],
    [["--bind-address=fe80::1%eth0"], "expected an IP address"],
    [["--cidr-allocator-type=IPAMFromCloud"], "expected RangeAllocator or CloudAllocator"],
  ])("parseCommandLine(%p) fails: %p", (argv, detail) => {
    expect(flagError(() => run(argv)).message).toContain(detail);
  });

  // Go's net.ParseIP(strings.TrimSpace(s)) (pflag's IP flag) on each spelling, as go1.26 answers.
  test.each([
    ["::ffff:1.2.3.4", true],
    ["::1.2.3.4", true],
    ["1:2:3:4:5:6:1.2.3.4", true],
    ["1:2:3:4:5:6:7::", true],
    ["0001::", true],
    ["FE80::A", true],
    ["\t1.2.3.4\n", true],
    ["1.2.3.04", false],
    ["::ffff:01.2.3.4", false],
    ["1:2:3:4:5:6::1.2.3.4", false],
    ["1:2:3:4:5:6:7:8::", false],
    ["00001::", false],
    ["fe80::1%", false],
    ["::%eth0", false],
    ["[::1]", false],
    ["0x1.2.3.4", false],
    ["1.2.3.4:80", false],
    ["\u0661.2.3.4", false],
  ])("parseCommandLine() --bind-address=%p is an IP address: %p (as Go's net.ParseIP)", (spelling, ok) => {
    const argv = [`--bind-address=${spelling}`];
    if (ok) expect(run(argv).serving.bindAddress).toBe(spelling.trim());
    else expect(flagError(() => run(argv)).message).toContain("expected an IP address");
  });

  test("parseCommandLine() skips leader-election checks when leader election is off", () => {
    const o = run(["--leader-elect=false", "--leader-elect-resource-lock=configmaps"]);
    expect(o.leaderElection.enabled).toBe(false);
  });

  test("parseCommandLine() reads serving settings", () => {
    const o = run([
      "--bind-address= ::1 ",
      "--secure-port=0",
      "--tls-cert-file=/c",
      "--tls-private-key-file=/k",
      "--tls-min-version=VersionTLS13",
      "--client-ca-file=/ca",
    ]);
    expect(o.serving).toMatchObject({
      bindAddress: "::1",
      securePort: 0,
      tlsCertFile: "/c",
      tlsPrivateKeyFile: "/k",
      tlsMinVersion: "TLSv1.3",
      clientCaFile: "/ca",
    });
  });

  test("parseCommandLine() says the client-CA lookup flags have no effect: the cluster's extension-apiserver-authentication is never read", () => {
    const w = warningsOf(["--authentication-skip-lookup", "--authentication-tolerate-lookup-failure=true"]);
    expect(w).toHaveLength(2);
    for (const [i, name] of [
      "authentication-skip-lookup",
      "authentication-tolerate-lookup-failure",
    ].entries()) {
      expect(w[i]).toBe(
        `--${name} is accepted for compatibility and has no effect: this CCM never reads the cluster's ` +
          "extension-apiserver-authentication ConfigMap: client certificates are trusted only from --client-ca-file " +
          "and --requestheader-client-ca-file, so nothing published in the cluster widens who may call the secure port",
      );
    }
    expect(run(["--authentication-skip-lookup"]).serving).not.toHaveProperty("authenticationSkipLookup");
  });

  test("parseCommandLine() reads the --requestheader-* flags with upstream's defaults, only with a CA file", () => {
    expect(run(["--requestheader-username-headers=x-user"]).serving.requestHeader).toBeUndefined();
    expect(run(["--requestheader-client-ca-file=/proxy-ca"]).serving.requestHeader).toEqual({
      clientCaFile: "/proxy-ca",
      allowedNames: [],
      usernameHeaders: ["x-remote-user"],
      uidHeaders: [],
      groupHeaders: ["x-remote-group"],
      extraHeaderPrefixes: ["x-remote-extra-"],
    });
    expect(
      run([
        "--requestheader-client-ca-file=/proxy-ca",
        "--requestheader-allowed-names=front-proxy,aggregator",
        "--requestheader-uid-headers=X-Remote-Uid",
        "--requestheader-group-headers=x-remote-group,x-groups",
      ]).serving.requestHeader,
    ).toMatchObject({
      allowedNames: ["front-proxy", "aggregator"],
      uidHeaders: ["X-Remote-Uid"],
      groupHeaders: ["x-remote-group", "x-groups"],
    });
  });

  test.each([
    [["--requestheader-username-headers=x-user, "], /empty value in "requestheader-username-headers"/],
    [["--requestheader-allowed-names= "], /empty value in "requestheader-allowed-names"/],
    [["--requestheader-uid-headers=x-uid"], /without specifying the standard X-Remote-Uid header/],
  ])("parseCommandLine(%p) refuses the --requestheader-* values upstream refuses", (argv, message) => {
    expect(() => run(argv)).toThrow(message);
  });

  test("parseCommandLine() reads the node IPAM flags in resolveNodeIpamConfig's shape", () => {
    const o = run([
      "--allocate-node-cidrs",
      "--cidr-allocator-type=CloudAllocator",
      "--cluster-cidr=10.244.0.0/16, fd00:10:244::/64",
      "--service-cluster-ip-range=10.96.0.0/12",
      "--node-cidr-mask-size-ipv4=24",
      "--node-cidr-mask-size-ipv6=80",
      "--node-cidr-mask-size=0",
    ]);
    expect(o.ipam).toEqual({
      allocateNodeCidrs: true,
      allocatorType: "CloudAllocator",
      clusterCidrs: ["10.244.0.0/16", "fd00:10:244::/64"],
      serviceCidrs: ["10.96.0.0/12"],
      nodeCidrMaskSizeIpv4: 24,
      nodeCidrMaskSizeIpv6: 80,
    });
  });

  test("parseCommandLine() checks IPAM flags early only when node-ipam will allocate", () => {
    const bad = ["--cluster-cidr=10.0.0.0/16,fd00::/64", "--node-cidr-mask-size=24"];
    expect(() => run(bad)).not.toThrow();
    expect(() => run(["--controllers=*,nodeipam", ...bad])).not.toThrow();
    const err = flagError(() => run(["--controllers=*,nodeipam", "--allocate-node-cidrs", ...bad]));
    expect(err.message).toContain("--node-cidr-mask-size is not allowed with dual-stack");
    expect(err.cause).toBeInstanceOf(Error);
    expect(
      flagError(() => run(["--controllers=nodeipam", "--allocate-node-cidrs", "--cluster-cidr=10.0.0.0/33"]))
        .message,
    ).toContain("--cluster-cidr");
  });
});

describe("parseCommandLine() subcommands", () => {
  test("parseCommandLine() reads validate's flags", () => {
    const r = parseCommandLine([
      "validate",
      "--cloud-config",
      "c.yaml",
      "--metadata=m.yaml",
      "-o",
      "json",
      "--v=3",
    ]);
    expect(r).toEqual({
      command: "validate",
      options: {
        cloudConfig: "c.yaml",
        metadata: "m.yaml",
        output: "json",
        logging: { format: "text", verbosity: 3 },
      },
      warnings: [],
    });
  });

  test.each([
    [["validate", "--cloud-config=c", "-oyaml"], "yaml"],
    [["validate", "--cloud-config=c", "-o=yaml"], "yaml"],
    [["validate", "--cloud-config=c", "--output", "json"], "json"],
  ])("parseCommandLine(%p) reads the output format %p", (argv, output) => {
    const r = parseCommandLine(argv);
    expect(r.command === "validate" && r.options.output).toBe(output as "json" | "yaml");
  });

  test.each([
    [["validate"], "validate needs --cloud-config FILE"],
    [["validate", "--cloud-config="], "validate needs --cloud-config FILE"],
    [
      ["validate", "--cloud-config=c", "-o", "xml"],
      'invalid value "xml" for --output: expected json or yaml',
    ],
    [["validate", "--cloud-config=c", "extra"], 'unexpected argument "extra": validate takes flags only'],
  ])("parseCommandLine(%p) fails: %p", (argv, detail) => {
    expect(flagError(() => parseCommandLine(argv)).message).toContain(detail);
  });

  test("parseCommandLine() gives manifests the reference DaemonSet's controllers by default", () => {
    expect(parseCommandLine(["manifests"])).toEqual({
      command: "manifests",
      options: {
        controllers: ["cloud-node", "node-csr-approval"],
        enabledControllers: ["cloud-node", "node-csr-approval"],
        namespace: "kube-system",
        workload: "DaemonSet",
        talosPatch: false,
        logging: { format: "text", verbosity: 0 },
      },
      warnings: [],
    });
  });

  test("parseCommandLine() reads manifests' flags", () => {
    const r = parseCommandLine([
      "manifests",
      "--image=ghcr.io/x/ccm:v1",
      "--controllers=*,nodeipam",
      "--cloud-config=c.yaml",
      "--namespace=ccm",
      "--talos-patch",
    ]);
    expect(r.command === "manifests" && r.options).toEqual({
      image: "ghcr.io/x/ccm:v1",
      controllers: ["*", "nodeipam"],
      enabledControllers: ["cloud-node", "cloud-node-lifecycle", "node-ipam"],
      cloudConfig: "c.yaml",
      namespace: "ccm",
      workload: "DaemonSet",
      talosPatch: true,
      logging: { format: "text", verbosity: 0 },
    });
  });

  test("parseCommandLine() reads manifests' --workload, refusing another kind and the Talos patch's Deployment", () => {
    const r = parseCommandLine(["manifests", "--workload=Deployment"]);
    expect(r.command === "manifests" && r.options.workload).toBe("Deployment");
    expect(flagError(() => parseCommandLine(["manifests", "--workload=StatefulSet"])).message).toContain(
      'invalid value "StatefulSet" for --workload: expected DaemonSet or Deployment',
    );
    expect(
      flagError(() => parseCommandLine(["manifests", "--workload=Deployment", "--talos-patch"])).message,
    ).toContain("the Talos patch installs the DaemonSet");
  });

  test("parseCommandLine() reads manifests' --machine-config", () => {
    const r = parseCommandLine(["manifests", "--machine-config=mc.yaml"]);
    expect(r.command === "manifests" && r.options.machineConfig).toBe("mc.yaml");
  });

  test("parseCommandLine() reads preflight's flags, with kube-system and no machine config by default", () => {
    expect(parseCommandLine(["preflight"])).toEqual({
      command: "preflight",
      options: { namespace: "kube-system", machineConfigs: [], logging: { format: "text", verbosity: 0 } },
      warnings: [],
    });
    const r = parseCommandLine([
      "preflight",
      "--kubeconfig=admin.conf",
      "--namespace=ccm",
      "--machine-config=a.yaml,b.yaml",
      "--machine-config",
      "c.yaml",
    ]);
    expect(r.command === "preflight" && r.options).toEqual({
      kubeconfig: "admin.conf",
      namespace: "ccm",
      machineConfigs: ["a.yaml", "b.yaml", "c.yaml"],
      logging: { format: "text", verbosity: 0 },
    });
    expect(parseCommandLine(["help", "preflight"])).toEqual({
      command: "help",
      options: { topic: "preflight" },
      warnings: [],
    });
    expect(flagError(() => parseCommandLine(["preflight", "--talos-patch"])).message).toContain(
      "talos-patch",
    );
  });

  test("parseCommandLine() accepts an explicit run subcommand", () => {
    expect(run(["run", "--v=2"])).toEqual(run(["--v=2"]));
  });
});

describe("parseCommandLine() help and version", () => {
  test.each([
    [["--help"], "run"],
    [["-h"], "run"],
    [["--v=2", "-h", "--cluster-name=x"], "run"],
    [["--help", "--no-such-flag"], "run"],
    [["--no-such-flag", "--help"], "run"],
    [["--cloud-provider=aws", "-h"], "run"],
    [["--help", "--version"], "run"],
    [["help"], "run"],
    [["help", "manifests"], "manifests"],
    [["validate", "-h"], "validate"],
    [["manifests", "--help", "--bogus"], "manifests"],
  ])("parseCommandLine(%p) asks for the %s help", (argv, topic) => {
    const r: ParseResult = parseCommandLine(argv);
    expect(r.command).toBe("help");
    expect(r.command === "help" && r.options.topic).toBe(topic as "run");
  });

  test("parseCommandLine() treats --help=false and a --help value of another flag as no help", () => {
    expect(parseCommandLine(["--help=false"]).command).toBe("run");
    expect(run(["--cluster-name", "--help"]).clusterName).toBe("--help");
  });

  test.each([
    [["--version"], false],
    [["--version=true"], false],
    [["--version=raw"], true],
    [["version"], false],
    [["--v=2", "--version"], false],
  ])("parseCommandLine(%p) asks for the version (raw: %p)", (argv, raw) => {
    expect(parseCommandLine(argv)).toEqual({ command: "version", options: { raw }, warnings: [] });
  });

  test("parseCommandLine() runs when --version is false or names a version to report", () => {
    expect(parseCommandLine(["--version=false"]).command).toBe("run");
    const r = parseCommandLine(["--version=v1.2.3"]);
    expect(r.command).toBe("run");
    expect(r.warnings).toEqual([
      "--version=v1.2.3: overriding the reported version is not supported; ignoring it",
    ]);
  });

  test.each([
    [["help", "nope"], 'unknown help topic "nope"'],
    [["help", "run", "validate"], "help takes at most one topic"],
    [["version", "--v=2"], "version takes no arguments"],
  ])("parseCommandLine(%p) fails: %p", (argv, detail) => {
    expect(flagError(() => parseCommandLine(argv)).message).toContain(detail);
  });
});

describe("helpText()", () => {
  test("helpText() groups the implemented flags like upstream and shows defaults", () => {
    const text = helpText();
    const headings = text.split("\n").filter((l) => l.endsWith(" flags:") || l === "Subcommands:");
    expect(headings).toEqual([
      "Generic flags:",
      "Leader election flags:",
      "Secure serving flags:",
      "Node controller flags:",
      "Node IPAM flags:",
      "Logging flags:",
      "Subcommands:",
    ]);
    expect(text).toContain(usage());
    expect(text).toMatch(
      /--leader-elect-lease-duration duration +How long a lease lasts without renewal\. \(default 15s\)/,
    );
    expect(text).toMatch(/ {2}-v, --v Level +Log verbosity/);
    expect(text).toMatch(/ {2}-h, --help +Show this help\./);
  });

  test("helpText() lists every flag: implemented ones described, accepted ones by name", () => {
    const text = helpText();
    for (const f of listFlags("run")) expect(text).toContain(`--${f.name}`);
    const accepted = text.slice(text.indexOf("Accepted for compatibility"));
    expect(accepted).toContain("--feature-gates");
    expect(accepted).not.toContain("--kubeconfig");
  });

  test("helpText() of a subcommand shows only its flags", () => {
    const text = helpText("validate");
    expect(text).toContain("Validate flags:");
    expect(text).toMatch(/-o, --output string/);
    expect(text).not.toContain("--leader-elect");
    expect(text).not.toContain("Accepted for compatibility");
    expect(helpText("manifests")).toContain("(default [cloud-node,node-csr-approval])");
  });

  test("helpText() keeps lines within 110 columns", () => {
    for (const topic of ["run", "validate", "manifests"] as const) {
      for (const line of helpText(topic).split("\n")) {
        if (!line.startsWith("  talos-cloud-controller-manager manifests"))
          expect(line.length).toBeLessThanOrEqual(110);
      }
    }
  });
});

describe("parseCommandLine() properties", () => {
  const names = [
    ...listFlags("run").map((f) => f.name),
    ...listFlags("validate").map((f) => f.name),
    ...listFlags("manifests").map((f) => f.name),
  ];
  const token = fc.oneof(
    fc.string(),
    fc.constantFrom(
      "--",
      "-",
      "-h",
      "-v",
      "-o",
      "--help",
      "--version",
      "run",
      "validate",
      "manifests",
      "help",
      "version",
    ),
    fc.constantFrom(...names).map((n) => `--${n}`),
    fc.tuple(fc.constantFrom(...names), fc.string()).map(([n, v]) => `--${n}=${v}`),
    fc
      .tuple(fc.constantFrom(...names), fc.constantFrom("1", "0", "1s", "true", "a,b", "::1", "A=true", "*"))
      .map(([n, v]) => `--${n}=${v}`),
    fc.string().map((s) => `-${s}`),
    fc.string().map((s) => `--${s}`),
  );

  test("parseCommandLine() throws nothing but FlagError on any argv", () => {
    fc.assert(
      fc.property(fc.array(token, { maxLength: 12 }), (argv) => {
        try {
          const r = parseCommandLine(argv, {});
          expect(["run", "validate", "manifests", "help", "version"]).toContain(r.command);
        } catch (err) {
          expect(err).toBeInstanceOf(FlagError);
          expect((err as FlagError).exitCode).toBe(2);
          expect((err as FlagError).message).toStartWith("Cannot ");
        }
      }),
      { numRuns: 3000 },
    );
  });

  test("resolveControllers() throws nothing but FlagError and enables only internal names", () => {
    const entry = fc.oneof(
      fc.string(),
      fc.constantFrom("*", "cloud-node", "-cloud-node", "nodeipam", "-route", "service", "node-csr-approval"),
    );
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 8 }), (list) => {
        try {
          for (const c of resolveControllers(list).enabled) {
            expect(["cloud-node", "cloud-node-lifecycle", "node-csr-approval", "node-ipam"]).toContain(c);
          }
        } catch (err) {
          expect(err).toBeInstanceOf(FlagError);
        }
      }),
    );
  });
});
