// The hostile peers of the blast-radius benchmark (`npm run bench -- --hostile <kind>`, issue 40):
// one of the N nodes, with what a compromised node holds — its kubelet's credentials and its
// machine's Talos answers (the fake apid here plays its Talos). Each kind is a {@link HostilePeer}
// that registers its Node when the CCM leads, before the honest kubelets, and keeps up its activity
// until the end of the run:
//   - address-flood: its AddressStatus watch gets FLOOD_PER_SECOND new addresses a second while one
//     is open (private IPv4, so that the Node's addresses stay as they were), far past any bound;
//   - flap: a public address on its eth0 appears and disappears FLAP_PER_SECOND times a second;
//   - csr-max: its machine reports the most addresses and NodeIPConfig subnets the CCM accepts
//     (PEER_LIMITS), and once a second its kubelet writes all of them into its Node's status (the
//     most addresses a Node may list; the CCM's policy looks at Talos only for IPs the Node lists)
//     and files a CSR, alternately as many IP SANs as fit in the largest request the CCM reads
//     (16 KiB) and exactly the SAN bound, so that each decision takes the longest path;
//   - big-node: its Node has BIG_NODE_LABELS labels (~1 MiB with its managed fields) and it
//     heartbeats its status every second, from a Worker thread (its answers are ~1 MiB);
//   - api-load: a control, not a peer of the CCM: an object as big as the big Node (a ConfigMap with
//     its labels), patched as often, which the CCM never reads: the API server's and etcd's share of
//     big-node's cost, with node N-1 a plain kubelet;
//   - none: a plain kubelet at the same place and moment, for the clean run.
// The pure parts (the specs, labels and addresses it sends) are exported for the unit tests.

import { PATCH } from "../../lib/kubeapi.ts";
import type { KubeConnection } from "../../lib/kubeconfig.ts";
import { PEER_LIMITS } from "../../lib/peerlimits.ts";
import { MAX_REQUEST_BYTES } from "../../lib/x509pkcs10.ts";
import type { FakeApid } from "./apid.ts";
import type { HeartbeatStart } from "./bench-heartbeat-worker.ts";
import type { HostileKind } from "./bench-hostile.ts";
import type { TestCluster } from "./cluster.ts";
import type { FakeAddress, FakeNodeSpec } from "./fixtures.ts";
import { SimulatedKubelet } from "./kubelet.ts";
import { createCSR } from "./pki.ts";

/** New addresses a second on the flooding machine's watch (x the run's ~60 s: ~100x the bound). */
export const FLOOD_PER_SECOND = 2000;
/**
 * Flood addresses the fake apid keeps stored (the newest; twice the bound): a watch the CCM opens
 * again gets these, still over the bound, and the bench process' memory and CPU stay bounded.
 */
export const FLOOD_KEEP = 2 * PEER_LIMITS.talos_addresses.value;
/** Appearances and disappearances a second of the flapping address. */
export const FLAP_PER_SECOND = 40;
/** CSRs the csr-max node files a second. */
export const CSR_PER_SECOND = 1;
/** Labels of the big Node (the issue's ~1 MiB Node). */
export const BIG_NODE_LABELS = 5000;
/** The api-load control's ConfigMap. */
export const API_LOAD_CONFIGMAP = "bench-api-load";
/** The big Node's heartbeat period. */
export const BIG_NODE_HEARTBEAT_MS = 1000;

/** The flapping address (198.19.255.7, of the same range as the latency samples' but beyond them). */
export const FLAP_IP = "198.19.255.7";

/** IPv4 `i` of 198.18.0.0/15 (RFC 2544 benchmarking; public to Go's IsPrivate, so an ExternalIP). */
export function benchIPv4(i: number): string {
  if (!(Number.isInteger(i) && i >= 0 && i < 2 ** 17))
    throw new Error(`Cannot make bench IP ${i}: out of range`);
  return `198.${18 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
}

/** An address of a machine's eth0 as Talos reports it (link index 2, as the generated nodes have it). */
export function eth0Address(ip: string, permanent = true): FakeAddress {
  return {
    id: `eth0/${ip}/32`,
    address: `${ip}/32`,
    local: ip,
    linkName: "eth0",
    linkIndex: 2,
    scope: 0,
    flags: permanent ? 0x80 : 0,
    priority: 0,
  };
}

/**
 * The `i`th address of a flood: 172.16.0.0/12 (private: not an ExternalIP, so the Node's addresses
 * do not change and every event costs the CCM only what it keeps and decides).
 * @example floodAddress(1).address // "172.16.0.1/32"
 */
export function floodAddress(i: number): FakeAddress {
  if (!(Number.isInteger(i) && i >= 0 && i < 2 ** 20))
    throw new Error(`Cannot make flood address ${i}: out of range`);
  return eth0Address(`172.${16 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, false);
}

