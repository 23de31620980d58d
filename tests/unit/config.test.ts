import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { stringify } from "yaml";
import { type CompiledConfig, ConfigError, formatPath, parseConfig } from "../../lib/config.ts";
import { loadConfig } from "../../lib/configfile.ts";
import type { ConfigIssue } from "../../lib/configissue.ts";
import { matchSelector, selectorFields } from "../../lib/selector.ts";
import { stressCases, writeCase } from "../support/config-stress.ts";
import { platformMetadata } from "../support/fixtures.ts";

const fixture = (name: string) => join(import.meta.dir, "..", "fixtures", name);

/** Parses `text`, expecting a ConfigError, and returns it. */
function fails(text: string): ConfigError {
  try {
    parseConfig(text);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error("expected a ConfigError");
}

const paths = (issues: readonly ConfigIssue[]) => issues.map((i) => i.path);

const DEFAULT_GLOBAL: CompiledConfig["global"] = {
  clusterName: "",
  preferIPv6: false,
  reconcile: false,
  endpoints: [],
  approveNodeCSR: false,
  skipForeignNode: false,
};

describe("parseConfig() defaults", () => {
  test.each([
    ["an empty file", ""],
    ["a comment", "# nothing here\n"],
    ["global: alone, as the reference's ConfigMap ships it", "global:\n"],
    ["explicit nulls", "global: ~\ntransformations: null\n"],
    ["an empty mapping", "{}\n"],
  ])("parseConfig() of %s gives the defaults", (_name, text) => {
    expect(parseConfig(text)).toEqual({ global: DEFAULT_GLOBAL, transformations: [], warnings: [] });
  });
});

describe("parseConfig() global", () => {
  test("parseConfig() reads every global key", () => {
    const c = parseConfig(
      [
        "global:",
        "  clusterName: prod",
        "  preferIPv6: true",
        "  reconcile: true",
        "  endpoints: [10.0.0.1, 10.0.0.2]",
        "  skipForeignNode: true",
      ].join("\n"),
    );
    expect(c.global).toEqual({
      clusterName: "prod",
      preferIPv6: true,
      reconcile: true,
      endpoints: ["10.0.0.1", "10.0.0.2"],
      approveNodeCSR: false,
      skipForeignNode: true,
    });
    expect(c.warnings).toEqual([]);
  });

  test.each([
    ["true", true],
    ["True", true],
    ["yes", true],
    ["on", true],
    ["Y", true],
    ["false", false],
    ["FALSE", false],
    ["no", false],
    ["off", false],
    ["~", false],
  ])("parseConfig() reads preferIPv6: %s as yaml.v3 does (%p)", (word, value) => {
    expect(parseConfig(`global:\n  preferIPv6: ${word}\n`).global.preferIPv6).toBe(value);
  });

  test.each([
    ["1", '"1"'],
    ["maybe", '"maybe"'],
    ["[true]", "a list"],
    ["{a: b}", "a mapping"],
  ])("parseConfig() refuses preferIPv6: %s", (word, got) => {
    const err = fails(`global:\n  preferIPv6: ${word}\n`);
    expect(err.issues).toEqual([
      { path: "global.preferIPv6", line: 2, message: `expected a boolean (true or false), got ${got}` },
    ]);
  });

  test("parseConfig() keeps a scalar's source text where a string is expected", () => {
    const c = parseConfig(
      "global:\n  clusterName: 1.10\ntransformations:\n  - labels: {a: 0x1F, b: True, c: 1e3, d: null, e: ''}\n",
    );
    expect(c.global.clusterName).toBe("1.10");
    expect(c.transformations[0]?.labels.map((l) => [l.key, l.value.source])).toEqual([
      ["a", "0x1F"],
      ["b", "True"],
      ["c", "1e3"],
      ["d", ""],
      ["e", ""],
    ]);
  });

  test("parseConfig() honours approveNodeCSR from older releases and says it is deprecated", () => {
    const c = parseConfig("global:\n  approveNodeCSR: true\n");
    expect(c.global.approveNodeCSR).toBe(true);
    expect(c.warnings).toEqual([
      {
        path: "global.approveNodeCSR",
        line: 2,
        message: "deprecated: enable the node-csr-approval controller with --controllers",
      },
    ]);
  });
});

describe("parseConfig() unknown keys outside rules are warnings (weakness 3)", () => {
  test("parseConfig() warns about the docs' PreferIPv6 with the key it meant, and does not apply it", () => {
    const c = parseConfig("global:\n  PreferIPv6: true\n");
    expect(c.global.preferIPv6).toBe(false);
    expect(c.warnings).toEqual([
      {
        path: "global.PreferIPv6",
        line: 2,
        message: 'unknown key "PreferIPv6": ignored; keys are case-sensitive, did you mean "preferIPv6"?',
      },
    ]);
  });

  test.each([
    ["Global: {}", "Global", "global"],
    ["transformation: []", "transformation", "transformations"],
    ["global:\n  reconcil: true", "global.reconcil", "reconcile"],
  ])("parseConfig() warns about %j at %s, naming %s", (text, path, near) => {
    const c = parseConfig(text);
    expect(c.warnings).toHaveLength(1);
    expect(c.warnings[0]?.path).toBe(path);
    expect(c.warnings[0]?.message).toContain(`"${near}"`);
  });
});

describe("parseConfig() unknown keys in a rule: an error where a misspelling could widen a match, else a warning", () => {
  test("parseConfig() refuses a misspelled nodeSelector, which would otherwise match every node", () => {
    const err = fails(`transformations:
  - name: gpu
    nodeSelecter:
      - matchExpressions:
          - {key: hostname, operator: Regexp, values: ["^gpu-"]}
    taints:
      nvidia.com/gpu: "present:NoSchedule"
`);
    const message =
      'unknown key "nodeSelecter": not allowed in a rule without nodeSelector, which applies to every node (closest known key: "nodeSelector")';
    expect(err.issues).toEqual([{ path: "transformations[0].nodeSelecter", line: 3, message }]);
    expect(err.message).toBe(
      `Cannot load cloud config: 1 problem:\n  transformations[0].nodeSelecter (line 3): ${message}`,
    );
  });

  test.each([
    ["transformations:\n  - nodeSelectors: []", "transformations[0].nodeSelectors", "nodeSelector"],
    // Without a nodeSelector any unknown key may be the selector: the rule would apply to every node.
    ["transformations:\n  - label: {}", "transformations[0].label", "labels"],
  ])("parseConfig() refuses %j at %s, naming %s", (text, path, near) => {
    const err = fails(text);
    expect(err.issues).toHaveLength(1);
    expect(err.issues[0]?.path).toBe(path);
    expect(err.issues[0]?.message).toStartWith(
      `unknown key "${path.split(".").at(-1)}": not allowed in a rule without nodeSelector`,
    );
    expect(err.issues[0]?.message).toContain(`"${near}"`);
  });

  test("parseConfig() refuses an unknown key inside a selector requirement: a misspelled values changes the test", () => {
    const err = fails(
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: zone, operator: Exists, value: []}",
    );
    expect(err.issues.map((i) => [i.path, i.message])).toEqual([
      [
        "transformations[0].nodeSelector[0].matchExpressions[0].value",
        'unknown key "value": not allowed in a selector requirement (closest known key: "values")',
      ],
    ]);
  });

  test.each([
    [
      "a key beside nodeSelector in a rule",
      "transformations:\n  - nodeSelector: [{matchExpressions: [{key: zone, operator: Exists}]}]\n    label: {a: b}",
      "transformations[0].label",
      'unknown key "label": ignored (closest known key: "labels")',
    ],
    [
      "a key beside matchExpressions in a term",
      "transformations:\n  - nodeSelector:\n      - {matchExpression: [], matchExpressions: [{key: zone, operator: Exists}]}",
      "transformations[0].nodeSelector[0].matchExpression",
      'unknown key "matchExpression": ignored: a term matches by its matchExpressions alone (closest known key: "matchExpressions")',
    ],
    [
      "a rule's key indented into a term, as the reference's own unit test has it",
      "transformations:\n  - nodeSelector:\n      - matchExpressions: [{key: zone, operator: Exists}]\n        labels: {a: b}",
      "transformations[0].nodeSelector[0].labels",
      `unknown key "labels": ignored: a rule's key inside a nodeSelector term (check its indentation)`,
    ],
    [
      "a misspelled feature",
      "transformations:\n  - features: {publicIPPredict: true}\n    nodeSelector: []",
      "transformations[0].features.publicIPPredict",
      'unknown key "publicIPPredict": ignored: an unknown feature stays off (closest known key: "publicIPDiscovery")',
    ],
  ])(
    "parseConfig() warns about %s: it can only narrow what applies, as the reference ignores it",
    (_, text, path, message) => {
      const c = parseConfig(text);
      expect(c.warnings.map((w) => [w.path, w.message])).toEqual([[path, message]]);
    },
  );

  test("parseConfig() keeps a misspelled matchExpressions a warning: the term, left empty, matches no node", () => {
    const c = parseConfig(
      "transformations:\n  - nodeSelector:\n      - matchExpresions: [{key: zone, operator: Exists}]\n    labels: {a: b}",
    );
    expect(c.warnings.map((w) => w.path)).toEqual([
      "transformations[0].nodeSelector[0].matchExpresions",
      "transformations[0].nodeSelector[0]",
    ]);
    expect(c.warnings[1]?.message).toBe("a term without matchExpressions matches no node");
    const fields = selectorFields(platformMetadata({ zone: "a" }));
    expect(matchSelector(c.transformations[0]?.nodeSelector ?? [], fields)).toBe(false);
  });

  test("parseConfig() takes a term's name as documentation, as the reference's docs write it", () => {
    const c = parseConfig(
      "transformations:\n  - name: r\n    nodeSelector:\n      - name: arm\n        matchExpressions: [{key: zone, operator: Exists}]\n      - matchExpressions: [{key: region, operator: Exists}]",
    );
    expect(c.warnings).toEqual([]);
    expect(c.transformations[0]?.nodeSelector.map((t) => t.name)).toEqual(["arm", undefined]);
  });

  test("parseConfig() says when only the case differs inside a rule: keys are case-sensitive", () => {
    const err = fails("transformations:\n  - NodeSelector: []\n");
    expect(err.issues.map((i) => i.message)).toEqual([
      'unknown key "NodeSelector": not allowed in a rule without nodeSelector, which applies to every node; keys are case-sensitive, did you mean "nodeSelector"?',
    ]);
  });

  test("parseConfig() refuses unknown keys a `<<` merge brings into a rule", () => {
    const err = fails(
      "base: &base {nodeSelecter: [], labels: {a: b}}\ntransformations:\n  - <<: *base\n    name: r\n",
    );
    expect(paths(err.issues)).toEqual(["transformations[0].nodeSelecter"]);
    expect(paths(err.warnings)).toEqual(["base"]);
  });

  test("parseConfig() reports every unknown key and the other errors together, in file order", () => {
    const err = fails(`global:
  PreferIPv6: true
transformations:
  - nodeSelecter: []
    labels: {a: '{{ .Nope '}
  - featurs: {}
`);
    expect(err.issues.map((i) => [i.path, i.line])).toEqual([
      ["transformations[0].nodeSelecter", 4],
      ["transformations[0].labels.a", 5],
      ["transformations[1].featurs", 6],
    ]);
    expect(paths(err.warnings)).toEqual(["global.PreferIPv6"]);
  });

  test("parseConfig() refuses selector keys no node has: DoesNotExist on one would match every node", () => {
    const err = fails(
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: instance-type, operator: DoesNotExist}\n",
    );
    expect(err.issues).toEqual([
      {
        path: "transformations[0].nodeSelector[0].matchExpressions[0].key",
        line: 4,
        message: 'unknown selector key "instance-type": no node has it (closest known key: "instanceType")',
      },
    ]);
  });

  test.each([
    ["a missing key", "{operator: DoesNotExist}", "key", 'unknown selector key "": no node has it'],
    ["tags, a map", "{key: tags, operator: Exists}", "key", 'unknown selector key "tags": no node has it'],
  ])("parseConfig() refuses a requirement with %s", (_name, expr, at, message) => {
    const err = fails(
      `transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - ${expr}\n`,
    );
    expect(err.issues.map((i) => i.path)).toEqual([
      `transformations[0].nodeSelector[0].matchExpressions[0].${at}`,
    ]);
    expect(err.issues[0]?.message).toStartWith(message);
  });

  test("parseConfig() accepts selector keys in any case, as the reference does", () => {
    const c = parseConfig(
      "transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - {key: InstanceType, operator: In, values: [a]}\n",
    );
    expect(c.warnings).toEqual([]);
    expect(c.transformations[0]?.nodeSelector[0]?.matchExpressions[0]?.key).toBe("instancetype");
  });

  test.each([
    [
      "a nodeSelector that is a mapping",
      "nodeSelector: {matchExpressions: []}",
      "transformations[0].nodeSelector",
      "expected a list, got a mapping",
    ],
    [
      "a nodeSelector that is text",
      "nodeSelector: platform=metal",
      "transformations[0].nodeSelector",
      'expected a list, got "platform=metal"',
    ],
    [
      "matchExpressions that are a mapping",
      "nodeSelector: [{matchExpressions: {key: zone}}]",
      "transformations[0].nodeSelector[0].matchExpressions",
      "expected a list, got a mapping",
    ],
    [
      "a term that is a list",
      "nodeSelector: [[{key: zone, operator: Exists}]]",
      "transformations[0].nodeSelector[0]",
      "expected a mapping, got a list",
    ],
  ])("parseConfig() refuses %s instead of matching every node", (_name, rule, path, message) => {
    expect(fails(`transformations:\n  - ${rule}\n`).issues.map((i) => [i.path, i.message])).toEqual([
      [path, message],
    ]);
  });

  test.each([
    ["an unknown operator", "{key: zone, operator: Matches, values: [a]}", "operator", "unknown operator"],
    [
      "an operator in the wrong case",
      "{key: zone, operator: in, values: [a]}",
      "operator",
      'did you mean "In"?',
    ],
    ["no operator", "{key: zone}", "operator", 'unknown operator ""'],
    ["In without values", "{key: zone, operator: In}", "values", "operator In needs at least one value"],
    [
      "In with an empty list",
      "{key: zone, operator: In, values: []}",
      "values",
      "operator In needs at least one value",
    ],
    [
      "NotIn without values",
      "{key: zone, operator: NotIn, values: ~}",
      "values",
      "operator NotIn needs at least one value",
    ],
    [
      "DoesNotExist with values",
      "{key: zone, operator: DoesNotExist, values: [a]}",
      "values",
      "operator DoesNotExist takes no values",
    ],
    [
      "Regexp without a pattern",
      "{key: zone, operator: Regexp}",
      "values",
      "operator Regexp needs exactly one value, got 0",
    ],
  ])("parseConfig() refuses a requirement with %s", (_name, expr, at, message) => {
    const err = fails(
      `transformations:\n  - nodeSelector:\n      - matchExpressions:\n          - ${expr}\n`,
    );
    expect(err.issues.map((i) => i.path)).toEqual([
      `transformations[0].nodeSelector[0].matchExpressions[0].${at}`,
    ]);
    expect(err.issues[0]?.message).toContain(message);
  });

  test.each([
    ["an empty term", "nodeSelector: [{}]"],
    ["a term with null matchExpressions", "nodeSelector: [{matchExpressions: ~}]"],
    ["a term with an empty matchExpressions", "nodeSelector: [{matchExpressions: []}]"],
  ])("parseConfig() keeps a rule with %s, which matches no node, with a warning", (_name, rule) => {
    const c = parseConfig(`transformations:\n  - ${rule}\n    labels: {a: b}\n`);
    const fields = selectorFields(platformMetadata({ platform: "metal", hostname: "web-1" }));
    expect(matchSelector(c.transformations[0]?.nodeSelector ?? [], fields)).toBe(false);
    expect(c.warnings.map((w) => w.message)).toEqual(["a term without matchExpressions matches no node"]);
  });
});

