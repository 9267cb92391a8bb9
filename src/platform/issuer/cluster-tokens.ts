/**
 * Tokens the platform signs for itself to call one of its clusters' management APIs (taking and deleting backups):
 * gateway audience, scope `cluster`, bound to the cluster's organization and to the cluster by its `cluster` claim,
 * so the gateway's access policy accepts them for that cluster only. They are signed with the issuer's own signing
 * key, live a minute, and are never stored: no secret exists for a client that could leak.
 */
import { randomUUID } from "node:crypto";
import { type Clock, systemClock } from "../../auth/clock.js";
import { clusterScope } from "../../auth/scopes.js";
import type { TokenSource } from "../../client/api.js";
import type { AccessToken, TokenRequest } from "../../client/token-provider.js";
import type { SigningKeyService } from "./signing-keys.js";

/** The `sub` of the platform's own tokens, as the cluster's logs and activity see it. */
export const platformSubject = "platform";

/** How long a token the platform signs for itself is valid. */
export const platformTokenLifetimeSeconds = 60;

/** Options of `platformClusterTokens`. */
export interface PlatformClusterTokenOptions {
  signingKeys: Pick<SigningKeyService, "sign">;
  /** The issuer URL (`iss`), without a trailing slash. */
  issuerUrl: string;
  /** Audience of gateway tokens (configuration `audiences.gateway`). */
  gatewayAudience: string;
  clock?: Clock;
}

/** Signs a fresh token for one cluster's management API; see the module comment. */
export async function signPlatformClusterToken(
  options: PlatformClusterTokenOptions,
  organizationId: string,
  clusterId: string,
): Promise<AccessToken> {
  const clock = options.clock ?? systemClock;
  const issuedAtSeconds = Math.floor(clock() / 1000);
  const expiresAtSeconds = issuedAtSeconds + platformTokenLifetimeSeconds;
  const accessToken = await options.signingKeys.sign({
    iss: options.issuerUrl,
    sub: platformSubject,
    azp: platformSubject,
    aud: options.gatewayAudience,
    iat: issuedAtSeconds,
    exp: expiresAtSeconds,
    jti: randomUUID(),
    scope: clusterScope,
    org: organizationId,
    cluster: clusterId,
  });
  return {
    accessToken,
    tokenType: "Bearer",
    scope: clusterScope,
    audience: options.gatewayAudience,
    issuedAtMs: issuedAtSeconds * 1000,
    expiresAtMs: expiresAtSeconds * 1000,
    refreshAtMs: expiresAtSeconds * 1000,
    source: "network",
  };
}

/**
 * A token source for the API clients of `src/client` that signs a new token for the cluster at every call: the
 * calls are rare (a backup taken, listed or deleted), so caching would only keep a token alive for longer.
 */
export function platformClusterTokens(
  options: PlatformClusterTokenOptions,
  organizationId: string,
  clusterId: string,
): TokenSource {
  return {
    async getToken(_request?: TokenRequest) {
      return await signPlatformClusterToken(options, organizationId, clusterId);
    },
    async invalidate() {
      // Nothing is cached, so there is nothing to forget.
    },
  };
}