/**
 * The hostile machine's spec for `kind`: for csr-max, the most the CCM accepts from one machine —
 * PEER_LIMITS.talos_addresses addresses in all (10.200.0.0/16 on eth0 added to its own) and a
 * NodeIPConfig with PEER_LIMITS.talos_list_entries subnets in each list; otherwise unchanged.
 */
export function hostileSpec(kind: HostileKind, spec: FakeNodeSpec): FakeNodeSpec {
  if (kind !== "csr-max") return spec;
  const more = Math.max(0, PEER_LIMITS.talos_addresses.value - spec.addresses.length);
  const entries = PEER_LIMITS.talos_list_entries.value;
  const subnets = (tag: string) =>
    Array.from({ length: entries }, (_, i) => `fd${tag}:${i.toString(16)}::/64`);
  return {
    ...spec,
    addresses: [
      ...spec.addresses,
      ...Array.from({ length: more }, (_, i) => eth0Address(`10.200.${i >> 8}.${i & 255}`)),
    ],
    nodeIPConfig: { validSubnets: subnets("98"), excludeSubnets: subnets("99") },
  };
}

/**
 * The big Node's labels: `count` distinct keys of 66 characters with 63-character values (the most
 * Kubernetes allows), ~1 MiB for 5,000 with the managed fields the API server adds.
 */
export function bigNodeLabels(count: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < count; i++) {
    const n = String(i).padStart(5, "0");
    out[`hostile-bench.example.com/label-${n}-${"x".repeat(28)}`] = `v${n}`.padEnd(63, "v");
  }
  return out;
}

/** What each peer needs: the cluster, the fake apid, its machine and its kubelet identity. */
export interface PeerContext {
  cluster: TestCluster;
  apid: FakeApid;
  /** Its machine, as {@link hostileSpec} made it (served by `apid`). */
  spec: FakeNodeSpec;
  connection: KubeConnection;
}

/** One hostile peer of a run. */
export interface HostilePeer {
  readonly kind: HostileKind;
  /** Work made before the clock starts (its CSRs, with csr-max). */
  prepare(): Promise<void>;
  /** Registers its Node and starts its activity. */
  start(): Promise<void>;
  /** Stops its activity (its Node stays). */
  stop(): void;
  /** What it sent so far: addresses, flaps, CSRs or heartbeats. */
  readonly actions: number;
  /** Errors its activity met (e.g. a CSR the API server refused), counted, the first kept. */
  readonly errors: { count: number; first?: string };
  /** One line saying what it does, for the run's notes. */
  describe(): string;
  /** The names of what it made: its Node and its CSRs (to tell the Events about it from the others'). */
  readonly names: ReadonlySet<string>;
}

/** The peer of `kind`. */
export function createPeer(kind: HostileKind, ctx: PeerContext): HostilePeer {
  return new Peer(kind, ctx);
}

class Peer implements HostilePeer {
  actions = 0;
  readonly errors: { count: number; first?: string } = { count: 0 };
  #timers: ReturnType<typeof setInterval>[] = [];
  #kubelet?: SimulatedKubelet;
  #csrs: string[] = [];
  #csrSans: number[] = [];
  /** csr-max: the status addresses its kubelet writes before each CSR. */
  #statusAddresses: { type: string; address: string }[] = [];
  #nodeBytes = 0;
  readonly names = new Set<string>();

  constructor(
    readonly kind: HostileKind,
    readonly ctx: PeerContext,
  ) {}

  async prepare(): Promise<void> {
    if (this.kind !== "csr-max") return;
    const { spec } = this.ctx;
    const own = spec.addresses
      .filter((a) => a.linkName !== "lo")
      .map((a) => a.address.split("/")[0] as string);
    const fit = await maxFittingCsr(spec.name, own);
    const bound = await createCSR({
      cn: `system:node:${spec.name}`,
      o: ["system:nodes"],
      dns: [spec.name],
      ips: own.slice(0, PEER_LIMITS.csr_sans.value - 1),
    });
    this.#csrs = [fit.csr, bound.csr];
    this.#statusAddresses = csrMaxStatusAddresses(spec.name, own);
    this.#csrSans = [fit.sans, PEER_LIMITS.csr_sans.value];
  }

