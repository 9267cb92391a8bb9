/**
 * Runs `flowplane restore --backup-id N` for one broker of a local cluster, as a child process with the broker's
 * own environment, its output appended to a log file in the cluster's directory. The child is supervised like the
 * brokers (an IPC channel and `FLOWPLANE_SUPERVISOR=ipc`, see supervision.ts): it aborts once this process is gone,
 * so that no restore outlives the platform and writes into the data that the platform's next start puts back.
 */
import { spawn } from "node:child_process";
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { privateFileMode } from "../../files/private-files.js";
import type { LocalBrokerSettings } from "./local-cluster.js";
import { SUPERVISOR_CHANNEL, SUPERVISOR_VARIABLE } from "./supervision.js";

/** Longest a broker's restore may run before it is stopped and the restore fails. */
const RESTORE_TIME_LIMIT_MS = 60 * 60 * 1000;

/** How much of the end of the log a failure message quotes. */
const QUOTED_LOG_BYTES = 600;

/** Options of `runRestoreCommand`. */
export interface RestoreCommandOptions {
  /** The flowplane command line (as the provisioner starts brokers with). */
  command: { entry: string; nodeArguments: readonly string[] };
  backupId: bigint;
  broker: LocalBrokerSettings;
  /** The cluster configuration document the broker is restored into (`--cluster-configuration`). */
  configurationFile: string;
  /** Where the command's output is appended. */
  logFile: string;
}

/** Runs the restore of one broker and resolves when it succeeded; the error quotes the end of its output. */
export async function runRestoreCommand(options: RestoreCommandOptions): Promise<void> {
  const logDescriptor = openSync(options.logFile, "a", privateFileMode);
  const startOffset = fstatSync(logDescriptor).size;
  let exit: { code: number | null; signal: NodeJS.Signals | null };
  try {
    const child = spawn(
      process.execPath,
      [
        ...options.command.nodeArguments,
        options.command.entry,
        "restore",
        "--backup-id",
        String(options.backupId),
        "--cluster-configuration",
        options.configurationFile,
      ],
      {
        env: { ...options.broker.environment, [SUPERVISOR_VARIABLE]: SUPERVISOR_CHANNEL },
        stdio: ["ignore", logDescriptor, logDescriptor, "ipc"],
      },
    );
    const timer = setTimeout(() => child.kill("SIGKILL"), RESTORE_TIME_LIMIT_MS);
    try {
      exit = await new Promise((resolveExit, rejectExit) => {
        child.once("error", rejectExit);
        child.once("exit", (code, signal) => resolveExit({ code, signal }));
      });
    } finally {
      clearTimeout(timer);
    }
  } finally {
    closeSync(logDescriptor);
  }
  if (exit.code === 0) return;
  const how = exit.signal === null ? `exit code ${exit.code}` : `signal ${exit.signal}`;
  throw new Error(
    `flowplane restore of broker ${options.broker.nodeId} failed (${how}): ${tailOf(options.logFile, startOffset)}`,
  );
}

/** The last bytes the command wrote to its log, on one line. */
function tailOf(file: string, startOffset: number): string {
  const descriptor = openSync(file, "r");
  try {
    const size = fstatSync(descriptor).size;
    const from = Math.max(startOffset, size - QUOTED_LOG_BYTES);
    const buffer = Buffer.alloc(size - from);
    readSync(descriptor, buffer, 0, buffer.length, from);
    return buffer.toString("utf8").replace(/\s+/g, " ").trim();
  } finally {
    closeSync(descriptor);
  }
}
