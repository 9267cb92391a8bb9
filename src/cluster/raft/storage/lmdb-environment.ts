/**
 * One LMDB environment holding the Raft storage of every partition replica of a broker, with one group commit.
 *
 * Each replica's records live in three shared databases under keys that start with the replica's scope (its
 * partition id), so any number of replicas fit in one environment. What sharing buys is the commit: a durable LMDB
 * commit costs a disk sync, and a broker hosting a leader and two followers would otherwise sync three environments
 * one after another for every round of writes. Here every write submitted by any replica while a commit is pending
 * joins that commit, so the broker pays one sync per round (measured with `npm run bench -- cluster`).
 *
 * A storage that writes joins the running transaction as a participant: once the transaction is durable every
 * participant publishes its staged view, and if it fails every participant drops it (and the environment refuses
 * all later writes, since memory may no longer match the disk).
 */
import { type Database, open, type RootDatabase } from "lmdb";
import { defaultGroupCommitOptions, type GroupCommitOptions, GroupCommitter } from "./group-commit.js";

/** Options of an environment. */
export interface LmdbEnvironmentOptions {
  /** Directory of the LMDB environment; created when missing. */
  readonly directory: string;
  /**
   * Commit on the event loop's thread (blocking it for one disk sync) instead of on LMDB's writer thread. A sync
   * on an SSD takes a few hundred microseconds, less than the two thread hand-offs of the writer thread cost when the
   * broker's cores are busy; on a slow disk the writer thread is the better choice.
   */
  readonly synchronousCommit?: boolean;
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
 * Log entries by [scope, index]. LMDB's default ordered-binary key encoding sorts arrays element by element and
 * numbers numerically (without the 2^32 limit of `uint32` keys), so a range read walks one scope's log in order.
 */
export type LogDatabase = Database<Uint8Array, [number, number]>;
/** Structured records (hard state, log start, snapshot records) by [scope, name]. */
export type StateDatabase = Database<Uint8Array, [number, string]>;
/** Snapshot chunks by [scope, slot, byte offset]. */
export type ChunkDatabase = Database<Uint8Array, [number, number, number]>;

/** The shared environment; see the module comment. */
export class LmdbEnvironment {
  readonly log: LogDatabase;
  readonly state: StateDatabase;
  readonly chunks: ChunkDatabase;
  private readonly root: RootDatabase<Uint8Array, string>;
  private readonly committer: GroupCommitter;
  private readonly synchronousCommit: boolean;
  private readonly participants = new Set<TransactionParticipant>();
  private inTransaction = false;
  private closed = false;
  private readonly onCommit: ((commit: CommitReport) => void) | undefined;
  private transactionStartedAtMs = 0;
  private operationsReported = 0;

  private constructor(options: LmdbEnvironmentOptions) {
    this.synchronousCommit = options.synchronousCommit ?? false;
    this.onCommit = options.onCommit;
    // Durability settings. `overlappingSync` (the default on Linux) resolves write promises when a transaction is
    // committed and visible but only later, separately, when it is flushed; with it off, the commit syncs the data
    // and meta pages before it returns (synchronous mode) or before LMDB's writer thread marks it committed, so a
    // settled commit means durable. `noSync` stays off for the same reason. `commitDelay: 0` adds no artificial
    // wait: coalescing comes from the group committer, which batches whatever arrives while a commit is pending.
    this.root = open<Uint8Array, string>({
      path: options.directory,
      maxDbs: 4,
      encoding: "binary",
      overlappingSync: false,
      noSync: false,
      commitDelay: 0,
      eventTurnBatching: true,
      cache: false,
    });
    this.log = this.root.openDB<Uint8Array, [number, number]>({ name: "log", encoding: "binary" });
    this.state = this.root.openDB<Uint8Array, [number, string]>({ name: "state", encoding: "binary" });
    this.chunks = this.root.openDB<Uint8Array, [number, number, number]>({
      name: "snapshotChunks",
      encoding: "binary",
    });
    this.committer = new GroupCommitter(
      (work) => this.runTransaction(work),
      options.groupCommit ?? defaultGroupCommitOptions,
      () => {
        this.settleParticipants((participant) => participant.commitStaged());
        this.reportCommit();
      },
      () => this.settleParticipants((participant) => participant.discardStaged()),
    );
  }

  /** Opens (creating when missing) the environment in `options.directory`. */
  static open(options: LmdbEnvironmentOptions): LmdbEnvironment {
    return new LmdbEnvironment(options);
  }

  /** Whether commits run on the event loop's thread. */
  get commitsSynchronously(): boolean {
    return this.synchronousCommit;
  }

  /** Number of durable transactions committed so far (for tests and benchmarks). */
  get transactionCount(): number {
    return this.committer.transactionCount;
  }

  /**
   * Queues `write` for the next transaction and resolves once that transaction is durable. `write` runs inside the
   * transaction and must check its preconditions before it writes anything (see `GroupCommitter.submit`).
   */
  submit(write: () => void): Promise<void> {
    if (this.closed) return Promise.reject(new Error("the storage environment is closed"));
    return this.committer.submit(write);
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

  /** Waits for pending writes, then closes the environment. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.committer.whenIdle();
    await this.root.close();
  }

  private runTransaction(work: () => void): Promise<void> {
    const transaction = (): void => {
      this.inTransaction = true;
      try {
        work();
      } finally {
        this.inTransaction = false;
      }
    };
    if (!this.synchronousCommit) {
      this.transactionStartedAtMs = performance.now();
      return this.root.transaction(transaction);
    }
    // The commit waits for the end of this turn of the event loop: every replica that writes in the same turn (one
    // socket read often carries messages for several partitions) joins it, and messages sent just before the write
    // leave first (the transport flushes its sockets on the next tick, before this runs).
    return new Promise((resolve, reject) => {
      setImmediate(() => {
        try {
          this.transactionStartedAtMs = performance.now();
          this.root.transactionSync(transaction);
          resolve();
        } catch (error) {
          reject(error);
        }
      });
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
