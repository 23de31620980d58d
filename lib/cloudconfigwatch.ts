// The cloud-config reload watch of `run`: polls the --cloud-config file, applies a valid new version
// to the ConfigHolder without a restart, logs and counts an invalid one and keeps the current config
// (talosccm_cloud_config_reloads_total). What a new content means is decided by
// lib/cloudconfigreload.ts.

import { contentDigest, reloadOutcome } from "./cloudconfigreload.ts";
import { type CompiledConfig, formatIssue } from "./config.ts";
import { readConfigFile } from "./configfile.ts";
import { ConfigLimitError } from "./configlimits.ts";
import type { ConfigHolder } from "./controller.ts";
import { logger } from "./log.ts";
import { registry } from "./metricsprocess.ts";

const log = logger("manager");

/** How often the cloud-config file is checked for a change. */
const CLOUD_CONFIG_POLL_MS = 2_000;

/** Logs each warning of a cloud config read from `path`. */
export function logConfigWarnings(config: CompiledConfig, path: string | undefined): void {
  for (const w of config.warnings) log.warn("Cloud config warning", { file: path, warning: formatIssue(w) });
}

/**
 * The digest of a cloud-config file's content, "" when it cannot be read or is over the size limit
 * (the error surfaces when it is loaded).
 */
export function fileDigest(path: string): string {
  try {
    return contentDigest(readConfigFile(path));
  } catch {
    return "";
  }
}

/** The file's content, its size-limit error, or undefined when it cannot be read now (a swap). */
function readForReload(path: string): string | ConfigLimitError | undefined {
  try {
    return readConfigFile(path);
  } catch (err) {
    // A file over the size limit is an invalid new version; an unreadable one is transient (a swap).
    if (err instanceof ConfigLimitError) return err;
    log
      .v(2)
      .info("Cannot read cloud config, keeping the current one", { file: path, err: (err as Error).message });
    return undefined;
  }
}

/**
 * Polls the cloud-config file and applies a valid new version without a restart; an invalid one is
 * logged, counted and ignored. Polling (not fs.watch) because ConfigMap volumes swap a symlink.
 * @param loadedDigest digest of the file taken before the running config was read from it
 * @returns stops the watch.
 */
export function watchCloudConfig(
  path: string | undefined,
  holder: ConfigHolder,
  loadedDigest: string,
  periodMs = CLOUD_CONFIG_POLL_MS,
): () => void {
  if (!path) return () => {};
  const reloads = registry.counter(
    "talosccm_cloud_config_reloads_total",
    "Cloud config reloads by result (success, error).",
    ["result"],
  );
  let last = loadedDigest;
  const timer = setInterval(() => {
    const content = readForReload(path);
    if (content === undefined) return;
    const outcome = reloadOutcome(last, content);
    if (outcome.kind === "unchanged") return;
    last = outcome.digest;
    try {
      if (outcome.kind === "invalid") throw outcome.error;
      logConfigWarnings(outcome.config, path);
      holder.set(outcome.config);
      reloads.inc({ result: "success" });
      log.info("Reloaded cloud config", { file: path });
    } catch (err) {
      // Invalid, or a listener of the holder failed on it.
      reloads.inc({ result: "error" });
      log.error("Cannot reload cloud config, keeping the current one", undefined, {
        file: path,
        err: (err as Error).message,
      });
    }
  }, periodMs);
  (timer as { unref?: () => void }).unref?.();
  return () => clearInterval(timer);
}
