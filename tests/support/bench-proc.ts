// Resource use of a process read from /proc for the benchmark: resident memory now (VmRSS) and at
// its peak (VmHWM) from /proc/<pid>/status, CPU time (utime + stime) from /proc/<pid>/stat in
// clock ticks, and a sampler that keeps the highest RSS (and the highest anonymous part) seen while
// a phase runs.

import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** One reading of a process' memory and CPU. */
export interface ProcSample {
  rssBytes: number;
  /** The anonymous part of rssBytes (heap, JIT code) and the file-backed part (the executable's pages). */
  anonBytes: number;
  fileBytes: number;
  /** Peak resident set size since the process started. */
  hwmBytes: number;
  /** User plus system CPU seconds since the process started. */
  cpuSeconds: number;
}

/** VmRSS, its RssAnon and RssFile parts, and VmHWM (bytes) from the text of /proc/<pid>/status. */
export function parseStatus(text: string): Omit<ProcSample, "cpuSeconds"> {
  const kb = (field: string) => Number(text.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))?.[1] ?? NaN);
  return {
    rssBytes: kb("VmRSS") * 1024,
    anonBytes: kb("RssAnon") * 1024,
    fileBytes: kb("RssFile") * 1024,
    hwmBytes: kb("VmHWM") * 1024,
  };
}

/**
 * utime + stime in seconds from the text of /proc/<pid>/stat; fields are counted after the
 * parenthesized command name, which may itself contain spaces and parentheses.
 * @throws {Error} when the text is not a stat line.
 */
export function parseStatCpu(text: string, ticksPerSecond: number): number {
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) {
    throw new Error(`Cannot parse /proc stat line: ${text.slice(0, 120)}`);
  }
  return (utime + stime) / ticksPerSecond;
}

let ticks: number | undefined;

/** The kernel's clock ticks per second (`getconf CLK_TCK`, 100 when getconf is missing). */
export function clockTicks(): number {
  if (ticks === undefined) {
    const r = spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" });
    const n = Number(r.stdout?.trim());
    ticks = r.status === 0 && n > 0 ? n : 100;
  }
  return ticks;
}

/**
 * Reads memory and CPU of a running process.
 * @throws {Error} when the process is gone.
 */
export function procSample(pid: number): ProcSample {
  const status = parseStatus(readFileSync(`/proc/${pid}/status`, "utf8"));
  const cpuSeconds = parseStatCpu(readFileSync(`/proc/${pid}/stat`, "utf8"), clockTicks());
  return { ...status, cpuSeconds };
}

/**
 * CPU time (user + system, seconds) each named group of processes has used so far; a process that
 * is gone counts 0. Two readings' difference is what each group took of the machine in between.
 */
export function cpuByGroup(groups: Readonly<Record<string, readonly number[]>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pids] of Object.entries(groups)) {
    out[name] = 0;
    for (const pid of pids) {
      try {
        out[name] += parseStatCpu(readFileSync(`/proc/${pid}/stat`, "utf8"), clockTicks());
      } catch {
        // gone: nothing more to count
      }
    }
  }
  return out;
}

/** "CCM 3.46 s, API server + etcd 4.10 s, ...": `after` minus `before` per group, largest first. */
export function formatCpuUse(before: Record<string, number>, after: Record<string, number>): string {
  return Object.entries(after)
    .map(([name, s]) => [name, s - (before[name] ?? 0)] as const)
    .sort((a, b) => b[1] - a[1])
    .map(([name, s]) => `${name} ${s.toFixed(2)} s`)
    .join(", ");
}

/** A memory reading's resident parts, in bytes (VmRSS, RssAnon, RssFile). */
export type RssReading = Pick<ProcSample, "rssBytes" | "anonBytes" | "fileBytes">;

/**
 * The highest and the last of a series of readings (pure). The highest total RSS and the highest
 * anonymous part are tracked apart: the file-backed part moves on its own (page trimming, fault-around),
 * so the reading with the highest total need not hold the highest anonymous memory.
 */
export class RssPeaks {
  #max = 0;
  #maxSplit = { anonBytes: Number.NaN, fileBytes: Number.NaN };
  #maxAnon = 0;
  #last = 0;

  add({ rssBytes, anonBytes, fileBytes }: RssReading): void {
    this.#last = rssBytes;
    if (rssBytes > this.#max) {
      this.#max = rssBytes;
      this.#maxSplit = { anonBytes, fileBytes };
    }
    if (anonBytes > this.#maxAnon) this.#maxAnon = anonBytes;
  }

  /** The highest total RSS. */
  get maxBytes(): number {
    return this.#max;
  }

  /** The anonymous and file-backed parts of the reading with the highest total RSS. */
  get maxSplit(): { anonBytes: number; fileBytes: number } {
    return this.#maxSplit;
  }

  /** The highest anonymous part of any reading (RssAnon; the kernel keeps no high-water mark of it). */
  get maxAnonBytes(): number {
    return this.#maxAnon;
  }

  get lastBytes(): number {
    return this.#last;
  }
}

/**
 * Samples a process' RSS every `intervalMs` until stopped; keeps the highest total, the highest
 * anonymous part and the last reading ({@link RssPeaks}).
 */
export class RssSampler extends RssPeaks {
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(
    readonly pid: number,
    intervalMs = 250,
  ) {
    super();
    this.#timer = setInterval(() => this.sample(), intervalMs);
    this.sample();
  }

  /** Takes one reading now (ignored once the process is gone). */
  sample(): void {
    try {
      this.add(parseStatus(readFileSync(`/proc/${this.pid}/status`, "utf8")));
    } catch {
      // The process exited; the readings so far stand.
    }
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

/**
 * Samples the summed RSS of several processes (the control plane: the CCM and apid) every
 * `intervalMs` until stopped and keeps the highest sum: their peaks need not coincide.
 */
export class SumRssSampler {
  #max = 0;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(
    readonly pids: readonly number[],
    intervalMs = 250,
  ) {
    this.#timer = setInterval(() => this.sample(), intervalMs);
    this.sample();
  }

  /** Takes one reading now; ignored when any of the processes is gone. */
  sample(): void {
    try {
      let sum = 0;
      for (const pid of this.pids) sum += parseStatus(readFileSync(`/proc/${pid}/status`, "utf8")).rssBytes;
      this.#max = Math.max(this.#max, sum);
    } catch {
      // A process exited; the readings so far stand.
    }
  }

  get maxBytes(): number {
    return this.#max;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
