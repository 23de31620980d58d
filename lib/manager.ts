// The controller manager behind `run`: loads and validates every input before touching the
// cluster (cloud config, talosconfig, kubeconfig), serves health and metrics, keeps the shared Node
// informer, campaigns for the Lease, starts the enabled controllers while leading, reloads the
// cloud config when its file changes, and shuts down on SIGTERM (releasing the lease) or exits
// non-zero when leadership is lost.

import { createHash, randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { nodeInformer } from "./cache.ts";
import { type CompiledConfig, ConfigError, formatIssue, loadConfig, parseConfig } from "./config.ts";
import { ConfigLimitError, readConfigFile } from "./configlimits.ts";
import { ConfigHolder, type ControllerContext, type StartController } from "./controller.ts";
import { type ControllerName, Controllers } from "./controllernames.ts";
import { EventRecorder } from "./events.ts";
import type { RunOptions } from "./flags.ts";
import { PROGRAM_NAME } from "./help.ts";
import { nodeIpamNeedsTalos } from "./ipam.ts";
import { KubeClient, loadConnection } from "./kube.ts";
import { LeaderElector } from "./leader.ts";
import { configureLogging, logger } from "./log.ts";
import { registerProcessMetrics, registry } from "./metrics.ts";
import { type SecureServer, startSecureServer } from "./serve.ts";
import type { TalosClient } from "./talos.ts";
import { loadTalosConfig } from "./talosconfig.ts";
import { commit, version } from "./version.ts";

const log = logger("manager");

/** After a shutdown begins, the process exits by this time whatever is still running. */
const SHUTDOWN_HARD_STOP_MS = 4_500;
/** How long releasing the leader Lease may take at shutdown. */
const LEASE_RELEASE_TIMEOUT_MS = 2_000;
/** How long the controllers get to finish their work in flight at shutdown. */
const CONTROLLER_DRAIN_MS = 1_500;
/** How often the cloud-config file is checked for a change. */
const CLOUD_CONFIG_POLL_MS = 2_000;

/** Controllers that cannot work without the Talos API. */
function needsTalos(enabled: readonly ControllerName[], opts: RunOptions): boolean {
  return enabled.some(
    (c) =>
      c === Controllers.cloudNode ||
      c === Controllers.cloudNodeLifecycle ||
      (c === Controllers.nodeIpam && nodeIpamNeedsTalos(opts.ipam)),
  );
}

async function loadController(name: ControllerName): Promise<StartController> {
  switch (name) {
    case Controllers.cloudNode:
      return (await import("./node.ts")).startCloudNode;
    case Controllers.cloudNodeLifecycle:
      return (await import("./lifecycle.ts")).startLifecycle;
    case Controllers.nodeCsrApproval:
      return (await import("./csrapprover.ts")).startCsrApprover;
    case Controllers.nodeIpam:
      return (await import("./ipam.ts")).startNodeIpam;
  }
}

function logConfigWarnings(config: CompiledConfig, path: string | undefined): void {
  for (const w of config.warnings) log.warn("Cloud config warning", { file: path, warning: formatIssue(w) });
}

/** Fails start-up: prints `message` and exits 1 without touching the cluster any further. */
function fatal(message: string, err?: unknown, fields?: Record<string, unknown>): never {
  log.error(message, err, fields);
  process.exit(1);
}

/**
 * Runs the controller manager until SIGTERM (exit 0) or lost leadership (exit 1).
 */
export async function run(opts: RunOptions, warnings: string[]): Promise<void> {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  log.info("Starting talos-cloud-controller-manager", { version, commit, bun: Bun.version });
  for (const w of warnings) log.warn(w);
  registerProcessMetrics(registry);
  const enabled = [...opts.enabledControllers];
  // Until there is something to clean up, a SIGTERM simply ends start-up, with 0 as after a clean stop
  // (without a handler the runtime would die of the signal: exit 143).
  let onSignal: (why: string) => void = (why) => {
    log.info("Shutting down", { reason: why });
    process.exit(0);
  };
  process.once("SIGTERM", () => onSignal("SIGTERM"));
  process.once("SIGINT", () => onSignal("SIGINT"));

  // Every input is validated before the cluster is touched. The file's digest is taken before it is
  // read for use: a change in between is then seen by the reload poller instead of being lost.
  const configDigest = opts.cloudConfig ? fileDigest(opts.cloudConfig) : "";
  let cloudConfig: CompiledConfig;
  try {
    cloudConfig = opts.cloudConfig ? loadConfig(opts.cloudConfig) : parseConfig("");
  } catch (err) {
    // A ConfigError's message lists every problem with its path and line.
    if (err instanceof ConfigError) fatal(err.message, undefined, { file: opts.cloudConfig });
    fatal("Cannot load cloud config", err, { file: opts.cloudConfig });
  }
  logConfigWarnings(cloudConfig, opts.cloudConfig);
  // Older reference releases switched CSR approval on from the config file; keep such files working.
  if (cloudConfig.global.approveNodeCSR && !enabled.includes(Controllers.nodeCsrApproval)) {
    enabled.push(Controllers.nodeCsrApproval);
    log.info("global.approveNodeCSR is set: enabling node-csr-approval (prefer --controllers)");
  }
  log.info("Controllers enabled", { controllers: enabled.join(",") || "(none)" });
  const config = new ConfigHolder(cloudConfig);

  let talos: TalosClient | undefined;
  const talosRequired = needsTalos(enabled, opts);
  if (talosRequired || enabled.includes(Controllers.nodeCsrApproval)) {
    const t = await import("./talos.ts");
    const loadOpts = {
      ...(opts.talos.configPath ? { path: opts.talos.configPath } : {}),
      // TALOS_ENDPOINTS wins over the config file's (older) global.endpoints, as in the reference.
      env: {
        ...process.env,
        TALOS_ENDPOINTS:
          (opts.talos.endpoints.length ? opts.talos.endpoints : cloudConfig.global.endpoints).join(",") ||
          undefined,
      },
    };
    try {
      const talosConfig = loadTalosConfig(loadOpts);
      talos = new t.TalosClient({ config: talosConfig, load: () => loadTalosConfig(loadOpts) });
      talos.watchConfigFile();
      log.info("Talos API configured", {
        file: talosConfig.path,
        endpoints: talosConfig.endpoints.map((e) => `${e.host}:${e.port}`).join(","),
        roles: talosConfig.roles.join(","),
      });
    } catch (err) {
      if (talosRequired) fatal((err as Error).message);
      log.info("No usable talosconfig: node-csr-approval checks IP SANs against Node status only", {
        reason: (err as Error).message,
      });
    }
  }

  let client: KubeClient;
  let leaseClient: KubeClient | undefined;
  let reviews: { authentication: KubeClient; authorization: KubeClient } | undefined;
  try {
    const conn = loadConnection({ kubeconfig: opts.kubeconfig, master: opts.master });
    const limits = { qps: opts.kubeApiQps, burst: opts.kubeApiBurst };
    const agent = `${PROGRAM_NAME}/${version}`;
    client = new KubeClient(conn, { ...limits, userAgent: agent });
    // Lease renewals get a client (rate limiter and connections) of their own, as upstream's
    // "leader-election" client: queued behind a burst of controller writes and Events, a renewal
    // would miss its deadline and a busy leader would lose its lease.
    if (opts.leaderElection.enabled)
      leaseClient = new KubeClient(conn, { ...limits, userAgent: `${agent} leader-election` });
    // Credential reviews for /metrics come from anyone who can reach the port: they get clients of
    // their own so a flood of tokens cannot use up the controllers' rate limit.
    const reviewClient = (kubeconfig: string | undefined, what: string) =>
      new KubeClient(kubeconfig ? loadConnection({ kubeconfig }) : conn, {
        ...limits,
        userAgent: `${agent} ${what}`,
      });
    if (opts.serving.securePort !== 0) {
      const authentication = reviewClient(opts.serving.authenticationKubeconfig, "authentication");
      reviews = {
        authentication,
        authorization:
          opts.serving.authorizationKubeconfig === opts.serving.authenticationKubeconfig
            ? authentication
            : reviewClient(opts.serving.authorizationKubeconfig, "authorization"),
      };
    }
  } catch (err) {
    fatal((err as Error).message);
  }

  const identity = `${hostname()}_${randomUUID()}`;
  const events = new EventRecorder(client, { controller: PROGRAM_NAME, instance: identity });
  const nodes = nodeInformer(client);
  let elector: LeaderElector | undefined;
  if (leaseClient) {
    try {
      elector = new LeaderElector(leaseClient, {
        namespace: opts.leaderElection.resourceNamespace,
        name: opts.leaderElection.resourceName,
        identity,
        leaseDurationMs: opts.leaderElection.leaseDurationMs,
        renewDeadlineMs: opts.leaderElection.renewDeadlineMs,
        retryPeriodMs: opts.leaderElection.retryPeriodMs,
      });
    } catch (err) {
      fatal((err as Error).message);
    }
  }

  let server: SecureServer | undefined;
  // The review clients exist only when serving is on (--secure-port not 0).
  if (reviews) {
    try {
      server = await startSecureServer({
        bindAddress: opts.serving.bindAddress,
        port: opts.serving.securePort,
        certFile: opts.serving.tlsCertFile,
        keyFile: opts.serving.tlsPrivateKeyFile,
        alwaysAllowPaths: opts.serving.alwaysAllowPaths,
        registry,
        reviews,
        cacheTtlMs: {
          authentication: opts.serving.tokenReviewCacheTtlMs,
          authorized: opts.serving.authorizedCacheTtlMs,
          unauthorized: opts.serving.unauthorizedCacheTtlMs,
        },
        tlsMinVersion: opts.serving.tlsMinVersion,
        livez: [{ name: "ping", check: () => undefined }],
        readyz: [
          { name: "ping", check: () => undefined },
          { name: "informer-sync", check: () => (nodes.hasSynced ? undefined : "Node cache not synced yet") },
        ],
      });
    } catch (err) {
      fatal(`Cannot serve on ${opts.serving.bindAddress}:${opts.serving.securePort}`, err);
    }
  }

  const version_ = await client.get<{ gitVersion: string }>("/version").catch((err) => {
    log.error("Cannot reach the Kubernetes API server yet", err, { server: client.server });
    return undefined;
  });
  if (version_)
    log.info("Connected to the Kubernetes API server", {
      server: client.server,
      version: version_.gitVersion,
    });
  nodes.start();

  const stopCloudConfigWatch = watchCloudConfig(opts.cloudConfig, config, configDigest);
  const controllers = new AbortController();
  const running: Promise<void>[] = [];
  const startControllers = async (signal: AbortSignal) => {
    await nodes.waitForSync();
    const ctx: ControllerContext = {
      options: opts,
      client,
      nodes,
      events,
      registry,
      config,
      talos,
      identity,
    };
    for (const name of enabled) {
      const start = await loadController(name);
      log.info("Starting controller", { controller: name });
      running.push(
        start(ctx, signal).catch((err) => {
          if (signal.aborted) return;
          // As upstream: a controller that cannot run is fatal, so the pod restarts visibly.
          log.error("Controller failed", err, { controller: name });
          void shutdown(1, `controller ${name} failed: ${(err as Error).message}`);
        }),
      );
    }
  };

  // Loading a controller module can fail too (a broken build): that is fatal like a failing controller.
  const launch = (signal: AbortSignal) => {
    startControllers(signal).catch((err) => {
      log.error("Cannot start the controllers", err);
      void shutdown(1, `cannot start the controllers: ${(err as Error).message}`);
    });
  };

  let shuttingDown = false;
  const shutdown = async (code: number, why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info("Shutting down", { reason: why });
    const hardStop = setTimeout(() => process.exit(code), SHUTDOWN_HARD_STOP_MS);
    controllers.abort();
    stopCloudConfigWatch();
    await elector?.release(LEASE_RELEASE_TIMEOUT_MS);
    await Promise.race([Promise.all(running), Bun.sleep(CONTROLLER_DRAIN_MS)]);
    await nodes.stop().catch(() => {});
    await server?.stop().catch(() => {});
    talos?.close();
    events.close();
    clearTimeout(hardStop);
    process.exit(code);
  };
  onSignal = (why) => void shutdown(0, why);

  if (elector) {
    elector.run({
      onStartedLeading: (signal) => {
        launch(AbortSignal.any([signal, controllers.signal]));
      },
      onStoppedLeading: (reason) => {
        if (reason === "lost") void shutdown(1, "leader election lost");
      },
      onNewLeader: (who) => log.info("New leader elected", { identity: who }),
    });
  } else {
    launch(controllers.signal);
  }
}

/** Stands for the digest of a cloud-config file over the size limit, which is not read. */
const TOO_LARGE = "too-large";

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/**
 * The digest of a cloud-config file's content, "" when it cannot be read or is over the size limit
 * (the error surfaces when it is loaded).
 */
function fileDigest(path: string): string {
  try {
    return digest(readConfigFile(path));
  } catch {
    return "";
  }
}

/**
 * Polls the cloud-config file and applies a valid new version without a restart; an invalid one is
 * logged, counted and ignored. Polling (not fs.watch) because ConfigMap volumes swap a symlink.
 * @param loadedDigest digest of the file taken before the running config was read from it
 */
function watchCloudConfig(
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
    let text: string | ConfigLimitError;
    try {
      text = readConfigFile(path);
    } catch (err) {
      // A file over the size limit is an invalid new version; an unreadable one is transient (a swap).
      if (!(err instanceof ConfigLimitError)) {
        log.v(2).info("Cannot read cloud config, keeping the current one", {
          file: path,
          err: (err as Error).message,
        });
        return;
      }
      text = err;
    }
    const d = typeof text === "string" ? digest(text) : TOO_LARGE;
    if (d === last) return;
    last = d;
    try {
      if (typeof text !== "string") throw new ConfigError([text.issue]);
      const next = parseConfig(text);
      logConfigWarnings(next, path);
      holder.set(next);
      reloads.inc({ result: "success" });
      log.info("Reloaded cloud config", { file: path });
    } catch (err) {
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
