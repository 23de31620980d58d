// The compiled binary's `validate` subcommand: exit codes, the exact `-o json` shape, the reference's
// example configs, talosctl's multi-document and concatenated output, bare specs, stdin, and every
// ready-made rule set in rules/ run against its fixtures in tests/fixtures/rules/.

import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import type { PlatformMetadata } from "../../lib/types.ts";
import { platformMetadata } from "../support/fixtures.ts";
import { ccmBinary } from "../support/process.ts";

/** The label that signs the record annotation: the hex SHA-224 of its value. */
const DIGEST_LABEL = "node-restriction.kubernetes.io/talos-ccm-managed";
const digest = (record: string) => new Bun.CryptoHasher("sha224").update(record).digest("hex");

/** A preview with the digest label of its record annotation, if any, among its sorted labels. */
function signed<T extends { labels: Record<string, string>; annotations: Record<string, string> }>(p: T): T {
  const record = p.annotations["talos.dev/ccm-managed"];
  if (record === undefined) return p;
  const labels = Object.entries({ ...p.labels, [DIGEST_LABEL]: digest(record) }).sort(([a], [b]) =>
    a < b ? -1 : a > b ? 1 : 0,
  );
  return { ...p, labels: Object.fromEntries(labels) };
}

const ROOT = join(import.meta.dir, "..", "..");
const FIXTURES = join(ROOT, "tests", "fixtures");
const RULES = join(ROOT, "rules");

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function validate(args: string[], input?: string): Run {
  const r = spawnSync(ccmBinary(), ["validate", ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    ...(input === undefined ? {} : { input }),
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const scratch = mkdtempSync(join(tmpdir(), "validate-e2e-"));
let files = 0;
/** Writes `text` to a new scratch file and returns its path. */
function file(text: string): string {
  const path = join(scratch, `f${files++}.yaml`);
  writeFileSync(path, text);
  return path;
}

const NO_FEATURES = { publicIPDiscovery: false };

const PLATFORM_METADATA = `node: 10.0.0.5
metadata:
    namespace: runtime
    type: PlatformMetadatas.talos.dev
    id: platformmetadata
    version: 4
    owner: network.PlatformConfigController
    phase: running
    created: 2025-03-01T10:00:00Z
    updated: 2025-03-01T10:00:02Z
spec:
    platform: metal
    hostname: web-a1b2-frontend
    instanceId: 7c9e6679
`;
const SYSTEM_INFORMATION = `node: 10.0.0.5
metadata:
    namespace: hardware
    type: SystemInformations.hardware.talos.dev
    id: systeminformation
    version: 1
    owner: hardware.SystemInfoController
    phase: running
    created: 2025-03-01T10:00:00Z
    updated: 2025-03-01T10:00:00Z
spec:
    manufacturer: Dell Inc.
    productName: PowerEdge R650
    serialnumber: 4XK2B53
    uuid: 4c4c4544-0058-4b10-8032-b4c04f423533
    skuNumber: SKU=0A7B
`;
const RULE = `transformations:
  - name: web
    nodeSelector:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ['^web-']}
    labels:
      node-role.kubernetes.io/web: ""
      example.com/model: '{{ replace " " "-" .ProductName }}'
    annotations:
      example.com/cloud-id: '{{ regexFindString "^web-([a-z0-9]+)-(.*)$" .Hostname 1 }}'
    taints:
      example.com/dedicated: web:NoSchedule
    platformMetadata:
      InstanceType: '{{ .SKUNumber | trimPrefix "SKU=" }}'
`;
const RULE_PREVIEW = signed({
  providerID: "talos://metal/10.0.0.5",
  labels: {
    "beta.kubernetes.io/instance-type": "0A7B",
    "example.com/model": "PowerEdge-R650",
    "node-role.kubernetes.io/web": "",
    "node.cloudprovider.kubernetes.io/platform": "metal",
    "node.kubernetes.io/instance-type": "0A7B",
  },
  annotations: {
    "example.com/cloud-id": "a1b2",
    "talos.dev/ccm-managed":
      '{"v":1,"labels":["example.com/model","node-role.kubernetes.io/web"],"annotations":["example.com/cloud-id"],"taints":["example.com/dedicated:NoSchedule"]}',
  },
  taints: [{ key: "example.com/dedicated", value: "web", effect: "NoSchedule" }],
  platformMetadata: platformMetadata({
    platform: "metal",
    hostname: "web-a1b2-frontend",
    instanceType: "0A7B",
    instanceId: "7c9e6679",
    providerId: "talos://metal/10.0.0.5",
  }),
  features: NO_FEATURES,
});

/** A rule whose misspelled `nodeSelector` would otherwise leave it matching every node. */
const NODE_SELECTER = `transformations:
  - name: gpu
    nodeSelecter:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ["^gpu-"]}
    taints:
      nvidia.com/gpu: "present:NoSchedule"
`;

describe("validate exit codes", () => {
  test("validate exits 0 on a valid config and prints a summary", () => {
    const r = validate(["--cloud-config", file(RULE)]);
    expect(r).toMatchObject({ status: 0, stderr: "" });
    expect(r.stdout).toEndWith(": valid (1 transformation rule, 0 warnings)\n");
  });

  test("validate exits 1 on an invalid config, printing every error with path and line", () => {
    const config = file(
      "transformations:\n  - labels:\n      a: '{{ .Nope '\n    taints:\n      b: 'x:Sometimes'\n    nodeSelector:\n      - matchExpressions:\n          - {key: zone, operator: Near, values: [a]}\n",
    );
    const r = validate(["--cloud-config", config, "--metadata", file(PLATFORM_METADATA), "-o", "json"]);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe("");
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines[0]).toStartWith(`${config}: error: transformations[0].labels.a (line 3): invalid template`);
    expect(lines[1]).toStartWith(
      `${config}: error: transformations[0].taints.b (line 5): effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute: the rule would apply without this entry`,
    );
    expect(lines[2]).toStartWith(
      `${config}: error: transformations[0].nodeSelector[0].matchExpressions[0].operator (line 8): `,
    );
    expect(lines.at(-1)).toBe(`${config}: invalid (3 errors)`);
  });

  test("validate exits 1 on a misspelled taint effect, naming its path, line and the closest effect (the Go CCM failed every matching node over it)", () => {
    const config = file(RULE.replace("web:NoSchedule", "web:NoSchedul"));
    const line = RULE.split("\n").findIndex((l) => l.includes("web:NoSchedule")) + 1;
    const r = validate(["--cloud-config", config]);
    expect(r).toEqual({
      status: 1,
      stdout: "",
      stderr:
        `${config}: error: transformations[0].taints["example.com/dedicated"] (line ${line}): effect "NoSchedul" is not one of ` +
        `NoSchedule, PreferNoSchedule, NoExecute (closest: "NoSchedule"): the rule would apply without this entry (fix or remove it)\n` +
        `${config}: invalid (1 error)\n`,
    });
  });

  test("validate exits 1 on a misspelled nodeSelector, naming the key it meant", () => {
    const config = file(NODE_SELECTER);
    const r = validate(["--cloud-config", config]);
    expect(r).toEqual({
      status: 1,
      stdout: "",
      stderr: `${config}: error: transformations[0].nodeSelecter (line 3): unknown key "nodeSelecter": not allowed in a rule without nodeSelector, which applies to every node (closest known key: "nodeSelector")\n${config}: invalid (1 error)\n`,
    });
  });

  test("the controller manager refuses to start on a misspelled nodeSelector, before touching the cluster", () => {
    const config = file(NODE_SELECTER);
    const r = spawnSync(ccmBinary(), [`--cloud-config=${config}`, "--kubeconfig=/nonexistent/kubeconfig"], {
      encoding: "utf8",
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
      timeout: 20_000,
    });
    expect(r.status).toBe(1);
    // The log line quotes the message, so its quotes are escaped.
    const problem = String.raw`transformations[0].nodeSelecter (line 3): unknown key \"nodeSelecter\": not allowed in a rule without nodeSelector, which applies to every node (closest known key: \"nodeSelector\")`;
    const output = r.stdout + r.stderr;
    expect(output).toContain("Cannot load cloud config: 1 problem:");
    expect(output.split(problem)).toHaveLength(2); // said once
    expect(output).not.toContain("kubeconfig");
  });

  test("validate exits 1 on invalid metadata", () => {
    const r = validate(["--cloud-config", file(""), "--metadata", file("platform: metal\nspot: perhaps\n")]);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(': error: spot (line 2): expected a boolean (true or false), got "perhaps"');
  });

  test.each([
    [
      "a missing config file",
      ["--cloud-config", "/nonexistent/ccm.yaml"],
      "Cannot read cloud config /nonexistent/ccm.yaml: ",
    ],
    [
      "a missing metadata file",
      ["--metadata", "/nonexistent/m.yaml"],
      "Cannot read node metadata /nonexistent/m.yaml: ",
    ],
  ])("validate exits 1 on %s", (_name, args, message) => {
    const r = validate(args[0] === "--cloud-config" ? args : ["--cloud-config", file(""), ...args]);
    expect(r.status).toBe(1);
    expect(r.stderr).toStartWith(message);
  });

  test.each([
    ["no --cloud-config", [], "validate needs --cloud-config FILE"],
    ["an unknown output format", ["--cloud-config=c.yaml", "-o", "xml"], 'invalid value "xml" for --output'],
    ["an unknown flag", ["--cloud-config=c.yaml", "--strict"], "--strict"],
  ])("validate exits 2 on %s", (_name, args, message) => {
    const r = validate(args);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(message);
  });

  test.each<[string, string, boolean, string]>([
    [
      "a metadata file over 1 MiB, refused by its size before it is read",
      `platform: metal\n# ${"x".repeat(2 * 1024 * 1024)}\n`,
      false,
      "error: document: the file (2097171 bytes) is larger than 1048576 bytes (1 MiB, a node's metadata from talosctl is a few KiB)",
    ],
    [
      // Bun hands spawnSync's input over as a file, so its size is known here too.
      "over 1 MiB of metadata on stdin",
      `platform: metal\n# ${"x".repeat(2 * 1024 * 1024)}\n`,
      true,
      "error: document: the file (2097171 bytes) is larger than 1048576 bytes (1 MiB, a node's metadata from talosctl is a few KiB)",
    ],
    [
      "metadata nested 200,000 deep",
      `platform: metal\nx: ${"[".repeat(200_000)}${"]".repeat(200_000)}\n`,
      false,
      "error: document (line 2): YAML nesting deeper than 64 levels",
    ],
    [
      "metadata of 50,000 documents",
      "---\nplatform: metal\n".repeat(50_000),
      false,
      "error: document (line 33): more than 16 YAML documents: give one node's metadata",
    ],
  ])("validate exits 1 on %s", (_name, metadata, stdin, message) => {
    const path = stdin ? "-" : file(metadata);
    const r = validate(["--cloud-config", file(""), "--metadata", path], stdin ? metadata : undefined);
    const label = stdin ? "stdin" : path;
    expect(r).toEqual({
      status: 1,
      stdout: "",
      stderr: `${label}: ${message}\n${label}: invalid (1 error)\n`,
    });
  });

  test("validate exits 2 when both files would come from stdin", () => {
    const r = validate(["--cloud-config", "-", "--metadata", "-"], "platform: metal\n");
    expect(r).toEqual({
      status: 2,
      stdout: "",
      stderr: "Cannot read both the cloud config and the node metadata from stdin: give one a file\n",
    });
  });

  test("validate exits 0 with a warning when a rule value fails on the node", () => {
    const config = file(
      "transformations:\n  - name: r\n    labels:\n      example.com/h: '{{ .Hostname }}!'\n",
    );
    const r = validate(["--cloud-config", config, "--metadata", file(PLATFORM_METADATA), "-o", "json"]);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).labels).toEqual({ "node.cloudprovider.kubernetes.io/platform": "metal" });
    expect(r.stderr).toStartWith(
      `${config}: warning: skipped on this node: rule "r" labels["example.com/h"]: invalid value "web-a1b2-frontend!"`,
    );
  });
});

