/**
 * Parsing peer requests: the checkpoint request and the checkpoint id a relocation hand-over carries (backups), and
 * how long a membership request may be held (absent from brokers of earlier versions).
 */
import { describe, expect, it } from "vitest";
import { MAX_MEMBERSHIP_WAIT_MS, parsePeerRequest } from "../../../src/cluster/broker/peer-requests.js";
import { DEFAULT_TENANT_ID } from "../../../src/cluster/engine/index.js";

const message = {
  sourceKey: "2251799813685249",
  name: "m",
  correlationKey: "k",
  timeToLiveMs: 1_000,
  variablesBytes: new Uint8Array([0x80]),
  tenantId: DEFAULT_TENANT_ID,
  publishedAtMs: 1,
};

describe("peer requests of backups", () => {
  it("parses a checkpoint request and refuses malformed ids", () => {
    expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 2, checkpointId: 0 })).toEqual({
      type: "partition-checkpoint",
      partitionId: 2,
      checkpointId: 0,
    });
    for (const checkpointId of [-1, 1.5, "3", null, Number.MAX_SAFE_INTEGER + 1]) {
      expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 2, checkpointId })).toBe(
        "partition-checkpoint needs a checkpoint id ≥ 0",
      );
    }
    expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 0, checkpointId: 1 })).toMatch(/partition id/);
  });

  it("reads the checkpoint id of a hand-over, none when an earlier version sent none, and refuses a bad one", () => {
    const base = { type: "partition-relocate-in", partitionId: 3, messages: [message] };
    expect(parsePeerRequest({ ...base, checkpointId: 7 })).toMatchObject({ checkpointId: 7 });
    expect(parsePeerRequest(base)).toMatchObject({ checkpointId: null });
    expect(parsePeerRequest({ ...base, checkpointId: null })).toMatchObject({ checkpointId: null });
    expect(parsePeerRequest({ ...base, checkpointId: -4 })).toBe(
      "partition-relocate-in carries a checkpoint id ≥ 0 or none",
    );
  });
});

describe("peer requests of membership changes", () => {
  const change = { type: "promote", member: 3 };

  it("parses how long the leader may hold the request, absent in requests of earlier versions", () => {
    expect(parsePeerRequest({ type: "partition-membership", partitionId: 1, change })).toEqual({
      type: "partition-membership",
      partitionId: 1,
      change,
    });
    expect(parsePeerRequest({ type: "partition-membership", partitionId: 1, change, waitMs: 1_000 })).toEqual({
      type: "partition-membership",
      partitionId: 1,
      change,
      waitMs: 1_000,
    });
  });

  it("refuses a wait that is not an integer from 0 to its bound", () => {
    for (const waitMs of [-1, 1.5, "100", null, MAX_MEMBERSHIP_WAIT_MS + 1]) {
      expect(parsePeerRequest({ type: "partition-membership", partitionId: 1, change, waitMs })).toBe(
        `partition-membership waitMs must be an integer from 0 to ${MAX_MEMBERSHIP_WAIT_MS}`,
      );
    }
  });
});
