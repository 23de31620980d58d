// The Helm chart (deploy/chart/talos-cloud-controller-manager) with helm itself (built from
// helm.sh/helm/v3 by tests/support/testbed-bins.sh): `helm lint`; `helm template` with every values
// file of the Go Talos CCM's chart, unchanged (tests/fixtures/go-chart); the chart's RBAC, arguments
// and ConfigMap equal to what lib/manifests.ts makes for the same controllers, for every controller
// list; then `helm install` into the test bed's API server with the Go chart's default values, the
// binary run with the installed arguments, ConfigMap and the chart's ServiceAccount token initializes
// a node and approves its CSR (the chart's RBAC is enough), and `helm upgrade` of that release to the
// Go chart's example values (a DaemonSet with node-ipam) gives a node its pod CIDR.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1CertificateSigningRequest, V1Node } from "@kubernetes/client-node";
import { parseAllDocuments, parse as parseYaml, stringify } from "yaml";
import { publishedNames } from "../../build.ts";
import { parseConfig } from "../../lib/config.ts";
import { type ControllerName, Controllers, resolveControllers } from "../../lib/controllernames.ts";
import { CHART_DIR } from "../../lib/deployfiles.ts";
import { parseCommandLine } from "../../lib/flags.ts";
import { APP_NAME, DEFAULT_CLOUD_CONFIG, type KubeObject, manifests } from "../../lib/manifests.ts";
import type { PolicyRule } from "../../lib/rbacgrants.ts";
import { FakeApid } from "../support/apid.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { loadFixture } from "../support/fixtures.ts";
import { helmBinary, runHelm } from "../support/helm.ts";
import { SimulatedKubelet, UNINITIALIZED_TAINT } from "../support/kubelet.ts";
import { CcmProcess } from "../support/process.ts";

const root = join(import.meta.dir, "..", "..");
const CHART = join(root, "deploy", CHART_DIR);
const GO_VALUES = join(root, "tests", "fixtures", "go-chart");
const GO_FILES = [
  "values.yaml",
  "values-example.yaml",
  "ci-values.yaml",
  "values-tests.yaml",
  "values-edge.yaml",
];
const NAMESPACE = "kube-system";
/** Release name holding the chart name: object names are the chart name, as `manifests` prints them. */
const RELEASE = APP_NAME;
const pkgVersion = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string })
  .version;
/** The image and tag a release of this version publishes (`bun build.ts --names`). */
const PUBLISHED = publishedNames(pkgVersion);

/** The chart's own default values. */
const chartValues = parseYaml(readFileSync(join(CHART, "values.yaml"), "utf8")) as ChartValues;

interface ChartValues {
  enabledControllers: string[];
  extraArgs?: string[];
  logVerbosityLevel: number;
  service: { containerPort: number };
  transformations?: unknown[];
  features?: { approveNodeCSR?: boolean };
  daemonSet?: { enabled?: boolean };
}

interface Workload extends KubeObject {
  spec: {
    template: {
      metadata: { annotations: Record<string, string> };
      spec: {
        hostNetwork?: boolean;
        containers: { image: string; args: string[]; env: { name: string }[] }[];
        tolerations: { key?: string; operator: string }[];
        volumes: { secret?: { optional?: boolean } }[];
      };
    };
  };
}

let work: string;

beforeAll(() => {
  helmBinary();
  work = mkdtempSync(join(tmpdir(), "talos-ccm-helm-"));
});

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** Runs helm with its cache, config and data in the test's directory, never the user's. */
function helm(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return runHelm(work, args);
}

/** Writes values to a file of the test's directory. */
let valuesIndex = 0;
function valuesFile(values: object): string {
  const path = join(work, `values-${valuesIndex++}.yaml`);
  writeFileSync(path, stringify(values));
  return path;
}

/** `helm template` of the chart with these values files; fails the test on an error. */
function template(...files: string[]): KubeObject[] {
  const r = helm(["template", RELEASE, CHART, "--namespace", NAMESPACE, ...files.flatMap((f) => ["-f", f])]);
  if (r.status !== 0) throw new Error(`helm template failed: ${r.stderr}`);
  return (parseAllDocuments(r.stdout) as { toJS(): KubeObject | null }[])
    .map((d) => d.toJS())
    .filter((o): o is KubeObject => o !== null);
}

