/**
 * The core's view of its log: the durable part lives in storage (read through `StableLog`), entries appended but
 * not yet acknowledged as durable live here in memory ("unstable"), as does the metadata of a received snapshot not
 * yet installed (its data is in the storage, written chunk by chunk as it arrived).
 */
import type { Entry, SnapshotChunkRead, SnapshotMetadata } from "../types.js";

/**
 * Read-only view of durable storage the core needs. `RaftStorage` has exactly these read methods, so a driver can
 * hand its storage to the core directly.
 */
export interface StableLog {
  /**
   * Entries in [fromIndex, toIndex); must not be called for compacted indexes. With `maxBytes`, a storage may stop
   * early: it returns a prefix holding at least one entry, so that a caller sending a byte-bounded batch does not
   * make it read (and verify) entries it will not send.
   */
  entries(fromIndex: number, toIndex: number, maxBytes?: number): Entry[];
  /** Term of the entry (or the snapshot) at `index`; null when unknown. */
  term(index: number): number | null;
  /** Metadata of the latest durable snapshot (cheap: its data is not read). */
  snapshotMetadata(): SnapshotMetadata | null;
  /**
   * Up to `maxBytes` of the latest durable snapshot's data from byte `offset` on, with their CRC-32C; null when the
   * latest snapshot is no longer the one `metadata` describes. The core reads snapshots only this way, a chunk at a
   * time.
   */
  snapshotChunk(metadata: SnapshotMetadata, offset: number, maxBytes: number): SnapshotChunkRead | null;
}

/** Where the durable log stands when the core starts. */
export interface StableLogPosition {
  readonly snapshotIndex: number;
  readonly snapshotTerm: number;
  readonly lastIndex: number;
  readonly commitIndex: number;
}

/** In-memory unstable entries over a durable log; commit and apply positions. */
export class RaftLog {
  /** Index and term of the last entry covered by the durable snapshot (0 when none). */
  snapshotIndex: number;
  snapshotTerm: number;
  /** Last index of the durable log that the core still considers part of its log. */
  stableLastIndex: number;
  /** Entries not yet durable, starting at `unstableOffset`. */
  unstable: Entry[] = [];
  unstableOffset: number;
  /** A snapshot received from the leader, replacing the whole log, not yet installed durably. */
  pendingSnapshot: SnapshotMetadata | null = null;
  committed: number;
  applied: number;

  constructor(
    private readonly stable: StableLog,
    position: StableLogPosition,
  ) {
    this.snapshotIndex = position.snapshotIndex;
    this.snapshotTerm = position.snapshotTerm;
    this.stableLastIndex = position.lastIndex;
    this.unstableOffset = position.lastIndex + 1;
    this.committed = Math.max(position.commitIndex, position.snapshotIndex);
    this.applied = position.snapshotIndex;
    if (this.committed > this.stableLastIndex) {
      // The commit index is persisted together with the entries it covers, so a durable commit index beyond the
      // durable log means the storage lost acknowledged data.
      throw new Error(
        `log: durable commit index ${this.committed} is beyond the durable last index ${this.stableLastIndex}`,
      );
    }
  }

  /** First index still in the log (the one after the snapshot). */
  firstIndex(): number {
    return (this.pendingSnapshot?.index ?? this.snapshotIndex) + 1;
  }

  /** Last index of the log, durable or not. */
  lastIndex(): number {
    if (this.unstable.length > 0) return this.unstableOffset + this.unstable.length - 1;
    if (this.pendingSnapshot) return this.pendingSnapshot.index;
    return this.stableLastIndex;
  }

  /** Term of the last entry. */
  lastTerm(): number {
    const term = this.term(this.lastIndex());
    if (term === null) throw new Error(`log: term of last index ${this.lastIndex()} is unknown`);
    return term;
  }

