// The benchmark's figures, budgets and output (pure): the JSON object `npm run bench -- --json`
// prints (the keys plus `nodes`, `settled_rss_mb` and the anonymous peak and settled memory,
// in FIGURE_KEYS order), the table that shows each figure against its budget with PASS or FAIL, the
// medians of repeated runs (`--repeat`), and the per-node slopes of memory between two sizes (`--slope`,
// `--nodes A,B`). Budgets are the issue's, for a 2-core machine. A figure's budget is a list of
// size tiers: the smallest tier whose upToNodes >= N applies (a smaller cluster must not do worse),
// and above the last tier the figure is only reported.

/** One run's measurements; `null` for a figure that could not be measured (see the run's notes). */
export interface BenchFigures {
  nodes: number;
  /** exec to /healthz 200, median of the starts. */
  startup_ms: number | null;
  /** VmRSS with the default controllers and no nodes, after the idle wait. */
  idle_rss_mb: number | null;
  /** Kubelets registering at once → every Node without the uninitialized taint. */
  init_s: number | null;
  /** N kubelet-serving CSRs submitted → all approved. */
  csr_s: number | null;
  /** VmHWM of the CCM at the end of the run (during and after the N nodes). */
  rss_mb: number | null;
  /** VmRSS of the CCM at the end of the run: after initialization, the CSRs and the steady window. */
  settled_rss_mb: number | null;
  /**
   * The CCM's highest anonymous memory (RssAnon: heap, JIT code, allocator) over the N-node phases
   * and the steady window: the highest 250 ms sample or the end reading, whichever is higher.
   */
  peak_anon_mb: number | null;
  /** RssAnon of the CCM at the end of the steady window (the anonymous part of settled_rss_mb). */
  settled_anon_mb: number | null;
  /** utime+stime of the CCM over the N-node phases (initialization and CSRs). */
  cpu_s: number | null;
  /** Talos API calls during initialization, per node, counted where the machines receive them. */
  talos_calls_per_node: number | null;
  /** Talos API calls while the N CSRs are decided, per CSR (issue 43: none while the watches are healthy). */
  talos_calls_per_csr: number | null;
  /** Talos API calls in the steady-state window, scaled to per node per hour. */
  talos_calls_per_node_hour: number | null;
  /** Requests of the CCM's user over the N-node phases, per node, from the API server's audit log. */
  kube_requests_per_node: number | null;
}

/**
 * The keys of {@link BenchFigures}, the JSON object's keys in its order: `nodes` first, then the
 * issue's figures in the order, with `settled_rss_mb` (issue 15) after the peak `rss_mb`, and
 * the anonymous parts of both (issue 29) after them.
 */
export const FIGURE_KEYS = [
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
] as const satisfies ReadonlyArray<keyof BenchFigures>;

export type Figure = Exclude<(typeof FIGURE_KEYS)[number], "nodes">;

/** One size tier of a budget: `max` applies at every N up to `upToNodes`. */
export interface BudgetTier {
  max: number;
  upToNodes: number;
}

const ANY_N = Number.POSITIVE_INFINITY;

/**
 * The budgets on a 2-core machine, each a list of size tiers in ascending `upToNodes`.
 * Memory (issue 15): peak RSS <= 0.8x the Go CCM's (70 MiB at N = 1,000, 114 MiB at N = 5,000),
 * RSS settled after initialization <= 65 MiB at N = 1,000, idle RSS <= 48 MiB.
 */
export const BUDGETS: Readonly<Partial<Record<Figure, readonly BudgetTier[]>>> = {
  startup_ms: [{ max: 150, upToNodes: ANY_N }],
  idle_rss_mb: [{ max: 48, upToNodes: ANY_N }],
  init_s: [{ max: 15, upToNodes: 1000 }],
  csr_s: [{ max: 10, upToNodes: 1000 }],
  rss_mb: [
    { max: 70, upToNodes: 1000 },
    { max: 114, upToNodes: 5000 },
  ],
  settled_rss_mb: [{ max: 65, upToNodes: 1000 }],
  // cloud-node's three (Nodename, PlatformMetadata, the AddressStatus watch), and with node-csr-approval
  // beside it (the shipped DaemonSet's controllers) LinkStatuses and NodeIPConfig, read once per boot
  // so that its CSRs cost none (issue 43).
  talos_calls_per_node: [{ max: 5, upToNodes: ANY_N }],
  talos_calls_per_csr: [{ max: 0, upToNodes: ANY_N }],
  talos_calls_per_node_hour: [{ max: 1, upToNodes: ANY_N }],
};

