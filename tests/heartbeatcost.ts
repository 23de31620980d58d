// The CCM's CPU per status heartbeat of a large Node through the Node informer's update path (the
// Node view's reduction and cloud-node's update filter; JSON decoding excluded, as the issue
// measured it). Run: node_modules/.bin/bun tests/heartbeatcost.ts [lib dir] [labels]
// With another lib dir (e.g. an older commit's, unpacked with `git archive <commit> lib`), the
// filter is the one that commit had: the old one serialised both versions' labels and annotations.

const libDir = process.argv[2] ?? new URL("../lib/", import.meta.url).pathname;
const labelCount = Number(process.argv[3] ?? 5000);

const view = (await import(`${libDir}/nodeview.ts`)) as typeof import("../lib/nodeview.ts");
const { leanNode } = view;
const node = (await import(`${libDir}/node.ts`)) as Record<string, unknown>;
const { StringPool } = (await import(`${libDir}/stringpool.ts`)) as typeof import("../lib/stringpool.ts");
type Lean = ReturnType<typeof leanNode>;

/** The update filter before issue 40 (relevantChange, when it was not exported). */
function serialisingFilter(a: Lean, b: Lean): boolean {
  const view = (n: Lean) =>
    JSON.stringify([
      n.metadata.labels,
      n.metadata.annotations,
      n.metadata.deletionTimestamp ?? "",
      n.spec.providerID ?? "",
      n.spec.taints,
      n.status.addresses,
    ]);
  return view(a) !== view(b);
}
// In lib/nodeview.ts since issue 44, in lib/node.ts before it.
const relevant =
  ((view as Record<string, unknown>).relevantChange as typeof serialisingFilter | undefined) ??
  (node.relevantChange as typeof serialisingFilter | undefined) ??
  serialisingFilter;

const labels: Record<string, string> = {};
for (let i = 0; i < labelCount; i++)
  labels[`example.com/label-key-${String(i).padStart(6, "0")}`] = `value-${i}-${"x".repeat(130)}`;
const annotations: Record<string, string> = {};
for (let i = 0; i < 400; i++) annotations[`example.com/annotation-${i}`] = "y".repeat(500);
/** managedFields as the API server records them: who wrote each label and annotation, and the status. */
const managedFields = (rv: number) => [
  {
    manager: "labeller",
    operation: "Update",
    time: "2026-01-01T00:00:00Z",
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:metadata": {
        "f:labels": Object.fromEntries(Object.keys(labels).map((k) => [`f:${k}`, {}])),
        "f:annotations": Object.fromEntries(Object.keys(annotations).map((k) => [`f:${k}`, {}])),
      },
    },
  },
  {
    manager: "kubelet",
    operation: "Update",
    subresource: "status",
    time: new Date(rv * 1000).toISOString(),
    fieldsType: "FieldsV1",
    fieldsV1: { "f:status": { "f:conditions": {}, "f:addresses": { 'k:{"type":"InternalIP"}': {} } } },
  },
];
const raw = (rv: number) => ({
  metadata: {
    name: "big",
    uid: "u",
    resourceVersion: String(rv),
    labels,
    annotations,
    managedFields: managedFields(rv),
  },
  spec: { providerID: "talos://metal/10.0.0.5", taints: [] },
  status: {
    addresses: [
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "Hostname", address: "big" },
    ],
    conditions: [{ type: "Ready", status: "True", lastHeartbeatTime: new Date(rv * 1000).toISOString() }],
  },
});
const text = (rv: number) => JSON.stringify(raw(rv));
console.log(`Node of ${(text(1).length / 1048576).toFixed(2)} MiB, ${labelCount} labels, lib ${libDir}`);

const pool = new StringPool(1024);
const updates = 300;
let old = leanNode(JSON.parse(text(1)), pool);
const times: number[] = [];
let relevantCount = 0;
for (let i = 0; i < updates + 50; i++) {
  const r = JSON.parse(text(i + 2));
  const t0 = performance.now();
  const next = (leanNode as (raw: unknown, s: unknown, prev?: Lean) => Lean)(r, pool, old);
  if (relevant(old, next)) relevantCount++;
  old = next;
  if (i >= 50) times.push(performance.now() - t0);
}
times.sort((a, b) => a - b);
const q = (p: number) => (times[Math.floor(p * (times.length - 1))] as number).toFixed(3);
console.log(
  `ms per heartbeat: median ${q(0.5)}, p90 ${q(0.9)}, max ${q(1)} (${updates} updates, ${relevantCount} relevant)`,
);
