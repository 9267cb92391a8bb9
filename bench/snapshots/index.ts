/**
 * Benchmark `snapshots`: what one replica's snapshot of a large state costs its broker, side by side with the
 * physical limit of writing and reading the same bytes on this machine, measured in the same run.
 *
 * One engine holds FLOWPLANE_BENCH_STATE_MB (default 340, a third of the scaling and backup benchmarks' 1 GiB: one
 * partition's replica) of buffered messages of FLOWPLANE_BENCH_MESSAGE_BYTES (default 16,000) variables each, as
 * those benchmarks fill it. Then, FLOWPLANE_BENCH_ROUNDS times (default 3), each step after the same scratch write
 * of the state's bytes, deleted at once, so that no step writes into memory the page cache did not use lately
 * (bench/support/page-cache.ts says why that matters on this machine):
 *
 * 1. **Snapshot**: what `PartitionReplica.takeSnapshot` does, on a real storage in a temporary directory: the
 *    storage reads the snapshot out of the engine straight into its chunks, a MiB per turn of the event loop, and the
 *    thread pool appends them to the snapshot's file, synced once at the end; then the snapshot is installed. Its
 *    time, this thread's processor time (the broker's thread pays it), and the longest the event loop waited
 *    meanwhile (what a peer's heartbeat or a client's publication would wait).
 * 2. **Write limit**: the same bytes, held in memory, written to a file of the same disk in 1 MiB writes and synced.
 * 3. **Restore**: what a replica opening over that snapshot does: the stored chunks read a chunk per turn, verified,
 *    and decoded into an engine.
 * 4. **Read limit**: the file of step 2 read into memory in 1 MiB reads, each into memory of its own (a restored
 *    state is held in memory too).
 * 5. **Send**: what a leader reads to send the stored snapshot to a joining member, in a storage opened anew: every
 *    chunk read and verified (`snapshotChunk`), its buffer handed back for the next read as the sender does once the
 *    chunk is on its way. Nothing is kept, so its limit is the read limit without memory of its own per block.
 *
 * The ratios printed last are each step's time over its limit's (the fastest round of each).
 */
