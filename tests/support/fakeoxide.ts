// A fake of the Oxide API, for running the Oxide CCM (v0.7.1) beside this one. It serves, over HTTPS
// on loopback with a test CA, only what that CCM calls, in the shapes its client reads
// (github.com/oxidecomputer/oxide.go v0.10.0: oxide/paths.go for methods, paths and query
// arguments, oxide/types.go for JSON field names and the tagged unions, oxide/errors.go for errors):
//
//   GET  /v1/instances/{instance}[?project=]            InstanceView: existence, shutdown, metadata
//   GET  /v1/network-interfaces?instance=[&project=]    InstanceNetworkInterfaceList: InternalIPs
//   GET  /v1/instances/{instance}/external-ips          InstanceExternalIpList: ExternalIPs
//   GET  /v1/floating-ips/{floating_ip}[?project=]      FloatingIpView
//   POST /v1/floating-ips?project=                      FloatingIpCreate (201)
//   POST /v1/floating-ips/{floating_ip}/attach          FloatingIpAttach (202)
//   POST /v1/floating-ips/{floating_ip}/detach          FloatingIpDetach (202)
//   DELETE /v1/floating-ips/{floating_ip}               FloatingIpDelete (204)
//   GET  /v1/ip-pools/{pool}                            IpPoolView (the pool annotation)
//
// That is the whole of the CCM's use of the API (internal/provider/instances_v2.go and
// load_balancer.go call nothing else): its "load balancer" is one floating IP per Service, attached
// to one node's instance.
//
// Authentication as the client does it (lib.go buildRequest): `Authorization: Bearer <token>`, with
// `API-Version` and `User-Agent: oxide.go/<version>` recorded for the tests. A missing or wrong token
// is answered 401 with error_code "Unauthorized" and message "credentials missing or invalid", as
// Nexus does (omicron common/src/api/external/error.rs). Lookups follow Nexus's selector rules
// (omicron nexus/src/app/instance.rs instance_lookup, external_ip.rs floating_ip_lookup): a UUID is
// looked up alone and given with a project is a 400 InvalidRequest; a name needs the project. Errors
// are Dropshot's body `{request_id, error_code, message}`; the client maps error_code to its
// sentinel errors (ErrObjectNotFound is what the CCM reads as "instance gone").
//
// Not modelled: pagination beyond one page (next_page is always null), silos and users, instance
// lifecycle operations and the instance states in which Nexus refuses to attach or detach, VPCs and
// subnets (a NIC's subnet and VPC are fixed IDs), rate limits. Messages of refused writes are those of
// omicron nexus/db-queries/src/db/datastore/external_ip.rs.

import { randomUUID } from "node:crypto";
import type { Server } from "bun";
import { serveHttps } from "./httpsfake.ts";

/** An instance as the fake keeps it; tests change `runState` or delete it. */
export interface OxideInstance {
  id: string;
  name: string;
  /** RFC 1035 host name; the CCM writes it as the Node's Hostname address. */
  hostname: string;
  ncpus: number;
  /** Bytes. */
  memory: number;
  /** `running`, `stopped`, ... (oxide.go InstanceState). */
  runState: string;
  /** VPC-private IPv4 address of each NIC, the first being the primary. */
  nics: string[];
  /** An ephemeral external IP, if the instance has one. */
  ephemeralIp?: string;
}

/** A floating IP as GET /v1/floating-ips/{id} returns it. */
export interface OxideFloatingIp {
  id: string;
  name: string;
  description: string;
  ip: string;
  ip_pool_id: string;
  project_id: string;
  instance_id?: string;
  time_created: string;
  time_modified: string;
}

/** One answered request. */
export interface OxideRequest {
  method: string;
  path: string;
  /** The query string, with its `?`, or "". */
  query: string;
  status: number;
  /** The bearer token matched. */
  authorized: boolean;
  apiVersion: string;
  userAgent: string;
  /** The parsed JSON body of writes. */
  body?: unknown;
}

/** How {@link FakeOxide} starts. */
export interface FakeOxideOptions {
  /** The API token the client must present. */
  token: string;
  /** The project's name. */
  project: string;
  /** The default IPv4 pool's addresses: `<a.b.c>.0/24` (default 198.51.100.0/24). */
  poolNet?: string;
}

