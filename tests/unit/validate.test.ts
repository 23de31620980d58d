import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parse as parseYaml, stringify } from "yaml";
import { parseConfig } from "../../lib/config.ts";
import type { ConfigIssue } from "../../lib/configissue.ts";
import { managedRecordDigest } from "../../lib/managedrecord.ts";
import type { SystemInformation } from "../../lib/types.ts";
import {
  formatPreview,
  MetadataError,
  NODE_IP_PLACEHOLDER,
  type Preview,
  parseMetadata,
  previewNode,
  type SampleNode,
  validate,
} from "../../lib/validate.ts";
import { MANAGED_DIGEST_LABEL } from "../../lib/wellknown.ts";
import { platformMetadata } from "../support/fixtures.ts";

const PM_TYPE = "PlatformMetadatas.talos.dev";
const SI_TYPE = "SystemInformations.hardware.talos.dev";

/** One resource as `talosctl get … -o yaml` prints it (yaml.v3's 4-space indent). */
function talosctl(type: string, node: string, spec: Record<string, unknown>): string {
  const resource = {
    metadata: {
      namespace: type === PM_TYPE ? "runtime" : "hardware",
      type,
      id: type === PM_TYPE ? "platformmetadata" : "systeminformation",
      version: 1,
      owner: "test.Controller",
      phase: "running",
      created: "2025-01-01T00:00:00Z",
      updated: "2025-01-01T00:00:00Z",
    },
    spec,
  };
  return `node: ${node}\n${stringify(resource, { indent: 4 })}`;
}

function emptySystem(over: Partial<SystemInformation> = {}): SystemInformation {
  return {
    manufacturer: "",
    productName: "",
    version: "",
    serialNumber: "",
    uuid: "",
    wakeUpType: "",
    skuNumber: "",
    ...over,
  };
}

/** Parses `text`, expecting a MetadataError, and returns it. */
function metadataFails(text: string): MetadataError {
  try {
    parseMetadata(text);
  } catch (err) {
    if (err instanceof MetadataError) return err;
    throw err;
  }
  throw new Error("expected a MetadataError");
}

const brief = (issues: readonly ConfigIssue[]) => issues.map((i) => [i.path, i.line]);

const PM_SPEC = { platform: "metal", hostname: "web-1.example.com", instanceId: "i-1" };
const SI_SPEC = { manufacturer: "ASUS", productName: "ESC4000A-E10", serialnumber: "S1", uuid: "u-1" };

