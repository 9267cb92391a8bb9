import { describe, expect, it } from "vitest";
import { RaftNode, type Ready, SeededRandom } from "../../../../src/cluster/raft/index.js";
import { MemberStorage } from "../../../../src/cluster/raft/storage/member-storage.js";
import type { Entry } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const MAX_STEPS = 1000;

async function startNode(storage: MemberStorage): Promise<RaftNode> {
  return new RaftNode({
    id: 1,
    storage,
    persisted: await storage.load(),
    bootstrap: { members: [{ id: 1, role: "voter", priority: 1 }] },
    electionTimeoutTicks: 10,
    heartbeatTimeoutTicks: 3,
    maxInflightMessages: 4,
    maxInflightBytes: 1 << 20,
    maxEntriesPerMessage: 64,
    maxBytesPerMessage: 1 << 20,
    snapshotChunkBytes: 1024,
    snapshotWindowChunks: 4,
    snapshotResendTicks: 10,
    maxCommittedEntriesPerReady: 64,
    maxPendingReads: 8,
    maxUncommittedEntries: 1024,
    promotionLagEntries: 0,
    promotionStableTicks: 2,
    random: new SeededRandom(7),
    preVote: true,
    checkQuorum: true,
  });
}

/** Drives a single-member group the way a real driver does: persist durably, then apply, then advance. */
async function handle(node: RaftNode, storage: MemberStorage, applied: Entry[]): Promise<boolean> {
  const ready: Ready | null = node.ready();
  if (ready === null) {
    return false;
  }
  // A single member has nobody to send to.
  expect([...ready.messagesBeforePersist, ...ready.messages]).toEqual([]);
  // A single member never receives a snapshot.
  expect([ready.snapshotReceipt, ready.snapshot]).toEqual([null, null]);
  await storage.append(ready.entriesToPersist, ready.hardState);
  if (ready.compaction !== null) {
    await storage.installSnapshot(ready.compaction);
  }
  applied.push(...ready.committedEntries);
  node.advance(ready);
  return true;
}

async function settle(node: RaftNode, storage: MemberStorage, applied: Entry[]): Promise<void> {
  for (let step = 0; step < MAX_STEPS; step += 1) {
    if (!(await handle(node, storage, applied))) {
      return;
    }
  }
  throw new Error(`node did not settle within ${MAX_STEPS} ready batches`);
}

async function becomeLeader(node: RaftNode, storage: MemberStorage, applied: Entry[]): Promise<void> {
  for (let tick = 0; tick < MAX_STEPS && node.status().role !== "leader"; tick += 1) {
    node.tick();
    await settle(node, storage, applied);
  }
  expect(node.status().role).toBe("leader");
  await settle(node, storage, applied);
}

const text = (entry: Entry) => new TextDecoder().decode(entry.data);

describe("MemberStorage under the Raft core", () => {
  it("persists what a single-member group commits and restores the node after a restart", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory });
      const node = await startNode(storage);
      const applied: Entry[] = [];
      await becomeLeader(node, storage, applied);
      for (let value = 0; value < 5; value += 1) {
        expect(node.propose(new TextEncoder().encode(`value ${value}`)).accepted).toBe(true);
      }
      await settle(node, storage, applied);
      const committed = applied.filter((entry) => entry.kind === "normal");
      expect(committed.map(text)).toEqual(["value 0", "value 1", "value 2", "value 3", "value 4"]);
      const lastIndex = node.status().lastIndex;

      node.compact(committed[2]!.index, new TextEncoder().encode("state after value 2"));
      await settle(node, storage, applied);
      await storage.close();

      const reopened = MemberStorage.open({ directory });
      const persisted = await reopened.load();
      expect(persisted.snapshot?.index).toBe(committed[2]!.index);
      expect(persisted.lastIndex).toBe(lastIndex);
      expect(persisted.hardState.commitIndex).toBe(lastIndex);
      const restarted = await startNode(reopened);
      expect(restarted.status()).toMatchObject({ lastIndex, commitIndex: lastIndex, firstIndex: persisted.firstIndex });
      expect(reopened.entries(persisted.firstIndex, lastIndex + 1).map(text)).toEqual(["value 3", "value 4"]);
      await reopened.close();
    });
  });
});
