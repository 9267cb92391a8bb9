import { decodeJwt } from "jose";
import { maxProblemDetailCharacters, OAuthClientError, truncatedText } from "./errors.js";
import {
  type Clock,
  type HttpOptions,
  type HttpResponse,
  headerValue,
  parseJsonBody,
  sendWithRetry,
  systemClock,
} from "./http.js";
import {
  type CachedToken,
  secretDigest,
  TokenCacheFile,
  type TokenCacheKey,
  tokenCacheKeyString,
} from "./token-cache.js";

/** Where and as whom to ask for tokens (the `SERVICE_*` client variables of the identity specification). */
export interface ClientCredentials {
  /** The token endpoint, e.g. `http://localhost:8088/oauth/token`. */
  oauthUrl: string;
  clientId: string;
  clientSecret: string;
}

/** Options of a `TokenProvider`. */
export interface TokenProviderOptions {
  credentials: ClientCredentials;
  /** Audience used when a call names none. */
  defaultAudience?: string | undefined;
  /** The on-disk cache, or the path of its file; no disk cache when absent. */
  cacheFile?: string | TokenCacheFile | undefined;
  /** Transport, retry policy and clock. */
  http?: HttpOptions | undefined;
  /** Largest margin before `exp` at which a token is replaced (default 60 s). */
  refreshMarginMs?: number | undefined;
  /** Fraction of the lifetime used as margin when that is smaller than `refreshMarginMs` (default 0.1). */
  refreshFraction?: number | undefined;
}

/** What a caller asks a token for. */
export interface TokenRequest {
  /** The API the token is for; the provider's default audience when absent. */
  audience?: string | undefined;
  /** Space-separated scopes to narrow the grant to; the client's full grant when absent. */
  scope?: string | undefined;
}

/** An access token with where it came from. */
export interface AccessToken extends CachedToken {
  /** `memory` or `disk` when reused from a cache, `network` when just issued. */
  source: "memory" | "disk" | "network";
}

/** The default bound of a token endpoint's answer: a token and a few fields take a few KiB at most. */
export const defaultMaxTokenResponseBytes = 64 * 1024;

const defaultRefreshMarginMs = 60_000;

/** Longest a token is kept, whatever its answer says: the platform issues tokens of minutes, never of days. */
export const maxCachedLifetimeMs = 24 * 60 * 60 * 1000;
const defaultRefreshFraction = 0.1;

/**
 * What a token endpoint's answer without an OAuth error says. A redirect is not followed (the client secret would go
 * with it), so its `Location` is named: a proxy sending http to https, or an endpoint moved, answers this way.
 */
function tokenEndpointStatusText(response: HttpResponse): string {
  const location = response.status >= 300 && response.status < 400 ? headerValue(response, "location") : undefined;
  return location === undefined
    ? `the token endpoint answered HTTP ${response.status}`
    : `the token endpoint answered HTTP ${response.status}, redirecting to ${location.slice(0, 500)}; point ` +
        "SERVICE_OAUTH_URL there";
}

/**
 * Obtains access tokens with the client-credentials grant and reuses them until shortly before they expire.
 * Tokens are cached in memory and optionally in a file; concurrent callers asking for the same token share one
 * request to the token endpoint. Tokens are never logged.
 */
export class TokenProvider {
  private readonly credentials: ClientCredentials;
  private readonly secretDigest: string;
  private readonly defaultAudience: string | undefined;
  private readonly cacheFile: TokenCacheFile | undefined;
  private readonly http: HttpOptions;
  private readonly clock: Clock;
  private readonly refreshMarginMs: number;
  private readonly refreshFraction: number;
  private readonly memory = new Map<string, CachedToken>();
  private readonly inFlight = new Map<string, Promise<AccessToken>>();
  private requestsSent = 0;

  /** Creates a provider for one client; nothing is requested until the first `getToken`. */
  constructor(options: TokenProviderOptions) {
    this.credentials = options.credentials;
    this.secretDigest = secretDigest(options.credentials.clientSecret);
    this.defaultAudience = options.defaultAudience;
    this.cacheFile = typeof options.cacheFile === "string" ? new TokenCacheFile(options.cacheFile) : options.cacheFile;
    this.http = {
      ...options.http,
      maxResponseBytes: options.http?.maxResponseBytes ?? defaultMaxTokenResponseBytes,
    };
    this.clock = options.http?.clock ?? systemClock;
    this.refreshMarginMs = options.refreshMarginMs ?? defaultRefreshMarginMs;
    this.refreshFraction = options.refreshFraction ?? defaultRefreshFraction;
  }

  /** How many token requests this provider has made (a request retried after 429/503 counts once). */
  get tokenRequestCount(): number {
    return this.requestsSent;
  }

  private keyFor(request: TokenRequest): TokenCacheKey {
    const audience = request.audience ?? this.defaultAudience;
    if (audience === undefined || audience === "") {
      throw new Error("TokenProvider: no audience given and no default audience configured");
    }
    return {
      oauthUrl: this.credentials.oauthUrl,
      clientId: this.credentials.clientId,
      secretDigest: this.secretDigest,
      audience,
      scope: request.scope ?? "",
    };
  }

