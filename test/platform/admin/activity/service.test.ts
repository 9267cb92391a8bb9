import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ActivityService, maxActivityLimit } from "../../../../src/platform/admin/activity/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";

describe.each(databaseKinds)("ActivityService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let activity: ActivityService;
  let clock: Date;
  const organizationId = randomUUID();
  const otherOrganizationId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    for (const id of [organizationId, otherOrganizationId]) {
      await store.database
        .insertInto("organizations")
        .values({ id, name: id, created_at: new Date(0).toISOString() })
        .execute();
    }
    clock = new Date("2026-11-25T10:00:00.000Z");
    activity = new ActivityService(store.database, () => clock);
  });

  afterEach(async () => {
    await store.close();
    await testDatabase.drop();
  });

  const change = (entityId: string, auditType: "c" | "u" | "d" = "c") => ({
    organizationId,
    entity: "member",
    entityId,
    auditType,
    userId: "client-1",
  });

  it("answers entries newest first, entries of one instant latest recorded first", async () => {
    await activity.record(change("a@example.com"));
    await activity.record(change("b@example.com", "u"));
    clock = new Date("2026-11-25T10:00:01.000Z");
    await activity.record(change("c@example.com", "d"));
    const entries = await activity.list(organizationId, { limit: 10 });
    expect(entries.map((entry) => entry.entityId)).toEqual(["c@example.com", "b@example.com", "a@example.com"]);
    expect(entries[0]).toEqual({
      service: "administration",
      orgId: organizationId,
      auditType: "d",
      entity: "member",
      entityId: "c@example.com",
      userId: "client-1",
      timestamp: Date.parse("2026-11-25T10:00:01.000Z"),
      audit: "deleted member c@example.com",
    });
  });

  it("bounds the answer by limit (at most the maximum) and since", async () => {
    for (let index = 0; index < 5; index++) {
      clock = new Date(Date.UTC(2026, 10, 25, 10, 0, index));
      await activity.record(change(`m${index}@example.com`));
    }
    const newestTwo = await activity.list(organizationId, { limit: 2 });
    expect(newestTwo.map((entry) => entry.entityId)).toEqual(["m4@example.com", "m3@example.com"]);
    const since = await activity.list(organizationId, { limit: 10, since: new Date("2026-11-25T10:00:03.000Z") });
    expect(since.map((entry) => entry.entityId)).toEqual(["m4@example.com", "m3@example.com"]);
    expect(await activity.list(organizationId, { limit: maxActivityLimit * 10 })).toHaveLength(5);
  });

  it("never answers another organization's entries", async () => {
    await activity.record(change("mine@example.com"));
    await activity.record({ ...change("theirs@example.com"), organizationId: otherOrganizationId });
    expect((await activity.list(organizationId, { limit: 10 })).map((entry) => entry.entityId)).toEqual([
      "mine@example.com",
    ]);
    expect((await activity.list(otherOrganizationId, { limit: 10 })).map((entry) => entry.entityId)).toEqual([
      "theirs@example.com",
    ]);
  });

  it("refuses to record an unbounded id", async () => {
    await expect(activity.record(change("x".repeat(2_000)))).rejects.toThrow(/entityId/);
    expect(await activity.list(organizationId, { limit: 10 })).toEqual([]);
  });
});
