/**
 * Measurement helpers shared by the raft benchmark: a bounded latency recorder with percentiles, closed-loop load
 * generation interleaved across setups, and plain-text table printing.
 */

/** Most latency samples one measurement keeps; later samples are counted but not stored. */
const MAX_LATENCY_SAMPLES = 250_000;

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

/** Result of one measured setup. */
export interface Measurement {
  readonly operationsPerSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly operations: number;
}

/** Accumulates the measured part of several closed-loop phases of one setup. */
export class ClosedLoopStatistics {
  private readonly latencies = new LatencyRecorder();
  private completed = 0;
  private measuredMs = 0;

  /** Adds one phase's measured window. */
  addWindow(durationMs: number): void {
    this.measuredMs += durationMs;
  }

  /** Adds one operation that ran entirely inside a measured window. */
  addOperation(latencyMs: number): void {
    this.latencies.record(latencyMs);
    this.completed += 1;
  }

  /** Throughput and latency percentiles over all measured windows. */
  result(): Measurement {
    return {
      operationsPerSecond: this.measuredMs > 0 ? (this.completed * 1000) / this.measuredMs : Number.NaN,
      p50Ms: this.latencies.percentile(0.5),
      p99Ms: this.latencies.percentile(0.99),
      operations: this.completed,
    };
  }
}

/**
 * Runs `concurrency` closed-loop clients, each awaiting `operation()` back to back, for `warmupMs` unmeasured and
 * then `durationMs` measured, adding the operations that ran entirely inside the measured window to `statistics`.
 */
export async function runClosedLoopPhase(
  concurrency: number,
  warmupMs: number,
  durationMs: number,
  operation: () => Promise<void>,
  statistics: ClosedLoopStatistics,
): Promise<void> {
  const measureFromMs = performance.now() + warmupMs;
  const stopAtMs = measureFromMs + durationMs;
  const client = async (): Promise<void> => {
    while (performance.now() < stopAtMs) {
      const beganMs = performance.now();
      await operation();
      const endedMs = performance.now();
      if (beganMs >= measureFromMs && endedMs <= stopAtMs) {
        statistics.addOperation(endedMs - beganMs);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  statistics.addWindow(durationMs);
}

/** One setup taking part in an interleaved measurement. */
export interface Contender {
  readonly name: string;
  readonly operation: () => Promise<void>;
}

/**
 * Measures the contenders in alternating short phases (round after round) rather than one after the other, so
 * that drift in the machine's disk and CPU load during the run affects all of them alike and their ratio stays
 * meaningful.
 */
export async function measureInterleaved(
  contenders: readonly Contender[],
  concurrency: number,
  rounds: number,
  warmupMs: number,
  phaseMs: number,
): Promise<Map<string, Measurement>> {
  const statistics = new Map(contenders.map((contender) => [contender.name, new ClosedLoopStatistics()]));
  for (let round = 0; round < rounds; round += 1) {
    for (const contender of contenders) {
      await runClosedLoopPhase(concurrency, warmupMs, phaseMs, contender.operation, statistics.get(contender.name)!);
    }
  }
  return new Map([...statistics].map(([name, accumulated]) => [name, accumulated.result()]));
}
