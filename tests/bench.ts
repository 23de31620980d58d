// `npm run bench -- --nodes N [--json]`: runs the compiled binary on the test bed (real
// kube-apiserver + etcd, the fake Talos apid serving N generated nodes, N simulated kubelets) and
// measures, in one run, start-up time, idle memory, initialization and CSR approval of N nodes,
// peak memory, memory settled after them (total RSS and its anonymous part, each at the peak and
// settled) and CPU for them, Talos calls at initialization and in steady state, and Kubernetes
// requests per node. Prints a table with each figure against its budget
// (tests/support/bench-report.ts), or with --json one object with the figures' keys (FIGURE_KEYS:
// `nodes`, then startup_ms, idle_rss_mb, init_s, csr_s, rss_mb, settled_rss_mb, peak_anon_mb,
// settled_anon_mb, cpu_s, talos_calls_per_node, talos_calls_per_csr, talos_calls_per_node_hour,
// kube_requests_per_node).
//
// `npm run bench -- --nodes A,B,... [--repeat K] [--json]`: the whole measurement at each size, one
// after the other, each on a fresh API server, etcd and fake apid, K rounds of all sizes; prints each
// run's table (with K > 1: on stderr, and on stdout each size's medians with every run's value), then
// between consecutive sizes the slopes of peak and settled RSS in MiB per 1,000 nodes (issue 15:
// budget 13, applied between N = 100 and 1,000) and of peak and settled anonymous memory in KiB per
// node (issue 29: budget 10, applied between N = 1,000 and 5,000); with K > 1, of the medians, each
// round's after them. `--slope [--slope-nodes A,B]` is `--nodes 100,1000` (`--nodes A,B`). With
// --json, one object (bench-report.ts multiJson): {"runs": [...], "medians": [...] with K > 1,
// "slopes": [{from, to, peak_slope_mb_per_1000, settled_slope_mb_per_1000, peak_anon_kib_per_node,
// settled_anon_kib_per_node}], and with two sizes those four keys at the top too}.
//
// `npm run bench -- --nodes N --hostile <kind>[,<kind>...] [--repeat K] [--json]`: the blast radius of
// one hostile peer among N nodes (issue 40). Each kind runs as its own run on a fresh test bed, kinds
// in the order given, round by round (`none, k1, k2, ..., none, k1, ...`) so drift hits all alike:
// none (the clean run), address-flood, flap, csr-max, big-node, api-load (a control: the API server's
// share of big-node; tests/support/bench-hostile-peer.ts).
// Node N-1 is the hostile peer: it registers when the CCM leads and keeps up its activity to the end;
// then the N - 1 honest kubelets register (init_s), submit their serving CSRs (csr_s), and
// --latency-changes Talos address changes of honest machines spread over --latency-seconds are
// timed to their Nodes' status.addresses (latency_p50_ms, latency_p99_ms; tests/support/
// bench-latency.ts), with the CCM's peak RSS over the whole run. No start-up, idle or steady-state
// phase. Each kind's table gives the medians against none's, the ratio (RSS: the difference) and the
// issue's criteria (p99 latency and init_s within 1.2x, peak RSS within +20 MiB); --json prints
// {nodes, repeat, kinds, criteria, runs, medians, vs_none} (tests/support/bench-hostile.ts).
//
// Budgets are reported, never asserted: the exit code is 0 whenever the run completes. Every process
// and temp dir is cleaned up on exit, error or Ctrl-C (after each run of several). `--help` lists
// the flags.
//
// The CCM runs with the shipped DaemonSet's arguments (lib/manifests.ts daemonSetArgs: --v=2,
// leader election, --controllers=cloud-node,node-csr-approval, ...) plus a kubeconfig, a free
// --secure-port on 127.0.0.1 and the cluster-size QPS tuning. Phases, in order, against one cluster:
//   1. startup_ms: default controllers, the shipped ccm-config.yaml, no nodes: exec → /healthz 200,
//      median of --startup-runs.
//   2. idle_rss_mb: the same, VmRSS --idle-seconds after exec.
//   3. The DaemonSet's controllers, with a cloud config holding one rule over PlatformMetadata
//      (--sysinfo-rule: one that also reads SystemInformation; --no-rules: none); once it leads
//      (/healthz 200, then its leader-election Lease acquired and renewed once: the same test for
//      any binary, no log line of ours): N kubelets register at once (at most
//      --concurrency in flight) → every Node loses the uninitialized taint (init_s); then each
//      kubelet submits a kubelet-serving CSR → all approved (csr_s). cpu_s and
//      kube_requests_per_node cover both; talos_calls_per_node covers initialization (until no
//      Talos call came for a second), talos_calls_per_csr the CSRs.
//   4. Steady state: Talos calls over --steady-seconds, scaled to per node per hour; rss_mb is the
//      CCM's VmHWM at the end (or the highest VmRSS sampled, if higher), settled_rss_mb its VmRSS at
//      the end.
//
// --talos apid serves the N machines from the Talos simulator with Talos' own apid in front (the
// CCM's talosconfig endpoint is apid, as on a cluster; tests/support/bench-talos.ts) and reports
// apid's own RSS and CPU beside the CCM's, and the control plane's total (CCM + apid); the default,
// --talos fake, is the in-process fake apid. With --talos apid the CCM (ours or --ccm-binary's) runs
// in the simulator's network namespace (nsenter; TalosSim.netns), where every machine's apid
// answers at <ip>:50000 as on a cluster and the talosconfig's endpoint reaches apid: the API
// server's address is forwarded in and each start's --secure-port exposed on the host, at the same
// addresses, so /healthz, the Lease and the /proc readings are taken as on the host; a note says
// so. --ccm-netns=false runs it on the host instead (the floor always runs on the host).
//
// --ccm-binary PATH benches another binary the same way, e.g. the Go CCM this one replaces: it gets
// the same arguments (all upstream flags) and environment (TALOSCONFIG), and every figure is read
// outside the process (/proc, the fake apid's call counts, the API server's audit log).

import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, readFileSync, readlinkSync } from "node:fs";
import { cpus } from "node:os";
import { join, resolve } from "node:path";
import type { RunOptions } from "../lib/flags.ts";
import { parseCommandLine } from "../lib/flags.ts";
import { isNotFound } from "../lib/kubeapi.ts";
import { Informer } from "../lib/kubecache.ts";
import type { KubeConnection } from "../lib/kubeconfig.ts";
import { DEFAULT_CLOUD_CONFIG, daemonSetArgs, defaultSettings } from "../lib/manifests.ts";
import { MemoryCgroup } from "./support/bench-cgroup.ts";
import {
  formatHostileTable,
  formatSummary,
  type HostileFigures,
  type HostileKind,
  hostileJson,
  hostileMultiJson,
  latencyFigures,
  parseHostileKinds,
} from "./support/bench-hostile.ts";
import { createPeer, type HostilePeer, hostileSpec } from "./support/bench-hostile-peer.ts";
import { auditEpochMs, ccmWriteDelays, PatchLatency } from "./support/bench-latency.ts";
import {
  cpuByGroup,
  formatCpuUse,
  type ProcSample,
  procSample,
  RssSampler,
  SumRssSampler,
} from "./support/bench-proc.ts";
import { LeaseReadiness, type LeaseSpecView } from "./support/bench-ready.ts";
import {
  type ApidFigures,
  apidJson,
  type BenchFigures,
  formatApidTable,
  formatMedianTable,
  formatSlopes,
  formatTable,
  median,
  multiJson,
  SLOPE_NODES,
  toJson,
} from "./support/bench-report.ts";
import {
  apidTalos,
  type BenchNetns,
  type BenchTalos,
  fakeTalos,
  type TalosKind,
} from "./support/bench-talos.ts";
import { freePort, TestCluster, writeKubeconfig } from "./support/cluster.ts";
import { type FakeNodeSpec, generateNodes } from "./support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "./support/kubelet.ts";
import { createCSR } from "./support/pki.ts";
import { CcmProcess, ccmBinary } from "./support/process.ts";

const root = join(import.meta.dir, "..");
const MiB = 1024 * 1024;
/** The CCM's own API user: the audit policy logs its requests only. */
const CCM_USER = "talos-ccm-bench";
/** The shipped DaemonSet's arguments; the bench replaces the paths and ports. */
const DAEMONSET_ARGS = daemonSetArgs(defaultSettings("bench"));
const N_PHASE_CONTROLLERS =
  DAEMONSET_ARGS.find((a) => a.startsWith("--controllers="))?.slice("--controllers=".length) ?? "cloud-node";

