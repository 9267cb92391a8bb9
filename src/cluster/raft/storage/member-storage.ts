/**
 * The durable storage of one Raft member in a storage environment, its own or one shared by a broker's replicas (see
 * `StorageEnvironment`): log entries, hard state, snapshot metadata, the latest snapshot's data in checksummed chunks,
 * and the progress of a snapshot being received in chunks, all under keys that start with the member's scope. Log
 * entries and records go to the environment's journal, and the data of each snapshot this member takes or receives
 * from a leader to a file of its own (`snapshot-files.ts` says why); a snapshot installed whole, as a restore
 * installs one, and those of builds before 2026-12-06 are chunks in the environment's LMDB database.
 *
 * Snapshots move between members without being held in memory whole: a leader reads the stored snapshot a byte range
 * at a time (`snapshotChunk`, verifying only the stored chunks it touches), and a receiving member appends each chunk
 * to its file as it arrives (`receiveSnapshotChunks`), keeping a running CRC-32C of the received bytes with its
 * progress, so the whole snapshot is verified when it is complete (`finishSnapshotReceive`) without being read back.
 * A state machine is restored from the stored snapshot a chunk per turn too (`readSnapshotInTurns`).
 *
 * All writes go through the environment's group commit, so concurrent writes share one durable transaction.
 * The adapter keeps a small in-memory view (log bounds, hard state, snapshot records) that always equals what is
 * durable: each transaction works on a staged copy, which replaces the durable view only after the commit has been
 * synced. The newest entries are kept in memory too (`EntryCache`), changed in the same order after the same
 * commits, so replication and apply read them without touching the disk.
 */
import { crc32c } from "@node-rs/crc32";
import { sameSnapshot } from "../core/snapshot-transfer.js";
import { combineCrc32c } from "../crc32c-combine.js";
import { isNonNegativeInteger, isRecord, isSnapshotMetadata } from "../shapes.js";
import {
  type Compaction,
  type Entry,
  type HardState,
  type IncomingSnapshot,
  type PersistedState,
  type PreparedSnapshotData,
  type RaftStorage,
  type Snapshot,
  type SnapshotByteSource,
  type SnapshotChunkRead,
  type SnapshotDigest,
  type SnapshotMetadata,
  type SnapshotReceipt,
  StorageCorruptionError,
} from "../types.js";
import {
  chunkDataView,
  decodeChunk,
  decodeEntry,
  decodeOwnedEntry,
  decodeRecord,
  ENTRY_HEADER_BYTES,
  encodeChunk,
  encodedChunkChecksum,
  encodeEntry,
  encodeRecord,
  verifyEntry,
} from "./codec.js";
import { EntryCache } from "./entry-cache.js";
import { type ChunkKey, StorageEnvironment, type TransactionParticipant } from "./environment.js";
import type { GroupCommitOptions } from "./group-commit.js";
import {
  copyMetadata,
  HARD_STATE_KEY,
  INCOMING_SNAPSHOT_KEY,
  INITIAL_HARD_STATE,
  isHardState,
  LOG_START_KEY,
  type LogStart,
  progressedIncoming,
  SNAPSHOT_KEY,
  type StoredIncomingSnapshot,
  type StoredSnapshot,
} from "./member-records.js";
import { MAX_SNAPSHOT_FRAME_DATA_BYTES, type SnapshotFileChunk } from "./snapshot-files.js";

/** Options of one member's storage inside an environment. */
export interface MemberStorageScopeOptions {
  /** The member's scope in the environment: the partition id in a broker's shared environment. */
  readonly scope: number;
  /** Size of the chunks a complete snapshot is split into when stored, and the largest chunk a receiver accepts. */
  readonly snapshotChunkBytes?: number;
  /** Bytes of the newest entries kept in memory so replication and apply need not read them back from disk. */
  readonly entryCacheBytes?: number;
}

/** Options of one member's storage with an environment of its own. */
export interface MemberStorageOptions extends Omit<MemberStorageScopeOptions, "scope"> {
  /** Directory of the member's storage environment; created when missing. */
  readonly directory: string;
  /** Limits of the group-commit queue. */
  readonly groupCommit?: GroupCommitOptions;
  /** See `StorageEnvironmentOptions.synchronousCommit`. */
  readonly synchronousCommit?: boolean;
}

/** How far a snapshot being received in chunks has come; survives restarts so the transfer can resume. */
export type IncomingSnapshotProgress = IncomingSnapshot;

/** Thrown by `entries` when part of the requested range is compacted away or beyond the last entry. */
export class EntriesUnavailableError extends Error {
  constructor(
    readonly reason: "compacted" | "beyond-last-index",
    detail: string,
  ) {
    super(detail);
    this.name = "EntriesUnavailableError";
  }
}

/** Thrown by `finishSnapshotReceive` when the received bytes do not match the snapshot's checksum. */
export class SnapshotChecksumMismatchError extends Error {
  constructor(detail: string) {
    super(detail);
    this.name = "SnapshotChecksumMismatchError";
  }
}

const DEFAULT_SNAPSHOT_CHUNK_BYTES = 1024 * 1024;

/**
 * Bytes of snapshot data `prepareSnapshot` and `prepareSnapshotFrom` cut into checksummed chunks between two turns
 * they yield: each chunk is copied and checksummed on the caller's thread, and a snapshot of hundreds of megabytes cut
 * in one go held a broker (every replica of it, and its coordinator's requests) for longer than a peer waits for an
 * answer.
 */
export const SNAPSHOT_PREPARE_SLICE_BYTES = 1024 * 1024;

/**
 * Chunks a snapshot being prepared appends to its file in one `writev` on the thread pool (`writeSnapshotData`): a
 * snapshot being prepared holds a few batches of chunks in memory, not the snapshot, and their buffers are reused from
 * batch to batch.
 */
const PREPARE_BATCH_CHUNKS = 8;
/**
 * Most of those writes not yet written at once: two keep the thread pool busy while the next batch is cut, and
 * 2 × 8 chunks of 1 MiB stay within what the environment's buffer pool keeps free (16 buffers), so every later batch
 * reuses memory.
 */
const PREPARE_WRITES_IN_FLIGHT = 2;

/**
 * Most chunks of a snapshot being received whose writes may be in progress at once, counted in chunks of the largest
 * size (`receiveSnapshotChunks`): a receipt that would exceed it waits for the oldest writes. Two windows of the
 * broker's leader (16 chunks each), so the leader's window never waits on the disk while the disk keeps up.
 */
const RECEIPT_CHUNKS_IN_FLIGHT = 32;

/** A snapshot whose chunks `prepareSnapshot` wrote: their slot, and the size and CRC-32C of the data they hold. */
interface PreparedSnapshot {
  readonly slot: number;
  readonly sizeBytes: number;
  readonly checksum: number;
  /** Whether its bytes are in the slot's snapshot file (all but an empty snapshot, which has neither file nor chunks). */
  readonly inFile: boolean;
}

/** The snapshot data a storage prepared, by what names it: the bytes themselves, or the handle of a byte source's. */
type PreparedKey = Uint8Array | PreparedSnapshotData;

/** Snapshot bytes held whole, read out in order. */
class ArraySource implements SnapshotByteSource {
  private offset = 0;
  constructor(private readonly data: Uint8Array) {}

  get sizeBytes(): number {
    return this.data.byteLength;
  }

  read(target: Uint8Array): number {
    const length = Math.min(target.byteLength, this.data.byteLength - this.offset);
    target.set(this.data.subarray(this.offset, this.offset + length));
    this.offset += length;
    return length;
  }
}

/** Reads from `source` until `target` is full or the source ends; returns the bytes read. */
function readFully(source: SnapshotByteSource, target: Uint8Array): number {
  let filled = 0;
  // Bounded: every pass reads at least one byte, or the loop ends.
  while (filled < target.byteLength) {
    const read = source.read(target.subarray(filled));
    if (read === 0) break;
    filled += read;
  }
  return filled;
}

/** One turn of the event loop (`prepareSnapshot`'s default way to let other work run). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Enough for every entry between two snapshots at the broker's default interval and a few hundred bytes each. */
const DEFAULT_ENTRY_CACHE_BYTES = 8 * 1024 * 1024;

/** The part of the durable state kept in memory. */
interface View {
  hardState: HardState;
  logStart: LogStart;
  lastIndex: number;
  snapshot: StoredSnapshot | null;
  incoming: StoredIncomingSnapshot | null;
}