import { closeSync, fsyncSync, openSync, readSync, rmSync, writeSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { DEFAULT_TENANT_ID, encodeRecord, PartitionEngine } from "../../src/cluster/engine/index.js";
import { StorageEnvironment } from "../../src/cluster/raft/storage/environment.js";
import { MemberStorage } from "../../src/cluster/raft/storage/member-storage.js";
import { recyclePageCache } from "../support/page-cache.js";
import { formatNumber, printTable } from "../support/report.js";

const MiB = 1024 * 1024;
const stateBytes = environmentInteger("FLOWPLANE_BENCH_STATE_MB", 340) * MiB;
const messageBytes = environmentInteger("FLOWPLANE_BENCH_MESSAGE_BYTES", 16_000);
const rounds = environmentInteger("FLOWPLANE_BENCH_ROUNDS", 3);
/** Size of the writes and reads of the limits: the storage's chunk size. */
const blockBytes = MiB;

function environmentInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${text}`);
  return value;
}

/** One measured step: its milliseconds, this thread's processor milliseconds, and the longest event-loop wait. */
interface Measured {
  readonly ms: number;
  readonly cpuMs: number;
  readonly longestWaitMs: number;
}

/** Runs `step` and measures it (see `Measured`). */
async function measure(step: () => Promise<void> | void): Promise<Measured> {
  const waits = monitorEventLoopDelay({ resolution: 1 });
  waits.enable();
  const cpuAtStart = process.cpuUsage();
  const startedAtMs = performance.now();
  await step();
  const ms = performance.now() - startedAtMs;
  const cpu = process.cpuUsage(cpuAtStart);
  waits.disable();
  return { ms, cpuMs: (cpu.user + cpu.system) / 1000, longestWaitMs: waits.max / 1e6 };
}

/** An engine of about `stateBytes` of buffered messages, applied as publications. */
function filledEngine(): PartitionEngine {
  const engine = new PartitionEngine({ partitionId: 1 });
  const payload = "x".repeat(messageBytes);
  const publishedAtMs = Date.now();
  const messages = Math.max(1, Math.round(stateBytes / (messageBytes + 80)));
  for (let index = 1; index <= messages; index += 1) {
    engine.apply(
      index,
      encodeRecord({
        kind: "publishMessage",
        name: "fill",
        correlationKey: `key-${index}`,
        timeToLiveMs: 86_400_000,
        variables: { payload },
        tenantId: DEFAULT_TENANT_ID,
        publishedAtMs,
      }),
    );
  }
  return engine;
}

/** Takes one snapshot of `engine` into a fresh storage under `directory`, as a replica does, and closes it. */
async function takeSnapshot(engine: PartitionEngine, directory: string): Promise<Measured> {
  const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
  const storage = MemberStorage.openIn(environment, { scope: 1 });
  // A log of one entry for the snapshot to cover (what the storage does with a longer log is not measured here).
  const index = 1;
  await storage.append([{ index, term: 1, kind: "normal", data: new Uint8Array(1) }], null);
  const measured = await measure(async () => {
    const encoder = engine.snapshotEncoder();
    const prepared = await storage.prepareSnapshotFrom(encoder);
    await storage.installSnapshot({
      metadata: {
        index,
        term: 1,
        configuration: { members: [{ id: 1, role: "voter", priority: 1 }] },
        sizeBytes: prepared.sizeBytes,
        checksum: prepared.checksum,
      },
      data: prepared,
    });
  });
  await storage.close();
  await environment.close();
  return measured;
}

/** Restores an engine from the snapshot stored under `directory`, as a replica opening there does. */
async function restoreSnapshot(directory: string, expectedMessages: number): Promise<Measured> {
  const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
  const storage = MemberStorage.openIn(environment, { scope: 1 });
  const measured = await measure(async () => {
    const restorer = PartitionEngine.restorer();
    await storage.readSnapshotInTurns((data) => restorer.push(data));
    const restored = restorer.finish();
    if (restored.bufferedMessageCount !== expectedMessages) {
      throw new Error(`restored ${restored.bufferedMessageCount} messages of ${expectedMessages}`);
    }
  });
  await storage.close();
  await environment.close();
  return measured;
}

/** Reads the snapshot stored under `directory` a chunk at a time, as a leader sending it does, and counts its bytes. */
async function sendReads(directory: string, sizeBytes: number): Promise<Measured> {
  const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
  const storage = MemberStorage.openIn(environment, { scope: 1 });
  const metadata = storage.snapshotMetadata();
  if (metadata === null || metadata.sizeBytes !== sizeBytes) throw new Error("no snapshot of the expected size stored");
  const measured = await measure(() => {
    for (let offset = 0; offset < sizeBytes; ) {
      const read = storage.snapshotChunk(metadata, offset, blockBytes);
      if (read === null || read.data.byteLength === 0) throw new Error(`no snapshot chunk at ${offset}`);
      offset += read.data.byteLength;
      storage.recycleSnapshotChunk(read.data);
    }
  });
  await storage.close();
  await environment.close();
  return measured;
}

/** Writes `bytes` to a new file at `path` in blocks and syncs it. */
function writeLimit(bytes: Uint8Array, path: string): Promise<Measured> {
  return measure(() => {
    const descriptor = openSync(path, "w", 0o600);
    try {
      for (let offset = 0; offset < bytes.byteLength; offset += blockBytes) {
        writeSync(descriptor, bytes, offset, Math.min(blockBytes, bytes.byteLength - offset));
      }
      fsyncSync(descriptor);
    } finally {
      closeSync(descriptor);
    }
  });
}

/** Reads the file at `path` into memory in blocks, each block into memory of its own. */
function readLimit(path: string, sizeBytes: number): Promise<Measured> {
  return measure(() => {
    const descriptor = openSync(path, "r");
    const blocks: Buffer[] = [];
    try {
      for (let offset = 0; offset < sizeBytes; offset += blockBytes) {
        const block = Buffer.allocUnsafeSlow(Math.min(blockBytes, sizeBytes - offset));
        if (readSync(descriptor, block, 0, block.byteLength, offset) !== block.byteLength) {
          throw new Error(`short read of ${path} at ${offset}`);
        }
        blocks.push(block);
      }
    } finally {
      closeSync(descriptor);
    }
  });
}

function fastest(measured: readonly Measured[]): Measured {
  return measured.reduce((best, next) => (next.ms < best.ms ? next : best));
}

/** Runs the benchmark (see the module comment). */
export async function run(): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), "flowplane-bench-snapshots-"));
  try {
    console.log(`Filling an engine with about ${formatNumber(stateBytes / MiB)} MiB of ${messageBytes}-byte messages…`);
    const engine = filledEngine();
    const bytes = engine.snapshot();
    console.log(
      `${engine.bufferedMessageCount} messages, a snapshot of ${formatNumber(bytes.byteLength / MiB, 1)} MiB; ${rounds} rounds`,
    );
    const steps = {
      snapshot: [] as Measured[],
      write: [] as Measured[],
      restore: [] as Measured[],
      read: [] as Measured[],
      send: [] as Measured[],
    };
    for (let round = 0; round < rounds; round += 1) {
      const directory = join(root, `round-${round}`);
      const file = join(root, `limit-${round}`);
      recyclePageCache(root, bytes.byteLength);
      steps.snapshot.push(await takeSnapshot(engine, directory));
      recyclePageCache(root, bytes.byteLength);
      steps.write.push(await writeLimit(bytes, file));
      recyclePageCache(root, bytes.byteLength);
      steps.restore.push(await restoreSnapshot(directory, engine.bufferedMessageCount));
      recyclePageCache(root, bytes.byteLength);
      steps.read.push(await readLimit(file, bytes.byteLength));
      recyclePageCache(root, bytes.byteLength);
      steps.send.push(await sendReads(directory, bytes.byteLength));
      rmSync(directory, { recursive: true, force: true });
      rmSync(file, { force: true });
    }
    const rows = Object.entries(steps).map(([name, measured]) => {
      const best = fastest(measured);
      return [
        name,
        measured.map((step) => formatNumber(step.ms)).join(", "),
        formatNumber(best.cpuMs),
        // The limits run in one synchronous go: they hold the event loop throughout, by design.
        name === "write" || name === "read" ? "(all)" : formatNumber(best.longestWaitMs, 1),
        formatNumber(bytes.byteLength / MiB / (best.ms / 1000)),
      ];
    });
    printTable(["step", "ms (each round)", "cpu ms (fastest)", "longest event-loop wait ms", "MiB/s"], rows);
    const snapshotRatio = fastest(steps.snapshot).ms / fastest(steps.write).ms;
    const restoreRatio = fastest(steps.restore).ms / fastest(steps.read).ms;
    console.log(`snapshot ÷ write limit: ${formatNumber(snapshotRatio, 2)}`);
    console.log(`restore ÷ read limit: ${formatNumber(restoreRatio, 2)}`);
    console.log(`send ÷ read limit: ${formatNumber(fastest(steps.send).ms / fastest(steps.read).ms, 2)}`);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
