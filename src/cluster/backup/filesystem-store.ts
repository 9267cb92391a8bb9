/**
 * The default backup store: a directory (`service.backup.filesystem.basePath`), laid out as
 * `<base>/<partition>/<backup id>/<broker>/{manifest.json, snapshot.bin, log.bin}`, with each backup's record in
 * `<base>/backups/<backup id>.json` (a name no partition directory has), the cluster configuration it was taken in
 * beside it as `<backup id>.configuration.json` (a name older versions' listings skip), and the highest id ever taken
 * as an empty file
 * `<base>/backups/taken/<backup id>` (names older versions' listings skip). Directories are 0700 and files
 * 0600 (a backup holds users' messages). Every file and manifest is written to a temporary file, synced and renamed
 * into place, so a crash leaves either the previous file or the new one. A data file's CRC-32C is that of the exact
 * bytes handed to the file, and its size on disk is checked against their count once it is synced. Data files are
 * checksummed, written and synced on a worker thread (file-writer-thread.ts), not on the broker's event loop.
 */
import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { type Logger, pino } from "pino";
import { createPrivateDirectoryDurably, privateFileMode } from "../../files/private-files.js";
import { parseJsonExactly, stringifyJsonExactly } from "../../json/exact-json.js";
import { compareAscending, parseNonNegativeInt64 } from "../../json/int64.js";
import { FileWriterThread, type FileWriterThreadOptions } from "./file-writer-thread.js";
import {
  BACKUP_FILE_NAMES,
  type BackupFileWriter,
  type BackupPartId,
  type BackupPartManifest,
  type BackupRecord,
  type BackupStore,
  MAX_BACKUP_CONFIGURATION_BYTES,
  parseBackupRecord,
  parseManifest,
  type StoredBackupRecord,
} from "./store.js";

/** Largest manifest read, in bytes: manifests are small, and a larger file is damage, not a manifest. */
const MAX_MANIFEST_BYTES = 64 * 1024;

/** Largest backup record read, in bytes: records are small, and a larger file is damage, not a record. */
const MAX_RECORD_BYTES = 4 * 1024;

/** Names of partition and broker directories: decimal ids. */
const ID_PATTERN = /^(0|[1-9][0-9]{0,15})$/;

/** Names of backup directories and marks: decimal backup ids, 0..2^63 − 1 (19 digits at most). */
const BACKUP_ID_PATTERN = /^(0|[1-9][0-9]{0,18})$/;

/** The directory of the backups' records, under the base path. */
const RECORDS_DIRECTORY = "backups";

/**
 * The directory of the taken ids, under the records' directory: an empty file named by the id for every backup
 * recorded, of which only the highest is kept (see `markTaken`).
 */
const TAKEN_DIRECTORY = "taken";

/** Names of record files: `<backup id>.json`. */
const RECORD_NAME_PATTERN = /^(0|[1-9][0-9]{0,18})\.json$/;

function idOf(name: string): number | null {
  if (!ID_PATTERN.test(name)) return null;
  const id = Number(name);
  return Number.isSafeInteger(id) ? id : null;
}

function backupIdOf(name: string): bigint | null {
  return BACKUP_ID_PATTERN.test(name) ? parseNonNegativeInt64(name) : null;
}

