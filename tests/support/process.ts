// Runs the compiled CCM binary in tests: start it with arguments and environment, wait for log lines,
// read its metrics, stop it with a signal. The binary comes from CCM_BINARY (tests/run.ts builds it)
// or dist/; a missing binary fails the test loudly.

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { nsenterCommand } from "./netns.ts";

/** Path of the binary under test. */
export function ccmBinary(): string {
  const arch = process.arch === "arm64" ? "arm64" : "amd64";
  const path =
    process.env.CCM_BINARY ??
    join(import.meta.dir, "..", "..", "dist", `talos-cloud-controller-manager-linux-${arch}`);
  if (!existsSync(path)) {
    throw new Error(
      `Cannot find the binary under test at ${path}: run the suite with \`npm test\` (it builds it) or \`npm run build\``,
    );
  }
  return path;
}

const live = new Set<Subprocess>();
process.once("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

/** How {@link CcmProcess} runs the binary. */
export interface CcmOptions {
  /**
   * The environment besides PATH and HOME. TALOS_MACHINE_ACCESS is `proxy` unless given: the test
   * beds' machines are reached only through their apid endpoint (the fake apid, or Talos' apid in
   * front of the simulator), so a direct try would only add a fallback to every first call.
   */
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Print the process' output to the test's stderr as it comes (or set TEST_LOG=1). */
  echo?: boolean;
  /** A cgroup directory the process joins before the binary starts. */
  cgroup?: string;
  /**
   * A network namespace to run the binary in (e.g. TalosSim.netns, `/proc/<pid>/ns/net`), entered
   * with nsenter (tests/support/netns.ts) after the cgroup is joined; nsenter execs the binary, so
   * {@link CcmProcess.pid} is still the binary's.
   */
  netns?: string;
  /** Another executable to run the same way, e.g. a cloud's own CCM (default: the binary under test). */
  binary?: string;
}

/** A running CCM process with its collected output. */
export class CcmProcess {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  output = "";
  readonly #waiters = new Set<() => void>();

  constructor(args: string[], opts: CcmOptions = {}) {
    // Joining a cgroup before the binary starts: the shell moves itself, then becomes the binary (or
    // nsenter, which enters the namespace and becomes the binary).
    const binary = opts.binary ?? ccmBinary();
    const run = opts.netns ? nsenterCommand(opts.netns, [binary, ...args]) : [binary, ...args];
    const command = opts.cgroup
      ? ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', opts.cgroup, ...run]
      : run;
    this.proc = spawn(command, {
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TALOS_MACHINE_ACCESS: "proxy", ...opts.env },
      cwd: opts.cwd ?? process.cwd(),
    });
    live.add(this.proc);
    const echo = opts.echo || process.env.TEST_LOG === "1";
    for (const stream of [this.proc.stdout, this.proc.stderr]) {
      void (async () => {
        const dec = new TextDecoder();
        for await (const chunk of stream) {
          const s = dec.decode(chunk);
          this.output += s;
          if (echo) process.stderr.write(s);
          for (const w of this.#waiters) w();
        }
      })();
    }
    void this.proc.exited.then(() => {
      live.delete(this.proc);
      for (const w of this.#waiters) w();
    });
  }

  get pid(): number {
    return this.proc.pid;
  }

  get exitCode(): number | null {
    return this.proc.exitCode;
  }

  /** Resolves with the first output match of `re`; rejects on timeout or exit. */
  waitForLog(re: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const m = this.output.match(re);
        if (m) {
          cleanup();
          resolve(m);
        } else if (this.proc.exitCode !== null) {
          cleanup();
          reject(new Error(`CCM exited (${this.proc.exitCode}) before ${re}:\n${this.output.slice(-4000)}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${re}:\n${this.output.slice(-4000)}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }

  /** Sends `signal` and waits for the exit code. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<number> {
    if (this.proc.exitCode === null) this.proc.kill(signal);
    return this.proc.exited;
  }

  /** Resident set size in bytes, read from /proc. */
  rssBytes(): number {
    const text = readFileSync(`/proc/${this.pid}/status`, "utf8");
    const kb = Number(text.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
    return kb * 1024;
  }
}

/** How an end-to-end test runs the CCM: the flags every such test sets the same way, and its own. */
export interface CcmSetup {
  kubeconfig: string;
  /** `--controllers`, e.g. "cloud-node". */
  controllers?: string;
  /** The talosconfig, given as TALOSCONFIG; none runs without Talos API access. */
  talosconfig?: string;
  /** `--cloud-config`. */
  cloudConfig?: string;
  /** `--secure-port`; 0 (the default) turns serving off. Serving binds 127.0.0.1 only. */
  securePort?: number;
  /** `--authorization-always-allow-paths`, e.g. "/healthz,/metrics". */
  alwaysAllowPaths?: string;
  /** `--kube-api-qps` and `--kube-api-burst`. */
  kubeApiQps?: number;
  /** `--leader-elect`; off unless set. */
  leaderElect?: boolean;
  /** More flags, after the common ones (a flag repeated here wins). */
  args?: string[];
  env?: Record<string, string | undefined>;
  echo?: boolean;
  /** A network namespace to run the binary in ({@link CcmOptions.netns}). */
  netns?: string;
}

/** The command line of {@link CcmSetup}. */
export function ccmArgs(s: CcmSetup): string[] {
  return [
    `--kubeconfig=${s.kubeconfig}`,
    ...(s.controllers === undefined ? [] : [`--controllers=${s.controllers}`]),
    ...(s.cloudConfig === undefined ? [] : [`--cloud-config=${s.cloudConfig}`]),
    `--leader-elect=${s.leaderElect ?? false}`,
    "--bind-address=127.0.0.1",
    `--secure-port=${s.securePort ?? 0}`,
    ...(s.alwaysAllowPaths === undefined ? [] : [`--authorization-always-allow-paths=${s.alwaysAllowPaths}`]),
    ...(s.kubeApiQps === undefined
      ? []
      : [`--kube-api-qps=${s.kubeApiQps}`, `--kube-api-burst=${s.kubeApiQps}`]),
    ...(s.args ?? []),
  ];
}

/** Starts the CCM of {@link CcmSetup} without waiting for it. */
export function ccmProcess(s: CcmSetup): CcmProcess {
  const env = { ...(s.talosconfig === undefined ? {} : { TALOSCONFIG: s.talosconfig }), ...s.env };
  return new CcmProcess(ccmArgs(s), {
    env,
    ...(s.echo === undefined ? {} : { echo: s.echo }),
    ...(s.netns === undefined ? {} : { netns: s.netns }),
  });
}

/** Starts the CCM of {@link CcmSetup} and resolves once it has logged each of `ready`, in order. */
export async function startCcm(s: CcmSetup, ...ready: RegExp[]): Promise<CcmProcess> {
  const p = ccmProcess(s);
  for (const re of ready) await p.waitForLog(re);
  return p;
}
