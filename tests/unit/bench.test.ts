// The benchmark harness' pure parts: budgets (size tiers) and verdicts, the JSON objects' exact keys,
// the table, the memory slope between two runs, /proc parsing, the command line and the
// cluster-size QPS tuning; with --talos apid, apid's figures (keys, table, the 128 MiB verdict) and
// the call counts taken from the simulator. (The figures themselves are
// measured by `npm run bench`, never asserted here.)

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parseBenchArgs, qpsTuning } from "../bench.ts";
import { parseStatCpu, parseStatus, RssSampler, SumRssSampler } from "../support/bench-proc.ts";
import { LeaseReadiness } from "../support/bench-ready.ts";
import {
  APID_FIGURE_KEYS,
  type ApidFigures,
  apidJson,
  type BenchFigures,
  BUDGETS,
  budgetAt,
  evaluate,
  FIGURE_KEYS,
  failures,
  formatApidTable,
  formatSlope,
  formatTable,
  overMemoryMax,
  SLOPE_BUDGETS,
  slope,
  slopeJson,
  toJson,
} from "../support/bench-report.ts";
import { diffCalls, formatMethodCounts, shortMethod } from "../support/bench-talos.ts";

const figures = (over: Partial<BenchFigures> = {}): BenchFigures => ({
  nodes: 1000,
  startup_ms: 42.4,
  idle_rss_mb: 49.61,
  init_s: 11.274,
  csr_s: 11.7,
  rss_mb: 194.44,
  settled_rss_mb: 60.04,
  peak_anon_mb: 48.93,
  settled_anon_mb: 39.31,
  cpu_s: 15.051,
  talos_calls_per_node: 3,
  talos_calls_per_csr: 0,
  talos_calls_per_node_hour: 0,
  kube_requests_per_node: 3.017,
  ...over,
});

describe("evaluate() verdicts", () => {
  const verdict = (f: BenchFigures, key: string) => evaluate(f).find((r) => r.figure === key)?.verdict;
  test.each([
    ["startup_ms", { startup_ms: 150 }, "PASS"],
    ["startup_ms", { startup_ms: 150.1 }, "FAIL"],
    ["idle_rss_mb", { idle_rss_mb: 48 }, "PASS"],
    ["idle_rss_mb", { idle_rss_mb: 48.1 }, "FAIL"],
    ["init_s", { init_s: 15 }, "PASS"],
    ["csr_s", { csr_s: 11.7 }, "FAIL"],
    ["rss_mb", { rss_mb: 70 }, "PASS"],
    ["rss_mb", { rss_mb: 70.1 }, "FAIL"],
    ["settled_rss_mb", { settled_rss_mb: 65 }, "PASS"],
    ["settled_rss_mb", { settled_rss_mb: 65.1 }, "FAIL"],
    ["settled_rss_mb", { settled_rss_mb: null }, "N/A"],
    ["talos_calls_per_node", { talos_calls_per_node: 5.01 }, "FAIL"],
    ["talos_calls_per_csr", { talos_calls_per_csr: 0.01 }, "FAIL"],
    ["talos_calls_per_csr", { talos_calls_per_csr: 0 }, "PASS"],
    ["talos_calls_per_node_hour", { talos_calls_per_node_hour: 1 }, "PASS"],
    ["cpu_s", { cpu_s: 1e6 }, "-"],
    ["peak_anon_mb", { peak_anon_mb: 1e6 }, "-"],
    ["settled_anon_mb", { settled_anon_mb: null }, "N/A"],
    ["kube_requests_per_node", {}, "-"],
    ["csr_s", { csr_s: null }, "N/A"],
  ] as const)("%s with %j is %s at N = 1,000", (key, over, want) => {
    expect(verdict(figures(over), key)).toBe(want);
  });

  test.each([
    [100, "init_s", { init_s: 15.5 }, "FAIL"],
    [5000, "init_s", { init_s: 500 }, "-"],
    [100, "rss_mb", { rss_mb: 70.1 }, "FAIL"],
    [1001, "rss_mb", { rss_mb: 114 }, "PASS"],
    [5000, "rss_mb", { rss_mb: 114 }, "PASS"],
    [5000, "rss_mb", { rss_mb: 114.1 }, "FAIL"],
    [5001, "rss_mb", { rss_mb: 900 }, "-"],
    [100, "settled_rss_mb", { settled_rss_mb: 65.1 }, "FAIL"],
    [1001, "settled_rss_mb", { settled_rss_mb: 900 }, "-"],
    [5000, "talos_calls_per_node", { talos_calls_per_node: 6 }, "FAIL"],
    [5000, "talos_calls_per_csr", { talos_calls_per_csr: 1 }, "FAIL"],
    [5000, "idle_rss_mb", { idle_rss_mb: 51 }, "FAIL"],
    [100_000, "idle_rss_mb", { idle_rss_mb: 48.1 }, "FAIL"],
  ] as const)("at N = %i, %s with %j is %s", (nodes, key, over, want) => {
    expect(verdict(figures({ nodes, ...over }), key)).toBe(want);
  });

  test("failures() names the figures over budget", () => {
    expect(failures(figures())).toEqual(["idle_rss_mb", "csr_s", "rss_mb"]);
  });
});

