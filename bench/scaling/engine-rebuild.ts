/**
 * The least a joining replica must do besides moving bytes: rebuild the partition's engine from a snapshot of the
 * state it joins. This process builds an engine holding `<messages>` messages whose variables are `<payload bytes>`
 * each (the shape of the benchmark's fill), encodes its snapshot, then restores an engine from that snapshot handed
 * over in 1 MiB pieces, as a joiner does while chunks arrive, with nothing else to do: no network, no disk, no Raft.
 * Like a joiner's received chunks, each piece is memory of its own that the restore is given (`pushGiven`) and may
 * keep its messages' entries in; the pieces are cut before the clock starts, as a joiner's arrive by the transfer.
 *
 *   node --import tsx bench/scaling/engine-rebuild.ts <messages> <payload bytes>
 *     prints `rebuilt <snapshot bytes> <ms> <cpu ms>` (ms and cpu ms: of the restore alone)
 */
import { performance } from "node:perf_hooks";
import { DEFAULT_TENANT_ID, encodeRecord, PartitionEngine } from "../../src/cluster/engine/index.js";

/** Size of the pieces the restore is handed: the snapshot chunk size a joiner receives. */
const PIECE_BYTES = 1024 * 1024;

function main(messages: number, payloadBytes: number): void {
  if (!Number.isSafeInteger(messages) || messages < 1 || !Number.isSafeInteger(payloadBytes) || payloadBytes < 0) {
    throw new Error("usage: engine-rebuild.ts <messages> <payload bytes>");
  }
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
  const snapshot = engine.snapshot();
  const pieces: Uint8Array[] = [];
  for (let offset = 0; offset < snapshot.byteLength; offset += PIECE_BYTES) {
    pieces.push(snapshot.slice(offset, offset + PIECE_BYTES));
  }
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
  console.log(`rebuilt ${snapshot.byteLength} ${elapsedMs.toFixed(1)} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`);
}

main(Number(process.argv[2]), Number(process.argv[3]));
