// Talos machine API (apid) client, the shell that runs its calls: COSI Get/List/Watch of the
// resources a CCM reads and MachineService Version, each call with a slot, attempts with failover
// and backoff waits, decoding and metrics; watches that resubscribe; talosconfig rotation (re-read,
// new channels, the old ones closed when idle). Its pure decisions (limits, which endpoint, whether
// to retry, what counts as failure, the List budget, whether a new talosconfig needs new channels)
// are in lib/taloscallpolicy.ts; the channels and their generations in lib/taloschannels.ts; the
// file watch of the talosconfig in lib/talosconfigwatch.ts; the metrics in lib/talosmetrics.ts; the
// call slots in lib/semaphore.ts. The talosconfig and error types come from lib/talosconfig.ts and
// lib/taloserrors.ts, the wire (paths, resources, decoding into lib/types.ts) from lib/taloswire.ts,
// one watch's life (pushed events, resubscribe) from lib/taloswatch.ts, the gRPC transport from
// lib/grpc.ts.
// Memory: the transport is imported on the first call only (lib/taloschannels.ts), so loading this
// module and the talosconfig costs nothing of it; the protobuf code is ts-proto output (plain functions on
// protobuf-es' wire reader and writer), not protoc-gen-es' reflection runtime (~10 MB under Bun).

import { type Backoff, backoffDelay } from "./backoffpolicy.ts";
import { wait } from "./backoffwait.ts";
import type { GrpcChannel } from "./grpc.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { registry as processRegistry, startTimer } from "./metricsprocess.ts";
import { type PeerLimitName, peerRejections } from "./peerlimits.ts";
import { Semaphore } from "./semaphore.ts";
import { GetRequest, ListRequest } from "./talos_pb.ts";
import { checkAddressCount, TalosLimitError } from "./talosbounds.ts";
import {
  afterFailedAttempt,
  attemptCallOptions,
  clientLimits,
  countsAsFailure,
  endpointSlot,
  listBytesAfter,
  listTooLarge,
  MAX_LIST_BYTES,
  mayBeRotation,
  sameConnection,
  tryNextIP,
} from "./taloscallpolicy.ts";
import {
  closeGeneration,
  directChannel,
  directReachable,
  dropDirect,
  enterGeneration,
  type Generation,
  leaveGeneration,
  loadTransport,
  type MachineEndpoint,
  machineEndpoint,
  newGeneration,
  pickChannel,
  retireGeneration,
  sweepDirect,
} from "./taloschannels.ts";
import {
  endpointTarget,
  type LoadTalosConfigOptions,
  loadTalosConfig,
  type TalosConfig,
} from "./talosconfig.ts";
import { type ConfigFileWatch, fileStamp, watchConfigFile } from "./talosconfigwatch.ts";
import { statusError, TalosError, TalosNotFoundError } from "./taloserrors.ts";
import { nodeStatus, type TalosApiMetrics, talosApiMetrics } from "./talosmetrics.ts";
import { type MachineAccess, MachineRoutes } from "./talosroute.ts";
import {
  iterateWatch,
  type TalosWatch,
  type TalosWatchHandler,
  type WatchHost,
  WatchSession,
} from "./taloswatch.ts";
import {
  decodeGetResponse,
  decodeListResponse,
  decodeVersionResponse,
  encodeWatchRequest,
  PATHS,
  RESOURCES,
  type ResourceData,
  type ResourceKind,
  type TalosAddressStatus,
  type TalosLinkStatus,
  type TalosNodeIPConfig,
  type TalosResource,
  type TalosVersion,
  type TalosWatchEvent,
} from "./taloswire.ts";
import type { ControllerManagerConfig, PlatformMetadata, SystemInformation } from "./types.ts";

export { TalosLimitError } from "./talosbounds.ts";
// What the client throws and returns, so that its users import one module.
export {
  statusError,
  TalosDecodeError,
  TalosError,
  type TalosErrorCode,
  TalosNotFoundError,
  TalosPermissionError,
} from "./taloserrors.ts";
export type { TalosWatch, TalosWatchHandler } from "./taloswatch.ts";
export type {
  ResourceData,
  ResourceKind,
  TalosAddressStatus,
  TalosHostname,
  TalosLinkStatus,
  TalosNodeIPConfig,
  TalosNodename,
  TalosResource,
  TalosVersion,
  TalosWatchEvent,
} from "./taloswire.ts";

