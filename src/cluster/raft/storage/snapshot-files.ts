/**
 * Snapshots in plain files, the ones a member receives from a leader and the ones it takes itself: one file per
 * snapshot, `<scope>-<slot>.snapshot` in the storage's `snapshots/` directory, holding the chunks as frames in the order
 * they were written (a checksummed header naming the chunk's offset, size and data checksum, then the data; see
 * `encodeSnapshotFrameHeader`).
 *
 * Why files and not LMDB (which still holds a snapshot installed whole, and those of earlier builds): a joining member
 * writes its whole state here, as fast as the network delivers it, and LMDB made every received byte cost three to
 * five times the processor time of a plain file's write (it copies each value into pages it allocates per transaction,
 * then into the page cache, and syncs twice per commit); and a leader sending a snapshot it took reads each frame from
 * the page cache with one `readv`, where reading LMDB's chunks faulted its map into the process and copied every byte
 * twice (DEVELOPERS.md, "The log after the snapshot"). A frame here is one `writev`, with no copy and no sync; the file
 * is synced once, before the record that installs the snapshot.
 *
 * A file's frames are indexed in memory (offset, size, position and checksum of each), from the writes themselves and,
 * after a restart, from a scan of the file. Every read verifies the frame's header against the index and its data
 * against its checksum, so damage surfaces as a `StorageCorruptionError` naming the file and position. Writes only
 * ever append; a scan of a file still being received keeps the longest prefix of frames that verify and continue each
 * other from byte 0, and cuts the rest, which is the tail a crash left unsynced.
 */
import {
  close,
  closeSync,
  constants,
  fdatasync,
  fstatSync,
  fsync,
  ftruncateSync,
  openSync,
  readdirSync,
  readSync,
  readvSync,
  unlink,
  writev,
} from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { crc32c } from "@node-rs/crc32";
import { createPrivateDirectoryDurably, privateFileMode } from "../../../files/private-files.js";
import { combineCrc32c } from "../crc32c-combine.js";
import { StorageCorruptionError } from "../types.js";
import { decodeSnapshotFrameHeader, encodeSnapshotFrameHeader, SNAPSHOT_FRAME_HEADER_BYTES } from "./codec.js";

const writevAsync = promisify(writev);
const fdatasyncAsync = promisify(fdatasync);
const fsyncAsync = promisify(fsync);
const closeAsync = promisify(close);
const unlinkAsync = promisify(unlink);

/** Name of a snapshot file: `<scope>-<slot>.snapshot`. */
const FILE_NAME_PATTERN = /^(\d+)-(\d+)\.snapshot$/;

/** One chunk of received snapshot data, with the CRC-32C of its data. */
export interface SnapshotFileChunk {
  readonly offset: number;
  readonly data: Uint8Array;
  readonly checksum: number;
}

/** One frame of a snapshot file, as the index knows it. */
export interface SnapshotFrame {
  /** Byte of the snapshot its data starts at. */
  readonly offset: number;
  readonly dataBytes: number;
  /** CRC-32C of its data. */
  readonly dataChecksum: number;
}

/**
 * Most data one frame may hold: a header naming more is damage. Far above the chunks a leader sends (1 MiB), and
 * what the environment's chunk buffers hold at most.
 */
export const MAX_SNAPSHOT_FRAME_DATA_BYTES = 64 * 1024 * 1024;

/** What a scan of a snapshot file found. */
export interface SnapshotFileScan {
  /** Snapshot bytes its verified frames hold from byte 0. */
  readonly dataBytes: number;
  /** CRC-32C of those bytes. */
  readonly checksum: number;
  /** File bytes after those frames, cut off the file. */
  readonly cutBytes: number;
}

/** A snapshot file's descriptor and index; see the module comment. */
interface OpenFile {
  readonly path: string;
  readonly descriptor: number;
  /** Frames in order; each continues the one before it in the snapshot and in the file. */
  readonly frames: SnapshotFrame[];
  /** File position of each frame's header. */
  readonly positions: number[];
  /** Where the next frame's header goes. */
  endPosition: number;
  /** Snapshot bytes the frames hold, from byte 0. */
  dataBytes: number;
  /** Writes in progress; a sync, a removal and closing wait for them. */
  readonly writes: Set<Promise<void>>;
  /** Whether the file's directory entry may not be durable yet (no sync of this process covered it). */
  directoryEntryUnsynced: boolean;
}

