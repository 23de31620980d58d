// Reading the cloud-config file (and validate's node metadata) from disk or stdin, within the size
// limit of lib/configlimits.ts: a larger file is refused before it is read, and one whose size is
// unknown (a pipe) or grows while read is never held past the limit plus one chunk. Parsing and
// compiling the text is lib/config.ts's.

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { type CompiledConfig, ConfigError, parseConfig } from "./config.ts";
import { type BoundedInput, ConfigLimitError, INPUT_LIMITS, tooLarge } from "./configlimits.ts";

/** Bytes read at a time from the config file. */
const READ_CHUNK_BYTES = 65_536;

/**
 * Reads a config (node metadata, a machine config) file, refusing it without reading it when it is larger
 * than its limit ({@link INPUT_LIMITS}), and never holding more than that limit plus one chunk when the size is
 * unknown (stdin, a pipe) or grows while being read.
 * @param path a file name, or a file descriptor (0 for stdin).
 * @param input what the file holds, named in the message when it is too large.
 * @throws {ConfigLimitError} when the file is too large; the system's error when it cannot be read.
 */
export function readConfigFile(path: string | number, input: BoundedInput = "config"): string {
  const fd = typeof path === "number" ? path : openSync(path, "r");
  try {
    const max = INPUT_LIMITS[input].bytes;
    const { size } = fstatSync(fd);
    if (size > max) throw tooLarge(`the file (${size} bytes)`, input);
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(READ_CHUNK_BYTES);
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      chunks.push(chunk.subarray(0, n));
      total += n;
      if (total > max) throw tooLarge("the file", input);
    }
    return Buffer.concat(chunks, total).toString("utf8");
  } finally {
    if (typeof path !== "number") closeSync(fd);
  }
}

/**
 * Reads and compiles the cloud-config file at `path` (see {@link parseConfig}).
 * @throws {ConfigError} when the file cannot be read or is invalid.
 */
export function loadConfig(path: string): CompiledConfig {
  return parseConfig(readConfig(path));
}

/**
 * Reads a cloud-config file without parsing it, refusing one over the size limit before reading it
 * (see {@link readConfigFile}).
 * @param path a file name
 * @throws {ConfigError} when the file cannot be read or is too large.
 */
export function readConfig(path: string): string {
  try {
    return readConfigFile(path);
  } catch (err) {
    if (err instanceof ConfigLimitError) throw new ConfigError([err.issue]);
    const reason = err instanceof Error ? err.message : String(err);
    throw new ConfigError([{ path: "", message: `cannot read ${path}: ${reason}` }], [], { cause: err });
  }
}
