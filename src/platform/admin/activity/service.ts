import type { Kysely } from "kysely";
import type { PlatformDatabase } from "../../store/schema.js";

/** What a change did: created, read, updated or deleted. */
export type AuditType = "c" | "r" | "u" | "d";

/** The service entries name unless their caller says otherwise: the Administration API. */
export const administrationService = "administration";

/** Default and largest number of entries one request answers. */
export const defaultActivityLimit = 100;
export const maxActivityLimit = 1_000;

/** Longest entity name or entity id an entry keeps; callers pass ids their routes have already bounded. */
const maxRecordedCharacters = 1_024;

/** One change to record. Names and ids only: never a secret value. */
export interface ActivityRecord {
  organizationId: string;
  /** The kind of resource changed, e.g. `member`. */
  entity: string;
  /** Which one, e.g. the member's email. */
  entityId: string;
  auditType: AuditType;
  /** The API client that made the change (the token's subject). */
  userId: string;
  /** The API the change went through (default: the Administration API). */
  service?: string;
}

/** An entry as `GET /activity/json` answers it. */
export interface ActivityEntry {
  service: string;
  orgId: string;
  auditType: AuditType;
  entity: string;
  entityId: string;
  userId: string;
  timestamp: string;
}

/** Which entries to read: the newest `limit` ones, none older than `since`. */
export interface ActivityQuery {
  limit: number;
  /** Earliest instant of an entry to include. */
  since?: Date;
}

/** Records the changes made through the Administration API and reads them back per organization. */
export class ActivityService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Records one change; call it once the change has succeeded. */
  async record(change: ActivityRecord): Promise<void> {
    for (const [field, value] of [
      ["entity", change.entity],
      ["entityId", change.entityId],
      ["userId", change.userId],
    ] as const) {
      if (value.length > maxRecordedCharacters) {
        throw new Error(`ActivityService.record: ${field} is longer than ${maxRecordedCharacters} characters`);
      }
    }
    await this.database
      .insertInto("activity")
      .values({
        organization_id: change.organizationId,
        service: change.service ?? administrationService,
        audit_type: change.auditType,
        entity: change.entity,
        entity_id: change.entityId,
        user_id: change.userId,
        recorded_at: this.now().toISOString(),
      })
      .execute();
  }

  /** The organization's entries, newest first (ties in the order they were recorded, latest first). */
  async list(organizationId: string, query: ActivityQuery): Promise<ActivityEntry[]> {
    let select = this.database
      .selectFrom("activity")
      .select(["service", "organization_id", "audit_type", "entity", "entity_id", "user_id", "recorded_at"])
      .where("organization_id", "=", organizationId);
    if (query.since !== undefined) select = select.where("recorded_at", ">=", query.since.toISOString());
    const rows = await select
      .orderBy("recorded_at", "desc")
      .orderBy("sequence", "desc")
      .limit(Math.min(Math.max(query.limit, 1), maxActivityLimit))
      .execute();
    return rows.map((row) => ({
      service: row.service,
      orgId: row.organization_id,
      auditType: row.audit_type as AuditType,
      entity: row.entity,
      entityId: row.entity_id,
      userId: row.user_id,
      timestamp: row.recorded_at,
    }));
  }
}
