import type { Kysely, Migration } from "kysely";

/**
 * Connector secrets of clusters (Administration API `/clusters/{clusterId}/secrets`). The value is stored sealed
 * (secrets-box.ts) under the key-encryption key, bound to its cluster and name, so the column never holds a plain
 * value; `value_bytes` keeps the plain value's size, which bounds what one cluster holds in all. The cluster id is not a foreign key: clusters live in a table of their own folder, and a cluster's
 * secrets are removed through the connector-secrets service when the cluster is deleted.
 */
export const connectorSecretsMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .createTable("connector_secrets")
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("cluster_id", "text", (column) => column.notNull())
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("value", "text", (column) => column.notNull())
      .addColumn("value_bytes", "integer", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .addPrimaryKeyConstraint("connector_secrets_pk", ["cluster_id", "name"])
      .execute();
  },
};
