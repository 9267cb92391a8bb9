import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { conflict, notFound } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { inlineTaskRunner } from "../../worker-pool.js";
import {
  type FileMetadata,
  type FileRow,
  fileColumns,
  fileMetadataList,
  findFile,
  lockFolderTree,
  resolveMoveLocation,
  resolveNewLocation,
} from "../catalog.js";
import { assertContentSize, assertName, type FileType } from "../content.js";
import { changeColumns, creationColumns, type Executor, foldName, inTransaction, type Person } from "../records.js";
import {
  auditSearchFields,
  type SearchDefinition,
  type SearchPage,
  type SearchRequest,
  searchRows,
} from "../search.js";
import { type ModelerTaskRunner, modelerWorkerTasks } from "../worker-tasks.js";

/** How files are searched (`simplePath` and `canonicalPath` are derived, so they are not filters). */
export const fileSearch: SearchDefinition = {
  table: "modeler_files",
  fields: {
    id: { column: "id", kind: "exact", sortColumn: "id" },
    name: { column: "name_folded", kind: "name", sortColumn: "name" },
    projectId: { column: "project_id", kind: "exact", sortColumn: "project_id" },
    folderId: { column: "folder_id", kind: "exact" },
    type: { column: "file_type", kind: "exact", sortColumn: "file_type" },
    revision: { column: "revision", kind: "exact", sortColumn: "revision", sortType: "integer" },
    ...auditSearchFields,
  },
  columns: fileColumns,
  tieBreak: ["id"],
  defaultSort: [{ field: "created", direction: "ASC" }],
};

/** What `FileService.create` needs. */
export interface NewFile {
  name: string;
  content: string;
  fileType: FileType;
  projectId?: string | undefined;
  folderId?: string | null | undefined;
}

/** What `FileService.update` changes: `revision` must be the current one; absent fields stay as they are. */
export interface FileChange {
  revision: number;
  name?: string | undefined;
  content?: string | undefined;
  projectId?: string | undefined;
  folderId?: string | null | undefined;
}

/** A file's metadata and content. */
export interface FileWithContent {
  metadata: FileMetadata;
  content: string;
}

/** The metadata of one file row. */
export async function fileMetadata(executor: Executor, organizationId: string, row: FileRow): Promise<FileMetadata> {
  const [metadata] = await fileMetadataList(executor, organizationId, [row]);
  if (metadata === undefined) throw new Error("fileMetadataList returned fewer items than rows (invariant)");
  return metadata;
}

/**
 * Creates, reads, changes, deletes and searches files; changes are guarded by the file's revision. Content is
 * validated by `tasks` (the platform's worker pool), on the calling thread when none is given.
 */
