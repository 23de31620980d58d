// The bench's floor (`npm run bench -- --floor`, issue 43): what initializing N Nodes and approving
// their N CSRs costs when nothing but the writes is done. It issues the writes this CCM issues — per
// Node the status addresses (merge patch) and the JSON patch of labels, annotations, providerID and
// taints that lib/desirednode.ts decideNode makes from the machine's facts; per CSR the /approval
// write; no Events (the CCM records them through a client of its own) — through this project's
// Kubernetes client with the same --kube-api-qps/--kube-api-burst, but reads no Talos: the machines'
// facts are the bench's own specs (BENCH_FLOOR_SPECS, a JSON file of FakeNodeSpec), and a CSR is
// approved unread. Each CCM's times are then read as ratios to this one's: what is left is the API
// server's and the client rate limit's.
//
// Run by the bench in place of a CCM with the same arguments (lib/flags.ts reads them); no leader
// election, no serving port: it prints `floor: ready` once its caches synced, and runs until SIGTERM.

import { readFileSync } from "node:fs";
import { parseConfig } from "../../lib/config.ts";
import { APPROVE_REASON } from "../../lib/csr.ts";
import { approvalBody, isPending, type LeanCsr, leanCsr } from "../../lib/csrview.ts";
import { decideNode } from "../../lib/desirednode.ts";
import { parseCommandLine } from "../../lib/flags.ts";
import { PATCH } from "../../lib/kubeapi.ts";
import { Informer, nodeInformer } from "../../lib/kubecache.ts";
import { kubeClients } from "../../lib/kubeclients.ts";
import { readManagedRecord } from "../../lib/managedrecord.ts";
import { type LeanNode, nodeIPs } from "../../lib/nodeview.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import type { NodeFacts } from "../../lib/types.ts";
import { FIELD_MANAGER, KUBELET_SERVING_SIGNER, UNINITIALIZED_TAINT } from "../../lib/wellknown.ts";
import { addressStatus, type FakeNodeSpec } from "./fixtures.ts";

const CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

const parsed = parseCommandLine(process.argv.slice(2));
if (parsed.command !== "run") throw new Error(`bench-floor: not a run: ${process.argv.slice(2).join(" ")}`);
const opts = { ...parsed.options, leaderElection: { ...parsed.options.leaderElection, enabled: false } };
/** As cloud-node writes: under its field manager, the status answer read for its resourceVersion only. */
const AS_CCM = { query: { fieldManager: FIELD_MANAGER } };
const config = parseConfig(opts.cloudConfig ? readFileSync(opts.cloudConfig, "utf8") : "");
const clusterName = loadTalosConfig({}).cluster;
const specs = new Map<string, FakeNodeSpec>(
  (JSON.parse(readFileSync(process.env.BENCH_FLOOR_SPECS ?? "", "utf8")) as FakeNodeSpec[]).map((s) => [
    s.name,
    s,
  ]),
);

const { client } = kubeClients(opts);
const done = new Set<string>();

/** The machine's facts as Talos would report them, from its spec. */
function factsOf(spec: FakeNodeSpec): NodeFacts {
  return { platformMetadata: spec.platformMetadata, addresses: spec.addresses.map(addressStatus) };
}

/** Initializes `node` with the writes cloud-node makes, once. */
async function initialize(node: LeanNode): Promise<void> {
  const name = node.metadata.name;
  const spec = specs.get(name);
  if (!spec || done.has(name) || !node.spec.taints?.some((t) => t.key === UNINITIALIZED_TAINT)) return;
  const ips = nodeIPs(
    { annotations: node.metadata.annotations, addresses: node.status.addresses },
    config.global.preferIPv6,
  );
  if (ips.ips.length === 0) return;
  done.add(name);
  const { patch } = decideNode({
    node,
    ips,
    facts: factsOf(spec),
    nodeIP: ips.ips[0] as string,
    managed: readManagedRecord(node.metadata),
    config,
    clusterName,
  });
  const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
  try {
    if (patch.addresses)
      await client.patch(`${path}/status`, { status: { addresses: patch.addresses } }, PATCH.merge, {
        ...AS_CCM,
        resourceVersionOnly: true,
      });
    if (patch.ops.length > 0)
      await client.patch(path, patch.ops, PATCH.json, { ...AS_CCM, discardAnswer: true });
  } catch (err) {
    done.delete(name);
    console.error(`floor: cannot initialize ${name}: ${(err as Error).message}`);
  }
}

/** Approves `c` as the approver writes an approval, unread. */
async function approve(c: LeanCsr): Promise<void> {
  if (!isPending(c) || done.has(`csr/${c.metadata.name}`)) return;
  done.add(`csr/${c.metadata.name}`);
  const body = approvalBody(c, { action: "approve", reason: APPROVE_REASON, message: "floor" });
  try {
    await client.update(`${CSR_PATH}/${encodeURIComponent(c.metadata.name)}/approval`, body, {
      discardAnswer: true,
    });
  } catch (err) {
    done.delete(`csr/${c.metadata.name}`);
    console.error(`floor: cannot approve ${c.metadata.name}: ${(err as Error).message}`);
  }
}

const nodes = nodeInformer(client);
nodes.addHandlers({
  name: "floor",
  onAdd: (n) => void initialize(n),
  onUpdate: (_o, n) => void initialize(n),
});
const csrs = new Informer<LeanCsr>(client, {
  path: CSR_PATH,
  fieldSelector: `spec.signerName=${KUBELET_SERVING_SIGNER}`,
  transform: leanCsr,
  keep: isPending,
});
csrs.addHandlers({ onAdd: (c) => void approve(c), onUpdate: (_o, c) => void approve(c) });
nodes.start();
csrs.start();
await Promise.all([nodes.waitForSync(), csrs.waitForSync()]);
console.log("floor: ready");
process.on("SIGTERM", () => process.exit(0));