  /**
   * Returns a token for `request`: from memory or disk while it is fresh, otherwise a new one from the token
   * endpoint. Throws `OAuthClientError` when the endpoint refuses, `ClientConnectionError` when it cannot be reached.
   */
  async getToken(request: TokenRequest = {}): Promise<AccessToken> {
    const key = this.keyFor(request);
    const name = tokenCacheKeyString(key);
    const cached = this.memory.get(name);
    if (cached !== undefined && this.clock.now() < cached.refreshAtMs) return { ...cached, source: "memory" };
    const pending = this.inFlight.get(name);
    if (pending !== undefined) return pending;
    const obtaining = this.obtain(key, name).finally(() => this.inFlight.delete(name));
    this.inFlight.set(name, obtaining);
    return obtaining;
  }

  /** Forgets the cached token for `request` (memory and disk), e.g. after an API refused it. */
  async invalidate(request: TokenRequest = {}): Promise<void> {
    const key = this.keyFor(request);
    this.memory.delete(tokenCacheKeyString(key));
    await this.cacheFile?.remove(key).catch(() => undefined);
  }

  private async obtain(key: TokenCacheKey, name: string): Promise<AccessToken> {
    if (this.cacheFile !== undefined) {
      const stored = await this.cacheFile.read(key, this.clock.now());
      if (stored !== undefined && this.clock.now() < stored.refreshAtMs) {
        this.memory.set(name, stored);
        return { ...stored, source: "disk" };
      }
    }
    const token = await this.requestToken(key);
    this.memory.set(name, token);
    // A cache file that cannot be written must not fail the caller, who has a valid token in hand.
    await this.cacheFile?.write(key, token, this.clock.now()).catch(() => undefined);
    return { ...token, source: "network" };
  }

  private async requestToken(key: TokenCacheKey): Promise<CachedToken> {
    const form = new URLSearchParams({
      grant_type: "client_credentials",
      audience: key.audience,
      client_id: this.credentials.clientId,
      client_secret: this.credentials.clientSecret,
    });
    if (key.scope !== "") form.set("scope", key.scope);
    const sentAtMs = this.clock.now();
    const response = await sendWithRetry(
      {
        method: "POST",
        url: key.oauthUrl,
        headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
        body: form.toString(),
        // A second token request issues a second token and changes nothing else.
        idempotent: true,
      },
      { ...this.http, clock: this.clock },
    ).finally(() => {
      this.requestsSent++;
    });
    const body = parseJsonBody(response) as Record<string, unknown> | undefined;
    if (response.status !== 200) {
      const retryAfter = headerValue(response, "retry-after");
      throw new OAuthClientError({
        status: response.status,
        error: typeof body?.error === "string" ? body.error : "server_error",
        errorDescription:
          typeof body?.error_description === "string"
            ? truncatedText(body.error_description, maxProblemDetailCharacters)
            : tokenEndpointStatusText(response),
        retryAfterSeconds: retryAfter !== undefined && /^\d+$/.test(retryAfter.trim()) ? Number(retryAfter) : undefined,
      });
    }
    const accessToken = body?.access_token;
    if (typeof accessToken !== "string" || accessToken === "") {
      throw new OAuthClientError({
        status: response.status,
        error: "invalid_response",
        errorDescription: "the token endpoint answered 200 without an access_token",
      });
    }
    const expiresIn = body?.expires_in;
    // JSON.parse reads 1e400 as Infinity: such a token would be cached for ever and its expiry is no date.
    if (expiresIn !== undefined && (typeof expiresIn !== "number" || !Number.isFinite(expiresIn) || expiresIn < 0)) {
      throw new OAuthClientError({
        status: response.status,
        error: "invalid_response",
        errorDescription: "the token endpoint answered an expires_in that is not a finite, non-negative number",
      });
    }
    return this.describe(key, accessToken, body ?? {}, sentAtMs);
  }

  /**
   * Works out issue time, expiry and refresh time on this machine's clock: the token's lifetime (the shorter of its
   * claims' `exp - iat` and `expires_in`) counted from when the request was sent. The claims' instants are the
   * issuer's clock, which may differ from this one: read against a clock ten minutes ahead, a token of five minutes
   * looked expired at once and was never reused (each call asked for a new one until the rate limit refused).
   */
  private describe(
    key: TokenCacheKey,
    accessToken: string,
    body: Record<string, unknown>,
    sentAtMs: number,
  ): CachedToken {
    let claims: { iat?: number; exp?: number } = {};
    try {
      claims = decodeJwt(accessToken);
    } catch {
      // Opaque tokens are allowed by OAuth; their lifetime then comes from expires_in alone.
    }
    const lifetimes: number[] = [];
    const exp = Number.isFinite(claims.exp) ? claims.exp : undefined;
    const iat = Number.isFinite(claims.iat) ? claims.iat : undefined;
    if (exp !== undefined && iat !== undefined) lifetimes.push((exp - iat) * 1000);
    // Without iat, exp is still a bound, read against this clock.
    else if (exp !== undefined) lifetimes.push(exp * 1000 - sentAtMs);
    if (typeof body.expires_in === "number") lifetimes.push(body.expires_in * 1000);
    const lifetimeMs =
      lifetimes.length === 0 ? this.refreshMarginMs : Math.max(0, Math.min(maxCachedLifetimeMs, ...lifetimes));
    const issuedAtMs = sentAtMs;
    const expiresAtMs = sentAtMs + lifetimeMs;
    const marginMs = Math.min(this.refreshMarginMs, lifetimeMs * this.refreshFraction);
    return {
      accessToken,
      tokenType: typeof body.token_type === "string" ? body.token_type : "Bearer",
      scope: typeof body.scope === "string" ? body.scope : key.scope,
      audience: key.audience,
      issuedAtMs,
      expiresAtMs,
      refreshAtMs: expiresAtMs - marginMs,
    };
  }
}
