// Which DNS names reach a Service through a Pod's DNS search path, for node-csr-approval in CSR-only
// mode (no Talos to say which names a machine has). A Pod with the default DNS policy resolves a
// name with fewer than five dots through its search path first: `<its namespace>.svc.<cluster
// domain>`, `svc.<cluster domain>`, `<cluster domain>`. So `vault` reaches Service `vault` of the
// Pod's own namespace, `vault.vault` Service `vault` of namespace `vault`, `vault-0.vault-internal`
// the Pod `vault-0` behind headless Service `vault-internal`, and `vault-0.vault-internal.vault` the
// same from any namespace; the forms under `svc` and `pod` themselves are refused whoever asks
// (`reservedName()` of lib/sharedaddresses.ts). A serving certificate for such a name lets a node
// answer as that Service to every Pod that trusts the cluster CA.
//
// What exists decides: a single label that is the name of a Service in any namespace (Pods run in
// every namespace), and a name whose namespace label names an existing namespace — there a Service
// of that name can be created at any time during the certificate's life, so the namespace existing
// is enough. The answers are read from the API server when a CSR is decided (CSRs are rare; an
// informer over every Service would cost memory and a watch all the time): one GET per namespace
// and one list (fieldSelector on the name, limit 1) per Service name, each asked once per CSR. A
// lookup that fails leaves the CSR undecided (retried), never approved blind.

import { isNotFound, type KubeApi } from "./kubeapi.ts";
import { canonicalDNS } from "./sharedaddresses.ts";

/** What must exist for the names to reach a Service: namespaces, and Service names in any namespace. */
export interface ServiceQuestions {
  namespaces: Set<string>;
  services: Set<string>;
}

/** What one name asks: a namespace that must not exist, a Service name no namespace may have. */
interface Asks {
  /** The name's namespace label, with the Service (or Service and Pod) it would reach there. */
  namespace?: { name: string; reaches: string };
  /** A Service name in any namespace, with the name's label before it (a Pod hostname) if any. */
  service?: { name: string; pod?: string };
}

/**
 * What canonical DNS name `name` would reach through a Pod's search path, label by label: `s` →
 * Service `s` anywhere; `a.b` → Service `a` in namespace `b`, and Pod `a` behind headless Service `b`
 * anywhere; `a.b.c` → Pod `a` behind Service `b` in namespace `c`. Longer names reach nothing there.
 */
function asks(name: string): Asks {
  const labels = name.split(".");
  const [a, b, c] = labels as [string, string | undefined, string | undefined];
  if (labels.length === 1) return { service: { name: a } };
  if (labels.length === 2 && b !== undefined) {
    return { namespace: { name: b, reaches: `Service ${b}/${a}` }, service: { name: b, pod: a } };
  }
  if (labels.length === 3 && c !== undefined) {
    return { namespace: { name: c, reaches: `Pod ${a} of Service ${c}/${b}` } };
  }
  return {};
}

/**
 * The lookups the DNS names need, each once: what {@link lookUpServiceNames} asks the API server.
 * @param names DNS SANs as requested (compared canonical: lower case, no trailing dot)
 * @example serviceQuestions(["vault", "vault.vault"]) // namespaces {vault}, services {vault}
 */
export function serviceQuestions(names: Iterable<string>): ServiceQuestions {
  const out: ServiceQuestions = { namespaces: new Set(), services: new Set() };
  for (const n of names) {
    const a = asks(canonicalDNS(n));
    if (a.namespace) out.namespaces.add(a.namespace.name);
    if (a.service) out.services.add(a.service.name);
  }
  return out;
}

/** How many API requests {@link lookUpServiceNames} makes for `q`. */
export function lookupCount(q: ServiceQuestions): number {
  return q.namespaces.size + q.services.size;
}

/**
 * The API server's answers: which namespaces exist, and for each Service name one Service that has
 * it (`namespace/name`) or null. A view for lib/csr.ts' `conclude()` (its `ServiceNameView`).
 */
