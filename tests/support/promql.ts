// What the chart's PromQL (alert rules, dashboard queries) asks of the binary's /metrics: the vector
// selectors of an expression (metric name and label matchers), and the samples of a text exposition,
// so that tests/e2e/observability.test.ts can check each selector against a real scrape.

/** A label matcher of a selector: `state="down"`, `request!~"watch_.*"`. */
export interface Matcher {
  label: string;
  op: "=" | "!=" | "=~" | "!~";
  value: string;
}

/** A vector selector: the metric name and its label matchers. */
export interface Selector {
  name: string;
  matchers: Matcher[];
  /** The selector as written. */
  text: string;
}

/** Words of PromQL that are not metric names where an identifier may stand. */
const KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
  "atan2",
]);

function parseMatchers(body: string): Matcher[] {
  const out: Matcher[] = [];
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g;
  for (const m of body.matchAll(re)) {
    out.push({
      label: m[1] as string,
      op: m[2] as Matcher["op"],
      value: (m[3] as string).replace(/\\(.)/g, "$1"),
    });
  }
  return out;
}

/**
 * The vector selectors of a PromQL expression (or of Grafana's `label_values(selector, label)`).
 * Identifiers followed by `(` are functions or aggregations, grouping clauses and range or subquery
 * brackets are dropped first.
 * @example selectors('max by (namespace) (talosccm_node_talos_watches{state="down"}) > 0')
 * // [{ name: "talosccm_node_talos_watches", matchers: [{ label: "state", op: "=", value: "down" }], ... }]
 */
export function selectors(expr: string): Selector[] {
  const text = expr
    .replace(/\[[^\]]*\]/g, "")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "")
    // label_values(selector, label): the label argument is not a metric.
    .replace(/,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$/, ")");
  const out: Selector[] = [];
  const re = /(?<![\w.$"])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?|(\{[^}]*\})/g;
  for (const m of text.matchAll(re)) {
    if (m[4] !== undefined) throw new Error(`a selector without a metric name: ${m[4]} in ${expr}`);
    const name = m[1] as string;
    if (m[3] !== undefined || KEYWORDS.has(name.toLowerCase())) continue;
    out.push({ name, matchers: parseMatchers(m[2] ?? ""), text: m[0].trim() });
  }
  return out;
}

/** One sample line of a text exposition: name, labels, value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (version 0.0.4); comments are skipped. */
export function parseExposition(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of parseMatchers(m[2] ?? "")) labels[l.label] = l.value;
    const v = m[3] as string;
    out.push({
      name: m[1] as string,
      labels,
      value: v === "+Inf" ? Number.POSITIVE_INFINITY : v === "-Inf" ? Number.NEGATIVE_INFINITY : Number(v),
    });
  }
  return out;
}

/** Whether `value` satisfies the matcher (regexes are anchored, as PromQL's are). */
export function matches(m: Matcher, value: string): boolean {
  switch (m.op) {
    case "=":
      return value === m.value;
    case "!=":
      return value !== m.value;
    case "=~":
      return new RegExp(`^(?:${m.value})$`).test(value);
    case "!~":
      return !new RegExp(`^(?:${m.value})$`).test(value);
  }
}

/** The canonical key of a series: its name and sorted labels, as promtool's input_series writes it. */
export function seriesKey(name: string, labels: Record<string, string>): string {
  const body = Object.keys(labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(labels[k])}`)
    .join(",");
  return `${name}{${body}}`;
}
