// One tracked node of the Talos watch cache (lib/taloswatchcache.ts): its record (IPs, what Talos
// confirmed, the facts kept, which of its watches are down, the reads in flight or waiting) and the
// handler of its AddressStatus watch, which keeps the node's addresses within their bound. The cache
// decides when to start, poll and move watches; this file holds what it keeps per node.

import { ipsOnMachine } from "./addresses.ts";
import { namesInstances } from "./instanceid.ts";
import { type PeerLimitName, peerLimit } from "./peerlimits.ts";
import type {
  TalosAddressStatus,
  TalosError,
  TalosWatch,
  TalosWatchEvent,
  TalosWatchHandler,
} from "./talos.ts";
import { TalosLimitError } from "./talosbounds.ts";
import type { PlatformMetadata, SystemInformation } from "./types.ts";

/** Talos on a node's IP is another node: the name it reported. */
export interface NodeMismatch {
  ip: string;
  nodename: string;
}

export type ReadKind = "systeminformation" | "version" | "nodename";
/** Parts of a node's watching that can be down; "ended": a watch ended on a non-retryable error. */
export type DownPart = "metadata" | "addresses" | "stalled" | "ended";
// Bits of NodeWatch.reading and .down: a Set keeps ~230 B of storage once it held an entry (issue 29).
export const READ_BITS: Record<ReadKind, number> = { systeminformation: 1, version: 2, nodename: 4 };
export const DOWN_BITS: Record<DownPart, number> = { metadata: 1, addresses: 2, stalled: 4, ended: 8 };

/**
 * Whether PlatformMetadata is as Talos leaves it for the rest of the boot: present, and on a platform
 * that names its instances, with the instance and provider IDs (Talos publishes it without them
 * until the platform's metadata service answered).
 */
export function metadataComplete(metadata: PlatformMetadata | undefined): boolean {
  if (metadata === undefined) return false;
  return !namesInstances(metadata.platform) || (metadata.instanceId !== "" && metadata.providerId !== "");
}

/** Whether two PlatformMetadata name the same machine: platform, hostname, instance and provider ID. */
export function sameMachine(a: PlatformMetadata, b: PlatformMetadata): boolean {
  return (
    a.platform === b.platform &&
    a.hostname === b.hostname &&
    a.instanceId === b.instanceId &&
    a.providerId === b.providerId
  );
}

/** The bound a Talos error names, when it refused an answer for one. */
export function limitOf(err: unknown): PeerLimitName | undefined {
  return err instanceof TalosLimitError ? err.limit : undefined;
}

/** A one-off read of a node (SystemInformation, Version, Nodename) that failed and waits to be retried. */
export interface FailedRead {
  failures: number;
  retryAtMs: number;
  error: string;
  /** The read was refused for this per-machine bound. */
  limit: PeerLimitName | undefined;
  /** The controller was told that the retry time has come. */
  announced: boolean;
}

/** A link an address of the machine was on, as LinkStatus reported it: enough to tell whether it is shared. */
export interface LinkSeen {
  index: number;
  type: number;
  kind: string;
}

/**
 * What node-csr-approval decides on beyond the watched facts (lib/taloswatchcsr.ts), read once per
 * epoch of the address watch ({@link NodeWatch.epoch}) and kept while it holds.
 */
export interface CsrExtras {
  /** The epoch these were read in; in another one they are read again. */
  epoch: number;
  /**
   * The links the machine's addresses were on when LinkStatuses were read, by name (null: Talos had
   * no status for it). Current while every address is on a link here with the same index.
   */
  links: Map<string, LinkSeen | null> | undefined;
  /** {@link NodeWatch.addedGeneration} when the links were read. */
  linksAt: number;
  /** NodeIPConfig excludeSubnets, read at {@link excludedAt}. */
  excludedSubnets: readonly string[] | undefined;
  /** {@link NodeWatch.addedGeneration} when excludeSubnets was read. */
  excludedAt: number;
  /** HostnameStatus hostname and FQDN, read when a CSR first had DNS names besides the node's. */
  host: { hostname: string; fqdn: string } | undefined;
  /** Reads under way ({@link CSR_READ_BITS}). */
  reading: number;
  /** The last read's failure; the CSR then asks Talos itself, which reports it. */
  failed: string | undefined;
}

