/**
 * `flowplane restore --backup-id N`: restores one broker from a backup, before it starts. Run it on every broker of
 * the new cluster with that broker's own configuration (the same flags and environment as `flowplane broker`) and an
 * empty data directory, then start the brokers as usual.
 */
import { type Command, InvalidArgumentError } from "commander";
import { loadConfiguration } from "../../config/load.js";
import { type CliIo, UsageError } from "../io.js";
import { printable } from "../terminal-text.js";
import { brokerConfigurationFlags } from "./broker.js";

interface RestoreCommandOptions {
  backupId: number;
  config?: string;
  dataDirectory?: string;
  set?: string[];
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

function parseBackupId(value: string): number {
  if (!/^\d{1,16}$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError(`a non-negative integer of at most ${Number.MAX_SAFE_INTEGER}`);
  }
  return Number(value);
}

async function runRestore(options: RestoreCommandOptions, io: CliIo): Promise<void> {
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
  const distribution = initialDistribution(brokerOptions);
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
    throw error;
  }
}

/** Registers `flowplane restore`. */
export function registerRestoreCommand(program: Command, io: CliIo): void {
  program
    .command("restore")
    .description(
      "Restore this broker's partitions from a backup into its empty data directory (run it on every broker before they start).",
    )
    .requiredOption("--backup-id <id>", "the backup to restore", parseBackupId)
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
        "refused and nothing is written.",
      ].join("\n"),
    )
    .action((options: RestoreCommandOptions) => runRestore(options, io));
}
