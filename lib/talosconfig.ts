// talosconfig: where it is looked for, how it is parsed and validated (current context,
// endpoints, PEM material with Talos' Ed25519 key label fixed, roles and expiry of the client
// certificate). Loaded at start-up, before
// and without the gRPC transport (lib/grpc.ts) or the protobuf code: a broken talosconfig is
// reported before any call.

import { createPrivateKey, X509Certificate } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { own } from "./dict.ts";
import { TalosConfigError } from "./taloserrors.ts";
import { SERVICE_ACCOUNT_TALOSCONFIG } from "./wellknown.ts";

/** apid's port; endpoints without one get it (`https://host` without a port gets 443). */
export const DEFAULT_PORT = 50000;

/** Default talosconfig path inside a pod (lib/wellknown.ts). */
export { SERVICE_ACCOUNT_TALOSCONFIG };

const ACCESS_HINT =
  "Talos API access for the CCM needs machine.features.kubernetesTalosAPIAccess enabled in the " +
  "control-plane machine config (allowedRoles: [os:reader], allowedKubernetesNamespaces: the CCM's " +
  "namespace) and a talos.dev/v1alpha1 ServiceAccount with roles [os:reader] whose secret is mounted at " +
  "/var/run/secrets/talos.dev";

// ---------------------------------------------------------------------------------------------
// talosconfig

/** One apid endpoint. */
export interface TalosEndpoint {
  host: string;
  port: number;
}

/** The current context of a talosconfig, validated, with PEM material ready for TLS. */
export interface TalosConfig {
  /** The file it was read from. */
  path: string;
  context: string;
  endpoints: TalosEndpoint[];
  /** CA bundle PEM; absent means the system roots. */
  ca?: string;
  /** Client certificate PEM. */
  crt: string;
  /** Client key PEM, with Talos' `ED25519 PRIVATE KEY` label rewritten to `PRIVATE KEY`. */
  key: string;
  /** The context's cluster name, "" when absent (the Go CCM uses it for the clustername label). */
  cluster: string;
  /** Roles of the client certificate (its Subject O), e.g. `os:reader`. */
  roles: string[];
  /** When the client certificate expires (6 hours for the in-cluster one). */
  certNotAfter: Date;
}

/** Where and how {@link loadTalosConfig} looks; every field defaults to the real environment. */
export interface LoadTalosConfigOptions {
  /** An explicit file; skips the search. */
  path?: string;
  env?: Record<string, string | undefined>;
  home?: string;
  exists?: (path: string) => boolean;
  readFile?: (path: string) => string;
}

/**
 * The talosconfig files looked at, in order: `$TALOSCONFIG`, `$TALOS_HOME/config` (default
 * `~/.talos/config`), then the ServiceAccount mount.
 */
export function talosConfigCandidates(env: Record<string, string | undefined>, home: string): string[] {
  const out: string[] = [];
  if (env.TALOSCONFIG) out.push(env.TALOSCONFIG);
  out.push(join(env.TALOS_HOME || join(home, ".talos"), "config"));
  out.push(SERVICE_ACCOUNT_TALOSCONFIG);
  return out;
}

/**
 * Parses one endpoint: `host`, `host:port`, `[v6]:port`, a bare IPv6 address or `https://host[:port]`.
 * @throws {TalosConfigError} on an empty value, another scheme or a bad port.
 */
export function parseEndpoint(raw: string): TalosEndpoint {
  const fail = (why: string) => new TalosConfigError("", `Cannot parse Talos endpoint "${raw}": ${why}`);
  let s = raw.trim();
  let port = DEFAULT_PORT;
  const scheme = s.match(/^([a-z][a-z0-9+.-]*):\/\//i);
  if (scheme) {
    if (scheme[1]?.toLowerCase() !== "https") throw fail("only https:// is supported");
    s = s.slice(scheme[0].length).replace(/\/.*$/, "");
    port = 443;
  }
  if (!s) throw fail("empty host");
  let host = s;
  let portText: string | undefined;
  if (s.startsWith("[")) {
    const end = s.indexOf("]");
    if (end < 0) throw fail("unclosed [");
    host = s.slice(1, end);
    const rest = s.slice(end + 1);
    if (rest) {
      if (!rest.startsWith(":")) throw fail("garbage after ]");
      portText = rest.slice(1);
    }
  } else if (s.indexOf(":") !== s.lastIndexOf(":")) {
    host = s; // a bare IPv6 address
  } else if (s.includes(":")) {
    host = s.slice(0, s.indexOf(":"));
    portText = s.slice(s.indexOf(":") + 1);
  }
  if (!host) throw fail("empty host");
  if (host.includes(":") && isIP(host) !== 6) throw fail("invalid IPv6 address");
  if (portText !== undefined) {
    if (!/^\d{1,5}$/.test(portText) || Number(portText) < 1 || Number(portText) > 65535) {
      throw fail(`invalid port "${portText}"`);
    }
    port = Number(portText);
  }
  return { host, port };
}

/** `host:port` as gRPC targets want it (IPv6 in brackets). */
export function endpointTarget(ep: TalosEndpoint): string {
  return ep.host.includes(":") ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
}

function decodePem(path: string, field: string, value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") {
    throw new TalosConfigError(
      path,
      `Cannot load talosconfig ${path}: "${field}" is missing. ${ACCESS_HINT}`,
    );
  }
  const text = Buffer.from(value.replace(/\s+/g, ""), "base64").toString("utf8");
  if (!text.includes("-----BEGIN ")) {
    throw new TalosConfigError(path, `Cannot load talosconfig ${path}: "${field}" is not base64-encoded PEM`);
  }
  return text;
}