describe("parseConfig() errors", () => {
  test("parseConfig() refuses a bad regex at load, naming its exact path (weakness 3)", () => {
    const err = fails(`transformations:
  - name: first
    labels: {a: b}
  - name: web
    nodeSelector:
      - matchExpressions:
          - {key: platform, operator: In, values: [metal]}
          - key: hostname
            operator: Regexp
            values:
              - "^web-(["
`);
    expect(err.issues).toHaveLength(1);
    expect(err.issues[0]?.path).toBe("transformations[1].nodeSelector[0].matchExpressions[1].values[0]");
    expect(err.issues[0]?.line).toBe(11);
    expect(err.issues[0]?.message).toStartWith('invalid regular expression "^web-([": ');
    expect(err.message).toStartWith(
      "Cannot load cloud config: 1 problem:\n  transformations[1].nodeSelector[0].matchExpressions[1].values[0] (line 11): invalid regular expression",
    );
    expect(err.code).toBe("config");
  });

  test("parseConfig() reports warnings found alongside errors, in file order", () => {
    const err = fails(
      "transformations:\n  - labels: [a]\nglobal:\n  PreferIPv6: true\n  preferIPv6: maybe\n",
    );
    expect(paths(err.issues)).toEqual(["transformations[0].labels", "global.preferIPv6"]);
    expect(paths(err.warnings)).toEqual(["global.PreferIPv6"]);
  });

  test("parseConfig() collects every error, not just the first", () => {
    const err = fails(`global:
  preferIPv6: maybe
transformations:
  - nodeSelector:
      - matchExpressions:
          - {key: platform, operator: in, values: [metal]}
          - {key: zone, operator: Gt, values: [abc]}
          - {key: zone, operator: Exists, values: [x]}
    annotations:
      example.com/id: "{{ .InstanceID"
  - labels: [a]
  - taints: {a: NoSchedule}
    platformMetadata: {Zone: "{{ end }}"}
`);
    // Type errors stop before compilation, so fix them and look again.
    expect(paths(err.issues)).toEqual(["global.preferIPv6", "transformations[1].labels"]);
    const err2 = fails(
      readFileSync(fixture("reference-ccm-config.yaml"), "utf8").replace("^web-.+$", "^web-(") +
        "  - platformMetadata: {Zone: '{{ .Zone'}\n",
    );
    expect(paths(err2.issues)).toEqual([
      "transformations[0].nodeSelector[0].matchExpressions[0].values[0]",
      "transformations[2].platformMetadata.Zone",
    ]);
    const err3 = fails(`transformations:
  - nodeSelector:
      - matchExpressions:
          - {key: platform, operator: in, values: [metal]}
          - {key: zone, operator: Gt, values: [abc]}
          - {key: zone, operator: Exists, values: [x]}
    annotations:
      example.com/id: "{{ .InstanceID"
`);
    expect(err3.issues.map((i) => [i.path, i.line])).toEqual([
      ["transformations[0].nodeSelector[0].matchExpressions[0].operator", 4],
      ["transformations[0].nodeSelector[0].matchExpressions[1].values[0]", 5],
      ["transformations[0].nodeSelector[0].matchExpressions[2].values", 6],
      ['transformations[0].annotations["example.com/id"]', 8],
    ]);
    expect(err3.issues[3]?.message).toStartWith('invalid template "{{ .InstanceID": ');
  });

  test("parseConfig() refuses a bad constant regex inside a template at load", () => {
    const err = fails(
      `transformations:\n  - annotations:\n      example.com/id: '{{ regexFind "([" .Hostname }}'\n`,
    );
    expect(err.issues.map((i) => [i.path, i.line])).toEqual([
      ['transformations[0].annotations["example.com/id"]', 3],
    ]);
    expect(err.issues[0]?.message).toStartWith(
      `invalid template ${JSON.stringify('{{ regexFind "([" .Hostname }}')}: `,
    );
  });

  test.each([
    ["global: 5", "global", 'expected a mapping, got "5"'],
    ["- a", "", "expected a mapping, got a list"],
    ["just text", "", 'expected a mapping, got "just text"'],
    ["transformations: {a: 1}", "transformations", "expected a list, got a mapping"],
    ["transformations: [5]", "transformations[0]", 'expected a mapping, got "5"'],
    ["global:\n  endpoints: 10.0.0.1", "global.endpoints", 'expected a list, got "10.0.0.1"'],
    ["global:\n  clusterName: [a]", "global.clusterName", "expected a string, got a list"],
    ["transformations:\n  - name: {a: b}", "transformations[0].name", "expected a string, got a mapping"],
    [
      "transformations:\n  - labels: {a: [b]}",
      "transformations[0].labels.a",
      "expected a string, got a list",
    ],
    [
      "transformations:\n  - annotations: {example.com/a: {b: c}}",
      'transformations[0].annotations["example.com/a"]',
      "expected a string, got a mapping",
    ],
    [
      "transformations:\n  - nodeSelector: [{matchExpressions: [{key: a, operator: In, values: x}]}]",
      "transformations[0].nodeSelector[0].matchExpressions[0].values",
      'expected a list, got "x"',
    ],
  ])("parseConfig(%j) fails at %p: %s", (text, path, message) => {
    const err = fails(text);
    expect(err.issues.map((i) => [i.path, i.message])).toEqual([[path, message]]);
  });

  test.each([
    ["a YAML syntax error", "global:\n  clusterName: [a\n", 3],
    ["a duplicate key", "global:\n  clusterName: a\n  clusterName: b\n", 3],
    ["a tab indentation", "global:\n\tclusterName: a\n", 2],
  ])("parseConfig() reports %s with its line", (_name, text, line) => {
    const err = fails(text);
    expect(err.issues.length).toBeGreaterThan(0);
    expect(err.issues[0]?.path).toBe("");
    expect(err.issues[0]?.line).toBe(line);
  });

  test("parseConfig() refuses a self-referencing alias instead of recursing forever", () => {
    const err = fails("transformations: &a\n  - labels: {}\n  - *a\n");
    expect(err.issues.map((i) => i.message)).toEqual(["alias refers to itself"]);
  });

  test("parseConfig() refuses alias bombs", () => {
    const lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 8; i++)
      lines.push(
        `a${i}: &a${i} [${Array(10)
          .fill(`*a${i - 1}`)
          .join(", ")}]`,
      );
    const err = fails(lines.join("\n"));
    expect(err.issues[0]?.message).toBe("document has more than 100000 nodes after alias expansion");
  });
});

