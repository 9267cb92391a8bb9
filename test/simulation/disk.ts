/**
 * Simulated disk of one member: what is on it is durable. The harness holds a ready batch "in flight" until its
 * simulated write latency has passed; a crash before then loses it, exactly like unsynced writes. A snapshot being
 * received is kept as its chunks with its running checksum, like the broker's storage keeps it, so a restarted member
 * resumes its receipt where the durable bytes end.
 */
import { crc32c } from "@node-rs/crc32";
import {
  type Compaction,
  compactionSnapshot,
  type Entry,
  type HardState,
  type IncomingSnapshot,
  type PersistedState,
  type RaftStorage,
  type Snapshot,
  type SnapshotChunkRead,
  type SnapshotMetadata,
  type SnapshotReceipt,
} from "../../src/cluster/raft/types.js";

interface IncomingChunks {
  readonly metadata: SnapshotMetadata;
  receivedBytes: number;
  receivedChecksum: number;
  readonly chunks: Uint8Array[];
}

/** In-memory durable storage implementing the shared storage contract. */
export class SimulatedDisk implements RaftStorage {
  private log: Entry[] = [];
  /** Index of `log[0]`. */
  private offset = 1;
  private hard: HardState = { term: 0, votedFor: null, commitIndex: 0 };
  private latestSnapshot: Snapshot | null = null;
  private incoming: IncomingChunks | null = null;

  /** Reads the durable state synchronously (the harness is single-threaded and deterministic). */
  loadSync(): PersistedState {
    return {
      hardState: this.hard,
      snapshot: this.latestSnapshot?.metadata ?? null,
      firstIndex: this.offset,
      lastIndex: this.lastIndex(),
      incomingSnapshot: this.incomingSnapshot(),
    };
  }

  load(): Promise<PersistedState> {
    return Promise.resolve(this.loadSync());
  }

  /** Last durable index (the snapshot's when the log is empty). */
  lastIndex(): number {
    return this.offset + this.log.length - 1;
  }

  /** Index of the durable snapshot (0 when none). */
  snapshotIndex(): number {
    return this.latestSnapshot?.metadata.index ?? 0;
  }

  /** Term of the last durable entry. */
  lastTerm(): number {
    return this.term(this.lastIndex()) ?? 0;
  }

  /** The durable hard state. */
  hardState(): HardState {
    return this.hard;
  }

  appendSync(entries: readonly Entry[], hardState: HardState | null): void {
    const first = entries[0];
    if (first) {
      if (first.index < this.offset || first.index > this.lastIndex() + 1) {
        throw new Error(`disk: append at ${first.index} outside [${this.offset}, ${this.lastIndex() + 1}]`);
      }
      this.log.length = first.index - this.offset;
      this.log.push(...entries);
    }
    if (hardState) this.hard = hardState;
  }

  append(entries: readonly Entry[], hardState: HardState | null): Promise<void> {
    this.appendSync(entries, hardState);
    return Promise.resolve();
  }

  entries(fromIndex: number, toIndex: number): Entry[] {
    if (fromIndex < this.offset || toIndex > this.lastIndex() + 1 || fromIndex > toIndex) {
      throw new Error(`disk: entries [${fromIndex}, ${toIndex}) outside [${this.offset}, ${this.lastIndex() + 1})`);
    }
    return this.log.slice(fromIndex - this.offset, toIndex - this.offset);
  }

  term(index: number): number | null {
    if (this.latestSnapshot && index === this.latestSnapshot.metadata.index) return this.latestSnapshot.metadata.term;
    if (index === 0) return 0;
    if (index < this.offset || index > this.lastIndex()) return null;
    return this.log[index - this.offset]?.term ?? null;
  }

  /**
   * Stores a snapshot. When the log holds the snapshot's last entry only the covered entries go; otherwise the
   * whole log goes, because entries after a snapshot that does not match the log may conflict with it. A snapshot
   * being received that the new one covers is discarded.
   */
  installSnapshotSync(snapshot: Snapshot): void {
    const { index, term } = snapshot.metadata;
    if (index <= this.snapshotIndex()) return;
    if (this.term(index) === term && index <= this.lastIndex()) {
      this.log = this.log.slice(index + 1 - this.offset);
    } else {
      this.log = [];
    }
    this.offset = index + 1;
    this.latestSnapshot = snapshot;
    if (this.incoming && this.incoming.metadata.index <= index) this.incoming = null;
  }

  installSnapshot(snapshot: Compaction): Promise<void> {
    this.installSnapshotSync(compactionSnapshot(snapshot));
    return Promise.resolve();
  }