const USAGE = `Usage: npm run bench -- --nodes N [flags]
       npm run bench -- --nodes A,B,... [--repeat K] [flags]
       npm run bench -- --slope [--slope-nodes A,B] [flags]
       npm run bench -- --nodes N --hostile KIND[,KIND...] [--repeat K] [flags]

The CCM runs with the cluster-size tuning an operator adding N nodes at once would use:
--kube-api-qps=N/5 --kube-api-burst=2×that above N = 100 (initialization writes twice per node, so
N nodes take ~10 s of client-side rate limit), unless --no-qps-tuning or a --ccm-arg sets them.

  --nodes N              simulated nodes (default 100)
  --nodes A,B,...        run at each size in turn (ascending; fresh test bed each), print each table,
                         then between consecutive sizes the peak and settled RSS slopes (MiB per
                         1,000 nodes) and the peak and settled anonymous memory per node (KiB; budget
                         <= 10 applied between N = 1000 and 5000, e.g. --nodes 1000,5000)
  --repeat K             run every size K times, round by round; print each size's median of every
                         figure with each run's value, and the slopes of the medians with each
                         round's (each run's full table goes to stderr)
  --slope                run everything twice, at N = ${SLOPE_NODES[0]} and N = ${SLOPE_NODES[1]} (fresh test bed each), print
                         both tables and the slopes as --nodes ${SLOPE_NODES[0]},${SLOPE_NODES[1]} does (not with --nodes)
  --slope-nodes A,B      the two sizes of --slope instead (A < B; implies --slope); the slope budgets
                         apply between ${SLOPE_NODES[0]} and ${SLOPE_NODES[1]} only, other sizes report
  --json                 print one JSON object instead of the table (the notes go to stderr); with
                         several sizes or --repeat {"runs": [...], "medians": [...] (K > 1),
                         "slopes": [{"from", "to", "peak_slope_mb_per_1000",
                         "settled_slope_mb_per_1000", "peak_anon_kib_per_node",
                         "settled_anon_kib_per_node"}]}, with two sizes those keys at the top too
  --hostile KIND,...     the blast radius of one hostile peer among N (node N-1), each kind its own run
                         on a fresh test bed, round by round in the order given: none (clean),
                         address-flood, flap, csr-max, big-node, api-load (a control), or all. Reports the N-1 honest nodes'
                         init_s, csr_s and event-to-patch latency (p50, p99) and the CCM's peak RSS,
                         each kind against none (criteria: p99 latency and init within 1.2x, RSS
                         within +20 MiB, on the medians); no start-up, idle or steady phases
  --latency-changes C    with --hostile: Talos address changes of honest machines timed (default 300)
  --latency-seconds S    with --hostile: the window they are spread over (default 30; each change at a random, seeded moment of its own slot)
  --no-build             reuse dist/ (or CCM_BINARY) instead of building the host binary
  --ccm-binary PATH      bench that binary instead, e.g. the Go CCM (implies --no-build; the flag
                         form of CCM_BINARY). It gets the same arguments as ours, so it must accept
                         upstream's flags; readiness is /healthz and the Lease for any binary
  --floor                the floor (issue 43): tests/support/bench-floor.ts in place of the CCM, issuing
                         the same Node writes and CSR approvals through this project's Kubernetes
                         client with the same QPS, and nothing else (no Talos read, no check, no
                         Event: the CCM records them through a client of its own); its init_s and
                         csr_s are what the API server and the client rate limit allow, each CCM's
                         times a ratio to them. No startup or idle phase
  --ccm-arg=FLAG         extra CCM flag for every start, repeatable; the table's header names them
  --no-qps-tuning        run the CCM with the project's --kube-api-qps/--kube-api-burst defaults
                         (20/30, upstream's) instead of the cluster-size tuning below
  --ccm-env=K=V          extra environment for the CCM, repeatable (e.g. BUN_OPTIONS=--cpu-prof-md
                         to profile; the bench's own figures then include the profiler's cost)
  --sysinfo-rule         the rule also reads SystemInformation (one more Talos call per node, the
                         most a node costs; default: a rule over PlatformMetadata only)
  --no-rules             run with the shipped (empty) cloud config
  --talos fake|apid      who serves the N machines: the in-process fake apid (default), or the Talos
                         simulator behind Talos' own apid (TALOS_SIM, TALOS_APID; needs root or
                         unprivileged user namespaces), the CCM's talosconfig endpoint being apid;
                         then apid's RSS and CPU and the control plane's total (CCM + apid) are
                         reported too, apid running with Talos' GOMEMLIMIT (APID_GOMEMLIMIT=n|off
                         overrides it). Talos calls are counted where they reach a machine, at
                         their start, in both modes
  --ccm-netns=false      with --talos apid: run the CCM on the host instead of in the simulator's
                         network namespace (the default: there every machine's apid answers at
                         <ip>:50000, as on a cluster; the API server's address is forwarded in and
                         the CCM's --secure-port exposed on the host at the same address)
  --steady-seconds S     steady-state window (default 60); a CCM that polls Talos every
                         --node-status-update-frequency (5 min; the Go CCM does) shows it only in a
                         window longer than that, e.g. 330
  --idle-seconds S       wait before reading idle RSS (default 10)
  --startup-runs K       starts for the startup median (default 5)
  --concurrency C        kubelet registrations / CSR submissions in flight (default 64)
  --timeout-seconds S    limit of each of the init and CSR phases (default 900)
  --ccm-log=FILE         write the N-node CCM's log there (with several sizes FILE.N, with --repeat
                         FILE.N.ROUND)
  --memory-limit MiB     run every CCM start in a memory cgroup with this limit (as a container's
                         resources.limits.memory; needs root); the notes count its OOM kills
  --verbose              echo the CCM's log to stderr`;

interface BenchArgs {
  /** The size of this run: sizes[0] as parsed, each size in turn for a run over several. */
  nodes: number;
  /** Every size to run, ascending: --nodes N, --nodes A,B,..., or --slope's two (--slope-nodes A,B). */
  sizes: number[];
  /** --repeat K: each size K times, round by round; medians reported. */
  repeat: number;
  json: boolean;
  build: boolean;
  /** --ccm-binary: the binary to bench instead of ours (CCM_BINARY's flag form). */
  ccmBinary: string | undefined;
  ccmArgs: string[];
  ccmEnv: Record<string, string>;
  qpsTuning: boolean;
  ccmLog: string | undefined;
  /** The N-node cloud config: a PlatformMetadata rule, one also reading SystemInformation, or none. */
  rules: "metadata" | "sysinfo" | "none";
  /** --talos: the fake apid, or the simulator behind Talos' apid. */
  talos: TalosKind;
  /** --ccm-netns: with --talos apid, the CCM runs in the simulator's network namespace (default). */
  ccmNetns: boolean;
  steadySeconds: number;
  idleSeconds: number;
  startupRuns: number;
  concurrency: number;
  timeoutSeconds: number;
  verbose: boolean;
  /** --hostile: the blast-radius runs' kinds, in order; undefined for the plain bench. */
  hostile: HostileKind[] | undefined;
  /** --latency-changes and --latency-seconds: the honest address changes timed with --hostile. */
  latencyChanges: number;
  latencySeconds: number;
  /** --memory-limit MiB: each CCM start runs in a memory cgroup with this limit, as a container would. */
  memoryLimitMiB: number | undefined;
  /** --floor: tests/support/bench-floor.ts in place of the CCM (the same writes, nothing else). */
  floor: boolean;
}

/**
 * Parses the bench's command line.
 * @throws {Error} on unknown flags or bad numbers.
 */
export function parseBenchArgs(argv: readonly string[]): BenchArgs {
  const out: BenchArgs = {
    nodes: 100,
    sizes: [100],
    repeat: 1,
    json: false,
    build: true,
    ccmBinary: undefined,
    ccmArgs: [],
    ccmEnv: {},
    qpsTuning: true,
    ccmLog: undefined,
    rules: "metadata",
    talos: "fake",
    ccmNetns: true,
    steadySeconds: 60,
    idleSeconds: 10,
    startupRuns: 5,
    floor: false,
    concurrency: 64,
    timeoutSeconds: 900,
    verbose: false,
    hostile: undefined,
    latencyChanges: 300,
    latencySeconds: 30,
    memoryLimitMiB: undefined,
  };
  const numeric = {
    "--repeat": "repeat",
    "--steady-seconds": "steadySeconds",
    "--idle-seconds": "idleSeconds",
    "--startup-runs": "startupRuns",
    "--concurrency": "concurrency",
    "--timeout-seconds": "timeoutSeconds",
    "--latency-changes": "latencyChanges",
    "--latency-seconds": "latencySeconds",
    "--memory-limit": "memoryLimitMiB",
  } as const;
  let nodesGiven: number[] | undefined;
  let slopeNodes: number[] | undefined;
  let netnsGiven = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const eq = arg.indexOf("=");
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    const value = () => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`Cannot parse ${name}: a value is required`);
      return v;
    };
    if (name === "--json") out.json = true;
    else if (name === "--floor") out.floor = true;
    else if (name === "--slope") slopeNodes ??= [...SLOPE_NODES];
    else if (name === "--slope-nodes") slopeNodes = parseSlopeNodes(value());
    else if (name === "--nodes") nodesGiven = parseSizes(value());
    else if (name === "--no-build") out.build = false;
    else if (name === "--no-rules") out.rules = "none";
    else if (name === "--sysinfo-rule") out.rules = "sysinfo";
    else if (name === "--no-qps-tuning") out.qpsTuning = false;
    else if (name === "--verbose") out.verbose = true;
    else if (name === "--ccm-arg") out.ccmArgs.push(value());
    else if (name === "--ccm-log") out.ccmLog = value();
    else if (name === "--ccm-netns") {
      if (inline !== undefined && inline !== "true" && inline !== "false")
        throw new Error(`Cannot parse --ccm-netns=${inline}: expected true or false`);
      out.ccmNetns = inline !== "false";
      netnsGiven = out.ccmNetns;
    } else if (name === "--hostile") out.hostile = parseHostileKinds(value());
    else if (name === "--talos") {
      const v = value();
      if (v !== "fake" && v !== "apid") throw new Error(`Cannot parse --talos=${v}: expected fake or apid`);
      out.talos = v;
    } else if (name === "--ccm-binary") {
      const path = value();
      if (path === "") throw new Error("Cannot parse --ccm-binary: a path is required");
      out.ccmBinary = path;
    } else if (name === "--ccm-env") {
      const kv = value();
      const at = kv.indexOf("=");
      if (at <= 0) throw new Error(`Cannot parse --ccm-env=${kv}: expected NAME=VALUE`);
      out.ccmEnv[kv.slice(0, at)] = kv.slice(at + 1);
    } else if (name in numeric) {
      const v = value();
      const n = Number(v);
      if (!Number.isInteger(n) || n <= 0)
        throw new Error(`Cannot parse ${name}=${v}: expected a positive integer`);
      out[numeric[name as keyof typeof numeric]] = n;
    } else throw new Error(`Cannot parse ${arg}: unknown flag\n\n${USAGE}`);
  }
  if (slopeNodes && nodesGiven)
    throw new Error("Cannot combine --nodes with --slope: --slope-nodes A,B sets its two sizes");
  out.sizes = slopeNodes ?? nodesGiven ?? out.sizes;
  out.nodes = out.sizes[0] as number;
  if (out.ccmBinary !== undefined) out.build = false;
  if (netnsGiven && out.talos !== "apid")
    throw new Error(
      "Cannot run the CCM in the simulator's network namespace (--ccm-netns) without --talos apid",
    );
  if (out.hostile) checkHostileArgs(out, slopeNodes !== undefined);
  return out;
}

