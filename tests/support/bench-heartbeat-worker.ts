// A Worker thread for the blast-radius bench's big-node peer: it patches the hostile Node's status
// every `periodMs` with the kubelet's credentials and drains each ~1 MiB answer unread. In its own
// thread, the answers' TLS, HTTP/2 frames and garbage cost the main bench thread (which times the
// honest nodes) nothing, as a real kubelet runs in its own process. Posts "beat" after each patch,
// or "error: …" once for the first failure.

import { KubeClient } from "../../lib/kube.ts";
import { PATCH } from "../../lib/kubeapi.ts";
import type { KubeConnection } from "../../lib/kubeconfig.ts";

declare const self: Worker;

/** What the main thread sends to start the heartbeats. */
export interface HeartbeatStart {
  connection: KubeConnection;
  name: string;
  periodMs: number;
  status: Record<string, unknown>;
}

self.onmessage = (ev: MessageEvent<HeartbeatStart>) => {
  const { connection, name, periodMs, status } = ev.data;
  const client = new KubeClient(connection, { qps: 0 });
  let failed = false;
  setInterval(async () => {
    // Each beat a new heartbeat time, as a kubelet writes it (an unchanged patch writes nothing).
    const at = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const conditions = (status.conditions as Array<Record<string, unknown>> | undefined)?.map((c) => ({
      ...c,
      lastHeartbeatTime: at,
    }));
    try {
      await client.patch(
        `/api/v1/nodes/${name}/status`,
        { status: { ...status, ...(conditions ? { conditions } : {}) } },
        PATCH.strategic,
        { discardAnswer: true },
      );
      self.postMessage("beat");
    } catch (err) {
      if (!failed) self.postMessage(`error: ${(err as Error).message}`);
      failed = true;
    }
  }, periodMs);
};
