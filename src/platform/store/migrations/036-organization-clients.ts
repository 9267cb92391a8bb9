import { type Kysely, type Migration, sql } from "kysely";

/**
 * Organization clients managed through the Administration API: their names are unique per organization (a partial
 * index, since cluster clients are named per cluster), and deleted ones are remembered for as long as tokens issued
 * to them may be unexpired, so that every cluster gateway of their organization can refuse those tokens.
 */
export const organizationClientsMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    // Both databases support a unique index over the rows a WHERE clause selects.
    await sql`CREATE UNIQUE INDEX clients_organization_name ON clients (organization_id, name) WHERE cluster_id IS NULL`.execute(
      database,
    );
    await database.schema
      .createTable("revoked_organization_clients")
      .addColumn("client_id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull())
      .addColumn("revoked_at", "text", (column) => column.notNull())
      .addColumn("revoked_at_ms", "bigint", (column) => column.notNull())
      .execute();
    // A cluster's policy reads its organization's recent revocations; pruning deletes by age.
    await database.schema
      .createIndex("revoked_organization_clients_organization")
      .on("revoked_organization_clients")
      .columns(["organization_id", "revoked_at_ms"])
      .execute();
    await database.schema
      .createIndex("revoked_organization_clients_revoked_at")
      .on("revoked_organization_clients")
      .column("revoked_at_ms")
      .execute();
  },
};
