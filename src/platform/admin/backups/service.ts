/**
 * Backups of clusters through the Administration API, in the SaaS shape: the platform takes, lists and deletes them
 * through the cluster's management API (`/actuator/backups`) with a token it signs for itself, and restores a
 * cluster from one through its provisioner (stop, restore every broker, start). The management API keeps the
 * backups themselves; the platform keeps only the restores it ran, so their state outlives the request.
 *
 * A restore keeps the cluster's current shape, which scaling may have changed since its creation: the cluster's
 * configuration is read from its management API (`GET /actuator/cluster`) just before it is stopped, and every broker
 * it lists is restored with the partitions it gives it. So a restore never meets a change halfway, none may be
 * pending (nor a scale request of the platform being handled, nor a backup being written) when it starts, and no
 * scale request is taken while it runs. The configuration must also be a settled shape (`restorableShapeProblem`,
 * the check `flowplane restore` makes): a change cancelled halfway leaves brokers or replicas that are not ACTIVE.
 *
 * Backups and restores of one cluster exclude each other in this process for their whole run: no backup is taken
 * (409, the restore named) and no scheduled run starts while a restore runs, and no restore starts while the
 * platform takes a backup or runs a schedule's deletions, so a schedule never deletes the backup being restored. A
 * backup being deleted through the API is not restored meanwhile, nor deleted while it is restored (409 both ways).
 *
 * A restore's state follows the provisioner's steps durably: IN_PROGRESS is on disk before the cluster's data moves,
 * COMPLETED before the previous data is deleted, and once the provisioner has committed the restore (it calls
 * `onRestored`) nothing records it FAILED.
 */
import { randomUUID } from "node:crypto";
import type { Kysely, Selectable } from "kysely";
import type { Logger } from "pino";
import type { ApiClientOptions, TokenSource } from "../../../client/api.js";
import { BackupsClient, type Backup as ManagementBackup } from "../../../client/backups.js";
import { ClusterManagementClient, type ClusterStatus } from "../../../client/cluster.js";
import { ApiError } from "../../../client/errors.js";
import type { HttpOptions } from "../../../client/http.js";
import { restorableShapeProblem } from "../../../client/restorable-shape.js";
import { conflict, invalidRequest, notFound, ServiceError } from "../../../http/errors.js";
import { MAX_INT64, parseNonNegativeInt64 } from "../../../json/int64.js";
import { monotonicNowMs } from "../../../time/monotonic.js";
import type { RestoreTarget } from "../../provisioner/provisioner.js";
import { makeCommitsDurable } from "../../store/database.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { logBackgroundFailure } from "../../store/unavailable.js";
import type { ActivityService } from "../activity/service.js";
import { type ClusterDirectory, type ClusterSummary, requireCluster } from "../cluster-directory.js";
import { CronSyntaxError, nextRun, parseCron, shortestIntervalMinutes } from "./cron.js";

/** States of a backup as the Administration API shows them. */
export const backupStatuses = ["In progress", "Complete", "Failed"] as const;

/** One backup state. */
export type BackupStatus = (typeof backupStatuses)[number];

/** A backup as the Administration API shows it. */
export interface Backup {
  /** The backup's id on the cluster's management API, in decimal. */
  uuid: string;
  name: string;
  /** When its first partition took the checkpoint (ISO-8601), or null when no partition reported it. */
  created: string | null;
  /** When its last part was written or failed (ISO-8601), or null while it is in progress. */
  completed: string | null;
  status: BackupStatus;
}

/** States of a restore, in the order a successful one goes through them. */
export const restoreStates = ["PENDING", "VALIDATING", "IN_PROGRESS", "COMPLETED", "FAILED"] as const;

/** One restore state. */
export type RestoreState = (typeof restoreStates)[number];

/** A restore of a cluster from one of its backups. */
export interface Restore {
  uuid: string;
  backupId: string;
  state: RestoreState;
  /** Why it failed; null unless FAILED. */
  failureReason: string | null;
  created: string;
  updated: string;
}

/** Most restores `GET /clusters/{clusterId}/restores` lists. */
export const MAX_LISTED_RESTORES = 20;

/** A `cluster_restores` row in the Administration API's shape. */
function restoreOf(row: Selectable<PlatformDatabase["cluster_restores"]>): Restore {
  return {
    uuid: row.id,
    backupId: row.backup_id,
    state: row.state as RestoreState,
    failureReason: row.failure_reason,
    created: row.created_at,
    updated: row.updated_at,
  };
}

/** A cluster's backup schedule as the Administration API shows it. */
export interface BackupSchedule {
  /** A 5-field cron expression in UTC. */
  cron: string;
  /** How many complete backups are kept: older backups are deleted after each scheduled backup. */
  keep: number;
  /** When the schedule takes its next backup (ISO-8601); a time past is a run due, which the next check takes. */
  nextRun: string | null;
  /** When it last ran (took a backup, or tried to), or null before its first run. */
  lastRun: string | null;
  /** Why the last run could not start a backup, or null when it did (or none ran yet). */
  lastFailure: string | null;
  /** When the last run failed (ISO-8601), or null when it started a backup (or none ran yet). */
  lastFailureAt: string | null;
  /** How many runs in a row could not start a backup: failed scheduled runs and their retries. */
  consecutiveFailures: number;
  /**
   * When a run that could not start a backup is tried again, or null: none failed, the retry runs now (`retrying`),
   * or `nextRun` comes first.
   */
  retryAt: string | null;
  /** Whether a run is trying again right now after the last failure (a retry, or the next scheduled run). */
  retrying: boolean;
}

/** Shortest time between two scheduled backups. */
export const MIN_SCHEDULE_INTERVAL_MINUTES = 15;

/** Most complete backups a schedule keeps. */
export const MAX_KEPT_BACKUPS = 100;

/** The `service` and `userId` of the activity entries of scheduled backups and of the deletions that follow them. */
export const backupScheduleActivityService = "backup-schedule";

