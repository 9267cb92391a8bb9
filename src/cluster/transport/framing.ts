/**
 * Length-prefixed msgpack frames: a 4-byte big-endian header followed by the msgpack body. The header's low 31 bits
 * are the body's length; its high bit is the "retained body" flag, by which the sender says that the receiver will
 * likely keep views of this body for long (a snapshot chunk, whose entries a joiner keeps where they arrived). The
 * receiver chooses a body's memory as soon as it has read the header, before the body could tell it whether it will
 * keep it, so the sender says so. The flag is only a hint: a receiver that has no memory set aside for such bodies
 * reads a flagged body as any other, and so does every receiver with a body too small for memory of its own.
 *
 * The maximum frame size is checked on both sides: the encoder refuses to build a larger frame, and the decoder
 * rejects a header announcing one before buffering its body, so a broken or hostile peer can never make us
 * allocate more than `maxFrameBytes` for one frame. What decoding a body may allocate is bounded by the body's size
 * too: its structure is walked before it is decoded (`msgpack-bounds.ts`).
 */
import { Packr, RESET_BUFFER_MODE } from "msgpackr";
import type { BufferPool } from "../../buffers/buffer-pool.js";
import type { RetainedRegions } from "../../buffers/retained-regions.js";
import { FrameTooLargeError, MalformedFrameError } from "./errors.js";
import { assertBoundedMsgpack } from "./msgpack-bounds.js";

/** Bytes of the header (the retained-body flag and the body's length) in front of every frame body. */
export const FRAME_HEADER_BYTES = 4;

/** Default maximum body size of one frame (16 MiB). */
export const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024;

/** The header's high bit: set when the sender expects the receiver to keep views of the body for long. */
const RETAINED_BODY_FLAG = 0x8000_0000;

/** Largest body length the header's low 31 bits can express; the high bit is the retained-body flag. */
const LARGEST_ENCODABLE_BODY_BYTES = 0x7fff_ffff;

// Records would make the encoding depend on structures seen earlier on the stream; plain maps keep every frame
// self-contained, so a frame can be decoded without the history of its connection.
const packr = new Packr({ useRecords: false });

/**
 * Encodes one value as a complete frame (header + body); throws FrameTooLargeError when the body is too large.
 *
 * The packer encodes every value at the start of one buffer it keeps (`RESET_BUFFER_MODE`), and the body is copied
 * into the frame at once. Left to itself, the packer would append each value after the previous one and allocate a
 * new buffer of four times the value's size whenever it ran out, which for a leader streaming 1 MiB snapshot chunks
 * meant another 4 MiB buffer every few chunks for the garbage collector. With a `pool`, the frame's own buffer comes
 * from it too, and the caller hands it back once the frame was written (see buffer-pool.ts). `retainedBody` sets the
 * header's flag saying that the receiver will likely keep views of the body for long (see the module comment).
 */
export function encodeFrame(value: unknown, maxFrameBytes: number, pool?: BufferPool, retainedBody = false): Buffer {
  const body = packr.pack(value, RESET_BUFFER_MODE);
  if (body.length > maxFrameBytes || body.length > LARGEST_ENCODABLE_BODY_BYTES) {
    throw new FrameTooLargeError(body.length, maxFrameBytes);
  }
  // Copy into a buffer of our own: the next encoding overwrites the packer's buffer.
  const frameBytes = FRAME_HEADER_BYTES + body.length;
  const frame = pool === undefined ? Buffer.allocUnsafe(frameBytes) : pool.acquireBuffer(frameBytes);
  frame.writeUInt32BE(retainedBody ? RETAINED_BODY_FLAG + body.length : body.length, 0);
  frame.set(body, FRAME_HEADER_BYTES);
  return frame;
}

/** One value decoded from the stream, with the size of the frame that carried it (header included). */
export interface DecodedFrame {
  readonly value: unknown;
  readonly frameBytes: number;
}

/** Options of a FrameDecoder. */
export interface FrameDecoderOptions {
  /** Largest accepted body; a header announcing more is a protocol error. */
  readonly maxFrameBytes: number;
  /**
   * Where bodies of at least OWN_BODY_MIN_BYTES whose sender flagged them as retained are read into; none: into
   * buffers of their own, as other bodies.
   */
  readonly retainedBodies?: RetainedRegions;
}

