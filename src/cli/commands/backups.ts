/**
 * `flowplane backups take|list|status|delete`: the backup API of the gateway's management port from the command line.
 * `take --wait` (and `status --wait`) follow the backup until every partition's part has ended, showing how many
 * partitions are done and the bytes written so far.
 */
import { type Command, InvalidArgumentError } from "commander";
import { type Backup, BackupsClient } from "../../client/backups.js";
import { gatewayAudience } from "../../client/cluster.js";
import { requireClusterManagementUrl } from "../../client/environment.js";
import { MAX_INT64, parseNonNegativeInt64 } from "../../json/int64.js";
import { type CliIo, Interrupted } from "../io.js";
import { ProgressLines } from "../progress-lines.js";
import { sleepUnlessInterrupted } from "../sleep.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, clusterManagementUrlHelp, createClientContext } from "./client-context.js";

interface CommonOptions {
  json?: boolean;
  audience: string;
}

/** How often a followed backup is polled. */
const POLL_INTERVAL_MS = 1_000;

const backupsEnvironmentHelp = `${clientEnvironmentHelp}
${clusterManagementUrlHelp}`;

/** Parses a backup id: a non-negative 64-bit integer, exactly (a bigint). */
export function parseBackupId(value: string): bigint {
  const backupId = parseNonNegativeInt64(value);
  if (backupId === null) throw new InvalidArgumentError(`a non-negative integer of at most ${MAX_INT64}`);
  return backupId;
}

function createBackupsClient(io: CliIo, options: CommonOptions): BackupsClient {
  const { settings, tokenProvider } = createClientContext(io);
  return new BackupsClient({
    baseUrl: requireClusterManagementUrl(settings),
    tokenProvider,
    audience: options.audience,
  });
}

/** Whether a part of the backup is still being written. */
function running(backup: Backup): boolean {
  return backup.details.some((detail) => detail.state === "IN_PROGRESS");
}

/** One line of progress: the state, partitions done and bytes written. */
export function formatBackupProgress(backup: Backup): string {
  const done = backup.details.filter((detail) => detail.state !== "IN_PROGRESS").length;
  const bytes = backup.details.reduce((total, detail) => total + detail.sizeBytes, 0);
  return `backup ${backup.backupId}: ${printable(backup.state)}, ${done}/${backup.details.length} partitions done, ${formatBytes(bytes)} written`;
}

function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 * 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
  return `${(bytes / (1024 * 1024 * 1024)).toFixed(2)} GiB`;
}

/** A backup with one line per partition, as `status` and `take` print it. */
export function formatBackup(backup: Backup): string {
  return `${formatBackupProgress(backup)}\n${formatBackupDetails(backup)}`;
}

