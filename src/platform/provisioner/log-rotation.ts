/**
 * Keeps the local cluster's log files to a size. Each broker and gateway writes its standard output and error
 * straight into its log file (a descriptor the child holds, opened for appending), which no process read back or
 * cut, so a cluster that ran for months, or one whose gateway logged every access-policy change, grew its files
 * without bound.
 *
 * A file beyond `maxBytes` that a running child holds is copied to `<file>.1` (the older copies shifted to `.2` and
 * on, those beyond `keptFiles` deleted) and then truncated to nothing: the child keeps its descriptor, and since it
 * appends, its next line lands at the start of the emptied file. Renaming the file instead would leave the child
 * writing into the renamed copy. The copy is made under a temporary name first, so a copy that fails (the disk full)
 * leaves the earlier copies and the file as they were. The bytes written while the copy ran are added to it before
 * the truncation, so the lines lost are those written between the start of that last small copy and the truncation.
 * A file no child holds yet (at the cluster's start) is renamed instead, which loses nothing and copies nothing.
 */
import { lstat, open, readdir, rename, rm, truncate } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
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

/** Whether a child holds the file open (copy and truncate) or none does (rename). */
export type LogFileUse = "held" | "free";

/** Thrown for a log file that is not a regular file (a link, a directory): it is never followed or rotated. */
export class UnrotatableLogFileError extends Error {
  constructor(readonly file: string) {
    super(`${file} is not a regular file; a log file is never rotated through a link`);
    this.name = "UnrotatableLogFileError";
  }
}

/**
 * Rotates `file` when it holds more than `limits.maxBytes` (see the module comment); answers whether it did.
 * `shouldStop` is asked between pieces of a copy: a copy stopped leaves everything as it was.
 */
export async function rotateLogFile(
  file: string,
  limits: LogFileLimits,
  use: LogFileUse,
  shouldStop: () => boolean = () => false,
): Promise<boolean> {
  assertLimits(limits);
  const size = await regularFileSize(file);
  if (size === undefined || size <= limits.maxBytes) return false;
  if (use === "free") {
    await shiftCopies(file, limits.keptFiles);
    await rename(file, `${file}.1`);
    return true;
  }
  const temporary = `${file}.rotating`;
  await rm(temporary, { force: true });
  const copied = await copyRange(file, temporary, 0, Number.POSITIVE_INFINITY, shouldStop).catch(
    async (error: unknown) => {
      await rm(temporary, { force: true });
      throw error;
    },
  );
  if (copied === undefined) {
    await rm(temporary, { force: true });
    return false;
  }
  await shiftCopies(file, limits.keptFiles);
  await rename(temporary, `${file}.1`);
  // What the child wrote while the copy ran, up to the size seen now: a child writing steadily is not chased.
  const end = (await regularFileSize(file)) ?? copied;
  if (end > copied) await copyRange(file, `${file}.1`, copied, end, () => false);
  await truncate(file, 0);
  return true;
}

/** The size of `file`, undefined when it does not exist; throws when it is not a regular file. */
async function regularFileSize(file: string): Promise<number | undefined> {
  try {
    const status = await lstat(file);
    if (!status.isFile()) throw new UnrotatableLogFileError(file);
    return status.size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/** Deletes the copies of `file` numbered `keptFiles` and above (a lowered count included), then moves each up one. */
async function shiftCopies(file: string, keptFiles: number): Promise<void> {
  const name = basename(file);
  const directory = dirname(file);
  const copies = (await readdir(directory))
    .map((entry) => (entry.startsWith(`${name}.`) ? entry.slice(name.length + 1) : ""))
    .filter((suffix) => /^[1-9][0-9]{0,5}$/.test(suffix))
    .map(Number);
  for (const number of copies) {
    if (number >= keptFiles) await rm(join(directory, `${name}.${number}`), { force: true });
  }
  for (let number = keptFiles - 1; number >= 1; number--) {
    await rename(`${file}.${number}`, `${file}.${number + 1}`).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") throw error;
    });
  }
}

/**
 * Copies the bytes of `source` from `fromOffset` up to `toOffset` (or its end) to `target`: a new file (0600, never
 * through a link) when `fromOffset` is 0, else appended. Answers the offset reached, or undefined when stopped.
 */
async function copyRange(
  source: string,
  target: string,
  fromOffset: number,
  toOffset: number,
  shouldStop: () => boolean,
): Promise<number | undefined> {
  const reading = await open(source, "r");
  try {
    const writing = await open(target, fromOffset === 0 ? "wx" : "a", privateFileMode);
    try {
      const piece = Buffer.allocUnsafe(copyPieceBytes);
      let offset = fromOffset;
      while (offset < toOffset) {
        if (shouldStop()) return undefined;
        const length = Math.min(piece.length, toOffset - offset);
        const { bytesRead } = await reading.read(piece, 0, length, offset);
        if (bytesRead === 0) break;
        await writing.write(piece, 0, bytesRead);
        offset += bytesRead;
      }
      return offset;
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
  if (!Number.isSafeInteger(limits.keptFiles) || limits.keptFiles < 1 || limits.keptFiles > 999_999) {
    throw new Error(`the log copies kept must be a whole number from 1 to 999999; got ${limits.keptFiles}`);
  }
}

/** Rotates the files `files()` names, at `rotateFree` and every `logRotationIntervalMs` once started, until `close`. */
export class LogRotation {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly files: () => readonly string[],
    private readonly limits: LogFileLimits,
    private readonly logger: Logger,
  ) {
    assertLimits(limits);
  }

  /** Rotates, by renaming, the files beyond the limit that no child holds yet (before the children start). */
  async rotateFree(): Promise<void> {
    await this.rotateAll("free");
  }

  /** Looks at the files, which running children hold, every `logRotationIntervalMs`. */
  start(): void {
    if (this.timer !== undefined || this.closed) return;
    this.timer = setInterval(() => {
      if (this.round !== undefined) return;
      this.round = this.rotateAll("held").finally(() => {
        this.round = undefined;
      });
    }, logRotationIntervalMs);
    this.timer.unref();
  }

  /** Rotates every file beyond the limit now; a file that cannot be rotated is logged and left for the next round. */
  async rotateAll(use: LogFileUse): Promise<void> {
    for (const file of this.files()) {
      if (this.closed) return;
      try {
        if (await rotateLogFile(file, this.limits, use, () => this.closed)) {
          this.logger.info({ logFile: file, maxBytes: this.limits.maxBytes }, "log file rotated");
        }
      } catch (error) {
        this.logger.warn({ err: error, logFile: file }, "could not rotate a log file; trying again later");
      }
    }
  }

  /** Stops looking; a copy running stops at its next piece, leaving its file as it was. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.round;
  }
}