describe("parseConfig() entries", () => {
  test("parseConfig() drops a label key no Node can have with a warning, and keeps the rest", () => {
    const c = parseConfig(`transformations:
  - labels:
      ok: "yes"
      bad/key/x: a
      example.com/templated: "{{ .Hostname }}"
`);
    expect(c.transformations[0]?.labels.map((l) => l.key)).toEqual(["ok", "example.com/templated"]);
    expect(c.transformations[0]?.labels[1]?.value.template).toBeDefined();
    expect(c.warnings.map((w) => [w.path, w.line])).toEqual([['transformations[0].labels["bad/key/x"]', 4]]);
    expect(c.warnings[0]?.message).toStartWith("entry ignored: key a qualified name");
  });

  test("parseConfig() refuses a valid label key with an invalid literal value: selectors and exclusions read it by its key", () => {
    const err = fails(`transformations:
  - labels:
      ok: "yes"
      node.kubernetes.io/exclude-from-external-load-balancers: "has space"
      bad/key/x: "also bad"
`);
    expect(err.issues.map((i) => [i.path, i.line])).toEqual([
      ['transformations[0].labels["node.kubernetes.io/exclude-from-external-load-balancers"]', 4],
      ['transformations[0].labels["bad/key/x"]', 5],
    ]);
    expect(err.issues[0]?.message).toStartWith("value a valid label must be");
    expect(err.issues[0]?.message).toEndWith(": the rule would apply without this entry (fix or remove it)");
    // Both problems of an entry are named, the value's first.
    expect(err.issues[1]?.message).toMatch(/^value a valid label must be .*; key a qualified name/);
  });

  test("parseConfig() refuses a misspelled taint effect, naming the closest one, and taints Kubernetes manages", () => {
    const err = fails(`transformations:
  - taints:
      example.com/storage: "ceph:NoSchedule"
      example.com/bare: NoExecute
      example.com/typo: "present:NoSchedul"
      example.com/case: noexecute
      example.com/far: "Sometimes"
      node.cloudprovider.kubernetes.io/uninitialized: "true:NoSchedule"
      node.kubernetes.io/unreachable: NoExecute
      example.com/templated: "{{ .Zone }}:NoSchedule"
`);
    const tail = ": the rule would apply without this entry (fix or remove it)";
    expect(err.issues.map((i) => [i.path, i.line, i.message])).toEqual([
      [
        'transformations[0].taints["example.com/typo"]',
        5,
        `effect "NoSchedul" is not one of NoSchedule, PreferNoSchedule, NoExecute (closest: "NoSchedule")${tail}`,
      ],
      [
        'transformations[0].taints["example.com/case"]',
        6,
        `effect "noexecute" is not one of NoSchedule, PreferNoSchedule, NoExecute; effects are case-sensitive, did you mean "NoExecute"?${tail}`,
      ],
      [
        'transformations[0].taints["example.com/far"]',
        7,
        `effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute${tail}`,
      ],
      [
        'transformations[0].taints["node.cloudprovider.kubernetes.io/uninitialized"]',
        8,
        `key is managed by Kubernetes or the cloud provider framework${tail}`,
      ],
      [
        'transformations[0].taints["node.kubernetes.io/unreachable"]',
        9,
        `key is managed by Kubernetes or the cloud provider framework${tail}`,
      ],
    ]);
  });

  test("parseConfig() keeps valid taints, literal and templated", () => {
    const c = parseConfig(`transformations:
  - taints:
      example.com/storage: "ceph:NoSchedule"
      example.com/bare: NoExecute
      example.com/templated: "{{ .Zone }}:NoSchedule"
`);
    expect(c.transformations[0]?.taints.map((t) => t.key)).toEqual([
      "example.com/storage",
      "example.com/bare",
      "example.com/templated",
    ]);
    expect(c.warnings).toEqual([]);
  });

  test("parseConfig() drops an annotation key no Node can have with a warning, and refuses the CCM's bookkeeping key", () => {
    const c = parseConfig(`transformations:
  - annotations:
      Example.COM/Id: a
      a/b/c: b
`);
    expect(c.transformations[0]?.annotations.map((a) => a.key)).toEqual(["Example.COM/Id"]);
    expect(c.warnings.map((w) => w.message)).toEqual([
      expect.stringContaining("entry ignored: key a qualified name"),
    ]);
    const err = fails(`transformations:
  - annotations:
      talos.dev/ccm-managed: "{}"
`);
    expect(err.issues.map((i) => [i.path, i.message])).toEqual([
      [
        'transformations[0].annotations["talos.dev/ccm-managed"]',
        "key is reserved for the CCM's own bookkeeping: the rule would apply without this entry (fix or remove it)",
      ],
    ]);
  });

  test("parseConfig() refuses the record's digest label, keeps other node-restriction labels for rules", () => {
    const c = parseConfig(`transformations:
  - labels:
      node-restriction.kubernetes.io/pool: secure
`);
    expect(c.transformations[0]?.labels.map((l) => l.key)).toEqual(["node-restriction.kubernetes.io/pool"]);
    const err = fails(`transformations:
  - labels:
      node-restriction.kubernetes.io/talos-ccm-managed: forged
      node-restriction.kubernetes.io/pool: secure
`);
    expect(err.issues.map((i) => [i.path, i.message])).toEqual([
      [
        'transformations[0].labels["node-restriction.kubernetes.io/talos-ccm-managed"]',
        "key is reserved for the CCM's own bookkeeping: the rule would apply without this entry (fix or remove it)",
      ],
    ]);
  });

  test("parseConfig() maps platformMetadata keys case-insensitively and ignores hostname and platform", () => {
    const c = parseConfig(`transformations:
  - platformMetadata:
      Region: "{{ .Region }}-on-metal"
      zoNe: us-west1
      ProviderID: "someprovider:///{{ .UUID }}"
      spot: "true"
      InstanceId: i-1
      internaldns: a.example
      ExternalDNS: b.example
      instanceType: t2
      Hostname: fake
      platform: fake
      tags: x
`);
    expect(c.transformations[0]?.platformMetadata.map((o) => [o.key, o.field])).toEqual([
      ["Region", "region"],
      ["zoNe", "zone"],
      ["ProviderID", "providerId"],
      ["spot", "spot"],
      ["InstanceId", "instanceId"],
      ["internaldns", "internalDNS"],
      ["ExternalDNS", "externalDNS"],
      ["instanceType", "instanceType"],
    ]);
    expect(c.warnings.map((w) => [w.path, w.message])).toEqual([
      ["transformations[0].platformMetadata.Hostname", "entry ignored: Hostname cannot be overridden"],
      ["transformations[0].platformMetadata.platform", "entry ignored: platform cannot be overridden"],
      ["transformations[0].platformMetadata.tags", "entry ignored: tags cannot be overridden"],
    ]);
  });

  test("parseConfig() refuses an unknown platformMetadata field, naming the closest one", () => {
    const err = fails("transformations:\n  - platformMetadata:\n      Zone: a\n      Regoin: typo\n");
    expect(err.issues).toEqual([
      {
        path: "transformations[0].platformMetadata.Regoin",
        line: 4,
        message:
          'unknown platformMetadata field "Regoin": not allowed in a rule (closest known key: "Region")',
      },
    ]);
  });

  test("parseConfig() names rules and warns about a term that can never match", () => {
    const c = parseConfig(
      "transformations:\n  - name: web\n  - nodeSelector:\n      - matchExpressions: []\n  - features: {publicIPDiscovery: yes}\n",
    );
    expect(c.transformations.map((r) => r.name)).toEqual(["web", "transformations[1]", "transformations[2]"]);
    expect(c.transformations[2]?.features).toEqual({ publicIPDiscovery: true });
    expect(c.warnings).toEqual([
      {
        path: "transformations[1].nodeSelector[0]",
        line: 4,
        message: "a term without matchExpressions matches no node",
      },
    ]);
  });

  test("parseConfig() keeps map keys that are special in JavaScript", () => {
    const c = parseConfig("transformations:\n  - labels: {constructor: a, prototype: b, toString: c}\n");
    expect(c.transformations[0]?.labels.map((l) => l.key)).toEqual(["constructor", "prototype", "toString"]);
    expect(Object.getPrototypeOf({})).toBe(Object.prototype);
  });
});

