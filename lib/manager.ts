// The controller manager behind `run`: loads and validates every input before touching the
// cluster (cloud config, talosconfig, kubeconfig), serves health and metrics, keeps the shared Node
// informer, campaigns for the Lease, starts the enabled controllers while leading, reloads the
// cloud config when its file changes, and shuts down on SIGTERM (releasing the lease) or exits
// non-zero when leadership is lost.

import { createHash, randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { nodeInformer } from "./cache.ts";
import { type CompiledConfig, ConfigError, formatIssue, parseConfig } from "./config.ts";
import { loadConfig, readConfigFile } from "./configfile.ts";
import { ConfigLimitError } from "./configlimits.ts";
import { ConfigHolder, type ControllerContext, type StartController } from "./controller.ts";
import { type ControllerName, Controllers, RUNNING_METRIC_NAMES } from "./controllernames.ts";
import { EventRecorder } from "./events.ts";
import type { RunOptions } from "./flags.ts";
import { PROGRAM_NAME } from "./help.ts";
import { nodeIpamNeedsTalos } from "./ipam.ts";
import { KubeClient } from "./kube.ts";
import { KubeApis } from "./kubeapis.ts";
import { loadConnection } from "./kubeconnection.ts";
import { LeaderElector } from "./leader.ts";
import { configureLogging, logger } from "./log.ts";
import { controllerRunning } from "./metrics.ts";
import { startPageTrim } from "./pagetrim.ts";
import { registerBuildInfo, registerProcessMetrics, registry } from "./processmetrics.ts";
import { type SecureServer, startSecureServer } from "./serve.ts";
import type { TalosClient } from "./talos.ts";
import { loadTalosConfig } from "./talosconfig.ts";
import { commit, version, versionInfo } from "./version.ts";

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

/** What `run` needs to talk to the Kubernetes API, each client with a rate limiter of its own. */
interface KubeClients {
  /** The controllers' client. */
  client: KubeClient;
  /** Lease renewals; undefined when leader election is off. */
  lease: KubeClient | undefined;
  /** Credential reviews for the serving port; undefined when serving is off. */
  reviews: { authentication: KubeClient; authorization: KubeClient } | undefined;
}

/**
 * Runs the controller manager until SIGTERM (exit 0) or lost leadership (exit 1). Every input is
 * validated before the cluster is touched.
 */
export async function run(opts: RunOptions, warnings: string[]): Promise<void> {
  configureLogging({ format: opts.logging.format, verbosity: opts.logging.verbosity });
  log.info("Starting talos-cloud-controller-manager", { version, commit, bun: Bun.version });
  for (const w of warnings) log.warn(w);
  registerProcessMetrics(registry);
  registerBuildInfo(registry, versionInfo());
  const signals = trapSignals();
  const stopPageTrim = startPageTrim();
  // The file's digest is taken before it is read for use: a change in between is then seen by the
  // reload poller instead of being lost.
  const configDigest = opts.cloudConfig ? fileDigest(opts.cloudConfig) : "";
  const cloudConfig = loadCloudConfig(opts);
  const enabled = enabledControllers(opts, cloudConfig);
  const talos = await connectTalos(opts, enabled, cloudConfig);
  const kube = kubeClients(opts);
  const identity = `${hostname()}_${randomUUID()}`;
  const nodes = nodeInformer(kube.client);
  const elector = kube.lease ? leaderElector(kube.lease, opts, identity) : undefined;
  const server = kube.reviews ? await serve(opts, kube.reviews, nodes) : undefined;
  const apis = new KubeApis(kube.client);
  await logApiServer(apis, kube.client);
  nodes.start();
  const config = new ConfigHolder(cloudConfig);
  const manager = new Manager(enabled, {
    options: opts,
    client: kube.client,
    nodes,
    events: new EventRecorder(kube.client, { controller: PROGRAM_NAME, instance: identity }),
    registry,
    config,
    talos,
    identity,
    apis,
  });
  const stopCloudConfigWatch = watchCloudConfig(opts.cloudConfig, config, configDigest);
  manager.onStop(async () => {
    stopCloudConfigWatch();
    await elector?.release(LEASE_RELEASE_TIMEOUT_MS);
  });
  manager.onStopped(async () => {
    await nodes.stop().catch(() => {});
    await server?.stop().catch(() => {});
    stopPageTrim();
  });
  signals.handle((why) => void manager.shutdown(0, why));
  if (!elector) return manager.launch();
  elector.run({
    onStartedLeading: (signal) => manager.launch(signal),
    onStoppedLeading: (reason) => {
      if (reason === "lost") void manager.shutdown(1, "leader election lost");
    },
    onNewLeader: (who) => log.info("New leader elected", { identity: who }),
  });
}

/**
 * Handles SIGTERM and SIGINT. Until `handle` is given something to run, a signal simply ends start-up
 * with 0 as after a clean stop (without a handler the runtime would die of the signal: exit 143).
 */
function trapSignals(): { handle(onSignal: (why: string) => void): void } {
  let onSignal = (why: string): void => {
    log.info("Shutting down", { reason: why });
    process.exit(0);
  };
  process.once("SIGTERM", () => onSignal("SIGTERM"));
  process.once("SIGINT", () => onSignal("SIGINT"));
  return { handle: (f) => (onSignal = f) };
}

/** The cloud config from --cloud-config (empty without one), or exits naming every problem. */
function loadCloudConfig(opts: RunOptions): CompiledConfig {
  let cloudConfig: CompiledConfig;
  try {
    cloudConfig = opts.cloudConfig ? loadConfig(opts.cloudConfig) : parseConfig("");
  } catch (err) {
    // A ConfigError's message lists every problem with its path and line.
    if (err instanceof ConfigError) fatal(err.message, undefined, { file: opts.cloudConfig });
    fatal("Cannot load cloud config", err, { file: opts.cloudConfig });
  }
  logConfigWarnings(cloudConfig, opts.cloudConfig);
  return cloudConfig;
}

/** The controllers to run: --controllers, plus node-csr-approval when the config file asks for it. */
function enabledControllers(opts: RunOptions, cloudConfig: CompiledConfig): ControllerName[] {
  const enabled = [...opts.enabledControllers];
  // Older reference releases switched CSR approval on from the config file; keep such files working.
  if (cloudConfig.global.approveNodeCSR && !enabled.includes(Controllers.nodeCsrApproval)) {
    enabled.push(Controllers.nodeCsrApproval);
    log.info("global.approveNodeCSR is set: enabling node-csr-approval (prefer --controllers)");
  }
  log.info("Controllers enabled", { controllers: enabled.join(",") || "(none)" });
  return enabled;
}

/**
 * The Talos client, when an enabled controller uses one. Exits when a controller that cannot work
 * without it has no usable talosconfig; node-csr-approval alone goes on without.
 */
async function connectTalos(
  opts: RunOptions,
  enabled: readonly ControllerName[],
  cloudConfig: CompiledConfig,
): Promise<TalosClient | undefined> {
  const talosRequired = needsTalos(enabled, opts);
  if (!talosRequired && !enabled.includes(Controllers.nodeCsrApproval)) return undefined;
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
    const talos = new t.TalosClient({ config: talosConfig, load: () => loadTalosConfig(loadOpts) });
    talos.watchConfigFile();
    log.info("Talos API configured", {
      file: talosConfig.path,
      endpoints: talosConfig.endpoints.map((e) => `${e.host}:${e.port}`).join(","),
      roles: talosConfig.roles.join(","),
    });
    return talos;
  } catch (err) {
    if (talosRequired) fatal((err as Error).message);
    log.info("No usable talosconfig: node-csr-approval checks IP SANs against Node status only", {
      reason: (err as Error).message,
    });
    return undefined;
  }
}

