/**
 * `flowplane restore --backup-id N`: restores one broker from a backup, before it starts. Run it on every broker of
 * the new cluster with that broker's own configuration (the same flags and environment as `flowplane broker`) and an
 * empty data directory, then start the brokers as usual.
 *
 * With `--cluster-configuration FILE` the brokers are restored into the shape a cluster configuration document
 * describes (`GET /actuator/cluster` of the cluster being restored, which scaling may have changed since its first
 * start) rather than the first configuration of their settings: each member restores the partitions the document
 * gives it and stores the document as its configuration, so the restarted brokers agree on it. With
 * `--configuration-of-backup` that document is the one the backup holds: the cluster's shape when it was taken.
 *
 * Started by the local provisioner (`FLOWPLANE_SUPERVISOR=ipc` and an IPC channel), the restore aborts at once when
 * the platform is gone: its next start puts the cluster's previous data back, which no restore may write into then.
 */
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import type { Command } from "commander";
import { restorableShapeProblem } from "../../client/restorable-shape.js";
import type { ClusterConfiguration, PartitionDistribution } from "../../cluster/topology/index.js";
import { loadConfiguration } from "../../config/load.js";
import { watchSupervisor } from "../../platform/provisioner/supervision.js";
import { type CliIo, exitCodes, UsageError } from "../io.js";
import { printable } from "../terminal-text.js";
import { parseBackupId } from "./backups.js";
import { brokerConfigurationFlags } from "./broker.js";

/** Largest cluster configuration document `--cluster-configuration` reads (the largest allowed shape stays below it). */
const MAX_CLUSTER_CONFIGURATION_BYTES = 8 * 1024 * 1024;

interface RestoreCommandOptions {
  backupId: bigint;
  clusterConfiguration?: string;
  configurationOfBackup?: boolean;
  config?: string;
  dataDirectory?: string;
  set?: string[];
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

async function runRestore(options: RestoreCommandOptions, io: CliIo): Promise<void> {
  // Watched before anything is read or written. The restore cannot be stopped halfway cleanly, and what it wrote is
  // deleted by the put-back of the platform's next start, so the process exits at once.
  const supervisor = watchSupervisor(io.environment);
  void supervisor?.gone.then(() => {
    io.stderr("flowplane restore: the process that started this restore is gone; aborting\n");
    process.exit(exitCodes.failure);
  });
  try {
    await restoreFromBackup(options, io);
  } finally {
    supervisor?.stop();
  }
}

async function restoreFromBackup(options: RestoreCommandOptions, io: CliIo): Promise<void> {
  const configuration = loadConfiguration({
    environment: io.environment,
    configFile: options.config,
    flags: brokerConfigurationFlags(options),
  });
  // Loaded lazily so that client commands do not pay for the broker's modules (LMDB, Raft).
  const { brokerOptionsFromConfiguration, initialDistribution } = await import("../../cluster/broker/options.js");
  const { RestoreRefusedError, BackupPartDamagedError, restoreBroker } = await import("../../cluster/backup/index.js");
  const { platformVersion } = await import("../../platform/version.js");
  const pino = (await import("pino")).default;
  const brokerOptions = brokerOptionsFromConfiguration(configuration, {
    logger: io.logger ?? pino({ level: "silent" }),
    version: platformVersion,
  });
  const store = brokerOptions.backupStore;
  if (store === undefined || store === null) {
    throw new UsageError("service.backup.store is none: there is no backup store to restore from");
  }
  if (options.clusterConfiguration !== undefined && options.configurationOfBackup === true) {
    throw new UsageError("give --cluster-configuration or --configuration-of-backup, not both");
  }
  let given: Awaited<ReturnType<typeof restoredShape>> | undefined;
  if (options.clusterConfiguration !== undefined) {
    const file = options.clusterConfiguration;
    const text = await readConfigurationFile(file, MAX_CLUSTER_CONFIGURATION_BYTES);
    given = await restoredShape(text, `--cluster-configuration ${printable(file)}`, brokerOptions.nodeId);
  } else if (options.configurationOfBackup === true) {
    const text = await store.backupConfiguration(options.backupId);
    if (text === null) {
      throw new Error(
        `restore refused: backup ${options.backupId} holds no cluster configuration (an earlier version took it, or it ` +
          "does not exist); give the cluster's with --cluster-configuration",
      );
    }
    const source = `the cluster configuration of backup ${options.backupId}`;
    given = await restoredShape(text, source, brokerOptions.nodeId).catch((error: unknown) => {
      // A damaged file in the backup is no usage error: the backup cannot be restored this way.
      if (error instanceof UsageError) throw new Error(`restore refused: ${error.message}`);
      throw error;
    });
  }
  const distribution = given?.distribution ?? initialDistribution(brokerOptions);
  io.stdout(
    `restoring broker ${brokerOptions.nodeId} from backup ${options.backupId} into ${printable(brokerOptions.dataDirectory)}\n`,
  );
  try {
    const report = await restoreBroker({
      store,
      backupId: options.backupId,
      nodeId: brokerOptions.nodeId,
      dataDirectory: brokerOptions.dataDirectory,
      distribution,
      ...(given === undefined ? {} : { configuration: given.configuration }),
      onPartitionRestored: (partitionId, messages) =>
        io.stdout(`  partition ${partitionId} verified and rebuilt: ${messages} buffered messages\n`),
    });
    io.stdout(
      `broker ${brokerOptions.nodeId} restored ${report.partitions.length} partitions; start it with flowplane broker\n`,
    );
  } catch (error) {
    if (error instanceof RestoreRefusedError || error instanceof BackupPartDamagedError) {
      throw new Error(`restore refused: ${error.message}`);
    }
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`restore failed: ${reason}; what it had written was removed, and the data directory is empty`, {
      cause: error,
    });
  }
}

