import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { type CompiledConfig, type CompiledRule, ConfigError, parseConfig } from "../../lib/config.ts";
import {
  describeTransformErrors,
  type PlanOptions,
  planReconcile,
  type ReconcilePlan,
} from "../../lib/desirednode.ts";
import { isLabelValue } from "../../lib/kubevalidation.ts";
import {
  type ManagedRecord,
  managedRecordDigest,
  type NodeState,
  parseManagedRecord,
  readManagedRecord,
  serializeManagedRecord,
} from "../../lib/managedrecord.ts";
import { Registry } from "../../lib/metrics.ts";
import {
  rulesMayRead,
  SYSTEM_INFORMATION_FIELDS,
  TALOS_VERSION_FIELD,
  type TransformResult,
  templateData,
  transform,
} from "../../lib/transform.ts";
import { measuredTransform } from "../../lib/transformmetrics.ts";
import type { NodeFacts, PlatformMetadata, SystemInformation, Taint } from "../../lib/types.ts";
import { MANAGED_ANNOTATION, MANAGED_DIGEST_LABEL } from "../../lib/wellknown.ts";

const metadata: PlatformMetadata = {
  platform: "metal",
  hostname: "web-1",
  region: "eu",
  zone: "eu-1a",
  instanceType: "c3.small",
  instanceId: "i-42",
  providerId: "talos://metal/10.0.0.5",
  spot: false,
  internalDNS: "",
  externalDNS: "",
  tags: {},
};
const sysinfo: SystemInformation = {
  manufacturer: "Acme",
  productName: "Box",
  version: "1.0",
  serialNumber: "SN1",
  uuid: "e8e8c388-5812-4db0-87e2-ad1fee51a1c1",
  wakeUpType: "Power Switch",
  skuNumber: "t2.micro",
};

function facts(overrides: Partial<PlatformMetadata> = {}, extra: Partial<NodeFacts> = {}): NodeFacts {
  return { platformMetadata: { ...metadata, ...overrides }, addresses: [], ...extra };
}

function run(
  config: Pick<CompiledConfig, "transformations">,
  f: NodeFacts,
  node = "node-1",
): TransformResult {
  return transform(config, f, node);
}

/** A compiled rule built by hand, for values a real config cannot produce (e.g. a failing template). */
function rule(partial: Partial<CompiledRule>): CompiledRule {
  return {
    name: "hand-made",
    nodeSelector: [],
    labels: [],
    annotations: [],
    taints: [],
    platformMetadata: [],
    features: { publicIPDiscovery: false },
    ...partial,
  };
}
const boom = {
  source: "{{ boom }}",
  template: {
    source: "{{ boom }}",
    execute: () => {
      throw new Error("boom");
    },
    mayRead: () => false,
  },
};

