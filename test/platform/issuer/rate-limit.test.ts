import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { type RateLimitSettings, TokenRateLimiter } from "../../../src/platform/issuer/rate-limit.js";
import type { Store } from "../../../src/platform/store/database.js";
import { databaseKinds, reportSkippedPostgres } from "../../support/databases.js";
import { type ManualClock, manualClock, openSecondHandle, openTestStore } from "./support.js";

const settings: RateLimitSettings = {
  burst: 3,
  refillPerSecond: 1,
  blockSeconds: 60,
  failureDelayBaseMs: 250,
  failureDelayMaxMs: 2_000,
};

beforeAll(() => reportSkippedPostgres());

describe.each(databaseKinds)("token rate limiter (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function limiter(
    overrides: Partial<RateLimitSettings> = {},
  ): Promise<{ limiter: TokenRateLimiter; clock: ManualClock; store: Store; second: () => Promise<TokenRateLimiter> }> {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const clock = manualClock();
    const merged = { ...settings, ...overrides };
    return {
      limiter: new TokenRateLimiter({ database: opened.store.database, settings: merged, clock: clock.now }),
      clock,
      store: opened.store,
      second: async () => {
        const handle = await openSecondHandle(opened.database);
        cleanups.push(() => handle.close());
        return new TokenRateLimiter({ database: handle.database, settings: merged, clock: clock.now });
      },
    };
  }

  it("allows the burst, then refuses with Retry-After and blocks the address for the block period", async () => {
    const { limiter: rateLimiter, clock } = await limiter();
    for (let request = 0; request < settings.burst; request++) {
      expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    }
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 60 });

    // Long enough to refill the bucket, but the block still holds; requests during it do not extend it.
    clock.advance(30_000);
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 30 });
    clock.advance(29_500);
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 1 });

    clock.advance(500);
    for (let request = 0; request < settings.burst; request++) {
      expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    }
    expect((await rateLimiter.consumeAddress("10.0.0.1")).allowed).toBe(false);
  });

  it("ends a block and a failure delay started before the wall clock stepped back, rather than for the step's length", async () => {
    const { limiter: rateLimiter, clock } = await limiter();
    for (let request = 0; request <= settings.burst; request++) await rateLimiter.consumeAddress("10.0.0.1");
    for (let failure = 0; failure < 4; failure++) await rateLimiter.recordFailure("client", "10.0.0.1");
    expect((await rateLimiter.clientDelay("client", "10.0.0.1")).allowed).toBe(false);
    // NTP steps the clock back two hours.
    clock.advance(-2 * 60 * 60 * 1000);
    expect((await rateLimiter.clientDelay("client", "10.0.0.1")).allowed).toBe(true);
    // The bucket is still empty (it refills from now on), so the address is blocked once more, for one block only.
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 60 });
    clock.advance(60_000);
    for (let request = 0; request < settings.burst; request++) {
      expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    }
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 60 });
  });

  it("refills at the configured rate and keeps addresses apart", async () => {
    const { limiter: rateLimiter, clock } = await limiter({ blockSeconds: 0 });
    for (let request = 0; request < settings.burst; request++) await rateLimiter.consumeAddress("10.0.0.1");
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 1 });
    expect(await rateLimiter.consumeAddress("10.0.0.2")).toEqual({ allowed: true });
    clock.advance(1_000);
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    expect((await rateLimiter.consumeAddress("10.0.0.1")).allowed).toBe(false);
    clock.advance(2_500);
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    expect(await rateLimiter.consumeAddress("10.0.0.1")).toEqual({ allowed: true });
    expect((await rateLimiter.consumeAddress("10.0.0.1")).allowed).toBe(false);
  });

  it("counts an IPv6 address by its /64 network, so that one host cannot take a bucket per address it holds", async () => {
    const { limiter: rateLimiter } = await limiter();
    // One host usually holds a whole /64: each of its addresses counted apart would make the limit none.
    for (let request = 0; request < settings.burst; request++) {
      expect(await rateLimiter.consumeAddress(`2001:db8:0:1::${request + 1}`)).toEqual({ allowed: true });
    }
    expect((await rateLimiter.consumeAddress("2001:db8:0:1:ffff:ffff:ffff:ffff")).allowed).toBe(false);
    expect(await rateLimiter.consumeAddress("2001:db8:0:2::1")).toEqual({ allowed: true });
    // An IPv4 client seen through an IPv6 socket is the same IPv4 address.
    for (let request = 0; request < settings.burst; request++) await rateLimiter.consumeAddress("::ffff:10.0.0.9");
    expect((await rateLimiter.consumeAddress("10.0.0.9")).allowed).toBe(false);
    // Failed authentications are counted the same way.
    await rateLimiter.recordFailure("client-a", "2001:db8:0:1::1");
    expect((await rateLimiter.clientDelay("client-a", "2001:db8:0:1::2")).allowed).toBe(false);
    await rateLimiter.recordSuccess("client-a", "2001:db8:0:1::3");
    expect((await rateLimiter.clientDelay("client-a", "2001:db8:0:1::2")).allowed).toBe(true);
  });

  it("counts IPv4 clients behind a NAT64 front end apart, each by the IPv4 address its IPv6 address carries", async () => {
    const { limiter: rateLimiter } = await limiter();
    for (let request = 0; request < settings.burst; request++) await rateLimiter.consumeAddress("64:ff9b::c633:6421");
    expect((await rateLimiter.consumeAddress("64:ff9b::198.51.100.33")).allowed).toBe(false);
    expect((await rateLimiter.consumeAddress("198.51.100.33")).allowed).toBe(false);
    expect(await rateLimiter.consumeAddress("64:ff9b::c633:6422")).toEqual({ allowed: true });
  });

  it("shares one bucket between two store handles on the same database (two replicas)", async () => {
    const { limiter: first, second } = await limiter();
    const other = await second();
    expect(await first.consumeAddress("10.0.0.9")).toEqual({ allowed: true });
    expect(await other.consumeAddress("10.0.0.9")).toEqual({ allowed: true });
    expect(await first.consumeAddress("10.0.0.9")).toEqual({ allowed: true });
    expect((await other.consumeAddress("10.0.0.9")).allowed).toBe(false);
    expect((await first.consumeAddress("10.0.0.9")).allowed).toBe(false);
  });

  it("counts concurrent requests exactly once each (one atomic statement, no read-then-write race)", async () => {
    const { limiter: first, second } = await limiter({ burst: 10 });
    const other = await second();
    const decisions = await Promise.all(
      Array.from({ length: 16 }, (_, index) => (index % 2 === 0 ? first : other).consumeAddress("10.0.0.5")),
    );
    expect(decisions.filter((decision) => decision.allowed)).toHaveLength(10);
  });

  it("delays a client id at an address after failures there, doubling up to the cap, and resets on success", async () => {
    const { limiter: rateLimiter, clock, second } = await limiter();
    expect(await rateLimiter.clientDelay("client-a", "10.0.0.1")).toEqual({ allowed: true, consecutiveFailures: 0 });
    const delays: number[] = [];
    for (let failure = 1; failure <= 6; failure++) {
      const recorded = await rateLimiter.recordFailure("client-a", "10.0.0.1");
      expect(recorded.consecutiveFailures).toBe(failure);
      delays.push(recorded.delayMs);
      const decision = await rateLimiter.clientDelay("client-a", "10.0.0.1");
      expect(decision).toEqual({
        allowed: false,
        retryAfterSeconds: Math.ceil(recorded.delayMs / 1000),
        consecutiveFailures: failure,
      });
      clock.advance(recorded.delayMs);
      expect((await rateLimiter.clientDelay("client-a", "10.0.0.1")).allowed).toBe(true);
    }
    expect(delays).toEqual([250, 500, 1_000, 2_000, 2_000, 2_000]);

    // Another replica sees the same count; a success there resets it for everyone.
    const other = await second();
    expect((await other.clientDelay("client-a", "10.0.0.1")).consecutiveFailures).toBe(6);
    await other.recordSuccess("client-a", "10.0.0.1");
    expect(await rateLimiter.clientDelay("client-a", "10.0.0.1")).toEqual({ allowed: true, consecutiveFailures: 0 });
    expect((await rateLimiter.recordFailure("client-a", "10.0.0.1")).delayMs).toBe(250);
    expect((await rateLimiter.clientDelay("client-b", "10.0.0.1")).allowed).toBe(true);
  });

  it("never delays a client id at one address for failures from another, nor lifts a delay by a success elsewhere", async () => {
    const { limiter: rateLimiter } = await limiter({ failureDelayBaseMs: 60_000, failureDelayMaxMs: 600_000 });
    for (let failure = 0; failure < 10; failure++) await rateLimiter.recordFailure("client-a", "203.0.113.66");
    expect((await rateLimiter.clientDelay("client-a", "203.0.113.66")).allowed).toBe(false);
    expect(await rateLimiter.clientDelay("client-a", "10.0.0.1")).toEqual({ allowed: true, consecutiveFailures: 0 });
    // The client's own success (from its address) leaves the attacker's delay in place.
    await rateLimiter.recordSuccess("client-a", "10.0.0.1");
    expect(await rateLimiter.clientDelay("client-a", "203.0.113.66")).toMatchObject({
      allowed: false,
      consecutiveFailures: 10,
    });
  });

  it("keeps the delay bounded however many failures accumulate", async () => {
    const { limiter: rateLimiter } = await limiter({ failureDelayBaseMs: 60_000, failureDelayMaxMs: 600_000 });
    let last = { consecutiveFailures: 0, delayMs: 0 };
    for (let failure = 0; failure < 40; failure++) last = await rateLimiter.recordFailure("client-c", "10.0.0.1");
    expect(last).toEqual({ consecutiveFailures: 30, delayMs: 600_000 });
  });

  it("prunes rows that no longer limit anything", async () => {
    const { limiter: rateLimiter, clock, store } = await limiter();
    await rateLimiter.consumeAddress("10.0.0.1");
    await rateLimiter.recordFailure("client-a", "10.0.0.1");
    await rateLimiter.prune();
    expect(await store.database.selectFrom("rate_limits").selectAll().execute()).toHaveLength(1);
    // The failure memory (one hour) runs from the end of the last delay.
    clock.advance(3_600_250);
    await rateLimiter.prune();
    expect(await store.database.selectFrom("rate_limits").selectAll().execute()).toHaveLength(0);
    expect(await store.database.selectFrom("client_failures").selectAll().execute()).toHaveLength(0);
  });

  it("prunes the buckets of IPv6 networks like those of IPv4 addresses", async () => {
    const { limiter: rateLimiter, clock, store } = await limiter();
    await rateLimiter.consumeAddress("198.51.100.7");
    // 100 networks, each keyed by its /64 ("2001:db8:7:<n>::/64"), which holds a "/".
    for (let network = 0; network < 100; network++) {
      await rateLimiter.consumeAddress(`2001:db8:7:${network.toString(16)}::1`);
    }
    const count = async () => (await store.database.selectFrom("rate_limits").selectAll().execute()).length;
    expect(await count()).toBe(101);
    clock.advance(24 * 3_600_000);
    await rateLimiter.prune();
    expect(await count()).toBe(0);
  });
});
