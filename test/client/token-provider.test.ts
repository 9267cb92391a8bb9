import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt, UnsecuredJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OAuthClientError } from "../../src/client/errors.js";
import { secretDigest, TokenCacheFile } from "../../src/client/token-cache.js";
import { type ClientCredentials, TokenProvider } from "../../src/client/token-provider.js";
import { startTestPlatform } from "../support/platform.js";
import { countingDispatcher, manualClock, scriptedServer, sendJson, unsignedJwt } from "./support.js";

const lifetimeSeconds = 300;

let platform: Awaited<ReturnType<typeof startTestPlatform>>;
let credentials: ClientCredentials;
let temporaryDirectory: string;

beforeAll(async () => {
  platform = await startTestPlatform({
    "service.token.lifetimeSeconds": lifetimeSeconds,
    "service.rateLimit.burst": 10_000,
    "service.rateLimit.refillPerSecond": 10_000,
  });
  credentials = { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient };
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-client-"));
});

afterAll(async () => {
  await platform?.close();
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

describe("TokenProvider against a real platform", () => {
  it("reuses a token until shortly before exp, then requests a new one", async () => {
    const counter = countingDispatcher();
    const clock = manualClock(Date.now());
    const provider = new TokenProvider({
      credentials,
      defaultAudience: "admin-api",
      http: { dispatcher: counter.dispatcher, clock },
    });

    const sentAtMs = clock.now();
    const first = await provider.getToken();
    expect(first.source).toBe("network");
    const claims = decodeJwt(first.accessToken);
    expect(claims.aud).toBe("admin-api");
    // The lifetime the token claims, timed on this client's clock from when it asked.
    expect(first.issuedAtMs).toBe(sentAtMs);
    expect(first.expiresAtMs).toBe(sentAtMs + ((claims.exp ?? 0) - (claims.iat ?? 0)) * 1000);
    // 10% of a 300 s lifetime (30 s) is smaller than the 60 s cap, so it is the margin.
    expect(first.refreshAtMs).toBe(first.expiresAtMs - 30_000);

    clock.advance(first.refreshAtMs - clock.now() - 1);
    const reused = await provider.getToken();
    expect(reused.source).toBe("memory");
    expect(reused.accessToken).toBe(first.accessToken);
    expect(counter.count()).toBe(1);

    clock.advance(1);
    const renewed = await provider.getToken();
    expect(renewed.source).toBe("network");
    expect(decodeJwt(renewed.accessToken).jti).not.toBe(claims.jti);
    expect(counter.count()).toBe(2);
    await counter.close();
  });

  it("reuses a token on a client whose clock runs ten minutes ahead of the issuer's", async () => {
    const counter = countingDispatcher();
    const clock = manualClock(Date.now() + 600_000);
    const provider = new TokenProvider({
      credentials,
      defaultAudience: "admin-api",
      http: { dispatcher: counter.dispatcher, clock },
    });
    const first = await provider.getToken();
    expect(first.expiresAtMs).toBeGreaterThan(clock.now());
    clock.advance(60_000);
    const reused = await provider.getToken();
    expect(reused.source).toBe("memory");
    expect(counter.count()).toBe(1);
    await counter.close();
  });

  it("caps the refresh margin at refreshMarginMs when 10% of the lifetime is longer", async () => {
    const provider = new TokenProvider({ credentials, defaultAudience: "admin-api", refreshMarginMs: 5_000 });
    const token = await provider.getToken();
    expect(token.expiresAtMs - token.refreshAtMs).toBe(5_000);
  });

  it("shares one in-flight request among concurrent callers", async () => {
    const counter = countingDispatcher();
    const provider = new TokenProvider({
      credentials,
      defaultAudience: "admin-api",
      http: { dispatcher: counter.dispatcher },
    });
    const tokens = await Promise.all(Array.from({ length: 25 }, () => provider.getToken()));
    expect(counter.count()).toBe(1);
    expect(new Set(tokens.map((token) => token.accessToken)).size).toBe(1);
    await counter.close();
  });

  it("keeps separate tokens per audience and per requested scope", async () => {
    const counter = countingDispatcher();
    const provider = new TokenProvider({
      credentials,
      defaultAudience: "admin-api",
      http: { dispatcher: counter.dispatcher },
    });
    const [admin, modeler, narrowed] = await Promise.all([
      provider.getToken(),
      provider.getToken({ audience: "modeler-api" }),
      provider.getToken({ audience: "modeler-api", scope: "modeler:read" }),
    ]);
    expect(counter.count()).toBe(3);
    expect(decodeJwt(admin.accessToken).aud).toBe("admin-api");
    expect(decodeJwt(modeler.accessToken).aud).toBe("modeler-api");
    expect(narrowed.scope).toBe("modeler:read");
    expect(decodeJwt(narrowed.accessToken).scope).toBe("modeler:read");
    await counter.close();
  });

  it("stores tokens in a 0600 file that another provider instance reuses", async () => {
    const cacheFile = join(temporaryDirectory, "fresh", "tokens.json");
    const writer = new TokenProvider({ credentials, defaultAudience: "admin-api", cacheFile });
    const written = await writer.getToken();
    expect(written.source).toBe("network");
    expect((await stat(cacheFile)).mode & 0o777).toBe(0o600);
    expect((await stat(join(temporaryDirectory, "fresh"))).mode & 0o777).toBe(0o700);

    const counter = countingDispatcher();
    const reader = new TokenProvider({
      credentials,
      defaultAudience: "admin-api",
      cacheFile,
      http: { dispatcher: counter.dispatcher },
    });
    const read = await reader.getToken();
    expect(read.source).toBe("disk");
    expect(read.accessToken).toBe(written.accessToken);
    expect(counter.count()).toBe(0);
    expect(await readFile(cacheFile, "utf8")).not.toContain(credentials.clientSecret);
    await counter.close();
  });

  it("reuses a cached token only for the secret it was issued to", async () => {
    const cacheFile = join(temporaryDirectory, "secrets", "tokens.json");
    const written = await new TokenProvider({ credentials, defaultAudience: "admin-api", cacheFile }).getToken();
    expect(written.source).toBe("network");
    const wrongSecret = new TokenProvider({
      credentials: { ...credentials, clientSecret: "not-the-secret-of-this-client-at-all-0123" },
      defaultAudience: "admin-api",
      cacheFile,
    });
    await expect(wrongSecret.getToken()).rejects.toMatchObject({ status: 401, error: "invalid_client" });
    const rightSecret = await new TokenProvider({ credentials, defaultAudience: "admin-api", cacheFile }).getToken();
    expect(rightSecret).toMatchObject({ source: "disk", accessToken: written.accessToken });
  });

  it("does not reuse a cached token past its refresh time", async () => {
    const cacheFile = join(temporaryDirectory, "stale.json");
    const key = {
      oauthUrl: credentials.oauthUrl,
      clientId: credentials.clientId,
      secretDigest: secretDigest(credentials.clientSecret),
      audience: "admin-api",
      scope: "",
    };
    const nowMs = Date.now();
    await new TokenCacheFile(cacheFile).write(
      key,
      {
        accessToken: "stale-token",
        tokenType: "Bearer",
        scope: "members",
        audience: "admin-api",
        issuedAtMs: nowMs - 290_000,
        expiresAtMs: nowMs + 10_000,
        refreshAtMs: nowMs - 20_000,
      },
      nowMs,
    );
    const token = await new TokenProvider({ credentials, defaultAudience: "admin-api", cacheFile }).getToken();
    expect(token.source).toBe("network");
    expect(token.accessToken).not.toBe("stale-token");
  });

  it("raises OAuthClientError invalid_client for a wrong secret", async () => {
    const provider = new TokenProvider({
      credentials: { ...credentials, clientSecret: "not-the-secret-of-this-client-at-all-0123" },
      defaultAudience: "admin-api",
    });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OAuthClientError);
    expect(error).toMatchObject({ status: 401, error: "invalid_client", isAuthenticationFailure: true });
  });

  it("raises OAuthClientError invalid_target for an audience the client may not use", async () => {
    const provider = new TokenProvider({ credentials, defaultAudience: "no-such-api" });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OAuthClientError);
    expect(error).toMatchObject({ status: 400, error: "invalid_target", isAuthenticationFailure: false });
  });
});

