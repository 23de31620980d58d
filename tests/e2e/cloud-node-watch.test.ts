// cloud-node freshness and reconcile mode, end to end: the compiled binary against a real API
// server, simulated kubelets and the fake apid. A node whose Talos API is down stays tainted with a
// Warning Event while others initialize, and initializes once it answers; an address change reaches
// the Node through the COSI watch within 2 s, and healthy watches cost no periodic Talos call while
// the same timer polls a node whose watch is down (reference weakness 6); in reconcile mode, editing the config file while the CCM runs removes
// and changes exactly what the deleted or changed rule put there, and nothing else (weakness 5).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { PATCH } from "../../lib/kubeapi.ts";
import { RESOURCES } from "../../lib/taloswire.ts";
import type { FakeApid } from "../support/apid.ts";
import { ApidBed, tainted } from "../support/bed.ts";
import { type EventV1, type TestCluster, waitFor } from "../support/cluster.ts";
import { type FakeNodeSpec, normalizeAddress, platformMetadata } from "../support/fixtures.ts";
import { PROVIDED_NODE_IP } from "../support/kubelet.ts";
import type { CcmProcess } from "../support/process.ts";

const MANAGED = "talos.dev/ccm-managed";

function spec(name: string, nodeIP: string, zone: string): FakeNodeSpec {
  return {
    name,
    nodeIPs: [nodeIP],
    talosVersion: "v1.13.0",
    platformMetadata: platformMetadata({ platform: "nocloud", hostname: name, zone }),
    systemInformation: {
      manufacturer: "QEMU",
      productName: "Standard PC",
      version: "",
      serialNumber: "",
      uuid: `uuid-${name}`,
      wakeUpType: "",
      skuNumber: "",
    },
    addresses: [
      normalizeAddress(name, { address: "127.0.0.1/8", linkName: "lo", scope: "host", flags: "permanent" }),
      normalizeAddress(name, { address: `${nodeIP}/24`, linkName: "eth0", flags: "permanent" }),
    ],
  };
}

const WATCHED = spec("watch-1", "10.30.0.1", "zone-a");
/** Its Talos API is down for the whole suite: its watch is polled on every pass of the timer. */
const DOWN = spec("down-1", "10.30.0.2", "zone-b");
/** Its Talos API is down until the test that brings it back. */
const RECOVERING = spec("recover-1", "10.30.0.3", "zone-c");

/** Rule a, labelling example.com/a with `label`. */
const ruleA = (label: string) => `
  - name: a
    labels: { example.com/a: "${label}" }
    annotations: { example.com/a: "{{ .Zone }}" }
    taints: { example.com/a: "NoSchedule" }`;
const RULE_B = `
  - name: b
    labels: { example.com/b: "yes" }
    annotations: { example.com/b: "id-{{ .UUID }}" }
    taints: { example.com/b: "{{ .Zone }}:PreferNoSchedule" }`;
const RECONCILE = `
global:
  reconcile: true
transformations:`;
const RULES_A_AND_B = `${RECONCILE}${ruleA("one")}${RULE_B}
`;
// Rule b deleted, rule a's label value changed.
const RULES_A_ONLY = `${RECONCILE}${ruleA("two")}
`;

let bed: ApidBed;
let cluster: TestCluster;
let apid: FakeApid;
let ccm: CcmProcess;

const getNode = (name: string) => bed.getNode(name);

beforeAll(async () => {
  bed = await ApidBed.start("cloud-node-watch-e2e-", { apid: { nodes: [WATCHED, DOWN, RECOVERING] } });
  ({ cluster, apid } = bed);
  for (const s of [DOWN, RECOVERING]) apid.setDown(s.nodeIPs[0] as string, true);
  const cloudConfig = bed.writeCloudConfig(RULES_A_AND_B);
  ccm = await bed.startCcm(
    {
      controllers: "cloud-node",
      cloudConfig,
      securePort: 0,
      // Short, so that a window of a few seconds would show any periodic Talos call.
      args: ["--node-status-update-frequency=1s"],
    },
    /Starting controller.*cloud-node/,
  );
  for (const s of [DOWN, RECOVERING, WATCHED]) {
    await bed.register({ name: s.name, ips: s.nodeIPs, heartbeatMs: 0 });
  }
});

afterAll(() => bed?.stop());

describe("cloud-node with a Talos API down", () => {
  test("the node whose Talos is down stays tainted with a Warning Event while the other initializes", async () => {
    await waitFor(
      async () => !tainted(await getNode(WATCHED.name)),
      20_000,
      () => ccm.output.slice(-3000),
    );
    let warning: EventV1 | undefined;
    await waitFor(async () => {
      warning = (await cluster.eventsAbout(DOWN.name)).find((e) => e.reason === "TalosAPIError");
      return warning !== undefined;
    }, 10_000);
    expect(warning?.type).toBe("Warning");
    expect(warning?.note).toContain("10.30.0.2");
    expect(tainted(await getNode(DOWN.name))).toBe(true);
  });

  test("a node whose Talos API was down initializes once it answers again", async () => {
    // It was seen down first: the CCM recorded why it waits.
    await waitFor(
      async () => (await cluster.eventsAbout(RECOVERING.name)).some((e) => e.reason === "TalosAPIError"),
      20_000,
      () => ccm.output.slice(-3000),
    );
    expect(tainted(await getNode(RECOVERING.name))).toBe(true);
    apid.setDown(RECOVERING.nodeIPs[0] as string, false);
    await waitFor(
      async () => !tainted(await getNode(RECOVERING.name)),
      45_000,
      () => ccm.output.slice(-3000),
    );
    const node = await getNode(RECOVERING.name);
    expect(node.spec?.providerID).toBe("talos://nocloud/10.30.0.3");
    expect(node.metadata?.labels?.["topology.kubernetes.io/zone"]).toBe("zone-c");
    // The Event is recorded after the patch, by the event recorder's own queue: wait for it.
    await waitFor(
      async () => (await cluster.eventsAbout(RECOVERING.name)).some((e) => e.reason === "Synced"),
      10_000,
      () => "no Synced Event",
    );
  });
});