/** Raft storage of one member in a storage environment, with group commit and checksummed values. */
export class MemberStorage implements RaftStorage, TransactionParticipant {
  private readonly environment: StorageEnvironment;
  /** Whether this storage opened the environment itself and closes it with itself. */
  private readonly ownsEnvironment: boolean;
  /** First element of every key this storage writes: its records never mix with another member's. */
  private readonly scope: number;
  private readonly snapshotChunkBytes: number;
  /** What is durable right now. */
  private durable: View;
  /** The copy the running transaction changes; replaces `durable` once that transaction is durable. */
  private staged: View | null = null;
  /** The newest durable entries, in memory. */
  private readonly cache: EntryCache;
  /** Changes to the cache the running transaction makes durable; applied in order once it is. */
  private cacheChanges: (() => void)[] = [];
  /** The highest chunk slot this storage has used or seen; slots are never reused while it is open. */
  private highestSlot = 0;
  /** Snapshots whose chunks `prepareSnapshot` wrote, by the snapshot data they hold (or its handle). */
  private readonly preparedSlots = new WeakMap<PreparedKey, PreparedSnapshot>();
  /** Whether this storage's first write removed the chunks and files no record referred to at open (a crash's). */
  private sweptOrphanChunks = false;
  /** Chunks found at open under slots no record refers to (left by a crash). */
  private orphanChunks: ChunkKey[] = [];
  /** Snapshot files found at open whose slots no record refers to (left by a crash). */
  private orphanFiles: number[] = [];
  /** Whether the running transaction changed the log, after which the cache no longer shows the staged log. */
  private logChangedInTransaction = false;
  private closed = false;
  /** The latest write this storage submitted; closing waits for it (not for other members' writes). */
  private lastWrite: Promise<void> = Promise.resolve();
  /** The latest chunk write of `writeSnapshotData`; closing waits for it (and the environment for every one). */
  private lastChunkWrite: Promise<void> = Promise.resolve();
  /**
   * Snapshots being prepared, by their data: a second `prepareSnapshot` of the same data waits for the first, and
   * `destroy` and `close` wait for all of them, since a preparation writes its chunks only after its last slice.
   */
  private readonly preparations = new Map<PreparedKey, Promise<PreparedSnapshot>>();
  /** Set by `destroy`: preparations stop at their next slice, their chunks unwritten. */
  private destroying = false;
  /** Writes of received chunks in progress, oldest first, with their bytes (see `receiveSnapshotChunks`). */
  private readonly receiptWrites: { readonly written: Promise<void>; readonly bytes: number }[] = [];
  /** The bytes of `receiptWrites`. */
  private receiptBytesInFlight = 0;
  /** The first write of received chunks that failed: every later receipt, and the install, throws it. */
  private receiptWriteFailure: Error | null = null;
  /**
   * While set, this storage's writes wait for it before they go to the environment, in the order they were made: an
   * install waits there until every received chunk is durable (`holdWritesUntilReceiptsDurable`).
   */
  private writesHeld: Promise<void> | null = null;
  /** Writes waiting for `writesHeld`; the last one to go clears it. */
  private heldWriteCount = 0;

  /** What opening found damaged and set aside (see `damageFoundOnOpen`). */
  private readonly damage: string[] = [];

  private constructor(environment: StorageEnvironment, ownsEnvironment: boolean, options: MemberStorageScopeOptions) {
    this.environment = environment;
    this.ownsEnvironment = ownsEnvironment;
    this.scope = options.scope;
    if (!isNonNegativeInteger(this.scope)) {
      throw new Error(`scope must be a non-negative integer, got ${this.scope}`);
    }
    this.snapshotChunkBytes = options.snapshotChunkBytes ?? DEFAULT_SNAPSHOT_CHUNK_BYTES;
    // A snapshot file's frame holds a chunk, and a frame larger than a file may hold reads as damage after a restart.
    if (
      !Number.isSafeInteger(this.snapshotChunkBytes) ||
      this.snapshotChunkBytes < 1 ||
      this.snapshotChunkBytes > MAX_SNAPSHOT_FRAME_DATA_BYTES
    ) {
      throw new Error(
        `snapshotChunkBytes must be an integer from 1 to ${MAX_SNAPSHOT_FRAME_DATA_BYTES}, got ${this.snapshotChunkBytes}`,
      );
    }
    this.cache = new EntryCache(options.entryCacheBytes ?? DEFAULT_ENTRY_CACHE_BYTES);
    this.durable = this.recover();
    // Every slot present now is below the slots this storage will hand out, so the orphans among them can be removed
    // at any time, off this thread, without a transaction.
    // Chunks of a snapshot being received were kept in LMDB by earlier versions: its chunks there are orphans now,
    // since a receipt is resumed from its file (see `recoverIncoming`).
    const snapshot = this.durable.snapshot;
    const usedChunkSlot = snapshot !== null && snapshot.inFile !== true ? snapshot.slot : null;
    for (const key of this.environment.chunks.getKeys({ start: [this.scope, 0, 0], end: [this.scope + 1, 0, 0] })) {
      this.highestSlot = Math.max(this.highestSlot, key[1]);
      if (key[1] !== usedChunkSlot) this.orphanChunks.push(key);
    }
    const usedFileSlots = new Set([snapshot?.inFile === true ? snapshot.slot : null, this.durable.incoming?.slot]);
    for (const slot of this.environment.snapshotFiles.slots(this.scope)) {
      this.highestSlot = Math.max(this.highestSlot, slot);
      if (!usedFileSlots.has(slot)) this.orphanFiles.push(slot);
    }
  }

  /**
   * What opening found in data it can do without, and set aside instead of failing: the bytes of a snapshot being
   * received after the frames that verify (an unsynced tail a crash cut short, or damage; received again from the
   * leader). Its owner reports each one; the stored state itself is never repaired this way, its damage is a
   * `StorageCorruptionError`.
   */
  get damageFoundOnOpen(): readonly string[] {
    return this.damage;
  }

  /**
   * Opens (creating when missing) a storage with an environment of its own in `options.directory` and verifies the
   * persisted records; throws `StorageCorruptionError` when they are damaged.
   */
  static open(options: MemberStorageOptions): MemberStorage {
    const environment = StorageEnvironment.open({
      directory: options.directory,
      ...(options.synchronousCommit === undefined ? {} : { synchronousCommit: options.synchronousCommit }),
      ...(options.groupCommit === undefined ? {} : { groupCommit: options.groupCommit }),
    });
    try {
      return new MemberStorage(environment, true, { ...options, scope: 0 });
    } catch (error) {
      void environment.close();
      throw error;
    }
  }

  /**
   * Opens the storage of the member `options.scope` in a shared environment (whose owner closes it after every
   * storage in it) and verifies its persisted records.
   */
  static openIn(environment: StorageEnvironment, options: MemberStorageScopeOptions): MemberStorage {
    return new MemberStorage(environment, false, options);
  }

  /** Number of durable transactions of this storage's environment (shared ones count every member's). */
  get transactionCount(): number {
    return this.environment.transactionCount;
  }

  /** Part of `TransactionParticipant`: the transaction this storage staged changes in is durable. */
  commitStaged(): void {
    if (this.staged === null) {
      throw new Error("invariant violated: a transaction committed without a staged view");
    }
    this.durable = this.staged;
    this.staged = null;
    const changes = this.cacheChanges;
    this.cacheChanges = [];
    for (const change of changes) change();
  }

  /** Part of `TransactionParticipant`: the transaction failed; nothing it staged happened. */
  discardStaged(): void {
    this.staged = null;
    this.cacheChanges = [];
  }

  /** What is durable: hard state, snapshot metadata and log bounds (verified when the storage was opened). */
  async load(): Promise<PersistedState> {
    this.assertOpen();
    const view = this.durable;
    return {
      hardState: view.hardState,
      snapshot: view.snapshot?.metadata ?? null,
      firstIndex: view.logStart.index + 1,
      lastIndex: view.lastIndex,
      incomingSnapshot: this.incomingSnapshot(),
    };
  }

  /** Durably replaces the log from the first entry's index on and stores `hardState`, in one group commit. */
  async append(entries: readonly Entry[], hardState: HardState | null): Promise<void> {
    this.assertOpen();
    if (entries.length === 0 && hardState === null) {
      return;
    }
    this.checkEntriesShape(entries);
    const encoded = entries.map(encodeEntry);
    const persistedHardState = hardState === null ? null : { ...hardState };
    if (persistedHardState !== null) {
      this.checkHardStateShape(persistedHardState);
    }
    return this.submit(() => {
      const staged = this.stagedView();
      this.checkAppendAgainst(staged, entries, persistedHardState);
      const first = entries[0];
      const last = entries[entries.length - 1];
      if (first !== undefined && last !== undefined) {
        // Entries from the first appended index on are replaced: overwrite the appended range and drop whatever
        // lay beyond it.
        for (let index = last.index + 1; index <= staged.lastIndex; index += 1) {
          this.environment.log.remove(this.scope, index);
        }
        for (let position = 0; position < entries.length; position += 1) {
          this.environment.log.put(this.scope, first.index + position, encoded[position]!);
        }
        staged.lastIndex = last.index;
        this.logChangedInTransaction = true;
        this.cacheChanges.push(() => this.cache.replaceFrom(entries));
      }
      if (persistedHardState !== null) {
        this.environment.state.put(this.scope, HARD_STATE_KEY, encodeRecord(persistedHardState));
        staged.hardState = persistedHardState;
      }
    });
  }

  /** Verified entries in [fromIndex, toIndex); throws `EntriesUnavailableError` outside the stored log. */
  entries(fromIndex: number, toIndex: number, maxBytes = Number.POSITIVE_INFINITY): Entry[] {
    this.assertHeld(fromIndex, toIndex);
    // The cache holds a suffix of the log: whatever part of the range lies before it is read from disk.
    const cacheFirst = Math.max(fromIndex, Math.min(toIndex, this.cache.firstIndex() ?? toIndex));
    const result = fromIndex < cacheFirst ? this.readEntries(fromIndex, cacheFirst, maxBytes) : [];
    // Entries read from disk up to the byte budget: the cached ones after them would not be sent either.
    if (result.length < cacheFirst - fromIndex) return result;
    if (cacheFirst < toIndex) {
      const cached = this.cache.range(cacheFirst, toIndex);
      if (cached === null) {
        throw new Error(`invariant violated: the entry cache does not hold [${cacheFirst}, ${toIndex})`);
      }
      result.push(...cached);
    }
    return result;
  }

