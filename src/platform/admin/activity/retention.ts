/**
 * Keeps the activity log to its retention period. Every change made through the Administration API adds an entry,
 * and nothing else ever removed one, so a platform that runs for years, or one whose clients script changes in a
 * loop, grew the table (and its SQLite file or PostgreSQL database) without bound. Entries older than
 * `service.platform.activity.retentionDays` are deleted at start and once an hour, organization by organization
 * through the index that reading an organization's entries uses, in statements of a bounded number of rows so that
 * no statement holds the table for long, and a bounded number of statements per round, so that a first round over
 * years of entries shares the database with the requests being served; what one round leaves, the next deletes.
 * Several platform replicas of one database may each do this: a deletion is the same whoever makes it.
 */
import { setImmediate as nextTurn } from "node:timers/promises";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import type { PlatformDatabase } from "../../store/schema.js";
import { logBackgroundFailure } from "../../store/unavailable.js";

/** How often entries beyond the retention period are looked for. */
export const activityRetentionIntervalMs = 60 * 60 * 1000;

/** The bounds of a round when the caller names none: statements of 1,000 rows, 1,000 statements. */
export const defaultRetentionBounds = { entriesPerStatement: 1_000, statementsPerRound: 1_000 } as const;

const millisecondsPerDay = 24 * 60 * 60 * 1000;

/** What `ActivityRetention` needs. */
export interface ActivityRetentionOptions {
  readonly database: Kysely<PlatformDatabase>;
  /** Days an entry is kept; 0 keeps every entry. */
  readonly retentionDays: number;
  readonly now: () => Date;
  readonly logger: Logger;
  /** Entries one statement deletes at most (default 1,000). */
  readonly entriesPerStatement?: number;
  /** Statements one round makes at most (default 1,000). */
  readonly statementsPerRound?: number;
}

/** Whether `error` is PostgreSQL rolling a statement back to resolve a conflict (class 40: deadlock, serialization). */
function isConflictRollback(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^40[0-9A-Z]{3}$/.test(code);
}

/** Deletes activity entries older than the retention period, at start and every hour, until `close`. */
export class ActivityRetention {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private closed = false;

  private readonly entriesPerStatement: number;
  private readonly statementsPerRound: number;

  constructor(private readonly options: ActivityRetentionOptions) {
    if (!Number.isSafeInteger(options.retentionDays) || options.retentionDays < 0) {
      throw new Error(`activity retention must be a whole number of days, at least 0; got ${options.retentionDays}`);
    }
    this.entriesPerStatement = options.entriesPerStatement ?? defaultRetentionBounds.entriesPerStatement;
    this.statementsPerRound = options.statementsPerRound ?? defaultRetentionBounds.statementsPerRound;
    for (const [name, value] of [
      ["entriesPerStatement", this.entriesPerStatement],
      ["statementsPerRound", this.statementsPerRound],
    ] as const) {
      if (!Number.isSafeInteger(value) || value < 1) {
        throw new Error(`activity retention's ${name} must be a positive whole number; got ${value}`);
      }
    }
  }

  /** Runs a round now and then every `activityRetentionIntervalMs`; does nothing when every entry is kept. */
  start(): void {
    if (this.options.retentionDays === 0 || this.timer !== undefined || this.closed) return;
    this.runRound();
    this.timer = setInterval(() => this.runRound(), activityRetentionIntervalMs);
    this.timer.unref();
  }

  private runRound(): void {
    if (this.round !== undefined) return;
    this.round = this.deleteExpired()
      .then(() => undefined)
      .catch((error: unknown) => {
        if (isConflictRollback(error)) {
          // Another platform replica deleted the same entries at the same moment; the next round goes on.
          this.options.logger.warn(
            { code: (error as { code: string }).code },
            "deleting the expired activity entries conflicted with another deletion; the next round goes on",
          );
          return;
        }
        logBackgroundFailure(this.options.logger, error, {}, "could not delete the expired activity entries");
      })
      .finally(() => {
        this.round = undefined;
      });
  }

  /**
   * Deletes the entries recorded before the retention period began, each organization's oldest first; answers how
   * many. Stops after `statementsPerRound` statements, or at `close`.
   */
  async deleteExpired(): Promise<number> {
    if (this.options.retentionDays === 0) return 0;
    const cutoff = new Date(this.options.now().getTime() - this.options.retentionDays * millisecondsPerDay);
    const cutoffText = cutoff.toISOString();
    const organizations = await this.options.database.selectFrom("organizations").select("id").orderBy("id").execute();
    let deleted = 0;
    let statements = 0;
    for (const { id: organizationId } of organizations) {
      for (;;) {
        if (statements >= this.statementsPerRound || this.closed) return this.reportDeleted(deleted, cutoffText);
        statements++;
        const result = await this.options.database
          .deleteFrom("activity")
          .where("sequence", "in", (query) =>
            query
              .selectFrom("activity")
              .select("sequence")
              .where("organization_id", "=", organizationId)
              .where("recorded_at", "<", cutoffText)
              .orderBy("recorded_at")
              .orderBy("sequence")
              .limit(this.entriesPerStatement),
          )
          .executeTakeFirst();
        const rows = Number(result.numDeletedRows);
        deleted += rows;
        // SQLite runs each statement on this thread: the requests waiting meanwhile get their turn between statements.
        await nextTurn();
        if (rows < this.entriesPerStatement) break;
      }
    }
    return this.reportDeleted(deleted, cutoffText);
  }

  private reportDeleted(deleted: number, cutoffText: string): number {
    if (deleted > 0) {
      this.options.logger.info(
        { deletedEntries: deleted, recordedBefore: cutoffText, retentionDays: this.options.retentionDays },
        "deleted activity entries older than the retention period",
      );
    }
    return deleted;
  }

  /** Stops the rounds; waits for one that is running to end after its current statement. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.round;
  }
}
