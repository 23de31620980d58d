// The HTTP/2 client (lib/h2.ts, lib/grpc.ts) against a hostile Talos endpoint, one test per class
// of attack that nghttp2 and Go's x/net/http2 document (the 2019 advisories CVE-2019-9511 to -9518,
// the 2023 rapid reset, the 2024 CONTINUATION flood) and the ones an outside review found. Each
// test runs the client in a process of its own (tests/support/h2probe.ts, which reports how its
// call ended and its peak RSS) against a server playing the attack, and asserts that the call ends
// with an error naming the cause (or, for the one-byte framing of a valid message, the right
// message) and that the client's peak RSS stays within RSS_BUDGET_MIB of its resting RSS.
// The floods are played by tests/support/h2peer, a Go program whose frames are written by
// golang.org/x/net/http2's Framer and hpack.Encoder (built by tests/run.ts, path in H2PEER); the
// timeouts by tests/support/h2rawpeer.ts (raw frames over node:tls). Every flood is sized so that
// the client before this hardening went clearly over the budget or never ended
// (`H2PROBE=<old tree>/tests/support/h2probe.ts` runs the suite against another copy of lib/).

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GrpcChannelOptions } from "../../lib/grpc.ts";
import { GrpcStatus } from "../../lib/taloserrors.ts";
import { until } from "../support/cluster.ts";
import type { ProbeReport, ProbeRequest } from "../support/h2probe.ts";
import { RawH2Peer, type RawScenario } from "../support/h2rawpeer.ts";
import { createCA } from "../support/pki.ts";

/** The client's peak RSS may exceed its resting RSS (~43 MiB for the probe) by at most this. */
const RSS_BUDGET_MIB = 48;
const PROBE = process.env.H2PROBE ?? join(import.meta.dir, "../support/h2probe.ts");
const H2PEER = process.env.H2PEER ?? "";
const ENHANCE_YOUR_CALM = 0xb;

let dir: string;
let creds: { ca: string; cert: string; key: string };
let client: { ca: string; cert: string; key: string };

beforeAll(async () => {
  if (!H2PEER || !existsSync(H2PEER)) {
    throw new Error(
      `H2PEER must name the Go hostile peer binary (found "${H2PEER}"): run through npm test, whose tests/run.ts builds tests/support/h2peer with tests/support/h2peer-bins.sh`,
    );
  }
  const ca = await createCA("h2-hostile");
  const server = await ca.issue({ cn: "apid", usage: "server", ips: ["127.0.0.1"], dns: ["talos"] });
  const c = await ca.issue({ cn: "ccm", usage: "client" });
  creds = { ca: ca.cert, cert: server.cert, key: server.key };
  client = { ca: ca.cert, cert: c.cert, key: c.key };
  dir = mkdtempSync(join(tmpdir(), "h2-hostile-"));
  writeFileSync(join(dir, "ca.pem"), ca.cert);
  writeFileSync(join(dir, "server.pem"), server.cert);
  writeFileSync(join(dir, "server-key.pem"), server.key);
});

/** The Go peers of the running test, stopped after it. */
const peers: GoPeer[] = [];

afterEach(() => {
  for (const p of peers.splice(0)) p.stop();
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** One event line of the Go peer. */
interface PeerEvent {
  event: string;
  conn?: number;
  stream?: number;
  code?: number;
  frames?: number;
  what?: string;
  err?: string;
  port?: number;
}

/** The Go peer playing `scenario` with a flood of `n`; its events as they come. */
class GoPeer {
  readonly events: PeerEvent[] = [];
  readonly #proc: ChildProcess;
  #stderr = "";
  #partial = "";

  constructor(scenario: string, n: number) {
    this.#proc = spawn(
      H2PEER,
      [
        `-cert=${join(dir, "server.pem")}`,
        `-key=${join(dir, "server-key.pem")}`,
        `-ca=${join(dir, "ca.pem")}`,
        `-scenario=${scenario}`,
        `-n=${n}`,
      ],
      // Its stdin is ours: it exits when this process does, however that ends.
      { stdio: ["pipe", "pipe", "pipe"] },
    );
    this.#proc.stdout?.on("data", (d: Buffer) => {
      const lines = (this.#partial + d.toString()).split("\n");
      this.#partial = lines.pop() ?? "";
      for (const l of lines) if (l) this.events.push(JSON.parse(l) as PeerEvent);
    });
    this.#proc.stderr?.on("data", (d: Buffer) => {
      this.#stderr += d.toString();
    });
  }

  async port(): Promise<number> {
    await until(
      () => this.events.some((e) => e.event === "listening") || this.#proc.exitCode !== null,
      "the Go peer to listen",
    );
    const p = this.events.find((e) => e.event === "listening")?.port;
    if (p === undefined) throw new Error(`the Go peer did not start: ${this.#stderr}`);
    return p;
  }

  of(event: string): PeerEvent[] {
    return this.events.filter((e) => e.event === event);
  }

  stop(): void {
    this.#proc.kill("SIGKILL");
  }
}