describe("validate --metadata input forms", () => {
  test.each([
    ["talosctl output separated by ---", `${PLATFORM_METADATA}---\n${SYSTEM_INFORMATION}`],
    ["two talosctl outputs concatenated", SYSTEM_INFORMATION + PLATFORM_METADATA],
  ])("validate -o json prints exactly the preview object from %s", (_name, metadata) => {
    const r = validate(["--cloud-config", file(RULE), "--metadata", file(metadata), "-o", "json"]);
    expect(r).toMatchObject({ status: 0, stderr: "" });
    // Exactly this text: the keys in the order, taints as {key, value, effect}.
    expect(r.stdout).toBe(`${JSON.stringify(RULE_PREVIEW, null, 2)}\n`);
  });

  test("validate reads bare specs, and says the default providerID lacks the node IP", () => {
    const metadata = file(
      "manufacturer: Dell Inc.\nproductName: PowerEdge R650\nskuNumber: SKU=0A7B\n---\nplatform: metal\nhostname: web-a1b2-frontend\ninstanceId: 7c9e6679\n",
    );
    const r = validate(["--cloud-config", file(RULE), "--metadata", metadata, "-o", "json"]);
    expect(r.status).toBe(0);
    const preview = JSON.parse(r.stdout);
    expect(preview.providerID).toBe("talos://metal/<node-ip>");
    expect(preview.labels).toEqual(RULE_PREVIEW.labels);
    expect(r.stderr).toBe(
      `${metadata}: warning: no node IP (talosctl's "node:" field), so the default providerID shows <node-ip>\n`,
    );
  });

  test("validate --metadata - reads stdin", () => {
    const r = validate(
      ["--cloud-config", file(RULE), "--metadata", "-", "-o", "json"],
      `${PLATFORM_METADATA}---\n${SYSTEM_INFORMATION}`,
    );
    expect(r).toMatchObject({ status: 0, stderr: "" });
    expect(JSON.parse(r.stdout)).toEqual(RULE_PREVIEW);
  });

  test("validate -o yaml prints the same object", () => {
    const r = validate([
      "--cloud-config",
      file(RULE),
      "--metadata",
      file(PLATFORM_METADATA + SYSTEM_INFORMATION),
      "-o",
      "yaml",
    ]);
    expect(r.status).toBe(0);
    expect(parseYaml(r.stdout)).toEqual(RULE_PREVIEW);
  });

  test("validate prints the preview for people by default", () => {
    const config = file(RULE);
    const r = validate([
      "--cloud-config",
      config,
      "--metadata",
      file(PLATFORM_METADATA + SYSTEM_INFORMATION),
    ]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      [
        `${config}: valid (1 transformation rule, 0 warnings)`,
        "Node web-a1b2-frontend (platform metal, node IP 10.0.0.5)",
        "Matching rules: web",
        "providerID: talos://metal/10.0.0.5",
        "labels:",
        "  beta.kubernetes.io/instance-type=0A7B",
        "  example.com/model=PowerEdge-R650",
        `  ${DIGEST_LABEL}=${digest(RULE_PREVIEW.annotations["talos.dev/ccm-managed"])}`,
        "  node-role.kubernetes.io/web=",
        "  node.cloudprovider.kubernetes.io/platform=metal",
        "  node.kubernetes.io/instance-type=0A7B",
        "annotations:",
        "  example.com/cloud-id=a1b2",
        `  talos.dev/ccm-managed=${RULE_PREVIEW.annotations["talos.dev/ccm-managed"]}`,
        "taints:",
        "  example.com/dedicated=web:NoSchedule",
        "platformMetadata:",
        "  platform: metal",
        "  hostname: web-a1b2-frontend",
        '  region: ""',
        '  zone: ""',
        "  instanceType: 0A7B",
        "  instanceId: 7c9e6679",
        "  providerId: talos://metal/10.0.0.5",
        "  spot: false",
        '  internalDNS: ""',
        '  externalDNS: ""',
        "  tags: {}",
        "features:",
        "  publicIPDiscovery: false",
        "",
      ].join("\n"),
    );
  });

  test("validate warns about unknown metadata keys with their line", () => {
    const metadata = file(PLATFORM_METADATA.replace("    instanceId:", "    instanceID:"));
    const r = validate(["--cloud-config", file(""), "--metadata", metadata, "-o", "json"]);
    expect(r.status).toBe(0);
    expect(r.stderr).toBe(
      `${metadata}: warning: spec.instanceID (line 14): unknown key "instanceID": ignored; keys are case-sensitive, did you mean "instanceId"?\n`,
    );
  });
});

