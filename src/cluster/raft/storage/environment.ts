/**
 * The storage of every partition replica of a broker: a journal (`journal.ts`) for log entries and records, plain
 * files for the snapshots the replicas take and receive from their leaders (`snapshot-files.ts`), LMDB for the chunks
 * of the snapshots a restore installs whole and of those earlier versions stored, and one group commit over them.
 *
 * Each replica's data lives under keys that start with the replica's scope (its partition id), so any number of
 * replicas share the journal and the LMDB environment. What sharing buys is the commit: a durable commit costs a disk
 * sync, and a broker hosting a leader and two followers would otherwise sync three times for every round of writes.
 * Here every write submitted by any replica while a commit is pending joins that commit, so the broker pays one sync
 * per round (measured with `npm run bench -- cluster`).
 *
 * A transaction runs the submitted writes, then appends the journal record and syncs it. Chunks are durable before a
 * journal record refers to them, and chunks a record stops referring to are removed only once that record is durable
 * (`releaseChunk`), so the two stores stay consistent across a crash; a crash in between leaves chunks no record
 * refers to, which the storage clears after the next start. Snapshot files follow the same rules: synced before a
 * record installs them, removed only once a durable record stops referring to them (`releaseSnapshotFile`).
 *
 * The data of a whole snapshot is written before the transaction that makes a record refer to it, to a snapshot file
 * on the thread pool (a snapshot a member takes itself since 2026-12-06, one it receives since 2026-12-05; LMDB
 * chunks before), and released chunks are removed by LMDB's writer thread: megabytes of chunks committed and synced on
 * the event loop's thread stopped the whole broker for 30–170 ms (6 MB under load on the development machine), every
 * replica of it included. A transaction opens an LMDB transaction only when one of its writes declared chunk
 * writes (installing a snapshot nobody prepared): opening one otherwise would wait for LMDB's write lock, which the
 * writer thread holds while it removes chunks.
 *
 * A storage that writes joins the running transaction as a participant: once the transaction is durable every
 * participant publishes its staged view, and if it fails every participant drops it (and the environment refuses
 * all later writes, since memory may no longer match the disk).
 */
import { join } from "node:path";
import { type Database, open, type RootDatabase, type RootDatabaseOptionsWithPath } from "lmdb";
import { BufferPool } from "../../../buffers/buffer-pool.js";
import { createPrivateDirectoryDurably, privateFileMode } from "../../../files/private-files.js";
import { defaultGroupCommitOptions, type GroupCommitOptions, GroupCommitter } from "./group-commit.js";
import { Journal, type JournalEntries, type JournalRecords } from "./journal.js";
import { type SnapshotFileChunk, SnapshotFiles } from "./snapshot-files.js";

/** Options of an environment. */
export interface StorageEnvironmentOptions {
  /** Directory of the storage (the LMDB environment, and the journal in `journal/`); created when missing. */
  readonly directory: string;
  /**
   * Commit on the event loop's thread (blocking it for one disk sync) instead of on the thread pool (and LMDB's
   * writer thread). A sync on an SSD takes a few hundred microseconds, less than the thread hand-offs cost when the
   * broker's cores are busy; on a slow disk the thread pool is the better choice.
   */
  readonly synchronousCommit?: boolean;
  /** Preallocated size of each journal segment file. */
  readonly journalSegmentBytes?: number;
  /** Limits of the group-commit queue. */
  readonly groupCommit?: GroupCommitOptions;
  /** Called after every durable commit (for metrics). */
  readonly onCommit?: (commit: CommitReport) => void;
}

/** What one durable commit took and carried. */
export interface CommitReport {
  /** From the start of the transaction until it was durable. */
  readonly durationMs: number;
  /** Writes (appends, snapshot records, …) of every member that the commit made durable together. */
  readonly writes: number;
}

/** A storage taking part in a transaction: told once whether what it staged became durable. */
export interface TransactionParticipant {
  /** The transaction is durable: what was staged is now the durable state. */
  commitStaged(): void;
  /** The transaction failed: what was staged is discarded. */
  discardStaged(): void;
}

/**
 * Snapshot chunks by [scope, slot, byte offset]. LMDB's default ordered-binary key encoding sorts arrays element by
 * element and numbers numerically, so a range read walks one slot's chunks in order.
 */
export type ChunkDatabase = Database<Uint8Array, [number, number, number]>;
/** Key of one snapshot chunk. */
export type ChunkKey = [number, number, number];

