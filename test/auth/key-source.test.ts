import type { JSONWebKeySet } from "jose";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  KeySetUnavailableError,
  localKeySource,
  type RemoteKeySourceOptions,
  remoteKeySource,
} from "../../src/auth/key-source.js";
import { TokenVerificationError, TokenVerifier } from "../../src/auth/verifier.js";
import {
  createTestKey,
  serveKeySet,
  signWith,
  type TestKey,
  testAudience,
  testIssuer,
  validClaims,
} from "./support.js";

const nowMs = Date.now();

describe("remote key source", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });

  async function setup(cooldownMs: number) {
    const known = await createTestKey();
    const served = await serveKeySet({ keys: [known.publicJwk] });
    cleanups.push(() => served.close());
    const verifier = new TokenVerifier({
      keySource: remoteKeySource(served.url, { cooldownMs }),
      issuer: testIssuer,
      audience: testAudience,
      clock: () => nowMs,
    });
    return { known, served, verifier };
  }

  it("fetches the key set once for many tokens signed with a known key", async () => {
    const { known, served, verifier } = await setup(30_000);
    for (const jti of ["a", "b", "c"]) await verifier.verify(await signWith(known, validClaims(nowMs, { jti })));
    expect(served.fetches()).toBe(1);
  });

  it("refetches once for an unknown kid, then rejects it; a key published meanwhile is found", async () => {
    const { known, served, verifier } = await setup(0);
    await verifier.verify(await signWith(known, validClaims(nowMs)));
    expect(served.fetches()).toBe(1);

    const stranger = await createTestKey();
    await expect(verifier.verify(await signWith(stranger, validClaims(nowMs)))).rejects.toBeInstanceOf(
      TokenVerificationError,
    );
    expect(served.fetches()).toBe(2);

    const rotated = await createTestKey("ES256");
    served.replace({ keys: [rotated.publicJwk, known.publicJwk] });
    expect((await verifier.verify(await signWith(rotated, validClaims(nowMs)))).clientId).toBe("client-1");
    expect(served.fetches()).toBe(3);
  });

  it("does not refetch again within the cooldown, so made-up kids cannot flood the issuer", async () => {
    const { known, served, verifier } = await setup(60_000);
    await verifier.verify(await signWith(known, validClaims(nowMs)));
    for (let attempt = 0; attempt < 5; attempt++) {
      const stranger = await createTestKey("ES256");
      await expect(verifier.verify(await signWith(stranger, validClaims(nowMs)))).rejects.toBeInstanceOf(
        TokenVerificationError,
      );
    }
    expect(served.fetches()).toBe(1);
  });

  it("reports an unreachable key set as an error that is not the token's fault", async () => {
    const { known, served, verifier } = await setup(0);
    await served.close();
    cleanups.length = 0;
    const error = await verifier.verify(await signWith(known, validClaims(nowMs))).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(TokenVerificationError);
  });
});

