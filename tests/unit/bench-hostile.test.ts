// The blast-radius bench's pure parts (`npm run bench -- --hostile ...`, issue 40): the command line,
// the percentile, ratio and median maths, the criteria's verdicts, the JSON keys and the table; and
// what the hostile peers send (addresses, the csr-max machine, the big Node's labels, the maximal CSR).
// The figures themselves are measured by `npm run bench`, never asserted here.

import { describe, expect, test } from "bun:test";
import { PEER_LIMITS } from "../../lib/peerlimits.ts";
import { MAX_REQUEST_BYTES, parseCertificateRequest } from "../../lib/x509pkcs10.ts";
import { parseBenchArgs } from "../bench.ts";
import { FakeApid } from "../support/apid.ts";
import {
  compare,
  formatHostileTable,
  formatSummary,
  HOSTILE_FIGURE_KEYS,
  HOSTILE_KINDS,
  type HostileFigures,
  hostileJson,
  hostileMultiJson,
  latencyFigures,
  medianHostile,
  parseHostileKinds,
  percentile,
  ratio,
} from "../support/bench-hostile.ts";
import {
  BIG_NODE_LABELS,
  benchIPv4,
  bigNodeLabels,
  csrMaxStatusAddresses,
  eth0Address,
  FLAP_IP,
  floodAddress,
  hostileSpec,
  maxFittingCsr,
} from "../support/bench-hostile-peer.ts";
import { auditEpochMs, ccmWriteDelays, sampleIndexes } from "../support/bench-latency.ts";
import { generateNodes } from "../support/fixtures.ts";

const run = (over: Partial<HostileFigures> = {}): HostileFigures => ({
  kind: "none",
  nodes: 1000,
  init_s: 10,
  csr_s: 5,
  latency_p50_ms: 400,
  latency_p99_ms: 1000,
  latency_samples: 100,
  latency_missing: 0,
  ccm_p50_ms: 3,
  ccm_p99_ms: 10,
  rss_mb: 80,
  cpu_s: 6,
  api_cpu_s: 20,
  hostile_actions: 0,
  hostile_node_writes: 2,
  ...over,
});

describe("parseHostileKinds()", () => {
  test("kinds in the order given; all is every kind", () => {
    expect(parseHostileKinds("none,flap")).toEqual(["none", "flap"]);
    expect(parseHostileKinds("big-node, none")).toEqual(["big-node", "none"]);
    expect(parseHostileKinds("all")).toEqual([...HOSTILE_KINDS]);
  });

  test.each([
    ["flood", /unknown kind "flood"/],
    ["none,none", /"none" is repeated/],
    ["", /unknown kind ""/],
    ["none,", /unknown kind ""/],
  ])("%j is refused", (v, message) => {
    expect(() => parseHostileKinds(v)).toThrow(message);
  });
});

describe("parseBenchArgs() with --hostile", () => {
  test("kinds, inline or as the next argument; latency defaults and flags", () => {
    expect(
      parseBenchArgs(["--nodes", "1000", "--hostile", "none,address-flood", "--repeat", "3"]),
    ).toMatchObject({
      nodes: 1000,
      sizes: [1000],
      repeat: 3,
      hostile: ["none", "address-flood"],
      latencyChanges: 300,
      latencySeconds: 30,
    });
    expect(
      parseBenchArgs(["--hostile=csr-max", "--latency-changes=50", "--latency-seconds", "10"]),
    ).toMatchObject({ hostile: ["csr-max"], latencyChanges: 50, latencySeconds: 10, nodes: 100 });
    expect(parseBenchArgs([]).hostile).toBeUndefined();
  });

  test.each([
    [["--hostile"], /value is required/],
    [["--hostile=evil"], /unknown kind/],
    [["--hostile=none", "--nodes=100,1000"], /one --nodes N/],
    [["--hostile=none", "--slope"], /one --nodes N/],
    [["--hostile=none", "--talos=apid"], /fake apid plays the hostile machine/],
    [["--hostile=none", "--nodes=1"], /fewer than 2 nodes/],
    [["--hostile=none", "--latency-changes=0"], /positive integer/],
  ])("%j is refused", (argv, message) => {
    expect(() => parseBenchArgs(argv)).toThrow(message);
  });
});

