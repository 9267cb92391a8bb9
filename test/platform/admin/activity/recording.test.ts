import { randomUUID } from "node:crypto";
import Fastify from "fastify";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installActivityRecording } from "../../../../src/platform/admin/activity/recording.js";
import type { ActivityService } from "../../../../src/platform/admin/activity/service.js";
import { createTestDatabase, databaseKinds } from "../../../support/databases.js";
import { callWithToken } from "../../../support/http.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { requestToken } from "../../../support/tokens.js";
import { type ClusterAccessFixture, createClusterAccessFixture } from "../cluster-access-support.js";

interface Entry {
  auditType: string;
  entity: string;
  entityId: string;
  userId: string;
}

describe("activity recording", () => {
  it("refuses to register a route that changes something without declaring its activity entry", async () => {
    const server = Fastify();
    installActivityRecording(server, {} as ActivityService);
    server.get("/reads", async () => "fine");
    server.delete("/changes", { config: { activity: { entity: "thing", auditType: "d" } } }, async () => "fine");
    expect(() => server.post("/forgets", async () => "recorded nowhere")).toThrow(/declares no activity entry/);
    await server.close();
  });

  describe("on the platform", () => {
    let platform: TestPlatform;
    let access: ClusterAccessFixture;
    let token: string;
    const clusterId = randomUUID();

    beforeAll(async () => {
      access = createClusterAccessFixture();
      platform = await startTestPlatform({}, { clusterAccess: access.options });
      access.addCluster(platform.organizationId, clusterId);
      token = await requestToken(platform, platform.adminClient, "admin-api");
    });
    afterAll(async () => await platform.close());

    function call(method: string, path: string, body?: unknown): Promise<Response> {
      return fetch(`${platform.url}/admin${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    }

    async function entriesOf(entityId: string): Promise<Entry[]> {
      const response = await call("GET", "/activity/json?limit=1000");
      return ((await response.json()) as Entry[]).filter((entry) => entry.entityId === entityId);
    }

    it("records allowlist and monitoring changes under the cluster or the client they changed, never a password", async () => {
      const allowlist = { ipallowlist: [{ ip: "192.0.2.0/24", description: "office" }] };
      expect((await call("PUT", `/clusters/${clusterId}/ipallowlist`, allowlist)).status).toBe(204);
      // A refused change is not recorded.
      const refused = { ipallowlist: [{ ip: "192.0.2.0/33", description: "typo" }] };
      expect(
        (await call("PUT", `/clusters/${clusterId}/ipwhitelist`, { ipwhitelist: refused.ipallowlist })).status,
      ).toBe(400);
      expect((await call("POST", `/clusters/${clusterId}/monitoring`)).status).toBe(204);
      const created = await call("POST", `/clusters/${clusterId}/monitoring/clients`, { username: "scraper" });
      expect(created.status).toBe(200);
      const { uuid, password } = (await created.json()) as { uuid: string; password: string };
      expect((await call("POST", `/clusters/${clusterId}/monitoring/clients/${uuid}/rotate`)).status).toBe(200);
      expect((await call("DELETE", `/clusters/${clusterId}/monitoring/clients/${uuid}`)).status).toBe(204);

      const clusterEntries = await entriesOf(clusterId);
      expect(clusterEntries.map((entry) => `${entry.entity}:${entry.auditType}`)).toEqual([
        "cluster-monitoring:u",
        "cluster-ip-allowlist:u",
      ]);
      const clientEntries = await entriesOf(uuid);
      expect(clientEntries.map((entry) => `${entry.entity}:${entry.auditType}`)).toEqual([
        "monitoring-client:d",
        "monitoring-client:u",
        "monitoring-client:c",
      ]);
      for (const entry of [...clusterEntries, ...clientEntries]) {
        expect(entry.userId).toBe(platform.adminClient.clientId);
      }
      const everything = await (await call("GET", "/activity/csv?limit=1000")).text();
      expect(everything).not.toContain(password);
    });
  });
});

describe.runIf(databaseKinds.includes("postgres"))("activity recording while the database cannot take entries", () => {
  it("answers the committed change as the success it was, and writes its entry once the database takes it", async () => {
    const database = await createTestDatabase("postgres");
    const platform = await startTestPlatform({
      "service.database.url": database.url,
      "service.database.statementTimeoutMs": 500,
    });
    const locker = new pg.Client({ connectionString: database.url });
    try {
      const token = await requestToken(platform, platform.adminClient, "admin-api");
      await locker.connect();
      // Another session holds the activity table: the client is created, then its entry cannot be written.
      await locker.query("BEGIN");
      await locker.query("LOCK TABLE activity IN ACCESS EXCLUSIVE MODE");
      const created = await callWithToken(platform.url, token, "POST", "/admin/clients", {
        name: "created while the activity table was locked",
        scopes: ["members"],
      });
      expect(created.status).toBe(200);
      const { clientId, clientSecret } = (await created.json()) as { clientId: string; clientSecret: string };
      expect(clientSecret).toEqual(expect.any(String));
      await locker.query("ROLLBACK");

      await expect
        .poll(
          async () => {
            const answer = await callWithToken(platform.url, token, "GET", "/admin/activity/json");
            return ((await answer.json()) as Entry[]).filter((entry) => entry.entityId === clientId);
          },
          { timeout: 10_000, interval: 200 },
        )
        .toEqual([expect.objectContaining({ entity: "organization-client", auditType: "c" })]);
    } finally {
      await locker.end().catch(() => undefined);
      await platform.close();
      await database.drop();
    }
  });
});
