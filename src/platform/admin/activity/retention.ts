/**
 * Keeps the activity log to its retention period. Every change made through the Administration API adds an entry,
 * and nothing else ever removed one, so a platform that runs for years, or one whose clients script changes in a
 * loop, grew the table (and its SQLite file or PostgreSQL database) without bound. Entries older than
 * `service.platform.activity.retentionDays` are deleted once an hour, in statements of a bounded number of rows so
 * that no statement holds the table for long, and a bounded number of statements per round, so that a first round
 * over years of entries shares the database with the requests being served; what one round leaves, the next deletes.
 * Several platform replicas of one database may each do this: a deletion is the same whoever makes it.
 */
import { setImmediate as nextTurn } from "node:timers/promises";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import type { PlatformDatabase } from "../../store/schema.js";
import { logBackgroundFailure } from "../../store/unavailable.js";

/** How often entries beyond the retention period are looked for. */
export const activityRetentionIntervalMs = 60 * 60 * 1000;

/** Entries one statement deletes at most. */
export const activityEntriesPerDeletion = 1_000;

/** Statements one round makes at most (a million entries). */
const maxDeletionsPerRound = 1_000;

const millisecondsPerDay = 24 * 60 * 60 * 1000;

/** What `ActivityRetention` needs. */
export interface ActivityRetentionOptions {
  readonly database: Kysely<PlatformDatabase>;
  /** Days an entry is kept; 0 keeps every entry. */
  readonly retentionDays: number;
  readonly now: () => Date;
  readonly logger: Logger;
}

/** Deletes activity entries older than the retention period, at start and every hour, until `close`. */
export class ActivityRetention {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly options: ActivityRetentionOptions) {
    if (!Number.isSafeInteger(options.retentionDays) || options.retentionDays < 0) {
      throw new Error(`activity retention must be a whole number of days, at least 0; got ${options.retentionDays}`);
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
      .catch((error: unknown) =>
        logBackgroundFailure(this.options.logger, error, {}, "could not delete the expired activity entries"),
      )
      .finally(() => {
        this.round = undefined;
      });
  }

  /**
   * Deletes the entries recorded before the retention period began, oldest first; answers how many. Stops after
   * `maxDeletionsPerRound` statements, or at `close`.
   */
  async deleteExpired(): Promise<number> {
    if (this.options.retentionDays === 0) return 0;
    const cutoff = new Date(this.options.now().getTime() - this.options.retentionDays * millisecondsPerDay);
    const cutoffText = cutoff.toISOString();
    let deleted = 0;
    for (let statement = 0; statement < maxDeletionsPerRound && !this.closed; statement++) {
      const result = await this.options.database
        .deleteFrom("activity")
        .where("sequence", "in", (query) =>
          query
            .selectFrom("activity")
            .select("sequence")
            .where("recorded_at", "<", cutoffText)
            .orderBy("recorded_at")
            .limit(activityEntriesPerDeletion),
        )
        .executeTakeFirst();
      const rows = Number(result.numDeletedRows);
      deleted += rows;
      if (rows < activityEntriesPerDeletion) break;
      // SQLite runs each statement on this thread: the requests waiting meanwhile get their turn between statements.
      await nextTurn();
    }
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
