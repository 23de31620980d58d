// The client under test of tests/e2e/h2-hostile.test.ts, in a process of its own so that its
// memory is its own: `bun tests/support/h2probe.ts '<ProbeRequest JSON>'` connects to a hostile
// server through lib/grpc.ts (and lib/h2.ts) or lib/talos.ts, makes one call, and prints one JSON
// line (ProbeReport): how the call ended and the process' resident memory, at rest before the call
// and at its peak (VmHWM of /proc/self/status, reset to the resting size with clear_refs before
// the call, and sampled every 10 ms besides).

import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { GrpcChannel, type GrpcChannelOptions, GrpcError, type GrpcStream } from "../../lib/grpc.ts";
import { Registry } from "../../lib/metrics.ts";
import { TalosClient, TalosError } from "../../lib/talos.ts";

/** What the probe does. */
export interface ProbeRequest {
  port: number;
  ca: string;
  cert: string;
  key: string;
  /**
   * `stream`: a server-streaming call read to its end (`digest` of the first message reported);
   * `stall`: a server-streaming call whose first message is read, then nothing for `stallMs`, then
   * the rest; `talos-get`: TalosClient.platformMetadata with `attempts` and a fast backoff;
   * `talos-list`: TalosClient.addresses, likewise.
   */
  action: "stream" | "stall" | "talos-get" | "talos-list";
  /** Channel options beyond the endpoint and credentials (timeouts the test shortens). */
  channel?: Partial<GrpcChannelOptions>;
  stallMs?: number;
  attempts?: number;
  /** Size of the request message (default 3 bytes). */
  requestBytes?: number;
  /** The probe gives up and reports `outcome: "timeout"` after this long (default 30 s). */
  limitMs?: number;
}

/** What the probe prints. */
export interface ProbeReport {
  outcome: "ok" | "error" | "timeout";
  /** The error's class, gRPC or Talos code and message. */
  error?: { name: string; code: string | number; message: string };
  messages: number;
  /** Length and SHA-256 of the first message. */
  firstLength?: number;
  digest?: string;
  elapsedMs: number;
  /** Resident memory at rest before the call, and the peak while it ran (MiB). */
  baselineMiB: number;
  peakMiB: number;
}

const MiB = 1 << 20;

/** VmRSS and VmHWM of this process, in bytes. */
function memory(): { rss: number; hwm: number } {
  const text = readFileSync("/proc/self/status", "utf8");
  const kb = (field: string) => Number(text.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))?.[1]) * 1024;
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

function errorOf(err: unknown): NonNullable<ProbeReport["error"]> {
  if (err instanceof GrpcError) return { name: err.name, code: err.code, message: err.message };
  if (err instanceof TalosError) return { name: err.name, code: err.code, message: err.message };
  return {
    name: (err as Error)?.name ?? "unknown",
    code: "",
    message: String((err as Error)?.message ?? err),
  };
}

async function drain(call: GrpcStream, report: ProbeReport, stallMs: number): Promise<void> {
  for (let m = await call.next(); m !== undefined; m = await call.next()) {
    if (report.messages++ === 0) {
      report.firstLength = m.length;
      report.digest = createHash("sha256").update(m).digest("hex");
      if (stallMs > 0) await Bun.sleep(stallMs);
    }
  }
}

async function run(req: ProbeRequest, report: ProbeReport): Promise<void> {
  if (req.action === "talos-get" || req.action === "talos-list") {
    const client = new TalosClient({
      config: {
        path: "",
        context: "hostile",
        endpoints: [{ host: "127.0.0.1", port: req.port }],
        ca: req.ca,
        crt: req.cert,
        key: req.key,
        cluster: "",
        roles: ["os:reader"],
        certNotAfter: new Date(Date.now() + 3_600_000),
      },
      attempts: req.attempts ?? 3,
      backoff: { initialMs: 100, maxMs: 400 },
      registry: new Registry(),
    });
    try {
      if (req.action === "talos-get") await client.platformMetadata("10.0.0.1");
      else report.messages = (await client.addresses("10.0.0.1")).length;
      if (req.action === "talos-get") report.messages = 1;
    } finally {
      client.close();
    }
    return;
  }
  const ch = new GrpcChannel({
    host: "127.0.0.1",
    port: req.port,
    ca: req.ca,
    cert: req.cert,
    key: req.key,
    servername: "talos",
    maxReceiveMessageBytes: 32 * MiB,
    ...req.channel,
  });
  try {
    const call = ch.serverStream("/cosi.resource.State/Watch", new Uint8Array(req.requestBytes ?? 3).fill(1));
    await drain(call, report, req.action === "stall" ? (req.stallMs ?? 1_000) : 0);
  } finally {
    ch.close();
  }
}

async function main(): Promise<void> {
  const req = JSON.parse(process.argv[2] ?? "") as ProbeRequest;
  // At rest: modules loaded, a collection done; then the peak counts from here.
  Bun.gc(true);
  await Bun.sleep(50);
  const baseline = memory().rss;
  try {
    writeFileSync("/proc/self/clear_refs", "5");
  } catch {
    // Without clear_refs VmHWM counts from the start; the samples below still hold.
  }
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, memory().rss);
  }, 10);
  const report: ProbeReport = { outcome: "timeout", messages: 0, elapsedMs: 0, baselineMiB: 0, peakMiB: 0 };
  const started = performance.now();
  const limit = new Promise<void>((resolve) => setTimeout(resolve, req.limitMs ?? 30_000).unref());
  await Promise.race([
    run(req, report).then(
      () => {
        report.outcome = "ok";
      },
      (err) => {
        report.outcome = "error";
        report.error = errorOf(err);
      },
    ),
    limit,
  ]);
  clearInterval(sampler);
  const m = memory();
  report.elapsedMs = Math.round(performance.now() - started);
  report.baselineMiB = +(baseline / MiB).toFixed(1);
  report.peakMiB = +(Math.max(peak, m.hwm, m.rss) / MiB).toFixed(1);
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exit(0);
}

await main();
