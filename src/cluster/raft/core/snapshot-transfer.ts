/**
 * Chunked snapshot transfer with flow control, without either end holding the snapshot in memory.
 *
 * Sender (`SnapshotTransfer`, one per member the leader sends a snapshot to): chunks of at most `chunkBytes` are read
 * from the leader's storage as they are sent, and at most `windowChunks` of them are in flight, i.e. sent beyond the
 * offset the member acknowledged. An acknowledgement of a higher offset slides the window; one at or below the
 * acknowledged offset is usually stale (a duplicate, a late answer, or the member repeating the offset it expects after
 * an out-of-order chunk) and changes nothing at once. Nothing but a timeout makes the sender send a chunk again: when
 * no acknowledgement moved the window for `resendTicks` ticks, the window is sent again from the acknowledged offset,
 * or from a lower offset when the member's latest answer named one: a member that set aside stored chunks that did
 * not verify (`MemberStorage.damageFoundOnOpen`) holds less than it acknowledged, and would otherwise refuse every
 * chunk sent from the acknowledged offset for good. Retransmissions are therefore bounded by one window per timeout,
 * however many answers are lost, duplicated or late.
 *
 * Receiver (`SnapshotReceiver`): accepts chunks only in order, each continuing where the bytes received so far end,
 * and keeps a running CRC-32C of them rather than the bytes themselves: the accepted chunks go to the storage in the
 * `Ready`, and are acknowledged once stored (a storage may acknowledge chunks still being written, which a crash can
 * lose: the restarted member then names a lower offset, as after damage). When the last chunk arrives the running checksum is compared with
 * the snapshot's, so a mismatch is found without reading the stored snapshot back. Each accepted chunk's own CRC-32C
 * is computed once, here: the running checksum is derived from it, and the storage seals the stored chunk with it,
 * so a received byte is checksummed once, not twice.
 */
import { crc32c } from "@node-rs/crc32";
import { combineCrc32c } from "../crc32c-combine.js";
import type { IncomingSnapshot, SnapshotMetadata } from "../types.js";

/** CRC-32C of snapshot data, as stored in `SnapshotMetadata.checksum`. */
export function snapshotChecksum(data: Uint8Array): number {
  return crc32c(data) >>> 0;
}

/** The CRC-32C of the bytes behind `checksum` followed by `data` (the checksum of no bytes is 0). */
export function continueChecksum(checksum: number, data: Uint8Array): number {
  return crc32c(data, checksum) >>> 0;
}

/** Whether two metadata describe the same snapshot. */
export function sameSnapshot(left: SnapshotMetadata, right: SnapshotMetadata): boolean {
  return (
    left.index === right.index &&
    left.term === right.term &&
    left.checksum === right.checksum &&
    left.sizeBytes === right.sizeBytes
  );
}

/** A byte range of a snapshot to send as one chunk. */
export interface ChunkRange {
  readonly offset: number;
  readonly length: number;
  /** Whether the range ends the snapshot. */
  readonly last: boolean;
}

/** The leader's side of one snapshot transfer to one member; see the module comment. */
export class SnapshotTransfer {
  /** Bytes the member acknowledged as stored: it expects the chunk starting here next. */
  private acknowledged = 0;
  /** Start of the next chunk to send; the chunks in [acknowledged, next) are in flight. */
  private next = 0;
  /** Where the chunks in flight were cut from: they start at `cutFrom` plus multiples of `chunkBytes`. */
  private cutFrom = 0;
  /** Whether the chunk ending the snapshot was sent since the window was last rewound (an empty snapshot has one). */
  private lastSent = false;
  /** Ticks since an acknowledgement last moved the window or the window was last sent again. */
  private ticksWithoutProgress = 0;
  /** The offset below the acknowledged one that the member's latest answer expects, or null (module comment). */
  private memberExpectsBelow: number | null = null;

  constructor(
    readonly metadata: SnapshotMetadata,
    private readonly chunkBytes: number,
    private readonly windowChunks: number,
  ) {
    if (!Number.isSafeInteger(metadata.sizeBytes) || metadata.sizeBytes < 0) {
      throw new Error(`snapshot transfer: invalid size ${metadata.sizeBytes}`);
    }
    if (!Number.isSafeInteger(chunkBytes) || chunkBytes < 1) throw new Error("snapshot transfer: chunkBytes < 1");
    if (!Number.isSafeInteger(windowChunks) || windowChunks < 1) {
      throw new Error("snapshot transfer: windowChunks < 1");
    }
  }

