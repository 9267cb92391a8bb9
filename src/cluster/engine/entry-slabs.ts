/**
 * Memory for the snapshot entries of restored messages: a restore copies the entries into shared slabs instead of one
 * allocation each, and a slab that is mostly free gives its survivors a smaller slab of their own.
 *
 * Why: a restore copies every buffered message out of the snapshot it reads. Copied one allocation per message, a GiB
 * of messages of a few KiB was hundreds of thousands of buffers outside V8's heap, allocated in a burst; V8 answers
 * such growth of external memory with full collections of its heap, and those took about 40 % of a restore's time.
 * Slabs make that one allocation per few hundred messages (measured in DEVELOPERS.md, "Snapshots").
 *
 * A restore's first slab is small (`FIRST_SLAB_BYTES`) and each next one twice the size of the one before, up to
 * `LARGEST_SLAB_BYTES`; entries larger than a quarter of the largest slab are copied on their own. An entry that does
 * not fit in the rest of the slab being filled starts the next slab only when that rest is at most an eighth of the
 * slab; otherwise the entry is copied on its own and the slab goes on filling. When the restore ends, the slab it
 * filled last is cut to the part it handed out (`trim`). So every slab hands out at least 7/8 of its memory, and an
 * engine restored with a few messages (a broker may host many partitions) holds about their size in slabs, not more.
 *
 * The price of sharing is that a slab lives as long as any message in it. A message that outlives its neighbours
 * (they expired, or were relocated away) would hold the whole slab, so each slab counts the bytes of its messages
 * still held (`release`), and once they are less than half of what it handed out, the survivors are copied together
 * into a new slab of exactly their size and the old one is dropped. Slabs therefore hold at most 16/7 of the bytes of
 * their live entries. Moving survivors costs one allocation, and fewer bytes than were released from the slab since
 * it was made: at most a copy per released byte.
 *
 * A piece of the snapshot that its caller gives away (a joiner's received chunk: memory of its own that nothing
 * writes again) can itself be a slab: its entries are handed out as views of it (`place`) instead of copies. Copying
 * them was most of a restore's time, for the memory a copy first touches, and a received chunk is nearly all entries
 * of whole messages. The piece is kept only if it is nearly all of its memory and, once decoded (`endPiece`), its
 * entries cover at least 7/8 of that memory, like any slab; otherwise they are copied as usual. So the bound above
 * holds for kept pieces too, and they are released and emptied the same way.
 *
 * A received chunk may lie in a region shared with other chunks (`src/buffers/retained-regions.ts`: one allocation
 * for many chunks, so that V8 does not collect its whole heap for every 64 MB a joiner receives). Such a piece is a
 * slab over its own range of the region, found by its offset, and the slabs tell the region which bytes they keep:
 * once the region is mostly unused, it asks them to move their survivors out (`evict`), as a slab does when it is
 * mostly free. A closed region holds at most twice the bytes of its kept pieces, each of which is at least 7/16 held,
 * so at most 32/7 of the bytes of the entries in it (slabs: 16/7); the region being filled is held only by views.
 */
import { type RegionHolder, type RetainedRegion, regionOf } from "../../buffers/retained-regions.js";
import type { StoredMessage } from "./stored-message.js";

/** Size of a restore's first slab. */
export const FIRST_SLAB_BYTES = 64 * 1024;
/** Size the slabs of a restore grow to: a restore of a GiB of state makes about a thousand slabs. */
export const LARGEST_SLAB_BYTES = 1024 * 1024;
/** Entries larger than this get an allocation of their own. */
const LARGEST_SHARED_ENTRY_BYTES = LARGEST_SLAB_BYTES / 4;
/** A slab whose unused rest is at most this share of it is left for the next one when an entry does not fit. */
const ABANDONED_REST_SHARE = 1 / 8;

/**
 * One slab: its memory, how much of it was handed out and is still held, the counters of its messages, whether it
 * is a piece of the snapshot kept as it was given (`place`) rather than memory the slabs allocated, and for a piece
 * lying in a region, that region and the key of the slab's retention there.
 */
