// cloud-node against a compromised kubelet, end to end: the compiled binary in reconcile mode against
// a real API server (NodeRestriction admission on), simulated kubelets acting with their own node
// credentials and the fake apid. An honest node's initialization costs 3 Talos calls (2 watches and
// the Nodename that confirms the machine is that node; no rule here reads SystemInformation).
// A kubelet may edit its Node's annotations but not labels under node-restriction.kubernetes.io/ nor
// taints: a ccm-managed record it forges, naming an admin's taint and restricted label, must not make
// the CCM remove them (the record is signed by a digest in a label the kubelet cannot write); the node
// gets an Event, and a rule deleted from the config is still reconciled away afterwards. A kubelet
// claiming another node's IP (at registration, or later in its annotation) must not get that
// machine's facts, nor the role a rule grants by them: its Node stays as it was, with an Event. A
// dual-stack kubelet claiming another node's IPv4 next to its own IPv6 is initialized from its own
// machine, with only the IPv6 as InternalIP (the IPv4 is not on that machine), and an Event.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { V1Taint } from "@kubernetes/client-node";
import { KubeError, PATCH } from "../../lib/kubeapi.ts";
import type { FakeApid } from "../support/apid.ts";
import { ApidBed, tainted } from "../support/bed.ts";
import { type TestCluster, until, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import { PROVIDED_NODE_IP, type SimulatedKubelet } from "../support/kubelet.ts";
import type { CcmProcess } from "../support/process.ts";

const MANAGED = "talos.dev/ccm-managed";
const DIGEST_LABEL = "node-restriction.kubernetes.io/talos-ccm-managed";
const digest = (text: string) => new Bun.CryptoHasher("sha224").update(text).digest("hex");

function spec(name: string, nodeIP: string, instanceId: string, nodeIPv6?: string): FakeNodeSpec {
  return {
    name,
    nodeIPs: nodeIPv6 === undefined ? [nodeIP] : [nodeIP, nodeIPv6],
    talosVersion: "v1.13.0",
    platformMetadata: platformMetadata({ platform: "nocloud", hostname: name, zone: "zone-a", instanceId }),
    addresses: [
      normalizeAddress(name, { address: "127.0.0.1/8", linkName: "lo", scope: "host", flags: "permanent" }),
      normalizeAddress(name, { address: `${nodeIP}/24`, linkName: "eth0", flags: "permanent" }),
      ...(nodeIPv6 === undefined
        ? []
        : [normalizeAddress(name, { address: `${nodeIPv6}/64`, linkName: "eth0", flags: "permanent" })]),
    ],
  };
}

/** The node whose kubelet forges its record. */
const FORGER = spec("forger-1", "10.40.0.1", "i-forger");
/** The node whose IP the others claim; a rule grants it a role by its instance ID. */
const VICTIM = spec("victim-1", "10.40.0.2", "i-victim");
/** A machine whose kubelet registers with the victim's IP. */
const LIAR = spec("liar-1", "10.40.0.3", "i-liar");
/** A machine whose kubelet registers honestly, then writes the victim's IP in its annotation. */
const SWITCHER = spec("switcher-1", "10.40.0.4", "i-switcher");
/** A dual-stack machine whose kubelet registers with the victim's IPv4 and its own IPv6. */
const DUAL = spec("dual-liar-1", "10.40.0.5", "i-dual", "fd00:40::5");

/** Grants a role by PlatformMetadata: what a kubelet lying about its IP would be after. */
const ROLE_RULE = `
  - name: secure-role
    nodeSelector:
      - matchExpressions:
          - { key: instanceId, operator: In, values: [i-victim] }
    labels: { node-role.kubernetes.io/secure: "" }`;
const ROLE_LABEL = "node-role.kubernetes.io/secure";
const RULES = `
global:
  reconcile: true
transformations:
  - name: tier
    labels: { example.com/tier: web }
  - name: zone
    annotations: { example.com/zone: "{{ .Zone }}" }
    taints: { example.com/zone: "{{ .Zone }}:PreferNoSchedule" }${ROLE_RULE}
`;
/** RULES without the rule `zone`. */
const RULES_WITHOUT_ZONE = `
global:
  reconcile: true
transformations:
  - name: tier
    labels: { example.com/tier: web }${ROLE_RULE}
`;
const GENUINE_RECORD =
  '{"v":1,"labels":["example.com/tier"],"annotations":["example.com/zone"],"taints":["example.com/zone:PreferNoSchedule"]}';

/** What an admin put on the node, which its kubelet may not change. */
const ADMIN_TAINT: V1Taint = { key: "dedicated", value: "secure", effect: "NoSchedule" };
const POOL_LABEL = "node-restriction.kubernetes.io/pool";

let bed: ApidBed;
let cluster: TestCluster;
let apid: FakeApid;
let ccm: CcmProcess;
const kubelets = new Map<string, SimulatedKubelet>();

const nodePath = (name: string) => `/api/v1/nodes/${name}`;
const getNode = (name: string) => bed.getNode(name);
const initialized = (name: string) => bed.initialized(name);
const eventOf = (name: string, reason: string) => bed.eventOf(name, reason);

async function register(s: FakeNodeSpec, ips = s.nodeIPs): Promise<SimulatedKubelet> {
  const k = await bed.register({ name: s.name, ips, heartbeatMs: 0 });
  kubelets.set(s.name, k);
  return k;
}

beforeAll(async () => {
  bed = await ApidBed.start("cloud-node-security-e2e-", {
    apid: { nodes: [FORGER, VICTIM, LIAR, SWITCHER, DUAL] },
  });
  ({ cluster, apid } = bed);
  const cloudConfig = bed.writeCloudConfig(RULES);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      cloudConfig,
      alwaysAllowPaths: "/metrics",
      // --v=4 logs "Node up to date" for a pass that found nothing to write.
      args: ["--v=4"],
    },
    /Starting controller.*cloud-node/,
  );
  await Promise.all([register(FORGER), register(VICTIM)]);
});