  /**
   * The sizes of the entries in [fromIndex, toIndex) as stored (`encodeEntry`'s layout, checksum included), stopping
   * after the first entry once their total exceeds `maxBytes`; throws as `entries` does when they are not held. With
   * `readStoredEntries`, a copy of the log that needs no decoding (a backup's): the sizes lay out the target, then the
   * entries are read into their places.
   */
  storedEntrySizes(fromIndex: number, toIndex: number, maxBytes: number): number[] {
    this.assertHeld(fromIndex, toIndex);
    const sizes: number[] = [];
    let bytes = 0;
    for (let index = fromIndex; index < toIndex && bytes <= maxBytes; index += 1) {
      const size = this.environment.log.sizeOf(this.scope, index);
      if (size === undefined) throw new StorageCorruptionError(`log entry ${index}`, "entry is missing");
      sizes.push(size);
      bytes += size;
    }
    return sizes;
  }

  /**
   * Reads the held entries from `fromIndex` on as stored into `targets` (one entry each, exactly its
   * `storedEntrySizes` size), with a system call per run of entries that lie close together in the journal rather
   * than per entry, and verifies every entry in its target: its checksum, layout and index. A damaged entry is refused
   * naming its index, journal file and byte offset. The bytes are those `encodeEntry` gave, copied without decoding.
   */
  readStoredEntries(fromIndex: number, targets: readonly Uint8Array[]): void {
    this.assertHeld(fromIndex, fromIndex + targets.length);
    this.environment.log.readRangeInto(this.scope, fromIndex, targets);
    for (const [position, target] of targets.entries()) {
      const index = fromIndex + position;
      try {
        verifyEntry(target, index);
      } catch (error) {
        if (!(error instanceof StorageCorruptionError)) throw error;
        // Verified again to name where the damaged entry is stored (looked up only for a damaged one).
        const stored = this.environment.log.locate(this.scope, index);
        verifyEntry(target, index, stored === undefined ? `log entry ${index}` : `log entry ${index} (${stored})`);
        throw error;
      }
    }
  }

  /** Throws unless [fromIndex, toIndex) is a valid range of durable entries after the log's start. */
  private assertHeld(fromIndex: number, toIndex: number): void {
    this.assertOpen();
    if (!Number.isSafeInteger(fromIndex) || !Number.isSafeInteger(toIndex) || fromIndex > toIndex) {
      throw new Error(`invalid entry range [${fromIndex}, ${toIndex})`);
    }
    const view = this.durable;
    if (fromIndex <= view.logStart.index) {
      throw new EntriesUnavailableError(
        "compacted",
        `entries from ${fromIndex} are compacted away; the log starts at ${view.logStart.index + 1}`,
      );
    }
    if (toIndex > view.lastIndex + 1) {
      throw new EntriesUnavailableError(
        "beyond-last-index",
        `entries up to ${toIndex - 1} requested but the last index is ${view.lastIndex}`,
      );
    }
  }

  /**
   * Reads and verifies entries in [fromIndex, toIndex) from the journal, stopping after the first entry once their
   * data exceeds `maxBytes`. Each entry is read into memory of its own, which its data then is a view of, and
   * neighbours in the journal are read with one system call (`readRangeInto`): a member catching up from the log is
   * sent megabytes of entries per turn, and reading them one call and two copies at a time held the leader's thread
   * about twice as long.
   */
  private readEntries(fromIndex: number, toIndex: number, maxBytes: number): Entry[] {
    const targets: Uint8Array[] = [];
    let bytes = 0;
    for (let index = fromIndex; index < toIndex && bytes <= maxBytes; index += 1) {
      const size = this.environment.log.sizeOf(this.scope, index);
      if (size === undefined) throw new StorageCorruptionError(`log entry ${index}`, "entry is missing");
      targets.push(new Uint8Array(size));
      bytes += size - ENTRY_HEADER_BYTES;
    }
    this.environment.log.readRangeInto(this.scope, fromIndex, targets);
    return targets.map((target, position) => decodeOwnedEntry(target, fromIndex + position));
  }

  /** Term at `index` (the snapshot's at its index, 0 at index 0); null outside the stored log. */
  term(index: number): number | null {
    this.assertOpen();
    return this.termIn(this.durable, index);
  }

  /**
   * Writes the chunks of snapshot `data` ahead of the `installSnapshot` that will carry the same `data` (the same
   * array), which then only has to make a record refer to them. The chunks are appended to a snapshot file and synced
   * on the thread pool while this thread goes on; a broker's replicas keep committing meanwhile. Optional: `installSnapshot`
   * writes the chunks of data it was not prepared for itself, in its own transaction (holding this thread for it).
   * An `installSnapshot` of the same data must wait until this resolves, and `data` must not change meanwhile.
   *
   * The data is cut into chunks `SNAPSHOT_PREPARE_SLICE_BYTES` at a time, with `yieldTurn` (by default one turn of
   * the event loop) awaited between two slices, so other work runs in between however large the snapshot is.
   * Returns the data's size and the CRC-32C computed on the way, for `RaftNode.compact`.
   */
  async prepareSnapshot(data: Uint8Array, yieldTurn: () => Promise<void> = nextTurn): Promise<SnapshotDigest> {
    const prepared = await this.prepare(data, () => new ArraySource(data), yieldTurn);
    return { sizeBytes: prepared.sizeBytes, checksum: prepared.checksum };
  }

  /**
   * Writes the chunks of a snapshot read from `source` (see `prepareSnapshot`), copying its bytes straight into the
   * chunks, so the snapshot is never held whole, in memory or on this thread: a few batches of chunks are, their
   * buffers reused. Returns the prepared data's handle, which `RaftNode.compact` and then `installSnapshot` carry
   * (or `discardPreparedSnapshot` gives up); the source must not be read by anyone else meanwhile.
   */
  async prepareSnapshotFrom(
    source: SnapshotByteSource,
    yieldTurn: () => Promise<void> = nextTurn,
  ): Promise<PreparedSnapshotData> {
    const handle: { sizeBytes: number; checksum: number } = { sizeBytes: source.sizeBytes, checksum: 0 };
    const prepared = await this.prepare(handle, () => source, yieldTurn);
    handle.checksum = prepared.checksum;
    return handle;
  }

  /** Prepares the snapshot data named `key`, read from the source `open` gives, once (see `prepareSnapshot`). */
  private async prepare(
    key: PreparedKey,
    open: () => SnapshotByteSource,
    yieldTurn: () => Promise<void>,
  ): Promise<PreparedSnapshot> {
    this.assertOpen();
    const known = this.preparedSlots.get(key);
    if (known !== undefined) return known;
    const running = this.preparations.get(key);
    if (running !== undefined) return running;
    const preparation = this.writeSnapshotData(open(), yieldTurn);
    this.preparations.set(key, preparation);
    try {
      const prepared = await preparation;
      this.preparedSlots.set(key, prepared);
      return prepared;
    } finally {
      this.preparations.delete(key);
    }
  }

  /**
   * Gives up snapshot data prepared by `prepareSnapshot` (the array) or `prepareSnapshotFrom` (its handle) that will
   * not be installed: its chunks are removed once the transaction this submits is durable. Nothing happens for data
   * that was not prepared or was installed already.
   */
  async discardPreparedSnapshot(data: PreparedKey): Promise<void> {
    this.assertOpen();
    const prepared = this.preparedSlots.get(data);
    if (prepared === undefined) return;
    this.preparedSlots.delete(data);
    await this.submit(() => this.releaseSlot(prepared.slot));
  }

  /** Durably stores a snapshot newer than the current one, keeping only log entries after it that match it. */
  async installSnapshot(snapshot: Compaction): Promise<void> {
    this.assertOpen();
    const metadata = copyMetadata(snapshot.metadata);
    const data = snapshot.data;
    const prepared = this.preparedSlots.get(data);
    if (!(data instanceof Uint8Array) && prepared === undefined) {
      throw new Error("invariant violated: prepared snapshot data this storage did not prepare, or installed already");
    }
    // Prepared data was checksummed as its chunks were cut, a slice at a time: that checksum is the one of the bytes
    // the chunks hold, which must be the one in the metadata. Other data is checksummed here, in one go.
    const sizeBytes = prepared?.sizeBytes ?? (data as Uint8Array).byteLength;
    const refusal = !isSnapshotMetadata(metadata)
      ? "invalid snapshot metadata"
      : sizeBytes !== metadata.sizeBytes
        ? `snapshot data is ${sizeBytes} bytes but its metadata says ${metadata.sizeBytes}`
        : (prepared?.checksum ?? crc32c(data as Uint8Array)) !== metadata.checksum
          ? "snapshot data does not match the checksum in its metadata"
          : null;
    if (refusal !== null) {
      // Chunks prepared for this data would otherwise stay until the next start.
      await this.discardPreparedSnapshot(data).catch(() => undefined);
      throw new Error(refusal);
    }
    // A newer snapshot discards one being received, whose chunks must be in the database before their slot is freed;
    // the hold is taken right before the write that waits for it, so a refusal above leaves none behind.
    if (prepared !== undefined) {
      this.preparedSlots.delete(data);
      const slot = prepared.slot;
      this.holdWritesUntilReceiptsDurable();
      return this.submit(() => {
        const staged = this.stagedView();
        if (!this.isNewerSnapshot(staged, metadata)) {
          this.releaseSlot(slot);
          return;
        }
        try {
          // Reads the log (and may find it damaged) before writing anything, as a submitted write must.
          this.termIn(staged, metadata.index);
        } catch (error) {
          this.releaseSlot(slot);
          throw error;
        }
        this.adoptSnapshot(staged, prepared.inFile ? { metadata, slot, inFile: true } : { metadata, slot });
      });
    }
    // Not prepared: the chunks go into this write's own transaction, which keeps it in the order of the calls.
    const encodedChunks = this.encodeChunks(data as Uint8Array);
    this.holdWritesUntilReceiptsDurable();
    return this.submit(
      () => {
        const staged = this.stagedView();
        if (!this.isNewerSnapshot(staged, metadata)) {
          return;
        }
        // Reads the log (and may find it damaged) before writing anything, as a submitted write must.
        this.termIn(staged, metadata.index);
        const slot = this.nextSlot(staged);
        this.clearSlot(slot);
        for (const { offset, chunk } of encodedChunks)
          this.environment.chunks.putSync([this.scope, slot, offset], chunk);
        this.adoptSnapshot(staged, { metadata, slot });
      },
      { writesChunks: true },
    );
  }