interface Slab {
  readonly memory: Uint8Array;
  usedBytes: number;
  liveBytes: number;
  readonly counters: number[];
  readonly kept: boolean;
  readonly region: RetainedRegion | null;
  retention: object | null;
}

/** The piece being decoded that was given away (`place`), and the slab it becomes, or null when it cannot be kept. */
interface GivenPiece {
  readonly piece: Uint8Array;
  readonly slab: Slab | null;
}

/** What `EntrySlabs.statistics` reports. */
export interface SlabStatistics {
  readonly slabCount: number;
  readonly slabBytes: number;
  /** Bytes the slabs handed out, to entries held or released. */
  readonly handedOutBytes: number;
  /** Bytes of the entries in slabs that the engine still holds. */
  readonly liveBytes: number;
  /** Slabs that are pieces of the snapshot kept as they were given, of `slabCount`. */
  readonly keptPieceCount: number;
  /** Kept pieces that lie in a region shared with other pieces, of `keptPieceCount`. */
  readonly regionPieceCount: number;
}

/** Which message holds a counter now (buffered or taken out for relocation), for moving survivors out. */
export type MessageLookup = (counter: number) => StoredMessage | undefined;

/** Makes `entry`, a copy of the message's entry elsewhere, the message's entry (`moveEntry` of `stored-message.ts`). */
export type EntryMover = (message: StoredMessage, entry: Uint8Array) => void;

/** Whether `entry` lies within `slab`'s memory. */
function liesIn(entry: Uint8Array, slab: Slab): boolean {
  const memory = slab.memory;
  return (
    entry.buffer === memory.buffer &&
    entry.byteOffset >= memory.byteOffset &&
    entry.byteOffset + entry.byteLength <= memory.byteOffset + memory.byteLength
  );
}

/** The slabs of one engine's restored entries (see the module comment). */
export class EntrySlabs implements RegionHolder {
  /** Slabs that are all of their memory's buffer, by that buffer: an entry finds its slab through `entry.buffer`. */
  private readonly slabs = new Map<ArrayBufferLike, Slab>();
  /** Slabs over parts of a region, by the region's memory, in the order of their offsets. */
  private readonly regionSlabs = new Map<ArrayBufferLike, Slab[]>();
  /** The slab being filled by the restore under way; null before its first entry. */
  private filling: Slab | null = null;
  /** Size of the latest slab made (half the first slab's before any). */
  private lastSlabBytes = FIRST_SLAB_BYTES / 2;
  /** Whether the restore ended (`trim`): no entry is copied in afterwards. */
  private restoreEnded = false;
  /** The given piece being decoded, from the first entry that lies in it until `endPiece`. */
  private given: GivenPiece | null = null;

  /**
   * Slabs for one engine: `lookup` must find every message the engine holds by its counter, buffered or taken out for
   * relocation, and counters must never be reused; `moveEntry` repoints a message at a copy of its entry.
   */
  constructor(
    private readonly lookup: MessageLookup,
    private readonly moveEntry: EntryMover,
  ) {}

