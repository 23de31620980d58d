// One COSI watch of the Talos client (lib/talos.ts): subscribe, push each event to a handler as the
// transport decodes it, resubscribe after a failure with backoff, and close. A watch waiting for
// events holds no promise, generator or frame, only this object and its stream: a thousand-node
// cluster keeps two of them per node for as long as the CCM runs. Also the adapter that turns a
// push watch into an async iterator (TalosClient.watch).
// A machine's answers are bounded before anything keeps them (lib/talosbounds.ts): a response over a
// bound is refused (an `errored` event naming it), and a list watch whose machine reports more
// resources than its bound ({@link LIST_WATCH_BOUNDS}) is cut there, its handler told to drop what it
// kept, and resubscribed with a backoff that a machine over the bound again does not reset.

import type { GrpcChannel, GrpcError, GrpcStream, GrpcStreamListener } from "./grpc.ts";
import type { PeerLimitName } from "./peerlimits.ts";
import { checkAddressCount, TalosLimitError } from "./talosbounds.ts";
import { statusError, TalosError } from "./taloserrors.ts";
import {
  decodeWatchResponse,
  RESOURCES,
  type ResourceData,
  type ResourceKind,
  type TalosWatchEvent,
} from "./taloswire.ts";

/** What a watch delivers to its user, synchronously and in order. Neither method may throw. */
export interface TalosWatchHandler<T> {
  /** One event: `created`, `updated`, `destroyed`, `bootstrapped`, or `errored` (an outage began). */
  onEvent(ev: TalosWatchEvent<T>): void;
  /** The watch ended on a non-retryable error (e.g. PermissionDenied) and will not resubscribe. */
  onEnd(err: TalosError): void;
  /**
   * A list watch's resources as the handler keeps them (by id: set on `created`/`updated`, deleted on
   * `destroyed`): at each bootstrap the watch reports what vanished while it resubscribed from this
   * record, instead of keeping a copy of its own. The watch only reads it.
   */
  readonly record?: ReadonlyMap<string, T>;
  /**
   * Whether the watched node's status is unknown now (its kubelet stopped posting: the machine is
   * off or cut off): the client counts the watch's failures apart, which the alerts leave out.
   */
  nodeStatusUnknown?(): boolean;
}

/** A running watch. */
export interface TalosWatch {
  /** Ends the watch: no event is delivered afterwards. Idempotent. */
  close(): void;
}

/** What a watch needs from its client: one per client, shared by every watch. */
export interface WatchHost {
  /** The client is closed: watches end quietly. */
  readonly closed: boolean;
  /**
   * Opens the stream for `session` on the current channels, with a concurrency slot until the
   * first response, which it returns (empty from Talos: the watch is established; undefined: the
   * call ended). Sets `session.call`, `.channel` and `.generation`, enters that generation and
   * clears `session.reconnecting`; when it throws, it has cancelled the call and left again.
   */
  open(session: WatchSession): Promise<Uint8Array | undefined>;
  /** Leaves the generation `session` entered (once per open). */
  leave(session: WatchSession): void;
  /** Counts a failed watch; before a retry, waits for what may fix it (a talosconfig re-read). */
  failed(session: WatchSession, err: TalosError): Promise<void>;
  /** The delay before resubscribe attempt `failures` (1-based). */
  retryDelay(failures: number): number;
  /** Forgets a watch that ended or was closed. */
  drop(session: WatchSession): void;
  /** Counts an answer refused for a per-machine bound (talosccm_peer_input_rejected_total). */
  rejected(session: WatchSession, err: TalosLimitError): void;
}

/**
 * The bound on how many resources a list watch of a kind may hold per machine: its machine is over
 * it when the watch reports more distinct ids (since its bootstrap began, or held afterwards).
 */
export const LIST_WATCH_BOUNDS: Partial<Record<ResourceKind, PeerLimitName>> = {
  addresses: "talos_addresses",
};

/**
 * One watch (see TalosClient.subscribe). A list watch (no id) remembers what it delivered, to report
 * what vanished while it resubscribed, unless its handler keeps that record
 * ({@link TalosWatchHandler.record}); a singleton watch keeps no copy of its resource. An `errored`
 * event from Talos ends the stream as a retryable failure; a response that does not decode is
 * reported as `errored` and skipped.
 */