  /**
   * Writes the bytes `source` reads to the snapshot file of a slot of its own, as checksummed frames, syncs it, and
   * returns the slot with the data's size and checksum. No record refers to the slot yet: a crash before one does
   * leaves a file that the first write after the restart removes. Each chunk's bytes are read straight into a pooled
   * buffer (one copy on this thread), a slice at a time (see `prepareSnapshot`); the chunks go to the thread pool in
   * batches of one `writev`, at most `PREPARE_WRITES_IN_FLIGHT` of them not yet written, and their buffers go back to
   * the pool once they are. A file rather than LMDB's chunks since 2026-12-06: a leader sending the snapshot then
   * reads each frame from the page cache with one `readv` instead of faulting LMDB's map in and copying it twice
   * (DEVELOPERS.md, "Where the join's main threads spend it, with files").
   */
  private async writeSnapshotData(
    source: SnapshotByteSource,
    yieldTurn: () => Promise<void>,
  ): Promise<PreparedSnapshot> {
    const slot = this.reserveSlot();
    const sizeBytes = source.sizeBytes;
    const writes: Promise<void>[] = [];
    let batch: SnapshotFileChunk[] = [];
    const flush = (): void => {
      const chunks = batch;
      batch = [];
      // The buffers go back to the pool once written (a failed write keeps them: what the kernel still reads of them
      // is unknown, and the environment fails anyway).
      const written = this.environment.writeSnapshotFile(this.scope, slot, chunks).then(() => {
        for (const { data } of chunks) this.environment.chunkBuffers.release(data);
      });
      this.lastChunkWrite = written.then(
        () => undefined,
        () => undefined,
      );
      writes.push(written);
    };
    try {
      let checksum = 0;
      let sliceBytes = 0;
      for (let offset = 0; offset < sizeBytes; ) {
        if (sliceBytes >= SNAPSHOT_PREPARE_SLICE_BYTES) {
          sliceBytes = 0;
          await yieldTurn();
          this.assertOpen();
          if (this.destroying) throw new Error("storage is being destroyed");
        }
        const length = Math.min(this.snapshotChunkBytes, sizeBytes - offset);
        const data = this.environment.chunkBuffers.acquire(length);
        const read = readFully(source, data);
        if (read !== length) {
          throw new Error(`invariant violated: a snapshot of ${sizeBytes} bytes gave ${offset + read} bytes`);
        }
        const dataChecksum = crc32c(data) >>> 0;
        batch.push({ offset, data, checksum: dataChecksum });
        checksum = combineCrc32c(checksum, dataChecksum, length);
        offset += length;
        sliceBytes += length;
        if (batch.length === PREPARE_BATCH_CHUNKS) {
          flush();
          // Bounded memory: the oldest write must be done before more chunks are cut.
          if (writes.length >= PREPARE_WRITES_IN_FLIGHT) await writes[writes.length - PREPARE_WRITES_IN_FLIGHT];
        }
      }
      if (source.read(new Uint8Array(1)) !== 0) {
        throw new Error(`invariant violated: a snapshot of ${sizeBytes} bytes has more bytes`);
      }
      if (batch.length > 0) flush();
      await Promise.all(writes);
      // A snapshot of no bytes has no frames, and no file: it is stored as it always was, as no chunks.
      if (sizeBytes > 0) {
        const synced = this.environment.syncSnapshotFile(this.scope, slot);
        this.lastChunkWrite = synced.then(
          () => undefined,
          () => undefined,
        );
        await synced;
      }
      return { slot, sizeBytes, checksum, inFile: sizeBytes > 0 };
    } catch (error) {
      // The frames already written stay in a file no record refers to: removed now (once every write settled)
      // rather than at the next start, also when the storage was closed meanwhile (its environment, shared with the
      // broker's other replicas, may stay open for long; a closed environment refuses the removal, and the next start
      // removes the file). A storage being destroyed removes every file of its scope itself.
      await Promise.allSettled(writes);
      if (!this.destroying) this.environment.removeSnapshotFiles([[this.scope, slot]]);
      throw error;
    } finally {
      // A failed preparation leaves no write behind unobserved (its failure is this one's, or the environment's).
      for (const write of writes) write.catch(() => undefined);
    }
  }

  /**
   * Compaction is only allowed behind the stored snapshot: entries beyond it would be lost for good, since the
   * state machine can only be rebuilt from the snapshot plus the log after it (and the core refuses to start from a
   * log that begins after its snapshot). `installSnapshot` already drops every entry the snapshot covers, so a valid
   * call finds nothing left to drop; it still goes through the commit queue so it is ordered after earlier writes.
   */
  async compact(index: number): Promise<void> {
    this.assertOpen();
    if (!isNonNegativeInteger(index)) {
      throw new Error(`invalid compaction index ${index}`);
    }
    return this.submit(() => {
      const staged = this.stagedView();
      const snapshotIndex = staged.snapshot?.metadata.index ?? 0;
      if (index > snapshotIndex) {
        throw new Error(
          `invariant violated: cannot compact to ${index}, beyond the stored snapshot at ${snapshotIndex}`,
        );
      }
      if (index > staged.logStart.index) {
        throw new Error(`invariant violated: entries up to snapshot ${snapshotIndex} were not dropped on install`);
      }
    });
  }

  /**
   * The stored snapshot, reassembled from its chunks and verified against its checksum: for restoring a state machine
   * (it holds the whole snapshot in memory). Sending a snapshot reads it a chunk at a time (`snapshotChunk`).
   */
  snapshot(): Snapshot | null {
    this.assertOpen();
    const stored = this.durable.snapshot;
    if (stored === null) {
      return null;
    }
    return { metadata: stored.metadata, data: this.readSnapshotData(stored) };
  }

  /**
   * Reads the stored snapshot one stored chunk at a time and hands each chunk's data to `consume`, in order, so a
   * state machine is restored without the snapshot ever being held whole; `yieldTurn` (by default one turn of the
   * event loop) is awaited after each chunk, so a snapshot of hundreds of megabytes lets other work run in between.
   * The data handed over is only valid during the call (it is LMDB's own buffer, which the next read reuses): a
   * consumer copies what it keeps. Each chunk is verified against its own checksum before it is handed over, and the
   * whole snapshot's size and CRC-32C once the last one was: when this throws (`StorageCorruptionError`, or a
   * snapshot replaced meanwhile), whatever `consume` built from the chunks must be thrown away. Returns the
   * snapshot's metadata, or null when none is stored.
   */
  async readSnapshotInTurns(
    consume: (data: Uint8Array) => void,
    yieldTurn: () => Promise<void> = nextTurn,
  ): Promise<SnapshotMetadata | null> {
    this.assertOpen();
    const stored = this.durable.snapshot;
    if (stored === null) {
      return null;
    }
    if (stored.inFile === true) return this.readSnapshotFileInTurns(stored, consume, yieldTurn);
    const sizeBytes = stored.metadata.sizeBytes;
    let checksum = 0;
    // Each chunk is read by its key in LMDB's reused buffer: reading the range handed out a new buffer of every chunk,
    // the snapshot's size in fresh memory again for a restore that copies what it keeps anyway. No LMDB snapshot is
    // held across the turns either (it would keep LMDB from reusing the pages the broker's other replicas free); the
    // chunks of the stored snapshot do not change while a record refers to them, which is checked after every turn.
    // Bounded: every pass moves past a chunk of at least one byte, up to the snapshot's size.
    for (let offset = 0; offset < sizeBytes; ) {
      const location = `snapshot chunk at ${offset}`;
      const volatile = this.environment.chunks.getBinaryFast([this.scope, stored.slot, offset]);
      if (volatile === undefined) throw new StorageCorruptionError(location, "chunk is missing");
      const data = chunkDataView(volatile.subarray(0, volatile.length), location);
      if (data.byteLength === 0 || offset + data.byteLength > sizeBytes) {
        throw new StorageCorruptionError(location, "chunk is empty or extends beyond the snapshot size");
      }
      // The whole snapshot's checksum follows from the chunks' own, just verified: the bytes are not read again.
      checksum = combineCrc32c(checksum, encodedChunkChecksum(volatile), data.byteLength);
      offset += data.byteLength;
      consume(data);
      await yieldTurn();
      this.assertOpen();
      if (this.durable.snapshot?.slot !== stored.slot) {
        throw new Error("the stored snapshot was replaced while it was being read");
      }
    }
    // Nothing may follow the last chunk, as `snapshot()` checks too: a chunk there was written where none belongs.
    const [beyond] = this.environment.chunks.getKeys({
      start: [this.scope, stored.slot, sizeBytes],
      end: [this.scope, stored.slot + 1, 0],
      limit: 1,
    });
    if (beyond !== undefined) {
      throw new StorageCorruptionError(`snapshot chunk at ${beyond[2]}`, "chunk extends beyond the snapshot size");
    }
    if (checksum !== stored.metadata.checksum) {
      throw new StorageCorruptionError(
        "snapshot",
        `data checksum ${checksum} differs from ${stored.metadata.checksum}`,
      );
    }
    return stored.metadata;
  }

