// A Worker thread for the blast-radius bench's big writers: it patches one object every `periodMs`
// and drains each ~1 MiB answer unread. `big-node` patches the hostile Node's status with its
// kubelet's credentials (a fresh heartbeat time in each condition); `api-load`, the control, patches
// a ConfigMap the CCM never reads (a fresh `data.beat`), as admin. In its own thread, the answers'
// TLS, HTTP/2 frames and garbage cost the main bench thread (which times the honest nodes) nothing,
// as a real kubelet runs in its own process. Posts "beat" after each patch, or "error: …" once for
// the first failure.

import { KubeClient } from "../../lib/kube.ts";
import { PATCH } from "../../lib/kubeapi.ts";
import type { KubeConnection } from "../../lib/kubeconfig.ts";

declare const self: Worker;

/** What the main thread sends to start the beats. */
export interface HeartbeatStart {
  connection: KubeConnection;
  /** The object (or subresource) patched. */
  path: string;
  periodMs: number;
  /** A Node status (its conditions' heartbeat times renewed each beat), or a ConfigMap's data (`beat` renewed). */
  patch: { status: Record<string, unknown> } | { data: Record<string, string> };
}

/** `patch` with this beat's time in it: an unchanged patch would write nothing. */
function stamped(patch: HeartbeatStart["patch"], at: string): unknown {
  if ("data" in patch) return { data: { ...patch.data, beat: at } };
  const conditions = (patch.status.conditions as Array<Record<string, unknown>> | undefined)?.map((c) => ({
    ...c,
    lastHeartbeatTime: at,
  }));
  return { status: { ...patch.status, ...(conditions ? { conditions } : {}) } };
}

self.onmessage = (ev: MessageEvent<HeartbeatStart>) => {
  const { connection, path, periodMs, patch } = ev.data;
  const client = new KubeClient(connection, { qps: 0 });
  const type = "data" in patch ? PATCH.merge : PATCH.strategic;
  let failed = false;
  setInterval(async () => {
    const at = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    try {
      await client.patch(path, stamped(patch, at), type, { discardAnswer: true });
      self.postMessage("beat");
    } catch (err) {
      if (!failed) self.postMessage(`error: ${(err as Error).message}`);
      failed = true;
    }
  }, periodMs);
};