describe("transform() basics", () => {
  test("transform() without rules returns the facts unchanged, hostname defaulting to the node name", () => {
    const r = run({ transformations: [] }, facts({ hostname: "" }), "node-7");
    expect(r).toEqual({
      labels: {},
      annotations: {},
      taints: [],
      platformMetadata: { ...metadata, hostname: "node-7" },
      features: { publicIPDiscovery: false },
      errors: [],
    });
  });

  test("transform() applies labels and annotations of matching rules only", () => {
    const config = parseConfig(`transformations:
  - name: web
    nodeSelector:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ["^web-.+$"]}
    labels: {node-role.kubernetes.io/web: ""}
    annotations: {talos.dev/instance-id: "id-{{ .InstanceID }}"}
  - name: db
    nodeSelector:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ["^db-"]}
    labels: {node-role.kubernetes.io/db: ""}
`);
    const r = run(config, facts());
    expect(r.labels).toEqual({ "node-role.kubernetes.io/web": "" });
    expect(r.annotations).toEqual({ "talos.dev/instance-id": "id-i-42" });
    expect(r.errors).toEqual([]);
  });

  test("transform() renders missing fields as their zero values (reference: my-value-false-)", () => {
    const config = parseConfig(
      'transformations:\n  - annotations: {a: "my-value-{{ .Spot }}-{{ .InternalDNS }}"}\n    labels: {b: "my-value-{{ .Spot }}-{{ .InternalDNS }}"}\n',
    );
    const r = run(config, facts());
    expect(r.annotations).toEqual({ a: "my-value-false-" });
    // As a label value Kubernetes would refuse it (it ends in "-"), so that value alone is skipped.
    expect(r.labels).toEqual({});
    expect(r.errors.map((e) => [e.field, e.key])).toEqual([["labels", "b"]]);
  });

  test("transform() lets later rules override earlier ones on the same key", () => {
    const config = parseConfig(`transformations:
  - name: first-rule
    annotations: {first-annotation: first-value}
    labels: {karpenter.sh/capacity-type: on-demand}
    taints: {example.com/t: "a:NoSchedule"}
  - name: second-rule
    labels: {karpenter.sh/capacity-type: spot}
    taints: {example.com/t: "b:NoSchedule"}
    platformMetadata: {Zone: us-west1}
`);
    const r = run(config, facts());
    expect(r.labels).toEqual({ "karpenter.sh/capacity-type": "spot" });
    expect(r.annotations).toEqual({ "first-annotation": "first-value" });
    expect(r.taints).toEqual([{ key: "example.com/t", value: "b", effect: "NoSchedule" }]);
    expect(r.platformMetadata.zone).toBe("us-west1");
  });

  test("transform() overrides PlatformMetadata fields, trimming strings and reading spot as 'true'", () => {
    const config = parseConfig(`transformations:
  - platformMetadata:
      zoNe: " us-west1 "
      spot: "true"
      ProviderID: "someprovider:///{{ .UUID }}"
      Region: "{{ .Region }}-on-metal"
      InstanceType: "{{ .SKUNumber }}"
      InternalDNS: web-1.internal
      externalDNS: web-1.example.com
      InstanceID: "{{ .SerialNumber }}"
`);
    const r = run(config, facts({}, { systemInformation: sysinfo }));
    expect(r.platformMetadata).toEqual({
      ...metadata,
      zone: "us-west1",
      spot: true,
      providerId: "someprovider:///e8e8c388-5812-4db0-87e2-ad1fee51a1c1",
      region: "eu-on-metal",
      instanceType: "t2.micro",
      internalDNS: "web-1.internal",
      externalDNS: "web-1.example.com",
      instanceId: "SN1",
    });
    const off = run(
      parseConfig('transformations:\n  - platformMetadata: {spot: "yes"}\n'),
      facts({ spot: true }),
    );
    expect(off.platformMetadata.spot).toBe(false);
  });

  test("transform() matches selectors and renders templates on the facts, not on earlier overrides", () => {
    const config = parseConfig(`transformations:
  - platformMetadata: {Zone: moved, Region: "{{ .Region }}-x"}
  - platformMetadata: {Region: "{{ .Region }}-y"}
  - nodeSelector:
      - matchExpressions: [{key: zone, operator: In, values: [moved]}]
    labels: {seen-override: "yes"}
  - nodeSelector:
      - matchExpressions: [{key: zone, operator: In, values: [eu-1a]}]
    labels: {seen-original: "{{ .Zone }}"}
`);
    const r = run(config, facts());
    expect(r.labels).toEqual({ "seen-original": "eu-1a" });
    expect(r.platformMetadata.zone).toBe("moved");
    expect(r.platformMetadata.region).toBe("eu-y");
  });

  test("transform() turns publicIPDiscovery on when any matching rule does", () => {
    const config = parseConfig(`transformations:
  - features: {publicIPDiscovery: true}
  - features: {publicIPDiscovery: false}
  - nodeSelector: [{matchExpressions: [{key: platform, operator: In, values: [aws]}]}]
    features: {publicIPDiscovery: true}
`);
    expect(run(config, facts()).features).toEqual({ publicIPDiscovery: true });
    expect(run({ transformations: config.transformations.slice(1) }, facts()).features).toEqual({
      publicIPDiscovery: false,
    });
  });
});

