import { randomUUID } from "node:crypto";
import type {
  ClusterDirectory,
  ClusterSummary,
} from "../../../../src/platform/admin/cluster-clients/cluster-directory.js";

/** An in-memory cluster directory for tests: clusters are added by hand, each owned by one organization. */
export class MemoryClusterDirectory implements ClusterDirectory {
  private readonly clusters = new Map<string, { organizationId: string; summary: ClusterSummary }>();

  /** Adds a cluster of `organizationId` and answers it. */
  add(organizationId: string, name = "cluster"): ClusterSummary {
    const id = randomUUID();
    const summary: ClusterSummary = {
      id,
      name,
      links: {
        gateway: `http://gateway-${id}.test:8080`,
        management: `http://gateway-${id}.test:9600`,
        oauth: "http://issuer.test/oauth/token",
      },
    };
    this.clusters.set(id, { organizationId, summary });
    return summary;
  }

  async find(organizationId: string, clusterId: string): Promise<ClusterSummary | undefined> {
    const entry = this.clusters.get(clusterId);
    return entry?.organizationId === organizationId ? entry.summary : undefined;
  }
}
