/**
 * The cluster configuration in the vocabulary of spec/cluster-management.md, its first version, and the read-only
 * views the gateway's topology and the broker need. Values are immutable: every function returns a new value and
 * never changes its arguments.
 */
import { DistributionError, distributionProblems, type PartitionDistribution } from "./distribution.js";

/** State of a broker in the configuration. */
export type BrokerState = "ACTIVE" | "JOINING" | "LEAVING" | "LEFT";

/** State of one partition replica on a broker. */
export type PartitionState = "JOINING" | "ACTIVE" | "LEAVING" | "BOOTSTRAPPING";

/** State of one exporter of a partition replica. */
export type ExporterState = "ENABLED" | "DISABLED";

/** One exporter of a partition replica. */
export interface ExporterConfiguration {
  readonly id: string;
  readonly state: ExporterState;
}

/** Per-replica configuration (the `config` of a partition entry). */
export interface PartitionConfiguration {
  readonly exporting: { readonly exporters: readonly ExporterConfiguration[] };
}

/** One partition replica hosted by a broker. */
export interface PartitionReplica {
  readonly state: PartitionState;
  /** Election priority, an integer ≥ 1; the replica with the highest is the primary (preferred leader). */
  readonly priority: number;
  readonly config: PartitionConfiguration;
}

/** One broker's entry. Its `version` increases whenever this entry changes, independently of the cluster version. */
export interface MemberState {
  readonly state: BrokerState;
  readonly version: number;
  /** ISO 8601 time of the last change of this entry. */
  readonly lastUpdatedAt: string;
  /** Partition id → the replica this broker hosts. */
  readonly partitions: ReadonlyMap<number, PartitionReplica>;
}

/** Operation types a change plan consists of. */
export type OperationType =
  | "BROKER_ADD"
  | "BROKER_REMOVE"
  | "PARTITION_JOIN"
  | "PARTITION_LEAVE"
  | "PARTITION_RECONFIGURE_PRIORITY"
  | "PARTITION_FORCE_RECONFIGURE"
  | "START_PARTITION_SCALE_UP"
  | "PARTITION_BOOTSTRAP"
  | "AWAIT_REDISTRIBUTION"
  | "AWAIT_RELOCATION";

/** One operation of a change, applied by the broker it names (the spec's operation entry). */
export interface ClusterOperation {
  readonly operation: OperationType;
  readonly brokerId: number;
  readonly partitionId?: number;
  readonly priority?: number;
  readonly brokers?: readonly number[];
}

/** An applied operation of the pending change. */
export interface CompletedOperation extends ClusterOperation {
  readonly completedAt: string;
}

/** The change that ran last, with how it ended. */
export interface CompletedChange {
  readonly id: number;
  readonly status: "COMPLETED" | "CANCELLED" | "FAILED";
  readonly startedAt: string;
  readonly completedAt: string;
}

/** The change that is running: operations already applied (in order) and those still to apply (in order). */
export interface PendingChange {
  readonly id: number;
  readonly status: "IN_PROGRESS";
  /** Kept so that `lastChange.startedAt` can be recorded when the change ends. */
  readonly startedAt: string;
  readonly completed: readonly CompletedOperation[];
  readonly pending: readonly ClusterOperation[];
}

/** Which partitions take new requests. `ActivePartitions` is used while partitions are being added. */
export type RequestHandling =
  | { readonly strategy: "AllPartitions"; readonly partitionCount: number }
  | {
      readonly strategy: "ActivePartitions";
      readonly basePartitionCount: number;
      readonly additionalActivePartitions: readonly number[];
      readonly inactivePartitions: readonly number[];
    };

/** How requests and messages are routed to partitions; its `version` increases whenever it changes. */
export interface RoutingState {
  readonly version: number;
  readonly requestHandling: RequestHandling;
  readonly messageCorrelation: { readonly strategy: "HashMod"; readonly partitionCount: number };
}

/** The cluster configuration every broker keeps and spreads by gossip. */
export interface ClusterConfiguration {
  /** Starts at 1; starting a change and ending it each increase it. Higher wins in gossip. */
  readonly version: number;
  /** Broker id → its entry. */
  readonly members: ReadonlyMap<number, MemberState>;
  readonly lastChange: CompletedChange | null;
  /**
   * The changes that ended before `lastChange`, newest first, at most `MAX_EARLIER_CHANGES`: with it, the cluster's
   * recent history, which operators look at after the fact (what ran, when, how it ended).
   */
  readonly earlierChanges: readonly CompletedChange[];
  readonly pendingChange: PendingChange | null;
  readonly routing: RoutingState;
}

/** Input of `initialConfiguration`. */
export interface InitialConfigurationOptions {
  /** Brokers of the cluster; their ids are 0..clusterSize-1. */
  readonly clusterSize: number;
  readonly partitionCount: number;
  /** At most `clusterSize`; every partition gets exactly this many replicas. */
  readonly replicationFactor: number;
  /** From `roundRobinDistribution(ids, P, RF)` or `fixedDistribution(scheme)`. */
  readonly distribution: PartitionDistribution;
  /** The time to record as every member's `lastUpdatedAt` (ISO 8601); passed in because this module reads no clock. */
  readonly nowIso: string;
  /** Exporters every replica starts with, all ENABLED; none by default. */
  readonly exporterIds?: readonly string[];
}

/** Version of a configuration that no change has touched yet. */
export const INITIAL_CONFIGURATION_VERSION = 1;

/** Most ended changes kept besides `lastChange`: the configuration travels by gossip, so its history stays short. */
export const MAX_EARLIER_CHANGES = 9;

/** Version of a member entry that has not changed since the first start. */
export const INITIAL_MEMBER_VERSION = 0;

