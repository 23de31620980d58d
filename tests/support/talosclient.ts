// Helpers for tests of the project's Talos client against the fake apid (talos.test.ts) and the
// Talos simulator (talos-sim.test.ts): a watch consumed in the background, a call's typed failure.

import { type ResourceData, type TalosClient, TalosError, type TalosWatchEvent } from "../../lib/talos.ts";
import type { ResourceKind } from "../../lib/taloswire.ts";

/**
 * Watches `kind` on `node` (one resource with `id`) into `events` until `stop()`; `error` is what
 * ended the watch, `ended` whether it has.
 */
export function collect<K extends ResourceKind>(client: TalosClient, node: string, kind: K, id?: string) {
  const ac = new AbortController();
  const events: Array<TalosWatchEvent<ResourceData[K]>> = [];
  let error: unknown;
  let ended = false;
  const done = (async () => {
    try {
      for await (const ev of client.watch(node, kind, {
        signal: ac.signal,
        ...(id === undefined ? {} : { id }),
      })) {
        events.push(ev);
      }
    } catch (err) {
      error = err;
    } finally {
      ended = true;
    }
  })();
  return {
    events,
    types: () => events.map((e) => e.type),
    get error() {
      return error;
    },
    get ended() {
      return ended;
    },
    stop: async () => {
      ac.abort();
      await done;
    },
  };
}

/** The TalosError a call fails with; fails the test when the call succeeds or throws anything else. */
export async function failure(p: Promise<unknown>): Promise<TalosError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof TalosError) return err;
    throw err;
  }
  throw new Error("call succeeded");
}
