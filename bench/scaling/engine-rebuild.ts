/**
 * The least a joining replica must do besides moving bytes: rebuild the partition's engine from a snapshot of the
 * state it joins. This process builds an engine holding `<messages>` messages whose variables are `<payload bytes>`
 * each (the shape of the benchmark's fill), encodes its snapshot, then restores an engine from that snapshot handed
 * over in 1 MiB pieces, as a joiner does while chunks arrive, with nothing else to do: no network, no disk, no Raft.
 * Like a joiner's received chunks, each piece is memory of its own that the restore is given (`pushGiven`) and may
 * keep its messages' entries in; the pieces are cut before the restore's clock starts, as a joiner's arrive by the
 * transfer. Their memory is new, though, and touching new memory for the first time is work of its own that a joiner
 * pays wherever it keeps the state (its frames', or slabs' if it copied): the pieces are allocated and touched under a
 * clock of their own first, and the snapshot's bytes copied into them afterwards (as a socket's reads fill memory).
 *
 *   node --import tsx bench/scaling/engine-rebuild.ts <messages> <payload bytes> [<snapshot file>]
 *     writes the snapshot to <snapshot file> when given (the source of tcp-copy.ts's restoring copy), prints
 *     `touched <snapshot bytes> <ms> <cpu ms>` (of allocating and first touching the pieces' memory), then
 *     `rebuilt <snapshot bytes> <ms> <cpu ms>` (of the restore alone)
 *   node --expose-gc --import tsx bench/scaling/engine-rebuild.ts <messages> <payload bytes>
 *     also prints `held <heap bytes per message> <ms of a full collection>`: what the restored engine adds to the
 *     JavaScript heap per message, and how long one collection of the whole heap then takes (each one visits every
 *     message, and a joiner's growing memory starts one about every 64 MB)
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { DEFAULT_TENANT_ID, encodeRecord, PartitionEngine } from "../../src/cluster/engine/index.js";

/** Size of the pieces the restore is handed: the snapshot chunk size a joiner receives. */
const PIECE_BYTES = 1024 * 1024;

function main(messages: number, payloadBytes: number, snapshotFile: string | undefined): void {
  if (!Number.isSafeInteger(messages) || messages < 1 || !Number.isSafeInteger(payloadBytes) || payloadBytes < 0) {
    throw new Error("usage: engine-rebuild.ts <messages> <payload bytes> [<snapshot file>]");
  }
  const snapshot = filledSnapshot(messages, payloadBytes);
  if (snapshotFile !== undefined) writeFileSync(snapshotFile, snapshot);
  const touchStartedAtMs = performance.now();
  const cpuAtTouch = process.cpuUsage();
  const pieces: Uint8Array[] = [];
  for (let offset = 0; offset < snapshot.byteLength; offset += PIECE_BYTES) {
    pieces.push(Buffer.allocUnsafeSlow(Math.min(PIECE_BYTES, snapshot.byteLength - offset)).fill(0));
  }
  const touchCpu = process.cpuUsage(cpuAtTouch);
  const touchMs = performance.now() - touchStartedAtMs;
  console.log(`touched ${snapshot.byteLength} ${touchMs.toFixed(1)} ${cpuMs(touchCpu).toFixed(1)}`);
  for (const [index, piece] of pieces.entries())
    piece.set(snapshot.subarray(index * PIECE_BYTES, index * PIECE_BYTES + piece.length));
  const collect = (globalThis as { gc?: () => void }).gc;
  collect?.();
  const heapBeforeBytes = process.memoryUsage().heapUsed;
  const startedAtMs = performance.now();
  const cpuAtStart = process.cpuUsage();
  const restorer = PartitionEngine.restorer();
  for (const piece of pieces) restorer.pushGiven(piece);
  const restored = restorer.finish();
  const cpu = process.cpuUsage(cpuAtStart);
  const elapsedMs = performance.now() - startedAtMs;
  if (restored.bufferedMessageCount !== messages) {
    throw new Error(`restored ${restored.bufferedMessageCount} messages of ${messages}`);
  }
  console.log(`rebuilt ${snapshot.byteLength} ${elapsedMs.toFixed(1)} ${cpuMs(cpu).toFixed(1)}`);
  if (collect !== undefined) {
    collect();
    const collectionStartedAtMs = performance.now();
    collect();
    const collectionMs = performance.now() - collectionStartedAtMs;
    // Read after the collections, so that the restored engine is alive through them.
    const heapBytesPerMessage = (process.memoryUsage().heapUsed - heapBeforeBytes) / restored.bufferedMessageCount;
    console.log(`held ${heapBytesPerMessage.toFixed(0)} ${collectionMs.toFixed(1)}`);
  }
}

/** Milliseconds of processor time in a `process.cpuUsage` difference. */
function cpuMs(usage: NodeJS.CpuUsage): number {
  return (usage.user + usage.system) / 1000;
}

/**
 * The snapshot of an engine holding `messages` of `payloadBytes` variables each; the engine is left to the collector,
 * so that only the restored one is measured.
 */
function filledSnapshot(messages: number, payloadBytes: number): Uint8Array {
  const engine = new PartitionEngine({ partitionId: 1 });
  const payload = "x".repeat(payloadBytes);
  const publishedAtMs = Date.now();
  for (let index = 1; index <= messages; index += 1) {
    const record = encodeRecord({
      kind: "publishMessage",
      name: "fill",
      correlationKey: "",
      timeToLiveMs: 86_400_000,
      variables: { payload },
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs,
    });
    engine.apply(index, record);
  }
  return engine.snapshot();
}

main(Number(process.argv[2]), Number(process.argv[3]), process.argv[4]);