describe("transform() templates (weakness 4)", () => {
  test("transform() passes HTML-special characters through untouched", () => {
    const odd = `a&b<c>'d"e+f`;
    const config = parseConfig(
      'transformations:\n  - annotations: {example.com/raw: "{{ .Hostname }}", example.com/literal: "x&y<z>+"}\n',
    );
    expect(run(config, facts({ hostname: odd })).annotations).toEqual({
      "example.com/raw": odd,
      "example.com/literal": "x&y<z>+",
    });
  });

  test("transform() renders templated taint values", () => {
    const config = parseConfig(`transformations:
  - taints:
      example.com/zone: "{{ .Zone }}:NoSchedule"
      example.com/effect: "{{ .Region }}"
`);
    const r = run(config, facts({ region: "PreferNoSchedule" }));
    expect(r.taints).toEqual([
      { key: "example.com/zone", value: "eu-1a", effect: "NoSchedule" },
      { key: "example.com/effect", effect: "PreferNoSchedule" },
    ]);
    expect(r.errors).toEqual([]);
  });

  test("transform() gives templates empty SystemInformation fields when the node has none", () => {
    const config = parseConfig(
      'transformations:\n  - labels: {a: "x{{ .UUID }}{{ .Manufacturer }}{{ .SKUNumber }}{{ .TalosVersion }}"}\n',
    );
    expect(run(config, facts()).labels).toEqual({ a: "x" });
    const full = run(
      config,
      facts({}, { systemInformation: { ...sysinfo, uuid: "u1" }, talosVersion: "v1.9.0" }),
    );
    expect(full.labels).toEqual({ a: "xu1Acmet2.microv1.9.0" });
  });

  test("templateData() exposes the reference's Go field names", () => {
    const data = templateData(
      { ...metadata, tags: { a: "b" } },
      facts({}, { systemInformation: sysinfo, talosVersion: "v1.9.0" }),
    );
    expect(data).toEqual({
      Platform: "metal",
      Hostname: "web-1",
      Region: "eu",
      Zone: "eu-1a",
      InstanceType: "c3.small",
      InstanceID: "i-42",
      ProviderID: "talos://metal/10.0.0.5",
      Spot: false,
      InternalDNS: "",
      ExternalDNS: "",
      Tags: { a: "b" },
      Manufacturer: "Acme",
      ProductName: "Box",
      Version: "1.0",
      SerialNumber: "SN1",
      UUID: "e8e8c388-5812-4db0-87e2-ad1fee51a1c1",
      WakeUpType: "Power Switch",
      SKUNumber: "t2.micro",
      TalosVersion: "v1.9.0",
    });
  });

  test("SYSTEM_INFORMATION_FIELDS are exactly the template fields SystemInformation fills", () => {
    const without = templateData(metadata, facts());
    const with_ = templateData(metadata, facts({}, { systemInformation: sysinfo }));
    const differ = Object.keys(with_).filter((k) => JSON.stringify(with_[k]) !== JSON.stringify(without[k]));
    expect(differ).toEqual([...SYSTEM_INFORMATION_FIELDS]);
    expect(Object.keys(without)).toContain(TALOS_VERSION_FIELD);
  });

  test.each<[string, string, { systemInformation: boolean; talosVersion: boolean }]>([
    ["no rules", "transformations: []", { systemInformation: false, talosVersion: false }],
    [
      "PlatformMetadata fields only (a string equal to a field name reads nothing)",
      'transformations:\n  - labels: {a: "{{ .Zone }}-{{ index .Tags \\"UUID\\" }}"}',
      { systemInformation: false, talosVersion: false },
    ],
    [
      "a literal naming a field",
      "transformations:\n  - labels: {a: UUID}\n    annotations: {example.com/b: TalosVersion}",
      { systemInformation: false, talosVersion: false },
    ],
    [
      "a SystemInformation field in a taint",
      'transformations:\n  - taints: {example.com/t: "{{ .SKUNumber }}:NoSchedule"}',
      { systemInformation: true, talosVersion: false },
    ],
    [
      "a SystemInformation field in a metadata override",
      'transformations:\n  - platformMetadata: {ProviderID: "x://{{ .SerialNumber }}"}',
      { systemInformation: true, talosVersion: false },
    ],
    [
      "TalosVersion in an annotation",
      'transformations:\n  - annotations: {example.com/v: "{{ .TalosVersion }}"}',
      { systemInformation: false, talosVersion: true },
    ],
    [
      "the whole data printed",
      "transformations:\n  - annotations: {example.com/all: '{{ printf \"%v\" . }}'}",
      { systemInformation: true, talosVersion: true },
    ],
  ])("rulesMayRead() with %s", (_name, text, want) => {
    const config = parseConfig(text);
    expect({
      systemInformation: rulesMayRead(config, SYSTEM_INFORMATION_FIELDS),
      talosVersion: rulesMayRead(config, [TALOS_VERSION_FIELD]),
    }).toEqual(want);
  });

  test("transform() works with the reference's documented template functions", () => {
    const config = parseConfig(`transformations:
  - labels:
      capacity-type: "{{ if .Spot }}spot{{ else }}on-demand{{ end }}"
    annotations:
      cloud-id: '{{ regexFindString "^web-([a-z0-9]+)-(.*)$" .Hostname 1 }}'
    platformMetadata:
      InstanceType: '{{ regexFindString "^type-([a-z0-9]+)-(.*)$" .Hostname 1 }}'
`);
    const r = run(config, facts({ hostname: "web-c1m5-host", spot: true }));
    expect(r.labels).toEqual({ "capacity-type": "spot" });
    expect(r.annotations).toEqual({ "cloud-id": "c1m5" });
    expect(r.platformMetadata.instanceType).toBe("");
  });
});

