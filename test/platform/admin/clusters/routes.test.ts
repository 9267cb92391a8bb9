/**
 * The clusters of the Administration API over HTTP, with real clusters: the local provisioner starts `flowplane
 * broker` and `flowplane gateway` processes (the 1-broker development plan, the cheapest), the platform polls their
 * health, a restarted platform launches them again at the recorded addresses, and deleting one stops its processes
 * and removes its directory.
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openAccessPolicy, parseAccessPolicy } from "../../../../src/auth/access-policy.js";
import { systemClock } from "../../../../src/auth/clock.js";
import { clusterParameters, planTypes } from "../../../../src/platform/admin/clusters/parameters.js";
import { ClientSecretHasher } from "../../../../src/platform/issuer/client-secrets.js";
import { ClientService } from "../../../../src/platform/issuer/clients.js";
import { openStore } from "../../../../src/platform/store/database.js";
import { eventually } from "../../../support/cluster.js";
import { entriesOpenToOthers, modeOf } from "../../../support/file-modes.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken, type TestClient } from "../../../support/tokens.js";

interface ClusterAnswer {
  uuid: string;
  name: string;
  description?: string;
  stageLabel?: string;
  ownerId: string;
  planType: { uuid: string; name: string };
  generation: { uuid: string; name: string };
  status: { ready: string; gatewayStatus: string; reason?: string };
  links: { gateway: string; management: string; oauth: string; console: string };
}

const parameters = clusterParameters();
const developmentPlan = planTypes.find((plan) => plan.shape.brokers === 1)?.uuid as string;
const channel = parameters.channels[0] as (typeof parameters.channels)[number];
const validCreation = {
  name: "orders",
  planTypeId: developmentPlan,
  channelId: channel.uuid,
  generationId: channel.defaultGeneration.uuid,
  regionId: parameters.regions[0]?.uuid as string,
};

let platform: TestPlatform;
let dataDirectory: string;
let adminToken: string;

async function start(): Promise<void> {
  platform = await startTestPlatform(
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
    {
      dataDirectory,
      localClusters: { createPrimaryCluster: false, readyTimeoutMs: 90_000 },
      ...(platform === undefined ? {} : { adminClient: platform.adminClient }),
    },
  );
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
}

function call(method: string, path: string, token: string | null, body?: unknown): Promise<Response> {
  return fetch(`${platform.url}/admin${path}`, {
    method,
    headers: {
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
}

async function cluster(clusterId: string): Promise<ClusterAnswer> {
  const response = await call("GET", `/clusters/${clusterId}`, adminToken);
  expect(response.status).toBe(200);
  return (await response.json()) as ClusterAnswer;
}

async function healthy(clusterId: string): Promise<ClusterAnswer> {
  return await eventually(`cluster ${clusterId} Healthy`, 90_000, async () => {
    const answer = await cluster(clusterId);
    return answer.status.ready === "Healthy" ? answer : undefined;
  });
}

/** A client with every cluster scope in an organization of its own, created through a second store handle. */
async function otherOrganizationClient(): Promise<TestClient> {
  const store = await openStore({ url: "", dataDirectory });
  try {
    const organizationId = randomUUID();
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "other", created_at: new Date().toISOString() })
      .execute();
    const clients = new ClientService({
      database: store.database,
      hasher: await ClientSecretHasher.open(store.database, store.secrets),
      clock: systemClock,
    });
    const { client, secret } = await clients.create({ organizationId, name: "other", scopes: ["cluster"] });
    return { clientId: client.clientId, clientSecret: secret };
  } finally {
    await store.close();
  }
}

beforeAll(async () => {
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-clusters-"));
  await start();
}, 60_000);

afterAll(async () => {
  await platform?.close();
  rmSync(dataDirectory, { recursive: true, force: true });
}, 60_000);