describe("percentile()", () => {
  test("nearest rank", () => {
    expect(percentile([5, 1, 3, 2, 4], 50)).toBe(3);
    expect(percentile([1, 2, 3, 4], 50)).toBe(2);
    expect(percentile([7], 99)).toBe(7);
    const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(hundred, 99)).toBe(99);
    expect(percentile(hundred, 100)).toBe(100);
    expect(percentile(hundred, 1)).toBe(1);
  });

  test("+Infinity sorts last: one missing sample in 100 leaves p99 finite, two do not", () => {
    const ones = Array(98).fill(1);
    expect(percentile([...ones, 2, Number.POSITIVE_INFINITY], 99)).toBe(2);
    expect(percentile([...ones, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY], 99)).toBe(
      Number.POSITIVE_INFINITY,
    );
  });

  test("NaN for no values; p outside (0, 100] is refused", () => {
    expect(percentile([], 50)).toBeNaN();
    expect(() => percentile([1], 0)).toThrow(/0 < p <= 100/);
    expect(() => percentile([1], 101)).toThrow(/0 < p <= 100/);
  });
});

describe("latencyFigures()", () => {
  test("a change never seen counts as slower than any", () => {
    expect(latencyFigures([10, 20, null], [4, 5, null])).toEqual({
      latency_p50_ms: 20,
      latency_p99_ms: Number.POSITIVE_INFINITY,
      latency_samples: 3,
      latency_missing: 1,
      ccm_p50_ms: 5,
      ccm_p99_ms: Number.POSITIVE_INFINITY,
    });
  });

  test("the CCM's part has its own percentiles", () => {
    const f = latencyFigures([10, 20, 30, 40], [1, 2, 3, 9.5]);
    expect(f).toMatchObject({ latency_p99_ms: 40, ccm_p50_ms: 2, ccm_p99_ms: 9.5 });
  });

  test("no samples: null figures", () => {
    expect(latencyFigures([], [])).toEqual({
      latency_p50_ms: null,
      latency_p99_ms: null,
      latency_samples: 0,
      latency_missing: 0,
      ccm_p50_ms: null,
      ccm_p99_ms: null,
    });
  });
});

describe("medianHostile()", () => {
  test("each figure's median over the runs that measured it", () => {
    const m = medianHostile([
      run({ init_s: 12, rss_mb: 90, csr_s: null }),
      run({ init_s: 10, rss_mb: 70, csr_s: null }),
      run({ init_s: 11, rss_mb: 80, csr_s: 4 }),
    ]);
    expect(m).toMatchObject({ kind: "none", nodes: 1000, init_s: 11, rss_mb: 80, csr_s: 4 });
  });

  test("refuses no runs, and runs of different kinds or sizes", () => {
    expect(() => medianHostile([])).toThrow(/no runs/);
    expect(() => medianHostile([run(), run({ kind: "flap" })])).toThrow(/different kinds or sizes/);
    expect(() => medianHostile([run(), run({ nodes: 50 })])).toThrow(/different kinds or sizes/);
  });
});

describe("ratio() and compare()", () => {
  test("ratio: a / b, null when either is missing or b is 0 or infinite", () => {
    expect(ratio(12, 10)).toBeCloseTo(1.2);
    expect(ratio(null, 10)).toBeNull();
    expect(ratio(1, null)).toBeNull();
    expect(ratio(1, 0)).toBeNull();
    expect(ratio(Number.POSITIVE_INFINITY, 10)).toBe(Number.POSITIVE_INFINITY);
    expect(ratio(10, Number.POSITIVE_INFINITY)).toBeNull();
  });

  test("the criteria hold at their bounds exactly (1.2x, +20 MiB) and fail above", () => {
    const clean = run();
    const at = compare(run({ kind: "flap", init_s: 12, latency_p99_ms: 1200, rss_mb: 100 }), clean);
    expect(at).toMatchObject({ init_pass: true, latency_p99_pass: true, rss_pass: true, pass: true });
    expect(at.rss_delta_mb).toBe(20);
    const over = compare(run({ kind: "flap", init_s: 12.1, latency_p99_ms: 1201, rss_mb: 100.1 }), clean);
    expect(over).toMatchObject({ init_pass: false, latency_p99_pass: false, rss_pass: false, pass: false });
  });

  test("the CCM's part of the p99 is compared apart and does not decide the kind", () => {
    const clean = run();
    const apiSlow = compare(run({ kind: "big-node", latency_p99_ms: 2000, ccm_p99_ms: 11 }), clean);
    expect(apiSlow).toMatchObject({ latency_p99_pass: false, ccm_p99_pass: true, pass: false });
    expect(apiSlow.ccm_p99_ratio).toBeCloseTo(1.1);
    const ccmSlow = compare(run({ kind: "csr-max", ccm_p99_ms: 12.1 }), clean);
    expect(ccmSlow).toMatchObject({ latency_p99_pass: true, ccm_p99_pass: false, pass: true });
    expect(compare(run({ kind: "flap", ccm_p99_ms: null }), clean).ccm_p99_pass).toBeNull();
  });

  test("one criterion failing fails the kind; a missing figure is N/A and not a pass", () => {
    const clean = run();
    expect(compare(run({ kind: "csr-max", rss_mb: 130 }), clean)).toMatchObject({
      init_pass: true,
      latency_p99_pass: true,
      rss_pass: false,
      pass: false,
    });
    expect(compare(run({ kind: "csr-max", init_s: null }), clean)).toMatchObject({
      init_ratio: null,
      init_pass: null,
      pass: false,
    });
    expect(
      compare(run({ kind: "flap", latency_p99_ms: Number.POSITIVE_INFINITY }), clean).latency_p99_pass,
    ).toBe(false);
  });

  test("csr and p50 ratios are reported without a criterion", () => {
    const c = compare(run({ kind: "big-node", csr_s: 10, latency_p50_ms: 200 }), run());
    expect(c.csr_ratio).toBe(2);
    expect(c.latency_p50_ratio).toBe(0.5);
    expect(c.pass).toBe(true);
  });
});

