/**
 * The disk of one simulated broker: a real `StorageEnvironment` (journal and LMDB) in a temporary directory, with the
 * simulation standing between the replica's storage and the files.
 *
 * Every commit the storage submits, and every batch of snapshot chunks it writes ahead of a record, first waits in a
 * queue of this disk for a seeded latency in ticks (zero for most), in the order submitted; only then does it reach
 * the real environment, which writes and syncs it (commits on the main thread, `synchronousCommit`). A crash drops
 * what is still queued: those writes never reached the files, so they are lost exactly as unsynced writes are, and
 * the replica that submitted them never learns their fate. What reached the environment is durable by the time the
 * harness can crash anything, because a crash only happens between two steps, when the harness has waited for every
 * commit and chunk write in the environment to finish. Optionally a crash also leaves a torn record at the journal's
 * tail (the first bytes of the lost commit), which recovery must cut away.
 *
 * The chunk writes run on LMDB's writer thread and finish at a time the simulation does not control; the disk holds
 * their completion back until the harness releases it (`releaseSettledChunkWrites`) at a point where the cluster is settled,
 * so the replica sees them at the same point of every replay. The appends and syncs of received snapshots' files go
 * through the same queue and the same hold.
 *
 * Appends to a snapshot file are written but not synced, so a crash of the machine may lose any part of them: the disk
 * remembers how much of each file its last sync covered, and a crash cuts every file's unsynced bytes at a seeded
 * length, as a machine losing its page cache part way through would.
 */
