// The Talos facts node-csr-approval decides on (`TalosFacts`, lib/csr.ts), from what the cloud-node
// controller's watch cache (lib/taloswatchcache.ts) already holds of each machine: the address
// watch's records, its PlatformMetadata, and its name (Nodename) confirmed in the address watch's
// current epoch. What the watches do not carry is read once per epoch and kept in the node's record
// (`CsrExtras`, lib/taloswatchnode.ts): LinkStatuses (which links are shared), NodeIPConfig (what
// Talos excludes from node IPs) and, only for a CSR with DNS names besides the node's,
// HostnameStatus. So a CSR decided while the watches are healthy costs no Talos call. Where they
// cannot answer (the node not watched on the Node's IPs now, a watch down, another machine on the
// IP, a read failing), the approver asks Talos itself (lib/csrtalosfacts.ts), as it always did.
//
// How current the answer is, and why that is enough (README "node-csr-approval"):
// - addresses: the watch's own events, within moments of the change; a watch that breaks moves the
//   epoch, and nothing read before it counts again until Talos confirmed the node's name anew.
// - links: current while every address sits on a link read with the same index (a new link, an
//   address moved to another one, or a link made again all change the name or index): else read
//   again before the CSR is decided.
// - NodeIPConfig: read again after any address appeared or changed. What is left is an exclusion
//   added by configuration for an address the machine already holds and keeps: Talos then stops
//   giving it to the kubelet, whose Node addresses change, and facts are used only for the Node's
//   IPs they were watched on.
// - HostnameStatus: kept for the epoch. A hostname changed without a reboot restarts the kubelet,
//   whose Node then names the new hostname; a DNS SAN must be in the Node's status before Talos is
//   asked about it (lib/csr.ts `screen`).

import type { TalosFacts } from "./csr.ts";
import { talosDnsNames } from "./csrtalosfacts.ts";
import { addressesOnSharedLinks, EXTERNAL_LINK, type LinkFacts } from "./sharedaddresses.ts";
import type { CallOptions, TalosAddressStatus, TalosClient } from "./talos.ts";
import { CSR_READ_BITS, type CsrExtras, type LinkSeen, type NodeWatch } from "./taloswatchnode.ts";

/** The Talos calls that complete a node's CSR facts. */
export type CsrWatchClient = Pick<TalosClient, "links" | "nodeIPConfig" | "hostname">;

/** Deadline of one read; a failure sends the CSR to ask Talos itself, which reports it. */
const READ_TIMEOUT_MS = 5_000;

/** What the watches say to a CSR of a node. */
export type CsrFactsAnswer =
  /** Talos' facts as a direct read would give them, without a call. */
  | { state: "ready"; facts: TalosFacts }
  /** Reads are under way; the cache's change callback names the node when they end. */
  | { state: "wait"; why: string }
  /** The watches cannot answer now: ask Talos directly. */
  | { state: "ask"; why: string };

/** What a node's record lacks for a CSR's facts. */
export interface CsrNeeds {
  /** Nodename, read again in this epoch. */
  confirm: boolean;
  links: boolean;
  excluded: boolean;
  host: boolean;
}

/** The parts of {@link CsrNeeds} read by {@link WatchedCsrFacts} itself. */
type ExtraRead = keyof typeof CSR_READ_BITS;

/**
 * Whether every address of the machine sits on a link read with the same index, or on `external`
 * (no LinkStatus). A link Talos had no status for counts only when no address appeared since.
 */
export function linksCover(
  addresses: Iterable<TalosAddressStatus>,
  x: Pick<CsrExtras, "links" | "linksAt">,
  addedGeneration: number,
): boolean {
  if (!x.links) return false;
  for (const a of addresses) {
    if (a.linkName === EXTERNAL_LINK) continue;
    const link = x.links.get(a.linkName);
    if (link === undefined) return false;
    if (link === null ? x.linksAt !== addedGeneration : link.index !== a.linkIndex) return false;
  }
  return true;
}

/**
 * What the record of node `w` says to a CSR of the Node on `ips` (its node IPs now, preferred
 * first): the facts, what it lacks, or why it cannot answer. Pure.
 * @param withDNS the CSR has DNS names besides the node's (Talos' own names are needed)
 */