/** Key of a file in the maps below. */
function fileKey(scope: number, slot: number): string {
  return `${scope}-${slot}`;
}

/**
 * Writes `buffers` (`bytes` in all) at `position` with `writev` on the thread pool, writing the rest again after a
 * short write: a disk that fills up writes part of a call and fails only the next one, which then names the cause
 * (ENOSPC) instead of a count of bytes.
 */
async function writeAll(
  path: string,
  descriptor: number,
  buffers: readonly Uint8Array[],
  bytes: number,
  position: number,
): Promise<void> {
  let remaining = [...buffers];
  let written = 0;
  // Bounded: every pass writes at least one byte (a pass that writes none fails), up to `bytes`.
  while (written < bytes) {
    const { bytesWritten } = await writevAsync(descriptor, remaining, position + written);
    if (bytesWritten === 0) throw new Error(`no bytes written to ${path} at ${position + written}`);
    written += bytesWritten;
    remaining = unwrittenPart(remaining, bytesWritten);
  }
}

/** What is left of `buffers` after their first `writtenBytes` bytes. */
function unwrittenPart(buffers: readonly Uint8Array[], writtenBytes: number): Uint8Array[] {
  let skipped = writtenBytes;
  const rest: Uint8Array[] = [];
  for (const buffer of buffers) {
    if (skipped >= buffer.byteLength) {
      skipped -= buffer.byteLength;
      continue;
    }
    rest.push(skipped === 0 ? buffer : buffer.subarray(skipped));
    skipped = 0;
  }
  return rest;
}

/** The snapshot files of one storage environment; see the module comment. */
export class SnapshotFiles {
  /** Files present, by `fileKey`, with their scope and slot; opened (and indexed) on first use. */
  private readonly present = new Map<string, { readonly scope: number; readonly slot: number }>();
  private readonly open = new Map<string, OpenFile>();
  /** Files being removed: no write may open them again meanwhile (their slot is never used again anyway). */
  private readonly removing = new Set<string>();
  /** Scratch memory for the frame headers and data a scan reads. */
  private readonly header = new Uint8Array(SNAPSHOT_FRAME_HEADER_BYTES);
  private closed = false;

  private constructor(readonly directory: string) {
    createPrivateDirectoryDurably(directory);
    for (const name of readdirSync(directory)) {
      const match = FILE_NAME_PATTERN.exec(name);
      if (match === null) continue;
      const scope = Number(match[1]);
      const slot = Number(match[2]);
      if (!Number.isSafeInteger(scope) || !Number.isSafeInteger(slot) || name !== `${scope}-${slot}.snapshot`) continue;
      this.present.set(fileKey(scope, slot), { scope, slot });
    }
  }

  /** Opens the snapshot files in `directory`, creating the directory (0700) when missing. */
  static open(directory: string): SnapshotFiles {
    return new SnapshotFiles(directory);
  }

  /** Slots of the files present for `scope`, ascending. */
  slots(scope: number): number[] {
    this.assertOpen();
    const slots: number[] = [];
    for (const file of this.present.values()) if (file.scope === scope) slots.push(file.slot);
    return slots.sort((left, right) => left - right);
  }

  /** Scopes that have at least one file. */
  scopes(): number[] {
    this.assertOpen();
    return [...new Set([...this.present.values()].map((file) => file.scope))];
  }

  /** Whether a file of `scope` and `slot` is present. */
  has(scope: number, slot: number): boolean {
    this.assertOpen();
    return this.present.has(fileKey(scope, slot));
  }

