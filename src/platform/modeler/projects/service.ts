import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { conflict, notFound } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import {
  type ContainerContent,
  containerContent,
  findProject,
  holdsContent,
  type ProjectMetadata,
  type ProjectRow,
  projectColumns,
  projectMetadata,
} from "../catalog.js";
import { assertName } from "../content.js";
import { changeColumns, creationColumns, foldName, inTransaction, type Person } from "../records.js";
import {
  auditSearchFields,
  type SearchDefinition,
  type SearchPage,
  type SearchRequest,
  searchRows,
} from "../search.js";

/** How projects are searched: by id, name, creation and change. */
export const projectSearch: SearchDefinition = {
  table: "modeler_projects",
  fields: {
    id: { column: "id", kind: "exact", sortColumn: "id" },
    name: { column: "name_folded", kind: "name", sortColumn: "name" },
    ...auditSearchFields,
  },
  columns: projectColumns,
  tieBreak: ["id"],
  defaultSort: [{ field: "created", direction: "ASC" }],
};

/** Creates, reads, renames, deletes and searches the projects of an organization. */
export class ProjectService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Creates an empty project. */
  async create(organizationId: string, actor: Person, name: string): Promise<ProjectMetadata> {
    assertName("name", name);
    const row: ProjectRow = { id: randomUUID(), name, ...creationColumns(actor, this.now().toISOString()) };
    await this.database
      .insertInto("modeler_projects")
      .values({ ...row, organization_id: organizationId, name_folded: foldName(name) })
      .execute();
    return projectMetadata(row);
  }

  /** The project and the folders and files at its top level. */
  async get(organizationId: string, id: string): Promise<{ metadata: ProjectMetadata; content: ContainerContent }> {
    const row = await findProject(this.database, organizationId, id);
    return { metadata: projectMetadata(row), content: await containerContent(this.database, organizationId, id, null) };
  }

  /** Renames a project. */
  async rename(organizationId: string, actor: Person, id: string, name: string): Promise<ProjectMetadata> {
    assertName("name", name);
    const result = await this.database
      .updateTable("modeler_projects")
      .set({ name, name_folded: foldName(name), ...changeColumns(actor, this.now().toISOString()) })
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (result.numUpdatedRows === 0n) throw notFound("project", id);
    return projectMetadata(await findProject(this.database, organizationId, id));
  }

  /** Deletes an empty project and its collaborator list; a project holding folders or files is a 409. */
  async delete(organizationId: string, id: string): Promise<void> {
    await inTransaction(this.database, async (transaction) => {
      await findProject(transaction, organizationId, id);
      if (
        await holdsContent(transaction, organizationId, { folderColumn: "project_id", fileColumn: "project_id", id })
      ) {
        throw conflict(`Project ${id} is not empty; delete or move its folders and files first.`);
      }
      await transaction
        .deleteFrom("modeler_collaborators")
        .where("organization_id", "=", organizationId)
        .where("project_id", "=", id)
        .execute();
      await transaction
        .deleteFrom("modeler_projects")
        .where("organization_id", "=", organizationId)
        .where("id", "=", id)
        .execute();
    });
  }

  /** Searches the organization's projects. */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<ProjectMetadata>> {
    const page = await searchRows<ProjectRow>(this.database, projectSearch, organizationId, request);
    return { items: page.items.map(projectMetadata), total: page.total };
  }
}
