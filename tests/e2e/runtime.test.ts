// The controller-manager runtime with the compiled binary against a real API server: the reference
// DaemonSet's arguments, controller selection, flag errors, secure serving with delegated authn/authz,
// leader election between two replicas (writes counted in the API server's audit log), SIGKILL and
// SIGTERM takeovers, lost leadership, and cloud-config reload.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KubeClient } from "../../lib/kube.ts";
import { CCM_RESOURCES } from "../../lib/manifests.ts";
import { fileRss } from "../../lib/pagetrim.ts";
import { FakeApid } from "../support/apid.ts";
import { MemoryCgroup } from "../support/bench-cgroup.ts";
import { freePort, TestCluster, waitFor, writeKubeconfig } from "../support/cluster.ts";
import { loadFixture } from "../support/fixtures.ts";
import { SimulatedKubelet } from "../support/kubelet.ts";
import { createCA } from "../support/pki.ts";
import { CcmProcess, ccmProcess } from "../support/process.ts";

let cluster: TestCluster;
let apid: FakeApid;
let talosconfig: string;
let cloudConfig: string;
const kubelets: SimulatedKubelet[] = [];
const procs: CcmProcess[] = [];

beforeAll(async () => {
  cluster = await TestCluster.start({ audit: true });
  const nodes = ["aws", "hcloud", "nocloud"].map(loadFixture);
  apid = await FakeApid.start({ nodes });
  talosconfig = await apid.writeTalosconfig(join(cluster.dir, "talosconfig"));
  cloudConfig = join(cluster.dir, "ccm-config.yaml");
  writeFileSync(cloudConfig, "global:\n");
  for (const n of nodes) {
    kubelets.push(await SimulatedKubelet.register(cluster, { name: n.name, ips: n.nodeIPs, heartbeatMs: 0 }));
  }
});

afterAll(async () => {
  for (const p of procs) await p.stop("SIGKILL");
  for (const k of kubelets) k.close();
  await apid?.stop();
  await cluster?.stop();
});

/** A kubeconfig for a distinct admin user, so the audit log tells replicas apart. */
async function kubeconfigFor(user: string): Promise<string> {
  const conn = await cluster.userConnection(user, ["system:masters"]);
  return writeKubeconfig(join(cluster.dir, `${user}.kubeconfig`), conn);
}

/** Runs a raw command line: these tests are about the flags themselves (see ccmProcess elsewhere). */
function ccm(args: string[], env: Record<string, string> = {}): CcmProcess {
  const p = new CcmProcess(args, { env: { TALOSCONFIG: talosconfig, ...env } });
  procs.push(p);
  return p;
}

const insecure = { tls: { rejectUnauthorized: false } } as const;

async function get(port: number, path: string, token?: string): Promise<Response> {
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  return fetch(`https://127.0.0.1:${port}${path}`, { ...insecure, headers });
}

async function lease(name: string): Promise<{ holderIdentity?: string; leaseTransitions?: number }> {
  const l = await cluster.adminClient.get<{ spec: { holderIdentity?: string; leaseTransitions?: number } }>(
    `/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/${name}`,
  );
  return l.spec;
}

const WRITE_VERBS = new Set(["create", "update", "patch", "delete", "deletecollection"]);
function writesBy(user: string, since = 0): number {
  return cluster
    .auditEvents()
    .filter((e) => e.user.username === user && WRITE_VERBS.has(e.verb))
    .filter((e) => Date.parse(e.requestReceivedTimestamp) >= since).length;
}

