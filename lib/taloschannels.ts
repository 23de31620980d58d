// The Talos client's channels: one gRPC channel per talosconfig endpoint, built together as a
// generation and replaced as a whole when the talosconfig changes; the channels straight to machines
// (lib/talosroute.ts), made on a machine's first direct call with the generation's certificate and
// closed once idle; the calls and streams in flight on a generation, so that a retired one closes
// when its last call ends; which channel a call takes.
// Memory: the transport (lib/grpc.ts and the HTTP/2 client under it) is imported on the first
// generation only.

import type { Backoff } from "./backoffpolicy.ts";
import type { GrpcChannel } from "./grpc.ts";
import { pickEndpoint } from "./taloscallpolicy.ts";
import type { TalosConfig } from "./talosconfig.ts";

/** apid refuses larger messages; gRPC clients stop at 4 MiB by default. */
const MAX_MESSAGE_BYTES = 32 << 20;

/** The port of every Talos machine's apid (Talos' constants.ApidPort). */
export const MACHINE_PORT = 50000;

/**
 * A direct connection not established within this counts as a failed path and the call goes
 * through the proxy (an endpoint's connection waits 20 s: it has no fallback).
 */
export const DIRECT_CONNECT_TIMEOUT_MS = 5_000;

/** Where a machine's own apid listens; tests map it to their fakes. */
export type MachineEndpoint = (node: string) => { host: string; port: number };

/** A machine's apid at `<node>:50000`. */
export const machineEndpoint: MachineEndpoint = (node) => ({ host: node, port: MACHINE_PORT });

/** A channel straight to one machine, and the idle sweeps it has seen in a row. */
export interface DirectChannel {
  channel: GrpcChannel;
  idleSweeps: number;
}

/** The channels built from one talosconfig; replaced as a whole when the file changes. */
export interface Generation {
  channels: GrpcChannel[];
  /** Channels straight to machines, by node IP. */
  direct: Map<string, DirectChannel>;
  /** Builds a channel with this generation's certificate and CA. */
  make: (host: string, port: number, connectTimeoutMs?: number) => GrpcChannel;
  /** Unary calls and streams running on these channels. */
  inFlight: number;
  retired: boolean;
}

let transportLoading: Promise<typeof import("./grpc.ts")> | undefined;

/** The gRPC transport, imported on the first call (node:http2 with it). */
export function loadTransport(): Promise<typeof import("./grpc.ts")> {
  transportLoading ??= import("./grpc.ts");
  return transportLoading;
}

/**
 * A generation of channels to `config`'s endpoints; no connection is made until a call.
 * @param transport the loaded transport ({@link loadTransport}), so that building is synchronous.
 * @param backoff reconnect backoff; `random` its jitter source.
 */
export function newGeneration(
  transport: typeof import("./grpc.ts"),
  config: TalosConfig,
  backoff: Backoff,
  random: () => number,
): Generation {
  // Keepalive stays at the transport's default, which apid's ping policy allows.
  const make = (host: string, port: number, connectTimeoutMs?: number) =>
    new transport.GrpcChannel({
      host,
      port,
      ...(config.ca === undefined ? {} : { ca: config.ca }),
      cert: config.crt,
      key: config.key,
      maxReceiveMessageBytes: MAX_MESSAGE_BYTES,
      backoff,
      random,
      ...(connectTimeoutMs === undefined ? {} : { connectTimeoutMs }),
    });
  const channels = config.endpoints.map((endpoint) => make(endpoint.host, endpoint.port));
  return { channels, direct: new Map(), make, inFlight: 0, retired: false };
}

/**
 * The channel straight to `node`'s apid, made on first use. Its certificate is checked against the
 * address dialled, as the proxy checks it when it dials the machine.
 */
export function directChannel(gen: Generation, node: string, endpoint: MachineEndpoint): GrpcChannel {
  let d = gen.direct.get(node);
  if (d === undefined) {
    const { host, port } = endpoint(node);
    d = { channel: gen.make(host, port, DIRECT_CONNECT_TIMEOUT_MS), idleSweeps: 0 };
    gen.direct.set(node, d);
  }
  d.idleSweeps = 0;
  return d.channel;
}

/** Closes and forgets `node`'s direct channel (its path failed: the next direct try dials afresh). */
export function dropDirect(gen: Generation, node: string): void {
  const d = gen.direct.get(node);
  if (d === undefined) return;
  gen.direct.delete(node);
  d.channel.close();
}

/**
 * Whether some machine's direct channel other than `node`'s is connected now: the path to the
 * machines works, whatever one machine's address does.
 */
export function directReachable(gen: Generation, node: string): boolean {
  for (const [other, d] of gen.direct) if (other !== node && d.channel.state === "ready") return true;
  return false;
}

/**
 * Closes the direct channels that had no call open at this sweep and the one before (a machine no
 * longer watched or asked about: forgotten, or its watches moved to the proxy).
 * @returns how many were closed.
 */
export function sweepDirect(gen: Generation): number {
  let closed = 0;
  for (const [node, d] of gen.direct) {
    if (d.channel.activeCalls > 0) {
      d.idleSweeps = 0;
      continue;
    }
    if (++d.idleSweeps < 2) continue;
    gen.direct.delete(node);
    d.channel.close();
    closed++;
  }
  return closed;
}

/** Closes every channel of a generation. */
export function closeGeneration(gen: Generation): void {
  for (const ch of gen.channels) ch.close();
  for (const d of gen.direct.values()) d.channel.close();
  gen.direct.clear();
}

/** Retires a generation: it closes now if idle, else when its last call leaves. */
export function retireGeneration(gen: Generation): void {
  gen.retired = true;
  if (gen.inFlight === 0) closeGeneration(gen);
}

/** Leaves a generation entered by {@link enterGeneration} or by `inFlight++`. */
export function leaveGeneration(gen: Generation): void {
  gen.inFlight--;
  if (gen.retired && gen.inFlight === 0) closeGeneration(gen);
}

/** Enters a generation for one call. @returns the idempotent leave function. */
export function enterGeneration(gen: Generation): () => void {
  gen.inFlight++;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    leaveGeneration(gen);
  };
}

/** The channel a call started as number `start` takes (see {@link pickEndpoint}). */
export function pickChannel(gen: Generation, start: number): GrpcChannel {
  const at = pickEndpoint(
    gen.channels.map((ch) => ch.state === "failing"),
    start,
  );
  return gen.channels[at] as GrpcChannel;
}