  async start(): Promise<void> {
    const { cluster, spec, connection } = this.ctx;
    const big = this.kind === "big-node";
    const labels = big ? bigNodeLabels(BIG_NODE_LABELS) : {};
    this.names.add(spec.name);
    this.#kubelet = await SimulatedKubelet.register(cluster, {
      name: spec.name,
      ips: spec.nodeIPs,
      heartbeatMs: 0,
      statusOnCreate: true,
      connection,
      labels,
      heartbeatWithoutAddresses: true,
    });
    if (big) this.#nodeBytes = JSON.stringify(await this.#kubelet.node()).length;
    if (this.kind === "address-flood") this.#every(20, () => this.#flood());
    else if (this.kind === "flap") this.#every(1000 / FLAP_PER_SECOND, () => this.#flap());
    else if (this.kind === "csr-max") this.#every(1000 / CSR_PER_SECOND, () => this.#fileCsr());
    else if (big) this.#heartbeatInWorker();
    else if (this.kind === "api-load") await this.#apiLoad();
  }

  stop(): void {
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
    this.#worker?.terminate();
    this.#worker = undefined;
  }

  describe(): string {
    const name = this.ctx.spec.name;
    switch (this.kind) {
      case "none":
        return `no hostile peer: ${name} is a plain kubelet registering when a hostile one would`;
      case "address-flood":
        return (
          `${name}'s Talos address watch got ${this.actions} new addresses (${FLOOD_PER_SECOND}/s while one ` +
          `was open; the newest ${FLOOD_KEEP} kept for a new watch's listing)`
        );
      case "flap":
        return `${name}'s public address ${FLAP_IP} appeared or disappeared ${this.actions} times (${FLAP_PER_SECOND}/s)`;
      case "csr-max":
        return (
          `${name} wrote ${this.#statusAddresses.length} status addresses and filed a CSR ${this.actions} times ` +
          `(${CSR_PER_SECOND}/s), alternately ${this.#csrSans.join(" and ")} SANs ` +
          `(${this.#csrs.map((c) => c.length).join(" and ")} bytes of PEM), its machine reporting ` +
          `${this.ctx.spec.addresses.length} addresses and ${PEER_LIMITS.talos_list_entries.value} subnets per NodeIPConfig list`
        );
      case "big-node":
        return (
          `${name}: ${BIG_NODE_LABELS} labels, the Node ${(this.#nodeBytes / 1024).toFixed(0)} KiB of JSON as read ` +
          `(managed fields included), ${this.actions} status heartbeats (every ${BIG_NODE_HEARTBEAT_MS} ms)`
        );
      case "api-load":
        return (
          `control, not a peer of the CCM: ConfigMap default/${API_LOAD_CONFIGMAP} with ${BIG_NODE_LABELS} labels, ` +
          `${(this.#nodeBytes / 1024).toFixed(0)} KiB of JSON, patched ${this.actions} times (every ` +
          `${BIG_NODE_HEARTBEAT_MS} ms); ${name} is a plain kubelet`
        );
    }
  }

  /** Runs `fn` every `ms`; a failure is counted, never thrown. */
  #every(ms: number, fn: () => void | Promise<void>): void {
    const run = () => {
      try {
        const r = fn();
        if (r) r.catch((err: unknown) => this.#failed(err));
      } catch (err) {
        this.#failed(err);
      }
    };
    this.#timers.push(setInterval(run, ms));
  }

  #failed(err: unknown): void {
    this.errors.count++;
    this.errors.first ??= (err as Error).message?.slice(0, 300) ?? String(err);
  }

  /**
   * Catches up to FLOOD_PER_SECOND of flooding time (timers lag under load), at most 1 s' worth a
   * tick. Once the machine holds a listing over the bound (FLOOD_KEEP), its clock runs only while a
   * watch of its addresses is open: addresses no watch receives cost the CCM nothing, and making them
   * cost the bench process, which times the honest nodes on the same cores, ~2 s of CPU a run.
   */
  #flood(): void {
    const ip = this.ctx.spec.nodeIPs[0] as string;
    const now = performance.now();
    const since = now - (this.#floodTick ?? now);
    this.#floodTick = now;
    if (this.actions < FLOOD_KEEP || this.ctx.apid.watchers(ip, "addresses") > 0) this.#floodMs += since;
    const due = Math.floor((this.#floodMs / 1000) * FLOOD_PER_SECOND);
    const n = Math.min(due - this.actions, FLOOD_PER_SECOND);
    if (n <= 0) return;
    const batch = Array.from({ length: n }, (_, k) => floodAddress(this.actions + k));
    this.ctx.apid.addAddresses(ip, batch, FLOOD_KEEP);
    this.actions += n;
  }
  #floodTick: number | undefined;
  #floodMs = 0;

  #flap(): void {
    const ip = this.ctx.spec.nodeIPs[0] as string;
    const on = this.actions % 2 === 0;
    const base = this.ctx.spec.addresses;
    this.ctx.apid.updateNode(ip, { addresses: on ? [...base, eth0Address(FLAP_IP)] : base });
    this.actions++;
  }

  async #fileCsr(): Promise<void> {
    const request = this.#csrs[this.actions % this.#csrs.length] as string;
    this.actions++;
    const kubelet = this.#kubelet;
    if (!kubelet) return;
    // A merge patch replaces the list whole (a strategic one merges by type, which repeats here).
    await kubelet.client.patch(
      `/api/v1/nodes/${kubelet.name}/status`,
      { status: { addresses: this.#statusAddresses } },
      PATCH.merge,
    );
    const made = await kubelet.submitServingCSR({ request });
    if (made?.metadata?.name) this.names.add(made.metadata.name);
  }

  /**
   * big-node: the status heartbeats in a Worker thread (tests/support/bench-heartbeat-worker.ts), so
   * that their ~1 MiB answers cost the thread that times the honest nodes nothing.
   */
  #heartbeatInWorker(): void {
    const kubelet = this.#kubelet as SimulatedKubelet;
    this.#beatInWorker({
      connection: this.ctx.connection,
      path: `/api/v1/nodes/${kubelet.name}/status`,
      periodMs: BIG_NODE_HEARTBEAT_MS,
      patch: { status: kubelet.heartbeatStatus() },
    });
  }

  /**
   * api-load (the control): a ConfigMap as big as the big Node (its 5,000 labels), patched as often,
   * which the CCM never reads: what big-node costs the API server and etcd, without the CCM's part.
   */
  async #apiLoad(): Promise<void> {
    const { cluster } = this.ctx;
    const path = "/api/v1/namespaces/default/configmaps";
    const made = await cluster.adminClient.create<unknown>(path, {
      metadata: { name: API_LOAD_CONFIGMAP, labels: bigNodeLabels(BIG_NODE_LABELS) },
      data: { beat: "" },
    });
    this.#nodeBytes = JSON.stringify(made).length;
    this.#beatInWorker({
      connection: cluster.admin,
      path: `${path}/${API_LOAD_CONFIGMAP}`,
      periodMs: BIG_NODE_HEARTBEAT_MS,
      patch: { data: {} },
    });
  }

  #beatInWorker(start: HeartbeatStart): void {
    const worker = new Worker(new URL("./bench-heartbeat-worker.ts", import.meta.url));
    worker.onmessage = (ev: MessageEvent<string>) => {
      if (ev.data === "beat") this.actions++;
      else this.#failed(new Error(ev.data));
    };
    worker.postMessage(start);
    this.#worker = worker;
  }
  #worker: Worker | undefined;
}

