import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { AddressRateLimiter, TokenRateLimiter } from "../../../src/platform/issuer/rate-limit.js";
import { databaseKinds, reportSkippedPostgres } from "../../support/databases.js";
import { manualClock, openTestStore } from "./support.js";

const settings = { burst: 2, refillPerSecond: 1, blockSeconds: 30 };

beforeAll(() => reportSkippedPostgres());

describe.each(databaseKinds)("address rate limiter with a scope (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** A store of this kind with a scoped limiter (`diff-link`) and the token endpoint's unscoped one over it. */
  const openLimiters = async () => {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const clock = manualClock();
    const database = opened.store.database;
    const diffLinks = new AddressRateLimiter({ database, settings, clock: clock.now, scope: "diff-link" });
    const tokens = new TokenRateLimiter({
      database,
      settings: { ...settings, failureDelayBaseMs: 0, failureDelayMaxMs: 0 },
      clock: clock.now,
    });
    return { clock, database, diffLinks, tokens };
  };

  it("keeps a bucket per scope and address, apart from the token endpoint's, and prunes only its own", async () => {
    const { clock, database, diffLinks, tokens } = await openLimiters();

    expect(await diffLinks.consume("10.0.0.1")).toEqual({ allowed: true });
    expect(await diffLinks.consume("10.0.0.1")).toEqual({ allowed: true });
    expect(await diffLinks.consume("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 30 });
    expect(await diffLinks.consume("10.0.0.2")).toEqual({ allowed: true });
    // The same address still has its whole token-endpoint bucket.
    expect(await tokens.consumeAddress("10.0.0.1")).toEqual({ allowed: true });

    const keys = async () =>
      (await database.selectFrom("rate_limits").select("address").orderBy("address").execute()).map(
        (row) => row.address,
      );
    expect(await keys()).toEqual(["10.0.0.1", "diff-link|10.0.0.1", "diff-link|10.0.0.2"]);
    // Long after every block and refill, each limiter deletes its own full buckets and only those.
    clock.advance(60_000);
    await tokens.prune();
    expect(await keys()).toEqual(["diff-link|10.0.0.1", "diff-link|10.0.0.2"]);
    await diffLinks.prune();
    expect(await keys()).toEqual([]);
    // A scope holds neither the separator nor a LIKE wildcard, nor a capital (SQLite's LIKE ignores case).
    for (const scope of ["", "a|b", "a%", "a_b", "Diff-link", "-a"]) {
      expect(() => new AddressRateLimiter({ database, settings, clock: clock.now, scope })).toThrow();
    }
  });

  it("prunes IPv6 buckets too, each limiter its own: the token endpoint's unscoped ones and a scope's", async () => {
    const { clock, database, diffLinks, tokens } = await openLimiters();
    for (const address of ["2001:db8:a:1::1", "2001:db8:a:2::1", "198.51.100.17"]) {
      expect(await tokens.consumeAddress(address)).toEqual({ allowed: true });
      expect(await diffLinks.consume(address)).toEqual({ allowed: true });
    }
    // Sorted here: PostgreSQL's collation may order punctuation otherwise than SQLite's bytes.
    const keys = async () =>
      (await database.selectFrom("rate_limits").select("address").execute()).map((row) => row.address).sort();
    const scoped = ["diff-link|198.51.100.17", "diff-link|2001:db8:a:1::/64", "diff-link|2001:db8:a:2::/64"];
    expect(await keys()).toEqual(["198.51.100.17", "2001:db8:a:1::/64", "2001:db8:a:2::/64", ...scoped]);
    clock.advance(24 * 3_600_000);
    await tokens.prune();
    expect(await keys()).toEqual(scoped);
    await diffLinks.prune();
    expect(await keys()).toEqual([]);
  });
});
