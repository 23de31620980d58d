// The `validate` subcommand's shell: reads the cloud config (within its size limit, lib/configfile.ts)
// and the sample node's Talos metadata, each from a file or from stdin (`-`, not both), and prints
// what lib/validatereport.ts validate() found: its stderr lines, then its stdout. Exit 2 when both
// would be stdin; 1 when a file cannot be read, a config over the size limit reported as validate()
// reports an invalid one; otherwise validate()'s exit code.

import { formatIssue } from "./config.ts";
import { readConfigFile } from "./configfile.ts";
import { ConfigLimitError } from "./configlimits.ts";
import type { ValidateOptions } from "./flags.ts";
import { configureLogging, logger } from "./log.ts";
import { validate } from "./validatereport.ts";

const log = logger("validate");

/** Reads a file; the cloud config within its size limit (see readConfigFile). */
function readInput(path: string, what: "cloud config" | "node metadata"): string {
  // "-" reads stdin, so that `talosctl get … -o yaml | … validate --metadata -` works.
  const source = path === "-" ? 0 : path;
  return readConfigFile(source, what === "cloud config" ? "config" : "node metadata");
}

/**
 * Runs `validate`: reads the files, prints the outcome of {@link validate}.
 * @returns the exit code: 0, 1 when a file cannot be read or is invalid, 2 when both would be stdin.
 */
export function runValidate(opts: ValidateOptions, warnings: readonly string[]): number {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  for (const w of warnings) log.warn(w);
  if (opts.cloudConfig === "-" && opts.metadata === "-") {
    process.stderr.write(
      "Cannot read both the cloud config and the node metadata from stdin: give one a file\n",
    );
    return 2;
  }
  const texts: { configText?: string; metadataText?: string } = {};
  for (const [key, path, what] of [
    ["configText", opts.cloudConfig, "cloud config"],
    ["metadataText", opts.metadata, "node metadata"],
  ] as const) {
    if (path === undefined) continue;
    try {
      texts[key] = readInput(path, what);
    } catch (err) {
      // A file over the size limit is an invalid config, reported as validate() reports one.
      if (err instanceof ConfigLimitError) {
        const label = path === "-" ? "stdin" : path;
        process.stderr.write(`${label}: error: ${formatIssue(err.issue)}\n${label}: invalid (1 error)\n`);
      } else process.stderr.write(`Cannot read ${what} ${path}: ${(err as Error).message}\n`);
      return 1;
    }
  }
  const outcome = validate({
    configPath: opts.cloudConfig === "-" ? "stdin" : opts.cloudConfig,
    configText: texts.configText ?? "",
    ...(opts.metadata === undefined ? {} : { metadataPath: opts.metadata === "-" ? "stdin" : opts.metadata }),
    ...(texts.metadataText === undefined ? {} : { metadataText: texts.metadataText }),
    ...(opts.output === undefined ? {} : { output: opts.output }),
  });
  if (outcome.stderr.length > 0) process.stderr.write(`${outcome.stderr.join("\n")}\n`);
  process.stdout.write(outcome.stdout);
  return outcome.exitCode;
}