/** What `formatBackup` prints below the progress line: the failure reason, then one line per partition. */
function formatBackupDetails(backup: Backup): string {
  const lines: string[] = [];
  if (backup.failureReason !== null) lines.push(`  ${printable(backup.failureReason)}`);
  for (const detail of backup.details) {
    const where = detail.brokerId === null ? "" : ` (broker ${detail.brokerId})`;
    const position = detail.checkpointPosition === null ? "" : ` at position ${detail.checkpointPosition}`;
    const reason = detail.failureReason === null ? "" : `: ${printable(detail.failureReason)}`;
    lines.push(
      `  partition ${detail.partitionId}${where}: ${printable(detail.state)}${position}, ${formatBytes(detail.sizeBytes)}${reason}`,
    );
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

/**
 * Polls the backup until no part of it is being written, showing its progress: on a terminal one line rewritten in
 * place, elsewhere a line whenever it moves on (and every few seconds). Returns the final state.
 */
async function follow(client: BackupsClient, backupId: bigint, io: CliIo, json: boolean): Promise<Backup> {
  const progress = new ProgressLines(io, io.stdoutIsTerminal === true && !json);
  // Bounded by the backup ending, or by the user (Ctrl-C aborts the shutdown signal).
  for (;;) {
    const backup = await client.status(backupId);
    const ended = !running(backup);
    if (!json) {
      const line = formatBackupProgress(backup);
      progress.show(line, ended);
    }
    if (ended) return backup;
    if (io.shutdownSignal.aborted) {
      progress.interrupt();
      throw new Interrupted(`stopped following; backup ${backupId} goes on (see flowplane backups status)`);
    }
    await sleepUnlessInterrupted(POLL_INTERVAL_MS, io.shutdownSignal);
  }
}

/**
 * Prints the backup `follow` ended on, below its last progress line (which says the same as `formatBackup`'s first,
 * so it is not printed twice), and fails the command when it ended anything but COMPLETED.
 */
function finish(io: CliIo, backup: Backup, json: boolean): void {
  io.stdout(json ? `${printableJson(backup)}\n` : formatBackupDetails(backup));
  if (backup.state !== "COMPLETED") {
    // The state is the server's text: one line, so that it cannot forge further lines of the message.
    throw new Error(printable(`backup ${backup.backupId} ended ${backup.state}`));
  }
}

/** Registers `flowplane backups take|list|status|delete`. */
export function registerBackupsCommands(program: Command, io: CliIo): void {
  const backups = program
    .command("backups")
    .description("Take, list, watch and delete cluster backups (backup API of the management port, scope cluster).")
    .addHelpText("after", backupsEnvironmentHelp);

  backups
    .command("take")
    .description(
      "Take a backup: every partition takes a checkpoint with this id, and its leader writes the partition's part to the backup store while writes go on.",
    )
    .argument("<backupId>", "the backup's id: above every earlier backup's id (never reused)", parseBackupId)
    .option("--wait", "follow the backup until every partition's part has ended")
    .option("--json", "print the API's answers as JSON")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (backupId: bigint, options: CommonOptions & { wait?: boolean }) => {
      const client = createBackupsClient(io, options);
      const json = options.json === true;
      const taken = await client.take(backupId);
      if (options.wait !== true) {
        io.stdout(
          json
            ? `${printableJson(taken)}\n`
            : `${formatBackup(taken)}Follow it with: flowplane backups status ${backupId} --wait\n`,
        );
        return;
      }
      finish(io, await follow(client, backupId, io, json), json);
    });

  backups
    .command("list")
    .description("List every backup, newest first.")
    .option("--json", "print the API's answer as JSON")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (options: CommonOptions) => {
      const list = await createBackupsClient(io, options).list();
      if (options.json === true) {
        io.stdout(`${printableJson(list)}\n`);
        return;
      }
      io.stdout(list.length === 0 ? "no backups\n" : `${list.map(formatBackupProgress).join("\n")}\n`);
    });

  backups
    .command("status")
    .description("Show one backup with the state of each partition's part.")
    .argument("<backupId>", "the backup's id", parseBackupId)
    .option("--wait", "follow the backup until every partition's part has ended")
    .option("--json", "print the API's answer as JSON")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (backupId: bigint, options: CommonOptions & { wait?: boolean }) => {
      const client = createBackupsClient(io, options);
      const json = options.json === true;
      if (options.wait === true) {
        finish(io, await follow(client, backupId, io, json), json);
        return;
      }
      const backup = await client.status(backupId);
      io.stdout(json ? `${printableJson(backup)}\n` : formatBackup(backup));
    });

  backups
    .command("delete")
    .description("Delete a backup from the backup store (refused while it is in progress).")
    .argument("<backupId>", "the backup's id", parseBackupId)
    .option("--json", "print the API's answer as JSON")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (backupId: bigint, options: CommonOptions) => {
      const deleted = await createBackupsClient(io, options).delete(backupId);
      io.stdout(options.json === true ? `${printableJson(deleted)}\n` : `backup ${backupId} deleted\n`);
    });
}
