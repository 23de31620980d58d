// The Talos side of the benchmark (`npm run bench -- --talos fake|apid`): the N generated machines
// served by the in-process fake apid (tests/support/apid.ts, the default), or by the Talos simulator
// with Talos' own apid in front (tests/support/talossim.ts with `apid`), as on a control-plane node.
// Both count the Talos calls the CCM makes the same way: when a call reaches a machine, at its start
// (the fake counts what it receives; the simulator counts what apid passed on to a machine's apid,
// or to machined for the local one). With apid, a note also gives apid's own count (its log, when
// calls end), and the simulator's network namespace is there for the CCM to run in (netns), where
// every machine's apid answers at <ip>:50000 and the talosconfig's endpoint works as on the host.

import { RESOURCES } from "../../lib/taloswire.ts";
import { FakeApid } from "./apid.ts";
import type { FakeNodeSpec } from "./fixtures.ts";
import { simMachineCalls } from "./simmachines.ts";
import { type ControlCall, TalosSim } from "./talossim.ts";

/** Which Talos the CCM talks to. */
export type TalosKind = "fake" | "apid";

/** The simulator's network namespace (kind "apid"), for the CCM to run in (TalosSim.netns). */
export interface BenchNetns {
  /** `/proc/<pid>/ns/net`, for CcmProcess's `netns`. */
  readonly path: string;
  /** Makes the host's `addr` (`IP:port`) answer at the same address in the namespace. */
  forward(addr: string): Promise<void>;
  /** Makes the namespace's `addr` (`IP:port`) answer at the same address on the host. */
  expose(addr: string): Promise<void>;
}

/** The Talos side of one run. */
export interface BenchTalos {
  readonly kind: TalosKind;
  /** Starts counting calls from zero. */
  resetCalls(): Promise<void>;
  /** Calls since the last reset. */
  calls(): Promise<number>;
  /** Calls since the last reset by method (and resource type where known), e.g. "Watch PlatformMetadatas 100". */
  breakdown(): Promise<string>;
  /** Writes the CCM's talosconfig (role os:reader) to `path`. */
  writeTalosconfig(path: string): Promise<string>;
  /** Talos' apid's pid (kind "apid"). */
  readonly apidPid: number | undefined;
  /** The simulated machines' process (kind "apid"; the fake runs inside the bench). */
  readonly machinesPid: number | undefined;
  /** The in-process fake apid (kind "fake"), for runs that change what a machine reports. */
  readonly fake?: FakeApid;
  /** The simulator's network namespace (kind "apid"). */
  readonly netns?: BenchNetns;
  stop(): Promise<void>;
}

/** Calls per method from `before` to `after` (counters only grow), methods without calls left out. */
export function diffCalls(
  before: Readonly<Record<string, number>>,
  after: Readonly<Record<string, number>>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [m, n] of Object.entries(after)) {
    const d = n - (before[m] ?? 0);
    if (d > 0) out[m] = d;
  }
  return out;
}

/** "/cosi.resource.State/Watch" → "State/Watch": the service's last name and the method. */
export function shortMethod(full: string): string {
  const [service = "", method = ""] = full.split("/").slice(-2);
  return `${service.split(".").at(-1)}/${method}`;
}

/** e.g. "State/Watch 200, MachineService/Version 1": most calls first, ties by full name; or "none". */
export function formatMethodCounts(counts: Readonly<Record<string, number>>): string {
  const parts = Object.entries(counts)
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([m, n]) => `${shortMethod(m)} ${n}`);
  return parts.join(", ") || "none";
}

const sum = (c: Readonly<Record<string, number>>) => Object.values(c).reduce((a, b) => a + b, 0);

/** The in-process fake apid serving `specs`. */
export async function fakeTalos(specs: FakeNodeSpec[]): Promise<BenchTalos> {
  const apid = await FakeApid.start({ nodes: specs });
  return {
    kind: "fake",
    apidPid: undefined,
    machinesPid: undefined,
    fake: apid,
    resetCalls: async () => apid.resetCalls(),
    calls: async () => apid.calls(),
    breakdown: async () => {
      const parts: string[] = [];
      for (const method of ["Get", "List", "Watch", "Version"] as const) {
        if (method === "Version") {
          const n = apid.calls({ method });
          if (n) parts.push(`Version ${n}`);
          continue;
        }
        for (const { type } of Object.values(RESOURCES)) {
          const n = apid.calls({ method, type });
          if (n) parts.push(`${method} ${type.split(".")[0]} ${n}`);
        }
      }
      return parts.join(", ") || "none";
    },
    writeTalosconfig: (path) => apid.writeTalosconfig(path),
    stop: () => apid.stop(),
  };
}

/** Machines per control request when seeding the simulator. */
const SEED_BATCH = 250;

/**
 * The Talos simulator with Talos' apid in front, serving `specs` (seeded in bulk). apid runs with
 * the environment machined gives it, GOMEMLIMIT included (APID_GOMEMLIMIT overrides it).
 * @param progress reports seeding.
 */
export async function apidTalos(specs: FakeNodeSpec[], progress: (m: string) => void): Promise<BenchTalos> {
  const sim = await TalosSim.start({ apid: true });
  try {
    const t0 = performance.now();
    for (let i = 0; i < specs.length; i += SEED_BATCH) {
      const calls: ControlCall[] = specs.slice(i, i + SEED_BATCH).flatMap(simMachineCalls);
      await sim.batch(calls);
    }
    progress(`  seeded ${specs.length} machines in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } catch (err) {
    await sim.stop();
    throw err;
  }
  let base: Record<string, number> = {};
  let logBase: Record<string, number> = {};
  const since = async () => diffCalls(base, await sim.machineCalls());
  return {
    kind: "apid",
    get apidPid() {
      return sim.apidPid;
    },
    get machinesPid() {
      return sim.simPid;
    },
    netns: {
      get path() {
        return sim.netns;
      },
      forward: (addr) => sim.forwardIntoNetns(addr),
      expose: (addr) => sim.exposeFromNetns(addr),
    },
    resetCalls: async () => {
      base = await sim.machineCalls();
      logBase = await sim.calls();
    },
    calls: async () => sum(await since()),
    breakdown: async () => {
      const ended = diffCalls(logBase, await sim.calls());
      return `${formatMethodCounts(await since())}; apid's log, calls ended: ${formatMethodCounts(ended)}`;
    },
    writeTalosconfig: async (path) => {
      await Bun.write(path, await Bun.file(sim.talosconfig).text());
      return path;
    },
    stop: () => sim.stop(),
  };
}
