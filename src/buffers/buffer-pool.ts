/**
 * Large buffers handed back once their reader is done, for the next user of about the same size.
 *
 * Snapshot transfers move a chunk (1 MiB) at a time: the leader reads each chunk from its storage and encodes a frame
 * of it, the member stores each one it receives. A fresh buffer for each is memory outside the JavaScript heap, and
 * V8 answers a fast growth of such memory with full garbage collections of the whole heap, which a broker holding a
 * large partition pays for dearly (a leader spent about as much time collecting as sending). With a pool, a transfer
 * cycles through a few buffers instead.
 *
 * Ownership is explicit: `acquire` hands out a view that no one else holds, and only `release` of that very view
 * (the object, not just its memory) gives the memory back, once; a view released late, after its memory was handed
 * out again, is ignored rather than freeing memory someone still uses. A view that is never released is simply left
 * to the garbage collector. The free buffers are bounded in count and bytes; the least recently released go first,
 * so sizes that stopped being used do not keep the room from sizes in use.
 */

/** Options of a BufferPool. */
export interface BufferPoolOptions {
  /** Buffers smaller than this are allocated as usual (small allocations are cheap and come from Node.js's pool). */
  readonly minBytes: number;
  /** Largest buffer taken from the pool; larger ones are allocated as usual. */
  readonly maxBytes: number;
  /** Capacities are rounded up to a multiple of this, so that buffers of nearly the same size share memory. */
  readonly capacityStepBytes: number;
  /** Free buffers kept at most. */
  readonly maxFreeBuffers: number;
  /** Bytes of free buffers kept at most. */
  readonly maxFreeBytes: number;
}

/** A pool of buffers; see the module comment. */
export class BufferPool {
  /** Free memory, least recently released first. */
  private readonly free: ArrayBuffer[] = [];
  private freeBytesValue = 0;
  private reusedCount = 0;
  /** Views handed out and not released yet. */
  private readonly lent = new WeakSet<Uint8Array>();

  constructor(private readonly options: BufferPoolOptions) {
    const { minBytes, maxBytes, capacityStepBytes, maxFreeBuffers, maxFreeBytes } = options;
    for (const [name, value] of Object.entries({ minBytes, maxBytes, capacityStepBytes })) {
      if (!Number.isSafeInteger(value) || value < 1) throw new Error(`buffer pool: ${name} must be a positive integer`);
    }
    if (minBytes > maxBytes) throw new Error("buffer pool: minBytes must not exceed maxBytes");
    for (const [name, value] of Object.entries({ maxFreeBuffers, maxFreeBytes })) {
      if (!Number.isSafeInteger(value) || value < 0) throw new Error(`buffer pool: ${name} must be >= 0`);
    }
  }

  /** Buffers acquired into memory an earlier buffer released, for tests and metrics. */
  get reusedBuffers(): number {
    return this.reusedCount;
  }

  /** Free buffers kept now, for tests and metrics. */
  get freeBuffers(): number {
    return this.free.length;
  }

  /** Bytes of the free buffers kept now. */
  get freeBytes(): number {
    return this.freeBytesValue;
  }

  /** A Uint8Array of exactly `bytes`: from the pool (uninitialized) for sizes it serves, else a new one (zeroed). */
  acquire(bytes: number): Uint8Array {
    const memory = this.take(bytes);
    if (memory === undefined) return new Uint8Array(bytes);
    const view = new Uint8Array(memory, 0, bytes);
    this.lent.add(view);
    return view;
  }

  /** A Buffer of exactly `bytes` (uninitialized): from the pool for sizes it serves, else a new one. */
  acquireBuffer(bytes: number): Buffer {
    const memory = this.take(bytes);
    if (memory === undefined) return Buffer.allocUnsafe(bytes);
    const view = Buffer.from(memory, 0, bytes);
    this.lent.add(view);
    return view;
  }

  /** Memory for a buffer of `bytes`, or undefined for sizes the pool does not serve. */
  private take(bytes: number): ArrayBuffer | undefined {
    if (bytes < this.options.minBytes || bytes > this.options.maxBytes) return undefined;
    const capacity = Math.ceil(bytes / this.options.capacityStepBytes) * this.options.capacityStepBytes;
    // Bounded by `maxFreeBuffers`; the most recently released fitting buffer is the warmest.
    for (let position = this.free.length - 1; position >= 0; position -= 1) {
      if (this.free[position]?.byteLength === capacity) {
        const memory = this.free.splice(position, 1)[0] as ArrayBuffer;
        this.freeBytesValue -= capacity;
        this.reusedCount += 1;
        return memory;
      }
    }
    return new ArrayBuffer(capacity);
  }

  /** Takes back a view `acquire` returned, once nothing reads it any more; anything else is ignored. */
  release(view: Uint8Array): void {
    if (!this.lent.delete(view)) return;
    const memory = view.buffer as ArrayBuffer;
    if (this.options.maxFreeBuffers === 0 || memory.byteLength > this.options.maxFreeBytes) return;
    this.free.push(memory);
    this.freeBytesValue += memory.byteLength;
    // Bounded: each step drops one of the free buffers.
    while (this.free.length > this.options.maxFreeBuffers || this.freeBytesValue > this.options.maxFreeBytes) {
      const oldest = this.free.shift() as ArrayBuffer;
      this.freeBytesValue -= oldest.byteLength;
    }
  }
}
