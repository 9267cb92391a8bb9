import { Type } from "typebox";
import { notFound } from "../../http/errors.js";

/** Addresses of a cluster's endpoints, as the clusters resource publishes them (`Cluster.links`). */
export interface ClusterLinks {
  /** Base URL of the cluster's gateway REST API. */
  gateway: string;
  /** Base URL of the cluster's management API. */
  management: string;
  /** Where the cluster's clients obtain tokens. */
  oauth: string;
}

/** What the resources under `/clusters/{clusterId}/…` know of one cluster. */
export interface ClusterSummary {
  id: string;
  /** Named in the connection details of the cluster's API clients. */
  links: ClusterLinks;
}

/**
 * What the resources under `/clusters/{clusterId}/…` need to know of clusters: whether the organization has one of
 * that id, and where it is reached. The clusters service answers it; tests inject an in-memory directory.
 */
export interface ClusterDirectory {
  /** The organization's cluster of that id, or undefined when there is none (or it belongs to another one). */
  find(organizationId: string, clusterId: string): Promise<ClusterSummary | undefined>;
  /** The ids of the organization's clusters, oldest first. */
  clusterIds(organizationId: string): Promise<string[]>;
}

/** A directory without clusters: every cluster route answers 404 until a real directory is wired in. */
export const emptyClusterDirectory: ClusterDirectory = {
  async find() {
    return undefined;
  },
  async clusterIds() {
    return [];
  },
};

/** Throws the 404 of a cluster the organization does not have; another organization's cluster is not told apart. */
export async function requireCluster(
  directory: ClusterDirectory,
  organizationId: string,
  clusterId: string,
): Promise<ClusterSummary> {
  const cluster = await directory.find(organizationId, clusterId);
  if (cluster === undefined) throw notFound("cluster", clusterId);
  return cluster;
}

/** Called after every change of a cluster's access policy, so that it can be delivered to the cluster's gateway. */
export type AccessPolicyChangedListener = (clusterId: string) => Promise<void>;

/** Path parameters of a route under `/clusters/{clusterId}`. */
export const clusterParameters = Type.Object(
  {
    clusterId: Type.String({
      minLength: 1,
      maxLength: 128,
      pattern: "^[A-Za-z0-9][A-Za-z0-9._-]*$",
      description: "Id of the cluster.",
    }),
  },
  { additionalProperties: false },
);
