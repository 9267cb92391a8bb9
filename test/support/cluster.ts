/**
 * What the end-to-end and chaos tests ask of a running cluster through its gateway: the topology, who leads a
 * partition, and the replicas' indexes from the gateway's metrics.
 */

/** The body of `GET /v2/topology`. */
export interface GatewayTopology {
  brokers: {
    nodeId: number;
    host: string;
    port: number;
    partitions: { partitionId: number; role: string; health: string }[];
  }[];
  clusterSize: number;
  partitionsCount: number;
  replicationFactor: number;
  lastCompletedChangeId: string;
}

/** The broker that the topology names as the one leader of `partitionId`; undefined when none or several do. */
export function leaderOf(topology: GatewayTopology, partitionId: number): number | undefined {
  const leaders = topology.brokers.filter((broker) =>
    broker.partitions.some((partition) => partition.partitionId === partitionId && partition.role === "leader"),
  );
  return leaders.length === 1 ? leaders[0]?.nodeId : undefined;
}

/** Whether every one of `partitionIds` has exactly one leader. */
export function everyPartitionLed(topology: GatewayTopology, partitionIds: readonly number[]): boolean {
  return partitionIds.every((partitionId) => leaderOf(topology, partitionId) !== undefined);
}

/** Whether every replica the topology lists is active and healthy. */
export function everyReplicaHealthy(topology: GatewayTopology): boolean {
  return topology.brokers.every((broker) =>
    broker.partitions.every((partition) => partition.health === "healthy" && partition.role !== "inactive"),
  );
}

/**
 * Per-replica values of `flowplane_partition_<metric>` from a gateway's management API, keyed `partition/broker`.
 */
export async function partitionIndexes(
  managementUrl: string,
  metric: "commit_index" | "applied_index",
): Promise<Map<string, number>> {
  const text = await (await fetch(`${managementUrl}/actuator/prometheus`)).text();
  const values = new Map<string, number>();
  const pattern = new RegExp(`^flowplane_partition_${metric}\\{partition="(\\d+)",broker="(\\d+)"\\} (\\d+)$`, "gm");
  for (const match of text.matchAll(pattern)) values.set(`${match[1]}/${match[2]}`, Number(match[3]));
  return values;
}

/** Polls `probe` every 100 ms until it returns a value; throws after `timeoutMs` with the last error it raised. */
export async function eventually<T>(
  description: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`${description} did not happen within ${timeoutMs} ms (last: ${String(last)})`);
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, 100));
  }
}
