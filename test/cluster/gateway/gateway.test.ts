import { pino } from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { GetMessageResponse, PublishMessageResponse } from "../../../src/cluster/broker/protocol.js";
import { encodeKey, partitionForCorrelationKey } from "../../../src/cluster/engine/index.js";
import { MANAGEMENT_MAX_IN_FLIGHT_REQUESTS } from "../../../src/cluster/gateway/gateway.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { MAX_FORWARDS } from "../../../src/cluster/gateway/message-router.js";
import { encodeConfiguration } from "../../../src/cluster/topology/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { maxJsonNestingLevels } from "../../../src/http/limits.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { probeConnectionLimits } from "../../support/http.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import { type FakeBroker, startFakeCluster, threeBrokerConfiguration } from "./fake-broker.js";

let platform: TestPlatform;
let cluster: Awaited<ReturnType<typeof startFakeCluster>>;
let token: string;
const gateways: RunningGateway[] = [];

async function gatewayWith(
  settings: Record<string, string | number> = {},
  topologyRefreshIntervalMs?: number,
): Promise<RunningGateway> {
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.gateway.port": 0,
      "service.management.port": 0,
      "service.cluster.secret": TEST_CLUSTER_SECRET,
      "service.gateway.issuerUrl": platform.issuerUrl,
      "service.gateway.contactPoints": cluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(","),
      ...settings,
    },
  });
  const gateway = await startGateway(configuration, {
    logger: pino({ level: "silent" }),
    ...(topologyRefreshIntervalMs === undefined ? {} : { topologyRefreshIntervalMs }),
  });
  gateways.push(gateway);
  return gateway;
}

function call(gateway: RunningGateway, path: string, init: RequestInit = {}, bearer: string | null = token) {
  return fetch(`${gateway.url}${path}`, {
    ...init,
    headers: {
      ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
  });
}

function publish(gateway: RunningGateway, body: unknown) {
  return call(gateway, "/v2/messages/publication", { method: "POST", body: JSON.stringify(body) });
}

function brokerLeading(partitionId: number): FakeBroker {
  const broker = cluster.brokers.find((candidate) => candidate.leads.has(partitionId));
  if (broker === undefined) throw new Error(`no fake broker leads partition ${partitionId}`);
  return broker;
}

beforeAll(async () => {
  platform = await startTestPlatform();
  cluster = await startFakeCluster();
  token = await requestToken(platform, platform.adminClient, "gateway-api");
});

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()));
  await cluster?.close();
  await platform?.close();
});

beforeEach(() => {
  for (const broker of cluster.brokers) {
    broker.interceptor = undefined;
    broker.received.length = 0;
    broker.connectionsByRequestType.clear();
    broker.leads = new Set([broker.nodeId + 1]);
  }
});

