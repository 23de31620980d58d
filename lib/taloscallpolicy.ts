// The decisions of the Talos client (lib/talos.ts), pure: its limits and their defaults, which
// endpoint a call goes to, whether a failed attempt is retried and whether the failure may be a
// rotated certificate, which IP firstAnswer tries next, what counts as a failed call in the metrics,
// the List response budget, whether a re-read talosconfig needs new channels, and one attempt's
// call options. The client does the I/O, the waiting and the counting.

import { GrpcStatus, TalosError, TalosNotFoundError } from "./taloserrors.ts";

/** The numeric limits of a client, as given (undefined: the default). */
export interface ClientLimitOptions {
  maxInFlight?: number | undefined;
  callTimeoutMs?: number | undefined;
  attempts?: number | undefined;
  configPollMs?: number | undefined;
}

/** The numeric limits of a client, checked and defaulted. */
export interface ClientLimits {
  /** Calls and stream opens in flight at most (default 64). */
  maxInFlight: number;
  /** Deadline of one attempt (default 10 s). */
  callTimeoutMs: number;
  /** Attempts per call, retries included (default 5). */
  attempts: number;
  /** How often the talosconfig is re-read besides file-change events (default 60 s). */
  configPollMs: number;
}

/**
 * Checks a client's limits and fills in the defaults; counts are rounded down.
 * @example clientLimits({ attempts: 2.5 }) // { maxInFlight: 64, callTimeoutMs: 10000, attempts: 2, configPollMs: 60000 }
 * @throws {TypeError} when a limit is not a positive finite number.
 */
export function clientLimits(opts: ClientLimitOptions): ClientLimits {
  const positive = (name: string, v: number | undefined, dflt: number) => {
    const n = v ?? dflt;
    if (!Number.isFinite(n) || n <= 0) throw new TypeError(`TalosClient: ${name} must be positive, got ${v}`);
    return n;
  };
  return {
    maxInFlight: Math.floor(positive("maxInFlight", opts.maxInFlight, 64)),
    callTimeoutMs: positive("callTimeoutMs", opts.callTimeoutMs, 10_000),
    attempts: Math.floor(positive("attempts", opts.attempts, 5)),
    configPollMs: positive("configPollMs", opts.configPollMs, 60_000),
  };
}

/**
 * The endpoint a call goes to: the first from `start` on (round-robin for calls to the endpoint
 * itself, {@link endpointSlot} for a node's), skipping endpoints whose connection is failing unless
 * all are.
 * @param failing whether each endpoint's connection is failing, in endpoint order (not empty).
 * @returns the endpoint's index.
 * @example pickEndpoint([true, false, false], 3) // 1
 */
export function pickEndpoint(failing: readonly boolean[], start: number): number {
  const n = failing.length;
  for (let i = 0; i < n; i++) {
    const at = (start + i) % n;
    if (!failing[at]) return at;
  }
  return start % n;
}

/**
 * Where the round of a call or watch about node `node` starts ({@link pickEndpoint}): the same
 * endpoint for every call and watch of one node, different nodes spread evenly over the endpoints.
 * An endpoint is a control plane's apid, which holds a connection to every machine it proxied to,
 * about 87 KiB each, for as long as it runs (README Performance): with calls spread round-robin,
 * each apid ends up holding every machine; pinned, each holds its share.
 * @returns a non-negative 32-bit integer (FNV-1a of the node's address).
 * @example endpointSlot("10.0.0.5") % 3 === endpointSlot("10.0.0.5") % 3 // always
 */
