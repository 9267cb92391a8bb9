import { type Kysely, sql } from "kysely";
import type { Clock } from "../../auth/clock.js";
import { connectionAddressKey } from "../../net/address-key.js";
import { CompiledStatement } from "../store/compiled-statement.js";
import type { PlatformDatabase } from "../store/schema.js";

/** The limit of one kind of request per source address: a token bucket, and a block once it is exceeded. */
export interface AddressBucketSettings {
  /** Requests one address may make at once. */
  burst: number;
  /** Sustained requests per second per address. */
  refillPerSecond: number;
  /** How long an address that exceeded the limit stays blocked. */
  blockSeconds: number;
}

/** The rate-limit settings of the configuration (`rateLimit.*`). */
export interface RateLimitSettings extends AddressBucketSettings {
  /** Delay after the first failed authentication of a client id from one address; it doubles with each further one. */
  failureDelayBaseMs: number;
  /** Cap of the failed-authentication delay. */
  failureDelayMaxMs: number;
}

/** The answer of the limiter for one request. */
export type RateDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/** Options of `TokenRateLimiter`. */
export interface TokenRateLimiterOptions {
  database: Kysely<PlatformDatabase>;
  settings: RateLimitSettings;
  clock: Clock;
  /** How often rows that no longer limit anything are deleted (checked on each request). */
  pruneIntervalMs?: number;
  /** After this long without a failure, the failure count of a client id at an address is forgotten. */
  failureMemoryMs?: number;
}

/** Consecutive failures beyond this no longer grow the delay; it also keeps the shifted delay far from overflow. */
const maximumCountedFailures = 30;

/** Whole seconds a client should wait until `untilMs`, never less than one. */
function secondsUntil(untilMs: number, nowMs: number): number {
  return Math.max(1, Math.ceil((untilMs - nowMs) / 1000));
}

/** A bucket as the upsert of `consumeAddress` returns it. */
interface BucketRow {
  tokens: number;
  updated_at_ms: number;
  blocked_until_ms: number;
}

/**
 * The upsert that takes one token from an address's bucket, compiled with the settings fixed; each execution
 * gives the bucket's key and the current instant (`now`, whole milliseconds).
 */
function compileConsumeStatement(
  database: Kysely<PlatformDatabase>,
  settings: AddressBucketSettings,
): CompiledStatement<BucketRow, "address" | "now"> {
  return new CompiledStatement(database, (slot) => {
    const burst = settings.burst;
    const refillPerMs = settings.refillPerSecond / 1000;
    // At least one millisecond, so a refused request is always recognizable by a block that ends after `now`.
    const blockMs = Math.max(1, settings.blockSeconds * 1000);
    const nowParameter = sql`CAST(${slot("now")} AS BIGINT)`;
    // A block ending further off than a whole block was started before the wall clock stepped back: it is over, or
    // a step back of an hour would block the address for an hour.
    const blocked = sql`(rate_limits.blocked_until_ms > ${nowParameter} AND rate_limits.blocked_until_ms <= ${nowParameter} + CAST(${blockMs} AS BIGINT))`;
    const elapsedMs = sql`(CASE WHEN ${nowParameter} > rate_limits.updated_at_ms THEN ${nowParameter} - rate_limits.updated_at_ms ELSE 0 END)`;
    const grown = sql`(rate_limits.tokens + ${elapsedMs} * CAST(${refillPerMs} AS DOUBLE PRECISION))`;
    const refilled = sql`(CASE WHEN ${grown} > CAST(${burst} AS DOUBLE PRECISION) THEN CAST(${burst} AS DOUBLE PRECISION) ELSE ${grown} END)`;
    return sql<BucketRow>`
      INSERT INTO rate_limits (address, tokens, updated_at_ms, blocked_until_ms)
      VALUES (${slot("address")}, CAST(${burst - 1} AS DOUBLE PRECISION), ${nowParameter}, CAST(0 AS BIGINT))
      ON CONFLICT (address) DO UPDATE SET
        tokens = CASE WHEN ${blocked} THEN rate_limits.tokens WHEN ${refilled} >= 1 THEN ${refilled} - 1 ELSE ${refilled} END,
        updated_at_ms = CASE WHEN ${blocked} THEN rate_limits.updated_at_ms ELSE ${nowParameter} END,
        blocked_until_ms = CASE
          WHEN ${blocked} THEN rate_limits.blocked_until_ms
          WHEN ${refilled} >= 1 THEN CAST(0 AS BIGINT)
          ELSE ${nowParameter} + CAST(${blockMs} AS BIGINT)
        END
      RETURNING tokens, updated_at_ms, blocked_until_ms`;
  });
}

