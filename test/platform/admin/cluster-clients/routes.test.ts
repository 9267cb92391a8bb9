import { randomUUID } from "node:crypto";
import { decodeJwt } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { maximumClientsPerCluster } from "../../../../src/platform/admin/cluster-clients/service.js";
import type { ClusterSummary } from "../../../../src/platform/admin/cluster-directory.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";
import { captureLogger, createClusterAccessFixture } from "../cluster-access-support.js";

interface Created {
  uuid: string;
  clientId: string;
  clientSecret: string;
  name: string;
  permissions: string[];
  audience: string;
  links: { gateway: string; management: string; oauth: string };
}

describe("Administration API /clusters/{clusterId}/clients over HTTP", () => {
  let platform: TestPlatform;
  let adminToken: string;
  let cluster: ClusterSummary;
  let otherCluster: ClusterSummary;
  let foreignCluster: ClusterSummary;
  const access = createClusterAccessFixture();
  const log = captureLogger();
  const policyChanges = access.changes;
  /** Every secret the API handed out, to look for in the logs at the end. */
  const secrets: string[] = [];

  beforeAll(async () => {
    platform = await startTestPlatform({}, { logger: log.logger, clusterAccess: access.options });
    cluster = access.addCluster(platform.organizationId, randomUUID());
    otherCluster = access.addCluster(platform.organizationId, randomUUID());
    foreignCluster = access.addCluster("another-organization", randomUUID());
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterAll(async () => await platform?.close());

  function call(method: string, path: string, token: string | null, body?: unknown): Promise<Response> {
    return fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
  }

  async function create(clusterId: string, body: unknown): Promise<Created> {
    const response = await call("POST", `/clusters/${clusterId}/clients`, adminToken, body);
    expect(response.status).toBe(200);
    const created = (await response.json()) as Created;
    secrets.push(created.clientSecret);
    return created;
  }

  it("creates a client, answering its secret once, then lists and describes it without the secret", async () => {
    const response = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, { clientName: "worker" });
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const created = (await response.json()) as Created;
    secrets.push(created.clientSecret);
    expect(created).toEqual({
      uuid: expect.stringMatching(/^[0-9a-f-]{36}$/),
      clientId: expect.stringMatching(/^[A-Za-z0-9_-]{20}$/),
      clientSecret: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      name: "worker",
      permissions: ["gateway"],
      audience: "gateway-api",
      links: cluster.links,
    });

    const list = await call("GET", `/clusters/${cluster.id}/clients`, adminToken);
    expect(list.status).toBe(200);
    const listText = await list.text();
    expect(JSON.parse(listText)).toEqual([{ clientId: created.clientId, name: "worker", permissions: ["gateway"] }]);
    expect(listText).not.toContain(created.clientSecret);

    const details = await call("GET", `/clusters/${cluster.id}/clients/${created.clientId}`, adminToken);
    expect(details.status).toBe(200);
    const detailsText = await details.text();
    expect(JSON.parse(detailsText)).toEqual({
      name: "worker",
      SERVICE_ADDRESS: cluster.links.gateway,
      SERVICE_CLIENT_ID: created.clientId,
      SERVICE_AUTHORIZATION_SERVER_URL: `${platform.issuerUrl}/oauth/token`,
      SERVICE_TOKEN_AUDIENCE: "gateway-api",
    });
    expect(detailsText).not.toContain(created.clientSecret);
    // The other cluster of the organization does not show it.
    expect(await (await call("GET", `/clusters/${otherCluster.id}/clients`, adminToken)).json()).toEqual([]);
  });

  it("issues the client tokens for the gateway audience only, carrying its cluster and permissions", async () => {
    const created = await create(cluster.id, { clientName: "connectors", permissions: ["secrets", "gateway"] });
    expect(created.permissions).toEqual(["gateway", "secrets"]);
    const credentials = { clientId: created.clientId, clientSecret: created.clientSecret };
    const token = await requestToken(platform, credentials, "gateway-api");
    expect(decodeJwt(token)).toMatchObject({
      sub: created.clientId,
      aud: "gateway-api",
      org: platform.organizationId,
      cluster: cluster.id,
      scope: "gateway secrets",
      permissions: ["gateway", "secrets"],
    });
    const narrowed = decodeJwt(await requestToken(platform, credentials, "gateway-api", "secrets"));
    expect(narrowed).toMatchObject({ scope: "secrets", permissions: ["secrets"], cluster: cluster.id });
    // Its `secrets` permission must not open the Administration API (organization-wide secrets) or the Modeler.
    await expect(requestToken(platform, credentials, "admin-api")).rejects.toThrow(/invalid_target/);
    await expect(requestToken(platform, credentials, "modeler-api")).rejects.toThrow(/invalid_target/);
    await expect(requestToken(platform, credentials, "gateway-api", "cluster")).rejects.toThrow(/invalid_scope/);
    // Organization clients' tokens carry no cluster.
    expect(decodeJwt(await requestToken(platform, platform.adminClient, "gateway-api")).cluster).toBeUndefined();
  });

  it("deletes a client: 204, the issuer refuses it at once and the cluster's access policy is rewritten", async () => {
    const created = await create(cluster.id, { clientName: "short-lived" });
    const credentials = { clientId: created.clientId, clientSecret: created.clientSecret };
    await requestToken(platform, credentials, "gateway-api");
    policyChanges.length = 0;
    const deleted = await call("DELETE", `/clusters/${cluster.id}/clients/${created.clientId}`, adminToken);
    expect(deleted.status).toBe(204);
    expect(policyChanges).toEqual([cluster.id]);
    await expect(requestToken(platform, credentials, "gateway-api")).rejects.toThrow(/401.*invalid_client/);
    expect((await call("GET", `/clusters/${cluster.id}/clients/${created.clientId}`, adminToken)).status).toBe(404);
    const again = await call("DELETE", `/clusters/${cluster.id}/clients/${created.clientId}`, adminToken);
    expect(again.status).toBe(404);
    expect(again.headers.get("content-type")).toContain("application/problem+json");
    expect(policyChanges).toEqual([cluster.id]);
    // The name is free again.
    await create(cluster.id, { clientName: "short-lived" });
  });

  it("keeps names unique per cluster: a duplicate is a 400 naming clientName, another cluster may reuse it", async () => {
    await create(cluster.id, { clientName: "billing" });
    const duplicate = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, { clientName: "billing" });
    expect(duplicate.status).toBe(400);
    expect(((await duplicate.json()) as { detail: string }).detail).toContain("body/clientName");
    await create(otherCluster.id, { clientName: "billing" });
  });

  it("lets exactly one of concurrent creations with the same name succeed", async () => {
    const responses = await Promise.all(
      Array.from({ length: 8 }, () =>
        call("POST", `/clusters/${cluster.id}/clients`, adminToken, { clientName: "racer" }),
      ),
    );
    const statuses = responses.map((response) => response.status).sort();
    expect(statuses).toEqual([200, 400, 400, 400, 400, 400, 400, 400]);
    for (const response of responses) {
      const body = (await response.json()) as { clientSecret?: string };
      if (body.clientSecret !== undefined) secrets.push(body.clientSecret);
    }
    const list = (await (await call("GET", `/clusters/${cluster.id}/clients`, adminToken)).json()) as {
      name: string;
    }[];
    expect(list.filter((client) => client.name === "racer")).toHaveLength(1);
  });

  it.each([
    ["an unknown field", { clientName: "a", extra: 1 }, "body/extra"],
    ["a missing name", { permissions: ["gateway"] }, "body/clientName"],
    ["an empty name", { clientName: "" }, "body/clientName"],
    ["a name over 100 characters", { clientName: "n".repeat(101) }, "body/clientName"],
    ["a name with a control character", { clientName: "a\u001b[2Jb" }, "body/clientName"],
    ["a name with a leading blank", { clientName: " worker" }, "body/clientName"],
    ["a name that is not a string", { clientName: 7 }, "body/clientName"],
    ["an unknown permission", { clientName: "a", permissions: ["cluster"] }, "body/permissions/0"],
    ["an empty permission list", { clientName: "a", permissions: [] }, "body/permissions"],
    ["a repeated permission", { clientName: "a", permissions: ["gateway", "gateway"] }, "body/permissions"],
    ["permissions that are not a list", { clientName: "a", permissions: "gateway" }, "body/permissions"],
    ["a body that is not an object", [], "body"],
  ])("answers 400 naming the field for %s", async (_case, body, field) => {
    const response = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, body);
    expect(response.status).toBe(400);
    expect(response.headers.get("content-type")).toContain("application/problem+json");
    expect(((await response.json()) as { detail: string }).detail).toContain(field);
  });

  it("says in words what a name's pattern asks, and names the allowed permissions", async () => {
    const blank = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, { clientName: " worker" });
    expect(((await blank.json()) as { detail: string }).detail).toBe(
      "body/clientName must have no blank at either end and no invisible or control character",
    );
    const permission = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, {
      clientName: "a",
      permissions: ["cluster"],
    });
    const { detail } = (await permission.json()) as { detail: string };
    expect(detail).toMatch(/^body\/permissions\/0 must be /);
    expect(detail).toContain('"gateway"');
  });

  it("accepts a name of exactly 100 characters", async () => {
    expect((await create(otherCluster.id, { clientName: "n".repeat(100) })).name).toHaveLength(100);
  });

  it("answers 400 for malformed ids and malformed JSON, never a 5xx", async () => {
    const badCluster = await call("GET", "/clusters/-not-an-id/clients", adminToken);
    expect(badCluster.status).toBe(400);
    expect(((await badCluster.json()) as { detail: string }).detail).toContain("params/clusterId");
    const badClient = await call("GET", `/clusters/${cluster.id}/clients/${"%20".repeat(3)}`, adminToken);
    expect(badClient.status).toBe(400);
    expect(((await badClient.json()) as { detail: string }).detail).toContain("params/clientId");
    const malformed = await call("POST", `/clusters/${cluster.id}/clients`, adminToken, "{not json");
    expect(malformed.status).toBe(400);
  });

  it("answers 404 for an unknown cluster, another organization's cluster and a client of another cluster", async () => {
    const created = await create(cluster.id, { clientName: "mine" });
    for (const clusterId of [randomUUID(), foreignCluster.id]) {
      expect((await call("GET", `/clusters/${clusterId}/clients`, adminToken)).status).toBe(404);
      const post = await call("POST", `/clusters/${clusterId}/clients`, adminToken, { clientName: "x" });
      expect(post.status).toBe(404);
      expect((await call("GET", `/clusters/${clusterId}/clients/${created.clientId}`, adminToken)).status).toBe(404);
      expect((await call("DELETE", `/clusters/${clusterId}/clients/${created.clientId}`, adminToken)).status).toBe(404);
    }
    const elsewhere = `/clusters/${otherCluster.id}/clients/${created.clientId}`;
    expect((await call("GET", elsewhere, adminToken)).status).toBe(404);
    expect((await call("DELETE", elsewhere, adminToken)).status).toBe(404);
    // The organization's administration client is not a client of any cluster.
    const adminClientPath = `/clusters/${cluster.id}/clients/${platform.adminClient.clientId}`;
    expect((await call("GET", adminClientPath, adminToken)).status).toBe(404);
    expect((await call("DELETE", adminClientPath, adminToken)).status).toBe(404);
    expect((await call("GET", `/clusters/${cluster.id}/clients/${created.clientId}`, adminToken)).status).toBe(200);
  });

  it("requires a token (401) and the cluster-clients scope (403 naming it)", async () => {
    expect((await call("GET", `/clusters/${cluster.id}/clients`, null)).status).toBe(401);
    const clustersOnly = await createTestClient(platform, ["cluster", "members"]);
    const token = await requestToken(platform, clustersOnly, "admin-api");
    for (const [method, path] of [
      ["GET", `/clusters/${cluster.id}/clients`],
      ["POST", `/clusters/${cluster.id}/clients`],
      ["GET", `/clusters/${cluster.id}/clients/some-client`],
      ["DELETE", `/clusters/${cluster.id}/clients/some-client`],
    ] as const) {
      const response = await call(method, path, token, method === "POST" ? { clientName: "x" } : undefined);
      expect(response.status).toBe(403);
      expect(((await response.json()) as { detail: string }).detail).toContain("'cluster-clients'");
    }
  });

  it("records creations and deletions in the activity log, never with a secret", async () => {
    const created = await create(otherCluster.id, { clientName: "audited" });
    expect((await call("DELETE", `/clusters/${otherCluster.id}/clients/${created.clientId}`, adminToken)).status).toBe(
      204,
    );
    const json = await (await call("GET", "/activity/json?limit=1000", adminToken)).text();
    const entries = (JSON.parse(json) as { entity: string; entityId: string; auditType: string }[]).filter(
      (entry) => entry.entityId === created.clientId,
    );
    expect(entries.map((entry) => [entry.entity, entry.auditType]).sort()).toEqual([
      ["cluster-client", "c"],
      ["cluster-client", "d"],
    ]);
    const csv = await (await call("GET", "/activity/csv?limit=1000", adminToken)).text();
    for (const secret of secrets) {
      expect(json).not.toContain(secret);
      expect(csv).not.toContain(secret);
    }
  });

  it(`answers 409 once a cluster holds ${maximumClientsPerCluster} clients, naming the bound`, async () => {
    const path = `/clusters/${otherCluster.id}/clients`;
    const listed = (await (await call("GET", path, adminToken)).json()) as unknown[];
    const missing = maximumClientsPerCluster - listed.length;
    for (let start = 0; start < missing; start += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, missing - start) }, (_, offset) =>
          call("POST", path, adminToken, { clientName: `filler ${start + offset}` }),
        ),
      );
    }
    const refused = await call("POST", path, adminToken, { clientName: "one too many" });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { detail: string }).detail).toBe(
      `The cluster already holds ${maximumClientsPerCluster} clients, the most it may hold; delete one first.`,
    );
  });

  it("never writes a client secret into a log line", () => {
    expect(secrets.length).toBeGreaterThan(5);
    const lines = log.lines();
    expect(lines).toContain("request refused");
    for (const secret of secrets) expect(lines).not.toContain(secret);
  });
});
