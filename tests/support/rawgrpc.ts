// A plain grpc-js client for Talos' API and the generated codecs, no lib/talos.ts: what the wire
// tests of the fake apid and the golden test against the Talos simulator speak, so that they see
// each server's own bytes, status codes and messages.

import * as grpc from "@grpc/grpc-js";
import { parse as parseYaml } from "yaml";
import {
  GetRequest,
  GetResponse,
  ListRequest,
  ListResponse,
  type Resource,
  WatchRequest,
  WatchResponse,
} from "../../lib/talos_pb.ts";
import { PATHS } from "../../lib/taloswire.ts";

export interface Ctx {
  endpoints: string[];
  ca: string;
  crt: string;
  key: string;
  cluster?: string;
}

/** The current context of a talosconfig, decoded by hand as any Talos client would. */
export function contextOf(talosconfig: string): Ctx {
  const doc = parseYaml(talosconfig) as {
    context: string;
    contexts: Record<string, Record<string, unknown>>;
  };
  const c = doc.contexts[doc.context] as Record<string, unknown>;
  const b64 = (v: unknown) => Buffer.from(String(v), "base64").toString("utf8");
  return {
    endpoints: c.endpoints as string[],
    ca: b64(c.ca),
    crt: b64(c.crt),
    key: b64(c.key),
    ...(typeof c.cluster === "string" ? { cluster: c.cluster } : {}),
  };
}

const id = (b: Buffer) => b;

/** A grpc-js client for the talosconfig; Bun refuses IP server names, so SNI is `localhost`. */
export function clientFor(talosconfig: string): grpc.Client {
  const ctx = contextOf(talosconfig);
  const key = ctx.key.replace(/ED25519 PRIVATE KEY/g, "PRIVATE KEY");
  const creds = grpc.credentials.createSsl(Buffer.from(ctx.ca), Buffer.from(key), Buffer.from(ctx.crt));
  return new grpc.Client(ctx.endpoints[0] as string, creds, {
    "grpc.ssl_target_name_override": "localhost",
    "grpc.max_receive_message_length": 32 << 20,
    "grpc.initial_reconnect_backoff_ms": 50,
    "grpc.max_reconnect_backoff_ms": 200,
  });
}

export function md(headers: Record<string, string | string[]>): grpc.Metadata {
  const m = new grpc.Metadata();
  for (const [k, v] of Object.entries(headers)) for (const x of [v].flat()) m.add(k, x);
  return m;
}

export interface Status {
  code: number;
  details: string;
}

export function unary(
  c: grpc.Client,
  path: string,
  req: Uint8Array,
  headers: Record<string, string | string[]> = {},
) {
  return new Promise<Buffer>((resolve, reject) => {
    c.makeUnaryRequest(
      path,
      id,
      id,
      Buffer.from(req),
      md(headers),
      { deadline: Date.now() + 5000 },
      (err, v) => (err || !v ? reject(err) : resolve(v)),
    );
  });
}

export async function status(p: Promise<unknown>): Promise<Status> {
  try {
    await p;
  } catch (err) {
    const e = err as { code: number; details: string };
    return { code: e.code, details: e.details };
  }
  throw new Error("call succeeded");
}

export function getReq(r: { namespace: string; type: string; id?: string | undefined }) {
  return GetRequest.encode({ namespace: r.namespace, type: r.type, id: r.id ?? "" }).finish();
}

export async function get(
  c: grpc.Client,
  r: { namespace: string; type: string; id?: string },
  node?: string,
) {
  const bytes = await unary(c, PATHS.get, getReq(r), node === undefined ? {} : { node });
  return GetResponse.decode(bytes).resource as Resource;
}

export function list(
  c: grpc.Client,
  r: { namespace: string; type: string },
  headers: Record<string, string>,
) {
  return new Promise<Resource[]>((resolve, reject) => {
    const req = ListRequest.encode(r).finish();
    const call = c.makeServerStreamRequest(PATHS.list, id, id, Buffer.from(req), md(headers));
    const out: Resource[] = [];
    call.on("data", (b: Buffer) => out.push(ListResponse.decode(b).resource as Resource));
    call.on("error", reject);
    call.on("end", () => resolve(out));
  });
}

/** What a test watches: one resource with `id`, all of a type without; `bootstrap` sets bootstrap_contents. */
export interface WatchArgs {
  namespace: string;
  type: string;
  id?: string;
  bootstrap?: boolean;
  apiVersion?: number;
}

/** A Watch stream collecting decoded responses and its error; `until(pred)` waits up to 5 s. */
export function watch(c: grpc.Client, a: WatchArgs, node: string) {
  const bytes = WatchRequest.encode({
    namespace: a.namespace,
    type: a.type,
    ...(a.id === undefined ? {} : { id: a.id }),
    ...(a.bootstrap
      ? {
          options: {
            bootstrapContents: true,
            tailEvents: 0,
            labelQuery: [],
            aggregated: false,
            bootstrapBookmark: false,
          },
        }
      : {}),
    apiVersion: a.apiVersion ?? 0,
  }).finish();
  const call = c.makeServerStreamRequest(PATHS.watch, id, id, Buffer.from(bytes), md({ node }));
  const responses: WatchResponse[] = [];
  let error: Status | undefined;
  const waiters: Array<() => void> = [];
  const wake = () => {
    for (const w of waiters.splice(0)) w();
  };
  call.on("data", (b: Buffer) => {
    responses.push(WatchResponse.decode(b));
    wake();
  });
  call.on("error", (e: { code: number; details: string }) => {
    error = { code: e.code, details: e.details };
    wake();
  });
  return {
    responses,
    get error() {
      return error;
    },
    async until(pred: () => boolean, what: string) {
      const deadline = Date.now() + 5000;
      while (!pred()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
    cancel: () => call.cancel(),
  };
}