  /** Term at `index`, or null when the index is compacted away or beyond the log. */
  term(index: number): number | null {
    if (index < 0 || index > this.lastIndex()) return null;
    if (this.pendingSnapshot) {
      const metadata = this.pendingSnapshot;
      if (index === metadata.index) return metadata.term;
      if (index < metadata.index) return null;
    }
    if (index >= this.unstableOffset) return this.unstable[index - this.unstableOffset]?.term ?? null;
    if (index === this.snapshotIndex) return this.snapshotTerm;
    if (index < this.snapshotIndex) return null;
    if (index === 0) return 0;
    const term = this.stable.term(index);
    if (term === null) throw new Error(`log: durable entry ${index} is missing from storage`);
    return term;
  }

  /** Whether the log holds an entry with this index and term. */
  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  /**
   * Entries in [fromIndex, toIndex), at least one when any, then stopping before `maxBytes` or `maxEntries` would be
   * exceeded.
   */
  entries(
    fromIndex: number,
    toIndex: number,
    maxEntries = Number.POSITIVE_INFINITY,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Entry[] {
    if (fromIndex < this.firstIndex()) {
      throw new Error(`log: entries from ${fromIndex} requested but the log starts at ${this.firstIndex()}`);
    }
    const end = Math.min(toIndex, this.lastIndex() + 1, fromIndex + Math.max(1, Math.min(maxEntries, 1_000_000)));
    if (fromIndex >= end) return [];
    const result: Entry[] = [];
    const stableEnd = Math.min(end, this.unstableOffset, this.stableLastIndex + 1);
    if (fromIndex < stableEnd) {
      const stable = this.stable.entries(fromIndex, stableEnd, Number.isFinite(maxBytes) ? maxBytes : undefined);
      if (stable.length === 0) throw new Error(`log: storage returned no entries in [${fromIndex}, ${stableEnd})`);
      result.push(...stable);
    }
    // A storage that stopped early at the byte budget leaves nothing for the unstable part to add contiguously.
    const stableComplete = fromIndex >= stableEnd || result.length === stableEnd - fromIndex;
    for (let index = Math.max(fromIndex, this.unstableOffset); stableComplete && index < end; index++) {
      const entry = this.unstable[index - this.unstableOffset];
      if (!entry) throw new Error(`log: unstable entry ${index} missing`);
      result.push(entry);
    }
    let bytes = 0;
    for (let position = 0; position < result.length; position++) {
      const entry = result[position];
      if (!entry) break;
      bytes += entry.data.byteLength;
      if (position > 0 && bytes > maxBytes) {
        result.length = position;
        break;
      }
    }
    for (let position = 0; position < result.length; position++) {
      if (result[position]?.index !== fromIndex + position) {
        throw new Error(`log: entries are not contiguous at ${fromIndex + position}`);
      }
    }
    return result;
  }

  /**
   * Appends entries, truncating any conflicting suffix first. Committed entries are never truncated (State Machine
   * Safety); entries must be contiguous with non-decreasing terms.
   */
  append(entries: readonly Entry[]): void {
    const first = entries[0];
    if (!first) return;
    if (first.index <= this.committed) {
      throw new Error(`log: append at ${first.index} would overwrite committed entries (commit ${this.committed})`);
    }
    if (first.index > this.lastIndex() + 1) {
      throw new Error(`log: append at ${first.index} leaves a gap after last index ${this.lastIndex()}`);
    }
    const previousTerm = this.term(first.index - 1);
    if (previousTerm === null || first.term < previousTerm) {
      throw new Error(`log: entry ${first.index} term ${first.term} is below the previous term ${previousTerm}`);
    }
    for (let position = 1; position < entries.length; position++) {
      const previous = entries[position - 1];
      const entry = entries[position];
      if (!previous || !entry || entry.index !== previous.index + 1 || entry.term < previous.term) {
        throw new Error(`log: appended entries are not contiguous with non-decreasing terms at ${entry?.index}`);
      }
    }
    if (first.index >= this.unstableOffset) {
      this.unstable.length = first.index - this.unstableOffset;
      this.unstable.push(...entries);
    } else {
      // The new entries replace part of the durable log: from now on the durable entries from `first.index` on are
      // no longer ours, until the driver overwrites them.
      this.unstableOffset = first.index;
      this.unstable = [...entries];
      this.stableLastIndex = Math.min(this.stableLastIndex, first.index - 1);
    }
  }

  /**
   * Returns the index of the first entry that is not already in the log (a different term or beyond the end), or
   * 0 when every entry is present.
   */
  findConflict(entries: readonly Entry[]): number {
    for (const entry of entries) {
      if (!this.matchTerm(entry.index, entry.term)) return entry.index;
    }
    return 0;
  }

  /**
   * Largest index ≤ `index` whose term is ≤ `term` (used by fast back-tracking: everything after it in `term` or
   * later terms is known not to match). Stops at the start of the log.
   */
  findConflictByTerm(index: number, term: number): { index: number; term: number } {
    let position = Math.min(index, this.lastIndex());
    while (position >= this.firstIndex() - 1) {
      const found = this.term(position);
      if (found === null) break;
      if (found <= term) return { index: position, term: found };
      position--;
    }
    return { index: position, term: 0 };
  }

  /** Raft's election restriction: is (lastIndex, lastTerm) at least as up to date as this log? */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myLastTerm = this.lastTerm();
    return lastTerm > myLastTerm || (lastTerm === myLastTerm && lastIndex >= this.lastIndex());
  }

