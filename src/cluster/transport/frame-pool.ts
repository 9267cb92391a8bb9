/**
 * Buffers of large outgoing frames, reused once the socket has written them.
 *
 * A leader sending a snapshot encodes a frame of about a chunk (1 MiB) for every chunk. Each fresh buffer of that size
 * is memory outside the JavaScript heap, and V8 answers a fast growth of such memory with full garbage collections
 * of the whole heap, which a broker holding a large partition pays for dearly: a leader spent about as much time
 * collecting as sending. Frames from this pool are handed back when the socket's write of them completed (or
 * failed), so a transfer cycles through a few buffers instead.
 *
 * Ownership is explicit: `acquire` hands a buffer to exactly one frame, and only `release` of that frame returns it.
 * A frame that is dropped instead (its queue discarded when a link closes) is simply left to the garbage collector.
 */

/** Capacities are rounded up to this, so that frames of nearly the same size share buffers. */
const CAPACITY_STEP_BYTES = 64 * 1024;

/** Options of a FramePool. */
export interface FramePoolOptions {
  /** Frames smaller than this are allocated as usual (small allocations come from Node.js's own pool). */
  readonly minFrameBytes: number;
  /** Largest frame taken from the pool; larger ones are allocated as usual. */
  readonly maxFrameBytes: number;
  /** Free buffers kept at most, over all capacities (a bound on the memory an idle pool keeps). */
  readonly maxFreeBuffers: number;
}

/** A pool of frame buffers; see the module comment. */
export class FramePool {
  /** Free buffers by capacity. */
  private readonly free = new Map<number, ArrayBuffer[]>();
  private freeCount = 0;
  private reusedCount = 0;
  /** Buffers handed out and not released yet: a release of anything else is ignored. */
  private readonly lent = new WeakSet<ArrayBuffer>();

  constructor(private readonly options: FramePoolOptions) {
    if (!(options.minFrameBytes >= 1 && options.minFrameBytes <= options.maxFrameBytes)) {
      throw new Error("frame pool: need 1 <= minFrameBytes <= maxFrameBytes");
    }
    if (!Number.isSafeInteger(options.maxFreeBuffers) || options.maxFreeBuffers < 0) {
      throw new Error("frame pool: maxFreeBuffers must be a non-negative integer");
    }
  }

  /** Frames acquired into memory an earlier frame released, for tests and metrics. */
  get reusedFrames(): number {
    return this.reusedCount;
  }

  /** Free buffers kept now, for tests and metrics. */
  get freeBuffers(): number {
    return this.freeCount;
  }

  /** A buffer of exactly `frameBytes` (uninitialized): from the pool for sizes it serves, else a new one. */
  acquire(frameBytes: number): Buffer {
    if (frameBytes < this.options.minFrameBytes || frameBytes > this.options.maxFrameBytes) {
      return Buffer.allocUnsafe(frameBytes);
    }
    const capacity = Math.ceil(frameBytes / CAPACITY_STEP_BYTES) * CAPACITY_STEP_BYTES;
    const buffers = this.free.get(capacity);
    let memory = buffers?.pop();
    if (memory === undefined) {
      memory = new ArrayBuffer(capacity);
    } else {
      this.freeCount -= 1;
      this.reusedCount += 1;
    }
    this.lent.add(memory);
    return Buffer.from(memory, 0, frameBytes);
  }

  /** Takes back the buffer of a frame `acquire` returned, once nothing reads it any more; others are ignored. */
  release(frame: Buffer): void {
    const memory = frame.buffer;
    if (!(memory instanceof ArrayBuffer) || !this.lent.has(memory)) return;
    this.lent.delete(memory);
    if (this.freeCount >= this.options.maxFreeBuffers) return;
    const buffers = this.free.get(memory.byteLength);
    if (buffers === undefined) this.free.set(memory.byteLength, [memory]);
    else buffers.push(memory);
    this.freeCount += 1;
  }
}