describe("command line", () => {
  test("the reference DaemonSet's arguments start it, serve health and hold the named lease", async () => {
    const port = await freePort();
    const p = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--v=2",
      "--cloud-provider=talos",
      `--cloud-config=${cloudConfig}`,
      "--controllers=cloud-node,node-csr-approval",
      "--leader-elect-resource-name=cloud-controller-manager-talos",
      "--use-service-account-credentials",
      `--secure-port=${port}`,
      "--authorization-always-allow-paths=/healthz,/livez,/readyz,/metrics",
    ]);
    await waitFor(async () => (await get(port, "/healthz").catch(() => undefined))?.status === 200, 10_000);
    await waitFor(async () => (await get(port, "/readyz").catch(() => undefined))?.status === 200, 10_000);
    await p.waitForLog(/Successfully acquired lease/);
    expect((await lease("cloud-controller-manager-talos")).holderIdentity).toMatch(/_[0-9a-f-]{36}$/);
    const metrics = await (await get(port, "/metrics")).text();
    expect(metrics).toContain('leader_election_master_status{name="cloud-controller-manager-talos"} 1');
    expect(metrics).toContain("process_resident_memory_bytes");
    const started = Date.now();
    expect(await p.stop("SIGTERM")).toBe(0);
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await lease("cloud-controller-manager-talos")).holderIdentity ?? "").toBe("");
  });

  test("--version=raw prints the binary's version.Info as upstream's verflag does, --help says so", async () => {
    const p = ccm(["--version=raw"]);
    expect(await p.proc.exited).toBe(0);
    expect(p.output.trim()).toMatch(
      /^version\.Info\{Major:"\d+", Minor:"\d+", EmulationMajor:"", EmulationMinor:"", MinCompatibilityMajor:"", MinCompatibilityMinor:"", GitVersion:"v\d+\.\d+\.\d+[^"]*", GitCommit:"[^"]+", GitTreeState:"", BuildDate:"", GoVersion:"", Compiler:"bun", Platform:"linux\/(amd64|arm64)"\}$/,
    );
    const help = ccm(["--help"]);
    expect(await help.proc.exited).toBe(0);
    expect(help.output).toContain("--version=raw prints details");
  });

  test("an unknown flag exits 2 naming the closest known flag", async () => {
    const p = ccm([`--kubeconfig=${cluster.adminKubeconfig}`, "--leader-elect-resouce-name=x"]);
    expect(await p.proc.exited).toBe(2);
    expect(p.output).toContain("did you mean --leader-elect-resource-name?");
  });

  test("an upstream flag this project does not implement is accepted with a warning", async () => {
    const p = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--controllers=node-csr-approval",
      "--leader-elect=false",
      "--secure-port=0",
      "--configure-cloud-routes=false",
      "--profiling",
    ]);
    await p.waitForLog(/Controllers enabled/);
    expect(p.output).toMatch(/W\d{4} .*--configure-cloud-routes/);
    expect(p.output).toMatch(/W\d{4} .*--profiling/);
    expect(await p.stop()).toBe(0);
  });

  test("--controllers resolves * (the Go default set), -name and aliases; no flag means *; an unknown name exits 2", async () => {
    const p = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--controllers=*,-cloud-node,certificatesigningrequest-approving-controller",
      "--leader-elect=false",
      "--secure-port=0",
    ]);
    const m = await p.waitForLog(/"Controllers enabled" controllers="([^"]*)"/);
    // `*` is the Go CCM's default set, cloud-node and cloud-node-lifecycle.
    expect(m[1]).toBe("cloud-node-lifecycle,node-csr-approval");
    expect(await p.stop()).toBe(0);
    const byDefault = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--leader-elect=false",
      "--secure-port=0",
    ]);
    const d = await byDefault.waitForLog(/"Controllers enabled" controllers="([^"]*)"/);
    expect(d[1]).toBe("cloud-node,cloud-node-lifecycle");
    expect(await byDefault.stop()).toBe(0);
    const bad = ccm([`--kubeconfig=${cluster.adminKubeconfig}`, "--controllers=cloud-nod"]);
    expect(await bad.proc.exited).toBe(2);
    expect(bad.output).toContain("cloud-node");
  });

  test("CSR-only mode starts without any talosconfig", async () => {
    const p = ccmProcess({
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      env: { HOME: cluster.dir },
    });
    procs.push(p);
    await p.waitForLog(/node-csr-approval checks IP SANs against Node status only/);
    await p.waitForLog(/Starting controller.*node-csr-approval/);
    expect(await p.stop()).toBe(0);
  });

  test("run re-executes itself (same PID) with JSC's garbage collector paced and its optimizing JIT tiers off; an operator's own setting wins", async () => {
    const environ = (p: CcmProcess) => readFileSync(`/proc/${p.pid}/environ`, "utf8").split("\0");
    const paced = ccmProcess({
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      // JSC prints the options that differ from its defaults, so the log shows what it really read.
      env: { HOME: cluster.dir, BUN_JSC_dumpOptions: "1" },
    });
    procs.push(paced);
    await paced.waitForLog(/Starting controller.*node-csr-approval/);
    expect(environ(paced)).toContain("BUN_JSC_heapGrowthFunctionThresholdInMB=4294967295");
    expect(environ(paced)).toContain("BUN_JSC_useDFGJIT=false");
    expect(paced.output).toMatch(/useDFGJIT=false \(default: true\)/);
    expect(paced.output).toMatch(/heapGrowthFunctionThresholdInMB=4294967295 \(default: \d+\)/);
    expect(paced.output).toMatch(/smallHeapGrowthFactor=1\.25 \(default: 2\)/);
    expect(paced.output).toMatch(/mediumHeapGrowthFactor=1\.25 \(default: 1\.5\)/);
    expect(environ(paced)).toContain(`HOME=${cluster.dir}`); // the rest of the environment is kept
    expect(paced.output.match(/Starting controller.*node-csr-approval/g)?.length).toBe(1); // one process ran
    expect(await paced.stop()).toBe(0);

    const own = ccmProcess({
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      env: { HOME: cluster.dir, BUN_JSC_heapGrowthFunctionThresholdInMB: "16384", BUN_JSC_useDFGJIT: "true" },
    });
    procs.push(own);
    await own.waitForLog(/Starting controller.*node-csr-approval/);
    expect(environ(own)).toContain("BUN_JSC_heapGrowthFunctionThresholdInMB=16384");
    expect(environ(own)).toContain("BUN_JSC_useDFGJIT=true");
    expect(environ(own)).not.toContain("BUN_JSC_useDFGJIT=false");
    expect(await own.stop()).toBe(0);
  });

  test("inside a cgroup with the shipped memory limit, JSC is told the limit is the RAM it has", async () => {
    // A child of this test process's own memory cgroup (v1 or v2) with the limit the shipped
    // manifests and chart set, made as the bench's --memory-limit makes it.
    const mi = /^(\d+)Mi$/.exec(CCM_RESOURCES.limits.memory)?.[1];
    if (mi === undefined)
      throw new Error(`Cannot read the shipped memory limit ${CCM_RESOURCES.limits.memory}`);
    const cgroup = MemoryCgroup.create(Number(mi) * 2 ** 20);
    let p: CcmProcess | undefined;
    try {
      p = new CcmProcess(
        [
          `--kubeconfig=${cluster.adminKubeconfig}`,
          "--controllers=node-csr-approval",
          "--secure-port=0",
          "--leader-elect=false",
        ],
        { env: { HOME: cluster.dir }, cgroup: cgroup.dir },
      );
      procs.push(p);
      await p.waitForLog(/Starting controller.*node-csr-approval/);
      const environ = readFileSync(`/proc/${p.pid}/environ`, "utf8").split("\0");
      expect(environ).toContain(`BUN_JSC_forceRAMSize=${cgroup.limitBytes}`);
      expect(readFileSync(join(cgroup.dir, "cgroup.procs"), "utf8").trim()).toBe(String(p.pid));
      expect(await p.stop()).toBe(0);
      expect(cgroup.oomKills()).toBe(0);
    } finally {
      // A cgroup with a process in it cannot be removed: a failed check must not leave one behind.
      await p?.stop("SIGKILL");
      await cgroup.remove();
    }
    expect(existsSync(cgroup.dir)).toBe(false);
  });

  test("once quiet, it gives its executable's pages back to the kernel (file-backed RSS drops)", async () => {
    const fileBytes = (p: CcmProcess) => fileRss(readFileSync(`/proc/${p.pid}/status`, "utf8"));
    const p = ccmProcess({
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      args: ["--v=4"],
      env: { HOME: cluster.dir },
    });
    procs.push(p);
    await p.waitForLog(/Starting controller.*node-csr-approval/);
    const before = fileBytes(p);
    // The first quiet 5 s tick after start-up trims; the log line carries both readings.
    const m = await p.waitForLog(
      /Returned code pages to the kernel.*fileRssMiB="?([\d.]+)"?.*afterMiB="?([\d.]+)"?/,
    );
    const [trimmedFrom, trimmedTo] = [Number(m[1]), Number(m[2])];
    expect(trimmedFrom).toBeGreaterThan(20);
    expect(trimmedTo).toBeLessThan(trimmedFrom / 2);
    expect(fileBytes(p)).toBeLessThan(before * 0.75); // what came back since is what it uses
    expect(await p.stop()).toBe(0);
  });

  test("cloud-node without a talosconfig refuses to start and says how to enable Talos API access", async () => {
    const p = ccmProcess({ kubeconfig: cluster.adminKubeconfig, env: { HOME: cluster.dir } });
    procs.push(p);
    expect(await p.proc.exited).toBe(1);
    expect(p.output).toContain("kubernetesTalosAPIAccess");
    expect(p.output).toContain("os:reader");
  });
});

