import type { JSONWebKeySet } from "jose";
import { afterEach, describe, expect, it } from "vitest";
import { localKeySource, remoteKeySource } from "../../src/auth/key-source.js";
import { TokenVerificationError, TokenVerifier } from "../../src/auth/verifier.js";
import { createTestKey, serveKeySet, signWith, testAudience, testIssuer, validClaims } from "./support.js";

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
