/**
 * Values the Raft layer's tests share.
 */
import type { SnapshotMetadata } from "../../../src/cluster/raft/types.js";

/** The metadata of a 6-byte snapshot at index 10 of term 2, whose group is one voter, broker 0. */
export const sixByteSnapshotMetadata: SnapshotMetadata = {
  index: 10,
  term: 2,
  configuration: { members: [{ id: 0, role: "voter", priority: 1 }] },
  sizeBytes: 6,
  checksum: 7,
};
