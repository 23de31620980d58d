// The Kubernetes clients `run` makes (lib/kubeclients.ts): the controllers', the Events', the Lease's
// and the serving port's review clients are separate clients (a rate limiter and connections each),
// named apart in their User-Agent. Checked against a local server that records who asked.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseCommandLine, type RunOptions } from "../../lib/flags.ts";
import { kubeClients } from "../../lib/kubeclients.ts";
import { writeKubeconfig } from "../support/cluster.ts";

const dir = mkdtempSync(join(tmpdir(), "kubeclients-"));
const agents: string[] = [];
const server = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  fetch(req) {
    agents.push(req.headers.get("user-agent") ?? "");
    return Response.json({ kind: "Status", apiVersion: "v1" });
  },
});
afterAll(() => {
  server.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

function options(args: string[]): RunOptions {
  const kubeconfig = writeKubeconfig(join(dir, "kubeconfig"), {
    server: `http://127.0.0.1:${server.port}`,
    auth: { kind: "token", token: "t" },
  });
  const parsed = parseCommandLine([`--kubeconfig=${kubeconfig}`, ...args]);
  if (parsed.command !== "run") throw new Error("not a run");
  return parsed.options;
}

describe("kubeClients()", () => {
  test("Events, the Lease and the reviews each have a client of their own, apart from the controllers'", async () => {
    const kube = kubeClients(options([]));
    const clients = [kube.client, kube.events, kube.lease, kube.reviews?.authentication];
    expect(new Set(clients).size).toBe(4);
    agents.length = 0;
    for (const c of clients) await c?.get("/version");
    expect(agents.map((a) => a.replace(/^talos-cloud-controller-manager\/\S+/, "ccm"))).toEqual([
      "ccm",
      "ccm events",
      "ccm leader-election",
      "ccm authentication",
    ]);
  });

  test("without leader election or serving there is no Lease or review client; Events keep theirs", () => {
    const kube = kubeClients(options(["--leader-elect=false", "--secure-port=0"]));
    expect(kube.lease).toBeUndefined();
    expect(kube.reviews).toBeUndefined();
    expect(kube.events).not.toBe(kube.client);
  });
});
