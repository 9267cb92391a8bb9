import { createHash, randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openAccessPolicy, parseAccessPolicy, serializeAccessPolicy } from "../../../../src/auth/access-policy.js";
import { IpAllowlistService } from "../../../../src/platform/admin/ip-allowlist/service.js";
import { MAX_MONITORING_CLIENTS, MonitoringService } from "../../../../src/platform/admin/monitoring/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";
import { type ClusterAccessFixture, createClusterAccessFixture } from "../cluster-access-support.js";

describe.each(databaseKinds)("MonitoringService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let access: ClusterAccessFixture;
  let monitoring: MonitoringService;
  const organizationId = randomUUID();
  const clusterId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    access = createClusterAccessFixture();
    access.addCluster(organizationId, clusterId);
    monitoring = new MonitoringService({ database: store.database, ...access.options });
  });

  afterEach(async () => {
    await store.close();
    await testDatabase.drop();
  });

  it("builds policy parts that the access policy document accepts", async () => {
    const allowlists = new IpAllowlistService({ database: store.database, ...access.options });
    await allowlists.replace(organizationId, clusterId, [{ ip: "192.0.2.0/24, 2001:db8::/48", description: "office" }]);
    await monitoring.setActive(organizationId, clusterId, true);
    const created = await monitoring.createClient(organizationId, clusterId, "prometheus");
    const policy = {
      ...openAccessPolicy(clusterId, organizationId),
      ipAllowlist: await allowlists.allowlistOf(clusterId),
      monitoring: await monitoring.monitoringPolicyOf(clusterId),
    };
    const parsed = parseAccessPolicy(serializeAccessPolicy(policy));
    expect(parsed.ipAllowlist).toEqual([{ ip: "192.0.2.0/24, 2001:db8::/48", description: "office" }]);
    expect(parsed.monitoring).toEqual({
      enabled: true,
      clients: [
        { username: "prometheus", passwordSha256: createHash("sha256").update(created.password).digest("hex") },
      ],
    });
    expect(access.changes).toEqual([clusterId, clusterId, clusterId]);
  });

  it("lets exactly one of two concurrent creations of one username succeed", async () => {
    const outcomes = await Promise.allSettled([
      monitoring.createClient(organizationId, clusterId, "twin"),
      monitoring.createClient(organizationId, clusterId, "twin"),
    ]);
    expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
    expect(outcomes.find((outcome) => outcome.status === "rejected")).toMatchObject({ reason: { kind: "conflict" } });
    expect(await monitoring.listClients(organizationId, clusterId)).toHaveLength(1);
  });

  it(`holds at most ${MAX_MONITORING_CLIENTS} clients per cluster, also under concurrent creations`, async () => {
    await Promise.allSettled(
      Array.from({ length: MAX_MONITORING_CLIENTS + 5 }, (_, index) =>
        monitoring.createClient(organizationId, clusterId, `client-${index}`),
      ),
    );
    expect(await monitoring.listClients(organizationId, clusterId)).toHaveLength(MAX_MONITORING_CLIENTS);
    await expect(monitoring.createClient(organizationId, clusterId, "one-more")).rejects.toMatchObject({
      kind: "conflict",
    });
  });

  it("keeps the clients when deactivated, and removes everything of a deleted cluster", async () => {
    await monitoring.setActive(organizationId, clusterId, true);
    await monitoring.createClient(organizationId, clusterId, "kept");
    await monitoring.setActive(organizationId, clusterId, false);
    expect(await monitoring.monitoringPolicyOf(clusterId)).toMatchObject({
      enabled: false,
      clients: [{ username: "kept" }],
    });
    await monitoring.deleteAllOf(clusterId);
    expect(await monitoring.monitoringPolicyOf(clusterId)).toEqual({ enabled: false, clients: [] });
  });

  it("answers not-found for another organization's cluster and another cluster's client", async () => {
    const otherCluster = randomUUID();
    access.addCluster(organizationId, otherCluster);
    const created = await monitoring.createClient(organizationId, clusterId, "mine");
    await expect(monitoring.setActive(randomUUID(), clusterId, true)).rejects.toMatchObject({ kind: "notFound" });
    await expect(monitoring.rotatePassword(organizationId, otherCluster, created.uuid)).rejects.toMatchObject({
      kind: "notFound",
    });
    await expect(monitoring.deleteClient(organizationId, otherCluster, created.uuid)).rejects.toMatchObject({
      kind: "notFound",
    });
    expect(await monitoring.listClients(organizationId, clusterId)).toHaveLength(1);
  });
});