  /**
   * The memory for `bytes`, the entry of message `counter`: a view of the same bytes when they lie in `givenPiece`
   * and that piece can be kept (see the module comment), else a copy (`copy`). `givenPiece` is the piece of the
   * snapshot being decoded if its caller gave it away, or null; it must never be written afterwards. Once the piece
   * is decoded, `endPiece` decides whether it is kept.
   */
  place(bytes: Uint8Array, counter: number, givenPiece: Uint8Array | null): Uint8Array {
    if (givenPiece === null || bytes.buffer !== givenPiece.buffer) return this.copy(bytes, counter);
    if (this.restoreEnded) {
      throw new Error("invariant violated: an entry was placed in slabs after the restore ended");
    }
    let given = this.given;
    if (given === null) {
      given = { piece: givenPiece, slab: this.keepable(givenPiece) ? this.keptSlab(givenPiece) : null };
      this.given = given;
    } else if (given.piece.buffer !== givenPiece.buffer || given.piece.byteOffset !== givenPiece.byteOffset) {
      throw new Error("invariant violated: an entry of another given piece was placed before the last one ended");
    }
    const slab = given.slab;
    if (slab === null) return this.copy(bytes, counter);
    if (!liesIn(bytes, slab)) throw new Error("invariant violated: a placed entry does not lie in its given piece");
    slab.usedBytes += bytes.byteLength;
    slab.liveBytes += bytes.byteLength;
    slab.counters.push(counter);
    // A view of its own: the caller's view may carry what a decoder cached on it.
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /**
   * Ends the given piece whose entries `place` handed out as views: it becomes a slab when they cover at least 7/8 of
   * its memory; otherwise each is moved to a copy, as `place` would have made, and the piece is not held. Copies at
   * most the piece's entries.
   */
  endPiece(): void {
    const given = this.given;
    this.given = null;
    const slab = given?.slab ?? null;
    if (slab === null || slab.usedBytes === 0) return;
    if (slab.usedBytes >= (1 - ABANDONED_REST_SHARE) * slab.memory.byteLength) {
      if (slab.region !== null) {
        // Even a single entry is tracked here: the region must be able to ask for it to move out.
        this.addSlab(slab);
        slab.retention = slab.region.retain(slab.memory, this);
        return;
      }
      // An entry that is all of the piece simply owns it, as an entry copied on its own owns its copy.
      const ownedWhole = slab.counters.length === 1 && slab.usedBytes === slab.memory.byteLength;
      if (!ownedWhole) this.addSlab(slab);
      return;
    }
    // Bounded by the piece's messages, each looked at once.
    for (const counter of slab.counters) {
      const message = this.lookup(counter);
      // A message makes a new view of its entry at each read: one read per message.
      const entry = message?.entry;
      if (message === undefined || entry === undefined || !liesIn(entry, slab)) {
        throw new Error(`invariant violated: message ${counter}, placed in a given piece, is not held there`);
      }
      this.moveEntry(message, this.copy(entry, counter));
    }
  }

  /**
   * Whether a given piece's entries may stay where they lie: a piece carved from a region that no slab covers yet, or
   * a piece that is nearly all its memory and not a slab yet.
   */
  private keepable(piece: Uint8Array): boolean {
    // Its first byte, not an empty view: that would lie at the end of the slab just before it too.
    if (regionOf(piece) !== undefined)
      return piece.byteLength > 0 && this.slabHolding(piece.subarray(0, 1)) === undefined;
    return piece.byteLength >= (1 - ABANDONED_REST_SHARE) * piece.buffer.byteLength && !this.slabs.has(piece.buffer);
  }

  /**
   * An empty slab over `piece`, which it holds while any entry placed in it is held: over the piece's range of its
   * region when it was carved from one, else over all the piece's memory.
   */
  private keptSlab(piece: Uint8Array): Slab {
    const region = regionOf(piece) ?? null;
    const memory =
      region === null ? new Uint8Array(piece.buffer) : new Uint8Array(piece.buffer, piece.byteOffset, piece.byteLength);
    return { memory, usedBytes: 0, liveBytes: 0, counters: [], kept: true, region, retention: null };
  }

  /** A copy of `bytes`, the entry of message `counter`, in a shared slab (or on its own; see the module comment). */
  copy(bytes: Uint8Array, counter: number): Uint8Array {
    if (this.restoreEnded)
      throw new Error("invariant violated: an entry was copied into slabs after the restore ended");
    if (bytes.byteLength > LARGEST_SHARED_ENTRY_BYTES) return new Uint8Array(bytes);
    let slab = this.filling;
    if (slab === null || slab.usedBytes + bytes.byteLength > slab.memory.byteLength) {
      if (slab !== null && slab.memory.byteLength - slab.usedBytes > ABANDONED_REST_SHARE * slab.memory.byteLength) {
        return new Uint8Array(bytes);
      }
      // At least four entries of this size fit in the new slab; bounded, as the entry is at most a quarter of the
      // largest slab.
      let slabBytes = Math.min(LARGEST_SLAB_BYTES, 2 * this.lastSlabBytes);
      while (slabBytes < 4 * bytes.byteLength) slabBytes *= 2;
      this.lastSlabBytes = slabBytes;
      slab = ownSlab(new Uint8Array(slabBytes), 0, []);
      this.addSlab(slab);
      this.filling = slab;
    }
    const view = slab.memory.subarray(slab.usedBytes, slab.usedBytes + bytes.byteLength);
    view.set(bytes);
    slab.usedBytes += bytes.byteLength;
    slab.liveBytes += bytes.byteLength;
    slab.counters.push(counter);
    return view;
  }

  /**
   * Notes that the engine no longer holds the message whose entry is `entry` (it expired or was relocated away);
   * once less than half of its slab is held, the survivors move to a slab of their own size.
   */
  release(entry: Uint8Array): void {
    const slab = this.slabHolding(entry);
    if (slab === undefined) return;
    if (entry.byteLength > slab.liveBytes) {
      throw new Error("invariant violated: a slab of restored entries released more bytes than it holds");
    }
    slab.liveBytes -= entry.byteLength;
    if (slab.liveBytes * 2 >= slab.usedBytes) return;
    this.moveSurvivors(slab);
  }

  /** Moves every entry this engine keeps in `region` to memory of its own (the region is mostly unused). */
  evict(region: RetainedRegion): void {
    const slabs = this.regionSlabs.get(region.memory);
    if (slabs === undefined) return;
    // A copy of the list: moving a slab's survivors removes it. Bounded by the slabs over the region.
    for (const slab of [...slabs]) this.moveSurvivors(slab);
  }

  /**
   * Drops `slab` and copies the entries still held in it together into a new slab of exactly their size (a single
   * survivor simply owns its copy); a slab over part of a region then releases its retention there.
   */
  private moveSurvivors(slab: Slab): void {
    this.removeSlab(slab);
    if (this.filling === slab) this.filling = null;
    if (slab.liveBytes > 0) {
      const survivors: StoredMessage[] = [];
      // Bounded by the slab's messages, each looked at once.
      for (const counter of slab.counters) {
        const message = this.lookup(counter);
        if (message !== undefined && liesIn(message.entry, slab)) survivors.push(message);
      }
      const compacted = ownSlab(
        new Uint8Array(slab.liveBytes),
        slab.liveBytes,
        survivors.map((message) => message.counter),
      );
      let offset = 0;
      for (const message of survivors) {
        const entry = message.entry;
        const moved = compacted.memory.subarray(offset, offset + entry.byteLength);
        moved.set(entry);
        this.moveEntry(message, moved);
        offset += entry.byteLength;
      }
      if (offset !== slab.liveBytes) {
        throw new Error(
          `invariant violated: a slab counted ${slab.liveBytes} live bytes but its survivors hold ${offset}`,
        );
      }
      // A single survivor simply owns its memory: there is nothing left to share or to count.
      if (survivors.length > 1) this.addSlab(compacted);
    }
    // Last: releasing may make the region ask this engine to move its other slabs there out.
    const retention = slab.retention;
    slab.retention = null;
    if (slab.region !== null && retention !== null) slab.region.release(retention);
  }

  /**
   * Ends the restore: the slab it was filling, when more than an eighth of it is unused, is replaced by a copy of the
   * part it handed out, each of its entries moved to the same place in the copy. Copies at most one slab.
   */
  trim(): void {
    if (this.given !== null) throw new Error("invariant violated: the restore ended inside a given piece");
    this.restoreEnded = true;
    const slab = this.filling;
    this.filling = null;
    if (slab === null) return;
    if (slab.memory.byteLength - slab.usedBytes <= ABANDONED_REST_SHARE * slab.memory.byteLength) return;
    const memory = slab.memory.slice(0, slab.usedBytes);
    // Bounded by the slab's messages, each looked at once.
    for (const counter of slab.counters) {
      const message = this.lookup(counter);
      const entry = message?.entry;
      if (message === undefined || entry === undefined || !liesIn(entry, slab)) continue;
      this.moveEntry(message, memory.subarray(entry.byteOffset, entry.byteOffset + entry.byteLength));
    }
    this.removeSlab(slab);
    if (slab.counters.length > 1) this.addSlab({ ...slab, memory });
  }

  /** The slabs held: their count and size, the bytes they handed out, and of those the bytes still held. */
  statistics(): SlabStatistics {
    let slabCount = 0;
    let slabBytes = 0;
    let handedOutBytes = 0;
    let liveBytes = 0;
    let keptPieceCount = 0;
    let regionPieceCount = 0;
    for (const slab of this.allSlabs()) {
      slabCount += 1;
      slabBytes += slab.memory.byteLength;
      handedOutBytes += slab.usedBytes;
      liveBytes += slab.liveBytes;
      if (slab.kept) keptPieceCount += 1;
      if (slab.region !== null) regionPieceCount += 1;
    }
    return { slabCount, slabBytes, handedOutBytes, liveBytes, keptPieceCount, regionPieceCount };
  }

  private *allSlabs(): Iterable<Slab> {
    yield* this.slabs.values();
    for (const slabs of this.regionSlabs.values()) yield* slabs;
  }

  /** The slab whose memory `entry` lies in, if any. */
  private slabHolding(entry: Uint8Array): Slab | undefined {
    const own = this.slabs.get(entry.buffer);
    if (own !== undefined) return own;
    const slabs = this.regionSlabs.get(entry.buffer);
    if (slabs === undefined) return undefined;
    // The last slab starting at or before the entry; bounded by log2 of the slabs over the region.
    let low = 0;
    let high = slabs.length - 1;
    let found: Slab | undefined;
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const slab = slabs[middle] as Slab;
      if (slab.memory.byteOffset <= entry.byteOffset) {
        found = slab;
        low = middle + 1;
      } else {
        high = middle - 1;
      }
    }
    return found !== undefined && liesIn(entry, found) ? found : undefined;
  }

