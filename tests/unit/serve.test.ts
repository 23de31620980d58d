import { describe, expect, test } from "bun:test";
import { constants } from "node:crypto";
import { secureOptionsFor } from "../../lib/serve.ts";

describe("secureOptionsFor()", () => {
  test.each([
    [undefined, undefined],
    ["TLSv1", undefined],
    ["TLSv1.1", constants.SSL_OP_NO_TLSv1],
    ["TLSv1.2", constants.SSL_OP_NO_TLSv1 | constants.SSL_OP_NO_TLSv1_1],
    ["TLSv1.3", constants.SSL_OP_NO_TLSv1 | constants.SSL_OP_NO_TLSv1_1 | constants.SSL_OP_NO_TLSv1_2],
  ] as const)("%p refuses every older protocol", (min, want) => {
    expect(secureOptionsFor(min)).toBe(want);
  });
});
