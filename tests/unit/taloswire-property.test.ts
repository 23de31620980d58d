// Property tests of lib/taloswire.ts decoding: random and truncated bytes never crash a decoder (only
// TalosDecodeError may escape), and what the fake apid encodes decodes back to the same data.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  ControllerManagerConfigSpec,
  type Event,
  EventType,
  GetResponse,
  NetIP,
  type Resource,
  SystemInformationSpec,
  WatchRequest,
  WatchResponse,
} from "../../lib/talos_pb.ts";
import { TalosDecodeError } from "../../lib/taloserrors.ts";
import {
  decodeAddressStatus,
  decodeControllerManagerConfig,
  decodeGetResponse,
  decodeHostnameStatus,
  decodeLinkStatus,
  decodeListResponse,
  decodeNetIP,
  decodeNodeIPConfig,
  decodeNodename,
  decodePlatformMetadata,
  decodeSystemInformation,
  decodeVersionResponse,
  decodeWatchResponse,
  encodeWatchRequest,
  formatIPBytes,
} from "../../lib/taloswire.ts";
import type { PlatformMetadata, SystemInformation } from "../../lib/types.ts";
import {
  encodeAddress,
  encodeControllerManagerConfig,
  encodeHostnameStatus,
  encodeLinkStatus,
  encodeNodeIPConfig,
  encodeNodename,
  encodePlatformMetadata,
  encodeSystemInformation,
  linkFlags,
  resourceMessage,
} from "../support/apid.ts";
import { fixtureNames, LINK_TYPES, loadFixture, nodeLinks, normalizeAddress } from "../support/fixtures.ts";

const DECODERS: Record<string, (b: Uint8Array) => unknown> = {
  decodePlatformMetadata,
  decodeSystemInformation,
  decodeAddressStatus: (b) => decodeAddressStatus("x", b),
  decodeControllerManagerConfig,
  decodeNetIP,
  formatIPBytes,
  decodeGetResponse: (b) => decodeGetResponse("platformmetadata", b),
  decodeListResponse: (b) => decodeListResponse("addresses", b),
  decodeWatchResponse: (b) => decodeWatchResponse("addresses", b),
  decodeVersionResponse,
  decodeNodename,
  decodeHostnameStatus,
  decodeNodeIPConfig,
  decodeLinkStatus: (b) => decodeLinkStatus("eth0", b),
  decodeLinksWatch: (b) => decodeWatchResponse("links", b),
};

/** Runs `fn`; the only acceptable failure is a TalosDecodeError. */
function decodesOrRefuses(fn: (b: Uint8Array) => unknown, bytes: Uint8Array): boolean {
  try {
    fn(bytes);
    return true;
  } catch (err) {
    if (err instanceof TalosDecodeError) return true;
    throw err;
  }
}

/** Valid encodings of every fixture's resources, wrapped the way they arrive. */
function samples(): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const name of fixtureNames()) {
    const n = loadFixture(name);
    const pm = encodePlatformMetadata(n.platformMetadata);
    out.push(pm.proto);
    if (n.systemInformation) out.push(encodeSystemInformation(n.systemInformation).proto);
    for (const a of n.addresses) out.push(encodeAddress(a).proto);
    for (const l of nodeLinks(n)) out.push(encodeLinkStatus(l).proto);
    const resource = resourceMessage(
      {
        namespace: "runtime",
        type: "PlatformMetadatas.talos.dev",
        id: "platformmetadata",
        version: "1",
        phase: "running",
      },
      { protoSpec: pm.proto, yamlSpec: pm.yaml },
    );
    out.push(GetResponse.encode({ resource }).finish());
    out.push(WatchResponse.encode({ event: [{ eventType: EventType.CREATED, resource }] }).finish());
  }
  out.push(
    encodeControllerManagerConfig({ podCIDRs: ["10.244.0.0/16"], serviceCIDRs: ["10.96.0.0/12"] }).proto,
    encodeNodeIPConfig({ validSubnets: ["0.0.0.0/0"], excludeSubnets: ["10.244.0.0/16", "10.0.0.100"] })
      .proto,
  );
  return out;
}

describe("decoders never crash", () => {
  for (const [name, fn] of Object.entries(DECODERS)) {
    test(`${name}() on random bytes`, () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => decodesOrRefuses(fn, bytes)),
        { numRuns: 2000 },
      );
    });

    test(`${name}() on truncated and bit-flipped valid messages`, () => {
      const valid = samples();
      fc.assert(
        fc.property(fc.constantFrom(...valid), fc.nat(), fc.nat(), fc.nat(7), (msg, cut, at, bit) => {
          const truncated = msg.subarray(0, cut % (msg.length + 1));
          const flipped = Uint8Array.from(msg);
          if (flipped.length)
            flipped[at % flipped.length] = (flipped[at % flipped.length] as number) ^ (1 << bit);
          return decodesOrRefuses(fn, truncated) && decodesOrRefuses(fn, flipped);
        }),
        { numRuns: 1000 },
      );
    });
  }
});

