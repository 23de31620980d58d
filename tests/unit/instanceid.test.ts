import { describe, expect, test } from "bun:test";
import { decideProviderID, type ProviderIDDecision, type ProviderIDInput } from "../../lib/desirednode.ts";
import { namesInstances, PLATFORMS_FALLING_BACK, PLATFORMS_NAMING_INSTANCES } from "../../lib/instanceid.ts";

const talos = (platform: string, instanceId = "", providerId = "") => ({ platform, instanceId, providerId });

describe("decideProviderID()", () => {
  const cases: Array<{
    name: string;
    input: ProviderIDInput;
    want: ProviderIDDecision["action"];
    id?: string;
  }> = [
    {
      name: "keeps the providerID a Node has, even on a platform still without its instance ID",
      input: {
        nodeProviderID: "talos://hcloud/10.0.1.2",
        talos: talos("hcloud"),
        before: "talos://hcloud/10.0.1.2",
        after: "talos://hcloud/10.0.1.2",
      },
      want: "keep",
    },
    {
      name: "keeps a providerID the kubelet set (--provider-id) although a rule would set another",
      input: {
        nodeProviderID: "hcloud://1",
        talos: talos("hcloud", "2", "hcloud://2"),
        before: "hcloud://2",
        after: "custom://2",
      },
      want: "keep",
    },
    {
      name: "waits on hcloud while PlatformMetadata carries the platform alone (Talos's placeholder)",
      input: {
        nodeProviderID: "",
        talos: talos("hcloud"),
        before: "talos://hcloud/10.0.1.2",
        after: "talos://hcloud/10.0.1.2",
      },
      want: "wait",
    },
    {
      name: "waits on hcloud when the metadata service answered no instance-id (Talos's `hcloud://`)",
      input: {
        nodeProviderID: "",
        talos: talos("hcloud", "", "hcloud://"),
        before: "hcloud://",
        after: "hcloud://",
      },
      want: "wait",
    },
    {
      name: "waits on every platform that names its instances",
      input: {
        nodeProviderID: "",
        talos: talos("digital-ocean"),
        before: "talos://digital-ocean/10.0.0.5",
        after: "talos://digital-ocean/10.0.0.5",
      },
      want: "wait",
    },
    {
      name: "writes Talos's providerID once the instance ID is there",
      input: {
        nodeProviderID: "",
        talos: talos("hcloud", "51234567", "hcloud://51234567"),
        before: "hcloud://51234567",
        after: "hcloud://51234567",
      },
      want: "write",
      id: "hcloud://51234567",
    },
    {
      name: "writes the Azure providerID as instanceFacts normalized it (not a rule's)",
      input: {
        nodeProviderID: "",
        talos: talos(
          "azure",
          "/subscriptions/S/resourceGroups/RG/x",
          "azure:///subscriptions/S/resourceGroups/RG/x",
        ),
        before: "azure:///subscriptions/S/resourceGroups/rg/x",
        after: "azure:///subscriptions/S/resourceGroups/rg/x",
      },
      want: "write",
      id: "azure:///subscriptions/S/resourceGroups/rg/x",
    },
    {
      name: "writes a rule's ProviderID at once, even while the instance ID is missing (the operator's choice)",
      input: {
        nodeProviderID: "",
        talos: talos("hcloud"),
        before: "talos://hcloud/10.0.1.2",
        after: "hcloud://51234567",
      },
      want: "write",
      id: "hcloud://51234567",
    },
    {
      name: "waits when a rule spells the default (`{{ .ProviderID }}`): that is no choice",
      input: {
        nodeProviderID: "",
        talos: talos("exoscale"),
        before: "talos://exoscale/10.0.0.5",
        after: "talos://exoscale/10.0.0.5",
      },
      want: "wait",
    },
    {
      name: "waits when a rule renders an empty ProviderID on a platform without its ID yet",
      input: { nodeProviderID: "", talos: talos("aws"), before: "talos://aws/10.0.0.5", after: "" },
      want: "wait",
    },
    {
      name: "writes none when a rule renders an empty ProviderID on metal",
      input: { nodeProviderID: "", talos: talos("metal"), before: "talos://metal/10.0.0.5", after: "" },
      want: "none",
    },
    {
      name: "falls back at once on metal, even with the SMBIOS UUID as instance ID",
      input: {
        nodeProviderID: "",
        talos: talos("metal", "6f1c0000-0000-4000-8000-000000000001"),
        before: "talos://metal/10.0.0.5",
        after: "talos://metal/10.0.0.5",
      },
      want: "write",
      id: "talos://metal/10.0.0.5",
    },
    {
      name: "falls back at once on nocloud without an ID",
      input: {
        nodeProviderID: "",
        talos: talos("nocloud"),
        before: "talos://nocloud/10.0.0.5",
        after: "talos://nocloud/10.0.0.5",
      },
      want: "write",
      id: "talos://nocloud/10.0.0.5",
    },
    {
      name: "writes the provider-id nocloud meta-data carries",
      input: {
        nodeProviderID: "",
        talos: talos("nocloud", "101", "proxmox://c1/101"),
        before: "proxmox://c1/101",
        after: "proxmox://c1/101",
      },
      want: "write",
      id: "proxmox://c1/101",
    },
    {
      name: "falls back at once on a platform this table does not know (a newer Talos)",
      input: {
        nodeProviderID: "",
        talos: talos("newcloud"),
        before: "talos://newcloud/10.0.0.5",
        after: "talos://newcloud/10.0.0.5",
      },
      want: "write",
      id: "talos://newcloud/10.0.0.5",
    },
  ];
  for (const c of cases)
    test(`decideProviderID() ${c.name}`, () => {
      const got = decideProviderID(c.input);
      expect(got.action).toBe(c.want);
      if (got.action === "write") expect(got.providerID).toBe(c.id as string);
    });

  test("decideProviderID() says whose providerID it writes", () => {
    const fallback = decideProviderID({
      nodeProviderID: "",
      talos: talos("vmware", "vm-1"),
      before: "talos://vmware/10.0.0.5",
      after: "talos://vmware/10.0.0.5",
    });
    expect(fallback).toEqual({ action: "write", providerID: "talos://vmware/10.0.0.5", from: "fallback" });
    const own = decideProviderID({
      nodeProviderID: "",
      talos: talos("gcp", "123", "gce://p/z/n"),
      before: "gce://p/z/n",
      after: "gce://p/z/n",
    });
    expect(own).toEqual({ action: "write", providerID: "gce://p/z/n", from: "talos" });
    const rule = decideProviderID({
      nodeProviderID: "",
      talos: talos("metal"),
      before: "talos://metal/10.0.0.5",
      after: "hcloud://7",
    });
    expect(rule).toEqual({ action: "write", providerID: "hcloud://7", from: "rule" });
  });

  test("decideProviderID() names what it waits for and the providerID that will come", () => {
    const got = decideProviderID({
      nodeProviderID: "",
      talos: talos("aws"),
      before: "talos://aws/10.0.0.5",
      after: "talos://aws/10.0.0.5",
    });
    expect(got).toEqual({
      action: "wait",
      platform: "aws",
      waitingFor:
        "its instance ID: Talos reports platform aws without an instance ID (its metadata service has not been " +
        "read yet), and the providerID aws:///<zone>/<id> is written once Talos publishes it",
    });
  });
});

describe("namesInstances()", () => {
  test("namesInstances() holds for the cloud platforms and not for the others", () => {
    for (const p of Object.keys(PLATFORMS_NAMING_INSTANCES)) expect(namesInstances(p)).toBe(true);
    for (const p of [...Object.keys(PLATFORMS_FALLING_BACK), "", "newcloud", "toString", "__proto__"])
      expect(namesInstances(p)).toBe(false);
  });

  test("namesInstances() tables are disjoint and every waiting platform's providerID embeds an ID", () => {
    for (const p of Object.keys(PLATFORMS_FALLING_BACK))
      expect(Object.hasOwn(PLATFORMS_NAMING_INSTANCES, p)).toBe(false);
    for (const { providerID, source } of Object.values(PLATFORMS_NAMING_INSTANCES)) {
      expect(providerID).toMatch(/^[a-z]+:\/\/.*<(id|name|resource id)>$/);
      expect(source).toMatch(/^[a-z]+\/[a-z_]+\.go:\d+-\d+$/);
    }
  });
});
