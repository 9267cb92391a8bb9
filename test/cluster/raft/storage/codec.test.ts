import { crc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import {
  decodeChunk,
  decodeEntry,
  decodeRecord,
  encodeChunk,
  encodeChunkInto,
  encodedChunkBytes,
  encodeEntry,
  encodeRecord,
} from "../../../../src/cluster/raft/storage/codec.js";
import { type Entry, StorageCorruptionError } from "../../../../src/cluster/raft/types.js";

const entry: Entry = { index: 2 ** 40 + 7, term: 2 ** 33 + 1, kind: "configuration", data: new Uint8Array([1, 2, 3]) };

describe("entry codec", () => {
  it("round-trips index, term, kind and data, including integers above 32 bits", () => {
    expect(decodeEntry(encodeEntry(entry), entry.index)).toEqual(entry);
  });

  it("detects a flipped bit anywhere in the value", () => {
    const encoded = encodeEntry(entry);
    for (let position = 0; position < encoded.byteLength; position += 1) {
      const damaged = encoded.slice();
      damaged[position] = (damaged[position] ?? 0) ^ 0x10;
      expect(() => decodeEntry(damaged, entry.index)).toThrow(StorageCorruptionError);
    }
  });

  it("detects a value stored under the wrong index", () => {
    expect(() => decodeEntry(encodeEntry(entry), entry.index + 1)).toThrow(/holds index/);
  });

  it("detects a truncated value", () => {
    expect(() => decodeEntry(encodeEntry(entry).subarray(0, 10), entry.index)).toThrow(StorageCorruptionError);
  });
});

describe("record and chunk codecs", () => {
  it("round-trip and detect damage", () => {
    const record = { term: 3, votedFor: null, commitIndex: 9 };
    const encodedRecord = encodeRecord(record);
    expect(decodeRecord(encodedRecord, "hard state")).toEqual(record);
    encodedRecord[encodedRecord.byteLength - 1] = (encodedRecord[encodedRecord.byteLength - 1] ?? 0) ^ 1;
    expect(() => decodeRecord(encodedRecord, "hard state")).toThrow(StorageCorruptionError);

    const encodedChunk = encodeChunk(new Uint8Array([9, 8, 7]));
    expect([...decodeChunk(encodedChunk, "chunk")]).toEqual([9, 8, 7]);
    encodedChunk[4] = 0;
    expect(() => decodeChunk(encodedChunk, "chunk")).toThrow(StorageCorruptionError);
  });

  it("seals a chunk with the checksum its caller computed, without computing it again", () => {
    const data = new Uint8Array([9, 8, 7, 6]);
    const target = new Uint8Array(encodedChunkBytes(data.byteLength));
    const sealed = encodeChunkInto(data, target, crc32c(data) >>> 0);
    expect(sealed).toBe(target);
    expect(Buffer.from(sealed).equals(Buffer.from(encodeChunk(data)))).toBe(true);
    expect([...decodeChunk(sealed, "chunk")]).toEqual([9, 8, 7, 6]);
    // The given checksum is written as it is: a wrong one is found when the chunk is read back.
    const wronglySealed = encodeChunkInto(data, new Uint8Array(target.byteLength), (crc32c(data) + 1) >>> 0);
    expect(() => decodeChunk(wronglySealed, "chunk")).toThrow(StorageCorruptionError);
  });
});
