// A real Kubernetes control plane for tests: etcd and kube-apiserver started on loopback with free
// ports and a temp dir, TLS from a CA made here, Node,RBAC authorization, client-certificate and
// service-account-token authentication. Binaries come from KUBE_APISERVER/ETCD (tests/run.ts sets
// them from tests/support/testbed-bins.sh) or KUBEBUILDER_ASSETS; without them start() fails loudly.

import { generateKeyPairSync } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type {
  V1CertificateSigningRequest,
  V1CertificateSigningRequestCondition,
} from "@kubernetes/client-node";
import { type Subprocess, spawn } from "bun";
import { KubeClient } from "../../lib/kube.ts";
import type { KubeConnection } from "../../lib/kubeconfig.ts";
import { type ServerVersion, serverVersion } from "../../lib/kubeversions.ts";
import { type CA, createCA } from "./pki.ts";

/** Paths of the kube-apiserver and etcd binaries, or an error saying how to get them. */
function testbedBinaries(): { apiserver: string; etcd: string } {
  const assets = process.env.KUBEBUILDER_ASSETS;
  const apiserver = process.env.KUBE_APISERVER ?? (assets ? join(assets, "kube-apiserver") : "");
  const etcd = process.env.ETCD ?? (assets ? join(assets, "etcd") : "");
  if (!apiserver || !etcd || !existsSync(apiserver) || !existsSync(etcd)) {
    throw new Error(
      "Cannot start the test bed: kube-apiserver/etcd not found. Run the suite with `npm test` (it builds " +
        "them with tests/support/testbed-bins.sh), or set KUBEBUILDER_ASSETS or KUBE_APISERVER and ETCD.",
    );
  }
  return { apiserver, etcd };
}

// Test servers get ports below the kernel's ephemeral range: between freePort() and the server's
// bind, no outgoing connection (source port) and no listen(0) on this machine can take one. A port
// from listen(0) sits inside that range, and a CI run lost kube-apiserver's port that way.
const EPHEMERAL_LOW = (() => {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) ? low : 32768;
  } catch {
    return 32768;
  }
})();
const PORT_FLOOR = 10000;
const handedOut = new Set<number>();

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/** A free TCP port on 127.0.0.1, never handed out before in this process. */
export async function freePort(): Promise<number> {
  const span = EPHEMERAL_LOW - PORT_FLOOR;
  for (let i = 0; span > 0 && i < 500; i++) {
    const port = PORT_FLOOR + Math.floor(Math.random() * span);
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`freePort: no free port in ${PORT_FLOOR}-${EPHEMERAL_LOW - 1} on 127.0.0.1`);
}

