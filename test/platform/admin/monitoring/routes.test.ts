import { createHash, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MonitoringService } from "../../../../src/platform/admin/monitoring/service.js";
import { openStore } from "../../../../src/platform/store/database.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";
import { type ClusterAccessFixture, captureLogger, createClusterAccessFixture } from "../cluster-access-support.js";

interface Credentials {
  uuid: string;
  username: string;
  password: string;
}

describe("Administration API /clusters/{id}/monitoring over HTTP", () => {
  let platform: TestPlatform;
  let access: ClusterAccessFixture;
  let token: string;
  const log = captureLogger();
  const passwords: string[] = [];
  const clusterId = randomUUID();
  const otherOrganizationsCluster = randomUUID();

  beforeAll(async () => {
    access = createClusterAccessFixture();
    platform = await startTestPlatform({}, { clusterAccess: access.options, logger: log.logger });
    access.addCluster(platform.organizationId, clusterId);
    access.addCluster(randomUUID(), otherOrganizationsCluster);
    token = await requestToken(platform, await createTestClient(platform, ["cluster"]), "admin-api");
  });
  afterAll(async () => await platform.close());

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

  async function createClient(username: string): Promise<Credentials> {
    const response = await call("POST", `${clusterId}/monitoring/clients`, { username });
    expect(response.status).toBe(200);
    const credentials = (await response.json()) as Credentials;
    passwords.push(credentials.password);
    return credentials;
  }

  /** The monitoring part of the access policy, read the way the provisioner's wiring will read it. */
  async function policy() {
    const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
    try {
      return await new MonitoringService({ database: store.database, ...access.options }).monitoringPolicyOf(clusterId);
    } finally {
      await store.close();
    }
  }

  const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

  it("activates and deactivates protected metrics, telling the cluster each time", async () => {
    expect(await (await call("GET", `${clusterId}/monitoring`)).json()).toEqual({ active: false });
    const changesBefore = access.changes.length;
    expect((await call("POST", `${clusterId}/monitoring`)).status).toBe(204);
    expect(await (await call("GET", `${clusterId}/monitoring`)).json()).toEqual({ active: true });
    expect((await policy()).enabled).toBe(true);
    // The reference SDK sends a JSON content type with no body; an empty object is accepted too.
    const deactivated = await fetch(`${platform.url}/admin/clusters/${clusterId}/monitoring`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    });
    expect(deactivated.status).toBe(204);
    expect((await policy()).enabled).toBe(false);
    expect((await call("POST", `${clusterId}/monitoring`, {})).status).toBe(204);
    expect(access.changes.slice(changesBefore)).toEqual([clusterId, clusterId, clusterId]);
    expect((await call("POST", `${clusterId}/monitoring`, { username: "x" })).status).toBe(400);
  });

  it("creates a client whose password is shown once and stored only as its SHA-256", async () => {
    const changesBefore = access.changes.length;
    const created = await createClient("prometheus");
    expect(created.username).toBe("prometheus");
    expect(created.uuid).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.password).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(access.changes.slice(changesBefore)).toEqual([clusterId]);

    const listed = await call("GET", `${clusterId}/monitoring/clients`);
    const clients = (await listed.json()) as Record<string, unknown>[];
    expect(clients).toHaveLength(1);
    expect(Object.keys(clients[0] ?? {}).sort()).toEqual(["created", "username", "uuid"]);
    expect(clients[0]).toMatchObject({ uuid: created.uuid, username: "prometheus" });
    expect(JSON.stringify(clients)).not.toContain(created.password);
    expect(await policy()).toEqual({
      enabled: true,
      clients: [{ username: "prometheus", passwordSha256: sha256(created.password) }],
    });
  });

  it("refuses a username taken in the cluster (409), an invalid one and unknown fields (400)", async () => {
    await createClient("grafana");
    expect((await call("POST", `${clusterId}/monitoring/clients`, { username: "grafana" })).status).toBe(409);
    for (const username of ["", "with:colon", "with space", "x".repeat(129), "-leading"]) {
      const response = await call("POST", `${clusterId}/monitoring/clients`, { username });
      expect(response.status, username).toBe(400);
      expect(((await response.json()) as { detail: string }).detail).toContain("body/username");
    }
    const unknown = await call("POST", `${clusterId}/monitoring/clients`, { username: "u", password: "mine" });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { detail: string }).detail).toContain("body/password");
  });

  it("rotates a password: a new one is shown once and the old hash is replaced", async () => {
    const created = await createClient("rotating");
    const response = await call("POST", `${clusterId}/monitoring/clients/${created.uuid}/rotate`);
    expect(response.status).toBe(200);
    const rotated = (await response.json()) as Credentials;
    passwords.push(rotated.password);
    expect(rotated).toMatchObject({ uuid: created.uuid, username: "rotating" });
    expect(rotated.password).not.toBe(created.password);
    const hashes = (await policy()).clients.map((client) => client.passwordSha256);
    expect(hashes).toContain(sha256(rotated.password));
    expect(hashes).not.toContain(sha256(created.password));
    expect((await call("POST", `${clusterId}/monitoring/clients/${randomUUID()}/rotate`)).status).toBe(404);
    expect((await call("POST", `${clusterId}/monitoring/clients/not-a-uuid/rotate`)).status).toBe(400);
  });

  it("deletes a client (404 the second time)", async () => {
    const created = await createClient("short-lived");
    expect((await call("DELETE", `${clusterId}/monitoring/clients/${created.uuid}`)).status).toBe(204);
    expect((await call("DELETE", `${clusterId}/monitoring/clients/${created.uuid}`)).status).toBe(404);
    const listed = (await (await call("GET", `${clusterId}/monitoring/clients`)).json()) as Credentials[];
    expect(listed.map((client) => client.username)).not.toContain("short-lived");
    expect((await policy()).clients.map((client) => client.username)).not.toContain("short-lived");
  });

  it("answers 404 for another organization's cluster and 403 without the cluster scope", async () => {
    for (const [method, path] of [
      ["GET", "monitoring"],
      ["POST", "monitoring"],
      ["DELETE", "monitoring"],
      ["GET", "monitoring/clients"],
      ["DELETE", `monitoring/clients/${randomUUID()}`],
    ] as const) {
      expect((await call(method, `${otherOrganizationsCluster}/${path}`)).status, `${method} ${path}`).toBe(404);
    }
    expect((await call("POST", `${otherOrganizationsCluster}/monitoring/clients`, { username: "u" })).status).toBe(404);
    const allowlistOnly = await requestToken(platform, await createTestClient(platform, ["ipallowlist"]), "admin-api");
    const forbidden = await call("POST", `${clusterId}/monitoring/clients`, { username: "u" }, allowlistOnly);
    expect(forbidden.status).toBe(403);
    expect(((await forbidden.json()) as { detail: string }).detail).toContain("'cluster'");
  });

  it("answers 500 when the change cannot be delivered, and never logs a password", async () => {
    const created = await createClient("logged");
    access.failNextChange();
    const failed = await call("POST", `${clusterId}/monitoring/clients/${created.uuid}/rotate`);
    expect(failed.status).toBe(500);
    expect(log.lines()).toContain("request failed");
    expect(passwords.length).toBeGreaterThan(4);
    for (const password of passwords) expect(log.lines()).not.toContain(password);
  });
});
