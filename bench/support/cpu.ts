/**
 * Processor time used by processes, from Linux's `/proc/<pid>/stat`: user and system time summed over all of a
 * process's threads. A benchmark reads it before and after a measurement and divides the difference by the requests
 * it made, which shows how much processor time each acknowledged write costs each part of a system. On a machine
 * with few cores that matters as much as latency: the processes of a cluster compete for the same cores, so time one
 * part spends is time another part may wait for.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

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
