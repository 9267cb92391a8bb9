import { errors as joseErrors, jwtVerify } from "jose";
import type { Clock } from "./clock.js";
import type { KeySource } from "./key-source.js";

/** Tolerated clock difference with the issuer when none is configured. */
export const defaultClockSkewSeconds = 30;

/** Signature algorithms a token may use: asymmetric only, so neither `none` nor HMAC keyed with a public key. */
export const allowedAlgorithms = ["RS256", "ES256"] as const;

/** Who is calling, as established by a verified access token. */
export interface Principal {
  /** The client the token was issued to (`sub`). */
  clientId: string;
  /** The client's organization (`org`). */
  organizationId: string;
  /** Granted scope values (`scope`). */
  scopes: ReadonlySet<string>;
  /** For cluster API clients: the one cluster they may reach (`cluster`). */
  clusterId?: string;
  /** The token's id (`jti`), when present. */
  tokenId?: string;
  /** When the token expires (`exp`), in epoch milliseconds. */
  expiresAtMs: number;
}

/** A token that must be refused; the message is safe to send as `error_description`. */
export class TokenVerificationError extends Error {
  constructor(description: string, options?: { cause?: unknown }) {
    super(description, options);
    this.name = "TokenVerificationError";
  }
}

/** Options of `TokenVerifier`. */
export interface TokenVerifierOptions {
  keySource: KeySource;
  /** The issuer URL tokens must carry as `iss`. */
  issuer: string;
  /** The audience of the API this verifier guards (`aud` must contain it). */
  audience: string;
  clock: Clock;
  /** Tolerated clock difference with the issuer for `exp`, `nbf` and `iat` (default 30 s). */
  clockSkewSeconds?: number;
  /** Largest number of cached verified tokens (default 10,000); the least recently used is dropped first. */
  cacheMaxEntries?: number;
}

/** Counters that show how the verifier spends its work. */
export interface VerifierStatistics {
  /** Signature verifications performed (cache misses, including failed ones). */
  verifications: number;
  /** Requests answered from the cache of verified tokens. */
  cacheHits: number;
}

interface CachedPrincipal {
  principal: Principal;
  expiresAtMs: number;
  /**
   * The earliest time it is accepted (its `iat`, less the skew): a clock that stepped back since it was cached then
   * refuses it as it refuses the same token uncached, rather than accepting only the tokens used before the step.
   */
  validFromMs: number;
}

/** Explains a jose failure in words a client can act on (never echoing token contents). */
function describeFailure(error: unknown): string | undefined {
  if (error instanceof joseErrors.JWTExpired) return "The access token has expired.";
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    switch (error.claim) {
      case "nbf":
        return "The access token is not valid yet.";
      case "iss":
        return "The access token was issued by another issuer.";
      case "aud":
        return "The access token is not meant for this API (audience).";
      default:
        return `The access token's '${error.claim}' claim is invalid.`;
    }
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return "The access token's signature algorithm is not allowed.";
  if (error instanceof joseErrors.JWKSNoMatchingKey) return "The access token was signed with an unknown key.";
  if (error instanceof joseErrors.JWKSMultipleMatchingKeys) return "The access token's key is ambiguous.";
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return "The access token's signature is invalid.";
  if (error instanceof joseErrors.JOSENotSupported) return "The access token uses an unsupported algorithm.";
  if (error instanceof joseErrors.JWSInvalid || error instanceof joseErrors.JWTInvalid) {
    return "The access token is malformed.";
  }
  return undefined;
}

/**
 * Verifies access tokens for one API: signature with a key from the key source, algorithm allowlist, issuer,
 * audience, expiry and not-before (with clock skew), and the claims flowplane needs. Verified tokens are cached
 * until they expire, keyed by the token text, so each request after the first costs one map lookup.
 */
export class TokenVerifier {
  /** How the verifier spent its work so far. */
  readonly statistics: VerifierStatistics = { verifications: 0, cacheHits: 0 };
  private readonly options: TokenVerifierOptions;
  private readonly clockSkewSeconds: number;
  private readonly cacheMaxEntries: number;
  private readonly cache = new Map<string, CachedPrincipal>();

