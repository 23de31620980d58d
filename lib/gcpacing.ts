// How the binary paces JavaScriptCore's garbage collector for a long-running controller.
//
// JSC lets the heap grow between collections by a factor it picks from the machine's RAM: on 16 GB
// or more, a curve meant for browsers that allows 3× the live heap; below, 2× until the process's
// memory footprint passes 80 % of RAM, 1.5× to 90 %, and 1.24× above. A CCM's live heap is small and
// its garbage comes in bursts (nodes joining, CSRs), so at 3× a burst leaves heap capacity that JSC
// never returns. The binary always uses the tiered rule (2×, as Go's default GOGC=100 grows its
// heap), and inside a container with a memory limit it tells JSC that the limit is the RAM it has,
// so that collections get more frequent as the footprint nears the limit rather than the container
// being OOM-killed. JSC reads its options once, at start-up, from BUN_JSC_* environment variables:
// the `run` command re-executes the binary (same PID, arguments and environment) with them set.

import { readFileSync } from "node:fs";
import { totalmem } from "node:os";

/** JSC switches from its tiered growth rule to the 3× curve on machines with this much RAM (MB). */
const GROWTH_CURVE_VAR = "BUN_JSC_heapGrowthFunctionThresholdInMB";
/** The RAM JSC assumes the machine has, in bytes. */
const RAM_SIZE_VAR = "BUN_JSC_forceRAMSize";
/** The largest value JSC's unsigned option takes: the curve is never used. */
const NEVER = "4294967295";
/** cgroup v1 reports "no limit" as a huge page-aligned number; anything from here on is no limit. */
const NO_LIMIT_V1 = 2 ** 62;

type Env = Readonly<Record<string, string | undefined>>;

/**
 * The environment variables to add for the pacing above, or undefined when there is nothing to
 * add: JSC's options are already set, by the first exec or by the operator (whose values win).
 * @param memoryLimit reads the container's memory limit in bytes, if it has one; called only when
 *   needed, so the re-executed process reads no cgroup file
 */
export function pacingEnv(
  env: Env,
  memoryLimit: () => number | undefined,
): Record<string, string> | undefined {
  if (env[GROWTH_CURVE_VAR] !== undefined) return undefined;
  const add: Record<string, string> = { [GROWTH_CURVE_VAR]: NEVER };
  const limit = env[RAM_SIZE_VAR] === undefined ? memoryLimit() : undefined;
  if (limit !== undefined) add[RAM_SIZE_VAR] = String(limit);
  return add;
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
 * Re-executes the compiled binary with the pacing environment when it lacks it; returns (and the
 * process goes on with JSC's defaults) when it has it, when this is not the compiled binary (e.g.
 * `bun main.ts`), or when exec fails, which it reports on stderr.
 */
export function execWithPacing(): void {
  if (!import.meta.path.startsWith("/$bunfs/")) return;
  const add = pacingEnv(process.env, () => containerMemoryLimit());
  if (!add) return;
  try {
    process.execve?.(process.execPath, [process.execPath, ...process.argv.slice(2)], {
      ...process.env,
      ...add,
    });
  } catch (err) {
    process.stderr.write(
      `Cannot re-execute with the garbage collector's pacing (going on without it): ${err}\n`,
    );
  }
}
