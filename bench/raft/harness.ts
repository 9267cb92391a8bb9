/**
 * Measurement helpers shared by the raft benchmark: a bounded latency recorder with percentiles, a closed-loop load
 * generator, and plain-text table printing.
 */

/** Most latency samples one measurement keeps; later samples are counted but not stored. */
const MAX_LATENCY_SAMPLES = 1_000_000;

/** Collects latencies in milliseconds and reports percentiles. */
export class LatencyRecorder {
  private readonly samplesMs = new Float64Array(MAX_LATENCY_SAMPLES);
  private stored = 0;
  private counted = 0;

  /** Records one latency. */
  record(latencyMs: number): void {
    if (this.stored < MAX_LATENCY_SAMPLES) {
      this.samplesMs[this.stored] = latencyMs;
      this.stored += 1;
    }
    this.counted += 1;
  }

  /** Number of recorded operations. */
  get count(): number {
    return this.counted;
  }

  /** The `fraction` percentile (0..1) of the stored samples, nearest-rank; NaN when empty. */
  percentile(fraction: number): number {
    if (this.stored === 0) {
      return Number.NaN;
    }
    const sorted = this.samplesMs.slice(0, this.stored).sort();
    const rank = Math.min(this.stored - 1, Math.max(0, Math.ceil(fraction * this.stored) - 1));
    return sorted[rank] ?? Number.NaN;
  }
}

/** Result of one measured run. */
export interface Measurement {
  readonly operationsPerSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly operations: number;
}

/**
 * Runs `concurrency` closed-loop clients, each awaiting `operation()` back to back, for `warmupMs` unmeasured and
 * then `durationMs` measured; returns throughput and latency percentiles of the measured part.
 */
export async function measureClosedLoop(
  concurrency: number,
  warmupMs: number,
  durationMs: number,
  operation: () => Promise<void>,
): Promise<Measurement> {
  const recorder = new LatencyRecorder();
  const startMs = performance.now();
  const measureFromMs = startMs + warmupMs;
  const stopAtMs = measureFromMs + durationMs;
  let completedInWindow = 0;
  const client = async (): Promise<void> => {
    while (performance.now() < stopAtMs) {
      const beganMs = performance.now();
      await operation();
      const endedMs = performance.now();
      if (beganMs >= measureFromMs && endedMs <= stopAtMs) {
        recorder.record(endedMs - beganMs);
        completedInWindow += 1;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  return {
    operationsPerSecond: (completedInWindow * 1000) / durationMs,
    p50Ms: recorder.percentile(0.5),
    p99Ms: recorder.percentile(0.99),
    operations: completedInWindow,
  };
}

/** Prints rows as an aligned plain-text table. */
export function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const format = (cells: readonly string[]): string =>
    cells.map((cell, column) => cell.padStart(widths[column] ?? 0)).join("  ");
  console.log(format(headers));
  console.log(widths.map((width) => "-".repeat(width)).join("  "));
  for (const row of rows) {
    console.log(format(row));
  }
}

/** Formats a number with a fixed count of decimals. */
export function formatNumber(value: number, decimals = 0): string {
  return Number.isFinite(value) ? value.toFixed(decimals) : "n/a";
}