describe("validate on the reference's example configs", () => {
  test("validate accepts the reference's hack/ccm-config.yaml and previews its rule", () => {
    const config = join(FIXTURES, "reference-ccm-config.yaml");
    expect(validate(["--cloud-config", config])).toEqual({
      status: 0,
      stdout: `${config}: valid (2 transformation rules, 0 warnings)\n`,
      stderr: "",
    });
    const r = validate(["--cloud-config", config, "--metadata", file(PLATFORM_METADATA), "-o", "json"]);
    expect(JSON.parse(r.stdout)).toEqual(
      signed({
        providerID: "talos://metal/10.0.0.5",
        labels: { "node-role.kubernetes.io/web": "", "node.cloudprovider.kubernetes.io/platform": "metal" },
        annotations: {
          "talos.dev/ccm-managed":
            '{"v":1,"labels":["node-role.kubernetes.io/web"],"annotations":["talos.dev/instance-id"],"taints":["node.cloudprovider.kubernetes.io/storage-type:NoSchedule"]}',
          "talos.dev/instance-id": "id-7c9e6679",
        },
        taints: [{ key: "node.cloudprovider.kubernetes.io/storage-type", value: "", effect: "NoSchedule" }],
        platformMetadata: platformMetadata({
          platform: "metal",
          hostname: "web-a1b2-frontend",
          instanceId: "7c9e6679",
          providerId: "talos://metal/10.0.0.5",
        }),
        features: NO_FEATURES,
      }),
    );
  });

  test("validate accepts the reference's docs/rules.yaml as written, warning about what it ignores", () => {
    const config = join(FIXTURES, "reference-rules.yaml");
    const r = validate(["--cloud-config", config]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${config}: valid (2 transformation rules, 3 warnings)\n`);
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${config}: warning: transformations[0].labels["talos.dev/zone\\""] (line 29): entry ignored: key name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      `${config}: warning: transformations[1].features.publicIPPredict (line 65): unknown key "publicIPPredict": ignored: an unknown feature stays off (closest known key: "publicIPDiscovery")`,
      `${config}: warning: document (line 71): only the first YAML document is read; 1 more ignored`,
    ]);
  });

  test("validate names the nodeSelector term that matched, from the reference's docs/rules.yaml", () => {
    const config = join(FIXTURES, "reference-rules.yaml");
    const openstack = join(FIXTURES, "rules", "reference-openstack.yaml");
    const r = validate(["--cloud-config", config, "--metadata", openstack]);
    expect(r.status).toBe(0);
    expect(r.stdout.split("\n")).toContain('Matching rules: openstack (term "fix openstack zone")');
  });

  test("validate previews the reference's OpenStack example with its docs/rules.yaml", () => {
    const config = join(FIXTURES, "reference-rules.yaml");
    const openstack = join(FIXTURES, "rules", "reference-openstack.yaml");
    const r = validate(["--cloud-config", config, "--metadata", openstack, "-o", "json"]);
    expect(r.status).toBe(0);
    expect(
      r.stderr
        .trimEnd()
        .split("\n")
        .map((l) => l.slice(0, l.indexOf(": ", config.length + 11))),
    ).toEqual([
      `${config}: warning: transformations[0].labels["talos.dev/zone\\""] (line 29)`,
      `${config}: warning: transformations[1].features.publicIPPredict (line 65)`,
      `${config}: warning: document (line 71)`,
    ]);
    expect(JSON.parse(r.stdout)).toEqual(
      signed({
        providerID: "openstack://fra/9a1fd9ee-9f05-473e-88d8-1b1b1b1b1b1b",
        labels: {
          "beta.kubernetes.io/instance-type": "b2-7",
          "failure-domain.beta.kubernetes.io/region": "eu-frankfurt-1",
          "failure-domain.beta.kubernetes.io/zone": "frankfurt",
          "node-role.kubernetes.io/web": "",
          "node.cloudprovider.kubernetes.io/platform": "openstack",
          "node.kubernetes.io/instance-type": "b2-7",
          "talos.dev/zone": "frankfurt",
          "topology.kubernetes.io/region": "eu-frankfurt-1",
          "topology.kubernetes.io/zone": "frankfurt",
        },
        annotations: {
          "talos.dev/ccm-managed": '{"v":1,"labels":["node-role.kubernetes.io/web","talos.dev/zone"]}',
        },
        taints: [],
        platformMetadata: platformMetadata({
          platform: "openstack",
          hostname: "web-fra-de11",
          region: "eu-frankfurt-1",
          zone: "frankfurt",
          instanceType: "b2-7",
          instanceId: "9a1fd9ee-9f05-473e-88d8-1b1b1b1b1b1b",
          providerId: "openstack://fra/9a1fd9ee-9f05-473e-88d8-1b1b1b1b1b1b",
        }),
        features: NO_FEATURES,
      }),
    );
  });

  test("validate previews the reference's Oracle example, whose misspelt label key is dropped", () => {
    const config = join(FIXTURES, "reference-rules.yaml");
    const oracle = join(FIXTURES, "rules", "reference-oracle.yaml");
    const preview = JSON.parse(
      validate(["--cloud-config", config, "--metadata", oracle, "-o", "json"]).stdout,
    );
    expect(preview.annotations).toEqual({
      "oci.oraclecloud.com/compartment-id": "ocid1.compartment.oc1..aaaaaaaabbbbbbccccccdddddd",
      "oci.oraclecloud.com/instance-id": "ocid1.instance.oc1.eu-frankfurt-1.aaaaaaaabbbbbbccccccdddddd",
      "talos.dev/ccm-managed":
        '{"v":1,"labels":["node-role.kubernetes.io/web"],"annotations":["oci.oraclecloud.com/compartment-id","oci.oraclecloud.com/instance-id"]}',
    });
    expect(preview.labels["node-role.kubernetes.io/web"]).toBe("");
    expect(preview.platformMetadata.zone).toBe("EU-FRANKFURT-1-AD-2");
    expect(preview.providerID).toBe("oci://ocid1.instance.oc1.eu-frankfurt-1.aaaaaaaabbbbbbccccccdddddd");
  });

  test("validate refuses the reference's docs/config.md example as its decoder does", () => {
    const config = join(FIXTURES, "reference-config-md.yaml");
    const r = validate(["--cloud-config", config]);
    expect(r.status).toBe(1);
    expect(r.stderr).toStartWith(`${config}: error: document (line 47): `);
    expect(r.stderr).toEndWith(`${config}: invalid (1 error)\n`);
  });
});

