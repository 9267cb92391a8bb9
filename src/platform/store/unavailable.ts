/**
 * Errors of the database drivers that say the database cannot serve now (it is down, restarting, locked by another
 * writer, out of disk or connections, or too slow), as opposed to a defect of the platform or of a request. A request
 * that meets one is answered 503 with `Retry-After` rather than 500: the client did nothing wrong and may succeed
 * later, and the platform's log gets one warning line instead of a stack trace per request.
 *
 * The store's dialect is wrapped (`classifying-dialect.ts`) so that such an error leaves the store as a
 * `DatabaseUnavailableError`: only errors of the database's own connections are classified, never a network error
 * of another dependency that happens to carry the same code.
 */
import type { Logger } from "pino";
import { ServiceError } from "../../http/errors.js";

/** Seconds a client is asked to wait before it retries a request the database could not serve. */
export const DATABASE_RETRY_AFTER_SECONDS = 5;

/** SQLite result codes (better-sqlite3's `SqliteError.code`, extended codes included) by prefix. */
const sqliteReasons: readonly [prefix: string, reason: string][] = [
  ["SQLITE_BUSY", "the database file is locked by another writer"],
  ["SQLITE_LOCKED", "the database file is locked by another writer"],
  ["SQLITE_FULL", "the disk holding the database is full"],
  ["SQLITE_IOERR", "the database file cannot be read or written"],
  ["SQLITE_READONLY", "the database file cannot be written"],
  ["SQLITE_CANTOPEN", "the database file cannot be opened"],
];

/**
 * PostgreSQL SQLSTATE codes and classes (appendix A of its manual) that are about the server's state, not the
 * statement: connection exceptions (class 08), insufficient resources (53), operator intervention (57: shutdown,
 * restart, a statement cancelled by its timeout), and a lock that could not be had (55P03).
 */
function postgresReason(sqlState: string): string | null {
  if (sqlState.startsWith("08")) return "the connection to the database failed";
  if (sqlState === "53100") return "the disk holding the database is full";
  if (sqlState.startsWith("53")) return "the database is out of connections or memory";
  if (sqlState === "57014") return "the database did not answer within the statement timeout";
  if (sqlState.startsWith("57P")) return "the database is shutting down or starting";
  if (sqlState === "55P03") return "a lock of the database could not be had";
  if (sqlState === "25006") return "the database accepts only reads (a standby)";
  return null;
}

/** Node's error codes of a connection that could not be made or was lost. */
const networkCodes = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * Messages of node-postgres that carry no code: a connection the server closed, a connection or a query that took
 * longer than the pool's timeouts.
 */
const postgresClientMessages: readonly RegExp[] = [
  /^Connection terminated/,
  /^timeout exceeded when trying to connect$/,
  /^Query read timeout$/,
  /^Client has encountered a connection error and is not queryable$/,
];

/** Why the database cannot serve now, for a driver error that says so; null for every other error. */
export function databaseUnavailableReason(error: unknown): string | null {
  if (!(error instanceof Error)) return null;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string") {
    for (const [prefix, reason] of sqliteReasons) if (code.startsWith(prefix)) return reason;
    if (/^[0-9A-Z]{5}$/.test(code)) {
      const reason = postgresReason(code);
      if (reason !== null) return reason;
    }
    if (networkCodes.has(code)) return "the database cannot be reached";
  }
  if (postgresClientMessages.some((pattern) => pattern.test(error.message))) {
    return "the connection to the database failed or timed out";
  }
  // A pool that could connect to none of a host's addresses reports them together.
  if (error instanceof AggregateError && error.errors.some((inner) => databaseUnavailableReason(inner) !== null)) {
    return "the database cannot be reached";
  }
  return null;
}

/** A driver error of the store's database that says it cannot serve now; `cause` is the driver's error. */
export class DatabaseUnavailableError extends Error {
  constructor(
    readonly reason: string,
    options: { cause: unknown },
  ) {
    super(`the database cannot serve now: ${reason}`, options);
    this.name = "DatabaseUnavailableError";
  }
}

/** The 503 for an error of the store that says the database cannot serve now, or null for any other error. */
export function databaseUnavailable(error: unknown): ServiceError | null {
  if (!(error instanceof DatabaseUnavailableError)) return null;
  return new ServiceError(
    "unavailable",
    `The platform's database cannot serve the request now: ${error.reason}. Retry later.`,
    { headers: { "retry-after": String(DATABASE_RETRY_AFTER_SECONDS) }, cause: error },
  );
}

/**
 * Logs the failure of work the platform does on its own (a health poll, a schedule): one warning naming the reason
 * when the database cannot serve now, which is expected to pass and repeats at every round, else the error with its
 * stack.
 */
export function logBackgroundFailure(
  logger: Logger,
  error: unknown,
  fields: Record<string, unknown>,
  message: string,
): void {
  if (error instanceof DatabaseUnavailableError) logger.warn({ ...fields, reason: error.reason }, message);
  else logger.error({ ...fields, err: error }, message);
}
