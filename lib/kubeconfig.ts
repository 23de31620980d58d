// A kubeconfig's text to the connection it describes: the current (or named) context's server, how
// its certificate is verified, the client certificate and how requests authenticate. Pure: the files
// a kubeconfig names (CA, client certificate and key) are read by the caller's `files`, which also
// resolves their paths against the kubeconfig's directory (lib/kubeconnection.ts does both).

import { parse as parseYaml } from "yaml";

/** How requests authenticate. */
export type KubeAuth =
  | { kind: "none" }
  | { kind: "token"; token: string }
  | { kind: "tokenFile"; path: string }
  | { kind: "basic"; username: string; password: string }
  | { kind: "plugin"; kubeconfigPath: string; context: string };

/** Where the API server is and how to reach it. Certificates are PEM text. */
export interface KubeConnection {
  server: string;
  ca?: string;
  cert?: string;
  key?: string;
  insecureSkipVerify?: boolean;
  serverName?: string;
  auth: KubeAuth;
  /** Namespace of the in-cluster service account, when running in a pod. */
  namespace?: string;
}

/** A kubeconfig or in-cluster configuration that cannot be used. */
export class KubeConfigError extends Error {
  override readonly name = "KubeConfigError";
}

/** The files a kubeconfig names, as its loader reaches them. */
export interface KubeconfigFiles {
  /** The path of a file the kubeconfig names (absolute, or relative to the kubeconfig's directory). */
  resolve(file: string): string;
  /** The content of a resolved path; throws the system's error when it cannot be read. */
  read(path: string): string;
}

interface RawNamed<T> {
  name?: string;
  cluster?: T;
  user?: T;
  context?: T;
}

type Dict = Record<string, unknown>;

function str(v: unknown): string | undefined {
  return typeof v === "string" && v !== "" ? v : undefined;
}

function fromFileOrData(
  files: KubeconfigFiles,
  file: unknown,
  data: unknown,
  what: string,
): string | undefined {
  const d = str(data);
  if (d) return Buffer.from(d, "base64").toString("utf8");
  const f = str(file);
  if (!f) return undefined;
  const path = files.resolve(f);
  try {
    return files.read(path);
  } catch (cause) {
    throw new KubeConfigError(`Cannot read ${what} ${path}: ${(cause as Error).message}`, { cause });
  }
}

/**
 * The connection a kubeconfig describes, for its current context (or `context`).
 * @param text the kubeconfig's content.
 * @param path the kubeconfig's file name, for messages and for credential plugins.
 * @param files reads the files the kubeconfig names.
 * @throws KubeConfigError naming the file and what is wrong with it (a YAML error by its line, never
 * quoting the file, which holds keys and tokens).
 * @example parseKubeconfig(text, "/etc/kubernetes/admin.conf", files).server // "https://10.0.0.1:6443"
 */
export function parseKubeconfig(
  text: string,
  path: string,
  files: KubeconfigFiles,
  context?: string,
): KubeConnection {
  const doc = kubeconfigYaml(text, path);
  const fail = (why: string) => new KubeConfigError(`Cannot load kubeconfig ${path}: ${why}`);
  const find = <T>(list: unknown, key: "cluster" | "user" | "context", name: string): T | undefined => {
    if (!Array.isArray(list)) return undefined;
    const item = (list as RawNamed<T>[]).find((x) => x?.name === name);
    return item?.[key];
  };
  const ctxName = context ?? str(doc["current-context"]);
  if (!ctxName) throw fail("no current-context");
  const ctx = find<Dict>(doc.contexts, "context", ctxName);
  if (!ctx) throw fail(`context "${ctxName}" not found`);
  const clusterName = str(ctx.cluster) ?? "";
  const cluster = find<Dict>(doc.clusters, "cluster", clusterName);
  if (!cluster) throw fail(`cluster "${clusterName}" not found`);
  const user = find<Dict>(doc.users, "user", str(ctx.user) ?? "") ?? {};
  const server = str(cluster.server);
  if (!server) throw fail(`cluster "${clusterName}" has no server`);
  return {
    server: server.replace(/\/+$/, ""),
    ...clusterTls(files, cluster),
    ...clientCertificate(files, user, fail),
    auth: userAuth(files, user, { kind: "plugin", kubeconfigPath: path, context: ctxName }),
  };
}

/** The kubeconfig as YAML. Its errors name the line, never quote the file (keys and tokens). */
function kubeconfigYaml(text: string, path: string): Dict {
  try {
    // Not yaml's pretty errors: their code frame quotes the file, which holds keys and tokens.
    return (parseYaml(text, { prettyErrors: false }) ?? {}) as Dict;
  } catch (cause) {
    const pos = (cause as { pos?: [number, number] }).pos;
    const line = pos ? ` (line ${text.slice(0, pos[0]).split("\n").length})` : "";
    throw new KubeConfigError(`Cannot load kubeconfig ${path}${line}: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/** How a kubeconfig cluster's server is verified: CA, skip-verify, server name. */
function clusterTls(
  files: KubeconfigFiles,
  cluster: Dict,
): Pick<KubeConnection, "ca" | "insecureSkipVerify" | "serverName"> {
  const out: Pick<KubeConnection, "ca" | "insecureSkipVerify" | "serverName"> = {};
  const ca = fromFileOrData(
    files,
    cluster["certificate-authority"],
    cluster["certificate-authority-data"],
    "CA",
  );
  if (ca) out.ca = ca;
  if (cluster["insecure-skip-tls-verify"] === true) out.insecureSkipVerify = true;
  const serverName = str(cluster["tls-server-name"]);
  if (serverName) out.serverName = serverName;
  return out;
}

/** A kubeconfig user's client certificate and key: both or neither. */
function clientCertificate(
  files: KubeconfigFiles,
  user: Dict,
  fail: (why: string) => Error,
): Pick<KubeConnection, "cert" | "key"> {
  const cert = fromFileOrData(
    files,
    user["client-certificate"],
    user["client-certificate-data"],
    "client certificate",
  );
  const key = fromFileOrData(files, user["client-key"], user["client-key-data"], "client key");
  if (Boolean(cert) !== Boolean(key)) throw fail("user needs both client-certificate and client-key");
  return cert && key ? { cert, key } : {};
}

/**
 * How a kubeconfig user authenticates besides a client certificate, in the order client-go tries:
 * token, token file, an exec or auth-provider plugin, basic credentials; else none.
 */
function userAuth(files: KubeconfigFiles, user: Dict, plugin: KubeAuth): KubeAuth {
  const token = str(user.token);
  const tokenFile = str(user.tokenFile);
  const username = str(user.username);
  const password = str(user.password);
  if (token) return { kind: "token", token };
  if (tokenFile) return { kind: "tokenFile", path: files.resolve(tokenFile) };
  if (user.exec || user["auth-provider"]) return plugin;
  if (username && password) return { kind: "basic", username, password };
  return { kind: "none" };
}
