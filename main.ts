// Entry point of the talos-cloud-controller-manager binary: parses the command line and runs the
// subcommand. Everything else is imported lazily, so `--version` stays fast and a subcommand or a
// disabled controller costs no memory.

import { parseCommandLine } from "./lib/flags.ts";
import { helpText, usage } from "./lib/help.ts";
import { FlagError } from "./lib/pflag.ts";
import { commit, formatVersionRaw, version, versionInfo } from "./lib/version.ts";

let parsed: ReturnType<typeof parseCommandLine>;
try {
  parsed = parseCommandLine(process.argv.slice(2), process.env);
} catch (err) {
  if (!(err instanceof FlagError)) throw err;
  process.stderr.write(`${err.message}\n\n${usage()}\n`);
  process.exit(err.exitCode);
}

switch (parsed.command) {
  case "help":
    process.stdout.write(`${helpText(parsed.options.topic)}\n`);
    break;
  case "version":
    process.stdout.write(
      parsed.options.raw
        ? `${formatVersionRaw(versionInfo())}\n`
        : `talos-cloud-controller-manager ${version} (commit ${commit}, bun ${Bun.version})\n`,
    );
    break;
  case "run": {
    // JSC reads its options (GC pacing, JIT tiers) at start-up: re-executes with them (lib/jscoptions.ts).
    (await import("./lib/jscoptions.ts")).execWithJscOptions();
    const { run } = await import("./lib/manager.ts");
    await run(parsed.options, parsed.warnings);
    break;
  }
  case "validate": {
    const { runValidate } = await import("./lib/validatecommand.ts");
    process.exitCode = runValidate(parsed.options, parsed.warnings);
    break;
  }
  case "manifests": {
    const { runManifests } = await import("./lib/manifestscommand.ts");
    process.exitCode = await runManifests(parsed.options, parsed.warnings);
    break;
  }
  case "preflight": {
    const { runPreflight } = await import("./lib/preflightcommand.ts");
    process.exitCode = await runPreflight(parsed.options, parsed.warnings);
    break;
  }
}