/**
 * --hostile measures one size with the in-process fake apid (it plays the hostile machine's Talos).
 * @throws {Error} with --slope, several sizes, --talos apid, or fewer than 2 nodes.
 */
function checkHostileArgs(a: BenchArgs, slope: boolean): void {
  if (slope || a.sizes.length > 1)
    throw new Error("Cannot combine --hostile with --slope or several sizes: give one --nodes N");
  if (a.talos !== "fake")
    throw new Error("Cannot combine --hostile with --talos apid: the fake apid plays the hostile machine");
  if (a.nodes < 2) throw new Error("Cannot run --hostile with fewer than 2 nodes: one is the hostile peer");
}

/** `N` or `A,B,...`: positive integers, ascending. */
function parseSizes(v: string): number[] {
  const parts = v.split(",").map((x) => Number(x.trim()));
  if (!parts.every((n) => Number.isInteger(n) && n > 0))
    throw new Error(`Cannot parse --nodes=${v}: expected a positive integer or a list A,B,... of them`);
  if (parts.some((n, i) => i > 0 && n <= (parts[i - 1] as number)))
    throw new Error(`Cannot parse --nodes=${v}: the sizes must ascend`);
  return parts;
}

/** `A,B`: two positive integers, A < B. */
function parseSlopeNodes(v: string): [number, number] {
  const parts = v.split(",").map((x) => Number(x.trim()));
  const [a, b] = parts as [number, number];
  if (parts.length !== 2 || !parts.every((n) => Number.isInteger(n) && n > 0) || a >= b)
    throw new Error(`Cannot parse --slope-nodes=${v}: expected A,B, two positive integers with A < B`);
  return [a, b];
}

/**
 * The client-side rate limit for N nodes joining at once: a cluster-size tuning, not the project's
 * default (upstream's 20/30, kept for compatibility and for API servers sharing two cores with
 * etcd). Initialization writes twice per node (JSON patch, Event): N/5 QPS initializes N nodes in
 * ~10 s of rate limit. Measured at N = 1,000 on 2 cores: 20 QPS 98 s, 50 QPS 38 s, 100 QPS 19 s,
 * 200 QPS 11 s. Empty when the defaults do, tuning is off, or the caller set either flag.
 */
export function qpsTuning(args: Pick<BenchArgs, "nodes" | "qpsTuning" | "ccmArgs">): string[] {
  if (!args.qpsTuning || args.ccmArgs.some((a) => /^--kube-api-(qps|burst)\b/.test(a))) return [];
  const qps = Math.ceil(args.nodes / 5);
  if (qps <= 20) return []; // the defaults already do
  return [`--kube-api-qps=${qps}`, `--kube-api-burst=${2 * qps}`];
}

/** The bench's cloud config: one rule for every node, over PlatformMetadata (and SystemInformation). */
function rulesConfig(sysinfo: boolean): string {
  return `global:
  clusterName: bench
transformations:
  - name: bench
    nodeSelector:
      - matchExpressions:
          - key: platform
            operator: In
            values: ["nocloud"]
    labels:
      example.com/instance-id: "{{ .InstanceID }}"
      example.com/placement: "{{ .Region }}-{{ .Zone }}"
${sysinfo ? '      example.com/system-uuid: "{{ .UUID }}"\n' : ""}`;
}

/** Logs the CCM's user at Metadata for every verb, once per request (RequestReceived only). */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
  - level: Metadata
    users: ["${CCM_USER}"]
  - level: None
`;

const started = performance.now();
function progress(message: string): void {
  const s = ((performance.now() - started) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[bench ${s}s] ${message}\n`);
}

// ---------------------------------------------------------------------------------------------
// Clean-up: every started resource registers its stop; run in reverse on exit, error or signal.