  /** Bytes the member acknowledged as stored. */
  get acknowledgedOffset(): number {
    return this.acknowledged;
  }

  /** Start of the next chunk to send. */
  get nextOffset(): number {
    return this.next;
  }

  /** Chunks sent beyond the acknowledged offset and not acknowledged yet (at most the window). */
  get chunksInFlight(): number {
    if (this.lastSent && this.metadata.sizeBytes === 0) return 1;
    return Math.ceil((this.next - this.acknowledged) / this.chunkBytes);
  }

  /**
   * Takes the next chunk to send and counts it as in flight, or returns null when the window is full or every chunk
   * is in flight. Chunks are cut from the acknowledged offset on, so each in-flight chunk is `chunkBytes` long except
   * the one ending the snapshot, and the window bounds the bytes in flight to `windowChunks * chunkBytes`.
   */
  takeChunk(): ChunkRange | null {
    if (this.lastSent || this.chunksInFlight >= this.windowChunks) return null;
    const length = Math.min(this.chunkBytes, this.metadata.sizeBytes - this.next);
    const chunk: ChunkRange = { offset: this.next, length, last: this.next + length === this.metadata.sizeBytes };
    this.next += length;
    this.lastSent = chunk.last;
    return chunk;
  }

  /**
   * Applies an acknowledgement that the member stored the bytes before `offset`; returns whether it moved the
   * window. Stale offsets (at or below the acknowledged one) change nothing. `offset` must lie inside the snapshot:
   * its end is acknowledged with `installed`, never with an offset, so an offset there (or beyond) is ignored too.
   */
  acknowledge(offset: number): boolean {
    if (!Number.isSafeInteger(offset) || offset < 0 || offset >= this.metadata.sizeBytes) return false;
    if (offset <= this.acknowledged) {
      this.memberExpectsBelow = offset < this.acknowledged ? offset : null;
      return false;
    }
    this.acknowledged = offset;
    this.memberExpectsBelow = null;
    this.ticksWithoutProgress = 0;
    // The member may hold more than this transfer sent (it resumed a receipt that a crash or an earlier leader left),
    // or expect an offset no chunk in flight starts at: either way, continue right where it expects.
    if (offset > this.next || (offset - this.cutFrom) % this.chunkBytes !== 0) this.rewind(offset);
    return true;
  }

  /**
   * Counts one tick; returns true when the resend timeout expired and the window was rewound to be sent again, from
   * the acknowledged offset or from the lower one the member's latest answer expects.
   */
  tick(resendTicks: number): boolean {
    this.ticksWithoutProgress++;
    if (this.ticksWithoutProgress < resendTicks) return false;
    if (this.memberExpectsBelow !== null) {
      this.acknowledged = this.memberExpectsBelow;
      this.memberExpectsBelow = null;
    }
    this.rewind(this.acknowledged);
    return true;
  }

  /** Starts over from byte 0 (the member rejected the snapshot and discarded what it had received). */
  restart(): void {
    this.acknowledged = 0;
    this.memberExpectsBelow = null;
    this.rewind(0);
  }

  private rewind(offset: number): void {
    this.next = offset;
    this.cutFrom = offset;
    this.lastSent = false;
    this.ticksWithoutProgress = 0;
  }
}

/** Result of offering one chunk to a receiver. */
export type ChunkOutcome =
  /** Not the chunk expected next (out of order or a duplicate): nothing to write; answer with the expected offset. */
  | { readonly status: "ignored"; readonly expectedOffset: number }
  /**
   * The chunk expected next, but its bytes do not match the checksum the leader sent with them (damaged on the way):
   * nothing to write; answer with the expected offset, so that the leader sends it again.
   */
  | { readonly status: "damaged"; readonly expectedOffset: number }
  /** The chunk continues the snapshot: write it, then acknowledge `nextOffset`. `chunkChecksum`: its CRC-32C. */
  | { readonly status: "accepted"; readonly nextOffset: number; readonly chunkChecksum: number }
  /**
   * Every byte is received and the checksum matches: install the snapshot. `chunkAccepted` says whether the offered
   * chunk completed it (it must then be written first, `chunkChecksum` being its CRC-32C) or the bytes were all
   * received before.
   */
  | { readonly status: "complete"; readonly chunkAccepted: true; readonly chunkChecksum: number }
  | { readonly status: "complete"; readonly chunkAccepted: false }
  /**
   * The sender must start over. `cause`: `checksum` when every byte arrived but the whole snapshot's checksum failed
   * (bytes changed on the way), `framing` when a chunk does not fit the announced size (a sender that is wrong, not
   * data that is damaged).
   */
  | { readonly status: "rejected"; readonly cause: "checksum" | "framing"; readonly reason: string };