describe("TokenProvider and Retry-After", () => {
  const slowDown = (retryAfter: string) => (_request: unknown, response: Parameters<typeof sendJson>[0]) =>
    sendJson(
      response,
      429,
      { error: "slow_down", error_description: "too many requests" },
      { "retry-after": retryAfter },
    );

  it("waits as Retry-After says on 429 and then gets the token", async () => {
    const issuedAtSeconds = Math.floor(Date.now() / 1000);
    const server = await scriptedServer([
      slowDown("1"),
      (_request, response) =>
        sendJson(response, 200, {
          access_token: unsignedJwt(issuedAtSeconds, 3600),
          token_type: "Bearer",
          expires_in: 3600,
          scope: "members",
        }),
    ]);
    const clock = manualClock(Date.now());
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "client", clientSecret: "secret" },
      defaultAudience: "admin-api",
      http: { clock },
    });
    const token = await provider.getToken();
    expect(token.source).toBe("network");
    expect(clock.sleeps).toEqual([1000]);
    expect(server.requests()).toBe(2);
    await server.close();
  });

  it("stops after the bounded number of retries and reports slow_down with the wait asked for", async () => {
    const server = await scriptedServer([slowDown("2")]);
    const clock = manualClock(Date.now());
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "client", clientSecret: "secret" },
      defaultAudience: "admin-api",
      http: { clock, retry: { maxRetries: 2 } },
    });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OAuthClientError);
    expect(error).toMatchObject({ status: 429, error: "slow_down", retryAfterSeconds: 2 });
    expect(server.requests()).toBe(3);
    expect(clock.sleeps).toEqual([2000, 2000]);
    await server.close();
  });

  it("does not wait when Retry-After exceeds the longest acceptable wait", async () => {
    const server = await scriptedServer([slowDown("3600")]);
    const clock = manualClock(Date.now());
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "client", clientSecret: "secret" },
      defaultAudience: "admin-api",
      http: { clock, retry: { maxWaitMs: 30_000 } },
    });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toMatchObject({ error: "slow_down", retryAfterSeconds: 3600 });
    expect(server.requests()).toBe(1);
    expect(clock.sleeps).toEqual([]);
    await server.close();
  });
});

