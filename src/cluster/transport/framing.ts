/**
 * Length-prefixed msgpack frames: a 4-byte big-endian unsigned body length followed by the msgpack body.
 *
 * The maximum frame size is checked on both sides: the encoder refuses to build a larger frame, and the decoder
 * rejects a header announcing one before buffering its body, so a broken or hostile peer can never make us
 * allocate more than `maxFrameBytes` for one frame.
 */
import { Packr, RESET_BUFFER_MODE } from "msgpackr";
import type { BufferPool } from "../../buffers/buffer-pool.js";
import { FrameTooLargeError, ProtocolError } from "./errors.js";

/** Bytes of the length prefix in front of every frame body. */
export const FRAME_HEADER_BYTES = 4;

/** Default maximum body size of one frame (16 MiB). */
export const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024;

/** Largest body length the 32-bit header can express. */
const LARGEST_ENCODABLE_BODY_BYTES = 0xffff_ffff;

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
 * from it too, and the caller hands it back once the frame was written (see buffer-pool.ts).
 */
export function encodeFrame(value: unknown, maxFrameBytes: number, pool?: BufferPool): Buffer {
  const body = packr.pack(value, RESET_BUFFER_MODE);
  if (body.length > maxFrameBytes || body.length > LARGEST_ENCODABLE_BODY_BYTES) {
    throw new FrameTooLargeError(body.length, maxFrameBytes);
  }
  // Copy into a buffer of our own: the next encoding overwrites the packer's buffer.
  const frameBytes = FRAME_HEADER_BYTES + body.length;
  const frame = pool === undefined ? Buffer.allocUnsafe(frameBytes) : pool.acquireBuffer(frameBytes);
  frame.writeUInt32BE(body.length, 0);
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
}

/**
 * Streaming decoder: feed it chunks as they arrive (split or coalesced anywhere) and it returns the complete
 * frames they finish. After it has thrown once the stream is broken and the decoder must not be used again.
 */
export class FrameDecoder {
  private maxFrameBytesValue: number;
  private readonly chunks: Buffer[] = [];
  private bufferedBytes = 0;
  private expectedBodyBytes: number | undefined;

  constructor(options: FrameDecoderOptions) {
    this.maxFrameBytesValue = FrameDecoder.checkedMaxFrameBytes(options.maxFrameBytes);
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
    return this.bufferedBytes;
  }

  /** Consumes a chunk and returns every frame it completes, in order; throws a ProtocolError on a bad frame. */
  push(chunk: Uint8Array): DecodedFrame[] {
    const frames: DecodedFrame[] = [];
    if (chunk.length === 0) {
      return frames;
    }
    this.chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
    this.bufferedBytes += chunk.length;
    // Each iteration consumes at least a header or a body, so the loop ends when the buffered bytes run out.
    for (;;) {
      if (this.expectedBodyBytes === undefined) {
        if (this.bufferedBytes < FRAME_HEADER_BYTES) {
          break;
        }
        const bodyBytes = this.take(FRAME_HEADER_BYTES).readUInt32BE(0);
        if (bodyBytes > this.maxFrameBytesValue) {
          throw new FrameTooLargeError(bodyBytes, this.maxFrameBytesValue);
        }
        if (bodyBytes === 0) {
          throw new ProtocolError("frame with an empty body");
        }
        this.expectedBodyBytes = bodyBytes;
      }
      if (this.bufferedBytes < this.expectedBodyBytes) {
        break;
      }
      const body = this.take(this.expectedBodyBytes);
      this.expectedBodyBytes = undefined;
      let value: unknown;
      try {
        value = packr.unpack(body);
      } catch (error) {
        throw new ProtocolError(`malformed frame body: ${(error as Error).message}`);
      }
      frames.push({ value, frameBytes: FRAME_HEADER_BYTES + body.length });
    }
    return frames;
  }

  /**
   * Removes and returns the next `byteCount` buffered bytes; concatenates only when they span chunks. The result is
   * never written again, by this decoder or by the socket (each read arrives in a buffer of its own): a receiver may
   * keep views of a frame's values for as long as it likes, as a joiner's engine keeps the entries of the snapshot
   * chunks it receives (`IncomingRestore`). Reading into memory that is reused would break that.
   */
  private take(byteCount: number): Buffer {
    const first = this.chunks[0];
    if (first === undefined) {
      throw new Error("invariant violated: take() called with no buffered chunk");
    }
    this.bufferedBytes -= byteCount;
    if (first.length > byteCount) {
      this.chunks[0] = first.subarray(byteCount);
      return first.subarray(0, byteCount);
    }
    if (first.length === byteCount) {
      this.chunks.shift();
      return first;
    }
    const result = Buffer.allocUnsafe(byteCount);
    let copiedBytes = 0;
    while (copiedBytes < byteCount) {
      const chunk = this.chunks[0];
      if (chunk === undefined) {
        throw new Error("invariant violated: fewer buffered bytes than counted");
      }
      const neededBytes = byteCount - copiedBytes;
      if (chunk.length <= neededBytes) {
        result.set(chunk, copiedBytes);
        copiedBytes += chunk.length;
        this.chunks.shift();
      } else {
        result.set(chunk.subarray(0, neededBytes), copiedBytes);
        copiedBytes += neededBytes;
        this.chunks[0] = chunk.subarray(neededBytes);
      }
    }
    return result;
  }
}
