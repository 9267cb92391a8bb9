import type { Kysely, Migration } from "kysely";

/**
 * What a backup schedule remembers of its failed runs: how many in a row could not start a backup, why the last one
 * could not, and when it is tried again, so that a run refused for a moment (a cluster change under way, an
 * unreachable cluster) is not lost until the schedule's next time, and operators can see why.
 */
export const backupScheduleFailuresMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .alterTable("cluster_backup_schedules")
      .addColumn("consecutive_failures", "integer", (column) => column.notNull().defaultTo(0))
      .execute();
    await database.schema.alterTable("cluster_backup_schedules").addColumn("last_failure", "text").execute();
    await database.schema.alterTable("cluster_backup_schedules").addColumn("retry_at", "text").execute();
  },
};
