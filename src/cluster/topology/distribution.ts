/**
 * Where partition replicas live at first start: the round-robin distribution of spec/cluster-management.md, or a
 * FIXED scheme from `service.broker.experimental.partitioning`, validated. Pure functions.
 */

/** Highest partition id a cluster can have (keys carry partition ids in 13 bits). */
export const MAX_PARTITION_COUNT = 8191;

/**
 * Most replicas (partition count × replication factor) a change may give a cluster. The coordinator plans, simulates
 * and answers a change on its own thread, and every broker and gateway encodes and decodes the whole configuration
 * with each exchange of it, all in time and memory growing with the replicas: the limits of brokers, partitions and
 * replication factor alone allow 8.4 million. The bound holds the most partitions at the usual replication factor of 3
 * (DEVELOPERS.md, "What an attack from outside found", has the costs measured).
 */
export const MAX_REPLICA_COUNT = 3 * MAX_PARTITION_COUNT;

/**
 * Highest broker id a cluster can have, as a broker's configuration allows (`service.broker.cluster.nodeId`); a change
 * naming a higher one could never complete, since no broker can have its id. So a cluster has at most 1024 brokers.
 */
export const MAX_BROKER_ID = 1023;

/** One replica of a partition: the broker that hosts it and its election priority (≥ 1; highest is primary). */
export interface ReplicaAssignment {
  readonly brokerId: number;
  readonly priority: number;
}

/** Partition id → its replicas. Partition ids are 1..P; replicas are listed primary first for round robin. */
export type PartitionDistribution = ReadonlyMap<number, readonly ReplicaAssignment[]>;

/** The sizes a distribution is checked against. */
export interface DistributionSizes {
  /** Brokers in the cluster; their ids are 0..clusterSize-1. */
  readonly clusterSize: number;
  readonly partitionCount: number;
  readonly replicationFactor: number;
}

/** A FIXED partitioning scheme: every partition with its replicas, as configured. */
export interface FixedPartitioningScheme extends DistributionSizes {
  readonly partitions: readonly {
    readonly partitionId: number;
    readonly brokers: readonly ReplicaAssignment[];
  }[];
}