const cleanups: Array<() => Promise<void> | void> = [];
let cleaning: Promise<void> | undefined;
/** Runs the registered stops; a call while one is under way joins it, a later one runs newer stops. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const fn of cleanups.splice(0).reverse()) {
      try {
        await fn();
      } catch (err) {
        process.stderr.write(`bench: clean-up step failed: ${(err as Error).message}\n`);
      }
    }
  })().finally(() => {
    cleaning = undefined;
  });
  return cleaning;
}
function cleanUpOnSignals(): void {
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(sig, () => {
      process.stderr.write(`\nbench: ${sig}, cleaning up\n`);
      void cleanup().finally(() => process.exit(130));
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/** Runs `fn` over `items` with at most `limit` in flight; the first error rejects (after in-flight ones end). */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>) {
  let next = 0;
  let failed: unknown;
  const worker = async () => {
    while (next < items.length && failed === undefined) {
      const i = next++;
      try {
        await fn(items[i] as T, i);
      } catch (err) {
        failed ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed !== undefined) throw failed;
}

function countBy<T>(items: readonly T[], key: (t: T) => string): string {
  const m = new Map<string, number>();
  for (const t of items) m.set(key(t), (m.get(key(t)) ?? 0) + 1);
  return [...m.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
}

/**
 * Finds kube-apiserver and etcd (and with --talos apid the simulator and apid) as tests/run.ts does:
 * the environment, else tests/support/testbed-bins.sh, which builds what is missing.
 */
function ensureTestbed(talos: TalosKind): void {
  const env = process.env;
  const kube = Boolean(env.KUBEBUILDER_ASSETS || (env.KUBE_APISERVER && env.ETCD));
  if (kube && (talos === "fake" || (env.TALOS_SIM && env.TALOS_APID))) return;
  const r = spawnSync(join(root, "tests/support/testbed-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (r.status !== 0) throw new Error("Cannot build the test bed's binaries (see above)");
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(KUBE_APISERVER|ETCD|TALOS_SIM|TALOS_APID)=(.+)$/);
    if (m) env[m[1] as string] ??= m[2];
  }
}

/** The first line `binary --version` prints (ours and the Go CCM both have the flag), or why not. */
function binaryVersion(path: string): string {
  const r = spawnSync(path, ["--version"], { encoding: "utf8", timeout: 10_000 });
  const line = `${r.stdout ?? ""}${r.stderr ?? ""}`.trim().split("\n")[0];
  return r.status === 0 && line ? line : `--version failed: ${line || r.error?.message || r.status}`;
}

function buildBinary(): void {
  const arch = process.arch === "arm64" ? "arm64" : "amd64";
  progress(`building the host binary (bun build.ts --target=${arch})`);
  const r = spawnSync(process.execPath, [join(root, "build.ts"), `--target=${arch}`], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  if (r.status !== 0) throw new Error(`Cannot build the binary:\n${r.stdout}\n${r.stderr}`);
  progress(r.stdout.trim().split("\n")[0] ?? "built");
}

/** A lean cached view of one object: whether it reached the state a phase waits for. */
interface Progressed {
  metadata: { name: string; resourceVersion?: string };
  done: boolean;
  failed?: string;
}

/**
 * Watches a collection and records when `target` objects are done. The informer is started before
 * the phase so no event is missed.
 */
class Completion {
  readonly informer: Informer<Progressed>;
  readonly done = new Set<string>();
  readonly failed = new Map<string, string>();
  target = Number.POSITIVE_INFINITY;
  reachedAt: number | undefined;

  /** @param fieldSelector leaves objects out of the watch (e.g. a hostile peer's big Node). */
  constructor(
    cluster: TestCluster,
    path: string,
    transform: (raw: unknown) => Progressed,
    fieldSelector?: string,
  ) {
    this.informer = new Informer(cluster.adminClient, {
      path,
      transform,
      ...(fieldSelector === undefined ? {} : { fieldSelector }),
    });
    const see = (o: Progressed) => {
      if (o.done) this.done.add(o.metadata.name);
      else this.done.delete(o.metadata.name);
      if (o.failed) this.failed.set(o.metadata.name, o.failed);
      if (this.reachedAt === undefined && this.done.size >= this.target) this.reachedAt = performance.now();
    };
    this.informer.addHandlers({
      onAdd: see,
      onUpdate: (_, o) => see(o),
      onDelete: (o) => this.done.delete(o.metadata.name),
    });
  }

  async start(): Promise<void> {
    this.informer.start();
    await this.informer.waitForSync();
  }

  /** Waits until `target` objects are done; returns the moment it happened, or undefined on timeout. */
  /** @param gone stops the wait early when it returns true (e.g. the CCM exited). */
  async waitFor(
    target: number,
    timeoutMs: number,
    what: string,
    gone: () => boolean = () => false,
  ): Promise<number | undefined> {
    this.target = target;
    if (this.done.size >= target) this.reachedAt ??= performance.now();
    const deadline = performance.now() + timeoutMs;
    let lastReport = performance.now();
    while (this.reachedAt === undefined && performance.now() < deadline && !gone()) {
      await Bun.sleep(50);
      if (performance.now() - lastReport > 10_000) {
        lastReport = performance.now();
        progress(
          `  ${what}: ${this.done.size}/${target}${this.failed.size ? `, ${this.failed.size} failed` : ""}`,
        );
      }
    }
    return this.reachedAt;
  }
}

function nodeProgress(raw: unknown): Progressed {
  const n = raw as {
    metadata: { name: string; resourceVersion?: string };
    spec?: { taints?: { key: string }[] };
  };
  return {
    metadata: { name: n.metadata.name },
    done: !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT),
  };
}

function csrProgress(raw: unknown): Progressed {
  const c = raw as {
    metadata: { name: string };
    status?: { conditions?: { type: string; status: string; message?: string }[] };
  };
  const conds = c.status?.conditions ?? [];
  const denied = conds.find((x) => (x.type === "Denied" || x.type === "Failed") && x.status === "True");
  const out: Progressed = {
    metadata: { name: c.metadata.name },
    done: conds.some((x) => x.type === "Approved" && x.status === "True"),
  };
  if (denied) out.failed = `${denied.type}: ${denied.message ?? ""}`;
  return out;
}

/** Polls /healthz over HTTPS until 200; returns milliseconds since `since`. */
async function waitHealthz(
  port: number,
  ccm: CcmProcess,
  since: number,
  timeoutMs = 30_000,
): Promise<number> {
  const deadline = since + timeoutMs;
  while (performance.now() < deadline) {
    if (ccm.exitCode !== null)
      throw new Error(`The CCM exited (${ccm.exitCode}):\n${ccm.output.slice(-3000)}`);
    const ok = await fetch(`https://127.0.0.1:${port}/healthz`, { tls: { rejectUnauthorized: false } })
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ok) return performance.now() - since;
    await Bun.sleep(1);
  }
  throw new Error(`The CCM did not serve /healthz within ${timeoutMs} ms:\n${ccm.output.slice(-3000)}`);
}

// ---------------------------------------------------------------------------------------------
// The run

interface Env {
  args: BenchArgs;
  cluster: TestCluster;
  talos: BenchTalos;
  specs: FakeNodeSpec[];
  baseArgs: string[];
  /** --cloud-config for startup and idle (the shipped file) and for the N-node phases. */
  defaultConfig: string;
  nodesConfig: string;
  env: Record<string, string>;
  /** The leader-election Lease the CCM holds once leading; undefined with --leader-elect=false. */
  lease: LeaseRef | undefined;
  /** With --talos apid: apid's reading with the machines seeded, before the CCM's first start. */
  apidIdle?: ProcSample;
  /** With --talos apid (and not --ccm-netns=false): the namespace the CCM runs in. */
  netns?: BenchNetns;
}

interface LeaseRef {
  namespace: string;
  name: string;
  /** How long to wait for the CCM to lead: a dead predecessor's claim must expire first. */
  timeoutMs: number;
}

const leasePath = (l: LeaseRef) => `/apis/coordination.k8s.io/v1/namespaces/${l.namespace}/leases/${l.name}`;

/** The Lease's spec, or undefined when there is no Lease. */
async function readLease(e: Env, lease: LeaseRef): Promise<LeaseSpecView | undefined> {
  try {
    return (await e.cluster.adminClient.get<{ spec?: LeaseSpecView }>(leasePath(lease))).spec ?? {};
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * Deletes the Lease before a start, once the previous CCM has exited, so every start of every binary
 * finds none. A binary that leaves its claim behind on SIGTERM (the Go CCM does not release it; ours
 * does) would otherwise idle as a standby for the lease duration: not leading at the idle reading,
 * and 15 s late to lead in the N-node phases.
 */
async function clearLease(e: Env): Promise<void> {
  if (!e.lease) return;
  await e.cluster.adminClient.delete(leasePath(e.lease)).catch((err: unknown) => {
    if (!isNotFound(err)) throw err;
  });
}

/** Polls the Lease until the CCM started after `baseline` was read holds it and renewed it; returns the holder. */
async function waitLeading(
  e: Env,
  lease: LeaseRef,
  ccm: CcmProcess,
  baseline: LeaseSpecView | undefined,
): Promise<string> {
  const ready = new LeaseReadiness(baseline);
  const deadline = performance.now() + lease.timeoutMs;
  while (performance.now() < deadline) {
    if (ccm.exitCode !== null)
      throw new Error(`The CCM exited (${ccm.exitCode}):\n${ccm.output.slice(-3000)}`);
    if (ready.observe(await readLease(e, lease))) return ready.holder as string;
    await Bun.sleep(100);
  }
  throw new Error(
    `The CCM did not acquire and renew Lease ${lease.namespace}/${lease.name} within ${lease.timeoutMs} ms` +
      ` (holder seen: ${ready.holder ?? "none"}):\n${ccm.output.slice(-3000)}`,
  );
}

/** Starts the CCM with the shipped arguments plus `extra`. */
/** The memory cgroups the CCM ran in (--memory-limit), one per start. */
const memoryCgroups: MemoryCgroup[] = [];

/**
 * A free port for a CCM start's --secure-port; with the CCM in the simulator's namespace, exposed on
 * the host at the same address (a new port each start: never one a previous CCM's sockets hold).
 */
async function ccmPort(e: Env): Promise<number> {
  const port = await freePort();
  if (e.netns) await e.netns.expose(`127.0.0.1:${port}`);
  return port;
}

function startCcm(e: Env, extra: string[], port: number): CcmProcess {
  const limit = e.args.memoryLimitMiB;
  const cgroup = limit === undefined ? undefined : MemoryCgroup.create(limit * MiB);
  if (cgroup) {
    memoryCgroups.push(cgroup);
    cleanups.push(() => cgroup.remove()); // runs after the CCM's stop below (cleanups run newest first)
  }
  const ccm = new CcmProcess([...e.baseArgs, `--secure-port=${port}`, ...extra, ...e.args.ccmArgs], {
    env: e.env,
    echo: e.args.verbose,
    ...(cgroup ? { cgroup: cgroup.dir } : {}),
    ...(e.netns ? { netns: e.netns.path } : {}),
  });
  cleanups.push(async () => {
    if (ccm.exitCode === null) await ccm.stop("SIGKILL");
  });
  return ccm;
}

/**
 * With the CCM in the simulator's namespace: fails unless it is there (its /proc/<pid>/ns/net is the
 * simulator's), once it serves.
 */
function checkInNetns(e: Env, ccm: CcmProcess): void {
  if (!e.netns) return;
  const [ccmNs, simNs] = [`/proc/${ccm.pid}/ns/net`, e.netns.path].map((p) => readlinkSync(p));
  if (ccmNs !== simNs)
    throw new Error(
      `The CCM (pid ${ccm.pid}) runs in ${ccmNs}, not in the simulator's network namespace ${simNs}`,
    );
}

async function stopCcm(ccm: CcmProcess): Promise<void> {
  const code = await ccm.stop("SIGTERM");
  if (code !== 0) progress(`  note: the CCM exited ${code} on SIGTERM`);
}

async function measureStartup(e: Env): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < e.args.startupRuns; i++) {
    const port = await ccmPort(e);
    await clearLease(e);
    const t0 = performance.now();
    const ccm = startCcm(e, [`--cloud-config=${e.defaultConfig}`], port);
    times.push(await waitHealthz(port, ccm, t0));
    // SIGTERM may land before the CCM installs its handler: any exit will do here.
    await ccm.stop("SIGTERM");
  }
  progress(`startup: ${times.map((t) => t.toFixed(0)).join(", ")} ms`);
  return median(times);
}

/**
 * Runs the CCM from a fresh copy of the binary (in the cluster's temp dir), or drops that copy from
 * the page cache. RSS counts the cached pages the kernel maps around each page fault, so the same
 * binary idles ~6 MB higher just after it was written (a build, an image pull) than once its pages
 * were evicted (a reboot, memory pressure). Figures are measured fresh, the worst case and the state
 * right after a deployment; the cold idle RSS is a note. Copies make this the same with --no-build.
 */
let copies = 0;
function freshBinary(source: string, dir: string): void {
  const path = join(dir, `ccm-${copies++}`);
  copyFileSync(source, path);
  chmodSync(path, 0o755);
  process.env.CCM_BINARY = path;
}

function dropFromPageCache(): void {
  const r = spawnSync("dd", [`if=${ccmBinary()}`, "iflag=nocache", "count=0"], { stdio: "ignore" });
  if (r.status !== 0) throw new Error("Cannot drop the binary from the page cache: dd iflag=nocache failed");
}

async function measureIdle(e: Env, state: "fresh" | "cold" = "fresh"): Promise<number> {
  if (state === "cold") dropFromPageCache();
  const port = await ccmPort(e);
  await clearLease(e);
  const t0 = performance.now();
  const ccm = startCcm(e, [`--cloud-config=${e.defaultConfig}`], port);
  await waitHealthz(port, ccm, t0);
  checkInNetns(e, ccm);
  await Bun.sleep(Math.max(0, e.args.idleSeconds * 1000 - (performance.now() - t0)));
  const { rssBytes, anonBytes, fileBytes } = procSample(ccm.pid);
  const holder = e.lease ? (await readLease(e, e.lease))?.holderIdentity || "none" : "no leader election";
  await stopCcm(ccm);
  progress(
    `idle RSS after ${e.args.idleSeconds} s (${state === "fresh" ? "fresh binary" : "binary dropped from the page cache"}): ${(rssBytes / MiB).toFixed(1)} MiB ` +
      `(anonymous ${(anonBytes / MiB).toFixed(1)}, file-backed ${(fileBytes / MiB).toFixed(1)}); Lease holder ${holder}`,
  );
  return rssBytes / MiB;
}

/**
 * Starts the CCM for the N-node phases and waits until it serves /healthz and leads: it acquired the
 * Lease and renewed it once (a retry period later, by which its controllers have started). The
 * same test for every binary; with --leader-elect=false, /healthz alone.
 */
async function startNodePhaseCcm(e: Env, notes: string[]): Promise<CcmProcess> {
  if (e.args.floor) return startFloor(e, notes);
  await clearLease(e);
  const baseline = e.lease ? await readLease(e, e.lease) : undefined;
  const port = await ccmPort(e);
  const t0 = performance.now();
  const ccm = startCcm(e, [`--cloud-config=${e.nodesConfig}`, `--controllers=${N_PHASE_CONTROLLERS}`], port);
  const healthz = await waitHealthz(port, ccm, t0, 60_000);
  checkInNetns(e, ccm);
  if (!e.lease) {
    notes.push(`leading: not checked (leader election off); /healthz 200 after ${healthz.toFixed(0)} ms`);
    return ccm;
  }
  const holder = await waitLeading(e, e.lease, ccm, baseline);
  const s = ((performance.now() - t0) / 1000).toFixed(1);
  const was = baseline?.holderIdentity ? `held by ${baseline.holderIdentity}` : "none or released";
  progress(`  ${holder} holds and renewed Lease ${e.lease.namespace}/${e.lease.name} ${s} s after exec`);
  notes.push(
    `leading: /healthz 200 after ${healthz.toFixed(0)} ms, Lease acquired and renewed ${s} s after exec (Lease at exec: ${was})`,
  );
  return ccm;
}

/**
 * --floor: the floor client (tests/support/bench-floor.ts) with the N-node phases' arguments, the
 * machines' specs in a file; ready once its caches synced.
 */
async function startFloor(e: Env, notes: string[]): Promise<CcmProcess> {
  const specs = join(e.cluster.dir, "floor-specs.json");
  await Bun.write(specs, JSON.stringify(e.specs));
  const floor = new CcmProcess(
    [
      join(root, "tests/support/bench-floor.ts"),
      ...e.baseArgs,
      `--cloud-config=${e.nodesConfig}`,
      `--controllers=${N_PHASE_CONTROLLERS}`,
      ...e.args.ccmArgs,
    ],
    { binary: process.execPath, env: { ...e.env, BENCH_FLOOR_SPECS: specs }, echo: e.args.verbose },
  );
  cleanups.push(async () => {
    if (floor.exitCode === null) await floor.stop("SIGKILL");
  });
  await floor.waitForLog(/floor: ready/, 60_000);
  notes.push(
    "floor: tests/support/bench-floor.ts in place of the CCM (the same Node writes and CSR approvals through this project's Kubernetes client, no Talos read, no check, no Event); its memory and CPU are a Bun script's, not a CCM's",
  );
  return floor;
}

/** The Talos calls counted so far, once no call came for a second (at most 30 s). */
async function settledCalls(talos: BenchTalos): Promise<number> {
  let last = await talos.calls();
  for (let i = 0; i < 30; i++) {
    await Bun.sleep(1000);
    const now = await talos.calls();
    if (now === last) break;
    last = now;
  }
  return last;
}

type NodeFigures = Omit<BenchFigures, "nodes" | "startup_ms" | "idle_rss_mb">;

const memMb = (p: Pick<ProcSample, "rssBytes" | "anonBytes" | "fileBytes">) => ({
  rss: p.rssBytes / MiB,
  anon: p.anonBytes / MiB,
  file: p.fileBytes / MiB,
});

/**
 * Talos' apid during the N-node phases (--talos apid): readings of its memory and CPU at the phases'
 * ends, its highest RSS, and the highest sum of the CCM's and its RSS.
 */
class ApidProbe {
  readonly rss: RssSampler;
  readonly total: SumRssSampler;
  readonly at: Record<"start" | "init" | "csr" | "end", ProcSample | undefined> = {
    start: undefined,
    init: undefined,
    csr: undefined,
    end: undefined,
  };

  constructor(
    readonly pid: number,
    ccmPid: number,
  ) {
    this.rss = new RssSampler(pid);
    this.total = new SumRssSampler([ccmPid, pid]);
    cleanups.push(() => this.stop());
  }

  read(phase: keyof ApidProbe["at"]): void {
    this.rss.sample();
    this.total.sample();
    this.at[phase] = procSample(this.pid);
  }

  stop(): void {
    this.rss.stop();
    this.total.stop();
  }

  /** apid's figures; `ccm` are the CCM's readings at the same points. */
  figures(nodes: number, idle: ProcSample, ccm: Record<"start" | "csr" | "end", ProcSample>): ApidFigures {
    const { start, init, csr, end } = this.at as Record<keyof ApidProbe["at"], ProcSample>;
    const peakBytes = Math.max(end.hwmBytes, this.rss.maxBytes);
    const apidCpu = csr.cpuSeconds - start.cpuSeconds;
    const ccmSteady = ccm.end.cpuSeconds - ccm.csr.cpuSeconds;
    const apidSteady = end.cpuSeconds - csr.cpuSeconds;
    return {
      nodes,
      apid_idle: memMb(idle),
      apid_init: memMb(init),
      apid_peak: memMb({ rssBytes: peakBytes, ...this.rss.maxSplit }),
      apid_settled: memMb(end),
      apid_init_cpu_s: init.cpuSeconds - start.cpuSeconds,
      apid_csr_cpu_s: csr.cpuSeconds - init.cpuSeconds,
      apid_steady_cpu_s: apidSteady,
      ccm_steady_cpu_s: ccmSteady,
      total_rss_mb: this.total.maxBytes / MiB,
      total_settled_rss_mb: (end.rssBytes + ccm.end.rssBytes) / MiB,
      total_cpu_s: apidCpu + ccm.csr.cpuSeconds - ccm.start.cpuSeconds,
      total_steady_cpu_s: apidSteady + ccmSteady,
    };
  }
}

async function runNodePhases(
  e: Env,
  notes: string[],
): Promise<NodeFigures & { apid: ApidFigures | undefined }> {
  const { args, cluster, talos, specs } = e;
  const n = specs.length;

  progress(`issuing ${n} kubelet identities and CSRs`);
  const conns: KubeConnection[] = new Array(n);
  const csrs: string[] = new Array(n);
  await pool(specs, 8, async (s, i) => {
    conns[i] = await cluster.userConnection(`system:node:${s.name}`, ["system:nodes"]);
    csrs[i] = (
      await createCSR({ cn: `system:node:${s.name}`, o: ["system:nodes"], dns: [s.name], ips: s.nodeIPs })
    ).csr;
  });

  const nodes = new Completion(cluster, "/api/v1/nodes", nodeProgress);
  const approvals = new Completion(
    cluster,
    "/apis/certificates.k8s.io/v1/certificatesigningrequests",
    csrProgress,
  );
  cleanups.push(() => nodes.informer.stop());
  cleanups.push(() => approvals.informer.stop());
  await nodes.start();
  await approvals.start();

  progress(`starting the CCM with --controllers=${N_PHASE_CONTROLLERS}`);
  const ccm = await startNodePhaseCcm(e, notes);
  const sampler = new RssSampler(ccm.pid);
  cleanups.push(() => sampler.stop());
  const before = procSample(ccm.pid);
  progress(`CCM leading and idle: RSS ${(before.rssBytes / MiB).toFixed(1)} MiB`);
  const probe = talos.apidPid === undefined ? undefined : new ApidProbe(talos.apidPid, ccm.pid);
  probe?.read("start");
  const audit0 = cluster.auditEvents().length;
  await talos.resetCalls();

  // Initialization.
  const kubelets: SimulatedKubelet[] = new Array(n);
  cleanups.push(() => {
    for (const k of kubelets) k?.close();
  });
  // Who uses the bed's cores while the CCM works: it shares them with the API server, the kubelets
  // (this process) and, with --talos apid, the machines' side of every Talos call.
  const bed: Record<string, number[]> = {
    [args.floor ? "floor" : "CCM"]: [ccm.pid],
    "API server + etcd": cluster.pids,
    "bench (kubelets, CSRs)": [process.pid],
  };
  if (talos.apidPid !== undefined) bed.apid = [talos.apidPid];
  if (talos.machinesPid !== undefined) bed["simulated machines"] = [talos.machinesPid];
  const bedAtStart = cpuByGroup(bed);
  progress(`registering ${n} kubelets (${args.concurrency} in flight)`);
  const t0 = performance.now();
  await pool(specs, args.concurrency, async (s, i) => {
    kubelets[i] = await SimulatedKubelet.register(cluster, {
      name: s.name,
      ips: s.nodeIPs,
      heartbeatMs: 0,
      statusOnCreate: true,
      connection: conns[i] as KubeConnection,
    });
  });
  progress(`  registered in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const initAt = await nodes.waitFor(n, args.timeoutSeconds * 1000, "initialized");
  const initEnd = initAt ?? performance.now();
  const init_s = (initEnd - t0) / 1000;
  if (initAt === undefined) notes.push(`init_s: timed out with ${nodes.done.size}/${n} initialized`);
  progress(`initialized ${nodes.done.size}/${n} in ${init_s.toFixed(2)} s`);
  const bedAtInit = cpuByGroup(bed);
  probe?.read("init");
  // Reads a node's watch start made besides its facts (for CSRs) may end after the last Node was
  // written: they count with initialization, so that talos_calls_per_csr counts what the CSRs cost.
  const initCalls = await settledCalls(talos);
  const talosBreakdown = await talos.breakdown();
  await talos.resetCalls();
  const auditInit = cluster.auditEvents().length;
  const recorded = await cluster.adminClient.get<{ items: { reason?: string; type?: string }[] }>(
    "/apis/events.k8s.io/v1/events",
  );
  notes.push(`events at initialization: ${countBy(recorded.items, (ev) => `${ev.type} ${ev.reason}`)}`);
  const atInit = procSample(ccm.pid);
  const cpuInit = atInit.cpuSeconds - before.cpuSeconds;

  // CSR approval.
  progress(`submitting ${n} kubelet-serving CSRs`);
  const t1 = performance.now();
  await pool(kubelets, args.concurrency, async (k, i) => {
    await k.submitServingCSR({ request: csrs[i] as string });
  });
  const approvedAt = await approvals.waitFor(n, args.timeoutSeconds * 1000, "approved");
  const csr_s = ((approvedAt ?? performance.now()) - t1) / 1000;
  if (approvedAt === undefined) notes.push(`csr_s: timed out with ${approvals.done.size}/${n} approved`);
  if (approvals.failed.size > 0) {
    const [name, why] = [...approvals.failed.entries()][0] as [string, string];
    notes.push(`csr: ${approvals.failed.size} CSRs denied or failed, e.g. ${name}: ${why}`);
  }
  progress(`approved ${approvals.done.size}/${n} in ${csr_s.toFixed(2)} s`);
  const after = procSample(ccm.pid);
  const bedAtCsr = cpuByGroup(bed);
  probe?.read("csr");
  const events = cluster.auditEvents().slice(audit0);
  const csrCalls = await talos.calls();
  const csrBreakdown = await talos.breakdown();

  // Steady state.
  progress(`steady state: counting Talos calls for ${args.steadySeconds} s`);
  await talos.resetCalls();
  await Bun.sleep(args.steadySeconds * 1000);
  const steadyCalls = await talos.calls();
  const steadyBreakdown = await talos.breakdown();
  sampler.sample();
  const end = procSample(ccm.pid);
  probe?.read("end");
  probe?.stop();
  sampler.stop();
  if (ccm.exitCode !== null) notes.push(`the CCM exited (${ccm.exitCode}) during the run`);
  await stopCcm(ccm);
  if (args.memoryLimitMiB !== undefined) {
    const kills = memoryCgroups.reduce((sum, c) => sum + c.oomKills(), 0);
    notes.push(
      `memory limit: every CCM start ran in a cgroup limited to ${args.memoryLimitMiB} MiB (BUN_JSC_forceRAMSize set by the binary); OOM kills: ${kills}`,
    );
  }
  if (args.ccmLog) await Bun.write(args.ccmLog, ccm.output);

  const initEvents = events.slice(0, auditInit - audit0);
  const resource = (ev: (typeof events)[number]) =>
    `${ev.verb} ${ev.objectRef?.resource ?? "?"}${ev.objectRef?.subresource ? `/${ev.objectRef.subresource}` : ""}`;
  notes.push(
    `talos calls at initialization: ${initCalls} (${talosBreakdown}); during CSR approval: ${csrCalls}${csrCalls ? ` (${csrBreakdown})` : ""}`,
  );
  notes.push(
    `talos calls in the ${args.steadySeconds} s steady window: ${steadyCalls}${steadyCalls ? ` (${steadyBreakdown})` : ""}`,
  );
  notes.push(`kube requests at initialization: ${initEvents.length} (${countBy(initEvents, resource)})`);
  const csrEvents = events.slice(auditInit - audit0);
  notes.push(`kube requests for CSRs: ${csrEvents.length} (${countBy(csrEvents, resource)})`);
  notes.push(
    `cpu: ${cpuInit.toFixed(2)} s initialization, ${(after.cpuSeconds - before.cpuSeconds - cpuInit).toFixed(2)} s CSRs; ` +
      `RSS idle-leading ${(before.rssBytes / MiB).toFixed(1)}, initialized ${(atInit.rssBytes / MiB).toFixed(1)} ` +
      `(peak so far ${(atInit.hwmBytes / MiB).toFixed(1)}), after the nodes ${(end.rssBytes / MiB).toFixed(1)} ` +
      `(anonymous ${(end.anonBytes / MiB).toFixed(1)}, file-backed ${(end.fileBytes / MiB).toFixed(1)}), ` +
      `peak ${(Math.max(end.hwmBytes, sampler.maxBytes) / MiB).toFixed(1)} MiB (highest sample ` +
      `${(sampler.maxBytes / MiB).toFixed(1)}: anonymous ${(sampler.maxSplit.anonBytes / MiB).toFixed(1)}, ` +
      `file-backed ${(sampler.maxSplit.fileBytes / MiB).toFixed(1)}); highest anonymous sample ` +
      `${(sampler.maxAnonBytes / MiB).toFixed(1)} MiB (RssAnon every 250 ms)`,
  );

  notes.push(
    `the bed's CPU (${cpus().length} cores) during initialization (${init_s.toFixed(2)} s): ${formatCpuUse(bedAtStart, bedAtInit)}; ` +
      `during CSR approval (${csr_s.toFixed(2)} s): ${formatCpuUse(bedAtInit, bedAtCsr)}`,
  );
  if (probe?.at.start && probe.at.end)
    notes.push(
      `apid: RSS ${(probe.at.start.rssBytes / MiB).toFixed(1)} MiB when the CCM leads (before the N nodes), ` +
        `VmHWM ${(probe.at.end.hwmBytes / MiB).toFixed(1)} MiB, highest sample ${(probe.rss.maxBytes / MiB).toFixed(1)} MiB; ` +
        `CPU ${probe.at.end.cpuSeconds.toFixed(2)} s since it started`,
    );
  return {
    apid: probe && e.apidIdle && probe.figures(n, e.apidIdle, { start: before, csr: after, end }),
    init_s,
    csr_s,
    rss_mb: Math.max(end.hwmBytes, sampler.maxBytes) / MiB,
    settled_rss_mb: end.rssBytes / MiB,
    peak_anon_mb: Math.max(end.anonBytes, sampler.maxAnonBytes) / MiB,
    settled_anon_mb: end.anonBytes / MiB,
    cpu_s: after.cpuSeconds - before.cpuSeconds,
    talos_calls_per_node: initCalls / n,
    talos_calls_per_csr: csrCalls / n,
    talos_calls_per_node_hour: (steadyCalls / n) * (3600 / args.steadySeconds),
    kube_requests_per_node: events.length / n,
  };
}

function headerLine(args: BenchArgs, opts: RunOptions, binary: string, version: string): string {
  const cpu = cpus();
  const qps = `--kube-api-qps=${opts.kubeApiQps} --kube-api-burst=${opts.kubeApiBurst}`;
  let why = "project defaults";
  if (qpsTuning(args).length > 0) why = "cluster-size tuning passed by the bench: N/5, burst 2x";
  else if (args.ccmArgs.length > 0) why = `--ccm-arg ${args.ccmArgs.join(" ")}`;
  return (
    `talos-ccm bench: N=${args.nodes}, ${cpu.length} CPUs (${cpu[0]?.model.trim() ?? "?"}), bun ${Bun.version}; ` +
    `binary ${binary} (${version}); ` +
    `CCM with the DaemonSet's args, ${qps} (${why}); shipped ccm-config.yaml for startup/idle, ` +
    `${{ metadata: "one PlatformMetadata rule", sysinfo: "one rule reading SystemInformation", none: "the shipped one" }[args.rules]} for the N nodes; MB = MiB`
  );
}

/**
 * What differs in the table's own figures with --talos apid: Talos calls are counted where apid hands
 * them to a machine (its apid, or machined), at their start, as the fake apid counts them; idle RSS and
 * start-up are the CCM's alone, as before.
 */
const APID_MODE_NOTE =
  "--talos apid: the CCM talks to Talos' apid (the Talos simulator's machines behind it); talos_calls_* count " +
  "calls apid passed on to a machine, at their start (a watch opened counts; a call apid refused would not), " +
  "as the fake apid counts what it receives; every other figure above is the CCM's alone, apid's are below";

/** Where the CCM ran with --talos apid: the simulator's network namespace, or the host. */
function netnsNote(e: Env): string {
  const access = `TALOS_MACHINE_ACCESS=${e.env.TALOS_MACHINE_ACCESS}`;
  if (!e.netns)
    return `the CCM ran on the host (--ccm-netns=false, ${access}): it reached apid at the talosconfig's endpoint on the host`;
  return (
    `${access} (our CCM: auto asks each machine's own apid first, proxy through the endpoint; --ccm-env sets it); ` +
    `the CCM ran in the Talos simulator's network namespace (nsenter --net=${e.netns.path}; checked once it served), where every machine's ` +
    `apid answers at <ip>:50000; the API server's ${new URL(e.cluster.url).host} forwarded in, each --secure-port ` +
    "exposed on the host, the talosconfig's endpoint served there too (--ccm-netns=false runs it on the host)"
  );
}

/** One run's figures, with the table's header and notes; with --talos apid, apid's figures and table. */
interface Measured {
  figures: BenchFigures;
  header: string;
  notes: string[];
  apid?: { figures: ApidFigures; table: string };
}

/**
 * apid's GOMEMLIMIT as its environment has it (/proc/<pid>/environ), or "unset": the simulator gives
 * apid machined's environment, Talos' GOMEMLIMIT for apid included (constants.EnvApidGomemlimit).
 */
function gomemlimitOf(pid: number): string {
  const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  const v = env.find((kv) => kv.startsWith("GOMEMLIMIT="))?.slice("GOMEMLIMIT=".length);
  if (v === undefined) return "unset";
  return /^\d+$/.test(v) ? `${v} (${(Number(v) / MiB).toFixed(1)} MiB)` : v;
}

/** The Talos side of a run, started: the fake apid, or the simulator behind Talos' apid. */
async function startTalos(args: BenchArgs, specs: FakeNodeSpec[]): Promise<BenchTalos> {
  if (args.talos === "fake") {
    progress(`starting a fake apid with ${args.nodes} nodes`);
    return fakeTalos(specs);
  }
  progress(`starting the Talos simulator behind Talos' apid (TALOS_APID) with ${args.nodes} machines`);
  return apidTalos(specs, progress);
}

/**
 * The whole measurement at `args.nodes` on a fresh test bed (API server, etcd, fake apid), which is
 * stopped again before it returns.
 * @param source the binary to bench; every phase runs a fresh copy of it.
 */
async function measure(args: BenchArgs, source: string, version: string): Promise<Measured> {
  const { e, opts } = await startBed(args, generateNodes(args.nodes));
  const { cluster, talos } = e;
  freshBinary(source, cluster.dir);

  const notes: string[] = [];
  let gomemlimit = "";
  if (talos.apidPid !== undefined) {
    e.apidIdle = procSample(talos.apidPid);
    gomemlimit = gomemlimitOf(talos.apidPid);
    progress(
      `apid idle with ${args.nodes} machines seeded: RSS ${(e.apidIdle.rssBytes / MiB).toFixed(1)} MiB, GOMEMLIMIT ${gomemlimit}`,
    );
  }
  let startup_ms: number | null = null;
  let idle_rss_mb: number | null = null;
  if (!args.floor) {
    progress(`startup: ${args.startupRuns} starts with the default controllers`);
    startup_ms = await measureStartup(e);
    progress(`idle: default controllers, no nodes, ${args.idleSeconds} s`);
    idle_rss_mb = await measureIdle(e);
    freshBinary(source, cluster.dir);
    const coldIdle = await measureIdle(e, "cold");
    notes.push(
      `idle RSS with the binary dropped from the page cache first (a cold start): ${coldIdle.toFixed(1)} MiB`,
    );
    freshBinary(source, cluster.dir);
  }
  const { apid, ...nodeFigures } = await runNodePhases(e, notes);

  const figures: BenchFigures = { nodes: args.nodes, startup_ms, idle_rss_mb, ...nodeFigures };
  const where = args.talos === "apid" && !args.floor ? netnsNote(e) : undefined; // while the simulator runs
  await cleanup();
  const header = headerLine(args, opts, source, version);
  if (args.talos === "apid") notes.push(APID_MODE_NOTE);
  if (where) notes.push(where);
  return {
    figures,
    header,
    notes,
    ...(apid ? { apid: { figures: apid, table: formatApidTable(apid, gomemlimit) } } : {}),
  };
}

/**
 * A fresh test bed for one run: API server and etcd (with the audit policy), the Talos side serving
 * `specs`, the CCM's kubeconfig, talosconfig and cloud configs, and its parsed options; every part
 * registers its stop in `cleanups`.
 */
async function startBed(args: BenchArgs, specs: FakeNodeSpec[]): Promise<{ e: Env; opts: RunOptions }> {
  progress("starting kube-apiserver + etcd");
  const cluster = await TestCluster.start({ auditPolicy: AUDIT_POLICY });
  cleanups.push(() => cluster.stop());
  const talos = await startTalos(args, specs);
  cleanups.push(() => talos.stop());
  const talosconfig = await talos.writeTalosconfig(join(cluster.dir, "talosconfig"));
  const kubeconfig = writeKubeconfig(
    join(cluster.dir, "ccm.kubeconfig"),
    await cluster.userConnection(CCM_USER, ["system:masters"]),
  );
  const defaultConfig = join(cluster.dir, "ccm-config.yaml");
  await Bun.write(defaultConfig, DEFAULT_CLOUD_CONFIG);
  const nodesConfig = args.rules === "none" ? defaultConfig : join(cluster.dir, "ccm-config-rules.yaml");
  if (args.rules !== "none") await Bun.write(nodesConfig, rulesConfig(args.rules === "sysinfo"));
  const replaced = /^--(cloud-config|controllers|secure-port)=/;
  const baseArgs = [
    ...DAEMONSET_ARGS.filter((a) => !replaced.test(a)),
    `--kubeconfig=${kubeconfig}`,
    "--bind-address=127.0.0.1",
    ...qpsTuning(args),
  ];
  const parsed = parseCommandLine([...baseArgs, `--controllers=${N_PHASE_CONTROLLERS}`, ...args.ccmArgs]);
  // Our CCM reaches each machine's own apid only inside the simulator's namespace: there it runs as
  // shipped (TALOS_MACHINE_ACCESS=auto, direct first); elsewhere through the endpoint. --ccm-env wins.
  const inNetns = talos.netns !== undefined && args.ccmNetns && !args.floor;
  const env = {
    TALOS_MACHINE_ACCESS: inNetns ? "auto" : "proxy",
    ...args.ccmEnv,
    TALOSCONFIG: talosconfig,
  };
  const opts = parsed.options as RunOptions;
  const le = opts.leaderElection;
  const lease = le.enabled
    ? {
        namespace: le.resourceNamespace,
        name: le.resourceName,
        timeoutMs: 2 * (le.leaseDurationMs + le.retryPeriodMs) + 30_000,
      }
    : undefined;
  const e: Env = { args, cluster, talos, specs, baseArgs, defaultConfig, nodesConfig, env, lease };
  if (talos.netns && inNetns) {
    // The CCM runs in the simulator's namespace: the API server at its address there too.
    await talos.netns.forward(new URL(cluster.url).host);
    e.netns = talos.netns;
  }
  return { e, opts };
}

/** The table of one run, and apid's below it with --talos apid. */
function report(r: Measured): string {
  const table = formatTable(r.figures, r.header, r.notes);
  return r.apid ? `${table}\n\n${r.apid.table}` : table;
}

/**
 * A run over several sizes or repeated (--nodes A,B,..., --slope, --repeat K): round by round, each
 * size in ascending order on a fresh test bed. With K = 1, every run's table, then the slopes between
 * consecutive sizes; with K > 1, each run's table goes to stderr as it ends, and stdout gets each size's
 * medians with every run's value, then the slopes of the medians with each round's.
 */
async function measureMany(args: BenchArgs, source: string, version: string): Promise<string> {
  const runs: Measured[][] = args.sizes.map(() => []);
  for (let round = 1; round <= args.repeat; round++) {
    for (const [i, nodes] of args.sizes.entries()) {
      const which = args.repeat > 1 ? `, round ${round}/${args.repeat}` : "";
      progress(`the run at N = ${nodes}${which}`);
      const tail = args.repeat > 1 ? `.${round}` : "";
      const ccmLog = args.ccmLog === undefined ? undefined : `${args.ccmLog}.${nodes}${tail}`;
      const r = await measure({ ...args, nodes, ccmLog }, source, version);
      runs[i]?.push(r);
      if (args.repeat > 1 && !args.json) process.stderr.write(`\n${report(r)}\n\n`);
    }
  }
  const figures = runs.map((rs) => rs.map((r) => r.figures));
  if (args.json) {
    for (const r of runs.flat()) for (const note of r.notes) progress(`N = ${r.figures.nodes}: ${note}`);
    const apid = runs.flat().flatMap((r) => (r.apid ? [apidJson(r.apid.figures)] : []));
    return JSON.stringify({ ...multiJson(figures), ...(apid.length ? { apid } : {}) });
  }
  const tables =
    args.repeat === 1
      ? runs.map((rs) => `${report(rs[0] as Measured)}\n`)
      : runs.map((rs, i) => {
          const header = `medians of ${args.repeat} runs (each run's table is on stderr): ${rs[0]?.header}`;
          return `${formatMedianTable(figures[i] as BenchFigures[], header)}\n`;
        });
  return [...tables, ...formatSlopes(figures)].join("\n");
}

// ---------------------------------------------------------------------------------------------
// The blast radius of one hostile peer (--hostile, issue 40)

/** One blast-radius run's figures and notes. */
interface HostileMeasured {
  figures: HostileFigures;
  notes: string[];
}

/** `transform`, except that the hostile peer's own object never counts as done (nor failed). */
function honestOnly(
  transform: (raw: unknown) => Progressed,
  isHostile: (raw: unknown) => boolean,
): (raw: unknown) => Progressed {
  return (raw) => {
    const p = transform(raw);
    return isHostile(raw) ? { metadata: p.metadata, done: false } : p;
  };
}

/** The hostile run's setup before the clock: identities, the honest CSRs, the peer prepared. */
async function hostileSetup(e: Env, kind: HostileKind) {
  const { cluster, talos, specs } = e;
  const n = specs.length;
  const apid = talos.fake;
  if (!apid) throw new Error("Cannot run a hostile peer: it needs the in-process fake apid");
  progress(`issuing ${n} kubelet identities and ${n - 1} honest CSRs`);
  const conns: KubeConnection[] = new Array(n);
  const csrs: string[] = new Array(n - 1);
  await pool(specs, 8, async (s, i) => {
    conns[i] = await cluster.userConnection(`system:node:${s.name}`, ["system:nodes"]);
    if (i === n - 1) return;
    csrs[i] = (
      await createCSR({ cn: `system:node:${s.name}`, o: ["system:nodes"], dns: [s.name], ips: s.nodeIPs })
    ).csr;
  });
  const hostile = specs[n - 1] as FakeNodeSpec;
  const peer = createPeer(kind, { cluster, apid, spec: hostile, connection: conns[n - 1] as KubeConnection });
  await peer.prepare();
  cleanups.push(() => peer.stop());
  return { apid, conns, csrs, hostile, peer };
}

/**
 * The watches a hostile run times with, started before the CCM so that no event is missed. The
 * Node watches leave the hostile peer's Node out (a field selector), so that the bench process does
 * not spend its time on a big Node's heartbeats while it times the honest ones.
 */
async function hostileWatches(cluster: TestCluster, hostileName: string) {
  const honestNodes = `metadata.name!=${hostileName}`;
  const nodes = new Completion(cluster, "/api/v1/nodes", nodeProgress, honestNodes);
  const approvals = new Completion(
    cluster,
    "/apis/certificates.k8s.io/v1/certificatesigningrequests",
    honestOnly(
      csrProgress,
      (raw) => (raw as { spec?: { username?: string } }).spec?.username === `system:node:${hostileName}`,
    ),
  );
  const latency = new PatchLatency(cluster, honestNodes);
  cleanups.push(() => nodes.informer.stop());
  cleanups.push(() => approvals.informer.stop());
  cleanups.push(() => latency.stop());
  await nodes.start();
  await approvals.start();
  await latency.start();
  return { nodes, approvals, latency };
}

/**
 * One blast-radius run on the test bed `e` (node N-1 is the hostile peer of `kind`): the CCM leads,
 * the peer registers and starts, the N - 1 honest kubelets register (init_s) and submit their CSRs
 * (csr_s), then the honest address changes are timed while the peer keeps on.
 */
async function runHostilePhases(e: Env, kind: HostileKind, notes: string[]): Promise<HostileFigures> {
  const { args, cluster, specs } = e;
  const n = specs.length;
  const { apid, conns, csrs, hostile, peer } = await hostileSetup(e, kind);
  const { nodes, approvals, latency } = await hostileWatches(cluster, hostile.name);

  progress(`starting the CCM with --controllers=${N_PHASE_CONTROLLERS}`);
  const ccm = await startNodePhaseCcm(e, notes);
  const sampler = new RssSampler(ccm.pid);
  cleanups.push(() => sampler.stop());
  const before = procSample(ccm.pid);
  const api0 = apiCpuSeconds(cluster);
  const audit0 = cluster.auditEvents().length;
  progress(
    `CCM leading and idle: RSS ${(before.rssBytes / MiB).toFixed(1)} MiB; hostile peer ${kind} starts`,
  );
  const benchCpu0 = process.cpuUsage();
  await peer.start();

  const honest = specs.slice(0, n - 1);
  const kubelets: SimulatedKubelet[] = new Array(n - 1);
  cleanups.push(() => {
    for (const k of kubelets) k?.close();
  });
  progress(`registering ${n - 1} honest kubelets (${args.concurrency} in flight)`);
  const t0 = performance.now();
  await pool(honest, args.concurrency, async (s, i) => {
    kubelets[i] = await SimulatedKubelet.register(cluster, {
      name: s.name,
      ips: s.nodeIPs,
      heartbeatMs: 0,
      statusOnCreate: true,
      connection: conns[i] as KubeConnection,
    });
  });
  const gone = () => ccm.exitCode !== null;
  const initAt = await nodes.waitFor(n - 1, args.timeoutSeconds * 1000, "initialized", gone);
  await nodes.informer.stop(); // the watches the bench keeps are its own load: only the next phase's
  const init_s = initAt === undefined ? null : (initAt - t0) / 1000;
  if (initAt === undefined)
    notes.push(`init_s: timed out with ${nodes.done.size}/${n - 1} honest initialized`);
  progress(`initialized ${nodes.done.size}/${n - 1} honest in ${init_s?.toFixed(2) ?? "(timed out)"} s`);

  progress(`submitting ${n - 1} honest kubelet-serving CSRs`);
  const t1 = performance.now();
  await pool(kubelets, args.concurrency, async (k, i) => {
    await k.submitServingCSR({ request: csrs[i] as string });
  });
  const approvedAt = await approvals.waitFor(n - 1, args.timeoutSeconds * 1000, "approved", gone);
  await approvals.informer.stop();
  const csr_s = approvedAt === undefined ? null : (approvedAt - t1) / 1000;
  if (approvedAt === undefined) notes.push(`csr_s: timed out with ${approvals.done.size}/${n - 1} approved`);
  if (approvals.failed.size > 0) {
    const [name, why] = [...approvals.failed.entries()][0] as [string, string];
    notes.push(`csr: ${approvals.failed.size} honest CSRs denied or failed, e.g. ${name}: ${why}`);
  }
  progress(`approved ${approvals.done.size}/${n - 1} honest in ${csr_s?.toFixed(2) ?? "(timed out)"} s`);

  progress(
    `timing ${args.latencyChanges} Talos address changes of honest machines over ${args.latencySeconds} s`,
  );
  const samples = gone()
    ? Array<null>(args.latencyChanges).fill(null)
    : await latency.run(apid, honest, args.latencyChanges, args.latencySeconds * 1000, 30_000);
  peer.stop();
  const benchCpu = process.cpuUsage(benchCpu0);
  const api_cpu_s = apiCpuSeconds(cluster) - api0;
  sampler.sample();
  const end = gone() ? undefined : procSample(ccm.pid);
  notes.push(
    `the bench process (kubelets, watches, fake apid, hostile peer) used ${((benchCpu.user + benchCpu.system) / 1e6).toFixed(2)} s ` +
      `of CPU from the peer's start to the end of the latency window`,
  );
  if (gone())
    notes.push(
      `the CCM exited (${ccm.exitCode}) during the run; its last output:\n${ccm.output.trimEnd().split("\n").slice(-15).join("\n")}`,
    );
  await stopCcm(ccm);
  if (args.ccmLog) await Bun.write(args.ccmLog, ccm.output);

  const nodeWrites = cluster
    .auditEvents()
    .slice(audit0)
    .filter((ev) => (ev.verb === "patch" || ev.verb === "update") && ev.objectRef?.resource === "nodes");
  const ccmDelays = ccmWriteDelays(
    latency.changes,
    nodeWrites.map((ev) => ({
      node: ev.objectRef?.name ?? "",
      atEpochMs: auditEpochMs(ev.requestReceivedTimestamp),
    })),
  );
  const lat = latencyFigures(samples, ccmDelays);
  const unseen = samples.flatMap((x, k) => (x === null ? [k] : []));
  if (unseen.length > 0)
    notes.push(
      `changes never seen on their Node: ${unseen
        .slice(0, 5)
        .map((k) => {
          const c = latency.changes[k];
          const w = ccmDelays[k];
          return `#${k} ${c?.node ?? "?"} (${w === null || w === undefined ? "no write of the CCM after it" : `the CCM wrote it ${w.toFixed(1)} ms after`})`;
        })
        .join(", ")}${unseen.length > 5 ? ", ..." : ""}`,
    );
  progress(
    `event-to-patch: p50 ${lat.latency_p50_ms?.toFixed(0)} ms, p99 ${lat.latency_p99_ms?.toFixed(0)} ms ` +
      `(the CCM's part: p50 ${lat.ccm_p50_ms?.toFixed(1)} ms, p99 ${lat.ccm_p99_ms?.toFixed(1)} ms), ` +
      `${lat.latency_missing}/${lat.latency_samples} never seen; ${peer.describe()}`,
  );
  await hostileNotes(e, peer, notes);
  const writes = nodeWrites.filter((ev) => ev.objectRef?.name === hostile.name).length;
  return {
    kind,
    nodes: n,
    init_s,
    csr_s,
    ...lat,
    rss_mb: Math.max(end?.hwmBytes ?? 0, sampler.maxBytes) / MiB,
    cpu_s: end ? end.cpuSeconds - before.cpuSeconds : null,
    api_cpu_s,
    hostile_actions: peer.actions,
    hostile_node_writes: writes,
  };
}

