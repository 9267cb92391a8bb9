import type { Kysely, Migration } from "kysely";

/**
 * Clusters of the Administration API (issue 15) and where the local provisioner runs each one: its directory, the
 * gateway's ports and every broker's ports, recorded so that a restarted platform launches it at the same addresses.
 */
export const clustersMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .createTable("clusters")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("description", "text")
      .addColumn("stage_label", "text")
      .addColumn("plan_type_id", "text", (column) => column.notNull())
      .addColumn("channel_id", "text", (column) => column.notNull())
      .addColumn("generation_id", "text", (column) => column.notNull())
      .addColumn("generation_name", "text", (column) => column.notNull())
      .addColumn("region_id", "text", (column) => column.notNull())
      .addColumn("auto_update", "integer", (column) => column.notNull())
      .addColumn("owner_id", "text", (column) => column.notNull())
      .addColumn("primary_cluster", "integer", (column) => column.notNull())
      .addColumn("status", "text", (column) => column.notNull())
      .addColumn("gateway_status", "text", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createIndex("clusters_organization")
      .on("clusters")
      .columns(["organization_id", "created_at"])
      .execute();
    await database.schema
      .createTable("local_cluster_placements")
      .addColumn("cluster_id", "text", (column) => column.primaryKey())
      .addColumn("directory", "text", (column) => column.notNull())
      .addColumn("gateway_port", "integer", (column) => column.notNull())
      .addColumn("management_port", "integer", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("local_cluster_brokers")
      .addColumn("cluster_id", "text", (column) => column.notNull())
      .addColumn("node_id", "integer", (column) => column.notNull())
      .addColumn("cluster_port", "integer", (column) => column.notNull())
      .addColumn("management_port", "integer", (column) => column.notNull())
      .addPrimaryKeyConstraint("local_cluster_brokers_pk", ["cluster_id", "node_id"])
      .execute();
  },
};