describe("parseMetadata() input forms", () => {
  const pm = platformMetadata({ platform: "metal", hostname: "web-1.example.com", instanceId: "i-1" });
  const si = emptySystem({
    manufacturer: "ASUS",
    productName: "ESC4000A-E10",
    serialNumber: "S1",
    uuid: "u-1",
  });
  test.each([
    [
      "talosctl documents separated by ---",
      `${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${talosctl(SI_TYPE, "10.0.0.5", SI_SPEC)}`,
      { node: "10.0.0.5", platformMetadata: pm, systemInformation: si },
    ],
    [
      "two talosctl outputs concatenated without ---",
      talosctl(SI_TYPE, "10.0.0.5", SI_SPEC) + talosctl(PM_TYPE, "10.0.0.5", PM_SPEC),
      { node: "10.0.0.5", platformMetadata: pm, systemInformation: si },
    ],
    [
      "talosctl --watch output (with an event key)",
      talosctl(PM_TYPE, "10.0.0.5", PM_SPEC).replace("node: 10.0.0.5\n", "node: 10.0.0.5\nevent: created\n"),
      { node: "10.0.0.5", platformMetadata: pm },
    ],
    ["a bare PlatformMetadata spec", stringify(PM_SPEC), { platformMetadata: pm }],
    [
      "bare specs, SystemInformation first",
      `${stringify(SI_SPEC)}---\n${stringify(PM_SPEC)}`,
      { platformMetadata: pm, systemInformation: si },
    ],
    [
      "a resource without metadata.type, told by its spec keys",
      `node: 10.0.0.5\nspec:\n    platform: metal\n    hostname: web-1.example.com\n    instanceId: i-1\n`,
      { node: "10.0.0.5", platformMetadata: pm },
    ],
    ["talosctl's empty node field", talosctl(PM_TYPE, "", PM_SPEC), { platformMetadata: pm }],
    [
      "a leading comment and a trailing empty document",
      `# from talosctl\n${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n`,
      { node: "10.0.0.5", platformMetadata: pm },
    ],
  ])("parseMetadata() reads %s", (_name, text, node) => {
    expect(parseMetadata(text)).toEqual({ node: node as SampleNode, warnings: [] });
  });

  test("parseMetadata() keeps scalars as written, as yaml.v3 hands them to Go strings", () => {
    const { node } = parseMetadata(
      "platform: metal\ninstanceId: 0123\ninstanceType: 1.10\nregion: ~\nspot: True\ntags:\n  rack: 07\n  n: null\n",
    );
    expect(node.platformMetadata).toEqual(
      platformMetadata({
        platform: "metal",
        instanceId: "0123",
        instanceType: "1.10",
        spot: true,
        tags: { rack: "07", n: "" },
      }),
    );
  });

  test("parseMetadata() reads every PlatformMetadata and SystemInformation key by Talos' yaml tags", () => {
    const { node } = parseMetadata(
      [
        "platform: aws",
        "hostname: h",
        "region: r",
        "zone: z",
        "instanceType: t",
        "instanceId: i",
        "providerId: aws:///z/i",
        "spot: false",
        "internalDNS: in.example",
        "externalDNS: ex.example",
        "tags: {a: b}",
        "---",
        "manufacturer: m",
        "productName: p",
        "version: v",
        "serialnumber: s",
        "uuid: u",
        "wakeUpType: w",
        "skuNumber: k",
        "biosVersion: b",
        "",
      ].join("\n"),
    );
    expect(node).toEqual({
      platformMetadata: {
        platform: "aws",
        hostname: "h",
        region: "r",
        zone: "z",
        instanceType: "t",
        instanceId: "i",
        providerId: "aws:///z/i",
        spot: false,
        internalDNS: "in.example",
        externalDNS: "ex.example",
        tags: { a: "b" },
      },
      systemInformation: {
        manufacturer: "m",
        productName: "p",
        version: "v",
        serialNumber: "s",
        uuid: "u",
        wakeUpType: "w",
        skuNumber: "k",
      },
    });
  });
});

describe("parseMetadata() warnings", () => {
  test("parseMetadata() warns about unknown keys with their line, hinting at the spelling", () => {
    const text = `${talosctl(PM_TYPE, "10.0.0.5", { ...PM_SPEC, instanceID: "x", colour: "red" })}extra: 1\n---\nserialNumber: s\nmanufacturer: m\n`;
    const { node, warnings } = parseMetadata(text);
    expect(node.platformMetadata.instanceId).toBe("i-1");
    expect(node.systemInformation).toEqual(emptySystem({ manufacturer: "m" }));
    expect(warnings).toEqual([
      {
        path: "spec.instanceID",
        line: 15,
        message: 'unknown key "instanceID": ignored; keys are case-sensitive, did you mean "instanceId"?',
      },
      {
        path: "spec.colour",
        line: 16,
        message: 'unknown key "colour": ignored (closest known key: "zone")',
      },
      { path: "extra", line: 17, message: 'unknown key "extra": ignored (closest known key: "event")' },
      {
        path: "serialNumber",
        line: 19,
        message: 'unknown key "serialNumber": ignored; keys are case-sensitive, did you mean "serialnumber"?',
      },
    ]);
  });

  test("parseMetadata() ignores, with a warning, resources of other types", () => {
    const other =
      "node: 10.0.0.5\nmetadata:\n    type: AddressStatuses.net.talos.dev\nspec:\n    address: 10.0.0.5/24\n";
    const { node, warnings } = parseMetadata(`${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${other}`);
    expect(node.platformMetadata.hostname).toBe("web-1.example.com");
    expect(brief(warnings)).toEqual([["metadata.type", 18]]);
    expect(warnings[0]?.message).toContain('"AddressStatuses.net.talos.dev" ignored');
  });

  test("parseMetadata() warns about unknown resource metadata keys", () => {
    const text = talosctl(PM_TYPE, "10.0.0.5", PM_SPEC).replace(
      "    phase: running\n",
      "    stage: running\n",
    );
    expect(brief(parseMetadata(text).warnings)).toEqual([["metadata.stage", 8]]);
  });
});

