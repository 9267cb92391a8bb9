import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiError } from "../../src/client/errors.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { createClusterAccessFixture } from "../platform/admin/cluster-access-support.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

let platform: TestPlatform;
let admin: AdminClient;

beforeAll(async () => {
  platform = await startTestPlatform();
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
  });
  admin = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider });
});

afterAll(async () => {
  await platform?.close();
});

describe("AdminClient members", () => {
  it("lists the owner created on first start", async () => {
    const members = await admin.listMembers();
    expect(members.some((member) => member.roles.includes("owner") && !member.invitePending)).toBe(true);
  });

  it("invites, changes roles and removes a member", async () => {
    await admin.inviteMember("ada@example.com", ["developer", "analyst"]);
    let ada = (await admin.listMembers()).find((member) => member.email === "ada@example.com");
    expect(ada).toMatchObject({ invitePending: true });
    expect([...(ada?.roles ?? [])].sort()).toEqual(["analyst", "developer"]);

    await admin.changeMemberRoles("ada@example.com", ["admin"]);
    ada = (await admin.listMembers()).find((member) => member.email === "ada@example.com");
    expect(ada?.roles).toEqual(["admin"]);

    await admin.removeMember("ada@example.com");
    expect((await admin.listMembers()).some((member) => member.email === "ada@example.com")).toBe(false);
  });

  it("raises ApiError carrying the problem document", async () => {
    const error = await admin.removeMember("nobody@example.com").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    const apiError = error as ApiError;
    expect(apiError.status).toBe(404);
    expect(apiError.problem).toMatchObject({ status: 404, instance: "/admin/members/nobody%40example.com" });
    expect(apiError.type).toMatch(/^urn:flowplane:problem:/);
    expect(apiError.detail).toContain("nobody@example.com");

    const invalid = await admin.inviteMember("not-an-email", ["developer"]).catch((caught: unknown) => caught);
    expect(invalid).toBeInstanceOf(ApiError);
    expect(invalid).toMatchObject({ status: 400 });
  });

  it("answers 401 as ApiError when the token is for another API", async () => {
    const tokenProvider = new TokenProvider({
      credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
    });
    const wrongAudience = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider, audience: "modeler-api" });
    const error = await wrongAudience.listMembers().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(401);
  });
});

describe("AdminClient IP allowlist and monitoring", () => {
  const access = createClusterAccessFixture();
  const clusterId = randomUUID();
  let clusterPlatform: TestPlatform;
  let client: AdminClient;

  beforeAll(async () => {
    clusterPlatform = await startTestPlatform({}, { clusterAccess: access.options });
    access.addCluster(clusterPlatform.organizationId, clusterId);
    const tokenProvider = new TokenProvider({
      credentials: { oauthUrl: `${clusterPlatform.url}/oauth/token`, ...clusterPlatform.adminClient },
    });
    client = new AdminClient({ baseUrl: `${clusterPlatform.url}/admin`, tokenProvider });
  });

  afterAll(async () => {
    await clusterPlatform?.close();
  });

  it("replaces and reads the IP allowlist", async () => {
    const entries = [{ ip: "192.0.2.0/24,2001:db8::/32", description: "office" }];
    await client.setIpAllowlist(clusterId, entries);
    expect(await client.getIpAllowlist(clusterId)).toEqual(entries);
    const invalid = await client.setIpAllowlist(clusterId, [{ ip: "::/129", description: "" }]).catch((e) => e);
    expect(invalid).toMatchObject({ status: 400 });
  });

  it("activates monitoring and manages its clients", async () => {
    await client.setMonitoringActive(clusterId, true);
    expect(await client.isMonitoringActive(clusterId)).toBe(true);
    const created = await client.createMonitoringClient(clusterId, "scraper");
    expect(await client.listMonitoringClients(clusterId)).toEqual([
      { uuid: created.uuid, username: "scraper", created: expect.any(String) },
    ]);
    const rotated = await client.rotateMonitoringPassword(clusterId, created.uuid);
    expect(rotated.password).not.toBe(created.password);
    await client.deleteMonitoringClient(clusterId, created.uuid);
    expect(await client.listMonitoringClients(clusterId)).toEqual([]);
    await client.setMonitoringActive(clusterId, false);
    expect(await client.isMonitoringActive(clusterId)).toBe(false);
  });
});

describe("AdminClient clusters (a platform without a provisioner)", () => {
  it("reads the parameters and the clusters, and raises the API's refusals as ApiError", async () => {
    const parameters = await admin.clusterParameters();
    expect(parameters.regions.map((region) => region.name)).toEqual(["local"]);
    expect(await admin.listClusters()).toEqual([]);
    const channel = parameters.channels[0];
    const creation = {
      name: "orders",
      planTypeId: parameters.clusterPlanTypes[0]?.uuid as string,
      channelId: channel?.uuid as string,
      generationId: channel?.defaultGeneration.uuid as string,
      regionId: parameters.regions[0]?.uuid as string,
    };
    const refused = await admin.createCluster(creation).catch((caught: unknown) => caught);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(409);
    const unknown = randomUUID();
    for (const call of [
      () => admin.getCluster(unknown),
      () => admin.updateCluster(unknown, { name: "renamed" }),
      () => admin.wakeCluster(unknown),
      () => admin.upgradeCluster(unknown),
      () => admin.deleteCluster(unknown),
    ]) {
      const error = await call().catch((caught: unknown) => caught);
      expect((error as ApiError).status).toBe(404);
    }
  });
});
