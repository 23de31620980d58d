// The CCM under a memory limit for the bench (`npm run bench -- --memory-limit MiB`), as a container
// runtime sets one: each CCM start joins a child of this process's memory cgroup (cgroup v2
// memory.max, or v1 memory.limit_in_bytes) with the limit, so the binary finds it and sizes JSC's
// heap to it (lib/jscoptions.ts), and the kernel kills it if it goes over. Its OOM kills are read back
// from memory.events (v2) or memory.oom_control (v1).

import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { memoryLimitFiles } from "../../lib/jscoptions.ts";

let made = 0;

/** One child memory cgroup with a limit; {@link remove} once its process has exited. */
export class MemoryCgroup {
  readonly dir: string;
  readonly limitBytes: number;
  readonly #v2: boolean;

  private constructor(dir: string, limitBytes: number, v2: boolean) {
    this.dir = dir;
    this.limitBytes = limitBytes;
    this.#v2 = v2;
  }

  /**
   * Makes a child of this process's own memory cgroup limited to `limitBytes`.
   * @throws {Error} naming the cause when no memory cgroup is writable here (the bench needs root).
   */
  static create(limitBytes: number): MemoryCgroup {
    const own = memoryLimitFiles(readFileSync("/proc/self/cgroup", "utf8"))
      .filter((f) => existsSync(f))
      .at(-1);
    if (!own)
      throw new Error(
        "Cannot run the CCM under --memory-limit: no memory cgroup (v1 or v2) found for this process",
      );
    const dir = join(dirname(own), `talos-ccm-bench-${process.pid}-${made++}`);
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, basename(own)), String(limitBytes));
    } catch (err) {
      throw new Error(
        `Cannot run the CCM under --memory-limit: cannot make cgroup ${dir} (root is needed): ${(err as Error).message}`,
        { cause: err },
      );
    }
    return new MemoryCgroup(dir, limitBytes, basename(own) === "memory.max");
  }

  /** How many times the kernel killed a process of this cgroup for memory. */
  oomKills(): number {
    const file = join(this.dir, this.#v2 ? "memory.events" : "memory.oom_control");
    const text = existsSync(file) ? readFileSync(file, "utf8") : "";
    return Number(/^oom_kill (\d+)$/m.exec(text)?.[1] ?? 0);
  }

  /** Removes the cgroup (its processes have exited; a just-exited one may take a moment to leave it). */
  async remove(): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        rmdirSync(this.dir);
        return;
      } catch (err) {
        if (i >= 50) throw err;
        await Bun.sleep(20);
      }
    }
  }
}
