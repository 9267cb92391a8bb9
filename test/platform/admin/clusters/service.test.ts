/**
 * `ClusterService` and the local provisioner's records on SQLite and PostgreSQL. The provisioner is a recording
 * fake here (the HTTP tests run real clusters); the local provisioner's placement is exercised without launching.
 */
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type AccessPolicy, openAccessPolicy, parseAccessPolicy } from "../../../../src/auth/access-policy.js";
import { ServiceError } from "../../../../src/http/errors.js";
import { clusterParameters, planTypes } from "../../../../src/platform/admin/clusters/parameters.js";
import { ClusterService } from "../../../../src/platform/admin/clusters/service.js";
import { LocalProvisioner } from "../../../../src/platform/provisioner/local-provisioner.js";
import type {
  ClusterProcessExit,
  ClusterSpecification,
  ProvisionedState,
  Provisioner,
} from "../../../../src/platform/provisioner/provisioner.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";

/** A provisioner that records what it is asked and runs nothing. */
class RecordingProvisioner implements Provisioner {
  readonly region = "local";
  readonly calls: string[] = [];
  readonly policies = new Map<string, AccessPolicy>();
  readonly states = new Map<string, ProvisionedState>();
  /** Policy deliveries still to fail (a policy file that cannot be written). */
  failingPolicies = 0;
  async prepare(specification: ClusterSpecification): Promise<void> {
    this.calls.push(`prepare ${specification.clusterId} ${specification.shape.brokers}`);
  }
  async launch(specification: ClusterSpecification): Promise<void> {
    this.calls.push(`launch ${specification.clusterId}`);
    this.states.set(specification.clusterId, "starting");
  }
  async restore(specification: ClusterSpecification, backupId: bigint): Promise<void> {
    this.calls.push(`restore ${specification.clusterId} ${backupId}`);
  }
  async stop(clusterId: string): Promise<void> {
    this.calls.push(`stop ${clusterId}`);
    this.states.set(clusterId, "stopped");
  }
  async remove(clusterId: string): Promise<void> {
    this.calls.push(`remove ${clusterId}`);
    this.states.delete(clusterId);
  }
  async refresh(): Promise<void> {}
  async brokers(): Promise<[]> {
    return [];
  }
  async addBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void> {
    this.calls.push(`add brokers ${clusterId} ${nodeIds.join(",")}`);
  }
  async removeBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void> {
    this.calls.push(`remove brokers ${clusterId} ${nodeIds.join(",")}`);
  }
  async startStopped(clusterId: string): Promise<string[]> {
    this.calls.push(`start stopped ${clusterId}`);
    return [];
  }
  async removeForgotten(): Promise<void> {}
  state(clusterId: string): ProvisionedState {
    return this.states.get(clusterId) ?? "stopped";
  }
  async endpoints(): Promise<undefined> {
    this.duringEndpoints?.();
    return undefined;
  }
  async applyAccessPolicy(clusterId: string, policy: AccessPolicy): Promise<void> {
    this.calls.push(`policy ${clusterId}`);
    if (this.failingPolicies > 0) {
      this.failingPolicies--;
      throw new Error("ENOSPC: no space left on device");
    }
    this.policies.set(clusterId, policy);
  }
  /** The latest crash of each cluster whose process is being restarted. */
  readonly restarting = new Map<string, ClusterProcessExit>();
  private readonly exitListeners: ((exit: ClusterProcessExit) => void)[] = [];
  /** Runs while a poll asks for the endpoints, that is while a real poll would wait for its probe. */
  duringEndpoints: (() => void) | undefined;
  /** Says that a process of the cluster was killed and is restarted in 0.5 s, as the local provisioner does. */
  crash(clusterId: string, process: string): void {
    const exit = { clusterId, process, exitCode: null, signal: "SIGKILL", restartInMs: 500, restarts: 1 };
    this.restarting.set(clusterId, exit);
    for (const listener of this.exitListeners) listener(exit);
  }
  restartingProcess(clusterId: string): ClusterProcessExit | undefined {
    return this.restarting.get(clusterId);
  }
  onProcessExit(listener: (exit: ClusterProcessExit) => void): void {
    this.exitListeners.push(listener);
  }
  async close(): Promise<void> {}
}