async function syncDirectory(directory: string): Promise<void> {
  const handle = await open(directory, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Which entries of a directory of the store count: its directories, its files, or all of them (the taken ids' marks,
 * where any entry named by an id keeps that id taken, the safe side).
 */
type EntryKind = "directories" | "files" | "entries";

/**
 * The names of the entries of `kind` in `directory` (none when it does not exist). Other entries are passed over:
 * each level of the store holds only one kind, and a stray entry of the other (a copy, an editor's file, what a sync
 * tool left) must not stop every list, backup and broker start the store takes part in.
 */
async function namesIn(directory: string, kind: EntryKind): Promise<string[]> {
  try {
    return (await readdir(directory, { withFileTypes: true }))
      .filter((entry) => kind === "entries" || (kind === "directories" ? entry.isDirectory() : entry.isFile()))
      .map((entry) => entry.name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
}

/** The partition or broker ids `directory` has directories of, ascending. */
async function listIds(directory: string): Promise<number[]> {
  return (await namesIn(directory, "directories"))
    .map(idOf)
    .filter((id): id is number => id !== null)
    .sort((left, right) => left - right);
}

/** The backup ids `directory` has entries of the given kind named by, ascending. */
async function listBackupIds(directory: string, kind: EntryKind): Promise<bigint[]> {
  return (await namesIn(directory, kind))
    .map(backupIdOf)
    .filter((id): id is bigint => id !== null)
    .sort(compareAscending);
}

/** Options of a `FilesystemBackupStore`. */
export interface FilesystemBackupStoreOptions extends FileWriterThreadOptions {
  /** Where the store says what it could not clean up (silent when absent). */
  readonly logger?: Logger;
}

/** See the module comment. */
export class FilesystemBackupStore implements BackupStore {
  /** Writes the data files, off the event loop (see file-writer-thread.ts). */
  readonly fileWriter: FileWriterThread;
  private readonly logger: Logger;

  /** A store rooted at `basePath` (created 0700 when missing). */
  constructor(
    readonly basePath: string,
    options: FilesystemBackupStoreOptions = {},
  ) {
    this.fileWriter = new FileWriterThread(options);
    this.logger = options.logger ?? pino({ level: "silent" });
  }

  /** The directory of one part. */
  partDirectory(part: BackupPartId): string {
    return join(this.basePath, String(part.partitionId), String(part.backupId), String(part.brokerId));
  }

  /** The path of a backup's record. */
  recordPath(backupId: bigint): string {
    return join(this.basePath, RECORDS_DIRECTORY, `${backupId}.json`);
  }

  /** The path of the cluster configuration a backup was taken in. */
  configurationPath(backupId: bigint): string {
    return join(this.basePath, RECORDS_DIRECTORY, `${backupId}.configuration.json`);
  }

  async writeBackupConfiguration(backupId: bigint, configuration: string): Promise<void> {
    if (Buffer.byteLength(configuration) > MAX_BACKUP_CONFIGURATION_BYTES) {
      throw new Error(`the cluster configuration is larger than ${MAX_BACKUP_CONFIGURATION_BYTES} bytes`);
    }
    await writeTextAtomically(join(this.basePath, RECORDS_DIRECTORY), `${backupId}.configuration.json`, configuration);
  }

  async backupConfiguration(backupId: bigint): Promise<string | null> {
    const path = this.configurationPath(backupId);
    try {
      // The size is looked at first, as for a record: a damaged file of any size is never read whole.
      if ((await stat(path)).size > MAX_BACKUP_CONFIGURATION_BYTES) {
        throw new Error(`${path} is larger than ${MAX_BACKUP_CONFIGURATION_BYTES} bytes`);
      }
      return await readFile(path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
  }

  async writeManifest(manifest: BackupPartManifest): Promise<void> {
    await writeJsonAtomically(this.partDirectory(manifest), BACKUP_FILE_NAMES.manifest, manifest);
  }

  async writeBackupRecord(record: BackupRecord): Promise<void> {
    // The mark comes first: a crash before the record leaves the id taken (a gap in the ids), never taken twice.
    await this.markTaken(record.backupId);
    await writeJsonAtomically(join(this.basePath, RECORDS_DIRECTORY), `${record.backupId}.json`, record);
  }

  async highestTakenBackupId(): Promise<bigint | null> {
    return (await listBackupIds(this.takenDirectory(), "entries")).at(-1) ?? null;
  }

  /**
   * Marks `backupId` taken, durably, and removes the marks below it. The marks are one file per id rather than one
   * file holding the highest, so that two coordinators recording at once (each broker's view of the lowest live broker
   * may differ for a moment) can never lower it: creating a file cannot undo another one, and a mark is removed only
   * by a writer whose own higher mark is on disk already, so the highest mark is never removed.
   */
  async markTaken(backupId: bigint): Promise<void> {
    const directory = this.takenDirectory();
    createPrivateDirectoryDurably(directory);
    const handle = await open(join(directory, String(backupId)), "w", privateFileMode);
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    await syncDirectory(directory);
    await this.removeMarksBelow(backupId);
  }

  /**
   * Removes the marks below `backupId`, whose own mark is durable already. Best effort: only the highest mark counts,
   * so a mark left behind changes nothing and the next writer tries again; failing here would fail a take whose id is
   * taken already (and every later take the same way, while the entry stays).
   */
  private async removeMarksBelow(backupId: bigint): Promise<void> {
    const directory = this.takenDirectory();
    let ids: bigint[];
    try {
      ids = await listBackupIds(directory, "entries");
    } catch (error) {
      this.logger.warn({ err: error, directory }, "the taken backup ids could not be listed to remove the lower marks");
      return;
    }
    for (const id of ids) {
      if (id >= backupId) continue;
      const path = join(directory, String(id));
      try {
        await rm(path, { force: true });
      } catch (error) {
        this.logger.warn({ err: error, path }, "a lower taken backup id's mark could not be removed; it is kept");
      }
    }
  }

  /** Raises the highest taken backup id to `backupId` unless it is there already (deleting a backup keeps its id). */
  private async keepTaken(backupId: bigint): Promise<void> {
    const highest = await this.highestTakenBackupId();
    if (highest === null || highest < backupId) await this.markTaken(backupId);
  }

  /** The partitions that hold a directory of backup `backupId`, ascending. */
  private async partitionsHolding(backupId: bigint): Promise<number[]> {
    const holding: number[] = [];
    for (const partitionId of await listIds(this.basePath)) {
      if ((await listBackupIds(join(this.basePath, String(partitionId)), "directories")).includes(backupId))
        holding.push(partitionId);
    }
    return holding;
  }

  /** The directory of the taken ids' marks. */
  private takenDirectory(): string {
    return join(this.basePath, RECORDS_DIRECTORY, TAKEN_DIRECTORY);
  }

  async backupRecords(backupId?: bigint): Promise<StoredBackupRecord[]> {
    // One record is opened by its name, not looked for in a listing: on a network filesystem a directory listing may
    // be cached and miss a record another host wrote moments ago, while opening a file closed there sees it.
    if (backupId !== undefined) {
      const stored = await this.readRecord(backupId);
      return stored === null ? [] : [stored];
    }
    const ids = await this.recordIds();
    const records: StoredBackupRecord[] = [];
    for (const id of ids) {
      const stored = await this.readRecord(id);
      if (stored !== null) records.push(stored);
    }
    return records;
  }

  prepareWrites(): void {
    this.fileWriter.keepRunning();
  }

  async createFile(part: BackupPartId, name: string): Promise<BackupFileWriter> {
    const directory = this.partDirectory(part);
    createPrivateDirectoryDurably(directory);
    const targetPath = join(directory, name);
    const temporaryPath = join(directory, `.${name}.${randomBytes(6).toString("hex")}.tmp`);
    return this.fileWriter.createFile(name, { temporaryPath, targetPath, directory }, privateFileMode);
  }

  async *readFile(part: BackupPartId, name: string, maxChunkBytes: number): AsyncIterable<Uint8Array> {
    const path = join(this.partDirectory(part), name);
    for await (const chunk of createReadStream(path, { highWaterMark: maxChunkBytes })) {
      yield new Uint8Array(chunk as Buffer);
    }
  }

  async manifests(backupId?: bigint): Promise<BackupPartManifest[]> {
    const manifests: BackupPartManifest[] = [];
    for (const partitionId of await listIds(this.basePath)) {
      const partitionDirectory = join(this.basePath, String(partitionId));
      const backupIds =
        backupId === undefined
          ? await listBackupIds(partitionDirectory, "directories")
          : (await listBackupIds(partitionDirectory, "directories")).filter((id) => id === backupId);
      for (const id of backupIds) {
        for (const brokerId of await listIds(join(partitionDirectory, String(id)))) {
          const part: BackupPartId = { backupId: id, partitionId, brokerId };
          const manifest = await this.readManifest(part);
          if (manifest !== null) manifests.push(manifest);
        }
      }
    }
    return manifests;
  }

  async backupIds(): Promise<bigint[]> {
    const ids = new Set<bigint>(await this.recordIds());
    for (const partitionId of await listIds(this.basePath)) {
      for (const id of await listBackupIds(join(this.basePath, String(partitionId)), "directories")) ids.add(id);
    }
    return [...ids].sort(compareAscending);
  }

  async deleteBackup(backupId: bigint): Promise<boolean> {
    // Looked at up front only to answer whether there was a backup and to keep its id taken (a backup an older
    // coordinator took raised no mark); the parts are listed again once the record is gone.
    const recorded = (await this.recordIds()).includes(backupId);
    const found = recorded || (await this.partitionsHolding(backupId)).length > 0;
    if (found) await this.keepTaken(backupId);
    // The record goes first and durably: a leader that looks for it afterwards writes no part of this backup.
    if (recorded) {
      await rm(this.recordPath(backupId), { force: true });
      await syncDirectory(join(this.basePath, RECORDS_DIRECTORY));
    }
    await rm(this.configurationPath(backupId), { force: true });
    // Listed only now: a leader that read the record just before it went may have created its part's directory
    // after the look above, and its part must go too.
    for (const partitionId of await this.partitionsHolding(backupId)) {
      await rm(join(this.basePath, String(partitionId), String(backupId)), { recursive: true, force: true });
    }
    return found;
  }

  /** The ids of the backups with a record, ascending. */
  private async recordIds(): Promise<bigint[]> {
    return (await namesIn(join(this.basePath, RECORDS_DIRECTORY), "files"))
      .map((name) => RECORD_NAME_PATTERN.exec(name)?.[1])
      .map((name) => (name === undefined ? null : backupIdOf(name)))
      .filter((id): id is bigint => id !== null)
      .sort(compareAscending);
  }

  /** The record of `backupId`; null when there is none (deleted meanwhile), the problem when it cannot be used. */
  private async readRecord(backupId: bigint): Promise<StoredBackupRecord | null> {
    const path = this.recordPath(backupId);
    let problem: string;
    try {
      // The size is looked at first, so that a damaged record of any size is never read whole.
      const bytes = (await stat(path)).size > MAX_RECORD_BYTES ? null : await readFile(path);
      if (bytes === null || bytes.byteLength > MAX_RECORD_BYTES) {
        problem = `the record is larger than ${MAX_RECORD_BYTES} bytes`;
      } else {
        const parsed = parseBackupRecord(parseJsonExactly(bytes.toString("utf8")), backupId);
        if (typeof parsed !== "string") return { backupId, record: parsed, problem: null };
        problem = parsed;
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      problem = error instanceof SyntaxError ? "the record is not JSON" : "the record cannot be read";
    }
    return { backupId, record: null, problem: `${path}: ${problem}` };
  }

  /**
   * The manifest of `part`; a part directory without one (its writer died before the first manifest) is skipped,
   * and an unreadable one comes back FAILED with the reason.
   */
  private async readManifest(part: BackupPartId): Promise<BackupPartManifest | null> {
    const path = join(this.partDirectory(part), BACKUP_FILE_NAMES.manifest);
    let problem: string;
    try {
      // The size is looked at first, as for a record: a damaged manifest of any size is never read whole.
      const bytes = (await stat(path)).size > MAX_MANIFEST_BYTES ? null : await readFile(path);
      if (bytes === null || bytes.byteLength > MAX_MANIFEST_BYTES) {
        problem = `manifest.json is larger than ${MAX_MANIFEST_BYTES} bytes`;
      } else {
        const parsed = parseManifest(parseJsonExactly(bytes.toString("utf8")), part);
        if (typeof parsed !== "string") return parsed;
        problem = parsed;
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      problem = error instanceof SyntaxError ? "manifest.json is not JSON" : "manifest.json cannot be read";
    }
    return damagedPart(part, `${this.partDirectory(part)}/${BACKUP_FILE_NAMES.manifest}: ${problem}`);
  }
}

/**
 * Writes `value` as JSON to `directory/name` (created 0700, durably): a synced temporary file renamed into place.
 */
async function writeJsonAtomically(directory: string, name: string, value: unknown): Promise<void> {
  // A backup id beyond 2^53 − 1 is written as its exact digits; every other value as JSON.stringify writes it.
  await writeTextAtomically(directory, name, `${stringifyJsonExactly(value, 2)}\n`);
}

/**
 * Writes `text` as file `name` of `directory`: a temporary file, synced, renamed over, the directory synced. A
 * temporary file that could not become the target (a full disk) is removed: nothing lists or deletes it later.
 */
async function writeTextAtomically(directory: string, name: string, text: string): Promise<void> {
  createPrivateDirectoryDurably(directory);
  const target = join(directory, name);
  const temporary = join(directory, `.${name}.${randomBytes(6).toString("hex")}.tmp`);
  // Created, never opened if it exists: the removal below then only ever removes a file this call made.
  const handle = await open(temporary, "wx", privateFileMode);
  try {
    try {
      await handle.writeFile(text, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
  } catch (error) {
    await rm(temporary, { force: true }).catch(() => undefined);
    throw error;
  }
  await syncDirectory(directory);
}

/** A part whose manifest is damaged: reported FAILED with the reason, never COMPLETED. */
function damagedPart(part: BackupPartId, reason: string): BackupPartManifest {
  return {
    ...part,
    formatVersion: 1,
    state: "FAILED",
    damaged: true,
    failureReason: reason,
    flowplaneVersion: "unknown",
    partitionCount: 1,
    checkpointPosition: 0,
    snapshot: null,
    log: { firstIndex: 1, lastIndex: 0 },
    files: [],
    writtenBytes: 0,
    startedAt: new Date(0).toISOString(),
    finishedAt: null,
  };
}
