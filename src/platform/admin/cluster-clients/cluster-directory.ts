/** Addresses of a cluster's endpoints, as the clusters resource publishes them. */
export interface ClusterLinks {
  /** Base URL of the cluster's gateway REST API. */
  gateway: string;
  /** Base URL of the cluster's management API. */
  management: string;
  /** Where the cluster's clients obtain tokens. */
  oauth: string;
}

/** What the cluster API clients need to know about one cluster. */
export interface ClusterSummary {
  id: string;
  name: string;
  links: ClusterLinks;
}

/**
 * Looks up clusters for the cluster API clients. The clusters resource owns clusters; this narrow view lets the
 * clients resource answer 404 for an unknown cluster (or one of another organization) and name its addresses.
 */
export interface ClusterDirectory {
  /** The organization's cluster with this id, or undefined when there is none. */
  find(organizationId: string, clusterId: string): Promise<ClusterSummary | undefined>;
}

/** A directory that knows no cluster: until clusters exist, every cluster API client route answers 404. */
export const noClusters: ClusterDirectory = {
  async find() {
    return undefined;
  },
};