  /** Advances the commit index; it never decreases and never passes the last index. */
  commitTo(index: number): boolean {
    if (index <= this.committed) return false;
    if (index > this.lastIndex()) {
      throw new Error(`log: commit index ${index} beyond last index ${this.lastIndex()}`);
    }
    this.committed = index;
    return true;
  }

  /** Marks the entries up to `index` durable, if the entry there still has `term` (it may have been replaced). */
  stableTo(index: number, term: number): void {
    if (index < this.unstableOffset) return;
    const entry = this.unstable[index - this.unstableOffset];
    if (!entry || entry.term !== term) return;
    this.unstable = this.unstable.slice(index + 1 - this.unstableOffset);
    this.unstableOffset = index + 1;
    this.stableLastIndex = index;
  }

  /** Replaces the whole log with a received snapshot (not yet installed durably). */
  restore(metadata: SnapshotMetadata): void {
    const index = metadata.index;
    if (index <= this.committed) throw new Error(`log: snapshot at ${index} is not beyond commit ${this.committed}`);
    this.pendingSnapshot = metadata;
    this.unstable = [];
    this.unstableOffset = index + 1;
    this.stableLastIndex = Math.min(this.stableLastIndex, index);
    this.committed = index;
  }

  /** The received snapshot is installed durably: the durable log now starts after it. */
  snapshotStable(metadata: SnapshotMetadata): void {
    if (this.pendingSnapshot !== metadata) return;
    this.pendingSnapshot = null;
    this.snapshotIndex = metadata.index;
    this.snapshotTerm = metadata.term;
    this.stableLastIndex = metadata.index;
    this.applied = Math.max(this.applied, metadata.index);
  }

  /** A local snapshot up to `index` is durable and storage dropped the entries it covers. */
  compacted(index: number, term: number): void {
    // A received snapshot replaced the log while this compaction was being stored; it supersedes the compaction.
    if (index <= this.snapshotIndex || this.pendingSnapshot) return;
    if (index > this.stableLastIndex)
      throw new Error(`log: compaction to ${index} beyond durable ${this.stableLastIndex}`);
    this.snapshotIndex = index;
    this.snapshotTerm = term;
  }

  /** Durable committed entries not yet handed out for applying. */
  nextEntriesToApply(maxEntries: number): Entry[] {
    if (this.pendingSnapshot) return [];
    const upTo = Math.min(this.committed, this.stableLastIndex);
    if (this.applied >= upTo) return [];
    return this.entries(this.applied + 1, upTo + 1, maxEntries);
  }

  /** The application has applied everything up to `index`. */
  appliedTo(index: number): void {
    if (index < this.applied) throw new Error(`log: applied index would go back from ${this.applied} to ${index}`);
    if (index > this.committed) throw new Error(`log: applied ${index} beyond commit ${this.committed}`);
    this.applied = index;
  }
}
