// `npm run demo`: the project's main job, end to end on this machine. Builds the binary, starts the
// local test bed (a real kube-apiserver + etcd, simulated Talos nodes on several platforms), runs the
// compiled CCM with a rule set from rules/, lets simulated kubelets join and submit serving CSRs,
// prints a table of the resulting Nodes and exits 0. `--keep` leaves everything running and prints a
// kubeconfig path and the test bed's own kubectl for `kubectl get nodes`.

import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1CertificateSigningRequestList, V1Node, V1NodeList } from "@kubernetes/client-node";
import { FakeApid } from "./support/apid.ts";
import { freePort, TestCluster, waitFor } from "./support/cluster.ts";
import { loadFixture } from "./support/fixtures.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "./support/kubelet.ts";
import { CcmProcess } from "./support/process.ts";

const root = join(import.meta.dir, "..");
const keep = process.argv.includes("--keep");
const PLATFORMS = ["aws", "gcp", "azure", "hcloud", "nocloud", "openstack", "metal-ipv6"];
const RULES = join(root, "rules", "spot.yaml");

function step(msg: string): void {
  process.stderr.write(`==> ${msg}\n`);
}

function ensureTestbedBinaries(): void {
  const have = process.env.KUBEBUILDER_ASSETS || (process.env.KUBE_APISERVER && process.env.ETCD);
  if (have && process.env.KUBECTL) return;
  // The script keeps binaries named in the environment, so its answer can replace them.
  step("Preparing kube-apiserver, kubectl and etcd (built once per machine from Go modules, then cached)");
  const r = spawnSync(join(root, "tests/support/testbed-bins.sh"), {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    // The demo runs no helm, no simulator and no apid (its Talos is the in-process fake apid).
    env: { ...process.env, TESTBED_PARTS: "apiserver etcd" },
  });
  if (r.status !== 0) throw new Error("Cannot build kube-apiserver, kubectl and etcd (see above)");
  for (const line of r.stdout.split("\n")) {
    const m = line.match(/^(KUBE_APISERVER|ETCD|KUBECTL)=(.+)$/);
    if (m) process.env[m[1] as string] = m[2];
  }
}

function buildBinary(): void {
  if (process.env.CCM_BINARY) return;
  step("Building the binary (bun build.ts)");
  const arch = process.arch === "arm64" ? "arm64" : "amd64";
  const r = spawnSync(process.execPath, [join(root, "build.ts"), `--target=${arch}`], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (r.status !== 0) throw new Error("Cannot build the binary");
  process.env.CCM_BINARY = join(root, "dist", `talos-cloud-controller-manager-linux-${arch}`);
}

function addr(n: V1Node, type: string): string {
  return (n.status?.addresses ?? [])
    .filter((a) => a.type === type)
    .map((a) => a.address)
    .join(",");
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? [];
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

async function main(): Promise<number> {
  ensureTestbedBinaries();
  buildBinary();
  step("Starting kube-apiserver and etcd");
  const cluster = await TestCluster.start();
  const nodes = PLATFORMS.map(loadFixture);
  step(`Starting a fake Talos apid with ${nodes.length} nodes: ${PLATFORMS.join(", ")}`);
  const apid = await FakeApid.start({ nodes });
  const talosconfig = await apid.writeTalosconfig(join(cluster.dir, "talosconfig"), { cluster: "demo" });
  const cloudConfig = join(cluster.dir, "ccm-config.yaml");
  if (!existsSync(RULES)) throw new Error(`Cannot find the rule set ${RULES}`);
  copyFileSync(RULES, cloudConfig);
  const kubelets: SimulatedKubelet[] = [];
  let ccm: CcmProcess | undefined;
  const cleanup = async () => {
    await ccm?.stop();
    for (const k of kubelets) k.close();
    await apid.stop();
    await cluster.stop();
  };
  process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));
  try {
    const port = await freePort();
    step(`Running the CCM (rules: ${RULES.slice(root.length + 1)}) with every controller`);
    ccm = new CcmProcess(
      [
        `--kubeconfig=${cluster.adminKubeconfig}`,
        `--cloud-config=${cloudConfig}`,
        "--controllers=cloud-node,cloud-node-lifecycle,node-csr-approval,node-ipam",
        "--allocate-node-cidrs",
        "--cidr-allocator-type=CloudAllocator",
        "--cluster-cidr=10.244.0.0/16,fd40:10:244::/64",
        "--leader-elect-resource-name=cloud-controller-manager-talos",
        `--secure-port=${port}`,
        "--v=1",
      ],
      { env: { TALOSCONFIG: talosconfig } },
    );
    await ccm.waitForLog(/Successfully acquired lease|Starting controller/, 20_000);
    step(`${nodes.length} simulated kubelets join and ask for serving certificates`);
    for (const n of nodes) {
      const k = await SimulatedKubelet.register(cluster, { name: n.name, ips: n.nodeIPs });
      kubelets.push(k);
      await k.submitServingCSR({ dns: [n.name], ips: n.nodeIPs });
    }
    const admin = cluster.adminClient;
    await waitFor(
      async () => {
        const list = await admin.get<V1NodeList>("/api/v1/nodes");
        return list.items.every(
          (n) =>
            !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT) &&
            (n.spec?.podCIDRs?.length ?? 0) > 0,
        );
      },
      60_000,
      () => `nodes did not all initialize; CCM output:\n${ccm?.output.slice(-3000)}`,
    );
    const list = await admin.get<V1NodeList>("/api/v1/nodes");
    const csrs = await admin.get<V1CertificateSigningRequestList>(
      "/apis/certificates.k8s.io/v1/certificatesigningrequests",
    );
    const csrStatus = (name: string) => {
      const c = csrs.items.find((x) => x.spec.username === `system:node:${name}`);
      const cond = c?.status?.conditions?.[0];
      return cond ? cond.type : "Pending";
    };
    const rows = [
      [
        "NAME",
        "PLATFORM",
        "PROVIDER-ID",
        "REGION/ZONE",
        "INSTANCE-TYPE",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "POD-CIDRS",
        "SERVING-CSR",
      ],
    ];
    for (const n of list.items.sort((a, b) =>
      (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""),
    )) {
      const l = n.metadata?.labels ?? {};
      rows.push([
        n.metadata?.name ?? "",
        l["node.cloudprovider.kubernetes.io/platform"] ?? "",
        n.spec?.providerID ?? "",
        `${l["topology.kubernetes.io/region"] ?? "-"}/${l["topology.kubernetes.io/zone"] ?? "-"}`,
        l["node.kubernetes.io/instance-type"] ?? "-",
        addr(n, "InternalIP"),
        addr(n, "ExternalIP") || "-",
        (n.spec?.podCIDRs ?? []).join(","),
        csrStatus(n.metadata?.name ?? ""),
      ]);
    }
    process.stdout.write(`${table(rows)}\n`);
    if (keep) {
      const kc = join(cluster.dir, "demo.kubeconfig");
      copyFileSync(cluster.adminKubeconfig, kc);
      // The machine may have no kubectl of its own: the test bed built one beside kube-apiserver.
      const kubectl = process.env.KUBECTL ?? "kubectl";
      writeFileSync(
        join(cluster.dir, "README"),
        `${kubectl} --kubeconfig demo.kubeconfig get nodes -o wide\n`,
      );
      step(`Still running. Try:  ${kubectl} --kubeconfig ${kc} get nodes -o wide   (Ctrl-C to stop)`);
      await new Promise(() => {});
    }
    return 0;
  } finally {
    if (!keep) await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`demo failed: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