/** The tier of `figure`'s budget that applies at `nodes`: the smallest with upToNodes >= nodes. */
export function budgetAt(figure: Figure, nodes: number): BudgetTier | undefined {
  return BUDGETS[figure]?.find((t) => nodes <= t.upToNodes);
}

const DECIMALS: Record<Figure, number> = {
  startup_ms: 0,
  idle_rss_mb: 1,
  init_s: 2,
  csr_s: 2,
  rss_mb: 1,
  settled_rss_mb: 1,
  peak_anon_mb: 1,
  settled_anon_mb: 1,
  cpu_s: 2,
  talos_calls_per_node: 2,
  talos_calls_per_csr: 2,
  talos_calls_per_node_hour: 2,
  kube_requests_per_node: 2,
};

/** PASS/FAIL against a budget; "-" where no budget applies at this N; "N/A" when not measured. */
export type Verdict = "PASS" | "FAIL" | "-" | "N/A";

/** One row of the table. */
export interface Row {
  figure: Figure;
  value: number | null;
  budget: string;
  verdict: Verdict;
}

/** Each figure with its budget and verdict at `figures.nodes`. */
export function evaluate(figures: BenchFigures): Row[] {
  return FIGURE_KEYS.filter((k): k is Figure => k !== "nodes").map((figure) => {
    const value = figures[figure];
    const tier = budgetAt(figure, figures.nodes);
    const last = BUDGETS[figure]?.at(-1);
    let budget = "-";
    if (tier) budget = `<= ${tier.max}`;
    else if (last) budget = `(<= ${last.max} at N <= ${last.upToNodes})`;
    let verdict: Verdict = "-";
    if (value === null) verdict = "N/A";
    else if (tier) verdict = value <= tier.max ? "PASS" : "FAIL";
    return { figure, value, budget, verdict };
  });
}

/** The figures rounded for output, keys in FIGURE_KEYS order. */
export function toJson(figures: BenchFigures): Record<(typeof FIGURE_KEYS)[number], number | null> {
  const out = {} as Record<(typeof FIGURE_KEYS)[number], number | null>;
  for (const k of FIGURE_KEYS) {
    const v = figures[k];
    out[k] = v === null || k === "nodes" ? v : round(v, DECIMALS[k]);
  }
  return out;
}

function round(v: number, decimals: number): number {
  const f = 10 ** decimals;
  return Math.round(v * f) / f;
}

/** Rows of cells as aligned columns; column 1 (the value) is right-aligned, the others left. */
function columns(all: readonly string[][]): string[] {
  const n = Math.max(...all.map((r) => r.length));
  const widths = Array.from({ length: n }, (_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => (i === 1 ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number)))
      .join("  ")
      .trimEnd();
  const rule = widths.map((w) => "-".repeat(w)).join("  ");
  const [head, ...rows] = all.map(line);
  return [head as string, rule, ...rows];
}

/**
 * The human-readable report: a header line, one row per figure (value, budget, verdict) and notes.
 * @param header says what was run (N, machine, the kube-api-qps choice).
 * @param notes explain figures (breakdowns, what could not be measured and why).
 */
export function formatTable(figures: BenchFigures, header: string, notes: readonly string[] = []): string {
  const rows = evaluate(figures).map((r) => [r.figure, formatValue(r.figure, r.value), r.budget, r.verdict]);
  return [
    header,
    ...columns([["figure", "value", "budget", "result"], ...rows]),
    ...notes.map((n) => `  ${n}`),
  ].join("\n");
}

function formatValue(figure: Figure, v: number | null): string {
  return v === null ? "n/a" : v.toFixed(DECIMALS[figure]);
}

/** Figures over budget, by name. */
export function failures(figures: BenchFigures): Figure[] {
  return evaluate(figures)
    .filter((r) => r.verdict === "FAIL")
    .map((r) => r.figure);
}

// ---------------------------------------------------------------------------------------------
// Repeated runs (`--repeat K`): the median of each figure over the runs of one size.

/** The median of `xs` (the mean of the middle two for an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  if (s.length === 0) return Number.NaN;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/**
 * Each figure's median over runs of one size, over the runs that measured it (null when none did).
 * @throws {Error} when there are no runs or their sizes differ.
 */
