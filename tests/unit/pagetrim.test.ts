import { dlopen } from "bun:ffi";
import { describe, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { configureLogging } from "../../lib/log.ts";
import {
  fileRss,
  initialTrimState,
  MIN_GROWTH_BYTES,
  MIN_INTERVAL_MS,
  readOnlyFileMappings,
  startPageTrim,
  TICK_MS,
  trimNow,
  trimTick,
} from "../../lib/pagetrim.ts";

const MiB = 2 ** 20;

const MAPS = `55d0c0a00000-55d0c0a4b000 r--p 00000000 fd:01 1311 /usr/bin/ccm
55d0c0a4b000-55d0c2b00000 r-xp 0004b000 fd:01 1311 /usr/bin/ccm
55d0c2b00000-55d0c2c00000 rw-p 020b0000 fd:01 1311 /usr/bin/ccm
55d0c2c00000-55d0c2d00000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 rw-s 00000000 00:05 77 /dev/shm/x
7f0000100000-7f0000200000 ---p 00000000 00:00 0
7f0000200000-7f0000201000 r--p 00000000 fd:01 2222 /lib/x86_64-linux-gnu/libc.so.6 (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]
`;

describe("readOnlyFileMappings", () => {
  test("keeps read-only file-backed mappings, leaves out writable, anonymous and kernel ones", () => {
    expect(readOnlyFileMappings(MAPS)).toEqual([
      { start: 0x55d0c0a00000n, end: 0x55d0c0a4b000n },
      { start: 0x55d0c0a4b000n, end: 0x55d0c2b00000n },
      { start: 0x7f0000200000n, end: 0x7f0000201000n },
    ]);
    expect(readOnlyFileMappings("")).toEqual([]);
    expect(readOnlyFileMappings("garbage\n")).toEqual([]);
  });
});

describe("fileRss", () => {
  test("reads RssFile in bytes", () => {
    expect(fileRss("VmRSS:\t  90000 kB\nRssAnon:\t   40000 kB\nRssFile:\t   50000 kB\n")).toBe(50000 * 1024);
    expect(fileRss("VmRSS: 1 kB\n")).toBeNaN();
  });
});

describe("trimTick", () => {
  const state = { cpuMicros: 1_000_000, baseBytes: 10 * MiB, lastTrimMs: 0 };
  const quiet = {
    nowMs: MIN_INTERVAL_MS,
    cpuMicros: 1_000_000 + 10_000,
    fileRssBytes: 10 * MiB + MIN_GROWTH_BYTES,
  };

  test("trims after a quiet tick once file-backed RSS grew enough and the last trim is old", () => {
    expect(trimTick(state, quiet)).toEqual({
      trim: true,
      next: { cpuMicros: quiet.cpuMicros, baseBytes: undefined, lastTrimMs: quiet.nowMs },
    });
    const first = { nowMs: 5_000, cpuMicros: 0, fileRssBytes: 40 * MiB };
    expect(trimTick(initialTrimState(first), first).trim).toBe(true);
  });

  test("the tick after a trim reads what the process lives with; only growth above it trims again", () => {
    const { next } = trimTick(state, quiet);
    const settled = { nowMs: quiet.nowMs + TICK_MS, cpuMicros: quiet.cpuMicros, fileRssBytes: 22 * MiB };
    const after = trimTick(next, settled);
    expect(after).toEqual({ trim: false, next: { ...next, baseBytes: 22 * MiB } });
    const later = {
      nowMs: quiet.nowMs + 10 * MIN_INTERVAL_MS,
      cpuMicros: quiet.cpuMicros,
      fileRssBytes: 22 * MiB,
    };
    expect(trimTick(after.next, { ...later, fileRssBytes: 22 * MiB + MIN_GROWTH_BYTES - 1 }).trim).toBe(
      false,
    );
    expect(trimTick(after.next, { ...later, fileRssBytes: 22 * MiB + MIN_GROWTH_BYTES }).trim).toBe(true);
  });

  test("not while busy: 5 % of one CPU over the tick or more", () => {
    expect(trimTick(state, { ...quiet, cpuMicros: state.cpuMicros + TICK_MS * 50 }).trim).toBe(false);
    expect(trimTick(state, { ...quiet, cpuMicros: state.cpuMicros + TICK_MS * 50 - 1 }).trim).toBe(true);
    // The CPU time is measured from the previous tick, trimmed or not.
    expect(trimTick(state, { ...quiet, cpuMicros: state.cpuMicros + TICK_MS * 50 }).next.cpuMicros).toBe(
      state.cpuMicros + TICK_MS * 50,
    );
  });

  test("not for a small growth, nor sooner than the minimum interval", () => {
    expect(trimTick(state, { ...quiet, fileRssBytes: quiet.fileRssBytes - 1 }).trim).toBe(false);
    expect(trimTick(state, { ...quiet, nowMs: MIN_INTERVAL_MS - 1 }).trim).toBe(false);
  });
});

/** Rss of the read-only mappings of `path` in /proc/self/smaps, in kB. */
function mappedKb(path: string): number {
  let kb = 0;
  let inPath = false;
  for (const line of readFileSync("/proc/self/smaps", "utf8").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line))
      inPath = line.endsWith(` ${path}`) && line.split(" ")[1]?.[1] !== "w";
    else if (inPath && line.startsWith("Rss:")) kb += Number(line.match(/(\d+) kB/)?.[1]);
  }
  return kb;
}