  private addSlab(slab: Slab): void {
    if (slab.region === null) {
      this.slabs.set(slab.memory.buffer, slab);
      return;
    }
    let slabs = this.regionSlabs.get(slab.memory.buffer);
    if (slabs === undefined) {
      slabs = [];
      this.regionSlabs.set(slab.memory.buffer, slabs);
    }
    // Pieces usually arrive in the order of their offsets; bounded by the slabs over the region.
    let at = slabs.length;
    while (at > 0 && (slabs[at - 1] as Slab).memory.byteOffset > slab.memory.byteOffset) at -= 1;
    const before = slabs[at - 1];
    const after = slabs[at];
    const end = slab.memory.byteOffset + slab.memory.byteLength;
    if (
      (before !== undefined && before.memory.byteOffset + before.memory.byteLength > slab.memory.byteOffset) ||
      (after !== undefined && after.memory.byteOffset < end)
    ) {
      throw new Error("invariant violated: two slabs over the same bytes of a region");
    }
    slabs.splice(at, 0, slab);
  }

  private removeSlab(slab: Slab): void {
    if (slab.region === null) {
      if (this.slabs.get(slab.memory.buffer) === slab) this.slabs.delete(slab.memory.buffer);
      return;
    }
    const slabs = this.regionSlabs.get(slab.memory.buffer);
    const at = slabs?.indexOf(slab) ?? -1;
    if (slabs === undefined || at < 0) throw new Error("invariant violated: a region's slab was not listed");
    slabs.splice(at, 1);
    if (slabs.length === 0) this.regionSlabs.delete(slab.memory.buffer);
  }
}

/** A slab of memory the slabs allocated, with `usedBytes` of it handed out to `counters`, all of them still held. */
function ownSlab(memory: Uint8Array, usedBytes: number, counters: number[]): Slab {
  return { memory, usedBytes, liveBytes: usedBytes, counters, kept: false, region: null, retention: null };
}
