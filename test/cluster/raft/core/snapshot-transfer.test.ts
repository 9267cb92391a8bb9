import { describe, expect, it } from "vitest";
import {
  type ChunkRange,
  continueChecksum,
  SnapshotReceiver,
  SnapshotTransfer,
  snapshotChecksum,
} from "../../../../src/cluster/raft/core/snapshot-transfer.js";
import type { SnapshotMetadata } from "../../../../src/cluster/raft/types.js";

const data = Uint8Array.from({ length: 50 }, (_, position) => position * 3);

function metadata(overrides: Partial<SnapshotMetadata> = {}): SnapshotMetadata {
  return {
    index: 10,
    term: 2,
    configuration: { members: [] },
    sizeBytes: 50,
    checksum: snapshotChecksum(data),
    ...overrides,
  };
}

/** Every chunk the transfer lets go right now. */
function takeAll(transfer: SnapshotTransfer): ChunkRange[] {
  const chunks: ChunkRange[] = [];
  for (let chunk = transfer.takeChunk(); chunk !== null; chunk = transfer.takeChunk()) chunks.push(chunk);
  return chunks;
}

describe("snapshot transfer: sender", () => {
  it("keeps at most a window of bounded chunks in flight and marks the last", () => {
    const transfer = new SnapshotTransfer(metadata(), 16, 2);
    expect(takeAll(transfer)).toEqual([
      { offset: 0, length: 16, last: false },
      { offset: 16, length: 16, last: false },
    ]);
    expect(transfer.acknowledge(16)).toBe(true);
    expect(takeAll(transfer)).toEqual([{ offset: 32, length: 16, last: false }]);
    expect(transfer.acknowledge(48)).toBe(true);
    expect(takeAll(transfer)).toEqual([{ offset: 48, length: 2, last: true }]);
    expect(transfer.takeChunk()).toBeNull();
  });

  it("ignores stale acknowledgements and the end of the snapshot, which only `installed` acknowledges", () => {
    const transfer = new SnapshotTransfer(metadata(), 16, 2);
    takeAll(transfer);
    expect(transfer.acknowledge(32)).toBe(true);
    expect(transfer.acknowledge(16)).toBe(false);
    expect(transfer.acknowledge(32)).toBe(false);
    expect(transfer.acknowledge(50)).toBe(false);
    expect(transfer.acknowledgedOffset).toBe(32);
  });

  it("sends the window again from the acknowledged offset only after the resend timeout", () => {
    const transfer = new SnapshotTransfer(metadata(), 16, 2);
    takeAll(transfer);
    transfer.acknowledge(16);
    takeAll(transfer);
    for (let tick = 1; tick < 5; tick++) expect(transfer.tick(5)).toBe(false);
    expect(transfer.takeChunk()).toBeNull();
    expect(transfer.tick(5)).toBe(true);
    expect(takeAll(transfer).map((chunk) => chunk.offset)).toEqual([16, 32]);
  });

  it("goes back to a lower offset the member's latest answer expects, only at the resend timeout", () => {
    const transfer = new SnapshotTransfer(metadata(), 16, 2);
    takeAll(transfer);
    expect(transfer.acknowledge(32)).toBe(true);
    takeAll(transfer);
    // The member set aside stored chunks that did not verify: it expects byte 16 again and refuses every chunk after.
    expect(transfer.acknowledge(16)).toBe(false);
    expect(transfer.takeChunk()).toBeNull();
    for (let tick = 1; tick < 3; tick++) expect(transfer.tick(3)).toBe(false);
    expect(transfer.tick(3)).toBe(true);
    expect(transfer.acknowledgedOffset).toBe(16);
    expect(takeAll(transfer).map((chunk) => chunk.offset)).toEqual([16, 32]);
    // A late answer naming a lower offset is forgotten once a later one names the acknowledged offset or moves on.
    transfer.acknowledge(0);
    transfer.acknowledge(16);
    for (let tick = 1; tick <= 3; tick++) transfer.tick(3);
    expect(transfer.acknowledgedOffset).toBe(16);
    transfer.acknowledge(0);
    expect(transfer.acknowledge(32)).toBe(true);
    for (let tick = 1; tick <= 3; tick++) transfer.tick(3);
    expect(transfer.acknowledgedOffset).toBe(32);
  });

  it("jumps to an offset the member already holds, and starts over when it rejects the snapshot", () => {
    const transfer = new SnapshotTransfer(metadata(), 16, 2);
    takeAll(transfer);
    // The member resumed a receipt that a crash or an earlier leader left at 40, off this transfer's chunk grid.
    expect(transfer.acknowledge(40)).toBe(true);
    expect(takeAll(transfer)).toEqual([{ offset: 40, length: 10, last: true }]);
    transfer.restart();
    expect(takeAll(transfer).map((chunk) => chunk.offset)).toEqual([0, 16]);
  });

  it("sends an empty snapshot as one empty last chunk", () => {
    const transfer = new SnapshotTransfer(metadata({ sizeBytes: 0, checksum: 0 }), 16, 4);
    expect(takeAll(transfer)).toEqual([{ offset: 0, length: 0, last: true }]);
    expect(transfer.chunksInFlight).toBe(1);
  });
});

