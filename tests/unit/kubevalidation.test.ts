import { describe, expect, test } from "bun:test";
import {
  ANNOTATIONS_MAX_BYTES,
  annotationsSize,
  isAnnotationKey,
  isDNS1123Subdomain,
  isLabelValue,
  isQualifiedName,
  isTaintEffect,
  isTaintKey,
  parseTaint,
  RESERVED_TAINT_KEYS,
} from "../../lib/kubevalidation.ts";

const name63 = "a".repeat(63);
const name64 = "a".repeat(64);
const label63 = `${"a".repeat(61)}.b`;
const subdomain253 = Array.from({ length: 4 }, () => "a".repeat(62))
  .join(".")
  .padEnd(253, "b");

describe("isDNS1123Subdomain()", () => {
  test.each([
    ["example.com", true],
    ["a", true],
    ["a-b.c-d", true],
    ["0.1", true],
    [subdomain253, true],
    [`${subdomain253}c`, false],
    ["", false],
    ["Example.com", false],
    ["-a.com", false],
    ["a-.com", false],
    ["a..com", false],
    ["a_b.com", false],
    ["a.com.", false],
  ])("isDNS1123Subdomain(%p) valid=%p", (value, valid) => {
    expect(isDNS1123Subdomain(value).length === 0).toBe(valid);
  });
});

describe("isQualifiedName()", () => {
  test.each([
    ["a", true],
    ["A", true],
    ["MyName", true],
    ["my.name", true],
    ["123-abc", true],
    ["a_b-c.d", true],
    ["node-role.kubernetes.io/web", true],
    ["example.com/MyName", true],
    [name63, true],
    [`example.com/${name63}`, true],
    ["", false],
    [name64, false],
    ["-a", false],
    ["a-", false],
    ["_a", false],
    ["a b", false],
    ["a/b/c", false],
    ["/a", false],
    ["a/", false],
    ["Example.com/a", false],
    ['talos.dev/zone"', false],
    ["ü", false],
    ["a:b", false],
  ])("isQualifiedName(%p) valid=%p", (value, valid) => {
    expect(isQualifiedName(value).length === 0).toBe(valid);
  });

  test("isQualifiedName() names the failing part", () => {
    expect(isQualifiedName("/a")).toEqual(["prefix part must be non-empty"]);
    expect(isQualifiedName(name64)).toContain("name part must be no more than 63 characters");
    expect(isQualifiedName("Bad_Prefix/a")[0]).toStartWith("prefix part a lowercase RFC 1123 subdomain");
  });
});

describe("isLabelValue()", () => {
  test.each([
    ["", true],
    ["a", true],
    ["on-demand", true],
    ["1.10", true],
    ["A_b.c-D", true],
    [label63, true],
    [name64, false],
    ["-a", false],
    ["a.", false],
    ["a b", false],
    ["a/b", false],
    ["a:b", false],
    ["é", false],
    ["a\n", false],
  ])("isLabelValue(%p) valid=%p", (value, valid) => {
    expect(isLabelValue(value).length === 0).toBe(valid);
  });
});

describe("isAnnotationKey()", () => {
  test.each([
    ["example.com/id", true],
    ["Example.COM/Id", true],
    ["custom-annotation/cloud-id", true],
    ["a/b/c", false],
    ["", false],
    ["example.com/", false],
  ])("isAnnotationKey(%p) valid=%p", (value, valid) => {
    expect(isAnnotationKey(value).length === 0).toBe(valid);
  });
});

describe("annotationsSize()", () => {
  test("annotationsSize() counts UTF-8 bytes of keys and values", () => {
    expect(annotationsSize({})).toBe(0);
    expect(annotationsSize({ ab: "cd", e: "" })).toBe(5);
    expect(annotationsSize({ k: "é" })).toBe(3);
    expect(ANNOTATIONS_MAX_BYTES).toBe(262144);
  });
});

describe("isTaintKey()", () => {
  test.each([...RESERVED_TAINT_KEYS])("isTaintKey(%p) refuses a key Kubernetes manages", (key) => {
    expect(isTaintKey(key)).toEqual(["is managed by Kubernetes or the cloud provider framework"]);
  });

  test.each([
    ["node.cloudprovider.kubernetes.io/storage-type", true],
    ["example.com/dedicated", true],
    ["dedicated", true],
    ["node-role.kubernetes.io/control-plane", true],
    ["a/b/c", false],
    ["", false],
  ])("isTaintKey(%p) valid=%p", (key, valid) => {
    expect(isTaintKey(key).length === 0).toBe(valid);
  });
});

describe("parseTaint()", () => {
  test.each([
    [
      "example.com/storage",
      "ceph:NoSchedule",
      { key: "example.com/storage", value: "ceph", effect: "NoSchedule" },
    ],
    ["example.com/storage", "NoExecute", { key: "example.com/storage", effect: "NoExecute" }],
    ["example.com/storage", ":PreferNoSchedule", { key: "example.com/storage", effect: "PreferNoSchedule" }],
  ])("parseTaint(%p, %p) builds the taint", (key, spec, taint) => {
    expect(parseTaint(key, spec)).toEqual({ ok: true, taint } as never);
  });

  test.each([
    ["k", "", ['effect "" is not one of NoSchedule, PreferNoSchedule, NoExecute']],
    [
      "k",
      "ceph:noschedule",
      [
        'effect "noschedule" is not one of NoSchedule, PreferNoSchedule, NoExecute; effects are case-sensitive, did you mean "NoSchedule"?',
      ],
    ],
    [
      "k",
      "present:NoSchedul",
      ['effect "NoSchedul" is not one of NoSchedule, PreferNoSchedule, NoExecute (closest: "NoSchedule")'],
    ],
    [
      "k",
      "PreferNoSchedle",
      [
        'effect "PreferNoSchedle" is not one of NoSchedule, PreferNoSchedule, NoExecute (closest: "PreferNoSchedule")',
      ],
    ],
    ["k", "Sometimes", ['effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute']],
    ["k", "a:b:NoSchedule", ['must be "<value>:<effect>" or "<effect>", got "a:b:NoSchedule"']],
    ["k", "a b:NoSchedule", [expect.stringContaining("value a valid label must be")]],
    [
      "node.kubernetes.io/not-ready",
      "NoExecute",
      ["key is managed by Kubernetes or the cloud provider framework"],
    ],
    [
      "node.cloudprovider.kubernetes.io/uninitialized",
      "true:NoSchedule",
      ["key is managed by Kubernetes or the cloud provider framework"],
    ],
    ["a/b/c", "x:Nope", [expect.stringContaining("key a qualified name"), expect.stringContaining("effect")]],
  ])("parseTaint(%p, %p) refuses it", (key, spec, errors) => {
    expect(parseTaint(key, spec)).toEqual({ ok: false, errors } as never);
  });
});

describe("isTaintEffect()", () => {
  test("isTaintEffect() accepts exactly the three Kubernetes effects", () => {
    expect(["NoSchedule", "PreferNoSchedule", "NoExecute"].every(isTaintEffect)).toBe(true);
    expect(["", "noschedule", "NoScheduleNoAdmit"].some(isTaintEffect)).toBe(false);
  });
});
