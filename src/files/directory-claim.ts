/**
 * A directory claimed by one process at a time, through a file holding the claiming process's id: a broker's data
 * directory, the platform's. A claim left by a process that died (`kill -9`, a power loss) is stale and replaced; one
 * held by a live process is refused, so two processes never write one directory's files at once.
 */
import { readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { createPrivateDirectory, replacePrivateFile } from "./private-files.js";

/** Thrown when a live process (or another holder in this process) holds the directory. */
export class DataDirectoryInUseError extends Error {
  constructor(
    readonly directory: string,
    readonly pid: number,
    /** Who holds it, as a sentence names it ("the broker", "a platform"). */
    readonly holder: string,
    readonly pidFileName: string,
  ) {
    super(`data directory ${directory} is in use by ${holder} with process id ${pid} (see ${pidFileName})`);
    this.name = "DataDirectoryInUseError";
  }
}

/** Pid files claimed by this process, so two holders in one process (tests, in-process brokers) cannot share one. */
const heldPidFiles = new Set<string>();

/** Whether `pid` names a live process. */
function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else, which still means the directory is held.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The process id a pid file holds, or null when it holds none (no file or no directory, or not a number). */
function recordedPid(pidFile: string): number | null {
  let text: string;
  try {
    text = readFileSync(pidFile, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return null;
    throw error;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
}

/**
 * The live process other than this one whose id `pidFileName` in `directory` holds, or null: the process a claim of
 * the directory would be refused for (a claim of this process is in `claimDirectory`'s own bookkeeping).
 */
export function directoryHolder(directory: string, pidFileName: string): number | null {
  const pid = recordedPid(join(directory, pidFileName));
  // This process's own id in the file can only be left over from a holder of this process that did not release it.
  return pid !== null && pid !== process.pid && processIsAlive(pid) ? pid : null;
}

/**
 * Claims `directory` (created 0700 when missing) for this process through `pidFileName` in it: refuses with
 * `DataDirectoryInUseError` when a live process or another holder of this process has it, replaces a stale claim,
 * and writes this process's id durably. Returns the function that releases the claim.
 */
export async function claimDirectory(
  directory: string,
  options: { readonly pidFileName: string; readonly holder: string },
): Promise<() => Promise<void>> {
  createPrivateDirectory(directory);
  const pidFile = join(directory, options.pidFileName);
  if (heldPidFiles.has(pidFile)) {
    throw new DataDirectoryInUseError(directory, process.pid, options.holder, options.pidFileName);
  }
  const holder = directoryHolder(directory, options.pidFileName);
  if (holder !== null) throw new DataDirectoryInUseError(directory, holder, options.holder, options.pidFileName);
  heldPidFiles.add(pidFile);
  try {
    replacePrivateFile(pidFile, `${process.pid}\n`);
  } catch (error) {
    heldPidFiles.delete(pidFile);
    throw error;
  }
  return async () => {
    heldPidFiles.delete(pidFile);
    await rm(pidFile, { force: true });
  };
}
