// A fake Talos client for the watch cache (lib/taloswatchcache.ts): watches the test feeds event by
// event, one-off reads answered in microtasks from what the test set, every call recorded. Shared by
// tests/unit/node.test.ts and tests/unit/taloswatchcsr.test.ts.

import {
  type CallOptions,
  type TalosError,
  TalosNotFoundError,
  type TalosWatch,
  type TalosWatchEvent,
  type TalosWatchHandler,
} from "../../lib/talos.ts";
import type { TalosWatchClient } from "../../lib/taloswatchcache.ts";
import type { TalosLinkStatus, TalosNodeIPConfig } from "../../lib/taloswire.ts";
import type { AddressStatus, PlatformMetadata, SystemInformation } from "../../lib/types.ts";
import { platformMetadata } from "./fixtures.ts";

/** PlatformMetadata of a metal machine named node-1, with `over`. */
export function metadata(over: Partial<PlatformMetadata> = {}): PlatformMetadata {
  return platformMetadata({ platform: "metal", hostname: "node-1", ...over });
}

/** AddressStatus `addr` on `linkName` (index 2), permanent unless `flags` says otherwise. */
export function address(addr: string, linkName: string, flags = 0x80): AddressStatus {
  return {
    id: `${linkName}/${addr}`,
    address: addr,
    linkName,
    linkIndex: 2,
    family: addr.includes(":") ? "inet6" : "inet4",
    scope: 0,
    flags,
  };
}

/** A SystemInformation with characters a template must escape. */
export const SYSINFO: SystemInformation = {
  manufacturer: 'Acme & Sons <"quoted"> +1',
  productName: "Box",
  version: "",
  serialNumber: "SN1",
  uuid: "6f1c0000-0000-4000-8000-000000000001",
  wakeUpType: "",
  skuNumber: "",
};

type AnyEvent = TalosWatchEvent<unknown>;

