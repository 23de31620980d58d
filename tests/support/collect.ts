// Consumes a Talos watch of the project's client in the background, for tests that look at the
// events as they arrive: the fake apid's (talos.test.ts) and the Talos simulator's (talos-sim.test.ts).

import type { ResourceData, TalosClient, TalosWatchEvent } from "../../lib/talos.ts";
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
