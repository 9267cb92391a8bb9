/**
 * The shape checks of the Raft layer's values as they arrive from a peer or from disk.
 */
import { describe, expect, it } from "vitest";
import { isConfiguration, isSnapshotMetadata } from "../../../src/cluster/raft/shapes.js";
import { sixByteSnapshotMetadata } from "./fixtures.js";

const metadata = sixByteSnapshotMetadata;

describe("isConfiguration", () => {
  it("accepts members with and without outgoing members, and refuses a member without its priority", () => {
    expect(isConfiguration(metadata.configuration)).toBe(true);
    expect(isConfiguration({ members: [], outgoing: metadata.configuration.members })).toBe(true);
    expect(isConfiguration({ members: [{ id: 0, role: "voter" }] })).toBe(false);
    expect(isConfiguration({ members: metadata.configuration.members, outgoing: "none" })).toBe(false);
  });
});

describe("isSnapshotMetadata", () => {
  it("refuses a member of an unknown role and a size that is not an integer", () => {
    expect(isSnapshotMetadata(metadata)).toBe(true);
    const observer = { ...metadata, configuration: { members: [{ id: 0, role: "observer", priority: 1 }] } };
    expect(isSnapshotMetadata(observer)).toBe(false);
    expect(isSnapshotMetadata({ ...metadata, sizeBytes: Number.MAX_SAFE_INTEGER + 1 })).toBe(false);
  });
});
