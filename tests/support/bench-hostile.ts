// The blast-radius benchmark's figures and output (pure; `npm run bench -- --nodes N --hostile
// <kind>[,<kind>...]`, issue 40): one hostile peer among N nodes, and what the N - 1 honest nodes see
// of it — their initialization time, the approval time of their serving CSRs, and the event-to-patch
// latency of a Talos address change (median and p99) — with the CCM's peak RSS, each against the same
// run with no hostile peer (kind `none`). The criteria are the issue's: honest p99 latency and
// initialization within 1.2x of the clean run, peak RSS within +20 MiB, on the medians of the rounds.
// Beside them, the CCM's part of each latency sample (the change → the API server receiving the CCM's
// write) and the API server's and etcd's CPU: on a machine the API server shares with the CCM, a
// load on the API server alone (kind api-load, a control) moves the end-to-end p99; these tell whose.
//
// The peers themselves (what each kind sends) are tests/support/bench-hostile-peer.ts.

import { median } from "./bench-report.ts";

/**
 * The hostile peers, each its own run on a fresh test bed: `none` (the clean run), `address-flood`
 * (one machine's Talos address watch keeps sending `created` events with new addresses, far past any
 * bound), `flap` (one machine's public address appears and disappears ~40 times a second), `csr-max`
 * (one node files maximal CSRs against maximal Talos answers), `big-node` (one ~1 MiB Node of 5,000
 * labels heartbeating every second), and `api-load`, a control that is no peer of the CCM (a ConfigMap
 * as big, patched as often, that the CCM never reads: the API server's and etcd's share of big-node).
 */
export const HOSTILE_KINDS = ["none", "address-flood", "flap", "csr-max", "big-node", "api-load"] as const;

/** One kind of hostile peer ({@link HOSTILE_KINDS}). */
export type HostileKind = (typeof HOSTILE_KINDS)[number];

/**
 * Parses `--hostile`: a comma-separated list of kinds, kept in the order given, each once; `all`
 * stands for every kind.
 * @throws {Error} on an unknown, repeated or missing kind.
 * @example parseHostileKinds("none,flap") // ["none", "flap"]
 */
export function parseHostileKinds(v: string): HostileKind[] {
  if (v.trim() === "all") return [...HOSTILE_KINDS];
  const kinds = v.split(",").map((k) => k.trim());
  const out: HostileKind[] = [];
  for (const k of kinds) {
    if (!(HOSTILE_KINDS as readonly string[]).includes(k))
      throw new Error(
        `Cannot parse --hostile=${v}: unknown kind "${k}" (expected ${HOSTILE_KINDS.join(", ")})`,
      );
    if (out.includes(k as HostileKind)) throw new Error(`Cannot parse --hostile=${v}: "${k}" is repeated`);
    out.push(k as HostileKind);
  }
  return out;
}

/** The issue's criteria: honest p99 latency and initialization within this ratio of the clean run. */
export const HOSTILE_RATIO_MAX = 1.2;
/** The issue's criterion: the CCM's peak RSS at most this many MiB above the clean run's. */
export const HOSTILE_RSS_DELTA_MAX_MB = 20;

/**
 * One run's figures, for the honest nodes only (the hostile peer's own node and CSRs are left out);
 * `null` for a figure that could not be measured. A latency sample that never showed counts as
 * +Infinity (it is slower than any that did), so a p99 over more than 1 % missing samples is
 * +Infinity.
 */
