import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EntryCache } from "../../../../src/cluster/raft/storage/entry-cache.js";
import type { Entry } from "../../../../src/cluster/raft/types.js";

function entry(index: number, term = 1, bytes = 10): Entry {
  return { index, term, kind: "normal", data: new Uint8Array(bytes) };
}

function run(from: number, to: number, term = 1): Entry[] {
  const entries: Entry[] = [];
  for (let index = from; index <= to; index += 1) entries.push(entry(index, term));
  return entries;
}

describe("EntryCache", () => {
  it("serves a range only when it holds all of it", () => {
    const cache = new EntryCache(1_000_000);
    cache.replaceFrom(run(5, 9));
    expect(cache.range(5, 10)?.map((held) => held.index)).toEqual([5, 6, 7, 8, 9]);
    expect(cache.range(6, 8)?.map((held) => held.index)).toEqual([6, 7]);
    expect(cache.range(4, 6)).toBeNull();
    expect(cache.range(8, 11)).toBeNull();
    expect(cache.get(4)).toBeUndefined();
    expect(cache.get(9)?.index).toBe(9);
  });

  it("replaces the suffix a conflicting append overwrites", () => {
    const cache = new EntryCache(1_000_000);
    cache.replaceFrom(run(1, 6, 1));
    cache.replaceFrom(run(4, 5, 2));
    expect(cache.range(1, 6)?.map((held) => [held.index, held.term])).toEqual([
      [1, 1],
      [2, 1],
      [3, 1],
      [4, 2],
      [5, 2],
    ]);
    expect(cache.get(6)).toBeUndefined();
  });

  it("restarts the run when an append does not continue it", () => {
    const cache = new EntryCache(1_000_000);
    cache.replaceFrom(run(1, 3));
    cache.replaceFrom(run(10, 11));
    expect(cache.firstIndex()).toBe(10);
    expect(cache.size).toBe(2);
  });

  it("drops the oldest entries beyond its byte bound and what a snapshot covers", () => {
    const cache = new EntryCache(3 * (10 + 64));
    cache.replaceFrom(run(1, 5));
    expect(cache.firstIndex()).toBe(3);
    expect(cache.sizeBytes).toBe(3 * 74);
    cache.dropThrough(4);
    expect(cache.firstIndex()).toBe(5);
    cache.dropThrough(9);
    expect(cache.size).toBe(0);
    expect(cache.sizeBytes).toBe(0);
  });

  it("always equals a suffix of a log that follows the same writes", () => {
    const operation = fc.oneof(
      fc.record({ kind: fc.constant("append" as const), back: fc.nat(6), count: fc.integer({ min: 1, max: 5 }) }),
      fc.record({ kind: fc.constant("drop" as const), back: fc.nat(8) }),
    );
    fc.assert(
      fc.property(fc.array(operation, { maxLength: 60 }), fc.integer({ min: 0, max: 600 }), (operations, bound) => {
        const cache = new EntryCache(bound);
        const log = new Map<number, Entry>();
        let lastIndex = 0;
        let firstIndex = 1;
        let term = 1;
        for (const step of operations) {
          if (step.kind === "append") {
            const from = Math.max(firstIndex, lastIndex + 1 - step.back);
            term += 1;
            const entries = run(from, from + step.count - 1, term);
            for (let index = from; index <= lastIndex; index += 1) log.delete(index);
            for (const written of entries) log.set(written.index, written);
            lastIndex = from + step.count - 1;
            cache.replaceFrom(entries);
          } else {
            const through = Math.max(firstIndex - 1, lastIndex - step.back);
            for (let index = firstIndex; index <= through; index += 1) log.delete(index);
            firstIndex = through + 1;
            cache.dropThrough(through);
          }
          expect(cache.sizeBytes).toBeLessThanOrEqual(bound);
          const first = cache.firstIndex();
          if (first === null) continue;
          const held = cache.range(first, first + cache.size) ?? [];
          expect(held[held.length - 1]?.index).toBe(lastIndex);
          for (const cached of held) expect(cached).toBe(log.get(cached.index));
        }
      }),
      { seed: 20261122, numRuns: 300 },
    );
  });
});
