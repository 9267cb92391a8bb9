import type { Logger } from "pino";
import { invalidToken } from "../../../auth/authenticate.js";
import type { Clock } from "../../../auth/clock.js";
import { type ScopeValue, scopeValues } from "../../../auth/scopes.js";
import type { Principal } from "../../../auth/verifier.js";
import { conflict, invalidRequest, notFound, ServiceError } from "../../../http/errors.js";
import type { ClientRecord, ClientService } from "../../issuer/clients.js";
import { revocationMarginMs } from "../cluster-clients/service.js";
import type { AccessPolicyChangedListener, ClusterDirectory } from "../cluster-directory.js";

/** Most organization clients one organization may hold. */
export const maximumClientsPerOrganization = 1_000;

/** An organization client as the Administration API lists it: never its secret. */
export interface OrganizationClient {
  clientId: string;
  name: string;
  /** Scope values its tokens may carry, in canonical order. */
  scopes: ScopeValue[];
  /** ISO-8601 instant of its creation. */
  created: string;
}

/** A client just created: the only answer that ever holds its secret. */
export interface CreatedOrganizationClient extends OrganizationClient {
  clientSecret: string;
}

/** Options of `OrganizationClientService`. */
export interface OrganizationClientServiceOptions {
  clients: ClientService;
  /** The organization's clusters, whose gateways must refuse the tokens of a deleted client. */
  clusters: ClusterDirectory;
  onAccessPolicyChanged: AccessPolicyChangedListener;
  /** Lifetime of access tokens: how long a deleted client's tokens may still be presented. */
  tokenLifetimeSeconds: number;
  clock: Clock;
  logger: Logger;
}

/**
 * The organization's API clients (not the clients of one cluster): list, create and delete. Managing them takes a
 * token holding every scope, since a client is a lasting credential: whoever may create one may grant any scope.
 * A deleted client's tokens are refused by the platform (at once by the replica that deleted it, within the lookup
 * cache's 5 s by others; see `ClientService.exists`) and by every gateway of the organization (the revocation goes
 * into each cluster's access policy).
 */
export class OrganizationClientService {
  constructor(private readonly options: OrganizationClientServiceOptions) {}

  /** The organization's clients, oldest first. */
  async list(caller: Principal): Promise<OrganizationClient[]> {
    requireEveryScope(caller, "list the organization's API clients");
    const clients = await this.options.clients.list(caller.organizationId);
    return clients.map(presentClient);
  }

  /** Creates a client of the caller's organization; the answer holds its secret, which is never shown again. */
  async create(
    caller: Principal,
    request: { name: string; scopes: readonly ScopeValue[] },
  ): Promise<CreatedOrganizationClient> {
    requireEveryScope(caller, "create an API client");
    const created = await this.options.clients.createOrganizationClient({
      organizationId: caller.organizationId,
      callerClientId: caller.clientId,
      // Names that look alike are alike: the composed form is the one stored and compared.
      name: request.name.normalize("NFC"),
      scopes: request.scopes,
      maximumClientsPerOrganization,
    });
    if (created.outcome === "caller-deleted") throw callerDeleted();
    if (created.outcome === "name-taken") {
      throw invalidRequest(
        "body/name is already taken: the organization has a client of that name, and names are unique.",
        { errors: [{ location: "body/name", message: "is already taken in this organization" }] },
      );
    }
    if (created.outcome === "organization-full") {
      throw conflict(
        `The organization already holds ${maximumClientsPerOrganization} API clients, the most it may hold; delete one first.`,
      );
    }
    return { ...presentClient(created.client), clientSecret: created.secret };
  }

  /**
   * Deletes a client of the caller's organization; 404 for an unknown one, 409 for the caller's own (an organization
   * could otherwise lose the last client able to manage it). Its tokens are refused from then on.
   */
  async delete(caller: Principal, clientId: string): Promise<void> {
    requireEveryScope(caller, "delete an API client");
    if (clientId === caller.clientId) {
      throw conflict(
        "A client cannot delete itself: sign in with another client holding every scope to delete this one.",
      );
    }
    const pruneBeforeMs = this.options.clock() - this.options.tokenLifetimeSeconds * 1000 - revocationMarginMs;
    const outcome = await this.options.clients.deleteOrganizationClient(
      caller.organizationId,
      clientId,
      caller.clientId,
      pruneBeforeMs,
    );
    if (outcome === "caller-deleted") throw callerDeleted();
    if (outcome === "not-found") throw notFound("client", clientId);
    for (const clusterId of await this.options.clusters.clusterIds(caller.organizationId)) {
      try {
        await this.options.onAccessPolicyChanged(clusterId);
      } catch (error) {
        // The deletion stands and the platform already refuses the client; one gateway has not heard of it yet.
        this.options.logger.error(
          { clusterId, clientId, err: error },
          "an organization client was deleted but a cluster's access policy could not be rewritten; that cluster's " +
            "gateway accepts the client's existing tokens until the policy is next written",
        );
      }
    }
  }
}

/**
 * The 401 for a caller whose client was deleted after its token was checked (the check reads a cache up to 5 s old;
 * managing clients reads the database itself, so a deleted client can neither delete another nor leave a successor).
 */
function callerDeleted(): ServiceError {
  return invalidToken("flowplane", "The client this token was issued to has been deleted.");
}

function presentClient(client: ClientRecord): OrganizationClient {
  return { clientId: client.clientId, name: client.name, scopes: client.scopes, created: client.createdAt };
}

/** Throws the 403 for a caller whose token lacks some scope: managing clients can grant every scope. */
function requireEveryScope(caller: Principal, what: string): void {
  const missing = scopeValues.filter((scope) => !caller.scopes.has(scope));
  if (missing.length === 0) return;
  throw new ServiceError(
    "forbidden",
    `To ${what}, a token must hold every scope (a client holding them all may grant any of them); this one lacks ${missing.join(", ")}.`,
    { extensions: { requiredScopes: [...scopeValues] } },
  );
}
