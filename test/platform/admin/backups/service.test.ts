/**
 * Backup schedules run by `BackupService.runDueSchedules` against a stand-in management API, on every database kind:
 * a run is taken once when its time has come (not before, not twice), the backups beyond the newest complete ones
 * the schedule keeps are deleted, and both are recorded in the activity log. And restores beside scaling: none
 * starts while the platform scales the cluster, and the cluster's shape read just before it is what is restored.
 */
import { randomUUID } from "node:crypto";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ActivityService } from "../../../../src/platform/admin/activity/service.js";
import { BackupService } from "../../../../src/platform/admin/backups/service.js";
import type { RestoreTarget } from "../../../../src/platform/provisioner/provisioner.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { FakeManagementApi, fakeBackup, fakeClusterDirectory, fakeClusterStatus } from "../../../support/backups.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../../support/databases.js";

reportSkippedPostgres();

describe.each(databaseKinds)("backup schedules on %s", (kind) => {
  let database: TestDatabase;
  let store: Store;
  let management: FakeManagementApi;
  let clock = new Date("2026-01-01T10:30:00.000Z");
  const organizationId = randomUUID();
  const clusterId = randomUUID();
  let service: BackupService;
  let activity: ActivityService;

  beforeAll(async () => {
    database = await createTestDatabase(kind);
    store = await openStore({ url: database.url, dataDirectory: database.dataDirectory });
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "schedules", created_at: clock.toISOString() })
      .execute();
    management = new FakeManagementApi();
    await management.start();
    activity = new ActivityService(store.database);
    service = new BackupService({
      database: store.database,
      clusters: fakeClusterDirectory(new Map([[clusterId, organizationId]]), management),
      restorer: {
        async restoreFromBackup() {
          throw new Error("no restore in this test");
        },
      },
      tokensFor: () => ({
        async getToken() {
          return {
            accessToken: "test",
            tokenType: "Bearer",
            scope: "cluster",
            audience: "gateway-api",
            issuedAtMs: 0,
            expiresAtMs: Number.MAX_SAFE_INTEGER,
            refreshAtMs: Number.MAX_SAFE_INTEGER,
            source: "network" as const,
          };
        },
        async invalidate() {},
      }),
      logger: pino({ level: "silent" }),
      activity,
      now: () => clock,
    });
  });
  afterAll(async () => {
    await service?.close();
    await management?.stop();
    await store?.close();
    await database?.drop();
  });

  it("takes one backup when the time comes and keeps only the newest complete backups", async () => {
    for (const [id, state] of [
      [1, "COMPLETED"],
      [2, "COMPLETED"],
      [3, "COMPLETED"],
      [4, "FAILED"],
    ] as const) {
      management.backups.set(id, fakeBackup(id, state));
    }
    const schedule = await service.setSchedule(organizationId, clusterId, "0 * * * *", 2);
    expect(schedule).toEqual({ cron: "0 * * * *", keep: 2, nextRun: "2026-01-01T11:00:00.000Z", lastRun: null });

    clock = new Date("2026-01-01T10:59:59.000Z");
    await service.runDueSchedules();
    expect(management.requests).toEqual([]);

    const runAt = new Date("2026-01-01T11:00:20.000Z");
    clock = runAt;
    await service.runDueSchedules();
    const taken = management.requests.filter((request) => request.method === "POST");
    expect(taken.map((request) => JSON.parse(request.body))).toEqual([{ backupId: runAt.getTime() }]);
    // The new backup is in progress; the failed one is newer than the two complete ones kept; backup 1 goes.
    expect([...management.backups.keys()].sort((left, right) => left - right)).toEqual([2, 3, 4, runAt.getTime()]);
    expect((await service.getSchedule(organizationId, clusterId)).lastRun).toBe("2026-01-01T11:00:20.000Z");

    // Not again within the same hour, however often the schedules are checked.
    management.requests.length = 0;
    clock = new Date("2026-01-01T11:40:00.000Z");
    await service.runDueSchedules();
    expect(management.requests).toEqual([]);

    const entries = await activity.list(organizationId, { limit: 10 });
    expect(entries.map((entry) => [entry.service, entry.auditType, entry.entityId]).sort()).toEqual(
      [
        ["backup-schedule", "c", `${clusterId}/${runAt.getTime()}`],
        ["backup-schedule", "d", `${clusterId}/1`],
      ].sort(),
    );
  });

  it("refuses schedules that run more often than every 15 minutes or never", async () => {
    await expect(service.setSchedule(organizationId, clusterId, "*/10 * * * *", 1)).rejects.toThrow(
      "body/cron runs 10 minutes apart at its shortest; scheduled backups must be at least 15 minutes apart",
    );
    await expect(service.setSchedule(organizationId, clusterId, "0 0 31 2 *", 1)).rejects.toThrow("never runs");
    await expect(service.setSchedule(organizationId, clusterId, "0 0 * *", 1)).rejects.toThrow("body/cron");
    await expect(service.setSchedule(organizationId, randomUUID(), "0 0 * * *", 1)).rejects.toThrow("does not exist");
  });
});

