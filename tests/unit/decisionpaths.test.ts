// The decision paths (README "Architecture" and "Layout and data flow"). One Node's: the cloud-node
// controller makes ONE call, lib/desirednode.ts decideNode, from the Node and its facts to the patch.
// It enters three decision files, each once (desirednode.ts, then transform.ts for the rules,
// addresses.ts for the addresses), and never returns to a file it left. One CSR's: the approver
// checks the request (csrrequest.ts checkCsr), screens it against the cluster (csr.ts screen), gathers
// the evidence (its only return to I/O: Talos or the Service lookups cannot be asked from a core) and
// concludes (csr.ts conclude), each once (screened again only if the cluster changed meanwhile), and
// conclude runs none of screen's checks. This file checks
// those shapes on the sources and follows one Node through its path.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseConfig } from "../../lib/config.ts";
import { decideNode, type NodeDecisionInput } from "../../lib/desirednode.ts";
import { readManagedRecord } from "../../lib/managedrecord.ts";
import { type LeanNode, nodeIPs } from "../../lib/nodeview.ts";
import type { AddressStatus } from "../../lib/types.ts";
import { PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT } from "../../lib/wellknown.ts";
import { platformMetadata } from "../support/fixtures.ts";
import { importsOf, strip } from "../support/sourcecode.ts";

const libDir = join(import.meta.dir, "..", "..", "lib");

/** The decision's files: the entry, then the two it hands a part to. */
const ENTRY = "desirednode.ts";
const DECISION = [ENTRY, "transform.ts", "addresses.ts"];

/** What each decision file the entry calls may be entered through: one function each. */
const CALLED = { "transform.ts": ["transform"], "addresses.ts": ["decideAddresses"] } as const;

/** Modules the entry reads that decide nothing about a Node: data, formats and generic helpers. */
const DATA = ["instanceid.ts", "managedrecord.ts", "samelist.ts", "wellknown.ts", "dict.ts"];

function code(file: string): string {
  return strip(readFileSync(join(libDir, file), "utf8")).code;
}

/** The lib files `file` imports at run time (type-only imports are contracts, not calls). */
function runtimeImports(file: string): string[] {
  return importsOf(code(file))
    .filter((i) => !i.typeOnly && i.specifier.startsWith("./"))
    .map((i) => i.specifier.slice(2));
}

/** The names `file` imports at run time from `from` (`type` names left out). */
function runtimeNames(file: string, from: string): string[] {
  const names: string[] = [];
  for (const m of code(file).matchAll(/\bimport\s+\{([^}]*)\}\s*from\s*["']\.\/([^"']+)["']/g)) {
    if (m[2] !== from) continue;
    for (const raw of (m[1] as string).split(",")) {
      const name = raw.trim();
      if (name !== "" && !name.startsWith("type ")) names.push(name);
    }
  }
  return names.sort();
}

/** Every lib file `file` reaches through run-time imports, itself excluded. */
function reach(file: string, seen = new Set<string>()): Set<string> {
  for (const next of runtimeImports(file)) {
    if (seen.has(next)) continue;
    seen.add(next);
    reach(next, seen);
  }
  seen.delete(file);
  return seen;
}

/** How many times `name(` is called in `file`'s code (comments and strings do not count). */
function calls(file: string, name: string): number {
  const bare = strip(readFileSync(join(libDir, file), "utf8")).bare;
  return [...bare.matchAll(new RegExp(`(?<![\\w.#])${name}\\s*\\(`, "g"))].length;
}

