import { describe, expect, it } from "vitest";
import {
  MsgpackArrayStream,
  type MsgpackArrayVisitor,
  MsgpackStreamError,
  valueEnd,
} from "../../../src/cluster/engine/msgpack-stream.js";
import { engineCodec } from "../../../src/cluster/engine/records.js";

/** One value of every msgpack type and length class, as the engine's codec packs them. */
function sampleValues(): unknown[] {
  const integers = [0, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32, 2 ** 40, -1, -32, -33, -128, -129, -32_768];
  const moreIntegers = [-32_769, -(2 ** 31) - 1, -(2 ** 40)];
  const strings = [0, 31, 32, 255, 256, 65_536].map((length) => "s".repeat(length));
  const binaries = [0, 255, 256, 65_536].map((length) => new Uint8Array(length).fill(7));
  const arrays = [0, 15, 16, 65_536].map((length) => Array.from({ length }, (_, position) => position));
  const maps = [15, 16, 300].map((size) =>
    Object.fromEntries(Array.from({ length: size }, (_, position) => [`k${position}`, position])),
  );
  return [
    null,
    true,
    false,
    1.5,
    Math.fround(0.25),
    ...integers,
    ...moreIntegers,
    ...strings,
    ...binaries,
    ...arrays,
    ...maps,
    new Date(1_700_000_000_000),
    [[[["deep"]]], { nested: [1, { more: new Uint8Array(3) }] }],
  ];
}

/** Raw values of formats the codec does not write here: every ext format, and a 32-bit map header. */
function rawValues(): Uint8Array[] {
  const fixext = [1, 2, 4, 8, 16].map((length, position) =>
    Uint8Array.of(0xd4 + position, 5, ...new Uint8Array(length)),
  );
  return [
    ...fixext,
    Uint8Array.of(0xc7, 3, 5, 1, 2, 3),
    Uint8Array.of(0xc8, 0, 3, 5, 1, 2, 3),
    Uint8Array.of(0xc9, 0, 0, 0, 3, 5, 1, 2, 3),
    Uint8Array.of(0xdf, 0, 0, 0, 1, 0xa1, 0x61, 0x01),
  ];
}

describe("valueEnd", () => {
  it("finds the end of a value of every type, and reports every proper prefix as incomplete", () => {
    const encoded = [...sampleValues().map((value) => Uint8Array.from(engineCodec.pack(value))), ...rawValues()];
    for (const bytes of encoded) {
      // The value is followed by another one, which must not be counted.
      const followed = new Uint8Array(bytes.byteLength + 1);
      followed.set(bytes);
      followed[bytes.byteLength] = 0xc0;
      expect(valueEnd(followed, 0)).toBe(bytes.byteLength);
      for (const length of new Set([0, 1, 2, 3, 5, 9, bytes.byteLength - 1])) {
        if (length >= bytes.byteLength) continue;
        // Incomplete: an end past the bytes given, and never past the value's true end (a lower bound on it).
        const bound = valueEnd(bytes.subarray(0, length), 0);
        expect(bound).toBeGreaterThan(length);
        expect(bound).toBeLessThanOrEqual(bytes.byteLength);
      }
    }
  });

  it("refuses the byte msgpack never uses", () => {
    expect(() => valueEnd(Uint8Array.of(0x91, 0xc1), 0)).toThrow(MsgpackStreamError);
  });
});

/**
 * Collects what a stream hands over, with fields 1 and 3 as lists, and the items of field 1 encoded when `encoded`
 * (recorded as copies of their bytes, since the stream may reuse them).
 */
function recordingVisitor(encoded = false): MsgpackArrayVisitor & { readonly seen: unknown[] } {
  const seen: unknown[] = [];
  return {
    seen,
    begin: (fieldCount) => seen.push(["begin", fieldCount]),
    isList: (index) => index === 1 || index === 3,
    itemsEncoded: (index) => encoded && index === 1,
    field: (index, value) => seen.push(["field", index, value instanceof Uint8Array ? [...value] : value]),
    listStart: (index, length) => seen.push(["list", index, length]),
    item: (index, position, value) => seen.push(["item", index, position, value]),
    encodedItem: (index, position, bytes) => seen.push(["encoded", index, position, [...bytes]]),
  };
}

