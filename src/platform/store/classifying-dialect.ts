/**
 * The store's Kysely dialect, wrapped so that its driver's errors leave the store classified (`unavailable.ts`): an
 * error saying the database cannot serve now becomes a `DatabaseUnavailableError`. On SQLite, a statement refused
 * because another process holds the database's lock is also tried again on timers for a while, instead of waiting
 * in SQLite's busy handler with the thread (and every other request of the process) blocked.
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
import { monotonicNowMs } from "../../time/monotonic.js";
import { DatabaseUnavailableError, databaseUnavailableReason } from "./unavailable.js";

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

/** Options of `classifyingDialect`. */
export interface ClassifyingDialectOptions {
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
export function classifyingDialect(dialect: Dialect, options: ClassifyingDialectOptions): Dialect {
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
    private readonly options: ClassifyingDialectOptions,
  ) {}

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    // A statement refused for a lock did nothing (SQLite statements are atomic), so it may be run again as it is.
    const deadlineMs = monotonicNowMs() + this.options.retryWhileLockedMs;
    for (
      let delayMs: number = lockedRetryDelayMs.first;
      ;
      delayMs = Math.min(delayMs * 2, lockedRetryDelayMs.longest)
    ) {
      try {
        return await this.inner.executeQuery<R>(compiledQuery);
      } catch (error) {
        if (!lockedByAnotherProcess(error) || monotonicNowMs() + delayMs > deadlineMs) throw classified(error);
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

/** A driver whose errors are classified (see `classifyingDialect`). */
class ClassifyingDriver implements Driver {
  constructor(
    private readonly inner: Driver,
    private readonly options: ClassifyingDialectOptions,
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

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await this.inner.rollbackTransaction(innerOf(connection));
    } catch (error) {
      // SQLite ends a transaction by itself on some errors (a full disk, an I/O error, a trigger's RAISE(ROLLBACK)):
      // nothing is left to roll back, and the error that ended it, which the caller rethrows, is the one to report.
      if (error instanceof Error && /no transaction is active/.test(error.message)) return;
      throw classified(error);
    }
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
