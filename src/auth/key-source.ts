import {
  createLocalJWKSet,
  type FlattenedJWSInput,
  type JSONWebKeySet,
  type JWSHeaderParameters,
  type JWTVerifyGetKey,
  errors as joseErrors,
} from "jose";
import type { Logger } from "pino";
import { monotonicNowMs } from "../time/monotonic.js";
import type { Clock } from "./clock.js";
import { defaultClockSkewSeconds } from "./verifier.js";

/** Finds the public key for a token's header; what `jose.jwtVerify` takes as its key argument. */
export type KeySource = JWTVerifyGetKey;

/** Options of `remoteKeySource`. */
export interface RemoteKeySourceOptions {
  /** Longest wait for the key set (default 5 s). */
  timeoutMs?: number;
  /**
   * Shortest time between two fetches caused by unknown `kid`s or by a key set due while fetches fail (default
   * 30 s), so a flood of tokens with made-up key ids, or an issuer that is down, cannot turn into a flood of requests
   * to the issuer.
   */
  cooldownMs?: number;
  /** Age at which a fetched key set is fetched again, in the background while it is still used (default 10 min). */
  maximumAgeMs?: number;
  /**
   * How long after its fetch the last key set fetched is still used while fetching it again fails (default
   * `DEFAULT_MAXIMUM_STALE_MS`; never less than `maximumAgeMs`). Past it, every lookup needs a fetch that succeeds.
   */
  maximumStaleMs?: number;
  /** Where ages and cooldowns are measured (default the monotonic clock: they are durations). */
  clock?: Clock;
  /** Told of failed fetches and of tokens verified with a key set that could not be refreshed (rate limited). */
  logger?: Pick<Logger, "warn" | "info">;
  /** Told of every fetch's outcome (the gateway counts them in its metrics). */
  onFetch?: (outcome: "succeeded" | "failed") => void;
}

/**
 * How long the last key set fetched stays in use by default while the issuer cannot be reached: the default token
 * lifetime (`service.token.lifetimeSeconds`, 24 h) plus the verifier's clock skew. By then every token signed before
 * the last successful fetch has expired, so the old set only still serves tokens issued while this process could
 * not reach the issuer, and a key the issuer withdrew meanwhile is not honoured without end.
 */
export const DEFAULT_MAXIMUM_STALE_MS = (86_400 + defaultClockSkewSeconds) * 1000;

/**
 * Without any usable key set no token can be verified, so a failed fetch is tried again soon, but not for every
 * request: at most once per this interval.
 */
const RETRY_WITHOUT_KEYS_MS = 1_000;

/** Shortest time between two warnings about a key set that cannot be refreshed. */
const STALE_WARNING_INTERVAL_MS = 60_000;

/** What a remote key source knows of its key set, for health and metrics. */
export interface RemoteKeySetState {
  /** Time since the key set in use was fetched; undefined before the first successful fetch. */
  ageMs: number | undefined;
  /** Whether the latest fetch failed (a key set in use is then the last one fetched successfully). */
  lastFetchFailed: boolean;
}

/** A key source over an issuer's JWKS URL that also tells the state of its key set. */
export type RemoteKeySource = KeySource & { state(): RemoteKeySetState };

/** The issuer's keys could not be obtained: not the token's fault (the authentication hook answers 503). */
export class KeySetUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "KeySetUnavailableError";
  }
}

type LocalLookup = ReturnType<typeof createLocalJWKSet>;

/** Fetches a key set and prepares its lookup; anything but a 200 carrying a JWK set is a failure. */
async function fetchKeySet(url: string, timeoutMs: number): Promise<LocalLookup> {
  const response = await fetch(url, {
    redirect: "manual",
    signal: AbortSignal.timeout(timeoutMs),
    headers: { accept: "application/json, application/jwk-set+json" },
  });
  if (response.status !== 200) {
    await response.body?.cancel();
    throw new Error(`the key set's URL answered ${response.status}`);
  }
  return createLocalJWKSet((await response.json()) as JSONWebKeySet);
}

/** Why a fetch failed, in a few words (fetch's own message is only "fetch failed"). */
function failureReason(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.cause instanceof Error ? `${error.message}: ${error.cause.message}` : error.message;
}

