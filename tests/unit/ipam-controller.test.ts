// The node-ipam controller's pure parts: when it needs Talos, how its configuration is completed
// from Talos (with a stub client that counts calls), which addresses and IPs of a node it uses, the
// set-once patch, and the pod capacity the Node cache keeps for it.

import { describe, expect, test } from "bun:test";
import { type LeanNode, leanNode } from "../../lib/cache.ts";
import { CidrError, formatPrefix } from "../../lib/cidr.ts";
import type { IpamOptions } from "../../lib/flags.ts";
import {
  ipamAddresses,
  nodeIPsOf,
  nodeIpamConfig,
  nodeIpamNeedsTalos,
  podCIDRsPatch,
} from "../../lib/ipam.ts";
import type { TalosClient } from "../../lib/talos.ts";
import type { AddressStatus, ControllerManagerConfig } from "../../lib/types.ts";

function ipam(over: Partial<IpamOptions> = {}): IpamOptions {
  return {
    allocateNodeCidrs: true,
    allocatorType: "RangeAllocator",
    clusterCidrs: [],
    serviceCidrs: [],
    ...over,
  };
}

/** A Talos client whose only method answers `answer` (or throws it) and counts the calls. */
function stubTalos(answer: ControllerManagerConfig | Error): { talos: TalosClient; calls: () => number } {
  let n = 0;
  const talos = {
    controllerManagerConfig: async () => {
      n++;
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as TalosClient;
  return { talos, calls: () => n };
}

const TALOS_CMC: ControllerManagerConfig = {
  podCIDRs: ["10.244.0.0/16", "fd00:10:244::/64"],
  serviceCIDRs: ["10.96.0.0/12", "fd00:10:96::/112"],
};

describe("nodeIpamNeedsTalos()", () => {
  const cases: Array<[string, Partial<IpamOptions>, boolean]> = [
    ["allocation off", { allocateNodeCidrs: false }, false],
    ["no --cluster-cidr", {}, true],
    ["RangeAllocator with an IPv4 cluster CIDR", { clusterCidrs: ["10.244.0.0/16"] }, false],
    ["RangeAllocator dual-stack", { clusterCidrs: ["10.244.0.0/16", "fd00::/64"] }, false],
    [
      "CloudAllocator IPv4-only",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16"], serviceCidrs: [] },
      false,
    ],
    [
      "CloudAllocator dual-stack",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.244.0.0/16", "fd00::/64"] },
      true,
    ],
    [
      "CloudAllocator, entries still comma-joined",
      { allocatorType: "CloudAllocator", clusterCidrs: ["10.0.0.0/8,fd00::/64"] },
      true,
    ],
  ];
  for (const [name, over, want] of cases) {
    test(`nodeIpamNeedsTalos() ${name} → ${want}`, () => {
      expect(nodeIpamNeedsTalos(ipam(over))).toBe(want);
    });
  }
});

describe("nodeIpamConfig()", () => {
  test("nodeIpamConfig() takes every CIDR from the flags without touching Talos", async () => {
    const { talos, calls } = stubTalos(new Error("must not be called"));
    const cfg = await nodeIpamConfig(
      ipam({ clusterCidrs: ["10.244.0.0/16"], serviceCidrs: ["10.96.0.0/12"], nodeCidrMaskSize: 26 }),
      talos,
    );
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(["10.244.0.0/16"]);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(["10.96.0.0/12"]);
    expect(cfg.nodeMaskSizes).toEqual([26]);
    expect(calls()).toBe(0);
  });

  test("nodeIpamConfig() reserves no service range for an IPv4-only cluster without the flag, and asks nobody", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    for (const allocatorType of ["RangeAllocator", "CloudAllocator"] as const) {
      const cfg = await nodeIpamConfig(ipam({ allocatorType, clusterCidrs: ["10.244.0.0/16"] }), talos);
      expect(cfg.serviceCIDRs).toEqual([]);
    }
    expect(calls()).toBe(0);
  });

  test("nodeIpamConfig() takes pod and service CIDRs from Talos when --cluster-cidr is missing", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(ipam(), talos);
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.podCIDRs);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.serviceCIDRs);
    expect(cfg.nodeMaskSizes).toEqual([24, 80]);
    expect(calls()).toBe(1);
  });

  test("nodeIpamConfig() keeps the service flag over Talos' service CIDRs", async () => {
    const { talos } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(ipam({ serviceCidrs: ["10.100.0.0/16"] }), talos);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(["10.100.0.0/16"]);
  });

  test("nodeIpamConfig() fills only the service CIDRs from Talos for a dual-stack CloudAllocator", async () => {
    const { talos, calls } = stubTalos(TALOS_CMC);
    const cfg = await nodeIpamConfig(
      ipam({ allocatorType: "CloudAllocator", clusterCidrs: ["10.1.0.0/16", "fd01::/64"] }),
      talos,
    );
    expect(cfg.clusterCIDRs.map(formatPrefix)).toEqual(["10.1.0.0/16", "fd01::/64"]);
    expect(cfg.serviceCIDRs.map(formatPrefix)).toEqual(TALOS_CMC.serviceCIDRs);
    expect(calls()).toBe(1);
  });

  test("nodeIpamConfig() goes on without a service range when only that read fails", async () => {
    const { talos } = stubTalos(new Error("not a control-plane node"));
    const cfg = await nodeIpamConfig(
      ipam({ allocatorType: "CloudAllocator", clusterCidrs: ["10.1.0.0/16", "fd01::/64"] }),
      talos,
    );
    expect(cfg.serviceCIDRs).toEqual([]);
  });

  const failures: Array<[string, IpamOptions, TalosClient | undefined, RegExp]> = [
    [
      "no --cluster-cidr and no Talos client",
      ipam(),
      undefined,
      /^Cannot configure node IPAM: no --cluster-cidr and no Talos API access/,
    ],
    [
      "no --cluster-cidr and Talos failing",
      ipam(),
      stubTalos(new Error("permission denied")).talos,
      /^Cannot configure node IPAM: cannot read the pod subnets from Talos \(or set --cluster-cidr\): permission denied$/,
    ],
    [
      "an IPv6 mask flag for Talos' IPv4-only pod subnet",
      ipam({ nodeCidrMaskSizeIpv6: 64 }),
      stubTalos({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: [] }).talos,
      /--node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster/,
    ],
    [
      "Talos' pod subnets of one family",
      ipam(),
      stubTalos({ podCIDRs: ["10.244.0.0/16", "10.245.0.0/16"], serviceCIDRs: [] }).talos,
      /two IPv4 entries/,
    ],
  ];
  for (const [name, opts, talos, message] of failures) {
    test(`nodeIpamConfig() refuses ${name}`, async () => {
      const err = await nodeIpamConfig(opts, talos).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CidrError);
      expect((err as CidrError).code).toBe("config");
      expect((err as Error).message).toMatch(message);
    });
  }
});