describe("transform() errors", () => {
  test("transform() skips only the value that fails and reports it", () => {
    const config = parseConfig(`transformations:
  - name: mixed
    labels:
      good: ok
      example.com/bad-value: "{{ .Hostname }}"
    annotations:
      example.com/ok: "{{ .Hostname }}"
    taints:
      example.com/bad-taint: "{{ .Zone }}"
      example.com/good-taint: "{{ .Zone }}:NoExecute"
  - name: later
    labels: {still: applied}
`);
    const r = run(config, facts({ hostname: "has space" }));
    expect(r.labels).toEqual({ good: "ok", still: "applied" });
    expect(r.annotations).toEqual({ "example.com/ok": "has space" });
    expect(r.taints).toEqual([{ key: "example.com/good-taint", value: "eu-1a", effect: "NoExecute" }]);
    expect(r.errors).toEqual([
      {
        rule: "mixed",
        field: "labels",
        key: "example.com/bad-value",
        reason: expect.stringContaining('invalid value "has space": a valid label must be'),
      },
      {
        rule: "mixed",
        field: "taints",
        key: "example.com/bad-taint",
        reason: 'invalid taint "eu-1a": effect "eu-1a" is not one of NoSchedule, PreferNoSchedule, NoExecute',
      },
    ]);
  });

  test("transform() names the nodeSelector term that matched, and the Event's text says it", () => {
    const config = parseConfig(`transformations:
  - name: named
    nodeSelector:
      - name: not this one
        matchExpressions: [{key: platform, operator: In, values: [aws]}]
      - name: metal hosts
        matchExpressions: [{key: platform, operator: In, values: [metal]}]
    labels: {example.com/bad: "{{ .Hostname }}"}
  - name: unnamed
    nodeSelector: [{matchExpressions: [{key: platform, operator: Exists}]}]
    labels: {example.com/also-bad: "{{ .Hostname }}"}
`);
    const r = run(config, facts({ hostname: "has space" }));
    expect(r.errors.map((e) => [e.rule, e.term])).toEqual([
      ["named", "metal hosts"],
      ["unnamed", undefined],
    ]);
    expect(describeTransformErrors(r.errors)).toStartWith(
      'rule "named" (term "metal hosts") labels["example.com/bad"]: invalid value "has space"',
    );
    expect(describeTransformErrors(r.errors)).toContain('; rule "unnamed" labels["example.com/also-bad"]: ');
  });

  test("transform() reports a template execution error against its rule, field and key", () => {
    const config = {
      transformations: [
        rule({
          name: "r",
          labels: [
            { key: "a", value: boom },
            { key: "b", value: { source: "fine" } },
          ],
          annotations: [{ key: "c", value: boom }],
          taints: [{ key: "d", value: boom }],
          platformMetadata: [{ key: "Zone", field: "zone", value: boom }],
        }),
      ],
    };
    const r = run(config, facts());
    expect(r.labels).toEqual({ b: "fine" });
    expect(r.platformMetadata.zone).toBe("eu-1a");
    expect(r.errors.map((e) => [e.rule, e.field, e.key, e.reason])).toEqual([
      ["r", "labels", "a", "template failed: boom"],
      ["r", "annotations", "c", "template failed: boom"],
      ["r", "taints", "d", "template failed: boom"],
      ["r", "platformMetadata", "Zone", "template failed: boom"],
    ]);
  });

  test("transform() reports a field the data lacks as a template error, as the reference's struct does", () => {
    const config = parseConfig(
      'transformations:\n  - name: typo\n    labels: {a: "{{ .Hostnme }}", b: "{{ .Hostname }}"}\n',
    );
    const r = run(config, facts());
    expect(r.labels).toEqual({ b: "web-1" });
    expect(r.errors).toEqual([
      {
        rule: "typo",
        field: "labels",
        key: "a",
        reason: expect.stringContaining("can't evaluate field Hostnme"),
      },
    ]);
  });

  test("transform() keeps the annotations it produces within Kubernetes' 256 KiB budget", () => {
    const big = "x".repeat(100 * 1024);
    const config = {
      transformations: [
        rule({
          annotations: [
            { key: "a", value: { source: big } },
            { key: "b", value: { source: big } },
            { key: "c", value: { source: big } },
            { key: "a", value: { source: "small" } },
            { key: "d", value: { source: big } },
          ],
        }),
      ],
    };
    const r = run(config, facts());
    expect(Object.keys(r.annotations)).toEqual(["a", "b", "d"]);
    expect(r.annotations.a).toBe("small");
    expect(r.errors.map((e) => [e.key, e.reason])).toEqual([
      ["c", "annotations would exceed 262144 bytes in total"],
    ]);
  });

  test("measuredTransform() records its duration and error count under the reference's metric names", () => {
    const registry = new Registry();
    const config = {
      transformations: [
        rule({
          labels: [
            { key: "a", value: boom },
            { key: "b", value: boom },
          ],
        }),
      ],
    };
    measuredTransform(config, facts(), "n", registry);
    measuredTransform({ transformations: [] }, facts(), "n", registry);
    const text = registry.expose();
    expect(text).toContain('talosccm_transformer_duration_seconds_count{type="transformer"} 2');
    expect(text).toContain('talosccm_transformer_duration_seconds_bucket{type="transformer",le="0.001"}');
    expect(text).toContain('talosccm_transformer_duration_seconds_bucket{type="transformer",le="0.1"}');
    expect(text).toContain('talosccm_transformer_errors_total{type="transformer"} 2');
  });

  test("transform() never throws, whatever the config and facts", () => {
    const text = fc.oneof(
      fc.string(),
      fc.constantFrom("{{ .Hostname }}", "{{ .Zone }}:NoSchedule", "NoExecute", "a b"),
    );
    const configText = fc
      .record({
        transformations: fc.array(
          fc.record({
            labels: fc.dictionary(fc.constantFrom("a", "example.com/b"), text),
            annotations: fc.dictionary(fc.constantFrom("a", "example.com/b"), text),
            taints: fc.dictionary(fc.constantFrom("a", "example.com/b"), text),
            platformMetadata: fc.dictionary(fc.constantFrom("Zone", "Spot", "ProviderID"), text),
          }),
          { maxLength: 3 },
        ),
      })
      .map((c) => JSON.stringify(c));
    const meta = fc.record({
      platform: fc.string(),
      hostname: fc.string(),
      region: fc.string(),
      zone: fc.string(),
      instanceType: fc.string(),
      instanceId: fc.string(),
      providerId: fc.string(),
      spot: fc.boolean(),
      internalDNS: fc.string(),
      externalDNS: fc.string(),
      tags: fc.dictionary(fc.string(), fc.string()),
    });
    fc.assert(
      fc.property(configText, meta, fc.string(), (source, pm, node) => {
        let config: CompiledConfig;
        try {
          config = parseConfig(source);
        } catch (err) {
          if (err instanceof ConfigError) return;
          throw err;
        }
        const r = run(config, { platformMetadata: pm, addresses: [] }, node);
        expect(r.platformMetadata.hostname).toBe(pm.hostname || node);
      }),
      { numRuns: 200 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Reconcile bookkeeping

const EMPTY: ManagedRecord = { labels: [], annotations: [], taints: [] };

function result(partial: Partial<TransformResult>): TransformResult {
  return {
    labels: {},
    annotations: {},
    taints: [],
    platformMetadata: metadata,
    features: { publicIPDiscovery: false },
    errors: [],
    ...partial,
  };
}

/** Applies a plan the way a controller would. */
function apply(node: NodeState, plan: ReconcilePlan): NodeState {
  const labels = { ...node.labels, ...plan.setLabels };
  for (const k of plan.removeLabels) delete labels[k];
  const annotations = { ...node.annotations, ...plan.setAnnotations };
  for (const k of plan.removeAnnotations) delete annotations[k];
  let taints = node.taints.filter(
    (t) => !plan.removeTaints.some((r) => r.key === t.key && r.effect === t.effect),
  );
  for (const t of plan.addTaints)
    taints = [...taints.filter((x) => x.key !== t.key || x.effect !== t.effect), t];
  return { labels, annotations, taints };
}

const ON: PlanOptions = { reconcile: true, initializing: false };
const OFF: PlanOptions = { reconcile: false, initializing: false };

describe("parseManagedRecord() / serializeManagedRecord()", () => {
  test("serializeManagedRecord() writes compact sorted JSON without empty lists, and parses back", () => {
    const record = { labels: ["b", "a", "b"], annotations: [], taints: ["example.com/t:NoSchedule"] };
    const text = serializeManagedRecord(record);
    expect(text).toBe('{"v":1,"labels":["a","b"],"taints":["example.com/t:NoSchedule"]}');
    expect(parseManagedRecord(text)).toEqual({
      record: { labels: ["a", "b"], annotations: [], taints: ["example.com/t:NoSchedule"] },
      valid: true,
    });
    expect(serializeManagedRecord(EMPTY)).toBe('{"v":1}');
  });

  test.each<[string, string | undefined, ManagedRecord, boolean]>([
    ["no annotation", undefined, EMPTY, true],
    ["an empty string", "", EMPTY, false],
    ["not JSON", "{labels:", EMPTY, false],
    ["JSON null", "null", EMPTY, false],
    ["a list", '["a"]', EMPTY, false],
    ["a number", "42", EMPTY, false],
    ["another version", '{"v":2,"labels":["a"]}', EMPTY, false],
    ["no version", '{"labels":["a"]}', EMPTY, false],
    ["a string instead of a list", '{"v":1,"labels":"a"}', EMPTY, false],
    ["non-string entries", '{"v":1,"labels":["a",1,null,{"x":1}]}', { ...EMPTY, labels: ["a"] }, false],
    ["invalid keys", '{"v":1,"labels":["ok","bad key","a/b/c"]}', { ...EMPTY, labels: ["ok"] }, false],
    [
      "its own annotation",
      `{"v":1,"annotations":["${MANAGED_ANNOTATION}","example.com/a"]}`,
      { ...EMPTY, annotations: ["example.com/a"] },
      false,
    ],
    [
      "its own digest label",
      `{"v":1,"labels":["${MANAGED_DIGEST_LABEL}","example.com/a"]}`,
      { ...EMPTY, labels: ["example.com/a"] },
      false,
    ],
    [
      "reserved or malformed taints",
      '{"v":1,"taints":["node.cloudprovider.kubernetes.io/uninitialized:NoSchedule","x","x:Bad",":NoSchedule","ok:NoExecute"]}',
      { ...EMPTY, taints: ["ok:NoExecute"] },
      false,
    ],
    ["an oversized value", `{"v":1,"labels":[${'"a",'.repeat(30000)}"a"]}`, EMPTY, false],
    ["a prototype-polluting key", '{"v":1,"__proto__":{"labels":["x"]}}', EMPTY, true],
  ])("parseManagedRecord() of %s", (_name, text, record, valid) => {
    expect(parseManagedRecord(text)).toEqual({ record, valid });
  });

  test("parseManagedRecord() never throws on arbitrary text or JSON", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.jsonValue().map((j) => JSON.stringify(j)),
        ),
        (text) => {
          const { record } = parseManagedRecord(text);
          expect(
            Array.isArray(record.labels) && Array.isArray(record.annotations) && Array.isArray(record.taints),
          ).toBe(true);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("managedRecordDigest() / readManagedRecord()", () => {
  const TEXT = '{"v":1,"labels":["a"],"taints":["t:NoSchedule"]}';
  const DIGEST = managedRecordDigest(TEXT);

  test("managedRecordDigest() is the hex SHA-224 of the text, a valid label value", () => {
    expect(managedRecordDigest('{"v":1}')).toBe(
      new Bun.CryptoHasher("sha224").update('{"v":1}').digest("hex"),
    );
    expect(DIGEST).toMatch(/^[0-9a-f]{56}$/);
    expect(isLabelValue(DIGEST)).toEqual([]);
    expect(managedRecordDigest(`${TEXT} `)).not.toBe(DIGEST);
  });

  test.each<[string, Record<string, string>, Record<string, string>, ReturnType<typeof readManagedRecord>]>([
    ["no record and no label", {}, {}, { record: EMPTY }],
    [
      "a record signed by its label",
      { [MANAGED_ANNOTATION]: TEXT },
      { [MANAGED_DIGEST_LABEL]: DIGEST },
      { record: { labels: ["a"], annotations: [], taints: ["t:NoSchedule"] } },
    ],
    [
      "a record without its label",
      { [MANAGED_ANNOTATION]: TEXT },
      {},
      { record: EMPTY, problem: "unsigned" },
    ],
    [
      "a record edited after it was signed",
      { [MANAGED_ANNOTATION]: TEXT.replace('"a"', '"b"') },
      { [MANAGED_DIGEST_LABEL]: DIGEST },
      { record: EMPTY, problem: "mismatch" },
    ],
    [
      "a label whose record was removed",
      {},
      { [MANAGED_DIGEST_LABEL]: DIGEST },
      { record: EMPTY, problem: "mismatch" },
    ],
    [
      "a signed record that is not well-formed",
      { [MANAGED_ANNOTATION]: '{"v":1,"labels":["a","bad key"]}' },
      { [MANAGED_DIGEST_LABEL]: managedRecordDigest('{"v":1,"labels":["a","bad key"]}') },
      { record: { ...EMPTY, labels: ["a"] }, problem: "invalid" },
    ],
  ])("readManagedRecord() of %s", (_name, annotations, labels, want) => {
    expect(readManagedRecord({ annotations, labels })).toEqual(want);
  });
});

describe("planReconcile()", () => {
  const taint = (key: string, effect: Taint["effect"], value?: string): Taint =>
    value === undefined ? { key, effect } : { key, value, effect };

  test("planReconcile() on a fresh node sets everything and records it", () => {
    const r = result({
      labels: { a: "1" },
      annotations: { "example.com/x": "y" },
      taints: [taint("t", "NoSchedule")],
    });
    const plan = planReconcile(
      EMPTY,
      r,
      { labels: {}, annotations: {}, taints: [] },
      { reconcile: true, initializing: true },
    );
    const text = '{"v":1,"labels":["a"],"annotations":["example.com/x"],"taints":["t:NoSchedule"]}';
    expect(plan).toEqual({
      setLabels: { a: "1", [MANAGED_DIGEST_LABEL]: managedRecordDigest(text) },
      removeLabels: [],
      setAnnotations: { "example.com/x": "y", [MANAGED_ANNOTATION]: text },
      removeAnnotations: [],
      addTaints: [taint("t", "NoSchedule")],
      removeTaints: [],
      record: { labels: ["a"], annotations: ["example.com/x"], taints: ["t:NoSchedule"] },
    });
  });

  test("planReconcile() removes what a deleted rule added, and nothing another actor set (weakness 5)", () => {
    const previous: ManagedRecord = {
      labels: ["a", "gone"],
      annotations: ["example.com/gone"],
      taints: ["t:NoSchedule"],
    };
    const node: NodeState = {
      labels: { a: "1", gone: "x", "kubernetes.io/hostname": "n1", other: "keep" },
      annotations: {
        "example.com/gone": "x",
        "node.alpha.kubernetes.io/ttl": "0",
        [MANAGED_ANNOTATION]: "old",
      },
      taints: [taint("t", "NoSchedule"), taint("admin", "NoExecute")],
    };
    const plan = planReconcile(previous, result({ labels: { a: "1" } }), node, ON);
    expect(plan.setLabels).toEqual({ [MANAGED_DIGEST_LABEL]: managedRecordDigest('{"v":1,"labels":["a"]}') });
    expect(plan.removeLabels).toEqual(["gone"]);
    expect(plan.removeAnnotations).toEqual(["example.com/gone"]);
    expect(plan.removeTaints).toEqual([{ key: "t", effect: "NoSchedule" }]);
    expect(plan.record).toEqual({ labels: ["a"], annotations: [], taints: [] });
    expect(plan.setAnnotations).toEqual({ [MANAGED_ANNOTATION]: '{"v":1,"labels":["a"]}' });
  });

  test("planReconcile() without reconcile removes nothing and keeps the history", () => {
    const previous: ManagedRecord = {
      labels: ["a", "gone", "vanished"],
      annotations: [],
      taints: ["t:NoSchedule"],
    };
    const node: NodeState = {
      labels: { a: "1", gone: "x" },
      annotations: {},
      taints: [taint("t", "NoSchedule")],
    };
    const plan = planReconcile(
      previous,
      result({ labels: { a: "2" }, taints: [taint("u", "NoExecute")] }),
      node,
      OFF,
    );
    expect(plan.setLabels).toEqual({
      a: "2",
      [MANAGED_DIGEST_LABEL]: managedRecordDigest('{"v":1,"labels":["a","gone"],"taints":["t:NoSchedule"]}'),
    });
    expect(plan.removeLabels).toEqual([]);
    expect(plan.removeTaints).toEqual([]);
    expect(plan.addTaints).toEqual([]);
    expect(plan.record).toEqual({ labels: ["a", "gone"], annotations: [], taints: ["t:NoSchedule"] });
  });

  test("planReconcile() without reconcile sets taints only while the node initializes", () => {
    const r = result({ taints: [taint("u", "NoExecute", "v")] });
    const node: NodeState = { labels: {}, annotations: {}, taints: [] };
    expect(planReconcile(EMPTY, r, node, OFF).addTaints).toEqual([]);
    const init = planReconcile(EMPTY, r, node, { reconcile: false, initializing: true });
    expect(init.addTaints).toEqual([taint("u", "NoExecute", "v")]);
    expect(init.record.taints).toEqual(["u:NoExecute"]);
  });

  test("planReconcile() leaves a value that failed this round alone", () => {
    const previous: ManagedRecord = {
      labels: ["a"],
      annotations: ["example.com/b"],
      taints: ["t:NoSchedule"],
    };
    const node: NodeState = {
      labels: { a: "old" },
      annotations: { "example.com/b": "old" },
      taints: [taint("t", "NoSchedule")],
    };
    const r = result({
      errors: [
        { rule: "r", field: "labels", key: "a", reason: "x" },
        { rule: "r", field: "annotations", key: "example.com/b", reason: "x" },
        { rule: "r", field: "taints", key: "t", reason: "x" },
      ],
    });
    const plan = planReconcile(previous, r, node, ON);
    expect([plan.removeLabels, plan.removeAnnotations, plan.removeTaints]).toEqual([[], [], []]);
    expect(plan.record).toEqual(previous);
  });

  test("planReconcile() replaces a taint whose value or effect changed", () => {
    const previous: ManagedRecord = { ...EMPTY, taints: ["a:NoSchedule", "b:NoSchedule"] };
    const node: NodeState = {
      labels: {},
      annotations: {},
      taints: [taint("a", "NoSchedule", "old"), taint("b", "NoSchedule")],
    };
    const r = result({ taints: [taint("a", "NoSchedule", "new"), taint("b", "NoExecute")] });
    const plan = planReconcile(previous, r, node, ON);
    expect(plan.addTaints).toEqual([taint("a", "NoSchedule", "new"), taint("b", "NoExecute")]);
    expect(plan.removeTaints).toEqual([{ key: "b", effect: "NoSchedule" }]);
    expect(apply(node, plan).taints).toEqual([taint("a", "NoSchedule", "new"), taint("b", "NoExecute")]);
  });

  test("planReconcile() drops the record annotation and its digest label once nothing is managed", () => {
    const node: NodeState = {
      labels: { [MANAGED_DIGEST_LABEL]: managedRecordDigest('{"v":1,"labels":["a"]}') },
      annotations: { [MANAGED_ANNOTATION]: '{"v":1,"labels":["a"]}' },
      taints: [],
    };
    const dropped = planReconcile(EMPTY, result({}), node, ON);
    expect([dropped.removeAnnotations, dropped.removeLabels]).toEqual([
      [MANAGED_ANNOTATION],
      [MANAGED_DIGEST_LABEL],
    ]);
    const bare: NodeState = { labels: {}, annotations: {}, taints: [] };
    const plan = planReconcile(EMPTY, result({}), bare, ON);
    expect([plan.setAnnotations, plan.removeAnnotations, plan.setLabels, plan.removeLabels]).toEqual([
      {},
      [],
      {},
      [],
    ]);
  });

  const key: fc.Arbitrary<string> = fc.constantFrom("a", "b", "c", "example.com/d");
  const effect = fc.constantFrom<Taint["effect"]>("NoSchedule", "NoExecute");
  const taintArb = fc
    .record({ key, effect, value: fc.constantFrom("", "v", "w") })
    .map((t) => taint(t.key, t.effect, t.value || undefined));
  const taints = fc.uniqueArray(taintArb, { selector: (t) => `${t.key}:${t.effect}`, maxLength: 4 });
  const map = fc.dictionary(key, fc.constantFrom("", "1", "2"), { maxKeys: 4 });
  const record = fc.record({
    labels: fc.uniqueArray(key),
    annotations: fc.uniqueArray(key),
    taints: fc.uniqueArray(fc.tuple(key, effect).map(([k, e]) => `${k}:${e}`)),
  });
  const nodeArb = fc.record({ labels: map, annotations: map, taints });
  const resultArb = fc
    .record({
      labels: map,
      annotations: map,
      taints,
      errors: fc.array(
        fc.record({ field: fc.constantFrom("labels", "annotations", "taints" as const), key }),
        { maxLength: 2 },
      ),
    })
    .map((r) => result({ ...r, errors: r.errors.map((e) => ({ ...e, rule: "r", reason: "x" })) }));
  const options = fc.record({ reconcile: fc.boolean(), initializing: fc.boolean() });

  test("planReconcile() removes only keys the record says the rules added", () => {
    fc.assert(
      fc.property(record, resultArb, nodeArb, options, (prev, r, node, opts) => {
        const plan = planReconcile(prev, r, node, opts);
        for (const k of plan.removeLabels) if (k !== MANAGED_DIGEST_LABEL) expect(prev.labels).toContain(k);
        for (const k of plan.removeAnnotations)
          if (k !== MANAGED_ANNOTATION) expect(prev.annotations).toContain(k);
        for (const t of plan.removeTaints) expect(prev.taints).toContain(`${t.key}:${t.effect}`);
        if (!opts.reconcile) expect(plan.removeLabels.length + plan.removeTaints.length).toBe(0);
      }),
      { numRuns: 500 },
    );
  });

  test("planReconcile() converges: applying its plan and planning again changes nothing", () => {
    fc.assert(
      fc.property(record, resultArb, nodeArb, options, (prev, r, node, opts) => {
        const first = planReconcile(prev, r, node, opts);
        const after = apply(node, first);
        const read = readManagedRecord(after);
        expect(read.problem).toBeUndefined();
        const again = planReconcile(read.record, r, after, opts);
        expect(again.setLabels).toEqual({});
        expect(again.removeLabels).toEqual([]);
        expect(again.setAnnotations).toEqual({});
        expect(again.removeAnnotations).toEqual([]);
        expect(again.addTaints).toEqual([]);
        expect(again.removeTaints).toEqual([]);
        expect(again.record).toEqual(first.record);
      }),
      { numRuns: 500 },
    );
  });

  test("planReconcile() of a record someone else rewrote removes nothing but the record itself", () => {
    const forged = fc.oneof(
      record.map((r) => serializeManagedRecord(r)),
      fc.string(),
      fc.constant(undefined),
    );
    fc.assert(
      fc.property(record, resultArb, nodeArb, options, forged, (prev, r, node, opts, text) => {
        // A node the CCM signed, whose record annotation was then replaced (or removed).
        const signed = apply(node, planReconcile(prev, r, node, opts));
        const annotations = { ...signed.annotations };
        if (text === undefined) delete annotations[MANAGED_ANNOTATION];
        else annotations[MANAGED_ANNOTATION] = text;
        const tampered = { ...signed, annotations };
        const read = readManagedRecord(tampered);
        if (text === signed.annotations[MANAGED_ANNOTATION]) return;
        expect(read.record).toEqual(EMPTY);
        const plan = planReconcile(read.record, result({}), tampered, { ...opts, reconcile: true });
        expect(plan.removeLabels.filter((k) => k !== MANAGED_DIGEST_LABEL)).toEqual([]);
        expect(plan.removeAnnotations.filter((k) => k !== MANAGED_ANNOTATION)).toEqual([]);
        expect(plan.removeTaints).toEqual([]);
      }),
      { numRuns: 500 },
    );
  });
});
