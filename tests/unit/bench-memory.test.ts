// The bench's anonymous-memory figures and repeated runs (issue 29), pure parts: the sampler's
// highest anonymous reading tracked apart from the highest total, the anonymous slope in KiB per node
// and its verdict only between N = 1,000 and 5,000, medians of repeated runs and their table, the
// slope lines with each round's value, and the JSON of a run over several sizes.

import { describe, expect, test } from "bun:test";
import { cpuByGroup, formatCpuUse, RssPeaks } from "../support/bench-proc.ts";
import {
  ANON_SLOPE_NODES,
  type BenchFigures,
  FIGURE_KEYS,
  formatMedianTable,
  formatSlope,
  formatSlopes,
  median,
  medianFigures,
  multiJson,
  SLOPE_BUDGETS,
  slope,
  slopeJson,
  toJson,
} from "../support/bench-report.ts";

const MiB = 1024 * 1024;

const figures = (over: Partial<BenchFigures> = {}): BenchFigures => ({
  nodes: 1000,
  startup_ms: 138,
  idle_rss_mb: 31.7,
  init_s: 11.7,
  csr_s: 7.97,
  rss_mb: 102.2,
  settled_rss_mb: 62.2,
  peak_anon_mb: 48.9,
  settled_anon_mb: 39.3,
  cpu_s: 6.86,
  talos_calls_per_node: 3,
  talos_calls_per_csr: 0,
  talos_calls_per_node_hour: 0,
  kube_requests_per_node: 3.02,
  ...over,
});

describe("RssPeaks: the highest anonymous memory, apart from the highest total", () => {
  const reading = (anonMiB: number, fileMiB: number) => ({
    rssBytes: (anonMiB + fileMiB) * MiB,
    anonBytes: anonMiB * MiB,
    fileBytes: fileMiB * MiB,
  });

  test("the anonymous peak need not be in the reading with the highest total", () => {
    const p = new RssPeaks();
    // The burst: code pages mapped (file-backed high), heap growing; then a trim drops the file part
    // while the heap is still at its highest.
    for (const r of [reading(20, 50), reading(40, 60), reading(45, 52), reading(50, 24), reading(38, 24)])
      p.add(r);
    expect(p.maxBytes).toBe(100 * MiB);
    expect(p.maxSplit).toEqual({ anonBytes: 40 * MiB, fileBytes: 60 * MiB });
    expect(p.maxAnonBytes).toBe(50 * MiB);
    expect(p.lastBytes).toBe(62 * MiB);
  });

  test("when the highest total is also the highest anonymous reading, both agree", () => {
    const p = new RssPeaks();
    for (const r of [reading(10, 20), reading(30, 25), reading(12, 20)]) p.add(r);
    expect(p.maxAnonBytes).toBe(p.maxSplit.anonBytes);
    expect(p.maxAnonBytes).toBe(30 * MiB);
  });

  test("no readings: nothing measured; a reading without RssAnon leaves the anonymous peak alone", () => {
    const p = new RssPeaks();
    expect([p.maxBytes, p.maxAnonBytes, p.lastBytes]).toEqual([0, 0, 0]);
    expect(p.maxSplit.anonBytes).toBeNaN();
    p.add(reading(5, 5));
    p.add({ rssBytes: 50 * MiB, anonBytes: Number.NaN, fileBytes: Number.NaN });
    expect(p.maxAnonBytes).toBe(5 * MiB);
    expect(p.maxBytes).toBe(50 * MiB);
  });
});