export function watchedCsrFacts(
  w: NodeWatch | undefined,
  ips: readonly string[],
  withDNS: boolean,
): { facts: TalosFacts } | { need: CsrNeeds; why: string } | { ask: string } {
  if (!w) return { ask: "cloud-node does not watch the node" };
  if (w.ips.join() !== ips.join())
    return { ask: "the node's watches follow other IPs than the Node has now" };
  if (w.down !== 0) return { ask: `the node's Talos watch is down (${w.lastError})` };
  if (w.gate !== undefined || !w.addressesKnown || !w.metadataKnown) {
    return { need: none(), why: `Talos on ${w.watchIP} to answer the node's watches` };
  }
  if (w.mismatch?.ip === w.watchIP) return { ask: `Talos on ${w.watchIP} is another node` };
  if (withDNS && !w.metadata) return { ask: "Talos has not published the machine's PlatformMetadata" };
  const x = w.csr?.epoch === w.epoch ? w.csr : undefined;
  const need: CsrNeeds = {
    confirm: w.confirmedIP !== w.watchIP || w.answeredIP !== w.watchIP || w.confirmedEpoch !== w.epoch,
    links: !x || !linksCover(w.addresses.values(), x, w.addedGeneration),
    excluded: !x?.excludedSubnets || x.excludedAt !== w.addedGeneration,
    host: withDNS && !x?.host,
  };
  if (need.confirm || need.links || need.excluded || need.host) {
    const what = Object.entries(need)
      .filter(([, v]) => v)
      .map(([k]) => k)
      .join(", ");
    return { need, why: `Talos on ${w.watchIP} to answer what the node's watches lack (${what})` };
  }
  const extras = x as CsrExtras;
  const statuses = [...w.addresses.values()];
  const links: LinkFacts[] = [];
  for (const [name, l] of extras.links as Map<string, LinkSeen | null>)
    if (l) links.push({ name, type: l.type, kind: l.kind });
  return {
    facts: {
      nodeIP: w.watchIP,
      // Talos said so on this IP in this epoch (confirmedEpoch above).
      nodename: w.name,
      addresses: statuses.map((a) => a.address),
      sharedAddresses: addressesOnSharedLinks(statuses, links),
      excludedSubnets: [...(extras.excludedSubnets as readonly string[])],
      dnsNames: withDNS && w.metadata && extras.host ? talosDnsNames(extras.host, w.metadata) : [],
    },
  };
}

function none(): CsrNeeds {
  return { confirm: false, links: false, excluded: false, host: false };
}

/** Options of {@link WatchedCsrFacts}. */
export interface WatchedCsrFactsOptions {
  talos: CsrWatchClient;
  /**
   * Starts a Nodename read of node `w` on its watched IP; false when none can start now (one failed
   * and waits for its retry).
   */
  confirm(w: NodeWatch): boolean;
  /** Node `w` changed (its reads ended): the cache's change callback. */
  changed(w: NodeWatch): void;
  /** Whether node `w` is still the one its cache tracks (not forgotten or restarted). */
  tracked(w: NodeWatch): boolean;
  /** Whether node `name`'s status is unknown: its failed calls count apart. */
  statusUnknown(name: string): boolean;
}

/**
 * Answers CSRs from the watch cache's records and completes them with the reads the watches do
 * not carry: eagerly once per epoch for links and NodeIPConfig (when the address watch delivered
 * its contents), on demand for what a CSR finds out of date.
 */
export class WatchedCsrFacts {
  readonly #opts: WatchedCsrFactsOptions;

  constructor(opts: WatchedCsrFactsOptions) {
    this.#opts = opts;
  }