/** Bits of {@link CsrExtras.reading}. */
export const CSR_READ_BITS = { links: 1, excluded: 2, host: 4 } as const;

/** One node's watches and facts. Kept small: a thousand of them must stay cheap. */
export class NodeWatch {
  ips: readonly string[];
  ipIndex = 0;
  /** The IP whose answers the facts came from (providerID fallback and one-off reads use it). */
  answeredIP: string;
  metadata: PlatformMetadata | undefined;
  /** The PlatformMetadata watch told whether the resource exists. */
  metadataKnown = false;
  readonly addresses = new Map<string, TalosAddressStatus>();
  /** The AddressStatus watch delivered its bootstrap contents. */
  addressesKnown = false;
  /** The IP on which Talos confirmed that the machine is this node: facts are used only from it. */
  confirmedIP: string | undefined;
  /**
   * The address watch's epoch: moves when the watch (re)starts and when it breaks (a reboot, apid
   * restarting: the machine on the IP may be another one when it is back). What node-csr-approval
   * takes from the watches (lib/taloswatchcsr.ts) holds only within the epoch it was read in.
   */
  epoch = 0;
  /** The epoch in which Talos last confirmed the node's name on {@link confirmedIP}. */
  confirmedEpoch = -1;
  /**
   * Moves whenever an address appears or changes (not when one goes): what Talos excludes from the
   * machine's node IPs (NodeIPConfig) is read again for CSR decisions after it moved.
   */
  addedGeneration = 0;
  /** What node-csr-approval decides on beyond the watched facts, when it asks (lib/taloswatchcsr.ts). */
  csr: CsrExtras | undefined;
  /** The last IP on which Talos said it is another node. */
  mismatch: NodeMismatch | undefined;
  /** IPs on which Talos said it is another node, until one confirms: the watches never return there. */
  refusedIPs: Set<string> | undefined;
  /**
   * The PlatformMetadata last seen (kept when it is destroyed): when its platform, hostname, instance
   * or provider ID change, so may the machine ({@link sameMachine}).
   */
  identity: PlatformMetadata | undefined;
  /** Undefined until read; null when the node has none. */
  systemInformation: SystemInformation | null | undefined;
  talosVersion: string | undefined;
  /** One-off reads under way ({@link READ_BITS}). */
  reading = 0;
  readonly failedReads = new Map<ReadKind, FailedRead>();
  /** Which parts are down ({@link DOWN_BITS}); 0: none. */
  down = 0;
  lastError = "";
  /** The bound `lastError` names, when an answer was refused for one. */
  lastLimit: PeerLimitName | undefined;
  startedMs: number;
  /** The refresh period of a down node counts from here (outage start, then each poll). */
  polledMs = 0;
  failovers = 0;
  /** Cancels the pending move to the node's next IP. */
  cancelFailover: (() => void) | undefined;
  /** Open only while the metadata may still change ({@link metadataComplete}, the settle time). */
  metadataWatch: TalosWatch | undefined;
  /** Closes the metadata watch once the metadata settled. */
  cancelSettle: (() => void) | undefined;
  addressesWatch: TalosWatch | undefined;
  /** The address watch failed since its last bootstrap (a reboot, or apid restarting). */
  addressesBroke = false;
  /**
   * Where the node is in the start gate ({@link TalosWatchCacheOptions.maxStarting}): waiting for its
   * turn, started and not known yet, or past it.
   */
  gate: "queued" | "starting" | undefined;

  constructor(
    readonly name: string,
    ips: readonly string[],
    now: number,
  ) {
    this.ips = ips;
    this.answeredIP = ips[0] ?? "";
    this.startedMs = now;
  }

  get watchIP(): string {
    return this.ips[this.ipIndex] ?? "";
  }

  /**
   * The IPs Talos may be asked on: all until a machine is confirmed as the node and its addresses
   * are known, then only those that machine has (another one was claimed by the kubelet and may lead
   * to someone else's Talos). Recomputed on each use, so an address that appears later counts.
   */
  askableIPs(): readonly string[] {
    if (this.confirmedIP === undefined || !this.addressesKnown) return this.ips;
    return ipsOnMachine(this.ips, this.confirmedIP, [...this.addresses.values()]);
  }