const log = logger("talos");

/** How often idle direct channels are closed and watches moved back from the proxy. */
const SWEEP_MS = 60_000;
/** Watches moved back to their machine's own apid per sweep, at most (each re-reads its state). */
const MOVES_PER_SWEEP = 64;

function abortError(what: string): TalosError {
  return new TalosError("canceled", `Cannot ${what}: canceled`);
}

/** Waits `ms`; rejects with a "canceled" TalosError as soon as `signal` aborts. */
async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  await wait(ms, signal);
  if (signal?.aborted) throw abortError("wait");
}

/** Options of {@link TalosClient}. */
export interface TalosClientOptions {
  config: TalosConfig;
  /** Re-reads the talosconfig (rotation); without it `reload()` has nothing to read. */
  load?: () => TalosConfig;
  /** Calls and stream opens in flight at most (default 64). */
  maxInFlight?: number;
  /** Deadline of one attempt of a unary call or List (default 10 s). */
  callTimeoutMs?: number;
  /** Attempts per call, retries included (default 5). */
  attempts?: number;
  /** Retry and reconnect backoff (default 500 ms → 15 s). */
  backoff?: Backoff;
  /** Watch resubscription backoff (default 500 ms → 30 s). */
  watchBackoff?: Backoff;
  /** How often the talosconfig file is re-read besides file-change events (default 60 s). */
  configPollMs?: number;
  /** Metrics registry (default: the process registry). */
  registry?: Registry;
  /** Jitter source (tests make it deterministic). */
  random?: () => number;
  /**
   * Whether calls about a machine try its own apid first (`auto`; what `run` uses unless
   * TALOS_MACHINE_ACCESS says otherwise) or always go through an endpoint (`proxy`, the default
   * here); see lib/talosroute.ts.
   */
  machineAccess?: MachineAccess;
  /** Where a machine's own apid listens (default `<node IP>:50000`; tests map it to their fakes). */
  machineEndpoint?: MachineEndpoint;
  /** Clock of the direct routes' windows (tests move it). */
  now?: () => number;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  /** Deadline of each attempt, overriding the client's. */
  timeoutMs?: number;
  /** Attempts for this call, overriding the client's. */
  attempts?: number;
  /**
   * The call is about a node whose status is unknown (its kubelet stopped posting: the machine is
   * off or cut off): a failure counts with `node_status="unknown"`, which the alerts leave out.
   */
  nodeStatusUnknown?: boolean;
}

/** Options of {@link TalosClient.watch}. */
export interface WatchOptions {
  /** Watch one resource; defaults to the singleton id of the kind (all resources of `addresses` and `links`). */
  id?: string;
  /** Ends the watch. */
  signal?: AbortSignal;
}

/** Deadline and cancellation of one attempt. */
interface AttemptOptions {
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/**
 * A client of the Talos machine API. One gRPC channel per endpoint, created on the first call and
 * shared by all calls and watches; every call and watch about one node goes to the same endpoint
 * (nodes spread over the endpoints, so each control plane's apid proxies to its share of the
 * machines), calls to the endpoints themselves round-robin, and both fail over on Unavailable. Returns plain data (lib/types.ts); never exposes protobuf or transport types.
 *
 * @example
 * const talos = TalosClient.load();            // talosconfig search, TALOS_ENDPOINTS, file watching
 * const meta = await talos.platformMetadata("10.0.0.5");
 * const w = talos.subscribe("10.0.0.5", "addresses", { onEvent: (ev) => console.log(ev.type), onEnd: console.error });
 * w.close();
 * talos.close();
 */
export class TalosClient {
  readonly #load: (() => TalosConfig) | undefined;
  readonly #sem: Semaphore;
  readonly #callTimeoutMs: number;
  readonly #attempts: number;
  readonly #backoff: Backoff;
  readonly #watchBackoff: Backoff;
  readonly #configPollMs: number;
  readonly #random: () => number;
  readonly #metrics: TalosApiMetrics;
  /** Counts answers refused for a per-machine bound (lib/talosbounds.ts). */
  readonly #rejected: (limit: PeerLimitName) => void;
  readonly #watches = new Set<WatchSession>();
  readonly #watchHost: WatchHost;
  readonly #routes: MachineRoutes;
  readonly #machineEndpoint: MachineEndpoint;
  readonly #now: () => number;
  #sweepTimer: ReturnType<typeof setInterval> | undefined;
  #config: TalosConfig;
  #generation: Generation | undefined;
  #roundRobin = 0;
  #closed = false;
  #configWatch: ConfigFileWatch | undefined;
  #reloading: Promise<boolean> | undefined;
  /** fileStamp() of the talosconfig when it was last read by reload(). */
  #configStamp: string | undefined;