describe("TokenProvider and a token endpoint that redirects", () => {
  it("does not follow the redirect (the secret would go with it) and names where it leads", async () => {
    const target = await scriptedServer([(_request, response) => sendJson(response, 200, { access_token: "t" })]);
    const server = await scriptedServer([
      (_request, response) => {
        response.writeHead(308, { location: `${target.url}/oauth/token` });
        response.end();
      },
    ]);
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "c", clientSecret: "s" },
      defaultAudience: "admin-api",
    });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OAuthClientError);
    expect(error).toMatchObject({ status: 308 });
    expect((error as Error).message).toContain(
      `redirecting to ${target.url}/oauth/token; point SERVICE_OAUTH_URL there`,
    );
    expect({ asked: server.requests(), followed: target.requests() }).toEqual({ asked: 1, followed: 0 });
    await Promise.all([server.close(), target.close()]);
  });
});

describe("TokenProvider and the lifetime a token endpoint claims", () => {
  async function tokenAnswering(bodyText: string) {
    const server = await scriptedServer([
      (_request, response) => {
        response.writeHead(200, { "content-type": "application/json" });
        response.end(bodyText);
      },
    ]);
    const clock = manualClock(Date.parse("2026-01-01T00:00:00Z"));
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "c", clientSecret: "s" },
      defaultAudience: "admin-api",
      http: { clock },
    });
    return { server, provider, clock };
  }

  it("refuses an expires_in that is not a finite, non-negative number as a malformed answer", async () => {
    for (const expiresIn of ["1e400", "-1e400", "-5", '"300"', "null"]) {
      const { server, provider } = await tokenAnswering(`{"access_token":"t","expires_in":${expiresIn}}`);
      const error = await provider.getToken().catch((caught: unknown) => caught);
      expect(error, expiresIn).toBeInstanceOf(OAuthClientError);
      expect(error, expiresIn).toMatchObject({ error: "invalid_response" });
      expect((error as Error).message).toContain("expires_in");
      await server.close();
    }
  });

  it("keeps a token no longer than its JWT exp, and never longer than 24 hours", async () => {
    const startSeconds = Date.parse("2026-01-01T00:00:00Z") / 1000;
    const day = 24 * 3600;
    const long = await tokenAnswering(JSON.stringify({ access_token: "opaque", expires_in: 365 * day }));
    const kept = await long.provider.getToken();
    expect(kept.expiresAtMs - kept.issuedAtMs).toBe(day * 1000);
    expect(new Date(kept.expiresAtMs).toISOString()).toBe("2026-01-02T00:00:00.000Z");
    await long.server.close();

    const jwt = new UnsecuredJWT({}).setExpirationTime(startSeconds + 600).encode();
    const bounded = await tokenAnswering(JSON.stringify({ access_token: jwt, expires_in: 30 * day }));
    const token = await bounded.provider.getToken();
    expect(token.expiresAtMs - token.issuedAtMs).toBe(600_000);
    await bounded.server.close();
  });
});
