// A fake of the Exoscale API v2 (what the egoscale v3 client calls it), for running the Exoscale
// CCM (v0.34.0) beside this one. It serves, over HTTPS on loopback with a test CA, only what that
// CCM calls, in the shapes egoscale v3 reads (vendor/github.com/exoscale/egoscale/v3 of the CCM's
// release archive: operations.go for paths and query arguments, schemas.go for JSON field names):
//
//   GET /v2/zone                         ListZones: the CCM looks its zone's api-endpoint up there and
//                                        switches to it (exoscale/client.go switchZoneCallback)
//   GET /v2/instance[?manager-id=&manager-type=&ip-address=]   ListInstances (SKS CSR runner)
//   GET /v2/instance/{id}                GetInstance (addresses, existence, shutdown, pool membership)
//   GET /v2/instance-type/{id}           GetInstanceType (the instance-type label)
//   GET /v2/load-balancer, POST, GET/PUT/DELETE /v2/load-balancer/{id}
//   POST /v2/load-balancer/{id}/service, PUT/DELETE /v2/load-balancer/{id}/service/{sid}
//   GET /v2/operation/{id}               the asynchronous operations every write returns
//   GET /v2/sks-cluster                  ListSKSClusters (SKS node-pool annotations)
//
// Every request must carry a valid EXO2-HMAC-SHA256 signature (egoscale v3 api.go signRequest, the
// scheme https://openapi-v2.exoscale.com/topic/topic-api-request-signature describes): the message
// "<METHOD> <escaped path>\n<body>\n<values of the signed query args>\n<header values: none>\n<expires>",
// HMAC-SHA256 with the secret, base64. A wrong key, a wrong signature or an expired one is answered
// 403 {"message":"Invalid request signature"}, the status and body the Exoscale Python SDK's own
// tests use for it (exoscale/python-exoscale tests/test_client.py); egoscale reads only `message`
// (errors.go handleHTTPErrorResp) and maps 403 to ErrForbidden. Unknown objects answer 404
// {"message":"... not found"} (egoscale's ErrNotFound, which the CCM reads as "instance gone"), and
// so does any path no route matches, e.g. a provider ID that is not an Exoscale UUID.
//
// Writes return an Operation in state `pending`; egoscale's Wait polls GET /v2/operation/{id} (first
// after 3 s, api.go pollInterval) until it leaves `pending`. An operation succeeds `operationDelayMs`
// after it was created (default 0: at the first poll); its resource shows `creating`/`deleting`
// until then, as the API's objects do.
//
// Not modelled: pagination (the API has none on these lists), private networks' own endpoints,
// elastic IPs, IAM permissions (a known key may call everything), rate limits.

import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import type { Server } from "bun";
import { serveHttps } from "./httpsfake.ts";

/** An instance type (GetInstanceType). */
export interface ExoInstanceType {
  id: string;
  family: string;
  size: string;
  cpus: number;
  memory: number;
}

/** A Compute instance as the fake keeps it. */
export interface ExoInstance {
  id: string;
  name: string;
  instanceTypeId: string;
  /** `running`, `stopped`, `stopping`, ... (egoscale InstanceState). */
  state: string;
  publicIP?: string;
  ipv6?: string;
  /** IDs of the private networks the instance is attached to. */
  privateNetworks?: string[];
  /** The instance pool managing it (manager type `instance-pool`). */
  poolId?: string;
}

/** An instance pool: its members are the instances whose poolId names it. */
export interface ExoInstancePool {
  id: string;
  name: string;
}

/** Healthcheck of an NLB service, as the API stores it. */
export interface ExoHealthcheck {
  mode?: string;
  port?: number;
  interval?: number;
  timeout?: number;
  retries?: number;
  uri?: string;
  "tls-sni"?: string;
}

/** A network load balancer service, as GetLoadBalancer returns it. */
export interface ExoNlbService {
  id: string;
  name: string;
  description?: string;
  port: number;
  "target-port": number;
  protocol: string;
  strategy: string;
  healthcheck: ExoHealthcheck;
  "instance-pool": { id: string };
  state: string;
  "healthcheck-status": Array<{ "public-ip": string; status: string }>;
}

