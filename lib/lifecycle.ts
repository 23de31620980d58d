// The cloud-node-lifecycle controller. Every `--node-monitor-period` it looks at each cached Node:
// a Ready node loses a stale shutdown taint and nothing else; a NotReady node whose instance no
// longer exists is deleted (with a log line, an Event and a metric naming the reason), otherwise it
// gets the shutdown taint when InstanceShutdown says so, and a taint it has is kept (as upstream).
// "Exists" has the reference's Talos semantics (a GCP spot node reported NotReady and older than
// 30 s is gone) plus one rule on positive evidence only: Talos answering on the node's IP for a
// different instance means the old one was replaced. Decisions are pure
// (`decideLifecycle`); the controller class does the I/O: Talos probes, taint patches, deletions
// re-checked against a fresh read and guarded by preconditions.

import type { V1Node } from "@kubernetes/client-node";
import type { CompiledConfig } from "./config.ts";
import type { ControllerContext } from "./controller.ts";
import { instanceFacts, isUninitialized, LABELS, PROVIDER_NAME } from "./desirednode.ts";
import { isConflict, isNotFound, type KubeApi, PATCH } from "./kubeapi.ts";
import type { Informer } from "./kubecache.ts";
import type { EventRecorder } from "./kubeevents.ts";
import { logger } from "./log.ts";
import type { Counter, Registry } from "./metrics.ts";
import { type LeanNode, leanNode, nodeIPs, statusUnknown } from "./nodeview.ts";
import { runWorkers, WorkQueue } from "./queue.ts";
import type { TalosClient } from "./talos.ts";
import { measuredTransform } from "./transformmetrics.ts";
import type { PlatformMetadata, SystemInformation, Taint } from "./types.ts";
import { NOT_READY_TAINT_KEY, SHUTDOWN_TAINT_KEY } from "./wellknown.ts";

const log = logger("cloud-node-lifecycle");

/** The taint a NotReady node gets while its instance is shut down (cloud-provider's ShutdownTaint). */
export const SHUTDOWN_TAINT: Readonly<Taint> = { key: SHUTDOWN_TAINT_KEY, effect: "NoSchedule" };

/** Nodes with this label (any value) are left alone, as upstream. */
export const EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-lifecycle-management";

/** Nodes younger than this always exist (the reference's `initializedNodeDelay`). */
export const INITIALIZED_NODE_DELAY_MS = 30_000;

/** The taint kube-controller-manager puts on nodes whose kubelet reports NotReady (the reference's notReadyTaint). */
const NOT_READY_TAINT = { key: NOT_READY_TAINT_KEY, effect: "NoExecute" } as const;

/** providerIDs the CCM derives from the node IP (`talos://<platform>/<ip>`): they name no instance. */
const DERIVED_PROVIDER_ID_PREFIX = `${PROVIDER_NAME}://`;

/** Deadline of one Talos call of a probe; a dead node must not hold a worker for long. */
const PROBE_TIMEOUT_MS = 5_000;
/** A probe that found the same instance is trusted this long (at least one monitor period). */
const PROBE_TTL_MS = 30_000;
/** Failed probes back off from PROBE_TTL_MS up to this. */
const PROBE_MAX_BACKOFF_MS = 300_000;
/** Attempts of a taint patch that loses the resourceVersion race to another writer. */
const TAINT_PATCH_ATTEMPTS = 5;

// ---------------------------------------------------------------------------------------------
// Decisions (pure).

/** What the controller does to one node. */
export type LifecycleAction = "none" | "delete" | "addShutdownTaint" | "removeShutdownTaint";

/** Why a node is deleted; also the `reason` label of `talosccm_lifecycle_node_deletions_total`. */
export type DeletionReason = "GCPSpotNotReady" | "InstanceReplaced";

/** The outcome of {@link decideLifecycle}. */
export interface LifecycleDecision {
  action: LifecycleAction;
  /** One CamelCase word: a {@link DeletionReason} for deletions, else why nothing more happens. */
  reason: string;
  /** One sentence for logs and Events. */
  message: string;
}

