import type { Kysely } from "kysely";
import { invalidRequest, notFound } from "../../../http/errors.js";
import { type MemberService, normalizeEmail } from "../../admin/members/service.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { findProject } from "../catalog.js";
import { foldName, inTransaction } from "../records.js";
import { type SearchDefinition, type SearchPage, type SearchRequest, searchRows } from "../search.js";

/** Roles a collaborator can hold in a project. */
export const collaboratorRoles = ["project_admin", "editor", "viewer", "commenter"] as const;

/** One collaborator role. */
export type CollaboratorRole = (typeof collaboratorRoles)[number];

/** A collaborator as the API shows it. */
export interface Collaborator {
  projectId: string;
  email: string;
  name: string;
  role: CollaboratorRole;
}

interface CollaboratorRow {
  project_id: string;
  email: string;
  name: string;
  role: string;
}

/** How collaborators are searched; a collaborator is identified by its project and email. */
export const collaboratorSearch: SearchDefinition = {
  table: "modeler_collaborators",
  fields: {
    projectId: { column: "project_id", kind: "exact", sortColumn: "project_id" },
    email: { column: "email", kind: "exact", sortColumn: "email" },
    name: { column: "name_folded", kind: "name", sortColumn: "name" },
    role: { column: "role", kind: "exact", sortColumn: "role" },
  },
  columns: ["project_id", "email", "name", "role"],
  tieBreak: ["project_id", "email"],
  defaultSort: [{ field: "email", direction: "ASC" }],
};

function collaborator(row: CollaboratorRow): Collaborator {
  return { projectId: row.project_id, email: row.email, name: row.name, role: row.role as CollaboratorRole };
}

/** Who works on which project in which role; only members of the organization can be collaborators. */
export class CollaboratorService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly members: Pick<MemberService, "isMember">,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Adds a member to a project with `role`, or changes the role they have; answers which of the two it did. */
  async put(
    organizationId: string,
    input: { email: string; projectId: string; role: CollaboratorRole },
  ): Promise<"added" | "updated"> {
    const email = normalizeEmail(input.email);
    if (!(await this.members.isMember(organizationId, email))) {
      throw invalidRequest(`${email} is not a member of the organization; invite them as a member first.`);
    }
    const timestamp = this.now().toISOString();
    return await inTransaction(this.database, async (transaction) => {
      await findProject(transaction, organizationId, input.projectId);
      const member = await transaction
        .selectFrom("members")
        .select("name")
        .where("organization_id", "=", organizationId)
        .where("email", "=", email)
        .executeTakeFirst();
      const name = member?.name ?? email;
      const existing = await transaction
        .selectFrom("modeler_collaborators")
        .select("email")
        .where("project_id", "=", input.projectId)
        .where("email", "=", email)
        .executeTakeFirst();
      await transaction
        .insertInto("modeler_collaborators")
        .values({
          organization_id: organizationId,
          project_id: input.projectId,
          email,
          name,
          name_folded: foldName(name),
          role: input.role,
          created_at: timestamp,
          updated_at: timestamp,
        })
        .onConflict((conflict) =>
          conflict.columns(["project_id", "email"]).doUpdateSet({ role: input.role, updated_at: timestamp }),
        )
        .execute();
      return existing === undefined ? "added" : "updated";
    });
  }

  /** Removes a collaborator from a project. */
  async remove(organizationId: string, projectId: string, email: string): Promise<void> {
    const address = normalizeEmail(email);
    const result = await this.database
      .deleteFrom("modeler_collaborators")
      .where("organization_id", "=", organizationId)
      .where("project_id", "=", projectId)
      .where("email", "=", address)
      .executeTakeFirst();
    if (result.numDeletedRows === 0n) {
      await findProject(this.database, organizationId, projectId);
      throw notFound("collaborator", address);
    }
  }

  /** Searches the organization's collaborators. */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<Collaborator>> {
    const filter = request.filter;
    const normalized =
      typeof filter?.email === "string"
        ? { ...request, filter: { ...filter, email: normalizeEmail(filter.email) } }
        : request;
    const page = await searchRows<CollaboratorRow>(this.database, collaboratorSearch, organizationId, normalized);
    return { items: page.items.map(collaborator), total: page.total };
  }
}