  compact(index: number): Promise<void> {
    if (index >= this.offset) {
      this.log = this.log.slice(index + 1 - this.offset);
      this.offset = index + 1;
    }
    return Promise.resolve();
  }

  snapshot(): Snapshot | null {
    return this.latestSnapshot;
  }

  snapshotMetadata(): SnapshotMetadata | null {
    return this.latestSnapshot?.metadata ?? null;
  }

  /** A copy of the range, as a read from a disk would be: the caller never aliases the stored snapshot. */
  snapshotChunk(metadata: SnapshotMetadata, offset: number, maxBytes: number): SnapshotChunkRead | null {
    const stored = this.latestSnapshot;
    if (!stored || !sameSnapshot(stored.metadata, metadata)) return null;
    if (offset < 0 || offset > stored.data.byteLength || maxBytes < 1) {
      throw new Error(`disk: snapshot range of ${maxBytes} bytes at ${offset} outside ${stored.data.byteLength}`);
    }
    const data = stored.data.slice(offset, offset + maxBytes);
    return { data, checksum: crc32c(data) >>> 0 };
  }

  /** The snapshot being received and how much of it is durable, or null. */
  incomingSnapshot(): IncomingSnapshot | null {
    const incoming = this.incoming;
    if (!incoming) return null;
    return {
      metadata: incoming.metadata,
      receivedBytes: incoming.receivedBytes,
      receivedChecksum: incoming.receivedChecksum,
    };
  }

  /** Writes a receipt's chunks; the core's view of the received bytes must match the disk's exactly. */
  receiveSnapshotChunksSync(receipt: SnapshotReceipt): void {
    if (receipt.restart) {
      this.incoming = { metadata: receipt.metadata, receivedBytes: 0, receivedChecksum: 0, chunks: [] };
    }
    const incoming = this.incoming;
    if (!incoming || !sameSnapshot(incoming.metadata, receipt.metadata)) {
      throw new Error(`disk: chunks of snapshot ${receipt.metadata.index}, which is not being received`);
    }
    for (const chunk of receipt.chunks) {
      if (chunk.offset !== incoming.receivedBytes || chunk.data.byteLength === 0) {
        throw new Error(`disk: received chunk at ${chunk.offset} does not continue at ${incoming.receivedBytes}`);
      }
      const receivedBytes = incoming.receivedBytes + chunk.data.byteLength;
      if (receivedBytes > incoming.metadata.sizeBytes) {
        throw new Error(`disk: received chunk ends at ${receivedBytes}, beyond ${incoming.metadata.sizeBytes}`);
      }
      // The real storage seals the stored chunk with the checksum the core computed, so it must be the data's.
      if (chunk.checksum !== crc32c(chunk.data) >>> 0) {
        throw new Error(`disk: received chunk at ${chunk.offset} carries checksum ${chunk.checksum}, not its data's`);
      }
      incoming.chunks.push(chunk.data.slice());
      incoming.receivedBytes = receivedBytes;
      incoming.receivedChecksum = crc32c(chunk.data, incoming.receivedChecksum) >>> 0;
    }
  }

  receiveSnapshotChunks(receipt: SnapshotReceipt): Promise<void> {
    this.receiveSnapshotChunksSync(receipt);
    return Promise.resolve();
  }

  /** Verifies the complete received snapshot's size and checksum and installs it; discards it on a mismatch. */
  finishSnapshotReceiveSync(): SnapshotMetadata {
    const incoming = this.incoming;
    if (!incoming) throw new Error("disk: no snapshot is being received");
    const { metadata } = incoming;
    if (incoming.receivedBytes !== metadata.sizeBytes) {
      throw new Error(`disk: snapshot incomplete: ${incoming.receivedBytes} of ${metadata.sizeBytes} bytes`);
    }
    if (incoming.receivedChecksum !== metadata.checksum) {
      this.incoming = null;
      throw new Error(
        `disk: received snapshot checksum ${incoming.receivedChecksum} differs from ${metadata.checksum}`,
      );
    }
    const data = new Uint8Array(metadata.sizeBytes);
    let position = 0;
    for (const chunk of incoming.chunks) {
      data.set(chunk, position);
      position += chunk.byteLength;
    }
    this.incoming = null;
    this.installSnapshotSync({ metadata, data });
    return metadata;
  }

  finishSnapshotReceive(): Promise<SnapshotMetadata> {
    try {
      return Promise.resolve(this.finishSnapshotReceiveSync());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

function sameSnapshot(left: SnapshotMetadata, right: SnapshotMetadata): boolean {
  return (
    left.index === right.index &&
    left.term === right.term &&
    left.sizeBytes === right.sizeBytes &&
    left.checksum === right.checksum
  );
}