export interface HostileFigures {
  kind: HostileKind;
  nodes: number;
  /** The honest kubelets registering at once → all N - 1 Nodes without the uninitialized taint. */
  init_s: number | null;
  /** N - 1 honest kubelet-serving CSRs submitted → all approved. */
  csr_s: number | null;
  /** Talos address change → the Node's status.addresses showing it, median over the samples. */
  latency_p50_ms: number | null;
  /** The same, 99th percentile (nearest rank). */
  latency_p99_ms: number | null;
  /** Address changes made, and how many of them never reached the Node within the wait. */
  latency_samples: number;
  latency_missing: number;
  /**
   * The CCM's part of the same samples: the change → the API server receiving the CCM's write of that
   * Node (its audit log), median and 99th percentile. What remains of a sample is the API server's
   * and etcd's (and the watch back to the bench): a hostile load on the API server shows there.
   */
  ccm_p50_ms: number | null;
  ccm_p99_ms: number | null;
  /** The CCM's peak RSS over the whole run (VmHWM, or the highest 250 ms sample if higher). */
  rss_mb: number | null;
  /** The CCM's CPU (utime + stime) from leading to the end of the latency window. */
  cpu_s: number | null;
  /** kube-apiserver's and etcd's CPU over the same span: what the run cost the API side. */
  api_cpu_s: number | null;
  /** What the hostile peer sent: addresses, flaps, CSRs or heartbeats (0 for `none`). */
  hostile_actions: number;
  /** The CCM's writes (patch, update) to the hostile peer's Node over the run. */
  hostile_node_writes: number | null;
}

/** The JSON keys of a run, in order. */
export const HOSTILE_FIGURE_KEYS = [
  "kind",
  "nodes",
  "init_s",
  "csr_s",
  "latency_p50_ms",
  "latency_p99_ms",
  "latency_samples",
  "latency_missing",
  "ccm_p50_ms",
  "ccm_p99_ms",
  "rss_mb",
  "cpu_s",
  "api_cpu_s",
  "hostile_actions",
  "hostile_node_writes",
] as const satisfies ReadonlyArray<keyof HostileFigures>;

type NumericKey = Exclude<(typeof HOSTILE_FIGURE_KEYS)[number], "kind">;

const DECIMALS: Record<NumericKey, number> = {
  nodes: 0,
  init_s: 2,
  csr_s: 2,
  latency_p50_ms: 0,
  latency_p99_ms: 0,
  latency_samples: 0,
  latency_missing: 0,
  ccm_p50_ms: 1,
  ccm_p99_ms: 1,
  rss_mb: 1,
  cpu_s: 2,
  api_cpu_s: 2,
  hostile_actions: 0,
  hostile_node_writes: 0,
};

/**
 * The `p`th percentile of `xs` by nearest rank (the smallest value with at least p % of the values at
 * or below it); +Infinity values sort last. NaN for no values.
 * @param p in (0, 100].
 * @example percentile([5, 1, 3, 2, 4], 50) // 3
 * @example percentile([...Array(99).fill(1), Infinity], 99) // 1
 */
export function percentile(xs: readonly number[], p: number): number {
  if (!(p > 0 && p <= 100)) throw new Error(`Cannot take percentile ${p}: expected 0 < p <= 100`);
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.ceil((p / 100) * s.length) - 1] as number;
}

/**
 * The latency figures of one run's samples, each a latency in ms or null for a change never seen;
 * `ccm` the CCM's part of each (null where no write of the CCM was found).
 * @example latencyFigures([10, 20, null], [4, 5, null]) // {latency_p50_ms: 20, latency_p99_ms: Infinity, latency_samples: 3, latency_missing: 1, ccm_p50_ms: 5, ccm_p99_ms: Infinity}
 */
export function latencyFigures(
  samples: readonly (number | null)[],
  ccm: readonly (number | null)[],
): Pick<
  HostileFigures,
  "latency_p50_ms" | "latency_p99_ms" | "latency_samples" | "latency_missing" | "ccm_p50_ms" | "ccm_p99_ms"
> {
  const inf = (v: readonly (number | null)[]) => v.map((x) => x ?? Number.POSITIVE_INFINITY);
  const nullIfNaN = (v: number) => (Number.isNaN(v) ? null : v);
  const [xs, cs] = [inf(samples), inf(ccm)];
  return {
    latency_p50_ms: nullIfNaN(percentile(xs, 50)),
    latency_p99_ms: nullIfNaN(percentile(xs, 99)),
    latency_samples: samples.length,
    latency_missing: samples.filter((x) => x === null).length,
    ccm_p50_ms: nullIfNaN(percentile(cs, 50)),
    ccm_p99_ms: nullIfNaN(percentile(cs, 99)),
  };
}

/**
 * Each figure's median over the runs of one kind (over the runs that measured it; null when none did).
 * @throws {Error} when there are no runs, or they differ in kind or size.
 */