/** The Kubernetes clients from --kubeconfig/--master, or exits naming the problem. */
function kubeClients(opts: RunOptions): KubeClients {
  try {
    const conn = loadConnection({ kubeconfig: opts.kubeconfig, master: opts.master });
    const limits = { qps: opts.kubeApiQps, burst: opts.kubeApiBurst };
    const agent = `${PROGRAM_NAME}/${version}`;
    // Lease renewals get a client (rate limiter and connections) of their own, as upstream's
    // "leader-election" client: queued behind a burst of controller writes and Events, a renewal
    // would miss its deadline and a busy leader would lose its lease.
    const lease = opts.leaderElection.enabled
      ? new KubeClient(conn, { ...limits, userAgent: `${agent} leader-election` })
      : undefined;
    // Credential reviews for /metrics come from anyone who can reach the port: they get clients of
    // their own so a flood of tokens cannot use up the controllers' rate limit.
    const reviewClient = (kubeconfig: string | undefined, what: string) =>
      new KubeClient(kubeconfig ? loadConnection({ kubeconfig }) : conn, {
        ...limits,
        userAgent: `${agent} ${what}`,
      });
    let reviews: KubeClients["reviews"];
    const serving = opts.serving;
    if (serving.securePort !== 0) {
      const authentication = reviewClient(serving.authenticationKubeconfig, "authentication");
      const authorization =
        serving.authorizationKubeconfig === serving.authenticationKubeconfig
          ? authentication
          : reviewClient(serving.authorizationKubeconfig, "authorization");
      reviews = { authentication, authorization };
    }
    return { client: new KubeClient(conn, { ...limits, userAgent: agent }), lease, reviews };
  } catch (err) {
    fatal((err as Error).message);
  }
}

