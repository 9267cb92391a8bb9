/**
 * Builders and notations shared by the planner and change tests: configurations written the way the spec's test
 * vectors write them (broker: partition(priority)), and operations written compactly (`JOIN(1,P2,1)`).
 */
import type {
  ClusterConfiguration,
  ClusterOperation,
  MemberState,
  PartitionReplica,
} from "../../../src/cluster/topology/configuration.js";
import { type PartitionDistribution, roundRobinReplicas } from "../../../src/cluster/topology/distribution.js";

export const nowIso = "2026-11-21T10:15:00.123Z";
export const laterIso = "2026-11-21T10:16:00.000Z";

/** Broker id → (partition id → priority). */
export type Layout = Readonly<Record<number, Readonly<Record<number, number>>>>;

const exporters = { exporting: { exporters: [{ id: "records-file", state: "ENABLED" as const }] } };

/** A configuration at version 1 with every broker and replica ACTIVE, as in the spec's vectors. */
export function configurationOf(layout: Layout): ClusterConfiguration {
  const members = new Map<number, MemberState>();
  let partitionCount = 0;
  for (const brokerId of Object.keys(layout)
    .map(Number)
    .sort((left, right) => left - right)) {
    const partitions = new Map<number, PartitionReplica>();
    for (const [partitionId, priority] of Object.entries(layout[brokerId]!)
      .map(([id, priority]) => [Number(id), priority] as const)
      .sort(([left], [right]) => left - right)) {
      partitions.set(partitionId, { state: "ACTIVE", priority, config: exporters });
      partitionCount = Math.max(partitionCount, partitionId);
    }
    members.set(brokerId, { state: "ACTIVE", version: 0, lastUpdatedAt: nowIso, partitions });
  }
  return {
    version: 1,
    members,
    lastChange: null,
    earlierChanges: [],
    pendingChange: null,
    routing: {
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount: Math.max(partitionCount, 1) },
      messageCorrelation: { strategy: "HashMod", partitionCount: Math.max(partitionCount, 1) },
    },
  };
}

/** The layout of a distribution over `memberIds` (members without replicas included). */
export function layoutOf(memberIds: readonly number[], distribution: PartitionDistribution): Layout {
  const layout: Record<number, Record<number, number>> = {};
  for (const brokerId of memberIds) layout[brokerId] = {};
  for (const [partitionId, replicas] of distribution) {
    for (const { brokerId, priority } of replicas) layout[brokerId]![partitionId] = priority;
  }
  return layout;
}

/** A configuration whose partitions 1..P are placed by round robin over `memberIds` (any ids, any count). */
export function roundRobinConfiguration(
  memberIds: readonly number[],
  partitionCount: number,
  replicationFactor: number,
): ClusterConfiguration {
  const sorted = [...memberIds].sort((left, right) => left - right);
  const distribution = new Map(
    Array.from({ length: partitionCount }, (_, index) => [
      index + 1,
      roundRobinReplicas(sorted, index + 1, replicationFactor),
    ]),
  );
  return configurationOf(layoutOf(sorted, distribution));
}

/** The layout of a configuration (state ignored), for comparing placements. */
export function layoutOfConfiguration(configuration: ClusterConfiguration): Layout {
  const layout: Record<number, Record<number, number>> = {};
  for (const [brokerId, member] of configuration.members) {
    layout[brokerId] = Object.fromEntries([...member.partitions].map(([id, replica]) => [id, replica.priority]));
  }
  return layout;
}

/** One operation in the compact notation of the spec's vectors. */
export function notation(operation: ClusterOperation): string {
  const { brokerId, partitionId, priority, brokers } = operation;
  switch (operation.operation) {
    case "BROKER_ADD":
      return `BROKER_ADD ${brokerId}`;
    case "BROKER_REMOVE":
      return brokers === undefined ? `BROKER_REMOVE ${brokerId}` : `BROKER_REMOVE(${brokerId},[${brokers.join(",")}])`;
    case "PARTITION_JOIN":
      return `JOIN(${brokerId},P${partitionId},${priority})`;
    case "PARTITION_LEAVE":
      return `LEAVE(${brokerId},P${partitionId})`;
    case "PARTITION_RECONFIGURE_PRIORITY":
      return `RECONF(${brokerId},P${partitionId},${priority})`;
    case "PARTITION_FORCE_RECONFIGURE":
      return `FORCE_RECONFIGURE(${brokerId},P${partitionId},[${brokers!.join(",")}])`;
    case "START_PARTITION_SCALE_UP":
      return `START_PARTITION_SCALE_UP(${brokerId})`;
    case "PARTITION_BOOTSTRAP":
      return `PARTITION_BOOTSTRAP(${brokerId},P${partitionId},${priority})`;
    case "AWAIT_REDISTRIBUTION":
      return `AWAIT_REDISTRIBUTION(${brokerId})`;
    case "AWAIT_RELOCATION":
      return `AWAIT_RELOCATION(${brokerId})`;
  }
}

/** A plan in the compact notation. */
export function notations(operations: readonly ClusterOperation[]): string[] {
  return operations.map(notation);
}