/**
 * Pauses before a run that could not start a backup is tried again, by how many attempts of the same scheduled run
 * failed: a cluster change under way or a moment without the cluster refuses a run, and a daily schedule must not lose
 * its backup to that. The last pause repeats, until the schedule's next run comes first, which starts again from the
 * first pause.
 */
const SCHEDULE_RETRY_PAUSES_MINUTES = [1, 2, 4, 8, 15];

/**
 * How long a scheduled run may take: at most three calls of `MANAGEMENT_TIMEOUT_MS` (the list and up to two takes)
 * and a token. One claimed longer ago without an outcome was cut short by its platform's stop, and is not shown as
 * trying again.
 */
const SCHEDULE_RUN_LONGEST_MS = 5 * 60_000;

/** How often the schedules are checked for a due run. */
const SCHEDULE_CHECK_INTERVAL_MS = 30_000;

/** How far a schedule's last run may lie ahead of this platform's clock before it counts as a step of the clock. */
const SCHEDULE_CLOCK_STEP_MS = 60_000;

/**
 * The time a schedule's next run is counted from: its last run (or change). One recorded well ahead of now was
 * recorded before the wall clock stepped back, and waiting for the clock to catch up with it would skip runs for as
 * long as the step: the schedule then goes on from the previous check. A last run only a little ahead is another
 * platform replica's clock running ahead of this one's, and counting from it keeps the two from running it twice.
 */
function scheduleReference(recordedMs: number, nowMs: number): Date {
  return new Date(recordedMs > nowMs + SCHEDULE_CLOCK_STEP_MS ? nowMs - SCHEDULE_CHECK_INTERVAL_MS : recordedMs);
}

/**
 * When an attempt that failed at `failedAt`, the `runFailures`-th failed attempt of its scheduled run, is tried again:
 * after its pause (`SCHEDULE_RETRY_PAUSES_MINUTES`), or never (null) when the schedule's next run comes first.
 */
function scheduleRetryAt(schedule: ReturnType<typeof parseCron>, failedAt: Date, runFailures: number): Date | null {
  const pauses = SCHEDULE_RETRY_PAUSES_MINUTES;
  const pauseMinutes = pauses[Math.min(runFailures, pauses.length) - 1] ?? pauses[pauses.length - 1]!;
  const retryAt = new Date(failedAt.getTime() + pauseMinutes * 60_000);
  const next = nextRun(schedule, failedAt);
  return next !== undefined && next <= retryAt ? null : retryAt;
}

/**
 * Whether a retry set for `retryMs` is due at `nowMs`: once its time came, or at once when it lies further ahead than
 * any pause, which only a wall clock stepped back since the failure makes (waiting would put off the retry by the step).
 */
function retryIsDue(retryMs: number, nowMs: number): boolean {
  const longestPauseMs = Math.max(...SCHEDULE_RETRY_PAUSES_MINUTES) * 60_000;
  return retryMs <= nowMs || retryMs > nowMs + longestPauseMs + SCHEDULE_CLOCK_STEP_MS;
}

/** Restores a provisioned cluster's brokers from a backup: the clusters service answers it through its provisioner. */
export interface ClusterRestorer {
  /**
   * Stops the cluster, restores every broker of `target` from backup `backupId`, starts it and resolves once it is
   * ready again; on failure its previous data is back in place and it is started again before the error is thrown.
   * `onRestored` is awaited once the restored cluster is ready and its previous data can no longer come back, before
   * that data is deleted: the restore is recorded as COMPLETED there, so a platform that stops while the previous
   * data is being deleted does not report it failed at its next start.
   */
  restoreFromBackup(
    organizationId: string,
    clusterId: string,
    backupId: bigint,
    target: RestoreTarget,
    onRestored: () => Promise<void>,
  ): Promise<void>;
  /**
   * Whether a restore of the cluster was committed (the restored data stays) though the platform stopped before it
   * was recorded: asked at start, before the clusters are launched.
   */
  restoreCommitted?(clusterId: string): Promise<boolean>;
}

/** A restore running in this process. */
interface RunningRestore {
  readonly restoreId: string;
  readonly backupId: bigint;
  /** Settles when the restore has ended, however it ended. */
  done: Promise<void>;
}

/** Options of `BackupService`. */
export interface BackupServiceOptions {
  database: Kysely<PlatformDatabase>;
  clusters: ClusterDirectory;
  restorer: ClusterRestorer;
  /** Token source for calls to one cluster's management API (the platform's own tokens for that cluster). */
  tokensFor: (organizationId: string, clusterId: string) => TokenSource;
  logger: Logger;
  /** Where scheduled backups and their deletions are recorded (changes through the API record themselves). */
  activity?: ActivityService;
  /**
   * Why the platform is changing the cluster's brokers now (a scale request being handled, brokers being stopped
   * after a change), or undefined: a restore does not start meanwhile.
   */
  scalingInProgress?: (clusterId: string) => string | undefined;
  now?: () => Date;
  /** This process's monotonic clock, in milliseconds (default `monotonicNowMs`; tests step it). */
  monotonicNowMs?: () => number;
  /** Transport of the calls to the management APIs (tests). */
  http?: HttpOptions;
}

/** The states of a restore that has not ended: the only ones a restore's state moves from. */
const UNFINISHED_RESTORE_STATES: readonly RestoreState[] = ["PENDING", "VALIDATING", "IN_PROGRESS"];

/** How many times a committed restore's COMPLETED is written before the platform's next start is left to record it. */
const COMPLETED_RECORD_ATTEMPTS = 3;

/** Wait before recording a committed restore again, doubled at each further attempt. */
const COMPLETED_RECORD_RETRY_DELAY_MS = 200;

/** Longest failure reason kept: it comes from a cluster, whose answers are bounded by nothing the platform controls. */
const MAX_FAILURE_REASON_LENGTH = 1_000;

/** Backup ids the Administration API accepts in paths: what the management API accepts (0..2^63 − 1), in decimal. */
export const BACKUP_ID_PATTERN = "^(0|[1-9][0-9]{0,18})$";

/** How long a call to a cluster's management API may take before the platform gives up on it (502). */
const MANAGEMENT_TIMEOUT_MS = 30_000;

