/**
 * Simulated disk of one member: what is on it is durable. The harness holds a ready batch "in flight" until its
 * simulated write latency has passed; a crash before then loses it, exactly like unsynced writes.
 */
import type { Entry, HardState, PersistedState, RaftStorage, Snapshot } from "../../src/cluster/raft/types.js";

/** In-memory durable storage implementing the shared storage contract. */
export class SimulatedDisk implements RaftStorage {
  private log: Entry[] = [];
  /** Index of `log[0]`. */
  private offset = 1;
  private hard: HardState = { term: 0, votedFor: null, commitIndex: 0 };
  private latestSnapshot: Snapshot | null = null;

  /** Reads the durable state synchronously (the harness is single-threaded and deterministic). */
  loadSync(): PersistedState {
    return {
      hardState: this.hard,
      snapshot: this.latestSnapshot?.metadata ?? null,
      firstIndex: this.offset,
      lastIndex: this.lastIndex(),
    };
  }

  load(): Promise<PersistedState> {
    return Promise.resolve(this.loadSync());
  }

  /** Last durable index (the snapshot's when the log is empty). */
  lastIndex(): number {
    return this.offset + this.log.length - 1;
  }

  /** Index of the durable snapshot (0 when none). */
  snapshotIndex(): number {
    return this.latestSnapshot?.metadata.index ?? 0;
  }

  /** Term of the last durable entry. */
  lastTerm(): number {
    return this.term(this.lastIndex()) ?? 0;
  }

  /** The durable hard state. */
  hardState(): HardState {
    return this.hard;
  }

  appendSync(entries: readonly Entry[], hardState: HardState | null): void {
    const first = entries[0];
    if (first) {
      if (first.index < this.offset || first.index > this.lastIndex() + 1) {
        throw new Error(`disk: append at ${first.index} outside [${this.offset}, ${this.lastIndex() + 1}]`);
      }
      this.log.length = first.index - this.offset;
      this.log.push(...entries);
    }
    if (hardState) this.hard = hardState;
  }

  append(entries: readonly Entry[], hardState: HardState | null): Promise<void> {
    this.appendSync(entries, hardState);
    return Promise.resolve();
  }

  entries(fromIndex: number, toIndex: number): Entry[] {
    if (fromIndex < this.offset || toIndex > this.lastIndex() + 1 || fromIndex > toIndex) {
      throw new Error(`disk: entries [${fromIndex}, ${toIndex}) outside [${this.offset}, ${this.lastIndex() + 1})`);
    }
    return this.log.slice(fromIndex - this.offset, toIndex - this.offset);
  }

  term(index: number): number | null {
    if (this.latestSnapshot && index === this.latestSnapshot.metadata.index) return this.latestSnapshot.metadata.term;
    if (index === 0) return 0;
    if (index < this.offset || index > this.lastIndex()) return null;
    return this.log[index - this.offset]?.term ?? null;
  }

  /**
   * Stores a snapshot. When the log holds the snapshot's last entry only the covered entries go; otherwise the
   * whole log goes, because entries after a snapshot that does not match the log may conflict with it.
   */
  installSnapshotSync(snapshot: Snapshot): void {
    const { index, term } = snapshot.metadata;
    if (index <= this.snapshotIndex()) return;
    if (this.term(index) === term && index <= this.lastIndex()) {
      this.log = this.log.slice(index + 1 - this.offset);
    } else {
      this.log = [];
    }
    this.offset = index + 1;
    this.latestSnapshot = snapshot;
  }

  installSnapshot(snapshot: Snapshot): Promise<void> {
    this.installSnapshotSync(snapshot);
    return Promise.resolve();
  }

  compact(index: number): Promise<void> {
    if (index >= this.offset) {
      this.log = this.log.slice(index + 1 - this.offset);
      this.offset = index + 1;
    }
    return Promise.resolve();
  }

  snapshot(): Snapshot | null {
    return this.latestSnapshot;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
