// What Talos says of one machine, indexed once per CSR decision, so that a decision costs time
// linear in the request's SANs plus the machine's addresses and NodeIPConfig entries, not their
// product: the policy (lib/csr.ts) asked lib/sharedaddresses.ts' `entryHolding()` and
// `subnetEdgeOf()` once per IP SAN, each a scan of every entry read in every spelling (9 IP SANs
// against an 8 MiB address list and a 4 MiB NodeIPConfig: ~10 s of the one JavaScript thread). The
// answers are those two functions' answers, entry for entry: the same spellings are read
// (`prefixReadings()` of lib/ipspelling.ts) and the first entry in the list's order wins.

import { familyBits, formatPrefix, type IPAddress, lastAddress, prefixOf, unmapIPv4 } from "./cidr.ts";
import { prefixReadings } from "./ipspelling.ts";

/** The prefixes of one family and length: network address → the index of the first entry holding it. */
interface Length {
  family: 4 | 6;
  bits: number;
  nets: Map<bigint, number>;
}

/**
 * A list of CIDRs and addresses (NodeIPConfig `excludeSubnets`) indexed by family and prefix length:
 * a lookup costs one map probe per distinct length in the list (at most 33 + 129), whatever its size.
 */
export class EntryIndex {
  readonly #entries: readonly string[];
  readonly #lengths: Length[] = [];

  /** @param entries each a CIDR (host bits allowed) or a single IP; entries that are neither are skipped */
  constructor(entries: readonly string[]) {
    this.#entries = entries;
    const byKey = new Map<number, Length>();
    entries.forEach((text, i) => {
      for (const p of prefixReadings(text)) {
        const key = p.family * 256 + p.bits;
        let l = byKey.get(key);
        if (!l) {
          l = { family: p.family, bits: p.bits, nets: new Map() };
          byKey.set(key, l);
          this.#lengths.push(l);
        }
        if (!l.nets.has(p.addr)) l.nets.set(p.addr, i);
      }
    });
  }

  /**
   * The first entry (trimmed) that holds `ip`, as `entryHolding(ip, entries)` answers.
   * @example new EntryIndex(["10.244.0.0/16", "10.0.0.100"]).holding(parseIP("10.0.0.100")) // "10.0.0.100"
   */
  holding(ip: IPAddress): string | undefined {
    const a = unmapIPv4(ip);
    let first = -1;
    for (const l of this.#lengths) {
      if (l.family !== a.family || l.bits > familyBits(a.family)) continue;
      const i = l.nets.get(prefixOf(a, l.bits).addr);
      if (i !== undefined && (first < 0 || i < first)) first = i;
    }
    return first < 0 ? undefined : (this.#entries[first] as string).trim();
  }
}

/**
 * The network and broadcast addresses of a machine's IPv4 subnets (prefix length up to /30), each
 * with its subnet, as `subnetEdgeOf(ip, addresses)` answers.
 */
export class SubnetEdges {
  readonly #edges = new Map<bigint, string>();

  /** @param addresses the machine's addresses as `ip/prefix` (Talos AddressStatus `address`) */
  constructor(addresses: readonly string[]) {
    for (const text of addresses) {
      for (const p of prefixReadings(text, { single: false })) {
        if (p.family !== 4 || p.bits > 30) continue;
        for (const edge of [p.addr, lastAddress(p)]) {
          if (!this.#edges.has(edge)) this.#edges.set(edge, formatPrefix(p));
        }
      }
    }
  }

  /**
   * The subnet `ip` is the network or broadcast address of, e.g. `10.0.0.0/24`, or undefined.
   * @example new SubnetEdges(["10.0.0.5/24"]).of(parseIP("10.0.0.255")) // "10.0.0.0/24"
   */
  of(ip: IPAddress): string | undefined {
    const a = unmapIPv4(ip);
    return a.family === 4 ? this.#edges.get(a.value) : undefined;
  }
}