/** Thrown when a distribution or its sizes are invalid; `problems` name each partition or broker that is wrong. */
export class DistributionError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid partition distribution: ${problems.join("; ")}`);
    this.name = "DistributionError";
  }
}

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isPositiveInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 1;
}

/** Problems with the sizes themselves; empty when cluster size, partition count and replication factor fit. */
export function sizeProblems(sizes: DistributionSizes): string[] {
  const problems: string[] = [];
  if (!isPositiveInteger(sizes.clusterSize)) {
    problems.push(`cluster size must be a positive integer, got ${sizes.clusterSize}`);
  }
  if (!isPositiveInteger(sizes.partitionCount) || sizes.partitionCount > MAX_PARTITION_COUNT) {
    problems.push(`partition count must be an integer in 1..${MAX_PARTITION_COUNT}, got ${sizes.partitionCount}`);
  }
  if (!isPositiveInteger(sizes.replicationFactor)) {
    problems.push(`replication factor must be a positive integer, got ${sizes.replicationFactor}`);
  } else if (isPositiveInteger(sizes.clusterSize) && sizes.replicationFactor > sizes.clusterSize) {
    problems.push(`replication factor ${sizes.replicationFactor} is larger than the cluster size ${sizes.clusterSize}`);
  }
  const tooManyReplicas = replicaCountProblem(sizes.partitionCount, sizes.replicationFactor);
  if (tooManyReplicas !== undefined) problems.push(tooManyReplicas);
  return problems;
}

/**
 * Why a cluster of `partitionCount` partitions at `replicationFactor` holds too many replicas (over
 * MAX_REPLICA_COUNT), or undefined when it does not; counts that are themselves invalid are left to their own checks.
 */
export function replicaCountProblem(partitionCount: unknown, replicationFactor: unknown): string | undefined {
  if (!isPositiveInteger(partitionCount) || partitionCount > MAX_PARTITION_COUNT) return undefined;
  if (!isPositiveInteger(replicationFactor)) return undefined;
  const replicaCount = partitionCount * replicationFactor;
  if (replicaCount <= MAX_REPLICA_COUNT) return undefined;
  return `the cluster would hold ${replicaCount} replicas (${partitionCount} partitions × replication factor ${replicationFactor}), over the maximum ${MAX_REPLICA_COUNT}`;
}

/**
 * Round-robin distribution exactly as spec/cluster-management.md defines it: sort the ids numerically into `s`,
 * `n = |s|`, `k = min(RF, n)`; partition `p` (i = p − 1) gets replicas `s[(i + j) mod n]` for j = 0..k−1. The first
 * (primary) gets priority RF; the others, in that order, get RF−1, RF−2, … when floor(i / n) is even and 1, 2, …
 * when it is odd. Replicas are listed in that order, primary first.
 */
export function roundRobinDistribution(
  memberIds: readonly number[],
  partitionCount: number,
  replicationFactor: number,
): PartitionDistribution {
  const problems: string[] = [];
  if (memberIds.length === 0) problems.push("at least one broker is needed");
  for (const id of memberIds) {
    if (!isNonNegativeInteger(id)) problems.push(`broker id ${id} is not a non-negative integer`);
  }
  if (new Set(memberIds).size !== memberIds.length) problems.push(`broker ids are not distinct: ${memberIds}`);
  if (!isPositiveInteger(partitionCount) || partitionCount > MAX_PARTITION_COUNT) {
    problems.push(`partition count must be an integer in 1..${MAX_PARTITION_COUNT}, got ${partitionCount}`);
  }
  if (!isPositiveInteger(replicationFactor)) {
    problems.push(`replication factor must be a positive integer, got ${replicationFactor}`);
  }
  if (problems.length > 0) throw new DistributionError(problems);

  const sorted = [...memberIds].sort((left, right) => left - right);
  const distribution = new Map<number, readonly ReplicaAssignment[]>();
  for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
    distribution.set(partitionId, roundRobinReplicas(sorted, partitionId, replicationFactor));
  }
  return distribution;
}

/**
 * The round-robin replicas of one partition, primary first, without validating anything: `sortedMemberIds` must be
 * distinct, ascending and non-empty, `partitionId` ≥ 1 and `replicationFactor` ≥ 1. A partition's replicas depend
 * only on its own id, the members and RF, never on the partition count, so the planner uses this to compute the
 * target of any partition (including counts over MAX_PARTITION_COUNT in benchmarks) without building a whole map.
 */
export function roundRobinReplicas(
  sortedMemberIds: readonly number[],
  partitionId: number,
  replicationFactor: number,
): ReplicaAssignment[] {
  const brokerCount = sortedMemberIds.length;
  const replicaCount = Math.min(replicationFactor, brokerCount);
  const offset = partitionId - 1;
  const ascending = Math.floor(offset / brokerCount) % 2 === 1;
  const replicas: ReplicaAssignment[] = [];
  for (let position = 0; position < replicaCount; position += 1) {
    const brokerId = sortedMemberIds[(offset + position) % brokerCount]!;
    // The primary (position 0) always gets RF; the others count down from RF-1 or up from 1.
    const priority = position === 0 ? replicationFactor : ascending ? position : replicationFactor - position;
    replicas.push({ brokerId, priority });
  }
  return replicas;
}

/**
 * Problems with `distribution` for a first start with `sizes`; empty when it is valid. Valid means: every partition
 * 1..P present exactly once, each with exactly RF replicas on distinct brokers with ids 0..clusterSize-1, and
 * distinct integer priorities ≥ 1 within each partition.
 */
export function distributionProblems(distribution: PartitionDistribution, sizes: DistributionSizes): string[] {
  const problems = sizeProblems(sizes);
  if (problems.length > 0) return problems;
  for (const [partitionId, replicas] of distribution) {
    if (!isPositiveInteger(partitionId) || partitionId > sizes.partitionCount) {
      problems.push(`partition ${partitionId} is outside 1..${sizes.partitionCount}`);
      continue;
    }
    problems.push(...replicaProblems(partitionId, replicas, sizes));
  }
  for (let partitionId = 1; partitionId <= sizes.partitionCount; partitionId += 1) {
    if (!distribution.has(partitionId)) problems.push(`partition ${partitionId} has no replicas assigned`);
  }
  return problems;
}

function replicaProblems(
  partitionId: number,
  replicas: readonly ReplicaAssignment[],
  sizes: DistributionSizes,
): string[] {
  const problems: string[] = [];
  if (replicas.length !== sizes.replicationFactor) {
    problems.push(
      `partition ${partitionId} has ${replicas.length} replicas, but the replication factor is ${sizes.replicationFactor}`,
    );
  }
  const brokers = new Set<number>();
  const priorities = new Set<number>();
  for (const { brokerId, priority } of replicas) {
    if (!isNonNegativeInteger(brokerId) || brokerId >= sizes.clusterSize) {
      problems.push(`partition ${partitionId}: broker ${brokerId} is outside 0..${sizes.clusterSize - 1}`);
    } else if (brokers.has(brokerId)) {
      problems.push(`partition ${partitionId}: broker ${brokerId} is listed more than once`);
    }
    brokers.add(brokerId);
    if (!isPositiveInteger(priority)) {
      problems.push(
        `partition ${partitionId}: broker ${brokerId} has priority ${priority}, which is not an integer ≥ 1`,
      );
    } else if (priorities.has(priority)) {
      problems.push(`partition ${partitionId}: priority ${priority} is used by more than one replica`);
    }
    priorities.add(priority);
  }
  return problems;
}

/**
 * Validates a FIXED partitioning scheme and returns its distribution (replicas in the order configured). Throws
 * `DistributionError` listing every problem, each naming the partition or broker that is wrong.
 */
export function fixedDistribution(scheme: FixedPartitioningScheme): PartitionDistribution {
  const problems: string[] = [];
  const distribution = new Map<number, readonly ReplicaAssignment[]>();
  for (const { partitionId, brokers } of scheme.partitions) {
    if (distribution.has(partitionId)) {
      problems.push(`partition ${partitionId} is listed more than once`);
      continue;
    }
    distribution.set(
      partitionId,
      brokers.map(({ brokerId, priority }) => ({ brokerId, priority })),
    );
  }
  problems.push(...distributionProblems(distribution, scheme));
  if (problems.length > 0) throw new DistributionError(problems);
  return distribution;
}
