import { crc32c } from "@node-rs/crc32";
import type { Logger } from "pino";
import { describe, expect, it, vi } from "vitest";
import { IncomingRestore } from "../../../src/cluster/broker/incoming-restore.js";
import { DEFAULT_TENANT_ID, encodeRecord, PartitionEngine } from "../../../src/cluster/engine/index.js";
import type { SnapshotMetadata, SnapshotReceipt } from "../../../src/cluster/raft/index.js";

const PARTITION_ID = 2;
const CHUNK_BYTES = 4_096;

/** An engine snapshot of 40 messages of about a kilobyte each: ten chunks and more. */
function engineSnapshot(): { bytes: Uint8Array; metadata: SnapshotMetadata } {
  const engine = new PartitionEngine({ partitionId: PARTITION_ID });
  for (let index = 1; index <= 40; index += 1) {
    const record = encodeRecord({
      kind: "publishMessage",
      name: "order-paid",
      correlationKey: `order-${index}`,
      timeToLiveMs: 86_400_000,
      variables: { note: "n".repeat(1_000) },
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: 1_000,
    });
    engine.apply(index, record);
  }
  const bytes = engine.snapshot();
  const metadata = { index: 40, term: 1, configuration: { members: [] }, sizeBytes: bytes.byteLength, checksum: 0 };
  return { bytes, metadata: metadata as unknown as SnapshotMetadata };
}

/** The receipt of chunks `from` to `to` (exclusive) of `bytes`, cut every `CHUNK_BYTES`. */
function receipt(
  bytes: Uint8Array,
  metadata: SnapshotMetadata,
  from: number,
  to: number,
  restart = false,
): SnapshotReceipt {
  const chunks = [];
  for (let position = from; position < to; position += 1) {
    const data = bytes.subarray(position * CHUNK_BYTES, (position + 1) * CHUNK_BYTES);
    chunks.push({ offset: position * CHUNK_BYTES, data, checksum: crc32c(data) >>> 0 });
  }
  return { metadata, restart, chunks };
}

function chunkCount(bytes: Uint8Array): number {
  return Math.ceil(bytes.byteLength / CHUNK_BYTES);
}

function fakeLogger(): { logger: Logger; warn: ReturnType<typeof vi.fn> } {
  const warn = vi.fn();
  return { logger: { warn } as unknown as Logger, warn };
}

describe("IncomingRestore", () => {
  it("decodes handed-over chunks only when asked, one at a time, and builds the snapshot's engine", () => {
    const { bytes, metadata } = engineSnapshot();
    const count = chunkCount(bytes);
    expect(count).toBeGreaterThan(10);
    const restore = new IncomingRestore(PARTITION_ID, fakeLogger().logger);
    restore.accept(receipt(bytes, metadata, 0, 3, true));
    // Three queued: each call decodes one and says whether more are left.
    expect([restore.decodeNext(), restore.decodeNext(), restore.decodeNext()]).toEqual([true, true, false]);
    expect(restore.decodeNext()).toBe(false);
    restore.accept(receipt(bytes, metadata, 3, count));
    // `finish` decodes what is still queued.
    const engine = restore.finish(metadata);
    expect(engine).not.toBeNull();
    expect(Buffer.from((engine as PartitionEngine).snapshot()).equals(Buffer.from(bytes))).toBe(true);
    expect(restore.active).toBe(false);
  });

  it("keeps the restored messages' entries in received chunks of their own memory, as a transport's frames are", () => {
    const { bytes, metadata } = engineSnapshot();
    // Chunks of 16 KiB: of messages of about a kilobyte, the parts of the two that span a chunk's edges are less than
    // an eighth of it.
    const chunkBytes = 16 * 1024;
    const views = [];
    for (let offset = 0; offset < bytes.byteLength; offset += chunkBytes) {
      const data = bytes.subarray(offset, offset + chunkBytes);
      views.push({ offset, data, checksum: crc32c(data) >>> 0 });
    }
    expect(views.length).toBe(3);
    // Each chunk in memory of its own, as a frame decoded from the socket is.
    const framed = views.map((chunk) => ({ ...chunk, data: chunk.data.slice() }));
    const restore = new IncomingRestore(PARTITION_ID, fakeLogger().logger);
    restore.accept({ metadata, restart: true, chunks: framed });
    const engine = restore.finish(metadata) as PartitionEngine;
    expect(Buffer.from(engine.snapshot()).equals(Buffer.from(bytes))).toBe(true);
    expect(engine.restoredEntryMemory().keptPieceCount).toBe(3);
    // Chunks that are views of a larger buffer are copied from, never kept.
    restore.accept({ metadata, restart: true, chunks: views });
    expect((restore.finish(metadata) as PartitionEngine).restoredEntryMemory().keptPieceCount).toBe(0);
  });

  it("does not decode while handing over: a chunk that does not decode is noticed by decodeNext, which ends the restore", () => {
    const { bytes, metadata } = engineSnapshot();
    const damaged = Uint8Array.from(bytes);
    // The partition id in the document's first field: the restorer refuses another partition's snapshot.
    damaged[2] = 0;
    const { logger, warn } = fakeLogger();
    const restore = new IncomingRestore(PARTITION_ID, logger);
    restore.accept(receipt(damaged, metadata, 0, 2, true));
    expect(warn).not.toHaveBeenCalled();
    expect(restore.decodeNext()).toBe(false);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(restore.active).toBe(false);
    // The rest of that snapshot no longer continues a restore: the install must read the stored snapshot back.
    restore.accept(receipt(damaged, metadata, 2, chunkCount(bytes)));
    expect(restore.finish(metadata)).toBeNull();
  });

  it("ends the restore when a chunk does not continue it exactly, and starts over at a chunk at byte 0", () => {
    const { bytes, metadata } = engineSnapshot();
    const count = chunkCount(bytes);
    const restore = new IncomingRestore(PARTITION_ID, fakeLogger().logger);
    restore.accept(receipt(bytes, metadata, 0, 2, true));
    restore.accept(receipt(bytes, metadata, 3, count));
    expect(restore.finish(metadata)).toBeNull();

    // A receipt the core restarted discards the restore under way, and its chunk at byte 0 begins a new one.
    restore.accept(receipt(bytes, metadata, 0, 4, true));
    restore.decodeAll();
    restore.accept(receipt(bytes, metadata, 0, count, true));
    expect(restore.finish(metadata)?.lastAppliedIndex).toBe(40);
  });

  it("gives no engine for another snapshot, for one not received whole, or after being abandoned", () => {
    const { bytes, metadata } = engineSnapshot();
    const count = chunkCount(bytes);
    const restore = new IncomingRestore(PARTITION_ID, fakeLogger().logger);
    restore.accept(receipt(bytes, metadata, 0, count, true));
    expect(restore.finish({ ...metadata, index: 41 })).toBeNull();

    restore.accept(receipt(bytes, metadata, 0, count - 1, true));
    expect(restore.finish(metadata)).toBeNull();

    restore.accept(receipt(bytes, metadata, 0, count, true));
    restore.abandon();
    expect(restore.active).toBe(false);
    expect(restore.finish(metadata)).toBeNull();
  });

  it("resumed receipts that do not start at byte 0 build nothing: the install reads the stored snapshot instead", () => {
    const { bytes, metadata } = engineSnapshot();
    const restore = new IncomingRestore(PARTITION_ID, fakeLogger().logger);
    restore.accept(receipt(bytes, metadata, 4, chunkCount(bytes), true));
    expect(restore.active).toBe(false);
    expect(restore.finish(metadata)).toBeNull();
  });
});
