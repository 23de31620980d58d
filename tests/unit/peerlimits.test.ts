// The per-peer bounds of issue 40 (lib/peerlimits.ts): each one a positive number with a peer and a
// cited source, each one enforced somewhere in lib/ (a bound nobody checks fails here), the shared
// counter and Event text, and the README's table of them kept equal to the code.

import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Registry } from "../../lib/metrics.ts";
import {
  OVER_LIMIT_REASON,
  overLimitMessage,
  PEER_LIMITS,
  type PeerLimitName,
  peerLimit,
  peerRejections,
} from "../../lib/peerlimits.ts";
import { strip } from "../support/sourcecode.ts";

const ROOT = join(import.meta.dir, "..", "..");
const NAMES = Object.keys(PEER_LIMITS) as PeerLimitName[];

/** Who a source may cite: a standard, a project's own validation, the kernel, a cloud, this CCM. */
const AUTHORITY =
  /Kubernetes|Talos|Linux|kernel|RFC|kubelet|apimachinery|AWS|Azure|GCP|SMBIOS|IFNAMSIZ|dmidecode|cloud-node/;

/** lib/'s code with comments blanked (strings kept), by file, except the table itself. */
function libCode(): Map<string, string> {
  const out = new Map<string, string>();
  for (const f of readdirSync(join(ROOT, "lib"))) {
    if (!f.endsWith(".ts") || f === "peerlimits.ts" || f === "talos_pb.ts") continue;
    out.set(`lib/${f}`, strip(readFileSync(join(ROOT, "lib", f), "utf8")).code);
  }
  return out;
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * The places that enforce bound `name`: `PEER_LIMITS.name`, `PEER_LIMITS["name"]`, or the name as a
 * call's first argument (`peerLimit("name")`, `checkLength("name", …)`, `new XError("name", …)`).
 * A mention in a comment, or a comparison such as `err.limit === "name"`, does not count.
 */
function enforcers(code: Map<string, string>, name: string): string[] {
  const re = new RegExp(
    `PEER_LIMITS\\.${esc(name)}\\b|PEER_LIMITS\\[\\s*"${esc(name)}"\\s*\\]|[\\w$.]+\\(\\s*"${esc(name)}"`,
  );
  return [...code].filter(([, src]) => re.test(src)).map(([file]) => file);
}

describe("PEER_LIMITS", () => {
  test("there are bounds for each kind of peer", () => {
    const kinds = new Set(NAMES.map((n) => PEER_LIMITS[n].peer));
    expect([...kinds].sort()).toEqual(["csr", "node", "talos"]);
  });

  test.each(NAMES)("%s: a positive integer, a peer kind, what is counted and a source that cites", (name) => {
    const l = PEER_LIMITS[name];
    expect(Number.isSafeInteger(l.value) && l.value > 0).toBe(true);
    expect(["node", "talos", "csr"]).toContain(l.peer);
    expect(l.what.length).toBeGreaterThan(10);
    expect(name).toMatch(/^(?:node|talos|csr)_[a-z_]+$/);
    expect(name.startsWith(`${l.peer}_`)).toBe(true);
    // A source names where the figure comes from (or derives it from another bound) and gives figures.
    const citesAnother = NAMES.some((other) => other !== name && l.source.includes(other));
    expect({ name, cites: AUTHORITY.test(l.source) || citesAnother }).toEqual({ name, cites: true });
    if (!citesAnother) expect(l.source).toMatch(/\d/);
  });

  test("peerLimit() is the table's value", () => {
    for (const name of NAMES) expect(peerLimit(name)).toBe(PEER_LIMITS[name].value);
  });

  test.each(NAMES)("%s is enforced by code in lib/ (a bound nobody checks fails)", (name) => {
    expect({ name, enforcedIn: enforcers(libCode(), name).length > 0 }).toEqual({ name, enforcedIn: true });
  });

  test("the enforcement finder does not count comments or comparisons, and counts each call form", () => {
    const code = new Map([
      ["a.ts", strip(`// PEER_LIMITS.x_y\nif (err.limit === "x_y") f();`).code],
      ["b.ts", strip(`if (n > peerLimit("x_y")) reject();`).code],
      ["c.ts", strip(`checkLength( "x_y", s, "host");`).code],
      ["d.ts", strip(`const max = PEER_LIMITS.x_y.value;`).code],
    ]);
    expect(enforcers(code, "x_y")).toEqual(["b.ts", "c.ts", "d.ts"]);
    expect(enforcers(code, "x")).toEqual([]);
  });

  test("the rejection counter, its Event reason and message are used by enforcing code", () => {
    const code = [...libCode().values()].join("\n");
    expect(code).toContain("peerRejections(");
    expect(code).toMatch(/OVER_LIMIT_REASON|overLimitMessage\(/);
  });
});

describe("peerRejections() and overLimitMessage()", () => {
  test("one counter per registry, by peer and limit", () => {
    const reg = new Registry();
    peerRejections(reg).inc({ peer: "talos", limit: "talos_addresses" });
    peerRejections(reg).inc({ peer: "talos", limit: "talos_addresses" });
    expect(reg.expose()).toContain(
      'talosccm_peer_input_rejected_total{peer="talos",limit="talos_addresses"} 2',
    );
  });

  test("the Event names the bound, the count, the source and that only this peer is refused", () => {
    expect(OVER_LIMIT_REASON).toBe("PeerInputOverLimit");
    const m = overLimitMessage("talos_addresses", 1025);
    expect(m).toStartWith("Talos reported 1025 ");
    expect(m).toContain(`over the bound of ${PEER_LIMITS.talos_addresses.value}`);
    expect(m).toContain(PEER_LIMITS.talos_addresses.source);
    expect(m).toEndWith("the input is refused for this peer only");
    expect(overLimitMessage("node_labels", 2000)).toStartWith("The Node has 2000 ");
    expect(overLimitMessage("csr_sans", 300)).toStartWith("The CSR has 300 ");
  });
});

/** Markdown text: `<`, `>`, `*` and `|` escaped, so that a source reads in the table as in the code. */
const md = (s: string) => s.replace(/[<>*|]/g, (c) => `\\${c}`);

/** The README row of one bound, exactly as the table in "Security model: one peer, one budget" has it. */
function readmeRow(name: PeerLimitName): string {
  const l = PEER_LIMITS[name];
  return `| \`${name}\` | ${l.value.toLocaleString("en-US")} | ${l.peer} | ${md(l.what)} | ${md(l.source)} |`;
}

describe("README: Security model: one peer, one budget", () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const start = readme.indexOf("## Security model: one peer, one budget");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));

  test("the section exists, before the CSR security model", () => {
    expect(start).toBeGreaterThan(0);
    expect(start).toBeLessThan(readme.indexOf("## CSR security model"));
  });

  test("its table lists every bound of PEER_LIMITS, in order, with the code's value, peer, what and source", () => {
    const rows = section.split("\n").filter((l) => /^\| `[a-z_]+` \|/.test(l));
    expect(rows).toEqual(NAMES.map(readmeRow));
  });

  test("it names the metric and the Event reason", () => {
    expect(section).toContain("talosccm_peer_input_rejected_total");
    expect(section).toContain(OVER_LIMIT_REASON);
  });
});
