// An address watch whose machine floods `created` events (issue 40: 200,000 addresses grew one node's
// record by 63 MiB): WatchSession (lib/taloswatch.ts) cuts it at PEER_LIMITS.talos_addresses, counts
// the refusal and tells its handler to drop what it kept; the watch cache (lib/taloswatchcache.ts)
// then fails that machine's facts alone, with the error naming the bound, and recovers when the
// resubscribed watch answers within the bound. Driven through the host interface, without a transport.

import { describe, expect, test } from "bun:test";
import type { GrpcStream } from "../../lib/grpc.ts";
import { Registry } from "../../lib/metrics.ts";
import { PEER_LIMITS, peerRejections } from "../../lib/peerlimits.ts";
import { EventType, type Resource, WatchResponse } from "../../lib/talos_pb.ts";
import type { TalosLimitError } from "../../lib/talosbounds.ts";
import { type TalosWatchHandler, type WatchHost, WatchSession } from "../../lib/taloswatch.ts";
import {
  type TalosWatchCache as Cache,
  TalosWatchCache,
  type TalosWatchClient,
} from "../../lib/taloswatchcache.ts";
import type { TalosAddressStatus, TalosWatchEvent } from "../../lib/taloswire.ts";
import { encodeAddress, encodePlatformMetadata, resourceMessage } from "../support/apid.ts";
import { type FakeAddress, platformMetadata } from "../support/fixtures.ts";

const BOUND = PEER_LIMITS.talos_addresses.value;

/** Address `i` of a machine: 10.<machine>.x.y/16 on eth0. */
function addr(machine: number, i: number): FakeAddress {
  const a = `10.${machine}.${(i >> 8) & 255}.${i & 255}`;
  return {
    id: `eth0/${a}/16`,
    address: `${a}/16`,
    linkName: "eth0",
    linkIndex: 2,
    scope: 0,
    flags: 0x80,
    priority: 0,
  };
}
function resource(a: FakeAddress): Resource {
  return resourceMessage(
    { namespace: "network", type: "AddressStatuses.net.talos.dev", id: a.id, version: "1", phase: "running" },
    { protoSpec: encodeAddress(a).proto },
  );
}
/** One WatchResponse: `created` for each address, then BOOTSTRAPPED when asked. */
function created(as: readonly FakeAddress[], bootstrapped = false): Uint8Array {
  return WatchResponse.encode({
    event: [
      ...as.map((a) => ({ eventType: EventType.CREATED, resource: resource(a) })),
      ...(bootstrapped ? [{ eventType: EventType.BOOTSTRAPPED }] : []),
    ],
  }).finish();
}
const range = (machine: number, from: number, to: number) =>
  Array.from({ length: to - from }, (_, i) => addr(machine, from + i));

/** A host whose streams the test feeds; counts refusals as the Talos client does. */
class FakeHost implements WatchHost {
  closed = false;
  opened = 0;
  cancelled = 0;
  readonly delays: number[] = [];
  readonly reg = new Registry();
  readonly rejections = peerRejections(this.reg);
  async open(session: WatchSession): Promise<Uint8Array | undefined> {
    this.opened++;
    session.call = {
      listen: () => {},
      cancel: () => {
        this.cancelled++;
        // A cancelled stream ends, as grpc reports it.
        queueMicrotask(() => session.onEnd(null));
      },
      next: async () => undefined,
    } as unknown as GrpcStream;
    return undefined;
  }
  leave(): void {}
  async failed(): Promise<void> {}
  retryDelay(failures: number): number {
    this.delays.push(failures);
    return 0;
  }
  drop(): void {}
  rejected(_s: WatchSession, e: TalosLimitError): void {
    this.rejections.inc({ peer: "talos", limit: e.limit });
  }
  get refused(): number {
    return this.rejections.get({ peer: "talos", limit: "talos_addresses" });
  }
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 0));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