describe("budgetAt() size tiers", () => {
  test.each([
    [100, 70],
    [1000, 70],
    [1001, 114],
    [5000, 114],
    [5001, undefined],
  ])("peak RSS at N = %i: <= %p", (nodes, max) => {
    expect(budgetAt("rss_mb", nodes)?.max).toBe(max as number);
  });

  test.each([
    [100, 65],
    [1000, 65],
    [1001, undefined],
    [5000, undefined],
  ])("settled RSS at N = %i: <= %p", (nodes, max) => {
    expect(budgetAt("settled_rss_mb", nodes)?.max).toBe(max as number);
  });

  test.each([100, 1000, 1001, 5000, 5001])("idle RSS at N = %i: <= 48; the others as before", (nodes) => {
    expect(budgetAt("idle_rss_mb", nodes)?.max).toBe(48);
    expect(budgetAt("startup_ms", nodes)?.max).toBe(150);
    expect(budgetAt("talos_calls_per_node", nodes)?.max).toBe(5);
    expect(budgetAt("talos_calls_per_csr", nodes)?.max).toBe(0);
    expect(budgetAt("talos_calls_per_node_hour", nodes)?.max).toBe(1);
    expect(budgetAt("init_s", nodes)?.max).toBe(nodes <= 1000 ? 15 : undefined);
    expect(budgetAt("csr_s", nodes)?.max).toBe(nodes <= 1000 ? 10 : undefined);
    expect(budgetAt("cpu_s", nodes)).toBeUndefined();
  });

  test("every budget's tiers ascend, so the first that fits is the smallest", () => {
    for (const tiers of Object.values(BUDGETS)) {
      const ns = tiers.map((t) => t.upToNodes);
      expect(ns).toEqual([...ns].sort((a, b) => a - b));
    }
  });
});

describe("toJson()", () => {
  test("has exactly the issue's keys plus nodes, in order, rounded", () => {
    const json = toJson(figures());
    expect(Object.keys(json)).toEqual([...FIGURE_KEYS]);
    expect(Object.keys(json)).toEqual([
      "nodes",
      "startup_ms",
      "idle_rss_mb",
      "init_s",
      "csr_s",
      "rss_mb",
      "settled_rss_mb",
      "peak_anon_mb",
      "settled_anon_mb",
      "cpu_s",
      "talos_calls_per_node",
      "talos_calls_per_csr",
      "talos_calls_per_node_hour",
      "kube_requests_per_node",
    ]);
    expect(json).toMatchObject({
      startup_ms: 42,
      idle_rss_mb: 49.6,
      init_s: 11.27,
      rss_mb: 194.4,
      settled_rss_mb: 60,
      peak_anon_mb: 48.9,
      settled_anon_mb: 39.3,
      kube_requests_per_node: 3.02,
    });
  });

  test("keeps an unmeasured figure as null", () => {
    expect(toJson(figures({ csr_s: null })).csr_s).toBeNull();
  });
});

