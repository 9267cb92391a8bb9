import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { conflict, invalidRequest } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import {
  type ContainerContent,
  containerContent,
  type FolderMetadata,
  type FolderRow,
  findFolder,
  folderColumns,
  folderMetadata,
  holdsContent,
  lockFolderTree,
  resolveMoveLocation,
  resolveNewLocation,
} from "../catalog.js";
import { assertName } from "../content.js";
import { maximumFolderDepth, maximumStoredFolderDepth } from "../paths.js";
import {
  changeColumns,
  creationColumns,
  type Executor,
  foldName,
  inListSlices,
  inTransaction,
  type Person,
} from "../records.js";
import {
  auditSearchFields,
  type SearchDefinition,
  type SearchPage,
  type SearchRequest,
  searchRows,
} from "../search.js";

/** How folders are searched. */
export const folderSearch: SearchDefinition = {
  table: "modeler_folders",
  fields: {
    id: { column: "id", kind: "exact", sortColumn: "id" },
    name: { column: "name_folded", kind: "name", sortColumn: "name" },
    projectId: { column: "project_id", kind: "exact", sortColumn: "project_id" },
    parentId: { column: "parent_id", kind: "exact" },
    ...auditSearchFields,
  },
  columns: folderColumns,
  tieBreak: ["id"],
  defaultSort: [{ field: "created", direction: "ASC" }],
};

/** What `FolderService.create` needs. */
export interface NewFolder {
  name: string;
  projectId?: string | undefined;
  parentId?: string | null | undefined;
}

/** What `FolderService.update` changes; absent fields stay as they are. */
export interface FolderChange {
  name?: string | undefined;
  projectId?: string | undefined;
  parentId?: string | null | undefined;
}

/** The ids of a folder's ancestors, nearest first. */
async function ancestorIds(executor: Executor, organizationId: string, folderId: string): Promise<string[]> {
  const ancestors: string[] = [];
  let current: string | null = folderId;
  while (current !== null) {
    if (ancestors.length > maximumStoredFolderDepth) {
      throw new Error(
        `folder ${folderId} has more than ${maximumStoredFolderDepth} ancestors: the no-cycle invariant is broken`,
      );
    }
    const row: { parent_id: string | null } | undefined = await executor
      .selectFrom("modeler_folders")
      .select("parent_id")
      .where("organization_id", "=", organizationId)
      .where("id", "=", current)
      .executeTakeFirst();
    current = row?.parent_id ?? null;
    if (current !== null) ancestors.push(current);
  }
  return ancestors;
}

/** The ids of every folder below `folderId` and the height of its subtree (0 when it has no subfolders). */
async function descendants(
  executor: Executor,
  organizationId: string,
  folderId: string,
): Promise<{ ids: string[]; height: number }> {
  const ids: string[] = [];
  let frontier = [folderId];
  let height = 0;
  while (frontier.length > 0) {
    if (height > maximumStoredFolderDepth) {
      throw new Error(
        `folder ${folderId} has a subtree deeper than ${maximumStoredFolderDepth}: the no-cycle invariant is broken`,
      );
    }
    const next: string[] = [];
    for (const slice of inListSlices(frontier)) {
      const rows = await executor
        .selectFrom("modeler_folders")
        .select("id")
        .where("organization_id", "=", organizationId)
        .where("parent_id", "in", slice)
        .execute();
      for (const row of rows) next.push(row.id);
    }
    frontier = next;
    if (frontier.length > 0) height++;
    for (const folderId of frontier) ids.push(folderId);
  }
  return { ids, height };
}