/** A handler keeping its record as the watch cache does. */
function recordingHandler() {
  const record = new Map<string, TalosAddressStatus>();
  const events: Array<TalosWatchEvent<TalosAddressStatus>> = [];
  const handler: TalosWatchHandler<TalosAddressStatus> = {
    onEvent: (ev) => {
      events.push(ev);
      if (ev.type === "created" || ev.type === "updated") record.set(ev.id, ev.resource);
      else if (ev.type === "destroyed") record.delete(ev.id);
      else if (ev.type === "errored" && ev.limit) record.clear();
    },
    onEnd: () => {},
    record,
  };
  return { record, events, handler };
}

describe("WatchSession and talos_addresses", () => {
  test.each([
    ["in its bootstrap", true],
    ["after its bootstrap", false],
  ])(
    "an address watch is cut at the bound %s: counted once, record dropped, resubscribed",
    async (_n, inBootstrap) => {
      const host = new FakeHost();
      const { record, events, handler } = recordingHandler();
      const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, handler);
      session.start();
      await until(() => host.opened === 1, "the subscribe");
      if (inBootstrap) {
        session.onMessage(created(range(0, 0, BOUND)));
      } else {
        session.onMessage(created(range(0, 0, 10), true));
        session.onMessage(created(range(0, 10, BOUND)));
      }
      // At the bound: every one kept, nothing refused.
      expect(record.size).toBe(BOUND);
      expect(host.refused).toBe(0);
      events.length = 0;
      // One more, then a flood in the same message: the watch stops at the first over the bound.
      session.onMessage(created(range(0, BOUND, BOUND + 5000)));
      expect(events.map((e) => e.type)).toEqual(["errored"]);
      const ev = events[0] as { error: string; limit?: string };
      expect(ev.limit).toBe("talos_addresses");
      expect(ev.error).toContain(`Talos reported ${BOUND + 1} addresses`);
      expect(ev.error).toContain(`over the bound of ${BOUND}`);
      expect(record.size).toBe(0);
      expect(host.refused).toBe(1);
      expect(host.cancelled).toBe(1);
      // What arrives before the stream ends is not delivered.
      session.onMessage(created(range(0, BOUND + 5000, BOUND + 5010)));
      expect(events.length).toBe(1);
      await until(() => host.opened === 2, "the resubscribe");
      // A sane answer again: kept, no further refusal.
      session.onMessage(created(range(0, 0, 3), true));
      expect(record.size).toBe(3);
      expect(events.at(-1)?.type).toBe("bootstrapped");
      expect(host.refused).toBe(1);
      session.close();
    },
  );

  test("a machine that floods after each bootstrap waits longer each time: opening a stream does not reset the backoff", async () => {
    const host = new FakeHost();
    const { handler } = recordingHandler();
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, handler);
    session.start();
    for (let round = 1; round <= 3; round++) {
      await until(() => host.opened === round, `subscribe ${round}`);
      session.onMessage(created(range(0, 0, 2), true));
      session.onMessage(created(range(0, 2, BOUND + 1)));
    }
    await until(() => host.opened === 4, "subscribe 4");
    expect(host.delays).toEqual([1, 2, 3]);
    expect(host.refused).toBe(3);
    session.close();
  });

  test("updates of addresses it holds do not count: only distinct ids do", async () => {
    const host = new FakeHost();
    const { record, handler } = recordingHandler();
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, handler);
    session.start();
    await until(() => host.opened === 1, "the subscribe");
    session.onMessage(created(range(0, 0, BOUND), true));
    for (let i = 0; i < 3; i++) session.onMessage(created(range(0, 0, BOUND)));
    expect(record.size).toBe(BOUND);
    expect(host.refused).toBe(0);
    session.close();
  });

  test("a list watch refusing a response for a string bound is cut and bootstraps again; a singleton watch goes on", async () => {
    const host = new FakeHost();
    const { record, events, handler } = recordingHandler();
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, handler);
    session.start();
    await until(() => host.opened === 1, "the subscribe");
    session.onMessage(created(range(0, 0, 3), true));
    const long = { ...addr(0, 9), linkName: "x".repeat(PEER_LIMITS.talos_address_length.value + 1) };
    session.onMessage(created([long]));
    expect(events.at(-1)).toMatchObject({ type: "errored", limit: "talos_address_length" });
    expect(record.size).toBe(0);
    expect(host.rejections.get({ peer: "talos", limit: "talos_address_length" })).toBe(1);
    await until(() => host.opened === 2, "the resubscribe");
    session.onMessage(created(range(0, 0, 2), true));
    expect(record.size).toBe(2);
    session.close();

    const metadata: string[] = [];
    const single = new WatchSession(host, "10.0.0.5", "platformmetadata", "platformmetadata", {
      onEvent: (ev) => metadata.push(ev.type === "errored" ? `errored ${ev.limit}` : ev.type),
      onEnd: () => {},
    });
    single.start();
    await until(() => host.opened === 3, "the metadata watch");
    const spec = (hostname: string) =>
      WatchResponse.encode({
        event: [
          {
            eventType: EventType.CREATED,
            resource: resourceMessage(
              {
                namespace: "runtime",
                type: "PlatformMetadatas.talos.dev",
                id: "platformmetadata",
                version: "1",
                phase: "running",
              },
              { protoSpec: encodePlatformMetadata(platformMetadata({ hostname })).proto },
            ),
          },
        ],
      }).finish();
    single.onMessage(spec("h".repeat(1 << 20)));
    single.onMessage(spec("node-1"));
    expect(metadata).toEqual(["errored talos_name_length", "created"]);
    expect(host.opened).toBe(3);
    single.close();
  });

  test("a watch without a record of its handler bounds its own", async () => {
    const host = new FakeHost();
    const events: string[] = [];
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, {
      onEvent: (ev) => events.push(ev.type),
      onEnd: () => {},
    });
    session.start();
    await until(() => host.opened === 1, "the subscribe");
    session.onMessage(created(range(0, 0, 5), true));
    session.onMessage(created(range(0, 5, BOUND + 1)));
    expect(events.at(-1)).toBe("errored");
    expect(host.refused).toBe(1);
    session.close();
  });
});