describe("formatTable()", () => {
  test("shows the header, every figure with value, budget and verdict, then the notes", () => {
    const text = formatTable(figures({ csr_s: null }), "header line", ["a note"]);
    const lines = text.split("\n");
    expect(lines[0]).toBe("header line");
    expect(lines[1]).toMatch(/^figure\s+value\s+budget\s+result$/);
    expect(text).toMatch(/^startup_ms\s+42\s+<= 150\s+PASS$/m);
    expect(text).toMatch(/^rss_mb\s+194\.4\s+<= 70\s+FAIL$/m);
    expect(text).toMatch(/^settled_rss_mb\s+60\.0\s+<= 65\s+PASS$/m);
    expect(text).toMatch(/^csr_s\s+n\/a\s+<= 10\s+N\/A$/m);
    expect(text).toMatch(/^cpu_s\s+15\.05\s+-\s+-$/m);
    expect(text).toMatch(/^peak_anon_mb\s+48\.9\s+-\s+-$/m);
    expect(text).toMatch(/^settled_anon_mb\s+39\.3\s+-\s+-$/m);
    expect(lines.at(-1)).toBe("  a note");
    expect(lines).toHaveLength(3 + FIGURE_KEYS.length - 1 + 1);
  });

  test("names the N a size-dependent budget applies to when it does not apply", () => {
    expect(formatTable(figures({ nodes: 5000 }), "h")).toMatch(
      /^init_s\s+11\.27\s+\(<= 15 at N <= 1000\)\s+-$/m,
    );
  });

  test("shows the size tier that applies, and the last one above it", () => {
    expect(formatTable(figures({ nodes: 5000 }), "h")).toMatch(/^rss_mb\s+194\.4\s+<= 114\s+FAIL$/m);
    expect(formatTable(figures({ nodes: 5001 }), "h")).toMatch(
      /^rss_mb\s+194\.4\s+\(<= 114 at N <= 5000\)\s+-$/m,
    );
    expect(formatTable(figures({ nodes: 5001 }), "h")).toMatch(
      /^settled_rss_mb\s+60\.0\s+\(<= 65 at N <= 1000\)\s+-$/m,
    );
  });
});

