/** What a diff link serves: the diff's bytes, or the refusal of two contents that differ too much. */
export type CachedDiff = { kind: "patch"; body: Buffer } | { kind: "tooDifferent"; changedLinesAtLeast: number | null };

/** Memory an entry is counted for beyond its body: its key, the entry objects and the map's slot (an estimate). */
const entryOverheadBytes = 256;

/** What the cache holds and how it has served, for tests and metrics. */
export interface DiffCacheStatistics {
  entries: number;
  bytes: number;
  hits: number;
  misses: number;
}

/**
 * Computed milestone diffs, kept until the bytes they hold exceed `maximumBytes`; the least recently used go first.
 * A milestone's content never changes, so a diff stays right for as long as it is kept: its key names both
 * milestones and their names (the names appear in the patch's header lines, and a milestone can be renamed).
 * Refusals are kept too, so a link to two contents that differ too much costs the work of refusing only once.
 */
export class DiffCache {
  /** Entries in order of use, least recent first (a `Map` iterates in insertion order). */
  private readonly entries = new Map<string, { diff: CachedDiff; bytes: number }>();
  private heldBytes = 0;
  private hits = 0;
  private misses = 0;

  /** A cache holding diffs of at most `maximumBytes` in all; 0 keeps nothing. */
  constructor(private readonly maximumBytes: number) {}

  /** The key of the diff from one milestone to another, as their ids and names are now. */
  static key(
    organizationId: string,
    from: { id: string; name: string },
    to: { id: string; name: string },
    noun: string,
  ): string {
    return JSON.stringify([organizationId, from.id, from.name, to.id, to.name, noun]);
  }

  /** The diff kept under `key`, which becomes the most recently used; undefined when none is kept. */
  get(key: string): CachedDiff | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) {
      this.misses += 1;
      return undefined;
    }
    this.hits += 1;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.diff;
  }

  /** Keeps `diff` under `key`, dropping the least recently used diffs beyond the limit; a diff larger than it is not kept. */
  set(key: string, diff: CachedDiff): void {
    const bytes = (diff.kind === "patch" ? diff.body.byteLength : 0) + 2 * key.length + entryOverheadBytes;
    if (bytes > this.maximumBytes) return;
    this.remove(key);
    this.entries.set(key, { diff, bytes });
    this.heldBytes += bytes;
    for (const [oldestKey] of this.entries) {
      if (this.heldBytes <= this.maximumBytes) break;
      this.remove(oldestKey);
    }
  }

  /** What the cache holds and how it has served. */
  statistics(): DiffCacheStatistics {
    return { entries: this.entries.size, bytes: this.heldBytes, hits: this.hits, misses: this.misses };
  }

  private remove(key: string): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.entries.delete(key);
    this.heldBytes -= entry.bytes;
  }
}
