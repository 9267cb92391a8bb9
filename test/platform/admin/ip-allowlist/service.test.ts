import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { IpAllowlistService } from "../../../../src/platform/admin/ip-allowlist/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";
import { type ClusterAccessFixture, createClusterAccessFixture } from "../cluster-access-support.js";

describe.each(databaseKinds)("IpAllowlistService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let access: ClusterAccessFixture;
  let allowlists: IpAllowlistService;
  const organizationId = randomUUID();
  const clusterId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    access = createClusterAccessFixture();
    access.addCluster(organizationId, clusterId);
    allowlists = new IpAllowlistService({ database: store.database, ...access.options });
  });

  afterEach(async () => {
    await store.close();
    await testDatabase.drop();
  });

  it("starts empty, replaces the whole list at once and keeps clusters apart", async () => {
    const otherCluster = randomUUID();
    access.addCluster(organizationId, otherCluster);
    expect(await allowlists.allowlistOf(clusterId)).toEqual([]);
    await allowlists.replace(organizationId, clusterId, [
      { ip: "192.0.2.0/24", description: "a" },
      { ip: "2001:db8::/32", description: "b" },
    ]);
    await allowlists.replace(organizationId, otherCluster, [{ ip: "198.51.100.1", description: "other" }]);
    await allowlists.replace(organizationId, clusterId, [{ ip: "10.0.0.0/8", description: "c" }]);
    expect(await allowlists.get(organizationId, clusterId)).toEqual([{ ip: "10.0.0.0/8", description: "c" }]);
    expect(await allowlists.allowlistOf(otherCluster)).toEqual([{ ip: "198.51.100.1", description: "other" }]);
    expect(access.changes).toEqual([clusterId, otherCluster, clusterId]);
  });

  it("refuses an invalid range and more than the maximum of entries, naming the field", async () => {
    await expect(
      allowlists.replace(organizationId, clusterId, [{ ip: "192.0.2.300", description: "" }], "ipwhitelist"),
    ).rejects.toMatchObject({ kind: "invalidRequest", message: expect.stringContaining("body/ipwhitelist/0/ip") });
    const tooMany = Array.from({ length: 1_001 }, () => ({ ip: "192.0.2.1", description: "" }));
    await expect(allowlists.replace(organizationId, clusterId, tooMany)).rejects.toMatchObject({
      kind: "invalidRequest",
    });
    expect(access.changes).toEqual([]);
  });

  it("answers not-found for another organization's cluster", async () => {
    await expect(allowlists.replace(randomUUID(), clusterId, [])).rejects.toMatchObject({ kind: "notFound" });
    await expect(allowlists.get(randomUUID(), clusterId)).rejects.toMatchObject({ kind: "notFound" });
  });

  it("removes a deleted cluster's list", async () => {
    await allowlists.replace(organizationId, clusterId, [{ ip: "192.0.2.1", description: "" }]);
    await allowlists.deleteAllOf(clusterId);
    expect(await allowlists.allowlistOf(clusterId)).toEqual([]);
  });
});
