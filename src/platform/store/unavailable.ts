/**
 * Errors of the database drivers that say the database cannot serve now (it is down, restarting, locked by another
 * writer, out of disk or connections, or too slow), as opposed to a defect of the platform or of a request. A request
 * that meets one is answered 503 with `Retry-After` rather than 500: the client did nothing wrong and may succeed
 * later, and the platform's log gets one warning line instead of a stack trace per request.
 *
 * The store's dialect is wrapped (`withUnavailability`) so that such an error leaves the store as a
 * `DatabaseUnavailableError`: only errors of the database's own connections are classified, never a network error
 * of another dependency that happens to carry the same code.
 */
import type {
  CompiledQuery,
  DatabaseConnection,
  Dialect,
  Driver,
  QueryCompiler,
  QueryResult,
  TransactionSettings,
} from "kysely";
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

/** Rethrows `error` as a `DatabaseUnavailableError` when it says the database cannot serve now, else as it is. */
function classified(error: unknown): unknown {
  if (error instanceof DatabaseUnavailableError) return error;
  const reason = databaseUnavailableReason(error);
  return reason === null ? error : new DatabaseUnavailableError(reason, { cause: error });
}

async function classifying<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw classified(error);
  }
}

/** Options of `withUnavailability`. */
export interface UnavailabilityOptions {
  /**
   * How long a statement refused because another process holds the database's lock (SQLite's `SQLITE_BUSY`) is
   * tried again, on timers, before it counts as unavailable; 0: not at all. SQLite's own busy timeout waits with
   * the thread blocked, which would stop every other request of the process meanwhile.
   */
  retryWhileLockedMs: number;
}

/** First and longest pause between two tries of a statement refused by another process's lock. */
const lockedRetryDelayMs = { first: 2, longest: 100 } as const;

/** Whether a statement failed because another process holds the lock it needs, and may succeed as it is later. */
function lockedByAnotherProcess(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  // SQLITE_BUSY_SNAPSHOT is left out: the transaction read a state another writer has changed since, so the same
  // statement can never succeed in it.
  return code === "SQLITE_BUSY" || code === "SQLITE_BUSY_RECOVERY" || code === "SQLITE_BUSY_TIMEOUT";
}

/**
 * `dialect` with its driver's errors classified: those that say the database cannot serve now become
 * `DatabaseUnavailableError`s. Connections handed out are wrappers; the driver gets its own ones back.
 */
export function withUnavailability(dialect: Dialect, options: UnavailabilityOptions): Dialect {
  return {
    createAdapter: () => dialect.createAdapter(),
    createQueryCompiler: () => dialect.createQueryCompiler(),
    createIntrospector: (database) => dialect.createIntrospector(database),
    createDriver: () => new ClassifyingDriver(dialect.createDriver(), options),
  };
}

/** A connection whose queries' errors are classified. */
class ClassifyingConnection implements DatabaseConnection {
  constructor(
    readonly inner: DatabaseConnection,
    private readonly options: UnavailabilityOptions,
  ) {}

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    // A statement refused for a lock did nothing (SQLite statements are atomic), so it may be run again as it is.
    const deadlineMs = Date.now() + this.options.retryWhileLockedMs;
    for (
      let delayMs: number = lockedRetryDelayMs.first;
      ;
      delayMs = Math.min(delayMs * 2, lockedRetryDelayMs.longest)
    ) {
      try {
        return await this.inner.executeQuery<R>(compiledQuery);
      } catch (error) {
        if (!lockedByAnotherProcess(error) || Date.now() + delayMs > deadlineMs) throw classified(error);
      }
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  }

  async *streamQuery<R>(compiledQuery: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    try {
      yield* this.inner.streamQuery<R>(compiledQuery, chunkSize);
    } catch (error) {
      throw classified(error);
    }
  }
}

function innerOf(connection: DatabaseConnection): DatabaseConnection {
  if (!(connection instanceof ClassifyingConnection)) {
    throw new Error("invariant violated: the store's driver was given a connection it did not hand out");
  }
  return connection.inner;
}

/** A driver whose errors are classified (see `withUnavailability`). */
class ClassifyingDriver implements Driver {
  constructor(
    private readonly inner: Driver,
    private readonly options: UnavailabilityOptions,
  ) {}

  init(): Promise<void> {
    return classifying(() => this.inner.init());
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    return new ClassifyingConnection(await classifying(() => this.inner.acquireConnection()), this.options);
  }

  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return classifying(() => this.inner.beginTransaction(innerOf(connection), settings));
  }

  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return classifying(() => this.inner.commitTransaction(innerOf(connection)));
  }

  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return classifying(() => this.inner.rollbackTransaction(innerOf(connection)));
  }

  async savepoint(connection: DatabaseConnection, name: string, compile: QueryCompiler["compileQuery"]): Promise<void> {
    const savepoint = this.inner.savepoint?.bind(this.inner);
    if (savepoint === undefined) throw new Error("the database driver has no savepoints");
    await classifying(() => savepoint(innerOf(connection), name, compile));
  }

  async rollbackToSavepoint(
    connection: DatabaseConnection,
    name: string,
    compile: QueryCompiler["compileQuery"],
  ): Promise<void> {
    const rollbackToSavepoint = this.inner.rollbackToSavepoint?.bind(this.inner);
    if (rollbackToSavepoint === undefined) throw new Error("the database driver has no savepoints");
    await classifying(() => rollbackToSavepoint(innerOf(connection), name, compile));
  }

  async releaseSavepoint(
    connection: DatabaseConnection,
    name: string,
    compile: QueryCompiler["compileQuery"],
  ): Promise<void> {
    const releaseSavepoint = this.inner.releaseSavepoint?.bind(this.inner);
    if (releaseSavepoint === undefined) throw new Error("the database driver has no savepoints");
    await classifying(() => releaseSavepoint(innerOf(connection), name, compile));
  }

  releaseConnection(connection: DatabaseConnection): Promise<void> {
    return this.inner.releaseConnection(innerOf(connection));
  }

  destroy(): Promise<void> {
    return this.inner.destroy();
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
export function logBackgroundFailure(logger: Logger, error: unknown, fields: Record<string, unknown>, message: string) {
  if (error instanceof DatabaseUnavailableError) logger.warn({ ...fields, reason: error.reason }, message);
  else logger.error({ ...fields, err: error }, message);
}