/**
 * Largest answer read from a cluster's management API. The platform lists backups in summary (one or two parts each,
 * at most 1,000 backups: under a megabyte), and one backup's status holds every partition's part (about 230 bytes
 * each, 230 KB at the 1,000 partitions a cluster may have).
 */
const MAX_MANAGEMENT_RESPONSE_BYTES = 8 * 1024 * 1024;

/** Takes, lists, deletes and restores backups of clusters; see the module comment. */
export class BackupService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly now: () => Date;
  /** Restores running in this process, by cluster id: at most one per cluster. */
  private readonly running = new Map<string, RunningRestore>();
  /**
   * Backups being taken and scheduled runs under way in this process, by cluster id (how many): a restore of the
   * cluster does not start meanwhile.
   */
  private readonly backupsUnderWay = new Map<string, number>();
  /** Deletions of backups through the API under way in this process (`deletionKey`): those are not restored. */
  private readonly deletionsUnderWay = new Map<string, number>();
  private scheduleTimer: NodeJS.Timeout | undefined;
  private scheduleCheck: Promise<void> | undefined;
  /**
   * Scheduled runs claimed and not ended, by cluster id: the claim (`last_run_at`) and when this process first saw it
   * unended, on its monotonic clock. Whether a run was cut short is judged from how long this process has watched it
   * stay unended, never from the claim's time: that is another replica's wall clock, which may run ahead of this
   * one's, or this one's before it stepped.
   */
  private readonly unendedRuns = new Map<string, { lastRunAt: string; firstSeenMs: number }>();
  private readonly monotonicNowMs: () => number;

  constructor(private readonly options: BackupServiceOptions) {
    this.database = options.database;
    this.now = options.now ?? (() => new Date());
    this.monotonicNowMs = options.monotonicNowMs ?? monotonicNowMs;
  }

  /**
   * Whether the schedule's latest run was claimed and has not ended for `SCHEDULE_RUN_LONGEST_MS` of this process's
   * watching: its platform stopped during it. Within that time another replica may still be running it; a platform
   * that just started watches for as long before it runs the run again.
   */
  private runWasCutShort(clusterId: string, lastRunAt: string | null, endedRunAt: string | null): boolean {
    if (lastRunAt === null || lastRunAt === endedRunAt) {
      this.unendedRuns.delete(clusterId);
      return false;
    }
    const nowMs = this.monotonicNowMs();
    const seen = this.unendedRuns.get(clusterId);
    if (seen === undefined || seen.lastRunAt !== lastRunAt) {
      this.unendedRuns.set(clusterId, { lastRunAt, firstSeenMs: nowMs });
      return false;
    }
    return nowMs - seen.firstSeenMs >= SCHEDULE_RUN_LONGEST_MS;
  }

  /** The cluster's backups, newest first. */
  async list(organizationId: string, clusterId: string): Promise<Backup[]> {
    const client = await this.clientFor(organizationId, clusterId);
    const backups = await this.callCluster(() => client.list({ summary: true }));
    return backups.map(presentBackup);
  }

  /**
   * Starts a backup of the cluster and answers it (In progress). Its id is the current time in milliseconds, or one
   * above the newest backup's when that is higher, since the management API takes only increasing ids.
   */
  async create(organizationId: string, clusterId: string): Promise<Backup> {
    const client = await this.clientFor(organizationId, clusterId);
    return await this.withoutRestore(clusterId, () => this.takeBackup(client, clusterId));
  }

  /**
   * Runs `work` (a backup, a schedule's run) while no restore of the cluster may start; 409 naming the restore when
   * one runs already. Checked and claimed without a wait in between, as `restore` checks and claims.
   */
  private async withoutRestore<Result>(clusterId: string, work: () => Promise<Result>): Promise<Result> {
    const restore = this.running.get(clusterId);
    if (restore !== undefined) {
      throw conflict(
        `Restore ${restore.restoreId} of cluster ${clusterId} from backup ${restore.backupId} is running; take a backup once it is COMPLETED or FAILED.`,
      );
    }
    this.backupsUnderWay.set(clusterId, (this.backupsUnderWay.get(clusterId) ?? 0) + 1);
    try {
      return await work();
    } finally {
      const left = (this.backupsUnderWay.get(clusterId) ?? 1) - 1;
      if (left === 0) this.backupsUnderWay.delete(clusterId);
      else this.backupsUnderWay.set(clusterId, left);
    }
  }

  private async takeBackup(client: BackupsClient, clusterId: string): Promise<Backup> {
    const existing = await this.callCluster(() => client.list({ summary: true }));
    // Ids may exceed 2^53 − 1 (taken on the management API directly), so they are compared as bigints.
    let highest = -1n;
    for (const backup of existing) if (backup.backupId > highest) highest = backup.backupId;
    // Backup ids are never reused and end at 2^63 − 1: the cluster would refuse the next one as malformed.
    if (highest >= MAX_INT64) throw noIdLeft(clusterId, highest);
    const nowMs = BigInt(this.now().getTime());
    const backupId = nowMs > highest ? nowMs : highest + 1n;
    const taken = await this.callCluster(() => takeAboveUsedIds(client, clusterId, backupId), backupId);
    this.options.logger.info({ clusterId, backupId: taken.backupId }, "backup started");
    return presentBackup(taken);
  }

  /**
   * Deletes a backup from the cluster's backup store and answers what it was; 409 while it is restored. A restore of
   * it does not start until the deletion has ended (checked and claimed without a wait in between, as `restore` does).
   */
  async delete(organizationId: string, clusterId: string, backupId: string): Promise<Backup> {
    const id = parseBackupId(backupId);
    const client = await this.clientFor(organizationId, clusterId);
    const restore = this.running.get(clusterId);
    if (restore?.backupId === id) {
      throw conflict(
        `Backup ${id} is being restored (restore ${restore.restoreId}); delete it once the restore is COMPLETED or FAILED.`,
      );
    }
    const key = deletionKey(clusterId, id);
    this.deletionsUnderWay.set(key, (this.deletionsUnderWay.get(key) ?? 0) + 1);
    try {
      const deleted = await this.callCluster(() => client.delete(id), id);
      this.options.logger.info({ clusterId, backupId: id }, "backup deleted through the Administration API");
      return presentBackup(deleted);
    } finally {
      const left = (this.deletionsUnderWay.get(key) ?? 1) - 1;
      if (left === 0) this.deletionsUnderWay.delete(key);
      else this.deletionsUnderWay.set(key, left);
    }
  }

  /**
   * Starts restoring the cluster from a backup and answers the restore (PENDING); it then goes through VALIDATING
   * (the backup must be Complete and hold as many partitions as the cluster) and IN_PROGRESS (the cluster is stopped,
   * restored broker by broker into its current shape and started) to COMPLETED or FAILED. 409 while another restore
   * of the cluster runs, while a configuration change is pending or a scale request of the platform is handled, while
   * a backup is being written or taken, while that backup is being deleted, and while the configuration is no settled
   * shape (a broker or replica not ACTIVE, partitions or routing counts not 1..P); 502 when the cluster's management
   * API does not answer.
   */
  async restore(organizationId: string, clusterId: string, backupId: string): Promise<Restore> {
    const id = parseBackupId(backupId);
    const cluster = await requireCluster(this.options.clusters, organizationId, clusterId);
    const running = this.running.get(clusterId);
    if (running !== undefined) {
      throw conflict(
        `Restore ${running.restoreId} of cluster ${clusterId} is running; wait until it is COMPLETED or FAILED.`,
      );
    }
    const scaling = this.options.scalingInProgress?.(clusterId);
    if (scaling !== undefined) throw conflict(scaling);
    if (this.backupsUnderWay.has(clusterId)) {
      throw conflict(
        `A backup of cluster ${clusterId} is being taken (or its schedule's older backups deleted); try again once it has started.`,
      );
    }
    if (this.deletionsUnderWay.has(deletionKey(clusterId, id))) {
      throw conflict(`Backup ${id} of cluster ${clusterId} is being deleted; it cannot be restored.`);
    }
    // Claimed before the first wait, so a scale request or a backup that arrives meanwhile sees the restore and is
    // refused.
    let releaseClaim: () => void = () => undefined;
    const claim = new Promise<void>((resolveClaim) => {
      releaseClaim = resolveClaim;
    });
    const restoreId = randomUUID();
    const entry: RunningRestore = { restoreId, backupId: id, done: claim };
    this.running.set(clusterId, entry);
    const timestamp = this.now().toISOString();
    try {
      const client = this.clusterClient(organizationId, cluster);
      requireRestorable(clusterId, await this.callCluster(() => client.status()));
      // A backup the cluster does not know is a 404 now, not a restore recorded only to fail: its id was mistyped.
      // Whether it is COMPLETED and fits the cluster is judged in VALIDATING, right before the cluster stops.
      const backups = this.managementClient(organizationId, cluster);
      await this.callCluster(() => backups.status(id), id);
      await this.database
        .insertInto("cluster_restores")
        .values({
          id: restoreId,
          cluster_id: clusterId,
          backup_id: String(id),
          state: "PENDING",
          failure_reason: null,
          created_at: timestamp,
          updated_at: timestamp,
        })
        .execute();
    } catch (error) {
      this.running.delete(clusterId);
      releaseClaim();
      throw error;
    }
    entry.done = this.runRestore(organizationId, cluster, id, restoreId).finally(() => this.running.delete(clusterId));
    releaseClaim();
    return {
      uuid: restoreId,
      backupId: String(id),
      state: "PENDING",
      failureReason: null,
      created: timestamp,
      updated: timestamp,
    };
  }

  /** The latest restore of the cluster from that backup; 404 when there was none. */
  async restoreState(organizationId: string, clusterId: string, backupId: string): Promise<Restore> {
    const id = parseBackupId(backupId);
    await requireCluster(this.options.clusters, organizationId, clusterId);
    const row = await this.database
      .selectFrom("cluster_restores")
      .selectAll()
      .where("cluster_id", "=", clusterId)
      .where("backup_id", "=", String(id))
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .executeTakeFirst();
    if (row === undefined) throw notFound("restore of backup", String(id));
    return restoreOf(row);
  }

  /**
   * The cluster's latest restores, newest first (at most `MAX_LISTED_RESTORES`), so a client that did not start a
   * restore, or lost track of it (a console reloaded), finds the one running.
   */
  async listRestores(organizationId: string, clusterId: string): Promise<Restore[]> {
    await requireCluster(this.options.clusters, organizationId, clusterId);
    const rows = await this.database
      .selectFrom("cluster_restores")
      .selectAll()
      .where("cluster_id", "=", clusterId)
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .limit(MAX_LISTED_RESTORES)
      .execute();
    return rows.map(restoreOf);
  }

  /**
   * Sets the cluster's backup schedule (replacing any): a UTC cron expression whose runs are at least 15 minutes
   * apart, and how many complete backups to keep. 400 naming `body/cron` for an expression that is invalid, runs
   * more often, or never runs.
   */
  async setSchedule(organizationId: string, clusterId: string, cron: string, keep: number): Promise<BackupSchedule> {
    let schedule: ReturnType<typeof parseCron>;
    try {
      schedule = parseCron(cron);
    } catch (error) {
      if (!(error instanceof CronSyntaxError)) throw error;
      throw invalidRequest(`body/cron ${error.message}`, {
        errors: [{ location: "body/cron", message: error.message }],
      });
    }
    const intervalMinutes = shortestIntervalMinutes(schedule);
    if (intervalMinutes < MIN_SCHEDULE_INTERVAL_MINUTES) {
      throw invalidRequest(
        `body/cron runs ${intervalMinutes} minutes apart at its shortest; scheduled backups must be at least ${MIN_SCHEDULE_INTERVAL_MINUTES} minutes apart`,
      );
    }
    const now = this.now();
    if (nextRun(schedule, now) === undefined) throw invalidRequest("body/cron never runs (no such date)");
    if (!Number.isSafeInteger(keep) || keep < 1 || keep > MAX_KEPT_BACKUPS) {
      throw invalidRequest(`body/keep must be an integer from 1 to ${MAX_KEPT_BACKUPS}`);
    }
    await requireCluster(this.options.clusters, organizationId, clusterId);
    const values = {
      organization_id: organizationId,
      cron: schedule.expression,
      keep_count: keep,
      updated_at: now.toISOString(),
      last_run_at: null,
      consecutive_failures: 0,
      last_failure: null,
      retry_at: null,
      run_failures: 0,
      last_failure_at: null,
      ended_run_at: null,
    };
    await this.database
      .insertInto("cluster_backup_schedules")
      .values({ cluster_id: clusterId, ...values })
      .onConflict((conflict) => conflict.column("cluster_id").doUpdateSet(values))
      .execute();
    return await this.getSchedule(organizationId, clusterId);
  }

  /** The cluster's backup schedule; 404 when it has none. */
  async getSchedule(organizationId: string, clusterId: string): Promise<BackupSchedule> {
    await requireCluster(this.options.clusters, organizationId, clusterId);
    const row = await this.database
      .selectFrom("cluster_backup_schedules")
      .selectAll()
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    if (row === undefined) throw notFound("backup schedule of cluster", clusterId);
    // Counted as the checks count it: a run that is due and not taken yet (the next check takes it, within
    // `SCHEDULE_CHECK_INTERVAL_MS`) is the next run, not the one after it.
    const nowMs = this.now().getTime();
    const next = nextRun(parseCron(row.cron), scheduleReference(Date.parse(row.last_run_at ?? row.updated_at), nowMs));
    // A run claimed after the last failure, not long ago, has not recorded its outcome yet: it is trying again now.
    // Failures recorded before migration 038 have no time and show no attempt under way.
    const lastRunMs = row.last_run_at === null ? null : Date.parse(row.last_run_at);
    const retrying =
      row.last_failure !== null &&
      row.retry_at === null &&
      row.last_failure_at !== null &&
      lastRunMs !== null &&
      lastRunMs > Date.parse(row.last_failure_at) &&
      nowMs - lastRunMs < SCHEDULE_RUN_LONGEST_MS;
    return {
      cron: row.cron,
      keep: row.keep_count,
      nextRun: next?.toISOString() ?? null,
      lastRun: row.last_run_at,
      lastFailure: row.last_failure,
      lastFailureAt: row.last_failure_at,
      consecutiveFailures: row.consecutive_failures,
      retryAt: row.retry_at,
      retrying,
    };
  }

  /** Removes the cluster's backup schedule (its backups stay); 404 when it has none. */
  async deleteSchedule(organizationId: string, clusterId: string): Promise<void> {
    await requireCluster(this.options.clusters, organizationId, clusterId);
    const result = await this.database
      .deleteFrom("cluster_backup_schedules")
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound("backup schedule of cluster", clusterId);
  }

  /** Checks the schedules every half minute from now on, until `close`. */
  startScheduler(): void {
    if (this.scheduleTimer !== undefined) return;
    this.scheduleTimer = setInterval(() => {
      if (this.scheduleCheck !== undefined) return;
      this.scheduleCheck = this.runDueSchedules()
        .catch((error: unknown) =>
          logBackgroundFailure(this.options.logger, error, {}, "could not check the backup schedules"),
        )
        .finally(() => {
          this.scheduleCheck = undefined;
        });
    }, SCHEDULE_CHECK_INTERVAL_MS);
    this.scheduleTimer.unref();
  }

  /**
   * Takes the backups whose scheduled time has come (one per schedule, however many runs were missed while the
   * platform was down), or whose failed run is to be tried again (`SCHEDULE_RETRY_PAUSES_MINUTES`), and deletes the
   * backups beyond each schedule's newest complete ones.
   */
  async runDueSchedules(): Promise<void> {
    const now = this.now();
    const schedules = await this.database.selectFrom("cluster_backup_schedules").selectAll().execute();
    for (const row of schedules) {
      const since = scheduleReference(Date.parse(row.last_run_at ?? row.updated_at), now.getTime());
      const due = nextRun(parseCron(row.cron), since);
      const retryDue = row.retry_at !== null && retryIsDue(Date.parse(row.retry_at), now.getTime());
      const cutShort = this.runWasCutShort(row.cluster_id, row.last_run_at, row.ended_run_at);
      const scheduledDue = due !== undefined && due <= now;
      if (!retryDue && !cutShort && !scheduledDue) continue;
      if (cutShort && !scheduledDue && !retryDue && (await this.recordEndIfBackupTaken(row))) continue;
      if (cutShort && !scheduledDue) {
        this.options.logger.warn(
          { clusterId: row.cluster_id, lastRun: row.last_run_at },
          "a scheduled backup run was cut short by its platform's stop; it is run again now",
        );
      }
      const restore = this.running.get(row.cluster_id);
      if (restore !== undefined) {
        // Left due: the run is taken at the first check after the restore.
        this.options.logger.info(
          { clusterId: row.cluster_id, restoreId: restore.restoreId },
          "a scheduled backup waits: a restore of the cluster runs",
        );
        continue;
      }
      try {
        await this.withoutRestore(row.cluster_id, () => this.claimAndRunSchedule(row, !scheduledDue));
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        this.options.logger.error(
          { clusterId: row.cluster_id, reason: reason.slice(0, MAX_FAILURE_REASON_LENGTH) },
          "a scheduled backup failed",
        );
      }
    }
  }

  /**
   * Records the schedule's latest run as ended when the cluster holds a backup taken since it was claimed (backup ids
   * are at least the epoch milliseconds of their taking): the run started its backup, and its platform stopped before
   * recording so, or ran a version before migration 039, which records no end. Such a run is not run again. False
   * when no such backup is known, the cluster not answering included: the run is then run again.
   */
  private async recordEndIfBackupTaken(
    row: Selectable<PlatformDatabase["cluster_backup_schedules"]>,
  ): Promise<boolean> {
    if (row.last_run_at === null) return false;
    const claimedAtMs = BigInt(Date.parse(row.last_run_at));
    let backups: readonly { backupId: bigint }[];
    try {
      const client = await this.clientFor(row.organization_id, row.cluster_id);
      backups = await this.callCluster(() => client.list({ summary: true }));
    } catch {
      return false;
    }
    const taken = backups.find((backup) => backup.backupId >= claimedAtMs);
    if (taken === undefined) return false;
    await this.database
      .updateTable("cluster_backup_schedules")
      .set({ ended_run_at: row.last_run_at })
      .where("cluster_id", "=", row.cluster_id)
      .where("last_run_at", "=", row.last_run_at)
      .execute();
    this.unendedRuns.delete(row.cluster_id);
    this.options.logger.info(
      { clusterId: row.cluster_id, lastRun: row.last_run_at, backupId: String(taken.backupId) },
      "a scheduled run whose end was not recorded had taken its backup; it is not run again",
    );
    return true;
  }

  /**
   * Claims a due run of the schedule `row` and runs it, a scheduled run or (`retry`) the retry of a failed one;
   * nothing when the schedule changed or ran meanwhile. A run that cannot start its backup is recorded with its reason
   * and tried again after a pause; once the backup started, a failure to delete older backups is left to the next run,
   * which deletes them as well.
   */
  private async claimAndRunSchedule(
    row: Selectable<PlatformDatabase["cluster_backup_schedules"]>,
    retry: boolean,
  ): Promise<void> {
    // Claimed by moving its last run, conditionally: a schedule changed or run meanwhile is left alone. At the time
    // of the claim, not of the check: the schedules before this one in the check may have taken minutes.
    const ranAt = this.now().toISOString();
    let claim = this.database
      .updateTable("cluster_backup_schedules")
      .set({ last_run_at: ranAt, retry_at: null })
      .where("cluster_id", "=", row.cluster_id)
      .where("updated_at", "=", row.updated_at);
    claim =
      row.last_run_at === null
        ? claim.where("last_run_at", "is", null)
        : claim.where("last_run_at", "=", row.last_run_at);
    if (Number((await claim.executeTakeFirst()).numUpdatedRows) === 0) return;
    const { organization_id: organizationId, cluster_id: clusterId } = row;
    // Only this run's own record: a schedule set again meanwhile starts afresh.
    const thisRun = this.database
      .updateTable("cluster_backup_schedules")
      .where("cluster_id", "=", clusterId)
      .where("updated_at", "=", row.updated_at)
      .where("last_run_at", "=", ranAt);
    let client: BackupsClient;
    let taken: Backup;
    try {
      client = await this.clientFor(organizationId, clusterId);
      taken = await this.takeBackup(client, clusterId);
    } catch (error) {
      const failures = row.consecutive_failures + 1;
      const runFailures = retry ? row.run_failures + 1 : 1;
      const reason = (error instanceof Error ? error.message : String(error)).slice(0, MAX_FAILURE_REASON_LENGTH);
      // Counted from the failure, not from the check that started the run: the cluster may take minutes to refuse.
      const failedAt = this.now();
      const retryAt = scheduleRetryAt(parseCron(row.cron), failedAt, runFailures);
      await thisRun
        .set({
          consecutive_failures: failures,
          run_failures: runFailures,
          last_failure: reason,
          last_failure_at: failedAt.toISOString(),
          retry_at: retryAt?.toISOString() ?? null,
          ended_run_at: ranAt,
        })
        .execute();
      this.options.logger.warn(
        { clusterId, consecutiveFailures: failures, retryAt: retryAt?.toISOString() ?? null, reason },
        "a scheduled backup could not start; it is tried again",
      );
      return;
    }
    await thisRun
      .set({ consecutive_failures: 0, run_failures: 0, last_failure: null, last_failure_at: null, ended_run_at: ranAt })
      .execute();
    await this.recordScheduled(organizationId, `${clusterId}/${taken.uuid}`, "c");
    try {
      await this.deleteBeyondKept(client, organizationId, clusterId, row.keep_count);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.options.logger.warn(
        { clusterId, reason: reason.slice(0, MAX_FAILURE_REASON_LENGTH) },
        "the schedule's backup started, but older backups could not be deleted; its next run deletes them",
      );
    }
  }

  /** Deletes the backups beyond the `keep` newest complete ones, leaving those still being written. */
  private async deleteBeyondKept(
    client: BackupsClient,
    organizationId: string,
    clusterId: string,
    keep: number,
  ): Promise<void> {
    // Newest first: everything after the `keep` newest complete backups goes, except what is still being written.
    let complete = 0;
    for (const backup of await this.callCluster(() => client.list({ summary: true }))) {
      if (backup.state === "IN_PROGRESS") continue;
      if (complete >= keep) {
        await this.callCluster(() => client.delete(backup.backupId), backup.backupId);
        await this.recordScheduled(organizationId, `${clusterId}/${backup.backupId}`, "d");
        this.options.logger.info({ clusterId, backupId: backup.backupId }, "older backup deleted by the schedule");
        continue;
      }
      if (backup.state === "COMPLETED") complete += 1;
    }
  }

  private async recordScheduled(organizationId: string, entityId: string, auditType: "c" | "d"): Promise<void> {
    await this.options.activity?.record({
      organizationId,
      service: backupScheduleActivityService,
      entity: "cluster-backup",
      entityId,
      auditType,
      userId: backupScheduleActivityService,
    });
  }

  /** Stops checking the schedules and waits for the check and the restores under way. */
  async close(): Promise<void> {
    clearInterval(this.scheduleTimer);
    this.scheduleTimer = undefined;
    await this.scheduleCheck;
    await this.whenIdle();
  }

  /**
   * Ends the restores that were running when the platform last stopped: nothing carries them on. One the provisioner
   * had committed (the platform stopped between the commit and its record) is COMPLETED, whatever state it was
   * recorded in (a power loss may have lost the write of IN_PROGRESS); the others are FAILED, and the provisioner puts
   * their previous data back when it next starts the cluster. Called at start before the clusters are launched, since
   * a launch deletes what a committed restore left to delete: the states are durable before this returns.
   */
  async failInterruptedRestores(): Promise<void> {
    const interrupted = await this.database
      .selectFrom("cluster_restores")
      .select(["id", "cluster_id", "state"])
      .where("state", "in", [...UNFINISHED_RESTORE_STATES])
      .execute();
    if (interrupted.length === 0) return;
    for (const row of interrupted) {
      const committed = (await this.options.restorer.restoreCommitted?.(row.cluster_id)) === true;
      await this.database
        .updateTable("cluster_restores")
        .set({
          state: committed ? "COMPLETED" : "FAILED",
          failure_reason: committed
            ? null
            : "The platform stopped during the restore; the cluster keeps its previous data.",
          updated_at: this.now().toISOString(),
        })
        .where("id", "=", row.id)
        .where("state", "=", row.state)
        .execute();
    }
    await makeCommitsDurable(this.database);
  }

  /** Whether a restore of the cluster runs in this process (scale requests are refused meanwhile). */
  isRestoring(clusterId: string): boolean {
    return this.running.has(clusterId);
  }

  /** Waits for every restore running in this process (the platform is shutting down, or a test ends). */
  async whenIdle(): Promise<void> {
    await Promise.allSettled([...this.running.values()].map((restore) => restore.done));
  }

  /** Removes the restores and the schedule recorded for the cluster, when the cluster itself is deleted. */
  async deleteAllOf(clusterId: string): Promise<void> {
    await this.database.deleteFrom("cluster_restores").where("cluster_id", "=", clusterId).execute();
    await this.database.deleteFrom("cluster_backup_schedules").where("cluster_id", "=", clusterId).execute();
  }

  private async runRestore(
    organizationId: string,
    cluster: ClusterSummary,
    backupId: bigint,
    restoreId: string,
  ): Promise<void> {
    const logger = this.options.logger.child({ clusterId: cluster.id, backupId, restoreId });
    // Set once the provisioner has committed the restore: from then on the restored data stays, whatever fails.
    let committed = false;
    try {
      await this.setRestoreState(restoreId, "VALIDATING", null);
      const client = this.managementClient(organizationId, cluster);
      const backup = await this.callCluster(() => client.status(backupId), backupId);
      if (backup.state !== "COMPLETED") {
        const reason = backup.failureReason === null ? "" : `: ${backup.failureReason}`;
        throw invalidRequest(`backup ${backupId} is ${backup.state}, not COMPLETED${reason}`);
      }
      // Read again right before the cluster stops: this is the shape it is restored into.
      const clusterClient = this.clusterClient(organizationId, cluster);
      const status = await this.callCluster(() => clusterClient.status());
      requireRestorable(cluster.id, status);
      const partitionCount = partitionCountOf(status);
      if (backup.partitionCount !== partitionCount) {
        throw invalidRequest(
          `backup ${backupId} holds ${backup.partitionCount} partitions but the cluster has ${partitionCount}; the partition counts must be equal`,
        );
      }
      const target: RestoreTarget = {
        brokerIds: status.brokers.map((broker) => broker.id),
        configurationDocument: JSON.stringify(status),
      };
      await this.setRestoreState(restoreId, "IN_PROGRESS", null);
      // On disk before the cluster's data moves: a restore the provisioner commits is found unfinished, never gone.
      await makeCommitsDurable(this.database);
      logger.info({ brokers: target.brokerIds, partitionCount }, "restoring the cluster from a backup");
      await this.options.restorer.restoreFromBackup(organizationId, cluster.id, backupId, target, async () => {
        committed = true;
        await this.recordCompleted(restoreId, logger);
        logger.info("cluster restored from a backup");
      });
    } catch (error) {
      if (committed) {
        // The restored cluster runs on the restored data: FAILED would be false. When COMPLETED could not be
        // recorded, the provisioner keeps telling (`restoreCommitted`) until the platform's next start records it.
        logger.error(
          { err: error },
          "the restore is committed, and what followed failed; the cluster keeps the restored data",
        );
        return;
      }
      const reason = error instanceof Error ? error.message : String(error);
      logger.error({ reason: reason.slice(0, MAX_FAILURE_REASON_LENGTH) }, "the restore failed");
      try {
        await this.setRestoreState(restoreId, "FAILED", reason.slice(0, MAX_FAILURE_REASON_LENGTH));
      } catch (recordError) {
        logger.error({ err: recordError }, "could not record the restore's failure");
      }
    }
  }

  /**
   * Records a committed restore as COMPLETED, durably (the provisioner deletes the previous data next), trying again
   * a few times; throws when every attempt failed.
   */
  private async recordCompleted(restoreId: string, logger: Logger): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.setRestoreState(restoreId, "COMPLETED", null);
        await makeCommitsDurable(this.database);
        return;
      } catch (error) {
        if (attempt >= COMPLETED_RECORD_ATTEMPTS) throw error;
        logger.warn({ err: error, attempt }, "could not record the committed restore as COMPLETED; trying again");
        await new Promise((resolveWait) =>
          setTimeout(resolveWait, COMPLETED_RECORD_RETRY_DELAY_MS * 2 ** (attempt - 1)),
        );
      }
    }
  }

  /** Moves an unfinished restore to `state`; a restore that has ended keeps its state. */
  private async setRestoreState(restoreId: string, state: RestoreState, failureReason: string | null): Promise<void> {
    await this.database
      .updateTable("cluster_restores")
      .set({ state, failure_reason: failureReason, updated_at: this.now().toISOString() })
      .where("id", "=", restoreId)
      .where("state", "in", [...UNFINISHED_RESTORE_STATES])
      .execute();
  }

  private async clientFor(organizationId: string, clusterId: string): Promise<BackupsClient> {
    const cluster = await requireCluster(this.options.clusters, organizationId, clusterId);
    return this.managementClient(organizationId, cluster);
  }

  private managementClient(organizationId: string, cluster: ClusterSummary): BackupsClient {
    return new BackupsClient(this.managementOptions(organizationId, cluster));
  }

  /** A client of the cluster's configuration (`/actuator/cluster`). */
  private clusterClient(organizationId: string, cluster: ClusterSummary): ClusterManagementClient {
    return new ClusterManagementClient(this.managementOptions(organizationId, cluster));
  }

  private managementOptions(organizationId: string, cluster: ClusterSummary): ApiClientOptions {
    if (cluster.links.management === "") {
      throw conflict(`Cluster ${cluster.id} has not been placed yet; wait until it is Healthy.`);
    }
    return {
      baseUrl: cluster.links.management,
      tokenProvider: this.options.tokensFor(organizationId, cluster.id),
      http: {
        timeoutMs: MANAGEMENT_TIMEOUT_MS,
        maxResponseBytes: MAX_MANAGEMENT_RESPONSE_BYTES,
        retry: { maxRetries: 0 },
        ...this.options.http,
      },
    };
  }

  /**
   * Calls the cluster and turns its refusals into the Administration API's problems: what the cluster refuses
   * because of the backup (404, 409) keeps its reason; anything else is the cluster's trouble, a 502.
   */
  private async callCluster<Result>(call: () => Promise<Result>, backupId?: bigint): Promise<Result> {
    try {
      return await call();
    } catch (error) {
      if (error instanceof ApiError) {
        const detail = error.detail.slice(0, MAX_FAILURE_REASON_LENGTH);
        if (error.status === 404 && backupId !== undefined) throw notFound("backup", String(backupId));
        if (error.status === 409) throw conflict(detail);
        throw new ServiceError("badGateway", `The cluster's management API answered ${error.status}: ${detail}`);
      }
      if (error instanceof ServiceError) throw error;
      const message = error instanceof Error ? error.message : String(error);
      throw new ServiceError(
        "badGateway",
        `The cluster's management API could not be reached: ${message.slice(0, MAX_FAILURE_REASON_LENGTH)}`,
      );
    }
  }
}

