// node-csr-approval's Talos facts from cloud-node's watch cache (lib/taloswatchcsr.ts through
// lib/taloswatchcache.ts `csrFacts`): no Talos call per CSR while the watches are healthy, links and
// NodeIPConfig read once per address-watch epoch, and the same facts a direct read
// (lib/csrtalosfacts.ts TalosFactsReader) gives of the same machine; what moves them out of date
// (a new link, an address made again on another link, a new address, a broken watch) makes the CSR
// wait for a read, and what the watches cannot answer sends it to Talos.

import { describe, expect, test } from "bun:test";
import { TalosFactsReader } from "../../lib/csrtalosfacts.ts";
import { leanNode } from "../../lib/nodeview.ts";
import { TalosError } from "../../lib/talos.ts";
import { TalosWatchCache } from "../../lib/taloswatchcache.ts";
import { linksCover, watchedCsrFacts } from "../../lib/taloswatchcsr.ts";
import { NodeWatch } from "../../lib/taloswatchnode.ts";
import type { AddressStatus } from "../../lib/types.ts";
import { address, FakeTalos, link, metadata, settle } from "../support/faketaloswatch.ts";

const IP = "10.0.0.5";

/** A cache sharing its watches with node-csr-approval, on a fake Talos. */
function setup(opts: { csrFacts?: boolean } = {}) {
  const talos = new FakeTalos();
  const changes: string[] = [];
  const cache = new TalosWatchCache({
    talos,
    onChange: (n) => changes.push(n),
    refreshMs: 60_000,
    tickMs: 3_600_000,
    retryBackoff: { initialMs: 1, maxMs: 1 },
    csrFacts: opts.csrFacts ?? true,
    schedule: () => () => {},
  });
  return { talos, cache, changes };
}

/** node-1 watched on IP, its metadata and `addresses` delivered, everything read. */
async function watched(f: ReturnType<typeof setup>, addresses: AddressStatus[]) {
  f.cache.track("node-1", [IP]);
  f.talos
    .stream(IP, "platformmetadata")
    .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
  const s = f.talos.stream(IP, "addresses");
  for (const a of addresses) s.push({ type: "created", id: a.id, version: "1", resource: a });
  s.push({ type: "bootstrapped" });
  await settle();
  await settle();
  return s;
}

const on = (addr: string, linkName: string, linkIndex: number, scope = 0): AddressStatus => ({
  ...address(addr, linkName),
  linkIndex,
  scope,
});

