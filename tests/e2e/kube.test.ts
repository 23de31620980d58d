// lib/kube.ts against a real kube-apiserver over TLS: client certificates, bearer tokens, kubeconfig
// and in-cluster loading (lib/kubeconnection.ts), a wrong CA refused, watches, and the compiled
// binary connecting through --kubeconfig. Also checks the kubelet simulator's CSRs carry the requester the API server stamps.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1CertificateSigningRequest, V1Node, V1NodeList } from "@kubernetes/client-node";
import { KubeClient } from "../../lib/kube.ts";
import { isNotFound, KubeError, PATCH } from "../../lib/kubeapi.ts";
import { Informer } from "../../lib/kubecache.ts";
import { inClusterConfig, kubeconfigFromFile, loadConnection } from "../../lib/kubeconnection.ts";
import { TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { SimulatedKubelet } from "../support/kubelet.ts";
import { createCA } from "../support/pki.ts";
import { ccmBinary } from "../support/process.ts";

let cluster: TestCluster;
let kubelet: SimulatedKubelet;

beforeAll(async () => {
  cluster = await TestCluster.start();
  kubelet = await SimulatedKubelet.register(cluster, {
    name: "kube-test-node",
    ips: ["10.5.0.2"],
    heartbeatMs: 0,
  });
});

afterAll(async () => {
  kubelet?.close();
  await cluster?.stop();
});

describe("KubeClient", () => {
  test("lists Nodes over TLS with a client certificate", async () => {
    const list = await cluster.adminClient.get<V1NodeList>("/api/v1/nodes");
    expect(list.items.map((n) => n.metadata?.name)).toContain("kube-test-node");
  });

  test("lists Nodes with a service-account bearer token bound by RBAC", async () => {
    const conn = await cluster.serviceAccountConnection("kube-system", "node-reader");
    const client = new KubeClient(conn);
    await expect(client.get("/api/v1/nodes")).rejects.toMatchObject({ status: 403 });
    await cluster.apply([
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRole",
        metadata: { name: "node-reader" },
        rules: [{ apiGroups: [""], resources: ["nodes"], verbs: ["list"] }],
      } as never,
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        metadata: { name: "node-reader" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "node-reader" },
        subjects: [{ kind: "ServiceAccount", name: "node-reader", namespace: "kube-system" }],
      } as never,
    ]);
    await waitFor(
      async () => (await client.get<V1NodeList>("/api/v1/nodes").catch(() => undefined)) !== undefined,
      10_000,
    );
    const list = await client.get<V1NodeList>("/api/v1/nodes");
    expect(list.items.length).toBeGreaterThan(0);
    client.close();
  });

  test("refuses a server whose certificate is not signed by the configured CA", async () => {
    const other = await createCA("some-other-ca");
    const client = new KubeClient({ ...cluster.admin, ca: other.cert });
    const err = await client.get("/api/v1/nodes").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(KubeError);
    expect(String((err as Error).message).toLowerCase()).toMatch(/certificate|self.signed|verify/);
    client.close();
  });

  test("is refused (401) with a client certificate from another CA", async () => {
    const other = await createCA("rogue-client-ca");
    const leaf = await other.issue({ cn: "test-admin", o: ["system:masters"], usage: "client" });
    const client = new KubeClient({ ...cluster.admin, cert: leaf.cert, key: leaf.key });
    await expect(client.get("/api/v1/nodes")).rejects.toMatchObject({ status: 401 });
    client.close();
  });

  test("maps API errors to KubeError with status and reason", async () => {
    const err = await cluster.adminClient.get("/api/v1/nodes/does-not-exist").catch((e: unknown) => e);
    expect(isNotFound(err)).toBe(true);
    expect((err as KubeError).reason).toBe("NotFound");
  });

  test("a write with discardAnswer resolves to undefined once written; its errors are decoded as ever", async () => {
    const path = "/api/v1/nodes/kube-test-node";
    const answer = await cluster.adminClient.patch(
      path,
      { metadata: { labels: { "example.com/discarded": "yes" } } },
      PATCH.merge,
      { discardAnswer: true },
    );
    expect(answer).toBeUndefined();
    const node = await cluster.adminClient.get<V1Node>(path);
    expect(node.metadata?.labels?.["example.com/discarded"]).toBe("yes");
    // The connection stays usable after the drained answer, and a refused write still throws.
    const err = await cluster.adminClient
      .patch("/api/v1/nodes/does-not-exist", { metadata: { labels: { a: "b" } } }, PATCH.merge, {
        discardAnswer: true,
      })
      .catch((e: unknown) => e);
    expect(isNotFound(err)).toBe(true);
    expect((err as KubeError).message).toContain("does-not-exist");
  });

  test("a write with resourceVersionOnly resolves to the written object's resourceVersion, as the API server sets it", async () => {
    const path = "/api/v1/nodes/kube-test-node";
    for (const value of ["one", "two"]) {
      const answer = await cluster.adminClient.patch<{ metadata: { resourceVersion?: string } }>(
        path,
        { metadata: { annotations: { "example.com/rv-only": value } } },
        PATCH.merge,
        { resourceVersionOnly: true },
      );
      const node = await cluster.adminClient.get<V1Node>(path);
      expect(node.metadata?.annotations?.["example.com/rv-only"]).toBe(value);
      expect(answer).toEqual({ metadata: { resourceVersion: node.metadata?.resourceVersion as string } });
    }
  });

  test("watch() streams ADDED and MODIFIED events from a resourceVersion", async () => {
    const list = await cluster.adminClient.get<V1NodeList>("/api/v1/nodes");
    const ac = new AbortController();
    const seen: string[] = [];
    const reader = (async () => {
      for await (const ev of cluster.adminClient.watch<V1Node>("/api/v1/nodes", {
        resourceVersion: list.metadata?.resourceVersion as string,
        signal: ac.signal,
      })) {
        if (ev.type === "BOOKMARK") continue;
        seen.push(
          `${ev.type}:${ev.object.metadata?.name}:${ev.object.metadata?.labels?.["watch-test"] ?? ""}`,
        );
        if (seen.length >= 1) ac.abort();
      }
    })();
    await cluster.adminClient.patch(
      "/api/v1/nodes/kube-test-node",
      { metadata: { labels: { "watch-test": "x" } } },
      PATCH.merge,
    );
    await reader;
    expect(seen).toEqual(["MODIFIED:kube-test-node:x"]);
  });
});

