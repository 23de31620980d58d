// The per-machine bounds on Talos answers (lib/talosbounds.ts), as the decoders of lib/taloswire.ts
// apply them: each bound accepts an answer at the bound and refuses one over it with a
// TalosLimitError naming it (never truncating), and PlatformMetadata tags come out as a
// null-prototype object whose built-in names are data.

import { describe, expect, test } from "bun:test";
import { OVER_LIMIT_REASON, PEER_LIMITS, type PeerLimitName } from "../../lib/peerlimits.ts";
import { GetResponse, LinkStatusSpec, VersionResponse } from "../../lib/talos_pb.ts";
import { boundTags, checkAddressCount, TalosLimitError } from "../../lib/talosbounds.ts";
import {
  decodeAddressStatus,
  decodeControllerManagerConfig,
  decodeGetResponse,
  decodeHostnameStatus,
  decodeLinkStatus,
  decodeNodeIPConfig,
  decodeNodename,
  decodePlatformMetadata,
  decodeSystemInformation,
  decodeVersionResponse,
} from "../../lib/taloswire.ts";
import {
  encodeAddress,
  encodeControllerManagerConfig,
  encodeHostnameStatus,
  encodeNodeIPConfig,
  encodeNodename,
  encodePlatformMetadata,
  encodeSystemInformation,
  resourceMessage,
} from "../support/apid.ts";
import { type FakeAddress, platformMetadata } from "../support/fixtures.ts";

