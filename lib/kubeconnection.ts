// Where the Kubernetes client's connection comes from, as cloud-provider resolves it: the kubeconfig
// file (`--kubeconfig`, read here with the files it names, parsed by lib/kubeconfig.ts) with
// `--master` overriding its server, or else the in-cluster service account (environment and the
// files the kubelet mounts).

import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join } from "node:path";
import { KubeConfigError, type KubeConnection, parseKubeconfig } from "./kubeconfig.ts";

/** In-cluster service-account files, as mounted by the kubelet. */
const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * Reads a kubeconfig file and resolves its current context (or `context`), reading the files it names
 * relative to its directory.
 * @throws KubeConfigError naming the file and what is wrong with it.
 */
export function kubeconfigFromFile(path: string, context?: string): KubeConnection {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (cause) {
    throw new KubeConfigError(`Cannot load kubeconfig ${path}: ${(cause as Error).message}`, { cause });
  }
  const base = dirname(path);
  return parseKubeconfig(
    text,
    path,
    {
      resolve: (file) => (isAbsolute(file) ? file : join(base, file)),
      read: (file) => readFileSync(file, "utf8"),
    },
    context,
  );
}

/**
 * The in-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT`, the service-account token and CA.
 * @throws KubeConfigError when not running in a pod.
 */
export function inClusterConfig(
  env: Record<string, string | undefined> = process.env,
  dir = SERVICE_ACCOUNT_DIR,
): KubeConnection {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new KubeConfigError(
      "Cannot load in-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; pass --kubeconfig",
    );
  }
  const hostPart = host.includes(":") ? `[${host}]` : host;
  let ca: string;
  try {
    ca = readFileSync(join(dir, "ca.crt"), "utf8");
    readFileSync(join(dir, "token"), "utf8");
  } catch (cause) {
    throw new KubeConfigError(`Cannot load in-cluster configuration: ${(cause as Error).message}`, { cause });
  }
  const conn: KubeConnection = {
    server: `https://${hostPart}:${port}`,
    ca,
    auth: { kind: "tokenFile", path: join(dir, "token") },
  };
  try {
    conn.namespace = readFileSync(join(dir, "namespace"), "utf8").trim();
  } catch {
    // The namespace file is optional.
  }
  return conn;
}

/**
 * Resolves the connection the way cloud-provider does: `--kubeconfig` (with `--master` overriding its
 * server) or, without one, the in-cluster configuration.
 */
export function loadConnection(
  opts: { kubeconfig?: string | undefined; master?: string | undefined },
  env: Record<string, string | undefined> = process.env,
): KubeConnection {
  const conn = opts.kubeconfig ? kubeconfigFromFile(opts.kubeconfig) : inClusterConfig(env);
  if (opts.master) conn.server = opts.master.replace(/\/+$/, "");
  return conn;
}