describe("slope()", () => {
  const at100 = figures({ nodes: 100, rss_mb: 60, settled_rss_mb: 55 });
  const at1000 = figures({ nodes: 1000, rss_mb: 70, settled_rss_mb: 68.5 });

  test("MiB per 1,000 nodes from the smaller N to the larger, either order", () => {
    expect(slope("peak", at100, at1000).value).toBeCloseTo(11.111, 3);
    expect(slope("peak", at1000, at100)).toMatchObject({ from: 100, to: 1000 });
    expect(slope("settled", at100, at1000).value).toBeCloseTo(15, 9);
  });

  test("PASS or FAIL against 13 MiB per 1,000 nodes between N = 100 and 1,000", () => {
    expect(SLOPE_BUDGETS).toMatchObject({ peak: 13, settled: 13 });
    expect(slope("peak", at100, at1000)).toMatchObject({ budget: 13, verdict: "PASS" });
    expect(slope("settled", at100, at1000).verdict).toBe("FAIL");
    const exact = figures({ nodes: 1000, rss_mb: 60 + 11.7 });
    expect(slope("peak", at100, exact).verdict).toBe("PASS");
    expect(slope("peak", at100, figures({ nodes: 1000, rss_mb: 71.72 })).verdict).toBe("FAIL");
  });

  test("a negative slope passes", () => {
    expect(slope("peak", at100, figures({ nodes: 1000, rss_mb: 50 }))).toMatchObject({
      verdict: "PASS",
    });
  });

  test("between other sizes it is reported only", () => {
    const a = figures({ nodes: 20, rss_mb: 60 });
    const b = figures({ nodes: 60, rss_mb: 62 });
    expect(slope("peak", a, b)).toMatchObject({ from: 20, to: 60, verdict: "-" });
    expect(slope("peak", a, b).value).toBeCloseTo(50, 9);
  });

  test("N/A when either run lacks the figure", () => {
    const s = slope("settled", figures({ nodes: 100, settled_rss_mb: null }), at1000);
    expect(s).toMatchObject({ value: null, verdict: "N/A" });
  });

  test("refuses two runs of the same size", () => {
    expect(() => slope("peak", at1000, at1000)).toThrow(/N = 1000/);
  });

  test("formatSlope() prints the slope, its budget and the verdict", () => {
    expect(formatSlope(slope("peak", at100, at1000))).toBe(
      "peak RSS slope N=100→1000: 11.11 MiB per 1,000 nodes (budget <= 13, PASS)",
    );
    expect(formatSlope(slope("settled", at100, at1000))).toBe(
      "settled RSS slope N=100→1000: 15.00 MiB per 1,000 nodes (budget <= 13, FAIL)",
    );
    expect(formatSlope(slope("peak", figures({ nodes: 20 }), figures({ nodes: 60 })))).toBe(
      "peak RSS slope N=20→60: 0.00 MiB per 1,000 nodes (budget <= 13 stated for N=100→1000, not applied)",
    );
    expect(formatSlope(slope("settled", figures({ nodes: 100, settled_rss_mb: null }), at1000))).toBe(
      "settled RSS slope N=100→1000: n/a MiB per 1,000 nodes (budget <= 13, N/A)",
    );
  });

  test("slopeJson(): both runs' figures, smaller N first, then the two slopes, rounded", () => {
    const json = slopeJson(at1000, at100);
    expect(Object.keys(json)).toEqual([
      "runs",
      "peak_slope_mb_per_1000",
      "settled_slope_mb_per_1000",
      "peak_anon_kib_per_node",
      "settled_anon_kib_per_node",
    ]);
    expect(json.runs).toEqual([toJson(at100), toJson(at1000)]);
    expect(json.runs.map((r) => Object.keys(r))).toEqual([[...FIGURE_KEYS], [...FIGURE_KEYS]]);
    expect(json.peak_slope_mb_per_1000).toBe(11.11);
    expect(json.settled_slope_mb_per_1000).toBe(15);
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });

  test("slopeJson() keeps an unmeasured slope as null", () => {
    const json = slopeJson({ ...at100, rss_mb: null }, at1000);
    expect(json.peak_slope_mb_per_1000).toBeNull();
    expect(json.settled_slope_mb_per_1000).toBe(15);
  });
});

describe("parseStatus() and parseStatCpu()", () => {
  test("read VmRSS, its anonymous and file-backed parts, and VmHWM in bytes", () => {
    const text = "Name:\tx\nVmHWM:\t  120 kB\nVmRSS:\t   100 kB\nRssAnon:\t 60 kB\nRssFile:\t 40 kB\n";
    expect(parseStatus(text)).toEqual({
      rssBytes: 100 * 1024,
      anonBytes: 60 * 1024,
      fileBytes: 40 * 1024,
      hwmBytes: 120 * 1024,
    });
    expect(parseStatus("VmRSS:\t 1 kB\n").fileBytes).toBeNaN();
  });

  test.skipIf(process.platform !== "linux")("RssSampler keeps the highest reading with its two parts", () => {
    const sampler = new RssSampler(process.pid, 60_000);
    sampler.stop();
    const { anonBytes, fileBytes } = sampler.maxSplit;
    expect(sampler.maxBytes).toBeGreaterThan(0);
    expect(anonBytes).toBeGreaterThan(0);
    expect(fileBytes).toBeGreaterThan(0);
    // VmRSS = RssAnon + RssFile + RssShmem, each rounded to a page.
    expect(anonBytes + fileBytes).toBeLessThanOrEqual(sampler.maxBytes);
    expect(anonBytes + fileBytes).toBeGreaterThan(sampler.maxBytes * 0.9);
  });

  test("count utime + stime after a command name with spaces and parentheses", () => {
    const fields = ["S", "1", "2", "3", "0", "-1", "4194304", "10", "0", "0", "0", "250", "150", "0", "0"];
    expect(parseStatCpu(`4242 (a (b) c) ${fields.join(" ")}`, 100)).toBe(4);
  });

  test("refuse a line that is not a stat line", () => {
    expect(() => parseStatCpu("garbage", 100)).toThrow(/Cannot parse/);
  });
});

