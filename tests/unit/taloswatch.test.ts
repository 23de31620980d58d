// WatchSession (lib/taloswatch.ts) driven through its host interface, without a transport: what a list
// watch reports across a resubscribe, from its own record or from the one its handler keeps.

import { describe, expect, test } from "bun:test";
import type { GrpcStream } from "../../lib/grpc.ts";
import { EventType, type Resource, WatchResponse } from "../../lib/talos_pb.ts";
import { type TalosWatchHandler, type WatchHost, WatchSession } from "../../lib/taloswatch.ts";
import { decodeAddressStatus, type TalosAddressStatus, type TalosWatchEvent } from "../../lib/taloswire.ts";
import { encodeAddress, resourceMessage } from "../support/apid.ts";
import type { FakeAddress } from "../support/fixtures.ts";

function addr(id: string, address: string): FakeAddress {
  return {
    id,
    address,
    local: address.slice(0, address.indexOf("/")),
    linkName: "eth0",
    linkIndex: 2,
    scope: 0,
    flags: 0x80,
    priority: 0,
  };
}
const A = addr("eth0/10.0.0.5/24", "10.0.0.5/24");
const B = addr("eth0/10.0.0.6/24", "10.0.0.6/24");
const C = addr("eth0/10.0.0.7/24", "10.0.0.7/24");
const decoded = (a: FakeAddress) => decodeAddressStatus(a.id, encodeAddress(a).proto);

function resource(a: FakeAddress): Resource {
  return resourceMessage(
    { namespace: "network", type: "AddressStatuses.net.talos.dev", id: a.id, version: "1", phase: "running" },
    { protoSpec: encodeAddress(a).proto },
  );
}
/** One WatchResponse: `created` for each address, then BOOTSTRAPPED. */
function listing(...as: FakeAddress[]): Uint8Array {
  return WatchResponse.encode({
    event: [
      ...as.map((a) => ({ eventType: EventType.CREATED, resource: resource(a) })),
      { eventType: EventType.BOOTSTRAPPED },
    ],
  }).finish();
}

/** A host whose streams are opened and ended by the test. */
class FakeHost implements WatchHost {
  closed = false;
  opened = 0;
  async open(session: WatchSession): Promise<Uint8Array | undefined> {
    this.opened++;
    session.call = { listen: () => {}, cancel: () => {}, next: async () => undefined } as GrpcStream;
    return undefined;
  }
  leave(): void {}
  async failed(): Promise<void> {}
  retryDelay(): number {
    return 0;
  }
  drop(): void {}
  rejected(): void {}
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 1));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

describe("WatchSession", () => {
  test.each([
    ["its own record", false],
    ["the record its handler keeps", true],
  ])("a list watch reports what vanished while it resubscribed, from %s", async (_name, handlerKeeps) => {
    const host = new FakeHost();
    const events: Array<TalosWatchEvent<TalosAddressStatus>> = [];
    const record = new Map<string, TalosAddressStatus>();
    const handler: TalosWatchHandler<TalosAddressStatus> = {
      onEvent: (ev) => {
        events.push(ev);
        if (ev.type === "created" || ev.type === "updated") record.set(ev.id, ev.resource);
        else if (ev.type === "destroyed") record.delete(ev.id);
      },
      onEnd: () => {},
      ...(handlerKeeps ? { record } : {}),
    };
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, handler);
    session.start();
    await until(() => host.opened === 1, "the first subscribe");
    session.onMessage(listing(A, B));
    expect(events.map((e) => e.type)).toEqual(["created", "created", "bootstrapped"]);
    // The stream breaks; B goes meanwhile.
    session.onEnd(null);
    await until(() => host.opened === 2, "the resubscribe");
    events.length = 0;
    session.onMessage(listing(A));
    expect(events).toEqual([
      { type: "created", id: A.id, version: "1", resource: decoded(A) },
      { type: "destroyed", id: B.id, resource: decoded(B) },
      { type: "bootstrapped" },
    ]);
    expect([...record.keys()]).toEqual([A.id]);
    session.close();
  });

  test("a list watch whose handler keeps the record reports what vanished of anything the handler put there", async () => {
    // E.g. the watch cache refilling the record from a poll while the watch was down.
    const host = new FakeHost();
    const destroyed: string[] = [];
    const record = new Map<string, TalosAddressStatus>([[C.id, decoded(C)]]);
    const session = new WatchSession(host, "10.0.0.5", "addresses", undefined, {
      onEvent: (ev) => {
        if (ev.type === "created") record.set(ev.id, ev.resource);
        if (ev.type === "destroyed") {
          destroyed.push(ev.id);
          record.delete(ev.id);
        }
      },
      onEnd: () => {},
      record,
    });
    session.start();
    await until(() => host.opened === 1, "the first subscribe");
    session.onMessage(listing(A));
    expect(destroyed).toEqual([C.id]);
    expect([...record.keys()]).toEqual([A.id]);
    session.close();
  });
});
