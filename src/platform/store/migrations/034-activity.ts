import { type Kysely, type Migration, PostgresAdapter, sql } from "kysely";

/**
 * Activity: one row per change made through the Administration API. The sequence tells apart entries of the same
 * instant, so reading them newest first is deterministic; timestamps use the "C" collation on PostgreSQL so both
 * dialects order them by code point.
 */
export const activityMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    const isPostgres = database.getExecutor().adapter instanceof PostgresAdapter;
    await database.schema
      .createTable("activity")
      .addColumn("sequence", isPostgres ? "bigserial" : "integer", (column) =>
        isPostgres ? column.primaryKey() : column.primaryKey().autoIncrement(),
      )
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("service", "text", (column) => column.notNull())
      .addColumn("audit_type", "text", (column) => column.notNull())
      .addColumn("entity", "text", (column) => column.notNull())
      .addColumn("entity_id", "text", (column) => column.notNull())
      .addColumn("user_id", "text", (column) => column.notNull())
      .addColumn("recorded_at", isPostgres ? sql`text collate "C"` : sql`text`, (column) => column.notNull())
      .execute();
    // Reading an organization's newest entries walks this index backwards.
    await database.schema
      .createIndex("activity_organization_recorded")
      .on("activity")
      .columns(["organization_id", "recorded_at", "sequence"])
      .execute();
  },
};
