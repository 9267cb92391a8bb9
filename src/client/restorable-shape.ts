/**
 * Whether a cluster configuration document (`GET /actuator/cluster`) describes a cluster that can be restored into:
 * one settled shape, which `flowplane restore --cluster-configuration` rebuilds and the platform checks before it
 * stops a cluster to restore it. Both read the same document the same way here, so the platform refuses up front
 * (409) every shape the brokers' restore would refuse once the cluster is stopped.
 *
 * A change that was cancelled halfway leaves its transitional states behind with no change pending (a broker
 * JOINING or LEAVING, a replica JOINING, LEAVING or BOOTSTRAPPING, routing still moving to a new partition count):
 * restoring into that shape would start brokers on a configuration no change will ever finish.
 */

/** The parts of a configuration document the check reads; the monitoring response and the codec's document fit it. */
export interface ConfigurationShape {
  readonly brokers: readonly {
    readonly id: number;
    readonly state: string;
    readonly partitions: readonly { readonly id: number; readonly state: string }[];
  }[];
  readonly pendingChange?: { readonly id: number } | undefined;
  readonly routing: object;
}

/** Longest list of ids quoted in a problem: a document may name many partitions. */
const MAX_QUOTED_IDS = 20;

function quotedIds(ids: readonly number[]): string {
  if (ids.length === 0) return "none";
  const shown = ids.slice(0, MAX_QUOTED_IDS).join(", ");
  return ids.length > MAX_QUOTED_IDS ? `${shown}, … (${ids.length} in all)` : shown;
}

function integerField(value: unknown, name: string): number | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const field = (value as Record<string, unknown>)[name];
  return Number.isSafeInteger(field) ? (field as number) : undefined;
}

function integerListField(value: unknown, name: string): readonly number[] | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const field = (value as Record<string, unknown>)[name];
  return Array.isArray(field) && field.every((item) => Number.isSafeInteger(item)) ? (field as number[]) : undefined;
}

/** What is wrong with the routing for a cluster of partitions 1..`partitionCount`, or undefined when it fits. */
function routingProblem(routing: object, partitionCount: number): string | undefined {
  const { requestHandling, messageCorrelation } = routing as Record<string, unknown>;
  const strategy =
    typeof requestHandling === "object" && requestHandling !== null
      ? (requestHandling as Record<string, unknown>).strategy
      : undefined;
  let requestPartitions: number | undefined;
  if (strategy === "AllPartitions") {
    requestPartitions = integerField(requestHandling, "partitionCount");
  } else if (strategy === "ActivePartitions") {
    const base = integerField(requestHandling, "basePartitionCount");
    const additional = integerListField(requestHandling, "additionalActivePartitions");
    const inactive = integerListField(requestHandling, "inactivePartitions");
    if (inactive !== undefined && inactive.length > 0) {
      return `the cluster configuration's partitions ${quotedIds(inactive)} take no requests yet (a partition scale-up did not finish)`;
    }
    if (base !== undefined && additional !== undefined) requestPartitions = base + additional.length;
  }
  if (requestPartitions === undefined) {
    return "the cluster configuration's routing does not say how many partitions take requests";
  }
  if (requestPartitions !== partitionCount) {
    return `the cluster configuration's routing sends requests to ${requestPartitions} partitions but it has ${partitionCount}`;
  }
  const correlationPartitions = integerField(messageCorrelation, "partitionCount");
  if (correlationPartitions !== partitionCount) {
    return `the cluster configuration's routing correlates messages over ${correlationPartitions ?? "no count of"} partitions but it has ${partitionCount}`;
  }
  return undefined;
}

/**
 * Why the cluster configuration `document` is no shape to restore into, or undefined when it is one: a change is
 * pending, a broker or a replica is not ACTIVE, the partitions are not 1..P, or the routing's partition counts are
 * not P. The reason names what is wrong ("broker 3 of the cluster configuration is JOINING").
 */
export function restorableShapeProblem(document: ConfigurationShape): string | undefined {
  if (document.pendingChange !== undefined) {
    return `the cluster configuration has change ${document.pendingChange.id} in progress; restore into a configuration no change runs in`;
  }
  const partitionIds = new Set<number>();
  for (const broker of document.brokers) {
    if (broker.state !== "ACTIVE") return `broker ${broker.id} of the cluster configuration is ${broker.state}`;
    for (const replica of broker.partitions) {
      if (replica.state !== "ACTIVE") {
        return `the replica of partition ${replica.id} on broker ${broker.id} is ${replica.state}`;
      }
      partitionIds.add(replica.id);
    }
  }
  const ascending = [...partitionIds].sort((left, right) => left - right);
  if (ascending.length === 0 || ascending.some((partitionId, index) => partitionId !== index + 1)) {
    return `the cluster configuration's partitions are ${quotedIds(ascending)}, not 1..P`;
  }
  return routingProblem(document.routing, ascending.length);
}