// ---------------------------------------------------------------------------------------------
// rules/: every ready-made rule set against its fixtures, with the exact preview.

const PROXMOX_VM = platformMetadata({
  platform: "nocloud",
  hostname: "worker-1",
  zone: "pve-node-3",
  instanceType: "4VCPU-8GB",
  instanceId: "101",
});
const METAL_STORAGE = platformMetadata({
  platform: "metal",
  hostname: "storage-r12-03.fra1.example.com",
  providerId: "talos://metal/192.168.10.23",
});
const GCP_ON_DEMAND = platformMetadata({
  platform: "gcp",
  hostname: "talos-gcp-w1",
  region: "europe-west3",
  zone: "europe-west3-b",
  instanceType: "n2-standard-4",
  instanceId: "7214569870123456789",
  providerId: "gce://my-project/europe-west3-b/talos-gcp-w1",
});
const GCP_LABELS = {
  "beta.kubernetes.io/instance-type": "n2-standard-4",
  "failure-domain.beta.kubernetes.io/region": "europe-west3",
  "failure-domain.beta.kubernetes.io/zone": "europe-west3-b",
  "node.cloudprovider.kubernetes.io/platform": "gcp",
  "node.kubernetes.io/instance-type": "n2-standard-4",
  "topology.kubernetes.io/region": "europe-west3",
  "topology.kubernetes.io/zone": "europe-west3-b",
};
const METAL_LABEL = { "node.cloudprovider.kubernetes.io/platform": "metal" };
const managed = (labels: string[], taints: string[] = []) => ({
  "talos.dev/ccm-managed": JSON.stringify({ v: 1, labels, ...(taints.length > 0 ? { taints } : {}) }),
});
const unchanged = (
  providerID: string,
  platformMetadata: PlatformMetadata,
  labels: Record<string, string>,
) => ({
  providerID,
  labels,
  annotations: {},
  taints: [],
  platformMetadata,
  features: NO_FEATURES,
});