export class FakeStream {
  /** Subscriptions open (a stopped watch closes its subscription). */
  readonly #handlers = new Set<TalosWatchHandler<unknown>>();
  /** Pushed while no subscription was open: delivered to the next one. */
  readonly #events: Array<AnyEvent | Error> = [];
  /** Sees every pushed event, as Talos' state would (what a Get answers). */
  constructor(readonly observe: (ev: AnyEvent | Error) => void = () => {}) {}
  get active(): number {
    return this.#handlers.size;
  }
  push(ev: AnyEvent | Error): void {
    this.observe(ev);
    if (this.#handlers.size === 0) this.#events.push(ev);
    else for (const h of [...this.#handlers]) this.#deliver(h, ev);
  }
  subscribe(handler: TalosWatchHandler<unknown>): TalosWatch {
    this.#handlers.add(handler);
    for (const ev of this.#events.splice(0)) if (this.#handlers.has(handler)) this.#deliver(handler, ev);
    return { close: () => this.#handlers.delete(handler) };
  }
  #deliver(h: TalosWatchHandler<unknown>, ev: AnyEvent | Error): void {
    if (!(ev instanceof Error)) {
      h.onEvent(ev);
      return;
    }
    this.#handlers.delete(h);
    h.onEnd(ev as TalosError);
  }
}

export class FakeTalos implements TalosWatchClient {
  readonly clusterName = "talos-cluster";
  readonly streams = new Map<string, FakeStream>();
  readonly calls: string[] = [];
  systemInfo: SystemInformation | undefined = SYSINFO;
  getFails: Error | undefined;
  pollMetadata = metadata({});
  /** PlatformMetadata per IP as its watch last delivered it (null: destroyed); else pollMetadata. */
  readonly metadataOn = new Map<string, PlatformMetadata | null>();
  pollAddresses: AddressStatus[] = [];
  /** The options of the last AddressStatus list. */
  addressesOpts: CallOptions | undefined;
  /** Whether each call said its node's status is unknown, as `<call> <ip> <true|false>`. */
  readonly statusOf: string[] = [];
  /** The handler of each watch, by `<ip>|<kind>`. */
  readonly handlers = new Map<string, TalosWatchHandler<unknown>>();
  stream(ip: string, kind: string): FakeStream {
    const k = `${ip}|${kind}`;
    let s = this.streams.get(k);
    if (!s) {
      s = new FakeStream((ev) => {
        if (kind !== "platformmetadata" || ev instanceof Error) return;
        if (ev.type === "created" || ev.type === "updated")
          this.metadataOn.set(ip, ev.resource as PlatformMetadata);
        else if (ev.type === "destroyed") this.metadataOn.set(ip, null);
      });
      this.streams.set(k, s);
    }
    return s;
  }
  subscribe = ((ip: string, kind: string, handler: TalosWatchHandler<unknown>) => {
    this.calls.push(`watch ${kind} ${ip}`);
    this.handlers.set(`${ip}|${kind}`, handler);
    return this.stream(ip, kind).subscribe(handler);
  }) as TalosWatchClient["subscribe"];
  platformMetadata = (async (ip: string, opts?: CallOptions) => {
    this.calls.push(`get platformmetadata ${ip}`);
    this.statusOf.push(`platformmetadata ${ip} ${opts?.nodeStatusUnknown === true}`);
    if (this.getFails) throw this.getFails;
    // Answers after the test's synchronous pushes, as a round trip would.
    await Promise.resolve();
    const m = this.metadataOn.get(ip);
    if (m === null)
      throw new TalosNotFoundError(`Cannot get PlatformMetadatas.talos.dev on node ${ip}: not found`);
    return m ?? this.pollMetadata;
  }) as TalosWatchClient["platformMetadata"];
  addresses = (async (ip: string, opts?: CallOptions) => {
    this.calls.push(`list addresses ${ip}`);
    this.statusOf.push(`addresses ${ip} ${opts?.nodeStatusUnknown === true}`);
    this.addressesOpts = opts;
    if (this.getFails) throw this.getFails;
    return this.pollAddresses;
  }) as TalosWatchClient["addresses"];
  systemInformation = (async (ip: string, opts?: CallOptions) => {
    this.calls.push(`get systeminformation ${ip}`);
    this.statusOf.push(`systeminformation ${ip} ${opts?.nodeStatusUnknown === true}`);
    return this.systemInfo;
  }) as TalosWatchClient["systemInformation"];
  /** The node name Talos reports per IP; node-1 elsewhere. */
  readonly nodenames = new Map<string, string>();
  nodenameFails: Error | undefined;
  nodename = (async (ip: string, opts?: CallOptions) => {
    this.calls.push(`get nodename ${ip}`);
    this.statusOf.push(`nodename ${ip} ${opts?.nodeStatusUnknown === true}`);
    if (this.nodenameFails) throw this.nodenameFails;
    return this.nodenames.get(ip) ?? "node-1";
  }) as TalosWatchClient["nodename"];
  /** LinkStatuses per IP (lo and eth0 elsewhere); with `linksFail`, the read fails. */
  readonly linksOn = new Map<string, TalosLinkStatus[]>();
  linksFail: Error | undefined;
  links = (async (ip: string) => {
    this.calls.push(`list links ${ip}`);
    await Promise.resolve();
    if (this.linksFail) throw this.linksFail;
    return this.linksOn.get(ip) ?? [link("lo", 1, 772), link("eth0", 2, 1)];
  }) as NonNullable<TalosWatchClient["links"]>;
  /** NodeIPConfig excludeSubnets per IP (none elsewhere). */
  readonly excludedOn = new Map<string, string[]>();
  nodeIPConfig = (async (ip: string): Promise<TalosNodeIPConfig> => {
    this.calls.push(`get nodeipconfig ${ip}`);
    await Promise.resolve();
    return { validSubnets: ["0.0.0.0/0"], excludeSubnets: this.excludedOn.get(ip) ?? [] };
  }) as NonNullable<TalosWatchClient["nodeIPConfig"]>;
  /** HostnameStatus per IP (node-1 elsewhere). */
  readonly hostnameOn = new Map<string, { hostname: string; domainname: string }>();
  hostname = (async (ip: string) => {
    this.calls.push(`get hostname ${ip}`);
    await Promise.resolve();
    const h = this.hostnameOn.get(ip) ?? { hostname: "node-1", domainname: "" };
    return { ...h, fqdn: h.domainname ? `${h.hostname}.${h.domainname}` : h.hostname };
  }) as NonNullable<TalosWatchClient["hostname"]>;
  version = (async () => {
    this.calls.push("version");
    return { tag: "v1.13.0", sha: "", arch: "amd64", platform: "metal" };
  }) as TalosWatchClient["version"];
  firstAnswer = (async (
    ips: readonly string[],
    fn: (ip: string, o: object) => Promise<unknown>,
    opts: CallOptions = {},
  ) => {
    let last: unknown;
    for (const ip of ips) {
      try {
        return { nodeIP: ip, value: await fn(ip, opts) };
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }) as TalosWatchClient["firstAnswer"];
}

/** Lets every pending promise chain run to completion: the fakes answer in microtasks, never on a timer. */
export const settle = () => new Promise((resolve) => setImmediate(resolve));

/** A LinkStatus: `kind` "" (a physical NIC) unless given. */
export function link(name: string, index: number, type: number, kind = ""): TalosLinkStatus {
  return { name, index, type, kind, flags: 0x1, linkState: true };
}
