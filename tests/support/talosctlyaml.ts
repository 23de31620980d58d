// Node metadata as talosctl prints it, for the tests of `validate`'s metadata reader
// (lib/validatemetadata.ts) and its report (lib/validatereport.ts): one resource as `talosctl get … -o
// yaml` prints it, and a SystemInformation to fill. The resource types are spelled out, not taken
// from lib/taloswire.ts, so that a wrong type there fails the tests.

import { stringify } from "yaml";
import type { SystemInformation } from "../../lib/types.ts";

/** talosctl's resource type of PlatformMetadata. */
export const PM_TYPE = "PlatformMetadatas.talos.dev";
/** talosctl's resource type of SystemInformation. */
export const SI_TYPE = "SystemInformations.hardware.talos.dev";

/** One resource as `talosctl get … -o yaml` prints it (yaml.v3's 4-space indent). */
export function talosctl(type: string, node: string, spec: Record<string, unknown>): string {
  const resource = {
    metadata: {
      namespace: type === PM_TYPE ? "runtime" : "hardware",
      type,
      id: type === PM_TYPE ? "platformmetadata" : "systeminformation",
      version: 1,
      owner: "test.Controller",
      phase: "running",
      created: "2025-01-01T00:00:00Z",
      updated: "2025-01-01T00:00:00Z",
    },
    spec,
  };
  return `node: ${node}\n${stringify(resource, { indent: 4 })}`;
}

/** A SystemInformation with every field empty, but those given. */
export function emptySystem(over: Partial<SystemInformation> = {}): SystemInformation {
  return {
    manufacturer: "",
    productName: "",
    version: "",
    serialNumber: "",
    uuid: "",
    wakeUpType: "",
    skuNumber: "",
    ...over,
  };
}