  constructor(options: TokenVerifierOptions) {
    this.options = options;
    this.clockSkewSeconds = options.clockSkewSeconds ?? defaultClockSkewSeconds;
    this.cacheMaxEntries = options.cacheMaxEntries ?? 10_000;
  }

  /** The audience this verifier requires. */
  get audience(): string {
    return this.options.audience;
  }

  /**
   * The principal of a valid token. Throws `TokenVerificationError` for a token that must be refused; any other
   * error (e.g. the key set could not be fetched) is not the token's fault and propagates unchanged.
   */
  async verify(token: string): Promise<Principal> {
    const now = this.options.clock();
    const cached = this.cache.get(token);
    if (cached !== undefined) {
      this.cache.delete(token);
      if (cached.expiresAtMs > now && cached.validFromMs <= now) {
        // Re-inserting moves the entry to the end of the map's order: eviction takes the least recently used.
        this.cache.set(token, cached);
        this.statistics.cacheHits += 1;
        return cached.principal;
      }
    }
    this.statistics.verifications += 1;
    const { principal, issuedAtMs } = await this.verifyUncached(token, now);
    if (principal.expiresAtMs > now) {
      const validFromMs = issuedAtMs - this.clockSkewSeconds * 1000;
      this.cache.set(token, { principal, expiresAtMs: principal.expiresAtMs, validFromMs });
      while (this.cache.size > this.cacheMaxEntries) {
        const oldest = this.cache.keys().next().value;
        if (oldest === undefined) break;
        this.cache.delete(oldest);
      }
    }
    return principal;
  }

  private async verifyUncached(token: string, now: number): Promise<{ principal: Principal; issuedAtMs: number }> {
    let payload: Awaited<ReturnType<typeof jwtVerify>>["payload"];
    try {
      ({ payload } = await jwtVerify(token, this.options.keySource, {
        algorithms: [...allowedAlgorithms],
        issuer: this.options.issuer,
        audience: this.options.audience,
        clockTolerance: this.clockSkewSeconds,
        currentDate: new Date(now),
        requiredClaims: ["sub", "exp", "iat"],
      }));
    } catch (error) {
      const description = describeFailure(error);
      if (description === undefined) throw error;
      throw new TokenVerificationError(description, { cause: error });
    }
    // Base64url's last character may carry bits that decoding ignores, so one signature has several spellings, each
    // of which the library accepts: a list of refused tokens, or anything else keyed by the token's text, could be
    // passed by another spelling. Of a signature the library found valid, only the spelling its bytes encode to is
    // accepted.
    const signature = token.slice(token.lastIndexOf(".") + 1);
    if (Buffer.from(signature, "base64url").toString("base64url") !== signature) {
      throw new TokenVerificationError("The access token's signature is not in canonical base64url.");
    }
    // jose only judges `iat` against a maximum age; a token issued in the future is refused here.
    if (typeof payload.iat !== "number" || payload.iat * 1000 > now + this.clockSkewSeconds * 1000) {
      throw new TokenVerificationError("The access token is not valid yet (issued in the future).");
    }
    const { sub, org, scope, cluster, jti, exp } = payload as Record<string, unknown>;
    if (typeof sub !== "string" || sub === "") throw new TokenVerificationError("The access token lacks 'sub'.");
    if (typeof org !== "string" || org === "") throw new TokenVerificationError("The access token lacks 'org'.");
    if (scope !== undefined && typeof scope !== "string") {
      throw new TokenVerificationError("The access token's 'scope' claim is not a string.");
    }
    if (cluster !== undefined && typeof cluster !== "string") {
      throw new TokenVerificationError("The access token's 'cluster' claim is not a string.");
    }
    if (typeof exp !== "number") throw new TokenVerificationError("The access token lacks 'exp'.");
    const principal: Principal = {
      clientId: sub,
      organizationId: org,
      scopes: new Set((scope ?? "").split(" ").filter((value) => value !== "")),
      ...(cluster === undefined ? {} : { clusterId: cluster }),
      ...(typeof jti === "string" ? { tokenId: jti } : {}),
      expiresAtMs: exp * 1000,
    };
    return { principal, issuedAtMs: payload.iat * 1000 };
  }
}
