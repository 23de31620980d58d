// A simulated Talos machine from a fixture node (tests/fixtures/nodes): the resources it publishes
// for the CCM, put through the simulator's control surface as the YAML `talosctl get -o yaml` prints
// (the fake apid's encoders render it), so every end-to-end test seeds machines the same way.

import { RESOURCES, type ResourceKind } from "../../lib/taloswire.ts";
import {
  encodeAddress,
  encodeHostnameStatus,
  encodeLinkStatus,
  encodeNodeIPConfig,
  encodeNodename,
  encodePlatformMetadata,
  encodeSystemInformation,
} from "./apid.ts";
import { type FakeAddress, type FakeNodeSpec, nodeIdentity, nodeIPConfigOf, nodeLinks } from "./fixtures.ts";
import {
  type ControlCall,
  controlSpec,
  machineCalls,
  type SimResource,
  type SimResourceRef,
  type TalosSim,
} from "./talossim.ts";

/** A resource of `kind` with a YAML spec, as the control surface takes it. */
export function simResource(kind: ResourceKind, yaml: string, id?: string): SimResource {
  const { namespace, type } = RESOURCES[kind];
  const rid = id ?? RESOURCES[kind].id;
  if (rid === undefined) throw new Error(`${kind} needs an id`);
  return { namespace, type, id: rid, spec: yaml };
}

/** An AddressStatus, with its `local` (see controlSpec). */
export function simAddress(a: FakeAddress): SimResource {
  return simResource("addresses", controlSpec(encodeAddress(a).yaml, a.local), a.id);
}

/** The reference of an AddressStatus, to destroy it. */
export function simAddressRef(a: FakeAddress): SimResourceRef {
  const { namespace, type } = RESOURCES.addresses;
  return { namespace, type, id: a.id };
}

/** Everything a machine publishes for the CCM, from a fixture node. */
export function machineResources(spec: FakeNodeSpec): SimResource[] {
  const id = nodeIdentity(spec);
  const out: SimResource[] = [
    simResource("platformmetadata", encodePlatformMetadata(spec.platformMetadata).yaml),
    simResource(
      "nodename",
      encodeNodename({ nodename: id.nodename, hostnameVersion: "2", skipNodeRegistration: false }).yaml,
    ),
    simResource("hostname", encodeHostnameStatus({ hostname: id.hostname, domainname: id.domainname }).yaml),
    ...spec.addresses.map(simAddress),
    ...nodeLinks(spec).map((l) => simResource("links", encodeLinkStatus(l).yaml, l.name)),
  ];
  if (spec.systemInformation)
    out.push(simResource("systeminformation", encodeSystemInformation(spec.systemInformation).yaml));
  const nodeIPConfig = nodeIPConfigOf(spec);
  if (nodeIPConfig) out.push(simResource("nodeipconfig", encodeNodeIPConfig(nodeIPConfig).yaml));
  return out;
}

/** Adds the fixture's machine to the simulator, on its first node IP, with everything it publishes. */
export async function addSimMachine(sim: TalosSim, spec: FakeNodeSpec): Promise<void> {
  const ip = spec.nodeIPs[0] as string;
  await sim.addMachine(ip, { platform: spec.platformMetadata.platform, talosVersion: spec.talosVersion });
  for (const r of machineResources(spec)) await sim.put(ip, r);
}

/** The control calls that add the fixture's machine as {@link addSimMachine} does, for TalosSim.batch. */
export function simMachineCalls(spec: FakeNodeSpec): ControlCall[] {
  const opts = { platform: spec.platformMetadata.platform, talosVersion: spec.talosVersion };
  return machineCalls(spec.nodeIPs[0] as string, opts, machineResources(spec));
}