describe("secure serving", () => {
  let port: number;
  let p: CcmProcess;

  beforeAll(async () => {
    port = await freePort();
    p = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--controllers=node-csr-approval",
      "--leader-elect=false",
      `--secure-port=${port}`,
    ]);
    await waitFor(async () => (await get(port, "/healthz").catch(() => undefined))?.status === 200, 10_000);
  });

  afterAll(async () => {
    await p.stop();
  });

  test("always-allowed paths are open", async () => {
    expect((await get(port, "/healthz")).status).toBe(200);
    expect(await (await get(port, "/livez")).text()).toBe("ok");
    // Ready once the Node cache has synced, which may come a moment after /healthz answers.
    await waitFor(async () => (await get(port, "/readyz?verbose")).status === 200, 10_000);
  });

  test("/metrics without a token is refused (401)", async () => {
    expect((await get(port, "/metrics")).status).toBe(401);
    expect((await get(port, "/metrics", "not-a-real-token")).status).toBe(401);
  });

  test("/metrics with a token RBAC does not allow is forbidden (403)", async () => {
    const conn = await cluster.serviceAccountConnection("kube-system", "no-metrics");
    const token = (conn.auth as { token: string }).token;
    expect((await get(port, "/metrics", token)).status).toBe(403);
  });

  test("/metrics with an RBAC-allowed service-account token is served", async () => {
    const conn = await cluster.serviceAccountConnection("kube-system", "prometheus");
    await cluster.allowMetrics("metrics-reader", [
      { kind: "ServiceAccount", name: "prometheus", namespace: "kube-system" },
    ]);
    const token = (conn.auth as { token: string }).token;
    let res: Response | undefined;
    await waitFor(async () => {
      res = await get(port, "/metrics", token);
      return res.status === 200;
    }, 15_000);
    const text = await (res as Response).text();
    expect(text).toContain("# TYPE rest_client_requests_total counter");
  });

  test("a flood of bogus tokens is answered 401/429 and never starves the controllers' client", async () => {
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) => get(port, "/metrics", `bogus-${i}-${crypto.randomUUID()}`)),
    );
    const codes = new Set(answers.map((r) => r.status));
    expect([...codes].every((c) => c === 401 || c === 429)).toBe(true);
    // The CSR controller keeps working meanwhile: its informer is healthy and /readyz stays green.
    expect((await get(port, "/readyz")).status).toBe(200);
    expect(p.exitCode).toBeNull();
  });

  test("--tls-min-version=VersionTLS13 refuses a TLS 1.2 client", async () => {
    const port3 = await freePort();
    const q = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--controllers=node-csr-approval",
      "--leader-elect=false",
      `--secure-port=${port3}`,
      "--tls-min-version=VersionTLS13",
    ]);
    await waitFor(async () => (await get(port3, "/healthz").catch(() => undefined))?.status === 200, 10_000);
    const handshake = async (version: string) => {
      const s = Bun.spawn(["openssl", "s_client", version, "-connect", `127.0.0.1:${port3}`, "-brief"], {
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      const out = (await new Response(s.stdout).text()) + (await new Response(s.stderr).text());
      await s.exited;
      return /Protocol version: (\S+)/.exec(out)?.[1] ?? "refused";
    };
    expect(await handshake("-tls1_3")).toBe("TLSv1.3");
    expect(await handshake("-tls1_2")).toBe("refused");
    expect(await q.stop()).toBe(0);
  });

  test("serves a certificate from --tls-cert-file and verifies against its CA", async () => {
    const leaf = await cluster.ca.issue({ cn: "ccm", usage: "server", ips: ["127.0.0.1"] });
    const cert = join(cluster.dir, "serving.crt");
    const key = join(cluster.dir, "serving.key");
    writeFileSync(cert, leaf.cert);
    writeFileSync(key, leaf.key);
    const port2 = await freePort();
    const q = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--controllers=node-csr-approval",
      "--leader-elect=false",
      `--secure-port=${port2}`,
      `--tls-cert-file=${cert}`,
      `--tls-private-key-file=${key}`,
    ]);
    await waitFor(
      async () =>
        (
          await fetch(`https://127.0.0.1:${port2}/healthz`, { tls: { ca: cluster.ca.cert } }).catch(
            () => undefined,
          )
        )?.status === 200,
      10_000,
    );
    expect(await q.stop()).toBe(0);
  });
});

