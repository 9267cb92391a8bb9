/**
 * What a restore of a local cluster leaves in the cluster's directory while it runs, and how an interrupted one is put
 * back. A restore moves the brokers' data and brokers file aside, restores into fresh directories, and commits by one
 * rename of the data aside; until that rename a failure or the next launch puts the previous data back.
 */
import { existsSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { directoryHolder } from "../../files/directory-claim.js";
import { syncDirectory } from "../../files/private-files.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import { BROKER_PID_FILE_NAME, BROKERS_DIRECTORY_NAME } from "./child-environment.js";
import { BROKERS_FILE_NAME } from "./local-brokers.js";
import { ORPHAN_STOP_DEADLINE_MS } from "./supervision.js";

/**
 * Where a restore keeps the brokers' previous data until the restored cluster is ready. While it exists, the restore
 * has not been committed: a failure or the next launch puts it back.
 */
export const PREVIOUS_BROKERS_DIRECTORY_NAME = "brokers.before-restore";

/** Where a restore keeps the brokers file as it was (with brokers that are not members) until it is committed. */
export const PREVIOUS_BROKERS_FILE_NAME = "ports.before-restore.json";

/**
 * What the previous data is renamed to once the restored cluster is ready (the commit, one atomic rename): nothing
 * puts it back, and it is deleted right after, or at the next launch when the platform stopped first.
 */
export const DISCARDED_BROKERS_DIRECTORY_NAME = "brokers.restored-over";

/** The cluster configuration document a restore gives `flowplane restore`, in the cluster's directory while it runs. */
export const RESTORE_CONFIGURATION_FILE_NAME = "restore-configuration.json";

/** Name of the file in a broker's data directory naming the process that holds it (a broker or a restore). */
/**
 * Longest the put-back of an interrupted restore waits for processes still holding the brokers' data: a broker or a
 * restore whose supervisor is gone stops within the orphan deadline, and a little more is left for its exit.
 */
export const DEFAULT_DATA_HOLDER_WAIT_MS = ORPHAN_STOP_DEADLINE_MS + 15_000;

/** How often the put-back looks again at the processes holding the brokers' data. */
const DATA_HOLDER_POLL_INTERVAL_MS = 250;

/** The brokers' data directories under `directory` whose `broker.pid` names a live process, with that process. */
function heldDataDirectories(directory: string): { dataDirectory: string; pid: number }[] {
  let entries: string[];
  try {
    entries = readdirSync(directory);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  const held: { dataDirectory: string; pid: number }[] = [];
  for (const entry of entries) {
    const dataDirectory = join(directory, entry);
    const pid = directoryHolder(dataDirectory, BROKER_PID_FILE_NAME);
    if (pid !== null) held.push({ dataDirectory, pid });
  }
  return held;
}

/**
 * Waits until no process holds a broker's data directory of the cluster (its `broker.pid` names a live process),
 * in the brokers' folder or aside: moving data a restore or a broker of an earlier start still writes would mix the
 * restored data into the previous one. Throws naming the process when one still holds it after `waitMs`.
 */
async function waitForDataHolders(clusterDirectory: string, waitMs: number, logger: Logger): Promise<void> {
  const deadline = monotonicNowMs() + waitMs;
  const holders = () => [
    ...heldDataDirectories(join(clusterDirectory, BROKERS_DIRECTORY_NAME)),
    ...heldDataDirectories(join(clusterDirectory, PREVIOUS_BROKERS_DIRECTORY_NAME)),
  ];
  let held = holders();
  if (held.length === 0) return;
  logger.warn(
    { clusterDirectory, holders: held },
    "processes of an earlier start still hold the brokers' data; waiting for them to exit before putting the previous data back",
  );
  while (held.length > 0 && monotonicNowMs() < deadline) {
    await new Promise((resolveWait) => setTimeout(resolveWait, DATA_HOLDER_POLL_INTERVAL_MS));
    held = holders();
  }
  const [first] = held;
  if (first === undefined) return;
  const reason = `process ${first.pid} still holds ${join(first.dataDirectory, BROKER_PID_FILE_NAME)} after ${waitMs} ms, so the previous data of an interrupted restore was not put back and the cluster is not launched; stop that process (a restore or a broker of an earlier start; when it is no flowplane process, delete that file instead), then wake the cluster`;
  logger.error({ clusterDirectory, holders: held }, reason);
  throw new Error(reason);
}

/**
 * Puts back what a restore that was not committed moved aside (its previous data and brokers file), when it failed or
 * the platform stopped before it ended: the half-restored data goes, the previous data and brokers return, once no
 * process holds the brokers' data any more (see `waitForDataHolders`). Deletes what a committed restore left to
 * delete. Each step can be repeated, so a crash in the middle of it is finished by the next call.
 */
export async function putBackInterruptedRestore(
  clusterDirectory: string,
  logger: Logger,
  holderWaitMs: number,
): Promise<void> {
  const previousDirectory = join(clusterDirectory, PREVIOUS_BROKERS_DIRECTORY_NAME);
  const previousBrokersFile = join(clusterDirectory, PREVIOUS_BROKERS_FILE_NAME);
  rmSync(join(clusterDirectory, RESTORE_CONFIGURATION_FILE_NAME), { force: true });
  if (existsSync(previousDirectory)) {
    await waitForDataHolders(clusterDirectory, holderWaitMs, logger);
    const brokersDirectory = join(clusterDirectory, BROKERS_DIRECTORY_NAME);
    logger.warn({ clusterDirectory }, "a restore of this cluster did not end; putting its previous data back");
    // The brokers file first, and durably: once the data is back, nothing says the brokers file still needs it.
    if (existsSync(previousBrokersFile)) {
      renameSync(previousBrokersFile, join(clusterDirectory, BROKERS_FILE_NAME));
      syncDirectory(clusterDirectory);
    }
    rmSync(brokersDirectory, { recursive: true, force: true });
    renameSync(previousDirectory, brokersDirectory);
    syncDirectory(clusterDirectory);
  } else {
    // Saved before the data was moved aside, or left by a committed restore: either way the brokers file is current.
    rmSync(previousBrokersFile, { force: true });
  }
  rmSync(join(clusterDirectory, DISCARDED_BROKERS_DIRECTORY_NAME), { recursive: true, force: true });
}