/**
 * Takes backup `backupId`, or, when the cluster refuses it because a higher id is used already (a deleted backup's
 * or an attempted take's, which the list does not show), the id right above the one its refusal names: without that
 * step every take would be refused until the clock passed that id, which for an id taken far ahead is never.
 */
async function takeAboveUsedIds(client: BackupsClient, clusterId: string, backupId: bigint): Promise<ManagementBackup> {
  try {
    return await client.take(backupId);
  } catch (error) {
    const used = highestUsedBackupIdOf(error);
    if (used === null || used < backupId) throw error;
    if (used >= MAX_INT64) throw noIdLeft(clusterId, used);
    return client.take(used + 1n);
  }
}

/** The 409 for a cluster whose highest used backup id is the largest there is. */
function noIdLeft(clusterId: string, highest: bigint): ServiceError {
  return conflict(
    `No backup id is left above ${highest}, the largest a backup may have, on cluster ${clusterId}: backup ids only go up and are never reused.`,
  );
}

/** The highest used id a cluster's 409 to a take names (`highestUsedBackupId`), or null. */
function highestUsedBackupIdOf(error: unknown): bigint | null {
  if (!(error instanceof ApiError) || error.status !== 409) return null;
  const used = error.problem.highestUsedBackupId;
  return typeof used === "string" ? parseNonNegativeInt64(used) : null;
}

