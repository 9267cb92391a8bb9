import { randomUUID } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { ServiceError } from "../../../../src/http/errors.js";
import { ClusterClientService, revocationMarginMs } from "../../../../src/platform/admin/cluster-clients/service.js";
import { ClientSecretHasher } from "../../../../src/platform/issuer/client-secrets.js";
import { ClientService } from "../../../../src/platform/issuer/clients.js";
import { databaseKinds, reportSkippedPostgres } from "../../../support/databases.js";
import { manualClock, openTestStore } from "../../issuer/support.js";
import { captureLogger, createClusterAccessFixture } from "../cluster-access-support.js";

reportSkippedPostgres();

const tokenLifetimeSeconds = 3_600;

describe.each(databaseKinds)("cluster API clients (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function fixture(onAccessPolicyChanged: (clusterId: string) => Promise<void> = async () => undefined) {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const clock = manualClock();
    const clients = new ClientService({
      database: opened.store.database,
      hasher: await ClientSecretHasher.open(opened.store.database, opened.store.secrets),
      clock: clock.now,
    });
    const access = createClusterAccessFixture();
    const log = captureLogger();
    const service = new ClusterClientService({
      clients,
      clusters: access.options.clusters,
      onAccessPolicyChanged,
      gatewayAudience: "gateway-api",
      tokenUrl: "https://issuer.test/oauth/token",
      tokenLifetimeSeconds,
      clock: clock.now,
      logger: log.logger,
    });
    const addCluster = () => access.addCluster(opened.organizationId, randomUUID());
    const cluster = addCluster();
    return { ...opened, clock, clients, addCluster, service, cluster, log };
  }

  it("lists a deleted client as revoked until the token lifetime (and a margin) has passed", async () => {
    const { service, clients, cluster, organizationId, clock } = await fixture();
    const kept = await service.create(organizationId, cluster.id, { clientName: "kept" });
    const gone = await service.create(organizationId, cluster.id, { clientName: "gone" });
    expect(await service.revokedClients(organizationId, cluster.id)).toEqual([]);
    await service.delete(organizationId, cluster.id, gone.clientId);
    const revokedAt = new Date(clock.now()).toISOString();
    expect(await service.revokedClients(organizationId, cluster.id)).toEqual([{ clientId: gone.clientId, revokedAt }]);
    expect(await clients.authenticate(gone.clientId, gone.clientSecret)).toBeUndefined();
    expect(await clients.authenticate(kept.clientId, kept.clientSecret)).toMatchObject({
      cluster: { clusterId: cluster.id, permissions: ["gateway"] },
    });

    clock.advance(tokenLifetimeSeconds * 1000 + revocationMarginMs);
    expect(await service.revokedClients(organizationId, cluster.id)).toEqual([{ clientId: gone.clientId, revokedAt }]);
    clock.advance(1);
    expect(await service.revokedClients(organizationId, cluster.id)).toEqual([]);
  });

  it("drops expired revocations from the store on the next deletion, and keeps clusters apart", async () => {
    const { service, cluster, addCluster, organizationId, clock, store } = await fixture();
    const other = addCluster();
    const old = await service.create(organizationId, cluster.id, { clientName: "old" });
    await service.delete(organizationId, cluster.id, old.clientId);
    clock.advance(tokenLifetimeSeconds * 1000 + revocationMarginMs + 1);
    const recent = await service.create(organizationId, other.id, { clientName: "recent" });
    await service.delete(organizationId, other.id, recent.clientId);
    const rows = await store.database.selectFrom("revoked_cluster_clients").select("client_id").execute();
    expect(rows.map((row) => row.client_id)).toEqual([recent.clientId]);
    expect(await service.revokedClients(organizationId, cluster.id)).toEqual([]);
    expect((await service.revokedClients(organizationId, other.id)).map((entry) => entry.clientId)).toEqual([
      recent.clientId,
    ]);
  });

  it("tells the access policy about a deletion, and logs (without secrets) when that fails", async () => {
    const changed: string[] = [];
    const { service, cluster, organizationId } = await fixture(async (clusterId) => {
      changed.push(clusterId);
    });
    const created = await service.create(organizationId, cluster.id, { clientName: "a" });
    await service.delete(organizationId, cluster.id, created.clientId);
    expect(changed).toEqual([cluster.id]);

    const failing = await fixture(async () => {
      throw new Error("policy file not writable");
    });
    const doomed = await failing.service.create(failing.organizationId, failing.cluster.id, { clientName: "b" });
    await failing.service.delete(failing.organizationId, failing.cluster.id, doomed.clientId);
    expect(await failing.service.revokedClients(failing.organizationId, failing.cluster.id)).toHaveLength(1);
    const lines = failing.log.lines().split("\n");
    const errors = lines.filter((line) => line.includes("access policy could not be rewritten"));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(doomed.clientId);
    expect(failing.log.lines()).not.toContain(doomed.clientSecret);
  });

  it("keeps organization clients and cluster clients apart", async () => {
    const { service, clients, cluster, organizationId } = await fixture();
    const organizationClient = await clients.create({ organizationId, name: "ci", scopes: ["cluster"] });
    const clusterClient = await service.create(organizationId, cluster.id, { clientName: "ci" });
    expect((await clients.list(organizationId)).map((client) => client.clientId)).toEqual([
      organizationClient.client.clientId,
    ]);
    expect(await service.list(organizationId, cluster.id)).toEqual([
      { clientId: clusterClient.clientId, name: "ci", permissions: ["gateway"] },
    ]);
    // The organization-client deletion does not reach cluster clients, which must leave through the revocation.
    expect(
      await clients.deleteOrganizationClient(
        organizationId,
        clusterClient.clientId,
        organizationClient.client.clientId,
        0,
      ),
    ).toBe("not-found");
    await expect(service.delete(organizationId, cluster.id, organizationClient.client.clientId)).rejects.toThrow(
      ServiceError,
    );
    expect(await clients.find(organizationClient.client.clientId)).toBeDefined();
  });

  it("deletes every client of a cluster that goes away, and no other", async () => {
    const { service, clients, cluster, addCluster, organizationId } = await fixture();
    const other = addCluster();
    const first = await service.create(organizationId, cluster.id, { clientName: "a" });
    await service.create(organizationId, cluster.id, { clientName: "b" });
    const kept = await service.create(organizationId, other.id, { clientName: "a" });
    expect(await service.deleteAllOfCluster("another-organization", cluster.id)).toBe(0);
    expect(await service.deleteAllOfCluster(organizationId, cluster.id)).toBe(2);
    expect(await clients.authenticate(first.clientId, first.clientSecret)).toBeUndefined();
    expect(await service.list(organizationId, cluster.id)).toEqual([]);
    expect((await service.list(organizationId, other.id)).map((client) => client.clientId)).toEqual([kept.clientId]);
  });

  it("lets exactly one of concurrent creations with one name succeed", async () => {
    const { service, cluster, organizationId } = await fixture();
    const outcomes = await Promise.allSettled(
      Array.from({ length: 6 }, () => service.create(organizationId, cluster.id, { clientName: "same" })),
    );
    expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
    for (const outcome of outcomes) {
      if (outcome.status === "rejected") {
        expect(outcome.reason).toBeInstanceOf(ServiceError);
        expect((outcome.reason as ServiceError).status).toBe(400);
      }
    }
  });

  it("refuses a client beyond the cluster's bound", async () => {
    const { clients, cluster, organizationId } = await fixture();
    const request = { organizationId, clusterId: cluster.id, permissions: ["gateway"] as const };
    for (const name of ["a", "b"]) {
      const outcome = await clients.createClusterClient({ ...request, name, maximumClientsPerCluster: 2 });
      expect(outcome.outcome).toBe("created");
    }
    const refused = await clients.createClusterClient({ ...request, name: "c", maximumClientsPerCluster: 2 });
    expect(refused).toEqual({ outcome: "cluster-full" });
    expect(await clients.listClusterClients(organizationId, cluster.id)).toHaveLength(2);
  });
});
