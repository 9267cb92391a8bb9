import { randomUUID } from "node:crypto";
import type { Clock } from "../../auth/clock.js";
import { type AudienceNames, audiencesForScopes } from "../../auth/scopes.js";
import { OAuthError } from "../../http/errors.js";
import { quotedValue } from "../../http/quoted-value.js";
import { type ClientService, isWellFormedClientId } from "./clients.js";
import type { TokenRateLimiter } from "./rate-limit.js";
import type { SigningKeyService } from "./signing-keys.js";

/** Realm named in `WWW-Authenticate` challenges. */
export const authenticationRealm = "flowplane";

/** The only grant the issuer supports. */
export const clientCredentialsGrant = "client_credentials";

/** A token request after parsing: body fields and HTTP Basic credentials, each checked for shape only. */
export interface TokenRequestParameters {
  grantType: string;
  audience: string;
  /** The `scope` parameter, when present and not blank. */
  scope: string | undefined;
  clientId: string;
  clientSecret: string;
  /** Whether the credentials came as HTTP Basic (the failure then carries a Basic challenge). */
  usedBasic: boolean;
}

/** The successful token response of the contract. */
export interface TokenResponse {
  access_token: string;
  expires_in: number;
  refresh_expires_in: 0;
  token_type: "Bearer";
  "not-before-policy": 0;
  scope: string;
}

const bodyFields = ["grant_type", "audience", "scope", "client_id", "client_secret"] as const;

/**
 * Decodes one half of a Basic credential. RFC 6749 §2.3.1 has the client form-urlencode its id and secret before
 * the Basic encoding, so `+` is a space and `%xx` an escaped byte.
 */
function formDecode(value: string): string {
  try {
    return decodeURIComponent(value.replace(/\+/g, " "));
  } catch {
    throw new OAuthError("invalid_request", "The Basic credentials are not correctly form-urlencoded.");
  }
}

/** Reads HTTP Basic client credentials from an `Authorization` header, if one is present. */
function parseBasic(authorization: string | undefined): { clientId: string; clientSecret: string } | undefined {
  if (authorization === undefined) return undefined;
  const match = /^basic +([A-Za-z0-9+/=_-]+) *$/i.exec(authorization);
  if (match?.[1] === undefined) {
    throw new OAuthError(
      "invalid_request",
      "Send client credentials as 'Authorization: Basic base64(client_id:client_secret)' or in the body.",
    );
  }
  const decoded = Buffer.from(match[1], "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon < 0) throw new OAuthError("invalid_request", "The Basic credentials lack the ':' separator.");
  return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) };
}

/**
 * Checks the shape of a token request: every field at most once, as text, credentials in exactly one place,
 * the required fields present. The values are judged later by `TokenService.issue`.
 */
export function parseTokenRequest(body: unknown, authorization: string | undefined): TokenRequestParameters {
  const fields = new Map<string, string>();
  if (body !== undefined && body !== null) {
    if (typeof body !== "object" || Array.isArray(body)) {
      throw new OAuthError("invalid_request", "The body must be a form or a JSON object of token request fields.");
    }
    const record = body as Record<string, unknown>;
    for (const name of bodyFields) {
      const value = record[name];
      if (value === undefined) continue;
      if (Array.isArray(value)) throw new OAuthError("invalid_request", `The field ${name} is repeated.`);
      if (typeof value !== "string") throw new OAuthError("invalid_request", `The field ${name} must be a string.`);
      fields.set(name, value);
    }
  }
  const basic = parseBasic(authorization);
  // Some client libraries name the client in the body beside its Basic credentials (RFC 6749 §3.2.1 lets a client
  // identify itself so): that is one method of authentication, not two, as long as the ids agree.
  const namesBasicClient = basic !== undefined && fields.get("client_id") === basic.clientId;
  if (basic !== undefined && ((fields.has("client_id") && !namesBasicClient) || fields.has("client_secret"))) {
    throw new OAuthError(
      "invalid_request",
      "Client credentials came both as HTTP Basic and in the body; use exactly one method.",
    );
  }
  const clientId = basic?.clientId ?? fields.get("client_id");
  const clientSecret = basic?.clientSecret ?? fields.get("client_secret");
  const grantType = fields.get("grant_type");
  const audience = fields.get("audience");
  const missing = [
    grantType === undefined || grantType === "" ? "grant_type" : undefined,
    audience === undefined || audience === "" ? "audience" : undefined,
    clientId === undefined || clientId === "" ? "client_id" : undefined,
    clientSecret === undefined || clientSecret === "" ? "client_secret" : undefined,
  ].filter((name) => name !== undefined);
  if (missing.length > 0 || grantType === undefined || audience === undefined) {
    throw new OAuthError("invalid_request", `Missing required field: ${missing.join(", ")}.`);
  }
  const scope = fields.get("scope");
  return {
    grantType,
    audience,
    scope: scope === undefined || scope.trim() === "" ? undefined : scope,
    clientId: clientId ?? "",
    clientSecret: clientSecret ?? "",
    usedBasic: basic !== undefined,
  };
}

/** Options of `TokenService`. */
export interface TokenServiceOptions {
  clients: ClientService;
  signingKeys: SigningKeyService;
  rateLimiter: TokenRateLimiter;
  clock: Clock;
  /** The issuer URL (`iss`), without a trailing slash. */
  issuerUrl: string;
  audiences: AudienceNames;
  tokenLifetimeSeconds: number;
}