/**
 * Bytes of the blocks a decoder reads small frames into, and the most one read takes. A retained value of a small
 * frame keeps its block's memory, as it kept the buffer Node allocated for each read before reads landed in the
 * decoder's memory.
 */
const READ_BLOCK_BYTES = 64 * 1024;

/** A block with less room than this is replaced before the next read, so that reads do not shrink to a few bytes. */
const MIN_READ_BYTES = 8 * 1024;

/**
 * Bytes of the blocks while the largest accepted frame is small (a connection whose handshake has not ended): one such
 * frame, so that a peer that has proved nothing makes the decoder hold about as much as the frame limit says, not a
 * whole block (Node asks for read memory as soon as a connection is accepted, before it has sent a byte).
 */
function blockBytesFor(maxFrameBytes: number): number {
  return Math.min(READ_BLOCK_BYTES, FRAME_HEADER_BYTES + maxFrameBytes);
}

/**
 * Bodies of at least this size are read straight into memory of their own, sized to the body: a snapshot chunk or a
 * large append then arrives where the receiver keeps it, without being copied out of read buffers first. A flagged
 * (retained) body's memory is carved from a region when the decoder has `retainedBodies`.
 */
const OWN_BODY_MIN_BYTES = 32 * 1024;

/**
 * Streaming decoder. A socket reads into the memory it hands out (`readBuffer`, then `commitRead`, which is how a
 * connection uses it through Node's `onread`), or it is fed chunks that arrived elsewhere (`push`, which copies them
 * in). Either way it returns the complete frames each read finishes. After it has thrown once the stream is broken
 * and the decoder must not be used again.
 *
 * Memory it hands out is never written again once a read has filled it, so a receiver may keep views of a frame's
 * values for as long as it likes, as a joiner's engine keeps the entries of the snapshot chunks it receives
 * (`IncomingRestore`). Small frames are read into shared blocks, filled from front to back; a body of at least
 * OWN_BODY_MIN_BYTES is read into memory of exactly its size: a buffer of its own, or, when its sender flagged it as
 * retained and the decoder has `retainedBodies`, the next part of a region, which nothing else is ever handed. So a
 * connection holds at most one block and one body, and a body never larger than `maxFrameBytes`.
 */
export class FrameDecoder {
  private maxFrameBytesValue: number;
  /** Views of the bytes read into blocks that no complete frame holds yet: a header, or part of a small body. */
  private readonly pending: Buffer[] = [];
  private pendingBlockBytes = 0;
  private expectedBodyBytes: number | undefined;
  /** Whether the header of the body expected next carried the retained-body flag. */
  private expectedBodyRetained = false;
  private block = Buffer.allocUnsafe(0);
  private blockFilledBytes = 0;
  /** The body being read into memory of its own, once its header announced at least OWN_BODY_MIN_BYTES. */
  private ownBody: Buffer | undefined;
  private ownBodyFilledBytes = 0;
  /** Length of the memory `readBuffer` handed out last; a read reports at most this many bytes. */
  private handedOutBytes = 0;

  /** Where flagged bodies are read into; see FrameDecoderOptions.retainedBodies. */
  private retainedBodiesValue: RetainedRegions | undefined;

  constructor(options: FrameDecoderOptions) {
    this.maxFrameBytesValue = FrameDecoder.checkedMaxFrameBytes(options.maxFrameBytes);
    this.retainedBodiesValue = options.retainedBodies;
  }

  /**
   * Changes where flagged bodies are read into, for the bodies whose header has not been read yet: a connection
   * honours the flag only once its handshake showed the other side is a broker.
   */
  set retainedBodies(retainedBodies: RetainedRegions | undefined) {
    this.retainedBodiesValue = retainedBodies;
  }

  /** Largest accepted body. */
  get maxFrameBytes(): number {
    return this.maxFrameBytesValue;
  }

  /**
   * Changes the largest accepted body for the frames whose header has not been read yet: a connection accepts only
   * small frames until its handshake has ended, and its normal limit after.
   */
  set maxFrameBytes(maxFrameBytes: number) {
    this.maxFrameBytesValue = FrameDecoder.checkedMaxFrameBytes(maxFrameBytes);
  }