describe("parseBenchArgs()", () => {
  test("parseBenchArgs() reads --memory-limit in MiB (a positive integer), unset by default", () => {
    expect(parseBenchArgs([]).memoryLimitMiB).toBeUndefined();
    expect(parseBenchArgs(["--memory-limit", "256"]).memoryLimitMiB).toBe(256);
    expect(parseBenchArgs(["--memory-limit=128"]).memoryLimitMiB).toBe(128);
    expect(() => parseBenchArgs(["--memory-limit=0"])).toThrow(
      /--memory-limit=0: expected a positive integer/,
    );
  });

  test("defaults", () => {
    expect(parseBenchArgs([])).toMatchObject({
      nodes: 100,
      sizes: [100],
      repeat: 1,
      json: false,
      build: true,
      qpsTuning: true,
      steadySeconds: 60,
      idleSeconds: 10,
      startupRuns: 5,
      talos: "fake",
    });
  });

  test("--talos apid, inline or as the next argument", () => {
    expect(parseBenchArgs(["--talos=apid"]).talos).toBe("apid");
    expect(parseBenchArgs(["--talos", "apid"]).talos).toBe("apid");
    expect(parseBenchArgs(["--talos", "fake"]).talos).toBe("fake");
  });

  test("values inline or as the next argument; repeatable CCM flags and environment", () => {
    const a = parseBenchArgs([
      "--nodes",
      "5000",
      "--json",
      "--no-build",
      "--steady-seconds=30",
      "--ccm-arg=--v=4",
      "--ccm-arg",
      "--concurrent-node-syncs=8",
      "--ccm-env=BUN_OPTIONS=--cpu-prof-md",
      "--no-qps-tuning",
    ]);
    expect(a).toMatchObject({ nodes: 5000, json: true, build: false, steadySeconds: 30, qpsTuning: false });
    expect(a.ccmArgs).toEqual(["--v=4", "--concurrent-node-syncs=8"]);
    expect(a.ccmEnv).toEqual({ BUN_OPTIONS: "--cpu-prof-md" });
  });

  test("--ccm-binary names the binary, inline or as the next argument, and implies --no-build", () => {
    const go = "/tmp/goccm/talos-cloud-controller-manager";
    for (const argv of [
      ["--ccm-binary", go],
      [`--ccm-binary=${go}`, "--nodes=10"],
    ]) {
      expect(parseBenchArgs(argv)).toMatchObject({ ccmBinary: go, build: false });
    }
  });

  test("--slope runs at N = 100 and 1,000; --slope-nodes sets the sizes and implies --slope", () => {
    expect(parseBenchArgs(["--slope", "--json"])).toMatchObject({
      sizes: [100, 1000],
      nodes: 100,
      json: true,
    });
    expect(parseBenchArgs(["--slope", "--slope-nodes", "20,60"])).toMatchObject({ sizes: [20, 60] });
    expect(parseBenchArgs(["--slope-nodes", "20,60", "--slope"])).toMatchObject({ sizes: [20, 60] });
    expect(parseBenchArgs(["--slope-nodes=100, 5000"])).toMatchObject({ sizes: [100, 5000] });
  });

  test("--nodes takes one size or an ascending list; --repeat K", () => {
    expect(parseBenchArgs(["--nodes", "5000"])).toMatchObject({ nodes: 5000, sizes: [5000], repeat: 1 });
    expect(parseBenchArgs(["--nodes", "1000,5000"])).toMatchObject({ nodes: 1000, sizes: [1000, 5000] });
    expect(parseBenchArgs(["--nodes=100, 1000,5000", "--repeat=3"])).toMatchObject({
      nodes: 100,
      sizes: [100, 1000, 5000],
      repeat: 3,
    });
    expect(parseBenchArgs(["--repeat", "3", "--ccm-binary", "/go/ccm", "--nodes", "20,40"])).toMatchObject({
      sizes: [20, 40],
      repeat: 3,
      ccmBinary: "/go/ccm",
      build: false,
    });
  });

  test("without --ccm-binary the bench builds ours", () => {
    expect(parseBenchArgs(["--nodes=10"])).toMatchObject({ ccmBinary: undefined, build: true });
  });

  test.each([
    [["--ccm-binary"], /value is required/],
    [["--ccm-binary="], /path is required/],
    [["--nodes=0"], /positive integer/],
    [["--nodes", "1.5"], /positive integer/],
    [["--nodes"], /value is required/],
    [["--nodes=1000,1000"], /must ascend/],
    [["--nodes=5000,1000"], /must ascend/],
    [["--nodes=1000,"], /positive integer or a list/],
    [["--nodes=1000,0"], /positive integer or a list/],
    [["--nodes=a"], /positive integer or a list/],
    [["--nodes=1000,5000", "--slope"], /Cannot combine --nodes with --slope/],
    [["--repeat=0"], /positive integer/],
    [["--repeat=1.5"], /positive integer/],
    [["--repeat"], /value is required/],
    [["--ccm-env=NOVALUE"], /NAME=VALUE/],
    [["--nodez=3"], /unknown flag/],
    [["--slope", "--nodes=100"], /Cannot combine --nodes with --slope/],
    [["--nodes=100", "--slope-nodes=20,60"], /Cannot combine --nodes with --slope/],
    [["--slope-nodes=100"], /two positive integers with A < B/],
    [["--slope-nodes=1000,100"], /A < B/],
    [["--slope-nodes=100,100"], /A < B/],
    [["--slope-nodes=0,100"], /A < B/],
    [["--slope-nodes=10,20,30"], /A < B/],
    [["--slope-nodes=a,b"], /A < B/],
    [["--slope-nodes"], /value is required/],
    [["--talos=real"], /expected fake or apid/],
    [["--talos"], /value is required/],
  ])("%j is refused", (argv, message) => {
    expect(() => parseBenchArgs(argv)).toThrow(message);
  });
});

