import { type Kysely, type Migration, sql } from "kysely";

/**
 * Which run of a backup schedule last ended: the `last_run_at` of the run that recorded its outcome (a backup
 * started, or a failure). A claimed run that never ended was cut short by its platform's stop, and is run again
 * rather than left to the schedule's next time. Runs claimed before this migration count as ended.
 */
export const backupScheduleEndedRunsMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema.alterTable("cluster_backup_schedules").addColumn("ended_run_at", "text").execute();
    await sql`update cluster_backup_schedules set ended_run_at = last_run_at`.execute(database);
  },
};
