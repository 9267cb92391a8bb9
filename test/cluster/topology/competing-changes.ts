/**
 * Two coordinators that each recorded a different change at the same version, and the first then began its
 * operation: the case where a merge's result depends on the configuration merged into, since the whole configuration
 * whose encoding sorts first wins. Shared by the tests of what skips a repeated configuration text.
 */
import {
  beginOperation,
  type ClusterConfiguration,
  encodeConfiguration,
  initialConfiguration,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";

/** The configurations of the case, checked to sort as it needs: own change < other change < own change begun. */
export function competingChanges(): {
  ownChange: ClusterConfiguration;
  otherChange: ClusterConfiguration;
  ownChangeBegun: ClusterConfiguration;
} {
  const base = initialConfiguration({
    clusterSize: 3,
    partitionCount: 3,
    replicationFactor: 2,
    distribution: roundRobinDistribution([0, 1, 2], 3, 2),
    nowIso: "2026-01-01T00:00:00.000Z",
  });
  const leave = (brokerId: number) => ({
    operation: "PARTITION_LEAVE" as const,
    brokerId,
    partitionId: [...(base.members.get(brokerId)?.partitions.keys() ?? [])][0] as number,
  });
  const ownChange = startChange(base, [leave(0)], "2026-01-02T00:00:00.000Z");
  const otherChange = startChange(base, [leave(1)], "2026-01-02T00:00:00.000Z");
  const ownChangeBegun = beginOperation(ownChange, "2026-01-02T00:00:01.000Z");
  if (
    !(encodeConfiguration(ownChange) < encodeConfiguration(otherChange)) ||
    !(encodeConfiguration(otherChange) < encodeConfiguration(ownChangeBegun))
  ) {
    throw new Error("the competing changes no longer sort as the tests need");
  }
  return { ownChange, otherChange, ownChangeBegun };
}