/** Name of the journal's directory inside the storage directory. */
export const JOURNAL_DIRECTORY_NAME = "journal";

/** Name of the directory of the snapshots' files inside the storage directory. */
export const SNAPSHOT_FILES_DIRECTORY_NAME = "snapshots";

/**
 * `error`, after handling the promise lmdb-js attaches to a failed commit's errors (`commitError`), which it rejects
 * later with the commit's cause: unhandled, that rejection ends the process (a full disk crashed the broker).
 */
function absorbCommitError(error: unknown): unknown {
  const commitError = (error as { commitError?: unknown } | null)?.commitError;
  if (commitError instanceof Promise) commitError.catch(() => undefined);
  return error;
}

/** The shared environment; see the module comment. */
export class StorageEnvironment {
  /** Log entries by (scope, index). */
  readonly log: JournalEntries;
  /** Records (hard state, log start, snapshot records) by (scope, name). */
  readonly state: JournalRecords;
  readonly chunks: ChunkDatabase;
  /** Snapshots taken and received from leaders, in plain files (`snapshot-files.ts` says why); read them here. */
  readonly snapshotFiles: SnapshotFiles;
  /**
   * Memory for snapshot chunks on their way, shared by the environment's members (a broker's replicas): a leader's
   * chunk reads, handed back once sent, and a receiving member's chunks as stored, handed back once durable. At most
   * a transfer window's worth is kept free.
   */
  readonly chunkBuffers = new BufferPool({
    minBytes: 1,
    maxBytes: 64 * 1024 * 1024,
    capacityStepBytes: 4 * 1024,
    maxFreeBuffers: 16,
    maxFreeBytes: 32 * 1024 * 1024,
  });
  private readonly journal: Journal;
  /** Chunks the running transaction releases: removed once it is durable (see `releaseChunk`). */
  private releasedChunks: ChunkKey[] = [];
  /** Snapshot files the running transaction releases: removed once it is durable (see `releaseSnapshotFile`). */
  private releasedSnapshotFiles: (readonly [number, number])[] = [];
  /** Why a snapshot file's write or sync, or a chunk removal on LMDB's writer thread, failed; writes are refused. */
  private chunkFailure: Error | null = null;
  private readonly root: RootDatabase<Uint8Array, string>;
  private readonly committer: GroupCommitter;
  private readonly synchronousCommit: boolean;
  private readonly participants = new Set<TransactionParticipant>();
  private inTransaction = false;
  private closed = false;
  private readonly onCommit: ((commit: CommitReport) => void) | undefined;
  private transactionStartedAtMs = 0;
  private operationsReported = 0;
  /** Submitted writes that declared chunk writes and have not run yet: their transaction opens an LMDB one. */
  private pendingChunkWriters = 0;
  private lmdbTransactionsOpened = 0;
  /** Snapshot file writes, syncs and removals, and chunk removals on LMDB's writer thread; closing waits for them. */
  private readonly chunkWritesInFlight = new Set<Promise<unknown>>();

  private constructor(options: StorageEnvironmentOptions) {
    this.synchronousCommit = options.synchronousCommit ?? false;
    this.onCommit = options.onCommit;
    // Durability settings for snapshot chunks. `overlappingSync` (the default on Linux) resolves write promises when
    // a transaction is committed and visible but only later, separately, when it is flushed; with it off, the commit
    // syncs the data and meta pages before it returns (synchronous mode) or before LMDB's writer thread marks it
    // committed, so a settled commit means durable. `noSync` stays off for the same reason.
    // The directory and LMDB's files are owner-only (0700, 0600) like everything flowplane stores; lmdb-js reads
    // the files' mode from `permissionsMode` (and `txnStartThreshold`), which its type declarations lack.
    createPrivateDirectoryDurably(options.directory);
    const rootOptions: RootDatabaseOptionsWithPath & { permissionsMode: number; txnStartThreshold: number } = {
      path: options.directory,
      maxDbs: 4,
      encoding: "binary",
      overlappingSync: false,
      noSync: false,
      commitDelay: 0,
      // Writes of one turn of the event loop are still committed together, since no transaction starts before the
      // next turn (`commitDelay` 0) however many writes wait. Event-turn batching would do the same, but it queues a
      // write of its own per batch whose promise nobody holds: when a commit fails (a full disk), lmdb-js rejects it
      // and the unhandled rejection ends the process.
      eventTurnBatching: false,
      txnStartThreshold: Number.MAX_SAFE_INTEGER,
      cache: false,
      permissionsMode: privateFileMode,
    };
    this.root = open<Uint8Array, string>(rootOptions);
    this.chunks = this.root.openDB<Uint8Array, [number, number, number]>({
      name: "snapshotChunks",
      encoding: "binary",
    });
    this.snapshotFiles = SnapshotFiles.open(join(options.directory, SNAPSHOT_FILES_DIRECTORY_NAME));
    this.journal = Journal.open({
      directory: join(options.directory, JOURNAL_DIRECTORY_NAME),
      ...(options.journalSegmentBytes === undefined ? {} : { segmentBytes: options.journalSegmentBytes }),
    });
    this.log = this.journal.entries;
    this.state = this.journal.records;
    this.migrateLogFromLmdb();
    this.committer = new GroupCommitter(
      (work) => this.runTransaction(work),
      options.groupCommit ?? defaultGroupCommitOptions,
      () => {
        this.removeReleasedChunks();
        this.removeReleasedSnapshotFiles();
        this.settleParticipants((participant) => participant.commitStaged());
        this.reportCommit();
      },
      () => {
        // The durable records may still refer to them.
        this.releasedChunks = [];
        this.releasedSnapshotFiles = [];
        this.settleParticipants((participant) => participant.discardStaged());
      },
    );
  }

