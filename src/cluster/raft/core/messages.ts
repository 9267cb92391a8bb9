/**
 * Messages exchanged between members of one Raft group. The core produces them in a `Ready` batch and consumes
 * them through `RaftNode.step`; the driver only moves them between members.
 */
import type { Entry, MemberId, SnapshotMetadata } from "../types.js";

interface MessageHeader {
  readonly from: MemberId;
  readonly to: MemberId;
  readonly term: number;
}

/** Leader → follower: entries following (prevIndex, prevTerm), and the leader's commit index. */
export interface AppendMessage extends MessageHeader {
  readonly type: "append";
  readonly prevIndex: number;
  readonly prevTerm: number;
  readonly entries: readonly Entry[];
  readonly commitIndex: number;
  /**
   * Whether the follower answers when it accepts the append. The leader sets it to false only for an append without
   * entries to a member that already acknowledged `prevIndex`: such an append just announces the commit index, and
   * its answer could tell the leader nothing (a rejection is still answered). Absent counts as true.
   */
  readonly acknowledge: boolean;
}

/**
 * Follower → leader. On success `index` is the last index the follower now holds durably in the leader's log. On
 * rejection `index` is the rejected prevIndex and (`hintIndex`, `hintTerm`) let the leader skip a whole conflicting
 * term at once (fast back-tracking).
 */
export interface AppendResponseMessage extends MessageHeader {
  readonly type: "appendResponse";
  readonly rejected: boolean;
  readonly index: number;
  readonly hintIndex: number;
  readonly hintTerm: number;
}

/** Leader → member: liveness, commit propagation, and the read-index confirmation round (`readSequence`). */
export interface HeartbeatMessage extends MessageHeader {
  readonly type: "heartbeat";
  readonly commitIndex: number;
  readonly readSequence: number;
}

/** Member → leader: echoes the heartbeat's read sequence. */
export interface HeartbeatResponseMessage extends MessageHeader {
  readonly type: "heartbeatResponse";
  readonly readSequence: number;
}

/**
 * Candidate → member. With `preVote` the term is the term the candidate would use, and nobody changes term.
 * `transfer` marks a campaign started by leadership transfer, which voters honour even inside a leader lease.
 */
export interface VoteRequestMessage extends MessageHeader {
  readonly type: "voteRequest";
  readonly preVote: boolean;
  readonly transfer: boolean;
  readonly lastIndex: number;
  readonly lastTerm: number;
}

/** Member → candidate. */
export interface VoteResponseMessage extends MessageHeader {
  readonly type: "voteResponse";
  readonly preVote: boolean;
  readonly granted: boolean;
}

/** Leader → transfer target: campaign now, without waiting for an election timeout. */
export interface TimeoutNowMessage extends MessageHeader {
  readonly type: "timeoutNow";
}

/** Leader → lagging member: one bounded chunk of a snapshot starting at byte `offset`. */
export interface SnapshotChunkMessage extends MessageHeader {
  readonly type: "snapshotChunk";
  readonly metadata: SnapshotMetadata;
  readonly offset: number;
  readonly data: Uint8Array;
  readonly last: boolean;
  /**
   * CRC-32C of `data`, which the member checks before it accepts the chunk: a chunk damaged on the way is then asked
   * for again on its own. Leaders of earlier versions send none; their chunks are checked only by the whole
   * snapshot's checksum, once every byte arrived.
   */
  readonly checksum?: number;
}

/**
 * Member → leader about a snapshot transfer: `continue` asks for the chunk at `nextOffset` (which also resumes a
 * transfer after a lost chunk), `installed` reports the snapshot (or a newer state) is in place up to
 * `matchIndex`, `rejected` reports a checksum or size mismatch, so the leader restarts the transfer.
 */
export interface SnapshotResponseMessage extends MessageHeader {
  readonly type: "snapshotResponse";
  readonly snapshotIndex: number;
  readonly snapshotTerm: number;
  readonly status: "continue" | "installed" | "rejected";
  readonly nextOffset: number;
  readonly matchIndex: number;
}

/** Every message of the protocol. */
export type Message =
  | AppendMessage
  | AppendResponseMessage
  | HeartbeatMessage
  | HeartbeatResponseMessage
  | VoteRequestMessage
  | VoteResponseMessage
  | TimeoutNowMessage
  | SnapshotChunkMessage
  | SnapshotResponseMessage;

/** Fixed per-message and per-entry overhead used when bounding bytes in flight. */
export const ENTRY_OVERHEAD_BYTES = 24;

/** Approximate wire size of entries, for flow control: payload bytes plus a fixed per-entry overhead. */
export function entriesSizeBytes(entries: readonly Entry[]): number {
  let total = 0;
  for (const entry of entries) total += entry.data.byteLength + ENTRY_OVERHEAD_BYTES;
  return total;
}