/** A cached Node, plus what only a fresh read of the Node carries. */
export interface LifecycleNode extends LeanNode {
  /** `status.nodeInfo.systemUUID` as the kubelet reports it; absent in the cache. */
  systemUUID?: string;
}

/** Who Talos says the machine answering on a node's IP is. */
export interface InstanceIdentity {
  /** The node IP that answered. */
  nodeIP: string;
  /** The providerID the cloud-node controller would give this machine now (rules applied). */
  providerID: string;
  /** PlatformMetadata.providerId as Talos reports it; "" on platforms without one. */
  rawProviderID: string;
  /** PlatformMetadata.instanceId; "" when unknown. */
  instanceID: string;
  /** SystemInformation UUID; "" when the machine publishes none. */
  systemUUID: string;
  /** PlatformMetadata.hostname; "" when unknown. */
  hostname: string;
}

/** The result of asking Talos about a node: an identity, or why there is none (never evidence). */
export type InstanceProbe = { ok: true; identity: InstanceIdentity } | { ok: false; error: string };

/** What the edges learned about a node beyond the Node object. */
export interface LifecycleFacts {
  /** The Talos probe; absent when none was made. */
  probe?: InstanceProbe;
  /**
   * InstanceShutdown. Talos offers the CCM no shutdown signal today and the reference always
   * answers false, so the controller leaves it out; the upstream taint semantics stay intact.
   */
  shutdown?: boolean;
}

/** Whether `t` is the shutdown taint: key and effect, as upstream's MatchTaint. */
const isShutdownTaint = (t: { key: string; effect: string }): boolean =>
  t.key === SHUTDOWN_TAINT.key && t.effect === SHUTDOWN_TAINT.effect;

const isGcpSpot = (node: LeanNode): boolean =>
  node.metadata.labels[LABELS.platform] === "gcp" && node.metadata.labels[LABELS.lifecycle] === "spot";

/**
 * Whether a node counts as Ready: its Ready condition is True (an absent condition is Unknown, as
 * upstream). Only nodes that are not Ready are ever deleted; a stale `node.kubernetes.io/not-ready`
 * taint on a node whose condition says True never makes it NotReady.
 */
export function isReady(node: LeanNode): boolean {
  return node.status.ready === "True";
}

/**
 * Whether a NotReady node is known to be NotReady, the evidence the reference's GCP spot rule reads:
 * its kubelet reports Ready=False, or it carries the `node.kubernetes.io/not-ready:NoExecute` taint
 * that kube-controller-manager sets from that condition. A node that merely went silent (Unknown,
 * tainted `unreachable`) may be alive behind a partition, and a kubelet whose Node was deleted does
 * not register again until restarted (kubernetes/kubernetes#71398), so silence alone is not enough.
 */
export function reportsNotReady(node: LeanNode): boolean {
  if (isReady(node)) return false;
  return (
    node.status.ready === "False" ||
    node.spec.taints.some((t) => t.key === NOT_READY_TAINT.key && t.effect === NOT_READY_TAINT.effect)
  );
}

type Existence =
  | { exists: true; reason: string; message: string }
  | { exists: false; reason: DeletionReason; message: string };

const exists = (reason: string, message: string): Existence => ({ exists: true, reason, message });

/** Lower-cased path segments of a providerID: `aws:///us-east-1a/i-0abc` → ["aws", "us-east-1a", "i-0abc"]. */
function segments(providerID: string): string[] {
  return providerID
    .toLowerCase()
    .split(/[:/]+/)
    .filter((s) => s !== "");
}

/**
 * Why the machine Talos describes is the node's own instance, or undefined when nothing says so.
 * Any one match of providerID, instance id, system UUID or host name is enough: a false "replaced"
 * deletes a live node, a false "same" only keeps a dead Node around. Comparisons ignore case (Azure providerIDs changed case between Talos releases).
 */