describe("parseConfig() YAML features", () => {
  test("parseConfig() resolves an alias to the last anchor of its name before it, as yaml.v3 does", () => {
    const c = parseConfig("transformations:\n  - labels: {a: &v one, b: *v, c: &v two, d: *v}\n");
    expect(c.transformations[0]?.labels.map((l) => l.value.source)).toEqual(["one", "one", "two", "two"]);
  });

  test("parseConfig() does not compose documents after the first: their errors do not count", () => {
    const c = parseConfig("global: {clusterName: a}\n---\n[unclosed\n---\nx: 1\n");
    expect(c.global.clusterName).toBe("a");
    expect(c.warnings.map((w) => w.message)).toEqual([
      "only the first YAML document is read; 2 more ignored",
    ]);
  });

  test("parseConfig() quotes a long invalid regexp or template by its start only", () => {
    const pattern = `(${"a".repeat(5000)}`;
    const err = fails(
      `transformations:\n  - nodeSelector: [{matchExpressions: [{key: zone, operator: Regexp, values: ['${pattern}']}]}]\n    labels: {a: '{{ ${"(".repeat(200)}'}\n`,
    );
    expect(err.issues).toHaveLength(2);
    for (const issue of err.issues) expect(issue.message.length).toBeLessThan(400);
    expect(err.issues[0]?.message).toContain("(5001 characters)");
  });

  test("parseConfig() resolves anchors, aliases and << merges like yaml.v3", () => {
    const c = parseConfig(`metal: &metal {key: platform, operator: In, values: [metal]}
transformations:
  - nodeSelector:
      - matchExpressions:
          - *metal
          - <<: *metal
            key: zone
`);
    const exprs = c.transformations[0]?.nodeSelector[0]?.matchExpressions;
    expect(exprs).toEqual([
      { key: "platform", operator: "In", values: ["metal"] },
      { key: "zone", operator: "In", values: ["metal"] },
    ]);
    expect(paths(c.warnings)).toEqual(["metal"]);
  });

  test("parseConfig() merges in order: explicit keys first, then earlier mappings over later ones", () => {
    const c = parseConfig(`x-a: &a {key: zone, operator: In}
x-b: &b {key: region, operator: Exists, values: [b]}
transformations:
  - nodeSelector:
      - matchExpressions:
          - <<: [*a, *b]
            operator: NotIn
`);
    expect(c.transformations[0]?.nodeSelector[0]?.matchExpressions).toEqual([
      { key: "zone", operator: "NotIn", values: ["b"] },
    ]);
  });

  test.each([
    ["an unknown anchor", "global: *nope\n", "global", "unknown anchor in alias *nope"],
    ["a merge of a list", "x: &x [1]\nglobal: {<<: [*x]}\n", "global", "a `<<` merge needs mappings"],
    ["a merge of itself", "global: &g {<<: *g}\n", "global", "alias refers to itself"],
  ])("parseConfig() refuses %s", (_name, text, path, message) => {
    expect(fails(text).issues.map((i) => [i.path, i.message])).toEqual([[path, message]]);
  });

  test("parseConfig() reads only the first document, like yaml.v3's Decode, and says so", () => {
    const c = parseConfig("global:\n  clusterName: a\n---\nx: 1\nx: 2\n");
    expect(c.global.clusterName).toBe("a");
    expect(c.warnings).toEqual([
      { path: "", line: 4, message: "only the first YAML document is read; 1 more ignored" },
    ]);
  });
});