  /** Opens (creating when missing) the environment in `options.directory`. */
  static open(options: StorageEnvironmentOptions): StorageEnvironment {
    return new StorageEnvironment(options);
  }

  /** The torn last write of the journal that opening cut, if any (`Journal.tornTailCutOnOpen`). */
  get tornTailCutOnOpen(): readonly string[] {
    return this.journal.tornTailCutOnOpen;
  }

  /**
   * Why the environment refuses writes, after a transaction or a chunk write failed (a full disk, an I/O error); null
   * while it accepts them. Its in-memory view may then differ from the disk, so only closing it and opening it again
   * from the disk makes it writable again.
   */
  get failure(): Error | null {
    return this.chunkFailure ?? this.committer.failureCause;
  }

  /** Whether commits run on the event loop's thread. */
  get commitsSynchronously(): boolean {
    return this.synchronousCommit;
  }

  /**
   * Scopes (members, i.e. partitions in a broker) that hold anything durable: log entries, records or snapshot
   * chunks, ascending. A broker uses it to find the data of replicas it no longer hosts.
   */
  scopes(): number[] {
    const scopes = new Set(this.journal.scopes());
    for (const key of this.chunks.getKeys()) scopes.add(key[0]);
    for (const scope of this.snapshotFiles.scopes()) scopes.add(scope);
    return [...scopes].sort((left, right) => left - right);
  }

  /** Transactions that opened an LMDB transaction on this thread so far (for tests). */
  get lmdbTransactionCount(): number {
    return this.lmdbTransactionsOpened;
  }

  /** Resolves once the snapshot file operations and chunk removals started so far are settled (for tests). */
  async chunkOperationsSettled(): Promise<void> {
    await Promise.allSettled([...this.chunkWritesInFlight]);
  }

  /** Number of durable transactions committed so far (for tests and benchmarks). */
  get transactionCount(): number {
    return this.committer.transactionCount;
  }

  /**
   * Queues `write` for the next transaction and resolves once that transaction is durable. `write` runs inside the
   * transaction and must check its preconditions before it writes anything (see `GroupCommitter.submit`).
   */
  submit(write: () => void, options: { readonly writesChunks?: boolean } = {}): Promise<void> {
    if (this.closed) return Promise.reject(new Error("the storage environment is closed"));
    const failure = this.failure;
    if (failure !== null) {
      return Promise.reject(new Error(`storage failed earlier and accepts no writes: ${failure.message}`));
    }
    if (options.writesChunks !== true) return this.committer.submit(write);
    // Counted until it runs, so that the transaction it runs in is an LMDB transaction too (see `runTransaction`).
    this.pendingChunkWriters += 1;
    let ran = false;
    const written = this.committer.submit(() => {
      ran = true;
      this.pendingChunkWriters -= 1;
      write();
    });
    // A write refused before it ran (a full queue, an earlier failure) is no longer pending either.
    written.catch(() => {
      if (!ran) this.pendingChunkWriters -= 1;
    });
    return written;
  }

