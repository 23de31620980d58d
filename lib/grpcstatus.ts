// gRPC statuses as a client reads them (grpc/grpc doc/PROTOCOL-HTTP2.md and
// doc/http-grpc-status-mapping.md): the error of a call, from trailers, trailers-only headers, HTTP
// statuses and RST_STREAM codes, and the `grpc-timeout` a deadline is sent as. Part of the gRPC
// family; lib/grpc.ts is its public surface.

import { own } from "./dict.ts";
import { H2Code } from "./h2framer.ts";
import type { H2Headers } from "./h2headerblock.ts";
import { GrpcStatus } from "./taloserrors.ts";

const STATUS_NAMES = new Map<number, string>(Object.entries(GrpcStatus).map(([name, code]) => [code, name]));

/**
 * A call that ended with a non-OK gRPC status, received or synthesized; `code` and `details` are
 * what lib/talos.ts's statusError() reads.
 */
export class GrpcError extends Error {
  override readonly name = "GrpcError";
  /** The gRPC status code (GrpcStatus). */
  readonly code: number;
  /** The status message, percent-decoded. */
  readonly details: string;
  constructor(code: number, details: string, opts: { cause?: unknown } = {}) {
    super(`${code} ${STATUS_NAMES.get(code) ?? "UNKNOWN"}: ${details}`, opts);
    this.code = code;
    this.details = details;
  }
}

/**
 * The gRPC status of a response without `grpc-status`, from its HTTP status
 * (doc/http-grpc-status-mapping.md); 200 means the status is missing, hence UNKNOWN.
 */
export function statusFromHttp(httpStatus: number): number {
  switch (httpStatus) {
    case 400:
    case 431:
      return GrpcStatus.INTERNAL;
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 403:
      return GrpcStatus.PERMISSION_DENIED;
    case 404:
      return GrpcStatus.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcStatus.UNAVAILABLE;
    default:
      return GrpcStatus.UNKNOWN;
  }
}

/**
 * The error of a stream reset by the server before it sent a status (RST_STREAM mapping of
 * PROTOCOL-HTTP2.md): REFUSED_STREAM means nothing was processed, CANCEL a server-side cancel.
 */
export function errorFromRstCode(rstCode: number): GrpcError {
  switch (rstCode) {
    case H2Code.REFUSED_STREAM:
      return new GrpcError(GrpcStatus.UNAVAILABLE, "Stream refused by server");
    case H2Code.CANCEL:
      return new GrpcError(GrpcStatus.CANCELLED, "Call cancelled by server");
    case H2Code.ENHANCE_YOUR_CALM:
      return new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, "Bandwidth exhausted (ENHANCE_YOUR_CALM)");
    case H2Code.INADEQUATE_SECURITY:
      return new GrpcError(GrpcStatus.PERMISSION_DENIED, "Protocol not secure enough");
    case H2Code.NO_ERROR:
      return new GrpcError(GrpcStatus.INTERNAL, "Stream ended without a gRPC status");
    default:
      return new GrpcError(GrpcStatus.INTERNAL, `Stream reset with HTTP/2 error code ${rstCode}`);
  }
}

/**
 * Decodes a `grpc-message` value: runs of valid `%XX` escapes are UTF-8 bytes, anything else
 * (broken escapes included) stays as it is, and invalid UTF-8 becomes U+FFFD; never throws.
 * @example decodeGrpcMessage("caf%C3%A9%20down") // "café down"
 */
export function decodeGrpcMessage(value: string): string {
  if (!value.includes("%")) return value;
  const utf8 = new TextDecoder();
  return value.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    const bytes = new Uint8Array(run.length / 3);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Number.parseInt(run.slice(i * 3 + 1, i * 3 + 3), 16);
    return utf8.decode(bytes);
  });
}

/** Response headers or trailers as lib/h2connection.ts hands them over. */
export type Headers = H2Headers;

function headerValue(headers: Headers, name: string): string | undefined {
  const v = own(headers, name);
  return v === undefined ? undefined : String(v);
}

/**
 * The status carried by response headers or trailers: undefined without `grpc-status`, null for
 * OK, else the error. A malformed `grpc-status` is UNKNOWN, as its value cannot be trusted.
 */
export function statusFromHeaders(headers: Headers): GrpcError | null | undefined {
  const raw = headerValue(headers, "grpc-status");
  if (raw === undefined) return undefined;
  const message = decodeGrpcMessage(headerValue(headers, "grpc-message") ?? "");
  if (!/^\d{1,9}$/.test(raw))
    return new GrpcError(GrpcStatus.UNKNOWN, `Invalid grpc-status "${raw}": ${message}`);
  const code = Number(raw);
  return code === GrpcStatus.OK ? null : new GrpcError(code, message);
}

/**
 * The error a response's headers announce before any message: a non-200 HTTP status or a
 * content-type that is not gRPC (a proxy or a web server answering). undefined when the
 * response is a gRPC one.
 */
export function errorFromResponseHeaders(headers: Headers): GrpcError | undefined {
  const status = Number(headers[":status"]);
  if (status !== 200) {
    return new GrpcError(statusFromHttp(status), `Received HTTP status code ${status}`);
  }
  const type = headerValue(headers, "content-type") ?? "";
  if (!type.startsWith("application/grpc")) {
    return new GrpcError(GrpcStatus.UNKNOWN, `Received a response with content-type "${type}"`);
  }
  return undefined;
}

/**
 * A `grpc-timeout` value for a deadline `ms` from now: the finest unit (m, S, M, H) whose value
 * fits the 8 digits the protocol allows, rounded up so the server never gives up first.
 * @throws {RangeError} for a deadline that is not in the future.
 * @example encodeGrpcTimeout(10_000) // "10000m"
 */
export function encodeGrpcTimeout(ms: number): string {
  if (!(ms > 0) || !Number.isFinite(ms)) throw new RangeError(`Cannot encode grpc-timeout of ${ms} ms`);
  for (const [unit, size] of [
    ["m", 1],
    ["S", 1_000],
    ["M", 60_000],
  ] as const) {
    const v = Math.ceil(ms / size);
    if (v <= 99_999_999) return `${v}${unit}`;
  }
  return `${Math.min(Math.ceil(ms / 3_600_000), 99_999_999)}H`;
}