import { closeSync, fstatSync, openSync, readdirSync, readSync, statSync, truncateSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { SeededRandom } from "../../src/cluster/raft/core/random.js";
import {
  JOURNAL_DIRECTORY_NAME,
  SNAPSHOT_FILES_DIRECTORY_NAME,
  StorageEnvironment,
} from "../../src/cluster/raft/storage/environment.js";

/** How long writes wait before they reach the files. */
export interface DiskLatency {
  /** Chance that a write waits no tick at all. */
  readonly immediateProbability: number;
  /** Longest wait of the others, in ticks (at least 1). */
  readonly maxTicks: number;
}

/** Size of each journal segment: small, so segments roll over and old ones are deleted within one run. */
export const JOURNAL_SEGMENT_BYTES = 64 * 1024;

/** Most writes waiting in a disk's queue; the driver has one batch outstanding at a time, so a few are expected. */
const MAX_QUEUED_WRITES = 1_000;

interface QueuedWrite {
  readonly dueTick: number;
  readonly start: () => void;
}

interface ChunkWriteInFlight {
  readonly written: Promise<void>;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/** One broker's disk; see the module comment. */
export class SimulatedReplicaDisk {
  readonly environment: StorageEnvironment;
  private readonly commitQueue: QueuedWrite[] = [];
  private readonly chunkQueue: QueuedWrite[] = [];
  private readonly chunkWritesInFlight: ChunkWriteInFlight[] = [];
  private commitsInFlightCount = 0;
  private crashed = false;
  /** Set for a clean shutdown: the writes the replica waits for go to the files at once. */
  private flushing = false;
  /** Writes dropped by the crash (for the statistics and the torn tail). */
  lostWrites = 0;
  /** Bytes of snapshot files that crashes cut because no sync covered them. */
  snapshotFileBytesCut = 0;
  /** Bytes of each snapshot file (by name) that its last sync covered. */
  private readonly syncedFileBytes = new Map<string, number>();

  private constructor(
    readonly directory: string,
    private readonly commitRandom: SeededRandom,
    private readonly chunkRandom: SeededRandom,
    private readonly latency: DiskLatency,
    private readonly currentTick: () => number,
  ) {
    this.environment = StorageEnvironment.open({
      directory,
      synchronousCommit: true,
      journalSegmentBytes: JOURNAL_SEGMENT_BYTES,
    });
    const submit = this.environment.submit.bind(this.environment);
    this.environment.submit = (write, options) => this.queueCommit(() => submit(write, options));
    // What the files hold when the disk opens is on the disk already: an earlier crash cut what it lost.
    for (const name of readdirSync(this.snapshotFilesDirectory)) {
      this.syncedFileBytes.set(name, statSync(join(this.snapshotFilesDirectory, name)).size);
    }
    const writeSnapshotFile = this.environment.writeSnapshotFile.bind(this.environment);
    const syncSnapshotFile = this.environment.syncSnapshotFile.bind(this.environment);
    this.environment.writeSnapshotFile = (scope, slot, chunks) =>
      this.queueChunkWrite(() => writeSnapshotFile(scope, slot, chunks));
    this.environment.syncSnapshotFile = (scope, slot) =>
      this.queueChunkWrite(async () => {
        await syncSnapshotFile(scope, slot);
        const name = `${scope}-${slot}.snapshot`;
        this.syncedFileBytes.set(name, statSync(join(this.snapshotFilesDirectory, name)).size);
      });
  }

  /** Directory of the environment's snapshot files. */
  private get snapshotFilesDirectory(): string {
    return join(this.directory, SNAPSHOT_FILES_DIRECTORY_NAME);
  }

  /** Opens the environment in `directory` (creating it when missing) behind a simulated queue. */
  static open(
    directory: string,
    random: SeededRandom,
    latency: DiskLatency,
    currentTick: () => number,
  ): SimulatedReplicaDisk {
    return new SimulatedReplicaDisk(directory, random.fork(), random.fork(), latency, currentTick);
  }

  /** Commits handed to the environment whose transaction has not finished. */
  get commitsInFlight(): number {
    return this.commitsInFlightCount;
  }

  /** Whether chunk writes handed to LMDB's writer thread have not been released to the replica yet. */
  get chunkWritesPending(): boolean {
    return this.chunkWritesInFlight.length > 0;
  }

  /** Writes still waiting in the queues. */
  get queuedWrites(): number {
    return this.commitQueue.length + this.chunkQueue.length;
  }

  /** Hands the queued writes that are due by now to the environment, in order. */
  release(): void {
    const tick = this.currentTick();
    for (const queue of [this.commitQueue, this.chunkQueue]) {
      while (queue.length > 0 && (this.flushing || (queue[0] as QueuedWrite).dueTick <= tick)) {
        (queue.shift() as QueuedWrite).start();
      }
    }
  }

  /** From now on writes go to the files at once (a clean shutdown, or a replica being destroyed). */
  flush(): void {
    this.flushing = true;
    this.release();
  }

  /** Resolves once every chunk write handed to LMDB's writer thread finished (successfully or not). */
  async chunkWritesSettled(): Promise<void> {
    await Promise.allSettled(this.chunkWritesInFlight.map((write) => write.written));
  }

  /** Lets the replica see the chunk writes that finished complete, in the order they were made. */
  releaseSettledChunkWrites(): void {
    for (const write of this.chunkWritesInFlight.splice(0)) write.written.then(write.resolve, write.reject);
  }

  /**
   * The broker crashed: queued writes are dropped (never written), and the environment is closed once idle, which it
   * is between two steps. With `tearTail`, a lost commit also leaves the first bytes of a record at the journal's
   * tail, as a write cut short by the crash would. Resolves with whether it did.
   */
  async crash(tearTail: boolean, random: SeededRandom): Promise<boolean> {
    if (this.commitsInFlightCount > 0 || this.chunkWritesInFlight.length > 0) {
      throw new Error("harness: a disk crashed while a write was in flight in its environment");
    }
    this.crashed = true;
    const lostCommits = this.commitQueue.length;
    this.lostWrites += lostCommits + this.chunkQueue.length;
    this.commitQueue.length = 0;
    this.chunkQueue.length = 0;
    await this.environment.close();
    this.cutUnsyncedSnapshotFiles(random);
    return tearTail && lostCommits > 0 && tearJournalTail(join(this.directory, JOURNAL_DIRECTORY_NAME), random);
  }

  /** Closes the environment after a clean shutdown (everything queued was flushed). */
  async close(): Promise<void> {
    this.flush();
    await this.environment.close();
  }

  /** Cuts each snapshot file's bytes beyond its last sync at a seeded length (see the module comment). */
  private cutUnsyncedSnapshotFiles(random: SeededRandom): void {
    for (const name of readdirSync(this.snapshotFilesDirectory).sort()) {
      const path = join(this.snapshotFilesDirectory, name);
      const sizeBytes = statSync(path).size;
      const syncedBytes = Math.min(sizeBytes, this.syncedFileBytes.get(name) ?? 0);
      if (sizeBytes === syncedBytes) continue;
      const keptBytes = syncedBytes + random.nextInt(sizeBytes - syncedBytes + 1);
      truncateSync(path, keptBytes);
      this.snapshotFileBytesCut += sizeBytes - keptBytes;
    }
  }

  private drawLatency(random: SeededRandom): number {
    if (this.flushing || random.chance(this.latency.immediateProbability)) return 0;
    return 1 + random.nextInt(Math.max(1, this.latency.maxTicks));
  }

  private queueCommit(submit: () => Promise<void>): Promise<void> {
    if (this.crashed) return new Promise(() => {});
    const dueTick = this.currentTick() + this.drawLatency(this.commitRandom);
    const start = (): Promise<void> => {
      this.commitsInFlightCount += 1;
      const committed = submit();
      const done = (): void => {
        this.commitsInFlightCount -= 1;
      };
      committed.then(done, done);
      return committed;
    };
    if (this.commitQueue.length === 0 && dueTick <= this.currentTick()) return start();
    if (this.commitQueue.length >= MAX_QUEUED_WRITES) throw new Error("harness: too many writes queued on a disk");
    return new Promise((resolve, reject) => {
      this.commitQueue.push({ dueTick, start: () => void start().then(resolve, reject) });
    });
  }

  private queueChunkWrite(write: () => Promise<void>): Promise<void> {
    if (this.crashed) return new Promise(() => {});
    const dueTick = this.currentTick() + this.drawLatency(this.chunkRandom);
    return new Promise((resolve, reject) => {
      const start = (): void => {
        this.chunkWritesInFlight.push({ written: write(), resolve, reject });
      };
      if (this.chunkQueue.length === 0 && dueTick <= this.currentTick()) {
        start();
        return;
      }
      if (this.chunkQueue.length >= MAX_QUEUED_WRITES) throw new Error("harness: too many writes queued on a disk");
      this.chunkQueue.push({ dueTick, start });
    });
  }
}

const SEGMENT_HEADER_BYTES = 16;
const RECORD_HEADER_BYTES = 8;

/**
 * Writes the first bytes of a record after the last intact record of the newest journal segment: a length and a
 * checksum that do not match what follows, as a crash in the middle of a write leaves them. Returns whether it did
 * (a segment with no room left is not torn).
 */
function tearJournalTail(journalDirectory: string, random: SeededRandom): boolean {
  const segments = readdirSync(journalDirectory)
    .filter((name) => name.endsWith(".journal"))
    .sort();
  const newest = segments[segments.length - 1];
  if (newest === undefined) return false;
  const fd = openSync(join(journalDirectory, newest), "r+");
  try {
    const sizeBytes = fstatSync(fd).size;
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    let offset = SEGMENT_HEADER_BYTES;
    // Bounded: every record moves the offset forward by at least its header, and the file's size bounds it.
    while (offset + RECORD_HEADER_BYTES <= sizeBytes) {
      if (readSync(fd, header, 0, RECORD_HEADER_BYTES, offset) < RECORD_HEADER_BYTES) return false;
      const payloadBytes = header.readUInt32LE(0);
      if (payloadBytes === 0) break;
      offset += RECORD_HEADER_BYTES + payloadBytes;
    }
    const room = sizeBytes - offset - RECORD_HEADER_BYTES;
    if (room < 2) return false;
    const claimedBytes = 16 + random.nextInt(512);
    const written = 1 + random.nextInt(Math.min(room - 1, claimedBytes));
    const torn = Buffer.alloc(RECORD_HEADER_BYTES + written);
    torn.writeUInt32LE(claimedBytes, 0);
    torn.writeUInt32LE(random.nextUint32(), 4);
    for (let position = RECORD_HEADER_BYTES; position < torn.byteLength; position += 1) {
      torn[position] = random.nextInt(256);
    }
    writeSync(fd, torn, 0, torn.byteLength, offset);
    return true;
  } finally {
    closeSync(fd);
  }
}
