import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type RetainedRegion, RetainedRegions, regionOf } from "../../../src/buffers/retained-regions.js";
import { EntrySlabs, FIRST_SLAB_BYTES, LARGEST_SLAB_BYTES } from "../../../src/cluster/engine/entry-slabs.js";
import { moveEntry, type StoredMessage } from "../../../src/cluster/engine/stored-message.js";
import { NO_RESTORED_ENTRY_MEMORY } from "./support.js";

/** A message reduced to what the slabs look at; like a stored message, it derives its variables from its entry. */
class HeldMessage {
  constructor(
    readonly counter: number,
    public entry: Uint8Array,
  ) {}

  get variablesBytes(): Uint8Array {
    return this.entry.subarray(1);
  }
}

/**
 * Messages as the engine would hold them, reduced to what the slabs look at: counter, entry and variables. Each
 * entry's bytes are its counter's, so a byte that moved to the wrong place shows.
 */
class HeldMessages {
  readonly held = new Map<number, StoredMessage>();
  readonly slabs = new EntrySlabs((counter) => this.held.get(counter), moveEntry);
  /** The regions pieces were carved from, whose deferred look at the eviction rule `settleRegions` runs at once. */
  private readonly regions = new Set<RetainedRegion>();

  restore(counter: number, entryBytes: number): StoredMessage {
    const source = new Uint8Array(entryBytes).fill(counter % 251);
    return this.hold(counter, this.slabs.copy(source, counter));
  }

  /**
   * Restores the messages of a piece the restore is given: `gapBytes` that hold no entry (a snapshot's header, or the
   * parts of messages that span two pieces) followed by the entries of `entrySizes`, numbered from `firstCounter`, in
   * memory that holds `spareBytes` more after the piece (a frame's other fields). The piece is decoded when this
   * returns (`endPiece`).
   */
  restoreGiven(firstCounter: number, entrySizes: readonly number[], gapBytes = 0, spareBytes = 0): Uint8Array {
    const pieceBytes = gapBytes + entrySizes.reduce((sum, size) => sum + size, 0);
    const piece = new Uint8Array(pieceBytes + spareBytes).subarray(0, pieceBytes);
    return this.restoreInto(piece, firstCounter, entrySizes, gapBytes);
  }

  /** As `restoreGiven`, for a piece carved from `regions` (a received chunk's body), with nothing after it. */
  restoreCarved(
    regions: RetainedRegions,
    firstCounter: number,
    entrySizes: readonly number[],
    gapBytes = 0,
  ): Uint8Array {
    const pieceBytes = gapBytes + entrySizes.reduce((sum, size) => sum + size, 0);
    const piece = regions.allocate(pieceBytes);
    const region = regionOf(piece);
    if (region !== undefined) this.regions.add(region);
    this.restoreInto(piece, firstCounter, entrySizes, gapBytes);
    this.settleRegions();
    return piece;
  }

  /** Runs now what each region would look at in a later turn: whether it is closed and mostly unused. */
  settleRegions(): void {
    for (const region of this.regions) region.evictIfMostlyUnused();
  }

  private restoreInto(
    piece: Uint8Array,
    firstCounter: number,
    entrySizes: readonly number[],
    gapBytes: number,
  ): Uint8Array {
    let offset = gapBytes;
    for (const [position, size] of entrySizes.entries()) {
      const counter = firstCounter + position;
      const bytes = piece.subarray(offset, offset + size).fill(counter % 251);
      this.hold(counter, this.slabs.place(bytes, counter, piece));
      offset += size;
    }
    this.slabs.endPiece();
    return piece;
  }

  hold(counter: number, entry: Uint8Array): StoredMessage {
    const message = new HeldMessage(counter, entry) as unknown as StoredMessage;
    this.held.set(counter, message);
    return message;
  }

  drop(counter: number): void {
    const message = this.held.get(counter);
    if (message === undefined) throw new Error(`message ${counter} is not held`);
    this.held.delete(counter);
    this.slabs.release(message.entry);
    this.settleRegions();
  }

