/**
 * Byte layouts of every value the storage adapter writes (log entries and records in the journal, snapshot chunks in
 * LMDB, the frame headers of snapshot files). Every stored value starts with a CRC-32C of the rest of the value, and
 * every decoder verifies it before looking at a single other byte, so damaged bytes surface as a
 * `StorageCorruptionError` instead of being used.
 *
 * Log entries use a small explicit binary layout rather than msgpackr: they are the hot path (every proposal is
 * encoded once and read back by replication), their payload is already bytes, and a fixed header lets the decoder
 * check the stored index and term against what the key says without allocating an intermediate object. The rare
 * structured records (hard state, snapshot metadata with its configuration, receive progress) are msgpackr-encoded
 * inside the same checksummed frame, because their shape is richer and speed does not matter for them.
 */
import { crc32c } from "@node-rs/crc32";
import { Packr } from "msgpackr";
import { type Entry, type EntryKind, StorageCorruptionError } from "../types.js";

/** Format version written into every value, so a future layout change can be told apart from corruption. */
const FORMAT_VERSION = 1;

/** Bytes of the checksum that prefixes every value. */
const CHECKSUM_BYTES = 4;

/**
 * Entry layout: crc32c u32 | version u8 | kind u8 | reserved u16 | index u64 | term u64 | data. Integers are
 * big-endian; u64 fields hold JavaScript safe integers.
 */
export const ENTRY_HEADER_BYTES = 24;

const TWO_TO_THE_32 = 2 ** 32;

const KIND_CODES: Readonly<Record<EntryKind, number>> = { normal: 0, configuration: 1, noop: 2 };
const KINDS_BY_CODE: readonly EntryKind[] = ["normal", "configuration", "noop"];

/** msgpackr without record extensions, so a value decodes on its own without shared structures. */
const packr = new Packr({ useRecords: false });

function writeUint64(view: DataView, offset: number, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new Error(`invariant violated: stored integers must be non-negative safe integers, got ${value}`);
  }
  view.setUint32(offset, Math.floor(value / TWO_TO_THE_32));
  view.setUint32(offset + 4, value >>> 0);
}

function readUint64(view: DataView, offset: number): number {
  return view.getUint32(offset) * TWO_TO_THE_32 + view.getUint32(offset + 4);
}

function viewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Throws `StorageCorruptionError` unless `value` is long enough and its leading checksum matches its contents. */
function verifyChecksum(value: Uint8Array, minimumBytes: number, location: string): void {
  if (value.byteLength < minimumBytes) {
    throw new StorageCorruptionError(location, `value is ${value.byteLength} bytes, shorter than ${minimumBytes}`);
  }
  const stored = viewOf(value).getUint32(0);
  const computed = crc32c(value.subarray(CHECKSUM_BYTES));
  if (stored !== computed) {
    throw new StorageCorruptionError(location, `checksum mismatch (stored ${stored}, computed ${computed})`);
  }
}

function sealChecksum(value: Uint8Array): Uint8Array {
  viewOf(value).setUint32(0, crc32c(value.subarray(CHECKSUM_BYTES)));
  return value;
}

/** The checksum an encoded (or stored and verified) snapshot chunk carries: the CRC-32C of its data. */
export function encodedChunkChecksum(encoded: Uint8Array): number {
  return viewOf(encoded).getUint32(0);
}

/** Encodes one log entry with its checksum. */
export function encodeEntry(entry: Entry): Uint8Array {
  const value = new Uint8Array(encodedEntryBytes(entry));
  encodeEntryInto(entry, value);
  return value;
}

/** Bytes `encodeEntry` produces for `entry`. */
export function encodedEntryBytes(entry: Entry): number {
  return ENTRY_HEADER_BYTES + entry.data.byteLength;
}

/**
 * Encodes one log entry with its checksum into the first `encodedEntryBytes(entry)` bytes of `target` (exactly as
 * `encodeEntry` does), for callers that encode many entries into one buffer they reuse.
 */
export function encodeEntryInto(entry: Entry, target: Uint8Array): void {
  const value = target.subarray(0, encodedEntryBytes(entry));
  if (value.byteLength < ENTRY_HEADER_BYTES + entry.data.byteLength) {
    throw new Error(`invariant violated: ${target.byteLength} bytes cannot hold entry ${entry.index}`);
  }
  const view = viewOf(value);
  view.setUint32(0, 0);
  view.setUint8(4, FORMAT_VERSION);
  view.setUint8(5, KIND_CODES[entry.kind]);
  view.setUint16(6, 0);
  writeUint64(view, 8, entry.index);
  writeUint64(view, 16, entry.term);
  value.set(entry.data, ENTRY_HEADER_BYTES);
  sealChecksum(value);
}

