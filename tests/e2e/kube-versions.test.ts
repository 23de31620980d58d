// What differs between the Kubernetes versions of the support matrix (tests/support/kubematrix.ts),
// asserted for the version this run's API server reports: the test bed runs the release the matrix
// names; the compiled binary logs once, at start-up, the server's version and where it reads Service
// ranges from; with the ServiceCIDR API (networking.k8s.io/v1 from 1.33, v1beta1 on 1.31 and 1.32
// where the operator turned it on) a ServiceCIDR created after start is refused in serving
// certificates; without it, the CCM says it knows no Service range until one is given, and a ClusterIP
// in --service-cluster-ip-range is denied. Run on every version of the matrix by `npm test`.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { SUPPORTED_MINORS } from "../../lib/kubeversions.ts";
import { TestCluster } from "../support/cluster.ts";
import { SimulatedKubelet } from "../support/kubelet.ts";
import { SERVICE_CIDR_BETA_FLAGS, servesServiceCIDRv1 } from "../support/kubematrix.ts";
import { type CcmProcess, startCcm } from "../support/process.ts";

const NODE_IP = "10.33.0.1";
/** A Service range added after the CCM started, and a ClusterIP in it. */
const EXTRA_RANGE = { cidr: "10.112.0.0/16", ip: "10.112.0.7" };
/** The test bed's --service-cluster-ip-range is 10.96.0.0/16 (tests/support/cluster.ts). */
const CLUSTER_IP = "10.96.0.10";

interface LogLine {
  msg: string;
  caller?: string;
  version?: string;
  serviceCIDRs?: string;
  sources?: string[];
}

let cluster: TestCluster;
let ccm: CcmProcess | undefined;

/** The CCM's JSON log lines so far. */
function logLines(p: CcmProcess): LogLine[] {
  return p.output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as LogLine);
}

/** node-csr-approval in CSR-only mode against `c`, once it approves. */
async function startCsrOnly(c: TestCluster, extra: string[] = []): Promise<CcmProcess> {
  ccm = await startCcm(
    {
      kubeconfig: c.adminKubeconfig,
      controllers: "node-csr-approval",
      args: ["--logging-format=json", "--v=2", ...extra],
    },
    /Approving kubelet serving CSRs/,
  );
  return ccm;
}

/** A CSR from a kubelet at NODE_IP for its own address and `ip`; resolves to the decision. */
async function decide(c: TestCluster, kubelet: SimulatedKubelet, ip: string) {
  const csr = await kubelet.submitServingCSR({ dns: [kubelet.name], ips: [NODE_IP, ip] });
  return c.csrDecision(csr.metadata?.name as string, 10_000, () => ccm?.output.slice(-3000) ?? "");
}

beforeAll(async () => {
  cluster = await TestCluster.start();
});

afterEach(async () => {
  await ccm?.stop("SIGTERM");
  ccm = undefined;
});

afterAll(async () => {
  await cluster?.stop();
});

describe("the version under test", () => {
  test("the API server is the release the matrix names, inside the supported range", () => {
    const v = cluster.version;
    // Set by tests/run.ts when it built the test bed for a row of the matrix.
    const built = process.env.TESTBED_K8S_VERSION;
    if (built) expect(v.gitVersion).toBe(built);
    expect(v.major).toBe(1);
    expect(v.minor).toBeGreaterThanOrEqual(SUPPORTED_MINORS.oldest);
    expect(v.minor).toBeLessThanOrEqual(SUPPORTED_MINORS.newest);
  });
});

describe("the start-up line names the version-dependent sources", () => {
  test("once, with the server's version and the ServiceCIDR API it serves by default", async () => {
    const p = await startCsrOnly(cluster);
    const connected = logLines(p).filter((l) => l.msg === "Connected to the Kubernetes API server");
    expect(connected).toHaveLength(1);
    expect(connected[0]?.version).toBe(cluster.version.gitVersion);
    if (servesServiceCIDRv1(cluster.version)) {
      expect(connected[0]?.serviceCIDRs).toBe("networking.k8s.io/v1/servicecidrs (watched)");
      // The API server made the `kubernetes` ServiceCIDR from its flag: a Service range is known.
      const refused = logLines(p).find((l) => l.msg === "Cluster networks refused in serving certificates");
      expect(refused?.sources).toContain("a Service CIDR (ServiceCIDR kubernetes)");
      expect(p.output).not.toContain("No Service CIDR is known");
    } else {
      expect(connected[0]?.serviceCIDRs).toStartWith(
        "not served (networking.k8s.io/v1 from Kubernetes 1.33)",
      );
      // No flag, no Talos, no ServiceCIDR: the CCM says what it cannot refuse and how to fix it.
      expect(p.output).toContain("No Service CIDR is known");
      expect(p.output).toContain("set --service-cluster-ip-range");
    }
    expect(p.output).not.toContain("older than this CCM supports");
    expect(p.output).not.toContain("newer than this CCM is tested with");
  });
});

