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
import { PEER_LIMITS } from "../../lib/peerlimits.ts";
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

/** A probe's call: what it does against the peer. */
type ProbeCall = Omit<ProbeRequest, "port" | "ca" | "cert" | "key">;

/** Runs the probe against `port` and returns its report (logged, for the before/after figures). */
async function probe(what: string, port: number, req: ProbeCall) {
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
async function againstGo(scenario: string, n: number, req: ProbeCall) {
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

type Report = Awaited<ReturnType<typeof probe>>;

/** A valid message of `size` bytes the Go peer delivers in a hostile framing. */
interface Framing {
  name: string;
  scenario: string;
  size: number;
  limitMs: number;
}

/** An attack the call must end with an error for. */
interface Attack<Peer> {
  name: string;
  /** The Go peer's scenario, or the raw peer's (then `n` is unused). */
  scenario: string;
  /** The flood's size (the Go peer's -n). */
  n?: number;
  call?: ProbeCall;
  /** The error's gRPC or Talos code. */
  code?: number | string;
  /** What the error's message says (each). */
  says: Array<string | RegExp>;
  /** The GOAWAY codes the peer received. */
  goaway?: number[];
  /** The peer was cut off before its flood of `n` was through. */
  cutShort?: boolean;
  /** The call ended within 10 s (a timeout, not the 310 s keepalive). */
  quick?: boolean;
  /** The peak RSS over the resting RSS may be this (default RSS_BUDGET_MIB); null: not checked. */
  budgetMiB?: number | null;
  /** The attack's own checks. */
  check?: (report: Report, peer: Peer) => unknown;
}

/** Expects the call against `attack` (`report` from its peer) to fail as the attack says. */
async function expectRefused<Peer>(attack: Attack<Peer>, report: Report, peer: Peer): Promise<void> {
  expect(report.outcome).toBe("error");
  if (attack.code !== undefined) expect(report.error?.code).toBe(attack.code);
  for (const says of attack.says)
    if (typeof says === "string") expect(report.error?.message).toContain(says);
    else expect(report.error?.message).toMatch(says);
  if (attack.quick) expect(report.elapsedMs).toBeLessThan(10_000);
  await attack.check?.(report, peer);
  if (attack.budgetMiB !== null) expect(report.growthMiB).toBeLessThan(attack.budgetMiB ?? RSS_BUDGET_MIB);
}

const PING_OR_SETTINGS =
  "ENHANCE_YOUR_CALM: the server sent PING or SETTINGS frames without reading our acknowledgements";

const FRAMINGS: Framing[] = [
  {
    name: "a 2 MiB message in one-byte DATA frames (the review's case; CVE-2019-9511 dribble): received whole, memory bounded by the message, not the frames",
    scenario: "data-dribble",
    size: 2 << 20,
    limitMs: 30_000,
  },
  {
    name: "a 1 MiB message whose 16 KiB frames each come one byte per TLS record: received whole, memory bounded by the frame, not the reads",
    scenario: "split-frames",
    size: 1 << 20,
    limitMs: 60_000,
  },
];

const FLOODS: Array<Attack<GoPeer>> = [
  {
    name: "CONTINUATION flood (2024): 2,000,000 empty CONTINUATION frames end the connection at the 9th with ENHANCE_YOUR_CALM",
    scenario: "continuation-flood",
    n: 2_000_000,
    code: GrpcStatus.UNAVAILABLE,
    says: ["ENHANCE_YOUR_CALM: a header block of more than 8 CONTINUATION frames"],
    goaway: [ENHANCE_YOUR_CALM],
  },
  {
    name: "PING flood while the server never reads (CVE-2019-9512): the connection ends once 10,000 acknowledgements wait unsent",
    scenario: "ping-flood",
    n: 3_000_000,
    says: [PING_OR_SETTINGS],
    cutShort: true,
  },
  {
    name: "SETTINGS flood while the server never reads (CVE-2019-9515): the connection ends once 10,000 acknowledgements wait unsent",
    scenario: "settings-flood",
    n: 3_000_000,
    says: [PING_OR_SETTINGS],
    cutShort: true,
  },
  {
    name: "empty DATA frames without END_STREAM (CVE-2019-9518): the 10,001st ends the connection with ENHANCE_YOUR_CALM",
    scenario: "empty-data",
    n: 3_000_000,
    says: ["ENHANCE_YOUR_CALM: the server sent over 10000 frames that carry nothing", "the last: empty DATA"],
    goaway: [ENHANCE_YOUR_CALM],
  },
  {
    name: "PRIORITY flood (CVE-2019-9513, the resource loop: a client keeps no priority tree; the frames are counted as glitches)",
    scenario: "priority-flood",
    n: 3_000_000,
    says: ["the last: PRIORITY"],
    goaway: [ENHANCE_YOUR_CALM],
  },
  {
    name: "header fields of empty name and value (CVE-2019-9516): 60,000 in one block are refused at the 64 KiB header list, counting 32 bytes each",
    scenario: "zero-headers",
    n: 60_000,
    says: ["COMPRESSION_ERROR: header list over 65536 bytes"],
    goaway: [0x9],
  },
  {
    name: "reset flood (CVE-2019-9514): a stream error costs one RST_STREAM; 3,000,000 more of it on the reset stream cost none",
    scenario: "reset-flood",
    n: 3_000_000,
    code: GrpcStatus.INTERNAL,
    says: ["the server sent WINDOW_UPDATE of 0 on the stream"],
    check: async (_, peer) => {
      // The flood is over (the probe closed the connection when its call ended), so every
      // RST_STREAM the client sent has been read.
      await until(() => peer.of("sent").length > 0, "the flood to stop", 10_000);
      expect(peer.of("rst").map((e) => [e.stream, e.code])).toEqual([[1, 0x1]]);
    },
  },
  {
    name: "internal data buffering (CVE-2019-9517): a reader that stops holds at most one stream window of empty messages, packed; the overrun is a FLOW_CONTROL_ERROR",
    scenario: "window-overrun",
    n: 256,
    call: { action: "stall", stallMs: 1_000 },
    code: GrpcStatus.INTERNAL,
    says: ["the server sent DATA beyond the stream's flow-control window"],
    // What was within the window was delivered: 64 DATA frames of 3,276 empty messages.
    check: (report) => expect(report.messages).toBe(Math.floor((1 << 20) / 16_380) * 3_276),
  },
  {
    // One-byte messages reach the per-machine count (talos_addresses, lib/peerlimits.ts) long before
    // the List's 8 MiB byte budget (taloscallpolicy MAX_LIST_BYTES), which bounds fewer, larger ones.
    name: "internal data buffering at the Talos client: a List of 6,000,000 one-byte messages stops at the per-machine bound of 1,024 addresses, final, not retried",
    scenario: "list-flood",
    n: 6_000_000,
    call: { action: "talos-list", attempts: 3 },
    code: "decode",
    says: [`over the bound of ${PEER_LIMITS.talos_addresses.value}`],
    check: (_, peer) => expect(peer.of("headers").length).toBe(1),
  },
  {
    name: "a server that reads nothing but keeps sending (PINGs): the connection is dropped once our writes have waited the keepalive timeout",
    scenario: "no-read",
    n: 400,
    // The PINGs (every 50 ms) keep the connection from ever being silent for keepaliveMs.
    call: {
      action: "stream",
      requestBytes: 8 << 20,
      channel: { keepaliveMs: 1_000, keepaliveTimeoutMs: 300 },
    },
    code: GrpcStatus.UNAVAILABLE,
    says: [/the server read nothing we sent for \d+ ms/],
    quick: true,
    // The request itself (8 MiB, its framed copy and the socket's) is the client's own memory.
    budgetMiB: RSS_BUDGET_MIB + 3 * 8,
  },
  {
    name: "rapid reset seen from the client (CVE-2023-44487): every request refused at once; the Talos client's retries back off instead of looping",
    scenario: "rapid-reset",
    n: 0,
    call: { action: "talos-get", attempts: 4 },
    code: "unavailable",
    says: ["Stream refused by server"],
    check: (report, peer) => {
      // Four attempts, three backoffs of at least half of 100, 200 and 400 ms (jitter).
      expect(peer.of("headers").length).toBe(4);
      expect(report.elapsedMs).toBeGreaterThanOrEqual(350);
    },
  },
];

describe("the HTTP/2 client against floods written by Go's x/net/http2 Framer", () => {
  for (const f of FRAMINGS) {
    test(f.name, async () => {
      const { report } = await againstGo(f.scenario, f.size, { action: "stream", limitMs: f.limitMs });
      const want = new Uint8Array(f.size);
      for (let i = 0; i < f.size; i++) want[i] = (i * 31 + 7) & 0xff;
      expect(report.outcome).toBe("ok");
      expect(report.firstLength).toBe(f.size);
      expect(report.digest).toBe(createHash("sha256").update(want).digest("hex"));
      expect(report.growthMiB).toBeLessThan(RSS_BUDGET_MIB);
    });
  }

  for (const f of FLOODS) {
    test(f.name, async () => {
      const n = f.n ?? 0;
      const { report, peer } = await againstGo(f.scenario, n, f.call ?? { action: "stream" });
      await expectRefused(f, report, peer);
      if (f.goaway) expect(await goawayCodes(peer)).toEqual(f.goaway);
      if (f.cutShort) {
        await until(() => peer.of("sent").length > 0, "the flood to stop", 5_000);
        expect(peer.of("sent")[0]?.frames).toBeLessThan(n);
      }
    });
  }
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

  const STALLS: Array<Attack<RawH2Peer> & { scenario: RawScenario; channel: Partial<GrpcChannelOptions> }> = [
    {
      name: "a server that sends no SETTINGS: SETTINGS_TIMEOUT after settingsTimeoutMs, not the 310 s keepalive",
      scenario: "no-settings",
      channel: settingsFirst,
      code: GrpcStatus.UNAVAILABLE,
      says: [`SETTINGS_TIMEOUT: the server sent no SETTINGS within ${TIMEOUT_MS} ms`],
      quick: true,
    },
    {
      name: "a server that never acknowledges our SETTINGS: SETTINGS_TIMEOUT",
      scenario: "no-settings-ack",
      channel: settingsFirst,
      says: [`SETTINGS_TIMEOUT: the server did not acknowledge our SETTINGS within ${TIMEOUT_MS} ms`],
      quick: true,
      budgetMiB: null,
    },
    {
      name: "MAX_CONCURRENT_STREAMS 0: a call without a deadline fails UNAVAILABLE after streamStartTimeoutMs",
      scenario: "max-streams-0",
      channel: startFirst,
      code: GrpcStatus.UNAVAILABLE,
      says: [`no stream slot within ${TIMEOUT_MS} ms (the server allows 0 concurrent streams)`],
      quick: true,
      budgetMiB: null,
      check: (_, peer) => expect(peer.requests).toBe(0),
    },
    {
      name: "a server that takes the request and never answers: UNAVAILABLE after streamStartTimeoutMs",
      scenario: "no-headers",
      channel: startFirst,
      code: GrpcStatus.UNAVAILABLE,
      says: [`no response headers within ${TIMEOUT_MS} ms`],
      quick: true,
      budgetMiB: null,
      check: (_, peer) => expect(peer.requests).toBe(1),
    },
  ];

  for (const a of STALLS) {
    test(a.name, async () => {
      const { report, peer } = await againstRaw(a.scenario, a.channel);
      await expectRefused(a, report, peer);
    });
  }

  test("control: a watch that got its headers may then be silent for many times the stream-start timeout", async () => {
    const { report } = await againstRaw("idle-watch", startFirst, 4 * TIMEOUT_MS);
    expect(report.outcome).toBe("ok");
    expect(report.messages).toBe(2);
    expect(report.elapsedMs).toBeGreaterThanOrEqual(4 * TIMEOUT_MS);
  });
});