describe("reference example configs", () => {
  test("loadConfig() loads the reference's hack/ccm-config.yaml unchanged", () => {
    const c = loadConfig(fixture("reference-ccm-config.yaml"));
    expect(c.warnings).toEqual([]);
    expect(c.global).toEqual(DEFAULT_GLOBAL);
    expect(c.transformations.map((r) => r.name)).toEqual(["web", "nocloud"]);
    const [web, nocloud] = c.transformations;
    expect(web?.nodeSelector[0]?.matchExpressions[0]).toMatchObject({ key: "hostname", operator: "Regexp" });
    expect(web?.annotations.map((a) => [a.key, a.value.source])).toEqual([
      ["talos.dev/instance-id", "id-{{ .InstanceID }}"],
    ]);
    expect(web?.labels.map((l) => [l.key, l.value.source])).toEqual([["node-role.kubernetes.io/web", ""]]);
    expect(web?.taints.map((t) => [t.key, t.value.source])).toEqual([
      ["node.cloudprovider.kubernetes.io/storage-type", "NoSchedule"],
    ]);
    expect(nocloud?.platformMetadata.map((o) => o.field)).toEqual(["instanceType", "providerId"]);
  });

  test("loadConfig() loads the reference's docs/rules.yaml unchanged, warning about what it ignores", () => {
    const c = loadConfig(fixture("reference-rules.yaml"));
    expect(c.transformations.map((r) => r.name)).toEqual(["oracle", "openstack"]);
    // The terms' names are documentation, kept for logs, Events and validate.
    expect(c.transformations.map((r) => r.nodeSelector.map((t) => t.name))).toEqual([
      ["oracle vm in frankfurt", "special vm name"],
      ["fix openstack zone"],
    ]);
    expect(c.transformations[0]?.nodeSelector.map((t) => t.matchExpressions.length)).toEqual([2, 1]);
    expect(c.transformations[1]?.platformMetadata.map((o) => o.field)).toEqual([
      "zone",
      "region",
      "providerId",
    ]);
    // The stray quote in `talos.dev/zone"` makes an invalid label key: that entry alone is dropped.
    expect(c.transformations[0]?.labels.map((l) => l.key)).toEqual(["node-role.kubernetes.io/web"]);
    // publicIPPredict is no feature: it stays off, as the reference ignores it.
    expect(c.transformations[1]?.features).toEqual({ publicIPDiscovery: false });
    expect(c.warnings.map((w) => [w.path, w.line, w.message])).toEqual([
      [
        'transformations[0].labels["talos.dev/zone\\""]',
        29,
        "entry ignored: key name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
      ],
      [
        "transformations[1].features.publicIPPredict",
        65,
        'unknown key "publicIPPredict": ignored: an unknown feature stays off (closest known key: "publicIPDiscovery")',
      ],
      ["", 71, "only the first YAML document is read; 1 more ignored"],
    ]);
  });

  test("loadConfig() fails on the docs/config.md example as the reference's decoder does (its quotes nest)", () => {
    expect(() => loadConfig(fixture("reference-config-md.yaml"))).toThrow(
      "Cannot load cloud config: 1 problem:\n  document (line 47): ",
    );
  });

  test("parseConfig() loads the docs/config.md example once its annotation arrows and nested quotes are fixed", () => {
    const text = readFileSync(fixture("reference-config-md.yaml"), "utf8")
      .replace(/\s+<- .*$/gm, "")
      .replace(
        '"{{ regexFindString "^web-([a-z0-9]+)-(.*)$" .Hostname 1 }}"',
        `'{{ regexFindString "^web-([a-z0-9]+)-(.*)$" .Hostname 1 }}'`,
      );
    const c = parseConfig(text);
    expect(c.warnings.map((w) => w.path)).toEqual(["global.PreferIPv6"]);
    expect(c.transformations.map((r) => r.name)).toEqual(["nocloud-nodes", "web-nodes"]);
    const web = c.transformations[1];
    expect(web?.nodeSelector.map((t) => t.matchExpressions.map((e) => e.operator))).toEqual([
      ["In", "Regexp"],
      ["Regexp"],
    ]);
    expect(web?.taints.map((t) => [t.key, t.value.source])).toEqual([
      ["node.cloudprovider.kubernetes.io/storage-type", "ceph:NoSchedule"],
    ]);
    expect(web?.platformMetadata.map((o) => o.field)).toEqual([
      "region",
      "zone",
      "instanceType",
      "providerId",
    ]);
    expect(web?.features).toEqual({ publicIPDiscovery: true });
  });
});

