import {
  createLocalJWKSet,
  createRemoteJWKSet,
  type FlattenedJWSInput,
  type JSONWebKeySet,
  type JWSHeaderParameters,
  type JWTVerifyGetKey,
  errors as joseErrors,
} from "jose";
import type { Clock } from "./clock.js";

/** Finds the public key for a token's header; what `jose.jwtVerify` takes as its key argument. */
export type KeySource = JWTVerifyGetKey;

/** Options of `remoteKeySource`. */
export interface RemoteKeySourceOptions {
  /** Longest wait for the key set (default 5 s). */
  timeoutMs?: number;
  /**
   * Shortest time between two fetches caused by unknown `kid`s (default 30 s), so a flood of tokens with made-up
   * key ids cannot turn into a flood of requests to the issuer.
   */
  cooldownMs?: number;
  /** How long a fetched key set is used before it is fetched again regardless (default 10 min). */
  maximumAgeMs?: number;
}

/**
 * Keys fetched from an issuer's JWKS URL (used by the gateway and any other process apart from the platform).
 * Concurrent lookups share one fetch; a token whose `kid` is not in the cached set triggers one refetch (unless
 * one happened within the cooldown) and is rejected if the key is still missing.
 */
export function remoteKeySource(jwksUrl: URL, options: RemoteKeySourceOptions = {}): KeySource {
  return createRemoteJWKSet(jwksUrl, {
    timeoutDuration: options.timeoutMs ?? 5_000,
    cooldownDuration: options.cooldownMs ?? 30_000,
    cacheMaxAge: options.maximumAgeMs ?? 600_000,
  });
}

/** Options of `localKeySource`. */
export interface LocalKeySourceOptions {
  /** The published key set; may return the same object until it changes (derived lookups are then reused). */
  keySet: () => Promise<JSONWebKeySet>;
  /** Re-reads the key set at its origin; called for an unknown `kid`, at most once per cooldown. */
  reload: () => Promise<JSONWebKeySet>;
  clock: Clock;
  /** Shortest time between two reloads caused by unknown `kid`s (default 5 s). */
  cooldownMs?: number;
}

/**
 * Keys read in-process (the platform verifying tokens it issued, without an HTTP round trip to itself). Behaves
 * like `remoteKeySource`: an unknown `kid` causes one reload (e.g. another replica rotated), rate limited.
 */
export function localKeySource(options: LocalKeySourceOptions): KeySource {
  const cooldownMs = options.cooldownMs ?? 5_000;
  let lastReloadMs = Number.NEGATIVE_INFINITY;
  let cachedSet: JSONWebKeySet | undefined;
  let cachedLookup: ReturnType<typeof createLocalJWKSet> | undefined;
  const lookupFor = (keySet: JSONWebKeySet) => {
    if (keySet !== cachedSet || cachedLookup === undefined) {
      cachedSet = keySet;
      cachedLookup = createLocalJWKSet(keySet);
    }
    return cachedLookup;
  };
  return async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    try {
      return await lookupFor(await options.keySet())(header, token);
    } catch (error) {
      const now = options.clock();
      if (!(error instanceof joseErrors.JWKSNoMatchingKey) || now - lastReloadMs < cooldownMs) throw error;
      lastReloadMs = now;
      return lookupFor(await options.reload())(header, token);
    }
  };
}