/** The values helm sees: the chart's defaults under the values files (maps merged, the rest replaced). */
function mergedValues(...files: string[]): ChartValues {
  const merge = (a: unknown, b: unknown): unknown => {
    if (typeof a !== "object" || a === null || Array.isArray(a)) return b;
    if (typeof b !== "object" || b === null || Array.isArray(b)) return b;
    const out: Record<string, unknown> = { ...(a as Record<string, unknown>) };
    for (const [k, v] of Object.entries(b)) out[k] = merge(out[k], v);
    return out;
  };
  return files.reduce<unknown>(
    (acc, f) => merge(acc, parseYaml(readFileSync(f, "utf8"))),
    structuredClone(chartValues),
  ) as ChartValues;
}

/** ccm-config.yaml of the rendered ConfigMap. */
function cloudConfigOf(objects: KubeObject[]): string | undefined {
  const data = objects.find((o) => o.kind === "ConfigMap")?.data as Record<string, string> | undefined;
  return data?.["ccm-config.yaml"];
}

const isRbac = (o: KubeObject) => /^(Cluster)?Role(Binding)?$/.test(o.kind);
const workloadOf = (objects: KubeObject[]) =>
  objects.find((o) => o.kind === "Deployment" || o.kind === "DaemonSet") as Workload;

/** What RBAC grants, verbs as sets: the comparison the API server's authorizer makes. */
function rbacView(objects: KubeObject[]): Record<string, unknown> {
  const view: Record<string, unknown> = {};
  for (const o of objects.filter(isRbac)) {
    const key = `${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`;
    const rules = (o.rules as PolicyRule[] | undefined)?.map((r) => ({ ...r, verbs: [...r.verbs].sort() }));
    view[key] = rules ? { rules } : { roleRef: o.roleRef, subjects: o.subjects };
  }
  return view;
}

/** lib/manifests.ts's objects for these values: the controllers the binary resolves from the chart's --controllers. */
function expectedObjects(values: ChartValues): KubeObject[] {
  const parsed = parseCommandLine([`--controllers=${values.enabledControllers.join(",")}`]);
  if (parsed.command !== "run") throw new Error(`--controllers did not parse: ${parsed.command}`);
  const { controllers, enabledControllers } = parsed.options;
  const enabled = [...enabledControllers];
  if (values.features?.approveNodeCSR && !enabled.includes(Controllers.nodeCsrApproval)) {
    enabled.push(Controllers.nodeCsrApproval);
  }
  return manifests({
    version: pkgVersion,
    controllers,
    enabledControllers: enabled,
    namespace: NAMESPACE,
  }).map((m) => m.object);
}

/** lib/manifests.ts's DaemonSet arguments, with the values' --v and --secure-port, then extraArgs. */
function expectedArgs(values: ChartValues): string[] {
  const ds = workloadOf(expectedObjects(values));
  const args = (ds.spec.template.spec.containers[0]?.args ?? []).map((a) =>
    a.startsWith("--v=")
      ? `--v=${values.logVerbosityLevel}`
      : a.startsWith("--secure-port=")
        ? `--secure-port=${values.service.containerPort}`
        : a,
  );
  return [...args, ...(values.extraArgs ?? [])];
}