  /** The held messages' entries grouped by the memory they lie in. */
  byMemory(): Map<ArrayBufferLike, StoredMessage[]> {
    const groups = new Map<ArrayBufferLike, StoredMessage[]>();
    for (const message of this.held.values()) {
      const group = groups.get(message.entry.buffer) ?? [];
      group.push(message);
      groups.set(message.entry.buffer, group);
    }
    return groups;
  }
}

describe("EntrySlabs", () => {
  it("copies small entries one after another into a shared slab, and entries over a quarter of the largest slab on their own", () => {
    const messages = new HeldMessages();
    const first = messages.restore(1, 1_000);
    const second = messages.restore(2, 2_000);
    const large = messages.restore(3, LARGEST_SLAB_BYTES / 4 + 1);
    expect(second.entry.buffer).toBe(first.entry.buffer);
    expect(second.entry.byteOffset).toBe(first.entry.byteOffset + 1_000);
    expect(large.entry.buffer).not.toBe(first.entry.buffer);
    expect(large.entry.buffer.byteLength).toBe(LARGEST_SLAB_BYTES / 4 + 1);
    expect(messages.slabs.statistics()).toEqual({
      slabCount: 1,
      slabBytes: FIRST_SLAB_BYTES,
      handedOutBytes: 3_000,
      liveBytes: 3_000,
      keptPieceCount: 0,
      regionPieceCount: 0,
    });
  });

  it("starts small and doubles each next slab up to the largest, holding at least four entries of the size that started it", () => {
    const messages = new HeldMessages();
    const slabSizes = new Set<number>();
    // 4 MiB of 32 KiB entries: slabs of 128 KiB (four entries), 256 KiB, and so on up to the largest.
    for (let counter = 1; counter <= 128; counter += 1) {
      slabSizes.add(messages.restore(counter, 32 * 1024).entry.buffer.byteLength);
    }
    expect(LARGEST_SLAB_BYTES).toBe(1024 * 1024);
    expect([...slabSizes]).toEqual([128, 256, 512, 1024].map((kibibytes) => kibibytes * 1024));
    expect(messages.slabs.statistics().handedOutBytes).toBe(4 * 1024 * 1024);
  });

  it("copies an entry on its own rather than leave more than an eighth of the slab being filled unused", () => {
    const messages = new HeldMessages();
    const small = messages.restore(1, 100);
    // Does not fit in the rest of the 64 KiB slab, and that rest is far more than an eighth of it.
    const large = messages.restore(2, FIRST_SLAB_BYTES - 50);
    expect(large.entry.buffer).not.toBe(small.entry.buffer);
    expect(large.entry.buffer.byteLength).toBe(FIRST_SLAB_BYTES - 50);
    // The slab goes on filling.
    expect(messages.restore(3, 1_000).entry.buffer).toBe(small.entry.buffer);
    // With at most an eighth left, the next entry that does not fit starts the next slab.
    messages.restore(4, FIRST_SLAB_BYTES - 1_100 - FIRST_SLAB_BYTES / 8);
    const next = messages.restore(5, FIRST_SLAB_BYTES / 8 + 1);
    expect(next.entry.buffer).not.toBe(small.entry.buffer);
    expect(next.entry.buffer.byteLength).toBe(2 * FIRST_SLAB_BYTES);
  });

  it("cuts the slab a restore filled last to what it handed out, its entries at the same places, and takes no entry after", () => {
    const messages = new HeldMessages();
    for (let counter = 1; counter <= 10; counter += 1) messages.restore(counter, 300);
    const first = messages.held.get(1) as StoredMessage;
    messages.drop(1);
    const slab = first.entry.buffer;
    messages.slabs.trim();
    expect(messages.slabs.statistics()).toEqual({
      slabCount: 1,
      slabBytes: 3_000,
      handedOutBytes: 3_000,
      liveBytes: 2_700,
      keptPieceCount: 0,
      regionPieceCount: 0,
    });
    for (let counter = 2; counter <= 10; counter += 1) {
      const message = messages.held.get(counter) as StoredMessage;
      expect(message.entry.buffer).not.toBe(slab);
      expect(message.entry.buffer.byteLength).toBe(3_000);
      expect(message.entry.byteOffset).toBe((counter - 1) * 300);
      expect(message.entry.every((byte) => byte === counter)).toBe(true);
      expect(message.variablesBytes.buffer).toBe(message.entry.buffer);
    }
    expect(() => messages.slabs.copy(new Uint8Array(10), 11)).toThrow(/after the restore ended/);
  });

  it("leaves a slab that is at least 7/8 full as it is when the restore ends", () => {
    const messages = new HeldMessages();
    for (let counter = 1; counter <= 8; counter += 1) messages.restore(counter, FIRST_SLAB_BYTES / 8);
    const slab = messages.held.get(1)?.entry.buffer;
    messages.slabs.trim();
    expect(messages.held.get(8)?.entry.buffer).toBe(slab);
    expect(messages.slabs.statistics().slabBytes).toBe(FIRST_SLAB_BYTES);
  });

  it("moves the survivors together into a slab of their size once less than half of a slab is held, and drops the old", () => {
    const messages = new HeldMessages();
    for (let counter = 1; counter <= 10; counter += 1) messages.restore(counter, 100);
    const slab = messages.held.get(1)?.entry.buffer;
    // 5 of 10 still held: half, not less.
    for (let counter = 1; counter <= 5; counter += 1) messages.drop(counter);
    expect(messages.held.get(6)?.entry.buffer).toBe(slab);
    messages.drop(6);
    expect(messages.slabs.statistics()).toEqual({
      slabCount: 1,
      slabBytes: 400,
      handedOutBytes: 400,
      liveBytes: 400,
      keptPieceCount: 0,
      regionPieceCount: 0,
    });
    const moved = messages.held.get(7)?.entry.buffer;
    expect(moved).not.toBe(slab);
    for (let counter = 7; counter <= 10; counter += 1) {
      const message = messages.held.get(counter) as StoredMessage;
      expect(message.entry.buffer).toBe(moved);
      expect(message.entry.byteOffset).toBe((counter - 7) * 100);
      expect(message.entry.every((byte) => byte === counter)).toBe(true);
      expect(message.variablesBytes.buffer).toBe(moved);
    }
    // The new slab follows the same rule; once nothing is held, no slab is left.
    for (let counter = 7; counter <= 10; counter += 1) messages.drop(counter);
    expect(messages.slabs.statistics()).toEqual(NO_RESTORED_ENTRY_MEMORY);
  });

  it("keeps every slab, given pieces too, at least half held and 7/8 used, whatever the order messages go in, and moves every byte intact", () => {
    // Over the runs, given pieces both kept and copied out, so neither way goes untested.
    const givenPieces = { kept: 0, copied: 0 };
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.integer({ min: 1, max: 256 * 1024 }),
            // A given piece: the bytes at its start that hold no entry, its entries, and memory after it. Pieces
            // with little besides their entries are drawn often enough that kept pieces are not left to luck.
            fc.record({
              gapBytes: fc.oneof(fc.integer({ min: 0, max: 256 }), fc.integer({ min: 0, max: 64 * 1024 })),
              entrySizes: fc.array(fc.integer({ min: 1, max: 64 * 1024 }), { minLength: 1, maxLength: 8 }),
              spareBytes: fc.oneof(fc.integer({ min: 0, max: 256 }), fc.integer({ min: 0, max: 64 * 1024 })),
            }),
          ),
          { minLength: 1, maxLength: 60 },
        ),
        fc.array(fc.nat(), { maxLength: 100 }),
        (steps, dropOrder) => {
          const messages = new HeldMessages();
          const sizes: number[] = [];
          for (const step of steps) {
            if (typeof step === "number") {
              sizes.push(step);
              messages.restore(sizes.length, step);
            } else {
              const piece = messages.restoreGiven(sizes.length + 1, step.entrySizes, step.gapBytes, step.spareBytes);
              const kept = messages.held.get(sizes.length + 1)?.entry.buffer === piece.buffer;
              givenPieces[kept ? "kept" : "copied"] += 1;
              sizes.push(...step.entrySizes);
            }
          }
          messages.slabs.trim();
          const remaining = sizes.map((_size, position) => position + 1);
          checkBounds(messages);
          for (const pick of dropOrder) {
            if (remaining.length === 0) break;
            const [counter] = remaining.splice(pick % remaining.length, 1);
            messages.drop(counter as number);
            checkBounds(messages);
          }
          for (const message of messages.held.values()) {
            expect(message.entry.every((byte) => byte === message.counter % 251)).toBe(true);
          }
        },
      ),
      { numRuns: 100 },
    );
    expect(givenPieces.kept).toBeGreaterThan(20);
    expect(givenPieces.copied).toBeGreaterThan(20);

    /** Checks the slabs' statistics against the held messages, and the bounds per slab. */
    function checkBounds(messages: HeldMessages): void {
      const { slabCount, slabBytes, liveBytes } = messages.slabs.statistics();
      // Per slab: the entries held in it are at least half of what it handed out, itself at least 7/8 of it.
      // Memory holding a single entry exactly is that entry's own (no slab counts it).
      let bytesInSlabs = 0;
      let slabsHolding = 0;
      let memoryHolding = 0;
      for (const [memory, held] of messages.byMemory()) {
        const heldBytes = held.reduce((sum, message) => sum + message.entry.byteLength, 0);
        if (held.length === 1 && heldBytes === memory.byteLength) continue;
        slabsHolding += 1;
        memoryHolding += memory.byteLength;
        bytesInSlabs += heldBytes;
        expect(16 * heldBytes).toBeGreaterThanOrEqual(7 * memory.byteLength);
      }
      expect({ slabCount, slabBytes, liveBytes }).toEqual({
        slabCount: slabsHolding,
        slabBytes: memoryHolding,
        liveBytes: bytesInSlabs,
      });
    }
  });

  it("keeps the entries of a given piece where they lie, and the piece as a slab, when they cover 7/8 of its memory", () => {
    const messages = new HeldMessages();
    // 1,000 bytes of header, then 7,000 of entries: exactly 7/8.
    const piece = messages.restoreGiven(1, [3_000, 4_000], 1_000);
    for (const [counter, offset] of [
      [1, 1_000],
      [2, 4_000],
    ] as const) {
      const message = messages.held.get(counter) as StoredMessage;
      expect(message.entry.buffer).toBe(piece.buffer);
      expect(message.entry.byteOffset).toBe(offset);
    }
    expect(messages.slabs.statistics()).toEqual({
      slabCount: 1,
      slabBytes: 8_000,
      handedOutBytes: 7_000,
      liveBytes: 7_000,
      keptPieceCount: 1,
      regionPieceCount: 0,
    });
    // An entry that does not lie in the piece (the decoder's copy of one spanning two pieces) is copied.
    const spanning = new Uint8Array(500).fill(3);
    const placed = messages.slabs.place(spanning, 3, piece);
    expect(placed.buffer).not.toBe(piece.buffer);
    expect(placed.buffer).not.toBe(spanning.buffer);
    // Released like any slab: below half held, the survivor owns a copy and the piece is no longer held.
    messages.drop(2);
    const survivor = messages.held.get(1) as StoredMessage;
    expect(survivor.entry.buffer).not.toBe(piece.buffer);
    expect(survivor.entry.every((byte) => byte === 1)).toBe(true);
    expect(messages.slabs.statistics().keptPieceCount).toBe(0);
  });

  it("copies the entries of a given piece once it is decoded when they cover less than 7/8 of its memory", () => {
    const messages = new HeldMessages();
    const piece = messages.restoreGiven(1, [3_000, 3_999], 1_001);
    for (const counter of [1, 2]) {
      const message = messages.held.get(counter) as StoredMessage;
      expect(message.entry.buffer).not.toBe(piece.buffer);
      expect(message.entry.every((byte) => byte === counter)).toBe(true);
      expect(message.variablesBytes.buffer).toBe(message.entry.buffer);
    }
    expect(messages.slabs.statistics()).toMatchObject({ handedOutBytes: 6_999, keptPieceCount: 0 });
  });

  it("copies the entries of a given piece that is a small part of its memory, or memory it keeps already", () => {
    const messages = new HeldMessages();
    const memory = new Uint8Array(10_000);
    const part = memory.subarray(0, 1_000).fill(1);
    expect(messages.slabs.place(part, 1, part).buffer).not.toBe(memory.buffer);
    messages.slabs.endPiece();
    const kept = messages.restoreGiven(2, [4_000, 4_000]);
    const again = kept.subarray(0, 4_000);
    expect(messages.slabs.place(again, 4, again).buffer).not.toBe(kept.buffer);
    messages.slabs.endPiece();
    expect(messages.slabs.statistics().keptPieceCount).toBe(1);
    // An entry that is the whole of its piece owns it, as an entry copied on its own owns its copy: no slab counts it.
    const before = messages.slabs.statistics();
    const whole = messages.restoreGiven(5, [3_000]);
    expect(messages.held.get(5)?.entry.buffer).toBe(whole.buffer);
    expect(messages.slabs.statistics()).toEqual(before);
  });

  it("fails loudly when a given piece is left unended: another piece's entry placed, or the restore ended", () => {
    const messages = new HeldMessages();
    const first = new Uint8Array(1_000);
    const second = new Uint8Array(1_000);
    messages.hold(1, messages.slabs.place(first.subarray(100), 1, first));
    expect(() => messages.slabs.place(second, 2, second)).toThrow(/before the last one ended/);
    expect(() => messages.slabs.trim()).toThrow(/ended inside a given piece/);
    messages.slabs.endPiece();
    messages.slabs.trim();
    expect(() => messages.slabs.place(second, 2, second)).toThrow(/after the restore ended/);
    expect(messages.slabs.statistics().keptPieceCount).toBe(1);
  });

  it("fails loudly when an entry placed in a given piece is no longer held there when the piece is copied out", () => {
    const messages = new HeldMessages();
    const piece = new Uint8Array(1_000);
    messages.slabs.place(piece.subarray(0, 500), 1, piece);
    expect(() => messages.slabs.endPiece()).toThrow(/message 1, placed in a given piece, is not held there/);
  });

  it("fails loudly, changing nothing, when more is released than a slab holds", () => {
    const messages = new HeldMessages();
    const message = messages.restore(1, 100);
    messages.restore(2, 100);
    messages.slabs.release(message.entry.subarray(0, 60));
    expect(() => messages.slabs.release(new Uint8Array(message.entry.buffer, 0, 150))).toThrow(
      /more bytes than it holds/,
    );
    expect(messages.slabs.statistics().liveBytes).toBe(140);
  });
});