describe("leader election", () => {
  const timings = [
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
  ];

  /**
   * Two replicas on Lease `lease`, each as its own user: the first once it acquired the Lease, the
   * second once it saw the first as the leader.
   */
  async function leaderAndStandby(lease: string, users: [string, string]) {
    const kubeconfigs = await Promise.all(users.map(kubeconfigFor));
    const [leader, standby] = kubeconfigs.map((kc) => [
      `--kubeconfig=${kc}`,
      `--leader-elect-resource-name=${lease}`,
      "--secure-port=0",
      ...timings,
    ]) as [string[], string[]];
    const a = ccm(leader);
    await a.waitForLog(/Successfully acquired lease/);
    const b = ccm(standby);
    await b.waitForLog(/New leader elected/);
    return [a, b] as const;
  }

  test("two replicas never write at the same time; a SIGKILLed leader is replaced within the lease duration", async () => {
    const [a, b] = await leaderAndStandby("le-kill", ["ccm-a", "ccm-b"]);
    // The leader renews its lease once a retry period and the standby tries it as often: three
    // renewals after the standby saw the leader are three tries the standby lost.
    const standby = Date.now();
    const renewals = () =>
      cluster
        .auditEvents()
        .filter(
          (e) =>
            e.user.username === "ccm-a" &&
            e.objectRef?.resource === "leases" &&
            WRITE_VERBS.has(e.verb) &&
            Date.parse(e.requestReceivedTimestamp) >= standby,
        ).length;
    await waitFor(
      () => renewals() >= 3,
      15_000,
      () => `${renewals()} lease renewals by ccm-a`,
    );
    expect(writesBy("ccm-a")).toBeGreaterThan(0);
    expect(writesBy("ccm-b")).toBe(0);
    expect(b.output).not.toContain("Successfully acquired lease");

    const killed = Date.now();
    await a.stop("SIGKILL");
    await b.waitForLog(/Successfully acquired lease/, 15_000);
    const takeoverMs = Date.now() - killed;
    // Expiry is judged on the standby's own clock from its last observation of a renewal, which is at
    // most one jittered retry period (≤ 2.2 s, client-go's JitterFactor) old when the leader dies; it
    // then polls once per jittered retry period.
    expect(takeoverMs).toBeLessThanOrEqual(6000 + 2 * 2200);
    expect(writesBy("ccm-a", killed + 100)).toBe(0);
    expect(writesBy("ccm-b")).toBeGreaterThan(0);
    await b.stop();
  }, 60_000);

  test("a SIGTERMed leader releases the lease and a standby takes over at once", async () => {
    const [c, d] = await leaderAndStandby("le-term", ["ccm-c", "ccm-d"]);
    const stopped = Date.now();
    expect(await c.stop("SIGTERM")).toBe(0);
    expect(Date.now() - stopped).toBeLessThan(5000);
    await d.waitForLog(/Successfully acquired lease/, 10_000);
    // Released: no waiting for the 6 s lease to expire, only the standby's next poll.
    expect(Date.now() - stopped).toBeLessThan(3000);
    expect(await d.stop()).toBe(0);
  }, 60_000);

  test("a leader that loses its lease stops and exits non-zero", async () => {
    const p = ccm([
      `--kubeconfig=${cluster.adminKubeconfig}`,
      "--leader-elect-resource-name=le-lost",
      "--secure-port=0",
      ...timings,
    ]);
    await p.waitForLog(/Successfully acquired lease/);
    const path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/le-lost";
    const current = await cluster.adminClient.get<{ spec: Record<string, unknown> }>(path);
    await cluster.adminClient.update(path, {
      ...current,
      spec: {
        ...current.spec,
        holderIdentity: "intruder",
        leaseDurationSeconds: 60,
        renewTime: new Date().toISOString().replace(/Z$/, "000Z"),
      },
    });
    expect(await p.proc.exited).toBe(1);
    expect(p.output).toContain("Leader election lost");
  }, 30_000);
});