describe("helm lint and template", () => {
  test("helm lint --strict passes with the defaults and with every Go chart values file", () => {
    for (const f of [undefined, ...GO_FILES, "values-features.yaml"]) {
      const r = helm(["lint", "--strict", CHART, ...(f ? ["-f", join(GO_VALUES, f)] : [])]);
      expect({ values: f ?? "defaults", status: r.status, stderr: r.stderr }).toEqual({
        values: f ?? "defaults",
        status: 0,
        stderr: "",
      });
      expect(r.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    }
  });

  test.each(GO_FILES)(
    "the Go chart's %s renders unchanged, with its controllers, arguments and mode",
    (file) => {
      const path = join(GO_VALUES, file);
      const values = mergedValues(path);
      const objects = template(path);
      const workload = workloadOf(objects);
      expect(workload.kind).toBe(values.daemonSet?.enabled ? "DaemonSet" : "Deployment");
      const container = workload.spec.template.spec.containers[0];
      // Whatever image the Go values name (its image, its moving tag edge), one a release publishes runs.
      expect(container?.image).toBe(`${PUBLISHED.image}:${PUBLISHED.tag}`);
      expect(container?.args).toEqual(expectedArgs(values));
      expect(container?.args).toContain(`--controllers=${values.enabledControllers.join(",")}`);
      const env = container?.env.map((e) => e.name);
      expect(env?.includes("TALOS_ENDPOINTS")).toBe(values.daemonSet?.enabled === true);
      expect(workload.spec.template.spec.hostNetwork === true).toBe(values.daemonSet?.enabled === true);
      expect(rbacView(objects)).toEqual(rbacView(expectedObjects(values)));
      // The cloud config holds the values' transformations, and the CCM accepts it.
      const config = cloudConfigOf(objects);
      expect(config).toBeDefined();
      const parsed = parseConfig(config as string);
      expect(parsed.warnings).toEqual([]);
      const transformations = values.transformations ?? [];
      if (transformations.length === 0) expect(config).toBe(DEFAULT_CLOUD_CONFIG);
      else
        expect((parseYaml(config as string) as { transformations: unknown }).transformations).toEqual(
          transformations,
        );
    },
  );

  test("the ServiceMonitor always carries a token: the chart's scraper by default (also when values from an older chart lack the key), or a refusal naming the values", () => {
    const scraper = (objects: KubeObject[]) =>
      objects.filter((o) => o.metadata.name === `${APP_NAME}-metrics-scraper`).map((o) => o.kind);
    expect(scraper(template(valuesFile({ serviceMonitor: { enabled: true } })))).toEqual([
      "ServiceAccount",
      "Secret",
      "ClusterRole",
      "ClusterRoleBinding",
    ]);
    expect(
      scraper(template(valuesFile({ serviceMonitor: { enabled: true, scraperToken: null } }))),
    ).toHaveLength(4);
    const r = helm([
      "template",
      RELEASE,
      CHART,
      "-f",
      valuesFile({ serviceMonitor: { enabled: true, scraperToken: { create: false } } }),
    ]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("serviceMonitor: every scrape needs a bearer token");
  });

  test("an image of the Go CCM, by its moving tags or a Go release, runs this chart's release; any other image runs as named", () => {
    const GO_IMAGE = "ghcr.io/siderolabs/talos-cloud-controller-manager";
    const published = `${PUBLISHED.image}:${PUBLISHED.tag}`;
    const cases: [object, string][] = [
      [{}, published],
      [{ tag: "edge" }, published],
      [{ tag: "latest" }, published],
      [{ repository: GO_IMAGE }, published],
      [{ repository: GO_IMAGE, tag: "v1.12.0" }, published],
      [{ repository: GO_IMAGE, tag: "edge" }, published],
      [{ tag: "v0.0.9" }, `${PUBLISHED.image}:v0.0.9`],
      [{ repository: "registry.example/ccm", tag: "v1.12.0" }, "registry.example/ccm:v1.12.0"],
    ];
    for (const [image, expected] of cases) {
      const container = workloadOf(template(valuesFile({ image }))).spec.template.spec.containers[0];
      expect({ image, got: container?.image }).toEqual({ image, got: expected });
    }
  });

  test("a Lease name given in extraArgs is the one the pods are granted and hold, and the alerts and the dashboard watch", () => {
    const cases: [string[], string][] = [
      [[], "cloud-controller-manager-talos"],
      [["--leader-elect-resource-name=ccm-blue"], "ccm-blue"],
      [["--leader-elect-resource-name", "ccm-green"], "ccm-green"],
    ];
    for (const [extraArgs, lease] of cases) {
      const objects = template(
        valuesFile({ extraArgs, prometheusRule: { enabled: true }, grafanaDashboard: { enabled: true } }),
      );
      const rules = objects.flatMap((o) =>
        o.kind === "Role"
          ? ((o as unknown as { rules: { resources: string[]; resourceNames?: string[] }[] }).rules ?? [])
          : [],
      );
      // leases create cannot be limited by name; get and update are, to the one Lease.
      const named = rules.filter((r) => r.resources.includes("leases") && r.resourceNames);
      expect({ extraArgs, names: named.flatMap((r) => r.resourceNames) }).toEqual({
        extraArgs,
        names: [lease],
      });
      const args = workloadOf(objects).spec.template.spec.containers[0]?.args ?? [];
      expect(args).toContain(`--leader-elect-resource-name=${lease}`);
      const watched = (text: string) => [
        ...new Set(
          [...text.matchAll(/leader_election_master_status\{name=\\?"([^"\\]+)\\?"/g)].map((m) => m[1]),
        ),
      ];
      const rule = objects.find((o) => o.kind === "PrometheusRule");
      expect(watched(stringify(rule))).toEqual([lease]);
      const dashboard = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"));
      const json = Object.values(
        (dashboard as unknown as { data: Record<string, string> }).data,
      )[0] as string;
      expect(watched(json)).toEqual([lease]);
      expect(json).not.toContain(
        lease === "cloud-controller-manager-talos" ? "ccm-" : "cloud-controller-manager-talos",
      );
    }
  });

  test("RBAC and arguments equal lib/manifests.ts for every controller list", () => {
    const internal = Object.values(Controllers);
    const goNames: Record<ControllerName, string> = {
      "cloud-node": "cloud-node",
      "cloud-node-lifecycle": "cloud-node-lifecycle",
      "node-csr-approval": "node-csr-approval",
      "node-ipam": "node-ipam-controller",
    };
    const lists: string[][] = [];
    for (let mask = 0; mask < 1 << internal.length; mask++) {
      lists.push(internal.filter((_, i) => mask & (1 << i)).map((c) => goNames[c]));
    }
    lists.push(
      ["*"],
      ["*", "-cloud-node-lifecycle"],
      ["*", "nodeipam", "node-csr-approval"],
      ["-cloud-node", "*"],
      ["cloud-node", "-cloud-node"],
      [" cloud-node-controller ", "node-lifecycle-controller"],
      ["cloud-node,node-ipam"],
      ["service", "route", "cloud-node"],
      ["certificatesigningrequest-approving-controller"],
    );
    for (const enabledControllers of lists) {
      for (const features of [{}, { approveNodeCSR: true }]) {
        const values = { ...chartValues, enabledControllers, features };
        const objects = template(valuesFile({ enabledControllers, features }));
        const label = `enabledControllers ${JSON.stringify(enabledControllers)} features ${JSON.stringify(features)}`;
        expect({ label, rbac: rbacView(objects) }).toEqual({
          label,
          rbac: rbacView(expectedObjects(values)),
        });
        expect({ label, args: workloadOf(objects).spec.template.spec.containers[0]?.args }).toEqual({
          label,
          args: expectedArgs(values),
        });
      }
    }
  });

  test("the Talos secret is optional exactly when node-csr-approval runs alone, as in `manifests`", () => {
    for (const enabledControllers of [
      ["node-csr-approval"],
      ["cloud-node", "node-csr-approval"],
      ["cloud-node"],
    ]) {
      const optional = (o: KubeObject[]) =>
        workloadOf(o).spec.template.spec.volumes[1]?.secret?.optional === true;
      const values = { ...chartValues, enabledControllers };
      expect(optional(template(valuesFile({ enabledControllers })))).toBe(optional(expectedObjects(values)));
    }
    expect(
      workloadOf(template(valuesFile({ enabledControllers: ["node-csr-approval"] }))).spec.template.spec
        .volumes[1]?.secret?.optional,
    ).toBe(true);
  });

  test("an unknown controller name fails the install with its name, as it fails the binary", () => {
    const r = helm([
      "template",
      RELEASE,
      CHART,
      "-f",
      valuesFile({ enabledControllers: ["cloud-node", "cloud-nodes"] }),
    ]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('enabledControllers: "cloud-nodes" is not a known controller');
    expect(() => resolveControllers(["cloud-node", "cloud-nodes"])).toThrow(
      '"cloud-nodes" is not in the list',
    );
  });

  test("the checksum annotation changes with settings read at start-up only, not with transformations", () => {
    const checksum = (values: object) =>
      workloadOf(template(valuesFile(values))).spec.template.metadata.annotations["checksum/startup-config"];
    const rule = (label: string) => ({
      name: label,
      nodeSelector: [{ matchExpressions: [{ key: "platform", operator: "In", values: ["aws"] }] }],
      labels: { [`example.com/${label}`]: "" },
    });
    const base = checksum({});
    expect(base).toMatch(/^[0-9a-f]{64}$/);
    expect(checksum({ transformations: [rule("a")] })).toBe(base);
    expect(checksum({ transformations: [rule("a"), rule("b")] })).toBe(base);
    expect(checksum({ features: { approveNodeCSR: true } })).not.toBe(base);
  });

  test("features.approveNodeCSR of older charts turns CSR approval on in the config and the RBAC", () => {
    const path = join(GO_VALUES, "values-features.yaml");
    const objects = template(path);
    const config = cloudConfigOf(objects);
    expect(parseConfig(config as string).global.approveNodeCSR).toBe(true);
    const clusterRole = objects.find((o) => o.kind === "ClusterRole") as { rules: PolicyRule[] } & KubeObject;
    expect(clusterRole.rules.some((r) => r.resources.includes("certificatesigningrequests/approval"))).toBe(
      true,
    );
    expect(rbacView(objects)).toEqual(rbacView(expectedObjects(mergedValues(path))));
  });
});

describe("helm install and upgrade on the test bed", () => {
  let cluster: TestCluster;
  let apid: FakeApid;
  let adminKubeconfig: string;
  let talosconfig: string;
  const kubelets: SimulatedKubelet[] = [];
  const running = new Set<CcmProcess>();

  beforeAll(async () => {
    [cluster, apid] = await Promise.all([
      TestCluster.start(),
      FakeApid.start({
        nodes: [loadFixture("aws")],
        // Dual-stack: the Go chart's example sets --node-cidr-mask-size-ipv6, which a single-stack IPv4
        // cluster refuses (as the Go CCM does).
        controllerManagerConfig: {
          podCIDRs: ["10.244.0.0/16", "fd00:10:244::/64"],
          serviceCIDRs: ["10.96.0.0/12"],
        },
      }),
    ]);
    adminKubeconfig = writeKubeconfig(join(work, "admin.kubeconfig"), cluster.admin);
    talosconfig = await apid.writeTalosconfig(join(work, "talosconfig"));
    await cluster.installTalosServiceAccountCrd();
  });

  afterAll(async () => {
    for (const p of running) await p.stop("SIGKILL");
    for (const k of kubelets) k.close();
    await apid?.stop();
    await cluster?.stop();
  });

  function helmOnCluster(args: string[]) {
    const r = helm([...args, "--kubeconfig", adminKubeconfig, "--namespace", NAMESPACE]);
    if (r.status !== 0) throw new Error(`helm ${args[0]} failed: ${r.stderr}`);
    return r;
  }

  /** Runs the binary as the installed workload would: its args, its ConfigMap, its ServiceAccount's token. */
  async function runInstalled(kind: "deployments" | "daemonsets"): Promise<CcmProcess> {
    const workload = await cluster.adminClient.get<Workload>(
      `/apis/apps/v1/namespaces/${NAMESPACE}/${kind}/${RELEASE}`,
    );
    const pod = workload.spec.template.spec as Workload["spec"]["template"]["spec"] & {
      serviceAccountName: string;
    };
    const configMap = await cluster.adminClient.get<{ data: Record<string, string> }>(
      `/api/v1/namespaces/${NAMESPACE}/configmaps/${RELEASE}`,
    );
    const cloudConfig = join(work, `ccm-config-${kind}.yaml`);
    writeFileSync(cloudConfig, configMap.data["ccm-config.yaml"] as string);
    const conn = await cluster.serviceAccountConnection(NAMESPACE, pod.serviceAccountName);
    const kubeconfig = writeKubeconfig(join(work, `sa-${kind}.kubeconfig`), conn);
    const port = await freePort();
    const args = (pod.containers[0]?.args ?? []).map((a) =>
      a.startsWith("--cloud-config=")
        ? `--cloud-config=${cloudConfig}`
        : a.startsWith("--secure-port=")
          ? `--secure-port=${port}`
          : a,
    );
    const p = new CcmProcess([...args, `--kubeconfig=${kubeconfig}`, "--bind-address=127.0.0.1"], {
      env: { TALOSCONFIG: talosconfig },
    });
    running.add(p);
    return p;
  }

  async function stop(p: CcmProcess): Promise<void> {
    await p.stop("SIGTERM");
    running.delete(p);
  }

  async function node(name: string): Promise<V1Node> {
    return cluster.adminClient.get<V1Node>(`/api/v1/nodes/${name}`);
  }

  test("helm install with the Go chart's default values: the binary, run as installed, initializes a node and approves its CSR", async () => {
    const r = helmOnCluster(["install", RELEASE, CHART, "-f", join(GO_VALUES, "values.yaml")]);
    expect(r.stdout).toContain("STATUS: deployed");
    // The Go chart's defaults name its image: this project's runs, and the NOTES say so.
    expect(r.stdout).toContain(
      "NOTE: image.repository is ghcr.io/siderolabs/talos-cloud-controller-manager, the Go CCM's image, which cannot run with\n" +
        `this chart's arguments: this chart runs ${PUBLISHED.image} instead.`,
    );
    const p = await runInstalled("deployments");
    const aws = loadFixture("aws");
    const kubelet = await SimulatedKubelet.register(cluster, {
      name: aws.name,
      ips: aws.nodeIPs,
      heartbeatMs: 0,
    });
    kubelets.push(kubelet);
    await waitFor(async () => {
      const n = await node(aws.name);
      return (
        Boolean(n.spec?.providerID) && !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT)
      );
    }, 30_000);
    const csr = await kubelet.submitServingCSR();
    const csrName = csr.metadata?.name as string;
    await waitFor(async () => {
      const got = await cluster.adminClient.get<V1CertificateSigningRequest>(
        `/apis/certificates.k8s.io/v1/certificatesigningrequests/${csrName}`,
      );
      return (got.status?.conditions ?? []).some((c) => c.type === "Approved" && c.status === "True");
    }, 30_000);
    expect((await node(aws.name)).spec?.providerID).toMatch(/^aws:\/\/\//);
    expect(p.output).not.toMatch(/forbidden|\b403\b/i);
    await stop(p);
  });

  test("helm upgrade of that release to the Go chart's example values: a DaemonSet whose binary gives a node its pod CIDR", async () => {
    const r = helmOnCluster(["upgrade", RELEASE, CHART, "-f", join(GO_VALUES, "values-example.yaml")]);
    expect(r.stdout).toContain("STATUS: deployed");
    expect(r.stdout).toContain("runs: cloud-node, node-csr-approval, node-ipam.");
    expect(r.stdout).not.toContain("WARNING");
    // Its image.tag is the Go image's moving tag edge: the chart's own release runs, and the NOTES say so.
    expect(r.stdout).toContain(`talos-cloud-controller-manager ${PUBLISHED.tag} runs:`);
    expect(r.stdout).toContain(
      "NOTE: image.tag is edge, a moving tag of the Go CCM's image, which this project does\n" +
        `not publish: this chart runs its own release ${PUBLISHED.tag} instead.`,
    );
    const deployments = await cluster.adminClient.get<{ items: KubeObject[] }>(
      `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`,
    );
    expect(deployments.items.map((d) => d.metadata.name)).not.toContain(RELEASE);
    const p = await runInstalled("daemonsets");
    // A node with a public IPv6 /64: CloudAllocator gives it an IPv4 /24 and an /80 of its own /64.
    const spec = loadFixture("metal-ipv6");
    apid.addNode(spec);
    const kubelet = await SimulatedKubelet.register(cluster, {
      name: spec.name,
      ips: spec.nodeIPs,
      heartbeatMs: 0,
    });
    kubelets.push(kubelet);
    await waitFor(async () => {
      const n = await node(spec.name);
      return (
        (n.spec?.podCIDRs ?? []).length > 0 &&
        !(n.spec?.taints ?? []).some((t) => t.key === UNINITIALIZED_TAINT)
      );
    }, 30_000);
    const [v4, v6] = (await node(spec.name)).spec?.podCIDRs ?? [];
    expect(v4).toMatch(/^10\.244\.\d+\.0\/24$/);
    expect(v6).toMatch(/^2a01:4f8:271:3b2f:[0-9a-f]*::\/80$/);
    expect(p.output).not.toMatch(/forbidden|\b403\b/i);
    await stop(p);
    // The same values again (a GitOps resync) changes nothing and succeeds.
    const again = helmOnCluster(["upgrade", RELEASE, CHART, "--reuse-values"]);
    expect(again.stdout).toContain("REVISION: 3");
  });
});