/**
 * Separates the scope from the address in the key of a scoped bucket. No address key contains it (they are IPv4
 * addresses, IPv6 networks written `2001:db8:0:1::/64`, or `unknown`, see `connectionAddressKey`), and it is no
 * wildcard of `LIKE` in either dialect, so `prune` tells the token endpoint's unscoped buckets from scoped ones by it.
 * It was "/" until migration 040, which every IPv6 network key contains: those buckets of the token endpoint were
 * never pruned.
 */
const scopeSeparator = "|";

/**
 * What a scope may be: lowercase letters and digits in words joined by "-". No separator, no `LIKE` wildcard ("%",
 * "_"), and no capital, since SQLite's `LIKE` ignores the case of ASCII letters and PostgreSQL's does not.
 */
const scopePattern = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

/** Options of `AddressRateLimiter`. */
export interface AddressRateLimiterOptions {
  database: Kysely<PlatformDatabase>;
  settings: AddressBucketSettings;
  clock: Clock;
  /**
   * What the buckets limit (e.g. `diff-link`), so that one address has a bucket per kind of request. The token
   * endpoint's buckets have none: they are keyed by the bare address, as they always were.
   */
  scope?: string;
  /** How often buckets that no longer limit anything are deleted (checked on each request). */
  pruneIntervalMs?: number;
}

/**
 * A token bucket per source address (an IPv6 address counts by its /64 network, which one host usually holds whole),
 * kept in the database's `rate_limits` table so that every platform replica
 * sharing it enforces the same limit: `burst` tokens, refilled at `refillPerSecond`; every request takes one; a
 * request finding the bucket empty is refused and blocks the address for `blockSeconds`, during which every request
 * is refused (requests during a block do not extend it). Each request is one atomic upsert, so concurrent requests
 * on several replicas never lose an update the way a read-then-write would.
 */
export class AddressRateLimiter {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly settings: AddressBucketSettings;
  private readonly clock: Clock;
  private readonly scope: string | undefined;
  private readonly pruneIntervalMs: number;
  private lastPruneMs: number;
  /** Runs on every limited request, so it is compiled once (see `CompiledStatement`). */
  private readonly consumeStatement: CompiledStatement<BucketRow, "address" | "now">;

  constructor(options: AddressRateLimiterOptions) {
    this.database = options.database;
    this.settings = options.settings;
    this.clock = options.clock;
    this.scope = options.scope;
    this.pruneIntervalMs = options.pruneIntervalMs ?? 60_000;
    this.lastPruneMs = this.clock();
    if (this.scope !== undefined && !scopePattern.test(this.scope)) {
      throw new Error(`a rate-limit scope is lowercase letters and digits joined by '-', got '${this.scope}'`);
    }
    if (!(this.settings.burst >= 1)) throw new Error(`rate-limit burst must be at least 1, got ${this.settings.burst}`);
    if (!(this.settings.refillPerSecond > 0)) {
      throw new Error(`rate-limit refill must be positive, got ${this.settings.refillPerSecond}`);
    }
    this.consumeStatement = compileConsumeStatement(this.database, this.settings);
  }

  /**
   * Takes one token from the bucket of `address` (an IPv6 address's /64 network, see `connectionAddressKey`), or
   * refuses the request (and starts or continues a block).
   */
  async consume(address: string | undefined): Promise<RateDecision> {
    const now = Math.floor(this.clock());
    const bucket = connectionAddressKey(address);
    const key = this.scope === undefined ? bucket : `${this.scope}${scopeSeparator}${bucket}`;
    const row = (await this.consumeStatement.execute({ address: key, now }))[0];
    if (row === undefined) throw new Error("the rate-limit upsert returned no row");
    await this.pruneWhenDue(now);
    const blockedUntilMs = Number(row.blocked_until_ms);
    if (blockedUntilMs <= now) return { allowed: true };
    // The client may come back when the block is over and the bucket holds a whole token again (counted from now at
    // the latest: a bucket updated before the wall clock stepped back refills from now on).
    const tokens = Number(row.tokens);
    const refillPerMs = this.settings.refillPerSecond / 1000;
    const tokenReadyAtMs = Math.min(Number(row.updated_at_ms), now) + Math.max(0, (1 - tokens) / refillPerMs);
    return { allowed: false, retryAfterSeconds: secondsUntil(Math.max(blockedUntilMs, tokenReadyAtMs), now) };
  }

