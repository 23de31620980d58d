// What a re-read of the cloud-config file means, pure: its content's digest, and whether the new
// content is unchanged, a valid new config, or an invalid one (kept out). lib/cloudconfigwatch.ts
// reads the file and applies the outcome.

import { createHash } from "node:crypto";
import { type CompiledConfig, ConfigError, parseConfig } from "./config.ts";
import type { ConfigLimitError } from "./configlimits.ts";

/** Stands for the digest of a cloud-config file over the size limit, which is not read. */
const TOO_LARGE = "too-large";

/**
 * The digest of a cloud-config file's content (sha256, hex), or a fixed stand-in when it was over
 * the size limit.
 */
export function contentDigest(content: string | ConfigLimitError): string {
  return typeof content === "string" ? createHash("sha256").update(content).digest("hex") : TOO_LARGE;
}

/** What a re-read of the cloud-config file found. */
export type ReloadOutcome =
  | { kind: "unchanged" }
  | { kind: "valid"; digest: string; config: CompiledConfig }
  | { kind: "invalid"; digest: string; error: Error };

/**
 * Whether the content read now differs from the content of digest `last`, and if so whether it is a
 * valid config. A file over the size limit is an invalid new version.
 * @example reloadOutcome(contentDigest(text), text) // { kind: "unchanged" }
 */
export function reloadOutcome(last: string, content: string | ConfigLimitError): ReloadOutcome {
  const digest = contentDigest(content);
  if (digest === last) return { kind: "unchanged" };
  try {
    if (typeof content !== "string") throw new ConfigError([content.issue]);
    return { kind: "valid", digest, config: parseConfig(content) };
  } catch (err) {
    return { kind: "invalid", digest, error: err as Error };
  }
}
