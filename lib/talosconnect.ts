// Setting up the Talos connection of `run`: the talosconfig (with --talosconfig, and TALOS_ENDPOINTS
// from --talos-endpoints or the cloud config's endpoints), the client that reloads it when it
// changes, and the log line that says which endpoints and roles it uses.

import type { CompiledConfig } from "./config.ts";
import { talosEndpointsEnv } from "./controllerplan.ts";
import type { RunOptions } from "./flags.ts";
import { logger } from "./log.ts";
import type { TalosClient } from "./talos.ts";
import { loadTalosConfig } from "./talosconfig.ts";

const log = logger("manager");

/**
 * A Talos client from the talosconfig the flags and the environment name, watching its file. The
 * client module (and with it the transport) is imported here, only when a controller uses Talos.
 * @throws {TalosConfigError} when there is no usable talosconfig.
 */
export async function connectTalos(opts: RunOptions, cloudConfig: CompiledConfig): Promise<TalosClient> {
  const t = await import("./talos.ts");
  const loadOpts = {
    ...(opts.talos.configPath ? { path: opts.talos.configPath } : {}),
    // TALOS_ENDPOINTS wins over the config file's (older) global.endpoints, as in the reference.
    env: {
      ...process.env,
      TALOS_ENDPOINTS: talosEndpointsEnv(opts.talos.endpoints, cloudConfig.global.endpoints),
    },
  };
  const talosConfig = loadTalosConfig(loadOpts);
  const talos = new t.TalosClient({
    config: talosConfig,
    load: () => loadTalosConfig(loadOpts),
    machineAccess: opts.talos.machineAccess,
  });
  talos.watchConfigFile();
  log.info("Talos API configured", {
    file: talosConfig.path,
    endpoints: talosConfig.endpoints.map((e) => `${e.host}:${e.port}`).join(","),
    roles: talosConfig.roles.join(","),
    machines:
      opts.talos.machineAccess === "auto" ? "direct first, endpoints as fallback" : "through the endpoints",
  });
  return talos;
}