describe("trimNow", () => {
  test.skipIf(process.platform !== "linux")(
    "the kernel takes back the pages of a read-only mapping only this process has",
    () => {
      const libc = dlopen("libc.so.6", { madvise: { args: ["u64", "u64", "i32"], returns: "i32" } });
      const madvise = (s: bigint, l: bigint, a: number) => libc.symbols.madvise(s, l, a) as number;
      // A private copy of a shared library, loaded: its read-only segments are mapped by this process
      // alone, and loading it touches some of their pages.
      const dir = mkdtempSync(join(tmpdir(), "pagetrim-"));
      const lib = join(dir, "libcopy.so");
      try {
        const libm = readFileSync("/proc/self/maps", "utf8").match(/\s(\/\S*\/libm\.so\.6)\n/)?.[1];
        copyFileSync(libm ?? "/lib/x86_64-linux-gnu/libm.so.6", lib);
        const copy = dlopen(lib, { cos: { args: ["f64"], returns: "f64" } });
        expect(copy.symbols.cos(0)).toBe(1);
        const before = mappedKb(lib);
        expect(before).toBeGreaterThan(0);
        expect(trimNow(madvise).advised).toBeGreaterThan(0);
        // Most of them: a page touched again since (or copied on write at load) stays.
        expect(mappedKb(lib) * 4).toBeLessThan(before);
        copy.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
        libc.close();
      }
    },
  );

  test("counts what the kernel refused; one refused mapping does not stop the others", () => {
    expect(trimNow(() => -1, MAPS)).toEqual({ advised: 0, refused: 3 });
    const seen: bigint[] = [];
    const firstRefused = (s: bigint, l: bigint) => {
      seen.push(s, l);
      return seen.length === 2 ? -1 : 0;
    };
    expect(trimNow(firstRefused, MAPS)).toEqual({ advised: 2, refused: 1 });
    expect(seen).toEqual([0x55d0c0a00000n, 0x4b000n, 0x55d0c0a4b000n, 0x20b5000n, 0x7f0000200000n, 0x1000n]);
  });
});

describe("startPageTrim", () => {
  /** Runs the trimmer on 50 ms ticks with `madvise` until a log line matches `re`. */
  async function runUntil(madvise: (s: bigint, l: bigint, a: number) => number, re: RegExp): Promise<string> {
    const lines: string[] = [];
    configureLogging({ verbosity: 4, write: (l) => lines.push(l) });
    const stop = startPageTrim({ tickMs: 50, load: async () => madvise });
    try {
      for (let i = 0; i < 100 && !lines.some((l) => re.test(l)); i++) await Bun.sleep(50);
      return lines.find((l) => re.test(l)) ?? `no line ${re} in: ${lines.join("")}`;
    } finally {
      stop();
      configureLogging({ verbosity: 0, write: (l) => process.stderr.write(l) });
    }
  }

  test.skipIf(process.platform !== "linux")(
    "on a quiet tick it advises every read-only file mapping and logs both readings",
    async () => {
      const advised: number[] = [];
      const line = await runUntil((_s, _l, advice) => {
        advised.push(advice);
        return 0;
      }, /Returned code pages/);
      expect(line).toMatch(/fileRssMiB="?[\d.]+"?.*afterMiB="?[\d.]+"?.*refused=0/);
      expect(advised.length).toBeGreaterThan(0);
      expect(new Set(advised)).toEqual(new Set([21])); // MADV_PAGEOUT, never anything else
    },
  );

  test.skipIf(process.platform !== "linux")("a kernel that refuses every mapping is reported", async () => {
    const line = await runUntil(() => -1, /refused MADV_PAGEOUT/);
    expect(line).toMatch(/code pages stay mapped.*refused=[1-9]/);
  });
});
