/**
 * Parsing peer requests: the checkpoint request and the checkpoint id a relocation hand-over carries (backups), and
 * how long a membership request may be held (absent from brokers of earlier versions).
 */
import { describe, expect, it } from "vitest";
import {
  MAX_MEMBERSHIP_WAIT_MS,
  parsePeerRequest,
  peerAnswerFromWire,
  peerMessageOnWire,
} from "../../../src/cluster/broker/peer-requests.js";
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
      checkpointId: 0n,
    });
    // Above 2^53 − 1 the id travels as a bigint (msgpack int64).
    expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 2, checkpointId: 2n ** 63n - 1n })).toEqual({
      type: "partition-checkpoint",
      partitionId: 2,
      checkpointId: 2n ** 63n - 1n,
    });
    // A double beyond 2^53 − 1 is no exact id; a bigint is one only above it (no version sends a small one so) and
    // below 2^63.
    for (const checkpointId of [-1, 1.5, "3", null, Number.MAX_SAFE_INTEGER + 1, 5n, -1n, 2n ** 63n]) {
      expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 2, checkpointId })).toBe(
        "partition-checkpoint needs a checkpoint id ≥ 0",
      );
    }
    expect(parsePeerRequest({ type: "partition-checkpoint", partitionId: 0, checkpointId: 1 })).toMatch(/partition id/);
  });

  it("reads the checkpoint id of a hand-over, none when an earlier version sent none, and refuses a bad one", () => {
    const base = { type: "partition-relocate-in", partitionId: 3, messages: [message] };
    expect(parsePeerRequest({ ...base, checkpointId: 7 })).toMatchObject({ checkpointId: 7n });
    expect(parsePeerRequest({ ...base, checkpointId: 2n ** 60n })).toMatchObject({ checkpointId: 2n ** 60n });
    expect(parsePeerRequest(base)).toMatchObject({ checkpointId: null });
    expect(parsePeerRequest({ ...base, checkpointId: null })).toMatchObject({ checkpointId: null });
    for (const checkpointId of [-4, 2n ** 63n]) {
      expect(parsePeerRequest({ ...base, checkpointId })).toBe(
        "partition-relocate-in carries a checkpoint id ≥ 0 or none",
      );
    }
  });

  it("sends a checkpoint id up to 2^53 − 1 as the number earlier versions read, and a larger one as a bigint", () => {
    const request = { type: "partition-checkpoint", partitionId: 2, checkpointId: 9_007_199_254_740_991n } as const;
    expect(peerMessageOnWire(request)).toEqual({ ...request, checkpointId: 9_007_199_254_740_991 });
    const large = { ...request, checkpointId: 9_007_199_254_740_992n };
    expect(peerMessageOnWire(large)).toEqual(large);
    expect(peerMessageOnWire({ outcome: "relocated", keys: [], checkpointId: null })).toEqual({
      outcome: "relocated",
      keys: [],
      checkpointId: null,
    });
  });

  it("reads a leader's answer: its checkpoint id exact, and a malformed one unavailable", () => {
    expect(peerAnswerFromWire({ outcome: "checkpointed", checkpointId: 5, position: 3, taken: true })).toEqual({
      outcome: "checkpointed",
      checkpointId: 5n,
      position: 3,
      taken: true,
    });
    expect(peerAnswerFromWire({ outcome: "checkpointed", checkpointId: 2n ** 62n, position: 3, taken: true })).toEqual({
      outcome: "checkpointed",
      checkpointId: 2n ** 62n,
      position: 3,
      taken: true,
    });
    expect(peerAnswerFromWire({ outcome: "checkpointed", checkpointId: 1.5, position: 3, taken: true })).toEqual({
      outcome: "unavailable",
      detail: "the leader answered a malformed checkpoint id",
    });
    // A broker of an earlier version answers a hand-over without one.
    expect(peerAnswerFromWire({ outcome: "relocated", keys: ["1"] })).toEqual({ outcome: "relocated", keys: ["1"] });
    expect(peerAnswerFromWire({ outcome: "relocated", keys: ["1"], checkpointId: 7 })).toEqual({
      outcome: "relocated",
      keys: ["1"],
      checkpointId: 7n,
    });
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
