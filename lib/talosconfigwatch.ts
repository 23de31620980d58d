// Watching the talosconfig file for rotation: the file's content stamp (inode, size, mtime), and a
// watcher that calls back when the file or its directory changes (Kubernetes swaps secret files
// through a symlink in the directory) and on a poll timer as a safety net. The client
// (lib/talos.ts) decides what a change means.

import { type FSWatcher, watch as fsWatch, statSync } from "node:fs";
import { basename, dirname } from "node:path";
import { logger } from "./log.ts";

const log = logger("talos");

/** Identity of a file's current content (inode, size, mtime), "" when it cannot be read. */
export function fileStamp(path: string): string {
  try {
    const s = statSync(path);
    return `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch {
    return "";
  }
}

/** A running talosconfig watch. */
export interface ConfigFileWatch {
  /** Stops watching and polling. */
  close(): void;
}

/**
 * Calls `onChange` 100 ms after the last change event for the file `path` (or a `..`-prefixed
 * entry of its directory), and every `pollMs`. Neither keeps the process alive. When the directory
 * cannot be watched it only polls.
 * @example const w = watchConfigFile("/var/run/secrets/talos/config", () => void client.reload(), 60_000); w.close();
 */
export function watchConfigFile(path: string, onChange: () => void, pollMs: number): ConfigFileWatch {
  let fileWatcher: FSWatcher | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    fileWatcher = fsWatch(dirname(path), (_event, file) => {
      if (file && file !== basename(path) && !String(file).startsWith("..")) return;
      clearTimeout(timer);
      timer = setTimeout(onChange, 100);
    });
    fileWatcher.on("error", (err) => log.warn("Stopped watching the talosconfig", { path, err }));
    fileWatcher.unref?.();
  } catch (err) {
    log.warn("Cannot watch the talosconfig; polling it", { path, err });
  }
  const pollTimer = setInterval(onChange, pollMs);
  pollTimer.unref?.();
  return {
    close: () => {
      fileWatcher?.close();
      clearInterval(pollTimer);
    },
  };
}