export function medianFigures(runs: readonly BenchFigures[]): BenchFigures {
  const nodes = runs[0]?.nodes;
  if (nodes === undefined) throw new Error("Cannot take medians of no runs");
  if (runs.some((r) => r.nodes !== nodes))
    throw new Error(
      `Cannot take medians over runs of different sizes: ${runs.map((r) => r.nodes).join(", ")}`,
    );
  const out = { nodes } as BenchFigures;
  for (const k of FIGURE_KEYS) {
    if (k === "nodes") continue;
    const xs = runs.flatMap((r) => (r[k] === null ? [] : [r[k] as number]));
    out[k] = xs.length === 0 ? null : median(xs);
  }
  return out;
}

/**
 * The table of K runs of one size: each figure's median against its budget (the verdict is the
 * median's), then every run's value in run order, so the spread shows.
 */
export function formatMedianTable(runs: readonly BenchFigures[], header: string): string {
  const med = medianFigures(runs);
  const rows = evaluate(med).map((r) => [
    r.figure,
    formatValue(r.figure, r.value),
    r.budget,
    r.verdict,
    runs.map((f) => formatValue(r.figure, f[r.figure])).join(", "),
  ]);
  return [header, ...columns([["figure", "median", "budget", "result", "runs"], ...rows])].join("\n");
}

// ---------------------------------------------------------------------------------------------
// The per-node slope of memory between two sizes (`npm run bench -- --slope`, `--nodes A,B`).

/** The sizes the issue states the RSS slope for: MiB per 1,000 nodes from N = 100 to N = 1,000. */
export const SLOPE_NODES: readonly [number, number] = [100, 1000];

/** The sizes issue 29 states the anonymous memory per node for: N = 1,000 to 5,000. */
export const ANON_SLOPE_NODES: readonly [number, number] = [1000, 5000];

/**
 * Slope budgets: peak and settled RSS in MiB per 1,000 nodes between N = 100 and 1,000 (issue 15:
 * ~13 KB per node above idle); anonymous memory (RssAnon) at the peak and settled in KiB per node
 * between N = 1,000 and 5,000 (issue 29: <= 10 KB per node, read as KiB as the bench reads MB as MiB).
 */
export const SLOPE_BUDGETS = { peak: 13, settled: 13, peak_anon: 10, settled_anon: 10 } as const;

/** Which memory figure a slope is taken over. */
export type SlopeKind = keyof typeof SLOPE_BUDGETS;

/** The slopes a multi-size run reports, in order. */
export const SLOPE_KINDS: readonly SlopeKind[] = ["peak", "settled", "peak_anon", "settled_anon"];

interface SlopeSpec {
  figure: "rss_mb" | "settled_rss_mb" | "peak_anon_mb" | "settled_anon_mb";
  /** From MiB per node to the slope's unit. */
  scale: number;
  unit: string;
  stated: readonly [number, number];
}

const SLOPE_SPECS: Record<SlopeKind, SlopeSpec> = {
  peak: { figure: "rss_mb", scale: 1000, unit: "MiB per 1,000 nodes", stated: SLOPE_NODES },
  settled: { figure: "settled_rss_mb", scale: 1000, unit: "MiB per 1,000 nodes", stated: SLOPE_NODES },
  peak_anon: { figure: "peak_anon_mb", scale: 1024, unit: "KiB", stated: ANON_SLOPE_NODES },
  settled_anon: { figure: "settled_anon_mb", scale: 1024, unit: "KiB", stated: ANON_SLOPE_NODES },
};

/** A slope with its budget and verdict. */
export interface Slope {
  kind: SlopeKind;
  from: number;
  to: number;
  /** In the kind's unit (MiB per 1,000 nodes for RSS, KiB per node for anonymous memory); null when either run lacks the figure. */
  value: number | null;
  budget: number;
  /** PASS/FAIL between the kind's stated sizes; "-" between others; "N/A" unmeasured. */
  verdict: Verdict;
}

/**
 * `kind`'s memory figure per node (in its unit) from the smaller run to the larger.
 * @throws {Error} when the runs do not have two different sizes.
 */
