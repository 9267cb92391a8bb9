/**
 * `flowplane clusters backups list|take|delete|restore|restores|schedule --cluster <id>`: a cluster's backups through the
 * Administration API (scope `backups`), the way the reference SDK sees them. `take --wait` follows the backup until
 * it is Complete or Failed; `restore --wait` follows the restore until it is COMPLETED or FAILED; `schedule
 * set|get|delete` manages the cluster's backup schedule.
 */
import { type Command, InvalidArgumentError } from "commander";
import { adminAudience, type BackupSchedule, type ClusterBackup, type ClusterRestore } from "../../client/admin.js";
import { type CliIo, Interrupted } from "../io.js";
import { sleepUnlessInterrupted } from "../sleep.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { parseBackupId } from "./backups.js";
import { createAdminClient } from "./client-context.js";

interface ClusterBackupOptions {
  cluster: string;
  keep?: number;
  json?: boolean;
  wait?: boolean;
  audience?: string;
}

/** How often `--wait` asks again. */
const POLL_INTERVAL_MS = 1_000;

/** One line per backup: id, status, when it was taken and when it finished (its name is `backup <id>`). */
export function formatClusterBackups(backups: readonly ClusterBackup[]): string {
  if (backups.length === 0) return "no backups";
  const rows = [
    ["ID", "STATUS", "CREATED", "COMPLETED"],
    ...backups.map((backup) =>
      [backup.uuid, backup.status, backup.created ?? "-", backup.completed ?? "-"].map(printable),
    ),
  ];
  return alignedTable(rows);
}

/**
 * A schedule on one line: its expression, what it keeps, its next and last run, and, when its last run could not
 * start a backup, why and when it is tried again on a second line.
 */
export function formatSchedule(schedule: BackupSchedule): string {
  const line = `backups at "${printable(schedule.cron)}" (UTC), keeping ${schedule.keep} complete; next ${printable(schedule.nextRun ?? "never")}, last ${printable(schedule.lastRun ?? "never")}`;
  const failure = schedule.lastFailure ?? null;
  if (failure === null) return line;
  const failures = schedule.consecutiveFailures ?? 1;
  const retry =
    schedule.retrying === true
      ? "now"
      : schedule.retryAt === undefined || schedule.retryAt === null
        ? "at the next run"
        : `at ${schedule.retryAt}`;
  const reason = printable(failure.replace(/\.$/, ""));
  return `${line}\nthe last ${failures === 1 ? "run" : `${failures} runs`} could not start a backup (${reason}); tried again ${printable(retry)}`;
}

/** Parses `--keep`: how many complete backups a schedule keeps. */
function parseKeep(value: string): number {
  if (!/^\d{1,3}$/.test(value) || Number(value) < 1) throw new InvalidArgumentError("a positive integer");
  return Number(value);
}

/** A restore on one line, with its failure reason when it failed. */
export function formatRestore(restore: ClusterRestore): string {
  const reason = restore.failureReason === null ? "" : `: ${printable(restore.failureReason)}`;
  return `restore from backup ${printable(restore.backupId)}: ${printable(restore.state)}${reason}`;
}

/** Asks `probe` until it answers something, or the user stops waiting (Ctrl-C). */
async function pollUntil<Result>(io: CliIo, what: string, probe: () => Promise<Result | undefined>): Promise<Result> {
  for (;;) {
    const result = await probe();
    if (result !== undefined) return result;
    if (io.shutdownSignal.aborted) throw new Interrupted(`stopped waiting; ${what} goes on`);
    await sleepUnlessInterrupted(POLL_INTERVAL_MS, io.shutdownSignal);
  }
}

