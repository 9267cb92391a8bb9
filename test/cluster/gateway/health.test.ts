import { describe, expect, it } from "vitest";
import type { ReplicaReport } from "../../../src/cluster/broker/protocol.js";
import { gatewayHealth } from "../../../src/cluster/gateway/health.js";
import { assembleTopologyView } from "../../../src/cluster/gateway/topology-view.js";
import { type ClusterConfiguration, encodeConfiguration } from "../../../src/cluster/topology/index.js";
import { threeBrokerConfiguration } from "./fake-broker.js";

function viewWith(
  leaders: Record<number, number>,
  answering: number[],
  configuration: ClusterConfiguration = threeBrokerConfiguration(),
  dead: { brokerId: number; partitionId: number }[] = [],
) {
  return assembleTopologyView({
    descriptions: answering.map((nodeId) => ({
      nodeId,
      host: "127.0.0.1",
      port: 1 + nodeId,
      version: "1",
      configuration: encodeConfiguration(configuration),
      brokers: [],
      replicas: [1, 2, 3].map(
        (partitionId): ReplicaReport => ({
          partitionId,
          role: leaders[partitionId] === nodeId ? "leader" : "follower",
          health: dead.some((replica) => replica.brokerId === nodeId && replica.partitionId === partitionId)
            ? "dead"
            : "healthy",
          term: 1,
          commitIndex: 1,
          appliedIndex: 1,
          leaderId: leaders[partitionId] ?? null,
        }),
      ),
    })),
    previousAddresses: new Map(),
    askedAddresses: new Map(),
    previousVersions: new Map(),
    previousConfiguration: undefined,
    previousConfigurationTexts: new Map(),
    gatewayVersion: "1",
  });
}

describe("gatewayHealth", () => {
  it("is DOWN before any broker answered", () => {
    expect(gatewayHealth(undefined).status).toBe("DOWN");
  });

  it("is UP when every partition has a leader, even with a broker unreachable", () => {
    const health = gatewayHealth(viewWith({ 1: 0, 2: 1, 3: 0 }, [0, 1]));
    expect(health.status).toBe("UP");
    expect(health.components.brokers.details).toEqual({ reachable: [0, 1], unreachable: [2], deadReplicas: [] });
  });

  it("tells whether writes are paused, which decides neither health nor readiness", () => {
    const view = viewWith({ 1: 0, 2: 1, 3: 0 }, [0, 1, 2]);
    expect(gatewayHealth(view).components.writes).toEqual({ status: "UP", details: { paused: false } });
    const paused = gatewayHealth(view, true);
    expect(paused.status).toBe("UP");
    expect(paused.components.writes).toEqual({ status: "UP", details: { paused: true } });
    expect(gatewayHealth(undefined, true).components.writes.details.paused).toBe(true);
  });

  it("lists the replicas that failed while every partition still has a leader", () => {
    const health = gatewayHealth(
      viewWith({ 1: 1, 2: 1, 3: 2 }, [0, 1, 2], threeBrokerConfiguration(), [
        { brokerId: 0, partitionId: 1 },
        { brokerId: 0, partitionId: 3 },
      ]),
    );
    expect(health.status).toBe("UP");
    expect(health.components.brokers.details.deadReplicas).toEqual([
      { brokerId: 0, partitionId: 1 },
      { brokerId: 0, partitionId: 3 },
    ]);
  });

  it("is DOWN while a partition has no leader, naming it", () => {
    const health = gatewayHealth(viewWith({ 1: 0, 2: 1 }, [0, 1, 2]));
    expect(health.status).toBe("DOWN");
    expect(health.components.partitions.details).toEqual({
      partitions: [
        { partitionId: 1, leaderId: 0 },
        { partitionId: 2, leaderId: 1 },
        { partitionId: 3, leaderId: null },
      ],
    });
  });

  it("tells whether a scaling change runs and how many operations it has left, without changing the status", () => {
    const idle = gatewayHealth(viewWith({ 1: 0, 2: 1, 3: 0 }, [0, 1, 2]));
    expect(idle.components.clusterChange).toEqual({ status: "UP", details: { changeRunning: false } });
    const changing: ClusterConfiguration = {
      ...threeBrokerConfiguration(),
      pendingChange: {
        id: 7,
        status: "IN_PROGRESS",
        startedAt: "2026-11-25T00:00:00.000Z",
        completed: [],
        pending: [
          { operation: "BROKER_ADD", brokerId: 3 },
          { operation: "PARTITION_JOIN", brokerId: 3, partitionId: 1, priority: 1 },
        ],
      },
    };
    const updating = gatewayHealth(viewWith({ 1: 0, 2: 1, 3: 0 }, [0, 1, 2], changing));
    expect(updating.status).toBe("UP");
    expect(updating.components.clusterChange).toEqual({
      status: "UP",
      details: { changeRunning: true, changeId: 7, pendingOperations: 2 },
    });
  });
});