describe("EntrySlabs over pieces carved from regions", () => {
  it("keeps each carved piece as a slab over its own range of the region, released apart from its neighbours", () => {
    const regions = new RetainedRegions({ regionBytes: 64 * 1024 });
    const messages = new HeldMessages();
    const pieces = [
      messages.restoreCarved(regions, 1, [2_000, 2_000], 100),
      messages.restoreCarved(regions, 3, [4_000]),
      messages.restoreCarved(regions, 4, [1_000, 1_000, 1_000, 1_000]),
    ];
    const region = regionOf(pieces[0] as Uint8Array);
    expect(region).toBeDefined();
    for (const piece of pieces) expect(piece.buffer).toBe(region?.memory);
    for (const message of messages.held.values()) {
      expect(message.entry.buffer).toBe(region?.memory);
      expect(message.entry.every((byte) => byte === message.counter % 251)).toBe(true);
    }
    // Each piece is a slab of its own size; a single entry that is all of its piece is tracked too, for the region.
    expect(messages.slabs.statistics()).toEqual({
      slabCount: 3,
      slabBytes: 4_100 + 4_000 + 4_000,
      handedOutBytes: 12_000,
      liveBytes: 12_000,
      keptPieceCount: 3,
      regionPieceCount: 3,
    });
    // Released by offset: the third piece below half moves its survivor out; the first two are untouched.
    messages.drop(4);
    messages.drop(5);
    messages.drop(6);
    expect(messages.held.get(7)?.entry.buffer).not.toBe(region?.memory);
    expect(messages.held.get(7)?.entry.every((byte) => byte === 7)).toBe(true);
    expect(messages.held.get(1)?.entry.byteOffset).toBe((pieces[0] as Uint8Array).byteOffset + 100);
    expect(messages.slabs.statistics()).toMatchObject({ slabCount: 2, liveBytes: 8_000, regionPieceCount: 2 });
    messages.drop(3);
    expect(messages.slabs.statistics()).toMatchObject({ slabCount: 1, liveBytes: 4_000, regionPieceCount: 1 });
    expect(regions.statistics().regionsEvicted).toBe(0);
  });

  it("moves every slab out of a region that is closed and kept less than half, and not before it is closed", () => {
    const regions = new RetainedRegions({ regionBytes: 64 * 1024 });
    const messages = new HeldMessages();
    // Eight pieces of 8 KiB fill the region; each holds two entries.
    for (let piece = 0; piece < 8; piece += 1) messages.restoreCarved(regions, 2 * piece + 1, [4_096, 4_096]);
    const region = regionOf(messages.held.get(1)?.entry as Uint8Array);
    // Five pieces emptied: three kept, less than half of the region, but it is still being filled.
    for (let counter = 1; counter <= 10; counter += 1) messages.drop(counter);
    expect(region?.isClosed).toBe(false);
    expect(messages.slabs.statistics().regionPieceCount).toBe(3);
    expect(regions.statistics().regionsEvicted).toBe(0);
    // The next piece does not fit: the region closes, and its slabs move out.
    messages.restoreCarved(regions, 17, [4_096, 4_096]);
    expect(region?.isClosed).toBe(true);
    expect(regions.statistics()).toMatchObject({ regionsAllocated: 2, regionsEvicted: 1 });
    for (let counter = 11; counter <= 16; counter += 1) {
      const entry = messages.held.get(counter)?.entry as Uint8Array;
      expect(entry.buffer).not.toBe(region?.memory);
      expect(entry.every((byte) => byte === counter)).toBe(true);
    }
    expect(region?.retainedBytes).toBe(0);
    // Only the piece in the new region is still a region's slab; the survivors share copies of their own.
    expect(messages.slabs.statistics()).toMatchObject({ regionPieceCount: 1, liveBytes: 6 * 4_096 + 2 * 4_096 });
  });

  it("leaves a closed region alone while its slabs keep at least half of it, and asks every engine keeping part of it to move out", () => {
    const regions = new RetainedRegions({ regionBytes: 64 * 1024 });
    const first = new HeldMessages();
    const second = new HeldMessages();
    // Two engines receive alternately into one region: four pieces each.
    for (let piece = 0; piece < 4; piece += 1) {
      first.restoreCarved(regions, 2 * piece + 1, [4_096, 4_096]);
      second.restoreCarved(regions, 2 * piece + 1, [4_096, 4_096]);
    }
    const region = regionOf(first.held.get(1)?.entry as Uint8Array);
    first.restoreCarved(regions, 9, [4_096, 4_096]);
    expect(region?.isClosed).toBe(true);
    // Four of eight pieces kept is half: nothing moves.
    for (let counter = 1; counter <= 8; counter += 1) first.drop(counter);
    expect(regions.statistics().regionsEvicted).toBe(0);
    expect(second.held.get(1)?.entry.buffer).toBe(region?.memory);
    // One more piece of the second engine emptied: the rest of the second engine moves out too.
    second.drop(1);
    second.drop(2);
    expect(regions.statistics().regionsEvicted).toBe(1);
    for (const message of second.held.values()) {
      expect(message.entry.buffer).not.toBe(region?.memory);
      expect(message.entry.every((byte) => byte === message.counter % 251)).toBe(true);
    }
    expect(first.held.get(9)?.entry.buffer).not.toBe(region?.memory);
  });

  it("keeps regions at least 7/32 held once closed, and every slab at least half held, whatever the order messages go in", () => {
    const coverage = { evictions: 0, regionPieces: 0 };
    fc.assert(
      fc.property(
        // Regions of 5 to 12 KiB take pieces of up to 528 bytes (less than an eighth of the smallest), 20 to 80 of them,
        // so that most runs close a few regions and then empty them.
        fc.integer({ min: 5, max: 12 }).map((kibibytes) => kibibytes * 1024),
        fc.array(
          fc.record({
            gapBytes: fc.integer({ min: 0, max: 16 }),
            entrySizes: fc.array(fc.integer({ min: 1, max: 128 }), { minLength: 1, maxLength: 4 }),
          }),
          { minLength: 20, maxLength: 80, size: "max" },
        ),
        fc.array(fc.nat(), { maxLength: 320, size: "max" }),
        (regionBytes, pieces, dropOrder) => {
          const regions = new RetainedRegions({ regionBytes });
          const messages = new HeldMessages();
          let counters = 0;
          for (const piece of pieces) {
            messages.restoreCarved(regions, counters + 1, piece.entrySizes, piece.gapBytes);
            counters += piece.entrySizes.length;
          }
          coverage.regionPieces += messages.slabs.statistics().regionPieceCount;
          const remaining = Array.from({ length: counters }, (_unused, position) => position + 1);
          checkRegions(messages);
          for (const pick of dropOrder) {
            if (remaining.length === 0) break;
            const [counter] = remaining.splice(pick % remaining.length, 1);
            messages.drop(counter as number);
            checkRegions(messages);
          }
          for (const message of messages.held.values()) {
            expect(message.entry.every((byte) => byte === message.counter % 251)).toBe(true);
          }
          coverage.evictions += regions.statistics().regionsEvicted;
        },
      ),
      { numRuns: 100 },
    );
    expect(coverage.regionPieces).toBeGreaterThan(1_000);
    expect(coverage.evictions).toBeGreaterThan(10);

    /** Checks every closed region holding entries against its bound, and the statistics against the held entries. */
    function checkRegions(messages: HeldMessages): void {
      let bytesInRegions = 0;
      for (const [memory, held] of messages.byMemory()) {
        const heldBytes = held.reduce((sum, message) => sum + message.entry.byteLength, 0);
        const region = regionOf(new Uint8Array(memory, 0, 0));
        if (region === undefined) continue;
        bytesInRegions += heldBytes;
        // Kept pieces are at least half of what a closed region handed out, each at least 7/16 held.
        if (region.isClosed) expect(32 * heldBytes).toBeGreaterThanOrEqual(7 * region.handedOutBytes);
      }
      const statistics = messages.slabs.statistics();
      let liveOutside = 0;
      for (const [memory, held] of messages.byMemory()) {
        if (regionOf(new Uint8Array(memory, 0, 0)) !== undefined) continue;
        const heldBytes = held.reduce((sum, message) => sum + message.entry.byteLength, 0);
        if (held.length === 1 && heldBytes === memory.byteLength) continue;
        liveOutside += heldBytes;
      }
      expect(statistics.liveBytes).toBe(bytesInRegions + liveOutside);
    }
  });
});
