/**
 * The newest durable log entries of one member, kept in memory so the hot path never reads them back from disk.
 *
 * A leader reads every entry it wrote at least twice more (the term of the entry before each append it sends, and
 * the entries it applies once committed), and a follower reads every entry once more to apply it. Served from disk,
 * each read is a B-tree lookup, a checksum over the value and a copy of the payload; served from here it is an array
 * access. The cache holds a contiguous run of entries ending at the durable last index, bounded in bytes: the oldest
 * entries are dropped first, and a read outside the run falls back to the disk (a lagging follower catching up).
 *
 * The storage adapter changes the cache only after the transaction that made the same change durable, in the same
 * order, so the cache always equals a suffix of the durable log.
 */
import type { Entry } from "../types.js";

/** Bytes counted per entry on top of its payload (object, index, term), so tiny entries are still bounded. */
const ENTRY_OVERHEAD_BYTES = 64;

function sizeOf(entry: Entry): number {
  return entry.data.byteLength + ENTRY_OVERHEAD_BYTES;
}

/** A bounded, contiguous run of the newest durable entries. */
export class EntryCache {
  /** Entries from `entries[start]` on are live; the dead prefix is dropped in bulk to keep removal amortized O(1). */
  private entries: Entry[] = [];
  private start = 0;
  private bytes = 0;

  constructor(private readonly maxBytes: number) {
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) {
      throw new Error(`invariant violated: the entry cache bound must be a non-negative integer, got ${maxBytes}`);
    }
  }

  /** Number of entries held. */
  get size(): number {
    return this.entries.length - this.start;
  }

  /** Bytes held, as the bound counts them. */
  get sizeBytes(): number {
    return this.bytes;
  }

  /** Index of the first entry held, or null when empty. */
  firstIndex(): number | null {
    return this.entries[this.start]?.index ?? null;
  }

  /** The entry at `index`, or undefined when the cache does not hold it. */
  get(index: number): Entry | undefined {
    const first = this.firstIndex();
    if (first === null || index < first) return undefined;
    return this.entries[this.start + (index - first)];
  }

  /** Entries in [fromIndex, toIndex) when the cache holds all of them, otherwise null. */
  range(fromIndex: number, toIndex: number): Entry[] | null {
    const first = this.firstIndex();
    if (first === null || fromIndex < first || toIndex - first > this.size) return null;
    return this.entries.slice(this.start + (fromIndex - first), this.start + (toIndex - first));
  }

  /**
   * Records entries that were durably written from `entries[0].index` on, replacing whatever the cache held from
   * that index on. When they do not continue the cached run, the run restarts with them.
   */
  replaceFrom(entries: readonly Entry[]): void {
    const firstNew = entries[0];
    if (firstNew === undefined) return;
    const first = this.firstIndex();
    if (first === null || firstNew.index < first || firstNew.index > first + this.size) {
      this.clear();
    } else {
      this.truncateFrom(firstNew.index);
    }
    for (const entry of entries) {
      this.entries.push(entry);
      this.bytes += sizeOf(entry);
    }
    this.trimToBound();
  }

  /** Drops entries up to and including `index` (a snapshot covers them). */
  dropThrough(index: number): void {
    const first = this.firstIndex();
    if (first === null || index < first) return;
    const count = Math.min(this.size, index - first + 1);
    this.dropOldest(count);
  }

  /** Drops everything. */
  clear(): void {
    this.entries = [];
    this.start = 0;
    this.bytes = 0;
  }

  private truncateFrom(index: number): void {
    const first = this.firstIndex();
    if (first === null) return;
    const keep = this.start + Math.max(0, index - first);
    for (let position = keep; position < this.entries.length; position += 1) {
      this.bytes -= sizeOf(this.entries[position] as Entry);
    }
    this.entries.length = keep;
  }

  private trimToBound(): void {
    let count = 0;
    let bytes = this.bytes;
    while (bytes > this.maxBytes && count < this.size) {
      bytes -= sizeOf(this.entries[this.start + count] as Entry);
      count += 1;
    }
    this.dropOldest(count);
  }

  private dropOldest(count: number): void {
    for (let position = this.start; position < this.start + count; position += 1) {
      this.bytes -= sizeOf(this.entries[position] as Entry);
    }
    this.start += count;
    if (this.start === this.entries.length) {
      this.entries = [];
      this.start = 0;
    } else if (this.start > 1024 && this.start * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.start);
      this.start = 0;
    }
  }
}