export class WatchSession<K extends ResourceKind = ResourceKind> implements TalosWatch, GrpcStreamListener {
  /** The generation of channels the stream runs on (the client's; opaque here). */
  generation: unknown;
  channel: GrpcChannel | undefined;
  /** The stream runs straight to the machine, not through an endpoint (lib/talosroute.ts). */
  direct = false;
  /** The client moved to new channels: resubscribe at once, without counting a failure. */
  reconnecting = false;
  /** The stream, from its opening to its end (the client cancels it to move to new channels). */
  call: GrpcStream | undefined;
  #closed = false;
  #failures = 0;
  /**
   * Streams cut for a per-machine bound: the resubscribe backoff counts them too, and a stream that
   * opens does not reset them (a machine that floods after each bootstrap still waits up to the maximum).
   */
  #strikes = 0;
  /** A failure found in the stream's data, reported when the cancelled call ends. */
  #error: TalosError | undefined;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  /** A list watch's own record, when its handler keeps none. */
  readonly #known: Map<string, ResourceData[K]> | undefined;
  /** Ids listed since the last (re)subscribe, until its bootstrap: list watches only. */
  #seen: Set<string> | undefined;

  constructor(
    readonly host: WatchHost,
    readonly node: string,
    readonly kind: K,
    readonly id: string | undefined,
    readonly handler: TalosWatchHandler<ResourceData[K]>,
  ) {
    this.#known = id === undefined && handler.record === undefined ? new Map() : undefined;
  }

  /** `watch <type> on node <node>`, for messages. */
  get what(): string {
    return `watch ${RESOURCES[this.kind].type} on node ${this.node}`;
  }

  get closed(): boolean {
    return this.#closed || this.host.closed;
  }

  /** Subscribes; the first attempt starts at once. */
  start(): void {
    void this.#subscribe();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    this.call?.cancel();
    this.host.drop(this);
  }

  /** The client closed: ends the watch, telling the handler with `err` (code "closed"). */
  abandon(err: TalosError): void {
    if (this.#closed) return;
    this.close();
    this.handler.onEnd(err);
  }

  async #subscribe(): Promise<void> {
    this.#retryTimer = undefined;
    if (this.closed) return;
    let first: Uint8Array | undefined;
    try {
      first = await this.host.open(this);
    } catch (err) {
      void this.#failed(statusError(this.what, err));
      return;
    }
    const call = this.call as GrpcStream;
    this.#failures = 0;
    this.#seen = this.id === undefined ? new Set() : undefined;
    if (first !== undefined) this.onMessage(first);
    call.listen(this);
  }

  /** One response of the stream: its events, in order. */
  onMessage(bytes: Uint8Array): void {
    if (this.closed || this.#error) return;
    let events: Array<TalosWatchEvent<ResourceData[K]>>;
    try {
      events = decodeWatchResponse(this.kind, bytes);
    } catch (err) {
      if (err instanceof TalosLimitError) this.#refuse(err);
      else this.handler.onEvent({ type: "errored", error: (err as Error).message });
      return;
    }
    for (const ev of events) {
      if (this.closed) return;
      if (ev.type === "errored") {
        this.#error = new TalosError("unavailable", `Cannot ${this.what}: ${ev.error}`, { retryable: true });
        this.call?.cancel();
        return;
      }
      if (this.#overBound(ev)) return;
      this.#track(ev);
      this.handler.onEvent(ev);
    }
  }

  /** Whether `ev` brings a list watch's machine over its bound ({@link LIST_WATCH_BOUNDS}): then {@link #refuse}. */
  #overBound(ev: TalosWatchEvent<ResourceData[K]>): boolean {
    const limit = LIST_WATCH_BOUNDS[this.kind];
    if (limit === undefined || this.id !== undefined || (ev.type !== "created" && ev.type !== "updated"))
      return false;
    // While (re)bootstrapping, the machine holds what it listed since; afterwards, the record.
    const held = this.#seen ?? this.#known ?? this.handler.record;
    const count = held === undefined || held.has(ev.id) ? (held?.size ?? 0) : held.size + 1;
    try {
      checkAddressCount(count);
      return false;
    } catch (err) {
      this.#refuse(err as TalosLimitError);
      return true;
    }
  }

  /**
   * A response over a per-machine bound: the refusal is counted and the handler told by an `errored`
   * event naming the bound, to drop what it kept. A list watch is cut (what it holds is no longer
   * the machine's whole state; it resubscribes after a backoff and bootstraps again) and drops its
   * own record; a singleton watch goes on (its next event replaces the resource).
   */
  #refuse(e: TalosLimitError): void {
    this.host.rejected(this, e);
    if (this.id === undefined) {
      this.#known?.clear();
      this.#seen = undefined;
      this.#error = e;
      this.call?.cancel();
    }
    this.handler.onEvent({ type: "errored", error: `${e.message} (${this.what})`, limit: e.limit });
  }

