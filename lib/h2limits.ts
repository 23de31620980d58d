// The limits the HTTP/2 connection (lib/h2connection.ts) holds a server to, and the glitch meter it
// keeps for one of them: what a hostile HTTP/2 server (a compromised apid, or anyone holding its
// certificate) may make the client queue, buffer or wait for. Each value is compared with nghttp2
// (lib/nghttp2_session.h, v1.70) and Go's golang.org/x/net/http2 (v0.55.0) and
// google.golang.org/grpc (v1.81.0), which document the same classes of attack (the 2019 HTTP/2
// advisories, the 2023 rapid reset, the 2024 CONTINUATION flood).

/**
 * CONTINUATION frames accepted after one HEADERS frame (the 2024 CONTINUATION flood): empty
 * fragments cost no header bytes, so the block's byte cap alone does not bound them. nghttp2's
 * NGHTTP2_DEFAULT_MAX_CONTINUATIONS is 8; a 64 KiB block in frames of the 16 KiB we accept needs 3.
 */
export const MAX_CONTINUATIONS = 8;

/**
 * PING and SETTINGS acknowledgements handed to the socket and not yet written out (CVE-2019-9512,
 * CVE-2019-9515: a server that floods them and does not read). Go's server allows
 * maxQueuedControlFrames = 10000 (server.go), nghttp2 NGHTTP2_DEFAULT_MAX_OBQ_FLOOD_ITEM = 1000;
 * an acknowledgement is 17 bytes here, so 10,000 are 170 KB.
 */
export const MAX_UNSENT_REPLIES = 10_000;

/** Entries in one SETTINGS frame (nghttp2's NGHTTP2_DEFAULT_MAX_SETTINGS is 32, CVE-2020-11080). */
export const MAX_SETTINGS_ENTRIES = 32;

/**
 * Frames that carry nothing a client needs (empty DATA without END_STREAM, CVE-2019-9518; PRIORITY,
 * CVE-2019-9513; unknown frame types), as a token bucket: a burst of this many, refilled at
 * GLITCH_RATE_PER_S. nghttp2's glitch limiter: NGHTTP2_DEFAULT_GLITCH_BURST 10000, _RATE 330/s.
 */
export const GLITCH_BURST = 10_000;
export const GLITCH_RATE_PER_S = 330;

/**
 * How long after TLS is up the server's SETTINGS and its acknowledgement of ours may take
 * (RFC 9113 §3.4 and §6.5.3, SETTINGS_TIMEOUT). grpc-go's client waits for the server preface
 * within its 20 s connect deadline, Go's server gives a client 10 s (prefaceTimeout); TLS has its
 * own 20 s connect timeout before this one starts.
 */
export const DEFAULT_SETTINGS_TIMEOUT_MS = 10_000;

/**
 * How long a request without a deadline may wait for a stream slot (MAX_CONCURRENT_STREAMS) and
 * then for its response headers. Above apid's own 20 s to dial a node it proxies to (grpc-go's
 * minConnectTimeout), so a slow answer from apid is still an answer. Neither Go's transport nor
 * nghttp2 has one (Go waits for the caller's context): the CCM's watches have no deadline.
 */
export const DEFAULT_STREAM_START_TIMEOUT_MS = 30_000;

/**
 * A token bucket of glitches (see GLITCH_BURST): take() spends one and says whether any was left.
 * @example const g = new GlitchMeter(); if (!g.take(performance.now())) closeConnection();
 */
export class GlitchMeter {
  #tokens: number;
  /** The clock at the last take(); -1 before the first. */
  #at = -1;
  readonly #burst: number;
  readonly #perMs: number;

  constructor(burst = GLITCH_BURST, ratePerS = GLITCH_RATE_PER_S) {
    this.#burst = burst;
    this.#tokens = burst;
    this.#perMs = ratePerS / 1000;
  }

  /** Spends one glitch at `nowMs` (a monotonic clock); false once the bucket is empty. */
  take(nowMs: number): boolean {
    if (this.#at >= 0) this.#tokens = Math.min(this.#burst, this.#tokens + (nowMs - this.#at) * this.#perMs);
    this.#at = nowMs;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}
