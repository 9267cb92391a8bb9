/**
 * The default backup store: a directory (`service.backup.filesystem.basePath`), laid out as
 * `<base>/<partition>/<backup id>/<broker>/{manifest.json, snapshot.bin, log.bin}`. Directories are 0700 and files
 * 0600 (a backup holds users' messages). Every file and manifest is written to a temporary file, synced and renamed
 * into place, so a crash leaves either the previous file or the new one. A data file's SHA-256 is that of the exact
 * bytes handed to the file, and its size on disk is checked against their count once it is synced.
 */
import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { type FileHandle, open, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { createPrivateDirectory, privateFileMode } from "../../files/private-files.js";
import {
  BACKUP_FILE_NAMES,
  type BackupFileEntry,
  type BackupFileWriter,
  type BackupPartId,
  type BackupPartManifest,
  type BackupStore,
  parseManifest,
} from "./store.js";

/** Largest manifest read, in bytes: manifests are small, and a larger file is damage, not a manifest. */
const MAX_MANIFEST_BYTES = 64 * 1024;

/** Directory names the store creates: decimal ids. */
const ID_PATTERN = /^(0|[1-9][0-9]{0,15})$/;

function idOf(name: string): number | null {
  if (!ID_PATTERN.test(name)) return null;
  const id = Number(name);
  return Number.isSafeInteger(id) ? id : null;
}

async function syncDirectory(directory: string): Promise<void> {
  const handle = await open(directory, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function listIds(directory: string): Promise<number[]> {
  let names: string[];
  try {
    names = await readdir(directory);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return names
    .map(idOf)
    .filter((id): id is number => id !== null)
    .sort((left, right) => left - right);
}

/** See the module comment. */
export class FilesystemBackupStore implements BackupStore {
  /** A store rooted at `basePath` (created 0700 when missing). */
  constructor(readonly basePath: string) {}

  /** The directory of one part. */
  partDirectory(part: BackupPartId): string {
    return join(this.basePath, String(part.partitionId), String(part.backupId), String(part.brokerId));
  }

  async writeManifest(manifest: BackupPartManifest): Promise<void> {
    const directory = this.partDirectory(manifest);
    createPrivateDirectory(directory);
    const target = join(directory, BACKUP_FILE_NAMES.manifest);
    const temporary = join(directory, `.${BACKUP_FILE_NAMES.manifest}.${randomBytes(6).toString("hex")}.tmp`);
    const handle = await open(temporary, "w", privateFileMode);
    try {
      await handle.writeFile(`${JSON.stringify(manifest, null, 2)}\n`, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
    await syncDirectory(directory);
  }

  async createFile(part: BackupPartId, name: string): Promise<BackupFileWriter> {
    const directory = this.partDirectory(part);
    createPrivateDirectory(directory);
    const target = join(directory, name);
    const temporary = join(directory, `.${name}.${randomBytes(6).toString("hex")}.tmp`);
    const handle: FileHandle = await open(temporary, "w", privateFileMode);
    const hash = createHash("sha256");
    let sizeBytes = 0;
    let handleOpen = true;
    const closeAndRemove = async (): Promise<void> => {
      if (handleOpen) {
        handleOpen = false;
        await handle.close();
      }
      await rm(temporary, { force: true });
    };
    return {
      write: async (bytes) => {
        hash.update(bytes);
        sizeBytes += bytes.byteLength;
        // Bounded: writes until every byte is on its way (a short write leaves the rest for the next pass).
        for (let offset = 0; offset < bytes.byteLength; ) {
          const { bytesWritten } = await handle.write(bytes, offset, bytes.byteLength - offset);
          offset += bytesWritten;
        }
      },
      finish: async (): Promise<BackupFileEntry> => {
        try {
          await handle.sync();
          // The file is not read back and hashed again: right after the sync that read would come from the page
          // cache, not the disk, so it would only repeat the hash of the same bytes at the cost of a second pass over
          // the whole file on the broker that takes the backup. The checksum is that of the bytes handed to the file,
          // every write is completed (short writes are continued), and the synced size must match their count; the
          // bytes on the disk are checked against the manifest's SHA-256 whenever a part is verified or restored.
          const stored = await handle.stat();
          handleOpen = false;
          await handle.close();
          const written = hash.digest("hex");
          if (stored.size !== sizeBytes) {
            throw new Error(`${name} holds ${stored.size} bytes in the backup store, not the ${sizeBytes} written`);
          }
          await rename(temporary, target);
          await syncDirectory(directory);
          return { name, sizeBytes, sha256: written };
        } catch (error) {
          await closeAndRemove();
          throw error;
        }
      },
      abort: closeAndRemove,
    };
  }

  async *readFile(part: BackupPartId, name: string, maxChunkBytes: number): AsyncIterable<Uint8Array> {
    const path = join(this.partDirectory(part), name);
    for await (const chunk of createReadStream(path, { highWaterMark: maxChunkBytes })) {
      yield new Uint8Array(chunk as Buffer);
    }
  }

  async manifests(backupId?: number): Promise<BackupPartManifest[]> {
    const manifests: BackupPartManifest[] = [];
    for (const partitionId of await listIds(this.basePath)) {
      const partitionDirectory = join(this.basePath, String(partitionId));
      const backupIds =
        backupId === undefined
          ? await listIds(partitionDirectory)
          : (await listIds(partitionDirectory)).filter((id) => id === backupId);
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

  async backupIds(): Promise<number[]> {
    const ids = new Set<number>();
    for (const partitionId of await listIds(this.basePath)) {
      for (const id of await listIds(join(this.basePath, String(partitionId)))) ids.add(id);
    }
    return [...ids].sort((left, right) => left - right);
  }

  async deleteBackup(backupId: number): Promise<boolean> {
    let found = false;
    for (const partitionId of await listIds(this.basePath)) {
      const directory = join(this.basePath, String(partitionId), String(backupId));
      const exists = (await listIds(join(this.basePath, String(partitionId)))).includes(backupId);
      if (!exists) continue;
      found = true;
      await rm(directory, { recursive: true, force: true });
    }
    return found;
  }

  /**
   * The manifest of `part`; a part directory without one (its writer died before the first manifest) is skipped,
   * and an unreadable one comes back FAILED with the reason.
   */
  private async readManifest(part: BackupPartId): Promise<BackupPartManifest | null> {
    const path = join(this.partDirectory(part), BACKUP_FILE_NAMES.manifest);
    let problem: string;
    try {
      const bytes = await readFile(path);
      if (bytes.byteLength > MAX_MANIFEST_BYTES) {
        problem = `manifest.json is larger than ${MAX_MANIFEST_BYTES} bytes`;
      } else {
        const parsed = parseManifest(JSON.parse(bytes.toString("utf8")), part);
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

/** A part whose manifest is damaged: reported FAILED with the reason, never COMPLETED. */
function damagedPart(part: BackupPartId, reason: string): BackupPartManifest {
  return {
    ...part,
    formatVersion: 1,
    state: "FAILED",
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
