import type { Logger } from "pino";
import type { Clock } from "../../../auth/clock.js";
import { type ClusterClientPermission, clusterGatewayScope } from "../../../auth/scopes.js";
import { conflict, invalidRequest, notFound } from "../../../http/errors.js";
import type { ClientRecord, ClientService, RevokedClusterClient } from "../../issuer/clients.js";
import {
  type AccessPolicyChangedListener,
  type ClusterDirectory,
  type ClusterLinks,
  requireCluster,
} from "../cluster-directory.js";

/** A cluster API client as the list shows it. */
export interface ClusterClient {
  clientId: string;
  name: string;
  permissions: ClusterClientPermission[];
}

/** The answer to a creation: the only answer that ever carries the secret. */
export interface CreatedClusterClient {
  uuid: string;
  clientId: string;
  clientSecret: string;
  name: string;
  permissions: ClusterClientPermission[];
  /** The audience to request tokens for. */
  audience: string;
  links: ClusterLinks;
}

/** The environment variables a client application needs to reach the cluster (everything except the secret). */
export interface ClusterClientConnectionDetails {
  name: string;
  SERVICE_ADDRESS: string;
  SERVICE_CLIENT_ID: string;
  SERVICE_AUTHORIZATION_SERVER_URL: string;
  SERVICE_TOKEN_AUDIENCE: string;
}

/** Permissions a client gets when its creation names none: reaching the gateway is what cluster clients are for. */
export const defaultClusterClientPermissions: readonly ClusterClientPermission[] = [clusterGatewayScope];

/** Most clients one cluster may hold. */
export const maximumClientsPerCluster = 1_000;

/**
 * Most revoked clients one cluster's access policy lists (the policy document's bound). Reaching it takes that many
 * deletions of one cluster's clients within one token lifetime; beyond it the oldest revocations are left out.
 */
export const maximumRevokedClientsListed = 100_000;

/**
 * How much longer than the token lifetime a revocation is kept: a token may be issued a little after the deletion
 * (another platform replica's client cache) and verified a little after its expiry (the verifiers' clock skew).
 */
export const revocationMarginMs = 5 * 60_000;

/** Options of `ClusterClientService`. */
export interface ClusterClientServiceOptions {
  clients: ClientService;
  clusters: ClusterDirectory;
  /** The audience of cluster gateways (configuration `audiences.gateway`). */
  gatewayAudience: string;
  /** The issuer's token endpoint, where client applications request tokens. */
  tokenUrl: string;
  /** Lifetime of issued tokens (configuration `token.lifetimeSeconds`). */
  tokenLifetimeSeconds: number;
  clock: Clock;
  logger: Logger;
  /**
   * Called after a client of `clusterId` was deleted, so the cluster's access policy (which lists the revoked
   * clients) is rewritten and its gateway refuses the client's tokens.
   */
  onAccessPolicyChanged: AccessPolicyChangedListener;
}

function listed(client: ClientRecord): ClusterClient {
  return { clientId: client.clientId, name: client.name, permissions: client.cluster?.permissions ?? [] };
}

/** Creates, lists, describes and deletes the API clients of clusters. */
export class ClusterClientService {
  constructor(private readonly options: ClusterClientServiceOptions) {}

  /** The clients of an organization's cluster, oldest first; 404 for an unknown cluster. */
  async list(organizationId: string, clusterId: string): Promise<ClusterClient[]> {
    await this.cluster(organizationId, clusterId);
    return (await this.options.clients.listClusterClients(organizationId, clusterId)).map(listed);
  }

