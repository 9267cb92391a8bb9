/**
 * Raft micro-benchmark: committed entries per second and commit latency (p50/p99) of a 3-member Raft group in this
 * process with durable LMDB storage, at several proposal concurrencies and entry sizes, side by side with the storage
 * limit (plain durable LMDB puts of the same encoded entries) and with the storage adapter alone. The three setups
 * are measured in alternating short phases so that load drift on the machine affects them alike. Everything runs on
 * temporary directories, talks to no network, and stops by itself after roughly half a minute. The ratio is
 * printed last.
 */
import { join } from "node:path";
import { formatNumber, printTable } from "../support/report.js";
import { type Contender, type Measurement, measureInterleaved } from "./harness.js";
import { InProcessRaftGroup } from "./raft-group.js";
import { openAdapter, openRawLmdb, payload, withTemporaryDirectory } from "./storage-limit.js";

/** What to measure and for how long. */
export interface RaftBenchmarkOptions {
  readonly concurrencies: readonly number[];
  readonly entrySizesBytes: readonly number[];
  /** Alternations of the three setups per configuration. */
  readonly rounds: number;
  /** Unmeasured lead-in of every phase. */
  readonly warmupMs: number;
  /** Measured part of every phase. */
  readonly phaseMs: number;
  /** Interval of the group's logical clock tick. */
  readonly tickIntervalMs: number;
  /** Longest wait for the group's first leader. */
  readonly electionTimeoutMs: number;
}

/** Six configurations × 4 rounds × 3 setups × 0.35 s: about 30 s in total. */
export const defaultRaftBenchmarkOptions: RaftBenchmarkOptions = {
  concurrencies: [1, 16, 64],
  entrySizesBytes: [128, 1024],
  rounds: 4,
  warmupMs: 50,
  phaseMs: 300,
  tickIntervalMs: 10,
  electionTimeoutMs: 3000,
};

const RAFT = "raft group, 3 members";
const ADAPTER = "storage adapter, 1 member";
const LIMIT = "LMDB put (storage limit)";

interface Row {
  readonly setup: string;
  readonly concurrency: number;
  readonly entryBytes: number;
  readonly measurement: Measurement;
  readonly limit: Measurement;
}

function geometricMean(values: readonly number[]): number {
  return Math.exp(values.reduce((sum, value) => sum + Math.log(value), 0) / values.length);
}

/** Measures the three setups for one concurrency and entry size, each in its own fresh directories. */
async function measureConfiguration(
  concurrency: number,
  entryBytes: number,
  options: RaftBenchmarkOptions,
  seed: number,
): Promise<Row[]> {
  return withTemporaryDirectory(async (directory) => {
    const group = await InProcessRaftGroup.start({
      directory: join(directory, "raft"),
      memberCount: 3,
      tickIntervalMs: options.tickIntervalMs,
      seed,
    });
    const adapter = openAdapter(join(directory, "adapter"), entryBytes);
    const limit = openRawLmdb(join(directory, "limit"), entryBytes);
    try {
      await group.waitForLeader(options.electionTimeoutMs);
      const data = payload(entryBytes);
      const contenders: Contender[] = [
        { name: RAFT, operation: () => group.propose(data) },
        { name: ADAPTER, operation: adapter.operation },
        { name: LIMIT, operation: limit.operation },
      ];
      const results = await measureInterleaved(
        contenders,
        concurrency,
        options.rounds,
        options.warmupMs,
        options.phaseMs,
      );
      const limitResult = results.get(LIMIT)!;
      return contenders.map(({ name }) => ({
        setup: name,
        concurrency,
        entryBytes,
        measurement: results.get(name)!,
        limit: limitResult,
      }));
    } finally {
      await group.stop();
      await adapter.close();
      await limit.close();
    }
  });
}

/** Runs the benchmark and prints its table and ratios. */
export async function run(options: RaftBenchmarkOptions = defaultRaftBenchmarkOptions): Promise<void> {
  console.log("raft benchmark: 3-member group in one process, durable LMDB commits in temporary directories");
  const rows: Row[] = [];
  let seed = 1;
  for (const entryBytes of options.entrySizesBytes) {
    for (const concurrency of options.concurrencies) {
      rows.push(...(await measureConfiguration(concurrency, entryBytes, options, seed)));
      seed += 1;
    }
  }
  const ratio = (row: Row): number => row.measurement.operationsPerSecond / row.limit.operationsPerSecond;
  printTable(
    ["setup", "concurrency", "entry bytes", "committed entries/s", "p50 ms", "p99 ms", "ratio to limit"],
    rows.map((row) => [
      row.setup,
      String(row.concurrency),
      String(row.entryBytes),
      formatNumber(row.measurement.operationsPerSecond),
      formatNumber(row.measurement.p50Ms, 2),
      formatNumber(row.measurement.p99Ms, 2),
      formatNumber(ratio(row), 2),
    ]),
  );
  const adapterRatios = rows.filter((row) => row.setup === ADAPTER).map(ratio);
  const raftRatios = rows.filter((row) => row.setup === RAFT).map(ratio);
  console.log(
    `storage adapter / storage limit, entries/s, geometric mean over ${adapterRatios.length} configurations: ${formatNumber(geometricMean(adapterRatios), 2)}`,
  );
  console.log(
    `raft group / storage limit, committed entries/s, geometric mean over ${raftRatios.length} configurations: ${formatNumber(geometricMean(raftRatios), 2)}`,
  );
}