describe("the anonymous memory per node (issue 29: <= 10 KB, N = 1,000 → 5,000)", () => {
  // README's medians at 9c6d54c: anonymous 48.9 / 39.3 MiB at N = 1,000, 141.5 / 103.1 at 5,000.
  const at1000 = figures();
  const at5000 = figures({ nodes: 5000, peak_anon_mb: 141.5, settled_anon_mb: 103.1 });

  test("KiB per node = MiB difference × 1024 / node difference, either order", () => {
    expect(slope("settled_anon", at1000, at5000).value).toBeCloseTo((63.8 * 1024) / 4000, 9);
    expect(slope("peak_anon", at5000, at1000)).toMatchObject({ from: 1000, to: 5000 });
    expect(slope("peak_anon", at1000, at5000).value).toBeCloseTo((92.6 * 1024) / 4000, 9);
  });

  test("budget 10, PASS or FAIL between N = 1,000 and 5,000 only, judged as printed", () => {
    expect(ANON_SLOPE_NODES).toEqual([1000, 5000]);
    expect(SLOPE_BUDGETS).toMatchObject({ peak_anon: 10, settled_anon: 10 });
    expect(slope("settled_anon", at1000, at5000)).toMatchObject({ budget: 10, verdict: "FAIL" });
    // 39.0625 MiB over 4,000 nodes is exactly 10 KiB per node.
    const exact = figures({ nodes: 5000, settled_anon_mb: 39.3 + 39.0625 });
    expect(slope("settled_anon", at1000, exact).verdict).toBe("PASS");
    const over = figures({ nodes: 5000, settled_anon_mb: 39.3 + 39.0625 + 0.03 });
    expect(slope("settled_anon", at1000, over).verdict).toBe("FAIL");
    const at100 = figures({ nodes: 100, settled_anon_mb: 39.3 });
    expect(slope("settled_anon", at100, at1000).verdict).toBe("-");
    expect(slope("settled_anon", figures({ nodes: 20 }), figures({ nodes: 40 })).verdict).toBe("-");
  });

  test("N/A when either run lacks the figure", () => {
    expect(slope("peak_anon", figures({ peak_anon_mb: null }), at5000)).toMatchObject({
      value: null,
      verdict: "N/A",
    });
  });

  test("formatSlope(): what, sizes, KiB, the budget and its verdict", () => {
    expect(formatSlope(slope("settled_anon", at1000, at5000))).toBe(
      "settled anonymous memory per node N=1000→5000: 16.33 KiB (budget <= 10, FAIL)",
    );
    expect(formatSlope(slope("peak_anon", at1000, at5000))).toBe(
      "peak anonymous memory per node N=1000→5000: 23.71 KiB (budget <= 10, FAIL)",
    );
    const small = slope(
      "peak_anon",
      figures({ nodes: 20, peak_anon_mb: 10 }),
      figures({ nodes: 40, peak_anon_mb: 10.5 }),
    );
    expect(formatSlope(small)).toBe(
      "peak anonymous memory per node N=20→40: 25.60 KiB (budget <= 10 stated for N=1000→5000, not applied)",
    );
  });

  test("formatSlope() with each round's slope: of the medians, then every round's value", () => {
    const rounds = [
      slope("settled_anon", at1000, figures({ nodes: 5000, settled_anon_mb: 80 })),
      slope("settled_anon", at1000, at5000),
      slope("settled_anon", figures({ settled_anon_mb: null }), at5000),
    ];
    expect(formatSlope(slope("settled_anon", at1000, at5000), rounds)).toBe(
      "settled anonymous memory per node N=1000→5000, of the medians: 16.33 KiB (budget <= 10, FAIL); runs: 10.42, 16.33, n/a",
    );
  });

  test("slopeJson() adds the two anonymous slopes in KiB per node, rounded", () => {
    const json = slopeJson(at5000, at1000);
    expect(json.peak_anon_kib_per_node).toBe(23.71);
    expect(json.settled_anon_kib_per_node).toBe(16.33);
    expect(slopeJson({ ...at1000, settled_anon_mb: null }, at5000).settled_anon_kib_per_node).toBeNull();
  });
});