export class FileService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
    private readonly tasks: ModelerTaskRunner = inlineTaskRunner(modelerWorkerTasks),
  ) {}

  /**
   * Validates content for its file type in the worker pool. The size is checked here first, so content that is
   * too large is refused without being copied to a worker.
   */
  private async validateContent(fileType: FileType, content: string): Promise<void> {
    const inputBytes = assertContentSize(content);
    await this.tasks.run("validateFileContent", { fileType, content }, { inputBytes });
  }

  /** Creates a file after validating its content for its type; its revision starts at 1. */
  async create(organizationId: string, actor: Person, input: NewFile): Promise<FileMetadata> {
    assertName("name", input.name);
    await this.validateContent(input.fileType, input.content);
    return await inTransaction(this.database, async (transaction) => {
      if (input.folderId !== undefined && input.folderId !== null) await lockFolderTree(transaction, organizationId);
      const location = await resolveNewLocation(
        transaction,
        organizationId,
        input.projectId,
        input.folderId,
        "folderId",
      );
      const row: FileRow = {
        id: randomUUID(),
        name: input.name,
        project_id: location.projectId,
        folder_id: location.folderId,
        file_type: input.fileType,
        revision: 1,
        ...creationColumns(actor, this.now().toISOString()),
      };
      await transaction
        .insertInto("modeler_files")
        .values({ ...row, organization_id: organizationId, name_folded: foldName(input.name), content: input.content })
        .execute();
      return await fileMetadata(transaction, organizationId, row);
    });
  }

  /** The file's metadata and its content exactly as stored. */
  async get(organizationId: string, id: string): Promise<FileWithContent> {
    const row = await this.database
      .selectFrom("modeler_files")
      .select([...fileColumns, "content"])
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (row === undefined) throw notFound("file", id);
    return { metadata: await fileMetadata(this.database, organizationId, row), content: row.content };
  }

  /**
   * Renames, moves and/or replaces the content of a file when `change.revision` is its current revision, and
   * increments the revision. The update is conditional on the revision in the database itself, so of concurrent
   * changes made from the same revision exactly one succeeds; the others get 409.
   */
  async update(organizationId: string, actor: Person, id: string, change: FileChange): Promise<FileMetadata> {
    if (change.name !== undefined) assertName("name", change.name);
    const current = await findFile(this.database, organizationId, id);
    if (current.revision !== change.revision) throw staleRevision(id, change.revision, current.revision);
    if (change.content !== undefined) await this.validateContent(current.file_type as FileType, change.content);
    return await inTransaction(this.database, async (transaction) => {
      // Only a move writes the file's location, computed from the file as it is now, under the folder tree's lock:
      // the row read above may be stale by now (its folder moved to another project meanwhile, which keeps the
      // file's revision), and writing that location back would file it under the wrong project.
      const moves = change.projectId !== undefined || change.folderId !== undefined;
      let target: { projectId: string; folderId: string | null } | null = null;
      if (moves) {
        await lockFolderTree(transaction, organizationId);
        const fresh = await findFile(transaction, organizationId, id);
        target = await resolveMoveLocation(
          transaction,
          organizationId,
          { projectId: fresh.project_id, folderId: fresh.folder_id },
          change.projectId,
          change.folderId,
          "folderId",
        );
      }
      const result = await transaction
        .updateTable("modeler_files")
        .set((expression) => ({
          ...(change.name === undefined ? {} : { name: change.name, name_folded: foldName(change.name) }),
          ...(change.content === undefined ? {} : { content: change.content }),
          ...(target === null ? {} : { project_id: target.projectId, folder_id: target.folderId }),
          revision: expression("revision", "+", 1),
          ...changeColumns(actor, this.now().toISOString()),
        }))
        .where("organization_id", "=", organizationId)
        .where("id", "=", id)
        .where("revision", "=", change.revision)
        .executeTakeFirst();
      if (result.numUpdatedRows === 0n) {
        const latest = await findFile(transaction, organizationId, id);
        throw staleRevision(id, change.revision, latest.revision);
      }
      return await fileMetadata(transaction, organizationId, await findFile(transaction, organizationId, id));
    });
  }

  /** Deletes a file and its milestones. */
  async delete(organizationId: string, id: string): Promise<void> {
    await inTransaction(this.database, async (transaction) => {
      await findFile(transaction, organizationId, id);
      await transaction
        .deleteFrom("modeler_milestones")
        .where("organization_id", "=", organizationId)
        .where("file_id", "=", id)
        .execute();
      await transaction
        .deleteFrom("modeler_files")
        .where("organization_id", "=", organizationId)
        .where("id", "=", id)
        .execute();
    });
  }

  /** Searches the organization's files (metadata only, never content). */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<FileMetadata>> {
    const page = await searchRows<FileRow>(this.database, fileSearch, organizationId, request);
    return { items: await fileMetadataList(this.database, organizationId, page.items), total: page.total };
  }
}

/** The 409 of a change made from a revision that is not the current one. */
export function staleRevision(id: string, given: number, current: number): Error {
  return conflict(
    `File ${id} is at revision ${current}, not ${given}: it changed since you read it. Read it again and reapply your change.`,
  );
}