  /** Creates a client of the cluster; the answer holds its secret, which is never shown again. */
  async create(
    organizationId: string,
    clusterId: string,
    request: { clientName: string; permissions?: readonly ClusterClientPermission[] | undefined },
  ): Promise<CreatedClusterClient> {
    const cluster = await this.cluster(organizationId, clusterId);
    const created = await this.options.clients.createClusterClient({
      organizationId,
      clusterId: cluster.id,
      // Names that look alike are alike: the composed form is the one stored and compared.
      name: request.clientName.normalize("NFC"),
      permissions: request.permissions ?? defaultClusterClientPermissions,
      maximumClientsPerCluster,
    });
    if (created.outcome === "name-taken") {
      throw invalidRequest(
        `body/clientName is already taken: the cluster has a client of that name, and names are unique per cluster.`,
        { errors: [{ location: "body/clientName", message: "is already taken in this cluster" }] },
      );
    }
    if (created.outcome === "cluster-full") {
      throw conflict(
        `The cluster already holds ${maximumClientsPerCluster} clients, the most it may hold; delete one first.`,
      );
    }
    const { client, secret } = created;
    return {
      uuid: client.cluster?.uuid ?? "",
      clientId: client.clientId,
      clientSecret: secret,
      name: client.name,
      permissions: client.cluster?.permissions ?? [],
      audience: this.options.gatewayAudience,
      links: cluster.links,
    };
  }

  /** What a client application needs to connect as this client; 404 for an unknown cluster or client. */
  async connectionDetails(
    organizationId: string,
    clusterId: string,
    clientId: string,
  ): Promise<ClusterClientConnectionDetails> {
    const cluster = await this.cluster(organizationId, clusterId);
    const client = await this.options.clients.find(clientId);
    if (client === undefined || client.organizationId !== organizationId || client.cluster?.clusterId !== cluster.id) {
      throw notFound("client", clientId);
    }
    return {
      name: client.name,
      SERVICE_ADDRESS: cluster.links.gateway,
      SERVICE_CLIENT_ID: client.clientId,
      SERVICE_AUTHORIZATION_SERVER_URL: this.options.tokenUrl,
      SERVICE_TOKEN_AUDIENCE: this.options.gatewayAudience,
    };
  }

  /**
   * Deletes a client: the issuer refuses it at once, and the cluster's access policy lists it as revoked so the
   * gateway refuses the tokens it already holds. 404 for an unknown cluster or client.
   */
  async delete(organizationId: string, clusterId: string, clientId: string): Promise<void> {
    const cluster = await this.cluster(organizationId, clusterId);
    const deleted = await this.options.clients.deleteClusterClient(
      organizationId,
      cluster.id,
      clientId,
      this.options.clock() - this.revocationRetentionMs(),
    );
    if (!deleted) throw notFound("client", clientId);
    try {
      await this.options.onAccessPolicyChanged(cluster.id);
    } catch (error) {
      // The deletion stands and the issuer already refuses the client; only the gateway has not heard of it yet.
      // Failing the request would not undo the deletion, and a retry would answer 404, so the operator is told.
      this.options.logger.error(
        { clusterId: cluster.id, clientId, err: error },
        "a cluster client was deleted but the cluster's access policy could not be rewritten; the gateway " +
          "accepts the client's existing tokens until the policy is next written",
      );
    }
  }

  /**
   * Deletes every client of a cluster that is being deleted (its gateway goes with it, so nothing is revoked);
   * answers how many there were. The clusters resource calls it; no cluster lookup, since the cluster is going.
   */
  async deleteAllOfCluster(organizationId: string, clusterId: string): Promise<number> {
    return await this.options.clients.deleteAllClusterClients(organizationId, clusterId);
  }

  /**
   * The deleted clients whose tokens may still be unexpired, the cluster's own and its organization's, newest
   * deletion first: the `revokedClients` of its access policy.
   */
  async revokedClients(organizationId: string, clusterId: string): Promise<RevokedClusterClient[]> {
    return await this.options.clients.revokedClientsOfCluster(
      organizationId,
      clusterId,
      this.options.clock() - this.revocationRetentionMs(),
      maximumRevokedClientsListed,
    );
  }

  private revocationRetentionMs(): number {
    return this.options.tokenLifetimeSeconds * 1000 + revocationMarginMs;
  }

  private async cluster(organizationId: string, clusterId: string) {
    return await requireCluster(this.options.clusters, organizationId, clusterId);
  }
}