describe("secure serving with client certificates (--client-ca-file, --requestheader-*)", () => {
  test("a cluster-CA certificate and a front proxy's header are users the real SubjectAccessReview judges", async () => {
    const proxyCA = await createCA("front-proxy-ca");
    const proxyCaFile = join(cluster.dir, "front-proxy-ca.crt");
    writeFileSync(proxyCaFile, proxyCA.cert);
    await cluster.allowMetrics("metrics-reader-x509", [{ kind: "Group", name: "metrics-readers" }]);
    const port = await freePort();
    const p = ccmProcess({
      kubeconfig: cluster.adminKubeconfig,
      controllers: "node-csr-approval",
      securePort: port,
      args: [
        `--client-ca-file=${join(cluster.dir, "ca.crt")}`,
        `--requestheader-client-ca-file=${proxyCaFile}`,
        "--requestheader-allowed-names=front-proxy-client",
      ],
    });
    procs.push(p);
    await waitFor(async () => (await get(port, "/healthz").catch(() => undefined))?.status === 200, 10_000);
    const withCert = (cert: { cert: string; key: string }, headers: Record<string, string> = {}) =>
      fetch(`https://127.0.0.1:${port}/metrics`, { headers, tls: { ...cert, rejectUnauthorized: false } });
    const reader = await cluster.ca.issue({ cn: "prometheus-x509", o: ["metrics-readers"], usage: "client" });
    const stranger = await cluster.ca.issue({ cn: "stranger", usage: "client" });
    const proxy = await proxyCA.issue({ cn: "front-proxy-client", usage: "client" });
    // RBAC takes a moment to reach the authorizer's cache.
    await waitFor(async () => (await withCert(reader)).status === 200, 15_000);
    expect((await withCert(stranger)).status).toBe(403);
    expect(
      (await withCert(proxy, { "X-Remote-User": "someone", "X-Remote-Group": "metrics-readers" })).status,
    ).toBe(200);
    expect((await withCert(proxy, { "X-Remote-User": "someone" })).status).toBe(403);
    // The cluster CA's certificate is its own user: its headers are ignored.
    expect(
      (await withCert(stranger, { "X-Remote-User": "x", "X-Remote-Group": "metrics-readers" })).status,
    ).toBe(403);
    expect(await p.stop()).toBe(0);
  });
});