/**
 * 409 when the cluster is not in a state to be restored: a configuration change is pending (the restore would stop
 * it halfway, and the configuration it would keep is not one the cluster settled on), a backup is being written, or
 * the configuration is no shape `flowplane restore` restores into (a change cancelled halfway left a broker or a
 * replica that is not ACTIVE, or partitions or routing counts that are not 1..P).
 */
function requireRestorable(clusterId: string, status: ClusterStatus): void {
  if (status.pendingChange !== undefined) {
    throw conflict(
      `Configuration change [${status.pendingChange.id}] of cluster ${clusterId} is in progress; wait until it ends or cancel it, then restore.`,
    );
  }
  if (status.changesBlockedBy !== undefined) {
    throw conflict(
      `Cluster ${clusterId} is being backed up (${status.changesBlockedBy.slice(0, MAX_FAILURE_REASON_LENGTH)}); wait until the backup ends, then restore.`,
    );
  }
  const problem = restorableShapeProblem(status);
  if (problem !== undefined) {
    throw conflict(
      `Cluster ${clusterId} cannot be restored into its current configuration: ${problem.slice(0, MAX_FAILURE_REASON_LENGTH)}. A change cancelled halfway leaves such states; finish them with another change, then restore.`,
    );
  }
}

/** The key of a backup's deletion under way: the cluster and the backup. */
function deletionKey(clusterId: string, backupId: bigint): string {
  return `${clusterId}/${backupId}`;
}