describe("cloud-node keeps nodes current through COSI watches", () => {
  test("an address change reaches the Node within 2 s, through the watch alone", async () => {
    await waitFor(async () => !tainted(await getNode(WATCHED.name)), 20_000);
    apid.resetCalls();
    const ip = WATCHED.nodeIPs[0] as string;
    const added = normalizeAddress(WATCHED.name, {
      address: "203.0.113.77/24",
      linkName: "eth1",
      flags: "permanent",
    });
    apid.updateNode(ip, { addresses: [...WATCHED.addresses, added] });
    await waitFor(
      async () =>
        (await getNode(WATCHED.name)).status?.addresses?.some((a) => a.address === "203.0.113.77") ?? false,
      2_000,
      () => "the new ExternalIP did not reach the Node within 2 s",
      25,
    );
    expect((await getNode(WATCHED.name)).status?.addresses).toEqual([
      { type: "InternalIP", address: ip },
      { type: "ExternalIP", address: "203.0.113.77" },
      { type: "Hostname", address: WATCHED.name },
    ]);
    expect(apid.calls({ node: ip })).toBe(0);
  });

  test("healthy watches cost no periodic Talos call (--node-status-update-frequency=1s)", async () => {
    const ip = WATCHED.nodeIPs[0] as string;
    const down = DOWN.nodeIPs[0] as string;
    await waitFor(async () => !tainted(await getNode(WATCHED.name)) && apid.watchers(ip) === 1, 20_000);
    apid.resetCalls();
    // The shared timer polls the node whose watch is down on each of its passes: three more polls
    // prove three passes of the timer that also looked at the healthy node.
    await waitFor(
      () => apid.calls({ node: down, method: "Get", type: RESOURCES.platformmetadata.type }) >= 3,
      15_000,
      () => `fewer than 3 polls of ${down}: ${apid.calls({ node: down })} calls`,
    );
    expect(apid.calls({ node: ip })).toBe(0);
    expect(apid.watchers(ip)).toBe(1);
  });
});

describe("cloud-node reconcile mode", () => {
  test("editing the config removes what a deleted rule added, changes what a changed rule set, and nothing else", async () => {
    const name = WATCHED.name;
    await waitFor(
      async () => !tainted(await getNode(name)),
      20_000,
      () => ccm.output.slice(-3000),
    );
    const before = await getNode(name);
    expect(before.metadata?.labels?.["example.com/b"]).toBe("yes");
    expect(before.metadata?.annotations?.["example.com/b"]).toBe("id-uuid-watch-1");
    expect(before.spec?.taints).toContainEqual({
      key: "example.com/b",
      value: "zone-a",
      effect: "PreferNoSchedule",
    });
    // Another actor's label, annotation and taint, one of them on a key the rules also use.
    await cluster.adminClient.patch(
      `/api/v1/nodes/${name}`,
      [
        { op: "add", path: "/metadata/labels/user~1owned", value: "mine" },
        { op: "add", path: "/metadata/annotations/user~1owned", value: "mine" },
        { op: "add", path: "/spec/taints/-", value: { key: "example.com/b", effect: "NoExecute" } },
      ],
      PATCH.json,
    );
    bed.writeCloudConfig(RULES_A_ONLY);
    await waitFor(
      async () => (await getNode(name)).metadata?.labels?.["example.com/a"] === "two",
      15_000,
      () => ccm.output.slice(-3000),
    );
    const after = await getNode(name);
    expect(after.metadata?.labels).toEqual({
      "kubernetes.io/hostname": name,
      "kubernetes.io/os": "linux",
      "kubernetes.io/arch": "amd64",
      "beta.kubernetes.io/os": "linux",
      "beta.kubernetes.io/arch": "amd64",
      "node.cloudprovider.kubernetes.io/platform": "nocloud",
      "topology.kubernetes.io/zone": "zone-a",
      "failure-domain.beta.kubernetes.io/zone": "zone-a",
      "example.com/a": "two",
      "user/owned": "mine",
      // The digest of the record below (hex SHA-224): the record's signature, which kubelets cannot write.
      "node-restriction.kubernetes.io/talos-ccm-managed": new Bun.CryptoHasher("sha224")
        .update(
          '{"v":1,"labels":["example.com/a"],"annotations":["example.com/a"],"taints":["example.com/a:NoSchedule"]}',
        )
        .digest("hex"),
    });
    expect(after.metadata?.annotations).toEqual({
      [PROVIDED_NODE_IP]: WATCHED.nodeIPs[0] as string,
      "example.com/a": "zone-a",
      "user/owned": "mine",
      [MANAGED]:
        '{"v":1,"labels":["example.com/a"],"annotations":["example.com/a"],"taints":["example.com/a:NoSchedule"]}',
    });
    expect(after.spec?.taints).toEqual([
      { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" },
      { key: "example.com/a", effect: "NoSchedule" },
      { key: "example.com/b", effect: "NoExecute" },
    ]);
    expect(ccm.output).toMatch(/Reloaded cloud config/);
  });
});
