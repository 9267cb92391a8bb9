import { createHmac } from "node:crypto";
import { createLocalJWKSet, exportSPKI } from "jose";
import { describe, expect, it } from "vitest";
import type { KeySource } from "../../src/auth/key-source.js";
import { TokenVerificationError, TokenVerifier } from "../../src/auth/verifier.js";
import { createTestKey, segment, signWith, type TestKey, testAudience, testIssuer, validClaims } from "./support.js";

const nowMs = Date.UTC(2030, 0, 1);

async function setup(keys: TestKey[], options: { cacheMaxEntries?: number } = {}) {
  let clock = nowMs;
  const lookup = createLocalJWKSet({ keys: keys.map((key) => key.publicJwk) });
  let keyLookups = 0;
  const keySource: KeySource = async (header, token) => {
    keyLookups += 1;
    return await lookup(header, token);
  };
  const verifier = new TokenVerifier({
    keySource,
    issuer: testIssuer,
    audience: testAudience,
    clock: () => clock,
    ...options,
  });
  return {
    verifier,
    keyLookups: () => keyLookups,
    advance: (durationMs: number) => {
      clock += durationMs;
    },
  };
}

async function refusal(verifier: TokenVerifier, token: string): Promise<string> {
  const error = await verifier.verify(token).then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(TokenVerificationError);
  return (error as Error).message;
}