describe("round trips through the fake apid's encoders", () => {
  const str = fc.string({ maxLength: 30 });
  const platformMetadata: fc.Arbitrary<PlatformMetadata> = fc.record({
    platform: str,
    hostname: str,
    region: str,
    zone: str,
    instanceType: str,
    instanceId: str,
    providerId: str,
    spot: fc.boolean(),
    internalDNS: str,
    externalDNS: str,
    tags: fc.dictionary(
      fc.string({ minLength: 1, maxLength: 10 }).filter((k) => k !== "__proto__"),
      str,
      {
        maxKeys: 4,
      },
    ),
  });

  test("decodePlatformMetadata(encode(m)) = m", () => {
    fc.assert(
      fc.property(platformMetadata, (m) => {
        expect(decodePlatformMetadata(encodePlatformMetadata(m).proto)).toEqual(m);
      }),
      { numRuns: 500 },
    );
  });

  const address = fc.oneof(
    fc.tuple(fc.uint8Array({ minLength: 4, maxLength: 4 }), fc.integer({ min: 0, max: 32 })),
    fc.tuple(fc.uint8Array({ minLength: 16, maxLength: 16 }), fc.integer({ min: 0, max: 128 })),
  );

  test("decodeAddressStatus(encode(a)) keeps address, link, scope and flags", () => {
    fc.assert(
      fc.property(
        address,
        fc.constantFrom("eth0", "lo", "external", "kubespan", "cilium_host", "bond0.100"),
        fc.nat(64),
        fc.constantFrom(0, 200, 253, 254, 255),
        fc.nat(0xfff),
        ([ip, bits], linkName, linkIndex, scope, flags) => {
          const text = `${formatIPBytes(ip)}/${bits}`;
          const a = normalizeAddress("p", { address: text, linkName, linkIndex, scope, flags });
          const got = decodeAddressStatus(a.id, encodeAddress(a).proto);
          expect(got).toEqual({
            id: a.id,
            address: text,
            linkName,
            linkIndex,
            family: ip.length === 4 ? "inet4" : "inet6",
            scope,
            flags,
          });
        },
      ),
      { numRuns: 500 },
    );
  });

  test("decodeNodename(encode(n)) = n and decodeHostnameStatus(encode(h)) = h", () => {
    fc.assert(
      fc.property(
        fc.record({ nodename: str, hostnameVersion: str, skipNodeRegistration: fc.boolean() }),
        fc.record({ hostname: str, domainname: str }),
        (n, h) => {
          expect(decodeNodename(encodeNodename(n).proto)).toEqual(n);
          expect(decodeHostnameStatus(encodeHostnameStatus(h).proto)).toEqual(h);
        },
      ),
      { numRuns: 300 },
    );
  });

  test("decodeNodeIPConfig(encode(c)) = c and decodeLinkStatus(encode(l)) keeps what a CCM reads", () => {
    fc.assert(
      fc.property(
        fc.record({
          validSubnets: fc.array(str, { maxLength: 4 }),
          excludeSubnets: fc.array(str, { maxLength: 4 }),
        }),
        fc.record({
          name: fc.constantFrom("eth0", "lo", "kube-ipvs0", "kubespan", "bond0.100"),
          kind: fc.constantFrom("", "dummy", "bridge", "vlan", "veth", "wireguard"),
          type: fc.constantFrom("ether", "loopback", "none"),
          index: fc.integer({ min: 1, max: 0xffffffff }),
          up: fc.boolean(),
        }),
        (c, l) => {
          expect(decodeNodeIPConfig(encodeNodeIPConfig(c).proto)).toEqual(c);
          expect(decodeLinkStatus(l.name, encodeLinkStatus(l).proto)).toEqual({
            name: l.name,
            index: l.index,
            type: LINK_TYPES[l.type],
            kind: l.kind,
            flags: linkFlags(l),
            linkState: l.up,
          });
        },
      ),
      { numRuns: 300 },
    );
  });

  test("decodeNetIP() reads the legacy raw form and the NetIP message alike", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ minLength: 4, maxLength: 4 }),
          fc.uint8Array({ minLength: 16, maxLength: 16 }),
        ),
        (ip) => {
          const message = NetIP.encode({ ip }).finish();
          expect(decodeNetIP(ip)).toBe(decodeNetIP(message));
          expect(decodeNetIP(ip)).toBe(formatIPBytes(ip));
        },
      ),
    );
  });
});