describe("JSON", () => {
  test("a run's keys in order, rounded; samples never seen are null", () => {
    const j = hostileJson(run({ init_s: 10.1234, latency_p99_ms: Number.POSITIVE_INFINITY, rss_mb: 80.06 }));
    expect(Object.keys(j)).toEqual([...HOSTILE_FIGURE_KEYS]);
    expect(j).toMatchObject({ kind: "none", init_s: 10.12, latency_p99_ms: null, rss_mb: 80.1 });
  });

  test("runs round by round, medians per kind, each kind against none", () => {
    const runs = [
      [run({ init_s: 10 }), run({ init_s: 11 }), run({ init_s: 12 })],
      [
        run({ kind: "flap", init_s: 13 }),
        run({ kind: "flap", init_s: 11 }),
        run({ kind: "flap", init_s: 12 }),
      ],
    ];
    const j = hostileMultiJson(runs);
    expect(j).toMatchObject({ nodes: 1000, repeat: 3, kinds: ["none", "flap"] });
    expect(j.criteria).toEqual({ ratio_max: 1.2, rss_delta_max_mb: 20 });
    expect(j.runs.map((r) => `${r.kind}:${r.init_s}`)).toEqual([
      "none:10",
      "flap:13",
      "none:11",
      "flap:11",
      "none:12",
      "flap:12",
    ]);
    expect(j.medians.map((m) => m.init_s)).toEqual([11, 12]);
    expect(j.vs_none).toEqual([
      {
        kind: "flap",
        init_ratio: 1.091,
        csr_ratio: 1,
        latency_p50_ratio: 1,
        latency_p99_ratio: 1,
        ccm_p99_ratio: 1,
        rss_delta_mb: 0,
        init_pass: true,
        latency_p99_pass: true,
        rss_pass: true,
        ccm_p99_pass: true,
        pass: true,
      },
    ]);
  });

  test("without none, no comparisons", () => {
    expect(hostileMultiJson([[run({ kind: "flap" })]]).vs_none).toEqual([]);
  });
});

