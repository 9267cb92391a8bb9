import { Type } from "typebox";
import { notFound } from "../../http/errors.js";

/**
 * What the resources under `/clusters/{clusterId}/…` need to know of clusters: whether the organization has one of
 * that id. The clusters service answers it; tests inject an in-memory directory.
 */
export interface ClusterDirectory {
  /** The organization's cluster of that id, or undefined when there is none (or it belongs to another one). */
  find(organizationId: string, clusterId: string): Promise<{ id: string } | undefined>;
}

/** A directory without clusters: every cluster route answers 404 until a real directory is wired in. */
export const emptyClusterDirectory: ClusterDirectory = {
  async find() {
    return undefined;
  },
};

/** Throws the 404 of a cluster the organization does not have; another organization's cluster is not told apart. */
export async function requireCluster(
  directory: ClusterDirectory,
  organizationId: string,
  clusterId: string,
): Promise<void> {
  if ((await directory.find(organizationId, clusterId)) === undefined) throw notFound("cluster", clusterId);
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
