// Structured logging in the two formats Kubernetes components print: klog text (the default) and
// the JSON of `--logging-format=json`. Owns verbosity (`--v`) and the redaction of secrets: values
// that look like PEM blocks or bearer tokens never reach the output.

import { dict } from "./dict.ts";
import type { LogFormat } from "./flags.ts";

/** Key/value pairs attached to a log line. */
export type Fields = Record<string, unknown>;

/** A logger bound to a name (shown where klog shows file:line) and to fixed fields. */
export interface Logger {
  /** Logs at verbosity 0. */
  info(msg: string, fields?: Fields): void;
  /** Logs a warning. */
  warn(msg: string, fields?: Fields): void;
  /** Logs an error with its cause. */
  error(msg: string, err?: unknown, fields?: Fields): void;
  /** Returns a logger that prints only when `--v` is at least `level`. */
  v(level: number): Pick<Logger, "info"> & { enabled: boolean };
  /** Returns a logger that adds `fields` to every line. */
  with(fields: Fields): Logger;
}

interface Settings {
  format: LogFormat;
  verbosity: number;
  write: (line: string) => void;
}

const settings: Settings = {
  format: "text",
  verbosity: 0,
  write: (line) => process.stderr.write(line),
};

/**
 * Sets the output format, verbosity and sink for every logger.
 * @param opts.write defaults to stderr; tests pass a collector.
 */
export function configureLogging(opts: Partial<Settings>): void {
  Object.assign(settings, opts);
}

const PEM = /-----BEGIN [A-Z0-9 ]+-----/;
const BEARER = /\bBearer\s+\S+/gi;

/** Replaces secrets in a string value: PEM blocks vanish whole, bearer tokens lose their token. */
function redact(value: string): string {
  if (PEM.test(value)) return "[redacted PEM]";
  return value.replace(BEARER, "Bearer [redacted]");
}

/**
 * A log-safe copy of `value`: strings redacted at any depth, errors as messages, objects with
 * toJSON (a Date, a URL) as what it returns, a cycle cut at "[circular]", bounded in depth.
 * @param ancestors the objects `value` is nested in.
 */
function plain(value: unknown, ancestors: object[] = []): unknown {
  if (value instanceof Error) return redact(value.message);
  if (typeof value === "string") return redact(value);
  if (typeof value === "bigint") return value.toString();
  if (value === undefined) return null;
  if (typeof value !== "object" || value === null) return value;
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") return plain(toJSON.call(value), ancestors);
  if (ancestors.includes(value)) return "[circular]";
  if (ancestors.length >= 8) return "[nested too deep]";
  const inner = [...ancestors, value];
  if (Array.isArray(value)) return value.map((v) => plain(v, inner));
  // Keys are whatever the logged object has (a Node's labels, a peer's answer): no prototype, so that
  // `__proto__` is a field like any other (lib/dict.ts).
  const out: Record<string, unknown> = dict<unknown>();
  for (const [k, v] of Object.entries(value)) out[k] = plain(v, inner);
  return out;
}

function quote(value: unknown): string {
  const v = plain(value);
  if (typeof v === "number" || typeof v === "boolean" || v === null) return String(v);
  if (typeof v === "string") return JSON.stringify(v);
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
  } catch {
    return JSON.stringify(String(v));
  }
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, "0");
}

function klogHeader(severity: string, name: string, now: Date): string {
  const ts =
    `${pad(now.getMonth() + 1, 2)}${pad(now.getDate(), 2)} ` +
    `${pad(now.getHours(), 2)}:${pad(now.getMinutes(), 2)}:${pad(now.getSeconds(), 2)}.` +
    `${pad(now.getMilliseconds() * 1000, 6)}`;
  return `${severity}${ts} ${String(process.pid).padStart(7)} ${name}]`;
}

function emit(severity: "I" | "W" | "E", level: number, name: string, msg: string, fields: Fields): void {
  const now = new Date();
  if (settings.format === "json") {
    const out: Record<string, unknown> = Object.assign(dict<unknown>(), {
      ts: now.getTime(),
      caller: name,
      msg: redact(msg),
    });
    if (severity === "I") out.v = level;
    for (const [k, v] of Object.entries(fields)) out[k] = plain(v);
    let line: string;
    try {
      line = JSON.stringify(out, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
    } catch {
      line = JSON.stringify({ ts: out.ts, caller: name, msg: out.msg, err: "unserializable log fields" });
    }
    settings.write(`${line}\n`);
    return;
  }
  let line = `${klogHeader(severity, name, now)} ${JSON.stringify(redact(msg))}`;
  for (const [k, v] of Object.entries(fields)) line += ` ${k}=${quote(v)}`;
  settings.write(`${line}\n`);
}

/**
 * Returns a logger named `name`.
 * @example logger("cloud-node").info("Initialized node", { node: "w1" })
 */
export function logger(name: string, base: Fields = {}): Logger {
  return {
    info: (msg, fields) => emit("I", 0, name, msg, { ...base, ...fields }),
    warn: (msg, fields) => emit("W", 0, name, msg, { ...base, ...fields }),
    error: (msg, err, fields) =>
      emit("E", 0, name, msg, err === undefined ? { ...base, ...fields } : { ...base, ...fields, err }),
    v: (level) => ({
      enabled: settings.verbosity >= level,
      info: (msg, fields) => {
        if (settings.verbosity >= level) emit("I", level, name, msg, { ...base, ...fields });
      },
    }),
    with: (fields) => logger(name, { ...base, ...fields }),
  };
}
