import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RetainedRegions, regionOf } from "../../../src/buffers/retained-regions.js";
import { FrameTooLargeError, ProtocolError } from "../../../src/cluster/transport/errors.js";
import {
  type DecodedFrame,
  encodeFrame,
  FRAME_HEADER_BYTES,
  FrameDecoder,
} from "../../../src/cluster/transport/framing.js";

const maxFrameBytes = 1024 * 1024;

function decodeAll(chunks: Uint8Array[]): unknown[] {
  const decoder = new FrameDecoder({ maxFrameBytes });
  return chunks.flatMap((chunk) => decoder.push(chunk).map((frame) => frame.value));
}

/** The value of a frame that must have been decoded. */
function decodedValue<T>(frame: DecodedFrame | undefined): T {
  if (frame === undefined) throw new Error("expected a decoded frame");
  return frame.value as T;
}

describe("encodeFrame", () => {
  it("prefixes the msgpack body with its big-endian length", () => {
    const frame = encodeFrame({ kind: "message", body: "hello" }, maxFrameBytes);
    expect(frame.readUInt32BE(0)).toBe(frame.length - FRAME_HEADER_BYTES);
  });

  it("hands out frames of its own: later encodings, which reuse the encoder's buffer, leave earlier frames intact", () => {
    const first = encodeFrame({ data: new Uint8Array(256 * 1024).fill(1) }, maxFrameBytes);
    const copy = Buffer.from(first);
    for (let fill = 2; fill < 6; fill += 1) encodeFrame({ data: new Uint8Array(512 * 1024).fill(fill) }, maxFrameBytes);
    expect(first.equals(copy)).toBe(true);
    const [decoded] = decodeAll([first]) as { data: Uint8Array }[];
    expect(decoded?.data.byteLength).toBe(256 * 1024);
    expect(decoded?.data.every((byte) => byte === 1)).toBe(true);
  });

  it("refuses a body larger than the maximum", () => {
    expect(() => encodeFrame({ data: new Uint8Array(2048) }, 1024)).toThrow(FrameTooLargeError);
  });

  it("flags a retained body in the header's high bit, keeping its length in the low 31 bits", () => {
    const value = { kind: "message", body: "kept for long" };
    const plain = encodeFrame(value, maxFrameBytes);
    const flagged = encodeFrame(value, maxFrameBytes, undefined, true);
    expect(flagged.readUInt32BE(0)).toBe(0x8000_0000 + flagged.length - FRAME_HEADER_BYTES);
    expect(flagged.subarray(FRAME_HEADER_BYTES).equals(plain.subarray(FRAME_HEADER_BYTES))).toBe(true);
    expect(decodeAll([flagged])).toEqual([value]);
  });
});