/** How many partitions the cluster's configuration holds: the partitions its brokers host. */
function partitionCountOf(status: ClusterStatus): number {
  return new Set(status.brokers.flatMap((broker) => broker.partitions.map((partition) => partition.id))).size;
}

/** Parses a backup id of a path (the route's schema checked its shape); 400 beyond 2^63 − 1. */
function parseBackupId(value: string): bigint {
  const id = parseNonNegativeInt64(value);
  if (!new RegExp(BACKUP_ID_PATTERN).test(value) || id === null) {
    throw invalidRequest(`params/backupId must be a non-negative integer of at most ${MAX_INT64}`);
  }
  return id;
}

/** A management API backup in the Administration API's shape. */
export function presentBackup(backup: ManagementBackup): Backup {
  const created = earliest(backup.details.map((part) => part.createdAt));
  const finished = backup.state !== "IN_PROGRESS";
  return {
    uuid: String(backup.backupId),
    // Named by its id, which never changes: a name from its creation time read differently before the first
    // partition reported that time (the answer to the request that took it) and after.
    name: `backup ${backup.backupId}`,
    created,
    completed: finished ? latest(backup.details.map((part) => part.lastUpdated)) : null,
    status: backup.state === "COMPLETED" ? "Complete" : backup.state === "IN_PROGRESS" ? "In progress" : "Failed",
  };
}

function earliest(values: readonly (string | null)[]): string | null {
  const present = values.filter((value): value is string => value !== null).sort();
  return present[0] ?? null;
}

function latest(values: readonly (string | null)[]): string | null {
  const present = values.filter((value): value is string => value !== null).sort();
  return present.at(-1) ?? null;
}
