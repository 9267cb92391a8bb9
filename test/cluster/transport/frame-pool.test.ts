import { describe, expect, it } from "vitest";
import { FramePool } from "../../../src/cluster/transport/frame-pool.js";

const KiB = 1024;

function pool(maxFreeBuffers = 4): FramePool {
  return new FramePool({ minFrameBytes: 256 * KiB, maxFrameBytes: 4 * 1024 * KiB, maxFreeBuffers });
}

describe("FramePool", () => {
  it("hands a released frame's memory to the next frame of about its size, cut to the exact length", () => {
    const frames = pool();
    const first = frames.acquire(1024 * KiB + 100);
    expect(first.length).toBe(1024 * KiB + 100);
    frames.release(first);
    expect(frames.freeBuffers).toBe(1);
    const second = frames.acquire(1024 * KiB + 300);
    expect(second.buffer).toBe(first.buffer);
    expect(second.length).toBe(1024 * KiB + 300);
    expect(frames.freeBuffers).toBe(0);
    expect(frames.reusedFrames).toBe(1);
    // A frame of another size class does not take it.
    frames.release(second);
    expect(frames.acquire(512 * KiB).buffer).not.toBe(first.buffer);
  });

  it("never lends the same memory twice: a frame not released is not reused, and a second release is ignored", () => {
    const frames = pool();
    const held = frames.acquire(300 * KiB);
    expect(frames.acquire(300 * KiB).buffer).not.toBe(held.buffer);
    frames.release(held);
    frames.release(held);
    expect(frames.freeBuffers).toBe(1);
    const next = frames.acquire(300 * KiB);
    const other = frames.acquire(300 * KiB);
    expect(next.buffer).toBe(held.buffer);
    expect(other.buffer).not.toBe(held.buffer);
  });

  it("allocates frames outside its sizes as usual and ignores their release, and anything it did not lend", () => {
    const frames = pool();
    const small = frames.acquire(100 * KiB);
    const large = frames.acquire(5 * 1024 * KiB);
    expect(small.length).toBe(100 * KiB);
    expect(large.length).toBe(5 * 1024 * KiB);
    frames.release(small);
    frames.release(large);
    frames.release(Buffer.alloc(512 * KiB));
    expect(frames.freeBuffers).toBe(0);
  });

  it("keeps at most maxFreeBuffers free buffers", () => {
    const frames = pool(3);
    const lent = Array.from({ length: 5 }, () => frames.acquire(512 * KiB));
    for (const frame of lent) frames.release(frame);
    expect(frames.freeBuffers).toBe(3);
    const again = Array.from({ length: 5 }, () => frames.acquire(512 * KiB));
    const reused = again.filter((frame) => lent.some((old) => old.buffer === frame.buffer));
    expect(reused).toHaveLength(3);
  });
});