  private static checkedMaxFrameBytes(maxFrameBytes: number): number {
    if (!Number.isSafeInteger(maxFrameBytes) || maxFrameBytes < 1) {
      throw new Error(`maxFrameBytes must be a positive integer, got ${maxFrameBytes}`);
    }
    return maxFrameBytes;
  }

  /** Bytes received but not yet part of a complete frame (never more than one frame's header plus body). */
  get pendingBytes(): number {
    return this.pendingBlockBytes + this.ownBodyFilledBytes;
  }

  /**
   * Memory for the next read: the rest of a large body's own memory, or the free end of the current block. Nothing
   * in it is part of a frame handed out, and `commitRead` must follow before the next call.
   */
  readBuffer(): Uint8Array {
    const expected = this.expectedBodyBytes;
    if (this.ownBody === undefined && expected !== undefined && expected >= OWN_BODY_MIN_BYTES) {
      // The header and the body's first bytes arrived in a block; the body's start moves into its own memory. The
      // memory is touched here, before any read: the kernel would otherwise fault its pages in while it copies a read
      // into them, holding the socket the whole time, and a joiner's transfer went slower although its process did
      // less (see DEVELOPERS.md, "How the transport reads"). A body its sender flagged as retained is carved from a
      // region, so that keeping it does not grow the memory outside V8's heap by a buffer per body (see
      // retained-regions.ts); the region hands its memory out untouched, so it is touched here all the same.
      const retainedBodies = this.retainedBodiesValue;
      const body = (
        this.expectedBodyRetained && retainedBodies !== undefined
          ? retainedBodies.allocate(expected)
          : Buffer.allocUnsafe(expected)
      ).fill(0);
      const parts = this.pending.splice(0);
      for (const part of parts) {
        body.set(part, this.ownBodyFilledBytes);
        this.ownBodyFilledBytes += part.length;
      }
      this.pendingBlockBytes = 0;
      this.ownBody = body;
      // Bytes moved out of the current block were never handed out in a frame, so the next reads may fill their
      // place: a large frame's first read would otherwise use up the block's room every time.
      const first = parts[0];
      if (first !== undefined && parts.every((part) => part.buffer === this.block.buffer)) {
        const movedFromBytes = first.byteOffset - this.block.byteOffset;
        if (movedFromBytes + this.ownBodyFilledBytes !== this.blockFilledBytes) {
          throw new Error("invariant violated: the pending bytes are the last ones read into the block");
        }
        this.blockFilledBytes = movedFromBytes;
      }
    }
    let memory: Buffer;
    if (this.ownBody !== undefined) {
      // Reads into a body are no larger than those into a block, as Node's own reads are.
      memory = this.ownBody.subarray(this.ownBodyFilledBytes, this.ownBodyFilledBytes + READ_BLOCK_BYTES);
    } else {
      const blockBytes = blockBytesFor(this.maxFrameBytesValue);
      if (this.block.length - this.blockFilledBytes < Math.min(MIN_READ_BYTES, blockBytes)) {
        this.block = Buffer.allocUnsafe(blockBytes);
        this.blockFilledBytes = 0;
      }
      memory = this.block.subarray(this.blockFilledBytes);
    }
    if (memory.length === 0) {
      throw new Error("invariant violated: a decoder hands out memory with room for a read");
    }
    this.handedOutBytes = memory.length;
    return memory;
  }

  /**
   * Takes the `byteCount` bytes a read put at the start of the memory `readBuffer` handed out last, and returns every
   * frame they complete, in order; throws a `MalformedFrameError` or `FrameTooLargeError` on a bad frame.
   */
  commitRead(byteCount: number): DecodedFrame[] {
    if (!Number.isSafeInteger(byteCount) || byteCount < 0 || byteCount > this.handedOutBytes) {
      throw new Error(`invariant violated: a read of ${byteCount} bytes into ${this.handedOutBytes} handed out`);
    }
    this.handedOutBytes = 0;
    const body = this.ownBody;
    if (body !== undefined) {
      this.ownBodyFilledBytes += byteCount;
      if (this.ownBodyFilledBytes < body.length) {
        return [];
      }
      this.ownBody = undefined;
      this.ownBodyFilledBytes = 0;
      this.expectedBodyBytes = undefined;
      this.expectedBodyRetained = false;
      return [decodedFrame(body)];
    }
    if (byteCount === 0) {
      return [];
    }
    this.pending.push(this.block.subarray(this.blockFilledBytes, this.blockFilledBytes + byteCount));
    this.blockFilledBytes += byteCount;
    this.pendingBlockBytes += byteCount;
    return this.decodePending();
  }

