/**
 * The engine of a replica receiving a leader's snapshot, rebuilt while the snapshot's chunks arrive, so installing it
 * needs no second pass over its bytes.
 *
 * The driver hands over the chunks of each receipt as the core accepted them (`accept`) and decodes them later, one
 * at a time (`decodeNext`) or all at once (`decodeAll`). Handing over and decoding are apart because the best moment
 * to decode is while the chunks' own write is being made durable: the replica's thread would otherwise sit idle
 * through that wait, and the leader cannot send more before the answers, which wait for it. What a wait leaves is
 * decoded once the answers have left, so no more than one receipt's chunks are ever queued here.
 *
 * A chunk that does not continue the restore exactly, or one that does not decode, ends the restore; the install then
 * reads the stored snapshot back instead, which fails loudly if the snapshot is damaged. The bytes decoded are the
 * ones the core checksummed and the storage writes, and the restore is only used once the storage verified the whole
 * snapshot, so decoding chunks whose write is still in flight is safe: if the write fails, the replica fails with it.
 *
 * The chunks are given to the restore (`pushGiven`), which keeps the restored messages' entries where they lie in the
 * chunks' memory instead of copying them. That memory is the received frame's, which nothing writes again: the storage
 * writes a copy of each chunk, and the core only reads them to checksum.
 */
import type { Logger } from "pino";
import { type EngineSnapshotRestorer, PartitionEngine } from "../engine/index.js";
import type { SnapshotChunk, SnapshotMetadata, SnapshotReceipt } from "../raft/index.js";
import { sameSnapshot } from "../raft/index.js";
import { boundedReason } from "./bounded-reason.js";

/** A restore under way: one snapshot's chunks handed over from byte 0, decoded up to the first still queued. */
interface RestoreUnderWay {
  readonly metadata: SnapshotMetadata;
  readonly restorer: EngineSnapshotRestorer;
  /** Chunks handed over, in order; those from `nextQueued` on are not decoded yet. */
  queued: SnapshotChunk[];
  /** Position in `queued` of the next chunk to decode. */
  nextQueued: number;
  /** Offset just past the last chunk handed over: the next chunk must start there. */
  handedOverBytes: number;
}

/** Rebuilds a replica's engine from a snapshot being received (see the module comment). */
export class IncomingRestore {
  private underWay: RestoreUnderWay | null = null;

  constructor(
    private readonly partitionId: number,
    private readonly logger: Logger,
  ) {}

  /** Whether a restore is under way (chunks from byte 0 of some snapshot were handed over). */
  get active(): boolean {
    return this.underWay !== null;
  }

  /**
   * Hands over the chunks of a receipt, in the order the storage holds them. A chunk at byte 0 starts a new restore
   * (a new snapshot, or the same one started over); a receipt of another snapshot, or one the core restarted, ends
   * the restore under way.
   */
  accept(receipt: SnapshotReceipt): void {
    let restore = this.underWay;
    if (restore !== null && (receipt.restart || !sameSnapshot(restore.metadata, receipt.metadata))) restore = null;
    for (const chunk of receipt.chunks) {
      if (chunk.offset === 0) {
        restore = {
          metadata: receipt.metadata,
          restorer: PartitionEngine.restorer(),
          queued: [],
          nextQueued: 0,
          handedOverBytes: 0,
        };
      }
      if (restore === null) continue;
      if (chunk.offset !== restore.handedOverBytes) {
        restore = null;
        continue;
      }
      restore.queued.push(chunk);
      restore.handedOverBytes += chunk.data.byteLength;
    }
    this.underWay = restore;
  }

  /** Decodes the first chunk still queued, if any; returns whether more are queued after it. */
  decodeNext(): boolean {
    const restore = this.underWay;
    if (restore === null) return false;
    const chunk = restore.queued[restore.nextQueued];
    if (chunk === undefined) return false;
    restore.nextQueued += 1;
    if (restore.nextQueued === restore.queued.length) {
      restore.queued = [];
      restore.nextQueued = 0;
    }
    try {
      restore.restorer.pushGiven(chunk.data);
    } catch (error) {
      this.logger.warn(
        { partitionId: this.partitionId, snapshotIndex: restore.metadata.index, reason: boundedReason(error) },
        "a snapshot being received does not decode; its install will read it back",
      );
      this.underWay = null;
      return false;
    }
    return restore.nextQueued < restore.queued.length;
  }

  /** Decodes every chunk still queued. */
  decodeAll(): void {
    // Bounded: each call decodes one queued chunk or ends the restore.
    while (this.decodeNext()) {}
  }

  /** The engine built from every byte of `snapshot`, or null; ends the restore either way. */
  finish(snapshot: SnapshotMetadata): PartitionEngine | null {
    this.decodeAll();
    const restore = this.underWay;
    this.underWay = null;
    if (
      restore === null ||
      !sameSnapshot(restore.metadata, snapshot) ||
      restore.handedOverBytes !== snapshot.sizeBytes
    ) {
      return null;
    }
    try {
      return restore.restorer.finish();
    } catch (error) {
      this.logger.warn(
        { partitionId: this.partitionId, snapshotIndex: snapshot.index, reason: boundedReason(error) },
        "a received snapshot does not decode; its install reads it back",
      );
      return null;
    }
  }

  /** Ends the restore under way without an engine (the storage gave its receipt up). */
  abandon(): void {
    this.underWay = null;
  }
}