describe("MsgpackArrayStream", () => {
  const document = [
    "header",
    Array.from({ length: 40 }, (_, position) => ({ position, text: "x".repeat(position * 7) })),
    new Uint8Array([1, 2, 3]),
    [],
  ];
  const bytes = Uint8Array.from(engineCodec.pack(document));

  it("hands over the same fields and items whatever the pieces' sizes, keeping only an incomplete item between them", () => {
    const whole = recordingVisitor();
    const stream = new MsgpackArrayStream(whole);
    stream.push(bytes);
    stream.end();
    expect(whole.seen[0]).toEqual(["begin", 4]);
    expect(whole.seen).toContainEqual(["list", 1, 40]);
    expect(whole.seen).toContainEqual(["item", 1, 39, { position: 39, text: "x".repeat(273) }]);
    expect(whole.seen).toContainEqual(["field", 2, [1, 2, 3]]);
    expect(whole.seen.at(-1)).toEqual(["list", 3, 0]);
    const largestItemBytes = engineCodec.pack({ position: 39, text: "x".repeat(273) }).byteLength;
    for (const pieceBytes of [1, 2, 7, 64, 1000]) {
      const visitor = recordingVisitor();
      const pieces = new MsgpackArrayStream(visitor);
      for (let offset = 0; offset < bytes.byteLength; offset += pieceBytes) {
        // A reused buffer: the stream must not keep views of a piece.
        const piece = new Uint8Array(pieceBytes);
        piece.set(bytes.subarray(offset, offset + pieceBytes));
        pieces.push(piece.subarray(0, Math.min(pieceBytes, bytes.byteLength - offset)));
        piece.fill(0xff);
      }
      pieces.end();
      expect(visitor.seen).toEqual(whole.seen);
      expect(pieces.decodedBytes).toBe(bytes.byteLength);
      expect(pieces.peakBufferedBytes).toBeLessThan(largestItemBytes);
    }
  });

  it("hands over encoded items as exactly their bytes, and copies about one item per piece, never the pieces", () => {
    const items = document[1] as unknown[];
    for (const pieceBytes of [1, 5, 64, 333, 1_000, bytes.byteLength]) {
      const visitor = recordingVisitor(true);
      const stream = new MsgpackArrayStream(visitor);
      let pieces = 0;
      for (let offset = 0; offset < bytes.byteLength; offset += pieceBytes) {
        const piece = Uint8Array.from(bytes.subarray(offset, offset + pieceBytes));
        stream.push(piece);
        piece.fill(0xff);
        pieces += 1;
      }
      stream.end();
      const encodedItems = visitor.seen.filter((seen) => (seen as unknown[])[0] === "encoded") as unknown[][];
      expect(encodedItems.map((seen) => seen[2])).toEqual(items.map((_, position) => position));
      for (const [, , position, itemBytes] of encodedItems) {
        expect(itemBytes).toEqual([...engineCodec.pack(items[position as number])]);
      }
      expect(visitor.seen).toContainEqual(["field", 2, [1, 2, 3]]);
      // Each piece boundary copies at most the rest of the value it cuts (and a few bytes of headers), so the copies
      // stay below the document's bytes by far once pieces hold several items; copying whole pieces behind every
      // value cut in two would copy nearly every byte.
      const largestItemBytes = engineCodec.pack(items.at(-1)).byteLength;
      // Completing a value copies at most about twice what it lacks (see the next test for why it may copy more).
      expect(stream.copiedPieceBytes).toBeLessThanOrEqual(pieces * (2 * largestItemBytes + 16));
      if (pieceBytes === 1_000) expect(stream.copiedPieceBytes).toBeLessThan(bytes.byteLength / 2);
    }
  });

  it("keeps the start of the next value when it gives back the memory a value larger than a MiB took", () => {
    const large = new Uint8Array(1_500_000).fill(3);
    // Enough small items after it for the pieces after the large one's to end inside an item too.
    const small = Array.from({ length: 20_000 }, (_, position) => [position, "s".repeat(60)]);
    const document = ["header", [large, ...small], "end"];
    const bytes = Uint8Array.from(engineCodec.pack(document));
    const visitor = recordingVisitor();
    const stream = new MsgpackArrayStream(visitor);
    const pieceBytes = 1024 * 1024;
    for (let offset = 0; offset < bytes.byteLength; offset += pieceBytes) {
      const piece = Uint8Array.from(bytes.subarray(offset, offset + pieceBytes));
      stream.push(piece);
      piece.fill(0xff);
    }
    stream.end();
    const items = visitor.seen.filter((seen) => (seen as unknown[])[0] === "item") as unknown[][];
    expect(items).toHaveLength(20_001);
    expect((items[0] as unknown[])[3] as Uint8Array).toHaveLength(1_500_000);
    expect(items.slice(1).map((item) => item[3])).toEqual(small);
    expect(visitor.seen.at(-1)).toEqual(["field", 2, "end"]);
  });

  it("completes a value whose headers understate its size in a few passes per piece, not one per header", () => {
    // One item of 256 KiB of nested one-element arrays: every header says only one more byte is needed.
    // Handed over encoded: decoding a value nested this deep would exhaust the stack, and the stream never does.
    const nested = new Uint8Array(256 * 1024).fill(0x91);
    nested[nested.byteLength - 1] = 0xc0;
    const bytes = new Uint8Array(4 + nested.byteLength);
    bytes.set([0x92, 0xa1, 0x68, 0x91]);
    bytes.set(nested, 4);
    const visitor = recordingVisitor(true);
    const stream = new MsgpackArrayStream(visitor);
    const pieceBytes = 64 * 1024;
    let pieces = 0;
    for (let offset = 0; offset < bytes.byteLength; offset += pieceBytes) {
      stream.push(bytes.subarray(offset, offset + pieceBytes));
      pieces += 1;
    }
    stream.end();
    expect(visitor.seen.filter((seen) => (seen as unknown[])[0] === "encoded")).toHaveLength(1);
    // Appending what the headers ask (one byte each) took a pass per 16 bytes, each walking the whole value so far.
    expect(stream.completionPasses).toBeGreaterThanOrEqual(1);
    expect(stream.completionPasses).toBeLessThanOrEqual(pieces * 2 + Math.log2(nested.byteLength));
    expect(stream.copiedPieceBytes).toBeLessThanOrEqual(2 * bytes.byteLength);
  });

  it("refuses a value longer than its bound instead of holding every later byte (a damaged length header)", () => {
    const maxValueBytes = 64 * 1024;
    const stream = new MsgpackArrayStream(recordingVisitor(), maxValueBytes);
    // A list item whose bin32 header claims 4 GiB, then plenty of bytes in 4 KiB pieces.
    stream.push(Uint8Array.of(0x94, 0xa1, 0x61, 0x91, 0xc6, 0xff, 0xff, 0xff, 0xff));
    const piece = new Uint8Array(4096);
    let pushed = 0;
    expect(() => {
      // Bounded: the stream refuses after about maxValueBytes, long before this loop would end.
      for (; pushed < 1024; pushed += 1) stream.push(piece);
    }).toThrow(/longer than 65536 bytes/);
    expect(pushed).toBeLessThanOrEqual(maxValueBytes / piece.byteLength + 1);
    expect(stream.peakBufferedBytes).toBeLessThanOrEqual(maxValueBytes + piece.byteLength + 16);
  });

  it("refuses a document that ends early, one followed by more bytes, and one that is not an array", () => {
    const truncated = new MsgpackArrayStream(recordingVisitor());
    truncated.push(bytes.subarray(0, bytes.byteLength - 1));
    expect(() => truncated.end()).toThrow(/ends early/);
    const followed = new MsgpackArrayStream(recordingVisitor());
    expect(() => followed.push(Uint8Array.of(...bytes, 0xc0))).toThrow(/follow the end/);
    const visitor = recordingVisitor();
    expect(() => new MsgpackArrayStream(visitor).push(engineCodec.pack({ not: "an array" }))).toThrow(/not an array/);
    expect(visitor.seen).toEqual([["begin", null]]);
  });
});