describe("loadConfig()", () => {
  test("loadConfig() reads a file", () => {
    const dir = mkdtempSync(join(tmpdir(), "ccm-config-"));
    writeFileSync(join(dir, "ccm-config.yaml"), "global:\n  clusterName: from-file\n");
    expect(loadConfig(join(dir, "ccm-config.yaml")).global.clusterName).toBe("from-file");
  });

  test("loadConfig() turns an unreadable file into a ConfigError that keeps the cause", () => {
    const path = join(tmpdir(), "no-such-dir-ccm", "ccm-config.yaml");
    let err: unknown;
    try {
      loadConfig(path);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).message).toStartWith(
      `Cannot load cloud config: 1 problem:\n  document: cannot read ${path}: `,
    );
    expect((err as ConfigError).cause).toBeInstanceOf(Error);
  });
});

describe("helpers", () => {
  test.each([
    [["transformations", 1, "nodeSelector", 0, "values", 0], "transformations[1].nodeSelector[0].values[0]"],
    [
      ["transformations", 0, "labels", "node-role.kubernetes.io/web"],
      'transformations[0].labels["node-role.kubernetes.io/web"]',
    ],
    [["global", "preferIPv6"], "global.preferIPv6"],
    [[], ""],
  ])("formatPath(%j) = %p", (path, text) => {
    expect(formatPath(path)).toBe(text);
  });
});