describe("median() and medianFigures()", () => {
  test.each([
    [[3], 3],
    [[3, 1, 2], 2],
    [[4, 1, 3, 2], 2.5],
    [[10, 10, 1], 10],
  ])("median(%j) = %p", (xs, want) => {
    expect(median(xs)).toBe(want);
  });

  test("median of nothing is NaN", () => {
    expect(median([])).toBeNaN();
  });

  test("each figure's median over the runs that measured it; null when none did", () => {
    const runs = [
      figures({
        settled_anon_mb: 39.3,
        peak_anon_mb: 48.9,
        init_s: 12.05,
        csr_s: null,
        talos_calls_per_node_hour: null,
      }),
      figures({
        settled_anon_mb: 40.1,
        peak_anon_mb: 43.0,
        init_s: 10.88,
        csr_s: 8,
        talos_calls_per_node_hour: null,
      }),
      figures({
        settled_anon_mb: 38.0,
        peak_anon_mb: 49.9,
        init_s: 11.7,
        csr_s: 9,
        talos_calls_per_node_hour: null,
      }),
    ];
    const m = medianFigures(runs);
    expect(Object.keys(m).sort()).toEqual([...FIGURE_KEYS].sort());
    expect(m).toMatchObject({
      nodes: 1000,
      settled_anon_mb: 39.3,
      peak_anon_mb: 48.9,
      init_s: 11.7,
      csr_s: 8.5,
      talos_calls_per_node_hour: null,
    });
  });

  test("refuses no runs, and runs of different sizes", () => {
    expect(() => medianFigures([])).toThrow(/no runs/);
    expect(() => medianFigures([figures(), figures({ nodes: 5000 })])).toThrow(/1000, 5000/);
  });
});

describe("formatMedianTable()", () => {
  test("the header, then each figure's median, budget and verdict of the median, then every run's value", () => {
    const runs = [
      figures({ rss_mb: 95.0 }),
      figures({ rss_mb: 103.2, csr_s: null }),
      figures({ rss_mb: 60 }),
    ];
    const out = formatMedianTable(runs, "medians of 3 runs: header");
    const lines = out.split("\n");
    expect(lines[0]).toBe("medians of 3 runs: header");
    expect(lines[1]).toMatch(/^figure\s+median\s+budget\s+result\s+runs$/);
    expect(lines[2]).toMatch(/^-+( {2}-+){4}$/);
    expect(out).toMatch(/^rss_mb\s+95\.0\s+<= 70\s+FAIL\s+95\.0, 103\.2, 60\.0$/m);
    expect(out).toMatch(/^csr_s\s+7\.97\s+<= 10\s+PASS\s+7\.97, n\/a, 7\.97$/m);
    expect(out).toMatch(/^settled_anon_mb\s+39\.3\s+-\s+-\s+39\.3, 39\.3, 39\.3$/m);
    expect(lines).toHaveLength(3 + FIGURE_KEYS.length - 1);
  });
});

describe("multiJson(): a run over several sizes, repeated or not", () => {
  const a = [figures({ nodes: 1000, settled_anon_mb: 39 }), figures({ nodes: 1000, settled_anon_mb: 41 })];
  const b = [figures({ nodes: 5000, settled_anon_mb: 80 }), figures({ nodes: 5000, settled_anon_mb: 78 })];

  test("once each: the runs, one slope entry, and its keys at the top as --slope has them", () => {
    const json = multiJson([[a[0] as BenchFigures], [b[0] as BenchFigures]]);
    expect(Object.keys(json)).toEqual([
      "runs",
      "slopes",
      "peak_slope_mb_per_1000",
      "settled_slope_mb_per_1000",
      "peak_anon_kib_per_node",
      "settled_anon_kib_per_node",
    ]);
    expect(json.runs).toEqual([toJson(a[0] as BenchFigures), toJson(b[0] as BenchFigures)]);
    expect(json.slopes).toEqual([
      {
        from: 1000,
        to: 5000,
        peak_slope_mb_per_1000: 0,
        settled_slope_mb_per_1000: 0,
        peak_anon_kib_per_node: 0,
        settled_anon_kib_per_node: 10.5,
      },
    ]);
    expect(json).toMatchObject({ settled_anon_kib_per_node: 10.5 });
  });

  test("repeated: runs round by round, each size's medians, slopes of the medians", () => {
    const json = multiJson([a, b]);
    expect(json.runs.map((r) => [r.nodes, r.settled_anon_mb])).toEqual([
      [1000, 39],
      [5000, 80],
      [1000, 41],
      [5000, 78],
    ]);
    expect(json).toMatchObject({ repeat: 2 });
    expect(json.medians?.map((m) => [m.nodes, m.settled_anon_mb])).toEqual([
      [1000, 40],
      [5000, 79],
    ]);
    // (79 - 40) × 1024 / 4000
    expect(json.slopes[0]?.settled_anon_kib_per_node).toBe(9.98);
  });

  test("three sizes: a slope between each consecutive pair, no keys at the top", () => {
    const json = multiJson([[figures({ nodes: 100 })], [a[0] as BenchFigures], [b[0] as BenchFigures]]);
    expect(json.slopes.map((s) => [s.from, s.to])).toEqual([
      [100, 1000],
      [1000, 5000],
    ]);
    expect("settled_anon_kib_per_node" in json).toBe(false);
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });
});