  /**
   * Indexes the file of a snapshot still being received and returns the bytes its verified frames hold from byte 0
   * with their CRC-32C (every frame's data is read and verified). Frames after the first that does not verify or does
   * not continue the bytes before it are cut off the file: they are the unsynced tail a crash left, and the sender
   * sends those bytes again. A missing file holds nothing.
   */
  scanIncoming(scope: number, slot: number, sizeBytes: number): SnapshotFileScan {
    this.assertOpen();
    if (!this.has(scope, slot)) return { dataBytes: 0, checksum: 0, cutBytes: 0 };
    const file = this.openFile(scope, slot, false);
    this.forgetFrames(file);
    const fileBytes = fstatSync(file.descriptor).size;
    let data = new Uint8Array(0);
    let checksum = 0;
    // Bounded: every pass moves past a header and at least one byte of data, up to the file's size.
    while (file.endPosition + SNAPSHOT_FRAME_HEADER_BYTES <= fileBytes) {
      const frame = this.readHeader(file, file.endPosition, fileBytes);
      if (frame === null || frame.offset !== file.dataBytes || file.dataBytes + frame.dataBytes > sizeBytes) break;
      if (data.byteLength < frame.dataBytes) data = new Uint8Array(frame.dataBytes);
      const target = data.subarray(0, frame.dataBytes);
      const dataPosition = file.endPosition + SNAPSHOT_FRAME_HEADER_BYTES;
      if (readSync(file.descriptor, target, 0, frame.dataBytes, dataPosition) !== frame.dataBytes) break;
      if (crc32c(target) >>> 0 !== frame.dataChecksum) break;
      this.addFrame(file, frame);
      checksum = combineCrc32c(checksum, frame.dataChecksum, frame.dataBytes);
    }
    const cutBytes = fileBytes - file.endPosition;
    if (cutBytes > 0) ftruncateSync(file.descriptor, file.endPosition);
    return { dataBytes: file.dataBytes, checksum, cutBytes };
  }

  /**
   * Indexes the file of an installed snapshot from its frame headers (the data is verified when it is read) and throws
   * `StorageCorruptionError` unless the file is there and its frames hold exactly `sizeBytes` bytes from byte 0: it was
   * synced complete before the record installing it, so anything else is damage.
   */
  scanInstalled(scope: number, slot: number, sizeBytes: number): void {
    this.assertOpen();
    const location = `snapshot file ${join(this.directory, `${scope}-${slot}.snapshot`)}`;
    if (!this.has(scope, slot))
      throw new StorageCorruptionError(location, "the file of the installed snapshot is missing");
    const file = this.openFile(scope, slot, false);
    this.forgetFrames(file);
    const fileBytes = fstatSync(file.descriptor).size;
    // Bounded: every pass moves past a header and at least one byte of data, up to the file's size.
    while (file.dataBytes < sizeBytes) {
      const where = `${location} at byte ${file.endPosition}`;
      const frame = this.readHeader(file, file.endPosition, fileBytes);
      if (frame === null) throw new StorageCorruptionError(where, "frame header is missing, damaged or cut short");
      if (frame.offset !== file.dataBytes || file.dataBytes + frame.dataBytes > sizeBytes) {
        throw new StorageCorruptionError(
          where,
          `frame of ${frame.dataBytes} bytes at snapshot byte ${frame.offset} does not continue at ${file.dataBytes}`,
        );
      }
      this.addFrame(file, frame);
    }
    if (fileBytes !== file.endPosition) {
      throw new StorageCorruptionError(
        `${location} at byte ${file.endPosition}`,
        "bytes follow the snapshot's last frame",
      );
    }
  }

  /**
   * Appends `chunks` to the file of `scope` and `slot` (created when missing) as frames, in one `writev` on the thread
   * pool, and resolves once written (not synced). They must continue the bytes the file holds; the index counts them
   * at once. The chunks' memory must not change until this settles.
   */
  append(scope: number, slot: number, chunks: readonly SnapshotFileChunk[]): Promise<void> {
    this.assertOpen();
    const file = this.openFile(scope, slot, true);
    const buffers: Uint8Array[] = [];
    const frames: SnapshotFrame[] = [];
    const position = file.endPosition;
    let bytes = 0;
    let dataEnd = file.dataBytes;
    // Every chunk is checked (and its header encoded) before the index counts any: a refused call changes nothing.
    for (const chunk of chunks) {
      if (chunk.offset !== dataEnd) {
        throw new Error(
          `invariant violated: a snapshot frame at ${chunk.offset} does not continue the file at ${dataEnd}`,
        );
      }
      // A scan refuses such frames as damage, so they are never written.
      if (chunk.data.byteLength < 1 || chunk.data.byteLength > MAX_SNAPSHOT_FRAME_DATA_BYTES) {
        throw new Error(
          `invariant violated: a snapshot frame must hold 1 to ${MAX_SNAPSHOT_FRAME_DATA_BYTES} bytes, got ${chunk.data.byteLength}`,
        );
      }
      const frame = { offset: chunk.offset, dataBytes: chunk.data.byteLength, dataChecksum: chunk.checksum >>> 0 };
      buffers.push(encodeSnapshotFrameHeader(frame), chunk.data);
      frames.push(frame);
      bytes += SNAPSHOT_FRAME_HEADER_BYTES + chunk.data.byteLength;
      dataEnd += chunk.data.byteLength;
    }
    for (const frame of frames) this.addFrame(file, frame);
    if (buffers.length === 0) return Promise.resolve();
    return this.track(file, writeAll(file.path, file.descriptor, buffers, bytes, position));
  }

