/**
 * Snapshot transfer under latency, loss, duplication, corruption and crashes: a window of chunks in flight, resends
 * only after a timeout, stale answers ignored, a receipt written chunk by chunk and resumed after a crash, and a leader
 * that reads each chunk from its storage as it sends it.
 */
import { crc32c } from "@node-rs/crc32";
import { describe, expect, it, vi } from "vitest";
import type { SnapshotResponseMessage } from "../../../../src/cluster/raft/core/messages.js";
import type { RaftNodeOptions } from "../../../../src/cluster/raft/core/raft.js";
import type { MemberId, SnapshotChunkRead, SnapshotReceipt } from "../../../../src/cluster/raft/types.js";
import { DelayedGroup } from "./delayed-group.js";
import { voters } from "./scripted-group.js";

const CHUNK_BYTES = 16;
const CHUNKS = 64;
const WINDOW_CHUNKS = 4;
/** Above the longest round trip in these tests (2 × 10 ticks), so a window that was not lost is never resent. */
const RESEND_TICKS = 30;
const encoder = new TextEncoder();

interface Lagging {
  readonly group: DelayedGroup;
  readonly leader: MemberId;
  readonly follower: MemberId;
  readonly lagger: MemberId;
  /** The snapshot's data: `CHUNKS` chunks of `CHUNK_BYTES`. */
  readonly data: Uint8Array;
  readonly snapshotIndex: number;
}

function snapshotData(seed: number): Uint8Array {
  return Uint8Array.from({ length: CHUNKS * CHUNK_BYTES }, (_, position) => (position * 7 + seed) & 0xff);
}

/** Proposes through the leader and ticks until every running member applied it. */
function commit(group: DelayedGroup, leader: MemberId, text: string, running: readonly MemberId[]): number {
  const result = group.node(leader).propose(encoder.encode(text));
  if (!result.accepted) throw new Error(`proposal refused: ${result.reason}`);
  group.tickUntil(
    () => running.every((id) => group.node(id).status().appliedIndex >= result.index),
    200,
    `entry ${result.index} applied`,
  );
  return result.index;
}

/**
 * Three members; one (the lagger) is down while the others commit entries and the leader compacts its log behind a
 * snapshot of `CHUNKS` chunks, so the lagger can only catch up through that snapshot. With `bothCompact` the
 * follower takes the same snapshot, so it can continue the transfer if it becomes leader.
 */
function laggingGroup(overrides: Partial<RaftNodeOptions> = {}, bothCompact = false): Lagging {
  const group = new DelayedGroup(voters(1, 2, 3), {
    electionTimeoutTicks: 50,
    heartbeatTimeoutTicks: 2,
    snapshotChunkBytes: CHUNK_BYTES,
    snapshotWindowChunks: WINDOW_CHUNKS,
    snapshotResendTicks: RESEND_TICKS,
    ...overrides,
  });
  group.tickUntil(() => group.leader() !== null, 500, "a leader");
  const leader = group.leader() as MemberId;
  const [follower, lagger] = [1, 2, 3].filter((id) => id !== leader) as [MemberId, MemberId];
  commit(group, leader, "first", [1, 2, 3]);
  group.crash(lagger);
  for (let sequence = 0; sequence < 10; sequence++) commit(group, leader, `entry-${sequence}`, [leader, follower]);
  const data = snapshotData(1);
  const snapshotIndex = group.node(leader).status().appliedIndex;
  group.node(leader).compact(snapshotIndex, data);
  if (bothCompact) group.node(follower).compact(snapshotIndex, data);
  group.tick();
  commit(group, leader, "after-snapshot", [leader, follower]);
  expect(group.node(leader).status().firstIndex).toBe(snapshotIndex + 1);
  return { group, leader, follower, lagger, data, snapshotIndex };
}

