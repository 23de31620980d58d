// Node IPAM's controller: feeds the allocator (lib/ipamallocator.ts) the Nodes and their Talos
// addresses and patches the pod CIDRs it returns (startNodeIpam); nothing else touches CIDR state.
// The Talos client is only used, and only loaded, when the configuration needs it.

import { ADDRESS_PERMANENT, isForeignLink } from "./addresses.ts";
import { CidrError } from "./cidr.ts";
import type { ControllerContext } from "./controller.ts";
import type { IpamOptions } from "./flags.ts";
import { type Allocation, Allocator, CidrNotAvailableError, type NodeNetwork } from "./ipamallocator.ts";
import { type NodeIpamConfig, nodeIpamNeedsTalos, resolveNodeIpamConfig } from "./ipamconfig.ts";
import { type KubeApi, KubeError, PATCH } from "./kubeapi.ts";
import type { Informer } from "./kubecache.ts";
import type { EventRecorder, EventTarget } from "./kubeevents.ts";
import { logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { type LeanNode, leanNode } from "./nodeview.ts";
import { type ReconcileResult, runWorkers, WorkQueue } from "./queue.ts";
import { sameList } from "./samelist.ts";
import type { TalosClient } from "./talos.ts";
import type { AddressStatus } from "./types.ts";
import { PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT } from "./wellknown.ts";

const log = logger("node-ipam");

/**
 * Failed podCIDRs patches of unknown outcome per `CIDRAssignmentFailed` Event: upstream's
 * range and cloud allocators try the patch `cidrUpdateRetries` = 3 times before they record one.
 */
const PATCH_ATTEMPTS_PER_EVENT = 3;

/**
 * Reconciles in parallel: each mostly waits for the API server or Talos; the allocator never does.
 * Upstream hard-codes its worker count and no flag sets it: `cidrUpdateWorkers = 30` in
 * k8s.io/kubernetes `pkg/controller/nodeipam/ipam/cidr_allocator.go`, copied by the Go Talos CCM's
 * `pkg/nodeipam/ipam/cidr_allocator.go`; `NodeIPAMControllerConfiguration` holds only the CIDR and
 * mask settings. So this is a constant too; it stays at this CCM's 10 rather than upstream's 30
 * (with the CloudAllocator each reconcile reads the node's addresses from Talos).
 */
export const NODE_IPAM_WORKERS = 10;

/**
 * The node-IPAM configuration: the flags, completed from Talos' ControllerManagerConfig (read
 * without a `node` header) when a CIDR flag is missing and {@link nodeIpamNeedsTalos}. Without
 * `--service-cluster-ip-range` and without Talos, no service range is reserved (as in Kubernetes).
 * @param talos the Talos client; only touched when the configuration needs it.
 * @throws {CidrError} code `config`, with a message naming the flag or the Talos failure.
 */
export async function nodeIpamConfig(
  ipam: IpamOptions,
  talos: TalosClient | undefined,
  signal?: AbortSignal,
): Promise<NodeIpamConfig> {
  let { clusterCidrs, serviceCidrs } = ipam;
  const fromFlag = clusterCidrs.length > 0;
  if (!fromFlag && !talos) {
    throw new CidrError(
      "Cannot configure node IPAM: no --cluster-cidr and no Talos API access to read the pod subnets from",
      "config",
    );
  }
  if (talos && nodeIpamNeedsTalos(ipam) && (!fromFlag || serviceCidrs.length === 0)) {
    try {
      const cmc = await talos.controllerManagerConfig(signal ? { signal } : {});
      if (!fromFlag) clusterCidrs = cmc.podCIDRs;
      if (serviceCidrs.length === 0) serviceCidrs = cmc.serviceCIDRs;
      log.info("Read the cluster's subnets from Talos", {
        podCIDRs: cmc.podCIDRs.join(","),
        serviceCIDRs: cmc.serviceCIDRs.join(","),
      });
    } catch (err) {
      if (!fromFlag) {
        throw new CidrError(
          `Cannot configure node IPAM: cannot read the pod subnets from Talos (or set --cluster-cidr): ${(err as Error).message}`,
          "config",
          { cause: err },
        );
      }
      log.warn("Cannot read the service subnets from Talos; no service range is reserved", {
        err: (err as Error).message,
      });
    }
  }
  if (serviceCidrs.length === 0) log.info("No service CIDR known; no service range is reserved");
  return resolveNodeIpamConfig({ ...ipam, clusterCidrs, serviceCidrs });
}

/**
 * The addresses node-ipam keeps out of pod CIDRs and takes IPv6 prefixes from: the node's Talos
 * AddressStatuses without the links that do not carry its own network (KubeSpan, SideroLink,
 * loopback, dummies, Cilium's host address), permanent IPv6 first, otherwise in Talos' order.
 * @returns `address/length` strings, as {@link NodeNetwork.addresses} takes them.
 */
export function ipamAddresses(statuses: readonly AddressStatus[]): string[] {
  const own = statuses.filter((a) => !isForeignLink(a.linkName));
  const first = (a: AddressStatus) => a.family === "inet6" && (a.flags & ADDRESS_PERMANENT) !== 0;
  return [...own.filter(first), ...own.filter((a) => !first(a))].map((a) => a.address);
}

/**
 * The IPs a Node is known by: its status InternalIPs, then ExternalIPs, then the kubelet's
 * provided-node-ip values, without duplicates (the reference's GetNodeIPs, InternalIPs first because
 * apid reaches nodes on those).
 */
export function nodeIPsOf(node: LeanNode): string[] {
  const of = (type: string) => node.status.addresses.filter((a) => a.type === type).map((a) => a.address);
  const provided = (node.metadata.annotations[PROVIDED_NODE_IP_ANNOTATION] ?? "")
    .split(",")
    .map((s) => s.trim());
  return [...new Set([...of("InternalIP"), ...of("ExternalIP"), ...provided])].filter((s) => s !== "");
}

/**
 * A JSON patch setting `spec.podCIDRs` and `spec.podCIDR` (the first) only while both are unset: a
 * concurrent writer is never overwritten, the API server refuses the patch instead (422).
 */
export function podCIDRsPatch(podCIDRs: readonly string[]): Array<Record<string, unknown>> {
  return [
    { op: "test", path: "/spec/podCIDRs", value: null },
    { op: "test", path: "/spec/podCIDR", value: null },
    { op: "add", path: "/spec/podCIDRs", value: [...podCIDRs] },
    { op: "add", path: "/spec/podCIDR", value: podCIDRs[0] },
  ];
}

/** A refusal that will not change by retrying the same request (the request was not applied). */
function isRefusal(err: unknown): boolean {
  return (
    err instanceof KubeError &&
    err.status >= 400 &&
    err.status < 500 &&
    err.status !== 408 &&
    err.status !== 429
  );
}

/** What the controller works with. */
interface ControllerDeps {
  allocator: Allocator;
  client: KubeApi;
  nodes: Informer<LeanNode>;
  events: EventRecorder;
  /** Present only when the CloudAllocator takes IPv6 pod CIDRs from the nodes' own prefixes. */
  talos?: TalosClient;
  registry?: Registry;
}

/**
 * Feeds the allocator from the Node cache and writes its answers: occupies what Nodes hold,
 * allocates for Nodes without pod CIDRs and patches them, releases on deletion. Reconciles run in
 * parallel, but every allocator call is synchronous, so no two nodes can get the same range.
 */
class NodeIpamController {
  readonly #allocator: Allocator;
  readonly #client: KubeApi;
  readonly #nodes: Informer<LeanNode>;
  readonly #events: EventRecorder;
  readonly #talos: TalosClient | undefined;
  readonly #cloud: boolean;
  readonly #queue: WorkQueue;
  /** Nodes that found no free range: retried at once when a range is released. */
  readonly #waiting = new Set<string>();

  constructor(deps: ControllerDeps) {
    this.#allocator = deps.allocator;
    this.#client = deps.client;
    this.#nodes = deps.nodes;
    this.#events = deps.events;
    this.#talos = deps.talos;
    this.#cloud = deps.allocator.type === "CloudAllocator";
    this.#queue = new WorkQueue("cidrallocator_node", {
      baseDelayMs: 250,
      maxDelayMs: 300_000,
      ...(deps.registry ? { registry: deps.registry } : {}),
    });
  }

  /** Occupies every cached Node's pod CIDRs, then reconciles Nodes until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    let occupied = 0;
    for (const node of this.#nodes.list()) {
      if (!node.spec.podCIDRs?.length) continue;
      this.#occupy(node, true);
      occupied++;
    }
    log.info("Starting node IPAM", {
      allocator: this.#allocator.type,
      ranges: this.#allocator
        .status()
        .map((r) => `${r.clusterCIDR}:/${r.nodeMaskBits}`)
        .join(","),
      occupiedNodes: occupied,
    });
    const stop = () => this.#queue.shutDown();
    signal.addEventListener("abort", stop, { once: true });
    if (signal.aborted) stop();
    this.#nodes.addHandlers({
      onAdd: (n) => this.#queue.add(n.metadata.name),
      onUpdate: (old, n) => {
        if (this.#needsWork(old, n)) this.#queue.add(n.metadata.name);
      },
      onDelete: (n) => this.#release(n.metadata.name),
    });
    await runWorkers(this.#queue, NODE_IPAM_WORKERS, (name) => this.#reconcile(name, signal), log);
    signal.removeEventListener("abort", stop);
    log.info("Stopped node IPAM");
  }

  /** Heartbeats of Nodes that hold their CIDRs, or that wait for a free range, change nothing here. */
  #needsWork(old: LeanNode, node: LeanNode): boolean {
    if (node.metadata.deletionTimestamp) return !old.metadata.deletionTimestamp;
    if (node.spec.podCIDRs?.length) return !sameList(old.spec.podCIDRs, node.spec.podCIDRs);
    return !this.#waiting.has(node.metadata.name);
  }

  async #reconcile(name: string, signal: AbortSignal): Promise<ReconcileResult | undefined> {
    const node = this.#nodes.get(name);
    if (!node || node.metadata.deletionTimestamp) {
      this.#release(name);
      return undefined;
    }
    if (node.spec.podCIDRs?.length) {
      this.#occupy(node, false);
      return undefined;
    }
    // As upstream's CloudAllocator: the node's addresses are known once cloud-node initialized it.
    if (this.#cloud && node.spec.taints.some((t) => t.key === UNINITIALIZED_TAINT)) return undefined;
    const network = await this.#network(node, signal);
    const now = this.#nodes.get(name);
    if (
      !now ||
      now.metadata.uid !== node.metadata.uid ||
      now.metadata.deletionTimestamp ||
      now.spec.podCIDRs?.length
    ) {
      return { requeueAfterMs: 0 };
    }
    let allocation: Allocation;
    try {
      allocation = this.#allocator.allocate(name, network);
    } catch (err) {
      if (err instanceof CidrNotAvailableError) {
        this.#waiting.add(name);
        this.#event(node, "Warning", err.code, "AllocateCIDR", err.message);
      }
      throw err;
    }
    this.#waiting.delete(name);
    for (const w of allocation.warnings) log.v(2).info("Pod CIDR allocation note", { node: name, note: w });
    await this.#setPodCIDRs(node, allocation.podCIDRs, signal);
    return undefined;
  }

  /** What the allocator may know of the node: its IPs, pod capacity and, for IPv6 clouds, Talos' addresses. */
  async #network(node: LeanNode, signal: AbortSignal): Promise<NodeNetwork> {
    const nodeIPs = nodeIPsOf(node);
    const network: NodeNetwork = { nodeIPs };
    if (node.status.maxPods !== undefined) network.maxPods = node.status.maxPods;
    const talos = this.#talos;
    if (!talos) return network;
    const { value } = await talos.firstAnswer(nodeIPs, (ip, o) => talos.addresses(ip, o), { signal });
    network.addresses = ipamAddresses(value);
    return network;
  }

  /**
   * Patches the node's pod CIDRs once; a failure is thrown back to the queue, which retries the node
   * with per-item backoff. On a refusal the API server's Node decides (someone else set them, or it is
   * gone) and a definite failure releases the range; an unknown outcome keeps it for the next attempt
   * (the allocator hands the node the same CIDRs again) and records `CIDRAssignmentFailed` every
   * {@link PATCH_ATTEMPTS_PER_EVENT} attempts.
   */
  async #setPodCIDRs(node: LeanNode, podCIDRs: string[], signal: AbortSignal): Promise<void> {
    const name = node.metadata.name;
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    try {
      await this.#client.patch(path, podCIDRsPatch(podCIDRs), PATCH.json, { signal, discardAnswer: true });
      log.info("Set node PodCIDR", { node: name, podCIDRs: podCIDRs.join(",") });
    } catch (err) {
      if (signal.aborted) throw err;
      const refused = isRefusal(err);
      if (refused) {
        if (await this.#settle(name, signal)) return;
        this.#release(name);
      }
      const message = `Cannot set pod CIDRs ${podCIDRs.join(",")} of node ${name}: ${(err as Error).message}`;
      // The queue counts this node's failed reconciles in a row; this attempt is not counted yet.
      const attempt = this.#queue.failures(name) + 1;
      if (refused || attempt % PATCH_ATTEMPTS_PER_EVENT === 0) {
        this.#event(node, "Warning", "CIDRAssignmentFailed", "AllocateCIDR", message);
      }
      throw new Error(message, { cause: err });
    }
  }

  /**
   * After a refused patch, reads the Node from the API server: gone → release; pod CIDRs set by
   * someone (or by an earlier attempt) → occupy those instead. False when it still has none.
   */
  async #settle(name: string, signal: AbortSignal): Promise<boolean> {
    let raw: unknown;
    try {
      raw = await this.#client.get(`/api/v1/nodes/${encodeURIComponent(name)}`, { signal });
    } catch (err) {
      if (!(err instanceof KubeError && err.status === 404)) throw err;
      this.#release(name);
      return true;
    }
    const fresh = leanNode(raw);
    if (!fresh.spec.podCIDRs?.length) return false;
    this.#occupy(fresh, false);
    return true;
  }

  /**
   * Records the CIDRs a Node holds. `withNodeIPs` also reserves its status IPs; later calls leave the
   * reservations made at allocation (Talos' addresses included) alone.
   */
  #occupy(node: LeanNode, withNodeIPs: boolean): void {
    const name = node.metadata.name;
    const podCIDRs = node.spec.podCIDRs ?? [];
    let warnings: string[];
    try {
      warnings = this.#allocator.occupy(name, podCIDRs, withNodeIPs ? { nodeIPs: nodeIPsOf(node) } : {});
    } catch (err) {
      log.error("Cannot record the pod CIDRs of a node", err, {
        node: name,
        podCIDRs: podCIDRs.join(","),
      });
      this.#event(node, "Warning", "InvalidPodCIDR", "OccupyCIDR", (err as Error).message);
      return;
    }
    this.#waiting.delete(name);
    for (const w of warnings) {
      log.warn("Pod CIDR conflict", { node: name, warning: w });
      this.#event(node, "Warning", "PodCIDRConflict", "OccupyCIDR", w);
    }
  }

  /** Frees a node's ranges (idempotent) and retries the nodes that found none. */
  #release(name: string): void {
    this.#waiting.delete(name);
    const freed = this.#allocator.release(name);
    if (freed.length === 0) return;
    log.info("Released node PodCIDR", { node: name, podCIDRs: freed.join(",") });
    for (const w of this.#waiting) this.#queue.add(w);
  }

  #event(node: LeanNode, type: "Normal" | "Warning", reason: string, action: string, note: string): void {
    const target: EventTarget = { kind: "Node", name: node.metadata.name };
    if (node.metadata.uid) target.uid = node.metadata.uid;
    void this.#events.record(target, type, reason, action, note);
  }
}

