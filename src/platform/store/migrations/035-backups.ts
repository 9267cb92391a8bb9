import type { Kysely, Migration } from "kysely";

/**
 * Restores of clusters from backups: one row per restore requested through the Administration API, with its state,
 * so that its progress survives the request that started it and can be read back. Backup schedules: one per cluster
 * at most, with when it last ran, so that a restarted platform knows which run is due.
 */
export const backupsMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .createTable("cluster_restores")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("cluster_id", "text", (column) => column.notNull())
      .addColumn("backup_id", "text", (column) => column.notNull())
      .addColumn("state", "text", (column) => column.notNull())
      .addColumn("failure_reason", "text")
      .addColumn("created_at", "text", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createIndex("cluster_restores_cluster_backup")
      .on("cluster_restores")
      .columns(["cluster_id", "backup_id", "created_at"])
      .execute();
    await database.schema
      .createTable("cluster_backup_schedules")
      .addColumn("cluster_id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull())
      .addColumn("cron", "text", (column) => column.notNull())
      .addColumn("keep_count", "integer", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .addColumn("last_run_at", "text")
      .execute();
  },
};