/** A network load balancer, as GetLoadBalancer returns it. */
export interface ExoNlb {
  id: string;
  name: string;
  description?: string;
  labels?: Record<string, string>;
  "created-at": string;
  ip: string;
  state: string;
  services: ExoNlbService[];
}

/** One request the fake answered. */
export interface ExoRequest {
  method: string;
  path: string;
  query: string;
  status: number;
  /** The API key the request was signed with (whether or not the signature held). */
  key?: string;
}

/** Options of {@link FakeExoscale.start}. */
export interface FakeExoscaleOptions {
  /** The zone served (default `ch-gva-2`); ListZones also lists others with real endpoints. */
  zone?: string;
  /** API key and secret accepted. */
  key: string;
  secret: string;
  /** Delay before an operation succeeds (default 0: the first poll sees it done). */
  operationDelayMs?: number;
  /** NLB public IPs are handed out from this /24 (default 203.0.113.0/24, TEST-NET-3). */
  nlbNet?: string;
}

interface Operation {
  id: string;
  state: "pending" | "success" | "failure";
  reference: { id: string; link: string; command: string };
  doneAt: number;
  /** Applied once, when the operation succeeds. */
  settle: () => void;
}

type Reply = [status: number, body: unknown];

/** The Authorization header's pragmas, or why it cannot be read. */
function parseAuthorization(header: string | null): Record<string, string> | string {
  const scheme = "EXO2-HMAC-SHA256 ";
  if (!header?.startsWith(scheme)) return "missing EXO2-HMAC-SHA256 Authorization header";
  const out: Record<string, string> = {};
  for (const part of header.slice(scheme.length).split(",")) {
    const eq = part.indexOf("=");
    if (eq <= 0) return `malformed pragma ${JSON.stringify(part)}`;
    out[part.slice(0, eq).trim()] = part.slice(eq + 1);
  }
  for (const k of ["credential", "expires", "signature"]) if (!out[k]) return `no ${k} pragma`;
  return out;
}

/**
 * Checks a request's EXO2-HMAC-SHA256 signature. Returns undefined when it holds, else why not.
 * The path is the escaped path as sent (egoscale signs req.URL.EscapedPath()).
 */
export function verifyExoSignature(
  req: {
    method: string;
    escapedPath: string;
    query: URLSearchParams;
    body: string;
    authorization: string | null;
  },
  keys: ReadonlyMap<string, string>,
  nowSeconds: number,
): string | undefined {
  const auth = parseAuthorization(req.authorization);
  if (typeof auth === "string") return auth;
  const secret = keys.get(auth.credential as string);
  if (secret === undefined) return "unknown API key";
  const expires = Number(auth.expires);
  if (!Number.isInteger(expires) || expires < nowSeconds) return "signature expired";
  const signed = auth["signed-query-args"] ? (auth["signed-query-args"] as string).split(";") : [];
  for (const name of signed)
    if (req.query.getAll(name).length !== 1) return `signed query arg ${name} not sent once`;
  const message = [
    `${req.method} ${req.escapedPath}`,
    req.body,
    signed.map((n) => req.query.get(n)).join(""),
    "",
    String(expires),
  ].join("\n");
  const want = createHmac("sha256", secret).update(message).digest();
  const got = Buffer.from(auth.signature as string, "base64");
  if (got.length !== want.length || !timingSafeEqual(got, want)) return "signature mismatch";
  return undefined;
}

const notFound = (what: string): Reply => [404, { message: `${what} not found` }];
const badRequest = (message: string): Reply => [400, { message }];

/** The fake API: state, routes and the HTTPS server. */
export class FakeExoscale {
  readonly zone: string;
  /** Base URL with the API version, as ClientOptWithEndpoint takes it: `https://127.0.0.1:<port>/v2`. */
  readonly url: string;
  /** The CA that signed the serving certificate (PEM): give it to Go as SSL_CERT_FILE. */
  readonly caCert: string;
  /** Every request answered, in order. */
  readonly requests: ExoRequest[] = [];
  readonly instanceTypes = new Map<string, ExoInstanceType>();
  readonly pools = new Map<string, ExoInstancePool>();
  readonly instances = new Map<string, ExoInstance>();
  readonly #nlbs = new Map<string, ExoNlb>();
  readonly #ops = new Map<string, Operation>();
  readonly #keys: Map<string, string>;
  readonly #opDelayMs: number;
  readonly #nlbNet: string;
  #nextNlbIP = 10;
  #server?: Server<undefined>;