describe("Informer", () => {
  test("with keep: caches only what keep accepts, hands every event to the handlers, and drops a cached copy keep now refuses", async () => {
    type Cm = { metadata: { name: string; resourceVersion?: string }; state: string };
    const path = "/api/v1/namespaces/default/configmaps";
    const cm = (name: string, state: string) => ({
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name, labels: { "example.com/informer": "keep" } },
      data: { state },
    });
    await cluster.adminClient.create(path, cm("keep-a", "pending"));
    await cluster.adminClient.create(path, cm("keep-b", "done"));
    const informer = new Informer<Cm>(cluster.adminClient, {
      path,
      labelSelector: "example.com/informer=keep",
      transform: (raw) => {
        const o = raw as { metadata: { name: string; resourceVersion: string }; data?: { state?: string } };
        return { metadata: o.metadata, state: o.data?.state ?? "" };
      },
      keep: (o) => o.state === "pending",
    });
    const seen: string[] = [];
    informer.addHandlers({
      onAdd: (o) => seen.push(`add ${o.metadata.name} ${o.state}`),
      onUpdate: (old, o) => seen.push(`update ${o.metadata.name} ${old.state}->${o.state}`),
      onDelete: (o) => seen.push(`delete ${o.metadata.name} ${o.state}`),
    });
    informer.start();
    try {
      await informer.waitForSync();
      expect(seen.sort()).toEqual(["add keep-a pending", "add keep-b done"]);
      expect(informer.get("keep-a")?.state).toBe("pending");
      expect(informer.get("keep-b")).toBeUndefined();
      expect(informer.size).toBe(1);
      await cluster.adminClient.patch(`${path}/keep-a`, { data: { state: "done" } });
      await waitFor(
        () => seen.includes("update keep-a pending->done"),
        10_000,
        () => seen.join("; "),
      );
      expect(informer.get("keep-a")).toBeUndefined();
      expect(informer.size).toBe(0);
      // A refused object that changes again comes as an add: nothing of it was cached.
      await cluster.adminClient.patch(`${path}/keep-b`, { data: { state: "done", note: "x" } });
      await waitFor(
        () => seen.filter((e) => e === "add keep-b done").length === 2,
        10_000,
        () => seen.join("; "),
      );
      await cluster.adminClient.delete(`${path}/keep-a`);
      await waitFor(
        () => seen.includes("delete keep-a done"),
        10_000,
        () => seen.join("; "),
      );
    } finally {
      await informer.stop();
      await cluster.adminClient.delete(`${path}/keep-b`).catch(() => undefined);
      await cluster.adminClient.delete(`${path}/keep-a`).catch(() => undefined);
    }
  });
});

