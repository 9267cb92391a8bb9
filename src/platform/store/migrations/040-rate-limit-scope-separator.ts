import { type Kysely, type Migration, sql } from "kysely";

/**
 * The key of a scoped rate-limit bucket separates its scope from the address with "|" instead of "/"
 * (`diff-link|2001:db8:0:1::/64`), since the token endpoint's pruning told its own, unscoped, buckets from scoped ones
 * by the absence of "/", which every IPv6 key (a /64 network) contains: the token endpoint's IPv6 buckets were never
 * deleted, and the table grew with every IPv6 network that ever asked for a token.
 *
 * Rate-limit rows are transient state (a bucket that is full again and not blocked means the same as no row), so
 * nothing here has to be kept, but the buckets of the only scope ever released, `diff-link`, are rewritten rather
 * than dropped, so that a block in force when the platform is upgraded still holds. Every other row, old IPv6 keys
 * included, has no "|" and is now the token endpoint's to prune. The one exception is a key with a "|" already: the
 * token endpoint keyed a proxy's `X-Forwarded-For` entry as it was, whatever it held, and such a key would now read as
 * a scope no limiter prunes. No real address contains "|", so those rows are deleted.
 */
export const rateLimitScopeSeparatorMigration: Migration = {
  async up(database: Kysely<unknown>): Promise<void> {
    await sql`DELETE FROM rate_limits WHERE address LIKE '%|%'`.execute(database);
    // 'diff-link/' is 10 characters: the address starts at the 11th. No old key had "|", so none collides.
    await sql`UPDATE rate_limits SET address = 'diff-link|' || substr(address, 11) WHERE address LIKE 'diff-link/%'`.execute(
      database,
    );
  },
};