describe("formatSlopes(): the slope lines of a run over several sizes", () => {
  test("once each (--slope, --nodes A,B): the four slopes, as before for RSS, then anonymous", () => {
    const lines = formatSlopes([
      [figures({ nodes: 100, rss_mb: 60, settled_rss_mb: 55, peak_anon_mb: 18, settled_anon_mb: 17 })],
      [figures({ nodes: 1000, rss_mb: 70, settled_rss_mb: 68.5, peak_anon_mb: 40, settled_anon_mb: 30 })],
    ]);
    expect(lines).toEqual([
      "peak RSS slope N=100→1000: 11.11 MiB per 1,000 nodes (budget <= 13, PASS)",
      "settled RSS slope N=100→1000: 15.00 MiB per 1,000 nodes (budget <= 13, FAIL)",
      "peak anonymous memory per node N=100→1000: 25.03 KiB (budget <= 10 stated for N=1000→5000, not applied)",
      "settled anonymous memory per node N=100→1000: 14.79 KiB (budget <= 10 stated for N=1000→5000, not applied)",
    ]);
  });

  test("repeated, three sizes: each consecutive pair, of the medians, each round's after", () => {
    const at = (nodes: number, anon: number) => figures({ nodes, settled_anon_mb: anon });
    const lines = formatSlopes([
      [at(100, 17), at(100, 18), at(100, 17.5)],
      [at(1000, 30), at(1000, 31), at(1000, 29)],
      [at(5000, 70), at(5000, 68), at(5000, 75)],
    ]);
    expect(lines).toHaveLength(8);
    expect(lines[3]).toBe(
      "settled anonymous memory per node N=100→1000, of the medians: 14.22 KiB (budget <= 10 stated for N=1000→5000, not applied); runs: 14.79, 14.79, 13.08",
    );
    // Medians 30 and 70: 40 MiB × 1024 / 4,000 = 10.24.
    expect(lines[7]).toBe(
      "settled anonymous memory per node N=1000→5000, of the medians: 10.24 KiB (budget <= 10, FAIL); runs: 10.24, 9.47, 11.78",
    );
  });

  test("one size: no slopes", () => {
    expect(formatSlopes([[figures(), figures()]])).toEqual([]);
  });
});

describe("cpuByGroup() and formatCpuUse(): who used the bed's cores in a phase", () => {
  test("each group's difference, largest first; a process that is gone counts 0", () => {
    const before = { CCM: 1, "API server + etcd": 10, machines: 0.5 };
    const after = { CCM: 4.46, "API server + etcd": 14.1, machines: 0.5 };
    expect(formatCpuUse(before, after)).toBe("API server + etcd 4.10 s, CCM 3.46 s, machines 0.00 s");
    const now = cpuByGroup({ self: [process.pid], gone: [2 ** 22 + 1] });
    expect(now.gone).toBe(0);
    expect(now.self).toBeGreaterThan(0);
  });
});