describe("parseConfig() fuzzing", () => {
  const nasty = fc.constantFrom(
    "(",
    "[a-",
    "^web-.+$",
    "(?i)web",
    "\\p{Greek}",
    "{{ .Hostname }}",
    "{{",
    "}}",
    "{{ .Spot",
    "{{ if .Spot }}a{{ end }}",
    "{{ end }}",
    "ceph:NoSchedule",
    "NoExecute",
    "a:b:c",
    "1",
    "-9223372036854775809",
    "",
    "~",
    "yes",
    "constructor",
    "__proto__",
  );
  const scalar = fc.oneof(nasty, fc.string(), fc.integer(), fc.boolean(), fc.constant(null));
  const key = fc.oneof(nasty, fc.string(), fc.constantFrom("example.com/a", "node-role.kubernetes.io/web"));
  const expression = fc.record(
    {
      key: fc.oneof(fc.constantFrom("platform", "hostname", "Zone", "instanceId"), key),
      operator: fc.oneof(
        fc.constantFrom("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Regexp", "in"),
        scalar,
      ),
      values: fc.oneof(fc.array(scalar, { maxLength: 3 }), scalar),
    },
    { requiredKeys: [] },
  );
  const rule = fc.record(
    {
      name: scalar,
      nodeSelector: fc.array(fc.record({ matchExpressions: fc.array(expression, { maxLength: 3 }) }), {
        maxLength: 2,
      }),
      labels: fc.dictionary(key, scalar, { maxKeys: 3 }),
      annotations: fc.dictionary(key, scalar, { maxKeys: 3 }),
      taints: fc.dictionary(key, scalar, { maxKeys: 3 }),
      platformMetadata: fc.dictionary(
        fc.oneof(fc.constantFrom("Region", "zone", "Hostname", "spot", "Tags"), key),
        scalar,
        {
          maxKeys: 3,
        },
      ),
      features: fc.oneof(fc.record({ publicIPDiscovery: scalar }), scalar),
      extra: fc.jsonValue({ maxDepth: 2 }),
    },
    { requiredKeys: [] },
  );
  const config = fc.record(
    {
      global: fc.oneof(
        fc.record(
          {
            clusterName: scalar,
            preferIPv6: scalar,
            reconcile: scalar,
            endpoints: fc.array(scalar),
            PreferIPv6: scalar,
          },
          { requiredKeys: [] },
        ),
        scalar,
      ),
      transformations: fc.oneof(fc.array(rule, { maxLength: 3 }), scalar),
    },
    { requiredKeys: [] },
  );

  const onlyConfigErrors = (text: string) => {
    try {
      parseConfig(text);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
    }
  };

  test("parseConfig() of random config-shaped documents returns or throws ConfigError, nothing else", () => {
    fc.assert(
      fc.property(config, (doc) => onlyConfigErrors(stringify(doc))),
      { numRuns: 300 },
    );
  });

  test("parseConfig() of random JSON values and random text returns or throws ConfigError, nothing else", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (doc) => onlyConfigErrors(stringify(doc))),
      { numRuns: 200 },
    );
    fc.assert(fc.property(fc.string({ unit: "grapheme", maxLength: 200 }), onlyConfigErrors), {
      numRuns: 200,
    });
    fc.assert(
      fc.property(
        fc.array(
          fc.constantFrom(
            "a:",
            " ",
            "-",
            "\n",
            "&x",
            "*x",
            "<<:",
            "[",
            "{",
            "'",
            '"',
            "#",
            "---",
            "? ",
            "!!str",
          ),
          { maxLength: 40 },
        ),
        (parts) => onlyConfigErrors(parts.join("")),
      ),
      { numRuns: 200 },
    );
  });
});

describe("parseConfig() bounds: every stress file is accepted or refused for its real cause", () => {
  // tests/support/config-stress.ts measures time and memory of the same files in the binary.
  for (const c of stressCases()) {
    test(`${c.name}: ${c.outcome === "accepted" ? "accepted" : `refused: ${c.outcome}`}`, () => {
      const dir = mkdtempSync(join(tmpdir(), "ccm-stress-"));
      const path = writeCase(dir, c, 0);
      let outcome: string;
      try {
        const config = loadConfig(path);
        const dropped = config.warnings.find((w) => w.message.startsWith("entry ignored"));
        outcome = dropped ? "entry ignored" : "accepted";
      } catch (err) {
        if (!(err instanceof ConfigError)) throw err;
        expect(err.issues).toHaveLength(1);
        outcome = err.issues[0]?.message ?? "";
      }
      rmSync(dir, { recursive: true });
      if (c.outcome === "accepted" || c.outcome === "entry ignored") expect(outcome).toBe(c.outcome);
      else expect(outcome).toContain(c.outcome);
      expect(outcome).not.toContain("call stack");
    });
  }
});
