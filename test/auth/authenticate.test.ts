import { createLocalJWKSet } from "jose";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bearerSecurity, installAuthentication, principalOf } from "../../src/auth/authenticate.js";
import type { KeySource } from "../../src/auth/key-source.js";
import { TokenVerificationError, TokenVerifier } from "../../src/auth/verifier.js";
import { ServiceError } from "../../src/http/errors.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";
import { defaultHttpServerLimits } from "../support/http.js";
import { createTestKey, signWith, type TestKey, testAudience, testIssuer, validClaims } from "./support.js";

const nowMs = Date.UTC(2030, 0, 1);

describe("installAuthentication", () => {
  let server: HttpServer;
  let key: TestKey;
  let keysReachable = true;
  const routeSchemas = new Map<string, unknown>();

  beforeAll(async () => {
    key = await createTestKey();
    const lookup = createLocalJWKSet({ keys: [key.publicJwk] });
    const keySource: KeySource = async (header, token) => {
      if (!keysReachable) throw new Error("connect ECONNREFUSED");
      return await lookup(header, token);
    };
    const verifier = new TokenVerifier({ keySource, issuer: testIssuer, audience: testAudience, clock: () => nowMs });
    server = createHttpServer({
      logger: pino({ level: "silent" }),
      bodyLimitBytes: 1024,
      trustProxy: false,
      limits: defaultHttpServerLimits,
    });
    server.get("/public", async () => ({ open: true }));
    await server.register(async (guarded) => {
      installAuthentication(guarded, { verifier });
      guarded.addHook("onRoute", (route) => {
        routeSchemas.set(route.url, route.schema);
      });
      guarded.get("/admin/whoami", async (request) => {
        const principal = principalOf(request);
        return { clientId: principal.clientId, scopes: [...principal.scopes] };
      });
      guarded.get("/admin/members", { config: { scopes: ["members"] } }, async () => ({ members: [] }));
      guarded.get("/admin/backups", { config: { scopes: ["backups", "cluster"] } }, async () => ({ backups: [] }));
      guarded.get("/admin/secrets", { config: { scopes: ["secrets", "backups"] } }, async () => ({ secrets: [] }));
    });
    await server.ready();
  });
  afterAll(async () => {
    await server.close();
  });

  const get = (url: string, authorization?: string) =>
    server.inject({ method: "GET", url, headers: authorization === undefined ? {} : { authorization } });

  it("lets a valid token through and exposes the principal", async () => {
    const token = await signWith(key, validClaims(nowMs, { scope: "members" }));
    const response = await get("/admin/whoami", `Bearer ${token}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ clientId: "client-1", scopes: ["members"] });
    expect((await get("/admin/members", `bearer ${token}`)).statusCode).toBe(200);
  });

  it("answers 401 with a bare Bearer challenge when no token is sent", async () => {
    for (const authorization of [undefined, "Basic dXNlcjpwYXNz"]) {
      const response = await get("/admin/whoami", authorization);
      expect(response.statusCode).toBe(401);
      expect(response.headers["www-authenticate"]).toBe('Bearer realm="flowplane"');
      expect(response.headers["content-type"]).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({ type: "urn:flowplane:problem:unauthorized", status: 401 });
    }
  });

  it("answers 401 invalid_token, with a description, for a bad token", async () => {
    const expired = await signWith(key, validClaims(nowMs, { exp: Math.floor(nowMs / 1000) - 3_600 }));
    const wrongAudience = await signWith(key, validClaims(nowMs, { aud: "modeler-api" }));
    for (const [authorization, description] of [
      [`Bearer ${expired}`, /expired/],
      [`Bearer ${wrongAudience}`, /audience/],
      ["Bearer not-a-jwt", /malformed/],
      ["Bearer", /well-formed/],
      ['Bearer "quoted"', /well-formed/],
    ] as const) {
      const response = await get("/admin/whoami", authorization);
      expect(response.statusCode).toBe(401);
      const challenge = String(response.headers["www-authenticate"]);
      expect(challenge).toMatch(/^Bearer realm="flowplane", error="invalid_token", error_description="[^"\\]*"$/);
      expect(challenge).toMatch(description);
      expect(response.json()).toMatchObject({ status: 401, detail: expect.stringMatching(description) });
    }
  });

  it("answers 403 naming the missing scope", async () => {
    const token = await signWith(key, validClaims(nowMs, { scope: "cluster modeler:read" }));
    const response = await get("/admin/members", `Bearer ${token}`);
    expect(response.statusCode).toBe(403);
    expect(response.headers["content-type"]).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({
      type: "urn:flowplane:problem:forbidden",
      status: 403,
      detail: expect.stringContaining("'members'"),
      requiredScopes: ["members"],
    });
    expect(response.headers["www-authenticate"]).toMatch(/error="insufficient_scope"/);
    expect(response.headers["www-authenticate"]).toMatch(/scope="members"$/);

    // Any one of several accepted scopes is enough.
    expect((await get("/admin/backups", `Bearer ${token}`)).statusCode).toBe(200);
    const refused = await get("/admin/secrets", `Bearer ${token}`);
    expect(refused.statusCode).toBe(403);
    expect(refused.json().requiredScopes).toEqual(["secrets", "backups"]);
  });

  it("answers 503, not 401, when the keys cannot be obtained", async () => {
    const token = await signWith(key, validClaims(nowMs, { jti: "fresh" }));
    keysReachable = false;
    try {
      const response = await get("/admin/whoami", `Bearer ${token}`);
      expect(response.statusCode).toBe(503);
      expect(response.headers["retry-after"]).toBe("5");
    } finally {
      keysReachable = true;
    }
  });

  it("leaves routes outside the guarded context alone and marks guarded routes in OpenAPI", async () => {
    expect((await get("/public")).statusCode).toBe(200);
    expect(routeSchemas.get("/admin/members")).toMatchObject({ security: bearerSecurity });
  });
});

describe("installAuthentication with checkPrincipal", () => {
  let server: HttpServer;
  let key: TestKey;
  let verifier: TokenVerifier;
  const deletedClients = new Set<string>();

  beforeAll(async () => {
    key = await createTestKey();
    const keySource: KeySource = createLocalJWKSet({ keys: [key.publicJwk] });
    verifier = new TokenVerifier({ keySource, issuer: testIssuer, audience: testAudience, clock: () => nowMs });
    server = createHttpServer({
      logger: pino({ level: "silent" }),
      bodyLimitBytes: 1024,
      trustProxy: false,
      limits: defaultHttpServerLimits,
    });
    await server.register(async (guarded) => {
      installAuthentication(guarded, {
        verifier,
        checkPrincipal: (principal) => {
          if (deletedClients.has(principal.clientId)) throw new TokenVerificationError("The client was deleted.");
          if (principal.clusterId === "elsewhere") {
            throw new ServiceError("tokenForAnotherCluster", "The access token was issued for another cluster.");
          }
        },
      });
      guarded.get("/admin/members", { config: { scopes: ["members"] } }, async () => ({ members: [] }));
    });
    await server.ready();
  });
  afterAll(async () => {
    await server.close();
  });

  const get = (token: string) =>
    server.inject({ method: "GET", url: "/admin/members", headers: { authorization: `Bearer ${token}` } });

  it("refuses a verified token the check rejects, cached or not, before looking at scopes", async () => {
    const token = await signWith(key, validClaims(nowMs, { sub: "client-9", scope: "members" }));
    expect((await get(token)).statusCode).toBe(200);
    deletedClients.add("client-9");
    const refused = await get(token);
    expect(verifier.statistics.cacheHits).toBeGreaterThan(0);
    expect(refused.statusCode).toBe(401);
    expect(refused.headers["www-authenticate"]).toBe(
      'Bearer realm="flowplane", error="invalid_token", error_description="The client was deleted."',
    );
    const withoutScope = await signWith(key, validClaims(nowMs, { sub: "client-9", scope: "backups" }));
    expect((await get(withoutScope)).statusCode).toBe(401);
  });

  it("answers the problem a check throws as it is", async () => {
    const token = await signWith(key, validClaims(nowMs, { scope: "members", cluster: "elsewhere" }));
    const refused = await get(token);
    expect(refused.statusCode).toBe(403);
    expect(refused.json()).toMatchObject({ type: "urn:flowplane:problem:token-for-another-cluster" });
  });
});