afterAll(() => bed?.stop());

describe("cloud-node initialization cost", () => {
  test("an honest node costs 3 Talos calls: 1 watch (its addresses), 1 PlatformMetadata read and the Nodename that confirms it (no rule reads SystemInformation)", async () => {
    for (const s of [FORGER, VICTIM]) {
      await initialized(s.name);
      const ip = s.nodeIPs[0] as string;
      expect({
        node: s.name,
        watches: apid.calls({ node: ip, method: "Watch" }),
        open: apid.watchers(ip),
        metadata: apid.calls({ node: ip, method: "Get", type: "PlatformMetadatas.talos.dev" }),
        nodename: apid.calls({ node: ip, method: "Get", type: "Nodenames.kubernetes.talos.dev" }),
        calls: apid.calls({ node: ip }),
      }).toEqual({ node: s.name, watches: 1, open: 1, metadata: 1, nodename: 1, calls: 3 });
    }
  });
});

describe("cloud-node reconcile mode against a record forged by the node's kubelet", () => {
  test("the admin's taint and node-restriction label stay, the record is rebuilt and signed, with an Event", async () => {
    const name = FORGER.name;
    const kubelet = kubelets.get(name) as SimulatedKubelet;
    const node = await initialized(name);
    expect(node.metadata?.annotations?.[MANAGED]).toBe(GENUINE_RECORD);
    expect(node.metadata?.labels?.[DIGEST_LABEL]).toBe(digest(GENUINE_RECORD));
    await cluster.adminClient.patch(
      nodePath(name),
      [
        { op: "add", path: `/metadata/labels/${POOL_LABEL.replace("/", "~1")}`, value: "secure" },
        { op: "add", path: "/spec/taints/-", value: ADMIN_TAINT },
      ],
      PATCH.json,
    );
    // The kubelet cannot remove them itself, nor re-sign a record: NodeRestriction refuses.
    for (const label of [POOL_LABEL, DIGEST_LABEL]) {
      const refused = await kubelet.client
        .patch(nodePath(name), { metadata: { labels: { [label]: null } } }, PATCH.merge)
        .then(
          () => 200,
          (err: unknown) => (err instanceof KubeError ? err.status : -1),
        );
      expect({ label, status: refused }).toEqual({ label, status: 403 });
    }

    const forged = `{"v":1,"labels":["${POOL_LABEL}"],"taints":["dedicated:NoSchedule"]}`;
    await kubelet.client.patch(
      nodePath(name),
      { metadata: { annotations: { [MANAGED]: forged } } },
      PATCH.merge,
    );
    const event = await eventOf(name, "UntrustedManagedRecord");
    expect(event.type).toBe("Warning");
    expect(event.note).toContain("does not match");
    // The rebuild comes in the same patch as any removal would have: once it shows, nothing else will.
    await waitFor(
      async () => (await getNode(name)).metadata?.annotations?.[MANAGED] === GENUINE_RECORD,
      10_000,
      () => `record not rebuilt:\n${ccm.output.slice(-3000)}`,
    );
    const after = await getNode(name);
    expect(after.spec?.taints).toContainEqual(ADMIN_TAINT);
    expect(after.metadata?.labels?.[POOL_LABEL]).toBe("secure");
    expect(after.metadata?.labels?.[DIGEST_LABEL]).toBe(digest(GENUINE_RECORD));
    expect(after.metadata?.labels?.["example.com/tier"]).toBe("web");
  });

  test("afterwards a rule deleted from the config is still removed, and only what it added", async () => {
    const name = FORGER.name;
    bed.writeCloudConfig(RULES_WITHOUT_ZONE);
    const record = '{"v":1,"labels":["example.com/tier"]}';
    await waitFor(
      async () => (await getNode(name)).metadata?.annotations?.[MANAGED] === record,
      15_000,
      () => `rule zone not reconciled away:\n${ccm.output.slice(-3000)}`,
    );
    const after = await getNode(name);
    expect(after.metadata?.annotations?.["example.com/zone"]).toBeUndefined();
    expect(after.spec?.taints?.some((t) => t.key === "example.com/zone")).toBe(false);
    expect(after.spec?.taints).toContainEqual(ADMIN_TAINT);
    expect(after.metadata?.labels?.[POOL_LABEL]).toBe("secure");
    expect(after.metadata?.labels?.[DIGEST_LABEL]).toBe(digest(record));
    expect(after.metadata?.labels?.["example.com/tier"]).toBe("web");
  });
});