/** Whether the lagger installed the snapshot and holds the leader's whole log. */
function caughtUp({ group, leader, lagger, snapshotIndex }: Lagging): boolean {
  const node = group.node(lagger);
  return (
    group.disk(lagger).snapshotIndex() >= snapshotIndex &&
    node.status().lastIndex === group.node(leader).status().lastIndex &&
    node.status().commitIndex === group.node(leader).status().commitIndex
  );
}

/** Ticks bound of a transfer: a window per round trip, plus a few round trips to start and finish. */
function transferBoundTicks(latencyTicks: number): number {
  return (CHUNKS / WINDOW_CHUNKS + 4) * (2 * latencyTicks + 1) + 10;
}

function offsetsOf(chunks: readonly { offset: number }[]): number[] {
  return chunks.map((chunk) => chunk.offset);
}

function snapshotResponse(lagging: Lagging, overrides: Partial<SnapshotResponseMessage>): SnapshotResponseMessage {
  const { group, leader, lagger, snapshotIndex } = lagging;
  return {
    type: "snapshotResponse",
    from: lagger,
    to: leader,
    term: group.node(leader).status().term,
    snapshotIndex,
    snapshotTerm: group.disk(leader).snapshotMetadata()?.term ?? 0,
    status: "continue",
    nextOffset: 0,
    matchIndex: 0,
    ...overrides,
  };
}

