// A Talos client (lib/talos.ts, TALOS_MACHINE_ACCESS=auto) run by tests/e2e/talos-direct.test.ts
// under a hard file-descriptor limit below the number of machines it asks about: each machine's
// direct channel is a socket, and the dials beyond the limit fail (EMFILE). It asks each machine in
// turn for its nodename, keeping every channel open, and prints one JSON line:
// {"answered": N, "failed": [...], "fallbacks": N, "directChannels": N, "closedForAll": bool}.
//
//   bun fdprobe.ts TALOSCONFIG MACHINE_PORT IP...
//       every IP's direct path is 127.0.0.1:MACHINE_PORT (one machine-mode fake apid); the
//       talosconfig's endpoint answers for each through its proxy

import { configureLogging } from "../../lib/log.ts";
import { Registry } from "../../lib/metrics.ts";
import { TalosClient } from "../../lib/talos.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";

const [path, machinePort, ...ips] = process.argv.slice(2);
if (!path || !machinePort || ips.length === 0)
  throw new Error("usage: fdprobe.ts TALOSCONFIG MACHINE_PORT IP...");
let closedForAll = false;
configureLogging({
  write: (line) => {
    if (line.includes("Cannot reach Talos machines directly (several in a row)")) closedForAll = true;
  },
});
const registry = new Registry();
const client = new TalosClient({
  config: loadTalosConfig({ path, env: {} }),
  registry,
  attempts: 1,
  callTimeoutMs: 5_000,
  machineAccess: "auto",
  machineEndpoint: () => ({ host: "127.0.0.1", port: Number(machinePort) }),
});
const metric = (name: string) => Number(registry.expose().match(new RegExp(`^${name} (\\d+)$`, "m"))?.[1]);
// The endpoint's channel first, as the CCM opens it at start (it reads the cluster's CIDRs there).
await client.version();
let answered = 0;
const failed: string[] = [];
for (const ip of ips) {
  try {
    await client.nodename(ip);
    answered++;
  } catch (err) {
    failed.push(`${ip}: ${(err as Error).message}`);
  }
}
console.log(
  JSON.stringify({
    answered,
    failed,
    fallbacks: metric("talosccm_talos_direct_fallbacks_total"),
    directChannels: metric("talosccm_talos_direct_channels"),
    closedForAll,
  }),
);
client.close();
process.exit(0);