describe("parseMetadata() errors", () => {
  test.each([
    ["an empty file", "", [["", undefined]], "no PlatformMetadata found"],
    ["SystemInformation alone", stringify(SI_SPEC), [["", undefined]], "no PlatformMetadata found"],
    ["a YAML syntax error", "platform: metal\nhostname: [a\n", [["", 3]], ""],
    ["a list instead of a mapping", "- platform: metal\n", [["", 1]], "expected a talosctl resource"],
    ["a mapping with no known key", "colour: red\n", [["", 1]], "neither a talosctl resource"],
    [
      "a bare spec mixing both kinds",
      "platform: metal\nmanufacturer: m\n",
      [["", 1]],
      "keys of both PlatformMetadata and SystemInformation",
    ],
    ["a mapping as hostname", "platform: metal\nhostname: {a: b}\n", [["hostname", 2]], "expected a string"],
    ["a list as tags", "platform: metal\ntags: [a]\n", [["tags", 2]], "expected a mapping, got a list"],
    ["spot that is not a boolean", "platform: metal\nspot: maybe\n", [["spot", 2]], "expected a boolean"],
    [
      "a resource whose spec is a list",
      "node: a\nspec: [1]\n",
      [["spec", 2]],
      "expected a mapping, got a list",
    ],
    [
      "a resource whose spec is a word",
      "node: a\nspec: none\n",
      [["spec", 2]],
      'expected a mapping, got "none"',
    ],
    ["an alias", "platform: &p metal\nregion: *p\n", [["", 1]], "aliases are not supported"],
  ])("parseMetadata() refuses %s", (_name, text, where, message) => {
    const err = metadataFails(text);
    expect(brief(err.issues)).toEqual(where);
    expect(err.issues[0]?.message).toContain(message);
    expect(err.message).toStartWith("Cannot read node metadata: 1 problem:\n");
  });

  test("parseMetadata() refuses two nodes' PlatformMetadata, naming them", () => {
    const err = metadataFails(
      `${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${talosctl(PM_TYPE, "10.0.0.6", PM_SPEC)}`,
    );
    expect(err.issues).toEqual([
      {
        path: "",
        line: 16,
        message: "2 PlatformMetadata documents (nodes 10.0.0.5, 10.0.0.6): give one node's metadata",
      },
    ]);
  });

  test("parseMetadata() refuses SystemInformation of another node", () => {
    const err = metadataFails(
      talosctl(PM_TYPE, "10.0.0.5", PM_SPEC) + talosctl(SI_TYPE, "10.0.0.6", SI_SPEC),
    );
    expect(err.issues).toEqual([
      {
        path: "",
        line: 15,
        message: "SystemInformation is from node 10.0.0.6, PlatformMetadata from node 10.0.0.5",
      },
    ]);
  });

  test("parseMetadata() reports every problem with the warnings found", () => {
    const err = metadataFails("platform: metal\nspot: maybe\nzone: [z]\ncolour: red\n");
    expect(brief(err.issues)).toEqual([
      ["spot", 2],
      ["zone", 3],
    ]);
    expect(brief(err.warnings)).toEqual([["colour", 4]]);
  });
});

