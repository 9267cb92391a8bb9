import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ClusterDirectory } from "../../../../src/platform/admin/cluster-directory.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createOtherOrganizationClient, createTestClient, requestToken } from "../../../support/tokens.js";

/** A management backup as the fake cluster answers it. */
interface FakeBackup {
  backupId: number;
  state: string;
  failureReason: string | null;
  partitionCount: number;
  details: {
    partitionId: number;
    state: string;
    brokerId: number | null;
    failureReason: string | null;
    checkpointPosition: number | null;
    createdAt: string | null;
    lastUpdated: string | null;
    brokerVersion: string | null;
    sizeBytes: number;
  }[];
}

function fakeBackup(backupId: number, state: string): FakeBackup {
  return {
    backupId,
    state,
    failureReason: state === "FAILED" ? "broker 1 lost its leadership" : null,
    partitionCount: 2,
    details: [1, 2].map((partitionId) => ({
      partitionId,
      state: state === "INCOMPLETE" && partitionId === 2 ? "MISSING" : state,
      brokerId: 0,
      failureReason: null,
      checkpointPosition: 10,
      createdAt: `2026-01-0${partitionId}T00:00:00.000Z`,
      lastUpdated: `2026-01-0${partitionId + 2}T00:00:00.000Z`,
      brokerVersion: "1.0.0",
      sizeBytes: 100,
    })),
  };
}

/**
 * A stand-in for a cluster's management API: keeps backups in memory, records every request's method, path and
 * bearer token, and can be told to refuse the next request.
 */
class FakeManagementApi {
  readonly backups = new Map<number, FakeBackup>();
  readonly requests: { method: string; path: string; token: string; body: string }[] = [];
  refuseNext: { status: number; detail: string } | undefined;
  private server: Server | undefined;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      this.handle(request, response).catch(() => response.destroy());
    });
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    let body = "";
    for await (const chunk of request) body += String(chunk);
    const path = request.url ?? "";
    const method = request.method ?? "";
    this.requests.push({ method, path, token: (request.headers.authorization ?? "").replace(/^Bearer /, ""), body });
    const answer = (status: number, value: unknown): void => {
      response.writeHead(status, {
        "content-type": status >= 400 ? "application/problem+json" : "application/json",
      });
      response.end(JSON.stringify(value));
    };
    const problem = (status: number, detail: string) => ({ type: "about:blank", title: "refused", status, detail });
    if (this.refuseNext !== undefined) {
      const { status, detail } = this.refuseNext;
      this.refuseNext = undefined;
      answer(status, problem(status, detail));
      return;
    }
    if (path === "/actuator/backups" && method === "GET") {
      answer(
        200,
        [...this.backups.values()].sort((left, right) => right.backupId - left.backupId),
      );
      return;
    }
    if (path === "/actuator/backups" && method === "POST") {
      const { backupId } = JSON.parse(body) as { backupId: number };
      const backup = fakeBackup(backupId, "IN_PROGRESS");
      this.backups.set(backupId, backup);
      answer(202, backup);
      return;
    }
    const match = /^\/actuator\/backups\/(\d+)$/.exec(path);
    const backup = match === null ? undefined : this.backups.get(Number(match[1]));
    if (backup === undefined) {
      answer(404, problem(404, "no such backup"));
      return;
    }
    if (method === "DELETE") this.backups.delete(backup.backupId);
    answer(200, backup);
  }
}

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
    const directory: ClusterDirectory = {
      async find(organizationId, id) {
        if (owners.get(id) !== organizationId) return undefined;
        return {
          id,
          links: { gateway: "http://127.0.0.1:1", management: management.url, oauth: "http://issuer.test/oauth" },
        };
      },
    };
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
    management.backups.set(Number.MAX_SAFE_INTEGER - 10, fakeBackup(Number.MAX_SAFE_INTEGER - 10, "COMPLETED"));
    const response = await call("POST", `${clusterId}/backups`);
    expect(response.status).toBe(200);
    const backup = (await response.json()) as Record<string, unknown>;
    // Above the newest backup even though the clock is far below it.
    expect(backup).toEqual({
      uuid: String(Number.MAX_SAFE_INTEGER - 9),
      name: "backup 2026-01-01T00:00:00.000Z",
      created: "2026-01-01T00:00:00.000Z",
      completed: null,
      status: "In progress",
    });
    const taken = management.requests.find((request) => request.method === "POST");
    expect(JSON.parse(taken?.body ?? "{}")).toEqual({ backupId: Number.MAX_SAFE_INTEGER - 9 });
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
      management.backups.set(id, fakeBackup(id, state));
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
    management.backups.set(7, fakeBackup(7, "COMPLETED"));
    const response = await call("DELETE", `${clusterId}/backups/7`);
    expect(response.status).toBe(200);
    expect(((await response.json()) as { uuid: string; status: string }).status).toBe("Complete");
    expect(management.backups.has(7)).toBe(false);
    const missing = await call("DELETE", `${clusterId}/backups/7`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { detail: string }).detail).toContain("backup '7'");
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

  it("answers 404 for another organization's cluster without calling it", async () => {
    for (const [method, path] of [
      ["GET", `${otherOrganizationsCluster}/backups`],
      ["POST", `${otherOrganizationsCluster}/backups`],
      ["DELETE", `${otherOrganizationsCluster}/backups/1`],
      ["POST", `${otherOrganizationsCluster}/backups/1/restore`],
      ["GET", `${otherOrganizationsCluster}/backups/1/restore`],
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
    for (const bad of ["-1", "1.5", "abc", "01", "99999999999999999"]) {
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
    management.backups.set(9, fakeBackup(9, "FAILED"));
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

  it("records every change in the activity log", async () => {
    management.backups.set(11, fakeBackup(11, "COMPLETED"));
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
  });
});
