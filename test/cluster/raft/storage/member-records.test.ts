/**
 * The shapes a member's records must have when read back, and how an incoming snapshot's progress is continued.
 */
import { crc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import {
  copyMetadata,
  isHardState,
  progressedIncoming,
  type StoredIncomingSnapshot,
} from "../../../../src/cluster/raft/storage/member-records.js";
import { sixByteSnapshotMetadata } from "../fixtures.js";

const metadata = sixByteSnapshotMetadata;

describe("isHardState", () => {
  it("accepts a hard state with and without its forced membership and fenced members", () => {
    expect(isHardState({ term: 1, votedFor: null, commitIndex: 0 })).toBe(true);
    expect(
      isHardState({
        term: 3,
        votedFor: 2,
        commitIndex: 9,
        forced: { configuration: metadata.configuration, sinceTerm: 3 },
        fencedMembers: [4],
      }),
    ).toBe(true);
  });

  it("refuses what a damaged record could hold", () => {
    expect(isHardState({ term: -1, votedFor: null, commitIndex: 0 })).toBe(false);
    expect(isHardState({ term: 1, votedFor: "2", commitIndex: 0 })).toBe(false);
    expect(isHardState({ term: 1, votedFor: null, commitIndex: 0.5 })).toBe(false);
    expect(isHardState({ term: 1, votedFor: null, commitIndex: 0, forced: { sinceTerm: 1 } })).toBe(false);
    expect(isHardState({ term: 1, votedFor: null, commitIndex: 0, fencedMembers: [-1] })).toBe(false);
    expect(isHardState(null)).toBe(false);
  });
});

describe("copyMetadata", () => {
  it("keeps only the fields a record stores, so nothing the caller holds is persisted or aliased", () => {
    const extended = {
      ...metadata,
      extra: true,
      configuration: { members: [{ id: 0, role: "voter" as const, priority: 1, note: "x" }] },
    };
    const copy = copyMetadata(extended);
    expect(copy).toEqual(metadata);
    expect(copy.configuration.members[0]).not.toBe(extended.configuration.members[0]);
  });
});

describe("progressedIncoming", () => {
  const incoming: StoredIncomingSnapshot = { metadata, slot: 1, receivedBytes: 0, receivedChecksum: 0 };

  it("continues the running checksum from each chunk's own, as if the bytes had been read in one piece", () => {
    const first = new Uint8Array([1, 2, 3]);
    const second = new Uint8Array([4, 5, 6]);
    const progressed = progressedIncoming(incoming, [
      { offset: 0, data: first, checksum: crc32c(first) },
      { offset: 3, data: second, checksum: crc32c(second) },
    ]);
    expect(progressed.receivedBytes).toBe(6);
    expect(progressed.receivedChecksum).toBe(crc32c(new Uint8Array([1, 2, 3, 4, 5, 6])));
  });

  it("fails loudly on a chunk that does not continue the received bytes", () => {
    const data = new Uint8Array([1]);
    expect(() => progressedIncoming(incoming, [{ offset: 1, data, checksum: crc32c(data) }])).toThrow(
      /invariant violated: received chunk at 1 does not continue at 0/,
    );
  });
});
