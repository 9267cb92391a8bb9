import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EntrySlabs, FIRST_SLAB_BYTES, LARGEST_SLAB_BYTES } from "../../../src/cluster/engine/entry-slabs.js";
import { moveEntry, type StoredMessage } from "../../../src/cluster/engine/stored-message.js";

/**
 * Messages as the engine would hold them, reduced to what the slabs look at: counter, entry and variables. Each
 * entry's bytes are its counter's, so a byte that moved to the wrong place shows.
 */
class HeldMessages {
  readonly held = new Map<number, StoredMessage>();
  readonly slabs = new EntrySlabs((counter) => this.held.get(counter), moveEntry);

  restore(counter: number, entryBytes: number): StoredMessage {
    const source = new Uint8Array(entryBytes).fill(counter % 251);
    const entry = this.slabs.copy(source, counter);
    const message = { counter, entry, variablesBytes: entry.subarray(1) } as unknown as StoredMessage;
    this.held.set(counter, message);
    return message;
  }

  drop(counter: number): void {
    const message = this.held.get(counter);
    if (message === undefined) throw new Error(`message ${counter} is not held`);
    this.held.delete(counter);
    this.slabs.release(message.entry);
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
    expect(messages.slabs.statistics()).toEqual({ slabCount: 1, slabBytes: 400, handedOutBytes: 400, liveBytes: 400 });
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
    expect(messages.slabs.statistics()).toEqual({ slabCount: 0, slabBytes: 0, handedOutBytes: 0, liveBytes: 0 });
  });

  it("keeps every slab at least half held and 7/8 used, whatever the order messages go in, and moves every byte intact", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 256 * 1024 }), { minLength: 1, maxLength: 100 }),
        fc.array(fc.nat(), { maxLength: 100 }),
        (sizes, dropOrder) => {
          const messages = new HeldMessages();
          for (const [position, size] of sizes.entries()) messages.restore(position + 1, size);
          messages.slabs.trim();
          const remaining = sizes.map((_size, position) => position + 1);
          for (const pick of dropOrder) {
            if (remaining.length === 0) break;
            const [counter] = remaining.splice(pick % remaining.length, 1);
            messages.drop(counter as number);
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
          for (const message of messages.held.values()) {
            expect(message.entry.every((byte) => byte === message.counter % 251)).toBe(true);
          }
        },
      ),
      { numRuns: 100 },
    );
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
