import type { Kysely, Migration } from "kysely";

/**
 * What a backup schedule remembers of the attempts of its latest scheduled run: how many failed (the run and its
 * retries), which picks the next retry's pause, so that a scheduled run after a long run of failures starts again from
 * the shortest pause; and when the last attempt failed, which tells an attempt under way from one that ended.
 */
export const backupScheduleRetriesMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .alterTable("cluster_backup_schedules")
      .addColumn("run_failures", "integer", (column) => column.notNull().defaultTo(0))
      .execute();
    await database.schema.alterTable("cluster_backup_schedules").addColumn("last_failure_at", "text").execute();
  },
};
