// The benchmark's figures, budgets and output (pure): the JSON object `npm run bench -- --json`
// prints (exactly the keys plus `nodes`) and the table that shows each figure against its
// budget with PASS or FAIL. Budgets are the issue's, for a 2-core machine; the size-dependent ones
// (init, CSR, peak RSS) are stated for 1,000 nodes and applied to every N up to 1,000 (a smaller
// cluster must not be slower), while larger N only report.

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
  /** utime+stime of the CCM over the N-node phases (initialization and CSRs). */
  cpu_s: number | null;
  /** Talos API calls during initialization, per node, counted at the fake apid. */
  talos_calls_per_node: number | null;
  /** Talos API calls in the steady-state window, scaled to per node per hour. */
  talos_calls_per_node_hour: number | null;
  /** Requests of the CCM's user over the N-node phases, per node, from the API server's audit log. */
  kube_requests_per_node: number | null;
}

/** The keys of {@link BenchFigures} in the order, `nodes` first. */
export const FIGURE_KEYS = [
  "nodes",
  "startup_ms",
  "idle_rss_mb",
  "init_s",
  "csr_s",
  "rss_mb",
  "cpu_s",
  "talos_calls_per_node",
  "talos_calls_per_node_hour",
  "kube_requests_per_node",
] as const satisfies ReadonlyArray<keyof BenchFigures>;

type Figure = Exclude<(typeof FIGURE_KEYS)[number], "nodes">;

interface Budget {
  max: number;
  /** Up to which N the budget applies (the size-dependent ones are stated for 1,000 nodes). */
  upToNodes: number;
}

/** The budgets on a 2-core machine. */
export const BUDGETS: Readonly<Partial<Record<Figure, Budget>>> = {
  startup_ms: { max: 150, upToNodes: Number.POSITIVE_INFINITY },
  idle_rss_mb: { max: 50, upToNodes: Number.POSITIVE_INFINITY },
  init_s: { max: 15, upToNodes: 1000 },
  csr_s: { max: 10, upToNodes: 1000 },
  rss_mb: { max: 90, upToNodes: 1000 },
  talos_calls_per_node: { max: 3, upToNodes: Number.POSITIVE_INFINITY },
  talos_calls_per_node_hour: { max: 1, upToNodes: Number.POSITIVE_INFINITY },
};

const DECIMALS: Record<Figure, number> = {
  startup_ms: 0,
  idle_rss_mb: 1,
  init_s: 2,
  csr_s: 2,
  rss_mb: 1,
  cpu_s: 2,
  talos_calls_per_node: 2,
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
    const b = BUDGETS[figure];
    const applies = b !== undefined && figures.nodes <= b.upToNodes;
    let budget = "-";
    if (b && applies) budget = `<= ${b.max}`;
    else if (b) budget = `(<= ${b.max} at N <= ${b.upToNodes})`;
    let verdict: Verdict = "-";
    if (value === null) verdict = "N/A";
    else if (b && applies) verdict = value <= b.max ? "PASS" : "FAIL";
    return { figure, value, budget, verdict };
  });
}

/** The figures rounded for output, keys in the order. */
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

/**
 * The human-readable report: a header line, one row per figure (value, budget, verdict) and notes.
 * @param header says what was run (N, machine, the kube-api-qps choice).
 * @param notes explain figures (breakdowns, what could not be measured and why).
 */
export function formatTable(figures: BenchFigures, header: string, notes: readonly string[] = []): string {
  const rows = evaluate(figures).map((r) => [
    r.figure,
    r.value === null ? "n/a" : r.value.toFixed(DECIMALS[r.figure]),
    r.budget,
    r.verdict,
  ]);
  const all = [["figure", "value", "budget", "result"], ...rows];
  const widths = [0, 1, 2, 3].map((i) => Math.max(...all.map((r) => (r[i] as string).length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === 1 ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number)))
      .join("  ")
      .trimEnd();
  const rule = widths.map((w) => "-".repeat(w)).join("  ");
  return [header, line(all[0] as string[]), rule, ...rows.map(line), ...notes.map((n) => `  ${n}`)].join(
    "\n",
  );
}

/** Figures over budget, by name. */
export function failures(figures: BenchFigures): Figure[] {
  return evaluate(figures)
    .filter((r) => r.verdict === "FAIL")
    .map((r) => r.figure);
}