  /** `readSnapshotInTurns` of a snapshot in a file: each frame read into one reused buffer, verified, handed over. */
  private async readSnapshotFileInTurns(
    stored: StoredSnapshot,
    consume: (data: Uint8Array) => void,
    yieldTurn: () => Promise<void>,
  ): Promise<SnapshotMetadata> {
    const files = this.environment.snapshotFiles;
    const frames = files.frames(this.scope, stored.slot);
    // A loop, not a spread into Math.max: a snapshot of small chunks has more frames than a call takes arguments.
    let largestFrameBytes = 1;
    for (const frame of frames) largestFrameBytes = Math.max(largestFrameBytes, frame.dataBytes);
    const buffer = this.environment.chunkBuffers.acquire(largestFrameBytes);
    let checksum = 0;
    try {
      // Bounded by the frames, which the scan at open (or the receipt) found to cover exactly the snapshot's size.
      for (const [frameNumber, frame] of frames.entries()) {
        const data = buffer.subarray(0, frame.dataBytes);
        files.readFrame(this.scope, stored.slot, frameNumber, data);
        checksum = combineCrc32c(checksum, frame.dataChecksum, frame.dataBytes);
        consume(data);
        await yieldTurn();
        this.assertOpen();
        if (this.durable.snapshot?.slot !== stored.slot) {
          throw new Error("the stored snapshot was replaced while it was being read");
        }
      }
    } finally {
      this.environment.chunkBuffers.release(buffer);
    }
    if (checksum !== stored.metadata.checksum) {
      throw new StorageCorruptionError(
        "snapshot",
        `data checksum ${checksum} differs from ${stored.metadata.checksum}`,
      );
    }
    return stored.metadata;
  }

  /**
   * Hands back a chunk `snapshotChunk` returned, once its reader is done with it (a leader, once the chunk's message
   * was encoded for the network): the next read fills its memory instead of allocating another chunk. Reading a
   * snapshot allocated a chunk-sized buffer per chunk otherwise, and at the rate a snapshot is sent those
   * allocations made the garbage collector run full collections of the whole heap back to back. Anything else
   * (a part of a chunk, a chunk handed back before) is ignored.
   */
  recycleSnapshotChunk(chunk: Uint8Array): void {
    this.environment.chunkBuffers.release(chunk);
  }

  /** Metadata of the stored snapshot, without reading its data. */
  snapshotMetadata(): SnapshotMetadata | null {
    this.assertOpen();
    return this.durable.snapshot?.metadata ?? null;
  }

  /**
   * Up to `maxBytes` of the stored snapshot's data from byte `offset` on (fewer only at its end), read from the stored
   * chunks that hold the range, each verified against its own checksum; the rest of the snapshot is not read. Null
   * when the stored snapshot is no longer the one `metadata` describes.
   */
  snapshotChunk(metadata: SnapshotMetadata, offset: number, maxBytes: number): SnapshotChunkRead | null {
    this.assertOpen();
    if (!isNonNegativeInteger(offset) || !Number.isSafeInteger(maxBytes) || maxBytes < 1) {
      throw new Error(`invalid snapshot range: ${maxBytes} bytes at ${offset}`);
    }
    const stored = this.durable.snapshot;
    if (stored === null || !sameSnapshot(stored.metadata, metadata)) {
      return null;
    }
    const sizeBytes = stored.metadata.sizeBytes;
    if (offset > sizeBytes) {
      throw new Error(`snapshot range starts at ${offset}, beyond the snapshot size ${sizeBytes}`);
    }
    const end = Math.min(sizeBytes, offset + maxBytes);
    if (end === offset) {
      return { data: new Uint8Array(0), checksum: 0 };
    }
    if (stored.inFile === true) return this.snapshotFileRange(stored.slot, offset, end);
    // The sender's usual case: the range is exactly one stored chunk. LMDB's buffer of it is only valid until the next
    // read, so it is verified there and copied once, into a buffer a sender handed back (`recycleSnapshotChunk`). The
    // checksum just verified is the data's, so it goes along without another pass over the bytes.
    const volatile = this.environment.chunks.getBinaryFast([this.scope, stored.slot, offset]);
    if (volatile !== undefined) {
      const data = chunkDataView(volatile.subarray(0, volatile.length), `snapshot chunk at ${offset}`);
      if (data.byteLength === end - offset) {
        const copy = this.environment.chunkBuffers.acquire(data.byteLength);
        copy.set(data);
        return { data: copy, checksum: encodedChunkChecksum(volatile) };
      }
    }
    const result = this.environment.chunkBuffers.acquire(end - offset);
    // The stored chunk holding `offset` is the last one starting at or before it. Stored chunks need not be cut the
    // way this storage cuts them now: a received snapshot keeps the sender's chunks.
    const [first] = this.environment.chunks.getKeys({
      start: [this.scope, stored.slot, offset],
      end: [this.scope, stored.slot, -1],
      reverse: true,
      limit: 1,
    });
    let expectedOffset = first?.[2] ?? 0;
    const range = {
      start: [this.scope, stored.slot, expectedOffset] as ChunkKey,
      end: [this.scope, stored.slot + 1, 0] as ChunkKey,
    };
    // Bounded: the chunks read cover at most `maxBytes` plus the part of the first chunk before `offset`.
    for (const { key, value } of this.environment.chunks.getRange(range)) {
      const chunkOffset = key[2];
      const location = `snapshot chunk at ${chunkOffset}`;
      if (chunkOffset !== expectedOffset) {
        throw new StorageCorruptionError(`snapshot chunk at ${expectedOffset}`, "chunk is missing");
      }
      const chunk = decodeChunk(value, location);
      const chunkEnd = chunkOffset + chunk.byteLength;
      if (chunkEnd > sizeBytes) {
        throw new StorageCorruptionError(location, "chunk extends beyond the snapshot size");
      }
      const from = Math.max(offset, chunkOffset);
      const to = Math.min(end, chunkEnd);
      if (to > from) result.set(chunk.subarray(from - chunkOffset, to - chunkOffset), from - offset);
      expectedOffset = chunkEnd;
      if (expectedOffset >= end) {
        // Cut across stored chunks (a snapshot received from a leader that cut it otherwise): its own checksum.
        return { data: result, checksum: crc32c(result) >>> 0 };
      }
    }
    throw new StorageCorruptionError(`snapshot chunk at ${expectedOffset}`, "chunk is missing");
  }

  /**
   * Bytes [offset, end) of the snapshot file of `slot`, in a buffer of the environment's pool (handed back with
   * `recycleSnapshotChunk`), read from the frames that hold them, each verified. A sender asks for the frames the
   * leader that sent them cut (they are the chunks of this storage's size, as a broker's leaders cut them): such a
   * range is read straight into the buffer, and its checksum is the frame's.
   */
  private snapshotFileRange(slot: number, offset: number, end: number): SnapshotChunkRead {
    const files = this.environment.snapshotFiles;
    const frames = files.frames(this.scope, slot);
    let frameNumber = files.frameHolding(this.scope, slot, offset);
    const first = frames[frameNumber];
    if (first === undefined) {
      throw new StorageCorruptionError(`snapshot file of slot ${slot}`, `no frame holds byte ${offset}`);
    }
    if (first.offset === offset && first.dataBytes === end - offset) {
      const data = this.environment.chunkBuffers.acquire(first.dataBytes);
      files.readFrame(this.scope, slot, frameNumber, data);
      return { data, checksum: first.dataChecksum };
    }
    const result = this.environment.chunkBuffers.acquire(end - offset);
    // Bounded: every pass moves past one frame of at least one byte, up to `end`.
    for (let position = offset; position < end; frameNumber += 1) {
      const frame = frames[frameNumber];
      if (frame === undefined) {
        throw new StorageCorruptionError(`snapshot file of slot ${slot}`, `no frame holds byte ${position}`);
      }
      const data = this.environment.chunkBuffers.acquire(frame.dataBytes);
      try {
        files.readFrame(this.scope, slot, frameNumber, data);
        const frameEnd = frame.offset + frame.dataBytes;
        const to = Math.min(end, frameEnd);
        result.set(data.subarray(position - frame.offset, to - frame.offset), position - offset);
        position = to;
      } finally {
        this.environment.chunkBuffers.release(data);
      }
    }
    return { data: result, checksum: crc32c(result) >>> 0 };
  }

