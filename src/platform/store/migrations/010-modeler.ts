import { type Kysely, type Migration, PostgresAdapter, sql } from "kysely";

/**
 * Modeler API v1: projects, folders, files, milestones and collaborators. Every row carries its organization so a
 * query can never reach another organization's data by forgetting a join. Text columns that are sorted or compared
 * use the "C" collation on PostgreSQL so both dialects order them by code point, exactly as SQLite does.
 */
export const modelerMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    const isPostgres = database.getExecutor().adapter instanceof PostgresAdapter;
    const sortableText = isPostgres ? sql`text collate "C"` : sql`text`;
    await database.schema
      .createTable("modeler_projects")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("name", sortableText, (column) => column.notNull())
      .addColumn("name_folded", sortableText, (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .addColumn("created_by_name", sortableText, (column) => column.notNull())
      .addColumn("created_by_email", sortableText, (column) => column.notNull())
      .addColumn("updated_at", sortableText, (column) => column.notNull())
      .addColumn("updated_by_name", sortableText, (column) => column.notNull())
      .addColumn("updated_by_email", sortableText, (column) => column.notNull())
      .execute();
    // Substring search on names reads this small index instead of the table (see search.ts).
    await database.schema
      .createIndex("modeler_projects_organization_name_folded")
      .on("modeler_projects")
      .columns(["organization_id", "name_folded", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_projects_organization_name")
      .on("modeler_projects")
      .columns(["organization_id", "name", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_projects_organization_updated")
      .on("modeler_projects")
      .columns(["organization_id", "updated_at", "id"])
      .execute();

    await database.schema
      .createTable("modeler_folders")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("project_id", "text", (column) => column.notNull().references("modeler_projects.id"))
      .addColumn("parent_id", "text", (column) => column.references("modeler_folders.id"))
      .addColumn("name", sortableText, (column) => column.notNull())
      .addColumn("name_folded", sortableText, (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .addColumn("created_by_name", sortableText, (column) => column.notNull())
      .addColumn("created_by_email", sortableText, (column) => column.notNull())
      .addColumn("updated_at", sortableText, (column) => column.notNull())
      .addColumn("updated_by_name", sortableText, (column) => column.notNull())
      .addColumn("updated_by_email", sortableText, (column) => column.notNull())
      .execute();
    // Substring search on names reads this small index instead of the table (see search.ts).
    await database.schema
      .createIndex("modeler_folders_organization_name_folded")
      .on("modeler_folders")
      .columns(["organization_id", "name_folded", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_folders_organization_project_parent")
      .on("modeler_folders")
      .columns(["organization_id", "project_id", "parent_id", "name", "id"])
      .execute();
    await database.schema.createIndex("modeler_folders_parent").on("modeler_folders").column("parent_id").execute();

    await database.schema
      .createTable("modeler_files")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("project_id", "text", (column) => column.notNull().references("modeler_projects.id"))
      .addColumn("folder_id", "text", (column) => column.references("modeler_folders.id"))
      .addColumn("name", sortableText, (column) => column.notNull())
      .addColumn("name_folded", sortableText, (column) => column.notNull())
      .addColumn("file_type", sortableText, (column) => column.notNull())
      .addColumn("content", "text", (column) => column.notNull())
      .addColumn("revision", "integer", (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .addColumn("created_by_name", sortableText, (column) => column.notNull())
      .addColumn("created_by_email", sortableText, (column) => column.notNull())
      .addColumn("updated_at", sortableText, (column) => column.notNull())
      .addColumn("updated_by_name", sortableText, (column) => column.notNull())
      .addColumn("updated_by_email", sortableText, (column) => column.notNull())
      .execute();
    // Substring search on names reads this small index instead of the table (see search.ts).
    await database.schema
      .createIndex("modeler_files_organization_name_folded")
      .on("modeler_files")
      .columns(["organization_id", "name_folded", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_files_organization_project_folder")
      .on("modeler_files")
      .columns(["organization_id", "project_id", "folder_id", "name", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_files_organization_project_updated")
      .on("modeler_files")
      .columns(["organization_id", "project_id", "updated_at", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_files_organization_updated")
      .on("modeler_files")
      .columns(["organization_id", "updated_at", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_files_organization_name")
      .on("modeler_files")
      .columns(["organization_id", "name", "id"])
      .execute();
    await database.schema.createIndex("modeler_files_folder").on("modeler_files").column("folder_id").execute();

    await database.schema
      .createTable("modeler_milestones")
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("file_id", "text", (column) => column.notNull().references("modeler_files.id"))
      .addColumn("name", sortableText, (column) => column.notNull())
      .addColumn("name_folded", sortableText, (column) => column.notNull())
      .addColumn("content", "text", (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .addColumn("created_by_name", sortableText, (column) => column.notNull())
      .addColumn("created_by_email", sortableText, (column) => column.notNull())
      .addColumn("updated_at", sortableText, (column) => column.notNull())
      .addColumn("updated_by_name", sortableText, (column) => column.notNull())
      .addColumn("updated_by_email", sortableText, (column) => column.notNull())
      .execute();
    // Substring search on names reads this small index instead of the table (see search.ts).
    await database.schema
      .createIndex("modeler_milestones_organization_name_folded")
      .on("modeler_milestones")
      .columns(["organization_id", "name_folded", "id"])
      .execute();
    await database.schema
      .createIndex("modeler_milestones_organization_file")
      .on("modeler_milestones")
      .columns(["organization_id", "file_id", "created_at", "id"])
      .execute();

    await database.schema
      .createTable("modeler_collaborators")
      .addColumn("organization_id", "text", (column) => column.notNull().references("organizations.id"))
      .addColumn("project_id", "text", (column) => column.notNull().references("modeler_projects.id"))
      .addColumn("email", sortableText, (column) => column.notNull())
      .addColumn("name", sortableText, (column) => column.notNull())
      .addColumn("name_folded", sortableText, (column) => column.notNull())
      .addColumn("role", sortableText, (column) => column.notNull())
      .addColumn("created_at", sortableText, (column) => column.notNull())
      .addColumn("updated_at", sortableText, (column) => column.notNull())
      .addPrimaryKeyConstraint("modeler_collaborators_pk", ["project_id", "email"])
      .execute();
    await database.schema
      .createIndex("modeler_collaborators_organization_project")
      .on("modeler_collaborators")
      .columns(["organization_id", "project_id", "email"])
      .execute();
  },
};