describe("FrameDecoder", () => {
  it("round-trips binary payloads as Uint8Array", () => {
    const payload = new Uint8Array([0, 1, 2, 255]);
    const [value] = decodeAll([encodeFrame({ payload, count: 3 }, maxFrameBytes)]);
    const decoded = value as { payload: Uint8Array; count: number };
    expect(decoded.payload).toBeInstanceOf(Uint8Array);
    expect([...decoded.payload]).toEqual([0, 1, 2, 255]);
    expect(decoded.count).toBe(3);
  });

  it("hands out a large frame's bytes in memory of their own that later reads leave intact, which a joiner's engine keeps", () => {
    // A snapshot chunk's frame, arriving in reads of at most 64 KiB as from a socket, between two smaller frames.
    const chunk = new Uint8Array(1024 * 1024).map((_byte, index) => index % 251);
    const stream = Buffer.concat([
      encodeFrame({ before: new Uint8Array(100).fill(7) }, maxFrameBytes + 64),
      encodeFrame({ type: "snapshotChunk", offset: 0, data: chunk }, maxFrameBytes + 64),
      encodeFrame({ after: new Uint8Array(100).fill(9) }, maxFrameBytes + 64),
    ]);
    const decoder = new FrameDecoder({ maxFrameBytes: maxFrameBytes + 64 });
    const values: unknown[] = [];
    for (let offset = 0; offset < stream.length; offset += 64 * 1024) {
      // Each read in a buffer of its own, as a socket delivers them; nothing writes a read after it was pushed.
      values.push(
        ...decoder.push(Buffer.from(stream.subarray(offset, offset + 64 * 1024))).map((frame) => frame.value),
      );
    }
    const data = (values[1] as { data: Uint8Array }).data;
    expect(Buffer.from(data).equals(Buffer.from(chunk))).toBe(true);
    // Nearly all of its memory: what `EntrySlabs.place` requires of a piece before keeping entries in it.
    expect(8 * data.byteLength).toBeGreaterThanOrEqual(7 * data.buffer.byteLength);
    expect((values[2] as { after: Uint8Array }).after.every((byte) => byte === 9)).toBe(true);
  });

  it("reports the size of every frame", () => {
    const frame = encodeFrame("abc", maxFrameBytes);
    const decoder = new FrameDecoder({ maxFrameBytes });
    expect(decoder.push(frame)).toEqual([{ value: "abc", frameBytes: frame.length }]);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("decodes the same frames however the stream is chunked", () => {
    const jsonValue = fc.oneof(
      fc.string(),
      fc.integer(),
      fc.boolean(),
      fc.uint8Array({ maxLength: 300 }),
      fc.dictionary(fc.string({ minLength: 1, maxLength: 5 }), fc.oneof(fc.string(), fc.integer(), fc.constant(null))),
    );
    fc.assert(
      fc.property(fc.array(jsonValue, { maxLength: 20 }), fc.array(fc.nat(), { maxLength: 40 }), (values, cuts) => {
        const stream = Buffer.concat(values.map((value) => encodeFrame(value, maxFrameBytes)));
        const positions = [...new Set(cuts.map((cut) => (stream.length === 0 ? 0 : cut % stream.length)))].sort(
          (left, right) => left - right,
        );
        const chunks: Uint8Array[] = [];
        let start = 0;
        for (const position of [...positions, stream.length]) {
          chunks.push(stream.subarray(start, position));
          start = position;
        }
        const decoded = decodeAll(chunks).map((value) => (value instanceof Uint8Array ? [...value] : value));
        const expected = values.map((value) => (value instanceof Uint8Array ? [...value] : value));
        expect(decoded).toEqual(expected);
      }),
    );
  });

  it("reads a large body into memory of exactly its size, and small frames one after the other into a block", () => {
    const decoder = new FrameDecoder({ maxFrameBytes });
    const small = encodeFrame({ small: new Uint8Array(10).fill(1) }, maxFrameBytes);
    const large = encodeFrame({ data: new Uint8Array(256 * 1024).fill(2) }, maxFrameBytes);
    const bodyBytes = large.length - FRAME_HEADER_BYTES;
    const read = (bytes: Uint8Array): { memory: Uint8Array; frames: DecodedFrame[] } => {
      const memory = decoder.readBuffer();
      memory.set(bytes);
      return { memory, frames: decoder.commitRead(bytes.length) };
    };
    // One read brings the small frame, the large one's header and its first 96 body bytes.
    const first = read(Buffer.concat([small, large.subarray(0, 100)]));
    expect(first.frames).toHaveLength(1);
    expect(decoder.pendingBytes).toBe(96);
    const beginning = read(large.subarray(100, 1_000));
    // The body's first bytes moved into memory of its own, and the read went on right after them, taking at most a
    // block's worth as every read does.
    expect(beginning.memory.byteOffset).toBe(96);
    expect(beginning.memory.byteLength).toBe(64 * 1024);
    expect(beginning.memory.buffer.byteLength).toBe(bodyBytes);
    expect(beginning.frames).toEqual([]);
    expect(decoder.pendingBytes).toBe(996);
    let end = read(large.subarray(1_000, 1_000 + 64 * 1024));
    for (let offset = 1_000 + 64 * 1024; end.frames.length === 0; offset += 64 * 1024) {
      expect(end.memory.buffer).toBe(beginning.memory.buffer);
      end = read(large.subarray(offset, offset + 64 * 1024));
    }
    const data = decodedValue<{ data: Uint8Array }>(end.frames[0]).data;
    expect(data.buffer).toBe(beginning.memory.buffer);
    expect(data.every((byte) => byte === 2)).toBe(true);
    expect(end.frames[0]?.frameBytes).toBe(large.length);
    expect(decoder.pendingBytes).toBe(0);
    // The next small frame lands in the block after the first one, which it leaves intact.
    const after = read(encodeFrame({ small: new Uint8Array(10).fill(3) }, maxFrameBytes));
    const values = [first.frames[0], after.frames[0]].map((frame) => decodedValue<{ small: Uint8Array }>(frame).small);
    expect(values[1]?.buffer).toBe(values[0]?.buffer);
    expect(values.map((value) => [...(value ?? [])])).toEqual([Array(10).fill(1), Array(10).fill(3)]);
  });

  it("holds no more than one small frame's worth of read memory while its frames are capped small, and blocks after", () => {
    // A connection whose handshake has not ended accepts frames of at most 1 KiB; Node asks it for read memory as
    // soon as it is accepted, so a block of 64 KiB made every silent connection hold 64 KiB.
    const decoder = new FrameDecoder({ maxFrameBytes: 1_024 });
    const read = (bytes: Uint8Array): { memory: Uint8Array; frames: DecodedFrame[] } => {
      const memory = decoder.readBuffer();
      memory.set(bytes);
      return { memory, frames: decoder.commitRead(bytes.length) };
    };
    expect(decoder.readBuffer().byteLength).toBe(FRAME_HEADER_BYTES + 1_024);
    const hello = encodeFrame({ hello: "x".repeat(900) }, 1_024);
    const first = read(hello.subarray(0, 500));
    expect(first.memory.byteLength).toBeLessThanOrEqual(FRAME_HEADER_BYTES + 1_024);
    const second = read(hello.subarray(500));
    expect(second.memory.byteLength).toBeLessThanOrEqual(FRAME_HEADER_BYTES + 1_024);
    expect(decodedValue<{ hello: string }>(second.frames[0]).hello).toHaveLength(900);
    // The handshake ended: the normal limit brings blocks of 64 KiB back.
    decoder.maxFrameBytes = maxFrameBytes;
    const after = read(encodeFrame({ n: 1 }, maxFrameBytes));
    expect(after.memory.byteLength).toBe(64 * 1024);
    expect(decodedValue<{ n: number }>(after.frames[0]).n).toBe(1);
  });

  it("decodes the same frames whatever the sizes of the reads, large bodies included", () => {
    const value = fc.oneof(
      fc.string({ maxLength: 50 }),
      fc.uint8Array({ maxLength: 300 }),
      fc.integer({ min: 0, max: 100 * 1024 }).map((length) => new Uint8Array(length).fill(length & 0xff)),
    );
    const readSizes = fc.array(fc.integer({ min: 64, max: 80 * 1024 }), { minLength: 1, maxLength: 8 });
    fc.assert(
      fc.property(fc.array(value, { maxLength: 8 }), readSizes, (values, sizes) => {
        const stream = Buffer.concat(values.map((item) => encodeFrame(item, maxFrameBytes)));
        const decoder = new FrameDecoder({ maxFrameBytes });
        const decoded: unknown[] = [];
        let offset = 0;
        let reads = 0;
        // Each read fills part of the memory handed out, as a socket's reads do.
        while (offset < stream.length) {
          const memory = decoder.readBuffer();
          const readBytes = Math.min(memory.length, stream.length - offset, sizes[reads % sizes.length] ?? 1);
          memory.set(stream.subarray(offset, offset + readBytes));
          offset += readBytes;
          reads += 1;
          decoded.push(...decoder.commitRead(readBytes).map((frame) => frame.value));
        }
        const comparable = (item: unknown): unknown =>
          item instanceof Uint8Array ? Buffer.from(item).toString("hex") : item;
        expect(decoded.map(comparable)).toEqual(values.map(comparable));
        expect(decoder.pendingBytes).toBe(0);
      }),
      { numRuns: 60 },
    );
  });

  it("refuses a read of more bytes than the memory it handed out", () => {
    const decoder = new FrameDecoder({ maxFrameBytes });
    expect(() => decoder.commitRead(1)).toThrow(/invariant/);
    const memory = decoder.readBuffer();
    expect(() => decoder.commitRead(memory.length + 1)).toThrow(/invariant/);
  });

  it("rejects an oversized frame from its header alone, before buffering the body", () => {
    const decoder = new FrameDecoder({ maxFrameBytes: 100 });
    const header = Buffer.alloc(FRAME_HEADER_BYTES);
    header.writeUInt32BE(101, 0);
    expect(() => decoder.push(header)).toThrow(FrameTooLargeError);
  });

  it("rejects an empty frame body and a malformed body", () => {
    expect(() => new FrameDecoder({ maxFrameBytes }).push(Buffer.alloc(FRAME_HEADER_BYTES))).toThrow(ProtocolError);
    const malformed = Buffer.from([0, 0, 0, 2, 0x92, 1]);
    expect(() => new FrameDecoder({ maxFrameBytes }).push(malformed)).toThrow(ProtocolError);
  });
});

describe("FrameDecoder with retained bodies", () => {
  /** A decoder that carves flagged bodies from regions of 1 MiB, with those regions. */
  function retainingDecoder(maxBytes = maxFrameBytes): { decoder: FrameDecoder; regions: RetainedRegions } {
    const regions = new RetainedRegions({ regionBytes: 1024 * 1024 });
    return { decoder: new FrameDecoder({ maxFrameBytes: maxBytes, retainedBodies: regions }), regions };
  }

  it("reads a large flagged body into a region, and a large unflagged one into memory of its own", () => {
    const { decoder, regions } = retainingDecoder();
    const flagged = encodeFrame({ data: Buffer.alloc(64 * 1024, 7) }, maxFrameBytes, undefined, true);
    const plain = encodeFrame({ data: Buffer.alloc(64 * 1024, 8) }, maxFrameBytes);
    const [kept, other] = decoder
      .push(Buffer.concat([flagged, plain]))
      .map((frame) => decodedValue<{ data: Uint8Array }>(frame).data);
    if (kept === undefined || other === undefined) throw new Error("expected two decoded frames");
    // Binary values decode as views of the body, so the value lies where the decoder read the body.
    expect(regionOf(kept)).toBeDefined();
    expect(kept.every((byte) => byte === 7)).toBe(true);
    expect(regionOf(other)).toBeUndefined();
    expect(other.every((byte) => byte === 8)).toBe(true);
    expect(regions.statistics().bodiesCarved).toBe(1);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("honours the flag only from the header read after it was given regions, and not after they were taken back", () => {
    const regions = new RetainedRegions({ regionBytes: 1024 * 1024 });
    const decoder = new FrameDecoder({ maxFrameBytes });
    const flagged = (fill: number) =>
      encodeFrame({ data: Buffer.alloc(64 * 1024, fill) }, maxFrameBytes, undefined, true);
    const before = decodedValue<{ data: Uint8Array }>(decoder.push(flagged(1))[0]).data;
    decoder.retainedBodies = regions;
    const during = decodedValue<{ data: Uint8Array }>(decoder.push(flagged(2))[0]).data;
    decoder.retainedBodies = undefined;
    const after = decodedValue<{ data: Uint8Array }>(decoder.push(flagged(3))[0]).data;
    expect([regionOf(before), regionOf(after)]).toEqual([undefined, undefined]);
    expect(regionOf(during)).toBeDefined();
    expect(during.every((byte) => byte === 2)).toBe(true);
    expect(regions.statistics().bodiesCarved).toBe(1);
  });

  it("reads a flagged body too small for memory of its own into a block, as any small frame", () => {
    const { decoder, regions } = retainingDecoder();
    const flagged = encodeFrame({ data: Buffer.alloc(100, 5) }, maxFrameBytes, undefined, true);
    expect(flagged.readUInt32BE(0)).toBeGreaterThanOrEqual(0x8000_0000);
    const [frame] = decoder.push(flagged);
    const data = decodedValue<{ data: Uint8Array }>(frame).data;
    expect([...data]).toEqual(Array(100).fill(5));
    expect(regionOf(data)).toBeUndefined();
    expect(regions.statistics().bodiesCarved).toBe(0);
  });

  it("checks a flagged header's 31-bit length against the maximum", () => {
    const header = (bodyBytes: number): Buffer => {
      const bytes = Buffer.alloc(FRAME_HEADER_BYTES);
      bytes.writeUInt32BE(0x8000_0000 + bodyBytes, 0);
      return bytes;
    };
    // A flagged header announcing the maximum waits for its body.
    expect(retainingDecoder(100).decoder.push(header(100))).toEqual([]);
    let error: unknown;
    try {
      retainingDecoder(100).decoder.push(header(101));
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(FrameTooLargeError);
    expect((error as FrameTooLargeError).frameBytes).toBe(101);
  });

  it("decodes flagged and unflagged frames however the stream is cut into pushes, large flagged bodies into regions", () => {
    const frameOf = fc.record({
      bytes: fc.oneof(fc.integer({ min: 1, max: 300 }), fc.integer({ min: 32 * 1024, max: 80 * 1024 })),
      retained: fc.boolean(),
    });
    const pushSizes = fc.array(fc.integer({ min: 1, max: 2_000 }), { minLength: 1, maxLength: 8 });
    fc.assert(
      fc.property(fc.array(frameOf, { minLength: 1, maxLength: 6 }), pushSizes, (frames, sizes) => {
        const values = frames.map(({ bytes }, index) => ({ index, data: Buffer.alloc(bytes, index + 1) }));
        const stream = Buffer.concat(
          values.map((value, index) => encodeFrame(value, maxFrameBytes, undefined, frames[index]?.retained)),
        );
        const { decoder } = retainingDecoder();
        const decoded: { index: number; data: Uint8Array }[] = [];
        // Small pushes, as bytes that arrived elsewhere in many pieces.
        for (let offset = 0, push = 0; offset < stream.length; push += 1) {
          const pushBytes = sizes[push % sizes.length] ?? 1;
          const pushed = decoder.push(stream.subarray(offset, offset + pushBytes));
          decoded.push(...pushed.map((frame) => decodedValue<{ index: number; data: Uint8Array }>(frame)));
          offset += pushBytes;
        }
        expect(decoded.map((value) => Buffer.from(value.data).toString("hex"))).toEqual(
          values.map((value) => value.data.toString("hex")),
        );
        const inRegions = decoded.map((value) => regionOf(value.data) !== undefined);
        // A body of at least 32 KiB gets memory of its own; flagged, it is carved from a region.
        expect(inRegions).toEqual(frames.map(({ bytes, retained }) => retained && bytes >= 32 * 1024));
        expect(decoder.pendingBytes).toBe(0);
      }),
      { numRuns: 40 },
    );
  });
});