describe("qpsTuning()", () => {
  test.each([
    [10, []],
    [100, []],
    [101, ["--kube-api-qps=21", "--kube-api-burst=42"]],
    [1000, ["--kube-api-qps=200", "--kube-api-burst=400"]],
    [5000, ["--kube-api-qps=1000", "--kube-api-burst=2000"]],
  ])("N = %i gets %j", (nodes, want) => {
    expect(qpsTuning({ nodes, qpsTuning: true, ccmArgs: [] })).toEqual(want);
  });

  test("is off with --no-qps-tuning or when a --ccm-arg sets the rate", () => {
    expect(qpsTuning({ nodes: 1000, qpsTuning: false, ccmArgs: [] })).toEqual([]);
    expect(qpsTuning({ nodes: 1000, qpsTuning: true, ccmArgs: ["--kube-api-burst=50"] })).toEqual([]);
    expect(qpsTuning({ nodes: 1000, qpsTuning: true, ccmArgs: ["--v=2"] })).toHaveLength(2);
  });
});

describe("LeaseReadiness", () => {
  const t = (s: number) => `2026-07-01T10:00:${String(s).padStart(2, "0")}.000000Z`;
  const lease = (holderIdentity: string, s: number) => ({ holderIdentity, renewTime: t(s) });
  const readings = (
    baseline: Parameters<typeof lease> | undefined,
    ...seen: (Parameters<typeof lease> | undefined)[]
  ) => {
    const r = new LeaseReadiness(baseline && lease(...baseline));
    return seen.map((x) => r.observe(x && lease(...x)));
  };

  test("no Lease before: ready once the new holder renewed, not at its first claim", () => {
    expect(readings(undefined, undefined, ["b_1", 5], ["b_1", 5], ["b_1", 7])).toEqual([
      false,
      false,
      false,
      true,
    ]);
  });

  test("a released Lease before (no holder): the same", () => {
    const r = new LeaseReadiness({ holderIdentity: "", renewTime: t(1) });
    expect([r.observe(lease("b_1", 3)), r.observe(lease("b_1", 5))]).toEqual([false, true]);
    expect(r.holder).toBe("b_1");
  });

  test("a dead predecessor's stale claim never counts, however often it is read", () => {
    expect(readings(["a_0", 1], ["a_0", 1], ["a_0", 1], ["a_0", 1])).toEqual([false, false, false]);
  });

  test("taking over a stale claim, then renewing, is ready", () => {
    expect(readings(["a_0", 1], ["a_0", 1], ["b_1", 20], ["b_1", 22])).toEqual([false, false, true]);
  });

  test("a holder reusing the predecessor's identity counts once its renew time moves on", () => {
    expect(readings(["host", 1], ["host", 1], ["host", 20], ["host", 22])).toEqual([false, false, true]);
  });

  test("a release or another holder in between starts over", () => {
    expect(
      readings(undefined, ["b_1", 3], undefined, ["b_1", 5], ["c_2", 7], ["c_2", 7], ["c_2", 9]),
    ).toEqual([false, false, false, false, false, true]);
  });

  test("a holder without a renew time is not leading", () => {
    const r = new LeaseReadiness(undefined);
    expect([r.observe({ holderIdentity: "b_1" }), r.observe({ holderIdentity: "b_1" })]).toEqual([
      false,
      false,
    ]);
    expect(r.holder).toBeUndefined();
  });
});

