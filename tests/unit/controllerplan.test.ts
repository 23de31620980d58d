import { describe, expect, test } from "bun:test";
import { contentDigest, reloadOutcome } from "../../lib/cloudconfigreload.ts";
import { parseConfig } from "../../lib/config.ts";
import { ConfigLimitError } from "../../lib/configlimits.ts";
import type { ControllerName } from "../../lib/controllernames.ts";
import { plannedControllers, talosEndpointsEnv, talosUse } from "../../lib/controllerplan.ts";
import type { IpamOptions } from "../../lib/flags.ts";

const ipam = (over: Partial<IpamOptions> = {}): IpamOptions => ({
  allocateNodeCidrs: false,
  allocatorType: "RangeAllocator",
  clusterCidrs: [],
  serviceCidrs: [],
  ...over,
});

describe("plannedControllers()", () => {
  test("global.approveNodeCSR adds node-csr-approval once", () => {
    const approve = parseConfig("global:\n  approveNodeCSR: true\n");
    expect(plannedControllers(["cloud-node"], approve)).toEqual({
      enabled: ["cloud-node", "node-csr-approval"],
      addedCsrApproval: true,
    });
    expect(plannedControllers(["node-csr-approval"], approve)).toEqual({
      enabled: ["node-csr-approval"],
      addedCsrApproval: false,
    });
    expect(plannedControllers(["cloud-node"], parseConfig(""))).toEqual({
      enabled: ["cloud-node"],
      addedCsrApproval: false,
    });
  });
});

describe("talosUse()", () => {
  test.each([
    [["cloud-node"], ipam(), "required"],
    [["cloud-node-lifecycle", "node-csr-approval"], ipam(), "required"],
    [["node-csr-approval"], ipam(), "optional"],
    [["node-ipam"], ipam({ allocateNodeCidrs: true }), "required"],
    [["node-ipam"], ipam({ allocateNodeCidrs: true, clusterCidrs: ["10.244.0.0/16"] }), "none"],
    [["node-ipam", "node-csr-approval"], ipam({ allocateNodeCidrs: false }), "optional"],
    [[], ipam(), "none"],
  ])("%p (ipam %j) → %s", (enabled, opts, want) => {
    expect(talosUse(enabled as ControllerName[], opts)).toBe(want as ReturnType<typeof talosUse>);
  });
});

test("talosEndpointsEnv(): the flag wins over the config file; nothing gives undefined", () => {
  expect(talosEndpointsEnv(["a"], ["b", "c"])).toBe("a");
  expect(talosEndpointsEnv([], ["b", "c"])).toBe("b,c");
  expect(talosEndpointsEnv([], [])).toBeUndefined();
});

describe("reloadOutcome()", () => {
  const text = "global:\n  clusterName: a\n";
  test("the same content is unchanged; new valid content is parsed", () => {
    expect(reloadOutcome(contentDigest(text), text)).toEqual({ kind: "unchanged" });
    const next = reloadOutcome(contentDigest(text), "global:\n  clusterName: b\n");
    expect(next.kind).toBe("valid");
    if (next.kind === "valid") {
      expect(next.config.global.clusterName).toBe("b");
      expect(next.digest).toBe(contentDigest("global:\n  clusterName: b\n"));
    }
  });
  test("invalid content and a file over the limit are invalid, once per content", () => {
    const bad = reloadOutcome(contentDigest(text), "global: [");
    expect(bad.kind).toBe("invalid");
    expect(reloadOutcome(contentDigest("global: ["), "global: [")).toEqual({ kind: "unchanged" });
    const big = new ConfigLimitError({ path: "", message: "file too large" } as never);
    const over = reloadOutcome(contentDigest(text), big);
    expect(over.kind).toBe("invalid");
    expect(reloadOutcome(contentDigest(big), big)).toEqual({ kind: "unchanged" });
  });
});