  /**
   * Deletes this scope's buckets that are full again and not blocked (an absent bucket means exactly that); without a
   * scope, every bucket whose key has no scope.
   */
  async prune(): Promise<void> {
    const now = Math.floor(this.clock());
    const fullRefillMs = Math.ceil((this.settings.burst / this.settings.refillPerSecond) * 1000);
    await this.database
      .deleteFrom("rate_limits")
      .where("blocked_until_ms", "<=", now)
      .where("updated_at_ms", "<=", now - fullRefillMs)
      .where(
        "address",
        this.scope === undefined ? "not like" : "like",
        this.scope === undefined ? `%${scopeSeparator}%` : `${this.scope}${scopeSeparator}%`,
      )
      .execute();
  }

  private async pruneWhenDue(now: number): Promise<void> {
    if (now - this.lastPruneMs < this.pruneIntervalMs) return;
    this.lastPruneMs = now;
    await this.prune();
  }
}

/**
 * Rate limits of the token endpoint, kept in the database so every platform replica sharing it enforces the
 * same limits:
 *
 * - a token bucket per source address (an `AddressRateLimiter`: `burst` tokens, refilled at `refillPerSecond`);
 *   every request takes one, whether it then succeeds or fails; a request finding the bucket empty is refused and
 *   blocks the address for `blockSeconds`, during which every request is refused (requests during a block do not
 *   extend it);
 * - a delay per client id and source address: after n consecutive failed authentications of a client id from one
 *   address, that client id is refused from that address (429, never held on an open socket) for
 *   `failureDelayBaseMs * 2^(n-1)`, capped at `failureDelayMaxMs`; a success from that address resets it.
 *   Client ids are not secret (tokens and modeler metadata show them), so a count per client id alone would let
 *   anyone lock a client out by sending wrong secrets for it; counted per address, failures only ever slow the
 *   address that made them, and the client's requests from its own addresses are never delayed by them.
 *
 * Each update is one atomic SQL statement (upsert with RETURNING), so concurrent requests on several replicas
 * never lose an update the way a read-then-write would.
 */
export class TokenRateLimiter {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly settings: RateLimitSettings;
  private readonly clock: Clock;
  private readonly pruneIntervalMs: number;
  private readonly failureMemoryMs: number;
  private lastPruneMs: number;
  private readonly addresses: AddressRateLimiter;
  /** Runs on every token request, so it is compiled once (see `CompiledStatement`). */
  private readonly delayStatement: CompiledStatement<
    { consecutive_failures: number; delayed_until_ms: number },
    "clientId" | "address"
  >;

  constructor(options: TokenRateLimiterOptions) {
    this.database = options.database;
    this.settings = options.settings;
    this.clock = options.clock;
    this.pruneIntervalMs = options.pruneIntervalMs ?? 60_000;
    this.failureMemoryMs = options.failureMemoryMs ?? 3_600_000;
    this.lastPruneMs = this.clock();
    // The failure counts are pruned below; the buckets on the same schedule, through `prune`.
    this.addresses = new AddressRateLimiter({
      database: this.database,
      settings: this.settings,
      clock: this.clock,
      pruneIntervalMs: Number.POSITIVE_INFINITY,
    });
    this.delayStatement = new CompiledStatement(
      this.database,
      (slot) => sql<{ consecutive_failures: number; delayed_until_ms: number }>`
        SELECT consecutive_failures, delayed_until_ms FROM client_failures
        WHERE client_id = ${slot("clientId")} AND address = ${slot("address")}`,
    );
  }

