/**
 * Chunked snapshot transfer. The sender cuts the snapshot into chunks of at most `snapshotChunkBytes`; the
 * receiver accepts chunks only in order, so after a lost chunk it asks for the offset it expects and the transfer
 * resumes there. When the last chunk arrives the receiver checks the size and the CRC-32C of the whole snapshot
 * and installs it only if both match.
 */
import { crc32c } from "@node-rs/crc32";
import type { Snapshot, SnapshotMetadata } from "../types.js";

/** CRC-32C of snapshot data, as stored in `SnapshotMetadata.checksum`. */
export function snapshotChecksum(data: Uint8Array): number {
  return crc32c(data) >>> 0;
}

/** The chunk of `data` starting at `offset`, at most `chunkBytes` long, and whether it is the last. */
export function chunkAt(data: Uint8Array, offset: number, chunkBytes: number): { data: Uint8Array; last: boolean } {
  if (offset < 0 || offset > data.byteLength) throw new Error(`snapshot transfer: offset ${offset} outside the data`);
  const end = Math.min(data.byteLength, offset + chunkBytes);
  return { data: data.subarray(offset, end), last: end === data.byteLength };
}

/** Result of offering one chunk to a receiver. */
export type ChunkOutcome =
  | { readonly status: "continue"; readonly nextOffset: number }
  | { readonly status: "complete"; readonly snapshot: Snapshot }
  | { readonly status: "rejected"; readonly reason: string };

/** Reassembles one snapshot from chunks on the receiving member. */
export class SnapshotReceiver {
  private readonly buffer: Uint8Array;
  private received = 0;

  constructor(readonly metadata: SnapshotMetadata) {
    if (!Number.isInteger(metadata.sizeBytes) || metadata.sizeBytes < 0) {
      throw new Error(`snapshot transfer: invalid size ${metadata.sizeBytes}`);
    }
    this.buffer = new Uint8Array(metadata.sizeBytes);
  }

  /** Whether a chunk belongs to this snapshot. */
  matches(metadata: SnapshotMetadata): boolean {
    return (
      metadata.index === this.metadata.index &&
      metadata.term === this.metadata.term &&
      metadata.checksum === this.metadata.checksum &&
      metadata.sizeBytes === this.metadata.sizeBytes
    );
  }

  /** Offers a chunk; out-of-order chunks are answered with the offset this receiver expects. */
  offer(offset: number, data: Uint8Array, last: boolean): ChunkOutcome {
    if (offset !== this.received) return { status: "continue", nextOffset: this.received };
    if (this.received + data.byteLength > this.buffer.byteLength) {
      return { status: "rejected", reason: "chunk runs past the announced snapshot size" };
    }
    this.buffer.set(data, this.received);
    this.received += data.byteLength;
    if (!last) return { status: "continue", nextOffset: this.received };
    if (this.received !== this.buffer.byteLength) {
      return { status: "rejected", reason: `received ${this.received} bytes, expected ${this.buffer.byteLength}` };
    }
    const checksum = snapshotChecksum(this.buffer);
    if (checksum !== this.metadata.checksum) {
      return { status: "rejected", reason: `checksum ${checksum} does not match ${this.metadata.checksum}` };
    }
    return { status: "complete", snapshot: { metadata: this.metadata, data: this.buffer } };
  }
}