describe("gateway REST API", () => {
  it("refuses requests without a bearer token and tokens for another audience", async () => {
    const gateway = await gatewayWith();
    const missing = await call(gateway, "/v2/topology", {}, null);
    expect(missing.status).toBe(401);
    expect(missing.headers.get("content-type")).toContain("application/problem+json");
    const adminToken = await requestToken(platform, platform.adminClient, "admin-api");
    const wrongAudience = await call(gateway, "/v2/topology", {}, adminToken);
    expect(wrongAudience.status).toBe(401);
  });

  it("accepts the platform's tokens when its issuer URL is configured with a trailing slash", async () => {
    const gateway = await gatewayWith({ "service.gateway.issuerUrl": `${platform.issuerUrl}/` });
    expect(platform.issuerUrl.endsWith("/")).toBe(false);
    const response = await call(gateway, "/v2/topology");
    expect(response.status).toBe(200);
  });

  it("serves the topology from the brokers' own answers", async () => {
    const gateway = await gatewayWith();
    const response = await call(gateway, "/v2/topology");
    expect(response.status).toBe(200);
    // Serialized once per view, the document is still JSON as the schema describes it.
    expect(response.headers.get("content-type")).toBe("application/json; charset=utf-8");
    const topology = (await response.json()) as Record<string, unknown> & {
      brokers: { nodeId: number; port: number; version: string; partitions: { role: string }[] }[];
    };
    expect(topology.brokers.map((broker) => broker.nodeId)).toEqual([0, 1, 2]);
    expect(topology.brokers[1]?.port).toBe(cluster.brokers[1]?.address?.port);
    expect(topology.brokers[1]?.version).toBe("0.1.0-fake");
    expect(topology.brokers[1]?.partitions).toEqual([
      { partitionId: 1, role: "follower", health: "healthy" },
      { partitionId: 2, role: "leader", health: "healthy" },
      { partitionId: 3, role: "follower", health: "healthy" },
    ]);
    expect(topology).toMatchObject({
      clusterSize: 3,
      partitionsCount: 3,
      replicationFactor: 3,
      lastCompletedChangeId: "-1",
    });
    expect(typeof topology.gatewayVersion).toBe("string");
  });

  it("publishes to the leader of the correlation key's partition and reads the message back", async () => {
    const gateway = await gatewayWith();
    const partitionId = partitionForCorrelationKey("order-42", 3);
    const response = await publish(gateway, {
      name: "payment",
      correlationKey: "order-42",
      timeToLive: 60_000,
      variables: { amount: 12 },
    });
    expect(response.status).toBe(200);
    const published = (await response.json()) as { messageKey: string; tenantId: string };
    expect(published.tenantId).toBe("<default>");
    expect(brokerLeading(partitionId).received).toHaveLength(1);

    const read = await call(gateway, `/v2/messages/${published.messageKey}`);
    expect(read.status).toBe(200);
    expect(await read.json()).toMatchObject({
      key: published.messageKey,
      partitionId,
      name: "payment",
      correlationKey: "order-42",
      timeToLive: 60_000,
      variables: { amount: 12 },
    });
  });

  it("spreads messages without a correlation key round robin over the partitions", async () => {
    const gateway = await gatewayWith();
    const partitions = new Set<number>();
    for (let index = 0; index < 3; index += 1) {
      const response = await publish(gateway, { name: "tick" });
      expect(response.status).toBe(200);
      const { messageKey } = (await response.json()) as { messageKey: string };
      const read = (await (await call(gateway, `/v2/messages/${messageKey}`)).json()) as { partitionId: number };
      partitions.add(read.partitionId);
    }
    expect([...partitions].sort()).toEqual([1, 2, 3]);
  });

  it("routes a message without a correlation key by its message id, so parallel retries meet one partition", async () => {
    const gateway = await gatewayWith();
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => publish(gateway, { name: "retried", messageId: "pay-7", timeToLive: 60_000 })),
    );
    const statuses = answers.map((answer) => answer.status).sort();
    expect(statuses).toEqual([200, ...Array.from({ length: 19 }, () => 409)]);
    const owner = partitionForCorrelationKey("pay-7", 3);
    for (const broker of cluster.brokers) {
      const received = broker.received.filter((request) => request.type === "publish-message");
      expect(received.every((request) => request.partitionId === owner)).toBe(true);
    }
  });

  it("answers 409 for a message id already buffered, 400 for invalid input, 404 for unknown keys", async () => {
    const gateway = await gatewayWith();
    const first = await publish(gateway, { name: "m", correlationKey: "k", messageId: "once" });
    expect(first.status).toBe(200);
    const again = await publish(gateway, { name: "m", correlationKey: "k", messageId: "once" });
    expect(again.status).toBe(409);

    expect((await publish(gateway, { correlationKey: "k" })).status).toBe(400);
    expect((await publish(gateway, { name: "m", unknown: 1 })).status).toBe(400);
    expect((await publish(gateway, { name: "m", variables: [1] })).status).toBe(400);
    const tooLong = await publish(gateway, { name: "x".repeat(2000) });
    expect(tooLong.status).toBe(400);
    expect(((await tooLong.json()) as { detail: string }).detail).toContain("name");
    expect((await publish(gateway, { name: "m", tenantId: "not a tenant!" })).status).toBe(400);
    // Text and numbers that would not read back as sent: a lone surrogate became U+FFFD (so "\ud800" and "\udbff"
    // collided as one message id), and 1e400 became null.
    const lone = await publish(gateway, { name: "m", correlationKey: "k", messageId: "\ud800" });
    expect(lone.status).toBe(400);
    expect(((await lone.json()) as { detail: string }).detail).toContain("messageId must be well-formed Unicode");
    const huge = await call(gateway, "/v2/messages/publication", {
      method: "POST",
      body: '{"name":"m","correlationKey":"k","variables":{"a":1e400}}',
    });
    expect(huge.status).toBe(400);
    expect(((await huge.json()) as { detail: string }).detail).toContain("beyond the range of a double");
    // Nothing invalid reached a broker.
    expect(cluster.brokers.reduce((sum, broker) => sum + broker.received.length, 0)).toBe(2);

    expect((await call(gateway, "/v2/messages/not-a-key")).status).toBe(400);
    // A number, but one no publication is answered with: its high bits name no partition.
    const partitionless = await call(gateway, "/v2/messages/999");
    expect(partitionless.status).toBe(400);
    expect(((await partitionless.json()) as { detail: string }).detail).toContain("its partition id times 2^51");
    const unknown = await call(gateway, `/v2/messages/${2n ** 51n + 7n}`);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("content-type")).toContain("application/problem+json");
  });

  it("follows a relocated message's forwards through every scale-up it lived through, and answers 502 for a chain without end", async () => {
    const gateway = await gatewayWith();
    // Relocated in three partition scale-ups: partition 1 → 2 → 3 → 1, each time under a new key.
    const keys = [encodeKey(1, 7), encodeKey(2, 40), encodeKey(3, 41), encodeKey(1, 90)];
    const final = keys[3] as string;
    for (const broker of cluster.brokers) {
      broker.interceptor = (request) => {
        if (request.type !== "get-message") return undefined;
        const position = keys.indexOf(request.key);
        if (position === -1 || !broker.leads.has(request.partitionId)) return undefined;
        if (request.key === final) {
          const message = {
            key: final,
            partitionId: 1,
            name: "moved",
            correlationKey: "three-moves",
            timeToLiveMs: 60_000,
            variables: {},
            tenantId: "<default>",
            publishedAt: "2026-01-01T00:00:00.000Z",
            expiresAt: "2026-01-01T00:01:00.000Z",
          };
          return Promise.resolve<GetMessageResponse>({ outcome: "found", message });
        }
        return Promise.resolve<GetMessageResponse>({ outcome: "moved", key: keys[position + 1] as string });
      };
    }
    const read = await call(gateway, `/v2/messages/${keys[0]}`);
    expect(read.status).toBe(200);
    expect(((await read.json()) as { correlationKey: string }).correlationKey).toBe("three-moves");

    // A broker that forwards a key to itself (a defect) is not taken for a missing message.
    const looping = encodeKey(2, 5);
    for (const broker of cluster.brokers) {
      broker.interceptor = (request) =>
        request.type === "get-message" && request.key === looping && broker.leads.has(2)
          ? Promise.resolve<GetMessageResponse>({ outcome: "moved", key: looping })
          : undefined;
    }
    const endless = await call(gateway, `/v2/messages/${looping}`);
    expect(endless.status).toBe(502);
    expect(((await endless.json()) as { detail: string }).detail).toContain(`more than ${MAX_FORWARDS} times`);
    const reads = cluster.brokers
      .flatMap((broker) => broker.received)
      .filter((request) => request.type === "get-message");
    expect(reads.filter((request) => (request as { key: string }).key === looping)).toHaveLength(MAX_FORWARDS + 1);
  });

  it("retries once at the leader a broker names when it is not the leader", async () => {
    const gateway = await gatewayWith();
    const partitionId = partitionForCorrelationKey("moved", 3);
    const oldLeader = brokerLeading(partitionId);
    const newLeader = cluster.brokers.find((broker) => broker !== oldLeader) as FakeBroker;
    // Leadership moved; the gateway's cached view still names the old leader.
    oldLeader.leads.delete(partitionId);
    newLeader.leads.add(partitionId);
    oldLeader.interceptor = () =>
      Promise.resolve<PublishMessageResponse>({ outcome: "not-leader", leaderId: newLeader.nodeId });
    const response = await publish(gateway, { name: "m", correlationKey: "moved" });
    expect(response.status).toBe(200);
    expect(oldLeader.received).toHaveLength(1);
    expect(newLeader.received).toHaveLength(1);
  });

  it("answers 503 with Retry-After when the leader keeps refusing after the one retry", async () => {
    const gateway = await gatewayWith();
    for (const broker of cluster.brokers) {
      broker.interceptor = () => Promise.resolve<PublishMessageResponse>({ outcome: "unavailable", detail: "busy" });
    }
    const response = await publish(gateway, { name: "m", correlationKey: "c" });
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("1");
    expect(cluster.brokers.reduce((sum, broker) => sum + broker.received.length, 0)).toBe(2);
  });

  it("answers 502 outcome-unknown, without a retry, when the leader cannot tell whether a publication took effect", async () => {
    const gateway = await gatewayWith();
    for (const broker of cluster.brokers) {
      broker.interceptor = () =>
        Promise.resolve<PublishMessageResponse>({ outcome: "unknown", detail: "partition 1 replica stopped" });
    }
    const response = await publish(gateway, { name: "m", correlationKey: "c" });
    expect(response.status).toBe(502);
    const problem = (await response.json()) as { type: string; detail: string };
    expect(problem.type).toBe("urn:flowplane:problem:outcome-unknown");
    expect(problem.detail).toContain("messageId");
    expect(cluster.brokers.reduce((sum, broker) => sum + broker.received.length, 0)).toBe(1);
  });

  it("answers 504 when the leader does not answer in time", async () => {
    const gateway = await gatewayWith({ "service.gateway.requestTimeoutMs": 300 });
    for (const broker of cluster.brokers) broker.interceptor = () => new Promise<GetMessageResponse>(() => undefined);
    const response = await publish(gateway, { name: "m", correlationKey: "c" });
    expect(response.status).toBe(504);
    expect(((await response.json()) as { type: string }).type).toBe("urn:flowplane:problem:gateway-timeout");
  });

  it("answers 503 with Retry-After beyond maxInFlightRequests", async () => {
    const gateway = await gatewayWith({ "service.gateway.maxInFlightRequests": 1 });
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let arrived: () => void = () => undefined;
    const firstArrived = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    for (const broker of cluster.brokers) {
      broker.interceptor = async (request) => {
        arrived();
        await held;
        return {
          outcome: "published",
          key: "1",
          partitionId: "partitionId" in request ? request.partitionId : 0,
          tenantId: "<default>",
        };
      };
    }
    const first = publish(gateway, { name: "m", correlationKey: "c" });
    await firstArrived;
    const second = await publish(gateway, { name: "m", correlationKey: "c" });
    expect(second.status).toBe(503);
    expect(second.headers.get("retry-after")).toBe("1");
    release();
    expect((await first).status).toBe(200);
  });

  it("keeps a leader whose connection is full of client requests in its topology, and stays UP", async () => {
    const gateway = await gatewayWith({ "service.gateway.maxInFlightRequests": 2 }, 50);
    const leader = brokerLeading(1);
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    leader.interceptor = (request) =>
      request.type === "get-message" ? held.then((): GetMessageResponse => ({ outcome: "not-found" })) : undefined;
    const reads = [1, 2].map((counter) => call(gateway, `/v2/messages/${encodeKey(1, counter)}`));
    // Several topology rounds while both requests the gateway allows wait on the leader's connection.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const health = await fetch(`${gateway.managementUrl}/actuator/health`);
    expect(health.status).toBe(200);
    release();
    for (const read of await Promise.all(reads)) expect(read.status).toBe(404);
  });

  it("answers 503, not 404, for a key of a partition it has not seen while no broker answers", async () => {
    const lonely = await startFakeCluster();
    const contactPoints = lonely.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(",");
    const gateway = await gatewayWith({ "service.gateway.contactPoints": contactPoints }, 50);
    expect((await fetch(`${gateway.managementUrl}/actuator/health`)).status).toBe(200);
    // Every broker gone: the gateway keeps its view of three partitions, which may predate a fourth.
    await lonely.close();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const unseen = await call(gateway, `/v2/messages/${encodeKey(4, 1)}`);
    expect(unseen.status).toBe(503);
    expect(unseen.headers.get("retry-after")).toBe("1");
  });

  it("serves an OpenAPI document of the REST API", async () => {
    const gateway = await gatewayWith();
    const response = await call(gateway, "/v2/openapi.json", {}, null);
    expect(response.status).toBe(200);
    const document = (await response.json()) as { paths: Record<string, unknown> };
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining(["/topology", "/messages/publication", "/messages/{messageKey}"]),
    );
  });
});

