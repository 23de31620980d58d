// Gives the executable's code pages back to the kernel when the process goes quiet.
//
// Most of this process's resident memory is not its heap but pages of its own executable (the Bun
// runtime's code, read-only data and the embedded bundle). The kernel maps them as they are touched,
// plus the neighbours of each page touched (fault-around), and keeps them mapped until memory is
// short; the container's working set (`kubectl top`, the kubelet's eviction, a VPA's advice) counts
// them. After a burst of work (start-up, nodes joining, CSRs) the process touches only a small part
// of that code, so once it has been quiet for a while it asks the kernel to reclaim its read-only
// file-backed mappings (madvise MADV_PAGEOUT, Linux 5.4): their content is the file's, nothing is
// lost, and a page still in use comes back on its next touch. Writable and anonymous memory (the
// heap, JIT code) is never advised. The pages that come back are what the process lives with; it
// trims again only when a later burst has mapped more than that, at most every MIN_INTERVAL_MS. The
// kernel would reclaim these pages under memory pressure anyway: this makes the figures an operator
// reads show what the process uses rather than what it once touched.

import { readFileSync } from "node:fs";
import { logger } from "./log.ts";

const log = logger("pagetrim");
const MiB = 1024 * 1024;

/** How often the process's CPU time and file-backed RSS are read. */
export const TICK_MS = 5_000;
/** A tick is quiet when the process used less than this share of one CPU during it. */
export const QUIET_CPU_SHARE = 0.05;
/** File-backed RSS must have grown this much above what the process lives with to trim. */
export const MIN_GROWTH_BYTES = 4 * MiB;
/** Trims are at least this far apart, which bounds the cost of pages that come back. */
export const MIN_INTERVAL_MS = 30_000;
/** madvise(2) advice: reclaim the pages (Linux 5.4 and later). */
const MADV_PAGEOUT = 21;

/** One address range of /proc/self/maps. */
export interface Mapping {
  start: bigint;
  end: bigint;
}

/**
 * The read-only file-backed mappings in the text of /proc/self/maps: permissions without `w` and a
 * non-zero inode. Anonymous memory, the stack, [vdso] and every writable mapping are left out.
 */
export function readOnlyFileMappings(maps: string): Mapping[] {
  const out: Mapping[] = [];
  for (const line of maps.split("\n")) {
    const m = line.match(/^([0-9a-f]+)-([0-9a-f]+) ([-r][-w][-x][ps]) [0-9a-f]+ \S+ (\d+)/);
    if (!m?.[1] || !m[2] || !m[3] || m[4] === "0" || m[3][1] === "w") continue;
    out.push({ start: BigInt(`0x${m[1]}`), end: BigInt(`0x${m[2]}`) });
  }
  return out;
}

/** RssFile from the text of /proc/self/status, in bytes (NaN when missing). */
export function fileRss(status: string): number {
  const kb = status.match(/^RssFile:\s+(\d+) kB/m)?.[1];
  return kb === undefined ? Number.NaN : Number(kb) * 1024;
}

/** What the trimmer knows between ticks. */
export interface TrimState {
  /** CPU microseconds (user + system) at the previous tick. */
  cpuMicros: number;
  /**
   * File-backed RSS the process lives with: read on the tick after a trim, once the pages in use
   * have come back (0 before the first trim; undefined on the tick right after one).
   */
  baseBytes: number | undefined;
  /** performance.now() of the last trim (-Infinity before the first). */
  lastTrimMs: number;
}

/** One tick's readings. */
export interface TrimSample {
  nowMs: number;
  cpuMicros: number;
  fileRssBytes: number;
}

/** The state before the first tick. */
export function initialTrimState(first: TrimSample): TrimState {
  return { cpuMicros: first.cpuMicros, baseBytes: 0, lastTrimMs: Number.NEGATIVE_INFINITY };
}

/**
 * One tick: whether to trim now, and the state for the next tick. Trims when the last tick was
 * quiet, the file-backed RSS grew MIN_GROWTH_BYTES above what the process lives with, and the last
 * trim is MIN_INTERVAL_MS old; the tick after a trim only reads what the process lives with.
 */
