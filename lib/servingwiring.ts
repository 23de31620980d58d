// The secure port of `run`: the serving flags turned into lib/serve.ts's options, health checks
// (ping, and readiness once the Node cache has synced) and the process registry's metrics.

import type { ControllerContext } from "./controller.ts";
import type { RunOptions } from "./flags.ts";
import type { KubeClients } from "./kubeclients.ts";
import { registry } from "./metricsprocess.ts";
import { type SecureServer, startSecureServer } from "./serve.ts";

/**
 * Serves health and metrics on --secure-port.
 * @throws when it cannot (certificate files, address in use…).
 */
export function serveHealthAndMetrics(
  opts: RunOptions,
  reviews: NonNullable<KubeClients["reviews"]>,
  nodes: ControllerContext["nodes"],
): Promise<SecureServer> {
  const serving = opts.serving;
  return startSecureServer({
    bindAddress: serving.bindAddress,
    port: serving.securePort,
    certFile: serving.tlsCertFile,
    keyFile: serving.tlsPrivateKeyFile,
    alwaysAllowPaths: serving.alwaysAllowPaths,
    registry,
    reviews,
    cacheTtlMs: {
      authentication: serving.tokenReviewCacheTtlMs,
      authorized: serving.authorizedCacheTtlMs,
      unauthorized: serving.unauthorizedCacheTtlMs,
    },
    tlsMinVersion: serving.tlsMinVersion,
    clientCaFile: serving.clientCaFile,
    requestHeader: serving.requestHeader,
    livez: [{ name: "ping", check: () => undefined }],
    readyz: [
      { name: "ping", check: () => undefined },
      { name: "informer-sync", check: () => (nodes.hasSynced ? undefined : "Node cache not synced yet") },
    ],
  });
}