export class ServiceNameAnswers {
  readonly #namespaces: ReadonlyMap<string, boolean>;
  readonly #services: ReadonlyMap<string, string | null>;

  constructor(namespaces: ReadonlyMap<string, boolean>, services: ReadonlyMap<string, string | null>) {
    this.#namespaces = namespaces;
    this.#services = services;
  }

  /**
   * Why canonical DNS name `name` reaches a Service through a Pod's search path, or undefined when
   * it reaches none. A name whose answer was not looked up reaches one (fail closed).
   * @example answers.reach("vault") // "resolves to Service vault/vault through a Pod's search path"
   */
  reach(name: string): string | undefined {
    const a = asks(name);
    const path = "through a Pod's search path";
    if (a.namespace) {
      const exists = this.#namespaces.get(a.namespace.name);
      if (exists === undefined) return "was not checked against the cluster's namespaces";
      if (exists) {
        return (
          `resolves to ${a.namespace.reaches} ${path} (namespace ${a.namespace.name} exists: ` +
          "such a Service can be created there at any time)"
        );
      }
    }
    if (a.service) {
      const found = this.#services.get(a.service.name);
      if (found === undefined) return "was not checked against the cluster's Services";
      if (found === null) return undefined;
      return a.service.pod === undefined
        ? `resolves to Service ${found} ${path}`
        : `resolves to Pod ${a.service.pod} behind Service ${found} (a headless Service's endpoint hostname) ${path}`;
    }
    return undefined;
  }
}

/** At most this many lookups in flight for one CSR. */
const LOOKUP_CONCURRENCY = 4;

/**
 * Asks the API server what `q` needs: GET /api/v1/namespaces/<ns> for each namespace (404: none),
 * and a list of Services across namespaces with `fieldSelector=metadata.name=<name>`, `limit=1`
 * for each Service name.
 * @param client needs RBAC `get` on namespaces and `list` on services (cluster-wide)
 * @throws {Error} "Cannot look up ...": any answer but 200 or a namespace's 404 (the CSR waits)
 */
export async function lookUpServiceNames(
  client: Pick<KubeApi, "get">,
  q: ServiceQuestions,
  signal?: AbortSignal,
): Promise<ServiceNameAnswers> {
  const namespaces = new Map<string, boolean>();
  const services = new Map<string, string | null>();
  const opts = signal ? { signal } : {};
  const jobs: Array<() => Promise<void>> = [
    ...[...q.namespaces].map((ns) => async () => {
      namespaces.set(ns, await namespaceExists(client, ns, opts));
    }),
    ...[...q.services].map((name) => async () => {
      services.set(name, await serviceNamed(client, name, opts));
    }),
  ];
  const workers = Array.from({ length: Math.min(LOOKUP_CONCURRENCY, jobs.length) }, async () => {
    for (let job = jobs.shift(); job; job = jobs.shift()) await job();
  });
  await Promise.all(workers);
  return new ServiceNameAnswers(namespaces, services);
}

async function namespaceExists(
  client: Pick<KubeApi, "get">,
  ns: string,
  opts: { signal?: AbortSignal },
): Promise<boolean> {
  try {
    await client.get(`/api/v1/namespaces/${encodeURIComponent(ns)}`, { ...opts, resourceVersionOnly: true });
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw new Error(`Cannot look up namespace ${ns}: ${(err as Error).message}`, { cause: err });
  }
}

async function serviceNamed(
  client: Pick<KubeApi, "get">,
  name: string,
  opts: { signal?: AbortSignal },
): Promise<string | null> {
  try {
    const list = await client.get<{ items?: Array<{ metadata?: { name?: string; namespace?: string } }> }>(
      "/api/v1/services",
      { ...opts, query: { fieldSelector: `metadata.name=${name}`, limit: 1 } },
    );
    const md = list.items?.[0]?.metadata;
    return md ? `${md.namespace ?? ""}/${md.name ?? name}` : null;
  } catch (err) {
    throw new Error(`Cannot look up Services named ${name}: ${(err as Error).message}`, { cause: err });
  }
}
