// The release test's registry side: a local OCI registry (go-containerregistry's pkg/registry, on an
// ephemeral port of 127.0.0.1; tests/support/ociregistry) and crane, its command-line client, both
// built by tests/support/ociregistry-bins.sh (`npm test` sets OCI_REGISTRY and CRANE).

import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";

/** The binary an environment variable names; throws how to get it when it is missing. */
function binary(variable: "OCI_REGISTRY" | "CRANE"): string {
  const path = process.env[variable];
  if (!path || !existsSync(path)) {
    throw new Error(
      `${variable} not found: run the suite with \`npm test\` (tests/support/ociregistry-bins.sh builds the local OCI registry and crane), or set ${variable}`,
    );
  }
  return path;
}

/**
 * Checks that the registry and crane are there, so a test can fail before any slow set-up.
 * @throws how to get them when OCI_REGISTRY or CRANE is missing.
 */
export function requireRegistryTools(): void {
  binary("OCI_REGISTRY");
  binary("CRANE");
}

/** A local OCI registry, in memory, on 127.0.0.1 and a port the kernel picked. */
export class OciRegistry {
  readonly #proc: Subprocess<"pipe", "pipe", "pipe">;
  #log = "";
  /** `127.0.0.1:<port>`, the registry part of an image reference. */
  readonly address: string;

  private constructor(proc: Subprocess<"pipe", "pipe", "pipe">, address: string) {
    this.#proc = proc;
    this.address = address;
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of proc.stderr) this.#log = (this.#log + dec.decode(chunk)).slice(-100_000);
    })();
  }

  /**
   * Starts the registry and waits for the address it prints.
   * @throws when OCI_REGISTRY is missing, or the registry exits before printing its address.
   */
  static async start(): Promise<OciRegistry> {
    // stdin stays open: the registry exits when it closes, so a test that dies leaves none behind.
    const proc = spawn([binary("OCI_REGISTRY")], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    const reader = proc.stdout.getReader();
    const dec = new TextDecoder();
    let out = "";
    while (!out.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) {
        const err = await new Response(proc.stderr).text();
        throw new Error(`Cannot start the local OCI registry: exited with ${await proc.exited}: ${err}`);
      }
      out += dec.decode(value);
    }
    reader.releaseLock();
    const address = out.split("\n")[0] as string;
    if (!/^127\.0\.0\.1:\d+$/.test(address))
      throw new Error(`Cannot start the local OCI registry: printed ${out}`);
    return new OciRegistry(proc, address);
  }

  /** The registry's request log (its stderr), the last 100 kB. */
  log(): string {
    return this.#log;
  }

  /** Stops the registry (closing its stdin) and waits for it to exit. */
  async stop(): Promise<void> {
    await this.#proc.stdin.end();
    const timer = setTimeout(() => this.#proc.kill("SIGKILL"), 5_000);
    await this.#proc.exited;
    clearTimeout(timer);
  }
}

/**
 * Runs crane with `home` as its home and Docker config folder (no credentials of the user's).
 * @returns crane's stdout.
 * @throws when CRANE is missing or crane fails, with its stderr.
 */
export function crane(home: string, args: string[]): string {
  mkdirSync(join(home, ".docker"), { recursive: true });
  const r = spawnSync(binary("CRANE"), args, {
    encoding: "utf8",
    env: { PATH: process.env.PATH, HOME: home, DOCKER_CONFIG: join(home, ".docker") },
  });
  if (r.status !== 0) throw new Error(`crane ${args[0]} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}