/**
 * Reads the `--cluster-configuration` file, at most `maxBytes` of it: a larger file, or anything but a regular file
 * (a directory, a FIFO, a device), is refused naming it.
 */
async function readConfigurationFile(file: string, maxBytes: number): Promise<string> {
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    // Opened without blocking, so that a FIFO with no writer is refused below rather than waited on forever.
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? "unreadable";
    throw new UsageError(`--cluster-configuration ${printable(file)} cannot be read (${reason})`);
  }
  try {
    if (!(await handle.stat()).isFile()) {
      throw new UsageError(`--cluster-configuration ${printable(file)} is not a regular file`);
    }
    const buffer = Buffer.alloc(maxBytes + 1);
    let length = 0;
    // Bounded: every read fills more of a buffer of maxBytes + 1 bytes, or the file has ended.
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length > maxBytes) {
        throw new UsageError(`--cluster-configuration ${printable(file)} is larger than ${maxBytes} bytes`);
      }
    }
    return buffer.subarray(0, length).toString("utf8");
  } finally {
    await handle.close();
  }
}

/**
 * The configuration in `text` (from `source`, named in errors) and the distribution of its partitions: what broker
 * `nodeId` is restored into. Refuses a document that is malformed, describes a cluster in the middle of a change (a
 * broker or replica not ACTIVE, a change pending) or whose partitions or routing counts are not 1..P, and one that
 * does not list this broker.
 */
async function restoredShape(
  text: string,
  source: string,
  nodeId: number,
): Promise<{ configuration: ClusterConfiguration; distribution: PartitionDistribution }> {
  const { ConfigurationDecodeError, decodeConfiguration, partitionIdsOf, replicasOf, toConfigurationDocument } =
    await import("../../cluster/topology/index.js");
  let configuration: ClusterConfiguration;
  try {
    configuration = decodeConfiguration(text);
  } catch (error) {
    if (!(error instanceof ConfigurationDecodeError)) throw error;
    throw new UsageError(`${source}: ${error.message.slice(0, 1_000)}`);
  }
  const refuse = (reason: string): Error => new Error(`restore refused: ${reason}`);
  // The platform runs the same check before it stops a cluster to restore it (src/client/restorable-shape.ts).
  const problem = restorableShapeProblem(toConfigurationDocument(configuration));
  if (problem !== undefined) throw refuse(problem);
  if (!configuration.members.has(nodeId)) {
    const members = [...configuration.members.keys()].join(", ");
    throw refuse(`broker ${nodeId} is not a member of ${source} (its brokers: ${members})`);
  }
  const partitionIds = partitionIdsOf(configuration);
  const distribution = new Map(
    partitionIds.map((partitionId) => [
      partitionId,
      replicasOf(configuration, partitionId).map(({ brokerId, priority }) => ({ brokerId, priority })),
    ]),
  );
  return { configuration, distribution };
}

/** Registers `flowplane restore`. */
export function registerRestoreCommand(program: Command, io: CliIo): void {
  program
    .command("restore")
    .description(
      "Restore this broker's partitions from a backup into its empty data directory (run it on every broker before they start).",
    )
    .requiredOption("--backup-id <id>", "the backup to restore", parseBackupId)
    .option(
      "--cluster-configuration <file>",
      "restore into the cluster configuration in this file (GET /actuator/cluster of the cluster), not the first one",
    )
    .option(
      "--configuration-of-backup",
      "restore into the cluster configuration the backup was taken in (every backup of this version holds it)",
    )
    .option("-c, --config <file>", "the broker's YAML configuration file")
    .option("--data-directory <directory>", "where local data is kept (service.dataDirectory)")
    .option("--set <key=value>", "any setting by its key, e.g. service.broker.cluster.nodeId=1 (repeatable)", collect)
    .addHelpText(
      "after",
      [
        "",
        "Use the broker's own settings (node id, cluster size, partition count, replication factor, data directory,",
        "service.backup.*). The partition count must equal the backup's; the broker count and the replication",
        "factor may differ. Every file of the backup is verified first; a failed, incomplete or damaged backup is",
        "refused and nothing is written; one that fails while it writes removes what it wrote.",
        "",
        "A cluster that scaling changed since its first start is restored with --cluster-configuration: the",
        "document its management API answers at GET /actuator/cluster before the restore (no change pending, every",
        "broker and replica ACTIVE, partitions and routing counts 1..P). Every broker it lists is restored (the",
        "others are not members), with the partitions it gives it, and keeps it.",
        "Started by `flowplane start` (FLOWPLANE_SUPERVISOR=ipc and an IPC channel), it aborts when that exits.",
      ].join("\n"),
    )
    .action((options: RestoreCommandOptions) => runRestore(options, io));
}