describe("snapshot transfer with flow control", () => {
  describe.each([0, 1, 2, 5, 10])("at a one-way latency of %i ticks", (latencyTicks) => {
    it("sends every chunk once, a window at a time, reading each from storage as it goes", () => {
      const lagging = laggingGroup();
      const { group, leader, lagger, data } = lagging;
      const leaderDisk = group.disk(leader);
      const wholeReads = vi.spyOn(leaderDisk, "snapshot");
      const chunkReads = vi.spyOn(leaderDisk, "snapshotChunk");
      group.latencyTicks = latencyTicks;
      group.restart(lagger);
      let mostInFlight = 0;
      const ticks = group.tickUntil(
        () => {
          const inNetwork = group.inFlight().filter((message) => message.type === "snapshotChunk").length;
          const transfer = group.node(leader).progressOf(lagger)?.snapshotTransfer;
          mostInFlight = Math.max(mostInFlight, inNetwork, transfer?.chunksInFlight ?? 0);
          return caughtUp(lagging);
        },
        transferBoundTicks(latencyTicks),
        "the lagger caught up",
      );
      const chunks = group.chunksSentTo(lagger);
      // Lower bound: each chunk at least once. Upper bound: one window more, for one resend timeout (none happens
      // here, since the timeout exceeds the round trip and nothing is lost; the allowance keeps the bound about the
      // protocol rather than this harness's timing).
      expect(chunks.length).toBeGreaterThanOrEqual(CHUNKS);
      expect(chunks.length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
      expect(new Set(offsetsOf(chunks)).size).toBe(CHUNKS);
      expect(mostInFlight).toBeLessThanOrEqual(WINDOW_CHUNKS);
      expect(ticks).toBeLessThanOrEqual(transferBoundTicks(latencyTicks));
      expect(group.disk(lagger).snapshot()?.data).toEqual(data);
      // The leader never read the whole snapshot: it read each chunk as it sent it, about the snapshot's size in all.
      expect(wholeReads).not.toHaveBeenCalled();
      const bytesRead = chunkReads.mock.results.reduce(
        (total, result) => total + ((result.value as SnapshotChunkRead | null)?.data.byteLength ?? 0),
        0,
      );
      expect(bytesRead).toBeGreaterThanOrEqual(data.byteLength);
      expect(bytesRead).toBeLessThanOrEqual(data.byteLength + WINDOW_CHUNKS * CHUNK_BYTES);
    });
  });

  it("resumes after the resend timeout when a chunk is lost, resending only from the lost chunk", () => {
    const lagging = laggingGroup();
    const { group, lagger, data } = lagging;
    const lostOffset = 32 * CHUNK_BYTES;
    let dropped = false;
    group.filter = (message) => {
      if (!dropped && message.type === "snapshotChunk" && message.offset === lostOffset) {
        dropped = true;
        return "drop";
      }
      return message;
    };
    group.latencyTicks = 2;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(2) + 2 * RESEND_TICKS, "the lagger caught up");
    expect(dropped).toBe(true);
    const chunks = group.chunksSentTo(lagger);
    expect(chunks.length).toBeGreaterThan(CHUNKS);
    expect(chunks.length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
    const lost = chunks.filter((chunk) => chunk.offset === lostOffset);
    expect(lost).toHaveLength(2);
    expect((lost[1]?.tick ?? 0) - (lost[0]?.tick ?? 0)).toBeGreaterThanOrEqual(RESEND_TICKS);
    for (const chunk of chunks) {
      if (chunk.offset < lostOffset) expect(chunks.filter((other) => other.offset === chunk.offset)).toHaveLength(1);
    }
    expect(group.disk(lagger).snapshot()?.data).toEqual(data);
  });

  it("ignores stale answers: older offsets, repeated offsets and answers about another snapshot, installed too", () => {
    const lagging = laggingGroup();
    const { group, leader, lagger } = lagging;
    group.latencyTicks = 2;
    group.restart(lagger);
    group.tickUntil(
      () => (group.node(leader).progressOf(lagger)?.snapshotTransfer?.acknowledgedOffset ?? 0) >= 20 * CHUNK_BYTES,
      transferBoundTicks(2),
      "half the snapshot acknowledged",
    );
    const transfer = group.node(leader).progressOf(lagger)?.snapshotTransfer;
    const acknowledged = transfer?.acknowledgedOffset ?? 0;
    const sentBefore = group.sent.length;
    for (const stale of [
      snapshotResponse(lagging, { nextOffset: acknowledged - CHUNK_BYTES }),
      snapshotResponse(lagging, { nextOffset: 0 }),
      snapshotResponse(lagging, { nextOffset: acknowledged }),
      snapshotResponse(lagging, { snapshotIndex: lagging.snapshotIndex - 1, nextOffset: acknowledged + CHUNK_BYTES }),
      snapshotResponse(lagging, { snapshotIndex: lagging.snapshotIndex - 1, status: "rejected" }),
      // A late `installed` of an older snapshot names an index the leader's log no longer holds: the transfer of the
      // current one goes on, rather than starting over from byte 0.
      snapshotResponse(lagging, {
        snapshotIndex: lagging.snapshotIndex - 1,
        status: "installed",
        matchIndex: lagging.snapshotIndex - 1,
      }),
    ]) {
      group.node(leader).step(stale);
      group.flush();
    }
    expect(group.sent.slice(sentBefore).filter((sent) => sent.message.type === "snapshotChunk")).toEqual([]);
    expect(group.node(leader).progressOf(lagger)?.state).toBe("snapshot");
    expect(group.node(leader).progressOf(lagger)?.snapshotTransfer?.acknowledgedOffset).toBe(acknowledged);
  });

  it("keeps the chunk count bounded when every answer is duplicated and the copies arrive late", () => {
    const lagging = laggingGroup();
    const { group, lagger, data } = lagging;
    group.latencyTicks = 2;
    // Every answer of the lagger arrives twice, the copy 5 ticks after the original.
    group.filter = (message) =>
      message.from === lagger
        ? [
            { message, extraDelayTicks: 0 },
            { message, extraDelayTicks: 5 },
          ]
        : message;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(2), "the lagger caught up");
    expect(group.chunksSentTo(lagger).length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
    expect(group.disk(lagger).snapshot()?.data).toEqual(data);
  });

  it("heartbeat answers resend nothing: without acknowledgements a window goes out once per resend timeout", () => {
    const lagging = laggingGroup();
    const { group, lagger } = lagging;
    group.latencyTicks = 1;
    group.filter = (message) => (message.type === "snapshotResponse" ? "drop" : message);
    group.restart(lagger);
    group.tick(3 * RESEND_TICKS + 5);
    const chunks = group.chunksSentTo(lagger);
    // The first window, then the same window again at each of the three timeouts.
    expect(chunks.length).toBe(4 * WINDOW_CHUNKS);
    expect(new Set(offsetsOf(chunks))).toEqual(new Set([0, 16, 32, 48]));
  });

  it("a resend timeout below the round trip resends at most one window per timeout, never a cascade", () => {
    const resendTicks = 5;
    const latencyTicks = 10;
    const lagging = laggingGroup({ snapshotResendTicks: resendTicks });
    const { group, lagger, data } = lagging;
    group.latencyTicks = latencyTicks;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), 4 * transferBoundTicks(latencyTicks), "the lagger caught up");
    // Each window waits one round trip for its acknowledgements, and is resent at each timeout meanwhile.
    const bound = CHUNKS * (1 + Math.ceil((2 * latencyTicks) / resendTicks));
    const chunks = group.chunksSentTo(lagger);
    expect(chunks.length).toBeLessThanOrEqual(bound);
    expect(group.disk(lagger).snapshot()?.data).toEqual(data);
  });

  it("a receiver that crashes resumes from its durable offset: no chunk before it is sent again", () => {
    const lagging = laggingGroup();
    const { group, leader, lagger, data } = lagging;
    const laggerDisk = group.disk(lagger);
    group.latencyTicks = 1;
    group.restart(lagger);
    group.tickUntil(
      () => (laggerDisk.incomingSnapshot()?.receivedBytes ?? 0) >= 30 * CHUNK_BYTES,
      transferBoundTicks(1),
      "half the snapshot durable",
    );
    group.crash(lagger);
    const durableOffset = laggerDisk.incomingSnapshot()?.receivedBytes ?? 0;
    const crashedAt = group.now;
    // The answers already on their way still arrive, so the leader's acknowledged offset reaches the durable one.
    group.tick(5);
    expect(group.node(leader).progressOf(lagger)?.snapshotTransfer?.acknowledgedOffset).toBe(durableOffset);
    const receipts = vi.spyOn(laggerDisk, "receiveSnapshotChunksSync");
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(1) + 2 * RESEND_TICKS, "the lagger caught up");
    const resent = group.chunksSentTo(lagger).filter((chunk) => chunk.tick > crashedAt);
    expect(Math.min(...offsetsOf(resent))).toBe(durableOffset);
    const firstReceipt = receipts.mock.calls[0]?.[0] as SnapshotReceipt;
    expect(firstReceipt.restart).toBe(false);
    expect(firstReceipt.chunks[0]?.offset).toBe(durableOffset);
    expect(group.chunksSentTo(lagger).length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
    expect(laggerDisk.snapshot()?.data).toEqual(data);
  });

  it("a new leader resumes the transfer at the receiver's durable offset", () => {
    const lagging = laggingGroup({}, true);
    const { group, leader, follower, lagger, data } = lagging;
    const laggerDisk = group.disk(lagger);
    group.latencyTicks = 1;
    group.restart(lagger);
    group.tickUntil(
      () => (laggerDisk.incomingSnapshot()?.receivedBytes ?? 0) >= 30 * CHUNK_BYTES,
      transferBoundTicks(1),
      "half the snapshot durable",
    );
    group.crash(leader);
    const crashedAt = group.now;
    const receipts = vi.spyOn(laggerDisk, "receiveSnapshotChunksSync");
    group.tickUntil(() => group.leader() === follower, 500, "the follower leads");
    const durableOffset = laggerDisk.incomingSnapshot()?.receivedBytes ?? 0;
    group.tickUntil(
      () => group.disk(lagger).snapshotIndex() >= lagging.snapshotIndex,
      transferBoundTicks(1) + 2 * RESEND_TICKS,
      "the lagger installed the snapshot",
    );
    // The new leader starts at byte 0; the first answer moves it to the durable offset, so only its first window
    // covers bytes the receiver already holds.
    const fromNewLeader = group.sent.filter(
      ({ message, tick }) => tick > crashedAt && message.type === "snapshotChunk" && message.from === follower,
    );
    const belowDurable = fromNewLeader.filter(
      ({ message }) => message.type === "snapshotChunk" && message.offset < durableOffset,
    );
    expect(belowDurable.length).toBeLessThanOrEqual(WINDOW_CHUNKS);
    expect(receipts.mock.calls.every(([receipt]) => !receipt.restart)).toBe(true);
    expect(laggerDisk.snapshot()?.data).toEqual(data);
  });

  it("a chunk damaged on the way fails its own checksum and is sent again alone, after the resend timeout", () => {
    const lagging = laggingGroup();
    const { group, leader, lagger, data } = lagging;
    const laggerDisk = group.disk(lagger);
    const receipts = vi.spyOn(laggerDisk, "receiveSnapshotChunksSync");
    const damagedOffset = 10 * CHUNK_BYTES;
    let damaged = false;
    group.filter = (message) => {
      if (damaged || message.type !== "snapshotChunk" || message.offset !== damagedOffset) return message;
      damaged = true;
      const bytes = message.data.slice();
      bytes[3] = (bytes[3] ?? 0) ^ 1;
      return { ...message, data: bytes };
    };
    group.latencyTicks = 1;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(1) + 2 * RESEND_TICKS, "the lagger caught up");
    expect(damaged).toBe(true);
    // Nothing was rejected and nothing started over: without the chunk's own checksum the damage showed only in the
    // whole snapshot's, after every byte arrived, and the transfer went back to byte 0.
    expect(
      group.sent.filter(({ message }) => message.type === "snapshotResponse" && message.status === "rejected"),
    ).toHaveLength(0);
    expect(receipts.mock.calls.filter(([receipt]) => receipt.restart)).toHaveLength(1);
    // The member counts what arrived damaged, for its driver to report: Raft alone would only retry.
    expect(group.node(lagger).receiptDamage()).toEqual({
      chunksDamaged: 1,
      snapshotsRejected: 0,
      lastSenderId: leader,
    });
    const chunks = group.chunksSentTo(lagger);
    const resent = chunks.filter((chunk) => chunk.offset === damagedOffset);
    expect(resent).toHaveLength(2);
    expect((resent[1]?.tick ?? 0) - (resent[0]?.tick ?? 0)).toBeGreaterThanOrEqual(RESEND_TICKS);
    expect(chunks.length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
    for (const chunk of chunks) {
      if (chunk.offset < damagedOffset) expect(chunks.filter((other) => other.offset === chunk.offset)).toHaveLength(1);
    }
    expect(laggerDisk.snapshot()?.data).toEqual(data);
  });

  it("a chunk damaged before its checksum was computed fails the whole snapshot's, which starts the transfer over", () => {
    const lagging = laggingGroup();
    const { group, leader, lagger, data } = lagging;
    const laggerDisk = group.disk(lagger);
    const receipts = vi.spyOn(laggerDisk, "receiveSnapshotChunksSync");
    let corrupted = false;
    group.filter = (message) => {
      if (corrupted || message.type !== "snapshotChunk" || message.offset !== 10 * CHUNK_BYTES) return message;
      corrupted = true;
      const bytes = message.data.slice();
      bytes[3] = (bytes[3] ?? 0) ^ 1;
      return { ...message, data: bytes, checksum: crc32c(bytes) >>> 0 };
    };
    group.latencyTicks = 1;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), 3 * transferBoundTicks(1), "the lagger caught up");
    expect(corrupted).toBe(true);
    const rejections = group.sent.filter(
      ({ message }) => message.type === "snapshotResponse" && message.status === "rejected",
    );
    expect(rejections).toHaveLength(1);
    expect(group.node(lagger).receiptDamage()).toEqual({
      chunksDamaged: 0,
      snapshotsRejected: 1,
      lastSenderId: leader,
    });
    const chunks = group.chunksSentTo(lagger);
    expect(chunks.filter((chunk) => chunk.offset === 0)).toHaveLength(2);
    expect(chunks.length).toBeLessThanOrEqual(2 * CHUNKS + WINDOW_CHUNKS);
    // The receipt started over on disk: the bytes received with the damaged chunk were discarded.
    expect(receipts.mock.calls.filter(([receipt]) => receipt.restart)).toHaveLength(2);
    expect(laggerDisk.snapshot()?.data).toEqual(data);
  });

  it("every chunk carries the CRC-32C of its bytes", () => {
    const lagging = laggingGroup();
    const { group, lagger } = lagging;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(1), "the lagger caught up");
    const chunks = group.sent.flatMap(({ message }) => (message.type === "snapshotChunk" ? [message] : []));
    expect(chunks.length).toBeGreaterThanOrEqual(CHUNKS);
    for (const chunk of chunks) expect(chunk.checksum).toBe(crc32c(chunk.data) >>> 0);
  });

  it("pipelines the log after an installed snapshot at once, without a probe's round trip first", () => {
    // One entry per append, so that the log after the snapshot takes several appends, all of which the window admits.
    const lagging = laggingGroup({ maxBytesPerMessage: 1, maxInflightMessages: 16 });
    const { group, leader, follower, lagger } = lagging;
    for (let sequence = 0; sequence < 5; sequence++) commit(group, leader, `after-${sequence}`, [leader, follower]);
    const entriesAfterSnapshot = group.node(leader).status().lastIndex - lagging.snapshotIndex;
    expect(entriesAfterSnapshot).toBeGreaterThanOrEqual(6);
    group.latencyTicks = 3;
    group.restart(lagger);
    group.tickUntil(() => caughtUp(lagging), transferBoundTicks(3) + 50, "the lagger caught up");
    const installed = group.sent.find(
      ({ message }) => message.type === "snapshotResponse" && message.status === "installed",
    );
    expect(installed).toBeDefined();
    const appends = group.sent.filter(
      ({ message, tick }) =>
        message.type === "append" &&
        message.to === lagger &&
        message.entries.length > 0 &&
        tick > (installed?.tick ?? 0),
    );
    // In probe state the leader would send one append and wait for its answer, a round trip of 6 ticks, per entry.
    const firstTick = appends[0]?.tick;
    expect(appends.filter(({ tick }) => tick === firstTick)).toHaveLength(entriesAfterSnapshot);
    expect(appends).toHaveLength(entriesAfterSnapshot);
  });

  it("a newer snapshot on the leader restarts the transfer with it", () => {
    const lagging = laggingGroup();
    const { group, leader, follower, lagger } = lagging;
    group.latencyTicks = 1;
    group.restart(lagger);
    group.tickUntil(
      () => (group.disk(lagger).incomingSnapshot()?.receivedBytes ?? 0) >= 20 * CHUNK_BYTES,
      transferBoundTicks(1),
      "part of the snapshot durable",
    );
    const newer = snapshotData(2);
    commit(group, leader, "before-newer-snapshot", [leader, follower]);
    const newerIndex = group.node(leader).status().appliedIndex;
    group.node(leader).compact(newerIndex, newer);
    group.tickUntil(
      () => group.disk(lagger).snapshotIndex() === newerIndex && caughtUp(lagging),
      2 * transferBoundTicks(1),
      "the lagger installed the newer snapshot",
    );
    const chunks = group.chunksSentTo(lagger);
    const older = chunks.filter((chunk) => chunk.index === lagging.snapshotIndex);
    expect(chunks.filter((chunk) => chunk.index === newerIndex).length).toBeLessThanOrEqual(CHUNKS + WINDOW_CHUNKS);
    expect(older.length).toBeLessThan(CHUNKS);
    expect(group.disk(lagger).snapshot()?.data).toEqual(newer);
  });
});