  /**
   * Appends snapshot chunks (received, or of a snapshot being prepared) to the file of `scope` and `slot`
   * (`SnapshotFiles.append`) and resolves once they are written, not synced (`syncSnapshotFile`). A failed write fails
   * the environment as a failed chunk write does: what reached the file is unknown.
   */
  writeSnapshotFile(scope: number, slot: number, chunks: readonly SnapshotFileChunk[]): Promise<void> {
    return this.onSnapshotFile(() => this.snapshotFiles.append(scope, slot, chunks));
  }

  /** Makes the file of `scope` and `slot` durable; a failure fails the environment as `writeSnapshotFile`'s does. */
  syncSnapshotFile(scope: number, slot: number): Promise<void> {
    return this.onSnapshotFile(() => this.snapshotFiles.sync(scope, slot));
  }

  /**
   * Removes a snapshot file once the running transaction is durable: until then the durable records may still refer
   * to it. Only callable from inside a write.
   */
  releaseSnapshotFile(scope: number, slot: number): void {
    if (!this.inTransaction) throw new Error("invariant violated: a snapshot file was released outside a transaction");
    this.releasedSnapshotFiles.push([scope, slot]);
  }

  /** Removes snapshot files no record refers to (closing waits for it); a failure leaves them for the next start. */
  removeSnapshotFiles(files: readonly (readonly [number, number])[]): void {
    for (const [scope, slot] of files) {
      const removed = this.snapshotFiles.remove(scope, slot).catch(() => undefined);
      this.chunkWritesInFlight.add(removed);
      void removed.finally(() => this.chunkWritesInFlight.delete(removed));
    }
  }

  /** Runs a snapshot file operation counted among the chunk operations; its failure fails the environment. */
  private async onSnapshotFile(operation: () => Promise<void>): Promise<void> {
    if (this.closed) throw new Error("the storage environment is closed");
    const failure = this.failure;
    if (failure !== null) throw new Error(`storage failed earlier and accepts no writes: ${failure.message}`);
    const running = operation();
    this.chunkWritesInFlight.add(running);
    try {
      await running;
    } catch (error) {
      const cause = error instanceof Error ? error : new Error(String(error));
      this.chunkFailure ??= new Error(`a snapshot file could not be written: ${cause.message}`, { cause });
      throw this.chunkFailure;
    } finally {
      this.chunkWritesInFlight.delete(running);
    }
  }

  /** Removes the snapshot files released by the transaction that just became durable. */
  private removeReleasedSnapshotFiles(): void {
    const released = this.releasedSnapshotFiles;
    this.releasedSnapshotFiles = [];
    this.removeSnapshotFiles(released);
  }

  /**
   * Removes chunks no record refers to, on LMDB's writer thread (closing waits for it). A removal that fails leaves
   * chunks no record refers to, which the storage clears after the next start, so it fails nothing.
   */
  removeChunks(keys: readonly ChunkKey[]): void {
    if (keys.length === 0) return;
    this.queueOnWriterThread((operations) => {
      for (const key of keys) operations.push(this.chunks.remove(key));
    }).catch(absorbCommitError);
  }

  /**
   * Queues the LMDB writes `start` adds to `operations` and resolves once all are committed. Each is observed as soon
   * as it is queued: a later one that throws at once must not leave the earlier ones' failures unhandled (LMDB
   * rejects them when their transaction fails, and an unhandled rejection ends the process).
   */
  private queueOnWriterThread(start: (operations: Promise<unknown>[]) => void): Promise<void> {
    const operations: Promise<unknown>[] = [];
    try {
      start(operations);
    } finally {
      for (const operation of operations) operation.catch(absorbCommitError);
    }
    return this.onWriterThread(Promise.all(operations));
  }

  /** Resolves once `operations`, queued on LMDB's writer thread, are committed (and so durable: no overlapping sync). */
  private async onWriterThread(operations: Promise<unknown>): Promise<void> {
    this.chunkWritesInFlight.add(operations);
    try {
      await operations;
    } finally {
      this.chunkWritesInFlight.delete(operations);
    }
  }

  /**
   * Removes the chunks released by the transaction that just became durable, on LMDB's writer thread: freeing a
   * snapshot's megabytes in a transaction of this thread would wait for LMDB's write lock while another replica's
   * write held it. A crash before the removal leaves chunks that the next start clears.
   */
  private removeReleasedChunks(): void {
    const released = this.releasedChunks;
    this.releasedChunks = [];
    this.removeChunks(released);
  }

  /** Makes `participant` part of the running transaction; only callable from inside a submitted write. */
  join(participant: TransactionParticipant): void {
    if (!this.inTransaction) throw new Error("invariant violated: a storage staged a write outside a transaction");
    this.participants.add(participant);
  }