export function medianHostile(runs: readonly HostileFigures[]): HostileFigures {
  const first = runs[0];
  if (!first) throw new Error("Cannot take medians of no runs");
  if (runs.some((r) => r.kind !== first.kind || r.nodes !== first.nodes))
    throw new Error(
      `Cannot take medians over runs of different kinds or sizes: ${runs.map((r) => `${r.kind}@${r.nodes}`).join(", ")}`,
    );
  const out = { ...first };
  for (const k of HOSTILE_FIGURE_KEYS) {
    if (k === "kind" || k === "nodes") continue;
    const xs = runs.flatMap((r) => (r[k] === null ? [] : [r[k] as number]));
    (out as Record<NumericKey, number | null>)[k] = xs.length === 0 ? null : median(xs);
  }
  return out;
}

/** One kind against the clean run: ratios of the honest figures, the RSS difference, the verdicts. */
export interface Comparison {
  kind: HostileKind;
  init_ratio: number | null;
  csr_ratio: number | null;
  latency_p50_ratio: number | null;
  latency_p99_ratio: number | null;
  /** The CCM's part of the p99 against the clean run's; not one of the issue's criteria, shown beside them. */
  ccm_p99_ratio: number | null;
  rss_delta_mb: number | null;
  /** Each criterion met; null where a figure is missing. */
  init_pass: boolean | null;
  latency_p99_pass: boolean | null;
  rss_pass: boolean | null;
  /** The CCM's part of the p99 within {@link HOSTILE_RATIO_MAX} of the clean run's. */
  ccm_p99_pass: boolean | null;
  /** All three criteria met. */
  pass: boolean;
}

/**
 * `a / b`; null when either is missing or `b` is 0 (+Infinity stays +Infinity: a hostile run whose
 * samples never showed).
 * @example ratio(12, 10) // 1.2
 */
export function ratio(a: number | null, b: number | null): number | null {
  if (a === null || b === null || b === 0 || Number.isNaN(a) || Number.isNaN(b)) return null;
  if (!Number.isFinite(b)) return null;
  return a / b;
}

/**
 * Compares a kind's figures (medians) with the clean run's: the ratios, the RSS difference and the
 * issue's three criteria ({@link HOSTILE_RATIO_MAX}, {@link HOSTILE_RSS_DELTA_MAX_MB}).
 * @example compare({...clean, kind: "flap", init_s: 13}, clean).init_ratio // 1.3 when clean.init_s is 10
 */
export function compare(hostile: HostileFigures, clean: HostileFigures): Comparison {
  const init_ratio = ratio(hostile.init_s, clean.init_s);
  const latency_p99_ratio = ratio(hostile.latency_p99_ms, clean.latency_p99_ms);
  const rss_delta_mb =
    hostile.rss_mb === null || clean.rss_mb === null ? null : hostile.rss_mb - clean.rss_mb;
  const within = (v: number | null, max: number) => (v === null ? null : v <= max);
  const init_pass = within(init_ratio, HOSTILE_RATIO_MAX);
  const latency_p99_pass = within(latency_p99_ratio, HOSTILE_RATIO_MAX);
  const rss_pass = within(rss_delta_mb, HOSTILE_RSS_DELTA_MAX_MB);
  const ccm_p99_ratio = ratio(hostile.ccm_p99_ms, clean.ccm_p99_ms);
  return {
    kind: hostile.kind,
    init_ratio,
    csr_ratio: ratio(hostile.csr_s, clean.csr_s),
    latency_p50_ratio: ratio(hostile.latency_p50_ms, clean.latency_p50_ms),
    latency_p99_ratio,
    ccm_p99_ratio,
    rss_delta_mb,
    init_pass,
    latency_p99_pass,
    rss_pass,
    ccm_p99_pass: within(ccm_p99_ratio, HOSTILE_RATIO_MAX),
    pass: init_pass === true && latency_p99_pass === true && rss_pass === true,
  };
}

function round(v: number, decimals: number): number {
  const f = 10 ** decimals;
  return Math.round(v * f) / f;
}

/** A figure for JSON: rounded; +Infinity (samples never seen) and NaN become null. */
function jsonNumber(v: number | null, decimals: number): number | null {
  return v === null || !Number.isFinite(v) ? null : round(v, decimals);
}

