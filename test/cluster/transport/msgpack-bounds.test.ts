/**
 * The bound on a frame body's msgpack structure that is checked before decoding: bodies the encoder writes pass,
 * bodies whose decoding would reserve more than their size (or nest without end, or use other extensions) do not.
 */
import fc from "fast-check";
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../../src/cluster/transport/errors.js";
import { encodeFrame, FRAME_HEADER_BYTES, FrameDecoder } from "../../../src/cluster/transport/framing.js";
import { assertBoundedMsgpack, MAX_MSGPACK_DEPTH } from "../../../src/cluster/transport/msgpack-bounds.js";

const packr = new Packr({ useRecords: false });

/** A frame of `body` as a peer would send it. */
function frameOf(body: Uint8Array): Buffer {
  const frame = Buffer.alloc(FRAME_HEADER_BYTES + body.length);
  frame.writeUInt32BE(body.length, 0);
  frame.set(body, FRAME_HEADER_BYTES);
  return frame;
}

describe("assertBoundedMsgpack", () => {
  it("passes every body the encoder writes, values of every msgpack type included", () => {
    const value = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: "small" },
        fc.integer(),
        fc.double(),
        fc.bigInt({ min: -(2n ** 63n), max: 2n ** 64n - 1n }),
        fc.string({ unit: "grapheme", maxLength: 300 }),
        fc.uint8Array({ maxLength: 70_000 }),
        fc.boolean(),
        fc.constant(null),
        fc.constant(undefined),
        fc.date({ noInvalidDate: true }),
        fc.array(tie("value"), { maxLength: 20 }),
        fc.dictionary(fc.string({ maxLength: 8 }), tie("value"), { maxKeys: 20 }),
      ),
    })).value;
    fc.assert(
      fc.property(value, (generated) => {
        const body = packr.pack(generated);
        assertBoundedMsgpack(body);
        packr.unpack(body);
      }),
      { numRuns: 300 },
    );
  });

  it("passes large arrays and maps whose elements are all there", () => {
    assertBoundedMsgpack(packr.pack(Array.from({ length: 70_000 }, (_, index) => index % 100)));
    assertBoundedMsgpack(
      packr.pack(Object.fromEntries(Array.from({ length: 60_000 }, (_, index) => [`k${index}`, 1]))),
    );
    assertBoundedMsgpack(packr.pack({ entries: [{ index: 1, data: new Uint8Array(100_000) }] }));
  });

  it.each([
    ["an array32 of 2^25 elements in 5 bytes", "dd02000000"],
    ["an array16 of 65,535 elements", "dcffff"],
    ["a map32 of 2^31 entries", "df80000000"],
    ["a fixarray of 15 elements with 14 present", `9f${"00".repeat(14)}`],
    ["a map16 of 2 entries with 3 values present", "de0002010203"],
    ["a str32 longer than the body", "dbffffffff6162"],
    ["a bin8 longer than the body", "c40a0102"],
    ["an ext8 longer than the body", "c7ff00"],
    ["a Set extension, which reads the next value itself", "d47300"],
    ["a record definition", "d47200"],
    ["a structured-clone reference", "d6690000000190"],
    ["a byte that starts no value", "c1"],
    ["an empty body", ""],
    ["a truncated uint32", "ce0001"],
  ])("refuses %s", (_, hex) => {
    expect(() => assertBoundedMsgpack(Buffer.from(hex, "hex"))).toThrow(ProtocolError);
  });

  it("refuses nested arrays that each declare more than the body holds, the first of them already", () => {
    const nested = Buffer.from("dd02000000".repeat(25), "hex");
    expect(() => assertBoundedMsgpack(nested)).toThrow(/the container at byte 0 declares more elements/);
  });

  it(`accepts ${MAX_MSGPACK_DEPTH} nested arrays and refuses one more`, () => {
    const nestedArrays = (depth: number) => Buffer.from(`${"91".repeat(depth)}00`, "hex");
    assertBoundedMsgpack(nestedArrays(MAX_MSGPACK_DEPTH));
    expect(() => assertBoundedMsgpack(nestedArrays(MAX_MSGPACK_DEPTH + 1))).toThrow(/nest deeper than 128/);
  });
});

describe("FrameDecoder and the bound", () => {
  it("refuses the 9-byte frame that reserved 268 MB before any element was read, as a protocol error", () => {
    const decoder = new FrameDecoder({ maxFrameBytes: 1024 });
    const heapBeforeBytes = process.memoryUsage().heapUsed;
    expect(() => decoder.push(frameOf(Buffer.from("dd02000000", "hex")))).toThrow(ProtocolError);
    // Without the bound the decoder's array alone was 268 MB.
    expect(process.memoryUsage().heapUsed - heapBeforeBytes).toBeLessThan(32 * 1024 * 1024);
  });

  it("still decodes the frames the encoder writes", () => {
    const decoder = new FrameDecoder({ maxFrameBytes: 1024 * 1024 });
    const value = {
      kind: "append",
      entries: [{ index: 3, term: 2, data: new Uint8Array([1, 2]) }],
      missing: undefined,
    };
    const [frame] = decoder.push(encodeFrame(value, 1024 * 1024));
    const decoded = frame?.value as { kind: string; entries: { index: number; data: Uint8Array }[] };
    expect(decoded.kind).toBe("append");
    expect([...(decoded.entries[0]?.data ?? [])]).toEqual([1, 2]);
  });
});
