// `preflight` from the compiled binary against a real API server: a cluster with the Go CCM installed
// as its docs/deploy/cloud-controller-manager.yml installs it (the Deployment of the Go image with its
// arguments, the extension-apiserver-authentication-reader RoleBinding, the ConfigMap, its Lease),
// then after the switch; an identity that may read nothing; a control-plane machine config with the
// Go manifest URL.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { microTime } from "../../lib/kubeapi.ts";
import { TestCluster, writeKubeconfig } from "../support/cluster.ts";
import { GO_IMAGE_TAGGED, goCcmArgs } from "../support/goccm.ts";
import { ccmBinary } from "../support/process.ts";

const NS = "kube-system";
const NAME = "talos-cloud-controller-manager";
const GO_URL =
  "https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml";
const labels = { "app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": NAME };

let cluster: TestCluster;
let dir: string;

function preflight(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(ccmBinary(), ["preflight", ...args], { encoding: "utf8" });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The Go CCM's objects that ours do not replace by name, and its ConfigMap with `config`. */
function goInstall(config: string) {
  return [
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: NAME, namespace: NS, labels },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: NAME,
            containers: [
              {
                name: NAME,
                image: GO_IMAGE_TAGGED,
                command: ["/talos-cloud-controller-manager"],
                args: goCcmArgs(),
                volumeMounts: [{ name: "cloud-config", mountPath: "/etc/talos", readOnly: true }],
              },
            ],
            volumes: [{ name: "cloud-config", configMap: { name: NAME } }],
          },
        },
      },
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: `system:${NAME}:extension-apiserver-authentication-reader`, namespace: NS },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "Role",
        name: "extension-apiserver-authentication-reader",
      },
      subjects: [{ kind: "ServiceAccount", name: NAME, namespace: NS }],
    },
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: NAME, namespace: NS },
      data: { "ccm-config.yaml": config },
    },
    {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: "cloud-controller-manager-talos", namespace: NS },
      spec: {
        holderIdentity: "talos-cloud-controller-manager-5f7c9d-x2k4q_0b8e",
        leaseDurationSeconds: 15,
        renewTime: microTime(Date.now()),
      },
    },
  ];
}

const REFUSED = `transformations:
  - name: web
    nodeSelector:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ["^web-.+$"]}
    taints:
      example.com/dedicated: "web:NoSchedul"
`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "preflight-e2e-"));
  cluster = await TestCluster.start();
  writeFileSync(
    join(dir, "mc.yaml"),
    `version: v1alpha1\ncluster:\n  externalCloudProvider:\n    enabled: true\n    manifests:\n      - ${GO_URL}\n`,
  );
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("preflight from the compiled binary", () => {
  test("the Go install with a config this CCM refuses: exit 1, what breaks first, then each change with its command", async () => {
    await cluster.apply(goInstall(REFUSED));
    const r = preflight("--kubeconfig", cluster.adminKubeconfig, "--machine-config", join(dir, "mc.yaml"));
    expect(r.stderr).toBe("");
    expect(r.status).toBe(1);
    const lines = r.stdout.split("\n").filter((l) => !l.startsWith(" "));
    expect(lines[0]).toStartWith(`BREAKS    ConfigMap ${NS}/${NAME}: ccm-config.yaml: `);
    expect(lines[0]).toContain("NoSchedul");
    expect(r.stdout).toContain(
      `CHANGE    Deployment ${NS}/${NAME} runs the Go CCM (ghcr.io/siderolabs/talos-cloud-controller-manager:v1.12.0)`,
    );
    expect(r.stdout).toContain(
      `fix: after this CCM's manifests are applied: kubectl -n ${NS} delete deployment ${NAME}`,
    );
    expect(r.stdout).toContain("serves /metrics to anyone");
    expect(r.stdout).toContain(
      `fix: kubectl -n kube-system delete rolebinding system:${NAME}:extension-apiserver-authentication-reader`,
    );
    expect(r.stdout).toContain(`machine config ${join(dir, "mc.yaml")} installs the Go CCM`);
    expect(r.stdout).toContain("is held by talos-cloud-controller-manager-5f7c9d-x2k4q_0b8e");
  });

  test("with the config fixed: exit 0, the changes still listed", async () => {
    await cluster.apply(goInstall("global:\n  clusterName: prod\n").filter((o) => o.kind === "ConfigMap"));
    const r = preflight(`--kubeconfig=${cluster.adminKubeconfig}`);
    expect(r.status).toBe(0);
    expect(r.stdout).not.toContain("BREAKS");
    expect(r.stdout).toContain(
      `OK        ConfigMap ${NS}/${NAME}: ccm-config.yaml loads without errors or warnings`,
    );
    expect(r.stdout).toContain("CHANGE    Deployment");
  });

  test("after the switch (this CCM's DaemonSet applied, the Go leftovers deleted): only OK lines", async () => {
    const out = spawnSync(ccmBinary(), ["manifests"], { encoding: "utf8" }).stdout;
    const daemonSet = parseAllDocuments(out)
      .map(
        (d) =>
          d.toJS() as { kind: string; apiVersion: string; metadata: { name: string; namespace?: string } },
      )
      .filter((o) => o?.kind === "DaemonSet");
    await cluster.apply(daemonSet);
    await cluster.adminClient.delete(`/apis/apps/v1/namespaces/${NS}/deployments/${NAME}`);
    await cluster.adminClient.delete(
      `/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/rolebindings/system:${NAME}:extension-apiserver-authentication-reader`,
    );
    const r = preflight(`--kubeconfig=${cluster.adminKubeconfig}`);
    expect(r.status).toBe(0);
    expect(r.stdout.split("\n").filter((l) => l !== "" && !l.startsWith("OK "))).toEqual([]);
    expect(r.stdout).toContain(
      `OK        DaemonSet ${NS}/${NAME} runs ghcr.io/talos-ccm/talos-cloud-controller-manager:v`,
    );
  });

  test("an identity that may read nothing: each read is UNCHECKED with the reason, exit 1 (nothing assumed)", async () => {
    const conn = await cluster.serviceAccountConnection("default", "nobody");
    const kubeconfig = writeKubeconfig(join(dir, "nobody.kubeconfig"), conn);
    const r = preflight(`--kubeconfig=${kubeconfig}`);
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("UNCHECKED not checked: Deployments and DaemonSets: forbidden");
    expect(r.stdout).toContain(`UNCHECKED not checked: ConfigMap ${NS}/${NAME}: forbidden`);
    // Nothing is said in place of what could not be read.
    expect(r.stdout).not.toContain("no CCM workload runs yet");
    expect(r.stdout).not.toContain("no Lease is held yet");
  });

  test("a kubeconfig that cannot be loaded: exit 2 with the file named", () => {
    const r = preflight(`--kubeconfig=${join(dir, "missing.kubeconfig")}`);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`Cannot load kubeconfig ${join(dir, "missing.kubeconfig")}`);
  });
});