/** Creates, reads, renames, moves, deletes and searches folders. */
export class FolderService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Creates a folder in a project's top level or inside another folder. */
  async create(organizationId: string, actor: Person, input: NewFolder): Promise<FolderMetadata> {
    assertName("name", input.name);
    return await inTransaction(this.database, async (transaction) => {
      if (input.parentId !== undefined && input.parentId !== null) await lockFolderTree(transaction, organizationId);
      const location = await resolveNewLocation(
        transaction,
        organizationId,
        input.projectId,
        input.parentId,
        "parentId",
      );
      if (location.folderId !== null) {
        const depth = (await ancestorIds(transaction, organizationId, location.folderId)).length + 2;
        if (depth > maximumFolderDepth) throw invalidRequest(`Folders nest at most ${maximumFolderDepth} levels deep.`);
      }
      const row: FolderRow = {
        id: randomUUID(),
        name: input.name,
        project_id: location.projectId,
        parent_id: location.folderId,
        ...creationColumns(actor, this.now().toISOString()),
      };
      await transaction
        .insertInto("modeler_folders")
        .values({ ...row, organization_id: organizationId, name_folded: foldName(input.name) })
        .execute();
      return folderMetadata(row);
    });
  }

  /** The folder and the folders and files directly inside it. */
  async get(organizationId: string, id: string): Promise<{ metadata: FolderMetadata; content: ContainerContent }> {
    const row = await findFolder(this.database, organizationId, id);
    return {
      metadata: folderMetadata(row),
      content: await containerContent(this.database, organizationId, row.project_id, id),
    };
  }

  /**
   * Renames and/or moves a folder with everything inside it. A folder cannot move into itself or below itself; moving
   * to another project moves its subfolders and files along.
   */
  async update(organizationId: string, actor: Person, id: string, change: FolderChange): Promise<FolderMetadata> {
    if (change.name !== undefined) assertName("name", change.name);
    return await inTransaction(this.database, async (transaction) => {
      if (change.projectId !== undefined || change.parentId !== undefined) {
        await lockFolderTree(transaction, organizationId);
      }
      const folder = await findFolder(transaction, organizationId, id);
      const target = await resolveMoveLocation(
        transaction,
        organizationId,
        { projectId: folder.project_id, folderId: folder.parent_id },
        change.projectId,
        change.parentId,
        "parentId",
      );
      const moved = target.projectId !== folder.project_id || target.folderId !== folder.parent_id;
      const subtree = moved ? await descendants(transaction, organizationId, id) : { ids: [], height: 0 };
      if (moved && target.folderId !== null) {
        if (target.folderId === id || subtree.ids.includes(target.folderId)) {
          throw invalidRequest(`Folder ${id} cannot move into itself or into one of its own subfolders.`);
        }
        const depth = (await ancestorIds(transaction, organizationId, target.folderId)).length + 2 + subtree.height;
        if (depth > maximumFolderDepth) throw invalidRequest(`Folders nest at most ${maximumFolderDepth} levels deep.`);
      }
      const timestamp = this.now().toISOString();
      await transaction
        .updateTable("modeler_folders")
        .set({
          ...(change.name === undefined ? {} : { name: change.name, name_folded: foldName(change.name) }),
          // Only a move writes the location: a rename does not take the tree's lock, and the location it read may be
          // stale by now (a move committed meanwhile), which written back would undo the move or close a cycle.
          ...(moved ? { project_id: target.projectId, parent_id: target.folderId } : {}),
          ...changeColumns(actor, timestamp),
        })
        .where("organization_id", "=", organizationId)
        .where("id", "=", id)
        .execute();
      if (target.projectId !== folder.project_id) {
        for (const slice of inListSlices(subtree.ids)) {
          await transaction
            .updateTable("modeler_folders")
            .set({ project_id: target.projectId })
            .where("organization_id", "=", organizationId)
            .where("id", "in", slice)
            .execute();
        }
        for (const slice of inListSlices([id, ...subtree.ids])) {
          await transaction
            .updateTable("modeler_files")
            .set({ project_id: target.projectId })
            .where("organization_id", "=", organizationId)
            .where("folder_id", "in", slice)
            .execute();
        }
      }
      return folderMetadata(await findFolder(transaction, organizationId, id));
    });
  }

  /** Deletes an empty folder; one holding folders or files is a 409. */
  async delete(organizationId: string, id: string): Promise<void> {
    await inTransaction(this.database, async (transaction) => {
      await findFolder(transaction, organizationId, id);
      if (await holdsContent(transaction, organizationId, { folderColumn: "parent_id", fileColumn: "folder_id", id })) {
        throw conflict(`Folder ${id} is not empty; delete or move its folders and files first.`);
      }
      await transaction
        .deleteFrom("modeler_folders")
        .where("organization_id", "=", organizationId)
        .where("id", "=", id)
        .execute();
    });
  }

  /** Searches the organization's folders. */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<FolderMetadata>> {
    const page = await searchRows<FolderRow>(this.database, folderSearch, organizationId, request);
    return { items: page.items.map(folderMetadata), total: page.total };
  }
}
