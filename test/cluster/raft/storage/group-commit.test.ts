import { describe, expect, it } from "vitest";
import { GroupCommitter } from "../../../../src/cluster/raft/storage/group-commit.js";

/** A transaction runner the test completes by hand, recording which writes each transaction ran. */
function manualRunner() {
  const transactions: { ran: string[]; finish: (error?: Error) => void }[] = [];
  const log: string[] = [];
  const run = (work: () => void): Promise<void> =>
    new Promise((resolve, reject) => {
      const record = { ran: [] as string[], finish: (error?: Error) => (error ? reject(error) : resolve()) };
      transactions.push(record);
      // Like LMDB, the work runs later than the call that starts the transaction.
      queueMicrotask(() => {
        const before = log.length;
        work();
        record.ran = log.slice(before);
      });
    });
  return { transactions, log, run };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("GroupCommitter", () => {
  it("puts writes submitted together into one transaction and resolves them only after it commits", async () => {
    const runner = manualRunner();
    const committer = new GroupCommitter(runner.run);
    const resolved: number[] = [];
    const promises = [1, 2, 3, 4, 5].map((value) =>
      committer.submit(() => runner.log.push(`w${value}`)).then(() => resolved.push(value)),
    );
    await settle();
    expect(runner.transactions).toHaveLength(1);
    expect(runner.transactions[0]?.ran).toEqual(["w1", "w2", "w3", "w4", "w5"]);
    expect(resolved).toEqual([]);
    runner.transactions[0]?.finish();
    await Promise.all(promises);
    expect(resolved).toEqual([1, 2, 3, 4, 5]);
    expect(committer.transactionCount).toBe(1);
  });

  it("collects everything submitted during a commit into the single next transaction", async () => {
    const runner = manualRunner();
    const committer = new GroupCommitter(runner.run);
    const first = committer.submit(() => runner.log.push("a"));
    await settle();
    const later = [1, 2, 3].map((value) => committer.submit(() => runner.log.push(`b${value}`)));
    await settle();
    expect(runner.transactions).toHaveLength(1);
    runner.transactions[0]?.finish();
    await first;
    await settle();
    expect(runner.transactions).toHaveLength(2);
    expect(runner.transactions[1]?.ran).toEqual(["b1", "b2", "b3"]);
    runner.transactions[1]?.finish();
    await Promise.all(later);
    expect(committer.transactionCount).toBe(2);
    expect(committer.operationCount).toBe(4);
  });

  it("rejects only the write whose precondition fails and commits the others", async () => {
    const runner = manualRunner();
    const committer = new GroupCommitter(runner.run);
    const good = committer.submit(() => runner.log.push("good"));
    const bad = committer.submit(() => {
      throw new Error("precondition");
    });
    await settle();
    runner.transactions[0]?.finish();
    await expect(good).resolves.toBeUndefined();
    await expect(bad).rejects.toThrow("precondition");
  });

  it("rejects the batch and every later write after a failed transaction", async () => {
    const runner = manualRunner();
    const committer = new GroupCommitter(runner.run);
    const write = committer.submit(() => runner.log.push("x"));
    await settle();
    runner.transactions[0]?.finish(new Error("disk full"));
    await expect(write).rejects.toThrow("disk full");
    await expect(committer.submit(() => {})).rejects.toThrow(/failed earlier/);
  });

  it("bounds the operations per transaction and the pending queue", async () => {
    const runner = manualRunner();
    const committer = new GroupCommitter(runner.run, { maxOperationsPerTransaction: 2, maxPendingOperations: 3 });
    const accepted = [1, 2, 3].map((value) => committer.submit(() => runner.log.push(`w${value}`)));
    await expect(committer.submit(() => {})).rejects.toThrow(/queue is full/);
    await settle();
    expect(runner.transactions[0]?.ran).toEqual(["w1", "w2"]);
    runner.transactions[0]?.finish();
    await settle();
    expect(runner.transactions[1]?.ran).toEqual(["w3"]);
    runner.transactions[1]?.finish();
    await Promise.all(accepted);
  });
});
