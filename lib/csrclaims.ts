// Which Nodes claim each DNS name and IP a kubelet serving certificate may name, kept up to date
// from Node events, so that node-csr-approval (lib/csrapprover.ts) checks a CSR against the few
// Nodes that share one of its SANs instead of every Node. Pure data structure.

import { type Claims, claims, type NodeInput } from "./csr.ts";
import { addName, type Names, namesOf, removeName } from "./nameindex.ts";
import { sameList } from "./samelist.ts";

/** Whether two versions of a Node claim the same: same name, addresses and provided node IP. */
function sameClaimInput(a: NodeInput, b: NodeInput): boolean {
  return (
    a.name === b.name &&
    a.providedNodeIP === b.providedNodeIP &&
    sameList(a.addresses, b.addresses, (x, y) => x.type === y.type && x.address === y.address)
  );
}

/**
 * Which Nodes claim each DNS name and IP (`claims()` of lib/csr.ts), kept up to date from Node
 * events, so that a CSR is checked against the few Nodes that share one of its SANs instead of
 * every Node: with a scan, approving N CSRs cost O(N²). Nothing is kept per Node beside the two
 * reverse maps: what a Node claimed is read again from the version of it the caller hands back
 * (the informer's previous copy), `claims()` being a pure function of it. A Node's claim of its own
 * name is not indexed either: whether a Node has that name is the Node cache's to say.
 */
export class NodeClaimIndex {
  /** Claimants by name or IP: one Node name, or several when Nodes share it (rare). */
  readonly #dns = new Map<string, Names>();
  readonly #ips = new Map<string, Names>();
  readonly #isNode: (name: string) => boolean;
  #generation = 0;

  /** @param isNode whether a Node of that name exists (the Node cache, which this index follows) */
  constructor(isNode: (name: string) => boolean) {
    this.#isNode = isNode;
  }

  /**
   * Counts the changes of any Node's claims: bumped by every `set()` that changes what a Node claims
   * (a Node added, or its name, addresses or provided node IP changed), every `delete()` and
   * `clear()`; a heartbeat that changes no claim leaves it. A caller that read `claimants()` notes it
   * before an await: unchanged after, the claimants it read are still the ones it would read now.
   */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Records what `node` claims in place of what `old` (the version of it recorded last, if any)
   * claimed. Most Node updates are status heartbeats that change no address: they cost a compare.
   */
  set(node: NodeInput, old?: NodeInput): void {
    if (old && sameClaimInput(old, node)) return;
    if (old) this.delete(old);
    this.#generation++;
    const c = claims(node, "other");
    for (const d of c.dns) if (d !== node.name) addName(this.#dns, d, node.name);
    for (const ip of c.ips) addName(this.#ips, ip, node.name);
  }

  /** Forgets what `node` (the version of it recorded last) claims. */
  delete(node: NodeInput): void {
    this.#generation++;
    const c = claims(node, "other");
    for (const d of c.dns) if (d !== node.name) removeName(this.#dns, d, node.name);
    for (const ip of c.ips) removeName(this.#ips, ip, node.name);
  }

  /** Forgets every Node. */
  clear(): void {
    this.#generation++;
    this.#dns.clear();
    this.#ips.clear();
  }

  /**
   * The Nodes other than `self` that claim any of `wanted`, sorted by name.
   * @param wanted names and IPs as `claims()` spells them, e.g. `requestedClaims(checked)`
   * @param self the requester's node, left out
   */
  claimants(wanted: Claims, self: string): string[] {
    const out = new Set<string>();
    for (const d of wanted.dns) {
      if (this.#isNode(d)) out.add(d);
      for (const n of namesOf(this.#dns.get(d))) out.add(n);
    }
    for (const ip of wanted.ips) for (const n of namesOf(this.#ips.get(ip))) out.add(n);
    out.delete(self);
    return [...out].sort();
  }
}