/** The receiving side of one snapshot; holds its progress and running checksum, never its bytes. */
export class SnapshotReceiver {
  private received: number;
  private checksum: number;

  /** A receipt from byte 0, or one resuming what the storage holds durably (`PersistedState.incomingSnapshot`). */
  constructor(
    readonly metadata: SnapshotMetadata,
    resumeFrom: Pick<IncomingSnapshot, "receivedBytes" | "receivedChecksum"> = {
      receivedBytes: 0,
      receivedChecksum: 0,
    },
  ) {
    if (!Number.isSafeInteger(metadata.sizeBytes) || metadata.sizeBytes < 0) {
      throw new Error(`snapshot transfer: invalid size ${metadata.sizeBytes}`);
    }
    if (
      !Number.isSafeInteger(resumeFrom.receivedBytes) ||
      resumeFrom.receivedBytes < 0 ||
      resumeFrom.receivedBytes > metadata.sizeBytes
    ) {
      throw new Error(`snapshot transfer: cannot resume at ${resumeFrom.receivedBytes} of ${metadata.sizeBytes}`);
    }
    this.received = resumeFrom.receivedBytes;
    this.checksum = resumeFrom.receivedChecksum;
  }

  /** Bytes accepted so far (durable once the batches carrying them are). */
  get receivedBytes(): number {
    return this.received;
  }

  /** Whether a chunk belongs to this snapshot. */
  matches(metadata: SnapshotMetadata): boolean {
    return sameSnapshot(metadata, this.metadata);
  }

  /**
   * Offers a chunk. Chunks are accepted only in order; any other is answered with the offset expected, and so is a
   * chunk whose bytes differ from `checksum` (the CRC-32C its sender computed; none from senders of earlier versions).
   * When every byte was received before (a restart after the last chunk was stored), any chunk completes the receipt.
   */
  offer(offset: number, data: Uint8Array, last: boolean, checksum?: number): ChunkOutcome {
    const size = this.metadata.sizeBytes;
    if (this.received === size && size > 0) return this.verify(null);
    if (offset !== this.received) return { status: "ignored", expectedOffset: this.received };
    const end = offset + data.byteLength;
    if (end > size) {
      return { status: "rejected", cause: "framing", reason: `chunk ends at ${end}, beyond the snapshot size ${size}` };
    }
    if (last !== (end === size)) {
      return {
        status: "rejected",
        cause: "framing",
        reason: `chunk ending at ${end} is${last ? "" : " not"} marked last (size ${size})`,
      };
    }
    if (data.byteLength === 0 && size > 0) return { status: "rejected", cause: "framing", reason: "empty chunk" };
    const chunkChecksum = crc32c(data) >>> 0;
    if (checksum !== undefined && checksum !== chunkChecksum) {
      return { status: "damaged", expectedOffset: this.received };
    }
    this.received = end;
    this.checksum = combineCrc32c(this.checksum, chunkChecksum, data.byteLength);
    if (end < size) return { status: "accepted", nextOffset: end, chunkChecksum };
    return this.verify(chunkChecksum);
  }

  /** Completes the receipt if the running checksum matches; `acceptedChunkChecksum`: of the chunk that completed it. */
  private verify(acceptedChunkChecksum: number | null): ChunkOutcome {
    if (this.checksum !== this.metadata.checksum) {
      return {
        status: "rejected",
        cause: "checksum",
        reason: `checksum ${this.checksum} does not match ${this.metadata.checksum}`,
      };
    }
    if (acceptedChunkChecksum === null) return { status: "complete", chunkAccepted: false };
    return { status: "complete", chunkAccepted: true, chunkChecksum: acceptedChunkChecksum };
  }
}