describe("TalosWatchCache.csrFacts", () => {
  test("a healthy node's CSRs cost no Talos call: links and NodeIPConfig were read once, when its address watch delivered its contents", async () => {
    const f = setup();
    f.talos.excludedOn.set(IP, ["10.244.0.0/16"]);
    await watched(f, [on(`${IP}/24`, "eth0", 2), on("127.0.0.1/8", "lo", 1, 254)]);
    expect(f.talos.calls.sort()).toEqual(
      [
        `get nodeipconfig ${IP}`,
        `get nodename ${IP}`,
        `get platformmetadata ${IP}`,
        `list links ${IP}`,
        `watch addresses ${IP}`,
      ].sort(),
    );
    const before = f.talos.calls.length;
    for (let i = 0; i < 3; i++) {
      const a = f.cache.csrFacts("node-1", [IP], false);
      expect(a).toEqual({
        state: "ready",
        facts: {
          nodeIP: IP,
          nodename: "node-1",
          addresses: [`${IP}/24`, "127.0.0.1/8"],
          sharedAddresses: new Map([["127.0.0.1", 'Talos reports it with host scope on link "lo"']]),
          excludedSubnets: ["10.244.0.0/16"],
          dnsNames: [],
        },
      });
    }
    expect(f.talos.calls.length).toBe(before);
    f.cache.close();
  });

  test("without csrFacts the cache reads nothing for CSRs and sends them to Talos", async () => {
    const f = setup({ csrFacts: false });
    await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    expect(
      f.talos.calls.filter((c) => c.startsWith("list links") || c.startsWith("get nodeipconfig")),
    ).toEqual([]);
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ask");
    f.cache.close();
  });

  test("the facts equal what a direct read of the same machine gives, shared links and exclusions included", async () => {
    const machines: Array<{ name: string; addresses: AddressStatus[]; links: ReturnType<typeof link>[] }> = [
      {
        name: "plain",
        addresses: [on(`${IP}/24`, "eth0", 2)],
        links: [link("lo", 1, 772), link("eth0", 2, 1)],
      },
      {
        name: "kube-proxy IPVS, a cloud's public IP, loopback, a link without status",
        addresses: [
          on(`${IP}/24`, "eth0", 2),
          on("10.96.0.1/32", "kube-ipvs0", 7),
          on("203.0.113.9/32", "external", 0),
          on("127.0.0.1/8", "lo", 1, 254),
          on("192.0.2.1/32", "ghost0", 9),
          on("fe80::1/64", "eth0", 2, 253),
        ],
        links: [
          link("lo", 1, 772),
          link("eth0", 2, 1),
          link("kube-ipvs0", 7, 1, "dummy"),
          link("lxc1", 8, 1, "veth"),
        ],
      },
      {
        name: "a VIP on a bond, a WireGuard tunnel",
        addresses: [on(`${IP}/24`, "bond0", 4), on("10.0.0.100/32", "bond0", 4), on("10.8.0.1/24", "wg0", 5)],
        links: [link("bond0", 4, 1, "bond"), link("wg0", 5, 65534, "wireguard")],
      },
    ];
    for (const m of machines) {
      const f = setup();
      f.talos.linksOn.set(IP, m.links);
      f.talos.excludedOn.set(IP, ["10.0.0.100/32", "10.244.0.0/16"]);
      f.talos.hostnameOn.set(IP, { hostname: "node-1", domainname: "lan" });
      f.talos.pollAddresses = m.addresses;
      await watched(f, m.addresses);
      // DNS names too: the first CSR with names besides the node's reads HostnameStatus once.
      expect(f.cache.csrFacts("node-1", [IP], true).state).toBe("wait");
      await settle();
      const fromWatches = f.cache.csrFacts("node-1", [IP], true);
      const reader = new TalosFactsReader(f.talos as ConstructorParameters<typeof TalosFactsReader>[0]);
      const node = leanNode({
        metadata: { name: "node-1" },
        status: { addresses: [{ type: "InternalIP", address: IP }] },
      });
      const direct = await reader.read(node, false, true);
      expect({ machine: m.name, ...fromWatches }).toEqual({ machine: m.name, state: "ready", facts: direct });
      f.cache.close();
    }
  });

  test("an address on a new link, or on a link made again (another index), waits for the links to be read again", async () => {
    const f = setup();
    const s = await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    f.talos.linksOn.set(IP, [link("eth0", 2, 1), link("vx0", 3, 1, "vxlan")]);
    const br = on("10.1.0.1/24", "vx0", 3);
    s.push({ type: "created", id: br.id, version: "2", resource: br });
    const a = f.cache.csrFacts("node-1", [IP], false);
    expect(a.state).toBe("wait");
    expect(a.state === "wait" && a.why).toContain("links");
    await settle();
    const ready = f.cache.csrFacts("node-1", [IP], false);
    expect(ready.state === "ready" && ready.facts.sharedAddresses.get("10.1.0.1")).toContain("vxlan");
    // eth0 made again as a dummy (index 10): its address moves with it.
    f.talos.linksOn.set(IP, [link("eth0", 10, 1, "dummy"), link("vx0", 3, 1, "vxlan")]);
    const moved = on(`${IP}/24`, "eth0", 10);
    s.push({ type: "updated", id: moved.id, version: "3", resource: moved });
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("wait");
    await settle();
    const after = f.cache.csrFacts("node-1", [IP], false);
    expect(after.state === "ready" && after.facts.sharedAddresses.get(IP)).toContain("dummy");
    f.cache.close();
  });

  test("NodeIPConfig is read again after an address appeared, not after one went", async () => {
    const f = setup();
    const eth0b = on("10.0.0.6/24", "eth0", 2);
    const s = await watched(f, [on(`${IP}/24`, "eth0", 2), eth0b]);
    const reads = () => f.talos.calls.filter((c) => c.startsWith("get nodeipconfig")).length;
    expect(reads()).toBe(1);
    s.push({ type: "destroyed", id: eth0b.id, resource: eth0b });
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ready");
    f.talos.excludedOn.set(IP, ["10.0.0.100/32"]);
    const vip = on("10.0.0.100/32", "eth0", 2);
    s.push({ type: "created", id: vip.id, version: "3", resource: vip });
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("wait");
    await settle();
    const a = f.cache.csrFacts("node-1", [IP], false);
    expect(a.state === "ready" && a.facts.excludedSubnets).toEqual(["10.0.0.100/32"]);
    expect(reads()).toBe(2);
    f.cache.close();
  });

  test("after the address watch broke, nothing read before counts until Talos names the node again", async () => {
    const f = setup();
    const s = await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    const count = (what: string) => f.talos.calls.filter((c) => c.startsWith(what)).length;
    s.push({ type: "errored", error: "connection reset" });
    expect(f.cache.csrFacts("node-1", [IP], false)).toMatchObject({ state: "ask" });
    // Back, as another machine on the same IP.
    f.talos.nodenames.set(IP, "node-2");
    s.push({ type: "created", id: `eth0/${IP}/24`, version: "1", resource: on(`${IP}/24`, "eth0", 2) });
    s.push({ type: "bootstrapped" });
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("wait");
    await settle();
    await settle();
    expect(count("get nodename")).toBe(2);
    expect(count("list links")).toBe(2);
    expect(count("get nodeipconfig")).toBe(2);
    expect(f.cache.csrFacts("node-1", [IP], false)).toMatchObject({ state: "ask" });
    f.cache.close();
  });

  test("after the watch broke and came back on the same machine, the node is confirmed and read again at once: the next CSR costs nothing", async () => {
    const f = setup();
    const s = await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    s.push({ type: "errored", error: "connection reset" });
    s.push({ type: "bootstrapped" });
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("wait");
    await settle();
    await settle();
    expect(f.talos.calls.filter((c) => c.startsWith("get nodename")).length).toBe(2);
    const calls = f.talos.calls.length;
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ready");
    expect(f.talos.calls.length).toBe(calls);
    // Without a CSR asking: the resubscribed watch alone has Talos confirm the node again.
    s.push({ type: "errored", error: "connection reset" });
    s.push({ type: "bootstrapped" });
    await settle();
    await settle();
    expect(f.talos.calls.filter((c) => c.startsWith("get nodename")).length).toBe(3);
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ready");
    f.cache.close();
  });

  test("the node not watched, watched on other IPs, or its watch down: Talos is asked", async () => {
    const f = setup();
    expect(f.cache.csrFacts("node-1", [IP], false)).toMatchObject({ state: "ask" });
    await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    expect(f.cache.csrFacts("node-1", ["10.0.0.9"], false)).toMatchObject({ state: "ask" });
    expect(f.cache.csrFacts("node-1", [IP, "fd00::5"], false)).toMatchObject({ state: "ask" });
    f.cache.close();
  });

  test("a failed read sends that CSR to Talos and is made again for the next", async () => {
    const f = setup();
    f.talos.linksFail = new TalosError("unavailable", "Talos is down");
    await watched(f, [on(`${IP}/24`, "eth0", 2)]);
    expect(f.cache.csrFacts("node-1", [IP], false)).toMatchObject({ state: "ask" });
    f.talos.linksFail = undefined;
    await settle();
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ready");
    f.cache.close();
  });

  test("a node still starting waits; its watches' answer tells the change", async () => {
    const f = setup();
    f.cache.track("node-1", [IP]);
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("wait");
    f.changes.length = 0;
    const s = f.talos.stream(IP, "addresses");
    f.talos
      .stream(IP, "platformmetadata")
      .push({ type: "created", id: "platformmetadata", version: "1", resource: metadata({}) });
    s.push({ type: "bootstrapped" });
    await settle();
    await settle();
    expect(f.changes).toContain("node-1");
    expect(f.cache.csrFacts("node-1", [IP], false).state).toBe("ready");
    f.cache.close();
  });
});

