import { randomUUID } from "node:crypto";
import { createTwoFilesPatch } from "diff";
import type { Kysely } from "kysely";
import { notFound, ServiceError } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { type FileMetadata, findFile } from "../catalog.js";
import { assertStorableText } from "../content.js";
import { fileMetadata } from "../files/service.js";
import {
  type AuditFields,
  type AuditRow,
  auditColumns,
  auditFields,
  changeColumns,
  creationColumns,
  type Executor,
  foldName,
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
import type { DiffGrant, DiffLinkSigner } from "./diff-links.js";

/** A milestone as the API shows it. */
export interface MilestoneMetadata extends AuditFields {
  id: string;
  name: string;
  fileId: string;
}

interface MilestoneRow extends AuditRow {
  id: string;
  name: string;
  file_id: string;
}

const milestoneColumns = ["id", "name", "file_id", ...auditColumns] as const;

/** How milestones are searched. */
export const milestoneSearch: SearchDefinition = {
  table: "modeler_milestones",
  fields: {
    id: { column: "id", kind: "exact", sortColumn: "id" },
    name: { column: "name_folded", kind: "name", sortColumn: "name" },
    fileId: { column: "file_id", kind: "exact", sortColumn: "file_id" },
    ...auditSearchFields,
  },
  columns: milestoneColumns,
  tieBreak: ["id"],
  defaultSort: [{ field: "created", direction: "ASC" }],
};

/**
 * Longest time spent computing one diff. The computation holds the event loop, so two large contents that differ
 * too much to diff within it are refused (409) rather than stalling every other request.
 */
export const diffTimeoutMs = 1_000;

/** Default largest number of changed lines a diff may have (it bounds the diff's work independently of time). */
export const defaultDiffMaxEditLength = 50_000;

function milestoneMetadata(row: MilestoneRow): MilestoneMetadata {
  return { id: row.id, name: row.name, fileId: row.file_id, ...auditFields(row) };
}

async function findMilestone(
  executor: Executor,
  organizationId: string,
  id: string,
): Promise<MilestoneRow & { content: string }> {
  const row = await executor
    .selectFrom("modeler_milestones")
    .select([...milestoneColumns, "content"])
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound("milestone", id);
  return row;
}

/** Options of `MilestoneService`. */
export interface MilestoneServiceOptions {
  database: Kysely<PlatformDatabase>;
  diffLinks: DiffLinkSigner;
  /** Absolute base URL of the Modeler API (e.g. `http://localhost:8088/modeler`), for diff links. */
  baseUrl: string;
  now?: () => Date;
  /** Largest number of changed lines a diff may have; more is refused with 409 (default 50,000). */
  diffMaxEditLength?: number;
}

/** Milestones: frozen copies of a file's content that can be restored and compared. */
export class MilestoneService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly diffLinks: DiffLinkSigner;
  private readonly baseUrl: string;
  private readonly now: () => Date;
  private readonly diffMaxEditLength: number;

  constructor(options: MilestoneServiceOptions) {
    this.database = options.database;
    this.diffLinks = options.diffLinks;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.now = options.now ?? (() => new Date());
    this.diffMaxEditLength = options.diffMaxEditLength ?? defaultDiffMaxEditLength;
  }

  /** Freezes the file's current content under `name`. */
  async create(
    organizationId: string,
    actor: Person,
    input: { name: string; fileId: string },
  ): Promise<MilestoneMetadata> {
    assertStorableText("name", input.name);
    return await inTransaction(this.database, async (transaction) => {
      const file = await transaction
        .selectFrom("modeler_files")
        .select("content")
        .where("organization_id", "=", organizationId)
        .where("id", "=", input.fileId)
        .executeTakeFirst();
      if (file === undefined) throw notFound("file", input.fileId);
      const row: MilestoneRow = {
        id: randomUUID(),
        name: input.name,
        file_id: input.fileId,
        ...creationColumns(actor, this.now().toISOString()),
      };
      await transaction
        .insertInto("modeler_milestones")
        .values({ ...row, organization_id: organizationId, name_folded: foldName(input.name), content: file.content })
        .execute();
      return milestoneMetadata(row);
    });
  }

  /** The milestone and the content it froze. */
  async get(organizationId: string, id: string): Promise<{ metadata: MilestoneMetadata; content: string }> {
    const row = await findMilestone(this.database, organizationId, id);
    return { metadata: milestoneMetadata(row), content: row.content };
  }

  /** Renames a milestone (its content never changes). */
  async rename(organizationId: string, actor: Person, id: string, name: string): Promise<MilestoneMetadata> {
    assertStorableText("name", name);
    const result = await this.database
      .updateTable("modeler_milestones")
      .set({ name, name_folded: foldName(name), ...changeColumns(actor, this.now().toISOString()) })
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (result.numUpdatedRows === 0n) throw notFound("milestone", id);
    return milestoneMetadata(await findMilestone(this.database, organizationId, id));
  }

  /** Deletes a milestone. */
  async delete(organizationId: string, id: string): Promise<void> {
    const result = await this.database
      .deleteFrom("modeler_milestones")
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound("milestone", id);
  }

  /** Puts the milestone's content back into its file as a new revision. */
  async restore(organizationId: string, actor: Person, id: string): Promise<FileMetadata> {
    return await inTransaction(this.database, async (transaction) => {
      const milestone = await findMilestone(transaction, organizationId, id);
      await transaction
        .updateTable("modeler_files")
        .set((expression) => ({
          content: milestone.content,
          revision: expression("revision", "+", 1),
          ...changeColumns(actor, this.now().toISOString()),
        }))
        .where("organization_id", "=", organizationId)
        .where("id", "=", milestone.file_id)
        .execute();
      return await fileMetadata(
        transaction,
        organizationId,
        await findFile(transaction, organizationId, milestone.file_id),
      );
    });
  }

  /** Searches the organization's milestones. */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<MilestoneMetadata>> {
    const page = await searchRows<MilestoneRow>(this.database, milestoneSearch, organizationId, request);
    return { items: page.items.map(milestoneMetadata), total: page.total };
  }

  /** A signed link, valid for a few minutes, that serves the diff from milestone `fromId` to milestone `toId`. */
  async compare(organizationId: string, fromId: string, toId: string): Promise<{ url: string }> {
    await findMilestone(this.database, organizationId, fromId);
    await findMilestone(this.database, organizationId, toId);
    const { grant, signature } = this.diffLinks.sign(organizationId, fromId, toId);
    const query = new URLSearchParams({
      organization: organizationId,
      expires: String(grant.expiresAtMs),
      signature,
    });
    return { url: `${this.baseUrl}/api/v1/milestones/compare/${fromId}...${toId}/diff?${query.toString()}` };
  }

  /** The unified diff a signed link grants (403 for a forged or expired link). */
  async diff(grant: DiffGrant, signature: string): Promise<string> {
    this.diffLinks.verify(grant, signature);
    const from = await findMilestone(this.database, grant.organizationId, grant.fromMilestoneId);
    const to = await findMilestone(this.database, grant.organizationId, grant.toMilestoneId);
    const patch = createTwoFilesPatch(
      `milestone ${from.name} (${from.id})`,
      `milestone ${to.name} (${to.id})`,
      from.content,
      to.content,
      from.created_at,
      to.created_at,
      { timeout: diffTimeoutMs, maxEditLength: this.diffMaxEditLength },
    );
    if (patch === undefined) {
      throw new ServiceError(
        "conflict",
        "The two contents differ too much to compute a diff in reasonable time; download both milestones instead.",
      );
    }
    return patch;
  }
}
