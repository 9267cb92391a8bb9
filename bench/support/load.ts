import { performance } from "node:perf_hooks";
import { Pool } from "undici";

/** One kind of request the load generator repeats. */
export interface LoadTarget {
  /** Origin of the server, e.g. `http://127.0.0.1:8088`. */
  origin: string;
  method: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  body?: string;
}

/** What one measurement found. */
export interface LoadResult {
  connections: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Answers other than 200 (and transport failures) during the measured period. */
  errors: number;
  /** Answers 200 over the whole call, warm-up included (to relate other counters taken around the call). */
  answeredRequests: number;
}

/** The undici request options of `target`. */
function requestOf(target: LoadTarget): {
  method: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
} {
  return { method: target.method, path: target.path, headers: target.headers, body: target.body };
}

function percentile(sortedMs: readonly number[], fraction: number): number {
  if (sortedMs.length === 0) return Number.NaN;
  const index = Math.min(sortedMs.length - 1, Math.ceil(fraction * sortedMs.length) - 1);
  return sortedMs[Math.max(0, index)] ?? Number.NaN;
}

/**
 * Keeps `connections` requests in flight over as many keep-alive connections for `warmupMs` (not measured), then
 * for `durationMs`, and reports throughput and latency percentiles of the measured period.
 */
export async function measure(
  target: LoadTarget,
  options: { connections: number; warmupMs: number; durationMs: number },
): Promise<LoadResult> {
  const pool = new Pool(target.origin, { connections: options.connections, pipelining: 1 });
  const latenciesMs: number[] = [];
  let errors = 0;
  let answeredRequests = 0;
  let recording = false;
  const warmupEndsAt = performance.now() + options.warmupMs;
  const endsAt = warmupEndsAt + options.durationMs;

  async function worker(): Promise<void> {
    while (performance.now() < endsAt) {
      const startedAt = performance.now();
      let ok = false;
      try {
        const response = await pool.request(requestOf(target));
        await response.body.dump();
        ok = response.statusCode === 200;
      } catch {
        ok = false;
      }
      const finishedAt = performance.now();
      if (ok) answeredRequests += 1;
      if (!recording && finishedAt >= warmupEndsAt) recording = true;
      if (recording && startedAt >= warmupEndsAt && finishedAt <= endsAt) {
        latenciesMs.push(finishedAt - startedAt);
        if (!ok) errors++;
      }
    }
  }

  await Promise.all(Array.from({ length: options.connections }, () => worker()));
  await pool.close();
  latenciesMs.sort((left, right) => left - right);
  return {
    connections: options.connections,
    requestsPerSecond: (latenciesMs.length - errors) / (options.durationMs / 1000),
    p50Ms: percentile(latenciesMs, 0.5),
    p99Ms: percentile(latenciesMs, 0.99),
    errors,
    answeredRequests,
  };
}

/** Sends one request and returns its status and body, to check a server answers as expected before loading it. */
export async function probe(target: LoadTarget): Promise<{ status: number; body: string }> {
  const pool = new Pool(target.origin, { connections: 1 });
  try {
    const response = await pool.request(requestOf(target));
    return { status: response.statusCode, body: await response.body.text() };
  } finally {
    await pool.close();
  }
}
