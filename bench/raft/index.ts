/**
 * Raft micro-benchmark: committed entries per second and commit latency (p50/p99) of a 3-member Raft group in this
 * process with durable LMDB storage, at several proposal concurrencies and entry sizes, side by side with the storage
 * limit (plain durable LMDB puts of the same encoded entries) and with the storage adapter alone. Everything runs on
 * temporary directories, talks to no network, and stops by itself after roughly half a minute. The ratio is
 * printed last.
 */
import { formatNumber, type Measurement, measureClosedLoop, printTable } from "./harness.js";
import { InProcessRaftGroup } from "./raft-group.js";
import { type LoadShape, measureAdapter, measureRawLmdb, payload, withTemporaryDirectory } from "./storage-limit.js";

/** What to measure and for how long. */
export interface RaftBenchmarkOptions {
  readonly concurrencies: readonly number[];
  readonly entrySizesBytes: readonly number[];
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Interval of the group's logical clock tick. */
  readonly tickIntervalMs: number;
  /** Longest wait for the group's first leader. */
  readonly electionTimeoutMs: number;
}

/** Six configurations, three measurements each of about 1.5 s: about 30 s in total. */
export const defaultRaftBenchmarkOptions: RaftBenchmarkOptions = {
  concurrencies: [1, 16, 64],
  entrySizesBytes: [128, 1024],
  warmupMs: 250,
  durationMs: 1250,
  tickIntervalMs: 10,
  electionTimeoutMs: 3000,
};

interface Row {
  readonly setup: string;
  readonly shape: LoadShape;
  readonly measurement: Measurement;
}

function geometricMean(values: readonly number[]): number {
  return Math.exp(values.reduce((sum, value) => sum + Math.log(value), 0) / values.length);
}

/** Commits entries through a fresh 3-member group and measures from proposal to the leader's apply. */
function measureRaftGroup(shape: LoadShape, options: RaftBenchmarkOptions, seed: number): Promise<Measurement> {
  return withTemporaryDirectory(async (directory) => {
    const group = await InProcessRaftGroup.start({
      directory,
      memberCount: 3,
      tickIntervalMs: options.tickIntervalMs,
      seed,
    });
    try {
      await group.waitForLeader(options.electionTimeoutMs);
      const data = payload(shape.entryBytes);
      return await measureClosedLoop(shape.concurrency, shape.warmupMs, shape.durationMs, () => group.propose(data));
    } finally {
      await group.stop();
    }
  });
}

/** Runs the benchmark and prints its table and ratios. */
export async function run(options: RaftBenchmarkOptions = defaultRaftBenchmarkOptions): Promise<void> {
  const rows: Row[] = [];
  const raftRatios: number[] = [];
  const adapterRatios: number[] = [];
  console.log("raft benchmark: 3-member group in one process, durable LMDB commits in temporary directories");
  let seed = 1;
  for (const entryBytes of options.entrySizesBytes) {
    for (const concurrency of options.concurrencies) {
      const shape: LoadShape = { concurrency, entryBytes, warmupMs: options.warmupMs, durationMs: options.durationMs };
      const raft = await measureRaftGroup(shape, options, seed);
      seed += 1;
      const limit = await measureRawLmdb(shape);
      const adapter = await measureAdapter(shape);
      rows.push({ setup: "raft group, 3 members", shape, measurement: raft });
      rows.push({ setup: "storage adapter, 1 member", shape, measurement: adapter });
      rows.push({ setup: "LMDB put (storage limit)", shape, measurement: limit });
      raftRatios.push(raft.operationsPerSecond / limit.operationsPerSecond);
      adapterRatios.push(adapter.operationsPerSecond / limit.operationsPerSecond);
    }
  }
  printTable(
    ["setup", "concurrency", "entry bytes", "committed entries/s", "p50 ms", "p99 ms", "ratio to limit"],
    rows.map(({ setup, shape, measurement }, position) => {
      const limit = rows[position - (position % 3) + 2]?.measurement.operationsPerSecond ?? Number.NaN;
      return [
        setup,
        String(shape.concurrency),
        String(shape.entryBytes),
        formatNumber(measurement.operationsPerSecond),
        formatNumber(measurement.p50Ms, 2),
        formatNumber(measurement.p99Ms, 2),
        formatNumber(measurement.operationsPerSecond / limit, 2),
      ];
    }),
  );
  console.log(
    `storage adapter / storage limit, entries/s, geometric mean of ${adapterRatios.length} configurations: ${formatNumber(geometricMean(adapterRatios), 2)}`,
  );
  console.log(
    `raft group / storage limit, committed entries/s, geometric mean of ${raftRatios.length} configurations: ${formatNumber(geometricMean(raftRatios), 2)}`,
  );
}