function address(linkName: string, address: string, flags = 0x80): AddressStatus {
  return {
    id: `${linkName}/${address}`,
    address,
    linkName,
    linkIndex: 1,
    family: address.includes(":") ? "inet6" : "inet4",
    scope: 0,
    flags,
  };
}

describe("ipamAddresses()", () => {
  test("ipamAddresses() drops overlay, management, loopback and dummy links; permanent IPv6 first", () => {
    const got = ipamAddresses([
      address("lo", "127.0.0.1/8"),
      address("eth0", "10.0.0.5/24"),
      address("eth0", "2001:db8:1::99/64", 0x1),
      address("eth0", "2001:db8:1::5/64"),
      address("kubespan", "fd7a::1/128"),
      address("siderolink", "fdae::5a/64"),
      address("cilium_host", "10.244.0.1/32"),
      address("dummy0", "169.254.1.1/32"),
      address("bond0", "2a01:4f8::2/64"),
    ]);
    expect(got).toEqual(["2001:db8:1::5/64", "2a01:4f8::2/64", "10.0.0.5/24", "2001:db8:1::99/64"]);
  });

  test("ipamAddresses() of nothing is empty", () => {
    expect(ipamAddresses([])).toEqual([]);
  });
});

function lean(
  annotations: Record<string, string>,
  addresses: Array<{ type: string; address: string }>,
): LeanNode {
  return leanNode({ metadata: { name: "n1", annotations }, status: { addresses } });
}

describe("nodeIPsOf()", () => {
  const cases: Array<[string, LeanNode, string[]]> = [
    [
      "InternalIPs, then ExternalIPs, then provided IPs, without duplicates or hostnames",
      lean({ "alpha.kubernetes.io/provided-node-ip": "10.0.0.5, fd00::5" }, [
        { type: "Hostname", address: "n1" },
        { type: "ExternalIP", address: "2a01:4f8::2" },
        { type: "InternalIP", address: "10.0.0.5" },
      ]),
      ["10.0.0.5", "2a01:4f8::2", "fd00::5"],
    ],
    ["only the annotation", lean({ "alpha.kubernetes.io/provided-node-ip": "10.0.0.7" }, []), ["10.0.0.7"]],
    ["nothing known", lean({}, [{ type: "Hostname", address: "n1" }]), []],
  ];
  for (const [name, node, want] of cases) {
    test(`nodeIPsOf() ${name}`, () => {
      expect(nodeIPsOf(node)).toEqual(want);
    });
  }
});

describe("podCIDRsPatch()", () => {
  test("podCIDRsPatch() tests that both fields are unset before adding them, podCIDR = the first", () => {
    expect(podCIDRsPatch(["10.244.1.0/24", "fd00::/80"])).toEqual([
      { op: "test", path: "/spec/podCIDRs", value: null },
      { op: "test", path: "/spec/podCIDR", value: null },
      { op: "add", path: "/spec/podCIDRs", value: ["10.244.1.0/24", "fd00::/80"] },
      { op: "add", path: "/spec/podCIDR", value: "10.244.1.0/24" },
    ]);
  });
});

describe("leanNode()", () => {
  const cases: Array<[string, unknown, number | undefined]> = [
    ["allocatable pods", { allocatable: { pods: "250" }, capacity: { pods: "300" } }, 250],
    ["capacity pods when allocatable has none", { capacity: { pods: "300" } }, 300],
    ["nothing when unreported", {}, undefined],
    [
      "nothing for a zero or odd quantity",
      { allocatable: { pods: "0" }, capacity: { pods: "1k" } },
      undefined,
    ],
  ];
  for (const [name, status, want] of cases) {
    test(`leanNode() keeps maxPods: ${name}`, () => {
      expect(leanNode({ metadata: { name: "n1" }, status }).status.maxPods).toBe(want);
    });
  }
});