/** Issues access tokens for the client-credentials grant, enforcing the per-address and per-client limits. */
export class TokenService {
  private readonly options: TokenServiceOptions;
  private readonly knownAudiences: ReadonlySet<string>;

  constructor(options: TokenServiceOptions) {
    this.options = options;
    this.knownAudiences = new Set([options.audiences.admin, options.audiences.modeler, options.audiences.gateway]);
  }

  /** The issuer URL tokens carry as `iss`. */
  get issuerUrl(): string {
    return this.options.issuerUrl;
  }

  /**
   * Counts one request from `address` (see `requestAddress`; undefined: not known); throws `slow_down` (429 +
   * Retry-After) past the limit or while blocked.
   */
  async limitAddress(address: string | undefined): Promise<void> {
    const decision = await this.options.rateLimiter.consumeAddress(address);
    if (!decision.allowed) {
      throw new OAuthError("slow_down", "Too many token requests from this address; retry later.", {
        "retry-after": String(decision.retryAfterSeconds),
      });
    }
  }

  /**
   * Authenticates the client and answers a signed token, or throws the RFC 6749 error that explains why not.
   * `address` is the request's source address (see `requestAddress`), which failed authentications are counted
   * against.
   */
  async issue(request: TokenRequestParameters, address: string | undefined): Promise<TokenResponse> {
    if (request.grantType !== clientCredentialsGrant) {
      throw new OAuthError("unsupported_grant_type", `Only the ${clientCredentialsGrant} grant is supported.`);
    }
    const { clients, rateLimiter, clock } = this.options;
    // Built only when needed: capturing an error's stack trace is not free on the hot path.
    const invalidClient = () =>
      new OAuthError(
        "invalid_client",
        "Client authentication failed.",
        request.usedBasic ? { "www-authenticate": `Basic realm="${authenticationRealm}"` } : {},
      );
    // An id no client can have is refused without touching the database (its shape is public knowledge), so
    // junk ids cannot fill the failure table.
    if (!isWellFormedClientId(request.clientId)) throw invalidClient();
    // Only failures from this address delay the request: anyone may send wrong secrets for a client id they know,
    // and that must not refuse the client's own requests from elsewhere.
    const delay = await rateLimiter.clientDelay(request.clientId, address);
    if (!delay.allowed) {
      throw new OAuthError(
        "slow_down",
        "Too many failed authentications for this client from this address; retry later.",
        {
          "retry-after": String(delay.retryAfterSeconds),
        },
      );
    }
    const client = await clients.authenticate(request.clientId, request.clientSecret);
    if (client === undefined) {
      await rateLimiter.recordFailure(request.clientId, address);
      throw invalidClient();
    }
    if (delay.consecutiveFailures > 0) await rateLimiter.recordSuccess(request.clientId, address);

    if (!this.knownAudiences.has(request.audience)) {
      throw new OAuthError(
        "invalid_target",
        `The audience ${quotedValue(request.audience)} is not served by this issuer.`,
      );
    }
    // A cluster API client reaches its cluster's gateway and nothing else: its `secrets` permission must never turn
    // into the organization-wide `secrets` scope of the Administration API.
    const cluster = client.cluster;
    const allowedAudiences =
      cluster === undefined
        ? audiencesForScopes(client.scopes, this.options.audiences)
        : new Set([this.options.audiences.gateway]);
    if (!allowedAudiences.has(request.audience)) {
      throw new OAuthError(
        "invalid_target",
        `This client may not request tokens for ${quotedValue(request.audience)}.`,
      );
    }
    const granted = this.grantedScopes(cluster === undefined ? client.scopes : cluster.permissions, request.scope);

    const issuedAtSeconds = Math.floor(clock() / 1000);
    const lifetimeSeconds = this.options.tokenLifetimeSeconds;
    const scope = granted.join(" ");
    const accessToken = await this.options.signingKeys.sign({
      iss: this.options.issuerUrl,
      sub: client.clientId,
      azp: client.clientId,
      aud: request.audience,
      iat: issuedAtSeconds,
      exp: issuedAtSeconds + lifetimeSeconds,
      jti: randomUUID(),
      scope,
      org: client.organizationId,
      ...(cluster === undefined ? {} : { cluster: cluster.clusterId, permissions: granted }),
    });
    return {
      access_token: accessToken,
      expires_in: lifetimeSeconds,
      refresh_expires_in: 0,
      token_type: "Bearer",
      "not-before-policy": 0,
      scope,
    };
  }

  /**
   * The client's scope values (`held`, in canonical order), narrowed to `requested` when given; asking for a scope
   * not held is `invalid_scope`.
   */
  private grantedScopes(held: readonly string[], requested: string | undefined): string[] {
    if (requested === undefined) return [...held];
    const asked = new Set(requested.split(/[ ]+/).filter((value) => value !== ""));
    const heldSet = new Set(held);
    const refused = [...asked].filter((value) => !heldSet.has(value));
    if (refused.length > 0) {
      throw new OAuthError("invalid_scope", `The client does not hold the scope ${quotedValue(refused.join(" "))}.`);
    }
    return held.filter((value) => asked.has(value));
  }
}