describe("remote key source while the issuer cannot be reached", () => {
  const minuteMs = 60_000;
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });

  async function setup(options: RemoteKeySourceOptions = {}) {
    const known = await createTestKey();
    const served = await serveKeySet({ keys: [known.publicJwk] });
    cleanups.push(() => served.close().catch(() => {}));
    let clockMs = nowMs;
    const logLines: string[] = [];
    const keySource = remoteKeySource(served.url, {
      cooldownMs: 30_000,
      maximumAgeMs: 10 * minuteMs,
      clock: () => clockMs,
      logger: pino({ level: "info" }, { write: (line: string) => logLines.push(line) }),
      ...options,
    });
    const verifier = new TokenVerifier({
      keySource,
      issuer: testIssuer,
      audience: testAudience,
      clock: () => clockMs,
    });
    // Valid for a day, so that moving the clock puts only the key set to the test.
    const tokenOf = (key: TestKey, jti: string) =>
      signWith(key, validClaims(nowMs, { jti, exp: Math.floor(nowMs / 1000) + 86_400 }));
    const advance = (ms: number) => {
      clockMs += ms;
    };
    return { known, served, keySource, verifier, tokenOf, advance, logLines };
  }

  it("verifies a new token with the last key set fetched 11 minutes into an outage, and no key it never held", async () => {
    const { known, served, verifier, tokenOf, advance, logLines } = await setup();
    await verifier.verify(await tokenOf(known, "outage-first"));
    expect(served.fetches()).toBe(1);

    await served.close();
    advance(11 * minuteMs);
    const second = await tokenOf(known, "outage-second");
    expect((await verifier.verify(second)).tokenId).toBe("outage-second");
    expect(verifier.statistics.cacheHits).toBe(0);

    // The set in hand never held this key, and no fetch can say whether the issuer has it since: 503, not verified.
    const stranger = await tokenOf(await createTestKey(), "outage-stranger");
    await expect(verifier.verify(stranger)).rejects.toBeInstanceOf(KeySetUnavailableError);
    await expect(verifier.verify(stranger)).rejects.toBeInstanceOf(KeySetUnavailableError);

    const warnings = logLines.filter((line) => JSON.parse(line).level === 40);
    expect(warnings.length).toBeGreaterThanOrEqual(1);
    expect(warnings.length).toBeLessThanOrEqual(2);
    for (const line of logLines) {
      for (const token of [second, stranger]) {
        for (const part of token.split(".")) expect(line).not.toContain(part);
      }
    }
  });

  it("asks a failing issuer at most once per cooldown, however many tokens it verifies meanwhile", async () => {
    const { known, served, keySource, verifier, tokenOf, advance } = await setup();
    await verifier.verify(await tokenOf(known, "failing-first"));
    served.answerWith("error");
    advance(11 * minuteMs);

    const verifyMany = async (prefix: string, count: number) => {
      for (let index = 0; index < count; index++) {
        await verifier.verify(await tokenOf(known, `${prefix}-${index}`));
        if (index % 5 === 0) {
          const stranger = await tokenOf(await createTestKey("ES256"), `${prefix}-stranger-${index}`);
          await expect(verifier.verify(stranger)).rejects.toBeInstanceOf(KeySetUnavailableError);
        }
      }
      await vi.waitFor(() => expect(keySource.state().lastFetchFailed).toBe(true));
    };
    await verifyMany("failing-a", 20);
    expect(served.fetches()).toBe(2);
    advance(29_000);
    await verifyMany("failing-b", 10);
    expect(served.fetches()).toBe(2);
    advance(1_000);
    await verifyMany("failing-c", 10);
    expect(served.fetches()).toBe(3);

    // Back: the next fetch due replaces the set, and an unknown key is the token's fault again.
    served.answerWith("keys");
    advance(30_000);
    await verifier.verify(await tokenOf(known, "failing-recovered"));
    await vi.waitFor(() => expect(keySource.state().lastFetchFailed).toBe(false));
    expect(served.fetches()).toBe(4);
    expect(keySource.state().ageMs).toBe(0);
    const stranger = await tokenOf(await createTestKey(), "failing-stranger-after");
    await expect(verifier.verify(stranger)).rejects.toBeInstanceOf(TokenVerificationError);
    expect(served.fetches()).toBe(4);
  });

  it("does not make a token wait for a refresh the issuer does not answer", async () => {
    const { known, served, keySource, verifier, tokenOf, advance } = await setup({ timeoutMs: 600_000 });
    await verifier.verify(await tokenOf(known, "silent-first"));
    served.answerWith("silence");
    advance(11 * minuteMs);
    // Waiting for the refresh would take the fetch's timeout, ten minutes, far beyond the test's own.
    expect((await verifier.verify(await tokenOf(known, "silent-second"))).tokenId).toBe("silent-second");
    await vi.waitFor(() => expect(served.fetches()).toBe(2));
    advance(minuteMs);
    expect((await verifier.verify(await tokenOf(known, "silent-third"))).tokenId).toBe("silent-third");
    expect(served.fetches()).toBe(2);
    expect(keySource.state().lastFetchFailed).toBe(false);
  });

  it("stops verifying with a key that a successful fetch no longer lists", async () => {
    const { known, served, verifier, tokenOf, advance } = await setup();
    await verifier.verify(await tokenOf(known, "withdrawn-first"));
    const successor = await createTestKey("ES256");
    served.replace({ keys: [successor.publicJwk] });
    advance(11 * minuteMs);
    expect((await verifier.verify(await tokenOf(successor, "withdrawn-successor"))).clientId).toBe("client-1");
    expect(served.fetches()).toBe(2);
    await expect(verifier.verify(await tokenOf(known, "withdrawn-second"))).rejects.toBeInstanceOf(
      TokenVerificationError,
    );
    expect(served.fetches()).toBe(2);
  });

  it("gives the last key set up once it is older than maximumStaleMs", async () => {
    const { known, served, verifier, tokenOf, advance } = await setup({ maximumStaleMs: 60 * minuteMs });
    await verifier.verify(await tokenOf(known, "bounded-first"));
    await served.close();
    advance(59 * minuteMs);
    expect((await verifier.verify(await tokenOf(known, "bounded-second"))).tokenId).toBe("bounded-second");
    advance(minuteMs);
    const late = verifier.verify(await tokenOf(known, "bounded-third"));
    await expect(late).rejects.toBeInstanceOf(KeySetUnavailableError);
  });

  it("without any key set, tries a failing issuer again at most once a second", async () => {
    const { known, served, verifier, tokenOf, advance } = await setup();
    served.answerWith("error");
    for (const jti of ["none-a", "none-b", "none-c"]) {
      await expect(verifier.verify(await tokenOf(known, jti))).rejects.toBeInstanceOf(KeySetUnavailableError);
    }
    expect(served.fetches()).toBe(1);
    advance(1_000);
    served.answerWith("keys");
    expect((await verifier.verify(await tokenOf(known, "none-d"))).tokenId).toBe("none-d");
    expect(served.fetches()).toBe(2);
  });
});

describe("local key source", () => {
  it("reloads once per cooldown when it meets an unknown kid", async () => {
    const first = await createTestKey();
    const second = await createTestKey();
    let clock = nowMs;
    let stored: JSONWebKeySet = { keys: [first.publicJwk] };
    let published = stored;
    let reloads = 0;
    const verifier = new TokenVerifier({
      keySource: localKeySource({
        keySet: async () => published,
        reload: async () => {
          reloads += 1;
          published = stored;
          return published;
        },
        clock: () => clock,
        cooldownMs: 5_000,
      }),
      issuer: testIssuer,
      audience: testAudience,
      clock: () => clock,
    });
    await verifier.verify(await signWith(first, validClaims(nowMs)));
    expect(reloads).toBe(0);

    // Another replica rotated: the stored set has the new key, the published copy does not yet.
    stored = { keys: [second.publicJwk, first.publicJwk] };
    expect((await verifier.verify(await signWith(second, validClaims(nowMs)))).clientId).toBe("client-1");
    expect(reloads).toBe(1);

    const stranger = await createTestKey();
    await expect(verifier.verify(await signWith(stranger, validClaims(nowMs, { jti: "x" })))).rejects.toBeInstanceOf(
      TokenVerificationError,
    );
    expect(reloads).toBe(1);
    clock += 5_000;
    await expect(verifier.verify(await signWith(stranger, validClaims(nowMs, { jti: "y" })))).rejects.toBeInstanceOf(
      TokenVerificationError,
    );
    expect(reloads).toBe(2);
  });
});