  /** Resolves once no write is pending or in flight. */
  whenIdle(): Promise<void> {
    return this.committer.whenIdle();
  }

  /**
   * Removes a snapshot chunk once the running transaction is durable: until then the durable records may still refer
   * to it. Only callable from inside a write.
   */
  releaseChunk(key: ChunkKey): void {
    if (!this.inTransaction) throw new Error("invariant violated: a chunk was released outside a transaction");
    this.releasedChunks.push(key);
  }

  /** Waits for pending writes and chunk removals, then closes the environment. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.committer.whenIdle();
    await this.chunkOperationsSettled();
    await this.snapshotFiles.close();
    await this.journal.close();
    await this.root.close();
  }

  private runTransaction(work: () => void): Promise<void> {
    const transaction = (): void => {
      this.inTransaction = true;
      this.journal.begin();
      try {
        work();
      } finally {
        this.inTransaction = false;
        this.journal.seal();
      }
    };
    if (!this.synchronousCommit) {
      this.transactionStartedAtMs = performance.now();
      if (this.pendingChunkWriters === 0) {
        // No LMDB transaction (it would queue behind chunk removals on LMDB's writer thread); the batch still
        // gathers until the end of this turn.
        return new Promise<void>((resolve) => setImmediate(resolve))
          .then(() => {
            if (this.pendingChunkWriters > 0) {
              return this.root.transaction(transaction).then(
                () => undefined,
                (error: unknown) => {
                  throw absorbCommitError(error);
                },
              );
            }
            transaction();
            return undefined;
          })
          .then(
            () => this.journal.commit(),
            (error: unknown) => {
              this.journal.abort();
              throw error;
            },
          );
      }
      return this.root.transaction(transaction).then(
        () => this.journal.commit(),
        (error: unknown) => {
          this.journal.abort();
          throw absorbCommitError(error);
        },
      );
    }
    // The commit waits for the end of this turn of the event loop: every replica that writes in the same turn (one
    // socket read often carries messages for several partitions) joins it, and messages sent just before the write
    // leave first (the transport flushes its sockets on the next tick, before this runs).
    return new Promise((resolve, reject) => {
      setImmediate(() => {
        try {
          this.transactionStartedAtMs = performance.now();
          try {
            // An LMDB transaction only when a write declared chunk writes (LMDB then commits and syncs them): opening
            // one otherwise would wait for LMDB's write lock while a chunk removal holds it. A chunk written by a write
            // that did not declare it still commits, on its own, before the journal record.
            if (this.pendingChunkWriters > 0) {
              this.lmdbTransactionsOpened += 1;
              this.root.transactionSync(transaction);
            } else {
              transaction();
            }
          } catch (error) {
            this.journal.abort();
            throw error;
          }
          this.journal.commitSync();
          resolve();
        } catch (error) {
          reject(error);
        }
      });
    });
  }

  /**
   * Moves the log and records of the earlier layout, which kept them in LMDB databases `log` and `state`, into the
   * journal; then empties those databases. Safe to repeat: once the journal holds the data, the copy is skipped.
   */
  private migrateLogFromLmdb(): void {
    const log = this.root.openDB<Uint8Array, [number, number]>({ name: "log", encoding: "binary" });
    const state = this.root.openDB<Uint8Array, [number, string]>({ name: "state", encoding: "binary" });
    const hasLegacyData = log.getKeysCount({ limit: 1 }) > 0 || state.getKeysCount({ limit: 1 }) > 0;
    if (!hasLegacyData) return;
    if (this.journal.isEmpty) {
      this.journal.begin();
      for (const { key, value } of state.getRange({})) this.journal.records.put(key[0], key[1], value);
      for (const { key, value } of log.getRange({})) this.journal.entries.put(key[0], key[1], value);
      this.journal.seal();
      this.journal.commitSync();
    }
    this.root.transactionSync(() => {
      log.clearSync();
      state.clearSync();
    });
  }

  private reportCommit(): void {
    const operations = this.committer.operationCount;
    const writes = operations - this.operationsReported;
    this.operationsReported = operations;
    this.onCommit?.({ durationMs: performance.now() - this.transactionStartedAtMs, writes });
  }

  private settleParticipants(settle: (participant: TransactionParticipant) => void): void {
    const participants = [...this.participants];
    this.participants.clear();
    for (const participant of participants) settle(participant);
  }
}