  /** The answer to a CSR of node `w` whose Node has `ips` now; starts the reads it lacks. */
  answer(w: NodeWatch | undefined, ips: readonly string[], withDNS: boolean): CsrFactsAnswer {
    const r = watchedCsrFacts(w, ips, withDNS);
    if ("facts" in r) return { state: "ready", facts: r.facts };
    if ("ask" in r) return { state: "ask", why: r.ask };
    const node = w as NodeWatch;
    const x = this.#extras(node);
    if (x.failed !== undefined && x.reading === 0) {
      // Asked directly this time (which reports the failure); read again for the next CSR.
      const failed = x.failed;
      x.failed = undefined;
      this.#read(node, r.need);
      return { state: "ask", why: `a read for the node's CSR facts failed: ${failed}` };
    }
    if (r.need.confirm && !this.#opts.confirm(node)) {
      return { state: "ask", why: "Talos did not confirm the node's name in this watch epoch" };
    }
    this.#read(node, r.need);
    return { state: "wait", why: r.why };
  }

  /** The address watch of `w` delivered its contents: links and NodeIPConfig are read for the epoch. */
  synced(w: NodeWatch): void {
    const x = this.#extras(w);
    this.#read(w, {
      confirm: false,
      links: !linksCover(w.addresses.values(), x, w.addedGeneration),
      excluded: x.excludedSubnets === undefined || x.excludedAt !== w.addedGeneration,
      host: false,
    });
  }

  /** The node's extras for its current epoch (those of an earlier one are dropped). */
  #extras(w: NodeWatch): CsrExtras {
    if (w.csr?.epoch === w.epoch) return w.csr;
    w.csr = {
      epoch: w.epoch,
      links: undefined,
      linksAt: -1,
      excludedSubnets: undefined,
      excludedAt: -1,
      host: undefined,
      reading: 0,
      failed: undefined,
    };
    return w.csr;
  }

  /** Starts the reads `need` names that are not under way already. */
  #read(w: NodeWatch, need: CsrNeeds): void {
    if (need.links) this.#start(w, "links");
    if (need.excluded) this.#start(w, "excluded");
    if (need.host) this.#start(w, "host");
  }

  #start(w: NodeWatch, kind: ExtraRead): void {
    const x = this.#extras(w);
    if ((x.reading & CSR_READ_BITS[kind]) !== 0) return;
    x.reading |= CSR_READ_BITS[kind];
    const ip = w.watchIP;
    // What the read stands for: the record's state when it started.
    const generation = w.addedGeneration;
    const opts: CallOptions = {
      attempts: 1,
      timeoutMs: READ_TIMEOUT_MS,
      nodeStatusUnknown: this.#opts.statusUnknown(w.name),
    };
    const talos = this.#opts.talos;
    const read: Promise<(into: CsrExtras) => void> =
      kind === "links"
        ? talos.links(ip, opts).then((list) => (into) => {
            into.links = linksSeen(w.addresses.values(), list);
            into.linksAt = generation;
          })
        : kind === "excluded"
          ? talos.nodeIPConfig(ip, opts).then(({ excludeSubnets }) => (into) => {
              into.excludedSubnets = excludeSubnets;
              into.excludedAt = generation;
            })
          : talos.hostname(ip, opts).then(({ hostname, fqdn }) => (into) => {
              into.host = { hostname, fqdn };
            });
    read
      .then(
        (apply) => {
          // An answer from before the epoch moved or the node restarted belongs to no record.
          if (x === w.csr && x.epoch === w.epoch && w.watchIP === ip) apply(x);
        },
        (err: unknown) => {
          x.failed = (err as Error).message;
        },
      )
      .finally(() => {
        x.reading &= ~CSR_READ_BITS[kind];
        if (this.#opts.tracked(w)) this.#opts.changed(w);
      });
  }
}

/**
 * The links the addresses sit on, by name, from a LinkStatus list: only those (a node's veths and
 * other links without addresses are not kept); a name the list lacks is null.
 */
function linksSeen(
  addresses: Iterable<TalosAddressStatus>,
  list: readonly { name: string; index: number; type: number; kind: string }[],
): Map<string, LinkSeen | null> {
  const wanted = new Set<string>();
  for (const a of addresses) if (a.linkName !== EXTERNAL_LINK) wanted.add(a.linkName);
  const out = new Map<string, LinkSeen | null>();
  for (const l of list)
    if (wanted.has(l.name)) out.set(l.name, { index: l.index, type: l.type, kind: l.kind });
  for (const name of wanted) if (!out.has(name)) out.set(name, null);
  return out;
}