function sameInstance(node: LifecycleNode, id: InstanceIdentity): string | undefined {
  const own = (node.spec.providerID ?? "").toLowerCase();
  if (id.providerID.toLowerCase() === own) return "its providerID matches";
  if (id.rawProviderID !== "" && id.rawProviderID.toLowerCase() === own) return "its providerID matches";
  if (id.instanceID !== "" && segments(own).includes(id.instanceID.toLowerCase())) {
    return `its instance id ${id.instanceID} is part of the node's providerID`;
  }
  if (
    id.systemUUID !== "" &&
    node.systemUUID &&
    id.systemUUID.toLowerCase() === node.systemUUID.toLowerCase()
  ) {
    return "its system UUID matches";
  }
  if (id.hostname !== "" && sameHostName(id.hostname, node.metadata.name)) {
    // Its kubelet would register as this very Node: deleting it would gain nothing.
    return `it is named ${id.hostname}`;
  }
  return undefined;
}

/** Host names equal ignoring case, or one is the first DNS label of the other (registerWithFQDN). */
function sameHostName(a: string, b: string): boolean {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  return x === y || x.split(".")[0] === y || y.split(".")[0] === x;
}

/**
 * InstanceExists for a NotReady node: the reference's rules, then the replaced-instance rule.
 * `probe` undefined on an eligible node gives reason "NotProbed".
 */
function existence(node: LifecycleNode, now: number, probe: InstanceProbe | undefined): Existence {
  const name = node.metadata.name;
  const providerID = node.spec.providerID ?? "";
  if (providerID === "") return exists("NoProviderID", `node ${name} has no providerID yet`);
  if (isUninitialized(node)) return exists("Uninitialized", `node ${name} is not initialized yet`);
  const ageMs = now - Date.parse(node.metadata.creationTimestamp);
  // NaN (no or bad timestamp) compares false: such a node counts as young.
  if (!(ageMs >= INITIALIZED_NODE_DELAY_MS)) {
    return exists("TooYoung", `node ${name} is younger than ${INITIALIZED_NODE_DELAY_MS / 1000} s`);
  }
  if (isGcpSpot(node) && reportsNotReady(node)) {
    return {
      exists: false,
      reason: "GCPSpotNotReady",
      message: `node ${name} is a NotReady GCP spot instance older than ${INITIALIZED_NODE_DELAY_MS / 1000} s (it comes back with new IPs and must register again)`,
    };
  }
  if (providerID.startsWith(DERIVED_PROVIDER_ID_PREFIX)) {
    return exists(
      "NoInstanceIdentity",
      `node ${name} has a providerID derived from its IP, naming no instance`,
    );
  }
  if (probe === undefined) return exists("NotProbed", `node ${name} was not checked with Talos`);
  if (!probe.ok) return exists("TalosUnavailable", `Talos did not answer for node ${name}: ${probe.error}`);
  const id = probe.identity;
  const same = sameInstance(node, id);
  if (same !== undefined)
    return exists("SameInstance", `Talos on ${id.nodeIP} describes node ${name}'s own instance: ${same}`);
  if (id.rawProviderID === "" && id.providerID.startsWith(DERIVED_PROVIDER_ID_PREFIX)) {
    return exists(
      "NoInstanceIdentity",
      `Talos on ${id.nodeIP} reports no instance identity to compare with node ${name}'s`,
    );
  }
  return {
    exists: false,
    reason: "InstanceReplaced",
    message: `node ${name}'s IP ${id.nodeIP} now answers for instance ${id.providerID}, not ${providerID}: the node's instance was replaced`,
  };
}

/**
 * Whether a Talos probe could change the decision about `node`: it is NotReady and passes every
 * rule that keeps a node without asking Talos.
 * @param now milliseconds since the epoch.
 */
export function wantsProbe(node: LifecycleNode, now: number): boolean {
  if (node.metadata.labels[EXCLUDE_LABEL] !== undefined || node.metadata.deletionTimestamp) return false;
  if (isReady(node)) return false;
  const e = existence(node, now, undefined);
  return e.exists && e.reason === "NotProbed";
}

