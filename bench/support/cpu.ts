/**
 * Processor time used by processes, from Linux's `/proc/<pid>/stat`: user and system time summed over all of a
 * process's threads. A benchmark reads it before and after a measurement and divides the difference by the requests
 * it made, which shows how much processor time each acknowledged write costs each part of a system. On a machine
 * with few cores that matters as much as latency: the processes of a cluster compete for the same cores, so time one
 * part spends is time another part may wait for.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

/** Processor time used so far, in milliseconds. */
export interface CpuTime {
  readonly userMs: number;
  readonly systemMs: number;
}

/** Clock ticks per second of the `/proc` counters (`getconf CLK_TCK`; 100 on every common Linux). */
let ticksPerSecond: number | undefined;

function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    const answer = spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" });
    const parsed = Number(answer.stdout?.trim());
    ticksPerSecond = answer.status === 0 && Number.isSafeInteger(parsed) && parsed > 0 ? parsed : 100;
  }
  return ticksPerSecond;
}

/** The processor time process `pid` used so far, or undefined when it cannot be read (no `/proc`, no process). */
export function processCpuTime(pid: number): CpuTime | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may contain spaces; the fields after it are space-separated,
  // utime and stime being the 14th and 15th fields of the line.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const userTicks = Number(fields[11]);
  const systemTicks = Number(fields[12]);
  if (!Number.isFinite(userTicks) || !Number.isFinite(systemTicks)) return undefined;
  const millisecondsPerTick = 1000 / clockTicksPerSecond();
  return { userMs: userTicks * millisecondsPerTick, systemMs: systemTicks * millisecondsPerTick };
}

/** The processor time this process used so far (its own counters, finer than `/proc`'s ticks). */
export function ownCpuTime(): CpuTime {
  const usage = process.cpuUsage();
  return { userMs: usage.user / 1000, systemMs: usage.system / 1000 };
}

/** The summed processor time of `pids` (those that cannot be read count as nothing). */
export function cpuTimeOf(pids: readonly number[]): CpuTime {
  let userMs = 0;
  let systemMs = 0;
  for (const pid of pids) {
    const time = processCpuTime(pid);
    userMs += time?.userMs ?? 0;
    systemMs += time?.systemMs ?? 0;
  }
  return { userMs, systemMs };
}

/** The difference `after - before`. */
export function cpuTimeBetween(before: CpuTime, after: CpuTime): CpuTime {
  return { userMs: after.userMs - before.userMs, systemMs: after.systemMs - before.systemMs };
}

/** Processor time of the whole machine so far, in milliseconds summed over its cores, from `/proc/stat`. */
export interface MachineCpuTime {
  /** Time the cores spent running anything (user, system, interrupts, stolen by the hypervisor). */
  readonly busyMs: number;
  /** All time, idle and waiting for I/O included. */
  readonly totalMs: number;
}

/** The machine's processor time so far, or undefined without `/proc/stat`. */
export function machineCpuTime(): MachineCpuTime | undefined {
  let line: string | undefined;
  try {
    line = readFileSync("/proc/stat", "utf8").split("\n")[0];
  } catch {
    return undefined;
  }
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in clock ticks; guest time is already
  // counted in user time.
  const ticks = (line ?? "").trim().split(/\s+/).slice(1, 9).map(Number);
  if (ticks.length < 8 || ticks.some((value) => !Number.isFinite(value))) return undefined;
  const millisecondsPerTick = 1000 / clockTicksPerSecond();
  const total = ticks.reduce((sum, value) => sum + value, 0);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0);
  return { busyMs: (total - idle) * millisecondsPerTick, totalMs: total * millisecondsPerTick };
}

/** Shares of the machine's processor time in a window, each from 0 to 1 (1: every core busy the whole window). */
export interface CpuShares {
  readonly machine: number;
  /** The processes the recorder was told about. */
  readonly own: number;
  /** Everything else running on the machine meanwhile (other users' processes, the kernel's threads). */
  readonly others: number;
}

/**
 * Records, every `intervalMs`, the machine's processor time and that of a changing set of processes (a benchmark's),
 * so that any window afterwards can say how busy the machine was and how much of that was someone else's work. On a
 * shared machine that is what tells a slow measurement from a busy neighbour.
 */
export class CpuRecorder {
  private readonly samples: { atMs: number; machine: MachineCpuTime; processes: Map<number, number> }[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pids: () => readonly number[],
    intervalMs: number,
  ) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  private sample(): void {
    const machine = machineCpuTime();
    if (machine === undefined) return;
    const processes = new Map<number, number>();
    for (const pid of this.pids()) {
      const time = processCpuTime(pid);
      if (time !== undefined) processes.set(pid, time.userMs + time.systemMs);
    }
    this.samples.push({ atMs: performance.now(), machine, processes });
  }

  /** Stops recording. */
  stop(): void {
    clearInterval(this.timer);
  }

  /** The shares between the samples closest to `fromMs` and `toMs` (`performance.now()` times), or undefined. */
  shares(fromMs: number, toMs: number): CpuShares | undefined {
    const closest = (atMs: number) =>
      this.samples.reduce<(typeof this.samples)[number] | undefined>(
        (best, sample) =>
          best === undefined || Math.abs(sample.atMs - atMs) < Math.abs(best.atMs - atMs) ? sample : best,
        undefined,
      );
    const first = closest(fromMs);
    const last = closest(toMs);
    if (first === undefined || last === undefined || last.machine.totalMs <= first.machine.totalMs) return undefined;
    const totalMs = last.machine.totalMs - first.machine.totalMs;
    let ownMs = 0;
    for (const [pid, cpuMs] of last.processes) {
      const before = first.processes.get(pid);
      if (before !== undefined) ownMs += cpuMs - before;
    }
    const machine = (last.machine.busyMs - first.machine.busyMs) / totalMs;
    const own = Math.min(machine, ownMs / totalMs);
    return { machine, own, others: machine - own };
  }
}
