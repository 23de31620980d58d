// lib/taloschannels.ts with a recording transport: the endpoints' channels and every machine's
// direct channel with the generation's certificate; direct channels made once per machine, dropped
// on a failed path, swept when idle twice in a row, closed with the generation.

import { describe, expect, test } from "bun:test";
import type { GrpcChannelOptions } from "../../lib/grpc.ts";
import {
  closeGeneration,
  DIRECT_CONNECT_TIMEOUT_MS,
  directChannel,
  directReachable,
  dropDirect,
  machineEndpoint,
  newGeneration,
  sweepDirect,
} from "../../lib/taloschannels.ts";
import type { TalosConfig } from "../../lib/talosconfig.ts";

/** A transport that records what it was asked to build. */
function recordingTransport() {
  const channels: Array<{ opts: GrpcChannelOptions; closed: boolean; activeCalls: number; state: string }> =
    [];
  class GrpcChannel {
    readonly rec: { opts: GrpcChannelOptions; closed: boolean; activeCalls: number; state: string };
    constructor(opts: GrpcChannelOptions) {
      this.rec = { opts, closed: false, activeCalls: 0, state: "idle" };
      channels.push(this.rec);
    }
    get activeCalls() {
      return this.rec.activeCalls;
    }
    get state() {
      return this.rec.state;
    }
    close() {
      this.rec.closed = true;
    }
  }
  const transport = { GrpcChannel } as unknown as typeof import("../../lib/grpc.ts");
  return { transport, channels };
}

const CONFIG: TalosConfig = {
  path: "/dev/null",
  context: "default",
  endpoints: [
    { host: "10.0.0.1", port: 50000 },
    { host: "cp.example", port: 50000 },
  ],
  ca: "CA PEM",
  crt: "CERT PEM",
  key: "KEY PEM",
  cluster: "",
  roles: ["os:reader"],
  certNotAfter: new Date(0),
};

describe("channel generations", () => {
  test("the endpoints' channels and each machine's, with the generation's certificate", () => {
    const { transport, channels } = recordingTransport();
    const gen = newGeneration(transport, CONFIG, { initialMs: 1, maxMs: 2 }, Math.random);
    directChannel(gen, "10.0.0.5", machineEndpoint);
    directChannel(gen, "fd00::5", machineEndpoint);
    expect(channels.map((c) => [c.opts.ca, c.opts.cert, c.opts.key])).toEqual(
      Array(4).fill(["CA PEM", "CERT PEM", "KEY PEM"]),
    );
    expect(channels.map((c) => [c.opts.host, c.opts.port, c.opts.servername])).toEqual([
      // no server name: an IP is checked against the certificate as such, a DNS name is sent as is
      ["10.0.0.1", 50000, undefined],
      ["cp.example", 50000, undefined],
      ["10.0.0.5", 50000, undefined],
      ["fd00::5", 50000, undefined],
    ]);
    // a machine's direct connection gives up sooner than an endpoint's: the proxy is its fallback
    expect(channels.map((c) => c.opts.connectTimeoutMs)).toEqual([
      undefined,
      undefined,
      DIRECT_CONNECT_TIMEOUT_MS,
      DIRECT_CONNECT_TIMEOUT_MS,
    ]);
    // a second generation (a new talosconfig) dials with the new certificate
    newGeneration(transport, { ...CONFIG, crt: "NEW CERT" }, { initialMs: 1, maxMs: 2 }, Math.random);
    expect(channels.slice(4).map((c) => c.opts.cert)).toEqual(["NEW CERT", "NEW CERT"]);
  });

  test("a machine's direct channel is made once, dropped on a failed path, swept after two idle sweeps", () => {
    const { transport, channels } = recordingTransport();
    const gen = newGeneration(transport, CONFIG, { initialMs: 1, maxMs: 2 }, Math.random);
    const a = directChannel(gen, "10.0.0.5", machineEndpoint);
    expect(directChannel(gen, "10.0.0.5", machineEndpoint)).toBe(a);
    directChannel(gen, "10.0.0.6", machineEndpoint);
    const [, , five, six] = channels;
    if (!five || !six) throw new Error("unreachable");
    five.activeCalls = 1;
    expect(sweepDirect(gen)).toBe(0);
    expect(sweepDirect(gen)).toBe(1); // .6 idle twice
    expect(six.closed).toBe(true);
    expect([...gen.direct.keys()]).toEqual(["10.0.0.5"]);
    // a use between two sweeps counts as activity
    five.activeCalls = 0;
    expect(sweepDirect(gen)).toBe(0);
    directChannel(gen, "10.0.0.5", machineEndpoint);
    expect(sweepDirect(gen)).toBe(0);
    dropDirect(gen, "10.0.0.5");
    expect(five.closed).toBe(true);
    expect(gen.direct.size).toBe(0);
    directChannel(gen, "10.0.0.7", machineEndpoint);
    closeGeneration(gen);
    expect(channels.every((c) => c.closed)).toBe(true);
    expect(gen.direct.size).toBe(0);
  });

  test("the path works elsewhere only while another machine's direct channel is connected", () => {
    const { transport, channels } = recordingTransport();
    const gen = newGeneration(transport, CONFIG, { initialMs: 1, maxMs: 2 }, Math.random);
    directChannel(gen, "10.0.0.5", machineEndpoint);
    directChannel(gen, "10.0.0.6", machineEndpoint);
    const [, , five, six] = channels;
    if (!five || !six) throw new Error("unreachable");
    expect(directReachable(gen, "10.0.0.5")).toBe(false); // none connected
    five.state = "ready";
    expect(directReachable(gen, "10.0.0.5")).toBe(false); // only the failing machine's own
    expect(directReachable(gen, "10.0.0.6")).toBe(true);
    six.state = "connecting";
    expect(directReachable(gen, "10.0.0.9")).toBe(true);
    // the endpoints' channels do not count: they say nothing of the path to the machines
    for (const c of channels.slice(0, 2)) c.state = "ready";
    five.state = "idle";
    expect(directReachable(gen, "10.0.0.9")).toBe(false);
  });
});