/**
 * Decides what to do with one node, as upstream's MonitorNodes with the Talos InstanceExists:
 * excluded or terminating nodes are left alone; Ready nodes only lose the shutdown taint; a NotReady
 * node whose instance does not exist is deleted; else it is tainted when `facts.shutdown` is true, and
 * a shutdown taint it has is kept (upstream removes it only from Ready nodes).
 * Never deletes a Ready node, and never deletes on a Talos error.
 * @param now milliseconds since the epoch (ages are measured against creationTimestamp).
 * @example decideLifecycle(node, Date.now(), {}) // { action: "none", reason: "Ready", … }
 */
export function decideLifecycle(
  node: LifecycleNode,
  now: number,
  facts: LifecycleFacts = {},
): LifecycleDecision {
  const name = node.metadata.name;
  if (node.metadata.labels[EXCLUDE_LABEL] !== undefined) {
    return { action: "none", reason: "Excluded", message: `node ${name} has label ${EXCLUDE_LABEL}` };
  }
  if (node.metadata.deletionTimestamp) {
    return { action: "none", reason: "Terminating", message: `node ${name} is being deleted` };
  }
  const tainted = node.spec.taints.some(isShutdownTaint);
  if (isReady(node)) {
    return tainted
      ? { action: "removeShutdownTaint", reason: "Ready", message: `node ${name} is Ready` }
      : { action: "none", reason: "Ready", message: `node ${name} is Ready` };
  }
  const e = existence(node, now, facts.probe);
  if (!e.exists) return { action: "delete", reason: e.reason, message: e.message };
  if (facts.shutdown === true) {
    return tainted
      ? { action: "none", reason: "Shutdown", message: `node ${name} is shut down and tainted` }
      : { action: "addShutdownTaint", reason: "Shutdown", message: `node ${name} is shut down` };
  }
  // As upstream: a NotReady node's shutdown taint is left alone (another lifecycle controller, a
  // cloud's own CCM with a shutdown signal, may have set it); it goes when the node is Ready again.
  return { action: "none", reason: e.reason, message: e.message };
}

/**
 * The identity the machine at `nodeIP` claims: its providerID as the cloud-node controller would
 * write it now ({@link instanceFacts}, then the rules' overrides), next to the raw facts that do not
 * depend on the rules.
 * @param config the current cloud config (its rules may override ProviderID).
 * @param nodeName the Node's name (the hostname fallback rules see).
 * @param registry where the transformer metrics go (the process registry by default).
 */
export function instanceIdentity(
  config: Pick<CompiledConfig, "transformations">,
  nodeName: string,
  nodeIP: string,
  metadata: PlatformMetadata,
  systemInformation: SystemInformation | undefined,
  registry?: Registry,
): InstanceIdentity {
  const raw = { platformMetadata: metadata, addresses: [] };
  const facts = instanceFacts(systemInformation ? { ...raw, systemInformation } : raw, nodeIP, nodeName);
  const result = measuredTransform(config, facts, nodeName, registry);
  return {
    nodeIP,
    providerID: result.platformMetadata.providerId,
    rawProviderID: metadata.providerId,
    instanceID: metadata.instanceId,
    systemUUID: systemInformation?.uuid ?? "",
    hostname: metadata.hostname,
  };
}

/**
 * How long a probe result may be reused: a found identity for {@link PROBE_TTL_MS} (at least one
 * period), failures with exponential backoff so unreachable nodes cost little.
 * @param failures consecutive failed probes of the node, this one included.
 */
export function probeTtlMs(probe: InstanceProbe, failures: number, periodMs: number): number {
  if (probe.ok) return Math.max(periodMs, PROBE_TTL_MS);
  const backoff = PROBE_TTL_MS * 2 ** Math.max(0, Math.min(failures - 1, 10));
  return Math.max(periodMs, Math.min(PROBE_MAX_BACKOFF_MS, backoff));
}

// ---------------------------------------------------------------------------------------------
// Controller (I/O).

