import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { conflict, notFound } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { inlineTaskRunner } from "../../worker-pool.js";
import { type FileMetadata, findFile } from "../catalog.js";
import { assertName } from "../content.js";
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
import { type ModelerTaskRunner, modelerWorkerTasks } from "../worker-tasks.js";
import { type CachedDiff, DiffCache, type DiffCacheStatistics } from "./diff-cache.js";
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
 * Default largest number of changed lines (removed plus added) a diff may have; two contents that differ in more are
 * refused with 409. The diff's work grows with the square of this number, so it is what bounds a diff's cost.
 */
export const defaultDiffMaxEditLength = 1_000;

/** Default memory for computed diffs kept for reuse (64 MiB). */
export const defaultDiffCacheBytes = 64 * 1024 * 1024;

function milestoneMetadata(row: MilestoneRow): MilestoneMetadata {
  return { id: row.id, name: row.name, fileId: row.file_id, ...auditFields(row) };
}

async function findMilestone(
  executor: Executor,
  organizationId: string,
  id: string,
  noun: MilestoneNoun,
): Promise<MilestoneRow & { content: string }> {
  const row = await executor
    .selectFrom("modeler_milestones")
    .select([...milestoneColumns, "content"])
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound(noun, id);
  return row;
}

/** A milestone without its content, which can be large. */
async function findMilestoneMetadata(
  executor: Executor,
  organizationId: string,
  id: string,
  noun: MilestoneNoun,
): Promise<MilestoneRow> {
  const row = await executor
    .selectFrom("modeler_milestones")
    .select(milestoneColumns)
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound(noun, id);
  return row;
}

/** The content a milestone froze. */
async function milestoneContent(executor: Executor, organizationId: string, id: string): Promise<string> {
  const row = await executor
    .selectFrom("modeler_milestones")
    .select("content")
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (row === undefined) throw notFound("milestone", id);
  return row.content;
}

/**
 * What the API a request came through calls a milestone (the 8.9 API says version): errors name the resource the
 * client asked for.
 */
export type MilestoneNoun = "milestone" | "version";

/** Options of `MilestoneService`. */
export interface MilestoneServiceOptions {
  database: Kysely<PlatformDatabase>;
  diffLinks: DiffLinkSigner;
  /** Absolute base URL of the Modeler API (e.g. `http://localhost:8088/modeler`), for diff links. */
  baseUrl: string;
  now?: () => Date;
  /** Largest number of changed lines (removed plus added) a diff may have; more is refused with 409 (default 1,000). */
  diffMaxEditLength?: number;
  /** Memory for computed diffs kept for reuse (default 64 MiB; 0 keeps none). */
  diffCacheBytes?: number;
  /** Computes the diffs: the platform's worker pool (default: the calling thread). */
  tasks?: ModelerTaskRunner;
}

/**
 * Milestones: frozen copies of a file's content that can be restored and compared. Diffs are computed by `tasks`
 * (the worker pool), kept in a cache for reuse, and computed once for requests of one diff that arrive together.
 */
