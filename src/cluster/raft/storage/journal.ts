/**
 * The broker's Raft journal: an append-only log of transactions in preallocated segment files, holding every
 * replica's log entries and records (hard state, log start, snapshot records). Why not LMDB for these: an LMDB commit
 * is copy-on-write, so even one small entry rewrites a leaf page, the branch pages above it, the free-page list and
 * the meta page (about ten 4 KiB pages) and syncs twice, where appending one transaction to a file and syncing it once
 * is all a consensus log needs (the cluster benchmark prints the disk work per write; DEVELOPERS.md compares both).
 *
 * Layout: `<directory>/<sequence>.journal`, each starting with a 16-byte header (magic, version, four zero bytes)
 * followed by records `payloadBytes u32 | checksum u32 | payload`, then zeros up to the preallocated size. The
 * checksum is the payload's CRC-32C bound to where the record lies (`journalRecordChecksum`: XORed with the CRC-32C of
 * the segment's sequence and the record's byte offset; format 1, still read and appended to, has no binding). One
 * record is one transaction, written by one write that is durable before the next write starts, so a transaction is
 * durable entirely or not at all. Writing over preallocated zeros changes no file metadata, so making a record durable
 * (a write with O_DSYNC, or `fdatasync`) flushes just the written pages.
 *
 * Recovery treats corruption as an error, never as something to cut away. A crash can interrupt only the newest
 * write, so the one thing recovery may repair is a torn tail: a record that fails (its length reaches past the file,
 * or its checksum does not match) in the last segment, with no intact record anywhere after it. Its bytes and
 * everything after them are zeroed, so that new records are never followed by stale bytes, and the journal opens.
 * Every other failure was a complete record once, because a later record is only written after the earlier one is
 * durable: a failed record followed by an intact one, a failed record or stray bytes in an older segment, a record
 * whose checksum matches but which does not decode. Then opening throws `StorageCorruptionError` naming the file and
 * the byte offset, and changes nothing on disk, so an operator can inspect it. Cutting the journal there instead
 * would silently drop every later transaction, acknowledged ones included, and could roll back a vote that the member
 * would then give a second time. A torn write can leave non-zero bytes after its offset (the first page of a
 * multi-page write lost, later pages on disk); those are pieces of one record, never a whole record with a matching
 * checksum, so they still count as a torn tail. Nor can a record's payload hold one: a payload is user data (message
 * variables), which may hold the bytes of a valid record, but a record verifies only at the position its checksum was
 * bound to, so bytes copied elsewhere never count as an intact record. What cannot be told apart: damage inside the
 * last record looks like a torn write, and that last transaction is dropped.
 *
 * Two rules of the writer keep the distinction sound. The checkpoint that opens a segment is written and made durable
 * on its own before the transaction that follows it: written together, a crash could lose the checkpoint's page and
 * keep the transaction's, an intact record after a failed one without any damage. And a segment is deleted only once
 * its entries were already dead before the transaction just written (one transaction late), so dropping the last
 * record as torn never leaves the journal without entries that the transaction before it still held.
 *
 * The contents live in memory as an index: records by (scope, name) with their values, entries by (scope, index)
 * with where their bytes are, read back on demand. The first record of every segment is a checkpoint of all records,
 * so a segment that holds no live entry any more can be deleted (oldest first) without losing anything. A
 * transaction's writes are visible to reads until it is sealed, and reach the index once it is durable.
 */