/** Dependencies of {@link LifecycleController}. */
export interface LifecycleControllerOptions {
  client: Pick<KubeApi, "get" | "patch" | "delete">;
  nodes: Pick<Informer<LeanNode>, "get" | "list">;
  events: Pick<EventRecorder, "record">;
  /** Without it the replaced-instance rule is off (no probes); the reference rules still apply. */
  talos: Pick<TalosClient, "firstAnswer" | "platformMetadata" | "systemInformation"> | undefined;
  config: { readonly current: CompiledConfig };
  registry: Registry;
  /** `--node-monitor-period`. */
  periodMs: number;
  /** `--concurrent-node-lifecycle-syncs`. */
  workers: number;
  /** Clock (ms since the epoch); tests inject one. */
  now?: () => number;
  /** Calls `fn` every `ms` until the returned stop function is called (default: setInterval). */
  every?: (fn: () => void, ms: number) => () => void;
}

/** {@link LifecycleControllerOptions.every} on the real timers. */
function everyInterval(fn: () => void, ms: number): () => void {
  const timer = setInterval(fn, ms);
  return () => clearInterval(timer);
}

interface ProbeEntry {
  probe: InstanceProbe;
  at: number;
  failures: number;
}

/** The cloud-node-lifecycle controller: a periodic scan feeding a work queue of node names. */
export class LifecycleController {
  readonly #opts: LifecycleControllerOptions;
  readonly #now: () => number;
  /** Last probe per node UID; pruned on every scan. */
  readonly #probes = new Map<string, ProbeEntry>();
  readonly #deletions: Counter;
  readonly #taintChanges: Counter;
  readonly #probeResults: Counter;
  #signal: AbortSignal | undefined;

