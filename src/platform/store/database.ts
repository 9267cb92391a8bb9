import { dirname, resolve } from "node:path";
import SqliteDatabase from "better-sqlite3";
import { type Dialect, Kysely, Migrator, PostgresDialect, SqliteAdapter, SqliteDialect, sql } from "kysely";
import { createPrivateDirectory, ownPrivateFile, restrictFileIfPresent } from "../../files/private-files.js";
import { classifyingDialect } from "./classifying-dialect.js";
import { type KeyEncryptionKeySettings, resolveKeyEncryptionKey } from "./key-encryption-key.js";
import { holdsSealedValues, protectKeyMaterial, sealedKeyId } from "./key-material.js";
import { migrationProvider } from "./migrations/index.js";
import { createPostgresPool, DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS } from "./postgres-pool.js";
import type { PlatformDatabase } from "./schema.js";
import { SecretsBox } from "./secrets-box.js";
import { DatabaseUnavailableError } from "./unavailable.js";

/** Which engine backs the store. */
export type DatabaseKind = "sqlite" | "postgres";

/** An open platform database, migrated to the latest schema. */
export interface Store {
  readonly kind: DatabaseKind;
  readonly database: Kysely<PlatformDatabase>;
  /** Seals and opens the key material kept in the database, under the key-encryption key. */
  readonly secrets: SecretsBox;
  /** Where the key-encryption key came from (never the key), and the key file this start generated, if any. */
  readonly keyEncryption: { source: string; createdKeyFile: string | undefined };
  /** Closes every connection. */
  close(): Promise<void>;
}

/** Options of `openStore`. */
export interface StoreOptions {
  /** Empty for the default SQLite file, `sqlite:<file>` for another one, or a `postgres://` URL. */
  url: string;
  /** Data directory holding the default SQLite file. */
  dataDirectory: string;
  /** Largest number of pooled PostgreSQL connections. */
  postgresPoolSize?: number;
  /**
   * Longest a PostgreSQL statement may run, and a little longer the client waits for its answer (default 30 s):
   * a request never waits forever on a server that stopped answering.
   */
  postgresStatementTimeoutMs?: number;
  /**
   * Told of an error on an idle pooled PostgreSQL connection (the server restarted or closed it); the pool drops
   * that connection and opens another when needed.
   */
  onIdleConnectionError?: (error: Error) => void;
  /**
   * The key-encryption key (`service.secrets.*`); by default none is configured and the key file
   * `<dataDirectory>/keys/secrets.key` is used, generated on the first start.
   */
  secrets?: KeyEncryptionKeySettings;
}

/** How long a SQLite statement waits for a lock another process holds before the request is answered 503. */
export const SQLITE_LOCK_WAIT_MS = 5_000;

/** How long SQLite's own busy handler waits, blocking the thread: only a brief hold-up is absorbed there. */
const SQLITE_BUSY_HANDLER_MS = 10;

/** Resolves the configured URL to the engine and its location. */
export function describeDatabase(options: StoreOptions): { kind: DatabaseKind; location: string } {
  if (/^postgres(ql)?:\/\//.test(options.url)) {
    const url = new URL(options.url);
    return { kind: "postgres", location: `${url.hostname}:${url.port || "5432"}${url.pathname}` };
  }
  const file = options.url.startsWith("sqlite:") ? options.url.slice("sqlite:".length) : "platform.sqlite";
  return { kind: "sqlite", location: resolve(options.dataDirectory, file) };
}

/**
 * Opens the database the options name, creating and migrating it when needed, and protects its key material: the
 * SQLite file is kept 0600 in a directory created 0700, and key material is sealed under the key-encryption key
 * (plain values of earlier versions are sealed in place). Throws `KeyEncryptionKeyError` when that key is
 * malformed, missing or not the database's.
 */
export async function openStore(options: StoreOptions): Promise<Store> {
  const { kind, location } = describeDatabase(options);
  let database: Kysely<PlatformDatabase>;
  if (kind === "postgres") {
    const pool = createPostgresPool({
      url: options.url,
      size: options.postgresPoolSize ?? 10,
      statementTimeoutMs: options.postgresStatementTimeoutMs ?? DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS,
      onIdleConnectionError: (error) => options.onIdleConnectionError?.(error),
    });
    database = new Kysely<PlatformDatabase>({
      dialect: classifyingDialect(new PostgresDialect({ pool }), { retryWhileLockedMs: 0 }),
    });
  } else {
    createPrivateDirectory(dirname(location));
    // SQLite creates its write-ahead log and shared-memory files with the database file's mode, so a 0600 database
    // keeps all three private. Files of earlier versions, created 0644, are narrowed here.
    ownPrivateFile(location);
    restrictFileIfPresent(`${location}-wal`);
    restrictFileIfPresent(`${location}-shm`);
    const sqlite = new SqliteDatabase(location);
    // WAL lets readers proceed while one writer commits; NORMAL sync is durable across process crashes and
    // loses at most the last transactions on power loss, which the rate-limit counters can afford and the
    // rest of the data (written rarely) is checkpointed promptly.
    sqlite.pragma("journal_mode = WAL");
    sqlite.pragma("synchronous = NORMAL");
    sqlite.pragma("foreign_keys = ON");
    // A lock held by another process is waited for on timers (`SQLITE_LOCK_WAIT_MS`, see unavailable.ts), not in
    // SQLite's busy handler, which would block the thread and with it every other request.
    sqlite.pragma(`busy_timeout = ${SQLITE_BUSY_HANDLER_MS}`);
    database = new Kysely<PlatformDatabase>({ dialect: sqliteDialect(withStatementCache(sqlite)) });
  }
  try {
    await migrate(database);
    const resolved = await resolveKeyEncryptionKey({
      settings: options.secrets ?? { key: "", keyFile: "" },
      dataDirectory: options.dataDirectory,
      databaseHoldsSealedValues: () => holdsSealedValues(database),
      databaseKeyId: () => sealedKeyId(database),
    });
    const secrets = SecretsBox.withKey(resolved.key);
    await protectKeyMaterial(database, secrets, resolved.source);
    return {
      kind,
      database,
      secrets,
      keyEncryption: { source: resolved.source, createdKeyFile: resolved.createdKeyFile },
      close: () => database.destroy(),
    };
  } catch (error) {
    await database.destroy();
    throw error;
  }
}