export function slope(kind: SlopeKind, a: BenchFigures, b: BenchFigures): Slope {
  const [lo, hi] = a.nodes <= b.nodes ? [a, b] : [b, a];
  if (lo.nodes === hi.nodes) throw new Error(`Cannot take a slope between two runs of N = ${lo.nodes}`);
  const spec = SLOPE_SPECS[kind];
  const [y0, y1] = [lo[spec.figure], hi[spec.figure]];
  const value = y0 === null || y1 === null ? null : ((y1 - y0) / (hi.nodes - lo.nodes)) * spec.scale;
  const budget = SLOPE_BUDGETS[kind];
  const stated = lo.nodes === spec.stated[0] && hi.nodes === spec.stated[1];
  let verdict: Verdict = "-";
  if (value === null) verdict = "N/A";
  // Judged as printed (two decimals): a slope shown as 13.00 against <= 13 passes.
  else if (stated) verdict = round(value, 2) <= budget ? "PASS" : "FAIL";
  return { kind, from: lo.nodes, to: hi.nodes, value, budget, verdict };
}

/**
 * One line per slope, e.g. `peak RSS slope N=100→1000: 9.81 MiB per 1,000 nodes (budget <= 13, PASS)`
 * or `settled anonymous memory per node N=1000→5000: 9.12 KiB (budget <= 10, PASS)`.
 * @param runs the same slope in each round of a repeated run, shown after it so the spread shows.
 */
export function formatSlope(s: Slope, runs?: readonly Slope[]): string {
  const spec = SLOPE_SPECS[s.kind];
  const two = (v: number | null) => (v === null ? "n/a" : v.toFixed(2));
  const budget =
    s.verdict === "-"
      ? `budget <= ${s.budget} stated for N=${spec.stated[0]}→${spec.stated[1]}, not applied`
      : `budget <= ${s.budget}, ${s.verdict}`;
  const anon = s.kind === "peak_anon" || s.kind === "settled_anon";
  const what = anon
    ? `${s.kind === "peak_anon" ? "peak" : "settled"} anonymous memory per node`
    : `${s.kind} RSS slope`;
  const each = runs ? `; runs: ${runs.map((r) => two(r.value)).join(", ")}` : "";
  const of = runs ? ", of the medians" : "";
  return `${what} N=${s.from}→${s.to}${of}: ${two(s.value)} ${spec.unit} (${budget})${each}`;
}

/**
 * The slope lines of a run over several sizes: between each pair of consecutive sizes, every kind
 * (SLOPE_KINDS); of the medians, with each round's slope after it when the sizes ran more than once.
 * @param runs each size's runs, ascending N, the same number of runs (rounds) each.
 */
export function formatSlopes(runs: readonly (readonly BenchFigures[])[]): string[] {
  const meds = runs.map(medianFigures);
  const lines: string[] = [];
  for (let i = 1; i < meds.length; i++) {
    const [a, b] = [runs[i - 1] as BenchFigures[], runs[i] as BenchFigures[]];
    for (const kind of SLOPE_KINDS) {
      const s = slope(kind, meds[i - 1] as BenchFigures, meds[i] as BenchFigures);
      const rounds = b.length > 1 ? a.map((f, r) => slope(kind, f, b[r] as BenchFigures)) : undefined;
      lines.push(formatSlope(s, rounds));
    }
  }
  return lines;
}

/** The JSON keys of the slopes, in SLOPE_KINDS order. */
const SLOPE_JSON_KEYS = {
  peak: "peak_slope_mb_per_1000",
  settled: "settled_slope_mb_per_1000",
  peak_anon: "peak_anon_kib_per_node",
  settled_anon: "settled_anon_kib_per_node",
} as const satisfies Record<SlopeKind, string>;

type SlopeKey = (typeof SLOPE_JSON_KEYS)[SlopeKind];

/** The four slopes between two runs, rounded, keyed as in `--json`. */
export function slopeValues(a: BenchFigures, b: BenchFigures): Record<SlopeKey, number | null> {
  const out = {} as Record<SlopeKey, number | null>;
  for (const kind of SLOPE_KINDS) {
    const v = slope(kind, a, b).value;
    out[SLOPE_JSON_KEYS[kind]] = v === null ? null : round(v, 2);
  }
  return out;
}

/** The JSON object `--slope --json` prints: both runs' figures (smaller N first), then the slopes. */
export function slopeJson(a: BenchFigures, b: BenchFigures) {
  return { runs: (a.nodes <= b.nodes ? [a, b] : [b, a]).map(toJson), ...slopeValues(a, b) };
}

/**
 * The JSON object of a run over several sizes (`--nodes A,B,...`, `--repeat K`): every run's figures
 * in run order (round by round, ascending N in each), with K > 1 each size's medians, and the slopes
 * between consecutive sizes (of the medians with K > 1), each `{from, to, ...slope keys}`. With two
 * sizes, the slopes' keys also stand at the top, as `--slope --json` has them.
 * @param runs each size's runs, ascending N.
 */
