/**
 * The cluster management API on a real gateway in front of real in-process brokers: authentication, every refusal
 * of the spec's error table that the request itself can cause, dry runs, empty plans, a change in progress (409),
 * cancelling it, and the response shapes. Scaling with data moving under load is tested end to end with real
 * processes (test/e2e).
 */
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Broker } from "../../../src/cluster/broker/broker.js";
import { Broker as BrokerClass } from "../../../src/cluster/broker/broker.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import {
  partitionSettled,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "../broker/support.js";

let platform: TestPlatform;
let root: string;
let brokers: Broker[];
let gateway: RunningGateway;
let token: string;

interface Problem {
  type: string;
  status: number;
  detail: string;
}

interface ScaleResponse {
  changeId: number;
  currentTopology: { id: number; partitions: { id: number; priority: number }[] }[];
  plannedChanges: {
    operation: string;
    brokerId: number;
    partitionId?: number;
    priority?: number;
    brokers?: number[];
  }[];
  expectedTopology: { id: number; partitions: { id: number }[] }[];
}

interface Monitoring {
  version: number;
  brokers: { id: number; state: string; partitions: { id: number; state: string }[] }[];
  lastChange?: { id: number; status: string };
  pendingChange?: {
    id: number;
    pending: unknown[];
    completed: unknown[];
    progress?: { attempts: number };
    waitingFor?: string;
  };
  routing: { requestHandling: { strategy: string } };
}

function call(path: string, init: RequestInit = {}, bearer: string | null = token): Promise<Response> {
  return fetch(`${gateway.managementUrl}${path}`, {
    ...init,
    headers: {
      ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
  });
}

async function problem(response: Response, status: number): Promise<Problem> {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toContain("application/problem+json");
  return (await response.json()) as Problem;
}

async function monitoring(): Promise<Monitoring> {
  const response = await call("/actuator/cluster");
  expect(response.status).toBe(200);
  return (await response.json()) as Monitoring;
}

beforeAll(async () => {
  platform = await startTestPlatform();
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  root = await temporaryDirectory("management");
  brokers = await startBrokers(root, 3);
  for (const partitionId of [1, 2, 3]) {
    await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
  }
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.gateway.port": 0,
      "service.management.port": 0,
      "service.cluster.secret": TEST_CLUSTER_SECRET,
      "service.gateway.issuerUrl": platform.issuerUrl,
      "service.gateway.contactPoints": brokers.map((broker) => `127.0.0.1:${broker.clusterAddress.port}`).join(","),
    },
  });
  gateway = await startGateway(configuration, { logger: pino({ level: "silent" }), topologyRefreshIntervalMs: 100 });
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all((brokers ?? []).map((broker) => broker.close()));
  if (root !== undefined) await removeDirectory(root);
  await platform?.close();
});

describe("cluster management API: authentication", () => {
  it("answers 401 without a token and 403 for a token without the cluster scope", async () => {
    const missing = await problem(await call("/actuator/cluster", {}, null), 401);
    expect(missing.type).toBe("urn:flowplane:problem:unauthorized");
    const withoutScope = await requestToken(platform, platform.adminClient, "gateway-api", "members");
    const forbidden = await problem(
      await call("/actuator/cluster/brokers", { method: "POST", body: "[0,1,2]" }, withoutScope),
      403,
    );
    expect(forbidden.detail).toMatch(/cluster/);
    await problem(await call("/actuator/cluster", {}, withoutScope), 403);
  });

  it("keeps health, readiness and metrics open, and publishes the API's OpenAPI document", async () => {
    for (const path of ["/actuator/health/liveness", "/actuator/prometheus", "/actuator/cluster/openapi.json"]) {
      expect((await call(path, {}, null)).status, path).toBe(200);
    }
    const document = (await (await call("/actuator/cluster/openapi.json", {}, null)).json()) as { paths: object };
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining([
        "/actuator/cluster",
        "/actuator/cluster/brokers",
        "/actuator/cluster/changes/{changeId}",
      ]),
    );
    const metrics = await (await call("/actuator/prometheus", {}, null)).text();
    expect(metrics).toContain("flowplane_cluster_change_operations_pending 0");
  });
});