export class MilestoneService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly diffLinks: DiffLinkSigner;
  private readonly baseUrl: string;
  private readonly now: () => Date;
  private readonly diffMaxEditLength: number;
  private readonly tasks: ModelerTaskRunner;
  private readonly diffCache: DiffCache;
  /** Diffs being computed, by cache key: a request for one of them waits for it instead of computing it again. */
  private readonly diffsInProgress = new Map<string, Promise<CachedDiff>>();

  constructor(options: MilestoneServiceOptions) {
    this.database = options.database;
    this.diffLinks = options.diffLinks;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.now = options.now ?? (() => new Date());
    this.diffMaxEditLength = options.diffMaxEditLength ?? defaultDiffMaxEditLength;
    this.tasks = options.tasks ?? inlineTaskRunner(modelerWorkerTasks);
    this.diffCache = new DiffCache(options.diffCacheBytes ?? defaultDiffCacheBytes);
  }

  /** Freezes the file's current content under `name`, or under its creation time (ISO 8601) when no name is given. */
  async create(
    organizationId: string,
    actor: Person,
    input: { name?: string | undefined; fileId: string },
  ): Promise<MilestoneMetadata> {
    const createdAt = this.now().toISOString();
    const name = input.name ?? createdAt;
    assertName("name", name);
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
        name,
        file_id: input.fileId,
        ...creationColumns(actor, createdAt),
      };
      await transaction
        .insertInto("modeler_milestones")
        .values({ ...row, organization_id: organizationId, name_folded: foldName(name), content: file.content })
        .execute();
      return milestoneMetadata(row);
    });
  }

  /** The milestone and the content it froze. */
  async get(
    organizationId: string,
    id: string,
    noun: MilestoneNoun = "milestone",
  ): Promise<{ metadata: MilestoneMetadata; content: string }> {
    const row = await findMilestone(this.database, organizationId, id, noun);
    return { metadata: milestoneMetadata(row), content: row.content };
  }

  /** Renames a milestone (its content never changes). */
  async rename(
    organizationId: string,
    actor: Person,
    id: string,
    name: string,
    noun: MilestoneNoun = "milestone",
  ): Promise<MilestoneMetadata> {
    assertName("name", name);
    const result = await this.database
      .updateTable("modeler_milestones")
      .set({ name, name_folded: foldName(name), ...changeColumns(actor, this.now().toISOString()) })
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (result.numUpdatedRows === 0n) throw notFound(noun, id);
    return milestoneMetadata(await findMilestoneMetadata(this.database, organizationId, id, noun));
  }

  /** Deletes a milestone. */
  async delete(organizationId: string, id: string, noun: MilestoneNoun = "milestone"): Promise<void> {
    const result = await this.database
      .deleteFrom("modeler_milestones")
      .where("organization_id", "=", organizationId)
      .where("id", "=", id)
      .executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound(noun, id);
  }

  /** Puts the milestone's content back into its file as a new revision; answers the file and the milestone. */
  async restore(
    organizationId: string,
    actor: Person,
    id: string,
    noun: MilestoneNoun = "milestone",
  ): Promise<{ file: FileMetadata; milestone: MilestoneMetadata }> {
    return await inTransaction(this.database, async (transaction) => {
      const milestone = await findMilestone(transaction, organizationId, id, noun);
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
      const file = await fileMetadata(
        transaction,
        organizationId,
        await findFile(transaction, organizationId, milestone.file_id),
      );
      return { file, milestone: milestoneMetadata(milestone) };
    });
  }

  /** Searches the organization's milestones. */
  async search(organizationId: string, request: SearchRequest): Promise<SearchPage<MilestoneMetadata>> {
    const page = await searchRows<MilestoneRow>(this.database, milestoneSearch, organizationId, request);
    return { items: page.items.map(milestoneMetadata), total: page.total };
  }

  /**
   * A signed link, valid for a few minutes, that serves the diff from milestone `fromId` to milestone `toId`, under the
   * API of `noun` (a version's link labels the diff's sides as versions).
   */
  async compare(
    organizationId: string,
    fromId: string,
    toId: string,
    noun: MilestoneNoun = "milestone",
  ): Promise<{ url: string }> {
    await findMilestoneMetadata(this.database, organizationId, fromId, noun);
    await findMilestoneMetadata(this.database, organizationId, toId, noun);
    const { grant, signature } = this.diffLinks.sign(organizationId, fromId, toId);
    const query = new URLSearchParams({
      organization: organizationId,
      expires: String(grant.expiresAtMs),
      signature,
    });
    return { url: `${this.baseUrl}/api/v1/${noun}s/compare/${fromId}...${toId}/diff?${query.toString()}` };
  }

  /** The unified diff a signed link grants (403 for a forged or expired link, 409 when too many lines differ). */
  async diff(grant: DiffGrant, signature: string, noun: MilestoneNoun = "milestone"): Promise<string> {
    return (await this.diffBody(grant, signature, noun)).toString("utf8");
  }

  /**
   * The unified diff a signed link grants, as the UTF-8 bytes the link serves: from the cache when it was computed
   * before, otherwise computed in the worker pool (403 for a forged or expired link, 404 when a milestone is gone,
   * 409 when the contents differ in more lines than the limit, 503 when the pool is full).
   */
  async diffBody(grant: DiffGrant, signature: string, noun: MilestoneNoun = "milestone"): Promise<Buffer> {
    this.diffLinks.verify(grant, signature);
    const from = await findMilestoneMetadata(this.database, grant.organizationId, grant.fromMilestoneId, noun);
    const to = await findMilestoneMetadata(this.database, grant.organizationId, grant.toMilestoneId, noun);
    const key = DiffCache.key(grant.organizationId, from, to, noun);
    let diff = this.diffCache.get(key) ?? (await this.diffsInProgress.get(key));
    if (diff === undefined) {
      const computation = this.computeDiff(grant.organizationId, from, to, noun);
      this.diffsInProgress.set(key, computation);
      try {
        diff = await computation;
      } finally {
        this.diffsInProgress.delete(key);
      }
      this.diffCache.set(key, diff);
    }
    if (diff.kind === "tooDifferent") {
      const found = diff.changedLinesAtLeast === null ? "more" : `at least ${diff.changedLinesAtLeast}`;
      throw conflict(
        `The two contents differ in ${found} lines (removed plus added); diffs are computed for at most ` +
          `${this.diffMaxEditLength} changed lines. Download both ${noun}s and compare them locally instead.`,
      );
    }
    return diff.body;
  }

  /** What the diff cache holds and how often it served a diff without computing it. */
  diffCacheStatistics(): DiffCacheStatistics {
    return this.diffCache.statistics();
  }

  private async computeDiff(
    organizationId: string,
    from: MilestoneRow,
    to: MilestoneRow,
    noun: MilestoneNoun,
  ): Promise<CachedDiff> {
    // Loading both contents is itself work on the event loop: a diff the pool would refuse is refused before it.
    this.tasks.assertCapacity();
    const fromContent = await milestoneContent(this.database, organizationId, from.id);
    const toContent = await milestoneContent(this.database, organizationId, to.id);
    const outcome = await this.tasks.run(
      "diffMilestones",
      {
        fromLabel: `${noun} ${from.name} (${from.id})`,
        toLabel: `${noun} ${to.name} (${to.id})`,
        fromContent,
        toContent,
        fromHeader: from.created_at,
        toHeader: to.created_at,
        maxChangedLines: this.diffMaxEditLength,
      },
      { inputBytes: Buffer.byteLength(fromContent) + Buffer.byteLength(toContent) },
    );
    if (outcome.kind === "tooDifferent") return outcome;
    return {
      kind: "patch",
      body: Buffer.from(outcome.bytes.buffer, outcome.bytes.byteOffset, outcome.bytes.byteLength),
    };
  }
}