  /** Takes one token from the bucket of `address`, or refuses the request (and starts or continues a block). */
  async consumeAddress(address: string | undefined): Promise<RateDecision> {
    const decision = await this.addresses.consume(address);
    await this.pruneWhenDue(Math.floor(this.clock()));
    return decision;
  }

  /**
   * Whether `clientId` must wait at `address` after earlier failed authentications from that address, and for how
   * long. Failures from other addresses never count here.
   */
  async clientDelay(
    clientId: string,
    address: string | undefined,
  ): Promise<RateDecision & { consecutiveFailures: number }> {
    const now = Math.floor(this.clock());
    const row = (await this.delayStatement.execute({ clientId, address: connectionAddressKey(address) }))[0];
    const consecutiveFailures = row === undefined ? 0 : Number(row.consecutive_failures);
    const delayedUntilMs = row === undefined ? 0 : Number(row.delayed_until_ms);
    // A delay ending further off than the longest delay was started before the wall clock stepped back: it is over.
    if (delayedUntilMs > now && delayedUntilMs <= now + this.settings.failureDelayMaxMs) {
      return { allowed: false, retryAfterSeconds: secondsUntil(delayedUntilMs, now), consecutiveFailures };
    }
    return { allowed: true, consecutiveFailures };
  }

  /**
   * Counts a failed authentication of `clientId` from `address` and starts the delay of that pair; answers the new
   * count and delay.
   */
  async recordFailure(
    clientId: string,
    address: string | undefined,
  ): Promise<{ consecutiveFailures: number; delayMs: number }> {
    const now = Math.floor(this.clock());
    const { failureDelayBaseMs: baseMs, failureDelayMaxMs: maxMs } = this.settings;
    const firstDelayMs = Math.min(baseMs, maxMs);
    // The n-th consecutive failure waits base * 2^(n-1): the shift is the failure count before this one.
    const shift = sql`CAST(CASE WHEN client_failures.consecutive_failures >= ${maximumCountedFailures - 1} THEN ${maximumCountedFailures - 1} ELSE client_failures.consecutive_failures END AS INTEGER)`;
    const doubled = sql`(CAST(${baseMs} AS BIGINT) << ${shift})`;
    const result = await sql<{ consecutive_failures: number; delayed_until_ms: number }>`
      INSERT INTO client_failures (client_id, address, consecutive_failures, delayed_until_ms)
      VALUES (${clientId}, ${connectionAddressKey(address)}, 1, CAST(${now + firstDelayMs} AS BIGINT))
      ON CONFLICT (client_id, address) DO UPDATE SET
        consecutive_failures = CASE
          WHEN client_failures.consecutive_failures >= ${maximumCountedFailures} THEN ${maximumCountedFailures}
          ELSE client_failures.consecutive_failures + 1
        END,
        delayed_until_ms = CAST(${now} AS BIGINT)
          + CASE WHEN ${doubled} > CAST(${maxMs} AS BIGINT) THEN CAST(${maxMs} AS BIGINT) ELSE ${doubled} END
      RETURNING consecutive_failures, delayed_until_ms`.execute(this.database);
    const row = result.rows[0];
    if (row === undefined) throw new Error("the client-failure upsert returned no row");
    return { consecutiveFailures: Number(row.consecutive_failures), delayMs: Number(row.delayed_until_ms) - now };
  }

  /**
   * Forgets the failures of `clientId` from `address` after a successful authentication from there. Only that
   * pair: a success must not lift the delay another address earned.
   */
  async recordSuccess(clientId: string, address: string | undefined): Promise<void> {
    await this.database
      .deleteFrom("client_failures")
      .where("client_id", "=", clientId)
      .where("address", "=", connectionAddressKey(address))
      .execute();
  }

  /**
   * Deletes rows that no longer limit anything: buckets that are full again and not blocked (an absent row means
   * exactly that), and failure counts older than the failure memory.
   */
  async prune(): Promise<void> {
    const now = Math.floor(this.clock());
    await this.addresses.prune();
    await this.database
      .deleteFrom("client_failures")
      .where("delayed_until_ms", "<=", now - this.failureMemoryMs)
      .execute();
  }

  private async pruneWhenDue(now: number): Promise<void> {
    if (now - this.lastPruneMs < this.pruneIntervalMs) return;
    this.lastPruneMs = now;
    await this.prune();
  }
}
