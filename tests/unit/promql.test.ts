// tests/support/promql.ts: the selectors of PromQL expressions and the samples of an exposition, which
// tests/e2e/observability.test.ts compares.

import { describe, expect, test } from "bun:test";
import { matches, parseExposition, selectors, seriesKey } from "../support/promql.ts";

const names = (expr: string) => selectors(expr).map((s) => s.name);

describe("selectors()", () => {
  test("functions, aggregations, grouping clauses, ranges and keywords are not metrics", () => {
    expect(
      names(
        'histogram_quantile(0.95, sum by (le, request) (rate(a_bucket{job=~"$job"}[$__rate_interval]))) > 0 and on (pod) b or absent(c{x="y"}) offset 5m',
      ),
    ).toEqual(["a_bucket", "b", "c"]);
  });

  test("matchers keep their operator and unescaped value", () => {
    expect(selectors('x{request!~"watch_.*", name="a\\"b"}')[0]?.matchers).toEqual([
      { label: "request", op: "!~", value: "watch_.*" },
      { label: "name", op: "=", value: 'a"b' },
    ]);
  });

  test("Grafana's label_values(selector, label) names the selector only", () => {
    expect(names('label_values(up{name="x"}, job)')).toEqual(["up"]);
  });

  test("a selector without a metric name is refused", () => {
    expect(() => selectors('sum({__name__=~".+"})')).toThrow("without a metric name");
  });
});

describe("parseExposition() and matches()", () => {
  test("samples with labels and special values; comments skipped", () => {
    const text = '# HELP a x\n# TYPE a counter\na{b="c\\"d"} 3\nh_bucket{le="+Inf"} 2\ng +Inf\n';
    expect(parseExposition(text)).toEqual([
      { name: "a", labels: { b: 'c"d' }, value: 3 },
      { name: "h_bucket", labels: { le: "+Inf" }, value: 2 },
      { name: "g", labels: {}, value: Number.POSITIVE_INFINITY },
    ]);
    expect(() => parseExposition("not a sample line here\n")).toThrow("not an exposition line");
  });

  test("regex matchers are anchored as PromQL's", () => {
    expect(matches({ label: "r", op: "=~", value: "watch_.*" }, "watch_addresses")).toBe(true);
    expect(matches({ label: "r", op: "=~", value: "watch" }, "watch_addresses")).toBe(false);
    expect(matches({ label: "r", op: "!~", value: "watch_.*" }, "nodename")).toBe(true);
    expect(matches({ label: "r", op: "!=", value: "a" }, "a")).toBe(false);
  });

  test("seriesKey() sorts labels", () => {
    expect(seriesKey("m", { z: "1", a: "x" })).toBe('m{a="x",z="1"}');
  });
});
