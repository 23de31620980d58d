import { describe, expect, test } from "bun:test";
import {
  compileRequirement,
  matchRequirement,
  matchSelector,
  matchTerm,
  type RawRequirement,
  type Requirement,
  type SelectorTerm,
  selectorFields,
} from "../../lib/selector.ts";
import type { PlatformMetadata } from "../../lib/types.ts";

const metadata: PlatformMetadata = {
  platform: "metal",
  hostname: "web-1",
  region: "",
  zone: "eu-1a",
  instanceType: "c3.small",
  instanceId: "42",
  providerId: "",
  spot: false,
  internalDNS: "",
  externalDNS: "",
  tags: { team: "web" },
};
const fields = selectorFields(metadata);

function req(raw: RawRequirement): Requirement {
  const r = compileRequirement(raw);
  if (!r.ok) throw new Error(`unexpected issues: ${JSON.stringify(r.issues)}`);
  return r.requirement;
}

describe("selectorFields()", () => {
  test("selectorFields() keeps non-empty strings under lower-cased YAML keys, spot always, no tags", () => {
    expect(Object.fromEntries(fields)).toEqual({
      platform: "metal",
      hostname: "web-1",
      zone: "eu-1a",
      instancetype: "c3.small",
      instanceid: "42",
      spot: "false",
    });
  });
});

describe("compileRequirement()", () => {
  test.each<[RawRequirement, { path: (string | number)[]; message: string }]>([
    [
      { key: "platform", operator: "in", values: ["metal"] },
      {
        path: ["operator"],
        message:
          'unknown operator "in"; expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Regexp (did you mean "In"?)',
      },
    ],
    [
      { key: "platform", operator: "Matches", values: ["x"] },
      { path: ["operator"], message: expect.not.stringContaining("did you mean") },
    ],
    [
      { key: "platform", operator: "In", values: [] },
      { path: ["values"], message: "operator In needs at least one value" },
    ],
    [
      { key: "platform", operator: "NotIn", values: [] },
      { path: ["values"], message: "operator NotIn needs at least one value" },
    ],
    [
      { key: "zone", operator: "Exists", values: ["a"] },
      { path: ["values"], message: "operator Exists takes no values" },
    ],
    [
      { key: "zone", operator: "DoesNotExist", values: ["a"] },
      { path: ["values"], message: "operator DoesNotExist takes no values" },
    ],
    [
      { key: "instanceId", operator: "Gt", values: ["1", "2"] },
      { path: ["values"], message: "operator Gt needs exactly one value, got 2" },
    ],
    [
      { key: "instanceId", operator: "Lt", values: ["1.5"] },
      { path: ["values", 0], message: 'operator Lt needs a base-10 64-bit integer, got "1.5"' },
    ],
    [
      { key: "instanceId", operator: "Gt", values: ["9223372036854775808"] },
      { path: ["values", 0], message: expect.stringContaining("64-bit integer") },
    ],
    [
      { key: "instanceId", operator: "Gt", values: ["0x10"] },
      { path: ["values", 0], message: expect.stringContaining("64-bit integer") },
    ],
    [
      { key: "hostname", operator: "Regexp", values: [] },
      { path: ["values"], message: "operator Regexp needs exactly one value, got 0" },
    ],
    [
      { key: "hostname", operator: "Regexp", values: ["^web-(["] },
      { path: ["values", 0], message: expect.stringContaining('invalid regular expression "^web-([": ') },
    ],
  ])("compileRequirement(%j) reports %j", (raw, issue) => {
    expect(compileRequirement(raw)).toEqual({ ok: false, issues: [issue] });
  });

  test("compileRequirement() lower-cases the key and parses integer bounds", () => {
    expect(req({ key: "InstanceID", operator: "Gt", values: ["-9223372036854775808"] })).toEqual({
      key: "instanceid",
      operator: "Gt",
      bound: -(2n ** 63n),
    });
    expect(req({ key: "zone", operator: "Lt", values: ["+7"] })).toEqual({
      key: "zone",
      operator: "Lt",
      bound: 7n,
    });
  });
});

describe("matchRequirement()", () => {
  test.each<[RawRequirement, boolean]>([
    [{ key: "platform", operator: "In", values: ["aws", "metal"] }, true],
    [{ key: "PLATFORM", operator: "In", values: ["metal"] }, true],
    [{ key: "platform", operator: "In", values: ["Metal"] }, false],
    [{ key: "region", operator: "In", values: [""] }, false],
    [{ key: "platform", operator: "NotIn", values: ["aws"] }, true],
    [{ key: "platform", operator: "NotIn", values: ["metal"] }, false],
    // The reference's quirk, kept: NotIn on a missing key is false.
    [{ key: "region", operator: "NotIn", values: ["eu"] }, false],
    [{ key: "zone", operator: "Exists", values: [] }, true],
    [{ key: "region", operator: "Exists", values: [] }, false],
    [{ key: "spot", operator: "Exists", values: [] }, true],
    [{ key: "tags", operator: "Exists", values: [] }, false],
    [{ key: "region", operator: "DoesNotExist", values: [] }, true],
    [{ key: "no-such-key", operator: "DoesNotExist", values: [] }, true],
    [{ key: "zone", operator: "DoesNotExist", values: [] }, false],
    [{ key: "instanceId", operator: "Gt", values: ["41"] }, true],
    [{ key: "instanceId", operator: "Gt", values: ["42"] }, false],
    [{ key: "instanceId", operator: "Lt", values: ["100"] }, true],
    [{ key: "instanceId", operator: "Lt", values: ["-1"] }, false],
    [{ key: "zone", operator: "Gt", values: ["0"] }, false],
    [{ key: "region", operator: "Lt", values: ["0"] }, false],
    [{ key: "hostname", operator: "Regexp", values: ["^web-\\d+$"] }, true],
    [{ key: "hostname", operator: "Regexp", values: ["eb"] }, true],
    [{ key: "hostname", operator: "Regexp", values: ["^db-"] }, false],
    [{ key: "region", operator: "Regexp", values: [".*"] }, false],
    [{ key: "spot", operator: "In", values: ["false"] }, true],
  ])("matchRequirement(%j) = %p", (raw, expected) => {
    expect(matchRequirement(req(raw), fields)).toBe(expected);
  });

  test("matchRequirement() gives the same answer every time for a global regex", () => {
    const r: Requirement = { key: "hostname", operator: "Regexp", regex: /web/g };
    expect([1, 2, 3].map(() => matchRequirement(r, fields))).toEqual([true, true, true]);
  });
});

describe("matchSelector()", () => {
  const yes = req({ key: "platform", operator: "In", values: ["metal"] });
  const no = req({ key: "platform", operator: "In", values: ["aws"] });
  test.each<[string, SelectorTerm[], boolean]>([
    ["no terms match every node", [], true],
    ["a term without expressions matches nothing", [{ matchExpressions: [] }], false],
    ["expressions are ANDed", [{ matchExpressions: [yes, no] }], false],
    ["all expressions true", [{ matchExpressions: [yes, yes] }], true],
    ["terms are ORed", [{ matchExpressions: [no] }, { matchExpressions: [yes] }], true],
    ["no term true", [{ matchExpressions: [no] }, { matchExpressions: [] }], false],
  ])("matchSelector() %s", (_name, terms, expected) => {
    expect(matchSelector(terms, fields)).toBe(expected);
    expect(terms.some((t) => matchTerm(t, fields)) || terms.length === 0).toBe(expected);
  });
});