  /**
   * Stores a receipt of the Raft core (`Ready.snapshotReceipt`): starts the snapshot over when the receipt says so,
   * then stores its chunks in order. The chunks must continue the received bytes exactly, as the core tracks
   * them; anything else means the core and the storage disagree, and fails.
   *
   * The chunks are appended to the snapshot's file on the thread pool (a receipt that starts over begins a file in a
   * fresh slot), while this thread goes on receiving, and the file is synced once, before the record installing it
   * (`finishSnapshotReceive`). The frames in the file are the receipt's progress (`recoverIncoming` counts them after
   * a restart), so only a receipt that starts over commits a transaction (the record naming the snapshot and its slot).
   *
   * A receipt returns once its chunks are handed to the thread pool, not once they are written, so their
   * acknowledgement waits for no disk: at most `RECEIPT_CHUNKS_IN_FLIGHT` chunks are being written at once (a receipt
   * beyond waits for the oldest writes), and the install waits for all of them and the sync. So a crash may lose
   * chunks that were acknowledged: a restarted member counts only the frames that verify and continue each other from
   * byte 0, answers that lower offset, and the leader goes back to it (`SnapshotTransfer.tick`). Nothing Raft counts
   * rests on the acknowledgements: the snapshot's index counts only once it is installed. The chunks' memory is
   * written as it is (received chunks are views of frames nobody reuses), with the checksum the core computed.
   */
  async receiveSnapshotChunks(receipt: SnapshotReceipt): Promise<void> {
    this.assertOpen();
    if (this.receiptWriteFailure !== null) throw this.receiptWriteFailure;
    // A receipt starting over discards what was received before: its file must not be written any more once removed.
    if (receipt.restart) await this.settleReceiptWrites(0);
    const metadata = copyMetadata(receipt.metadata);
    if (!isSnapshotMetadata(metadata)) {
      throw new Error("invalid snapshot metadata");
    }
    const current = (this.staged ?? this.durable).incoming;
    if (!receipt.restart && (current === null || !sameSnapshot(current.metadata, metadata))) {
      throw new Error(`invariant violated: chunks of snapshot ${metadata.index}, which is not being received`);
    }
    let end = receipt.restart ? 0 : (current?.receivedBytes ?? 0);
    for (const chunk of receipt.chunks) {
      this.checkReceivedChunk(chunk.offset, chunk.data);
      if (chunk.offset !== end) {
        throw new Error(`invariant violated: received chunk at ${chunk.offset} does not continue at ${end}`);
      }
      end = chunk.offset + chunk.data.byteLength;
      if (end > metadata.sizeBytes) {
        throw new Error(`snapshot chunk ends at ${end}, beyond the size ${metadata.sizeBytes}`);
      }
    }
    const slot = receipt.restart || current === null ? this.reserveSlot() : current.slot;
    const receiptBytes = receipt.chunks.reduce((total, chunk) => total + chunk.data.byteLength, 0);
    if (!receipt.restart)
      await this.settleReceiptWrites(RECEIPT_CHUNKS_IN_FLIGHT * this.snapshotChunkBytes - receiptBytes);
    const chunks = receipt.chunks.map((chunk) => ({
      offset: chunk.offset,
      data: chunk.data,
      checksum: chunk.checksum >>> 0,
    }));
    if (chunks.length > 0) {
      const written = this.environment.writeSnapshotFile(this.scope, slot, chunks).catch((error: unknown) => {
        this.receiptWriteFailure ??= error instanceof Error ? error : new Error(String(error));
      });
      this.receiptWrites.push({ written, bytes: receiptBytes });
      this.receiptBytesInFlight += receiptBytes;
    }
    if (!receipt.restart) {
      // The chunks in the file are the receipt's progress (see `recoverIncoming`): no transaction is needed for them.
      // Until the install syncs the file they are received, and acknowledged, but a crash may lose them.
      const staged = this.staged;
      const view = staged ?? this.durable;
      if (view.incoming === null || !sameSnapshot(view.incoming.metadata, metadata) || view.incoming.slot !== slot) {
        throw new Error(`invariant violated: chunks of snapshot ${metadata.index}, which is not being received`);
      }
      const incoming = progressedIncoming(view.incoming, chunks);
      this.durable = { ...this.durable, incoming };
      if (staged !== null) staged.incoming = incoming;
      return;
    }
    return this.submit(() => {
      const staged = this.stagedView();
      this.stageBeginReceive(staged, metadata, slot);
      const incoming = progressedIncoming(staged.incoming as StoredIncomingSnapshot, chunks);
      this.environment.state.put(this.scope, INCOMING_SNAPSHOT_KEY, encodeRecord(incoming));
      staged.incoming = incoming;
    });
  }

  /**
   * Waits, oldest first, until at most `maxBytes` of received chunks are being written, then throws the failure of any
   * such write: the storage refuses every later write then, and the replica must not go on as if they had happened.
   */
  private async settleReceiptWrites(maxBytes: number): Promise<void> {
    while (this.receiptBytesInFlight > maxBytes) {
      const oldest = this.receiptWrites[0];
      if (oldest === undefined) throw new Error("invariant violated: received bytes in flight without their writes");
      await oldest.written;
      // Another caller waiting for the same write may have counted it out already.
      if (this.receiptWrites[0] === oldest) {
        this.receiptWrites.shift();
        this.receiptBytesInFlight -= oldest.bytes;
      }
    }
    if (this.receiptWriteFailure !== null) throw this.receiptWriteFailure;
  }

  /**
   * Makes this storage's next writes wait, in the order they are made, until every received chunk is written, and
   * with `syncSlot`, until that slot's file is durable: a write that installs the snapshot being received must not
   * reach the journal before its file is synced, and one that discards it must not let the file's removal meet a write
   * still in progress; awaiting them before submitting would let writes made meanwhile overtake it.
   */
  private holdWritesUntilReceiptsDurable(syncSlot: number | null = null): void {
    if (this.receiptWrites.length === 0 && this.receiptWriteFailure === null && syncSlot === null) return;
    const previous = this.writesHeld;
    const written = this.settleReceiptWrites(0);
    const settled =
      syncSlot === null ? written : written.then(() => this.environment.syncSnapshotFile(this.scope, syncSlot));
    // Each is observed here: whoever waits on the hold sees its failure, and nobody may be waiting yet.
    settled.catch(() => undefined);
    const held =
      previous === null
        ? settled
        : previous.then(
            () => settled,
            () => settled,
          );
    held.catch(() => undefined);
    this.writesHeld = held;
  }

  /**
   * The snapshot being received, how many bytes of it were received and stored (their writes may still be in
   * progress, see `receiveSnapshotChunks`) and their checksum, or null.
   */
  incomingSnapshot(): IncomingSnapshotProgress | null {
    this.assertOpen();
    const incoming = this.durable.incoming;
    return incoming === null
      ? null
      : {
          metadata: incoming.metadata,
          receivedBytes: incoming.receivedBytes,
          receivedChecksum: incoming.receivedChecksum,
        };
  }

  /**
   * Verifies the whole received snapshot, its size and its checksum (the running checksum of the received bytes, so
   * nothing is read back), and installs it like `installSnapshot` (a snapshot not newer than the stored one is
   * discarded as already covered). On a mismatch the received chunks are discarded and
   * `SnapshotChecksumMismatchError` is thrown, so the transfer restarts.
   */
  async finishSnapshotReceive(): Promise<SnapshotMetadata> {
    this.assertOpen();
    // The install makes the snapshot count: every chunk of it must be durable first.
    this.holdWritesUntilReceiptsDurable((this.staged ?? this.durable).incoming?.slot ?? null);
    let outcome: { installed: SnapshotMetadata } | { mismatch: string } | null = null;
    await this.submit(() => {
      const staged = this.stagedView();
      const incoming = staged.incoming;
      if (incoming === null) {
        throw new Error("no snapshot is being received");
      }
      if (incoming.receivedBytes !== incoming.metadata.sizeBytes) {
        throw new Error(
          `snapshot incomplete: ${incoming.receivedBytes} of ${incoming.metadata.sizeBytes} bytes received`,
        );
      }
      if (incoming.receivedChecksum !== incoming.metadata.checksum) {
        this.discardIncoming(staged);
        outcome = {
          mismatch: `received snapshot checksum ${incoming.receivedChecksum} differs from ${incoming.metadata.checksum}`,
        };
        return;
      }
      if (!this.isNewerSnapshot(staged, incoming.metadata)) {
        this.discardIncoming(staged);
        outcome = { installed: incoming.metadata };
        return;
      }
      // Reads the log (and may find it damaged) before writing anything, as a submitted write must.
      this.termIn(staged, incoming.metadata.index);
      this.environment.state.remove(this.scope, INCOMING_SNAPSHOT_KEY);
      staged.incoming = null;
      this.adoptSnapshot(staged, { metadata: incoming.metadata, slot: incoming.slot, inFile: true });
      outcome = { installed: incoming.metadata };
    });
    const settled = outcome as { installed: SnapshotMetadata } | { mismatch: string } | null;
    if (settled === null) {
      throw new Error("invariant violated: snapshot receive finished without an outcome");
    }
    if ("mismatch" in settled) {
      throw new SnapshotChecksumMismatchError(settled.mismatch);
    }
    return settled.installed;
  }

  /**
   * Removes everything this member stored (log entries, records, snapshot chunks and files) in one durable
   * transaction, then closes the storage. For a replica that left its group: its journal entries stop keeping segments
   * alive, its chunks' pages go back to LMDB's free list and its files are deleted once the transaction is durable. A
   * crash before the transaction is durable leaves the member's data as it was, so the removal is simply done again.
   */
  async destroy(): Promise<void> {
    this.assertOpen();
    // A file being written ahead of a record is removed with the rest, so its writes must have settled first; a
    // preparation still cutting its chunks stops at its next slice instead of writing them after the removal.
    this.destroying = true;
    await Promise.allSettled(this.preparations.values());
    await this.lastChunkWrite;
    // A failed chunk write failed the environment too: the removal below says so if it must.
    await this.settleReceiptWrites(0).catch(() => undefined);
    await this.submit(() => {
      const staged = this.stagedView();
      this.dropEntriesThrough(staged, staged.lastIndex);
      for (const name of [HARD_STATE_KEY, LOG_START_KEY, SNAPSHOT_KEY, INCOMING_SNAPSHOT_KEY]) {
        this.environment.state.remove(this.scope, name);
      }
      const keys = this.environment.chunks.getKeys({ start: [this.scope, 0, 0], end: [this.scope + 1, 0, 0] });
      for (const key of keys) this.environment.releaseChunk(key);
      for (const slot of this.environment.snapshotFiles.slots(this.scope)) {
        this.environment.releaseSnapshotFile(this.scope, slot);
      }
      this.orphanChunks = [];
      this.orphanFiles = [];
      staged.hardState = INITIAL_HARD_STATE;
      staged.logStart = { index: 0, term: 0 };
      staged.lastIndex = 0;
      staged.snapshot = null;
      staged.incoming = null;
    });
    await this.close();
  }