  /**
   * Builds a client; no I/O happens until the first call.
   * @throws {TypeError} on invalid options.
   */
  constructor(opts: TalosClientOptions) {
    if (!opts?.config?.endpoints?.length)
      throw new TypeError("TalosClient: config with endpoints is required");
    const limits = clientLimits(opts);
    this.#config = opts.config;
    this.#load = opts.load;
    this.#sem = new Semaphore(limits.maxInFlight, () => abortError("wait for a call slot"));
    this.#callTimeoutMs = limits.callTimeoutMs;
    this.#attempts = limits.attempts;
    this.#backoff = opts.backoff ?? { initialMs: 500, maxMs: 15_000 };
    this.#watchBackoff = opts.watchBackoff ?? { initialMs: 500, maxMs: 30_000 };
    this.#configPollMs = limits.configPollMs;
    this.#random = opts.random ?? Math.random;
    this.#metrics = talosApiMetrics(opts.registry);
    this.#routes = new MachineRoutes(opts.machineAccess ?? "proxy");
    this.#machineEndpoint = opts.machineEndpoint ?? machineEndpoint;
    this.#now = opts.now ?? Date.now;
    const rejections = peerRejections(opts.registry ?? processRegistry);
    this.#rejected = (limit) => rejections.inc({ peer: "talos", limit });
    const client = this;
    this.#watchHost = {
      get closed() {
        return client.#closed;
      },
      open: (session) => this.#openWatch(session),
      leave: (session) => leaveGeneration(session.generation as Generation),
      failed: async (session, e) => {
        this.#metrics.errors.inc({
          request: `watch_${session.kind}`,
          node_status: nodeStatus(session.handler.nodeStatusUnknown?.() === true),
        });
        if (!e.retryable) return;
        log.v(2).info("Resubscribing Talos watch", {
          node: session.node,
          type: RESOURCES[session.kind].type,
          err: e.message,
        });
        if (mayBeRotation(e) && session.channel) await this.#maybeReloadAfterFailure(session.channel);
      },
      retryDelay: (failures) => backoffDelay(failures - 1, this.#watchBackoff, this.#random),
      drop: (session) => this.#watches.delete(session),
      rejected: (session, e) => {
        this.#rejected(e.limit);
        log.v(2).info("Talos answer over a per-machine bound", {
          node: session.node,
          type: RESOURCES[session.kind].type,
          limit: e.limit,
          err: e.message,
        });
      },
    };
  }

  /**
   * Loads the talosconfig (search order, TALOS_ENDPOINTS) and returns a client that reloads it
   * when the file changes.
   * @throws {TalosConfigError}
   */
  static load(opts: LoadTalosConfigOptions & Omit<TalosClientOptions, "config" | "load"> = {}): TalosClient {
    const config = loadTalosConfig(opts);
    const client = new TalosClient({
      ...opts,
      config,
      load: () => loadTalosConfig({ ...opts, path: config.path }),
    });
    client.watchConfigFile();
    return client;
  }

  /** The talosconfig context's cluster name ("" when absent). */
  get clusterName(): string {
    return this.#config.cluster;
  }

  /** The talosconfig in use. */
  get config(): TalosConfig {
    return this.#config;
  }

  /** `PlatformMetadatas.talos.dev` of the node. @throws {TalosNotFoundError} when it does not exist yet */
  async platformMetadata(nodeIP: string, opts: CallOptions = {}): Promise<PlatformMetadata> {
    return (await this.#get("platformmetadata", nodeIP, opts)).spec;
  }

  /**
   * `SystemInformations.hardware.talos.dev` of the node.
   * @returns undefined when the node does not publish it (no SMBIOS, e.g. many ARM boards).
   */
  async systemInformation(nodeIP: string, opts: CallOptions = {}): Promise<SystemInformation | undefined> {
    try {
      return (await this.#get("systeminformation", nodeIP, opts)).spec;
    } catch (err) {
      if (err instanceof TalosNotFoundError) return undefined;
      throw err;
    }
  }

  /**
   * The Kubernetes node name Talos registers the kubelet with (Nodenames.kubernetes.talos.dev):
   * proof of which node answers on an IP.
   * @throws {TalosNotFoundError} when it does not exist (yet)
   */
  async nodename(nodeIP: string, opts: CallOptions = {}): Promise<string> {
    return (await this.#get("nodename", nodeIP, opts)).spec.nodename;
  }

  /**
   * The node's hostname and domain (HostnameStatuses.net.talos.dev); fqdn = hostname[.domainname].
   * @throws {TalosNotFoundError} when it does not exist (yet)
   */
  async hostname(
    nodeIP: string,
    opts: CallOptions = {},
  ): Promise<{ hostname: string; domainname: string; fqdn: string }> {
    const { hostname, domainname } = (await this.#get("hostname", nodeIP, opts)).spec;
    return { hostname, domainname, fqdn: domainname ? `${hostname}.${domainname}` : hostname };
  }

  /**
   * The subnets the node's kubelet picks its node IPs from (NodeIPConfigs.kubernetes.talos.dev):
   * `excludeSubnets` holds the cluster's pod and service CIDRs and the machine's virtual IPs.
   * @example const { excludeSubnets } = await talos.nodeIPConfig("10.0.0.5")
   * @throws {TalosNotFoundError} when it does not exist (yet)
   */
  async nodeIPConfig(nodeIP: string, opts: CallOptions = {}): Promise<TalosNodeIPConfig> {
    return (await this.#get("nodeipconfig", nodeIP, opts)).spec;
  }

  /** Every `AddressStatuses.net.talos.dev` of the node. */
  async addresses(nodeIP: string, opts: CallOptions = {}): Promise<TalosAddressStatus[]> {
    return this.#list("addresses", nodeIP, opts);
  }

  /**
   * Every `LinkStatuses.net.talos.dev` of the node: its network links by name, with type, kind and
   * flags. Pseudo-links without a kernel link (`external`, where Talos puts a cloud's public IPs)
   * have none.
   * @example const virtual = (await talos.links("10.0.0.5")).filter((l) => l.kind !== "")
   */
  async links(nodeIP: string, opts: CallOptions = {}): Promise<TalosLinkStatus[]> {
    return this.#list("links", nodeIP, opts);
  }

  /**
   * The cluster's pod and service CIDRs, read without a `node` header from the endpoint itself
   * (a control-plane node).
   * @throws {TalosNotFoundError} when the endpoint is not a control-plane node
   */
  async controllerManagerConfig(opts: CallOptions = {}): Promise<ControllerManagerConfig> {
    return (await this.#get("controllermanagerconfig", undefined, opts)).spec;
  }

  /**
   * `MachineService.Version`: of the endpoint itself (a cheap health probe of the connection), or
   * of the node `opts.nodeIP` (its Talos version tag).
   */
  async version(opts: CallOptions & { nodeIP?: string } = {}): Promise<TalosVersion> {
    const node = opts.nodeIP;
    return this.#call(
      "version",
      node === undefined ? "get the Talos version of the endpoint" : `get the Talos version of node ${node}`,
      node,
      opts,
      (gen, ch, header, attemptOpts) =>
        this.#unaryOnce(gen, ch, PATHS.version, new Uint8Array(), header, attemptOpts),
      (msgs) => decodeVersionResponse(msgs[0] ?? new Uint8Array()),
    );
  }

  /**
   * Asks the node on each IP in turn (one attempt per IP and round, then backoff) and returns the
   * first answer; only "unreachable" errors move on to the next IP.
   * @example const { nodeIP, value } = await talos.firstAnswer(["10.0.0.5", "fd00::5"], (ip, o) => talos.platformMetadata(ip, o))
   * @throws the last error when no IP answered; at once any non-retryable error.
   */
  async firstAnswer<T>(
    nodeIPs: readonly string[],
    fn: (nodeIP: string, opts: CallOptions) => Promise<T>,
    opts: CallOptions = {},
  ): Promise<{ nodeIP: string; value: T }> {
    if (nodeIPs.length === 0) throw new TalosError("invalid", "Cannot ask Talos: the node has no IP");
    const rounds = opts.attempts ?? this.#attempts;
    let last: unknown;
    for (let round = 0; round < rounds; round++) {
      if (round > 0) await sleep(backoffDelay(round - 1, this.#backoff, this.#random), opts.signal);
      for (const nodeIP of nodeIPs) {
        try {
          return { nodeIP, value: await fn(nodeIP, { ...opts, attempts: 1 }) };
        } catch (err) {
          if (!tryNextIP(err)) throw err;
          last = err;
        }
      }
    }
    throw last;
  }

  /**
   * Watches one kind of resource on a node, pushing each event to `handler` as it arrives; never
   * ends on its own: it resubscribes with jittered backoff after Unavailable, apid restarts or
   * talosconfig reloads, and re-delivers the current state each time (`created` events, then for
   * list watches `destroyed` for what vanished meanwhile and `bootstrapped`). An `errored` event
   * marks the start of each outage. A non-retryable error (e.g. PermissionDenied) ends it with
   * `handler.onEnd`, and so does closing the client (code "closed"). Many watches share the
   * channel as HTTP/2 streams; one waiting for events holds no promise or generator.
   * @param kind For singleton kinds the id defaults to the singleton; for `addresses` and `links` all are watched.
   */
  subscribe<K extends ResourceKind>(
    nodeIP: string,
    kind: K,
    handler: TalosWatchHandler<ResourceData[K]>,
    opts: { id?: string } = {},
  ): TalosWatch {
    const session = new WatchSession(this.#watchHost, nodeIP, kind, opts.id ?? RESOURCES[kind].id, handler);
    if (this.#closed) {
      session.abandon(new TalosError("closed", "Cannot watch Talos: the client is closed"));
      return session;
    }
    this.#watches.add(session);
    session.start();
    return session;
  }

  /**
   * {@link subscribe} as an async iterator: the same events; it ends when `opts.signal` aborts or
   * the client closes, and throws the non-retryable error that ended the watch.
   * @throws {TalosError} from the iterator on non-retryable errors (e.g. PermissionDenied).
   */
  watch<K extends ResourceKind>(
    nodeIP: string,
    kind: K,
    opts: WatchOptions = {},
  ): AsyncIterable<TalosWatchEvent<ResourceData[K]>> {
    return {
      [Symbol.asyncIterator]: () =>
        iterateWatch<ResourceData[K]>(
          (h) => this.subscribe(nodeIP, kind, h, opts.id === undefined ? {} : { id: opts.id }),
          opts.signal,
        ),
    };
  }

  /**
   * Re-reads the talosconfig; when it changed, builds new channels for new calls and watches and
   * closes the old ones once their calls have finished.
   * @returns whether the configuration changed.
   * @throws {TalosConfigError} when the file cannot be read (the old configuration stays).
   */
  reload(): Promise<boolean> {
    this.#reloading ??= Promise.resolve()
      .then(() => this.#reloadNow())
      .finally(() => {
        this.#reloading = undefined;
      });
    return this.#reloading;
  }

  /**
   * Reloads the talosconfig when its file or directory changes (Kubernetes swaps secret files
   * through a symlink in the directory) and every `configPollMs` as a safety net.
   */
  watchConfigFile(): void {
    if (!this.#load || this.#configWatch || this.#closed) return;
    const path = this.#config.path;
    const onChange = () => {
      this.reload().catch((err) => log.error("Cannot reload talosconfig", err, { path }));
    };
    this.#configWatch = watchConfigFile(path, onChange, this.#configPollMs);
  }

  /** Closes channels, ends watches and fails waiting calls. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#configWatch?.close();
    this.#sem.failAll(new TalosError("closed", "Cannot call Talos: the client is closed"));
    const closed = new TalosError("closed", "Cannot watch Talos: the client is closed");
    for (const w of [...this.#watches]) w.abandon(closed);
    clearInterval(this.#sweepTimer);
    if (this.#generation) closeGeneration(this.#generation);
    this.#generation = undefined;
    this.#metrics.directChannels.set(undefined, 0);
  }

  /** How calls about machines are routed: `auto` (directly first) or `proxy`. */
  get machineAccess(): MachineAccess {
    return this.#routes.access;
  }

  /**
   * Closes the direct channels idle since the last sweep and moves watches that the proxy carries
   * only because their machine's direct path had failed back to the machine, once its window has
   * passed (at most {@link MOVES_PER_SWEEP} per sweep). Runs every minute; tests call it.
   */
  sweep(): void {
    const gen = this.#generation;
    if (!gen || this.#closed) return;
    sweepDirect(gen);
    this.#metrics.directChannels.set(undefined, gen.direct.size);
    if (this.#routes.access === "proxy") return;
    const now = this.#now();
    let moves = 0;
    for (const w of this.#watches) {
      if (moves >= MOVES_PER_SWEEP) break;
      if (w.direct || !w.call || w.generation !== gen || this.#routes.route(w.node, now) !== "direct")
        continue;
      w.reconnecting = true;
      w.call.cancel();
      moves++;
    }
  }

  // ---- internals ----

  async #reloadNow(): Promise<boolean> {
    if (!this.#load || this.#closed) return false;
    const stamp = fileStamp(this.#config.path);
    const next = this.#load();
    this.#configStamp = stamp;
    const same = sameConnection(next, this.#config);
    this.#config = next;
    if (same) return false;
    const old = this.#generation;
    this.#generation = undefined;
    if (old) retireGeneration(old);
    for (const w of this.#watches) {
      if (w.generation === old && w.call) {
        w.reconnecting = true;
        w.call.cancel();
      }
    }
    log.info("Reloaded talosconfig", {
      path: next.path,
      endpoints: next.endpoints.map(endpointTarget),
      certNotAfter: next.certNotAfter.toISOString(),
    });
    return true;
  }

  async #currentGeneration(): Promise<Generation> {
    if (this.#closed) throw new TalosError("closed", "Cannot call Talos: the client is closed");
    const transport = await loadTransport();
    this.#generation ??= newGeneration(transport, this.#config, this.#backoff, this.#random);
    if (this.#sweepTimer === undefined && this.#routes.access === "auto") {
      this.#sweepTimer = setInterval(() => this.sweep(), SWEEP_MS);
      this.#sweepTimer.unref?.();
    }
    return this.#generation;
  }

  /**
   * After Unavailable on a channel that is not connected (handshake refused, endpoint down, as
   * opposed to apid answering for a down node), re-read the talosconfig if its file changed since
   * the last read: the certificate may have been renewed.
   */
  async #maybeReloadAfterFailure(channel: GrpcChannel): Promise<void> {
    if (!this.#load || channel.state === "ready") return;
    if (fileStamp(this.#config.path) === this.#configStamp) return;
    try {
      await this.reload();
    } catch (err) {
      log.error("Cannot reload talosconfig after connection failures", err, { path: this.#config.path });
    }
  }

  async #unaryOnce(
    gen: Generation,
    ch: GrpcChannel,
    path: string,
    req: Uint8Array,
    node: string | undefined,
    opts: AttemptOptions,
  ): Promise<Uint8Array[]> {
    const leave = enterGeneration(gen);
    try {
      return [await ch.unary(path, req, attemptCallOptions(node, opts))];
    } finally {
      leave();
    }
  }

  async #listOnce(
    gen: Generation,
    ch: GrpcChannel,
    req: Uint8Array,
    node: string | undefined,
    opts: AttemptOptions,
    checkCount: (messages: number) => void,
  ): Promise<Uint8Array[]> {
    const leave = enterGeneration(gen);
    try {
      const call = ch.serverStream(PATHS.list, req, attemptCallOptions(node, opts));
      const out: Uint8Array[] = [];
      let bytes = 0;
      for (let b = await call.next(); b !== undefined; b = await call.next()) {
        bytes = listBytesAfter(bytes, b.length);
        if (bytes > MAX_LIST_BYTES) {
          call.cancel();
          throw listTooLarge(out.length);
        }
        try {
          checkCount(out.length + 1);
        } catch (err) {
          call.cancel();
          throw err;
        }
        out.push(b);
      }
      return out;
    } finally {
      leave();
    }
  }

  /** Lists every resource of a list kind (no singleton id) on a node. */
  async #list<K extends "addresses" | "links">(
    kind: K,
    nodeIP: string,
    opts: CallOptions,
  ): Promise<Array<ResourceData[K]>> {
    const { namespace, type } = RESOURCES[kind];
    const req = ListRequest.encode({ namespace, type }).finish();
    // A machine's AddressStatuses beyond the bound are refused as they arrive, not kept or decoded.
    const checkCount = kind === "addresses" ? checkAddressCount : () => {};
    return this.#call(
      kind,
      `list ${type} on node ${nodeIP}`,
      nodeIP,
      opts,
      (gen, ch, header, attemptOpts) => this.#listOnce(gen, ch, req, header, attemptOpts, checkCount),
      (msgs) => msgs.map((b) => decodeListResponse(kind, b).spec),
    );
  }

  async #get<K extends ResourceKind>(
    kind: K,
    node: string | undefined,
    opts: CallOptions,
  ): Promise<TalosResource<ResourceData[K]>> {
    const { namespace, type, id } = RESOURCES[kind];
    const req = GetRequest.encode({ namespace, type, id: id ?? "" }).finish();
    return this.#call(
      kind,
      node === undefined ? `get ${type} from the endpoint` : `get ${type} on node ${node}`,
      node,
      opts,
      (gen, ch, header, attemptOpts) => this.#unaryOnce(gen, ch, PATHS.get, req, header, attemptOpts),
      (msgs) => decodeGetResponse(kind, msgs[0] ?? new Uint8Array()),
    );
  }

  /**
   * Runs one logical call: slot, attempts with failover and backoff, decoding, metrics. A call about
   * `node` goes straight to the machine while its route is direct (lib/talosroute.ts; a failed path
   * is tried again at once through the proxy, and counts no attempt), else starts on the node's
   * endpoint ({@link endpointSlot}), a retry on the next one. `attempt` gets the `node` header to
   * send: none to the machine itself.
   */
  async #call<T>(
    request: string,
    what: string,
    node: string | undefined,
    opts: CallOptions,
    attempt: (
      gen: Generation,
      ch: GrpcChannel,
      header: string | undefined,
      o: AttemptOptions,
    ) => Promise<Uint8Array[]>,
    decode: (msgs: Uint8Array[]) => T,
  ): Promise<T> {
    const stop = startTimer(this.#metrics.duration, { request });
    const attempts = opts.attempts ?? this.#attempts;
    const attemptOpts = { timeoutMs: opts.timeoutMs ?? this.#callTimeoutMs, signal: opts.signal };
    try {
      for (let n = 0; ; n++) {
        if (opts.signal?.aborted) throw abortError(what);
        const release = await this.#sem.acquire(opts.signal);
        let channel: GrpcChannel | undefined;
        let gen: Generation | undefined;
        let msgs: Uint8Array[];
        const direct = node !== undefined && this.#routes.route(node, this.#now()) === "direct";
        try {
          gen = await this.#currentGeneration();
          if (direct) channel = this.#directChannel(gen, node);
          else channel = pickChannel(gen, node === undefined ? this.#roundRobin++ : endpointSlot(node) + n);
          msgs = await attempt(gen, channel, direct ? undefined : node, attemptOpts);
        } catch (err) {
          release();
          if (opts.signal?.aborted) throw abortError(what);
          const e = statusError(what, err);
          if (direct && gen && channel && this.#pathFailed(gen, node, channel, e)) {
            n--;
            continue;
          }
          const next = afterFailedAttempt(e, n, attempts);
          if (!next.retry) throw e;
          log.v(2).info("Retrying Talos call", { request, attempt: n + 1, err: e.message });
          if (channel && next.checkConfig) await this.#maybeReloadAfterFailure(channel);
          await sleep(backoffDelay(next.backoffRound, this.#backoff, this.#random), opts.signal);
          continue;
        }
        release();
        if (direct) this.#routes.directWorked(node);
        return decode(msgs);
      }
    } catch (err) {
      if (countsAsFailure(request, err))
        this.#metrics.errors.inc({ request, node_status: nodeStatus(opts.nodeStatusUnknown === true) });
      if (err instanceof TalosLimitError) this.#rejected(err.limit);
      throw err;
    } finally {
      stop();
    }
  }

  /**
   * {@link WatchHost.open}: the watch's stream on the current channels, and its first response;
   * straight to the machine while its route is direct, else (or at once when the direct path fails)
   * through the node's endpoint.
   */
  async #openWatch(session: WatchSession): Promise<Uint8Array | undefined> {
    const release = await this.#sem.acquire();
    try {
      const gen = await this.#currentGeneration();
      const { namespace, type } = RESOURCES[session.kind];
      const request = encodeWatchRequest(namespace, type, session.id);
      for (;;) {
        const direct = this.#routes.route(session.node, this.#now()) === "direct";
        const channel = direct
          ? this.#directChannel(gen, session.node)
          : pickChannel(gen, endpointSlot(session.node));
        gen.inFlight++;
        session.generation = gen;
        session.reconnecting = false;
        session.channel = channel;
        session.direct = direct;
        const call = channel.serverStream(
          PATHS.watch,
          request,
          direct ? {} : { metadata: { node: session.node } },
        );
        session.call = call;
        try {
          const first = await call.next();
          if (direct) this.#routes.directWorked(session.node);
          return first;
        } catch (err) {
          call.cancel();
          session.call = undefined;
          leaveGeneration(gen);
          if (direct && this.#pathFailed(gen, session.node, channel, statusError(session.what, err)))
            continue;
          throw err;
        }
      }
    } finally {
      release();
    }
  }

  /** `node`'s direct channel in `gen`, made on first use. */
  #directChannel(gen: Generation, node: string): GrpcChannel {
    const ch = directChannel(gen, node, this.#machineEndpoint);
    this.#metrics.directChannels.set(undefined, gen.direct.size);
    return ch;
  }

  /**
   * Whether a direct attempt about `node` failed on the path (the channel never got ready: refused,
   * unreachable, the handshake failed) rather than with the machine's answer. If so, the machine is
   * asked through the proxy for its window, and its direct channel goes.
   */
  #pathFailed(gen: Generation, node: string, channel: GrpcChannel, e: TalosError): boolean {
    if (e.code !== "unavailable" || channel.state === "ready") return false;
    const { windowMs, closedForAll } = this.#routes.directFailed(
      node,
      this.#now(),
      directReachable(gen, node),
    );
    dropDirect(gen, node);
    this.#metrics.directChannels.set(undefined, gen.direct.size);
    this.#metrics.directFallbacks.inc();
    log.v(2).info("Cannot reach the Talos machine directly; asking through the endpoints", {
      node,
      forMs: windowMs,
      err: e.message,
    });
    if (closedForAll)
      log.warn(
        "Cannot reach Talos machines directly (several in a row): every machine is asked through the " +
          "talosconfig endpoints for a while; TALOS_MACHINE_ACCESS=proxy skips the direct tries",
        { node, err: e.message },
      );
    return true;
  }
}