/** rules/<file> × tests/fixtures/rules/<fixture> → the exact `-o json` preview. */
const RULE_CASES: [string, string, unknown][] = [
  [
    "proxmox.yaml",
    "proxmox-vm.yaml",
    {
      providerID: "proxmox://cluster-1/101",
      labels: {
        "beta.kubernetes.io/instance-type": "4VCPU-8GB",
        "failure-domain.beta.kubernetes.io/region": "cluster-1",
        "failure-domain.beta.kubernetes.io/zone": "pve-node-3",
        "node.cloudprovider.kubernetes.io/platform": "nocloud",
        "node.kubernetes.io/instance-type": "4VCPU-8GB",
        "topology.kubernetes.io/region": "cluster-1",
        "topology.kubernetes.io/zone": "pve-node-3",
      },
      annotations: {},
      taints: [],
      platformMetadata: { ...PROXMOX_VM, region: "cluster-1", providerId: "proxmox://cluster-1/101" },
      features: NO_FEATURES,
    },
  ],
  [
    "proxmox.yaml",
    "proxmox-generated.yaml",
    unchanged(
      "talos://nocloud/<node-ip>",
      platformMetadata({
        platform: "nocloud",
        hostname: "worker-2",
        instanceId: "8f14e45fceea167a5a36dedd4bea2543",
        providerId: "talos://nocloud/<node-ip>",
      }),
      { "node.cloudprovider.kubernetes.io/platform": "nocloud" },
    ),
  ],
  [
    "oxide.yaml",
    "oxide-instance.yaml",
    unchanged(
      "oxide://0b7c3f5e-2d4a-4e8b-9c1d-6f5a4b3c2d1e",
      platformMetadata({
        platform: "nocloud",
        hostname: "talos-cp-1",
        instanceId: "0b7c3f5e-2d4a-4e8b-9c1d-6f5a4b3c2d1e",
        providerId: "oxide://0b7c3f5e-2d4a-4e8b-9c1d-6f5a4b3c2d1e",
      }),
      { "node.cloudprovider.kubernetes.io/platform": "nocloud" },
    ),
  ],
  [
    "oxide.yaml",
    "proxmox-vm.yaml",
    unchanged(
      "talos://nocloud/10.20.0.11",
      { ...PROXMOX_VM, providerId: "talos://nocloud/10.20.0.11" },
      {
        "beta.kubernetes.io/instance-type": "4VCPU-8GB",
        "failure-domain.beta.kubernetes.io/zone": "pve-node-3",
        "node.cloudprovider.kubernetes.io/platform": "nocloud",
        "node.kubernetes.io/instance-type": "4VCPU-8GB",
        "topology.kubernetes.io/zone": "pve-node-3",
      },
    ),
  ],
  [
    "metal-roles.yaml",
    "metal-storage.yaml",
    {
      providerID: "talos://metal/192.168.10.23",
      labels: {
        "failure-domain.beta.kubernetes.io/region": "fra1",
        "failure-domain.beta.kubernetes.io/zone": "r12",
        "node-role.kubernetes.io/storage": "",
        "node.cloudprovider.kubernetes.io/platform": "metal",
        "topology.kubernetes.io/region": "fra1",
        "topology.kubernetes.io/zone": "r12",
      },
      annotations: managed(
        ["node-role.kubernetes.io/storage"],
        ["node-role.kubernetes.io/storage:NoSchedule"],
      ),
      taints: [{ key: "node-role.kubernetes.io/storage", value: "", effect: "NoSchedule" }],
      platformMetadata: { ...METAL_STORAGE, region: "fra1", zone: "r12" },
      features: NO_FEATURES,
    },
  ],
  [
    "metal-roles.yaml",
    "metal-worker-short.yaml",
    {
      providerID: "talos://metal/<node-ip>",
      labels: { "node-role.kubernetes.io/worker": "", ...METAL_LABEL },
      annotations: managed(["node-role.kubernetes.io/worker"]),
      taints: [],
      platformMetadata: platformMetadata({
        platform: "metal",
        hostname: "worker-7",
        providerId: "talos://metal/<node-ip>",
      }),
      features: NO_FEATURES,
    },
  ],
  [
    "hetzner-metal.yaml",
    "hetzner-cloud-metal.yaml",
    unchanged(
      "hcloud://51234567",
      platformMetadata({ platform: "metal", hostname: "talos-hc-metal-1", providerId: "hcloud://51234567" }),
      METAL_LABEL,
    ),
  ],
  [
    "hetzner-metal.yaml",
    "hetzner-robot.yaml",
    unchanged(
      "hrobot://2345678",
      platformMetadata({ platform: "metal", hostname: "worker-2345678", providerId: "hrobot://2345678" }),
      METAL_LABEL,
    ),
  ],
  [
    "hetzner-metal.yaml",
    "metal-storage.yaml",
    unchanged("talos://metal/192.168.10.23", METAL_STORAGE, METAL_LABEL),
  ],
  [
    "spot.yaml",
    "aws-spot.yaml",
    {
      providerID: "aws:///eu-central-1a/i-0a1b2c3d4e5f60718",
      labels: {
        "beta.kubernetes.io/instance-type": "m7i.large",
        "failure-domain.beta.kubernetes.io/region": "eu-central-1",
        "failure-domain.beta.kubernetes.io/zone": "eu-central-1a",
        "karpenter.sh/capacity-type": "spot",
        "node.cloudprovider.kubernetes.io/lifecycle": "spot",
        "node.cloudprovider.kubernetes.io/platform": "aws",
        "node.kubernetes.io/instance-type": "m7i.large",
        "topology.kubernetes.io/region": "eu-central-1",
        "topology.kubernetes.io/zone": "eu-central-1a",
      },
      annotations: managed(["karpenter.sh/capacity-type"]),
      taints: [],
      platformMetadata: platformMetadata({
        platform: "aws",
        hostname: "ip-172-31-20-14.eu-central-1.compute.internal",
        region: "eu-central-1",
        zone: "eu-central-1a",
        instanceType: "m7i.large",
        instanceId: "i-0a1b2c3d4e5f60718",
        providerId: "aws:///eu-central-1a/i-0a1b2c3d4e5f60718",
        spot: true,
        internalDNS: "ip-172-31-20-14.eu-central-1.compute.internal",
      }),
      features: NO_FEATURES,
    },
  ],
  [
    "spot.yaml",
    "gcp-on-demand.yaml",
    {
      ...unchanged(GCP_ON_DEMAND.providerId, GCP_ON_DEMAND, {
        ...GCP_LABELS,
        "karpenter.sh/capacity-type": "on-demand",
      }),
      annotations: managed(["karpenter.sh/capacity-type"]),
    },
  ],
  ["spot.yaml", "metal-storage.yaml", unchanged("talos://metal/192.168.10.23", METAL_STORAGE, METAL_LABEL)],
  [
    "gpu.yaml",
    "aws-gpu.yaml",
    {
      providerID: "aws:///us-west-2b/i-0fedcba9876543210",
      labels: {
        "beta.kubernetes.io/instance-type": "g5.2xlarge",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": "us-west-2b",
        "node.cloudprovider.kubernetes.io/platform": "aws",
        "node.kubernetes.io/instance-type": "g5.2xlarge",
        "nvidia.com/gpu.machine": "g5.2xlarge",
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": "us-west-2b",
      },
      annotations: managed(["nvidia.com/gpu.machine"], ["nvidia.com/gpu:NoSchedule"]),
      taints: [{ key: "nvidia.com/gpu", value: "present", effect: "NoSchedule" }],
      platformMetadata: platformMetadata({
        platform: "aws",
        hostname: "ip-10-50-3-7.us-west-2.compute.internal",
        region: "us-west-2",
        zone: "us-west-2b",
        instanceType: "g5.2xlarge",
        instanceId: "i-0fedcba9876543210",
        providerId: "aws:///us-west-2b/i-0fedcba9876543210",
      }),
      features: NO_FEATURES,
    },
  ],
  [
    "gpu.yaml",
    "metal-gpu.yaml",
    {
      providerID: "talos://metal/<node-ip>",
      labels: { ...METAL_LABEL, "nvidia.com/gpu.machine": "ESC8000A-E12-8x-H100-SXM" },
      annotations: managed(["nvidia.com/gpu.machine"], ["nvidia.com/gpu:NoSchedule"]),
      taints: [{ key: "nvidia.com/gpu", value: "present", effect: "NoSchedule" }],
      platformMetadata: platformMetadata({
        platform: "metal",
        hostname: "gpu-03",
        providerId: "talos://metal/<node-ip>",
      }),
      features: NO_FEATURES,
    },
  ],
  ["gpu.yaml", "gcp-on-demand.yaml", unchanged(GCP_ON_DEMAND.providerId, GCP_ON_DEMAND, GCP_LABELS)],
];