type Reply = [number, unknown];

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** omicron's Name: a lower-case letter first, letters, digits and '-', no '-' last, at most 63. */
const NAME = /^[a-z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/;
const CREATED = "2026-03-02T10:04:11Z";

function error(status: number, code: string, message: string): Reply {
  return [status, { request_id: randomUUID(), error_code: code, message }];
}
const notFound = (type: string, how: string, key: string) =>
  error(404, "ObjectNotFound", `not found: ${type} with ${how} "${key}"`);
const invalidRequest = (message: string) => error(400, "InvalidRequest", message);

/** The Oxide API of one project, as the Oxide CCM sees it. */
export class FakeOxide {
  /** Base URL, as OXIDE_HOST takes it: `https://127.0.0.1:<port>`. */
  readonly url: string;
  /** The CA that signed the serving certificate (PEM): give it to Go as SSL_CERT_FILE. */
  readonly caCert: string;
  readonly project: { id: string; name: string };
  readonly pool: { id: string; name: string };
  /** Every request answered, in order. */
  readonly requests: OxideRequest[] = [];
  readonly instances = new Map<string, OxideInstance>();
  readonly #floatingIps = new Map<string, OxideFloatingIp>();
  readonly #token: string;
  readonly #poolPrefix: string;
  #nextPoolHost = 10;
  #server?: Server<undefined>;

  private constructor(opts: FakeOxideOptions, port: number, caCert: string) {
    this.url = `https://127.0.0.1:${port}`;
    this.caCert = caCert;
    this.#token = opts.token;
    this.project = { id: randomUUID(), name: opts.project };
    this.pool = { id: randomUUID(), name: "default" };
    this.#poolPrefix = (opts.poolNet ?? "198.51.100.0/24").replace(/\.0\/24$/, "");
  }

  /** Starts the fake on a free loopback port with a serving certificate from a new CA. */
  static async start(opts: FakeOxideOptions): Promise<FakeOxide> {
    let fake: FakeOxide | undefined;
    // No request comes before the fake exists: nobody knows the port yet.
    const https = await serveHttps("fake-oxide", (req) => (fake as FakeOxide).#handle(req));
    fake = new FakeOxide(opts, https.port, https.caCert);
    fake.#server = https.server;
    return fake;
  }

  /** Stops the server. */
  async stop(): Promise<void> {
    await this.#server?.stop(true);
  }

  /** Adds an instance to the project. */
  addInstance(i: OxideInstance): void {
    this.instances.set(i.id, i);
  }

  /** An address from the default pool, as an ephemeral IP or a floating IP gets one. */
  allocate(): string {
    return `${this.#poolPrefix}.${this.#nextPoolHost++}`;
  }

  /** The floating IPs, as the API shows them. */
  floatingIps(): OxideFloatingIp[] {
    return [...this.#floatingIps.values()].map((f) => ({ ...f }));
  }

  /** Requests answered so far that match `method` and a path pattern. */
  requestsTo(method: string, path: RegExp): OxideRequest[] {
    return this.requests.filter((r) => r.method === method && path.test(r.path));
  }

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const text = req.method === "POST" ? await req.text() : "";
    const record: OxideRequest = {
      method: req.method,
      path: decodeURIComponent(url.pathname),
      query: url.search,
      status: 0,
      authorized: req.headers.get("authorization") === `Bearer ${this.#token}`,
      apiVersion: req.headers.get("api-version") ?? "",
      userAgent: req.headers.get("user-agent") ?? "",
    };
    let reply: Reply;
    if (!record.authorized) reply = error(401, "Unauthorized", "credentials missing or invalid");
    else {
      try {
        if (text !== "") record.body = JSON.parse(text);
        reply = this.#route(req.method, record.path, url.searchParams, record.body);
      } catch (err) {
        reply = error(400, "InvalidValue", `unable to parse JSON body: ${(err as Error).message}`);
      }
    }
    record.status = reply[0];
    this.requests.push(record);
    const headers = { "x-request-id": randomUUID() };
    if (reply[0] === 204) return new Response(null, { status: 204, headers });
    return Response.json(reply[1], { status: reply[0], headers });
  }

  #route(method: string, path: string, query: URLSearchParams, body: unknown): Reply {
    const seg = path.split("/").slice(1);
    if (seg[0] !== "v1") return [404, { request_id: randomUUID(), message: "Not Found" }];
    const project = query.get("project");
    const key = `${method} ${seg[1] ?? ""}${seg.length > 2 ? "/{id}" : ""}${seg[3] ? `/${seg[3]}` : ""}`;
    const id = seg[2] ?? "";
    switch (key) {
      case "GET instances/{id}":
        return this.#withInstance(id, project, (i) => [200, this.#instanceView(i)]);
      case "GET instances/{id}/external-ips":
        return this.#withInstance(id, project, (i) => [
          200,
          { items: this.#externalIps(i), next_page: null },
        ]);
      case "GET network-interfaces": {
        const which = query.get("instance");
        if (which === null) return invalidRequest("missing instance selector");
        return this.#withInstance(which, project, (i) => [200, { items: this.#nics(i), next_page: null }]);
      }
      case "GET floating-ips/{id}":
        return this.#withFloatingIp(id, project, (f) => [200, { ...f }]);
      case "POST floating-ips":
        return this.#createFloatingIp(project, body);
      case "POST floating-ips/{id}/attach":
        return this.#withFloatingIp(id, project, (f) => this.#attach(f, body));
      case "POST floating-ips/{id}/detach":
        return this.#withFloatingIp(id, project, (f) => this.#detach(f));
      case "DELETE floating-ips/{id}":
        return this.#withFloatingIp(id, project, (f) => this.#deleteFloatingIp(f));
      case "GET ip-pools/{id}":
        return id === this.pool.id || id === this.pool.name
          ? [200, this.#poolView()]
          : notFound("ip-pool", UUID.test(id) ? "id" : "name", id);
      default:
        return [404, { request_id: randomUUID(), message: "Not Found" }];
    }
  }

  /** Nexus's selector rules: a UUID alone, or a name within a project. */
  #select<T extends { id: string; name: string }>(
    type: string,
    all: Iterable<T>,
    key: string,
    project: string | null,
  ): T | Reply {
    if (UUID.test(key)) {
      if (project !== null)
        return invalidRequest(`when providing ${type} as an ID project should not be specified`);
      const found = [...all].find((x) => x.id === key.toLowerCase());
      return found ?? notFound(type, "id", key);
    }
    if (project === null)
      return invalidRequest(`${type} should either be UUID or project should be specified`);
    if (project !== this.project.name && project !== this.project.id)
      return notFound("project", UUID.test(project) ? "id" : "name", project);
    if (!NAME.test(key))
      return error(400, "InvalidValue", `unsupported value for "${type}": name "${key}" is invalid`);
    return [...all].find((x) => x.name === key) ?? notFound(type, "name", key);
  }

  #withInstance(key: string, project: string | null, then: (i: OxideInstance) => Reply): Reply {
    const found = this.#select("instance", this.instances.values(), key, project);
    return Array.isArray(found) ? found : then(found);
  }

  #withFloatingIp(key: string, project: string | null, then: (f: OxideFloatingIp) => Reply): Reply {
    const found = this.#select("floating-ip", this.#floatingIps.values(), key, project);
    return Array.isArray(found) ? found : then(found);
  }

  #instanceView(i: OxideInstance) {
    return {
      id: i.id,
      name: i.name,
      description: "",
      hostname: i.hostname,
      ncpus: i.ncpus,
      memory: i.memory,
      project_id: this.project.id,
      run_state: i.runState,
      auto_restart_enabled: true,
      enable_jumbo_frames: false,
      time_created: CREATED,
      time_modified: CREATED,
      time_run_state_updated: CREATED,
    };
  }

  #nics(i: OxideInstance) {
    return i.nics.map((ip, n) => ({
      id: randomUUID(),
      name: `net${n}`,
      description: "",
      instance_id: i.id,
      ip_stack: { type: "v4", value: { ip, transit_ips: [] } },
      mac: `a8:40:25:f0:00:${(16 + n).toString(16)}`,
      primary: n === 0,
      subnet_id: "9f3c6a10-1b2d-4e3f-8a4b-5c6d7e8f9a01",
      vpc_id: "9f3c6a10-1b2d-4e3f-8a4b-5c6d7e8f9a02",
      time_created: CREATED,
      time_modified: CREATED,
    }));
  }

  /** SNAT, the ephemeral IP and attached floating IPs, each with its `kind` tag. */
  #externalIps(i: OxideInstance) {
    const snat = {
      kind: "snat",
      ip: `${this.#poolPrefix}.2`,
      ip_pool_id: this.pool.id,
      first_port: 0,
      last_port: 16383,
    };
    const ephemeral = i.ephemeralIp
      ? [{ kind: "ephemeral", ip: i.ephemeralIp, ip_pool_id: this.pool.id }]
      : [];
    const floating = [...this.#floatingIps.values()]
      .filter((f) => f.instance_id === i.id)
      .map((f) => ({ kind: "floating", ...f }));
    return [snat, ...ephemeral, ...floating];
  }

  #createFloatingIp(project: string | null, body: unknown): Reply {
    if (project === null) return invalidRequest("project should be specified");
    if (project !== this.project.name && project !== this.project.id)
      return notFound("project", UUID.test(project) ? "id" : "name", project);
    const req = body as {
      name?: unknown;
      description?: unknown;
      address_allocator?: { type?: string; ip?: string };
    };
    if (typeof req?.name !== "string" || !NAME.test(req.name) || UUID.test(req.name))
      return error(400, "InvalidValue", `unsupported value for "name": ${JSON.stringify(req?.name)}`);
    if (typeof req.description !== "string") return error(400, "InvalidValue", "missing field `description`");
    if ([...this.#floatingIps.values()].some((f) => f.name === req.name))
      return error(400, "ObjectAlreadyExists", `already exists: floating-ip "${req.name}"`);
    const alloc = req.address_allocator;
    if (alloc !== undefined && alloc.type !== "auto" && alloc.type !== "explicit")
      return error(400, "InvalidValue", `unknown variant "${alloc.type}"`);
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const f: OxideFloatingIp = {
      id: randomUUID(),
      name: req.name,
      description: req.description,
      ip: alloc?.type === "explicit" && alloc.ip ? alloc.ip : this.allocate(),
      ip_pool_id: this.pool.id,
      project_id: this.project.id,
      time_created: now,
      time_modified: now,
    };
    this.#floatingIps.set(f.id, f);
    return [201, { ...f }];
  }

  #attach(f: OxideFloatingIp, body: unknown): Reply {
    const req = body as { kind?: unknown; parent?: unknown };
    if (req?.kind !== "instance")
      return error(400, "InvalidValue", `unknown variant ${JSON.stringify(req?.kind)}`);
    if (typeof req.parent !== "string") return error(400, "InvalidValue", "missing field `parent`");
    // A parent given by name is looked up in the floating IP's project.
    const found = this.#select(
      "instance",
      this.instances.values(),
      req.parent,
      UUID.test(req.parent) ? null : this.project.id,
    );
    if (Array.isArray(found)) return found;
    if (f.instance_id !== undefined)
      return invalidRequest("floating IP cannot be attached to one instance while still attached to another");
    f.instance_id = found.id;
    return [202, { ...f }];
  }

  #detach(f: OxideFloatingIp): Reply {
    if (f.instance_id === undefined)
      return invalidRequest("floating IP is not attached to the target instance");
    delete f.instance_id;
    return [202, { ...f }];
  }

  #deleteFloatingIp(f: OxideFloatingIp): Reply {
    if (f.instance_id !== undefined)
      return invalidRequest("Floating IP cannot be deleted while attached to an instance");
    this.#floatingIps.delete(f.id);
    return [204, null];
  }

  #poolView() {
    return {
      id: this.pool.id,
      name: this.pool.name,
      description: "the silo's default IPv4 pool",
      ip_version: "v4",
      is_default: true,
      pool_type: "unicast",
      time_created: CREATED,
      time_modified: CREATED,
    };
  }
}
