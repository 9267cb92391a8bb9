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
 */
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
 * One slab: its memory, how much of it was handed out and is still held, the counters of its messages, and whether it
 * is a piece of the snapshot kept as it was given (`place`) rather than memory the slabs allocated.
 */
interface Slab {
  readonly memory: Uint8Array;
  usedBytes: number;
  liveBytes: number;
  readonly counters: number[];
  readonly kept: boolean;
}

/** The piece being decoded that was given away (`place`), and the slab it becomes, or null when it cannot be kept. */
interface GivenPiece {
  readonly buffer: ArrayBufferLike;
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
}

/** Which message holds a counter now (buffered or taken out for relocation), for moving survivors out. */
export type MessageLookup = (counter: number) => StoredMessage | undefined;

/** Makes `entry`, a copy of the message's entry elsewhere, the message's entry (`moveEntry` of `stored-message.ts`). */
export type EntryMover = (message: StoredMessage, entry: Uint8Array) => void;

/** The slabs of one engine's restored entries (see the module comment). */
export class EntrySlabs {
  /** Slabs by their memory's buffer: an entry finds its slab through `entry.buffer`. */
  private readonly slabs = new Map<ArrayBufferLike, Slab>();
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
      given = { buffer: givenPiece.buffer, slab: this.keepable(givenPiece) ? this.keptSlab(givenPiece) : null };
      this.given = given;
    } else if (given.buffer !== givenPiece.buffer) {
      throw new Error("invariant violated: an entry of another given piece was placed before the last one ended");
    }
    const slab = given.slab;
    if (slab === null) return this.copy(bytes, counter);
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
      // An entry that is all of the piece simply owns it, as an entry copied on its own owns its copy.
      const ownedWhole = slab.counters.length === 1 && slab.usedBytes === slab.memory.byteLength;
      if (!ownedWhole) this.slabs.set(slab.memory.buffer, slab);
      return;
    }
    // Bounded by the piece's messages, each looked at once.
    for (const counter of slab.counters) {
      const message = this.lookup(counter);
      // A message makes a new view of its entry at each read: one read per message.
      const entry = message?.entry;
      if (message === undefined || entry?.buffer !== slab.memory.buffer) {
        throw new Error(`invariant violated: message ${counter}, placed in a given piece, is not held there`);
      }
      this.moveEntry(message, this.copy(entry, counter));
    }
  }

  /** Whether a given piece's entries may stay where they lie: the piece is nearly all its memory, not a slab yet. */
  private keepable(piece: Uint8Array): boolean {
    return piece.byteLength >= (1 - ABANDONED_REST_SHARE) * piece.buffer.byteLength && !this.slabs.has(piece.buffer);
  }

  /** An empty slab over all the memory of `piece`, which it holds while any entry placed in it is held. */
  private keptSlab(piece: Uint8Array): Slab {
    return { memory: new Uint8Array(piece.buffer), usedBytes: 0, liveBytes: 0, counters: [], kept: true };
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
      slab = { memory: new Uint8Array(slabBytes), usedBytes: 0, liveBytes: 0, counters: [], kept: false };
      this.slabs.set(slab.memory.buffer, slab);
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
    const slab = this.slabs.get(entry.buffer);
    if (slab === undefined) return;
    if (entry.byteLength > slab.liveBytes) {
      throw new Error("invariant violated: a slab of restored entries released more bytes than it holds");
    }
    slab.liveBytes -= entry.byteLength;
    if (slab.liveBytes * 2 >= slab.usedBytes) return;
    this.slabs.delete(slab.memory.buffer);
    if (this.filling === slab) this.filling = null;
    if (slab.liveBytes === 0) return;
    const survivors: StoredMessage[] = [];
    // Bounded by the slab's messages, each looked at once.
    for (const counter of slab.counters) {
      const message = this.lookup(counter);
      if (message !== undefined && message.entry.buffer === slab.memory.buffer) survivors.push(message);
    }
    const compacted: Slab = {
      memory: new Uint8Array(slab.liveBytes),
      usedBytes: slab.liveBytes,
      liveBytes: slab.liveBytes,
      counters: survivors.map((message) => message.counter),
      kept: false,
    };
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
    if (survivors.length > 1) this.slabs.set(compacted.memory.buffer, compacted);
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
      if (message === undefined || entry?.buffer !== slab.memory.buffer) continue;
      this.moveEntry(message, memory.subarray(entry.byteOffset, entry.byteOffset + entry.byteLength));
    }
    this.slabs.delete(slab.memory.buffer);
    if (slab.counters.length > 1) this.slabs.set(memory.buffer, { ...slab, memory });
  }

  /** The slabs held: their count and size, the bytes they handed out, and of those the bytes still held. */
  statistics(): SlabStatistics {
    let slabBytes = 0;
    let handedOutBytes = 0;
    let liveBytes = 0;
    let keptPieceCount = 0;
    for (const slab of this.slabs.values()) {
      slabBytes += slab.memory.byteLength;
      handedOutBytes += slab.usedBytes;
      liveBytes += slab.liveBytes;
      if (slab.kept) keptPieceCount += 1;
    }
    return { slabCount: this.slabs.size, slabBytes, handedOutBytes, liveBytes, keptPieceCount };
  }
}
