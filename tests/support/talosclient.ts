// Helpers for tests of the project's Talos client against the fake apid (talos.test.ts) and the
// Talos simulator (talos-sim.test.ts): a watch collecting its events, a call's typed failure.

import { type ResourceData, type TalosClient, TalosError, type TalosWatchEvent } from "../../lib/talos.ts";
import type { ResourceKind } from "../../lib/taloswire.ts";

/**
 * Watches `kind` on `node` (one resource with `id`) with `subscribe`, the push API the CCM uses,
 * into `events` until `stop()`; `error` is what ended the watch (not a closed client), `ended`
 * whether it has ended.
 */
export function collect<K extends ResourceKind>(client: TalosClient, node: string, kind: K, id?: string) {
  const events: Array<TalosWatchEvent<ResourceData[K]>> = [];
  let error: unknown;
  let ended = false;
  /** A broken promise of the push API (an event after the end, a second end), thrown by stop(). */
  let broken: string | undefined;
  const watch = client.subscribe(
    node,
    kind,
    {
      onEvent: (ev) => {
        if (ended) broken ??= `event after the end of the watch: ${ev.type}`;
        events.push(ev);
      },
      onEnd: (err) => {
        if (ended) broken ??= "the watch ended twice";
        ended = true;
        if (err.code !== "closed") error = err;
      },
    },
    id === undefined ? {} : { id },
  );
  return {
    events,
    types: () => events.map((e) => e.type),
    get error() {
      return error;
    },
    get ended() {
      return ended;
    },
    /** Closes the watch. @throws when the watch broke the push API's promises. */
    stop: async () => {
      watch.close();
      if (broken) throw new Error(broken);
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