/** kube-apiserver's and etcd's CPU seconds so far. */
function apiCpuSeconds(cluster: TestCluster): number {
  return cluster.pids.reduce((sum, pid) => sum + procSample(pid).cpuSeconds, 0);
}

/** What the peer did, the errors it met, and the Events the CCM recorded, by type and reason. */
async function hostileNotes(e: Env, peer: HostilePeer, notes: string[]): Promise<void> {
  notes.push(`hostile peer: ${peer.describe()}`);
  if (peer.errors.count > 0)
    notes.push(`hostile peer: ${peer.errors.count} of its requests failed, e.g. ${peer.errors.first}`);
  const recorded = await e.cluster.adminClient.get<{
    items: { reason?: string; type?: string; regarding?: { name?: string } }[];
  }>("/apis/events.k8s.io/v1/events");
  const about = (mine: boolean) =>
    recorded.items.filter((ev) => peer.names.has(ev.regarding?.name ?? "") === mine);
  const by = (ev: { reason?: string; type?: string }) => `${ev.type} ${ev.reason}`;
  notes.push(`events about the hostile peer's Node and CSRs: ${countBy(about(true), by) || "none"}`);
  notes.push(`events about the honest nodes and CSRs: ${countBy(about(false), by) || "none"}`);
}

/** One blast-radius run of `kind` on a fresh test bed, which is stopped again before it returns. */
async function measureHostile(args: BenchArgs, kind: HostileKind, source: string): Promise<HostileMeasured> {
  const specs = generateNodes(args.nodes);
  specs[specs.length - 1] = hostileSpec(kind, specs[specs.length - 1] as FakeNodeSpec);
  const { e } = await startBed(args, specs);
  freshBinary(source, e.cluster.dir);
  const notes: string[] = [];
  const figures = await runHostilePhases(e, kind, notes);
  await cleanup();
  return { figures, notes };
}

