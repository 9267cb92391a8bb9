/**
 * Keeps the local cluster's log files to a size. Each broker and gateway writes its standard output and error
 * straight into its log file (a descriptor the child holds, opened for appending), which no process read back or
 * cut, so a cluster that ran for months, or one whose gateway logged every access-policy change, grew its files
 * without bound. A file beyond `maxBytes` is copied to `<file>.1` (the older copies shifted to `.2` and on, the
 * oldest beyond `keptFiles` deleted) and then truncated to nothing: the child keeps its descriptor, and since it
 * appends, its next line lands at the start of the emptied file. Renaming the file instead would leave the child
 * writing into the renamed copy. The price of copying is the lines a child writes between the copy and the
 * truncation, which are lost; the bytes written while the copy ran are added to the copy first, so that window is
 * the time of one small read and one truncation.
 */
import { open, rename, rm, stat, truncate } from "node:fs/promises";
import type { Logger } from "pino";
import { privateFileMode } from "../../files/private-files.js";

/** How large the local cluster's log files may grow, and how many older copies are kept. */
export interface LogFileLimits {
  /** Size beyond which a log file is copied aside and emptied. */
  readonly maxBytes: number;
  /** Copies kept beside each file (`<file>.1` the newest). */
  readonly keptFiles: number;
}

/** The limits when the caller names none (settings `service.provisioner.logFileBytes` and `.keptLogFiles`). */
export const defaultLogFileLimits: LogFileLimits = { maxBytes: 64 * 1024 * 1024, keptFiles: 3 };

/** How often the files' sizes are looked at. */
export const logRotationIntervalMs = 30_000;

/** Bytes copied per read, so that copying a file never holds more than this in memory. */
const copyPieceBytes = 1024 * 1024;

/**
 * Copies `file` to `<file>.1` (shifting the older copies, deleting the one beyond `keptFiles`) and empties it, when
 * it holds more than `maxBytes`; answers whether it did.
 */
export async function rotateLogFile(file: string, limits: LogFileLimits): Promise<boolean> {
  assertLimits(limits);
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
  if (size <= limits.maxBytes) return false;
  await rm(`${file}.${limits.keptFiles}`, { force: true });
  for (let copy = limits.keptFiles - 1; copy >= 1; copy--) {
    await rename(`${file}.${copy}`, `${file}.${copy + 1}`).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") throw error;
    });
  }
  const copied = await copyFile(file, `${file}.1`);
  // Lines appended while the copy ran go to the copy too, then the file is emptied.
  await copyFile(file, `${file}.1`, copied);
  await truncate(file, 0);
  return true;
}

/** Appends the bytes of `source` from `fromOffset` to its end to `target` (created 0600); answers the end's offset. */
async function copyFile(source: string, target: string, fromOffset = 0): Promise<number> {
  const reading = await open(source, "r");
  try {
    const writing = await open(target, fromOffset === 0 ? "w" : "a", privateFileMode);
    try {
      const piece = Buffer.allocUnsafe(copyPieceBytes);
      let offset = fromOffset;
      for (;;) {
        const { bytesRead } = await reading.read(piece, 0, piece.length, offset);
        if (bytesRead === 0) return offset;
        await writing.write(piece, 0, bytesRead);
        offset += bytesRead;
      }
    } finally {
      await writing.close();
    }
  } finally {
    await reading.close();
  }
}

function assertLimits(limits: LogFileLimits): void {
  if (!Number.isSafeInteger(limits.maxBytes) || limits.maxBytes < 1) {
    throw new Error(`a log file's size limit must be a positive whole number of bytes; got ${limits.maxBytes}`);
  }
  if (!Number.isSafeInteger(limits.keptFiles) || limits.keptFiles < 1) {
    throw new Error(`the log copies kept must be a positive whole number; got ${limits.keptFiles}`);
  }
}

/** Looks at the files `files()` names every `logRotationIntervalMs` and rotates those beyond the limit, until `close`. */
export class LogRotation {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;

  constructor(
    private readonly files: () => readonly string[],
    private readonly limits: LogFileLimits,
    private readonly logger: Logger,
  ) {
    assertLimits(limits);
  }

  /** Starts looking every `logRotationIntervalMs`. */
  start(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => {
      if (this.round !== undefined) return;
      this.round = this.rotateAll().finally(() => {
        this.round = undefined;
      });
    }, logRotationIntervalMs);
    this.timer.unref();
  }

  /** Rotates every file beyond the limit now; a file that cannot be rotated is logged and left for the next round. */
  async rotateAll(): Promise<void> {
    for (const file of this.files()) {
      try {
        if (await rotateLogFile(file, this.limits)) {
          this.logger.info({ logFile: file, maxBytes: this.limits.maxBytes }, "log file rotated");
        }
      } catch (error) {
        this.logger.warn({ err: error, logFile: file }, "could not rotate a log file; trying again later");
      }
    }
  }

  /** Stops looking; waits for a round that is running. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.round;
  }
}
