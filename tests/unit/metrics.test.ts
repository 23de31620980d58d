import { describe, expect, test } from "bun:test";
import { controllerRunning, LabelCap, Registry } from "../../lib/metrics.ts";
import { registerBuildInfo } from "../../lib/metricsprocess.ts";
import { formatVersionRaw, versionInfo } from "../../lib/version.ts";

describe("Registry", () => {
  test("expose() renders counters, gauges and histograms in the text format", () => {
    const reg = new Registry();
    const c = reg.counter("c_total", "A counter.", ["code"]);
    const g = reg.gauge("g", "A gauge.");
    const h = reg.histogram("h_seconds", "A histogram.", [], [0.1, 1]);
    c.inc({ code: "200" });
    c.inc({ code: "200" }, 2);
    c.inc({ code: 'a"b' });
    g.set(undefined, 5);
    g.inc();
    g.dec(undefined, 3);
    h.observe(undefined, 0.5);
    h.observe(undefined, 2);
    expect(c.get({ code: "200" })).toBe(3);
    expect(g.get()).toBe(3);
    expect(h.count()).toBe(2);
    expect(reg.expose()).toBe(
      [
        "# HELP c_total A counter.",
        "# TYPE c_total counter",
        'c_total{code="200"} 3',
        'c_total{code="a\\"b"} 1',
        "# HELP g A gauge.",
        "# TYPE g gauge",
        "g 3",
        "# HELP h_seconds A histogram.",
        "# TYPE h_seconds histogram",
        'h_seconds_bucket{le="0.1"} 0',
        'h_seconds_bucket{le="1"} 1',
        'h_seconds_bucket{le="+Inf"} 2',
        "h_seconds_sum 2.5",
        "h_seconds_count 2",
        "",
      ].join("\n"),
    );
  });

  test("counter() and gauge() return the registered family, and refuse another type under the same name", () => {
    const reg = new Registry();
    const c = reg.counter("x_total", "X.");
    expect(reg.counter("x_total", "X.")).toBe(c);
    expect(() => reg.gauge("x_total", "X.")).toThrow(
      "Cannot register metric x_total: already registered as counter",
    );
  });

  test("expose() runs collectors first and survives a failing one", () => {
    const reg = new Registry();
    const g = reg.gauge("up", "Up.");
    reg.onCollect(() => {
      throw new Error("broken");
    });
    reg.onCollect(() => g.set(undefined, 1));
    expect(reg.expose()).toContain("\nup 1\n");
  });
});

describe("upstream's controller-manager metrics", () => {
  test("registerBuildInfo() writes kubernetes_build_info with component-base's labels, the release split into major and minor", () => {
    const reg = new Registry();
    registerBuildInfo(reg, versionInfo("1.12.3", "abc123"));
    const arch = process.arch === "x64" ? "amd64" : process.arch;
    expect(reg.expose()).toContain(
      `kubernetes_build_info{major="1",minor="12",git_version="v1.12.3",git_commit="abc123",git_tree_state="",build_date="",go_version="",compiler="bun",platform="${process.platform}/${arch}"} 1`,
    );
    expect(reg.expose()).toContain("# TYPE kubernetes_build_info gauge");
  });

  test("registerBuildInfo() leaves major and minor empty for a source run", () => {
    const reg = new Registry();
    registerBuildInfo(reg, versionInfo("dev", "unknown"));
    expect(reg.expose()).toMatch(
      /kubernetes_build_info\{major="",minor="",git_version="dev",git_commit="unknown",/,
    );
  });

  test("controllerRunning() sets running_managed_controllers to 1, then 0, under manager cloud-controller-manager", () => {
    const reg = new Registry();
    controllerRunning(reg, "cloud-node", true);
    controllerRunning(reg, "nodeipam", true);
    controllerRunning(reg, "nodeipam", false);
    const text = reg.expose();
    expect(text).toContain(
      'running_managed_controllers{name="cloud-node",manager="cloud-controller-manager"} 1',
    );
    expect(text).toContain(
      'running_managed_controllers{name="nodeipam",manager="cloud-controller-manager"} 0',
    );
    expect(text).toContain(
      "# HELP running_managed_controllers Indicates where instances of a controller are currently running",
    );
  });
});

describe("--version=raw", () => {
  test("formatVersionRaw() prints Go's %#v of version.Info, as upstream's verflag", () => {
    const arch = process.arch === "x64" ? "amd64" : process.arch;
    expect(formatVersionRaw(versionInfo("0.1.0", "abc"))).toBe(
      `version.Info{Major:"0", Minor:"1", EmulationMajor:"", EmulationMinor:"", MinCompatibilityMajor:"", MinCompatibilityMinor:"", GitVersion:"v0.1.0", GitCommit:"abc", GitTreeState:"", BuildDate:"", GoVersion:"", Compiler:"bun", Platform:"${process.platform}/${arch}"}`,
    );
  });
});

describe("LabelCap", () => {
  test("LabelCap.value() keeps the first max values, maps later ones to other, empty ones to unknown", () => {
    const cap = new LabelCap(2);
    expect(["a", "b", "c", "a", "", "b", "d"].map((v) => cap.value(v))).toEqual([
      "a",
      "b",
      "other",
      "a",
      "unknown",
      "b",
      "other",
    ]);
  });

  test("LabelCap.value() cuts long values and drops control characters before counting them", () => {
    const cap = new LabelCap(1, "rest", "none", 8);
    expect(cap.value("manager-with-a-long-name")).toBe("manager-");
    expect(cap.value("manager-\u0000other")).toBe("manager-");
    expect(cap.value("\n\t")).toBe("none");
    expect(cap.value("x")).toBe("rest");
  });

  test("LabelCap refuses a bound below 1", () => {
    expect(() => new LabelCap(0)).toThrow(TypeError);
  });
});