describe("decoders map what the generated encoders write", () => {
  const str = fc.string({ maxLength: 20 });

  test('encodeWatchRequest() asks for one resource when given an id (even ""), else for all with bootstrap', () => {
    fc.assert(
      fc.property(str, str, fc.option(str, { nil: undefined }), (namespace, type, id) => {
        const req = WatchRequest.decode(encodeWatchRequest(namespace, type, id));
        expect([req.namespace, req.type, req.id, req.apiVersion]).toEqual([namespace, type, id, 1]);
        expect(req.options?.bootstrapContents).toBe(id === undefined ? true : undefined);
      }),
      { numRuns: 300 },
    );
  });

  test("decodeSystemInformation() and decodeControllerManagerConfig() read what the generated code writes", () => {
    fc.assert(
      fc.property(
        fc.record({
          manufacturer: str,
          productName: str,
          version: str,
          serialNumber: str,
          uuid: str,
          wakeUpType: str,
          skuNumber: str,
        }),
        str,
        fc.array(str, { maxLength: 4 }),
        fc.array(str, { maxLength: 4 }),
        (si: SystemInformation, biosVersion, podCidrs, serviceCidrs) => {
          const bytes = SystemInformationSpec.encode({ ...si, biosVersion }).finish();
          expect(decodeSystemInformation(bytes)).toEqual(si);
          const cmc = ControllerManagerConfigSpec.encode({ podCidrs, serviceCidrs }).finish();
          expect(decodeControllerManagerConfig(cmc)).toEqual({
            podCIDRs: podCidrs,
            serviceCIDRs: serviceCidrs,
          });
        },
      ),
      { numRuns: 300 },
    );
  });

  test("decodeWatchResponse() reads event streams the generated code writes", () => {
    const fixture = loadFixture("hcloud");
    const resources = fixture.addresses.map((a, i) =>
      resourceMessage(
        {
          namespace: "network",
          type: "AddressStatuses.net.talos.dev",
          id: a.id,
          version: String(i + 1),
          phase: i % 2 ? "running" : "tearingDown",
          owner: "network.AddressStatusController",
          labels: { k: String(i) },
          finalizers: ["f"],
        },
        { protoSpec: encodeAddress(a).proto, yamlSpec: encodeAddress(a).yaml },
      ),
    );
    const event: fc.Arbitrary<Event> = fc.oneof(
      fc.record({ eventType: fc.constant(EventType.CREATED), resource: fc.constantFrom(...resources) }),
      fc.record({
        eventType: fc.constant(EventType.UPDATED),
        resource: fc.constantFrom(...resources),
        old: fc.constantFrom(...resources),
      }),
      fc.record({ eventType: fc.constant(EventType.DESTROYED), resource: fc.constantFrom(...resources) }),
      fc.record({ eventType: fc.constant(EventType.BOOTSTRAPPED) }),
      fc.record({ eventType: fc.constant(EventType.ERRORED), error: str }),
      fc.record({ eventType: fc.constant(EventType.NOOP) }),
    );
    const addressOf = (r: Resource | undefined) => {
      const a = fixture.addresses.find((x) => x.id === r?.metadata?.id);
      if (!a) throw new Error("fixture");
      return decodeAddressStatus(a.id, encodeAddress(a).proto);
    };
    fc.assert(
      fc.property(fc.array(event, { maxLength: 8 }), (events) => {
        const bytes = WatchResponse.encode({ event: events }).finish();
        const want = events.flatMap((e) => {
          const r = e.resource;
          const id = r?.metadata?.id ?? "";
          const version = r?.metadata?.version ?? "";
          switch (e.eventType) {
            case EventType.CREATED:
              return [{ type: "created", id, version, resource: addressOf(r) }];
            case EventType.UPDATED:
              return [
                {
                  type: "updated",
                  id,
                  version,
                  resource: addressOf(r),
                  old: addressOf(e.old),
                },
              ];
            case EventType.DESTROYED:
              return [{ type: "destroyed", id, resource: addressOf(r) }];
            case EventType.BOOTSTRAPPED:
              return [{ type: "bootstrapped" }];
            case EventType.ERRORED:
              return [{ type: "errored", error: e.error }];
            default:
              return [];
          }
        });
        expect(decodeWatchResponse("addresses", bytes)).toEqual(want as never);
      }),
      { numRuns: 300 },
    );
  });
});
