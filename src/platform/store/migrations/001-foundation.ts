import type { Kysely, Migration } from "kysely";

/** Organizations, members, clients, signing keys, rate limits and settings. */
export const foundationMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await database.schema
      .createTable("organizations")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("members")
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("email", "text", (column) => column.notNull())
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("roles", "text", (column) => column.notNull())
      .addColumn("invite_pending", "integer", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .addColumn("updated_at", "text", (column) => column.notNull())
      .addPrimaryKeyConstraint("members_pk", ["organization_id", "email"])
      .execute();
    await database.schema
      .createTable("clients")
      .addColumn("client_id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("name", "text", (column) => column.notNull())
      .addColumn("secret_hash", "text", (column) => column.notNull())
      .addColumn("scopes", "text", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("signing_keys")
      .addColumn("key_id", "text", (column) => column.primaryKey())
      .addColumn("algorithm", "text", (column) => column.notNull())
      .addColumn("private_key", "text", (column) => column.notNull())
      .addColumn("public_key", "text", (column) => column.notNull())
      .addColumn("created_at", "text", (column) => column.notNull())
      .addColumn("retired_at_ms", "bigint")
      .execute();
    await database.schema
      .createTable("rate_limits")
      .addColumn("address", "text", (column) => column.primaryKey())
      .addColumn("tokens", "double precision", (column) => column.notNull())
      .addColumn("updated_at_ms", "bigint", (column) => column.notNull())
      .addColumn("blocked_until_ms", "bigint", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("client_failures")
      .addColumn("client_id", "text", (column) => column.primaryKey())
      .addColumn("consecutive_failures", "integer", (column) => column.notNull())
      .addColumn("delayed_until_ms", "bigint", (column) => column.notNull())
      .execute();
    await database.schema
      .createTable("settings")
      .addColumn("name", "text", (column) => column.primaryKey())
      .addColumn("value", "text", (column) => column.notNull())
      .execute();
  },
};