import {
  closeSync,
  constants,
  fdatasync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  unlinkSync,
  write,
  writeSync,
} from "node:fs";
import { open as openFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { privateDirectoryMode, privateFileMode } from "../../../files/private-files.js";
import { StorageCorruptionError, UnerasedWriteError } from "../types.js";

/** Options of a journal. */
export interface JournalOptions {
  /** Directory of the segment files; created when missing. */
  readonly directory: string;
  /** Preallocated size of each segment file (a record larger than what is left starts the next segment). */
  readonly segmentBytes?: number;
}

/** Log entries by (scope, index), as the storage adapter reads and writes them. */
export interface JournalEntries {
  /** The entry's bytes (the running transaction's when it wrote them), or undefined. */
  get(scope: number, index: number): Uint8Array | undefined;
  /** How many bytes `get` would answer for the entry, without reading them; undefined when there is no entry. */
  sizeOf(scope: number, index: number): number | undefined;
  /**
   * Reads the bytes of the entries from `fromIndex` on into `targets`, one entry each, every target exactly the
   * entry's `sizeOf` long (a raw copy of many entries into one buffer). Entries that lie close together in one segment
   * are read with one system call (see `MAX_RANGE_READ_BYTES`); throws when an entry is missing.
   */
  readRangeInto(scope: number, fromIndex: number, targets: readonly Uint8Array[]): void;
  /** Where the entry's bytes are stored (segment file and byte offset), for error messages; undefined when nowhere. */
  locate(scope: number, index: number): string | undefined;
  /** Stores the entry in the running transaction. */
  put(scope: number, index: number, value: Uint8Array): void;
  /** Removes the entry in the running transaction. */
  remove(scope: number, index: number): void;
  /** Lowest and highest stored index of `scope`, or null when it holds no entry. */
  bounds(scope: number): { first: number; last: number } | null;
}

/** Records by (scope, name). */
export interface JournalRecords {
  /** The record's bytes (the running transaction's when it wrote them), or undefined. */
  get(scope: number, name: string): Uint8Array | undefined;
  /** Stores the record in the running transaction. */
  put(scope: number, name: string, value: Uint8Array): void;
  /** Removes the record in the running transaction. */
  remove(scope: number, name: string): void;
}

/**
 * Default segment size: rolling over (a checkpoint and a directory sync) happens every few seconds at most under full
 * load, while a broker's idle journal takes only one or two such files on disk.
 */
export const DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024;

/**
 * Dead segments a commit deletes at most, the oldest first. Each deletion (an unlink and a directory sync) is paid on
 * the committing thread, and a compaction behind a snapshot empties as many segments as the log it drops filled: all
 * of them deleted by one commit held a broker's event loop for hundreds of milliseconds. The rest go with the next
 * commits; a dead segment left meanwhile is only replayed again if the process restarts. Two, because a commit opens
 * at most one segment: the dead ones still decrease while every commit rolls over.
 */
export const MAX_SEGMENT_DELETIONS_PER_COMMIT = 2;

/**
 * How `readRangeInto` reads several entries with one system call: entries of at most `MAX_GROUPED_ENTRY_BYTES` each,
 * at most `MAX_RANGE_GAP_BYTES` apart, covering at most `MAX_RANGE_READ_BYTES`, are read together into a scratch
 * buffer and copied into their targets. Entries of one scope are interleaved with those of the broker's other scopes
 * and with operation headers: for small entries a system call each costs more than reading the small gaps along and
 * copying the bytes once more, while a large entry is read on its own straight into its target.
 */
export const MAX_RANGE_READ_BYTES = 1024 * 1024;
export const MAX_RANGE_GAP_BYTES = 16 * 1024;
export const MAX_GROUPED_ENTRY_BYTES = 16 * 1024;

/** Largest segment size accepted (records are still allowed to outgrow a segment). */
const MAX_SEGMENT_BYTES = 1024 * 1024 * 1024;
const MAGIC = Buffer.from("FPJOURNL", "latin1");
/** The format new segments are written in: checksums bound to the record's position. */
const FORMAT_VERSION = 2;
/** The first format, whose checksums are the payload's alone; its segments are still read and appended to. */
const UNBOUND_FORMAT_VERSION = 1;
const SEGMENT_HEADER_BYTES = 16;
const RECORD_HEADER_BYTES = 8;
const ZEROS = Buffer.alloc(1024 * 1024);
const SEGMENT_SUFFIX = ".journal";
/**
 * Segments are opened with O_DSYNC where the platform has it: a write returns once its data is durable, as a write
 * followed by `fdatasync` would, in one system call instead of two (a 1 KiB commit into a preallocated file took
 * 0.18–0.22 instead of 0.19–0.22 ms with three processes syncing at once on the development machine, over several
 * runs). Elsewhere every write is followed by `fdatasync`.
 */
const DATA_SYNC_ON_WRITE = constants.O_DSYNC !== undefined;
const PREPARED_SUFFIX = ".prepared";

/** Operation codes inside a transaction's payload. */
const PUT_ENTRY = 1;
const REMOVE_ENTRY = 2;
const PUT_RECORD = 3;
const REMOVE_RECORD = 4;
/** Forget every record: starts the checkpoint at the head of a segment. */
const RESET_RECORDS = 5;

type Operation =
  | { readonly code: typeof PUT_ENTRY; readonly scope: number; readonly index: number; readonly value: Uint8Array }
  | { readonly code: typeof REMOVE_ENTRY; readonly scope: number; readonly index: number }
  | { readonly code: typeof PUT_RECORD; readonly scope: number; readonly name: string; readonly value: Uint8Array }
  | { readonly code: typeof REMOVE_RECORD; readonly scope: number; readonly name: string }
  | { readonly code: typeof RESET_RECORDS };

interface Segment {
  readonly sequence: number;
  readonly path: string;
  readonly fd: number;
  /** The format of the segment's header, which its records follow. */
  readonly version: number;
  /** Entries of the index whose bytes are in this segment. */
  liveEntries: number;
}

/** Where an entry's bytes are. */
interface EntryLocation {
  readonly segment: Segment;
  readonly offset: number;
  readonly length: number;
}

/** A transaction encoded as one record and placed, not yet written. */
interface PreparedWrite {
  readonly buffer: Buffer;
  readonly segment: Segment;
  /** Where `buffer` goes in the segment. */
  readonly fileOffset: number;
}

interface StoredRecord {
  readonly scope: number;
  readonly name: string;
  readonly value: Uint8Array;
}

/** The entries of `scope` in a map by scope, created when missing. */
function scopeOf<T>(byScope: Map<number, Map<number, T>>, scope: number): Map<number, T> {
  let scoped = byScope.get(scope);
  if (scoped === undefined) {
    scoped = new Map();
    byScope.set(scope, scoped);
  }
  return scoped;
}

/** What the index keeps of a record written by `operation`. */
function storedRecord(operation: {
  readonly scope: number;
  readonly name: string;
  readonly value: Uint8Array;
}): StoredRecord {
  return { scope: operation.scope, name: operation.name, value: operation.value };
}

function recordKey(scope: number, name: string): string {
  return `${scope}/${name}`;
}

function segmentPath(directory: string, sequence: number): string {
  return join(directory, `${String(sequence).padStart(20, "0")}${SEGMENT_SUFFIX}`);
}

/** The journal; see the module comment. */
export class Journal {
  readonly entries: JournalEntries;
  readonly records: JournalRecords;
  private readonly directory: string;
  private readonly segmentBytes: number;
  /** Live segments, oldest first; the last one is written. */
  private readonly segments: Segment[] = [];
  /** Where the next record goes in the last segment. */
  private writeOffset = SEGMENT_HEADER_BYTES;
  private readonly entryIndex = new Map<number, Map<number, EntryLocation>>();
  private readonly recordIndex = new Map<string, StoredRecord>();
  /** The running transaction's operations and its view of what they changed; null outside a transaction. */
  private transaction: {
    readonly operations: Operation[];
    readonly entries: Map<number, Map<number, Uint8Array | null>>;
    readonly records: Map<string, StoredRecord | null>;
  } | null = null;
  /** A transaction whose writes are complete, waiting for `commit`; reads no longer see it. */
  private sealed: Operation[] | null = null;
  /** A zero-filled file being prepared in the background for the next segment. */
  private preparing: Promise<string | null> | null = null;
  /** The path of a prepared file, ready to become the next segment. */
  private prepared: string | null = null;
  /** Files prepared so far, which numbers their temporary names. */
  private preparedCount = 0;
  private failure: Error | null = null;
  /**
   * Whether `commit` is writing a record: no transaction may begin until it is durable, since recovery relies on
   * every record being durable before the next one is written.
   */
  private commitInFlight = false;
  private closed = false;
  /** What opening cut (see `tornTailCutOnOpen`). */
  private readonly tornTails: string[] = [];
  /** Where `readRangeInto` reads runs of small entries; allocated by the first such read and kept. */
  private rangeScratch: Buffer | null = null;

  private constructor(options: JournalOptions) {
    this.directory = options.directory;
    this.segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    if (
      !Number.isSafeInteger(this.segmentBytes) ||
      this.segmentBytes < SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES ||
      this.segmentBytes > MAX_SEGMENT_BYTES
    ) {
      throw new Error(`segmentBytes must be an integer from 24 to ${MAX_SEGMENT_BYTES}, got ${this.segmentBytes}`);
    }
    this.entries = {
      get: (scope, index) => this.getEntry(scope, index),
      sizeOf: (scope, index) => this.entrySize(scope, index),
      readRangeInto: (scope, fromIndex, targets) => this.readEntriesInto(scope, fromIndex, targets),
      locate: (scope, index) => {
        const location = this.entryIndex.get(scope)?.get(index);
        return location === undefined ? undefined : `${location.segment.path} at byte ${location.offset}`;
      },
      put: (scope, index, value) => this.stage({ code: PUT_ENTRY, scope, index, value }),
      remove: (scope, index) => this.stage({ code: REMOVE_ENTRY, scope, index }),
      bounds: (scope) => this.entryBounds(scope),
    };
    this.records = {
      get: (scope, name) => this.getRecord(scope, name),
      put: (scope, name, value) => this.stage({ code: PUT_RECORD, scope, name, value }),
      remove: (scope, name) => this.stage({ code: REMOVE_RECORD, scope, name }),
    };
  }

  /**
   * The torn last write opening found and zeroed, if any: where it started, how many bytes it left and why it failed.
   * A crash during a write leaves one; the transaction it held was never acknowledged, so nothing durable is lost,
   * but an operator should hear of it (several in a row point at the disk or a cache that loses synced writes).
   */
  get tornTailCutOnOpen(): readonly string[] {
    return this.tornTails;
  }

  /** Opens the journal in `options.directory` (creating it when missing) and replays it into memory. */
  static open(options: JournalOptions): Journal {
    const journal = new Journal(options);
    try {
      journal.recover();
    } catch (error) {
      for (const segment of journal.segments) closeSync(segment.fd);
      throw error;
    }
    return journal;
  }

  /** Whether the journal holds nothing (no entry, no record). */
  get isEmpty(): boolean {
    return this.recordIndex.size === 0 && [...this.entryIndex.values()].every((entries) => entries.size === 0);
  }

  /** Scopes holding at least one durable entry or record, ascending. */
  scopes(): number[] {
    const scopes = new Set<number>();
    for (const [scope, entries] of this.entryIndex) if (entries.size > 0) scopes.add(scope);
    for (const record of this.recordIndex.values()) scopes.add(record.scope);
    return [...scopes].sort((left, right) => left - right);
  }

  /** Number of segment files in use (for tests). */
  get segmentCount(): number {
    return this.segments.length;
  }

  /** Starts a transaction; writes until `seal` belong to it, and reads see them until then. */
  begin(): void {
    this.assertOpen();
    if (this.transaction !== null || this.sealed !== null) {
      throw new Error("invariant violated: a journal transaction is already running");
    }
    if (this.commitInFlight) throw new Error("invariant violated: a journal commit is still being written");
    this.transaction = { operations: [], entries: new Map(), records: new Map() };
  }

  /**
   * Ends the running transaction's writes: it waits for `commit`, and reads see the committed state only (what is
   * durable), as they must while the write is on its way to the disk.
   */
  seal(): void {
    const transaction = this.transaction;
    if (transaction === null) throw new Error("invariant violated: no journal transaction is running");
    this.transaction = null;
    this.sealed = transaction.operations;
  }

  /** Drops the running or sealed transaction: nothing it wrote happened. */
  abort(): void {
    this.transaction = null;
    this.sealed = null;
  }

  /**
   * Writes the sealed transaction as one record and syncs it; once this returns it is durable and in the index.
   * Blocks the thread for the write and the sync.
   */
  commitSync(): void {
    const operations = this.takeTransaction();
    if (operations.length === 0) return;
    const prepared = this.prepareWrite(operations);
    try {
      writeFully(prepared.segment.fd, prepared.buffer, prepared.fileOffset);
      if (!DATA_SYNC_ON_WRITE) fdatasyncSync(prepared.segment.fd);
    } catch (error) {
      this.fail(error, prepared.segment, prepared.fileOffset, prepared.buffer.byteLength);
    }
    this.publish(operations, prepared);
  }

  /** `commitSync` with the write and the sync on the thread pool; resolves once durable and in the index. */
  async commit(): Promise<void> {
    const operations = this.takeTransaction();
    if (operations.length === 0) return;
    const prepared = this.prepareWrite(operations);
    this.commitInFlight = true;
    try {
      await writeAll(prepared.segment.fd, prepared.buffer, prepared.fileOffset);
      if (!DATA_SYNC_ON_WRITE) {
        await new Promise<void>((resolve, reject) =>
          fdatasync(prepared.segment.fd, (error) => (error === null ? resolve() : reject(error))),
        );
      }
    } catch (error) {
      this.fail(error, prepared.segment, prepared.fileOffset, prepared.buffer.byteLength);
    } finally {
      this.commitInFlight = false;
    }
    this.publish(operations, prepared);
  }

  /**
   * The write of `byteLength` bytes at `fileOffset` of `segment`, or its sync, failed: what reached the disk is
   * unknown, so the journal accepts no further transaction. The bytes are overwritten with zeros and synced first.
   * Linux keeps the data of a failed write in the page cache, marked clean, so a later sync does not write it again
   * while reads still return it: a journal opened again without a reboot (the broker does that after a storage
   * failure) would replay the failed write as durable, and acknowledge what a crash of the machine may still lose.
   * Zeros written over it mark the pages dirty again, and their sync puts the zeros on the disk. When that fails too
   * the failure is an `UnerasedWriteError`, after which the journal must not be opened again until the machine is
   * checked.
   */
  private fail(error: unknown, segment: Segment, fileOffset: number, byteLength: number): never {
    const cause = error instanceof Error ? error : new Error(String(error));
    try {
      zeroRange(segment.fd, fileOffset, fileOffset + byteLength);
      this.failure = cause;
    } catch (erasing) {
      this.failure = new UnerasedWriteError(
        byteLocation(segment.path, fileOffset),
        cause,
        erasing instanceof Error ? erasing : new Error(String(erasing)),
      );
    }
    throw this.failure;
  }

  /** Closes every segment file (the journal must be idle). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const preparing = this.preparing;
    if (preparing !== null) await preparing;
    for (const segment of this.segments) closeSync(segment.fd);
    this.segments.length = 0;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error("the journal is closed");
  }

  private stage(operation: Operation): void {
    const transaction = this.transaction;
    if (transaction === null) {
      throw new Error("invariant violated: a journal write outside a transaction");
    }
    transaction.operations.push(operation);
    switch (operation.code) {
      case PUT_ENTRY:
      case REMOVE_ENTRY: {
        scopeOf(transaction.entries, operation.scope).set(
          operation.index,
          operation.code === PUT_ENTRY ? operation.value : null,
        );
        break;
      }
      case PUT_RECORD:
        transaction.records.set(recordKey(operation.scope, operation.name), storedRecord(operation));
        break;
      case REMOVE_RECORD:
        transaction.records.set(recordKey(operation.scope, operation.name), null);
        break;
      case RESET_RECORDS:
        throw new Error("invariant violated: only a checkpoint resets the records");
    }
  }

  private getEntry(scope: number, index: number): Uint8Array | undefined {
    const staged = this.transaction?.entries.get(scope)?.get(index);
    if (staged !== undefined) return staged ?? undefined;
    const location = this.entryIndex.get(scope)?.get(index);
    if (location === undefined) return undefined;
    this.assertOpen();
    const bytes = readAt(location.segment.fd, location.length, location.offset);
    if (bytes.byteLength !== location.length) {
      throw new StorageCorruptionError(`log entry ${index}`, "the journal ends inside the entry");
    }
    return bytes;
  }

  private entrySize(scope: number, index: number): number | undefined {
    const staged = this.transaction?.entries.get(scope)?.get(index);
    if (staged !== undefined) return staged?.byteLength;
    return this.entryIndex.get(scope)?.get(index)?.length;
  }

  /** Where a durable entry's bytes are, checked against the size of its target; throws when it is missing. */
  private locateForRead(scope: number, index: number, target: Uint8Array): EntryLocation {
    const location = this.entryIndex.get(scope)?.get(index);
    if (location === undefined) throw new StorageCorruptionError(`log entry ${index}`, "entry is missing");
    if (target.byteLength !== location.length) {
      throw new Error(
        `invariant violated: log entry ${index} is ${location.length} bytes, the target ${target.byteLength}`,
      );
    }
    return location;
  }

  private readEntriesInto(scope: number, fromIndex: number, targets: readonly Uint8Array[]): void {
    this.assertOpen();
    const staged = this.transaction?.entries.get(scope);
    // Bounded: every pass reads at least one of the targets.
    for (let position = 0; position < targets.length; ) {
      const index = fromIndex + position;
      const target = targets[position] as Uint8Array;
      const stagedValue = staged?.get(index);
      if (stagedValue === null) throw new StorageCorruptionError(`log entry ${index}`, "entry is missing");
      if (stagedValue !== undefined) {
        if (target.byteLength !== stagedValue.byteLength) {
          throw new Error(
            `invariant violated: log entry ${index} is ${stagedValue.byteLength} bytes, the target ${target.byteLength}`,
          );
        }
        target.set(stagedValue);
        position += 1;
        continue;
      }
      const first = this.locateForRead(scope, index, target);
      // The run: the following small entries of the same segment, in file order, each after a small gap, within the
      // bound.
      let count = 1;
      let end = first.offset + first.length;
      while (first.length <= MAX_GROUPED_ENTRY_BYTES && position + count < targets.length) {
        const nextIndex = index + count;
        if (staged?.has(nextIndex)) break;
        const next = this.entryIndex.get(scope)?.get(nextIndex);
        if (
          next === undefined ||
          next.segment !== first.segment ||
          next.offset < end ||
          next.offset - end > MAX_RANGE_GAP_BYTES ||
          next.length > MAX_GROUPED_ENTRY_BYTES ||
          next.offset + next.length - first.offset > MAX_RANGE_READ_BYTES
        ) {
          break;
        }
        this.locateForRead(scope, nextIndex, targets[position + count] as Uint8Array);
        end = next.offset + next.length;
        count += 1;
      }
      if (count === 1) {
        if (readInto(first.segment.fd, target, first.offset) !== first.length) {
          throw new StorageCorruptionError(`log entry ${index}`, "the journal ends inside the entry");
        }
        position += 1;
        continue;
      }
      const spanBytes = end - first.offset;
      this.rangeScratch ??= Buffer.allocUnsafe(MAX_RANGE_READ_BYTES);
      const span = this.rangeScratch.subarray(0, spanBytes);
      const bytesRead = readInto(first.segment.fd, span, first.offset);
      if (bytesRead !== spanBytes) {
        // Named as a read of each entry alone would name it: the first entry of the run that the file's end cuts.
        let cut = 0;
        while (cut < count - 1) {
          const location = this.entryIndex.get(scope)?.get(index + cut) as EntryLocation;
          if (location.offset + location.length - first.offset > bytesRead) break;
          cut += 1;
        }
        throw new StorageCorruptionError(`log entry ${index + cut}`, "the journal ends inside the entry");
      }
      for (let offsetInRun = 0; offsetInRun < count; offsetInRun += 1) {
        const location = this.entryIndex.get(scope)?.get(index + offsetInRun) as EntryLocation;
        const start = location.offset - first.offset;
        (targets[position + offsetInRun] as Uint8Array).set(span.subarray(start, start + location.length));
      }
      position += count;
    }
  }

  private entryBounds(scope: number): { first: number; last: number } | null {
    if (this.transaction?.entries.has(scope)) {
      throw new Error("invariant violated: entry bounds are read outside transactions only");
    }
    const scoped = this.entryIndex.get(scope);
    if (scoped === undefined || scoped.size === 0) return null;
    let first = Number.POSITIVE_INFINITY;
    let last = Number.NEGATIVE_INFINITY;
    for (const index of scoped.keys()) {
      if (index < first) first = index;
      if (index > last) last = index;
    }
    return { first, last };
  }

  private getRecord(scope: number, name: string): Uint8Array | undefined {
    const key = recordKey(scope, name);
    const staged = this.transaction?.records.get(key);
    if (staged !== undefined) return staged?.value;
    return this.recordIndex.get(key)?.value;
  }

  private takeTransaction(): Operation[] {
    this.assertOpen();
    const operations = this.sealed;
    this.sealed = null;
    if (this.failure !== null) {
      throw new Error(`the journal failed earlier and accepts no writes: ${this.failure.message}`);
    }
    if (operations === null) throw new Error("invariant violated: no sealed journal transaction to commit");
    return operations;
  }

  /**
   * Encodes `operations` as one record at the end of the current segment, or of a new one when it does not fit (whose
   * checkpoint is written first).
   */
  private prepareWrite(operations: readonly Operation[]): PreparedWrite {
    const record = encodeRecord(operations);
    let segment = this.segments[this.segments.length - 1];
    const full = this.writeOffset > SEGMENT_HEADER_BYTES && this.writeOffset + record.byteLength > this.segmentBytes;
    if (segment === undefined || full) {
      segment = this.rollOver();
    }
    // The first record of every segment is a checkpoint, so older segments can go once their entries are dead. An
    // empty segment can also be one whose checkpoint a crash cut short.
    if (this.writeOffset === SEGMENT_HEADER_BYTES) this.writeCheckpoint(segment);
    if (this.writeOffset > this.segmentBytes / 2) this.prepareNextSegment();
    placeRecord(record, segment, this.writeOffset);
    return { buffer: record, segment, fileOffset: this.writeOffset };
  }

  /**
   * Writes the checkpoint that opens `segment` and waits until it is durable, before the transaction that follows it
   * is written. Written together in one write, a crash could lose the checkpoint's first page and keep the
   * transaction's: a failed record followed by an intact one, which recovery must be able to take for damage.
   */
  private writeCheckpoint(segment: Segment): void {
    const checkpoint = encodeRecord(this.checkpointOperations());
    placeRecord(checkpoint, segment, this.writeOffset);
    try {
      writeFully(segment.fd, checkpoint, this.writeOffset);
      if (!DATA_SYNC_ON_WRITE) fdatasyncSync(segment.fd);
    } catch (error) {
      this.fail(error, segment, this.writeOffset, checkpoint.byteLength);
    }
    this.writeOffset += checkpoint.byteLength;
  }

  /** Applies a durable write to the index: its entries now point into its segment. */
  private publish(operations: readonly Operation[], written: PreparedWrite): void {
    const deadBeforeThisRecord = this.countDeadOldestSegments();
    this.applyRecord(operations, written.segment, written.fileOffset + RECORD_HEADER_BYTES);
    this.writeOffset = written.fileOffset + written.buffer.byteLength;
    this.deleteOldestSegments(Math.min(deadBeforeThisRecord, MAX_SEGMENT_DELETIONS_PER_COMMIT));
  }

  /** Applies the operations of one record whose payload starts at `payloadOffset` in `segment`. */
  private applyRecord(operations: readonly Operation[], segment: Segment, payloadOffset: number): void {
    let offset = payloadOffset;
    for (const operation of operations) {
      offset += operationHeaderBytes(operation);
      switch (operation.code) {
        case PUT_ENTRY: {
          const scoped = scopeOf(this.entryIndex, operation.scope);
          const previous = scoped.get(operation.index);
          if (previous !== undefined) previous.segment.liveEntries -= 1;
          scoped.set(operation.index, { segment, offset, length: operation.value.byteLength });
          segment.liveEntries += 1;
          offset += operation.value.byteLength;
          break;
        }
        case REMOVE_ENTRY: {
          const scoped = this.entryIndex.get(operation.scope);
          const previous = scoped?.get(operation.index);
          if (previous !== undefined) {
            previous.segment.liveEntries -= 1;
            scoped?.delete(operation.index);
          }
          break;
        }
        case PUT_RECORD:
          this.recordIndex.set(recordKey(operation.scope, operation.name), storedRecord(operation));
          offset += operation.value.byteLength;
          break;
        case REMOVE_RECORD:
          this.recordIndex.delete(recordKey(operation.scope, operation.name));
          break;
        case RESET_RECORDS:
          this.recordIndex.clear();
          break;
      }
    }
  }

  private checkpointOperations(): Operation[] {
    const operations: Operation[] = [{ code: RESET_RECORDS }];
    for (const record of this.recordIndex.values()) {
      operations.push({ code: PUT_RECORD, scope: record.scope, name: record.name, value: record.value });
    }
    return operations;
  }

  /** Starts the next segment: the prepared zero-filled file when there is one, else one filled now. */
  private rollOver(): Segment {
    const last = this.segments[this.segments.length - 1];
    const sequence = (last?.sequence ?? 0) + 1;
    const path = segmentPath(this.directory, sequence);
    const prepared = this.prepared;
    this.prepared = null;
    if (prepared !== null) {
      renameSync(prepared, path);
    } else {
      createZeroFilled(path, this.segmentBytes);
    }
    syncDirectory(this.directory);
    const segment: Segment = { sequence, path, fd: openSegment(path), version: FORMAT_VERSION, liveEntries: 0 };
    this.segments.push(segment);
    this.writeOffset = SEGMENT_HEADER_BYTES;
    return segment;
  }

  /** Fills the next segment's file in the background, so rolling over does not wait for it. */
  private prepareNextSegment(): void {
    if (this.preparing !== null || this.prepared !== null || this.closed) return;
    this.preparedCount += 1;
    const path = join(this.directory, `${this.preparedCount}${PREPARED_SUFFIX}`);
    const segmentBytes = this.segmentBytes;
    this.preparing = (async (): Promise<string | null> => {
      const handle = await openFile(path, "w", privateFileMode);
      try {
        await handle.write(segmentHeader());
        for (let written = SEGMENT_HEADER_BYTES; written < segmentBytes; written += ZEROS.byteLength) {
          // Closing does not wait for a whole preparation: the file is removed and the next start prepares anew.
          if (this.closed) throw new Error("the journal closed while a segment was being prepared");
          await handle.write(ZEROS, 0, Math.min(ZEROS.byteLength, segmentBytes - written));
          // Each megabyte is made durable as it is written: one flush of a whole 16 MiB segment held this disk for
          // about 10 ms, and every commit of every broker on the disk waited behind it (a synthetic O_DSYNC writer
          // stalled 10.8 ms against 3.9 ms at most with per-megabyte flushes, which cost the same 15 ms in all).
          await handle.datasync();
        }
        return path;
      } finally {
        await handle.close();
      }
    })().then(
      (preparedPath) => {
        this.preparing = null;
        if (this.closed) return null;
        this.prepared = preparedPath;
        return preparedPath;
      },
      () => {
        // A failed preparation is not an error: rolling over creates the file itself.
        this.preparing = null;
        rmSync(path, { force: true });
        return null;
      },
    );
  }

  /** How many of the oldest segments in a row hold no live entry, never counting the one being written. */
  private countDeadOldestSegments(): number {
    let count = 0;
    while (count < this.segments.length - 1 && (this.segments[count] as Segment).liveEntries === 0) count += 1;
    return count;
  }

  /**
   * Deletes the `count` oldest segments, which held no live entry before the record just written: a segment that
   * this record's own removals emptied goes with the next record. Recovery drops a damaged last record as if it were
   * torn, and the journal must then still hold every entry the record before it held, which a deletion justified by
   * the dropped record would have taken away. Each deletion is made durable before the next, so a crash can only
   * leave a contiguous run of segments behind. Segments still dead after this go with the next records (see
   * `MAX_SEGMENT_DELETIONS_PER_COMMIT`).
   */
  private deleteOldestSegments(count: number): void {
    for (let deleted = 0; deleted < count; deleted += 1) {
      const segment = this.segments[0];
      if (segment === undefined || segment.liveEntries !== 0 || this.segments.length === 1) {
        throw new Error("invariant violated: a journal segment to delete holds live entries or is being written");
      }
      this.segments.shift();
      closeSync(segment.fd);
      unlinkSync(segment.path);
      syncDirectory(this.directory);
    }
  }

  /**
   * Replays every segment into the index and zeroes a torn tail; throws `StorageCorruptionError`, changing nothing,
   * when anything else is damaged.
   */
  private recover(): void {
    const created = mkdirSync(this.directory, { recursive: true, mode: privateDirectoryMode });
    if (created !== undefined) {
      // New directories: each one's entry in its parent must be durable before anything in it can be.
      for (let directory = this.directory; directory !== dirname(created); directory = dirname(directory)) {
        syncDirectory(dirname(directory));
      }
    }
    const names = readdirSync(this.directory);
    const sequences = names
      .filter((name) => name.endsWith(SEGMENT_SUFFIX))
      .map((name) => Number(name.slice(0, -SEGMENT_SUFFIX.length)))
      .sort((left, right) => left - right);
    for (const [position, sequence] of sequences.entries()) {
      if (!Number.isSafeInteger(sequence) || sequence < 1) {
        throw new StorageCorruptionError(this.directory, "a journal segment has an unexpected name");
      }
      const previous = this.segments[this.segments.length - 1];
      if (previous !== undefined && sequence !== previous.sequence + 1) {
        throw new StorageCorruptionError(segmentPath(this.directory, previous.sequence + 1), "segment is missing");
      }
      const path = segmentPath(this.directory, sequence);
      const fd = openSegment(path);
      const segment: Segment = { sequence, path, fd, version: readSegmentVersion(fd, path), liveEntries: 0 };
      this.segments.push(segment);
      const end = this.replaySegment(segment, position === sequences.length - 1);
      this.writeOffset = end;
    }
    // Only once the journal is known to open: refusing to open leaves the directory exactly as it was.
    for (const name of names) {
      if (name.endsWith(PREPARED_SUFFIX)) rmSync(join(this.directory, name), { force: true });
    }
  }

  /**
   * Replays one segment; returns the offset after its last intact record. Where the intact records end, the segment
   * must hold only zeros; anything else is zeroed if it is a torn tail (see `assertTornTail`) and refused otherwise.
   */
  private replaySegment(segment: Segment, isLast: boolean): number {
    const sizeBytes = fstatSync(segment.fd).size;
    let offset = SEGMENT_HEADER_BYTES;
    /** Why the record at `offset` failed, when one did. */
    let failure: string | null = null;
    while (offset + RECORD_HEADER_BYTES <= sizeBytes) {
      const recordHeader = readAt(segment.fd, RECORD_HEADER_BYTES, offset);
      const payloadBytes = recordHeader.readUInt32LE(0);
      if (payloadBytes === 0) break;
      const payloadOffset = offset + RECORD_HEADER_BYTES;
      if (payloadOffset + payloadBytes > sizeBytes) {
        failure = `the record's length ${payloadBytes} reaches past the end of the file (${sizeBytes} bytes)`;
        break;
      }
      const payload = readAt(segment.fd, payloadBytes, payloadOffset);
      if (recordChecksum(segment, offset, crc32c(payload)) !== recordHeader.readUInt32LE(4)) {
        failure = "checksum mismatch";
        break;
      }
      const decoded = decodeRecord(payload);
      if ("problem" in decoded) {
        // A torn write fails its checksum: a record whose checksum matches was written whole, by a faulty writer or
        // in a format this version does not read, and dropping it would drop a durable transaction.
        throw new StorageCorruptionError(
          byteLocation(segment.path, offset),
          `the record's checksum matches but it does not decode: ${decoded.problem}`,
        );
      }
      this.applyRecord(decoded.operations, segment, payloadOffset);
      offset = payloadOffset + payloadBytes;
    }
    // Segments are preallocated with zeros, so what a torn write left ends at the last byte that is not zero.
    const written = nonZeroBytes(segment.fd, offset, sizeBytes);
    if (failure === null) {
      if (written.end === offset) return offset;
      failure = "non-zero bytes after the last record";
    }
    assertTornTail(segment, isLast, offset, sizeBytes, failure);
    // Both the span and what it held: a stray byte far from the records would otherwise read as megabytes written.
    this.tornTails.push(
      `${byteLocation(segment.path, offset)}: a torn write reaching byte ${written.end}, ` +
        `${written.count} of its ${written.end - offset} bytes not zero (${failure})`,
    );
    zeroRange(segment.fd, offset, written.end);
    return offset;
  }
}

/** Where a record or stray bytes start: the segment file and the byte offset in it. */
function byteLocation(path: string, offset: number): string {
  return `${path}, byte ${offset}`;
}

/**
 * Throws `StorageCorruptionError` unless the bytes of `segment` from `offset` to `sizeBytes`, where replay stopped for
 * `failure`, are a torn tail: what a crash leaves of the newest write. Only the last segment's newest write can have
 * been interrupted, and only if no intact record follows it: a record is written only after the one before it is
 * durable, so an intact record after a failed one means the failed one was complete once and was damaged since.
 */
function assertTornTail(segment: Segment, isLast: boolean, offset: number, sizeBytes: number, failure: string): void {
  const intactOffset = findIntactRecord(readAt(segment.fd, sizeBytes - offset, offset), 1, (position, checksum) =>
    recordChecksum(segment, offset + position, checksum),
  );
  if (intactOffset !== null) {
    throw new StorageCorruptionError(
      byteLocation(segment.path, offset),
      `${failure}; an intact record follows at byte ${offset + intactOffset}, so this is damage, not a torn write`,
    );
  }
  if (!isLast) {
    throw new StorageCorruptionError(
      byteLocation(segment.path, offset),
      `${failure} in a segment that is not the newest, so this is damage, not a torn write (a newer segment was ` +
        "written after this one was complete)",
    );
  }
}

/** Reads and checks the header of the segment open as `fd`; returns its format version. */
function readSegmentVersion(fd: number, path: string): number {
  const header = readAt(fd, Math.min(SEGMENT_HEADER_BYTES, fstatSync(fd).size), 0);
  if (header.byteLength < SEGMENT_HEADER_BYTES || !header.subarray(0, MAGIC.byteLength).equals(MAGIC)) {
    throw new StorageCorruptionError(path, "not a journal segment");
  }
  const version = header.readUInt32LE(MAGIC.byteLength);
  if (version !== FORMAT_VERSION && version !== UNBOUND_FORMAT_VERSION) {
    throw new StorageCorruptionError(path, `unsupported journal format ${version}`);
  }
  if (header.readUInt32LE(MAGIC.byteLength + 4) !== 0) {
    throw new StorageCorruptionError(path, "the segment header's reserved bytes are not zero");
  }
  return version;
}

/**
 * The checksum field of a record whose payload's CRC-32C is `payloadChecksum` and which lies at byte `fileOffset` of
 * segment `segmentSequence` (the current format): the payload's checksum XORed with the CRC-32C of the sequence and
 * the offset, so that the same bytes at any other position fail their checksum.
 */
export function journalRecordChecksum(payloadChecksum: number, segmentSequence: number, fileOffset: number): number {
  const position = Buffer.allocUnsafe(12);
  position.writeUInt32LE(segmentSequence, 0);
  position.writeDoubleLE(fileOffset, 4);
  return (payloadChecksum ^ crc32c(position)) >>> 0;
}

/** The checksum field of a record of `segment` at `fileOffset`, by the segment's format. */
function recordChecksum(segment: Segment, fileOffset: number, payloadChecksum: number): number {
  if (segment.version === UNBOUND_FORMAT_VERSION) return payloadChecksum;
  return journalRecordChecksum(payloadChecksum, segment.sequence, fileOffset);
}

/** Binds the checksum of `record`, encoded by `encodeRecord`, to its position: byte `fileOffset` of `segment`. */
function placeRecord(record: Buffer, segment: Segment, fileOffset: number): void {
  record.writeUInt32LE(recordChecksum(segment, fileOffset, record.readUInt32LE(4)), 4);
}

function segmentHeader(): Buffer {
  const header = Buffer.alloc(SEGMENT_HEADER_BYTES);
  MAGIC.copy(header, 0);
  header.writeUInt32LE(FORMAT_VERSION, MAGIC.byteLength);
  return header;
}

/** Opens a segment for reading and writing, its writes durable on return where the platform allows it. */
function openSegment(path: string): number {
  return openSync(path, constants.O_RDWR | (DATA_SYNC_ON_WRITE ? constants.O_DSYNC : 0));
}

/** Creates a zero-filled segment file under a temporary name and renames it to `path` once it is durable. */
function createZeroFilled(path: string, segmentBytes: number): void {
  const temporary = `${path}${PREPARED_SUFFIX}`;
  const fd = openSync(temporary, "w", privateFileMode);
  try {
    writeFully(fd, segmentHeader(), 0);
    for (let written = SEGMENT_HEADER_BYTES; written < segmentBytes; written += ZEROS.byteLength) {
      writeFully(fd, ZEROS.subarray(0, Math.min(ZEROS.byteLength, segmentBytes - written)), written);
    }
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, path);
}

/** Reads `length` bytes at `position` (fewer only at the end of the file). */
function readAt(fd: number, length: number, position: number): Buffer {
  const buffer = Buffer.allocUnsafe(length);
  return buffer.subarray(0, readInto(fd, buffer, position));
}

/** Fills `target` from the file at `position`; returns the bytes read (fewer only at the end of the file). */
function readInto(fd: number, target: Uint8Array, position: number): number {
  let read = 0;
  while (read < target.byteLength) {
    const count = readSync(fd, target, read, target.byteLength - read, position + read);
    if (count === 0) break;
    read += count;
  }
  return read;
}

/**
 * The bytes of the file from `offset` to `end` that are not zero: how many, and the offset just after the last one
 * (`offset` when none is).
 */
function nonZeroBytes(fd: number, offset: number, end: number): { end: number; count: number } {
  let nonZeroEnd = offset;
  let count = 0;
  for (let position = offset; position < end; position += ZEROS.byteLength) {
    const slice = readAt(fd, Math.min(ZEROS.byteLength, end - position), position);
    if (slice.equals(ZEROS.subarray(0, slice.byteLength))) continue;
    for (let index = 0; index < slice.byteLength; index += 1) {
      if (slice[index] === 0) continue;
      count += 1;
      nonZeroEnd = position + index + 1;
    }
  }
  return { end: nonZeroEnd, count };
}

/** Writes zeros over the bytes of `fd` from `offset` up to `end` and syncs them. */
function zeroRange(fd: number, offset: number, end: number): void {
  for (let position = offset; position < end; position += ZEROS.byteLength) {
    writeFully(fd, ZEROS.subarray(0, Math.min(ZEROS.byteLength, end - position)), position);
  }
  fdatasyncSync(fd);
}

/** Makes the creation, renaming or removal of files in `directory` durable. */
function syncDirectory(directory: string): void {
  const fd = openSync(directory, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function writeFully(fd: number, buffer: Uint8Array, position: number): void {
  let written = 0;
  while (written < buffer.byteLength) {
    written += writeSync(fd, buffer, written, buffer.byteLength - written, position + written);
  }
}

async function writeAll(fd: number, buffer: Uint8Array, position: number): Promise<void> {
  let written = 0;
  while (written < buffer.byteLength) {
    written += await new Promise<number>((resolve, reject) =>
      write(fd, buffer, written, buffer.byteLength - written, position + written, (error, count) =>
        error === null ? resolve(count) : reject(error),
      ),
    );
  }
}

/** Bytes an operation takes before its value. */
function operationHeaderBytes(operation: Operation): number {
  switch (operation.code) {
    case PUT_ENTRY:
      return 1 + 4 + 8 + 4;
    case REMOVE_ENTRY:
      return 1 + 4 + 8;
    case PUT_RECORD:
      return 1 + 4 + 2 + Buffer.byteLength(operation.name) + 4;
    case REMOVE_RECORD:
      return 1 + 4 + 2 + Buffer.byteLength(operation.name);
    case RESET_RECORDS:
      return 1;
  }
}

/** One record: header and the payload of `operations` (little-endian; indexes as 64-bit floats, exact for them). */
function encodeRecord(operations: readonly Operation[]): Buffer {
  let payloadBytes = 0;
  for (const operation of operations) {
    payloadBytes += operationHeaderBytes(operation);
    if (operation.code === PUT_ENTRY || operation.code === PUT_RECORD) payloadBytes += operation.value.byteLength;
  }
  const buffer = Buffer.allocUnsafe(RECORD_HEADER_BYTES + payloadBytes);
  let offset = RECORD_HEADER_BYTES;
  for (const operation of operations) {
    offset = buffer.writeUInt8(operation.code, offset);
    if (operation.code === RESET_RECORDS) continue;
    offset = buffer.writeUInt32LE(operation.scope, offset);
    if (operation.code === PUT_ENTRY || operation.code === REMOVE_ENTRY) {
      offset = buffer.writeDoubleLE(operation.index, offset);
    } else {
      offset = buffer.writeUInt16LE(Buffer.byteLength(operation.name), offset);
      offset += buffer.write(operation.name, offset);
    }
    if (operation.code === PUT_ENTRY || operation.code === PUT_RECORD) {
      offset = buffer.writeUInt32LE(operation.value.byteLength, offset);
      buffer.set(operation.value, offset);
      offset += operation.value.byteLength;
    }
  }
  const payload = buffer.subarray(RECORD_HEADER_BYTES);
  buffer.writeUInt32LE(payloadBytes, 0);
  buffer.writeUInt32LE(crc32c(payload), 4);
  return buffer;
}

/** The operations a record's payload holds, or why it does not decode. */
type DecodedRecord = { readonly operations: Operation[] } | { readonly problem: string };

/** Why a payload does not decode; thrown inside `decodeRecord` only, which returns it as the problem. */
class UndecodablePayload extends Error {}

/** Decodes a record's payload (written by `encodeRecord`). */
function decodeRecord(payload: Buffer): DecodedRecord {
  try {
    return { operations: decodeOperations(payload) };
  } catch (error) {
    if (error instanceof UndecodablePayload) return { problem: error.message };
    throw error;
  }
}

function decodeOperations(payload: Buffer): Operation[] {
  let offset = 0;
  /** Takes the next `bytes` bytes; a payload that ends early does not decode. */
  const take = (bytes: number): number => {
    if (offset + bytes > payload.byteLength) throw new UndecodablePayload("the payload ends inside an operation");
    const at = offset;
    offset += bytes;
    return at;
  };
  const value = (): Buffer => {
    const length = payload.readUInt32LE(take(4));
    const at = take(length);
    return payload.subarray(at, at + length);
  };
  const operations: Operation[] = [];
  while (offset < payload.byteLength) {
    const code = payload.readUInt8(take(1));
    if (code === RESET_RECORDS) {
      operations.push({ code });
      continue;
    }
    if (!isOperationCode(code)) throw new UndecodablePayload(`it holds operation ${code}`);
    const scope = payload.readUInt32LE(take(4));
    if (code === PUT_ENTRY || code === REMOVE_ENTRY) {
      const index = payload.readDoubleLE(take(8));
      if (!Number.isSafeInteger(index) || index < 1) throw new UndecodablePayload(`it holds entry index ${index}`);
      operations.push(code === PUT_ENTRY ? { code, scope, index, value: value() } : { code, scope, index });
      continue;
    }
    const nameBytes = payload.readUInt16LE(take(2));
    const nameAt = take(nameBytes);
    const name = payload.toString("utf8", nameAt, nameAt + nameBytes);
    // Records stay in memory: copy them out of the bytes being replayed.
    operations.push(
      code === PUT_RECORD
        ? { code, scope, name, value: Uint8Array.prototype.slice.call(value()) }
        : { code, scope, name },
    );
  }
  return operations;
}

/** Whether `code` is one of the operation codes, with which every payload starts. */
function isOperationCode(code: number): code is Operation["code"] {
  return code >= PUT_ENTRY && code <= RESET_RECORDS;
}

/**
 * The offset in `bytes` of the first intact record at `from` or after: a length that fits, a payload that starts
 * with an operation code, whose checksum matches and which decodes; null when there is none. The cost is bounded
 * whatever the bytes are. Most offsets cost one comparison: a length that fits is below the buffer's size, which
 * rules out most random lengths by their high byte alone. An offset whose payload would not start with an operation
 * code costs one more. The rest cost a checksum in time bounded by `RangeChecksums`' block size, not by the length
 * they claim: hashing each claimed payload directly is quadratic in the worst case (a region of nested plausible
 * headers, each claiming a payload up to the end of the region).
 */
function findIntactRecord(
  bytes: Buffer,
  from: number,
  checksumAt: (offset: number, payloadChecksum: number) => number,
): number | null {
  const end = bytes.byteLength;
  const highestLengthByte = Math.floor(end / 2 ** 24);
  let checksums: RangeChecksums | null = null;
  for (let offset = from; offset + RECORD_HEADER_BYTES < end; offset += 1) {
    if (bytes[offset + 3]! > highestLengthByte) continue;
    const payloadBytes = bytes.readUInt32LE(offset);
    const payloadOffset = offset + RECORD_HEADER_BYTES;
    if (payloadBytes === 0 || payloadBytes > end - payloadOffset) continue;
    if (!isOperationCode(bytes[payloadOffset]!)) continue;
    checksums ??= new RangeChecksums(bytes);
    const payloadChecksum = checksums.of(payloadOffset, payloadOffset + payloadBytes);
    if (checksumAt(offset, payloadChecksum) !== bytes.readUInt32LE(offset + 4)) continue;
    if ("operations" in decodeRecord(bytes.subarray(payloadOffset, payloadOffset + payloadBytes))) return offset;
  }
  return null;
}

/** Bytes per stored prefix checksum of `RangeChecksums`: the checksum of a range hashes at most twice as many. */
const CHECKSUM_BLOCK_BYTES = 512;

/**
 * The CRC-32C of any range of one buffer, in time bounded by the block size rather than by the range's length. It
 * keeps the checksum of every prefix that ends at a block boundary; a range's checksum follows from the checksums of
 * the prefixes ending where it starts and where it ends, because CRC-32C is linear: for bytes A followed by bytes B,
 * crc(B) = crc(A ‖ B) ⊕ crc(A)·x^(8·|B|) modulo its polynomial.
 */
class RangeChecksums {
  /** `blockPrefixes[k]` is the checksum of the first `k * CHECKSUM_BLOCK_BYTES` bytes, for k up to `blocksKnown`. */
  private readonly blockPrefixes: Uint32Array;
  /**
   * How many block prefixes are computed: as far as a range needed so far, so that finding an intact record soon
   * (the usual case) does not hash the whole buffer.
   */
  private blocksKnown = 0;

  constructor(private readonly bytes: Buffer) {
    this.blockPrefixes = new Uint32Array(Math.floor(bytes.byteLength / CHECKSUM_BLOCK_BYTES) + 1);
  }

  /** The checksum of the bytes from `start` up to `end`. */
  of(start: number, end: number): number {
    if (end - start <= 2 * CHECKSUM_BLOCK_BYTES) return crc32c(this.bytes.subarray(start, end));
    return (this.prefix(end) ^ multiplyModulo(this.prefix(start), powerOfXForBytes(end - start))) >>> 0;
  }

  /** The checksum of the first `end` bytes. */
  private prefix(end: number): number {
    const block = Math.floor(end / CHECKSUM_BLOCK_BYTES);
    for (; this.blocksKnown < block; this.blocksKnown += 1) {
      const start = this.blocksKnown * CHECKSUM_BLOCK_BYTES;
      const blockBytes = this.bytes.subarray(start, start + CHECKSUM_BLOCK_BYTES);
      this.blockPrefixes[this.blocksKnown + 1] = crc32c(blockBytes, this.blockPrefixes[this.blocksKnown]);
    }
    return crc32c(this.bytes.subarray(block * CHECKSUM_BLOCK_BYTES, end), this.blockPrefixes[block]);
  }
}

/**
 * CRC-32C's polynomial in the bit order of its checksums, which is reversed: bit 31 holds the coefficient of x^0.
 * Polynomials below are in that order too.
 */
const CRC32C_POLYNOMIAL = 0x82f63b78;

/** `left`·`right` modulo CRC-32C's polynomial. */
function multiplyModulo(left: number, right: number): number {
  let product = 0;
  let multiple = right;
  for (let bit = 0x80000000; bit !== 0; bit >>>= 1) {
    if ((left & bit) !== 0) {
      product ^= multiple;
      if ((left & (bit - 1)) === 0) break;
    }
    multiple = (multiple & 1) !== 0 ? (multiple >>> 1) ^ CRC32C_POLYNOMIAL : multiple >>> 1;
  }
  return product >>> 0;
}

/** The polynomial 1 (x^0). */
const ONE = 0x80000000;

/**
 * `LENGTH_BYTE_POWERS[j][v]` is x^(8·v·256^j) modulo CRC-32C's polynomial: what byte j of a length in bytes, holding
 * v, contributes to the power of x that appends that many bytes. Four multiplications at most per length, instead of
 * one per bit.
 */
const LENGTH_BYTE_POWERS: readonly Uint32Array[] = (() => {
  const tables: Uint32Array[] = [];
  let step = 0x00800000; // x^8
  for (let byte = 0; byte < 4; byte += 1) {
    const table = new Uint32Array(256);
    table[0] = ONE;
    for (let value = 1; value < 256; value += 1) table[value] = multiplyModulo(table[value - 1]!, step);
    tables.push(table);
    step = multiplyModulo(table[255]!, step);
  }
  return tables;
})();

/** x^(8·`byteCount`) modulo CRC-32C's polynomial, for a byte count below 2^32. */
function powerOfXForBytes(byteCount: number): number {
  let power = ONE;
  for (let byte = 0; byte < 4; byte += 1) {
    const value = (byteCount >>> (8 * byte)) & 0xff;
    if (value !== 0) power = multiplyModulo(power, LENGTH_BYTE_POWERS[byte]![value]!);
  }
  return power;
}
