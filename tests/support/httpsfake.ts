// The HTTPS server of the cloud API fakes (tests/support/fakeexoscale.ts, fakeoxide.ts): Bun.serve
// on a free loopback port, its certificate from a CA of its own, which the client under test is
// given as its only root.

import type { Server } from "bun";
import { freePort } from "./cluster.ts";
import { createCA } from "./pki.ts";

/** A running fake's server, port and CA. */
export interface HttpsFakeServer {
  server: Server<undefined>;
  port: number;
  /** The CA that signed the serving certificate (PEM). */
  caCert: string;
}

/**
 * Serves `handle` over HTTPS on 127.0.0.1 and a free port, with a certificate for 127.0.0.1 and
 * localhost (CN `<name>-api`) from a new CA (`<name>-ca`).
 * @example const { server, port, caCert } = await serveHttps("fake-oxide", (req) => handle(req));
 */
export async function serveHttps(
  name: string,
  handle: (req: Request) => Promise<Response>,
): Promise<HttpsFakeServer> {
  const ca = await createCA(`${name}-ca`);
  const leaf = await ca.issue({ cn: `${name}-api`, usage: "server", ips: ["127.0.0.1"], dns: ["localhost"] });
  const port = await freePort();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port,
    tls: { cert: leaf.cert, key: leaf.key },
    fetch: handle,
  });
  return { server, port, caCert: ca.cert };
}
