import type { ClusterDirectory } from "../../../../src/platform/admin/cluster-directory.js";
import { clusterSummary } from "../cluster-access-support.js";

/** An in-memory cluster directory: `clusters` maps each cluster id to the id of the organization owning it. */
export function clusterDirectoryOf(clusters: Record<string, string>): ClusterDirectory {
  return {
    async find(organizationId, clusterId) {
      return Object.hasOwn(clusters, clusterId) && clusters[clusterId] === organizationId
        ? clusterSummary(clusterId)
        : undefined;
    },
    async clusterIds(organizationId) {
      return Object.keys(clusters).filter((clusterId) => clusters[clusterId] === organizationId);
    },
  };
}
