// Starting and stopping the enabled controllers of `run`: each controller's module is imported when
// it starts (once the Node cache has synced), its running metric set; a controller that fails ends
// the process with 1, like lost leadership; shutdown runs the registered steps in order, gives the
// controllers CONTROLLER_DRAIN_MS to finish, closes the Talos client and the event recorder, and
// exits, by SHUTDOWN_HARD_STOP_MS at the latest.

import type { ControllerContext, StartController } from "./controller.ts";
import { type ControllerName, Controllers, RUNNING_METRIC_NAMES } from "./controllernames.ts";
import { logger } from "./log.ts";
import { controllerRunning } from "./metrics.ts";
import { registry } from "./metricsprocess.ts";

const log = logger("manager");

/** After a shutdown begins, the process exits by this time whatever is still running. */
const SHUTDOWN_HARD_STOP_MS = 4_500;
/** How long the controllers get to finish their work in flight at shutdown. */
const CONTROLLER_DRAIN_MS = 1_500;

/** A controller's start function, its module imported on first use. */
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

/**
 * Starts the enabled controllers (once the Node cache has synced) and stops them: a controller that
 * fails, like lost leadership, ends the process with 1; a signal with 0.
 */
export class ControllerRunner {
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
