// Prometheus metrics as data: counters, gauges and histograms with labels, bounded label values, a
// registry and the text exposition format served on /metrics. No clock and no process state: the
// process's registry, its collectors and the timing of observations are in lib/metricsprocess.ts.

/** Label values keyed by label name. */
export type Labels = Record<string, string>;

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  render(out: string[]): void;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function labelKey(names: readonly string[], labels: Labels | undefined): string {
  if (names.length === 0) return "";
  return names.map((n) => `${n}="${escapeLabel(labels?.[n] ?? "")}"`).join(",");
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Number.POSITIVE_INFINITY) return "+Inf";
  if (v === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(v);
}

function sample(out: string[], name: string, key: string, value: number): void {
  out.push(key ? `${name}{${key}} ${formatValue(value)}` : `${name} ${formatValue(value)}`);
}

/** One number per label set: what counters and gauges share. */
abstract class ScalarFamily implements Family {
  abstract readonly type: "counter" | "gauge";
  protected readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[] = [],
  ) {}
  /** Adds `n` (default 1) to the series for `labels`. */
  inc(labels?: Labels, n = 1): void {
    const k = labelKey(this.labelNames, labels);
    this.values.set(k, (this.values.get(k) ?? 0) + n);
  }
  /** The current value for `labels` (0 when never set). */
  get(labels?: Labels): number {
    return this.values.get(labelKey(this.labelNames, labels)) ?? 0;
  }
  render(out: string[]): void {
    for (const [k, v] of this.values) sample(out, this.name, k, v);
  }
}

/** A monotonically increasing value per label set. */
export class Counter extends ScalarFamily {
  readonly type = "counter";
}

/** A value that goes up and down per label set. */
export class Gauge extends ScalarFamily {
  readonly type = "gauge";
  /** Sets the series for `labels` to `v`. */
  set(labels: Labels | undefined, v: number): void {
    this.values.set(labelKey(this.labelNames, labels), v);
  }
  /** Subtracts `n` (default 1) from the series for `labels`. */
  dec(labels?: Labels, n = 1): void {
    this.inc(labels, -n);
  }
}

interface HistogramSeries {
  counts: number[];
  sum: number;
  count: number;
}

/** Prometheus' default buckets, in seconds. */
const DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** A distribution of observations per label set. */
export class Histogram implements Family {
  readonly type = "histogram";
  readonly #series = new Map<string, HistogramSeries>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[] = [],
    readonly buckets: readonly number[] = DEFAULT_BUCKETS,
  ) {}
  /** Records one observation of `value` in the series for `labels`. */
  observe(labels: Labels | undefined, value: number): void {
    const k = labelKey(this.labelNames, labels);
    let s = this.#series.get(k);
    if (!s) {
      s = { counts: new Array(this.buckets.length).fill(0), sum: 0, count: 0 };
      this.#series.set(k, s);
    }
    for (let i = 0; i < this.buckets.length; i++) {
      if (value <= (this.buckets[i] as number)) s.counts[i] = (s.counts[i] as number) + 1;
    }
    s.sum += value;
    s.count++;
  }
  /** Number of observations for `labels`. */
  count(labels?: Labels): number {
    return this.#series.get(labelKey(this.labelNames, labels))?.count ?? 0;
  }
  render(out: string[]): void {
    for (const [k, s] of this.#series) {
      const prefix = k ? `${k},` : "";
      this.buckets.forEach((b, i) => {
        out.push(`${this.name}_bucket{${prefix}le="${formatValue(b)}"} ${s.counts[i]}`);
      });
      out.push(`${this.name}_bucket{${prefix}le="+Inf"} ${s.count}`);
      sample(out, `${this.name}_sum`, k, s.sum);
      sample(out, `${this.name}_count`, k, s.count);
    }
  }
}

/**
 * Keeps a label whose values come from outside (e.g. field manager names another client chooses)
 * bounded: the first `max` distinct values are used as they are (cut to `maxLength` characters,
 * non-printable characters dropped), every later one becomes `overflow`, an empty one `empty`.
 * @example
 * const managers = new LabelCap(2);
 * [managers.value("a"), managers.value("b"), managers.value("c"), managers.value("a")] // ["a", "b", "other", "a"]
 */
export class LabelCap {
  readonly #seen = new Set<string>();
  constructor(
    readonly max: number,
    readonly overflow = "other",
    readonly empty = "unknown",
    readonly maxLength = 64,
  ) {
    if (!(max >= 1)) throw new TypeError("LabelCap: max must be at least 1");
  }
  /** The label value to use for `raw`. */
  value(raw: string): string {
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is dropped
    const v = raw.replace(/[\u0000-\u001f\u007f]/g, "").slice(0, this.maxLength);
    if (v === "") return this.empty;
    if (this.#seen.has(v)) return v;
    if (this.#seen.size >= this.max) return this.overflow;
    this.#seen.add(v);
    return v;
  }
}

/** A set of metric families and scrape-time collectors, rendered in the text exposition format. */
export class Registry {
  readonly #families = new Map<string, Family>();
  readonly #collectors: Array<() => void> = [];

  #add<T extends Family>(family: T): T {
    const existing = this.#families.get(family.name);
    if (existing) {
      if (existing.type !== family.type) {
        throw new Error(`Cannot register metric ${family.name}: already registered as ${existing.type}`);
      }
      return existing as T;
    }
    this.#families.set(family.name, family);
    return family;
  }
  /** Registers (or returns the already registered) counter `name`. */
  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.#add(new Counter(name, help, labelNames));
  }
  /** Registers (or returns the already registered) gauge `name`. */
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.#add(new Gauge(name, help, labelNames));
  }
  /** Registers (or returns the already registered) histogram `name`. */
  histogram(
    name: string,
    help: string,
    labelNames: readonly string[] = [],
    buckets: readonly number[] = DEFAULT_BUCKETS,
  ): Histogram {
    return this.#add(new Histogram(name, help, labelNames, buckets));
  }
  /** Adds a function run before each scrape, to refresh gauges computed on demand. */
  onCollect(fn: () => void): void {
    this.#collectors.push(fn);
  }
  /** Renders every family in the Prometheus text format (version 0.0.4). */
  expose(): string {
    for (const fn of this.#collectors) {
      try {
        fn();
      } catch {
        // A failing collector leaves its gauges stale rather than failing the scrape.
      }
    }
    const out: string[] = [];
    for (const f of this.#families.values()) {
      out.push(`# HELP ${f.name} ${f.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}`);
      out.push(`# TYPE ${f.name} ${f.type}`);
      f.render(out);
    }
    return `${out.join("\n")}\n`;
  }
}

/** k8s.io/cloud-provider's `manager` label of `running_managed_controllers`. */
const MANAGER = "cloud-controller-manager";

/**
 * `running_managed_controllers` (k8s.io/component-base's controllers metrics): 1 while the controller
 * named `name` runs, 0 once it stopped, labelled `manager="cloud-controller-manager"` as upstream.
 */
export function controllerRunning(reg: Registry, name: string, running: boolean): void {
  reg
    .gauge("running_managed_controllers", "Indicates where instances of a controller are currently running", [
      "name",
      "manager",
    ])
    .set({ name, manager: MANAGER }, running ? 1 : 0);
}
