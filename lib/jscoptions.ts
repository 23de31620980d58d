// The JavaScriptCore options the binary runs with: how its garbage collector is paced, and which
// JIT tiers compile.
//
// Pacing. JSC lets the heap grow between collections by a factor it picks from the machine's RAM:
// on 16 GB or more, a curve meant for browsers that allows 3× the live heap; below, 2× until the
// process's memory footprint passes 80 % of RAM, 1.5× to 90 %, and 1.24× above. A CCM's live heap is
// small and its garbage comes in bursts (nodes joining, CSRs), so at 3× a burst leaves heap capacity
// that JSC never returns. The binary always uses the tiered rule, with its first two steps at 1.25×
// instead of 2× and 1.5× (issue 43: through Talos' apid, 1,000 machines joining at once, medians of
// 3: the CCM's peak RSS 108.3 -> 90.8 MiB, its CPU 4.30 -> 4.83 s; 1.1× cost 60 % more CPU for 3 MiB
// less), and inside a container with a memory limit it tells JSC that the limit is the RAM it has,
// so that collections get more frequent still (1.24×) as the footprint nears the limit rather than
// the container being OOM-killed.
//
// JIT tiers. JSC runs code in its interpreter, then its baseline JIT, then, for code that stays hot,
// the optimizing DFG and FTL compilers. A controller's work is I/O, parsing and small decisions,
// in bursts: at 1,000 nodes joining at once, the optimizing tiers took the same CPU time as they
// saved, and the compilers' own code (~5 MiB of the executable's pages) stayed resident through the
// burst. The binary runs with the interpreter and the baseline JIT only.
//
// JSC reads its options once, at start-up, from BUN_JSC_* environment variables: the `run` command
// re-executes the binary (same PID, arguments and environment) with them set. A variable the
// operator set is kept as is.

import { readFileSync } from "node:fs";
import { totalmem } from "node:os";

/** JSC switches from its tiered growth rule to the 3× curve on machines with this much RAM (MB). */
const GROWTH_CURVE_VAR = "BUN_JSC_heapGrowthFunctionThresholdInMB";
/** How far the heap may grow between collections while the footprint is under 80 % and 90 % of RAM. */
const GROWTH_FACTOR_VARS = ["BUN_JSC_smallHeapGrowthFactor", "BUN_JSC_mediumHeapGrowthFactor"] as const;
/** Both steps' factor: a collection once the heap has grown by a quarter of what the last one kept. */
const GROWTH_FACTOR = "1.25";
/** The RAM JSC assumes the machine has, in bytes. */
const RAM_SIZE_VAR = "BUN_JSC_forceRAMSize";
/** Whether JSC's optimizing DFG JIT runs (the FTL JIT needs it, so neither does when false). */
const DFG_VAR = "BUN_JSC_useDFGJIT";
/** The largest value JSC's unsigned option takes: the curve is never used. */
const NEVER = "4294967295";
/** cgroup v1 reports "no limit" as a huge page-aligned number; anything from here on is no limit. */
const NO_LIMIT_V1 = 2 ** 62;

type Env = Readonly<Record<string, string | undefined>>;

/**
 * The environment variables to add for the options above, or undefined when there is nothing to
 * add: they are already set, by the first exec or by the operator (whose values win). The pacing
 * (the growth rule and its factors, the RAM size) counts as set once the growth rule's variable is.
 * @param memoryLimit reads the container's memory limit in bytes, if it has one; called only when
 *   needed, so the re-executed process reads no cgroup file
 */
export function jscEnv(env: Env, memoryLimit: () => number | undefined): Record<string, string> | undefined {
  const add: Record<string, string> = {};
  if (env[GROWTH_CURVE_VAR] === undefined) {
    add[GROWTH_CURVE_VAR] = NEVER;
    for (const v of GROWTH_FACTOR_VARS) if (env[v] === undefined) add[v] = GROWTH_FACTOR;
    const limit = env[RAM_SIZE_VAR] === undefined ? memoryLimit() : undefined;
    if (limit !== undefined) add[RAM_SIZE_VAR] = String(limit);
  }
  if (env[DFG_VAR] === undefined) add[DFG_VAR] = "false";
  return Object.keys(add).length > 0 ? add : undefined;
}

/**
 * A memory limit from the text of a cgroup file: cgroup v2's memory.max ("max" or bytes) or
 * v1's memory.limit_in_bytes. Undefined for no limit, or for one at or above the machine's RAM.
 */
export function parseMemoryLimit(text: string, ramBytes: number): number | undefined {
  const t = text.trim();
  if (!/^\d+$/.test(t)) return undefined;
  const n = Number(t);
  if (!(n > 0) || n >= NO_LIMIT_V1 || n >= ramBytes) return undefined;
  return n;
}

/**
 * The cgroup files that may hold this process's memory limit, from /proc/self/cgroup's text: the
 * files of its own cgroup (v2 unified and v1 memory controller) and those at the root of the
 * hierarchy as mounted (a container's own cgroup when it has a cgroup namespace).
 */
export function memoryLimitFiles(procSelfCgroup: string): string[] {
  const files = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"];
  for (const line of procSelfCgroup.split("\n")) {
    const [, controllers, path] = line.match(/^\d+:([^:]*):(\/.*)$/) ?? [];
    if (path === undefined || path === "/") continue;
    if (controllers === "") files.push(`/sys/fs/cgroup${path}/memory.max`);
    else if (controllers?.split(",").includes("memory"))
      files.push(`/sys/fs/cgroup/memory${path}/memory.limit_in_bytes`);
  }
  return files;
}

/** The smallest memory limit of this process's cgroups, if any (unreadable files count as none). */
export function containerMemoryLimit(read: (path: string) => string = readText): number | undefined {
  let limit: number | undefined;
  const ram = totalmem();
  for (const file of memoryLimitFiles(read("/proc/self/cgroup"))) {
    const n = parseMemoryLimit(read(file), ram);
    if (n !== undefined && (limit === undefined || n < limit)) limit = n;
  }
  return limit;
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/**
 * Re-executes the compiled binary with the options' environment when it lacks it; returns (and the
 * process goes on with JSC's defaults) when it has it, when this is not the compiled binary (e.g.
 * `bun main.ts`), or when exec fails, which it reports on stderr.
 */
export function execWithJscOptions(): void {
  if (!import.meta.path.startsWith("/$bunfs/")) return;
  const add = jscEnv(process.env, () => containerMemoryLimit());
  if (!add) return;
  try {
    process.execve?.(process.execPath, [process.execPath, ...process.argv.slice(2)], {
      ...process.env,
      ...add,
    });
  } catch (err) {
    process.stderr.write(`Cannot re-execute with JavaScriptCore's options (going on without them): ${err}\n`);
  }
}