describe("rules/", () => {
  test.each(RULE_CASES)("validate rules/%s with %s gives the exact preview", (rules, fixture, expected) => {
    const metadata = join(FIXTURES, "rules", fixture);
    const r = validate(["--cloud-config", join(RULES, rules), "--metadata", metadata, "-o", "json"]);
    expect(r.status).toBe(0);
    // Only the placeholder note of fixtures without a node IP; no config warning, no skipped value.
    const noIP = `${metadata}: warning: no node IP (talosctl's "node:" field), so the default providerID shows <node-ip>\n`;
    expect(r.stderr).toBe((expected as { providerID: string }).providerID.includes("<node-ip>") ? noIP : "");
    expect(JSON.parse(r.stdout)).toEqual(signed(expected as Parameters<typeof signed>[0]));
  });

  const ruleFiles = readdirSync(RULES).filter((f) => f.endsWith(".yaml"));

  test("rules/ has a fixture case for every rule set, and a fixture is used at least once", () => {
    expect(ruleFiles.length).toBeGreaterThanOrEqual(6);
    expect([...new Set(RULE_CASES.map(([rules]) => rules))].sort()).toEqual([...ruleFiles].sort());
    const fixtures = readdirSync(join(FIXTURES, "rules")).filter((f) => !f.startsWith("reference-"));
    expect([...new Set(RULE_CASES.map(([, fixture]) => fixture))].sort()).toEqual(fixtures.sort());
  });

  test.each(readdirSync(RULES).filter((f) => f.endsWith(".yaml")))(
    "rules/%s opens with its operator notes and validates without warnings",
    (name) => {
      const text = readFileSync(join(RULES, name), "utf8");
      const header = text.slice(0, text.indexOf("\ntransformations:"));
      expect(header.split("\n").every((l) => l.startsWith("#"))).toBe(true);
      expect(header).toContain("What it does:");
      expect(header).toContain("What to adapt:");
      const r = validate(["--cloud-config", join(RULES, name)]);
      expect(r).toMatchObject({ status: 0, stderr: "" });
      expect(r.stdout).toMatch(/: valid \(\d+ transformation rules?, 0 warnings\)\n$/);
    },
  );
});
