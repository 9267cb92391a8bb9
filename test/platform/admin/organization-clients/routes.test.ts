import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scopeValues } from "../../../../src/auth/scopes.js";
import { maximumClientsPerOrganization } from "../../../../src/platform/admin/organization-clients/service.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";
import { captureLogger, createClusterAccessFixture } from "../cluster-access-support.js";

interface Created {
  clientId: string;
  clientSecret: string;
  name: string;
  scopes: string[];
  created: string;
}

describe("Administration API /clients (the organization's API clients) over HTTP", () => {
  let platform: TestPlatform;
  let adminToken: string;
  const access = createClusterAccessFixture();
  const log = captureLogger();
  /** Every secret the API handed out, to look for in the logs at the end. */
  const secrets: string[] = [];

  beforeAll(async () => {
    platform = await startTestPlatform({}, { logger: log.logger, clusterAccess: access.options });
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterAll(async () => await platform?.close());

  function call(method: string, path: string, token: string, body?: unknown): Promise<Response> {
    return fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  async function create(name: string, scopes: string[]): Promise<Created> {
    const response = await call("POST", "/clients", adminToken, { name, scopes });
    expect(response.status).toBe(200);
    const created = (await response.json()) as Created;
    secrets.push(created.clientSecret);
    return created;
  }

  it("creates a client holding the scopes asked for, answering its secret once, and lists it without the secret", async () => {
    const response = await call("POST", "/clients", adminToken, { name: "modeler CI", scopes: ["modeler:read"] });
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const created = (await response.json()) as Created;
    secrets.push(created.clientSecret);
    expect(created).toEqual({
      clientId: expect.stringMatching(/^[A-Za-z0-9_-]{20}$/),
      clientSecret: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      name: "modeler CI",
      scopes: ["modeler:read"],
      created: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    const listed = await call("GET", "/clients", adminToken);
    const listText = await listed.text();
    expect(listText).not.toContain(created.clientSecret);
    const list = JSON.parse(listText) as { clientId: string; name: string; scopes: string[] }[];
    // The administration client made on the first start is one of them, with every scope.
    expect(list.find((client) => client.clientId === platform.adminClient.clientId)?.scopes).toEqual([...scopeValues]);
    expect(list.find((client) => client.clientId === created.clientId)).toEqual({
      clientId: created.clientId,
      name: "modeler CI",
      scopes: ["modeler:read"],
      created: created.created,
    });
    // Its tokens carry its scopes and reach only the APIs they open.
    const client = { clientId: created.clientId, clientSecret: created.clientSecret };
    expect(await requestToken(platform, client, "modeler-api")).toMatch(/^ey/);
    const refused = await fetch(`${platform.url}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "client_credentials", audience: "admin-api", ...toForm(client) }),
    });
    expect(((await refused.json()) as { error: string }).error).toBe("invalid_target");
  });

  it("refuses a taken name, an unknown scope and an empty list with 400 naming the field", async () => {
    await create("deploy", ["cluster"]);
    const cases: [unknown, string][] = [
      [{ name: "deploy", scopes: ["members"] }, "body/name"],
      [{ name: "other", scopes: ["root"] }, "body/scopes/0"],
      [{ name: "other", scopes: [] }, "body/scopes"],
      [{ name: " padded", scopes: ["members"] }, "body/name"],
      // Invisible or rearranging characters: C1 controls, a bidirectional override, a zero-width space, a lone
      // surrogate, a line separator.
      [{ name: "a\u0085b", scopes: ["members"] }, "body/name"],
      [{ name: "evil\u202Egnp.exe", scopes: ["members"] }, "body/name"],
      [{ name: "deploy\u200B", scopes: ["members"] }, "body/name"],
      [{ name: "a\ud800b", scopes: ["members"] }, "body/name"],
      [{ name: "two\u2028lines", scopes: ["members"] }, "body/name"],
      [{ name: "other", scopes: ["members"], permissions: ["gateway"] }, "body/permissions"],
    ];
    for (const [body, location] of cases) {
      const response = await call("POST", "/clients", adminToken, body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      const problem = (await response.json()) as { errors?: { location: string }[] };
      expect(problem.errors?.map((error) => error.location)).toContain(location);
    }
  });

  it("stores a name in its composed form, so a decomposed spelling of a taken name is taken too", async () => {
    const composed = await create("Caf\u00e9", ["members"]);
    expect(composed.name).toBe("Caf\u00e9");
    const decomposed = await call("POST", "/clients", adminToken, { name: "Cafe\u0301", scopes: ["members"] });
    expect(decomposed.status).toBe(400);
    expect(((await decomposed.json()) as { detail: string }).detail).toContain("body/name is already taken");
  });

  it("takes a token holding every scope: one lacking some is answered 403 naming what it lacks", async () => {
    const narrow = await requestToken(platform, platform.adminClient, "admin-api", "members cluster");
    for (const [method, path, body] of [
      ["GET", "/clients", undefined],
      ["POST", "/clients", { name: "escalated", scopes: [...scopeValues] }],
      ["DELETE", `/clients/${platform.adminClient.clientId}`, undefined],
    ] as const) {
      const response = await call(method, path, narrow, body);
      expect(response.status, `${method} ${path}`).toBe(403);
      const problem = (await response.json()) as { detail: string; requiredScopes: string[] };
      expect(problem.detail).toContain("this one lacks cluster-clients, modeler:create");
      expect(problem.requiredScopes).toEqual([...scopeValues]);
    }
  });

  it("deletes a client: 204, then the platform refuses its tokens and every cluster of the organization gets a new access policy", async () => {
    const clusters = [randomUUID(), randomUUID()].map((id) => access.addCluster(platform.organizationId, id).id);
    access.addCluster("another-organization", randomUUID());
    const created = await create("short-lived", ["members"]);
    const token = await requestToken(
      platform,
      { clientId: created.clientId, clientSecret: created.clientSecret },
      "admin-api",
    );
    expect((await call("GET", "/members", token)).status).toBe(200);
    access.changes.length = 0;
    expect((await call("DELETE", `/clients/${created.clientId}`, adminToken)).status).toBe(204);
    // Every cluster of the organization gets a new access policy (listing the client), and no other cluster.
    expect([...access.changes].sort()).toEqual([...clusters].sort());
    // The platform's lookup of the client is cached for at most 5 s.
    let refused = await call("GET", "/members", token);
    for (let attempt = 0; refused.status === 200 && attempt < 100; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      refused = await call("GET", "/members", token);
    }
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { detail: string }).detail).toBe(
      "The client this token was issued to has been deleted.",
    );
    expect((await call("DELETE", `/clients/${created.clientId}`, adminToken)).status).toBe(404);
  });

  it("refuses to delete the calling client (409) and another organization's client (404)", async () => {
    const self = await call("DELETE", `/clients/${platform.adminClient.clientId}`, adminToken);
    expect(self.status).toBe(409);
    expect(((await self.json()) as { detail: string }).detail).toContain("A client cannot delete itself");
    const stranger = await createTestClient(platform, ["members"]);
    // A client of this organization made outside the API is still this organization's; an id it does not have is not.
    expect((await call("DELETE", `/clients/${randomUUID()}`, adminToken)).status).toBe(404);
    expect((await call("DELETE", `/clients/${stranger.clientId}`, adminToken)).status).toBe(204);
  });

  it("records creations and deletions in the activity log, and never logs a secret", async () => {
    const entries = (await (await call("GET", "/activity/json", adminToken)).json()) as {
      entity: string;
      auditType: string;
    }[];
    const recorded = entries.filter((entry) => entry.entity === "organization-client");
    expect(recorded.filter((entry) => entry.auditType === "c").length).toBeGreaterThanOrEqual(3);
    expect(recorded.filter((entry) => entry.auditType === "d").length).toBeGreaterThanOrEqual(2);
    for (const secret of secrets) expect(log.lines()).not.toContain(secret);
  });

  // Last: it leaves the organization full.
  it(`answers 409 once the organization holds ${maximumClientsPerOrganization} clients, naming the bound`, async () => {
    const listed = (await (await call("GET", "/clients", adminToken)).json()) as unknown[];
    const missing = maximumClientsPerOrganization - listed.length;
    for (let start = 0; start < missing; start += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, missing - start) }, (_, offset) =>
          call("POST", "/clients", adminToken, { name: `filler ${start + offset}`, scopes: ["members"] }),
        ),
      );
    }
    const refused = await call("POST", "/clients", adminToken, { name: "one too many", scopes: ["members"] });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { detail: string }).detail).toBe(
      `The organization already holds ${maximumClientsPerOrganization} API clients, the most it may hold; delete one first.`,
    );
  });
});

function toForm(client: { clientId: string; clientSecret: string }): Record<string, string> {
  return { client_id: client.clientId, client_secret: client.clientSecret };
}