// ---------------------------------------------------------------------------------------------
// The watch cache over real WatchSessions: one hostile machine among honest ones.

/** A Talos client whose address watches are WatchSessions on one FakeHost, fed by the test. */
class SessionTalos implements TalosWatchClient {
  readonly host = new FakeHost();
  readonly sessions = new Map<string, WatchSession>();
  /** The node name Talos reports on each IP: node-<third octet>. */
  readonly nodenameOf = (ip: string) => `node-${ip.split(".")[2]}`;
  subscribe = ((ip: string, kind: string, handler: TalosWatchHandler<unknown>) => {
    if (kind !== "addresses") return { close: () => {} };
    const s = new WatchSession(
      this.host,
      ip,
      "addresses",
      undefined,
      handler as TalosWatchHandler<TalosAddressStatus>,
    );
    this.sessions.set(ip, s);
    s.start();
    return s;
  }) as TalosWatchClient["subscribe"];
  platformMetadata = (async (ip: string) =>
    platformMetadata({
      platform: "metal",
      hostname: this.nodenameOf(ip),
    })) as TalosWatchClient["platformMetadata"];
  addresses = (async () => []) as TalosWatchClient["addresses"];
  systemInformation = (async () => undefined) as TalosWatchClient["systemInformation"];
  nodename = (async (ip: string) => this.nodenameOf(ip)) as TalosWatchClient["nodename"];
  version = (async () => ({
    tag: "v1.13.0",
    sha: "",
    arch: "amd64",
    platform: "metal",
  })) as TalosWatchClient["version"];
  firstAnswer = (async (ips: readonly string[], fn: (ip: string, o: object) => Promise<unknown>) => ({
    nodeIP: ips[0] as string,
    value: await fn(ips[0] as string, {}),
  })) as TalosWatchClient["firstAnswer"];
}

const NEEDS = { systemInformation: false, talosVersion: false };

function cacheOf(talos: SessionTalos): Cache {
  return new TalosWatchCache({
    talos,
    onChange: () => {},
    refreshMs: 3_600_000,
    tickMs: 3_600_000,
    schedule: () => () => {},
  });
}

