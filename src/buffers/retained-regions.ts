/**
 * Memory for received bodies that their receiver keeps for long (a joiner's snapshot chunks, whose messages' entries
 * stay where they arrived), carved one after another from a few large regions.
 *
 * Why: every new buffer is memory outside V8's heap, and V8 starts a collection of the whole heap for about every
 * 64 MB such memory grows. A joiner keeps the whole state it receives, so with a buffer per chunk it ran a collection
 * per 64 MB received (16 per GiB, each marking the whole heap on V8's helper threads, on cores the transfer needs).
 * A region is one allocation, so V8 sees the growth once per region; its pages are touched only as bodies are carved.
 *
 * The price is that a region lives as long as any view of it. Bodies that nobody keeps become garbage as usual, but a
 * body that is kept (`retain`) would hold its whole region. So holders say which part of a region they keep, and
 * once a region is closed (no body fits in its rest any more) and its holders keep less than half of what it handed
 * out, every holder is asked to move what it keeps elsewhere (`RegionHolder.evict`); the region is then garbage.
 * Regions therefore hold at most twice the bytes their holders keep, plus the region being filled, which this
 * allocator holds only weakly: once nothing keeps a view of it, it is garbage too.
 *
 * The rule is looked at again whenever it may have become true: a closed region whose holder releases a part, or
 * retains one (a body decoded after the region closed), and a region whose holder was collected without releasing
 * (an engine of a deleted replica, or of a restore that was abandoned), which a weak reference and a finalization
 * registry tell. The move itself happens in a later turn (`setImmediate`), never inside the call that made the rule
 * true: that may be a socket's read, and a holder may be in the middle of changing its own slabs. A move copies at
 * most half a region in one turn.
 */

/** Who keeps parts of regions: asked, when a region is mostly unused, to move what it keeps out of it. */
export interface RegionHolder {
  /** Moves everything this holder keeps in `region` elsewhere, releasing each of those retentions. */
  evict(region: RetainedRegion): void;
}

/** Options of RetainedRegions. */
export interface RetainedRegionsOptions {
  /** Size of each region; a body larger than an eighth of it gets an allocation of its own. */
  readonly regionBytes: number;
}

/** What `RetainedRegions.statistics` reports. */
export interface RetainedRegionStatistics {
  /** Regions allocated so far. */
  readonly regionsAllocated: number;
  /** Bodies carved from regions so far. */
  readonly bodiesCarved: number;
  /** Bodies too large for a region's share, allocated on their own. */
  readonly bodiesAllocatedApart: number;
  /** Regions whose holders were asked to move out. */
  readonly regionsEvicted: number;
}

/** Bodies larger than this share of a region get an allocation of their own. */
const LARGEST_CARVED_SHARE = 1 / 8;

/** The region each carved body lies in, by the body's memory. */
const regionsByMemory = new WeakMap<ArrayBufferLike, RetainedRegion>();

/** Regions to look at again once a holder of theirs has been collected without releasing what it kept. */
const collectedHolders = new FinalizationRegistry<WeakRef<RetainedRegion>>((region) => region.deref()?.recheck());

/** The region `piece` was carved from, or undefined when it was not carved from one. */
export function regionOf(piece: Uint8Array): RetainedRegion | undefined {
  return regionsByMemory.get(piece.buffer);
}

/** Hands out memory for kept bodies from regions; see the module comment. */
export class RetainedRegions {
  /** The region bodies are carved from now, held weakly: it is garbage once no one keeps a view of it. */
  private open: WeakRef<RetainedRegion> | null = null;
  private regionsAllocated = 0;
  private bodiesCarved = 0;
  private bodiesAllocatedApart = 0;
  /** Shared with the regions, which count their evictions into it. */
  private readonly evictions = { count: 0 };

  constructor(private readonly options: RetainedRegionsOptions) {
    if (!Number.isSafeInteger(options.regionBytes) || options.regionBytes < 1) {
      throw new Error(`retained regions: regionBytes must be a positive integer, got ${options.regionBytes}`);
    }
  }

  /**
   * Memory for a body of `bytes`, not yet touched: the next part of the open region, or an allocation of its own for
   * a body larger than an eighth of a region. Nothing else is ever handed this memory.
   */
  allocate(bytes: number): Buffer {
    if (!Number.isSafeInteger(bytes) || bytes < 1) throw new Error(`retained regions: cannot allocate ${bytes} bytes`);
    if (bytes > LARGEST_CARVED_SHARE * this.options.regionBytes) {
      this.bodiesAllocatedApart += 1;
      return Buffer.allocUnsafeSlow(bytes);
    }
    let region = this.open?.deref();
    if (region === undefined || region.freeBytes < bytes) {
      region?.close();
      // Not zeroed: each body is touched when it is carved or read into.
      region = new RetainedRegion(Buffer.allocUnsafeSlow(this.options.regionBytes).buffer, this.evictions);
      this.open = new WeakRef(region);
      this.regionsAllocated += 1;
    }
    this.bodiesCarved += 1;
    return region.carve(bytes);
  }

