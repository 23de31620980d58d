// lib/talos.ts pure parts: the mapping of gRPC statuses to typed, retryable or final errors.

import { describe, expect, test } from "bun:test";
import { statusError } from "../../lib/talos.ts";
import { GrpcStatus, TalosError, TalosNotFoundError, TalosPermissionError } from "../../lib/taloserrors.ts";

describe("statusError()", () => {
  test.each([
    [GrpcStatus.UNAVAILABLE, "connection refused", "unavailable", true, TalosError],
    [GrpcStatus.DEADLINE_EXCEEDED, "deadline", "deadline", true, TalosError],
    [GrpcStatus.CANCELLED, "proxy stream canceled", "unavailable", true, TalosError],
    [GrpcStatus.INTERNAL, "failed proxying to 10.0.0.5", "internal", true, TalosError],
    [GrpcStatus.INTERNAL, 'invalid target "10.0.0.5:50000"', "internal", false, TalosError],
    [GrpcStatus.INVALID_ARGUMENT, "one-to-many", "invalid", false, TalosError],
    [GrpcStatus.UNIMPLEMENTED, "unsupported", "unimplemented", false, TalosError],
    [GrpcStatus.NOT_FOUND, "doesn't exist", "not-found", false, TalosNotFoundError],
    [GrpcStatus.PERMISSION_DENIED, "not authorized", "permission-denied", false, TalosPermissionError],
    [GrpcStatus.RESOURCE_EXHAUSTED, "message larger than max", "internal", false, TalosError],
    [GrpcStatus.UNKNOWN, "?", "internal", false, TalosError],
  ])("code %d (%s) → %s, retryable %p", (code, details, want, retryable, cls) => {
    const e = statusError("get X on node n", { code, details });
    expect(e).toBeInstanceOf(cls);
    expect(e.code).toBe(want as TalosError["code"]);
    expect(e.retryable).toBe(retryable);
    expect(e.grpcCode).toBe(code);
    expect(e.message).toStartWith("Cannot get X on node n: ");
    expect(e.message).toContain(details);
  });

  test("PermissionDenied says which role and feature are missing", () => {
    const e = statusError("get X", { code: GrpcStatus.PERMISSION_DENIED, details: "not authorized" });
    expect(e.message).toContain("os:reader");
    expect(e.message).toContain("kubernetesTalosAPIAccess");
  });

  test("a TalosError passes through unchanged", () => {
    const e = new TalosNotFoundError("x");
    expect(statusError("y", e)).toBe(e);
  });
});