/** One run's figures as a JSON object, keys in {@link HOSTILE_FIGURE_KEYS} order. */
export function hostileJson(
  f: HostileFigures,
): Record<(typeof HOSTILE_FIGURE_KEYS)[number], string | number | null> {
  const out = {} as Record<(typeof HOSTILE_FIGURE_KEYS)[number], string | number | null>;
  for (const k of HOSTILE_FIGURE_KEYS) out[k] = k === "kind" ? f.kind : jsonNumber(f[k], DECIMALS[k]);
  return out;
}

/** A comparison as a JSON object (ratios to 3 decimals, the RSS difference to 0.1 MiB). */
export function comparisonJson(c: Comparison) {
  return {
    kind: c.kind,
    init_ratio: jsonNumber(c.init_ratio, 3),
    csr_ratio: jsonNumber(c.csr_ratio, 3),
    latency_p50_ratio: jsonNumber(c.latency_p50_ratio, 3),
    latency_p99_ratio: jsonNumber(c.latency_p99_ratio, 3),
    ccm_p99_ratio: jsonNumber(c.ccm_p99_ratio, 3),
    rss_delta_mb: jsonNumber(c.rss_delta_mb, 1),
    init_pass: c.init_pass,
    latency_p99_pass: c.latency_p99_pass,
    rss_pass: c.rss_pass,
    ccm_p99_pass: c.ccm_p99_pass,
    pass: c.pass,
  };
}

/**
 * Runs in round order, each kind's medians and each kind's comparison with `none` (when it ran).
 * @param runs each kind's runs in round order, kinds in the order given.
 */
export function groupHostile(runs: readonly (readonly HostileFigures[])[]) {
  const medians = runs.map(medianHostile);
  const clean = medians.find((m) => m.kind === "none");
  const comparisons = clean ? medians.filter((m) => m.kind !== "none").map((m) => compare(m, clean)) : [];
  return { medians, clean, comparisons };
}

/**
 * The JSON object of a blast-radius run: `{nodes, repeat, kinds, criteria, runs (round by round),
 * medians (one per kind), vs_none (one per kind other than none, when none ran)}`.
 * @param runs each kind's runs in round order.
 */
export function hostileMultiJson(runs: readonly (readonly HostileFigures[])[]) {
  const { medians, comparisons } = groupHostile(runs);
  const repeat = Math.max(0, ...runs.map((r) => r.length));
  const order = Array.from({ length: repeat }, (_, i) => runs.flatMap((r) => (r[i] ? [r[i]] : [])));
  return {
    nodes: medians[0]?.nodes ?? null,
    repeat,
    kinds: medians.map((m) => m.kind),
    criteria: { ratio_max: HOSTILE_RATIO_MAX, rss_delta_max_mb: HOSTILE_RSS_DELTA_MAX_MB },
    runs: order.flat().map(hostileJson),
    medians: medians.map(hostileJson),
    vs_none: comparisons.map(comparisonJson),
  };
}

/** A figure for the table: "n/a" when missing, "never" for samples that never showed. */
export function formatFigure(k: NumericKey, v: number | null): string {
  if (v === null || Number.isNaN(v)) return "n/a";
  if (v === Number.POSITIVE_INFINITY) return "never";
  return v.toFixed(DECIMALS[k]);
}

function formatRatio(v: number | null): string {
  if (v === null) return "-";
  return v === Number.POSITIVE_INFINITY ? "inf" : `${v.toFixed(2)}x`;
}

function verdict(pass: boolean | null): string {
  return pass === null ? "N/A" : pass ? "PASS" : "FAIL";
}

/** Rows of cells as aligned columns (every column left-aligned but the second and third). */
function columns(all: readonly string[][]): string[] {
  const n = Math.max(...all.map((r) => r.length));
  const widths = Array.from({ length: n }, (_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => (i === 1 || i === 2 ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number)))
      .join("  ")
      .trimEnd();
  const [head, ...rows] = all.map(line);
  return [head as string, widths.map((w) => "-".repeat(w)).join("  "), ...rows];
}