/**
 * Verifies one stored log entry without decoding it (checksum, format version, kind, and that it holds
 * `expectedIndex`), for a copy of its bytes as they are: `encodeEntry`'s layout. Throws `StorageCorruptionError`.
 */
export function verifyEntry(
  value: Uint8Array,
  expectedIndex: number,
  location = `log entry ${expectedIndex}`,
): EntryKind {
  verifyChecksum(value, ENTRY_HEADER_BYTES, location);
  const view = viewOf(value);
  const version = view.getUint8(4);
  if (version !== FORMAT_VERSION) {
    throw new StorageCorruptionError(location, `unknown format version ${version}`);
  }
  const kind = KINDS_BY_CODE[view.getUint8(5)];
  if (kind === undefined) {
    throw new StorageCorruptionError(location, `unknown entry kind code ${view.getUint8(5)}`);
  }
  const index = readUint64(view, 8);
  if (index !== expectedIndex) {
    throw new StorageCorruptionError(location, `value holds index ${index}`);
  }
  return kind;
}

/**
 * Decodes and verifies one log entry read from key `expectedIndex`. A value whose embedded index differs from its
 * key (a misdirected write) is corruption too.
 */
export function decodeEntry(value: Uint8Array, expectedIndex: number): Entry {
  const entry = decodeOwnedEntry(value, expectedIndex);
  // Copy the payload into a plain Uint8Array: LMDB may hand out a Buffer whose memory it reuses, and a Buffer's
  // `slice` would only be a view of it.
  return { ...entry, data: new Uint8Array(entry.data) };
}

/**
 * Decodes and verifies one log entry as `decodeEntry` does, its data a view of `value` instead of a copy: for a value
 * read into memory that belongs to the caller alone, which nothing reuses or writes afterwards.
 */
export function decodeOwnedEntry(value: Uint8Array, expectedIndex: number): Entry {
  const kind = verifyEntry(value, expectedIndex);
  const view = viewOf(value);
  const index = readUint64(view, 8);
  const term = readUint64(view, 16);
  return { index, term, kind, data: value.subarray(ENTRY_HEADER_BYTES) };
}

/** Encodes a structured record (hard state, snapshot metadata, …) as msgpack inside a checksummed frame. */
export function encodeRecord(record: unknown): Uint8Array {
  const payload = packr.pack(record);
  const value = new Uint8Array(CHECKSUM_BYTES + 1 + payload.byteLength);
  value[CHECKSUM_BYTES] = FORMAT_VERSION;
  value.set(payload, CHECKSUM_BYTES + 1);
  return sealChecksum(value);
}

/** Verifies and decodes a structured record; the caller validates its shape. */
export function decodeRecord(value: Uint8Array, location: string): unknown {
  verifyChecksum(value, CHECKSUM_BYTES + 1, location);
  const version = value[CHECKSUM_BYTES];
  if (version !== FORMAT_VERSION) {
    throw new StorageCorruptionError(location, `unknown format version ${version}`);
  }
  try {
    return packr.unpack(value.subarray(CHECKSUM_BYTES + 1));
  } catch (error) {
    throw new StorageCorruptionError(location, `undecodable record: ${(error as Error).message}`);
  }
}

/** Encodes one chunk of snapshot data with its own checksum. */
export function encodeChunk(data: Uint8Array): Uint8Array {
  return encodeChunkInto(data, new Uint8Array(CHECKSUM_BYTES + data.byteLength));
}

/** Bytes of a chunk of `dataBytes` as `encodeChunk` stores it. */
export function encodedChunkBytes(dataBytes: number): number {
  return CHECKSUM_BYTES + dataBytes;
}

/**
 * Encodes one chunk into `target`, which must be exactly `encodedChunkBytes(data.byteLength)` long. `dataChecksum`,
 * when given, is the CRC-32C of `data` the caller computed already (a received chunk's, by the core), so the bytes
 * are not read a second time for it.
 */