const limit = (name: PeerLimitName) => PEER_LIMITS[name].value;
const chars = (n: number, c = "a") => c.repeat(n);
const SYSINFO = {
  manufacturer: "QEMU",
  productName: "Standard PC",
  version: "1",
  serialNumber: "s",
  uuid: "u",
  wakeUpType: "Power Switch",
  skuNumber: "",
};
const ADDRESS: FakeAddress = {
  id: "eth0/10.0.0.5/24",
  address: "10.0.0.5/24",
  linkName: "eth0",
  linkIndex: 2,
  scope: 0,
  flags: 0x80,
  priority: 0,
};
const list = (n: number) => Array.from({ length: n }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`);

/** One bound through one decoder: an answer with `n` of what it counts. */
interface Case {
  name: string;
  limit: PeerLimitName;
  decode: (n: number) => unknown;
}

const CASES: Case[] = [
  ...(["hostname", "internalDNS", "externalDNS"] as const).map(
    (f): Case => ({
      name: `PlatformMetadata ${f}`,
      limit: "talos_name_length",
      decode: (n) =>
        decodePlatformMetadata(encodePlatformMetadata(platformMetadata({ [f]: chars(n) })).proto),
    }),
  ),
  ...(["platform", "region", "zone", "instanceType", "instanceId", "providerId"] as const).map(
    (f): Case => ({
      name: `PlatformMetadata ${f}`,
      limit: "talos_string_length",
      decode: (n) =>
        decodePlatformMetadata(encodePlatformMetadata(platformMetadata({ [f]: chars(n) })).proto),
    }),
  ),
  {
    name: "PlatformMetadata tag count",
    limit: "talos_tags",
    decode: (n) => {
      const tags = Object.fromEntries(Array.from({ length: n }, (_, i) => [`t${i}`, "v"]));
      return decodePlatformMetadata(encodePlatformMetadata(platformMetadata({ tags })).proto);
    },
  },
  {
    name: "PlatformMetadata tag value",
    limit: "talos_string_length",
    decode: (n) =>
      decodePlatformMetadata(encodePlatformMetadata(platformMetadata({ tags: { k: chars(n) } })).proto),
  },
  ...(Object.keys(SYSINFO) as Array<keyof typeof SYSINFO>).map(
    (f): Case => ({
      name: `SystemInformation ${f}`,
      limit: "talos_string_length",
      decode: (n) => decodeSystemInformation(encodeSystemInformation({ ...SYSINFO, [f]: chars(n) }).proto),
    }),
  ),
  {
    name: "Nodename nodename",
    limit: "talos_name_length",
    decode: (n) =>
      decodeNodename(
        encodeNodename({ nodename: chars(n), hostnameVersion: "1", skipNodeRegistration: false }).proto,
      ),
  },
  {
    name: "HostnameStatus hostname",
    limit: "talos_name_length",
    decode: (n) => decodeHostnameStatus(encodeHostnameStatus({ hostname: chars(n), domainname: "" }).proto),
  },
  {
    name: "HostnameStatus domainname",
    limit: "talos_name_length",
    decode: (n) => decodeHostnameStatus(encodeHostnameStatus({ hostname: "h", domainname: chars(n) }).proto),
  },
  {
    name: "Version tag",
    limit: "talos_string_length",
    decode: (n) =>
      decodeVersionResponse(
        VersionResponse.encode({
          messages: [
            { version: { tag: chars(n), sha: "", built: "", goVersion: "", os: "", arch: "amd64" } },
          ],
        }).finish(),
      ),
  },
  {
    name: "NodeIPConfig validSubnets entries",
    limit: "talos_list_entries",
    decode: (n) =>
      decodeNodeIPConfig(encodeNodeIPConfig({ validSubnets: list(n), excludeSubnets: [] }).proto),
  },
  {
    name: "NodeIPConfig excludeSubnets entries",
    limit: "talos_list_entries",
    decode: (n) =>
      decodeNodeIPConfig(encodeNodeIPConfig({ validSubnets: [], excludeSubnets: list(n) }).proto),
  },
  {
    name: "NodeIPConfig entry length",
    limit: "talos_address_length",
    decode: (n) =>
      decodeNodeIPConfig(encodeNodeIPConfig({ validSubnets: [chars(n, "1")], excludeSubnets: [] }).proto),
  },
  {
    name: "ControllerManagerConfig podCIDRs entries",
    limit: "talos_list_entries",
    decode: (n) =>
      decodeControllerManagerConfig(
        encodeControllerManagerConfig({ podCIDRs: list(n), serviceCIDRs: [] }).proto,
      ),
  },
  {
    name: "ControllerManagerConfig serviceCIDRs entries",
    limit: "talos_list_entries",
    decode: (n) =>
      decodeControllerManagerConfig(
        encodeControllerManagerConfig({ podCIDRs: [], serviceCIDRs: list(n) }).proto,
      ),
  },
  {
    name: "AddressStatus link name",
    limit: "talos_address_length",
    decode: (n) => decodeAddressStatus(ADDRESS.id, encodeAddress({ ...ADDRESS, linkName: chars(n) }).proto),
  },
  {
    name: "AddressStatus id",
    limit: "talos_address_length",
    decode: (n) => decodeAddressStatus(chars(n), encodeAddress(ADDRESS).proto),
  },
  {
    name: "LinkStatus kind",
    limit: "talos_address_length",
    decode: (n) =>
      decodeLinkStatus(
        "eth0",
        LinkStatusSpec.encode({ index: 2, type: 1, flags: 0, kind: chars(n), linkState: true }).finish(),
      ),
  },
  {
    name: "AddressStatuses of one machine",
    limit: "talos_addresses",
    decode: (n) => checkAddressCount(n),
  },
];

describe("per-machine bounds on Talos answers", () => {
  test.each(CASES.map((c) => [c.name, c] as const))(
    "%s: accepted at the bound, refused one over",
    (_n, c) => {
      const bound = limit(c.limit);
      expect(() => c.decode(bound)).not.toThrow();
      let err: unknown;
      try {
        c.decode(bound + 1);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(TalosLimitError);
      const e = err as TalosLimitError;
      expect(e.limit).toBe(c.limit);
      expect(e.got).toBe(bound + 1);
      expect(e.code).toBe("decode");
      expect(e.retryable).toBe(false);
      expect(e.name).toBe("TalosLimitError");
      expect(e.message).toStartWith("Cannot accept ");
      expect(e.message).toContain(`over the bound of ${bound}`);
    },
  );

  test("a 1 MiB hostname is refused whole, through a Get answer too, never truncated", () => {
    const spec = encodePlatformMetadata(
      platformMetadata({ platform: "metal", hostname: chars(1 << 20) }),
    ).proto;
    const get = GetResponse.encode({
      resource: resourceMessage(
        {
          namespace: "runtime",
          type: "PlatformMetadatas.talos.dev",
          id: "platformmetadata",
          version: "1",
          phase: "running",
        },
        { protoSpec: spec },
      ),
    }).finish();
    expect(() => decodeGetResponse("platformmetadata", get)).toThrow(TalosLimitError);
    expect(() => decodeGetResponse("platformmetadata", get)).toThrow(
      /PlatformMetadata hostname.*1048576 characters/,
    );
  });

  test("the refusal's message is the Event text of OVER_LIMIT_REASON's bound", () => {
    expect(OVER_LIMIT_REASON).toBe("PeerInputOverLimit");
    const e = new TalosLimitError("talos_tags", 65, "PlatformMetadata tags");
    expect(e.message).toContain(
      "Talos reported 65 platform metadata tags for one machine, over the bound of 64",
    );
  });
});

describe("boundTags()", () => {
  test("boundTags() returns a null-prototype object: built-in names are data, absent ones read undefined", () => {
    const decoded = decodePlatformMetadata(
      encodePlatformMetadata(platformMetadata({ tags: { constructor: "c", toString: "t", env: "prod" } }))
        .proto,
    );
    expect(Object.getPrototypeOf(decoded.tags)).toBeNull();
    // Reads as a template or rule would: an inherited member would be a function.
    expect(Reflect.get(decoded.tags, "constructor")).toBe("c");
    expect(Reflect.get(decoded.tags, "toString")).toBe("t");
    expect(Reflect.get(decoded.tags, "valueOf")).toBeUndefined();
    expect(Object.entries(decoded.tags)).toEqual([
      ["constructor", "c"],
      ["toString", "t"],
      ["env", "prod"],
    ]);
  });

  test("boundTags() keeps a tag named __proto__ as data", () => {
    const tags = JSON.parse('{"__proto__": "p", "a": "b"}') as Record<string, string>;
    const out = boundTags(tags);
    expect(Object.getPrototypeOf(out)).toBeNull();
    expect(Object.hasOwn(out, "__proto__")).toBe(true);
    expect(Object.getOwnPropertyDescriptor(out, "__proto__")?.value).toBe("p");
  });

  test("boundTags() refuses a key over talos_string_length", () => {
    expect(() => boundTags({ [chars(limit("talos_string_length") + 1)]: "v" })).toThrow(TalosLimitError);
    expect(() => boundTags({ [chars(limit("talos_string_length"))]: "v" })).not.toThrow();
  });
});