const live = new Set<Subprocess>();
process.once("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

function tail(path: string, lines = 30): string {
  try {
    return readFileSync(path, "utf8").split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** Writes a kubeconfig file for `conn` (client certificate or token) and returns its path. */
export function writeKubeconfig(path: string, conn: KubeConnection): string {
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  const user: Record<string, string> = {};
  if (conn.cert && conn.key) {
    user["client-certificate-data"] = b64(conn.cert);
    user["client-key-data"] = b64(conn.key);
  }
  if (conn.auth.kind === "token") user.token = conn.auth.token;
  const cluster: Record<string, string> = { server: conn.server };
  if (conn.ca) cluster["certificate-authority-data"] = b64(conn.ca);
  const doc = {
    apiVersion: "v1",
    kind: "Config",
    "current-context": "test",
    clusters: [{ name: "test", cluster }],
    users: [{ name: "test", user }],
    contexts: [{ name: "test", context: { cluster: "test", user: "test" } }],
  };
  writeFileSync(path, JSON.stringify(doc, null, 2));
  return path;
}

/** Options of {@link TestCluster.start}. */
export interface ClusterOptions {
  /** Extra kube-apiserver flags, e.g. `--max-requests-inflight=10`. */
  apiserverArgs?: string[];
  /** Write an audit log of every write (create, update, patch, delete) for {@link TestCluster.auditEvents}. */
  audit?: boolean;
  /**
   * An audit policy (YAML) to log with instead of the default writes-only one; implies `audit`.
   * E.g. Metadata for every verb of one user, omitting all stages but RequestReceived, counts requests.
   */
  auditPolicy?: string;
}

/** One audited write, as the API server logged it. */
export interface AuditEvent {
  /** Present with custom policies: the same request logged at several stages shares it. */
  auditID?: string;
  stage?: string;
  verb: string;
  user: { username: string; groups?: string[] };
  objectRef?: { resource?: string; namespace?: string; name?: string; subresource?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
}

const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Metadata
`;

/** etcd + kube-apiserver, started by {@link TestCluster.start}. */
/** An events.k8s.io/v1 Event as tests read it. */
export interface EventV1 {
  reason: string;
  type: string;
  note: string;
  action: string;
  reportingController: string;
  regarding: { kind: string; name: string; uid?: string };
}

export class TestCluster {
  readonly dir: string;
  readonly ca: CA;
  readonly url: string;
  readonly admin: KubeConnection;
  readonly adminClient: KubeClient;
  readonly #opts: ClusterOptions;
  readonly #ports: { etcd: number; peer: number; apiserver: number };
  #etcd?: Subprocess;
  #apiserver?: Subprocess;
  #version: ServerVersion | undefined;

  private constructor(
    dir: string,
    ca: CA,
    admin: KubeConnection,
    ports: { etcd: number; peer: number; apiserver: number },
    opts: ClusterOptions,
  ) {
    this.dir = dir;
    this.ca = ca;
    this.url = admin.server;
    this.admin = admin;
    this.adminClient = new KubeClient(admin, { qps: 0 });
    this.#ports = ports;
    this.#opts = opts;
  }

  /**
   * Starts etcd and kube-apiserver and waits until /readyz answers 200 and the `kubernetes` Service
   * exists. A port lost to another process before the server bound it costs one more attempt on
   * fresh ports, not the test file.
   */
  static async start(opts: ClusterOptions = {}): Promise<TestCluster> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await TestCluster.#start(opts);
      } catch (err) {
        if (attempt >= 3 || !/address already in use/.test(String(err))) throw err;
        console.warn(`TestCluster: a port was taken (attempt ${attempt}), retrying on fresh ports`);
      }
    }
  }

  static async #start(opts: ClusterOptions): Promise<TestCluster> {
    testbedBinaries();
    const dir = mkdtempSync(join(tmpdir(), "talos-ccm-cluster-"));
    const ca = await createCA("test-kubernetes-ca");
    const ports = { etcd: await freePort(), peer: await freePort(), apiserver: await freePort() };
    const serving = await ca.issue({
      cn: "kube-apiserver",
      usage: "server",
      dns: ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
      ips: ["127.0.0.1", "10.96.0.1"],
    });
    writeFileSync(join(dir, "ca.crt"), ca.cert);
    writeFileSync(join(dir, "apiserver.crt"), serving.cert);
    writeFileSync(join(dir, "apiserver.key"), serving.key);
    const sa = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
    writeFileSync(join(dir, "sa.key"), sa.privateKey.export({ type: "pkcs8", format: "pem" }));
    writeFileSync(join(dir, "sa.pub"), sa.publicKey.export({ type: "spki", format: "pem" }));
    const adminCert = await ca.issue({ cn: "test-admin", o: ["system:masters"], usage: "client" });
    const admin: KubeConnection = {
      server: `https://127.0.0.1:${ports.apiserver}`,
      ca: ca.cert,
      cert: adminCert.cert,
      key: adminCert.key,
      auth: { kind: "none" },
    };
    writeKubeconfig(join(dir, "admin.kubeconfig"), admin);
    const cluster = new TestCluster(dir, ca, admin, ports, opts);
    try {
      await cluster.#startEtcd();
      await cluster.startApiserver();
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  /** Path of a kubeconfig for the admin user (system:masters). */
  get adminKubeconfig(): string {
    return join(this.dir, "admin.kubeconfig");
  }

  async #startEtcd(): Promise<void> {
    const { etcd } = testbedBinaries();
    const log = join(this.dir, "etcd.log");
    const client = `http://127.0.0.1:${this.#ports.etcd}`;
    const peer = `http://127.0.0.1:${this.#ports.peer}`;
    this.#etcd = spawn(
      [
        etcd,
        "--name=test",
        `--data-dir=${join(this.dir, "etcd")}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=test=${peer}`,
        "--unsafe-no-fsync",
        "--log-level=warn",
      ],
      { stdout: Bun.file(log), stderr: Bun.file(log) },
    );
    live.add(this.#etcd);
    const proc = this.#etcd;
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`etcd exited with ${proc.exitCode}:\n${tail(log)}`);
        return (await fetch(`${client}/health`)).ok;
      },
      30_000,
      () => `etcd did not start:\n${tail(log)}`,
    );
  }

  /** Starts (or restarts, after {@link stopApiserver}) kube-apiserver on the same port and certificates. */
  async startApiserver(): Promise<void> {
    const { apiserver } = testbedBinaries();
    const d = this.dir;
    const log = join(d, "apiserver.log");
    this.#apiserver = spawn(
      [
        apiserver,
        `--etcd-servers=http://127.0.0.1:${this.#ports.etcd}`,
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        `--secure-port=${this.#ports.apiserver}`,
        `--cert-dir=${d}`,
        `--tls-cert-file=${join(d, "apiserver.crt")}`,
        `--tls-private-key-file=${join(d, "apiserver.key")}`,
        `--client-ca-file=${join(d, "ca.crt")}`,
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        `--service-account-key-file=${join(d, "sa.pub")}`,
        `--service-account-signing-key-file=${join(d, "sa.key")}`,
        "--service-cluster-ip-range=10.96.0.0/16",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--allow-privileged=true",
        ...(this.#opts.audit || this.#opts.auditPolicy ? this.#auditArgs() : []),
        ...(this.#opts.apiserverArgs ?? []),
      ],
      { stdout: Bun.file(log), stderr: Bun.file(log) },
    );
    live.add(this.#apiserver);
    const proc = this.#apiserver;
    await waitFor(
      async () => {
        if (proc.exitCode !== null)
          throw new Error(`kube-apiserver exited with ${proc.exitCode}:\n${tail(log)}`);
        const res = await this.adminClient.request<string>("GET", "/readyz").catch(() => undefined);
        if (res === undefined) return false;
        // A ready cluster has its `kubernetes` Service: /readyz can answer before the API server's
        // bootstrap controller has created it, and node-csr-approval reads it at start.
        const svc = await this.adminClient
          .get("/api/v1/namespaces/default/services/kubernetes")
          .catch(() => undefined);
        return svc !== undefined;
      },
      90_000,
      () => `kube-apiserver did not become ready:\n${tail(log)}`,
    );
    const info = await this.adminClient.get<Record<string, unknown>>("/version");
    this.#version = serverVersion(info);
    if (!this.#version) throw new Error(`kube-apiserver's /version has no version: ${JSON.stringify(info)}`);
  }

  /**
   * The version this API server reports (its /version), so that a test asserts the behaviour of the
   * version it runs against (tests/support/kubematrix.ts says what differs).
   */
  get version(): ServerVersion {
    if (!this.#version) throw new Error("the API server has not started");
    return this.#version;
  }

  /** The pids of kube-apiserver and etcd while they run (for /proc readings). */
  get pids(): number[] {
    return [this.#apiserver?.pid, this.#etcd?.pid].filter((p): p is number => p !== undefined);
  }

  #auditArgs(): string[] {
    const policy = join(this.dir, "audit-policy.yaml");
    writeFileSync(policy, this.#opts.auditPolicy ?? AUDIT_POLICY);
    return [
      `--audit-policy-file=${policy}`,
      `--audit-log-path=${join(this.dir, "audit.log")}`,
      "--audit-log-mode=blocking",
    ];
  }

  /** Every audited write so far (needs `audit: true`), or every event of a custom `auditPolicy`. */
  auditEvents(): AuditEvent[] {
    let text = "";
    try {
      text = readFileSync(join(this.dir, "audit.log"), "utf8");
    } catch {
      return [];
    }
    // The API server may be writing a line as it is read: only lines it has ended are events.
    return text
      .slice(0, text.lastIndexOf("\n") + 1)
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as AuditEvent);
  }

  /** Stops kube-apiserver (etcd keeps running). */
  async stopApiserver(signal: "SIGTERM" | "SIGKILL" = "SIGTERM"): Promise<void> {
    const p = this.#apiserver;
    if (!p) return;
    p.kill(signal);
    await p.exited;
    live.delete(p);
    this.#apiserver = undefined as never;
  }

  /** Freezes etcd (SIGSTOP) until {@link resumeEtcd}. */
  pauseEtcd(): void {
    this.#etcd?.kill("SIGSTOP");
  }
  resumeEtcd(): void {
    this.#etcd?.kill("SIGCONT");
  }

  /** A connection authenticated by a client certificate from the cluster CA. */
  async userConnection(cn: string, groups: string[] = []): Promise<KubeConnection> {
    const leaf = await this.ca.issue({ cn, o: groups, usage: "client" });
    return { server: this.url, ca: this.ca.cert, cert: leaf.cert, key: leaf.key, auth: { kind: "none" } };
  }

  /**
   * Creates (if needed) a service account and returns a bearer-token connection for it, made with the
   * TokenRequest API.
   */
  async serviceAccountConnection(namespace: string, name: string, seconds = 3600): Promise<KubeConnection> {
    const c = this.adminClient;
    await c.create(`/api/v1/namespaces/${namespace}/serviceaccounts`, { metadata: { name } }).catch((e) => {
      if ((e as { status?: number }).status !== 409) throw e;
    });
    const tr = await c.create<{ status: { token: string } }>(
      `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
      { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: seconds } },
    );
    return { server: this.url, ca: this.ca.cert, auth: { kind: "token", token: tr.status.token } };
  }

  /** Applies a list of objects with the admin client (create, or replace when they exist). */
  async apply(
    objects: Array<{ apiVersion: string; kind: string; metadata: { name: string; namespace?: string } }>,
  ) {
    for (const obj of objects) {
      const path = await this.resourcePath(obj);
      try {
        await this.adminClient.create(path, obj);
      } catch (e) {
        if ((e as { status?: number }).status !== 409) throw e;
        const current = await this.adminClient.get<{ metadata: { resourceVersion: string } }>(
          `${path}/${obj.metadata.name}`,
        );
        await this.adminClient.update(`${path}/${obj.metadata.name}`, {
          ...obj,
          metadata: { ...obj.metadata, resourceVersion: current.metadata.resourceVersion },
        });
      }
    }
  }

  /**
   * Lets `subjects` GET /metrics, as a Prometheus deployment's RBAC does: a ClusterRole `name`
   * with that one non-resource rule, bound to them by a ClusterRoleBinding of the same name.
   */
  async allowMetrics(
    name: string,
    subjects: Array<
      { kind: "ServiceAccount"; name: string; namespace: string } | { kind: "Group"; name: string }
    >,
  ): Promise<void> {
    const rbac = "rbac.authorization.k8s.io";
    await this.apply([
      {
        apiVersion: `${rbac}/v1`,
        kind: "ClusterRole",
        metadata: { name },
        rules: [{ nonResourceURLs: ["/metrics"], verbs: ["get"] }],
      },
      {
        apiVersion: `${rbac}/v1`,
        kind: "ClusterRoleBinding",
        metadata: { name },
        roleRef: { apiGroup: rbac, kind: "ClusterRole", name },
        subjects: subjects.map((s) => (s.kind === "Group" ? { ...s, apiGroup: rbac } : s)),
      },
    ] as never);
  }

  /** The Events recorded about the object named `name` (Nodes' and CSRs' go to namespace default). */
  async eventsAbout(name: string): Promise<EventV1[]> {
    const list = await this.adminClient.get<{ items: EventV1[] }>(
      "/apis/events.k8s.io/v1/namespaces/default/events",
    );
    return list.items.filter((e) => e.regarding.name === name);
  }

  /**
   * Waits for the CSR's first condition (Approved or Denied) and returns it.
   * @param context what to show when it stays Pending, e.g. the CCM's log
   */
  async csrDecision(
    name: string,
    timeoutMs: number,
    context: () => string,
  ): Promise<V1CertificateSigningRequestCondition> {
    let cond: V1CertificateSigningRequestCondition | undefined;
    await waitFor(
      async () => {
        const csr = await this.adminClient.get<V1CertificateSigningRequest>(
          `/apis/certificates.k8s.io/v1/certificatesigningrequests/${name}`,
        );
        cond = csr.status?.conditions?.[0];
        return cond !== undefined;
      },
      timeoutMs,
      () => `CSR ${name} still Pending:\n${context()}`,
      25,
    );
    return cond as V1CertificateSigningRequestCondition;
  }

  /**
   * Installs a stub of the CRD Talos serves for its ServiceAccount resource (talos.dev/v1alpha1,
   * `spec.roles`), which the manifests and the Helm chart create, and waits until it is served.
   */
  async installTalosServiceAccountCrd(): Promise<void> {
    const crd = {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: "serviceaccounts.talos.dev" },
      spec: {
        group: "talos.dev",
        scope: "Namespaced",
        names: { plural: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount" },
        versions: [
          {
            name: "v1alpha1",
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: "object",
                properties: {
                  spec: {
                    type: "object",
                    properties: { roles: { type: "array", items: { type: "string" } } },
                  },
                },
              },
            },
          },
        ],
      },
    };
    await this.apply([crd]);
    await waitFor(async () => {
      const d = await this.adminClient.get<{ resources: { name: string }[] }>("/apis/talos.dev/v1alpha1");
      return d.resources.some((r) => r.name === "serviceaccounts");
    }, 20_000);
  }

  /** The collection path of an object's kind, found through API discovery. */
  async resourcePath(obj: {
    apiVersion: string;
    kind: string;
    metadata: { namespace?: string };
  }): Promise<string> {
    const base = obj.apiVersion.includes("/") ? `/apis/${obj.apiVersion}` : `/api/${obj.apiVersion}`;
    const list = await this.adminClient.get<{
      resources: Array<{ name: string; kind: string; namespaced: boolean }>;
    }>(base);
    const res = list.resources.find((r) => r.kind === obj.kind && !r.name.includes("/"));
    if (!res) throw new Error(`Cannot find resource for ${obj.apiVersion} ${obj.kind}`);
    return res.namespaced
      ? `${base}/namespaces/${obj.metadata.namespace ?? "default"}/${res.name}`
      : `${base}/${res.name}`;
  }

  /** Stops everything and removes the temp dir. */
  async stop(): Promise<void> {
    this.adminClient.close();
    for (const p of [this.#apiserver, this.#etcd]) {
      if (!p) continue;
      p.kill("SIGCONT");
      p.kill("SIGKILL");
      await p.exited;
      live.delete(p);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Polls `fn` until it returns true; throws `message()` after `timeoutMs`. */
export async function waitFor(
  fn: () => Promise<boolean> | boolean,
  timeoutMs: number,
  message: () => string = () => "condition not met",
  intervalMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastErr: unknown;
  while (Date.now() < deadline) {
    try {
      if (await fn()) return;
    } catch (err) {
      lastErr = err;
      if (err instanceof Error && /exited with/.test(err.message)) throw err;
    }
    await Bun.sleep(intervalMs);
  }
  throw new Error(
    `Timed out after ${timeoutMs} ms: ${message()}${lastErr ? ` (last error: ${lastErr})` : ""}`,
  );
}

/** Waits until `pred` holds, checking every 10 ms; fails after `ms` naming `what` it waited for. */
export function until(pred: () => boolean, what: string, ms = 10_000): Promise<void> {
  return waitFor(pred, ms, () => `waiting for ${what}`, 10);
}
