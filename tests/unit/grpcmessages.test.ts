// lib/grpcmessages.ts: the unread messages of a gRPC call, packed. Order and content against a plain
// array for any sequence of pushes and shifts; small messages are copies, large ones kept as given;
// what a flood of empty messages costs.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { MessageQueue } from "../../lib/grpcmessages.ts";

const hex = (m: Uint8Array | undefined) => (m === undefined ? undefined : Buffer.from(m).toString("hex"));

describe("MessageQueue", () => {
  test("any pushes and shifts give the messages of an array queue, in order", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.uint8Array({ maxLength: 40 }),
            fc.uint8Array({ minLength: 1000, maxLength: 3000 }),
            fc.constant("shift" as const),
          ),
          { maxLength: 400 },
        ),
        (ops) => {
          const q = new MessageQueue();
          const model: Uint8Array[] = [];
          for (const op of ops) {
            if (op === "shift") expect(hex(q.shift())).toBe(hex(model.shift()));
            else {
              q.push(op);
              model.push(op);
            }
            expect(q.length).toBe(model.length);
            expect(q.bytes).toBe(model.reduce((n, m) => n + m.length, 0));
          }
          while (model.length > 0) expect(hex(q.shift())).toBe(hex(model.shift()));
          expect(q.shift()).toBeUndefined();
        },
      ),
    );
  });

  test("push() copies a small message (the caller's chunk is not kept); a large one is queued as given", () => {
    const q = new MessageQueue();
    const chunk = new Uint8Array(8192).fill(7);
    q.push(chunk.subarray(0, 3));
    q.push(chunk.subarray(0, 4096));
    chunk.fill(1);
    expect(hex(q.shift())).toBe("070707");
    const large = q.shift();
    expect(large?.buffer).toBe(chunk.buffer);
  });

  test("clear() drops everything", () => {
    const q = new MessageQueue();
    q.push(Uint8Array.of(1));
    q.push(new Uint8Array(2000));
    q.clear();
    expect([q.length, q.bytes, q.shift()]).toEqual([0, 0, undefined]);
  });

  test("200,000 empty messages (a stream window of them) cost about 4 bytes each, not an object each", () => {
    const q = new MessageQueue();
    Bun.gc(true);
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 200_000; i++) q.push(new Uint8Array(0));
    Bun.gc(true);
    const grown = process.memoryUsage().heapUsed - before;
    expect(q.length).toBe(200_000);
    expect(grown).toBeLessThan(4 << 20);
  });
});
