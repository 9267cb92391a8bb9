/**
 * Backups of clusters through the Administration API, in the SaaS shape: the platform takes, lists and deletes them
 * through the cluster's management API (`/actuator/backups`) with a token it signs for itself, and restores a
 * cluster from one through its provisioner (stop, restore every broker, start). The management API keeps the
 * backups themselves; the platform keeps only the restores it ran, so their state outlives the request.
 */
import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import type { TokenSource } from "../../../client/api.js";
import { BackupsClient, type Backup as ManagementBackup } from "../../../client/backups.js";
import { ApiError } from "../../../client/errors.js";
import type { HttpOptions } from "../../../client/http.js";
import { conflict, invalidRequest, notFound, ServiceError } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { type ClusterDirectory, type ClusterSummary, requireCluster } from "../cluster-directory.js";

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

/** Restores a provisioned cluster's brokers from a backup: the clusters service answers it through its provisioner. */
export interface ClusterRestorer {
  /**
   * Stops the cluster, restores every broker from backup `backupId`, starts it and resolves once it is ready again;
   * on failure its previous data is back in place and it is started again before the error is thrown.
   */
  restoreFromBackup(organizationId: string, clusterId: string, backupId: number): Promise<void>;
}

/** Options of `BackupService`. */
export interface BackupServiceOptions {
  database: Kysely<PlatformDatabase>;
  clusters: ClusterDirectory;
  restorer: ClusterRestorer;
  /** Token source for calls to one cluster's management API (the platform's own tokens for that cluster). */
  tokensFor: (organizationId: string, clusterId: string) => TokenSource;
  logger: Logger;
  now?: () => Date;
  /** Transport of the calls to the management APIs (tests). */
  http?: HttpOptions;
}

/** Longest failure reason kept: it comes from a cluster, whose answers are bounded by nothing the platform controls. */
const MAX_FAILURE_REASON_LENGTH = 1_000;

/** Backup ids the Administration API accepts in paths: what the management API accepts, in decimal. */
export const BACKUP_ID_PATTERN = "^(0|[1-9][0-9]{0,15})$";

/** How long a call to a cluster's management API may take before the platform gives up on it (502). */
const MANAGEMENT_TIMEOUT_MS = 30_000;

/** Largest answer read from a cluster's management API: a list of many backups stays far below it. */
const MAX_MANAGEMENT_RESPONSE_BYTES = 8 * 1024 * 1024;

