import { describe, expect, test } from "bun:test";
import type { KubeApi, WatchEvent } from "../../lib/kubeapi.ts";
import { Informer } from "../../lib/kubecache.ts";
import type { Logger } from "../../lib/log.ts";
import { Registry } from "../../lib/metrics.ts";

interface Obj {
  metadata: { name: string; resourceVersion?: string; v?: string };
}

/** An API with one object listed and `events` then delivered by the watch, which then waits for the abort. */
function fakeApi(events: Array<WatchEvent<unknown>>): KubeApi {
  return {
    get: async () => ({ metadata: { resourceVersion: "1" }, items: [{ metadata: { name: "a", v: "1" } }] }),
    watch: async function* (_path: string, opts: { signal?: AbortSignal }) {
      yield* events;
      await new Promise((resolve) => opts.signal?.addEventListener("abort", resolve, { once: true }));
    },
  } as unknown as KubeApi;
}

const quiet = {
  error: () => {},
  info: () => {},
  warn: () => {},
  v: () => quiet,
  with: () => quiet,
} as unknown as Logger;

describe("Informer", () => {
  test("Informer contains a handler's error: it is counted by controller and the other handlers still get the event", async () => {
    const registry = new Registry();
    const seen: string[] = [];
    const informer = new Informer<Obj>(
      fakeApi([{ type: "MODIFIED", object: { metadata: { name: "a", resourceVersion: "2", v: "2" } } }]),
      { path: "/x", transform: (raw) => raw as Obj, registry, log: quiet },
    );
    informer.addHandlers({
      name: "hostile-victim",
      onAdd: () => {
        throw new Error("boom");
      },
      onUpdate: () => {
        throw new Error("boom");
      },
    });
    informer.addHandlers({
      onAdd: (o) => seen.push(`add ${o.metadata.v}`),
      onUpdate: (_old, o) => seen.push(`update ${o.metadata.v}`),
    });
    informer.start();
    for (let i = 0; i < 100 && seen.length < 2; i++) await new Promise((r) => setImmediate(r));
    await informer.stop();
    expect(seen).toEqual(["add 1", "update 2"]);
    const text = registry.expose();
    expect(text).toContain('talosccm_informer_handler_errors_total{controller="hostile-victim"} 2');
  });

  test("Informer hands transform the cached version of the object it replaces", async () => {
    const olds: Array<string | undefined> = [];
    const informer = new Informer<Obj>(
      fakeApi([{ type: "MODIFIED", object: { metadata: { name: "a", resourceVersion: "2", v: "2" } } }]),
      {
        path: "/x",
        transform: (raw, old) => {
          olds.push(old?.metadata.v);
          return raw as Obj;
        },
        registry: new Registry(),
        log: quiet,
      },
    );
    informer.start();
    for (let i = 0; i < 100 && olds.length < 2; i++) await new Promise((r) => setImmediate(r));
    await informer.stop();
    expect(olds).toEqual([undefined, "1"]);
  });
});