describe("restores beside scaling", () => {
  let database: TestDatabase;
  let store: Store;
  let management: FakeManagementApi;
  const organizationId = randomUUID();
  const clusterId = randomUUID();
  let scaling: string | undefined;
  const targets: { backupId: number; target: RestoreTarget }[] = [];
  let service: BackupService;

  beforeAll(async () => {
    database = await createTestDatabase("sqlite");
    store = await openStore({ url: database.url, dataDirectory: database.dataDirectory });
    management = new FakeManagementApi();
    await management.start();
    service = new BackupService({
      database: store.database,
      clusters: fakeClusterDirectory(new Map([[clusterId, organizationId]]), management),
      restorer: {
        async restoreFromBackup(_organizationId, _clusterId, backupId, target) {
          targets.push({ backupId, target });
        },
      },
      tokensFor: () => ({
        async getToken() {
          return {
            accessToken: "test",
            tokenType: "Bearer",
            scope: "cluster",
            audience: "gateway-api",
            issuedAtMs: 0,
            expiresAtMs: Number.MAX_SAFE_INTEGER,
            refreshAtMs: Number.MAX_SAFE_INTEGER,
            source: "network" as const,
          };
        },
        async invalidate() {},
      }),
      logger: pino({ level: "silent" }),
      scalingInProgress: () => scaling,
    });
  });
  afterAll(async () => {
    await service?.close();
    await management?.stop();
    await store?.close();
    await database?.drop();
  });

  it("refuses a restore while the platform scales the cluster, and restores the shape the cluster has", async () => {
    management.backups.set(30, fakeBackup(30, "COMPLETED"));
    scaling = "A scale request of the cluster is being handled; wait for its answer and for its change to end.";
    await expect(service.restore(organizationId, clusterId, "30")).rejects.toMatchObject({
      status: 409,
      message: scaling,
    });
    expect(management.requests).toEqual([]);
    expect(service.isRestoring(clusterId)).toBe(false);

    scaling = undefined;
    management.clusterStatus = fakeClusterStatus(2, { routing: { version: 1, note: "kept as the cluster sent it" } });
    const restore = await service.restore(organizationId, clusterId, "30");
    expect(service.isRestoring(clusterId)).toBe(true);
    await service.whenIdle();
    expect((await service.restoreState(organizationId, clusterId, "30")).state).toBe("COMPLETED");
    expect(restore.state).toBe("PENDING");
    expect(targets.map(({ backupId, target }) => [backupId, target.brokerIds])).toEqual([[30, [0, 1]]]);
    expect(JSON.parse(targets[0]?.target.configurationDocument ?? "null")).toEqual(management.clusterStatus);
  });
});
