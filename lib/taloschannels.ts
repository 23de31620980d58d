// The Talos client's channels: one gRPC channel per talosconfig endpoint, built together as a
// generation and replaced as a whole when the talosconfig changes; the calls and streams in flight
// on a generation, so that a retired one closes when its last call ends; which channel a call takes.
// Memory: the transport (lib/grpc.ts, node:http2 with it) is imported on the first generation only.

import { isIP } from "node:net";
import type { Backoff } from "./backoffpolicy.ts";
import type { GrpcChannel } from "./grpc.ts";
import { pickEndpoint } from "./taloscallpolicy.ts";
import type { TalosConfig } from "./talosconfig.ts";

/** apid refuses larger messages; gRPC clients stop at 4 MiB by default. */
const MAX_MESSAGE_BYTES = 32 << 20;

/**
 * SNI sent to IP endpoints. Bun's TLS refuses an IP as server name, and apid ignores SNI; the
 * certificate is still checked against the IP itself.
 */
const IP_ENDPOINT_SNI = "talos";

/** The channels built from one talosconfig; replaced as a whole when the file changes. */
export interface Generation {
  channels: GrpcChannel[];
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
  const channels = config.endpoints.map(
    (endpoint) =>
      new transport.GrpcChannel({
        host: endpoint.host,
        port: endpoint.port,
        ...(config.ca === undefined ? {} : { ca: config.ca }),
        cert: config.crt,
        key: config.key,
        ...(isIP(endpoint.host) === 0 ? {} : { servername: IP_ENDPOINT_SNI }),
        maxReceiveMessageBytes: MAX_MESSAGE_BYTES,
        backoff,
        random,
      }),
  );
  return { channels, inFlight: 0, retired: false };
}

/** Closes every channel of a generation. */
export function closeGeneration(gen: Generation): void {
  for (const ch of gen.channels) ch.close();
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
