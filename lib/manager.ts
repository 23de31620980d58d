// `run`: the order in which the controller manager starts. It loads and validates every input
// before touching the cluster (cloud config, talosconfig, kubeconfig), exiting 1 naming the problem;
// then serves health and metrics, starts the shared Node informer, campaigns for the Lease, starts
// the controllers while leading, and hands signals and lost leadership to the shutdown. Each step
// lives in a file of its own: the decisions from flags and config in lib/controllerplan.ts, the
// Talos connection in lib/talosconnect.ts, the Kubernetes clients in lib/kubeclients.ts, the secure
// port in lib/servingwiring.ts, the cloud-config reload watch in lib/cloudconfigwatch.ts, the
// controllers' start and stop in lib/controllerrunner.ts.

import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { fileDigest, logConfigWarnings, watchCloudConfig } from "./cloudconfigwatch.ts";
import { type CompiledConfig, ConfigError, parseConfig } from "./config.ts";
import { loadConfig } from "./configfile.ts";
import { ConfigHolder, WatchedFacts } from "./controller.ts";
import { type ControllerName, Controllers } from "./controllernames.ts";
import { plannedControllers, talosUse } from "./controllerplan.ts";
import { ControllerRunner } from "./controllerrunner.ts";
import type { RunOptions } from "./flags.ts";
import { startGcPacer } from "./gcpacer.ts";
import { PROGRAM_NAME } from "./help.ts";
import type { KubeApi } from "./kubeapi.ts";
import { NODE_EVENT_PACE_MS, nodeInformer } from "./kubecache.ts";
import { type KubeClients, kubeClients } from "./kubeclients.ts";
import { KubeApis } from "./kubediscovery.ts";
import { EventRecorder } from "./kubeevents.ts";
import { LeaderElector } from "./leader.ts";
import { configureLogging, logger } from "./log.ts";
import { registerBuildInfo, registerProcessMetrics, registry } from "./metricsprocess.ts";
import { startPageTrim } from "./pagetrim.ts";
import { OVER_LIMIT_REASON, PEER_LIMITS } from "./peerlimits.ts";
import type { SecureServer } from "./serve.ts";
import { serveHealthAndMetrics } from "./servingwiring.ts";
import type { TalosClient } from "./talos.ts";
import { connectTalos } from "./talosconnect.ts";
import { TalosConfigError } from "./taloserrors.ts";
import { commit, version, versionInfo } from "./version.ts";

const log = logger("manager");

/** How long releasing the leader Lease may take at shutdown. */
const LEASE_RELEASE_TIMEOUT_MS = 2_000;

/** Fails start-up: prints `message` and exits 1 without touching the cluster any further. */
function fatal(message: string, err?: unknown, fields?: Record<string, unknown>): never {
  log.error(message, err, fields);
  process.exit(1);
}

/** cloud-node's Talos watches answer node-csr-approval when both run (lib/taloswatchcsr.ts). */
function sharedWatches(enabled: readonly ControllerName[]): { watched?: WatchedFacts } {
  const both = enabled.includes(Controllers.cloudNode) && enabled.includes(Controllers.nodeCsrApproval);
  return both ? { watched: new WatchedFacts() } : {};
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
  const stopGcPacer = startGcPacer({ registry });
  // The file's digest is taken before it is read for use: a change in between is then seen by the
  // reload poller instead of being lost.
  const configDigest = opts.cloudConfig ? fileDigest(opts.cloudConfig) : "";
  const cloudConfig = loadCloudConfig(opts);
  const enabled = enabledControllers(opts, cloudConfig);
  const talos = await talosClient(opts, enabled, cloudConfig);
  const kube = startKubeClients(opts);
  const identity = `${hostname()}_${randomUUID()}`;
  const events = new EventRecorder(kube.events, { controller: PROGRAM_NAME, instance: identity });
  const nodes = nodeInformer(kube.client, {
    onHeld: (name, bytes) =>
      void events.record(
        { kind: "Node", name },
        "Warning",
        OVER_LIMIT_REASON,
        "ReadNode",
        `The Node's watch events are ${bytes} bytes, over the bound of ${PEER_LIMITS.node_event_bytes.value} ` +
          `(${PEER_LIMITS.node_event_bytes.source}): this CCM reads them at most once per ${NODE_EVENT_PACE_MS / 1000} s, ` +
          "the newest kept; other nodes are not affected",
      ),
  });
  const elector = kube.lease ? leaderElector(kube.lease, opts, identity) : undefined;
  const server = kube.reviews ? await serve(opts, kube.reviews, nodes) : undefined;
  const apis = new KubeApis(kube.client);
  await logApiServer(apis, kube.client);
  nodes.start();
  const config = new ConfigHolder(cloudConfig);
  const manager = new ControllerRunner(enabled, {
    options: opts,
    client: kube.client,
    nodes,
    events,
    registry,
    config,
    talos,
    identity,
    apis,
    ...sharedWatches(enabled),
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
    stopGcPacer();
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
  const { enabled, addedCsrApproval } = plannedControllers(opts.enabledControllers, cloudConfig);
  if (addedCsrApproval)
    log.info("global.approveNodeCSR is set: enabling node-csr-approval (prefer --controllers)");
  log.info("Controllers enabled", { controllers: enabled.join(",") || "(none)" });
  return enabled;
}

/**
 * The Talos client, when an enabled controller uses one. Exits when a controller that cannot work
 * without it has no usable talosconfig; node-csr-approval alone goes on without.
 */
async function talosClient(
  opts: RunOptions,
  enabled: readonly ControllerName[],
  cloudConfig: CompiledConfig,
): Promise<TalosClient | undefined> {
  const use = talosUse(enabled, opts.ipam);
  if (use === "none") return undefined;
  try {
    return await connectTalos(opts, cloudConfig);
  } catch (err) {
    // Only a missing or unusable talosconfig lets node-csr-approval go on without Talos; anything
    // else (the client module failing to load) ends start-up rather than weakening the checks.
    if (use === "required" || !(err instanceof TalosConfigError)) fatal((err as Error).message);
    log.info("No usable talosconfig: node-csr-approval checks IP SANs against Node status only", {
      reason: (err as Error).message,
    });
    return undefined;
  }
}

/** The Kubernetes clients from --kubeconfig/--master, or exits naming the problem. */
function startKubeClients(opts: RunOptions): KubeClients {
  try {
    return kubeClients(opts);
  } catch (err) {
    fatal((err as Error).message);
  }
}

/** The leader elector for the Lease the flags name, or exits when the timings are inconsistent. */
function leaderElector(client: KubeApi, opts: RunOptions, identity: string): LeaderElector {
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
  nodes: ReturnType<typeof nodeInformer>,
): Promise<SecureServer> {
  try {
    return await serveHealthAndMetrics(opts, reviews, nodes);
  } catch (err) {
    fatal(`Cannot serve on ${opts.serving.bindAddress}:${opts.serving.securePort}`, err);
  }
}

/**
 * Reads the API server's version and version-dependent APIs (logged once, by KubeApis), or logs that
 * it cannot be reached yet: the informer keeps trying, and the controllers read them again when used.
 */
async function logApiServer(apis: KubeApis, client: KubeApi): Promise<void> {
  try {
    await apis.discover();
  } catch (err) {
    log.error("Cannot reach the Kubernetes API server yet", err, { server: client.server });
  }
}
