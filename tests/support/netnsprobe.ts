// A probe run in the Talos simulator's network namespace (TalosSim.netnsCommand) by
// tests/e2e/talos-sim.test.ts; it prints one JSON line with what it reached, or {"error": "..."}:
//
//   bun netnsprobe.ts talos TALOSCONFIG [HOST:PORT|-] [NODE]
//       a COSI Get of the nodename with the talosconfig's certificate, at HOST:PORT (default: the
//       talosconfig's endpoint), with a `node` header when NODE is given: {"nodename": "..."}, or
//       {"error": "...", "code": N} with the gRPC status
//   bun netnsprobe.ts fetch URL
//       GET URL: {"status": N, "body": "..."}
//   bun netnsprobe.ts serve PORT
//       serves "netns PORT" on 127.0.0.1:PORT, prints {"listening": PORT}, runs until killed

import { GrpcChannel, GrpcError } from "../../lib/grpc.ts";
import { GetRequest } from "../../lib/talos_pb.ts";
import { loadTalosConfig } from "../../lib/talosconfig.ts";
import { decodeGetResponse, PATHS, RESOURCES } from "../../lib/taloswire.ts";

/** Where a probe gives up. */
const TIMEOUT_MS = 5_000;

/** The nodename of the machine a Get reaches (see the header). */
async function talos(path: string, at: string | undefined, node: string | undefined) {
  const c = loadTalosConfig({ path, env: {} });
  const ep = c.endpoints[0] as { host: string; port: number };
  const [host, port] = at && at !== "-" ? splitHostPort(at) : [ep.host, ep.port];
  const ch = new GrpcChannel({
    host,
    port,
    ...(c.ca === undefined ? {} : { ca: c.ca }),
    cert: c.crt,
    key: c.key,
    connectTimeoutMs: TIMEOUT_MS,
  });
  try {
    const { namespace, type, id } = RESOURCES.nodename;
    const reply = await ch.unary(PATHS.get, GetRequest.encode({ namespace, type, id }).finish(), {
      metadata: node ? { node } : {},
      timeoutMs: TIMEOUT_MS,
    });
    return { nodename: decodeGetResponse("nodename", reply).spec.nodename };
  } finally {
    ch.close();
  }
}

function splitHostPort(addr: string): [string, number] {
  const at = addr.lastIndexOf(":");
  return [addr.slice(0, at).replace(/^\[|\]$/g, ""), Number(addr.slice(at + 1))];
}

async function get(url: string) {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  return { status: res.status, body: await res.text() };
}

function serve(port: number) {
  Bun.serve({ hostname: "127.0.0.1", port, fetch: () => new Response(`netns ${port}`) });
  return { listening: port };
}

const [cmd, ...rest] = process.argv.slice(2);
try {
  let out: unknown;
  if (cmd === "talos") out = await talos(rest[0] as string, rest[1], rest[2]);
  else if (cmd === "fetch") out = await get(rest[0] as string);
  else if (cmd === "serve") out = serve(Number(rest[0]));
  else throw new Error(`unknown command ${cmd}: expected talos, fetch or serve`);
  console.log(JSON.stringify(out));
} catch (err) {
  const code = err instanceof GrpcError ? { code: err.code } : {};
  console.log(JSON.stringify({ error: String((err as Error).message ?? err), ...code }));
  process.exit(1);
}