export function trimTick(
  state: TrimState,
  sample: TrimSample,
  tickMs = TICK_MS,
): { trim: boolean; next: TrimState } {
  const next = { ...state, cpuMicros: sample.cpuMicros };
  if (state.baseBytes === undefined)
    return { trim: false, next: { ...next, baseBytes: sample.fileRssBytes } };
  const trim =
    sample.cpuMicros - state.cpuMicros < tickMs * 1000 * QUIET_CPU_SHARE &&
    sample.fileRssBytes - state.baseBytes >= MIN_GROWTH_BYTES &&
    sample.nowMs - state.lastTrimMs >= MIN_INTERVAL_MS;
  return { trim, next: trim ? { ...next, baseBytes: undefined, lastTrimMs: sample.nowMs } : next };
}

/** madvise(2): 0 when the kernel took the advice. */
export type Madvise = (start: bigint, length: bigint, advice: number) => number;

/** madvise(2) from the C library, or undefined where it cannot be loaded (no glibc, no FFI). */
async function loadMadvise(): Promise<Madvise | undefined> {
  try {
    const { dlopen } = await import("bun:ffi");
    const libc = dlopen("libc.so.6", { madvise: { args: ["u64", "u64", "i32"], returns: "i32" } });
    return (start, length, advice) => libc.symbols.madvise(start, length, advice) as number;
  } catch (err) {
    log.v(2).info("Cannot load madvise: code pages stay mapped", { err: String(err) });
    return undefined;
  }
}

/**
 * Advises the kernel to reclaim every read-only file-backed mapping of this process.
 * @returns how many mappings were advised and how many the kernel refused (a locked or device
 *   mapping is refused alone; a kernel older than 5.4 refuses every one)
 */
export function trimNow(
  madvise: Madvise,
  maps = readFileSync("/proc/self/maps", "utf8"),
): { advised: number; refused: number } {
  let advised = 0;
  let refused = 0;
  for (const { start, end } of readOnlyFileMappings(maps)) {
    if (madvise(start, end - start, MADV_PAGEOUT) === 0) advised++;
    else refused++;
  }
  return { advised, refused };
}

/** Reads CPU time and file-backed RSS of this process. */
function sample(): TrimSample {
  const cpu = process.cpuUsage();
  return {
    nowMs: performance.now(),
    cpuMicros: cpu.user + cpu.system,
    fileRssBytes: fileRss(readFileSync("/proc/self/status", "utf8")),
  };
}

/**
 * Starts trimming in the background (Linux only); the returned function stops it. The timer never
 * keeps the process alive. The C library is loaded at the first trim, so start-up pays nothing;
 * trimming stops by itself when /proc cannot be read or madvise is missing or refused.
 * @param opts.tickMs and opts.load (madvise's loader) are for tests
 */
export function startPageTrim(
  opts: { tickMs?: number; load?: () => Promise<Madvise | undefined> } = {},
): () => void {
  if (process.platform !== "linux") return () => {};
  const { tickMs = TICK_MS, load = loadMadvise } = opts;
  let madvise: Madvise | undefined;
  let state: TrimState;
  try {
    state = initialTrimState(sample());
  } catch (err) {
    log.v(2).info("Cannot read /proc/self/status: code pages stay mapped", { err: String(err) });
    return () => {};
  }
  const stop = () => clearInterval(timer);
  const tick = async () => {
    const now = sample();
    const { trim, next } = trimTick(state, now, tickMs);
    state = next;
    if (!trim) return;
    madvise ??= await load();
    if (!madvise) return stop();
    const { advised, refused } = trimNow(madvise);
    if (advised === 0) {
      log.v(2).info("The kernel refused MADV_PAGEOUT: code pages stay mapped", { refused });
      return stop();
    }
    const after = sample();
    state.cpuMicros = after.cpuMicros;
    log.v(4).info("Returned code pages to the kernel", {
      fileRssMiB: (now.fileRssBytes / MiB).toFixed(1),
      afterMiB: (after.fileRssBytes / MiB).toFixed(1),
      refused,
    });
  };
  const timer = setInterval(() => {
    tick().catch((err) => {
      log.v(2).info("Cannot trim code pages: stopped", { err: String(err) });
      stop();
    });
  }, tickMs);
  timer.unref();
  return stop;
}
