/**
 * The cluster secret of tests that run brokers, gateways or transports in process: a fixed value, so that every part
 * a test starts belongs to one cluster, and a second one for the parts that must not.
 */
import { ClusterCredentials } from "../../src/cluster/transport/index.js";

/** The secret every test cluster uses (base64 of 32 random bytes). */
export const TEST_CLUSTER_SECRET = "W3DhKAHnr+qXiy+1355fcdAts/swfWMSk1BSg+JjqH4=";

/** Another valid secret: a part holding it is not a member of the test cluster. */
export const OTHER_CLUSTER_SECRET = "ymWY+ogU91eq23KSuwhpZsvQeTrOaM9DWbUshCboZTE=";

/** Credentials of the test cluster (id derived from the secret unless `clusterId` names one). */
export function testClusterCredentials(clusterId?: string): ClusterCredentials {
  return ClusterCredentials.fromSecret(Buffer.from(TEST_CLUSTER_SECRET, "base64"), clusterId);
}

/** Credentials of another cluster (another secret, so another derived id). */
export function otherClusterCredentials(clusterId?: string): ClusterCredentials {
  return ClusterCredentials.fromSecret(Buffer.from(OTHER_CLUSTER_SECRET, "base64"), clusterId);
}
