// The `manifests` subcommand: prints the manifests, the Talos patch, or (with --machine-config) the
// patch that moves one control-plane machine to this release (lib/talosmigration.ts); run as a
// script (`npm run manifests`), writes deploy/'s generated files. The I/O edge: what it prints and
// writes comes from lib/manifests.ts and lib/talosmigration.ts.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Controllers } from "./controllernames.ts";
import { deployFiles } from "./deployfiles.ts";
import type { ManifestsOptions } from "./flags.ts";
import { configureLogging, logger } from "./log.ts";
import { type ManifestSettings, renderManifests, settingsFrom } from "./manifests.ts";
import { renderTalosPatch } from "./talospatch.ts";
import { version as buildVersion } from "./version.ts";

const { nodeCsrApproval } = Controllers;

const log = logger("manifests");

/**
 * Runs `manifests`: prints the manifests, with `--talos-patch` the Talos patch, or with
 * `--machine-config` that machine's migration patch, to stdout. A `--cloud-config` file is validated
 * first; its warnings are printed, errors refuse.
 * @returns the exit code: 0, or 1 when the cloud config or the machine config cannot be read or is invalid
 */
export async function runManifests(opts: ManifestsOptions, warnings: readonly string[]): Promise<number> {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  for (const w of warnings) log.warn(w);
  let cloudConfig: string | undefined;
  const enabled = [...opts.enabledControllers];
  if (opts.cloudConfig !== undefined) {
    const { ConfigError, formatIssue, parseConfig } = await import("./config.ts");
    const { readConfig } = await import("./configfile.ts");
    try {
      // Read within the ConfigMap size limit: a larger file is refused before it is read.
      cloudConfig = readConfig(opts.cloudConfig);
      const config = parseConfig(cloudConfig);
      for (const w of config.warnings) {
        log.warn("Cloud config warning", { file: opts.cloudConfig, warning: formatIssue(w) });
      }
      // The manager runs node-csr-approval for this older reference setting too: grant what it needs.
      if (config.global.approveNodeCSR && !enabled.includes(nodeCsrApproval)) enabled.push(nodeCsrApproval);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      process.stderr.write(`Cannot embed cloud config ${opts.cloudConfig}: ${err.message}\n`);
      return 1;
    }
  }
  const s: ManifestSettings = {
    ...settingsFrom(opts, cloudConfig),
    enabledControllers: enabled,
    version: buildVersion,
  };
  if (opts.machineConfig !== undefined) return printMigrationPatch(s, opts.machineConfig);
  process.stdout.write(opts.talosPatch ? renderTalosPatch(s) : renderManifests(s));
  return 0;
}

/**
 * `manifests --machine-config FILE`: prints the migration patch for that machine
 * (lib/talosmigration.ts) and says on stderr what it removes and keeps.
 * @returns 0, or 1 when the file cannot be read or is no machine config
 */
async function printMigrationPatch(s: ManifestSettings, file: string): Promise<number> {
  const { MachineConfigError, planMigration, readMachineConfig, renderMigrationPatch } = await import(
    "./talosmigration.ts"
  );
  const { ConfigLimitError } = await import("./configlimits.ts");
  const { readConfigFile } = await import("./configfile.ts");
  let plan: ReturnType<typeof planMigration>;
  try {
    plan = planMigration(s, readMachineConfig(readConfigFile(file, "machine config")));
  } catch (err) {
    // Unreadable (a system error), too large, or no machine config; anything else is a bug.
    const known =
      err instanceof MachineConfigError ||
      err instanceof ConfigLimitError ||
      (err instanceof Error && typeof (err as NodeJS.ErrnoException).code === "string");
    if (!known) throw err;
    process.stderr.write(`Cannot read machine config ${file}: ${err.message}\n`);
    return 1;
  }
  for (const r of plan.removed) log.info("Removing", { path: r.path, entry: r.entry, installs: r.installs });
  if (plan.removed.length === 0)
    log.info("Nothing to remove: the machine config installs no other CCM", { file });
  for (const [list, entries] of Object.entries(plan.rewritten)) log.info("Rewriting", { list, entries });
  process.stdout.write(renderMigrationPatch(s, plan, file));
  return 0;
}

// `bun lib/manifestscommand.ts` (npm run manifests) regenerates deploy/*.yaml for package.json's version.
if (import.meta.main) {
  const root = join(import.meta.dir, "..");
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
  for (const [name, text] of Object.entries(deployFiles(pkg.version))) {
    mkdirSync(dirname(join(root, "deploy", name)), { recursive: true });
    writeFileSync(join(root, "deploy", name), text);
    console.log(`wrote deploy/${name}`);
  }
}
