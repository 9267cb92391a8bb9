/**
 * Memory of processes, from Linux's `/proc/<pid>/status`: the resident set now (VmRSS) split into anonymous memory
 * (RssAnon: the JavaScript heap, buffers, native allocations) and file pages mapped into the process (RssFile: e.g.
 * the pages of an LMDB environment it read through its memory map, which are page cache the kernel can drop, not
 * memory the process allocated), and the peak resident set (VmHWM). Writing 5 to `/proc/<pid>/clear_refs` resets the
 * peak to the current resident set, so a benchmark can read the peak of one measurement alone.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { processCpuTime } from "./cpu.js";

/** One reading, in bytes. */
export interface MemoryReading {
  readonly rss: number;
  readonly rssAnon: number;
  readonly rssFile: number;
  /** Peak resident set since the process started or since `resetPeakMemory`. */
  readonly peakRss: number;
}

/** The memory of process `pid` now, or undefined when it cannot be read (no `/proc`, no process). */
export function readMemory(pid: number): MemoryReading | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+) kB$`, "m").exec(text);
    return match === null ? Number.NaN : Number(match[1]) * 1024;
  };
  return { rss: field("VmRSS"), rssAnon: field("RssAnon"), rssFile: field("RssFile"), peakRss: field("VmHWM") };
}

/** Resets the peak resident set of process `pid` to its resident set now; false when the kernel refused. */
export function resetPeakMemory(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

/** The largest value of each field over `readings` (undefined for none). */
export function peakOf(readings: readonly MemoryReading[]): MemoryReading | undefined {
  if (readings.length === 0) return undefined;
  let rss = 0;
  let rssAnon = 0;
  let rssFile = 0;
  let peakRss = 0;
  for (const reading of readings) {
    rss = Math.max(rss, reading.rss);
    rssAnon = Math.max(rssAnon, reading.rssAnon);
    rssFile = Math.max(rssFile, reading.rssFile);
    peakRss = Math.max(peakRss, reading.peakRss);
  }
  return { rss, rssAnon, rssFile, peakRss };
}

/** One reading of one process, when it was taken (`performance.now()`) and its processor time so far (ms). */
export interface TimedReading extends MemoryReading {
  readonly atMs: number;
  readonly cpuMs: number;
}

/**
 * Readings of a set of processes taken at a fixed interval, to find the peaks of a measurement and its phases (and
 * the processor time each used between two moments).
 */
export class MemorySampler {
  private readonly samples = new Map<number, TimedReading[]>();
  private readonly timer: NodeJS.Timeout;
  private stopped = false;

  /** Starts sampling `pids` every `intervalMs`; the first reading is taken at once. */
  constructor(
    private readonly pids: readonly number[],
    intervalMs: number,
  ) {
    for (const pid of pids) this.samples.set(pid, []);
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
  }

  private sample(): void {
    const atMs = performance.now();
    for (const pid of this.pids) {
      const reading = readMemory(pid);
      const cpu = processCpuTime(pid);
      const cpuMs = cpu === undefined ? Number.NaN : cpu.userMs + cpu.systemMs;
      if (reading !== undefined) this.samples.get(pid)?.push({ ...reading, atMs, cpuMs });
    }
  }

  /**
   * Stops sampling, taking a last reading; does nothing once stopped. A second call must take none: the scaling
   * benchmark stops its sampler when the scale-up completes and again in a `finally`, and a reading taken then, after
   * the scale-down had brokers 0 and 1 receive their partitions back, showed as their peak during the scale-up (about
   * the state of each partition they had left, which looked like memory a leave took).
   */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    this.sample();
  }

  /** The first reading of `pid` (taken when sampling started). */
  first(pid: number): TimedReading | undefined {
    return this.samples.get(pid)?.[0];
  }

  /** The last reading of `pid` taken at or before `atMs` (the first one when none was). */
  at(pid: number, atMs: number): TimedReading | undefined {
    const readings = this.samples.get(pid) ?? [];
    let found = readings[0];
    for (const reading of readings) {
      if (reading.atMs > atMs) break;
      found = reading;
    }
    return found;
  }

  /** The largest value of each field among the readings of `pid` taken in [`fromMs`, `toMs`]. */
  peak(pid: number, fromMs = Number.NEGATIVE_INFINITY, toMs = Number.POSITIVE_INFINITY): MemoryReading | undefined {
    return peakOf((this.samples.get(pid) ?? []).filter((reading) => reading.atMs >= fromMs && reading.atMs <= toMs));
  }
}
