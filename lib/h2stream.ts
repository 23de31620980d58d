// One HTTP/2 request's stream, as lib/h2connection.ts keeps it, and the handler it reports to (the
// gRPC call of lib/grpc.ts implements it): one small object per stream, with no closures or
// listeners of its own.

import { H2Code } from "./h2framer.ts";
import type { H2Headers } from "./h2headerblock.ts";

/** What a stream reports; the gRPC call implements it, so a stream needs no closures of its own. */
export interface H2StreamHandler {
  /** The response headers (`trailers` false), then the trailers (`trailers` true). */
  onHeaders(headers: H2Headers, trailers: boolean): void;
  /**
   * A DATA payload: bytes `start` to `end` of `buf`, a chunk the socket delivered (up to 512 KiB
   * in Bun), passed without a view of its own so that small frames cost nothing per frame. A view
   * of it keeps the whole chunk alive: copy what is kept of a small part.
   */
  onData(buf: Uint8Array, start: number, end: number): void;
  /**
   * The stream closed, once: `code` is NO_ERROR after the server ended it, the RST_STREAM code after
   * a reset by either side, or undefined when the connection was lost (see the session's `error`).
   * `reason` says why when the client reset the stream itself over what the server did or did not
   * do: with CANCEL, the stream did not start in time (H2ConnectOptions.streamStartTimeoutMs);
   * with another code, the server's stream error of that code.
   */
  onClose(code: number | undefined, reason?: string): void;
}

/** What a stream asks of its connection (lib/h2connection.ts' H2Connection). */
export interface H2StreamOwner {
  /** Resets `stream` with `code` (RST_STREAM) unless it has closed. */
  reset(stream: H2Stream, code: number): void;
  /** Returns flow-control credit for `bytes` more delivered on `stream` (0: what a pause held back). */
  credit(stream: H2Stream, bytes: number): void;
}

/** One request's stream. */
export class H2Stream {
  /** 0 until the stream is started (it may wait for MAX_CONCURRENT_STREAMS). */
  id = 0;
  /** What the peer lets us send on this stream. */
  sendWindow = 0;
  /** Bytes received and delivered but not yet returned to the peer by WINDOW_UPDATE. */
  unacked = 0;
  #paused = false;
  /** The response headers arrived (later HEADERS are trailers). */
  gotHeaders = false;
  /** The request body not sent yet (flow control), with END_STREAM after it. */
  pending: Uint8Array | undefined;
  /** The stream closed (its handler is told once). */
  closed = false;

  constructor(
    /** The connection that started it. */
    readonly connection: H2StreamOwner,
    /** Where its headers, data and close go. */
    readonly handler: H2StreamHandler,
    /** The encoded request headers, until the stream starts. */
    public block: Uint8Array | undefined,
  ) {}

  /** Whether the stream stopped returning flow-control credit (its reader is behind). */
  get paused(): boolean {
    return this.#paused;
  }

  /** Stops returning flow-control credit: the server stops after a stream window of data. */
  pause(): void {
    this.#paused = true;
  }

  /** Returns the credit held back while paused. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.connection.credit(this, 0);
  }

  /** Resets the stream with `code` (default CANCEL); its handler's onClose follows. Idempotent. */
  cancel(code: number = H2Code.CANCEL): void {
    this.connection.reset(this, code);
  }
}