describe("gateway management API", () => {
  it("reports health, liveness, readiness and Prometheus metrics without a token", async () => {
    const gateway = await gatewayWith();
    await publish(gateway, { name: "m", correlationKey: "c" });
    const health = await fetch(`${gateway.managementUrl}/actuator/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({
      status: "UP",
      components: { brokers: { status: "UP" }, partitions: { status: "UP" } },
    });
    expect((await fetch(`${gateway.managementUrl}/actuator/health/liveness`)).status).toBe(200);
    expect((await fetch(`${gateway.managementUrl}/actuator/health/readiness`)).status).toBe(200);
    const metrics = await (await fetch(`${gateway.managementUrl}/actuator/prometheus`)).text();
    expect(metrics).toContain(
      'flowplane_gateway_requests_total{method="POST",route="/v2/messages/publication",status="200"}',
    );
    expect(metrics).toContain("flowplane_gateway_request_duration_seconds_bucket");
    expect(metrics).toContain('flowplane_partition_term{partition="1",broker="0"} 2');
    expect(metrics).toContain('flowplane_partition_log_size_entries{partition="3",broker="2"} 7');
    expect(metrics).toContain('flowplane_partition_role{partition="2",broker="1",role="leader"} 1');
    expect(metrics).toContain("flowplane_gateway_in_flight_requests 0");
  });

  it("counts the fetches of the issuer's key set and reports its age in the metrics", async () => {
    const gateway = await gatewayWith();
    const scrape = async () => await (await fetch(`${gateway.managementUrl}/actuator/prometheus`)).text();
    const before = await scrape();
    // prom-client writes NaN as "Nan", which Prometheus reads as NaN.
    expect(before).toMatch(/^flowplane_gateway_token_key_set_age_seconds nan$/im);
    expect(before).not.toMatch(/^flowplane_gateway_token_key_set_fetches_total\{/m);
    expect((await call(gateway, "/v2/topology")).status).toBe(200);
    const after = await scrape();
    expect(after).toMatch(/^flowplane_gateway_token_key_set_fetches_total\{outcome="succeeded"\} 1$/m);
    expect(after).toMatch(/^flowplane_gateway_token_key_set_age_seconds \d+(\.\d+)?$/m);
  });

  it("retries once at the new leader when the leader's broker is gone, and lists that broker as dead", async () => {
    // No periodic refresh during the test: the gateway still believes the stopped broker leads its partition.
    const gateway = await gatewayWith({}, 600_000);
    const correlationKey = ["a", "b", "c", "d", "e", "f"].find((key) => partitionForCorrelationKey(key, 3) === 3);
    if (correlationKey === undefined) throw new Error("no fixture key maps to partition 3");
    const stopped = cluster.brokers[2] as FakeBroker;
    const successor = cluster.brokers[0] as FakeBroker;
    await stopped.transport.close();
    successor.leads.add(3);
    const response = await publish(gateway, { name: "m", correlationKey });
    expect(response.status).toBe(200);
    expect(successor.received).toHaveLength(1);

    const topology = (await (await call(gateway, "/v2/topology")).json()) as {
      brokers: { nodeId: number; partitions: unknown[] }[];
    };
    expect(topology.brokers[2]?.partitions).toEqual(
      [1, 2, 3].map((partitionId) => ({ partitionId, role: "inactive", health: "dead" })),
    );
  });

  it("lists an unreachable broker as dead and reports readiness DOWN when a partition loses its leader", async () => {
    const gateway = await gatewayWith();
    // Broker 2, the leader of partition 3, was stopped by the previous test.
    let topology: { brokers: { nodeId: number; partitions: { role: string; health: string }[] }[] } | undefined;
    // The periodic refresh notices within a round or two; poll with a bound instead of sleeping a fixed time.
    for (let attempt = 0; attempt < 50; attempt += 1) {
      topology = (await (await call(gateway, "/v2/topology")).json()) as typeof topology;
      if (topology?.brokers[2]?.partitions.every((partition) => partition.health === "dead")) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(topology?.brokers[2]?.partitions).toEqual(
      [1, 2, 3].map((partitionId) => ({
        partitionId,
        role: "inactive",
        health: "dead",
      })),
    );
    const readiness = await fetch(`${gateway.managementUrl}/actuator/health/readiness`);
    expect(readiness.status).toBe(503);
    expect(await readiness.json()).toMatchObject({ status: "DOWN", components: { partitions: { status: "DOWN" } } });
  });

  it("answers 503 with Retry-After early, not at the request timeout, while a partition has no leader", async () => {
    const gateway = await gatewayWith({ "service.gateway.requestTimeoutMs": 30_000 });
    // Broker 2, the only one leading partition 3 (see beforeEach), was stopped two tests ago.
    const correlationKey = ["a", "b", "c", "d", "e", "f"].find((key) => partitionForCorrelationKey(key, 3) === 3);
    const startedAtMs = Date.now();
    const response = await publish(gateway, { name: "m", correlationKey });
    const elapsedMs = Date.now() - startedAtMs;
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("1");
    // Its leader may live on for the others: the answer names the replicas this gateway does not reach.
    expect(((await response.json()) as { detail: string }).detail).toBe(
      "Partition 3 has no leader among the brokers this gateway reaches (broker 2 of its replicas do not answer it); retry shortly.",
    );
    // It waited for an election a while (a few polls), and answered far within the 30 s request timeout.
    expect(elapsedMs).toBeGreaterThanOrEqual(2_000);
    expect(elapsedMs).toBeLessThan(10_000);
  });
});

describe("gateway when a leader's broker goes away during a request", () => {
  let brokenCluster: Awaited<ReturnType<typeof startFakeCluster>>;

  beforeAll(async () => {
    brokenCluster = await startFakeCluster();
  });

  afterAll(async () => {
    await brokenCluster?.close();
  });

  /** Makes `dying` drop its connections on the first request of `type`, handing its partition to `successor`. */
  function dieOnFirst(dying: FakeBroker, successor: FakeBroker, partitionId: number, type: string): void {
    dying.interceptor = (request) => {
      if (request.type !== type) return undefined;
      dying.leads.delete(partitionId);
      successor.leads.add(partitionId);
      void dying.transport.close();
      return new Promise(() => undefined);
    };
  }

  it("does not repeat a publication the broker may have received, and repeats a read", async () => {
    const contactPoints = brokenCluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(",");
    const gateway = await gatewayWith({ "service.gateway.contactPoints": contactPoints }, 600_000);
    const [first, second, third] = brokenCluster.brokers as [FakeBroker, FakeBroker, FakeBroker];
    const keyOf = (partitionId: number) => {
      const key = ["a", "b", "c", "d", "e", "f"].find(
        (candidate) => partitionForCorrelationKey(candidate, 3) === partitionId,
      );
      if (key === undefined) throw new Error(`no fixture key maps to partition ${partitionId}`);
      return key;
    };

    // Broker 2 leads partition 3 and breaks while it holds the publication: its outcome is unknown to the gateway.
    dieOnFirst(third, first, 3, "publish-message");
    const published = await publish(gateway, { name: "m", correlationKey: keyOf(3) });
    expect(published.status).toBe(502);
    expect(((await published.json()) as { type: string }).type).toBe("urn:flowplane:problem:outcome-unknown");
    expect(third.received).toHaveLength(1);
    expect(first.received).toHaveLength(0);

    // Broker 1 leads partition 2 and breaks while it holds a read: reading again elsewhere is harmless.
    dieOnFirst(second, first, 2, "get-message");
    const read = await call(gateway, `/v2/messages/${encodeKey(2, 1)}`);
    expect(read.status).toBe(404);
    expect(second.received).toHaveLength(1);
    expect(first.received).toHaveLength(1);
  });
});

describe("gateway forwarding of management requests to the coordinator", () => {
  function manage(gateway: RunningGateway, path: string, init: RequestInit = {}) {
    return fetch(`${gateway.managementUrl}${path}`, {
      ...init,
      headers: {
        authorization: `Bearer ${token}`,
        ...(init.body === undefined ? {} : { "content-type": "application/json" }),
      },
    });
  }
  const status = { outcome: "status", configuration: "" };

  afterAll(() => {
    for (const broker of cluster.brokers) broker.management = undefined;
  });

  it("follows a not-coordinator answer to the broker it names", async () => {
    const gateway = await gatewayWith();
    const [first, second] = cluster.brokers as [FakeBroker, FakeBroker];
    first.management = async () => ({ outcome: "not-coordinator", coordinatorId: 1 });
    second.management = async () => ({ ...status, configuration: encodeConfigurationOfFake() });
    const response = await manage(gateway, "/actuator/cluster");
    expect(response.status).toBe(200);
    expect(((await response.json()) as { version: number }).version).toBe(1);
    expect(first.received.some((request) => request.type === "cluster-status")).toBe(true);
    expect(second.received.some((request) => request.type === "cluster-status")).toBe(true);
  });

  it("answers 502 when no broker answers as coordinator and 504 when the coordinator does not answer in time", async () => {
    const gateway = await gatewayWith({ "service.gateway.requestTimeoutMs": 300 });
    for (const broker of cluster.brokers)
      broker.management = async () => ({ outcome: "not-coordinator", coordinatorId: 9 });
    const unreachable = await manage(gateway, "/actuator/cluster");
    expect(unreachable.status).toBe(502);
    expect(((await unreachable.json()) as { type: string }).type).toBe("urn:flowplane:problem:bad-gateway");
    (cluster.brokers[0] as FakeBroker).management = () => new Promise(() => undefined);
    const slow = await manage(gateway, "/actuator/cluster/brokers", { method: "POST", body: "[0,1,2]" });
    expect(slow.status).toBe(504);
    expect(((await slow.json()) as { detail: string }).detail).toMatch(/did not answer within 300 ms/);
  });

  it("maps the coordinator's refusals to problem documents", async () => {
    const gateway = await gatewayWith();
    (cluster.brokers[0] as FakeBroker).management = async () => ({
      outcome: "refused",
      status: 409,
      detail: "Another configuration change [4] is in progress",
    });
    const response = await manage(gateway, "/actuator/cluster", { method: "PATCH", body: "{}" });
    expect(response.status).toBe(409);
    expect(await response.json()).toMatchObject({
      type: "urn:flowplane:problem:conflict",
      detail: "Another configuration change [4] is in progress",
    });
  });
});

describe("gateway limits on input and connections", () => {
  /** The text of a JSON object nesting `levels` objects, the innermost holding a number. */
  function nestedObjectText(levels: number): string {
    return `${'{"inner":'.repeat(levels - 1)}{"value":1}${"}".repeat(levels - 1)}`;
  }

  it("answers variables nested beyond the documented depth with 400 before any broker sees them", async () => {
    const gateway = await gatewayWith();
    const withVariables = (variables: string) =>
      call(gateway, "/v2/messages/publication", {
        method: "POST",
        body: `{"name":"deep","correlationKey":"order-1","timeToLive":1000,"variables":${variables}}`,
      });
    // The publication itself is the first level: variables may nest 63 more.
    expect((await withVariables(nestedObjectText(maxJsonNestingLevels - 1))).status).toBe(200);
    for (const levels of [maxJsonNestingLevels, 1_400, 100_000]) {
      const response = await withVariables(nestedObjectText(levels));
      expect(response.status, `${levels} levels`).toBe(400);
      expect(((await response.json()) as { detail: string }).detail).toContain(`${maxJsonNestingLevels} levels`);
    }
    expect(cluster.brokers.reduce((sum, broker) => sum + broker.received.length, 0)).toBe(1);
  });

  it("answers over-long path parameters and URLs with 414 on both ports, and invalid UTF-8 with 400", async () => {
    const gateway = await gatewayWith();
    const longKey = await call(gateway, `/v2/messages/${"9".repeat(600)}`);
    expect(longKey.status).toBe(414);
    expect(longKey.headers.get("content-type")).toContain("application/problem+json");
    const longBroker = await fetch(`${gateway.managementUrl}/actuator/cluster/brokers/${"1".repeat(600)}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    });
    expect(longBroker.status).toBe(414);
    expect(((await longBroker.json()) as { type: string }).type).toBe("urn:flowplane:problem:uri-too-long");
    expect((await call(gateway, `/v2/topology?padding=${"x".repeat(9_000)}`)).status).toBe(414);

    const invalidUtf8 = Buffer.concat([
      Buffer.from('{"name":"'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('","correlationKey":"order-1","timeToLive":1000}'),
    ]);
    const response = await call(gateway, "/v2/messages/publication", { method: "POST", body: invalidUtf8 });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { detail: string }).detail).toContain("UTF-8");
    expect(cluster.brokers.every((broker) => broker.received.length === 0)).toBe(true);
  });

  it("applies the connection limits and the request deadline on both ports", async () => {
    const gateway = await gatewayWith({
      "service.http.maxConnectionsPerAddress": 3,
      "service.http.requestReceiveTimeoutMs": 2_000,
    });
    for (const [url, otherClientPath] of [
      [gateway.url, "/v2/openapi.json"],
      [gateway.managementUrl, "/actuator/health/liveness"],
    ] as const) {
      const probe = await probeConnectionLimits(url, { count: 10, otherClientPath, timeoutMs: 20_000 });
      expect(probe.otherClientStatus, url).toBe(200);
      expect(probe.unanswered, url).toBe(7);
      expect(probe.answered, url).toHaveLength(3);
      for (const answer of probe.answered) expect(answer).toMatch(/^HTTP\/1\.1 408 [\s\S]*request-timeout/);
    }
  }, 60_000);
});