describe("parseMetadata() property", () => {
  const text = fc.stringMatching(/^[a-zA-Z0-9 ._:/-]{0,20}$/);
  test("parseMetadata() reads back any PlatformMetadata that talosctl prints", () => {
    fc.assert(
      fc.property(
        fc.record({
          platform: text,
          hostname: text,
          region: text,
          zone: text,
          instanceType: text,
          instanceId: text,
          providerId: text,
          spot: fc.boolean(),
          internalDNS: text,
          externalDNS: text,
          tags: fc.dictionary(fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/), text, { maxKeys: 3 }),
        }),
        (pm) => {
          const printed = talosctl(PM_TYPE, "10.0.0.5", pm);
          expect(parseMetadata(printed).node).toEqual({ node: "10.0.0.5", platformMetadata: pm });
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("previewNode()", () => {
  const sample: SampleNode = {
    node: "10.0.0.5",
    platformMetadata: platformMetadata({
      platform: "metal",
      hostname: "web-1.example.com",
      instanceId: "i-1",
    }),
    systemInformation: emptySystem({ productName: "ESC4000A-E10", uuid: "u-1" }),
  };
  const CONFIG = [
    "transformations:",
    "  - name: web",
    "    nodeSelector:",
    "      - matchExpressions:",
    "          - {key: hostname, operator: Regexp, values: ['^web-']}",
    "    labels:",
    "      node-role.kubernetes.io/web: ''",
    "      example.com/product: '{{ .ProductName }}'",
    "    annotations:",
    "      example.com/id: 'id-{{ .InstanceID }}'",
    "    taints:",
    "      example.com/dedicated: 'web:NoSchedule'",
    "      example.com/soft: PreferNoSchedule",
    "    platformMetadata:",
    "      Zone: '{{ .Platform }}-a'",
    "      ProviderID: 'example://{{ .UUID }}'",
    "    features:",
    "      publicIPDiscovery: true",
    "  - name: never",
    "    nodeSelector:",
    "      - matchExpressions:",
    "          - {key: platform, operator: In, values: [aws]}",
    "    labels:",
    "      example.com/never: 'x'",
    "",
  ].join("\n");

  test("previewNode() gives exactly what the controller writes at initialization", () => {
    const r = previewNode(parseConfig(CONFIG), sample);
    expect(r.nodeName).toBe("web-1");
    expect(r.nodeIP).toBe("10.0.0.5");
    expect(r.matchedRules).toEqual(["web"]);
    expect(r.errors).toEqual([]);
    expect(r.preview).toEqual({
      providerID: "example://u-1",
      labels: {
        "example.com/product": "ESC4000A-E10",
        "failure-domain.beta.kubernetes.io/zone": "metal-a",
        [MANAGED_DIGEST_LABEL]: managedRecordDigest(
          '{"v":1,"labels":["example.com/product","node-role.kubernetes.io/web"],"annotations":["example.com/id"],"taints":["example.com/dedicated:NoSchedule","example.com/soft:PreferNoSchedule"]}',
        ),
        "node-role.kubernetes.io/web": "",
        "node.cloudprovider.kubernetes.io/platform": "metal",
        "topology.kubernetes.io/zone": "metal-a",
      },
      annotations: {
        "example.com/id": "id-i-1",
        "talos.dev/ccm-managed":
          '{"v":1,"labels":["example.com/product","node-role.kubernetes.io/web"],"annotations":["example.com/id"],"taints":["example.com/dedicated:NoSchedule","example.com/soft:PreferNoSchedule"]}',
      },
      taints: [
        { key: "example.com/dedicated", value: "web", effect: "NoSchedule" },
        { key: "example.com/soft", value: "", effect: "PreferNoSchedule" },
      ],
      platformMetadata: platformMetadata({
        platform: "metal",
        hostname: "web-1.example.com",
        zone: "metal-a",
        instanceId: "i-1",
        providerId: "example://u-1",
      }),
      features: { publicIPDiscovery: true },
    });
  });

  test("previewNode() orders the preview's keys as the issue specifies, labels and tags sorted", () => {
    const r = previewNode(parseConfig(CONFIG), {
      ...sample,
      platformMetadata: { ...sample.platformMetadata, tags: { z: "1", a: "2" } },
    });
    expect(Object.keys(r.preview)).toEqual([
      "providerID",
      "labels",
      "annotations",
      "taints",
      "platformMetadata",
      "features",
    ]);
    expect(Object.keys(r.preview.labels)).toEqual([...Object.keys(r.preview.labels)].sort());
    expect(Object.keys(r.preview.platformMetadata)).toEqual([
      "platform",
      "hostname",
      "region",
      "zone",
      "instanceType",
      "instanceId",
      "providerId",
      "spot",
      "internalDNS",
      "externalDNS",
      "tags",
    ]);
    expect(Object.keys(r.preview.platformMetadata.tags)).toEqual(["a", "z"]);
    for (const t of r.preview.taints) expect(Object.keys(t)).toEqual(["key", "value", "effect"]);
  });

  test.each([
    ["talosctl's node IP", "10.0.0.5", "10.0.0.5", "talos://metal/10.0.0.5"],
    ["an IPv6 node IP", "fd00::5", "fd00::5", "talos://metal/fd00::5"],
    ["no node field", undefined, NODE_IP_PLACEHOLDER, `talos://metal/${NODE_IP_PLACEHOLDER}`],
    ["a node field that is a name", "web-1", NODE_IP_PLACEHOLDER, `talos://metal/${NODE_IP_PLACEHOLDER}`],
    // A kubelet's node IP never has a zone (Go's net.ParseIP refuses one), so the controller never sees it.
    [
      "an IPv6 node IP with a zone",
      "fe80::5%eth0",
      NODE_IP_PLACEHOLDER,
      `talos://metal/${NODE_IP_PLACEHOLDER}`,
    ],
  ])("previewNode() defaults the providerID from %s", (_name, node, ip, providerID) => {
    const r = previewNode(parseConfig(""), {
      ...(node === undefined ? {} : { node }),
      platformMetadata: platformMetadata({ platform: "metal", hostname: "w" }),
    });
    expect(r.nodeIP).toBe(ip);
    expect(r.preview.providerID).toBe(providerID);
    expect(r.preview.platformMetadata.providerId).toBe(providerID);
    // The kubelet's provided-node-ip annotation is not the controller's to write.
    expect(r.preview.annotations).toEqual({});
  });

  test.each([
    ["a short hostname", "worker-1", "worker-1"],
    ["an FQDN (Talos registers the short name)", "worker-1.dc1.example.com", "worker-1"],
    ["no hostname", "", "node"],
  ])("previewNode() names the node from %s", (_name, hostname, nodeName) => {
    const r = previewNode(parseConfig(""), { platformMetadata: platformMetadata({ hostname }) });
    expect(r.nodeName).toBe(nodeName);
    expect(r.preview.platformMetadata.hostname).toBe(hostname === "" ? "node" : hostname);
  });

  test("previewNode() writes no providerID where the controller waits for the instance ID, and says so", () => {
    const r = previewNode(parseConfig(""), {
      platformMetadata: platformMetadata({ platform: "hcloud", hostname: "w1" }),
      node: "10.0.1.2",
    });
    expect(r.preview.providerID).toBe("");
    expect(r.providerIDWait).toStartWith(
      "its instance ID: Talos reports platform hcloud without an instance ID",
    );
    expect(formatPreview(r).split("\n")).toContain("providerID: (none yet: waits for the instance ID)");
    const out = validate({
      configPath: "c.yaml",
      configText: "",
      metadataPath: "m.yaml",
      metadataText: "spec: {platform: hcloud}\nnode: 10.0.1.2\n",
    });
    expect(out.stderr).toEqual([
      `m.yaml: warning: no providerID is written yet: the controller waits for ${r.providerIDWait}`,
    ]);
  });

  test("previewNode() keeps a providerID Talos reports and writes the cloud's topology and spot labels", () => {
    const r = previewNode(parseConfig("global:\n  clusterName: prod\n"), {
      platformMetadata: platformMetadata({
        platform: "aws",
        hostname: "ip-10-0-0-5.ec2.internal",
        region: "us-east-1",
        zone: "us-east-1a",
        instanceType: "m7i.large",
        instanceId: "i-1",
        providerId: "aws:///us-east-1a/i-1",
        spot: true,
      }),
    });
    expect(r.preview.providerID).toBe("aws:///us-east-1a/i-1");
    expect(r.preview.labels).toEqual({
      "beta.kubernetes.io/instance-type": "m7i.large",
      "failure-domain.beta.kubernetes.io/region": "us-east-1",
      "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
      "node.cloudprovider.kubernetes.io/clustername": "prod",
      "node.cloudprovider.kubernetes.io/lifecycle": "spot",
      "node.cloudprovider.kubernetes.io/platform": "aws",
      "node.kubernetes.io/instance-type": "m7i.large",
      "topology.kubernetes.io/region": "us-east-1",
      "topology.kubernetes.io/zone": "us-east-1a",
    });
    expect(r.preview.taints).toEqual([]);
  });

  test("previewNode() reports values a rule cannot apply and applies the rest", () => {
    const config = parseConfig(
      "transformations:\n  - name: bad\n    labels:\n      ok: 'yes'\n      broken: '{{ .Hostname }} !'\n",
    );
    const r = previewNode(config, sample);
    expect(r.matchedRules).toEqual(["bad"]);
    expect(r.preview.labels.ok).toBe("yes");
    expect(r.preview.labels.broken).toBeUndefined();
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]).toMatchObject({ rule: "bad", field: "labels", key: "broken" });
  });

  test("previewNode() renders SystemInformation fields as empty when the node has none", () => {
    const config = parseConfig("transformations:\n  - labels:\n      p: 'x{{ .ProductName }}x'\n");
    const r = previewNode(config, { platformMetadata: sample.platformMetadata });
    expect(r.preview.labels.p).toBe("xx");
  });
});

describe("formatPreview()", () => {
  test("formatPreview() prints one section per part", () => {
    const preview: Preview = {
      providerID: "talos://metal/10.0.0.5",
      labels: { "a/b": "", c: "d" },
      annotations: {},
      taints: [
        { key: "t", value: "", effect: "NoSchedule" },
        { key: "u", value: "v", effect: "NoExecute" },
      ],
      platformMetadata: platformMetadata({ platform: "metal", hostname: "w", spot: true, tags: { k: "v" } }),
      features: { publicIPDiscovery: false },
    };
    expect(
      formatPreview({ preview, nodeName: "w", nodeIP: "10.0.0.5", matchedRules: ["r1", "r2"], errors: [] }),
    ).toBe(
      [
        "Node w (platform metal, node IP 10.0.0.5)",
        "Matching rules: r1, r2",
        "providerID: talos://metal/10.0.0.5",
        "labels:",
        "  a/b=",
        "  c=d",
        "annotations:",
        "  (none)",
        "taints:",
        "  t:NoSchedule",
        "  u=v:NoExecute",
        "platformMetadata:",
        "  platform: metal",
        "  hostname: w",
        '  region: ""',
        '  zone: ""',
        '  instanceType: ""',
        '  instanceId: ""',
        '  providerId: ""',
        "  spot: true",
        '  internalDNS: ""',
        '  externalDNS: ""',
        '  tags: {"k":"v"}',
        "features:",
        "  publicIPDiscovery: false",
        "",
      ].join("\n"),
    );
  });
});

describe("validate()", () => {
  const PM = talosctl(PM_TYPE, "10.0.0.5", PM_SPEC);

  test.each<[string, string, 0 | 1, string, string[]]>([
    ["an empty config", "", 0, "c.yaml: valid (0 transformation rules, 0 warnings)\n", []],
    [
      "a config with a warning",
      "global:\n  PreferIPv6: true\n",
      0,
      "c.yaml: valid (0 transformation rules, 1 warning)\n",
      [
        'c.yaml: warning: global.PreferIPv6 (line 2): unknown key "PreferIPv6": ignored; keys are case-sensitive, did you mean "preferIPv6"?',
      ],
    ],
    [
      "an invalid config",
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: hostname, operator: Regexp, values: ['(']}\n",
      1,
      "",
      [
        // An asymmetric matcher stands in for the regex engine's own wording.
        expect.stringMatching(
          /^c\.yaml: error: transformations\[0\]\.nodeSelector\[0\]\.matchExpressions\[0\]\.values\[0\] \(line 4\): /,
        ) as unknown as string,
        "c.yaml: invalid (1 error)",
      ],
    ],
    [
      "a rule with a misspelled nodeSelector (it would match every node)",
      "transformations:\n  - labels: {a: b}\n    nodeSelecter: [{matchExpressions: [{key: zone, operator: Exists}]}]\n",
      1,
      "",
      [
        'c.yaml: error: transformations[0].nodeSelecter (line 3): unknown key "nodeSelecter": not allowed in a rule without nodeSelector, which applies to every node (closest known key: "nodeSelector")',
        "c.yaml: invalid (1 error)",
      ],
    ],
    [
      "a rule with a selector key no node has, and a warning outside the rules",
      "global: {PreferIPv6: true}\ntransformations:\n  - nodeSelector: [{matchExpressions: [{key: hostnme, operator: DoesNotExist}]}]\n",
      1,
      "",
      [
        'c.yaml: error: transformations[0].nodeSelector[0].matchExpressions[0].key (line 3): unknown selector key "hostnme": no node has it (closest known key: "hostname")',
        'c.yaml: warning: global.PreferIPv6 (line 1): unknown key "PreferIPv6": ignored; keys are case-sensitive, did you mean "preferIPv6"?',
        "c.yaml: invalid (1 error)",
      ],
    ],
    [
      "a config over the size limit",
      `# ${"x".repeat(1024 * 1024)}\n`,
      1,
      "",
      [
        "c.yaml: error: document: the config is larger than 1048576 bytes (1 MiB, the size limit of a ConfigMap)",
        "c.yaml: invalid (1 error)",
      ],
    ],
    [
      "100,000 nested brackets, by their nesting, once",
      "[".repeat(100_000),
      1,
      "",
      ["c.yaml: error: document (line 1): YAML nesting deeper than 64 levels", "c.yaml: invalid (1 error)"],
    ],
  ])("validate() without metadata checks %s", (_name, configText, exitCode, stdout, stderr) => {
    const r = validate({ configPath: "c.yaml", configText });
    expect(r.exitCode).toBe(exitCode);
    expect(r.stdout).toBe(stdout);
    expect(r.stderr).toEqual(stderr);
  });

  test("validate() says that -o needs --metadata", () => {
    const r = validate({ configPath: "c.yaml", configText: "", output: "json" });
    expect(r).toEqual({
      exitCode: 0,
      stdout: "c.yaml: valid (0 transformation rules, 1 warning)\n",
      stderr: ["warning: -o json has no effect without --metadata"],
    });
  });

  test("validate() -o json prints exactly the preview object", () => {
    const r = validate({
      configPath: "c.yaml",
      configText: "",
      metadataPath: "m.yaml",
      metadataText: PM,
      output: "json",
    });
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toEqual([]);
    expect(r.stdout).toBe(
      `${JSON.stringify(
        {
          providerID: "talos://metal/10.0.0.5",
          labels: { "node.cloudprovider.kubernetes.io/platform": "metal" },
          annotations: {},
          taints: [],
          platformMetadata: platformMetadata({
            platform: "metal",
            hostname: "web-1.example.com",
            instanceId: "i-1",
            providerId: "talos://metal/10.0.0.5",
          }),
          features: { publicIPDiscovery: false },
        },
        null,
        2,
      )}\n`,
    );
  });

  test("validate() -o yaml prints the same object as YAML", () => {
    const input = { configPath: "c.yaml", configText: "", metadataPath: "m.yaml", metadataText: PM };
    const json = JSON.parse(validate({ ...input, output: "json" }).stdout);
    const yaml = validate({ ...input, output: "yaml" }).stdout;
    expect(parseYaml(yaml)).toEqual(json);
    expect(Object.keys(parseYaml(yaml))).toEqual(Object.keys(json));
  });

  test("validate() prints the summary and the preview for people", () => {
    const r = validate({ configPath: "c.yaml", configText: "", metadataPath: "m.yaml", metadataText: PM });
    expect(r.stdout).toStartWith(
      "c.yaml: valid (0 transformation rules, 0 warnings)\nNode web-1 (platform metal, node IP 10.0.0.5)\n",
    );
  });

  test("validate() fails on invalid metadata with every problem and warning", () => {
    const r = validate({
      configPath: "c.yaml",
      configText: "",
      metadataPath: "m.yaml",
      metadataText: "platform: metal\nspot: 2\nx: 1\n",
    });
    expect(r).toEqual({
      exitCode: 1,
      stdout: "",
      stderr: [
        'm.yaml: error: spot (line 2): expected a boolean (true or false), got "2"',
        'm.yaml: warning: x (line 3): unknown key "x": ignored (closest known key: "zone")',
        "m.yaml: invalid (1 error)",
      ],
    });
  });

  test("validate() passes with a warning when a rule value fails on the node (the controller skips it)", () => {
    const r = validate({
      configPath: "c.yaml",
      configText: "transformations:\n  - name: r\n    labels:\n      l: '{{ .Hostname }}/x'\n",
      metadataPath: "m.yaml",
      metadataText: PM,
      output: "json",
    });
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(r.stdout).labels.l).toBeUndefined();
    expect(r.stderr).toEqual([
      expect.stringMatching(
        /^c\.yaml: warning: skipped on this node: rule "r" labels\["l"\]: invalid value "web-1\.example\.com\/x"/,
      ),
    ]);
  });

  test.each<[string, string, string]>([
    [
      "over the size limit",
      `platform: metal\n# ${"x".repeat(1024 * 1024)}\n`,
      "m.yaml: error: document: the node metadata is larger than 1048576 bytes (1 MiB, a node's metadata from talosctl is a few KiB)",
    ],
    [
      "200,000 nested brackets",
      `platform: metal\nx: ${"[".repeat(200_000)}${"]".repeat(200_000)}\n`,
      "m.yaml: error: document (line 2): YAML nesting deeper than 64 levels",
    ],
    [
      "100,000 documents",
      "---\nplatform: metal\n".repeat(100_000).slice(0, 1_000_000),
      "m.yaml: error: document (line 33): more than 16 YAML documents: give one node's metadata",
    ],
    [
      "20,000 keys",
      `platform: metal\n${Array.from({ length: 20_000 }, (_, i) => `k${i}: 1\n`).join("")}`,
      "m.yaml: error: document (line 1429): more than 10000 YAML tokens (keys, values, indicators, indentation, comments and line breaks)",
    ],
  ])(
    "validate() refuses node metadata %s before composing it, naming the bound",
    (_name, metadataText, error) => {
      const r = validate({ configPath: "c.yaml", configText: "", metadataPath: "m.yaml", metadataText });
      expect(r).toEqual({ exitCode: 1, stdout: "", stderr: [error, "m.yaml: invalid (1 error)"] });
    },
  );

  test("validate()'s summary counts every warning it printed: the config's, the metadata's and the preview's", () => {
    const r = validate({
      configPath: "c.yaml",
      configText:
        "global: {PreferIPv6: true}\ntransformations:\n  - name: r\n    labels:\n      l: '{{ .Hostname }}/x'\n",
      metadataPath: "m.yaml",
      metadataText: "platform: metal\nhostname: web-1\nx: 1\ny: 2\n",
    });
    expect(r.exitCode).toBe(0);
    const warnings = r.stderr.filter((l) => /^(c|m)\.yaml: warning: /.test(l));
    expect(warnings.length).toBe(5); // PreferIPv6, x, y, the skipped label, the node IP
    expect(r.stderr).toEqual(warnings);
    expect(r.stdout).toStartWith("c.yaml: valid (1 transformation rule, 5 warnings)\n");
  });

  test("validate() warns when the default providerID lacks the node IP", () => {
    const r = validate({
      configPath: "c.yaml",
      configText: "",
      metadataPath: "m.yaml",
      metadataText: "platform: metal\n",
      output: "json",
    });
    expect(r.stderr).toEqual([
      `m.yaml: warning: no node IP (talosctl's "node:" field), so the default providerID shows ${NODE_IP_PLACEHOLDER}`,
    ]);
  });
});
