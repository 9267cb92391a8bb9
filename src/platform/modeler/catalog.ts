import { invalidRequest, notFound } from "../../http/errors.js";
import type { FileType } from "./content.js";
import { locationKey, type PathSegment, resolvePaths, simplePath } from "./paths.js";
import { type AuditFields, type AuditRow, auditColumns, auditFields, type Executor } from "./records.js";

/**
 * The metadata shapes of projects, folders and files, the row lookups every service shares, and where a new or
 * moved folder or file lands. Every lookup is scoped to one organization: another organization's id is not found.
 */

/** A project as the API shows it. */
export interface ProjectMetadata extends AuditFields {
  id: string;
  name: string;
}

/** A folder as the API shows it. */
export interface FolderMetadata extends AuditFields {
  id: string;
  name: string;
  projectId: string;
  /** Null at the top level of the project. */
  parentId: string | null;
}

/** A file as the API shows it. */
export interface FileMetadata extends AuditFields {
  id: string;
  name: string;
  projectId: string;
  /** Null at the top level of the project. */
  folderId: string | null;
  /** Project, folders and file name joined by `/` (a `/` inside a name is written `\/`). */
  simplePath: string;
  /** The project and the folders containing the file, from the top down. */
  canonicalPath: PathSegment[];
  revision: number;
  type: FileType;
}

/** A folder's or file's children, as `GET` of a project or folder lists them. */
export interface ContainerContent {
  folders: FolderMetadata[];
  files: FileMetadata[];
}

/** Columns of a project row. */
export const projectColumns = ["id", "name", ...auditColumns] as const;
/** Columns of a folder row. */
export const folderColumns = ["id", "name", "project_id", "parent_id", ...auditColumns] as const;
/** Columns of a file row except its content. */
export const fileColumns = ["id", "name", "project_id", "folder_id", "file_type", "revision", ...auditColumns] as const;

/** A project row as selected. */
export interface ProjectRow extends AuditRow {
  id: string;
  name: string;
}

/** A folder row as selected. */
export interface FolderRow extends AuditRow {
  id: string;
  name: string;
  project_id: string;
  parent_id: string | null;
}

/** A file row as selected, without content. */
export interface FileRow extends AuditRow {
  id: string;
  name: string;
  project_id: string;
  folder_id: string | null;
  file_type: string;
  revision: number;
}

/** Maps a project row. */
export function projectMetadata(row: ProjectRow): ProjectMetadata {
  return { id: row.id, name: row.name, ...auditFields(row) };
}

/** Maps a folder row. */
export function folderMetadata(row: FolderRow): FolderMetadata {
  return { id: row.id, name: row.name, projectId: row.project_id, parentId: row.parent_id, ...auditFields(row) };
}

/** Maps file rows, resolving their paths together. */
export async function fileMetadataList(
  executor: Executor,
  organizationId: string,
  rows: readonly FileRow[],
): Promise<FileMetadata[]> {
  const paths = await resolvePaths(
    executor,
    organizationId,
    rows.map((row) => ({ projectId: row.project_id, folderId: row.folder_id })),
  );
  return rows.map((row) => {
    const canonicalPath = paths.get(locationKey({ projectId: row.project_id, folderId: row.folder_id })) ?? [];
    return {
      id: row.id,
      name: row.name,
      projectId: row.project_id,
      folderId: row.folder_id,
      simplePath: simplePath([...canonicalPath.map((segment) => segment.name), row.name]),
      canonicalPath,
      revision: Number(row.revision),
      type: row.file_type as FileType,
      ...auditFields(row),
    };
  });
}

/** The project row, or 404. */
export async function findProject(executor: Executor, organizationId: string, id: string): Promise<ProjectRow> {
  const row = await executor
    .selectFrom("modeler_projects")
    .select(projectColumns)
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound("project", id);
  return row;
}

/** The folder row, or 404. */
export async function findFolder(executor: Executor, organizationId: string, id: string): Promise<FolderRow> {
  const row = await executor
    .selectFrom("modeler_folders")
    .select(folderColumns)
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound("folder", id);
  return row;
}

/** The file row (without content), or 404. */
export async function findFile(executor: Executor, organizationId: string, id: string): Promise<FileRow> {
  const row = await executor
    .selectFrom("modeler_files")
    .select(fileColumns)
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound("file", id);
  return row;
}