/** Rewrites Talos' `ED25519 PRIVATE KEY` PEM label, which OpenSSL/BoringSSL do not accept. */
export function fixKeyLabel(pem: string): string {
  return pem.replace(/-----(BEGIN|END) ED25519 PRIVATE KEY-----/g, "-----$1 PRIVATE KEY-----");
}

/** Roles from a certificate subject as Node prints it (`CN=x\nO=os:reader`). */
function subjectOrganizations(subject: string): string[] {
  return subject
    .split("\n")
    .filter((line) => line.startsWith("O="))
    .map((line) => line.slice(2));
}

/**
 * Parses talosconfig text and validates its current context.
 * @param text YAML of the file.
 * @param path Used in messages.
 * @param endpointsOverride `TALOS_ENDPOINTS` (comma-separated), replacing the context's endpoints.
 * @throws {TalosConfigError} naming the file and saying how to enable Talos API access.
 */
export function parseTalosConfig(text: string, path: string, endpointsOverride?: string): TalosConfig {
  const broken = (why: string, cause?: unknown) =>
    new TalosConfigError(path, `Cannot load talosconfig ${path}: ${why}. ${ACCESS_HINT}`, { cause });
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw broken("not valid YAML", err);
  }
  if (typeof doc !== "object" || doc === null) throw broken("not a YAML mapping");
  const { context: current, contexts } = doc as { context?: unknown; contexts?: unknown };
  if (typeof contexts !== "object" || contexts === null) throw broken("no contexts");
  const names = Object.keys(contexts);
  let name = typeof current === "string" ? current : "";
  if (!name && names.length === 1) name = names[0] as string;
  const ctx = own(contexts as Record<string, unknown>, name);
  if (!name || typeof ctx !== "object" || ctx === null) {
    throw broken(`context "${name}" not found (contexts: ${names.join(", ") || "none"})`);
  }
  const c = ctx as Record<string, unknown>;
  let rawEndpoints: string[];
  if (endpointsOverride?.trim()) {
    rawEndpoints = endpointsOverride.split(",");
  } else {
    const list = Array.isArray(c.endpoints) ? c.endpoints : [];
    // `target` is the pre-endpoints form; the Go client still honours it.
    rawEndpoints = [...list, ...(typeof c.target === "string" && c.target ? [c.target] : [])].map(String);
  }
  rawEndpoints = rawEndpoints.map((e) => e.trim()).filter((e) => e !== "");
  if (rawEndpoints.length === 0) throw broken(`context "${name}" has no endpoints`);
  let endpoints: TalosEndpoint[];
  try {
    endpoints = rawEndpoints.map(parseEndpoint);
  } catch (err) {
    throw broken((err as Error).message, err);
  }
  const crt = decodePem(path, "crt", c.crt);
  const key = fixKeyLabel(decodePem(path, "key", c.key));
  const ca = typeof c.ca === "string" && c.ca.trim() ? decodePem(path, "ca", c.ca) : undefined;
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(crt);
  } catch (err) {
    throw broken(`"crt" is not a certificate`, err);
  }
  try {
    if (!cert.checkPrivateKey(createPrivateKey(key))) throw new Error("key does not match the certificate");
  } catch (err) {
    throw broken(`"key" is unusable: ${(err as Error).message}`, err);
  }
  const config: TalosConfig = {
    path,
    context: name,
    endpoints,
    crt,
    key,
    cluster: typeof c.cluster === "string" ? c.cluster : "",
    roles: subjectOrganizations(cert.subject),
    certNotAfter: new Date(cert.validTo),
  };
  if (ca !== undefined) config.ca = ca;
  return config;
}

/**
 * Finds, reads and validates the talosconfig, honouring `TALOS_ENDPOINTS`. Does not load the
 * gRPC transport.
 * @throws {TalosConfigError} when no file exists or the file is broken; the message names the
 *   file(s) and says how to enable `machine.features.kubernetesTalosAPIAccess` with role os:reader.
 * @example const config = loadTalosConfig(); console.log(config.cluster, config.endpoints)
 */
export function loadTalosConfig(opts: LoadTalosConfigOptions = {}): TalosConfig {
  const env = opts.env ?? process.env;
  const exists = opts.exists ?? existsSync;
  const read = opts.readFile ?? ((p: string) => readFileSync(p, "utf8"));
  const candidates = opts.path ? [opts.path] : talosConfigCandidates(env, opts.home ?? homedir());
  const path = candidates.find((p) => exists(p));
  if (path === undefined) {
    throw new TalosConfigError(
      "",
      `Cannot load talosconfig: no file at ${candidates.join(", ")}. ${ACCESS_HINT}, or point TALOSCONFIG at a talosconfig`,
    );
  }
  let text: string;
  try {
    text = read(path);
  } catch (err) {
    throw new TalosConfigError(path, `Cannot load talosconfig ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return parseTalosConfig(text, path, env.TALOS_ENDPOINTS);
}