describe("formatHostileTable() and formatSummary()", () => {
  const clean = [run(), run({ rss_mb: 82 })];
  const flap = [
    run({ kind: "flap", init_s: 14, latency_p99_ms: Number.POSITIVE_INFINITY, latency_missing: 3 }),
    run({ kind: "flap", init_s: 15, latency_p99_ms: Number.POSITIVE_INFINITY, latency_missing: 2 }),
  ];

  test("medians, none's, the ratio, the criterion and every run's value", () => {
    const t = formatHostileTable(flap, clean, "bench N=1000");
    const lines = t.split("\n");
    expect(lines[0]).toBe("bench N=1000; hostile peer: flap (FAIL)");
    expect(lines[1]).toMatch(/^figure\s+median\s+none\s+vs none\s+criterion\s+result\s+runs$/);
    const row = (k: string) => lines.find((l) => l.startsWith(`${k} `)) ?? "";
    expect(row("init_s")).toMatch(/14\.50\s+10\.00\s+1\.45x\s+<= 1\.2x\s+FAIL\s+14\.00, 15\.00$/);
    expect(row("latency_p99_ms")).toMatch(/never\s+1000\s+inf\s+<= 1\.2x\s+FAIL\s+never, never$/);
    expect(row("rss_mb")).toMatch(/80\.0\s+81\.0\s+-1\.0 MiB\s+<= \+20 MiB\s+PASS/);
    expect(row("ccm_p99_ms")).toMatch(/10\.0\s+10\.0\s+1\.00x\s+\(<= 1\.2x\)\s+PASS/);
    expect(row("api_cpu_s")).toMatch(/20\.00\s+20\.00\s+1\.00x\s+-\s+-/);
    expect(row("hostile_actions")).toMatch(/\s-\s+-\s+-\s+0, 0$/);
  });

  test("the clean run's own table has no comparison", () => {
    const t = formatHostileTable(clean, clean, "h");
    expect(t.split("\n")[0]).toBe("h; hostile peer: none");
    expect(t).not.toMatch(/PASS|FAIL/);
  });

  test("one summary line per kind against none", () => {
    expect(formatSummary([clean, flap])).toEqual([
      "flap: init 1.45x (FAIL), p99 latency inf (FAIL), peak RSS -1.0 MiB (PASS): FAIL; " +
        "the CCM's part of the p99 1.00x (PASS)",
    ]);
  });
});