  private constructor(opts: FakeExoscaleOptions, port: number, caCert: string) {
    this.zone = opts.zone ?? "ch-gva-2";
    this.url = `https://127.0.0.1:${port}/v2`;
    this.caCert = caCert;
    this.#keys = new Map([[opts.key, opts.secret]]);
    this.#opDelayMs = opts.operationDelayMs ?? 0;
    this.#nlbNet = (opts.nlbNet ?? "203.0.113.0/24").replace(/\.\d+\/24$/, "");
  }

  /** Starts the fake on a free loopback port with a serving certificate from a new CA. */
  static async start(opts: FakeExoscaleOptions): Promise<FakeExoscale> {
    let fake: FakeExoscale | undefined;
    // No request comes before the fake exists: nobody knows the port yet.
    const https = await serveHttps("fake-exoscale", (req) => (fake as FakeExoscale).#handle(req));
    fake = new FakeExoscale(opts, https.port, https.caCert);
    fake.#server = https.server;
    return fake;
  }

  /** Stops the server. */
  async stop(): Promise<void> {
    await this.#server?.stop(true);
  }

  addInstanceType(t: ExoInstanceType): void {
    this.instanceTypes.set(t.id, t);
  }

  addPool(p: ExoInstancePool): void {
    this.pools.set(p.id, p);
  }

  addInstance(i: ExoInstance): void {
    this.instances.set(i.id, i);
  }

  /** The NLBs as GetLoadBalancer returns them (operations settled first). */
  loadBalancers(): ExoNlb[] {
    this.#settle();
    return [...this.#nlbs.values()].map((n) => this.#nlbView(n));
  }

  /** Requests answered so far that match `method` and a path pattern. */
  requestsTo(method: string, path: RegExp): ExoRequest[] {
    return this.requests.filter((r) => r.method === method && path.test(r.path));
  }

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const body = req.method === "GET" || req.method === "DELETE" ? "" : await req.text();
    // The escaped path as sent: the request line's target up to '?'.
    const escapedPath = url.pathname;
    const authorization = req.headers.get("authorization");
    const record: ExoRequest = { method: req.method, path: escapedPath, query: url.search, status: 0 };
    const key = /credential=([^,]+)/.exec(authorization ?? "")?.[1];
    if (key !== undefined) record.key = key;
    const problem = verifyExoSignature(
      { method: req.method, escapedPath, query: url.searchParams, body, authorization },
      this.#keys,
      Math.floor(Date.now() / 1000),
    );
    let reply: Reply;
    if (problem !== undefined) reply = [403, { message: "Invalid request signature" }];
    else {
      this.#settle();
      try {
        reply = this.#route(req.method, escapedPath, url.searchParams, body);
      } catch (err) {
        reply = badRequest(`Invalid request: ${(err as Error).message}`);
      }
    }
    record.status = reply[0];
    this.requests.push(record);
    return Response.json(reply[1], { status: reply[0] });
  }

  #route(method: string, path: string, query: URLSearchParams, body: string): Reply {
    const p = path.startsWith("/v2/") ? path.slice(3) : "";
    const seg = p.split("/").slice(1);
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
    const id = seg[1] ?? "";
    if (seg.length >= 2 && !uuid.test(id)) return notFound("Resource");
    const key = `${method} ${seg[0] ?? ""}${seg.length >= 2 ? "/{id}" : ""}${seg[2] ? `/${seg[2]}` : ""}${seg[3] ? "/{sid}" : ""}`;
    switch (key) {
      case "GET zone":
        return [200, { zones: this.#zones() }];
      case "GET instance":
        return [200, { instances: this.#listInstances(query) }];
      case "GET instance/{id}": {
        const i = this.instances.get(id);
        return i ? [200, this.#instanceView(i)] : notFound("Instance");
      }
      case "GET instance-type/{id}": {
        const t = this.instanceTypes.get(id);
        return t ? [200, { ...t, authorized: true, zones: [this.zone] }] : notFound("Instance type");
      }
      case "GET sks-cluster":
        return [200, { "sks-clusters": [] }];
      case "GET operation/{id}": {
        const op = this.#ops.get(id);
        return op ? [200, this.#opView(op)] : notFound("Operation");
      }
      case "GET load-balancer":
        return [200, { "load-balancers": [...this.#nlbs.values()].map((n) => this.#nlbView(n)) }];
      case "POST load-balancer":
        return this.#createNlb(JSON.parse(body));
      case "GET load-balancer/{id}": {
        const n = this.#nlbs.get(id);
        return n ? [200, this.#nlbView(n)] : notFound("Load balancer");
      }
      case "PUT load-balancer/{id}":
        return this.#updateNlb(id, JSON.parse(body));
      case "DELETE load-balancer/{id}":
        return this.#deleteNlb(id);
      case "POST load-balancer/{id}/service":
        return this.#addService(id, JSON.parse(body));
      case "PUT load-balancer/{id}/service/{sid}":
        return this.#updateService(id, seg[3] as string, JSON.parse(body));
      case "DELETE load-balancer/{id}/service/{sid}":
        return this.#deleteService(id, seg[3] as string);
      default:
        return notFound("Resource");
    }
  }

  #zones() {
    const others = ["ch-dk-2", "de-fra-1", "de-muc-1", "at-vie-1", "at-vie-2", "bg-sof-1"].filter(
      (z) => z !== this.zone,
    );
    return [
      { name: this.zone, "api-endpoint": this.url, "sos-endpoint": `https://sos-${this.zone}.exo.io` },
      ...others.map((z) => ({
        name: z,
        "api-endpoint": `https://api-${z}.exoscale.com/v2`,
        "sos-endpoint": `https://sos-${z}.exo.io`,
      })),
    ];
  }

  #listInstances(query: URLSearchParams) {
    const managerId = query.get("manager-id");
    const managerType = query.get("manager-type");
    const ip = query.get("ip-address");
    return [...this.instances.values()]
      .filter((i) => managerId === null || i.poolId === managerId)
      .filter((i) => managerType === null || (managerType === "instance-pool" && i.poolId !== undefined))
      .filter((i) => ip === null || i.publicIP === ip || i.ipv6 === ip)
      .map((i) => this.#instanceView(i));
  }

  #instanceView(i: ExoInstance) {
    return {
      id: i.id,
      name: i.name,
      state: i.state,
      "created-at": "2026-01-05T09:12:44Z",
      "instance-type": { id: i.instanceTypeId },
      ...(i.publicIP ? { "public-ip": i.publicIP, "public-ip-assignment": "inet4" } : {}),
      ...(i.ipv6 ? { "ipv6-address": i.ipv6 } : {}),
      ...(i.privateNetworks?.length ? { "private-networks": i.privateNetworks.map((id) => ({ id })) } : {}),
      ...(i.poolId ? { manager: { id: i.poolId, type: "instance-pool" } } : {}),
    };
  }

  #operation(reference: { id: string; link: string; command: string }, settle: () => void): Reply {
    const op: Operation = {
      id: randomUUID(),
      state: "pending",
      reference,
      doneAt: Date.now() + this.#opDelayMs,
      settle,
    };
    this.#ops.set(op.id, op);
    return [200, this.#opView(op)];
  }

  #opView(op: Operation) {
    return { id: op.id, state: op.state, reference: op.reference };
  }

  /** Completes every operation whose time has come. */
  #settle(): void {
    const now = Date.now();
    for (const op of this.#ops.values()) {
      if (op.state !== "pending" || op.doneAt > now) continue;
      op.settle();
      op.state = "success";
    }
  }

  #nlbRef(id: string) {
    return { id, link: `/v2/load-balancer/${id}`, command: "get-load-balancer" };
  }

  #createNlb(req: { name?: string; description?: string; labels?: Record<string, string> }): Reply {
    if (typeof req.name !== "string" || req.name === "") return badRequest("name is required");
    const nlb: ExoNlb = {
      id: randomUUID(),
      name: req.name,
      ...(req.description ? { description: req.description } : {}),
      ...(req.labels ? { labels: req.labels } : {}),
      "created-at": new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      ip: `${this.#nlbNet}.${this.#nextNlbIP++}`,
      state: "creating",
      services: [],
    };
    this.#nlbs.set(nlb.id, nlb);
    return this.#operation(this.#nlbRef(nlb.id), () => {
      nlb.state = "running";
    });
  }

  #updateNlb(
    id: string,
    req: { name?: string; description?: string; labels?: Record<string, string> },
  ): Reply {
    const nlb = this.#nlbs.get(id);
    if (!nlb) return notFound("Load balancer");
    return this.#operation(this.#nlbRef(id), () => {
      if (req.name) nlb.name = req.name;
      if (req.description !== undefined) nlb.description = req.description;
      if (req.labels) nlb.labels = req.labels;
    });
  }

  #deleteNlb(id: string): Reply {
    const nlb = this.#nlbs.get(id);
    if (!nlb) return notFound("Load balancer");
    nlb.state = "deleting";
    return this.#operation(this.#nlbRef(id), () => {
      this.#nlbs.delete(id);
    });
  }

  /** Validates an AddServiceToLoadBalancer body (egoscale's `validate:"required"` fields). */
  #serviceProblem(req: Record<string, unknown>): string | undefined {
    for (const k of ["healthcheck", "instance-pool", "name", "port", "protocol", "strategy", "target-port"])
      if (req[k] === undefined || req[k] === "") return `${k} is required`;
    if (!["tcp", "udp"].includes(req.protocol as string)) return "protocol must be tcp or udp";
    const pool = (req["instance-pool"] as { id?: string }).id ?? "";
    if (!this.pools.has(pool)) return `instance pool ${pool} not found`;
    return undefined;
  }

  #addService(id: string, req: Record<string, unknown>): Reply {
    const nlb = this.#nlbs.get(id);
    if (!nlb) return notFound("Load balancer");
    const problem = this.#serviceProblem(req);
    if (problem) return badRequest(problem);
    if (nlb.services.some((s) => s.port === req.port && s.protocol === req.protocol))
      return [409, { message: `port ${req.port}/${req.protocol} already in use` }];
    const svc: ExoNlbService = {
      id: randomUUID(),
      name: req.name as string,
      ...(req.description ? { description: req.description as string } : {}),
      port: req.port as number,
      "target-port": req["target-port"] as number,
      protocol: req.protocol as string,
      strategy: req.strategy as string,
      healthcheck: req.healthcheck as ExoHealthcheck,
      "instance-pool": { id: (req["instance-pool"] as { id: string }).id },
      state: "creating",
      "healthcheck-status": [],
    };
    nlb.services.push(svc);
    return this.#operation(this.#nlbRef(id), () => {
      svc.state = "running";
    });
  }

  #updateService(id: string, sid: string, req: Record<string, unknown>): Reply {
    const nlb = this.#nlbs.get(id);
    const svc = nlb?.services.find((s) => s.id === sid);
    if (!nlb || !svc) return notFound("Load balancer service");
    svc.state = "updating";
    return this.#operation(this.#nlbRef(id), () => {
      for (const k of [
        "name",
        "description",
        "port",
        "target-port",
        "protocol",
        "strategy",
        "healthcheck",
      ] as const)
        if (req[k] !== undefined) (svc as unknown as Record<string, unknown>)[k] = req[k];
      svc.state = "running";
    });
  }

  #deleteService(id: string, sid: string): Reply {
    const nlb = this.#nlbs.get(id);
    const svc = nlb?.services.find((s) => s.id === sid);
    if (!nlb || !svc) return notFound("Load balancer service");
    svc.state = "deleting";
    return this.#operation(this.#nlbRef(id), () => {
      nlb.services = nlb.services.filter((s) => s.id !== sid);
    });
  }

  /** An NLB as the API shows it: each service's targets are its instance pool's members. */
  #nlbView(n: ExoNlb): ExoNlb {
    return {
      ...n,
      services: n.services.map((s) => ({
        ...s,
        "healthcheck-status": [...this.instances.values()]
          .filter((i) => i.poolId === s["instance-pool"].id && i.publicIP && s.state === "running")
          .map((i) => ({
            "public-ip": i.publicIP as string,
            status: i.state === "running" ? "success" : "failure",
          })),
      })),
    };
  }
}