function encodeConfigurationOfFake(): string {
  return encodeConfiguration(threeBrokerConfiguration());
}

describe("gateway: management requests beside publications", () => {
  it("sends management requests on connections of their own, a bounded number at a time, answering the rest 503", async () => {
    const gateway = await gatewayWith();
    const coordinator = cluster.brokers[0] as FakeBroker;
    let inFlight = 0;
    let mostInFlight = 0;
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    coordinator.management = async () => {
      inFlight += 1;
      mostInFlight = Math.max(mostInFlight, inFlight);
      await held;
      inFlight -= 1;
      return { outcome: "status", configuration: encodeConfiguration(threeBrokerConfiguration()) };
    };
    try {
      const status = (): Promise<Response> =>
        fetch(`${gateway.managementUrl}/actuator/cluster`, { headers: { authorization: `Bearer ${token}` } });
      const asked = Array.from({ length: MANAGEMENT_MAX_IN_FLIGHT_REQUESTS + 12 }, status);
      // Bounded: stops after 20 s at most.
      for (let attempt = 0; attempt < 400 && inFlight < MANAGEMENT_MAX_IN_FLIGHT_REQUESTS; attempt += 1) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(inFlight).toBe(MANAGEMENT_MAX_IN_FLIGHT_REQUESTS);
      // While the coordinator holds as many as the gateway allows, a publication to a partition it leads goes through.
      const correlationKey = Array.from({ length: 100 }, (_, index) => `held-${index}`).find(
        (key) => partitionForCorrelationKey(key, 3) === 1,
      );
      expect(coordinator.leads.has(1)).toBe(true);
      const published = await publish(gateway, { name: "order", correlationKey, timeToLive: 60_000 });
      expect(published.status).toBe(200);
      release();
      const answers = await Promise.all(asked);
      const refused = answers.filter((answer) => answer.status === 503);
      expect(answers.filter((answer) => answer.status === 200)).toHaveLength(MANAGEMENT_MAX_IN_FLIGHT_REQUESTS);
      expect(refused).toHaveLength(12);
      const firstRefused = refused[0] as Response;
      expect(firstRefused.headers.get("retry-after")).toBe("1");
      expect(((await firstRefused.json()) as { detail: string }).detail).toBe(
        "The gateway has as many cluster management requests in flight as it allows; retry later.",
      );
      expect(mostInFlight).toBe(MANAGEMENT_MAX_IN_FLIGHT_REQUESTS);
      // Separate connections: a broker that closes one over answers piled up unread takes no publication with it.
      const managementConnections = coordinator.connectionsByRequestType.get("cluster-status") ?? new Set();
      const publicationConnections = coordinator.connectionsByRequestType.get("publish-message") ?? new Set();
      expect(managementConnections.size).toBe(1);
      expect(publicationConnections.size).toBe(1);
      expect([...managementConnections][0]).not.toBe([...publicationConnections][0]);
    } finally {
      release();
      coordinator.management = undefined;
    }
  });
});