/** Whether `text` is an ISO 8601 timestamp as `Date.prototype.toISOString` writes it. */
export function isIsoTimestamp(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/.test(text)) return false;
  return !Number.isNaN(Date.parse(text));
}

/**
 * The configuration of a cluster's first start: version 1, brokers 0..clusterSize-1 all ACTIVE at member version 0,
 * every replica ACTIVE with its distributed priority, no change yet, and all partitions taking requests. Throws
 * `DistributionError` when the sizes or the distribution are invalid.
 */
export function initialConfiguration(options: InitialConfigurationOptions): ClusterConfiguration {
  const sizes = {
    clusterSize: options.clusterSize,
    partitionCount: options.partitionCount,
    replicationFactor: options.replicationFactor,
  };
  const problems = distributionProblems(options.distribution, sizes);
  if (!isIsoTimestamp(options.nowIso)) problems.push(`nowIso ${JSON.stringify(options.nowIso)} is not an ISO time`);
  if (problems.length > 0) throw new DistributionError(problems);

  const config: PartitionConfiguration = {
    exporting: { exporters: (options.exporterIds ?? []).map((id) => ({ id, state: "ENABLED" as const })) },
  };
  const partitionsByBroker = new Map<number, Map<number, PartitionReplica>>();
  for (let brokerId = 0; brokerId < options.clusterSize; brokerId += 1) partitionsByBroker.set(brokerId, new Map());
  const partitionIds = [...options.distribution.keys()].sort((left, right) => left - right);
  for (const partitionId of partitionIds) {
    for (const { brokerId, priority } of options.distribution.get(partitionId) ?? []) {
      partitionsByBroker.get(brokerId)?.set(partitionId, { state: "ACTIVE", priority, config });
    }
  }
  const members = new Map<number, MemberState>();
  for (const [brokerId, partitions] of partitionsByBroker) {
    members.set(brokerId, {
      state: "ACTIVE",
      version: INITIAL_MEMBER_VERSION,
      lastUpdatedAt: options.nowIso,
      partitions,
    });
  }
  return {
    version: INITIAL_CONFIGURATION_VERSION,
    members,
    lastChange: null,
    earlierChanges: [],
    pendingChange: null,
    routing: {
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount: options.partitionCount },
      messageCorrelation: { strategy: "HashMod", partitionCount: options.partitionCount },
    },
  };
}

/** One replica of a partition as seen from the partition. */
export interface ReplicaView {
  readonly brokerId: number;
  readonly priority: number;
  readonly state: PartitionState;
}

/** One partition as seen from the broker hosting it. */
export interface HostedPartitionView {
  readonly partitionId: number;
  readonly priority: number;
  readonly state: PartitionState;
}

function ascending(left: number, right: number): number {
  return left - right;
}

/** The replicas of `partitionId` (in any state), by ascending broker id; empty for an unknown partition. */
export function replicasOf(configuration: ClusterConfiguration, partitionId: number): readonly ReplicaView[] {
  const replicas: ReplicaView[] = [];
  for (const brokerId of [...configuration.members.keys()].sort(ascending)) {
    const replica = configuration.members.get(brokerId)?.partitions.get(partitionId);
    if (replica !== undefined) replicas.push({ brokerId, priority: replica.priority, state: replica.state });
  }
  return replicas;
}

/** The partitions `brokerId` hosts (in any state), by ascending partition id; empty for an unknown broker. */
export function partitionsOf(configuration: ClusterConfiguration, brokerId: number): readonly HostedPartitionView[] {
  const member = configuration.members.get(brokerId);
  if (member === undefined) return [];
  return [...member.partitions.keys()].sort(ascending).map((partitionId) => {
    const replica = member.partitions.get(partitionId)!;
    return { partitionId, priority: replica.priority, state: replica.state };
  });
}

/** Every partition id hosted by any broker, ascending. */
export function partitionIdsOf(configuration: ClusterConfiguration): readonly number[] {
  const ids = new Set<number>();
  for (const member of configuration.members.values())
    for (const partitionId of member.partitions.keys()) ids.add(partitionId);
  return [...ids].sort(ascending);
}

/** Broker ids of the configuration, ascending (including LEFT brokers that a running change has not dropped yet). */
export function brokerIdsOf(configuration: ClusterConfiguration): readonly number[] {
  return [...configuration.members.keys()].sort(ascending);
}

/** Number of brokers that have not LEFT: the topology's `clusterSize`. */
export function clusterSizeOf(configuration: ClusterConfiguration): number {
  let count = 0;
  for (const member of configuration.members.values()) if (member.state !== "LEFT") count += 1;
  return count;
}

/**
 * The cluster's replication factor: the smallest number of replicas (in any state) of any hosted partition;
 * 0 when no broker hosts a partition.
 */
export function replicationFactorOf(configuration: ClusterConfiguration): number {
  const counts = new Map<number, number>();
  for (const member of configuration.members.values()) {
    for (const partitionId of member.partitions.keys()) counts.set(partitionId, (counts.get(partitionId) ?? 0) + 1);
  }
  return counts.size === 0 ? 0 : Math.min(...counts.values());
}

/** Number of partitions taking requests, from the routing state: the topology's `partitionsCount`. */
export function partitionCountOf(configuration: ClusterConfiguration): number {
  const handling = configuration.routing.requestHandling;
  return handling.strategy === "AllPartitions"
    ? handling.partitionCount
    : handling.basePartitionCount + handling.additionalActivePartitions.length;
}

/**
 * Id of the last change that ended, as a decimal string, or "-1" when none has. A cancelled or failed change also
 * counts: it is the last change that is no longer running, which is what a client polling for its change id needs.
 */
export function lastCompletedChangeId(configuration: ClusterConfiguration): string {
  return configuration.lastChange === null ? "-1" : String(configuration.lastChange.id);
}
