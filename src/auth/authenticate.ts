import type { FastifyBaseLogger, FastifyInstance, FastifyRequest, FastifyTypeProvider } from "fastify";
import { ServiceError } from "../http/errors.js";
import type { Principal, TokenVerifier } from "./verifier.js";
import { TokenVerificationError } from "./verifier.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** Scopes a route accepts: a token holding any one of them may call it. Absent: any valid token may. */
    scopes?: readonly string[];
  }
  interface FastifyRequest {
    /** The authenticated caller; set on every request of a context guarded by `installAuthentication`. */
    principal?: Principal;
  }
}

/** Name of the OpenAPI security scheme of bearer tokens. */
export const bearerSchemeName = "bearerAuth";

/** The OpenAPI `components.securitySchemes` entry for bearer tokens (give it to @fastify/swagger). */
export const bearerSecuritySchemes = {
  [bearerSchemeName]: { type: "http", scheme: "bearer", bearerFormat: "JWT" },
} as const;

/** The OpenAPI `security` requirement of a route that needs a bearer token. */
export const bearerSecurity: { [bearerSchemeName]: string[] }[] = [{ [bearerSchemeName]: [] }];

/** Options of `installAuthentication`. */
export interface AuthenticationOptions {
  /** Verifies tokens for the API of this context (its audience). */
  verifier: TokenVerifier;
  /** Realm named in `WWW-Authenticate` challenges (default "flowplane"). */
  realm?: string;
  /**
   * Called with the principal of every verified token, cached ones included, before the route's scopes are checked:
   * throws `TokenVerificationError` for a token that must no longer be honoured (401 like any invalid token) or a
   * `ServiceError` for a caller this server refuses (its status, typically 403).
   */
  checkPrincipal?: (principal: Principal) => void | Promise<void>;
}

/** A server or encapsulation context of any type provider. */
// biome-ignore lint/suspicious/noExplicitAny: accepts contexts of every server and type-provider generic.
type AnyServer = FastifyInstance<any, any, any, FastifyBaseLogger, FastifyTypeProvider>;

/** Keeps a value inside an RFC 6750 quoted attribute: no quote, no backslash, no control characters. */
function quotable(text: string): string {
  return text.replace(/[^\x20-\x21\x23-\x5B\x5D-\x7E]/g, " ");
}

const bearerPattern = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

/**
 * Guards every route of `server`'s encapsulation context (call it before registering them): a valid bearer token
 * for the verifier's audience is required, and a route declaring `config.scopes` also needs one of those scopes.
 * Missing or invalid token: 401 problem document with a `WWW-Authenticate: Bearer` challenge (RFC 6750; no error
 * code when no token was sent). Missing scope: 403 problem document naming the scopes. Routes registered after
 * the call also get `security: [{ bearerAuth: [] }]` in their OpenAPI description unless they set their own.
 */
export function installAuthentication(server: AnyServer, options: AuthenticationOptions): void {
  const realm = options.realm ?? "flowplane";
  const { verifier } = options;
  if (!server.hasRequestDecorator("principal")) server.decorateRequest("principal", undefined);

  server.addHook("onRoute", (route) => {
    const schema = route.schema ?? {};
    if (!("security" in schema)) route.schema = { ...schema, security: bearerSecurity } as typeof route.schema;
  });

  server.addHook("onRequest", async (request: FastifyRequest) => {
    const authorization = request.headers.authorization;
    const match = authorization === undefined ? null : bearerPattern.exec(authorization);
    if (match?.[1] === undefined) {
      const isBearer = authorization !== undefined && /^bearer(\s|$)/i.test(authorization);
      if (!isBearer) {
        throw new ServiceError("unauthorized", "Send an access token as 'Authorization: Bearer <token>'.", {
          headers: { "www-authenticate": `Bearer realm="${realm}"` },
        });
      }
      throw invalidToken(realm, "The Authorization header does not hold a well-formed bearer token.");
    }
    let principal: Principal;
    try {
      principal = await verifier.verify(match[1]);
    } catch (error) {
      if (error instanceof TokenVerificationError) throw invalidToken(realm, error.message);
      throw new ServiceError("unavailable", "The keys that verify access tokens could not be obtained; retry later.", {
        headers: { "retry-after": "5" },
        cause: error,
      });
    }
    if (options.checkPrincipal !== undefined) {
      try {
        await options.checkPrincipal(principal);
      } catch (error) {
        if (error instanceof TokenVerificationError) throw invalidToken(realm, error.message);
        throw error;
      }
    }
    request.principal = principal;
    const required = request.routeOptions.config?.scopes;
    if (required !== undefined && required.length > 0 && !required.some((scope) => principal.scopes.has(scope))) {
      const list = required.join(" ");
      const detail =
        required.length === 1
          ? `This operation requires the scope '${list}', which the token does not hold.`
          : `This operation requires one of the scopes '${required.join("', '")}'; the token holds none of them.`;
      throw new ServiceError("forbidden", detail, {
        extensions: { requiredScopes: [...required] },
        headers: {
          "www-authenticate": `Bearer realm="${realm}", error="insufficient_scope", error_description="${quotable(detail)}", scope="${quotable(list)}"`,
        },
      });
    }
  });
}

/** The 401 of a token that must be refused, with its RFC 6750 challenge (routes use it for checks of their own). */
export function invalidToken(realm: string, description: string): ServiceError {
  return new ServiceError("unauthorized", description, {
    headers: {
      "www-authenticate": `Bearer realm="${realm}", error="invalid_token", error_description="${quotable(description)}"`,
    },
  });
}

/** The authenticated caller of a request in a guarded context; throws if the context is not guarded (a bug). */
export function principalOf(request: FastifyRequest): Principal {
  const principal = request.principal;
  if (principal === undefined) {
    throw new Error(
      `no principal on ${request.method} ${request.url}: the route's context lacks installAuthentication`,
    );
  }
  return principal;
}