  /**
   * Keeps a list watch's record (its own, or notes what was listed when the handler keeps it); at
   * bootstrap, first reports what vanished while it resubscribed.
   */
  #track(ev: TalosWatchEvent<ResourceData[K]>): void {
    if (this.id !== undefined) return;
    const known = this.#known;
    if (ev.type === "created" || ev.type === "updated") {
      known?.set(ev.id, ev.resource);
      this.#seen?.add(ev.id);
    } else if (ev.type === "destroyed") {
      known?.delete(ev.id);
    } else if (ev.type === "bootstrapped" && this.#seen) {
      const seen = this.#seen;
      this.#seen = undefined;
      const record = known ?? this.handler.record;
      if (!record) return;
      // A copy: the handler deletes from its record on each destroyed event.
      for (const [gone, resource] of [...record]) {
        if (seen.has(gone)) continue;
        known?.delete(gone);
        if (!this.closed) this.handler.onEvent({ type: "destroyed", id: gone, resource });
      }
    }
  }

  /** The stream ended: resubscribe (at once after a channel change, else after a backoff). */
  onEnd(err: GrpcError | null): void {
    const e =
      this.#error ??
      (err
        ? statusError(this.what, err)
        : new TalosError("unavailable", `Cannot ${this.what}: stream ended`, { retryable: true }));
    this.#error = undefined;
    this.#ended();
    if (this.closed) return;
    if (this.reconnecting) {
      void this.#subscribe();
      return;
    }
    void this.#failed(e);
  }

  #ended(): void {
    if (!this.call) return;
    this.call = undefined;
    this.host.leave(this);
  }

  async #failed(e: TalosError): Promise<void> {
    if (this.closed) return;
    if (this.reconnecting) {
      void this.#subscribe();
      return;
    }
    const limited = e instanceof TalosLimitError;
    if (limited) this.#strikes++;
    if (!e.retryable && !limited) {
      this.#closed = true;
      void this.host.failed(this, e);
      this.host.drop(this);
      this.handler.onEnd(e);
      return;
    }
    // A stream cut for a bound told its handler already (#overBound).
    if (!limited && this.#failures++ === 0) this.handler.onEvent({ type: "errored", error: e.message });
    await this.host.failed(this, e);
    if (this.closed) return;
    const delay = this.host.retryDelay(Math.max(this.#failures, this.#strikes));
    this.#retryTimer = setTimeout(() => void this.#subscribe(), delay);
  }
}

/**
 * The events of a push watch as an async iterator: `open` subscribes with the handler; the iterator
 * ends when `signal` aborts or the watch ends with code "closed", and throws any other ending error.
 */
export async function* iterateWatch<T>(
  open: (handler: TalosWatchHandler<T>) => TalosWatch,
  signal: AbortSignal | undefined,
): AsyncGenerator<TalosWatchEvent<T>> {
  const queue: Array<TalosWatchEvent<T>> = [];
  let end: TalosError | undefined;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  if (signal?.aborted) return;
  const watch = open({
    onEvent: (ev) => {
      queue.push(ev);
      notify();
    },
    onEnd: (err) => {
      end = err;
      notify();
    },
  });
  signal?.addEventListener("abort", notify, { once: true });
  try {
    for (;;) {
      if (signal?.aborted) return;
      const ev = queue.shift();
      if (ev) {
        yield ev;
        continue;
      }
      if (end) {
        if (end.code === "closed") return;
        throw end;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  } finally {
    signal?.removeEventListener("abort", notify);
    watch.close();
  }
}