export function endpointSlot(node: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < node.length; i++) {
    h ^= node.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** What to do after attempt `attempt` (0-based) of a call failed. */
export type RetryDecision =
  | { retry: false }
  | {
      retry: true;
      /** The backoff round to wait for before the next attempt (0-based). */
      backoffRound: number;
      /** Re-read the talosconfig first if its file changed: the failure may be a rotated certificate. */
      checkConfig: boolean;
    };

/**
 * Whether a failed attempt is retried: only retryable errors, while attempts remain.
 * @example afterFailedAttempt(new TalosError("unavailable", "x", { retryable: true }), 0, 5) // { retry: true, backoffRound: 0, checkConfig: true }
 */
export function afterFailedAttempt(err: TalosError, attempt: number, attempts: number): RetryDecision {
  if (!err.retryable || attempt + 1 >= attempts) return { retry: false };
  return { retry: true, backoffRound: attempt, checkConfig: mayBeRotation(err) };
}

/**
 * Whether a failure may come from a renewed client certificate or moved endpoints (Unavailable: the
 * handshake or the connection failed), so that a changed talosconfig file is worth re-reading.
 */
export function mayBeRotation(err: TalosError): boolean {
  return err.code === "unavailable";
}

/**
 * Whether firstAnswer moves on to the node's next IP after `err`: only for retryable Talos errors
 * (unreachable); any other error is the answer.
 */
export function tryNextIP(err: unknown): err is TalosError {
  return err instanceof TalosError && err.retryable;
}

/**
 * Whether a call that threw `err` counts in `talosccm_api_request_errors_total`: a node without
 * SystemInformation (no SMBIOS) is an answer, not a failure.
 */
export function countsAsFailure(request: string, err: unknown): boolean {
  return !(err instanceof TalosNotFoundError && request === "systeminformation");
}

/**
 * The most a List response may hold, each message counted with LIST_MESSAGE_OVERHEAD (what it
 * costs as an object besides its bytes): a server streaming tiny messages without end would
 * otherwise grow the list without bound (the client's side of CVE-2019-9517, internal data
 * buffering). A node's addresses or links are some KB.
 */
export const MAX_LIST_BYTES = 8 << 20;
export const LIST_MESSAGE_OVERHEAD = 128;

/**
 * A List response's cost after one more message of `messageBytes`.
 * @example listBytesAfter(0, 100) // 228
 */
export function listBytesAfter(total: number, messageBytes: number): number {
  return total + messageBytes + LIST_MESSAGE_OVERHEAD;
}

/**
 * The error of a List response over MAX_LIST_BYTES after `messages` kept messages:
 * RESOURCE_EXHAUSTED, final, as for a message over the receive limit.
 */
export function listTooLarge(messages: number): Error & { code: number; details: string } {
  return Object.assign(new Error(`the List response is over ${MAX_LIST_BYTES} bytes`), {
    code: GrpcStatus.RESOURCE_EXHAUSTED,
    details: `List response over ${MAX_LIST_BYTES} bytes (${messages} messages, ${LIST_MESSAGE_OVERHEAD} bytes counted for each)`,
  });
}

/** What of a talosconfig the channels are built from. */
export interface ConnectionFacts {
  crt: string;
  key: string;
  ca?: string | undefined;
  endpoints: readonly { host: string; port: number }[];
}

/**
 * Whether a re-read talosconfig connects as the current one (same credentials, CA and endpoints in
 * the same order), so that the channels stay.
 */
export function sameConnection(a: ConnectionFacts, b: ConnectionFacts): boolean {
  return (
    a.crt === b.crt &&
    a.key === b.key &&
    a.ca === b.ca &&
    a.endpoints.length === b.endpoints.length &&
    a.endpoints.every((e, i) => e.host === b.endpoints[i]?.host && e.port === b.endpoints[i]?.port)
  );
}

/**
 * The transport options of one attempt: the `node` header routes it through apid to that node
 * (none: the endpoint answers itself).
 * @example attemptCallOptions("10.0.0.5", { timeoutMs: 10000, signal: undefined }) // { metadata: { node: "10.0.0.5" }, timeoutMs: 10000 }
 */
export function attemptCallOptions(
  node: string | undefined,
  opts: { timeoutMs: number; signal: AbortSignal | undefined },
): { metadata?: { node: string }; timeoutMs: number; signal?: AbortSignal } {
  return {
    ...(node === undefined ? {} : { metadata: { node } }),
    timeoutMs: opts.timeoutMs,
    ...(opts.signal ? { signal: opts.signal } : {}),
  };
}
