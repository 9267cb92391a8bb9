import { describe, expect, it } from "vitest";
import { chunkAt, SnapshotReceiver, snapshotChecksum } from "../../../../src/cluster/raft/core/snapshot-transfer.js";
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

describe("snapshot transfer", () => {
  it("cuts data into bounded chunks and marks the last", () => {
    expect(chunkAt(data, 0, 16).data.byteLength).toBe(16);
    expect(chunkAt(data, 48, 16)).toMatchObject({ last: true });
    expect(chunkAt(data, 48, 16).data.byteLength).toBe(2);
  });

  it("the checksum is CRC-32C", () => {
    // Known CRC-32C check value of "123456789".
    expect(snapshotChecksum(new TextEncoder().encode("123456789"))).toBe(0xe3069283);
  });

  it("reassembles in-order chunks and verifies the whole", () => {
    const receiver = new SnapshotReceiver(metadata());
    for (let offset = 0; offset < 48; offset += 16) {
      expect(receiver.offer(offset, chunkAt(data, offset, 16).data, false)).toEqual({
        status: "continue",
        nextOffset: offset + 16,
      });
    }
    const outcome = receiver.offer(48, chunkAt(data, 48, 16).data, true);
    expect(outcome.status).toBe("complete");
    if (outcome.status === "complete") expect(outcome.snapshot.data).toEqual(data);
  });

  it("after a lost chunk it asks for the offset it expects, so the transfer resumes there", () => {
    const receiver = new SnapshotReceiver(metadata());
    receiver.offer(0, chunkAt(data, 0, 16).data, false);
    expect(receiver.offer(32, chunkAt(data, 32, 16).data, false)).toEqual({ status: "continue", nextOffset: 16 });
  });

  it("rejects a snapshot whose checksum does not match", () => {
    const receiver = new SnapshotReceiver(metadata({ checksum: 1 }));
    expect(receiver.offer(0, data, true)).toMatchObject({ status: "rejected" });
  });

  it("rejects a snapshot whose size does not match", () => {
    const receiver = new SnapshotReceiver(metadata({ sizeBytes: 60 }));
    expect(receiver.offer(0, data, true)).toMatchObject({ status: "rejected" });
  });
});
