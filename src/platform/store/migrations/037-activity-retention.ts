import type { Kysely, Migration } from "kysely";

/**
 * Activity retention deletes the entries of every organization recorded before a cutoff, oldest first; the index
 * over the organization and the time does not serve that, so without this one each deletion scanned the table.
 */
export const activityRetentionMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema.createIndex("activity_recorded").on("activity").column("recorded_at").execute();
  },
};
