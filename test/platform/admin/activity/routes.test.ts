import { rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ActivityService, maxActivityLimit } from "../../../../src/platform/admin/activity/service.js";
import { openStore } from "../../../../src/platform/store/database.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createOtherOrganizationClient, createTestClient, requestToken } from "../../../support/tokens.js";
import { readCsv } from "./csv-reader.js";

interface Entry {
  service: string;
  orgId: string;
  auditType: string;
  entity: string;
  entityId: string;
  userId: string;
  timestamp: number;
  audit: string;
}

describe("Administration API /activity over HTTP", () => {
  let platform: TestPlatform;
  let adminToken: string;

  beforeAll(async () => {
    platform = await startTestPlatform();
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterAll(async () => await platform.close());

  function call(method: string, path: string, token: string | null, body?: unknown): Promise<Response> {
    return fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  async function entries(query = "", token = adminToken): Promise<Entry[]> {
    const response = await call("GET", `/activity/json${query}`, token);
    expect(response.status).toBe(200);
    return (await response.json()) as Entry[];
  }

  it("records member invitations, role changes and removals with the calling client", async () => {
    const before = Date.now();
    expect((await call("POST", "/members/Rec@Example.com", adminToken, { orgRoles: ["developer"] })).status).toBe(204);
    expect((await call("POST", "/members/rec@example.com", adminToken, { orgRoles: ["admin"] })).status).toBe(204);
    expect((await call("DELETE", "/members/rec@example.com", adminToken)).status).toBe(204);
    // A change that fails is not recorded.
    expect((await call("DELETE", "/members/rec@example.com", adminToken)).status).toBe(404);
    const recorded = (await entries()).filter((entry) => entry.entityId === "rec@example.com");
    expect(recorded.map((entry) => entry.auditType)).toEqual(["d", "u", "c"]);
    for (const entry of recorded) {
      expect(entry).toMatchObject({
        service: "administration",
        orgId: platform.organizationId,
        entity: "member",
        userId: platform.adminClient.clientId,
      });
      // Milliseconds since 1970, as the reference SDK's type says, and the change in words.
      expect(Number.isInteger(entry.timestamp) && entry.timestamp >= before && entry.timestamp <= Date.now()).toBe(
        true,
      );
    }
    expect(recorded.map((entry) => entry.audit)).toEqual([
      "deleted member rec@example.com",
      "updated member rec@example.com",
      "created member rec@example.com",
    ]);
  });

  it("answers the same entries as RFC 4180 CSV with a header row, values with commas, quotes and newlines included", async () => {
    const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
    try {
      await new ActivityService(store.database).record({
        organizationId: platform.organizationId,
        entity: "connector secret",
        entityId: 'NAME, "quoted"\r\nand more',
        auditType: "u",
        userId: "client, with comma",
      });
    } finally {
      await store.close();
    }
    const response = await call("GET", "/activity/csv?limit=5", adminToken);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/csv; charset=utf-8; header=present");
    const rows = readCsv(await response.text());
    expect(rows[0]).toEqual(["service", "orgId", "auditType", "entity", "entityId", "userId", "timestamp", "audit"]);
    const json = await entries("?limit=5");
    // A cell a spreadsheet would read as a formula starts with an apostrophe in the CSV (csv.test.ts): client ids are
    // random, and one in 64 starts with "-".
    const asCell = (value: string) => (/^[=+\-@\t\r]/.test(value) ? `'${value}` : value);
    expect(rows.slice(1)).toEqual(
      json.map((entry) =>
        [
          entry.service,
          entry.orgId,
          entry.auditType,
          entry.entity,
          entry.entityId,
          entry.userId,
          String(entry.timestamp),
          entry.audit,
        ].map(asCell),
      ),
    );
    expect(rows[1]?.slice(3, 6)).toEqual(["connector secret", 'NAME, "quoted"\r\nand more', "client, with comma"]);
  });

  it("bounds the answer by limit and since, and refuses a limit over the maximum or an unknown parameter", async () => {
    for (let index = 0; index < 3; index++) {
      expect(
        (await call("POST", `/members/limit${index}@example.com`, adminToken, { orgRoles: ["analyst"] })).status,
      ).toBe(204);
    }
    const newestTwo = await entries("?limit=2");
    expect(newestTwo.map((entry) => entry.entityId)).toEqual(["limit2@example.com", "limit1@example.com"]);
    const all = await entries(`?limit=${maxActivityLimit}`);
    expect(all.length).toBeGreaterThanOrEqual(3);
    const future = await entries(`?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`);
    expect(future).toEqual([]);
    const since = await entries(`?since=${encodeURIComponent(new Date(all[2]?.timestamp ?? 0).toISOString())}`);
    expect(since.map((entry) => entry.entityId).slice(0, 3)).toEqual(all.slice(0, 3).map((entry) => entry.entityId));
    // The same instant in milliseconds, as the entries carry it.
    const sinceMilliseconds = await entries(`?since=${all[2]?.timestamp}`);
    expect(sinceMilliseconds).toEqual(since);
    expect(await entries(`?since=${Date.now() + 60_000}`)).toEqual([]);
    for (const query of [
      `?limit=${maxActivityLimit + 1}`,
      "?limit=0",
      "?since=yesterday",
      "?since=-5",
      "?since=9999999999999999",
      "?colour=red",
    ]) {
      const refused = await call("GET", `/activity/json${query}`, adminToken);
      expect(refused.status, query).toBe(400);
      expect(refused.headers.get("content-type")).toContain("application/problem+json");
    }
    expect((await call("GET", `/activity/csv?limit=${maxActivityLimit + 1}`, adminToken)).status).toBe(400);
  });

  it("lets any valid token of the organization read it, never another organization's entries", async () => {
    const secretsOnly = await createTestClient(platform, ["secrets"]);
    const narrowToken = await requestToken(platform, secretsOnly, "admin-api");
    expect((await entries("", narrowToken)).length).toBeGreaterThan(0);

    const other = await createOtherOrganizationClient(platform, ["members"]);
    const otherToken = await requestToken(platform, other, "admin-api");
    expect(await entries("", otherToken)).toEqual([]);
    expect((await call("POST", "/members/elsewhere@example.com", otherToken, { orgRoles: ["analyst"] })).status).toBe(
      204,
    );
    const theirs = await entries("", otherToken);
    expect(theirs).toHaveLength(1);
    expect(theirs[0]).toMatchObject({ orgId: other.organizationId, entityId: "elsewhere@example.com" });
    const ours = await entries(`?limit=${maxActivityLimit}`);
    expect(ours.every((entry) => entry.orgId === platform.organizationId)).toBe(true);
    expect(ours.some((entry) => entry.entityId === "elsewhere@example.com")).toBe(false);
  });

  it("requires a token (401) of this API's audience", async () => {
    for (const path of ["/activity/json", "/activity/csv"]) {
      const anonymous = await call("GET", path, null);
      expect(anonymous.status).toBe(401);
      expect(anonymous.headers.get("www-authenticate")).toBe('Bearer realm="flowplane"');
    }
    const modelerToken = await requestToken(platform, platform.adminClient, "modeler-api");
    expect((await call("GET", "/activity/json", modelerToken)).status).toBe(401);
  });
});

describe("activity retention of a running platform", () => {
  it("deletes the entries older than service.platform.activity.retentionDays when it starts", async () => {
    const first = await startTestPlatform({ "service.platform.activity.retentionDays": 2 });
    const dataDirectory = first.dataDirectory;
    let restarted: TestPlatform | undefined;
    try {
      const store = await openStore({ url: "", dataDirectory });
      try {
        const activity = new ActivityService(store.database);
        const dayMs = 24 * 60 * 60 * 1000;
        for (const [entityId, ageMs] of [
          ["expired@example.com", 3 * dayMs],
          ["kept@example.com", dayMs],
        ] as const) {
          await activity.record(
            { organizationId: first.organizationId, entity: "member", entityId, auditType: "c", userId: "client-1" },
            new Date(Date.now() - ageMs),
          );
        }
      } finally {
        await store.close();
      }
      await first.running.close();
      restarted = await startTestPlatform(
        { "service.platform.activity.retentionDays": 2 },
        { dataDirectory, adminClient: first.adminClient },
      );
      const token = await requestToken(restarted, restarted.adminClient, "admin-api");
      const restartedUrl = restarted.url;
      await vi.waitFor(
        async () => {
          const response = await fetch(`${restartedUrl}/admin/activity/json`, {
            headers: { authorization: `Bearer ${token}` },
          });
          const ids = ((await response.json()) as Entry[]).map((entry) => entry.entityId);
          expect(ids).toContain("kept@example.com");
          expect(ids).not.toContain("expired@example.com");
        },
        { timeout: 5_000 },
      );
    } finally {
      await restarted?.close();
      rmSync(dataDirectory, { recursive: true, force: true });
    }
  });
});