describe("linksCover() and watchedCsrFacts()", () => {
  test("a link without status counts only until an address appears; external needs none", () => {
    const x = { links: new Map([["ghost0", null]]), linksAt: 4 };
    const ghost = on("192.0.2.1/32", "ghost0", 9);
    expect(linksCover([ghost], x, 4)).toBe(true);
    expect(linksCover([ghost], x, 5)).toBe(false);
    expect(linksCover([on("203.0.113.9/32", "external", 0)], { links: new Map(), linksAt: 0 }, 1)).toBe(true);
    expect(linksCover([ghost], { links: undefined, linksAt: 0 }, 0)).toBe(false);
  });

  test("a record confirmed in an earlier epoch, or on another IP than it watches, needs a confirmation", () => {
    const w = new NodeWatch("node-1", [IP], 0);
    w.addressesKnown = true;
    w.metadataKnown = true;
    w.metadata = metadata({});
    w.confirmedIP = IP;
    w.epoch = 3;
    w.confirmedEpoch = 2;
    const r = watchedCsrFacts(w, [IP], false);
    expect("need" in r && r.need.confirm).toBe(true);
    w.confirmedEpoch = 3;
    w.answeredIP = "10.0.0.9";
    const r2 = watchedCsrFacts(w, [IP], false);
    expect("need" in r2 && r2.need.confirm).toBe(true);
  });
});
