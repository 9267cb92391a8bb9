/**
 * The PostgreSQL connection pool of the store, bounded in time everywhere: waiting for a connection, a statement on
 * the server, and the client's wait for an answer from a server that stopped answering. A connection that failed in a
 * way that says the server or the network is away is closed rather than pooled again, so the next request opens a
 * fresh one instead of waiting on it again.
 */
import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from "kysely";
import pg from "pg";
import { databaseUnavailableReason } from "./unavailable.js";

/** Default of `PostgresPoolOptions.statementTimeoutMs`. */
export const DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS = 30_000;

/** Longest a request waits for a pooled connection, or for a new one to be made. */
export const POSTGRES_CONNECT_TIMEOUT_MS = 5_000;

/** How much longer than the statement timeout the client waits for an answer before it gives the connection up. */
export const POSTGRES_ANSWER_MARGIN_MS = 2_000;

// PostgreSQL returns BIGINT as text to avoid precision loss; our BIGINT columns hold millisecond instants,
// far below 2^53, so numbers are exact and keep both dialects answering the same types.
pg.types.setTypeParser(pg.types.builtins.INT8, (text) => Number(text));

/** Options of `createPostgresPool`. */
export interface PostgresPoolOptions {
  url: string;
  /** Largest number of pooled connections. */
  size: number;
  /** Longest a statement may run on the server; the client waits `POSTGRES_ANSWER_MARGIN_MS` longer for its answer. */
  statementTimeoutMs: number;
  /** Told of an error on an idle pooled connection (the server restarted or closed it). */
  onIdleConnectionError: (error: Error) => void;
}

/** The store's pool, for Kysely's `PostgresDialect`, and the `pg` pool behind it. */
export function createPostgresPool(options: PostgresPoolOptions): PostgresPool {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.size,
    connectionTimeoutMillis: POSTGRES_CONNECT_TIMEOUT_MS,
    // The server ends a statement that runs too long; the client gives up on a server that does not answer at all
    // (stopped, or gone without closing the connection), which TCP keep-alive also finds on an idle connection.
    statement_timeout: options.statementTimeoutMs,
    query_timeout: options.statementTimeoutMs + POSTGRES_ANSWER_MARGIN_MS,
    keepAlive: true,
  });
  // Without a listener, an idle connection the server closes (a restart, an administrator) would be an uncaught
  // error that ends the process; the pool drops that connection by itself.
  pool.on("error", (error) => options.onIdleConnectionError(error));
  return {
    connect: async () => closingWhenBroken(await pool.connect()),
    end: () => pool.end(),
  };
}

/**
 * `client`, released to the pool as usual unless one of its queries failed because the server or the network is
 * away: node-postgres keeps a connection whose answer timed out, and every later query on it would wait behind the
 * lost answer, so it is closed instead.
 */
function closingWhenBroken(client: pg.PoolClient): PostgresPoolClient {
  let broken = false;
  function query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  function query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>;
  function query<R>(
    text: string | PostgresCursor<R>,
    parameters?: ReadonlyArray<unknown>,
  ): Promise<PostgresQueryResult<R>> | PostgresCursor<R> {
    if (typeof text !== "string") throw new Error("the store does not read through cursors");
    return (client.query(text, parameters as unknown[]) as unknown as Promise<PostgresQueryResult<R>>).catch(
      (error: unknown) => {
        if (databaseUnavailableReason(error) !== null) broken = true;
        throw error;
      },
    );
  }
  return { query, release: () => client.release(broken) };
}