/** The leader elector for the Lease the flags name, or exits when the timings are inconsistent. */
function leaderElector(client: KubeClient, opts: RunOptions, identity: string): LeaderElector {
  try {
    return new LeaderElector(client, {
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

/** Serves health and metrics on --secure-port, or exits when it cannot. */
async function serve(
  opts: RunOptions,
  reviews: NonNullable<KubeClients["reviews"]>,
  nodes: ControllerContext["nodes"],
): Promise<SecureServer> {
  const serving = opts.serving;
  try {
    return await startSecureServer({
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
  } catch (err) {
    fatal(`Cannot serve on ${serving.bindAddress}:${serving.securePort}`, err);
  }
}

/**
 * Reads the API server's version and version-dependent APIs (logged once, by KubeApis), or logs that
 * it cannot be reached yet: the informer keeps trying, and the controllers read them again when used.
 */
async function logApiServer(apis: KubeApis, client: KubeClient): Promise<void> {
  try {
    await apis.discover();
  } catch (err) {
    log.error("Cannot reach the Kubernetes API server yet", err, { server: client.server });
  }
}

/**
 * Starts the enabled controllers (once the Node cache has synced) and stops them: a controller that
 * fails, like lost leadership, ends the process with 1; a signal with 0.
 */
class Manager {
  readonly #enabled: readonly ControllerName[];
  readonly #ctx: ControllerContext;
  readonly #controllers = new AbortController();
  readonly #running: Promise<void>[] = [];
  #stopping: (() => Promise<void>)[] = [];
  #stopped: (() => Promise<void>)[] = [];
  #shuttingDown = false;

  constructor(enabled: readonly ControllerName[], ctx: ControllerContext) {
    this.#enabled = enabled;
    this.#ctx = ctx;
  }

  /** Runs `f` when shutdown begins, before the controllers drain. */
  onStop(f: () => Promise<void>): void {
    this.#stopping.push(f);
  }

  /** Runs `f` after the controllers drained. */
  onStopped(f: () => Promise<void>): void {
    this.#stopped.push(f);
  }

  /**
   * Starts the controllers until `signal` (or shutdown) aborts them. Loading a controller module can
   * fail too (a broken build): that is fatal like a failing controller.
   */
  launch(signal?: AbortSignal): void {
    const all = signal ? AbortSignal.any([signal, this.#controllers.signal]) : this.#controllers.signal;
    this.#start(all).catch((err) => {
      log.error("Cannot start the controllers", err);
      void this.shutdown(1, `cannot start the controllers: ${(err as Error).message}`);
    });
  }

  async #start(signal: AbortSignal): Promise<void> {
    await this.#ctx.nodes.waitForSync();
    for (const name of this.#enabled) {
      const start = await loadController(name);
      log.info("Starting controller", { controller: name });
      controllerRunning(registry, RUNNING_METRIC_NAMES[name], true);
      this.#running.push(
        start(this.#ctx, signal)
          .catch((err) => {
            if (signal.aborted) return;
            // As upstream: a controller that cannot run is fatal, so the pod restarts visibly.
            log.error("Controller failed", err, { controller: name });
            void this.shutdown(1, `controller ${name} failed: ${(err as Error).message}`);
          })
          .finally(() => controllerRunning(registry, RUNNING_METRIC_NAMES[name], false)),
      );
    }
  }

  /** Stops everything in order and exits with `code`; by SHUTDOWN_HARD_STOP_MS whatever still runs. */
  async shutdown(code: number, why: string): Promise<void> {
    if (this.#shuttingDown) return;
    this.#shuttingDown = true;
    log.info("Shutting down", { reason: why });
    const hardStop = setTimeout(() => process.exit(code), SHUTDOWN_HARD_STOP_MS);
    this.#controllers.abort();
    for (const f of this.#stopping) await f();
    await Promise.race([Promise.all(this.#running), Bun.sleep(CONTROLLER_DRAIN_MS)]);
    for (const f of this.#stopped) await f();
    this.#ctx.talos?.close();
    this.#ctx.events.close();
    clearTimeout(hardStop);
    process.exit(code);
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
