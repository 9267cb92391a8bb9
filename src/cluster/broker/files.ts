/**
 * The broker's own files in its data directory: the cluster configuration it holds (written atomically, so a crash
 * leaves either the old or the new file), `broker.pid`, which keeps two brokers off one data directory, the storage
 * environment of its partition replicas (`raft/`), and `restore-incomplete` while `flowplane restore` writes into it.
 */
import { randomBytes } from "node:crypto";
import { open, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { claimDirectory, DataDirectoryInUseError } from "../../files/directory-claim.js";
import {
  createPrivateDirectoryDurably,
  ownPrivateDirectory,
  privateFileMode,
  syncDirectory,
} from "../../files/private-files.js";
import { type CommitReport, StorageEnvironment } from "../raft/storage/environment.js";
import {
  type AcceptorState,
  type ClusterConfiguration,
  decodeConfiguration,
  encodeConfiguration,
  parseAcceptorState,
  recordedChangeProblem,
} from "../topology/index.js";

/** Name of the cluster configuration file in the broker's data directory. */
export const CONFIGURATION_FILE_NAME = "cluster-configuration.json";

/** Name of the file holding what this broker promised and accepted for the next change (change-acceptor.ts). */
export const CHANGE_ACCEPTANCE_FILE_NAME = "change-acceptance.json";

/** Name of the process id file in the broker's data directory. */
export const PID_FILE_NAME = "broker.pid";

/** Directory of the replicas' storage environment in the broker's data directory. */
export const STORAGE_DIRECTORY_NAME = "raft";

/**
 * Name of the file `flowplane restore` keeps in the data directory from before its first write until its last: a
 * directory holding it was left half restored (the restore was killed), which a broker refuses to start on and the
 * same restore run again starts over.
 */
export const RESTORE_MARKER_FILE_NAME = "restore-incomplete";

/** Thrown when a broker is started on a data directory that a restore left half written. */
export class InterruptedRestoreError extends Error {
  constructor(readonly directory: string) {
    super(
      `${directory} holds a restore that did not finish (${RESTORE_MARKER_FILE_NAME}): some of its partitions may be ` +
        "missing. Run the same flowplane restore again, which starts over, or empty the directory.",
    );
    this.name = "InterruptedRestoreError";
  }
}

/** Whether `directory` holds the marker of a restore that did not finish. */
export async function holdsInterruptedRestore(directory: string): Promise<boolean> {
  return await stat(join(directory, RESTORE_MARKER_FILE_NAME)).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return false;
      throw error;
    },
  );
}

/** Writes the restore marker durably: once this returns, a crash leaves the directory marked. */
export async function markRestoreIncomplete(directory: string): Promise<void> {
  await writeFileAtomically(directory, RESTORE_MARKER_FILE_NAME, "flowplane restore is writing this directory\n");
}

/** Removes the restore marker durably, the restore's last step. */
export async function markRestoreComplete(directory: string): Promise<void> {
  await rm(join(directory, RESTORE_MARKER_FILE_NAME));
  syncDirectory(directory);
}

/** Where brokers before the shared environment kept one environment per replica. */
const PER_REPLICA_STORAGE_DIRECTORY_NAME = "partitions";

/** Thrown when a data directory holds partition data in a layout this version does not read. */
export class UnsupportedDataLayoutError extends Error {
  constructor(readonly path: string) {
    super(
      `${path} holds partition data in the one-environment-per-partition layout of an earlier flowplane version, ` +
        "which this version does not read. Start this broker with an empty data directory (its partitions are " +
        "replicated back from the other brokers) or run the earlier version.",
    );
    this.name = "UnsupportedDataLayoutError";
  }
}

/**
 * Opens the storage environment of the broker's replicas in `<dataDirectory>/raft`. Throws
 * UnsupportedDataLayoutError when the directory holds replicas in the earlier per-partition layout, rather than
 * start empty next to data it would silently ignore.
 */
