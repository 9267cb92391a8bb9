import type { Kysely, Migration } from "kysely";

/**
 * Failed authentications are counted per client id and source address instead of per client id alone, so wrong
 * secrets sent from one address never delay the client's requests from another (issue 18). The old counts are
 * dropped rather than carried over: they say nothing about which address failed, and they expire within the hour
 * anyway.
 */
export const clientFailuresPerAddressMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema.dropTable("client_failures").execute();
    await database.schema
      .createTable("client_failures")
      .addColumn("client_id", "text", (column) => column.notNull())
      .addColumn("address", "text", (column) => column.notNull())
      .addColumn("consecutive_failures", "integer", (column) => column.notNull())
      .addColumn("delayed_until_ms", "bigint", (column) => column.notNull())
      .addPrimaryKeyConstraint("client_failures_pk", ["client_id", "address"])
      .execute();
    // Pruning deletes by the end of the delay.
    await database.schema
      .createIndex("client_failures_delayed_until")
      .on("client_failures")
      .column("delayed_until_ms")
      .execute();
  },
};
