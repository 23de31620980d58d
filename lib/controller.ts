// What every controller works with, shared by the manager that builds it (lib/manager.ts) and the
// controllers it starts (lib/node.ts, lib/lifecycle.ts, lib/csrapprover.ts, lib/ipam.ts), so that no
// controller imports the manager.

import type { CompiledConfig } from "./config.ts";
import type { RunOptions } from "./flags.ts";
import type { KubeApi } from "./kubeapi.ts";
import type { Informer } from "./kubecache.ts";
import type { KubeApis } from "./kubediscovery.ts";
import type { EventRecorder } from "./kubeevents.ts";
import type { Registry } from "./metrics.ts";
import type { LeanNode } from "./nodeview.ts";
import type { TalosClient } from "./talos.ts";
import type { CsrFactsAnswer } from "./taloswatchcsr.ts";

/** The current cloud config, replaced when the file changes. */
export class ConfigHolder {
  #config: CompiledConfig;
  readonly #listeners = new Set<(c: CompiledConfig) => void>();
  constructor(config: CompiledConfig) {
    this.#config = config;
  }
  /** The config in effect now. */
  get current(): CompiledConfig {
    return this.#config;
  }
  /** Replaces the config and tells every listener. */
  set(config: CompiledConfig): void {
    this.#config = config;
    for (const l of this.#listeners) l(config);
  }
  /** Registers a listener for changes; returns its removal. */
  onChange(fn: (c: CompiledConfig) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
}

/** What node-csr-approval asks of cloud-node's Talos watches (lib/taloswatchcache.ts `csrFacts`). */
export interface CsrFactsSource {
  csrFacts(name: string, ips: readonly string[], withDNS: boolean): CsrFactsAnswer;
}

/**
 * The Talos watches cloud-node keeps, shared with node-csr-approval: cloud-node publishes them while
 * it runs and tells every change of a node's watched facts; the approver decides from them
 * (lib/taloswatchcsr.ts) and re-queues the node's pending CSRs on its changes.
 */
export class WatchedFacts {
  #source: CsrFactsSource | undefined;
  readonly #listeners = new Set<(node: string) => void>();
  /** The watches, while cloud-node runs. */
  get source(): CsrFactsSource | undefined {
    return this.#source;
  }
  /** Sets (or, with undefined, withdraws) the watches. */
  publish(source: CsrFactsSource | undefined): void {
    this.#source = source;
  }
  /** Node `name`'s watched facts changed. */
  changed(name: string): void {
    for (const l of this.#listeners) l(name);
  }
  /** Registers a listener for changes; returns its removal. */
  onChange(fn: (name: string) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
}

/** What a controller gets to work with. */
export interface ControllerContext {
  options: RunOptions;
  client: KubeApi;
  nodes: Informer<LeanNode>;
  events: EventRecorder;
  registry: Registry;
  config: ConfigHolder;
  /** The Talos client; undefined in CSR-only mode without a talosconfig. */
  talos: TalosClient | undefined;
  identity: string;
  /** The API server's version-dependent APIs (ServiceCIDR), discovered once. */
  apis: Pick<KubeApis, "discover">;
  /** cloud-node's Talos watches, for node-csr-approval; absent where nobody shares them (tests). */
  watched?: WatchedFacts;
}

/** A controller module: runs until `signal` aborts. */
export type StartController = (ctx: ControllerContext, signal: AbortSignal) => Promise<void>;