/** Runs the probe against `port` and returns its report (logged, for the before/after figures). */
async function probe(what: string, port: number, req: Omit<ProbeRequest, "port" | "ca" | "cert" | "key">) {
  const full: ProbeRequest = { port, ...client, ...req };
  const child = spawn(process.execPath, [PROBE, JSON.stringify(full)], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  const line = out.trim().split("\n").pop() ?? "";
  if (code !== 0 || !line.startsWith("{")) throw new Error(`the probe failed (exit ${code}): ${err}${out}`);
  const report = JSON.parse(line) as ProbeReport;
  const growth = report.peakMiB - report.baselineMiB;
  console.log(
    `h2-hostile ${what}: ${report.outcome} in ${report.elapsedMs} ms, RSS ${report.baselineMiB} -> ${report.peakMiB} MiB (+${growth.toFixed(1)}): ${report.error?.message ?? `${report.messages} message(s)`}`,
  );
  return { ...report, growthMiB: growth };
}

/** A Go peer for `scenario`, the probe against it, and the peer's events. */
async function againstGo(
  scenario: string,
  n: number,
  req: Omit<ProbeRequest, "port" | "ca" | "cert" | "key">,
) {
  const peer = new GoPeer(scenario, n);
  peers.push(peer);
  const report = await probe(`${scenario} (${n})`, await peer.port(), req);
  return { report, peer };
}

/** The GOAWAY codes the Go peer received, once it saw the connection close. */
async function goawayCodes(peer: GoPeer): Promise<number[]> {
  await until(() => peer.of("closed").length > 0, "the connection to close", 5_000);
  return peer.of("goaway").map((e) => e.code as number);
}

describe("the HTTP/2 client against floods written by Go's x/net/http2 Framer", () => {
  test("a 2 MiB message in one-byte DATA frames (the review's case; CVE-2019-9511 dribble): received whole, memory bounded by the message, not the frames", async () => {
    const size = 2 << 20;
    const { report } = await againstGo("data-dribble", size, { action: "stream", limitMs: 30_000 });
    const want = new Uint8Array(size);
    for (let i = 0; i < size; i++) want[i] = (i * 31 + 7) & 0xff;
    expect(report.outcome).toBe("ok");
    expect(report.firstLength).toBe(size);
    expect(report.digest).toBe(createHash("sha256").update(want).digest("hex"));
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("a 1 MiB message whose 16 KiB frames each come one byte per TLS record: received whole, memory bounded by the frame, not the reads", async () => {
    const size = 1 << 20;
    const { report } = await againstGo("split-frames", size, { action: "stream", limitMs: 60_000 });
    const want = new Uint8Array(size);
    for (let i = 0; i < size; i++) want[i] = (i * 31 + 7) & 0xff;
    expect(report.outcome).toBe("ok");
    expect(report.firstLength).toBe(size);
    expect(report.digest).toBe(createHash("sha256").update(want).digest("hex"));
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("CONTINUATION flood (2024): 2,000,000 empty CONTINUATION frames end the connection at the 9th with ENHANCE_YOUR_CALM", async () => {
    const { report, peer } = await againstGo("continuation-flood", 2_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(report.error?.message).toContain(
      "ENHANCE_YOUR_CALM: a header block of more than 8 CONTINUATION frames",
    );
    expect(await goawayCodes(peer)).toEqual([ENHANCE_YOUR_CALM]);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("PING flood while the server never reads (CVE-2019-9512): the connection ends once 10,000 acknowledgements wait unsent", async () => {
    const { report, peer } = await againstGo("ping-flood", 3_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain(
      "ENHANCE_YOUR_CALM: the server sent PING or SETTINGS frames without reading our acknowledgements",
    );
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
    // The peer was cut off before its flood was through.
    await until(() => peer.of("sent").length > 0, "the flood to stop", 5_000);
    expect(peer.of("sent")[0]?.frames).toBeLessThan(3_000_000);
  });

  test("SETTINGS flood while the server never reads (CVE-2019-9515): the connection ends once 10,000 acknowledgements wait unsent", async () => {
    const { report, peer } = await againstGo("settings-flood", 3_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain(
      "ENHANCE_YOUR_CALM: the server sent PING or SETTINGS frames without reading our acknowledgements",
    );
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
    await until(() => peer.of("sent").length > 0, "the flood to stop", 5_000);
    expect(peer.of("sent")[0]?.frames).toBeLessThan(3_000_000);
  });

  test("empty DATA frames without END_STREAM (CVE-2019-9518): the 10,001st ends the connection with ENHANCE_YOUR_CALM", async () => {
    const { report, peer } = await againstGo("empty-data", 3_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain(
      "ENHANCE_YOUR_CALM: the server sent over 10000 frames that carry nothing",
    );
    expect(report.error?.message).toContain("the last: empty DATA");
    expect(await goawayCodes(peer)).toEqual([ENHANCE_YOUR_CALM]);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("PRIORITY flood (CVE-2019-9513, the resource loop: a client keeps no priority tree; the frames are counted as glitches)", async () => {
    const { report, peer } = await againstGo("priority-flood", 3_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain("the last: PRIORITY");
    expect(await goawayCodes(peer)).toEqual([ENHANCE_YOUR_CALM]);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("header fields of empty name and value (CVE-2019-9516): 60,000 in one block are refused at the 64 KiB header list, counting 32 bytes each", async () => {
    const { report, peer } = await againstGo("zero-headers", 60_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain("COMPRESSION_ERROR: header list over 65536 bytes");
    expect(await goawayCodes(peer)).toEqual([0x9]);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("reset flood (CVE-2019-9514): a stream error costs one RST_STREAM; 3,000,000 more of it on the reset stream cost none", async () => {
    const { report, peer } = await againstGo("reset-flood", 3_000_000, { action: "stream" });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.INTERNAL);
    expect(report.error?.message).toContain("the server sent WINDOW_UPDATE of 0 on the stream");
    // The flood is over (the probe closed the connection when its call ended), so every
    // RST_STREAM the client sent has been read.
    await until(() => peer.of("sent").length > 0, "the flood to stop", 10_000);
    expect(peer.of("rst").map((e) => [e.stream, e.code])).toEqual([[1, 0x1]]);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("internal data buffering (CVE-2019-9517): a reader that stops holds at most one stream window of empty messages, packed; the overrun is a FLOW_CONTROL_ERROR", async () => {
    const { report } = await againstGo("window-overrun", 256, { action: "stall", stallMs: 1_000 });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.INTERNAL);
    expect(report.error?.message).toContain("the server sent DATA beyond the stream's flow-control window");
    // What was within the window was delivered: 64 DATA frames of 3,276 empty messages.
    expect(report.messages).toBe(Math.floor((1 << 20) / 16_380) * 3_276);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("internal data buffering at the Talos client: a List of 6,000,000 one-byte messages stops at 8 MiB counted, final, not retried", async () => {
    const { report, peer } = await againstGo("list-flood", 6_000_000, { action: "talos-list", attempts: 3 });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe("internal");
    expect(report.error?.message).toContain("List response over 8388608 bytes");
    expect(peer.of("headers").length).toBe(1);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("a server that reads nothing but keeps sending (PINGs): the connection is dropped once our writes have waited the keepalive timeout", async () => {
    const request = 8 << 20;
    // The PINGs (every 50 ms) keep the connection from ever being silent for keepaliveMs.
    const channel = { keepaliveMs: 1_000, keepaliveTimeoutMs: 300 };
    const { report } = await againstGo("no-read", 400, { action: "stream", requestBytes: request, channel });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(report.error?.message).toMatch(/the server read nothing we sent for \d+ ms/);
    expect(report.elapsedMs).toBeLessThan(10_000);
    // The request itself (8 MiB, its framed copy and the socket's) is the client's own memory.
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB + 3 * (request >> 20));
  });

  test("rapid reset seen from the client (CVE-2023-44487): every request refused at once; the Talos client's retries back off instead of looping", async () => {
    const { report, peer } = await againstGo("rapid-reset", 0, { action: "talos-get", attempts: 4 });
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe("unavailable");
    expect(report.error?.message).toContain("Stream refused by server");
    // Four attempts, three backoffs of at least half of 100, 200 and 400 ms (jitter).
    expect(peer.of("headers").length).toBe(4);
    expect(report.elapsedMs).toBeGreaterThanOrEqual(350);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });
});

describe("the HTTP/2 client against servers that never start a call (raw frames over node:tls)", () => {
  const TIMEOUT_MS = 400;
  /** The timeout under test is TIMEOUT_MS, the other one five times as long. */
  const settingsFirst = { settingsTimeoutMs: TIMEOUT_MS, streamStartTimeoutMs: 5 * TIMEOUT_MS };
  const startFirst = { settingsTimeoutMs: 5 * TIMEOUT_MS, streamStartTimeoutMs: TIMEOUT_MS };

  async function againstRaw(scenario: RawScenario, channel: Partial<GrpcChannelOptions>, holdMs = 0) {
    const peer = await RawH2Peer.start(creds, scenario, holdMs);
    try {
      const report = await probe(scenario, peer.port, { action: "stream", channel, limitMs: 20_000 });
      return { report, peer };
    } finally {
      peer.stop();
    }
  }

  test("a server that sends no SETTINGS: SETTINGS_TIMEOUT after settingsTimeoutMs, not the 310 s keepalive", async () => {
    const { report } = await againstRaw("no-settings", settingsFirst);
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(report.error?.message).toContain(
      `SETTINGS_TIMEOUT: the server sent no SETTINGS within ${TIMEOUT_MS} ms`,
    );
    expect(report.elapsedMs).toBeLessThan(10_000);
    expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
  });

  test("a server that never acknowledges our SETTINGS: SETTINGS_TIMEOUT", async () => {
    const { report } = await againstRaw("no-settings-ack", settingsFirst);
    expect(report.outcome).toBe("error");
    expect(report.error?.message).toContain(
      `SETTINGS_TIMEOUT: the server did not acknowledge our SETTINGS within ${TIMEOUT_MS} ms`,
    );
    expect(report.elapsedMs).toBeLessThan(10_000);
  });

  test("MAX_CONCURRENT_STREAMS 0: a call without a deadline fails UNAVAILABLE after streamStartTimeoutMs", async () => {
    const { report, peer } = await againstRaw("max-streams-0", startFirst);
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(report.error?.message).toContain(
      `no stream slot within ${TIMEOUT_MS} ms (the server allows 0 concurrent streams)`,
    );
    expect(peer.requests).toBe(0);
    expect(report.elapsedMs).toBeLessThan(10_000);
  });

  test("a server that takes the request and never answers: UNAVAILABLE after streamStartTimeoutMs", async () => {
    const { report, peer } = await againstRaw("no-headers", startFirst);
    expect(report.outcome).toBe("error");
    expect(report.error?.code).toBe(GrpcStatus.UNAVAILABLE);
    expect(report.error?.message).toContain(`no response headers within ${TIMEOUT_MS} ms`);
    expect(peer.requests).toBe(1);
    expect(report.elapsedMs).toBeLessThan(10_000);
  });

  test("control: a watch that got its headers may then be silent for many times the stream-start timeout", async () => {
    const { report } = await againstRaw("idle-watch", startFirst, 4 * TIMEOUT_MS);
    expect(report.outcome).toBe("ok");
    expect(report.messages).toBe(2);
    expect(report.elapsedMs).toBeGreaterThanOrEqual(4 * TIMEOUT_MS);
  });
});
