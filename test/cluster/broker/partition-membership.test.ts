/**
 * Membership changes of a running partition through `PartitionReplica.changeMembership` and `forceMembership`, on real
 * replicas with real storage whose messages the test delivers in process: a replica joining under a steady write
 * load, a leader leaving, priorities, and a forced membership that survives a restart.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { MembershipAnswer, MembershipChange } from "../../../src/cluster/broker/membership.js";
import { PartitionReplica } from "../../../src/cluster/broker/partition-replica.js";
import type { PublishMessageCommand } from "../../../src/cluster/broker/protocol.js";
import { type EngineSnapshotRestorer, PartitionEngine } from "../../../src/cluster/engine/index.js";
import { type Member, type Message, votersOf } from "../../../src/cluster/raft/index.js";
import type { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import { MemberStorage } from "../../../src/cluster/raft/storage/member-storage.js";
import { detachedMessage } from "../../support/replica-messages.js";
import {
  inProcessReplicaOptions,
  leadingReplica,
  MemberEnvironments,
  publishThroughLeader,
  waitFor,
} from "./support.js";

function command(name: string): PublishMessageCommand {
  return { name, correlationKey: name, timeToLiveMs: 600_000, variables: {}, tenantId: "<default>" };
}

const voter = (id: number, priority = 1): Member => ({ id, role: "voter", priority });

describe("PartitionReplica membership changes", () => {
  const replicas = new Map<number, PartitionReplica>();
  const environments = new MemberEnvironments("membership");
  /** Members whose messages are dropped (in both directions). */
  const isolated = new Set<number>();
  /** Drops the messages it matches, when set. */
  let dropping: ((from: number, message: Message) => boolean) | null = null;
  /** Chunks of a snapshot in flight per member receiving it, for replicas opened from now on (default when unset). */
  let snapshotWindowChunks: number | undefined;

  async function openReplica(
    memberId: number,
    bootstrap: readonly Member[] | null,
    onFailure?: (error: Error) => void,
  ): Promise<PartitionReplica> {
    const replica = await PartitionReplica.open(
      inProcessReplicaOptions({
        memberId,
        environment: await environments.of(memberId),
        bootstrap,
        snapshotWindowChunks,
        send: (to, message) => {
          if (isolated.has(memberId) || isolated.has(to) || dropping?.(memberId, message)) return;
          replicas.get(to)?.receive(detachedMessage(message));
        },
        ...(onFailure === undefined ? {} : { onFailure }),
      }),
    );
    replicas.set(memberId, replica);
    return replica;
  }

  async function closeReplica(memberId: number): Promise<void> {
    await replicas.get(memberId)?.close();
    replicas.delete(memberId);
    await environments.close(memberId);
  }

  beforeEach(() => {
    isolated.clear();
    dropping = null;
    snapshotWindowChunks = undefined;
  });

  afterEach(async () => {
    vi.restoreAllMocks();
    for (const memberId of [...replicas.keys()]) await closeReplica(memberId);
    await environments.removeAll();
  });

  /**
   * Publishes `commands` through whichever replica leads at the time, each until it is published (with elections this
   * quick, leadership can move under load, and a replica that no longer leads refuses a publication), then waits
   * until every replica took a snapshot and returns the leader of that moment.
   */
  async function publishUntilSnapshotted(commands: readonly PublishMessageCommand[]): Promise<PartitionReplica> {
    for (const next of commands) await publishThroughLeader(() => replicas.values(), next);
    await waitFor(
      () => [...replicas.values()].every((replica) => replica.latestSnapshotIndex > 0),
      "a snapshot on every replica",
    );
    return leader();
  }

  /** The replica that leads (among the running ones), waiting for one. */
  function leader(): Promise<PartitionReplica> {
    return leadingReplica(() => replicas.values());
  }

  /** Asks the current leader for `change` until it answers `done`; returns every answer seen on the way. */
  async function changeUntilDone(change: MembershipChange, attempts = 2_000): Promise<MembershipAnswer[]> {
    const answers: MembershipAnswer[] = [];
    for (let attempt = 0; attempt < attempts; attempt += 1) {
      const current = [...replicas.values()].find((replica) => replica.report().role === "leader");
      if (current !== undefined) {
        const answer = await current.changeMembership(change);
        answers.push(answer);
        if (answer.outcome === "done") return answers;
        if (answer.outcome === "refused") throw new Error(`refused: ${answer.detail}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`${change.type} of ${change.member} never took hold`);
  }

  async function openGroup(members: readonly Member[]): Promise<void> {
    for (const member of members) await openReplica(member.id, members);
  }

  it("a replica joins under a steady write load: added as a learner, caught up, promoted, and holds every record", async () => {
    await openGroup([voter(0), voter(1), voter(2)]);
    const acknowledged: string[] = [];
    let writing = true;
    const writer = (async () => {
      for (let sequence = 0; writing; sequence += 1) {
        const answer = await (await leader()).publish(command(`steady-${sequence}`));
        if (answer.outcome === "published") acknowledged.push(answer.key);
      }
    })();
    await waitFor(() => acknowledged.length >= 200, "some writes before the join");
    const joining = await openReplica(3, null);
    // Not a member yet, it neither votes nor campaigns, and nobody counts it.
    expect(joining.report().role).toBe("follower");
    const added = await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    expect(added.at(-1)).toMatchObject({ outcome: "done" });
    const promoted = (await changeUntilDone({ type: "promote", member: 3 })).at(-1);
    expect(promoted?.outcome === "done" ? votersOf({ members: promoted.members }) : []).toEqual([0, 1, 2, 3]);
    const writtenDuringJoin = acknowledged.length;
    await waitFor(() => acknowledged.length >= writtenDuringJoin + 100, "writes go on after the promotion");
    writing = false;
    await writer;
    // The joined replica caught up through the log or a snapshot (the interval is 50 entries) and holds everything.
    await waitFor(
      () => joining.report().appliedIndex >= ([...replicas.values()][0]?.report().commitIndex ?? 0),
      "the new voter applied everything",
    );
    expect(joining.membership().receivedBytes).toBeGreaterThan(0);
    expect(joining.installedSnapshotCount).toBeGreaterThanOrEqual(1);
    // Its engine was decoded from the chunks as they arrived: the install did not read the snapshot back.
    expect(joining.snapshotsRestoredWhileReceivingCount).toBe(joining.installedSnapshotCount);
    // Without broker 0, brokers 1 and 2 are 2 of 4 voters: a leader among 1, 2 and 3 needs the new voter's vote.
    isolated.add(0);
    const remaining = await waitForLeaderAmong([1, 2, 3]);
    for (const key of acknowledged.slice(-50)) {
      expect((await remaining.getMessage(key)).outcome).toBe("found");
    }
  });

  it("a leader holds a waiting request until its change took hold: one request adds a learner, one promotes it, under writes", async () => {
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    await waitFor(() => replicas.get(0)?.report().role === "leader", "the primary leads");
    const primary = replicas.get(0) as PartitionReplica;
    let writing = true;
    const writer = (async () => {
      for (let sequence = 0; writing; sequence += 1) await primary.publish(command(`held-${sequence}`));
    })();
    await waitFor(() => primary.report().commitIndex >= 100, "some writes before the join");
    const joining = await openReplica(3, null);
    // Without waiting, the leader answers `in-progress` once it proposed; held, the one answer is the commit.
    const added = await primary.changeMembership({ type: "addLearner", member: 3, priority: 1 }, 5_000);
    expect(added).toMatchObject({ outcome: "done" });
    // The learner catches up through a snapshot and the log while the request is held; the leader proposes the
    // promotion itself once the learner stayed within the lag, and answers when it is committed.
    const promoted = await primary.changeMembership({ type: "promote", member: 3 }, 5_000);
    expect(promoted.outcome === "done" ? votersOf({ members: promoted.members }) : promoted).toEqual([0, 1, 2, 3]);
    writing = false;
    await writer;
    await waitFor(() => joining.report().appliedIndex >= primary.report().commitIndex, "the new voter caught up");
  });

  it("a leader answers a held membership request when it stops", async () => {
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    await waitFor(() => replicas.get(0)?.report().role === "leader", "the primary leads");
    const primary = replicas.get(0) as PartitionReplica;
    // Broker 3 never runs, so it never catches up and its promotion waits.
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    const held = primary.changeMembership({ type: "promote", member: 3 }, 5_000);
    await closeReplica(0);
    expect(await held).toMatchObject({ outcome: "unavailable" });
  });

  it("a leader sending its snapshot to a joining replica keeps that snapshot and the log after it until the transfer ends", async () => {
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    const sender = await publishUntilSnapshotted(
      Array.from({ length: 60 }, (_, sequence) => command(`before-${sequence}`)),
    );
    const snapshotIndex = sender.latestSnapshotIndex;
    // The joining replica's answers to the snapshot's chunks are lost, so the transfer stays under way.
    dropping = (from, message) => from === 3 && message.type === "snapshotResponse";
    const joining = await openReplica(3, null);
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    for (let sequence = 0; sequence < 120; sequence += 1) {
      expect((await sender.publish(command(`during-${sequence}`))).outcome).toBe("published");
    }
    // More than two snapshot intervals (50 entries) were applied, and the snapshot being sent is still the latest.
    expect(sender.report().appliedIndex - snapshotIndex).toBeGreaterThan(100);
    expect(sender.latestSnapshotIndex).toBe(snapshotIndex);
    dropping = null;
    await waitFor(() => joining.installedSnapshotCount === 1, "the joining replica installed the snapshot");
    await waitFor(
      () => joining.report().appliedIndex >= sender.report().commitIndex,
      "the joining replica caught up through the log after the snapshot",
    );
    // The transfer is over: the leader compacts again.
    await waitFor(() => sender.latestSnapshotIndex > snapshotIndex, "the leader compacts after the transfer");
  });

  it("a joining replica restarted in the middle of a snapshot resumes it and restores its engine from the stored snapshot a chunk at a time", async () => {
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    // Over two 1 MiB chunks of snapshot.
    const variables = { blob: "b".repeat(60_000) };
    const sender = await publishUntilSnapshotted(
      Array.from({ length: 60 }, (_, sequence) => ({ ...command(`large-${sequence}`), variables })),
    );
    // Only the first chunk reaches the joining replica before it stops.
    dropping = (_from, message) => message.type === "snapshotChunk" && message.to === 3 && message.offset > 0;
    let joining = await openReplica(3, null);
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    await waitFor(() => joining.membership().receivedBytes >= 1024 * 1024, "the first chunk received");
    await closeReplica(3);
    dropping = null;
    joining = await openReplica(3, null);
    await waitFor(() => joining.installedSnapshotCount === 1, "the resumed snapshot installed");
    // The receipt resumed after the first chunk (a receipt started over would have been decoded as it arrived), so
    // the engine was read back from the installed snapshot.
    expect(joining.snapshotsRestoredWhileReceivingCount).toBe(0);
    await waitFor(() => joining.report().appliedIndex >= sender.report().commitIndex, "the joining replica caught up");
    expect(joining.bufferedMessageCount).toBe(sender.bufferedMessageCount);
  });

  it("a joining replica receives a snapshot of several chunks one chunk at a time, each read into the memory of one sent before, and holds every message", async () => {
    // A window of one chunk: every acknowledgement makes the leader read the next chunk, into a buffer handed back.
    snapshotWindowChunks = 1;
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    // Over three 1 MiB chunks of snapshot, each chunk's bytes different from the others'.
    const sender = await publishUntilSnapshotted(
      Array.from({ length: 60 }, (_, sequence) => ({
        ...command(`large-${sequence}`),
        variables: { blob: String.fromCharCode(97 + (sequence % 26)).repeat(60_000) },
      })),
    );
    const senderId = [...replicas.entries()].find(([, replica]) => replica === sender)?.[0] as number;
    const senderEnvironment = environments.opened(senderId) as StorageEnvironment;
    const reusedBefore = senderEnvironment.chunkBuffers.reusedBuffers;
    const joining = await openReplica(3, null);
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    await waitFor(() => joining.installedSnapshotCount === 1, "the snapshot installed");
    await waitFor(() => joining.report().appliedIndex >= sender.report().commitIndex, "the joining replica caught up");
    // Chunks after the first were read into memory the leader had sent from (a fresh buffer each time otherwise; here
    // an answer can arrive, and the next chunk be read, before the sending turn handed its chunk back).
    expect(senderEnvironment.chunkBuffers.reusedBuffers - reusedBefore).toBeGreaterThanOrEqual(1);
    expect(joining.membership().receivedBytes).toBeGreaterThan(3 * 1024 * 1024);
    // A chunk overwritten before it was stored would have failed the snapshot's checksum at its install.
    expect(joining.installedSnapshotCount).toBe(1);
    expect(joining.bufferedMessageCount).toBe(sender.bufferedMessageCount);
  });

  /**
   * A group whose leader holds a snapshot of several 1 MiB chunks, and a hold on the first write of received chunks
   * (only a joining replica receives chunks): the write stays pending until `release` or `fail` is called.
   */
  async function groupWithHeldChunkWrite(): Promise<{
    sender: PartitionReplica;
    heldWrites: () => number;
    decodedBytes: () => number;
    release: () => void;
    fail: (error: Error) => void;
  }> {
    await openGroup([voter(0, 3), voter(1), voter(2)]);
    const sender = await publishUntilSnapshotted(
      Array.from({ length: 60 }, (_, sequence) => ({
        ...command(`large-${sequence}`),
        variables: { blob: "b".repeat(60_000) },
      })),
    );
    let settle: { resolve: () => void; reject: (error: Error) => void } | null = null;
    const held = new Promise<void>((resolve, reject) => {
      settle = { resolve, reject };
    });
    let heldWrites = 0;
    const write = MemberStorage.prototype.receiveSnapshotChunks;
    vi.spyOn(MemberStorage.prototype, "receiveSnapshotChunks").mockImplementation(async function (
      this: MemberStorage,
      receipt,
    ) {
      if (heldWrites === 0 && receipt.chunks.length > 0) {
        heldWrites += 1;
        await held;
      }
      return write.call(this, receipt);
    });
    // Every engine restore started from here on, to see how far each one decoded.
    const restorers: EngineSnapshotRestorer[] = [];
    const startRestore = PartitionEngine.restorer;
    vi.spyOn(PartitionEngine, "restorer").mockImplementation(() => {
      const restorer = startRestore.call(PartitionEngine);
      restorers.push(restorer);
      return restorer;
    });
    return {
      sender,
      heldWrites: () => heldWrites,
      decodedBytes: () => restorers.reduce((sum, restorer) => sum + restorer.decodedBytes, 0),
      release: () => settle?.resolve(),
      fail: (error) => settle?.reject(error),
    };
  }

  it("a joining replica decodes received chunks while their write is pending, and answers them only once it is durable", async () => {
    const { sender, heldWrites, decodedBytes, release } = await groupWithHeldChunkWrite();
    const acknowledgedOffsets: number[] = [];
    dropping = (from, message) => {
      if (from === 3 && message.type === "snapshotResponse" && message.status === "continue") {
        acknowledgedOffsets.push(message.nextOffset);
      }
      return false;
    };
    const joining = await openReplica(3, null);
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    await waitFor(() => heldWrites() === 1 && decodedBytes() > 0, "a chunk decoded while its write is held");
    // Nothing of the chunks being written is acknowledged while the write is pending (an answer of offset 0 only
    // says where the receipt starts).
    expect(acknowledgedOffsets.filter((offset) => offset > 0)).toEqual([]);
    release();
    await waitFor(() => joining.installedSnapshotCount === 1, "the snapshot installed");
    await waitFor(() => joining.report().appliedIndex >= sender.report().commitIndex, "the joining replica caught up");
    expect(acknowledgedOffsets.some((offset) => offset > 0)).toBe(true);
    // The engine came from the chunks decoded as they arrived, not from reading the snapshot back.
    expect(joining.snapshotsRestoredWhileReceivingCount).toBe(1);
    expect(joining.bufferedMessageCount).toBe(sender.bufferedMessageCount);
  });

  it("a joining replica whose write of received chunks fails while it decodes them fails, answering none of them", async () => {
    const { heldWrites, decodedBytes, fail } = await groupWithHeldChunkWrite();
    const acknowledgedOffsets: number[] = [];
    dropping = (from, message) => {
      if (from === 3 && message.type === "snapshotResponse" && message.status === "continue") {
        acknowledgedOffsets.push(message.nextOffset);
      }
      return false;
    };
    const failures: Error[] = [];
    const joining = await openReplica(3, null, (error) => failures.push(error));
    await changeUntilDone({ type: "addLearner", member: 3, priority: 1 });
    await waitFor(() => heldWrites() === 1 && decodedBytes() > 0, "a chunk decoded while its write is held");
    fail(new Error("the disk went away"));
    await waitFor(() => failures.length === 1, "the joining replica failed");
    expect(failures[0]?.message).toBe("the disk went away");
    expect(joining.failed).toBe(true);
    expect(acknowledgedOffsets.filter((offset) => offset > 0)).toEqual([]);
    expect(joining.installedSnapshotCount).toBe(0);
  });

  async function waitForLeaderAmong(memberIds: readonly number[]): Promise<PartitionReplica> {
    let found: PartitionReplica | undefined;
    await waitFor(
      () => {
        found = memberIds.map((id) => replicas.get(id)).find((replica) => replica?.report().role === "leader");
        return found !== undefined;
      },
      `a leader among ${memberIds.join(", ")}`,
    );
    return found as PartitionReplica;
  }

  it("a leader asked to remove itself hands leadership over first, then the new leader removes it", async () => {
    await openGroup([voter(0), voter(1), voter(2)]);
    const first = await leader();
    const leaving = [...replicas.entries()].find(([, replica]) => replica === first)?.[0] as number;
    const firstAnswer = await first.changeMembership({ type: "remove", member: leaving });
    expect(firstAnswer).toMatchObject({ outcome: "in-progress", detail: expect.stringMatching(/handing leadership/) });
    const answers = await changeUntilDone({ type: "remove", member: leaving });
    expect(answers.at(-1)).toMatchObject({ outcome: "done" });
    const next = await leader();
    expect(next).not.toBe(first);
    expect(next.committedConfiguration().members.map((member) => member.id)).not.toContain(leaving);
    // The removed replica stops and its data goes; the rest keep serving.
    await first.destroy();
    replicas.delete(leaving);
    expect((await next.publish(command("after-leave"))).outcome).toBe("published");
  });

  it("a leader asked to remove itself and to wait answers once it handed over, naming the new leader", async () => {
    await openGroup([voter(0), voter(1), voter(2)]);
    const first = await leader();
    const leaving = [...replicas.entries()].find(([, replica]) => replica === first)?.[0] as number;
    // Without waiting it answers `in-progress` while it hands over; held, it answers when the hand-over ended.
    const answer = await first.changeMembership({ type: "remove", member: leaving }, 5_000);
    expect(answer).toMatchObject({ outcome: "not-leader" });
    const next = answer.outcome === "not-leader" ? replicas.get(answer.leaderId ?? -1) : undefined;
    expect(next).toBeDefined();
    expect(next).not.toBe(first);
    expect(await next?.changeMembership({ type: "remove", member: leaving }, 5_000)).toMatchObject({
      outcome: "done",
    });
  });

  it("refuses to remove the last voter", async () => {
    await openGroup([voter(0)]);
    const only = await leader();
    expect(await only.changeMembership({ type: "remove", member: 0 })).toMatchObject({
      outcome: "refused",
      detail: expect.stringMatching(/only voting replica/),
    });
  });

  it("a priority change takes effect and the highest-priority caught-up replica becomes leader", async () => {
    await openGroup([voter(0, 3), voter(1, 2), voter(2, 1)]);
    await waitFor(() => replicas.get(0)?.report().role === "leader", "the primary leads");
    await changeUntilDone({ type: "setPriority", member: 2, priority: 9 });
    await waitFor(() => replicas.get(2)?.report().role === "leader", "the new primary leads");
  });

  it("a forced membership is durable: a member restarted before it reached the log resumes it", async () => {
    await openGroup([voter(0), voter(1), voter(2)]);
    await leader();
    // Brokers 1 and 2 are gone for good; broker 0 is forced to carry the partition alone.
    await closeReplica(1);
    await closeReplica(2);
    isolated.add(0);
    await (replicas.get(0) as PartitionReplica).forceMembership([voter(0)]);
    expect((replicas.get(0) as PartitionReplica).membership()).toMatchObject({ forced: true });
    await closeReplica(0);
    isolated.clear();
    const restarted = await openReplica(0, null);
    await waitFor(() => restarted.report().role === "leader", "the forced member leads alone");
    await waitFor(() => !restarted.membership().forced, "the forced membership is committed");
    expect(votersOf(restarted.committedConfiguration())).toEqual([0]);
    expect((await restarted.publish(command("after-force"))).outcome).toBe("published");
    // Forcing the same membership again is a no-op (no new election).
    const term = restarted.report().term;
    await restarted.forceMembership([voter(0)]);
    expect(restarted.report().term).toBe(term);
  });
});