  /** @throws {TypeError} on a non-positive period or worker count. */
  constructor(opts: LifecycleControllerOptions) {
    if (!(opts.periodMs > 0))
      throw new TypeError(`LifecycleController: periodMs must be positive, got ${opts.periodMs}`);
    if (!(opts.workers >= 1))
      throw new TypeError(`LifecycleController: workers must be at least 1, got ${opts.workers}`);
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#deletions = opts.registry.counter(
      "talosccm_lifecycle_node_deletions_total",
      "Nodes deleted by the cloud-node-lifecycle controller, by reason.",
      ["reason"],
    );
    this.#taintChanges = opts.registry.counter(
      "talosccm_lifecycle_shutdown_taint_changes_total",
      "Shutdown taints added or removed by the cloud-node-lifecycle controller.",
      ["action"],
    );
    this.#probeResults = opts.registry.counter(
      "talosccm_lifecycle_instance_probes_total",
      "Talos probes of NotReady nodes, by result (same, replaced, unknown, error).",
      ["result"],
    );
  }

  /**
   * Scans every `periodMs` and reconciles until `signal` aborts, then waits for the workers.
   * Failures of one node are logged and retried with backoff; they never stop the controller.
   */
  async run(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    const queue = new WorkQueue("cloud-node-lifecycle", {
      baseDelayMs: 1_000,
      maxDelayMs: PROBE_MAX_BACKOFF_MS,
      registry: this.#opts.registry,
    });
    const scan = () => {
      const nodes = this.#opts.nodes.list();
      log.v(4).info("Scanning nodes", { nodes: nodes.length });
      const uids = new Set<string>();
      for (const n of nodes) {
        uids.add(n.metadata.uid);
        queue.add(n.metadata.name);
      }
      for (const uid of this.#probes.keys()) if (!uids.has(uid)) this.#probes.delete(uid);
    };
    const stopScans = (this.#opts.every ?? everyInterval)(scan, this.#opts.periodMs);
    const stop = () => {
      stopScans();
      queue.shutDown();
    };
    if (signal.aborted) stop();
    else {
      signal.addEventListener("abort", stop, { once: true });
      scan();
    }
    await runWorkers(queue, this.#opts.workers, (name) => this.reconcile(name), log);
  }

  /**
   * Converges one node from the cache: probes Talos when that could matter, decides, acts.
   * @throws on API errors other than NotFound and lost races (the queue retries).
   */
  async reconcile(name: string): Promise<void> {
    const node = this.#opts.nodes.get(name);
    if (!node) return;
    const now = this.#now();
    const facts: LifecycleFacts = {};
    if (this.#opts.talos && wantsProbe(node, now)) facts.probe = await this.#probe(node, now);
    const decision = decideLifecycle(node, now, facts);
    switch (decision.action) {
      case "none":
        log.v(5).info("Nothing to do", { node: name, reason: decision.reason });
        return;
      case "removeShutdownTaint":
      case "addShutdownTaint":
        await this.#setShutdownTaint(name, decision);
        return;
      case "delete":
        await this.#delete(node, decision, facts);
        return;
    }
  }

  /** The node's probe, reused while fresh ({@link probeTtlMs}). */
  async #probe(node: LeanNode, now: number): Promise<InstanceProbe> {
    const uid = node.metadata.uid;
    const last = this.#probes.get(uid);
    if (last && now - last.at < probeTtlMs(last.probe, last.failures, this.#opts.periodMs)) return last.probe;
    const probe = await this.#ask(node);
    const failures = probe.ok ? 0 : (last?.failures ?? 0) + 1;
    this.#probes.set(uid, { probe, at: now, failures });
    let result = "error";
    if (probe.ok) {
      const e = existence(node, now, probe);
      result = e.exists ? (e.reason === "SameInstance" ? "same" : "unknown") : "replaced";
    }
    this.#probeResults.inc({ result });
    log.v(probe.ok ? 4 : 2).info("Checked NotReady node with Talos", {
      node: node.metadata.name,
      result,
      ...(probe.ok
        ? { nodeIP: probe.identity.nodeIP, instance: probe.identity.providerID }
        : { err: probe.error }),
    });
    return probe;
  }

  /** One Talos look-up of the machine on the node's IPs; every failure becomes a failed probe. */
  async #ask(node: LeanNode): Promise<InstanceProbe> {
    const talos = this.#opts.talos;
    if (!talos) return { ok: false, error: "no Talos API configured" };
    const config = this.#opts.config.current;
    const { ips } = nodeIPs(
      { annotations: node.metadata.annotations, addresses: node.status.addresses },
      config.global.preferIPv6,
    );
    const callOpts = {
      attempts: 1,
      timeoutMs: PROBE_TIMEOUT_MS,
      // A silent node's machine is likely off: its failed probes are expected, and counted apart.
      nodeStatusUnknown: statusUnknown(node),
      ...(this.#signal ? { signal: this.#signal } : {}),
    };
    try {
      const { nodeIP, value: metadata } = await talos.firstAnswer(
        ips,
        (ip, o) => talos.platformMetadata(ip, o),
        callOpts,
      );
      const sys = await talos.systemInformation(nodeIP, callOpts);
      const identity = instanceIdentity(
        config,
        node.metadata.name,
        nodeIP,
        metadata,
        sys,
        this.#opts.registry,
      );
      return { ok: true, identity };
    } catch (err) {
      return { ok: false, error: err instanceof Error ? err.message : String(err) };
    }
  }

  /**
   * Adds or removes the shutdown taint on a fresh copy of the node. Node taints have no merge key,
   * so any patch replaces the whole list; the patch carries the resourceVersion it was computed
   * from, which makes the API server refuse it (409) when another writer changed the node
   * meanwhile, instead of dropping that writer's taints. Conflicts re-read and retry.
   */
  async #setShutdownTaint(name: string, decision: LifecycleDecision): Promise<void> {
    const add = decision.action === "addShutdownTaint";
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    for (let attempt = 1; ; attempt++) {
      let fresh: V1Node;
      try {
        fresh = await this.#opts.client.get<V1Node>(path);
      } catch (err) {
        if (isNotFound(err)) return;
        throw err;
      }
      const taints = fresh.spec?.taints ?? [];
      if (taints.some(isShutdownTaint) === add) return;
      const next = add ? [...taints, { ...SHUTDOWN_TAINT }] : taints.filter((t) => !isShutdownTaint(t));
      try {
        await this.#opts.client.patch(
          path,
          { metadata: { resourceVersion: fresh.metadata?.resourceVersion }, spec: { taints: next } },
          PATCH.merge,
          { discardAnswer: true },
        );
      } catch (err) {
        if (isNotFound(err)) return;
        if (isConflict(err) && attempt < TAINT_PATCH_ATTEMPTS) continue;
        const action = add ? "add" : "remove";
        throw new Error(`Cannot ${action} the shutdown taint on node ${name}: ${(err as Error).message}`, {
          cause: err,
        });
      }
      this.#taintChanges.inc({ action: add ? "add" : "remove" });
      log.info(add ? "Added shutdown taint" : "Removed shutdown taint", {
        node: name,
        reason: decision.message,
      });
      return;
    }
  }

  /**
   * Deletes a node the cache says is gone: re-reads it, decides again on the fresh object (a node
   * that turned Ready meanwhile stays), and deletes with the fresh UID and resourceVersion as
   * preconditions so that any later change makes the API server refuse the deletion.
   */
  async #delete(cachedNode: LeanNode, cached: LifecycleDecision, facts: LifecycleFacts): Promise<void> {
    const name = cachedNode.metadata.name;
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    let raw: V1Node;
    try {
      raw = await this.#opts.client.get<V1Node>(path);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    const fresh: LifecycleNode = leanNode(raw);
    const systemUUID = raw.status?.nodeInfo?.systemUUID;
    if (systemUUID) fresh.systemUUID = systemUUID;
    const decision = decideLifecycle(fresh, this.#now(), facts);
    // Another UID is another Node object (re-registered): the evidence was about the old one.
    const sameObject = fresh.metadata.uid === cachedNode.metadata.uid;
    if (!sameObject || decision.action !== "delete" || decision.reason !== cached.reason) {
      log.info("Not deleting node: it changed since the cache was read", {
        node: name,
        was: cached.reason,
        now: sameObject ? decision.reason : "Recreated",
        detail: decision.message,
      });
      return;
    }
    const target = { kind: "Node", name, uid: fresh.metadata.uid };
    try {
      await this.#opts.client.delete(path, {
        body: {
          apiVersion: "v1",
          kind: "DeleteOptions",
          preconditions: { uid: fresh.metadata.uid, resourceVersion: fresh.metadata.resourceVersion },
        },
        discardAnswer: true,
      });
    } catch (err) {
      if (isNotFound(err)) return;
      if (isConflict(err)) {
        log.info("Not deleting node: it changed just before the deletion", {
          node: name,
          reason: decision.reason,
        });
        return;
      }
      void this.#opts.events.record(
        target,
        "Warning",
        "DeletingNodeFailed",
        "DeleteNode",
        `Failed deleting node ${name}: ${(err as Error).message}`,
      );
      throw new Error(`Cannot delete node ${name}: ${(err as Error).message}`, { cause: err });
    }
    this.#probes.delete(fresh.metadata.uid);
    this.#deletions.inc({ reason: decision.reason });
    log.info("Deleted node", {
      node: name,
      reason: decision.reason,
      detail: decision.message,
      providerID: fresh.spec.providerID ?? "",
    });
    void this.#opts.events.record(
      target,
      "Normal",
      "DeletingNode",
      "DeleteNode",
      `Deleted node ${name}: ${decision.message}`,
    );
  }
}

/**
 * Starts the cloud-node-lifecycle controller; resolves once `signal` aborts and the current
 * reconciles finished.
 */
export async function startLifecycle(ctx: ControllerContext, signal: AbortSignal): Promise<void> {
  const controller = new LifecycleController({
    client: ctx.client,
    nodes: ctx.nodes,
    events: ctx.events,
    talos: ctx.talos,
    config: ctx.config,
    registry: ctx.registry,
    periodMs: ctx.options.nodeController.monitorPeriodMs,
    workers: ctx.options.nodeController.concurrentLifecycleSyncs,
  });
  log.info("Monitoring nodes", {
    period: `${ctx.options.nodeController.monitorPeriodMs / 1000}s`,
    workers: ctx.options.nodeController.concurrentLifecycleSyncs,
    talos: ctx.talos !== undefined,
  });
  await controller.run(signal);
}
