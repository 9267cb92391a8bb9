import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { formatSchedule } from "../../../src/cli/commands/cluster-backups.js";
import { exitCodes } from "../../../src/cli/io.js";
import { FakeManagementApi, fakeBackup, fakeClusterDirectory } from "../../support/backups.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;
let management: FakeManagementApi;
const clusterId = randomUUID();
const owners = new Map<string, string>();

beforeAll(async () => {
  management = new FakeManagementApi();
  await management.start();
  fixture = await startCliFixture({
    clusterAccess: { clusters: fakeClusterDirectory(owners, management), async onAccessPolicyChanged() {} },
  });
  owners.set(clusterId, fixture.platform.organizationId);
});

afterAll(async () => {
  await fixture?.close();
  await management?.stop();
});

beforeEach(() => {
  management.backups.clear();
  management.requests.length = 0;
});

describe("flowplane clusters backups", () => {
  it("lists a cluster's backups as a table and as JSON", async () => {
    management.backups.set(3n, fakeBackup(3n, "COMPLETED"));
    management.backups.set(4n, fakeBackup(4n, "FAILED"));
    const table = await fixture.cli(["clusters", "backups", "list", "--cluster", clusterId]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(table.stdout.split("\n").slice(0, 3)).toEqual([
      "ID  STATUS    CREATED                   COMPLETED",
      "4   Failed    2026-01-01T00:00:00.000Z  2026-01-04T00:00:00.000Z",
      "3   Complete  2026-01-01T00:00:00.000Z  2026-01-04T00:00:00.000Z",
    ]);
    const json = await fixture.cli(["clusters", "backups", "list", "--cluster", clusterId, "--json"]);
    expect((JSON.parse(json.stdout) as { uuid: string }[]).map((backup) => backup.uuid)).toEqual(["4", "3"]);
  });

  it("takes a backup and deletes one", async () => {
    const taken = await fixture.cli(["clusters", "backups", "take", "--cluster", clusterId, "--json"]);
    expect(taken.exitCode).toBe(exitCodes.ok);
    const backup = JSON.parse(taken.stdout) as { uuid: string; status: string };
    expect(backup.status).toBe("In progress");
    expect(management.backups.has(BigInt(backup.uuid))).toBe(true);
    const deleted = await fixture.cli(["clusters", "backups", "delete", backup.uuid, "--cluster", clusterId]);
    expect(deleted).toMatchObject({ exitCode: exitCodes.ok, stdout: `backup ${backup.uuid} deleted\n` });
    expect(management.backups.has(BigInt(backup.uuid))).toBe(false);
  });

  it("waits for a restore and fails when it failed, with the reason", async () => {
    management.backups.set(5n, fakeBackup(5n, "INCOMPLETE"));
    const restore = await fixture.cli(["clusters", "backups", "restore", "5", "--cluster", clusterId, "--wait"]);
    expect(restore.exitCode).toBe(exitCodes.failure);
    expect(restore.stdout).toBe("restore from backup 5: FAILED: backup 5 is INCOMPLETE, not COMPLETED\n");
  });

  it("lists the cluster's restores, newest first", async () => {
    management.backups.set(6n, fakeBackup(6n, "FAILED"));
    await fixture.cli(["clusters", "backups", "restore", "6", "--cluster", clusterId, "--wait"]);
    const listed = await fixture.cli(["clusters", "backups", "restores", "--cluster", clusterId]);
    expect(listed.exitCode).toBe(exitCodes.ok);
    expect(listed.stdout.split("\n")[0]).toMatch(
      /^\d{4}-\d\d-\d\dT[\d:.]+Z {2}restore from backup 6: FAILED: backup 6 is FAILED, not COMPLETED/,
    );
    const json = await fixture.cli(["clusters", "backups", "restores", "--cluster", clusterId, "--json"]);
    expect((JSON.parse(json.stdout) as { backupId: string }[])[0]).toMatchObject({ backupId: "6", state: "FAILED" });
  });

  it("sets, shows and removes a backup schedule", async () => {
    const set = await fixture.cli([
      "clusters",
      "backups",
      "schedule",
      "set",
      "0 3 1 1 *",
      "--keep",
      "7",
      "--cluster",
      clusterId,
    ]);
    expect(set.exitCode).toBe(exitCodes.ok);
    expect(set.stdout).toMatch(
      /^backups at "0 3 1 1 \*" \(UTC\), keeping 7 complete; next \d{4}-01-01T03:00:00\.000Z, last never\n$/,
    );
    const shown = await fixture.cli(["clusters", "backups", "schedule", "get", "--cluster", clusterId, "--json"]);
    expect(JSON.parse(shown.stdout)).toMatchObject({ cron: "0 3 1 1 *", keep: 7, lastRun: null });
    const refused = await fixture.cli([
      "clusters",
      "backups",
      "schedule",
      "set",
      "*/5 * * * *",
      "--keep",
      "1",
      "--cluster",
      clusterId,
    ]);
    expect(refused.exitCode).toBe(exitCodes.failure);
    expect(refused.stderr).toContain("at least 15 minutes apart");
    const removed = await fixture.cli(["clusters", "backups", "schedule", "delete", "--cluster", clusterId]);
    expect(removed).toMatchObject({ exitCode: exitCodes.ok, stdout: "backup schedule removed\n" });
  });

  it("refuses a bad backup id before calling anything", async () => {
    const result = await fixture.cli(["clusters", "backups", "delete", "x1", "--cluster", clusterId]);
    expect(result.exitCode).toBe(exitCodes.usage);
    expect(management.requests).toEqual([]);
  });
});

describe("formatSchedule", () => {
  const schedule = {
    cron: "0 3 * * *",
    keep: 7,
    nextRun: "2026-01-02T03:00:00.000Z",
    lastRun: "2026-01-01T03:00:10.000Z",
  };

  it("says on a second line why the last runs could not start a backup and when they are tried again", () => {
    expect(formatSchedule({ ...schedule, lastFailure: null, consecutiveFailures: 0, retryAt: null })).toBe(
      'backups at "0 3 * * *" (UTC), keeping 7 complete; next 2026-01-02T03:00:00.000Z, last 2026-01-01T03:00:10.000Z',
    );
    const failed = {
      ...schedule,
      lastFailure: "Another configuration change [7] is in progress.",
      consecutiveFailures: 2,
      retryAt: "2026-01-01T03:03:10.000Z",
    };
    expect(formatSchedule(failed).split("\n")[1]).toBe(
      "the last 2 runs could not start a backup (Another configuration change [7] is in progress); tried again at 2026-01-01T03:03:10.000Z",
    );
    expect(formatSchedule({ ...failed, consecutiveFailures: 1, retryAt: null }).split("\n")[1]).toBe(
      "the last run could not start a backup (Another configuration change [7] is in progress); tried again at the next run",
    );
    expect(formatSchedule({ ...failed, retryAt: null, retrying: true }).split("\n")[1]).toBe(
      "the last 2 runs could not start a backup (Another configuration change [7] is in progress); tried again now",
    );
  });
});