/**
 * Makes every transaction committed so far durable against a power loss, for a state that a following step outside
 * the database (a file renamed or deleted) relies on. PostgreSQL's commits are durable already. SQLite runs WAL with
 * synchronous=NORMAL, whose commits reach the disk only at the next checkpoint, so one is run here: it syncs the
 * write-ahead log before it copies it into the database file.
 */
export async function makeCommitsDurable(database: Kysely<PlatformDatabase>): Promise<void> {
  if (!(database.getExecutor().adapter instanceof SqliteAdapter)) return;
  await sql`PRAGMA wal_checkpoint(FULL)`.execute(database);
}

/** Most distinct statements kept prepared; Kysely's SQL text is bounded by the code paths, so this is ample. */
const statementCacheEntries = 500;

/**
 * Kysely prepares every statement on every query; preparing costs more than running the small statements of the
 * hot paths (a profile of the token endpoint showed 13% in `prepare`). Statements are cached by SQL text, oldest
 * dropped first once the cache is full.
 */
function withStatementCache(sqlite: SqliteDatabase.Database): SqliteDatabase.Database {
  const statements = new Map<string, SqliteDatabase.Statement>();
  // One function for every query, rather than a new closure each time the driver reads `prepare`.
  const prepareCached = (source: string): SqliteDatabase.Statement => {
    let statement = statements.get(source);
    if (statement === undefined) {
      statement = sqlite.prepare(source);
      if (statements.size >= statementCacheEntries) statements.delete(statements.keys().next().value as string);
      statements.set(source, statement);
    }
    return statement;
  };
  return new Proxy(sqlite, {
    get(target, property, receiver) {
      return property === "prepare" ? prepareCached : Reflect.get(target, property, receiver);
    },
  });
}

/** Brings the schema to the latest migration; throws with the failing migration's name. */
/**
 * SQLite's adapter, saying what SQLite does: it runs schema changes (DDL) inside transactions. Kysely's own adapter
 * says it does not, so its migrator ran each migration's statements one by one, and a crash between two of them left
 * a migration half applied, which every later start then failed to apply again.
 */
class TransactionalSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

/** The store's SQLite dialect over `sqlite`: errors classified, locks waited for on timers, migrations atomic. */
export function sqliteDialect(sqlite: SqliteDatabase.Database): Dialect {
  const dialect = classifyingDialect(new SqliteDialect({ database: sqlite }), {
    retryWhileLockedMs: SQLITE_LOCK_WAIT_MS,
  });
  return { ...dialect, createAdapter: () => new TransactionalSqliteAdapter() };
}

/** Names of the migrations the database records as applied, none when it has no migration table yet. */
async function appliedMigrations(database: Kysely<PlatformDatabase>): Promise<string[]> {
  try {
    const result = await sql<{ name: string }>`SELECT name FROM kysely_migration`.execute(database);
    return result.rows.map((row) => row.name);
  } catch (error) {
    if (error instanceof DatabaseUnavailableError) throw error;
    return [];
  }
}

async function migrate(database: Kysely<PlatformDatabase>): Promise<void> {
  const known = new Set(Object.keys(await migrationProvider.getMigrations()));
  const unknown = (await appliedMigrations(database)).filter((name) => !known.has(name)).sort();
  if (unknown.length > 0) {
    throw new Error(
      `the database was upgraded by a newer flowplane (it applied migration ${unknown.at(-1)}, which this version ` +
        "does not know): run that version or a newer one, or restore a copy of the data directory (or database) " +
        "taken before the upgrade",
    );
  }
  const migrator = new Migrator({ db: database, provider: migrationProvider });
  const { error, results } = await migrator.migrateToLatest();
  if (error !== undefined) {
    const failed = results?.find((result) => result.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`database migration ${failed} failed: ${(error as Error).message ?? String(error)}`, {
      cause: error,
    });
  }
}
