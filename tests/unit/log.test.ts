import { afterEach, describe, expect, test } from "bun:test";
import { configureLogging, logger } from "../../lib/log.ts";

const lines: string[] = [];
afterEach(() => {
  lines.length = 0;
  configureLogging({ format: "text", verbosity: 0, write: () => {} });
});

function capture(format: "text" | "json", verbosity = 0) {
  configureLogging({ format, verbosity, write: (l) => lines.push(l) });
}

const PEM = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";

describe("logger()", () => {
  test("text lines follow klog's header and quote structured values", () => {
    capture("text");
    logger("cloud-node").info("Initialized node", { node: "w1", addresses: 2 });
    expect(lines[0]).toMatch(
      /^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ cloud-node\] "Initialized node" node="w1" addresses=2\n$/,
    );
  });

  test("json lines carry ts, caller, msg, v and the fields", () => {
    capture("json");
    logger("csr").info("Approved", { csr: "csr-1" });
    const obj = JSON.parse(lines[0] as string);
    expect(obj).toMatchObject({ caller: "csr", msg: "Approved", v: 0, csr: "csr-1" });
    expect(typeof obj.ts).toBe("number");
  });

  test("secrets nested in logged objects are redacted in both formats", () => {
    for (const format of ["text", "json"] as const) {
      capture(format);
      logger("x").error("failed", new Error(`bad key ${PEM}`), {
        request: { headers: { authorization: "Bearer s3cr3t" }, body: [PEM] },
      });
    }
    const all = lines.join("");
    expect(all).not.toContain("s3cr3t");
    expect(all).not.toContain("MC4CAQAw");
    expect(all).toContain("[redacted PEM]");
  });

  test("a Date logs as its ISO time, a cycle as [circular], and nesting is cut at depth 8", () => {
    capture("json");
    const loop: Record<string, unknown> = { name: "a" };
    loop.self = loop;
    loop.pair = [loop, loop];
    let deep: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < 12; i++) deep = { deep };
    logger("x").info("values", { at: new Date(Date.UTC(2026, 10, 21)), loop, deep });
    const obj = JSON.parse(lines[0] as string);
    expect(obj.at).toBe("2026-11-21T00:00:00.000Z");
    expect(obj.loop).toEqual({ name: "a", self: "[circular]", pair: ["[circular]", "[circular]"] });
    expect(JSON.stringify(obj.deep)).toContain("[nested too deep]");
    expect((lines[0] as string).length).toBeLessThan(1000);
  });

  test("PEM blocks vanish whole and bearer tokens lose their token, in messages and values", () => {
    capture("text");
    logger("x").info(`loaded ${PEM}`, { header: "Authorization: Bearer abc.def.ghi", note: "plain text" });
    expect(lines[0]).toContain('"[redacted PEM]"');
    expect(lines[0]).toContain('header="Authorization: Bearer [redacted]"');
    expect(lines[0]).toContain('note="plain text"');
  });

  test("v(n) prints only at verbosity n or higher", () => {
    capture("text", 1);
    const log = logger("q");
    log.v(2).info("hidden");
    log.v(1).info("shown");
    expect(lines.length).toBe(1);
    expect(lines[0]).toContain('"shown"');
  });
});