/** Takes, lists, deletes and restores backups of clusters; see the module comment. */
export class BackupService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly now: () => Date;
  /** Restores running in this process, by cluster id: at most one per cluster. */
  private readonly running = new Map<string, Promise<void>>();

  constructor(private readonly options: BackupServiceOptions) {
    this.database = options.database;
    this.now = options.now ?? (() => new Date());
  }

  /** The cluster's backups, newest first. */
  async list(organizationId: string, clusterId: string): Promise<Backup[]> {
    const client = await this.clientFor(organizationId, clusterId);
    const backups = await this.callCluster(() => client.list());
    return backups.map(presentBackup);
  }

  /**
   * Starts a backup of the cluster and answers it (In progress). Its id is the current time in milliseconds, or one
   * above the newest backup's when that is higher, since the management API takes only increasing ids.
   */
  async create(organizationId: string, clusterId: string): Promise<Backup> {
    const client = await this.clientFor(organizationId, clusterId);
    const existing = await this.callCluster(() => client.list());
    const highest = existing.reduce((maximum, backup) => Math.max(maximum, backup.backupId), -1);
    const backupId = Math.max(this.now().getTime(), highest + 1);
    const taken = await this.callCluster(() => client.take(backupId), backupId);
    this.options.logger.info({ clusterId, backupId }, "backup started through the Administration API");
    return presentBackup(taken);
  }

  /** Deletes a backup from the cluster's backup store and answers what it was. */
  async delete(organizationId: string, clusterId: string, backupId: string): Promise<Backup> {
    const id = parseBackupId(backupId);
    const client = await this.clientFor(organizationId, clusterId);
    const deleted = await this.callCluster(() => client.delete(id), id);
    this.options.logger.info({ clusterId, backupId: id }, "backup deleted through the Administration API");
    return presentBackup(deleted);
  }

  /**
   * Starts restoring the cluster from a backup and answers the restore (PENDING); it then goes through VALIDATING
   * (the backup must be Complete) and IN_PROGRESS (the cluster is stopped, restored broker by broker and started)
   * to COMPLETED or FAILED. 409 while another restore of the cluster runs.
   */
  async restore(organizationId: string, clusterId: string, backupId: string): Promise<Restore> {
    const id = parseBackupId(backupId);
    const cluster = await requireCluster(this.options.clusters, organizationId, clusterId);
    if (this.running.has(clusterId)) {
      throw conflict(`A restore of cluster ${clusterId} is running; wait until it is COMPLETED or FAILED.`);
    }
    const timestamp = this.now().toISOString();
    const restoreId = randomUUID();
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
    const run = this.runRestore(organizationId, cluster, id, restoreId).finally(() => this.running.delete(clusterId));
    this.running.set(clusterId, run);
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
    return {
      uuid: row.id,
      backupId: row.backup_id,
      state: row.state as RestoreState,
      failureReason: row.failure_reason,
      created: row.created_at,
      updated: row.updated_at,
    };
  }

  /**
   * Marks restores that were running when the platform last stopped as FAILED: nothing carries them on, and the
   * provisioner puts an interrupted restore's previous data back when it next starts the cluster.
   */
  async failInterruptedRestores(): Promise<void> {
    await this.database
      .updateTable("cluster_restores")
      .set({
        state: "FAILED",
        failure_reason: "The platform stopped during the restore; the cluster keeps its previous data.",
        updated_at: this.now().toISOString(),
      })
      .where("state", "in", ["PENDING", "VALIDATING", "IN_PROGRESS"])
      .execute();
  }

  /** Waits for every restore running in this process (the platform is shutting down, or a test ends). */
  async whenIdle(): Promise<void> {
    await Promise.allSettled([...this.running.values()]);
  }

  /** Removes the restores recorded for the cluster, when the cluster itself is deleted. */
  async deleteAllOf(clusterId: string): Promise<void> {
    await this.database.deleteFrom("cluster_restores").where("cluster_id", "=", clusterId).execute();
  }

  private async runRestore(
    organizationId: string,
    cluster: ClusterSummary,
    backupId: number,
    restoreId: string,
  ): Promise<void> {
    const logger = this.options.logger.child({ clusterId: cluster.id, backupId, restoreId });
    try {
      await this.setRestoreState(restoreId, "VALIDATING", null);
      const client = this.managementClient(organizationId, cluster);
      const backup = await this.callCluster(() => client.status(backupId), backupId);
      if (backup.state !== "COMPLETED") {
        const reason = backup.failureReason === null ? "" : `: ${backup.failureReason}`;
        throw invalidRequest(`backup ${backupId} is ${backup.state}, not COMPLETED${reason}`);
      }
      await this.setRestoreState(restoreId, "IN_PROGRESS", null);
      logger.info("restoring the cluster from a backup");
      await this.options.restorer.restoreFromBackup(organizationId, cluster.id, backupId);
      await this.setRestoreState(restoreId, "COMPLETED", null);
      logger.info("cluster restored from a backup");
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      logger.error({ reason: reason.slice(0, MAX_FAILURE_REASON_LENGTH) }, "the restore failed");
      try {
        await this.setRestoreState(restoreId, "FAILED", reason.slice(0, MAX_FAILURE_REASON_LENGTH));
      } catch (recordError) {
        logger.error({ err: recordError }, "could not record the restore's failure");
      }
    }
  }

  private async setRestoreState(restoreId: string, state: RestoreState, failureReason: string | null): Promise<void> {
    await this.database
      .updateTable("cluster_restores")
      .set({ state, failure_reason: failureReason, updated_at: this.now().toISOString() })
      .where("id", "=", restoreId)
      .execute();
  }

  private async clientFor(organizationId: string, clusterId: string): Promise<BackupsClient> {
    const cluster = await requireCluster(this.options.clusters, organizationId, clusterId);
    return this.managementClient(organizationId, cluster);
  }

  private managementClient(organizationId: string, cluster: ClusterSummary): BackupsClient {
    if (cluster.links.management === "") {
      throw conflict(`Cluster ${cluster.id} has not been placed yet; wait until it is Healthy.`);
    }
    return new BackupsClient({
      baseUrl: cluster.links.management,
      tokenProvider: this.options.tokensFor(organizationId, cluster.id),
      http: {
        timeoutMs: MANAGEMENT_TIMEOUT_MS,
        maxResponseBytes: MAX_MANAGEMENT_RESPONSE_BYTES,
        retry: { maxRetries: 0 },
        ...this.options.http,
      },
    });
  }

  /**
   * Calls the cluster and turns its refusals into the Administration API's problems: what the cluster refuses
   * because of the backup (404, 409) keeps its reason; anything else is the cluster's trouble, a 502.
   */
  private async callCluster<Result>(call: () => Promise<Result>, backupId?: number): Promise<Result> {
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

/** Parses a backup id of a path (the route's schema checked its shape); 400 beyond the largest safe integer. */
function parseBackupId(value: string): number {
  const id = Number(value);
  if (!new RegExp(BACKUP_ID_PATTERN).test(value) || !Number.isSafeInteger(id)) {
    throw invalidRequest(`params/backupId must be a non-negative integer of at most ${Number.MAX_SAFE_INTEGER}`);
  }
  return id;
}

/** A management API backup in the Administration API's shape. */
export function presentBackup(backup: ManagementBackup): Backup {
  const created = earliest(backup.details.map((part) => part.createdAt));
  const finished = backup.state !== "IN_PROGRESS";
  return {
    uuid: String(backup.backupId),
    name: created === null ? `backup ${backup.backupId}` : `backup ${created}`,
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