describe("one Node's decision path", () => {
  test("the controller and the preview decide a Node with one call to decideNode, and nothing else of the path", () => {
    for (const shell of ["node.ts", "validatereport.ts"]) {
      expect({ shell, decideNode: calls(shell, "decideNode") }).toEqual({ shell, decideNode: 1 });
      expect({ shell, desirednode: runtimeNames(shell, ENTRY).includes("decideNode") }).toEqual({
        shell,
        desirednode: true,
      });
      // Neither enters the path's other files by itself: no rules, no addresses, no plan of its own.
      expect({ shell, addresses: runtimeNames(shell, "addresses.ts") }).toEqual({ shell, addresses: [] });
      expect({ shell, transform: runtimeNames(shell, "transform.ts").includes("transform") }).toEqual({
        shell,
        transform: false,
      });
      expect({ shell, instanceid: runtimeNames(shell, "instanceid.ts") }).toEqual({ shell, instanceid: [] });
      expect({ shell, transformmetrics: runtimeNames(shell, "transformmetrics.ts") }).toEqual({
        shell,
        transformmetrics: shell === "node.ts" ? ["recordTransform"] : [],
      });
      // The record is read with the Node (step 1), before the decision.
      expect(runtimeNames(shell, "managedrecord.ts")).toEqual(["readManagedRecord"]);
    }
  });

  test("decideNode enters each decision file once, through one function", () => {
    const outside = runtimeImports(ENTRY).filter((f) => !DECISION.includes(f) && !DATA.includes(f));
    expect(outside).toEqual([]);
    for (const [file, names] of Object.entries(CALLED)) {
      expect({ file, names: runtimeNames(ENTRY, file) }).toEqual({ file, names: [...names] });
      for (const name of names) expect({ name, calls: calls(ENTRY, name) }).toEqual({ name, calls: 1 });
    }
  });

  test("no file on the path returns to one it left: the decision files and the data never import back", () => {
    for (const file of [...DECISION.slice(1), ...DATA]) {
      const back = [...reach(file)].filter((f) => DECISION.includes(f) && f !== file);
      expect({ file, importsBack: back }).toEqual({ file, importsBack: [] });
    }
  });

  test("one Node from facts to patch: a fresh metal node with one rule", () => {
    const node: LeanNode = {
      metadata: {
        name: "web-1",
        uid: "u1",
        resourceVersion: "7",
        creationTimestamp: "2026-01-01T00:00:00Z",
        labels: { "kubernetes.io/hostname": "web-1" },
        annotations: { [PROVIDED_NODE_IP_ANNOTATION]: "10.0.0.5" },
      },
      spec: { taints: [{ key: UNINITIALIZED_TAINT, value: "true", effect: "NoSchedule" }] },
      status: { addresses: [{ type: "InternalIP", address: "10.0.0.5" }], ready: "False" },
    };
    const address = (cidr: string, link: string): AddressStatus => ({
      id: `${link}/${cidr}`,
      address: cidr,
      linkName: link,
      linkIndex: 2,
      family: "inet4",
      scope: 0,
      flags: 0x80,
    });
    const config = parseConfig(
      [
        "transformations:",
        "  - name: web",
        "    nodeSelector:",
        "      - matchExpressions:",
        "          - { key: platform, operator: In, values: [metal] }",
        "    labels:",
        '      example.com/role: "{{ .Hostname }}"',
      ].join("\n"),
    );
    const input: NodeDecisionInput = {
      node,
      ips: nodeIPs({ annotations: node.metadata.annotations, addresses: node.status.addresses }, false),
      facts: {
        platformMetadata: platformMetadata({
          platform: "metal",
          hostname: "web-1.example.com",
          zone: "rack-a",
        }),
        // 10.0.0.9 is not a node IP; 203.0.113.7 on metal is found by public-IP discovery.
        addresses: [address("10.0.0.5/24", "eth0"), address("203.0.113.7/24", "eth1")],
      },
      nodeIP: "10.0.0.5",
      managed: readManagedRecord(node.metadata),
      config,
      clusterName: "prod",
    };
    let tick = 100;
    const decided = decideNode(input, () => (tick += 5));
    expect(decided.rulesMs).toBe(5);
    expect(decided.hold).toBe(false);
    expect(decided.providerID).toEqual({
      action: "write",
      providerID: "talos://metal/10.0.0.5",
      from: "fallback",
    });
    expect(decided.ips).toEqual({
      onMachine: { ips: ["10.0.0.5"], provided: ["10.0.0.5"], source: "annotation" },
      notOnMachine: [],
    });
    expect(decided.patch.addresses).toEqual([
      { type: "InternalIP", address: "10.0.0.5" },
      { type: "ExternalIP", address: "203.0.113.7" },
      { type: "Hostname", address: "web-1" },
      { type: "InternalDNS", address: "web-1.example.com" },
    ]);
    const ops = decided.patch.ops;
    const labels = ops.find((o) => o.op === "add" && o.path.startsWith("/metadata/labels/example.com"));
    expect(labels).toEqual({
      op: "add",
      path: "/metadata/labels/example.com~1role",
      value: "web-1.example.com",
    });
    expect(ops).toContainEqual({
      op: "add",
      path: "/metadata/labels/topology.kubernetes.io~1zone",
      value: "rack-a",
    });
    expect(ops).toContainEqual({
      op: "add",
      path: "/metadata/labels/node.cloudprovider.kubernetes.io~1clustername",
      value: "prod",
    });
    expect(ops).toContainEqual({ op: "test", path: "/spec/providerID", value: null });
    expect(ops).toContainEqual({ op: "add", path: "/spec/providerID", value: "talos://metal/10.0.0.5" });
    // The uninitialized taint goes in the same patch, guarded by a test of the list it was read from.
    expect(ops.slice(-2)).toEqual([
      { op: "test", path: "/spec/taints", value: node.spec.taints },
      { op: "remove", path: "/spec/taints" },
    ]);
    // Deciding again on the same input gives the same patch: the decision is pure.
    expect(decideNode(input).patch).toEqual(decided.patch);
  });
});

