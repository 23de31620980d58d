// lib/validatemetadata.ts parseMetadata: talosctl's PlatformMetadata and SystemInformation YAML (one or
// several documents, concatenated, bare specs) to a sample node, its warnings and its errors.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { stringify } from "yaml";
import type { ConfigIssue } from "../../lib/configissue.ts";
import { MetadataError, parseMetadata, type SampleNode } from "../../lib/validatemetadata.ts";
import { platformMetadata } from "../support/fixtures.ts";
import { emptySystem, PM_TYPE, SI_TYPE, talosctl } from "../support/talosctlyaml.ts";

/** Parses `text`, expecting a MetadataError, and returns it. */
function metadataFails(text: string): MetadataError {
  try {
    parseMetadata(text);
  } catch (err) {
    if (err instanceof MetadataError) return err;
    throw err;
  }
  throw new Error("expected a MetadataError");
}

const brief = (issues: readonly ConfigIssue[]) => issues.map((i) => [i.path, i.line]);

const PM_SPEC = { platform: "metal", hostname: "web-1.example.com", instanceId: "i-1" };
const SI_SPEC = { manufacturer: "ASUS", productName: "ESC4000A-E10", serialnumber: "S1", uuid: "u-1" };

describe("parseMetadata() input forms", () => {
  const pm = platformMetadata({ platform: "metal", hostname: "web-1.example.com", instanceId: "i-1" });
  const si = emptySystem({
    manufacturer: "ASUS",
    productName: "ESC4000A-E10",
    serialNumber: "S1",
    uuid: "u-1",
  });
  test.each([
    [
      "talosctl documents separated by ---",
      `${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${talosctl(SI_TYPE, "10.0.0.5", SI_SPEC)}`,
      { node: "10.0.0.5", platformMetadata: pm, systemInformation: si },
    ],
    [
      "two talosctl outputs concatenated without ---",
      talosctl(SI_TYPE, "10.0.0.5", SI_SPEC) + talosctl(PM_TYPE, "10.0.0.5", PM_SPEC),
      { node: "10.0.0.5", platformMetadata: pm, systemInformation: si },
    ],
    [
      "talosctl --watch output (with an event key)",
      talosctl(PM_TYPE, "10.0.0.5", PM_SPEC).replace("node: 10.0.0.5\n", "node: 10.0.0.5\nevent: created\n"),
      { node: "10.0.0.5", platformMetadata: pm },
    ],
    ["a bare PlatformMetadata spec", stringify(PM_SPEC), { platformMetadata: pm }],
    [
      "bare specs, SystemInformation first",
      `${stringify(SI_SPEC)}---\n${stringify(PM_SPEC)}`,
      { platformMetadata: pm, systemInformation: si },
    ],
    [
      "a resource without metadata.type, told by its spec keys",
      `node: 10.0.0.5\nspec:\n    platform: metal\n    hostname: web-1.example.com\n    instanceId: i-1\n`,
      { node: "10.0.0.5", platformMetadata: pm },
    ],
    ["talosctl's empty node field", talosctl(PM_TYPE, "", PM_SPEC), { platformMetadata: pm }],
    [
      "a leading comment and a trailing empty document",
      `# from talosctl\n${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n`,
      { node: "10.0.0.5", platformMetadata: pm },
    ],
  ])("parseMetadata() reads %s", (_name, text, node) => {
    expect(parseMetadata(text)).toEqual({ node: node as SampleNode, warnings: [] });
  });

  test("parseMetadata() keeps scalars as written, as yaml.v3 hands them to Go strings", () => {
    const { node } = parseMetadata(
      "platform: metal\ninstanceId: 0123\ninstanceType: 1.10\nregion: ~\nspot: True\ntags:\n  rack: 07\n  n: null\n",
    );
    expect(node.platformMetadata).toEqual(
      platformMetadata({
        platform: "metal",
        instanceId: "0123",
        instanceType: "1.10",
        spot: true,
        tags: { rack: "07", n: "" },
      }),
    );
  });

  test("parseMetadata() reads every PlatformMetadata and SystemInformation key by Talos' yaml tags", () => {
    const { node } = parseMetadata(
      [
        "platform: aws",
        "hostname: h",
        "region: r",
        "zone: z",
        "instanceType: t",
        "instanceId: i",
        "providerId: aws:///z/i",
        "spot: false",
        "internalDNS: in.example",
        "externalDNS: ex.example",
        "tags: {a: b}",
        "---",
        "manufacturer: m",
        "productName: p",
        "version: v",
        "serialnumber: s",
        "uuid: u",
        "wakeUpType: w",
        "skuNumber: k",
        "biosVersion: b",
        "",
      ].join("\n"),
    );
    expect(node).toEqual({
      platformMetadata: {
        platform: "aws",
        hostname: "h",
        region: "r",
        zone: "z",
        instanceType: "t",
        instanceId: "i",
        providerId: "aws:///z/i",
        spot: false,
        internalDNS: "in.example",
        externalDNS: "ex.example",
        tags: { a: "b" },
      },
      systemInformation: {
        manufacturer: "m",
        productName: "p",
        version: "v",
        serialNumber: "s",
        uuid: "u",
        wakeUpType: "w",
        skuNumber: "k",
      },
    });
  });
});

