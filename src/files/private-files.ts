/**
 * Owner-only files and directories. Everything flowplane keeps on disk (the platform's database and key file, the
 * brokers' journals, snapshots and configuration, the local cluster's files and logs) may hold key material or
 * users' data, so directories are created 0700 and files 0600: other local users can neither list nor read them.
 * Shared by the platform and the cluster, which otherwise import nothing from each other.
 */
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join, resolve } from "node:path";

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

/**
 * `createPrivateDirectory`, durably: the name of every directory it creates is synced into its parent, so a file
 * synced into `path` afterwards cannot vanish with a directory entry a power loss undid.
 */
export function createPrivateDirectoryDurably(path: string): void {
  const firstCreated = mkdirSync(path, { recursive: true, mode: privateDirectoryMode });
  if (firstCreated === undefined) return;
  const outermost = resolve(firstCreated);
  // Bounded by the depth of `path`: each step goes one directory up, and `outermost` is an ancestor of it.
  for (let directory = resolve(path); ; directory = dirname(directory)) {
    syncDirectory(dirname(directory));
    if (directory === outermost || directory === dirname(directory)) break;
  }
}

/**
 * Writes `text` to a new owner-only file at `path`, synced to disk before this returns; fails when `path` exists. For
 * the temporary file of an atomic write: the caller then renames or links it into place and syncs the directory.
 */
export function writeSyncedPrivateFile(path: string, text: string): void {
  const descriptor = openSync(path, "wx", privateFileMode);
  try {
    writeSync(descriptor, text);
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}

/** A fresh name for a temporary file beside `file`, unique to this process and call. */
export function temporaryNameBeside(file: string): string {
  return join(dirname(file), `.${basename(file)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
}

/**
 * Replaces `file` with `text` (0600) atomically and durably: a reader sees the old content or the new one, never a
 * partial file, and the new one outlives a power loss once this returns (the file and then its directory are synced).
 * `temporary` names the file written first: by default a fresh name beside `file`; a fixed name suits a file only one
 * process writes, so that a crash leaves no new leftover each time (one left by an earlier crash is replaced).
 */
export function replacePrivateFile(file: string, text: string, temporary?: string): void {
  const temporaryFile = temporary ?? temporaryNameBeside(file);
  if (temporary !== undefined) unlinkIfPresent(temporary);
  writeSyncedPrivateFile(temporaryFile, text);
  try {
    renameSync(temporaryFile, file);
  } catch (error) {
    unlinkSync(temporaryFile);
    throw error;
  }
  syncDirectory(dirname(file));
}

/** Removes the file at `path` unless it is already gone. */
export function unlinkIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}

/** Sets the permission bits of `path` to `mode` when they differ (no write when nothing changes). */
function restrictMode(path: string, mode: number): void {
  if ((statSync(path).mode & 0o777) !== mode) chmodSync(path, mode);
}