/** The CCM (node-csr-approval) on cloud config `file`, serving /healthz and /metrics, once started. */
async function reloadingCcm(file: string): Promise<{ p: CcmProcess; port: number }> {
  const port = await freePort();
  const p = ccm([
    `--kubeconfig=${cluster.adminKubeconfig}`,
    `--cloud-config=${file}`,
    "--controllers=node-csr-approval",
    "--leader-elect=false",
    `--secure-port=${port}`,
    "--authorization-always-allow-paths=/healthz,/metrics",
  ]);
  await p.waitForLog(/Controllers enabled/);
  return { p, port };
}

describe("cloud config reload", () => {
  test("a valid new file takes effect without a restart; an invalid one is logged, counted and ignored", async () => {
    const file = join(cluster.dir, "reload.yaml");
    writeFileSync(file, "global:\n  preferIPv6: false\n");
    const { p, port } = await reloadingCcm(file);
    writeFileSync(file, "global:\n  preferIPv6: true\n");
    await p.waitForLog(/Reloaded cloud config/, 10_000);
    writeFileSync(
      file,
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: platform, operator: Regexp, values: ['(']}\n",
    );
    await p.waitForLog(/Cannot reload cloud config, keeping the current one/, 10_000);
    await waitFor(async () => {
      const text = await (await get(port, "/metrics")).text();
      return text.includes('talosccm_cloud_config_reloads_total{result="error"} 1');
    }, 5000);
    expect(p.exitCode).toBeNull();
    expect(await p.stop()).toBe(0);
  }, 30_000);
});

