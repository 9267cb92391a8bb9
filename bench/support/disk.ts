/**
 * What the block device under a directory has done, from Linux's `/proc/diskstats`: bytes read, write requests
 * completed, bytes written and cache flushes. A benchmark reads the counters before and after a measurement and
 * divides the difference by the requests it made, which shows how much disk work each acknowledged write costs a
 * system, independently of how fast this machine's disk happens to be. The counters cover every process using the device, so the figures are
 * meaningful only while the measured system is the one writing.
 */
import { readFileSync, statSync } from "node:fs";

/** Cumulative counters of one block device. */
export interface DiskCounters {
  /** Bytes read from the device: what the page cache did not hold. */
  readonly bytesRead: number;
  /** Write requests the device completed. */
  readonly writes: number;
  readonly bytesWritten: number;
  /** Cache flush requests the device completed (what every fsync ends with); 0 on kernels before 5.5. */
  readonly flushes: number;
}

/** The device's number, split as the kernel numbers devices in `/proc/diskstats`. */
interface DeviceNumber {
  readonly major: number;
  readonly minor: number;
}

/** Bytes per sector in `/proc/diskstats`, whatever the device's real sector size. */
const SECTOR_BYTES = 512;

/**
 * Finds the device holding `directory`; returns a reader of its counters, or undefined where there is no
 * `/proc/diskstats` (not Linux) or the directory lives on no block device (tmpfs, overlay).
 */
export function diskCountersReader(directory: string): (() => DiskCounters) | undefined {
  let device: DeviceNumber;
  try {
    device = deviceNumber(statSync(directory, { bigint: true }).dev);
    if (readCounters(device) === undefined) return undefined;
  } catch {
    return undefined;
  }
  return () => {
    const counters = readCounters(device);
    if (counters === undefined) throw new Error(`device ${device.major}:${device.minor} left /proc/diskstats`);
    return counters;
  };
}

/** The difference `after - before`, field by field. */
export function diskCountersBetween(before: DiskCounters, after: DiskCounters): DiskCounters {
  return {
    bytesRead: after.bytesRead - before.bytesRead,
    writes: after.writes - before.writes,
    bytesWritten: after.bytesWritten - before.bytesWritten,
    flushes: after.flushes - before.flushes,
  };
}

/** Splits a `dev_t` the way glibc's `major()` and `minor()` do. */
function deviceNumber(dev: bigint): DeviceNumber {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return { major: Number(major), minor: Number(minor) };
}

function readCounters(device: DeviceNumber): DiskCounters | undefined {
  // Fields (Documentation/admin-guide/iostats.rst): major, minor, name, then the statistics: sectors read is the
  // 3rd, writes completed the 5th, sectors written the 7th, flushes completed the 16th (kernel 5.5 and later).
  for (const line of readFileSync("/proc/diskstats", "utf8").split("\n")) {
    const fields = line.trim().split(/\s+/);
    if (Number(fields[0]) !== device.major || Number(fields[1]) !== device.minor) continue;
    return {
      bytesRead: Number(fields[5]) * SECTOR_BYTES,
      writes: Number(fields[7]),
      bytesWritten: Number(fields[9]) * SECTOR_BYTES,
      flushes: Number(fields[18] ?? 0),
    };
  }
  return undefined;
}
