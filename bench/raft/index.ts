/**
 * Raft micro-benchmark: committed entries per second and commit latency (p50/p99) for the storage limit (plain
 * durable LMDB appends of the same entries) and for the storage adapter, at several proposal concurrencies and
 * entry sizes. Everything runs in this process on temporary directories, talks to no network, and stops by itself
 * after roughly half a minute. The ratio is printed last.
 */
import { formatNumber, type Measurement, printTable } from "./harness.js";
import { type LoadShape, measureAdapter, measureRawLmdb } from "./storage-limit.js";

/** What to measure and for how long. */
export interface RaftBenchmarkOptions {
  readonly concurrencies: readonly number[];
  readonly entrySizesBytes: readonly number[];
  readonly warmupMs: number;
  readonly durationMs: number;
}

/** Six configurations, three measurements each, about 1.5 s per measurement: about 30 s in total. */
export const defaultRaftBenchmarkOptions: RaftBenchmarkOptions = {
  concurrencies: [1, 16, 64],
  entrySizesBytes: [128, 1024],
  warmupMs: 250,
  durationMs: 1250,
};

interface Row {
  readonly setup: string;
  readonly shape: LoadShape;
  readonly measurement: Measurement;
}

function geometricMean(values: readonly number[]): number {
  return Math.exp(values.reduce((sum, value) => sum + Math.log(value), 0) / values.length);
}

/** Runs the benchmark and prints its table and ratio. */
export async function run(options: RaftBenchmarkOptions = defaultRaftBenchmarkOptions): Promise<void> {
  const rows: Row[] = [];
  const ratios: number[] = [];
  console.log("raft benchmark: durable commits on LMDB in temporary directories (no network)");
  for (const entryBytes of options.entrySizesBytes) {
    for (const concurrency of options.concurrencies) {
      const shape: LoadShape = { concurrency, entryBytes, warmupMs: options.warmupMs, durationMs: options.durationMs };
      const limit = await measureRawLmdb(shape);
      const adapter = await measureAdapter(shape);
      rows.push({ setup: "LMDB put (storage limit)", shape, measurement: limit });
      rows.push({ setup: "storage adapter, 1 member", shape, measurement: adapter });
      ratios.push(adapter.operationsPerSecond / limit.operationsPerSecond);
    }
  }
  printTable(
    ["setup", "concurrency", "entry bytes", "entries/s", "p50 ms", "p99 ms"],
    rows.map(({ setup, shape, measurement }) => [
      setup,
      String(shape.concurrency),
      String(shape.entryBytes),
      formatNumber(measurement.operationsPerSecond),
      formatNumber(measurement.p50Ms, 3),
      formatNumber(measurement.p99Ms, 3),
    ]),
  );
  console.log(
    `ratio storage adapter / storage limit (entries/s, geometric mean of ${ratios.length} configurations): ${formatNumber(geometricMean(ratios), 2)}`,
  );
}
