// What the Talos watch cache (lib/taloswatchcache.ts) takes and gives: the Talos client calls it
// makes, its options, and a node's facts as cloud-node gets them (or what they still wait for).
// Types only, so that the cache, its per-node record and their callers share them without a circle.

import type { Backoff } from "./backoffpolicy.ts";
import type { PeerLimitName } from "./peerlimits.ts";
import type { TalosClient } from "./talos.ts";
import type { CsrWatchClient } from "./taloswatchcsr.ts";
import type { NodeMismatch } from "./taloswatchnode.ts";
import type { NodeFacts } from "./types.ts";

/** The Talos client calls {@link TalosWatchCache} makes (a subset, so that tests can fake it). */
export type TalosWatchClient = Pick<
  TalosClient,
  | "subscribe"
  | "platformMetadata"
  | "addresses"
  | "systemInformation"
  | "version"
  | "firstAnswer"
  | "nodename"
> &
  Partial<CsrWatchClient>;

/** Which optional facts the rules need (each costs a Talos call per node). */
export interface FactsNeeds {
  /** A rule's template may read a SystemInformation field. */
  systemInformation: boolean;
  /** A rule's template may read TalosVersion. */
  talosVersion: boolean;
}

/** A node's facts, or what they still wait for. */
export type FactsState =
  | { ready: true; facts: NodeFacts /** The IP Talos answered on. */; nodeIP: string }
  | {
      ready: false;
      waitingFor: string;
      /** Why Talos does not answer, when it fails. */
      error?: string;
      /** The facts came from another machine than the node (they are not used). */
      mismatch?: NodeMismatch;
      /** The error is Talos answering over this per-machine bound (lib/peerlimits.ts): the machine fails alone. */
      limit?: PeerLimitName;
    };

/** Options of {@link TalosWatchCache}. */
export interface TalosWatchCacheOptions {
  talos: TalosWatchClient;
  /** Called whenever a node's facts or watch state change (the controller re-queues the node). */
  onChange: (name: string) => void;
  /** `--node-status-update-frequency`: how often nodes whose watch is down are polled. */
  refreshMs: number;
  /** Period of the shared timer (default min(5 s, refreshMs)). */
  tickMs?: number;
  /** A watch without any answer for this long counts as down (default 30 s). */
  stallMs?: number;
  /**
   * How many nodes start their Talos work at once (default 128): a node counts from its start until
   * its PlatformMetadata and AddressStatuses are known, its watch is down, or it is forgotten; the
   * others wait in tracking order. The client's call slots bound the calls on the wire, not the nodes
   * waiting for one, each holding its suspended calls (README Performance, "Memory at scale").
   */
  maxStarting?: number;
  /** Backoff of retried one-off reads and of moving a dual-stack node's watches to its other IP (default 1 s → 60 s). */
  retryBackoff?: Backoff;
  /**
   * A PlatformMetadata watch closes once the metadata was complete and unchanged this long
   * (default 120 s; see {@link metadataComplete}).
   */
  metadataSettleMs?: number;
  /**
   * Whether node `name`'s status is unknown (its kubelet stopped posting: the machine is off or cut
   * off). Its failed calls and watches count apart (`node_status="unknown"`), and {@link stats}
   * counts its down watch apart: the alerts leave both out. Default: never.
   */
  nodeStatusUnknown?: (name: string) => boolean;
  /**
   * node-csr-approval runs beside and decides from these watches ({@link TalosWatchCache.csrFacts}):
   * links and NodeIPConfig are read once per node and address watch epoch, and Talos is asked the
   * node's name again after its address watch broke. The client must then have links, nodeIPConfig
   * and hostname.
   */
  csrFacts?: boolean;
  now?: () => number;
  /** Runs `fn` after `ms`; returns its cancellation (default: a timer that does not hold the process). */
  schedule?: (fn: () => void, ms: number) => () => void;
}
