import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import {
  createBrokerMetrics,
  type ManagementSource,
  startManagementServer,
} from "../../../src/cluster/broker/management.js";
import { inactiveReplicaReport } from "../../../src/cluster/broker/replica-host.js";
import type { HttpServer } from "../../../src/http/server.js";
import { defaultHttpServerLimits, probeConnectionLimits } from "../../support/http.js";

/** A broker as its management server sees it: one healthy leader replica, nothing else. */
const source: ManagementSource = {
  nodeId: 0,
  replicas: () => [
    { partitionId: 1, role: "leader", health: "healthy", term: 1, commitIndex: 1, appliedIndex: 1, leaderId: 0 },
  ],
  deadReason: () => null,
  logSizes: () => new Map(),
  bufferedMessages: () => new Map(),
  maxBufferedMessageBytes: 1024 ** 3,
  peerReachability: () => new Map(),
  closing: () => false,
  startingStep: () => null,
};

describe("the broker's management server", () => {
  const servers: HttpServer[] = [];
  afterAll(async () => await Promise.all(servers.map((server) => server.close())));

  it("says in its health why a replica is dead", async () => {
    const withDeadReplica: ManagementSource = {
      ...source,
      replicas: () => [...source.replicas(), inactiveReplicaReport(2, "dead")],
      deadReason: (partitionId) => (partitionId === 2 ? "ENOSPC: no space left on device, write" : null),
    };
    const { server, url } = await startManagementServer({
      host: "127.0.0.1",
      port: 0,
      source: withDeadReplica,
      metrics: createBrokerMetrics(withDeadReplica),
      logger: pino({ level: "silent" }),
      limits: defaultHttpServerLimits,
    });
    servers.push(server);
    const health = (await (await fetch(`${url}/actuator/health`)).json()) as {
      components: Record<string, { status: string; details: Record<string, unknown> }>;
    };
    expect(health.components["partition-2"]).toEqual({
      status: "DOWN",
      details: { role: "inactive", leaderId: null, term: 0, reason: "ENOSPC: no space left on device, write" },
    });
    expect(health.components["partition-1"]?.details).not.toHaveProperty("reason");
  });

  it("counts snapshot data that arrived damaged, by partition", async () => {
    const metrics = createBrokerMetrics(source);
    metrics.observeReceiptDamage({ partitionId: 3, chunks: 2, snapshots: 0 });
    metrics.observeReceiptDamage({ partitionId: 3, chunks: 1, snapshots: 1 });
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^flowplane_partition_snapshot_chunks_damaged_total\{[^}]*partition="3"[^}]*\} 3$/m);
    expect(text).toMatch(/^flowplane_partition_snapshots_rejected_total\{[^}]*partition="3"[^}]*\} 1$/m);
  });

  it("applies the connection limits and the request deadline of service.http", async () => {
    const { server, url } = await startManagementServer({
      host: "127.0.0.1",
      port: 0,
      source,
      metrics: createBrokerMetrics(source),
      logger: pino({ level: "silent" }),
      limits: { ...defaultHttpServerLimits, maxConnectionsPerAddress: 3, requestReceiveTimeoutMs: 2_000 },
    });
    servers.push(server);
    const probe = await probeConnectionLimits(url, {
      count: 10,
      otherClientPath: "/actuator/health/liveness",
      timeoutMs: 20_000,
    });
    expect(probe.otherClientStatus).toBe(200);
    expect(probe.unanswered).toBe(7);
    expect(probe.answered).toHaveLength(3);
    for (const answer of probe.answered) expect(answer).toMatch(/^HTTP\/1\.1 408 [\s\S]*request-timeout/);
  }, 30_000);

  it("says the broker is STARTING, and at which step, until it has started: neither healthy nor ready, but alive", async () => {
    let step: string | null = "opening partition replicas";
    let replicas: ReturnType<ManagementSource["replicas"]> = [];
    const starting: ManagementSource = {
      ...source,
      replicas: () => replicas,
      startingStep: () => step,
    };
    const { server, url } = await startManagementServer({
      host: "127.0.0.1",
      port: 0,
      source: starting,
      metrics: createBrokerMetrics(starting),
      logger: pino({ level: "silent" }),
      limits: defaultHttpServerLimits,
    });
    servers.push(server);
    const get = async (path: string) => {
      const response = await fetch(`${url}${path}`);
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    // No replica open yet: readiness must not count that as every partition having a leader.
    expect(await get("/actuator/health")).toEqual({
      status: 503,
      body: {
        status: "DOWN",
        components: { broker: { status: "DOWN", details: { state: "STARTING", step: "opening partition replicas" } } },
      },
    });
    expect(await get("/actuator/health/readiness")).toEqual({ status: 503, body: { status: "DOWN" } });
    expect(await get("/actuator/health/liveness")).toEqual({ status: 200, body: { status: "UP" } });
    // Its replicas lead already, but the start has not ended.
    replicas = source.replicas();
    expect((await get("/actuator/health")).status).toBe(503);
    expect((await get("/actuator/health/readiness")).status).toBe(503);
    step = null;
    expect(await get("/actuator/health")).toMatchObject({
      status: 200,
      body: { status: "UP", components: { broker: { status: "UP", details: { state: "RUNNING" } } } },
    });
    expect(await get("/actuator/health/readiness")).toEqual({ status: 200, body: { status: "UP" } });
  });
});
