import { type Kysely, type Migration, PostgresAdapter, sql } from "kysely";

/**
 * IP allowlists and monitoring of clusters (issue 15, items 5 and 6). A cluster's allowlist is one row holding the
 * whole list as JSON, so replacing it is one atomic statement. Monitoring keeps one row per cluster (whether
 * protected metrics are active) and its clients, of which only a SHA-256 of the password is stored. The rows name
 * their cluster without a foreign key: the clusters service removes them through `deleteAllOf` when a cluster goes.
 */
export const allowlistMonitoringMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    const isPostgres = database.getExecutor().adapter instanceof PostgresAdapter;
    // Clients are listed by creation time and id; both dialects must order them by code point.
    const sortableText = isPostgres ? sql`text collate "C"` : sql`text`;
    await database.schema
      .createTable("cluster_ip_allowlists")
      .addColumn("cluster_id", "text", (column) => column.primaryKey())
      .addColumn("entries", "text", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("cluster_monitoring")
      .addColumn("cluster_id", "text", (column) => column.primaryKey())
      .addColumn("enabled", "integer", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("monitoring_clients")
      .addColumn("id", sortableText, (column) => column.primaryKey())
      .addColumn("cluster_id", "text", (column) => column.notNull())
      .addColumn("username", "text", (column) => column.notNull())
      .addColumn("password_sha256", "text", (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .execute();
    await database.schema
      .createIndex("monitoring_clients_cluster_username")
      .on("monitoring_clients")
      .columns(["cluster_id", "username"])
      .unique()
      .execute();
    await database.schema
      .createIndex("monitoring_clients_cluster_created")
      .on("monitoring_clients")
      .columns(["cluster_id", "created_at", "id"])
      .execute();
  },
};