describe("cluster management API: monitoring and plans", () => {
  it("GET /actuator/cluster answers the configuration in the spec's shape", async () => {
    const document = await monitoring();
    expect(document.version).toBe(1);
    expect(document.brokers.map((broker) => broker.id)).toEqual([0, 1, 2]);
    expect(document.brokers[0]).toMatchObject({ state: "ACTIVE", version: 0, lastUpdatedAt: expect.any(String) });
    expect(document.pendingChange).toBeUndefined();
    expect(document.routing).toEqual({
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount: 3 },
      messageCorrelation: { strategy: "HashMod", partitionCount: 3 },
    });
  });

  it("an empty plan answers 202 with the last change id, no operations and the current topology as expected", async () => {
    const response = await call("/actuator/cluster/brokers", { method: "POST", body: JSON.stringify(["0", 1, "2"]) });
    expect(response.status).toBe(202);
    const body = (await response.json()) as ScaleResponse;
    expect(body.changeId).toBe(0);
    expect(body.plannedChanges).toEqual([]);
    expect(body.expectedTopology).toEqual(body.currentTopology);
  });

  it("a dry run answers the plan and the expected topology and records nothing", async () => {
    const response = await call("/actuator/cluster/brokers?dryRun=true&replicationFactor=2", {
      method: "POST",
      body: "[0,1,2]",
    });
    expect(response.status).toBe(202);
    const body = (await response.json()) as ScaleResponse;
    expect(body.changeId).toBe(2);
    const leaves = body.plannedChanges.filter((operation) => operation.operation === "PARTITION_LEAVE");
    expect(leaves).toHaveLength(3);
    expect(
      body.plannedChanges.every((operation) =>
        ["PARTITION_LEAVE", "PARTITION_RECONFIGURE_PRIORITY"].includes(operation.operation),
      ),
    ).toBe(true);
    expect(body.expectedTopology.flatMap((broker) => broker.partitions)).toHaveLength(6);
    expect((await monitoring()).version).toBe(1);
  });

  it("PATCH answers the same shape, with config in the topology", async () => {
    const response = await call("/actuator/cluster?dryRun=true", {
      method: "PATCH",
      body: JSON.stringify({ partitions: { count: 3, replicationFactor: 1 } }),
    });
    expect(response.status).toBe(202);
    const body = (await response.json()) as ScaleResponse;
    expect(body.currentTopology[0]?.partitions[0]).toMatchObject({ id: 1, config: { exporting: { exporters: [] } } });
  });
});