describe("the hostile peers' input", () => {
  test("benchIPv4: 198.18.0.0/15 by index", () => {
    expect(benchIPv4(1)).toBe("198.18.0.1");
    expect(benchIPv4(0x1ff07)).toBe(FLAP_IP);
    expect(() => benchIPv4(2 ** 17)).toThrow(/out of range/);
  });

  test("flood addresses: distinct, private, on eth0, ids as Talos names them", () => {
    expect(floodAddress(1)).toEqual({ ...eth0Address("172.16.0.1"), flags: 0 });
    expect(floodAddress(0x10203).address).toBe("172.17.2.3/32");
    expect(eth0Address("198.18.0.1").id).toBe("eth0/198.18.0.1/32");
    const ids = new Set(Array.from({ length: 70_000 }, (_, i) => floodAddress(i).id));
    expect(ids.size).toBe(70_000);
  });

  test("csr-max: the machine reports the most addresses and subnets the CCM accepts; other kinds unchanged", () => {
    const [spec] = generateNodes(1);
    if (!spec) throw new Error("no spec");
    const s = hostileSpec("csr-max", spec);
    expect(s.addresses.length).toBe(PEER_LIMITS.talos_addresses.value);
    expect(new Set(s.addresses.map((a) => a.id)).size).toBe(s.addresses.length);
    expect(s.nodeIPConfig?.excludeSubnets?.length).toBe(PEER_LIMITS.talos_list_entries.value);
    expect(s.nodeIPConfig?.validSubnets?.length).toBe(PEER_LIMITS.talos_list_entries.value);
    expect(s.addresses.slice(0, spec.addresses.length)).toEqual(spec.addresses);
    for (const kind of ["none", "address-flood", "flap", "big-node"] as const)
      expect(hostileSpec(kind, spec)).toBe(spec);
  });

  test("the big Node's labels: 5,000 valid label keys and values, ~1 MiB with managed fields", () => {
    const labels = bigNodeLabels(BIG_NODE_LABELS);
    const keys = Object.keys(labels);
    expect(keys.length).toBe(BIG_NODE_LABELS);
    const name = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
    for (const k of keys) {
      const [prefix, n] = k.split("/") as [string, string];
      expect(prefix.length).toBeLessThanOrEqual(253);
      expect(n).toMatch(name);
      expect(labels[k]).toMatch(name);
    }
    // The labels, and as many bytes again for their managed fields ("f:<key>":{}), under etcd's 1.5 MiB.
    const bytes = JSON.stringify(labels).length + keys.reduce((s, k) => s + k.length + 8, 0);
    expect(bytes).toBeGreaterThan(0.9 * 1024 * 1024);
    expect(bytes).toBeLessThan(1.4 * 1024 * 1024);
  });

  test("the maximal CSR: as many IP SANs as fit in the largest request read, far over the SAN bound", async () => {
    const own = Array.from({ length: 1000 }, (_, i) => `10.200.${i >> 8}.${i & 255}`);
    const { csr, sans } = await maxFittingCsr("node-00009", own);
    expect(csr.length).toBeLessThanOrEqual(MAX_REQUEST_BYTES);
    expect(csr.length).toBeGreaterThan(MAX_REQUEST_BYTES - 64);
    const parsed = parseCertificateRequest(csr);
    expect(parsed.dnsNames).toEqual(["node-00009"]);
    expect(parsed.ipAddresses.length + 1).toBe(sans);
    expect(parsed.ipAddresses.slice(0, 1000)).toEqual(own);
    expect(new Set(parsed.ipAddresses).size).toBe(parsed.ipAddresses.length);
    expect(sans).toBeGreaterThan(4 * PEER_LIMITS.csr_sans.value);
  });

  test("csr-max's status addresses: its machine's IPs as InternalIPs and its Hostname, at the Node bound", () => {
    const ips = Array.from({ length: 2000 }, (_, i) => `10.200.${i >> 8}.${i & 255}`);
    const list = csrMaxStatusAddresses("node-00009", ips);
    expect(list.length).toBe(PEER_LIMITS.node_addresses.value);
    expect(list[0]).toEqual({ type: "InternalIP", address: "10.200.0.0" });
    expect(list.at(-1)).toEqual({ type: "Hostname", address: "node-00009" });
    expect(csrMaxStatusAddresses("n", ["10.0.0.1"])).toEqual([
      { type: "InternalIP", address: "10.0.0.1" },
      { type: "Hostname", address: "n" },
    ]);
  });

  test("the fake apid's flood: addresses appended, the newest keepLast of them kept, the node's own never dropped", async () => {
    const [spec] = generateNodes(1);
    if (!spec) throw new Error("no spec");
    const apid = await FakeApid.start({ nodes: [spec] });
    try {
      const ip = spec.nodeIPs[0] as string;
      const own = spec.addresses.map((a) => a.id);
      apid.addAddresses(ip, [floodAddress(0), floodAddress(1), floodAddress(2)], 4);
      expect(apid.node(ip)?.addresses.map((a) => a.id)).toEqual([
        ...own,
        ...[0, 1, 2].map((i) => floodAddress(i).id),
      ]);
      apid.addAddresses(ip, [floodAddress(3), floodAddress(4), floodAddress(5)], 4);
      expect(apid.node(ip)?.addresses.map((a) => a.id)).toEqual([
        ...own,
        ...[2, 3, 4, 5].map((i) => floodAddress(i).id),
      ]);
    } finally {
      await apid.stop();
    }
  });

  test("sampleIndexes: changes spread evenly over the honest machines", () => {
    expect(sampleIndexes(4, 100)).toEqual([0, 25, 50, 75]);
    expect(sampleIndexes(100, 999)[99]).toBe(989);
    expect(sampleIndexes(5, 2)).toEqual([0, 0, 0, 1, 1]);
  });

  test("auditEpochMs: the API server's timestamps to ms, sub-ms kept; other forms refused", () => {
    expect(auditEpochMs("1970-01-01T00:00:01.000250Z")).toBeCloseTo(1000.25, 6);
    expect(auditEpochMs("2026-11-28T21:58:01Z")).toBe(Date.UTC(2026, 10, 28, 21, 58, 1));
    expect(auditEpochMs("2026-11-28T21:58:01.5Z")).toBe(Date.UTC(2026, 10, 28, 21, 58, 1, 500));
    expect(() => auditEpochMs("2026-11-28 21:58:01Z")).toThrow(/Cannot parse audit timestamp/);
    expect(() => auditEpochMs("2026-11-28T21:58:01.123+01:00")).toThrow(/RFC 3339 UTC/);
  });

  test("ccmWriteDelays: the first write of the change's Node at or after it, 1 ms of clock slack", () => {
    const writes = [
      { node: "a", atEpochMs: 120 },
      { node: "b", atEpochMs: 99.5 },
      { node: "a", atEpochMs: 50 },
      { node: "a", atEpochMs: 104.25 },
    ];
    const changes = [
      { node: "a", atEpochMs: 100 },
      { node: "b", atEpochMs: 100 },
      { node: "c", atEpochMs: 100 },
      undefined,
      { node: "a", atEpochMs: 110 },
    ];
    expect(ccmWriteDelays(changes, writes)).toEqual([4.25, 0, null, null, 10]);
    expect(ccmWriteDelays([{ node: "b", atEpochMs: 101 }], writes)).toEqual([null]);
  });
});