describe("Service ranges, by version", () => {
  let kubelet: SimulatedKubelet;
  beforeAll(async () => {
    kubelet = await SimulatedKubelet.register(cluster, { name: "kv-a", ips: [NODE_IP], heartbeatMs: 0 });
  });

  test("a ClusterIP in the default Service range is denied: from the ServiceCIDR object, or from the flag where there is none", async () => {
    const withV1 = servesServiceCIDRv1(cluster.version);
    await startCsrOnly(cluster, withV1 ? [] : ["--service-cluster-ip-range=10.96.0.0/16"]);
    const cond = await decide(cluster, kubelet, CLUSTER_IP);
    expect(cond).toMatchObject({ type: "Denied", reason: "ClusterNetworkIP" });
    expect(cond.message).toContain(withV1 ? "ServiceCIDR kubernetes" : "--service-cluster-ip-range");
  });

  test("a ServiceCIDR created after start is refused (v1 from 1.33; before, none is served and the flag is the source)", async () => {
    if (!servesServiceCIDRv1(cluster.version)) {
      // No ServiceCIDR API to create one in: the list is 404 and only the flag's range is refused.
      const err = await cluster.adminClient
        .get("/apis/networking.k8s.io/v1/servicecidrs")
        .catch((e: unknown) => e);
      expect((err as { status?: number }).status).toBe(404);
      await startCsrOnly(cluster, [`--service-cluster-ip-range=${EXTRA_RANGE.cidr}`]);
      const cond = await decide(cluster, kubelet, EXTRA_RANGE.ip);
      expect(cond).toMatchObject({ type: "Denied", reason: "ClusterNetworkIP" });
      expect(cond.message).toContain("--service-cluster-ip-range");
      return;
    }
    await startCsrOnly(cluster);
    await createServiceCIDR(cluster, "networking.k8s.io/v1", "kv-extra");
    const cond = await decide(cluster, kubelet, EXTRA_RANGE.ip);
    expect(cond).toMatchObject({ type: "Denied", reason: "ClusterNetworkIP" });
    expect(cond.message).toContain("ServiceCIDR kv-extra");
  });
});

describe("1.31 and 1.32 with the beta ServiceCIDR API turned on", () => {
  test("the CCM watches networking.k8s.io/v1beta1 ServiceCIDRs there (from 1.33 it keeps to v1)", async () => {
    if (servesServiceCIDRv1(cluster.version)) {
      // From 1.33 the same check is the v1 one above; v1 is preferred when both are served
      // (tests/unit/kubeversions.test.ts), and the beta flags are refused or moot there.
      const p = await startCsrOnly(cluster);
      expect(logLines(p).find((l) => l.msg === "Connected to the Kubernetes API server")?.serviceCIDRs).toBe(
        "networking.k8s.io/v1/servicecidrs (watched)",
      );
      return;
    }
    const beta = await TestCluster.start({ apiserverArgs: [...SERVICE_CIDR_BETA_FLAGS] });
    try {
      const p = await startCsrOnly(beta);
      const connected = logLines(p).find((l) => l.msg === "Connected to the Kubernetes API server");
      expect(connected?.serviceCIDRs).toBe("networking.k8s.io/v1beta1/servicecidrs (watched)");
      expect(p.output).not.toContain("No Service CIDR is known");
      const k = await SimulatedKubelet.register(beta, { name: "kv-b", ips: [NODE_IP], heartbeatMs: 0 });
      const cond = await decide(beta, k, CLUSTER_IP);
      expect(cond).toMatchObject({ type: "Denied", reason: "ClusterNetworkIP" });
      expect(cond.message).toContain("ServiceCIDR kubernetes");
      await createServiceCIDR(beta, "networking.k8s.io/v1beta1", "kv-extra");
      const later = await decide(beta, k, EXTRA_RANGE.ip);
      expect(later).toMatchObject({ type: "Denied", reason: "ClusterNetworkIP" });
      expect(later.message).toContain("ServiceCIDR kv-extra");
    } finally {
      await ccm?.stop("SIGTERM");
      ccm = undefined;
      await beta.stop();
    }
  });
});

/**
 * Creates ServiceCIDR `name` holding EXTRA_RANGE in group version `gv` and waits until the running
 * CCM's watch has read it (its --v=2 line), so that no CSR races the watch event.
 */
async function createServiceCIDR(c: TestCluster, gv: string, name: string): Promise<void> {
  await c.adminClient.create(`/apis/${gv}/servicecidrs`, {
    apiVersion: gv,
    kind: "ServiceCIDR",
    metadata: { name },
    spec: { cidrs: [EXTRA_RANGE.cidr] },
  });
  await ccm?.waitForLog(new RegExp(`"msg":"Read ServiceCIDR".*"name":"${name}"`));
}
