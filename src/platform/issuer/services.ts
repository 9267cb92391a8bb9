import { type Clock, systemClock } from "../../auth/clock.js";
import { localKeySource } from "../../auth/key-source.js";
import { TokenVerifier } from "../../auth/verifier.js";
import type { Configuration } from "../../config/schema.js";
import type { Store } from "../store/database.js";
import { ClientSecretHasher } from "./client-secrets.js";
import { ClientService } from "./clients.js";
import { TokenRateLimiter } from "./rate-limit.js";
import { SigningKeyService } from "./signing-keys.js";
import { TokenService } from "./token-service.js";

/** Everything the token issuer needs at run time; `issuerRoutes` takes it as its options. */
export interface IssuerServices {
  clients: ClientService;
  signingKeys: SigningKeyService;
  rateLimiter: TokenRateLimiter;
  tokens: TokenService;
  /** The issuer URL (`iss`), without a trailing slash. */
  issuerUrl: string;
}

/** Options of `createIssuerServices`. */
export interface IssuerServicesOptions {
  store: Store;
  configuration: Configuration;
  /** Defaults to the wall clock. */
  clock?: Clock;
  /** Defaults to `issuerUrlFromConfiguration(configuration)`. */
  issuerUrl?: string;
  /** Lifetime of cached client records (default 5 s): how long a deleted client may still obtain tokens here. */
  clientCacheTtlMs?: number;
}

/** The issuer URL: `platform.publicUrl` when set, otherwise `http://localhost:<port>` (no trailing slash). */
export function issuerUrlFromConfiguration(configuration: Configuration, port = configuration.platform.port): string {
  const configured = configuration.platform.publicUrl.trim();
  return (configured === "" ? `http://localhost:${port}` : configured).replace(/\/+$/, "");
}

/** Builds the issuer's services over an open store: loads (or creates) the hash key and the signing key. */
export async function createIssuerServices(options: IssuerServicesOptions): Promise<IssuerServices> {
  const { store, configuration } = options;
  const clock = options.clock ?? systemClock;
  const issuerUrl = (options.issuerUrl ?? issuerUrlFromConfiguration(configuration)).replace(/\/+$/, "");
  const hasher = await ClientSecretHasher.open(store.database, store.secrets);
  const clients = new ClientService({
    database: store.database,
    hasher,
    clock,
    ...(options.clientCacheTtlMs === undefined ? {} : { cacheTtlMs: options.clientCacheTtlMs }),
  });
  const signingKeys = await SigningKeyService.open({
    database: store.database,
    secrets: store.secrets,
    algorithm: configuration.token.signingAlgorithm,
    tokenLifetimeSeconds: configuration.token.lifetimeSeconds,
    clock,
  });
  const rateLimiter = new TokenRateLimiter({ database: store.database, settings: configuration.rateLimit, clock });
  const tokens = new TokenService({
    clients,
    signingKeys,
    rateLimiter,
    clock,
    issuerUrl,
    audiences: configuration.audiences,
    tokenLifetimeSeconds: configuration.token.lifetimeSeconds,
  });
  return { clients, signingKeys, rateLimiter, tokens, issuerUrl };
}

/**
 * A verifier for tokens this platform issued, for one of its APIs (`audience`): it reads the signing keys in
 * process instead of fetching the platform's own JWKS over HTTP.
 */
export function createPlatformVerifier(
  services: Pick<IssuerServices, "signingKeys" | "issuerUrl">,
  audience: string,
  clock: Clock = systemClock,
): TokenVerifier {
  const { signingKeys } = services;
  return new TokenVerifier({
    keySource: localKeySource({
      keySet: () => signingKeys.publicKeySet(),
      reload: () => signingKeys.reloadPublicKeySet(),
      clock,
    }),
    issuer: services.issuerUrl,
    audience,
    clock,
  });
}
