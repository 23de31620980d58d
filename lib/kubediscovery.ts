// What the API server says of itself, read once: its version (/version) and which group version
// serves the version-dependent APIs this CCM reads (API discovery, which every authenticated user
// may read), decided by lib/kubeversions.ts. The first complete read is logged in one line at
// start-up, with a warning when the version is outside the supported range.

import { type KubeApi, KubeError } from "./kubeapi.ts";
import {
  describeSources,
  type KubeApiSources,
  type ResourceList,
  SERVICE_CIDR_GROUP_VERSIONS,
  type ServiceCIDRGroupVersion,
  serverVersion,
  serviceCIDRGroupVersion,
  supportWarning,
} from "./kubeversions.ts";
import { logger } from "./log.ts";

const log = logger("kube-apis");

/** The API server's version-dependent sources, discovered once and shared by every controller. */
export class KubeApis {
  readonly #client: KubeApi;
  #found: Promise<KubeApiSources> | undefined;

  constructor(client: KubeApi) {
    this.#client = client;
  }

  /**
   * The sources, read on the first call and kept; a read that failed (the API server unreachable,
   * discovery refused) rejects, and the next call reads again.
   */
  discover(signal?: AbortSignal): Promise<KubeApiSources> {
    if (!this.#found) {
      this.#found = this.#read(signal);
      this.#found.catch(() => (this.#found = undefined));
    }
    return this.#found;
  }

  async #read(signal: AbortSignal | undefined): Promise<KubeApiSources> {
    const info = await this.#client.get<Record<string, unknown>>("/version", signal ? { signal } : {});
    const discovered = new Map<ServiceCIDRGroupVersion, ResourceList | undefined>();
    for (const gv of SERVICE_CIDR_GROUP_VERSIONS) {
      discovered.set(gv, await this.#discovery(gv, signal));
      if (serviceCIDRGroupVersion(discovered)) break;
    }
    const sources = { version: serverVersion(info), serviceCIDRs: serviceCIDRGroupVersion(discovered) };
    log.info("Connected to the Kubernetes API server", {
      server: this.#client.server,
      ...describeSources(sources),
    });
    const warning = sources.version ? supportWarning(sources.version) : undefined;
    if (warning) log.warn(warning);
    return sources;
  }

  /** A group version's discovery document; undefined when the API server does not serve it (404). */
  async #discovery(gv: string, signal: AbortSignal | undefined): Promise<ResourceList | undefined> {
    try {
      return await this.#client.get<ResourceList>(`/apis/${gv}`, signal ? { signal } : {});
    } catch (err) {
      if (err instanceof KubeError && err.status === 404) return undefined;
      throw err;
    }
  }
}