const apidFigures = (over: Partial<ApidFigures> = {}): ApidFigures => ({
  nodes: 1000,
  apid_idle: { rss: 22.34, anon: 4.06, file: 18.28 },
  apid_init: { rss: 128.06, anon: 109.5, file: 18.56 },
  apid_peak: { rss: 151.54, anon: 132.51, file: 19.03 },
  apid_settled: { rss: 150.01, anon: 131, file: 19.01 },
  apid_init_cpu_s: 6.824,
  apid_csr_cpu_s: 1.5,
  apid_steady_cpu_s: 0.004,
  ccm_steady_cpu_s: 0.31,
  total_rss_mb: 253.76,
  total_settled_rss_mb: 210.05,
  total_cpu_s: 21.875,
  total_steady_cpu_s: 0.314,
  ...over,
});

describe("apid's figures (--talos apid)", () => {
  test("apidJson(): exactly APID_FIGURE_KEYS, in order, each reading split in three, rounded", () => {
    const json = apidJson(apidFigures());
    expect(Object.keys(json)).toEqual([...APID_FIGURE_KEYS]);
    expect(json).toEqual({
      nodes: 1000,
      apid_idle_rss_mb: 22.3,
      apid_idle_anon_mb: 4.1,
      apid_idle_file_mb: 18.3,
      apid_init_rss_mb: 128.1,
      apid_init_anon_mb: 109.5,
      apid_init_file_mb: 18.6,
      apid_peak_rss_mb: 151.5,
      apid_peak_anon_mb: 132.5,
      apid_peak_file_mb: 19,
      apid_settled_rss_mb: 150,
      apid_settled_anon_mb: 131,
      apid_settled_file_mb: 19,
      apid_over_memory_max: "anon",
      apid_init_cpu_s: 6.82,
      apid_csr_cpu_s: 1.5,
      apid_steady_cpu_s: 0,
      ccm_steady_cpu_s: 0.31,
      total_rss_mb: 253.8,
      total_settled_rss_mb: 210.1,
      total_cpu_s: 21.88,
      total_steady_cpu_s: 0.31,
    });
  });

  test("apidJson() keeps unmeasured figures as null", () => {
    const json = apidJson(apidFigures({ apid_peak: null, total_cpu_s: null }));
    expect(json.apid_peak_rss_mb).toBeNull();
    expect(json.apid_peak_anon_mb).toBeNull();
    expect(json.apid_over_memory_max).toBeNull();
    expect(json.total_cpu_s).toBeNull();
    expect(json.apid_idle_rss_mb).toBe(22.3);
  });

  test("overMemoryMax(): anonymous over 128 MiB, only RSS over it, or within", () => {
    expect(overMemoryMax({ rss: 151.5, anon: 132.5, file: 19 })).toBe("anon");
    expect(overMemoryMax({ rss: 140, anon: 120, file: 20 })).toBe("rss");
    expect(overMemoryMax({ rss: 128, anon: 110, file: 18 })).toBe("no");
    expect(overMemoryMax(null)).toBeNull();
  });

  test("formatApidTable(): GOMEMLIMIT, every figure as total = anon + file or a number, the verdict", () => {
    const out = formatApidTable(apidFigures(), "107374180 (102.4 MiB)");
    const lines = out.split("\n");
    expect(lines[0]).toBe(
      "Talos' apid v1.13.5 in the path (GOMEMLIMIT=107374180 (102.4 MiB); on Talos: cgroup memory.max 128 MiB, no swap)",
    );
    expect(out).toMatch(/^apid_idle_rss_mb\s+22\.3 = 4\.1 \+ 18\.3 {2}machines seeded/m);
    expect(out).toMatch(/^apid_peak_rss_mb\s+151\.5 = 132\.5 \+ 19\.0 {2}peak/m);
    expect(out).toMatch(/^apid_init_cpu_s\s+6\.82 {2}initialization$/m);
    expect(out).toMatch(/^total_rss_mb\s+253\.8 {2}CCM \+ apid, highest sampled sum$/m);
    expect(out).toMatch(/^total_steady_cpu_s\s+0\.31 {2}CCM \+ apid, steady window$/m);
    expect(lines.at(-1)).toBe(
      "  apid's peak against memory.max 128 MiB: EXCEEDS: anonymous memory alone is over 128 MiB (no swap): a Talos node OOM-kills apid",
    );
    const within = formatApidTable(apidFigures({ apid_peak: { rss: 60, anon: 40, file: 20 } }), "unset");
    expect(within.split("\n").at(-1)).toBe("  apid's peak against memory.max 128 MiB: within");
    const unmeasured = formatApidTable(apidFigures({ apid_settled: null, apid_csr_cpu_s: null }), "unset");
    expect(unmeasured).toMatch(/^apid_settled_rss_mb\s+n\/a {2}end/m);
    expect(unmeasured).toMatch(/^apid_csr_cpu_s\s+n\/a {2}CSR approval$/m);
  });
});