/** The table's rows: figure, its criterion (or "-"), and how it compares. */
const TABLE_ROWS: ReadonlyArray<{ key: NumericKey; vs: "ratio" | "delta" | "none"; criterion?: string }> = [
  { key: "init_s", vs: "ratio", criterion: `<= ${HOSTILE_RATIO_MAX}x` },
  { key: "csr_s", vs: "ratio" },
  { key: "latency_p50_ms", vs: "ratio" },
  { key: "latency_p99_ms", vs: "ratio", criterion: `<= ${HOSTILE_RATIO_MAX}x` },
  { key: "latency_missing", vs: "none" },
  { key: "ccm_p50_ms", vs: "ratio" },
  { key: "ccm_p99_ms", vs: "ratio", criterion: `(<= ${HOSTILE_RATIO_MAX}x)` },
  { key: "rss_mb", vs: "delta", criterion: `<= +${HOSTILE_RSS_DELTA_MAX_MB} MiB` },
  { key: "cpu_s", vs: "ratio" },
  { key: "api_cpu_s", vs: "ratio" },
  { key: "hostile_actions", vs: "none" },
  { key: "hostile_node_writes", vs: "none" },
];

/**
 * One kind's table: each figure's median (over the rounds), the clean run's median, the ratio (or
 * the difference, for RSS), the criterion with PASS or FAIL, and every round's value.
 * @param runs this kind's runs; `clean` the `none` runs (undefined when none ran).
 * @param header says what was run.
 */
export function formatHostileTable(
  runs: readonly HostileFigures[],
  clean: readonly HostileFigures[] | undefined,
  header: string,
): string {
  const med = medianHostile(runs);
  const base = clean && clean.length > 0 ? medianHostile(clean) : undefined;
  const cmp = base && med.kind !== "none" ? compare(med, base) : undefined;
  const pass: Partial<Record<NumericKey, boolean | null>> = cmp
    ? {
        init_s: cmp.init_pass,
        latency_p99_ms: cmp.latency_p99_pass,
        rss_mb: cmp.rss_pass,
        ccm_p99_ms: cmp.ccm_p99_pass,
      }
    : {};
  const rows = TABLE_ROWS.map(({ key, vs, criterion }) => {
    let against = "-";
    if (cmp && base && vs === "ratio") against = formatRatio(ratio(med[key], base[key]));
    if (cmp && vs === "delta" && cmp.rss_delta_mb !== null)
      against = `${cmp.rss_delta_mb >= 0 ? "+" : ""}${cmp.rss_delta_mb.toFixed(1)} MiB`;
    return [
      key,
      formatFigure(key, med[key]),
      base && med.kind !== "none" ? formatFigure(key, base[key]) : "-",
      against,
      criterion ?? "-",
      criterion && cmp ? verdict(pass[key] ?? null) : "-",
      runs.map((r) => formatFigure(key, r[key])).join(", "),
    ];
  });
  const title = `${header}; hostile peer: ${med.kind}${cmp ? ` (${cmp.pass ? "PASS" : "FAIL"})` : ""}`;
  return [
    title,
    ...columns([["figure", "median", "none", "vs none", "criterion", "result", "runs"], ...rows]),
  ].join("\n");
}

/** A one-line summary per kind compared with `none`: the three criteria, e.g. for the end of a run. */
export function formatSummary(runs: readonly (readonly HostileFigures[])[]): string[] {
  const { comparisons } = groupHostile(runs);
  return comparisons.map(
    (c) =>
      `${c.kind}: init ${formatRatio(c.init_ratio)} (${verdict(c.init_pass)}), p99 latency ` +
      `${formatRatio(c.latency_p99_ratio)} (${verdict(c.latency_p99_pass)}), peak RSS ` +
      `${c.rss_delta_mb === null ? "n/a" : `${c.rss_delta_mb >= 0 ? "+" : ""}${c.rss_delta_mb.toFixed(1)} MiB`} ` +
      `(${verdict(c.rss_pass)}): ${c.pass ? "PASS" : "FAIL"}; the CCM's part of the p99 ` +
      `${formatRatio(c.ccm_p99_ratio)} (${verdict(c.ccm_p99_pass)})`,
  );
}