  /**
   * Starts the receipt of `metadata` over in the running transaction, in `slot`: a slot `reserveSlot` handed out, whose
   * chunks are written already. What was received before, of this snapshot or another, is discarded.
   */
  private stageBeginReceive(staged: View, metadata: SnapshotMetadata, slot: number): void {
    this.discardIncoming(staged);
    const incoming: StoredIncomingSnapshot = { metadata, slot, receivedBytes: 0, receivedChecksum: 0 };
    this.environment.state.put(this.scope, INCOMING_SNAPSHOT_KEY, encodeRecord(incoming));
    staged.incoming = incoming;
  }

  /** Throws unless `data` may be a received chunk at `offset`. */
  private checkReceivedChunk(offset: number, data: Uint8Array): void {
    if (!isNonNegativeInteger(offset)) {
      throw new Error(`invalid snapshot chunk offset ${offset}`);
    }
    if (data.byteLength === 0 || data.byteLength > this.snapshotChunkBytes) {
      throw new Error(`snapshot chunk must hold 1 to ${this.snapshotChunkBytes} bytes, got ${data.byteLength}`);
    }
  }

  /** Waits for queued writes to commit, then closes the environment when this storage opened it. */
  async close(): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    // A preparation stops at its next slice once closed, or is writing its chunks already.
    await Promise.allSettled(this.preparations.values());
    await this.lastChunkWrite;
    // Received chunks being written too; a failed one failed its replica already.
    await this.settleReceiptWrites(0).catch(() => undefined);
    await this.lastWrite;
    if (this.ownsEnvironment) {
      await this.environment.close();
    }
  }

  /** Submits a write to the environment's next transaction, remembering it so `close` can wait for it. */
  private submit(write: () => void, options: { readonly writesChunks?: boolean } = {}): Promise<void> {
    const held = this.writesHeld;
    const written = held === null ? this.environment.submit(write, options) : this.submitAfter(held, write, options);
    this.lastWrite = written.then(
      () => undefined,
      () => undefined,
    );
    return written;
  }

  /** `submit` once `held` settles; the last write waiting for it clears it, so later writes go straight on. */
  private submitAfter(
    held: Promise<void>,
    write: () => void,
    options: { readonly writesChunks?: boolean },
  ): Promise<void> {
    this.heldWriteCount += 1;
    const release = (): void => {
      this.heldWriteCount -= 1;
      if (this.heldWriteCount === 0 && this.writesHeld === held) this.writesHeld = null;
    };
    return held.then(
      () => {
        release();
        return this.environment.submit(write, options);
      },
      (error: unknown) => {
        release();
        throw error;
      },
    );
  }

  private assertOpen(): void {
    if (this.closed) {
      throw new Error("storage is closed");
    }
  }

  /** The view the running transaction changes; the first write of this storage in a transaction stages it. */
  private stagedView(): View {
    if (this.staged === null) {
      this.environment.join(this);
      this.staged = { ...this.durable };
      this.cacheChanges = [];
      this.logChangedInTransaction = false;
      if (!this.sweptOrphanChunks) {
        this.sweptOrphanChunks = true;
        this.environment.removeChunks(this.orphanChunks);
        this.orphanChunks = [];
        this.environment.removeSnapshotFiles(this.orphanFiles.map((slot) => [this.scope, slot] as const));
        this.orphanFiles = [];
      }
    }
    return this.staged;
  }

  /** Reads and verifies the persisted records into the in-memory view. */
  private recover(): View {
    const hardState = this.readRecord(HARD_STATE_KEY, isHardState);
    const logStart = this.readRecord(LOG_START_KEY, (value): value is LogStart => {
      return isRecord(value) && isNonNegativeInteger(value.index) && isNonNegativeInteger(value.term);
    });
    const isStoredSnapshot = (value: unknown): value is StoredSnapshot =>
      isRecord(value) &&
      isSnapshotMetadata(value.metadata) &&
      isNonNegativeInteger(value.slot) &&
      (value.inFile === undefined || value.inFile === true);
    const snapshot = this.readRecord(SNAPSHOT_KEY, isStoredSnapshot);
    if (snapshot?.inFile === true) {
      this.environment.snapshotFiles.scanInstalled(this.scope, snapshot.slot, snapshot.metadata.sizeBytes);
    }
    const stored = this.readRecord(
      INCOMING_SNAPSHOT_KEY,
      (value): value is Omit<StoredIncomingSnapshot, "receivedChecksum"> & { receivedChecksum?: number } =>
        isStoredSnapshot(value) &&
        isRecord(value) &&
        isNonNegativeInteger(value.receivedBytes) &&
        value.receivedBytes <= value.metadata.sizeBytes &&
        (value.receivedChecksum === undefined || isNonNegativeInteger(value.receivedChecksum)),
    );
    const incoming = stored === null ? null : this.recoverIncoming(stored.metadata, stored.slot);
    const start = logStart ?? { index: 0, term: 0 };
    if (snapshot !== null && (start.index !== snapshot.metadata.index || start.term !== snapshot.metadata.term)) {
      throw new StorageCorruptionError(`${LOG_START_KEY} record`, "log start does not match the stored snapshot");
    }
    let lastIndex = start.index;
    const bounds = this.environment.log.bounds(this.scope);
    if (bounds !== null) {
      lastIndex = bounds.last;
      if (bounds.first !== start.index + 1) {
        throw new StorageCorruptionError(
          `log entry ${bounds.first}`,
          `first stored entry should be ${start.index + 1}`,
        );
      }
    }
    const view: View = { hardState: hardState ?? INITIAL_HARD_STATE, logStart: start, lastIndex, snapshot, incoming };
    if (lastIndex > start.index) {
      // Verify the newest entry now: it is the one most likely to have been damaged by a crash mid-write.
      this.termIn(view, lastIndex);
    }
    return view;
  }

  /**
   * How far the receipt of `metadata` into `slot` came, as its file shows it: the frames that verify and continue each
   * other from byte 0, with their running checksum (`SnapshotFiles.scanIncoming`, which cuts the rest off the file).
   * No record counts the progress (the record's own count is only a lower bound): the frames are appended, and
   * acknowledged, before they are synced, so a crash may have cut the file anywhere after its last sync. What was cut
   * is reported in `damageFoundOnOpen` and received again: the leader goes back to the offset this member names (see
   * `SnapshotTransfer`). A receipt that earlier versions kept in LMDB resumes from its file too, which holds nothing,
   * and its chunks there are removed as orphans.
   */
  private recoverIncoming(metadata: SnapshotMetadata, slot: number): StoredIncomingSnapshot {
    const scan = this.environment.snapshotFiles.scanIncoming(this.scope, slot, metadata.sizeBytes);
    if (scan.cutBytes > 0) {
      this.damage.push(
        `incoming snapshot file of slot ${slot}: ${scan.cutBytes} bytes after byte ${scan.dataBytes} of the snapshot ` +
          "did not verify or continue it and were cut",
      );
    }
    return { metadata, slot, receivedBytes: scan.dataBytes, receivedChecksum: scan.checksum };
  }

  private readRecord<T>(key: string, isValid: (value: unknown) => value is T): T | null {
    const value = this.environment.state.get(this.scope, key);
    if (value === undefined) {
      return null;
    }
    const decoded = decodeRecord(value, `${key} record`);
    if (!isValid(decoded)) {
      throw new StorageCorruptionError(`${key} record`, "record has an unexpected shape");
    }
    return decoded;
  }

  private termIn(view: View, index: number): number | null {
    if (index === view.logStart.index) {
      return view.logStart.term;
    }
    if (index === 0) {
      // The empty log before index 1 has term 0, whatever has been compacted since.
      return 0;
    }
    if (!Number.isSafeInteger(index) || index < view.logStart.index || index > view.lastIndex) {
      return null;
    }
    // The cache shows the durable log, which is also the staged one until the running transaction changes the log.
    if (view === this.durable || !this.logChangedInTransaction) {
      const cached = this.cache.get(index);
      if (cached !== undefined) {
        return cached.term;
      }
    }
    const value = this.environment.log.get(this.scope, index);
    if (value === undefined) {
      throw new StorageCorruptionError(`log entry ${index}`, "entry is missing");
    }
    return decodeEntry(value, index).term;
  }

  private checkEntriesShape(entries: readonly Entry[]): void {
    let previous: Entry | undefined;
    for (const entry of entries) {
      if (!isNonNegativeInteger(entry.index) || entry.index < 1 || !isNonNegativeInteger(entry.term)) {
        throw new Error(`invariant violated: entry index must be ≥ 1 and term ≥ 0 (index ${entry.index})`);
      }
      if (previous !== undefined) {
        if (entry.index !== previous.index + 1) {
          throw new Error(
            `invariant violated: appended entries must be consecutive (${previous.index}, ${entry.index})`,
          );
        }
        if (entry.term < previous.term) {
          throw new Error(`invariant violated: entry terms must not decrease (at index ${entry.index})`);
        }
      }
      previous = entry;
    }
  }

  private checkHardStateShape(hardState: HardState): void {
    if (!isHardState(hardState)) throw new Error("invalid hard state");
  }

  private checkAppendAgainst(staged: View, entries: readonly Entry[], hardState: HardState | null): void {
    const first = entries[0];
    if (first !== undefined) {
      if (first.index <= staged.logStart.index) {
        throw new Error(
          `invariant violated: cannot append at ${first.index}, entries up to ${staged.logStart.index} are compacted`,
        );
      }
      if (first.index > staged.lastIndex + 1) {
        throw new Error(`invariant violated: append at ${first.index} would leave a gap after ${staged.lastIndex}`);
      }
      const previousTerm = this.termIn(staged, first.index - 1);
      if (previousTerm !== null && first.term < previousTerm) {
        throw new Error(`invariant violated: entry ${first.index} has a term lower than its predecessor`);
      }
      const lastCommitted = Math.min(staged.hardState.commitIndex, staged.lastIndex);
      for (const entry of entries) {
        if (entry.index > lastCommitted) {
          break;
        }
        if (this.termIn(staged, entry.index) !== entry.term) {
          throw new Error(`invariant violated: append would overwrite committed entry ${entry.index}`);
        }
      }
    }
    if (hardState !== null) {
      if (hardState.term < staged.hardState.term) {
        throw new Error(`invariant violated: term must not decrease (${staged.hardState.term} -> ${hardState.term})`);
      }
      if (
        hardState.term === staged.hardState.term &&
        staged.hardState.votedFor !== null &&
        hardState.votedFor !== staged.hardState.votedFor
      ) {
        throw new Error(`invariant violated: the vote of term ${hardState.term} cannot change`);
      }
    }
  }

  /**
   * Whether `metadata` describes a snapshot newer than the stored one. An older or equal one is ignored, as the
   * simulated disk does, because the stored snapshot already covers everything it would.
   */
  private isNewerSnapshot(staged: View, metadata: SnapshotMetadata): boolean {
    return metadata.index > (staged.snapshot?.metadata.index ?? 0);
  }

  /**
   * Makes `snapshot` (whose chunks are already written) the current one and applies the Raft rule for the log: if
   * the log holds the snapshot's last entry with the same term, the entries after it are kept; otherwise the whole
   * log is discarded.
   */
  private adoptSnapshot(staged: View, snapshot: StoredSnapshot): void {
    const { index, term } = snapshot.metadata;
    if (this.termIn(staged, index) === term && index <= staged.lastIndex) {
      this.dropEntriesThrough(staged, index);
    } else {
      this.dropEntriesThrough(staged, staged.lastIndex);
      staged.lastIndex = index;
    }
    this.setLogStart(staged, { index, term });
    const previous = staged.snapshot;
    if (previous !== null && previous.slot !== snapshot.slot) {
      this.releaseSlot(previous.slot);
    }
    this.environment.state.put(this.scope, SNAPSHOT_KEY, encodeRecord(snapshot));
    staged.snapshot = snapshot;
    if (staged.incoming !== null && staged.incoming.metadata.index <= index) {
      this.discardIncoming(staged);
    }
  }

  private dropEntriesThrough(staged: View, index: number): void {
    this.logChangedInTransaction = true;
    this.cacheChanges.push(() => this.cache.dropThrough(index));
    for (let position = staged.logStart.index + 1; position <= index; position += 1) {
      this.environment.log.remove(this.scope, position);
    }
  }

  private setLogStart(staged: View, logStart: LogStart): void {
    this.environment.state.put(this.scope, LOG_START_KEY, encodeRecord(logStart));
    staged.logStart = logStart;
    staged.lastIndex = Math.max(staged.lastIndex, logStart.index);
  }

  private discardIncoming(staged: View): void {
    if (staged.incoming === null) {
      return;
    }
    this.releaseSlot(staged.incoming.slot);
    this.environment.state.remove(this.scope, INCOMING_SNAPSHOT_KEY);
    staged.incoming = null;
  }

  /** Keys of the chunks stored under `slot`. */
  private chunkKeys(slot: number): ChunkKey[] {
    return [...this.environment.chunks.getKeys({ start: [this.scope, slot, 0], end: [this.scope, slot + 1, 0] })];
  }

  /**
   * Removes the chunks or the file of a slot the durable records stop referring to in this transaction, once it is
   * durable: a
   * crash before then leaves the records pointing at them.
   */
  private releaseSlot(slot: number): void {
    for (const key of this.chunkKeys(slot)) this.environment.releaseChunk(key);
    if (this.environment.snapshotFiles.has(this.scope, slot)) this.environment.releaseSnapshotFile(this.scope, slot);
  }

  /**
   * Removes, now, whatever a slot that no durable record refers to still holds: chunks of a snapshot whose record
   * never became durable (a crash between the chunks' commit and the journal's) or whose release a crash cut short.
   */
  private clearSlot(slot: number): void {
    for (const key of this.chunkKeys(slot)) this.environment.chunks.removeSync(key);
  }

  /**
   * A chunk slot never used before by this storage: above every slot present when it opened and every slot handed
   * out since, released ones included (their chunks may still be on their way out).
   */
  private nextSlot(staged: View): number {
    this.highestSlot = Math.max(this.highestSlot, staged.snapshot?.slot ?? 0, staged.incoming?.slot ?? 0) + 1;
    return this.highestSlot;
  }

  /** Snapshot data cut into checksummed chunks of `snapshotChunkBytes`, each with the byte offset it starts at. */
  private encodeChunks(data: Uint8Array): { readonly offset: number; readonly chunk: Uint8Array }[] {
    const chunks: { offset: number; chunk: Uint8Array }[] = [];
    for (let offset = 0; offset < data.byteLength; offset += this.snapshotChunkBytes) {
      chunks.push({ offset, chunk: encodeChunk(data.subarray(offset, offset + this.snapshotChunkBytes)) });
    }
    return chunks;
  }

  /** `nextSlot` outside a transaction (for chunks written ahead of the transaction that will refer to them). */
  private reserveSlot(): number {
    const durable = this.durable;
    const staged = this.staged;
    this.highestSlot = Math.max(
      this.highestSlot,
      durable.snapshot?.slot ?? 0,
      durable.incoming?.slot ?? 0,
      staged?.snapshot?.slot ?? 0,
      staged?.incoming?.slot ?? 0,
    );
    this.highestSlot += 1;
    return this.highestSlot;
  }

  private readSnapshotData(stored: StoredSnapshot): Uint8Array {
    const data =
      stored.inFile === true
        ? this.readSnapshotFile(stored.slot, stored.metadata.sizeBytes)
        : this.readChunks(stored.slot, stored.metadata.sizeBytes, "snapshot");
    const checksum = crc32c(data);
    if (checksum !== stored.metadata.checksum) {
      throw new StorageCorruptionError(
        "snapshot",
        `data checksum ${checksum} differs from ${stored.metadata.checksum}`,
      );
    }
    return data;
  }

  /** The `sizeBytes` of data of the snapshot file of `slot`, every frame read straight into its place and verified. */
  private readSnapshotFile(slot: number, sizeBytes: number): Uint8Array {
    const data = new Uint8Array(sizeBytes);
    const files = this.environment.snapshotFiles;
    // Bounded by the frames, which the scan at open (or the receipt) found to cover exactly `sizeBytes`.
    for (const [frameNumber, frame] of files.frames(this.scope, slot).entries()) {
      files.readFrame(this.scope, slot, frameNumber, data.subarray(frame.offset, frame.offset + frame.dataBytes));
    }
    return data;
  }

  /** Reassembles `sizeBytes` of chunk data stored under `slot`, verifying every chunk and their contiguity. */
  private readChunks(slot: number, sizeBytes: number, location: string): Uint8Array {
    const data = new Uint8Array(sizeBytes);
    let offset = 0;
    for (const chunk of this.verifiedChunks(slot, sizeBytes, location)) {
      data.set(chunk, offset);
      offset += chunk.byteLength;
    }
    return data;
  }

  /**
   * The data of the chunks stored under `slot`, in order, each verified against its own checksum; throws when one is
   * missing or they do not add up to `sizeBytes`. Only one chunk is read at a time.
   */
  private *verifiedChunks(slot: number, sizeBytes: number, location: string): Generator<Uint8Array> {
    let expectedOffset = 0;
    const range = {
      start: [this.scope, slot, 0] as [number, number, number],
      end: [this.scope, slot + 1, 0] as [number, number, number],
    };
    for (const { key, value } of this.environment.chunks.getRange(range)) {
      const offset = key[2];
      if (offset !== expectedOffset) {
        throw new StorageCorruptionError(`${location} chunk at ${expectedOffset}`, "chunk is missing");
      }
      // A view, not a copy: LMDB hands out a buffer of its own for each value it reads here.
      const chunk = chunkDataView(value, `${location} chunk at ${offset}`);
      if (offset + chunk.byteLength > sizeBytes) {
        throw new StorageCorruptionError(`${location} chunk at ${offset}`, "chunk extends beyond the snapshot size");
      }
      expectedOffset = offset + chunk.byteLength;
      yield chunk;
    }
    if (expectedOffset !== sizeBytes) {
      throw new StorageCorruptionError(`${location} chunk at ${expectedOffset}`, "chunk is missing");
    }
  }
}