describe("TalosWatchCache and talos_addresses", () => {
  test("TalosWatchCache fails a flooding machine's facts alone, naming the bound; the others keep theirs; a sane watch recovers it", async () => {
    const talos = new SessionTalos();
    const facts = cacheOf(talos);
    const ips = [1, 2, 3].map((n) => `10.0.${n}.5`);
    for (const [i, ip] of ips.entries()) facts.track(`node-${i + 1}`, [ip]);
    await until(() => talos.sessions.size === 3, "three watches");
    for (const [i, ip] of ips.entries()) {
      (talos.sessions.get(ip) as WatchSession).onMessage(created([addr(i + 1, 5), addr(i + 1, 6)], true));
    }
    await until(() => ips.every((_, i) => facts.facts(`node-${i + 1}`, NEEDS).ready), "every node's facts");

    // node-2's Talos floods created events.
    const hostile = talos.sessions.get("10.0.2.5") as WatchSession;
    hostile.onMessage(created(range(2, 100, 100 + BOUND + 1000)));
    const state = facts.facts("node-2", NEEDS);
    expect(state.ready).toBe(false);
    if (state.ready) return;
    expect(state.limit).toBe("talos_addresses");
    expect(state.error).toContain(`over the bound of ${BOUND}`);
    expect(talos.host.refused).toBe(1);
    for (const n of [1, 3]) {
      const ok = facts.facts(`node-${n}`, NEEDS);
      expect(ok.ready).toBe(true);
      if (ok.ready)
        expect(ok.facts.addresses.map((a) => a.address)).toEqual([`10.${n}.0.5/16`, `10.${n}.0.6/16`]);
    }

    // The watch resubscribes; the flood again during its bootstrap: refused again, nothing kept.
    await until(() => talos.host.opened === 4, "the resubscribe");
    hostile.onMessage(created(range(2, 0, BOUND + 1)));
    expect(facts.facts("node-2", NEEDS).ready).toBe(false);
    expect(talos.host.refused).toBe(2);

    // Then a sane answer: the node recovers.
    await until(() => talos.host.opened === 5, "the second resubscribe");
    hostile.onMessage(created([addr(2, 5)], true));
    const back = facts.facts("node-2", NEEDS);
    expect(back.ready).toBe(true);
    if (back.ready) expect(back.facts.addresses.map((a) => a.address)).toEqual(["10.2.0.5/16"]);
    facts.close();
  });

  test("TalosWatchCache never keeps more than the bound from a watch that does not bound itself", async () => {
    // A client that hands every event through (no WatchSession): the cache's own guard.
    let handler: TalosWatchHandler<TalosAddressStatus> | undefined;
    const talos = new SessionTalos();
    talos.subscribe = ((_ip: string, kind: string, h: TalosWatchHandler<unknown>) => {
      if (kind === "addresses") handler = h as TalosWatchHandler<TalosAddressStatus>;
      return { close: () => {} };
    }) as TalosWatchClient["subscribe"];
    const facts = cacheOf(talos);
    facts.track("node-1", ["10.0.1.5"]);
    await until(() => handler !== undefined, "the watch");
    const h = handler as TalosWatchHandler<TalosAddressStatus>;
    const status = (a: FakeAddress): TalosAddressStatus => ({
      id: a.id,
      address: a.address,
      linkName: a.linkName,
      linkIndex: a.linkIndex,
      family: "inet4",
      scope: 0,
      flags: 0x80,
    });
    h.onEvent({ type: "created", id: addr(1, 0).id, version: "1", resource: status(addr(1, 0)) });
    h.onEvent({ type: "bootstrapped" });
    for (const a of range(1, 1, BOUND + 10))
      h.onEvent({ type: "created", id: a.id, version: "1", resource: status(a) });
    expect(h.record?.size).toBeLessThanOrEqual(BOUND);
    const state = facts.facts("node-1", NEEDS);
    expect(state.ready).toBe(false);
    if (!state.ready) expect(state.limit).toBe("talos_addresses");
    facts.close();
  });
});