  /** The index of the next askable IP after the watched one, if there is another. */
  nextIPIndex(): number | undefined {
    const askable = this.askableIPs();
    for (let step = 1; step < this.ips.length; step++) {
      const i = (this.ipIndex + step) % this.ips.length;
      if (askable.includes(this.ips[i] as string)) return i;
    }
    return undefined;
  }
}

/** What an address watch's handler calls back in its {@link TalosWatchCache}. */
export interface AddressWatchHooks {
  failed(w: NodeWatch, part: DownPart, error: string, limit?: PeerLimitName): void;
  statusUnknown(name: string): boolean;
  recovered(w: NodeWatch, part: DownPart): void;
  /**
   * The watch delivered its contents (BOOTSTRAPPED); `resumed`: again after it broke, when the
   * machine may have rebooted or be another one.
   */
  synced(w: NodeWatch, resumed: boolean): void;
  changed(name: string): void;
  ended(w: NodeWatch, err: TalosError): void;
}

/**
 * The handler of a node's AddressStatus watch. While the watch (re)delivers its contents after a
 * (re)connect, it re-queues the node once, at BOOTSTRAPPED; afterwards on each change. One object
 * per node, without closures: the cache's hooks are shared.
 */
export class AddressWatchHandler implements TalosWatchHandler<TalosAddressStatus> {
  #syncing = true;
  #changed = false;

  constructor(
    readonly w: NodeWatch,
    readonly hooks: AddressWatchHooks,
  ) {}

  /** The watch reports what vanished while it resubscribed from the node's own record. */
  get record(): ReadonlyMap<string, TalosAddressStatus> {
    return this.w.addresses;
  }

  nodeStatusUnknown(): boolean {
    return this.hooks.statusUnknown(this.w.name);
  }

  onEvent(ev: TalosWatchEvent<TalosAddressStatus>): void {
    const w = this.w;
    switch (ev.type) {
      case "errored":
        this.#syncing = true;
        w.addressesBroke = true;
        w.epoch++;
        if (ev.limit !== undefined) this.#refuse(ev.error, ev.limit);
        else this.hooks.failed(w, "addresses", ev.error);
        return;
      case "created":
      case "updated": {
        const old = w.addresses.get(ev.id);
        const a = ev.resource;
        if (!old && w.addresses.size >= peerLimit("talos_addresses")) {
          // The client cuts such a watch before this (lib/taloswatch.ts); a record never grows past the bound.
          this.#syncing = true;
          this.#refuse(
            new TalosLimitError("talos_addresses", w.addresses.size + 1, "AddressStatuses").message,
          );
          return;
        }
        if (!old || old.address !== a.address || old.linkName !== a.linkName || old.flags !== a.flags) {
          this.#changed = true;
        }
        if (!old || old.address !== a.address || old.linkIndex !== a.linkIndex) w.addedGeneration++;
        // Keyed by the resource's own id (the same text; shared across machines for loopback).
        w.addresses.set(a.id, a);
        break;
      }
      case "destroyed":
        this.#changed = w.addresses.delete(ev.id) || this.#changed;
        break;
      case "bootstrapped": {
        this.#syncing = false;
        this.#changed = true;
        w.addressesKnown = true;
        this.hooks.recovered(w, "addresses");
        const resumed = w.addressesBroke;
        w.addressesBroke = false;
        this.hooks.synced(w, resumed);
        break;
      }
    }
    if (this.#changed && !this.#syncing) {
      this.#changed = false;
      this.hooks.changed(w.name);
    }
  }

  onEnd(err: TalosError): void {
    this.hooks.ended(this.w, err);
  }

  /** The machine's addresses were over their bound: none of them is kept, and its facts wait. */
  #refuse(error: string, limit: PeerLimitName = "talos_addresses"): void {
    const w = this.w;
    w.addresses.clear();
    w.addressesKnown = false;
    this.hooks.failed(w, "addresses", error, limit);
  }
}
