/**
 * Owner-only files and directories. Everything flowplane keeps on disk (the platform's database and key file, the
 * brokers' journals, snapshots and configuration, the local cluster's files and logs) may hold key material or
 * users' data, so directories are created 0700 and files 0600: other local users can neither list nor read them.
 * Shared by the platform and the cluster, which otherwise import nothing from each other.
 */
import { chmodSync, closeSync, fsyncSync, mkdirSync, openSync, statSync } from "node:fs";

/** Mode of every directory flowplane creates: read, write and search for the owner only. */
export const privateDirectoryMode = 0o700;

/** Mode of every file flowplane creates: read and write for the owner only. */
export const privateFileMode = 0o600;

/**
 * Creates `path` and any missing parents with mode 0700; directories that already exist keep their mode. Use it
 * for directories the operator names (a data directory may be shared with other software that chose its mode).
 */
export function createPrivateDirectory(path: string): void {
  mkdirSync(path, { recursive: true, mode: privateDirectoryMode });
}

/**
 * Creates `path` like `createPrivateDirectory` and makes `path` itself 0700 even when it already existed, which
 * earlier versions created 0755. Use it for directories flowplane names and owns (a broker's `raft/`, the local
 * cluster's `cluster/`): whatever they hold, including files written before, is then out of other users' reach.
 */
export function ownPrivateDirectory(path: string): void {
  createPrivateDirectory(path);
  restrictMode(path, privateDirectoryMode);
}

/**
 * Creates the file at `path` empty with mode 0600 unless it exists, and makes an existing one 0600. For files that
 * a library opens itself (SQLite), which would otherwise create them with the process's default mode.
 */
export function ownPrivateFile(path: string): void {
  closeSync(openSync(path, "a", privateFileMode));
  restrictMode(path, privateFileMode);
}

/** Makes an existing file 0600; does nothing when it does not exist. */
export function restrictFileIfPresent(path: string): void {
  try {
    restrictMode(path, privateFileMode);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}

/**
 * Makes the entries of `directory` durable (a file renamed, linked or created in it, a directory renamed into it):
 * syncing a file does not sync its name, so a power loss could otherwise undo the rename after it returned.
 */
export function syncDirectory(directory: string): void {
  const directoryDescriptor = openSync(directory, "r");
  try {
    fsyncSync(directoryDescriptor);
  } finally {
    closeSync(directoryDescriptor);
  }
}

/** Sets the permission bits of `path` to `mode` when they differ (no write when nothing changes). */
function restrictMode(path: string, mode: number): void {
  if ((statSync(path).mode & 0o777) !== mode) chmodSync(path, mode);
}