  /** Consumes a chunk that arrived elsewhere (copied into the decoder's memory) and returns every frame it completes. */
  push(chunk: Uint8Array): DecodedFrame[] {
    const frames: DecodedFrame[] = [];
    let copiedBytes = 0;
    // Each read takes at least one byte, so the loop ends when the chunk runs out.
    while (copiedBytes < chunk.length) {
      const memory = this.readBuffer();
      const readBytes = Math.min(memory.length, chunk.length - copiedBytes);
      memory.set(chunk.subarray(copiedBytes, copiedBytes + readBytes));
      copiedBytes += readBytes;
      frames.push(...this.commitRead(readBytes));
    }
    return frames;
  }

  /** Decodes the frames the bytes read into blocks complete; stops at a large body, which `readBuffer` moves. */
  private decodePending(): DecodedFrame[] {
    const frames: DecodedFrame[] = [];
    // Each iteration consumes at least a header or a body, so the loop ends when the pending bytes run out.
    for (;;) {
      if (this.expectedBodyBytes === undefined) {
        if (this.pendingBlockBytes < FRAME_HEADER_BYTES) {
          break;
        }
        const header = this.take(FRAME_HEADER_BYTES).readUInt32BE(0);
        const bodyBytes = header & LARGEST_ENCODABLE_BODY_BYTES;
        if (bodyBytes > this.maxFrameBytesValue) {
          throw new FrameTooLargeError(bodyBytes, this.maxFrameBytesValue);
        }
        if (bodyBytes === 0) {
          throw new MalformedFrameError("frame with an empty body");
        }
        this.expectedBodyBytes = bodyBytes;
        this.expectedBodyRetained = header >= RETAINED_BODY_FLAG;
      }
      if (this.pendingBlockBytes < this.expectedBodyBytes) {
        break;
      }
      const body = this.take(this.expectedBodyBytes);
      this.expectedBodyBytes = undefined;
      this.expectedBodyRetained = false;
      frames.push(decodedFrame(body));
    }
    return frames;
  }

  /** Removes and returns the next `byteCount` pending bytes; concatenates only when they span blocks. */
  private take(byteCount: number): Buffer {
    const first = this.pending[0];
    if (first === undefined) {
      throw new Error("invariant violated: take() called with nothing pending");
    }
    this.pendingBlockBytes -= byteCount;
    if (first.length > byteCount) {
      this.pending[0] = first.subarray(byteCount);
      return first.subarray(0, byteCount);
    }
    if (first.length === byteCount) {
      this.pending.shift();
      return first;
    }
    const result = Buffer.allocUnsafe(byteCount);
    let copiedBytes = 0;
    while (copiedBytes < byteCount) {
      const part = this.pending[0];
      if (part === undefined) {
        throw new Error("invariant violated: fewer pending bytes than counted");
      }
      const neededBytes = byteCount - copiedBytes;
      if (part.length <= neededBytes) {
        result.set(part, copiedBytes);
        copiedBytes += part.length;
        this.pending.shift();
      } else {
        result.set(part.subarray(0, neededBytes), copiedBytes);
        copiedBytes += neededBytes;
        this.pending[0] = part.subarray(neededBytes);
      }
    }
    return result;
  }
}

/** Decodes one complete frame body. */
function decodedFrame(body: Buffer): DecodedFrame {
  assertBoundedMsgpack(body);
  let value: unknown;
  try {
    value = packr.unpack(body);
  } catch (error) {
    throw new MalformedFrameError(`malformed frame body: ${(error as Error).message}`);
  }
  return { value, frameBytes: FRAME_HEADER_BYTES + body.length };
}