describe("snapshot transfer: receiver", () => {
  it("the checksum is CRC-32C and can be continued chunk by chunk", () => {
    // Known CRC-32C check value of "123456789".
    const bytes = new TextEncoder().encode("123456789");
    expect(snapshotChecksum(bytes)).toBe(0xe3069283);
    expect(continueChecksum(continueChecksum(0, bytes.subarray(0, 4)), bytes.subarray(4))).toBe(0xe3069283);
  });

  it("accepts chunks in order, gives each chunk's own checksum, and verifies the whole through its running checksum", () => {
    const receiver = new SnapshotReceiver(metadata());
    for (let offset = 0; offset < 48; offset += 16) {
      const chunk = data.subarray(offset, offset + 16);
      expect(receiver.offer(offset, chunk, false)).toEqual({
        status: "accepted",
        nextOffset: offset + 16,
        chunkChecksum: snapshotChecksum(chunk),
      });
    }
    expect(receiver.offer(48, data.subarray(48), true)).toEqual({
      status: "complete",
      chunkAccepted: true,
      chunkChecksum: snapshotChecksum(data.subarray(48)),
    });
  });

  it("answers out-of-order and duplicate chunks with the offset it expects, without accepting them", () => {
    const receiver = new SnapshotReceiver(metadata());
    receiver.offer(0, data.subarray(0, 16), false);
    expect(receiver.offer(32, data.subarray(32, 48), false)).toEqual({ status: "ignored", expectedOffset: 16 });
    expect(receiver.offer(0, data.subarray(0, 16), false)).toEqual({ status: "ignored", expectedOffset: 16 });
    expect(receiver.receivedBytes).toBe(16);
  });

  it("answers a chunk whose bytes differ from the checksum sent with them with its own offset, and takes it again intact", () => {
    const receiver = new SnapshotReceiver(metadata());
    const first = data.subarray(0, 16);
    receiver.offer(0, first, false, snapshotChecksum(first));
    const second = data.subarray(16, 32);
    const damaged = Uint8Array.from(second);
    damaged[3] = (damaged[3] ?? 0) ^ 0x10;
    expect(receiver.offer(16, damaged, false, snapshotChecksum(second))).toEqual({
      status: "damaged",
      expectedOffset: 16,
    });
    expect(receiver.receivedBytes).toBe(16);
    // The receipt goes on from there, rather than being rejected once every byte arrived.
    expect(receiver.offer(16, second, false, snapshotChecksum(second))).toMatchObject({ status: "accepted" });
    expect(receiver.offer(32, data.subarray(32), true, snapshotChecksum(data.subarray(32)))).toMatchObject({
      status: "complete",
    });
  });

  it("checks a chunk sent without a checksum (by a leader of an earlier version) only through the whole snapshot's", () => {
    const receiver = new SnapshotReceiver(metadata());
    const damaged = Uint8Array.from(data);
    damaged[20] = (damaged[20] ?? 0) ^ 0x01;
    expect(receiver.offer(0, damaged.subarray(0, 32), false)).toMatchObject({ status: "accepted" });
    expect(receiver.offer(32, damaged.subarray(32), true)).toMatchObject({ status: "rejected", cause: "checksum" });
  });

  it("resumes from a durable offset and its checksum", () => {
    const prefix = data.subarray(0, 32);
    const receiver = new SnapshotReceiver(metadata(), {
      receivedBytes: 32,
      receivedChecksum: snapshotChecksum(prefix),
    });
    expect(receiver.offer(0, data.subarray(0, 16), false)).toEqual({ status: "ignored", expectedOffset: 32 });
    expect(receiver.offer(32, data.subarray(32), true)).toEqual({
      status: "complete",
      chunkAccepted: true,
      chunkChecksum: snapshotChecksum(data.subarray(32)),
    });
  });

  it("completes a receipt whose bytes were all durable before a restart on any chunk of it", () => {
    const receiver = new SnapshotReceiver(metadata(), { receivedBytes: 50, receivedChecksum: snapshotChecksum(data) });
    expect(receiver.offer(0, data.subarray(0, 16), false)).toEqual({ status: "complete", chunkAccepted: false });
  });

  it("rejects a snapshot whose checksum does not match", () => {
    const receiver = new SnapshotReceiver(metadata({ checksum: 1 }));
    expect(receiver.offer(0, data, true)).toMatchObject({ status: "rejected", cause: "checksum" });
  });

  it("rejects chunks beyond the announced size, wrongly marked last or empty as the sender's framing", () => {
    expect(new SnapshotReceiver(metadata({ sizeBytes: 40 })).offer(0, data, true)).toMatchObject({
      status: "rejected",
      cause: "framing",
    });
    expect(new SnapshotReceiver(metadata({ sizeBytes: 60 })).offer(0, data, true)).toMatchObject({
      status: "rejected",
      cause: "framing",
    });
    expect(new SnapshotReceiver(metadata()).offer(0, new Uint8Array(0), false)).toMatchObject({
      status: "rejected",
      cause: "framing",
    });
  });
});
