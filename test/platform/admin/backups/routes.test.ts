import { randomUUID } from "node:crypto";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FakeManagementApi, fakeBackup, fakeClusterDirectory, fakeClusterStatus } from "../../../support/backups.js";
import { eventually } from "../../../support/cluster.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createOtherOrganizationClient, createTestClient, requestToken } from "../../../support/tokens.js";

describe("Administration API /clusters/{id}/backups over HTTP", () => {
  let platform: TestPlatform;
  let management: FakeManagementApi;
  let token: string;
  const clusterId = randomUUID();
  const otherOrganizationsCluster = randomUUID();
  const owners = new Map<string, string>();

  beforeAll(async () => {
    management = new FakeManagementApi();
    await management.start();
    const directory = fakeClusterDirectory(owners, management);
    platform = await startTestPlatform(
      {},
      { clusterAccess: { clusters: directory, async onAccessPolicyChanged() {} } },
    );
    owners.set(clusterId, platform.organizationId);
    owners.set(otherOrganizationsCluster, randomUUID());
    token = await requestToken(platform, await createTestClient(platform, ["backups"]), "admin-api");
  });
  afterAll(async () => {
    await platform.close();
    await management.stop();
  });
  beforeEach(() => {
    management.backups.clear();
    management.requests.length = 0;
    management.refuseNext = undefined;
    management.highestTakenBackupId = undefined;
    management.oversizedNextBytes = undefined;
    management.clusterStatus = fakeClusterStatus();
  });

  function call(method: string, path: string, body?: unknown, bearer = token): Promise<Response> {
    return fetch(`${platform.url}/admin/clusters/${path}`, {
      method,
      headers: {
        authorization: `Bearer ${bearer}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  it("starts a backup with an increasing id and a token the cluster accepts for this cluster only", async () => {
    // An id beyond 2^53 − 1 (taken on the management API directly): the next one is exactly one above it.
    management.backups.set(2n ** 63n - 10n, fakeBackup(2n ** 63n - 10n, "COMPLETED"));
    const response = await call("POST", `${clusterId}/backups`);
    expect(response.status).toBe(200);
    const backup = (await response.json()) as Record<string, unknown>;
    // Above the newest backup even though the clock is far below it.
    expect(backup).toEqual({
      uuid: "9223372036854775799",
      name: "backup 9223372036854775799",
      created: "2026-01-01T00:00:00.000Z",
      completed: null,
      status: "In progress",
    });
    const taken = management.requests.find((request) => request.method === "POST");
    expect(taken?.body).toBe('{"backupId":9223372036854775799}');
    const keys = createRemoteJWKSet(new URL(`${platform.url}/.well-known/jwks.json`));
    const { payload } = await jwtVerify(taken?.token ?? "", keys, {
      issuer: platform.issuerUrl,
      audience: "gateway-api",
    });
    expect(payload).toMatchObject({
      sub: "platform",
      scope: "cluster",
      org: platform.organizationId,
      cluster: clusterId,
    });
    expect((payload.exp ?? 0) - (payload.iat ?? 0)).toBe(60);
  });

  it("answers 409 when no backup id is left above the cluster's latest (2^63 − 1), and asks the cluster for none", async () => {
    management.backups.set(2n ** 63n - 1n, fakeBackup(2n ** 63n - 1n, "COMPLETED"));
    const response = await call("POST", `${clusterId}/backups`);
    expect(response.status).toBe(409);
    expect(((await response.json()) as { detail: string }).detail).toBe(
      `No backup id is left above 9223372036854775807, the largest a backup may have, on cluster ${clusterId}: backup ids only go up and are never reused.`,
    );
    expect(management.requests.filter((request) => request.method === "POST")).toEqual([]);
  });

  it("takes the current time as the id when it is above every backup", async () => {
    const before = Date.now();
    const response = await call("POST", `${clusterId}/backups`, {});
    expect(response.status).toBe(200);
    expect(Number(((await response.json()) as { uuid: string }).uuid)).toBeGreaterThanOrEqual(before);
  });

  it("lists backups in the SaaS shape, mapping every management state", async () => {
    for (const [id, state] of [
      [1, "COMPLETED"],
      [2, "FAILED"],
      [3, "INCOMPLETE"],
      [4, "IN_PROGRESS"],
    ] as const) {
      management.backups.set(BigInt(id), fakeBackup(BigInt(id), state));
    }
    const response = await call("GET", `${clusterId}/backups`);
    expect(response.status).toBe(200);
    const listed = (await response.json()) as { uuid: string; status: string; completed: string | null }[];
    expect(listed.map((backup) => [backup.uuid, backup.status, backup.completed])).toEqual([
      ["4", "In progress", null],
      ["3", "Failed", "2026-01-04T00:00:00.000Z"],
      ["2", "Failed", "2026-01-04T00:00:00.000Z"],
      ["1", "Complete", "2026-01-04T00:00:00.000Z"],
    ]);
  });

  it("deletes a backup and answers what it was; 404 for one the cluster does not have", async () => {
    management.backups.set(7n, fakeBackup(7n, "COMPLETED"));
    const response = await call("DELETE", `${clusterId}/backups/7`);
    expect(response.status).toBe(200);
    expect(((await response.json()) as { uuid: string; status: string }).status).toBe("Complete");
    expect(management.backups.has(7n)).toBe(false);
    const missing = await call("DELETE", `${clusterId}/backups/7`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { detail: string }).detail).toContain("backup '7'");
  });

  it("steps over an id the cluster used for a backup deleted since, which its list no longer shows", async () => {
    // A backup taken on the management API under an id far ahead of the clock, then deleted: the list is empty, but
    // the cluster refuses every id up to it. The platform takes the id above the one the refusal names.
    const far = 2n ** 60n;
    management.highestTakenBackupId = far;
    const response = await call("POST", `${clusterId}/backups`);
    expect(response.status).toBe(200);
    expect(((await response.json()) as { uuid: string }).uuid).toBe(String(far + 1n));
    const takes = management.requests.filter((request) => request.method === "POST").map((request) => request.body);
    expect(takes).toEqual([expect.stringMatching(/^\{"backupId":\d+\}$/), `{"backupId":${far + 1n}}`]);
    // At the largest id there is, the platform says no id is left instead of asking again.
    management.backups.clear();
    management.highestTakenBackupId = 2n ** 63n - 1n;
    const full = await call("POST", `${clusterId}/backups`);
    expect(full.status).toBe(409);
    expect(((await full.json()) as { detail: string }).detail).toMatch(
      /No backup id is left above 9223372036854775807/,
    );
  });

  it("passes the cluster's conflicts on as 409 and anything else it refuses as 502", async () => {
    management.refuseNext = { status: 409, detail: "a cluster change runs" };
    const busy = await call("GET", `${clusterId}/backups`);
    expect(busy.status).toBe(409);
    expect(((await busy.json()) as { detail: string }).detail).toBe("a cluster change runs");
    management.refuseNext = { status: 403, detail: "address not allowed" };
    const refused = await call("GET", `${clusterId}/backups`);
    expect(refused.status).toBe(502);
    expect(((await refused.json()) as { detail: string }).detail).toContain("answered 403: address not allowed");
  });

  it("reads a bounded answer from the cluster: a larger one is a 502", async () => {
    management.oversizedNextBytes = 9 * 1024 * 1024;
    const response = await call("GET", `${clusterId}/backups`);
    expect(response.status).toBe(502);
    expect(((await response.json()) as { detail: string }).detail).toContain("larger than 8388608 bytes");
  });

  it("answers 404 for another organization's cluster without calling it", async () => {
    for (const [method, path] of [
      ["GET", `${otherOrganizationsCluster}/backups`],
      ["POST", `${otherOrganizationsCluster}/backups`],
      ["DELETE", `${otherOrganizationsCluster}/backups/1`],
      ["POST", `${otherOrganizationsCluster}/backups/1/restore`],
      ["GET", `${otherOrganizationsCluster}/backups/1/restore`],
      ["GET", `${otherOrganizationsCluster}/restores`],
    ] as const) {
      expect((await call(method, path)).status, `${method} ${path}`).toBe(404);
    }
    expect(management.requests).toEqual([]);
  });

  it("requires the backups scope", async () => {
    const clusterToken = await requestToken(platform, await createTestClient(platform, ["cluster"]), "admin-api");
    const response = await call("GET", `${clusterId}/backups`, undefined, clusterToken);
    expect(response.status).toBe(403);
    expect(((await response.json()) as { detail: string }).detail).toContain("backups");
    const other = await createOtherOrganizationClient(platform, ["backups"]);
    const otherToken = await requestToken(platform, other, "admin-api");
    expect((await call("GET", `${clusterId}/backups`, undefined, otherToken)).status).toBe(404);
  });

  it("refuses bad ids, bodies and unknown fields with 400 naming them", async () => {
    for (const bad of ["-1", "1.5", "abc", "01", "9223372036854775808", "99999999999999999999"]) {
      const response = await call("DELETE", `${clusterId}/backups/${bad}`);
      expect(response.status, bad).toBe(400);
      expect(((await response.json()) as { detail: string }).detail, bad).toContain("backupId");
    }
    const body = await call("POST", `${clusterId}/backups`, { name: "x" });
    expect(body.status).toBe(400);
    expect((await call("POST", `${clusterId}/backups/1/restore`, { force: true })).status).toBe(400);
    expect(management.requests).toEqual([]);
  });

  it("restores only from a Complete backup: the restore fails in VALIDATING with the backup's reason", async () => {
    management.backups.set(9n, fakeBackup(9n, "FAILED"));
    const started = await call("POST", `${clusterId}/backups/9/restore`);
    expect(started.status).toBe(202);
    const restore = (await started.json()) as { uuid: string; state: string; backupId: string };
    expect(restore).toMatchObject({ state: "PENDING", backupId: "9" });
    let state = restore.state;
    let reason: string | null = null;
    while (state !== "FAILED" && state !== "COMPLETED") {
      const response = await call("GET", `${clusterId}/backups/9/restore`);
      expect(response.status).toBe(200);
      const body = (await response.json()) as { uuid: string; state: string; failureReason: string | null };
      expect(body.uuid).toBe(restore.uuid);
      state = body.state;
      reason = body.failureReason;
    }
    expect(state).toBe("FAILED");
    expect(reason).toBe("backup 9 is FAILED, not COMPLETED: broker 1 lost its leadership");
    expect((await call("GET", `${clusterId}/backups/10/restore`)).status).toBe(404);
  });

  it("refuses a restore while a change is pending, a backup is written or a cancelled change left its states (409 naming it), and records none", async () => {
    management.backups.set(21n, fakeBackup(21n, "COMPLETED"));
    const at = "2026-01-05T00:00:00.000Z";
    management.clusterStatus = fakeClusterStatus(2, {
      pendingChange: { id: 7, status: "IN_PROGRESS", startedAt: at, completed: [], pending: [] },
    });
    const pending = await call("POST", `${clusterId}/backups/21/restore`);
    expect(pending.status).toBe(409);
    expect(((await pending.json()) as { detail: string }).detail).toBe(
      `Configuration change [7] of cluster ${clusterId} is in progress; wait until it ends or cancel it, then restore.`,
    );
    management.clusterStatus = fakeClusterStatus(2, {
      changesBlockedBy: "backup 20 is in progress; no cluster change starts during a backup",
    });
    const backingUp = await call("POST", `${clusterId}/backups/21/restore`);
    expect(backingUp.status).toBe(409);
    expect(((await backingUp.json()) as { detail: string }).detail).toContain(
      "is being backed up (backup 20 is in progress; no cluster change starts during a backup)",
    );
    // A change cancelled halfway left broker 1 JOINING with no change pending.
    const halfway = fakeClusterStatus(2) as { brokers: { state: string }[] };
    if (halfway.brokers[1] !== undefined) halfway.brokers[1].state = "JOINING";
    management.clusterStatus = halfway as unknown as Record<string, unknown>;
    const joining = await call("POST", `${clusterId}/backups/21/restore`);
    expect(joining.status).toBe(409);
    expect(((await joining.json()) as { detail: string }).detail).toContain(
      `Cluster ${clusterId} cannot be restored into its current configuration: broker 1 of the cluster configuration is JOINING`,
    );
    management.refuseNext = { status: 503, detail: "the gateway is starting" };
    expect((await call("POST", `${clusterId}/backups/21/restore`)).status).toBe(502);
    expect((await call("GET", `${clusterId}/backups/21/restore`)).status).toBe(404);
  });

  it("fails a restore in VALIDATING when the backup holds another number of partitions, naming both", async () => {
    management.backups.set(22n, fakeBackup(22n, "COMPLETED"));
    management.clusterStatus = fakeClusterStatus(3);
    const started = await call("POST", `${clusterId}/backups/22/restore`);
    expect(started.status).toBe(202);
    const ended = await eventually("the restore ended", 10_000, async () => {
      const body = (await (await call("GET", `${clusterId}/backups/22/restore`)).json()) as {
        state: string;
        failureReason: string | null;
      };
      return body.state === "FAILED" || body.state === "COMPLETED" ? body : undefined;
    });
    expect(ended).toMatchObject({
      state: "FAILED",
      failureReason: "backup 22 holds 2 partitions but the cluster has 3; the partition counts must be equal",
    });
  });

  it("lists the cluster's restores newest first, so a client that lost track of one finds it", async () => {
    management.backups.set(11n, fakeBackup(11n, "FAILED"));
    management.backups.set(12n, fakeBackup(12n, "FAILED"));
    const started: string[] = [];
    for (const backupId of [11, 12]) {
      const response = await call("POST", `${clusterId}/backups/${backupId}/restore`);
      expect(response.status).toBe(202);
      started.push(((await response.json()) as { uuid: string }).uuid);
      // One restore of a cluster runs at a time: wait for this one to end before the next.
      await eventually(`restore from ${backupId} ended`, 10_000, async () => {
        const state = (await (await call("GET", `${clusterId}/backups/${backupId}/restore`)).json()) as {
          state: string;
        };
        return state.state === "FAILED" ? true : undefined;
      });
    }
    const listed = await call("GET", `${clusterId}/restores`);
    expect(listed.status).toBe(200);
    const restores = (await listed.json()) as { uuid: string; backupId: string; state: string }[];
    expect(restores.slice(0, 2).map((restore) => [restore.uuid, restore.backupId, restore.state])).toEqual([
      [started[1], "12", "FAILED"],
      [started[0], "11", "FAILED"],
    ]);
    expect(restores.length).toBeLessThanOrEqual(20);
    const clusterToken = await requestToken(platform, await createTestClient(platform, ["cluster"]), "admin-api");
    expect((await call("GET", `${clusterId}/restores`, undefined, clusterToken)).status).toBe(403);
  });

  it("sets, reads and removes a backup schedule", async () => {
    // A yearly run: the platform's own schedule check never takes a backup during the test.
    const set = await call("PUT", `${clusterId}/backups/schedule`, { cron: " 0 3 1 1 * ", keep: 3 });
    expect(set.status).toBe(200);
    const schedule = (await set.json()) as { cron: string; keep: number; nextRun: string; lastRun: null };
    expect(schedule).toMatchObject({ cron: "0 3 1 1 *", keep: 3, lastRun: null });
    expect(schedule.nextRun).toMatch(/^\d{4}-01-01T03:00:00\.000Z$/);
    expect(await (await call("GET", `${clusterId}/backups/schedule`)).json()).toEqual(schedule);
    expect((await call("DELETE", `${clusterId}/backups/schedule`)).status).toBe(204);
    expect((await call("GET", `${clusterId}/backups/schedule`)).status).toBe(404);
    expect((await call("DELETE", `${clusterId}/backups/schedule`)).status).toBe(404);
    expect((await call("GET", `${otherOrganizationsCluster}/backups/schedule`)).status).toBe(404);
    expect(management.requests).toEqual([]);
  });

  it("refuses schedules closer than 15 minutes, never running, or malformed, naming the field", async () => {
    const refusals: [unknown, string][] = [
      [{ cron: "*/5 * * * *", keep: 1 }, "body/cron runs 5 minutes apart"],
      [{ cron: "0 0 30 2 *", keep: 1 }, "body/cron never runs"],
      [{ cron: "0 0 * * MON", keep: 1 }, "body/cron the day of week field holds 'MON'"],
      [{ cron: "0 0 * * *", keep: 0 }, "keep"],
      [{ cron: "0 0 * * *", keep: 101 }, "keep"],
      [{ cron: "0 0 * * *" }, "keep"],
      [{ cron: "0 0 * * *", keep: 1, every: "day" }, "every"],
    ];
    for (const [body, detail] of refusals) {
      const response = await call("PUT", `${clusterId}/backups/schedule`, body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(((await response.json()) as { detail: string }).detail, JSON.stringify(body)).toContain(detail);
    }
  });

  it("records every change in the activity log", async () => {
    management.backups.set(11n, fakeBackup(11n, "COMPLETED"));
    const created = (await (await call("POST", `${clusterId}/backups`)).json()) as { uuid: string };
    expect((await call("DELETE", `${clusterId}/backups/11`)).status).toBe(200);
    const activityToken = await requestToken(platform, await createTestClient(platform, ["cluster"]), "admin-api");
    const response = await fetch(`${platform.url}/admin/activity/json`, {
      headers: { authorization: `Bearer ${activityToken}` },
    });
    expect(response.status).toBe(200);
    const entries = JSON.stringify(await response.json());
    expect(entries).toContain(`${clusterId}/${created.uuid}`);
    expect(entries).toContain(`${clusterId}/11`);
    expect(entries).toContain("cluster-restore");
    expect(entries).toContain("cluster-backup-schedule");
  });
});