  /** Makes what was appended to a file durable (its directory entry too, when the file is new). */
  async sync(scope: number, slot: number): Promise<void> {
    this.assertOpen();
    const file = this.openFile(scope, slot, true);
    await Promise.all([...file.writes]);
    // Counted among the file's writes, so that a removal or closing does not close the descriptor under it.
    const synced = async (): Promise<void> => {
      await fdatasyncAsync(file.descriptor);
      if (!file.directoryEntryUnsynced) return;
      const directory = openSync(this.directory, constants.O_RDONLY | constants.O_DIRECTORY);
      try {
        await fsyncAsync(directory);
      } finally {
        closeSync(directory);
      }
      file.directoryEntryUnsynced = false;
    };
    await this.track(file, synced());
  }

  /** Frames of a file in order (empty for a file not indexed). */
  frames(scope: number, slot: number): readonly SnapshotFrame[] {
    this.assertOpen();
    return this.open.get(fileKey(scope, slot))?.frames ?? [];
  }

  /** Number of the frame whose data holds snapshot byte `offset`, or -1 when none does. */
  frameHolding(scope: number, slot: number, offset: number): number {
    const frames = this.frames(scope, slot);
    let low = 0;
    let high = frames.length - 1;
    // Bounded: a binary search over the frames, which are in order and continue each other.
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const frame = frames[middle] as SnapshotFrame;
      if (offset < frame.offset) high = middle - 1;
      else if (offset >= frame.offset + frame.dataBytes) low = middle + 1;
      else return middle;
    }
    return -1;
  }

  /**
   * Reads frame number `frameNumber` of an indexed file into `target` (exactly its data's size) with one system call
   * for header and data, and verifies both: the header against the index, the data against its checksum.
   */
  readFrame(scope: number, slot: number, frameNumber: number, target: Uint8Array): SnapshotFrame {
    this.assertOpen();
    const file = this.open.get(fileKey(scope, slot));
    const frame = file?.frames[frameNumber];
    if (file === undefined || frame === undefined) {
      throw new Error(
        `invariant violated: frame ${frameNumber} of snapshot file ${fileKey(scope, slot)} is not indexed`,
      );
    }
    if (target.byteLength !== frame.dataBytes) {
      throw new Error(`invariant violated: a frame of ${frame.dataBytes} bytes read into ${target.byteLength}`);
    }
    const position = file.positions[frameNumber] as number;
    const location = `snapshot file ${file.path} at byte ${position}`;
    const read = readvSync(file.descriptor, [this.header, target], position);
    if (read !== SNAPSHOT_FRAME_HEADER_BYTES + frame.dataBytes) {
      throw new StorageCorruptionError(
        location,
        `frame cut short: ${read} of ${SNAPSHOT_FRAME_HEADER_BYTES + frame.dataBytes} bytes`,
      );
    }
    const stored = decodeSnapshotFrameHeader(this.header, location);
    if (
      stored.offset !== frame.offset ||
      stored.dataBytes !== frame.dataBytes ||
      stored.dataChecksum !== frame.dataChecksum
    ) {
      throw new StorageCorruptionError(location, "frame header differs from the one written there");
    }
    const checksum = crc32c(target) >>> 0;
    if (checksum !== frame.dataChecksum) {
      throw new StorageCorruptionError(
        location,
        `data checksum mismatch (stored ${frame.dataChecksum}, computed ${checksum})`,
      );
    }
    return frame;
  }

  /**
   * Removes a file once its writes settled. A removal that fails leaves a file no record refers to, which the storage
   * removes after its next start, so it fails nothing.
   */
  async remove(scope: number, slot: number): Promise<void> {
    this.assertOpen();
    const key = fileKey(scope, slot);
    this.present.delete(key);
    this.removing.add(key);
    const file = this.open.get(key);
    this.open.delete(key);
    try {
      if (file !== undefined) {
        await Promise.allSettled([...file.writes]);
        await closeAsync(file.descriptor).catch(() => undefined);
      }
      await unlinkAsync(join(this.directory, `${key}.snapshot`)).catch(() => undefined);
    } finally {
      this.removing.delete(key);
    }
  }

  /** Waits for the writes in progress, then closes every file. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const files = [...this.open.values()];
    this.open.clear();
    for (const file of files) {
      await Promise.allSettled([...file.writes]);
      closeSync(file.descriptor);
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new Error("the snapshot files are closed");
  }

  /** The open file of `scope` and `slot`, opening (and with `create`, creating) it when it is not open yet. */
  private openFile(scope: number, slot: number, create: boolean): OpenFile {
    const key = fileKey(scope, slot);
    const known = this.open.get(key);
    if (known !== undefined) return known;
    const path = join(this.directory, `${key}.snapshot`);
    if (this.removing.has(key)) throw new Error(`invariant violated: snapshot file ${path} is being removed`);
    const existed = this.present.has(key);
    if (!existed && !create) throw new Error(`invariant violated: snapshot file ${path} does not exist`);
    const flags = constants.O_RDWR | (existed ? 0 : constants.O_CREAT);
    const file: OpenFile = {
      path,
      descriptor: openSync(path, flags, privateFileMode),
      frames: [],
      positions: [],
      endPosition: 0,
      dataBytes: 0,
      writes: new Set(),
      // A file found present may have been created by a process that crashed before it synced the directory (a
      // receipt resumed after a restart), so its first sync here syncs the directory too.
      directoryEntryUnsynced: true,
    };
    this.present.set(key, { scope, slot });
    this.open.set(key, file);
    return file;
  }

  /** The verified header at `position`, or null when it is cut short, damaged or names a frame the file cannot hold. */
  private readHeader(file: OpenFile, position: number, fileBytes: number): SnapshotFrame | null {
    if (
      readSync(file.descriptor, this.header, 0, SNAPSHOT_FRAME_HEADER_BYTES, position) !== SNAPSHOT_FRAME_HEADER_BYTES
    ) {
      return null;
    }
    let frame: SnapshotFrame;
    try {
      frame = decodeSnapshotFrameHeader(this.header, `snapshot file ${file.path} at byte ${position}`);
    } catch (error) {
      if (error instanceof StorageCorruptionError) return null;
      throw error;
    }
    const fits = position + SNAPSHOT_FRAME_HEADER_BYTES + frame.dataBytes <= fileBytes;
    return fits && frame.dataBytes <= MAX_SNAPSHOT_FRAME_DATA_BYTES ? frame : null;
  }

  /**
   * Empties a file's index before a scan rebuilds it from the file: a storage opened again in the same environment
   * (a replica that left its partition and joins it again) scans files this object has open already.
   */
  private forgetFrames(file: OpenFile): void {
    if (file.writes.size > 0) {
      throw new Error(`invariant violated: snapshot file ${file.path} scanned while it is being written`);
    }
    file.frames.length = 0;
    file.positions.length = 0;
    file.endPosition = 0;
    file.dataBytes = 0;
  }

  private addFrame(file: OpenFile, frame: SnapshotFrame): void {
    file.frames.push(frame);
    file.positions.push(file.endPosition);
    file.endPosition += SNAPSHOT_FRAME_HEADER_BYTES + frame.dataBytes;
    file.dataBytes += frame.dataBytes;
  }

  /** Counts `written` among the file's writes until it settles. */
  private track(file: OpenFile, written: Promise<void>): Promise<void> {
    file.writes.add(written);
    const settled = (): void => {
      file.writes.delete(written);
    };
    written.then(settled, settled);
    return written;
  }
}