describe("cluster management API: refusals (spec error table)", () => {
  const badRequests: [string, string, string, RequestInit, RegExp][] = [
    ["a body that is not a JSON array", "POST", "/actuator/cluster/brokers", { body: '{"brokers":[0]}' }, /array/],
    ["a body that is not JSON", "POST", "/actuator/cluster/brokers", { body: "[0," }, /JSON/],
    ["an id that is not a non-negative integer", "POST", "/actuator/cluster/brokers", { body: '[0,"one",2]' }, /one/],
    ["a negative id", "POST", "/actuator/cluster/brokers", { body: "[0,-1,2]" }, /-1/],
    ["an empty broker list", "POST", "/actuator/cluster/brokers", { body: "[]" }, /empty|at least one/],
    [
      "replicationFactor 0",
      "POST",
      "/actuator/cluster/brokers?replicationFactor=0",
      { body: "[0,1,2]" },
      /replication ?factor/i,
    ],
    [
      "fewer brokers than the replication factor",
      "POST",
      "/actuator/cluster/brokers",
      { body: "[0,1]" },
      /replication factor/,
    ],
    [
      "a broker to add that is not running",
      "POST",
      "/actuator/cluster/brokers",
      { body: "[0,1,2,7]" },
      /broker 7.*not running/,
    ],
    [
      "force with a replication factor",
      "POST",
      "/actuator/cluster/brokers?force=true&replicationFactor=2",
      { body: "[0,1]" },
      /force/,
    ],
    [
      "count with add",
      "PATCH",
      "/actuator/cluster",
      { body: JSON.stringify({ brokers: { count: 4, add: [3] } }) },
      /count/,
    ],
    [
      "one id in add and remove",
      "PATCH",
      "/actuator/cluster",
      { body: JSON.stringify({ brokers: { add: [3], remove: [3] } }) },
      /3/,
    ],
    [
      "force with added brokers",
      "PATCH",
      "/actuator/cluster?force=true",
      { body: JSON.stringify({ brokers: { add: [3] } }) },
      /force/,
    ],
    [
      "a lower partition count",
      "PATCH",
      "/actuator/cluster",
      { body: JSON.stringify({ partitions: { count: 2, replicationFactor: 3 } }) },
      /partition count/,
    ],
    [
      "partition scaling while the feature is off",
      "PATCH",
      "/actuator/cluster",
      { body: JSON.stringify({ partitions: { count: 4, replicationFactor: 3 } }) },
      /partition scaling|ENABLEPARTITIONSCALING/i,
    ],
    ["an unknown field", "PATCH", "/actuator/cluster", { body: JSON.stringify({ brokerz: {} }) }, /brokerz/],
    ["removing a broker that hosts partitions", "DELETE", "/actuator/cluster/brokers/2", {}, /hosts|partitions/],
    ["adding a member again", "POST", "/actuator/cluster/brokers/1", {}, /already/],
    ["a join without a priority", "POST", "/actuator/cluster/brokers/1/partitions/2", { body: "{}" }, /priority/],
    [
      "a join of a replica already hosted",
      "POST",
      "/actuator/cluster/partitions/2/brokers/1",
      { body: '{"priority":1}' },
      /already/,
    ],
    ["a leave of a replica not hosted", "DELETE", "/actuator/cluster/brokers/1/partitions/7", {}, /7/],
    // Numbers beyond what a cluster can have are refused at the gateway: a count of a billion brokers took the
    // coordinator's process, and integers beyond 2^53 reached the brokers, which refused them as malformed (a 502).
    [
      "a broker count beyond 1024",
      "PATCH",
      "/actuator/cluster?dryRun=true",
      { body: JSON.stringify({ brokers: { count: 1_000_000_000 } }) },
      /count must be <= 1024/,
    ],
    [
      "a broker id beyond 1023 to add",
      "PATCH",
      "/actuator/cluster?dryRun=true",
      { body: JSON.stringify({ brokers: { add: [1024] } }) },
      /add\/0 must be <= 1023/,
    ],
    [
      "a broker id beyond 1023 in the list",
      "POST",
      "/actuator/cluster/brokers",
      { body: "[0,1,2,1024]" },
      /broker id 1024 is over the maximum 1023/,
    ],
    ["a broker id of 1e300 in the list", "POST", "/actuator/cluster/brokers", { body: "[0,1,1e300]" }, /1e\+300/],
    ["a broker id written as 1e3", "POST", "/actuator/cluster/brokers/1e3?dryRun=true", {}, /brokerId/],
    ["a broker id written as 0x10", "DELETE", "/actuator/cluster/brokers/0x10?dryRun=true", {}, /brokerId/],
    [
      "a replication factor beyond 2^53",
      "POST",
      "/actuator/cluster/brokers?dryRun=true&replicationFactor=99999999999999999999",
      { body: "[0,1,2]" },
      /replicationFactor/,
    ],
    [
      "a priority of 1e300",
      "POST",
      "/actuator/cluster/brokers/0/partitions/1?dryRun=true",
      { body: '{"priority":1e300}' },
      /priority/,
    ],
    ["a change id beyond 2^53", "DELETE", "/actuator/cluster/changes/99999999999999999999999", {}, /changeId/],
  ];
  for (const [name, method, path, init, detail] of badRequests) {
    it(`400 for ${name}`, async () => {
      const body = await problem(await call(path, { method, ...init }), 400);
      expect(body.detail).toMatch(detail);
    });
  }

  it("404 for an unknown change id on cancel and for an unknown route", async () => {
    const unknown = await problem(await call("/actuator/cluster/changes/999", { method: "DELETE" }), 404);
    expect(unknown.detail).toMatch(/999/);
    await problem(await call("/actuator/cluster/nowhere"), 404);
  });

  it("accepts a DELETE with a content type and no body, as clients send it", async () => {
    for (const contentType of ["application/json", "text/plain"]) {
      const response = await fetch(`${gateway.managementUrl}/actuator/cluster/changes/998`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${token}`, "content-type": contentType },
      });
      expect((await problem(response, 404)).detail).toMatch(/998/);
    }
  });
});

describe("cluster management API: a change in progress", () => {
  it("409 names the change in progress; cancelling it answers the configuration with lastChange CANCELLED", async () => {
    // A fourth broker joins the cluster, then stops: a change made while the others still count it as reachable
    // waits for it forever, which is what this test needs.
    const fourth = await BrokerClass.start(
      testBrokerOptions(root, 3, { contactPoints: brokers.map((broker) => broker.clusterAddress) }),
    );
    await waitFor(() => brokers[0]!.isReachable(3), "the coordinator hears from broker 3");
    const added = await call("/actuator/cluster/brokers/3", { method: "POST" });
    expect(added.status, await added.clone().text()).toBe(202);
    const addChange = ((await added.json()) as ScaleResponse).changeId;
    await waitFor(() => brokers[0]!.configuration.lastChange?.id === addChange, "broker 3 added");
    await fourth.close();
    const started = await call("/actuator/cluster/partitions/1/brokers/3", { method: "POST", body: '{"priority":1}' });
    expect(started.status).toBe(202);
    const change = (await started.json()) as ScaleResponse;
    expect(change.plannedChanges).toEqual([{ operation: "PARTITION_JOIN", brokerId: 3, partitionId: 1, priority: 1 }]);
    expect(
      change.expectedTopology.find((broker) => broker.id === 3)?.partitions.map((partition) => partition.id),
    ).toEqual([1]);

    const second = await problem(await call("/actuator/cluster/brokers/3", { method: "DELETE" }), 409);
    expect(second.detail).toBe(`Another configuration change [${change.changeId}] is in progress`);
    const running = await monitoring();
    expect(running.pendingChange).toMatchObject({ id: change.changeId, completed: [], pending: [expect.anything()] });
    // Once the gateway's topology round finds broker 3 gone, the response says what the change waits for.
    let waiting: Monitoring | undefined;
    await waitFor(async () => {
      waiting = await monitoring();
      return waiting.pendingChange?.waitingFor !== undefined;
    }, "the running change says what it waits for");
    expect(waiting?.pendingChange?.waitingFor).toBe(
      `broker 3, which applies the running operation PARTITION_JOIN, does not answer this gateway; the change goes ` +
        `on once it is reachable again, or DELETE /actuator/cluster/changes/${change.changeId} cancels it`,
    );

    const cancelled = await call(`/actuator/cluster/changes/${change.changeId}`, { method: "DELETE" });
    expect(cancelled.status).toBe(200);
    const after = (await cancelled.json()) as Monitoring;
    expect(after.lastChange).toMatchObject({ id: change.changeId, status: "CANCELLED" });
    expect(after.pendingChange).toBeUndefined();
    expect(after.version).toBe(change.changeId + 1);
    // The broker that is gone is refused as unreachable now.
    await waitFor(() => !brokers[0]!.isReachable(3), "broker 3 counted as unreachable");
    const unreachable = await problem(
      await call("/actuator/cluster/partitions/2/brokers/3", { method: "POST", body: '{"priority":1}' }),
      400,
    );
    expect(unreachable.detail).toMatch(/broker 3 is unreachable/);
    // Forced removal of the broker that is gone for good works without it.
    const forced = await call("/actuator/cluster/brokers?force=true", { method: "POST", body: "[0,1,2]" });
    expect(forced.status, await forced.clone().text()).toBe(202);
    const forcedChange = (await forced.json()) as ScaleResponse;
    expect(forcedChange.plannedChanges).toEqual([{ operation: "BROKER_REMOVE", brokerId: 0, brokers: [3] }]);
    await waitFor(
      () => brokers[0]!.configuration.lastChange?.id === forcedChange.changeId,
      "the forced removal completed",
    );
    expect((await monitoring()).brokers.map((broker) => broker.id)).toEqual([0, 1, 2]);
  });
});
