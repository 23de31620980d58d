// What `run` (lib/manager.ts) decides from its flags and the cloud config before it starts anything,
// pure: which controllers run, whether they need the Talos API (required, optional or not at all),
// and which Talos endpoints override the talosconfig's.

import type { CompiledConfig } from "./config.ts";
import { type ControllerName, Controllers } from "./controllernames.ts";
import type { IpamOptions } from "./flags.ts";
import { nodeIpamNeedsTalos } from "./ipamconfig.ts";

/**
 * The controllers to run: `--controllers`, plus node-csr-approval when the cloud config sets
 * `global.approveNodeCSR` (older reference releases switched CSR approval on from the config file).
 * @returns the list, and whether node-csr-approval was added for the config file.
 */
export function plannedControllers(
  flagged: readonly ControllerName[],
  cloudConfig: CompiledConfig,
): { enabled: ControllerName[]; addedCsrApproval: boolean } {
  const enabled = [...flagged];
  const add = cloudConfig.global.approveNodeCSR && !enabled.includes(Controllers.nodeCsrApproval);
  if (add) enabled.push(Controllers.nodeCsrApproval);
  return { enabled, addedCsrApproval: add };
}

/**
 * How the enabled controllers use the Talos API: `required` when one cannot work without it
 * (cloud-node, cloud-node-lifecycle, node-ipam when {@link nodeIpamNeedsTalos}), `optional` when
 * only node-csr-approval uses it (it checks IP SANs against Node status alone without), else `none`.
 * @example talosUse(["node-csr-approval"], ipam) // "optional"
 */
export function talosUse(
  enabled: readonly ControllerName[],
  ipam: IpamOptions,
): "required" | "optional" | "none" {
  const required = enabled.some(
    (c) =>
      c === Controllers.cloudNode ||
      c === Controllers.cloudNodeLifecycle ||
      (c === Controllers.nodeIpam && nodeIpamNeedsTalos(ipam)),
  );
  if (required) return "required";
  return enabled.includes(Controllers.nodeCsrApproval) ? "optional" : "none";
}

/**
 * The value of TALOS_ENDPOINTS for the talosconfig loader: `--talos-endpoints` when given, else the
 * cloud config's (older) `global.endpoints`; undefined when neither names one.
 * @example talosEndpointsEnv([], ["10.0.0.1", "10.0.0.2"]) // "10.0.0.1,10.0.0.2"
 */
export function talosEndpointsEnv(
  flag: readonly string[],
  fromConfig: readonly string[],
): string | undefined {
  return (flag.length ? flag : fromConfig).join(",") || undefined;
}
