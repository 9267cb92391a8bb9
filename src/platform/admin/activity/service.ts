import type { Kysely } from "kysely";
import type { Logger } from "pino";
import type { PlatformDatabase } from "../../store/schema.js";
import { DatabaseUnavailableError } from "../../store/unavailable.js";

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
  /** When the change was made, in milliseconds since 1970-01-01 UTC (the reference SDK's type is a number). */
  timestamp: number;
  /** The change in words, e.g. `created member ana@example.com`. */
  audit: string;
}

const auditVerbs: Record<AuditType, string> = { c: "created", r: "read", u: "updated", d: "deleted" };

/** An entry's change in words: what was done to which resource. */
export function auditText(auditType: AuditType, entity: string, entityId: string): string {
  return `${auditVerbs[auditType]} ${entity} ${entityId}`;
}

/** Which entries to read: the newest `limit` ones, none older than `since`. */
export interface ActivityQuery {
  limit: number;
  /** Earliest instant of an entry to include. */
  since?: Date;
}

/** Most entries `recordEventually` keeps in memory while the database cannot take them. */
export const maxPendingActivityEntries = 10_000;

/** First and longest wait before entries the database refused are written again. */
const retryDelayMs = { first: 1_000, longest: 30_000 } as const;

/** An entry waiting for the database, with the time of its change. */
interface PendingEntry {
  readonly change: ActivityRecord;
  readonly recordedAt: Date;
}

/** Records the changes made through the Administration API and reads them back per organization. */
export class ActivityService {
  private readonly pending: PendingEntry[] = [];
  private retryTimer: NodeJS.Timeout | undefined;
  private retryDelayMs: number = retryDelayMs.first;
  private lostEntries = 0;

  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
    /** Told of entries kept for later and of entries lost; silent when absent. */
    private readonly logger?: Logger,
  ) {}

  /** Entries waiting for the database to take them (see `recordEventually`). */
  get pendingCount(): number {
    return this.pending.length;
  }

  /**
   * Records one change that has already been made (committed). When the database cannot take the entry now, the
   * entry is kept in memory, with its time, and written again in the background until it lands: the change must
   * still be answered as the success it was, since a client told "unavailable" would make it again (and a created
   * client's secret, shown only in that answer, would be lost). Other errors are thrown.
   */
  async recordEventually(change: ActivityRecord): Promise<void> {
    const recordedAt = this.now();
    try {
      await this.record(change, recordedAt);
    } catch (error) {
      if (!(error instanceof DatabaseUnavailableError)) throw error;
      this.keepForLater({ change, recordedAt }, error.reason);
    }
  }

  private keepForLater(entry: PendingEntry, reason: string): void {
    if (this.pending.length >= maxPendingActivityEntries) {
      this.lostEntries += 1;
      this.logger?.error(
        { entity: entry.change.entity, entityId: entry.change.entityId, lostEntries: this.lostEntries },
        `an activity entry is lost: the database cannot take entries (${reason}) and ${maxPendingActivityEntries} wait already`,
      );
      return;
    }
    this.pending.push(entry);
    this.logger?.warn(
      { reason, pendingEntries: this.pending.length },
      "the database cannot take an activity entry now; it is kept and written again later",
    );
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.retryTimer !== undefined) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.writePending();
    }, this.retryDelayMs);
    this.retryTimer.unref();
  }

  /** Writes the waiting entries in order; stops at the first the database still refuses, and tries again later. */
  private async writePending(): Promise<void> {
    while (this.pending.length > 0) {
      const entry = this.pending[0] as PendingEntry;
      try {
        await this.record(entry.change, entry.recordedAt);
      } catch (error) {
        if (!(error instanceof DatabaseUnavailableError)) {
          this.pending.shift();
          this.logger?.error({ err: error, entity: entry.change.entity }, "an activity entry could not be written");
          continue;
        }
        this.retryDelayMs = Math.min(this.retryDelayMs * 2, retryDelayMs.longest);
        this.scheduleRetry();
        return;
      }
      this.pending.shift();
    }
    this.retryDelayMs = retryDelayMs.first;
    this.logger?.info("the activity entries kept while the database could not take them are written");
  }

  /** Writes what waits one last time, then stops retrying; entries still refused are logged as lost. */
  async close(): Promise<void> {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    if (this.pending.length === 0) return;
    await this.writePending();
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    if (this.pending.length > 0) {
      this.logger?.error(
        { lostEntries: this.pending.length },
        "activity entries are lost: the database could not take them before the platform stopped",
      );
      this.pending.length = 0;
    }
  }

  /** Records one change at `recordedAt` (now by default); call it once the change has succeeded. */
  async record(change: ActivityRecord, recordedAt: Date = this.now()): Promise<void> {
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
        recorded_at: recordedAt.toISOString(),
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
      timestamp: Date.parse(row.recorded_at),
      audit: auditText(row.audit_type as AuditType, row.entity, row.entity_id),
    }));
  }
}