describe("cloud config reload fails closed", () => {
  test("an unknown key inside a rule, or a file over 1 MiB, is refused on reload and the previous config kept", async () => {
    const file = join(cluster.dir, "reload-strict.yaml");
    writeFileSync(
      file,
      "transformations:\n  - nodeSelector: [{matchExpressions: [{key: platform, operator: In, values: [metal]}]}]\n    labels: {example.com/metal: 'yes'}\n",
    );
    const { p, port } = await reloadingCcm(file);
    const reloads = async (result: string) => {
      const text = await (await get(port, "/metrics")).text();
      return Number(
        text.match(new RegExp(`talosccm_cloud_config_reloads_total\\{result="${result}"\\} (\\d+)`))?.[1] ??
          0,
      );
    };
    // Misspelled, the selector would be ignored and the rule would label every node.
    writeFileSync(
      file,
      "transformations:\n  - nodeSelecter: [{matchExpressions: [{key: platform, operator: In, values: [metal]}]}]\n    labels: {example.com/metal: 'yes'}\n",
    );
    const refused = await p.waitForLog(/Cannot reload cloud config, keeping the current one.*/, 10_000);
    expect(refused[0]).toMatch(
      /transformations\[0\]\.nodeSelecter \(line 2\): unknown key .*closest known key: .*nodeSelector/,
    );
    await waitFor(async () => (await reloads("error")) === 1, 5000);
    writeFileSync(file, `# ${"x".repeat(1024 * 1024)}\n`);
    await waitFor(async () => (await reloads("error")) === 2, 10_000);
    expect(p.output).toContain("is larger than 1048576 bytes");
    // Neither counted as a success: the config loaded at start-up is still the one in effect.
    expect(await reloads("success")).toBe(0);
    expect(p.output).not.toContain("Reloaded cloud config");
    expect(p.exitCode).toBeNull();
    expect(await p.stop()).toBe(0);
  }, 40_000);
});

describe("API client", () => {
  test("KubeClient honours --kube-api-qps as a token bucket", async () => {
    const client = new KubeClient(cluster.admin, { qps: 10, burst: 1 });
    const started = performance.now();
    await Promise.all(Array.from({ length: 6 }, () => client.get("/version")));
    // 1 immediate + 5 spaced 100 ms apart.
    expect(performance.now() - started).toBeGreaterThanOrEqual(450);
    client.close();
  });
});
