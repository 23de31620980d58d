// helm for the tests: the test bed's (helm.sh/helm/v3, built by tests/support/testbed-bins.sh; `npm
// test` sets HELM), run with its cache, config, data and registry logins in a test's folder.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

/**
 * The helm binary HELM names.
 * @throws how to get it when HELM is unset or names no file.
 */
export function helmBinary(): string {
  const helm = process.env.HELM;
  if (!helm || !existsSync(helm)) {
    throw new Error(
      "helm not found: run the suite with `npm test` (tests/support/testbed-bins.sh builds helm.sh/helm/v3), or set HELM",
    );
  }
  return helm;
}

/**
 * Runs helm with `home` as its home and its cache, config and data under it, never the user's.
 * @returns helm's exit status and output; the caller decides what a failure means.
 */
export function runHelm(
  home: string,
  args: string[],
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(helmBinary(), args, {
    encoding: "utf8",
    env: {
      PATH: process.env.PATH,
      HOME: home,
      HELM_CACHE_HOME: join(home, "cache"),
      HELM_CONFIG_HOME: join(home, "config"),
      HELM_DATA_HOME: join(home, "data"),
    },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