function hostileHeader(args: BenchArgs, binary: string, version: string): string {
  const cpu = cpus();
  const qps = qpsTuning(args);
  return (
    `talos-ccm blast-radius bench: N=${args.nodes} (node N-1 hostile), ${cpu.length} CPUs ` +
    `(${cpu[0]?.model.trim() ?? "?"}), bun ${Bun.version}; binary ${binary} (${version}); CCM with the ` +
    `DaemonSet's args${qps.length ? ` ${qps.join(" ")}` : ""}, one PlatformMetadata rule; ` +
    `${args.latencyChanges} honest address changes over ${args.latencySeconds} s; medians of ${args.repeat} round(s)`
  );
}

/**
 * The blast-radius runs (--hostile): round by round, each kind in the order given on a fresh test
 * bed; each run's notes (and with K > 1 its one-run table) go to stderr; stdout gets each kind's
 * table of medians against none's, then a summary line per kind, or with --json one object.
 */
async function measureHostileRounds(args: BenchArgs, source: string, version: string): Promise<string> {
  const kinds = args.hostile ?? [];
  const runs: HostileFigures[][] = kinds.map(() => []);
  const header = hostileHeader(args, source, version);
  for (let round = 1; round <= args.repeat; round++) {
    for (const [i, kind] of kinds.entries()) {
      progress(`the run with hostile peer ${kind} at N = ${args.nodes}, round ${round}/${args.repeat}`);
      const ccmLog = args.ccmLog === undefined ? undefined : `${args.ccmLog}.${kind}.${round}`;
      const r = await measureHostile({ ...args, ccmLog }, kind, source);
      runs[i]?.push(r.figures);
      for (const note of r.notes) progress(`${kind}, round ${round}: ${note}`);
      progress(`${kind}, round ${round}: ${JSON.stringify(hostileJson(r.figures))}`);
    }
  }
  if (args.json) return JSON.stringify(hostileMultiJson(runs));
  const clean = runs[kinds.indexOf("none")];
  const tables = runs.map((rs) => `${formatHostileTable(rs, clean, header)}\n`);
  return [...tables, ...formatSummary(runs)].join("\n");
}

