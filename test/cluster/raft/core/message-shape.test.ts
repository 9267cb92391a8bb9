/**
 * The shape a Raft message must have before the core takes it: what the core itself sends passes, the malformed
 * messages that once stopped or failed a replica do not.
 */
import { describe, expect, it } from "vitest";
import {
  MAX_TERM,
  malformedMessageReason,
  RAFT_MESSAGE_TYPES,
} from "../../../../src/cluster/raft/core/message-shape.js";
import { sixByteSnapshotMetadata } from "../fixtures.js";
import { ScriptedGroup, voters } from "./scripted-group.js";

/** A message as it arrives, its header already checked. */
type Arriving = Record<string, unknown> & { readonly term: number };

const header = { from: 1, to: 2, term: 5 };

describe("malformedMessageReason", () => {
  it("passes every message a group of cores sends while it elects, replicates and recovers from a partition", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    for (let index = 0; index < 20; index += 1) group.propose(`entry ${index}`);
    const follower = [1, 2, 3].find((id) => id !== leader) as number;
    group.isolate(follower);
    for (let index = 0; index < 20; index += 1) group.propose(`while isolated ${index}`);
    group.tick(30);
    group.heal();
    group.tick(30);
    group.flush();
    const types = new Set(group.delivered.map((message) => message.type));
    // The run must have sent every kind of message but those of leadership transfers and snapshots.
    const notSent = new Set(["timeoutNow", "snapshotChunk", "snapshotResponse"]);
    expect([...types].sort()).toEqual([...RAFT_MESSAGE_TYPES].filter((type) => !notSent.has(type)).sort());
    for (const message of group.delivered) {
      expect(malformedMessageReason(message as unknown as Arriving), message.type).toBeNull();
    }
  });

  it("passes a snapshot chunk and answer of the shape the core sends", () => {
    const metadata = sixByteSnapshotMetadata;
    const chunk = { ...header, type: "snapshotChunk", metadata, offset: 0, data: new Uint8Array(6), last: true };
    expect(malformedMessageReason(chunk)).toBeNull();
    expect(malformedMessageReason({ ...chunk, offset: 1 })).toBe(
      "snapshotChunk: the chunk ends beyond the snapshot's size",
    );
    // The chunk's own checksum is optional (leaders of earlier versions send none), and a CRC-32C when present.
    expect(malformedMessageReason({ ...chunk, checksum: 0xffff_ffff })).toBeNull();
    for (const checksum of [-1, 2 ** 32, 1.5, "7", null]) {
      expect(malformedMessageReason({ ...chunk, checksum })).toBe("snapshotChunk: checksum is malformed");
    }
    const answer = {
      ...header,
      type: "snapshotResponse",
      snapshotIndex: 10,
      snapshotTerm: 2,
      status: "continue",
      nextOffset: 6,
      matchIndex: 0,
    };
    expect(malformedMessageReason(answer)).toBeNull();
    expect(malformedMessageReason({ ...answer, status: "maybe" })).toBe("snapshotResponse: status is malformed");
  });

  it.each<[string, Arriving, string]>([
    [
      "a heartbeat whose commit index is not a number (it once set the commit index to NaN and stopped the replica)",
      { ...header, type: "heartbeat", commitIndex: "x", readSequence: 0 },
      "heartbeat: commitIndex is malformed",
    ],
    [
      "an append whose entry is empty (it once failed the replica)",
      { ...header, type: "append", prevIndex: 3, prevTerm: 2, commitIndex: 3, acknowledge: true, entries: [{}] },
      "append: entry 0 does not follow index 3",
    ],
    [
      "an append whose entries skip an index",
      {
        ...header,
        type: "append",
        prevIndex: 3,
        prevTerm: 2,
        commitIndex: 3,
        entries: [
          { index: 4, term: 5, kind: "normal", data: new Uint8Array(1) },
          { index: 6, term: 5, kind: "normal", data: new Uint8Array(1) },
        ],
      },
      "append: entry 1 does not follow index 3",
    ],
    [
      "an append whose entry is of a later term than the message",
      {
        ...header,
        type: "append",
        prevIndex: 3,
        prevTerm: 2,
        commitIndex: 3,
        entries: [{ index: 4, term: 6, kind: "normal", data: new Uint8Array(1) }],
      },
      "append: entry 0 has no term up to the message's 5",
    ],
    [
      "a message whose term no campaign could go beyond (it once left a group without a leader for good)",
      { ...header, term: Number.MAX_SAFE_INTEGER, type: "timeoutNow" },
      `term ${Number.MAX_SAFE_INTEGER} is above the largest term, ${MAX_TERM}`,
    ],
    [
      "a vote request without its pre-vote flag",
      { ...header, type: "voteRequest", lastIndex: 1, lastTerm: 1, transfer: false },
      "voteRequest: preVote is malformed",
    ],
    [
      "an answer to an append whose index is negative",
      { ...header, type: "appendResponse", rejected: false, index: -1, hintIndex: 0, hintTerm: 0 },
      "appendResponse: index is malformed",
    ],
  ])("refuses %s", (_, message, reason) => {
    expect(malformedMessageReason(message)).toBe(reason);
  });
});