/**
 * The node-ipam controller: with `--allocate-node-cidrs`, resolves the configuration (see
 * {@link nodeIpamConfig}), occupies the pod CIDRs Nodes already hold, then gives every Node without
 * pod CIDRs one per cluster CIDR (CloudAllocator: IPv6 from its own public prefix) until `signal`
 * aborts. Exhausted ranges give a `CIDRNotAvailable` Event and a retry, never a crash.
 * @throws {CidrError} code `config` when the configuration is impossible: start-up must stop.
 */
export async function startNodeIpam(ctx: ControllerContext, signal: AbortSignal): Promise<void> {
  const ipam = ctx.options.ipam;
  if (!ipam.allocateNodeCidrs) {
    log.info("Not allocating pod CIDRs: --allocate-node-cidrs is not set");
    return;
  }
  const config = await nodeIpamConfig(ipam, ctx.talos, signal);
  const allocator = new Allocator({ type: ipam.allocatorType, registry: ctx.registry, ...config });
  const ipv6FromTalos =
    allocator.type === "CloudAllocator" && config.clusterCIDRs.some((p) => p.family === 6);
  if (ipv6FromTalos && !ctx.talos) {
    throw new CidrError(
      "Cannot configure node IPAM: the CloudAllocator needs Talos API access for the nodes' IPv6 prefixes",
      "config",
    );
  }
  const controller = new NodeIpamController({
    allocator,
    client: ctx.client,
    nodes: ctx.nodes,
    events: ctx.events,
    registry: ctx.registry,
    ...(ipv6FromTalos && ctx.talos ? { talos: ctx.talos } : {}),
  });
  await controller.run(signal);
}
