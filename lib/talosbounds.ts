// The per-machine bounds on what a Talos API answers (lib/peerlimits.ts PEER_LIMITS, peer "talos"),
// checked as each answer is decoded (lib/taloswire.ts) and as a list watch grows (lib/taloswatch.ts),
// before anything is kept or reaches the rules: string lengths of PlatformMetadata, SystemInformation,
// Nodename, HostnameStatus, Version and AddressStatus, the number of tags and of list entries, and how
// many AddressStatuses one machine may hold. An answer over a bound is refused whole, never truncated
// (a cut hostname would be a wrong fact kept for good): it throws TalosLimitError, which names the
// bound and which the Talos client counts in talosccm_peer_input_rejected_total{peer="talos",limit}.

import { overLimitMessage, type PeerLimitName, peerLimit } from "./peerlimits.ts";
import { TalosDecodeError } from "./taloserrors.ts";
import type { ControllerManagerConfig, PlatformMetadata, SystemInformation } from "./types.ts";

/**
 * An answer of a machine's Talos over a per-peer bound: refused for that machine only. A decode error
 * (not retried: the same answer comes back), whose `limit` names the bound.
 * @example new TalosLimitError("talos_name_length", 1_048_576, "PlatformMetadata hostname")
 */
export class TalosLimitError extends TalosDecodeError {
  /** The bound (a key of PEER_LIMITS). */
  readonly limit: PeerLimitName;
  /** What was counted: characters, entries or resources. */
  readonly got: number;
  /**
   * @param limit the bound exceeded
   * @param got the count that exceeded it
   * @param what the field or resource, for the message (e.g. "PlatformMetadata hostname")
   */
  constructor(limit: PeerLimitName, got: number, what: string) {
    super(`Cannot accept ${what} from Talos: ${overLimitMessage(limit, got)}`);
    // TalosDecodeError's name is a literal type: set, not overridden.
    Object.defineProperty(this, "name", { value: "TalosLimitError" });
    this.limit = limit;
    this.got = got;
  }
}

/**
 * Throws when `text` is longer than bound `limit` (in UTF-16 code units, what JavaScript keeps).
 * @throws {TalosLimitError}
 * @example checkLength("talos_name_length", "node-1", "hostname") // passes
 */
export function checkLength(limit: PeerLimitName, text: string, what: string): void {
  if (text.length > peerLimit(limit)) throw new TalosLimitError(limit, text.length, what);
}

/**
 * Throws when `list` has more entries than talos_list_entries or an entry longer than
 * talos_address_length (CIDRs and IPs).
 * @throws {TalosLimitError}
 */
export function checkCIDRList(list: readonly string[], what: string): void {
  if (list.length > peerLimit("talos_list_entries")) {
    throw new TalosLimitError("talos_list_entries", list.length, what);
  }
  for (const entry of list) checkLength("talos_address_length", entry, `an entry of ${what}`);
}

/** PlatformMetadata fields that are host or DNS names (talos_name_length). */
const METADATA_NAMES = ["hostname", "internalDNS", "externalDNS"] as const;
/** The other PlatformMetadata strings (talos_string_length). */
const METADATA_STRINGS = ["platform", "region", "zone", "instanceType", "instanceId", "providerId"] as const;

/**
 * PlatformMetadata tags as a null-prototype object (the peer chooses the keys: `__proto__` or
 * `constructor` must be data, never Object.prototype's members), at most talos_tags of them, each key
 * and value at most talos_string_length.
 * @throws {TalosLimitError}
 * @example boundTags({ env: "prod" }).env // "prod"
 */
export function boundTags(tags: Readonly<Record<string, string>>): Record<string, string> {
  const entries = Object.entries(tags);
  if (entries.length > peerLimit("talos_tags")) {
    throw new TalosLimitError("talos_tags", entries.length, "PlatformMetadata tags");
  }
  const out: Record<string, string> = Object.create(null);
  for (const [key, value] of entries) {
    checkLength("talos_string_length", key, "a PlatformMetadata tag key");
    checkLength("talos_string_length", value, `PlatformMetadata tag ${JSON.stringify(key.slice(0, 64))}`);
    out[key] = value;
  }
  return out;
}

/**
 * Checks a decoded PlatformMetadata against the bounds: hostname and DNS names at most
 * talos_name_length, other strings talos_string_length, tags {@link boundTags}.
 * @returns `m` with its tags as a null-prototype object
 * @throws {TalosLimitError}
 */
export function boundPlatformMetadata(m: PlatformMetadata): PlatformMetadata {
  for (const f of METADATA_NAMES) checkLength("talos_name_length", m[f], `PlatformMetadata ${f}`);
  for (const f of METADATA_STRINGS) checkLength("talos_string_length", m[f], `PlatformMetadata ${f}`);
  m.tags = boundTags(m.tags);
  return m;
}

/**
 * Checks each string of a SystemInformation against talos_string_length.
 * @returns `s`
 * @throws {TalosLimitError}
 */
export function boundSystemInformation(s: SystemInformation): SystemInformation {
  for (const [field, value] of Object.entries(s)) {
    checkLength("talos_string_length", value, `SystemInformation ${field}`);
  }
  return s;
}

/**
 * Checks the CIDR lists of a ControllerManagerConfig ({@link checkCIDRList}).
 * @returns `c`
 * @throws {TalosLimitError}
 */
export function boundControllerManagerConfig(c: ControllerManagerConfig): ControllerManagerConfig {
  checkCIDRList(c.podCIDRs, "ControllerManagerConfig podCIDRs");
  checkCIDRList(c.serviceCIDRs, "ControllerManagerConfig serviceCIDRs");
  return c;
}

/**
 * Throws when one machine's Talos holds more AddressStatuses than talos_addresses.
 * @param count the resources it reported (a List's, or a watch's record with the new one)
 * @throws {TalosLimitError}
 */
export function checkAddressCount(count: number): void {
  if (count > peerLimit("talos_addresses")) {
    throw new TalosLimitError("talos_addresses", count, "the AddressStatuses of one machine");
  }
}
