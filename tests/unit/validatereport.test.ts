// lib/validatereport.ts: the preview of what the cloud-node controller writes on a sample node
// (previewNode, formatPreview) and the whole `validate` run on contents already read (validate()).

import { describe, expect, test } from "bun:test";
import { parse as parseYaml } from "yaml";
import { parseConfig } from "../../lib/config.ts";
import { managedRecordDigest } from "../../lib/managedrecord.ts";
import type { SampleNode } from "../../lib/validatemetadata.ts";
import {
  formatPreview,
  NODE_IP_PLACEHOLDER,
  type Preview,
  previewNode,
  validate,
} from "../../lib/validatereport.ts";
import { MANAGED_DIGEST_LABEL } from "../../lib/wellknown.ts";
import { platformMetadata } from "../support/fixtures.ts";
import { emptySystem, PM_TYPE, talosctl } from "../support/talosctlyaml.ts";

/** The PlatformMetadata spec of the sample node's talosctl output. */
const PM_SPEC = { platform: "metal", hostname: "web-1.example.com", instanceId: "i-1" };

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

  test("validate() warns that a node whose rule taint does not render stays uninitialized (the controller holds it)", () => {
    const r = validate({
      configPath: "c.yaml",
      configText: "transformations:\n  - name: r\n    taints:\n      t: '{{ .Hostname }}'\n",
      metadataPath: "m.yaml",
      metadataText: PM,
      output: "json",
    });
    expect(r.exitCode).toBe(0);
    expect(r.stderr).toEqual([
      expect.stringMatching(/^c\.yaml: warning: skipped on this node: rule "r" taints\["t"\]: invalid taint/),
      "c.yaml: warning: this node is not initialized (it stays tainted) while a taint of its rules does not render",
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