describe("token verifier", () => {
  it("returns the principal of a valid RS256 or ES256 token", async () => {
    const rsa = await createTestKey("RS256");
    const ec = await createTestKey("ES256");
    const { verifier } = await setup([rsa, ec]);
    const principal = await verifier.verify(await signWith(rsa, validClaims(nowMs)));
    expect(principal).toEqual({
      clientId: "client-1",
      organizationId: "organization-1",
      scopes: new Set(["members", "cluster"]),
      tokenId: "token-1",
      expiresAtMs: (Math.floor(nowMs / 1000) + 600) * 1000,
    });
    const clusterPrincipal = await verifier.verify(await signWith(ec, validClaims(nowMs, { cluster: "cluster-7" })));
    expect(clusterPrincipal.clusterId).toBe("cluster-7");
  });

  it("refuses another spelling of a valid token's signature, which decodes to the same bytes", async () => {
    const key = await createTestKey("RS256");
    const { verifier } = await setup([key]);
    const token = await signWith(key, validClaims(nowMs));
    // A 256-byte signature is 342 characters of base64url, whose last character carries 4 bits that decoding ignores.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const respelled = `${token.slice(0, -1)}${alphabet[alphabet.indexOf(token.slice(-1)) ^ 1]}`;
    const signatureOf = (text: string) => Buffer.from(text.slice(text.lastIndexOf(".") + 1), "base64url");
    expect(signatureOf(respelled).equals(signatureOf(token))).toBe(true);
    expect(await refusal(verifier, respelled)).toMatch(/canonical base64url/);
    expect((await verifier.verify(token)).clientId).toBe("client-1");
  });

  it("refuses an expired token, tolerating a small clock skew", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    const nowSeconds = Math.floor(nowMs / 1000);
    const barelyExpired = await signWith(key, validClaims(nowMs, { iat: nowSeconds - 700, exp: nowSeconds - 10 }));
    expect((await verifier.verify(barelyExpired)).clientId).toBe("client-1");
    const expired = await signWith(key, validClaims(nowMs, { iat: nowSeconds - 700, exp: nowSeconds - 31 }));
    expect(await refusal(verifier, expired)).toMatch(/expired/);
  });

  it("refuses a token that is not valid yet (nbf or iat in the future)", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    const nowSeconds = Math.floor(nowMs / 1000);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { nbf: nowSeconds + 120 })))).toMatch(
      /not valid yet/,
    );
    const issuedLater = validClaims(nowMs, { iat: nowSeconds + 3_600, exp: nowSeconds + 7_200 });
    expect(await refusal(verifier, await signWith(key, issuedLater))).toMatch(/future/);
  });

  it("refuses a token for another audience or from another issuer", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { aud: "modeler-api" })))).toMatch(
      /audience/,
    );
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { iss: "https://evil.test" })))).toMatch(
      /issuer/,
    );
  });

  it("refuses an unsigned token (alg none), crafted by hand", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    const token = `${segment({ alg: "none", typ: "JWT" })}.${segment(validClaims(nowMs))}.`;
    expect(await refusal(verifier, token)).toMatch(/algorithm|malformed/);
    const withKid = `${segment({ alg: "none", kid: key.keyId })}.${segment(validClaims(nowMs))}.`;
    await refusal(verifier, withKid);
  });

  it("refuses HS256 signed with the public key's bytes (algorithm confusion), crafted by hand", async () => {
    const key = await createTestKey();
    const { verifier, keyLookups } = await setup([key]);
    const pem = await exportSPKI(key.publicKey);
    for (const secret of [pem, JSON.stringify(key.publicJwk), Buffer.from(String(key.publicJwk.n), "base64url")]) {
      const signingInput = `${segment({ alg: "HS256", typ: "JWT", kid: key.keyId })}.${segment(validClaims(nowMs))}`;
      const signature = createHmac("sha256", secret).update(signingInput).digest("base64url");
      expect(await refusal(verifier, `${signingInput}.${signature}`)).toMatch(/algorithm/);
    }
    // Refused before any key was looked up.
    expect(keyLookups()).toBe(0);
  });

  it("refuses an allowed-looking but unlisted algorithm (RS384)", async () => {
    const key = await createTestKey("RS384");
    const { verifier } = await setup([key]);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs)))).toMatch(/algorithm/);
  });

  it("refuses a token signed with an unknown key", async () => {
    const known = await createTestKey();
    const stranger = await createTestKey();
    const { verifier } = await setup([known]);
    expect(await refusal(verifier, await signWith(stranger, validClaims(nowMs)))).toMatch(/unknown key/);
  });

  it("refuses a token whose payload was altered after signing", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    const [header, , signature] = (await signWith(key, validClaims(nowMs, { scope: "members" }))).split(".");
    const widened = `${header}.${segment(validClaims(nowMs, { scope: "members cluster backups" }))}.${signature}`;
    expect(await refusal(verifier, widened)).toMatch(/signature/);
  });

  it("refuses tokens lacking the claims flowplane needs, and garbage", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key]);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { org: undefined })))).toMatch(/org/);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { sub: undefined })))).toMatch(/sub/);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { exp: undefined })))).toMatch(/exp/);
    expect(await refusal(verifier, await signWith(key, validClaims(nowMs, { scope: ["members"] })))).toMatch(/scope/);
    expect(await refusal(verifier, "not.a.token")).toMatch(/malformed/);
  });

  it("serves repeated tokens from its cache until they expire", async () => {
    const key = await createTestKey();
    const { verifier, keyLookups, advance } = await setup([key]);
    const token = await signWith(key, validClaims(nowMs));
    const first = await verifier.verify(token);
    for (let request = 0; request < 5; request++) expect(await verifier.verify(token)).toBe(first);
    expect(verifier.statistics).toEqual({ verifications: 1, cacheHits: 5 });
    expect(keyLookups()).toBe(1);

    // At expiry the cached entry is dropped; the token is verified again (and, past the skew, refused).
    advance(600_000);
    expect((await verifier.verify(token)).clientId).toBe("client-1");
    expect(verifier.statistics.verifications).toBe(2);
    advance(31_000);
    await refusal(verifier, token);
    expect(verifier.statistics.verifications).toBe(3);
  });

  it("refuses a cached token as it refuses it uncached once the clock stepped back before its issue", async () => {
    const key = await createTestKey();
    const { verifier, advance } = await setup([key]);
    const used = await signWith(key, validClaims(nowMs));
    const unused = await signWith(key, validClaims(nowMs, { jti: "token-2" }));
    await verifier.verify(used);
    // The clock steps back an hour: both tokens are issued in its future now, the one served from the cache too.
    advance(-3_600_000);
    expect(await refusal(verifier, unused)).toMatch(/future/);
    expect(await refusal(verifier, used)).toMatch(/future/);
  });

  it("keeps its cache bounded, dropping the least recently used token", async () => {
    const key = await createTestKey();
    const { verifier } = await setup([key], { cacheMaxEntries: 2 });
    const tokens = await Promise.all(["a", "b", "c"].map((jti) => signWith(key, validClaims(nowMs, { jti }))));
    const [a, b, c] = tokens as [string, string, string];
    await verifier.verify(a);
    await verifier.verify(b);
    await verifier.verify(a);
    await verifier.verify(c);
    expect(verifier.statistics).toEqual({ verifications: 3, cacheHits: 1 });
    await verifier.verify(a);
    expect(verifier.statistics.cacheHits).toBe(2);
    await verifier.verify(b);
    expect(verifier.statistics.verifications).toBe(4);
  });
});
