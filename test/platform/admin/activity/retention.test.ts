import { randomUUID } from "node:crypto";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ActivityRetention, type ActivityRetentionOptions } from "../../../../src/platform/admin/activity/retention.js";
import { ActivityService } from "../../../../src/platform/admin/activity/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";

const dayMs = 24 * 60 * 60 * 1000;

describe.each(databaseKinds)("activity retention on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let now: Date;
  const retentions: ActivityRetention[] = [];
  // In the order the retention goes through organizations, by id.
  const organizationIds = [randomUUID(), randomUUID()].sort();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    for (const id of organizationIds) {
      await store.database
        .insertInto("organizations")
        .values({ id, name: id, created_at: new Date(0).toISOString() })
        .execute();
    }
    now = new Date("2026-12-01T12:00:00.000Z");
  });

  afterEach(async () => {
    for (const retention of retentions.splice(0)) await retention.close();
    await store.close();
    await testDatabase.drop();
  });

  const retention = (
    retentionDays: number,
    bounds: Pick<ActivityRetentionOptions, "entriesPerStatement" | "statementsPerRound"> = {},
  ): ActivityRetention => {
    const created = new ActivityRetention({
      database: store.database,
      retentionDays,
      now: () => now,
      logger: pino({ level: "silent" }),
      ...bounds,
    });
    retentions.push(created);
    return created;
  };

  /** Records `count` entries of `organizationId` at `recordedAt`, in statements of a few hundred rows. */
  const recordEntries = async (organizationId: string, count: number, recordedAt: Date, prefix: string) => {
    for (let first = 0; first < count; first += 500) {
      const rows = Array.from({ length: Math.min(500, count - first) }, (_, index) => ({
        organization_id: organizationId,
        service: "administration",
        audit_type: "c",
        entity: "member",
        entity_id: `${prefix}-${first + index}@example.com`,
        user_id: "client-1",
        recorded_at: recordedAt.toISOString(),
      }));
      await store.database.insertInto("activity").values(rows).execute();
    }
  };

  const entityIds = async (organizationId: string): Promise<string[]> =>
    (await new ActivityService(store.database).list(organizationId, { limit: 1_000 })).map((entry) => entry.entityId);

  it("deletes the entries of every organization recorded before the retention period, and keeps the rest", async () => {
    const [first, second] = organizationIds as [string, string];
    const activity = new ActivityService(store.database);
    const record = async (organizationId: string, entityId: string, ageMs: number) =>
      await activity.record(
        { organizationId, entity: "member", entityId, auditType: "c", userId: "client-1" },
        new Date(now.getTime() - ageMs),
      );
    await record(first, "old@example.com", 30 * dayMs + 1);
    await record(first, "kept@example.com", 30 * dayMs - 1);
    await record(second, "old-too@example.com", 400 * dayMs);
    await record(second, "new@example.com", 0);

    expect(await retention(30).deleteExpired()).toBe(2);
    expect(await entityIds(first)).toEqual(["kept@example.com"]);
    expect(await entityIds(second)).toEqual(["new@example.com"]);
    // Nothing is left to delete until time passes.
    expect(await retention(30).deleteExpired()).toBe(0);
    now = new Date(now.getTime() + 2);
    expect(await retention(30).deleteExpired()).toBe(1);
  });

  it("deletes more entries than one statement takes, oldest first, and at most its statements per round", async () => {
    const [first, second] = organizationIds as [string, string];
    // 25 expired entries of the first organization, a day apart, the oldest 30 days past the period; 5 of the second.
    for (let day = 0; day < 25; day++) {
      await recordEntries(
        first,
        1,
        new Date(now.getTime() - (60 - day) * dayMs),
        `expired-${String(day).padStart(2, "0")}`,
      );
    }
    await recordEntries(second, 5, new Date(now.getTime() - 100 * dayMs), "second-expired");
    await recordEntries(first, 2, new Date(now.getTime() - dayMs), "kept");
    const bounded = retention(30, { entriesPerStatement: 10, statementsPerRound: 2 });
    // Two statements of ten: the first organization's twenty oldest.
    expect(await bounded.deleteExpired()).toBe(20);
    expect((await entityIds(first)).sort()).toEqual([
      "expired-20-0@example.com",
      "expired-21-0@example.com",
      "expired-22-0@example.com",
      "expired-23-0@example.com",
      "expired-24-0@example.com",
      "kept-0@example.com",
      "kept-1@example.com",
    ]);
    expect(await entityIds(second)).toHaveLength(5);
    // The next round finishes both: 5 (fewer than a statement takes), then the second organization's 5.
    expect(await bounded.deleteExpired()).toBe(10);
    expect((await entityIds(first)).sort()).toEqual(["kept-0@example.com", "kept-1@example.com"]);
    expect(await entityIds(second)).toEqual([]);
    expect(await bounded.deleteExpired()).toBe(0);
  });

  it("deletes a few thousand entries in one round with the default bounds", async () => {
    const [first] = organizationIds as [string];
    await recordEntries(first, 2_500, new Date(now.getTime() - 400 * dayMs), "expired");
    expect(await retention(365).deleteExpired()).toBe(2_500);
    expect(await entityIds(first)).toEqual([]);
  });

  it("stops its round once closed", async () => {
    const [first] = organizationIds as [string];
    await recordEntries(first, 50, new Date(now.getTime() - 400 * dayMs), "expired");
    const closing = retention(365, { entriesPerStatement: 1 });
    const round = closing.deleteExpired();
    await closing.close();
    expect(await round).toBeLessThan(50);
    expect((await entityIds(first)).length).toBeGreaterThan(0);
  });

  it("keeps every entry when the retention is 0 days", async () => {
    const [first] = organizationIds as [string];
    await recordEntries(first, 2, new Date(0), "ancient");
    const keepingAll = retention(0);
    keepingAll.start();
    expect(await keepingAll.deleteExpired()).toBe(0);
    expect(await entityIds(first)).toHaveLength(2);
  });

  it("deletes the expired entries as soon as it starts", async () => {
    const [first] = organizationIds as [string];
    await recordEntries(first, 5, new Date(now.getTime() - 10 * dayMs), "expired");
    retention(7).start();
    await vi.waitFor(async () => expect(await entityIds(first)).toHaveLength(0), { timeout: 5_000 });
  });

  it("refuses a retention that is not a whole number of days, and bounds that are not positive", () => {
    expect(() => retention(-1)).toThrow(/at least 0/);
    expect(() => retention(1.5)).toThrow(/whole number/);
    expect(() => retention(30, { entriesPerStatement: 0 })).toThrow(/entriesPerStatement/);
    expect(() => retention(30, { statementsPerRound: 0.5 })).toThrow(/statementsPerRound/);
  });
});
