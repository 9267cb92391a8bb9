import { describe, expect, it } from "vitest";
import { RaftLog } from "../../../../src/cluster/raft/core/log.js";
import type { Entry } from "../../../../src/cluster/raft/types.js";
import { SimulatedDisk } from "../../../simulation/disk.js";

function entry(index: number, term: number): Entry {
  return { index, term, kind: "normal", data: new Uint8Array([index]) };
}

function logOver(entries: Entry[], commitIndex = 0): { log: RaftLog; disk: SimulatedDisk } {
  const disk = new SimulatedDisk();
  disk.appendSync(entries, { term: 3, votedFor: null, commitIndex });
  return {
    log: new RaftLog(disk, { snapshotIndex: 0, snapshotTerm: 0, lastIndex: disk.lastIndex(), commitIndex }),
    disk,
  };
}

describe("log", () => {
  it("reads durable and unstable entries as one log", () => {
    const { log } = logOver([entry(1, 1), entry(2, 1)]);
    log.append([entry(3, 2)]);
    expect(log.entries(1, 4).map((item) => item.index)).toEqual([1, 2, 3]);
    expect(log.term(3)).toBe(2);
    expect(log.stableLastIndex).toBe(2);
  });

  it("passes the byte budget to storage, and adds no unstable entry after a storage that stopped early", () => {
    const disk = new SimulatedDisk();
    disk.appendSync([entry(1, 1), entry(2, 1), entry(3, 1)], { term: 3, votedFor: null, commitIndex: 0 });
    const budgets: (number | undefined)[] = [];
    // A storage that honours the budget by returning only the first entry it reads.
    const stopsEarly = Object.assign(Object.create(disk) as SimulatedDisk, {
      entries: (fromIndex: number, toIndex: number, maxBytes?: number) => {
        budgets.push(maxBytes);
        return disk.entries(fromIndex, Math.min(toIndex, fromIndex + 1));
      },
    });
    const log = new RaftLog(stopsEarly, { snapshotIndex: 0, snapshotTerm: 0, lastIndex: 3, commitIndex: 0 });
    log.append([entry(4, 2)]);
    expect(log.entries(1, 5, 100, 1).map((item) => item.index)).toEqual([1]);
    expect(budgets).toEqual([1]);
    // Without a budget the storage is asked for everything, and the unstable entries follow.
    expect(log.entries(3, 5).map((item) => item.index)).toEqual([3, 4]);
    expect(budgets).toEqual([1, undefined]);
  });

  it("replacing a conflicting durable suffix hides the old entries until they are rewritten", () => {
    const { log } = logOver([entry(1, 1), entry(2, 1), entry(3, 1)]);
    log.append([entry(2, 2)]);
    expect(log.lastIndex()).toBe(2);
    expect(log.term(2)).toBe(2);
    expect(log.stableLastIndex).toBe(1);
  });

  it("never truncates committed entries (State Machine Safety)", () => {
    const { log } = logOver([entry(1, 1), entry(2, 1)], 2);
    expect(() => log.append([entry(2, 2)])).toThrow(/committed/);
  });

  it("rejects gaps and decreasing terms (Log Matching)", () => {
    const { log } = logOver([entry(1, 2)]);
    expect(() => log.append([entry(3, 2)])).toThrow(/gap/);
    expect(() => log.append([entry(2, 1)])).toThrow(/term/);
  });

  it("the commit index never decreases and never passes the last index", () => {
    const { log } = logOver([entry(1, 1), entry(2, 1)]);
    expect(log.commitTo(2)).toBe(true);
    expect(log.commitTo(1)).toBe(false);
    expect(log.committed).toBe(2);
    expect(() => log.commitTo(5)).toThrow(/beyond/);
  });

  it("marks entries durable only if they were not replaced meanwhile", () => {
    const { log } = logOver([entry(1, 1)]);
    log.append([entry(2, 1), entry(3, 1)]);
    log.append([entry(3, 2)]);
    log.stableTo(3, 1);
    expect(log.stableLastIndex).toBe(1);
    log.stableTo(3, 2);
    expect(log.stableLastIndex).toBe(3);
  });

  it("finds the last index of a term no later than a hint (fast back-tracking)", () => {
    const { log } = logOver([entry(1, 1), entry(2, 1), entry(3, 3), entry(4, 3), entry(5, 4)]);
    expect(log.findConflictByTerm(5, 2)).toEqual({ index: 2, term: 1 });
    expect(log.findConflictByTerm(5, 3)).toEqual({ index: 4, term: 3 });
  });

  it("the up-to-date comparison prefers a later last term, then a longer log", () => {
    const { log } = logOver([entry(1, 1), entry(2, 2)]);
    expect(log.isUpToDate(1, 3)).toBe(true);
    expect(log.isUpToDate(2, 2)).toBe(true);
    expect(log.isUpToDate(1, 2)).toBe(false);
    expect(log.isUpToDate(9, 1)).toBe(false);
  });

  it("refuses a durable commit index beyond the durable log (lost acknowledged data)", () => {
    const disk = new SimulatedDisk();
    disk.appendSync([entry(1, 1)], null);
    expect(() => new RaftLog(disk, { snapshotIndex: 0, snapshotTerm: 0, lastIndex: 1, commitIndex: 3 })).toThrow(
      /beyond/,
    );
  });
});