describe("cloud-node against a kubelet claiming another node's IP", () => {
  const victimIP = VICTIM.nodeIPs[0] as string;

  test("at registration: it stays uninitialized, without the other machine's facts or role, with an Event and a metric", async () => {
    const victim = await initialized(VICTIM.name);
    expect(victim.spec?.providerID).toBe(`talos://nocloud/${victimIP}`);
    expect(victim.metadata?.labels?.[ROLE_LABEL]).toBe("");
    const liar = await register(LIAR, [victimIP]);
    const event = await eventOf(LIAR.name, "TalosNodeMismatch");
    expect(event.type).toBe("Warning");
    expect(event.note).toContain(`Talos on ${victimIP}`);
    expect(event.note).toContain(`"${VICTIM.name}"`);
    expect(event.note).toContain("stays tainted");
    const node = await getNode(LIAR.name);
    expect(tainted(node)).toBe(true);
    expect(node.spec?.providerID).toBeUndefined();
    expect(node.metadata?.labels?.[ROLE_LABEL]).toBeUndefined();
    expect(node.metadata?.labels?.["topology.kubernetes.io/zone"]).toBeUndefined();
    expect(node.status?.addresses).toEqual(liar.addresses());
    const text = await bed.metrics();
    expect(
      Number(text.match(/^talosccm_node_initialization_errors_total\{reason="identity"\} (\d+)$/m)?.[1]),
    ).toBeGreaterThanOrEqual(1);
    // The machine whose IP it claimed is as it was, and was never suspected.
    expect(await getNode(VICTIM.name)).toMatchObject({
      spec: { providerID: victim.spec?.providerID },
      metadata: { labels: victim.metadata?.labels },
      status: { addresses: victim.status?.addresses },
    });
    expect((await cluster.eventsAbout(VICTIM.name)).map((e) => e.reason)).not.toContain("TalosNodeMismatch");
  });

  test("later, by editing its annotation: the initialized node keeps its state, with an Event", async () => {
    const kubelet = await register(SWITCHER);
    const before = await initialized(SWITCHER.name);
    expect(before.spec?.providerID).toBe(`talos://nocloud/${SWITCHER.nodeIPs[0]}`);
    await kubelet.client.patch(
      nodePath(SWITCHER.name),
      { metadata: { annotations: { [PROVIDED_NODE_IP]: victimIP } } },
      PATCH.merge,
    );
    const event = await eventOf(SWITCHER.name, "TalosNodeMismatch");
    expect(event.note).toContain(`"${VICTIM.name}"`);
    expect(event.note).toContain("keeps its current state");
    const after = await getNode(SWITCHER.name);
    expect(after.spec?.providerID).toBe(before.spec?.providerID);
    expect(after.metadata?.labels).toEqual(before.metadata?.labels);
    expect(after.status?.addresses).toEqual(before.status?.addresses);
  });

  test("dual-stack, with the other node's IPv4 next to its own IPv6: it initializes with only its IPv6 as InternalIP, with one Event and a metric", async () => {
    const victim = await initialized(VICTIM.name);
    const ownIPv6 = DUAL.nodeIPs[1] as string;
    const watchersBefore = apid.watchers(victimIP);
    await register(DUAL, [victimIP, ownIPv6]);
    // Its own machine's facts, confirmed on the IPv6; the claimed IPv4 is not among that machine's addresses.
    const node = await initialized(DUAL.name);
    expect(node.spec?.providerID).toBe(`talos://nocloud/${ownIPv6}`);
    expect(node.metadata?.labels?.["topology.kubernetes.io/zone"]).toBe("zone-a");
    expect(node.metadata?.labels?.[ROLE_LABEL]).toBeUndefined();
    expect(node.status?.addresses).toEqual([
      { type: "InternalIP", address: ownIPv6 },
      { type: "Hostname", address: DUAL.name },
    ]);
    const event = await eventOf(DUAL.name, "NodeIPNotOnMachine");
    expect(event.type).toBe("Warning");
    expect(event.note).toContain(`Node IP ${victimIP} (in its ${PROVIDED_NODE_IP} annotation)`);
    expect(event.note).toContain(`InternalIPs are ${ownIPv6}`);
    expect(await bed.metrics()).toMatch(/^talosccm_node_ips_rejected_total\{reason="not_on_machine"\} 1$/m);
    // Talos on the claimed IPv4 is not asked any more: the watches there are those from before.
    await waitFor(
      async () => apid.watchers(victimIP) === watchersBefore,
      10_000,
      () => `watches on ${victimIP}: ${apid.watchers(victimIP)}, before: ${watchersBefore}`,
    );
    expect(apid.watchers(ownIPv6)).toBe(1);
    // The passes after the initialization (its own write re-queues the node) warn no more. Once its
    // writes are done a pass finds nothing to write, which --v=4 logs as "Node up to date".
    const upToDate = new RegExp(`"Node up to date" node="${DUAL.name}"`);
    await ccm.waitForLog(upToDate);
    const from = ccm.output.length;
    const kubelet = kubelets.get(DUAL.name) as SimulatedKubelet;
    await kubelet.client.patch(
      nodePath(DUAL.name),
      { metadata: { annotations: { "example.com/touch": "1" } } },
      PATCH.merge,
    );
    await waitFor(
      async () => (await getNode(DUAL.name)).metadata?.annotations?.["example.com/touch"] === "1",
      10_000,
    );
    // The touch re-queued the node: wait for that pass, which looked at its IPs again and found
    // nothing to write.
    await until(() => upToDate.test(ccm.output.slice(from)), `a pass over ${DUAL.name} after the touch`);
    const warned = new RegExp(`"Node IP is not on the node's machine[^"]*" node="${DUAL.name}"`, "g");
    expect(ccm.output.match(warned)?.length).toBe(1);
    expect(
      (await cluster.eventsAbout(DUAL.name)).filter((e) => e.reason === "NodeIPNotOnMachine").length,
    ).toBe(1);
    expect(await bed.metrics()).toMatch(/^talosccm_node_ips_rejected_total\{reason="not_on_machine"\} 1$/m);
    expect((await getNode(DUAL.name)).status?.addresses).toEqual(node.status?.addresses);
    // The machine whose IPv4 it claimed is as it was.
    expect(await getNode(VICTIM.name)).toMatchObject({
      spec: { providerID: victim.spec?.providerID },
      metadata: { labels: victim.metadata?.labels },
      status: { addresses: victim.status?.addresses },
    });
  });
});