/** Registers `flowplane clusters backups …` under the `clusters` command. */
export function registerClusterBackupsCommands(clusters: Command, io: CliIo): void {
  const backups = clusters
    .command("backups")
    .description("List, take, delete and restore a cluster's backups (Administration API, scope backups).");

  const common = (command: Command): Command =>
    command
      .requiredOption("--cluster <id>", "id of the cluster")
      .option("--json", "print the answer as JSON")
      .option("--audience <audience>", "audience of the Administration API", adminAudience);

  common(backups.command("list").description("List the cluster's backups, newest first.")).action(
    async (options: ClusterBackupOptions) => {
      const list = await createAdminClient(io, options).listBackups(options.cluster);
      io.stdout(options.json === true ? `${printableJson(list)}\n` : `${formatClusterBackups(list)}\n`);
    },
  );

  common(
    backups
      .command("take")
      .description("Start a backup of the cluster (every partition at one consistent cut).")
      .option("--wait", "wait until the backup is Complete or Failed"),
  ).action(async (options: ClusterBackupOptions) => {
    const client = createAdminClient(io, options);
    let backup = await client.createBackup(options.cluster);
    if (options.wait === true) {
      const id = backup.uuid;
      backup = await pollUntil(io, `backup ${id}`, async () => {
        const found = (await client.listBackups(options.cluster)).find((entry) => entry.uuid === id);
        if (found === undefined) throw new Error(printable(`backup ${id} is no longer listed`));
        return found.status === "In progress" ? undefined : found;
      });
    }
    io.stdout(options.json === true ? `${printableJson(backup)}\n` : `${formatClusterBackups([backup])}\n`);
    if (backup.status === "Failed") throw new Error(printable(`backup ${backup.uuid} failed`));
  });

  const schedule = backups
    .command("schedule")
    .description("Take backups on a UTC cron schedule (at least 15 minutes apart), keeping the newest complete ones.");

  common(
    schedule
      .command("set")
      .description("Set the cluster's backup schedule, replacing any.")
      .argument("<cron>", 'a 5-field cron expression in UTC, e.g. "0 3 * * *"')
      .requiredOption("--keep <count>", "how many complete backups to keep; older ones are deleted", parseKeep),
  ).action(async (cron: string, options: ClusterBackupOptions) => {
    const set = await createAdminClient(io, options).setBackupSchedule(options.cluster, cron, options.keep ?? 1);
    io.stdout(options.json === true ? `${printableJson(set)}\n` : `${formatSchedule(set)}\n`);
  });

  common(schedule.command("get").description("Show the cluster's backup schedule.")).action(
    async (options: ClusterBackupOptions) => {
      const current = await createAdminClient(io, options).getBackupSchedule(options.cluster);
      io.stdout(options.json === true ? `${printableJson(current)}\n` : `${formatSchedule(current)}\n`);
    },
  );

  common(schedule.command("delete").description("Remove the cluster's backup schedule (its backups stay).")).action(
    async (options: ClusterBackupOptions) => {
      await createAdminClient(io, options).deleteBackupSchedule(options.cluster);
      io.stdout(
        options.json === true
          ? `${printableJson({ clusterId: options.cluster, schedule: null }, 0)}\n`
          : "backup schedule removed\n",
      );
    },
  );

  common(
    backups
      .command("delete")
      .description("Delete a backup from the cluster's backup store.")
      .argument("<backupId>", "id of the backup", parseBackupId),
  ).action(async (backupId: bigint, options: ClusterBackupOptions) => {
    const deleted = await createAdminClient(io, options).deleteBackup(options.cluster, String(backupId));
    io.stdout(options.json === true ? `${printableJson(deleted)}\n` : `backup ${backupId} deleted\n`);
  });

  common(
    backups.command("restores").description("List the cluster's latest restores, newest first, with their state."),
  ).action(async (options: ClusterBackupOptions) => {
    const restores = await createAdminClient(io, options).listRestores(options.cluster);
    if (options.json === true) {
      io.stdout(`${printableJson(restores)}\n`);
      return;
    }
    const lines = restores.map((restore) => `${printable(restore.created)}  ${formatRestore(restore)}`);
    io.stdout(lines.length === 0 ? "no restores\n" : `${lines.join("\n")}\n`);
  });

  common(
    backups
      .command("restore")
      .description(
        "Restore the cluster from a Complete backup: it is stopped, every broker restored, and started again, with " +
          "the brokers, partitions and replication factor it has now. Its current data is kept until the restored " +
          "cluster is ready, and put back if the restore fails. Refused while a cluster change is pending.",
      )
      .argument("<backupId>", "id of the backup", parseBackupId)
      .option("--wait", "wait until the restore is COMPLETED or FAILED"),
  ).action(async (backupId: bigint, options: ClusterBackupOptions) => {
    const client = createAdminClient(io, options);
    let restore = await client.restoreBackup(options.cluster, String(backupId));
    if (options.wait === true) {
      restore = await pollUntil(io, `the restore from backup ${backupId}`, async () => {
        const current = await client.getRestore(options.cluster, String(backupId));
        return current.state === "COMPLETED" || current.state === "FAILED" ? current : undefined;
      });
    }
    io.stdout(options.json === true ? `${printableJson(restore)}\n` : `${formatRestore(restore)}\n`);
    if (restore.state === "FAILED") throw new Error(`the restore from backup ${backupId} failed`);
  });
}