describe("configuration loading", () => {
  test("kubeconfigFromFile() reads inline data, the current context and a token", () => {
    const path = join(cluster.dir, "token.kubeconfig");
    writeKubeconfig(path, {
      server: cluster.url,
      ca: cluster.admin.ca as string,
      auth: { kind: "token", token: "abc" },
    });
    const conn = kubeconfigFromFile(path);
    expect(conn.server).toBe(cluster.url);
    expect(conn.ca).toBe(cluster.admin.ca as string);
    expect(conn.auth).toEqual({ kind: "token", token: "abc" });
  });

  test("kubeconfigFromFile() names the file when it is broken", () => {
    const path = join(cluster.dir, "broken.kubeconfig");
    writeFileSync(path, "current-context: nope\ncontexts: []\n");
    expect(() => kubeconfigFromFile(path)).toThrow(
      `Cannot load kubeconfig ${path}: context "nope" not found`,
    );
  });

  test("inClusterConfig() uses KUBERNETES_SERVICE_HOST/PORT, the token file and the CA", async () => {
    const dir = join(cluster.dir, "sa");
    mkdirSync(dir, { recursive: true });
    const sa = await cluster.serviceAccountConnection("kube-system", "in-cluster");
    writeFileSync(join(dir, "token"), (sa.auth as { token: string }).token);
    writeFileSync(join(dir, "ca.crt"), cluster.admin.ca as string);
    writeFileSync(join(dir, "namespace"), "kube-system\n");
    const port = new URL(cluster.url).port;
    const conn = inClusterConfig(
      { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: port },
      dir,
    );
    expect(conn.namespace).toBe("kube-system");
    const client = new KubeClient(conn);
    // Authenticated as the service account: RBAC forbids, which proves the token was sent and accepted.
    const err = await client.get("/api/v1/secrets").catch((e: unknown) => e);
    expect((err as KubeError).status).toBe(403);
    expect((err as KubeError).message).toContain("system:serviceaccount:kube-system:in-cluster");
    client.close();
  });

  test("loadConnection() without --kubeconfig outside a pod says what to do", () => {
    expect(() => loadConnection({}, {})).toThrow(/KUBERNETES_SERVICE_HOST.*--kubeconfig/);
  });
});

describe("simulated kubelet", () => {
  test("registers a tainted Node with the provided-node-ip annotation", async () => {
    const node = await kubelet.node();
    // The API server's TaintNodesByCondition admission adds node.kubernetes.io/not-ready too (no
    // kube-controller-manager runs here to lift it).
    expect(node.spec?.taints).toContainEqual({
      key: "node.cloudprovider.kubernetes.io/uninitialized",
      value: "true",
      effect: "NoSchedule",
    });
    expect(node.metadata?.annotations?.["alpha.kubernetes.io/provided-node-ip"]).toBe("10.5.0.2");
    expect(node.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
  });

  test("its serving CSR carries the requester stamped by the API server", async () => {
    const csr = await kubelet.submitServingCSR();
    const stored = await cluster.adminClient.get<V1CertificateSigningRequest>(
      `/apis/certificates.k8s.io/v1/certificatesigningrequests/${csr.metadata?.name}`,
    );
    expect(stored.spec.username).toBe("system:node:kube-test-node");
    expect(stored.spec.groups).toContain("system:nodes");
    expect(stored.spec.signerName).toBe("kubernetes.io/kubelet-serving");
  });

  test("cannot modify another node (Node authorizer + NodeRestriction are on)", async () => {
    await cluster.adminClient.create("/api/v1/nodes", { metadata: { name: "someone-else" } });
    const err = await kubelet.client
      .patch("/api/v1/nodes/someone-else", { metadata: { labels: { x: "y" } } })
      .catch((e: unknown) => e);
    expect((err as KubeError).status).toBe(403);
  });
});

describe("compiled binary", () => {
  test("connects through --kubeconfig and logs the server version", async () => {
    // node-csr-approval alone needs no talosconfig (CSR-only mode), so only Kubernetes access is exercised.
    const args = ["--controllers=node-csr-approval", "--leader-elect=false", "--secure-port=0"];
    const proc = Bun.spawn([ccmBinary(), `--kubeconfig=${cluster.adminKubeconfig}`, "--v=2", ...args], {
      stdout: "pipe",
      stderr: "pipe",
    });
    const deadline = setTimeout(() => proc.kill(), 20_000);
    let stderr = "";
    const reader = proc.stderr.getReader();
    while (!/Connected to the Kubernetes API server/.test(stderr)) {
      const { value, done } = await reader.read();
      if (done) break;
      stderr += new TextDecoder().decode(value);
    }
    proc.kill();
    clearTimeout(deadline);
    await proc.exited;
    // The version this test bed's API server reports (tests/support/kubematrix.ts runs several).
    const line = stderr.split("\n").find((l) => l.includes('"Connected to the Kubernetes API server"'));
    expect(line).toContain(`version="${cluster.version.gitVersion}"`);
    expect(cluster.version.gitVersion).toMatch(/^v1\.3\d\.\d+$/);
  });
});