export async function openStorageEnvironment(
  dataDirectory: string,
  synchronousCommit: boolean,
  onCommit?: (commit: CommitReport) => void,
): Promise<StorageEnvironment> {
  const legacy = join(dataDirectory, PER_REPLICA_STORAGE_DIRECTORY_NAME);
  const legacyExists = await stat(legacy).then(
    () => true,
    () => false,
  );
  if (legacyExists) throw new UnsupportedDataLayoutError(legacy);
  const directory = join(dataDirectory, STORAGE_DIRECTORY_NAME);
  // The broker's own directory: made 0700 even when an earlier version created it wider, which puts the journal and
  // snapshots written back then out of other users' reach too. Created durably (its parents synced): the journal
  // syncs only the directories it creates itself, and a crash on a first start must not lose acknowledged writes
  // together with the directory entry of `raft/` or of the data directory above it.
  createPrivateDirectoryDurably(directory);
  ownPrivateDirectory(directory);
  return StorageEnvironment.open({ directory, synchronousCommit, ...(onCommit === undefined ? {} : { onCommit }) });
}

/** Writes `text` to `path` durably and atomically: a temporary file, synced, renamed over, directory synced. */
async function writeFileAtomically(directory: string, fileName: string, text: string): Promise<void> {
  const target = join(directory, fileName);
  const temporary = join(directory, `.${fileName}.${randomBytes(6).toString("hex")}.tmp`);
  const handle = await open(temporary, "w", privateFileMode);
  try {
    await handle.writeFile(text, "utf8");
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await rename(temporary, target);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
  const directoryHandle = await open(directory, "r");
  try {
    await directoryHandle.sync();
  } finally {
    await directoryHandle.close();
  }
}

/** Reads the persisted cluster configuration, or null when the broker never wrote one. */
export async function readPersistedConfiguration(directory: string): Promise<ClusterConfiguration | null> {
  let text: string;
  try {
    text = await readFile(join(directory, CONFIGURATION_FILE_NAME), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  return decodeConfiguration(text);
}

/** Persists the cluster configuration atomically. */
export async function persistConfiguration(directory: string, configuration: ClusterConfiguration): Promise<void> {
  await writeFileAtomically(directory, CONFIGURATION_FILE_NAME, encodeConfiguration(configuration));
}

/** Thrown when a file the broker wrote cannot be read back as it was written: corruption is never silently repaired. */
export class DamagedBrokerFileError extends Error {
  constructor(
    readonly path: string,
    readonly problem: string,
  ) {
    super(`${path} is damaged (${problem}); restore it from a copy or remove it once you know what it held`);
    this.name = "DamagedBrokerFileError";
  }
}

/**
 * Reads what this broker promised and accepted for the next change, or null when it never did. A file that does not
 * hold such a state throws DamagedBrokerFileError: starting without it could let the broker accept a second change
 * for a version it had already given to another.
 */
export async function readChangeAcceptance(directory: string): Promise<AcceptorState | null> {
  const path = join(directory, CHANGE_ACCEPTANCE_FILE_NAME);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new DamagedBrokerFileError(path, "not JSON");
  }
  const state = parseAcceptorState(value);
  if (typeof state === "string") throw new DamagedBrokerFileError(path, state);
  const accepted = state.accepted === null ? null : recordedChangeProblem(state.accepted.configuration, state.version);
  if (accepted !== null) throw new DamagedBrokerFileError(path, `accepted: ${accepted}`);
  return state;
}

/** Persists what this broker promised and accepted for the next change, atomically and durably. */
export async function persistChangeAcceptance(directory: string, state: AcceptorState): Promise<void> {
  await writeFileAtomically(directory, CHANGE_ACCEPTANCE_FILE_NAME, JSON.stringify(state));
}

/** Thrown when another live broker holds the data directory (from `../../files/directory-claim.ts`). */
export { DataDirectoryInUseError };

/**
 * Claims the data directory for this broker: refuses with `DataDirectoryInUseError` when a live process (or another
 * broker of this process) holds it, replaces a stale `broker.pid`, and writes this process's id. Returns the function
 * that releases it.
 */
export async function claimDataDirectory(directory: string): Promise<() => Promise<void>> {
  return await claimDirectory(directory, { pidFileName: PID_FILE_NAME, holder: "the broker" });
}