describe("Talos calls from the simulator (--talos apid)", () => {
  test("diffCalls(): what each method gained since the snapshot, methods without calls left out", () => {
    const before = { "/cosi.resource.State/Get": 5, "/cosi.resource.State/Watch": 2 };
    const after = {
      "/cosi.resource.State/Get": 9,
      "/cosi.resource.State/Watch": 2,
      "/machine.MachineService/Version": 1,
    };
    expect(diffCalls(before, after)).toEqual({
      "/cosi.resource.State/Get": 4,
      "/machine.MachineService/Version": 1,
    });
    expect(diffCalls({}, {})).toEqual({});
  });

  test("shortMethod() and formatMethodCounts(): the service's last name, most calls first, then by name", () => {
    expect(shortMethod("/cosi.resource.State/Watch")).toBe("State/Watch");
    expect(shortMethod("/machine.MachineService/Version")).toBe("MachineService/Version");
    expect(
      formatMethodCounts({
        "/cosi.resource.State/Get": 100,
        "/cosi.resource.State/Watch": 200,
        "/machine.MachineService/Version": 100,
        "/cosi.resource.State/List": 0,
      }),
    ).toBe("State/Watch 200, State/Get 100, MachineService/Version 100");
    expect(formatMethodCounts({})).toBe("none");
  });
});

describe("SumRssSampler", () => {
  test("keeps the highest sum of the processes' RSS; a process gone leaves the readings so far", () => {
    const own = parseStatus(readFileSync("/proc/self/status", "utf8")).rssBytes;
    const s = new SumRssSampler([process.pid, process.pid], 60_000);
    s.stop();
    expect(s.maxBytes).toBeGreaterThan(1.5 * own);
    const gone = new SumRssSampler([process.pid, 2 ** 22 + 1], 60_000);
    gone.stop();
    expect(gone.maxBytes).toBe(0);
  });
});