/** The folders and files directly inside a project's top level (`folderId` null) or inside a folder. */
export async function containerContent(
  executor: Executor,
  organizationId: string,
  projectId: string,
  folderId: string | null,
): Promise<ContainerContent> {
  let folders = executor
    .selectFrom("modeler_folders")
    .select(folderColumns)
    .where("organization_id", "=", organizationId)
    .where("project_id", "=", projectId);
  folders = folderId === null ? folders.where("parent_id", "is", null) : folders.where("parent_id", "=", folderId);
  let files = executor
    .selectFrom("modeler_files")
    .select(fileColumns)
    .where("organization_id", "=", organizationId)
    .where("project_id", "=", projectId);
  files = folderId === null ? files.where("folder_id", "is", null) : files.where("folder_id", "=", folderId);
  const folderRows = await folders.orderBy("name").orderBy("id").execute();
  const fileRows = await files.orderBy("name").orderBy("id").execute();
  return {
    folders: folderRows.map(folderMetadata),
    files: await fileMetadataList(executor, organizationId, fileRows),
  };
}

/**
 * Serializes changes of an organization's folder tree until the transaction ends, by locking its organization row.
 * Without it, two concurrent moves on PostgreSQL could each see a tree without the other's move and together form a
 * cycle, and a file created in a folder that moves to another project at the same moment could keep the old project.
 * SQLite serializes write transactions anyway; there the statement only marks the transaction as a writer.
 */
/**
 * Whether a container holds anything: a folder or file whose `column` (`project_id` for a project, `parent_id` /
 * `folder_id` for a folder) names it. Deleting is allowed only when it holds nothing.
 */
export async function holdsContent(
  executor: Executor,
  organizationId: string,
  container: { folderColumn: "project_id" | "parent_id"; fileColumn: "project_id" | "folder_id"; id: string },
): Promise<boolean> {
  const folder = await executor
    .selectFrom("modeler_folders")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where(container.folderColumn, "=", container.id)
    .limit(1)
    .executeTakeFirst();
  if (folder !== undefined) return true;
  const file = await executor
    .selectFrom("modeler_files")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where(container.fileColumn, "=", container.id)
    .limit(1)
    .executeTakeFirst();
  return file !== undefined;
}

export async function lockFolderTree(executor: Executor, organizationId: string): Promise<void> {
  await executor
    .updateTable("organizations")
    .set((expression) => ({ name: expression.ref("name") }))
    .where("id", "=", organizationId)
    .execute();
}

/** Where a folder or file is placed: a project, and a folder of it or its top level. */
export interface Location {
  projectId: string;
  folderId: string | null;
}

/**
 * Where a new folder or file goes, from the request's `projectId` and containing folder (either may be omitted when
 * the other says it; both must agree when both are given).
 */
export async function resolveNewLocation(
  executor: Executor,
  organizationId: string,
  projectId: string | undefined,
  folderId: string | null | undefined,
  folderField: "folderId" | "parentId",
): Promise<Location> {
  if (folderId !== undefined && folderId !== null) {
    const folder = await findFolder(executor, organizationId, folderId);
    if (projectId !== undefined && projectId !== folder.project_id) {
      throw invalidRequest(
        `${folderField} ${folderId} is a folder of project ${folder.project_id}, not of projectId ${projectId}.`,
      );
    }
    return { projectId: folder.project_id, folderId };
  }
  if (projectId === undefined) throw invalidRequest(`Give projectId or ${folderField} (or both).`);
  await findProject(executor, organizationId, projectId);
  return { projectId, folderId: null };
}

/**
 * Where a moved folder or file goes. Nothing given: it stays. A containing folder given: into it (its project). Only
 * `projectId` given: the same place if it is the current project, otherwise the new project's top level. A `null`
 * folder: the top level of `projectId`, or of the current project.
 */
export async function resolveMoveLocation(
  executor: Executor,
  organizationId: string,
  current: Location,
  projectId: string | undefined,
  folderId: string | null | undefined,
  folderField: "folderId" | "parentId",
): Promise<Location> {
  if (folderId === undefined) {
    if (projectId === undefined || projectId === current.projectId) return current;
    return await resolveNewLocation(executor, organizationId, projectId, null, folderField);
  }
  return await resolveNewLocation(
    executor,
    organizationId,
    projectId ?? (folderId === null ? current.projectId : undefined),
    folderId,
    folderField,
  );
}