export function multiJson(runs: readonly (readonly BenchFigures[])[]) {
  const repeat = Math.max(...runs.map((r) => r.length));
  const meds = runs.map(medianFigures);
  const order = Array.from({ length: repeat }, (_, i) => runs.flatMap((r) => (r[i] ? [r[i]] : [])));
  const slopes = meds.slice(1).map((b, i) => {
    const a = meds[i] as BenchFigures;
    return { from: a.nodes, to: b.nodes, ...slopeValues(a, b) };
  });
  const [first] = slopes;
  return {
    runs: order.flat().map(toJson),
    ...(repeat > 1 ? { repeat, medians: meds.map(toJson) } : {}),
    slopes,
    ...(slopes.length === 1 && first ? slopeValues(meds[0] as BenchFigures, meds[1] as BenchFigures) : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Talos' apid in the path (`npm run bench -- --talos apid`): apid's own memory and CPU beside the
// CCM's, and the control plane's total (CCM + apid).

/** Talos runs apid in a cgroup with memory.max 128 MiB and no swap (internal/pkg/cgroup, constants). */
export const APID_MEMORY_MAX_MB = 128;

/** One RSS reading in MiB: the total and its anonymous and file-backed parts. */
export interface MemMb {
  rss: number;
  anon: number;
  file: number;
}

/** apid's figures and the control plane's totals in one run; `null` where not measured. */
export interface ApidFigures {
  nodes: number;
  /** apid with the machines seeded and no calls yet: before the CCM's first start. */
  apid_idle: MemMb | null;
  /** apid once the N nodes are initialized. */
  apid_init: MemMb | null;
  /** apid's peak over the run: max(VmHWM, highest sample); anon and file are the highest sample's. */
  apid_peak: MemMb | null;
  /** apid at the end of the steady window. */
  apid_settled: MemMb | null;
  apid_init_cpu_s: number | null;
  apid_csr_cpu_s: number | null;
  apid_steady_cpu_s: number | null;
  /** The CCM's CPU in the steady window (its init and CSR CPU are the table's cpu_s). */
  ccm_steady_cpu_s: number | null;
  /** Highest sampled sum of the CCM's and apid's RSS over the N-node phases and the steady window. */
  total_rss_mb: number | null;
  /** CCM + apid RSS at the end of the steady window. */
  total_settled_rss_mb: number | null;
  /** CCM + apid CPU for initialization and CSRs. */
  total_cpu_s: number | null;
  /** CCM + apid CPU in the steady window. */
  total_steady_cpu_s: number | null;
}

/** The keys of `--json`'s `apid` object, in order; each MemMb figure gives three (_rss_mb, _anon_mb, _file_mb). */
export const APID_FIGURE_KEYS = [
  "nodes",
  "apid_idle_rss_mb",
  "apid_idle_anon_mb",
  "apid_idle_file_mb",
  "apid_init_rss_mb",
  "apid_init_anon_mb",
  "apid_init_file_mb",
  "apid_peak_rss_mb",
  "apid_peak_anon_mb",
  "apid_peak_file_mb",
  "apid_settled_rss_mb",
  "apid_settled_anon_mb",
  "apid_settled_file_mb",
  "apid_over_memory_max",
  "apid_init_cpu_s",
  "apid_csr_cpu_s",
  "apid_steady_cpu_s",
  "ccm_steady_cpu_s",
  "total_rss_mb",
  "total_settled_rss_mb",
  "total_cpu_s",
  "total_steady_cpu_s",
] as const;

type ApidKey = (typeof APID_FIGURE_KEYS)[number];
const MEM_FIGURES = ["apid_idle", "apid_init", "apid_peak", "apid_settled"] as const;
const CPU_FIGURES = [
  "apid_init_cpu_s",
  "apid_csr_cpu_s",
  "apid_steady_cpu_s",
  "ccm_steady_cpu_s",
  "total_rss_mb",
  "total_settled_rss_mb",
  "total_cpu_s",
  "total_steady_cpu_s",
] as const;

/**
 * Whether apid's peak would break Talos' memory.max: "anon" when its anonymous memory alone is over
 * (no swap: the cgroup is OOM-killed), "rss" when only anonymous + file-backed is (page cache the
 * kernel could reclaim first), "no" when within, null when not measured.
 */
export function overMemoryMax(peak: MemMb | null): "anon" | "rss" | "no" | null {
  if (peak === null) return null;
  if (peak.anon > APID_MEMORY_MAX_MB) return "anon";
  return peak.rss > APID_MEMORY_MAX_MB ? "rss" : "no";
}

/** apid's figures rounded for output, keys in APID_FIGURE_KEYS order. */
export function apidJson(f: ApidFigures): Record<ApidKey, number | string | null> {
  const out = { nodes: f.nodes } as Record<ApidKey, number | string | null>;
  for (const m of MEM_FIGURES) {
    const v = f[m];
    out[`${m}_rss_mb`] = v && round(v.rss, 1);
    out[`${m}_anon_mb`] = v && round(v.anon, 1);
    out[`${m}_file_mb`] = v && round(v.file, 1);
    if (m === "apid_peak") out.apid_over_memory_max = overMemoryMax(v);
  }
  for (const k of CPU_FIGURES) {
    const v = f[k];
    out[k] = v === null ? null : round(v, k.endsWith("_mb") ? 1 : 2);
  }
  const ordered = {} as Record<ApidKey, number | string | null>;
  for (const k of APID_FIGURE_KEYS) ordered[k] = out[k];
  return ordered;
}

const mem = (m: MemMb | null) =>
  m === null ? "n/a" : `${m.rss.toFixed(1)} = ${m.anon.toFixed(1)} + ${m.file.toFixed(1)}`;
const num = (v: number | null, d: number) => (v === null ? "n/a" : v.toFixed(d));

/**
 * apid's table: each figure with its value (RSS as total = anonymous + file-backed, MiB) and what
 * it covers, then the verdict against Talos' 128 MiB memory.max.
 * @param gomemlimit what apid ran with, e.g. "107374182 (Talos')".
 */
export function formatApidTable(f: ApidFigures, gomemlimit: string): string {
  const over = overMemoryMax(f.apid_peak);
  const verdict = {
    anon: `EXCEEDS: anonymous memory alone is over ${APID_MEMORY_MAX_MB} MiB (no swap): a Talos node OOM-kills apid`,
    rss: `EXCEEDS as RSS (anonymous + file-backed); anonymous alone is within, the kernel would reclaim page cache first`,
    no: "within",
    n: "n/a",
  }[over ?? "n"];
  const rows: [string, string, string][] = [
    ["apid_idle_rss_mb", mem(f.apid_idle), "machines seeded, before the CCM's first start"],
    ["apid_init_rss_mb", mem(f.apid_init), "N nodes initialized"],
    ["apid_peak_rss_mb", mem(f.apid_peak), "peak: max(VmHWM, highest sample); anon + file of that sample"],
    ["apid_settled_rss_mb", mem(f.apid_settled), "end of the steady window"],
    ["apid_init_cpu_s", num(f.apid_init_cpu_s, 2), "initialization"],
    ["apid_csr_cpu_s", num(f.apid_csr_cpu_s, 2), "CSR approval"],
    ["apid_steady_cpu_s", num(f.apid_steady_cpu_s, 2), "steady window"],
    ["ccm_steady_cpu_s", num(f.ccm_steady_cpu_s, 2), "the CCM, steady window"],
    ["total_rss_mb", num(f.total_rss_mb, 1), "CCM + apid, highest sampled sum"],
    ["total_settled_rss_mb", num(f.total_settled_rss_mb, 1), "CCM + apid, end of the steady window"],
    ["total_cpu_s", num(f.total_cpu_s, 2), "CCM + apid, initialization and CSRs"],
    ["total_steady_cpu_s", num(f.total_steady_cpu_s, 2), "CCM + apid, steady window"],
  ];
  const all: [string, string, string][] = [["apid figure", "value (MiB = anon + file)", "covers"], ...rows];
  const w = [0, 1].map((i) => Math.max(...all.map((r) => (r[i] as string).length)));
  const line = (r: [string, string, string]) =>
    `${r[0].padEnd(w[0] as number)}  ${r[1].padStart(w[1] as number)}  ${r[2]}`.trimEnd();
  return [
    `Talos' apid v1.13.5 in the path (GOMEMLIMIT=${gomemlimit}; on Talos: cgroup memory.max ${APID_MEMORY_MAX_MB} MiB, no swap)`,
    line(all[0] as [string, string, string]),
    `${"-".repeat(w[0] as number)}  ${"-".repeat(w[1] as number)}  ${"-".repeat(6)}`,
    ...rows.map(line),
    `  apid's peak against memory.max ${APID_MEMORY_MAX_MB} MiB: ${verdict}`,
  ].join("\n");
}
