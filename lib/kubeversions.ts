// The Kubernetes versions this CCM supports and what it reads differently between them: pure
// decisions on what the API server said of itself (/version and API discovery). The reads are in
// lib/kubediscovery.ts. The README's support matrix lists the same range and differences.

/** The oldest and newest Kubernetes minor versions (1.x) this CCM is tested with. */
export const SUPPORTED_MINORS: { readonly oldest: number; readonly newest: number } = {
  oldest: 31,
  newest: 37,
};

/** The API server's version, from its /version (k8s.io/apimachinery version.Info). */
export interface ServerVersion {
  gitVersion: string;
  major: number;
  minor: number;
}

/**
 * The API server's version from its /version answer. Distributions write the minor as "31+";
 * gitVersion ("v1.31.14-eks-...") is read when major or minor are not numbers.
 * @example serverVersion({ major: "1", minor: "31+", gitVersion: "v1.31.14" }) // { major: 1, minor: 31, ... }
 */
export function serverVersion(info: {
  major?: unknown;
  minor?: unknown;
  gitVersion?: unknown;
}): ServerVersion | undefined {
  const gitVersion = typeof info.gitVersion === "string" ? info.gitVersion : "";
  const num = (v: unknown) => (typeof v === "string" ? /^(\d+)\+?$/.exec(v)?.[1] : undefined);
  let major = num(info.major);
  let minor = num(info.minor);
  if (major === undefined || minor === undefined) {
    const m = /^v(\d+)\.(\d+)(?:\.|$|-|\+)/.exec(gitVersion);
    if (!m) return undefined;
    [major, minor] = [m[1], m[2]];
  }
  return { gitVersion, major: Number(major), minor: Number(minor) };
}

/** Why `v` is outside the tested range, or undefined inside it. */
export function supportWarning(v: ServerVersion): string | undefined {
  const { oldest, newest } = SUPPORTED_MINORS;
  const range = `1.${oldest} to 1.${newest}`;
  if (v.major !== 1 || v.minor < oldest)
    return `Kubernetes ${v.gitVersion || `${v.major}.${v.minor}`} is older than this CCM supports (${range})`;
  if (v.minor > newest)
    return `Kubernetes ${v.gitVersion} is newer than this CCM is tested with (${range}); it should work, but it is untested`;
  return undefined;
}

/**
 * The group versions that may serve ServiceCIDR objects, preferred first: networking.k8s.io/v1 from
 * Kubernetes 1.33 (on by default); v1beta1 on 1.31 and 1.32 only where the operator turned on the
 * MultiCIDRServiceAllocator feature gate and the beta API (off by default).
 */
export const SERVICE_CIDR_GROUP_VERSIONS = ["networking.k8s.io/v1", "networking.k8s.io/v1beta1"] as const;
export type ServiceCIDRGroupVersion = (typeof SERVICE_CIDR_GROUP_VERSIONS)[number];

/** An API discovery document (APIResourceList), as much of it as is read. */
export interface ResourceList {
  resources?: Array<{ name?: unknown; verbs?: unknown }>;
}

/**
 * Whether a group version's discovery document lists a resource that can be listed and watched
 * (subresources such as `servicecidrs/status` are not the resource).
 */
export function servesResource(list: ResourceList | undefined, resource: string): boolean {
  return (list?.resources ?? []).some(
    (r) =>
      r.name === resource && Array.isArray(r.verbs) && r.verbs.includes("list") && r.verbs.includes("watch"),
  );
}

/**
 * The ServiceCIDR group version to watch: the first of {@link SERVICE_CIDR_GROUP_VERSIONS} whose
 * discovery document lists `servicecidrs` (undefined: a group version not served at all).
 */
export function serviceCIDRGroupVersion(
  discovered: ReadonlyMap<ServiceCIDRGroupVersion, ResourceList | undefined>,
): ServiceCIDRGroupVersion | undefined {
  return SERVICE_CIDR_GROUP_VERSIONS.find((gv) => servesResource(discovered.get(gv), "servicecidrs"));
}

/** The collection path of ServiceCIDR objects in a group version. */
export function serviceCIDRPath(gv: ServiceCIDRGroupVersion): string {
  return `/apis/${gv}/servicecidrs`;
}

/** The version-dependent sources one API server offers, as the start-up log line names them. */
export interface KubeApiSources {
  version: ServerVersion | undefined;
  /** The group version whose ServiceCIDR objects are watched; undefined when none is served. */
  serviceCIDRs: ServiceCIDRGroupVersion | undefined;
}

/**
 * The fields of the start-up log line that says which version-dependent sources are in use.
 * @example describeSources({ version, serviceCIDRs: undefined }).serviceCIDRs
 * // "not served (networking.k8s.io/v1 from Kubernetes 1.33): Service ranges from --service-cluster-ip-range, Talos and Service default/kubernetes"
 */
export function describeSources(s: KubeApiSources): Record<string, string> {
  return {
    version: s.version?.gitVersion || "unknown",
    serviceCIDRs: s.serviceCIDRs
      ? `${serviceCIDRPath(s.serviceCIDRs).slice("/apis/".length)} (watched)`
      : "not served (networking.k8s.io/v1 from Kubernetes 1.33): Service ranges from " +
        "--service-cluster-ip-range, Talos and Service default/kubernetes",
  };
}