/**
 * The status addresses the csr-max kubelet writes: each of its machine's IPs as an InternalIP, then
 * its Hostname, at most PEER_LIMITS.node_addresses in all.
 */
export function csrMaxStatusAddresses(
  name: string,
  ips: readonly string[],
): { type: string; address: string }[] {
  const max = PEER_LIMITS.node_addresses.value - 1;
  return [
    ...ips.slice(0, max).map((address) => ({ type: "InternalIP", address })),
    { type: "Hostname", address: name },
  ];
}

/**
 * A CSR of `name` with its DNS name and as many IP SANs as fit in MAX_REQUEST_BYTES of PEM: `own`
 * first (its machine's addresses), then 10.201.0.0/16. Found by growing an estimate and trimming.
 */
export async function maxFittingCsr(
  name: string,
  own: readonly string[],
): Promise<{ csr: string; sans: number }> {
  const ips = (n: number) =>
    Array.from({ length: n }, (_, i) => own[i] ?? `10.201.${(i >> 8) & 255}.${i & 255}`);
  const make = async (n: number) =>
    (await createCSR({ cn: `system:node:${name}`, o: ["system:nodes"], dns: [name], ips: ips(n) })).csr;
  const small = (await make(100)).length;
  const large = (await make(400)).length;
  const perSan = (large - small) / 300;
  let n = Math.floor(400 + (MAX_REQUEST_BYTES - large) / perSan);
  let csr = await make(n);
  while (csr.length > MAX_REQUEST_BYTES && n > 0) {
    n -= Math.max(1, Math.ceil((csr.length - MAX_REQUEST_BYTES) / perSan));
    csr = await make(n);
  }
  return { csr, sans: n + 1 };
}
