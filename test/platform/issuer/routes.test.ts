import type { LightMyRequestResponse } from "fastify";
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scopeValues } from "../../../src/auth/scopes.js";
import { databaseKinds } from "../../support/databases.js";
import { type IssuerFixture, startIssuer } from "./support.js";

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
const formHeaders = { "content-type": "application/x-www-form-urlencoded" };
const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString("base64")}`;

function expectOAuthError(response: LightMyRequestResponse, status: number, error: string): void {
  expect(response.statusCode, response.body).toBe(status);
  expect(response.headers["content-type"]).toMatch(/^application\/json/);
  expect(response.headers["cache-control"]).toBe("no-store");
  const body = response.json() as Record<string, unknown>;
  expect(Object.keys(body).sort()).toEqual(["error", "error_description"]);
  expect(body.error).toBe(error);
  expect(typeof body.error_description).toBe("string");
}

describe.each(databaseKinds)("token endpoint (%s)", (kind) => {
  let issuer: IssuerFixture;
  let clientId: string;
  let secret: string;
  let address = 0;
  // Each test speaks from its own address so the per-address limit only matters where a test wants it to.
  const nextAddress = () => `192.0.2.${++address}`;

  const post = (payload: string, headers: Record<string, string> = formHeaders, remoteAddress = nextAddress()) =>
    issuer.server.inject({ method: "POST", url: "/oauth/token", payload, headers, remoteAddress });
  const request = (fields: Record<string, string>, remoteAddress?: string) =>
    post(
      form({ grant_type: "client_credentials", audience: "admin-api", ...fields }),
      formHeaders,
      remoteAddress ?? nextAddress(),
    );

  beforeAll(async () => {
    issuer = await startIssuer(kind, { "service.token.lifetimeSeconds": 600 });
    const created = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "console",
      scopes: ["cluster", "members", "modeler:read", "modeler:update"],
    });
    clientId = created.client.clientId;
    secret = created.secret;
  });
  afterAll(async () => {
    await issuer.close();
  });

  it("issues a signed token for form credentials, with exactly the contract's fields and claims", async () => {
    const response = await request({ client_id: clientId, client_secret: secret });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers["cache-control"]).toBe("no-store");
    expect(response.headers.pragma).toBe("no-cache");
    const body = response.json() as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(
      ["access_token", "expires_in", "not-before-policy", "refresh_expires_in", "scope", "token_type"].sort(),
    );
    expect(body).toMatchObject({
      expires_in: 600,
      refresh_expires_in: 0,
      token_type: "Bearer",
      "not-before-policy": 0,
      scope: "cluster modeler:read modeler:update members",
    });

    const jwks = await issuer.server.inject({ method: "GET", url: "/.well-known/jwks.json" });
    const token = String(body.access_token);
    const { payload, protectedHeader } = await jwtVerify(token, createLocalJWKSet(jwks.json()), {
      currentDate: new Date(issuer.clock.now()),
    });
    expect(protectedHeader).toEqual({ alg: "RS256", kid: issuer.services.signingKeys.currentKeyId, typ: "JWT" });
    const nowSeconds = Math.floor(issuer.clock.now() / 1000);
    expect(Object.keys(payload).sort()).toEqual(["aud", "azp", "exp", "iat", "iss", "jti", "org", "scope", "sub"]);
    expect(payload).toMatchObject({
      iss: "https://issuer.test",
      sub: clientId,
      azp: clientId,
      aud: "admin-api",
      iat: nowSeconds,
      exp: nowSeconds + 600,
      scope: "cluster modeler:read modeler:update members",
      org: issuer.organizationId,
    });
    expect(payload.jti).toMatch(/^[0-9a-f-]{36}$/);
    const again = (await request({ client_id: clientId, client_secret: secret })).json() as { access_token: string };
    expect(decodeProtectedHeader(again.access_token).kid).toBe(protectedHeader.kid);
    expect(again.access_token).not.toBe(token);
  });

  it("accepts the same fields as JSON", async () => {
    const response = await post(
      JSON.stringify({
        grant_type: "client_credentials",
        audience: "modeler-api",
        client_id: clientId,
        client_secret: secret,
      }),
      { "content-type": "application/json" },
    );
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers["cache-control"]).toBe("no-store");
  });

  it("accepts HTTP Basic credentials, form-urlencoded before encoding (RFC 6749 §2.3.1)", async () => {
    const oddSecret = "a secret: with+plus %percent and é, long enough";
    const { client } = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "odd",
      scopes: ["members"],
      clientId: "odd.client~1",
      secret: oddSecret,
    });
    const response = await post(form({ grant_type: "client_credentials", audience: "admin-api" }), {
      ...formHeaders,
      authorization: basic(client.clientId, oddSecret),
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ scope: "members" });
  });

  it("refuses credentials sent both as Basic and in the body", async () => {
    const response = await post(
      form({ grant_type: "client_credentials", audience: "admin-api", client_id: clientId, client_secret: secret }),
      { ...formHeaders, authorization: basic(clientId, secret) },
    );
    expectOAuthError(response, 400, "invalid_request");
  });

  it("refuses a repeated field", async () => {
    const payload = `${form({ grant_type: "client_credentials", audience: "admin-api", client_id: clientId, client_secret: secret })}&audience=modeler-api`;
    const response = await post(payload);
    expectOAuthError(response, 400, "invalid_request");
    expect(response.json().error_description).toContain("audience");
  });

  it("refuses a field repeated in a JSON body as in a form", async () => {
    // JSON.parse keeps the last of a repeated key: the token would be for the audience the request named last.
    const credentials = `"client_id": ${JSON.stringify(clientId)}, "client_secret": ${JSON.stringify(secret)}`;
    const payload = `{"grant_type": "client_credentials", "audience": "modeler-api", ${credentials}, "audience": "admin-api"}`;
    const response = await post(payload, { "content-type": "application/json" });
    expectOAuthError(response, 400, "invalid_request");
    expect(response.json().error_description).toMatch(/repeats the key .audience./);
  });

  it("takes a client named in the body beside the same client's Basic credentials", async () => {
    const response = await post(
      form({ grant_type: "client_credentials", audience: "admin-api", client_id: clientId }),
      {
        ...formHeaders,
        authorization: basic(clientId, secret),
      },
    );
    expect(response.statusCode, response.body).toBe(200);
  });

  it("reads at most 16 KiB of a token request, whatever the server's general limit", async () => {
    const fields = {
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: clientId,
      client_secret: secret,
    };
    // Unknown fields are ignored (RFC 6749 §3.2), so padding alone decides.
    const padded = (bytes: number) => {
      const base = form({ ...fields, padding: "" });
      return `${base}${"x".repeat(bytes - base.length)}`;
    };
    expect((await post(padded(16 * 1024))).statusCode).toBe(200);
    const tooLarge = await post(padded(16 * 1024 + 1));
    expectOAuthError(tooLarge, 400, "invalid_request");
  });

  it("quotes a refused audience or scope briefly, in the characters an error description may hold", async () => {
    const audience = `caf\u00e9 "api" \\ ${"a".repeat(10_000)}`;
    const refused = await request({ client_id: clientId, client_secret: secret, audience });
    expectOAuthError(refused, 400, "invalid_target");
    const description = refused.json().error_description as string;
    expect(description).toMatch(/^The audience 'caf\? \?api\? \? a+\.\.\.' \(10013 characters\) is not served/);
    expect(description.length).toBeLessThan(200);
    expect(description).toMatch(/^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/);
    const scope = await request({ client_id: clientId, client_secret: secret, scope: `members ${"s".repeat(5_000)}` });
    expectOAuthError(scope, 400, "invalid_scope");
    expect(scope.body.length).toBeLessThan(300);
  });

  it.each(["grant_type", "audience", "client_id", "client_secret"])("refuses a request without %s", async (field) => {
    const fields: Record<string, string> = {
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: clientId,
      client_secret: secret,
    };
    delete fields[field];
    const response = await post(form(fields));
    expectOAuthError(response, 400, "invalid_request");
    expect(response.json().error_description).toContain(field);
  });

  it("refuses malformed bodies, wrong content types and non-string fields as invalid_request", async () => {
    expectOAuthError(await post("{not json", { "content-type": "application/json" }), 400, "invalid_request");
    const wrongType = await post("grant_type=client_credentials", { "content-type": "text/plain" });
    expectOAuthError(wrongType, 400, "invalid_request");
    expect(wrongType.json().error_description).toBe(
      "Send the body as application/x-www-form-urlencoded or application/json.",
    );
    expectOAuthError(
      await post(JSON.stringify({ grant_type: "client_credentials", audience: ["admin-api"] }), {
        "content-type": "application/json",
      }),
      400,
      "invalid_request",
    );
    expectOAuthError(
      await post(JSON.stringify([1, 2]), { "content-type": "application/json" }),
      400,
      "invalid_request",
    );
    expectOAuthError(
      await post(form({ grant_type: "client_credentials", audience: "admin-api" }), {
        ...formHeaders,
        authorization: "Bearer abc",
      }),
      400,
      "invalid_request",
    );
  });

  it("answers unsupported_grant_type for any other grant", async () => {
    const response = await request({ grant_type: "password", client_id: clientId, client_secret: secret });
    expectOAuthError(response, 400, "unsupported_grant_type");
  });

  it("answers invalid_client identically for an unknown client and a wrong secret", async () => {
    const unknown = await request({ client_id: "nobody", client_secret: secret });
    const wrong = await request({ client_id: clientId, client_secret: `${secret}x` });
    expectOAuthError(unknown, 401, "invalid_client");
    expectOAuthError(wrong, 401, "invalid_client");
    expect(unknown.body).toBe(wrong.body);
    expect(unknown.headers["www-authenticate"]).toBeUndefined();
    const viaBasic = await post(form({ grant_type: "client_credentials", audience: "admin-api" }), {
      ...formHeaders,
      authorization: basic("nobody-else", secret),
    });
    expectOAuthError(viaBasic, 401, "invalid_client");
    expect(viaBasic.headers["www-authenticate"]).toBe('Basic realm="flowplane"');
    expect(viaBasic.body).toBe(unknown.body);
    const impossible = await request({ client_id: "x".repeat(200), client_secret: secret });
    expectOAuthError(impossible, 401, "invalid_client");
    expect(impossible.body).toBe(unknown.body);
    const failureRows = await issuer.store.database.selectFrom("client_failures").select("client_id").execute();
    expect(failureRows.map((row) => row.client_id).sort()).toEqual([clientId, "nobody", "nobody-else"].sort());
    // The failure delay was started for both ids; let it pass so later tests start clean.
    issuer.clock.advance(10_000);
  });

  it("answers invalid_target for an audience the client's scopes do not reach, or no API at all", async () => {
    const { client, secret: modelerSecret } = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "modeler only",
      scopes: ["modeler:read"],
    });
    const credentials = { client_id: client.clientId, client_secret: modelerSecret };
    expectOAuthError(await request({ ...credentials, audience: "admin-api" }), 400, "invalid_target");
    expectOAuthError(await request({ ...credentials, audience: "gateway-api" }), 400, "invalid_target");
    expectOAuthError(await request({ ...credentials, audience: "elsewhere" }), 400, "invalid_target");
    expect((await request({ ...credentials, audience: "modeler-api" })).statusCode).toBe(200);
    expect((await request({ client_id: clientId, client_secret: secret, audience: "gateway-api" })).statusCode).toBe(
      200,
    );
  });

  it("narrows the granted scopes to those requested and refuses a scope the client does not hold", async () => {
    const narrowed = await request({ client_id: clientId, client_secret: secret, scope: "members  modeler:read" });
    expect(narrowed.statusCode, narrowed.body).toBe(200);
    expect(narrowed.json().scope).toBe("modeler:read members");
    const widened = await request({ client_id: clientId, client_secret: secret, scope: "members backups" });
    expectOAuthError(widened, 400, "invalid_scope");
    expect(widened.json().error_description).toContain("backups");
  });

  it("publishes the JWKS and the issuer metadata with caching headers", async () => {
    const jwks = await issuer.server.inject({ method: "GET", url: "/.well-known/jwks.json" });
    expect(jwks.statusCode).toBe(200);
    expect(jwks.headers["cache-control"]).toMatch(/^public, max-age=\d+$/);
    const keys = (jwks.json() as { keys: Record<string, unknown>[] }).keys;
    expect(keys.map((key) => key.kid)).toEqual([issuer.services.signingKeys.currentKeyId]);
    for (const key of keys) expect(Object.keys(key)).not.toEqual(expect.arrayContaining(["d"]));

    for (const url of ["/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"]) {
      const metadata = await issuer.server.inject({ method: "GET", url });
      expect(metadata.statusCode).toBe(200);
      expect(metadata.headers["cache-control"]).toMatch(/^public, max-age=\d+$/);
      expect(metadata.json()).toEqual({
        issuer: "https://issuer.test",
        token_endpoint: "https://issuer.test/oauth/token",
        jwks_uri: "https://issuer.test/.well-known/jwks.json",
        grant_types_supported: ["client_credentials"],
        token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"],
        scopes_supported: [...scopeValues],
        response_types_supported: [],
      });
    }
  });

  it("refuses a client id at an address for a growing delay after failures there, even with the right secret", async () => {
    const { client, secret: ownSecret } = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "guessed",
      scopes: ["members"],
    });
    const right = { client_id: client.clientId, client_secret: ownSecret };
    const wrong = { client_id: client.clientId, client_secret: "guess" };
    const guesser = nextAddress();
    expectOAuthError(await request(wrong, guesser), 401, "invalid_client");
    const delayed = await request(right, guesser);
    expectOAuthError(delayed, 429, "slow_down");
    expect(delayed.headers["retry-after"]).toBe("1");
    issuer.clock.advance(250);
    expectOAuthError(await request(wrong, guesser), 401, "invalid_client");
    issuer.clock.advance(499);
    expectOAuthError(await request(right, guesser), 429, "slow_down");
    issuer.clock.advance(1);
    expect((await request(right, guesser)).statusCode).toBe(200);
    // The success reset the count: the next failure waits the base delay again. (The pause refills the address's
    // bucket, which this many requests from one address would otherwise empty.)
    issuer.clock.advance(2_000);
    expectOAuthError(await request(wrong, guesser), 401, "invalid_client");
    issuer.clock.advance(250);
    expect((await request(right, guesser)).statusCode).toBe(200);
  });

  it("never refuses the right secret from one address because of wrong secrets from another", async () => {
    const { client, secret: ownSecret } = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "targeted",
      scopes: ["members"],
    });
    const right = { client_id: client.clientId, client_secret: ownSecret };
    const wrong = { client_id: client.clientId, client_secret: "guess" };
    const attacker = nextAddress();
    const owner = nextAddress();
    // Five requests from each address at most: within the per-address burst, so every 429 here is the failure delay.
    expectOAuthError(await request(wrong, attacker), 401, "invalid_client");
    for (let attempt = 0; attempt < 3; attempt++) {
      // The attacker stays refused, wrong secret or right one, while the delay it earned runs.
      const refused = await request(wrong, attacker);
      expectOAuthError(refused, 429, "slow_down");
      expect(refused.json().error_description).toMatch(/failed authentications/);
      expect((await request(right, owner)).statusCode).toBe(200);
    }
    expectOAuthError(await request(right, attacker), 429, "slow_down");
    // Failures from every other address do not delay the owner either.
    for (let attempt = 0; attempt < 2; attempt++) {
      expectOAuthError(await request(wrong), 401, "invalid_client");
      expect((await request(right, owner)).statusCode).toBe(200);
    }
    issuer.clock.advance(10_000);
  });
});

describe.each(databaseKinds)("token endpoint rate limit (%s)", (kind) => {
  let issuer: IssuerFixture;
  beforeAll(async () => {
    issuer = await startIssuer(kind, {
      "service.rateLimit.burst": 3,
      "service.rateLimit.refillPerSecond": 1,
      "service.rateLimit.blockSeconds": 60,
    });
  });
  afterAll(async () => {
    await issuer.close();
  });

  it("counts every request, failures and malformed ones included, then answers 429 and blocks the address", async () => {
    const from = (remoteAddress: string, payload: string, contentType = "application/x-www-form-urlencoded") =>
      issuer.server.inject({
        method: "POST",
        url: "/oauth/token",
        payload,
        headers: { "content-type": contentType },
        remoteAddress,
      });
    const failing = form({
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: "x",
      client_secret: "y",
    });
    expectOAuthError(await from("198.51.100.1", failing), 401, "invalid_client");
    expectOAuthError(await from("198.51.100.1", "{", "application/json"), 400, "invalid_request");
    expectOAuthError(await from("198.51.100.1", "grant_type=password"), 400, "invalid_request");
    const limited = await from("198.51.100.1", failing);
    expectOAuthError(limited, 429, "slow_down");
    expect(limited.headers["retry-after"]).toBe("60");
    const otherClient = form({
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: "z",
      client_secret: "y",
    });
    expectOAuthError(await from("198.51.100.2", otherClient), 401, "invalid_client");

    issuer.clock.advance(59_000);
    const stillBlocked = await from("198.51.100.1", failing);
    expectOAuthError(stillBlocked, 429, "slow_down");
    expect(stillBlocked.headers["retry-after"]).toBe("1");
    issuer.clock.advance(1_000);
    expectOAuthError(await from("198.51.100.1", failing), 401, "invalid_client");
  });
});

describe.each(databaseKinds)("token endpoint behind a proxy that writes ports (%s, real server)", (kind) => {
  let issuer: IssuerFixture;
  let url: string;
  beforeAll(async () => {
    issuer = await startIssuer(kind, {
      "service.platform.trustProxy": true,
      "service.rateLimit.burst": 5,
      "service.rateLimit.refillPerSecond": 1,
      "service.rateLimit.blockSeconds": 60,
    });
    url = `${await issuer.server.listen({ host: "127.0.0.1", port: 0 })}/oauth/token`;
  });
  afterAll(async () => {
    await issuer.close();
  });

  /** Posts a request the token endpoint refuses as malformed (never a failed authentication), via the proxy. */
  const viaProxy = async (forwardedFor: string) => {
    const response = await fetch(url, {
      method: "POST",
      headers: { ...formHeaders, "x-forwarded-for": forwardedFor },
      body: "grant_type=password",
    });
    await response.arrayBuffer();
    return response.status;
  };

  it("limits the requests of one address from many source ports like those of one address", async () => {
    const statuses: number[] = [];
    for (let request = 0; request < 20; request++) statuses.push(await viaProxy(`203.0.113.7:${50_100 + request}`));
    // The burst of 5, then 429 (the manual clock never refills the bucket).
    expect(statuses).toEqual([...Array(5).fill(400), ...Array(15).fill(429)]);
  });

  it("limits a bracketed IPv6 address with a port by its /64 network", async () => {
    const statuses: number[] = [];
    for (let request = 0; request < 6; request++) {
      statuses.push(await viaProxy(`[2001:db8:77:1::${request + 1}]:${50_200 + request}`));
    }
    expect(statuses).toEqual([...Array(5).fill(400), 429]);
    // Another network behind the same proxy has a bucket of its own.
    expect(await viaProxy("[2001:db8:77:2::1]:443")).toBe(400);
  });
});