describe("parseMetadata() warnings", () => {
  test("parseMetadata() warns about unknown keys with their line, hinting at the spelling", () => {
    const text = `${talosctl(PM_TYPE, "10.0.0.5", { ...PM_SPEC, instanceID: "x", colour: "red" })}extra: 1\n---\nserialNumber: s\nmanufacturer: m\n`;
    const { node, warnings } = parseMetadata(text);
    expect(node.platformMetadata.instanceId).toBe("i-1");
    expect(node.systemInformation).toEqual(emptySystem({ manufacturer: "m" }));
    expect(warnings).toEqual([
      {
        path: "spec.instanceID",
        line: 15,
        message: 'unknown key "instanceID": ignored; keys are case-sensitive, did you mean "instanceId"?',
      },
      {
        path: "spec.colour",
        line: 16,
        message: 'unknown key "colour": ignored (closest known key: "zone")',
      },
      { path: "extra", line: 17, message: 'unknown key "extra": ignored (closest known key: "event")' },
      {
        path: "serialNumber",
        line: 19,
        message: 'unknown key "serialNumber": ignored; keys are case-sensitive, did you mean "serialnumber"?',
      },
    ]);
  });

  test("parseMetadata() ignores, with a warning, resources of other types", () => {
    const other =
      "node: 10.0.0.5\nmetadata:\n    type: AddressStatuses.net.talos.dev\nspec:\n    address: 10.0.0.5/24\n";
    const { node, warnings } = parseMetadata(`${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${other}`);
    expect(node.platformMetadata.hostname).toBe("web-1.example.com");
    expect(brief(warnings)).toEqual([["metadata.type", 18]]);
    expect(warnings[0]?.message).toContain('"AddressStatuses.net.talos.dev" ignored');
  });

  test("parseMetadata() warns about unknown resource metadata keys", () => {
    const text = talosctl(PM_TYPE, "10.0.0.5", PM_SPEC).replace(
      "    phase: running\n",
      "    stage: running\n",
    );
    expect(brief(parseMetadata(text).warnings)).toEqual([["metadata.stage", 8]]);
  });
});

describe("parseMetadata() errors", () => {
  test.each([
    ["an empty file", "", [["", undefined]], "no PlatformMetadata found"],
    ["SystemInformation alone", stringify(SI_SPEC), [["", undefined]], "no PlatformMetadata found"],
    ["a YAML syntax error", "platform: metal\nhostname: [a\n", [["", 3]], ""],
    ["a list instead of a mapping", "- platform: metal\n", [["", 1]], "expected a talosctl resource"],
    ["a mapping with no known key", "colour: red\n", [["", 1]], "neither a talosctl resource"],
    [
      "a bare spec mixing both kinds",
      "platform: metal\nmanufacturer: m\n",
      [["", 1]],
      "keys of both PlatformMetadata and SystemInformation",
    ],
    ["a mapping as hostname", "platform: metal\nhostname: {a: b}\n", [["hostname", 2]], "expected a string"],
    ["a list as tags", "platform: metal\ntags: [a]\n", [["tags", 2]], "expected a mapping, got a list"],
    ["spot that is not a boolean", "platform: metal\nspot: maybe\n", [["spot", 2]], "expected a boolean"],
    [
      "a resource whose spec is a list",
      "node: a\nspec: [1]\n",
      [["spec", 2]],
      "expected a mapping, got a list",
    ],
    [
      "a resource whose spec is a word",
      "node: a\nspec: none\n",
      [["spec", 2]],
      'expected a mapping, got "none"',
    ],
    ["an alias", "platform: &p metal\nregion: *p\n", [["", 1]], "aliases are not supported"],
  ])("parseMetadata() refuses %s", (_name, text, where, message) => {
    const err = metadataFails(text);
    expect(brief(err.issues)).toEqual(where);
    expect(err.issues[0]?.message).toContain(message);
    expect(err.message).toStartWith("Cannot read node metadata: 1 problem:\n");
  });

  test("parseMetadata() refuses two nodes' PlatformMetadata, naming them", () => {
    const err = metadataFails(
      `${talosctl(PM_TYPE, "10.0.0.5", PM_SPEC)}---\n${talosctl(PM_TYPE, "10.0.0.6", PM_SPEC)}`,
    );
    expect(err.issues).toEqual([
      {
        path: "",
        line: 16,
        message: "2 PlatformMetadata documents (nodes 10.0.0.5, 10.0.0.6): give one node's metadata",
      },
    ]);
  });

  test("parseMetadata() refuses SystemInformation of another node", () => {
    const err = metadataFails(
      talosctl(PM_TYPE, "10.0.0.5", PM_SPEC) + talosctl(SI_TYPE, "10.0.0.6", SI_SPEC),
    );
    expect(err.issues).toEqual([
      {
        path: "",
        line: 15,
        message: "SystemInformation is from node 10.0.0.6, PlatformMetadata from node 10.0.0.5",
      },
    ]);
  });

  test("parseMetadata() reports every problem with the warnings found", () => {
    const err = metadataFails("platform: metal\nspot: maybe\nzone: [z]\ncolour: red\n");
    expect(brief(err.issues)).toEqual([
      ["spot", 2],
      ["zone", 3],
    ]);
    expect(brief(err.warnings)).toEqual([["colour", 4]]);
  });
});

describe("parseMetadata() property", () => {
  const text = fc.stringMatching(/^[a-zA-Z0-9 ._:/-]{0,20}$/);
  test("parseMetadata() reads back any PlatformMetadata that talosctl prints", () => {
    fc.assert(
      fc.property(
        fc.record({
          platform: text,
          hostname: text,
          region: text,
          zone: text,
          instanceType: text,
          instanceId: text,
          providerId: text,
          spot: fc.boolean(),
          internalDNS: text,
          externalDNS: text,
          tags: fc.dictionary(fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/), text, { maxKeys: 3 }),
        }),
        (pm) => {
          const printed = talosctl(PM_TYPE, "10.0.0.5", pm);
          expect(parseMetadata(printed).node).toEqual({ node: "10.0.0.5", platformMetadata: pm });
        },
      ),
      { numRuns: 200 },
    );
  });
});