export function encodeChunkInto(data: Uint8Array, target: Uint8Array, dataChecksum?: number): Uint8Array {
  if (target.byteLength !== CHECKSUM_BYTES + data.byteLength) {
    throw new Error(`invariant violated: a chunk of ${data.byteLength} bytes encoded into ${target.byteLength}`);
  }
  target.set(data, CHECKSUM_BYTES);
  if (dataChecksum === undefined) return sealChecksum(target);
  return sealChunk(target, dataChecksum);
}

/**
 * Where the data of a chunk encoded into `target` (`encodedChunkBytes` long) goes: a view of `target`, for data
 * written there in place, after which `sealChunk` completes the chunk.
 */
export function chunkDataRegion(target: Uint8Array): Uint8Array {
  return target.subarray(CHECKSUM_BYTES);
}

/** Completes a chunk whose data was written into its `chunkDataRegion`, with that data's CRC-32C. */
export function sealChunk(target: Uint8Array, dataChecksum: number): Uint8Array {
  viewOf(target).setUint32(0, dataChecksum >>> 0);
  return target;
}

/**
 * Verifies one stored snapshot chunk and returns its data as a view of `value`, without copying: valid for as long as
 * `value` is (LMDB's reused buffer of `getBinaryFast` only until the next read, a buffer of a range read for good).
 */
export function chunkDataView(value: Uint8Array, location: string): Uint8Array {
  verifyChecksum(value, CHECKSUM_BYTES, location);
  // A plain Uint8Array over the same memory, as `decodeChunk` gives (LMDB hands out Buffers).
  return new Uint8Array(value.buffer, value.byteOffset + CHECKSUM_BYTES, value.byteLength - CHECKSUM_BYTES);
}

/** Verifies one stored snapshot chunk and returns a copy of its data. */
export function decodeChunk(value: Uint8Array, location: string): Uint8Array {
  verifyChecksum(value, CHECKSUM_BYTES, location);
  return new Uint8Array(value.subarray(CHECKSUM_BYTES));
}

/**
 * Header of one frame of a snapshot file (`snapshot-files.ts`): crc32c u32 of the rest of the header | version u8 |
 * reserved u8 ×3 | offset u64 (the frame's first byte in the snapshot) | dataBytes u32 | data crc32c u32. The data
 * follows the header; its checksum is the one the sender's chunk carried, verified on receipt, so the bytes are not
 * read again to write them.
 */
export const SNAPSHOT_FRAME_HEADER_BYTES = 24;

/** What a snapshot file's frame header says about the data after it. */
export interface SnapshotFrameHeader {
  /** Byte of the snapshot the frame's data starts at. */
  readonly offset: number;
  readonly dataBytes: number;
  /** CRC-32C of the frame's data. */
  readonly dataChecksum: number;
}

/** The header of a frame holding `header.dataBytes` bytes of snapshot data from `header.offset` on. */
export function encodeSnapshotFrameHeader(header: SnapshotFrameHeader): Uint8Array {
  if (!Number.isSafeInteger(header.dataBytes) || header.dataBytes < 1 || header.dataBytes >= TWO_TO_THE_32) {
    throw new Error(`invariant violated: a snapshot frame holds 1 to 2^32 − 1 bytes, got ${header.dataBytes}`);
  }
  const encoded = new Uint8Array(SNAPSHOT_FRAME_HEADER_BYTES);
  const view = viewOf(encoded);
  view.setUint8(CHECKSUM_BYTES, FORMAT_VERSION);
  writeUint64(view, 8, header.offset);
  view.setUint32(16, header.dataBytes);
  view.setUint32(20, header.dataChecksum >>> 0);
  return sealChecksum(encoded);
}

/** Verifies a frame header read from a snapshot file; throws `StorageCorruptionError` naming `location` otherwise. */
export function decodeSnapshotFrameHeader(encoded: Uint8Array, location: string): SnapshotFrameHeader {
  verifyChecksum(encoded, SNAPSHOT_FRAME_HEADER_BYTES, location);
  const view = viewOf(encoded);
  const version = view.getUint8(CHECKSUM_BYTES);
  if (version !== FORMAT_VERSION) {
    throw new StorageCorruptionError(location, `unknown snapshot frame version ${version}`);
  }
  const dataBytes = view.getUint32(16);
  if (dataBytes === 0) throw new StorageCorruptionError(location, "snapshot frame holds no data");
  return { offset: readUint64(view, 8), dataBytes, dataChecksum: view.getUint32(20) };
}