describe("Administration API /clusters with the local provisioner", () => {
  let clusterId: string;

  it("lists the parameters: plans of 1, 3 and 5 brokers, the local region, this version's generation", async () => {
    const response = await call("GET", "/clusters/parameters", adminToken);
    expect(response.status).toBe(200);
    const body = (await response.json()) as typeof parameters;
    expect(body.clusterPlanTypes.map((plan) => plan.name)).toEqual([
      expect.stringContaining("1 broker"),
      expect.stringContaining("3 brokers"),
      expect.stringContaining("5 brokers"),
    ]);
    expect(body.regions).toEqual([{ uuid: validCreation.regionId, name: "local" }]);
    expect(body.channels[0]?.defaultGeneration.name).toMatch(/^flowplane \d+\.\d+\.\d+/);
  });

  it("creates a cluster at once (Creating), which the provisioner starts until it is Healthy", async () => {
    const response = await call("POST", "/clusters", adminToken, {
      ...validCreation,
      description: "order processing",
      stageLabel: "dev",
    });
    expect(response.status).toBe(200);
    clusterId = ((await response.json()) as { clusterId: string }).clusterId;
    const first = await cluster(clusterId);
    expect(first).toMatchObject({
      uuid: clusterId,
      name: "orders",
      description: "order processing",
      stageLabel: "dev",
      ownerId: platform.adminClient.clientId,
      planType: { uuid: developmentPlan },
    });
    expect(["Creating", "Healthy"]).toContain(first.status.ready);
    const ready = await healthy(clusterId);
    expect(ready.status.gatewayStatus).toBe("Healthy");
    expect(ready.links.oauth).toBe(`${platform.issuerUrl}/oauth/token`);

    const list = (await (await call("GET", "/clusters", adminToken)).json()) as ClusterAnswer[];
    expect(list.map((entry) => entry.uuid)).toEqual([clusterId]);
  }, 120_000);

  it("gives links that answer: the gateway's topology with a gateway token, the management port's health", async () => {
    const { links } = await cluster(clusterId);
    const gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
    const topology = await fetch(`${links.gateway}/v2/topology`, {
      headers: { authorization: `Bearer ${gatewayToken}` },
    });
    expect(topology.status).toBe(200);
    expect(((await topology.json()) as { clusterSize: number }).clusterSize).toBe(1);
    const health = await fetch(`${links.management}/actuator/health`);
    expect(health.status).toBe(200);
  });

  it("keeps one private directory per cluster with its open access policy, and its ports in the store", async () => {
    const directory = join(dataDirectory, "clusters", clusterId);
    const policyFile = join(directory, "access-policy.json");
    expect(parseAccessPolicy(readFileSync(policyFile, "utf8"))).toEqual(
      openAccessPolicy(clusterId, platform.organizationId),
    );
    expect(modeOf(policyFile)).toBe(0o600);
    expect(entriesOpenToOthers(directory)).toEqual({});
    const store = await openStore({ url: "", dataDirectory });
    try {
      const placement = await store.database
        .selectFrom("local_cluster_placements")
        .selectAll()
        .where("cluster_id", "=", clusterId)
        .executeTakeFirstOrThrow();
      const { links } = await cluster(clusterId);
      expect(placement.directory).toBe(directory);
      expect(links.gateway).toBe(`http://127.0.0.1:${placement.gateway_port}`);
      expect(links.management).toBe(`http://127.0.0.1:${placement.management_port}`);
      const brokers = await store.database
        .selectFrom("local_cluster_brokers")
        .select(["node_id", "cluster_port", "management_port"])
        .where("cluster_id", "=", clusterId)
        .execute();
      expect(brokers.map((broker) => broker.node_id)).toEqual([0]);
    } finally {
      await store.close();
    }
  });

  it("changes name, description and stage label with PATCH", async () => {
    const response = await call("PATCH", `/clusters/${clusterId}`, adminToken, {
      name: "orders-eu",
      stageLabel: "prod",
    });
    expect(response.status).toBe(204);
    expect(await cluster(clusterId)).toMatchObject({ name: "orders-eu", stageLabel: "prod" });
  });

  it("delivers the allowlist set through the API to the cluster's gateway, which enforces it", async () => {
    const { links } = await cluster(clusterId);
    const gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
    const topology = async (): Promise<number> =>
      (await fetch(`${links.gateway}/v2/topology`, { headers: { authorization: `Bearer ${gatewayToken}` } })).status;
    const entries = [{ ip: "192.0.2.0/24", description: "office" }];
    expect((await call("PUT", `/clusters/${clusterId}/ipallowlist`, adminToken, { ipallowlist: entries })).status).toBe(
      204,
    );
    const policyFile = join(dataDirectory, "clusters", clusterId, "access-policy.json");
    expect(parseAccessPolicy(readFileSync(policyFile, "utf8")).ipAllowlist).toEqual(entries);
    expect(((await cluster(clusterId)) as unknown as { ipallowlist: unknown }).ipallowlist).toEqual(entries);
    await eventually("the gateway refusing this address", 10_000, async () =>
      (await topology()) === 403 ? true : undefined,
    );
    expect((await call("PUT", `/clusters/${clusterId}/ipallowlist`, adminToken, { ipallowlist: [] })).status).toBe(204);
    await eventually("the gateway admitting everyone again", 10_000, async () =>
      (await topology()) === 200 ? true : undefined,
    );
  }, 60_000);

  it("records cluster changes in the activity log", async () => {
    const entries = (await (await call("GET", "/activity/json", adminToken)).json()) as {
      entity: string;
      entityId: string;
      auditType: string;
    }[];
    const ofCluster = entries.filter((entry) => entry.entity === "cluster" && entry.entityId === clusterId);
    expect(ofCluster.map((entry) => entry.auditType).sort()).toEqual(["c", "u"]);
  });

  it("restarts a broker that crashed, and its status and activity log say so", async () => {
    const running = await platform.running.provisioner?.whenStarted(clusterId);
    const crashedPid = running?.brokers[0]?.pid;
    expect(crashedPid).toBeTypeOf("number");
    const crashReason = /broker 0 exited unexpectedly \(SIGKILL\); restart 1 in 0\.5 s/;
    const seen: { ready: string; reason?: string }[] = [];
    // The exit makes the cluster Unhealthy at once, with its reason, whatever the health poll is doing; the first
    // restart waits 500 ms. Other reasons (a partition without its leader) may come before or after it.
    const watching = (async () => {
      for (let poll = 0; poll < 100 && !seen.some((status) => crashReason.test(status.reason ?? "")); poll += 1) {
        const { status } = await cluster(clusterId);
        seen.push({ ready: status.ready, ...(status.reason === undefined ? {} : { reason: status.reason }) });
        await new Promise((resolvePause) => setTimeout(resolvePause, 25));
      }
    })();
    process.kill(crashedPid as number, "SIGKILL");
    await watching;
    expect(seen.find((status) => crashReason.test(status.reason ?? ""))).toEqual({
      ready: "Unhealthy",
      reason: expect.stringMatching(crashReason),
    });
    const recovered = await healthy(clusterId);
    expect(recovered.status.reason).toBeUndefined();
    expect(running?.brokers[0]?.pid).toBeTypeOf("number");
    expect(running?.brokers[0]?.pid).not.toBe(crashedPid);
    const entries = (await (await call("GET", "/activity/json", adminToken)).json()) as {
      service: string;
      entity: string;
      entityId: string;
      auditType: string;
      userId: string;
    }[];
    expect(entries.find((entry) => entry.entity === "cluster-process")).toEqual(
      expect.objectContaining({
        service: "provisioner",
        entityId: `${clusterId}/broker 0`,
        auditType: "u",
        userId: "provisioner",
      }),
    );
  }, 120_000);

  it("launches the cluster again at the same addresses when the platform restarts", async () => {
    const before = await cluster(clusterId);
    const pid = (await platform.running.provisioner?.whenStarted(clusterId))?.gatewayPid;
    expect(pid).toBeTypeOf("number");
    await platform.close();
    // The platform stopped its cluster's processes with it.
    expect(() => process.kill(pid as number, 0)).toThrow();
    await start();
    const after = await healthy(clusterId);
    expect({ gateway: after.links.gateway, management: after.links.management }).toEqual({
      gateway: before.links.gateway,
      management: before.links.management,
    });
    const restarted = await platform.running.provisioner?.whenStarted(clusterId);
    expect(restarted?.gatewayPid).not.toBe(pid);
    expect((await fetch(`${after.links.management}/actuator/health`)).status).toBe(200);
    expect(after.name).toBe("orders-eu");
  }, 150_000);

  it("wakes a cluster whose processes were stopped, and answers 204 for one that runs", async () => {
    const provisioner = platform.running.provisioner;
    if (provisioner === undefined) throw new Error("the test platform has no provisioner");
    await provisioner.stop(clusterId);
    await eventually("the stopped cluster Unhealthy", 30_000, async () =>
      (await cluster(clusterId)).status.ready === "Unhealthy" ? true : undefined,
    );
    expect((await call("PUT", `/clusters/${clusterId}/wake`, adminToken)).status).toBe(204);
    await healthy(clusterId);
    expect((await call("PUT", `/clusters/${clusterId}/wake`, adminToken)).status).toBe(204);
  }, 120_000);

  it("refuses an upgrade to the generation the cluster runs already (400)", async () => {
    const response = await call("PUT", `/clusters/${clusterId}/upgrade`, adminToken);
    expect(response.status).toBe(400);
    expect(((await response.json()) as { detail: string }).detail).toContain("already");
  });

  it("answers the hosted product's routes that do not apply with a problem document saying why", async () => {
    for (const [method, path] of [
      ["GET", "/meta/ip-ranges"],
      ["GET", `/clusters/${clusterId}/secure-connectivity`],
    ] as const) {
      const response = await call(method, path, adminToken);
      expect(response.status, path).toBe(501);
      expect(response.headers.get("content-type")).toContain("application/problem+json");
      expect(((await response.json()) as { detail: string }).detail).toContain("self-hosted");
    }
  });

  it("answers 400 naming the field for bad input, never creating a cluster", async () => {
    const cases: [unknown, string][] = [
      [{ ...validCreation, planTypeId: randomUUID() }, "planTypeId"],
      [{ ...validCreation, channelId: "stable" }, "channelId"],
      [{ ...validCreation, generationId: randomUUID() }, "generationId"],
      [{ ...validCreation, regionId: "us-east-1" }, "regionId"],
      [{ ...validCreation, name: "x".repeat(101) }, "name"],
      [{ ...validCreation, name: "" }, "name"],
      [{ ...validCreation, name: 42 }, "name"],
      [{ ...validCreation, autoUpdate: "yes" }, "autoUpdate"],
      [{ ...validCreation, stageLabel: "qa" }, "stageLabel"],
      [{ ...validCreation, description: "d".repeat(1_001) }, "description"],
      [{ ...validCreation, brokers: 9 }, "brokers"],
      [{ name: "no-plan" }, "planTypeId"],
      [[validCreation], "body"],
    ];
    for (const [body, field] of cases) {
      const response = await call("POST", "/clusters", adminToken, body);
      expect(response.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(JSON.stringify(await response.json()), field).toContain(field);
    }
    const malformed = await call("POST", "/clusters", adminToken, "{not json");
    expect(malformed.status).toBe(400);
    expect((await call("GET", "/clusters/not-a-uuid", adminToken)).status).toBe(400);
    expect((await call("PATCH", `/clusters/${clusterId}`, adminToken, {})).status).toBe(400);
    // Names that would show mirrored or split in the console and the CLI (a right-to-left override, a newline, NUL).
    for (const name of ["safe\u202Edorp", "first\nsecond", "nul\u0000", " padded"]) {
      expect((await call("PATCH", `/clusters/${clusterId}`, adminToken, { name })).status, name).toBe(400);
    }
    expect((await call("PATCH", `/clusters/${clusterId}`, adminToken, { planTypeId: developmentPlan })).status).toBe(
      400,
    );
    const list = (await (await call("GET", "/clusters", adminToken)).json()) as ClusterAnswer[];
    expect(list).toHaveLength(1);
  });

  it("answers 404 for another organization's cluster and for unknown ids, 403 without the cluster scope", async () => {
    const otherToken = await requestToken(platform, await otherOrganizationClient(), "admin-api");
    expect(await (await call("GET", "/clusters", otherToken)).json()).toEqual([]);
    for (const [method, path, body] of [
      ["GET", `/clusters/${clusterId}`, undefined],
      ["PATCH", `/clusters/${clusterId}`, { name: "taken" }],
      ["DELETE", `/clusters/${clusterId}`, undefined],
      ["PUT", `/clusters/${clusterId}/wake`, undefined],
      ["PUT", `/clusters/${clusterId}/upgrade`, undefined],
    ] as const) {
      expect((await call(method, path, otherToken, body)).status, `${method} ${path}`).toBe(404);
    }
    expect((await call("GET", `/clusters/${randomUUID()}`, adminToken)).status).toBe(404);
    expect((await cluster(clusterId)).name).toBe("orders-eu");

    const membersOnly = await requestToken(platform, await createTestClient(platform, ["members"]), "admin-api");
    for (const [method, path] of [
      ["GET", "/clusters"],
      ["GET", "/clusters/parameters"],
      ["POST", "/clusters"],
      ["DELETE", `/clusters/${clusterId}`],
    ] as const) {
      const response = await call(method, path, membersOnly, method === "POST" ? validCreation : undefined);
      expect(response.status, `${method} ${path}`).toBe(403);
    }
    expect((await call("GET", "/clusters", null)).status).toBe(401);
  });

  it("deletes a cluster: its processes stop, its directory and recorded place go, deletion hooks run", async () => {
    const running = await platform.running.provisioner?.whenStarted(clusterId);
    const pids = [running?.gatewayPid, ...(running?.brokers.map((broker) => broker.pid) ?? [])];
    expect(pids.every((pid) => typeof pid === "number")).toBe(true);
    const { links } = await cluster(clusterId);
    const deleted: string[] = [];
    platform.running.clusters.onClusterDeleted.push(async (entry) => {
      deleted.push(entry.clusterId);
    });

    expect((await call("DELETE", `/clusters/${clusterId}`, adminToken)).status).toBe(204);
    for (const pid of pids) expect(() => process.kill(pid as number, 0)).toThrow();
    expect(existsSync(join(dataDirectory, "clusters", clusterId))).toBe(false);
    await expect(fetch(`${links.management}/actuator/health`)).rejects.toThrow();
    expect(deleted).toEqual([clusterId]);
    // What other resources kept of the cluster went with it.
    expect((await call("GET", `/clusters/${clusterId}/ipallowlist`, adminToken)).status).toBe(404);
    expect((await call("GET", `/clusters/${clusterId}`, adminToken)).status).toBe(404);
    expect((await call("DELETE", `/clusters/${clusterId}`, adminToken)).status).toBe(404);
    const store = await openStore({ url: "", dataDirectory });
    try {
      const placements = await store.database.selectFrom("local_cluster_placements").selectAll().execute();
      expect(placements).toEqual([]);
    } finally {
      await store.close();
    }
  }, 60_000);
});

describe("Administration API /clusters without a provisioner (flowplane platform)", () => {
  it("lists clusters but answers 409 saying why for a creation", async () => {
    const alone = await startTestPlatform();
    try {
      const token = await requestToken(alone, alone.adminClient, "admin-api");
      const response = await fetch(`${alone.url}/admin/clusters`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(validCreation),
      });
      expect(response.status).toBe(409);
      expect(((await response.json()) as { detail: string }).detail).toContain("flowplane start");
      const list = await fetch(`${alone.url}/admin/clusters`, { headers: { authorization: `Bearer ${token}` } });
      expect(await list.json()).toEqual([]);
    } finally {
      await alone.close();
    }
  });
});
