import { describe, expect, it } from "vitest";
import { snapshotChecksum } from "../../../../src/cluster/raft/core/snapshot-transfer.js";
import { type CommitReport, LmdbEnvironment } from "../../../../src/cluster/raft/storage/lmdb-environment.js";
import { LmdbRaftStorage } from "../../../../src/cluster/raft/storage/lmdb-storage.js";
import type { Entry, Snapshot } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const encoder = new TextEncoder();

function entries(first: number, count: number, term: number, label: string): Entry[] {
  return Array.from({ length: count }, (_, offset) => ({
    index: first + offset,
    term,
    kind: "normal" as const,
    data: encoder.encode(`${label}-${first + offset}`),
  }));
}

function snapshot(index: number, term: number, text: string): Snapshot {
  const data = encoder.encode(text);
  return {
    metadata: {
      index,
      term,
      configuration: { members: [{ id: 1, role: "voter", priority: 1 }] },
      sizeBytes: data.byteLength,
      checksum: snapshotChecksum(data),
    },
    data,
  };
}

describe.each([false, true])("LmdbEnvironment (synchronous commit: %s)", (synchronousCommit) => {
  it("keeps the records of members in different scopes apart, across a reopen", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = LmdbEnvironment.open({ directory, synchronousCommit });
      const partitionOne = LmdbRaftStorage.openIn(environment, { scope: 1 });
      const partitionTwo = LmdbRaftStorage.openIn(environment, { scope: 2 });
      await partitionOne.append(entries(1, 5, 1, "one"), { term: 1, votedFor: 1, commitIndex: 3 });
      await partitionTwo.append(entries(1, 2, 4, "two"), { term: 4, votedFor: null, commitIndex: 0 });
      await partitionOne.installSnapshot(snapshot(3, 1, "state of one"));
      await partitionOne.close();
      await partitionTwo.close();
      await environment.close();

      const reopened = LmdbEnvironment.open({ directory, synchronousCommit });
      const one = LmdbRaftStorage.openIn(reopened, { scope: 1 });
      const two = LmdbRaftStorage.openIn(reopened, { scope: 2 });
      const three = LmdbRaftStorage.openIn(reopened, { scope: 3 });
      expect(await one.load()).toMatchObject({ firstIndex: 4, lastIndex: 5, hardState: { term: 1, commitIndex: 3 } });
      expect(one.entries(4, 6)).toEqual(entries(4, 2, 1, "one"));
      expect(new TextDecoder().decode(one.snapshot()?.data)).toBe("state of one");
      expect(await two.load()).toMatchObject({ firstIndex: 1, lastIndex: 2, hardState: { term: 4, votedFor: null } });
      expect(two.entries(1, 3)).toEqual(entries(1, 2, 4, "two"));
      expect(two.snapshot()).toBeNull();
      expect(await three.load()).toMatchObject({ firstIndex: 1, lastIndex: 0, snapshot: null });
      for (const storage of [one, two, three]) await storage.close();
      await reopened.close();
    });
  });

  it("commits writes of several members submitted in one turn together, durably for each", async () => {
    await withTemporaryDirectory(async (directory) => {
      const commits: CommitReport[] = [];
      const onCommit = (commit: CommitReport): void => {
        commits.push(commit);
      };
      const environment = LmdbEnvironment.open({ directory, synchronousCommit, onCommit });
      const members = [1, 2, 3].map((scope) => LmdbRaftStorage.openIn(environment, { scope }));
      // A first write to have a transaction in flight (the writer thread's commits coalesce behind it).
      await members[0]?.append(entries(1, 1, 1, "warm"), null);
      const before = environment.transactionCount;
      await Promise.all(
        members.map((member, position) => member.append(entries(position === 0 ? 2 : 1, 3, 1, `m${position}`), null)),
      );
      expect(environment.transactionCount - before).toBe(1);
      expect(commits.map((commit) => commit.writes)).toEqual([1, 3]);
      expect(commits.every((commit) => commit.durationMs >= 0)).toBe(true);
      for (const member of members) await member.close();
      await environment.close();
    });
  });

  it("refuses writes once closed", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = LmdbEnvironment.open({ directory, synchronousCommit });
      await environment.close();
      await expect(environment.submit(() => {})).rejects.toThrow(/closed/);
    });
  });
});