async function main(): Promise<void> {
  let args: BenchArgs;
  try {
    if (process.argv.includes("--help") || process.argv.includes("-h")) {
      process.stdout.write(`${USAGE}\n`);
      return;
    }
    args = parseBenchArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
  ensureTestbed(args.talos);
  if (args.ccmBinary !== undefined) process.env.CCM_BINARY = resolve(args.ccmBinary);
  if (args.build) buildBinary();
  const source = ccmBinary();
  const version = binaryVersion(source);
  progress(`binary ${source} (${version})`);

  if (args.hostile) {
    process.stdout.write(`${await measureHostileRounds(args, source, version)}\n`);
    return;
  }
  if (args.sizes.length > 1 || args.repeat > 1) {
    process.stdout.write(`${await measureMany(args, source, version)}\n`);
    return;
  }
  const run = await measure(args, source, version);
  if (args.json) {
    for (const note of run.notes) progress(note);
    const apid = run.apid ? { apid: apidJson(run.apid.figures) } : {};
    process.stdout.write(`${JSON.stringify({ ...toJson(run.figures), ...apid })}\n`);
  } else process.stdout.write(`${report(run)}\n`);
}

if (import.meta.main) {
  cleanUpOnSignals();
  try {
    await main();
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).stack ?? err}\n`);
    await cleanup();
    process.exit(1);
  }
  process.exit(0);
}
