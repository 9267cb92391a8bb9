/**
 * Backup schedules run by `BackupService.runDueSchedules` against a stand-in management API, on every database kind:
 * a run is taken once when its time has come (not before, not twice), the backups beyond the newest complete ones
 * the schedule keeps are deleted, and both are recorded in the activity log. And restores beside scaling: none
 * starts while the platform scales the cluster, and the cluster's shape read just before it is what is restored; a
 * shape a cancelled change left halfway is refused at the 202 and at VALIDATING; backups and restores of one cluster
 * exclude each other for their whole run, scheduled runs included, and so do a backup's deletion and its restore;
 * the restore is recorded COMPLETED, in the database file itself, before the restorer deletes the previous data (and
 * IN_PROGRESS before the restorer starts), and nothing records FAILED once the restorer has committed the restore.
 */
import { randomUUID } from "node:crypto";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import SqliteDatabase from "better-sqlite3";
import { sql } from "kysely";
import { pino } from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { ActivityService } from "../../../../src/platform/admin/activity/service.js";
import { BackupService } from "../../../../src/platform/admin/backups/service.js";
import type { RestoreTarget } from "../../../../src/platform/provisioner/provisioner.js";
import { describeDatabase, openStore, type Store } from "../../../../src/platform/store/database.js";
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
      // The test steps one clock; a real platform watches runs on its monotonic clock.
      monotonicNowMs: () => clock.getTime(),
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
      management.backups.set(BigInt(id), fakeBackup(BigInt(id), state));
    }
    const schedule = await service.setSchedule(organizationId, clusterId, "0 * * * *", 2);
    expect(schedule).toEqual({
      cron: "0 * * * *",
      keep: 2,
      nextRun: "2026-01-01T11:00:00.000Z",
      lastRun: null,
      lastFailure: null,
      lastFailureAt: null,
      consecutiveFailures: 0,
      retryAt: null,
      retrying: false,
    });

    clock = new Date("2026-01-01T10:59:59.000Z");
    await service.runDueSchedules();
    expect(management.requests).toEqual([]);

    const runAt = new Date("2026-01-01T11:00:20.000Z");
    clock = runAt;
    // Due and not taken yet: the next check takes it, so it is still the next run.
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      nextRun: "2026-01-01T11:00:00.000Z",
      lastRun: null,
    });
    await service.runDueSchedules();
    expect((await service.getSchedule(organizationId, clusterId)).nextRun).toBe("2026-01-01T12:00:00.000Z");
    const taken = management.requests.filter((request) => request.method === "POST");
    expect(taken.map((request) => JSON.parse(request.body))).toEqual([{ backupId: runAt.getTime() }]);
    // The new backup is in progress; the failed one is newer than the two complete ones kept; backup 1 goes.
    expect([...management.backups.keys()].sort((left, right) => (left < right ? -1 : 1))).toEqual([
      2n,
      3n,
      4n,
      BigInt(runAt.getTime()),
    ]);
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

    // NTP steps the clock back two hours: the schedule goes on from the clock's time, not from its last run's.
    clock = new Date("2026-01-01T09:40:00.000Z");
    expect((await service.getSchedule(organizationId, clusterId)).nextRun).toBe("2026-01-01T10:00:00.000Z");
    clock = new Date("2026-01-01T10:00:10.000Z");
    management.requests.length = 0;
    await service.runDueSchedules();
    expect(management.requests.filter((request) => request.method === "POST")).toHaveLength(1);
  });

  it("tries a run that could not start its backup again after growing pauses, shows why, and settles once one starts", async () => {
    management.backups.clear();
    management.requests.length = 0;
    clock = new Date("2026-01-02T10:30:00.000Z");
    await service.setSchedule(organizationId, clusterId, "0 * * * *", 3);
    const refusal = "Another configuration change [7] is in progress";
    const posts = () => management.requests.filter((request) => request.method === "POST").length;

    clock = new Date("2026-01-02T11:00:10.000Z");
    management.refuseNext = { status: 409, detail: refusal };
    await service.runDueSchedules();
    expect(posts()).toBe(0);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-02T11:00:10.000Z",
      lastFailure: expect.stringContaining(refusal),
      lastFailureAt: "2026-01-02T11:00:10.000Z",
      consecutiveFailures: 1,
      retryAt: "2026-01-02T11:01:10.000Z",
      retrying: false,
      nextRun: "2026-01-02T12:00:00.000Z",
    });
    // Not before its pause, however often the schedules are checked.
    clock = new Date("2026-01-02T11:01:00.000Z");
    await service.runDueSchedules();
    expect(management.requests).toHaveLength(1);

    // Refused again: the pause doubles.
    clock = new Date("2026-01-02T11:01:20.000Z");
    management.refuseNext = { status: 503, detail: "the cluster is unreachable" };
    await service.runDueSchedules();
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastFailure: expect.stringContaining("the cluster is unreachable"),
      consecutiveFailures: 2,
      retryAt: "2026-01-02T11:03:20.000Z",
    });

    // The retry starts the backup: the failure is gone, and the schedule goes on at its own times.
    clock = new Date("2026-01-02T11:03:30.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(1);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-02T11:03:30.000Z",
      lastFailure: null,
      lastFailureAt: null,
      consecutiveFailures: 0,
      retryAt: null,
      retrying: false,
    });
    clock = new Date("2026-01-02T11:30:00.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(1);

    // A run refused just before the next one is not tried again in between: the next run is the retry.
    clock = new Date("2026-01-02T12:00:05.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(2);
    await service.setSchedule(organizationId, clusterId, "30 * * * *", 3);
    clock = new Date("2026-01-02T12:30:05.000Z");
    for (const expected of [1, 2, 3, 4, 5, 6, 7, 8]) {
      management.refuseNext = { status: 409, detail: refusal };
      await service.runDueSchedules();
      const schedule = await service.getSchedule(organizationId, clusterId);
      expect(schedule.consecutiveFailures).toBe(expected);
      if (schedule.retryAt === null) break;
      clock = new Date(schedule.retryAt);
    }
    // Pauses of 1, 2, 4, 8, 15 and 15 minutes after 12:30:05 reach 13:15:05; the run at 13:30 comes before another.
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-02T13:15:05.000Z",
      consecutiveFailures: 7,
      retryAt: null,
      nextRun: "2026-01-02T13:30:00.000Z",
    });
    expect(posts()).toBe(2);

    // That scheduled run, refused too, is tried again after the first pause, not the last: the pauses count one
    // scheduled run's failures, while the count in a row goes on.
    clock = new Date("2026-01-02T13:30:05.000Z");
    management.refuseNext = { status: 409, detail: refusal };
    await service.runDueSchedules();
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      consecutiveFailures: 8,
      lastFailureAt: "2026-01-02T13:30:05.000Z",
      retryAt: "2026-01-02T13:31:05.000Z",
      retrying: false,
    });

    // A retry under way shows as one, and its pause counts from the refusal, which the cluster took minutes to send.
    clock = new Date("2026-01-02T13:31:10.000Z");
    let answer = () => {};
    management.holdNext = new Promise<void>((resolve) => {
      answer = resolve;
    });
    management.refuseNext = { status: 503, detail: "the cluster is unreachable" };
    const requestsBefore = management.requests.length;
    const retry = service.runDueSchedules();
    await vi.waitFor(() => expect(management.requests.length).toBeGreaterThan(requestsBefore));
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-02T13:31:10.000Z",
      lastFailure: expect.stringContaining(refusal),
      retryAt: null,
      retrying: true,
    });
    // A run claimed longer ago than a run can take was cut short by its platform's stop: not shown as under way.
    clock = new Date("2026-01-02T13:36:20.000Z");
    expect((await service.getSchedule(organizationId, clusterId)).retrying).toBe(false);
    clock = new Date("2026-01-02T13:36:10.000Z");
    answer();
    await retry;
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastFailure: expect.stringContaining("the cluster is unreachable"),
      consecutiveFailures: 9,
      lastFailureAt: "2026-01-02T13:36:10.000Z",
      retryAt: "2026-01-02T13:38:10.000Z",
      retrying: false,
    });

    // NTP steps the clock back two hours: the retry does not wait for the clock to catch up with it.
    clock = new Date("2026-01-02T11:40:00.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(3);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-02T11:40:00.000Z",
      lastFailure: null,
      retryAt: null,
    });
  });

  it("runs again a run its platform's stop cut short, once no platform can still be running it", async () => {
    management.backups.clear();
    management.requests.length = 0;
    clock = new Date("2026-01-03T10:30:00.000Z");
    await service.setSchedule(organizationId, clusterId, "0 * * * *", 3);
    const posts = () => management.requests.filter((request) => request.method === "POST").length;
    // What a platform leaves that claimed a run and has not recorded its outcome: stopped, or still running it.
    const claimedElsewhere = async (lastRunAt: string, runFailures = 0) =>
      await store.database
        .updateTable("cluster_backup_schedules")
        .set({ last_run_at: lastRunAt, run_failures: runFailures })
        .where("cluster_id", "=", clusterId)
        .execute();
    await claimedElsewhere("2026-01-03T11:00:10.000Z");
    // Watched for less than the longest a run takes, by this platform's own clock: it may still be under way.
    clock = new Date("2026-01-03T11:04:00.000Z");
    await service.runDueSchedules();
    clock = new Date("2026-01-03T11:08:50.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(0);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-03T11:00:10.000Z",
      nextRun: "2026-01-03T12:00:00.000Z",
    });
    clock = new Date("2026-01-03T11:09:10.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(1);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-03T11:09:10.000Z",
      lastFailure: null,
      nextRun: "2026-01-03T12:00:00.000Z",
    });
    // That run ended: it is not run again before the schedule's next time.
    clock = new Date("2026-01-03T11:20:00.000Z");
    await service.runDueSchedules();
    expect(posts()).toBe(1);

    // A claim by a replica whose clock runs 90 s ahead is under way, not cut short, however far ahead it looks.
    await claimedElsewhere("2026-01-03T11:31:30.000Z");
    for (const time of ["2026-01-03T11:30:00.000Z", "2026-01-03T11:30:30.000Z", "2026-01-03T11:34:30.000Z"]) {
      clock = new Date(time);
      await service.runDueSchedules();
    }
    expect(posts()).toBe(1);

    // A run cut short while it was a retry, refused once more, is tried again after the next pause (2 minutes).
    await claimedElsewhere("2026-01-03T11:40:00.000Z", 1);
    clock = new Date("2026-01-03T11:41:00.000Z");
    await service.runDueSchedules();
    clock = new Date("2026-01-03T11:46:10.000Z");
    // Refused twice: the look for a backup taken since the claim, then the run's own.
    management.refuseNext = { status: 503, detail: "the cluster is unreachable", times: 2 };
    await service.runDueSchedules();
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({
      lastRun: "2026-01-03T11:46:10.000Z",
      lastFailure: expect.stringContaining("the cluster is unreachable"),
      retryAt: "2026-01-03T11:48:10.000Z",
    });
    clock = new Date("2026-01-03T11:48:20.000Z");
    await service.runDueSchedules();
    const postsBefore = posts();

    // A run whose platform started its backup and stopped before recording so, or ran a version that records no end,
    // is not run again: the cluster holds a backup taken since the claim (its id is the epoch milliseconds of then).
    await claimedElsewhere("2026-01-03T11:55:00.000Z");
    const startedElsewhere = BigInt(Date.parse("2026-01-03T11:55:01.000Z"));
    management.backups.set(startedElsewhere, fakeBackup(startedElsewhere, "COMPLETED"));
    for (const time of ["2026-01-03T11:55:30.000Z", "2026-01-03T12:00:40.000Z", "2026-01-03T12:20:00.000Z"]) {
      clock = new Date(time);
      await service.runDueSchedules();
    }
    // The 12:00 run was due and taken; the run claimed at 11:55 was not run again before it.
    expect(posts()).toBe(postsBefore + 1);
    expect(await service.getSchedule(organizationId, clusterId)).toMatchObject({ lastRun: "2026-01-03T12:00:40.000Z" });
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
  const targets: { backupId: bigint; target: RestoreTarget }[] = [];
  /** When set, the restorer waits for it after taking the target (a restore IN_PROGRESS). */
  let restoreHeld: Promise<void> | undefined;
  /** The restore's state in the store when the restorer called `onRestored`, before deleting the previous data. */
  const statesAtRestored: string[] = [];
  /** Clusters whose restore the restorer says it committed before the platform stopped. */
  const committed = new Set<string>();
  /** What the restorer does after `onRestored` (deleting the previous data), when set. */
  let afterRestored: (() => Promise<void>) | undefined;
  /**
   * The restores' states in the database file alone (without its write-ahead log, as a power loss could leave it)
   * when the restorer starts and once `onRestored` returned.
   */
  const statesOnDisk: string[][] = [];
  let service: BackupService;

  /** The restores' states the database file holds by itself, read from a copy of that file alone. */
  function stateInDatabaseFile(): string[] {
    const copyDirectory = mkdtempSync(join(tmpdir(), "flowplane-database-file-"));
    try {
      const copy = join(copyDirectory, "copy.sqlite");
      copyFileSync(describeDatabase({ url: database.url, dataDirectory: database.dataDirectory }).location, copy);
      const sqlite = new SqliteDatabase(copy);
      try {
        // The file may not hold the table yet either, when nothing was checkpointed since the migrations.
        const table = sqlite.prepare("SELECT name FROM sqlite_master WHERE name = 'cluster_restores'").get();
        if (table === undefined) return [];
        const rows = sqlite.prepare("SELECT state FROM cluster_restores").all() as { state: string }[];
        return rows.map((row) => row.state);
      } finally {
        sqlite.close();
      }
    } finally {
      rmSync(copyDirectory, { recursive: true, force: true });
    }
  }

  beforeAll(async () => {
    database = await createTestDatabase("sqlite");
    store = await openStore({ url: database.url, dataDirectory: database.dataDirectory });
    management = new FakeManagementApi();
    await management.start();
    service = new BackupService({
      database: store.database,
      clusters: fakeClusterDirectory(new Map([[clusterId, organizationId]]), management),
      restorer: {
        async restoreFromBackup(_organizationId, _clusterId, backupId, target, onRestored) {
          targets.push({ backupId, target });
          statesOnDisk.push(stateInDatabaseFile());
          await restoreHeld;
          await onRestored();
          statesOnDisk.push(stateInDatabaseFile());
          const rows = await store.database.selectFrom("cluster_restores").select("state").execute();
          statesAtRestored.push(...rows.map((row) => row.state));
          await afterRestored?.();
        },
        async restoreCommitted(id) {
          return committed.has(id);
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
  beforeEach(async () => {
    await service.whenIdle();
    await store.database.deleteFrom("cluster_restores").execute();
    await store.database.deleteFrom("cluster_backup_schedules").execute();
    management.clusterStatus = fakeClusterStatus();
    management.backups.clear();
    management.requests.length = 0;
    targets.length = 0;
    statesAtRestored.length = 0;
    statesOnDisk.length = 0;
    afterRestored = undefined;
  });

  it("refuses a restore while the platform scales the cluster, and restores the shape the cluster has", async () => {
    management.backups.set(30n, fakeBackup(30n, "COMPLETED"));
    scaling = "A scale request of the cluster is being handled; wait for its answer and for its change to end.";
    await expect(service.restore(organizationId, clusterId, "30")).rejects.toMatchObject({
      status: 409,
      message: scaling,
    });
    expect(management.requests).toEqual([]);
    expect(service.isRestoring(clusterId)).toBe(false);

    scaling = undefined;
    const status = fakeClusterStatus(2);
    management.clusterStatus = { ...status, routing: { ...(status.routing as object), note: "kept as sent" } };
    const restore = await service.restore(organizationId, clusterId, "30");
    expect(service.isRestoring(clusterId)).toBe(true);
    await service.whenIdle();
    expect((await service.restoreState(organizationId, clusterId, "30")).state).toBe("COMPLETED");
    expect(restore.state).toBe("PENDING");
    expect(targets.map(({ backupId, target }) => [backupId, target.brokerIds])).toEqual([[30n, [0, 1]]]);
    expect(JSON.parse(targets[0]?.target.configurationDocument ?? "null")).toEqual(management.clusterStatus);
    // Recorded COMPLETED before the restorer went on to delete the previous data, durably as IN_PROGRESS before it
    // began.
    expect(statesAtRestored).toEqual(["COMPLETED"]);
    expect(statesOnDisk).toEqual([["IN_PROGRESS"], ["COMPLETED"]]);
  });

  it("refuses a backup id the cluster does not hold with 404 and records no restore", async () => {
    await expect(service.restore(organizationId, clusterId, "999")).rejects.toMatchObject({ status: 404 });
    expect(service.isRestoring(clusterId)).toBe(false);
    expect(await store.database.selectFrom("cluster_restores").select("id").execute()).toEqual([]);
    expect(targets).toEqual([]);
    await expect(service.restoreState(organizationId, clusterId, "999")).rejects.toMatchObject({ status: 404 });
  });

  it("never records FAILED once the restorer committed the restore, and leaves a COMPLETED it cannot write to the next start", async () => {
    management.backups.set(60n, fakeBackup(60n, "COMPLETED"));
    management.backups.set(61n, fakeBackup(61n, "COMPLETED"));
    // Deleting the previous data fails after the commit: the restored cluster runs, and the restore is COMPLETED.
    afterRestored = async () => {
      throw new Error("the previous data could not be deleted");
    };
    await service.restore(organizationId, clusterId, "60");
    await service.whenIdle();
    expect(await service.restoreState(organizationId, clusterId, "60")).toMatchObject({
      state: "COMPLETED",
      failureReason: null,
    });

    // COMPLETED cannot be written (every attempt fails): the restore stays unfinished rather than FAILED, and the
    // platform's next start, told by the restorer that it was committed, records it COMPLETED.
    afterRestored = undefined;
    await sql`CREATE TRIGGER refuse_completed BEFORE UPDATE OF state ON cluster_restores WHEN NEW.state = 'COMPLETED' BEGIN SELECT RAISE(ABORT, 'the disk is full'); END`.execute(
      store.database,
    );
    try {
      await service.restore(organizationId, clusterId, "61");
      await service.whenIdle();
      expect((await service.restoreState(organizationId, clusterId, "61")).state).toBe("IN_PROGRESS");
    } finally {
      await sql`DROP TRIGGER refuse_completed`.execute(store.database);
    }
    committed.add(clusterId);
    try {
      await service.failInterruptedRestores();
    } finally {
      committed.clear();
    }
    expect((await service.restoreState(organizationId, clusterId, "61")).state).toBe("COMPLETED");
  });

  it("restores no backup while it is deleted", async () => {
    management.backups.set(70n, fakeBackup(70n, "COMPLETED"));
    let answer: () => void = () => undefined;
    management.holdNext = new Promise((resolveHeld) => {
      answer = resolveHeld;
    });
    const deleting = service.delete(organizationId, clusterId, "70");
    await vi.waitFor(() => expect(management.requests.length).toBeGreaterThan(0));
    await expect(service.restore(organizationId, clusterId, "70")).rejects.toMatchObject({
      status: 409,
      message: `Backup 70 of cluster ${clusterId} is being deleted; it cannot be restored.`,
    });
    expect(service.isRestoring(clusterId)).toBe(false);
    answer();
    await deleting;
    expect(management.backups.has(70n)).toBe(false);
  });

  it("refuses a shape a cancelled change left halfway at the 202 and at VALIDATING, naming what is not ACTIVE", async () => {
    management.backups.set(31n, fakeBackup(31n, "COMPLETED"));
    const halfway = (brokerState: string, replicaState: string): Record<string, unknown> => {
      const status = fakeClusterStatus(2) as { brokers: { state: string; partitions: { state: string }[] }[] };
      const broker = status.brokers[1];
      if (broker === undefined) throw new Error("the fake cluster has no broker 1");
      broker.state = brokerState;
      broker.partitions = broker.partitions.map((partition, index) =>
        index === 1 ? { ...partition, state: replicaState } : partition,
      );
      return status as unknown as Record<string, unknown>;
    };
    management.clusterStatus = halfway("ACTIVE", "JOINING");
    await expect(service.restore(organizationId, clusterId, "31")).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining("the replica of partition 2 on broker 1 is JOINING"),
    });
    management.clusterStatus = fakeClusterStatus(2, {
      routing: {
        version: 3,
        requestHandling: {
          strategy: "ActivePartitions",
          basePartitionCount: 1,
          additionalActivePartitions: [],
          inactivePartitions: [2],
        },
        messageCorrelation: { strategy: "HashMod", partitionCount: 1 },
      },
    });
    await expect(service.restore(organizationId, clusterId, "31")).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining("partitions 2 take no requests yet"),
    });
    await expect(service.restore(organizationId, clusterId, "31")).rejects.toThrow(/cannot be restored/);
    expect(service.isRestoring(clusterId)).toBe(false);
    await expect(service.listRestores(organizationId, clusterId)).resolves.toEqual([]);

    // Settled at the 202, halfway by VALIDATING (a change started and cancelled meanwhile): FAILED before anything
    // stops, with the reason.
    management.clusterStatus = fakeClusterStatus(2);
    await service.restore(organizationId, clusterId, "31");
    management.clusterStatus = halfway("LEAVING", "ACTIVE");
    await service.whenIdle();
    expect(await service.restoreState(organizationId, clusterId, "31")).toMatchObject({
      state: "FAILED",
      failureReason: expect.stringContaining("broker 1 of the cluster configuration is LEAVING"),
    });
    expect(targets).toEqual([]);
  });

  it("ends restores the platform stopped during: COMPLETED when the restorer had committed it, else FAILED", async () => {
    const otherClusterId = randomUUID();
    committed.add(clusterId);
    const row = (id: string, cluster: string, state: string) => ({
      id,
      cluster_id: cluster,
      backup_id: "50",
      state,
      failure_reason: null,
      created_at: "2026-01-01T00:00:00.000Z",
      updated_at: "2026-01-01T00:00:00.000Z",
    });
    await store.database
      .insertInto("cluster_restores")
      .values([
        row("committed", clusterId, "IN_PROGRESS"),
        row("not-committed", otherClusterId, "IN_PROGRESS"),
        row("validating", otherClusterId, "VALIDATING"),
        // A power loss lost the write of IN_PROGRESS of a restore the restorer then committed.
        row("validating-committed", clusterId, "VALIDATING"),
      ])
      .execute();
    await service.failInterruptedRestores();
    const rows = await store.database
      .selectFrom("cluster_restores")
      .select(["id", "state", "failure_reason"])
      .orderBy("id")
      .execute();
    const failed = "The platform stopped during the restore; the cluster keeps its previous data.";
    expect(rows).toEqual([
      { id: "committed", state: "COMPLETED", failure_reason: null },
      { id: "not-committed", state: "FAILED", failure_reason: failed },
      { id: "validating", state: "FAILED", failure_reason: failed },
      { id: "validating-committed", state: "COMPLETED", failure_reason: null },
    ]);
    committed.clear();
  });

  it("takes no backup and runs no schedule while a restore runs, and starts no restore while a backup is taken", async () => {
    management.backups.set(40n, fakeBackup(40n, "COMPLETED"));
    let release: () => void = () => undefined;
    restoreHeld = new Promise((resolveHeld) => {
      release = resolveHeld;
    });
    const restore = await service.restore(organizationId, clusterId, "40");
    await vi.waitFor(() => expect(targets).toHaveLength(1));
    // IN_PROGRESS: a backup is refused naming the restore, the backup being restored cannot be deleted, and a due
    // schedule waits (its run stays due) rather than taking a backup or deleting older ones.
    await expect(service.create(organizationId, clusterId)).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining(`Restore ${restore.uuid} of cluster ${clusterId} from backup 40 is running`),
    });
    await expect(service.delete(organizationId, clusterId, "40")).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining(`Backup 40 is being restored (restore ${restore.uuid})`),
    });
    await store.database
      .insertInto("cluster_backup_schedules")
      .values({
        cluster_id: clusterId,
        organization_id: organizationId,
        cron: "0 * * * *",
        keep_count: 1,
        last_run_at: null,
        updated_at: "2020-01-01T00:00:00.000Z",
      })
      .execute();
    await service.runDueSchedules();
    expect(management.requests.filter((request) => request.method !== "GET")).toEqual([]);
    expect(management.backups.has(40n)).toBe(true);
    expect((await service.getSchedule(organizationId, clusterId)).lastRun).toBeNull();
    release();
    restoreHeld = undefined;
    await service.whenIdle();
    expect((await service.restoreState(organizationId, clusterId, "40")).state).toBe("COMPLETED");

    // A backup being taken (its request held at the cluster): no restore starts until it has.
    let answer: () => void = () => undefined;
    management.holdNext = new Promise((resolveHeld) => {
      answer = resolveHeld;
    });
    const taking = service.create(organizationId, clusterId);
    await vi.waitFor(() => expect(management.requests.length).toBeGreaterThan(0));
    await expect(service.restore(organizationId, clusterId, "40")).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining(`A backup of cluster ${clusterId} is being taken`),
    });
    answer();
    await taking;
    // A schedule's run (held at its first call to the cluster) keeps restores out until its deletions are done.
    management.holdNext = new Promise((resolveHeld) => {
      answer = resolveHeld;
    });
    const requestsBefore = management.requests.length;
    const scheduled = service.runDueSchedules();
    await vi.waitFor(() => expect(management.requests.length).toBeGreaterThan(requestsBefore));
    await expect(service.restore(organizationId, clusterId, "40")).rejects.toMatchObject({ status: 409 });
    answer();
    await scheduled;
    expect((await service.getSchedule(organizationId, clusterId)).lastRun).not.toBeNull();
  });
});
