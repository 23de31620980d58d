import { describe, expect, test } from "bun:test";
import { containerMemoryLimit, jscEnv, memoryLimitFiles, parseMemoryLimit } from "../../lib/jscoptions.ts";

const GB = 2 ** 30;
const MiB = 2 ** 20;

describe("jscEnv", () => {
  const GROWTH = {
    BUN_JSC_heapGrowthFunctionThresholdInMB: "4294967295",
    BUN_JSC_smallHeapGrowthFactor: "1.25",
    BUN_JSC_mediumHeapGrowthFactor: "1.25",
  };
  const NO_DFG = { BUN_JSC_useDFGJIT: "false" };

  test("always turns JSC's 3× growth curve and its optimizing JIT tiers off, grows the heap 1.25× between collections; passes a container's memory limit as the RAM size", () => {
    expect(jscEnv({}, () => undefined)).toEqual({ ...GROWTH, ...NO_DFG });
    expect(jscEnv({ PATH: "/bin" }, () => 256 * MiB)).toEqual({
      ...GROWTH,
      BUN_JSC_forceRAMSize: String(256 * MiB),
      ...NO_DFG,
    });
  });

  test("nothing to add once set (no second exec), and the operator's own values win", () => {
    const noRead = () => {
      throw new Error("read the cgroup files although nothing needs them");
    };
    expect(jscEnv({ ...GROWTH, ...NO_DFG }, noRead)).toBeUndefined();
    expect(
      jscEnv({ BUN_JSC_heapGrowthFunctionThresholdInMB: "16384", BUN_JSC_useDFGJIT: "true" }, noRead),
    ).toBeUndefined();
    expect(jscEnv({ BUN_JSC_heapGrowthFunctionThresholdInMB: "16384" }, noRead)).toEqual(NO_DFG);
    expect(jscEnv({ BUN_JSC_useDFGJIT: "1" }, () => undefined)).toEqual(GROWTH);
    expect(jscEnv({ BUN_JSC_forceRAMSize: "1000000000" }, noRead)).toEqual({ ...GROWTH, ...NO_DFG });
    expect(jscEnv({ BUN_JSC_smallHeapGrowthFactor: "2" }, () => undefined)).toEqual({
      BUN_JSC_heapGrowthFunctionThresholdInMB: "4294967295",
      BUN_JSC_mediumHeapGrowthFactor: "1.25",
      ...NO_DFG,
    });
  });
});

describe("container memory limit", () => {
  test("cgroup v2 'max' and v1's huge number are no limit; a limit at or above RAM is none either", () => {
    expect(parseMemoryLimit("max\n", 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit("9223372036854771712\n", 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit(`${8 * GB}\n`, 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit("", 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit("-1", 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit("0", 8 * GB)).toBeUndefined();
    expect(parseMemoryLimit(`${128 * MiB}\n`, 8 * GB)).toBe(128 * MiB);
  });

  test("the files: the mounted roots, then the process's own v2 and v1 memory cgroups", () => {
    const v1 = "12:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n0::/\n";
    expect(memoryLimitFiles(v1)).toEqual([
      "/sys/fs/cgroup/memory.max",
      "/sys/fs/cgroup/memory/memory.limit_in_bytes",
      "/sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes",
    ]);
    expect(memoryLimitFiles("0::/kubepods.slice/pod2/cri-c2.scope\n")).toEqual([
      "/sys/fs/cgroup/memory.max",
      "/sys/fs/cgroup/memory/memory.limit_in_bytes",
      "/sys/fs/cgroup/kubepods.slice/pod2/cri-c2.scope/memory.max",
    ]);
  });

  test("the smallest limit found wins; unreadable files count as none", () => {
    const files: Record<string, string> = {
      "/proc/self/cgroup": "0::/pod/c\n",
      "/sys/fs/cgroup/memory.max": "max\n",
      "/sys/fs/cgroup/pod/c/memory.max": `${96 * MiB}\n`,
    };
    expect(containerMemoryLimit((p) => files[p] ?? "")).toBe(96 * MiB);
    expect(containerMemoryLimit(() => "")).toBeUndefined();
  });
});