const parameters = clusterParameters();
const channel = parameters.channels[0] as (typeof parameters.channels)[number];
const creation = {
  name: "orders",
  planTypeId: planTypes[0]?.uuid as string,
  channelId: channel.uuid,
  generationId: channel.defaultGeneration.uuid,
  regionId: parameters.regions[0]?.uuid as string,
};

describe.each(databaseKinds)("ClusterService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let provisioner: RecordingProvisioner;
  let clusters: ClusterService;
  const organizationId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "o", created_at: new Date(0).toISOString() })
      .execute();
    provisioner = new RecordingProvisioner();
    clusters = new ClusterService({
      database: store.database,
      provisioner,
      issuerUrl: "http://localhost:8088/",
      maxClustersPerOrganization: 2,
      healthCheckIntervalMs: 60_000,
      logger: pino({ level: "silent" }),
    });
  });

  afterEach(async () => {
    await clusters.close();
    await store.close();
    await testDatabase.drop();
  });

  it("records a cluster as Creating, delivers its open policy before launching it", async () => {
    const { clusterId } = await clusters.create(organizationId, "client-1", creation);
    expect(provisioner.calls).toEqual([`prepare ${clusterId} 1`, `policy ${clusterId}`, `launch ${clusterId}`]);
    expect(provisioner.policies.get(clusterId)).toEqual(openAccessPolicy(clusterId, organizationId));
    expect(await clusters.get(organizationId, clusterId)).toMatchObject({
      uuid: clusterId,
      name: "orders",
      ownerId: "client-1",
      autoUpdate: false,
      status: { ready: "Creating", gatewayStatus: "Creating" },
      links: { oauth: "http://localhost:8088/oauth/token", console: "http://localhost:8088/" },
      ipallowlist: [],
    });
    expect(await clusters.find(organizationId, clusterId)).toEqual({
      id: clusterId,
      organizationId,
      name: "orders",
      links: { gateway: "", management: "", oauth: "http://localhost:8088/oauth/token" },
    });
    expect(await clusters.find(randomUUID(), clusterId)).toBeUndefined();
    // A resource that changed a part of the policy has the whole policy, as the builder makes it, delivered.
    const restricted = {
      ...openAccessPolicy(clusterId, organizationId),
      ipAllowlist: [{ ip: "10.0.0.1", description: "" }],
    };
    clusters.accessPolicyBuilder = async () => restricted;
    await clusters.deliverAccessPolicy(clusterId);
    expect(provisioner.policies.get(clusterId)).toEqual(restricted);
  });

  it("delivers a policy that could not be delivered again at the next health poll, without failing the change", async () => {
    const { clusterId } = await clusters.create(organizationId, "client-1", creation);
    const deliveries = () => provisioner.calls.filter((call) => call === `policy ${clusterId}`).length;
    const before = deliveries();
    provisioner.policies.delete(clusterId);
    provisioner.failingPolicies = 1;
    // The change is stored: its request must not fail, and the gateway gets the policy once the store works again.
    await expect(clusters.deliverAccessPolicy(clusterId)).resolves.toBeUndefined();
    expect(deliveries()).toBe(before + 1);
    expect(provisioner.policies.has(clusterId)).toBe(false);
    await clusters.pollHealth();
    expect(deliveries()).toBe(before + 2);
    expect(provisioner.policies.get(clusterId)).toEqual(openAccessPolicy(clusterId, organizationId));
    // Delivered, it is not delivered again by every poll.
    await clusters.pollHealth();
    expect(deliveries()).toBe(before + 2);
  });

  it("refuses a cluster beyond the organization's limit with 409", async () => {
    await clusters.create(organizationId, "c", creation);
    await clusters.create(organizationId, "c", creation);
    await expect(clusters.create(organizationId, "c", creation)).rejects.toMatchObject({ status: 409 });
    expect(await clusters.list(organizationId)).toHaveLength(2);
  });

  it("names the parameter that is not from /clusters/parameters", async () => {
    for (const field of ["planTypeId", "channelId", "generationId", "regionId"] as const) {
      const error = await clusters
        .create(organizationId, "c", { ...creation, [field]: randomUUID() })
        .catch((caught) => caught);
      expect(error).toBeInstanceOf(ServiceError);
      expect((error as ServiceError).status).toBe(400);
      expect((error as ServiceError).detail).toContain(field);
    }
    expect(provisioner.calls).toEqual([]);
  });

  it("deletes: record first, then the provisioner's remove, then the deletion hooks", async () => {
    const { clusterId } = await clusters.create(organizationId, "c", creation);
    const order: string[] = [];
    clusters.onClusterDeleted.push(async (deleted) => {
      order.push(`hook ${deleted.clusterId} ${(await clusters.find(organizationId, clusterId)) === undefined}`);
    });
    clusters.onClusterDeleted.push(async () => {
      throw new Error("a failing hook does not stop the others or the deletion");
    });
    await clusters.delete(organizationId, clusterId);
    expect(provisioner.calls.at(-1)).toBe(`remove ${clusterId}`);
    expect(order).toEqual([`hook ${clusterId} true`]);
    await expect(clusters.delete(organizationId, clusterId)).rejects.toMatchObject({ status: 404 });
  });

  it("creates the first cluster once, with the 3-broker plan", async () => {
    const first = await clusters.ensurePrimaryCluster(organizationId);
    expect(await clusters.ensurePrimaryCluster(organizationId)).toBe(first);
    expect(
      (await clusters.list(organizationId)).map((cluster) => [cluster.uuid, cluster.name, cluster.planType.name]),
    ).toEqual([[first, "local", expect.stringContaining("3 brokers, 3 partitions, replication factor 3")]]);
    await clusters.delete(organizationId, first as string);
    // Deleted on purpose: a restart does not bring it back.
    expect(await clusters.ensurePrimaryCluster(organizationId)).toBeUndefined();
  });

  it("marks a cluster whose processes failed or stopped Unhealthy at the next poll", async () => {
    const { clusterId } = await clusters.create(organizationId, "c", creation);
    provisioner.states.set(clusterId, "failed");
    await clusters.pollHealth();
    expect((await clusters.get(organizationId, clusterId)).status).toEqual({
      ready: "Unhealthy",
      gatewayStatus: "Unhealthy",
      reason: "the cluster's processes failed to start",
    });
    await clusters.wake(organizationId, clusterId);
    expect(provisioner.calls.at(-1)).toBe(`launch ${clusterId}`);
    // Waking a running cluster starts only what of it is stopped (a broker stopped by hand).
    provisioner.states.set(clusterId, "running");
    await clusters.wake(organizationId, clusterId);
    expect(provisioner.calls.at(-1)).toBe(`start stopped ${clusterId}`);
  });

  it("marks a cluster Unhealthy as soon as a process crashes, and no poll that began before the crash undoes it", async () => {
    const { clusterId } = await clusters.create(organizationId, "c", creation);
    provisioner.states.set(clusterId, "degraded");
    await store.database.updateTable("clusters").set({ status: "Healthy" }).where("id", "=", clusterId).execute();
    const crashed = {
      ready: "Unhealthy",
      gatewayStatus: "Creating",
      reason: "broker 1 exited unexpectedly (SIGKILL); restart 1 in 0.5 s",
    };
    provisioner.crash(clusterId, "broker 1");
    await expect.poll(async () => (await clusters.get(organizationId, clusterId)).status).toEqual(crashed);

    // A second crash while a poll waits: the poll's findings predate it and are dropped.
    await store.database.updateTable("clusters").set({ status: "Healthy" }).where("id", "=", clusterId).execute();
    provisioner.restarting.delete(clusterId);
    provisioner.duringEndpoints = () => provisioner.crash(clusterId, "broker 1");
    await clusters.pollHealth();
    provisioner.duringEndpoints = undefined;
    await expect.poll(async () => (await clusters.get(organizationId, clusterId)).status).toEqual(crashed);

    // A crash and its restart both while a poll waits: nothing restarts before or after it, and it is dropped still.
    provisioner.restarting.delete(clusterId);
    provisioner.duringEndpoints = () => {
      provisioner.crash(clusterId, "broker 2");
      provisioner.restarting.delete(clusterId);
    };
    await clusters.pollHealth();
    provisioner.duringEndpoints = undefined;
    await expect
      .poll(async () => (await clusters.get(organizationId, clusterId)).status)
      .toEqual({ ...crashed, reason: crashed.reason.replace("broker 1", "broker 2") });
  });

  it("moves a cluster of an older generation to the channel's default, and refuses when it is there", async () => {
    const { clusterId } = await clusters.create(organizationId, "c", creation);
    await expect(clusters.upgrade(organizationId, clusterId)).rejects.toMatchObject({ status: 400 });
    await store.database
      .updateTable("clusters")
      .set({ generation_id: randomUUID(), generation_name: "flowplane 0.0.1" })
      .where("id", "=", clusterId)
      .execute();
    expect((await clusters.get(organizationId, clusterId)).generation.name).toBe("flowplane 0.0.1");
    const upgrade = await clusters.upgrade(organizationId, clusterId);
    // What the reference SDK's type for the answer says it holds.
    expect(upgrade).toEqual({
      cluster: { id: clusterId, name: "orders" },
      oldGeneration: { id: expect.any(String), name: "flowplane 0.0.1" },
      newGeneration: { id: channel.defaultGeneration.uuid, name: channel.defaultGeneration.name },
      orgId: organizationId,
    });
    expect(provisioner.calls.slice(-2)).toEqual([`stop ${clusterId}`, `launch ${clusterId}`]);
    expect((await clusters.get(organizationId, clusterId)).generation).toEqual(channel.defaultGeneration);

    // Two upgrades at once: one moves the cluster and restarts it, the other is refused (409, or 400 once it reads
    // the new generation).
    await store.database
      .updateTable("clusters")
      .set({ generation_id: randomUUID(), generation_name: "flowplane 0.0.2" })
      .where("id", "=", clusterId)
      .execute();
    const launchesBefore = provisioner.calls.filter((call) => call === `launch ${clusterId}`).length;
    const outcomes = await Promise.allSettled([
      clusters.upgrade(organizationId, clusterId),
      clusters.upgrade(organizationId, clusterId),
    ]);
    expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
    const refusal = outcomes.find((outcome) => outcome.status === "rejected") as PromiseRejectedResult;
    expect([400, 409]).toContain((refusal.reason as { status: number }).status);
    expect(provisioner.calls.filter((call) => call === `launch ${clusterId}`).length).toBe(launchesBefore + 1);
  });

  it("local provisioner: records a cluster's place once, delivers its policy, and forgets it on remove", async () => {
    const local = new LocalProvisioner({
      database: store.database,
      dataDirectory: testDatabase.dataDirectory,
      primaryGatewayPort: 0,
      primaryManagementPort: 0,
      issuerUrl: "http://127.0.0.1:1",
      logger: pino({ level: "silent" }),
    });
    const clusterId = randomUUID();
    const specification = {
      clusterId,
      organizationId,
      shape: { brokers: 1, partitions: 1, replicationFactor: 1 },
      primary: false,
    };
    await local.prepare(specification);
    const endpoints = await local.endpoints(clusterId);
    await local.prepare(specification);
    expect(await local.endpoints(clusterId)).toEqual(endpoints);
    expect(endpoints?.gatewayUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const directory = join(testDatabase.dataDirectory, "clusters", clusterId);
    expect(await local.directoryOf(clusterId)).toBe(directory);
    const policy = { ...openAccessPolicy(clusterId, organizationId), ipAllowlist: [{ ip: "::1", description: "" }] };
    await local.applyAccessPolicy(clusterId, policy);
    expect(parseAccessPolicy(readFileSync(join(directory, "access-policy.json"), "utf8"))).toEqual(policy);
    // A deletion interrupted by a crash: the place is recorded, the cluster no longer. The next start removes it.
    await local.removeForgotten(new Set([randomUUID()]));
    expect(existsSync(directory)).toBe(false);
    expect(await local.endpoints(clusterId)).toBeUndefined();
    await expect(local.applyAccessPolicy(clusterId, policy)).rejects.toThrow(/no place/);
  });
});
