import { describe, expect, it } from "vitest";
import { BufferPool } from "../../src/buffers/buffer-pool.js";

const KiB = 1024;
const MiB = 1024 * KiB;

function pool(overrides: Partial<ConstructorParameters<typeof BufferPool>[0]> = {}): BufferPool {
  return new BufferPool({
    minBytes: 256 * KiB,
    maxBytes: 4 * MiB,
    capacityStepBytes: 64 * KiB,
    maxFreeBuffers: 4,
    maxFreeBytes: 16 * MiB,
    ...overrides,
  });
}

describe("BufferPool", () => {
  it("hands a released buffer's memory to the next one of about its size, cut to the exact length", () => {
    const buffers = pool();
    const first = buffers.acquireBuffer(MiB + 100);
    expect(first).toBeInstanceOf(Buffer);
    expect(first.length).toBe(MiB + 100);
    buffers.release(first);
    expect([buffers.freeBuffers, buffers.freeBytes]).toEqual([1, MiB + 64 * KiB]);
    const second = buffers.acquire(MiB + 300);
    expect(second).not.toBeInstanceOf(Buffer);
    expect(second.buffer).toBe(first.buffer);
    expect(second.byteLength).toBe(MiB + 300);
    expect([buffers.freeBuffers, buffers.reusedBuffers]).toEqual([0, 1]);
    // Another size class does not take it.
    buffers.release(second);
    expect(buffers.acquire(512 * KiB).buffer).not.toBe(first.buffer);
  });

  it("never lends memory twice: an unreleased buffer is not reused, a second or stale release is ignored", () => {
    const buffers = pool();
    const held = buffers.acquire(300 * KiB);
    expect(buffers.acquire(300 * KiB).buffer).not.toBe(held.buffer);
    buffers.release(held);
    buffers.release(held);
    expect(buffers.freeBuffers).toBe(1);
    const next = buffers.acquire(300 * KiB);
    expect(next.buffer).toBe(held.buffer);
    // `held` is stale now: releasing it again must not free the memory `next` uses.
    buffers.release(held);
    expect(buffers.freeBuffers).toBe(0);
    expect(buffers.acquire(300 * KiB).buffer).not.toBe(held.buffer);
    // Parts of a lent buffer, and buffers it did not lend, are ignored too.
    buffers.release(next.subarray(1));
    buffers.release(new Uint8Array(300 * KiB));
    expect(buffers.freeBuffers).toBe(0);
  });

  it("allocates sizes outside its range as usual (zeroed for Uint8Array) and does not take them back", () => {
    const buffers = pool();
    const small = buffers.acquire(100 * KiB);
    const large = buffers.acquireBuffer(5 * MiB);
    expect(small.byteLength).toBe(100 * KiB);
    expect(small.every((byte) => byte === 0)).toBe(true);
    expect(large.length).toBe(5 * MiB);
    buffers.release(small);
    buffers.release(large);
    expect(buffers.freeBuffers).toBe(0);
  });

  it("keeps at most maxFreeBuffers and maxFreeBytes free, dropping the least recently released first", () => {
    const buffers = pool({ maxFreeBuffers: 3, maxFreeBytes: 4 * MiB });
    const lent = Array.from({ length: 5 }, () => buffers.acquire(512 * KiB));
    for (const buffer of lent) buffers.release(buffer);
    expect(buffers.freeBuffers).toBe(3);
    const again = Array.from({ length: 5 }, () => buffers.acquire(512 * KiB));
    // The three kept are the last three released.
    expect(again.filter((buffer) => lent.slice(2).some((old) => old.buffer === buffer.buffer))).toHaveLength(3);
    // Sizes no longer in use give way: three of 1 MiB then two of 512 KiB keep 4 MiB at most, newest first.
    const big = Array.from({ length: 3 }, () => buffers.acquire(MiB));
    for (const buffer of big) buffers.release(buffer);
    for (const buffer of again.slice(0, 2)) buffers.release(buffer);
    expect(buffers.freeBuffers).toBe(3);
    expect(buffers.freeBytes).toBe(2 * MiB);
    expect(buffers.acquire(MiB).buffer).toBe(big[2]?.buffer);
  });

  it("refuses options that cannot work", () => {
    expect(() => pool({ minBytes: 0 })).toThrow(/minBytes/);
    expect(() => pool({ minBytes: 5 * MiB })).toThrow(/must not exceed/);
    expect(() => pool({ maxFreeBuffers: -1 })).toThrow(/maxFreeBuffers/);
  });
});
