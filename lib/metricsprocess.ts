// The process's metrics: the registry served on /metrics (tests create their own), the process_*
// collectors and build info every Kubernetes component exports, and the clock that times a
// histogram's observations.

import { readdirSync, readFileSync } from "node:fs";
import { type Histogram, type Labels, Registry } from "./metrics.ts";
import type { VersionInfo } from "./version.ts";

/** The process-wide registry served on /metrics. */
export const registry = new Registry();

/**
 * Starts a timer; calling the result observes the elapsed seconds in `histogram`'s series for `labels`.
 * @returns the function that stops the timer and returns the seconds observed.
 */
export function startTimer(histogram: Histogram, labels?: Labels): () => number {
  const start = performance.now();
  return () => {
    const seconds = (performance.now() - start) / 1000;
    histogram.observe(labels, seconds);
    return seconds;
  };
}

/**
 * Registers `kubernetes_build_info` with k8s.io/component-base's name, help and labels, from the
 * binary's version.Info (see lib/version.ts).
 */
export function registerBuildInfo(reg: Registry, info: VersionInfo): void {
  const gauge = reg.gauge(
    "kubernetes_build_info",
    "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
    [
      "major",
      "minor",
      "git_version",
      "git_commit",
      "git_tree_state",
      "build_date",
      "go_version",
      "compiler",
      "platform",
    ],
  );
  gauge.set(
    {
      major: info.major,
      minor: info.minor,
      git_version: info.gitVersion,
      git_commit: info.gitCommit,
      git_tree_state: info.gitTreeState,
      build_date: info.buildDate,
      go_version: info.goVersion,
      compiler: info.compiler,
      platform: info.platform,
    },
    1,
  );
}

/** Registers the standard `process_*` metrics and the JS heap gauges on `reg`. */
export function registerProcessMetrics(reg: Registry): void {
  const cpu = reg.gauge("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.");
  const rss = reg.gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  const vsz = reg.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
  const start = reg.gauge(
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
  );
  const fds = reg.gauge("process_open_fds", "Number of open file descriptors.");
  const maxFds = reg.gauge("process_max_fds", "Maximum number of open file descriptors.");
  const heapUsed = reg.gauge("bun_heap_used_bytes", "JavaScript heap bytes in use.");
  const heapSize = reg.gauge("bun_heap_size_bytes", "JavaScript heap size in bytes.");
  start.set(undefined, Math.floor((Date.now() - performance.now()) / 1000));
  reg.onCollect(() => {
    const u = process.cpuUsage();
    cpu.set(undefined, (u.user + u.system) / 1e6);
    const mem = process.memoryUsage();
    rss.set(undefined, mem.rss);
    heapUsed.set(undefined, mem.heapUsed);
    heapSize.set(undefined, mem.heapTotal);
    try {
      fds.set(undefined, readdirSync("/proc/self/fd").length);
      const stat = readFileSync("/proc/self/stat", "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      vsz.set(undefined, Number(fields[20]));
      const limits = readFileSync("/proc/self/limits", "utf8").match(/Max open files\s+(\d+)/);
      if (limits?.[1]) maxFds.set(undefined, Number(limits[1]));
    } catch {
      // Not on Linux: the /proc gauges stay unset.
    }
  });
}