/**
 * Keys fetched from an issuer's JWKS URL (used by the gateway and any other process apart from the platform).
 * Concurrent lookups share one fetch. A key set older than `maximumAgeMs` is fetched again in the background while
 * lookups go on with it; when that fetch fails, the last set fetched stays in use (up to `maximumStaleMs` after its
 * fetch) and the fetch is tried again at most once per cooldown, so an issuer that is down neither stops token
 * verification nor makes requests wait for it. A token whose `kid` is not in the set triggers one fetch (unless one
 * happened within the cooldown) and is rejected if the key is still missing; while fetches fail, such a token is
 * answered as "keys unavailable", since the key may be new. Every successful fetch replaces the set whole, so a key
 * the issuer withdrew stops verifying.
 */
export function remoteKeySource(jwksUrl: URL, options: RemoteKeySourceOptions = {}): RemoteKeySource {
  const url = jwksUrl.href;
  const timeoutMs = options.timeoutMs ?? 5_000;
  const cooldownMs = options.cooldownMs ?? 30_000;
  const maximumAgeMs = options.maximumAgeMs ?? 600_000;
  const maximumStaleMs = Math.max(options.maximumStaleMs ?? DEFAULT_MAXIMUM_STALE_MS, maximumAgeMs);
  const clock = options.clock ?? monotonicNowMs;
  let current: { lookup: LocalLookup; fetchedAtMs: number } | undefined;
  /** When the latest fetch started, successful or not. */
  let lastAttemptMs = Number.NEGATIVE_INFINITY;
  /** The latest fetch's error while it failed; undefined once a fetch succeeded. */
  let lastFailure: unknown;
  let pending: Promise<void> | undefined;
  let lastWarningMs = Number.NEGATIVE_INFINITY;

  const warn = (nowMs: number, message: string): void => {
    if (nowMs - lastWarningMs < STALE_WARNING_INTERVAL_MS) return;
    lastWarningMs = nowMs;
    const ageSeconds = current === undefined ? null : Math.floor((nowMs - current.fetchedAtMs) / 1000);
    options.logger?.warn({ jwksUrl: url, keySetAgeSeconds: ageSeconds, reason: failureReason(lastFailure) }, message);
  };

  const unavailable = (): KeySetUnavailableError =>
    new KeySetUnavailableError(`the issuer's key set could not be fetched from ${url}`, { cause: lastFailure });

  const refresh = (): Promise<void> => {
    if (pending === undefined) {
      lastAttemptMs = clock();
      pending = fetchKeySet(url, timeoutMs)
        .then(
          (lookup) => {
            const recovered = lastFailure !== undefined;
            current = { lookup, fetchedAtMs: clock() };
            lastFailure = undefined;
            options.onFetch?.("succeeded");
            if (recovered) options.logger?.info({ jwksUrl: url }, "fetched the issuer's key set again");
          },
          (error: unknown) => {
            lastFailure = error;
            options.onFetch?.("failed");
            warn(clock(), "could not fetch the issuer's key set");
            throw unavailable();
          },
        )
        .finally(() => {
          pending = undefined;
        });
    }
    return pending;
  };

  const getKey = async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    const nowMs = clock();
    if (current === undefined || nowMs - current.fetchedAtMs >= maximumStaleMs) {
      if (pending === undefined && lastFailure !== undefined && nowMs - lastAttemptMs < RETRY_WITHOUT_KEYS_MS) {
        throw unavailable();
      }
      await refresh();
    } else if (
      pending === undefined &&
      nowMs - current.fetchedAtMs >= maximumAgeMs &&
      nowMs - lastAttemptMs >= cooldownMs
    ) {
      // Due: fetched again in the background; until it arrives (or while fetches fail) the set in hand is used.
      refresh().catch(() => {});
    }
    const keys = current;
    if (keys === undefined) throw unavailable();
    if (lastFailure !== undefined)
      warn(nowMs, "verifying tokens with the last key set fetched: fetching it again fails");
    try {
      return await keys.lookup(header, token);
    } catch (error) {
      if (!(error instanceof joseErrors.JWKSNoMatchingKey)) throw error;
      if (pending === undefined && clock() - lastAttemptMs < cooldownMs) {
        // Only a set fetched successfully can say that a key does not exist.
        if (lastFailure !== undefined) throw unavailable();
        throw error;
      }
      await refresh();
      const refreshed = current;
      if (refreshed === undefined) throw unavailable();
      return await refreshed.lookup(header, token);
    }
  };

  return Object.assign(getKey, {
    state: (): RemoteKeySetState => ({
      ageMs: current === undefined ? undefined : clock() - current.fetchedAtMs,
      lastFetchFailed: lastFailure !== undefined,
    }),
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
