import type { Kysely, Migration } from "kysely";

/**
 * Cluster API clients: a client may belong to one cluster of its organization (`cluster_id`), with the permissions
 * its tokens carry for that cluster's gateway and the id the Administration API shows for it. Names are unique per
 * cluster; organization clients (no cluster) are not constrained, since both databases treat NULLs in a unique
 * index as distinct. Deleted cluster clients are remembered for as long as tokens issued to them may be unexpired,
 * so the cluster's gateway can refuse those tokens.
 */
export const clusterClientsMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema.alterTable("clients").addColumn("cluster_id", "text").execute();
    await database.schema.alterTable("clients").addColumn("permissions", "text").execute();
    await database.schema.alterTable("clients").addColumn("uuid", "text").execute();
    await database.schema
      .createIndex("clients_cluster_name")
      .on("clients")
      .columns(["cluster_id", "name"])
      .unique()
      .execute();
    await database.schema
      .createTable("revoked_cluster_clients")
      .addColumn("client_id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull())
      .addColumn("cluster_id", "text", (column) => column.notNull())
      .addColumn("revoked_at", "text", (column) => column.notNull())
      .addColumn("revoked_at_ms", "bigint", (column) => column.notNull())
      .execute();
    // The gateway's list reads one cluster's recent revocations; pruning deletes by age across clusters.
    await database.schema
      .createIndex("revoked_cluster_clients_cluster")
      .on("revoked_cluster_clients")
      .columns(["cluster_id", "revoked_at_ms"])
      .execute();
    await database.schema
      .createIndex("revoked_cluster_clients_revoked_at")
      .on("revoked_cluster_clients")
      .column("revoked_at_ms")
      .execute();
  },
};