/** The body of function `name` in `file`'s code, from its declaration to the next top-level one. */
function bodyOf(file: string, name: string): string {
  const bare = strip(readFileSync(join(libDir, file), "utf8")).bare;
  const start = bare.search(new RegExp(`\\bexport function ${name}\\b`));
  if (start < 0) throw new Error(`no function ${name} in ${file}`);
  const next = bare.slice(start + 1).search(/\n(?:export )?(?:function|const|class|interface|type) /);
  return next < 0 ? bare.slice(start) : bare.slice(start, start + 1 + next);
}

describe("one CSR's decision path", () => {
  test("the approver checks, screens and concludes a CSR once each (screens again only if the cluster changed), never the whole decide()", () => {
    const shell = "csrapprover.ts";
    expect(runtimeNames(shell, "csrrequest.ts")).toContain("checkCsr");
    expect(runtimeNames(shell, "csr.ts")).toEqual(expect.arrayContaining(["conclude", "screen"]));
    expect(runtimeNames(shell, "csr.ts")).not.toContain("decide");
    for (const name of ["checkCsr", "screen", "conclude"])
      expect({ name, calls: calls(shell, name) }).toEqual({ name, calls: 1 });
    expect(calls(shell, "decide")).toBe(0);
    // Screened a second time only under the check that the cluster changed while the evidence came.
    const bare = strip(readFileSync(join(libDir, shell), "utf8")).bare;
    const screens = [...bare.matchAll(/this\.#screen\(/g)].map((m) => m.index);
    expect(screens).toHaveLength(2);
    const guard = bare.lastIndexOf("if (this.#clusterVersion() !== screenedAt) {", screens[1]);
    expect(guard).toBeGreaterThan(screens[0] as number);
    expect(bare.slice(guard, screens[1]).split("\n")).toHaveLength(2);
  });

  test("conclude() runs only the evidence's checks: none of screen()'s", () => {
    const screen = bodyOf("csr.ts", "screen");
    const conclude = bodyOf("csr.ts", "conclude");
    const screenChecks = ["checkCsr", "checkNetworks", "checkNodes"];
    for (const check of screenChecks) {
      expect({ check, inScreen: screen.includes(`${check}(`) }).toEqual({ check, inScreen: true });
      expect({ check, inConclude: conclude.includes(`${check}(`) }).toEqual({ check, inConclude: false });
    }
    for (const check of ["checkTalos", "checkServiceNames"])
      expect({ check, inConclude: conclude.includes(`${check}(`) }).toEqual({ check, inConclude: true });
  });

  test("the CSR path's decision files never import the approver or any shell back", () => {
    for (const file of ["csr.ts", "csrrequest.ts", "csrdecision.ts"]) {
      const back = [...reach(file)].filter((f) => f.startsWith("csrapprover") || f === "csrtalosfacts.ts");
      expect({ file, importsBack: back }).toEqual({ file, importsBack: [] });
    }
  });
});
