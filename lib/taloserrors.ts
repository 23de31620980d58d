// The errors of the Talos client, independent of the gRPC transport, the gRPC status codes they map
// from and the mapping itself (statusError): every Talos module, the talosconfig loader and code
// inspecting errors share them without loading the transport.

/** gRPC status codes. */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** What went wrong, independent of the gRPC layer. */
export type TalosErrorCode =
  | "config"
  | "not-found"
  | "permission-denied"
  | "unavailable"
  | "deadline"
  | "invalid"
  | "unimplemented"
  | "internal"
  | "decode"
  | "canceled"
  | "closed";

/** An error of the Talos client; `code` tells the kind, `grpcCode` the status when one came back. */
export class TalosError extends Error {
  override readonly name: string = "TalosError";
  readonly code: TalosErrorCode;
  readonly grpcCode: number | undefined;
  /** Whether the same call may succeed later without a change of configuration. */
  readonly retryable: boolean;
  constructor(
    code: TalosErrorCode,
    message: string,
    opts: { cause?: unknown; grpcCode?: number; retryable?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.grpcCode = opts.grpcCode;
    this.retryable = opts.retryable ?? false;
  }
}

/** The talosconfig is missing or broken; the message names the file and how to enable access. */
export class TalosConfigError extends TalosError {
  override readonly name = "TalosConfigError";
  /** The file concerned, "" when none was found. */
  readonly path: string;
  constructor(path: string, message: string, opts: { cause?: unknown } = {}) {
    super("config", message, opts);
    this.path = path;
  }
}

/** The resource does not exist (yet): Talos creates some of them late during boot. */
export class TalosNotFoundError extends TalosError {
  override readonly name = "TalosNotFoundError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("not-found", message, { ...opts, grpcCode: GrpcStatus.NOT_FOUND });
  }
}

/** apid refused the call: a missing role or feature, never retried. */
export class TalosPermissionError extends TalosError {
  override readonly name = "TalosPermissionError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("permission-denied", message, { ...opts, grpcCode: GrpcStatus.PERMISSION_DENIED });
  }
}

/** Bytes from the wire that do not decode into what Talos sends. */
export class TalosDecodeError extends TalosError {
  override readonly name = "TalosDecodeError";
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super("decode", message, opts);
  }
}

interface GrpcLikeError {
  code?: unknown;
  details?: unknown;
  message?: unknown;
}

/**
 * Maps a gRPC status to a TalosError following talos-api.md §5: Unavailable, DeadlineExceeded,
 * Canceled (not by us) and Internal (except "invalid target") are retryable; NotFound is a typed
 * "not yet"; PermissionDenied, InvalidArgument and Unimplemented are final.
 * @param what "Cannot <what>" prefix of the message, e.g. `get PlatformMetadatas.talos.dev on node 10.0.0.5`.
 */
export function statusError(what: string, err: unknown): TalosError {
  if (err instanceof TalosError) return err;
  const e = (err ?? {}) as GrpcLikeError;
  const code = typeof e.code === "number" ? e.code : GrpcStatus.UNKNOWN;
  const details = String(e.details ?? e.message ?? err);
  const msg = `Cannot ${what}: ${details}`;
  const opts = { cause: err, grpcCode: code };
  switch (code) {
    case GrpcStatus.NOT_FOUND:
      return new TalosNotFoundError(`Cannot ${what}: not found (yet): ${details}`, { cause: err });
    case GrpcStatus.PERMISSION_DENIED:
      return new TalosPermissionError(
        `Cannot ${what}: permission denied (${details}): the talosconfig certificate needs role os:reader ` +
          "(and this Talos must serve the resource type); check machine.features.kubernetesTalosAPIAccess " +
          "allowedRoles and the talos.dev ServiceAccount roles",
        { cause: err },
      );
    case GrpcStatus.UNAVAILABLE:
      return new TalosError("unavailable", msg, { ...opts, retryable: true });
    case GrpcStatus.DEADLINE_EXCEEDED:
      return new TalosError("deadline", msg, { ...opts, retryable: true });
    case GrpcStatus.CANCELLED:
      return new TalosError("unavailable", msg, { ...opts, retryable: true });
    case GrpcStatus.INTERNAL:
      return new TalosError("internal", msg, { ...opts, retryable: !details.includes("invalid target") });
    case GrpcStatus.INVALID_ARGUMENT:
      return new TalosError("invalid", msg, opts);
    case GrpcStatus.UNIMPLEMENTED:
      return new TalosError("unimplemented", msg, opts);
    default:
      return new TalosError("internal", msg, opts);
  }
}
