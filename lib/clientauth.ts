// Reads the client CA bundles of the secure port (`--client-ca-file`,
// `--requestheader-client-ca-file`); lib/clientcerts.ts parses them and makes every decision.

import type { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseCABundle } from "./clientcerts.ts";

/**
 * The certificates of a PEM bundle file.
 * @throws {Error} naming the file and the flag when it cannot be read or holds no certificate.
 */
export function loadCABundle(path: string, flag: string): X509Certificate[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new Error(`Cannot read ${flag} ${path}: ${(err as Error).message}`, { cause: err });
  }
  return parseCABundle(text, `${flag} ${path}`);
}
