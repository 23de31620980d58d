// The chart's observability (serviceMonitor, prometheusRule, grafanaDashboard) against a real run:
// the compiled binary on the test bed (real kube-apiserver, the Talos simulator), scraped as the
// chart's ServiceMonitor scrapes it (HTTPS, the token of the scraper ServiceAccount the chart creates,
// which its ClusterRole lets get /metrics), while each alert's condition is driven for real:
//   healthy: two nodes initialized, the leader holding the Lease;
//   off on purpose: the second node's machine powered off and its Node's status Unknown, as
//   Kubernetes' node lifecycle marks a silent kubelet (its watches go down, its polls fail): no page;
//   faults: a third Node whose machine is stopped (it stays uninitialized, its Talos calls fail), the
//   first node's machine stopped while its kubelet posts Ready (its Talos watches go down and its
//   polls keep failing), a burst of CSRs denied by policy;
//   no leader: the CCM killed (the target is gone), then started again while another identity holds
//   the Lease (the replica is up, it is not the leader).
// Each scrape is one step of one minute of the promtool test (a 300 ms scrape interval stands for the
// one-minute one, and the CCM polls machines whose watches are down every second); the phases with a
// `for` to outlast are scraped for real that long, except the no-leader phase, whose last scrape is
// held (a failed scrape, or gauges only: nothing is invented) until one more real scrape confirms it. The scraped series of the metrics the rules name become
// `promtool test rules` input_series; the alerts are expected when the conditions were driven
// (firing), in the healthy phase and for the machine off on purpose (none). Every selector of the
// rules and of the dashboard must match a series the run produced; `promtool check rules` checks the
// rendered groups; the ServiceMonitor and PrometheusRule are checked against the Prometheus
// Operator's own types and the dashboard against Grafana's published schema (tests/support/upstreamcheck).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments, stringify } from "yaml";
import { CHART_DIR } from "../../lib/deployfiles.ts";
import { SimBed, tainted } from "../support/bed.ts";
import { type FakeNodeSpec, loadFixture, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import type { SimulatedKubelet } from "../support/kubelet.ts";
import {
  matches,
  parseExposition,
  type Sample,
  type Selector,
  selectors,
  seriesKey,
} from "../support/promql.ts";
import { addSimMachine } from "../support/simmachines.ts";

const root = join(import.meta.dir, "..", "..");
const CHART = join(root, "deploy", CHART_DIR);
const NAMESPACE = "kube-system";
/** The Lease the chart's Deployment and DaemonSet elect on (--leader-elect-resource-name). */
const LEASE = "cloud-controller-manager-talos";
/** Labels a Prometheus scrape through the chart's ServiceMonitor adds to every sample. */
const TARGET_LABELS = ["job", "namespace", "pod", "instance", "service", "endpoint", "container"];
const SCRAPE_MS = 300;
/** Denied CSRs submitted in the burst: more than the chart's default prometheusRule.csrDenialBurst (5). */
const BURST = 7;

function tool(name: string): string {
  const path = process.env[name];
  if (!path)
    throw new Error(`${name} is not set: run this test through \`npm test\` (tests/run.ts builds it)`);
  return path;
}

function run(cmd: string, args: string[]): { status: number | null; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  if (r.error) throw new Error(`cannot run ${cmd}: ${r.error.message}`);
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** `helm template` of the chart with the observability values on (and `sets`), as text. */
function renderChartText(...sets: string[]): string {
  const r = run(tool("HELM"), [
    "template",
    "obs",
    CHART,
    "--namespace",
    NAMESPACE,
    "--set",
    "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
    ...sets.flatMap((v) => ["--set", v]),
  ]);
  if (r.status !== 0) throw new Error(`helm template failed:\n${r.out}`);
  return r.out;
}

type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } };

/** `helm template` of the chart with the observability values on (and `sets`); its objects. */
function renderChart(...sets: string[]): K8sObject[] {
  return parseAllDocuments(renderChartText(...sets))
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/** One step of the run: a scrape's samples, or null when the scrape failed (the target is down). */
interface Step {
  samples: Sample[] | null;
  /** The pod label the scrape's target has (each CCM process is a pod). */
  pod: string;
  /** A held copy of the previous real scrape. */
  held: boolean;
}

const machineA = loadFixture("aws");
/** The machine powered off on purpose. */
const machineC = loadFixture("gcp");
const machineB: FakeNodeSpec = {
  name: "obs-unreachable",
  nodeIPs: ["10.0.9.9"],
  talosVersion: "v1.13.5",
  platformMetadata: platformMetadata({ platform: "metal", hostname: "obs-unreachable" }),
  addresses: [
    normalizeAddress("obs-unreachable", {
      address: "10.0.9.9/24",
      linkName: "eth0",
      linkIndex: 2,
      flags: "permanent",
    }),
  ],
};

let bed: SimBed;
let dir: string;
let keepDir = false;
let objects: K8sObject[];
let token = "";
let pod = "ccm-0";
const steps: Step[] = [];
/** Steps at which the test saw each condition start, by name. */
const marks: Record<string, number> = {};
/** Status codes of /metrics for the chart-bound scraper and for a ServiceAccount without the binding. */
const access: { bound?: number; unbound?: number } = {};
/** The chart's scraper ServiceAccount (serviceMonitor.scraperToken). */
const SCRAPER = "obs-talos-cloud-controller-manager-metrics-scraper";

async function fetchMetrics(bearer: string): Promise<Response> {
  return fetch(`https://127.0.0.1:${bed.port}/metrics`, {
    headers: { authorization: `Bearer ${bearer}` },
    tls: { rejectUnauthorized: false },
  });
}

/** One real scrape, appended as the next step; returns its samples (null: the target is down). */
async function scrape(): Promise<Sample[] | null> {
  let samples: Sample[] | null = null;
  try {
    const res = await fetchMetrics(token);
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${await res.text()}`);
    samples = parseExposition(await res.text());
  } catch (err) {
    if (!String(err).match(/ECONNREFUSED|Unable to connect|ConnectionRefused/)) throw err;
  }
  steps.push({ samples, pod, held: false });
  return samples;
}

/** `n` more real scrapes, SCRAPE_MS apart. */
async function scrapeSteps(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    await Bun.sleep(SCRAPE_MS);
    await scrape();
  }
}

/** Holds the last real scrape for `n` more steps. */
function hold(n: number): void {
  const last = steps.at(-1) as Step;
  for (let i = 0; i < n; i++) steps.push({ ...last, held: true });
}

/** The sum of the samples named `name` whose labels satisfy `pred`. */
function total(
  samples: Sample[] | null,
  name: string,
  pred: (l: Record<string, string>) => boolean = () => true,
) {
  return (samples ?? []).filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);
}

/** Failed Talos calls (not watches) about nodes whose status is `status` (known, or unknown: silent). */
const nonWatchErrors = (s: Sample[] | null, status = "known") =>
  total(
    s,
    "talosccm_api_request_errors_total",
    (l) => !(l.request ?? "").startsWith("watch_") && l.node_status === status,
  );
const watches = (s: Sample[] | null, state: string) =>
  total(s, "talosccm_node_talos_watches", (l) => l.state === state);

/** Scrapes every SCRAPE_MS until `done` holds for the latest scrape; returns the step it held at. */
async function scrapeUntil(
  what: string,
  done: (s: Sample[] | null) => boolean,
  ms = 30_000,
): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const s = await scrape();
    if (done(s)) return steps.length - 1;
    if (Date.now() > deadline)
      throw new Error(`${what} did not happen within ${ms} ms:\n${bed.ccm?.output.slice(-3000)}`);
    await Bun.sleep(SCRAPE_MS);
  }
}

/** Records the first step at which each condition holds, scraping until all do. */
async function scrapeUntilAll(conds: Record<string, (s: Sample[] | null) => boolean>): Promise<void> {
  await scrapeUntil(`${Object.keys(conds).join(", ")}`, (s) => {
    for (const [name, cond] of Object.entries(conds))
      if (marks[name] === undefined && cond(s)) marks[name] = steps.length - 1;
    return Object.keys(conds).every((n) => marks[n] !== undefined);
  });
}

function ccmSetup() {
  return {
    controllers: "cloud-node,node-csr-approval",
    cloudConfig: join(bed.dir, "ccm-config.yaml"),
    leaderElect: true,
    args: [
      `--leader-elect-resource-name=${LEASE}`,
      `--leader-elect-resource-namespace=${NAMESPACE}`,
      // Machines whose watches are down are polled every second (5 min by default): a minute a step.
      "--node-status-update-frequency=1s",
    ],
  };
}

/** Gives the Lease to another identity for an hour, as a stuck replica elsewhere would hold it. */
async function leaseToGhost(): Promise<void> {
  const path = `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases/${LEASE}`;
  const lease = await bed.cluster.adminClient.get<{ spec: Record<string, unknown> }>(path);
  const now = new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
  lease.spec = {
    ...lease.spec,
    holderIdentity: "ghost",
    leaseDurationSeconds: 3600,
    renewTime: now,
    acquireTime: now,
  };
  await bed.cluster.adminClient.update(path, lease);
}

async function healthyPhase(a: SimulatedKubelet): Promise<void> {
  await bed.initialized(machineA.name);
  await bed.initialized(machineC.name);
  // A kubelet serving CSR of node A approved: the CSR counters are in use before the burst.
  await bed.cluster.csrDecision((await a.submitServingCSR()).metadata?.name as string, 30_000, () => "");
  await scrapeUntil("the leader's gauge", (s) => total(s, "leader_election_master_status") === 1);
  for (let i = 0; i < 4; i++) {
    await Bun.sleep(SCRAPE_MS);
    await scrape();
  }
  marks.healthy = steps.length - 1;
}

/**
 * Machine C powered off on purpose: its kubelet falls silent and Kubernetes' node lifecycle marks its
 * Node's status Unknown (the test bed has no kube-controller-manager: the test writes what it would).
 * Its watches go down and its polls fail, counted apart; it is scraped for the longest `for` and more.
 */
async function offPhase(c: SimulatedKubelet): Promise<void> {
  const unknown0 = nonWatchErrors(steps.at(-1)?.samples ?? null, "unknown");
  // Powered off: the machine stops, its kubelet falls silent.
  await bed.sim.stopMachine(machineC.nodeIPs[0] as string);
  await c.goSilent(bed.cluster.adminClient);
  await scrapeUntilAll({
    off: (s) => watches(s, "down_node_status_unknown") === 1 && nonWatchErrors(s, "unknown") > unknown0,
  });
  await scrapeSteps(17);
  const s = steps.at(-1)?.samples ?? null;
  expect(watches(s, "down_node_status_unknown")).toBe(1);
  expect(watches(s, "down")).toBe(0);
  // Its polls kept failing all along (the old rules would have paged on them).
  expect(nonWatchErrors(s, "unknown")).toBeGreaterThan(
    nonWatchErrors(steps[(marks.off as number) + 8]?.samples ?? null, "unknown"),
  );
  expect(nonWatchErrors(s)).toBe(nonWatchErrors(steps[marks.off as number]?.samples ?? null));
}

async function faultPhase(a: SimulatedKubelet): Promise<void> {
  const denied0 = total(steps.at(-1)?.samples ?? null, "talosccm_csr_denied_total");
  const errors0 = nonWatchErrors(steps.at(-1)?.samples ?? null);
  await bed.sim.stopMachine(machineB.nodeIPs[0] as string);
  const b = await bed.register({ name: machineB.name, ips: machineB.nodeIPs, heartbeatMs: 0 });
  // Node B's kubelet asks for its serving certificate: confirming it needs B's Talos, which is down.
  await b.submitServingCSR();
  await bed.sim.stopMachine(machineA.nodeIPs[0] as string);
  const burst = Promise.all(
    Array.from({ length: BURST }, () => a.submitServingCSR({ dns: [machineA.name, "evil.example.com"] })),
  );
  await scrapeUntilAll({
    uninitialized: (s) => total(s, "talosccm_nodes_uninitialized") >= 1,
    // Both machines are stopped, their kubelets posting: node A's watches and the unreachable node's are down.
    watchesDown: (s) => watches(s, "down") === 2,
    talosErrors: (s) => nonWatchErrors(s) > errors0,
    csrBurst: (s) => total(s, "talosccm_csr_denied_total") - denied0 >= BURST,
  });
  await burst;
  // The longest `for` (15m) after the latest start, and more, scraped for real: the faults last.
  const last = Math.max(
    ...["uninitialized", "watchesDown", "talosErrors", "csrBurst"].map((k) => marks[k] as number),
  );
  await scrapeSteps(last + 19 - steps.length);
  const s = steps.at(-1)?.samples ?? null;
  expect(total(s, "talosccm_nodes_uninitialized")).toBe(1);
  expect(watches(s, "down")).toBe(2);
  expect(watches(s, "down_node_status_unknown")).toBe(1);
  expect(tainted(await bed.getNode(machineB.name))).toBe(true);
  marks.faultEnd = steps.length - 1;
}

async function noLeaderPhase(): Promise<void> {
  await bed.ccm?.stop("SIGKILL");
  const s = await scrape();
  expect(s).toBeNull();
  marks.killed = steps.length - 1;
  hold(7);
  expect(await scrape()).toBeNull();
  await leaseToGhost();
  pod = "ccm-1";
  await bed.startCcm(ccmSetup());
  // The new replica is up and not the leader: its gauge is there, at 0.
  const isBackup = (x: Sample[] | null) =>
    (x ?? []).some(
      (y) => y.name === "leader_election_master_status" && y.labels.name === LEASE && y.value === 0,
    );
  await scrapeUntilAll({ backup: isBackup });
  hold(5);
  const last = await scrape();
  expect(total(last, "leader_election_master_status")).toBe(0);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "observability-e2e-"));
  bed = await SimBed.start("observability-e2e-");
  for (const spec of [machineA, machineB, machineC]) await addSimMachine(bed.sim, spec);
  objects = renderChart();
  await bed.cluster.apply([{ apiVersion: "v1", kind: "Namespace", metadata: { name: "monitoring" } }]);
  // The chart's scraper: its ServiceAccount, token Secret and RBAC, applied as rendered. The test bed
  // has no kube-controller-manager to fill the Secret in: the same identity's token comes from a
  // TokenRequest.
  await bed.cluster.apply(objects.filter((o) => o.metadata.name === SCRAPER));
  const conn = await bed.cluster.serviceAccountConnection(NAMESPACE, SCRAPER);
  token = conn.auth.kind === "token" ? conn.auth.token : "";
  const other = await bed.cluster.serviceAccountConnection("monitoring", "someone-else");
  bed.writeCloudConfig("global:\n  clusterName: obs\n");
  await bed.startCcm(ccmSetup(), /Starting controller.*cloud-node/);
  access.bound = (await fetchMetrics(token)).status;
  access.unbound = (await fetchMetrics(other.auth.kind === "token" ? other.auth.token : "")).status;
  const a = await bed.register({
    name: machineA.name,
    ips: machineA.nodeIPs,
    heartbeatMs: 0,
    statusOnCreate: true,
  });
  const c = await bed.register({
    name: machineC.name,
    ips: machineC.nodeIPs,
    heartbeatMs: 0,
    statusOnCreate: true,
  });
  await healthyPhase(a);
  await offPhase(c);
  await faultPhase(a);
  await noLeaderPhase();
});

afterAll(async () => {
  await bed?.stop();
  // A failed promtool test keeps its files (printed) to read.
  if (dir && !keepDir) rmSync(dir, { recursive: true, force: true });
});

/** Runs `promtool test rules` on a test file; a failure keeps the test's files and prints promtool's output. */
function expectPromtoolTest(file: string): void {
  const r = run(tool("PROMTOOL"), ["test", "rules", file]);
  if (r.status !== 0) {
    keepDir = true;
    console.error(`${r.out}\n(the test's files are kept in ${dir})`);
  }
  expect(r.out).toContain("SUCCESS");
  expect(r.status).toBe(0);
}

/** The rendered PrometheusRule's rules. */
function rules(): { groups: unknown[]; rules: Rule[] } {
  const pr = objects.find((o) => o.kind === "PrometheusRule") as unknown as {
    spec: { groups: { rules: Rule[] }[] };
  };
  return { groups: pr.spec.groups, rules: pr.spec.groups.flatMap((g) => g.rules) };
}

/** The dashboard as the chart's ConfigMap holds it. */
function dashboardJSON(): string {
  const cm = objects.find(
    (o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"),
  ) as unknown as {
    data: Record<string, string>;
  };
  return cm.data["talos-cloud-controller-manager.json"] as string;
}

/** The dashboard's queries: each panel target's expr and the template variables' queries. */
function dashboardQueries(): string[] {
  const dash = JSON.parse(dashboardJSON()) as {
    panels: { targets: { expr: string }[] }[];
    templating: { list: { type: string; definition?: string }[] };
  };
  return [
    ...dash.panels.flatMap((p) => p.targets.map((t) => t.expr)),
    ...dash.templating.list.filter((v) => v.type === "query").map((v) => v.definition as string),
  ];
}

/** Every sample of the run (real scrapes only). */
function allSamples(): Sample[] {
  return steps.filter((s) => !s.held).flatMap((s) => s.samples ?? []);
}

/** The selectors no sample of the run matches (matchers on the scraper's target labels aside). */
function unmatched(sels: Selector[]): string[] {
  const samples = allSamples();
  return sels
    .filter(
      (sel) =>
        !samples.some(
          (s) =>
            s.name === sel.name &&
            sel.matchers.every((m) => TARGET_LABELS.includes(m.label) || matches(m, s.labels[m.label] ?? "")),
        ),
    )
    .map((sel) => sel.text);
}

/** The run's series of the metrics `names`, as promtool input_series (one value per step). */
function inputSeries(names: Set<string>): { series: string; values: string }[] {
  const byKey = new Map<string, string[]>();
  steps.forEach((step, i) => {
    for (const s of step.samples ?? []) {
      if (!names.has(s.name)) continue;
      const key = seriesKey(s.name, {
        ...s.labels,
        job: "talos-cloud-controller-manager",
        namespace: NAMESPACE,
        pod: step.pod,
      });
      const values = byKey.get(key) ?? Array.from({ length: steps.length }, () => "_");
      values[i] = String(s.value);
      byKey.set(key, values);
    }
  });
  // A series that a scrape no longer has (or a failed scrape) is marked stale, as Prometheus does.
  for (const values of byKey.values())
    for (let i = 1; i < values.length; i++)
      if (values[i] === "_" && values[i - 1] !== "_" && values[i - 1] !== "stale") values[i] = "stale";
  return [...byKey].map(([series, values]) => ({ series, values: values.join(" ") }));
}

/** A rule's annotations as Prometheus expands them for `value` and `labels`. */
function expand(rule: Rule, value: string, labels: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(rule.annotations))
    out[k] = v
      .replaceAll("{{ $value }}", value)
      .replace(/\{\{ \$labels\.(\w+) \}\}/g, (_, l) => labels[l] ?? "");
  return out;
}

describe("the chart's observability against a real run", () => {
  test("the chart renders a ServiceMonitor that scrapes the metrics port over HTTPS with its scraper's token, from a Secret", () => {
    const sm = objects.find((o) => o.kind === "ServiceMonitor") as unknown as {
      spec: { endpoints: unknown[] };
    };
    expect(sm.spec.endpoints).toEqual([
      {
        port: "metrics",
        path: "/metrics",
        scheme: "https",
        interval: "30s",
        tlsConfig: { insecureSkipVerify: true },
        authorization: { type: "Bearer", credentials: { name: SCRAPER, key: "token" } },
      },
    ]);
    const secret = objects.find((o) => o.kind === "Secret" && o.metadata.name === SCRAPER) as unknown as {
      type: string;
      metadata: { namespace: string; annotations: Record<string, string> };
    };
    expect(secret.type).toBe("kubernetes.io/service-account-token");
    expect(secret.metadata.namespace).toBe(NAMESPACE);
    expect(secret.metadata.annotations["kubernetes.io/service-account.name"]).toBe(SCRAPER);
    const svc = objects.find((o) => o.kind === "Service") as unknown as {
      spec: { ports: { name: string }[] };
    };
    expect(svc.spec.ports.map((p) => p.name)).toContain("metrics");
  });

  test("the ServiceMonitor and the PrometheusRule are the Prometheus Operator's types: no unknown or deprecated field, valid authorization and durations", () => {
    const file = join(dir, "monitoring.yaml");
    writeFileSync(file, renderChartText());
    const ok = run(tool("UPSTREAMCHECK"), ["monitoring", file]);
    expect(ok.out).toContain("checked PrometheusRule/obs-talos-cloud-controller-manager");
    expect(ok.out).toContain("checked ServiceMonitor/obs-talos-cloud-controller-manager");
    expect(ok.status).toBe(0);
    // The check can fail: the deprecated token file, as the chart rendered it by default before.
    writeFileSync(
      file,
      renderChartText("serviceMonitor.bearerTokenFile=/var/run/secrets/kubernetes.io/serviceaccount/token"),
    );
    const old = run(tool("UPSTREAMCHECK"), ["monitoring", file]);
    expect(old.out).toContain("endpoints[0]: bearerTokenFile is deprecated (use authorization)");
    expect(old.status).toBe(1);
  });

  test("the dashboard is Grafana's published dashboard schema: every panel, its options and its Prometheus targets", () => {
    const file = join(dir, "dashboard.json");
    writeFileSync(file, dashboardJSON());
    const ok = run(tool("UPSTREAMCHECK"), ["dashboard", file]);
    expect(ok.out.match(/^panel .* Prometheus targets?$/gm)?.length).toBe(15);
    expect(ok.status).toBe(0);
    const broken = JSON.parse(dashboardJSON()) as { panels: { options: Record<string, unknown> }[] };
    (broken.panels[0] as { options: Record<string, unknown> }).options.colour = "red";
    writeFileSync(file, JSON.stringify(broken));
    const bad = run(tool("UPSTREAMCHECK"), ["dashboard", file]);
    expect(bad.out).toContain("panels[0]");
    expect(bad.out).toContain("unexpected field 'colour'");
    expect(bad.status).toBe(1);
  });

  test("the chart's scraper ClusterRole lets its ServiceAccount get /metrics; another ServiceAccount is refused", () => {
    expect(access).toEqual({ bound: 200, unbound: 403 });
  });

  test("the dashboard ConfigMap carries the sidecar's label", () => {
    const cm = objects.find(
      (o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"),
    ) as unknown as {
      metadata: { labels: Record<string, string> };
    };
    expect(cm.metadata.labels.grafana_dashboard).toBe("1");
  });

  test("promtool check rules accepts the rendered rule groups", () => {
    const file = join(dir, "check.yaml");
    writeFileSync(file, stringify({ groups: rules().groups }));
    const r = run(tool("PROMTOOL"), ["check", "rules", file]);
    expect(r.out).toContain("SUCCESS: 5 rules found");
    expect(r.status).toBe(0);
  });

  test("every selector of the alert rules matches a series the run produced", () => {
    const sels = rules().rules.flatMap((r) => selectors(r.expr));
    expect(sels.length).toBeGreaterThanOrEqual(5);
    expect(unmatched(sels)).toEqual([]);
  });

  test("every query of the dashboard names a metric the binary exports, with label values it produced", () => {
    const sels = dashboardQueries().flatMap((q) => selectors(q));
    expect(sels.length).toBeGreaterThan(15);
    expect(unmatched(sels)).toEqual([]);
  });

  test("every query of the dashboard returns data when Prometheus' engine runs it on the run's series (promtool)", () => {
    // Grafana's variables as a dashboard viewer has them: every job, a 5-minute rate interval; a
    // label_values() variable asks for its series.
    const exprs = dashboardQueries().map((q) =>
      q
        .replaceAll("$job", ".*")
        .replaceAll("$__rate_interval", "5m")
        .replace(/^label_values\((.*), *\w+\)$/, "$1"),
    );
    const names = new Set(exprs.flatMap((q) => selectors(q).map((sel) => sel.name)));
    const file = join(dir, "dashboard.test.yaml");
    writeFileSync(join(dir, "empty-rules.yaml"), stringify({ groups: [] }));
    writeFileSync(
      file,
      stringify({
        rule_files: ["empty-rules.yaml"],
        evaluation_interval: "1m",
        tests: [
          {
            interval: "1m",
            input_series: inputSeries(names),
            // count(q) > bool 0 is one sample of 1 when q returns any series, none when it returns none.
            promql_expr_test: exprs.map((q) => ({
              expr: `count(${q}) > bool 0`,
              eval_time: `${marks.faultEnd}m`,
              exp_samples: [{ labels: "{}", value: 1 }],
            })),
          },
        ],
      }),
    );
    expect(exprs.length).toBeGreaterThan(15);
    expectPromtoolTest(file);
  });

  test("promtool test rules: each alert fires on the run's series when its condition was driven, none while healthy or for a machine off on purpose", () => {
    const { groups, rules: all } = rules();
    const rule = (name: string) => all.find((r) => r.alert === name) as Rule;
    const names = new Set(all.flatMap((r) => selectors(r.expr).map((s) => s.name)));
    const at = (k: string) => marks[k] as number;
    const warn = { severity: "warning", namespace: NAMESPACE };
    // Talos calls (not watches) about nodes whose status is known, by request: the alert fires at a
    // step when, at each of the 16 steps up to it (for: 15m), the counter rose within the 10 steps
    // before (rate over [10m] > 0), as its series show.
    const errors = (i: number, request: string) =>
      total(
        steps[i]?.samples ?? null,
        "talosccm_api_request_errors_total",
        (l) => l.request === request && l.node_status === "known",
      );
    const rising = (t: number, request: string) => errors(t, request) > errors(t - 9, request);
    const sustained = (t: number, request: string) =>
      Array.from({ length: 16 }, (_, k) => t - k).every((u) => rising(u, request));
    const allRequests = [
      ...new Set(
        allSamples()
          .filter(
            (s) => s.name === "talosccm_api_request_errors_total" && !s.labels.request?.startsWith("watch_"),
          )
          .map((s) => s.labels.request as string),
      ),
    ];
    const firingAt = at("talosErrors") + 17;
    const requests = allRequests.filter((r) => sustained(firingAt, r)).sort();
    const alert = (name: string, labels: Record<string, string>, value: string) => ({
      exp_labels: labels,
      exp_annotations: expand(rule(name), value, labels),
    });
    const cases = [
      ...all.map((r) => ({ eval_time: `${at("healthy")}m`, alertname: r.alert, exp_alerts: [] })),
      { eval_time: `${at("uninitialized") + 14}m`, alertname: "TalosCCMNodesUninitialized", exp_alerts: [] },
      {
        eval_time: `${at("uninitialized") + 16}m`,
        alertname: "TalosCCMNodesUninitialized",
        exp_alerts: [alert("TalosCCMNodesUninitialized", warn, "1")],
      },
      // The machine off on purpose: its watches down and its polls failing for longer than any `for`.
      { eval_time: `${at("off") + 16}m`, alertname: "TalosCCMTalosWatchesDown", exp_alerts: [] },
      { eval_time: `${at("off") + 16}m`, alertname: "TalosCCMTalosAPIErrors", exp_alerts: [] },
      { eval_time: `${at("watchesDown") + 9}m`, alertname: "TalosCCMTalosWatchesDown", exp_alerts: [] },
      {
        eval_time: `${at("watchesDown") + 11}m`,
        alertname: "TalosCCMTalosWatchesDown",
        exp_alerts: [alert("TalosCCMTalosWatchesDown", warn, "2")],
      },
      // Failures for less than 15 minutes do not page.
      { eval_time: `${at("talosErrors") + 14}m`, alertname: "TalosCCMTalosAPIErrors", exp_alerts: [] },
      {
        eval_time: `${firingAt}m`,
        alertname: "TalosCCMTalosAPIErrors",
        exp_alerts: requests.map((request) => alert("TalosCCMTalosAPIErrors", { ...warn, request }, "")),
      },
      {
        eval_time: `${at("csrBurst")}m`,
        alertname: "TalosCCMCSRDenialBurst",
        exp_alerts: [alert("TalosCCMCSRDenialBurst", warn, "")],
      },
      { eval_time: `${at("killed") + 3}m`, alertname: "TalosCCMNoLeader", exp_alerts: [] },
      {
        eval_time: `${at("killed") + 6}m`,
        alertname: "TalosCCMNoLeader",
        exp_alerts: [alert("TalosCCMNoLeader", { severity: "critical", name: LEASE }, "")],
      },
      {
        eval_time: `${at("backup") + 6}m`,
        alertname: "TalosCCMNoLeader",
        exp_alerts: [alert("TalosCCMNoLeader", { severity: "critical", namespace: NAMESPACE }, "")],
      },
    ];
    // Machine A's polls (its watches down, its kubelet posting) failed all along.
    expect(requests).toContain("platformmetadata");
    expect(steps.length).toBeGreaterThan(at("backup") + 6);
    writeFileSync(join(dir, "rules.yaml"), stringify({ groups }));
    const input = inputSeries(names);
    // Every metric the rules name is in the input, from the run.
    expect([...names].filter((n) => !input.some((s) => s.series.startsWith(`${n}{`)))).toEqual([]);
    const file = join(dir, "rules.test.yaml");
    writeFileSync(
      file,
      stringify({
        rule_files: ["rules.yaml"],
        evaluation_interval: "1m",
        tests: [{ interval: "1m", input_series: input, alert_rule_test: cases }],
      }),
    );
    expectPromtoolTest(file);
  });
});