  /** Counters since this allocator was made. */
  statistics(): RetainedRegionStatistics {
    return {
      regionsAllocated: this.regionsAllocated,
      bodiesCarved: this.bodiesCarved,
      bodiesAllocatedApart: this.bodiesAllocatedApart,
      regionsEvicted: this.evictions.count,
    };
  }
}

/** What one holder keeps of a region. */
interface Retention {
  readonly holder: WeakRef<RegionHolder>;
  readonly bytes: number;
}

/** One region: its memory, how much of it was handed out, and who keeps which bytes of it. */
export class RetainedRegion {
  private handedOutBytesValue = 0;
  private closed = false;
  private evicting = false;
  private recheckScheduled = false;
  private readonly retentions = new Map<object, Retention>();

  constructor(
    /** The region's memory, which every body carved from it is a view of. */
    readonly memory: ArrayBuffer,
    private readonly evictions: { count: number },
  ) {
    regionsByMemory.set(memory, this);
  }

  /** Bytes not handed out yet. */
  get freeBytes(): number {
    return this.memory.byteLength - this.handedOutBytesValue;
  }

  /** Bytes handed out, kept or not. */
  get handedOutBytes(): number {
    return this.handedOutBytesValue;
  }

  /** Bytes that holders not yet collected keep. */
  get retainedBytes(): number {
    let bytes = 0;
    // Bounded by the region's retentions, at most one per body carved.
    for (const retention of this.retentions.values()) {
      if (retention.holder.deref() !== undefined) bytes += retention.bytes;
    }
    return bytes;
  }

  /** Whether bodies are no longer carved from this region. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** The next `bytes` of the region. */
  carve(bytes: number): Buffer {
    if (this.closed || bytes > this.freeBytes) {
      throw new Error("invariant violated: a body was carved from a closed or full region");
    }
    const body = Buffer.from(this.memory, this.handedOutBytesValue, bytes);
    this.handedOutBytesValue += bytes;
    return body;
  }

  /** Stops carving from the region; from now on it may be evicted. */
  close(): void {
    this.closed = true;
    this.recheck();
  }

  /**
   * Notes that `holder` keeps `piece`, which lies in this region, until it calls `release` with the returned key; a
   * holder may keep several pieces, each under its own key.
   */
  retain(piece: Uint8Array, holder: RegionHolder): object {
    if (piece.buffer !== this.memory) throw new Error("invariant violated: a retained piece lies in another region");
    if (this.evicting) throw new Error("invariant violated: a piece was retained while its region was evicted");
    const key = {};
    this.retentions.set(key, { holder: new WeakRef(holder), bytes: piece.byteLength });
    collectedHolders.register(holder, new WeakRef(this));
    // A body decoded after the region closed: the rule may already be true.
    this.recheck();
    return key;
  }

  /** Ends the retention `key`; a region closed and mostly unused then asks its other holders to move out. */
  release(key: object): void {
    if (!this.retentions.delete(key)) throw new Error("invariant violated: a region released what it did not retain");
    this.recheck();
  }

  /** Looks at the eviction rule again in a later turn, when the region is closed (see the module comment). */
  recheck(): void {
    if (!this.closed || this.evicting || this.recheckScheduled) return;
    this.recheckScheduled = true;
    setImmediate(() => {
      this.recheckScheduled = false;
      this.evictIfMostlyUnused();
    });
  }

  /**
   * Asks every holder to move out when the region is closed and its holders keep less than half of what it handed
   * out. Runs in a turn of its own (`recheck`); tests may call it directly.
   */
  evictIfMostlyUnused(): void {
    if (!this.closed || this.evicting) return;
    // Retentions of collected holders are dropped here: they keep nothing.
    for (const [key, retention] of this.retentions) {
      if (retention.holder.deref() === undefined) this.retentions.delete(key);
    }
    if (this.retentions.size === 0 || 2 * this.retainedBytes >= this.handedOutBytesValue) return;
    this.evicting = true;
    this.evictions.count += 1;
    try {
      // Each holder releases its retentions as it moves out; bounded by the holders counted above.
      const holders = new Set<RegionHolder>();
      for (const retention of this.retentions.values()) {
        const holder = retention.holder.deref();
        if (holder !== undefined) holders.add(holder);
      }
      for (const holder of holders) holder.evict(this);
      if (this.retentions.size !== 0) {
        throw new Error("invariant violated: a region's holders still keep part of it after moving out");
      }
    } finally {
      this.evicting = false;
    }
  }
}
